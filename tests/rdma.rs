//! `linux.resources.rdma` on this host: its checks before anything exists (device names,
//! values), and the refusal where the host has no rdma controller (this development host's
//! kernel is built without it). That the limits reach `rdma.max` of a real RDMA device is
//! proved in Debian's kernel with `rdma_rxe` (tests/vm/rdma, run by scripts/vm-suite).

mod support;

use serde_json::{json, Value};
use support::*;

/// Whether `moat features` claims the rdma controller on this host.
fn features_claim_rdma(ctx: &Ctx) -> bool {
    let out = ctx.moat(&["features"]).ok();
    let f: Value = serde_json::from_str(&out.stdout).expect("features is JSON");
    f["linux"]["cgroup"]["rdma"]
        .as_bool()
        .expect("cgroup.rdma is a bool")
}

/// Whether the kernel has the rdma controller and a mounted hierarchy offers it: the v1
/// mount of it, or a cgroup2 root's `cgroup.controllers`.
fn host_offers_rdma() -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts.lines().any(|l| {
        let Some((pre, post)) = l.split_once(" - ") else {
            return false;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.get(3) != Some(&"/") || post.len() < 3 {
            return false;
        }
        match post[0] {
            "cgroup" => post[2].split(',').any(|o| o == "rdma"),
            "cgroup2" => std::fs::read_to_string(format!("{}/cgroup.controllers", pre[4]))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "rdma")),
            _ => false,
        }
    })
}

/// Where no hierarchy offers the rdma controller, an rdma limit is refused under both
/// policies with one line naming the field and the host's reason, and the create leaves
/// nothing (no state dir, no cgroup in any hierarchy, no process); `moat features` says
/// `cgroup.rdma` false. (Where the host has the controller, the VM suite tries the limits.)
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_rdma_limit_is_refused_where_the_host_has_no_rdma_controller() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rdma-none");
    let offered = host_offers_rdma();
    assert_eq!(
        features_claim_rdma(&ctx),
        offered,
        "features' cgroup.rdma against the host's hierarchies"
    );
    if offered {
        missing("this host has the rdma controller: the refusal is not tried here (tests/vm/rdma proves the limits)");
        return;
    }
    let reason = match std::fs::read_to_string("/proc/cgroups")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().next() == Some("rdma"))
    {
        false => "this kernel has no rdma controller",
        true => "",
    };
    ctx.set(
        "/linux/resources/rdma",
        json!({"mlx5_0": {"hcaHandles": 3, "hcaObjects": 1000}}),
    )
    .sh("true");
    for restricted in [false, true] {
        if restricted {
            ctx.restricted();
        }
        for verb in ["create", "run"] {
            let id = ctx.id(&format!("{verb}-{restricted}"));
            let b = ctx.bundle_str();
            let out = ctx.moat(&[verb, "--bundle", &b, &id]).fails();
            let lines = out.stderr_lines();
            assert_eq!(lines.len(), 1, "one error line: {}", out.stderr);
            assert!(
                lines[0].contains(
                    "linux.resources.rdma: cannot use the rdma controller at /sys/fs/cgroup: "
                ) && lines[0].contains(reason),
                "{verb} (restricted={restricted}): {}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        }
    }
}

/// Device names that are not one `rdma.max` token and values the kernel would not take
/// (negative, above its `int`, not a number, an unknown key) are refused before anything
/// exists, naming the field, under both policies; whether the host has the controller
/// does not matter (the shape is checked first).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bad_rdma_names_and_values_are_refused_before_anything_exists() {
    if !require_root() {
        return;
    }
    let cases: [(Value, &str); 9] = [
        (
            json!({"": {"hcaHandles": 1}}),
            r#"linux.resources.rdma[""]: not an RDMA device name"#,
        ),
        (
            json!({"mlx5 0": {"hcaHandles": 1}}),
            r#"linux.resources.rdma["mlx5 0"]: not an RDMA device name"#,
        ),
        // A second line smuggled into rdma.max through the name.
        (
            json!({"rxe0 hca_handle=max\nrxe1": {}}),
            "not an RDMA device name",
        ),
        (json!({"../../pids.max": {}}), "not an RDMA device name"),
        (json!({"d".repeat(64): {}}), "not an RDMA device name"),
        (
            json!({"rxe0": {"hcaHandles": -1}}),
            r#"linux.resources.rdma["rxe0"].hcaHandles: -1 is out of range"#,
        ),
        (
            json!({"rxe0": {"hcaObjects": 2147483648u64}}),
            r#"linux.resources.rdma["rxe0"].hcaObjects: 2147483648 is out of range"#,
        ),
        (
            json!({"rxe0": {"hcaHandles": "max"}}),
            r#"linux.resources.rdma["rxe0"]: invalid type: string"#,
        ),
        (
            json!({"rxe0": {"hcaHandle": 1}}),
            r#"linux.resources.rdma["rxe0"]: unknown field `hcaHandle`"#,
        ),
    ];
    let mut ctx = Ctx::new("rdma-bad");
    ctx.sh("true");
    for restricted in [false, true] {
        if restricted {
            ctx.restricted();
        }
        for (i, (rdma, want)) in cases.iter().enumerate() {
            ctx.set("/linux/resources/rdma", rdma.clone());
            let id = ctx.id(&format!("b{i}-{restricted}"));
            let b = ctx.bundle_str();
            let out = ctx.moat(&["run", "--bundle", &b, &id]).fails();
            let lines = out.stderr_lines();
            assert!(
                lines.len() == 1 && lines[0].contains(want),
                "{rdma} (restricted={restricted}): want {want:?} in one line: {}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        }
    }
}
