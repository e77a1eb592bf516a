//! `moat state <id>`: the OCI state JSON, from the record and the live process.

use anyhow::Context;

use super::{Global, Result};
use crate::state::ContainerDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    pub id: String,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let dir = ContainerDir::open_read(&g.state_root()?, &a.id)?;
    let rec = dir.load().context(a.id.clone())?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::state(&g.context()?, &rec, gv);
    }
    let st = rec.oci_state(rec.status(&dir));
    println!("{}", serde_json::to_string_pretty(&st)?);
    Ok(0)
}
