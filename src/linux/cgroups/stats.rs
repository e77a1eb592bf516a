//! Reading a cgroup's usage counters, in the JSON shape runc's `events` prints
//! (`types.Stats`: field names, nesting and which zero values are left out).
//!
//! The readers take directories, not a [`Cgroup`], so that they run the same against the
//! host's hierarchies and against a fake tree in tests. A file that does not exist (a
//! controller without swap accounting, a v1 file gone from newer kernels, …) leaves its
//! fields at zero; a line that does not parse is skipped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Cgroup, CgroupError};

/// USER_HZ: the unit of `cpuacct.stat`, fixed at 100 for user space on Linux.
const USER_HZ: u64 = 100;
const NS_PER_TICK: u64 = 1_000_000_000 / USER_HZ;

fn is_zero(v: &u64) -> bool {
    *v == 0
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Stats {
    pub cpu: Cpu,
    pub cpuset: CpuSet,
    pub memory: Memory,
    pub pids: Pids,
    pub blkio: Blkio,
    pub hugetlb: BTreeMap<String, Hugetlb>,
    pub intel_rdt: IntelRdt,
    pub network_interfaces: Option<Vec<NetworkInterface>>,
    /// moat's own figures (not in runc's shape): limit hits and the capped filesystems.
    pub moat: Moat,
}

/// One line of a pressure file (`some` or `full`), as runc 1.2 reports it: the shares of
/// wall time stalled over 10, 60 and 300 seconds (percent), and the total stall (µs).
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct PsiData {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total: u64,
}

/// A cgroup v2 `cpu.pressure`, `memory.pressure` or `io.pressure`.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct Psi {
    pub some: PsiData,
    pub full: PsiData,
}

/// moat's figures for an operator to watch: how often the container hit its limits, and
/// what it uses of each filesystem moat capped.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Moat {
    /// `memory.events` (v2: low, high, max, oom, oom_kill, …); on v1 memory only
    /// `oom_kill` (from `memory.oom_control`) and `max` (the limit's failcnt). `--stats`
    /// only: the stream reports each hit as an event of its own (`oom`, `memory.max`, …).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub memory_events: BTreeMap<String, u64>,
    /// Forks refused at `pids.max` (`pids.events` max).
    pub pids_max_hits: u64,
    /// By mount point in the container: `/` of an ephemeral root, the `/tmp` and workspace
    /// tmpfs of a read-only one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub filesystems: BTreeMap<String, FsUse>,
    /// The egress names' DNS forwarder: `running` or `exited` (its lookups fail closed);
    /// absent for a container without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_forwarder: Option<&'static str>,
    /// Its bounds (`[egress] forwarder_names`, `forwarder_answers`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_forwarder_limits: Option<crate::policy::egress::ForwarderLimits>,
    /// Its cgroup (next to the container's): limits in force, use, hits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_forwarder_cgroup: Option<crate::linux::egress::forwarder::CgroupUse>,
    /// The egress policy's refusals, counted by its programs in the kernel (absent
    /// without a policy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressCounters>,
}

/// What the egress programs refused: new connections (TCP, connected UDP, ping sockets)
/// and unconnected datagrams, by family; the names the forwarder refused; and the ICMP
/// echo requests the packet backstop dropped (a ping socket's `sendto`, raw sockets).
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct EgressCounters {
    pub connect4_refused: u64,
    pub connect6_refused: u64,
    pub sendmsg4_refused: u64,
    pub sendmsg6_refused: u64,
    pub names_refused: u64,
    pub icmp_echo_refused: u64,
    /// DNS answers into the host's own or a private network that no address rule names
    /// (rebinding), not admitted by the forwarder.
    pub rebinding_refused: u64,
    /// Answers the forwarder did not admit because it held as many names, or as many
    /// addresses for that name, as `[egress] forwarder_names`/`forwarder_answers` allow.
    pub forwarder_full_refused: u64,
    /// The names, and the addresses, the forwarder holds admitted now.
    pub forwarder_names_held: u64,
    pub forwarder_addresses_held: u64,
    /// Sockets refused at `socket(2)`: protocols no hook judges (UDP-Lite, SCTP, …).
    pub sockets_refused: u64,
    /// Which destinations and names were refused: the container's refusal ring (at most
    /// `egress::RING_ENTRIES`, the most recent first). Only in `events --stats`; the
    /// stream reports each as an `egress.refused` event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<Vec<EgressRefusal>>,
}

/// One destination (or name) an egress policy refused: what refused it, where to, how
/// often, first and last seen.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EgressRefusal {
    /// `connect`, `sendmsg`, `packet` (the packet program), `socket` (refused at
    /// creation), `name` (the forwarder answered REFUSED), `rebinding` (an answer into a
    /// private network not admitted).
    pub by: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// A socket refused at creation: its family and type (`AF_INET SOCK_DGRAM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub count: u64,
    pub first_seen: String,
    pub last_seen: String,
}

