//! `moat --version`'s commit: `git rev-parse HEAD` when the source is a git checkout;
//! else the `COMMIT` file, which `git archive` fills in (`.gitattributes`: export-subst),
//! so a release tarball names its commit too; else `MOAT_COMMIT` from the environment
//! (a distribution's build); else "unknown (not built from git)".
// `clippy.toml` refuses `Command::output` to the integration tests (their reaper); a build
// script has none.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=MOAT_COMMIT");
    println!("cargo:rerun-if-changed=COMMIT");
    let from_git = git(&["rev-parse", "HEAD"]).filter(|c| c.len() == 40);
    if from_git.is_some() {
        // The commit changes when HEAD moves or the branch it names does.
        for p in ["HEAD", "packed-refs"] {
            if let Some(f) = git(&["rev-parse", "--git-path", p]) {
                println!("cargo:rerun-if-changed={f}");
            }
        }
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            if let Some(f) = git(&["rev-parse", "--git-path", &r]) {
                println!("cargo:rerun-if-changed={f}");
            }
        }
    }
    let from_file = std::fs::read_to_string(Path::new("COMMIT"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()));
    let commit = from_git
        .or(from_file)
        .or_else(|| std::env::var("MOAT_COMMIT").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "unknown (not built from git)".into());
    println!("cargo:rustc-env=MOAT_COMMIT={commit}");
}
