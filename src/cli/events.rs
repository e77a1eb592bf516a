//! `moat events [--stats] [--interval 5s] <id>`: the container's resource usage as runc's
//! event JSON, one object per line: once with `--stats`, else every interval until the
//! container stops, with an `oom` event whenever the kernel OOM-kills in its cgroup.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use super::{Global, Result};
use crate::linux::cgroups::stats::{self, Stats};
use crate::linux::cgroups::Cgroup;
use crate::state::{ContainerDir, Record, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Set the stats collection interval
    #[arg(long, default_value = "5s")]
    pub interval: String,
    /// Display the container's stats then exit
    #[arg(long)]
    pub stats: bool,
    pub id: String,
}

/// runc's `types.Event`.
#[derive(Serialize)]
struct Event<'a> {
    #[serde(rename = "type")]
    typ: &'static str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Stats>,
}

/// How often the OOM counter and the init are looked at between two stats events.
const POLL: Duration = Duration::from_millis(100);

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let interval = parse_duration(&a.interval)
        .with_context(|| format!("invalid --interval {:?}", a.interval))?;
    // Not locked: a stream may run for hours and must not hold up delete.
    let dir = ContainerDir::open_read(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::events(&g.context()?, &rec, gv, a.stats, interval);
    }
    if rec.status(&dir) == Status::Stopped {
        bail!("container with id {} is not running", a.id);
    }
    let Some(cg) = rec.cgroup.clone() else {
        bail!("container {} has no cgroup to read stats from", a.id);
    };
    let mut out = std::io::stdout().lock();
    if a.stats {
        emit_stats(&mut out, &rec, &cg)?;
        return Ok(0);
    }
    let mut ooms = cg.oom_kills().unwrap_or(0);
    loop {
        if !rec.alive() {
            return Ok(0);
        }
        match emit_stats(&mut out, &rec, &cg) {
            Ok(()) => {}
            // The container went away while being read.
            Err(_) if !rec.alive() => return Ok(0),
            Err(e) => return Err(e),
        }
        let next = Instant::now() + interval;
        while Instant::now() < next {
            std::thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
            if let Some(n) = cg.oom_kills() {
                if n > ooms {
                    ooms = n;
                    emit(&mut out, "oom", &rec.id, None)?;
                }
            }
            if !rec.alive() {
                return Ok(0);
            }
        }
    }
}

fn emit_stats(out: &mut impl Write, rec: &Record, cg: &Cgroup) -> Result<()> {
    let mut s = cg.stats()?;
    s.network_interfaces = stats::network_interfaces(rec.pid);
    emit(out, "stats", &rec.id, Some(&s))
}

fn emit(out: &mut impl Write, typ: &'static str, id: &str, data: Option<&Stats>) -> Result<()> {
    let ev = Event { typ, id, data };
    writeln!(out, "{}", serde_json::to_string(&ev)?)?;
    out.flush()?;
    Ok(())
}

/// A Go duration, as runc's `--interval` takes: `5s`, `1m30s`, `500ms`, `1.5h`.
pub fn parse_duration(s: &str) -> Result<Duration> {
    let mut rest = s.trim();
    if rest.is_empty() {
        bail!("empty duration");
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .ok()
            .filter(|_| !num.is_empty())
            .with_context(|| format!("expected a number at {rest:?}"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let secs = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => bail!("missing unit in duration {s:?}"),
            u => bail!("unknown unit {u:?} in duration {s:?}"),
        };
        total += value * secs;
        rest = tail;
    }
    if total <= 0.0 {
        bail!("duration interval must be greater than 0");
    }
    Duration::try_from_secs_f64(total).context("duration out of range")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        let d = |s: &str| parse_duration(s).unwrap();
        assert_eq!(d("5s"), Duration::from_secs(5));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("1m30s"), Duration::from_secs(90));
        assert_eq!(d("1.5h"), Duration::from_secs(5400));
        assert_eq!(d("250us"), Duration::from_micros(250));
        for bad in ["", "5", "s", "0s", "5x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn event_json() {
        let s = Stats::default();
        let ev = Event {
            typ: "stats",
            id: "c1",
            data: Some(&s),
        };
        let v: serde_json::Value = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["type"], "stats");
        assert_eq!(v["id"], "c1");
        assert!(v["data"]["memory"]["usage"].is_object());
        let oom = Event {
            typ: "oom",
            id: "c1",
            data: None,
        };
        assert_eq!(
            serde_json::to_string(&oom).unwrap(),
            r#"{"type":"oom","id":"c1"}"#
        );
    }
}
