//! process.*: capabilities, no_new_privs, rlimits, user and groups, cwd, env, umask,
//! oom_score_adj, and the fds a container gets (T3, T8).

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::time::Duration;

use support::*;

/// `Key: value` lines of /proc/self/status as printed by the container.
fn status_fields(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((
                k.to_string(),
                v.split_whitespace().collect::<Vec<_>>().join(" "),
            ))
        })
        .collect()
}

fn caps(set: &[&str]) -> Value {
    json!(set)
}

fn status_of(ctx: &mut Ctx) -> BTreeMap<String, String> {
    ctx.args(&["cat", "/proc/self/status"]);
    let (out, err) = run_to_end(ctx, "c");
    let f = status_fields(&out);
    assert!(f.contains_key("CapBnd"), "no status: {out}{err}");
    f
}

fn hex(mask: u64) -> String {
    format!("{mask:016x}")
}

const CHOWN: u64 = 1 << 0;
const KILL: u64 = 1 << 5;
const NET_RAW: u64 = 1 << 13;

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn root_process_gets_the_spec_sets_and_no_inheritable_or_ambient() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("capsroot");
    ctx.set(
        "/process/capabilities",
        json!({"bounding": caps(&["CAP_CHOWN", "CAP_NET_RAW", "CAP_KILL"]),
               "effective": caps(&["CAP_CHOWN", "CAP_NET_RAW"]),
               "permitted": caps(&["CAP_CHOWN", "CAP_NET_RAW"])}),
    );
    // With no_new_privs execve as uid 0 cannot widen permitted to the bounding set.
    ctx.set("/process/noNewPrivileges", json!(true));
    let f = status_of(&mut ctx);
    assert_eq!(f["CapBnd"], hex(CHOWN | NET_RAW | KILL));
    assert_eq!(f["CapInh"], hex(0));
    assert_eq!(f["CapAmb"], hex(0));
    assert_eq!(f["CapPrm"], hex(CHOWN | NET_RAW));
    assert_eq!(f["CapEff"], hex(CHOWN | NET_RAW));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn non_root_process_without_ambient_has_no_capabilities() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("capsuser");
    ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    ctx.set(
        "/process/capabilities",
        json!({"bounding": caps(&["CAP_CHOWN", "CAP_NET_RAW"]),
               "effective": caps(&["CAP_CHOWN", "CAP_NET_RAW"]),
               "permitted": caps(&["CAP_CHOWN", "CAP_NET_RAW"])}),
    );
    let f = status_of(&mut ctx);
    assert_eq!(f["CapBnd"], hex(CHOWN | NET_RAW));
    for k in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(f[k], hex(0), "{k}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn requested_ambient_capability_survives_exec_as_non_root() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("capsamb");
    ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    ctx.set(
        "/process/capabilities",
        json!({"bounding": caps(&["CAP_CHOWN", "CAP_NET_RAW"]),
               "effective": caps(&["CAP_NET_RAW"]),
               "permitted": caps(&["CAP_NET_RAW"]),
               "inheritable": caps(&["CAP_NET_RAW"]),
               "ambient": caps(&["CAP_NET_RAW"])}),
    );
    let f = status_of(&mut ctx);
    assert_eq!(f["CapAmb"], hex(NET_RAW));
    assert_eq!(f["CapInh"], hex(NET_RAW));
    assert_eq!(f["CapPrm"], hex(NET_RAW));
    assert_eq!(f["CapEff"], hex(NET_RAW));
    assert_eq!(f["CapBnd"], hex(CHOWN | NET_RAW));
}

