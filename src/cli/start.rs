//! `moat start <id>`: release a created container's init (`container::start`).

use super::{Global, Result};
use crate::container::start::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    pub id: String,
}

impl Args {
    pub fn request(&self) -> Request {
        Request {
            id: self.id.clone(),
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    start::start(&g.context()?, &a.request())
}