/// Bytes and inodes used and allowed on one filesystem (statfs). The filesystems listed
/// are tmpfs moat capped, whose statfs counts inodes in its inode space (Linux 6.6+): a
/// file takes 1 KiB of it, an xattr its name, its value and 40 bytes, so `inodes_used`
/// grows with xattrs too; `inode_space_*` are the same counts in bytes, what the tmpfs
/// holds beside `bytes_allowed` of data.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct FsUse {
    pub bytes_used: u64,
    pub bytes_allowed: u64,
    pub inodes_used: u64,
    pub inodes_allowed: u64,
    pub inode_space_bytes_used: u64,
    pub inode_space_bytes_allowed: u64,
}

/// A pressure file's text; `None` when it has no `some` line.
pub fn psi(text: &str) -> Option<Psi> {
    let mut p = Psi::default();
    let mut seen = false;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let d = match f.next() {
            Some("some") => {
                seen = true;
                &mut p.some
            }
            Some("full") => &mut p.full,
            _ => continue,
        };
        for kv in f {
            match kv.split_once('=') {
                Some(("avg10", v)) => d.avg10 = v.parse().unwrap_or(0.0),
                Some(("avg60", v)) => d.avg60 = v.parse().unwrap_or(0.0),
                Some(("avg300", v)) => d.avg300 = v.parse().unwrap_or(0.0),
                Some(("total", v)) => d.total = v.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    seen.then_some(p)
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Cpu {
    pub usage: CpuUsage,
    pub throttling: Throttling,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

/// Nanoseconds.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct CpuUsage {
    #[serde(skip_serializing_if = "is_zero")]
    pub total: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu_kernel: Vec<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub percpu_user: Vec<u64>,
    pub kernel: u64,
    pub user: u64,
}

#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Throttling {
    #[serde(skip_serializing_if = "is_zero")]
    pub periods: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub throttled_periods: u64,
    /// Nanoseconds.
    #[serde(skip_serializing_if = "is_zero")]
    pub throttled_time: u64,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct CpuSet {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cpus: Vec<u16>,
    pub cpu_exclusive: u64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mems: Vec<u16>,
    pub mem_hardwall: u64,
    pub mem_exclusive: u64,
    pub memory_migrate: u64,
    pub memory_spread_page: u64,
    pub memory_spread_slab: u64,
    pub memory_pressure: u64,
    pub sched_load_balance: u64,
    pub sched_relax_domain_level: i64,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct MemoryEntry {
    pub limit: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub usage: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub max: u64,
    pub failcnt: u64,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Memory {
    #[serde(skip_serializing_if = "is_zero")]
    pub cache: u64,
    pub usage: MemoryEntry,
    /// Memory plus swap, as v1's memsw counts it (v2 figures are added up to match).
    pub swap: MemoryEntry,
    pub kernel: MemoryEntry,
    #[serde(rename = "kernelTCP")]
    pub kernel_tcp: MemoryEntry,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Pids {
    #[serde(skip_serializing_if = "is_zero")]
    pub current: u64,
    /// 0 when unlimited.
    #[serde(skip_serializing_if = "is_zero")]
    pub limit: u64,
}

#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct BlkioEntry {
    #[serde(skip_serializing_if = "is_zero")]
    pub major: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub minor: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub op: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub value: u64,
}

#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Blkio {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_service_bytes_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_serviced_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty", rename = "ioQueueRecursive")]
    pub io_queued_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_service_time_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_wait_time_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_merged_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub io_time_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sectors_recursive: Vec<BlkioEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Hugetlb {
    #[serde(skip_serializing_if = "is_zero")]
    pub usage: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub max: u64,
    pub failcnt: u64,
}

/// moat has no Intel RDT support; runc prints the empty object all the same.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct IntelRdt {}

/// Counters of one interface in the container's network namespace. Field names are
/// runc's (Go's defaults, no JSON tags).
#[derive(Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInterface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Where each controller's files are, and whether that directory is cgroup v2.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    pub cpu: Option<(PathBuf, bool)>,
    /// v1 only: v2 reports usage in `cpu.stat`.
    pub cpuacct: Option<(PathBuf, bool)>,
    pub cpuset: Option<(PathBuf, bool)>,
    pub memory: Option<(PathBuf, bool)>,
    pub pids: Option<(PathBuf, bool)>,
    pub blkio: Option<(PathBuf, bool)>,
    pub hugetlb: Option<(PathBuf, bool)>,
    /// The container's cgroup v2 directory, for the pressure files: on hybrid hosts its
    /// cgroup in `/sys/fs/cgroup/unified`, which has them without any controller.
    pub psi: Option<PathBuf>,
}

impl Sources {
    /// Every controller in one v2 directory.
    pub fn v2(dir: &Path) -> Sources {
        let s = Some((dir.to_path_buf(), true));
        Sources {
            cpu: s.clone(),
            cpuacct: None,
            cpuset: s.clone(),
            memory: s.clone(),
            pids: s.clone(),
            blkio: s.clone(),
            hugetlb: s,
            psi: Some(dir.to_path_buf()),
        }
    }
}

/// Reads every counter the sources provide.
pub fn read(src: &Sources) -> Stats {
    let mut s = Stats::default();
    if let Some((dir, v2)) = &src.cpu {
        if *v2 {
            cpu_v2(dir, &mut s.cpu);
        } else {
            s.cpu.throttling = throttling_v1(dir);
        }
    }
    if let Some((dir, false)) = &src.cpuacct {
        s.cpu.usage = cpuacct(dir);
    }
    if let Some((dir, v2)) = &src.cpuset {
        s.cpuset = cpuset(dir, *v2);
    }
    if let Some((dir, v2)) = &src.memory {
        s.memory = if *v2 { memory_v2(dir) } else { memory_v1(dir) };
    }
    if let Some((dir, _)) = &src.pids {
        s.pids = Pids {
            current: number(dir, "pids.current").unwrap_or(0),
            limit: number(dir, "pids.max").unwrap_or(0),
        };
    }
    if let Some((dir, v2)) = &src.blkio {
        s.blkio = if *v2 { blkio_v2(dir) } else { blkio_v1(dir) };
    }
    if let Some((dir, v2)) = &src.hugetlb {
        s.hugetlb = hugetlb(dir, *v2);
    }
    if let Some(dir) = &src.psi {
        let p = |f: &str| text(dir, f).as_deref().and_then(psi);
        s.cpu.psi = p("cpu.pressure");
        s.memory.psi = p("memory.pressure");
        s.blkio.psi = p("io.pressure");
    }
    if let Some((dir, v2)) = &src.memory {
        s.moat.memory_events = if *v2 {
            kv_file(dir, "memory.events")
        } else {
            let mut m = BTreeMap::new();
            m.insert("max".into(), s.memory.usage.failcnt);
            if let Some(n) = oom_kills(dir, false) {
                m.insert("oom_kill".into(), n);
            }
            m
        };
    }
    if let Some((dir, _)) = &src.pids {
        s.moat.pids_max_hits = kv_file(dir, "pids.events").get("max").copied().unwrap_or(0);
    }
    s
}

/// Bytes and inodes of the filesystem an fd is on.
pub fn fs_use(st: &libc::statvfs) -> FsUse {
    let frsize = st.f_frsize.max(1);
    FsUse {
        bytes_used: st
            .f_blocks
            .saturating_sub(st.f_bfree)
            .saturating_mul(frsize),
        bytes_allowed: st.f_blocks.saturating_mul(frsize),
        inodes_used: st.f_files.saturating_sub(st.f_ffree),
        inodes_allowed: st.f_files,
        inode_space_bytes_used: st
            .f_files
            .saturating_sub(st.f_ffree)
            .saturating_mul(crate::policy::INODE_SPACE),
        inode_space_bytes_allowed: st.f_files.saturating_mul(crate::policy::INODE_SPACE),
    }
}

fn text(dir: &Path, file: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(file)).ok()
}

/// A single-number file; "max" (v2's unlimited) reads as 0, as runc reports it.
fn number(dir: &Path, file: &str) -> Option<u64> {
    let t = text(dir, file)?;
    let t = t.trim();
    if t == "max" {
        return Some(0);
    }
    t.parse().ok()
}

/// Like [`number`], but "max" reads as u64::MAX: for limits that runc reports verbatim.
fn limit(dir: &Path, file: &str) -> Option<u64> {
    let t = text(dir, file)?;
    match t.trim() {
        "max" => Some(u64::MAX),
        t => t.parse().ok(),
    }
}

/// `key value` lines (memory.stat, cpu.stat, memory.events, …).
pub fn key_values(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?;
            let v = it.next()?.parse().ok()?;
            it.next().is_none().then(|| (k.to_string(), v))
        })
        .collect()
}

fn kv_file(dir: &Path, file: &str) -> BTreeMap<String, u64> {
    text(dir, file).map(|t| key_values(&t)).unwrap_or_default()
}

fn numbers(text: &str) -> Vec<u64> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

fn cpuacct(dir: &Path) -> CpuUsage {
    let mut u = CpuUsage {
        total: number(dir, "cpuacct.usage").unwrap_or(0),
        percpu: text(dir, "cpuacct.usage_percpu")
            .map(|t| numbers(&t))
            .unwrap_or_default(),
        ..Default::default()
    };
    // "cpu user system" then one row per cpu.
    if let Some(all) = text(dir, "cpuacct.usage_all") {
        for line in all.lines().skip(1) {
            if let [_, user, sys] = numbers(line)[..] {
                u.percpu_user.push(user);
                u.percpu_kernel.push(sys);
            }
        }
    }
    let stat = kv_file(dir, "cpuacct.stat");
    u.user = stat.get("user").copied().unwrap_or(0) * NS_PER_TICK;
    u.kernel = stat.get("system").copied().unwrap_or(0) * NS_PER_TICK;
    u
}

fn throttling_v1(dir: &Path) -> Throttling {
    let st = kv_file(dir, "cpu.stat");
    let get = |k: &str| st.get(k).copied().unwrap_or(0);
    Throttling {
        periods: get("nr_periods"),
        throttled_periods: get("nr_throttled"),
        throttled_time: get("throttled_time"),
    }
}

fn cpu_v2(dir: &Path, cpu: &mut Cpu) {
    let st = kv_file(dir, "cpu.stat");
    let get = |k: &str| st.get(k).copied().unwrap_or(0);
    cpu.usage = CpuUsage {
        total: get("usage_usec") * 1000,
        kernel: get("system_usec") * 1000,
        user: get("user_usec") * 1000,
        ..Default::default()
    };
    cpu.throttling = Throttling {
        periods: get("nr_periods"),
        throttled_periods: get("nr_throttled"),
        throttled_time: get("throttled_usec") * 1000,
    };
}

/// A cpuset list such as `0-3,8,10-11`.
pub fn cpu_list(s: &str) -> Vec<u16> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u16>(), b.trim().parse::<u16>()) {
            out.extend(a..=b);
        }
    }
    out
}