/// runc's capabilities.bats case: an ambient capability outside permitted ∩ inheritable
/// is not raised (the kernel would refuse it), and create says so in runc's words, once
/// for each; the raisable one is raised. `moat spec` asks for none (as runc's), so its
/// containers warn about nothing.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_ambient_capability_not_inheritable_is_warned_about_and_not_raised() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("capsambwarn");
    let all = caps(&["CAP_CHOWN", "CAP_KILL"]);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": all, "effective": all, "permitted": all,
               "inheritable": caps(&["CAP_KILL"]),
               "ambient": caps(&["CAP_KILL", "CAP_CHOWN"])}),
    );
    ctx.args(&["cat", "/proc/self/status"]);
    let (out, err) = run_to_end(&ctx, "c");
    let f = status_fields(&out);
    assert_eq!(f["CapAmb"], hex(KILL), "{out}{err}");
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("can't raise ambient capability"))
        .collect();
    assert_eq!(
        warned,
        ["moat: warning: process.capabilities.ambient: can't raise ambient capability CAP_CHOWN: \
          not in both permitted and inheritable"],
        "{err}"
    );

    let spec_caps = &moat_default_spec()["process"]["capabilities"];
    assert!(spec_caps.get("ambient").is_none(), "{spec_caps}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn no_new_privileges_is_set_when_asked_and_only_then() {
    if !require_root() {
        return;
    }
    for (nnp, want) in [(true, "1"), (false, "0")] {
        let mut ctx = Ctx::new("nnp");
        ctx.set("/process/noNewPrivileges", json!(nnp));
        let f = status_of(&mut ctx);
        assert_eq!(f["NoNewPrivs"], want, "noNewPrivileges {nnp}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rlimits_are_applied() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rlimit");
    ctx.set(
        "/process/rlimits",
        json!([{"type": "RLIMIT_NOFILE", "soft": 512, "hard": 1000},
               {"type": "RLIMIT_NPROC", "soft": 77, "hard": 77}]),
    );
    ctx.sh("ulimit -n; ulimit -Hn; ulimit -u");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "512\n1000\n77\n", "{err}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_rlimit_above_moats_own_names_the_field_and_the_limit() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rlimit-high");
    // Above fs.nr_open's ceiling (2^30): refused even with CAP_SYS_RESOURCE.
    ctx.set(
        "/process/rlimits",
        json!([{"type": "RLIMIT_NOFILE", "soft": 1073741825u64, "hard": 1073741825u64}]),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("process.rlimits[0]: setrlimit RLIMIT_NOFILE on the container")
            && out.stderr.contains("is above moat's own"),
        "{}",
        out.stderr
    );
    drop(c);
    ctx.assert_no_trace(&ctx.id("c"));
}

/// runc's default: `HOME` from the container's /etc/passwd for the process's uid, `/` for
/// a uid it does not name, the spec's own when it sets one; for the init and for exec.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn home_comes_from_the_containers_passwd_when_env_has_none() {
    if !require_root() {
        return;
    }
    for (uid, env, want) in [
        (0, vec!["PATH=/bin"], "/root"),
        (1000, vec!["PATH=/bin"], "/tmp"),
        (4321, vec!["PATH=/bin"], "/"),
        (0, vec!["PATH=/bin", "HOME=/spec"], "/spec"),
    ] {
        let mut ctx = Ctx::new("home");
        ctx.set("/process/user", json!({"uid": uid, "gid": 0}));
        ctx.set("/process/env", json!(env));
        ctx.sh("echo $HOME");
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, format!("{want}\n"), "uid {uid}, env {env:?}: {err}");
    }
    let mut ctx = Ctx::new("home-exec");
    ctx.set("/process/env", json!(["PATH=/bin"]));
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start().ok();
    let out = c.moat(&[
        "exec",
        "--user",
        "1000:1000",
        &c.id,
        "sh",
        "-c",
        "echo $HOME",
    ]);
    assert_eq!(out.ok().stdout, "/tmp\n");
}

