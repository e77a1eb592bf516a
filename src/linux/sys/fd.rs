//! The descriptor table: duplicating and closing descriptors, their close-on-exec flag,
//! anonymous files, and `ioctl` on a descriptor. Descriptors pass as `BorrowedFd`/`OwnedFd`;
//! where the number itself is what counts (a slot to fill, a minimum) it is an [`FdNumber`].

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::{check, check_int, check_len, owned, retry, Result};

/// A descriptor's number where the number itself is what is meant, not a descriptor moat
/// holds: a slot to fill (`dup2` onto 0-2, the preserved fds `3..3 + n` the container
/// inherits), a lower bound (`F_DUPFD`, `close_range`), or a number in another process's
/// table (`pidfd_getfd`). Nothing is owned or borrowed through it; descriptors moat holds
/// pass as `BorrowedFd`/`OwnedFd`. Unsigned, as the kernel's `unsigned int fd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FdNumber(pub u32);

impl FdNumber {
    /// The number `fd` has in this process's table (none for `AT_FDCWD`).
    pub fn of(fd: BorrowedFd<'_>) -> Option<FdNumber> {
        u32::try_from(fd.as_raw_fd()).ok().map(FdNumber)
    }

    /// As libc's `int`; EBADF for a number above `INT_MAX`, which no descriptor has (the
    /// kernel's answer to a number beyond the table).
    pub(super) fn as_c_int(self) -> Result<libc::c_int> {
        libc::c_int::try_from(self.0).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
    }
}

/// Closes every descriptor from 3 up except `keep`, in a forked child about to do one
/// thing with it and `_exit`.
pub fn close_all_but(keep: BorrowedFd<'_>) -> Result<()> {
    fake!("close_all_but", keep);
    let k = FdNumber::of(keep)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?
        .0;
    if k > 3 {
        // SAFETY: close_range on our own table; the caller owns nothing else it will use.
        check(unsafe { libc::syscall(libc::SYS_close_range, 3u32, k - 1, 0u32) })?;
    }
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_close_range, k + 1, u32::MAX, 0u32) }).map(drop)
}

/// Marks or closes every descriptor from `first` up.
pub fn close_range_from(first: FdNumber, cloexec_only: bool) -> Result<()> {
    fake!("close_range_from", first, cloexec_only);
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    let flags = if cloexec_only { CLOSE_RANGE_CLOEXEC } else { 0 };
    // SAFETY: close_range on our own table; callers ensure no live OwnedFd is above `first`
    // when closing (cloexec-only mode never invalidates descriptors).
    check(unsafe { libc::syscall(libc::SYS_close_range, first.0, u32::MAX, flags) }).map(drop)
}

/// Closes every descriptor from `first` up that the caller passed: those without
/// close-on-exec, since every descriptor moat opens has it and one the caller's execve
/// carried cannot. They are nobody's in moat (no object owns them).
pub fn close_inherited_from(first: FdNumber) -> Result<()> {
    fake!("close_inherited_from", first);
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in fds {
        if u32::try_from(fd).is_ok_and(|n| n >= first.0) {
            // SAFETY: F_GETFD only reads the descriptor's flags.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                // SAFETY: the descriptor came from the caller's execve and no object in
                // this process owns it (every descriptor moat opens is close-on-exec).
                check_int(unsafe { libc::close(fd) })?;
            }
        }
    }
    Ok(())
}

/// A close-on-exec duplicate of `fd` numbered `min` or higher.
pub fn dup_cloexec_from(fd: BorrowedFd<'_>, min: FdNumber) -> Result<OwnedFd> {
    fake!("dup_cloexec_from", fd, min);
    // A bound above INT_MAX is beyond any table: no free descriptor there.
    let min = min
        .as_c_int()
        .map_err(|_| io::Error::from_raw_os_error(libc::EMFILE))?;
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor.
    let r = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    Ok(owned(r as libc::c_long))
}

/// Makes descriptor number `target` a duplicate of `fd` (a stdio slot, closed first if
/// open).
pub fn dup2(fd: BorrowedFd<'_>, target: FdNumber) -> Result<()> {
    fake!("dup2", fd, target);
    let target = target.as_c_int()?;
    // SAFETY: dup2 onto a stdio slot; the caller owns those slots conceptually.
    check_int(unsafe { libc::dup2(fd.as_raw_fd(), target) }).map(drop)
}

