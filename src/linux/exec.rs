//! `exec`: a new process inside a running container, confined exactly as its init.
//!
//! | # | parent (`moat exec`)                                      | joiner (fork)                      | exec'd process (joiner's fork)        |
//! |---|-----------------------------------------------------------|------------------------------------|---------------------------------------|
//! | 1 | attributes parsed; the preserved fds checked (`container/startup.rs`); the container's compiled seccomp filter loaded from its state | — | — |
//! | 2 | pidfd of the init; clone (into the v2 cgroup)             | joins the v1 cgroups itself; non-dumpable; rlimits | —                     |
//! | 3 | —                                                         | `setns(pidfd, …)`: user, mount (root and cwd become the container's), the rest; pid and time for children | — |
//! | 4 | —                                                         | fork (`CLONE_PARENT`), reports the pid, exits | born in the container's pid namespace, inside its root |
//! | 5 | —                                                         | —                                  | console; [`Attrs::apply`]: LSM, NNP, seccomp, user, caps, cwd |
//! | 6 | `InitPid`, then EOF on the sync socket = exec'd; `Failed` = error | —                          | execve (the socket is close-on-exec)  |
//! | 7 | `--pid-file`; detached: done; else wait, forward signals  | —                                  | —                                     |
//!
//! Nothing in the container can see a moat process whose root is the host's: the joiner
//! stays in the caller's pid namespace, and what appears in the container's is forked
//! after the mount namespace was entered (runc's nsexec order). moat is never executed
//! inside the container: both processes are forks, non-dumpable until execve, so nothing
//! in the container without CAP_SYS_PTRACE over them can ptrace them or open their
//! `/proc/<pid>` files.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::attrs::Attrs;
use super::cgroups::Placement;
use super::path::Root;
use super::sync::{self, InitFailure, Step, StepExt, ToParent};
use super::{console, namespaces, sys};
use crate::state::Record;

pub struct ExecOpts {
    pub console_socket: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    /// `--cgroup`: a sub-cgroup of the container's, relative.
    pub sub_cgroup: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error(transparent)]
    Init(#[from] InitFailure),
    #[error(transparent)]
    Cgroup(#[from] super::cgroups::CgroupError),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("container not running")]
    NotRunning,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ExecError {
    let what = what.into();
    move |err| ExecError::Io { what, err }
}

/// The started process: its host pid, and (foreground) a pidfd to wait on.
pub struct Started {
    pub pid: i32,
    /// The pty master when the caller relays the terminal itself (no console socket).
    pub console: Option<OwnedFd>,
}

/// Namespaces of `pid` that differ from ours, as CLONE_NEW* flags.
fn namespaces_of(pid: i32) -> Result<libc::c_int, ExecError> {
    let mut flags = 0;
    for (name, flag) in [
        ("user", libc::CLONE_NEWUSER),
        ("mnt", libc::CLONE_NEWNS),
        ("pid", libc::CLONE_NEWPID),
        ("net", libc::CLONE_NEWNET),
        ("ipc", libc::CLONE_NEWIPC),
        ("uts", libc::CLONE_NEWUTS),
        ("cgroup", libc::CLONE_NEWCGROUP),
        ("time", namespaces::CLONE_NEWTIME),
    ] {
        let theirs = std::fs::metadata(format!("/proc/{pid}/ns/{name}"));
        let ours = std::fs::metadata(format!("/proc/self/ns/{name}"));
        match (theirs, ours) {
            (Ok(t), Ok(o)) => {
                use std::os::unix::fs::MetadataExt;
                if (t.dev(), t.ino()) != (o.dev(), o.ino()) {
                    flags |= flag;
                }
            }
            // A namespace type this kernel lacks (time before 5.6) cannot differ.
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound && name == "time" => {}
            (Err(e), _) => return Err(io(format!("/proc/{pid}/ns/{name}"))(e)),
            (_, Err(e)) => return Err(io(format!("/proc/self/ns/{name}"))(e)),
        }
    }
    Ok(flags)
}

pub fn exec(rec: &Record, attrs: &Attrs, opts: &ExecOpts) -> Result<Started, ExecError> {
    spawn(rec, attrs, opts, false)
}

/// Calls the container must not be able to make, as (name, syscall, args). Each uses
/// arguments that would fail harmlessly (EINVAL, ENOENT) if the call were allowed, so
/// only EPERM/EACCES/ENOSYS (or a missing address family) count as denied.
const PROBES: [(&str, libc::c_long, [libc::c_long; 5]); 5] = [
    (
        "unshare(CLONE_NEWUSER)",
        libc::SYS_unshare,
        [libc::CLONE_NEWUSER as libc::c_long, 0, 0, 0, 0],
    ),
    ("keyctl", libc::SYS_keyctl, [0, -3, 0, 0, 0]),
    (
        "socket(AF_ALG)",
        libc::SYS_socket,
        [
            libc::AF_ALG as libc::c_long,
            libc::SOCK_SEQPACKET as libc::c_long,
            0,
            0,
            0,
        ],
    ),
    ("io_uring_setup", libc::SYS_io_uring_setup, [0, 0, 0, 0, 0]),
    ("setns", libc::SYS_setns, [-1, 0, 0, 0, 0]),
];

fn run_probes() -> i32 {
    let mut escaped = 0;
    for (i, (_, nr, args)) in PROBES.iter().enumerate() {
        let denied = match sys::syscall_ints(*nr, *args) {
            Ok(_) => false,
            Err(e) => matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EAFNOSUPPORT)
            ),
        };
        if !denied {
            escaped |= 1 << i;
        }
    }
    escaped
}

