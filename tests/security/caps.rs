//! T8 (CVE-2022-29162 runc `exec --cap`, CVE-2022-27650 crun, CVE-2025-27612 youki):
//! capability sets after create and after `exec`, `--cap` beyond the container, and a
//! file-capability binary under no_new_privs.

use std::fs;
use std::path::Path;

use crate::support::*;
use crate::{ctx, exec, field, sleeper, Policy};

const SETS: [&str; 5] = ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"];
const NET_RAW: u64 = 1 << 13;
const KILL: u64 = 1 << 5;
const CHOWN: u64 = 1;

fn mask(status: &str, key: &str) -> u64 {
    u64::from_str_radix(&field(status, key), 16).unwrap()
}

/// What an engine might ask for: everything interesting, in every set.
fn greedy_caps() -> Value {
    let all = json!([
        "CAP_SYS_ADMIN",
        "CAP_NET_RAW",
        "CAP_SYS_PTRACE",
        "CAP_DAC_OVERRIDE",
        "CAP_SETUID",
        "CAP_KILL"
    ]);
    json!({"bounding": all, "effective": all, "permitted": all, "inheritable": all, "ambient": all})
}

/// T8 under RESTRICTED: the engine asks for CAP_SYS_ADMIN and friends in every set
/// (inheritable and ambient too) and noNewPrivileges false; the init and every exec'd
/// process — by flags or by a full `--process` spec — end up with all five sets empty and
/// NoNewPrivs 1; `exec --cap CAP_SYS_ADMIN` is refused, naming the capability.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t8_restricted_empties_every_set_after_create_and_exec() {
    if !require_root() {
        return;
    }
    let mut ctx = ctx("t8r", Policy::Restricted);
    ctx.set("/process/capabilities", greedy_caps());
    ctx.set("/process/noNewPrivileges", json!(false));
    let c = sleeper(&mut ctx, "c");
    let init = read(format!("/proc/{}/status", c.pid()));
    let ex = exec(&ctx, &c, &["cat", "/proc/self/status"]).ok().stdout;
    let procjson = ctx.dir.join("process.json");
    let mut p = ctx.config["process"].clone();
    p["args"] = json!(["cat", "/proc/self/status"]);
    p["capabilities"] = greedy_caps();
    p["noNewPrivileges"] = json!(false);
    fs::write(&procjson, p.to_string()).unwrap();
    let viap = exec(&ctx, &c, &["--process", procjson.to_str().unwrap()])
        .ok()
        .stdout;
    for (who, st) in [("init", &init), ("exec", &ex), ("exec -p", &viap)] {
        for k in SETS {
            assert_eq!(mask(st, k), 0, "{who}: {k} not empty:\n{st}");
        }
        assert_eq!(field(st, "NoNewPrivs"), "1", "{who}");
    }
    let out = exec(&ctx, &c, &["--cap", "CAP_SYS_ADMIN", "true"]);
    assert_eq!(out.code, 255, "exec --cap CAP_SYS_ADMIN ran: {out:#?}");
    assert!(out.stderr.contains("CAP_SYS_ADMIN"), "{}", out.stderr);
    c.kill("KILL");
}

/// T8 under OPEN (runc semantics): with a spec bounding set of CHOWN, NET_RAW and KILL,
/// `exec --cap CAP_NET_RAW` gives the process NET_RAW — but never an inheritable set
/// (which would let file capabilities elevate later execs), and ambient only what was asked.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t8_open_exec_cap_gives_the_cap_but_never_inheritable() {
    if !require_root() {
        return;
    }
    let mut ctx = ctx("t8o", Policy::Open);
    ctx.set(
        "/process/capabilities",
        json!({"bounding": ["CAP_CHOWN", "CAP_NET_RAW", "CAP_KILL"],
               "effective": ["CAP_KILL"], "permitted": ["CAP_KILL"]}),
    );
    let c = sleeper(&mut ctx, "c");
    let st = exec(
        &ctx,
        &c,
        &["--cap", "CAP_NET_RAW", "cat", "/proc/self/status"],
    )
    .ok()
    .stdout;
    assert_ne!(mask(&st, "CapEff") & NET_RAW, 0, "--cap did nothing:\n{st}");
    assert_eq!(
        mask(&st, "CapInh"),
        0,
        "inheritable after exec --cap:\n{st}"
    );
    assert_eq!(mask(&st, "CapAmb") & !NET_RAW, 0, "{st}");
    assert_eq!(mask(&st, "CapBnd"), CHOWN | NET_RAW | KILL, "{st}");
    let st = exec(&ctx, &c, &["cat", "/proc/self/status"]).ok().stdout;
    assert_eq!(mask(&st, "CapEff"), KILL, "plain exec:\n{st}");
    assert_eq!(mask(&st, "CapInh"), 0, "{st}");
    c.kill("KILL");
}

