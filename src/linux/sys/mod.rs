//! The only place moat issues raw system calls, and the only `unsafe` in the crate (with
//! the C entry point in `main.rs`; `#![deny(unsafe_code)]` everywhere else).
//!
//! Everything here is a thin, typed wrapper: descriptors come in as `BorrowedFd` and go out
//! as `OwnedFd` (a bare number only as an [`FdNumber`], where the number is the meaning),
//! errors are `std::io::Error` carrying errno, and EINTR is retried where the call is
//! restartable. Every `unsafe` block says why it is sound in a `// SAFETY:` comment
//! (`clippy::undocumented_unsafe_blocks` is denied in Cargo.toml). Policy and ordering live
//! in the callers.
//!
//! One file per kernel area; callers name everything as `sys::…` through the re-exports
//! below.
#![allow(unsafe_code)]

// The recorder's hooks (see `record.rs`), defined before the modules so that every
// wrapper file can name them. Outside `cfg(test)` they expand to nothing.
/// Records and fakes a `sys` wrapper: `fake!("name", arg, …)` as the wrapper's first
/// statement, or `fake!("name", arg, …; |reply| expr)` where the default fake result
/// needs the wrapper's arguments (a write's length, a read's buffer).
macro_rules! fake {
    (@ $name:literal [$($arg:expr),*] |$r:ident| $conv:expr) => {
        #[cfg(test)]
        if let Some($r) = $crate::linux::sys::record::intercept(
            $name,
            &[$((stringify!($arg), &$arg as &dyn $crate::linux::sys::record::Arg)),*],
        ) {
            return $conv;
        }
    };
    ($name:literal $(, $arg:expr)* ; |$r:ident| $conv:expr) => {
        fake!(@ $name [$($arg),*] |$r| $conv)
    };
    ($name:literal $(, $arg:expr)* $(,)?) => {
        fake!(@ $name [$($arg),*] |r| $crate::linux::sys::record::Faked::faked(r))
    };
}

/// The hook of a wrapper the fake cannot stand in for (see [`refuse`]).
macro_rules! not_faked {
    ($name:literal) => {
        #[cfg(test)]
        $crate::linux::sys::record::refuse($name);
    };
}

pub mod bpf;
mod creds;
mod fd;
mod fs;
mod mount;
mod net;
mod process;
#[cfg(test)]
pub mod record;
mod seccomp;
mod signal;
mod spawn;
mod startup;
#[cfg(feature = "steptrace")]
mod steptrace;
mod tty;

pub use creds::{capget, capset, getegid, geteuid, setfsids, setgroups, setresgid, setresuid};
pub use fd::{
    at_fdcwd, borrow_stdio, clear_cloexec, close_all_but, close_inherited_from, close_range_from,
    close_raw, dup2, dup_cloexec, dup_cloexec_from, ioctl_int, memfd, pipe, poll_readable,
    poll_readable_within, read, write, FdNumber,
};
pub use fs::{
    fchdir, fchmod, fchmodat, fchownat_empty, fchownat_nofollow, flock_exclusive, flock_shared,
    for_each_dir_entry, fstat, fstatat_nofollow, fstatfs, fstatvfs, getcwd, mkdirat, mkfifo,
    mknodat, openat, openat2, read_file, readlinkat, stat, statfs, symlinkat, write_file, OpenHow,
    RESOLVE_BENEATH, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV,
};
pub use mount::{
    chroot, fsconfig, fsmount, fsopen, missing_mount_api, mount, mount_id, mount_setattr,
    move_mount_fd, open_tree, pivot_root, umount2, MountAttr, FSCONFIG_CMD_CREATE,
    FSCONFIG_SET_FLAG, FSCONFIG_SET_STRING, MOUNT_ATTR_IDMAP, MOUNT_ATTR_NOATIME, MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NODIRATIME, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NOSYMFOLLOW,
    MOUNT_ATTR_RDONLY, MOUNT_ATTR_RELATIME, MOUNT_ATTR_STRICTATIME, MOUNT_ATTR__ATIME,
    OPEN_TREE_CLONE,
};
pub use net::{
    connect_unix, loopback_up, recv_msg, recv_with_fd, send_msg, send_with_fd,
    socketpair_seqpacket, unix_stream_pair,
};
pub use process::{
    clone_fork, execve, exit_now, fexecve, hard_rlimit, ioprio_set, join_session_keyring,
    personality, pidfd_getfd, pidfd_open, prctl, prctl5, prlimit, sched_setaffinity, sched_setattr,
    set_mempolicy, setdomainname, sethostname, setns, setsid, soft_rlimit, swap_umask, umask,
    unshare, waitpid, waitpid_nohang, Forked, SchedAttr,
};
#[cfg(test)]
pub use seccomp::syscall_numbers;
pub use seccomp::{seccomp_flags_known, seccomp_set_filter, syscall_ints};
pub use signal::{exit_on_terminating_signals, kill, pidfd_send_signal, reset_signals};
pub use spawn::{spawn_in_cgroup, spawn_in_cgroups};
pub use startup::{args, keep_args, process_init};
#[cfg(feature = "steptrace")]
pub use steptrace::steptrace;
pub use tty::{clear_onlcr, get_winsize, pty_peer, set_pty_owner, set_winsize, unlockpt};

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub type Result<T> = std::result::Result<T, io::Error>;

fn check(ret: libc::c_long) -> Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// A byte count the kernel returned.
fn check_len(ret: libc::c_long) -> Result<usize> {
    check(ret).map(|n| usize::try_from(n).expect("non-negative after check"))
}

fn check_int(ret: libc::c_int) -> Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn retry<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    loop {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            r => return r,
        }
    }
}

/// Wraps a freshly returned descriptor.
fn owned(fd: libc::c_long) -> OwnedFd {
    let fd = RawFd::try_from(fd).expect("the kernel returns descriptors as an int");
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `fd` as the `__u32`/`__u64` fields of kernel structs take it. A descriptor is never
/// negative; `AT_FDCWD`, the one negative `BorrowedFd`, becomes a number no table holds
/// (EBADF, as its two's complement was).
fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    u32::try_from(fd.as_raw_fd()).unwrap_or(u32::MAX)
}

/// The size of `T`, one of the small kernel structs here, as their `u32` size fields.
fn size_u32<T>() -> u32 {
    u32::try_from(std::mem::size_of::<T>()).expect("kernel structs are small")
}
