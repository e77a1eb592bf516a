//! The per-container DNS forwarder (docs/security.md, "Egress: names"): how names in an
//! egress list work with addresses that rotate (CDNs).
//!
//! When a container's list has names, `moat create` starts `moat-dns`
//! (src/bin/moat-dns.rs, next to moat's own binary) once the init is ready. It is a child
//! of `moat create` on the host — never in the container's cgroup (so the container's
//! programs do not bind it), mount, pid or user namespace — that joins the container's
//! network namespace only, so resolvers reachable only from there (Docker's 127.0.0.11,
//! slirp4netns's 10.0.2.3) still work. It binds UDP and TCP port 53 on a loopback address
//! of its own in 127.128.0.0/9 (from a hash of the id; the next one on `EADDRINUSE`: the
//! containers of a pod share the namespace and each has its forwarder), admits that
//! address with DNS only into the container's trie, then gives up every privilege
//! (uid/gid 65534, no capabilities, no_new_privs, not dumpable) and serves:
//!
//! - a name no rule allows ([`Egress::name_allowed`]) is answered `REFUSED` and counted
//!   in the stats slot [`STATS_REFUSED_NAMES`];
//! - an allowed one goes to the upstreams ([`Egress::resolvers`]) in turn; the answer goes
//!   back unchanged but for TTLs above [`TTL_CEILING`], and each A/AAAA record for the
//!   queried name (or a name its CNAME chain in the answer leads to) is admitted into the
//!   trie with what [`Egress::admitted`] gives it, for the record's TTL clamped to
//!   [`TTL_FLOOR`]..[`TTL_CEILING`], and revoked when the last answer holding it expires.
//!
//! The container's `/etc/resolv.conf` is a file in the state directory naming only the
//! forwarder (planned in row 1: [`plan`]); the programs let DNS to loopback reach only
//! the forwarder's /128, so when it dies the container's lookups fail closed. It exits
//! when the container's init does (it polls the init's pidfd); `delete` kills it by
//! pidfd, checked against the pid and start time recorded in [`RECORD_FILE`].
//!
//! It talks to `moat create` over a `SOCK_SEQPACKET` pair on its stdin: the configuration
//! (JSON) with the network namespace's fd, then the trie, the stats map and the init's
//! pidfd, one fd per packet; it answers `ok ADDRESS` or `error TEXT`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    admit, count, gauge, record_name, revoke, Installed, STATS_HELD_ADDRS, STATS_HELD_NAMES,
    STATS_REFUSED_FULL, STATS_REFUSED_NAMES, STATS_REFUSED_REBIND,
};
use crate::linux::cgroups::{Cgroup, Layout};
use crate::linux::{killpoint, sys};
use crate::policy::egress::{Egress, Entry, ForwarderLimits, Range, RANGES, TCP, UDP};
use crate::spec::{Mount, Spec};

/// The forwarder's program, installed next to moat's binary.
pub const BINARY: &str = "moat-dns";
/// The container's `/etc/resolv.conf`, in its state directory.
pub const RESOLV_FILE: &str = "resolv.conf";
/// The running forwarder: [`Recorded`].
pub const RECORD_FILE: &str = "dns.json";
/// The forwarder's control socket (root only, 0600): [`reconfigure`].
pub const CONTROL_FILE: &str = "dns.sock";
/// An answer's address stays admitted at least this long (a TTL of 0 would let the
/// entry go before the client connects) …
pub const TTL_FLOOR: u32 = 5;
/// … and at most this long; TTLs above it are lowered to it in the answer, so no client
/// caches an address longer than the trie holds it.
pub const TTL_CEILING: u32 = 3600;
/// Each upstream gets this long to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
/// A client gets this long to send each whole message over TCP (however it spreads
/// the bytes), and its answer as long to leave.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Messages answered at once, each on a thread of its own: one client stalling (a query
/// trickled a byte at a time, a slow upstream) holds one, never the others.
const CLIENTS: usize = 64;
/// A client thread's stack (parsing a DNS message is shallow).
const CLIENT_STACK: usize = 256 * 1024;
/// The longest the main thread sleeps between expiry passes.
const EXPIRY_TICK: Duration = Duration::from_secs(1);
/// Addresses tried in 127.128.0.0/9 before giving up.
const ATTEMPTS: u32 = 16;
/// How long create waits for the forwarder to be serving.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `update` waits for the forwarder to take a new list (already in force).
const RECONFIGURE_TIMEOUT: Duration = Duration::from_secs(3);
/// The uid and gid the forwarder serves as (nobody).
const NOBODY: u32 = 65534;

/// Why the forwarder could not be started (create fails, and is rolled back).
#[derive(Debug, thiserror::Error)]
pub enum ForwarderError {
    #[error("egress names: DNS forwarder: {what}: {}", crate::error_text::strerror(.err))]
    Io { what: String, err: io::Error },
    #[error("egress names: DNS forwarder: {0}")]
    Failed(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ForwarderError {
    let what = what.into();
    move |err| ForwarderError::Io { what, err }
}

/// Row 1's part: the container's resolv.conf, a file in the state directory that names
/// the forwarder, bound at `/etc/resolv.conf` in place of the engine's.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The file in the state directory.
    pub resolv: PathBuf,
    /// The engine's `search`, `domain` and `options` lines, kept.
    pub engine_lines: String,
    /// The forwarder's first choice of address; `start` rewrites the file in place when
    /// it had to take another.
    pub first: Ipv4Addr,
}

/// The spec's bind at `/etc/resolv.conf` (the engine's), the last one if several.
fn resolv_mount(spec: &mut Spec) -> Option<&mut Mount> {
    spec.mounts.iter_mut().rev().find(|m| {
        m.destination.trim_end_matches('/') == "/etc/resolv.conf"
            && (m.typ.as_deref() == Some("bind")
                || m.options.iter().any(|o| o == "bind" || o == "rbind"))
    })
}

/// Plans the container's resolv.conf (row 1): the spec's `/etc/resolv.conf` bind gets
/// `dir`'s file as its source, or a read-only bind of it is added. The engine's file is
/// read from its host-side source, never from the rootfs. Returns the plan and the
/// source made later (for the rootfs plan, which cannot look it up yet).
pub fn plan(spec: &mut Spec, dir: &Path, id: &str) -> (Plan, (PathBuf, bool)) {
    let resolv = dir.join(RESOLV_FILE);
    let source = resolv.display().to_string();
    let mut engine = String::new();
    match resolv_mount(spec) {
        Some(m) => {
            if let Some(src) = m.source.as_deref() {
                if let Ok(f) = std::fs::File::open(src) {
                    let _ = f.take(64 * 1024).read_to_string(&mut engine);
                }
            }
            m.source = Some(source);
        }
        None => spec.mounts.push(Mount {
            destination: "/etc/resolv.conf".into(),
            typ: Some("bind".into()),
            source: Some(source),
            options: ["bind", "ro", "nosuid", "nodev", "noexec"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        }),
    }
    let engine_lines = engine
        .lines()
        .filter(|l| {
            let w = l.split_whitespace().next().unwrap_or("");
            matches!(w, "search" | "domain" | "options")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    (
        Plan {
            resolv: resolv.clone(),
            engine_lines,
            first: address(id, 0),
        },
        (resolv, false),
    )
}

/// The container's resolv.conf naming the forwarder at `addr`.
pub fn resolv_text(addr: Ipv4Addr, engine_lines: &str) -> String {
    format!(
        "# moat: the container's DNS forwarder (egress names)\nnameserver {addr}\n{engine_lines}"
    )
}

/// Writes (or rewrites in place: the container's bind holds the inode) the resolv.conf.
pub fn write_resolv(plan: &Plan, addr: Ipv4Addr) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&plan.resolv)?;
    f.write_all(resolv_text(addr, &plan.engine_lines).as_bytes())
}

/// The `attempt`th address for container `id` in 127.128.0.0/9 (FNV-1a of the id; the
/// host part never 0 or 255, which some resolvers treat oddly).
pub fn address(id: &str, attempt: u32) -> Ipv4Addr {
    let mut h: u32 = 0x811c_9dc5;
    for b in id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let [_, a, b, c] = h.to_be_bytes();
    let c = c.clamp(1, 254);
    Ipv4Addr::new(127, 128 | (a & 0x7f), b, c)
}

/// The running forwarder, as `delete`, `events` and `update` find it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Recorded {
    pub pid: i32,
    /// `/proc/<pid>/stat` starttime: a recycled pid is never taken for it.
    pub start: u64,
    pub addr: Ipv4Addr,
    /// Its bounds, for `events --stats` (absent in a record of an older moat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ForwarderLimits>,
    /// Its cgroup's path below each hierarchy root ([`cgroup_path`]), absent when it runs
    /// without one (`no_cgroup` says why) or in a record of an older moat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// Why it has no cgroup of its own (rootless, no delegated subtree there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_cgroup: Option<String>,
}

impl Recorded {
    /// The forwarder recorded in the state directory `dir`, if any.
    pub fn load(dir: &Path) -> Option<Recorded> {
        let b = std::fs::read(dir.join(RECORD_FILE)).ok()?;
        serde_json::from_slice(&b).ok()
    }

