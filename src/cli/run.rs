//! `moat run`: create + start; in the foreground, wait, forward signals, exit with the
//! container's status (128+N for a signal), then delete unless `--keep`.

use anyhow::Context;

use super::{create, Global, Result};
use crate::container::{delete, start};
use crate::linux::signal;
use crate::state::{ContainerDir, StateError};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub create: create::Args,
    /// Detach from the container's process
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Do not delete the container after it exits
    #[arg(long)]
    pub keep: bool,
    /// Accepted for compatibility (moat never needs to be a subreaper in detached mode)
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    crate::state::validate_id(&a.create.id)?;
    if let Some(sel) = crate::gvisor::select(&a.create.bundle)? {
        return crate::gvisor::run(&g.context()?, &a.request(), sel);
    }
    // Block forwarded signals before the container exists, so none is lost; the init
    // resets its mask before exec.
    let set = signal::forwarded_set();
    if !a.detach {
        set.thread_block().context("block signals")?;
    }
    let (dir, created) = create::create(g, &a.create, !a.detach)?;
    let rec = created.record;
    if let Err(e) = start::native(&dir, &rec) {
        let _ = delete::force_delete(dir, &rec);
        create::userns_release(g, &rec.id);
        return Err(e);
    }
    if a.detach {
        return Ok(0);
    }
    // The state lock is only for the create: held while the container runs, it would
    // block `kill`, `delete --force` (and anything else that locks) until it exits.
    let root = dir
        .path
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    drop(dir);
    let pidfd = created.pidfd.context("no pidfd for the init")?;
    let status = signal::forward_and_wait(rec.pid, &pidfd, &set, created.console.as_ref())?;
    if !a.keep {
        match ContainerDir::open(&root, &rec.id) {
            // Unless someone else deleted it meanwhile (and maybe reused the id).
            Ok(dir) => {
                if dir
                    .load()
                    .is_ok_and(|r| r.pid == rec.pid && r.pid_start == rec.pid_start)
                {
                    delete::force_delete(dir, &rec)?;
                    create::userns_release(g, &rec.id);
                }
            }
            Err(StateError::NotExist) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(status)
}

impl Args {
    /// The flags as the lifecycle layer takes them (`--no-subreaper` means nothing to moat).
    pub fn request(&self) -> crate::container::create::RunRequest {
        crate::container::create::RunRequest {
            create: self.create.request(),
            detach: self.detach,
            keep: self.keep,
        }
    }
}
