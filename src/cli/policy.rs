//! `moat policy explain --bundle DIR`: what the policy would change in a bundle's spec
//! (`report::explain`); `moat policy table`: what RESTRICTED does with every field
//! (`policy::admission`).

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
    /// Print what the policy would change in a bundle's config.json, and why; with an ID,
    /// what it changed in that container (recorded at create)
    Explain {
        #[arg(short = 'b', long, default_value = ".")]
        bundle: PathBuf,
        /// A container's id or a unique prefix of it; without --root, searched in the state
        /// roots of moat, podman, Docker and containerd
        id: Option<String>,
        /// table or json
        #[arg(short = 'f', long, default_value = "table")]
        format: String,
    },
    /// Print what RESTRICTED does with every field of the runtime spec, every mount type
    /// and the capabilities that void a promise (the admission table)
    Table {
        /// markdown or json
        #[arg(short = 'f', long, default_value = "markdown")]
        format: String,
    },
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let (bundle, format, id) = match a.command {
        Sub::Explain { bundle, format, id } => (bundle, format, id),
        Sub::Table { format } => return crate::report::explain::table(&format),
    };
    if let Some(id) = id {
        let ctx = g.context()?;
        let (root, id) = crate::container::lookup::find(&ctx, g.root.is_some(), &id)?;
        return crate::report::explain::recorded(&root.path, &id, &format);
    }
    explain(&ExplainRequest { bundle, format })
}