    /// Still this forwarder, and not a zombie.
    pub fn alive(&self) -> bool {
        crate::state::process_start_time(self.pid)
            .is_some_and(|(state, start)| start == self.start && state != 'Z' && state != 'X')
    }

    /// Kills the forwarder (by pidfd, only if the pid is still this forwarder) and waits
    /// a little for it to be gone.
    pub fn kill(&self) {
        let Ok(pidfd) = sys::pidfd_open(self.pid) else {
            return;
        };
        // The pidfd now pins this pid: check it is still the forwarder.
        if !self.alive() {
            return;
        }
        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = sys::poll_readable_within(pidfd.as_fd(), Duration::from_secs(2));
    }
}

/// Stops the forwarder recorded in the state directory `dir` (delete, delete --force,
/// a refused `update`), and with `container` (the container's cgroup: delete) removes
/// the forwarder's cgroup, found from the container's path whatever the record says (a
/// create killed between making it and recording it).
pub fn stop(dir: &Path, container: Option<&Cgroup>) {
    if let Some(r) = Recorded::load(dir) {
        r.kill();
    }
    if let Some(c) = container.filter(|c| !c.path.is_empty()) {
        remove_cgroup(&cgroup_path(&c.path));
    }
}

// ---- The forwarder's cgroup ----
//
// A sibling of the container's cgroup, in every hierarchy moat may write: never the
// container's own subtree (the egress programs on its cgroup v2 directory would bind the
// forwarder's upstream queries, and the container's limits, freeze and kill would reach
// it), never moat's caller's (an engine's shim, a user's shell: unlimited and shared).
// Its memory and pids limits are `[egress] forwarder_memory` and `forwarder_pids`.

/// Appended to the container's cgroup path to name the forwarder's: `@` is in no container
/// id, so no other container's default cgroup (`/moat/<id>`) is ever this one.
pub const CGROUP_SUFFIX: &str = "@dns";

/// The forwarder's cgroup path for the container's `container` (below each hierarchy
/// root).
pub fn cgroup_path(container: &str) -> String {
    format!("{}{CGROUP_SUFFIX}", container.trim_end_matches('/'))
}

/// The forwarder's cgroup at `path` as it is now: the host's hierarchies in which its
/// directory exists; `None` in none.
pub fn found_cgroup(path: &str) -> Option<Cgroup> {
    let layout = Layout::detect().ok()?;
    let mut cg = Cgroup::planned(&layout, path);
    cg.hierarchies.retain(|h| h.dir(path).is_dir());
    (!cg.hierarchies.is_empty()).then_some(cg)
}

/// Kills whatever runs in the forwarder's cgroup at `path` and removes it, in every
/// hierarchy (nothing when there is none).
pub fn remove_cgroup(path: &str) {
    let Some(cg) = found_cgroup(path) else {
        return;
    };
    if let Err(e) = cg.kill_all(libc::SIGKILL, Duration::from_secs(2)) {
        crate::log::warn(&format!("the DNS forwarder's cgroup: {e}"));
    }
    if let Err(e) = cg.remove() {
        crate::log::warn(&format!("remove the DNS forwarder's cgroup: {e}"));
    }
}

/// Makes the forwarder's cgroup next to the container's `container` and sets its limits;
/// `Ok(Err(why))` when a rootless caller may not (no delegated cgroup there): the
/// forwarder then runs in moat's own cgroup, unlimited, as `verify` says. As root a
/// cgroup that cannot be made or limited fails the create.
fn make_cgroup(
    container: &str,
    limits: &ForwarderLimits,
    rootless: bool,
) -> Result<Result<Cgroup, String>, ForwarderError> {
    let path = cgroup_path(container);
    let failed = |e: crate::linux::cgroups::CgroupError| {
        ForwarderError::Failed(format!("its cgroup {path}: {e}"))
    };
    let layout = Layout::detect().map_err(failed)?;
    let cg = if rootless {
        let Some(h) = layout.hierarchies.into_iter().find(|h| h.v2) else {
            return Ok(Err("the host has no cgroup v2 hierarchy".into()));
        };
        match Cgroup::create_rootless(h, path.clone()).map_err(failed)? {
            Ok(cg) => cg,
            Err(crate::linux::cgroups::NoCgroup(why)) => return Ok(Err(why)),
        }
    } else {
        Cgroup::create(layout, path.clone()).map_err(failed)?
    };
    killpoint::at("create", "parent", "Dns.cgroup");
    if cg.v2_dir().is_none() {
        // Its v2 directory is what keeps it out of the caller's (and so out of whatever
        // programs are attached there).
        let _ = cg.remove();
        if rootless {
            return Ok(Err("its cgroup v2 directory is not writable".into()));
        }
        return Err(ForwarderError::Failed(format!(
            "its cgroup {path}: no writable cgroup v2 hierarchy"
        )));
    }
    let res = crate::spec::Resources {
        memory: Some(crate::spec::Memory {
            limit: Some(i64::try_from(limits.memory).unwrap_or(i64::MAX)),
            ..Default::default()
        }),
        pids: Some(crate::spec::Pids {
            limit: Some(i64::from(limits.pids)),
        }),
        ..Default::default()
    };
    if let Err(e) = cg.update(&res) {
        if rootless {
            crate::log::warn(&format!(
                "egress names: the DNS forwarder's cgroup {path} takes no limits: {e}"
            ));
        } else {
            let _ = cg.remove();
            return Err(failed(e));
        }
    }
    Ok(Ok(cg))
}

/// Each hierarchy's `cgroup.procs` of `cg`, open for writing: the forwarder is born
/// there ([`sys::spawn_in_cgroups`]).
fn procs_files(cg: &Cgroup) -> Result<Vec<OwnedFd>, ForwarderError> {
    cg.hierarchies
        .iter()
        .map(|h| {
            let f = h.dir(&cg.path).join("cgroup.procs");
            let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes())
                .map_err(|_| ForwarderError::Failed(format!("{} holds a NUL", f.display())))?;
            sys::openat(
                crate::linux::path::cwd(),
                &c,
                libc::O_WRONLY | libc::O_CLOEXEC,
                0,
            )
            .map_err(io_err(format!("open {}", f.display())))
        })
        .collect()
}

/// What `verify` and `events --stats` read of the forwarder's cgroup: its limits in force
/// and its use, from the hierarchy of each controller (v1 first, as the container's).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CgroupUse {
    /// Its path below each hierarchy root.
    pub path: String,
    /// `memory.limit_in_bytes` (v1) or `memory.max` (v2), in bytes; `None`: unlimited or
    /// not readable.
    pub memory_limit: Option<u64>,
    pub memory_usage: Option<u64>,
    /// The highest usage seen (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_peak: Option<u64>,
    /// Times it hit the limit (v1 `memory.failcnt`, v2 `memory.events` max).
    pub memory_limit_hits: u64,
    pub pids_limit: Option<u64>,
    pub pids_current: Option<u64>,
    /// Thread creations refused at the limit (`pids.events` max).
    pub pids_limit_hits: u64,
}

