//! The listening-socket audit (docs/security.md, "Listening sockets"): after creates of a
//! native container, a gVisor one, and one of each with names in an egress list (which
//! start moat's DNS forwarder), every socket that moat, its helpers, runsc or the
//! containers left listening is enumerated from /proc, and connecting to it from an
//! unprivileged host user and from another container (a host-network one) must fail,
//! unless the table in docs/security.md lists it with why it is safe.
//!
//! Swept, not hand-picked: the test is a child subreaper, so every process moat leaves
//! running (the containers' inits, runsc's sandboxes and gofers, moat-dns, moat-dbus, any
//! later helper) ends up below it; the sockets are those these processes hold, read
//! from `/proc/<pid>/net/{unix,tcp,tcp6,udp,udp6}` of each one's network namespace. The
//! table is parsed from docs/security.md, and each of its rows must match a socket found,
//! so the document and the test cannot drift.
//!
//! Not here: the systemd driver (`--systemd-cgroup`), whose units are systemd's children
//! and not this test's; tests/vm/systemd runs the driver.

mod support;

use std::fs;
use std::path::Path;

use support::sockets::*;
use support::*;

/// The address the forwarder's upstream would have: nothing answers there (the names
/// never resolve, the forwarder only has to run).
const RESOLVER: &str = "198.51.100.53";

/// A network namespace the test made (`ip netns`), removed on drop.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("moat-sock-{}-{tag}", std::process::id());
        host(&["ip", "netns", "add", &name]);
        host(&["ip", "-n", &name, "link", "set", "lo", "up"]);
        Netns(name)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = host_status(&["ip", "netns", "del", &self.0]);
    }
}

fn host_status(args: &[&str]) -> i32 {
    let mut cmd = std::process::Command::new(args[0]);
    cmd.args(&args[1..]);
    let out = run_host_cmd(cmd, std::time::Duration::from_secs(30));
    out.code
}

fn runsc_installed() -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()))
        .unwrap_or(false)
}

/// A container of `ctx` running `sleep`, created and started.
fn started(ctx: &Ctx, name: &str) -> Container {
    let c = ctx.create_ok(name);
    c.start().ok();
    c
}

/// A RESTRICTED context whose container joins `ns` with the egress list `list` (names:
/// moat starts its forwarder), `runtime` `native` or `gvisor`.
fn with_names(tag: &str, ns: &Netns, runtime: &str) -> Ctx {
    let mut ctx = Ctx::new(tag);
    ctx.args(&["sleep", "300"]);
    ctx.set(
        "/annotations",
        json!({"moat.egress": "allowed.test", "moat.runtime": runtime}),
    );
    ctx.without_ns("network");
    ctx.push(
        "/linux/namespaces",
        json!({"type": "network", "path": ns.path()}),
    );
    let cfg = ctx.dir.join("moat.toml");
    fs::write(&cfg, format!("[egress]\nresolvers = [\"{RESOLVER}\"]\n")).unwrap();
    ctx.use_config(cfg.into_os_string());
    ctx
}

/// The addresses to try for a socket bound to `addr`: itself, or loopback for a wildcard.
fn targets(addr: &str) -> Vec<String> {
    match addr {
        "0.0.0.0" => vec!["127.0.0.1".into()],
        "::" => vec!["::1".into(), "127.0.0.1".into()],
        a => vec![a.to_string()],
    }
}

/// The sockprobe arguments that try to reach `b`.
fn probes(b: &Bound) -> Vec<Vec<String>> {
    match b {
        Bound::Abstract(n, t) | Bound::Path(n, t) => {
            vec![vec!["unix".into(), t.to_string(), n.clone()]]
        }
        Bound::Tcp(a, p) => targets(a)
            .into_iter()
            .map(|a| vec!["tcp".into(), a, p.to_string()])
            .collect(),
        Bound::Udp(a, p) => targets(a)
            .into_iter()
            .map(|a| vec!["udp".into(), a, p.to_string()])
            .collect(),
    }
}

#[test]
fn globs_and_proc_addresses() {
    assert!(glob("127.*:53", "127.128.3.4:53"));
    assert!(!glob("127.*:53", "10.0.0.1:53"));
    assert!(glob("*/dns.sock", "/run/moat/c/dns.sock"));
    assert!(glob("a", "a") && !glob("a", "ab"));
    assert_eq!(ip_port("0100007F:0035"), Some(("127.0.0.1".into(), 53)));
    assert_eq!(
        ip_port("00000000000000000000000001000000:0035"),
        Some(("::1".into(), 53))
    );
    // The table parses, every row names a kind the sweep reports.
    for r in documented() {
        assert!(
            ["unix-abstract", "unix-path", "tcp", "udp"].contains(&r.kind.as_str()),
            "{r:?}"
        );
        assert!(
            ["container", "host"].contains(&r.namespace.as_str()),
            "{r:?}"
        );
        assert!(!r.why.is_empty(), "{r:?}");
    }
}

