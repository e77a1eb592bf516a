//! Bad input to `exec`, `update` and `events`: a stopped, paused or unknown container, a
//! process.json with a bad user, cwd or capability, a cwd through a leaked fd, resources
//! that are not JSON or that the kernel refuses, events for a deleted container. Each must
//! fail with exit status 1 and one error line naming what is wrong, and leave the
//! container as it was: same status and init, limits unchanged, a later exec still works.

mod support;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use support::*;

const T: Duration = Duration::from_secs(20);

/// A started container running `sleep 600`.
#[track_caller]
fn running(ctx: &mut Ctx) -> Container {
    ctx.args(&["sleep", "600"]);
    let c = ctx.create_ok("c");
    c.start();
    assert_eq!(c.status(), "running");
    c
}

/// runc's status (255 for an exec that never ran, said in runc's words; 1 otherwise) and
/// exactly one stderr line, which contains every needle.
#[track_caller]
fn one_line_error(out: &Out, needles: &[&str]) {
    let exec = out.subcommand() == Some("exec");
    let want = if exec { 255 } else { 1 };
    assert_eq!(
        out.code, want,
        "{}: expected exit {want}: {out:#?}",
        out.what
    );
    if exec {
        assert!(
            out.stderr.starts_with("moat: exec failed: "),
            "{:?}",
            out.stderr
        );
    }
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "want one error line, got {:?}", out.stderr);
    for n in needles {
        assert!(
            lines[0].contains(n),
            "error {:?} does not mention {n:?}",
            lines[0]
        );
    }
}

/// The container still runs the same init, and a new exec works.
#[track_caller]
fn assert_unharmed(c: &Container, pid: i32) {
    let st = c.state();
    assert_eq!(st["status"], "running", "{st}");
    assert_eq!(st["pid"], pid, "{st}");
    assert!(!is_gone(pid), "init {pid} is gone");
    let out = c.moat(&["exec", &c.id, "echo", "still-here"]).ok();
    assert_eq!(out.stdout, "still-here\n");
}

/// Writes a process.json: the container's process with `args`, changed by `edit`.
fn process_file(ctx: &Ctx, args: &[&str], edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut p = ctx.config["process"].clone();
    p["args"] = json!(args);
    edit(&mut p);
    let path = ctx.dir.join(format!("process-{}.json", std::process::id()));
    fs::write(&path, serde_json::to_vec_pretty(&p).unwrap()).unwrap();
    path
}

/// `exec --process FILE` of a process edited by `edit`; it must fail as `one_line_error`
/// says, without running anything, and leave the container unharmed.
#[track_caller]
fn bad_process(ctx: &Ctx, c: &Container, edit: impl FnOnce(&mut Value), needles: &[&str]) {
    let pid = c.pid();
    let file = process_file(ctx, &["sh", "-c", "echo ran"], edit);
    let out = c.moat(&["exec", "--process", file.to_str().unwrap(), &c.id]);
    one_line_error(&out, needles);
    assert_eq!(out.stdout, "", "the process ran");
    assert_unharmed(c, pid);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_into_a_stopped_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exstopped");
    ctx.args(&["true"]);
    let c = ctx.create_ok("c");
    c.start_and_wait();
    let out = c.moat(&["exec", &c.id, "echo", "ran"]);
    one_line_error(&out, &["stopped"]);
    assert_eq!(out.stdout, "");
    assert_eq!(c.status(), "stopped");
    c.delete().ok();
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_into_a_paused_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("expaused");
    let c = running(&mut ctx);
    let pid = c.pid();
    c.moat(&["pause", &c.id]).ok();
    let out = c.moat(&["exec", &c.id, "echo", "ran"]);
    one_line_error(&out, &["paused", "--ignore-paused"]);
    assert_eq!(out.stdout, "");
    assert_eq!(c.status(), "paused");

    // With --ignore-paused the process joins the frozen cgroup: it runs once the
    // container is resumed, and the exec does not resume it by itself.
    let bg = ctx.moat_bg(&["exec", "--ignore-paused", &c.id, "echo", "ran"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.status(), "paused");
    c.moat(&["resume", &c.id]).ok();
    let out = bg.wait(T);
    assert_eq!(out.code, 0, "exec --ignore-paused: {out:#?}");
    assert_eq!(out.stdout, "ran\n");
    assert_unharmed(&c, pid);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_into_an_unknown_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exunknown");
    // A state root that holds another container, and one that does not exist at all.
    let c = running(&mut ctx);
    let pid = c.pid();
    let out = ctx.moat(&["exec", "no-such-container", "true"]);
    one_line_error(&out, &["container does not exist"]);
    assert!(!ctx.state_dir("no-such-container").exists());
    assert_unharmed(&c, pid);
    let empty = ctx.dir.join("empty-root");
    let mut cmd = std::process::Command::new(MOAT);
    cmd.arg("--root")
        .arg(&empty)
        .args(["exec", "no-such-container", "true"]);
    let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT);
    one_line_error(&out, &["container does not exist"]);
}

