//! `moat pause` / `moat resume`: freeze and thaw the container (`container::pause`).

use super::{Global, Result};
use crate::container::pause::{self, Request};

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

pub fn pause(g: &Global, a: Args) -> Result<i32> {
    pause::pause(&g.context()?, &a.request())
}

pub fn resume(g: &Global, a: Args) -> Result<i32> {
    pause::resume(&g.context()?, &a.request())
}