fn cpuset(dir: &Path, v2: bool) -> CpuSet {
    if v2 {
        return CpuSet {
            cpus: cpu_list(&text(dir, "cpuset.cpus.effective").unwrap_or_default()),
            mems: cpu_list(&text(dir, "cpuset.mems.effective").unwrap_or_default()),
            ..Default::default()
        };
    }
    let n = |f: &str| number(dir, &format!("cpuset.{f}")).unwrap_or(0);
    CpuSet {
        cpus: cpu_list(&text(dir, "cpuset.cpus").unwrap_or_default()),
        cpu_exclusive: n("cpu_exclusive"),
        mems: cpu_list(&text(dir, "cpuset.mems").unwrap_or_default()),
        mem_hardwall: n("mem_hardwall"),
        mem_exclusive: n("mem_exclusive"),
        memory_migrate: n("memory_migrate"),
        memory_spread_page: n("memory_spread_page"),
        memory_spread_slab: n("memory_spread_slab"),
        memory_pressure: n("memory_pressure"),
        sched_load_balance: n("sched_load_balance"),
        sched_relax_domain_level: text(dir, "cpuset.sched_relax_domain_level")
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0),
    }
}

/// v1 `memory[.<module>].{usage_in_bytes,max_usage_in_bytes,failcnt,limit_in_bytes}`.
fn memory_entry_v1(dir: &Path, module: &str) -> MemoryEntry {
    let f = |name: &str| {
        let file = if module.is_empty() {
            format!("memory.{name}")
        } else {
            format!("memory.{module}.{name}")
        };
        number(dir, &file).unwrap_or(0)
    };
    MemoryEntry {
        limit: f("limit_in_bytes"),
        usage: f("usage_in_bytes"),
        max: f("max_usage_in_bytes"),
        failcnt: f("failcnt"),
    }
}

