//! The parent's rows of the exec table (3, 4, 12, 13): `moat exec` makes the channels,
//! clones the joiner, reads the sync socket to EOF and reports the pid.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use super::child::{self, Joining};
use super::{ExecError, ExecOpts, Message, Plan, Started};
use crate::linux::attrs::Attrs;
use crate::linux::sync::{self, InitFailure, Step as InitStep, ToParent};
use crate::linux::sys;

/// The parent's and the forks' ends of what row 3 makes.
pub(super) struct Channels {
    parent: sync::Channel,
    child: sync::Channel,
    /// The exec'd process's way to the caller's terminal: the console socket, or our
    /// relay's far end.
    console: Option<OwnedFd>,
    /// Our end of the relay (foreground, terminal, no console socket).
    relay: Option<UnixStream>,
}

/// Row 3: the sync socketpair; the console socket connected, or (foreground exec with a
/// terminal and no console socket) a socketpair over which we get the pty to relay.
pub(super) fn channels(attrs: &Attrs, opts: &ExecOpts, probe: bool) -> Result<Channels, ExecError> {
    let (parent, child) = sync::pair().map_err(ExecError::SyncSocket)?;
    let mut relay = None;
    let console = match &opts.console_socket {
        Some(p) => Some(
            sys::connect_unix(p).map_err(|err| ExecError::ConsoleSocket {
                path: p.clone(),
                err,
            })?,
        ),
        // Foreground exec with a terminal and no console socket: we relay the pty.
        None if attrs.terminal && !probe => {
            let (ours, theirs) = sys::unix_stream_pair().map_err(ExecError::ConsoleRelay)?;
            relay = Some(UnixStream::from(ours));
            Some(theirs)
        }
        None => None,
    };
    Ok(Channels {
        parent,
        child,
        console,
        relay,
    })
}

/// The joiner as the parent holds it: its pid, our end of the sync socket, the relay.
pub(super) struct Joiner {
    pid: i32,
    ch: sync::Channel,
    relay: Option<UnixStream>,
    /// [`Plan::hold`]'s lock, released once the joiner, having forked the exec'd process
    /// into the pid namespace, is reaped (row 12): not held while the exec'd process runs
    /// up to its execve, which a seccomp agent may hold up for as long as it likes.
    hold: Option<OwnedFd>,
}

/// Row 4: clones the joiner (into the v2 cgroup), which runs rows 5–8 (`child.rs`) and
/// never returns here; the parent keeps nothing of the plan's handles.
pub(super) fn clone_joiner(
    plan: Plan<'_>,
    ch: Channels,
    probe: bool,
) -> Result<(Joiner, ExecOpts), ExecError> {
    let Plan {
        attrs,
        pidfd,
        flags,
        placement,
        opts,
        hold,
    } = plan;
    let Channels {
        parent: parent_ch,
        child: child_ch,
        console: console_sock,
        relay,
    } = ch;
    let joiner = match sys::clone_fork(0, placement.clone_into()).map_err(ExecError::Clone)? {
        sys::Forked::Child => {
            // A host directory's fd: not even the joiner keeps it (the parent holds the
            // lock through its own copy).
            drop(hold);
            drop(parent_ch);
            drop(relay);
            let joining = Joining {
                attrs,
                placement,
                pidfd: &pidfd,
                flags,
                ch: &child_ch,
                console_sock: console_sock.as_ref(),
                probe,
            };
            let e = match child::joiner(joining) {
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
    Ok((
        Joiner {
            pid: joiner,
            ch: parent_ch,
            relay,
            hold,
        },
        opts,
    ))
}

/// Row 12: the joiner reports the exec'd process's pid (`ExecPid`) and exits; the exec'd
/// process closes its end of the socket with its execve (success) or sends `Failed`
/// first. Either may write first, so the socket is read to EOF, each message checked
/// against what came before ([`super::Heard`]). Reaps the joiner; on failure kills and
/// reaps the exec'd process.
///
/// The exec'd process's seccomp listener (`Listener`) goes to the agent as soon as both
/// it and the pid have come: the process may already wait in a syscall only the agent
/// answers, so this must not wait for EOF.
pub(super) fn wait_exec(joiner: &mut Joiner, opts: &ExecOpts) -> Result<i32, ExecError> {
    let mut heard = super::Heard::default();
    let mut unexpected = false;
    let mut agent_error = None;
    loop {
        let msg = match joiner.ch.recv_child() {
            Ok((ToParent::InitPid(pid), _)) => Message::ExecPid(pid),
            Ok((ToParent::Listener, Some(fd))) => Message::Listener(fd),
            Ok((ToParent::Failed(f), _)) => Message::Failed(f),
            Ok(_) => {
                unexpected = true;
                break;
            }
            Err(_) => break,
        };
        let exec_pid = matches!(msg, Message::ExecPid(_));
        if heard.hear(msg).is_err() {
            unexpected = true;
            break;
        }
        // The exec'd process is in the pid namespace and the joiner exits right after
        // saying so: once it is reaped, nothing of this exec is outside the namespace, and
        // the state lock goes (`Plan::hold`). A heard pid means the joiner is reaped.
        if exec_pid {
            let _ = sys::waitpid(joiner.pid);
            joiner.hold = None;
        }
        // Only once the pid is known (the joiner's ExecPid may come after the listener):
        // until then the fd stays in `heard`.
        if let (Some(pid), true) = (heard.pid, heard.listener.is_some()) {
            let fd = heard.listener.take().expect("checked");
            // No agent: a probe (`verify`), whose process must not hand the container's
            // agent anything. The listener is closed: its notified calls fail (ENOSYS),
            // which the probe counts as denied.
            let Some(agent) = &opts.seccomp_agent else {
                drop(fd);
                continue;
            };
            let rec = &agent.record;
            if let Err(e) = crate::linux::create::send_listener(
                &agent.seccomp,
                fd,
                rec,
                rec.pid,
                pid,
                "running",
            ) {
                agent_error = Some(e);
                break;
            }
        }
    }
    let reap_joiner = |j: &Joiner| {
        if heard.pid.is_none() {
            let _ = sys::waitpid(j.pid);
        }
    };
    if let Some(e) = agent_error {
        reap_joiner(joiner);
        if let Some(pid) = heard.pid {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::waitpid(pid);
        }
        return Err(ExecError::Listener(Box::new(e)));
    }
    let reap = |pid: i32| {
        let _ = sys::waitpid(pid);
    };
    reap_joiner(joiner);
    let child = heard.pid;
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
            ExecError::Init(InitFailure::new(InitStep::Sync, "unexpected message")),
        ));
    }
    if let Some(f) = heard.failure {
        return Err(kill(child, f.into()));
    }
    let Some(child) = child else {
        return Err(ExecError::Init(InitFailure::new(
            InitStep::Namespaces,
            "the process joining the container exited before forking the exec'd process",
        )));
    };
    Ok(child)
}

