//! linux.seccomp: errno and kill actions, the filter mode in /proc, loading a filter for a
//! non-root process without no_new_privs, and values an `int` argument cannot hold.

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

/// Allow everything but `names`, which fail with `errno`.
fn deny(names: &[&str], errno: i32) -> Value {
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno}]
    })
}

fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
        .unwrap_or_else(|| panic!("{key} not in {out}"))
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn denied_mkdir_fails_with_the_profile_errno() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scerrno");
    ctx.set("/linux/seccomp", deny(&["mkdir", "mkdirat"], libc::EXDEV));
    // /dev/shm is a writable tmpfs: without the filter mkdir would succeed.
    ctx.sh("mkdir /dev/shm/d; echo rc=$?; touch /dev/shm/f; echo touch=$?");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "rc=1\ntouch=0\n", "{err}");
    assert!(
        err.contains("Invalid cross-device link"),
        "errno 18 expected: {err}"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn filter_mode_is_shown_in_proc_status() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scmode");
    ctx.set("/linux/seccomp", deny(&["mkdir"], libc::EPERM));
    ctx.args(&["cat", "/proc/self/status"]);
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(field(&out, "Seccomp:"), "2");
    let mut ctx = Ctx::new("scnone");
    ctx.args(&["cat", "/proc/self/status"]);
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(field(&out, "Seccomp:"), "0", "no linux.seccomp, no filter");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn kill_action_kills_the_caller_with_sigsys() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("sckill");
    ctx.set(
        "/linux/seccomp",
        json!({"defaultAction": "SCMP_ACT_ALLOW",
               "syscalls": [{"names": ["sync"], "action": "SCMP_ACT_KILL"}]}),
    );
    // A subshell: ash runs some applets (sync among them) in-process.
    ctx.sh("echo before; (sync); echo rc=$?");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, format!("before\nrc={}\n", 128 + libc::SIGSYS));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn non_root_user_without_no_new_privs_still_gets_the_filter() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scuser");
    ctx.set("/process/noNewPrivileges", json!(false));
    ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    ctx.set("/linux/seccomp", deny(&["mkdir", "mkdirat"], libc::EXDEV));
    ctx.sh(
        "id -u; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; mkdir /dev/shm/d; echo rc=$?",
    );
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(field(&out, "Seccomp:"), "2", "{out}{err}");
    assert_eq!(field(&out, "NoNewPrivs:"), "0");
    assert!(out.starts_with("1000\n"), "{out}");
    assert!(out.ends_with("rc=1\n"), "{out}");
    assert!(err.contains("Invalid cross-device link"), "{err}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn unknown_seccomp_action_fails_create() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scbad");
    ctx.set(
        "/linux/seccomp",
        json!({"defaultAction": "SCMP_ACT_NOPE", "syscalls": []}),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(out.stderr.contains("defaultAction"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

/// `ioctl`'s `cmd` is 32 bits to the kernel, and moat compares it on those bits only: a
/// value above them names a call that cannot exist, and create fails naming the field
/// (runc would compile a rule that never matches).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn value_wider_than_an_int_argument_fails_create() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scwide");
    let arg = json!({"index": 1, "value": (1u64 << 32) | 0x5412, "op": "SCMP_CMP_EQ"});
    ctx.set(
        "/linux/seccomp",
        json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": [arg]}]}),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("linux.seccomp.syscalls[0].args[0].value: 0x100005412 does not fit"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// A profile written for runc 1.1 (Docker's default, runtime-tools'): an allow-list
/// without the calls moat's init makes for itself after the early filter (without NNP, the
/// filter is loaded before the ids change) — openat2 for its procfs reads and the cwd,
/// close_range for the fd sweep. Built here from moat's own RESTRICTED profile with those
/// two taken out. The container must run, with its groups and cwd, and exec into it too.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_profile_without_openat2_and_close_range_runs_without_nnp() {
    if !require_root() {
        return;
    }
    let mut profile: Value =
        serde_json::from_str(include_str!("../seccomp-profiles/restricted.json")).unwrap();
    for rule in profile["syscalls"].as_array_mut().unwrap() {
        if let Some(names) = rule["names"].as_array_mut() {
            names.retain(|n| n != "openat2" && n != "close_range");
        }
    }
    let mut ctx = Ctx::new("scrunc");
    ctx.set("/process/noNewPrivileges", json!(false));
    ctx.set(
        "/process/user",
        json!({"uid": 0, "gid": 0, "additionalGids": [5, 6]}),
    );
    ctx.set("/process/cwd", json!("/tmp"));
    ctx.set("/linux/seccomp", profile);
    ctx.sh("grep Groups /proc/self/status; pwd; sleep 30");
    let c = ctx.create_ok("c");
    c.start();
    assert!(
        wait_until(Duration::from_secs(20), || c.stdout().contains("/tmp")),
        "{:?}",
        c.stdout()
    );
    assert!(c.stdout().starts_with("Groups:\t5 6"), "{:?}", c.stdout());
    let out = c.moat(&["exec", &c.id, "pwd"]).ok();
    assert_eq!(out.stdout, "/tmp\n");
    c.kill("KILL").ok();
}

/// moat's RESTRICTED allow-list as a profile of the engine's, edited by `edit`.
fn restricted_profile(edit: impl FnOnce(&mut Value)) -> Value {
    let mut p: Value =
        serde_json::from_str(include_str!("../seccomp-profiles/restricted.json")).unwrap();
    // The file's own note is no field of the spec's seccomp object (an engine converting a
    // profile drops it): left in, it would be an unknown key.
    p.as_object_mut().unwrap().remove("comment");
    edit(&mut p);
    p
}

/// `defaultErrnoRet` is what a syscall no rule names returns (runc's seccomp.bats
/// "defaultErrnoRet=ENXIO"), with the architectures an engine lists, and a profile from
/// before close_range(2) (Linux 5.9) still starts the process: moat's fd sweep is made
/// before the filter is loaded, not refused by it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn default_errno_ret_is_what_an_unlisted_syscall_returns() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scdefret");
    let profile = restricted_profile(|p| {
        p["defaultErrnoRet"] = json!(libc::ENXIO);
        p["architectures"] = json!([
            "SCMP_ARCH_X86",
            "SCMP_ARCH_X32",
            "SCMP_ARCH_X86_64",
            "SCMP_ARCH_AARCH64",
            "SCMP_ARCH_ARM"
        ]);
        let allowed = p["syscalls"][0]["names"].as_array_mut().unwrap();
        allowed.retain(|n| n != "chdir" && n != "close_range");
    });
    ctx.set("/linux/seccomp", profile);
    ctx.sh("cd /; echo rc=$?");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "rc=2\n", "{err}");
    assert!(
        err.contains("No such device or address"),
        "ENXIO expected: {err}"
    );
}

/// SCMP_ACT_NOTIFY on a syscall moat's init makes before the agent has the listener
/// (runc's seccomp-notify.bats "SCMP_ACT_NOTIFY write") fails create up front, naming
/// the entry and the syscall, and leaves nothing behind; so does a notify default.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn notify_on_write_fails_create_up_front() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scnotifyw");
    let agent = ctx.dir.join("agent.sock");
    let profile = |default: &str, names: &[&str]| {
        json!({"defaultAction": default, "listenerPath": agent, "listenerMetadata": "bar",
            "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"},
                         {"names": names, "action": "SCMP_ACT_NOTIFY"}]})
    };
    ctx.set("/process/noNewPrivileges", json!(false));
    ctx.set("/linux/seccomp", profile("SCMP_ACT_ALLOW", &["write"]));
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert_eq!(
        out.stderr.trim_end(),
        "moat: linux.seccomp.syscalls[1].names[0]: SCMP_ACT_NOTIFY cannot be used for the write \
         syscall: moat's init makes it after loading the filter, before the seccomp agent has \
         the listener"
    );
    ctx.assert_no_trace(&c.id);
    ctx.set("/linux/seccomp", profile("SCMP_ACT_NOTIFY", &["chmod"]));
    let (c, out) = ctx.create("d");
    let out = out.fails();
    assert!(
        out.stderr.contains(
            "linux.seccomp.defaultAction: SCMP_ACT_NOTIFY cannot be used as the default action"
        ),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// The names of RESTRICTED's allow-list numbered `syncfs` (306) and above on x86_64.
#[rustfmt::skip]
const SYNCFS_AND_NEWER: &[&str] = &[
    "syncfs", "sendmmsg", "getcpu", "sched_setattr", "sched_getattr", "renameat2", "seccomp",
    "getrandom", "memfd_create", "execveat", "membarrier", "mlock2", "copy_file_range",
    "preadv2", "pwritev2", "pkey_mprotect", "pkey_alloc", "pkey_free", "statx", "io_pgetevents",
    "rseq", "pidfd_send_signal", "pidfd_open", "close_range", "openat2", "faccessat2",
    "epoll_pwait2", "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "process_mrelease", "futex_waitv", "fchmodat2",
];

/// runc's seccomp.bats "-ENOSYS handling": with a denying default, a syscall newer than
/// every one the profile names gets ENOSYS (the C library's cue to fall back), one the
/// profile leaves out below that the default's errno. The profile: RESTRICTED's
/// allow-list cut below `syncfs` (306 on x86_64), EPERM by default; `nsenter` calls
/// `setns` (308), `cd` calls `chdir`, left out.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn syscalls_newer_than_the_profile_get_enosys() {
    if !require_root() || !cfg!(target_arch = "x86_64") {
        return;
    }
    let older = |n: &Value| n != "chdir" && !SYNCFS_AND_NEWER.iter().any(|s| n == s);
    let profile = restricted_profile(|p| {
        p["defaultErrnoRet"] = json!(libc::EPERM);
        let calls = p["syscalls"].as_array_mut().unwrap();
        calls.retain(|c| c["action"] == "SCMP_ACT_ALLOW");
        for c in calls.iter_mut() {
            c["names"].as_array_mut().unwrap().retain(older);
        }
    });
    let mut ctx = Ctx::new("scenosys");
    ctx.set("/linux/seccomp", profile);
    ctx.sh("nsenter -t 1 -u true; echo setns=$?; cd /; echo cd=$?");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "setns=1\ncd=2\n", "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].contains("Function not implemented")
            && lines[1].contains("Operation not permitted"),
        "{err} (a name added to restricted.json at 306 or above belongs in SYNCFS_AND_NEWER)"
    );
}

