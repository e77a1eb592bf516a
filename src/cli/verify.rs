//! `moat verify <id>`: compare what a container really got with its policy
//! (`container::verify`).

use super::{Global, Result};
use crate::container::verify::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    pub id: String,
}

impl Args {
    pub fn request(&self) -> Request {
        Request {
            id: self.id.clone(),
            format: self.format.clone(),
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    verify::verify(&g.context()?, &a.request())
}