/// Row 13: `--pid-file` written; with a relay, the pty master received from the exec'd
/// process.
pub(super) fn report(opts: &ExecOpts, child: i32, joiner: Joiner) -> Result<Started, ExecError> {
    if let Some(pf) = &opts.pid_file {
        crate::state::write_pid_file(pf, child)?;
    }
    let console = match &joiner.relay {
        Some(sock) => {
            sys::recv_with_fd(sock.as_fd(), &mut [0u8; 64])
                .map_err(ExecError::PtyMaster)?
                .1
        }
        None => None,
    };
    Ok(Started {
        pid: child,
        console,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exec'd process may send its seccomp listener before the joiner's `ExecPid`
    /// arrives: the parent keeps the fd until it knows the pid, then gives it to the
    /// agent (before, the fd was dropped when the listener came first, and the agent never
    /// heard of the process).
    #[test]
    fn a_listener_before_the_pid_still_reaches_the_agent() {
        let dir = std::env::temp_dir().join(format!("moat-exec-agent-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.sock");
        let agent = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let record: crate::state::Record = serde_json::from_value(serde_json::json!({
            "format": 1, "id": "c", "pid": 1, "pid_start": 0, "bundle": "/b",
            "rootfs": "/b/rootfs", "created": "", "owner": ""}))
        .unwrap();
        let opts = ExecOpts {
            console_socket: None,
            pid_file: None,
            sub_cgroup: Vec::new(),
            seccomp_agent: Some(super::super::SeccompAgent {
                seccomp: crate::spec::Seccomp {
                    listener_path: Some(path.to_str().unwrap().into()),
                    ..Default::default()
                },
                record,
            }),
        };
        let (parent, child) = sync::pair().unwrap();
        let f = std::fs::File::open("/dev/null").unwrap();
        child
            .send_parent(&ToParent::Listener, Some(f.as_fd()))
            .unwrap();
        child.send_parent(&ToParent::InitPid(4242), None).unwrap();
        drop(child);
        // The joiner to reap: a child of ours that has exited.
        let pid = match sys::clone_fork(0, None).unwrap() {
            sys::Forked::Child => sys::exit_now(0),
            sys::Forked::Parent(pid) => pid,
        };
        let mut joiner = Joiner {
            pid,
            ch: parent,
            relay: None,
            hold: None,
        };
        assert_eq!(wait_exec(&mut joiner, &opts).unwrap(), 4242);
        // wait_exec connected and sent before it returned, if it did.
        agent.set_nonblocking(true).unwrap();
        let (conn, _) = agent.accept().expect("moat exec connected to the agent");
        let mut buf = [0u8; 4096];
        let (n, fd) = sys::recv_with_fd(conn.as_fd(), &mut buf).unwrap();
        let msg: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(msg["pid"], 4242);
        assert!(fd.is_some(), "the listener fd came with the message");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
