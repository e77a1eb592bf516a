//! T3 (CVE-2024-21626, "Leaky Vessels"): fds leaked by the caller, and a cwd reached
//! through `/proc/self/fd/N`. fd hygiene is not something seccomp or capabilities can stand
//! in for, so OPEN is the real test; RESTRICTED must hold too.

use std::fs;
use std::os::fd::AsRawFd;
use std::process::Command;

use crate::support::*;
use crate::{ctx, exec, sleeper, Policy, BOTH};

/// The fd numbers the kernel shows, from a `ls /proc/$$/fd` output.
fn fd_list(out: &str) -> Vec<String> {
    out.split_whitespace().map(String::from).collect()
}

/// T3: a caller that leaks a **host directory** at fds 3..=20 into `create` and into
/// `exec`: the init and the exec'd process see only 0, 1, 2 (and `--preserve-fds` ones).
fn leaked_fds_do_not_reach_the_container(policy: Policy) {
    let mut ctx = ctx("t3leak", policy);
    let hostdir = fs::File::open(&ctx.dir).unwrap();
    let raw = hostdir.as_raw_fd();
    // No pipeline, and not last (ash would exec ls, which lists its own dir fd too).
    ctx.sh("ls /proc/$$/fd; sleep 120; true");
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    leak_fd(&mut cmd, raw, 3..=20);
    let mut c = ctx.guard(&id);
    c.out = Some(ctx.run(cmd).ok());
    c.start();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || !c
            .stdout()
            .is_empty()),
        "init printed nothing: {}",
        c.stderr()
    );
    assert_eq!(
        fd_list(&c.stdout()),
        ["0", "1", "2"],
        "{policy:?}: init fds"
    );
    // exec: the same leak, plus one preserved fd that must arrive (and nothing above it).
    let mut cmd = ctx.cmd();
    cmd.args([
        "exec",
        "--preserve-fds",
        "1",
        &id,
        "sh",
        "-c",
        "ls /proc/$$/fd; ls /proc/1/fd; true",
    ]);
    leak_fd(&mut cmd, raw, 3..=20);
    let out = ctx.run(cmd).ok();
    let all: Vec<&str> = out.stdout.lines().collect();
    // ls prints one name per line into a file: the exec'd shell's fds (the preserved 3
    // included), then the init's.
    assert_eq!(
        all,
        ["0", "1", "2", "3", "0", "1", "2"],
        "{policy:?}: exec'd process fds, then the init's"
    );
    c.kill("KILL");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t3_leaked_fds_do_not_reach_the_container_restricted() {
    if !require_root() {
        return;
    }
    leaked_fds_do_not_reach_the_container(Policy::Restricted);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t3_leaked_fds_do_not_reach_the_container_open() {
    if !require_root() {
        return;
    }
    leaked_fds_do_not_reach_the_container(Policy::Open);
}

/// T3: `process.cwd = /proc/self/fd/N` for N = 3..=20 while the caller leaks a host
/// directory at every one of those numbers: each create fails naming the cwd, and leaves
/// no trace. (Were any accepted, pid 1 would start with a host directory as its cwd.)
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t3_cwd_through_proc_self_fd_fails_at_create() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t3cwd", policy);
        let hostdir = fs::File::open(&ctx.dir).unwrap();
        ctx.args(&["true"]);
        for n in 3..=20 {
            ctx.set("/process/cwd", json!(format!("/proc/self/fd/{n}")));
            ctx.write_config();
            let id = ctx.id(&format!("fd{n}"));
            let mut cmd = ctx.cmd();
            cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
            leak_fd(&mut cmd, hostdir.as_raw_fd(), 3..=20);
            let _g = ctx.guard(&id);
            let out = ctx.run(cmd);
            assert_eq!(out.code, 1, "{policy:?} cwd fd {n} accepted: {out:#?}");
            assert!(
                out.stderr.contains("cwd"),
                "{policy:?} fd {n}: {}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        }
    }
}

/// T3: `exec --cwd /proc/self/fd/N` (N = 3..=20), with a host directory leaked by the caller
/// at each number, fails; the container keeps running.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t3_exec_cwd_through_proc_self_fd_fails() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t3execcwd", policy);
        let hostdir = fs::File::open(&ctx.dir).unwrap();
        let c = sleeper(&mut ctx, "c");
        for n in 3..=20 {
            let cwd = format!("/proc/self/fd/{n}");
            let mut cmd = ctx.cmd();
            cmd.args(["exec", "--cwd", &cwd, &c.id, "pwd"]);
            leak_fd(&mut cmd, hostdir.as_raw_fd(), 3..=20);
            let out = ctx.run(cmd);
            assert_eq!(out.code, 255, "{policy:?} exec --cwd {cwd} ran: {out:#?}");
            assert!(
                out.stderr.contains("cwd"),
                "{policy:?} {cwd}: {}",
                out.stderr
            );
            assert_eq!(out.stdout, "", "{policy:?} {cwd}");
        }
        assert_eq!(exec(&ctx, &c, &["pwd"]).ok().stdout, "/\n");
        c.kill("KILL");
    }
}

