//! `moat ps [--format table|json] <id> [ps options]`: the container's processes.

use anyhow::bail;

use super::{Global, Result};
use crate::state::ContainerDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    pub id: String,
    /// Options passed to ps(1) (table format only)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    if a.format != "table" && a.format != "json" {
        bail!("invalid format {:?} (want table or json)", a.format);
    }
    let dir = ContainerDir::open_read(&g.state_root(), &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::ps(g, &rec, gv, &a.format, &a.ps_args);
    }
    bail!("ps is not implemented for native containers yet")
}
