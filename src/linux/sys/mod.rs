//! The only place moat issues raw system calls.
//!
//! Everything here is a thin, typed wrapper: fds come in as `BorrowedFd` and go out as
//! `OwnedFd`, errors are `std::io::Error` carrying errno, and EINTR is retried where the
//! call is restartable. Policy and ordering live in the callers.
#![allow(unsafe_code)]

pub mod bpf;

use std::ffi::{CStr, CString};
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
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

// ---------------------------------------------------------------------------------------
// Processes

#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The outcome of a fork-like clone.
pub enum Forked {
    Parent(libc::pid_t),
    Child,
}

/// `clone3` used like `fork`: the child continues on a copy of the caller's stack.
/// `cgroup` places the child in a cgroup v2 directory atomically (`CLONE_INTO_CGROUP`).
/// Falls back to `clone(2)` when clone3 is unavailable (old kernels, seccomp profiles that
/// answer ENOSYS) and no cgroup fd was asked for.
///
/// The caller must be single-threaded: only the calling thread exists in the child.
pub fn clone_fork(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> Result<Forked> {
    let mut args = CloneArgs {
        flags,
        // With CLONE_PARENT the child's exit signal is its parent's, and clone3 wants 0.
        exit_signal: if flags & libc::CLONE_PARENT as u64 != 0 {
            0
        } else {
            libc::SIGCHLD as u64
        },
        ..Default::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: clone3 with a zero stack behaves like fork; args is a valid, sized struct.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    let ret = match check(ret) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) && cgroup.is_none() => {
            // SAFETY: raw clone with a NULL stack is fork-like; the flags fit the C int.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_clone,
                    (flags | libc::SIGCHLD as u64) as libc::c_ulong,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                )
            };
            check(r)?
        }
        r => r?,
    };
    Ok(if ret == 0 {
        Forked::Child
    } else {
        Forked::Parent(ret as libc::pid_t)
    })
}

pub fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int) -> Result<()> {
    // SAFETY: plain syscall on a valid fd.
    check_int(unsafe { libc::setns(fd.as_raw_fd(), nstype) }).map(drop)
}

pub fn unshare(flags: libc::c_int) -> Result<()> {
    // SAFETY: plain syscall.
    check_int(unsafe { libc::unshare(flags) }).map(drop)
}

pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd> {
    // SAFETY: plain syscall; the returned fd is new.
    let r = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(owned(r))
}

/// A duplicate of descriptor `fd` of the process behind `pidfd` (close-on-exec), as
/// ptrace access mode ATTACH_REALCREDS allows.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: RawFd) -> Result<OwnedFd> {
    // SAFETY: plain syscall with flags 0; the returned fd is new.
    let r = check(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })?;
    Ok(owned(r))
}

/// A close-on-exec duplicate of `fd` numbered `min` or higher.
pub fn dup_cloexec_from(fd: BorrowedFd<'_>, min: RawFd) -> Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor.
    let r = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    Ok(owned(r as libc::c_long))
}

pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> Result<()> {
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

pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> Result<libc::c_int> {
    // SAFETY: prctl with scalar arguments only.
    check_int(unsafe { libc::prctl(option, arg2, 0 as libc::c_ulong, 0 as libc::c_ulong, 0) })
}

pub fn prctl5(
    option: libc::c_int,
    arg2: libc::c_ulong,
    arg3: libc::c_ulong,
    arg4: libc::c_ulong,
) -> Result<libc::c_int> {
    // SAFETY: prctl with scalar arguments only.
    check_int(unsafe { libc::prctl(option, arg2, arg3, arg4, 0 as libc::c_ulong) })
}

pub fn setresuid(uid: u32) -> Result<()> {
    // SAFETY: the raw syscall sets the ids of this thread only, which is what a
    // single-threaded container init wants (glibc's wrapper would broadcast to threads).
    check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) }).map(drop)
}

pub fn setresgid(gid: u32) -> Result<()> {
    // SAFETY: as setresuid.
    check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) }).map(drop)
}

