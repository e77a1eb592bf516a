//! `moat.rootfs`: a read-only root with writable tmpfs paths, or an ephemeral root whose
//! writes go to a bounded tmpfs.

use serde::{Deserialize, Serialize};

use super::decision::change;
use super::{config, Config, Decision, PolicyError};
use crate::spec::{Mount, Spec};

/// `moat.rootfs`, in the order an annotation may move it (only up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rootfs {
    Writable,
    /// Writable, bounded in bytes and inodes, off the engine's storage, lost at delete.
    Ephemeral,
    Readonly,
}

impl Rootfs {
    pub fn of(cfg: &Config) -> Rootfs {
        match (
            cfg.readonly_rootfs || cfg.rootfs_readonly,
            cfg.ephemeral_rootfs,
        ) {
            (true, _) => Rootfs::Readonly,
            (false, true) => Rootfs::Ephemeral,
            (false, false) => Rootfs::Writable,
        }
    }
}

/// What a tmpfs charges each inode against its inode space (the kernel's
/// `BOGO_INODE_SIZE`). Since Linux 6.6 a tmpfs with `nr_inodes=N` has `N` KiB of it, and
/// charges each file 1 KiB of it and each xattr its name, its value and 40 bytes: user
/// xattrs are stored outside `size=`, bounded only there (with no `nr_inodes`, not at all).
pub const INODE_SPACE: u64 = 1024;

/// The bytes a tmpfs of `size=` and `nr_inodes=` may hold, as the kernel bounds them:
/// (data, inode space: files and xattrs).
pub fn tmpfs_caps(size: u64, inodes: u64) -> (u64, u64) {
    (size, inodes.saturating_mul(INODE_SPACE))
}

/// The caps of an ephemeral root (`moat.rootfs=ephemeral`): its tmpfs's `size=` and
/// `nr_inodes=`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct BoundedRoot {
    pub size: u64,
    pub inodes: u64,
}

impl BoundedRoot {
    /// The bytes of inode space (files and xattrs) the root's tmpfs holds beside `size`.
    pub fn inode_space(&self) -> u64 {
        tmpfs_caps(self.size, self.inodes).1
    }

    /// Everything the root may hold, as the kernel bounds it: `size` of data plus the
    /// inode space. What the budget and the memory limit are charged.
    pub fn cap(&self) -> u64 {
        self.size.saturating_add(self.inode_space())
    }
}

pub(super) fn has_mount(spec: &Spec, dest: &str) -> bool {
    spec.mounts.iter().any(|m| {
        crate::linux::path::components(&m.destination) == crate::linux::path::components(dest)
    })
}

pub(super) fn readonly_rootfs(spec: &mut Spec, cfg: &Config, d: &mut Decision) {
    let root = spec.root.get_or_insert_with(Default::default);
    if !root.readonly {
        root.readonly = true;
        change(d, "root.readonly", "set", "true", "moat.rootfs=readonly");
    }
    for (dest, mode) in [("/tmp", "1777"), (cfg.workspace.as_str(), "0755")] {
        if has_mount(spec, dest) {
            continue;
        }
        spec.mounts.push(Mount {
            destination: dest.to_string(),
            typ: Some("tmpfs".into()),
            source: Some("tmpfs".into()),
            options: vec![
                "nosuid".into(),
                "nodev".into(),
                format!("mode={mode}"),
                format!("size={}", cfg.tmp_size),
                format!("nr_inodes={}", cfg.tmp_inodes),
            ],
            ..Default::default()
        });
        change(
            d,
            "mounts",
            "added",
            format!(
                "tmpfs {dest} size={} nr_inodes={}",
                cfg.tmp_size, cfg.tmp_inodes
            ),
            "writable paths under a read-only root",
        );
    }
}

/// `moat.rootfs=ephemeral`: a writable root whose writes go to a tmpfs of `size` bytes and
/// `[restricted] rootfs_inodes` inodes over the engine's layers, never to the engine's
/// storage (`linux::idmap::ephemeral` builds it at create). tmpfs pages and its xattrs
/// (kernel memory, `GFP_KERNEL_ACCOUNT`) are charged to the container's memory cgroup, so
/// the whole cap ([`BoundedRoot::cap`]: `size` and the inode space) plus `tmp_size` must
/// fit below its memory limit, or the sandbox would be OOM-killed before it saw ENOSPC:
/// such a create is refused. A root the spec makes read-only needs no writable layer.
pub(super) fn ephemeral_rootfs(
    spec: &mut Spec,
    cfg: &Config,
    size: u64,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    if spec.root.as_ref().is_some_and(|r| r.readonly) {
        change(
            d,
            "root.readonly",
            "kept",
            "true: the root is read-only, no writable layer to bound",
            "moat.rootfs=ephemeral",
        );
        return Ok(());
    }
    let res = spec.linux.as_ref().and_then(|l| l.resources.as_ref());
    let limit = res
        .and_then(|r| r.unified.as_ref())
        .and_then(|u| u.get("memory.max"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or_else(|| res.and_then(|r| r.memory.as_ref()).and_then(|m| m.limit))
        .filter(|l| *l > 0);
    let tmp = config::parse_size(&cfg.tmp_size)
        .unwrap_or(0)
        .unsigned_abs();
    let b = BoundedRoot {
        size,
        inodes: cfg.rootfs_inodes,
    };
    if let Some(limit) = limit {
        if b.cap().saturating_add(tmp) > limit.unsigned_abs() {
            return Err(PolicyError::EphemeralMemory {
                size,
                inode_space: b.inode_space(),
                tmp,
                limit,
            });
        }
    }
    d.bounded_root = Some(b);
    change(
        d,
        "root.path",
        "set",
        format!(
            "ephemeral: the engine's layers read-only below a tmpfs of {} bytes and {} \
             inodes that takes every write (and {} bytes of inode space for files and \
             xattrs: {} bytes in all)",
            b.size,
            b.inodes,
            b.inode_space(),
            b.cap()
        ),
        "moat.rootfs=ephemeral: writes bounded, kept off the engine's storage, lost at delete",
    );
    Ok(())
}
