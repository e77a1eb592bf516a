//! `exec`: a new process in a running container.
//!
//! [`exec`] is the operation: the container opened without its lock, a gVisor one handed
//! to runsc, the native path run as the exec table says (`linux/exec/mod.rs`): row 1
//! reads the facts, this file turns the request into the process (`--process` or the
//! flags, the RESTRICTED exec policy) and its attributes, row 2 plans, rows 3–13 run it,
//! and row 14 ([`forward`]) waits.

use std::path::{Path, PathBuf};

use super::{Container, Context};
use crate::linux::attrs::Attrs;
use crate::linux::exec::{self, ExecOpts, Facts, Plan, Started};
use crate::linux::{capabilities, signal, sys};
use crate::spec::Process;
use crate::state::{ContainerDir, Record};

/// The request-level errors of `exec`, each naming what it refuses.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("read {}", path.display())]
    ReadProcess {
        path: PathBuf,
        #[source]
        err: std::io::Error,
    },
    #[error("{}: {field}: {msg}", path.display())]
    ProcessJson {
        path: PathBuf,
        field: String,
        msg: String,
    },
    #[error("exec needs a command to run")]
    NoCommand,
    #[error("--user {user:?}: {what} must be a number")]
    UserNotNumber { user: String, what: &'static str },
    #[error("--user {user:?}: {what} out of range")]
    UserOutOfRange { user: String, what: &'static str },
    #[error("--cap {0}: unknown capability")]
    UnknownCap(String),
    #[error("--cap {0}: not in the container's bounding set")]
    CapNotInBounding(String),
    #[error("a detached exec with a terminal needs a --console-socket to send it to")]
    TerminalNeedsConsoleSocket,
    #[error("block signals")]
    BlockSignals(#[source] nix::Error),
    #[error("pidfd_open")]
    Pidfd {
        pid: i32,
        #[source]
        err: std::io::Error,
    },
    /// Waiting for the exec'd process (the message is the kernel's, as it always was).
    #[error("{err}")]
    Wait { pid: i32, err: std::io::Error },
}

/// runc's `exec` flags.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub id: String,
    /// The command and its arguments (ignored with `process`).
    pub command: Vec<String>,
    /// A process.json; the other process flags are then ignored.
    pub process: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    /// Where a pidfd of the exec'd process goes (runc 1.5's `--pidfd-socket`).
    pub pidfd_socket: Option<PathBuf>,
    pub cwd: Option<String>,
    /// `KEY=VALUE`, replacing the container's value of `KEY`.
    pub env: Vec<String>,
    pub tty: bool,
    /// `uid[:gid]`, numbers only.
    pub user: Option<String>,
    pub additional_gids: Vec<u32>,
    pub detach: bool,
    pub pid_file: Option<PathBuf>,
    pub process_label: Option<String>,
    pub apparmor: Option<String>,
    pub no_new_privs: bool,
    /// Capabilities added (never beyond the container's bounding set under RESTRICTED).
    pub cap: Vec<String>,
    pub preserve_fds: u32,
    /// Sub-cgroups of the container's to run in (runc's `[controllers:]path`).
    pub cgroup: Vec<String>,
    pub ignore_paused: bool,
}

/// `moat exec`: runs the request's process in the container `req.id` and returns its exit
/// status (0 when detached).
pub fn exec(ctx: &Context, req: &Request) -> anyhow::Result<i32> {
    super::seal()?;
    let Container { dir, record } = Container::open_read(ctx, &req.id)?;
    super::engine(&record)
        .exec(ctx, dir, &record, req)
        .map_err(|e| name_the_cut(ctx, req, e))
}

/// An exec the kernel refused (EPERM/EACCES: a program needing a capability the policy
/// cut, a denied syscall) in a container whose spec the policy changed: the error ends with
/// the recorded summary, read only on this failure path.
fn name_the_cut(ctx: &Context, req: &Request, e: anyhow::Error) -> anyhow::Error {
    let refused = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<exec::ExecError>(),
            Some(exec::ExecError::Init(f)) if matches!(f.errno, libc::EPERM | libc::EACCES)
        )
    });
    let cut = refused
        .then(|| ContainerDir::open_read(&ctx.root, &req.id).ok())
        .flatten()
        .and_then(|d| d.load_decision().ok().flatten())
        .and_then(|d| crate::policy::recorded_summary(&d, &req.id));
    match cut {
        Some(cut) => {
            let msg = crate::error_text::one_line(e.chain());
            anyhow::anyhow!("{msg}; {cut}")
        }
        None => e,
    }
}