/// The container's /etc/passwd is hostile: a FIFO must not hang create (opened
/// non-blocking, regular files only), and a symlink to a host path resolves inside the
/// container's root (the host file is never read).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_hostile_etc_passwd_neither_hangs_create_nor_reads_the_host() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("home-fifo");
    let passwd = ctx.rootfs().join("etc/passwd");
    fs::remove_file(&passwd).unwrap();
    host(&["mkfifo", passwd.to_str().unwrap()]);
    ctx.set("/process/env", json!(["PATH=/bin"]))
        .sh("echo $HOME");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "/\n", "{err}");

    let mut ctx = Ctx::new("home-link");
    let outside = ctx.dir.join("host-passwd");
    fs::write(&outside, "root:x:0:0:root:/leaked-from-the-host:/bin/sh\n").unwrap();
    let passwd = ctx.rootfs().join("etc/passwd");
    fs::remove_file(&passwd).unwrap();
    std::os::unix::fs::symlink(&outside, &passwd).unwrap();
    ctx.set("/process/env", json!(["PATH=/bin"]))
        .sh("echo $HOME");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "/\n", "{err}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn user_uid_gid_and_additional_gids() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("user");
    ctx.set(
        "/process/user",
        json!({"uid": 1000, "gid": 1000, "additionalGids": [5, 100]}),
    );
    ctx.sh("id; grep -E '^(Uid|Gid|Groups):' /proc/self/status");
    let (out, err) = run_to_end(&ctx, "c");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("uid=1000(u1000) gid=1000(u1000) groups=5(tty),100"),
        "{out}{err}"
    );
    let f = status_fields(&lines.collect::<Vec<_>>().join("\n"));
    assert_eq!(f["Uid"], "1000 1000 1000 1000");
    assert_eq!(f["Gid"], "1000 1000 1000 1000");
    assert_eq!(f["Groups"], "5 100");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cwd_is_the_spec_cwd() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cwd");
    ctx.set("/process/cwd", json!("/etc"));
    ctx.args(&["pwd"]);
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "/etc\n");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn env_is_the_spec_env_and_home_as_runc_adds() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("env");
    ctx.set(
        "/process/env",
        json!(["PATH=/bin:/usr/bin", "FOO=bar baz", "EMPTY="]),
    );
    ctx.args(&["env"]);
    let (out, _) = run_to_end(&ctx, "c");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    // HOME, which the spec does not set, from /etc/passwd (runc 1.1.5 adds it too).
    assert_eq!(
        got,
        ["EMPTY=", "FOO=bar baz", "HOME=/root", "PATH=/bin:/usr/bin"]
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn umask_is_applied() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("umask");
    ctx.set("/process/user/umask", json!(0o027));
    ctx.sh("umask; touch /dev/shm/f; stat -c %a /dev/shm/f");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "0027\n640\n");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn oom_score_adj_is_applied() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("oom");
    ctx.set("/process/oomScoreAdj", json!(500));
    ctx.args(&["cat", "/proc/self/oom_score_adj"]);
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "500\n");
}

/// T3 (CVE-2024-21626): a cwd through `/proc/self/fd/N` would be a host directory the
/// init still holds; every such cwd fails create and leaves nothing behind.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cwd_through_proc_self_fd_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("t3cwd");
    for n in 3..=8 {
        ctx.set("/process/cwd", json!(format!("/proc/self/fd/{n}")));
        let (c, out) = ctx.create(&format!("fd{n}"));
        let out = out.fails();
        assert_eq!(out.stderr_lines().len(), 1, "fd {n}: {}", out.stderr);
        assert!(out.stderr.contains("cwd"), "fd {n}: {}", out.stderr);
        ctx.assert_no_trace(&c.id);
    }
}