impl CgroupUse {
    /// Read from the cgroup at `path`; `None` when it exists nowhere.
    pub fn read(path: &str) -> Option<CgroupUse> {
        let cg = found_cgroup(path)?;
        let dir_of = |controller: &str| {
            cg.hierarchies
                .iter()
                .find(|h| !h.v2 && h.controllers.iter().any(|c| c == controller))
                .or_else(|| {
                    cg.hierarchies.iter().find(|h| {
                        h.v2 && crate::linux::read_kernel_file(
                            h.dir(path).join("cgroup.controllers"),
                        )
                        .unwrap_or_default()
                        .split_whitespace()
                        .any(|c| c == controller)
                    })
                })
                .map(|h| (h.dir(path), h.v2))
        };
        let read = |dir: &Path, file: &str| {
            crate::linux::read_kernel_file(dir.join(file))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let num = |dir: &Path, file: &str| read(dir, file).and_then(|s| s.parse::<u64>().ok());
        let event = |dir: &Path, file: &str, key: &str| {
            read(dir, file)
                .unwrap_or_default()
                .lines()
                .find_map(|l| {
                    l.strip_prefix(&format!("{key} "))
                        .and_then(|n| n.parse().ok())
                })
                .unwrap_or(0)
        };
        let mut u = CgroupUse {
            path: path.to_string(),
            ..Default::default()
        };
        if let Some((d, v2)) = dir_of("memory") {
            if v2 {
                u.memory_limit = num(&d, "memory.max");
                u.memory_usage = num(&d, "memory.current");
                u.memory_peak = num(&d, "memory.peak");
                u.memory_limit_hits = event(&d, "memory.events", "max");
            } else {
                // v1 reports "unlimited" as a page-rounded LONG_MAX.
                u.memory_limit = num(&d, "memory.limit_in_bytes").filter(|&l| l < 1 << 62);
                u.memory_usage = num(&d, "memory.usage_in_bytes");
                u.memory_peak = num(&d, "memory.max_usage_in_bytes");
                u.memory_limit_hits = num(&d, "memory.failcnt").unwrap_or(0);
            }
        }
        if let Some((d, _)) = dir_of("pids") {
            u.pids_limit = num(&d, "pids.max");
            u.pids_current = num(&d, "pids.current");
            u.pids_limit_hits = event(&d, "pids.events", "max");
        }
        Some(u)
    }
}

/// `moat update --egress`: hands the running forwarder of the container whose state
/// directory is `dir` its new policy and the new trie, just selected: the forwarder
/// re-admits its live answers that the new policy still allows into it (and its own
/// address), and from then on admits there. Its control socket is served by its main
/// thread, which never reads from a client: the answer comes within
/// [`RECONFIGURE_TIMEOUT`] or not at all. Nothing to do without a forwarder.
pub fn reconfigure(
    dir: &Path,
    egress: &Egress,
    trie: std::os::fd::BorrowedFd<'_>,
) -> Result<(), ForwarderError> {
    let Some(r) = Recorded::load(dir).filter(Recorded::alive) else {
        return Ok(());
    };
    let path = dir.join(CONTROL_FILE);
    let (_dir, short) = control_path(dir).map_err(io_err(format!("open {}", dir.display())))?;
    let s = std::os::unix::net::UnixStream::connect(&short)
        .map_err(io_err(format!("connect to {}", path.display())))?;
    let msg = serde_json::to_vec(egress).expect("serialises");
    sys::send_with_fd(s.as_fd(), &msg, trie).map_err(io_err("send the new policy"))?;
    if !sys::poll_readable_within(s.as_fd(), RECONFIGURE_TIMEOUT).map_err(io_err("wait for it"))? {
        return Err(ForwarderError::Failed(format!(
            "pid {}: no answer to the new policy within {}s",
            r.pid,
            RECONFIGURE_TIMEOUT.as_secs()
        )));
    }
    let mut buf = [0u8; 1024];
    let (n, _) = sys::recv_with_fd(s.as_fd(), &mut buf).map_err(io_err("read its answer"))?;
    match std::str::from_utf8(&buf[..n]) {
        Ok("ok") => Ok(()),
        Ok(other) => Err(ForwarderError::Failed(other.to_string())),
        Err(_) => Err(ForwarderError::Failed("a garbled answer".into())),
    }
}

/// The control socket in the state directory `dir`, named through an `O_PATH` fd of `dir`
/// (returned: the name is good while it is open): `sun_path` holds 108 bytes, and a state
/// directory under an engine's root (containerd's `<Root>/k8s.io/<64 hex digits>`) may
/// alone be longer than that.
fn control_path(dir: &Path) -> io::Result<(OwnedFd, PathBuf)> {
    use std::os::fd::AsRawFd;
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let fd = sys::openat(
        crate::linux::path::cwd(),
        &c,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        0,
    )?;
    let short = PathBuf::from(format!("/proc/self/fd/{}/{CONTROL_FILE}", fd.as_raw_fd()));
    Ok((fd, short))
}

/// The forwarder create started, killed (and its cgroup removed) when dropped unless
/// [`Running::keep`] was called.
pub struct Running {
    pidfd: Option<OwnedFd>,
    cgroup: Option<Cgroup>,
    pub recorded: Recorded,
}

impl Running {
    /// Create succeeded: the forwarder lives as long as the container's init.
    pub fn keep(mut self) {
        self.pidfd = None;
        self.cgroup = None;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = self.pidfd.take() {
            let _ = sys::pidfd_send_signal(p.as_fd(), libc::SIGKILL);
            let _ = sys::poll_readable_within(p.as_fd(), Duration::from_secs(2));
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = cg.kill_all(libc::SIGKILL, Duration::from_secs(2));
            let _ = cg.remove();
        }
    }
}

/// Where create starts the forwarder: for the container `id` whose init is `init_pid`
/// (ready, so its network namespace is final), its programs on the cgroup v2 directory
/// `v2` of the container's cgroup `cgroup` (the path below each hierarchy root, next to
/// which the forwarder's goes), `rootless` as the container's create.
pub struct Site<'a> {
    pub id: &'a str,
    pub init_pid: i32,
    pub v2: &'a Path,
    pub cgroup: &'a str,
    pub rootless: bool,
}

/// What create sends the forwarder first.
#[derive(Serialize, Deserialize)]
struct Config {
    id: String,
    egress: serde_json::Value,
    /// The state directory, where the control socket goes.
    state: PathBuf,
}

