//! T11: seccomp probes for every class RESTRICTED denies. A static probe program
//! (`fixtures/probe.c`) issues each call with `syscall(2)` in a child of its own and prints
//! `name ret errno`; every one must fail with the filter's errno — EPERM from the deny list,
//! ENOSYS for `clone3` (so libc falls back to the filterable `clone`) and for calls the
//! allow-list does not know.
//!
//! Capabilities must not be what stops them: one run allows CAP_SYS_ADMIN, CAP_SYS_PTRACE,
//! CAP_BPF, CAP_PERFMON and CAP_SYSLOG through the config (so the kernel itself would
//! permit every call), and an OPEN control shows the same probes succeed without a filter.
//! With an engine profile (`defaultAction: SCMP_ACT_ALLOW`) the stacked deny floor must
//! still deny everything. 32-bit `socketcall` cannot be argument-filtered: under RESTRICTED
//! a 32-bit process must be killed or refused, never reach AF_ALG.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::support::*;
use crate::{ctx, install, probe, probe32, use_config_file, Policy};

/// (probe, errnos the filter may return). EPERM is the deny list's answer; ENOSYS the
/// allow-list's default, which is how moat's profile answers calls whose arguments match no
/// allow rule (namespace flags to `clone`, AF_ALG/AF_VSOCK to `socket`, TIOCSTI). Both are
/// the filter's: in the capability-allowed run the kernel itself would permit every call,
/// and it never answers ENOSYS for these. `clone3` must be ENOSYS exactly, so that libc
/// falls back to `clone`. The probe names are those of probe.c.
const EPERM_OR_ENOSYS: &[i32] = &[libc::EPERM, libc::ENOSYS];
const DENIED: [(&str, &[i32]); 27] = [
    ("unshare-user", EPERM_OR_ENOSYS),
    ("unshare-mnt", EPERM_OR_ENOSYS),
    ("mount", EPERM_OR_ENOSYS),
    ("clone-newuser", EPERM_OR_ENOSYS),
    ("clone-newns", EPERM_OR_ENOSYS),
    ("clone3", &[libc::ENOSYS]),
    ("io_uring_setup", EPERM_OR_ENOSYS),
    ("keyctl", EPERM_OR_ENOSYS),
    ("add_key", EPERM_OR_ENOSYS),
    ("request_key", EPERM_OR_ENOSYS),
    ("userfaultfd", EPERM_OR_ENOSYS),
    ("bpf", EPERM_OR_ENOSYS),
    ("perf_event_open", EPERM_OR_ENOSYS),
    ("ptrace", EPERM_OR_ENOSYS),
    ("process_vm_readv", EPERM_OR_ENOSYS),
    ("setns", EPERM_OR_ENOSYS),
    ("fsopen", EPERM_OR_ENOSYS),
    ("socket-af_alg", EPERM_OR_ENOSYS),
    ("socket-af_vsock", EPERM_OR_ENOSYS),
    ("ioctl-tiocsti", EPERM_OR_ENOSYS),
    // Not in the allow-list at all.
    ("syslog", &[libc::ENOSYS]),
    // The same calls with bit 32 set in the argument the kernel reads as an int: the
    // kernel ignores it, so the filter must too.
    ("socket-af_alg-hi", EPERM_OR_ENOSYS),
    ("socket-af_vsock-hi", EPERM_OR_ENOSYS),
    ("ioctl-tiocsti-hi", EPERM_OR_ENOSYS),
    ("ioctl-tioclinux", EPERM_OR_ENOSYS),
    ("ioctl-tioclinux-hi", EPERM_OR_ENOSYS),
    ("clone-newuser-hi", EPERM_OR_ENOSYS),
];

const POWERFUL: [&str; 6] = [
    "CAP_SYS_ADMIN",
    "CAP_SYS_PTRACE",
    "CAP_BPF",
    "CAP_PERFMON",
    "CAP_SYSLOG",
    "CAP_NET_ADMIN",
];

/// Runs `probe seccomp` in a container of `ctx`; returns name → (ret, errno) (a probe
/// killed by a signal has ret "killed").
fn probes(ctx: &mut Ctx) -> BTreeMap<String, (String, i32)> {
    ctx.args(&["/bin/probe", "seccomp"]);
    let (out, err) = run_to_end(ctx, "c");
    let got: BTreeMap<String, (String, i32)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((
                f.next()?.to_string(),
                (f.next()?.to_string(), f.next()?.parse().ok()?),
            ))
        })
        .collect();
    assert_eq!(got.len(), DENIED.len(), "probe output: {out}{err}");
    got
}

