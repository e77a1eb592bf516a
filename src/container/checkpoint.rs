//! `checkpoint` / `restore`: a native container saved to a CRIU image directory and run
//! again from one, through moat's CRIU helper (`linux/criu`). What this build does: the
//! requests with runc's flags (a flag moat does not apply is refused, naming it), the
//! image and work directories checked against the container's files, and CRIU's presence
//! and version proved through its RPC; the dump and the restore themselves are not wired
//! in yet, and say so.

use std::collections::HashSet;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
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
    #[error(
        "{0}: not implemented for a gVisor container (runsc's own checkpoint is not wired in yet)"
    )]
    Gvisor(&'static str),
    #[error("read the container's spec: {0}")]
    Spec(String),
    #[error("CRIU: {0}")]
    Criu(#[from] criu::CriuError),
    #[error("{op}: not implemented: {why} (CRIU {version} is usable here)")]
    NotImplemented {
        op: &'static str,
        why: &'static str,
        version: String,
    },
}

/// `moat checkpoint`.
pub fn checkpoint(_ctx: &Context, c: &Container, req: &CheckpointRequest) -> Result<i32> {
    if let Backend::Gvisor(_) = c.record.backend {
        return Err(CheckpointError::Gvisor("checkpoint").into());
    }
    match c.record.status(&c.dir) {
        Status::Running | Status::Paused => {}
        s => return Err(CheckpointError::State(s.as_str()).into()),
    }
    let spec = c
        .dir
        .load_spec()
        .map_err(|e| CheckpointError::Spec(e.to_string()))?;
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
    let version = criu::version(&criu::criu_path(req.criu.as_deref()))?;
    let _ = req.leave_running;
    Err(CheckpointError::NotImplemented {
        op: "checkpoint",
        why: "the dump through moat-criu is not wired in yet",
        version,
    }
    .into())
}

/// `moat restore`.
pub fn restore(ctx: &Context, req: &RestoreRequest) -> Result<i32> {
    // A container of that id already there: runc's refusal, before anything else.
    if crate::state::ContainerDir::open_read(&ctx.root, &req.id).is_ok() {
        return Err(anyhow::anyhow!("container with id exists: {}", req.id));
    }
    let spec = Spec::load(&req.bundle)?;
    let rootfs = spec
        .root
        .as_ref()
        .map(|r| req.bundle.join(&r.path))
        .unwrap_or_else(|| req.bundle.join("rootfs"));
    let owned = Owned::of(&req.bundle, &rootfs, &spec, None);
    owned.refuse("--image-path", &req.image_path)?;
    if let Some(w) = &req.work_path {
        owned.refuse("--work-path", w)?;
    }
    let version = criu::version(&criu::criu_path(req.criu.as_deref()))?;
    let _ = &req.pid_file;
    Err(CheckpointError::NotImplemented {
        op: "restore",
        why: "the restore through moat-criu is not wired in yet",
        version,
    }
    .into())
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
            let bind = m.typ.as_deref() == Some("bind")
                || m.options.iter().any(|o| o == "bind" || o == "rbind");
            if let (true, Some(src)) = (bind, &m.source) {
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
