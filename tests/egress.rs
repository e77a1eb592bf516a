//! Egress policy: `moat.egress`, `[egress]`, `moat update --egress`, the DNS
//! forwarder, enforced per container on its cgroup. Every container runs in a network
//! namespace of a private world (tests/support/world.rs, scripts/lib/networld): each
//! "refused" target is a live server of that world, so a refusal is the policy's and not a
//! missing server, and the world's guards drop anything addressed elsewhere.
//!
//! `baseline_*` prove the world: runc, and moat without a list under OPEN, reach every
//! server (the metadata imitation too). Every other test fails when the policy it checks
//! is not enforced: a refused target that answers fails it, and so does a refusal that
//! takes 100 ms or more (measured inside the container by netprobe) or comes as silence.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::world::{self, *};
use support::*;

/// What a refusal may look like: an immediate error from connect/sendmsg.
const REFUSALS: &[&str] = &["EPERM", "EACCES", "ECONNREFUSED"];

struct Env {
    world: World,
    probe: &'static Path,
}

fn env() -> Option<Env> {
    require_root();
    let probe = netprobe()?;
    let world = World::new()?;
    Some(Env { world, probe })
}

/// A context whose container joins `netns`, running moat with the config `toml`
/// (RESTRICTED unless it says otherwise).
fn ctx_in(env: &Env, tag: &str, netns: &Path, toml: &str) -> Ctx {
    let mut ctx = Ctx::new(tag);
    world::join(&mut ctx, &env.world, netns, env.probe);
    let cfg = ctx.dir.join("moat-config.toml");
    fs::write(&cfg, toml).expect("write moat config");
    ctx.use_config(&cfg);
    ctx
}

fn egress(ctx: &mut Ctx, list: &str) {
    ctx.set("/annotations/moat.egress", json!(list));
}

#[track_caller]
fn assert_reached(p: &Probe, addr: &str, port: u16) {
    assert!(p.ok, "should be reachable: {}", p.line);
    assert!(
        p.answer.starts_with(&format!("echo {addr}:{port} ")),
        "answered by the wrong server: {}",
        p.line
    );
}

#[track_caller]
fn assert_refused(p: &Probe) {
    assert!(
        !p.ok,
        "should be refused, but the world's server answered: {}",
        p.line
    );
    assert!(
        REFUSALS.contains(&p.err.as_str()),
        "refused by silence or an unexpected error, not an immediate refusal: {}",
        p.line
    );
    assert!(p.ms < 100.0, "refusal took {} ms (≥ 100): {}", p.ms, p.line);
}

/// Runs the probes in a fresh container (create, start, wait, delete) and parses them.
#[track_caller]
fn run_probes(ctx: &mut Ctx, name: &str, targets: &[(&str, &str, u16)]) -> Vec<Probe> {
    ctx.sh(&probe_script(targets));
    let (out, err) = run_to_end(ctx, name);
    let p = probes(&out);
    assert_eq!(
        p.len(),
        targets.len(),
        "netprobe lines: {out} (stderr: {err})"
    );
    p
}

/// `moat exec ID sh -c SCRIPT` (stdout).
#[track_caller]
fn exec(ctx: &Ctx, c: &Container, script: &str) -> String {
    let o = ctx.moat(&["exec", &c.id, "sh", "-c", script]);
    assert!(o.code == 0 || !o.stdout.is_empty(), "exec: {}", o.stderr);
    o.stdout
}

#[track_caller]
fn exec_probes(ctx: &Ctx, c: &Container, targets: &[(&str, &str, u16)]) -> Vec<Probe> {
    let out = exec(ctx, c, &probe_script(targets));
    let p = probes(&out);
    assert_eq!(p.len(), targets.len(), "netprobe lines: {out}");
    p
}

/// A container that sleeps, created and started.
fn sleeper(ctx: &mut Ctx, name: &str) -> Container {
    ctx.args(&["sleep", "300"]);
    let c = ctx.create_ok(name);
    c.start().ok();
    c
}

/// Every target a baseline must reach: each kind of server of the world.
const EVERYTHING: &[(&str, &str, u16)] = &[
    ("tcp", A, 7000),
    ("tcp", A, 7001),
    ("tcp", B, 7000),
    ("tcp", FAR, 7000),
    ("tcp", METADATA, 80),
    ("tcp", METADATA_ECS, 80),
    ("udp", A, 7000),
    ("udp", B, 7001),
    ("udpc", A, 7001),
    ("tcp", V6_A, 7000),
    ("tcp", V6_B, 7001),
    ("udp", V6_B, 7000),
];

#[track_caller]
fn assert_everything(p: &[Probe]) {
    for (probe, (_, a, port)) in p.iter().zip(EVERYTHING) {
        assert_reached(probe, a, *port);
    }
}

/// The world is sound: runc, in the same world, reaches every server, the fake metadata
/// endpoint included, and the world's DNS answers its names.
#[test]
#[ignore]
fn baseline_runc_reaches_everything() {
    let Some(env) = env() else { return };
    let runc = match Command::new("runc").arg("--version").run_output() {
        Ok(o) if o.status.success() => "runc",
        _ => return missing("egress baseline: runc is not installed"),
    };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "base-runc", &ns, "");
    let mut script = probe_script(EVERYTHING);
    script.push_str("; netprobe dns a.test; netprobe dns b.test");
    ctx.sh(&script);
    ctx.write_config();
    let root = ctx.dir.join("runc-root");
    let id = ctx.id("runc");
    let mut c = Command::new(runc);
    c.arg("--root")
        .arg(&root)
        .args(["run", "--bundle", &ctx.bundle_str(), &id]);
    let o = run_cmd(c, &ctx.io, CALL_TIMEOUT);
    let mut d = Command::new(runc);
    d.arg("--root").arg(&root).args(["delete", "-f", &id]);
    let _ = run_cmd(d, &ctx.io, CALL_TIMEOUT);
    assert_eq!(o.code, 0, "runc run: {} {}", o.stdout, o.stderr);
    assert_everything(&probes(&o.stdout));
    assert!(
        o.stdout
            .contains(&format!("dns a.test NOERROR ttl=1 addrs={A}")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("dns b.test NOERROR ttl=1 addrs={B}")),
        "{}",
        o.stdout
    );
}

/// moat under OPEN with no list: the same reach as runc (metadata included: the block is
/// RESTRICTED's).
#[test]
#[ignore]
fn baseline_moat_open_reaches_everything() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "base-open", &ns, "default_policy = \"open\"\n");
    assert_everything(&run_probes(&mut ctx, "open", EVERYTHING));
}

/// An address+port rule: that pair answers; another port, another address, UDP to an
/// unlisted port (unconnected and connected), IPv6 outside the list: refused at once.
#[test]
#[ignore]
fn address_rules_allow_and_refuse_fast() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "addr", &ns, "");
    egress(
        &mut ctx,
        &format!("tcp/{A}:7000,udp/{A}:7000,[{V6_A}]:7000,udp/198.18.0.0/24:7001"),
    );
    let t = [
        ("tcp", A, 7000),
        ("tcp", A, 7001),
        ("tcp", B, 7000),
        ("udp", A, 7000),
        ("udpc", A, 7000),
        ("udp", B, 7001),
        ("udp", A, 7002),
        ("udpc", FAR, 7001),
        ("tcp", V6_A, 7000),
        ("udp", V6_A, 7000),
        ("tcp", V6_A, 7001),
        ("tcp", V6_B, 7000),
        ("udp", V6_B, 7000),
    ];
    let p = run_probes(&mut ctx, "addr", &t);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
    assert_reached(&p[3], A, 7000);
    assert_reached(&p[4], A, 7000);
    assert_reached(&p[5], B, 7001);
    // udp A:7002: no UDP server there, but the refusal must come before the datagram leaves.
    assert!(
        !p[6].ok && REFUSALS.contains(&p[6].err.as_str()),
        "{}",
        p[6].line
    );
    assert_refused(&p[7]);
    assert_reached(&p[8], V6_A, 7000);
    assert_reached(&p[9], V6_A, 7000);
    assert_refused(&p[10]);
    assert_refused(&p[11]);
    assert_refused(&p[12]);
}