/// `cmd` run through `sh -c`, so that the shell can set `LISTEN_PID` to the pid moat
/// will have (`$$`: the shell execs moat) or to a pid that is not moat's.
fn socket_activated(cmd: &Command, listen_fds: u32, listen_pid: Option<u32>) -> Command {
    let pid = listen_pid.map_or("$$".to_string(), |p| p.to_string());
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!(
            "LISTEN_PID={pid} LISTEN_FDS={listen_fds} LISTEN_FDNAMES=moat-test exec \"$@\""
        ))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh
}

/// What a container process reports about its fds and socket-activation variables.
const REPORT: &str = "ls /proc/$$/fd; echo \"LISTEN_FDS=$LISTEN_FDS LISTEN_PID=$LISTEN_PID \
                      LISTEN_FDNAMES=$LISTEN_FDNAMES\"; ls /proc/$$/fd/3/; echo report-done";

/// issue 20: `LISTEN_FDS` is systemd's socket activation, addressed to one pid. With a
/// host directory on fd 3:
/// * `LISTEN_PID=1` (not moat): create and exec pass nothing — before, both passed fd 3
///   and a RESTRICTED process got the host directory;
/// * `LISTEN_PID=<moat's pid>`: create passes fd 3 with `LISTEN_FDS=1 LISTEN_PID=1` in
///   the container's environment (runc's behaviour), exec still passes nothing, and
///   `LISTEN_FDNAMES` reaches neither.
fn listen_fds(policy: Policy) {
    let mut ctx = ctx("listen", policy);
    let hostdir = fs::File::open(&ctx.dir).unwrap();
    fs::write(ctx.dir.join("host-marker"), "").unwrap();
    ctx.sh(&format!("{REPORT}; sleep 120; true"));
    for (listen_pid, passed) in [(Some(1), false), (None, true)] {
        let id = ctx.id(if passed { "own" } else { "other" });
        let mut cmd = ctx.cmd();
        cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
        let mut cmd = socket_activated(&cmd, 1, listen_pid);
        leak_fd(&mut cmd, hostdir.as_raw_fd(), 3..=3);
        let mut c = ctx.guard(&id);
        c.out = Some(ctx.run(cmd).ok());
        c.start();
        assert!(
            wait_until(std::time::Duration::from_secs(20), || c
                .stdout()
                .contains("report-done")),
            "init printed nothing: {}",
            c.stderr()
        );
        let out = c.stdout();
        let lines: Vec<&str> = out.lines().collect();
        let what = format!("{policy:?} create, LISTEN_PID={listen_pid:?}");
        if passed {
            assert_eq!(
                lines[..5],
                [
                    "0",
                    "1",
                    "2",
                    "3",
                    "LISTEN_FDS=1 LISTEN_PID=1 LISTEN_FDNAMES="
                ],
                "{what}: {out}"
            );
            assert!(
                out.contains("host-marker"),
                "{what}: fd 3 is not the passed one: {out}"
            );
        } else {
            assert_eq!(
                lines[..4],
                ["0", "1", "2", "LISTEN_FDS= LISTEN_PID= LISTEN_FDNAMES="],
                "{what}: {out}"
            );
            assert!(!out.contains("host-marker"), "{what}: {out}");
        }
        // exec: never, whoever LISTEN_PID names.
        for exec_pid in [Some(1), None] {
            let mut cmd = ctx.cmd();
            cmd.args(["exec", &id, "sh", "-c", REPORT]);
            let mut cmd = socket_activated(&cmd, 1, exec_pid);
            leak_fd(&mut cmd, hostdir.as_raw_fd(), 3..=3);
            let out = ctx.run(cmd);
            let what = format!("{policy:?} exec, LISTEN_PID={exec_pid:?}");
            let lines: Vec<&str> = out.stdout.lines().collect();
            assert_eq!(
                lines[..4],
                ["0", "1", "2", "LISTEN_FDS= LISTEN_PID= LISTEN_FDNAMES="],
                "{what}: {out:#?}"
            );
            assert!(!out.stdout.contains("host-marker"), "{what}: {out:#?}");
        }
        c.kill("KILL");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn listen_fds_only_for_moats_own_pid_and_never_for_exec_restricted() {
    if !require_root() {
        return;
    }
    listen_fds(Policy::Restricted);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn listen_fds_only_for_moats_own_pid_and_never_for_exec_open() {
    if !require_root() {
        return;
    }
    listen_fds(Policy::Open);
}

/// issue 20: `--preserve-fds N` with fewer fds passed. moat's own fds (its log, the state
/// directory, the exec fifo, the sync socket, the init's pidfd) take the lowest free
/// numbers, so before they would have been handed to the container as "preserved". Now
/// create and exec refuse, naming the missing fd, and leave nothing behind.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn preserve_fds_beyond_what_was_passed_is_refused() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("pfdmiss", policy);
        let hostdir = fs::File::open(&ctx.dir).unwrap();
        ctx.sh("ls -l /proc/$$/fd; true");
        for (n, open) in [(1, None), (2, Some(3..=3)), (5, Some(3..=6))] {
            let id = ctx.id(&format!("p{n}"));
            let mut cmd = ctx.cmd();
            cmd.args(["--log", ctx.dir.join("log.json").to_str().unwrap()])
                .args(["create", "--preserve-fds", &n.to_string()])
                .args(["--bundle", &ctx.bundle_str(), &id]);
            if let Some(r) = open.clone() {
                leak_fd(&mut cmd, hostdir.as_raw_fd(), r);
            }
            let _g = ctx.guard(&id);
            let out = ctx.run(cmd);
            let missing = open.map_or(3, |r| r.end() + 1);
            assert_eq!(
                out.code, 1,
                "{policy:?} create --preserve-fds {n}: {out:#?}"
            );
            assert!(
                out.stderr
                    .contains(&format!("--preserve-fds {n}: fd {missing} is not open")),
                "{policy:?} create --preserve-fds {n}: {}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        }
        ctx.args(&["sleep", "120"]);
        let c = ctx.create_ok("c");
        c.start();
        let marker = ctx.rootfs().join("ran");
        for (n, open) in [(1, None), (3, Some(3..=4))] {
            let mut cmd = ctx.cmd();
            cmd.args(["exec", "--preserve-fds", &n.to_string(), &c.id])
                .args(["sh", "-c", "touch /ran; ls -l /proc/$$/fd"]);
            if let Some(r) = open.clone() {
                leak_fd(&mut cmd, hostdir.as_raw_fd(), r);
            }
            let out = ctx.run(cmd);
            let missing = open.map_or(3, |r| r.end() + 1);
            assert_eq!(
                out.code, 255,
                "{policy:?} exec --preserve-fds {n}: {out:#?}"
            );
            assert!(
                out.stderr
                    .contains(&format!("--preserve-fds {n}: fd {missing} is not open")),
                "{policy:?} exec --preserve-fds {n}: {}",
                out.stderr
            );
            assert!(!marker.exists(), "{policy:?}: the exec'd process ran");
        }
        c.kill("KILL");
    }
}

/// `ls -l /proc/$$/fd` lines as (fd, target).
fn fd_targets(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| {
            let (left, target) = l.split_once(" -> ")?;
            let fd = left.split_whitespace().last()?;
            Some((fd.to_string(), target.to_string()))
        })
        .collect()
}

/// issue 20: with every preserved fd really passed, the container sees exactly those
/// (the objects the caller passed, in order) and none of moat's: no fifo, socket, pidfd
/// or state directory, for create and for exec; the same with socket activation ahead of
/// them.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn preserved_fds_are_exactly_the_callers() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("pfdok", policy);
        let a = ctx.dir.join("passed-a");
        let b = ctx.dir.join("passed-b");
        fs::write(&a, "").unwrap();
        fs::write(&b, "").unwrap();
        let fa = fs::File::open(&a).unwrap();
        let fb = fs::File::open(&b).unwrap();
        // fd 3 = a, fd 4 = b, in the child before exec.
        let pass = |cmd: &mut Command| {
            let (ra, rb) = (fa.as_raw_fd(), fb.as_raw_fd());
            // SAFETY: the hook only calls dup/dup2/close/fcntl, which are async-signal-safe.
            unsafe {
                before_exec(cmd, move || {
                    // b first: a's number may be 4.
                    let tb = libc::dup(rb);
                    if libc::dup2(ra, 3) < 0 || libc::dup2(tb, 4) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(tb);
                    libc::fcntl(3, libc::F_SETFD, 0);
                    libc::fcntl(4, libc::F_SETFD, 0);
                    Ok(())
                });
            }
        };
        let check = |what: &str, out: &str, first: usize| {
            let got = fd_targets(out);
            let fds: Vec<&str> = got.iter().map(|(f, _)| f.as_str()).collect();
            let want: Vec<String> = (0..first + 2).map(|n| n.to_string()).collect();
            assert_eq!(fds, want, "{policy:?} {what}: {out}");
            for (fd, t) in &got[3..] {
                assert!(
                    !t.contains("socket:")
                        && !t.contains("pipe:")
                        && !t.contains("anon_inode:")
                        && !t.contains("fifo")
                        && !t.contains("/state"),
                    "{policy:?} {what}: fd {fd} is moat's: {t}"
                );
            }
            let n = got.len();
            assert!(
                got[n - 2].1.ends_with("passed-a"),
                "{policy:?} {what}: {got:?}"
            );
            assert!(
                got[n - 1].1.ends_with("passed-b"),
                "{policy:?} {what}: {got:?}"
            );
        };
        ctx.sh("ls -l /proc/$$/fd; sleep 120; true");
        let id = ctx.id("c");
        let mut cmd = ctx.cmd();
        cmd.args(["--log", ctx.dir.join("log.json").to_str().unwrap()])
            .args([
                "create",
                "--preserve-fds",
                "2",
                "--bundle",
                &ctx.bundle_str(),
                &id,
            ]);
        pass(&mut cmd);
        let mut c = ctx.guard(&id);
        c.out = Some(ctx.run(cmd).ok());
        c.start();
        assert!(
            wait_until(std::time::Duration::from_secs(20), || c
                .stdout()
                .contains("passed-b")),
            "init printed nothing: {}{}",
            c.stdout(),
            c.stderr()
        );
        check("create", &c.stdout(), 3);
        let mut cmd = ctx.cmd();
        cmd.args(["--log", ctx.dir.join("log2.json").to_str().unwrap()])
            .args(["exec", "--preserve-fds", "2", &id])
            .args(["sh", "-c", "ls -l /proc/$$/fd; true"]);
        pass(&mut cmd);
        let out = ctx.run(cmd).ok();
        check("exec", &out.stdout, 3);
        c.kill("KILL");
        // Socket activation ahead of one preserved fd: the same two fds, announced.
        ctx.sh("ls -l /proc/$$/fd; echo LISTEN_FDS=$LISTEN_FDS; sleep 120; true");
        let id = ctx.id("sa");
        let mut cmd = ctx.cmd();
        cmd.args(["create", "--preserve-fds", "1"])
            .args(["--bundle", &ctx.bundle_str(), &id]);
        let mut cmd = socket_activated(&cmd, 1, None);
        pass(&mut cmd);
        let mut c = ctx.guard(&id);
        c.out = Some(ctx.run(cmd).ok());
        c.start();
        assert!(
            wait_until(std::time::Duration::from_secs(20), || c
                .stdout()
                .contains("LISTEN_FDS=")),
            "init printed nothing: {}{}",
            c.stdout(),
            c.stderr()
        );
        check("create, socket activation", &c.stdout(), 3);
        assert!(c.stdout().contains("LISTEN_FDS=1\n"), "{}", c.stdout());
        c.kill("KILL");
    }
}
