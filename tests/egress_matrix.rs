//! The egress protocol matrix: every `socket(2)` (family, type, protocol) this kernel makes,
//! each through every send path (tests/support/sockmatrix.c: connect+send, sendto, sendmsg,
//! sendmmsg, connected-then-sendto, a source route by socket option and by ancillary data,
//! TCP Fast Open by `sendto` and by `TCP_FASTOPEN_CONNECT`), to the address a list allows,
//! another address of the world and every metadata endpoint (NAT64 included), over IPv4,
//! IPv6 and IPv4-mapped IPv6, in one container per egress configuration: RESTRICTED with no
//! list (the metadata block alone), a list naming one world address per family, and
//! `moat.egress=none`; natively and under gVisor (runsc's host sockets in the container's
//! namespace). A run prints the kernel's triples, what each container makes, and per
//! configuration the cells, how many were made, refused at creation, refused at send, sent,
//! and reached the world; `MOAT_MATRIX_OUT=DIR` keeps every cell's line.
//!
//! The oracle is a packet capture (an `AF_PACKET` socket of the test's) on the world's end
//! of the only link the container's network namespace has, not what the syscalls said:
//! every packet that arrives there is parsed (header destination, protocol, destination
//! port, and the payload's `MXC<cell>;` marker) and matched to the cell that sent it. A
//! packet for a refused destination fails the test; the allowed address must be reached (the
//! capture sees traffic), and the same sweep under OPEN with no list (no egress program
//! attached) must reach every refused destination (the capture sees what a missing defence
//! lets through).
//!
//! The world is two network namespaces of the test's: `W` holds every destination address on
//! `lo` (so TCP is answered with a reset at once and nothing waits) and one veth to `C`, the
//! containers' namespace, whose default routes point into `W`. `W` forwards nothing: no
//! packet can leave the two namespaces.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    setsockopt, socket, sockopt, AddressFamily, SockFlag, SockProtocol, SockType,
};
use support::*;

/// The destinations, `label=address` as sockmatrix takes them; the first is the one the
/// `conn2` and `srr` paths connect to (IPv4; its IPv6 twin is the first IPv6 one). "other":
/// a world address the list does not name.
const DESTS: &[(&str, &str)] = &[
    ("allowed", "198.18.0.10"),
    ("other", "198.18.0.11"),
    ("md", "169.254.169.254"),
    ("md-ecs", "169.254.170.2"),
    ("md-ali", "100.100.100.200"),
    ("allowed6", "2001:db8:e::10"),
    ("other6", "2001:db8:e::11"),
    ("md6", "fd00:ec2::254"),
    ("md-nat64", "64:ff9b::a9fe:a9fe"),
];

/// The list of the "list" configuration: one world address per family, every port.
const LIST: &str = "198.18.0.10,[2001:db8:e::10]";

const METADATA_LABELS: &[&str] = &["md", "md-ecs", "md-ali", "md6", "md-nat64"];

/// One egress configuration of the sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Config {
    /// RESTRICTED, no list: the metadata block alone.
    Meta,
    /// RESTRICTED, [`LIST`].
    List,
    /// RESTRICTED, `moat.egress=none`.
    None,
    /// OPEN, no list: no egress program (the defence removed; the oracle must see leaks).
    Open,
}

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Meta => "no-list",
            Config::List => "list",
            Config::None => "none",
            Config::Open => "open-no-programs",
        }
    }

    /// Whether a cell to `label` must not reach the world.
    fn refuses(self, label: &str) -> bool {
        match self {
            Config::Meta => METADATA_LABELS.contains(&label),
            Config::List => !label.starts_with("allowed"),
            Config::None => true,
            Config::Open => false,
        }
    }
}

// ---- The world: two namespaces of the test's ----

struct Netns {
    world: String,
    ctr: String,
}

#[track_caller]
fn ip(args: &[&str]) {
    let o = Command::new("ip").args(args).run_output().expect("ip");
    assert!(o.status.success(), "ip {args:?}: {}", stderr_of(&o));
}

