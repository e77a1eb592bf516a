//! Processes: clone (fork-like) and exec, pidfds, namespaces (`setns`, `unshare`, the UTS
//! domain name), the session keyring, and the attributes a process carries (`prctl`,
//! personality, rlimits, I/O and CPU scheduling, umask, session).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{check, check_int, fd_u32, owned, retry, size_u32, FdNumber, Result};

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
    fake!("clone_fork", flags, cgroup);
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
        args.cgroup = u64::from(fd_u32(fd));
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
        Forked::Parent(libc::pid_t::try_from(ret).expect("a pid fits pid_t"))
    })
}

pub fn pidfd_open(pid: libc::pid_t) -> Result<OwnedFd> {
    fake!("pidfd_open", pid);
    // SAFETY: plain syscall; the returned fd is new.
    let r = check(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(owned(r))
}

/// A duplicate of descriptor number `fd` of the process behind `pidfd` (close-on-exec), as
/// ptrace access mode ATTACH_REALCREDS allows.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: FdNumber) -> Result<OwnedFd> {
    fake!("pidfd_getfd", pidfd, fd);
    let fd = fd.as_c_int()?;
    // SAFETY: plain syscall with flags 0; the returned fd is new.
    let r = check(unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) })?;
    Ok(owned(r))
}

/// `execve` that only returns on failure.
pub fn execve(path: &CStr, argv: &[CString], envp: &[CString]) -> io::Error {
    fake!("execve", path, argv);
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
    fake!("fexecve", fd, argv);
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

/// Exits the current process without running Rust or libc exit handlers: used by forked
/// children so that they never flush or drop state that belongs to the parent.
pub fn exit_now(code: i32) -> ! {
    not_faked!("exit_now");
    // SAFETY: _exit never returns and touches no shared state.
    unsafe { libc::_exit(code) }
}

pub fn setsid() -> Result<()> {
    fake!("setsid");
    // SAFETY: plain syscall.
    check_int(unsafe { libc::setsid() }).map(drop)
}

pub fn setns(fd: BorrowedFd<'_>, nstype: libc::c_int) -> Result<()> {
    fake!("setns", fd, nstype);
    // SAFETY: plain syscall on a valid fd.
    check_int(unsafe { libc::setns(fd.as_raw_fd(), nstype) }).map(drop)
}

pub fn unshare(flags: libc::c_int) -> Result<()> {
    fake!("unshare", flags);
    // SAFETY: plain syscall.
    check_int(unsafe { libc::unshare(flags) }).map(drop)
}

/// `sethostname(2)` in the caller's uts namespace.
pub fn sethostname(name: &str) -> Result<()> {
    fake!("sethostname", name);
    // SAFETY: pointer and length of a valid byte slice.
    check_int(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// `waitpid(pid, &status, 0)`, retrying EINTR: the raw wait status.
pub fn waitpid(pid: libc::pid_t) -> Result<libc::c_int> {
    fake!("waitpid", pid);
    let mut status: libc::c_int = 0;
    retry(|| {
        // SAFETY: waits for our own child; `status` is a valid out pointer.
        check_int(unsafe { libc::waitpid(pid, &mut status, 0) })
    })
    .map(|_| status)
}

/// `waitpid(pid, &status, WNOHANG)`, retrying EINTR: the raw wait status, or `None`
/// while `pid` still runs.
pub fn waitpid_nohang(pid: libc::pid_t) -> Result<Option<libc::c_int>> {
    fake!("waitpid_nohang", pid);
    let mut status: libc::c_int = 0;
    retry(|| {
        // SAFETY: polls our own child; `status` is a valid out pointer.
        check_int(unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) })
    })
    .map(|got| (got != 0).then_some(status))
}

pub fn setdomainname(name: &str) -> Result<()> {
    fake!("setdomainname", name);
    // SAFETY: pointer and length of a valid byte slice.
    check_int(unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) }).map(drop)
}

pub fn join_session_keyring(name: &CStr) -> Result<()> {
    fake!("join_session_keyring", name);
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_int = 1;
    // SAFETY: NUL-terminated name.
    check(unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, name.as_ptr()) })
        .map(drop)
}

pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> Result<libc::c_int> {
    fake!("prctl", option, arg2);
    // SAFETY: prctl with scalar arguments only.
    check_int(unsafe { libc::prctl(option, arg2, 0 as libc::c_ulong, 0 as libc::c_ulong, 0) })
}

pub fn prctl5(
    option: libc::c_int,
    arg2: libc::c_ulong,
    arg3: libc::c_ulong,
    arg4: libc::c_ulong,
) -> Result<libc::c_int> {
    fake!("prctl5", option, arg2, arg3, arg4);
    // SAFETY: prctl with scalar arguments only.
    check_int(unsafe { libc::prctl(option, arg2, arg3, arg4, 0 as libc::c_ulong) })
}

