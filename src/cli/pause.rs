//! `moat pause` / `moat resume`: freeze and thaw the container's cgroup.

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::state::{ContainerDir, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    pub id: String,
}

pub fn pause(g: &Global, a: Args) -> Result<i32> {
    let dir = ContainerDir::open(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::pause(&g.context()?, &rec, gv);
    }
    match rec.status(&dir) {
        Status::Running => {}
        Status::Paused => bail!("container already paused"),
        _ => bail!("container not running"),
    }
    let cg = rec
        .cgroup
        .as_ref()
        .context("container has no cgroup to freeze")?;
    cg.freeze()?;
    Ok(0)
}

pub fn resume(g: &Global, a: Args) -> Result<i32> {
    let dir = ContainerDir::open(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::resume(&g.context()?, &rec, gv);
    }
    if rec.status(&dir) != Status::Paused {
        bail!("container not paused");
    }
    let cg = rec
        .cgroup
        .as_ref()
        .context("container has no cgroup to thaw")?;
    cg.thaw()?;
    Ok(0)
}
