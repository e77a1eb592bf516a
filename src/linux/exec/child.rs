//! The forks' rows of the exec table: the joiner (5–8), a fork of `moat exec` that never
//! appears in the container's pid namespace, and the exec'd process (9–11), the joiner's
//! fork, born in the container's pid namespace already inside its root.
//!
//! The joiner enters the container's namespaces — the user namespace first, then the
//! mount namespace, which makes the container's root its root and cwd — and the pid
//! (and time) namespace for its children only; then it forks the process that will exec.
//! Were that process born in the pid namespace on the host's root (as the child of a
//! `setns(CLONE_NEWPID)` made before the fork would be), a container process with
//! CAP_SYS_PTRACE over it could open `/proc/<pid>/root` and reach the host's `/` before
//! the join; being non-dumpable does not stop a holder of that capability. Both are
//! non-dumpable from row 5 to the execve (the flag is inherited with the memory at fork).

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};

use crate::linux::attrs::Attrs;
use crate::linux::cgroups::Placement;
use crate::linux::path::Root;
use crate::linux::sync::{self, InitFailure, Step, StepExt, ToParent};
use crate::linux::{console, sys};

pub(super) enum Never {}

/// What the joiner is given: the plan's handles and its ends of the channels.
pub(super) struct Joining<'a> {
    pub attrs: &'a Attrs,
    pub placement: Placement,
    pub pidfd: &'a OwnedFd,
    pub flags: libc::c_int,
    pub ch: &'a sync::Channel,
    pub console_sock: Option<&'a OwnedFd>,
    pub probe: bool,
}

/// Rows 5–8, then (in the exec'd process) 9–11. Returns only with an error, which the
/// caller sends as `Failed`.
pub(super) fn joiner(j: Joining<'_>) -> Result<Never, InitFailure> {
    place(j.attrs, j.placement)?;
    own_procfs()?;
    join_namespaces(j.pidfd, j.flags)?;
    fork_process(j.pidfd, j.ch, j.attrs, j.console_sock, j.probe)
}

/// Row 5: into the v1 cgroups (the v2 one came with the clone), non-dumpable, and the
/// rlimits set while still on the host with the caller's privileges (raising a hard
/// limit needs them); the exec'd process inherits them.
fn place(attrs: &Attrs, placement: Placement) -> Result<(), InitFailure> {
    crate::linux::create::enter_cgroup(placement)?;
    sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    for &(res, soft, hard) in &attrs.rlimits {
        sys::prlimit(0, res, soft, hard).step(Step::Exec, || {
            format!("setrlimit {res} on the exec'd process")
        })?;
    }
    Ok(())
}

/// Row 6: still in moat's own pid and mount namespaces: moat's own procfs, which the
/// exec'd process keeps (it names itself through the handle's `thread-self`, so the host
/// numbering is right for it).
fn own_procfs() -> Result<(), InitFailure> {
    crate::linux::procfs::open_own()
}

/// Row 7: one setns for all: the kernel joins the user namespace first, then the others
/// with the capabilities that gives (which is how an unprivileged caller joins them).
fn join_namespaces(pidfd: &OwnedFd, flags: libc::c_int) -> Result<(), InitFailure> {
    if flags != 0 {
        sys::setns(pidfd.as_fd(), flags).step(Step::Namespaces, || {
            format!("join the container's namespaces ({flags:#x})")
        })?;
    }
    Ok(())
}

/// Row 8: the exec'd process forked (`CLONE_PARENT`: it is `moat exec`'s child, which
/// waits for it), its pid sent as `ExecPid`; the joiner exits.
fn fork_process(
    pidfd: &OwnedFd,
    ch: &sync::Channel,
    attrs: &Attrs,
    console_sock: Option<&OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    // Nothing the exec'd process (visible in the container until its execve) does not
    // need: not the init's pidfd, not the host's log file.
    sys::close_raw(pidfd.as_fd());
    crate::log::close_file();
    match sys::clone_fork(libc::CLONE_PARENT as u64, None)
        .step(Step::Namespaces, || "fork the exec'd process".into())?
    {
        sys::Forked::Child => exec_process(attrs, console_sock, probe),
        sys::Forked::Parent(pid) => {
            if ch.send_parent(&ToParent::InitPid(pid), None).is_err() {
                // Nobody would wait for it.
                let _ = sys::kill(pid, libc::SIGKILL);
            }
            sys::exit_now(0)
        }
    }
}

/// Rows 9–11: the exec'd process, in the container's namespaces and root from birth.
fn exec_process(
    attrs: &Attrs,
    console_sock: Option<&OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    let root = console(attrs, console_sock)?;
    let (exe, listener) = apply_attrs(attrs, root)?;
    execve(attrs, &exe, listener, probe)
}

/// Row 9: the container's root opened, and the pty made stdio (its master sent to the
/// console socket) or a session of its own. After the mount namespace join, "/" is that
/// namespace's root (no component of the container's tree is looked up to reach it);
/// everything below it (the pty, the cwd) is resolved from this fd.
fn console(attrs: &Attrs, console_sock: Option<&OwnedFd>) -> Result<Root, InitFailure> {
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
    Ok(root)
}

/// Row 10: [`Attrs::apply`] inside the root; gives the executable found and the seccomp
/// listener (kept open until the execve).
fn apply_attrs(attrs: &Attrs, root: Root) -> Result<(CString, Option<OwnedFd>), InitFailure> {
    let applied = attrs.apply(root.fd())?;
    drop(root);
    Ok(applied)
}

/// Row 11: the fd sweep and execve ([`Attrs::exec`]); a probe tries its calls instead and
/// exits, which closes the sync socket (read by the parent as success).
fn execve(
    attrs: &Attrs,
    exe: &CString,
    _listener: Option<OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    if probe {
        sys::exit_now(super::run_probes());
    }
    Err(attrs.exec(exe))
}
