//! `moat verify`: passes on a RESTRICTED container, and catches one whose policy was never
//! applied (the debug-only `MOAT_TEST_SKIP_POLICY=1` records the container as RESTRICTED
//! without restricting it — a stand-in for a regression that silently drops the policy).

use crate::support::*;
use crate::{ctx, sleeper, Policy};

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn verify_passes_on_restricted_and_fails_when_the_policy_was_skipped() {
    if !require_root() {
        return;
    }
    let mut ctx = ctx("verify", Policy::Restricted);
    let c = sleeper(&mut ctx, "good");
    let out = c_verify(&ctx, &c.id);
    assert_eq!(
        out.code, 0,
        "verify failed on a RESTRICTED container: {out:#?}"
    );
    assert!(!out.stdout.contains("FAIL"), "{}", out.stdout);
    assert!(out.stdout.contains("policy restricted"), "{}", out.stdout);
    c.kill("KILL");

    if !cfg!(debug_assertions) {
        eprintln!("SKIPPED: MOAT_TEST_SKIP_POLICY exists only in debug builds");
        return;
    }
    ctx.args(&["sleep", "120"]);
    let id = ctx.id("skipped");
    let mut cmd = ctx.cmd();
    cmd.env("MOAT_TEST_SKIP_POLICY", "1")
        .args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let bad = ctx.guard(&id);
    ctx.run(cmd).ok();
    bad.start();
    let out = c_verify(&ctx, &id);
    assert_eq!(
        out.code, 1,
        "verify passed an unrestricted container: {out:#?}"
    );
    let fails: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("FAIL"))
        .collect();
    assert!(!fails.is_empty(), "{}", out.stdout);
    for check in ["CapEff", "CapBnd", "Seccomp", "denied syscalls"] {
        assert!(
            fails.iter().any(|l| l.contains(check)),
            "no FAIL line for {check}: {}",
            out.stdout
        );
    }
    let json = ctx.moat(&["verify", "--format", "json", &id]);
    assert_eq!(json.code, 1);
    let v: Value = serde_json::from_str(&json.stdout).expect("json");
    assert_eq!(v["ok"], false);
    bad.kill("KILL");
}

fn c_verify(ctx: &Ctx, id: &str) -> Out {
    ctx.moat(&["verify", id])
}
