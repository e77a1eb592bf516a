//! Listening sockets of processes, read from /proc, and `sockprobe` (tests/support/sockprobe.c)
//! to connect to them: for the control-socket test (tests/gvisor.rs) and the listening-socket
//! audit (tests/sockets.rs, docs/security.md "Listening sockets").

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::*;

/// The static connect client, built once per run; `None` after a loud [`missing`] without
/// a compiler.
pub fn sockprobe() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| static_fixture("sockprobe.c", "moat-sockprobe"))
        .as_deref()
}

/// Runs `prefix… sockprobe args…` and returns its one line.
pub fn probe_with(prefix: &[&str], probe: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new(prefix.first().copied().unwrap_or(probe.to_str().unwrap()));
    if !prefix.is_empty() {
        cmd.args(&prefix[1..]).arg(probe);
    }
    cmd.args(args);
    let out = run_host_cmd(cmd, Duration::from_secs(20));
    assert_eq!(out.code, 0, "sockprobe {args:?}: {}", out.stderr);
    out.stdout.trim().to_string()
}

/// `sockprobe args…` as uid/gid 65534 without groups, on the host.
pub fn probe_as_nobody(probe: &Path, args: &[&str]) -> String {
    probe_with(
        &[
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
        ],
        probe,
        args,
    )
}

/// A probe's line says the connection was made.
pub fn reached(line: &str) -> bool {
    line.ends_with(" ok")
}

/// What a socket is bound to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bound {
    /// An abstract name as /proc/net/unix writes it (`@`, NULs as `@`), and the type.
    Abstract(String, u32),
    /// A path, and the type.
    Path(String, u32),
    Tcp(String, u16),
    Udp(String, u16),
}

impl Bound {
    /// The kind as docs/security.md's table names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Bound::Abstract(..) => "unix-abstract",
            Bound::Path(..) => "unix-path",
            Bound::Tcp(..) => "tcp",
            Bound::Udp(..) => "udp",
        }
    }

    /// The name, path or `ADDR:PORT`.
    pub fn address(&self) -> String {
        match self {
            Bound::Abstract(n, _) | Bound::Path(n, _) => n.clone(),
            Bound::Tcp(a, p) | Bound::Udp(a, p) => format!("{a}:{p}"),
        }
    }
}

/// A socket a process holds that others could connect or send to.
#[derive(Debug, Clone)]
pub struct Listener {
    pub pid: i32,
    /// The program: the file name of `/proc/<pid>/exe` (`moat-dns`, `runsc`, `sleep`, …),
    /// or argv[0] for runsc's re-executed processes (`runsc-sandbox`, `runsc-gofer`).
    pub program: String,
    /// The network namespace's inode.
    pub netns: u64,
    pub bound: Bound,
}

/// The program name of `pid` as the table names it.
pub fn program(pid: i32) -> String {
    let argv0 = fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|b| b.split(|&c| c == 0).next().map(|a| a.to_vec()))
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .unwrap_or_default();
    if argv0.starts_with("runsc-") {
        return argv0;
    }
    fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|n| n.trim_end_matches(" (deleted)").to_string())
        .unwrap_or(argv0)
}

/// The network namespace inode of `pid`.
pub fn netns_of(pid: i32) -> Option<u64> {
    fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// Every process below `ancestor` (by parent pid), `ancestor` excluded.
pub fn descendants(ancestor: i32) -> BTreeSet<i32> {
    let mut parent: BTreeMap<i32, i32> = BTreeMap::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parent.insert(pid, ppid);
        }
    }
    parent
        .keys()
        .copied()
        .filter(|&p| {
            let mut cur = p;
            for _ in 0..64 {
                match parent.get(&cur) {
                    Some(&pp) if pp == ancestor => return true,
                    Some(&pp) if pp > 1 => cur = pp,
                    _ => return false,
                }
            }
            false
        })
        .collect()
}

