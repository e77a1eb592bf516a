//! The resource floor: limits set where the engine set none, `memory.high` below the
//! memory limit, the fleet budget cgroup and the placement under it.

use super::decision::change;
use super::{Change, Config, Decision};
use crate::spec::{self, Spec};

/// RESTRICTED: the config's memory, pids and cpu limits where the engine set none.
pub(super) fn limits_floor(spec: &mut Spec, cfg: &Config, d: &mut Decision) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    let res = linux.resources.get_or_insert_with(Default::default);
    d.changes.extend(floor_limits(res, cfg, Asked::Create));
}

/// Who asks for limits: `create` (a limit left out gets the floor's) or `update` (a value
/// left out means "unchanged", so only a value given that would lift a limit is replaced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    Create,
    Update,
}

impl Asked {
    fn action(self) -> &'static str {
        match self {
            Asked::Create => "set",
            Asked::Update => "replaced",
        }
    }

    fn reason(self, create: &'static str, update: &'static str) -> &'static str {
        match self {
            Asked::Create => create,
            Asked::Update => update,
        }
    }

    /// What the change says: the floor's value, and at update what was asked instead.
    fn detail(self, asked: impl std::fmt::Display, floor: impl std::fmt::Display) -> String {
        match self {
            Asked::Create => floor.to_string(),
            Asked::Update => format!("{asked} with {floor}"),
        }
    }
}