#[track_caller]
fn assert_denied(what: &str, got: &BTreeMap<String, (String, i32)>, skip: &[&str]) {
    let mut bad = Vec::new();
    for (name, errnos) in DENIED {
        if skip.contains(&name) {
            continue;
        }
        let (ret, e) = &got[name];
        if ret != "-1" || !errnos.contains(e) {
            bad.push(format!(
                "{name}: ret {ret} errno {e} (want -1 and one of {errnos:?})"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: not denied by the filter:\n{}",
        bad.join("\n")
    );
}

fn probe_ctx(tag: &str, policy: Policy) -> Option<Ctx> {
    let p = probe()?;
    let ctx = ctx(tag, policy);
    install(&ctx, p, "probe");
    Some(ctx)
}

/// T11 under RESTRICTED with moat's own profile: the default config (no capabilities), and
/// a config that allows the powerful capabilities so only the filter stands in the way.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_restricted_profile_denies_every_class() {
    if !require_root() {
        return;
    }
    let Some(mut ctx) = probe_ctx("t11", Policy::Restricted) else {
        return;
    };
    assert_denied("RESTRICTED", &probes(&mut ctx), &[]);

    let Some(mut ctx) = probe_ctx("t11caps", Policy::Restricted) else {
        return;
    };
    use_config_file(
        &mut ctx,
        &format!(
            "default_policy = \"restricted\"\n[restricted]\nallowed_capabilities = {:?}\n\
             accept_voided = {:?}\n",
            POWERFUL, POWERFUL
        ),
    );
    let all = json!(POWERFUL);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": all, "effective": all, "permitted": all}),
    );
    ctx.args(&["cat", "/proc/self/status"]);
    let (st, _) = run_to_end(&ctx, "caps");
    assert_ne!(
        crate::field(&st, "CapEff"),
        "0000000000000000",
        "the config should have let the capabilities through: {st}"
    );
    assert_denied("RESTRICTED with capabilities", &probes(&mut ctx), &[]);
}

/// T11 control: under OPEN without a filter (and with the same capabilities) the probes
/// reach the kernel and work, so the denials above are the filter's doing.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_control_probes_work_without_a_filter() {
    if !require_root() {
        return;
    }
    let Some(mut ctx) = probe_ctx("t11ctl", Policy::Open) else {
        return;
    };
    let all = json!(POWERFUL);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": all, "effective": all, "permitted": all}),
    );
    assert!(ctx.config["linux"]["seccomp"].is_null());
    let got = probes(&mut ctx);
    for name in [
        "unshare-user",
        "unshare-mnt",
        "mount",
        "clone-newuser",
        "clone-newns",
        "clone3",
        "io_uring_setup",
        "keyctl",
        "userfaultfd",
        "bpf",
        "perf_event_open",
        "ptrace",
        "setns",
        "fsopen",
        "socket-af_vsock",
        // The kernel reads the low 32 bits: AF_VSOCK and CLONE_NEWUSER with bit 32 set.
        "socket-af_vsock-hi",
        "clone-newuser-hi",
    ] {
        let (ret, e) = &got[name];
        assert!(
            ret != "-1" && ret != "killed",
            "control: {name} failed without a filter (ret {ret}, errno {e}): the probe is broken"
        );
    }
    // AF_ALG reaches the kernel (which may lack it) instead of the filter's EPERM.
    assert_ne!(got["socket-af_alg"].1, libc::EPERM);
    assert_ne!(got["socket-af_alg-hi"].1, libc::EPERM);
    // stdin is /dev/null: the tty layer's answer, with or without the high bit.
    for name in [
        "ioctl-tiocsti",
        "ioctl-tiocsti-hi",
        "ioctl-tioclinux",
        "ioctl-tioclinux-hi",
    ] {
        assert_eq!(got[name].1, libc::ENOTTY, "control: {name}");
    }
}

/// T11 with an engine profile: the engine sends a permissive filter (default ALLOW, all
/// x86 architectures); RESTRICTED keeps it and stacks the deny floor, which must still deny
/// every class (the allow-list's ENOSYS default is the engine's business: syslog skipped).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_engine_profile_gets_the_deny_floor() {
    if !require_root() {
        return;
    }
    for archs in [
        json!([]),
        json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
    ] {
        let Some(mut ctx) = probe_ctx("t11engine", Policy::Restricted) else {
            return;
        };
        ctx.set(
            "/linux/seccomp",
            json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": archs}),
        );
        assert_denied(
            &format!("engine profile (archs {archs}) + floor"),
            &probes(&mut ctx),
            &["syslog"],
        );
    }
}

