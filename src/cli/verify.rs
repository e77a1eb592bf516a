//! `moat verify <id>`: compare what a container really got with its policy
//! (`container::verify`).

use super::{Global, Result};
use crate::container::verify::{self, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    /// The container: its id or a unique prefix of it; without --root, searched in the
    /// state roots of moat, podman, Docker and containerd
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
    let ctx = g.context()?;
    let (root, id) = crate::container::lookup::find(&ctx, g.root.is_some(), &a.id)?;
    let req = Request { id, ..a.request() };
    verify::verify(&crate::container::lookup::at(&ctx, &root.path), &req)
}
