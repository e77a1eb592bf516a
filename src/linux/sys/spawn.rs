//! Starting a helper program (runsc) the way `posix_spawn` does, sharing moat's memory
//! until it executes.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use super::{owned, Result};

/// What [`spawn_in_cgroups`] hands its child.
struct SpawnArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Descriptors to become the child's 0, 1 and 2; -1 keeps moat's.
    stdio: [RawFd; 3],
    /// `cgroup.procs` files (one per hierarchy), open for writing, that the child moves
    /// itself into before it executes: `cgroups_len` of them at `cgroups`.
    cgroups: *const RawFd,
    cgroups_len: usize,
    /// A network namespace the child enters before it executes; -1 for none.
    netns: RawFd,
    /// Written by the child, in moat's memory, when it cannot execute.
    errno: libc::c_int,
}

/// The child of [`spawn_in_cgroups`], on its own stack in moat's memory: it may only make system
/// calls, which is all it does.
extern "C" fn spawn_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the SpawnArgs on the parent's stack, which the parent does not
    // touch until this child has executed or exited (CLONE_VFORK).
    unsafe {
        let a = &mut *(arg as *mut SpawnArgs);
        for (target, &fd) in (0..).zip(a.stdio.iter()) {
            if fd < 0 {
                continue;
            }
            // dup2 onto itself would keep the close-on-exec flag.
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                a.errno = *libc::__errno_location();
                libc::_exit(127);
            }
        }
        for i in 0..a.cgroups_len {
            if libc::write(*a.cgroups.add(i), b"0".as_ptr().cast(), 1) != 1 {
                a.errno = *libc::__errno_location();
                libc::_exit(127);
            }
        }
        if a.netns >= 0 && libc::setns(a.netns, libc::CLONE_NEWNET) != 0 {
            a.errno = *libc::__errno_location();
            libc::_exit(127);
        }
        // moat ignores SIGPIPE, and an ignored signal stays ignored across execve; the
        // mask (everything, blocked by the parent for this window) is emptied, as std's
        // Command does.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut none = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigemptyset(none.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
        libc::execve(a.path, a.argv, a.envp);
        a.errno = *libc::__errno_location();
        libc::_exit(127)
    }
}

