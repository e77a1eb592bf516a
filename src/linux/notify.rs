//! sd_notify passthrough (`NOTIFY_SOCKET`), as runc does it: the container gets its own
//! socket (a directory of the state dir bind-mounted at `/run/notify`), and `start` relays
//! what the container sends to the caller's socket until `READY=1`, so `podman run
//! --sdnotify=container` and systemd units see the container's readiness, not moat's.

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::sys;
use crate::spec::{Mount, Spec};

pub const STATE_DIR: &str = "notify";
pub const CONTAINER_DIR: &str = "/run/notify";
const SOCKET: &str = "notify.sock";

/// Adds the socket directory mount and the container's `NOTIFY_SOCKET` to the spec.
pub fn prepare(spec: &mut Spec, state_dir: &Path) -> std::io::Result<()> {
    let dir = state_dir.join(STATE_DIR);
    std::fs::create_dir(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
    spec.mounts.push(Mount {
        destination: CONTAINER_DIR.into(),
        typ: Some("bind".into()),
        source: Some(dir.display().to_string()),
        options: vec![
            "bind".into(),
            "nosuid".into(),
            "nodev".into(),
            "noexec".into(),
        ],
        ..Default::default()
    });
    if let Some(p) = spec.process.as_mut() {
        p.env.retain(|e| !e.starts_with("NOTIFY_SOCKET="));
        p.env
            .push(format!("NOTIFY_SOCKET={CONTAINER_DIR}/{SOCKET}"));
    }
    Ok(())
}

/// Binds the container-side socket; call before the container is released.
pub fn bind(state_dir: &Path) -> std::io::Result<UnixDatagram> {
    let path = state_dir.join(STATE_DIR).join(SOCKET);
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path)?;
    // The container process may run as any user.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
    Ok(sock)
}

/// Relays datagrams to the caller's socket until one carries `READY=1` or the init exits.
pub fn relay(sock: &UnixDatagram, host: &str, init_pid: i32) -> std::io::Result<()> {
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
            let msg = &buf[..n];
            send(&out, host, msg)?;
            if msg.split(|b| *b == b'\n').any(|l| l == b"READY=1") {
                return Ok(());
            }
        } else if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(());
        }
    }
}

fn send(out: &UnixDatagram, host: &str, msg: &[u8]) -> std::io::Result<()> {
    if let Some(name) = host.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        out.send_to_addr(msg, &addr).map(drop)
    } else {
        out.send_to(msg, host).map(drop)
    }
}