/// Starts the forwarder at `site`, in a cgroup of its own next to the container's; writes
/// the resolv.conf and the record in the state directory `dir`.
pub fn start(
    plan: &Plan,
    dir: &Path,
    egress: &Egress,
    site: &Site<'_>,
) -> Result<Running, ForwarderError> {
    let (id, init_pid, cgroup_v2) = (site.id, site.init_pid, site.v2);
    let exe = crate::linux::exeseal::original_path()
        .ok_or_else(|| ForwarderError::Failed("cannot tell where moat's binary is".into()))?
        .with_file_name(BINARY);
    let netns = sys::openat(
        crate::linux::path::cwd(),
        &std::ffi::CString::new(format!("/proc/{init_pid}/ns/net")).expect("no NUL"),
        libc::O_RDONLY | libc::O_CLOEXEC,
        0,
    )
    .map_err(io_err(format!(
        "open the network namespace of the init (pid {init_pid})"
    )))?;
    let installed = Installed::find(cgroup_v2)
        .map_err(|e| ForwarderError::Failed(e.to_string()))?
        .ok_or_else(|| {
            ForwarderError::Failed(format!("no egress programs on {}", cgroup_v2.display()))
        })?;
    let maps = installed.list.as_ref().ok_or_else(|| {
        ForwarderError::Failed(format!(
            "no list maps on {} (the fixed form has no trie)",
            cgroup_v2.display()
        ))
    })?;
    let init = sys::pidfd_open(init_pid)
        .map_err(io_err(format!("pidfd_open of the init (pid {init_pid})")))?;
    let (ours, theirs) = sys::socketpair_seqpacket().map_err(io_err("socketpair"))?;
    let devnull = sys::openat(
        crate::linux::path::cwd(),
        c"/dev/null",
        libc::O_RDWR | libc::O_CLOEXEC,
        0,
    )
    .map_err(io_err("open /dev/null"))?;
    let path = std::ffi::CString::new(exe.as_os_str().as_encoded_bytes())
        .map_err(|_| ForwarderError::Failed("moat's path holds a NUL".into()))?;
    let argv = [
        std::ffi::CString::new(BINARY).expect("no NUL"),
        std::ffi::CString::new(id).unwrap_or_default(),
    ];
    // One malloc arena (glibc builds): a thread per message would otherwise give each
    // thread its own, pages the forwarder keeps.
    let env = [std::ffi::CString::new("MALLOC_ARENA_MAX=1").expect("no NUL")];
    let (cgroup, no_cgroup) = match make_cgroup(site.cgroup, &egress.forwarder, site.rootless)? {
        Ok(cg) => (Some(cg), None),
        Err(why) => {
            crate::log::warn(&format!(
                "egress names: the DNS forwarder runs without a cgroup of its own, unlimited: {why}"
            ));
            (None, Some(why))
        }
    };
    // Owned from here: a failure below kills the forwarder and removes its cgroup.
    let mut running = Running {
        pidfd: None,
        cgroup,
        recorded: Recorded {
            pid: 0,
            start: 0,
            addr: plan.first,
            limits: Some(egress.forwarder),
            cgroup: None,
            no_cgroup,
        },
    };
    let procs = match &running.cgroup {
        Some(cg) => procs_files(cg)?,
        None => Vec::new(),
    };
    let procs: Vec<_> = procs.iter().map(AsFd::as_fd).collect();
    let (pid, pidfd) = sys::spawn_in_cgroups(
        &path,
        &argv,
        &env,
        [
            Some(theirs.as_fd()),
            Some(theirs.as_fd()),
            Some(devnull.as_fd()),
        ],
        &procs,
        None,
    )
    .map_err(io_err(format!("run {}", exe.display())))?;
    drop(theirs);
    running.pidfd = Some(pidfd);
    running.recorded.pid = pid;
    let cfg = serde_json::to_vec(&Config {
        id: id.to_string(),
        egress: serde_json::to_value(egress).expect("serialises"),
        state: dir.to_path_buf(),
    })
    .expect("serialises");
    let send = |data: &[u8], fd: std::os::fd::BorrowedFd<'_>| {
        sys::send_with_fd(ours.as_fd(), data, fd).map_err(io_err("send its configuration"))
    };
    send(&cfg, netns.as_fd())?;
    send(b"selector", maps.selector.as_fd())?;
    send(b"trie0", maps.tries[0].as_fd())?;
    send(b"trie1", maps.tries[1].as_fd())?;
    send(b"stats", maps.stats.as_fd())?;
    let Some(ring) = &maps.ring else {
        return Err(ForwarderError::Failed(
            "the container's egress programs have no refusal ring".into(),
        ));
    };
    send(b"ring", ring.as_fd())?;
    send(b"init", init.as_fd())?;
    sys::send_msg(ours.as_fd(), &filter_bytes(&seccomp_filter()?), None)
        .map_err(io_err("send its seccomp filter"))?;
    if !sys::poll_readable_within(ours.as_fd(), START_TIMEOUT).map_err(io_err("wait for it"))? {
        return Err(ForwarderError::Failed(format!(
            "no answer within {}s",
            START_TIMEOUT.as_secs()
        )));
    }
    let mut buf = [0u8; 1024];
    let (n, _) = sys::recv_with_fd(ours.as_fd(), &mut buf).map_err(io_err("read its answer"))?;
    let reply = String::from_utf8_lossy(&buf[..n]).to_string();
    let addr: Ipv4Addr = match reply.strip_prefix("ok ") {
        Some(a) => a
            .parse()
            .map_err(|_| ForwarderError::Failed(format!("bad answer {reply:?}")))?,
        None => {
            let why = reply.strip_prefix("error ").unwrap_or(&reply);
            return Err(ForwarderError::Failed(if why.is_empty() {
                format!("{} exited before serving", exe.display())
            } else {
                why.to_string()
            }));
        }
    };
    write_resolv(plan, addr).map_err(io_err(format!("write {}", plan.resolv.display())))?;
    let start = crate::state::process_start_time(pid)
        .map(|(_, s)| s)
        .ok_or_else(|| ForwarderError::Failed("exited right after starting".into()))?;
    running.recorded.start = start;
    running.recorded.addr = addr;
    running.recorded.cgroup = running.cgroup.as_ref().map(|c| c.path.clone());
    let json = serde_json::to_vec(&running.recorded).expect("serialises");
    let rec = dir.join(RECORD_FILE);
    std::fs::write(&rec, json).map_err(io_err(format!("write {}", rec.display())))?;
    Ok(running)
}

// ---- The forwarder itself (moat-dns) ----

/// `moat-dns`'s main: set up from create's packets, answer `ok`/`error`, serve until the
/// init exits. Returns the exit status.
pub fn main() -> i32 {
    let ctl = io::stdin();
    let ctl = ctl.as_fd();
    match setup(ctl) {
        Ok(f) => {
            let _ = sys::send_msg(ctl, format!("ok {}", f.addr).as_bytes(), None);
            // create's end closes when it exits; nothing more comes this way.
            sys::close_raw(ctl);
            sys::close_raw(io::stdout().as_fd());
            Arc::new(f).serve();
            0
        }
        Err(e) => {
            let _ = sys::send_msg(ctl, format!("error {e}").as_bytes(), None);
            1
        }
    }
}

/// The forwarder: what every thread shares.
struct Forwarder {
    addr: Ipv4Addr,
    udp: UdpSocket,
    tcp: TcpListener,
    /// `moat update --egress` ([`reconfigure`]).
    control: std::os::unix::net::UnixListener,
    /// The list form's two tries and the selector saying which is in force (`update`
    /// flips it).
    selector: OwnedFd,
    tries: [OwnedFd; 2],
    stats: OwnedFd,
    /// The refusal ring: the names refused and the answers not admitted, by name.
    ring: OwnedFd,
    init: OwnedFd,
    state: Mutex<State>,
    /// Messages being answered now (each on a thread of its own): at most [`CLIENTS`].
    busy: AtomicUsize,
    /// For upstream query ids.
    seq: AtomicU64,
    random: std::collections::hash_map::RandomState,
}

/// What the threads change, under the lock (held for policy checks and map writes only,
/// never across a read from a client or an upstream).
struct State {
    egress: Egress,
    /// The static entries (with the forwarder's own): what a revoked address goes back to.
    statics: Vec<Entry>,
    /// The trie `egress` is for: the one selected when it was handed over. Once `update`
    /// flips the selector away from it, admissions stop until the new policy comes
    /// ([`Forwarder::in_force`]): an admission under the old list never lands in the new.
    mine: usize,
    held: Held,
}

/// The answers holding addresses admitted, bounded by [`ForwarderLimits`], with their
/// expiries ordered (a revocation is O(log n) to find).
#[derive(Default)]
struct Held {
    /// Per address, the names whose answers hold it.
    by_addr: HashMap<IpAddr, HashMap<String, Hold>>,
    /// Per name, the addresses it holds.
    per_name: HashMap<String, u32>,
    /// Expiry → the (address, name) it ends.
    expiry: BTreeMap<(Instant, u64), (IpAddr, String)>,
    next: u64,
}

/// One answer's hold on an address: its key in [`Held::expiry`] (expiry, then a sequence
/// number), and its ranges.
type Hold = ((Instant, u64), Vec<Range>);

/// Why an answer's address was not held.
#[derive(Debug, PartialEq)]
struct Full;

impl Held {
    /// Holds `ip` for `name` until `until` with `ranges`; `Err(Full)` past the limits.
    fn hold(
        &mut self,
        limits: ForwarderLimits,
        name: &str,
        ip: IpAddr,
        until: Instant,
        ranges: Vec<Range>,
    ) -> Result<(), Full> {
        if let Some(e) = self.by_addr.get_mut(&ip).and_then(|h| h.get_mut(name)) {
            if until > e.0 .0 {
                let v = self.expiry.remove(&e.0).expect("indexed");
                self.next += 1;
                e.0 = (until, self.next);
                self.expiry.insert(e.0, v);
            }
            e.1 = ranges;
            return Ok(());
        }
        match self.per_name.get(name) {
            None if self.per_name.len() >= limits.names as usize => return Err(Full),
            Some(n) if *n >= limits.answers => return Err(Full),
            _ => {}
        }
        self.next += 1;
        let key = (until, self.next);
        *self.per_name.entry(name.to_string()).or_default() += 1;
        self.expiry.insert(key, (ip, name.to_string()));
        self.by_addr
            .entry(ip)
            .or_default()
            .insert(name.to_string(), (key, ranges));
        Ok(())
    }

    /// Drops `name`'s hold on `ip`.
    fn release(&mut self, ip: IpAddr, name: &str) {
        let Some(h) = self.by_addr.get_mut(&ip) else {
            return;
        };
        let Some((key, _)) = h.remove(name) else {
            return;
        };
        if h.is_empty() {
            self.by_addr.remove(&ip);
        }
        self.expiry.remove(&key);
        if let Some(n) = self.per_name.get_mut(name) {
            *n -= 1;
            if *n == 0 {
                self.per_name.remove(name);
            }
        }
    }