/// T3: the same with a host directory leaked into moat at fd 7.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cwd_through_a_leaked_host_directory_fd_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("t3leak");
    ctx.set("/process/cwd", json!("/proc/self/fd/7"));
    ctx.args(&["true"]);
    let hostdir = fs::File::open(&ctx.dir).unwrap();
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    leak_fd(&mut cmd, hostdir.as_raw_fd(), 7..=7);
    let _g = ctx.guard(&id);
    let out = ctx.run(cmd).fails();
    assert!(out.stderr.contains("cwd"), "{}", out.stderr);
    ctx.assert_no_trace(&id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn container_gets_only_stdio_even_when_the_caller_leaks_fds() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("t3fds");
    // No pipeline (its pipe would be open in the shell while ls looks), and not last
    // (ash would exec ls, which would then list its own directory fd).
    ctx.sh("ls /proc/$$/fd; true");
    let leaked = fs::File::open(&ctx.dir).unwrap();
    let leaked2 = fs::File::open("/dev/null").unwrap();
    // The leak itself works: a plain host shell started the same way sees both fds.
    let mut sh = std::process::Command::new("/bin/sh");
    sh.args(["-c", "ls /proc/$$/fd; true"]);
    leak_fd(&mut sh, leaked.as_raw_fd(), 5..=5);
    leak_fd(&mut sh, leaked2.as_raw_fd(), 9..=9);
    let seen = run_cmd(sh, &ctx.io, CALL_TIMEOUT).ok().stdout;
    assert!(seen.contains("\n5\n") && seen.contains("\n9\n"), "{seen}");
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    leak_fd(&mut cmd, leaked.as_raw_fd(), 5..=5);
    leak_fd(&mut cmd, leaked2.as_raw_fd(), 9..=9);
    let mut c = ctx.guard(&id);
    c.out = Some(ctx.run(cmd).ok());
    let out = c.start_and_wait();
    assert_eq!(out, "0\n1\n2\n", "{}", c.stderr());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn preserve_fds_passes_fd_3() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("preserve");
    ctx.sh("cat <&3; ls /proc/$$/fd; true");
    let path = ctx.dir.join("payload");
    fs::write(&path, "preserved\n").unwrap();
    let f = fs::File::open(&path).unwrap();
    let extra = fs::File::open("/dev/null").unwrap();
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args([
        "create",
        "--preserve-fds",
        "1",
        "--bundle",
        &ctx.bundle_str(),
        &id,
    ]);
    leak_fd(&mut cmd, f.as_raw_fd(), 3..=3);
    // One beyond the preserved range: must not arrive.
    leak_fd(&mut cmd, extra.as_raw_fd(), 4..=4);
    let mut c = ctx.guard(&id);
    c.out = Some(ctx.run(cmd).ok());
    let out = c.start_and_wait();
    assert_eq!(out, "preserved\n0\n1\n2\n3\n", "{}", c.stderr());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn missing_executable_fails_create_like_runc() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("noexe");
    ctx.args(&["/no/such/binary"]);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("stat /no/such/binary: no such file or directory"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
    ctx.args(&["nosuchcommand"]);
    let (c, out) = ctx.create("c2");
    let out = out.fails();
    assert!(
        out.stderr.contains("executable file not found in $PATH"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// runc 1.5 (capabilities.bats "unknown capability"): a name that is no capability of this
/// kernel is ignored with a warning, and the container runs with the others. Under
/// RESTRICTED it is removed like any capability the config does not allow, and the
/// policy's record names it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn unknown_capabilities_are_dropped_with_a_warning() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("capsunknown");
    ctx.set(
        "/process/capabilities",
        json!({"bounding": caps(&["CAP_UNKNOWN", "CAP_KILL", "UNKNOWN_CAP"]),
               "effective": caps(&["CAP_KILL", "CAP_UNKNOWN"]),
               "permitted": caps(&["CAP_KILL"])}),
    );
    ctx.args(&["cat", "/proc/self/status"]);
    let c = ctx.create_ok("c");
    let err = c.stderr();
    assert!(
        err.contains("ignoring unknown or unavailable capabilities: CAP_UNKNOWN UNKNOWN_CAP"),
        "{err}"
    );
    let status = c.start_and_wait();
    let f = status_fields(&status);
    assert_eq!(f.get("CapBnd"), Some(&hex(KILL)), "{status}{}", c.stderr());
    assert_eq!(f["CapEff"], hex(KILL));
    drop(c);

    ctx.restricted();
    let c = ctx.create_ok("r");
    let policy = fs::read_to_string(ctx.state_dir(&c.id).join("policy.json")).unwrap();
    assert!(
        policy.contains("CAP_UNKNOWN") && policy.contains("UNKNOWN_CAP"),
        "{policy}"
    );
    let status = c.start_and_wait();
    let f = status_fields(&status);
    assert_eq!(f.get("CapBnd"), Some(&hex(0)), "{status}{}", c.stderr());
}

/// runc 1.5's environment (env.bats): one entry per name, the last one given; an empty
/// `HOME=` replaced by the user's home, for the init and for exec.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn env_names_are_unique_and_an_empty_home_is_the_users() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("envdup");
    ctx.set(
        "/process/env",
        json!([
            "HOME=",
            "ONE=two",
            "PATH=/bin",
            "ONE=three",
            "HOME=/override",
            "HOME="
        ]),
    );
    ctx.args(&["env"]);
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "PATH=/bin\nONE=three\nHOME=/root\n", "{err}");

    ctx.args(&["sleep", "600"]);
    let c = ctx.create_ok("e");
    c.start().ok();
    let process = ctx.dir.join("process.json");
    fs::write(
        &process,
        json!({"args": ["env"], "cwd": "/", "user": {"uid": 0, "gid": 0},
               "env": ["A=1", "HOME=", "A=2"]})
        .to_string(),
    )
    .unwrap();
    let out = c
        .moat(&["exec", "--process", process.to_str().unwrap(), &c.id])
        .ok();
    assert_eq!(out.stdout, "A=2\nHOME=/root\n");
    c.kill("KILL");
}

/// runc 1.5 (cpu_affinity.bats "should reset"): the container's processes may run on
/// every CPU, not only on those of a caller pinned with taskset; for the init and exec.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cpu_affinity_is_not_the_callers() {
    if !require_root() {
        return;
    }
    let ours = fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|v| v.trim().to_string())
        })
        .unwrap();
    if ours == "0" {
        missing("this machine lets the test run on one CPU only: nothing to reset");
        return;
    }
    // `taskset -c 0`, in moat's child before exec.
    let pin = |cmd: &mut std::process::Command| {
        // SAFETY: sched_setaffinity is async-signal-safe; the set lives on the stack.
        unsafe {
            before_exec(cmd, || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let grep = "grep Cpus_allowed_list: /proc/self/status";
    let mut ctx = Ctx::new("affinity");
    ctx.sh(&format!("{grep}; sleep 600"));
    ctx.write_config();
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    pin(&mut cmd);
    let mut c = ctx.guard(&id);
    c.out = Some(ctx.run(cmd).ok());
    c.start().ok();
    let want = format!("Cpus_allowed_list:\t{ours}\n");
    assert!(
        wait_until(Duration::from_secs(10), || c.stdout() == want),
        "init: {:?}, want {want:?}",
        c.stdout()
    );
    let mut cmd = ctx.cmd();
    cmd.args(["exec", &id, "sh", "-c", grep]);
    pin(&mut cmd);
    let out = ctx.run(cmd).ok();
    assert_eq!(out.stdout, want, "exec");
    c.kill("KILL");
}

/// runc 1.5 (personality.bats "with exec", scheduler.bats): `linux.personality` and
/// `process.scheduler` hold for an exec'd process as for the init.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn personality_and_scheduler_hold_for_exec() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("persona");
    ctx.set("/linux/personality", json!({"domain": "LINUX32"}));
    ctx.set("/process/scheduler", json!({"policy": "SCHED_BATCH"}));
    let probe = "uname -m; grep ^policy /proc/self/sched";
    ctx.sh(&format!("{probe}; sleep 600"));
    let c = ctx.create_ok("c");
    c.start().ok();
    // SCHED_BATCH is policy 3.
    let want = |out: &str| {
        let l: Vec<String> = out
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        l == ["i686", "policy:3"]
    };
    assert!(
        wait_until(Duration::from_secs(10), || want(&c.stdout())),
        "init: {:?}",
        c.stdout()
    );
    let out = c.moat(&["exec", &c.id, "sh", "-c", probe]).ok();
    assert!(want(&out.stdout), "exec: {:?}", out.stdout);
    c.kill("KILL");
}

/// runc's scheduler.bats "scheduler is applied", its last step: an `exec --process`
/// with a scheduler of its own (SCHED_DEADLINE with SCHED_FLAG_RESET_ON_FORK) in a
/// container whose config says SCHED_BATCH; the exec'd process reads back with the
/// process file's policy, flag and parameters (`chrt -p` on the host, as the test).
/// Before, `scheduler.flags` was dropped (and an unknown flag accepted).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_exec_process_file_has_its_own_scheduler_and_flags() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("schedexec");
    ctx.set(
        "/process/scheduler",
        json!({"policy": "SCHED_BATCH", "priority": 0, "nice": 19}),
    );
    ctx.args(&["sleep", "600"]);
    let c = ctx.create_ok("c");
    c.start();
    let process = ctx.dir.join("process.json");
    fs::write(
        &process,
        json!({"terminal": false, "args": ["/bin/sleep", "600"], "cwd": "/",
               "user": {"uid": 0, "gid": 0},
               "scheduler": {"policy": "SCHED_DEADLINE", "flags": ["SCHED_FLAG_RESET_ON_FORK"],
                             "nice": 19, "priority": 0, "runtime": 42000,
                             "deadline": 100000, "period": 1000000}})
        .to_string(),
    )
    .unwrap();
    let pid_file = ctx.dir.join("exec.pid");
    c.moat(&[
        "exec",
        "-d",
        "--pid-file",
        pid_file.to_str().unwrap(),
        "--process",
        process.to_str().unwrap(),
        &c.id,
    ])
    .ok();
    let pid = read(&pid_file);
    let out = host(&["chrt", "-p", pid.trim()]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines.len() == 3
            && lines[0].ends_with("scheduling policy: SCHED_DEADLINE|SCHED_RESET_ON_FORK")
            && lines[1].ends_with("priority: 0")
            && lines[2].ends_with("runtime/deadline/period parameters: 42000/100000/1000000"),
        "{out}"
    );
    // The exec'd process is this test's (its subreaper's) to reap, so the pid namespace
    // can end.
    let init = c.pid();
    c.kill("KILL").ok();
    assert!(wait_until(Duration::from_secs(20), || {
        reap();
        is_gone(init)
    }));

    // RESTRICTED refuses the realtime policy for an exec'd process as for the init.
    ctx.restricted();
    let r = ctx.create_ok("r");
    r.start();
    let mut cmd = ctx.cmd();
    cmd.args(["exec", "-d", "--process", process.to_str().unwrap(), &r.id]);
    let out = ctx.run(cmd).fails();
    assert!(
        out.stderr.contains("process.scheduler") && out.stderr.contains("RESTRICTED"),
        "{}",
        out.stderr
    );
    r.kill("KILL");
}