/// Forks a process into the container with exactly `attrs` applied, which tries the calls
/// in `PROBES` instead of exec'ing anything; returns those that were *not* denied.
pub fn probe(rec: &Record, attrs: &Attrs) -> Result<Vec<&'static str>, ExecError> {
    let opts = ExecOpts {
        console_socket: None,
        pid_file: None,
        sub_cgroup: None,
    };
    let started = spawn(rec, attrs, &opts, true)?;
    let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(started.pid), None)
        .map_err(|e| io("wait for probe")(e.into()))?;
    let code = match status {
        nix::sys::wait::WaitStatus::Exited(_, c) => c,
        other => {
            return Err(ExecError::Init(InitFailure::new(
                Step::Exec,
                format!("probe ended with {other:?}"),
            )))
        }
    };
    Ok(PROBES
        .iter()
        .enumerate()
        .filter(|(i, _)| code & (1 << i) != 0)
        .map(|(_, p)| p.0)
        .collect())
}

fn spawn(rec: &Record, attrs: &Attrs, opts: &ExecOpts, probe: bool) -> Result<Started, ExecError> {
    let pidfd = sys::pidfd_open(rec.pid).map_err(|_| ExecError::NotRunning)?;
    if !rec.alive() {
        return Err(ExecError::NotRunning);
    }
    let flags = namespaces_of(rec.pid)?;
    let (parent_ch, child_ch) = sync::pair().map_err(io("socketpair"))?;
    let mut relay = None;
    let console_sock = match &opts.console_socket {
        Some(p) => Some(OwnedFd::from(
            UnixStream::connect(p)
                .map_err(io(format!("connect to console socket {}", p.display())))?,
        )),
        // Foreground exec with a terminal and no console socket: we relay the pty.
        None if attrs.terminal && !probe => {
            let (ours, theirs) = UnixStream::pair().map_err(io("socketpair for the console"))?;
            relay = Some(ours);
            Some(OwnedFd::from(theirs))
        }
        None => None,
    };
    // The joiner enters the cgroup by itself (see cgroups/placement.rs); the exec'd
    // process, its child, inherits it.
    let placement = match &rec.cgroup {
        Some(cg) => cg.placement(opts.sub_cgroup.as_deref())?,
        None => Placement::none(),
    };
    let joiner = match sys::clone_fork(0, placement.clone_into()).map_err(io("clone"))? {
        sys::Forked::Child => {
            drop(parent_ch);
            drop(relay);
            let e = match join(
                attrs,
                placement,
                &pidfd,
                flags,
                &child_ch,
                console_sock.as_ref(),
                probe,
            ) {
                Err(e) => e,
                Ok(never) => match never {},
            };
            let _ = child_ch.send_parent(&ToParent::Failed(e), None);
            sys::exit_now(255)
        }
        sys::Forked::Parent(pid) => pid,
    };
    drop(placement);
    drop(child_ch);
    drop(console_sock);
    drop(pidfd);
    // The joiner reports the exec'd process's pid and exits; the exec'd process closes its
    // end of the socket with its execve (success) or sends `Failed` first. Either may
    // write first, so read to EOF.
    let (mut child, mut failure, mut unexpected) = (None, None, false);
    loop {
        match parent_ch.recv_child() {
            Ok((ToParent::InitPid(pid), _)) if child.is_none() => child = Some(pid),
            Ok((ToParent::Failed(f), _)) => failure = failure.or(Some(f)),
            Ok(_) => {
                unexpected = true;
                break;
            }
            Err(_) => break,
        }
    }
    let reap = |pid: i32| {
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    };
    reap(joiner);
    let kill = |pid: Option<i32>, e: ExecError| {
        if let Some(pid) = pid {
            let _ = sys::kill(pid, libc::SIGKILL);
            reap(pid);
        }
        e
    };
    if unexpected {
        return Err(kill(
            child,
            ExecError::Init(InitFailure::new(Step::Sync, "unexpected message")),
        ));
    }
    if let Some(f) = failure {
        return Err(kill(child, f.into()));
    }
    let Some(child) = child else {
        return Err(ExecError::Init(InitFailure::new(
            Step::Namespaces,
            "the process joining the container exited before forking the exec'd process",
        )));
    };
    if let Some(pf) = &opts.pid_file {
        crate::state::write_pid_file(pf, child)?;
    }
    let console = match &relay {
        Some(sock) => {
            sys::recv_with_fd(sock.as_fd(), &mut [0u8; 64])
                .map_err(io("receive the pty master"))?
                .1
        }
        None => None,
    };
    Ok(Started {
        pid: child,
        console,
    })
}