/// One JSON truth: a process file whose `Capabilities` differs from the field
/// only in case is refused (Go readers would take it for `capabilities`).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn process_json_with_a_case_variant_key() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("excase");
    let c = running(&mut ctx);
    let admin = json!(["CAP_SYS_ADMIN"]);
    bad_process(
        &ctx,
        &c,
        |p| p["Capabilities"] = json!({"bounding": admin, "effective": admin, "permitted": admin}),
        &[
            r#"process-"#,
            r#": top level: "Capabilities" differs only in case from "capabilities"; refused"#,
        ],
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn process_json_with_a_bad_user() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exuser");
    let c = running(&mut ctx);
    bad_process(&ctx, &c, |p| p["user"]["uid"] = json!("x"), &["user.uid"]);
    bad_process(&ctx, &c, |p| p["user"]["gid"] = json!(-1), &["user.gid"]);
    // (uid_t)-1 would mean "unchanged" to setresuid, i.e. stay root.
    bad_process(
        &ctx,
        &c,
        |p| p["user"]["uid"] = json!(4294967295u32),
        &["user.uid", "4294967295"],
    );
    bad_process(
        &ctx,
        &c,
        |p| p["user"]["additionalGids"] = json!([4294967295u32]),
        &["user.additionalGids", "4294967295"],
    );
    // The same through the flag.
    let pid = c.pid();
    let out = c.moat(&["exec", "--user", "4294967295", &c.id, "id", "-u"]);
    one_line_error(&out, &["4294967295"]);
    let out = c.moat(&["exec", "--user", "root", &c.id, "id", "-u"]);
    one_line_error(&out, &["--user", "root"]);
    assert_unharmed(&c, pid);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn process_json_with_a_bad_cwd() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("excwd");
    let c = running(&mut ctx);
    bad_process(
        &ctx,
        &c,
        |p| p["cwd"] = json!("tmp"),
        &["cwd", "\"tmp\"", "absolute"],
    );
    bad_process(
        &ctx,
        &c,
        |p| p["cwd"] = json!("/nonexistent"),
        &["cwd", "/nonexistent"],
    );
    bad_process(
        &ctx,
        &c,
        |p| p["cwd"] = json!("/etc/passwd"),
        &["cwd", "/etc/passwd"],
    );
    // The same through the flag.
    let pid = c.pid();
    let out = c.moat(&["exec", "--cwd", "/nonexistent", &c.id, "pwd"]);
    one_line_error(&out, &["cwd", "/nonexistent"]);
    assert_eq!(out.stdout, "");
    assert_unharmed(&c, pid);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn process_json_with_an_unknown_capability() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("excap");
    let c = running(&mut ctx);
    // In a process file, as in config.json: ignored with a warning, as runc does.
    let file = process_file(&ctx, &["sh", "-c", "echo ran"], |p| {
        p["capabilities"]["bounding"]
            .as_array_mut()
            .unwrap()
            .push(json!("CAP_BOGUS"));
        p["capabilities"]["effective"] = json!(["CAP_KILL", "NOT_A_CAP"]);
    });
    let out = c
        .moat(&["exec", "--process", file.to_str().unwrap(), &c.id])
        .ok();
    assert_eq!(out.stdout, "ran\n");
    assert!(
        out.stderr
            .contains("ignoring unknown or unavailable capabilities: CAP_BOGUS NOT_A_CAP"),
        "{}",
        out.stderr
    );
    // The caller's own flag is still refused.
    let pid = c.pid();
    let out = c.moat(&["exec", "--cap", "CAP_BOGUS", &c.id, "true"]);
    one_line_error(&out, &["CAP_BOGUS"]);
    assert_unharmed(&c, pid);
}

