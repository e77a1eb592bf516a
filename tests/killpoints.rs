//! A kill at every step: moat SIGKILLed at each row of create (parent and
//! child side), start, exec (parent, joiner, exec'd process) and delete, through the
//! debug-only `MOAT_TEST_KILL_AT=<op>:<side>:<step>` (src/linux/killpoint.rs). After each:
//! `moat delete --force` (what an engine does next) leaves nothing the leak auditor
//! finds (state dir, cgroup in any hierarchy, process, mount, userns pool range, rootfs
//! budget share), and the
//! same id can be created again; for exec and start, the container lives on and the next
//! exec works.

mod support;

use serde_json::json;
use support::*;

/// Create's kill points: (side, step) as `src/linux/create/{parent,child}.rs` place them.
const CREATE: &[(&str, &str)] = &[
    ("parent", "Profile"),
    ("parent", "StateDir"),
    ("parent", "Ids"),
    ("parent", "Ids.budget"),
    ("parent", "Cgroup"),
    ("parent", "Record"),
    ("parent", "Channels"),
    ("parent", "Fork"),
    ("parent", "Fork.scope"),
    ("parent", "Release"),
    ("parent", "Ready"),
    ("child", "Fork"),
    ("child", "Release"),
    ("child", "Rootfs"),
    ("child", "Pivot"),
    ("child", "Finalize"),
    ("child", "Attrs"),
    ("child", "Ready"),
];

fn kill_at(ctx: &Ctx, args: &[&str], point: &str) -> Out {
    ctx.write_config();
    let mut c = ctx.cmd();
    c.env("MOAT_TEST_KILL_AT", point).args(args);
    ctx.run(c)
}

fn clean_after_kill(ctx: &Ctx, id: &str, what: &str) {
    // What an engine does after a failed or killed call; its shim reaps its children as
    // they exit (a killed gVisor sandbox holds its v1 cgroup until reaped).
    reap();
    let _ = ctx.moat(&["delete", "--force", id]);
    reap();
    let left = ctx.traces(id);
    assert!(
        left.is_empty(),
        "{what}: left behind after delete --force: {}",
        left.join("; ")
    );
}

/// What create is asked for on top of the plain container.
#[derive(PartialEq)]
enum Mode {
    Plain,
    UsernsAuto,
    /// A bounded root under `[fleet] rootfs_budget` (a share of the host's ledger).
    Budget,
}

fn create_then_kill_each(mode: Mode) {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new(match mode {
        Mode::Plain => "kp",
        Mode::UsernsAuto => "kp-userns",
        Mode::Budget => "kp-budget",
    });
    ctx.args(&["sleep", "30"]);
    match mode {
        Mode::Plain => {}
        Mode::UsernsAuto => {
            ctx.set("/annotations", json!({"moat.userns": "auto"}));
        }
        Mode::Budget => {
            let cfg = ctx.dir.join("budget.toml");
            std::fs::write(
                &cfg,
                "default_policy = \"open\"\n[restricted]\nrootfs = \"ephemeral\"\n\
                 rootfs_size = \"8m\"\n[fleet]\nrootfs_budget = \"1g\"\n",
            )
            .unwrap();
            ctx.use_config(cfg);
            ctx.set("/root/readonly", json!(false));
        }
    }
    let b = ctx.bundle_str();
    for (side, step) in CREATE {
        let point = format!("create:{side}:{step}");
        let id = ctx.id(&format!(
            "{}-{}",
            side,
            step.to_lowercase().replace('.', "-")
        ));
        let out = kill_at(&ctx, &["create", "--bundle", &b, &id], &point);
        assert_ne!(
            out.code,
            0,
            "{point}: create went through: {}",
            out.stderr.trim()
        );
        clean_after_kill(&ctx, &id, &point);
        // The same id again, whole.
        let again = ctx.moat(&["create", "--bundle", &b, &id]);
        assert_eq!(
            again.code,
            0,
            "{point}: create again: {}",
            again.stderr.trim()
        );
        clean_after_kill(&ctx, &id, &format!("{point}, then a whole create"));
    }
    if mode == Mode::Budget {
        // delete killed at each step: the share is given back by the next delete --force
        // (also once the state directory is already gone).
        for point in [
            "delete:parent:stop",
            "delete:parent:destroy",
            "delete:parent:cgroup",
            "delete:parent:state",
            "delete:parent:release",
        ] {
            let id = ctx.id(&point.replace(':', "-"));
            let made = ctx.moat(&["create", "--bundle", &b, &id]);
            assert_eq!(made.code, 0, "{point}: {}", made.stderr.trim());
            let _ = kill_at(&ctx, &["delete", "--force", &id], point);
            clean_after_kill(&ctx, &id, point);
        }
    }
}