pub fn personality(persona: libc::c_ulong) -> Result<()> {
    fake!("personality", persona);
    // SAFETY: plain syscall.
    check_int(unsafe { libc::personality(persona) }).map(drop)
}

pub fn prlimit(pid: libc::pid_t, resource: libc::c_int, soft: u64, hard: u64) -> Result<()> {
    fake!("prlimit", pid, resource, soft, hard);
    let new = libc::rlimit64 {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: new points at a valid rlimit64; old is NULL.
    check_int(unsafe { libc::prlimit64(pid, resource as _, &new, std::ptr::null_mut()) }).map(drop)
}

/// The hard limit of `resource` for the calling process (read only on an error path, to
/// say why a limit could not be set).
pub fn hard_rlimit(resource: libc::c_int) -> Result<u64> {
    fake!("hard_rlimit", resource);
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: new is NULL; old points at a valid rlimit64 the kernel fills.
    check_int(unsafe { libc::prlimit64(0, resource as _, std::ptr::null(), &mut old) })?;
    Ok(old.rlim_max)
}

/// The soft limit of `resource` for the calling process.
pub fn soft_rlimit(resource: libc::c_int) -> Result<u64> {
    fake!("soft_rlimit", resource);
    let mut old = libc::rlimit64 {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: new is NULL; old points at a valid rlimit64 the kernel fills.
    check_int(unsafe { libc::prlimit64(0, resource as _, std::ptr::null(), &mut old) })?;
    Ok(old.rlim_cur)
}

pub fn ioprio_set(class: i32, prio: i32) -> Result<()> {
    fake!("ioprio_set", class, prio);
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
    /// The utilization clamps (`SCHED_FLAG_UTIL_CLAMP_MIN`/`MAX`: the kernel refuses
    /// those flags with a shorter struct): 0, as runc passes them, the spec having no
    /// field for them.
    pub sched_util_min: u32,
    pub sched_util_max: u32,
}

pub fn sched_setattr(attr: &mut SchedAttr) -> Result<()> {
    fake!("sched_setattr", attr);
    attr.size = size_u32::<SchedAttr>();
    // SAFETY: attr is a valid, sized sched_attr.
    check(unsafe { libc::syscall(libc::SYS_sched_setattr, 0, attr as *mut SchedAttr, 0) }).map(drop)
}

/// Sets the umask, returning the previous one.
pub fn umask(mask: u32) -> u32 {
    fake!("umask", mask);
    // SAFETY: always succeeds.
    unsafe { libc::umask(mask) }
}

/// Sets the umask and returns the previous one.
pub fn swap_umask(mask: u32) -> u32 {
    fake!("swap_umask", mask);
    // SAFETY: always succeeds.
    unsafe { libc::umask(mask) as u32 }
}

/// set_mempolicy(2) for the calling thread (inherited at fork, kept across execve).
/// `mode` carries the mode's flags (`MPOL_F_*`); `nodes` is the node mask, empty for the
/// modes that take none (passed as NULL).
pub fn set_mempolicy(mode: libc::c_int, nodes: &[libc::c_ulong]) -> Result<()> {
    fake!("set_mempolicy", mode, nodes);
    let (ptr, maxnode) = if nodes.is_empty() {
        (std::ptr::null(), 0)
    } else {
        // The kernel reads `maxnode - 1` bits (mm/mempolicy.c get_nodes), so one more than
        // the mask holds: exactly `nodes.len()` words are read.
        (
            nodes.as_ptr(),
            nodes.len() * libc::c_ulong::BITS as usize + 1,
        )
    };
    // SAFETY: `ptr` is NULL with maxnode 0, or points at `nodes`, whose words cover the
    // `maxnode - 1` bits the kernel reads; the kernel copies the mask and keeps no pointer.
    check(unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, maxnode as libc::c_ulong) })
        .map(drop)
}

/// sched_setaffinity(2): the CPUs `pid` (0: the calling thread) may run on, one bit per
/// CPU. The kernel ignores bits above its own CPU count and intersects the mask with the
/// task's cpuset (EINVAL when nothing is left).
pub fn sched_setaffinity(pid: libc::pid_t, cpus: &[libc::c_ulong]) -> Result<()> {
    fake!("sched_setaffinity", pid, cpus);
    // SAFETY: `cpus` is a valid buffer of exactly the length passed; the kernel copies it.
    check(unsafe {
        libc::syscall(
            libc::SYS_sched_setaffinity,
            pid,
            std::mem::size_of_val(cpus),
            cpus.as_ptr(),
        )
    })
    .map(drop)
}
