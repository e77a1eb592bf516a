//! The container's root filesystem, in the order it is built: propagation, the rootfs bind,
//! `mounts[]` in spec order, devices, then (after hooks) pivot_root, masked and read-only
//! paths, and the read-only root.
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
    Bind { source: PathBuf, is_dir: bool },
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
    pub propagation: libc::c_ulong,
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
}

impl Plan {
    /// Whether the parent makes this mount: idmapped binds, and with moat's own user
    /// namespace every bind, whose source container root may have no way to reach.
    pub fn parent_built(&self, m: &MountPlan) -> bool {
        m.idmap.is_some() || (self.idmap_root.is_some() && matches!(m.kind, Kind::Bind { .. }))
    }

    /// How many mount fds the parent sends the child.
    pub fn idmapped_count(&self) -> usize {
        self.idmap_root.is_some() as usize
            + self.mounts.iter().filter(|m| self.parent_built(m)).count()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct PlanError {
    pub field: String,
    pub reason: String,
}

pub fn plan(
    spec: &Spec,
    bundle: &Path,
    no_pivot: bool,
    cgroup_mounts: Vec<CgroupMount>,
    new_cgroupns: bool,
) -> Result<Plan, PlanError> {
    let userns = spec.linux().namespaces.iter().any(|n| n.typ == "user");
    let rootfs = spec.rootfs(bundle);
    match std::fs::metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(PlanError {
                field: "root.path".into(),
                reason: format!("{} is not a directory", rootfs.display()),
            })
        }
        Err(e) => {
            return Err(PlanError {
                field: "root.path".into(),
                reason: format!("rootfs {}: {e}", rootfs.display()),
            })
        }
    }
    let propagation = match spec.linux().rootfs_propagation.as_deref().unwrap_or("") {
        "shared" => libc::MS_SHARED,
        "rshared" => libc::MS_SHARED | libc::MS_REC,
        "private" => libc::MS_PRIVATE,
        "rprivate" => libc::MS_PRIVATE | libc::MS_REC,
        "slave" => libc::MS_SLAVE,
        "unbindable" => libc::MS_UNBINDABLE,
        "runbindable" => libc::MS_UNBINDABLE | libc::MS_REC,
        // runc's default: the host's mount events reach the container, never the reverse.
        _ => libc::MS_SLAVE | libc::MS_REC,
    };
    let mut mounts = Vec::new();
    let mut dev_is_bind = false;
    for (index, m) in spec.mounts.iter().enumerate() {
        let opts = mount::parse_options(&m.options);
        let field = |f: &str| format!("mounts[{index}].{f}");
        let typ = m.typ.as_deref().unwrap_or("");
        let idmap = if opts.idmap || !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            if !(opts.bind || typ == "bind") {
                return Err(PlanError {
                    field: field("uidMappings"),
                    reason: "only bind mounts can be idmapped".into(),
                });
            }
            if m.uid_mappings.is_empty() != m.gid_mappings.is_empty() {
                return Err(PlanError {
                    field: field("uidMappings"),
                    reason: "an idmapped mount needs both uidMappings and gidMappings".into(),
                });
            }
            if m.uid_mappings.is_empty() && !userns {
                return Err(PlanError {
                    field: field("options"),
                    reason: "idmap without uidMappings maps through the container's user \
                             namespace, and the container has none"
                        .into(),
                });
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
                return Err(PlanError {
                    field: field("source"),
                    reason: "a bind mount needs a source".into(),
                });
            }
            let source = if src.starts_with('/') {
                PathBuf::from(src)
            } else {
                bundle.join(src)
            };
            let meta = std::fs::metadata(&source).map_err(|e| PlanError {
                field: field("source"),
                reason: format!("{}: {e}", source.display()),
            })?;
            if path::components(&m.destination).is_empty() {
                return Err(PlanError {
                    field: field("destination"),
                    reason: "cannot bind over the container root".into(),
                });
            }
            if path::components(&m.destination) == ["dev"] {
                dev_is_bind = true;
            }
            Kind::Bind {
                source,
                is_dir: meta.is_dir(),
            }
        } else if typ == "cgroup" || typ == "cgroup2" {
            Kind::Cgroup
        } else {
            if typ.is_empty() || typ == "none" {
                return Err(PlanError {
                    field: field("type"),
                    reason: "a mount that is not a bind needs a filesystem type".into(),
                });
            }
            Kind::Fs {
                fstype: typ.to_string(),
                source: m.source.clone(),
            }
        };
        // /proc and /sys must be the real filesystems: LSM labels, sysctls and masks are
        // written through them (CVE-2019-16884). rootless specs bind the host's /sys.
        let comps = path::components(&m.destination);
        if comps == ["proc"] && !matches!(&kind, Kind::Fs { fstype, .. } if fstype == "proc") {
            return Err(PlanError {
                field: field("type"),
                reason: "/proc must be a proc filesystem".into(),
            });
        }
        if comps == ["sys"]
            && !matches!(&kind, Kind::Fs { fstype, .. } if fstype == "sysfs")
            && !matches!(&kind, Kind::Bind { source, .. } if source == std::path::Path::new("/sys"))
        {
            return Err(PlanError {
                field: field("type"),
                reason: "/sys must be a sysfs filesystem or a bind of the host's /sys".into(),
            });
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
        mounts,
        cgroup_mounts,
        new_cgroupns,
        default_devices: !dev_is_bind,
        masked: l.masked_paths.clone(),
        readonly_paths: l.readonly_paths.clone(),
        no_pivot,
        idmap_root: None,
    })
}

