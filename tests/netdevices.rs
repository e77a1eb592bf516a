//! `linux.netDevices` on real containers and the real kernel: a veth end made by the test
//! in the host's network namespace is moved into the container's, renamed, with its
//! global address, MTU and MAC (this kernel has no `dummy` module). The kernel destroys
//! the veth pair with the container's namespace on delete, as it does for runc. Refusals
//! (RESTRICTED's allow-list, the host's uplink, bad names, no network namespace) fail the
//! create with one line naming the entry and leave nothing: no state, the interface still
//! on the host as it was.
//!
//! Every spec that names the host's real uplink puts a missing interface before it (the
//! map is moved in sorted order): should the refusal ever be lost, the move stops at the
//! missing one and the host keeps its network.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// A veth pair in the host's network namespace, with names unique to this test run;
/// deleted when dropped (wherever its ends are by then).
struct Veth {
    a: String,
    b: String,
}

static PAIRS: AtomicUsize = AtomicUsize::new(0);

/// The address the moved end carries (global scope: moved along) and one it does not
/// (host scope: runc carries only global ones).
const GLOBAL: &str = "10.213.77.1/24";
const HOST_SCOPED: &str = "10.213.78.1/32";
const MTU: &str = "1789";
const MAC: &str = "02:00:5e:10:20:30";

impl Veth {
    fn new() -> Veth {
        let n = PAIRS.fetch_add(1, Ordering::Relaxed);
        let tag = format!("mnd{}x{n}", std::process::id());
        let v = Veth {
            a: format!("{tag}a"),
            b: format!("{tag}b"),
        };
        host(&[
            "ip", "link", "add", &v.a, "type", "veth", "peer", "name", &v.b,
        ]);
        host(&["ip", "link", "set", "dev", &v.a, "mtu", MTU, "address", MAC]);
        host(&["ip", "addr", "add", GLOBAL, "dev", &v.a]);
        host(&[
            "ip",
            "addr",
            "add",
            HOST_SCOPED,
            "dev",
            &v.a,
            "scope",
            "host",
        ]);
        host(&["ip", "link", "set", "dev", &v.a, "up"]);
        v
    }

    /// What differs from the moved end on the host, up, with both its addresses.
    fn on_host_as_made(&self, case: &str) -> Vec<String> {
        if !on_host(&self.a) {
            return vec![format!("{case}: {} is gone from the host", self.a)];
        }
        let mut wrong = Vec::new();
        let addrs = host(&["ip", "-o", "addr", "show", "dev", &self.a]);
        for a in [GLOBAL, HOST_SCOPED] {
            if !addrs.contains(a) {
                wrong.push(format!("{case}: {} lost {a}: {addrs}", self.a));
            }
        }
        let link = host(&["ip", "-o", "link", "show", "dev", &self.a]);
        if !link.contains(",UP") && !link.contains("<UP") {
            wrong.push(format!("{case}: {} is no longer up: {link}", self.a));
        }
        wrong
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for end in [&self.a, &self.b] {
            if on_host(end) {
                let mut c = Command::new("ip");
                c.args(["link", "del", "dev", end]);
                let _ = run_host_cmd(c, CALL_TIMEOUT);
            }
        }
    }
}

