//! cgroup v1 (and hybrid) resource files. On a hybrid host a controller that is not bound
//! to a v1 hierarchy (here typically hugetlb) lives in the unified mount and gets its v2
//! file names.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{devices, read_file, v2, write_file, Cgroup, CgroupError};
use crate::log::warn;
use crate::spec::{self, Resources};

pub fn apply(cg: &Cgroup, res: &Resources) -> Result<(), CgroupError> {
    set_resources(cg, res, true)
}

/// `apply` for a running container: the same limits, device rules left alone.
pub fn update(cg: &Cgroup, res: &Resources) -> Result<(), CgroupError> {
    set_resources(cg, res, false)
}

fn set_resources(cg: &Cgroup, res: &Resources, devices: bool) -> Result<(), CgroupError> {
    if let Some(cpu) = &res.cpu {
        cpuset(cg, cpu)?;
        cpu_limits(cg, cpu)?;
    }
    if let Some(m) = &res.memory {
        memory(cg, m)?;
    }
    if let Some(limit) = res.pids.as_ref().and_then(|p| p.limit) {
        let (dir, _) = cg.dir_for("pids", "linux.resources.pids")?;
        write_file(
            &dir,
            "pids.max",
            &v2::pids_max(limit),
            "linux.resources.pids.limit",
        )?;
    }
    if let Some(b) = &res.block_io {
        blkio(cg, b)?;
    }
    hugetlb(cg, &res.hugepage_limits)?;
    if devices {
        device_rules(cg, &res.devices)?;
    }
    if let Some(n) = &res.network {
        network(cg, n)?;
    }
    if let Some(r) = &res.rdma {
        // The v1 `rdma` hierarchy when mounted, else the unified one of a hybrid host.
        let (dir, _) = cg.dir_for("rdma", "linux.resources.rdma")?;
        v2::rdma(&dir, r)?;
    }
    if let Some(u) = res.unified.as_ref().filter(|u| !u.is_empty()) {
        let Some(dir) = cg.v2_dir() else {
            return Err(CgroupError::invalid(
                "linux.resources.unified",
                "needs cgroup v2, and this host has no writable cgroup2 mount",
            ));
        };
        // runc's words ("invalid configuration"): a key of a controller that is bound to a
        // v1 hierarchy here cannot reach it through the unified mount.
        let v2_controllers: Vec<&str> = cg
            .hierarchies
            .iter()
            .filter(|h| h.v2)
            .flat_map(|h| h.controllers.iter().map(String::as_str))
            .collect();
        for key in u.keys() {
            let ctrl = key.split('.').next().unwrap_or("");
            let core = matches!(ctrl, "cgroup" | "");
            let on_v1 = cg.hierarchies.iter().any(|h| !h.v2 && h.has(ctrl));
            if !core && on_v1 && !v2_controllers.contains(&ctrl) {
                return Err(CgroupError::invalid(
                    format!("linux.resources.unified[{key:?}]"),
                    format!(
                        "invalid configuration: the {ctrl} controller is on cgroup v1 on this host, \
                         and unified keys only reach cgroup v2"
                    ),
                ));
            }
        }
        v2::write_unified(&dir, u)?;
    }
    Ok(())
}

fn set<T: ToString>(dir: &Path, file: &str, v: Option<T>, field: &str) -> Result<(), CgroupError> {
    match v {
        Some(v) => write_file(dir, file, &v.to_string(), field),
        None => Ok(()),
    }
}

/// Writes a period and the budget measured against it so that each state in between is
/// one the kernel accepts: the period first (a budget that fits the new period may not fit
/// the old one), unless the kernel refuses it (EINVAL: the old budget over the new, shorter
/// period exceeds what the parent allows), then the budget first and the period after
/// it, as runc does.
fn set_in_order<A: ToString, B: ToString>(
    dir: &Path,
    period: (&str, Option<A>, &str),
    budget: (&str, Option<B>, &str),
) -> Result<(), CgroupError> {
    let (pfile, pval, pfield) = period;
    let (bfile, bval, bfield) = budget;
    match set(dir, pfile, pval.as_ref().map(ToString::to_string), pfield) {
        Err(CgroupError::Write { err, .. })
            if err.raw_os_error() == Some(libc::EINVAL) && bval.is_some() =>
        {
            set(dir, bfile, bval, bfield)?;
            set(dir, pfile, pval, pfield)
        }
        r => {
            r?;
            set(dir, bfile, bval, bfield)
        }
    }
}

