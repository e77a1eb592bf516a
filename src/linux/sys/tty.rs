//! Terminals: the peer of a pty master, unlocking it, window sizes.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{check_int, ioctl_int, owned, Result};

pub fn set_winsize(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> Result<()> {
    fake!("set_winsize", fd, rows, cols);
    let ws = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize struct.
    check_int(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCSWINSZ,
            &ws as *const libc::winsize,
        )
    })
    .map(drop)
}

pub fn get_winsize(fd: BorrowedFd<'_>) -> Result<(u16, u16)> {
    fake!("get_winsize", fd);
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes a winsize struct.
    check_int(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCGWINSZ,
            &mut ws as *mut libc::winsize,
        )
    })?;
    Ok((ws.ws_row, ws.ws_col))
}

pub fn unlockpt(master: BorrowedFd<'_>) -> Result<()> {
    fake!("unlockpt", master);
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads an int through the pointer.
    check_int(unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCSPTLCK,
            &unlock as *const libc::c_int,
        )
    })
    .map(drop)
}

/// Clears `ONLCR` on the terminal of `fd` (a pty master sets its peer's): a `\n` the
/// program writes is read from the master as `\n`, not `\r\n`.
pub fn clear_onlcr(fd: BorrowedFd<'_>) -> Result<()> {
    fake!("clear_onlcr", fd);
    use nix::sys::termios::{tcgetattr, tcsetattr, OutputFlags, SetArg};
    let mut t = tcgetattr(fd)?;
    t.output_flags.remove(OutputFlags::ONLCR);
    tcsetattr(fd, SetArg::TCSANOW, &t)?;
    Ok(())
}

/// Opens the peer (slave) end of a pty master without a path lookup (TIOCGPTPEER).
pub fn pty_peer(master: BorrowedFd<'_>) -> Result<OwnedFd> {
    fake!("pty_peer", master);
    const TIOCGPTPEER: libc::Ioctl = 0x5441;
    let fd = ioctl_int(
        master,
        TIOCGPTPEER,
        (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as libc::c_ulong,
    )?;
    Ok(owned(fd as libc::c_long))
}

/// Gives the pty peer `fd` to `uid`, by the held fd (no `/dev/pts/N` path is looked up);
/// its group (devpts' `gid=`) is left as it is (`fchown`'s -1).
pub fn set_pty_owner(fd: BorrowedFd<'_>, uid: u32) -> Result<()> {
    fake!("set_pty_owner", fd, uid);
    // SAFETY: fchown on a valid fd; (gid_t)-1 keeps the group.
    check_int(unsafe { libc::fchown(fd.as_raw_fd(), uid, libc::gid_t::MAX) }).map(drop)
}