    /// Ends the holds expired at `now`; returns the addresses whose holds changed.
    fn expire(&mut self, now: Instant) -> Vec<IpAddr> {
        let mut touched = Vec::new();
        while let Some(e) = self.expiry.first_entry() {
            if e.key().0 > now {
                break;
            }
            let (ip, name) = e.remove();
            self.release(ip, &name);
            touched.push(ip);
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// The ranges of every answer holding `ip` (none: not held), at most [`RANGES`].
    fn union(&self, ip: IpAddr) -> Vec<Range> {
        let mut v: Vec<Range> = self
            .by_addr
            .get(&ip)
            .into_iter()
            .flat_map(|h| h.values())
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        v.sort();
        v.dedup();
        v.truncate(RANGES);
        v
    }

    fn next_expiry(&self) -> Option<Instant> {
        self.expiry.keys().next().map(|k| k.0)
    }

    /// Every hold: (address, name, until, ranges).
    fn drain(&mut self) -> Vec<(IpAddr, String, Instant, Vec<Range>)> {
        let by_addr = std::mem::take(&mut self.by_addr);
        self.per_name.clear();
        self.expiry.clear();
        by_addr
            .into_iter()
            .flat_map(|(ip, h)| {
                h.into_iter()
                    .map(move |(name, ((until, _), r))| (ip, name, until, r))
            })
            .collect()
    }
}

fn recv_fd(ctl: std::os::fd::BorrowedFd<'_>, what: &str) -> Result<(Vec<u8>, OwnedFd), String> {
    // A list of 256 rules is ~15 KiB of JSON.
    let mut buf = vec![0u8; 64 * 1024];
    let (n, fd) = sys::recv_with_fd(ctl, &mut buf).map_err(|e| format!("receive {what}: {e}"))?;
    buf.truncate(n);
    Ok((buf, fd.ok_or_else(|| format!("no descriptor with {what}"))?))
}

fn setup(ctl: std::os::fd::BorrowedFd<'_>) -> Result<Forwarder, String> {
    let (cfg, netns) = recv_fd(ctl, "the configuration")?;
    let cfg: Config = serde_json::from_slice(&cfg).map_err(|e| format!("configuration: {e}"))?;
    let egress = Egress::from_json(&cfg.egress).ok_or("configuration: no egress policy")?;
    let (_, selector) = recv_fd(ctl, "the selector")?;
    let (_, trie0) = recv_fd(ctl, "the first trie")?;
    let (_, trie1) = recv_fd(ctl, "the second trie")?;
    let (_, stats) = recv_fd(ctl, "the stats map")?;
    let (_, ring) = recv_fd(ctl, "the refusal ring")?;
    let (_, init) = recv_fd(ctl, "the init's pidfd")?;
    let filter = {
        let mut buf = vec![0u8; 64 * 1024];
        let (n, _) = sys::recv_with_fd(ctl, &mut buf)
            .map_err(|e| format!("receive the seccomp filter: {e}"))?;
        filter_of(&buf[..n]).ok_or("a garbled seccomp filter")?
    };
    // Not dumpable: no process of the same uid may ptrace it or open its fds.
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(|e| format!("PR_SET_DUMPABLE: {e}"))?;
    sys::setns(netns.as_fd(), libc::CLONE_NEWNET)
        .map_err(|e| format!("join the container's network namespace: {e}"))?;
    drop(netns);
    let (addr, udp, tcp) = bind(&cfg.id)?;
    let control = {
        use std::os::unix::fs::PermissionsExt;
        let path = cfg.state.join(CONTROL_FILE);
        let (_dir, short) =
            control_path(&cfg.state).map_err(|e| format!("open {}: {e}", cfg.state.display()))?;
        let _ = std::fs::remove_file(&short);
        let l = std::os::unix::net::UnixListener::bind(&short)
            .map_err(|e| format!("bind {}: {e}", path.display()))?;
        std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
        l.set_nonblocking(true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        l
    };
    let statics = egress.entries(Some(IpAddr::V4(addr)))?;
    let dns = [Range {
        lo: 53,
        hi: 53,
        protos: TCP | UDP,
    }];
    // Into both: the entry is static, whichever trie is in force.
    for t in [&trie0, &trie1] {
        admit(t.as_fd(), IpAddr::V4(addr), &dns)
            .map_err(|e| format!("admit {addr} into the trie: {e}"))?;
    }
    udp.set_nonblocking(true)
        .map_err(|e| format!("udp {addr}:53: {e}"))?;
    let mine = selected(&selector);
    empty_root()?;
    drop_privileges()?;
    // Last: every thread it starts inherits it.
    sys::seccomp_set_filter(0, &filter).map_err(|e| format!("seccomp: {e}"))?;
    Ok(Forwarder {
        addr,
        udp,
        tcp,
        control,
        selector,
        tries: [trie0, trie1],
        stats,
        ring,
        init,
        state: Mutex::new(State {
            egress,
            statics,
            mine,
            held: Held::default(),
        }),
        busy: AtomicUsize::new(0),
        seq: AtomicU64::new(0),
        random: Default::default(),
    })
}

/// UDP and TCP port 53 on the first free address of the id's sequence.
fn bind(id: &str) -> Result<(Ipv4Addr, UdpSocket, TcpListener), String> {
    for attempt in 0..ATTEMPTS {
        let a = address(id, attempt);
        let udp = match UdpSocket::bind((a, 53)) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(format!("bind udp {a}:53: {e}")),
        };
        let tcp = match TcpListener::bind((a, 53)) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
            Err(e) => return Err(format!("bind tcp {a}:53: {e}")),
        };
        tcp.set_nonblocking(true)
            .map_err(|e| format!("tcp {a}:53: {e}"))?;
        return Ok((a, udp, tcp));
    }
    Err(format!(
        "no free loopback address for port 53 after {ATTEMPTS} tries"
    ))
}

/// What the forwarder does once serving, and nothing else (anything else fails with
/// `EPERM`): sockets of IPv4 and IPv6 only, threads but no processes (`clone` only with
/// `CLONE_THREAD`; `clone3`, whose flags a filter cannot read, answers `ENOSYS` and glibc
/// falls back to `clone`), `bpf` for the map operations only, no file opened, no exec.
const SECCOMP_ALLOW: &[&str] = &[
    "read",
    "write",
    "readv",
    "writev",
    "close",
    "ppoll",
    "recvfrom",
    "sendto",
    "recvmsg",
    "sendmsg",
    "accept",
    "accept4",
    "bind",
    "connect",
    "setsockopt",
    "getsockopt",
    "getsockname",
    "getpeername",
    "shutdown",
    "ioctl",
    "fcntl",
    "mmap",
    "munmap",
    "mprotect",
    "mremap",
    "madvise",
    "brk",
    "futex",
    "set_robust_list",
    "rseq",
    "rt_sigprocmask",
    "rt_sigaction",
    "rt_sigreturn",
    "sigaltstack",
    "sched_yield",
    "sched_getaffinity",
    "exit",
    "exit_group",
    "getrandom",
    "clock_gettime",
    "clock_nanosleep",
    "nanosleep",
    "gettid",
    "getpid",
    "tgkill",
    "restart_syscall",
    #[cfg(target_arch = "x86_64")]
    "poll",
];

/// The forwarder's seccomp filter, compiled by moat (libseccomp stays out of `moat-dns`).
fn seccomp_filter() -> Result<Vec<libc::sock_filter>, ForwarderError> {
    use crate::spec::{Seccomp, SeccompArg, SeccompSyscall};
    let allow = |names: &[&str], args: Vec<SeccompArg>| SeccompSyscall {
        names: names.iter().map(|n| n.to_string()).collect(),
        action: "SCMP_ACT_ALLOW".into(),
        errno_ret: None,
        args,
    };
    let eq = |index, value: u64| SeccompArg {
        index,
        value,
        value_two: 0,
        op: "SCMP_CMP_EQ".into(),
    };
    let mut syscalls = vec![allow(SECCOMP_ALLOW, Vec::new())];
    for family in [libc::AF_INET, libc::AF_INET6] {
        let family = u64::try_from(family).expect("positive");
        syscalls.push(allow(&["socket"], vec![eq(0, family)]));
    }
    // BPF_MAP_LOOKUP_ELEM, _UPDATE_ELEM, _DELETE_ELEM, _GET_NEXT_KEY, BPF_OBJ_GET_INFO_BY_FD.
    for cmd in [1, 2, 3, 4, 15] {
        syscalls.push(allow(&["bpf"], vec![eq(0, cmd)]));
    }
    let thread = u64::try_from(libc::CLONE_THREAD).expect("positive");
    syscalls.push(allow(
        &["clone"],
        vec![SeccompArg {
            index: 0,
            value: thread,
            value_two: thread,
            op: "SCMP_CMP_MASKED_EQ".into(),
        }],
    ));
    syscalls.push(SeccompSyscall {
        names: vec!["clone3".into()],
        action: "SCMP_ACT_ERRNO".into(),
        errno_ret: Some(u32::try_from(libc::ENOSYS).expect("positive")),
        args: Vec::new(),
    });
    let spec = Seccomp {
        default_action: "SCMP_ACT_ERRNO".into(),
        default_errno_ret: Some(u32::try_from(libc::EPERM).expect("positive")),
        syscalls,
        ..Default::default()
    };
    crate::linux::seccomp::compile(&spec)
        .map(|f| f.prog)
        .map_err(|e| ForwarderError::Failed(format!("its seccomp filter: {e}")))
}

/// A classic BPF program as bytes (code, jt, jf, k; native order) …
fn filter_bytes(prog: &[libc::sock_filter]) -> Vec<u8> {
    prog.iter()
        .flat_map(|i| {
            let mut b = Vec::with_capacity(8);
            b.extend_from_slice(&i.code.to_ne_bytes());
            b.push(i.jt);
            b.push(i.jf);
            b.extend_from_slice(&i.k.to_ne_bytes());
            b
        })
        .collect()
}

/// … and back.
fn filter_of(b: &[u8]) -> Option<Vec<libc::sock_filter>> {
    if b.is_empty() || !b.len().is_multiple_of(8) {
        return None;
    }
    Some(
        b.chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect(),
    )
}

/// A mount namespace of its own whose root is an empty, read-only tmpfs, the host's tree
/// detached: what serves needs no file (every socket and map is open by then), so none is
/// reachable.
fn empty_root() -> Result<(), String> {
    let e = |what: &'static str| move |err: io::Error| format!("empty root: {what}: {err}");
    sys::unshare(libc::CLONE_NEWNS).map_err(|err| format!("empty root: unshare: {err}"))?;
    sys::mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(e("make / private"))?;
    // Any directory does: the mount is this namespace's only.
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    sys::mount(
        Some(c"moat-dns"),
        c"/tmp",
        Some(c"tmpfs"),
        flags,
        Some(c"size=4k,nr_inodes=1,mode=0555"),
    )
    .map_err(e("mount a tmpfs"))?;
    nix::unistd::chdir("/tmp").map_err(|err| format!("empty root: chdir: {err}"))?;
    sys::pivot_root(c".", c".").map_err(e("pivot_root"))?;
    sys::umount2(c".", libc::MNT_DETACH).map_err(e("detach the host's tree"))?;
    nix::unistd::chdir("/").map_err(|err| format!("empty root: chdir /: {err}"))?;
    sys::mount(
        None,
        c"/",
        None,
        libc::MS_REMOUNT | libc::MS_RDONLY | flags,
        None,
    )
    .map_err(e("make it read-only"))?;
    Ok(())
}

/// nobody, no capabilities (setresuid from 0 clears them), no_new_privs.
fn drop_privileges() -> Result<(), String> {
    sys::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    sys::setresgid(NOBODY).map_err(|e| format!("setresgid: {e}"))?;
    sys::setresuid(NOBODY).map_err(|e| format!("setresuid: {e}"))?;
    sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| format!("no_new_privs: {e}"))?;
    Ok(())
}

