//! The hardening policy: a pure function from (engine's spec, config, annotations) to the
//! spec that actually runs, plus the list of what it changed and why.
//!
//! RESTRICTED (the default) enforces a floor whatever the engine asked for; OPEN runs the
//! spec as written (runc semantics) and is only reachable when the configuration says so.
//! Nothing here touches the system: `create` applies the result, `policy explain` prints
//! it, `verify` compares the kernel's view of a container with it.
//!
//! The floor is applied in one order, each part in its own module: `process` (capabilities,
//! no_new_privs, seccomp), `mounts` (masked and read-only paths, pseudo-filesystems, the
//! engine's `/dev`), `resources` (limits, `memory.high`, the fleet cgroup), `lsm`
//! (AppArmor, SELinux), then the controls a container asks for (`select`: `rootfs`,
//! `namespaces`, `egress`), each change recorded in the [`Decision`].

pub mod admission;
pub mod config;
mod decision;
mod devices;
pub mod egress;
mod error;
mod facts;
mod lsm;
mod mounts;
mod namespaces;
mod process;
mod resources;
mod rootfs;
mod select;
#[cfg(test)]
mod tests;
pub mod update;

use crate::linux::hostfacts::HostFacts;
use crate::spec::Spec;
pub use config::{Config, Mode};
#[cfg(test)]
pub use decision::ACTIONS;
pub use decision::{recorded_summary, Change, Decided, Decision, Userns};
pub use error::{NsPathError, PolicyError};
pub use facts::{FloorFacts, NsId};
pub use lsm::{apparmor_allowed, lsm_listed, restrict_exec_lsm, selinux_type};
pub use mounts::MOUNT_TYPES;
pub use namespaces::refused_host_namespaces;
pub use process::{holds, priorities_floor, restrict_exec, Voids, CAPABILITIES};
pub use resources::{fleet_budget, high_of};
pub use rootfs::{tmpfs_caps, Rootfs, INODE_SPACE};
pub use select::IGNORED_ANNOTATION;

/// moat's own seccomp profile, used when the engine gives none.
pub const RESTRICTED_PROFILE: &str = include_str!("../../seccomp-profiles/restricted.json");

/// [`RESTRICTED_PROFILE`] parsed (once per process): what the policy puts in a spec
/// without a profile, and what `linux::seccomp` recognises as built in.
pub fn restricted_profile() -> Result<&'static crate::spec::Seccomp, PolicyError> {
    static P: std::sync::OnceLock<crate::spec::Seccomp> = std::sync::OnceLock::new();
    if let Some(p) = P.get() {
        return Ok(p);
    }
    let p = serde_json::from_str(RESTRICTED_PROFILE).map_err(PolicyError::RestrictedProfile)?;
    Ok(P.get_or_init(|| p))
}
/// The deny floor stacked on top of an engine's own profile.
pub const FLOOR_PROFILE: &str = include_str!("../../seccomp-profiles/floor.json");
/// Packet sockets refused (`AF_PACKET`, `AF_XDP`, `SOCK_PACKET`), stacked as one more
/// filter where a container keeps `CAP_NET_RAW` under an egress policy
/// (`Egress::packets`): no cgroup program sees what they send.
pub const PACKET_PROFILE: &str = include_str!("../../seccomp-profiles/packet.json");
/// The AppArmor profile moat loads where the host has AppArmor and the spec names none.
pub const APPARMOR_PROFILE_NAME: &str = "moat-default";
pub const APPARMOR_PROFILE: &str = include_str!("../../apparmor/moat-default");

/// runc's default masked and read-only paths (the starter spec's, `spec::default`).
pub use crate::spec::default::{MASKED_PATHS, READONLY_PATHS};

/// moat's annotation keys; any other `moat.*` key is an error.
pub const ANNOTATIONS: [&str; 7] = [
    "moat.policy",
    "moat.egress",
    "moat.rootfs",
    "moat.rootfs.size",
    "moat.network",
    "moat.runtime",
    "moat.userns",
];

/// Applies the policy to `spec` in place and says what changed. `host` is what the host's
/// LSMs are and `floor` what its namespaces are, both probed on the host before this runs
/// ([`HostFacts::probe`], `linux::namespaces::floor_facts`; `container::policy::decide`
/// does both): the policy itself does no I/O, and its result is a function of its
/// arguments alone.
pub fn apply(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
) -> Result<Decision, PolicyError> {
    apply_with(spec, cfg, id, host, floor, true)
}

/// For tests of `verify` only (the caller allows it in debug builds alone, on
/// `MOAT_TEST_SKIP_POLICY=1`): the decision records the mode the spec asked for, RESTRICTED
/// included, but RESTRICTED's floor is not applied, so a test can prove that `verify`
/// catches the difference.
pub fn apply_unenforced(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
) -> Result<Decision, PolicyError> {
    apply_with(spec, cfg, id, host, floor, false)
}

