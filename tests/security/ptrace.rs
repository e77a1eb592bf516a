//! T2 (CVE-2016-9962): the container's processes attacking a joining `moat exec` before it
//! has exec'd — by ptrace or by reading its `/proc/<pid>` files.
//!
//! The joining process is a fork of `moat exec`: until its execve it holds moat's memory,
//! moat's fds and the **caller's environment** (the engine's, possibly with secrets). The
//! container's init is a watcher (`probe env-watch`) that, in a tight loop over every pid
//! it can see, reads `/proc/<pid>/environ` and tries to attach (`PTRACE_SEIZE`, the same access check
//! as `PTRACE_ATTACH`). The test meanwhile
//! runs `moat exec -e T2_MARK=… sleep 0.05` many times, with a unique secret in moat's own
//! environment. The attack has worked if any environ read shows the secret (moat's memory,
//! not the exec'd program's) or any attach lands on a process that is not yet `sleep`.
//! The watcher must also read `T2_MARK` from some exec'd processes: proof that it was fast
//! enough to meet them.
//!
//! Design: the kernel lets a process read or attach to another of the same uid with the
//! same or fewer capabilities unless the target is non-dumpable — and CAP_SYS_PTRACE in the
//! *target's* user namespace overrides that. So
//! * under OPEN without a user namespace the container has exactly the capabilities the
//!   exec'd process gets (the spec's; no CAP_SYS_PTRACE): once the joining fork has dropped
//!   to them, only non-dumpability protects it;
//! * under OPEN **with** a user namespace the container holds CAP_SYS_PTRACE (inside it):
//!   the joining fork's memory belongs to the host's user namespace, where that capability
//!   means nothing, so again only non-dumpability protects it (CAP_SYS_PTRACE in the
//!   host's namespace would defeat any runtime: not tested);
//! * under RESTRICTED ptrace is also filtered; environ reads are not.

use std::time::{Duration, Instant};

use crate::support::*;
use crate::{ctx, install, probe, Policy};

const WATCH_SECS: u64 = 8;