/// [`spawn_in_cgroups`] into one cgroup at most: the one whose `cgroup.procs` is
/// `cgroup_procs` (open for writing), so that the child and everything it starts are born
/// there.
pub fn spawn_in_cgroup(
    path: &CStr,
    argv: &[CString],
    envp: &[CString],
    stdio: [Option<BorrowedFd<'_>>; 3],
    cgroup_procs: Option<BorrowedFd<'_>>,
    netns: Option<BorrowedFd<'_>>,
) -> Result<(libc::pid_t, OwnedFd)> {
    not_faked!("spawn_in_cgroup");
    spawn_in_cgroups(path, argv, envp, stdio, cgroup_procs.as_slice(), netns)
}

/// Starts `path` in a child that shares moat's memory until it executes
/// (`CLONE_VM|CLONE_VFORK`, as `posix_spawn` does, so no page table is copied) and
/// returns its pid and a pidfd taken at clone time (`CLONE_PIDFD`: no window in which
/// the pid could be reused). `stdio` replaces the child's 0-2 where given. Every other
/// descriptor must be close-on-exec. Unlike glibc's `posix_spawn` (behind std's
/// `Command`), the child does not walk all 64 signal dispositions, since moat installs
/// no handler: it restores SIGPIPE and empties its mask, and executes.
///
/// The child first writes itself to each `cgroup.procs` of `cgroup_procs` (one a
/// hierarchy, open for writing: a cgroup of every hierarchy of a v1 or hybrid host) in
/// turn, so every page and task it makes from its first is charged there, then enters
/// the network namespace `netns` where given (only the child: moat stays where it is).
pub fn spawn_in_cgroups(
    path: &CStr,
    argv: &[CString],
    envp: &[CString],
    stdio: [Option<BorrowedFd<'_>>; 3],
    cgroup_procs: &[BorrowedFd<'_>],
    netns: Option<BorrowedFd<'_>>,
) -> Result<(libc::pid_t, OwnedFd)> {
    not_faked!("spawn_in_cgroups");
    const STACK: usize = 32 * 1024;
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    let cgroups: Vec<RawFd> = cgroup_procs.iter().map(|f| f.as_raw_fd()).collect();
    let mut args = SpawnArgs {
        path: path.as_ptr(),
        argv: a.as_ptr(),
        envp: e.as_ptr(),
        stdio: stdio.map(|f| f.map_or(-1, |f| f.as_raw_fd())),
        cgroups: cgroups.as_ptr(),
        cgroups_len: cgroups.len(),
        netns: netns.map_or(-1, |f| f.as_raw_fd()),
        errno: 0,
    };
    let mut stack: Vec<u8> = Vec::with_capacity(STACK);
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the child runs `spawn_child` on `stack` (16-byte aligned top, grows down)
    // and only reads `args` and the arrays it points into, all alive until clone returns,
    // which with CLONE_VFORK is after the child has executed or exited. All signals are
    // blocked around the clone so that no handler can run on the shared memory.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(STACK) as usize & !15;
        let mut all = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        let mut old = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        let pid = libc::clone(
            spawn_child,
            top as *mut libc::c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
            &mut args as *mut SpawnArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        );
        let err = io::Error::last_os_error();
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        if pid < 0 {
            return Err(err);
        }
        pid
    };
    let pidfd = owned(pidfd as libc::c_long);
    if args.errno != 0 {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(args.errno));
    }
    Ok((pid, pidfd))
}

#[cfg(test)]
mod tests {
    use super::super::memfd;
    use super::*;
    use std::io::{Read, Seek};
    use std::os::fd::AsFd;

    fn run(argv: &[&str]) -> Result<(i32, String)> {
        let out = memfd(c"test-out")?;
        let cs: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
        let (pid, pidfd) =
            spawn_in_cgroups(&cs[0], &cs, &[], [None, Some(out.as_fd()), None], &[], None)?;
        // The pidfd from clone refers to the child (musl's clone passes it through too).
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own pidfd, writing a local siginfo.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                libc::id_t::try_from(pidfd.as_raw_fd()).unwrap(),
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waitid on the pidfd: {}", io::Error::last_os_error());
        // SAFETY: si_pid of a siginfo filled by waitid.
        assert_eq!(unsafe { info.si_pid() }, pid);
        let code = match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)? {
            nix::sys::wait::WaitStatus::Exited(_, c) => c,
            other => panic!("{other:?}"),
        };
        let mut f = std::fs::File::from(out);
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        Ok((code, s))
    }

    #[test]
    fn spawned_child_has_default_sigpipe_and_no_blocked_signal() {
        // The test harness, like moat, ignores SIGPIPE; block one more signal here too.
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::zeroed();
        // SAFETY: a zeroed sigset on the stack, our own thread's mask.
        unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            libc::sigaddset(set.as_mut_ptr(), libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut());
        }
        let (code, out) = run(&["/bin/grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]).unwrap();
        assert_eq!(code, 0, "{out}");
        for line in out.lines() {
            let (name, mask) = line.split_once(":\t").unwrap();
            let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
            let pipe = 1u64 << (libc::SIGPIPE - 1);
            match name {
                "SigIgn" => assert_eq!(mask & pipe, 0, "SIGPIPE still ignored: {out}"),
                "SigBlk" => assert_eq!(mask, 0, "signals still blocked: {out}"),
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn spawn_reports_exec_failure_and_reaps() {
        let err = run(&["/nonexistent/runsc"]).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn spawned_child_gets_stdio_and_argv() {
        let (code, out) = run(&["/bin/sh", "-c", "echo \"$0 $1\"; exit 3", "a b", "c"]).unwrap();
        assert_eq!((code, out.as_str()), (3, "a b c\n"));
    }
}