/// A seccomp agent at `listenerPath`: takes each listener fd sent to it (runc's message:
/// JSON, the fd by SCM_RIGHTS) and answers every notification on it: `mkdir` with success
/// without making the directory (so a caller can tell the agent answered), anything else
/// with "continue". Records (listener number, syscall name) for each notification.
struct Agent {
    path: PathBuf,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(usize, String)>>>,
}

impl Agent {
    fn start(path: PathBuf) -> Agent {
        Agent::start_answering(path, usize::MAX)
    }

    /// Answers the notifications of the first `answered` listeners only: the later ones'
    /// are taken and never answered (an agent that hangs).
    fn start_answering(path: PathBuf, answered: usize) -> Agent {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind agent");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(conn) = conn else { return };
                let mut buf = [0u8; 4096];
                let mut iov = [std::io::IoSliceMut::new(&mut buf)];
                let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
                let msg = nix::sys::socket::recvmsg::<()>(
                    conn.as_raw_fd(),
                    &mut iov,
                    Some(&mut space),
                    nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
                )
                .expect("recvmsg");
                let fd = msg.cmsgs().expect("cmsgs").find_map(|c| match c {
                    nix::sys::socket::ControlMessageOwned::ScmRights(f) => f.first().copied(),
                    _ => None,
                });
                // SAFETY: the fd the kernel just gave us, owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd.expect("an fd with the message")) };
                let log = log.clone();
                if n >= answered {
                    // Held open, never read: the notified call waits for good.
                    log.lock().unwrap().push((n, "(silent)".into()));
                    std::mem::forget(fd);
                    continue;
                }
                std::thread::spawn(move || loop {
                    let Ok(req) = libseccomp::ScmpNotifReq::receive(fd.as_raw_fd()) else {
                        return;
                    };
                    let name = req.data.syscall.get_name().unwrap_or_default();
                    let flags = libseccomp::ScmpNotifRespFlags::empty();
                    let resp = if name == "mkdir" || name == "mkdirat" {
                        libseccomp::ScmpNotifResp::new_val(req.id, 0, flags)
                    } else {
                        libseccomp::ScmpNotifResp::new_continue(req.id, flags)
                    };
                    log.lock().unwrap().push((n, name));
                    if resp.respond(fd.as_raw_fd()).is_err() {
                        return;
                    }
                });
            }
        });
        Agent { path, seen }
    }

    fn seen(&self) -> Vec<(usize, String)> {
        self.seen.lock().unwrap().clone()
    }
}

