//! cgroup v2 (unified) resource files, the device BPF program, and the v2 freezer.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{devices, read_file, write_file, Cgroup, CgroupError};
use crate::linux::sys::bpf;
use crate::log::warn;
use crate::spec::{self, Resources};

/// Controllers moat may need below its cgroup; enabled top-down where the parent offers
/// them.
const WANTED: [&str; 7] = ["cpuset", "cpu", "io", "memory", "pids", "hugetlb", "rdma"];

/// The name moat gives its device programs, to tell them from other people's on update.
const PROG_NAME: &str = "moat_dev";

pub fn apply(cg: &Cgroup, res: &Resources) -> Result<(), CgroupError> {
    let request = first_request(res);
    let (controller, field) = request.unwrap_or(("devices", "linux.resources.devices"));
    let dir = match cg.dir_for(controller, field) {
        Ok((dir, _)) => dir,
        Err(e) if request.is_some() => return Err(e),
        // Rootless with no limits asked for: nothing to do, and nothing to fail.
        Err(_) => {
            if !res.devices.is_empty() {
                warn("linux.resources.devices not enforced: no writable cgroup");
            }
            return Ok(());
        }
    };
    apply_limits(&dir, res)?;
    match apply_devices(&dir, &res.devices) {
        // Loading cgroup BPF needs privileges a rootless caller lacks even in a delegated
        // cgroup; its user namespace already keeps it from other device nodes, so this
        // is the same trade runc makes. (Inside an engine's user namespace moat is uid 0
        // and still unprivileged here.)
        Err(e)
            if e.is_permission()
                && (crate::linux::sys::geteuid() != 0
                    || crate::linux::rootless::in_user_namespace()) =>
        {
            warn(&format!("linux.resources.devices not enforced: {e}"));
            Ok(())
        }
        r => r,
    }
}

/// `apply` for a running container: the limits only, the device program left as it is.
pub fn update(cg: &Cgroup, res: &Resources) -> Result<(), CgroupError> {
    match first_request(res) {
        Some((controller, field)) => apply_limits(&cg.dir_for(controller, field)?.0, res),
        None => Ok(()),
    }
}

/// The first limit the spec asks for, as (controller, field), to name in errors when
/// there is no writable cgroup. Device rules do not count: see v1::device_rules.
fn first_request(res: &Resources) -> Option<(&'static str, &'static str)> {
    let unified = res.unified.as_ref().is_some_and(|u| !u.is_empty());
    [
        (res.memory.is_some(), "memory", "linux.resources.memory"),
        (res.cpu.is_some(), "cpu", "linux.resources.cpu"),
        (res.pids.is_some(), "pids", "linux.resources.pids"),
        (res.block_io.is_some(), "io", "linux.resources.blockIO"),
        (
            !res.hugepage_limits.is_empty(),
            "hugetlb",
            "linux.resources.hugepageLimits",
        ),
        (res.network.is_some(), "net_cls", "linux.resources.network"),
        (res.rdma.is_some(), "rdma", "linux.resources.rdma"),
        (unified, "unified", "linux.resources.unified"),
    ]
    .into_iter()
    .find(|(set, ..)| *set)
    .map(|(_, c, f)| (c, f))
}

/// Writes to a controller's file; a missing file most often means the controller is not
/// enabled for this cgroup, which deserves a clearer message than ENOENT.
fn write(dir: &Path, file: &str, value: &str, field: &str) -> Result<(), CgroupError> {
    write_file(dir, file, value, field).map_err(|e| match e {
        CgroupError::Write { ref err, .. } if err.kind() == io::ErrorKind::NotFound => {
            let controller = file.split('.').next().unwrap_or(file);
            let enabled = read_file(dir, "cgroup.controllers").unwrap_or_default();
            if enabled.split_whitespace().any(|c| c == controller) {
                e
            } else {
                CgroupError::Unavailable {
                    field: field.into(),
                    controller: controller.into(),
                    path: dir.to_path_buf(),
                    reason: "not enabled in cgroup.controllers".into(),
                }
            }
        }
        e => e,
    })
}

