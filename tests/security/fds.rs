//! T3 (CVE-2024-21626, "Leaky Vessels"): fds leaked by the caller, and a cwd reached
//! through `/proc/self/fd/N`. fd hygiene is not something seccomp or capabilities can stand
//! in for, so OPEN is the real test; RESTRICTED must hold too.

use std::fs;
use std::os::fd::AsRawFd;
use std::process::Command;

use crate::support::*;
use crate::{ctx, exec, sleeper, Policy, BOTH};

/// In moat's child, right before exec: `fd` duplicated onto every number in `targets`,
/// without close-on-exec (a careless caller).
fn leak(cmd: &mut Command, fd: i32, targets: std::ops::RangeInclusive<i32>) {
    unsafe {
        before_exec(cmd, move || {
            for t in targets.clone() {
                if t == fd {
                    continue;
                }
                if libc::dup2(fd, t) < 0 || libc::fcntl(t, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

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
    leak(&mut cmd, raw, 3..=20);
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
    leak(&mut cmd, raw, 3..=20);
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
fn t3_leaked_fds_do_not_reach_the_container_restricted() {
    if !require_root() {
        return;
    }
    leaked_fds_do_not_reach_the_container(Policy::Restricted);
}

#[test]
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
            leak(&mut cmd, hostdir.as_raw_fd(), 3..=20);
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
            leak(&mut cmd, hostdir.as_raw_fd(), 3..=20);
            let out = ctx.run(cmd);
            assert_eq!(out.code, 1, "{policy:?} exec --cwd {cwd} ran: {out:#?}");
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
