//! moat's own commands find a container by a unique id prefix and, without `--root`, in
//! the state roots engines give moat (containerd's is used here: a namespace directory of
//! this test's own); runc's commands keep exact ids.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// A containerd namespace root of this test (`/run/containerd/runc/<ns>`), removed on
/// drop with the parents it had to make.
struct CtdRoot {
    path: PathBuf,
    made: Vec<PathBuf>,
}

impl CtdRoot {
    fn new(tag: &str) -> CtdRoot {
        let path = PathBuf::from(format!(
            "/run/containerd/runc/moat-it-{}-{tag}",
            std::process::id()
        ));
        let mut made = Vec::new();
        for p in ["/run/containerd", "/run/containerd/runc"] {
            if !Path::new(p).exists() {
                fs::create_dir(p).unwrap();
                made.push(PathBuf::from(p));
            }
        }
        made.reverse();
        CtdRoot { path, made }
    }
}

impl Drop for CtdRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
        for p in &self.made {
            let _ = fs::remove_dir(p);
        }
    }
}

/// `moat ARGS…` without `--root` (the test's OPEN config).
fn moat_no_root(ctx: &Ctx, args: &[&str]) -> Out {
    let mut c = Command::new(MOAT);
    c.args(args);
    run_cmd(c, &ctx.io, CALL_TIMEOUT)
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn verify_and_explain_find_a_prefix_in_an_engines_root() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("lookup");
    let ctd = CtdRoot::new("a");
    ctx.root = ctd.path.clone();
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    let prefix = &c.id[..c.id.len() - 2];

    let out = moat_no_root(&ctx, &["verify", prefix]).ok();
    assert!(out.stdout.contains("0 failed"), "{}", out.stdout);
    let said = format!(
        "moat: container {} in {} (containerd, namespace {})",
        c.id,
        ctd.path.display(),
        ctd.path.file_name().unwrap().to_string_lossy()
    );
    assert!(out.stderr.contains(&said), "{}", out.stderr);

    let out = moat_no_root(&ctx, &["policy", "explain", prefix]).ok();
    assert!(
        out.stdout
            .starts_with(&format!("container {}: policy open", c.id)),
        "{}",
        out.stdout
    );

    let out = moat_no_root(&ctx, &["list", "--all-roots"]).ok();
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&c.id))
        .unwrap_or_else(|| panic!("{} not listed: {}", c.id, out.stdout));
    assert!(row.ends_with(&ctd.path.display().to_string()), "{row}");
    assert!(
        out.stdout.lines().next().unwrap().ends_with("ROOT"),
        "{}",
        out.stdout
    );

    // runc's commands keep exact ids: an engine acts on "does not exist".
    let out = c.moat(&["state", prefix]).fails();
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    drop(c);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_ambiguous_prefix_is_an_error_listing_the_candidates() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("lookup-amb");
    ctx.args(&["sleep", "30"]);
    let a = ctx.create_ok("x1");
    let b = ctx.create_ok("x2");
    let prefix = &a.id[..a.id.len() - 1];
    let out = a.moat(&["verify", prefix]).fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("is ambiguous: it names 2 containers")
            && out.stderr.contains(&a.id)
            && out.stderr.contains(&b.id),
        "{}",
        out.stderr
    );
    // An exact id wins over the ids it is a prefix of.
    let c = ctx.create_ok("x");
    let out = c.moat(&["verify", &c.id]).ok();
    assert!(out.stdout.contains("0 failed"), "{}", out.stdout);
}