pub fn setgroups(gids: &[u32]) -> Result<()> {
    // SAFETY: pointer and length describe a valid slice of gid_t.
    check(unsafe { libc::syscall(libc::SYS_setgroups, gids.len(), gids.as_ptr()) }).map(drop)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;

/// Sets the effective, permitted and inheritable sets of the calling thread.
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> Result<()> {
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: effective as u32,
            permitted: permitted as u32,
            inheritable: inheritable as u32,
        },
        CapData {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: header and a two-element data array, as _LINUX_CAPABILITY_VERSION_3 requires.
    check(unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) })
        .map(drop)
}

/// The (effective, permitted, inheritable) sets of the calling thread.
pub fn capget() -> Result<(u64, u64, u64)> {
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a writable two-element data array, as version 3 requires.
    check(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    let join = |lo: u32, hi: u32| lo as u64 | (hi as u64) << 32;
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ))
}

/// Sets the filesystem uid and gid of the calling thread; returns the previous pair.
/// (The kernel reports no error: the caller checks by setting again.)
pub fn setfsids(uid: u32, gid: u32) -> (u32, u32) {
    // SAFETY: scalar arguments; affects this thread's credentials only.
    let old_gid = unsafe { libc::syscall(libc::SYS_setfsgid, gid) } as u32;
    // SAFETY: as above.
    let old_uid = unsafe { libc::syscall(libc::SYS_setfsuid, uid) } as u32;
    (old_uid, old_gid)
}

pub fn join_session_keyring(name: &CStr) -> Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, name.as_ptr()) })
        .map(drop)
}

/// Sets IFF_UP on `lo` in the current network namespace.
pub fn loopback_up() -> Result<()> {
    // SAFETY: a plain socket; the returned fd is owned below.
    let sock = check_int(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: the kernel just returned this fd.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS fills ifr_flags of a valid ifreq.
    check_int(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS as libc::Ioctl,
            &mut req,
        )
    })?;
    // SAFETY: reading and writing the flags member of the union SIOCGIFFLAGS filled.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq.
    check_int(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as libc::Ioctl, &req) })
        .map(drop)
}

/// A raw syscall whose arguments are all integers or NULL pointers: the kernel validates
/// them and fails with EFAULT/EINVAL rather than touching our memory. For probes only.
pub fn syscall_ints(nr: libc::c_long, args: [libc::c_long; 5]) -> Result<libc::c_long> {
    // SAFETY: no argument is a pointer into our memory (see above).
    check(unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4]) })
}

pub fn personality(persona: libc::c_ulong) -> Result<()> {
    // SAFETY: plain syscall.
    check_int(unsafe { libc::personality(persona) }).map(drop)
}

pub fn setdomainname(name: &str) -> Result<()> {
    // SAFETY: pointer and length of a valid byte slice.
    check_int(unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) }).map(drop)
}

pub fn ioprio_set(class: i32, prio: i32) -> Result<()> {
    const IOPRIO_WHO_PROCESS: i32 = 1;
    let value = (class << 13) | prio;
    // SAFETY: plain syscall for the calling process (who = 0).
    check(unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, value) }).map(drop)
}

#[repr(C)]
#[derive(Default)]
pub struct SchedAttr {
    pub size: u32,
    pub sched_policy: u32,
    pub sched_flags: u64,
    pub sched_nice: i32,
    pub sched_priority: u32,
    pub sched_runtime: u64,
    pub sched_deadline: u64,
    pub sched_period: u64,
}

pub fn sched_setattr(attr: &mut SchedAttr) -> Result<()> {
    attr.size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: attr is a valid, sized sched_attr.
    check(unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *mut SchedAttr, 0) }).map(drop)
}

/// `execve` that only returns on failure.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: NULL-terminated arrays of pointers into CStrings that outlive the call.
    unsafe { libc::execve(path.as_ptr(), a.as_ptr(), e.as_ptr()) };
    io::Error::last_os_error()
}

