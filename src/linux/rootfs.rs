//! The container's root filesystem, in the order it is built: propagation, the rootfs bind,
//! `mounts[]` in spec order, devices, then (after hooks) pivot_root, read-only and masked
//! paths, and the read-only root.
//!
//! No lookup by name: after the rootfs path is opened, everything inside it is reached
//! through `openat2` relative to an fd moat holds ([`Mounts`]): spec paths inside the root
//! (`RESOLVE_IN_ROOT`), the names moat chooses without following any symlink, below the
//! mount moat made that covers them (see `linux/path.rs`).
//!
//! Mount plans are computed in the parent (options parsed, sources inspected) so that a bad
//! spec fails before anything is created; the child only issues the syscalls.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::mount::{self, Options};
use super::path::{self, Root};
use super::sync::{InitFailure, Step, StepExt};
use super::sys;
use crate::spec::Spec;

#[derive(Debug, Clone)]
pub enum Kind {
    /// A bind mount of a host path.
    Bind {
        source: PathBuf,
        is_dir: bool,
        /// The source lies (lexically) inside the rootfs: the container path it names
        /// there. The init resolves it itself, inside its root (`RESOLVE_IN_ROOT`), when
        /// it comes to this mount, so what earlier mounts put there is found (runc's
        /// mounts.bats "mount order, container bind-mount source") and a symlink in the
        /// rootfs cannot lead it to the host. `is_dir` is then read from what it opened.
        /// An idmapped one is cloned there too, and the parent idmaps the detached copy
        /// ([`IdmapInRoot`]).
        in_root: Option<String>,
    },
    /// A new filesystem instance.
    Fs {
        fstype: String,
        source: Option<String>,
    },
    /// `type: cgroup|cgroup2`: the container's own cgroup, not the host's hierarchy.
    Cgroup,
}

#[derive(Debug, Clone)]
pub struct MountPlan {
    pub index: usize,
    pub destination: String,
    pub kind: Kind,
    pub opts: Options,
    /// An idmapped bind (`uidMappings` or `idmap`/`ridmap`): the parent builds the mount.
    pub idmap: Option<super::idmap::Idmap>,
}

#[derive(Debug, Clone)]
pub struct CgroupMount {
    /// Directory name under the cgroup mount (`cpu,cpuacct`, `unified`; empty for v2).
    pub name: String,
    /// The container's cgroup directory on the host.
    pub host_dir: PathBuf,
}

pub struct Plan {
    pub rootfs: PathBuf,
    pub readonly: bool,
    /// `linux.rootfsPropagation` as applied to `/` of the new namespace, before anything is
    /// mounted (runc's order), so the copies of host mounts that binds clone carry it.
    pub propagation: libc::c_ulong,
    /// What goes on the container's own root once everything is mounted (flag,
    /// recursive): the requested value, for the values the first step cannot give it.
    pub root_propagation: Option<(libc::c_ulong, bool)>,
    /// Whether the mount that holds the rootfs must stop propagating first
    /// ([`isolate_parent`]).
    pub isolate_parent: bool,
    pub mounts: Vec<MountPlan>,
    pub cgroup_mounts: Vec<CgroupMount>,
    pub new_cgroupns: bool,
    pub default_devices: bool,
    pub masked: Vec<String>,
    pub readonly_paths: Vec<String>,
    pub no_pivot: bool,
    /// `moat.userns=auto`: the host id of container root; the parent builds an idmapped
    /// rootfs that replaces the self-bind.
    pub idmap_root: Option<u32>,
    /// `moat.rootfs=ephemeral`: the parent builds a bounded overlay (`idmap::ephemeral`)
    /// that replaces the self-bind.
    pub ephemeral: Option<super::idmap::Ephemeral>,
    /// The kernel has `/proc/kcore` (a host fact, read by the parent): `/dev/core` links to it.
    pub kcore: bool,
    /// RESTRICTED: a masked or read-only path missing outside procfs and sysfs fails the
    /// create instead of being skipped (runc's way, kept under OPEN).
    pub strict_missing: bool,
    /// RESTRICTED: a bind whose mount is on a kernel interface (procfs, sysfs, cgroupfs,
    /// devtmpfs but a few device nodes, …), or a recursive one carrying such a mount, is
    /// refused ([`super::kernelfs`]); runc's way, allowing it, kept under OPEN.
    pub refuse_kernel_binds: bool,
    /// `[restricted] allowed_devices` as (major, minor or any): device nodes a bind may
    /// be besides the built-in ones.
    pub allowed_bind_devices: Vec<(u32, Option<u32>)>,
    /// A read-only tmpfs at `/dev`: mounted writable, made read-only at the end of
    /// [`finalize`], as runc does, since moat makes its submounts (`/dev/pts`, `/dev/shm`,
    /// `/dev/mqueue`), device nodes and links in it first.
    pub dev_ro_last: bool,
    /// Every bind source is opened by the (privileged) parent and sent by fd, as with
    /// `idmap_root`: the container's user namespace may not be able to reach it (a source
    /// under a 0700 directory; runc opens them before joining the namespace).
    pub binds_from_parent: bool,
    /// The parent sends the bind sources as `O_PATH` fds it opened in the init's own mount
    /// namespace (through `/proc/<init>/root`), which the init clones itself: cloned there,
    /// the submounts of a recursive bind keep the lock the kernel put on them when the
    /// namespace was copied for a less privileged user namespace, so container root
    /// cannot unmount one to uncover what it hides on the host (a tree the parent cloned
    /// in the host's namespace carries no lock). Set for a direct create (the init is
    /// born in its mount namespace); a staged one gets trees cloned on the host.
    pub binds_by_source: bool,
    /// The container has a user namespace of its own: a bind's lockable flags (`ro`,
    /// `nosuid`, `nodev`, `noexec`, atime) that its source has stay, as the kernel locks
    /// them there ([`bind_attrs`]).
    pub userns: bool,
    /// OPEN: a bind with flag options gets exactly those (runc's "mount --bind -o"
    /// semantics: `bind,ro` of a `nosuid` source is not `nosuid`); RESTRICTED applies them on
    /// top of the source's flags, so no flag the host set is dropped without being named
    /// ([`bind_attrs`]).
    pub bind_flags_exact: bool,
    /// `linux.mountLabel` on a host with SELinux: the `context=` every filesystem moat
    /// mounts gets, as runc labels them ([`Plan::context_for`]).
    pub mount_label: Option<String>,
}

impl Plan {
    /// The filesystem parameters of a mount of `fstype` with the mount label added as
    /// runc adds it (`label.FormatMountLabel`): every filesystem it mounts but procfs and
    /// sysfs, which SELinux labels itself (genfs) and refuses a `context=` for, and cgroupfs,
    /// which runc mounts without one. Binds take no filesystem parameters: they keep
    /// their source's labels. A spec that names a context option itself keeps its own.
    pub fn context_for(
        &self,
        fstype: &str,
        data: &[(String, Option<String>)],
    ) -> Vec<(String, Option<String>)> {
        let mut data = data.to_vec();
        let own = |k: &str| matches!(k, "context" | "fscontext" | "defcontext" | "rootcontext");
        if let Some(label) = &self.mount_label {
            if !matches!(fstype, "proc" | "sysfs" | "cgroup" | "cgroup2")
                && !data.iter().any(|(k, _)| own(k))
            {
                // fsconfig takes the value as it is: no quotes around an MCS range's commas.
                data.push(("context".into(), Some(label.clone())));
            }
        }
        data
    }

    /// Whether the parent makes this mount: idmapped binds of host paths, and with moat's
    /// own user namespace every bind of one, whose source container root may have no way
    /// to reach. A source inside the rootfs is the init's to open, idmapped or not.
    pub fn parent_built(&self, m: &MountPlan) -> bool {
        matches!(m.kind, Kind::Bind { in_root: None, .. })
            && (m.idmap.is_some() || self.idmap_root.is_some() || self.binds_from_parent)
    }

    /// How many mount fds the parent sends the child.
    pub fn idmapped_count(&self) -> usize {
        (self.idmap_root.is_some() || self.ephemeral.is_some()) as usize
            + self.mounts.iter().filter(|m| self.parent_built(m)).count()
    }
}

/// A rootfs or `mounts[]` entry the plan refuses; `index` is the entry of `mounts[]`. An
/// io error is part of the message, as before, not a source of its own.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// `call`: the first of the new mount API's syscalls the kernel lacks.
    #[error("kernel: this kernel has no {call}: moat needs openat2, fsopen and mount_setattr (Linux 5.12 or later) and never falls back to lookups by name")]
    NoMountApi { call: &'static str },
    #[error("root.path: {} is not a directory", .rootfs.display())]
    RootNotDir { rootfs: PathBuf },
    #[error("root.path: rootfs {}: {err}", .rootfs.display())]
    Root {
        rootfs: PathBuf,
        err: std::io::Error,
    },
    #[error("mounts[{index}].options: tmpcopyup applies to a tmpfs mount only")]
    CopyupNotTmpfs { index: usize },
    #[error("mounts[{index}].uidMappings: only bind mounts can be idmapped")]
    IdmapNotBind { index: usize },
    #[error(
        "mounts[{index}].uidMappings: an idmapped mount needs both uidMappings and gidMappings"
    )]
    IdmapHalf { index: usize },
    #[error("mounts[{index}].options: idmap without uidMappings maps through the container's user namespace, and the container has none")]
    IdmapNoUserns { index: usize },
    #[error("mounts[{index}].source: a bind mount needs a source")]
    BindNoSource { index: usize },
    #[error("mounts[{index}].source: {}: {err}", .source_path.display())]
    BindSource {
        index: usize,
        source_path: PathBuf,
        err: std::io::Error,
    },
    #[error("mounts[{index}].destination: cannot bind over the container root")]
    BindOverRoot { index: usize },
    #[error("mounts[{index}].type: a mount that is not a bind needs a filesystem type")]
    NoFsType { index: usize },
    #[error("mounts[{index}].type: /proc must be a proc filesystem")]
    ProcNotProc { index: usize },
    #[error(
        "mounts[{index}].source: /proc may be a bind of the host's /proc only without a pid \
         namespace of the container's own (it would show another pid namespace's processes)"
    )]
    ProcBindWithPidns { index: usize },
    #[error("mounts[{index}].source: the host's /proc is not a procfs root here")]
    ProcBindNotProcfs { index: usize },
    #[error("mounts[{index}].type: /sys must be a sysfs filesystem or a bind of the host's /sys")]
    SysNotSysfs { index: usize },
}