fn notify_profile(agent: &Agent, names: &[&str]) -> Value {
    json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": agent.path,
        "listenerMetadata": "bar",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [{"names": names, "action": "SCMP_ACT_NOTIFY"}]})
}

/// runc's seccomp-notify.bats "important syscalls": notifying on syscalls moat itself
/// still makes after the filter is loaded (execve, openat, read, close), with the filter
/// loaded early (no noNewPrivileges) and late: the listener reaches the agent the moment
/// the filter is loaded, so the agent answers them and the container runs (without the
/// handover in time, create waits for an answer nobody can give). The listener fd never
/// reaches the container process.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn notify_on_the_inits_own_syscalls_is_answered_by_the_agent() {
    if !require_root() {
        return;
    }
    for nnp in [false, true] {
        let mut ctx = Ctx::new(if nnp { "scnotnnp" } else { "scnot" });
        let agent = Agent::start(ctx.dir.join("agent.sock"));
        ctx.set("/process/noNewPrivileges", json!(nnp));
        ctx.set(
            "/linux/seccomp",
            notify_profile(&agent, &["execve", "openat", "open", "read", "close"]),
        );
        ctx.sh("echo ran; ls -l /proc/self/fd/");
        let (out, err) = run_to_end(&ctx, "c");
        assert!(out.starts_with("ran\n"), "nnp {nnp}: {out} {err}");
        assert!(
            !out.contains("seccomp"),
            "nnp {nnp}: the listener fd leaked into the container: {out}"
        );
        let seen = agent.seen();
        assert!(
            seen.iter().any(|(_, s)| s == "execve"),
            "nnp {nnp}: the agent answered no execve: {seen:?}"
        );
    }
}