fn c(s: &str) -> CString {
    CString::new(s).expect("paths were checked for NUL in the parent")
}

/// A filesystem moat mounted at `/proc` or `/sys`, held by the fd of the mount itself.
/// Masked and read-only paths below it are resolved from this fd, never again through the
/// rootfs's names: a process sharing the rootfs (a volume) may rename the directory the
/// mount sits on, or swap it for a symlink, between the mount and the masks, and a mask
/// resolved by name would then miss (ENOENT, skipped) and leave the procfs unmasked.
pub struct Pinned {
    dest: Vec<String>,
    fd: OwnedFd,
}

/// Child, before pivot: propagation, the rootfs bind, every spec mount. Returns the root
/// and the pinned `/proc` and `/sys` mounts for [`finalize`].
/// `idmapped` holds the mounts the parent built (see `linux/idmap.rs`), by mount index
/// ([`super::idmap::ROOTFS`] for the rootfs).
pub fn mount_all(
    p: &Plan,
    idmapped: &mut Vec<(u32, OwnedFd)>,
) -> Result<(Root, Vec<Pinned>), InitFailure> {
    sys::mount(None, c"/", None, p.propagation, None)
        .step(Step::Rootfs, || "set propagation of /".into())?;
    let rootfs = c(p.rootfs.to_str().unwrap_or_default());
    let root = if let Some(tree) = take(idmapped, super::idmap::ROOTFS) {
        attach_rootfs(&p.rootfs, &rootfs, tree.as_fd())?;
        Root::from_fd(tree)
    } else {
        // pivot_root needs the new root to be a mount point.
        sys::mount(
            Some(&rootfs),
            &rootfs,
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )
        .step(Step::Rootfs, || {
            format!("bind {} onto itself", p.rootfs.display())
        })?;
        Root::open(&p.rootfs).step(Step::Rootfs, || format!("open {}", p.rootfs.display()))?
    };
    let mut pinned = Vec::new();
    for m in &p.mounts {
        let prebuilt = take(idmapped, m.index as u32);
        if let Some(fd) = mount_one(&root, p, m, prebuilt)? {
            let dest = path::components(&m.destination);
            pinned.retain(|x: &Pinned| x.dest != dest);
            pinned.push(Pinned {
                dest: dest.into_iter().map(String::from).collect(),
                fd,
            });
        }
    }
    Ok((root, pinned))
}

/// Attaches the rootfs the parent built (idmapped) over the engine's, which makes it a
/// mount point as pivot_root needs. Container root may have no way to the engine's path
/// (podman keeps its storage under 0700 directories, and does not know moat mapped root
/// elsewhere): then it goes on top of `/` of the container's mount namespace, where
/// nothing needs a path to reach it (createContainer hooks then see it as `/`).
fn attach_rootfs(p: &Path, rootfs: &CString, tree: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let target = match sys::openat(path::cwd(), rootfs, libc::O_PATH | libc::O_DIRECTORY, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            sys::openat(path::cwd(), c"/", libc::O_PATH | libc::O_DIRECTORY, 0)
        }
        r => r,
    }
    .step(Step::Rootfs, || format!("open {}", p.display()))?;
    mount::attach(tree, target.as_fd()).step(Step::Rootfs, || {
        format!("attach the idmapped rootfs on {}", p.display())
    })
}