/// The one rule create and update share: a memory, pids or cpu value that sets no limit
/// gets the config's (`[restricted] memory`, `pids`, `cpus`), and so does a
/// `linux.resources.unified` `memory.max`, `pids.max` or `cpu.max` of `max`. "Sets no
/// limit" is what the cgroup writers make of it: a memory limit or cpu quota below 0 is
/// unlimited and 0 unset (not written); a negative pids limit is written as `max` (0 is
/// a limit since runtime-spec 1.3: written as 1, as runc 1.4 does); a cpu period without a quota is written on cgroup v2 as
/// `max PERIOD`. An unset value is the floor's at create and unchanged at update. The
/// floor sets no swap limit, so `memory.swap` and `memory.swap.max` lift nothing and stay.
pub(super) fn floor_limits(res: &mut spec::Resources, cfg: &Config, asked: Asked) -> Vec<Change> {
    let mut out = Vec::new();
    let mut push = |field: &str, detail: String, reason: &'static str| {
        out.push(Change {
            field: field.into(),
            action: asked.action(),
            detail,
            reason: reason.into(),
        });
    };
    if let Some(limit) = cfg.memory {
        let given = res.memory.as_ref().and_then(|m| m.limit);
        let replace = match given {
            Some(v) if v < 0 => true,
            None | Some(0) => asked == Asked::Create,
            Some(_) => false,
        };
        if replace {
            res.memory.get_or_insert_with(Default::default).limit = Some(limit);
            push(
                "linux.resources.memory.limit",
                asked.detail(given.unwrap_or(0), limit),
                asked.reason(
                    "restricted.memory: the engine set no memory limit",
                    "restricted.memory: an update may not lift the memory limit create set",
                ),
            );
        }
    }
    if let Some(pids) = cfg.pids {
        let given = res.pids.as_ref().and_then(|p| p.limit);
        let replace = match given {
            Some(v) => v < 0,
            None => asked == Asked::Create,
        };
        if replace {
            res.pids = Some(spec::Pids { limit: Some(pids) });
            push(
                "linux.resources.pids.limit",
                asked.detail(given.unwrap_or(0), pids),
                asked.reason(
                    "restricted.pids: the engine set no pids limit",
                    "restricted.pids: an update may not lift the pids limit create set",
                ),
            );
        }
    }
    if let Some(cpus) = cfg.cpus {
        let given = res.cpu.as_ref().and_then(|c| c.quota);
        let period_only = res
            .cpu
            .as_ref()
            .and_then(|c| c.period)
            .is_some_and(|p| p > 0);
        let replace = match given {
            Some(v) if v < 0 => true,
            None | Some(0) => asked == Asked::Create || period_only,
            Some(_) => false,
        };
        if replace {
            let cpu = res.cpu.get_or_insert_with(Default::default);
            let period = cpu.period.filter(|p| *p > 0).unwrap_or(100_000);
            let quota = cpu_quota(cpus, period);
            cpu.period = Some(period);
            cpu.quota = Some(quota);
            push(
                "linux.resources.cpu.quota",
                asked.detail(given.unwrap_or(0), format!("{quota} per {period}")),
                asked.reason(
                    "restricted.cpus: the engine set no cpu limit",
                    "restricted.cpus: an update may not lift the cpu limit create set",
                ),
            );
        }
    }
    let Some(unified) = res.unified.as_mut() else {
        return out;
    };
    // The unified files that would lift a floor's single-number limit.
    let single: [(&str, Option<i64>, [&'static str; 2]); 2] = [
        (
            "memory.max",
            cfg.memory,
            [
                "restricted.memory: memory.max lifts the memory limit",
                "restricted.memory: an update may not lift the memory limit create set",
            ],
        ),
        (
            "pids.max",
            cfg.pids,
            [
                "restricted.pids: pids.max lifts the pids limit",
                "restricted.pids: an update may not lift the pids limit create set",
            ],
        ),
    ];
    for (key, floor, [on_create, on_update]) in single {
        let (Some(floor), Some(v)) = (floor, unified.get_mut(key)) else {
            continue;
        };
        if unlimited(v) {
            push(
                &format!("linux.resources.unified.{key}"),
                asked.detail(v.trim(), floor),
                asked.reason(on_create, on_update),
            );
            *v = floor.to_string();
        }
    }
    if let (Some(cpus), Some(v)) = (cfg.cpus, unified.get_mut("cpu.max")) {
        let mut words = v.split_whitespace();
        if words.next().is_some_and(unlimited) {
            let period = words
                .next()
                .and_then(|p| p.parse().ok())
                .filter(|p| *p > 0)
                .unwrap_or(100_000);
            let floor = format!("{} {period}", cpu_quota(cpus, period));
            push(
                "linux.resources.unified.cpu.max",
                asked.detail(v.trim(), &floor),
                asked.reason(
                    "restricted.cpus: cpu.max lifts the cpu limit",
                    "restricted.cpus: an update may not lift the cpu limit create set",
                ),
            );
            *v = floor;
        }
    }
    out
}

/// A cgroup v2 limit value that sets none: `max`, or a negative number.
fn unlimited(v: &str) -> bool {
    let v = v.trim();
    v == "max" || v.parse::<i64>().is_ok_and(|n| n < 0)
}

/// The fleet budget: containers moat places itself sit under one capped parent.
pub(super) fn fleet_placement(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    systemd: bool,
    d: &mut Decision,
) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    let fleet = cfg.fleet_cgroup.trim_end_matches('/');
    let placed = if systemd {
        systemd_fleet_placement(linux.cgroups_path.as_deref(), cfg, id)
    } else {
        match linux.cgroups_path.as_deref() {
            None | Some("") => Some(format!("{fleet}/{id}")),
            Some(p) if !p.starts_with('/') && !p.contains(':') => Some(format!("{fleet}/{p}")),
            Some(p) if cfg.force_nesting && p.starts_with('/') => Some(format!("{fleet}{p}")),
            Some(_) => None,
        }
    };
    if let Some(p) = placed {
        change(
            d,
            "linux.cgroupsPath",
            "set",
            p.clone(),
            "under the fleet budget cgroup",
        );
        linux.cgroups_path = Some(p);
    }
}

/// Why moat sets `memory.high`.
const MEMORY_HIGH: &str = "restricted.memory_high: throttle and reclaim before the memory \
     limit's OOM kill";