/// runc's CVE-2024-21626: a cwd of /proc/self/fd/N reaching a directory fd that the
/// runtime still holds would put the process outside the container's root.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cwd_through_a_leaked_fd_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exfdcwd");
    let c = running(&mut ctx);
    for n in 3..=10 {
        let cwd = format!("/proc/self/fd/{n}");
        bad_process(&ctx, &c, |p| p["cwd"] = json!(cwd), &["cwd", &cwd]);
        // And with --cwd: the same path, the same answer.
        let out = c.moat(&["exec", "--cwd", &cwd, &c.id, "pwd"]);
        one_line_error(&out, &["cwd", &cwd]);
        assert_eq!(out.stdout, "", "exec ran in {cwd}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn update_with_bad_json_or_values_the_kernel_refuses() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exupdate");
    ctx.set("/linux/resources/memory", json!({"limit": 64 << 20}));
    ctx.set("/linux/resources/pids", json!({"limit": 40}));
    let c = running(&mut ctx);
    let pid = c.pid();
    let mem = v1_cgroup_dir(pid, "memory").expect("memory cgroup");
    let pids = v1_cgroup_dir(pid, "pids").expect("pids cgroup");
    let cpuset = v1_cgroup_dir(pid, "cpuset").expect("cpuset cgroup");
    let limits = || {
        (
            read(mem.join("memory.limit_in_bytes")),
            read(pids.join("pids.max")),
            read(cpuset.join("cpuset.cpus")),
        )
    };
    let before = limits();
    assert_eq!(before.0.trim(), "67108864");
    assert_eq!(before.1.trim(), "40");
    let saved = ctx.state_dir(&c.id).join("config.json");
    let spec_before = read(&saved);

    let file = ctx.dir.join("resources.json");
    let cases: &[(&str, &[&str])] = &[
        // Not JSON, cut short, a wrong type, a value no cgroup file takes.
        ("not json", &["resources", "line 1"]),
        (r#"{"pids": {"limit": 5}"#, &["resources", "line 1"]),
        (
            r#"{"memory": {"limit": "lots"}, "pids": {"limit": 5}}"#,
            &["memory.limit"],
        ),
        (r#"{"cpu": {"cpus": "4095"}}"#, &["cpuset.cpus", "4095"]),
        // Valid limits next to the refused one are not left half-applied.
        (
            r#"{"memory": {"limit": 33554432}, "pids": {"limit": 7}, "cpu": {"cpus": "4095"}}"#,
            &["cpuset.cpus", "4095"],
        ),
    ];
    for (json, needles) in cases {
        fs::write(&file, json).unwrap();
        let out = c.moat(&["update", "--resources", file.to_str().unwrap(), &c.id]);
        one_line_error(&out, needles);
        assert_eq!(limits(), before, "limits changed by {json}");
        assert_eq!(read(&saved), spec_before, "saved spec changed by {json}");
        assert_unharmed(&c, pid);
    }
    let out = c.moat(&["update", "--cpuset-cpus", "4095", &c.id]);
    one_line_error(&out, &["cpuset.cpus", "4095"]);
    assert_eq!(limits(), before);
    let out = c.moat(&["update", "--memory", "lots", &c.id]);
    assert_ne!(out.code, 0, "--memory lots accepted");
    assert!(out.stderr.contains("lots"), "{}", out.stderr);
    assert_eq!(limits(), before);
    assert_unharmed(&c, pid);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn events_for_a_deleted_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("exevents");
    let c = running(&mut ctx);
    c.moat(&["events", "--stats", &c.id]).ok();
    c.kill("KILL").ok();
    c.wait_stopped(T);
    c.delete().ok();
    let out = c.moat(&["events", "--stats", &c.id]);
    one_line_error(&out, &["container does not exist"]);
    assert_eq!(out.stdout, "");
    // The stream form fails the same way instead of waiting for a container to appear.
    let out = c.moat(&["events", "--interval", "100ms", &c.id]);
    one_line_error(&out, &["container does not exist"]);
    assert_eq!(out.stdout, "");
}
