//! `moat events [--stats] [--interval 5s] <id>` (`container::events`).

use anyhow::Context as _;

use super::{Global, Result};
use crate::container::events::{self, parse_duration, Request};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Set the stats collection interval
    #[arg(long, default_value = "5s")]
    pub interval: String,
    /// Display the container's stats then exit
    #[arg(long)]
    pub stats: bool,
    pub id: String,
}

impl Args {
    pub fn request(&self) -> Result<Request> {
        let interval = parse_duration(&self.interval)
            .with_context(|| format!("invalid --interval {:?}", self.interval))?;
        Ok(Request {
            id: self.id.clone(),
            interval,
            stats: self.stats,
        })
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    events::events(&g.context()?, &a.request()?)
}