/// A copy of busybox in the rootfs with `cap_net_raw+ep` set, or `None` (SKIPPED) when
/// setcap is missing.
fn fcap_busybox(ctx: &Ctx) -> Option<()> {
    let setcap = ["/usr/sbin/setcap", "/sbin/setcap", "/usr/bin/setcap"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(setcap) = setcap else {
        missing("T8 file-capability check needs setcap (Debian: libcap2-bin)");
        return None;
    };
    let dst = ctx.rootfs().join("bin/busybox-fcap");
    // A copy, never the shared hard link: the xattr would follow the inode everywhere.
    fs::copy(ctx.rootfs().join("bin/busybox"), &dst).unwrap();
    host(&[setcap, "cap_net_raw+ep", dst.to_str().unwrap()]);
    Some(())
}

/// `exec -u 1000:1000` of the file-capability busybox printing its /proc/self/status.
fn fcap_status(policy: Policy, nnp: bool) -> Option<Out> {
    let mut ctx = ctx(&format!("t8fcap{}", nnp as u8), policy);
    fcap_busybox(&ctx)?;
    ctx.set(
        "/process/capabilities",
        json!({"bounding": ["CAP_NET_RAW", "CAP_KILL"], "effective": ["CAP_KILL"],
               "permitted": ["CAP_KILL"]}),
    );
    ctx.set("/process/noNewPrivileges", json!(nnp));
    let c = sleeper(&mut ctx, "c");
    let out = exec(
        &ctx,
        &c,
        &[
            "-u",
            "1000:1000",
            "/bin/busybox-fcap",
            "cat",
            "/proc/self/status",
        ],
    );
    c.kill("KILL");
    Some(out)
}

/// T8: a file-capability binary (`cap_net_raw+ep`) run as uid 1000 gains nothing under
/// no_new_privs — under RESTRICTED, and under OPEN with NET_RAW in the bounding set (so
/// NNP is the only barrier). Control: under OPEN without NNP the same exec gains NET_RAW,
/// proving the file capability is real.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t8_file_capability_binary_gains_nothing_under_nnp() {
    if !require_root() {
        return;
    }
    let Some(control) = fcap_status(Policy::Open, false) else {
        return;
    };
    let control = control.ok().stdout;
    assert_ne!(
        mask(&control, "CapEff") & NET_RAW,
        0,
        "control: without NNP the file capability should work; the test proves nothing:\n{control}"
    );
    for (policy, nnp) in [(Policy::Restricted, false), (Policy::Open, true)] {
        let out = fcap_status(policy, nnp).expect("setcap was there a moment ago");
        if out.code != 0 {
            // The kernel refuses to run a "+ep" binary that cannot get its permitted
            // capabilities (they are not in the bounding set): nothing gained either.
            assert!(
                // runc's (Go's) words for an execve refused with EPERM.
                out.stderr.contains("operation not permitted") && out.stdout.is_empty(),
                "{policy:?} nnp={nnp}: {out:#?}"
            );
            continue;
        }
        let st = out.stdout;
        for k in SETS {
            if k == "CapBnd" {
                continue;
            }
            assert_eq!(mask(&st, k), 0, "{policy:?} nnp={nnp}: {k}:\n{st}");
        }
        assert_eq!(field(&st, "NoNewPrivs"), "1", "{policy:?}");
        assert_eq!(field(&st, "Uid"), "1000 1000 1000 1000");
    }
}
