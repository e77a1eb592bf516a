//! Upgrades: containers created by the previous moat must still be
//! listed, `state`d, exec'd into, `ps`'d, killed, started and deleted by this one. The
//! previous binary is built from git: `MOAT_UPGRADE_FROM=<rev>`, by default `afd98e2` (the
//! release before the lifecycle layer), exported with `git archive` into a temp dir and
//! built with `cargo build --locked` into its own target dir, `target/moat-upgrade` (so a
//! CI cache keeps it and a second run only links). Without that commit (a shallow clone,
//! no git) the test fails under `MOAT_TEST_STRICT=1` and says SKIPPED elsewhere.

mod support;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::*;

const DEFAULT_FROM: &str = "afd98e2";

/// How long the old build may take (a cold build of every dependency on 2 cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(1200);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The previous binary, built once per test process; `None` (after [`missing`]) when the
/// commit is not in this clone.
fn old_binary() -> Option<&'static Path> {
    static BIN: OnceLock<Option<PathBuf>> = OnceLock::new();
    BIN.get_or_init(build_old).as_deref()
}

/// Runs `cmd` on the host to its end; panics naming `what` if it fails.
#[track_caller]
fn must(cmd: Command, timeout: Duration, what: &str) -> Out {
    let out = run_host_cmd(cmd, timeout);
    assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
    out
}

fn build_old() -> Option<PathBuf> {
    let from = std::env::var("MOAT_UPGRADE_FROM").unwrap_or_else(|_| DEFAULT_FROM.into());
    let target = repo().join("target/moat-upgrade");
    fs::create_dir_all(&target).expect("mkdir target/moat-upgrade");
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    if !on_path("git") {
        missing("upgrade test: git is not installed (the old binary is built from git)");
        return None;
    }
    let mut rev = Command::new("git");
    rev.arg("-C")
        .arg(repo())
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{from}^{{commit}}"));
    let out = run_host_cmd(rev, CALL_TIMEOUT);
    if out.code != 0 {
        missing(&format!(
            "upgrade test: commit {from} (MOAT_UPGRADE_FROM) is not in this clone \
             (a shallow clone or no git history: fetch it, e.g. `git fetch --unshallow`) {}",
            out.stderr.trim()
        ));
        return None;
    }
    let sha = out.stdout.trim().to_string();
    // One build at a time across test processes; a finished one is kept per commit.
    let lock = fs::File::create(target.join("lock")).expect("lock file");
    assert_eq!(
        // SAFETY: flock on an fd this function owns.
        unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) },
        0,
        "flock"
    );
    let kept = target.join(format!("moat-{sha}"));
    if kept.exists() {
        eprintln!(
            "upgrade: old binary {from} ({sha}) already built: {}",
            kept.display()
        );
        return Some(kept);
    }
    // The same path for the same commit, and `git archive` gives every file the commit's
    // time: cargo then finds the moat crate fresh in the kept target dir.
    let src = Src(tmp_base().join(format!("moat-upgrade-src-{sha}")));
    let _ = fs::remove_dir_all(&src.0);
    fs::create_dir_all(&src.0).expect("mkdir src");
    let t0 = Instant::now();
    let mut export = Command::new("sh");
    export
        .arg("-c")
        .arg("git -C \"$1\" archive --format=tar \"$2\" | tar -x -C \"$3\"")
        .arg("sh")
        .arg(repo())
        .arg(&sha)
        .arg(&src.0);
    must(export, CALL_TIMEOUT, "git archive | tar -x");
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .current_dir(&src.0)
        .args(["build", "--locked", "--bin", "moat"])
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_TERM_COLOR", "never");
    must(build, BUILD_TIMEOUT, &format!("cargo build of {from}"));
    let built = target.join("x86_64-unknown-linux-musl/debug/moat");
    let tmp = target.join(format!(".moat-{sha}.{}", std::process::id()));
    fs::copy(&built, &tmp).expect("copy the old binary");
    fs::rename(&tmp, &kept).expect("keep the old binary");
    eprintln!(
        "upgrade: built old binary {from} ({sha}) in {:.1} s: {}",
        t0.elapsed().as_secs_f64(),
        kept.display()
    );
    Some(kept)
}

/// The exported source tree, removed when done (also on a failed build).
struct Src(PathBuf);