fn memory_v1(dir: &Path) -> Memory {
    let raw = kv_file(dir, "memory.stat");
    Memory {
        cache: raw.get("cache").copied().unwrap_or(0),
        usage: memory_entry_v1(dir, ""),
        swap: memory_entry_v1(dir, "memsw"),
        kernel: memory_entry_v1(dir, "kmem"),
        kernel_tcp: memory_entry_v1(dir, "kmem.tcp"),
        raw,
        psi: None,
    }
}

fn memory_v2(dir: &Path) -> Memory {
    let raw = kv_file(dir, "memory.stat");
    let events = kv_file(dir, "memory.events");
    let usage = MemoryEntry {
        limit: limit(dir, "memory.max").unwrap_or(u64::MAX),
        usage: number(dir, "memory.current").unwrap_or(0),
        max: number(dir, "memory.peak").unwrap_or(0),
        failcnt: events.get("max").copied().unwrap_or(0),
    };
    let swap_events = kv_file(dir, "memory.swap.events");
    let swap = match number(dir, "memory.swap.current") {
        // v2 counts swap alone; v1 (and so runc's output) counts memory plus swap.
        Some(current) => {
            let swap_limit = limit(dir, "memory.swap.max").unwrap_or(u64::MAX);
            MemoryEntry {
                limit: if swap_limit == u64::MAX || usage.limit == u64::MAX {
                    u64::MAX
                } else {
                    swap_limit.saturating_add(usage.limit)
                },
                usage: current + usage.usage,
                max: 0,
                failcnt: swap_events.get("max").copied().unwrap_or(0),
            }
        }
        None => MemoryEntry::default(),
    };
    Memory {
        cache: raw.get("file").copied().unwrap_or(0),
        usage,
        swap,
        kernel: MemoryEntry::default(),
        kernel_tcp: MemoryEntry::default(),
        raw,
        psi: None,
    }
}

fn devnum(s: &str) -> Option<(u64, u64)> {
    let (a, b) = s.split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// v1 blkio lines: `MAJ:MIN Op value` or `MAJ:MIN value`; the closing `Total N` is
/// not per device and is left out.
pub fn blkio_entries(text: &str) -> Vec<BlkioEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (dev, op, value) = match f[..] {
            [dev, op, v] => (dev, op, v),
            [dev, v] => (dev, "", v),
            _ => continue,
        };
        let (Some((major, minor)), Ok(value)) = (devnum(dev), value.parse()) else {
            continue;
        };
        out.push(BlkioEntry {
            major,
            minor,
            op: op.to_string(),
            value,
        });
    }
    out
}

