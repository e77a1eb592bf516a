//! OCI hooks: all six kinds in lifecycle order, the state they get on stdin, and failures
//! (a failing prestart, a timeout) that must undo the create.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;

const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A directory with the hook script and the log it appends to. It is bind-mounted into
/// the container at /hooklog so that startContainer (which runs inside, after pivot_root)
/// can use the same script and log.
struct HookLog {
    dir: PathBuf,
}

/// Appends `<kind> <state JSON>` as one line, after an optional delay (`$3` seconds).
const SCRIPT: &str = r#"state=$(cat)
[ -n "$3" ] && sleep "$3"
printf '%s %s\n' "$1" "$state" >> "$2"
"#;

impl HookLog {
    fn new(ctx: &mut Ctx) -> HookLog {
        let dir = ctx.dir.join("hooklog");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("hook.sh"), SCRIPT).unwrap();
        fs::write(dir.join("log"), "").unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/hooklog", "type": "bind", "source": dir, "options": ["rbind", "rw"]}),
        );
        HookLog { dir }
    }

    /// A hook running the script from the host's view of the directory.
    fn host_hook(&self, kind: &str) -> Value {
        self.hook_at(&self.dir, kind, None)
    }

    fn hook_at(&self, dir: &Path, kind: &str, delay: Option<&str>) -> Value {
        let script = dir.join("hook.sh");
        let log = dir.join("log");
        let mut args = vec![
            "sh".to_string(),
            script.to_str().unwrap().to_string(),
            kind.to_string(),
            log.to_str().unwrap().to_string(),
        ];
        if let Some(d) = delay {
            args.push(d.to_string());
        }
        json!({"path": "/bin/sh", "args": args, "env": [PATH_ENV]})
    }

    /// (kind, state) per line, in order.
    fn entries(&self) -> Vec<(String, Value)> {
        read(self.dir.join("log"))
            .lines()
            .map(|l| {
                let (kind, state) = l.split_once(' ').expect("kind and state");
                let v = serde_json::from_str(state)
                    .unwrap_or_else(|e| panic!("{kind}: state is not JSON ({e}): {state}"));
                (kind.to_string(), v)
            })
            .collect()
    }

    fn kinds(&self) -> Vec<String> {
        self.entries().into_iter().map(|(k, _)| k).collect()
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn all_six_hooks_run_in_lifecycle_order_with_the_state_on_stdin() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("hooks");
    let log = HookLog::new(&mut ctx);
    let hooks = json!({
        "prestart": [log.host_hook("prestart")],
        "createRuntime": [log.host_hook("createRuntime")],
        // Runs in the container's namespaces before pivot_root: host paths still resolve.
        "createContainer": [log.host_hook("createContainer")],
        // Runs inside the container after pivot_root; slow, so a poststart that does not
        // wait for the process to start would overtake it.
        "startContainer": [log.hook_at(Path::new("/hooklog"), "startContainer", Some("0.3"))],
        "poststart": [log.host_hook("poststart")],
        "poststop": [log.host_hook("poststop")],
    });
    ctx.set("/hooks", hooks);
    ctx.set("/annotations", json!({"org.example.hooks": "yes"}));
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    assert_eq!(
        log.kinds(),
        ["prestart", "createRuntime", "createContainer"],
        "after create"
    );
    let pid = c.pid();
    c.start();
    assert_eq!(
        log.kinds(),
        [
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart"
        ],
        "after start"
    );
    c.kill("KILL").ok();
    c.wait_stopped(Duration::from_secs(20));
    assert_eq!(log.kinds().len(), 5, "poststop runs at delete, not at exit");
    c.delete().ok();
    let entries = log.entries();
    let kinds: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart",
            "poststop"
        ]
    );
    for (kind, st) in &entries {
        assert_eq!(st["id"], c.id.as_str(), "{kind}");
        assert_eq!(st["bundle"], ctx.bundle_str(), "{kind}");
        assert_eq!(st["annotations"]["org.example.hooks"], "yes", "{kind}");
        assert!(
            st["ociVersion"].as_str().unwrap().starts_with("1."),
            "{kind}"
        );
        let (status, want_pid) = match kind.as_str() {
            "poststart" => ("running", pid),
            // As `state` shows a stopped container.
            "poststop" => ("stopped", 0),
            _ => ("creating", pid),
        };
        assert_eq!(st["status"], status, "{kind}: {st}");
        assert_eq!(st["pid"], want_pid, "{kind}: {st}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn failing_prestart_hook_fails_create_and_leaves_nothing() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("hookfail");
    let log = HookLog::new(&mut ctx);
    ctx.set(
        "/hooks",
        json!({
            "prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "cat >/dev/null; exit 3"]}],
            "createRuntime": [log.host_hook("createRuntime")],
            "poststop": [log.host_hook("poststop")],
        }),
    );
    ctx.args(&["sleep", "30"]);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("prestart"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
    assert!(log.kinds().is_empty(), "later hooks ran: {:?}", log.kinds());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn hook_timeout_kills_the_hook_and_fails_create() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("hooktimeout");
    ctx.set(
        "/hooks",
        json!({"createRuntime": [{"path": "/bin/sleep", "args": ["sleep", "10"], "timeout": 1}]}),
    );
    ctx.args(&["sleep", "30"]);
    let t0 = Instant::now();
    let (c, out) = ctx.create("c");
    let took = t0.elapsed();
    let out = out.fails();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(8),
        "create took {took:?}"
    );
    assert!(out.stderr.contains("timed out"), "{}", out.stderr);
    assert!(out.stderr.contains("createRuntime"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn failing_poststart_hook_is_only_a_warning() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("poststartfail");
    ctx.set(
        "/hooks",
        json!({"poststart": [{"path": "/bin/false", "args": ["false"]}]}),
    );
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    let out = c.moat(&["start", &c.id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("poststart"),
        "a warning names the hook: {}",
        out.stderr
    );
    assert_eq!(c.status(), "running");
}

/// With a time namespace the init is forked by an intermediate process ("staged" create).
/// The hooks that run in the container must still be told the init's pid.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn container_hooks_get_the_init_pid_in_a_staged_create() {
    if !require_root() {
        return;
    }
    if !Path::new("/proc/self/ns/time").exists() {
        missing("kernel has no time namespaces");
        return;
    }
    let mut ctx = Ctx::new("hookstaged");
    let log = HookLog::new(&mut ctx);
    ctx.push("/linux/namespaces", json!({"type": "time"}));
    ctx.set(
        "/hooks",
        json!({
            "createRuntime": [log.host_hook("createRuntime")],
            "createContainer": [log.host_hook("createContainer")],
            "startContainer": [log.hook_at(Path::new("/hooklog"), "startContainer", None)],
        }),
    );
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    let pid = c.pid();
    c.start();
    let entries = log.entries();
    assert_eq!(entries.len(), 3, "{entries:?}");
    for (kind, st) in &entries {
        assert_eq!(st["pid"], pid, "{kind}: {st}");
    }
}

/// A startContainer hook runs in the init after `start` has returned: nobody waits on
/// the sync socket any more, so a failure there is reported by the init itself, on the
/// container's stderr and as one error object in the create call's `--log`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn failing_start_container_hook_is_reported_by_the_init() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("startfail");
    ctx.set(
        "/hooks",
        json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "exit 4"]}]}),
    );
    ctx.args(&["sleep", "30"]);
    let id = ctx.id("c");
    let log = ctx.dir.join("create-log.json");
    let mut cmd = ctx.cmd();
    cmd.arg("--log").arg(&log).args([
        "--log-format",
        "json",
        "create",
        "--bundle",
        &ctx.bundle_str(),
        &id,
    ]);
    let c = ctx.guard(&id);
    let created = ctx.run(cmd).ok();
    c.moat(&["start", &c.id]).ok();
    c.wait_stopped(Duration::from_secs(20));
    let said = created.stderr_now();
    assert!(
        said.contains("container init: hooks: error running startContainer hook #0: "),
        "the init's stderr: {said:?}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let errors: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["level"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "one error object in --log: {text}");
    assert!(
        errors[0]["msg"]
            .as_str()
            .is_some_and(|m| m.contains("startContainer")),
        "{text}"
    );
}

