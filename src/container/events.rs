//! `events [--stats] [--interval 5s] <id>`: the container's resource usage as runc's
//! event JSON, one object per line: once with `--stats`, else every interval until the
//! container stops, with an `oom` event whenever the kernel OOM-kills in its cgroup (as
//! runc), and moat's own `pids.max`, `memory.high`, `memory.max` events when a limit was
//! hit since the last look (every 100 ms), each with the kernel's count.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

use super::{Container, Context, Error, Result};
use crate::linux::cgroups::stats::{self, Stats};
use crate::linux::cgroups::Cgroup;
use crate::state::{Record, Status};

/// runc's `events` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// Between two stats events (`--interval`, parsed by [`parse_duration`]).
    pub interval: Duration,
    /// Print the stats once, then exit.
    pub stats: bool,
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

pub fn events(ctx: &Context, req: &Request) -> Result<i32> {
    // Not locked: a stream may run for hours and must not hold up delete.
    let c = Container::open_read(ctx, &req.id)?;
    c.engine().events(ctx, &c, req)
}

pub fn native(c: &Container, req: &Request) -> Result<()> {
    let rec = &c.record;
    if rec.status(&c.dir) == Status::Stopped {
        return Err(Error::EventsNotRunning { id: req.id.clone() }.into());
    }
    let Some(cg) = rec.cgroup.clone() else {
        return Err(Error::EventsNoCgroup { id: req.id.clone() }.into());
    };
    let interval = req.interval;
    let capped = capped_filesystems(c);
    let capped = &capped;
    let fwd = crate::linux::egress::forwarder::Recorded::load(&c.dir.file(""));
    let mut out = std::io::stdout().lock();
    if req.stats {
        emit_stats(&mut out, rec, &cg, capped, fwd.as_ref(), true)?;
        return Ok(());
    }
    let mut ooms = cg.oom_kills().unwrap_or(0);
    let mut hits = cg.limit_hits();
    // The egress names' DNS forwarder: reported once when it is gone while the init runs.
    let mut dns = fwd.clone();
    loop {
        if !rec.alive() {
            return Ok(());
        }
        match emit_stats(&mut out, rec, &cg, capped, fwd.as_ref(), false) {
            Ok(()) => {}
            // The container went away while being read.
            Err(_) if !rec.alive() => return Ok(()),
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
            // moat's own: a limit hit since the last look, with the kernel's count.
            let now = cg.limit_hits();
            for (typ, n) in &now {
                if hits.get(typ).is_some_and(|before| n > before) {
                    emit_hit(&mut out, typ, &rec.id, *n)?;
                }
            }
            hits = now;
            if dns.as_ref().is_some_and(|d| !d.alive()) && rec.alive() {
                let d = dns.take().expect("checked");
                emit_error(&mut out, &rec.id, &forwarder_gone(&d))?;
            }
            if !rec.alive() {
                return Ok(());
            }
        }
    }
}

/// The container's filesystems moat capped, from its decision (`policy.json`): `/` of an
/// ephemeral root, and each tmpfs the policy added (`/tmp`, the workspace).
fn capped_filesystems(c: &Container) -> Vec<String> {
    let Some(v) = c
        .dir
        .read_file(crate::state::POLICY_FILE)
        .ok()
        .flatten()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if v["bounded_root"].is_object() {
        out.push("/".to_string());
    }
    for ch in v["changes"].as_array().into_iter().flatten() {
        if ch["field"] == "mounts" && ch["action"] == "added" {
            if let Some(dest) = ch["detail"]
                .as_str()
                .and_then(|d| d.strip_prefix("tmpfs "))
                .and_then(|d| d.split(' ').next())
            {
                out.push(dest.to_string());
            }
        }
    }
    out
}

/// Bytes and inodes of `dest` in the container, looked up below its root without
/// following a symlink (the container owns every name on the way).
fn fs_use(pid: i32, dest: &str) -> Option<stats::FsUse> {
    use crate::linux::{path, sys};
    let root = std::ffi::CString::new(format!("/proc/{pid}/root")).ok()?;
    let root = sys::openat(path::cwd(), &root, libc::O_PATH | libc::O_DIRECTORY, 0).ok()?;
    let comps = path::components(dest);
    let st = if comps.is_empty() {
        sys::fstatvfs(std::os::fd::AsFd::as_fd(&root))
    } else {
        let fd = path::open_beneath(
            std::os::fd::AsFd::as_fd(&root),
            &comps,
            libc::O_PATH | libc::O_DIRECTORY,
            false,
        )
        .ok()?;
        sys::fstatvfs(std::os::fd::AsFd::as_fd(&fd))
    };
    st.ok().map(|st| stats::fs_use(&st))
}

