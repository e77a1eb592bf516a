//! sd_notify passthrough (`NOTIFY_SOCKET`): the container gets a socket of its own and
//! `start` tells the caller's socket (podman's `--sdnotify=container`, a systemd unit)
//! when the container is ready, so they see the container's readiness, not moat's.
//!
//! Nothing the container controls reaches the host through it:
//! * `create` binds the socket in the state directory, which the container never sees,
//!   with its mode fixed at bind time (umask), so nothing is ever chmod'ed by path. Only
//!   that socket file is bound into the container, read-only (`sendto` on a socket needs
//!   write permission on the inode, not a writable mount), at [`CONTAINER_PATH`]: no
//!   directory of the host is writable or even visible there.
//! * The socket stays open in the container's init (close-on-exec) from create to start,
//!   so datagrams sent early are queued, and `start` takes its own copy with
//!   `pidfd_getfd` before it releases the init (identified by the inode recorded at create).
//! * The relay forwards no datagram: on the first that carries `READY=1` it sends the
//!   caller exactly `READY=1` and `MAINPID=<the init's host pid>`, which moat knows; the
//!   container's `MAINPID`, `STATUS`, `FDSTORE`, … and any descriptors it attached are
//!   dropped (a plain `recv` never installs `SCM_RIGHTS` fds; the kernel closes them).
//!
//! `pidfd_getfd` on the non-dumpable init needs CAP_SYS_PTRACE over moat's own user
//! namespace (and Yama's `ptrace_scope` below 3). Without it (a rootless moat run by a
//! plain user), create falls back to runc's layout, minus its chmod: an empty directory
//! of the state directory is bound read-only at `/run/notify`, and `start` binds the
//! socket in it (mode again by umask; a bind never follows a planted symlink, it fails).
//! Such a moat can only harm what its user owns anyway.
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::sys;
use crate::spec::{Mount, Spec};
use crate::state::ContainerDir;

/// The socket's name in the state directory.
pub const SOCKET: &str = "notify.sock";
/// Where the container finds it (its `NOTIFY_SOCKET`), as runc puts it.
pub const CONTAINER_PATH: &str = "/run/notify/notify.sock";
/// `<fd number in the init> <sockfs inode>`, written at create for `start`.
const FD_FILE: &str = "notify.fd";
/// Connectable by any user the container runs as: sendto needs write permission.
const SOCKET_MODE: u32 = 0o666;

/// Directory mode's subdirectory of the state directory, bound at `/run/notify`.
const DIR: &str = "notify";

/// Planned before anything exists: whether the init keeps the container's socket
/// (`start` takes it with `pidfd_getfd`) or, without the right to, a directory is bound
/// instead; the bind mount and `NOTIFY_SOCKET` are added to the spec.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    take_from_init: bool,
}