#[track_caller]
fn in_ns(ns: &str, script: &str) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", script])
        .run_output()
        .expect("ip netns exec");
    assert!(o.status.success(), "{ns}: {script}: {}", stderr_of(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Netns {
    fn new(tag: &str) -> Netns {
        let p = std::process::id() % 100_000;
        let n = Netns {
            world: format!("mxw{p}{tag}"),
            ctr: format!("mxc{p}{tag}"),
        };
        for ns in [&n.world, &n.ctr] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .run_status();
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            in_ns(
                ns,
                "sysctl -q -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 \
                 net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0",
            );
        }
        ip(&[
            "-n", &n.world, "link", "add", "mxw0", "type", "veth", "peer", "name", "eth0", "netns",
            &n.ctr,
        ]);
        ip(&[
            "-n",
            &n.world,
            "addr",
            "add",
            "198.18.200.1/24",
            "dev",
            "mxw0",
        ]);
        ip(&[
            "-n",
            &n.world,
            "addr",
            "add",
            "2001:db8:e:200::1/64",
            "dev",
            "mxw0",
            "nodad",
        ]);
        ip(&["-n", &n.world, "link", "set", "mxw0", "up"]);
        ip(&[
            "-n",
            &n.ctr,
            "addr",
            "add",
            "198.18.200.2/24",
            "dev",
            "eth0",
        ]);
        ip(&[
            "-n",
            &n.ctr,
            "addr",
            "add",
            "2001:db8:e:200::2/64",
            "dev",
            "eth0",
            "nodad",
        ]);
        ip(&["-n", &n.ctr, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            &n.ctr,
            "route",
            "add",
            "default",
            "via",
            "198.18.200.1",
        ]);
        ip(&[
            "-n",
            &n.ctr,
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:db8:e:200::1",
        ]);
        for (_, a) in DESTS {
            if a.contains(':') {
                ip(&[
                    "-n",
                    &n.world,
                    "addr",
                    "add",
                    &format!("{a}/128"),
                    "dev",
                    "lo",
                    "nodad",
                ]);
            } else {
                ip(&[
                    "-n",
                    &n.world,
                    "addr",
                    "add",
                    &format!("{a}/32"),
                    "dev",
                    "lo",
                ]);
            }
        }
        // Ping sockets for every group, as podman and Docker set it.
        in_ns(
            &n.ctr,
            "echo 0 2147483647 >/proc/sys/net/ipv4/ping_group_range",
        );
        n
    }

    fn ctr_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.ctr)
    }

    fn world_ifindex(&self) -> i32 {
        let out = in_ns(&self.world, "cat /sys/class/net/mxw0/ifindex");
        out.trim().parse().expect("ifindex of mxw0")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in [&self.ctr, &self.world] {
            let _ = Command::new("ip").args(["netns", "del", ns]).run_status();
        }
    }
}

// ---- The oracle: an AF_PACKET capture in the world ----

/// One IPv4/IPv6 packet that arrived in the world from the container's namespace.
#[derive(Debug, Clone)]
struct Pkt {
    dst: IpAddr,
    proto: u8,
    dport: Option<u16>,
    marker: Option<u32>,
}

struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<(Vec<Pkt>, u32)>>,
}