/// `execveat(fd, "", …, AT_EMPTY_PATH)`: runs the file behind `fd`.
pub fn fexecve(fd: BorrowedFd<'_>, argv: &[CString], envp: &[CString]) -> io::Error {
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    // SAFETY: as execve; the empty path string is NUL-terminated.
    unsafe {
        libc::syscall(
            libc::SYS_execveat,
            fd.as_raw_fd(),
            c"".as_ptr(),
            a.as_ptr(),
            e.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    io::Error::last_os_error()
}

/// The command line `main` received.
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// moat's command line: what `main` received, or std's view of it where moat did not
/// start through its own `main` (unit tests).
pub fn args() -> Vec<std::ffi::OsString> {
    ARGS.get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect())
}

/// What Rust's own start-up would have done, for moat's C `main` (`src/main.rs`): keep
/// the command line (std finds it by itself under glibc only; musl hands it to `main`
/// alone), ignore SIGPIPE, so that a write to a closed pipe is an error rather than
/// death, and open descriptors 0-2 on /dev/null when closed, so that no file moat opens
/// later takes their place and receives output meant for a terminal.
///
/// # Safety
/// `argv` must hold `argc` valid NUL-terminated strings, as libc passes to `main`.
pub unsafe fn process_init(argc: libc::c_int, argv: *const *const libc::c_char) {
    use std::os::unix::ffi::OsStrExt;
    let args = (0..argc.max(0) as usize)
        // SAFETY: the caller guarantees argc valid strings.
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) })
        .map(|a| std::ffi::OsStr::from_bytes(a.to_bytes()).to_os_string())
        .collect();
    let _ = ARGS.set(args);
    // SAFETY: setting a disposition to SIG_IGN and polling three fds are always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: a valid array of three pollfds, zero timeout.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0;
    for p in fds {
        let closed = if polled {
            p.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD on a number only queries the table.
            (unsafe { libc::fcntl(p.fd, libc::F_GETFD) }) < 0
        };
        if closed {
            // SAFETY: opens /dev/null on the lowest free number, which is this one; it is
            // never closed (as std does), so the number stays taken.
            if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } < 0 {
                exit_now(127);
            }
        }
    }
}

/// What [`spawn`] hands its child.
struct SpawnArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Descriptors to become the child's 0, 1 and 2; -1 keeps moat's.
    stdio: [RawFd; 3],
    /// Written by the child, in moat's memory, when it cannot execute.
    errno: libc::c_int,
}