pub fn plan(
    spec: &Spec,
    bundle: &Path,
    no_pivot: bool,
    cgroup_mounts: Vec<CgroupMount>,
    new_cgroupns: bool,
    made_later: &[(PathBuf, bool)],
) -> Result<Plan, PlanError> {
    // Every lookup and mount in the rootfs goes by fd; there is no fallback by name.
    if let Some(call) = sys::missing_mount_api() {
        return Err(PlanError::NoMountApi { call });
    }
    let userns = spec.linux().namespaces.iter().any(|n| n.typ == "user");
    let rootfs = spec.rootfs(bundle);
    match std::fs::metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(PlanError::RootNotDir { rootfs }),
        Err(err) => return Err(PlanError::Root { rootfs, err }),
    }
    // Every value but `rslave` and `rprivate` may leave a shared mount in the namespace
    // (the non-recursive ones leave the copies of the host's shared mounts as they are):
    // then the mount that holds the rootfs must stop being a peer before moat mounts on
    // it, or every mount of the container propagates to its peers — the host's — and
    // pivot_root refuses a shared parent (EINVAL). `unbindable` on it forbids the bind.
    // `runbindable` cannot go first at all: moat binds host paths (cgroup directories,
    // device nodes, volumes), which an unbindable tree refuses; the namespace is made
    // private (an unbindable mount has no master either) and the container's tree
    // unbindable at the end.
    let (propagation, root_propagation, isolate_parent) =
        match spec.linux().rootfs_propagation.as_deref().unwrap_or("") {
            "shared" => (libc::MS_SHARED, Some((libc::MS_SHARED, false)), true),
            "rshared" => (
                libc::MS_SHARED | libc::MS_REC,
                Some((libc::MS_SHARED, false)),
                true,
            ),
            "private" => (libc::MS_PRIVATE, Some((libc::MS_PRIVATE, false)), true),
            "rprivate" => (libc::MS_PRIVATE | libc::MS_REC, None, false),
            "slave" => (libc::MS_SLAVE, Some((libc::MS_SLAVE, false)), true),
            "unbindable" => (
                libc::MS_UNBINDABLE,
                Some((libc::MS_UNBINDABLE, false)),
                true,
            ),
            "runbindable" => (
                libc::MS_PRIVATE | libc::MS_REC,
                Some((libc::MS_UNBINDABLE, true)),
                false,
            ),
            // runc's default (and `rslave`): the host's mount events reach the container,
            // never the reverse.
            _ => (libc::MS_SLAVE | libc::MS_REC, None, false),
        };
    let mut mounts = Vec::new();
    let mut dev_ro_last = false;
    let mut dev_is_bind = false;
    for (index, m) in spec.mounts.iter().enumerate() {
        let opts = mount::parse_options(&m.options);
        let typ = m.typ.as_deref().unwrap_or("");
        let idmap = if opts.idmap || !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            if !(opts.bind || typ == "bind") {
                return Err(PlanError::IdmapNotBind { index });
            }
            if m.uid_mappings.is_empty() != m.gid_mappings.is_empty() {
                return Err(PlanError::IdmapHalf { index });
            }
            if m.uid_mappings.is_empty() && !userns {
                return Err(PlanError::IdmapNoUserns { index });
            }
            Some(super::idmap::Idmap {
                uid: m.uid_mappings.clone(),
                gid: m.gid_mappings.clone(),
                recursive: m.options.iter().any(|o| o == "ridmap"),
            })
        } else {
            None
        };
        let kind = if opts.bind || typ == "bind" {
            let src = m.source.as_deref().unwrap_or("");
            if src.is_empty() {
                return Err(PlanError::BindNoSource { index });
            }
            let source = if src.starts_with('/') {
                PathBuf::from(src)
            } else {
                bundle.join(src)
            };
            let in_root = crate::spec::validate::inside(&rootfs, &source);
            // A source moat itself makes once the plan is done (the notify socket, the
            // DNS forwarder's resolv.conf in the state directory) cannot be looked up yet;
            // one inside the rootfs is looked up by the init, in order.
            let is_dir = match made_later.iter().find(|(p, _)| *p == source) {
                Some((_, is_dir)) => *is_dir,
                None if in_root.is_some() => false,
                None => std::fs::metadata(&source)
                    .map_err(|err| PlanError::BindSource {
                        index,
                        source_path: source.clone(),
                        err,
                    })?
                    .is_dir(),
            };
            if path::components(&m.destination).is_empty() {
                return Err(PlanError::BindOverRoot { index });
            }
            if path::components(&m.destination) == ["dev"] {
                dev_is_bind = true;
            }
            Kind::Bind {
                source,
                is_dir,
                in_root,
            }
        } else if typ == "cgroup" || typ == "cgroup2" {
            Kind::Cgroup
        } else {
            if typ.is_empty() || typ == "none" {
                return Err(PlanError::NoFsType { index });
            }
            Kind::Fs {
                fstype: typ.to_string(),
                source: m.source.clone(),
            }
        };
        if opts.copyup && !matches!(&kind, Kind::Fs { fstype, .. } if fstype == "tmpfs") {
            return Err(PlanError::CopyupNotTmpfs { index });
        }
        // /proc and /sys must be the real filesystems: LSM labels, sysctls and masks are
        // written through them (CVE-2019-16884). rootless specs bind the host's /sys.
        let comps = path::components(&m.destination);
        if comps == ["proc"] && !matches!(&kind, Kind::Fs { fstype, .. } if fstype == "proc") {
            proc_bind_allowed(spec, index, &kind)?;
        }
        if comps == ["sys"]
            && !matches!(&kind, Kind::Fs { fstype, .. } if fstype == "sysfs")
            && !matches!(&kind, Kind::Bind { source, .. } if source == std::path::Path::new("/sys"))
        {
            return Err(PlanError::SysNotSysfs { index });
        }
        let mut opts = opts;
        if comps == ["dev"]
            && matches!(&kind, Kind::Fs { .. })
            && opts.set & sys::MOUNT_ATTR_RDONLY != 0
        {
            opts.set &= !sys::MOUNT_ATTR_RDONLY;
            dev_ro_last = true;
        }
        mounts.push(MountPlan {
            index,
            destination: m.destination.clone(),
            kind,
            opts,
            idmap,
        });
    }
    let l = spec.linux();
    Ok(Plan {
        rootfs,
        readonly: spec.root.as_ref().is_some_and(|r| r.readonly),
        propagation,
        root_propagation,
        isolate_parent,
        mounts,
        cgroup_mounts,
        new_cgroupns,
        default_devices: !dev_is_bind,
        masked: once_each(&l.masked_paths),
        readonly_paths: l.readonly_paths.clone(),
        no_pivot,
        idmap_root: None,
        ephemeral: None,
        kcore: Path::new("/proc/kcore").exists(),
        strict_missing: false,
        refuse_kernel_binds: false,
        allowed_bind_devices: Vec::new(),
        dev_ro_last,
        binds_from_parent: false,
        binds_by_source: false,
        userns,
        bind_flags_exact: false,
        mount_label: None,
    })
}

/// The masked paths, each once: a path listed again (as the same lexical path: `/a/`,
/// `/a/./b/..`) is masked once, as runc does. A second mask stacked on the first one would
/// land on moat's own mount, which the lookup refuses as a swapped path.
fn once_each(paths: &[String]) -> Vec<String> {
    let mut seen: Vec<Vec<&str>> = Vec::new();
    let mut out = Vec::new();
    for p in paths {
        let comps = path::components(p);
        if !seen.contains(&comps) {
            seen.push(comps);
            out.push(p.clone());
        }
    }
    out
}

/// `/proc` as a bind of the host's `/proc` (runc's start_hello.bats "rootless with host
/// pidns"): allowed when the container has no pid namespace entry at all, so it sees the
/// host's processes either way, and the source is the host's procfs root. What moat
/// reads and writes in `/proc` goes through its own procfs handle, never this mount
/// (`linux/procfs.rs`), and the masked and read-only paths are applied on top of it as on
/// a fresh procfs (resolved below the bind's own fd). Anything else at `/proc` is refused.
/// Under RESTRICTED the init refuses the bind anyway, as it refuses any bind of a kernel
/// interface (`refuse_kernel_binds`): the exception is OPEN's.
fn proc_bind_allowed(spec: &Spec, index: usize, kind: &Kind) -> Result<(), PlanError> {
    let Kind::Bind { source, .. } = kind else {
        return Err(PlanError::ProcNotProc { index });
    };
    if source != Path::new("/proc") {
        return Err(PlanError::ProcNotProc { index });
    }
    if spec.linux().namespaces.iter().any(|n| n.typ == "pid") {
        return Err(PlanError::ProcBindWithPidns { index });
    }
    const PROC_SUPER_MAGIC: u64 = 0x9fa0;
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let root = sys::statfs(c"/proc")
        .ok()
        .filter(|s| s.f_type as u64 == PROC_SUPER_MAGIC)
        .and_then(|_| sys::stat(c"/proc").ok());
    match root {
        // The root of a procfs instance has inode 1.
        Some(st) if st.st_ino == 1 => Ok(()),
        _ => Err(PlanError::ProcBindNotProcfs { index }),
    }
}

fn c(s: &str) -> CString {
    CString::new(s).expect("paths were checked for NUL in the parent")
}

/// A mount moat made in the container's tree (the root, every `mounts[]` entry, every
/// masked and read-only path), held by the fd of the mount itself.
///
/// Names moat chooses are resolved from the deepest of these that covers them
/// ([`Mounts::open_moat`]), never again through the rootfs's names: a process sharing the
/// rootfs or a volume may rename the directory a mount sits on, or swap it for a symlink or
/// a decoy directory, at any moment.
pub struct Pinned {
    dest: Vec<String>,
    fd: OwnedFd,
    /// `statx` mount id, to tell which mount a lookup ended on.
    id: u64,
    /// A recursive bind brings the source's submounts, which lookups below may cross;
    /// below any other mount no mount may be crossed (`RESOLVE_NO_XDEV`).
    recursive: bool,
}

