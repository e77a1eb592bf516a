//! Many containers at once, and two creates racing for one id.

mod support;

use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use support::*;

const N: usize = 50;

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn fifty_containers_created_and_started_in_parallel_all_stop_and_delete() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("many");
    // One bundle (read-only root) and one state root shared by all of them.
    ctx.set("/root/readonly", json!(true));
    ctx.sh("echo ran-$0");
    ctx.write_config();
    let ctx = &ctx;
    let containers: Vec<Container> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|i| {
                s.spawn(move || {
                    let c = ctx.create_ok(&format!("n{i}"));
                    c.start();
                    c
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("create/start thread"))
            .collect()
    });
    assert_eq!(containers.len(), N);
    for c in &containers {
        c.wait_stopped(Duration::from_secs(30));
        assert_eq!(c.stdout(), "ran-sh\n", "{}", c.id);
    }
    let list: Value =
        serde_json::from_str(&ctx.moat(&["list", "-f", "json"]).ok().stdout).expect("list json");
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), N);
    assert!(list.iter().all(|e| e["status"] == "stopped"), "{list:?}");
    std::thread::scope(|s| {
        for chunk in containers.chunks(N / 5) {
            s.spawn(move || {
                for c in chunk {
                    c.delete().ok();
                }
            });
        }
    });
    assert_eq!(ctx.moat(&["list", "-q"]).ok().stdout, "");
    for c in &containers {
        let cg = Path::new("/sys/fs/cgroup/pids/moat").join(&c.id);
        assert!(!cg.exists(), "{} left", cg.display());
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn two_creates_of_one_id_race_and_exactly_one_wins() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("race");
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    for round in 0..5 {
        let id = ctx.id(&format!("r{round}"));
        let guard = ctx.guard(&id);
        let barrier = Barrier::new(2);
        let b = ctx.bundle_str();
        let outs: Vec<Out> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        ctx.moat(&["create", "--bundle", &b, &id])
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&Out> = outs.iter().filter(|o| o.code == 0).collect();
        let losers: Vec<&Out> = outs.iter().filter(|o| o.code != 0).collect();
        assert_eq!(winners.len(), 1, "round {round}: {outs:#?}");
        assert_eq!(losers[0].code, 1);
        assert!(
            losers[0].stderr.contains("container with id exists"),
            "round {round}: {}",
            losers[0].stderr
        );
        // The winner's container is whole.
        let st = guard.state();
        assert_eq!(st["status"], "created");
        let pid = i32::try_from(st["pid"].as_i64().unwrap()).unwrap();
        assert!(!is_gone(pid));
        guard.moat(&["delete", "--force", &id]).ok();
        assert!(wait_until(Duration::from_secs(20), || is_gone(pid)));
        ctx.assert_no_trace(&id);
    }
}

/// 50 lifecycles at once, each id also hit by concurrent `kill`, `delete -f`, `exec` and
/// `state` from other threads: every call ends (none hangs past its timeout), none panics,
/// and at the end nothing of any id is left.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn fifty_lifecycles_with_concurrent_kill_delete_exec_and_state() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("race");
    ctx.set("/root/readonly", json!(true));
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    let ctx = &ctx;
    let b = ctx.bundle_str();
    let b = &b;
    let ids: Vec<String> = (0..N).map(|i| ctx.id(&format!("r{i}"))).collect();
    let panics = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (i, id) in ids.iter().enumerate() {
            let panics = &panics;
            s.spawn(move || {
                let check = |o: Out| {
                    if o.stderr.contains("panicked") {
                        panics.lock().unwrap().push(o.stderr);
                    }
                };
                check(ctx.moat(&["create", "--bundle", b, id]));
                check(ctx.moat(&["start", id]));
                check(ctx.moat(&["exec", id, "true"]));
                check(ctx.moat(&["kill", id, "KILL"]));
                check(ctx.moat(&["delete", "--force", id]));
            });
            let other = &ids[(i + 1) % N];
            s.spawn(move || {
                let check = |o: Out| {
                    if o.stderr.contains("panicked") {
                        panics.lock().unwrap().push(o.stderr);
                    }
                };
                check(ctx.moat(&["state", other]));
                check(ctx.moat(&["exec", other, "true"]));
                check(ctx.moat(&["kill", other, "TERM"]));
                check(ctx.moat(&["delete", "-f", other]));
                check(ctx.moat(&["state", other]));
            });
        }
    });
    assert!(
        panics.lock().unwrap().is_empty(),
        "{:?}",
        panics.lock().unwrap()
    );
    for id in &ids {
        let _ = ctx.moat(&["delete", "--force", id]);
    }
    reap();
    for id in &ids {
        ctx.assert_no_trace(id);
    }
}