/// `name` is an interface of the host's (the test's) network namespace.
fn on_host(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

/// The interface of the host's default route (its uplink).
fn uplink() -> Option<String> {
    let out = host(&["ip", "-o", "route", "show", "default"]);
    let mut words = out.split_whitespace();
    words.find(|w| *w == "dev")?;
    words.next().map(str::to_string)
}

/// A config file in the context's directory with `[restricted] net_devices = list`.
fn allow(ctx: &mut Ctx, list: &[&str]) {
    let path = ctx.dir.join("moat.toml");
    std::fs::write(
        &path,
        format!("[restricted]\nnet_devices = {}\n", json!(list)),
    )
    .expect("write config");
    ctx.use_config(path);
}

/// What the container sees of the interface named `n`: MTU, MAC, flags, its addresses
/// and every interface it has.
fn inside_script(n: &str) -> String {
    format!(
        "cat /sys/class/net/{n}/mtu /sys/class/net/{n}/address /sys/class/net/{n}/flags; \
         ip -o addr show dev {n}; echo ifaces: $(ls /sys/class/net)"
    )
}

#[test]
#[ignore = "root: real containers and a veth pair (scripts/test runs it with --include-ignored)"]
fn an_interface_moves_in_renamed_with_its_global_address_and_goes_with_the_namespace() {
    if !require_root() {
        return;
    }
    // Direct (the init cloned into its namespaces), and staged (a time namespace: an
    // intermediate makes the namespaces and forks the init).
    for staged in [false, true] {
        let v = Veth::new();
        let mut ctx = Ctx::new(&format!("nd-move-{staged}"));
        if staged {
            ctx.push("/linux/namespaces", json!({"type": "time"}));
        }
        ctx.set("/linux/netDevices", json!({ &v.a: {"name": "ctr0"} }))
            .sh(&inside_script("ctr0"));
        let c = ctx.create_ok("c");
        // Moved at create, before the container's process runs.
        assert!(!on_host(&v.a), "staged={staged}: {} still on the host", v.a);
        assert!(on_host(&v.b), "staged={staged}: the peer left the host");
        let out = c.start_and_wait();
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() >= 4, "staged={staged}: {out}");
        assert_eq!(lines[0], MTU, "staged={staged}: {out}");
        assert_eq!(lines[1], MAC, "staged={staged}: {out}");
        let flags = u32::from_str_radix(lines[2].trim_start_matches("0x"), 16).expect("flags");
        assert_eq!(
            flags & 1,
            1,
            "staged={staged}: not up inside (IFF_UP): {out}"
        );
        assert!(
            out.contains(&format!("inet {GLOBAL}")),
            "staged={staged}: the global address did not move along: {out}"
        );
        assert!(
            !out.contains(HOST_SCOPED),
            "staged={staged}: a host-scoped address moved along (runc carries only global ones): {out}"
        );
        let ifaces = lines.last().unwrap();
        assert!(
            ifaces.contains("ctr0") && !ifaces.contains(&v.a),
            "staged={staged}: {ifaces}"
        );
        assert_eq!(c.delete().code, 0);
        // The namespace ends with the init; the kernel destroys the veth in it, and its
        // peer with it (runc leaves the same: nothing is moved back).
        assert!(
            wait_until(Duration::from_secs(10), || !on_host(&v.b) && !on_host(&v.a)),
            "staged={staged}: the pair outlived the container's namespace"
        );
        ctx.assert_no_trace(&c.id);
    }
}

#[test]
#[ignore = "root: real containers and a veth pair (scripts/test runs it with --include-ignored)"]
fn restricted_moves_only_what_net_devices_allows() {
    if !require_root() {
        return;
    }
    let v = Veth::new();
    let mut ctx = Ctx::new("nd-allowed");
    // By prefix: the pair's names share one.
    let prefix = format!("{}*", v.a.trim_end_matches('a'));
    allow(&mut ctx, &[&prefix]);
    ctx.set("/linux/netDevices", json!({ &v.a: {"name": "eth1"} }))
        .sh("test -e /sys/class/net/eth1 && echo moved");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out.trim(), "moved");
}

/// A create that must fail with one line holding `want`, leave nothing, and leave the
/// pair's moved end on the host as it was; what went otherwise.
fn refused(ctx: &Ctx, v: &Veth, case: &str, want: &str) -> Vec<String> {
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["create", "--bundle", &b, &id]);
    let guard = ctx.guard(&id);
    let mut wrong = Vec::new();
    let lines = out.stderr_lines();
    if out.code == 0 {
        wrong.push(format!("{case}: created"));
    } else if lines.len() != 1 || !lines[0].contains(want) {
        wrong.push(format!(
            "{case}: want one line with {want:?}, got {:?}",
            out.stderr
        ));
    }
    if out.code != 0 {
        let left = ctx.traces(&id);
        if !left.is_empty() {
            wrong.push(format!("{case}: left {left:?}"));
        }
    }
    // A container made by mistake goes now, and the pair with its namespace.
    drop(guard);
    wrong.extend(v.on_host_as_made(case));
    wrong
}

