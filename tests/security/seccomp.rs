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

use crate::support::*;
use crate::{ctx, install, probe, probe32, use_config_file, Policy};

/// (probe, errnos the filter may return). EPERM is the deny list's answer; ENOSYS the
/// allow-list's default, which is how moat's profile answers calls whose arguments match no
/// allow rule (namespace flags to `clone`, AF_ALG/AF_VSOCK to `socket`, TIOCSTI). Both are
/// the filter's: in the capability-allowed run the kernel itself would permit every call,
/// and it never answers ENOSYS for these. `clone3` must be ENOSYS exactly, so that libc
/// falls back to `clone`. The probe names are those of probe.c.
const EPERM_OR_ENOSYS: &[i32] = &[libc::EPERM, libc::ENOSYS];
const DENIED: [(&str, &[i32]); 21] = [
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
            "default_policy = \"restricted\"\n[restricted]\nallowed_capabilities = {:?}\n",
            POWERFUL
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
    ] {
        let (ret, e) = &got[name];
        assert!(
            ret != "-1" && ret != "killed",
            "control: {name} failed without a filter (ret {ret}, errno {e}): the probe is broken"
        );
    }
    // AF_ALG reaches the kernel (which may lack it) instead of the filter's EPERM.
    assert_ne!(got["socket-af_alg"].1, libc::EPERM);
    assert_eq!(got["ioctl-tiocsti"].1, libc::ENOTTY);
}

/// T11 with an engine profile: the engine sends a permissive filter (default ALLOW, all
/// x86 architectures); RESTRICTED keeps it and stacks the deny floor, which must still deny
/// every class (the allow-list's ENOSYS default is the engine's business: syslog skipped).
#[test]
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