/// Under RESTRICTED with no list, the metadata endpoints (169.254.169.254, 169.254.170.2)
/// are refused while every other address of the world still works.
#[test]
#[ignore]
fn metadata_refused_under_restricted_without_a_list() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "meta", &ns, "");
    let t = [
        ("tcp", METADATA, 80),
        ("tcp", METADATA_ECS, 80),
        ("udp", METADATA, 7000),
        ("tcp", A, 7001),
        ("tcp", FAR, 7000),
        ("udp", B, 7000),
        ("tcp", V6_B, 7002),
    ];
    let p = run_probes(&mut ctx, "meta", &t);
    assert_refused(&p[0]);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
    assert_reached(&p[3], A, 7001);
    assert_reached(&p[4], FAR, 7000);
    assert_reached(&p[5], B, 7000);
    assert_reached(&p[6], V6_B, 7002);
}

/// An allow list naming the metadata address still does not open it (deny_metadata beats
/// allow).
#[test]
#[ignore]
fn metadata_refused_even_when_listed() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "meta-listed", &ns, "");
    egress(&mut ctx, &format!("{METADATA}:80,{A}:7000"));
    let p = run_probes(&mut ctx, "ml", &[("tcp", METADATA, 80), ("tcp", A, 7000)]);
    assert_refused(&p[0]);
    assert_reached(&p[1], A, 7000);
}

/// `none`: loopback only.
#[test]
#[ignore]
fn none_allows_only_loopback() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "none", &ns, "");
    egress(&mut ctx, "none");
    ctx.sh(&format!(
        "nc -l -p 9000 -e /bin/cat & sleep 0.3; netprobe tcp 127.0.0.1 9000; {}",
        probe_script(&[("tcp", A, 7000), ("udp", A, 7000), ("tcp", V6_A, 7000)])
    ));
    let (out, err) = run_to_end(&ctx, "none");
    let p = probes(&out);
    assert_eq!(p.len(), 4, "{out} {err}");
    assert!(p[0].ok && p[0].answer == "probe", "loopback: {}", p[0].line);
    for q in &p[1..] {
        assert_refused(q);
    }
}

#[track_caller]
fn assert_echoed(p: &Probe, addr: &str) {
    assert!(p.ok, "the echo request should be answered: {}", p.line);
    assert_eq!(
        p.answer,
        format!("reply from {addr}"),
        "answered by the wrong host: {}",
        p.line
    );
}

/// An echo request dropped where `sendto` cannot say so: the kernel's IPv6 ping socket
/// ignores the error of the packet it queued (`ping_v6_sendmsg`), so the refusal is
/// silence; the caller checks the packet program's counter to tell the drop is moat's.
#[track_caller]
fn assert_dropped(p: &Probe) {
    assert!(
        !p.ok,
        "should be dropped, but the world answered: {}",
        p.line
    );
    assert_eq!(p.err, "TIMEOUT", "{}", p.line);
}

/// The echo requests the packet program dropped on `c` (`moat events --stats`).
#[track_caller]
fn echo_refusals(ctx: &Ctx, c: &Container) -> u64 {
    let s = ctx.moat(&["events", "--stats", &c.id]);
    assert_eq!(s.code, 0, "events --stats: {}", s.stderr);
    let v: Value = serde_json::from_str(s.stdout.trim()).expect("events --stats json");
    v["data"]["moat"]["egress"]["icmp_echo_refused"]
        .as_u64()
        .unwrap_or_else(|| panic!("no icmp_echo_refused counter: {v}"))
}

/// ICMP echo, sent by `sendto` on an
/// unconnected ping socket, which no connect hook sees: only the packet program stands
/// between it and the world. An address rule naming no protocol allows echo to its block
/// (answered); an address outside the list, or listed for TCP only, and IPv6 outside it,
/// are refused at once with `EPERM` (the packet program's drop; IPv6: silence, counted), and
/// so is a connected ping socket's `connect` (the connect hook); loopback is answered. The
/// init's first probes run before anything else could attach the program. `events --stats`
/// counts the dropped requests, `verify` finds the program, and `update --egress` swaps
/// what it allows.
#[test]
#[ignore]
fn icmp_echo_only_to_listed_addresses() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    allow_ping_sockets(&ns);
    let mut ctx = ctx_in(&env, "icmp", &ns, "");
    egress(&mut ctx, &format!("{A},tcp/{B}:7000,[{V6_A}]"));
    let t = [
        ("icmp", A, 0),
        ("icmp", B, 0),
        ("icmp", FAR, 0),
        ("icmp", METADATA, 0),
        ("icmp", V6_A, 0),
        ("icmp", V6_B, 0),
        ("icmp", "127.0.0.1", 0),
        ("icmp", "::1", 0),
        ("icmpc", A, 0),
        ("icmpc", B, 0),
    ];
    let p = run_probes(&mut ctx, "icmp-init", &t);
    assert_echoed(&p[0], A);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
    assert_refused(&p[3]);
    assert_echoed(&p[4], V6_A);
    assert_dropped(&p[5]);
    assert_echoed(&p[6], "127.0.0.1");
    assert_echoed(&p[7], "::1");
    assert_echoed(&p[8], A);
    assert_refused(&p[9]);

    let c = sleeper(&mut ctx, "icmp");
    let p = exec_probes(
        &ctx,
        &c,
        &[("icmp", B, 0), ("icmp", V6_B, 0), ("icmp", A, 0)],
    );
    assert_refused(&p[0]);
    assert_dropped(&p[1]);
    assert_echoed(&p[2], A);
    assert_eq!(
        echo_refusals(&ctx, &c),
        2,
        "the two echo requests (IPv4 and IPv6) dropped by the packet program"
    );
    let vr = ctx.moat(&["verify", &c.id]);
    assert_eq!(vr.code, 0, "verify: {} {}", vr.stdout, vr.stderr);
    assert!(
        vr.stdout.contains("on 6 hooks"),
        "verify should count the packet program's hook: {}",
        vr.stdout
    );

    let u = ctx.moat(&["update", "--egress", &format!("{B},tcp/{A}:7000"), &c.id]);
    assert_eq!(u.code, 0, "update --egress: {}", u.stderr);
    let p = exec_probes(
        &ctx,
        &c,
        &[("icmp", B, 0), ("icmp", A, 0), ("icmp", V6_A, 0)],
    );
    assert_echoed(&p[0], B);
    assert_refused(&p[1]);
    assert_dropped(&p[2]);
    assert_eq!(echo_refusals(&ctx, &c), 4, "after the update");
    let vr = ctx.moat(&["verify", &c.id]);
    assert_eq!(
        vr.code, 0,
        "verify after update: {} {}",
        vr.stdout, vr.stderr
    );
}