impl Drop for Src {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `OLD --root <root> ARGS…` in the context (its config, policy and io).
#[track_caller]
fn old(ctx: &Ctx, bin: &Path, args: &[&str]) -> Out {
    let mut c = ctx.cmd_with(bin);
    c.args(args);
    ctx.run(c)
}

/// Created and started by the old binary; `state`, `list`, `exec`, `policy explain`,
/// `verify`, `ps`, `kill` and `delete` by this one: under OPEN and under RESTRICTED (whose exec replays the seccomp
/// programs and policy the old create saved).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn running_container_of_the_previous_binary_is_managed_by_this_one() {
    if !require_root() {
        return;
    }
    let Some(bin) = old_binary() else {
        return;
    };
    for restricted in [false, true] {
        let mut ctx = Ctx::new(if restricted { "upr" } else { "upo" });
        if restricted {
            ctx.restricted();
        }
        ctx.args(&["sleep", "600"]);
        let id = ctx.id("c");
        let c = ctx.guard(&id);
        old(&ctx, bin, &["create", "--bundle", &ctx.bundle_str(), &id]).ok();
        old(&ctx, bin, &["start", &id]).ok();
        let pid = old(&ctx, bin, &["state", &id]).ok().stdout;
        let pid = i32::try_from(
            serde_json::from_str::<Value>(&pid).unwrap()["pid"]
                .as_i64()
                .unwrap(),
        )
        .unwrap();

        let st = c.state();
        assert_eq!(st["status"], "running", "{st}");
        assert_eq!(st["pid"], pid, "{st}");
        assert_eq!(st["id"], id.as_str(), "{st}");
        let list = ctx.moat(&["list", "--format", "json"]).ok().stdout;
        let list: Value = serde_json::from_str(&list).unwrap();
        assert!(
            list.as_array()
                .unwrap()
                .iter()
                .any(|e| e["id"] == id.as_str() && e["status"] == "running"),
            "{list}"
        );
        let out = ctx.moat(&[
            "exec",
            &id,
            "sh",
            "-c",
            "echo exec-ok; cat /proc/self/status",
        ]);
        let out = out.ok();
        assert!(out.stdout.starts_with("exec-ok\n"), "{}", out.stdout);
        if restricted {
            // The old create's seccomp program reached the exec'd process.
            assert!(out.stdout.contains("Seccomp:\t2"), "{}", out.stdout);
        }
        // The old create's policy.json, read by this binary's explain and verify.
        let mode = if restricted { "restricted" } else { "open" };
        let explain = ctx.moat(&["policy", "explain", &id]).ok().stdout;
        assert!(
            explain.starts_with(&format!("container {id}: policy {mode}\n")),
            "{explain}"
        );
        let json = ctx
            .moat(&["policy", "explain", "--format", "json", &id])
            .ok();
        let json: Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(json["policy"], mode, "{json}");
        let verify = ctx.moat(&["verify", "--format", "json", &id]).ok().stdout;
        let verify: Value = serde_json::from_str(&verify).unwrap();
        assert_eq!(verify["ok"], true, "{verify}");
        let ps = ctx.moat(&["ps", "--format", "json", &id]).ok().stdout;
        let pids: Vec<i32> = serde_json::from_str(&ps).unwrap();
        assert!(pids.contains(&pid), "{ps}");
        ctx.moat(&["kill", &id, "KILL"]).ok();
        c.wait_stopped(Duration::from_secs(20));
        ctx.moat(&["delete", &id]).ok();
        ctx.assert_no_trace(&id);
    }
}

/// Created (not started) by the old binary; started, then force-deleted while running,
/// by this one.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn created_container_of_the_previous_binary_is_started_and_deleted_by_this_one() {
    if !require_root() {
        return;
    }
    let Some(bin) = old_binary() else {
        return;
    };
    let mut ctx = Ctx::new("upc");
    ctx.sh("echo started; exec sleep 600");
    let id = ctx.id("c");
    let c = ctx.guard(&id);
    let create = old(&ctx, bin, &["create", "--bundle", &ctx.bundle_str(), &id]).ok();
    assert_eq!(c.status(), "created");
    let pid = c.pid();
    c.start();
    assert_eq!(c.status(), "running");
    assert!(
        wait_until(Duration::from_secs(10), || create.stdout_now()
            == "started\n"),
        "{:?}",
        create.stdout_now()
    );
    ctx.moat(&["delete", "--force", &id]).ok();
    assert!(wait_until(Duration::from_secs(10), || is_gone(pid)));
    ctx.assert_no_trace(&id);
}