/// The child of [`spawn`], on its own stack in moat's memory: it may only make system
/// calls, which is all it does.
extern "C" fn spawn_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the SpawnArgs on the parent's stack, which the parent does not
    // touch until this child has executed or exited (CLONE_VFORK).
    unsafe {
        let a = &mut *(arg as *mut SpawnArgs);
        for (target, &fd) in a.stdio.iter().enumerate() {
            if fd < 0 {
                continue;
            }
            // dup2 onto itself would keep the close-on-exec flag.
            let r = if fd == target as RawFd {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target as RawFd)
            };
            if r < 0 {
                a.errno = *libc::__errno_location();
                libc::_exit(127);
            }
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

/// Starts `path` in a child that shares moat's memory until it executes
/// (`CLONE_VM|CLONE_VFORK`, as `posix_spawn` does, so no page table is copied) and
/// returns its pid and a pidfd taken at clone time (`CLONE_PIDFD`: no window in which
/// the pid could be reused). `stdio` replaces the child's 0-2 where given. Every other
/// descriptor must be close-on-exec. Unlike glibc's `posix_spawn` (behind std's
/// `Command`), the child does not walk all 64 signal dispositions, since moat installs
/// no handler: it restores SIGPIPE and empties its mask, and executes.
pub fn spawn(
    path: &CStr,
    argv: &[CString],
    envp: &[CString],
    stdio: [Option<BorrowedFd<'_>>; 3],
) -> Result<(libc::pid_t, OwnedFd)> {
    const STACK: usize = 32 * 1024;
    let mut a: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    a.push(std::ptr::null());
    let mut e: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    e.push(std::ptr::null());
    let mut args = SpawnArgs {
        path: path.as_ptr(),
        argv: a.as_ptr(),
        envp: e.as_ptr(),
        stdio: stdio.map(|f| f.map_or(-1, |f| f.as_raw_fd())),
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

/// `memfd_create(name, MFD_CLOEXEC)`: an anonymous file, for a child's captured output.
pub fn memfd(name: &CStr) -> Result<OwnedFd> {
    // SAFETY: plain syscall on a NUL-terminated name.
    check_int(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })
        .map(|fd| owned(fd as libc::c_long))
}

/// Exits the current process without running Rust or libc exit handlers: used by forked
/// children so that they never flush or drop state that belongs to the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no shared state.
    unsafe { libc::_exit(code) }
}

// ---------------------------------------------------------------------------------------
// File descriptors

/// Closes every descriptor from 3 up except `keep`, in a forked child about to do one
/// thing with it and `_exit`.
pub fn close_all_but(keep: BorrowedFd<'_>) -> Result<()> {
    let k = keep.as_raw_fd() as u32;
    if k > 3 {
        // SAFETY: close_range on our own table; the caller owns nothing else it will use.
        check(unsafe { libc::syscall(libc::SYS_close_range, 3u32, k - 1, 0u32) })?;
    }
    // SAFETY: as above.
    check(unsafe { libc::syscall(libc::SYS_close_range, k + 1, u32::MAX, 0u32) }).map(drop)
}

/// Marks or closes every descriptor from `first` up.
pub fn close_range_from(first: u32, cloexec_only: bool) -> Result<()> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    let flags = if cloexec_only { CLOSE_RANGE_CLOEXEC } else { 0 };
    // SAFETY: close_range on our own table; callers ensure no live OwnedFd is above `first`
    // when closing (cloexec-only mode never invalidates descriptors).
    check(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) }).map(drop)
}

#[repr(C)]
#[derive(Default)]
pub struct OpenHow {
    pub flags: u64,
    pub mode: u64,
    pub resolve: u64,
}

pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

/// How often [`openat2`] retries EAGAIN before giving up (failing closed).
const OPENAT2_EAGAIN_TRIES: usize = 1024;

/// `openat2(2)`. With `RESOLVE_IN_ROOT`/`RESOLVE_BENEATH` the kernel answers EAGAIN when a
/// rename or mount anywhere on the system raced with the resolution of a `..`; that is
/// retried (a bounded number of times), or any process renaming files in a loop — in its
/// own container — would make every create with such a path fail.
pub fn openat2(dir: BorrowedFd<'_>, path: &CStr, how: &OpenHow) -> Result<OwnedFd> {
    let mut tries = 0;
    loop {
        match openat2_once(dir, path, how) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < OPENAT2_EAGAIN_TRIES => {
                tries += 1;
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

fn openat2_once(dir: BorrowedFd<'_>, path: &CStr, how: &OpenHow) -> Result<OwnedFd> {
    retry(|| {
        // SAFETY: valid dirfd, NUL-terminated path and a sized open_how.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        check(r).map(owned)
    })
}

/// The id of the mount `fd` lies on (`statx` `STATX_MNT_ID`, Linux 5.8+): which mount a
/// lookup ended on, compared with the mounts moat made.
pub fn mount_id(fd: BorrowedFd<'_>) -> Result<u64> {
    const STATX_MNT_ID: u32 = 0x1000;
    // struct statx is 256 bytes; stx_mask is at 0, stx_mnt_id at 0x90.
    let mut buf = [0u64; 32];
    // SAFETY: a 256-byte buffer for struct statx, an empty path with AT_EMPTY_PATH on a
    // valid fd.
    check(unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            STATX_MNT_ID,
            buf.as_mut_ptr(),
        )
    })?;
    if (buf[0] as u32) & STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(buf[0x90 / 8])
}

/// The first of `openat2`, `fsopen` and `mount_setattr` (and statx's mount id) this kernel
/// lacks, if any. Each is called with arguments it refuses before doing anything, so
/// nothing is opened or changed: only ENOSYS tells a missing call.
pub fn missing_mount_api() -> Option<&'static str> {
    let null = std::ptr::null::<u8>();
    let lacks =
        |r: libc::c_long| r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS);
    // SAFETY: NULL pointers and invalid fds: the kernel validates them and fails
    // (EFAULT/EBADF/EINVAL) without side effects, or answers ENOSYS when the call is missing.
    if lacks(unsafe { libc::syscall(libc::SYS_openat2, -1, null, null, 0) }) {
        return Some("openat2");
    }
    // SAFETY: as above.
    if lacks(unsafe { libc::syscall(libc::SYS_fsopen, null, 0) }) {
        return Some("fsopen");
    }
    // SAFETY: as above.
    if lacks(unsafe { libc::syscall(libc::SYS_mount_setattr, -1, null, 0, null, 0) }) {
        return Some("mount_setattr");
    }
    None
}

