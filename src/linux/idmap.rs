//! Idmapped mounts: the rootfs of a `moat.userns=auto` container and the spec's idmapped
//! bind mounts (`mounts[].uidMappings`, options `idmap`/`ridmap`).
//!
//! The parent builds them, because giving a mount an idmapping needs `CAP_SYS_ADMIN` over
//! the filesystem's superblock (the host's): `open_tree(OPEN_TREE_CLONE)` makes a detached
//! copy, `mount_setattr(MOUNT_ATTR_IDMAP)` with a user namespace fd idmaps it, and the fd
//! goes to the child over the sync socket, which attaches it with `move_mount`. A bind
//! whose source is inside the rootfs, perhaps below earlier mounts of the same spec, exists
//! only in the init's mount namespace, where `open_tree` must clone it: the init resolves
//! it there (`RESOLVE_IN_ROOT`) and clones it when it comes to that mount, sends the
//! detached copy to the parent, which idmaps it ([`idmap_detached`]), and attaches it.
//!
//! With an idmapping, a file stored with id X is seen as the host id the namespace maps X
//! to: through the container's own namespace (container 0 → host S), the image's root
//! files show as S, i.e. as root inside, and what container root writes is stored as 0.
//!
//! An overlay mount cannot be idmapped itself (overlayfs does not allow it: 6.18 answers
//! EINVAL). So an overlay rootfs (what podman and containerd mount at
//! `bundle/rootfs`) is rebuilt: its layers, read from `/proc/self/mountinfo`, are idmapped
//! one by one, and a short-lived helper in a private mount namespace attaches each copy
//! over its own path and creates a new overlay from the engine's options (6.1's overlayfs
//! takes only layers attached in its creator's namespace). The helper creates it with the
//! filesystem ids of container root (host S): overlayfs does its upper-layer work (work
//! dir, copy-up) with its creator's credentials, and host id 0 has no representation
//! through the idmapped upper layer (EOVERFLOW). The engine's own overlay stays mounted on
//! the host over the same upper layer, as a second user of it (the kernel warns
//! "upperdir is in-use"; only one of the two should be written to), with a work directory
//! of its own beside the engine's (`<workdir>-moat`, left for the engine to remove with
//! the layer).
//!
//! The same helper builds the bounded root of `moat.rootfs=ephemeral` ([`ephemeral`]): the
//! engine's layers, its upper layer included, as lower layers, and an upper and work
//! directory on a capped tmpfs of moat's, with or without idmapped layers.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::sys::{self, MountAttr};
use super::{mount, namespaces, path};
use crate::spec::IdMapping;

/// The fd index of the rootfs among the sources sent to the child (others are `mounts[i]`).
pub const ROOTFS: u32 = u32::MAX;

/// How a spec mount is idmapped.
#[derive(Debug, Clone, PartialEq)]
pub struct Idmap {
    /// Empty: through the container's own user namespace.
    pub uid: Vec<IdMapping>,
    pub gid: Vec<IdMapping>,
    /// `ridmap`: every mount of a recursive bind, not just the top one.
    pub recursive: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct IdmapError {
    pub what: String,
    pub source: io::Error,
}

fn err(what: impl Into<String>) -> impl FnOnce(io::Error) -> IdmapError {
    let what = what.into();
    move |source| IdmapError { what, source }
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `/proc/<pid>/ns/user`, the namespace a mount is idmapped with.
pub fn userns_of(pid: i32) -> io::Result<OwnedFd> {
    let p = CString::new(format!("/proc/{pid}/ns/user")).expect("no NUL");
    sys::openat(path::cwd(), &p, libc::O_RDONLY, 0)
}

/// A user namespace with exactly these mappings, held by a short-lived child that is
/// reaped before this returns (the fd keeps the namespace alive).
pub fn userns_with(uid: &[IdMapping], gid: &[IdMapping]) -> io::Result<OwnedFd> {
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    match sys::clone_fork(libc::CLONE_NEWUSER as u64, None)? {
        sys::Forked::Child => {
            drop(wr);
            // Wait until the parent has what it needs (EOF), then go.
            let _ = std::fs::File::from(rd).read(&mut [0u8; 1]);
            sys::exit_now(0)
        }
        sys::Forked::Parent(pid) => {
            drop(rd);
            let r = namespaces::write_id_maps(pid, uid, gid).and_then(|_| userns_of(pid));
            drop(wr);
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            r
        }
    }
}

fn set_idmap(mnt: BorrowedFd<'_>, recursive: bool, userns: BorrowedFd<'_>) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: sys::MOUNT_ATTR_IDMAP,
        userns_fd: u64::try_from(userns.as_raw_fd())
            .map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?,
        ..Default::default()
    };
    sys::mount_setattr(mnt, recursive, &attr)
}

