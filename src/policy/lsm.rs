//! The LSM floor: AppArmor profiles and SELinux types a RESTRICTED container may run
//! under, decided from the host facts.

use super::decision::change;
use super::{Config, Decision, PolicyError, APPARMOR_PROFILE_NAME};
use crate::linux::hostfacts::HostFacts;
use crate::spec::{self, Spec};

/// `name` is on an LSM list of the config: exact, or a prefix when the entry ends in `*`.
/// `unconfined` is never on an AppArmor list (the config refuses it).
pub fn lsm_listed(list: &[String], name: &str) -> bool {
    list.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The AppArmor profiles a RESTRICTED container may run under: the config's list and
/// moat's own profile, never `unconfined`.
pub fn apparmor_allowed(cfg: &Config, profile: &str) -> bool {
    profile != "unconfined"
        && (profile == APPARMOR_PROFILE_NAME || lsm_listed(&cfg.apparmor_profiles, profile))
}

/// The type field of an SELinux label `user:role:type[:level]`.
pub fn selinux_type(label: &str) -> Option<&str> {
    let mut f = label.splitn(4, ':');
    let (_, _, t) = (f.next()?, f.next()?, f.next()?);
    (!t.is_empty()).then_some(t)
}

/// The LSM floor under RESTRICTED, decided from the host facts: an AppArmor profile
/// outside `[restricted] apparmor_profiles` (`unconfined` included) becomes moat-default,
/// a spec without one gets moat-default, a listed profile the host has not loaded is an
/// error; an SELinux label whose type is outside `[restricted] selinux_types` gets the
/// first listed type. A host without the LSM leaves the field alone (it is ignored, as
/// runc ignores it).
pub(super) fn restrict_lsm(
    spec: &mut Spec,
    cfg: &Config,
    host: &HostFacts,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    let Some(process) = spec.process.as_mut() else {
        return Ok(());
    };
    // moat loads its own profile when the host has not; a moat that may not load one
    // (rootless) uses it only where it can see that root has (the list of loaded profiles
    // may be hidden from a user namespace: then it is taken as not loaded).
    let moat_profile = host.apparmor_may_load || host.moat_profile_loaded;
    if host.apparmor && !moat_profile {
        if let Some(p) = process
            .apparmor_profile
            .as_deref()
            .filter(|p| !p.is_empty() && !apparmor_allowed(cfg, p))
        {
            return Err(PolicyError::AppArmorUnavailable(p.to_string()));
        }
        if process
            .apparmor_profile
            .as_deref()
            .is_none_or(str::is_empty)
        {
            change(
                d,
                "process.apparmorProfile",
                "not applied",
                APPARMOR_PROFILE_NAME,
                "rootless moat may not load AppArmor profiles and the host has not loaded \
                 moat-default (a rootful moat create loads it)",
            );
        } else if let Some(p) = process.apparmor_profile.as_deref() {
            apparmor_check_loaded(p, host)?;
        }
    } else if host.apparmor {
        match process
            .apparmor_profile
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            None => {
                process.apparmor_profile = Some(APPARMOR_PROFILE_NAME.into());
                change(
                    d,
                    "process.apparmorProfile",
                    "set",
                    APPARMOR_PROFILE_NAME,
                    "the host has AppArmor and the spec names no profile",
                );
            }
            Some(p) if apparmor_allowed(cfg, p) => apparmor_check_loaded(p, host)?,
            Some(p) => {
                let detail = format!("{p} → {APPARMOR_PROFILE_NAME}");
                process.apparmor_profile = Some(APPARMOR_PROFILE_NAME.into());
                change(
                    d,
                    "process.apparmorProfile",
                    "replaced",
                    detail,
                    "not in restricted.apparmor_profiles",
                );
            }
        }
    }
    if host.selinux {
        if let Some(label) = process.selinux_label.as_deref().filter(|l| !l.is_empty()) {
            if let Some(fixed) = selinux_confined(cfg, label)? {
                change(
                    d,
                    "process.selinuxLabel",
                    "replaced",
                    format!("{label} → {fixed}"),
                    "its type is not in restricted.selinux_types",
                );
                process.selinux_label = Some(fixed);
            }
        }
    }
    Ok(())
}

/// A listed profile must be loaded: moat loads only its own, and a container must not
/// start with a profile the kernel would refuse halfway through create.
fn apparmor_check_loaded(profile: &str, host: &HostFacts) -> Result<(), PolicyError> {
    if profile != APPARMOR_PROFILE_NAME && host.apparmor_loaded(profile) == Some(false) {
        return Err(PolicyError::AppArmorNotLoaded(profile.to_string()));
    }
    Ok(())
}

/// `None` when `label`'s type is listed, else the label with its type replaced by the
/// first listed type that is no pattern.
fn selinux_confined(cfg: &Config, label: &str) -> Result<Option<String>, PolicyError> {
    let t = selinux_type(label).ok_or_else(|| PolicyError::SelinuxLabel(label.to_string()))?;
    if lsm_listed(&cfg.selinux_types, t) {
        return Ok(None);
    }
    let Some(want) = cfg.selinux_types.iter().find(|t| !t.ends_with('*')) else {
        return Err(PolicyError::SelinuxNoType);
    };
    let mut f: Vec<&str> = label.splitn(4, ':').collect();
    f[2] = want;
    Ok(Some(f.join(":")))
}

/// The LSM part of [`restrict_exec`], run after it: an exec'd process under RESTRICTED
/// gets the init's AppArmor profile or SELinux label instead of one that is not listed
/// (`exec --apparmor unconfined`); a listed profile the host has not loaded is an error.
pub fn restrict_exec_lsm(
    p: &mut spec::Process,
    init: &spec::Process,
    cfg: &Config,
    host: &HostFacts,
) -> Result<Vec<String>, PolicyError> {
    let mut replaced = Vec::new();
    if host.apparmor {
        if let Some(prof) = p.apparmor_profile.clone().filter(|x| !x.is_empty()) {
            if apparmor_allowed(cfg, &prof) {
                apparmor_check_loaded(&prof, host)?;
            } else {
                replaced.push(format!("apparmorProfile {prof}"));
                p.apparmor_profile = init.apparmor_profile.clone();
            }
        }
    }
    if host.selinux {
        if let Some(label) = p.selinux_label.clone().filter(|x| !x.is_empty()) {
            if selinux_confined(cfg, &label)?.is_some() {
                replaced.push(format!("selinuxLabel {label}"));
                p.selinux_label = init.selinux_label.clone();
            }
        }
    }
    Ok(replaced)
}
