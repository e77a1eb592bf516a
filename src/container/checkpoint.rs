//! `checkpoint` / `restore`: a native container saved to a CRIU image directory and run
//! again from one, through moat's CRIU helper (`linux/criu`, `moat-criu`); a gVisor
//! container through runsc's own (`gvisor::snapshot`), after the same checks of the
//! paths. runc's flags (one moat does not apply yet is refused, naming it); the image and
//! work directories refused where the container can write (its rootfs, its bind sources,
//! by device and inode); CRIU told to ignore cgroups: a restore gets the cgroups, limits and egress
//! programs moat's own plan makes for the bundle (as create's rows 2–6), never the image's.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{Container, Context, Result};
use crate::linux::{criu, sys};
use crate::spec::Spec;
use crate::state::{Backend, Status};

/// runc's `checkpoint` flags that moat applies.
#[derive(Debug, Clone)]
pub struct CheckpointRequest {
    pub id: String,
    /// `--image-path` (runc's default: `./checkpoint`), absolute.
    pub image_path: PathBuf,
    /// `--work-path`, absolute (CRIU's default: the image directory).
    pub work_path: Option<PathBuf>,
    pub leave_running: bool,
    /// `--criu`: the `criu` to run (else `criu` on `PATH`).
    pub criu: Option<String>,
}

/// runc's `restore` flags that moat applies.
#[derive(Debug, Clone)]
pub struct RestoreRequest {
    pub id: String,
    pub bundle: PathBuf,
    pub image_path: PathBuf,
    pub work_path: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub criu: Option<String>,
    /// `--console-socket`: where the restored terminal's pty master goes.
    pub console_socket: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A flag of runc's moat does not apply yet: refused rather than ignored.
    #[error("{flag}: not implemented: moat does not checkpoint or restore {what} yet")]
    Unsupported {
        flag: &'static str,
        what: &'static str,
    },
    /// A flag's value moat refuses, and why.
    #[error("{flag}: {why}")]
    Flag {
        flag: &'static str,
        why: &'static str,
    },
    /// runc's text.
    #[error("Container cannot be checkpointed in {0} state")]
    State(&'static str),
    /// CRIU writes (and restore reads) the images as root on the host: a directory the
    /// container can write would let it forge them.
    #[error("{flag} {}: inside {what} {} (a directory the container can write)", path.display(), inside.display())]
    Inside {
        flag: &'static str,
        path: PathBuf,
        what: &'static str,
        inside: PathBuf,
    },
    #[error("{flag} {}: {err}", path.display())]
    Path {
        flag: &'static str,
        path: PathBuf,
        err: std::io::Error,
    },
    #[error("read the container's spec: {0}")]
    Spec(String),
    #[error("CRIU: {0}")]
    Criu(#[from] criu::CriuError),
    /// The mount table a checkpoint recorded for an image directory (the restore compares
    /// the restored one with it; the image's own list is what is checked).
    #[error(
        "--image-path {}: no record of a checkpoint into this directory on this host ({why}): \
         moat restores only images its own checkpoint wrote here, whose mount table it recorded",
        path.display()
    )]
    NoRecord { path: PathBuf, why: String },
    #[error("record the checkpoint's mount table: {0}")]
    Record(String),
}

/// `--criu` names the CRIU of a native container's checkpoint and restore.
const NOT_CRIU: CheckpointError = CheckpointError::Flag {
    flag: "--criu",
    why: "a gVisor container is checkpointed and restored by runsc, not CRIU",
};

/// Where a checkpoint's record is kept: under moat's root (never in the image directory,
/// which whoever can write there could rewrite), by the image directory's device and
/// inode; `kind` tells a native checkpoint's (`json`, its mount table) from a gVisor one's
/// (`gvisor.json`, `gvisor::snapshot`).
pub(crate) fn record_path(
    root: &Path,
    images: &Path,
    kind: &str,
) -> std::result::Result<PathBuf, std::io::Error> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(images)?;
    Ok(root
        .join("@checkpoints")
        .join(format!("{:x}-{}.{kind}", m.dev(), m.ino())))
}