/// The packet program gone from the cgroup (detached with bpftool, as a list put in force
/// before the backstop existed would lack it): `verify` says so and fails; an echo request
/// to an unlisted address then goes out (the connect hooks never see it); `update --egress`
/// puts the program back over the same maps, and `verify` passes again.
#[test]
#[ignore]
fn icmp_backstop_missing_is_found_by_verify_and_restored_by_update() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    allow_ping_sockets(&ns);
    let mut ctx = ctx_in(&env, "icmp-gone", &ns, "");
    egress(&mut ctx, A);
    let c = sleeper(&mut ctx, "icmp-gone");
    let Some(progs) = attached_moat_progs(&c.id) else {
        return;
    };
    let (id, _) = progs
        .iter()
        .find(|(_, n)| n == "moat_eg_icmp")
        .unwrap_or_else(|| panic!("no moat_eg_icmp: {progs:?}"));
    let o = Command::new("bpftool")
        .args(["cgroup", "detach"])
        .arg(v2_cgroup(&c.id))
        .args(["egress", "id", &id.to_string()])
        .run_output()
        .expect("bpftool");
    assert!(
        o.status.success(),
        "bpftool cgroup detach: {}",
        stderr_of(&o)
    );
    let vr = ctx.moat(&["verify", &c.id]);
    assert_ne!(
        vr.code, 0,
        "verify passed without the packet program: {}",
        vr.stdout
    );
    assert!(
        vr.stdout.contains("moat_eg_icmp") || vr.stderr.contains("moat_eg_icmp"),
        "verify should name the missing program: {} {}",
        vr.stdout,
        vr.stderr
    );
    assert_echoed(&exec_probes(&ctx, &c, &[("icmp", B, 0)])[0], B);

    let u = ctx.moat(&["update", "--egress", A, &c.id]);
    assert_eq!(u.code, 0, "update --egress: {}", u.stderr);
    let p = exec_probes(&ctx, &c, &[("icmp", B, 0), ("icmp", A, 0)]);
    assert_refused(&p[0]);
    assert_echoed(&p[1], A);
    assert_eq!(echo_refusals(&ctx, &c), 1, "counted in the same stats map");
    let vr = ctx.moat(&["verify", &c.id]);
    assert_eq!(
        vr.code, 0,
        "verify after update: {} {}",
        vr.stdout, vr.stderr
    );
}

/// `none`: echo requests reach loopback only.
#[test]
#[ignore]
fn icmp_echo_none_allows_only_loopback() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    allow_ping_sockets(&ns);
    let mut ctx = ctx_in(&env, "icmp-none", &ns, "");
    egress(&mut ctx, "none");
    let c = sleeper(&mut ctx, "icmp-none");
    let t = [
        ("icmp", A, 0),
        ("icmp", V6_A, 0),
        ("icmp", DNS, 0),
        ("icmp", "127.0.0.1", 0),
        ("icmp", "::1", 0),
    ];
    let p = exec_probes(&ctx, &c, &t);
    assert_refused(&p[0]);
    assert_dropped(&p[1]);
    assert_refused(&p[2]);
    assert_echoed(&p[3], "127.0.0.1");
    assert_echoed(&p[4], "::1");
    assert_eq!(echo_refusals(&ctx, &c), 3, "A, V6_A and DNS dropped");
}

/// Under OPEN with `CAP_NET_RAW` and a list, an echo request built on a raw socket (no
/// connect or sendmsg hook at all) is dropped too when its address is not listed.
#[test]
#[ignore]
fn icmp_echo_on_a_raw_socket_refused_under_open() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "icmp-raw", &ns, "default_policy = \"open\"\n");
    for set in ["bounding", "effective", "permitted"] {
        ctx.push(
            &format!("/process/capabilities/{set}"),
            json!("CAP_NET_RAW"),
        );
    }
    egress(&mut ctx, &format!("{A},[{V6_A}]"));
    let t = [
        ("icmpraw", A, 0),
        ("icmpraw", B, 0),
        ("icmpraw", V6_A, 0),
        ("icmpraw", V6_B, 0),
    ];
    let p = run_probes(&mut ctx, "icmp-raw", &t);
    if p[0].err.starts_with("socket:") {
        missing(&format!(
            "raw sockets: the container got no CAP_NET_RAW ({})",
            p[0].line
        ));
        return;
    }
    assert_echoed(&p[0], A);
    assert_refused(&p[1]);
    assert_echoed(&p[2], V6_A);
    assert_refused(&p[3]);
}

/// Names through moat's forwarder: an allowed name resolves (and its address then answers),
/// `*.sub.test` covers x.sub.test; another name gets REFUSED and its address stays closed;
/// the container's resolv.conf names a loopback address (the forwarder), and the world's
/// DNS server itself cannot be asked directly.
#[test]
#[ignore]
fn names_allowed_and_refused_through_the_forwarder() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "names", &ns, "");
    egress(&mut ctx, "a.test:7000,*.sub.test:7000");
    ctx.sh(&format!(
        "cat /etc/resolv.conf; netprobe dns a.test; netprobe dns A.TEST.; netprobe dns b.test; \
         netprobe dns x.sub.test; netprobe dns sub.test; netprobe dns a.test a {DNS}; {}",
        probe_script(&[
            ("tcp", A, 7000),
            ("tcp", A, 7001),
            ("tcp", B, 7000),
            ("tcp", SUB, 7000)
        ])
    ));
    let (out, err) = run_to_end(&ctx, "names");
    let ns_line = out
        .lines()
        .find(|l| l.starts_with("nameserver"))
        .unwrap_or_else(|| panic!("no nameserver in the container's resolv.conf: {out} {err}"));
    assert!(
        ns_line
            .split_whitespace()
            .nth(1)
            .is_some_and(|a| a.starts_with("127.") || a == "::1"),
        "resolv.conf should name the forwarder on loopback: {ns_line}"
    );
    let dns: Vec<&str> = out.lines().filter(|l| l.starts_with("dns ")).collect();
    assert_eq!(dns.len(), 6, "{out}");
    assert!(
        dns[0].starts_with("dns a.test NOERROR") && dns[0].ends_with(&format!("addrs={A}")),
        "{}",
        dns[0]
    );
    assert!(
        dns[1].contains("NOERROR") && dns[1].contains(A),
        "case and trailing dot: {}",
        dns[1]
    );
    assert!(dns[2].starts_with("dns b.test REFUSED"), "{}", dns[2]);
    assert!(
        dns[3].contains("NOERROR") && dns[3].contains(SUB),
        "{}",
        dns[3]
    );
    assert!(
        dns[4].starts_with("dns sub.test REFUSED"),
        "*.sub.test is not sub.test: {}",
        dns[4]
    );
    assert!(
        !dns[5].contains("NOERROR"),
        "the world's DNS asked directly: {}",
        dns[5]
    );
    let p = probes(&out);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
    assert_reached(&p[3], SUB, 7000);
    assert!(
        !env.world.dns_log().contains("query[A] b.test"),
        "a refused name reached the world's DNS"
    );
}