/// The 32-bit probe's `socketcall(SYS_SOCKET, AF_ALG)` and `socket(AF_ALG)` through the
/// int 0x80 entry: returns the output (lines, then `rc=N`).
fn socketcall(ctx: &mut Ctx) -> String {
    ctx.sh("/bin/probe32 socketcall; echo rc=$?");
    let (out, err) = run_to_end(ctx, "c");
    assert!(out.contains("rc="), "{out}{err}");
    out
}

/// T11: AF_ALG through 32-bit `socketcall`. Under RESTRICTED with moat's profile (native
/// architecture only) the 32-bit process dies of SIGSYS at its first syscall; with an
/// engine profile that lists the x86 architectures the floor refuses `socketcall` and the
/// AF_ALG socket with EPERM. Never a socket, and never the kernel's own answer. Control:
/// under OPEN the calls reach the kernel.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_af_alg_through_32_bit_socketcall() {
    if !require_root() {
        return;
    }
    let Some(p32) = probe32() else {
        return;
    };
    let setup = |tag: &str, policy: Policy| {
        let ctx = ctx(tag, policy);
        install(&ctx, p32, "probe32");
        ctx
    };
    let mut ctx = setup("t11s32", Policy::Open);
    let out = socketcall(&mut ctx);
    assert!(
        out.contains("socketcall-af_alg ") && out.ends_with("rc=0\n"),
        "control: the 32-bit probe does not run under OPEN: {out}"
    );
    assert!(
        !out.contains(" -1 1\n"),
        "control: EPERM without a filter: {out}"
    );

    let mut ctx = setup("t11s32r", Policy::Restricted);
    let out = socketcall(&mut ctx);
    let killed = out == format!("rc={}\n", 128 + libc::SIGSYS);
    assert!(
        killed,
        "RESTRICTED: a 32-bit process must die of SIGSYS: {out}"
    );

    let mut ctx = setup("t11s32e", Policy::Restricted);
    ctx.set(
        "/linux/seccomp",
        json!({"defaultAction": "SCMP_ACT_ALLOW",
               "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]}),
    );
    let out = socketcall(&mut ctx);
    let refused = out.lines().filter(|l| l.ends_with(" -1 1")).count() == 2;
    let killed = out == format!("rc={}\n", 128 + libc::SIGSYS);
    assert!(
        refused || killed,
        "RESTRICTED + engine profile: AF_ALG via 32-bit calls not refused by the floor: {out}"
    );
}

/// Engine profiles are narrowed too (OPEN here, so no floor stands behind them): a
/// deny-list in the style of a hand-written profile, and an allow-list whose `socket`
/// rules are the Docker default profile's (`< 38`, `== 39`, `> 40`, which is moat's
/// RESTRICTED profile too). With bit 32 set, `socket(AF_VSOCK)` is `> 40` to a 64-bit
/// comparison and AF_VSOCK to the kernel.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_engine_profiles_hold_with_high_bits() {
    if !require_root() {
        return;
    }
    let eq = |index: u32, value: u64| json!({"index": index, "value": value, "op": "SCMP_CMP_EQ"});
    let deny = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM,
         "args": [eq(0, 38), eq(0, 40)]},
        {"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM,
         "args": [eq(1, libc::TIOCSTI as u64), eq(1, 0x541c)]},
        {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::EPERM,
         "args": [{"index": 0, "value": libc::CLONE_NEWUSER, "valueTwo": libc::CLONE_NEWUSER,
                   "op": "SCMP_CMP_MASKED_EQ"}]},
    ]});
    let allow: Value =
        serde_json::from_str(include_str!("../../seccomp-profiles/restricted.json")).unwrap();
    let hi = [
        "socket-af_alg-hi",
        "socket-af_vsock-hi",
        "ioctl-tiocsti-hi",
        "ioctl-tioclinux-hi",
        "clone-newuser-hi",
    ];
    for (what, profile) in [("deny-list", deny), ("Docker-style allow-list", allow)] {
        let Some(mut ctx) = probe_ctx("t11hi", Policy::Open) else {
            return;
        };
        ctx.set("/linux/seccomp", profile);
        let got = probes(&mut ctx);
        let skip: Vec<&str> = DENIED
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| !hi.contains(n))
            .collect();
        assert_denied(&format!("OPEN, engine {what}"), &got, &skip);
    }
}

// ------------------------------------------------------------------ the caller's terminal

/// A pty the test owns; the slave plays the terminal of the shell that started moat.
/// Raw (what is typed into it is readable at once), or cooked (^C is SIGINT).
fn test_pty(raw: bool) -> (OwnedFd, OwnedFd) {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    if raw {
        let mut t = nix::sys::termios::tcgetattr(&pty.slave).expect("tcgetattr");
        nix::sys::termios::cfmakeraw(&mut t);
        nix::sys::termios::tcsetattr(&pty.slave, nix::sys::termios::SetArg::TCSANOW, &t)
            .expect("tcsetattr");
    }
    (pty.master, pty.slave)
}