/// The sockets `pid` holds open: (fd number, inode).
fn socket_fds(pid: i32) -> Vec<(i32, u64)> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for e in rd.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Ok(t) = fs::read_link(e.path()) {
            let t = t.to_string_lossy();
            if let Some(i) = t
                .strip_prefix("socket:[")
                .and_then(|r| r.strip_suffix(']'))
                .and_then(|i| i.parse().ok())
            {
                out.push((fd, i));
            }
        }
    }
    out
}

/// The network namespace a socket lives in (which need not be its holder's: runsc binds
/// its control socket in one namespace and hands it to a sandbox in another): a copy of
/// `pid`'s descriptor `fd` (`pidfd_getfd`), asked with `SIOCGSKNS`.
fn socket_netns(pid: i32, fd: i32) -> Option<OwnedFd> {
    const SIOCGSKNS: libc::Ioctl = 0x894C;
    // SAFETY: plain syscalls on descriptors this function owns; each result is checked
    // before it is wrapped.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        if pidfd < 0 {
            return None;
        }
        let pidfd = OwnedFd::from_raw_fd(i32::try_from(pidfd).ok()?);
        let sock = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        if sock < 0 {
            return None;
        }
        let sock = OwnedFd::from_raw_fd(i32::try_from(sock).ok()?);
        let ns = libc::ioctl(sock.as_raw_fd(), SIOCGSKNS);
        if ns < 0 {
            return None;
        }
        Some(OwnedFd::from_raw_fd(ns))
    }
}

/// `/proc/net/<file>` of the network namespace `ns`, read by a thread that enters it.
fn read_net(ns: &OwnedFd, files: &[&str]) -> Vec<String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: setns of this thread only, on a namespace descriptor.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return files.iter().map(|_| String::new()).collect();
            }
            files
                .iter()
                .map(|f| {
                    fs::read_to_string(format!("/proc/thread-self/net/{f}")).unwrap_or_default()
                })
                .collect()
        })
        .join()
        .unwrap()
    })
}

/// An address of /proc/net/tcp{,6} / udp{,6} (`0100007F:0035`, host-endian words).
pub fn ip_port(hex: &str) -> Option<(String, u16)> {
    let (a, p) = hex.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let addr = match a.len() {
        8 => {
            let n = u32::from_str_radix(a, 16).ok()?;
            std::net::Ipv4Addr::from(n.to_le_bytes()).to_string()
        }
        32 => {
            let mut b = [0u8; 16];
            for w in 0..4 {
                let n = u32::from_str_radix(&a[w * 8..w * 8 + 8], 16).ok()?;
                b[w * 4..w * 4 + 4].copy_from_slice(&n.to_le_bytes());
            }
            std::net::Ipv6Addr::from(b).to_string()
        }
        _ => return None,
    };
    Some((addr, port))
}

