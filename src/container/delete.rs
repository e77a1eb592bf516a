//! `delete [--force]`: remove a stopped container (or, forced, any container), and
//! `force_delete`, which `run` uses after a foreground container exits.

use std::time::Duration;

use super::{Context, Error, Result};
use crate::linux::{create::state_json, hooks, signal};
use crate::log;
use crate::state::{budget, idpool, ContainerDir, Record, StateError, Status};

/// runc's `delete` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// Kill the container first if it is still running or paused.
    pub force: bool,
}

pub fn delete(ctx: &Context, req: &Request) -> Result<i32> {
    let dir = match ContainerDir::open(&ctx.root, &req.id) {
        Ok(d) => d,
        // Nothing of it left but maybe its host-wide shares (a delete killed after
        // removing the directory): given back here, not only at the next allocation.
        Err(StateError::NotExist) if req.force => {
            release_host_wide(ctx, &req.id);
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    let rec = match dir.load() {
        Ok(r) => r,
        // A create killed before its first record: the directory, and maybe the cgroup
        // it had planned (empty: no process of the container can be in it yet).
        Err(StateError::Corrupt { .. }) if req.force => {
            let planned = std::fs::read(dir.file(crate::state::CGROUP_PLANNED_FILE))
                .ok()
                .and_then(|b| serde_json::from_slice::<crate::linux::cgroups::Cgroup>(&b).ok());
            if let Some(cg) = planned {
                cg.remove_empty();
            }
            dir.remove()?;
            release_host_wide(ctx, &req.id);
            return Ok(0);
        }
        Err(e) => return Err(e.into()),
    };
    super::engine(&rec).delete(ctx, dir, &rec, req.force)
}

/// The native delete: runc's rules on the status, then everything goes.
pub fn native(ctx: &Context, dir: ContainerDir, rec: &Record, force: bool) -> Result<()> {
    crate::linux::killpoint::at("delete", "parent", "stop");
    match rec.status(&dir) {
        Status::Stopped => {}
        // runc (and crun) delete a created container without --force; callers rely on it.
        Status::Created => stop(rec)?,
        Status::Running | Status::Paused | Status::Creating if force => stop(rec)?,
        s => {
            return Err(Error::DeleteNotStopped {
                id: rec.id.clone(),
                status: s.as_str(),
            }
            .into())
        }
    }
    crate::linux::killpoint::at("delete", "parent", "destroy");
    destroy(dir, rec)?;
    crate::linux::killpoint::at("delete", "parent", "release");
    release_host_wide(ctx, &rec.id);
    Ok(())
}

/// Gives back whatever the container holds host-wide: its range in the userns pool and
/// its bounded root's share of the rootfs budget (a missing pool or ledger is fine).
pub fn release_host_wide(ctx: &Context, id: &str) {
    // A rootless moat never allocates, and may not even open the host-wide pool.
    if ctx.rootless() {
        return;
    }
    idpool::release_or_warn(&ctx.root, id);
    budget::release_or_warn(&ctx.root, id);
}

/// SIGKILL everything in the container and wait for the init to be gone.
fn stop(rec: &Record) -> Result<()> {
    // With a pid namespace of its own, the init's death takes every process of the
    // container (the kernel refuses forks in a namespace whose init is gone). Without
    // one, a process forking faster than a single pass over the cgroup would outlive
    // the init: every process goes, frozen, in rounds until none is left.
    if !rec.own_pidns {
        super::kill::signal_all(rec, libc::SIGKILL)?;
    }
    if let Some(cg) = &rec.cgroup {
        // Frozen tasks cannot die until thawed.
        if cg.is_frozen() {
            let _ = cg.thaw();
        }
    }
    signal::signal_init(rec, libc::SIGKILL)?;
    if !signal::wait_exit(rec, Duration::from_secs(10)) {
        return Err(Error::DeleteKill { pid: rec.pid }.into());
    }
    Ok(())
}

/// Kill whatever is left and remove everything.
pub fn force_delete(dir: ContainerDir, rec: &Record) -> Result<()> {
    if rec.status(&dir) != Status::Stopped {
        stop(rec)?;
    }
    destroy(dir, rec)
}

/// Cgroup, poststop hooks, state directory — in that order, as the spec asks.
pub fn destroy(dir: ContainerDir, rec: &Record) -> Result<()> {
    if let Some(cg) = &rec.cgroup {
        // Without a private pid namespace the init's death does not take its children;
        // with one, its processes may still be on their way out. Either way nothing of
        // the container may outlive its record (and its `moat.userns=auto` range, handed
        // to the next container once released): a cgroup it made must be empty first,
        // or the delete fails and keeps both. A joined cgroup's other processes are not
        // the container's, and the init's orphans can no longer be told from them.
        // A systemd unit that is no longer the one the create started (replaced under
        // the same name, or never proven) holds someone else's processes, if any.
        if !cg.joined && !cg.path.is_empty() && !cg.hierarchies.is_empty() {
            if cg.unit_proven()? {
                cg.kill_all(libc::SIGKILL, super::kill::KILL_BOUND)?;
            } else {
                signal::signal_descendants(rec, libc::SIGKILL);
            }
        }
        crate::linux::killpoint::at("delete", "parent", "cgroup");
        if let Err(e) = cg.remove() {
            log::warn(&format!("remove cgroup: {e}"));
        }
    }
    let spec = rec.may_have_post_hooks().then(|| dir.load_spec().ok());
    if let Some(spec) = spec.flatten() {
        if let Some(h) = spec.hooks.as_ref().filter(|h| !h.poststop.is_empty()) {
            let st = state_json(rec, "stopped", 0);
            if let Err(e) = hooks::run("poststop", &h.poststop, &st) {
                log::warn(&e.to_string());
            }
        }
    }
    // The DNS forwarder exits with the init; a delete does not wait for that, and removes
    // its cgroup (next to the container's).
    crate::linux::egress::forwarder::stop(&dir.file(""), rec.cgroup.as_ref());
    crate::linux::killpoint::at("delete", "parent", "state");
    dir.remove()?;
    Ok(())
}
