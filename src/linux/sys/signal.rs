//! Signals: sending one (by pid or pidfd), and the clean signal state a container
//! process starts with.

use std::os::fd::{AsRawFd, BorrowedFd};

use super::{check, check_int, Result};

pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> Result<()> {
    fake!("pidfd_send_signal", pidfd, sig);
    // SAFETY: NULL siginfo is allowed and means "as kill(2)".
    check(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    })
    .map(drop)
}

pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<()> {
    fake!("kill", pid, sig);
    // SAFETY: plain syscall.
    check_int(unsafe { libc::kill(pid, sig) }).map(drop)
}

pub fn signal_default(sig: libc::c_int) {
    fake!("signal_default", sig);
    // SAFETY: restoring the default disposition is always valid.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Unblocks every signal and restores default dispositions, so the container process
/// starts with a clean signal state whatever moat did.
pub fn reset_signals() {
    fake!("reset_signals");
    for sig in 1..libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            signal_default(sig);
        }
    }
    // SAFETY: an empty set unblocks everything for this thread.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(set.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut());
    }
}