impl Capture {
    /// Starts capturing on the world's end of the link (`ifindex` in the namespace `world`).
    fn start(world: &str, ifindex: i32) -> Capture {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let ns = fs::File::open(Path::new("/run/netns").join(world)).expect("open world netns");
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // This thread alone enters the world; the socket stays there.
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("setns into the world");
            let fd = socket(
                AddressFamily::Packet,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                SockProtocol::EthAll,
            )
            .expect("AF_PACKET socket in the world");
            setsockopt(&fd, sockopt::RcvBufForce, &(64 << 20)).expect("SO_RCVBUFFORCE");
            setsockopt(
                &fd,
                sockopt::ReceiveTimeout,
                &nix::sys::time::TimeVal::new(0, 100_000),
            )
            .expect("SO_RCVTIMEO");
            tx.send(()).expect("capture ready");
            read_packets(&fd, ifindex, &s)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the capture did not start");
        Capture {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops after the world has been quiet for a moment; the packets and the socket's
    /// drop count (must be 0: a dropped packet could be a leak).
    fn finish(mut self) -> (Vec<Pkt>, u32) {
        std::thread::sleep(Duration::from_millis(500));
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .expect("capture thread")
            .join()
            .expect("capture thread panicked")
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const PACKET_OUTGOING: u8 = 4;

fn read_packets(fd: &OwnedFd, ifindex: i32, stop: &AtomicBool) -> (Vec<Pkt>, u32) {
    let mut pkts = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        match recv_ll(fd, &mut buf) {
            Ok((n, from)) => {
                if from.sll_ifindex == ifindex && from.sll_pkttype != PACKET_OUTGOING {
                    if let Some(p) = parse(&buf[..n]) {
                        pkts.push(p);
                    }
                }
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            Err(e) => panic!("capture: {e}"),
        }
    }
    (pkts, packet_drops(fd))
}

/// One packet and the link-layer address it came with (nix's `LinkAddr` needs its `net`
/// feature, which moat does not build).
fn recv_ll(fd: &OwnedFd, buf: &mut [u8]) -> nix::Result<(usize, libc::sockaddr_ll)> {
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of_val(&from)).expect("size");
    // SAFETY: recvfrom writes at most buf.len() bytes into buf and at most `len` bytes into
    // `from`, which is that large; fd is an open AF_PACKET socket.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            std::ptr::addr_of_mut!(from).cast(),
            &mut len,
        )
    };
    let n = usize::try_from(n).map_err(|_| nix::errno::Errno::last())?;
    Ok((n, from))
}

/// `PACKET_STATISTICS`: packets the socket dropped (its buffer full).
fn packet_drops(fd: &OwnedFd) -> u32 {
    let mut st = [0u32; 2];
    let mut len = libc::socklen_t::try_from(std::mem::size_of_val(&st)).expect("size");
    // SAFETY: getsockopt writes at most `len` bytes into `st`, which is that large, and
    // `len` back; fd is an open AF_PACKET socket.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            st.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "PACKET_STATISTICS");
    st[1]
}

/// The header destination, protocol (after IPv6 extension headers), destination port
/// (protocols whose header starts with the ports) and sockmatrix's marker of a packet.
fn parse(d: &[u8]) -> Option<Pkt> {
    let (dst, mut proto, mut off, mut first_fragment) = match d.first()? >> 4 {
        4 if d.len() >= 20 => {
            let ihl = usize::from(d[0] & 0xf) * 4;
            let frag = u16::from(d[6] & 0x1f) << 8 | u16::from(d[7]);
            let a: [u8; 4] = d[16..20].try_into().ok()?;
            (IpAddr::V4(Ipv4Addr::from(a)), d[9], ihl, frag == 0)
        }
        6 if d.len() >= 40 => {
            let a: [u8; 16] = d[24..40].try_into().ok()?;
            (IpAddr::V6(Ipv6Addr::from(a)), d[6], 40, true)
        }
        _ => return None,
    };
    if dst.is_ipv6() {
        // Hop-by-hop, routing, destination options, fragment, AH.
        for _ in 0..8 {
            match proto {
                0 | 43 | 60 if d.len() >= off + 2 => {
                    proto = d[off];
                    off += (usize::from(d[off + 1]) + 1) * 8;
                }
                44 if d.len() >= off + 8 => {
                    proto = d[off];
                    first_fragment = (u16::from(d[off + 2]) << 8 | u16::from(d[off + 3])) >> 3 == 0;
                    off += 8;
                }
                51 if d.len() >= off + 2 => {
                    proto = d[off];
                    off += (usize::from(d[off + 1]) + 2) * 4;
                }
                _ => break,
            }
        }
    }
    let dport = match proto {
        6 | 17 | 33 | 132 | 136 if first_fragment && d.len() >= off + 4 => {
            Some(u16::from(d[off + 2]) << 8 | u16::from(d[off + 3]))
        }
        _ => None,
    };
    let marker = d.windows(3).position(|w| w == b"MXC").and_then(|i| {
        let digits: String = d[i + 3..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .map(|&c| char::from(c))
            .collect();
        digits.parse().ok()
    });
    Some(Pkt {
        dst,
        proto,
        dport,
        marker,
    })
}

// ---- The probe ----

/// tests/support/sockmatrix.c, built statically once per run.
fn sockmatrix() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| static_fixture("sockmatrix.c", "moat-sockmatrix"))
        .as_deref()
}