/// A detached, idmapped copy of the tree at `path`. A filesystem that cannot be idmapped
/// is named in the error.
pub fn idmapped_tree(
    p: &Path,
    recursive: bool,
    idmap_recursive: bool,
    userns: BorrowedFd<'_>,
) -> Result<OwnedFd, IdmapError> {
    let mut flags = sys::OPEN_TREE_CLONE;
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    let c = cpath(p).map_err(err(p.display().to_string()))?;
    let tree = sys::open_tree(path::cwd(), &c, flags)
        .map_err(err(format!("open_tree {}", p.display())))?;
    match set_idmap(tree.as_fd(), idmap_recursive, userns) {
        Ok(()) => Ok(tree),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let fs = mount_of(p).map_or("unknown".into(), |m| m.fstype);
            Err(IdmapError {
                what: format!(
                    "{} is on a {fs} filesystem, which does not support idmapped mounts \
                     (mount_setattr MOUNT_ATTR_IDMAP)",
                    p.display()
                ),
                source: e,
            })
        }
        Err(e) => Err(err(format!("idmap {}", p.display()))(e)),
    }
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq)]
pub struct MountInfo {
    /// The mount's id and its parent's.
    pub id: u64,
    pub parent: u64,
    /// The directory of its filesystem mounted there (`/` for a full mount).
    pub root: String,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    /// Per-superblock options, split at commas, escapes undone.
    pub super_opts: Vec<String>,
}

/// Undoes the kernel's octal escapes (`\040` for a space, …).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = |c: u8| (c - b'0') as u32;
            #[allow(clippy::cast_possible_truncation)] // the kernel escapes a byte: \000-\377
            out.push((v(b[i + 1]) << 6 | v(b[i + 2]) << 3 | v(b[i + 3])) as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some(MountInfo {
                id: f.first()?.parse().ok()?,
                parent: f.get(1)?.parse().ok()?,
                root: unescape(f.get(3)?),
                mount_point: PathBuf::from(unescape(f.get(4)?)),
                fstype: f.get(sep + 1)?.to_string(),
                source: unescape(f.get(sep + 2)?),
                super_opts: f.get(sep + 3)?.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// The topmost mount whose mount point is `p` or, failing that, the one `p` lives on.
fn mount_of(p: &Path) -> Option<MountInfo> {
    let p = std::fs::canonicalize(p).ok()?;
    let all = parse_mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").ok()?);
    all.into_iter()
        .filter(|m| p.starts_with(&m.mount_point))
        .fold(None, |best: Option<MountInfo>, m| match &best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => best,
            _ => Some(m),
        })
}

/// The options of an overlay, as `mount -t overlay -o` took them.
#[derive(Debug, Default, PartialEq)]
pub struct OverlayOpts {
    pub lower: Vec<PathBuf>,
    pub upper: Option<PathBuf>,
    pub work: Option<PathBuf>,
    /// Everything else (`redirect_dir=on`, `index=off`, `volatile`, …), passed on as is.
    pub other: Vec<(String, Option<String>)>,
}

/// Why an overlay's options cannot be mounted again from their paths.
#[derive(Debug, thiserror::Error)]
pub enum OverlayOptsError {
    /// `layer` as mountinfo shows it (escaped).
    #[error("overlay layer {layer:?} is a relative path (mounted from another directory); cannot find it again")]
    RelativeLayer { layer: String },
    #[error("overlay data-only lower layers (::) are not supported")]
    DataOnlyLower,
    #[error("overlay without lowerdir")]
    NoLowerdir,
}

pub fn overlay_opts(super_opts: &[String]) -> Result<OverlayOpts, OverlayOptsError> {
    let mut o = OverlayOpts::default();
    for opt in super_opts {
        let (k, v) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt.as_str(), None),
        };
        let abs = |s: &str| -> Result<PathBuf, OverlayOptsError> {
            let p = PathBuf::from(unescape(s));
            if p.is_absolute() {
                Ok(p)
            } else {
                Err(OverlayOptsError::RelativeLayer {
                    layer: s.to_string(),
                })
            }
        };
        match (k, v) {
            ("lowerdir", Some(v)) => {
                if v.contains("::") {
                    return Err(OverlayOptsError::DataOnlyLower);
                }
                for l in v.split(':').filter(|l| !l.is_empty()) {
                    o.lower.push(abs(l)?);
                }
            }
            ("upperdir", Some(v)) => o.upper = Some(abs(v)?),
            ("workdir", Some(v)) => o.work = Some(abs(v)?),
            ("rw" | "ro", None) => {}
            (k, v) => o.other.push((k.to_string(), v.map(unescape))),
        }
    }
    if o.lower.is_empty() {
        return Err(OverlayOptsError::NoLowerdir);
    }
    Ok(o)
}