fn save_mount_table(
    root: &Path,
    images: &Path,
    table: &[criu::wire::MountEntry],
) -> std::result::Result<(), CheckpointError> {
    let path =
        record_path(root, images, "json").map_err(|e| CheckpointError::Record(e.to_string()))?;
    let (dir, name) = (
        path.parent().expect("a directory"),
        path.file_name().expect("a name"),
    );
    let json = serde_json::to_vec(table).expect("a mount table serialises");
    crate::state::write_cache_file(dir, &name.to_string_lossy(), &json)
        .map_err(|e| CheckpointError::Record(format!("{}: {e}", path.display())))
}

fn load_mount_table(
    root: &Path,
    images: &Path,
) -> std::result::Result<Vec<criu::wire::MountEntry>, CheckpointError> {
    let no = |why: String| CheckpointError::NoRecord {
        path: images.to_path_buf(),
        why,
    };
    let path = record_path(root, images, "json").map_err(|e| no(e.to_string()))?;
    let bytes = std::fs::read(&path).map_err(|e| no(format!("{}: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| no(format!("{}: {e}", path.display())))
}

/// The mount points whose source a restore gives (`Expect::given`): the rootfs and the
/// external mounts.
fn given_points(ext_mnt: &[(String, String)]) -> Vec<String> {
    std::iter::once("/".to_string())
        .chain(ext_mnt.iter().map(|(k, _)| k.clone()))
        .collect()
}

/// `moat checkpoint`.
pub fn checkpoint(ctx: &Context, c: Container, req: &CheckpointRequest) -> Result<i32> {
    let status = match &c.record.backend {
        Backend::Gvisor(gv) => {
            if req.criu.is_some() {
                return Err(NOT_CRIU.into());
            }
            crate::container::Engine::status(gv, ctx, &c)?.0
        }
        Backend::Native => c.record.status(&c.dir),
    };
    match status {
        Status::Running | Status::Paused => {}
        s => return Err(CheckpointError::State(s.as_str()).into()),
    }
    let spec = c
        .dir
        .load_spec()
        .map_err(|e| CheckpointError::Spec(e.to_string()))?;
    criu_config(&spec)?;
    let owned = Owned::of(
        &c.record.bundle,
        &c.record.rootfs,
        &spec,
        Some(c.record.pid),
    );
    owned.refuse("--image-path", &req.image_path)?;
    if let Some(w) = &req.work_path {
        owned.refuse("--work-path", w)?;
    }
    let image_path = made("--image-path", &req.image_path)?;
    let work_path = match &req.work_path {
        Some(w) => Some(made("--work-path", w)?),
        None => None,
    };
    // Checked again once made: what exists now is what CRIU writes into.
    owned.refuse("--image-path", &image_path)?;
    if let Some(w) = &work_path {
        owned.refuse("--work-path", w)?;
    }
    if let Backend::Gvisor(gv) = &c.record.backend {
        crate::gvisor::snapshot::checkpoint(
            ctx,
            &req.id,
            gv,
            &c.dir.file(crate::state::SPEC_FILE),
            &image_path,
            work_path.as_deref(),
            req.leave_running,
        )?;
        return ended(ctx, c, req);
    }
    // Every bind mount of the spec is the host's, not the container's: dumped as
    // external, by its destination (the name a restore maps back to a source).
    let mut ext_mnt: Vec<(String, String)> = spec
        .mounts
        .iter()
        .filter(|m| is_bind(m))
        .map(|m| (m.destination.clone(), m.destination.clone()))
        .collect();
    // So is the container's view of its cgroups (binds of its own cgroup directories,
    // without a cgroup namespace): a restore binds the new cgroup's directories there.
    for mp in cgroup_mounts(c.record.pid)? {
        ext_mnt.push((mp.clone(), mp));
    }
    let external = external_namespaces(c.record.pid, &spec)?;
    record_stdio(c.record.pid, &image_path)?;
    let mountinfo = std::fs::read_to_string(format!("/proc/{}/mountinfo", c.record.pid))
        .map_err(|e| CheckpointError::Record(format!("the init's mountinfo: {e}")))?;
    let table = criu::wire::mount_table(&mountinfo, &given_points(&ext_mnt));
    let image_dir = image_path.clone();
    crate::linux::killpoint::at("checkpoint", "parent", "Dump");
    criu::dump(criu::wire::Dump {
        criu: criu::criu_path(req.criu.as_deref()),
        pid: c.record.pid,
        images_dir: image_path,
        work_dir: work_path,
        root: c.record.rootfs.clone(),
        leave_running: req.leave_running,
        ext_mnt,
        external,
        terminal: spec.process.as_ref().is_some_and(|p| p.terminal),
    })?;
    crate::linux::killpoint::at("checkpoint", "parent", "Record");
    save_mount_table(&ctx.root, &image_dir, &table)?;
    ended(ctx, c, req)
}

/// After the dump: without --leave-running, runc's rule, the container is gone (its
/// processes ended by the checkpointer); its state, cgroups and shares go with it.
fn ended(ctx: &Context, c: Container, req: &CheckpointRequest) -> Result<i32> {
    crate::linux::killpoint::at("checkpoint", "parent", "Delete");
    if req.leave_running {
        return Ok(0);
    }
    drop(c);
    super::delete::delete(
        ctx,
        &super::delete::Request {
            id: req.id.clone(),
            force: true,
        },
    )?;
    Ok(0)
}

/// The spec's type of the namespace `/proc/<pid>/ns/NAME` names, and its `CLONE_NEW*`.
fn ns_kind(name: &str) -> Option<(&'static str, libc::c_int)> {
    match name {
        "net" => Some(("network", libc::CLONE_NEWNET)),
        _ => None,
    }
}

/// The namespaces the spec joins by path (`linux.namespaces[].path`) that CRIU can leave
/// out of the image (`NAME[INODE]:KEY`, the inode the init's own): a restore puts the tree
/// back into the namespace its spec joins, as runc's does, rather than a new one.
fn external_namespaces(pid: i32, spec: &Spec) -> std::result::Result<Vec<String>, CheckpointError> {
    let Some(linux) = spec.linux.as_ref() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for name in criu::EXTERNAL_NS {
        let Some((typ, _)) = ns_kind(name) else {
            continue;
        };
        if !linux
            .namespaces
            .iter()
            .any(|n| n.typ == typ && n.path.is_some())
        {
            continue;
        }
        let path = PathBuf::from(format!("/proc/{pid}/ns/{name}"));
        let c = CString::new(path.as_os_str().as_bytes()).expect("no NUL");
        let st = sys::stat(&c).map_err(|err| CheckpointError::Path {
            flag: "the container's namespaces",
            path: path.clone(),
            err,
        })?;
        out.push(format!(
            "{name}[{}]:{}",
            st.st_ino,
            criu::external_ns_key(name)
        ));
    }
    Ok(out)
}

/// For each namespace CRIU can take from outside that the restoring spec joins by path, a
/// copy of moat's descriptor of it, inheritable, under the key an image names it by (an
/// image that did not leave it out ignores it, and the pre-resume comparison then refuses
/// the new one CRIU made).
fn inherited_namespaces(plan: &crate::linux::create::Plan) -> Vec<(OwnedFd, String)> {
    criu::EXTERNAL_NS
        .iter()
        .filter_map(|name| {
            let (_, flag) = ns_kind(name)?;
            let own = plan.joined_ns(flag)?.try_clone_to_owned().ok()?;
            nix::fcntl::fcntl(
                own.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .ok()?;
            Some((own, criu::external_ns_key(name)))
        })
        .collect()
}

/// The mount points of cgroup file systems in the init's mount namespace.
fn cgroup_mounts(pid: i32) -> std::result::Result<Vec<String>, CheckpointError> {
    let path = PathBuf::from(format!("/proc/{pid}/mountinfo"));
    let text = std::fs::read_to_string(&path).map_err(|err| CheckpointError::Path {
        flag: "the container's mounts",
        path: path.clone(),
        err,
    })?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let fstype = right.split(' ').next()?;
            let mp = left.split(' ').nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| mp.to_string())
        })
        .collect())
}