pub fn openat(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int, mode: u32) -> Result<OwnedFd> {
    retry(|| {
        // SAFETY: valid dirfd and NUL-terminated path.
        let r = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                path.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode,
            )
        };
        check_int(r).map(|fd| owned(fd as libc::c_long))
    })
}

/// The text of the symlink `path` names relative to `dir` (never followed).
pub fn readlinkat(dir: BorrowedFd<'_>, path: &CStr) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    // SAFETY: valid dirfd, NUL-terminated path, and a buffer of the length passed.
    let n = check(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            path.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        ) as libc::c_long
    })? as usize;
    if n == buf.len() {
        // Longer than any link moat reads (procfs's `thread-self`): refuse, never truncate.
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> Result<()> {
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    // SAFETY: NUL-terminated strings and a valid dirfd.
    check_int(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub fn fchownat_empty(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: AT_EMPTY_PATH on a valid fd.
    check_int(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat fills the buffer on success.
    check_int(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call (and zeroed before).
    Ok(unsafe { st.assume_init() })
}

pub fn fstatfs(fd: BorrowedFd<'_>) -> Result<libc::statfs> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs fills the buffer on success.
    check_int(unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> Result<libc::statvfs> {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: fstatvfs fills the buffer on success.
    check_int(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn flock_exclusive(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: plain syscall on a valid fd.
    retry(|| check_int(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) }).map(drop))
}

pub fn fchdir(fd: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: plain syscall.
    check_int(unsafe { libc::fchdir(fd.as_raw_fd()) }).map(drop)
}

pub fn ioctl_int(fd: BorrowedFd<'_>, req: libc::Ioctl, arg: libc::c_ulong) -> Result<libc::c_int> {
    // SAFETY: requests used with this helper take an integer (or no) argument.
    check_int(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg) })
}

pub fn set_winsize(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> Result<()> {
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

pub fn unlockpt(master: BorrowedFd<'_>) -> Result<()> {
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

pub fn prlimit(pid: libc::pid_t, resource: libc::c_int, soft: u64, hard: u64) -> Result<()> {
    let new = libc::rlimit64 {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: new points at a valid rlimit64; old is NULL.
    check_int(unsafe { libc::prlimit64(pid, resource as _, &new, std::ptr::null_mut()) }).map(drop)
}

/// Opens the peer (slave) end of a pty master without a path lookup (TIOCGPTPEER).
pub fn pty_peer(master: BorrowedFd<'_>) -> Result<OwnedFd> {
    const TIOCGPTPEER: libc::Ioctl = 0x5441;
    let fd = ioctl_int(
        master,
        TIOCGPTPEER,
        (libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) as libc::c_ulong,
    )?;
    Ok(owned(fd as libc::c_long))
}

pub fn get_winsize(fd: BorrowedFd<'_>) -> Result<(u16, u16)> {
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

/// Borrows one of the process's standard descriptors (0–2), which live as long as it.
pub fn borrow_stdio(fd: RawFd) -> BorrowedFd<'static> {
    assert!(
        (0..=2).contains(&fd),
        "only stdio may be borrowed for 'static"
    );
    // SAFETY: stdio descriptors are never closed by moat.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

pub fn dup2(fd: BorrowedFd<'_>, target: RawFd) -> Result<()> {
    // SAFETY: dup2 onto a stdio slot; the caller owns those slots conceptually.
    check_int(unsafe { libc::dup2(fd.as_raw_fd(), target) }).map(drop)
}

pub fn dup_cloexec(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor.
    let r = check_int(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) })?;
    Ok(owned(r as libc::c_long))
}

/// Clears `O_CLOEXEC` on a descriptor meant to survive execve (preserved fds, stdio).
pub fn clear_cloexec(fd: RawFd) -> Result<()> {
    // SAFETY: fcntl on a descriptor number; failure is reported, not UB.
    check_int(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }).map(drop)
}

/// Closes a descriptor some other object owns, in a forked child that will never run
/// that owner's destructor (it execs or `_exit`s).
pub fn close_raw(fd: BorrowedFd<'_>) {
    // SAFETY: see above; the owner is never used again in this process.
    unsafe { libc::close(fd.as_raw_fd()) };
}

/// Receives one message and at most one fd passed with SCM_RIGHTS (installed close-on-exec).
/// Extra fds, if a peer sent more, are closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Option<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut cspace = nix::cmsg_space!([RawFd; 4]);
    loop {
        let mut iov = [io::IoSliceMut::new(buf)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cspace),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(msg) => {
                let mut fd = None;
                for c in msg.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        for f in fds {
                            // SAFETY: the kernel just installed f in our table for this message.
                            let owned = unsafe { OwnedFd::from_raw_fd(f) };
                            if fd.is_none() {
                                fd = Some(owned);
                            }
                        }
                    }
                }
                return Ok((msg.bytes, fd));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The new mount API (Linux 5.2+, mount_setattr 5.12+)

pub const OPEN_TREE_CLONE: u32 = 1;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const FSMOUNT_CLOEXEC: u32 = 1;
pub const FSCONFIG_SET_FLAG: u32 = 0;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;

pub const MOUNT_ATTR_RDONLY: u64 = 0x01;
pub const MOUNT_ATTR_NOSUID: u64 = 0x02;
pub const MOUNT_ATTR_NODEV: u64 = 0x04;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x08;
pub const MOUNT_ATTR__ATIME: u64 = 0x70;
pub const MOUNT_ATTR_RELATIME: u64 = 0x00;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

pub fn open_tree(dir: BorrowedFd<'_>, path: &CStr, flags: u32) -> Result<OwnedFd> {
    // SAFETY: valid dirfd and NUL-terminated path.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dir.as_raw_fd(),
            path.as_ptr(),
            flags | libc::O_CLOEXEC as u32,
        )
    })?;
    Ok(owned(r))
}

/// Attaches the detached mount `from` on top of the object `to` refers to.
pub fn move_mount_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<()> {
    // SAFETY: two valid fds with empty paths.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(drop)
}

pub fn fsopen(fstype: &CStr) -> Result<OwnedFd> {
    const FSOPEN_CLOEXEC: u32 = 1;
    // SAFETY: NUL-terminated filesystem name.
    let r = check(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    Ok(owned(r))
}

pub fn fsconfig(
    fs: BorrowedFd<'_>,
    cmd: u32,
    key: Option<&CStr>,
    value: Option<&CStr>,
) -> Result<()> {
    let k = key.map_or(std::ptr::null(), |k| k.as_ptr());
    let v = value.map_or(std::ptr::null(), |v| v.as_ptr());
    // SAFETY: NULL or NUL-terminated strings as the command requires.
    check(unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, k, v, 0) }).map(drop)
}

pub fn fsmount(fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd> {
    // SAFETY: valid fs context fd.
    let r =
        check(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })?;
    Ok(owned(r))
}

pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, attr: &MountAttr) -> Result<()> {
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: valid fd, empty path, sized mount_attr.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// Classic mount(2), used only for propagation changes and remounts of mounts moat made,
/// always on a `/proc/self/fd/N` path of a pinned fd or on "/" / ".".
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<()> {
    // SAFETY: NULL or NUL-terminated strings.
    check_int(unsafe {
        libc::mount(
            source.map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
    .map(drop)
}

pub fn umount2(target: &CStr, flags: libc::c_int) -> Result<()> {
    // SAFETY: NUL-terminated path.
    check_int(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<()> {
    // SAFETY: NUL-terminated paths.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

pub fn chroot(path: &CStr) -> Result<()> {
    // SAFETY: NUL-terminated path.
    check_int(unsafe { libc::chroot(path.as_ptr()) }).map(drop)
}

// ---------------------------------------------------------------------------------------
// seccomp

/// Installs a classic BPF program as a seccomp filter. With `SECCOMP_FILTER_FLAG_NEW_LISTENER`
/// in `flags` the kernel returns the notification fd.
pub fn seccomp_set_filter(flags: u32, prog: &[libc::sock_filter]) -> Result<Option<OwnedFd>> {
    const SECCOMP_SET_MODE_FILTER: u32 = 1;
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at a valid filter array that outlives the call.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    })?;
    Ok((flags & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0).then(|| owned(r)))
}

/// Whether the kernel knows the `SECCOMP_FILTER_FLAG_*` bits in `flags`: it checks them
/// before reading the program, so a NULL program fails with EFAULT when they are known
/// and EINVAL when not. Nothing is installed either way.
pub fn seccomp_flags_known(flags: u32) -> bool {
    const SECCOMP_SET_MODE_FILTER: u32 = 1;
    // SAFETY: the NULL program is never dereferenced in user space; the kernel fails
    // the copy with EFAULT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::null::<libc::sock_fprog>(),
        )
    };
    r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

// ---------------------------------------------------------------------------------------
// Misc

/// `AT_FDCWD` as a borrowed fd, for *at calls relative to the working directory.
pub fn at_fdcwd() -> BorrowedFd<'static> {
    // SAFETY: AT_FDCWD is a constant the kernel interprets; it is never closed.
    unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) }
}

pub fn geteuid() -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::geteuid() }
}

/// Sets the umask, returning the previous one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::umask(mask) }
}

