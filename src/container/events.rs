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
    let mut refused = std::collections::HashMap::new();
    loop {
        if !rec.alive() {
            return Ok(());
        }
        emit_refusals(&mut out, &cg, &rec.id, &mut refused)?;
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
    let Some(d) = c.dir.load_decision().ok().flatten() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if d.bounded_root.is_some() {
        out.push("/".to_string());
    }
    for ch in &d.changes {
        if ch.field == "mounts" && ch.action == "added" {
            if let Some(dest) = ch
                .detail
                .strip_prefix("tmpfs ")
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
    s.moat.dns_forwarder_cgroup = fwd
        .and_then(|d| d.cgroup.as_deref())
        .and_then(crate::linux::egress::forwarder::CgroupUse::read);
    for dest in capped {
        if let Some(u) = fs_use(rec.pid, dest) {
            s.moat.filesystems.insert(dest.clone(), u);
        }
    }
    s.moat.egress = egress_counters(cg, snapshot);
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

/// The egress programs' counters on the container's cgroup, if it has them, with the
/// refusal ring when `ring` (`events --stats`).
pub(crate) fn egress_counters(cg: &Cgroup, ring: bool) -> Option<stats::EgressCounters> {
    use crate::linux::egress::{
        Installed, STATS_HELD_ADDRS, STATS_HELD_NAMES, STATS_REFUSED_ECHO, STATS_REFUSED_FULL,
        STATS_REFUSED_NAMES, STATS_REFUSED_REBIND,
    };
    let inst = Installed::find(&cg.v2_dir()?).ok()??;
    let n = inst.counters().ok()??;
    let refused = if ring {
        let now = Clocks::now();
        inst.list
            .as_ref()
            .and_then(|l| l.refusals().ok())
            .map(|r| r.iter().map(|e| refusal(e, now)).collect())
    } else {
        None
    };
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
        sockets_refused: n[crate::linux::egress::prog::Hook::SockCreate.slot() as usize],
        refused,
    })
}

/// The two clocks at one moment: the ring's times are `CLOCK_MONOTONIC`.
#[derive(Clone, Copy)]
struct Clocks {
    mono_ns: u64,
    wall: std::time::SystemTime,
}

impl Clocks {
    fn now() -> Clocks {
        Clocks {
            mono_ns: crate::linux::egress::monotonic_ns(),
            wall: std::time::SystemTime::now(),
        }
    }

    fn rfc3339(self, mono_ns: u64) -> String {
        let at = self
            .wall
            .checked_sub(Duration::from_nanos(self.mono_ns.saturating_sub(mono_ns)))
            .unwrap_or(self.wall)
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        crate::log::rfc3339(
            i64::try_from(at.as_secs()).unwrap_or(i64::MAX),
            at.subsec_millis() * 1_000_000,
        )
    }
}

/// One ring entry as `events` shows it.
fn refusal(e: &crate::linux::egress::RingEntry, now: Clocks) -> stats::EgressRefusal {
    use crate::linux::egress::{prog::Hook, STATS_REFUSED_NAMES, STATS_REFUSED_REBIND};
    let slot = u32::from(e.slot);
    let by = match slot {
        s if s == Hook::Connect4.slot() || s == Hook::Connect6.slot() => "connect",
        s if s == Hook::Sendmsg4.slot() || s == Hook::Sendmsg6.slot() => "sendmsg",
        s if s == Hook::InetEgress.slot() => "packet",
        s if s == Hook::SockCreate.slot() => "socket",
        STATS_REFUSED_NAMES => "name",
        STATS_REFUSED_REBIND => "rebinding",
        _ => "unknown",
    };
    let addr = std::net::Ipv6Addr::from(e.addr);
    let address = match by {
        "socket" | "name" => None,
        _ => Some(
            addr.to_ipv4_mapped()
                .map_or(addr.to_string(), |v4| v4.to_string()),
        ),
    };
    let socket = (by == "socket").then(|| {
        let word = |k: usize| i32::from_ne_bytes(e.addr[k..k + 4].try_into().expect("4"));
        format!("{} {}", family_name(word(0)), type_name(word(4)))
    });
    let protocol = match by {
        "name" | "rebinding" => None,
        _ => Some(protocol_name(e.protocol)),
    };
    let port = (matches!(by, "connect" | "sendmsg")
        && matches!(i32::from(e.protocol), libc::IPPROTO_TCP | libc::IPPROTO_UDP))
    .then_some(e.port);
    stats::EgressRefusal {
        by,
        address,
        port,
        protocol,
        socket,
        name: e.name.clone(),
        count: e.count,
        first_seen: now.rfc3339(e.first_ns),
        last_seen: now.rfc3339(e.last_ns),
    }
}

fn protocol_name(p: u8) -> String {
    match i32::from(p) {
        libc::IPPROTO_TCP => "tcp".into(),
        libc::IPPROTO_UDP => "udp".into(),
        libc::IPPROTO_UDPLITE => "udplite".into(),
        libc::IPPROTO_ICMP => "icmp".into(),
        libc::IPPROTO_ICMPV6 => "icmpv6".into(),
        libc::IPPROTO_SCTP => "sctp".into(),
        libc::IPPROTO_DCCP => "dccp".into(),
        n => n.to_string(),
    }
}

fn family_name(f: i32) -> String {
    match f {
        libc::AF_INET => "AF_INET".into(),
        libc::AF_INET6 => "AF_INET6".into(),
        n => format!("family {n}"),
    }
}

fn type_name(t: i32) -> String {
    match t {
        libc::SOCK_STREAM => "SOCK_STREAM".into(),
        libc::SOCK_DGRAM => "SOCK_DGRAM".into(),
        libc::SOCK_RAW => "SOCK_RAW".into(),
        libc::SOCK_RDM => "SOCK_RDM".into(),
        libc::SOCK_SEQPACKET => "SOCK_SEQPACKET".into(),
        libc::SOCK_DCCP => "SOCK_DCCP".into(),
        n => format!("type {n}"),
    }
}

/// The ring's entries that are new or counted again since `seen`, each as an
/// `egress.refused` event: `{"type":"egress.refused","id":…,"data":{…}}`.
fn emit_refusals(
    out: &mut impl Write,
    cg: &Cgroup,
    id: &str,
    seen: &mut std::collections::HashMap<([u8; 16], u16, u8, u8), u64>,
) -> Result<()> {
    use crate::linux::egress::Installed;
    let Some(dir) = cg.v2_dir() else {
        return Ok(());
    };
    let Some(list) = Installed::find(&dir).ok().flatten().and_then(|i| i.list) else {
        return Ok(());
    };
    let Ok(entries) = list.refusals() else {
        return Ok(());
    };
    let now = Clocks::now();
    // Oldest first, so a reader sees them in the order they last happened.
    for e in entries.iter().rev() {
        if seen.get(&(e.addr, e.port, e.protocol, e.slot)) == Some(&e.count) {
            continue;
        }
        let ev = serde_json::json!({"type": "egress.refused", "id": id, "data": refusal(e, now)});
        writeln!(out, "{ev}").context("write to standard output")?;
    }
    out.flush().context("write to standard output")?;
    // Bounded as the ring is: what it dropped is forgotten.
    *seen = entries
        .iter()
        .map(|e| ((e.addr, e.port, e.protocol, e.slot), e.count))
        .collect();
    Ok(())
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
