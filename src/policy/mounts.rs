//! The mount floor: pseudo-filesystems read-only, runc's masked and read-only paths, an
//! inode cap on the engine's `/dev`.

use super::decision::change;
use super::{config, Decision, FloorFacts, MASKED_PATHS, READONLY_PATHS};
use crate::spec::{Linux, Mount, Spec};

/// The filesystem types a RESTRICTED container may have mounted (a bind of any type is
/// judged by its source instead: `linux::rootfs`). moat mounts as root of the host's user
/// namespace, so a disk filesystem (`ext4` on the host's block device) or a network one
/// would be mounted with the host's privileges; `ramfs` has no size cap.
pub const MOUNT_TYPES: [&str; 8] = [
    "proc", "sysfs", "cgroup", "cgroup2", "tmpfs", "devpts", "mqueue", "overlay",
];

/// A bind, whatever its type field says (`bind`, `none`, or none with `bind`/`rbind`).
pub fn is_bind(m: &Mount) -> bool {
    m.typ.as_deref() == Some("bind") || m.options.iter().any(|o| o == "bind" || o == "rbind")
}

/// RESTRICTED: a mount of a type outside [`MOUNT_TYPES`] is cut and reported (the
/// container still runs, without it).
pub(super) fn mount_types_floor(spec: &mut Spec, d: &mut Decision) {
    let mut cut = Vec::new();
    let mut i = 0;
    spec.mounts.retain(|m| {
        let typ = m.typ.as_deref().unwrap_or("");
        let keep = is_bind(m) || MOUNT_TYPES.contains(&typ);
        if !keep {
            cut.push(format!("mounts[{i}] {} (type {typ:?})", m.destination));
        }
        i += 1;
        keep
    });
    if !cut.is_empty() {
        change(
            d,
            "mounts",
            "removed",
            cut.join(", "),
            "RESTRICTED mounts only proc, sysfs, cgroup, cgroup2, tmpfs, devpts, mqueue, overlay \
             and binds: moat mounts as host root, so another type (a disk's, a network's) \
             would be mounted with the host's privileges",
        );
    }
}

/// RESTRICTED: sysfs and cgroupfs are read-only, and so is a bind of the host's `/sys` (or
/// anything below it, recursively). A writable cgroupfs stays where the container has a
/// cgroup namespace of its own on a cgroup v2 host mounted with `nsdelegate` (podman's
/// systemd mode needs it): only there does the kernel refuse writes to the namespace root's
/// own limits; without `nsdelegate` the container would set its `pids.max`, `memory.max`,
/// `cpu.max` back to `max`. What `--privileged` asks for (rw sysfs and cgroup) is cut and
/// reported, not refused.
pub(super) fn mounts_floor(spec: &mut Spec, facts: &FloorFacts, d: &mut Decision) {
    let own_cgroupns = spec
        .linux()
        .namespaces
        .iter()
        .any(|n| n.typ == "cgroup" && n.path.is_none());
    // Kept writable only where the kernel guards the namespace root's own limits.
    let delegated = own_cgroupns && facts.cgroup_v2 && facts.cgroup_nsdelegate;
    // A cgroupfs cut that nsdelegate alone would have kept, for the reason's text.
    let mut no_nsdelegate = false;
    let mut cut = Vec::new();
    for (i, m) in spec.mounts.iter_mut().enumerate() {
        let typ = m.typ.as_deref().unwrap_or("");
        let bind = is_bind(m);
        // The last of ro/rw wins, as in mount::parse_options.
        let last = m
            .options
            .iter()
            .rev()
            .find(|o| *o == "ro" || *o == "rw")
            .map(String::as_str);
        let (what, writable) = if bind {
            let host_sys = m.source.as_deref().is_some_and(|s| {
                let c = crate::linux::path::components(s);
                s.starts_with('/') && c.first().is_some_and(|f| *f == "sys")
            });
            if !host_sys {
                continue;
            }
            // `rbind,ro` leaves the submounts (cgroupfs, securityfs, debugfs, ...) writable.
            let recursive = m.options.iter().any(|o| o == "rbind");
            let rec_ro = m
                .options
                .iter()
                .rev()
                .find(|o| *o == "rro" || *o == "rrw")
                .is_some_and(|o| o == "rro");
            (
                "a bind of the host's /sys",
                last != Some("ro") || (recursive && !rec_ro),
            )
        } else if typ == "sysfs" {
            ("sysfs", last != Some("ro"))
        } else if typ == "cgroup" || typ == "cgroup2" {
            if delegated {
                continue;
            }
            // cgroupfs is mounted as the spec says (writable without `ro`, as runc).
            let writable = last != Some("ro");
            if own_cgroupns && facts.cgroup_v2 {
                no_nsdelegate |= writable;
                ("cgroupfs; the host's cgroup2 has no nsdelegate", writable)
            } else {
                ("cgroupfs", writable)
            }
        } else {
            continue;
        };
        if !writable {
            continue;
        }
        m.options
            .retain(|o| o != "rw" && o != "ro" && o != "rrw" && o != "rro");
        m.options.push("ro".into());
        if bind {
            m.options.push("rro".into());
        }
        cut.push(format!("mounts[{i}] {} ({what})", m.destination));
    }
    if !cut.is_empty() {
        let reason = if no_nsdelegate {
            "RESTRICTED: sysfs, cgroupfs and the host's /sys are read-only; a cgroup namespace \
             of its own on cgroup v2 keeps cgroupfs writable only with nsdelegate, and the \
             host's cgroup2 is mounted without it: the kernel would let the namespace root \
             write its own limits (pids.max, memory.max, cpu.max)"
        } else {
            "RESTRICTED: sysfs, cgroupfs (without a cgroup namespace of its own on cgroup v2 \
             mounted with nsdelegate) and the host's /sys are read-only"
        };
        change(
            d,
            "mounts",
            "set",
            format!("read-only: {}", cut.join(", ")),
            reason,
        );
    }
}