/// The container's mount tree as moat built it: the root and every mount, by fd.
pub struct Mounts {
    root: Root,
    pins: Vec<Pinned>,
}

/// Whether a container path is one moat names itself (or lies below one): `/proc`, `/sys`,
/// `/dev`. Such mount destinations are resolved like masks, without following symlinks.
fn moat_named(comps: &[&str]) -> bool {
    matches!(comps.first(), Some(&("proc" | "sys" | "dev")))
}

fn io_other(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// A clearer error for the two ways a lookup of a moat-chosen name is refused.
fn explain(e: std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => {
            io_other(
                "must be mounted on ordinary directory: a symlink on the way; refused (moat never follows one here)"
                    .into(),
            )
        }
        Some(libc::EXDEV) => {
            io_other("the path crosses a mount moat did not make there; refused".into())
        }
        _ => e,
    }
}

impl Mounts {
    fn new(root: Root) -> std::io::Result<Mounts> {
        let fd = sys::dup_cloexec(root.fd())?;
        let mut m = Mounts {
            root,
            pins: Vec::new(),
        };
        m.pin(&[], fd, true)?;
        Ok(m)
    }

    pub fn root(&self) -> &Root {
        &self.root
    }

    /// Records a mount moat attached at `dest` (a later one at the same place replaces it).
    pub fn pin(&mut self, dest: &[&str], fd: OwnedFd, recursive: bool) -> std::io::Result<()> {
        let id = sys::mount_id(fd.as_fd())?;
        self.pins.retain(|x| x.dest != dest);
        self.pins.push(Pinned {
            dest: dest.iter().map(|s| s.to_string()).collect(),
            fd,
            id,
            recursive,
        });
        Ok(())
    }

    /// The deepest pinned mount whose destination is a prefix of `comps`, and the rest.
    fn cover<'a, 'b>(&'a self, comps: &'b [&'b str]) -> (&'a Pinned, &'b [&'b str]) {
        let pin = self
            .pins
            .iter()
            .filter(|x| {
                x.dest.len() <= comps.len() && x.dest.iter().zip(comps).all(|(a, b)| a == b)
            })
            .max_by_key(|x| x.dest.len())
            .expect("the root covers every path");
        (pin, &comps[pin.dest.len()..])
    }

    /// A lookup that started below `cover` must end on it (or on a submount of a recursive
    /// bind), never on another mount moat made: that would mean a renamed directory led it
    /// somewhere else (say, into the procfs).
    fn check_landed(&self, cover: &Pinned, fd: &OwnedFd) -> std::io::Result<()> {
        let id = sys::mount_id(fd.as_fd())?;
        if id == cover.id {
            return Ok(());
        }
        if let Some(other) = self.pins.iter().find(|x| x.id == id) {
            return Err(io_other(format!(
                "the lookup ended on the mount at /{} (a path component was swapped); refused",
                other.dest.join("/")
            )));
        }
        Ok(())
    }

    /// Opens a path moat names itself: below the mount that covers it, no symlink, its mount
    /// checked. `flags` as for open (`O_PATH` for a handle).
    pub fn open_moat(&self, target: &str, flags: libc::c_int) -> std::io::Result<OwnedFd> {
        let comps = path::components(target);
        let (cover, rel) = self.cover(&comps);
        if rel.is_empty() && flags & libc::O_PATH != 0 {
            // The mount moat made there (a file's bind, too).
            return sys::dup_cloexec(cover.fd.as_fd());
        }
        let fd =
            path::open_beneath(cover.fd.as_fd(), rel, flags, !cover.recursive).map_err(explain)?;
        self.check_landed(cover, &fd)?;
        Ok(fd)
    }

    /// Like [`open_moat`](Self::open_moat) for a directory, created if missing.
    pub fn mkdir_moat(&self, target: &str) -> std::io::Result<OwnedFd> {
        let comps = path::components(target);
        let (cover, rel) = self.cover(&comps);
        let fd =
            path::mkdir_beneath(cover.fd.as_fd(), rel, 0o755, !cover.recursive).map_err(explain)?;
        self.check_landed(cover, &fd)?;
        Ok(fd)
    }

    /// Like [`open_moat`](Self::open_moat) for a file, created (empty) if missing.
    pub fn mkfile_moat(&self, target: &str, mode: u32) -> std::io::Result<OwnedFd> {
        let comps = path::components(target);
        let (cover, rel) = self.cover(&comps);
        if rel.is_empty() {
            return sys::dup_cloexec(cover.fd.as_fd());
        }
        let fd =
            path::mkfile_beneath(cover.fd.as_fd(), rel, mode, !cover.recursive).map_err(explain)?;
        self.check_landed(cover, &fd)?;
        Ok(fd)
    }

    /// Whether the mount that covers `target` is a procfs or sysfs (kernel names: nobody
    /// can rename them).
    fn on_kernel_fs(&self, target: &str) -> std::io::Result<bool> {
        const SYSFS_MAGIC: u64 = 0x6265_6572;
        let comps = path::components(target);
        let (cover, _) = self.cover(&comps);
        let fs = sys::fstatfs(cover.fd.as_fd())?;
        // f_type is i64 under glibc, unsigned under musl.
        #[allow(clippy::unnecessary_cast)]
        let t = fs.f_type as u64;
        #[allow(clippy::unnecessary_cast)]
        let proc = libc::PROC_SUPER_MAGIC as u64;
        Ok(t == proc || t == SYSFS_MAGIC)
    }

    /// A name under `/proc` or `/sys` with no mount of moat's there but the root (a spec
    /// without a sysfs mount, say): nothing of the kernel's is at that name to be masked.
    fn kernel_name_unmounted(&self, target: &str) -> bool {
        let comps = path::components(target);
        matches!(comps.first(), Some(&"proc") | Some(&"sys"))
            && self.cover(&comps).0.dest.is_empty()
    }

    /// The container's `/dev`, held: device nodes, links and the console are made relative
    /// to it. A symlinked `/dev` is refused.
    pub fn dev(&self) -> std::io::Result<OwnedFd> {
        self.mkdir_moat("/dev")
    }

    /// The devpts instance moat mounted at `/dev/pts`, if any.
    pub fn devpts(&self) -> Option<BorrowedFd<'_>> {
        self.pins
            .iter()
            .find(|x| x.dest == ["dev", "pts"])
            .map(|x| x.fd.as_fd())
    }

    /// After attaching `tree` at `target` (a masked or read-only path): the path must now
    /// lead to it. If a racer swapped a component between the lookup and the attach, the
    /// mount sits on the decoy and the path names something else: refused.
    fn verify_attached(&self, target: &str, tree: &OwnedFd) -> std::io::Result<()> {
        let comps = path::components(target);
        let (cover, rel) = self.cover(&comps);
        if rel.is_empty() {
            // Stacked on a mount moat made, through that mount's fd: no name was involved.
            return Ok(());
        }
        // The last component is now a mount point, so crossing mounts is allowed here.
        let now = path::open_beneath(cover.fd.as_fd(), rel, libc::O_PATH, false).map_err(|e| {
            if e.raw_os_error() == Some(libc::ENOENT) {
                io_other(
                    "the path went away while moat mounted on it (a racing rename); refused".into(),
                )
            } else {
                explain(e)
            }
        })?;
        if sys::mount_id(now.as_fd())? != sys::mount_id(tree.as_fd())? {
            return Err(io_other(
                "the path changed while moat mounted on it (a racing rename); refused".into(),
            ));
        }
        Ok(())
    }
}

/// Child, before pivot: propagation, the rootfs bind, every spec mount. Returns the root
/// and every mount moat made, pinned, for the devices, the console and [`finalize`].
/// `idmapped` holds the mounts the parent built (see `linux/idmap.rs`), by mount index
/// ([`super::idmap::ROOTFS`] for the rootfs).
/// Idmaps the detached copy of `mounts[index]`'s source inside the rootfs, which the init
/// cloned in its own mount namespace: `mount_setattr(MOUNT_ATTR_IDMAP)` needs privilege
/// over the source's filesystem (host root's), so the parent does it
/// (`sync::Channel::idmap_please`); the init's fd names the same mount afterwards.
pub type IdmapInRoot<'a> = &'a dyn Fn(u32, BorrowedFd<'_>) -> std::io::Result<()>;

pub fn mount_all(
    p: &Plan,
    idmapped: &mut Vec<(u32, OwnedFd)>,
    idmap_in_root: IdmapInRoot<'_>,
) -> Result<Mounts, InitFailure> {
    sys::mount(None, c"/", None, p.propagation, None)
        .step(Step::Rootfs, || "set propagation of /".into())?;
    let rootfs = c(p.rootfs.to_str().unwrap_or_default());
    let root = if let Some(tree) = take(idmapped, super::idmap::ROOTFS) {
        attach_rootfs(p, &rootfs, tree.as_fd())?;
        Root::from_fd(tree)
    } else {
        // The engine's path, looked up once (following host symlinks, as runc does); the
        // rootfs bound onto itself by fd, since pivot_root needs a mount point. The root is
        // the bind's own fd from then on.
        let what = || format!("bind {} onto itself", p.rootfs.display());
        let dir = sys::openat(path::cwd(), &rootfs, libc::O_PATH | libc::O_DIRECTORY, 0)
            .step(Step::Rootfs, || format!("open {}", p.rootfs.display()))?;
        if p.isolate_parent {
            isolate_parent(p, dir.as_fd())?;
        }
        let tree = mount::clone_tree(dir.as_fd(), "", true).step(Step::Rootfs, what)?;
        mount::attach(tree.as_fd(), dir.as_fd()).step(Step::Rootfs, what)?;
        Root::from_fd(tree)
    };
    let mut mounts = Mounts::new(root).step(Step::Rootfs, || "pin the root".into())?;
    for m in &p.mounts {
        #[allow(clippy::cast_possible_truncation)] // an index into the spec's mounts
        let prebuilt = take(idmapped, m.index as u32);
        if let Some((fd, recursive)) = mount_one(&mounts, p, m, prebuilt, idmap_in_root)? {
            mounts
                .pin(&path::components(&m.destination), fd, recursive)
                .step(Step::Mounts, || {
                    format!("mounts[{}] {}", m.index, m.destination)
                })?;
        }
    }
    Ok(mounts)
}

/// Attaches the rootfs the parent built (idmapped) over the engine's, which makes it a
/// mount point as pivot_root needs. Container root may have no way to the engine's path
/// (podman keeps its storage under 0700 directories, and does not know moat mapped root
/// elsewhere): then it goes on top of `/` of the container's mount namespace, where
/// nothing needs a path to reach it (createContainer hooks then see it as `/`).
fn attach_rootfs(p: &Plan, rootfs: &CString, tree: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let path = &p.rootfs;
    let target = match sys::openat(path::cwd(), rootfs, libc::O_PATH | libc::O_DIRECTORY, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            sys::openat(path::cwd(), c"/", libc::O_PATH | libc::O_DIRECTORY, 0)
        }
        r => r,
    }
    .step(Step::Rootfs, || format!("open {}", path.display()))?;
    if p.isolate_parent {
        isolate_parent(p, target.as_fd())?;
    }
    mount::attach(tree, target.as_fd()).step(Step::Rootfs, || {
        format!("attach the idmapped rootfs on {}", path.display())
    })?;
    // The parent cloned it in the host's namespace: each of its mounts is still a peer of
    // the host's (pivot_root refuses a shared new root, and what moat mounts on it would
    // reach the host). A slave, recursively, as the rootfs bind is otherwise.
    mount::set_propagation(tree, libc::MS_SLAVE, true).step(Step::Rootfs, || {
        format!("make the idmapped rootfs on {} a slave", path.display())
    })
}

