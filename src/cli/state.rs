//! `moat state <id>`: the OCI state JSON (`container::state`).

use super::{Global, Result};
use crate::container::state::{self, Request};

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
    state::state(&g.context()?, &a.request())
}
