//! The namespace floor (no host pid, network, ipc or uts namespace unless the operator
//! allows it), and the namespaces moat's controls add: `moat.network=none`,
//! `moat.userns=auto`.

use super::decision::change;
use super::{config, Config, Decision, FloorFacts, Mode, NsId, PolicyError};
use crate::spec::{Namespace, Spec};

/// The host namespaces a RESTRICTED container must not join, for the check on the opened
/// fds (`linux::namespaces::Plan::refuse_host`): every floor type `[restricted]
/// host_namespaces` does not list. Empty under OPEN.
pub fn refused_host_namespaces(
    d: &Decision,
    cfg: &Config,
    facts: &FloorFacts,
) -> Vec<(&'static str, NsId)> {
    if d.policy != Mode::Restricted || !d.enforced {
        return Vec::new();
    }
    facts
        .host_ns
        .iter()
        .filter(|(t, _)| !cfg.host_namespaces.iter().any(|c| c == t))
        .copied()
        .collect()
}

/// RESTRICTED: `linux.netDevices` moves only the host interfaces `[restricted]
/// net_devices` names (exactly, or by a prefix ending in `*`); none by default. An
/// interface moved in takes the host's traffic on it along, and on the host it is gone:
/// the uplink would cut the host off the network. The first one not listed refuses the
/// create, before anything is moved.
pub(super) fn net_devices_floor(spec: &Spec, cfg: &Config) -> Result<(), PolicyError> {
    for (host, _) in spec.linux().net_devices() {
        if !super::lsm_listed(&cfg.net_devices, host) {
            return Err(PolicyError::NetDeviceNotAllowed { host: host.into() });
        }
    }
    Ok(())
}

/// RESTRICTED: the container does not share the host's pid, network, ipc or uts namespace
/// (no entry, or a path to the namespace moat itself runs in) unless `[restricted]
/// host_namespaces` names the type. Without its own pid namespace container root (host
/// uid 0 without a user namespace) can signal host root's processes; a path to another
/// container's namespace (a pod) is not the host's and stays allowed.
pub(super) fn namespace_floor(
    spec: &Spec,
    cfg: &Config,
    facts: &FloorFacts,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    for typ in config::HOST_NAMESPACE_TYPES {
        let host_ids = facts.host_ns.iter().find(|(t, _)| *t == typ).map(|x| x.1);
        let entry = spec
            .linux()
            .namespaces
            .iter()
            .enumerate()
            .find(|(_, n)| n.typ == typ);
        let shared = match entry {
            None => "linux.namespaces".to_string(),
            Some((_, n)) if n.path.is_none() => continue,
            Some((i, n)) => {
                let p = n.path.as_deref().unwrap_or_default();
                let field = format!("linux.namespaces[{i}].path");
                let ids = match facts.ns_paths.iter().find(|(q, _)| q == p) {
                    Some((_, Ok(ids))) => *ids,
                    Some((_, Err(e))) => {
                        return Err(PolicyError::NamespacePath {
                            field,
                            path: p.to_string(),
                            reason: *e,
                        })
                    }
                    None => {
                        return Err(PolicyError::NamespaceNotExamined {
                            field,
                            path: p.to_string(),
                        })
                    }
                };
                match host_ids {
                    Some(h) if h != ids => continue,
                    Some(_) => format!("{field} ({p})"),
                    None => {
                        return Err(PolicyError::HostNamespaceUnknown {
                            field,
                            path: p.to_string(),
                            typ,
                        })
                    }
                }
            }
        };
        if cfg.host_namespaces.iter().any(|t| t == typ) {
            d.host_namespaces.push(typ);
            change(
                d,
                "linux.namespaces",
                "kept",
                format!("the host's {typ} namespace"),
                "restricted.host_namespaces allows it",
            );
            continue;
        }
        return Err(PolicyError::HostNamespace { field: shared, typ });
    }
    Ok(())
}

/// `moat.userns=auto`: a new user namespace whose root is a host range from the pool. An
/// engine that maps ids itself (`linux.uidMappings`, or a user namespace joined by path)
/// keeps its mapping: it already chose who container root is on the host.
pub(super) fn userns_auto(spec: &mut Spec, cfg: &Config, d: &mut Decision) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    if linux
        .namespaces
        .iter()
        .any(|n| n.typ == "user" && n.path.is_some())
    {
        change(
            d,
            "linux.namespaces.user",
            "kept",
            "the engine's user namespace (joined by path)",
            "moat.userns=auto: the engine chose the mapping",
        );
        return;
    }
    if !linux.uid_mappings.is_empty() || !linux.gid_mappings.is_empty() {
        change(
            d,
            "linux.uidMappings",
            "kept",
            "the engine's id mappings",
            "moat.userns=auto: the engine chose the mapping",
        );
        return;
    }
    if !linux.namespaces.iter().any(|n| n.typ == "user") {
        linux.namespaces.push(Namespace {
            typ: "user".into(),
            path: None,
        });
        change(
            d,
            "linux.namespaces",
            "added",
            "a new user namespace",
            "moat.userns=auto",
        );
    }
    d.userns_pool = true;
    change(
        d,
        "linux.uidMappings",
        "set",
        format!(
            "container 0-{} → a free host range from the pool {}+{} (allocated at create); \
             the rootfs idmapped to it",
            cfg.userns_size - 1,
            cfg.userns_pool.0,
            cfg.userns_pool.1
        ),
        "moat.userns=auto: container root is an unprivileged host user",
    );
}

pub(super) fn network_none(spec: &mut Spec, d: &mut Decision) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    let fresh = Namespace {
        typ: "network".into(),
        path: None,
    };
    match linux.namespaces.iter_mut().find(|n| n.typ == "network") {
        Some(n) if n.path.is_none() => {}
        Some(n) => {
            change(
                d,
                "linux.namespaces.network",
                "replaced",
                format!(
                    "path {} → a new empty namespace",
                    n.path.as_deref().unwrap_or("")
                ),
                "moat.network=none",
            );
            *n = fresh;
        }
        None => {
            linux.namespaces.push(fresh);
            change(
                d,
                "linux.namespaces",
                "added",
                "a new empty network namespace",
                "moat.network=none",
            );
        }
    }
}