/// A name's answer rotates (dnsmasq, TTL 1 s): after the TTL the new address answers.
#[test]
#[ignore]
fn ttl_rotation_reaches_the_new_address() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "rot", &ns, "");
    egress(&mut ctx, "rot.test:7000");
    let c = sleeper(&mut ctx, "rot");
    let before = exec(
        &ctx,
        &c,
        &format!(
            "netprobe dns rot.test; {}",
            probe_script(&[("tcp", ROT_OLD, 7000), ("tcp", SUB, 7000)])
        ),
    );
    assert!(before.contains(&format!("addrs={ROT_OLD}")), "{before}");
    let p = probes(&before);
    assert_reached(&p[0], ROT_OLD, 7000);
    assert_refused(&p[1]);
    env.world.dns("rot.test", &[SUB]);
    std::thread::sleep(Duration::from_millis(2500));
    let after = exec(
        &ctx,
        &c,
        &format!(
            "netprobe dns rot.test; {}",
            probe_script(&[("tcp", SUB, 7000)])
        ),
    );
    assert!(
        after.contains(&format!("addrs={SUB}")),
        "the forwarder kept the old answer: {after}"
    );
    assert_reached(&probes(&after)[0], SUB, 7000);
}

/// `exec`'d processes are bound by the same rules as the init.
#[test]
#[ignore]
fn exec_bound_by_the_same_rules() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "exec", &ns, "");
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "exec");
    let p = exec_probes(
        &ctx,
        &c,
        &[
            ("tcp", A, 7000),
            ("tcp", A, 7001),
            ("udp", B, 7000),
            ("tcp", METADATA, 80),
        ],
    );
    assert_reached(&p[0], A, 7000);
    for q in &p[1..] {
        assert_refused(q);
    }
}

/// Two containers in one network namespace (a pod), each with its own list.
#[test]
#[ignore]
fn pod_containers_keep_their_own_lists() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("pod");
    let mut c1 = ctx_in(&env, "pod1", &ns, "");
    egress(&mut c1, &format!("{A}:7000"));
    let mut c2 = ctx_in(&env, "pod2", &ns, "");
    egress(&mut c2, &format!("{B}:7000"));
    let k1 = sleeper(&mut c1, "one");
    let k2 = sleeper(&mut c2, "two");
    let t = [("tcp", A, 7000), ("tcp", B, 7000)];
    let p1 = exec_probes(&c1, &k1, &t);
    let p2 = exec_probes(&c2, &k2, &t);
    assert_reached(&p1[0], A, 7000);
    assert_refused(&p1[1]);
    assert_refused(&p2[0]);
    assert_reached(&p2[1], B, 7000);
}

/// An interface added to the namespace after create (what Docker's hook does) is policed:
/// the allowed address across it answers, the unlisted port across it is refused.
#[test]
#[ignore]
fn interface_added_after_create_still_policed() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "iface", &ns, "");
    egress(&mut ctx, &format!("tcp/{A}:7000,tcp/{FAR}:7000"));
    let c = sleeper(&mut ctx, "iface");
    let ifname = env.world.link("c", "198.19.0.0/16");
    let route = exec(&ctx, &c, &format!("ip route get {FAR} 2>&1 || true"));
    assert!(
        route.contains(&ifname),
        "198.19/16 should leave by the new {ifname}: {route}"
    );
    let p = exec_probes(
        &ctx,
        &c,
        &[("tcp", FAR, 7000), ("tcp", FAR, 7001), ("udp", FAR, 7000)],
    );
    assert_reached(&p[0], FAR, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
}

/// `moat update --egress` replaces the rules of a running container; a rule outside the
/// config's allow exits 1 naming it (and changes nothing); `--egress ""` returns to the
/// config's default.
#[test]
#[ignore]
fn update_egress_live() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "upd", &ns, "[egress]\nallow = [\"198.18.0.0/16\"]\n");
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "upd");
    let t = [
        ("tcp", A, 7000),
        ("tcp", B, 7000),
        ("tcp", A, 7001),
        ("tcp", FAR, 7000),
    ];
    let p = exec_probes(&ctx, &c, &t);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);

    let u = ctx.moat(&["update", "--egress", &format!("{B}:7000"), &c.id]);
    assert_eq!(u.code, 0, "update --egress: {}", u.stderr);
    let p = exec_probes(&ctx, &c, &t);
    assert_refused(&p[0]);
    assert_reached(&p[1], B, 7000);

    let wide = format!("{FAR}:7000");
    let u = ctx.moat(&["update", "--egress", &wide, &c.id]);
    assert_eq!(
        u.code, 1,
        "a rule outside [egress] allow: {} {}",
        u.stdout, u.stderr
    );
    assert!(
        u.stderr.contains(&wide),
        "the error should name {wide}: {}",
        u.stderr
    );
    let p = exec_probes(&ctx, &c, &t);
    assert_reached(&p[1], B, 7000);
    assert_refused(&p[3]);

    let u = ctx.moat(&["update", "--egress", "", &c.id]);
    assert_eq!(u.code, 0, "update --egress \"\": {}", u.stderr);
    let p = exec_probes(&ctx, &c, &t);
    assert_reached(&p[0], A, 7000);
    assert_reached(&p[2], A, 7001);
    assert_refused(&p[3]);
    let v = ctx.moat(&["verify", &c.id]);
    assert_eq!(v.code, 0, "verify after update: {} {}", v.stdout, v.stderr);
}

/// An annotation that widens what the config allows is refused at create, naming the rule,
/// leaving nothing behind.
#[test]
#[ignore]
fn annotation_widening_is_refused() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(
        &env,
        "widen",
        &ns,
        &format!("[egress]\nallow = [\"{A}:7000\"]\n"),
    );
    let wide = format!("{B}:7000");
    egress(&mut ctx, &format!("{A}:7000,{wide}"));
    let (_c, out) = ctx.create("widen");
    assert_ne!(out.code, 0, "create should refuse the widening rule");
    assert!(
        out.stderr.contains(&wide),
        "the error should name {wide}: {}",
        out.stderr
    );
    ctx.assert_no_trace(&ctx.id("widen"));
}

/// The config's allow alone (no annotation, as under Docker) is enforced.
#[test]
#[ignore]
fn config_allow_alone_is_enforced() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(
        &env,
        "cfg",
        &ns,
        &format!("[egress]\nallow = [\"{A}:7000\"]\n"),
    );
    let p = run_probes(
        &mut ctx,
        "cfg",
        &[("tcp", A, 7000), ("tcp", A, 7001), ("udp", B, 7000)],
    );
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
}

/// The inode of a network namespace file (nsfs).
fn ns_ino(p: &Path) -> u64 {
    fs::metadata(p).expect("stat netns").ino()
}

/// Processes whose network namespace is `ino` and that are outside the container's cgroup
/// `/moat/<id>`: the forwarder (and nothing else the test started).
fn outside_processes_in(ino: u64, id: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    let cg = format!("/moat/{id}");
    for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(m) = fs::metadata(e.path().join("ns/net")) else {
            continue;
        };
        if m.ino() != ino || is_gone(pid) {
            continue;
        }
        let cgs = fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
        if !cgs
            .lines()
            .any(|l| l.ends_with(&cg) || l.contains(&format!("{cg}/")))
        {
            pids.push(pid);
        }
    }
    pids
}

/// The v2 cgroup dir of the container, where the egress programs hang.
fn v2_cgroup(id: &str) -> PathBuf {
    ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
        .iter()
        .map(|h| Path::new(h).join("moat").join(id))
        .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.controllers").exists())
        .unwrap_or_else(|| PathBuf::from("/sys/fs/cgroup/unified/moat").join(id))
}

