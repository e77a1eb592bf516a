//! The process floor: capabilities only from `[restricted] allowed_capabilities` (never
//! inheritable), no_new_privs, a seccomp filter whatever the engine sends; an exec'd
//! process never more than the init.

use serde::Serialize;

use super::decision::change;
use super::{restricted_profile, Config, Decision, PolicyError};
use crate::spec::{self, Linux, Process};

/// RESTRICTED: only the capabilities `[restricted] allowed_capabilities` lists survive,
/// never inheritable; no_new_privs is set.
pub(super) fn floor(
    process: &mut Process,
    cfg: &Config,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    // Capabilities: only what the administrator allows survives; never inheritable.
    let allowed: Vec<u32> = cfg
        .allowed_capabilities
        .iter()
        .filter_map(|c| crate::linux::capabilities::number(c))
        .collect();
    let caps = process.capabilities.get_or_insert_with(Default::default);
    for (name, set) in [
        ("bounding", &mut caps.bounding),
        ("effective", &mut caps.effective),
        ("permitted", &mut caps.permitted),
        ("inheritable", &mut caps.inheritable),
        ("ambient", &mut caps.ambient),
    ] {
        let list = set.get_or_insert_with(Vec::new);
        // A name that is no capability at all is removed like any capability not allowed
        // (runc ignores it with a warning; OPEN does the same), and the summary names it.
        let (keep, drop): (Vec<String>, Vec<String>) = list.drain(..).partition(|c| {
            name != "inheritable"
                && crate::linux::capabilities::number(c).is_some_and(|n| allowed.contains(&n))
        });
        if !drop.is_empty() {
            change(
                d,
                format!("process.capabilities.{name}"),
                "removed",
                drop.join(","),
                "not in restricted.allowed_capabilities",
            );
        }
        *list = keep;
    }
    if process.no_new_privileges != Some(true) {
        process.no_new_privileges = Some(true);
        change(
            d,
            "process.noNewPrivileges",
            "set",
            "true",
            "setuid binaries and file capabilities must not raise privileges",
        );
    }
    Ok(())
}

/// RESTRICTED: moat's own profile where the engine sends none, else the deny floor
/// stacked on the engine's as a second filter.
pub(super) fn seccomp_floor(linux: &mut Linux, d: &mut Decision) -> Result<(), PolicyError> {
    match &linux.seccomp {
        None => {
            linux.seccomp = Some(restricted_profile()?.clone());
            change(
                d,
                "linux.seccomp",
                "set",
                "seccomp-profiles/restricted.json",
                "no seccomp profile in the spec",
            );
        }
        Some(_) => {
            d.seccomp_floor = true;
            change(
                d,
                "linux.seccomp",
                "added",
                "seccomp-profiles/floor.json as a second filter",
                "the deny floor holds whatever profile the engine sends",
            );
        }
    }
    Ok(())
}

/// Under RESTRICTED an exec'd process never gets more than the container's init: each
/// capability set is cut to the init's (inheritable emptied), NNP is forced, and the
/// init's AppArmor profile applies when the exec names none. Engines send full process
/// specs with their default capabilities on every exec (podman does).
pub fn restrict_exec(p: &mut spec::Process, init: &spec::Process) -> Vec<String> {
    let mut removed = Vec::new();
    let ic = init.capabilities.clone().unwrap_or_default();
    let caps = p.capabilities.get_or_insert_with(Default::default);
    for (name, set, allowed) in [
        ("bounding", &mut caps.bounding, &ic.bounding),
        ("effective", &mut caps.effective, &ic.effective),
        ("permitted", &mut caps.permitted, &ic.permitted),
        ("inheritable", &mut caps.inheritable, &None),
        ("ambient", &mut caps.ambient, &ic.ambient),
    ] {
        let allowed = allowed.clone().unwrap_or_default();
        let list = set.get_or_insert_with(Vec::new);
        list.retain(|c| {
            let keep = allowed.iter().any(|a| a.eq_ignore_ascii_case(c));
            if !keep {
                removed.push(format!("{name}:{c}"));
            }
            keep
        });
    }
    p.no_new_privileges = Some(true);
    if p.apparmor_profile.as_deref().unwrap_or("").is_empty() {
        p.apparmor_profile = init.apparmor_profile.clone();
    }
    removed
}

/// RESTRICTED: no realtime scheduling policy, no negative nice, no realtime I/O class. The
/// init's and an exec'd process's alike (moat sets them while still privileged).
pub fn priorities_floor(p: &Process) -> Result<(), PolicyError> {
    if let Some(s) = &p.scheduler {
        if matches!(
            s.policy.as_str(),
            "SCHED_FIFO" | "SCHED_RR" | "SCHED_DEADLINE"
        ) {
            return Err(PolicyError::Scheduler {
                what: format!("policy {}", s.policy),
            });
        }
        if s.nice < 0 {
            return Err(PolicyError::Scheduler {
                what: format!("nice {}", s.nice),
            });
        }
    }
    if p.io_priority
        .as_ref()
        .is_some_and(|i| i.class == "IOPRIO_CLASS_RT")
    {
        return Err(PolicyError::IoPriorityRealtime);
    }
    Ok(())
}