fn apply_with(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
    enforce: bool,
) -> Result<Decision, PolicyError> {
    let mut sel = select::select(spec, cfg)?;
    let wanted_egress = sel.egress.take();
    let mut d = Decision {
        policy: sel.mode,
        readonly_rootfs: sel.rootfs == Rootfs::Readonly,
        rootfs: sel.rootfs,
        bounded_root: None,
        network_none: sel.network_none,
        seccomp_floor: false,
        userns: if sel.userns_auto {
            Userns::Auto
        } else {
            Userns::Engine
        },
        userns_pool: false,
        changes: sel.ignored,
        not_applied: Vec::new(),
        host_namespaces: Vec::new(),
        audit: Vec::new(),
        memory_high: None,
        egress: None,
        enforced: enforce,
        unknown: Default::default(),
    };
    let restricted = sel.mode == Mode::Restricted && enforce;
    if cfg.audit && sel.mode == Mode::Open {
        d.audit = audit(spec, cfg, id, host, floor);
    }
    unknown_keys(spec, restricted, &mut d)?;
    if restricted {
        restrict(spec, cfg, id, floor.systemd_cgroup, &mut d)?;
        resources::memory_high(spec, cfg, floor.cgroup_v2, &mut d);
        mounts::mount_types_floor(spec, &mut d);
        mounts::mounts_floor(spec, floor, &mut d);
        lsm::restrict_lsm(spec, cfg, host, &mut d)?;
    }
    match sel.rootfs {
        Rootfs::Readonly => rootfs::readonly_rootfs(spec, cfg, &mut d),
        Rootfs::Ephemeral => rootfs::ephemeral_rootfs(spec, cfg, sel.rootfs_size, &mut d)?,
        Rootfs::Writable => {}
    }
    if sel.network_none {
        namespaces::network_none(spec, &mut d);
    }
    if sel.userns_auto {
        namespaces::userns_auto(spec, cfg, &mut d);
    }
    // After moat.network=none, which gives the container a namespace of its own.
    if restricted {
        namespaces::namespace_floor(spec, cfg, floor, &mut d)?;
        namespaces::net_devices_floor(spec, cfg)?;
    }
    if sel.network_none && !spec.linux().net_devices().is_empty() {
        return Err(PolicyError::NetDevicesNetworkNone);
    }
    if !sel.network_none {
        egress::decide(wanted_egress, cfg, restricted, floor, &mut d)?;
    }
    // A container keeping CAP_NET_RAW under an egress policy (any mode): every packet
    // judged, packet sockets refused (`seccomp-profiles/packet.json`).
    let raw = spec
        .process
        .as_ref()
        .is_some_and(|p| process::holds(p, "CAP_NET_RAW"));
    if let (Some(e), true) = (d.egress.as_mut(), raw) {
        e.packets = true;
        {
            decision::change(
                &mut d,
                "egress",
                "set",
                "every packet judged on its header; packet sockets refused",
                "the container keeps CAP_NET_RAW, whose raw sockets pass no connect or sendmsg hook",
            );
        }
    }
    // Once the decision is whole: which promises are in force decides which capabilities
    // would void one.
    if let (true, Some(p)) = (restricted, spec.process.as_ref()) {
        process::voids_floor(p, cfg, &d)?;
    }
    Ok(d)
}

/// `audit`: RESTRICTED applied to a copy of the spec, for its list of changes alone (a
/// refusal is one `refused` change); the container runs the spec as OPEN.
fn audit(spec: &Spec, cfg: &Config, id: &str, host: &HostFacts, floor: &FloorFacts) -> Vec<Change> {
    let mut strict = cfg.clone();
    strict.default_policy = Mode::Restricted;
    strict.audit = false;
    let mut copy = spec.clone();
    match apply(&mut copy, &strict, id, host, floor) {
        Ok(d) => d.changes,
        Err(e) => vec![Change {
            field: "spec".into(),
            action: "refused",
            detail: e.to_string(),
            reason: "RESTRICTED refuses this spec".into(),
        }],
    }
}

/// Keys of config.json no field of moat's spec types reads: refused under RESTRICTED (a
/// field nobody judged), ignored and reported under OPEN, as OCI asks of a runtime.
fn unknown_keys(spec: &Spec, restricted: bool, d: &mut Decision) -> Result<(), PolicyError> {
    for k in &spec.unknown_keys {
        if restricted {
            return Err(PolicyError::UnknownKey { key: k.clone() });
        }
        decision::change(
            d,
            k.clone(),
            "ignored",
            "no field of moat's spec types reads it",
            "OCI: a runtime ignores properties it does not know (RESTRICTED refuses them)",
        );
    }
    Ok(())
}

/// RESTRICTED's floor, in order; a spec without a process (which create refuses earlier)
/// gets none of it.
fn restrict(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    systemd: bool,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    let Some(p) = spec.process.as_mut() else {
        return Ok(());
    };
    process::floor(p, cfg, d)?;
    process::priorities_floor(p)?;
    let linux = spec.linux.get_or_insert_with(Default::default);
    process::seccomp_floor(linux, d)?;
    devices::floor(linux, cfg, d);
    mounts::paths_floor(linux, d);
    mounts::dev_inodes(&mut spec.mounts, d);
    resources::limits_floor(spec, cfg, d);
    resources::fleet_placement(spec, cfg, id, systemd, d);
    Ok(())
}