/// Nothing is left after delete: no trace for the leak auditor, no forwarder, and the
/// cgroup carrying the programs is gone.
#[test]
#[ignore]
fn nothing_left_after_delete() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let ino = ns_ino(&ns);
    let mut ctx = ctx_in(&env, "leak", &ns, "");
    egress(&mut ctx, "a.test:7000");
    let c = sleeper(&mut ctx, "leak");
    let fwd = outside_processes_in(ino, &c.id);
    assert_eq!(
        fwd.len(),
        1,
        "one forwarder in the container's netns, outside its cgroup: {fwd:?}"
    );
    assert!(v2_cgroup(&c.id).exists(), "no v2 cgroup for the programs");
    let progs = attached_moat_progs(&c.id);
    assert_has_echo_prog(progs.as_deref());
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(
        wait_until(Duration::from_secs(5), || is_gone(fwd[0])),
        "forwarder {} outlived delete",
        fwd[0]
    );
    assert!(
        !v2_cgroup(&c.id).exists(),
        "the v2 cgroup (and its programs) outlived delete"
    );
    assert_progs_freed(progs.as_deref(), "delete");
    ctx.assert_no_trace(&c.id);
}

/// The egress programs attached to the container's v2 cgroup (`None` without bpftool,
/// said loudly); at least one, all named `moat_*`.
fn attached_moat_progs(id: &str) -> Option<Vec<(u64, String)>> {
    let progs = bpf_progs_attached(&v2_cgroup(id))?;
    assert!(
        !progs.is_empty() && progs.iter().all(|(_, n)| n.starts_with("moat_")),
        "{id}: egress programs attached: {progs:?}"
    );
    Some(progs)
}

/// A list's programs include the packet program (the ICMP echo backstop), so the leak
/// checks cover it too.
#[track_caller]
fn assert_has_echo_prog(progs: Option<&[(u64, String)]>) {
    if let Some(p) = progs {
        assert!(
            p.iter().any(|(_, n)| n == "moat_eg_icmp"),
            "no moat_eg_icmp among the list's programs: {p:?}"
        );
    }
}

/// Every program of `progs` freed by the kernel: not only detached with the cgroup, but
/// held by nothing (no pin, no fd in a process moat left).
fn assert_progs_freed(progs: Option<&[(u64, String)]>, after: &str) {
    if let Some(p) = progs {
        let left = bpf_progs_left(p, Duration::from_secs(5));
        assert!(left.is_empty(), "BPF programs outlived {after}: {left:?}");
    }
}

/// A create killed mid-way, then `delete --force`: nothing left (tests/killpoints.rs).
#[test]
#[ignore]
fn nothing_left_after_a_killed_create() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let ino = ns_ino(&ns);
    for point in [
        "create:parent:Cgroup",
        "create:parent:Release",
        "create:parent:Ready",
    ] {
        let mut ctx = ctx_in(&env, "kill", &ns, "");
        egress(&mut ctx, "a.test:7000");
        ctx.args(&["sleep", "300"]);
        ctx.write_config();
        let id = ctx.id("k");
        let mut cmd = ctx.cmd();
        cmd.env("MOAT_TEST_KILL_AT", point)
            .args(["create", "--bundle", &ctx.bundle_str(), &id]);
        let o = ctx.run(cmd);
        assert_ne!(o.code, 0, "{point}: the kill point did not fire");
        assert!(
            !o.stderr.contains("moat.egress"),
            "{point}: create refused the policy instead of being killed: {}",
            o.stderr
        );
        // Past row 6 the programs are attached: the kill must not leave them.
        let progs = (point != "create:parent:Cgroup")
            .then(|| attached_moat_progs(&id))
            .flatten();
        assert_has_echo_prog(progs.as_deref());
        let _ = ctx.moat(&["delete", "--force", &id]);
        assert_progs_freed(progs.as_deref(), point);
        assert!(
            wait_until(Duration::from_secs(5), || outside_processes_in(ino, &id)
                .is_empty()),
            "{point}: a forwarder outlived the killed create: {:?}",
            outside_processes_in(ino, &id)
        );
        ctx.assert_no_trace(&id);
        // The same id again, whole: a forwarder comes up (so the kill had one to leave).
        let again = ctx.create_ok("k");
        assert_eq!(
            outside_processes_in(ino, &again.id).len(),
            1,
            "{point}: no forwarder after the kill"
        );
    }
}

/// The forwarder killed: name lookups fail closed (no answer, never the world's), the
/// allowed address learnt before stays the only one, `moat events` reports it, and delete
/// leaves nothing.
#[test]
#[ignore]
fn forwarder_crash_fails_closed_and_is_reported() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let ino = ns_ino(&ns);
    let mut ctx = ctx_in(&env, "crash", &ns, "");
    egress(&mut ctx, "a.test:7000,b.test:7000");
    let c = sleeper(&mut ctx, "crash");
    let fwd = outside_processes_in(ino, &c.id);
    assert_eq!(fwd.len(), 1, "forwarder: {fwd:?}");
    let events = ctx.moat_bg(&["events", &c.id]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        kill_and_wait(fwd[0], Duration::from_secs(5)),
        "forwarder did not die"
    );
    let out = exec(
        &ctx,
        &c,
        &format!(
            "netprobe dns b.test; netprobe dns b.test a {DNS}; {}",
            probe_script(&[("tcp", B, 7000)])
        ),
    );
    let dns: Vec<&str> = out.lines().filter(|l| l.starts_with("dns ")).collect();
    assert_eq!(dns.len(), 2, "{out}");
    assert!(
        !dns[0].contains("NOERROR"),
        "a lookup answered with the forwarder dead: {}",
        dns[0]
    );
    assert!(
        !dns[1].contains("NOERROR"),
        "the world's DNS reached directly: {}",
        dns[1]
    );
    assert_refused(&probes(&out)[0]);
    std::thread::sleep(Duration::from_millis(500));
    let _ = ctx.moat(&["kill", &c.id, "KILL"]);
    let ev = events.wait(Duration::from_secs(10));
    assert!(
        ev.stdout.to_lowercase().contains("forwarder"),
        "moat events did not report the forwarder's death: {} {}",
        ev.stdout,
        ev.stderr
    );
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    ctx.assert_no_trace(&c.id);
}

/// `moat events --stats` counts refused connections; `moat verify` agrees with the kernel.
#[test]
#[ignore]
fn stats_count_refusals_and_verify_passes() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "stats", &ns, "");
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "stats");
    let p = exec_probes(
        &ctx,
        &c,
        &[("tcp", B, 7000), ("tcp", B, 7001), ("udp", B, 7000)],
    );
    for q in &p {
        assert_refused(q);
    }
    let s = ctx.moat(&["events", "--stats", &c.id]);
    assert_eq!(s.code, 0, "events --stats: {}", s.stderr);
    let v: Value = serde_json::from_str(s.stdout.trim()).expect("events --stats json");
    let mut found = Vec::new();
    fn walk(v: &Value, path: String, found: &mut Vec<(String, u64)>) {
        match v {
            Value::Object(m) => m
                .iter()
                .for_each(|(k, x)| walk(x, format!("{path}/{k}"), found)),
            Value::Number(n) if path.contains("egress") => {
                found.push((path, n.as_u64().unwrap_or(0)))
            }
            _ => {}
        }
    }
    walk(&v, String::new(), &mut found);
    let total: u64 = found.iter().map(|(_, n)| n).sum();
    assert!(
        total >= 3,
        "three refusals, counters {found:?} in {}",
        s.stdout
    );
    let vr = ctx.moat(&["verify", &c.id]);
    assert_eq!(vr.code, 0, "verify: {} {}", vr.stdout, vr.stderr);
}