#[test]
#[ignore = "root: real containers and a veth pair (scripts/test runs it with --include-ignored)"]
fn refused_moves_leave_nothing_and_the_interface_where_it_was() {
    if !require_root() {
        return;
    }
    let v = Veth::new();
    let (a, b) = (v.a.as_str(), v.b.as_str());
    let missing = format!("0mnd{}", std::process::id());
    let uplink = uplink();
    type Setup<'a> = Box<dyn Fn(&mut Ctx) + 'a>;
    let open = |devices: Value| -> Setup<'static> {
        Box::new(move |ctx: &mut Ctx| {
            ctx.set("/linux/netDevices", devices.clone());
        })
    };
    let mut cases: Vec<(&str, Setup<'_>, String)> = vec![
        (
            "RESTRICTED, an interface net_devices does not list",
            Box::new(|ctx: &mut Ctx| {
                ctx.restricted()
                    .set("/linux/netDevices", json!({ a: {"name": "eth1"} }));
            }),
            format!(
                "linux.netDevices[\"{a}\"]: moving the host's interface \"{a}\" into a container \
                 is refused under RESTRICTED (allow with [restricted] net_devices = [\"{a}\"])"
            ),
        ),
        (
            "a '/' in the new name",
            open(json!({ a: {"name": "a/b"} })),
            format!("linux.netDevices[\"{a}\"].name: \"a/b\" contains '/'"),
        ),
        (
            "a new name longer than IFNAMSIZ",
            open(json!({ a: {"name": "0123456789abcdef"} })),
            "longer than 15 bytes".into(),
        ),
        (
            "two interfaces given one name",
            open(json!({ a: {"name": "x0"}, b: {"name": "x0"} })),
            format!("linux.netDevices[\"{b}\"]: would be named \"x0\" in the container"),
        ),
        (
            "renamed to a name the container's namespace has",
            open(json!({ a: {"name": "lo"} })),
            format!(
                "linux.netDevices[\"{a}\"]: the container's network namespace already has an \
                 interface named \"lo\": File exists"
            ),
        ),
        (
            "an interface the host does not have",
            open(json!({ &missing: {} })),
            format!(
                "linux.netDevices[\"{missing}\"]: no such interface in the host's network \
                 namespace"
            ),
        ),
        (
            "no network namespace of the container's own",
            Box::new(|ctx: &mut Ctx| {
                ctx.without_ns("network")
                    .set("/linux/netDevices", json!({ a: {} }));
            }),
            "linux.netDevices: needs a network namespace of the container's own".into(),
        ),
    ];
    match &uplink {
        Some(up) if missing.as_str() < up.as_str() => cases.push((
            "RESTRICTED, the host's uplink (behind an allowed missing one)",
            Box::new(|ctx: &mut Ctx| {
                let up = uplink.as_deref().unwrap();
                allow(ctx, &[&missing, a]);
                ctx.set(
                    "/linux/netDevices",
                    json!({ &missing: {}, up: {"name": "eth9"} }),
                );
            }),
            format!(
                "linux.netDevices[\"{up}\"]: moving the host's interface \"{up}\" into a \
                 container is refused under RESTRICTED"
            ),
        )),
        _ => panic!("no default route, or an uplink {uplink:?} sorting before {missing}"),
    }
    let mut wrong = Vec::new();
    for (i, (case, setup, want)) in cases.iter().enumerate() {
        let mut ctx = Ctx::new(&format!("nd-refused{i}"));
        ctx.sh("true");
        setup(&mut ctx);
        wrong.extend(refused(&ctx, &v, case, want));
    }
    if let Some(up) = &uplink {
        assert!(on_host(up), "the uplink {up} left the host");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
