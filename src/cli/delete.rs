//! `moat delete [--force] <id>`: remove a stopped container (or, forced, any container;
//! `container::delete`).

use super::{Global, Result};
use crate::container::delete::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Kill the container first if it is still running or paused
    #[arg(short = 'f', long)]
    pub force: bool,
    pub id: String,
}

impl Args {
    pub fn request(&self) -> Request {
        Request {
            id: self.id.clone(),
            force: self.force,
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    delete::delete(&g.context()?, &a.request())
}