pub fn apply_limits(dir: &Path, res: &Resources) -> Result<(), CgroupError> {
    if let Some(m) = &res.memory {
        memory(dir, m)?;
    }
    if let Some(c) = &res.cpu {
        cpu(dir, c)?;
    }
    if let Some(limit) = res.pids.as_ref().and_then(|p| p.limit) {
        write(
            dir,
            "pids.max",
            &pids_max(limit),
            "linux.resources.pids.limit",
        )?;
    }
    if let Some(b) = &res.block_io {
        io(dir, b)?;
    }
    hugetlb(dir, &res.hugepage_limits)?;
    if res.network.is_some() {
        return Err(CgroupError::invalid(
            "linux.resources.network",
            "cgroup v2 has no net_cls/net_prio controllers; match on the cgroup path instead",
        ));
    }
    if let Some(r) = &res.rdma {
        rdma(dir, r)?;
    }
    if let Some(u) = &res.unified {
        write_unified(dir, u)?;
    }
    Ok(())
}

/// The `rdma.max` lines for `linux.resources.rdma`, one per device: only the limits the
/// spec gives, as runc writes them (the kernel leaves a key the line does not name as it
/// is; a new cgroup has `max` for both).
pub fn rdma_lines(v: &serde_json::Value) -> Result<Vec<(String, String)>, CgroupError> {
    let limits = spec::rdma_limits(v).map_err(|(f, msg)| CgroupError::invalid(f, msg))?;
    Ok(limits
        .into_iter()
        .map(|(dev, l)| {
            let mut line = dev.clone();
            for (value, key) in [(l.hca_handles, "hca_handle"), (l.hca_objects, "hca_object")] {
                if let Some(n) = value {
                    line.push_str(&format!(" {key}={n}"));
                }
            }
            (dev, line)
        })
        .collect())
}

/// Writes `rdma.max` (the same file on cgroup v1 and v2). A device the kernel does not
/// know is ENODEV, said in words.
pub fn rdma(dir: &Path, v: &serde_json::Value) -> Result<(), CgroupError> {
    for (dev, line) in rdma_lines(v)? {
        let field = format!("linux.resources.rdma[{dev:?}]");
        write(dir, "rdma.max", &line, &field).map_err(|e| match e {
            CgroupError::Write { ref err, .. } if err.raw_os_error() == Some(libc::ENODEV) => {
                CgroupError::invalid(
                    field.clone(),
                    format!(
                        "no RDMA device {dev:?} on this host (/sys/class/infiniband lists them)"
                    ),
                )
            }
            e => e,
        })?;
    }
    Ok(())
}

/// `pids.max` for a runtime-spec 1.3 limit: a negative one is `max`, and 0 is written
/// as 1, as runc does (systemd's TasksMax cannot be 0, and both drivers must agree; with
/// the init counted, 1 forbids every fork as 0 would).
pub fn pids_max(limit: i64) -> String {
    match limit {
        l if l > 0 => l.to_string(),
        0 => "1".into(),
        _ => "max".into(),
    }
}

/// -1 is unlimited in OCI, spelled "max" in v2.
fn max_or(v: i64) -> String {
    if v == -1 {
        "max".into()
    } else {
        v.to_string()
    }
}

/// OCI's swap is memory+swap; v2's memory.swap.max is swap alone. `None`: leave as is.
pub fn swap_max(limit: Option<i64>, swap: Option<i64>) -> Result<Option<String>, CgroupError> {
    let field = "linux.resources.memory.swap";
    match (limit.filter(|&l| l != 0), swap.filter(|&s| s != 0)) {
        // Unlimited memory without a swap value: unlimited swap too, as v1 behaves.
        (Some(-1), None) | (_, Some(-1)) => Ok(Some("max".into())),
        (_, None) => Ok(None),
        (Some(l), Some(s)) if l > 0 && s >= l => Ok(Some((s - l).to_string())),
        (Some(l), Some(s)) if l > 0 && s > 0 => Err(CgroupError::invalid(
            field,
            format!("memory+swap limit {s} is below the memory limit {l}"),
        )),
        (_, Some(s)) if s > 0 => Err(CgroupError::invalid(
            field,
            "a swap limit needs a memory limit on cgroup v2",
        )),
        (_, Some(s)) => Err(CgroupError::invalid(field, format!("bad value {s}"))),
    }
}