/// Sets the umask and returns the previous one.
pub fn swap_umask(mask: u32) -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::umask(mask) as u32 }
}

pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> Result<()> {
    // SAFETY: plain syscall.
    check_int(unsafe { libc::kill(pid, sig) }).map(drop)
}

pub fn signal_default(sig: libc::c_int) {
    // SAFETY: restoring the default disposition is always valid.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Unblocks every signal and restores default dispositions, so the container process
/// starts with a clean signal state whatever moat did.
pub fn reset_signals() {
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

pub fn setsid() -> Result<()> {
    // SAFETY: plain syscall.
    check_int(unsafe { libc::setsid() }).map(drop)
}

/// Returns the raw number of a descriptor for the rare APIs (such as preserved-fd
/// arithmetic and fcntl checks in tests) that need it.
#[cfg_attr(not(test), allow(dead_code))]
pub fn raw(fd: BorrowedFd<'_>) -> RawFd {
    fd.as_raw_fd()
}

/// A raw syscall whose arguments are all numbers, passed in the registers exactly as
/// given, high bits included (libc's wrappers may cut them): for the tests of seccomp
/// argument rules, which must see what a hostile caller can put there.
#[cfg(test)]
pub fn syscall_numbers(nr: libc::c_long, a: u64, b: u64, c: u64) -> Result<libc::c_long> {
    // SAFETY: callers pass syscalls that take no pointers (or a null/absent one), so the
    // kernel reads no memory of ours; the result is checked like any other.
    let r = unsafe { libc::syscall(nr, a, b, c) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};
    use std::os::fd::AsFd;

    fn run(argv: &[&str]) -> Result<(i32, String)> {
        let out = memfd(c"test-out")?;
        let cs: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
        let (pid, pidfd) = spawn(&cs[0], &cs, &[], [None, Some(out.as_fd()), None])?;
        // The pidfd from clone refers to the child (musl's clone passes it through too).
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own pidfd, writing a local siginfo.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
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