/// RESTRICTED: below a memory limit (the engine's or the config's) the kernel throttles
/// and reclaims from `memory_high` of it (`linux.resources.unified["memory.high"]`, which
/// the cgroupfs driver writes and the systemd driver sends as `MemoryHigh`), so a leaking
/// sandbox slows down and shows memory pressure before it is killed. An engine's own
/// `memory.high` (Kubernetes MemoryQoS) is kept. cgroup v1 has no such file: the decision
/// says so, and the limit stays a hard one.
pub(super) fn memory_high(spec: &mut Spec, cfg: &Config, cgroup_v2: bool, d: &mut Decision) {
    if cfg.memory_high <= 0.0 {
        return;
    }
    let Some(res) = spec.linux.as_mut().and_then(|l| l.resources.as_mut()) else {
        return;
    };
    let unified = res.unified.get_or_insert_with(Default::default);
    // unified is written last, so its memory.max wins over memory.limit.
    let limit = match unified.get("memory.max") {
        Some(v) => v.trim().parse().ok(),
        None => res.memory.as_ref().and_then(|m| m.limit),
    }
    .filter(|l: &i64| *l > 0);
    let Some(limit) = limit else {
        return;
    };
    if unified.contains_key("memory.high") {
        change(
            d,
            "linux.resources.unified.memory.high",
            "kept",
            "the engine's memory.high",
            "the engine chose its own throttle",
        );
        return;
    }
    if !cgroup_v2 {
        if unified.is_empty() {
            res.unified = None;
        }
        change(
            d,
            "linux.resources.unified.memory.high",
            "absent",
            "the memory controller is cgroup v1 here, which has no memory.high: the limit \
             is a hard one (OOM kill, no throttle)",
            MEMORY_HIGH,
        );
        return;
    }
    let high = high_of(limit, cfg.memory_high);
    unified.insert("memory.high".into(), high.to_string());
    d.memory_high = Some(cfg.memory_high);
    change(
        d,
        "linux.resources.unified.memory.high",
        "set",
        format!("{high} ({} of the limit {limit})", cfg.memory_high),
        MEMORY_HIGH,
    );
}

/// `share` of `limit` bytes, whole pages: what `memory.high` is written as.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
pub fn high_of(limit: i64, share: f64) -> i64 {
    // The config admits shares in (0, 1); the cast saturates and is below `limit`.
    let bytes = (limit as f64 * share) as i64;
    bytes - bytes % 4096
}

/// The fleet budget under the systemd driver is a slice named after `[fleet] cgroup`
/// (`/moat` → `moat.slice`): a container moat names itself goes in it; an engine's
/// `slice:prefix:name` only with `force_nesting`, its slice nested below the fleet's
/// (`machine.slice` → `moat-machine.slice`). Without a budget nothing moves.
fn systemd_fleet_placement(path: Option<&str>, cfg: &Config, id: &str) -> Option<String> {
    fleet_budget(cfg)?;
    let fleet = crate::linux::cgroups::systemd::fleet_slice(&cfg.fleet_cgroup).ok()?;
    let stem = fleet.strip_suffix(".slice")?;
    match path.filter(|p| !p.is_empty()) {
        None => Some(format!("{fleet}:moat:{id}")),
        Some(p) if cfg.force_nesting => {
            let (slice, rest) = p.split_once(':')?;
            let slice = if slice.is_empty() {
                "system.slice"
            } else {
                slice
            };
            (slice != fleet && !slice.starts_with(&format!("{stem}-")))
                .then(|| format!("{stem}-{slice}:{rest}"))
        }
        Some(_) => None,
    }
}

/// The fleet budget cgroup and its limits, when the config caps anything.
pub fn fleet_budget(cfg: &Config) -> Option<(String, spec::Resources)> {
    if cfg.fleet_memory.is_none() && cfg.fleet_pids.is_none() && cfg.fleet_cpus.is_none() {
        return None;
    }
    let res = spec::Resources {
        memory: cfg.fleet_memory.map(|m| spec::Memory {
            limit: Some(m),
            ..Default::default()
        }),
        pids: cfg
            .fleet_pids
            .map(|limit| spec::Pids { limit: Some(limit) }),
        cpu: cfg.fleet_cpus.map(|c| spec::Cpu {
            quota: Some(cpu_quota(c, 100_000)),
            period: Some(100_000),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some((cfg.fleet_cgroup.clone(), res))
}

/// The CFS quota (µs per `period`) of `cpus` CPUs: the config admits only positive
/// numbers, and a float-to-integer cast saturates.
#[allow(clippy::cast_possible_truncation)]
fn cpu_quota(cpus: f64, period: u64) -> i64 {
    (cpus * period as f64) as i64
}
