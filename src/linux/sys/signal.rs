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

/// Makes the asynchronous signals whose default action ends a process end this one, with
/// status 128 + the signal, though it is a pid namespace's init: the kernel ignores a
/// signal left at its default action for such an init, even one sent from an ancestor
/// namespace (SIGKILL and SIGSTOP aside). The created init waiting for `start` must end
/// on `kill`'s SIGTERM, as runc's does (its Go runtime handles every signal). `execve`,
/// and [`reset_signals`] before it, give them their default back. SIGPIPE is left as it
/// is (a write to a hook that exited early is an error, not an end); the synchronous
/// faults are delivered by force anyway.
pub fn exit_on_terminating_signals() {
    fake!("exit_on_terminating_signals");
    extern "C" fn on_signal(sig: libc::c_int) {
        // SAFETY: _exit(2) is async-signal-safe.
        unsafe { libc::_exit(128 + sig) }
    }
    for sig in [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGSTKFLT,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
    ] {
        // SAFETY: a zeroed sigaction with a valid handler and an empty mask; the handler
        // only calls _exit. A failure (a signal this kernel lacks) leaves the default.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}