/// RESTRICTED: runc's masked and read-only paths, whatever the engine left out.
pub(super) fn paths_floor(linux: &mut Linux, d: &mut Decision) {
    for (list, defaults, field) in [
        (
            &mut linux.masked_paths,
            &MASKED_PATHS[..],
            "linux.maskedPaths",
        ),
        (
            &mut linux.readonly_paths,
            &READONLY_PATHS[..],
            "linux.readonlyPaths",
        ),
    ] {
        let missing: Vec<&str> = defaults
            .iter()
            .copied()
            .filter(|p| !list.iter().any(|x| x == p))
            .collect();
        if !missing.is_empty() {
            list.extend(missing.iter().map(|s| s.to_string()));
            change(
                d,
                field,
                "added",
                missing.join(","),
                "runc's defaults, left out by the engine",
            );
        }
    }
}

/// RESTRICTED: the engine's `/dev` tmpfs gets an inode cap when it has none (a tmpfs's
/// default is half the host's RAM pages), so a container cannot fill it with empty files
/// or, in the inode space the cap also bounds, with xattrs. `nr_inodes=0` is no cap at
/// all (tmpfs then bounds neither files nor xattrs): replaced like a missing one.
pub(super) fn dev_inodes(mounts: &mut [Mount], d: &mut Decision) {
    for m in mounts.iter_mut().filter(|m| {
        m.typ.as_deref() == Some("tmpfs")
            && crate::linux::path::components(&m.destination) == ["dev"]
    }) {
        let uncapped = |o: &String| {
            o.strip_prefix("nr_inodes=").is_some_and(|n| {
                n.trim_end_matches(['k', 'K', 'm', 'M', 'g', 'G'])
                    .bytes()
                    .all(|c| c == b'0')
            })
        };
        m.options.retain(|o| !uncapped(o));
        if m.options.iter().any(|o| o.starts_with("nr_inodes=")) {
            continue;
        }
        m.options.push(format!("nr_inodes={}", config::DEV_INODES));
        change(
            d,
            "mounts./dev",
            "set",
            format!("nr_inodes={}", config::DEV_INODES),
            "the engine's /dev tmpfs had no inode cap",
        );
    }
}