/// One `stats` event. `snapshot` (`--stats`) keeps the memory event counters; the stream
/// leaves them out, since it reports each hit as an event of its own, and runc's consumers
/// (its own `events oom` test among them) take any "oom" in the stream for the OOM event.
fn emit_stats(
    out: &mut impl Write,
    rec: &Record,
    cg: &Cgroup,
    capped: &[String],
    fwd: Option<&crate::linux::egress::forwarder::Recorded>,
    snapshot: bool,
) -> Result<()> {
    let mut s = cg.stats()?;
    if !snapshot {
        s.moat.memory_events.clear();
    }
    s.network_interfaces = stats::network_interfaces(rec.pid);
    s.moat.dns_forwarder = fwd.map(|d| if d.alive() { "running" } else { "exited" });
    s.moat.dns_forwarder_limits = fwd.and_then(|d| d.limits);
    for dest in capped {
        if let Some(u) = fs_use(rec.pid, dest) {
            s.moat.filesystems.insert(dest.clone(), u);
        }
    }
    s.moat.egress = egress_counters(cg);
    emit(out, "stats", &rec.id, Some(&s))
}

/// What `events` says of a DNS forwarder that is gone.
fn forwarder_gone(d: &crate::linux::egress::forwarder::Recorded) -> String {
    format!(
        "moat: the DNS forwarder of the egress names (pid {}, {}) exited: the container's \
         name lookups now fail (closed: nothing else answers them)",
        d.pid, d.addr
    )
}

/// runc's error event shape: `{"type":"error","id":…,"data":{"message":…}}`.
fn emit_error(out: &mut impl Write, id: &str, message: &str) -> Result<()> {
    let ev = serde_json::json!({"type": "error", "id": id, "data": {"message": message}});
    writeln!(out, "{ev}").context("write to standard output")?;
    out.flush().context("write to standard output")?;
    Ok(())
}

/// The egress programs' counters on the container's cgroup, if it has them.
pub(crate) fn egress_counters(cg: &Cgroup) -> Option<stats::EgressCounters> {
    use crate::linux::egress::{
        Installed, STATS_HELD_ADDRS, STATS_HELD_NAMES, STATS_REFUSED_ECHO, STATS_REFUSED_FULL,
        STATS_REFUSED_NAMES, STATS_REFUSED_REBIND,
    };
    let inst = Installed::find(&cg.v2_dir()?).ok()??;
    let n = inst.counters().ok()??;
    Some(stats::EgressCounters {
        connect4_refused: n[0],
        connect6_refused: n[1],
        sendmsg4_refused: n[2],
        sendmsg6_refused: n[3],
        names_refused: n[STATS_REFUSED_NAMES as usize],
        icmp_echo_refused: n[STATS_REFUSED_ECHO as usize],
        rebinding_refused: n[STATS_REFUSED_REBIND as usize],
        forwarder_full_refused: n[STATS_REFUSED_FULL as usize],
        forwarder_names_held: n[STATS_HELD_NAMES as usize],
        forwarder_addresses_held: n[STATS_HELD_ADDRS as usize],
    })
}

fn emit(out: &mut impl Write, typ: &'static str, id: &str, data: Option<&Stats>) -> Result<()> {
    let ev = Event { typ, id, data };
    writeln!(out, "{}", serde_json::to_string(&ev)?).context("write to standard output")?;
    out.flush().context("write to standard output")?;
    Ok(())
}

/// A limit hit: `{"type":"pids.max","id":ID,"data":{"hits":N}}`, N the kernel's count.
fn emit_hit(out: &mut impl Write, typ: &'static str, id: &str, hits: u64) -> Result<()> {
    #[derive(Serialize)]
    struct Hits {
        hits: u64,
    }
    #[derive(Serialize)]
    struct Hit<'a> {
        #[serde(rename = "type")]
        typ: &'static str,
        id: &'a str,
        data: Hits,
    }
    let ev = Hit {
        typ,
        id,
        data: Hits { hits },
    };
    writeln!(out, "{}", serde_json::to_string(&ev)?).context("write to standard output")?;
    out.flush().context("write to standard output")?;
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