/// The native exec: the table of `linux/exec/`, from row 1.
pub fn native(dir: ContainerDir, rec: &Record, req: &Request) -> anyhow::Result<i32> {
    // exec never passes socket-activation fds (runc neither): LISTEN_* are ignored.
    let inherited = super::before_fork(req.preserve_fds, false)?;
    crate::linux::killpoint::mark("exec", "parent", "facts");
    // Row 1, under the state lock (shared: execs run side by side) held until the exec'd
    // process is in the container's pid namespace (`Plan::hold`). A container deleted
    // while this waited is gone.
    dir.lock_shared()?;
    let facts = Facts::read(&dir, rec, req.ignore_paused)?;
    // `--process` may name an fd the caller passed (`-p <(…)`): read before the sweep.
    let process_file = req.process.as_deref().map(read_process).transpose()?;
    inherited.sweep()?;
    let Facts {
        spec,
        bounding,
        filters,
        host,
        paused,
    } = facts;
    let bounding = (rec.policy != crate::policy::Mode::Open).then_some(bounding);
    let mut process = build_process(req, process_file, spec.process(), bounding)?;
    if rec.policy == crate::policy::Mode::Restricted {
        let removed = crate::policy::restrict_exec(&mut process, spec.process());
        crate::policy::priorities_floor(&process)?;
        if !removed.is_empty() {
            crate::log::debug(&format!(
                "policy: exec capabilities removed: {}",
                removed.join(" ")
            ));
        }
        let cfg = crate::policy::Config::load()?;
        let replaced = crate::policy::restrict_exec_lsm(&mut process, spec.process(), &cfg, &host)?;
        if !replaced.is_empty() {
            crate::log::debug(&format!(
                "policy: exec {} replaced by the container's (not in [restricted])",
                replaced.join(", ")
            ));
        }
    }
    if process.terminal && req.console_socket.is_none() && req.detach {
        return Err(Error::TerminalNeedsConsoleSocket.into());
    }
    let field = if req.process.is_some() {
        "process.json"
    } else {
        "process"
    };
    let mut attrs = Attrs::from_process(&process, field, filters, req.preserve_fds)?
        .memory_policy(spec.linux().memory_policy.as_ref())?
        .on_host(&host);
    attrs.cpuset_cpus = crate::linux::attrs::cpuset_cpus(spec.linux());
    // The container's execution domain, as the init has it (create refused a domain moat
    // does not know, so the saved spec names a known one).
    attrs.personality = spec
        .linux()
        .personality
        .as_ref()
        .and_then(|p| crate::linux::attrs::personality(&p.domain));
    // moat relays the pty (no console socket) to a file or pipe: the program's own bytes.
    attrs.clear_onlcr = attrs.terminal
        && req.console_socket.is_none()
        && !std::io::IsTerminal::is_terminal(&std::io::stdout());
    let opts = ExecOpts {
        console_socket: req.console_socket.clone(),
        pid_file: req.pid_file.clone(),
        sub_cgroup: req.cgroup.clone(),
        seccomp_agent: spec
            .linux()
            .seccomp
            .clone()
            .filter(|sc| sc.listener_path.as_deref().is_some_and(|p| !p.is_empty()))
            .map(|seccomp| exec::SeccompAgent {
                seccomp,
                record: rec.clone(),
            }),
    };
    // Connected before anything runs: nobody listening fails the exec here.
    let pidfd_socket = req
        .pidfd_socket
        .as_deref()
        .map(crate::linux::pidfd::PidfdSocket::connect)
        .transpose()?;
    // Row 2.
    crate::linux::killpoint::mark("exec", "parent", "plan");
    let plan = Plan::new(rec, &attrs, opts)?;
    // Everything is read; the directory's fd stays open only as the lock, which the
    // joiner closes before it joins anything. A paused container's exec'd process
    // freezes on entering the cgroup and would hold the lock until `resume`, which needs
    // it: that exec goes unlocked (a `delete --force` thaws, kills the init and waits
    // for the cgroup to empty).
    let plan = if paused {
        drop(dir);
        plan
    } else {
        plan.hold(dir.into_lock())
    };
    let set = signal::forwarded_set();
    if !req.detach {
        set.thread_block().map_err(Error::BlockSignals)?;
    }
    crate::log::debug_with(|| format!("container {}: exec planned", rec.id));
    // Rows 3–13.
    let started = exec::exec(plan)?;
    crate::log::debug_with(|| format!("container {}: exec'd process {}", rec.id, started.pid));
    if let Some(sock) = pidfd_socket {
        if let Err(e) = sock.send(started.pid, "setns") {
            // The caller asked to hold the process: one it cannot hold does not run on.
            let _ = sys::kill(started.pid, libc::SIGKILL);
            return Err(e.into());
        }
    }
    if req.detach {
        return Ok(0);
    }
    let status = forward(&started, &set)?;
    crate::log::debug_with(|| format!("exec'd process {} exited, status {status}", started.pid));
    Ok(status)
}