fn is_bind(m: &crate::spec::Mount) -> bool {
    m.typ.as_deref() == Some("bind") || m.options.iter().any(|o| o == "bind" || o == "rbind")
}

/// `path` made (with its parents, mode 0700, as runc makes it) and returned.
fn made(flag: &'static str, path: &Path) -> std::result::Result<PathBuf, CheckpointError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|err| CheckpointError::Path {
            flag,
            path: path.to_path_buf(),
            err,
        })?;
    Ok(path.to_path_buf())
}

/// `moat restore`: the bundle planned as create plans it (policy, cgroups, record), then
/// the image restored by CRIU into the cgroups just made; mounts the dump named external
/// bound from the spec's sources and the new cgroup's directories.
pub fn restore(ctx: &Context, req: &RestoreRequest) -> Result<i32> {
    crate::state::validate_id(&req.id)?;
    let gvisor = crate::gvisor::select(&req.bundle)?;
    let mut spec = Spec::load(&req.bundle)?;
    let rootfs = spec
        .root
        .as_ref()
        .map(|r| req.bundle.join(&r.path))
        .unwrap_or_else(|| req.bundle.join("rootfs"));
    criu_config(&spec)?;
    let owned = Owned::of(&req.bundle, &rootfs, &spec, None);
    owned.refuse("--image-path", &req.image_path)?;
    if let Some(w) = &req.work_path {
        owned.refuse("--work-path", w)?;
    }
    for m in spec.mounts.iter().filter(|m| is_bind(m)) {
        if let Some(src) = &m.source {
            owned.refuse_source(&req.bundle.join(src))?;
        }
    }
    let terminal = spec.process.as_ref().is_some_and(|p| p.terminal);
    match (terminal, &req.console_socket) {
        (true, None) => {
            return Err(CheckpointError::Flag {
                flag: "--console-socket",
                why: "needed to restore a container with a terminal (process.terminal): it gets the pty's master",
            }
            .into())
        }
        (false, Some(_)) => {
            return Err(CheckpointError::Flag {
                flag: "--console-socket",
                why: "given for a container without a terminal (process.terminal is false)",
            }
            .into())
        }
        _ => {}
    }
    // Run by create only (CRIU restores a tree past them); poststop is recorded and runs
    // at delete as for a created container.
    if let Some(h) = &spec.hooks {
        let unrun = [
            ("hooks.prestart", &h.prestart),
            ("hooks.createRuntime", &h.create_runtime),
            ("hooks.createContainer", &h.create_container),
            ("hooks.startContainer", &h.start_container),
            ("hooks.poststart", &h.poststart),
        ];
        if let Some((flag, _)) = unrun.iter().find(|(_, v)| !v.is_empty()) {
            return Err(CheckpointError::Unsupported {
                flag,
                what: "a container with hooks that run at create or start",
            }
            .into());
        }
    }
    if let Some(sel) = gvisor {
        if req.criu.is_some() {
            return Err(NOT_CRIU.into());
        }
        let r = crate::gvisor::snapshot::Restore {
            id: &req.id,
            annotations: &spec.annotations,
            bundle: &req.bundle,
            images: &req.image_path,
            work: req.work_path.as_deref(),
            pid_file: req.pid_file.as_deref(),
            console_socket: req.console_socket.as_deref(),
        };
        return crate::gvisor::snapshot::restore(ctx, &r, sel);
    }
    if ctx.systemd_cgroup || ctx.rootless() {
        return Err(CheckpointError::Unsupported {
            flag: if ctx.systemd_cgroup {
                "--systemd-cgroup"
            } else {
                "rootless"
            },
            what: "such a container",
        }
        .into());
    }
    let recorded = load_mount_table(&ctx.root, &req.image_path)?;
    // Connected before anything is made: the restored terminal's master goes there.
    let console = match &req.console_socket {
        Some(path) => Some(console_connection(path)?),
        None => None,
    };
    let cfg = crate::policy::Config::load()?;
    let decided = super::policy::decide(&mut spec, &cfg, &req.id, false)?;
    let opts = crate::linux::create::Options {
        id: req.id.clone(),
        bundle: req.bundle.clone(),
        // The plan's check that a terminal has somewhere to go; the restore's pty is
        // CRIU's, its master sent by the helper (never the create path's own console).
        console_socket: req.console_socket.clone(),
        pidfd_socket: None,
        pid_file: req.pid_file.clone(),
        no_pivot: false,
        new_keyring: true,
        preserve_fds: 0,
        listen_fds: 0,
        systemd_cgroup: false,
        foreground: false,
        rootless: false,
        root: ctx.root.clone(),
        notify_socket: None,
    };
    let plan = crate::linux::create::Plan::new(spec, &cfg, decided, opts)?;
    if plan.for_restore().2 {
        return Err(CheckpointError::Unsupported {
            flag: "moat.egress",
            what: "an egress list that names domains (its DNS forwarder)",
        }
        .into());
    }
    let criu = criu::criu_path(req.criu.as_deref());
    let bundle = req.bundle.clone();
    let (images_dir, work_dir) = (req.image_path.clone(), req.work_path.clone());
    crate::linux::create::restore(plan, |plan, cgroup| {
        let (spec, rootfs, _) = plan.for_restore();
        let cgroupns = spec.linux.as_ref().is_some_and(|l| {
            l.namespaces
                .iter()
                .any(|n| n.typ == "cgroup" && n.path.is_none())
        });
        let mut ext_mnt: Vec<(String, String)> = spec
            .mounts
            .iter()
            .filter(|m| is_bind(m))
            .filter_map(|m| {
                let src = bundle.join(m.source.as_ref()?);
                Some((m.destination.clone(), src.display().to_string()))
            })
            .collect();
        // Made before CRIU runs, as runc makes them: a bind under one of the spec's tmpfs
        // mounts gets its mount point from the tmpfs's restored content.
        let tmpfs: Vec<&str> = spec
            .mounts
            .iter()
            .filter(|m| m.typ.as_deref() == Some("tmpfs"))
            .map(|m| m.destination.trim_end_matches('/'))
            .collect();
        let binds: Vec<(String, String)> = ext_mnt
            .iter()
            .filter(|(dest, _)| {
                !tmpfs
                    .iter()
                    .any(|t| dest.strip_prefix(t).is_some_and(|r| r.starts_with('/')))
            })
            .cloned()
            .collect();
        let cg_dest = spec
            .mounts
            .iter()
            .find(|m| m.typ.as_deref() == Some("cgroup") || m.typ.as_deref() == Some("cgroup2"))
            .map(|m| m.destination.clone());
        if let Some(dest) = cg_dest {
            for s in cgroup.mount_sources() {
                let key = if s.name.is_empty() {
                    dest.clone()
                } else {
                    format!("{}/{}", dest.trim_end_matches('/'), s.name)
                };
                ext_mnt.push((key, s.host_dir.display().to_string()));
            }
        }
        let mut expect = plan.restore_expect(cgroup);
        expect.given = given_points(&ext_mnt);
        expect.mounts = recorded.clone();
        // The container's stdio as the dump recorded it: a pipe is given the caller's
        // descriptor of the same number (as runc does), through a copy that moat-criu and
        // CRIU inherit; closed here once the restore is over.
        let mut stdio = inherited_stdio(&images_dir);
        stdio.extend(inherited_namespaces(plan));
        let inherit_fd = stdio
            .iter()
            .map(|(fd, key)| (fd.as_raw_fd(), key.clone()))
            .collect();
        let restored = criu::restore(
            criu::wire::Restore {
                criu: criu.clone(),
                images_dir: images_dir.clone(),
                work_dir: work_dir.clone(),
                root: rootfs.to_path_buf(),
                ext_mnt,
                cgroupns,
                expect,
                inherit_fd,
                console_fd: console.as_ref().map(|c| c.as_raw_fd()),
                binds,
            },
            |pid| {
                cgroup
                    .add_pid(pid)
                    .map_err(|e| format!("place moat-criu: {e}"))?;
                // The helper placed, its request not sent yet.
                crate::linux::killpoint::at("restore", "parent", "Criu");
                Ok(())
            },
        )
        .map_err(|e| crate::linux::create::Error::Restore(e.to_string()));
        drop(stdio);
        restored
    })?;
    Ok(0)
}

