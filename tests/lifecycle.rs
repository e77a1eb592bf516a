//! create / start / state / kill / delete / list / run: statuses, JSON fields, exit codes
//! and the error strings clients match on.

mod support;

use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use support::*;

const T: Duration = Duration::from_secs(20);

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_leaves_a_created_container_with_runc_state_fields() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("state");
    ctx.args(&["sleep", "30"]);
    ctx.set("/annotations", json!({"org.example.k": "v"}));
    let c = ctx.create_ok("c");
    let st = c.state();
    let obj = st.as_object().expect("object");
    let mut keys: Vec<&str> = obj.keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "annotations",
            "bundle",
            "created",
            "id",
            "ociVersion",
            "owner",
            "pid",
            "rootfs",
            "status"
        ]
    );
    assert_eq!(st["status"], "created");
    assert_eq!(st["id"], c.id.as_str());
    assert_eq!(st["bundle"], ctx.bundle_str());
    assert_eq!(st["rootfs"], ctx.rootfs().to_str().unwrap());
    assert!(st["ociVersion"].as_str().unwrap().starts_with("1."), "{st}");
    assert_eq!(st["annotations"]["org.example.k"], "v");
    let created = st["created"].as_str().unwrap();
    assert!(
        created.len() >= 20 && created.as_bytes()[10] == b'T' && created.ends_with('Z'),
        "created is not RFC 3339 UTC: {created}"
    );
    let pid = i32::try_from(st["pid"].as_i64().unwrap()).unwrap();
    assert!(pid > 1);
    assert!(
        !is_gone(pid),
        "init {pid} of a created container must be alive"
    );
    // The init waits on the exec fifo; nothing has run yet.
    assert!(ctx.state_dir(&c.id).join("exec.fifo").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn start_runs_the_process_and_status_becomes_running() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("start");
    ctx.sh("echo started; exec sleep 30");
    let c = ctx.create_ok("c");
    let pid = c.pid();
    assert_eq!(c.stdout(), "", "nothing may run before start");
    let out = c.start();
    assert_eq!(out.stdout, "");
    assert!(
        wait_until(T, || c.stdout() == "started\n"),
        "{:?}",
        c.stdout()
    );
    let st = c.state();
    assert_eq!(st["status"], "running");
    assert_eq!(st["pid"], pid, "start must not change the init pid");
    assert!(!ctx.state_dir(&c.id).join("exec.fifo").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn start_twice_fails() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("start2");
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start();
    let out = c.moat(&["start", &c.id]).fails();
    assert!(out.stderr.contains("already running"), "{}", out.stderr);
    assert_eq!(c.status(), "running");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exited_container_is_stopped_with_pid_zero() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("stopped");
    ctx.args(&["true"]);
    let c = ctx.create_ok("c");
    c.start_and_wait();
    let st = c.state();
    assert_eq!(st["status"], "stopped");
    assert_eq!(st["pid"], 0);
    let out = c.moat(&["start", &c.id]).fails();
    assert!(out.stderr.contains("stopped"), "{}", out.stderr);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn pid_file_holds_the_init_pid() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("pidfile");
    ctx.args(&["sleep", "30"]);
    let pidfile = ctx.dir.join("container.pid");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&[
        "create",
        "--bundle",
        &b,
        "--pid-file",
        pidfile.to_str().unwrap(),
        &id,
    ]);
    let c = ctx.guard(&id);
    out.ok();
    let text = fs::read_to_string(&pidfile).expect("pid file written before create returns");
    let pid: i32 = text.trim().parse().expect("decimal pid");
    assert_eq!(text, pid.to_string(), "runc writes the bare number");
    assert_eq!(pid, c.pid());
    // Written through a dot-prefixed temporary that is renamed into place.
    assert!(!ctx.dir.join(".container.pid").exists());
    // As subreaper we are the init's parent now, as conmon or the shim would be.
    assert_eq!(
        proc_state(pid).map(|s| s.1),
        Some(i32::try_from(std::process::id()).unwrap())
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_then_delete_removes_state_cgroup_and_process() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("del");
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    let cg = v1_cgroup_dir(pid, "pids").expect("pids cgroup");
    assert!(cg.ends_with(format!("moat/{}", c.id)), "{}", cg.display());
    c.kill("KILL").ok();
    c.wait_stopped(T);
    c.delete().ok();
    assert!(!ctx.state_dir(&c.id).exists());
    assert!(!cg.exists(), "cgroup {} not removed", cg.display());
    let out = c.moat(&["state", &c.id]).fails();
    assert!(
        out.stderr.contains("container does not exist"),
        "{}",
        out.stderr
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_of_created_container_kills_it() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("delcreated");
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    let pid = c.pid();
    let out = c.delete();
    assert_eq!(
        out.code, 0,
        "runc deletes a created container: {}",
        out.stderr
    );
    assert!(wait_until(T, || is_gone(pid)), "init {pid} survived delete");
    assert!(!ctx.state_dir(&c.id).exists());
    assert_eq!(c.stdout(), "", "the process never ran");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_of_running_container_needs_force() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("delrun");
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    let out = c.delete().fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("not stopped") && out.stderr.contains("running"),
        "{}",
        out.stderr
    );
    assert_eq!(c.status(), "running", "a refused delete must not harm it");
    c.moat(&["delete", "--force", &c.id]).ok();
    assert!(wait_until(T, || is_gone(pid)));
    assert!(!ctx.state_dir(&c.id).exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_force_of_nonexistent_container_succeeds() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("delnone");
    let id = ctx.id("nosuch");
    let out = ctx.moat(&["delete", "--force", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = ctx.moat(&["delete", &id]).fails();
    assert!(
        out.stderr.contains("container does not exist"),
        "{}",
        out.stderr
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn state_of_nonexistent_container_fails() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("statenone");
    let out = ctx.moat(&["state", "nosuch"]).fails();
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("container does not exist"),
        "{}",
        out.stderr
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_accepts_name_sig_name_and_number() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("killforms");
    // A pid-namespace init only gets signals it has handlers for.
    ctx.sh(
        "trap 'echo got-USR1' USR1; trap 'echo got-TERM; exit 0' TERM; echo ready; \
         while :; do sleep 0.02; done",
    );
    let c = ctx.create_ok("c");
    c.start();
    assert!(wait_until(T, || c.stdout().contains("ready")));
    for (i, form) in ["USR1", "SIGUSR1", "usr1", "10"].iter().enumerate() {
        c.kill(form).ok();
        let want = i + 1;
        assert!(
            wait_until(T, || c.stdout().matches("got-USR1").count() == want),
            "signal {form:?} not delivered: {:?}",
            c.stdout()
        );
    }
    // No signal: SIGTERM.
    c.moat(&["kill", &c.id]).ok();
    c.wait_stopped(T);
    assert!(c.stdout().ends_with("got-TERM\n"), "{:?}", c.stdout());
    let out = c.kill("NOSUCHSIG").fails();
    assert!(out.stderr.contains("invalid signal"), "{}", out.stderr);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_of_stopped_container_says_not_running_but_kill_all_succeeds() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("killstopped");
    ctx.args(&["true"]);
    let c = ctx.create_ok("c");
    c.start_and_wait();
    let out = c.kill("KILL").fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("container not running"),
        "{}",
        out.stderr
    );
    // containerd's shim sends this after every exit.
    let out = c.moat(&["kill", "--all", &c.id, "9"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The liveness probe says the same as runc: not running.
    let out = c.kill("0").fails();
    assert!(
        out.stderr.contains("container not running"),
        "{}",
        out.stderr
    );
}

/// `kill ID 0` and `kill --all ID 0` probe a live container without disturbing it (runc
/// accepts signal 0; callers use it to ask whether the init is alive).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_signal_0_probes_a_running_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("kill0");
    ctx.sh("echo ready; while :; do sleep 0.02; done");
    let c = ctx.create_ok("c");
    c.start();
    assert!(wait_until(T, || c.stdout().contains("ready")));
    c.kill("0").ok();
    c.moat(&["kill", "--all", &c.id, "0"]).ok();
    assert_eq!(
        c.state()["status"],
        "running",
        "signal 0 disturbed the init"
    );
    c.kill("KILL").ok();
    c.wait_stopped(T);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_all_signals_every_process_in_the_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("killall");
    // Without a pid namespace killing the init does not take its children with it.
    ctx.without_ns("pid");
    ctx.sh("sleep 30 & echo $!; wait");
    let c = ctx.create_ok("c");
    c.start();
    assert!(wait_until(T, || c.stdout().ends_with('\n')));
    let child: i32 = c.stdout().trim().parse().expect("child pid");
    assert!(!is_gone(child));
    c.moat(&["kill", "--all", &c.id, "KILL"]).ok();
    assert!(
        wait_until(T, || is_gone(child)),
        "child {child} survived kill --all"
    );
    c.wait_stopped(T);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn run_in_foreground_exits_with_the_process_status_and_deletes() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("run");
    ctx.sh("echo out; echo err >&2; exit 7");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let _g = ctx.guard(&id);
    let out = ctx.moat(&["run", "--bundle", &b, &id]);
    assert_eq!(out.code, 7, "{out:#?}");
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert!(!ctx.state_dir(&id).exists(), "run without --keep deletes");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn run_in_foreground_reports_a_signal_as_128_plus_n() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("runsig");
    // Without a pid namespace the shell is not an init, so SIGTERM kills it.
    ctx.without_ns("pid");
    ctx.sh("kill -TERM $$; sleep 5");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let _g = ctx.guard(&id);
    let out = ctx.moat(&["run", "--bundle", &b, &id]);
    assert_eq!(out.code, 128 + libc::SIGTERM, "{out:#?}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn run_in_foreground_killed_from_outside_exits_137() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("runkill");
    ctx.args(&["sleep", "30"]);
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let g = ctx.guard(&id);
    let run = ctx.moat_bg(&["run", "--bundle", &b, &id]);
    assert!(
        wait_until(T, || {
            let o = g.moat(&["state", &id]);
            o.code == 0 && o.stdout.contains("\"running\"")
        }),
        "never running"
    );
    g.kill("KILL").ok();
    let out = run.wait(T);
    assert_eq!(out.code, 137, "{out:#?}");
    assert!(!ctx.state_dir(&id).exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn run_detached_returns_at_once_with_a_running_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rund");
    ctx.args(&["sleep", "30"]);
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let c = ctx.guard(&id);
    let t0 = Instant::now();
    let out = ctx.moat(&["run", "-d", "--bundle", &b, &id]).ok();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(out.stdout, "");
    assert_eq!(c.status(), "running");
    let pid = c.pid();
    c.moat(&["delete", "--force", &id]).ok();
    assert!(wait_until(T, || is_gone(pid)));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn run_keep_leaves_a_stopped_container() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("runkeep");
    ctx.sh("exit 3");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let c = ctx.guard(&id);
    let out = ctx.moat(&["run", "--keep", "--bundle", &b, &id]);
    assert_eq!(out.code, 3, "{out:#?}");
    let st = c.state();
    assert_eq!(st["status"], "stopped");
    assert_eq!(st["pid"], 0);
    c.delete().ok();
    assert!(!ctx.state_dir(&id).exists());
}

/// runc 1.5's `list`: a `--root` that does not exist is an error (a mistyped path must not
/// look like a host without containers); the default root missing means no container was
/// made yet, an empty list.
#[test]
#[ignore = "root: runs moat as root (scripts/test runs it with --include-ignored)"]
fn list_fails_on_a_missing_root_flag_and_is_empty_on_a_missing_default_root() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("list-missing");
    let out = ctx.moat(&["list"]).fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "moat: cannot read state root {}: No such file or directory (os error 2)",
            ctx.root.display()
        )
    );
    assert!(!ctx.root.exists(), "list made the root");

    // The default root (rootless: $XDG_RUNTIME_DIR/moat) missing.
    let xdg = ctx.dir.join("xdg");
    fs::create_dir_all(&xdg).unwrap();
    let mut c = Command::new(MOAT);
    c.env("XDG_RUNTIME_DIR", &xdg)
        .args(["--rootless", "true", "list", "-q"]);
    let out = run_cmd(c, &ctx.io, CALL_TIMEOUT).ok();
    assert_eq!(out.stdout, "");
    assert!(!xdg.join("moat").exists(), "list made the default root");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn list_shows_every_container_in_table_json_and_quiet_forms() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("list");
    fs::create_dir_all(&ctx.root).unwrap();
    let out = ctx.moat(&["list", "--format", "json"]).ok();
    assert_eq!(
        out.stdout.trim(),
        "null",
        "runc prints null for no containers"
    );
    ctx.args(&["sleep", "30"]);
    let a = ctx.create_ok("a");
    let b = ctx.create_ok("b");
    b.start();
    let out = ctx.moat(&["list", "-q"]).ok();
    assert_eq!(out.stdout, format!("{}\n{}\n", a.id, b.id));
    let out = ctx.moat(&["list", "--format", "json"]).ok();
    let v: Value = serde_json::from_str(&out.stdout).expect("json");
    let arr = v.as_array().expect("array");
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["id"], a.id.as_str());
    assert_eq!(arr[0]["status"], "created");
    assert_eq!(arr[1]["id"], b.id.as_str());
    assert_eq!(arr[1]["status"], "running");
    assert_eq!(arr[1]["pid"], b.pid());
    let out = ctx.moat(&["list"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]
    );
    let row: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(row[0], b.id);
    assert_eq!(row[1], b.pid().to_string());
    assert_eq!(row[2], "running");
    assert_eq!(row[3], ctx.bundle_str());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn log_json_failure_writes_exactly_one_error_object() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("logjson");
    let log = ctx.dir.join("log.json");
    let l = log.to_str().unwrap();
    let out = ctx
        .moat(&["--log", l, "--log-format", "json", "state", "nosuch"])
        .fails();
    let text = fs::read_to_string(&log).expect("log file");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let v: Value = serde_json::from_str(lines[0]).expect("one JSON object per line");
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["level", "msg", "time"]);
    assert_eq!(v["level"], "error");
    assert!(v["msg"]
        .as_str()
        .unwrap()
        .contains("container does not exist"));
    let time = v["time"].as_str().unwrap();
    assert!(time.len() >= 20 && time.as_bytes()[10] == b'T', "{time}");
    // The same message on stderr, once.
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains(v["msg"].as_str().unwrap()));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn log_file_is_created_even_on_success() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("logok");
    fs::create_dir_all(&ctx.root).unwrap();
    let log = ctx.dir.join("sub-log.json");
    let out = ctx.moat(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "list",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let meta = fs::metadata(&log).expect("log file must exist after a successful call");
    assert_eq!(meta.len(), 0, "{}", fs::read_to_string(&log).unwrap());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn version_prints_three_lines() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("version");
    let out = ctx.moat(&["--version"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(lines[0].starts_with("moat version "), "{}", lines[0]);
    assert!(lines[1].starts_with("commit: "), "{}", lines[1]);
    assert!(lines[2].starts_with("spec: 1."), "{}", lines[2]);
}

/// runc's tty.bats "exec [tty consolesize]": `exec -p <(echo JSON)` names the
/// process file by an inherited pipe fd (`/dev/fd/N`, `/proc/self/fd/N`). It must be read
/// while moat still holds what the caller passed; the fd itself still does not reach the
/// container (tests/security/fds.rs holds the sweep).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_reads_the_process_file_from_an_inherited_pipe() {
    if !require_root() {
        return;
    }
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let mut ctx = Ctx::new("execpipe");
    ctx.args(&["sleep", "600"]);
    let c = ctx.create_ok("c");
    c.start();
    let mut p = ctx.config["process"].clone();
    p["args"] = json!(["sh", "-c", "echo from-the-pipe; ls /proc/$$/fd; true"]);
    for path in ["/dev/fd/63", "/proc/self/fd/63"] {
        let (r, w) = nix::unistd::pipe().expect("pipe");
        fs::File::from(w)
            .write_all(&serde_json::to_vec(&p).unwrap())
            .expect("write the process into the pipe");
        let mut cmd = ctx.cmd();
        cmd.args(["exec", "-p", path, &c.id]);
        leak_fd(&mut cmd, r.as_raw_fd(), 63..=63);
        let out = ctx.run(cmd);
        assert_eq!(out.code, 0, "exec -p {path}: {out:#?}");
        assert_eq!(out.stdout, "from-the-pipe\n0\n1\n2\n", "exec -p {path}");
    }
    c.kill("KILL");
}

/// runc's debug.bats "global --debug", exec.bats "runc --debug exec": `--debug`
/// without `--log` writes moat's debug lines to stderr, as runc does (its log goes to
/// stderr when no file is named); with `--log` they go to the file only, and without
/// `--debug` stderr stays as it was (clients read it).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn debug_without_log_writes_debug_lines_to_stderr() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("debug");
    ctx.args(&["echo", "Hello World"]);
    let b = ctx.bundle_str();
    let id = ctx.id("run");
    let _g = ctx.guard(&id);
    let out = ctx.moat(&["--debug", "run", "--bundle", &b, &id]).ok();
    assert_eq!(out.stdout, "Hello World\n");
    let debug: Vec<&str> = out.stderr_lines();
    assert!(
        !debug.is_empty() && debug.iter().all(|l| l.contains("level=debug msg=")),
        "run --debug: {:?}",
        out.stderr
    );
    let out = ctx.moat(&["run", "--bundle", &b, &id]).ok();
    assert_eq!(out.stderr, "", "run without --debug");

    ctx.args(&["sleep", "600"]);
    let c = ctx.create_ok("c");
    c.start();
    let out = ctx.moat(&["--debug", "exec", &c.id, "true"]).ok();
    assert!(
        out.stderr.contains("level=debug msg="),
        "exec --debug: {:?}",
        out.stderr
    );
    let out = ctx
        .moat(&["--debug", "--log-format", "json", "exec", &c.id, "true"])
        .ok();
    for l in out.stderr_lines() {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
        assert_eq!(v["level"], "debug", "{l}");
    }
    assert!(!out.stderr.is_empty(), "exec --debug --log-format json");
    let log = ctx.dir.join("debug.log");
    let out = ctx
        .moat(&[
            "--debug",
            "--log",
            log.to_str().unwrap(),
            "exec",
            &c.id,
            "true",
        ])
        .ok();
    assert_eq!(out.stderr, "", "exec --debug --log");
    assert!(
        read(&log).contains("level=debug msg="),
        "exec --debug --log: {}",
        read(&log)
    );
    let out = ctx.moat(&["exec", &c.id, "true"]).ok();
    assert_eq!(out.stderr, "", "exec without --debug");
    c.kill("KILL");
}
