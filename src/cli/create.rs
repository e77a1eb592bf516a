//! `moat create`.

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {
    pub id: String,
}

pub fn run(_g: &Global, _a: Args) -> Result<i32> {
    anyhow::bail!("not built yet")
}
