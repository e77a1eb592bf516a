//! `kill [--all] <id> [signal]`.

use std::time::Duration;

use super::{Container, Context, Error, Result};
use crate::linux::signal;
use crate::state::{Record, Status};

/// runc's `kill` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// Every process in the container's cgroup, not only the init.
    pub all: bool,
    /// A signal name or number (`None`: SIGTERM).
    pub signal: Option<String>,
}

pub fn kill(ctx: &Context, req: &Request) -> Result<i32> {
    let sig_name = req.signal.as_deref().unwrap_or("SIGTERM");
    let Some(sig) = signal::parse(sig_name) else {
        return Err(Error::KillSignal(sig_name.to_string()).into());
    };
    let c = Container::open(ctx, &req.id)?;
    c.engine().kill(ctx, &c, req.all, sig)
}

pub fn native(c: &Container, all: bool, sig: i32) -> Result<()> {
    let rec = &c.record;
    if rec.status(&c.dir) == Status::Stopped {
        // containerd's shim sends `kill --all <id> 9` after every exit: that must succeed,
        // and reach what the init left behind without a pid namespace of its own.
        if all {
            return signal_all(rec, sig);
        }
        return Err(Error::NotRunning.into());
    }
    if all {
        signal_all(rec, sig)?;
    }
    if !signal::signal_init(rec, sig)? && !all {
        return Err(Error::NotRunning.into());
    }
    Ok(())
}

/// How long a SIGKILL of the whole container may take before moat gives up and says what
/// is left (a fork loop is caught in the first round or two; the bound is for a process
/// stuck in the kernel, which no signal ends).
pub const KILL_BOUND: Duration = Duration::from_secs(5);

/// Sends `sig` to every process of the container. In a cgroup the container made, that
/// is everything in it, frozen (or `cgroup.kill`ed) so that no fork escapes, and SIGKILL
/// repeated until the cgroup is empty (an error naming it and what is left after
/// [`KILL_BOUND`]); in a cgroup it joined, only the init and the descendants proven its
/// own, never the other processes there; the same in a systemd unit that is no longer
/// the one the container's create started.
pub fn signal_all(rec: &Record, sig: i32) -> Result<()> {
    match &rec.cgroup {
        Some(cg)
            if !cg.path.is_empty()
                && !cg.hierarchies.is_empty()
                && !cg.joined
                && cg.unit_proven()? =>
        {
            cg.kill_all(sig, KILL_BOUND)?;
        }
        _ => {
            signal::signal_descendants(rec, sig);
        }
    }
    Ok(())
}
