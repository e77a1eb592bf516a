//! A word for every cut: the one line per container that says what the policy changed
//! (in the `--log` file always; on stderr when it is a terminal and there is no `--log`, or
//! with `[log] warn_stderr`),
//! the failure that names the cut when a refused request stops the container, and the
//! operator's `audit` alias (runs as OPEN, says what RESTRICTED would have cut), which an
//! annotation cannot ask for.

mod support;

use std::fs;
use std::path::PathBuf;

use serde_json::json;
use support::*;

fn config(ctx: &Ctx, text: &str) -> PathBuf {
    let p = ctx.dir.join("moat.toml");
    fs::write(&p, text).unwrap();
    p
}

/// The summary lines (`moat: warning: policy …` / `audit …`) in `text`.
fn summaries(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("warning: policy ") || l.contains("warning: audit "))
        .collect()
}

const CAP_EFF: &str = "grep ^CapEff: /proc/self/status";

/// `moat create` without `--log`, its stderr a terminal (a person at a shell): what it
/// wrote there.
fn create_on_tty(ctx: &Ctx, bin: &std::path::Path, id: &str) -> (Container, String) {
    ctx.write_config();
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let b = ctx.bundle_str();
    let mut cmd = ctx.cmd_with(bin);
    policy_env(&mut cmd);
    cmd.args(["create", "--bundle", &b, id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(pty.slave);
    let c = ctx.guard(id);
    let child = spawn(&mut cmd);
    drop(cmd);
    let st = wait_child(child, CALL_TIMEOUT);
    assert!(st.success(), "create on a terminal: {st:?}");
    // The init holds the terminal too (create's stdio is its own): read what is there.
    let (text, _) = read_pty(&pty.master, std::time::Duration::from_millis(500));
    (c, text)
}

/// `moat create` with `--log` (when given) through `bin`.
fn create_via(ctx: &Ctx, bin: &std::path::Path, id: &str, log: Option<&PathBuf>) -> Container {
    let b = ctx.bundle_str();
    let mut cmd = ctx.cmd_with(bin);
    if let Some(l) = log {
        cmd.arg("--log").arg(l);
    }
    cmd.args(["create", "--bundle", &b, id]);
    let mut c = ctx.guard(id);
    c.out = Some(ctx.run(cmd).ok());
    c
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn one_summary_line_on_a_terminal_without_log_and_in_the_log_file_with_it() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cut-line");
    ctx.restricted()
        .push("/process/capabilities/bounding", json!("CAP_NET_ADMIN"))
        .push("/process/capabilities/effective", json!("CAP_NET_ADMIN"));
    ctx.write_config();
    let moat = std::path::Path::new(MOAT);

    // A script's call (stderr a file, no `--log`): nothing on stderr, as runc prints
    // nothing there; conformance suites compare that output.
    let id = ctx.id("script");
    let c = create_via(&ctx, moat, &id, None);
    assert!(summaries(&c.stderr()).is_empty(), "{}", c.stderr());
    drop(c);

    // Direct use at a terminal: on stderr, one line naming the field, what was cut and
    // `policy explain`.
    let id = ctx.id("nolog");
    let (c, err) = create_on_tty(&ctx, moat, &id);
    let lines = summaries(&err);
    assert_eq!(lines.len(), 1, "{err}");
    let line = lines[0];
    assert!(
        line.contains(&format!(
            "policy restricted (the built-in configuration) changed container {id}"
        )) && line.contains("process.capabilities: removed ")
            && line.contains("CAP_NET_ADMIN")
            && line.contains("linux.seccomp: set ")
            && line.ends_with(&format!("moat policy explain {id}")),
        "{line}"
    );
    drop(c);

    // An engine's call (`--log`): in the file at level warning, not on stderr (there it
    // would be the container's, in every `podman logs`).
    let log = ctx.dir.join("create.log");
    let id = ctx.id("log");
    let c = create_via(&ctx, moat, &id, Some(&log));
    assert!(summaries(&c.stderr()).is_empty(), "{}", c.stderr());
    let text = fs::read_to_string(&log).unwrap();
    let logged: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("changed container"))
        .collect();
    assert_eq!(logged.len(), 1, "{text}");
    assert!(logged[0].contains("level=warning"), "{text}");
    drop(c);

    // `[log] warn_stderr = true`: both.
    ctx.use_config(config(&ctx, "[log]\nwarn_stderr = true\n"));
    let log = ctx.dir.join("create2.log");
    let id = ctx.id("both");
    let c = create_via(&ctx, moat, &id, Some(&log));
    assert_eq!(summaries(&c.stderr()).len(), 1, "{}", c.stderr());
    assert!(fs::read_to_string(&log)
        .unwrap()
        .contains("changed container"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn open_with_nothing_changed_says_nothing() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("cut-open");
    let c = ctx.create_ok("c");
    assert!(summaries(&c.stderr()).is_empty(), "{}", c.stderr());
}

/// An image whose program carries file capabilities RESTRICTED cut: its execve fails
/// with EPERM, and the error the container leaves names the cut.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_exec_refused_for_a_cut_capability_names_the_cut() {
    if !require_root() {
        return;
    }
    if !std::path::Path::new("/usr/sbin/setcap").exists() {
        missing("setcap (libcap2-bin)");
        return;
    }
    let mut ctx = Ctx::new("cut-exec");
    let capped = ctx.rootfs().join("bin/capped");
    fs::copy(ctx.rootfs().join("bin/busybox"), &capped).unwrap();
    host(&[
        "setcap",
        "cap_net_raw,cap_sys_admin+ep",
        capped.to_str().unwrap(),
    ]);
    ctx.restricted().args(&["/bin/capped", "echo", "ran"]);
    let c = ctx.create_ok("c");
    let out = c.start_and_wait();
    assert_eq!(out, "", "the program must not run");
    let err = c.stderr();
    let failure = err
        .lines()
        .find(|l| l.starts_with("exec /bin/capped: "))
        .unwrap_or_else(|| panic!("no exec failure in {err}"));
    assert!(
        failure.starts_with("exec /bin/capped: operation not permitted; ")
            && failure.contains("process.capabilities: removed")
            && failure.contains(&format!("moat policy explain {}", c.id)),
        "{failure}"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn the_audit_alias_runs_open_and_says_what_restricted_would_cut() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cut-audit");
    let cfg = config(&ctx, "[alias.moat-audit]\ndefault_policy = \"audit\"\n");
    let link = ctx.dir.join("moat-audit");
    std::os::unix::fs::symlink(MOAT, &link).unwrap();
    ctx.use_config(&cfg).sh(CAP_EFF);
    ctx.write_config();
    let id = ctx.id("audit");
    let log = ctx.dir.join("create.log");
    let c = create_via(&ctx, &link, &id, Some(&log));
    let err = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("audit (")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&format!("audit ({} [alias.moat-audit]): container {id} runs as OPEN", cfg.display()))
            && lines[0].contains("RESTRICTED would have: process.capabilities: removed CAP_AUDIT_WRITE,CAP_KILL,CAP_NET_BIND_SERVICE")
            && lines[0].contains("linux.seccomp: set"),
        "{}",
        lines[0]
    );
    let policy: serde_json::Value =
        serde_json::from_slice(&fs::read(ctx.state_dir(&id).join("policy.json")).unwrap()).unwrap();
    assert_eq!(policy["policy"], "open", "{policy}");
    assert!(
        policy["audit"]
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c["field"] == "linux.seccomp")),
        "{policy}"
    );
    // As OPEN: the spec's capabilities.
    assert_eq!(c.start_and_wait(), "CapEff:\t0000000020000420\n");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_annotation_asking_for_audit_is_ignored() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cut-audit-annot");
    ctx.restricted()
        .set("/annotations", json!({"moat.policy": "audit"}))
        .sh(CAP_EFF);
    let log = ctx.dir.join("create.log");
    let c = create_via(&ctx, std::path::Path::new(MOAT), &ctx.id("c"), Some(&log));
    let err = fs::read_to_string(&log).unwrap();
    assert!(
        err.contains("annotations.moat.policy: ignored moat.policy=audit would loosen"),
        "{err}"
    );
    assert_eq!(c.start_and_wait(), "CapEff:\t0000000000000000\n");
    let policy = fs::read_to_string(ctx.state_dir(&c.id).join("policy.json")).unwrap();
    assert!(policy.contains("\"policy\": \"restricted\""), "{policy}");
    assert!(!policy.contains("\"audit\""), "{policy}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn audit_at_the_top_level_of_the_config_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cut-audit-top");
    let cfg = config(&ctx, "default_policy = \"audit\"\n");
    ctx.use_config(&cfg);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("default_policy: \"audit\" is set per alias"),
        "{}",
        out.stderr
    );
    drop(c);
    ctx.assert_no_trace(&ctx.id("c"));
}