fn blkio_v1(dir: &Path) -> Blkio {
    let read = |f: &str| text(dir, f).map(|t| blkio_entries(&t)).unwrap_or_default();
    // CFQ's files when the kernel still has them and they count anything, else BFQ's,
    // else the throttle layer's (which sees all I/O, whatever the scheduler).
    let cfq = read("blkio.io_service_bytes_recursive");
    if !cfq.is_empty() {
        return Blkio {
            io_service_bytes_recursive: cfq,
            io_serviced_recursive: read("blkio.io_serviced_recursive"),
            io_queued_recursive: read("blkio.io_queued_recursive"),
            io_service_time_recursive: read("blkio.io_service_time_recursive"),
            io_wait_time_recursive: read("blkio.io_wait_time_recursive"),
            io_merged_recursive: read("blkio.io_merged_recursive"),
            io_time_recursive: read("blkio.time_recursive"),
            sectors_recursive: read("blkio.sectors_recursive"),
            psi: None,
        };
    }
    let bfq = read("blkio.bfq.io_service_bytes_recursive");
    if !bfq.is_empty() {
        return Blkio {
            io_service_bytes_recursive: bfq,
            io_serviced_recursive: read("blkio.bfq.io_serviced_recursive"),
            ..Default::default()
        };
    }
    Blkio {
        io_service_bytes_recursive: read("blkio.throttle.io_service_bytes_recursive"),
        io_serviced_recursive: read("blkio.throttle.io_serviced_recursive"),
        ..Default::default()
    }
}

/// v2 `io.stat`: `MAJ:MIN rbytes=… wbytes=… rios=… wios=… dbytes=… dios=…`.
pub fn io_stat(text: &str) -> Blkio {
    let mut b = Blkio::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let Some((major, minor)) = it.next().and_then(devnum) else {
            continue;
        };
        for kv in it {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let Ok(value) = v.parse() else { continue };
            let (list, op) = match k {
                "rbytes" => (&mut b.io_service_bytes_recursive, "Read"),
                "wbytes" => (&mut b.io_service_bytes_recursive, "Write"),
                "rios" => (&mut b.io_serviced_recursive, "Read"),
                "wios" => (&mut b.io_serviced_recursive, "Write"),
                _ => continue,
            };
            list.push(BlkioEntry {
                major,
                minor,
                op: op.into(),
                value,
            });
        }
    }
    b
}

fn blkio_v2(dir: &Path) -> Blkio {
    text(dir, "io.stat")
        .map(|t| io_stat(&t))
        .unwrap_or_default()
}

/// The huge page sizes a directory has files for (`2MB`, `1GB`).
fn page_sizes(dir: &Path, v2: bool) -> Vec<String> {
    let want = if v2 { "current" } else { "usage_in_bytes" };
    let mut sizes: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| {
                    let rest = n.strip_prefix("hugetlb.")?;
                    let (size, file) = rest.split_once('.')?;
                    (file == want).then(|| size.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    sizes.sort();
    sizes
}

fn hugetlb(dir: &Path, v2: bool) -> BTreeMap<String, Hugetlb> {
    page_sizes(dir, v2)
        .into_iter()
        .map(|size| {
            let f = |name: &str| format!("hugetlb.{size}.{name}");
            let h = if v2 {
                Hugetlb {
                    usage: number(dir, &f("current")).unwrap_or(0),
                    max: 0,
                    failcnt: kv_file(dir, &f("events")).get("max").copied().unwrap_or(0),
                }
            } else {
                Hugetlb {
                    usage: number(dir, &f("usage_in_bytes")).unwrap_or(0),
                    max: number(dir, &f("max_usage_in_bytes")).unwrap_or(0),
                    failcnt: number(dir, &f("failcnt")).unwrap_or(0),
                }
            };
            (size, h)
        })
        .collect()
}

/// The OOM kills counted in a memory cgroup: v1 `memory.oom_control`, v2 `memory.events`.
pub fn oom_kills(dir: &Path, v2: bool) -> Option<u64> {
    let file = if v2 {
        "memory.events"
    } else {
        "memory.oom_control"
    };
    kv_file(dir, file).get("oom_kill").copied()
}

/// `/proc/<pid>/net/dev`: two header lines, then `name: rx×8 tx×8`.
pub fn net_dev(text: &str) -> Vec<NetworkInterface> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let n = numbers(rest);
            (n.len() >= 16).then(|| NetworkInterface {
                name: name.trim().to_string(),
                rx_bytes: n[0],
                rx_packets: n[1],
                rx_errors: n[2],
                rx_dropped: n[3],
                tx_bytes: n[8],
                tx_packets: n[9],
                tx_errors: n[10],
                tx_dropped: n[11],
            })
        })
        .collect()
}

/// The interfaces of `pid`'s network namespace, or `None` when it shares moat's own (its
/// counters would be the host's) or cannot be read.
pub fn network_interfaces(pid: i32) -> Option<Vec<NetworkInterface>> {
    use std::os::unix::fs::MetadataExt;
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/net")).ok()?;
    let own = std::fs::metadata("/proc/self/ns/net").ok()?;
    if (ns.dev(), ns.ino()) == (own.dev(), own.ino()) {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).ok()?;
    Some(net_dev(&text))
}

