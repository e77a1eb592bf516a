//! Finding a container for moat's own commands (`verify`, `policy explain ID`,
//! `list --all-roots`): a unique id prefix, and without `--root` the state roots the
//! engines give moat. runc's commands (`state`, `kill`, `delete`, …) never come here: they
//! keep exact ids and `--root`, since engines act on "does not exist".

use std::path::{Path, PathBuf};

use super::{Context, Result};
use crate::state;

/// One state root and who puts containers there.
#[derive(Debug, Clone)]
pub struct Root {
    pub path: PathBuf,
    pub engine: String,
}

/// The roots engines pass moat: moat's own default (direct use, and rootful podman, which
/// passes no `--root`), Docker's (every runc-compatible runtime of dockerd gets
/// `<exec-root>/runtime-runc/moby`), containerd's runc shims (`/run/containerd/runc/<ns>`,
/// the v2 shim's and the v1 runtime's default root). Only those that exist.
pub fn well_known(ctx: &Context) -> Vec<Root> {
    let mut roots = vec![Root {
        path: ctx.root.clone(),
        engine: "moat's default: direct use, rootful podman".into(),
    }];
    let docker = Path::new("/run/docker/runtime-runc/moby");
    if docker.is_dir() {
        roots.push(Root {
            path: docker.into(),
            engine: "Docker".into(),
        });
    }
    if let Ok(rd) = std::fs::read_dir("/run/containerd/runc") {
        let mut ns: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        ns.sort();
        for p in ns {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            roots.push(Root {
                path: p,
                engine: format!("containerd, namespace {name}"),
            });
        }
    }
    roots
}

/// The container `query` names: an exact id, else the one id it is a prefix of, in the
/// `--root` given (`explicit`) or in every well-known root. Says on stderr which root it
/// used when it searched.
pub fn find(ctx: &Context, explicit: bool, query: &str) -> Result<(Root, String)> {
    // A prefix obeys the id rules too (no `-` first, no `/`): refused as an id would be.
    state::validate_id(query)?;
    let roots = if explicit {
        vec![Root {
            path: ctx.root.clone(),
            engine: "--root".into(),
        }]
    } else {
        well_known(ctx)
    };
    let mut exact = Vec::new();
    let mut prefixed = Vec::new();
    for r in &roots {
        for id in state::list_ids(&r.path, true).unwrap_or_default() {
            if id == query {
                exact.push((r.clone(), id));
            } else if !query.is_empty() && id.starts_with(query) {
                prefixed.push((r.clone(), id));
            }
        }
    }
    let found = match (exact.len(), prefixed.len()) {
        (1, _) => exact.remove(0),
        (0, 1) => prefixed.remove(0),
        (0, 0) => {
            let searched: Vec<String> =
                roots.iter().map(|r| r.path.display().to_string()).collect();
            anyhow::bail!(
                "container does not exist: no id is or starts with {query:?} in {}",
                searched.join(", ")
            )
        }
        _ => {
            let all: Vec<String> = exact
                .iter()
                .chain(&prefixed)
                .map(|(r, id)| format!("{id} in {}", r.path.display()))
                .collect();
            anyhow::bail!(
                "{query:?} is ambiguous: it names {} containers ({}); give more of the id{}",
                all.len(),
                all.join(", "),
                if explicit { "" } else { " or --root" }
            )
        }
    };
    if !explicit || found.1 != query {
        eprintln!(
            "moat: container {} in {} ({})",
            found.1,
            found.0.path.display(),
            found.0.engine
        );
    }
    Ok(found)
}

/// `ctx` pointed at `root`.
pub fn at(ctx: &Context, root: &Path) -> Context {
    let mut c = ctx.clone();
    c.root = root.to_path_buf();
    c
}