fn memory(dir: &Path, m: &spec::Memory) -> Result<(), CgroupError> {
    for (v, f) in [(m.limit, "limit"), (m.reservation, "reservation")] {
        if v.is_some_and(|v| v < -1) {
            return Err(CgroupError::invalid(
                format!("linux.resources.memory.{f}"),
                "must be -1 (unlimited) or a byte count",
            ));
        }
    }
    for (set, what) in [
        (m.kernel.is_some_and(|v| v != 0), "kernel"),
        (m.kernel_tcp.is_some_and(|v| v != 0), "kernelTCP"),
        (m.swappiness.is_some(), "swappiness"),
        (m.disable_oom_killer == Some(true), "disableOOMKiller"),
    ] {
        if set {
            warn(&format!(
                "linux.resources.memory.{what} ignored: cgroup v2 has no such setting"
            ));
        }
    }
    if let Some(swap) = swap_max(m.limit, m.swap)? {
        let field = "linux.resources.memory.swap";
        match write(dir, "memory.swap.max", &swap, field) {
            // Without swap accounting there is nothing to limit, which is what "no
            // swap" and "unlimited swap" ask for anyway.
            Err(CgroupError::Write { err, .. })
                if err.kind() == io::ErrorKind::NotFound && (swap == "max" || swap == "0") => {}
            r => r?,
        }
    }
    if let Some(l) = m.limit.filter(|&l| l != 0) {
        write(
            dir,
            "memory.max",
            &max_or(l),
            "linux.resources.memory.limit",
        )?;
    }
    if let Some(r) = m.reservation.filter(|&r| r != 0) {
        write(
            dir,
            "memory.low",
            &max_or(r),
            "linux.resources.memory.reservation",
        )?;
    }
    Ok(())
}

/// cpu.shares (2..262144, default 1024) → cpu.weight (1..10000, default 100).
pub fn cpu_weight(shares: u64) -> u64 {
    let s = shares.clamp(2, 262_144);
    1 + ((s - 2) * 9999) / 262_142
}

/// `cpu.max` for quota/period; `None` when neither is set.
pub fn cpu_max(quota: Option<i64>, period: Option<u64>) -> Option<String> {
    let quota = quota.filter(|&q| q != 0);
    let period = period.filter(|&p| p != 0);
    if quota.is_none() && period.is_none() {
        return None;
    }
    let q = match quota {
        Some(q) if q > 0 => q.to_string(),
        _ => "max".into(),
    };
    Some(match period {
        Some(p) => format!("{q} {p}"),
        None => q,
    })
}

fn cpu(dir: &Path, c: &spec::Cpu) -> Result<(), CgroupError> {
    if c.realtime_runtime.is_some_and(|v| v != 0) || c.realtime_period.is_some_and(|v| v != 0) {
        return Err(CgroupError::invalid(
            "linux.resources.cpu.realtimeRuntime",
            "realtime scheduling budgets do not exist on cgroup v2",
        ));
    }
    if let Some(s) = c.shares.filter(|&s| s != 0) {
        let w = cpu_weight(s).to_string();
        write(dir, "cpu.weight", &w, "linux.resources.cpu.shares")?;
    }
    // quota and period are one write; the burst must stay within the quota, so a lower
    // quota than the burst in force goes after the new burst (EINVAL first).
    let mut burst = c.burst.map(|b| b.to_string());
    let write_burst = |b: &String| write(dir, "cpu.max.burst", b, "linux.resources.cpu.burst");
    if let Some(max) = cpu_max(c.quota, c.period) {
        match write(dir, "cpu.max", &max, "linux.resources.cpu.quota") {
            Err(CgroupError::Write { err, .. })
                if err.raw_os_error() == Some(libc::EINVAL) && burst.is_some() =>
            {
                if let Some(b) = burst.take() {
                    write_burst(&b)?;
                }
                write(dir, "cpu.max", &max, "linux.resources.cpu.quota")?;
            }
            r => r?,
        }
    }
    if let Some(b) = &burst {
        write_burst(b)?;
    }
    if let Some(i) = c.idle {
        write(dir, "cpu.idle", &i.to_string(), "linux.resources.cpu.idle")?;
    }
    if let Some(cpus) = &c.cpus {
        write(dir, "cpuset.cpus", cpus, "linux.resources.cpu.cpus")?;
    }
    if let Some(mems) = &c.mems {
        write(dir, "cpuset.mems", mems, "linux.resources.cpu.mems")?;
    }
    Ok(())
}

/// blkio.weight (10..1000) → io.weight (1..10000).
pub fn io_weight(weight: u16) -> u64 {
    let w = u64::from(weight.clamp(10, 1000));
    1 + (w - 10) * 9999 / 990
}