impl Cgroup {
    /// Where each controller's files are for this cgroup: v1 hierarchies first, the
    /// v2 directory for what they lack (on hybrid hosts typically hugetlb).
    pub fn stat_sources(&self) -> Sources {
        if self.unified {
            return self.v2_dir().map(|d| Sources::v2(&d)).unwrap_or_default();
        }
        let find = |c: &str| self.dir_for(c, "stats").ok();
        Sources {
            cpu: find("cpu"),
            cpuacct: find("cpuacct"),
            cpuset: find("cpuset"),
            memory: find("memory"),
            pids: find("pids"),
            blkio: find("blkio"),
            hugetlb: find("hugetlb"),
            psi: self.v2_dir().filter(|d| d.join("cgroup.procs").exists()),
        }
    }

    /// The usage counters of the container's cgroup. Fails only when the cgroup is gone.
    pub fn stats(&self) -> Result<Stats, CgroupError> {
        let Some(h) = self.hierarchies.first() else {
            return Err(CgroupError::NoHierarchy {
                path: self.path.clone(),
            });
        };
        let dir = h.dir(&self.path);
        if let Err(e) = std::fs::metadata(&dir) {
            return Err(CgroupError::io("read", dir, e));
        }
        Ok(read(&self.stat_sources()))
    }

    /// OOM kills so far in the container's memory cgroup, when the kernel counts them.
    pub fn oom_kills(&self) -> Option<u64> {
        let (dir, v2) = self.stat_sources().memory?;
        oom_kills(&dir, v2)
    }

