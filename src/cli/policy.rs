//! `moat policy explain --bundle DIR`: what the policy would change in a bundle's spec
//! (`report::explain`).

use std::path::PathBuf;

use super::{Global, Result};
use crate::report::explain::{explain, ExplainRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Sub,
}

#[derive(clap::Subcommand, Debug)]
pub enum Sub {
    /// Print what the policy would change in a bundle's config.json, and why
    Explain {
        #[arg(short = 'b', long, default_value = ".")]
        bundle: PathBuf,
        /// table or json
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
    },
}

pub fn run(_g: &Global, a: Args) -> Result<i32> {
    let Sub::Explain { bundle, format } = a.command;
    explain(&ExplainRequest { bundle, format })
}