fn common_dir(a: &Path, b: &Path) -> PathBuf {
    a.components()
        .zip(b.components())
        .take_while(|(x, y)| x == y)
        .map(|(x, _)| x)
        .collect()
}

/// A new overlay over idmapped copies of `rootfs`'s layers, created with the filesystem
/// ids of `root_host` (container root on the host).
///
/// The layers are idmapped here, then a helper in a private mount namespace of its own
/// mounts each copy over its original path and creates the overlay from the engine's own
/// paths: overlayfs before 6.x takes (`clone_private_mount`) only layers attached in the
/// creator's mount namespace, never detached ones, and the host must not see the copies.
fn overlay(
    rootfs: &Path,
    info: &MountInfo,
    userns: BorrowedFd<'_>,
    root_host: u32,
) -> Result<OwnedFd, IdmapError> {
    let what = format!("root.path: overlay {}", rootfs.display());
    let o = overlay_opts(&info.super_opts).map_err(|e| err(format!("{what}: {e}"))(einval()))?;
    // Layers are attached in base-first order: the upper layer's directory may hold a lower.
    let mut layers: Vec<(PathBuf, OwnedFd)> = Vec::new();
    let mut upper = None;
    if let (Some(up), Some(engine_work)) = (&o.upper, &o.work) {
        // A work directory of our own next to the engine's: a live overlay's work dir is
        // not for a second mount, and one mounted `volatile` marks it so that the kernel
        // refuses any other mount over it ("incompat feature 'volatile'").
        let mut name = engine_work.file_name().unwrap_or_default().to_os_string();
        name.push("-moat");
        let work = engine_work.with_file_name(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&work) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(err(format!("{what}: create {}", work.display()))(e))
            }
            _ => {}
        }
        // upperdir and workdir must sit on one mount: idmap their common directory once.
        let base = common_dir(up, &work);
        let fd = idmapped_tree(&base, false, false, userns)
            .map_err(|e| err(format!("{what}: upper layer {}", e.what))(e.source))?;
        layers.push((base, fd));
        upper = Some((up.clone(), work));
    }
    for l in &o.lower {
        let fd = idmapped_tree(l, false, false, userns)
            .map_err(|e| err(format!("{what}: layer {}", e.what))(e.source))?;
        layers.push((l.clone(), fd));
    }
    let mut opts: Vec<(String, Option<String>)> = Vec::new();
    let plain = |p: &Path| overlay_path(&what, p);
    let lower: Vec<String> = o.lower.iter().map(|l| plain(l)).collect::<Result<_, _>>()?;
    opts.push(("lowerdir".into(), Some(lower.join(":"))));
    if let Some((up, work)) = &upper {
        opts.push(("upperdir".into(), Some(plain(up)?)));
        opts.push(("workdir".into(), Some(plain(work)?)));
    }
    // `volatile` is the engine's choice for its own mount; this one stays durable.
    opts.extend(o.other.iter().filter(|(k, _)| k != "volatile").cloned());
    run_helper(&layers, &opts, root_host, &what)
}