/// Makes the mount that holds `dir` (the rootfs, or where the idmapped rootfs goes) a
/// slave, not recursively, in the container's mount namespace. A shared mount becomes a
/// slave of its former peers: the host's mount events still reach the rootfs, but nothing
/// moat mounts on it reaches the host, and pivot_root accepts it as the new root's parent
/// (runc makes it private; a slave keeps what the host mounts under the rootfs later).
/// After `unbindable` it is made private instead, which the kernel requires before it
/// binds anything of it (a slave stays unbindable); an unbindable mount has no master to
/// lose. The mount's root is found by walking `..` from `dir`: host directories above
/// the rootfs, never a name inside it.
fn isolate_parent(p: &Plan, dir: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let flag = if p.propagation & libc::MS_UNBINDABLE != 0 {
        libc::MS_PRIVATE
    } else {
        libc::MS_SLAVE
    };
    let what = || {
        format!(
            "stop the mount holding {} from propagating",
            p.rootfs.display()
        )
    };
    let top = mount_root_of(dir).step(Step::Rootfs, what)?;
    mount::set_propagation(top.as_fd(), flag, false).step(Step::Rootfs, what)
}

/// The root of the mount `dir` lies on: the last directory up from `dir` whose `..` is on
/// another mount, or is itself (the process root).
fn mount_root_of(dir: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut cur = sys::openat(dir, c".", flags, 0)?;
    loop {
        let up = sys::openat(cur.as_fd(), c"..", flags, 0)?;
        if sys::mount_id(up.as_fd())? != sys::mount_id(cur.as_fd())? {
            return Ok(cur);
        }
        let (a, b) = (sys::fstat(up.as_fd())?, sys::fstat(cur.as_fd())?);
        if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) {
            return Ok(cur);
        }
        cur = up;
    }
}

/// After [`finalize`]: the requested propagation on the container's `/` itself. Before the
/// pivot it went to the namespace's `/` tree (so mounts cloned from it, the volumes,
/// carry it); the new root is moat's bind of the rootfs, whose parent [`isolate_parent`]
/// stopped from propagating. Not recursive, so a spec mount's own propagation option stays
/// as the spec set it, but for `runbindable`, which makes every mount of the container
/// unbindable as it asks (over a spec mount's option too). Nothing to do for `rslave` and
/// `rprivate`, which the root already has.
pub fn set_root_propagation(p: &Plan, mounts: &Mounts) -> Result<(), InitFailure> {
    let Some((flag, recursive)) = p.root_propagation else {
        return Ok(());
    };
    mount::set_propagation(mounts.root().fd(), flag, recursive)
        .step(Step::PivotRoot, || "linux.rootfsPropagation on /".into())
}

fn take(idmapped: &mut Vec<(u32, OwnedFd)>, index: u32) -> Option<OwnedFd> {
    let i = idmapped.iter().position(|(x, _)| *x == index)?;
    Some(idmapped.swap_remove(i).1)
}

/// The target of a spec mount: a spec path (in-root symlinks followed, as runc does) or,
/// at and below `/proc`, `/sys` and `/dev`, a path moat names (no symlink, below the mount
/// that covers it).
fn mount_target(mounts: &Mounts, dest: &str, dir: bool) -> std::io::Result<OwnedFd> {
    match (moat_named(&path::components(dest)), dir) {
        (true, true) => mounts.mkdir_moat(dest),
        (true, false) => mounts.mkfile_moat(dest, 0o644),
        (false, true) => mounts.root().mkdir_all(dest, 0o755),
        (false, false) => mounts.root().mkfile(dest, 0o644),
    }
}

/// The target of a tmpfs, and its options with the mode of the directory it covers
/// (runc 1.5, mounts.bats "tmpfs mount mode= inherit"): a tmpfs over an existing
/// directory keeps that directory's permissions unless the options set `mode=`; over one
/// moat creates, the tmpfs default (1777). The mode is read from the fd the mount goes on.
fn tmpfs_target(
    mounts: &Mounts,
    dest: &str,
    opts: &Options,
) -> std::io::Result<(OwnedFd, Option<Options>)> {
    if opts.data.iter().any(|(k, _)| k == "mode") {
        return Ok((mount_target(mounts, dest, true)?, None));
    }
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    let existing = if moat_named(&path::components(dest)) {
        mounts.open_moat(dest, flags)
    } else {
        mounts.root().open_at(dest, flags)
    };
    match existing {
        Ok(fd) => {
            let mode = sys::fstat(fd.as_fd())?.st_mode & 0o7777;
            let mut o = opts.clone();
            o.data
                .insert(0, ("mode".into(), Some(format!("{mode:04o}"))));
            Ok((fd, Some(o)))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            Ok((mount_target(mounts, dest, true)?, None))
        }
        Err(e) => Err(e),
    }
}

