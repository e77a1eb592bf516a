//! `process.terminal`: a pty allocated from the container's own devpts instance, its master
//! sent to the caller over `--console-socket` (SCM_RIGHTS, as runc does), its peer made the
//! container's stdio and `/dev/console`.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use super::mount;
use super::path::{self, Root};
use super::rootfs::Mounts;
use super::sync::{InitFailure, Step, StepExt};
use super::sys;
use crate::spec::ConsoleSize;

const DEVPTS_SUPER_MAGIC: u64 = 0x1cd1;

/// Opens `/dev/pts/ptmx` below the root without following any symlink (`moat exec`, in a
/// running container), checks it really is a devpts ptmx (a host device would fail here),
/// and returns (master, peer).
pub fn open_pty(root: &Root) -> Result<(OwnedFd, OwnedFd), InitFailure> {
    let master = path::open_beneath(
        root.fd(),
        &["dev", "pts", "ptmx"],
        libc::O_RDWR | libc::O_NOCTTY,
        false,
    )
    .step(Step::Console, || "/dev/pts/ptmx".into())?;
    pty_from(master)
}

/// The container init's pty: from the devpts moat mounted at `/dev/pts` (its `ptmx`, by
/// the mount's own fd), else `/dev/pts/ptmx` as a name moat resolves itself.
pub fn open_pty_in(mounts: &Mounts) -> Result<(OwnedFd, OwnedFd), InitFailure> {
    let flags = libc::O_RDWR | libc::O_NOCTTY;
    let master = match mounts.devpts() {
        Some(pts) => path::open_beneath(pts, &["ptmx"], flags, true),
        None => mounts.open_moat("/dev/pts/ptmx", flags),
    }
    .step(Step::Console, || "/dev/pts/ptmx".into())?;
    pty_from(master)
}

fn pty_from(master: OwnedFd) -> Result<(OwnedFd, OwnedFd), InitFailure> {
    let what = || "/dev/pts/ptmx".to_string();
    let fs = sys::fstatfs(master.as_fd()).step(Step::Console, what)?;
    let st = sys::fstat(master.as_fd()).step(Step::Console, what)?;
    // f_type is i64 under glibc (the fuzz targets' build), unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let f_type = fs.f_type as u64;
    if f_type != DEVPTS_SUPER_MAGIC || st.st_rdev != libc::makedev(5, 2) {
        return Err(InitFailure::new(
            Step::Console,
            "/dev/pts/ptmx is not a devpts ptmx (is /dev/pts mounted?)",
        ));
    }
    sys::unlockpt(master.as_fd()).step(Step::Console, || "unlockpt".into())?;
    let peer = sys::pty_peer(master.as_fd())
        .step(Step::Console, || "open pty peer (TIOCGPTPEER)".into())?;
    Ok((master, peer))
}

/// Gives the pty peer to the process's user (`process.user.uid`), as runc does, so that
/// it can reopen its own terminal: called with the peer held, before the uid switch. The
/// group stays devpts' (`gid=5`: the tty group in the default spec, which runc keeps too).
/// Where the kernel refuses (the uid or the peer's owner not mapped in the user namespace,
/// a read-only devpts) the peer stays root's, as runc leaves it; the process still gets it
/// as stdio.
pub fn give_to_user(peer: BorrowedFd<'_>, uid: u32) -> Result<(), InitFailure> {
    match sys::set_pty_owner(peer, uid) {
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::EPERM | libc::EROFS)
            ) =>
        {
            Ok(())
        }
        r => r.step(Step::Console, || format!("chown the pty to uid {uid}")),
    }
}

/// Bind-mounts the pty peer onto /dev/console (by fd: no /dev/pts/N path is looked up; the
/// target made relative to the held `/dev`).
pub fn mount_console(mounts: &mut Mounts, peer: BorrowedFd<'_>) -> Result<(), InitFailure> {
    let target = mounts
        .mkfile_moat("/dev/console", 0o600)
        .step(Step::Console, || "/dev/console".into())?;
    let tree =
        mount::clone_tree(peer, "", false).step(Step::Console, || "clone pty peer".into())?;
    mount::attach(tree.as_fd(), target.as_fd()).step(Step::Console, || "/dev/console".into())?;
    mounts
        .pin(&["dev", "console"], tree, false)
        .step(Step::Console, || "/dev/console".into())
}

/// Sends the master to the console socket, after setting the size and (`clear_onlcr`:
/// moat relays it to a file or pipe) clearing `ONLCR`: before the program runs, so none of
/// its output is translated.
pub fn send_master(
    sock: BorrowedFd<'_>,
    master: BorrowedFd<'_>,
    size: Option<ConsoleSize>,
    clear_onlcr: bool,
) -> Result<(), InitFailure> {
    if clear_onlcr {
        sys::clear_onlcr(master).step(Step::Console, || "clear ONLCR on the pty".into())?;
    }
    if let Some(s) = size {
        sys::set_winsize(master, s.height, s.width)
            .step(Step::Console, || "set console size".into())?;
    }
    sys::send_with_fd(sock, b"/dev/ptmx", master).step(Step::Console, || {
        "send pty master to the console socket".into()
    })?;
    Ok(())
}

/// Makes the peer the controlling terminal and stdio of the init (after setsid).
pub fn make_stdio(peer: &OwnedFd) -> Result<(), InitFailure> {
    sys::setsid().step(Step::Console, || "setsid".into())?;
    sys::ioctl_int(peer.as_fd(), libc::TIOCSCTTY as libc::Ioctl, 0)
        .step(Step::Console, || "TIOCSCTTY".into())?;
    for target in 0..3 {
        sys::dup2(peer.as_fd(), sys::FdNumber(target))
            .step(Step::Console, || format!("dup2 pty to fd {target}"))?;
    }
    Ok(())
}

/// Copies what is available on `from` to `to`; false on EOF or error (nothing to read).
pub fn pump(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 8192];
    match nix::unistd::read(from.as_raw_fd(), &mut buf) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            let mut off = 0;
            while off < n {
                match nix::unistd::write(to, &buf[off..n]) {
                    Ok(w) => off += w,
                    Err(nix::Error::EINTR) => {}
                    Err(_) => return false,
                }
            }
            true
        }
    }
}

pub fn copy_winsize(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    if let Ok((rows, cols)) = sys::get_winsize(from) {
        let _ = sys::set_winsize(to, rows, cols);
    }
}

/// The caller's terminal in raw mode for as long as this lives.
pub struct RawMode {
    fd: sys::FdNumber,
    saved: nix::sys::termios::Termios,
}

impl RawMode {
    pub fn enter(fd: BorrowedFd<'_>) -> Option<RawMode> {
        let number = sys::FdNumber::of(fd)?;
        let saved = nix::sys::termios::tcgetattr(fd).ok()?;
        let mut raw = saved.clone();
        nix::sys::termios::cfmakeraw(&mut raw);
        nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { fd: number, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let fd = sys::borrow_stdio(self.fd);
        let _ = nix::sys::termios::tcsetattr(fd, nix::sys::termios::SetArg::TCSANOW, &self.saved);
    }
}