enum Never {}

/// The joiner: a fork of `moat exec` that never appears in the container's pid
/// namespace. It enters the container's namespaces — the user namespace first, then the
/// mount namespace, which makes the container's root its root and cwd — and the pid
/// (and time) namespace for its children only; then it forks the process that will exec,
/// which is thus born in the container's pid namespace already inside its root. Were
/// that process born there on the host's root (as the child of a `setns(CLONE_NEWPID)`
/// made before the fork would be), a container process with CAP_SYS_PTRACE over it
/// could open `/proc/<pid>/root` and reach the host's `/` before the join; being
/// non-dumpable does not stop a holder of that capability. The process is non-dumpable
/// from here to its execve (the flag is inherited with the memory at fork).
fn join(
    attrs: &Attrs,
    placement: Placement,
    pidfd: &OwnedFd,
    flags: libc::c_int,
    ch: &sync::Channel,
    console_sock: Option<&OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    super::create::enter_cgroup(placement)?;
    sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    // Still on the host, with the caller's privileges (raising a hard limit needs them);
    // the exec'd process inherits them.
    for &(res, soft, hard) in &attrs.rlimits {
        sys::prlimit(0, res, soft, hard).step(Step::Exec, || {
            format!("setrlimit {res} on the exec'd process")
        })?;
    }
    // Still in moat's own pid and mount namespaces: moat's own procfs, which the exec'd
    // process keeps (it names itself through the handle's `thread-self`, so the host
    // numbering is right for it).
    super::procfs::open_own()?;
    // One setns for all: the kernel joins the user namespace first, then the others with
    // the capabilities that gives (which is how an unprivileged caller joins them).
    if flags != 0 {
        sys::setns(pidfd.as_fd(), flags).step(Step::Namespaces, || {
            format!("join the container's namespaces ({flags:#x})")
        })?;
    }
    // Nothing the exec'd process (visible in the container until its execve) does not
    // need: not the init's pidfd, not the host's log file.
    sys::close_raw(pidfd.as_fd());
    crate::log::close_file();
    // CLONE_PARENT: the exec'd process is `moat exec`'s child, which waits for it.
    match sys::clone_fork(libc::CLONE_PARENT as u64, None)
        .step(Step::Namespaces, || "fork the exec'd process".into())?
    {
        sys::Forked::Child => child(attrs, console_sock, probe),
        sys::Forked::Parent(pid) => {
            if ch.send_parent(&ToParent::InitPid(pid), None).is_err() {
                // Nobody would wait for it.
                let _ = sys::kill(pid, libc::SIGKILL);
            }
            sys::exit_now(0)
        }
    }
}

/// The exec'd process, in the container's namespaces and root from birth.
fn child(attrs: &Attrs, console_sock: Option<&OwnedFd>, probe: bool) -> Result<Never, InitFailure> {
    // The container's root: after the mount namespace join, "/" is that namespace's root
    // (no component of the container's tree is looked up to reach it). Everything below it
    // (the pty, the cwd) is resolved from this fd.
    let root = Root::open(std::path::Path::new("/")).step(Step::Exec, || "open /".into())?;
    if attrs.terminal {
        let (master, peer) = console::open_pty(&root)?;
        if let Some(sock) = console_sock {
            console::send_master(sock.as_fd(), master.as_fd(), attrs.console_size)?;
        }
        drop(master);
        console::make_stdio(&peer)?;
    } else {
        // A session of its own, as the init has: never the caller's controlling terminal.
        sys::setsid().step(Step::Console, || "setsid".into())?;
    }
    let (exe, _listener) = attrs.apply(root.fd())?;
    drop(root);
    if probe {
        // Exiting closes the sync socket, which the parent reads as success.
        sys::exit_now(run_probes());
    }
    Err(attrs.exec(&exe))
}
