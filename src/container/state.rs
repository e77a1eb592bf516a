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
    /// Every well-known root (`lookup::well_known`), each row naming its root.
    pub all_roots: bool,
}

pub fn list(ctx: &Context, req: &ListRequest) -> Result<i32> {
    if req.format != "table" && req.format != "json" {
        return Err(Error::ListFormat(req.format.clone()).into());
    }
    let mut rows = Vec::new();
    let roots = if req.all_roots {
        super::lookup::well_known(ctx)
    } else {
        vec![super::lookup::Root {
            path: ctx.root.clone(),
            engine: String::new(),
        }]
    };
    let mut row_roots = Vec::new();
    for root in &roots {
        let ctx = &super::lookup::at(ctx, &root.path);
        // A missing default root holds no container yet; a missing `--root` is an error
        // (a mistyped path would otherwise look like an empty host), as runc has it.
        let ids = match state::list_ids(&ctx.root, req.all_roots || !ctx.root_given) {
            Ok(ids) => ids,
            // Another engine's root this caller may not read is left out of --all-roots.
            Err(_) if req.all_roots => continue,
            Err(e) => return Err(e.into()),
        };
        for id in ids {
            // A container being deleted concurrently simply drops out of the list.
            let Ok(mut c) = Container::open_read(ctx, &id) else {
                continue;
            };
            let Ok((status, pid)) = c.engine().status(ctx, &c) else {
                continue;
            };
            c.record.pid = pid;
            rows.push((c.record, status));
            row_roots.push(root.path.display().to_string());
        }
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
            // runc's field order (clients match the line), `root` after it.
            #[derive(serde::Serialize)]
            struct Row<'a> {
                #[serde(flatten)]
                state: crate::state::OciState<'a>,
                #[serde(skip_serializing_if = "Option::is_none")]
                root: Option<&'a str>,
            }
            let list: Vec<Row<'_>> = rows
                .iter()
                .zip(&row_roots)
                .map(|((r, s), root)| Row {
                    state: r.oci_state(*s),
                    root: req.all_roots.then_some(root.as_str()),
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string(&list)?)
                .context("write to standard output")?;
        }
    } else {
        let mut head: Vec<String> = ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]
            .map(String::from)
            .to_vec();
        if req.all_roots {
            head.push("ROOT".into());
        }
        let mut lines = vec![head];
        for ((r, s), root) in rows.iter().zip(&row_roots) {
            let st = r.oci_state(*s);
            let mut l = vec![
                r.id.clone(),
                st.pid.to_string(),
                s.as_str().into(),
                r.bundle.display().to_string(),
                r.created.clone(),
                r.owner.clone(),
            ];
            if req.all_roots {
                l.push(root.clone());
            }
            lines.push(l);
        }
        let n = lines[0].len();
        let widths: Vec<usize> = (0..n)
            .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
            .collect();
        for l in &lines {
            let mut s = String::new();
            for c in 0..n {
                if c == n - 1 {
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
