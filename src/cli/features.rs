//! `moat features`: the OCI features structure (`report::features`).

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(g: &Global, _a: Args) -> Result<i32> {
    crate::report::features::print(g.criu.as_deref())
}