/// Families the sweep may try. `socket(2)` of a family the kernel lacks asks for the
/// module `net-pf-N`: on a kernel without module support (`/proc/modules` absent, as here:
/// `CONFIG_MODULES` off) or with loading disabled every family is tried; otherwise only
/// families already registered (named by /proc/net/protocols), so the sweep loads nothing
/// into the host. `None`: all; the reason is printed either way.
fn families() -> Option<String> {
    if !Path::new("/proc/modules").exists() {
        eprintln!("matrix: /proc/modules absent (CONFIG_MODULES off): no module can autoload; every family 0..63 is tried");
        return None;
    }
    if fs::read_to_string("/proc/sys/kernel/modules_disabled").is_ok_and(|s| s.trim() == "1") {
        eprintln!(
            "matrix: kernel.modules_disabled=1: no module can load; every family 0..63 is tried"
        );
        return None;
    }
    let protos = fs::read_to_string("/proc/net/protocols").unwrap_or_default();
    let mut fams = BTreeSet::from([libc::AF_UNIX, libc::AF_NETLINK]);
    for l in protos.lines().skip(1) {
        let name = l.split_whitespace().next().unwrap_or("");
        let f = match name {
            "TCP" | "UDP" | "UDP-Lite" | "RAW" | "PING" | "MPTCP" | "SCTP" | "DCCP" | "L2TP/IP"
            | "SMC" => libc::AF_INET,
            n if n.ends_with("v6") => libc::AF_INET6,
            "PACKET" => libc::AF_PACKET,
            "AF_VSOCK" => libc::AF_VSOCK,
            "XDP" => libc::AF_XDP,
            "KEY" => libc::AF_KEY,
            "TIPC" => libc::AF_TIPC,
            "RDS" => libc::AF_RDS,
            "KCM" => 41,
            "ALG" => libc::AF_ALG,
            "MCTP" => 45,
            _ => continue,
        };
        fams.insert(f);
    }
    let list = fams
        .iter()
        .map(|f| f.to_string())
        .collect::<Vec<_>>()
        .join(",");
    eprintln!("matrix: modules can autoload here: only the families /proc/net/protocols shows registered are tried ({list})");
    Some(list)
}

type Triple = (i32, i32, i32);

fn sock_lines(out: &str) -> Vec<(Triple, String)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.first() != Some(&"sock") || f.len() < 5 {
                return None;
            }
            let n = |k: usize| f[k].parse::<i32>().ok();
            let res = if f[4] == "ok" { "ok" } else { f.get(5)? };
            Some(((n(1)?, n(2)?, n(3)?), res.to_string()))
        })
        .collect()
}

/// What the host's kernel makes, for root in a namespace of the test's with ping sockets
/// open: the sweep's triples (each is tried in every container, made there or refused).
/// Once per run (closing ~800 packet sockets takes ~15 s: each waits for an RCU grace
/// period).
fn kernel_triples(probe: &Path, fams: Option<&str>) -> &'static [Triple] {
    static T: OnceLock<Vec<Triple>> = OnceLock::new();
    T.get_or_init(|| {
        let ns = Netns::new("e");
        enumerate(probe, &ns, fams)
    })
}

fn enumerate(probe: &Path, ns: &Netns, fams: Option<&str>) -> Vec<Triple> {
    let o = Command::new("nsenter")
        .arg(format!("--net={}", ns.ctr_path().display()))
        .arg(probe)
        .arg("enum")
        .env("SOCKMATRIX_FAMILIES", fams.unwrap_or(""))
        .run_output()
        .expect("nsenter sockmatrix enum");
    assert!(o.status.success(), "sockmatrix enum: {}", stderr_of(&o));
    sock_lines(&String::from_utf8_lossy(&o.stdout))
        .into_iter()
        .filter(|(_, r)| r == "ok")
        .map(|(t, _)| t)
        .collect()
}