/// runc's `org.criu.config` annotation (a CRIU configuration file for the dump and the
/// restore): refused rather than ignored; empty (runc's "no file") is what moat does.
fn criu_config(spec: &Spec) -> std::result::Result<(), CheckpointError> {
    match spec.annotations.get("org.criu.config") {
        Some(v) if !v.is_empty() => Err(CheckpointError::Unsupported {
            flag: "annotation org.criu.config",
            what: "a container with a CRIU configuration file",
        }),
        _ => Ok(()),
    }
}

/// `--console-socket`, connected, inheritable by the helper (no close-on-exec).
fn console_connection(path: &Path) -> std::result::Result<OwnedFd, CheckpointError> {
    let err = |err: std::io::Error| CheckpointError::Path {
        flag: "--console-socket",
        path: path.to_path_buf(),
        err,
    };
    let s = std::os::unix::net::UnixStream::connect(path).map_err(err)?;
    let fd = OwnedFd::from(s);
    nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(|e| err(e.into()))?;
    Ok(fd)
}

/// The file in an image directory naming the container's stdio at the dump (runc's name
/// and form: a JSON array of three `readlink`s of `/proc/<init>/fd/0..2`).
const DESCRIPTORS: &str = "descriptors.json";

/// Records the init's stdio in the image directory, for [`inherited_stdio`].
fn record_stdio(pid: i32, images: &Path) -> std::result::Result<(), CheckpointError> {
    let links: Vec<String> = (0..3)
        .map(|fd| {
            std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        })
        .collect();
    let path = images.join(DESCRIPTORS);
    std::fs::write(&path, serde_json::to_vec(&links).expect("serialises")).map_err(|err| {
        CheckpointError::Path {
            flag: "--image-path",
            path,
            err,
        }
    })
}

