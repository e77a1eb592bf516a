//! `moat features`: the OCI features structure (`container::features`).

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_g: &Global, _a: Args) -> Result<i32> {
    crate::container::features::print()
}