/// An unknown `process.scheduler.flags` entry is refused naming it, as runc refuses it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_unknown_scheduler_flag_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("schedflag");
    ctx.set(
        "/process/scheduler",
        json!({"policy": "SCHED_BATCH", "flags": ["SCHED_FLAG_NONSENSE"]}),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr.contains("process.scheduler.flags")
            && out.stderr.contains("SCHED_FLAG_NONSENSE"),
        "{}",
        out.stderr
    );
    drop(c);
    ctx.assert_no_trace(&ctx.id("c"));
}

/// runc (scheduler.bats "scheduler vs cpus"): SCHED_DEADLINE in a container bounded to a
/// cpuset fails with the kernel's EPERM, said in runc's words, and leaves nothing behind.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_deadline_scheduler_in_a_cpuset_is_refused_in_runcs_words() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("schedcpus");
    ctx.set("/linux/resources/cpu/cpus", json!("0"));
    ctx.set(
        "/process/scheduler",
        json!({"policy": "SCHED_DEADLINE", "nice": 19, "runtime": 42000,
               "deadline": 1000000, "period": 1000000}),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("process scheduler can't be used together with AllowedCPUs"),
        "{}",
        out.stderr
    );
    drop(c);
    ctx.assert_no_trace(&ctx.id("c"));
}