fn cpuset(cg: &Cgroup, cpu: &spec::Cpu) -> Result<(), CgroupError> {
    if cpu.cpus.is_none() && cpu.mems.is_none() {
        return Ok(());
    }
    let (dir, _) = cg.dir_for("cpuset", "linux.resources.cpu.cpus")?;
    set(
        &dir,
        "cpuset.cpus",
        cpu.cpus.as_ref(),
        "linux.resources.cpu.cpus",
    )?;
    set(
        &dir,
        "cpuset.mems",
        cpu.mems.as_ref(),
        "linux.resources.cpu.mems",
    )
}

fn cpu_limits(cg: &Cgroup, cpu: &spec::Cpu) -> Result<(), CgroupError> {
    // Zero means "unset" in OCI for all of these, as in runc.
    let shares = cpu.shares.filter(|&v| v != 0);
    let quota = cpu.quota.filter(|&v| v != 0);
    let period = cpu.period.filter(|&v| v != 0);
    let burst = cpu.burst;
    let rt_runtime = cpu.realtime_runtime.filter(|&v| v != 0);
    let rt_period = cpu.realtime_period.filter(|&v| v != 0);
    let any = shares.is_some()
        || quota.is_some()
        || period.is_some()
        || burst.is_some()
        || rt_runtime.is_some()
        || rt_period.is_some()
        || cpu.idle.is_some();
    if !any {
        return Ok(());
    }
    let (dir, _) = cg.dir_for("cpu", "linux.resources.cpu")?;
    set(&dir, "cpu.shares", shares, "linux.resources.cpu.shares")?;
    // The kernel checks each value against the others in force (quota/period against
    // the parent's ratio, the runtime against the period and the parent's budget).
    set_in_order(
        &dir,
        ("cpu.cfs_period_us", period, "linux.resources.cpu.period"),
        ("cpu.cfs_quota_us", quota, "linux.resources.cpu.quota"),
    )?;
    set(&dir, "cpu.cfs_burst_us", burst, "linux.resources.cpu.burst")?;
    set_in_order(
        &dir,
        (
            "cpu.rt_period_us",
            rt_period,
            "linux.resources.cpu.realtimePeriod",
        ),
        (
            "cpu.rt_runtime_us",
            rt_runtime,
            "linux.resources.cpu.realtimeRuntime",
        ),
    )?;
    set(&dir, "cpu.idle", cpu.idle, "linux.resources.cpu.idle")
}

fn memory(cg: &Cgroup, m: &spec::Memory) -> Result<(), CgroupError> {
    let limit = m.limit.filter(|&v| v != 0);
    let swap = m.swap.filter(|&v| v != 0);
    let reservation = m.reservation.filter(|&v| v != 0);
    let kernel_tcp = m.kernel_tcp.filter(|&v| v != 0);
    for (v, f) in [
        (limit, "limit"),
        (swap, "swap"),
        (reservation, "reservation"),
    ] {
        if v.is_some_and(|v| v < -1) {
            return Err(CgroupError::invalid(
                format!("linux.resources.memory.{f}"),
                "must be -1 (unlimited) or a byte count",
            ));
        }
    }
    if let (Some(l), Some(s)) = (limit, swap) {
        if l > 0 && s > 0 && s < l {
            return Err(CgroupError::invalid(
                "linux.resources.memory.swap",
                format!("memory+swap limit {s} is below the memory limit {l}"),
            ));
        }
    }
    if m.swappiness.is_some_and(|s| s > 100) {
        return Err(CgroupError::invalid(
            "linux.resources.memory.swappiness",
            "must be between 0 and 100",
        ));
    }
    if m.kernel.is_some_and(|k| k != 0) {
        warn("linux.resources.memory.kernel ignored: kernel memory limits are gone from Linux 5.16 on");
    }
    let any = limit.is_some()
        || swap.is_some()
        || reservation.is_some()
        || kernel_tcp.is_some()
        || m.swappiness.is_some()
        || m.disable_oom_killer == Some(true);
    if !any {
        return Ok(());
    }
    let (dir, _) = cg.dir_for("memory", "linux.resources.memory")?;
    let swap = match swap {
        Some(_) if !dir.join("memory.memsw.limit_in_bytes").exists() => {
            warn("linux.resources.memory.swap ignored: swap accounting is disabled on this host");
            None
        }
        s => s,
    };
    // memsw must stay >= limit after every single write: raise memsw first when the
    // limit goes up (or swap becomes unlimited), lower the limit first otherwise.
    let swap_first = match (limit, swap) {
        (_, Some(-1)) => true,
        (Some(l), Some(_)) => {
            let current = read_file(&dir, "memory.limit_in_bytes")?;
            l == -1 || current.trim().parse::<i64>().is_ok_and(|c| l > c)
        }
        _ => false,
    };
    let (lf, sf) = (
        "linux.resources.memory.limit",
        "linux.resources.memory.swap",
    );
    if swap_first {
        set(&dir, "memory.memsw.limit_in_bytes", swap, sf)?;
        set(&dir, "memory.limit_in_bytes", limit, lf)?;
    } else {
        set(&dir, "memory.limit_in_bytes", limit, lf)?;
        set(&dir, "memory.memsw.limit_in_bytes", swap, sf)?;
    }
    let rf = "linux.resources.memory.reservation";
    set(&dir, "memory.soft_limit_in_bytes", reservation, rf)?;
    let sw = "linux.resources.memory.swappiness";
    set(&dir, "memory.swappiness", m.swappiness, sw)?;
    if m.disable_oom_killer == Some(true) {
        let f = "linux.resources.memory.disableOOMKiller";
        write_file(&dir, "memory.oom_control", "1", f)?;
    }
    if let Some(t) = kernel_tcp {
        if dir.join("memory.kmem.tcp.limit_in_bytes").exists() {
            let f = "linux.resources.memory.kernelTCP";
            write_file(&dir, "memory.kmem.tcp.limit_in_bytes", &t.to_string(), f)?;
        } else {
            warn("linux.resources.memory.kernelTCP ignored: this kernel has no kmem.tcp limit");
        }
    }
    Ok(())
}

