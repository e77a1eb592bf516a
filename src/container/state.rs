//! `state` and `list`: the OCI state JSON of one container, or of every container under
//! the root (as a table or JSON), from the record and the live process.

use std::io::Write;

use anyhow::Context as _;

use super::{Container, Context, Error, Result};
use crate::state::{self, ContainerDir};

/// runc's `state` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
}

pub fn state(ctx: &Context, req: &Request) -> Result<i32> {
    let dir = ContainerDir::open_read(&ctx.root, &req.id)?;
    let record = dir.load().context(req.id.clone())?;
    let c = Container { dir, record };
    c.engine().state(ctx, &c)
}

pub fn native(c: &Container) -> Result<()> {
    let st = c.record.oci_state(c.record.status(&c.dir));
    println!("{}", serde_json::to_string_pretty(&st)?);
    Ok(())
}

/// runc's `list` flags.
#[derive(Debug, Clone)]
pub struct ListRequest {
    /// `table` or `json`.
    pub format: String,
    /// Only the ids.
    pub quiet: bool,
}

pub fn list(ctx: &Context, req: &ListRequest) -> Result<i32> {
    if req.format != "table" && req.format != "json" {
        return Err(Error::ListFormat(req.format.clone()).into());
    }
    let mut rows = Vec::new();
    for id in state::list_ids(&ctx.root)? {
        // A container being deleted concurrently simply drops out of the list.
        let Ok(mut c) = Container::open_read(ctx, &id) else {
            continue;
        };
        let Ok((status, pid)) = c.engine().status(ctx, &c) else {
            continue;
        };
        c.record.pid = pid;
        rows.push((c.record, status));
    }
    let mut out = std::io::stdout().lock();
    if req.quiet {
        for (rec, _) in &rows {
            writeln!(out, "{}", rec.id).context("write to standard output")?;
        }
    } else if req.format == "json" {
        if rows.is_empty() {
            writeln!(out, "null").context("write to standard output")?;
        } else {
            let list: Vec<_> = rows.iter().map(|(r, s)| r.oci_state(*s)).collect();
            writeln!(out, "{}", serde_json::to_string(&list)?)
                .context("write to standard output")?;
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
            writeln!(out, "{}", s.trim_end()).context("write to standard output")?;
        }
    }
    Ok(0)
}