/// runc 1.5 (create.bats "detect fd leak"): a created init, before its execve, holds
/// nothing of the caller's but stdio (and the preserved fds): the fds a careless caller
/// leaked into moat are closed, not only close-on-exec.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_created_init_holds_none_of_the_callers_leaked_fds() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("fdleak");
    ctx.args(&["sleep", "600"]);
    ctx.write_config();
    let leaked = fs::File::open(&ctx.dir).unwrap();
    let leaked2 = fs::File::open("/dev/null").unwrap();
    let payload = ctx.dir.join("payload");
    fs::write(&payload, "x").unwrap();
    let preserved = fs::File::open(&payload).unwrap();
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args([
        "create",
        "--preserve-fds",
        "1",
        "--bundle",
        &ctx.bundle_str(),
        &id,
    ]);
    leak_fd(&mut cmd, preserved.as_raw_fd(), 3..=3);
    leak_fd(&mut cmd, leaked.as_raw_fd(), 5..=5);
    leak_fd(&mut cmd, leaked2.as_raw_fd(), 9..=9);
    leak_fd(&mut cmd, leaked2.as_raw_fd(), 200..=200);
    let mut c = ctx.guard(&id);
    c.out = Some(ctx.run(cmd).ok());
    let mut held = Vec::new();
    for e in fs::read_dir(format!("/proc/{}/fd", c.pid()))
        .unwrap()
        .flatten()
    {
        let fd: i32 = e.file_name().to_str().unwrap().parse().unwrap();
        let target = fs::read_link(e.path()).unwrap().display().to_string();
        // What runc's test allows: stdio, the preserved fd, the fifo, sockets, pipes,
        // anonymous inodes, "/" (a procfs handle) and pty devices.
        let allowed = fd < 3
            || (fd == 3 && target == payload.display().to_string())
            || target.ends_with("/exec.fifo")
            || target == "/"
            || ["socket:", "pipe:", "anon_inode:", "/dev/pts/"]
                .iter()
                .any(|p| target.starts_with(p));
        if !allowed {
            held.push(format!("{fd} -> {target}"));
        }
    }
    assert!(held.is_empty(), "the created init holds {held:?}");
}
