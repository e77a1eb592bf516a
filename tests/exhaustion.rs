//! Exhausted resources: each case a real create (or call) that runs out of
//! something, ending with a clear one-line error (or a whole success), a non-zero exit, and
//! nothing the leak auditor finds; the same id works once the resource is back. A hook that
//! hangs past its timeout is `tests/hooks.rs`' `hook_timeout_kills_the_hook_and_fails_create`;
//! an init that never answers, `an_init_that_never_answers_ends_create_at_the_sync_timeout`.

mod support;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

/// A failed call's error: one line that is not a panic.
#[track_caller]
fn one_line_error(what: &str, out: &Out) {
    assert_ne!(out.code, 0, "{what}: went through");
    let err = out.stderr.trim();
    assert!(!err.is_empty(), "{what}: no error");
    assert!(!err.contains("panicked"), "{what}: a panic: {err}");
    let errors: Vec<&str> = err.lines().filter(|l| !l.starts_with("warning")).collect();
    assert_eq!(errors.len(), 1, "{what}: not one line: {err}");
}

fn mount_tmpfs(at: &Path, opts: &str) {
    fs::create_dir_all(at).expect("mkdir");
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
        .arg(at)
        .run_status()
        .expect("mount");
    assert!(st.success(), "mount tmpfs {opts} on {}", at.display());
}

fn umount(at: &Path) {
    let _ = Command::new("umount").arg("-l").arg(at).run_status();
}