/// No wait of create on the init is unbounded: an init that never answers (here a
/// createContainer hook without a timeout that never returns) ends create after
/// `[runtime] sync_timeout` with the row it was in, killed, and nothing left.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_init_that_never_answers_ends_create_at_the_sync_timeout() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("synctimeout");
    let cfg = ctx.dir.join("config.toml");
    std::fs::write(
        &cfg,
        "default_policy = \"open\"\n[runtime]\nsync_timeout = 2\n",
    )
    .unwrap();
    ctx.use_config(cfg.as_os_str());
    ctx.set(
        "/hooks",
        json!({"createContainer": [{"path": "/bin/sleep", "args": ["sleep", "60"]}]}),
    );
    ctx.args(&["true"]);
    let t0 = Instant::now();
    let (c, out) = ctx.create("c");
    let took = t0.elapsed();
    let out = out.fails();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "create took {took:?}"
    );
    assert!(
        out.stderr
            .contains("create: no answer from the init within 2s at step"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// createContainer hooks run with the container's root as their working directory, as
/// runc's do (hooks.bats "hooks library tests": `touch ./lib/…` from the hook); a
/// startContainer hook with `process.cwd`, where the init is when it runs it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_container_hook_runs_in_the_container_root() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("hookcwd");
    let log = HookLog::new(&mut ctx);
    let sh =
        |script: &str| json!({"path": "/bin/sh", "args": ["sh", "-c", script], "env": [PATH_ENV]});
    ctx.set(
        "/hooks",
        json!({
            "createContainer": [sh("touch ./made-by-create-container")],
            "startContainer": [sh("pwd > /hooklog/start-container-cwd")],
        }),
    );
    ctx.set("/process/cwd", json!("/etc"));
    ctx.args(&["ls", "/made-by-create-container"]);
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "/made-by-create-container\n", "{err}");
    assert!(ctx.rootfs().join("made-by-create-container").exists());
    assert_eq!(read(log.dir.join("start-container-cwd")), "/etc\n");
}