/// An address list (no forwarder): after delete the cgroup carrying the programs is gone
/// and the leak auditor finds nothing; the same after a create killed once the programs
/// are attached (create:parent:Release follows the attach on the cgroupfs driver).
#[test]
#[ignore]
fn nothing_left_of_an_address_list() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "leak-addr", &ns, "");
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "leak");
    assert!(v2_cgroup(&c.id).exists(), "no v2 cgroup for the programs");
    // The programs are there while it runs: the refusal proves it.
    assert_refused(&exec_probes(&ctx, &c, &[("tcp", B, 7000)])[0]);
    let progs = attached_moat_progs(&c.id);
    assert_has_echo_prog(progs.as_deref());
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(
        !v2_cgroup(&c.id).exists(),
        "the v2 cgroup (and its programs) outlived delete"
    );
    assert_progs_freed(progs.as_deref(), "delete");
    ctx.assert_no_trace(&c.id);

    ctx.args(&["sleep", "300"]);
    ctx.write_config();
    let id = ctx.id("k");
    let mut cmd = ctx.cmd();
    cmd.env("MOAT_TEST_KILL_AT", "create:parent:Release").args([
        "create",
        "--bundle",
        &ctx.bundle_str(),
        &id,
    ]);
    let o = ctx.run(cmd);
    assert_ne!(o.code, 0, "the kill point did not fire");
    assert!(
        !o.stderr.contains("egress"),
        "create refused the policy instead of being killed: {}",
        o.stderr
    );
    let progs = attached_moat_progs(&id);
    assert_has_echo_prog(progs.as_deref());
    let _ = ctx.moat(&["delete", "--force", &id]);
    assert!(
        !v2_cgroup(&id).exists(),
        "the v2 cgroup outlived the killed create"
    );
    assert_progs_freed(progs.as_deref(), "delete --force of a killed create");
    ctx.assert_no_trace(&id);
}

// ---- Under gVisor (runsc --network=host in the world's namespace) ----

/// `ctx`'s container handed to runsc; false after a loud skip without runsc.
fn gvisor(ctx: &mut Ctx) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()));
    if !found {
        missing("runsc not installed: gVisor egress tests");
        return false;
    }
    ctx.set("/annotations/moat.runtime", json!("gvisor"));
    true
}

/// The sentry serves the container's sockets with host sockets: born in the cgroup moat
/// attached the programs to, each is bound by the list (allowed reached, other port,
/// address and family refused at once), the metadata endpoints refused though listed, and
/// an `exec`'d process (served by the same sentry) bound alike.
#[test]
#[ignore]
fn gvisor_address_rules_enforced() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut ctx = ctx_in(&env, "gaddr", &ns, "");
    if !gvisor(&mut ctx) {
        return;
    }
    egress(
        &mut ctx,
        &format!("tcp/{A}:7000,udp/{A}:7000,[{V6_A}]:7000,{METADATA}"),
    );
    let t = [
        ("tcp", A, 7000),
        ("tcp", A, 7001),
        ("tcp", B, 7000),
        ("udp", A, 7000),
        ("udp", B, 7001),
        ("tcp", V6_A, 7000),
        ("tcp", V6_B, 7000),
        ("tcp", METADATA, 80),
    ];
    let c = sleeper(&mut ctx, "gaddr");
    let v2 = v2_cgroup(&c.id);
    let sandbox: i32 = fs::read_to_string(v2.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no process in {}", v2.display()));
    assert!(
        proc_cgroups(sandbox)
            .iter()
            .any(|(k, p)| k.is_empty() && *p == format!("/moat/{}", c.id)),
        "the sandbox should be in the programs' cgroup: {:?}",
        proc_cgroups(sandbox)
    );
    let p = exec_probes(&ctx, &c, &t);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
    assert_reached(&p[3], A, 7000);
    assert_refused(&p[4]);
    assert_reached(&p[5], V6_A, 7000);
    assert_refused(&p[6]);
    assert_refused(&p[7]);
    // The refusals counted in the kernel, in runsc's stats line.
    let ev = ctx.moat(&["events", "--stats", &c.id]);
    assert_eq!(ev.code, 0, "events --stats: {}", ev.stderr);
    let v: serde_json::Value = serde_json::from_str(ev.stdout.trim()).expect("one JSON line");
    let n = &v["data"]["moat"]["egress"];
    assert!(
        n["connect4_refused"].as_u64() >= Some(3) && n["connect6_refused"].as_u64() >= Some(1),
        "refusals not counted: {v}"
    );
    let progs = attached_moat_progs_at(&v2);
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
    assert!(!v2.exists(), "the programs' cgroup outlived delete");
    assert_progs_freed(progs.as_deref(), "delete");
    ctx.assert_no_trace(&c.id);
}

/// RESTRICTED with no list under gVisor: the metadata endpoints refused, the rest reached.
#[test]
#[ignore]
fn gvisor_metadata_refused_without_a_list() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut ctx = ctx_in(&env, "gmeta", &ns, "");
    if !gvisor(&mut ctx) {
        return;
    }
    let t = [
        ("tcp", METADATA, 80),
        ("tcp", METADATA_ECS, 80),
        ("tcp", A, 7001),
        ("udp", B, 7001),
    ];
    let p = run_probes(&mut ctx, "gmeta", &t);
    assert_refused(&p[0]);
    assert_refused(&p[1]);
    assert_reached(&p[2], A, 7001);
    assert_reached(&p[3], B, 7001);
}

/// Names under gVisor: the forwarder in the sandbox's namespace answers allowed names and
/// admits their addresses; other names are REFUSED, other addresses refused.
#[test]
#[ignore]
fn gvisor_names_through_the_forwarder() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut ctx = ctx_in(&env, "gnames", &ns, "");
    if !gvisor(&mut ctx) {
        return;
    }
    egress(&mut ctx, "a.test:7000");
    ctx.sh(&format!(
        "netprobe dns a.test; netprobe dns b.test; {}",
        probe_script(&[("tcp", A, 7000), ("tcp", A, 7001), ("tcp", B, 7000)])
    ));
    let (out, err) = run_to_end(&ctx, "gnames");
    let dns: Vec<&str> = out.lines().filter(|l| l.starts_with("dns ")).collect();
    assert_eq!(dns.len(), 2, "{out} {err}");
    assert!(dns[0].starts_with("dns a.test NOERROR"), "{}", dns[0]);
    assert!(dns[1].starts_with("dns b.test REFUSED"), "{}", dns[1]);
    let p = probes(&out);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
}

/// `update --egress` on a running gVisor sandbox swaps its rules; `verify` reads them back.
#[test]
#[ignore]
fn gvisor_update_egress_live() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut ctx = ctx_in(&env, "gupd", &ns, "");
    if !gvisor(&mut ctx) {
        return;
    }
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "gupd");
    let t = [("tcp", A, 7000), ("tcp", B, 7000)];
    let p = exec_probes(&ctx, &c, &t);
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    let u = ctx.moat(&["update", "--egress", &format!("{B}:7000"), &c.id]);
    assert_eq!(u.code, 0, "update --egress: {}", u.stderr);
    let p = exec_probes(&ctx, &c, &t);
    assert_refused(&p[0]);
    assert_reached(&p[1], B, 7000);
    let v = ctx.moat(&["verify", &c.id]);
    assert_eq!(v.code, 0, "verify after update: {} {}", v.stdout, v.stderr);
    assert!(
        v.stdout.contains("egress"),
        "verify should read the sandbox's egress rules back: {}",
        v.stdout
    );
}