/// The queried name as the policy compares it: lower case, no trailing dot.
fn norm(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A reply to `query` with `rcode` and nothing else.
fn reply_with(query: &simple_dns::Packet<'_>, rcode: simple_dns::RCODE) -> Option<Vec<u8>> {
    let mut r = simple_dns::Packet::new_reply(query.id());
    r.questions = query.questions.clone();
    if query.has_flags(simple_dns::PacketFlag::RECURSION_DESIRED) {
        r.set_flags(simple_dns::PacketFlag::RECURSION_DESIRED);
    }
    r.set_flags(simple_dns::PacketFlag::RECURSION_AVAILABLE);
    *r.rcode_mut() = rcode;
    r.build_bytes_vec().ok()
}

/// The addresses an answer gives `qname`, with their TTLs: A/AAAA records of `qname` or
/// of a name its CNAME chain (inside this answer) leads to.
pub fn addresses(qname: &str, answers: &[simple_dns::ResourceRecord<'_>]) -> Vec<(IpAddr, u32)> {
    use simple_dns::rdata::RData;
    let mut chain: BTreeSet<String> = BTreeSet::from([norm(qname)]);
    // Each pass follows one more link; a chain is at most as long as the answer.
    for _ in 0..answers.len() {
        let before = chain.len();
        for rr in answers {
            if let RData::CNAME(c) = &rr.rdata {
                if chain.contains(&norm(&rr.name.to_string())) {
                    chain.insert(norm(&c.0.to_string()));
                }
            }
        }
        if chain.len() == before {
            break;
        }
    }
    answers
        .iter()
        .filter(|rr| chain.contains(&norm(&rr.name.to_string())))
        .filter_map(|rr| match &rr.rdata {
            RData::A(a) => Some((IpAddr::V4(Ipv4Addr::from(a.address)), rr.ttl)),
            RData::AAAA(a) => Some((IpAddr::V6(std::net::Ipv6Addr::from(a.address)), rr.ttl)),
            _ => None,
        })
        .collect()
}

/// Counts a running client thread; uncounts it however the thread ends.
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Forwarder {
    /// The main thread: expiries, new clients (each message answered on a thread of its
    /// own), `update`'s new policies, the init's exit. Nothing here reads from a client.
    fn serve(self: Arc<Self>) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        loop {
            // At most a second between expiry passes: a client thread's admission may
            // expire before whatever the poll below was told.
            let wait = self.expire().map_or(EXPIRY_TICK, |d| d.min(EXPIRY_TICK));
            let ms = i32::try_from(wait.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
            let (udp, tcp, init, control) = {
                let mut fds = [
                    PollFd::new(self.udp.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.tcp.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.init.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.control.as_fd(), PollFlags::POLLIN),
                ];
                match poll(
                    &mut fds,
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::NONE),
                ) {
                    Ok(_) => {}
                    Err(nix::Error::EINTR) => continue,
                    Err(_) => return,
                }
                let r = |f: &PollFd<'_>| f.revents().is_some_and(|e| !e.is_empty());
                (r(&fds[0]), r(&fds[1]), r(&fds[2]), r(&fds[3]))
            };
            if init {
                // The container's init exited: so does its forwarder.
                return;
            }
            if control {
                self.one_control();
            }
            if udp {
                self.take_udp();
            }
            if tcp {
                self.take_tcp();
            }
        }
    }

    /// Runs `f` on a thread of its own, unless [`CLIENTS`] are being served already.
    fn spawn(self: &Arc<Self>, f: impl FnOnce(&Forwarder) + Send + 'static) -> bool {
        if self.busy.fetch_add(1, Ordering::SeqCst) >= CLIENTS {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .stack_size(CLIENT_STACK)
            .spawn(move || {
                let _busy = Busy(&me.busy);
                f(&me);
            })
            .map_err(|_| self.busy.fetch_sub(1, Ordering::SeqCst))
            .is_ok()
    }

    /// The datagrams waiting, each answered on its thread (past [`CLIENTS`], dropped: the
    /// client retries).
    fn take_udp(self: &Arc<Self>) {
        for _ in 0..CLIENTS {
            let mut buf = vec![0u8; 4096];
            let Ok((n, from)) = self.udp.recv_from(&mut buf) else {
                return;
            };
            buf.truncate(n);
            self.spawn(move |f| {
                if let Some(reply) = f.answer(&buf, false) {
                    let _ = f.udp.send_to(&reply, from);
                }
            });
        }
    }

    /// The connections waiting, each served on its thread (past [`CLIENTS`], closed).
    fn take_tcp(self: &Arc<Self>) {
        for _ in 0..CLIENTS {
            let Ok((s, _)) = self.tcp.accept() else {
                return;
            };
            self.spawn(move |f| f.serve_tcp(s));
        }
    }

    /// One TCP client: each message gets [`CLIENT_TIMEOUT`] to arrive whole and its
    /// answer as long to leave, however the client spreads its bytes.
    fn serve_tcp(&self, mut s: TcpStream) {
        if s.set_nonblocking(false).is_err() {
            return;
        }
        loop {
            let Some(query) = read_framed(&mut s, Instant::now() + CLIENT_TIMEOUT) else {
                return;
            };
            let Some(reply) = self.answer(&query, true) else {
                return;
            };
            if write_framed(&mut s, &reply, Instant::now() + CLIENT_TIMEOUT).is_err() {
                return;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A client thread that panicked left the state as consistent as each step is.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The trie `st`'s policy admits into, while the selector has it in force.
    fn in_force(&self, st: &State) -> Option<std::os::fd::BorrowedFd<'_>> {
        (selected(&self.selector) == st.mine).then(|| self.tries[st.mine].as_fd())
    }

    /// Bumps a counter (under the lock: the forwarder's slots are read, then written).
    fn count(&self, _st: &State, slot: u32) {
        let _ = count(self.stats.as_fd(), slot);
    }

    fn gauges(&self, st: &State) {
        let names = u64::try_from(st.held.per_name.len()).unwrap_or(u64::MAX);
        let addrs = u64::try_from(st.held.by_addr.len()).unwrap_or(u64::MAX);
        let _ = gauge(self.stats.as_fd(), STATS_HELD_NAMES, names);
        let _ = gauge(self.stats.as_fd(), STATS_HELD_ADDRS, addrs);
    }

    /// A new policy and trie from `moat update --egress` ([`reconfigure`]). From moat
    /// only (the socket is root's, 0600); read here, on the main thread.
    fn one_control(&self) {
        let Ok((s, _)) = self.control.accept() else {
            return;
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(CLIENT_TIMEOUT));
        let reply = match self.reconfigured(s.as_fd()) {
            Ok(()) => "ok".to_string(),
            Err(e) => e,
        };
        let _ = sys::send_msg(s.as_fd(), reply.as_bytes(), None);
    }

    fn reconfigured(&self, s: std::os::fd::BorrowedFd<'_>) -> Result<(), String> {
        let (msg, trie) = recv_fd(s, "the new policy")?;
        let v: serde_json::Value =
            serde_json::from_slice(&msg).map_err(|e| format!("the new policy: {e}"))?;
        let egress = Egress::from_json(&v).ok_or("the new policy does not parse")?;
        let statics = egress.entries(Some(IpAddr::V4(self.addr)))?;
        let id = |fd: std::os::fd::BorrowedFd<'_>| sys::bpf::map_info(fd).map(|i| i.id).ok();
        let given = id(trie.as_fd());
        let mine = (0..2)
            .find(|i| given.is_some() && id(self.tries[*i].as_fd()) == given)
            .ok_or("the trie sent is not one of the container's two")?;
        let t = self.tries[mine].as_fd();
        let dns = [Range {
            lo: 53,
            hi: 53,
            protos: TCP | UDP,
        }];
        admit(t, IpAddr::V4(self.addr), &dns)
            .map_err(|e| format!("admit {} into the new trie: {e}", self.addr))?;
        let mut st = self.lock();
        let now = Instant::now();
        for (ip, name, until, _) in st.held.drain() {
            if until <= now || egress.rebinding(ip).is_some() {
                continue;
            }
            let Some(r) = egress.admitted(&name, ip, &statics) else {
                continue;
            };
            if st.held.hold(egress.forwarder, &name, ip, until, r).is_err() {
                self.count(&st, STATS_REFUSED_FULL);
            }
        }
        for ip in st.held.by_addr.keys() {
            let _ = admit(t, *ip, &st.held.union(*ip));
        }
        st.egress = egress;
        st.statics = statics;
        st.mine = mine;
        self.gauges(&st);
        Ok(())
    }

    /// Revokes what expired; returns how long until the next expiry.
    fn expire(&self) -> Option<Duration> {
        let mut st = self.lock();
        let now = Instant::now();
        let touched = st.held.expire(now);
        if !touched.is_empty() {
            if let Some(t) = self.in_force(&st) {
                for ip in touched {
                    let u = st.held.union(ip);
                    let _ = if u.is_empty() {
                        revoke(t, ip, &st.statics)
                    } else {
                        admit(t, ip, &u)
                    };
                }
            }
            self.gauges(&st);
        }
        st.held
            .next_expiry()
            .map(|n| n.saturating_duration_since(now))
    }

    /// The reply to one query (`None`: nothing to say, e.g. not DNS).
    fn answer(&self, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
        let q = simple_dns::Packet::parse(query).ok()?;
        if q.has_flags(simple_dns::PacketFlag::RESPONSE) {
            return None;
        }
        let [question] = q.questions.as_slice() else {
            return reply_with(&q, simple_dns::RCODE::Refused);
        };
        let name = norm(&question.qname.to_string());
        let upstreams = {
            let st = self.lock();
            if !st.egress.name_allowed(&name) {
                self.count(&st, STATS_REFUSED_NAMES);
                let _ = record_name(self.ring.as_fd(), STATS_REFUSED_NAMES, &name, None);
                return reply_with(&q, simple_dns::RCODE::Refused);
            }
            st.egress.resolvers.clone()
        };
        let Some(raw) = self.forward(query, tcp, &upstreams) else {
            return reply_with(&q, simple_dns::RCODE::ServerFailure);
        };
        let Ok(mut r) = simple_dns::Packet::parse(&raw) else {
            return reply_with(&q, simple_dns::RCODE::ServerFailure);
        };
        let same_question = r.questions.len() == 1
            && norm(&r.questions[0].qname.to_string()) == name
            && r.questions[0].qtype == question.qtype;
        if !same_question {
            return reply_with(&q, simple_dns::RCODE::ServerFailure);
        }
        self.admit_answer(&name, &r.answers);
        let mut out = if r.answers.iter().any(|a| a.ttl > TTL_CEILING) {
            for a in &mut r.answers {
                a.ttl = a.ttl.min(TTL_CEILING);
            }
            r.build_bytes_vec_compressed().ok()?
        } else {
            raw
        };
        // The client's id back in place of the upstream one.
        out[..2].copy_from_slice(&query[..2]);
        Some(out)
    }

    fn admit_answer(&self, name: &str, answers: &[simple_dns::ResourceRecord<'_>]) {
        let now = Instant::now();
        let mut st = self.lock();
        let trie = self.in_force(&st);
        for (ip, ttl) in addresses(name, answers) {
            // Loopback is reachable anyway but for DNS, which stays the forwarder's.
            if ip.is_loopback() || ip.to_canonical().is_loopback() {
                continue;
            }
            // A public name resolving into the host's own or a private network is DNS
            // rebinding, unless an address rule names that address.
            if st.egress.rebinding(ip).is_some() {
                self.count(&st, STATS_REFUSED_REBIND);
                let _ = record_name(self.ring.as_fd(), STATS_REFUSED_REBIND, name, Some(ip));
                continue;
            }
            let Some(ranges) = st.egress.admitted(name, ip, &st.statics) else {
                continue;
            };
            let ttl = ttl.clamp(TTL_FLOOR, TTL_CEILING);
            let until = now + Duration::from_secs(ttl.into());
            let limits = st.egress.forwarder;
            if st.held.hold(limits, name, ip, until, ranges).is_err() {
                self.count(&st, STATS_REFUSED_FULL);
                continue;
            }
            // Not in force: `update` flipped to a new list, whose policy comes next and
            // re-admits what it still allows.
            if let Some(t) = trie {
                let _ = admit(t, ip, &st.held.union(ip));
            }
        }
        self.gauges(&st);
    }

    /// A fresh query id for the upstream (the client's is not trusted to be random).
    fn next_id(&self) -> [u8; 2] {
        use std::hash::{BuildHasher, Hasher};
        let mut h = self.random.build_hasher();
        h.write_u64(self.seq.fetch_add(1, Ordering::Relaxed));
        let b = h.finish().to_le_bytes();
        [b[0], b[1]]
    }

    /// The first upstream's answer to `query`, over UDP or TCP as the client asked.
    fn forward(&self, query: &[u8], tcp: bool, upstreams: &[SocketAddr]) -> Option<Vec<u8>> {
        let mut msg = query.to_vec();
        for up in upstreams {
            let id = self.next_id();
            msg[..2].copy_from_slice(&id);
            let local = self.source_for(*up);
            let got = if tcp {
                forward_tcp(local, *up, &msg)
            } else {
                forward_udp(local, *up, &msg)
            };
            if let Some(r) = got.filter(|r| r.len() >= 12 && r[..2] == id) {
                return Some(r);
            }
        }
        None
    }

    /// The local address of the sockets to upstream `up`: for a loopback upstream (the
    /// engine's 127.0.0.11), the forwarder's own address, to which the container's
    /// programs let nothing but DNS to port 53 through: no container process can send a
    /// reply there, whatever source it binds. Other upstreams are reached from the
    /// container's interface address, which no container process can send from with
    /// the upstream's address (that takes `IP_TRANSPARENT`, i.e. `CAP_NET_ADMIN`).
    fn source_for(&self, up: SocketAddr) -> SocketAddr {
        match up {
            SocketAddr::V4(a) if a.ip().is_loopback() => (self.addr, 0).into(),
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        }
    }
}

/// The selector's slot 0: the trie in force (0 or 1).
fn selected(selector: &OwnedFd) -> usize {
    let mut v = [0u8; 4];
    let one = crate::linux::sys::bpf::map_lookup(selector.as_fd(), &0u32.to_ne_bytes(), &mut v)
        .unwrap_or(false)
        && u32::from_ne_bytes(v) == 1;
    usize::from(one)
}

fn forward_udp(local: SocketAddr, up: SocketAddr, msg: &[u8]) -> Option<Vec<u8>> {
    let s = UdpSocket::bind(local).ok()?;
    // Connected: the kernel hands this socket only datagrams from `up`.
    s.connect(up).ok()?;
    s.send(msg).ok()?;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    // EDNS answers over UDP stay far below this (1232 bytes is the usual size asked);
    // a larger one comes truncated and the client retries over TCP.
    let mut buf = vec![0u8; 8192];
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())?;
        s.set_read_timeout(Some(left)).ok()?;
        let n = s.recv(&mut buf).ok()?;
        if n >= 2 && buf[..2] == msg[..2] {
            buf.truncate(n);
            return Some(buf);
        }
    }
}

fn forward_tcp(local: SocketAddr, up: SocketAddr, msg: &[u8]) -> Option<Vec<u8>> {
    use nix::sys::socket::{self as so, SockFlag, SockType, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let deadline = Instant::now() + UPSTREAM_TIMEOUT;
    let family = match up {
        SocketAddr::V4(_) => so::AddressFamily::Inet,
        SocketAddr::V6(_) => so::AddressFamily::Inet6,
    };
    let fd = so::socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).ok()?;
    let sa = |a: SocketAddr| match a {
        SocketAddr::V4(a) => SockaddrStorage::from(a),
        SocketAddr::V6(a) => SockaddrStorage::from(a),
    };
    so::bind(fd.as_raw_fd(), &sa(local)).ok()?;
    let mut s = TcpStream::from(fd);
    // A blocking connect waits at most the send timeout.
    s.set_write_timeout(Some(UPSTREAM_TIMEOUT)).ok()?;
    so::connect(s.as_raw_fd(), &sa(up)).ok()?;
    write_framed(&mut s, msg, deadline).ok()?;
    read_framed(&mut s, deadline)
}

/// Fills `buf` from `s` by `deadline` (each read waits only what is left of it).
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Option<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())?;
        s.set_read_timeout(Some(left)).ok()?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(())
}

/// One DNS-over-TCP message (a two-byte length, then the message), whole by `deadline`.
fn read_framed(s: &mut TcpStream, deadline: Instant) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    read_exact_by(s, &mut len, deadline)?;
    let mut m = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(s, &mut m, deadline)?;
    Some(m)
}