    /// The kernel's counters of limit hits, by the event type `events` streams for each:
    /// `pids.max` (forks refused, `pids.events`), `memory.high` and `memory.max` (v2
    /// `memory.events`; v1 has no `memory.high`, its `memory.max` is the limit's
    /// `memory.failcnt`). A counter this host lacks is absent.
    pub fn limit_hits(&self) -> BTreeMap<&'static str, u64> {
        let src = self.stat_sources();
        let mut out = BTreeMap::new();
        if let Some((dir, _)) = &src.pids {
            if let Some(n) = kv_file(dir, "pids.events").get("max") {
                out.insert("pids.max", *n);
            }
        }
        match &src.memory {
            Some((dir, true)) => {
                let ev = kv_file(dir, "memory.events");
                for (k, name) in [("high", "memory.high"), ("max", "memory.max")] {
                    if let Some(n) = ev.get(k) {
                        out.insert(name, *n);
                    }
                }
            }
            Some((dir, false)) => {
                if let Some(n) = std::fs::read_to_string(dir.join("memory.failcnt"))
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                {
                    out.insert("memory.max", n);
                }
            }
            None => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::linux::cgroups::tests::TempDir;

    fn write(dir: &Path, files: &[(&str, &str)]) {
        fs::create_dir_all(dir).unwrap();
        for (f, v) in files {
            fs::write(dir.join(f), v).unwrap();
        }
    }

    /// A hybrid host as this project's CI has it: v1 cpu, cpuacct, cpuset, memory, pids
    /// and blkio hierarchies, hugetlb in the v2 mount.
    fn fake_v1(tmp: &TempDir) -> Sources {
        let d = |c: &str| tmp.0.join(c).join("moat/ct");
        write(
            &d("cpu"),
            &[(
                "cpu.stat",
                "nr_periods 10\nnr_throttled 3\nthrottled_time 4500\nnr_bursts 0\n",
            )],
        );
        write(
            &d("cpuacct"),
            &[
                ("cpuacct.usage", "3000\n"),
                ("cpuacct.usage_percpu", "1000 2000 \n"),
                (
                    "cpuacct.usage_all",
                    "cpu user system\n0 600 400\n1 1500 500\n",
                ),
                ("cpuacct.stat", "user 2\nsystem 1\n"),
            ],
        );
        write(
            &d("cpuset"),
            &[
                ("cpuset.cpus", "0-1,3\n"),
                ("cpuset.mems", "0\n"),
                ("cpuset.sched_load_balance", "1\n"),
                ("cpuset.sched_relax_domain_level", "-1\n"),
                ("cpuset.cpu_exclusive", "0\n"),
            ],
        );
        write(
            &d("memory"),
            &[
                ("memory.usage_in_bytes", "561152\n"),
                ("memory.max_usage_in_bytes", "1994752\n"),
                ("memory.failcnt", "0\n"),
                ("memory.limit_in_bytes", "67108864\n"),
                ("memory.memsw.usage_in_bytes", "600000\n"),
                ("memory.memsw.max_usage_in_bytes", "2000000\n"),
                ("memory.memsw.failcnt", "2\n"),
                ("memory.memsw.limit_in_bytes", "9223372036854771712\n"),
                ("memory.kmem.usage_in_bytes", "245760\n"),
                ("memory.kmem.limit_in_bytes", "9223372036854771712\n"),
                ("memory.stat", "cache 8192\nrss 53248\ntotal_cache 8192\n"),
                (
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n",
                ),
            ],
        );
        write(
            &d("pids"),
            &[("pids.current", "3\n"), ("pids.max", "max\n")],
        );
        write(
            &d("blkio"),
            &[
                ("blkio.bfq.io_service_bytes_recursive", "Total 0\n"),
                (
                    "blkio.throttle.io_service_bytes_recursive",
                    "8:0 Read 4096\n8:0 Write 0\n8:0 Total 4096\nTotal 4096\n",
                ),
                (
                    "blkio.throttle.io_serviced_recursive",
                    "8:0 Read 1\n8:0 Total 1\nTotal 1\n",
                ),
            ],
        );
        write(
            &d("unified"),
            &[
                ("hugetlb.2MB.current", "4194304\n"),
                ("hugetlb.2MB.max", "max\n"),
                ("hugetlb.2MB.rsvd.current", "0\n"),
                ("hugetlb.2MB.events", "max 1\n"),
                ("hugetlb.1GB.current", "0\n"),
                ("hugetlb.1GB.events", "max 0\n"),
            ],
        );
        let v1 = |c: &str| Some((d(c), false));
        Sources {
            cpu: v1("cpu"),
            cpuacct: v1("cpuacct"),
            cpuset: v1("cpuset"),
            memory: v1("memory"),
            pids: v1("pids"),
            blkio: v1("blkio"),
            hugetlb: Some((d("unified"), true)),
            psi: None,
        }
    }

    #[test]
    fn pressure_lines_as_runc_reports_them() {
        let p = psi("some avg10=1.50 avg60=0.25 avg300=0.00 total=7534299\n\
                     full avg10=0.75 avg60=0.10 avg300=0.00 total=123\n")
        .unwrap();
        assert_eq!(
            p.some,
            PsiData {
                avg10: 1.5,
                avg60: 0.25,
                avg300: 0.0,
                total: 7534299
            }
        );
        assert_eq!(p.full.total, 123);
        // cpu.pressure before 5.13 has no full line: zeros, as runc prints them.
        assert_eq!(
            psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n")
                .unwrap()
                .full
                .total,
            0
        );
        assert!(psi("").is_none());
        let j = serde_json::to_value(&p).unwrap();
        assert_eq!(j["some"]["avg10"], 1.5);
        assert_eq!(j["full"]["total"], 123);
    }

    #[test]
    fn v1_tree() {
        let tmp = TempDir::new("stats-v1");
        let src = fake_v1(&tmp);
        let s = read(&src);
        assert_eq!(s.cpu.usage.total, 3000);
        assert_eq!(s.cpu.usage.percpu, [1000, 2000]);
        assert_eq!(s.cpu.usage.percpu_user, [600, 1500]);
        assert_eq!(s.cpu.usage.percpu_kernel, [400, 500]);
        assert_eq!(s.cpu.usage.user, 20_000_000);
        assert_eq!(s.cpu.usage.kernel, 10_000_000);
        assert_eq!(
            s.cpu.throttling,
            Throttling {
                periods: 10,
                throttled_periods: 3,
                throttled_time: 4500
            }
        );
        assert_eq!(s.cpuset.cpus, [0, 1, 3]);
        assert_eq!(s.cpuset.mems, [0]);
        assert_eq!(s.cpuset.sched_load_balance, 1);
        assert_eq!(s.cpuset.sched_relax_domain_level, -1);
        assert_eq!(
            s.memory.usage,
            MemoryEntry {
                limit: 67108864,
                usage: 561152,
                max: 1994752,
                failcnt: 0
            }
        );
        assert_eq!(s.memory.swap.usage, 600000);
        assert_eq!(s.memory.swap.failcnt, 2);
        assert_eq!(s.memory.kernel.usage, 245760);
        // No kmem.tcp files: zeros, still printed as runc does.
        assert_eq!(s.memory.kernel_tcp, MemoryEntry::default());
        assert_eq!(s.memory.cache, 8192);
        assert_eq!(s.memory.raw["rss"], 53248);
        assert_eq!(
            s.pids,
            Pids {
                current: 3,
                limit: 0
            }
        );
        // BFQ counts nothing here: the throttle layer's files are used.
        assert_eq!(s.blkio.io_service_bytes_recursive.len(), 3);
        assert_eq!(s.blkio.io_service_bytes_recursive[0].op, "Read");
        assert_eq!(s.blkio.io_service_bytes_recursive[0].value, 4096);
        assert_eq!(s.blkio.io_serviced_recursive.len(), 2);
        assert_eq!(s.hugetlb.keys().collect::<Vec<_>>(), ["1GB", "2MB"]);
        assert_eq!(
            s.hugetlb["2MB"],
            Hugetlb {
                usage: 4194304,
                max: 0,
                failcnt: 1
            }
        );
        assert_eq!(oom_kills(&src.memory.unwrap().0, false), Some(4));
    }

    #[test]
    fn v2_tree() {
        let tmp = TempDir::new("stats-v2");
        let dir = tmp.0.join("moat/ct");
        write(
            &dir,
            &[
                (
                    "cpu.stat",
                    "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 7\n\
                     nr_throttled 2\nthrottled_usec 30\n",
                ),
                ("cpuset.cpus.effective", "0-1\n"),
                ("cpuset.mems.effective", "0\n"),
                ("memory.current", "1048576\n"),
                ("memory.max", "67108864\n"),
                ("memory.peak", "2097152\n"),
                ("memory.events", "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n"),
                ("memory.swap.current", "4096\n"),
                ("memory.swap.max", "max\n"),
                ("memory.stat", "anon 4096\nfile 8192\n"),
                ("pids.current", "2\n"),
                ("pids.max", "20\n"),
                (
                    "io.stat",
                    "8:0 rbytes=4096 wbytes=512 rios=1 wios=2 dbytes=0 dios=0\n",
                ),
                ("hugetlb.2MB.current", "0\n"),
                ("hugetlb.2MB.events", "max 0\n"),
            ],
        );
        let s = read(&Sources::v2(&dir));
        assert_eq!(s.cpu.usage.total, 1_500_000);
        assert_eq!(s.cpu.usage.user, 1_000_000);
        assert_eq!(s.cpu.usage.kernel, 500_000);
        assert!(s.cpu.usage.percpu.is_empty());
        assert_eq!(s.cpu.throttling.throttled_time, 30_000);
        assert_eq!(s.cpuset.cpus, [0, 1]);
        assert_eq!(
            s.memory.usage,
            MemoryEntry {
                limit: 67108864,
                usage: 1048576,
                max: 2097152,
                failcnt: 5
            }
        );
        // memory + swap, unlimited because swap is.
        assert_eq!(s.memory.swap.usage, 1048576 + 4096);
        assert_eq!(s.memory.swap.limit, u64::MAX);
        assert_eq!(s.memory.cache, 8192);
        assert_eq!(
            s.pids,
            Pids {
                current: 2,
                limit: 20
            }
        );
        assert_eq!(s.blkio.io_service_bytes_recursive.len(), 2);
        assert_eq!(s.blkio.io_serviced_recursive[1].op, "Write");
        assert_eq!(s.blkio.io_serviced_recursive[1].value, 2);
        assert!(s.hugetlb.contains_key("2MB"));
        assert_eq!(oom_kills(&dir, true), Some(1));
    }

    #[test]
    fn json_shape_is_runcs() {
        let tmp = TempDir::new("stats-json");
        let s = read(&fake_v1(&tmp));
        let v = serde_json::to_value(&s).unwrap();
        for k in [
            "cpu",
            "cpuset",
            "memory",
            "pids",
            "blkio",
            "hugetlb",
            "intel_rdt",
            "network_interfaces",
        ] {
            assert!(v.get(k).is_some(), "{k} missing: {v}");
        }
        assert_eq!(v["cpu"]["throttling"]["throttledPeriods"], 3);
        assert!(v["cpu"]["usage"].get("percpu_kernel").is_some());
        assert!(v["memory"].get("kernelTCP").is_some());
        assert_eq!(
            v["memory"]["kernelTCP"],
            serde_json::json!({"limit":0,"failcnt":0})
        );
        // omitempty: unlimited pids has no limit key.
        assert_eq!(v["pids"], serde_json::json!({"current": 3}));
        assert_eq!(v["network_interfaces"], serde_json::Value::Null);
        assert_eq!(v["intel_rdt"], serde_json::json!({}));
        let empty = serde_json::to_value(Stats::default()).unwrap();
        assert_eq!(empty["blkio"], serde_json::json!({}));
        assert_eq!(empty["cpu"]["throttling"], serde_json::json!({}));
        assert_eq!(
            empty["cpu"]["usage"],
            serde_json::json!({"kernel":0,"user":0})
        );
    }

    #[test]
    fn parsers() {
        assert_eq!(cpu_list("0-2,5,7-8\n"), [0, 1, 2, 5, 7, 8]);
        assert!(cpu_list("\n").is_empty());
        let dev = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:     100       2    0    0    0     0          0         0      100       2    0    0    0     0       0          0\n  \
            eth0: 1000 10 1 2 0 0 0 0 2000 20 3 4 0 0 0 0\n";
        let n = net_dev(dev);
        assert_eq!(n.len(), 2);
        assert_eq!(n[0].name, "lo");
        assert_eq!(
            n[1],
            NetworkInterface {
                name: "eth0".into(),
                rx_bytes: 1000,
                rx_packets: 10,
                rx_errors: 1,
                rx_dropped: 2,
                tx_bytes: 2000,
                tx_packets: 20,
                tx_errors: 3,
                tx_dropped: 4,
            }
        );
        let j = serde_json::to_value(&n[1]).unwrap();
        assert_eq!(j["RxBytes"], 1000);
        assert_eq!(j["Name"], "eth0");
        let e = blkio_entries("8:0 Read 1\n8:16 77\nTotal 9\ngarbage\n");
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[1].major, e[1].minor, e[1].op.as_str(), e[1].value),
            (8, 16, "", 77)
        );
    }

    #[test]
    fn missing_cgroup_is_an_error() {
        let cg = Cgroup {
            path: "/moat/none".into(),
            systemd: None,
            unified: true,
            hierarchies: vec![super::super::Hierarchy {
                mount: "/nonexistent-moat-test".into(),
                controllers: vec![],
                v2: true,
            }],
            skipped: vec![],
            joined: false,
        };
        assert!(cg.stats().is_err());
        assert_eq!(cg.oom_kills(), None);
    }
}