/// `moat start` does not wait on the init without a bound either: an init that does not
/// exec after the fifo is written (here its cgroup frozen between create and start, so
/// it never reads it) ends start after `[runtime] sync_timeout`, exit 1, the init killed
/// (once thawed, as a v1 freezer wants). Without the bound start waited for ever.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn start_waits_for_the_init_at_most_the_sync_timeout() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("startbound");
    let cfg = ctx.dir.join("config.toml");
    std::fs::write(
        &cfg,
        "default_policy = \"open\"\n[runtime]\nsync_timeout = 2\n",
    )
    .unwrap();
    ctx.use_config(cfg.as_os_str());
    ctx.args(&["true"]);
    let c = ctx.create_ok("c");
    let pid = c.pid();
    // moat's own freezer choice is not at stake: the v1 freezer when the host has it, else
    // the v2 cgroup's.
    let freezer = match v1_cgroup_dir(pid, "freezer") {
        Some(d) => (d.join("freezer.state"), "FROZEN", "THAWED"),
        None => {
            let (_, path) = proc_cgroups(pid)
                .into_iter()
                .find(|(c, _)| c.is_empty())
                .expect("a v2 cgroup");
            let base = if Path::new("/sys/fs/cgroup/unified").exists() {
                "/sys/fs/cgroup/unified"
            } else {
                "/sys/fs/cgroup"
            };
            let d = Path::new(base).join(path.trim_start_matches('/'));
            (d.join("cgroup.freeze"), "1", "0")
        }
    };
    std::fs::write(&freezer.0, freezer.1).expect("freeze the init");
    let t0 = Instant::now();
    let out = ctx.moat(&["start", &c.id]);
    let took = t0.elapsed();
    let out = out.fails();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(15),
        "start took {took:?}"
    );
    assert!(
        out.stderr
            .contains("start: no answer from the init within 2s"),
        "{}",
        out.stderr
    );
    std::fs::write(&freezer.0, freezer.2).expect("thaw the init");
    assert!(
        wait_exit(pid, Duration::from_secs(10)),
        "the init that did not exec was not killed"
    );
}

/// runc (hooks.bats "startContainer hook should inherit process environment"): a
/// startContainer hook without an `env` of its own runs with the process's, `HOME`
/// included; one with an `env` keeps it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn start_container_hook_without_env_gets_the_process_env() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("hookenv");
    let log = HookLog::new(&mut ctx);
    ctx.set("/process/env", json!(["PATH=/bin", "ONE=two", "FOO=bar"]));
    ctx.set(
        "/hooks",
        json!({"startContainer": [
            {"path": "/bin/sh", "args": ["sh", "-c", "env | sort > /hooklog/inherited"]},
            {"path": "/bin/sh", "args": ["sh", "-c", "env | sort > /hooklog/own"],
             "env": ["PATH=/bin", "OWN=1"]},
        ]}),
    );
    ctx.args(&["true"]);
    let (_, err) = run_to_end(&ctx, "c");
    let inherited = read(log.dir.join("inherited"));
    for want in ["FOO=bar", "HOME=/root", "ONE=two", "PATH=/bin"] {
        assert!(
            inherited.lines().any(|l| l == want),
            "{want} missing: {inherited}{err}"
        );
    }
    let own = read(log.dir.join("own"));
    assert!(own.lines().any(|l| l == "OWN=1"), "{own}");
    assert!(!own.contains("ONE=two"), "{own}");
}
