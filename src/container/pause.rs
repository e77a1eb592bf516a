//! `pause` / `resume`: freeze and thaw the container's cgroup.

use super::{Container, Context, Error, Result};
use crate::state::Status;

/// runc's `pause` and `resume` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
}

pub fn pause(ctx: &Context, req: &Request) -> Result<i32> {
    let c = Container::open(ctx, &req.id)?;
    c.engine().pause(ctx, &c)
}

pub fn resume(ctx: &Context, req: &Request) -> Result<i32> {
    let c = Container::open(ctx, &req.id)?;
    c.engine().resume(ctx, &c)
}

pub fn native_pause(c: &Container) -> Result<()> {
    match c.record.status(&c.dir) {
        Status::Running => {}
        Status::Paused => return Err(Error::PauseAlreadyPaused.into()),
        _ => return Err(Error::NotRunning.into()),
    }
    let cg = c
        .record
        .cgroup
        .as_ref()
        .ok_or(Error::FreezeNoCgroup("freeze"))?;
    cg.freeze()?;
    Ok(())
}

pub fn native_resume(c: &Container) -> Result<()> {
    if c.record.status(&c.dir) != Status::Paused {
        return Err(Error::ResumeNotPaused.into());
    }
    let cg = c
        .record
        .cgroup
        .as_ref()
        .ok_or(Error::FreezeNoCgroup("thaw"))?;
    cg.thaw()?;
    Ok(())
}
