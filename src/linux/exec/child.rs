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
    crate::linux::killpoint::at("exec", "joiner", "place");
    place(j.attrs, j.placement)?;
    crate::linux::killpoint::at("exec", "joiner", "procfs");
    own_procfs()?;
    crate::linux::killpoint::at("exec", "joiner", "join");
    crate::linux::killpoint::stall("exec", "joiner", "join");
    join_namespaces(j.pidfd, j.flags)?;
    crate::linux::killpoint::at("exec", "joiner", "fork");
    fork_process(j.pidfd, j.ch, j.attrs, j.console_sock, j.probe)
}

/// Row 5: into the v1 cgroups (the v2 one came with the clone), non-dumpable, and the
/// rlimits set while still on the host with the caller's privileges (raising a hard
/// limit needs them); the exec'd process inherits them.
fn place(attrs: &Attrs, placement: Placement) -> Result<(), InitFailure> {
    initial_affinity(attrs)?;
    crate::linux::create::enter_cgroup(placement)?;
    // Neither mask given: every CPU of the cgroup, not the caller's (runc resets only
    // then; with an initial mask alone that one stays).
    if attrs
        .exec_affinity
        .as_ref()
        .is_none_or(|a| a.initial.is_none() && a.final_.is_none())
    {
        crate::linux::affinity::reset();
    }
    sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    for (i, &(res, soft, hard)) in attrs.rlimits.iter().enumerate() {
        sys::prlimit(0, res, soft, hard).step(Step::Exec, || {
            let name = crate::linux::attrs::rlimit_name(res);
            let hint = crate::linux::attrs::rlimit_hint(res, hard);
            format!("process.rlimits[{i}]: setrlimit {name} on the exec'd process{hint}")
        })?;
    }
    Ok(())
}

/// `process.execCPUAffinity.initial`, before the cgroups are entered (on a unified
/// hierarchy the joiner was cloned into the container's cgroup already, and the kernel
/// narrows the mask to its cpuset).
fn initial_affinity(attrs: &Attrs) -> Result<(), InitFailure> {
    match &attrs.exec_affinity {
        Some(a) => a.apply_initial(),
        None => Ok(()),
    }
}

/// `process.execCPUAffinity.final`, the exec'd process's first act: it is in the
/// container's cgroups, whose cpuset reset the mask the joiner had.
fn final_affinity(attrs: &Attrs) -> Result<(), InitFailure> {
    match &attrs.exec_affinity {
        Some(a) => a.apply_final(),
        None => Ok(()),
    }
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
        sys::Forked::Child => exec_process(attrs, ch, console_sock, probe),
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
    ch: &sync::Channel,
    console_sock: Option<&OwnedFd>,
    probe: bool,
) -> Result<Never, InitFailure> {
    final_affinity(attrs)?;
    crate::linux::killpoint::at("exec", "process", "console");
    let root = console(attrs, console_sock)?;
    if let Some(p) = attrs.personality {
        sys::personality(p).step(Step::Personality, || "linux.personality".into())?;
    }
    crate::linux::killpoint::at("exec", "process", "attrs");
    let exe = apply_attrs(attrs, ch, root)?;
    crate::linux::killpoint::at("exec", "process", "execve");
    execve(attrs, &exe, probe)
}

/// Row 9: the container's root opened, and the pty made stdio (its master sent to the
/// console socket) or a session of its own. After the mount namespace join, "/" is that
/// namespace's root (no component of the container's tree is looked up to reach it);
/// everything below it (the pty, the cwd) is resolved from this fd.
fn console(attrs: &Attrs, console_sock: Option<&OwnedFd>) -> Result<Root, InitFailure> {
    let root = Root::open(std::path::Path::new("/")).step(Step::Exec, || "open /".into())?;
    if attrs.terminal {
        let (master, peer) = console::open_pty(&root)?;
        console::give_to_user(peer.as_fd(), attrs.uid)?;
        if let Some(sock) = console_sock {
            console::send_master(
                sock.as_fd(),
                master.as_fd(),
                attrs.console_size,
                attrs.clear_onlcr,
            )?;
        }
        drop(master);
        console::make_stdio(&peer)?;
    } else {
        // A session of its own, as the init has: never the caller's controlling terminal.
        sys::setsid().step(Step::Console, || "setsid".into())?;
    }
    Ok(root)
}