/// The same program through `moat exec` (`podman exec`): the exec's error names the cut.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_exec_of_a_program_needing_a_cut_capability_names_the_cut() {
    if !require_root() {
        return;
    }
    if !std::path::Path::new("/usr/sbin/setcap").exists() {
        missing("setcap (libcap2-bin)");
        return;
    }
    let mut ctx = Ctx::new("cut-execcmd");
    let capped = ctx.rootfs().join("bin/capped");
    fs::copy(ctx.rootfs().join("bin/busybox"), &capped).unwrap();
    host(&[
        "setcap",
        "cap_net_raw,cap_sys_admin+ep",
        capped.to_str().unwrap(),
    ]);
    ctx.restricted().args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start().ok();
    let out = c
        .moat(&["exec", &c.id, "/bin/capped", "echo", "ran"])
        .fails();
    assert_eq!(out.code, 255, "{}", out.stderr);
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("exec failed: exec /bin/capped: operation not permitted; ")
            && out
                .stderr
                .contains("; policy restricted changed container ")
            && out.stderr.contains("process.capabilities: removed"),
        "{}",
        out.stderr
    );
    // A refusal that is no cut keeps runc's words alone.
    let out = c.moat(&["exec", &c.id, "/bin/nonexistent"]).fails();
    assert!(!out.stderr.contains("policy restricted"), "{}", out.stderr);
}
