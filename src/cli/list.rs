//! `moat list`: every container under the root, as a table or JSON.

use std::io::Write;

use super::{Global, Result};
use crate::state::{self, ContainerDir};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// table or json
    #[arg(short = 'f', long, default_value = "table")]
    pub format: String,
    /// Print only the ids
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    if a.format != "table" && a.format != "json" {
        anyhow::bail!("invalid format {:?} (want table or json)", a.format);
    }
    let root = g.state_root()?;
    let mut rows = Vec::new();
    for id in state::list_ids(&root)? {
        // A container being deleted concurrently simply drops out of the list.
        let Ok(dir) = ContainerDir::open_read(&root, &id) else {
            continue;
        };
        let Ok(mut rec) = dir.load() else { continue };
        let status = match rec.backend.gvisor().cloned() {
            Some(gv) => {
                let Ok((status, pid)) = crate::gvisor::status(&g.context()?, &rec, &gv) else {
                    continue;
                };
                rec.pid = pid;
                status
            }
            None => rec.status(&dir),
        };
        rows.push((rec, status));
    }
    let mut out = std::io::stdout().lock();
    if a.quiet {
        for (rec, _) in &rows {
            writeln!(out, "{}", rec.id)?;
        }
    } else if a.format == "json" {
        if rows.is_empty() {
            writeln!(out, "null")?;
        } else {
            let list: Vec<_> = rows.iter().map(|(r, s)| r.oci_state(*s)).collect();
            writeln!(out, "{}", serde_json::to_string(&list)?)?;
        }
    } else {
        let mut lines = vec![[
            "ID".to_string(),
            "PID".into(),
            "STATUS".into(),
            "BUNDLE".into(),
            "CREATED".into(),
            "OWNER".into(),
        ]];
        for (r, s) in &rows {
            let st = r.oci_state(*s);
            lines.push([
                r.id.clone(),
                st.pid.to_string(),
                s.as_str().into(),
                r.bundle.display().to_string(),
                r.created.clone(),
                r.owner.clone(),
            ]);
        }
        let widths: Vec<usize> = (0..6)
            .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
            .collect();
        for l in &lines {
            let mut s = String::new();
            for c in 0..6 {
                if c == 5 {
                    s.push_str(&l[c]);
                } else {
                    s.push_str(&format!("{:w$}   ", l[c], w = widths[c]));
                }
            }
            writeln!(out, "{}", s.trim_end())?;
        }
    }
    Ok(0)
}
