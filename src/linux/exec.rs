//! `exec`: a new process inside a running container, confined exactly as its init.
//!
//! | # | parent (`moat exec`)                                      | child                                       |
//! |---|-----------------------------------------------------------|---------------------------------------------|
//! | 1 | attributes parsed; the container's compiled seccomp filter loaded from its state | —                    |
//! | 2 | pidfd of the init; unprivileged: joins its user namespace (non-dumpable first); joins its pid (and time) namespace *for children only* | — |
//! | 3 | clone (into the v2 cgroup)                                | non-dumpable; joins the v1 cgroups itself; rlimits |
//! | 4 | —                                                         | setns(pidfd, every other namespace at once)  |
//! | 5 | —                                                         | console; [`Attrs::apply`]: LSM, NNP, seccomp, user, caps, cwd |
//! | 6 | EOF on the sync socket = exec'd; `Failed` = error         | execve (the socket is close-on-exec)        |
//! | 7 | `--pid-file`; detached: done; else wait, forward signals  | —                                           |
//!
//! moat is never executed inside the container: the child is a fork, non-dumpable until
//! execve, so nothing in the container can ptrace it or open its `/proc/<pid>/exe`.

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
    let mut flags = namespaces_of(rec.pid)?;
    if flags & libc::CLONE_NEWUSER != 0 && sys::geteuid() != 0 {
        join_user_namespace(&pidfd)?;
        flags &= !libc::CLONE_NEWUSER;
    }
    // pid and time namespaces apply to children: join them here, the rest in the child.
    let for_children = flags & (libc::CLONE_NEWPID | namespaces::CLONE_NEWTIME);
    if for_children != 0 {
        sys::setns(pidfd.as_fd(), for_children)
            .map_err(io("join the container's pid namespace"))?;
    }
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
    // The child enters the cgroup by itself (see cgroups/placement.rs).
    let placement = match &rec.cgroup {
        Some(cg) => cg.placement(opts.sub_cgroup.as_deref())?,
        None => Placement::none(),
    };
    let child = match sys::clone_fork(0, placement.clone_into()).map_err(io("clone"))? {
        sys::Forked::Child => {
            drop(parent_ch);
            let e = match child(
                attrs,
                placement,
                &pidfd,
                flags & !for_children,
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
    let kill = |e: ExecError| {
        let _ = sys::kill(child, libc::SIGKILL);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
        e
    };
    // On success the socket closes with the child's execve.
    match parent_ch.recv_child() {
        Ok((ToParent::Failed(f), _)) => {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
            return Err(f.into());
        }
        Ok(_) => {
            return Err(kill(ExecError::Init(InitFailure::new(
                Step::Sync,
                "unexpected message",
            ))))
        }
        Err(_) => {}
    }
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

/// Rootless: the container's pid namespace belongs to its user namespace, so an
/// unprivileged caller can only join it from inside that user namespace. Non-dumpable
/// first: this process keeps its host mm, so the container's root, whose capabilities
/// stop at its own user namespace, can neither ptrace it nor open its /proc files.
fn join_user_namespace(pidfd: &OwnedFd) -> Result<(), ExecError> {
    sys::prctl(libc::PR_SET_DUMPABLE, 0).map_err(io("PR_SET_DUMPABLE"))?;
    sys::setns(pidfd.as_fd(), libc::CLONE_NEWUSER)
        .map_err(io("join the container's user namespace"))
}

enum Never {}

fn child(
    attrs: &Attrs,
    placement: Placement,
    pidfd: &OwnedFd,
    flags: libc::c_int,
    console_sock: Option<&OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    super::process::enter_cgroup(placement)?;
    sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    // Still on the host, with the caller's privileges (raising a hard limit needs them).
    for &(res, soft, hard) in &attrs.rlimits {
        sys::prlimit(0, res, soft, hard).step(Step::Exec, || {
            format!("setrlimit {res} on the exec'd process")
        })?;
    }
    if flags != 0 {
        sys::setns(pidfd.as_fd(), flags).step(Step::Namespaces, || {
            format!("join the container's namespaces ({flags:#x})")
        })?;
    }
    if attrs.terminal {
        let root = Root::open(std::path::Path::new("/")).step(Step::Console, || "open /".into())?;
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
    let (exe, _listener) = attrs.apply()?;
    if probe {
        // Exiting closes the sync socket, which the parent reads as success.
        sys::exit_now(run_probes());
    }
    Err(attrs.exec(&exe))
}