/// One `io.max` line per device, all four limits of a device on the same line.
pub fn io_max_lines(b: &spec::BlockIo) -> Result<Vec<String>, CgroupError> {
    let mut per_dev: BTreeMap<(i64, i64), Vec<String>> = BTreeMap::new();
    let lists = [
        (&b.throttle_read_bps_device, "rbps", "throttleReadBpsDevice"),
        (
            &b.throttle_write_bps_device,
            "wbps",
            "throttleWriteBpsDevice",
        ),
        (
            &b.throttle_read_iops_device,
            "riops",
            "throttleReadIOPSDevice",
        ),
        (
            &b.throttle_write_iops_device,
            "wiops",
            "throttleWriteIOPSDevice",
        ),
    ];
    for (list, key, name) in lists {
        for (i, t) in list.iter().enumerate() {
            let field = format!("linux.resources.blockIO.{name}[{i}]");
            super::v1::devnum(t.major, t.minor, &field)?;
            // v1 reads 0 as "no limit"; v2 spells that "max".
            let rate = if t.rate == 0 {
                "max".to_string()
            } else {
                t.rate.to_string()
            };
            per_dev
                .entry((t.major, t.minor))
                .or_default()
                .push(format!("{key}={rate}"));
        }
    }
    Ok(per_dev
        .into_iter()
        .map(|((maj, min), kv)| format!("{maj}:{min} {}", kv.join(" ")))
        .collect())
}

fn io(dir: &Path, b: &spec::BlockIo) -> Result<(), CgroupError> {
    // io.weight comes with the iocost controller; BFQ has its own file taking the v1
    // range unchanged.
    let bfq = !dir.join("io.weight").exists() && dir.join("io.bfq.weight").exists();
    let (file, conv): (&str, fn(u16) -> u64) = if bfq {
        ("io.bfq.weight", u64::from)
    } else {
        ("io.weight", io_weight)
    };
    if let Some(w) = b.weight.filter(|&w| w != 0) {
        write(
            dir,
            file,
            &conv(w).to_string(),
            "linux.resources.blockIO.weight",
        )?;
    }
    if b.leaf_weight.is_some_and(|w| w != 0) {
        warn("linux.resources.blockIO.leafWeight ignored: cgroup v2 has no leaf weights");
    }
    for (i, d) in b.weight_device.iter().enumerate() {
        let field = format!("linux.resources.blockIO.weightDevice[{i}]");
        let dev = super::v1::devnum(d.major, d.minor, &field)?;
        if let Some(w) = d.weight {
            write(dir, file, &format!("{dev} {}", conv(w)), &field)?;
        }
    }
    for line in io_max_lines(b)? {
        write(dir, "io.max", &line, "linux.resources.blockIO")?;
    }
    Ok(())
}

/// Page sizes as the hugetlb files spell them ("2MB", "1GB"); anything else could
/// escape the file name.
pub fn page_size<'a>(size: &'a str, field: &str) -> Result<&'a str, CgroupError> {
    let ok = size
        .strip_suffix('B')
        .and_then(|s| s.strip_suffix(['K', 'M', 'G']))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()));
    if !ok {
        return Err(CgroupError::invalid(
            format!("{field}.pageSize"),
            format!("{size:?} is not a page size such as 2MB"),
        ));
    }
    Ok(size)
}

pub fn hugetlb(dir: &Path, limits: &[spec::HugepageLimit]) -> Result<(), CgroupError> {
    for (i, l) in limits.iter().enumerate() {
        let field = format!("linux.resources.hugepageLimits[{i}]");
        let size = page_size(&l.page_size, &field)?;
        let v = l.limit.to_string();
        write(dir, &format!("hugetlb.{size}.max"), &v, &field)?;
        // Reservations are charged separately (5.7+); limit them alike or a
        // MAP_NORESERVE-free mapping could reserve past the limit.
        let rsvd = format!("hugetlb.{size}.rsvd.max");
        if dir.join(&rsvd).exists() {
            write(dir, &rsvd, &v, &field)?;
        }
    }
    Ok(())
}

/// `linux.resources.unified`, verbatim, after everything else so it wins.
pub fn write_unified(dir: &Path, map: &BTreeMap<String, String>) -> Result<(), CgroupError> {
    for (key, value) in map {
        let field = format!("linux.resources.unified[{key:?}]");
        // Moving processes in through a resource setting would let a spec pull host
        // processes into the container's cgroup.
        let bad = key.is_empty()
            || key.contains('/')
            || key.contains("..")
            || !key.contains('.')
            || matches!(key.as_str(), "cgroup.procs" | "cgroup.threads");
        if bad {
            return Err(CgroupError::invalid(
                field,
                "not a writable cgroup file name",
            ));
        }
        write(dir, key, value, &field)?;
    }
    Ok(())
}

