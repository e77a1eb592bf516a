//! The `--log` / `--log-format` contract: containerd reads the last `level=error` JSON
//! object of the log file, podman reads the whole file as one object after a failed call,
//! so every failing call writes exactly one error line, and the same message goes to stderr.

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Format {
    #[default]
    Text,
    Json,
}

struct Sink {
    file: Option<File>,
    format: Format,
    debug: bool,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    file: None,
    format: Format::Text,
    debug: false,
});

/// Opens the `--log` file (always created when given, even if nothing is logged: clients
/// open it after a failure and report a missing file as a second error).
pub fn init(path: Option<&std::path::Path>, format: Format, debug: bool) -> std::io::Result<()> {
    let file = match path {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)?,
        ),
        None => None,
    };
    let mut s = SINK.lock().unwrap_or_else(|e| e.into_inner());
    s.file = file;
    s.format = format;
    s.debug = debug;
    Ok(())
}

/// Closes the `--log` file in a process about to enter a container, where a process with
/// CAP_SYS_PTRACE over it could reopen the file through `/proc/<pid>/fd`. What it still
/// reports goes to the parent, which logs it.
pub fn close_file() {
    SINK.lock().unwrap_or_else(|e| e.into_inner()).file = None;
}

/// Seconds since the epoch rendered as RFC 3339 UTC, without a time crate.
pub fn rfc3339(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86400);
    let rem = secs.rem_euclid(86400);
    let (h, m, s) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if mo <= 2 { y + 1 } else { y };
    if nanos == 0 {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{m:02}:{s:02}.{nanos:09}Z")
    }
}

pub fn now_rfc3339(with_nanos: bool) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(
        i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
        if with_nanos { now.subsec_nanos() } else { 0 },
    )
}

fn write(level: &str, msg: &str) {
    let mut s = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let format = s.format;
    if let Some(f) = s.file.as_mut() {
        let line = match format {
            Format::Json => {
                let obj =
                    serde_json::json!({"level": level, "msg": msg, "time": now_rfc3339(false)});
                format!("{obj}\n")
            }
            Format::Text => format!(
                "time=\"{}\" level={} msg={:?}\n",
                now_rfc3339(false),
                level,
                msg
            ),
        };
        let _ = f.write_all(line.as_bytes());
    }
}

/// A failure: one line on stderr, one object in the log.
pub fn error(msg: &str) {
    write("error", msg);
    eprintln!("moat: {msg}");
}

/// A warning: something was accepted but not (fully) honoured.
pub fn warn(msg: &str) {
    write("warning", msg);
    eprintln!("moat: warning: {msg}");
}

pub fn debug(msg: &str) {
    let enabled = SINK.lock().map(|s| s.debug).unwrap_or(false);
    if enabled {
        write("debug", msg);
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_epoch_and_leap_day() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400, 0), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_000_000, 5), "2026-11-18T11:06:40.000000005Z");
    }
}
