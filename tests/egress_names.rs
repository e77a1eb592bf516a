//! Egress rules that bind a connection to a name (`tls/NAME:PORT`, `http/NAME:PORT`,
//! docs/configuration.md "Egress"). No runtime of moat enforces the binding yet, so a list
//! holding one must be refused, naming the rule, wherever it comes from (an annotation, the
//! config's `[egress] allow`, `update --egress`), natively and under gVisor: never run as the
//! plain name rule it contains, which would admit every name behind the address
//! (docs/security.md, "Shared addresses"). Needs root: real creates, and the leak auditor
//! checks nothing is left.

mod support;

use std::fs;

use support::*;

fn runsc_installed() -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()))
        .unwrap_or(false)
}

/// The runtimes to sweep: native, and gVisor where runsc is installed (missing is loud, and
/// fails under `MOAT_TEST_STRICT`).
fn runtimes() -> Vec<&'static str> {
    let mut v = vec!["native"];
    if runsc_installed() {
        v.push("gvisor");
    } else {
        missing("runsc not installed: the gVisor half of the name-binding refusal");
    }
    v
}

/// The lists a container may bring, each with the rule its refusal must name.
const LISTS: [(&str, &str); 4] = [
    ("tls/a.test:443", "tls/a.test:443"),
    ("http/a.test:80", "http/a.test:80"),
    ("10.0.0.1,TLS/*.A.test.:443", "tls/*.a.test:443"),
    ("a.test:443,http/b.test:80-8080", "http/b.test:80-8080"),
];

#[track_caller]
fn assert_names_rule(out: &Out, rule: &str) {
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one error line: {out:#?}");
    assert!(
        lines[0].contains(&format!("egress rule {rule}:")) && lines[0].contains("not enforced"),
        "the error names {rule} and why: {out:#?}"
    );
}

/// An annotation's list (RESTRICTED and OPEN) and the config's own `[egress] allow`: create
/// fails with one line naming the bound rule, and leaves nothing (state dir, cgroup, the
/// DNS forwarder's cgroup, a process).
#[test]
#[ignore = "root: real creates, natively and under gVisor"]
fn a_rule_binding_a_name_is_refused_at_create() {
    if !require_root() {
        return;
    }
    for runtime in runtimes() {
        for (policy, config) in [("restricted", ""), ("open", "default_policy = \"open\"\n")] {
            for (i, (list, rule)) in LISTS.iter().enumerate() {
                let mut ctx = Ctx::new(&format!("nb-{runtime}-{policy}-{i}"));
                ctx.args(&["true"]);
                ctx.set(
                    "/annotations",
                    json!({"moat.egress": list, "moat.runtime": runtime}),
                );
                let cfg = ctx.dir.join("moat.toml");
                fs::write(
                    &cfg,
                    format!("{config}[egress]\nresolvers = [\"198.51.100.53\"]\n"),
                )
                .unwrap();
                ctx.use_config(cfg.into_os_string());
                let (c, out) = ctx.create("c");
                let out = out.fails();
                assert_names_rule(&out, rule);
                ctx.assert_no_trace(&c.id);
            }
        }
        // The operator's own list: every RESTRICTED container would get it.
        let mut ctx = Ctx::new(&format!("nb-{runtime}-config"));
        ctx.args(&["true"]);
        ctx.set("/annotations", json!({"moat.runtime": runtime}));
        let cfg = ctx.dir.join("moat.toml");
        fs::write(
            &cfg,
            "[egress]\nallow = [\"a.test:443\", \"tls/a.test:443\"]\nresolvers = [\"198.51.100.53\"]\n",
        )
        .unwrap();
        ctx.use_config(cfg.into_os_string());
        let (c, out) = ctx.create("c");
        assert_names_rule(&out.fails(), "tls/a.test:443");
        ctx.assert_no_trace(&c.id);
    }
}

/// The list the updated container keeps.
const KEPT: &str = "tcp/10.0.0.1:443,a.test:443";

/// A network namespace the test made, its `lo` up: gVisor's sandbox (runsc
/// `--network=host`) gets its egress programs only in a namespace of its own.
fn netns_with_lo(tag: &str) -> NetNs {
    let ns = NetNs::new(&format!("moat-nb-{}-{tag}", std::process::id()));
    host(&["ip", "-n", &ns.0, "link", "set", "lo", "up"]);
    ns
}

/// `update --egress` to a list with a bound rule fails naming it, and the list in force
/// (recorded, and read back from the kernel by `verify`) stays the old one.
#[test]
#[ignore = "root: a real container and its egress programs"]
fn a_rule_binding_a_name_is_refused_by_update() {
    if !require_root() {
        return;
    }
    for runtime in runtimes() {
        let mut ctx = Ctx::new(&format!("nb-up-{runtime}"));
        ctx.args(&["sleep", "300"]);
        // A name in the list: the forwarder runs, so an update to names could take effect
        // (its upstream never answers; the forwarder only has to run).
        ctx.set(
            "/annotations",
            json!({"moat.egress": KEPT, "moat.runtime": runtime}),
        );
        let cfg = ctx.dir.join("moat.toml");
        fs::write(&cfg, "[egress]\nresolvers = [\"198.51.100.53\"]\n").unwrap();
        ctx.use_config(cfg.into_os_string());
        let ns = netns_with_lo(runtime);
        ctx.without_ns("network");
        ctx.push(
            "/linux/namespaces",
            json!({"type": "network", "path": format!("/run/netns/{}", ns.0)}),
        );
        let c = ctx.create_ok("c");
        c.start().ok();
        for (list, rule) in LISTS {
            let out = ctx.moat(&["update", "--egress", list, &c.id]).fails();
            let lines = out.stderr_lines();
            assert_eq!(lines.len(), 1, "one error line: {out:#?}");
            assert!(
                lines[0].contains(&format!("rule {rule} binds connections to a name")),
                "{out:#?}"
            );
            let policy: Value =
                serde_json::from_str(&read(ctx.state_dir(&c.id).join("policy.json"))).unwrap();
            assert_eq!(
                policy["egress"]["allow"],
                json!(KEPT.split(',').collect::<Vec<_>>()),
                "{runtime}: the recorded list after a refused update"
            );
            // The egress row only: the sandbox's other rows are not this test's.
            let v = ctx.moat(&["verify", &c.id]);
            assert!(
                v.stdout
                    .lines()
                    .any(|l| l.starts_with("ok   egress") && l.contains(&format!("only {KEPT} "))),
                "{runtime}: verify reads the old list back from the kernel: {}",
                v.stdout
            );
        }
        ctx.moat(&["delete", "--force", &c.id]).ok();
        ctx.assert_no_trace(&c.id);
    }
}