/// A list under gVisor where the sandbox's cgroup is not moat's to attach to (the spec's
/// cgroupsPath relative, which OPEN leaves to runsc): refused, naming why, leaving nothing.
#[test]
#[ignore]
fn gvisor_unpoliceable_list_is_refused() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut ctx = ctx_in(&env, "grel", &ns, "default_policy = \"open\"\n");
    if !gvisor(&mut ctx) {
        return;
    }
    egress(&mut ctx, &format!("{A}:7000"));
    ctx.set("/linux/cgroupsPath", json!("relative/grel"));
    let (c, o) = ctx.create("grel");
    assert_ne!(o.code, 0, "created unpoliced: {}", o.stderr);
    assert!(
        o.stderr
            .contains("not enforceable for this gVisor container"),
        "{}",
        o.stderr
    );
    ctx.assert_no_trace(&c.id);
}

fn attached_moat_progs_at(dir: &Path) -> Option<Vec<(u64, String)>> {
    let progs = bpf_progs_attached(dir)?;
    assert!(
        !progs.is_empty() && progs.iter().all(|(_, n)| n.starts_with("moat_")),
        "{}: egress programs attached: {progs:?}",
        dir.display()
    );
    Some(progs)
}

/// A gVisor create killed mid-way (programs attached, runsc not yet run; runsc run; the
/// forwarder up), then `delete --force`: no cgroup, program, forwarder or state is left.
#[test]
#[ignore]
fn gvisor_nothing_left_after_a_killed_create() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let ino = ns_ino(&ns);
    for point in [
        "create:parent:gvisor.egress",
        "create:parent:gvisor.Prepared",
        "create:parent:gvisor.Runsc",
        "create:parent:Dns.cgroup",
    ] {
        let mut ctx = ctx_in(&env, "gkill", &ns, "");
        if !gvisor(&mut ctx) {
            return;
        }
        egress(&mut ctx, "a.test:7000");
        ctx.args(&["sleep", "300"]);
        ctx.write_config();
        let id = ctx.id("k");
        let mut cmd = ctx.cmd();
        cmd.env("MOAT_TEST_KILL_AT", point)
            .args(["create", "--bundle", &ctx.bundle_str(), &id]);
        let o = ctx.run(cmd);
        assert_ne!(o.code, 0, "{point}: the kill point did not fire");
        let progs = attached_moat_progs(&id);
        let _ = ctx.moat(&["delete", "--force", &id]);
        assert_progs_freed(progs.as_deref(), point);
        assert!(
            wait_until(Duration::from_secs(5), || outside_processes_in(ino, &id)
                .is_empty()),
            "{point}: a forwarder outlived the killed create: {:?}",
            outside_processes_in(ino, &id)
        );
        assert!(
            wait_until(Duration::from_secs(5), || ctx.traces(&id).is_empty()),
            "{point}: left behind: {:?}",
            ctx.traces(&id)
        );
        // The same id again, whole: its forwarder comes up, in its own cgroup next to
        // the sandbox's, in every hierarchy.
        let again = ctx.create_ok("k");
        let fwd = outside_processes_in(ino, &again.id);
        assert_eq!(fwd.len(), 1, "{point}: no forwarder after the kill");
        let cgs = fs::read_to_string(format!("/proc/{}/cgroup", fwd[0])).unwrap_or_default();
        assert!(
            cgs.lines()
                .all(|l| l.ends_with(&format!("{}@dns", again.id))),
            "{point}: the forwarder's cgroups: {cgs}"
        );
    }
}

/// A gVisor pod is one sentry: an app container asking for a list other than its pod
/// sandbox's is refused, naming the sandbox's, rather than run under rules it did not ask
/// for; nothing of it is left. One without a list runs under the sandbox's rules, its
/// names through the sandbox's forwarder.
#[test]
#[ignore]
fn gvisor_pod_apps_share_the_sandbox_policy() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("g");
    let mut sb = ctx_in(&env, "gpod", &ns, "");
    if !gvisor(&mut sb) {
        return;
    }
    let sb_list = "a.test:7000".to_string();
    egress(&mut sb, &sb_list);
    let sb_id = sb.id("sb");
    sb.set(
        "/annotations/io.kubernetes.cri.container-type",
        json!("sandbox"),
    );
    sb.set("/annotations/io.kubernetes.cri.sandbox-id", json!(sb_id));
    sb.args(&["sleep", "300"]);
    let sandbox = sb.create_ok("sb");
    assert_eq!(sandbox.id, sb_id);
    sandbox.start().ok();
    let mut app = ctx_in(&env, "gpod", &ns, "");
    assert!(gvisor(&mut app));
    app.root = sb.root.clone();
    egress(&mut app, &format!("{B}:7000"));
    app.set(
        "/annotations/io.kubernetes.cri.container-type",
        json!("container"),
    );
    app.set(
        "/annotations/io.kubernetes.cri.sandbox-id",
        json!(sandbox.id),
    );
    let (c, o) = app.create("app");
    assert_ne!(o.code, 0, "joined with its own list: {}", o.stderr);
    assert!(
        o.stderr.contains("shares its pod sandbox's sentry") && o.stderr.contains(&sb_list),
        "{}",
        o.stderr
    );
    app.assert_no_trace(&c.id);
    // Without a list of its own, an app container runs under the sandbox's rules, its
    // lookups through the sandbox's forwarder.
    let mut app = ctx_in(&env, "gpod", &ns, "");
    assert!(gvisor(&mut app));
    app.root = sb.root.clone();
    app.set(
        "/annotations/io.kubernetes.cri.container-type",
        json!("container"),
    );
    app.set(
        "/annotations/io.kubernetes.cri.sandbox-id",
        json!(sandbox.id),
    );
    app.args(&["sleep", "300"]);
    let c = app.create_ok("app2");
    let st = app.moat(&["start", &c.id]);
    assert_eq!(st.code, 0, "start: {} {}", st.stderr, c.stderr());
    let out = exec(
        &app,
        &c,
        &format!(
            "netprobe dns a.test; netprobe dns b.test; {}",
            probe_script(&[("tcp", A, 7000), ("tcp", A, 7001), ("tcp", B, 7000)])
        ),
    );
    assert!(out.contains("dns a.test NOERROR"), "{out}");
    assert!(out.contains("dns b.test REFUSED"), "{out}");
    let p = probes(&out);
    assert_eq!(p.len(), 3, "{out}");
    assert_reached(&p[0], A, 7000);
    assert_refused(&p[1]);
    assert_refused(&p[2]);
}