/// For each of the dump's stdio that was a pipe (`pipe:[N]`, the key CRIU names it by), a
/// copy of moat's own descriptor of that number, inheritable (no close-on-exec). An image
/// without the record, or an entry of another form, maps nothing: CRIU then restores that
/// descriptor from the image as it would any other.
fn inherited_stdio(images: &Path) -> Vec<(OwnedFd, String)> {
    let Ok(text) = std::fs::read(images.join(DESCRIPTORS)) else {
        return Vec::new();
    };
    let Ok(links) = serde_json::from_slice::<Vec<String>>(&text) else {
        return Vec::new();
    };
    links
        .iter()
        .take(3)
        .enumerate()
        .filter(|(_, l)| {
            l.strip_prefix("pipe:[")
                .and_then(|r| r.strip_suffix(']'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|(i, l)| {
            let own = match i {
                0 => std::io::stdin().as_fd().try_clone_to_owned(),
                1 => std::io::stdout().as_fd().try_clone_to_owned(),
                _ => std::io::stderr().as_fd().try_clone_to_owned(),
            }
            .ok()?;
            nix::fcntl::fcntl(
                own.as_raw_fd(),
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .ok()?;
            Some((own, l.clone()))
        })
        .collect()
}

/// The directories a container can write, by device and inode: its rootfs (and the root
/// its init has now) and every bind source of its spec.
struct Owned {
    dirs: Vec<((u64, u64), &'static str, PathBuf)>,
}

impl Owned {
    fn of(bundle: &Path, rootfs: &Path, spec: &Spec, pid: Option<i32>) -> Owned {
        let mut dirs = Vec::new();
        let mut add = |what: &'static str, p: PathBuf| {
            if let Some(id) = stat_id(&p) {
                dirs.push((id, what, p));
            }
        };
        add("the container's rootfs", rootfs.to_path_buf());
        if let Some(pid) = pid {
            add(
                "the container's root",
                PathBuf::from(format!("/proc/{pid}/root")),
            );
        }
        for m in &spec.mounts {
            if let (true, Some(src)) = (is_bind(m), &m.source) {
                add("the bind source", bundle.join(src));
            }
        }
        Owned { dirs }
    }

    /// Refuses `path` when it, or any directory above it, is one of the container's: the
    /// nearest existing directory of `path` is opened and walked up by `..` to `/`.
    fn refuse(&self, flag: &'static str, path: &Path) -> std::result::Result<(), CheckpointError> {
        let ups = ancestors(path).map_err(|err| CheckpointError::Path {
            flag,
            path: path.to_path_buf(),
            err,
        })?;
        for (id, what, dir) in &self.dirs {
            if ups.contains(id) {
                return Err(CheckpointError::Inside {
                    flag,
                    path: path.to_path_buf(),
                    what,
                    inside: dir.clone(),
                });
            }
        }
        Ok(())
    }

    /// Refuses a bind `source` whose path passes through one of the container's
    /// directories (its rootfs, another bind source) before its last component: the
    /// container could have put a symlink there, and CRIU binds the source by path, as
    /// root. Walked from `/` down, one component at a time, each directory checked before
    /// the next component is looked up in it: what is looked up was never the container's.
    fn refuse_source(&self, source: &Path) -> std::result::Result<(), CheckpointError> {
        let err = |err: std::io::Error| CheckpointError::Path {
            flag: "mounts[].source",
            path: source.to_path_buf(),
            err,
        };
        let flags = libc::O_PATH | libc::O_CLOEXEC;
        let mut cur =
            sys::openat(sys::at_fdcwd(), c"/", flags | libc::O_DIRECTORY, 0).map_err(err)?;
        let mut comps = source.components().skip(1).peekable();
        while let Some(comp) = comps.next() {
            let st = sys::fstat(cur.as_fd()).map_err(err)?;
            let id = (st.st_dev, st.st_ino);
            if let Some((_, what, dir)) = self.dirs.iter().find(|(d, _, _)| *d == id) {
                return Err(CheckpointError::Inside {
                    flag: "mounts[].source",
                    path: source.to_path_buf(),
                    what,
                    inside: dir.clone(),
                });
            }
            if comps.peek().is_none() {
                break;
            }
            let name = CString::new(comp.as_os_str().as_bytes())
                .map_err(|_| err(std::io::Error::from_raw_os_error(libc::EINVAL)))?;
            cur = sys::openat(cur.as_fd(), &name, flags, 0).map_err(err)?;
        }
        Ok(())
    }
}

fn stat_id(p: &Path) -> Option<(u64, u64)> {
    let c = CString::new(p.as_os_str().as_bytes()).ok()?;
    let st = sys::stat(&c).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// The (device, inode) of the nearest existing directory at or above `path` and of every
/// directory above that, up to `/`.
fn ancestors(path: &Path) -> std::io::Result<HashSet<(u64, u64)>> {
    let mut p = path;
    let fd: OwnedFd = loop {
        let c = CString::new(p.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        match sys::openat(
            sys::at_fdcwd(),
            &c,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        ) {
            Ok(fd) => break fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => match p.parent() {
                Some(up) if !up.as_os_str().is_empty() => p = up,
                _ => return Err(e),
            },
            Err(e) => return Err(e),
        }
    };
    let mut seen = HashSet::new();
    let mut cur = fd;
    loop {
        let st = sys::fstat(cur.as_fd())?;
        if !seen.insert((st.st_dev, st.st_ino)) {
            return Ok(seen);
        }
        cur = sys::openat(
            cur.as_fd(),
            c"..",
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )?;
    }
}