/// `delete` racing a container that is exiting: its init exits on its own while `delete`
/// (plain, then forced) runs; either way the container goes and nothing is left.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_racing_an_exiting_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exiting");
    for i in 0u64..10 {
        // Exits after 0.1-1 s: delete meets it running, exiting, or gone.
        ctx.sh(&format!("sleep 0.{}", i % 9 + 1));
        let id = ctx.id(&format!("e{i}"));
        let b = ctx.bundle_str();
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        ctx.moat(&["start", &id]).ok();
        if i % 2 == 1 {
            // Forced, at about the moment of the exit.
            std::thread::sleep(Duration::from_millis(100 * (i % 9 + 1)));
            ctx.moat(&["delete", "--force", &id]).ok();
        } else {
            // Plain delete until the exit makes it legal.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let o = ctx.moat(&["delete", &id]);
                assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
                if o.code == 0 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "delete never succeeded: {}",
                    o.stderr
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        reap();
        ctx.assert_no_trace(&id);
        ctx.moat(&["state", &id]).fails();
    }
}

/// `moat ARGS…` in the background, held two seconds at the debug stall point `point`
/// (`MOAT_TEST_STALL_AT`, src/linux/killpoint.rs).
fn stalled_at(ctx: &Ctx, point: &str, args: &[&str]) -> Running {
    let mut c = ctx.cmd();
    c.env("MOAT_TEST_STALL_AT", point).args(args);
    spawn_bg(c, &ctx.io)
}

/// `delete --force` while an `exec`'s joiner sits in the container's cgroup but not yet
/// in its pid namespace (held there by a debug stall point): the init's death does not
/// take the joiner, so a delete that went ahead could not remove the cgroup and would
/// leave it behind with no state directory naming it. exec holds the state lock (shared)
/// until its process is in the pid namespace; delete, locking exclusively, waits.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_waits_for_an_exec_entering_the_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("execdel");
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    let c = ctx.create_ok("c");
    c.start();
    let procs = Path::new("/sys/fs/cgroup/pids/moat")
        .join(&c.id)
        .join("cgroup.procs");
    let exec = stalled_at(&ctx, "exec:joiner:join", &["exec", &c.id, "true"]);
    // The joiner is in the cgroup (init + joiner) and stalled before it joins.
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&procs).is_ok_and(|s| s.lines().count() >= 2)
        }),
        "the exec's joiner never entered {}",
        procs.display()
    );
    let del = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(del.code, 0, "delete --force: {}", del.stderr);
    let ex = exec.wait(Duration::from_secs(20));
    assert!(!ex.stderr.contains("panicked"), "{}", ex.stderr);
    reap();
    ctx.assert_no_trace(&c.id);
}

/// `delete --force` in the window between a create's mkdir of the state directory and its
/// flock (held open by a debug stall point): delete finds a directory without a record —
/// what a killed create leaves — and removes it. The create, whose lock is then on a
/// removed directory, makes it again instead of going on in (or failing on) a directory
/// nobody can find.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_outlives_a_delete_between_its_mkdir_and_its_lock() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("mkdirdel");
    ctx.args(&["sleep", "30"]);
    ctx.write_config();
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let create = stalled_at(
        &ctx,
        "create:parent:StateDir.lock",
        &["create", "--bundle", &b, &id],
    );
    let state_dir = ctx.root.join(&id);
    assert!(
        wait_until(Duration::from_secs(10), || state_dir.is_dir()),
        "create never made {}",
        state_dir.display()
    );
    let del = ctx.moat(&["delete", "--force", &id]);
    assert_eq!(del.code, 0, "delete --force: {}", del.stderr);
    let cr = create.wait(Duration::from_secs(30));
    assert_eq!(cr.code, 0, "create after the racing delete: {}", cr.stderr);
    let st: Value = serde_json::from_str(&ctx.moat(&["state", &id]).ok().stdout).unwrap();
    assert_eq!(st["status"], "created");
    ctx.moat(&["delete", "--force", &id]).ok();
    reap();
    ctx.assert_no_trace(&id);
}

/// The harness's own race: [`reap`], run by any test thread, collects every zombie child
/// it does not know. A tool run through `support::Run` is registered until waited for,
/// so its status is never taken from under it (with `Command::output` instead, CI saw
/// `bpftool: No child process`). Here a thread reaps flat out while each command stays a
/// zombie for 50 ms: its output is still held open by the `sleep` it left behind.
#[test]
fn the_reaper_never_takes_a_registered_childs_status() {
    become_subreaper();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                reap();
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        let failed: Vec<String> = (0..20)
            .filter_map(|_| {
                match std::process::Command::new("sh")
                    .args(["-c", "sleep 0.05 &"])
                    .run_output()
                {
                    Ok(o) if o.status.success() => None,
                    r => Some(format!("{r:?}")),
                }
            })
            .collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(failed.is_empty(), "{} of 20 runs: {failed:?}", failed.len());
    });
}