/// runc's seccomp-notify.bats "runc exec": an exec'd process's listener goes to the agent
/// too (a second connection), so its notified mkdir is answered by the agent (success
/// without a directory), with the filter loaded early and late.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_exec_d_process_listener_reaches_the_agent() {
    if !require_root() {
        return;
    }
    for nnp in [false, true] {
        let mut ctx = Ctx::new(if nnp { "scnotexn" } else { "scnotex" });
        let agent = Agent::start(ctx.dir.join("agent.sock"));
        ctx.set("/process/noNewPrivileges", json!(nnp));
        ctx.set(
            "/linux/seccomp",
            notify_profile(&agent, &["mkdir", "mkdirat"]),
        );
        ctx.args(&["sleep", "100"]);
        let c = ctx.create_ok("c");
        c.start();
        let out = c.moat(&[
            "exec",
            &c.id,
            "sh",
            "-c",
            "mkdir /tmp/by-agent && ! test -e /tmp/by-agent && echo answered; ls -l /proc/self/fd/",
        ]);
        let out = out.ok();
        assert!(
            out.stdout.starts_with("answered\n"),
            "nnp {nnp}: {}",
            out.stdout
        );
        assert!(!out.stdout.contains("seccomp"), "nnp {nnp}: {}", out.stdout);
        let seen = agent.seen();
        assert!(
            seen.iter().any(|(n, s)| *n == 1 && s.starts_with("mkdir")),
            "nnp {nnp}: the exec'd process's listener did not reach the agent: {seen:?}"
        );
        c.kill("KILL");
    }
}

/// An exec whose process waits in a notified `execve` that the agent never answers holds
/// the state lock only until that process is in the pid namespace (`Plan::hold`), not
/// until its execve: `delete --force` still ends the container, and with it the exec.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn delete_is_not_held_up_by_an_exec_waiting_on_a_silent_agent() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("scsilent");
    // The init's listener (the first) is answered, the exec's is not.
    let agent = Agent::start_answering(ctx.dir.join("agent.sock"), 1);
    ctx.set("/process/noNewPrivileges", json!(true));
    ctx.set("/linux/seccomp", notify_profile(&agent, &["execve"]));
    ctx.args(&["sleep", "100"]);
    let c = ctx.create_ok("c");
    c.start();
    let exec = ctx.moat_bg(&["exec", &c.id, "true"]);
    assert!(
        wait_until(Duration::from_secs(10), || agent
            .seen()
            .iter()
            .any(|(n, _)| *n == 1)),
        "the exec's listener never reached the agent: {:?}",
        agent.seen()
    );
    // A delete held up by the exec would run into the call's timeout and fail here.
    let del = c.moat(&["delete", "--force", &c.id]);
    assert_eq!(del.code, 0, "delete --force: {}", del.stderr);
    let ex = exec.wait(Duration::from_secs(20));
    assert_ne!(ex.code, 0, "the exec succeeded: {}", ex.stderr);
    reap();
    ctx.assert_no_trace(&c.id);
}

/// The agent links libseccomp, whose text export references glibc's `__fprintf_chk`
/// (see `src/linux/seccomp.rs`): the same stub for this static musl test binary.
#[cfg(target_env = "musl")]
#[no_mangle]
extern "C" fn __fprintf_chk() -> std::ffi::c_int {
    std::process::abort()
}
