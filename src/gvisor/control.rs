//! The network namespace runsc's control server lives in.
//!
//! runsc serves each sandbox's control server (`urpc`: exec as root with any
//! capability, signals, checkpoint, wait, ...) on a Unix socket that `runsc create`
//! binds before it starts the sandbox. runsc 20221219 binds the abstract name
//! `@runsc-sandbox.<id>`, which every process of the network namespace `runsc create`
//! runs in can connect to, whatever its uid: in the host's namespace, any host user and
//! every host-network container. runsc 20240729 binds a file, `<runsc root>/runsc-<id>.sock`
//! (under moat's 0700 root), and records its path in its state (`controlSocketPath`).
//!
//! So every runsc call for a gVisor container runs in a network namespace of its own,
//! which no other process enters: create makes it (a thread `unshare`s while create
//! goes on, [`unshare`], and the namespace is bind-mounted on
//! `<root>/<id>/control-netns`, [`CONTROL_NETNS`]), the record names the pin, and
//! `start`, `kill`, `exec`, `state`, `delete`, ... and a pod's waiters (`super::pod`)
//! open it and `setns` into it in the child that executes runsc
//! (moat itself stays where it is). An app container of a pod pins its sandbox's
//! namespace again under its own directory (its `runsc create` talks to the sandbox's
//! server), so the pod's containers can be deleted in any order. The pin is unmounted
//! when the state directory goes (`ContainerDir::remove`). The abstract name then
//! exists only in that namespace, where only root (through the pin, or `/proc/<pid>/ns`
//! of a root process) can enter.
//!
//! The sandbox's own network is unchanged: a spec with a network namespace path is
//! joined by runsc as before, a new namespace (`--network=none`) is the sandbox's own, and
//! a spec that shares the host's network (OPEN, or `host_namespaces = ["network"]`)
//! names moat's own network namespace for runsc ([`host_netns_path`]), since runsc
//! starts a host-network sandbox in the namespace it runs in.

use std::os::fd::{AsFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::linux::sys;
use crate::state::ContainerDir;

pub use crate::state::CONTROL_NETNS;

/// `NSFS_MAGIC`: the filesystem of `/proc/<pid>/ns/*` and of their bind mounts.
const NSFS_MAGIC: u64 = 0x6e73_6673;

fn cpath(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes()).with_context(|| format!("{}", p.display()))
}

/// Creates the empty file a namespace is mounted on and mounts the detached mount `tree`
/// (an nsfs file) there.
fn pin(dir: &ContainerDir, tree: OwnedFd) -> Result<PathBuf> {
    let path = dir.file(CONTROL_NETNS);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
        .with_context(|| format!("create {}", path.display()))?;
    let target = sys::openat(
        sys::at_fdcwd(),
        &cpath(&path)?,
        libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        0,
    )
    .with_context(|| format!("open {}", path.display()))?;
    sys::move_mount_fd(tree.as_fd(), target.as_fd())
        .with_context(|| format!("mount the control namespace on {}", path.display()))?;
    Ok(path)
}

/// A new network namespace being made by a thread of its own, so moat's threads stay in
/// their namespace. The kernel's setup of a namespace (its loopback device, its sysctl
/// tables) is most of a millisecond: [`unshare`] starts it first thing in create, and
/// [`Unshared::pin`] takes it once the state directory exists. Dropped unpinned (a create
/// that fails first), the namespace goes with the thread's descriptor.
pub struct Unshared(std::thread::JoinHandle<Result<OwnedFd>>);

/// The thread does two system calls: a small stack is enough.
const UNSHARE_STACK: usize = 64 * 1024;

pub fn unshare() -> Result<Unshared> {
    std::thread::Builder::new()
        .stack_size(UNSHARE_STACK)
        .spawn(|| -> Result<OwnedFd> {
            sys::unshare(libc::CLONE_NEWNET).context("unshare a network namespace")?;
            sys::open_tree(
                sys::at_fdcwd(),
                c"/proc/thread-self/ns/net",
                sys::OPEN_TREE_CLONE,
            )
            .context("open_tree /proc/thread-self/ns/net")
        })
        .map(Unshared)
        .context("start the thread making the control namespace")
}

impl Unshared {
    /// Pins the namespace at `<dir>/control-netns`; returns the pin's path.
    pub fn pin(self, dir: &ContainerDir) -> Result<PathBuf> {
        let tree = self
            .0
            .join()
            .unwrap_or_else(|_| bail!("the thread making the control namespace panicked"))?;
        pin(dir, tree)
    }
}

/// Pins the control namespace pinned at `from` (a pod sandbox's) again at
/// `<dir>/control-netns`.
pub fn share(dir: &ContainerDir, from: &Path) -> Result<PathBuf> {
    open(from)?;
    let tree = sys::open_tree(sys::at_fdcwd(), &cpath(from)?, sys::OPEN_TREE_CLONE)
        .with_context(|| format!("open_tree {}", from.display()))?;
    pin(dir, tree)
}

/// Opens a pinned control namespace for `setns`; refuses anything but a namespace file
/// (a pin whose mount is gone is an empty file).
pub fn open(path: &Path) -> Result<OwnedFd> {
    let f: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("open runsc's control namespace {}", path.display()))?
        .into();
    let st = sys::fstatfs(f.as_fd()).with_context(|| format!("fstatfs {}", path.display()))?;
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let f_type = st.f_type as u64;
    if f_type != NSFS_MAGIC {
        bail!(
            "{}: not a namespace (runsc's control namespace is no longer pinned); refused to \
             run runsc outside it",
            path.display()
        );
    }
    Ok(f)
}

/// For a spec that shares the host's network (no network namespace) under runsc's host
/// network: the namespace runsc must start the sandbox in, since it starts a host-network
/// sandbox in its own, which is now the control namespace. moat's own, by a path that
/// stays valid while create runs (moat waits for `runsc create`).
pub fn host_netns_path() -> String {
    format!("/proc/{}/ns/net", std::process::id())
}
