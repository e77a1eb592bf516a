//! The admission table swept on real containers: every row of `moat policy table` that
//! carries a probe is tried under RESTRICTED with the most permissive value an engine could
//! send, and its promise checked from inside the container (or, for a refusal, the create
//! refused naming the field and leaving nothing). A row added to the table is swept here
//! without anyone writing its case. Then every filesystem type this kernel knows, mounted
//! through the spec: only the admitted ones reach the container.

mod support;

use std::fs;

use serde_json::{json, Value};
use support::*;

/// The table with its probes, as moat prints it.
fn table() -> Value {
    let ctx = Ctx::new("adm-table");
    let out = ctx.moat(&["policy", "table", "--format", "json"]).ok();
    serde_json::from_str(&out.stdout).expect("policy table --format json")
}

/// Sets the probe's value at the row's path: an element appended for a `[]` path (to the
/// array before the first `[]`), the field set otherwise.
fn apply_probe(ctx: &mut Ctx, path: &str, value: Value) {
    match path.split_once("[]") {
        Some((array, _)) => {
            ctx.push(&format!("/{}", array.replace('.', "/")), value);
        }
        None => {
            ctx.set(&format!("/{}", path.replace('.', "/")), value);
        }
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_probed_row_holds_its_promise_under_restricted() {
    if !require_root() {
        return;
    }
    let t = table();
    let rows = t["fields"].as_array().expect("fields");
    let mut tried = 0;
    let mut failures = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let Some(probe) = row.get("probe") else {
            continue;
        };
        let path = row["path"].as_str().unwrap();
        let value: Value = serde_json::from_str(probe["value"].as_str().unwrap()).unwrap();
        let check = probe["check"].as_str().unwrap();
        let mut ctx = Ctx::new(&format!("adm{i}"));
        ctx.restricted();
        apply_probe(&mut ctx, path, value);
        let id = ctx.id("c");
        let b = ctx.bundle_str();
        tried += 1;
        if check.is_empty() {
            ctx.sh("true");
            let out = ctx.moat(&["run", "--bundle", &b, &id]);
            let field = path.split("[]").next().unwrap();
            if out.code == 0 || !out.stderr.contains(field) {
                failures.push(format!(
                    "{path}: expected a refusal naming {field}, got exit {} and {:?}",
                    out.code, out.stderr
                ));
            }
            let left = ctx.traces(&id);
            if !left.is_empty() {
                failures.push(format!("{path}: the refusal left {left:?}"));
            }
            continue;
        }
        ctx.sh(check);
        let out = ctx.moat(&["run", "--bundle", &b, &id]);
        if out.code != 0 {
            failures.push(format!(
                "{path}: the promise does not hold ({check}): exit {}, stdout {:?}, stderr {:?}",
                out.code, out.stdout, out.stderr
            ));
        }
        let _ = ctx.moat(&["delete", "--force", &id]);
    }
    eprintln!("admission sweep: {tried} rows probed");
    assert!(tried >= 20, "only {tried} rows carry a probe");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every filesystem type this kernel knows (`/proc/filesystems`, `nodev` ones and disk
/// ones alike) asked for as a spec mount: under RESTRICTED only the table's types are
/// mounted (the rest are cut and reported, the container still runs); under OPEN a type
/// outside the list (`ramfs`) is mounted, as runc would.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn only_admitted_filesystem_types_reach_the_container() {
    if !require_root() {
        return;
    }
    let t = table();
    let admitted: Vec<String> = t["mount_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let kernel: Vec<String> = read("/proc/filesystems")
        .lines()
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    let refused: Vec<&String> = kernel.iter().filter(|t| !admitted.contains(t)).collect();
    assert!(
        refused.iter().any(|t| *t == "ramfs"),
        "this kernel has no ramfs: {kernel:?}"
    );
    let mut ctx = Ctx::new("adm-fs");
    ctx.restricted();
    for (i, typ) in refused.iter().enumerate() {
        ctx.push(
            "/mounts",
            json!({"destination": format!("/mnt/t{i}"), "type": typ, "source": "none", "options": []}),
        );
    }
    // What reaches the container: the mount points of /mnt/t*.
    ctx.sh("grep -o ' /mnt/t[0-9]* ' /proc/self/mountinfo || true; echo done");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["run", "--bundle", &b, &id]).ok();
    assert!(out.stdout.contains("done"), "{out:#?}");
    assert!(
        !out.stdout.contains("/mnt/t"),
        "types outside {admitted:?} were mounted: {}",
        out.stdout
    );
    eprintln!(
        "filesystem types tried under RESTRICTED: {} (all cut)",
        refused.len()
    );
    // The control: OPEN mounts ramfs.
    let mut open = Ctx::new("adm-fs-open");
    open.push(
        "/mounts",
        json!({"destination": "/mnt/ram", "type": "ramfs", "source": "none", "options": []}),
    );
    open.sh("grep -c ' /mnt/ram ' /proc/self/mountinfo");
    let id = open.id("c");
    let b = open.bundle_str();
    let out = open.moat(&["run", "--bundle", &b, &id]).ok();
    assert_eq!(out.stdout.trim(), "1", "OPEN mounts ramfs: {out:#?}");
}

/// Keys no field of moat's spec types reads: other platforms' sections, a key of no spec at
/// all. RESTRICTED refuses each naming it and leaves nothing; OPEN runs the container and
/// says in the warning which it ignored.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn keys_nobody_judged_are_refused_under_restricted() {
    if !require_root() {
        return;
    }
    let cases: [(&str, Value); 6] = [
        ("/linux/futureField", json!({"on": true})),
        ("/process/user/username", json!("root")),
        ("/windows", json!({"layerFolders": ["C:\\x"]})),
        ("/vm", json!({"hypervisor": {"path": "/bin/sh"}})),
        ("/freebsd", json!({"jail": {"vnet": "inherit"}})),
        ("/mounts/0/fooBar", json!(1)),
    ];
    for (i, (pointer, value)) in cases.into_iter().enumerate() {
        let key = pointer
            .trim_start_matches('/')
            .replace("/0/", "[0].")
            .replace('/', ".");
        let mut ctx = Ctx::new(&format!("adm-key{i}"));
        ctx.restricted().set(pointer, value.clone()).sh("true");
        let id = ctx.id("c");
        let b = ctx.bundle_str();
        let out = ctx.moat(&["run", "--bundle", &b, &id]).fails();
        assert!(
            out.stderr.starts_with(&format!("moat: {key}: ")),
            "{key}: {}",
            out.stderr
        );
        ctx.assert_no_trace(&id);
        let mut open = Ctx::new(&format!("adm-key{i}-open"));
        open.set(pointer, value).sh("true");
        let id = open.id("c");
        let b = open.bundle_str();
        let log = open.dir.join("run.log");
        let l = log.to_str().unwrap();
        let out = open.moat(&["--log", l, "run", "--bundle", &b, &id]);
        assert_eq!(out.code, 0, "{key} under OPEN: {out:#?}");
        let logged = fs::read_to_string(&log).unwrap_or_default();
        assert!(
            logged.contains(&format!("{key}: ignored")),
            "{key}: the warning names it: {logged}"
        );
        let _ = open.moat(&["delete", "--force", &id]);
    }
}

/// The fields of runtime-spec 1.3's Linux schema that moat does not apply, each with every
/// property the schema gives it: refused under OPEN as under RESTRICTED, naming the field,
/// leaving nothing (never dropped). This host has no resctrl either, so only the refusal
/// can be tried here. (`linux.resources.rdma` is applied where the host has the
/// controller: tests/rdma.rs.)
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn spec_fields_moat_does_not_apply_are_refused_under_both_policies() {
    if !require_root() {
        return;
    }
    let cases: [(&str, Value); 1] = [(
        "/linux/intelRdt",
        json!({"closID": "moat", "l3CacheSchema": "L3:0=f", "memBwSchema": "MB:0=100",
                   "schemata": ["L3:0=f"], "enableMonitoring": true}),
    )];
    for (i, (pointer, value)) in cases.into_iter().enumerate() {
        let key = pointer.trim_start_matches('/').replace('/', ".");
        for restricted in [false, true] {
            let mut ctx = Ctx::new(&format!("adm-na{i}-{restricted}"));
            if restricted {
                ctx.restricted();
            }
            ctx.set(pointer, value.clone()).sh("true");
            let id = ctx.id("c");
            let b = ctx.bundle_str();
            let out = ctx.moat(&["run", "--bundle", &b, &id]).fails();
            assert!(
                out.stderr
                    .contains(&format!("{key}: refused: moat does not")),
                "{key} (restricted={restricted}): {}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        }
    }
}

/// A capability the operator allows that voids a promise in force is refused at create,
/// naming both; the operator's second word (`accept_voided`) lets it through. With the
/// metadata block (every RESTRICTED container's egress policy) in force, CAP_NET_RAW would
/// send raw packets no egress hook judges.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_capability_voiding_the_egress_promise_is_refused_unless_accepted() {
    if !require_root() {
        return;
    }
    for (accept, refused) in [(false, true), (true, false)] {
        let mut ctx = Ctx::new("adm-voids");
        let cfg = ctx.dir.join("moat.toml");
        let mut text = String::from("[restricted]\nallowed_capabilities = [\"CAP_NET_RAW\"]\n");
        if accept {
            text.push_str("accept_voided = [\"CAP_NET_RAW\"]\n");
        }
        std::fs::write(&cfg, text).unwrap();
        ctx.use_config(&cfg);
        let caps = json!(["CAP_NET_RAW"]);
        ctx.set(
            "/process/capabilities",
            json!({"bounding": caps, "effective": caps, "permitted": caps}),
        )
        .sh("grep ^CapEff /proc/self/status");
        let id = ctx.id("c");
        let b = ctx.bundle_str();
        let out = ctx.moat(&["run", "--bundle", &b, &id]);
        if refused {
            let out = out.fails();
            assert!(
                out.stderr
                    .contains("process.capabilities: CAP_NET_RAW voids the egress policy"),
                "{}",
                out.stderr
            );
            ctx.assert_no_trace(&id);
        } else {
            let out = out.ok();
            assert!(
                out.stdout.contains("0000000000002000"),
                "CAP_NET_RAW kept: {}",
                out.stdout
            );
            let _ = ctx.moat(&["delete", "--force", &id]);
        }
    }
}

/// The resources rows again, through `moat update`: each probe's value sent as a
/// `--resources` document to a running RESTRICTED container, then its check run by `exec`
/// (an update the row refuses must fail naming the field and change nothing). Update
/// admits what create would admit.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_probed_resources_row_holds_through_update() {
    if !require_root() {
        return;
    }
    let t = table();
    let mut tried = 0;
    let mut failures = Vec::new();
    for (i, row) in t["fields"].as_array().unwrap().iter().enumerate() {
        let path = row["path"].as_str().unwrap();
        let (Some(probe), Some(field)) = (row.get("probe"), path.strip_prefix("linux.resources."))
        else {
            continue;
        };
        let value: Value = serde_json::from_str(probe["value"].as_str().unwrap()).unwrap();
        let check = probe["check"].as_str().unwrap();
        let mut ctx = Ctx::new(&format!("admupd{i}"));
        ctx.restricted().args(&["sleep", "600"]);
        let c = ctx.create_ok("c");
        c.start().ok();
        let doc = ctx.dir.join("resources.json");
        let mut res = json!({});
        res[field] = value;
        std::fs::write(&doc, res.to_string()).unwrap();
        let out = ctx.moat(&["update", "--resources", doc.to_str().unwrap(), &c.id]);
        tried += 1;
        let refused = row["admission"] == "refused";
        if refused {
            if out.code == 0 || !out.stderr.contains(path) {
                failures.push(format!(
                    "{path}: update expected refused naming it: exit {} {:?}",
                    out.code, out.stderr
                ));
            }
        } else if out.code != 0 {
            failures.push(format!("{path}: update failed: {:?}", out.stderr));
        } else if !check.is_empty() {
            let out = ctx.moat(&["exec", &c.id, "sh", "-c", check]);
            if out.code != 0 {
                failures.push(format!(
                    "{path}: after update the promise does not hold ({check}): {:?}",
                    out.stderr
                ));
            }
        }
    }
    eprintln!("admission sweep through update: {tried} resources rows");
    assert!(tried >= 2, "only {tried} resources rows carry a probe");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
