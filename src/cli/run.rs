//! `moat run`: create + start; in the foreground, wait, forward signals, exit with the
//! container's status (128+N for a signal), then delete unless `--keep`
//! (`container/create.rs`).

use super::{create, Global, Result};

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
    let ctx = g.context()?;
    crate::container::create::run(&ctx, &a.request())
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
