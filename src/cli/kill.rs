//! `moat kill [--all] <id> [signal]` (`container::kill`).

use super::{Global, Result};
use crate::container::kill::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Send the signal to every process in the container's cgroup
    #[arg(short = 'a', long)]
    pub all: bool,
    pub id: String,
    /// Signal name or number (default SIGTERM)
    pub signal: Option<String>,
}

impl Args {
    pub fn request(&self) -> Request {
        Request {
            id: self.id.clone(),
            all: self.all,
            signal: self.signal.clone(),
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    kill::kill(&g.context()?, &a.request())
}
