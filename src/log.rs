//! The `--log` / `--log-format` contract: containerd reads the last `level=error` JSON
//! object of the log file, podman reads the whole file as one object after a failed call,
//! so every failing call writes exactly one error line, and the same message goes to stderr.
//! `--debug` adds `level=debug` lines: to the log file, or to stderr when no `--log` is
//! given (runc's log is stderr then, and its tests grep it); without `--debug` stderr
//! only ever carries moat's error and warning lines, which clients read.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// `--debug` without `--log`: debug lines go to stderr.
    debug_to_stderr: bool,
}

static SINK: Mutex<Sink> = Mutex::new(Sink {
    file: None,
    format: Format::Text,
    debug_to_stderr: false,
});

/// `--debug`, read without the lock: a debug line costs nothing when it is off.
static DEBUG: AtomicBool = AtomicBool::new(false);

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
    s.debug_to_stderr = debug && file.is_none();
    s.file = file;
    s.format = format;
    DEBUG.store(debug, Ordering::Relaxed);
    Ok(())
}

/// Closes the `--log` file in a process about to enter a container, where a process with
/// CAP_SYS_PTRACE over it could reopen the file through `/proc/<pid>/fd`. What it still
/// reports goes to the parent, which logs it. Its stderr may become the container's: no
/// debug line goes there either.
pub fn close_file() {
    let mut s = SINK.lock().unwrap_or_else(|e| e.into_inner());
    s.file = None;
    s.debug_to_stderr = false;
    DEBUG.store(false, Ordering::Relaxed);
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

fn line(format: Format, level: &str, msg: &str) -> String {
    match format {
        Format::Json => {
            let obj = serde_json::json!({"level": level, "msg": msg, "time": now_rfc3339(false)});
            format!("{obj}\n")
        }
        Format::Text => format!(
            "time=\"{}\" level={} msg={:?}\n",
            now_rfc3339(false),
            level,
            msg
        ),
    }
}

fn write(level: &str, msg: &str) {
    let mut s = SINK.lock().unwrap_or_else(|e| e.into_inner());
    let format = s.format;
    if let Some(f) = s.file.as_mut() {
        let _ = f.write_all(line(format, level, msg).as_bytes());
    } else if level == "debug" && s.debug_to_stderr {
        // One write: a line is not interleaved with another process's.
        let _ = std::io::stderr().write_all(line(format, level, msg).as_bytes());
    }
}

/// A failure: one line on stderr, one object in the log.
/// Writes moat's output to stdout (the `println!` of `src/lib.rs`); a stdout that fails
/// ends the call: `write stdout: <why>` on stderr, status 1.
#[cfg_attr(test, allow(dead_code))] // unit tests keep std's println!
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        error(&format!("write stdout: {e}"));
        std::process::exit(1);
    }
}

pub fn error(msg: &str) {
    write("error", msg);
    eprintln!("moat: {msg}");
}

/// A failure the container's program reports, as runc's init does: the bare message on
/// stderr (the container's own, after `start`), one error object in the log.
pub fn error_bare(msg: &str) {
    write("error", msg);
    eprintln!("{msg}");
}

/// A warning: something was accepted but not (fully) honoured.
pub fn warn(msg: &str) {
    write("warning", msg);
    eprintln!("moat: warning: {msg}");
}

/// A warning for the `--log` file alone (nothing on stderr): a field accepted and ignored
/// as runc ignores it, which a conformance suite must not see in the process's output.
pub fn warn_log(msg: &str) {
    write("warning", msg);
}

/// The policy's summary of a container (`policy::Decision::report`, `update`): in the
/// `--log` file at level warning; on stderr without `--log` (and not under conmon) or when
/// the config asks (`stderr`). At create (`container_stderr`: moat's stderr is the
/// container's) only when that stderr is a terminal, a person reading it: a script's or a
/// conformance suite's stderr then holds what runc's would.
pub fn warn_policy(msg: &str, stderr: bool, container_stderr: bool) {
    use std::io::IsTerminal;
    let has_file = {
        let s = SINK.lock().unwrap_or_else(|e| e.into_inner());
        s.file.is_some()
    };
    write("warning", msg);
    let person = !container_stderr || std::io::stderr().is_terminal();
    if stderr || (!has_file && person && !parent_is_conmon()) {
        eprintln!("moat: warning: {msg}");
    }
}

/// Whether moat was called by conmon, podman's (and CRI-O's) container monitor, which passes
/// no `--log` to `create` (podman 4.3): moat's stderr is then the container's, and the line
/// would land in every `podman logs`. Read only when there is a line to place.
fn parent_is_conmon() -> bool {
    let ppid = std::os::unix::process::parent_id();
    crate::linux::read_kernel_file(format!("/proc/{ppid}/comm"))
        .is_ok_and(|c| c.trim_ascii_end() == "conmon")
}

pub fn debug(msg: &str) {
    if DEBUG.load(Ordering::Relaxed) {
        write("debug", msg);
    }
}

/// A debug line made only when `--debug` is on (no formatting on the plain path).
pub fn debug_with(msg: impl FnOnce() -> String) {
    if DEBUG.load(Ordering::Relaxed) {
        write("debug", &msg());
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