fn ptrace_join(policy: Policy, userns: bool) {
    let Some(probe) = probe() else {
        return;
    };
    let mut ctx = ctx(if userns { "t2userns" } else { "t2" }, policy);
    install(&ctx, probe, "probe");
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let secret = format!("moat-t2-secret-{nonce}");
    let mark = format!("moat-t2-mark-{nonce}");
    if userns {
        ctx.push("/linux/namespaces", json!({"type": "user"}));
        let map = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
        ctx.set("/linux/uidMappings", map.clone());
        ctx.set("/linux/gidMappings", map);
        let caps = json!(["CAP_SYS_PTRACE", "CAP_KILL", "CAP_AUDIT_WRITE"]);
        ctx.set(
            "/process/capabilities",
            json!({"bounding": caps, "effective": caps, "permitted": caps}),
        );
    }
    ctx.args(&[
        "/bin/probe",
        "env-watch",
        &secret,
        &mark,
        "sleep",
        &WATCH_SECS.to_string(),
    ]);
    let c = ctx.create_ok("c");
    let init = c.pid();
    c.start();
    let start = Instant::now();
    let mut execs = 0;
    while start.elapsed() < Duration::from_secs(WATCH_SECS - 3) {
        let mut cmd = ctx.cmd();
        cmd.env("MOAT_T2_HOST_SECRET", &secret).args([
            "exec",
            "-e",
            &format!("T2_MARK={mark}"),
            &c.id,
            "sleep",
            "0.05",
        ]);
        let out = ctx.run(cmd);
        // The watcher stops `sleep` now and then; that is all it may do. (When it is done,
        // its exit as pid 1 kills what is left in the namespace.)
        if out.code == 128 + libc::SIGKILL && is_gone(init) {
            break;
        }
        assert_eq!(out.code, 0, "{policy:?}: exec failed: {out:#?}");
        execs += 1;
    }
    c.wait_stopped(Duration::from_secs(WATCH_SECS + 20));
    let out = c.stdout();
    let summary = out
        .lines()
        .find(|l| l.starts_with("env-watch "))
        .unwrap_or_else(|| panic!("{policy:?}: no summary: {out}{}", c.stderr()));
    eprintln!("T2 {policy:?} userns={userns}: {execs} execs; {summary}");
    assert!(
        !out.contains("LEAK") && !out.contains("ATTACHED"),
        "{policy:?} userns={userns}: the container got at a joining moat process:\n{out}"
    );
    let count = |k: &str| count_in(summary, k);
    assert!(
        count("marks") > 0,
        "{policy:?}: the watcher never read an exec'd process: the test proved nothing: {summary}"
    );
    assert!(execs >= 5, "{policy:?}: only {execs} execs");
    if policy == Policy::Open {
        assert!(
            count("attached") > 0,
            "{policy:?}: the watcher never attached to an exec'd process: {summary}"
        );
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t2_joining_exec_process_cannot_be_read_or_traced_open() {
    if !require_root() {
        return;
    }
    ptrace_join(Policy::Open, false);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t2_joining_exec_process_cannot_be_read_or_traced_open_userns_cap_sys_ptrace() {
    if !require_root() {
        return;
    }
    ptrace_join(Policy::Open, true);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t2_joining_exec_process_cannot_be_read_or_traced_restricted() {
    if !require_root() {
        return;
    }
    ptrace_join(Policy::Restricted, false);
}

/// T2b (issue 20): a process that joins the container's pid namespace must already be
/// inside the container's root. The container (OPEN, no user namespace, CAP_SYS_PTRACE:
/// the capability that lets it open `/proc/<pid>/root` of a non-dumpable process) runs
/// `probe root-watch`, which tries to create `/proc/<pid>/root/<host dir>/escaped-<pid>`
/// for every pid it sees, `<host dir>` being this test's directory on the host (absent
/// from the rootfs). Meanwhile `moat exec` runs again and again. A moat process born in
/// the pid namespace on the host's root (a fork made after `setns(CLONE_NEWPID)` but
/// before the mount namespace was joined) would let the watcher write the host file.
fn root_watch_ctx(tag: &str) -> Option<(crate::support::Ctx, String)> {
    let probe = probe()?;
    let mut ctx = ctx(tag, Policy::Open);
    install(&ctx, probe, "probe");
    let caps = json!(["CAP_SYS_PTRACE", "CAP_KILL", "CAP_AUDIT_WRITE"]);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": caps, "effective": caps, "permitted": caps}),
    );
    let host_dir = ctx.dir.to_str().expect("utf-8").to_string();
    assert!(!ctx.rootfs().join(host_dir.trim_start_matches('/')).exists());
    Some((ctx, host_dir))
}

/// Reads `root-watch`'s summary and checks that nothing reached the host.
fn root_watch_verdict(what: &str, ctx: &crate::support::Ctx, out: &str, runs: u32) -> u64 {
    let summary = out
        .lines()
        .find(|l| l.starts_with("root-watch "))
        .unwrap_or_else(|| panic!("{what}: no summary: {out}"));
    eprintln!("T2b {what}: {runs} runs; {summary}");
    let escaped: Vec<String> = crate::entries(ctx.dir.to_str().unwrap())
        .into_iter()
        .filter(|e| e.starts_with("escaped-"))
        .collect();
    assert!(
        escaped.is_empty() && !out.contains("ESCAPED"),
        "{what}: a container process wrote the host's {} through /proc/<pid>/root: {escaped:?}\n{out}",
        ctx.dir.display()
    );
    assert!(
        !out.contains("FDWRITE"),
        "{what}: a container process wrote a file a moat process held:\n{out}"
    );
    let count = |k: &str| count_in(summary, k);
    count("seen")
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t2b_exec_child_is_never_visible_with_the_host_root() {
    if !require_root() {
        return;
    }
    let Some((mut ctx, host_dir)) = root_watch_ctx("t2b") else {
        return;
    };
    let secs = WATCH_SECS;
    ctx.args(&["/bin/probe", "root-watch", &host_dir, &secs.to_string()]);
    let c = ctx.create_ok("c");
    c.start();
    let log = ctx.dir.join("exec-log.json");
    let start = Instant::now();
    let mut execs = 0;
    while start.elapsed() < Duration::from_secs(secs - 3) {
        // Long enough for the watcher to meet every exec'd process, as proof it looks.
        let out = ctx.moat(&[
            "--log",
            log.to_str().unwrap(),
            "exec",
            &c.id,
            "sleep",
            "0.05",
        ]);
        assert_eq!(out.code, 0, "exec failed: {out:#?}");
        execs += 1;
    }
    c.wait_stopped(Duration::from_secs(secs + 20));
    let seen = root_watch_verdict("exec", &ctx, &c.stdout(), execs);
    // The log file each `moat exec` had open (a host file) was never reachable.
    assert!(
        !crate::support::read(&log).contains("PWNED"),
        "the container wrote moat's log file"
    );
    assert!(execs >= 20, "only {execs} execs");
    assert!(
        seen >= execs as u64 / 4,
        "the watcher saw {seen} processes for {execs} execs: the test proved nothing"
    );
}

/// T2b for create: the init of a container that joins another's pid namespace (a pod
/// sharing one) sets up its rootfs in a new mount namespace made from the host's. It must
/// not appear in the joined namespace before its root is the container's.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t2b_init_joining_a_pid_namespace_is_never_visible_with_the_host_root() {
    if !require_root() {
        return;
    }
    let Some((mut ctx, host_dir)) = root_watch_ctx("t2bpod") else {
        return;
    };
    let secs = WATCH_SECS;
    ctx.args(&["/bin/probe", "root-watch", &host_dir, &secs.to_string()]);
    let c = ctx.create_ok("c");
    c.start();
    let mut pod = crate::ctx("t2bpodm", Policy::Open);
    pod.without_ns("pid");
    pod.push(
        "/linux/namespaces",
        json!({"type": "pid", "path": format!("/proc/{}/ns/pid", c.pid())}),
    );
    // The member's /proc is the joined namespace's (made by moat's helper inside it):
    // pid 1 there is the watcher.
    pod.sh("cat /proc/1/comm; ls /proc | grep -c '^[0-9]'");
    let m = pod.create_ok("first");
    let out = m.start_and_wait();
    assert!(out.starts_with("probe\n"), "the member's /proc: {out}");
    drop(m);
    pod.args(&["sleep", "0.05"]);
    let start = Instant::now();
    let mut creates = 0;
    while start.elapsed() < Duration::from_secs(secs - 3) {
        let m = pod.create_ok(&format!("m{creates}"));
        m.start();
        drop(m);
        creates += 1;
    }
    // The members' processes are ours (subreaper) once their parents exit: reap them, or
    // the watcher, pid 1 of the namespace, waits for them forever.
    assert!(
        wait_until(Duration::from_secs(secs + 20), || {
            reap();
            is_gone(c.pid())
        }),
        "the watcher did not finish"
    );
    let seen = root_watch_verdict("create joining a pid namespace", &ctx, &c.stdout(), creates);
    assert!(creates >= 10, "only {creates} creates");
    assert!(
        seen >= creates as u64 / 4,
        "the watcher saw {seen} processes for {creates} creates: the test proved nothing"
    );
}
