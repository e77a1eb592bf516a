//! `moat delete [--force] <id>`: remove a stopped container (or, forced, any container).

use std::time::Duration;

use anyhow::bail;

use super::{Global, Result};
use crate::linux::{create, hooks, signal, sys};
use crate::log;
use crate::state::{ContainerDir, StateError, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Kill the container first if it is still running or paused
    #[arg(short = 'f', long)]
    pub force: bool,
    pub id: String,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let dir = match ContainerDir::open(&g.state_root()?, &a.id) {
        Ok(d) => d,
        Err(StateError::NotExist) if a.force => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let rec = match dir.load() {
        Ok(r) => r,
        // A create killed before its first record: nothing but the directory exists.
        Err(StateError::Corrupt { .. }) if a.force => {
            dir.remove()?;
            crate::container::create::userns_release(&g.context()?, &a.id);
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(gv) = rec.backend.gvisor().cloned() {
        return crate::gvisor::delete(&g.context()?, dir, &rec, &gv, a.force);
    }
    let status = rec.status(&dir);
    match status {
        Status::Stopped => {}
        // runc (and crun) delete a created container without --force; callers rely on it.
        Status::Created => stop(&rec)?,
        Status::Running | Status::Paused | Status::Creating if a.force => stop(&rec)?,
        s => bail!(
            "cannot delete container {} that is not stopped: {}",
            a.id,
            s.as_str()
        ),
    }
    destroy(dir, &rec)?;
    crate::container::create::userns_release(&g.context()?, &a.id);
    Ok(0)
}

/// SIGKILL everything in the container and wait for the init to be gone.
fn stop(rec: &crate::state::Record) -> Result<()> {
    if let Some(cg) = &rec.cgroup {
        for pid in cg.pids().unwrap_or_default() {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
        // Frozen tasks cannot die until thawed.
        if cg.is_frozen() {
            let _ = cg.thaw();
        }
    }
    signal::signal_init(rec, libc::SIGKILL)?;
    if !signal::wait_exit(rec, Duration::from_secs(10)) {
        bail!("container init {} did not exit after SIGKILL", rec.pid);
    }
    Ok(())
}

/// Kill whatever is left and remove everything.
pub fn force_delete(dir: ContainerDir, rec: &crate::state::Record) -> Result<()> {
    if rec.status(&dir) != Status::Stopped {
        stop(rec)?;
    }
    destroy(dir, rec)
}

/// Cgroup, poststop hooks, state directory — in that order, as the spec asks.
pub fn destroy(dir: ContainerDir, rec: &crate::state::Record) -> Result<()> {
    if let Some(cg) = &rec.cgroup {
        // Without a private pid namespace the init's death does not take its children.
        for pid in cg.pids().unwrap_or_default() {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
        if let Err(e) = cg.remove() {
            log::warn(&format!("remove cgroup: {e}"));
        }
    }
    if let Ok(spec) = dir.load_spec() {
        if let Some(h) = spec.hooks.as_ref().filter(|h| !h.poststop.is_empty()) {
            let st = create::state_json(rec, "stopped", 0);
            if let Err(e) = hooks::run("poststop", &h.poststop, &st) {
                log::warn(&e.to_string());
            }
        }
    }
    dir.remove()?;
    Ok(())
}
