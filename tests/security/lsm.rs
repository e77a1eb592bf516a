//! LSM state is a host fact (issue 20, item 3): moat probes AppArmor and SELinux on the
//! host before fork and the child follows the probe, never its own view of `/sys`.
//!
//! This host has neither AppArmor nor SELinux, so here the facts say "disabled" and a
//! spec's profile and label are ignored (runc's behaviour), under both policies, with or
//! without `/sys` in the container. The confinement side (a container without `/sys`
//! still confined, `unconfined` replaced, a listed profile that is not loaded refused,
//! `verify` failing on a wrong label) needs a kernel with AppArmor: the VM suite
//! (scripts/vm-suite, tests/vm/moat/run) runs it.

use crate::support::*;
use crate::{ctx, exec, BOTH};

fn host_has_lsm() -> bool {
    std::fs::read_to_string("/sys/kernel/security/lsm").is_ok_and(|l| {
        l.split(',')
            .any(|m| m.trim() == "apparmor" || m.trim() == "selinux")
    }) || std::path::Path::new("/sys/module/apparmor").exists()
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn lsm_fields_are_ignored_on_a_host_without_them() {
    if !require_root() {
        return;
    }
    if host_has_lsm() {
        eprintln!("SKIPPED: this host runs AppArmor or SELinux (the VM suite covers that case)");
        return;
    }
    let check = ctx("lsm-check", crate::Policy::Open).moat(&["check"]).ok();
    assert!(
        check
            .stdout
            .lines()
            .any(|l| l.contains("AppArmor") && l.contains("not available")),
        "{}",
        check.stdout
    );
    for policy in BOTH {
        for sys in [true, false] {
            let mut ctx = ctx(&format!("lsm-{sys}"), policy);
            ctx.set("/process/apparmorProfile", json!("unconfined"));
            ctx.set("/process/selinuxLabel", json!("system_u:system_r:spc_t:s0"));
            if !sys {
                let mounts: Vec<Value> = ctx.config["mounts"]
                    .as_array()
                    .expect("mounts")
                    .iter()
                    .filter(|m| !m["destination"].as_str().unwrap_or("").starts_with("/sys"))
                    .cloned()
                    .collect();
                ctx.set("/mounts", json!(mounts));
            }
            // The policy, given facts that say "no AppArmor", changes neither field.
            let explain = ctx
                .moat(&["policy", "explain", "--bundle", &ctx.bundle_str()])
                .ok();
            assert!(
                !explain.stdout.contains("process.apparmorProfile")
                    && !explain.stdout.contains("process.selinuxLabel"),
                "{policy:?}: {}",
                explain.stdout
            );
            ctx.args(&["sleep", "120"]);
            let c = ctx.create_ok("c");
            c.start();
            let out = exec(&ctx, &c, &["sh", "-c", "echo ran; ls /sys | wc -l"]).ok();
            assert!(
                out.stdout.starts_with("ran"),
                "{policy:?} /sys={sys}: {out:?}"
            );
            if !sys {
                assert_eq!(out.stdout.lines().nth(1), Some("0"), "{out:?}");
            }
            let out = exec(
                &ctx,
                &c,
                &[
                    "--apparmor",
                    "some-profile",
                    "--process-label",
                    "u:r:t:s0",
                    "true",
                ],
            );
            assert_eq!(out.code, 0, "{policy:?}: exec with LSM flags: {out:?}");
            // verify has no LSM line when the host runs none.
            let v = ctx.moat(&["verify", &c.id]);
            assert!(
                !v.stdout.contains("AppArmor") && !v.stdout.contains("SELinux"),
                "{}",
                v.stdout
            );
            if policy == crate::Policy::Restricted {
                assert_eq!(v.code, 0, "{}", v.stdout);
            }
            c.kill("KILL");
        }
    }
}
