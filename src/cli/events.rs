//! `moat events [--stats] [--interval D] <id>`: resource usage statistics.

use std::time::Duration;

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::state::ContainerDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the statistics once and exit
    #[arg(long)]
    pub stats: bool,
    /// Interval between statistics (Go duration: 5s, 500ms, 1m)
    #[arg(long, default_value = "5s")]
    pub interval: String,
    pub id: String,
}

/// The subset of Go's duration syntax runc users write: `<number><unit>` terms.
fn parse_duration(s: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    (total > 0.0).then(|| Duration::from_secs_f64(total))
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let interval = parse_duration(&a.interval)
        .with_context(|| format!("--interval {:?}: want a duration such as 5s", a.interval))?;
    let dir = ContainerDir::open_read(&g.state_root(), &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::events(g, &rec, gv, a.stats, interval);
    }
    bail!("events is not implemented for native containers yet")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "5", "s", "0s", "5x"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