impl Plan {
    /// Adds the bind mount of `dir` (the state directory, which does not exist yet) and
    /// `NOTIFY_SOCKET` to the spec. Returns the plan and the mount's source with whether
    /// it is a directory, for the rootfs plan (the source is made by [`prepare`]).
    pub fn new(spec: &mut Spec, dir: &Path) -> (Plan, (PathBuf, bool)) {
        let take_from_init = can_take_from_init();
        let mount = if take_from_init {
            (CONTAINER_PATH, dir.join(SOCKET))
        } else {
            let container_dir = CONTAINER_PATH.rsplit_once('/').expect("absolute").0;
            (container_dir, dir.join(DIR))
        };
        spec.mounts.push(Mount {
            destination: mount.0.into(),
            typ: Some("bind".into()),
            source: Some(mount.1.display().to_string()),
            options: ["bind", "ro", "nosuid", "nodev", "noexec"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        });
        if let Some(p) = spec.process.as_mut() {
            p.env.retain(|e| !e.starts_with("NOTIFY_SOCKET="));
            p.env.push(format!("NOTIFY_SOCKET={CONTAINER_PATH}"));
        }
        (Plan { take_from_init }, (mount.1, !take_from_init))
    }
}

/// At create: binds the container's socket planned by [`Plan::new`] and records it for
/// `start`. The caller keeps the socket open until the init exists (it inherits it),
/// then drops its own copy. `None` in directory mode. `first_free` is the lowest fd the
/// init does not pass on (3 + `--preserve-fds`): the socket lives above the preserved
/// range, so it can never be handed to the container.
pub fn prepare(
    plan: &Plan,
    dir: &ContainerDir,
    first_free: u32,
) -> io::Result<Option<UnixDatagram>> {
    if plan.take_from_init {
        let bound = bind(dir, SOCKET)?;
        let min = sys::FdNumber(first_free);
        let sock = UnixDatagram::from(sys::dup_cloexec_from(bound.as_fd(), min)?);
        drop(bound);
        let st = sys::fstat(sock.as_fd())?;
        dir.write_new(
            FD_FILE,
            format!("{} {}", sock.as_raw_fd(), st.st_ino).as_bytes(),
        )
        .map_err(io::Error::other)?;
        Ok(Some(sock))
    } else {
        let path = dir.file(DIR);
        std::fs::DirBuilder::new().create(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(None)
    }
}

/// Whether `start` will be allowed to `pidfd_getfd` from the (non-dumpable) init.
fn can_take_from_init() -> bool {
    const CAP_SYS_PTRACE: u32 = 19;
    let cap = sys::capget().is_ok_and(|(eff, _, _)| eff & (1 << CAP_SYS_PTRACE) != 0);
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope");
    cap && !yama.is_ok_and(|s| s.trim() == "3")
}

/// Binds a datagram socket at `name` under the state directory, mode [`SOCKET_MODE`].
fn bind(dir: &ContainerDir, name: &str) -> io::Result<UnixDatagram> {
    // Named through the state directory's fd: no lookup of the (possibly long) path,
    // whose length would otherwise be limited by sun_path.
    let path = format!("/proc/self/fd/{}/{name}", dir.fd().as_raw_fd());
    // The mode is set as the inode is created; moat is single-threaded here.
    let old = sys::umask(0o777 & !SOCKET_MODE);
    let bound = UnixDatagram::bind(&path);
    sys::umask(old);
    bound
}

/// At start, before the init is released: a copy of the socket the init holds.
/// In directory mode, a new socket in the directory the container sees.
pub fn take(dir: &ContainerDir, init_pid: i32) -> io::Result<UnixDatagram> {
    let bad = || io::Error::other(format!("{}: corrupt", dir.file(FD_FILE).display()));
    let Some(text) = dir.read_file(FD_FILE).map_err(io::Error::other)? else {
        return bind(dir, &format!("{DIR}/{SOCKET}"));
    };
    let text = String::from_utf8(text).map_err(|_| bad())?;
    let mut it = text.split(' ').map(str::parse::<u64>);
    let (Some(Ok(fd)), Some(Ok(ino)), None) = (it.next(), it.next(), it.next()) else {
        return Err(bad());
    };
    let pidfd = sys::pidfd_open(init_pid)?;
    let number = sys::FdNumber(u32::try_from(fd).map_err(|_| bad())?);
    let fd: OwnedFd = sys::pidfd_getfd(pidfd.as_fd(), number)?;
    let st = sys::fstat(fd.as_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK || st.st_ino != ino {
        return Err(io::Error::other(format!(
            "fd {} of pid {init_pid} is not the socket made at create",
            fd.as_raw_fd()
        )));
    }
    Ok(UnixDatagram::from(fd))
}

/// Waits for a datagram carrying `READY=1` (then tells the caller) or the init's exit.
pub fn relay(sock: &UnixDatagram, host: &str, init_pid: i32) -> io::Result<()> {
    let out = UnixDatagram::unbound()?;
    let pidfd = sys::pidfd_open(init_pid)?;
    let mut buf = vec![0u8; 4096];
    loop {
        let mut fds = [
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        if fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            let n = sock.recv(&mut buf)?;
            if is_ready(&buf[..n]) {
                return send(&out, host, ready_message(init_pid).as_bytes());
            }
        } else if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(());
        }
    }
}

/// sd_notify's format: newline-separated `KEY=VALUE` assignments.
fn is_ready(msg: &[u8]) -> bool {
    msg.split(|b| *b == b'\n').any(|l| l == b"READY=1")
}

/// What the caller receives: readiness, and the main pid as moat knows it.
fn ready_message(init_pid: i32) -> String {
    format!("READY=1\nMAINPID={init_pid}")
}

fn send(out: &UnixDatagram, host: &str, msg: &[u8]) -> io::Result<()> {
    if let Some(name) = host.strip_prefix('@') {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
        out.send_to_addr(msg, &addr).map(drop)
    } else {
        out.send_to(msg, host).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_ready_line_counts() {
        assert!(is_ready(b"MAINPID=1\nREADY=1\nSTATUS=x"));
        assert!(is_ready(b"READY=1"));
        assert!(!is_ready(b"READY=10"));
        assert!(!is_ready(b"STATUS=READY=1"));
        assert!(!is_ready(b"READY=0\nMAINPID=1"));
        assert_eq!(ready_message(42), "READY=1\nMAINPID=42");
    }
}
