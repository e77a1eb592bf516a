//! `moat check`: what this host offers, and what each moat control will do here
//! (`report::check`).

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(g: &Global, _a: Args) -> Result<i32> {
    crate::report::check::report(g.criu.as_deref())
}