/// `MAJ:MIN`, refusing negative numbers the kernel would misparse.
pub fn devnum(major: i64, minor: i64, field: &str) -> Result<String, CgroupError> {
    if major < 0 || minor < 0 {
        return Err(CgroupError::invalid(
            field,
            format!("bad device {major}:{minor}"),
        ));
    }
    Ok(format!("{major}:{minor}"))
}

fn blkio(cg: &Cgroup, b: &spec::BlockIo) -> Result<(), CgroupError> {
    let weight = b.weight.filter(|&w| w != 0);
    let leaf = b.leaf_weight.filter(|&w| w != 0);
    let throttles = [
        (
            &b.throttle_read_bps_device,
            "blkio.throttle.read_bps_device",
            "throttleReadBpsDevice",
        ),
        (
            &b.throttle_write_bps_device,
            "blkio.throttle.write_bps_device",
            "throttleWriteBpsDevice",
        ),
        (
            &b.throttle_read_iops_device,
            "blkio.throttle.read_iops_device",
            "throttleReadIOPSDevice",
        ),
        (
            &b.throttle_write_iops_device,
            "blkio.throttle.write_iops_device",
            "throttleWriteIOPSDevice",
        ),
    ];
    let any = weight.is_some()
        || leaf.is_some()
        || !b.weight_device.is_empty()
        || throttles.iter().any(|(t, _, _)| !t.is_empty());
    if !any {
        return Ok(());
    }
    let (dir, _) = cg.dir_for("blkio", "linux.resources.blockIO")?;
    // CFQ is gone from current kernels; BFQ offers the same knobs under a bfq. prefix.
    let pick = |cfq: &'static str, bfq: &'static str| {
        if dir.join(cfq).exists() || !dir.join(bfq).exists() {
            cfq
        } else {
            bfq
        }
    };
    let f = "linux.resources.blockIO.weight";
    set(&dir, pick("blkio.weight", "blkio.bfq.weight"), weight, f)?;
    let f = "linux.resources.blockIO.leafWeight";
    set(&dir, "blkio.leaf_weight", leaf, f)?;
    for (i, d) in b.weight_device.iter().enumerate() {
        let field = format!("linux.resources.blockIO.weightDevice[{i}]");
        let dev = devnum(d.major, d.minor, &field)?;
        if let Some(w) = d.weight {
            let file = pick("blkio.weight_device", "blkio.bfq.weight_device");
            write_file(
                &dir,
                file,
                &format!("{dev} {w}"),
                &format!("{field}.weight"),
            )?;
        }
        if let Some(w) = d.leaf_weight {
            let f = format!("{field}.leafWeight");
            write_file(&dir, "blkio.leaf_weight_device", &format!("{dev} {w}"), &f)?;
        }
    }
    for (list, file, name) in throttles {
        for (i, t) in list.iter().enumerate() {
            let field = format!("linux.resources.blockIO.{name}[{i}]");
            let dev = devnum(t.major, t.minor, &field)?;
            write_file(&dir, file, &format!("{dev} {}", t.rate), &field)?;
        }
    }
    Ok(())
}