fn take(idmapped: &mut Vec<(u32, OwnedFd)>, index: u32) -> Option<OwnedFd> {
    let i = idmapped.iter().position(|(x, _)| *x == index)?;
    Some(idmapped.swap_remove(i).1)
}

/// Mounts one spec entry; returns the mount's fd when it is `/proc` or `/sys` (to pin).
/// `prebuilt` is the idmapped copy of a bind's source the parent made.
fn mount_one(
    root: &Root,
    p: &Plan,
    m: &MountPlan,
    prebuilt: Option<OwnedFd>,
) -> Result<Option<OwnedFd>, InitFailure> {
    let what = || format!("mounts[{}] {}", m.index, m.destination);
    let pin = matches!(path::components(&m.destination)[..], ["proc"] | ["sys"]);
    let mut pinned = None;
    match &m.kind {
        Kind::Bind { source, is_dir } => {
            let target = if *is_dir {
                root.mkdir_all(&m.destination, 0o755)
            } else {
                root.mkfile(&m.destination, 0o644)
            }
            .step(Step::Mounts, what)?;
            let tree = match prebuilt {
                Some(t) => t,
                None if p.parent_built(m) => {
                    return Err(InitFailure::new(
                        Step::Mounts,
                        format!("{}: no idmapped mount from the parent", what()),
                    ))
                }
                None => mount::clone_tree(
                    path::cwd(),
                    source.to_str().unwrap_or_default(),
                    m.opts.recursive,
                )
                .step(Step::Mounts, || {
                    format!("{}: clone {}", what(), source.display())
                })?,
            };
            mount::set_attrs(tree.as_fd(), &m.opts)
                .step(Step::Mounts, || format!("{}: set attributes", what()))?;
            mount::attach(tree.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
            if pin {
                pinned = Some(tree);
            }
        }
        Kind::Fs { fstype, source } => {
            if fstype == "proc" || fstype == "sysfs" {
                refuse_symlink(root, &m.destination).step(Step::Mounts, what)?;
            }
            let target = root
                .mkdir_all(&m.destination, 0o755)
                .step(Step::Mounts, what)?;
            let Some((mnt, opts)) = new_fs_or_fallback(fstype, source.as_deref(), &m.opts)
                .step(Step::Mounts, || {
                    format!("{}: new {fstype} filesystem", what())
                })?
            else {
                return Ok(None);
            };
            mount::set_attrs(mnt.as_fd(), &opts)
                .step(Step::Mounts, || format!("{}: set attributes", what()))?;
            mount::attach(mnt.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
            if pin {
                pinned = Some(mnt);
            }
        }
        Kind::Cgroup => mount_cgroup(root, p, m)?,
    }
    if let Some((flag, rec)) = m.opts.propagation {
        let top = root
            .open_at(&m.destination, libc::O_PATH)
            .step(Step::Mounts, what)?;
        mount::set_propagation(top.as_fd(), flag, rec)
            .step(Step::Mounts, || format!("{}: propagation", what()))?;
    }
    Ok(pinned)
}

/// A new filesystem for a spec mount, and the attributes to give it. In a user namespace
/// the kernel refuses what a runc-shaped spec often asks for, and moat falls back as runc
/// does: sysfs in a user namespace that does not own the network namespace (none of its
/// own, or one joined by path as rootful podman passes it) → the host's /sys bound
/// recursively read-only; mqueue without an ipc namespace of its own → a bind of the host's /dev/mqueue;
/// `uid=`/`gid=` of an id the namespace does not map (devpts `gid=5`) → the option left
/// out. Attributes of a bind tree (`ro`, `nosuid`, …) apply to every mount in it.
/// `None`: nothing to mount (mqueue, and the host has no /dev/mqueue either; message
/// queues still work, only their listing under /dev/mqueue is missing).
fn new_fs_or_fallback(
    fstype: &str,
    source: Option<&str>,
    opts: &Options,
) -> std::io::Result<Option<(OwnedFd, Options)>> {
    let err = match mount::new_fs(fstype, source, &opts.data) {
        Ok(m) => return Ok(Some((m, opts.clone()))),
        Err(e) => e,
    };
    if !super::rootless::in_user_namespace() {
        return Err(err);
    }
    let bind = |host: &str, recursive: bool| {
        let mut o = opts.clone();
        o.rec_set |= o.set;
        mount::clone_tree(path::cwd(), host, recursive).map(|t| Some((t, o)))
    };
    let ids = |k: &str| k == "uid" || k == "gid";
    match (fstype, err.raw_os_error()) {
        ("sysfs", Some(libc::EPERM)) => host_sysfs().map(|t| Some((t, opts.clone()))),
        ("mqueue", Some(libc::EPERM)) if Path::new("/dev/mqueue").is_dir() => {
            bind("/dev/mqueue", false)
        }
        ("mqueue", Some(libc::EPERM)) => Ok(None),
        (_, Some(libc::EINVAL | libc::EPERM)) if opts.data.iter().any(|(k, _)| ids(k)) => {
            let data: Vec<_> = opts.data.iter().filter(|(k, _)| !ids(k)).cloned().collect();
            Ok(Some((mount::new_fs(fstype, source, &data)?, opts.clone())))
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

/// A rootfs that makes /proc or /sys a symlink is refused outright (CVE-2019-19921,
/// CVE-2025-54867), even though the link would be resolved inside the root.
fn refuse_symlink(root: &Root, dest: &str) -> std::io::Result<()> {
    match root.open_nofollow(dest) {
        Ok(fd) => {
            let st = sys::fstat(fd.as_fd())?;
            if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
                return Err(std::io::Error::other(format!(
                    "{dest} is a symlink in the rootfs; refused"
                )));
            }
            Ok(())
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The container sees only its own cgroup. On a v2 host inside a cgroup namespace that is a
/// fresh cgroup2 mount; otherwise each hierarchy's container directory is bind-mounted
/// (under a tmpfs on v1). Always read-only unless the spec says `rw`.
fn mount_cgroup(root: &Root, p: &Plan, m: &MountPlan) -> Result<(), InitFailure> {
    let what = || format!("mounts[{}] {} (cgroup)", m.index, m.destination);
    let ro = m.opts.clr & sys::MOUNT_ATTR_RDONLY == 0;
    let mut attrs = m.opts.clone();
    if ro {
        attrs.set |= sys::MOUNT_ATTR_RDONLY;
    }
    let target = root
        .mkdir_all(&m.destination, 0o755)
        .step(Step::Mounts, what)?;
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
        return mount::attach(mnt.as_fd(), target.as_fd()).step(Step::Mounts, what);
    }
    let tmpfs = mount::new_fs(
        "tmpfs",
        Some("cgroup"),
        &[("mode".into(), Some("755".into()))],
    )
    .step(Step::Mounts, || format!("{}: tmpfs", what()))?;
    mount::attach(tmpfs.as_fd(), target.as_fd()).step(Step::Mounts, what)?;
    for cg in &p.cgroup_mounts {
        let dest = format!("{}/{}", m.destination, cg.name);
        let t = root
            .mkdir_all(&dest, 0o755)
            .step(Step::Mounts, || dest.clone())?;
        let mnt = mount::clone_tree(path::cwd(), cg.host_dir.to_str().unwrap_or_default(), false)
            .step(Step::Mounts, || {
            format!("{}: {}", what(), cg.host_dir.display())
        })?;
        mount::set_attrs(mnt.as_fd(), &attrs).step(Step::Mounts, || dest.clone())?;
        mount::attach(mnt.as_fd(), t.as_fd()).step(Step::Mounts, || dest.clone())?;
        // Co-mounted controllers ("cpu,cpuacct") are also reachable by each name.
        if cg.name.contains(',') {
            let (dir, _) = root.parent_of(&dest).step(Step::Mounts, || dest.clone())?;
            for single in cg.name.split(',') {
                let _ = sys::symlinkat(&c(&cg.name), dir.as_fd(), &c(single));
            }
        }
    }
    if ro {
        let top = root
            .open_at(&m.destination, libc::O_PATH)
            .step(Step::Mounts, what)?;
        mount::setattr(top.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0).step(Step::Mounts, what)?;
    }
    Ok(())
}

/// Moves into the new root. The old root is detached, so nothing of the host's tree stays
/// reachable; with `--no-pivot` the root is moved over / and chrooted into (for initramfs
/// hosts where pivot_root is impossible).
pub fn pivot(root: &Root, no_pivot: bool) -> Result<(), InitFailure> {
    sys::fchdir(root.fd()).step(Step::PivotRoot, || "chdir to rootfs".into())?;
    if no_pivot {
        sys::mount(Some(c"."), c"/", None, libc::MS_MOVE, None)
            .step(Step::PivotRoot, || "move rootfs to /".into())?;
        sys::chroot(c".").step(Step::PivotRoot, || "chroot".into())?;
    } else {
        sys::pivot_root(c".", c".").step(Step::PivotRoot, || "pivot_root".into())?;
        // The old root is stacked under the new one at "."; make sure unmounting it does
        // not propagate to the host, then detach it.
        sys::mount(None, c".", None, libc::MS_SLAVE | libc::MS_REC, None)
            .step(Step::PivotRoot, || "make old root a slave".into())?;
        sys::umount2(c".", libc::MNT_DETACH).step(Step::PivotRoot, || "detach old root".into())?;
    }
    std::env::set_current_dir("/").step(Step::PivotRoot, || "chdir /".into())
}

/// The object a masked or read-only path names, not following a final symlink: below a
/// pinned `/proc` or `/sys` resolved from that mount (no symlinks, never above it),
/// elsewhere inside the root.
fn open_target(root: &Root, pinned: &[Pinned], target: &str) -> std::io::Result<OwnedFd> {
    let comps = path::components(target);
    let pin = pinned
        .iter()
        .filter(|x| comps.len() > x.dest.len() && x.dest.iter().zip(&comps).all(|(a, b)| a == b))
        .max_by_key(|x| x.dest.len());
    let Some(pin) = pin else {
        return root.open_nofollow(target);
    };
    let rel = CString::new(comps[pin.dest.len()..].join("/"))
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = sys::OpenHow {
        flags: (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: sys::RESOLVE_BENEATH | sys::RESOLVE_NO_SYMLINKS,
    };
    sys::openat2(pin.fd.as_fd(), &rel, &how)
}

/// After pivot: masked paths (files by a verified /dev/null, directories by one shared,
/// read-only, empty tmpfs), read-only paths, and the read-only root.
pub fn finalize(p: &Plan, pinned: &[Pinned]) -> Result<(), InitFailure> {
    let root = Root::open(Path::new("/")).step(Step::MaskedPaths, || "open /".into())?;
    if !p.masked.is_empty() {
        let null = verified_dev_null(&root)?;
        // One empty read-only tmpfs serves every masked directory: the first one gets a
        // fresh instance, the others a bind of that mount once it is attached (kernels
        // before 6.x cannot clone a detached mount; one superblock is also cheaper).
        let mut first_dir: Option<&str> = None;
        for m in &p.masked {
            let target = match open_target(&root, pinned, m) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(e) => return Err(e).step(Step::MaskedPaths, || m.clone()),
            };
            let st = sys::fstat(target.as_fd()).step(Step::MaskedPaths, || m.clone())?;
            let src = if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                mount::clone_tree(null.as_fd(), "", false)
            } else if let Some(first) = first_dir {
                let mounted = root
                    .open_at(first, libc::O_PATH)
                    .step(Step::MaskedPaths, || first.to_string())?;
                mount::clone_tree(mounted.as_fd(), "", false)
            } else {
                first_dir = Some(m);
                empty_tmpfs()
            }
            .step(Step::MaskedPaths, || m.clone())?;
            mount::attach(src.as_fd(), target.as_fd()).step(Step::MaskedPaths, || m.clone())?;
        }
    }
    for r in &p.readonly_paths {
        let target = match open_target(&root, pinned, r) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e).step(Step::ReadonlyPaths, || r.clone()),
        };
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
    }
    if p.readonly {
        let top = root
            .open_at("/", libc::O_PATH)
            .step(Step::Rootfs, || "open /".into())?;
        mount::setattr(top.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
            .step(Step::Rootfs, || "make / read-only".into())?;
    }
    Ok(())
}

fn empty_tmpfs() -> std::io::Result<OwnedFd> {
    let fs = mount::new_fs(
        "tmpfs",
        Some("tmpfs"),
        &[
            ("size".into(), Some("0".into())),
            ("mode".into(), Some("555".into())),
        ],
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

/// The container's /dev/null, opened without following links and checked to be the real
/// 1:3 character device, so a racing swap cannot turn a mask into a bind of something else
/// (CVE-2025-31133).
fn verified_dev_null(root: &Root) -> Result<OwnedFd, InitFailure> {
    let fd = root
        .open_nofollow("/dev/null")
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