#[test]
#[ignore = "needs root: real containers"]
fn create_killed_at_every_step_leaves_nothing() {
    create_then_kill_each(Mode::Plain);
}

#[test]
#[ignore = "needs root: real containers"]
fn create_with_userns_auto_killed_at_every_step_leaves_nothing() {
    create_then_kill_each(Mode::UsernsAuto);
}

#[test]
#[ignore = "needs root: real containers"]
fn create_and_delete_of_a_bounded_root_under_a_budget_killed_at_every_step_leave_nothing() {
    create_then_kill_each(Mode::Budget);
}

#[test]
#[ignore = "needs root: real containers"]
fn start_exec_delete_killed_at_every_step() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("kp-ops");
    ctx.args(&["sleep", "60"]);
    let b = ctx.bundle_str();
    let id = ctx.id("ops");

    // start killed before the fifo is written: still created, and a start works.
    ctx.moat(&["create", "--bundle", &b, &id]).ok();
    let out = kill_at(&ctx, &["start", &id], "start:parent:Start");
    assert_ne!(out.code, 0, "start went through: {}", out.stderr.trim());
    let st = ctx.moat(&["state", &id]).ok();
    assert!(st.stdout.contains("\"created\""), "{}", st.stdout);
    ctx.moat(&["start", &id]).ok();

    // exec killed at each row: the container lives on, no exec'd process is left in it,
    // and the next exec works.
    for point in [
        "exec:parent:channels",
        "exec:parent:clone",
        "exec:parent:wait",
        "exec:parent:report",
        "exec:joiner:place",
        "exec:joiner:procfs",
        "exec:joiner:join",
        "exec:joiner:fork",
        "exec:process:console",
        "exec:process:attrs",
        "exec:process:execve",
    ] {
        let out = kill_at(&ctx, &["exec", &id, "sleep", "1000"], point);
        assert_ne!(
            out.code,
            0,
            "{point}: exec went through: {}",
            out.stderr.trim()
        );
        reap();
        let st = ctx.moat(&["state", &id]).ok();
        assert!(st.stdout.contains("\"running\""), "{point}: {}", st.stdout);
        let ps = ctx.moat(&["ps", "--format", "json", &id]).ok();
        let pids: Vec<i64> = serde_json::from_str(ps.stdout.trim()).unwrap_or_default();
        let alive: Vec<i64> = pids
            .into_iter()
            .filter(|&p| !is_gone(i32::try_from(p).unwrap_or(0)))
            .collect();
        // Killed once the process may be past execve (moat exec waiting for it, or
        // reporting it), the process lives on in the container, as runc's does: it is the
        // container's, and its delete ends it. Before that point nothing may be left.
        let may_live = point == "exec:parent:wait" || point == "exec:parent:report";
        if may_live {
            assert!(
                alive.len() <= 2,
                "{point}: processes in the container: {alive:?}"
            );
            // Every process but the init, known by its pid (pids wrap: the init's need not
            // be the smallest).
            let state: Value = serde_json::from_str(&st.stdout).expect("state json");
            let init = state["pid"].as_i64().expect("the init's pid");
            for p in alive.iter().filter(|p| **p != init) {
                kill_and_wait(i32::try_from(*p).unwrap_or(0), CALL_TIMEOUT);
            }
        } else {
            assert_eq!(
                alive.len(),
                1,
                "{point}: processes in the container: {alive:?}"
            );
        }
        let ok = ctx.moat(&["exec", &id, "true"]);
        assert_eq!(ok.code, 0, "{point}: the next exec: {}", ok.stderr.trim());
    }

    // delete killed at each of its steps, then delete --force again: nothing left.
    for (i, point) in [
        "delete:parent:stop",
        "delete:parent:destroy",
        "delete:parent:cgroup",
        "delete:parent:state",
        "delete:parent:release",
    ]
    .iter()
    .enumerate()
    {
        let id = ctx.id(&format!("del{i}"));
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        ctx.moat(&["start", &id]).ok();
        let _ = kill_at(&ctx, &["delete", "--force", &id], point);
        clean_after_kill(&ctx, &id, point);
    }
    clean_after_kill(&ctx, &id, "the ops container");
}