fn hugetlb(cg: &Cgroup, limits: &[spec::HugepageLimit]) -> Result<(), CgroupError> {
    if limits.is_empty() {
        return Ok(());
    }
    let (dir, is_v2) = cg.dir_for("hugetlb", "linux.resources.hugepageLimits")?;
    if is_v2 {
        return v2::hugetlb(&dir, limits);
    }
    for (i, l) in limits.iter().enumerate() {
        let field = format!("linux.resources.hugepageLimits[{i}]");
        let size = v2::page_size(&l.page_size, &field)?;
        let file = format!("hugetlb.{size}.limit_in_bytes");
        write_file(&dir, &file, &l.limit.to_string(), &field)?;
    }
    Ok(())
}

fn device_rules(cg: &Cgroup, spec_rules: &[spec::DeviceCgroup]) -> Result<(), CgroupError> {
    let rules = devices::rules(spec_rules)?;
    let dir = match cg.dir_for("devices", "linux.resources.devices") {
        Ok((dir, false)) => dir,
        // Without a writable devices hierarchy (rootless) the user namespace already
        // keeps the container from creating or reaching device nodes it was not given.
        Ok((_, true)) | Err(_) if spec_rules.is_empty() => return Ok(()),
        Ok((_, true)) | Err(_) => {
            warn("linux.resources.devices not enforced: no writable devices cgroup");
            return Ok(());
        }
    };
    // Start from deny-all so an allow-list means the same as on v2, where the BPF
    // program denies by default.
    if !rules.first().is_some_and(|r| r.is_reset()) {
        write_file(&dir, "devices.deny", "a", "linux.resources.devices")?;
    }
    for (i, r) in rules.iter().enumerate() {
        let field = if i < spec_rules.len() {
            format!("linux.resources.devices[{i}]")
        } else {
            "default devices".to_string()
        };
        let (file, lines) = r.v1_lines();
        for line in lines {
            write_file(&dir, file, &line, &field)?;
        }
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Network {
    #[serde(default, rename = "classID")]
    class_id: Option<u32>,
    #[serde(default)]
    priorities: Vec<Priority>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Priority {
    name: String,
    priority: u32,
}

fn network(cg: &Cgroup, n: &serde_json::Value) -> Result<(), CgroupError> {
    let field = "linux.resources.network";
    let net: Network = serde_json::from_value(n.clone())
        .map_err(|e| CgroupError::invalid(field, e.to_string()))?;
    if let Some(id) = net.class_id {
        let (dir, _) = cg.dir_for("net_cls", field)?;
        write_file(
            &dir,
            "net_cls.classid",
            &id.to_string(),
            "linux.resources.network.classID",
        )?;
    }
    if !net.priorities.is_empty() {
        let (dir, _) = cg.dir_for("net_prio", field)?;
        for (i, p) in net.priorities.iter().enumerate() {
            let f = format!("linux.resources.network.priorities[{i}]");
            if p.name.is_empty() || p.name.contains(char::is_whitespace) {
                return Err(CgroupError::invalid(
                    f,
                    format!("bad interface name {:?}", p.name),
                ));
            }
            write_file(
                &dir,
                "net_prio.ifpriomap",
                &format!("{} {}", p.name, p.priority),
                &f,
            )?;
        }
    }
    Ok(())
}

/// A new v1 cpuset child starts with empty cpus and mems, and nothing can join it until
/// they are set: copy the parent's (already filled, since creation goes top-down).
pub fn inherit_cpuset(parent: &Path, child: &Path) -> Result<(), CgroupError> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        if !read_file(child, file)?.trim().is_empty() {
            continue;
        }
        let value = read_file(parent, file)?;
        let value = value.trim();
        if !value.is_empty() {
            write_file(child, file, value, "cpuset inherited from parent")?;
        }
    }
    Ok(())
}

/// Writes FROZEN and waits for the state to leave FREEZING; on timeout thaws again so the
/// container is not left half-frozen.
pub fn freeze(dir: &Path) -> Result<(), CgroupError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut delay = Duration::from_micros(100);
    loop {
        // Re-writing FROZEN nudges tasks that were busy in the kernel the first time.
        write_file(dir, "freezer.state", "FROZEN", "freeze")?;
        if read_file(dir, "freezer.state")?.trim() == "FROZEN" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let _ = write_file(dir, "freezer.state", "THAWED", "thaw");
            return Err(CgroupError::NotFrozen {
                dir: dir.to_path_buf(),
                state: "still FREEZING",
            });
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(Duration::from_millis(10));
    }
}