#[test]
#[ignore = "root: real containers, network namespaces (scripts/test runs it with --include-ignored)"]
fn every_listening_socket_is_unreachable_or_documented() {
    if !require_root() {
        return;
    }
    let Some(probe) = sockprobe() else {
        return;
    };
    let gvisor = runsc_installed();
    if !gvisor {
        missing("runsc not installed: the listening-socket audit runs without gVisor containers");
    }
    let me = i32::try_from(std::process::id()).unwrap();
    let host_net = netns_of(me).unwrap();

    // What moat leaves behind.
    let mut guards = Vec::new();
    let mut native = Ctx::new("sock-native");
    native.restricted().args(&["sleep", "300"]);
    guards.push(started(&native, "n"));
    let mut gv = Ctx::new("sock-gvisor");
    gv.restricted()
        .args(&["sleep", "300"])
        .set("/annotations", json!({"moat.runtime": "gvisor"}));
    if gvisor {
        guards.push(started(&gv, "g"));
    }
    let ns_native = Netns::new("n");
    let names_native = with_names("sock-names", &ns_native, "native");
    guards.push(started(&names_native, "dn"));
    let ns_gvisor = Netns::new("g");
    let names_gvisor = with_names("sock-gnames", &ns_gvisor, "gvisor");
    if gvisor {
        guards.push(started(&names_gvisor, "dg"));
    }

    // The prober: another container, sharing the host's network (OPEN), with sockprobe.
    let mut prober = Ctx::new("sock-prober");
    prober.args(&["sleep", "300"]).without_ns("network");
    fs::copy(probe, prober.rootfs().join("bin/sockprobe")).unwrap();
    let p = started(&prober, "p");
    let prober_pid = p.pid();

    let pids = descendants(me);
    let mut found = listeners(&pids);
    // A path socket bound through `/proc/self/fd/N/…` (moat-dns does, for state
    // directories longer than a socket address) is known by its file in a state root.
    let files: Vec<_> = [&native, &gv, &names_native, &names_gvisor, &prober]
        .iter()
        .flat_map(|c| socket_files(&c.root))
        .collect();
    let mut resolved = Vec::new();
    for l in &found {
        let Bound::Path(name, typ) = &l.bound else {
            resolved.push(l.clone());
            continue;
        };
        if !name.starts_with("/proc/") {
            resolved.push(l.clone());
            continue;
        }
        let base = Path::new(name).file_name().unwrap();
        let same: Vec<_> = files
            .iter()
            .filter(|f| f.file_name() == Some(base))
            .collect();
        assert!(
            !same.is_empty(),
            "{} (pid {}) listens on {name}, found in no state root",
            l.program,
            l.pid
        );
        for f in same {
            let mut r = l.clone();
            r.bound = Bound::Path(f.to_string_lossy().into_owned(), *typ);
            resolved.push(r);
        }
    }
    resolved.sort_by(|a, b| (&a.program, &a.bound).cmp(&(&b.program, &b.bound)));
    resolved.dedup_by(|a, b| a.pid == b.pid && a.bound == b.bound);
    found = resolved;
    let rows = documented();
    let mut failures = Vec::new();
    let mut matched = vec![false; rows.len()];
    eprintln!(
        "listening sockets of {} processes below the test:",
        pids.len()
    );
    for l in &found {
        let where_ = if l.netns == host_net {
            "host".to_string()
        } else {
            format!("net:[{}]", l.netns)
        };
        let covered = covering(&rows, l, host_net);
        if let Some(r) = covered {
            let i = rows.iter().position(|x| std::ptr::eq(x, r)).unwrap();
            matched[i] = true;
            eprintln!(
                "  {} (pid {}) {} {} in {where_}: documented ({})",
                l.program,
                l.pid,
                l.bound.kind(),
                l.bound.address(),
                r.why
            );
            continue;
        }
        for args in probes(&l.bound) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let nobody = probe_as_nobody(probe, &args);
            let mut exec = vec!["exec", p.id.as_str(), "/bin/sockprobe"];
            exec.extend(&args);
            let inside = prober.moat(&exec).ok().stdout.trim().to_string();
            eprintln!(
                "  {} (pid {}) {} {} in {where_}: as uid 65534 on the host: {nobody}; from \
                 a host-network container: {inside}",
                l.program,
                l.pid,
                l.bound.kind(),
                l.bound.address(),
            );
            for (who, line) in [
                ("an unprivileged host user", &nobody),
                ("a container", &inside),
            ] {
                if reached(line) {
                    failures.push(format!(
                        "{who} reached {} (pid {}) {} {} in {where_}, which docs/security.md \
                         \"Listening sockets\" does not list: {line}",
                        l.program,
                        l.pid,
                        l.bound.kind(),
                        l.bound.address()
                    ));
                }
            }
        }
    }
    assert!(
        pids.contains(&prober_pid),
        "the sweep does not see the containers' processes"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    if gvisor {
        for (r, m) in rows.iter().zip(&matched) {
            assert!(
                m,
                "docs/security.md lists {} {} {} but no such socket was found",
                r.program, r.kind, r.address
            );
        }
    }
    drop(guards);
    drop(p);
}
