//! `kill [--all] <id> [signal]`.

use super::{Container, Context, Error, Result};
use crate::linux::signal;
use crate::state::Status;

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
        // containerd's shim sends `kill --all <id> 9` after every exit: that must succeed.
        if all {
            return Ok(());
        }
        return Err(Error::NotRunning.into());
    }
    if all {
        if let Some(cg) = &rec.cgroup {
            for pid in cg.pids().unwrap_or_default() {
                let _ = crate::linux::sys::kill(pid, sig);
            }
        }
    }
    if !signal::signal_init(rec, sig)? && !all {
        return Err(Error::NotRunning.into());
    }
    Ok(())
}