pub fn dup_cloexec(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    fake!("dup_cloexec", fd);
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor.
    let r = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    Ok(owned(r as libc::c_long))
}

/// Clears `O_CLOEXEC` on a descriptor meant to survive execve (preserved fds, stdio).
pub fn clear_cloexec(fd: FdNumber) -> Result<()> {
    fake!("clear_cloexec", fd);
    let fd = fd.as_c_int()?;
    // SAFETY: fcntl on a descriptor number; failure is reported, not UB.
    check_int(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// Closes a descriptor some other object owns, in a forked child that will never run
/// that owner's destructor (it execs or `_exit`s).
pub fn close_raw(fd: BorrowedFd<'_>) {
    fake!("close_raw", fd);
    // SAFETY: see above; the owner is never used again in this process.
    unsafe { libc::close(fd.as_raw_fd()) };
}

/// Borrows one of the process's standard descriptors (0–2), which live as long as it.
pub fn borrow_stdio(fd: FdNumber) -> BorrowedFd<'static> {
    let fd: RawFd = match fd.0 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => panic!("only stdio may be borrowed for 'static"),
    };
    // SAFETY: stdio descriptors are never closed by moat.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// `AT_FDCWD` as a borrowed fd, for *at calls relative to the working directory.
pub fn at_fdcwd() -> BorrowedFd<'static> {
    // SAFETY: AT_FDCWD is a constant the kernel interprets; it is never closed.
    unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) }
}

/// `memfd_create(name, MFD_CLOEXEC)`: an anonymous file, for a child's captured output.
pub fn memfd(name: &CStr) -> Result<OwnedFd> {
    fake!("memfd", name);
    // SAFETY: plain syscall on a NUL-terminated name.
    check_int(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })
        .map(|fd| owned(fd as libc::c_long))
}

pub fn ioctl_int(fd: BorrowedFd<'_>, req: libc::Ioctl, arg: libc::c_ulong) -> Result<libc::c_int> {
    fake!("ioctl_int", fd, req, arg);
    // SAFETY: requests used with this helper take an integer (or no) argument.
    check_int(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) })
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    fake!("pipe");
    let mut fds: [libc::c_int; 2] = [0; 2];
    // SAFETY: `fds` is a valid array of two ints the kernel fills.
    check_int(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((owned(fds[0] as libc::c_long), owned(fds[1] as libc::c_long)))
}

/// Blocks until `fd` is readable (or its peer hung up), retrying EINTR.
pub fn poll_readable(fd: BorrowedFd<'_>) -> Result<()> {
    fake!("poll_readable", fd);
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    retry(|| {
        // SAFETY: one valid pollfd, which outlives the call.
        check_int(unsafe { libc::poll(&mut p, 1, -1) })
    })
    .map(drop)
}

/// Waits at most `timeout` for `fd` to be readable (or its peer to hang up), retrying
/// EINTR with the time that is left: false when the time ran out.
pub fn poll_readable_within(fd: BorrowedFd<'_>, timeout: std::time::Duration) -> Result<bool> {
    fake!("poll_readable_within", fd, timeout);
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, which outlives the call.
        match check_int(unsafe { libc::poll(&mut p, 1, ms) }) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

/// `read(2)` into `buf`, retrying EINTR; the byte count read (0 at end of file).
pub fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<usize> {
    fake!("read", fd; |r| super::record::fill(r, buf));
    retry(|| {
        // SAFETY: pointer and length describe a writable buffer that outlives the call.
        check_len(
            unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) }
                as libc::c_long,
        )
    })
}

/// `write(2)` of `data`, retrying EINTR; the byte count written (one call: a procfs file
/// takes its value in a single write).
pub fn write(fd: BorrowedFd<'_>, data: &[u8]) -> Result<usize> {
    fake!("write", fd, data; |r| super::record::written(r, data.len()));
    retry(|| {
        // SAFETY: pointer and length describe a readable buffer that outlives the call.
        check_len(
            unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) }
                as libc::c_long,
        )
    })
}