/// Mounts one spec entry; returns the attached mount's fd (to pin) and whether it is a
/// recursive tree. `prebuilt` is the idmapped copy of a bind's source the parent made.
fn mount_one(
    mounts: &Mounts,
    p: &Plan,
    m: &MountPlan,
    prebuilt: Option<OwnedFd>,
    idmap_in_root: IdmapInRoot<'_>,
) -> Result<Option<(OwnedFd, bool)>, InitFailure> {
    let what = || format!("mounts[{}] {}", m.index, m.destination);
    let (mnt, recursive) = match &m.kind {
        Kind::Bind {
            source,
            is_dir,
            in_root,
        } => {
            // A source inside the rootfs: resolved now, inside the root, after the mounts
            // before it.
            let (own, is_dir) = match in_root {
                Some(at) => {
                    let fd = mounts
                        .root()
                        .open_at(at, libc::O_PATH)
                        .step(Step::Mounts, || {
                            format!("{}: source {at} inside the rootfs", what())
                        })?;
                    let st = sys::fstat(fd.as_fd()).step(Step::Mounts, what)?;
                    (Some(fd), st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                }
                None => (None, *is_dir),
            };
            let target = mount_target(mounts, &m.destination, is_dir).step(Step::Mounts, what)?;
            let prebuilt_tree = prebuilt.is_some() && !(p.binds_by_source && m.idmap.is_none());
            let tree = match (own, prebuilt) {
                (Some(src), _) => {
                    let tree = mount::clone_tree(src.as_fd(), "", m.opts.recursive)
                        .step(Step::Mounts, || {
                            format!("{}: clone {}", what(), source.display())
                        })?;
                    if m.idmap.is_some() {
                        // Detached still, as MOUNT_ATTR_IDMAP requires.
                        #[allow(clippy::cast_possible_truncation)]
                        // an index into the spec's mounts
                        idmap_in_root(m.index as u32, tree.as_fd()).step(Step::Mounts, || {
                            format!("{}: idmap {}", what(), source.display())
                        })?;
                    }
                    tree
                }
                (None, prebuilt) => match prebuilt {
                    // The source, opened by the parent in this mount namespace: cloned here.
                    Some(src) if p.binds_by_source && m.idmap.is_none() => {
                        mount::clone_tree(src.as_fd(), "", m.opts.recursive)
                            .step(Step::Mounts, || {
                                format!("{}: clone {}", what(), source.display())
                            })?
                    }
                    Some(t) => t,
                    None if p.parent_built(m) => {
                        return Err(InitFailure::new(
                            Step::Mounts,
                            format!("{}: no idmapped mount from the parent", what()),
                        ))
                    }
                    // A host path from the engine: followed as the host resolves it (runc too).
                    None => mount::clone_tree(
                        path::cwd(),
                        source.to_str().unwrap_or_default(),
                        m.opts.recursive,
                    )
                    .step(Step::Mounts, || {
                        format!("{}: clone {}", what(), source.display())
                    })?,
                },
            };
            let rec = m.opts.recursive || m.idmap.as_ref().is_some_and(|i| i.recursive);
            if p.refuse_kernel_binds {
                refuse_kernel_root(m, tree.as_fd(), &p.allowed_bind_devices)?;
            }
            let attrs = bind_attrs(p, m, tree.as_fd())?;
            mount::set_attrs(tree.as_fd(), &attrs)
                .step(Step::Mounts, || format!("{}: set attributes", what()))?;
            mount::attach(tree.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
            if p.refuse_kernel_binds && rec {
                refuse_kernel_submounts(m, tree.as_fd())?;
            }
            if prebuilt_tree && p.propagation & libc::MS_REC != 0 {
                // Cloned by the parent in the host's namespace, not from this namespace's
                // copy, which the recursive `/` propagation already reached.
                mount::set_propagation(tree.as_fd(), p.propagation & !libc::MS_REC, true)
                    .step(Step::Mounts, || format!("{}: propagation", what()))?;
            }
            (tree, rec)
        }
        Kind::Fs { fstype, source } => {
            let (target, inherited) = if fstype == "tmpfs" {
                tmpfs_target(mounts, &m.destination, &m.opts).step(Step::Mounts, what)?
            } else {
                let t = mount_target(mounts, &m.destination, true).step(Step::Mounts, what)?;
                (t, None)
            };
            let opts = match inherited {
                Some(o) => std::borrow::Cow::Owned(o),
                None => std::borrow::Cow::Borrowed(&m.opts),
            };
            let Some((mnt, opts, rec)) = new_fs_or_fallback(p, fstype, source.as_deref(), &opts)
                .step(Step::Mounts, || {
                    format!("{}: new {fstype} filesystem", what())
                })?
            else {
                return Ok(None);
            };
            if m.opts.copyup && !rec {
                // Into the detached tmpfs, before its attributes (`ro`) and its attach.
                super::copyup::copy_tree(target.as_fd(), mnt.as_fd(), &m.destination)
                    .map_err(std::io::Error::from)
                    .step(Step::Mounts, what)?;
            }
            mount::set_attrs(mnt.as_fd(), &opts)
                .step(Step::Mounts, || format!("{}: set attributes", what()))?;
            mount::attach(mnt.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
            (mnt, rec)
        }
        Kind::Cgroup => mount_cgroup(mounts, p, m)?,
    };
    if let Some((flag, rec)) = m.opts.propagation {
        // On the mount just attached, by its fd: no second lookup of the destination.
        mount::set_propagation(mnt.as_fd(), flag, rec)
            .step(Step::Mounts, || format!("{}: propagation", what()))?;
    }
    Ok(Some((mnt, recursive)))
}

/// The attributes a bind's top mount gets, as runc 1.5 sets them (mounts_sshfs.bats).
/// Without flag options it keeps the source's flags. With some (OPEN), the result is
/// exactly what they say, as `mount --bind -o` would mean: `ro`, `nosuid`, `nodev`,
/// `noexec` and `nosymfollow` not named are cleared; the atime flags change only when
/// `noatime`, `relatime`, `strictatime` or `nodiratime` is given (mount(2) keeps them
/// otherwise; `atime`/`diratime` alone change nothing, as with runc). In a user namespace
/// of the container's own the kernel locks the source's `ro`, `nosuid`, `nodev`, `noexec`
/// and atime: those not named are kept, one named to be cleared (`rw` of a read-only
/// source) fails the create, as does another atime. RESTRICTED applies the options on top
/// of the source's flags (nothing the host set is dropped unless an option names it).
fn bind_attrs(p: &Plan, m: &MountPlan, tree: BorrowedFd<'_>) -> Result<Options, InitFailure> {
    const LOCKABLE: u64 = sys::MOUNT_ATTR_RDONLY
        | sys::MOUNT_ATTR_NOSUID
        | sys::MOUNT_ATTR_NODEV
        | sys::MOUNT_ATTR_NOEXEC;
    const ATIME: u64 = sys::MOUNT_ATTR__ATIME | sys::MOUNT_ATTR_NODIRATIME;
    let what = || format!("mounts[{}] {}", m.index, m.destination);
    let mut o = m.opts.clone();
    if !p.bind_flags_exact || !o.flags_given {
        return Ok(o);
    }
    let (mut set, mut clr) = (
        o.set & !ATIME,
        (o.clr | ((LOCKABLE | sys::MOUNT_ATTR_NOSYMFOLLOW) & !o.set)) & !ATIME,
    );
    if o.atime_given {
        set |= o.set & ATIME;
        clr |= ATIME;
    }
    if p.userns {
        // statvfs's f_flag (ST_*) is the same word on every libc this builds for.
        let st = sys::fstatvfs(tree).step(Step::Mounts, || format!("{}: source flags", what()))?;
        // c_ulong: u64 here, but not on every target.
        #[allow(clippy::unnecessary_cast)]
        let f = st.f_flag as u64;
        let mut locked = 0;
        for (st_flag, attr) in [
            (libc::ST_RDONLY, sys::MOUNT_ATTR_RDONLY),
            (libc::ST_NOSUID, sys::MOUNT_ATTR_NOSUID),
            (libc::ST_NODEV, sys::MOUNT_ATTR_NODEV),
            (libc::ST_NOEXEC, sys::MOUNT_ATTR_NOEXEC),
        ] {
            #[allow(clippy::unnecessary_cast)]
            if f & st_flag as u64 != 0 {
                locked |= attr;
            }
        }
        let named = m.opts.clr & locked;
        if named != 0 {
            return Err(InitFailure::new(
                Step::Mounts,
                format!(
                    "{}: cannot clear locked flags {} of the source in the container's user namespace: Operation not permitted",
                    what(),
                    attr_names(named)
                ),
            ));
        }
        set |= locked;
        clr &= !locked;
        if o.atime_given {
            let atime = |noatime: bool, relatime: bool, nodiratime: bool| {
                let mode = if noatime {
                    sys::MOUNT_ATTR_NOATIME
                } else if relatime {
                    sys::MOUNT_ATTR_RELATIME
                } else {
                    sys::MOUNT_ATTR_STRICTATIME
                };
                mode | if nodiratime {
                    sys::MOUNT_ATTR_NODIRATIME
                } else {
                    0
                }
            };
            // <linux/statfs.h>; libc names it only for some targets.
            const ST_RELATIME: u64 = 0x1000;
            #[allow(clippy::unnecessary_cast)]
            let source = atime(
                f & libc::ST_NOATIME as u64 != 0,
                f & ST_RELATIME != 0,
                f & libc::ST_NODIRATIME as u64 != 0,
            );
            if set & ATIME != source {
                return Err(InitFailure::new(
                    Step::Mounts,
                    format!(
                        "{}: cannot change the locked atime flags of the source in the container's user namespace: Operation not permitted",
                        what()
                    ),
                ));
            }
        }
        // The source's atime stays: the kernel refuses to touch it there.
        set &= !ATIME;
        clr &= !ATIME;
    }
    o.set = set;
    o.clr = clr;
    Ok(o)
}

fn attr_names(attrs: u64) -> String {
    [
        (sys::MOUNT_ATTR_RDONLY, "ro"),
        (sys::MOUNT_ATTR_NOSUID, "nosuid"),
        (sys::MOUNT_ATTR_NODEV, "nodev"),
        (sys::MOUNT_ATTR_NOEXEC, "noexec"),
    ]
    .iter()
    .filter(|(a, _)| attrs & a != 0)
    .map(|(_, n)| *n)
    .collect::<Vec<_>>()
    .join(",")
}

/// RESTRICTED: the bind's own mount, before it is attached, must not be a kernel
/// interface ([`super::kernelfs`]). Judged on the clone's fd, never on the source's name.
fn refuse_kernel_root(
    m: &MountPlan,
    tree: BorrowedFd<'_>,
    extra: &[(u32, Option<u32>)],
) -> Result<(), InitFailure> {
    let what = || format!("mounts[{}] {}", m.index, m.destination);
    let mountinfo = || super::procfs::mountinfo().map_err(|e| io_other(e.to_string()));
    match super::kernelfs::refused_root(tree, extra, mountinfo).step(Step::Mounts, || {
        format!("{}: filesystem type of the source", what())
    })? {
        None => Ok(()),
        Some(fstype) => Err(InitFailure::new(
            Step::Mounts,
            format!(
                "{}: the bind's source is on {fstype}, a kernel interface, not a volume; \
                 refused under RESTRICTED",
                what()
            ),
        )),
    }
}

/// RESTRICTED: a recursive bind, just attached, must carry no mount of a kernel interface.
/// Its submounts exist only once it is attached: they are found in this mount namespace's
/// table by the attached tree's mount id. A refused tree is detached again, so nothing of
/// it stays on a peer of the target the attach propagated to.
fn refuse_kernel_submounts(m: &MountPlan, tree: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let what = || format!("mounts[{}] {}", m.index, m.destination);
    // A file has no mounts below it: the lookup of the source ended on the topmost.
    let st = sys::fstat(tree).step(Step::Mounts, what)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Ok(());
    }
    let id = sys::mount_id(tree).step(Step::Mounts, what)?;
    let text =
        super::procfs::mountinfo().step(Step::Mounts, || format!("{}: read mountinfo", what()))?;
    let Some((fstype, at)) = super::kernelfs::refused_submount(id, &text) else {
        return Ok(());
    };
    detach(tree);
    Err(InitFailure::new(
        Step::Mounts,
        format!(
            "{}: the recursive bind carries a {fstype} mount at {at:?} of its source, a \
             kernel interface, not a volume; refused under RESTRICTED (a non-recursive bind \
             leaves it out)",
            what()
        ),
    ))
}

/// Unmounts the tree `mnt` is the root of (lazily), by fd: from its root as the working
/// directory, which is then restored. Best effort, on the way to a failed create.
fn detach(mnt: BorrowedFd<'_>) {
    let Ok(back) = sys::openat(path::cwd(), c".", libc::O_PATH | libc::O_DIRECTORY, 0) else {
        return;
    };
    if sys::fchdir(mnt).is_ok() {
        let _ = sys::umount2(c".", libc::MNT_DETACH);
    }
    let _ = sys::fchdir(back.as_fd());
}

/// A new filesystem for a spec mount, and the attributes to give it. In a user namespace
/// the kernel refuses what a runc-shaped spec often asks for, and moat falls back as runc
/// does: sysfs in a user namespace that does not own the network namespace (none of its
/// own, or one joined by path as rootful podman passes it) → the host's /sys bound
/// recursively read-only; mqueue without an ipc namespace of its own → a bind of the host's /dev/mqueue;
/// `uid=`/`gid=` of an id the namespace does not map (devpts `gid=5`) → the option left
/// out. Attributes of a bind tree (`ro`, `nosuid`, …) apply to every mount in it.
/// The flag says whether the mount is a recursive tree. `None`: nothing to mount (mqueue, and the host has no /dev/mqueue either; message
/// queues still work, only their listing under /dev/mqueue is missing).
fn new_fs_or_fallback(
    p: &Plan,
    fstype: &str,
    source: Option<&str>,
    opts: &Options,
) -> std::io::Result<Option<(OwnedFd, Options, bool)>> {
    let labelled = p.context_for(fstype, &opts.data);
    let mut err = match mount::new_fs(fstype, source, &labelled) {
        Ok(m) => return Ok(Some((m, opts.clone(), false))),
        Err(e) => e,
    };
    // runc: "older kernels do not support labeling of /dev/mqueue": mounted without.
    if fstype == "mqueue" && labelled.len() != opts.data.len() {
        err = match mount::new_fs(fstype, source, &opts.data) {
            Ok(m) => return Ok(Some((m, opts.clone(), false))),
            Err(e) => e,
        };
    }
    if !super::rootless::in_user_namespace() {
        return Err(err);
    }
    let bind = |host: &str, recursive: bool| {
        let mut o = opts.clone();
        o.rec_set |= o.set;
        mount::clone_tree(path::cwd(), host, recursive).map(|t| Some((t, o, recursive)))
    };
    let ids = |k: &str| k == "uid" || k == "gid";
    match (fstype, err.raw_os_error()) {
        ("sysfs", Some(libc::EPERM)) => host_sysfs().map(|t| Some((t, opts.clone(), true))),
        ("mqueue", Some(libc::EPERM))
            if sys::stat(c"/dev/mqueue")
                .is_ok_and(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR) =>
        {
            bind("/dev/mqueue", false)
        }
        ("mqueue", Some(libc::EPERM)) => Ok(None),
        (_, Some(libc::EINVAL | libc::EPERM)) if opts.data.iter().any(|(k, _)| ids(k)) => {
            let data: Vec<_> = opts.data.iter().filter(|(k, _)| !ids(k)).cloned().collect();
            Ok(Some((
                mount::new_fs(fstype, source, &p.context_for(fstype, &data))?,
                opts.clone(),
                false,
            )))
        }
        _ => Err(err),
    }
}

fn host_sysfs() -> std::io::Result<OwnedFd> {
    let t = mount::clone_tree(path::cwd(), "/sys", true)?;
    mount::setattr(
        t.as_fd(),
        true,
        sys::MOUNT_ATTR_RDONLY
            | sys::MOUNT_ATTR_NOSUID
            | sys::MOUNT_ATTR_NODEV
            | sys::MOUNT_ATTR_NOEXEC,
        0,
    )?;
    Ok(t)
}

/// The container sees only its own cgroup. On a v2 host inside a cgroup namespace that is a
/// fresh cgroup2 mount; otherwise each hierarchy's container directory is bind-mounted
/// (under a tmpfs on v1, whose directories are made relative to the tmpfs's own fd).
/// Read-only when the spec says `ro`, as runc mounts it (runc's and moat's default specs
/// say so; RESTRICTED's floor adds it, `policy::mounts_floor`); writable otherwise (runc's
/// delete.bats takes `ro` out to make sub-cgroups).
fn mount_cgroup(mounts: &Mounts, p: &Plan, m: &MountPlan) -> Result<(OwnedFd, bool), InitFailure> {
    let what = || format!("mounts[{}] {} (cgroup)", m.index, m.destination);
    let ro = m.opts.set & sys::MOUNT_ATTR_RDONLY != 0;
    let mut attrs = m.opts.clone();
    if ro {
        attrs.set |= sys::MOUNT_ATTR_RDONLY;
    }
    let target = mount_target(mounts, &m.destination, true).step(Step::Mounts, what)?;
    let single_v2 = p.cgroup_mounts.len() == 1 && p.cgroup_mounts[0].name.is_empty();
    if single_v2 {
        let cg = &p.cgroup_mounts[0];
        let mnt = if p.new_cgroupns {
            mount::new_fs("cgroup2", Some("cgroup"), &[])
        } else {
            mount::clone_tree(path::cwd(), cg.host_dir.to_str().unwrap_or_default(), false)
        }
        .step(Step::Mounts, || {
            format!("{}: {}", what(), cg.host_dir.display())
        })?;
        mount::set_attrs(mnt.as_fd(), &attrs).step(Step::Mounts, what)?;
        mount::attach(mnt.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
        return Ok((mnt, false));
    }
    let tmpfs = mount::new_fs(
        "tmpfs",
        Some("cgroup"),
        // A directory per hierarchy and a link per co-mounted name, capped (when the spec
        // leaves it writable) like every tmpfs moat makes; labelled as runc labels it.
        &p.context_for(
            "tmpfs",
            &[
                ("mode".into(), Some("755".into())),
                ("size".into(), Some("64k".into())),
                ("nr_inodes".into(), Some("256".into())),
            ],
        ),
    )
    .step(Step::Mounts, || format!("{}: tmpfs", what()))?;
    mount::attach(tmpfs.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
    for cg in &p.cgroup_mounts {
        let dest = || format!("{}/{}", m.destination, cg.name);
        let t = path::mkdir_beneath(tmpfs.as_fd(), &path::components(&cg.name), 0o755, true)
            .step(Step::Mounts, dest)?;
        let mnt = mount::clone_tree(path::cwd(), cg.host_dir.to_str().unwrap_or_default(), false)
            .step(Step::Mounts, || {
            format!("{}: {}", what(), cg.host_dir.display())
        })?;
        mount::set_attrs(mnt.as_fd(), &attrs).step(Step::Mounts, dest)?;
        mount::attach(mnt.as_fd(), t.as_fd()).step(Step::Mounts, dest)?;
        // Co-mounted controllers ("cpu,cpuacct") are also reachable by each name.
        if cg.name.contains(',') && !cg.name.contains('/') {
            for single in cg.name.split(',') {
                let _ = sys::symlinkat(&c(&cg.name), tmpfs.as_fd(), &c(single));
            }
        }
    }
    if ro {
        mount::setattr(tmpfs.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0).step(Step::Mounts, what)?;
    }
    Ok((tmpfs, true))
}

/// Moves into the new root. The old root is detached, so nothing of the host's tree stays
/// reachable; with `--no-pivot` the root is moved over / and chrooted into (for initramfs
/// hosts where pivot_root is impossible). pivot_root takes paths: `"."` is the working
/// directory set by `fchdir` to the held root, so no name is looked up.
pub fn pivot(mounts: &Mounts, no_pivot: bool) -> Result<(), InitFailure> {
    let root = mounts.root().fd();
    sys::fchdir(root).step(Step::PivotRoot, || "chdir to rootfs".into())?;
    if no_pivot {
        // The rootfs goes on top of the old "/": were that shared, the container's whole
        // tree would propagate to its peers (the host's "/").
        sys::mount(None, c"/", None, libc::MS_SLAVE, None)
            .step(Step::PivotRoot, || "make / a slave".into())?;
        hide_revealing_mounts(root)?;
        sys::mount(Some(c"."), c"/", None, libc::MS_MOVE, None)
            .step(Step::PivotRoot, || "move rootfs to /".into())?;
        sys::chroot(c".").step(Step::PivotRoot, || "chroot".into())?;
    } else {
        sys::pivot_root(c".", c".").step(Step::PivotRoot, || "pivot_root".into())?;
        // The old root is stacked on the new one; make sure unmounting it does not
        // propagate to the host, then detach it. It is reached as `..` of the held root
        // (at the process root, `..` ends on the mount stacked there): mount(2) on "."
        // would name the new root itself, and MS_REC there made every mount of the
        // container a slave, undoing the spec's `shared`/`rshared` options.
        let what = || "make old root a slave".to_string();
        let old = sys::openat(root, c"..", libc::O_PATH | libc::O_DIRECTORY, 0)
            .step(Step::PivotRoot, what)?;
        let old_id = sys::mount_id(old.as_fd()).step(Step::PivotRoot, what)?;
        if old_id == sys::mount_id(root).step(Step::PivotRoot, what)? {
            return Err(InitFailure::new(
                Step::PivotRoot,
                "the old root is not stacked on the new one after pivot_root".to_string(),
            ));
        }
        mount::set_propagation(old.as_fd(), libc::MS_SLAVE, true).step(Step::PivotRoot, what)?;
        drop(old);
        // umount2 follows the mounts stacked on ".": the old root.
        sys::umount2(c".", libc::MNT_DETACH).step(Step::PivotRoot, || "detach old root".into())?;
    }
    // The held root is "/" now: back to it by fd, not by the name "/".
    sys::fchdir(root).step(Step::PivotRoot, || "chdir /".into())
}

/// With `--no-pivot` the host's tree stays in the container's mount namespace below the
/// chroot, and with it the host's full procfs and sysfs mounts. The kernel lets a user
/// namespace mount a new procfs (sysfs) only where one is already fully visible in the
/// mount namespace (`mount_too_revealing`): those would let a process of the container
/// that makes its own user namespace mount a bare `/proc`, without the masked and
/// read-only paths (runc's no_pivot.bats). So every full procfs/sysfs mount outside the
/// rootfs is detached (its propagation made a slave first, so nothing reaches the
/// host), or covered by a tmpfs where it may not be unmounted (a mount locked by a user
/// namespace), as runc does; then the mount table is read again and the create fails
/// if one is still fully visible (a name on the way that no longer led to it).
fn hide_revealing_mounts(root: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let what = || "--no-pivot: hide the host's procfs and sysfs".to_string();
    let root_id = sys::mount_id(root).step(Step::PivotRoot, what)?;
    for m in revealing_mounts(root_id)? {
        let path = cpath(&m.mount_point).step(Step::PivotRoot, what)?;
        let slave = sys::mount(None, &path, None, libc::MS_SLAVE | libc::MS_REC, None);
        match slave {
            // Gone with a mount detached before it (below one).
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            r => r.step(Step::PivotRoot, || {
                format!("{}: make {} a slave", what(), m.mount_point.display())
            })?,
        }
        match sys::umount2(&path, libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) {
            Ok(()) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EPERM)) => {
                sys::mount(Some(c"tmpfs"), &path, Some(c"tmpfs"), 0, None)
                    .step(Step::PivotRoot, || {
                        format!("{}: cover {}", what(), m.mount_point.display())
                    })?;
            }
            Err(e) => {
                return Err(e).step(Step::PivotRoot, || {
                    format!("{}: detach {}", what(), m.mount_point.display())
                })
            }
        }
    }
    if let Some(m) = revealing_mounts(root_id)?.first() {
        return Err(InitFailure::new(
            Step::PivotRoot,
            format!(
                "{}: {} ({}) is still fully visible",
                what(),
                m.mount_point.display(),
                m.fstype
            ),
        ));
    }
    Ok(())
}

/// The full procfs and sysfs mounts of the caller's mount namespace outside the mount
/// `root_id` (the rootfs) and not covered by a mount on their root.
fn revealing_mounts(root_id: u64) -> Result<Vec<crate::linux::idmap::MountInfo>, InitFailure> {
    let text = super::procfs::mountinfo().map_err(|e| {
        InitFailure::new(Step::PivotRoot, format!("--no-pivot: read mountinfo: {e}"))
    })?;
    let all = crate::linux::idmap::parse_mountinfo(&text);
    let parent_of: std::collections::HashMap<u64, u64> =
        all.iter().map(|m| (m.id, m.parent)).collect();
    let in_rootfs = |mut id: u64| {
        // The parent chain ends at the namespace's root mount (its own parent is outside).
        for _ in 0..all.len() + 1 {
            if id == root_id {
                return true;
            }
            match parent_of.get(&id) {
                Some(&p) if p != id => id = p,
                _ => return false,
            }
        }
        false
    };
    Ok(all
        .iter()
        .filter(|m| m.root == "/" && matches!(m.fstype.as_str(), "proc" | "sysfs"))
        .filter(|m| !in_rootfs(m.id))
        .filter(|m| {
            !all.iter()
                .any(|c| c.parent == m.id && c.mount_point == m.mount_point)
        })
        .cloned()
        .collect())
}

fn cpath(p: &std::path::Path) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// A masked or read-only path that does not exist is skipped, as runc does. Under
/// RESTRICTED (`strict`) only inside procfs or sysfs, whose names nobody can rename:
/// anywhere else (the rootfs, a volume) a racer could make it look missing for a moment by
/// swapping a directory on the way with one that lacks the name, so a missing target there
/// fails the create.
fn skip_missing(
    mounts: &Mounts,
    strict: bool,
    target: &str,
    r: std::io::Result<OwnedFd>,
) -> Option<std::io::Result<OwnedFd>> {
    match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
            if !strict
                || mounts.on_kernel_fs(target).unwrap_or(false)
                || mounts.kernel_name_unmounted(target)
            {
                None
            } else {
                Some(Err(io_other(
                    "does not exist; under RESTRICTED a missing target outside /proc and /sys \
                     is refused (it may be a racing rename)"
                        .into(),
                )))
            }
        }
        r => Some(r),
    }
}

