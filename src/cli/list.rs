//! `moat list`: every container under the root, as a table or JSON (`container::state`).

use super::{Global, Result};
use crate::container::state::{self, ListRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    /// Print only the ids
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Every well-known state root (moat's, Docker's, containerd's namespaces), with a
    /// ROOT column (moat's own flag; runc has none)
    #[arg(long)]
    pub all_roots: bool,
}

impl Args {
    pub fn request(&self) -> ListRequest {
        ListRequest {
            format: self.format.clone(),
            quiet: self.quiet,
            all_roots: self.all_roots,
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    state::list(&g.context()?, &a.request())
}