/// "0-3, 6, 262".
fn ranges(ps: &BTreeSet<i32>) -> String {
    let mut rs: Vec<(i32, i32)> = Vec::new();
    for &p in ps {
        match rs.last_mut() {
            Some((_, hi)) if *hi + 1 == p => *hi = p,
            _ => rs.push((p, p)),
        }
    }
    rs.iter()
        .map(|(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The kernel's table, one line per (family, type): its protocols as ranges.
fn table(triples: &[Triple]) -> String {
    let mut by: BTreeMap<(i32, i32), BTreeSet<i32>> = BTreeMap::new();
    for &(f, t, p) in triples {
        by.entry((f, t)).or_default().insert(p);
    }
    by.iter()
        .map(|((f, t), ps)| format!("  family {f:2} type {t:2}: {}\n", ranges(ps)))
        .collect()
}

/// Protocol numbers of a docs table cell: "0, 6 (TCP), 262 (MPTCP)" → 0, 6, 262; "1–256"
/// a range; "none" nothing; `None` for "any".
fn doc_protocols(cell: &str) -> Option<BTreeSet<i32>> {
    let mut plain = String::new();
    let mut depth = 0;
    for ch in cell.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    if plain.contains("any") {
        return None;
    }
    let mut out = BTreeSet::new();
    for part in plain.split(',') {
        let part = part.trim();
        let mut ends = part.split(['–', '-']).map(|x| x.trim().parse::<i32>());
        match (ends.next(), ends.next()) {
            (Some(Ok(a)), Some(Ok(b))) => out.extend(a..=b),
            (Some(Ok(a)), None) => {
                out.insert(a);
            }
            _ => {}
        }
    }
    Some(out)
}

/// docs/security.md's "Socket creation" table: (family, type) → the protocols it says the
/// kernel makes (`None`: any). Rows naming several families or types count for each.
fn docs_table() -> BTreeMap<(i32, i32), Option<BTreeSet<i32>>> {
    let doc = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/security.md"))
        .expect("docs/security.md");
    let start = doc
        .find("| family | type | protocols `socket(2)` makes")
        .expect("docs/security.md: the socket creation table");
    let mut map: BTreeMap<(i32, i32), Option<BTreeSet<i32>>> = BTreeMap::new();
    for row in doc[start..].lines().skip(2) {
        if !row.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (fams, types, protos) = (cells[1], cells[2], cells[3]);
        let fams: Vec<i32> = fams
            .split(',')
            .filter_map(|f| match f.trim() {
                "AF_INET" => Some(libc::AF_INET),
                "AF_INET6" => Some(libc::AF_INET6),
                _ => None,
            })
            .collect();
        let types: Vec<i32> = types
            .split(',')
            .filter_map(|t| match t.trim().trim_start_matches("SOCK_") {
                "STREAM" => Some(libc::SOCK_STREAM),
                "DGRAM" => Some(libc::SOCK_DGRAM),
                "RAW" => Some(libc::SOCK_RAW),
                "RDM" => Some(libc::SOCK_RDM),
                "SEQPACKET" => Some(libc::SOCK_SEQPACKET),
                "DCCP" => Some(libc::SOCK_DCCP),
                // SOCK_PACKET (libc marks it deprecated).
                "PACKET" => Some(10),
                _ => None,
            })
            .collect();
        let ps = doc_protocols(protos);
        for &f in &fams {
            for &t in &types {
                let e = map.entry((f, t)).or_insert_with(|| Some(BTreeSet::new()));
                match (e.as_mut(), &ps) {
                    (Some(have), Some(more)) => have.extend(more),
                    _ => *e = None,
                }
            }
        }
    }
    map
}

/// The inet rows of docs/security.md's table against what the kernel made: differences.
fn docs_differ(triples: &[Triple]) -> Vec<String> {
    let docs = docs_table();
    let mut kernel: BTreeMap<(i32, i32), BTreeSet<i32>> = BTreeMap::new();
    for &(f, t, p) in triples {
        if f == libc::AF_INET || f == libc::AF_INET6 {
            kernel.entry((f, t)).or_default().insert(p);
        }
    }
    let mut out = Vec::new();
    for (k, ps) in &kernel {
        match docs.get(k) {
            None => out.push(format!(
                "{k:?}: the kernel makes {}; the docs' table has no row",
                ranges(ps)
            )),
            Some(Some(d)) if d != ps => out.push(format!(
                "{k:?}: the kernel makes {}; the docs say {}",
                ranges(ps),
                ranges(d)
            )),
            _ => {}
        }
    }
    for (k, d) in &docs {
        if !kernel.contains_key(k) && d.as_ref().is_some_and(|d| !d.is_empty()) {
            out.push(format!(
                "{k:?}: the docs say {}; the kernel makes none",
                d.as_ref().map(ranges).unwrap_or_default()
            ));
        }
    }
    out
}

/// One cell the probe tried on a socket it made.
struct Cell {
    idx: u32,
    line: String,
    label: String,
    hdr: IpAddr,
    port: u16,
    ok: bool,
}

/// A sweep's counts and findings, for one configuration.
#[derive(Default)]
struct Summary {
    cells: usize,
    made: usize,
    refused_at_creation: usize,
    refused_at_send: usize,
    sent: usize,
    reached: usize,
    /// Cells to a destination the configuration refuses that reached the world.
    leaks: Vec<String>,
    /// Packets to a refused destination that no cell claims.
    stray: Vec<String>,
    /// Cells reached, per destination label and form.
    reached_by: BTreeMap<String, usize>,
    drops: u32,
}

fn analyse(config: Config, out: &str, pkts: &[Pkt], drops: u32, triples: &[Triple]) -> Summary {
    let mut s = Summary {
        drops,
        ..Summary::default()
    };
    let universe: BTreeSet<Triple> = triples.iter().copied().collect();
    let mut cells = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.first() {
            Some(&"nosock") if f.len() == 6 => {
                let n: usize = f[5].parse().expect("nosock cells");
                s.cells += n;
                s.refused_at_creation += n;
            }
            Some(&"cell") if f.len() == 11 => {
                let t: Triple = (
                    f[2].parse().expect("family"),
                    f[3].parse().expect("type"),
                    f[4].parse().expect("protocol"),
                );
                if !universe.contains(&t) {
                    eprintln!("matrix: {}: the container made {t:?}, which the host's root enumeration did not", config.name());
                }
                s.cells += 1;
                s.made += 1;
                let ok = f[10] == "ok";
                if ok {
                    s.sent += 1;
                } else {
                    s.refused_at_send += 1;
                }
                cells.push(Cell {
                    idx: f[1].parse().expect("cell index"),
                    line: l.to_string(),
                    label: f[6].to_string(),
                    hdr: f[8].parse().expect("header address"),
                    port: f[9].parse().expect("port"),
                    ok,
                });
            }
            _ => {}
        }
    }
    // Packets by (destination, marker) and (destination, port).
    let mut by_marker: HashMap<(IpAddr, u32), usize> = HashMap::new();
    let mut by_port: HashMap<(IpAddr, u16), usize> = HashMap::new();
    for p in pkts {
        if let Some(m) = p.marker {
            *by_marker.entry((p.dst, m)).or_default() += 1;
        } else if let Some(port) = p.dport {
            *by_port.entry((p.dst, port)).or_default() += 1;
        }
    }
    let mut claimed: BTreeSet<(IpAddr, Option<u32>, Option<u16>)> = BTreeSet::new();
    for c in &cells {
        let hit = by_marker.contains_key(&(c.hdr, c.idx)) || by_port.contains_key(&(c.hdr, c.port));
        if !hit {
            continue;
        }
        claimed.insert((c.hdr, Some(c.idx), None));
        claimed.insert((c.hdr, None, Some(c.port)));
        s.reached += 1;
        let form = c.line.split_whitespace().nth(7).unwrap_or("");
        *s.reached_by
            .entry(format!("{} {form}", c.label))
            .or_default() += 1;
        if config.refuses(&c.label) {
            s.leaks.push(format!(
                "{} (the syscall said {})",
                c.line,
                if c.ok { "ok" } else { "no" }
            ));
        }
    }
    let refused_addrs: BTreeSet<IpAddr> = DESTS
        .iter()
        .filter(|(l, _)| config.refuses(l))
        .map(|(_, a)| a.parse().expect("address"))
        .collect();
    for p in pkts {
        if !refused_addrs.contains(&p.dst) {
            continue;
        }
        let mine = claimed.contains(&(p.dst, p.marker, None))
            || (p.marker.is_none() && claimed.contains(&(p.dst, None, p.dport)));
        if !mine {
            s.stray.push(format!(
                "to {} protocol {} port {:?} marker {:?}",
                p.dst, p.proto, p.dport, p.marker
            ));
        }
    }
    s
}

/// Runs the sweep in one container of `config` (gVisor if `gvisor`) with the capture on;
/// returns the probe's output, the packets and the capture's drop count.
fn sweep(
    ns: &Netns,
    probe: &Path,
    triples: &[Triple],
    fams: Option<&str>,
    config: Config,
    gvisor: bool,
) -> (String, Vec<Pkt>, u32) {
    let tag = format!("mx-{}{}", config.name(), if gvisor { "-g" } else { "" });
    let mut ctx = Ctx::new(&tag);
    let cfg = ctx.dir.join("moat-config.toml");
    fs::write(
        &cfg,
        if config == Config::Open {
            "default_policy = \"open\"\n"
        } else {
            ""
        },
    )
    .expect("write moat config");
    ctx.use_config(&cfg);
    let nss = ctx.config["linux"]["namespaces"]
        .as_array_mut()
        .expect("namespaces");
    nss.retain(|n| n["type"] != "network");
    nss.push(json!({"type": "network", "path": ns.ctr_path()}));
    let dst = ctx.rootfs().join("bin/sockmatrix");
    fs::copy(probe, &dst).expect("copy sockmatrix into the rootfs");
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).expect("chmod");
    let list: String = triples
        .iter()
        .map(|(f, t, p)| format!("{f} {t} {p}\n"))
        .collect();
    fs::write(ctx.rootfs().join("triples"), list).expect("write triples");
    if config == Config::Open {
        // The same sockets RESTRICTED makes: without CAP_NET_RAW (closing thousands of raw
        // and packet sockets takes minutes; they are the operator's grant under OPEN).
        for set in [
            "bounding",
            "effective",
            "permitted",
            "inheritable",
            "ambient",
        ] {
            if let Some(a) = ctx.config["process"]["capabilities"][set].as_array_mut() {
                a.retain(|c| c != "CAP_NET_RAW");
            }
        }
    }
    match config {
        Config::List => {
            ctx.set("/annotations/moat.egress", json!(LIST));
        }
        Config::None => {
            ctx.set("/annotations/moat.egress", json!("none"));
        }
        _ => {}
    }
    if gvisor {
        ctx.set("/annotations/moat.runtime", json!("gvisor"));
    }
    let mut args = vec![
        "/bin/sockmatrix".to_string(),
        "sweep".into(),
        "/triples".into(),
    ];
    args.extend(DESTS.iter().map(|(l, a)| format!("{l}={a}")));
    ctx.set("/process/args", json!(args));
    if let Some(f) = fams {
        ctx.push("/process/env", json!(format!("SOCKMATRIX_FAMILIES={f}")));
    }
    let cap = Capture::start(&ns.world, ns.world_ifindex());
    let c = ctx.create_ok("c");
    let t0 = Instant::now();
    c.start().ok();
    c.wait_stopped(Duration::from_secs(240));
    let secs = t0.elapsed().as_secs_f64();
    let out = c.stdout();
    let err = c.stderr();
    let (pkts, drops) = cap.finish();
    let d = c.delete();
    assert_eq!(d.code, 0, "delete: {}", d.stderr);
    // MOAT_MATRIX_OUT=DIR keeps each sweep's lines, to read every cell.
    if let Some(dir) = std::env::var_os("MOAT_MATRIX_OUT") {
        let _ = fs::write(Path::new(&dir).join(format!("{tag}.txt")), &out);
    }
    assert!(
        out.lines().any(|l| l.starts_with("done ")),
        "{tag}: the sweep did not finish in {secs:.0} s: {} (stderr: {err})",
        out.lines().last().unwrap_or("")
    );
    eprintln!(
        "matrix: {tag}: sweep {secs:.1} s, {} packets captured",
        pkts.len()
    );
    (out, pkts, drops)
}

fn report(config: Config, gvisor: bool, s: &Summary) -> String {
    format!(
        "{}{}: {} cells: {} on a socket made, {} refused at creation, {} refused at send, {} sent; {} reached the world ({} to a refused destination, {} stray packets); reached: {:?}; capture drops {}",
        config.name(),
        if gvisor { " (gVisor)" } else { "" },
        s.cells,
        s.made,
        s.refused_at_creation,
        s.refused_at_send,
        s.sent,
        s.reached,
        s.leaks.len(),
        s.stray.len(),
        s.reached_by,
        s.drops
    )
}

/// The whole matrix in one runtime: the three configurations, each must leak nothing and
/// (but `none`) reach its allowed addresses; then OPEN with no program, where every
/// refused destination must be reached (the oracle works).
fn matrix(gvisor: bool) {
    if !require_root() {
        return;
    }
    if gvisor {
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()));
        if !found {
            return missing("runsc not installed: the gVisor egress matrix");
        }
    }
    let Some(probe) = sockmatrix() else { return };
    let fams = families();
    let triples = kernel_triples(probe, fams.as_deref());
    let ns = Netns::new(if gvisor { "g" } else { "n" });
    eprintln!(
        "matrix: this kernel makes {} (family, type, protocol) triples for root:\n{}",
        triples.len(),
        table(triples)
    );
    assert!(
        triples.contains(&(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_UDPLITE)),
        "the enumeration found no UDP-Lite socket: {triples:?}"
    );
    let differ = docs_differ(triples);
    assert!(
        differ.is_empty(),
        "docs/security.md's socket creation table is not this kernel's:\n{}",
        differ.join("\n")
    );
    let mut failures = Vec::new();
    let mut total = Summary::default();
    for config in [Config::Meta, Config::List, Config::None, Config::Open] {
        let (out, pkts, drops) = sweep(&ns, probe, triples, fams.as_deref(), config, gvisor);
        let s = analyse(config, &out, &pkts, drops, triples);
        let made: Vec<Triple> = sock_lines(&out)
            .into_iter()
            .filter(|(_, r)| r == "ok")
            .map(|(t, _)| t)
            .collect();
        eprintln!(
            "matrix: {}{}: the container makes {} triples:\n{}",
            config.name(),
            if gvisor { " (gVisor)" } else { "" },
            made.len(),
            table(&made)
        );
        eprintln!("matrix: {}", report(config, gvisor, &s));
        for l in s.leaks.iter().take(40) {
            eprintln!("matrix:   LEAK {l}");
        }
        for l in s.stray.iter().take(10) {
            eprintln!("matrix:   STRAY {l}");
        }
        let name = config.name();
        if s.drops != 0 {
            failures.push(format!("{name}: the capture dropped {} packets", s.drops));
        }
        match config {
            Config::Open => {
                // The oracle sees what a missing defence lets through.
                for (label, _) in DESTS {
                    if !s
                        .reached_by
                        .keys()
                        .any(|k| k.starts_with(&format!("{label} ")))
                    {
                        failures.push(format!(
                            "{name}: no cell to {label} reached the world without the programs: the oracle is blind"
                        ));
                    }
                }
            }
            _ => {
                if !s.leaks.is_empty() || !s.stray.is_empty() {
                    failures.push(format!(
                        "{name}: {} cells and {} stray packets reached a refused destination (first: {:?})",
                        s.leaks.len(),
                        s.stray.len(),
                        s.leaks.first().or(s.stray.first())
                    ));
                }
                if config != Config::None {
                    for want in ["allowed v4", "allowed mapped", "allowed6 v6"] {
                        if !s.reached_by.contains_key(want) {
                            failures.push(format!(
                                "{name}: no cell to {want} reached the world: the capture sees nothing"
                            ));
                        }
                    }
                }
                total.cells += s.cells;
                total.made += s.made;
                total.refused_at_creation += s.refused_at_creation;
                total.refused_at_send += s.refused_at_send;
                total.sent += s.sent;
                total.reached += s.reached;
                total.leaks.extend(s.leaks.iter().cloned());
            }
        }
    }
    eprintln!(
        "matrix: {}: {} triples x paths x {} destination forms x 3 configurations = {} cells: {} made, {} refused at creation, {} refused at send, {} reached the world, {} of them to a refused destination",
        if gvisor { "gVisor" } else { "native" },
        triples.len(),
        DESTS.len() + DESTS.iter().filter(|(_, a)| !a.contains(':')).count(),
        total.cells,
        total.made,
        total.refused_at_creation,
        total.refused_at_send,
        total.reached,
        total.leaks.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
#[ignore = "root: containers in network namespaces of the test's, cgroup BPF, AF_PACKET"]
fn every_socket_and_send_path_reaches_no_refused_destination() {
    matrix(false);
}

#[test]
#[ignore = "root: gVisor containers in network namespaces of the test's, AF_PACKET"]
fn gvisor_every_socket_and_send_path_reaches_no_refused_destination() {
    matrix(true);
}