/// Every socket the processes `pids` hold that listens (a Unix stream or seqpacket socket
/// in `listen`, a TCP socket in LISTEN) or can be sent to (a bound Unix datagram socket,
/// a bound UDP socket), each read from `/proc/net/*` of the namespace it lives in.
pub fn listeners(pids: &BTreeSet<i32>) -> Vec<Listener> {
    // Each socket: its holder and its namespace.
    let mut holder: BTreeMap<u64, (i32, u64)> = BTreeMap::new();
    let mut namespaces: BTreeMap<u64, OwnedFd> = BTreeMap::new();
    for &pid in pids {
        for (fd, ino) in socket_fds(pid) {
            if holder.contains_key(&ino) {
                continue;
            }
            let Some(ns) = socket_netns(pid, fd) else {
                continue;
            };
            let Ok(st) = nix::sys::stat::fstat(ns.as_raw_fd()) else {
                continue;
            };
            let nsid = st.st_ino;
            holder.insert(ino, (pid, nsid));
            namespaces.entry(nsid).or_insert(ns);
        }
    }
    let mut out = Vec::new();
    let mut push = |ino: u64, bound: Bound, netns: u64| {
        if let Some(&(pid, ns)) = holder.get(&ino) {
            if ns == netns {
                out.push(Listener {
                    pid,
                    program: program(pid),
                    netns,
                    bound,
                });
            }
        }
    };
    let files = ["unix", "tcp", "tcp6", "udp", "udp6"];
    for (nsid, ns) in &namespaces {
        let tables = read_net(ns, &files);
        // Num RefCount Protocol Flags Type St Inode Path
        for l in tables[0].lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 8 {
                continue;
            }
            let flags = u32::from_str_radix(f[3], 16).unwrap_or(0);
            let typ = u32::from_str_radix(f[4], 16).unwrap_or(0);
            let Ok(ino) = f[6].parse::<u64>() else {
                continue;
            };
            let name = f[7..].join(" ");
            const ACCEPTCON: u32 = 0x10000;
            if flags & ACCEPTCON == 0 && typ != 2 {
                continue;
            }
            let bound = if name.starts_with('@') {
                Bound::Abstract(name, typ)
            } else {
                Bound::Path(name, typ)
            };
            push(ino, bound, *nsid);
        }
        for (t, udp) in tables[1..].iter().zip([false, false, true, true]) {
            for l in t.lines().skip(1) {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 10 {
                    continue;
                }
                let Some((addr, port)) = ip_port(f[1]) else {
                    continue;
                };
                let Ok(ino) = f[9].parse::<u64>() else {
                    continue;
                };
                // TCP_LISTEN is 0A; a UDP socket with a local port receives.
                if udp && port != 0 {
                    push(ino, Bound::Udp(addr, port), *nsid);
                } else if !udp && f[3] == "0A" {
                    push(ino, Bound::Tcp(addr, port), *nsid);
                }
            }
        }
    }
    out.sort_by(|a, b| (&a.program, &a.bound).cmp(&(&b.program, &b.bound)));
    out
}

/// Unix socket files below `dir` (a state root): moat's and runsc's path sockets, where
/// /proc/net/unix may name them by a `/proc/self/fd/N/…` path their binder used.
pub fn socket_files(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else {
            continue;
        };
        if t.is_socket() {
            out.push(e.path());
        } else if t.is_dir() {
            out.extend(socket_files(&e.path()));
        }
    }
    out
}

/// One row of docs/security.md's "Listening sockets" table.
#[derive(Debug, Clone)]
pub struct Documented {
    pub program: String,
    pub kind: String,
    /// A pattern: `*` matches any run of characters (`<id>` stands for the container's id).
    pub address: String,
    /// `container`: the container's own network namespace (never the host's);
    /// `host`: any.
    pub namespace: String,
    pub why: String,
}

/// The table under "## Listening sockets" in docs/security.md: its first Markdown table,
/// cells unquoted from backticks.
pub fn documented() -> Vec<Documented> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md"))
        .expect("docs/security.md");
    let start = doc
        .find("\n## Listening sockets\n")
        .expect("docs/security.md has a \"Listening sockets\" section");
    let rows: Vec<Vec<String>> = doc[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect()
        })
        .collect();
    assert!(!rows.is_empty(), "the Listening sockets table has no rows");
    rows.into_iter()
        .map(|c| {
            assert_eq!(c.len(), 5, "a Listening sockets row has 5 cells: {c:?}");
            Documented {
                program: c[0].clone(),
                kind: c[1].clone(),
                address: c[2].clone(),
                namespace: c[3].clone(),
                why: c[4].clone(),
            }
        })
        .collect()
}

/// `*` matches any run of characters.
pub fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => {
            let Some(rest) = s.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob(tail, &rest[i..]))
        }
    }
}

/// The documented row that covers `l` (its namespace is not `host_netns` for a
/// `container` row), if any.
pub fn covering<'a>(
    rows: &'a [Documented],
    l: &Listener,
    host_netns: u64,
) -> Option<&'a Documented> {
    rows.iter().find(|r| {
        glob(&r.program, &l.program)
            && r.kind == l.bound.kind()
            && glob(&r.address, &l.bound.address())
            && (r.namespace != "container" || l.netns != host_netns)
    })
}
