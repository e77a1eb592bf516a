//! The process floor: capabilities only from `[restricted] allowed_capabilities` (never
//! inheritable), no_new_privs, a seccomp filter whatever the engine sends; an exec'd
//! process never more than the init.

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
        // A name that is no capability at all is an error under any policy, not something
        // to drop quietly.
        if let Some((i, bad)) = list
            .iter()
            .enumerate()
            .find(|(_, c)| crate::linux::capabilities::number(c).is_none())
        {
            return Err(PolicyError::UnknownCapability {
                set: name,
                index: i,
                name: bad.clone(),
            });
        }
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