/// DNS rebinding: an allowed name that answers an address of the host's own or a private
/// network (10.0.0.0/8 here; a private address, link-local, CGNAT or ULA alike) is not
/// admitted by the forwarder: the connection is refused at once and counted
/// (`rebinding_refused`). An address rule naming that block lets the same answer through.
/// (10.66.0.1 is a destination of no namespace: with the defence removed the packet would
/// go to the world's guards, which drop it, and the probe would time out instead of being
/// refused.)
#[test]
#[ignore]
fn a_name_resolving_into_a_private_network_is_not_admitted() {
    let Some(env) = env() else { return };
    env.world.dns("rebind.test", &["10.66.0.1"]);
    let ns = env.world.netns("c");
    let rebinding = |ctx: &Ctx, c: &Container| -> u64 {
        let s = ctx.moat(&["events", "--stats", &c.id]);
        assert_eq!(s.code, 0, "events --stats: {}", s.stderr);
        let v: Value = serde_json::from_str(s.stdout.trim()).expect("events --stats json");
        v["data"]["moat"]["egress"]["rebinding_refused"]
            .as_u64()
            .unwrap_or_else(|| panic!("no rebinding_refused counter: {v}"))
    };
    let mut ctx = ctx_in(&env, "rebind", &ns, "");
    egress(&mut ctx, "rebind.test:7000");
    let c = sleeper(&mut ctx, "rebind");
    let out = exec(
        &ctx,
        &c,
        &format!(
            "netprobe dns rebind.test; {}",
            probe_script(&[("tcp", "10.66.0.1", 7000)])
        ),
    );
    assert!(out.contains("addrs=10.66.0.1"), "the name resolves: {out}");
    assert_refused(&probes(&out)[0]);
    assert!(rebinding(&ctx, &c) >= 1, "the refusal is counted");
    // The operator names the block: the same answer is admitted (no new refusal).
    let mut named = ctx_in(&env, "rebind-named", &ns, "");
    egress(&mut named, "rebind.test:7000,10.66.0.0/16:9");
    let k = sleeper(&mut named, "named");
    let out = exec(&named, &k, "netprobe dns rebind.test");
    assert!(out.contains("addrs=10.66.0.1"), "{out}");
    assert_eq!(rebinding(&named, &k), 0, "an address rule names the block");
}

/// The refusal ring of `c` (`moat events --stats`: `data.moat.egress.refused`).
#[track_caller]
fn refused_ring(ctx: &Ctx, c: &Container) -> Vec<Value> {
    let s = ctx.moat(&["events", "--stats", &c.id]);
    assert_eq!(s.code, 0, "events --stats: {}", s.stderr);
    let v: Value = serde_json::from_str(s.stdout.trim()).expect("events --stats json");
    v["data"]["moat"]["egress"]["refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no refusal ring in events --stats: {v}"))
        .clone()
}

/// The ring's entry whose fields include every `(key, value)` of `want`.
#[track_caller]
fn ring_entry<'a>(ring: &'a [Value], want: &[(&str, Value)]) -> &'a Value {
    ring.iter()
        .find(|e| want.iter().all(|(k, v)| e[*k] == *v))
        .unwrap_or_else(|| panic!("no refusal {want:?} in the ring: {ring:#?}"))
}

/// Which destinations were refused, not only how many: every kind of refusal a list makes
/// (a connection, a datagram, IPv6, a socket refused at creation, a name, a rebinding
/// answer) is in the ring with what was refused, how often, first and last seen; the
/// `moat events` stream reports a new one as an `egress.refused` event of its own.
#[test]
#[ignore]
fn refused_destinations_are_named() {
    let Some(env) = env() else { return };
    env.world.dns("rebind.test", &["10.66.0.1"]);
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "ring", &ns, "");
    egress(&mut ctx, &format!("{A}:7000,rebind.test:7000"));
    let c = sleeper(&mut ctx, "ring");
    let before = std::time::SystemTime::now();
    let out = exec(
        &ctx,
        &c,
        &format!(
            "{}; netprobe udplite {A} 7000; netprobe dns refused.test; netprobe dns rebind.test",
            probe_script(&[
                ("tcp", B, 7001),
                ("tcp", B, 7001),
                ("udp", B, 7002),
                ("tcp", V6_B, 7003),
            ])
        ),
    );
    for p in probes(&out).iter().take(4) {
        assert_refused(p);
    }
    let ring = refused_ring(&ctx, &c);
    let tcp = ring_entry(
        &ring,
        &[
            ("by", json!("connect")),
            ("address", json!(B)),
            ("port", json!(7001)),
            ("protocol", json!("tcp")),
        ],
    );
    assert_eq!(tcp["count"], json!(2), "two connections: {tcp}");
    ring_entry(
        &ring,
        &[
            ("by", json!("sendmsg")),
            ("address", json!(B)),
            ("port", json!(7002)),
            ("protocol", json!("udp")),
        ],
    );
    ring_entry(
        &ring,
        &[
            ("by", json!("connect")),
            ("address", json!(V6_B)),
            ("port", json!(7003)),
        ],
    );
    ring_entry(
        &ring,
        &[
            ("by", json!("socket")),
            ("protocol", json!("udplite")),
            ("socket", json!("AF_INET SOCK_DGRAM")),
        ],
    );
    ring_entry(
        &ring,
        &[("by", json!("name")), ("name", json!("refused.test"))],
    );
    ring_entry(
        &ring,
        &[
            ("by", json!("rebinding")),
            ("name", json!("rebind.test")),
            ("address", json!("10.66.0.1")),
        ],
    );
    // Times are the refusals' own: within this test, first no later than last.
    let at = |s: &Value| s.as_str().expect("a time").to_string();
    let started = before
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs();
    for e in &ring {
        let (first, last) = (at(&e["first_seen"]), at(&e["last_seen"]));
        assert!(first <= last, "first after last: {e}");
        let secs = rfc3339_secs(&first);
        assert!(
            secs + 2 >= started && secs <= started + 120,
            "first seen {first} not within the test (started at {started}): {e}"
        );
    }
    // The stream: a refusal made while it runs is an event of its own.
    let events = ctx.moat_bg(&["events", "--interval", "1s", &c.id]);
    std::thread::sleep(Duration::from_millis(500));
    assert_refused(&exec_probes(&ctx, &c, &[("tcp", B, 7999)])[0]);
    std::thread::sleep(Duration::from_millis(2500));
    let _ = ctx.moat(&["kill", &c.id, "KILL"]);
    let ev = events.wait(Duration::from_secs(10));
    let line = ev
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "egress.refused" && v["data"]["port"] == json!(7999))
        .unwrap_or_else(|| panic!("no egress.refused event for port 7999: {}", ev.stdout));
    assert_eq!(line["id"], json!(c.id), "{line}");
    assert_eq!(line["data"]["address"], json!(B), "{line}");
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
}

/// The ring is bounded: 300 distinct refused destinations leave at most
/// `egress::RING_ENTRIES` (256) entries, the most recent among them. (The kernel's LRU map
/// evicts in batches: after the flood it holds fewer, 172 here, never more.)
#[test]
#[ignore]
fn the_refusal_ring_is_bounded() {
    let Some(env) = env() else { return };
    let ns = env.world.netns("c");
    let mut ctx = ctx_in(&env, "ringcap", &ns, "");
    egress(&mut ctx, &format!("{A}:7000"));
    let c = sleeper(&mut ctx, "ringcap");
    let script = "i=1; while [ $i -le 300 ]; do netprobe udp 198.18.0.11 $i >/dev/null; \
                  i=$((i+1)); done; echo done";
    assert!(exec(&ctx, &c, script).contains("done"));
    let ring = refused_ring(&ctx, &c);
    assert!(
        (64..=256).contains(&ring.len()),
        "the ring holds {} entries",
        ring.len()
    );
    ring_entry(&ring, &[("address", json!(B)), ("port", json!(300))]);
    let d = ctx.moat(&["delete", "--force", &c.id]);
    assert_eq!(d.code, 0, "{}", d.stderr);
}

/// Seconds since the epoch of an RFC 3339 UTC time (`YYYY-MM-DDTHH:MM:SS…Z`).
fn rfc3339_secs(s: &str) -> u64 {
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().expect("a number");
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (hh, mm, ss) = (n(11..13), n(14..16), n(17..19));
    // Days from civil (the inverse of moat's log::rfc3339).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86400 + hh * 3600 + mm * 60 + ss).expect("after the epoch")
}
