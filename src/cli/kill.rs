//! `moat kill [--all] <id> [signal]`.

use anyhow::bail;

use super::{Global, Result};
use crate::linux::signal;
use crate::state::{ContainerDir, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Send the signal to every process in the container's cgroup
    #[arg(short = 'a', long)]
    pub all: bool,
    pub id: String,
    /// Signal name or number (default SIGTERM)
    pub signal: Option<String>,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let sig_name = a.signal.as_deref().unwrap_or("SIGTERM");
    let Some(sig) = signal::parse(sig_name) else {
        bail!("invalid signal {sig_name:?}");
    };
    let dir = ContainerDir::open(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::kill(&g.context()?, &rec, gv, a.all, sig);
    }
    if rec.status(&dir) == Status::Stopped {
        // containerd's shim sends `kill --all <id> 9` after every exit: that must succeed.
        if a.all {
            return Ok(0);
        }
        bail!("container not running");
    }
    if a.all {
        if let Some(cg) = &rec.cgroup {
            for pid in cg.pids().unwrap_or_default() {
                let _ = crate::linux::sys::kill(pid, sig);
            }
        }
    }
    if !signal::signal_init(&rec, sig)? && !a.all {
        bail!("container not running");
    }
    Ok(0)
}