/// Fills the file system of `dir` up to its last block.
fn fill(dir: &Path) {
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", dir.join(".filler").display()))
        .stderr(std::process::Stdio::null())
        .run_status();
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn too_few_fds_fails_cleanly() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ex-fds");
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    let b = ctx.bundle_str();
    let mut failed = 0;
    for n in [4, 6, 8, 10, 12, 16, 24] {
        let id = ctx.id(&format!("fd{n}"));
        let mut c = Command::new("prlimit");
        c.arg(format!("--nofile={n}:{n}")).arg("--").arg(MOAT);
        c.arg("--root").arg(&ctx.root);
        c.args(["create", "--bundle", &b, &id]);
        let out = ctx.run(c);
        if out.code != 0 {
            failed += 1;
            one_line_error(&format!("nofile={n}"), &out);
            let _ = ctx.moat(&["delete", "--force", &id]);
            reap();
            ctx.assert_no_trace(&id);
        }
        // With the limit back, the same id is created whole.
        let _ = ctx.moat(&["delete", "--force", &id]);
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        ctx.moat(&["delete", "--force", &id]).ok();
        reap();
        ctx.assert_no_trace(&id);
    }
    assert!(failed > 0, "no fd limit made create fail");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_full_state_root_fails_cleanly() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ex-root");
    ctx.args(&["sleep", "30"]);
    mount_tmpfs(&ctx.root, "size=256k");
    fill(&ctx.root);
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["create", "--bundle", &b, &id]);
    one_line_error("full state root", &out);
    let _ = ctx.moat(&["delete", "--force", &id]);
    reap();
    let left = ctx.traces(&id);
    let _ = fs::remove_file(ctx.root.join(".filler"));
    ctx.moat(&["create", "--bundle", &b, &id]).ok();
    ctx.moat(&["delete", "--force", &id]).ok();
    umount(&ctx.root);
    assert!(left.is_empty(), "left behind: {}", left.join("; "));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_full_writable_layer_fails_cleanly() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ex-layer");
    ctx.args(&["sleep", "30"]);
    ctx.set("/root/readonly", json!(false));
    // The rootfs on a tmpfs with no block and no inode left, and without the mount points
    // create makes: its first mkdir fails with ENOSPC.
    let rootfs = ctx.rootfs();
    let copy = ctx.dir.join("rootfs-copy");
    fs::rename(&rootfs, &copy).expect("move rootfs");
    mount_tmpfs(&rootfs, "size=16m");
    copy_tree(&copy, &rootfs);
    for d in ["proc", "sys", "dev"] {
        let _ = fs::remove_dir_all(rootfs.join(d));
    }
    fill(&rootfs);
    let used = host(&[
        "sh",
        "-c",
        &format!("df --output=iused {} | tail -1", rootfs.display()),
    ]);
    let st = Command::new("mount")
        .args(["-o", &format!("remount,nr_inodes={}", used.trim())])
        .arg(&rootfs)
        .run_status()
        .expect("remount");
    assert!(st.success(), "remount nr_inodes");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["create", "--bundle", &b, &id]);
    let _ = ctx.moat(&["delete", "--force", &id]);
    reap();
    let left = ctx.traces(&id);
    umount(&rootfs);
    one_line_error("full writable layer", &out);
    assert!(left.is_empty(), "left behind: {}", left.join("; "));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_memory_cgroup_at_its_limit_during_create_fails_cleanly() {
    if !require_root() {
        return;
    }
    let mem = Path::new("/sys/fs/cgroup/memory");
    if !mem.join("memory.limit_in_bytes").exists() {
        missing("no cgroup v1 memory hierarchy (a_memory_cgroup_at_its_limit_during_create)");
        return;
    }
    let mut ctx = Ctx::new("ex-mem");
    ctx.args(&["sleep", "30"]);
    // Our own parent (never the hierarchy's root), capped below what a create needs.
    let parent = format!("moat-it-{}-mem", std::process::id());
    let pdir = mem.join(&parent);
    fs::create_dir_all(&pdir).expect("mkdir memory cgroup");
    fs::write(pdir.join("memory.limit_in_bytes"), "16K").expect("limit");
    let id = ctx.id("c");
    ctx.set("/linux/cgroupsPath", json!(format!("/{parent}/{id}")));
    let b = ctx.bundle_str();
    let out = ctx.moat(&["create", "--bundle", &b, &id]);
    let _ = ctx.moat(&["delete", "--force", &id]);
    reap();
    let mut left = ctx.traces(&id);
    if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
        for h in rd.flatten() {
            let cg = h.path().join(&parent).join(&id);
            if cg.is_dir() {
                left.push(format!("cgroup {}", cg.display()));
                let _ = fs::remove_dir(&cg);
            }
            let _ = fs::remove_dir(h.path().join(&parent));
        }
    }
    one_line_error("memory cgroup at its limit", &out);
    assert!(left.is_empty(), "left behind: {}", left.join("; "));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn pids_exhausted_in_the_fleet_cgroup_fail_cleanly() {
    if !require_root() {
        return;
    }
    let fleet = format!("moat-it-{}-fleet", std::process::id());
    let cfg_path = std::env::temp_dir().join(format!("{fleet}.toml"));
    fs::write(
        &cfg_path,
        format!("[fleet]\ncgroup = \"/{fleet}\"\npids = 3\n"),
    )
    .expect("config");
    // RESTRICTED, moat's default: it places every container under the fleet cgroup.
    let mut ctx = Ctx::new("ex-pids");
    ctx.use_config(&cfg_path);
    ctx.args(&["sleep", "30"]);
    let b = ctx.bundle_str();
    // cgroup v1's pids controller checks the limit at fork, not when a task is moved in:
    // moat moves each init into its cgroup, so four creates fit in a fleet of 3 pids and
    // the fleet is then over its limit. What runs out is the next fork in it: an exec's.
    let ids: Vec<String> = (0..4).map(|i| ctx.id(&format!("p{i}"))).collect();
    for id in &ids {
        ctx.moat(&["create", "--bundle", &b, id]).ok();
    }
    ctx.moat(&["start", &ids[0]]).ok();
    let exec = ctx.moat(&["exec", &ids[0], "true"]);
    let ps = ctx.moat(&["ps", "--format", "json", &ids[0]]).ok();
    let pids: Vec<i64> = serde_json::from_str(ps.stdout.trim()).unwrap_or_default();
    let mut left = Vec::new();
    for id in &ids {
        let _ = ctx.moat(&["delete", "--force", id]);
        reap();
        left.extend(ctx.traces(id));
    }
    if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
        for h in rd.flatten() {
            let _ = fs::remove_dir(h.path().join(&fleet));
        }
    }
    let _ = fs::remove_file(&cfg_path);
    one_line_error("exec with the fleet's pids exhausted", &exec);
    assert_eq!(pids.len(), 1, "processes left in the container: {pids:?}");
    assert!(left.is_empty(), "left behind: {}", left.join("; "));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_console_socket_that_never_accepts_fails_within_its_bound() {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ex-console");
    ctx.args(&["sleep", "30"]);
    ctx.set("/process/terminal", json!(true));
    let path = ctx.dir.join("console.sock");
    // A listener that never accepts, its backlog full: a plain connect would block for ever.
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let addr = UnixAddr::new(&path).expect("addr");
    let mut pending = Vec::new();
    loop {
        let s = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .expect("socket");
        if connect(s.as_raw_fd(), &addr).is_err() {
            break;
        }
        pending.push(s);
        assert!(pending.len() < 100_000, "the backlog never filled");
    }
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let t0 = Instant::now();
    let out = ctx.moat(&[
        "create",
        "--console-socket",
        path.to_str().expect("utf-8"),
        "--bundle",
        &b,
        &id,
    ]);
    let took = t0.elapsed();
    drop(pending);
    drop(listener);
    let _ = ctx.moat(&["delete", "--force", &id]);
    reap();
    one_line_error("console socket never accepting", &out);
    assert!(out.stderr.contains("console"), "{}", out.stderr);
    assert!(took < Duration::from_secs(25), "create took {took:?}");
    ctx.assert_no_trace(&id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_caller_that_closes_stdout() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ex-stdout");
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let closed = |args: &[&str]| {
        let mut c = Command::new("sh");
        c.arg("-c").arg("exec \"$0\" \"$@\" >&-").arg(MOAT);
        c.arg("--root").arg(&ctx.root).args(args);
        ctx.run(c)
    };
    // create with fd 1 closed: moat's own fds must not land on 1 (the init's stdout).
    let out = closed(&["create", "--bundle", &b, &id]);
    assert_eq!(out.code, 0, "create: {}", out.stderr);
    let st = ctx.moat(&["state", &id]).ok();
    assert!(st.stdout.contains("\"created\""), "{}", st.stdout);
    // moat found fd 1 closed and put /dev/null there (as Rust's runtime does) before it
    // opened anything: none of its own fds (the state dir's lock, a socket) became the
    // init's stdout.
    let pid = st
        .stdout
        .split("\"pid\": ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or("0")
        .trim()
        .to_string();
    let fd1 = fs::read_link(format!("/proc/{pid}/fd/1")).expect("the init's fd 1");
    assert_eq!(fd1, Path::new("/dev/null"), "the init's stdout");
    // Output to a closed stdout is discarded, as runc's is (Go's fmt ignores EBADF).
    assert_eq!(closed(&["state", &id]).code, 0);
    // Output to a pipe nobody reads any more (EPIPE): an error, one line, no panic.
    for args in [vec!["state", id.as_str()], vec!["list"]] {
        let (r, w) = std::io::pipe().expect("pipe");
        drop(r);
        let mut c = ctx.cmd();
        c.args(&args).stdout(w).stderr(std::process::Stdio::piped());
        let o = wait_output(spawn(&mut c)).expect("run moat");
        let out = Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::new(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            out_file: Default::default(),
            err_file: Default::default(),
            what: String::new(),
        };
        one_line_error(&format!("{args:?} to a broken pipe"), &out);
    }
    ctx.moat(&["delete", "--force", &id]).ok();
    reap();
    ctx.assert_no_trace(&id);
}
