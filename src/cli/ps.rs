//! `moat ps [--format table|json] <id> [ps options]`: the container's processes.

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::state::ContainerDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    pub id: String,
    /// Options passed to ps(1) (table format only)
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub ps_args: Vec<String>,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    if a.format != "table" && a.format != "json" {
        bail!("invalid format {:?} (want table or json)", a.format);
    }
    let dir = ContainerDir::open_read(&g.state_root(), &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::ps(g, &rec, gv, &a.format, &a.ps_args);
    }
    let mut pids = match &rec.cgroup {
        Some(cg) => cg.pids()?,
        None if rec.alive() => vec![rec.pid],
        None => Vec::new(),
    };
    pids.sort_unstable();
    if a.format == "json" {
        println!("{}", serde_json::to_string(&pids)?);
        return Ok(0);
    }
    // As runc: ps(1) with the given options (default -ef), filtered to the container's pids.
    let args = if a.ps_args.is_empty() {
        vec!["-ef".to_string()]
    } else {
        a.ps_args.clone()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .context("run ps")?;
    if !out.status.success() {
        bail!(
            "ps {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let Some(col) = header.split_whitespace().position(|h| h == "PID") else {
        bail!("ps {}: no PID column in its output", args.join(" "));
    };
    println!("{header}");
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|p| p.parse().ok());
        if pid.is_some_and(|p| pids.binary_search(&p).is_ok()) {
            println!("{line}");
        }
    }
    Ok(0)
}