/// Forks the overlay helper ([`overlay_helper`]) and receives the overlay it made.
fn run_helper(
    layers: &[(PathBuf, OwnedFd)],
    opts: &[(String, Option<String>)],
    root_host: u32,
    what: &str,
) -> Result<OwnedFd, IdmapError> {
    let (ours, theirs) = super::sync::pair().map_err(err("socketpair"))?;
    let (rd, wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| err("pipe")(e.into()))?;
    match sys::clone_fork(libc::CLONE_NEWNS as u64, None).map_err(err("fork the overlay helper"))? {
        sys::Forked::Child => {
            drop(ours);
            drop(rd);
            let r = overlay_helper(layers, opts, root_host).and_then(|fd| {
                theirs
                    .send_mount(0, fd.as_fd())
                    .map_err(|e| ("send".into(), e))
            });
            match r {
                Ok(()) => sys::exit_now(0),
                Err((step, e)) => {
                    use std::io::Write;
                    let _ = std::fs::File::from(wr).write_all(format!("{step}: {e}").as_bytes());
                    sys::exit_now(1)
                }
            }
        }
        sys::Forked::Parent(pid) => {
            drop(theirs);
            drop(wr);
            let got = ours.recv_mount();
            let mut msg = String::new();
            let _ = std::fs::File::from(rd).read_to_string(&mut msg);
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            match got {
                Ok((_, fd)) => Ok(fd),
                Err(e) => Err(IdmapError {
                    what: format!(
                        "{what}: create the overlay: {}",
                        if msg.is_empty() {
                            "helper died".to_string()
                        } else {
                            msg
                        }
                    ),
                    source: e,
                }),
            }
        }
    }
}