fn write_framed(s: &mut TcpStream, m: &[u8], deadline: Instant) -> io::Result<()> {
    let len = u16::try_from(m.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(m);
    let mut sent = 0;
    while sent < out.len() {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::from(io::ErrorKind::TimedOut))?;
        s.set_write_timeout(Some(left))?;
        match s.write(&out[sent..]) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_stay_in_their_block_and_differ_per_attempt() {
        let a = address("c1", 0);
        assert_eq!(a.octets()[0], 127);
        assert!(a.octets()[1] >= 128);
        assert!((1..=254).contains(&a.octets()[3]));
        assert_ne!(address("c1", 0), address("c1", 1));
        assert_ne!(address("c1", 0), address("c2", 0));
        assert_eq!(address("c1", 3), address("c1", 3));
    }

    #[test]
    fn cname_chains_inside_the_answer_count_for_the_queried_name() {
        use simple_dns::rdata::{RData, A, CNAME};
        use simple_dns::{Name, ResourceRecord, CLASS};
        let rr = |n: &'static str, d: RData<'static>, ttl| {
            ResourceRecord::new(Name::new_unchecked(n), CLASS::IN, ttl, d)
        };
        let answers = vec![
            rr(
                "www.example.com",
                RData::CNAME(CNAME(Name::new_unchecked("edge.cdn.net"))),
                300,
            ),
            rr(
                "edge.cdn.net",
                RData::CNAME(CNAME(Name::new_unchecked("e1.cdn.net"))),
                60,
            ),
            rr(
                "e1.cdn.net",
                RData::A(A {
                    address: 0x0a000001,
                }),
                20,
            ),
            // Not on the chain: an answer may not smuggle other names' addresses in.
            rr(
                "other.org",
                RData::A(A {
                    address: 0x0a000002,
                }),
                20,
            ),
        ];
        let got = addresses("WWW.example.com.", &answers);
        assert_eq!(got, vec![("10.0.0.1".parse().unwrap(), 20)]);
        assert!(addresses("other.example.com", &answers).is_empty());
    }

    #[test]
    fn the_seccomp_filter_compiles_and_round_trips() {
        let f = seccomp_filter().unwrap();
        assert!(f.len() > 20, "{} instructions", f.len());
        let back = filter_of(&filter_bytes(&f)).unwrap();
        assert_eq!(filter_bytes(&back), filter_bytes(&f));
        assert!(filter_of(&[1, 2, 3]).is_none());
    }

    #[test]
    fn held_answers_stay_within_the_limits_and_expire_in_order() {
        let lim = ForwarderLimits {
            names: 2,
            answers: 2,
            ..ForwarderLimits::default()
        };
        let mut h = Held::default();
        let now = Instant::now();
        let s = Duration::from_secs;
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
        );
        assert_eq!(h.hold(lim, "x", a, now + s(5), vec![]), Ok(()));
        assert_eq!(h.hold(lim, "x", b, now + s(3), vec![]), Ok(()));
        assert_eq!(
            h.hold(lim, "x", c, now + s(3), vec![]),
            Err(Full),
            "answers"
        );
        assert_eq!(h.hold(lim, "y", a, now + s(1), vec![]), Ok(()));
        assert_eq!(h.hold(lim, "z", a, now + s(1), vec![]), Err(Full), "names");
        // An answer held already is renewed, full or not.
        assert_eq!(h.hold(lim, "x", a, now + s(10), vec![]), Ok(()));
        assert_eq!(h.expiry.len(), 3);
        assert_eq!(h.expire(now + s(2)), vec![a]);
        assert!(h.by_addr[&a].contains_key("x"), "x still holds a");
        assert_eq!(h.per_name.len(), 1);
        assert_eq!(h.expire(now + s(4)), vec![b]);
        assert_eq!(h.expire(now + s(6)), Vec::<IpAddr>::new(), "renewed");
        assert_eq!(h.expire(now + s(11)), vec![a]);
        assert!(h.by_addr.is_empty() && h.per_name.is_empty() && h.expiry.is_empty());
    }

    #[test]
    fn resolv_conf_keeps_the_engines_search_and_options() {
        let dir = std::env::temp_dir().join(format!("moat-dns-plan-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let engine = dir.join("engine-resolv");
        std::fs::write(
            &engine,
            "nameserver 10.0.0.2\nsearch a.svc b.svc\noptions ndots:5\n",
        )
        .unwrap();
        let mut spec = Spec::default();
        spec.mounts.push(Mount {
            destination: "/etc/resolv.conf".into(),
            typ: Some("bind".into()),
            source: Some(engine.display().to_string()),
            options: vec!["rbind".into(), "ro".into()],
            ..Default::default()
        });
        let (p, made) = plan(&mut spec, &dir, "c1");
        assert_eq!(made.0, dir.join(RESOLV_FILE));
        assert_eq!(spec.mounts.len(), 1);
        assert_eq!(
            spec.mounts[0].source.as_deref(),
            Some(dir.join(RESOLV_FILE).to_str().unwrap())
        );
        let text = resolv_text(p.first, &p.engine_lines);
        assert!(
            text.contains(&format!("nameserver {}\n", p.first)),
            "{text}"
        );
        assert!(!text.contains("10.0.0.2"), "{text}");
        assert!(text.contains("search a.svc b.svc\n"), "{text}");
        assert!(text.contains("options ndots:5\n"), "{text}");
        // No engine file: a read-only bind is added.
        let mut bare = Spec::default();
        let _ = plan(&mut bare, &dir, "c1");
        assert_eq!(bare.mounts.len(), 1);
        assert!(bare.mounts[0].options.iter().any(|o| o == "ro"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