/// `moat ARGS` (under the context's policy) as a shell starts a foreground job: in a
/// session whose controlling terminal is `slave`, which is also its stdin. Returns the
/// running child and its stdout and stderr files.
fn session_job(
    ctx: &Ctx,
    args: &[&str],
    slave: &OwnedFd,
) -> (std::process::Child, PathBuf, PathBuf, String) {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ctx.write_config();
    let mut cmd = ctx.cmd();
    cmd.args(args);
    policy_env(&mut cmd);
    let out_file = ctx.io.join(format!("session-{n}.out"));
    let err_file = ctx.io.join(format!("session-{n}.err"));
    cmd.stdin(Stdio::from(slave.try_clone().expect("dup slave")))
        .stdout(std::fs::File::create(&out_file).expect("stdout file"))
        .stderr(std::fs::File::create(&err_file).expect("stderr file"));
    // SAFETY: setsid and ioctl only, both async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let what = format!("{cmd:?}");
    (spawn(&mut cmd), out_file, err_file, what)
}

/// [`session_job`] run to its end.
fn in_session(ctx: &Ctx, args: &[&str], slave: &OwnedFd) -> Out {
    let (child, out_file, err_file, what) = session_job(ctx, args, slave);
    let code = exit_code(wait_child(child, CALL_TIMEOUT));
    Out {
        code,
        stdout: std::fs::read_to_string(&out_file).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_file).unwrap_or_default(),
        out_file,
        err_file,
        what,
    }
}

/// What arrived in the input queue of the caller's terminal: what its shell would read,
/// and run, once the container is gone.
fn typed_into(slave: &OwnedFd) -> String {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsRawFd;
    fcntl(slave.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).expect("O_NONBLOCK");
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(n) = nix::unistd::read(slave.as_raw_fd(), &mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// `probe tty`'s first line: pid, sid, tty_nr, rdev of fd 0.
type Session = (i64, i64, i64, i64);

/// The `probe tty` report: the session line and name → (ret, errno).
fn tty_report(out: &Out) -> (Session, BTreeMap<String, (i64, i32)>) {
    let text = out.stdout.replace("\r\n", "\n");
    let mut session = None;
    let mut calls = BTreeMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        match f.as_slice() {
            ["session", p, s, t, r] => {
                let n = |v: &str| v.parse::<i64>().expect("number");
                session = Some((n(p), n(s), n(t), n(r)));
            }
            [name, ret, e] => {
                if let (Ok(r), Ok(e)) = (ret.parse(), e.parse()) {
                    calls.insert(name.to_string(), (r, e));
                }
            }
            _ => {}
        }
    }
    let session = session.unwrap_or_else(|| panic!("no session line: {out:#?}"));
    assert_eq!(calls.len(), 2, "{out:#?}");
    (session, calls)
}

/// TIOCSTI with bit 32 set in `cmd`, from a container whose stdin is the terminal of the
/// shell that ran `moat run`. The container holds CAP_SYS_ADMIN (allowed by the config),
/// so the kernel would let it type into any terminal: only the filter stands in the way,
/// and nothing may arrive in the terminal's input.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t11_tiocsti_with_high_bits_never_reaches_the_callers_terminal() {
    if !require_root() {
        return;
    }
    let Some(mut ctx) = probe_ctx("t11sti", Policy::Restricted) else {
        return;
    };
    use_config_file(
        &mut ctx,
        &format!(
            "default_policy = \"restricted\"\n[restricted]\nallowed_capabilities = {:?}\n\
             accept_voided = {:?}\n",
            POWERFUL, POWERFUL
        ),
    );
    let all = json!(POWERFUL);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": all, "effective": all, "permitted": all}),
    );
    ctx.args(&["/bin/probe", "tty"]);
    let (_master, slave) = test_pty(true);
    let b = ctx.bundle_str();
    let out = in_session(&ctx, &["run", "--bundle", &b, &ctx.id("c")], &slave);
    assert_eq!(out.code, 0, "{out:#?}");
    let (_, calls) = tty_report(&out);
    let typed = typed_into(&slave);
    assert!(
        typed.is_empty(),
        "a RESTRICTED container typed {typed:?} into the caller's terminal: {calls:?}"
    );
    for (name, (ret, e)) in &calls {
        assert!(
            *ret == -1 && EPERM_OR_ENOSYS.contains(e),
            "{name}: ret {ret} errno {e}: not the filter's answer"
        );
    }
}