/// `kill --all` killed inside a round of its freeze loop (the cgroup frozen, nothing
/// signalled or thawed yet): the container is left paused, and `delete --force` still
/// thaws it, ends every process and leaves nothing. Also for a SIGKILL round: the same
/// point on delete's own way.
#[test]
#[ignore = "needs root: real containers"]
fn a_kill_inside_the_freeze_round_leaves_nothing() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("kp-frozen");
    ctx.sh("sleep 600 & sleep 600 & wait");
    let b = ctx.bundle_str();
    for (n, sig) in ["TERM", "KILL"].iter().enumerate() {
        let id = ctx.id(&format!("frozen{n}"));
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        ctx.moat(&["start", &id]).ok();
        // cgroup.kill (v2) may already have emptied the cgroup for KILL; TERM always goes
        // through the freezer.
        let out = kill_at(&ctx, &["kill", "--all", &id, sig], "cgroup:parent:frozen");
        if *sig == "TERM" {
            assert_ne!(
                out.code,
                0,
                "kill --all went through: {}",
                out.stderr.trim()
            );
            let st = ctx.moat(&["state", &id]).ok();
            assert!(
                st.stdout.contains("\"paused\""),
                "killed inside the round, the container is left frozen: {}",
                st.stdout
            );
        }
        clean_after_kill(&ctx, &id, &format!("kill --all {sig} killed while frozen"));
    }
}

/// `run` (detached and in the foreground) killed at its own points and at create's, and
/// `update` killed before and after it writes the cgroup: `delete --force` leaves nothing
/// and the same id is created again.
#[test]
#[ignore = "needs root: real containers"]
fn run_and_update_killed_at_every_step() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("kp-run");
    ctx.args(&["sleep", "30"]);
    let b = ctx.bundle_str();
    for (i, (detach, point)) in [
        (true, "create:parent:Cgroup"),
        (true, "create:child:Rootfs"),
        (true, "run:parent:Created"),
        (true, "run:parent:Started"),
        (false, "run:parent:Created"),
        (false, "run:parent:Started"),
    ]
    .iter()
    .enumerate()
    {
        let id = ctx.id(&format!("run{i}"));
        let mut args = vec!["run", "--bundle", &b];
        if *detach {
            args.push("--detach");
        }
        args.push(&id);
        let out = kill_at(&ctx, &args, point);
        assert_ne!(
            out.code,
            0,
            "{point}: run went through: {}",
            out.stderr.trim()
        );
        clean_after_kill(&ctx, &id, point);
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        clean_after_kill(&ctx, &id, &format!("{point}, then a whole create"));
    }
    // Foreground run of a container that exits at once, killed before its delete.
    let mut quick = Ctx::new("kp-run-exit");
    quick.args(&["true"]);
    let qb = quick.bundle_str();
    let id = quick.id("exited");
    let out = kill_at(&quick, &["run", "--bundle", &qb, &id], "run:parent:Exited");
    assert_ne!(out.code, 0, "run went through: {}", out.stderr.trim());
    clean_after_kill(&quick, &id, "run:parent:Exited");

    for point in ["update:parent:cgroup", "update:parent:record"] {
        let id = ctx.id(&format!("upd-{}", point.rsplit(':').next().unwrap_or("")));
        ctx.moat(&["run", "--detach", "--bundle", &b, &id]).ok();
        let out = kill_at(&ctx, &["update", "--pids-limit", "200", &id], point);
        assert_ne!(
            out.code,
            0,
            "{point}: update went through: {}",
            out.stderr.trim()
        );
        let st = ctx.moat(&["state", &id]).ok();
        assert!(st.stdout.contains("\"running\""), "{point}: {}", st.stdout);
        ctx.moat(&["update", "--pids-limit", "300", &id]).ok();
        clean_after_kill(&ctx, &id, point);
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        clean_after_kill(&ctx, &id, &format!("{point}, then a whole create"));
    }
}

/// A gVisor container's context (`sleep 60` under `moat.runtime=gvisor`), or `None` with
/// the reason said: not root, or no runsc on PATH.
fn gvisor_ctx(test: &str, tag: &str) -> Option<Ctx> {
    if !require_root() {
        return None;
    }
    if !std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()))
    {
        missing(&format!("runsc not installed ({test})"));
        return None;
    }
    let mut ctx = Ctx::new(tag);
    ctx.args(&["sleep", "60"]);
    ctx.set("/annotations", json!({"moat.runtime": "gvisor"}));
    Some(ctx)
}

