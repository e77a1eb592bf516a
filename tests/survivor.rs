//! No process of a container outlives its delete (or a `kill --all KILL`): a container
//! without a pid namespace of its own runs a loop that forks faster than one pass over
//! its cgroup sees, and afterwards nothing of it is left. In a cgroup the container
//! joined, only its own processes are killed. A `moat.userns=auto` range is not handed
//! out again while a process holding one of its ids lives.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use support::*;

const T: Duration = Duration::from_secs(20);

/// Processes (not zombies) whose cgroup path names `id`.
fn survivors(id: &str) -> Vec<i32> {
    let Ok(rd) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
                && !is_gone(pid)
        })
        .collect()
}

/// Kills whatever a failed test left of `id` (by pid, each one this test's container
/// started), so that one failure does not leave a fork loop running.
struct Sweep(String);
impl Drop for Sweep {
    fn drop(&mut self) {
        for _ in 0..500 {
            let left = survivors(&self.0);
            if left.is_empty() {
                break;
            }
            for pid in left {
                sigkill(pid);
            }
            reap();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn sigkill(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
}

/// A container without a pid namespace whose processes keep forking: 32 chains in which
/// each process starts the next at once and exits 20 ms later (a listing's newest link
/// forks its successor before a kill pass reaches it), and a loop leaving sleepers
/// behind. Started, and given a second to get going.
fn fork_loop(ctx: &mut Ctx, name: &str) -> Container {
    fs::write(ctx.rootfs().join("hop"), "sh /hop &\nsleep 0.02\n").unwrap();
    ctx.without_ns("pid");
    ctx.set("/linux/resources/pids", json!({"limit": 2000}));
    ctx.sh("for i in $(seq 32); do sh /hop & done; \
         while :; do sh -c 'sleep 1000 &' & sleep 0.05; done");
    let c = ctx.create_ok(name);
    c.start();
    std::thread::sleep(Duration::from_secs(1));
    let n = survivors(&c.id).len();
    assert!(
        n > 10,
        "the loop never forked ({n} processes): {}",
        c.stderr()
    );
    c
}

/// Reaps what is reparented to this test (a subreaper) while it lives: orphaned
/// processes of the loop, whose zombies would otherwise hold pids-limit slots.
struct Reaper(std::sync::Arc<std::sync::atomic::AtomicBool>);
impl Reaper {
    fn start() -> Reaper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        std::thread::spawn(move || {
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                reap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        Reaper(stop)
    }
}
impl Drop for Reaper {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn assert_none_left(id: &str, after: &str) {
    // A killed process leaves its cgroup as it exits; the test reaps what it inherits.
    let mut left = Vec::new();
    let gone = wait_until(Duration::from_secs(2), || {
        reap();
        left = survivors(id);
        left.is_empty()
    });
    assert!(
        gone,
        "{} process(es) of {id} survived {after}: {left:?}",
        left.len()
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_force_leaves_no_survivor_of_a_fork_loop() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("surv-del");
    let id = ctx.id("c");
    let _sweep = Sweep(id.clone());
    let _reaper = Reaper::start();
    let c = fork_loop(&mut ctx, "c");
    c.moat(&["delete", "--force", &c.id]).ok();
    assert_none_left(&id, "delete --force");
    assert!(!ctx.state_dir(&id).exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_all_leaves_no_survivor_of_a_fork_loop() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("surv-kill");
    let id = ctx.id("c");
    let _sweep = Sweep(id.clone());
    let _reaper = Reaper::start();
    let c = fork_loop(&mut ctx, "c");
    c.moat(&["kill", "--all", &c.id, "KILL"]).ok();
    assert_none_left(&id, "kill --all KILL");
    c.wait_stopped(T);
    c.delete().ok();
}

/// RESTRICTED lets a host pid namespace through only where the configuration lists it;
/// such a container is killed as thoroughly.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_force_under_restricted_with_the_host_pid_namespace() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("surv-restr");
    let cfg = ctx.dir.join("moat.toml");
    fs::write(&cfg, "[restricted]\nhost_namespaces = [\"pid\"]\n").unwrap();
    ctx.use_config(&cfg);
    let id = ctx.id("c");
    let _sweep = Sweep(id.clone());
    let _reaper = Reaper::start();
    let c = fork_loop(&mut ctx, "c");
    c.moat(&["delete", "--force", &c.id]).ok();
    assert_none_left(&id, "delete --force under RESTRICTED");
}

/// A cgroup that was there before the create (empty, so create takes it) is joined, not
/// made: a process someone else puts in it later is not the container's, and delete
/// kills the container's own processes only.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_in_a_joined_cgroup_kills_only_the_container_s_own() {
    if !require_root() {
        return;
    }
    let pids_root = Path::new("/sys/fs/cgroup/pids");
    if !pids_root.join("cgroup.procs").exists() {
        missing("no v1 pids hierarchy at /sys/fs/cgroup/pids");
        return;
    }
    let path = format!("moat-test-joined-{}", std::process::id());
    let dir = pids_root.join(&path);
    fs::create_dir_all(&dir).unwrap();
    let mut ctx = Ctx::new("surv-joined");
    ctx.without_ns("pid");
    ctx.set("/linux/cgroupsPath", json!(format!("/{path}")));
    ctx.sh("sleep 1000 & echo $!; wait");
    let c = ctx.create_ok("c");
    c.start();
    assert!(wait_until(T, || c.stdout().ends_with('\n')));
    let own: i32 = c.stdout().trim().parse().expect("child pid");
    // Someone else's process, placed in the container's cgroup after the create.
    let mut other = spawn(std::process::Command::new("sleep").arg("1000"));
    let other_pid = i32::try_from(other.id()).unwrap();
    fs::write(dir.join("cgroup.procs"), other_pid.to_string()).unwrap();
    let out = c.moat(&["delete", "--force", &c.id]);
    let alive = !is_gone(other_pid);
    kill_child(&mut other);
    reap();
    for d in fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let _ = fs::remove_dir(d.path().join(&path));
    }
    out.ok();
    assert!(
        wait_until(T, || is_gone(own)),
        "the container's own child survived"
    );
    assert!(
        alive,
        "delete killed a process that was not the container's"
    );
}

/// `moat.userns=auto`: a process left holding an id of a deleted container's range (one
/// that escaped its cgroup) keeps that range from the next container, whose init it could
/// otherwise signal; once it is gone the range is handed out again.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_userns_range_is_not_reused_while_a_survivor_holds_it() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("surv-userns");
    // A private two-slot pool, far from the default one and userns.rs's.
    let cfg = ctx.dir.join("moat.toml");
    fs::write(
        &cfg,
        "default_policy = \"open\"\n[userns]\npool = \"3200000000:131072\"\n",
    )
    .unwrap();
    ctx.use_config(&cfg);
    ctx.set("/annotations", json!({"moat.userns": "auto"}));
    ctx.args(&["sleep", "30"]);
    let start = |c: &Container| -> u64 {
        let map = fs::read_to_string(format!("/proc/{}/uid_map", c.pid())).unwrap();
        map.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let a = ctx.create_ok("a");
    let sa = start(&a);
    // The survivor: a host process running as an id of a's range, outside its cgroup.
    let id = (sa + 7).to_string();
    let mut survivor = spawn(std::process::Command::new("setpriv").args([
        &format!("--reuid={id}"),
        &format!("--regid={id}"),
        "--clear-groups",
        "sleep",
        "1000",
    ]));
    assert!(wait_until(T, || {
        fs::read_to_string(format!("/proc/{}/status", survivor.id()))
            .is_ok_and(|s| s.contains(&format!("Uid:\t{id}")))
    }));
    a.moat(&["delete", "--force", &a.id]).ok();
    let b = ctx.create_ok("b");
    let sb = start(&b);
    kill_child(&mut survivor);
    reap();
    assert_ne!(
        sb, sa,
        "the survivor's range was handed to the next container"
    );
    // With the survivor gone, its range is free again.
    let c = ctx.create_ok("c");
    assert_eq!(
        start(&c),
        sa,
        "the range stayed blocked after the survivor left"
    );
}