/// After pivot: read-only paths, masked paths (files by a verified /dev/null, directories
/// by clones of one read-only empty tmpfs), and the read-only root.
///
/// Every target is a name moat resolves itself ([`Mounts::open_moat`]: below the mount that
/// covers it, no symlink, ending on that mount), whether under `/proc` and `/sys` or
/// elsewhere; every source is an fd moat made or verified. After each attach the path must
/// lead to the new mount ([`Mounts::verify_attached`]). Read-only paths come first, so a
/// mask below one sits on the read-only bind.
pub fn finalize(p: &Plan, mounts: &mut Mounts) -> Result<(), InitFailure> {
    for r in &p.readonly_paths {
        let Some(target) = skip_missing(
            mounts,
            p.strict_missing,
            r,
            mounts.open_moat(r, libc::O_PATH),
        ) else {
            continue;
        };
        let target = target.step(Step::ReadonlyPaths, || r.clone())?;
        let tree =
            mount::clone_tree(target.as_fd(), "", true).step(Step::ReadonlyPaths, || r.clone())?;
        mount::setattr(
            tree.as_fd(),
            true,
            sys::MOUNT_ATTR_RDONLY
                | sys::MOUNT_ATTR_NOSUID
                | sys::MOUNT_ATTR_NODEV
                | sys::MOUNT_ATTR_NOEXEC,
            0,
        )
        .step(Step::ReadonlyPaths, || r.clone())?;
        mount::attach(tree.as_fd(), target.as_fd()).step(Step::ReadonlyPaths, || r.clone())?;
        mounts
            .verify_attached(r, &tree)
            .step(Step::ReadonlyPaths, || r.clone())?;
        mounts
            .pin(&path::components(r), tree, true)
            .step(Step::ReadonlyPaths, || r.clone())?;
    }
    if !p.masked.is_empty() {
        let null = verified_dev_null(mounts)?;
        // One empty read-only tmpfs serves every masked directory: the first one gets a
        // fresh instance, the others a clone of that mount, by its fd, once it is attached
        // (kernels before 6.x cannot clone a detached mount; one superblock is also cheaper).
        let mut first_dir: Option<OwnedFd> = None;
        for m in &p.masked {
            let Some(target) = skip_missing(
                mounts,
                p.strict_missing,
                m,
                mounts.open_moat(m, libc::O_PATH),
            ) else {
                continue;
            };
            let target = target.step(Step::MaskedPaths, || m.clone())?;
            let st = sys::fstat(target.as_fd()).step(Step::MaskedPaths, || m.clone())?;
            let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
            let src = match (&first_dir, is_dir) {
                (_, false) => mount::clone_tree(null.as_fd(), "", false),
                (Some(first), true) => mount::clone_tree(first.as_fd(), "", false),
                (None, true) => empty_tmpfs(p),
            }
            .step(Step::MaskedPaths, || m.clone())?;
            mount::attach(src.as_fd(), target.as_fd()).step(Step::MaskedPaths, || m.clone())?;
            mounts
                .verify_attached(m, &src)
                .step(Step::MaskedPaths, || m.clone())?;
            if is_dir {
                if first_dir.is_none() {
                    first_dir =
                        Some(sys::dup_cloexec(src.as_fd()).step(Step::MaskedPaths, || m.clone())?);
                }
                mounts
                    .pin(&path::components(m), src, false)
                    .step(Step::MaskedPaths, || m.clone())?;
            }
        }
    }
    if p.dev_ro_last {
        // The tmpfs moat attached at /dev (its pin), not whatever /dev names now.
        if let Some(dev) = mounts.pins.iter().find(|x| x.dest == ["dev"]) {
            mount::setattr(dev.fd.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
                .step(Step::Mounts, || "make /dev read-only".into())?;
        }
    }
    if p.readonly {
        mount::setattr(mounts.root().fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
            .step(Step::Rootfs, || "make / read-only".into())?;
    }
    Ok(())
}

/// The mask of a directory; runc labels it with the mount label too.
fn empty_tmpfs(p: &Plan) -> std::io::Result<OwnedFd> {
    let fs = mount::new_fs(
        "tmpfs",
        Some("tmpfs"),
        &p.context_for(
            "tmpfs",
            &[
                ("size".into(), Some("0".into())),
                // Its root directory alone: nothing can ever be created in it.
                ("nr_inodes".into(), Some("1".into())),
                ("mode".into(), Some("555".into())),
            ],
        ),
    )?;
    mount::setattr(
        fs.as_fd(),
        false,
        sys::MOUNT_ATTR_RDONLY
            | sys::MOUNT_ATTR_NOSUID
            | sys::MOUNT_ATTR_NODEV
            | sys::MOUNT_ATTR_NOEXEC,
        0,
    )?;
    Ok(fs)
}

/// The container's /dev/null, opened as a name moat chose (no symlink, below the mount
/// that covers it) and checked to be the real 1:3 character device, so a racing swap cannot
/// turn a mask into a bind of something else (CVE-2025-31133).
fn verified_dev_null(mounts: &Mounts) -> Result<OwnedFd, InitFailure> {
    let fd = mounts
        .open_moat("/dev/null", libc::O_PATH)
        .step(Step::MaskedPaths, || "/dev/null".into())?;
    let st = sys::fstat(fd.as_fd()).step(Step::MaskedPaths, || "/dev/null".into())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || st.st_rdev != libc::makedev(1, 3) {
        return Err(InitFailure::new(
            Step::MaskedPaths,
            "/dev/null is not the null device (1:3); refusing to mask with it",
        ));
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::sys::record::{self, assert_before, Call, Fake, Reply};

    fn fs(index: usize, dest: &str, fstype: &str, opts: &[&str]) -> MountPlan {
        MountPlan {
            index,
            destination: dest.into(),
            kind: Kind::Fs {
                fstype: fstype.into(),
                source: Some(fstype.into()),
            },
            opts: mount::parse_options(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            idmap: None,
        }
    }

    /// A small plan: /proc, a bind, a tmpfs; a read-only path, a masked file and a masked
    /// directory; a read-only root.
    fn plan() -> Plan {
        Plan {
            rootfs: "/bundle/rootfs".into(),
            readonly: true,
            propagation: libc::MS_SLAVE | libc::MS_REC,
            root_propagation: None,
            isolate_parent: false,
            mounts: vec![
                fs(0, "/proc", "proc", &[]),
                MountPlan {
                    index: 1,
                    destination: "/data".into(),
                    kind: Kind::Bind {
                        source: "/srv/data".into(),
                        is_dir: true,
                        in_root: None,
                    },
                    opts: mount::parse_options(&["rbind".into(), "ro".into()]),
                    idmap: None,
                },
                fs(2, "/tmp", "tmpfs", &["nosuid", "mode=1777"]),
            ],
            cgroup_mounts: Vec::new(),
            new_cgroupns: false,
            default_devices: false,
            masked: vec!["/proc/kcore".into(), "/proc/acpi".into()],
            readonly_paths: vec!["/proc/sys".into()],
            no_pivot: false,
            idmap_root: None,
            ephemeral: None,
            kcore: false,
            strict_missing: false,
            refuse_kernel_binds: false,
            allowed_bind_devices: Vec::new(),
            dev_ro_last: false,
            binds_from_parent: false,
            binds_by_source: false,
            userns: false,
            bind_flags_exact: false,
            mount_label: None,
        }
    }

    /// `linux.mountLabel` on an SELinux host: every filesystem moat makes gets `context=`
    /// (the spec's tmpfs, devpts and mqueue, and the tmpfs masking a directory), procfs,
    /// sysfs and cgroupfs none; a spec's own context option is kept; a bind has no
    /// filesystem parameters at all. Fails when the label is not passed on.
    #[test]
    fn the_mount_label_goes_on_every_filesystem_runc_labels() {
        const LABEL: &str = "system_u:object_r:container_file_t:s0:c1,c2";
        let mut p = plan();
        p.mounts.push(fs(3, "/sys", "sysfs", &["ro"]));
        p.mounts.push(fs(4, "/dev/pts", "devpts", &["newinstance"]));
        p.mounts.push(fs(5, "/dev/mqueue", "mqueue", &[]));
        p.mounts.push(fs(
            6,
            "/run",
            "tmpfs",
            &["context=system_u:object_r:mine_t:s0"],
        ));
        p.mount_label = Some(LABEL.into());
        let calls = record(&p);
        // The filesystem contexts (fsopen's returned fds) by type, in order.
        let fsopens: Vec<(String, String)> = calls
            .iter()
            .filter(|c| c.name == "fsopen")
            .map(|c| {
                let t = c
                    .arg("fstype")
                    .unwrap_or_default()
                    .trim_matches('"')
                    .to_string();
                (t, c.ret.clone().unwrap_or_default())
            })
            .collect();
        let contexts = |fd: &str| -> Vec<String> {
            calls
                .iter()
                .filter(|c| {
                    c.name == "fsconfig"
                        && c.arg("fs") == Some(fd)
                        && c.arg("key").is_some_and(|k| k.contains("context"))
                })
                .map(|c| {
                    format!(
                        "{}={}",
                        c.arg("key").unwrap_or_default(),
                        c.arg("value").unwrap_or_default()
                    )
                })
                .collect()
        };
        let got: Vec<(String, Vec<String>)> = fsopens
            .iter()
            .map(|(t, fd)| (t.clone(), contexts(fd)))
            .collect();
        let label = format!("\"context\"=\"{LABEL}\"");
        let mine = "\"context\"=\"system_u:object_r:mine_t:s0\"".to_string();
        assert_eq!(
            got,
            vec![
                ("proc".into(), vec![]),
                ("tmpfs".into(), vec![label.clone()]),
                ("sysfs".into(), vec![]),
                ("devpts".into(), vec![label.clone()]),
                ("mqueue".into(), vec![label.clone()]),
                ("tmpfs".into(), vec![mine]),
                // The mask of /proc/acpi.
                ("tmpfs".into(), vec![label]),
            ],
            "{}",
            record::show(&calls)
        );
        // Without a label (no SELinux, or none asked for), no context anywhere.
        p.mount_label = None;
        p.mounts.truncate(6);
        let calls = record(&p);
        assert!(
            !calls.iter().any(
                |c| c.name == "fsconfig" && c.arg("key").is_some_and(|k| k.contains("context"))
            ),
            "{}",
            record::show(&calls)
        );
    }

    /// `mount_all` → `pivot` → `finalize` under the fake.
    fn record(p: &Plan) -> Vec<Call> {
        let ((), calls) = Fake::new().run(|| {
            let mut mounts = mount_all(p, &mut Vec::new(), &|_, _| {
                Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
            })
            .expect("mount_all");
            // After pivot_root the old root is stacked on the new one: another mount.
            record::then("mount_id", Reply::Int(2));
            pivot(&mounts, p.no_pivot).expect("pivot");
            // /dev/null is the null device, /proc/kcore a file, /proc/acpi a directory.
            record::then(
                "fstat",
                Reply::Stat {
                    mode: libc::S_IFCHR | 0o666,
                    rdev: libc::makedev(1, 3),
                    ino: 6,
                },
            );
            record::then("fstat", Reply::Default);
            record::then(
                "fstat",
                Reply::Stat {
                    mode: libc::S_IFDIR | 0o555,
                    rdev: 0,
                    ino: 7,
                },
            );
            finalize(p, &mut mounts).expect("finalize");
        });
        calls
    }

    fn named(name: &'static str) -> impl Fn(&Call) -> bool {
        move |c| c.name == name
    }

    /// The descriptor the first `openat2` of `path` (relative to a held fd) returned.
    fn opened(calls: &[Call], path: &str) -> String {
        let quoted = format!("{path:?}");
        let i = record::position(calls, path, |c| {
            c.name == "openat2" && c.arg("path") == Some(quoted.as_str())
        });
        calls[i].ret.clone().expect("an fd")
    }

    /// The attach (`move_mount`) onto the descriptor `to`.
    fn attach_onto(to: String) -> impl Fn(&Call) -> bool {
        move |c| c.name == "move_mount_fd" && c.arg("to") == Some(to.as_str())
    }

    #[test]
    fn rootfs_order_and_no_lookup_by_name() {
        let calls = record(&plan());
        // Propagation of / first, before anything is mounted.
        assert_eq!(
            calls[0].to_string(),
            format!(
                "mount(source=none, target=\"/\", fstype=none, flags={}, data=none)",
                libc::MS_SLAVE | libc::MS_REC
            )
        );
        // mount(2) only ever changes propagation of "/": no mount by path name.
        for c in calls.iter().filter(|c| c.name == "mount") {
            assert_eq!(
                (c.arg("source"), c.arg("target"), c.arg("fstype")),
                (Some("none"), Some("\"/\""), Some("none")),
                "{c}"
            );
        }
        // Every attach is onto a descriptor moat holds, never a name; every lookup inside
        // the rootfs is relative to a held fd and confined (RESOLVE_IN_ROOT/BENEATH).
        for c in calls.iter().filter(|c| c.name == "move_mount_fd") {
            for k in ["from", "to"] {
                assert!(c.arg(k).is_some_and(|f| f.starts_with("fd")), "{c}");
            }
        }
        let confined = sys::RESOLVE_IN_ROOT | sys::RESOLVE_BENEATH;
        for c in calls.iter().filter(|c| c.name == "openat2") {
            assert_ne!(c.arg("dir"), Some("AT_FDCWD"), "{c}");
            let how = c.arg("how").unwrap_or_default();
            let resolve = how
                .rsplit("resolve=0x")
                .next()
                .and_then(|h| u64::from_str_radix(h.trim_end_matches('}'), 16).ok())
                .unwrap_or(0);
            assert!(resolve & confined != 0, "{c}");
        }
        // After pivot_root nothing is opened by a host path: every open_tree is of a held fd.
        let pivot_root = record::position(&calls, "pivot_root", named("pivot_root"));
        assert_eq!(
            calls[pivot_root].to_string(),
            "pivot_root(new_root=\".\", put_old=\".\")"
        );
        for c in calls[pivot_root..].iter().filter(|c| c.name == "open_tree") {
            assert_eq!(c.arg("path"), Some("\"\""), "{c}");
        }
        assert_eq!(
            calls
                .iter()
                .filter(|c| c.name == "open_tree" && c.arg("dir") == Some("AT_FDCWD"))
                .count(),
            1,
            "only the bind's host source is named: {}",
            record::show(&calls)
        );
        // The spec mounts in spec order, each on its target's fd.
        let proc_ = attach_onto(opened(&calls, "proc"));
        let data = attach_onto(opened(&calls, "data"));
        let tmp = attach_onto(opened(&calls, "tmp"));
        assert_before(&calls, ("/proc", &proc_), ("/data", &data));
        assert_before(&calls, ("/data", &data), ("/tmp", &tmp));
        // pivot: chdir to the held root, pivot_root, detach the old root, back to it.
        assert_before(&calls, ("/tmp", &tmp), ("pivot_root", named("pivot_root")));
        assert_eq!(calls[pivot_root - 1].name, "fchdir");
        let detach = record::position(&calls, "umount2", named("umount2"));
        assert_eq!(
            calls[detach].to_string(),
            format!("umount2(target=\".\", flags={})", libc::MNT_DETACH)
        );
        assert_eq!(calls[detach + 1].name, "fchdir");
        // After pivot: read-only paths, then masks (so a mask below a read-only path sits
        // on the read-only bind), then the read-only root last.
        let ro = attach_onto(opened(&calls, "sys"));
        let kcore = attach_onto(opened(&calls, "kcore"));
        let acpi = attach_onto(opened(&calls, "acpi"));
        assert_before(
            &calls,
            ("pivot_root", named("pivot_root")),
            ("readonly /proc/sys", &ro),
        );
        assert_before(
            &calls,
            ("readonly /proc/sys", &ro),
            ("mask /proc/kcore", &kcore),
        );
        assert_before(
            &calls,
            ("mask /proc/kcore", &kcore),
            ("mask /proc/acpi", &acpi),
        );
        // The file mask is a clone of the verified /dev/null.
        let null = opened(&calls, "dev/null");
        let i = record::position(&calls, "mask /proc/kcore", &kcore);
        let from = calls[i].arg("from").unwrap_or_default().to_string();
        let clone = record::position(&calls, "clone of /dev/null", |c| {
            c.name == "open_tree" && c.ret.as_deref() == Some(from.as_str())
        });
        assert_eq!(calls[clone].arg("dir"), Some(null.as_str()));
        // The held root is the rootfs bind (open_tree of the rootfs dir): pivot enters it
        // by fd, and the read-only root is set on it, last.
        let root = calls[2].ret.clone().expect("the rootfs bind");
        assert_eq!(calls[2].arg("dir"), calls[1].ret.as_deref());
        assert_eq!(calls[pivot_root - 1].arg("fd"), Some(root.as_str()));
        let last = calls.last().expect("calls");
        assert_eq!(last.name, "mount_setattr", "{}", record::show(&calls));
        assert_eq!(last.arg("fd"), Some(root.as_str()));
        assert!(last.arg("attr").is_some_and(
            |a| a.starts_with(&format!("{{set={:#x}, clr=0x0", sys::MOUNT_ATTR_RDONLY))
        ));
    }
}