/// The gVisor path (runsc, with its default platform): create killed before
/// and after `runsc create`, start before `runsc start`, delete before and after `runsc
/// delete`; then `delete --force` leaves nothing (state dir, runsc's files under
/// `<root>/@runsc`, a sandbox or gofer process, the sandbox's cgroup) and the id works again.
#[test]
#[ignore = "needs root: real containers"]
fn gvisor_killed_at_every_step() {
    let Some(ctx) = gvisor_ctx("gvisor_killed_at_every_step", "kp-gv") else {
        return;
    };
    let b = ctx.bundle_str();
    for (i, point) in [
        "create:parent:gvisor.Prepared",
        "create:parent:gvisor.Runsc",
        "start:parent:gvisor.Start",
        "delete:parent:gvisor.runsc",
        "delete:parent:gvisor.state",
    ]
    .iter()
    .enumerate()
    {
        let id = ctx.id(&format!("gv{i}"));
        let out = if point.starts_with("create") {
            kill_at(&ctx, &["create", "--bundle", &b, &id], point)
        } else {
            ctx.moat(&["create", "--bundle", &b, &id]).ok();
            if point.starts_with("start") {
                kill_at(&ctx, &["start", &id], point)
            } else {
                ctx.moat(&["start", &id]).ok();
                kill_at(&ctx, &["delete", "--force", &id], point)
            }
        };
        assert_ne!(out.code, 0, "{point}: went through: {}", out.stderr.trim());
        clean_after_kill(&ctx, &id, point);
        ctx.moat(&["create", "--bundle", &b, &id]).ok();
        ctx.moat(&["start", &id]).ok();
        clean_after_kill(
            &ctx,
            &id,
            &format!("{point}, then a whole create and start"),
        );
    }
}

/// A gVisor checkpoint killed before runsc runs leaves the container running and no record
/// of an image; killed after runsc wrote the image but before its files were recorded, the
/// image is never restorable (no record) and delete takes what is left; a restore killed at
/// each of its points leaves nothing after `delete --force`, and the image still restores.
#[test]
#[ignore = "needs root: real containers"]
fn gvisor_snapshot_killed_at_every_step() {
    let Some(ctx) = gvisor_ctx("gvisor_snapshot_killed_at_every_step", "kp-gvs") else {
        return;
    };
    let b = ctx.bundle_str();
    let records = |ctx: &Ctx| -> usize {
        std::fs::read_dir(ctx.root.join("@checkpoints"))
            .map(|rd| rd.count())
            .unwrap_or(0)
    };
    // Before runsc: the container goes on, nothing recorded.
    let id = ctx.id("ck0");
    let img = ctx.dir.join("img0");
    let img_s = img.to_str().unwrap().to_string();
    ctx.moat(&["run", "--detach", "--bundle", &b, &id]).ok();
    let out = kill_at(
        &ctx,
        &["checkpoint", "--image-path", &img_s, &id],
        "checkpoint:parent:gvisor.Runsc",
    );
    assert_ne!(out.code, 0, "checkpoint went through the kill");
    assert_eq!(ctx.guard(&id).status(), "running", "the container stopped");
    assert_eq!(records(&ctx), 0, "a record with no image");
    clean_after_kill(&ctx, &id, "checkpoint:parent:gvisor.Runsc");
    // After runsc, before the record: the image is never restorable.
    let id = ctx.id("ck1");
    ctx.moat(&["run", "--detach", "--bundle", &b, &id]).ok();
    let out = kill_at(
        &ctx,
        &["checkpoint", "--image-path", &img_s, &id],
        "checkpoint:parent:gvisor.Record",
    );
    assert_ne!(out.code, 0, "checkpoint went through the kill");
    clean_after_kill(&ctx, &id, "checkpoint:parent:gvisor.Record");
    let r = ctx.id("rs-unrecorded");
    let out = ctx.moat(&[
        "restore",
        "--detach",
        "--image-path",
        &img_s,
        "--bundle",
        &b,
        &r,
    ]);
    assert_ne!(out.code, 0, "an unrecorded image restored");
    assert!(out.stderr.contains("no record"), "{}", out.stderr);
    clean_after_kill(&ctx, &r, "restore of an unrecorded image");
    // A whole checkpoint, then restores killed at each point.
    let id = ctx.id("ck2");
    let img = ctx.dir.join("img2");
    let img_s = img.to_str().unwrap().to_string();
    ctx.moat(&["run", "--detach", "--bundle", &b, &id]).ok();
    ctx.moat(&["checkpoint", "--image-path", &img_s, &id]).ok();
    clean_after_kill(&ctx, &id, "a whole checkpoint");
    for (i, point) in [
        "create:parent:gvisor.Prepared",
        "create:parent:gvisor.Runsc",
    ]
    .iter()
    .enumerate()
    {
        let r = ctx.id(&format!("rs{i}"));
        let args = [
            "restore",
            "--detach",
            "--image-path",
            &img_s,
            "--bundle",
            &b,
            &r,
        ];
        let out = kill_at(&ctx, &args, point);
        assert_ne!(out.code, 0, "restore went through {point}");
        clean_after_kill(&ctx, &r, &format!("restore killed at {point}"));
        ctx.moat(&args).ok();
        assert_eq!(
            ctx.guard(&r).status(),
            "running",
            "{point}, then a whole restore"
        );
        clean_after_kill(&ctx, &r, &format!("{point}, then a whole restore"));
    }
}