/// When a capability voids a promise of RESTRICTED.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Voids {
    /// Whatever else the container gets.
    Always,
    /// While an egress policy (a list, or the metadata block) is in force.
    WithEgress,
    /// While an egress policy is in force and `[egress] allow_raw_sockets` is off (on, the
    /// packet program judges what the capability sends and packet sockets are refused).
    WithEgressUnlessRawAllowed,
    /// While the container shares the host's pid namespace.
    WithHostPid,
    /// Never, and the row says what holds it instead.
    Never,
}

/// One row of the capability table: what allowing `cap` in `[restricted]
/// allowed_capabilities` does to RESTRICTED's promises.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CapabilityRow {
    pub cap: &'static str,
    pub voids: Voids,
    pub promise: &'static str,
    pub how: &'static str,
}

const fn cap(
    cap: &'static str,
    voids: Voids,
    promise: &'static str,
    how: &'static str,
) -> CapabilityRow {
    CapabilityRow {
        cap,
        voids,
        promise,
        how,
    }
}

/// The capabilities whose grant touches a promise. The rest grant power only over the
/// container's own namespaces and files (or over what the seccomp floor already refuses).
pub const CAPABILITIES: &[CapabilityRow] = &[
    cap("CAP_NET_RAW", Voids::WithEgressUnlessRawAllowed, "the egress policy", "raw and packet sockets send packets no connect or sendmsg hook sees; with allow_raw_sockets every packet is judged on its header and packet sockets are refused"),
    cap("CAP_NET_ADMIN", Voids::WithEgress, "the egress policy", "it reconfigures the container's interfaces, routes and netfilter, and opens raw sockets' equivalents"),
    cap("CAP_SYS_ADMIN", Voids::Always, "the mount floor and most others", "it is the capability of mount(2), of remounting the read-only sysfs and cgroupfs, and of dozens of other host-wide operations; only the seccomp floor would stand"),
    cap("CAP_SYS_MODULE", Voids::Always, "every promise", "a kernel module runs as the kernel"),
    cap("CAP_SYS_RAWIO", Voids::Always, "the device promise", "iopl/ioperm and raw block and memory access reach hardware past the device cgroup"),
    cap("CAP_DAC_READ_SEARCH", Voids::Always, "the root filesystem's boundary", "open_by_handle_at opens any file of a filesystem a bind shares with the host, outside the root"),
    cap("CAP_SYS_PTRACE", Voids::WithHostPid, "the isolation of other processes", "with the host's pid namespace it reads and writes other processes' memory through /proc/<pid>/mem"),
    cap("CAP_MKNOD", Voids::Never, "the device promise", "a node it makes opens only if the device cgroup, which allows exactly the kept devices, admits it"),
    cap("CAP_BPF", Voids::Never, "the egress policy", "loading programs needs no cgroup attach; attaching or detaching the container's cgroup programs needs CAP_NET_ADMIN or CAP_SYS_ADMIN of the host's user namespace"),
];

/// Whether `p` keeps `cap` in any of its sets.
pub fn holds(p: &Process, cap: &str) -> bool {
    p.capabilities.as_ref().is_some_and(|c| {
        [&c.bounding, &c.effective, &c.permitted, &c.ambient]
            .iter()
            .any(|s| {
                s.as_ref()
                    .is_some_and(|l| l.iter().any(|n| n.eq_ignore_ascii_case(cap)))
            })
    })
}

/// RESTRICTED: a capability the container keeps (any set) that voids a promise in force
/// is refused, naming both. Run once the decision is whole (egress, host namespaces).
pub fn voids_floor(p: &Process, cfg: &Config, d: &Decision) -> Result<(), PolicyError> {
    let Some(c) = &p.capabilities else {
        return Ok(());
    };
    let kept = [&c.bounding, &c.effective, &c.permitted, &c.ambient];
    for row in CAPABILITIES {
        let in_force = match row.voids {
            Voids::Always => true,
            Voids::WithEgress => d.egress.is_some(),
            Voids::WithEgressUnlessRawAllowed => {
                d.egress.is_some() && !cfg.egress_allow_raw_sockets
            }
            Voids::WithHostPid => d.host_namespaces.contains(&"pid"),
            Voids::Never => false,
        };
        let held = kept.iter().any(|s| {
            s.as_ref()
                .is_some_and(|l| l.iter().any(|n| n.eq_ignore_ascii_case(row.cap)))
        });
        let accepted = cfg
            .accept_voided
            .iter()
            .any(|a| a.eq_ignore_ascii_case(row.cap));
        if in_force && held && !accepted {
            return Err(PolicyError::CapabilityVoids {
                cap: row.cap.to_string(),
                promise: row.promise,
                how: row.how,
            });
        }
    }
    Ok(())
}
