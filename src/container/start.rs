//! `start`: release a created container's init (step 11 of create, run by a later call).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use anyhow::Context as _;

use super::{Container, Context, Error, Result};
use crate::linux::{create::state_json, hooks, notify};
use crate::log;
use crate::state::{self, ContainerDir, Record, Status};

/// runc's `start` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
}

pub fn start(ctx: &Context, req: &Request) -> Result<i32> {
    let c = Container::open(ctx, &req.id)?;
    c.engine().start(ctx, &c)
}

/// Writes the exec fifo (the init is blocked reading it), removes it, runs poststart hooks.
pub fn native(dir: &ContainerDir, rec: &Record) -> Result<()> {
    match rec.status(dir) {
        Status::Created => {}
        Status::Stopped => return Err(Error::StartStopped.into()),
        Status::Running | Status::Paused => return Err(Error::StartRunning.into()),
        Status::Creating => return Err(Error::StartCreating.into()),
    }
    // The init holds the container's socket until it execs: take a copy first.
    let notify = match &rec.notify_socket {
        Some(_) => Some(
            notify::take(dir, rec.pid)
                .context("NOTIFY_SOCKET: take the container's socket from its init")?,
        ),
        None => None,
    };
    crate::linux::killpoint::at("start", "parent", "Start");
    let fifo = dir.file(state::FIFO_FILE);
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo)
    {
        Ok(f) => f,
        // No reader: the init died between create and start.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(Error::StartStopped.into()),
        Err(source) => {
            return Err(Error::StartFifo {
                op: "open",
                path: fifo,
                source,
            }
            .into())
        }
    };
    let fifo_err = |op, source| Error::StartFifo {
        op,
        path: fifo.clone(),
        source,
    };
    // The saved spec only for a hook to run (or, below, the budget of a slow init).
    let spec = match rec.may_have_post_hooks() {
        true => Some(dir.load_spec()?),
        false => None,
    };
    f.write_all(b"0").map_err(|e| fifo_err("write", e))?;
    std::fs::remove_file(&fifo).map_err(|e| fifo_err("remove", e))?;
    // poststart hooks run once the process has started. The init holds the fifo's read
    // end (close-on-exec) through its startContainer hooks until it execs, so the last
    // reader going away (POLLERR on our write end) is that moment, or its death.
    let wait_err = |source| Error::StartWait {
        id: rec.id.clone(),
        source,
    };
    // The plain case answers at once; only an init that takes longer costs the config's
    // read (for `[runtime] sync_timeout`).
    const AT_ONCE: Duration = Duration::from_millis(100);
    if !wait_no_readers(&f, Some(AT_ONCE)).map_err(wait_err)? {
        let spec = match spec.as_ref() {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(dir.load_spec()?),
        };
        let budget = start_budget(&spec, crate::policy::Config::load()?.sync_timeout);
        if !wait_no_readers(&f, budget.map(|b| b.saturating_sub(AT_ONCE))).map_err(wait_err)? {
            // Never a half-started container: the init that did not exec is ended (it
            // would otherwise run later, after start has reported failure).
            if rec.alive() {
                let _ = crate::linux::sys::kill(rec.pid, libc::SIGKILL);
            }
            return Err(Error::StartTimeout {
                id: rec.id.clone(),
                secs: budget.unwrap_or_default().as_secs(),
            }
            .into());
        }
    }
    log::debug_with(|| format!("container {}: init {} started", rec.id, rec.pid));
    if let (Some(sock), Some(host)) = (&notify, &rec.notify_socket) {
        notify::relay(sock, host, rec.pid).context("NOTIFY_SOCKET: relay to the caller")?;
    }
    let hooks = spec.as_ref().and_then(|s| s.hooks.as_ref());
    if let Some(h) = hooks.filter(|h| !h.poststart.is_empty()) {
        let st = state_json(rec, "running", rec.pid);
        // The process is already running: a failing poststart hook is reported, not fatal.
        if let Err(e) = hooks::run("poststart", &h.poststart, &st) {
            log::warn(&e.to_string());
        }
    }
    Ok(())
}

/// How long the init may take from the fifo to its execve: `[runtime] sync_timeout` (as
/// for each answer of the init during create) plus the startContainer hooks' own
/// timeouts; unbounded only when one of those hooks has none (hooks keep the spec's
/// timeout, as runc).
fn start_budget(spec: &crate::spec::Spec, sync_timeout: u32) -> Option<Duration> {
    let hooks = spec.hooks.as_ref().map(|h| h.start_container.as_slice());
    let mut secs = u64::from(sync_timeout);
    for h in hooks.unwrap_or_default() {
        secs = secs.saturating_add(u64::try_from(h.timeout?).unwrap_or(0));
    }
    Some(Duration::from_secs(secs))
}

/// Waits until the fifo has no reader left (true), at most `timeout` (false then).
fn wait_no_readers(f: &std::fs::File, timeout: Option<Duration>) -> std::io::Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let left = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d
                    .saturating_duration_since(std::time::Instant::now())
                    .as_millis();
                PollTimeout::try_from(i32::try_from(ms).unwrap_or(i32::MAX))
                    .unwrap_or(PollTimeout::MAX)
            }
        };
        // No events asked: poll returns only for POLLERR (no reader left) or POLLHUP.
        let mut fds = [PollFd::new(f.as_fd(), PollFlags::empty())];
        match poll(&mut fds, left) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