/// Enables in `dir`'s `cgroup.subtree_control` the wanted controllers it offers and has
/// not enabled yet, one at a time so that one refusal does not block the others.
pub fn enable_controllers(dir: &Path) -> Result<(), CgroupError> {
    let offered = read_file(dir, "cgroup.controllers")?;
    let enabled = read_file(dir, "cgroup.subtree_control")?;
    let missing = WANTED.iter().filter(|c| {
        offered.split_whitespace().any(|o| o == **c)
            && !enabled.split_whitespace().any(|e| e == **c)
    });
    for c in missing {
        match write_file(
            dir,
            "cgroup.subtree_control",
            &format!("+{c}"),
            "cgroup controllers",
        ) {
            Ok(()) => {}
            Err(e) if e.is_permission() => return Err(e),
            // EBUSY (processes in an inner node) and friends: the limit write that
            // needs the controller will fail with a precise message, if one comes.
            Err(e) => warn(&e.to_string()),
        }
    }
    Ok(())
}

/// Loads the device program for `rules` and makes it the only moat program on `dir`:
/// attach the new one first, then detach older ones, so there is no unfiltered moment.
pub fn apply_devices(dir: &Path, spec_rules: &[spec::DeviceCgroup]) -> Result<(), CgroupError> {
    let rules = devices::rules(spec_rules)?;
    let insns = devices::program(&rules);
    let field = "linux.resources.devices";
    let cg = File::open(dir).map_err(|e| CgroupError::io("open", dir, e))?;
    let bpf_err = |op: &'static str| move |e| CgroupError::io(op, dir, e);
    let old = bpf::prog_query(cg.as_fd(), bpf::BPF_CGROUP_DEVICE)
        .map_err(bpf_err("query device programs of"))?;
    let prog = load_program(&insns).map_err(|(e, log)| {
        if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) {
            CgroupError::io("load device program for", dir, e)
        } else {
            CgroupError::Invalid {
                field: field.into(),
                msg: format!(
                    "the kernel refused the device program: {}{log}",
                    crate::error_text::strerror(&e)
                ),
            }
        }
    })?;
    bpf::prog_attach(
        cg.as_fd(),
        prog.as_fd(),
        bpf::BPF_CGROUP_DEVICE,
        bpf::BPF_F_ALLOW_MULTI,
    )
    .map_err(bpf_err("attach device program to"))?;
    for id in old {
        let Ok(fd) = bpf::prog_get_fd_by_id(id) else {
            continue; // gone meanwhile
        };
        let ours = bpf::prog_info(fd.as_fd()).is_ok_and(|i| i.name == PROG_NAME);
        if ours {
            bpf::prog_detach(cg.as_fd(), fd.as_fd(), bpf::BPF_CGROUP_DEVICE)
                .map_err(bpf_err("detach old device program from"))?;
        }
    }
    Ok(())
}

/// Loads quietly; on refusal loads again with the verifier log to say why.
pub fn load_program(insns: &[bpf::Insn]) -> Result<OwnedFd, (io::Error, String)> {
    fn load(insns: &[bpf::Insn], log: Option<&mut [u8]>) -> io::Result<OwnedFd> {
        let t = bpf::BPF_PROG_TYPE_CGROUP_DEVICE;
        bpf::prog_load(t, insns, c"Apache-2.0", PROG_NAME, log)
    }
    load(insns, None).map_err(|e| {
        let mut buf = vec![0u8; 64 * 1024];
        let _ = load(insns, Some(&mut buf));
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let log = String::from_utf8_lossy(&buf[..end]);
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        let log = if tail.is_empty() {
            String::new()
        } else {
            format!(" (verifier: {})", tail.join(" | "))
        };
        (e, log)
    })
}

/// Writes 1 to cgroup.freeze and waits for `frozen 1` in cgroup.events; thaws again on
/// timeout.
pub fn freeze(dir: &Path) -> Result<(), CgroupError> {
    write_file(dir, "cgroup.freeze", "1", "freeze")?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut delay = Duration::from_micros(100);
    loop {
        let events = read_file(dir, "cgroup.events")?;
        if events.lines().any(|l| l.trim() == "frozen 1") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let _ = write_file(dir, "cgroup.freeze", "0", "thaw");
            return Err(CgroupError::NotFrozen {
                dir: dir.to_path_buf(),
                state: "not frozen",
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(10));
    }
}