/// Row 14: signals forwarded to the exec'd process (blocked before it existed, so none is
/// lost) and its terminal relayed until it exits; its status, 128+N for a signal.
pub fn forward(started: &Started, set: &nix::sys::signal::SigSet) -> Result<i32, Error> {
    let pid = started.pid;
    let pidfd = sys::pidfd_open(pid).map_err(|err| Error::Pidfd { pid, err })?;
    signal::forward_and_wait(pid, &pidfd, set, started.console.as_ref())
        .map_err(|err| Error::Wait { pid, err })
}

/// The `--process` file's bytes.
fn read_process(path: &Path) -> Result<(&Path, Vec<u8>), Error> {
    std::fs::read(path)
        .map(|bytes| (path, bytes))
        .map_err(|err| Error::ReadProcess {
            path: path.to_path_buf(),
            err,
        })
}

/// `bounding`: the container's bounding set, which `--cap` may not exceed (RESTRICTED);
/// `None` under OPEN, where moat does what runc does.
/// `process_file`: the `--process` file as read, with its path.
fn build_process(
    a: &Request,
    process_file: Option<(&Path, Vec<u8>)>,
    spec_process: &Process,
    bounding: Option<u64>,
) -> Result<Process, Error> {
    if let Some((path, bytes)) = process_file {
        // Keys checked first (duplicates, case variants of fields): spec::keys.
        let mut p: Process = crate::spec::from_slice(&bytes).map_err(|e| Error::ProcessJson {
            path: path.to_path_buf(),
            field: e.field,
            msg: e.message,
        })?;
        p.terminal |= a.tty;
        // As runc: a process file without execCPUAffinity runs with the container's.
        if p.exec_cpu_affinity.is_none() {
            p.exec_cpu_affinity = spec_process.exec_cpu_affinity.clone();
        }
        return Ok(p);
    }
    if a.command.is_empty() {
        return Err(Error::NoCommand);
    }
    let mut p = spec_process.clone();
    p.args = a.command.clone();
    p.terminal = a.tty;
    for kv in &a.env {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        p.env
            .retain(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) != key);
        p.env.push(kv.clone());
    }
    if let Some(cwd) = &a.cwd {
        p.cwd = cwd.clone();
    }
    if let Some(u) = &a.user {
        let (uid, gid) = parse_user(u)?;
        p.user.uid = uid;
        p.user.gid = gid.unwrap_or(0);
    }
    if !a.additional_gids.is_empty() {
        p.user.additional_gids = a.additional_gids.clone();
    }
    if a.no_new_privs {
        p.no_new_privileges = Some(true);
    }
    if let Some(aa) = &a.apparmor {
        p.apparmor_profile = Some(aa.clone());
    }
    if let Some(l) = &a.process_label {
        p.selinux_label = Some(l.clone());
    }
    if !a.cap.is_empty() {
        let caps = p.capabilities.get_or_insert_with(Default::default);
        for c in &a.cap {
            let Some(bit) = capabilities::number(c) else {
                return Err(Error::UnknownCap(c.clone()));
            };
            // Never wider than the container: exec must not be a way out of its bounding set.
            if bounding.is_some_and(|b| b & (1 << bit) == 0) {
                return Err(Error::CapNotInBounding(c.clone()));
            }
            let name = capabilities::NAMES[bit as usize].to_string();
            for set in [
                &mut caps.bounding,
                &mut caps.effective,
                &mut caps.permitted,
                &mut caps.ambient,
            ] {
                let v = set.get_or_insert_with(Vec::new);
                if !v.contains(&name) {
                    v.push(name.clone());
                }
            }
        }
    }
    Ok(p)
}

/// `uid[:gid]`, numbers only: a name would be resolved with the host's passwd, and a
/// lenient parser is how users end up as someone else (crun CVE-2026-30892).
pub(crate) fn parse_user(s: &str) -> Result<(u32, Option<u32>), Error> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let num = |v: &str, what: &'static str| -> Result<u32, Error> {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::UserNotNumber {
                user: s.to_string(),
                what,
            });
        }
        v.parse::<u32>()
            .ok()
            .filter(|n| *n != u32::MAX)
            .ok_or_else(|| Error::UserOutOfRange {
                user: s.to_string(),
                what,
            })
    };
    Ok((num(u, "uid")?, g.map(|g| num(g, "gid")).transpose()?))
}

#[cfg(test)]
mod tests {
    use super::parse_user;

    #[test]
    fn user_forms() {
        assert_eq!(parse_user("0").unwrap(), (0, None));
        assert_eq!(parse_user("1000:1000").unwrap(), (1000, Some(1000)));
        for bad in [
            "",
            "root",
            "1000:",
            ":1000",
            "-1",
            "1 ",
            "4294967295",
            "99999999999",
            "1000:x",
        ] {
            assert!(parse_user(bad).is_err(), "{bad:?} accepted");
        }
    }
}