/// In the helper's private mount namespace: the idmapped layers over their paths, then the
/// overlay, created with container root's filesystem ids.
fn overlay_helper(
    layers: &[(PathBuf, OwnedFd)],
    opts: &[(String, Option<String>)],
    root_host: u32,
) -> Result<OwnedFd, (String, io::Error)> {
    let at = |what: String| move |e: io::Error| (what, e);
    sys::mount(None, c"/", None, libc::MS_PRIVATE | libc::MS_REC, None)
        .map_err(at("make the helper's mounts private".into()))?;
    for (p, fd) in layers {
        let c = cpath(p).map_err(at(p.display().to_string()))?;
        let target = sys::openat(path::cwd(), &c, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(at(format!("open {}", p.display())))?;
        mount::attach(fd.as_fd(), target.as_fd())
            .map_err(at(format!("attach the idmapped {}", p.display())))?;
    }
    let fs = sys::fsopen(c"overlay").map_err(at("fsopen overlay".into()))?;
    for (k, v) in opts {
        let key = CString::new(k.as_str()).map_err(|_| (format!("option {k}"), einval()))?;
        match v {
            Some(v) => {
                let val =
                    CString::new(v.as_str()).map_err(|_| (format!("option {k}"), einval()))?;
                sys::fsconfig(fs.as_fd(), sys::FSCONFIG_SET_STRING, Some(&key), Some(&val))
            }
            None => sys::fsconfig(fs.as_fd(), sys::FSCONFIG_SET_FLAG, Some(&key), None),
        }
        .map_err(at(format!("option {k}")))?;
    }
    // overlayfs keeps its creator's credentials for work on the upper layer (work dir,
    // copy-up): container root's filesystem ids, which the idmapped upper layer stores as
    // the image's root; host id 0 has no representation there (EOVERFLOW, and the kernel
    // would quietly mount read-only). Capabilities stay effective.
    let (eff, prm, inh) = sys::capget().map_err(at("capget".into()))?;
    sys::setfsids(root_host, root_host);
    // setfsuid reports no error: read it back (an invalid id changes nothing).
    if sys::setfsids(u32::MAX, u32::MAX) != (root_host, root_host) {
        return Err(("setfsuid".into(), io::Error::from_raw_os_error(libc::EPERM)));
    }
    sys::capset(eff, prm, inh).map_err(at("capset".into()))?;
    sys::fsconfig(fs.as_fd(), sys::FSCONFIG_CMD_CREATE, None, None).map_err(at(
        "create (see the kernel log for overlayfs's reason)".into(),
    ))?;
    sys::fsmount(fs.as_fd(), 0).map_err(at("fsmount".into()))
}

/// The caps of a bounded writable root (`moat.rootfs=ephemeral`).
#[derive(Debug, Clone, PartialEq)]
pub struct Ephemeral {
    /// Bytes and inodes of the tmpfs that holds the container's writes.
    pub size: u64,
    pub inodes: u64,
    /// A directory of moat's own (the container's state directory) where the helper, in
    /// its private mount namespace, attaches the tmpfs so that overlayfs can take it.
    pub at: PathBuf,
}

/// A bounded writable root: the engine's overlay rebuilt with the engine's layers, its
/// upper layer included, all as lower layers, and a new upper and work directory on a
/// tmpfs capped at `e.size` bytes and `e.inodes` inodes (a plain directory rootfs is the
/// one lower layer). The container's writes fill the tmpfs (ENOSPC at the cap) and never
/// reach the engine's storage; tmpfs pages are charged to the memory cgroup of whoever
/// writes them, the container. With `moat.userns=auto` (`userns`: the container's user
/// namespace and container root's host id) the lower layers are idmapped as in
/// [`rootfs`], and the upper directories belong to container root. Nothing stays on the
/// host: the tmpfs lives as long as the container's mounts.
pub fn ephemeral(
    rootfs: &Path,
    e: &Ephemeral,
    userns: Option<(BorrowedFd<'_>, u32)>,
) -> Result<OwnedFd, IdmapError> {
    let canon =
        std::fs::canonicalize(rootfs).map_err(err(format!("root.path {}", rootfs.display())))?;
    let what = format!("root.path: moat.rootfs=ephemeral over {}", canon.display());
    let engine = mount_of(&canon).filter(|m| m.mount_point == canon && m.fstype == "overlay");
    let (lower, other) = match &engine {
        Some(m) => {
            let o =
                overlay_opts(&m.super_opts).map_err(|x| err(format!("{what}: {x}"))(einval()))?;
            // The engine's upper layer (what it wrote before start: `podman cp`, config
            // files) is read-only below ours, above its image layers.
            let lower: Vec<PathBuf> = o.upper.iter().chain(&o.lower).cloned().collect();
            // The engine's choices for its own mount: `volatile` (for its work dir) and
            // `index` (which would claim the engine's upper layer, in use, as ours) are not
            // passed on.
            let other = o
                .other
                .into_iter()
                .filter(|(k, _)| k != "volatile" && k != "index")
                .collect();
            (lower, other)
        }
        None => (vec![canon.clone()], Vec::new()),
    };
    let root_host = userns.map_or(0, |(_, h)| h);
    let tmpfs = mount::new_fs(
        "tmpfs",
        Some("moat-rootfs"),
        &[
            ("size".into(), Some(e.size.to_string())),
            ("nr_inodes".into(), Some(e.inodes.to_string())),
            ("mode".into(), Some("755".into())),
        ],
    )
    .map_err(err(format!("{what}: the upper tmpfs")))?;
    for d in [c"upper", c"work"] {
        sys::mkdirat(tmpfs.as_fd(), d, 0o755).map_err(err(format!("{what}: mkdir {d:?}")))?;
    }
    if root_host != 0 {
        for d in [c"upper", c"work", c"."] {
            let fd = sys::openat(tmpfs.as_fd(), d, libc::O_PATH | libc::O_DIRECTORY, 0)
                .and_then(|fd| sys::fchownat_empty(fd.as_fd(), root_host, root_host))
                .map_err(err(format!("{what}: chown {d:?}")));
            fd?;
        }
    }
    let mut layers: Vec<(PathBuf, OwnedFd)> = Vec::new();
    if let Some((ns, _)) = userns {
        for l in &lower {
            let fd = idmapped_tree(l, false, false, ns)
                .map_err(|x| err(format!("{what}: layer {}", x.what))(x.source))?;
            layers.push((l.clone(), fd));
        }
    }
    // After the lower layers: `at` is no layer (moat's state directory).
    layers.push((e.at.clone(), tmpfs));
    let plain = |p: &Path| overlay_path(&what, p);
    let lower: Vec<String> = lower.iter().map(|l| plain(l)).collect::<Result<_, _>>()?;
    let at = plain(&e.at)?;
    let mut opts: Vec<(String, Option<String>)> = vec![
        ("lowerdir".into(), Some(lower.join(":"))),
        ("upperdir".into(), Some(format!("{at}/upper"))),
        ("workdir".into(), Some(format!("{at}/work"))),
        ("index".into(), Some("off".into())),
    ];
    opts.extend(other);
    run_helper(&layers, &opts, root_host, &what)
}

/// A layer path as overlay's mount options carry it: options are split at `,` and
/// `lowerdir` at `:`, and `\\` escapes; a path holding one is refused.
fn overlay_path(what: &str, p: &Path) -> Result<String, IdmapError> {
    let s = p.to_str().unwrap_or_default();
    if s.is_empty() || s.contains([',', ':', '\\']) {
        return Err(err(format!(
            "{what}: layer path {} has characters overlay options cannot carry",
            p.display()
        ))(einval()));
    }
    Ok(s.to_string())
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

/// The container's rootfs, idmapped through `userns` (an overlay rebuilt over idmapped
/// layers, anything else idmapped where its filesystem allows).
pub fn rootfs(
    rootfs: &Path,
    userns: BorrowedFd<'_>,
    root_host: u32,
) -> Result<OwnedFd, IdmapError> {
    let canon =
        std::fs::canonicalize(rootfs).map_err(err(format!("root.path {}", rootfs.display())))?;
    if let Some(m) = mount_of(&canon).filter(|m| m.mount_point == canon && m.fstype == "overlay") {
        return overlay(&canon, &m, userns, root_host);
    }
    idmapped_tree(&canon, false, false, userns).map_err(|e| IdmapError {
        what: format!(
            "root.path: {} (moat.userns=auto shows the rootfs through an idmapped mount)",
            e.what
        ),
        source: e.source,
    })
}

/// A spec bind mount, idmapped as `m` says; `container` is the container's user namespace.
pub fn bind(
    source: &Path,
    opts: &mount::Options,
    m: &Idmap,
    container: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, IdmapError> {
    let userns = userns_for(source, m, container)?;
    idmapped_tree(source, opts.recursive, m.recursive, userns.as_fd())
}

/// The user namespace a bind is idmapped with: one with exactly its mappings, or the
/// container's for `idmap`/`ridmap` without any.
fn userns_for(
    source: &Path,
    m: &Idmap,
    container: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, IdmapError> {
    if m.uid.is_empty() {
        let ns = container.ok_or_else(|| {
            err(format!("{}: idmap", source.display()))(io::Error::from_raw_os_error(libc::EINVAL))
        })?;
        sys::dup_cloexec(ns).map_err(err(format!("{}: idmap", source.display())))
    } else {
        userns_with(&m.uid, &m.gid).map_err(err("a user namespace for the mount's uidMappings"))
    }
}

/// Idmaps `tree`, a detached copy the init made of a bind source inside the rootfs
/// (`source`, named in errors), as [`bind`] idmaps a host path's copy. The kernel checks
/// that it is detached (an attached mount is refused) and that moat is privileged over its
/// filesystem.
pub fn idmap_detached(
    tree: BorrowedFd<'_>,
    source: &Path,
    m: &Idmap,
    container: Option<BorrowedFd<'_>>,
) -> Result<(), IdmapError> {
    let userns = userns_for(source, m, container)?;
    match set_idmap(tree, m.recursive, userns.as_fd()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let fs = sys::fstatfs(tree).map_or("unknown".into(), |st| format!("{:#x}", st.f_type));
            Err(IdmapError {
                what: format!(
                    "{} is on a filesystem (magic {fs}) that does not support idmapped \
                     mounts, or is not a detached copy (mount_setattr MOUNT_ATTR_IDMAP)",
                    source.display()
                ),
                source: e,
            })
        }
        Err(e) => Err(err(format!("idmap {}", source.display()))(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_and_overlay_options() {
        let text = "45 27 0:39 / /var/lib/x/merged rw,relatime - overlay overlay rw,lowerdir=/l/a:/l/b\\040c,upperdir=/u/diff,workdir=/u/work,index=off,volatile\n";
        let m = &parse_mountinfo(text)[0];
        assert_eq!(m.mount_point, Path::new("/var/lib/x/merged"));
        assert_eq!(m.fstype, "overlay");
        let o = overlay_opts(&m.super_opts).unwrap();
        assert_eq!(
            o.lower,
            vec![PathBuf::from("/l/a"), PathBuf::from("/l/b c")]
        );
        assert_eq!(o.upper.as_deref(), Some(Path::new("/u/diff")));
        assert_eq!(
            o.other,
            vec![
                ("index".into(), Some("off".into())),
                ("volatile".into(), None)
            ]
        );
        assert_eq!(
            common_dir(Path::new("/u/diff"), Path::new("/u/work")),
            Path::new("/u")
        );
        assert!(overlay_opts(&["lowerdir=l/ABC".into()]).is_err());
        assert!(overlay_opts(&["lowerdir=/a::/b".into()]).is_err());
    }
}