/// Row 10: [`Attrs::apply`] inside the root (the seccomp listener sent to `moat exec`,
/// which gives it to the agent, the moment its filter is loaded); gives the executable
/// found.
fn apply_attrs(
    attrs: &Attrs,
    ch: &sync::Channel,
    root: Root,
) -> Result<crate::linux::attrs::Exe, InitFailure> {
    let exe = attrs.apply(root.fd(), &mut |listener| {
        ch.send_parent(&ToParent::Listener, Some(listener.as_fd()))
            .step(Step::Seccomp, || "send the listener to moat".into())
    })?;
    drop(root);
    Ok(exe)
}

/// Row 11: execve ([`Attrs::exec`]); a probe tries its calls instead and
/// exits, which closes the sync socket (read by the parent as success).
fn execve(
    attrs: &Attrs,
    exe: &crate::linux::attrs::Exe,
    probe: bool,
) -> Result<Never, InitFailure> {
    if probe {
        sys::exit_now(super::run_probes());
    }
    Err(attrs.exec(exe))
}

/// The joiner (rows 5–8) and the exec'd process (9–11) under the recording fake of `sys`
/// (no kernel, no root): the fake's clone answers "child", so one run goes through both.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::hostfacts::HostFacts;
    use crate::linux::sys::record::{self, assert_before, named, position, Call, Fake, Reply};

    const PROC_SUPER_MAGIC: u64 = 0x9fa0;
    const DEVPTS_SUPER_MAGIC: u64 = 0x1cd1;

    /// An exec'd process: a user with two capabilities, NNP, an rlimit, a seccomp filter.
    fn attrs() -> Attrs {
        let p: crate::spec::Process = serde_json::from_value(serde_json::json!({
            "args": ["/bin/app"],
            "cwd": "/",
            "env": ["PATH=/bin"],
            "user": {"uid": 1000, "gid": 1000},
            "noNewPrivileges": true,
            "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 1024, "hard": 1024}],
            "capabilities": {"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"],
                             "permitted": ["CAP_CHOWN"]},
        }))
        .expect("the process");
        let sc: crate::spec::Seccomp = serde_json::from_value(serde_json::json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"}],
        }))
        .expect("the profile");
        let filter = crate::linux::seccomp::compile(&sc).expect("compiles");
        Attrs::from_process(&p, "process", vec![filter], 0)
            .expect("the attrs")
            .on_host(&HostFacts::default())
    }

    const ALL: libc::c_int = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWCGROUP;

    fn record() -> Vec<Call> {
        record_with(attrs())
    }

    fn record_with(attrs: Attrs) -> Vec<Call> {
        let (_parent, ch) = sync::pair().expect("socketpair");
        let fake = Fake::new()
            .name_fd(ch.sock.as_fd(), "sync")
            .reply("fstatfs", Reply::Statfs(PROC_SUPER_MAGIC))
            .reply("readlinkat", Reply::Bytes(b"7/task/7".to_vec()))
            // The fake's procfs handle is the root of a procfs.
            .then(
                "fstat",
                Reply::Stat {
                    mode: libc::S_IFDIR | 0o555,
                    rdev: 0,
                    ino: 1,
                },
            );
        let fake = if attrs.terminal {
            // The exec'd process's first fstatfs and fstat: its ptmx, a devpts one.
            fake.after("clone_fork", "fstatfs", Reply::Statfs(DEVPTS_SUPER_MAGIC))
                .after(
                    "clone_fork",
                    "fstat",
                    Reply::Stat {
                        mode: libc::S_IFCHR | 0o666,
                        rdev: libc::makedev(5, 2),
                        ino: 2,
                    },
                )
        } else {
            fake
        };
        let (failure, calls) = fake.run(move || {
            let pidfd = record::fd("pidfd");
            let j = Joining {
                attrs: &attrs,
                placement: Placement::v1(vec![(
                    "/sys/fs/cgroup/pids/moat/c/tasks".into(),
                    record::fd("tasks:pids"),
                )]),
                pidfd: &pidfd,
                flags: ALL,
                ch: &ch,
                console_sock: None,
                probe: false,
            };
            match joiner(j) {
                Ok(never) => match never {},
                Err(e) => e,
            }
        });
        crate::linux::create::reached_execve(&failure, &calls);
        calls
    }

    #[test]
    fn exec_order() {
        let calls = record();
        let tasks = |c: &Call| c.name == "write" && c.arg("fd") == Some("tasks:pids");
        let dumpable = |c: &Call| {
            c.name.starts_with("prctl")
                && c.arg("option") == Some(&libc::PR_SET_DUMPABLE.to_string())
        };
        let setns = named("setns");
        let fork = named("clone_fork");
        // Row 5: cgroup placement, non-dumpable and the rlimits before the first setns.
        assert_before(&calls, ("cgroup placement", tasks), ("setns", &setns));
        assert_before(
            &calls,
            ("cgroup placement", tasks),
            ("PR_SET_DUMPABLE", dumpable),
        );
        assert_before(&calls, ("PR_SET_DUMPABLE", dumpable), ("setns", &setns));
        assert_before(&calls, ("prlimit", named("prlimit")), ("setns", &setns));
        // Row 6: moat's own procfs (a new instance) before joining anything.
        assert_before(
            &calls,
            ("procfs handle", |c: &Call| {
                c.name == "fsopen" && c.arg("fstype") == Some("\"proc\"")
            }),
            ("setns", &setns),
        );
        // Row 7: every namespace joined, in one setns on the init's pidfd.
        let i = position(&calls, "setns", &setns);
        assert_eq!(calls[i].arg("fd"), Some("pidfd"), "{}", calls[i]);
        assert_eq!(calls[i].arg("nstype"), Some(ALL.to_string().as_str()));
        // Row 8: all setns before the fork; the pidfd closed before it.
        assert_before(&calls, ("setns", &setns), ("fork", &fork));
        assert_before(
            &calls,
            ("close pidfd", |c: &Call| {
                c.name == "close_raw" && c.arg("fd") == Some("pidfd")
            }),
            ("fork", &fork),
        );
        // Rows 9–11, in the exec'd process: the root opened and a session, then
        // attrs::apply (its first call: NNP here), the fd sweep (close_range) in it, execve last.
        let root = |c: &Call| c.name == "openat" && c.arg("path") == Some("\"/\"");
        assert_before(&calls, ("fork", &fork), ("open /", root));
        assert_before(&calls, ("open /", root), ("setsid", named("setsid")));
        let nnp = |c: &Call| {
            c.name.starts_with("prctl")
                && c.arg("option") == Some(&libc::PR_SET_NO_NEW_PRIVS.to_string())
        };
        assert_before(
            &calls,
            ("setsid", named("setsid")),
            ("attrs::apply (NNP)", nnp),
        );
        assert_before(
            &calls,
            ("close_range", named("close_range_from")),
            ("execve", named("execve")),
        );
        let last = calls.last().expect("calls");
        assert_eq!(last.name, "execve", "{}", record::show(&calls));
    }

    /// `exec -t`: the pty peer is given to the process's uid by its fd (never a
    /// `/dev/pts/N` path), before it becomes stdio and before the uid switch.
    #[test]
    fn exec_pty_belongs_to_the_user_before_the_uid_switch() {
        let mut attrs = attrs();
        attrs.terminal = true;
        let calls = record_with(attrs);
        let peer = position(&calls, "pty_peer", named("pty_peer"));
        let owner = position(&calls, "set_pty_owner", named("set_pty_owner"));
        assert!(peer < owner, "{}", record::show(&calls));
        assert_eq!(calls[owner].arg("uid"), Some("1000"), "{}", calls[owner]);
        assert_eq!(
            calls[owner].arg("fd"),
            calls[peer].ret.as_deref(),
            "the peer's fd: {}",
            record::show(&calls)
        );
        assert_before(
            &calls,
            ("set_pty_owner", named("set_pty_owner")),
            ("dup2 onto stdio", named("dup2")),
        );
        assert_before(
            &calls,
            ("set_pty_owner", named("set_pty_owner")),
            ("setresuid", named("setresuid")),
        );
    }
}
