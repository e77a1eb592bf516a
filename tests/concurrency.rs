//! Many containers at once, and two creates racing for one id.

mod support;

use std::path::Path;
use std::sync::Barrier;
use std::time::Duration;

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