/// Every container process is a session leader without a controlling terminal of the
/// caller's: the init and an exec'd process, without a terminal (where it used to keep
/// the caller's) and with one (its own pty). OPEN and without CAP_SYS_ADMIN, so no filter
/// and no capability is involved: a process outside the terminal's session cannot use
/// TIOCSTI on it, and the caller's terminal gets nothing.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_container_process_has_a_session_of_its_own() {
    if !require_root() {
        return;
    }
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti")
        .map_or(true, |s| s.trim() != "0");
    if !legacy {
        eprintln!(
            "SKIPPED in part: dev.tty.legacy_tiocsti = 0, the kernel refuses TIOCSTI without \
             CAP_SYS_ADMIN anyway; only the session checks run"
        );
    }
    let Some(mut ctx) = probe_ctx("sess", Policy::Open) else {
        return;
    };
    let caps = ctx.config["process"]["capabilities"]["bounding"].clone();
    assert!(
        !caps.to_string().contains("CAP_SYS_ADMIN"),
        "the default spec must not grant CAP_SYS_ADMIN: {caps}"
    );
    let b = ctx.bundle_str();
    let check = |what: &str, out: &Out, slave: &OwnedFd, terminal: bool| {
        assert_eq!(out.code, 0, "{what}: {out:#?}");
        let ((pid, sid, tty_nr, rdev), calls) = tty_report(out);
        let typed = typed_into(slave);
        assert!(
            typed.is_empty(),
            "{what}: the container typed {typed:?} into the caller's terminal: {calls:?}"
        );
        assert_eq!(sid, pid, "{what}: not a session leader: {}", out.stdout);
        if terminal {
            assert_eq!(
                tty_nr, rdev,
                "{what}: the ctty is not its own pty: {}",
                out.stdout
            );
        } else {
            assert_eq!(
                tty_nr, 0,
                "{what}: has a controlling terminal: {}",
                out.stdout
            );
            if legacy {
                for (name, (ret, e)) in &calls {
                    assert_eq!(
                        (*ret, *e),
                        (-1, libc::EPERM),
                        "{what}: {name} on a terminal that is not its own"
                    );
                }
            }
        }
    };

    ctx.args(&["/bin/probe", "tty"]);
    for terminal in [false, true] {
        ctx.set("/process/terminal", json!(terminal));
        let (_master, slave) = test_pty(true);
        let id = ctx.id(&format!("run{terminal}"));
        let out = in_session(&ctx, &["run", "--bundle", &b, &id], &slave);
        check(&format!("run, terminal {terminal}"), &out, &slave, terminal);
    }

    ctx.set("/process/terminal", json!(false));
    let c = crate::sleeper(&mut ctx, "c");
    for tty in [false, true] {
        let (_master, slave) = test_pty(true);
        let mut args = vec!["exec"];
        if tty {
            args.push("-t");
        }
        args.extend([c.id.as_str(), "/bin/probe", "tty"]);
        let out = in_session(&ctx, &args, &slave);
        check(&format!("exec, tty {tty}"), &out, &slave, tty);
    }
}

/// Not a defence but what it must not break: with the container in a session of its own,
/// ^C typed at the caller's terminal signals only moat (the terminal's foreground job),
/// and a foreground `moat run` without a terminal passes SIGINT on to the init.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn ctrl_c_still_reaches_a_container_without_a_terminal() {
    if !require_root() {
        return;
    }
    let mut ctx = crate::ctx("ctrlc", Policy::Open);
    ctx.sh("trap 'echo got-INT; exit 7' INT; echo ready; while :; do sleep 0.05; done");
    let (master, slave) = test_pty(false);
    let b = ctx.bundle_str();
    let (child, out_file, err_file, what) =
        session_job(&ctx, &["run", "--bundle", &b, &ctx.id("c")], &slave);
    let ready = wait_until(CALL_TIMEOUT, || {
        std::fs::read_to_string(&out_file).is_ok_and(|o| o.contains("ready"))
    });
    // ^C (VINTR) into the terminal, as a user would type it.
    nix::unistd::write(&master, b"\x03").expect("write ^C");
    let code = exit_code(wait_child(child, CALL_TIMEOUT));
    let out = std::fs::read_to_string(&out_file).unwrap_or_default();
    let err = std::fs::read_to_string(&err_file).unwrap_or_default();
    assert!(ready, "{what}: the container never started: {out}{err}");
    assert_eq!(
        (code, out.as_str()),
        (7, "ready\ngot-INT\n"),
        "{what}: {err}"
    );
}
