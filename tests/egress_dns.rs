//! Egress names through the per-container DNS forwarder (docs/security.md,
//! "Egress: names"), against a private world: a network namespace the test makes, with
//! only `lo` (no link to anything else), addresses 198.51.100.0/24 on it and Debian's
//! `dnsmasq` on 198.51.100.53 answering test names with a 2 s TTL. The container joins that
//! namespace by path; nothing here can reach outside it.
//!
//! A connect to an address of the world with no listener tells allowed from refused
//! without servers: `Connection refused` (the kernel's RST: the policy let it through)
//! against `Operation not permitted` (the egress program refused it).

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

const DNS: &str = "198.51.100.53";
const ALLOWED: &str = "198.51.100.10";
const REFUSED: &str = "198.51.100.11";
const ROT_OLD: &str = "198.51.100.12";
const ROT_NEW: &str = "198.51.100.13";
/// dnsmasq forwards `*.slow.test` here, where nothing listens: an upstream that never
/// answers (the forwarder waits its timeout).
const SILENT: &str = "198.51.100.97";

/// The private world: a network namespace with a DNS server.
struct World {
    ns: String,
    dir: PathBuf,
    dnsmasq: Child,
}

impl World {
    fn new(tag: &str) -> Option<World> {
        for tool in ["ip", "dnsmasq"] {
            if Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .run_status()
                .map(|s| !s.success())
                .unwrap_or(true)
            {
                missing(tool);
                return None;
            }
        }
        let ns = format!("moat-dns-{}-{tag}", std::process::id());
        let dir = tmp_base().join(&ns);
        fs::create_dir_all(&dir).unwrap();
        host(&["ip", "netns", "add", &ns]);
        host(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
        for a in [DNS, ALLOWED, REFUSED, ROT_OLD, ROT_NEW, SILENT] {
            host(&[
                "ip",
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{a}/32"),
                "dev",
                "lo",
            ]);
        }
        fs::write(dir.join("hosts"), format!("{ROT_OLD} rot.test\n")).unwrap();
        let dnsmasq = spawn(
            Command::new("ip")
                .args(["netns", "exec", &ns, "dnsmasq", "--keep-in-foreground"])
                .args([
                    "--no-resolv",
                    "--no-hosts",
                    "--bind-interfaces",
                    "--user=root",
                ])
                .arg(format!("--listen-address={DNS}"))
                .arg(format!("--addn-hosts={}", dir.join("hosts").display()))
                .arg(format!("--pid-file={}", dir.join("dnsmasq.pid").display()))
                .args(["--local-ttl=2", "--neg-ttl=2"])
                .arg(format!("--address=/allowed.test/{ALLOWED}"))
                .arg(format!("--address=/refused.test/{REFUSED}"))
                .arg(format!("--server=/slow.test/{SILENT}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let w = World { ns, dir, dnsmasq };
        let t = Instant::now();
        while !w.dir.join("dnsmasq.pid").exists() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "dnsmasq did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(w)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.ns)
    }

    /// rot.test answers `addr` from now on (dnsmasq rereads its hosts file on SIGHUP).
    fn rotate(&self, addr: &str) {
        fs::write(self.dir.join("hosts"), format!("{addr} rot.test\n")).unwrap();
        let pid = fs::read_to_string(self.dir.join("dnsmasq.pid")).unwrap();
        host(&["kill", "-HUP", pid.trim()]);
    }

    /// The network namespace's inode.
    fn inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(self.path()).unwrap().ino()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Ok(pid) = fs::read_to_string(self.dir.join("dnsmasq.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).run_status();
        }
        kill_child(&mut self.dnsmasq);
        let _ = Command::new("ip")
            .args(["netns", "del", &self.ns])
            .run_status();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Every moat-dns process in the network namespace `inode`, whoever started it.
fn forwarders_in(inode: u64) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let exe = fs::read_link(e.path().join("exe")).unwrap_or_default();
        let net = fs::metadata(e.path().join("ns/net")).map(|m| m.ino());
        if exe.file_name().is_some_and(|n| n == "moat-dns")
            && net.is_ok_and(|i| i == inode)
            && !is_gone(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// A container in the world's namespace with `list`, RESTRICTED, the world's DNS server
/// as `[egress] resolvers`.
fn ctx_in(world: &World, tag: &str, list: &str) -> Ctx {
    ctx_with(world, tag, list, &format!("resolvers = [\"{DNS}\"]\n"))
}

/// [`ctx_in`] with `egress` as the config's `[egress]` table.
fn ctx_with(world: &World, tag: &str, list: &str, egress: &str) -> Ctx {
    let mut ctx = Ctx::new(tag);
    ctx.args(&["sleep", "120"]);
    ctx.set("/annotations", json!({ "moat.egress": list }));
    let ns: Vec<Value> = ctx.config["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            if n["type"] == "network" {
                json!({"type": "network", "path": world.path()})
            } else {
                n.clone()
            }
        })
        .collect();
    ctx.set("/linux/namespaces", Value::Array(ns));
    let cfg = ctx.dir.join("moat.toml");
    fs::write(&cfg, format!("[egress]\n{egress}")).unwrap();
    ctx.use_config(cfg.into_os_string());
    ctx
}

/// `sh -c script` in the container: its stdout and stderr together.
fn sh(ctx: &Ctx, id: &str, script: &str) -> String {
    let out = ctx.moat(&["exec", id, "sh", "-c", &format!("{script} 2>&1")]);
    format!("{}{}", out.stdout, out.stderr)
}

/// How a TCP connect from the container to `addr:80` ends.
fn connect(ctx: &Ctx, id: &str, addr: &str) -> &'static str {
    let out = sh(ctx, id, &format!("nc -w 2 {addr} 80 </dev/null"));
    if out.contains("Connection refused") {
        "reached"
    } else if out.contains("Operation not permitted") {
        "refused"
    } else {
        panic!("connect to {addr}: neither reached nor refused: {out}")
    }
}

fn lookup(ctx: &Ctx, id: &str, name: &str) -> String {
    sh(ctx, id, &format!("nslookup -type=a {name}"))
}

fn forwarder(ctx: &Ctx, id: &str) -> Value {
    let b = fs::read(ctx.state_dir(id).join("dns.json")).expect("dns.json recorded");
    serde_json::from_slice(&b).unwrap()
}

fn status_field(pid: i64, field: &str) -> String {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn allowed_names_resolve_and_connect_others_are_refused_and_answers_rotate() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("names") else {
        return;
    };
    let ctx = ctx_in(&world, "dns-names", "allowed.test:80,rot.test:80");
    let c = ctx.create_ok("n");
    ctx.moat(&["start", &c.id]).ok();
    let f = forwarder(&ctx, &c.id);
    let addr = f["addr"].as_str().unwrap().to_string();
    let pid = f["pid"].as_i64().unwrap();

    // The container's resolver is the forwarder, and only it.
    let resolv = sh(&ctx, &c.id, "cat /etc/resolv.conf");
    assert!(
        resolv.contains(&format!("nameserver {addr}")),
        "resolv.conf: {resolv}"
    );
    assert!(
        !resolv.contains(DNS),
        "resolv.conf names the upstream: {resolv}"
    );

    // Before any lookup, the allowed name's address is not reachable: names are
    // admitted by answers, not resolved once at create.
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "refused");
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    // Only the rule's port.
    let other_port = sh(&ctx, &c.id, &format!("nc -w 2 {ALLOWED} 81 </dev/null"));
    assert!(
        other_port.contains("Operation not permitted"),
        "{other_port}"
    );

    // A name no rule allows: REFUSED, and its address (known to the attacker) refused.
    let r = lookup(&ctx, &c.id, "refused.test");
    assert!(r.contains("REFUSED"), "{r}");
    assert!(!r.contains(REFUSED), "{r}");
    assert_eq!(connect(&ctx, &c.id, REFUSED), "refused");
    // DNS around the forwarder: straight to the upstream, and to another loopback :53.
    let direct = sh(&ctx, &c.id, &format!("nslookup -type=a allowed.test {DNS}"));
    assert!(
        direct.contains("Operation not permitted") && !direct.contains("Address: 198.51.100"),
        "direct DNS to the upstream: {direct}"
    );
    let lo = sh(&ctx, &c.id, "nslookup -type=a allowed.test 127.0.0.1");
    assert!(
        !lo.contains("Address: 198.51.100"),
        "DNS to 127.0.0.1: {lo}"
    );

    // The TTL (2 s, held at least 5 s) ends the old address once the answer changes.
    let old = lookup(&ctx, &c.id, "rot.test");
    assert!(old.contains(&format!("Address: {ROT_OLD}")), "{old}");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "reached");
    world.rotate(ROT_NEW);
    std::thread::sleep(Duration::from_secs(7));
    let new = lookup(&ctx, &c.id, "rot.test");
    assert!(new.contains(&format!("Address: {ROT_NEW}")), "{new}");
    assert_eq!(connect(&ctx, &c.id, ROT_NEW), "reached");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "refused", "expired answer");

    // The forwarder: in the container's network namespace, a mount namespace of its own
    // with nothing in it, on the host otherwise, not in its cgroup, without privileges.
    let init = c.state()["pid"].as_i64().unwrap();
    let ns = |p: i64, n: &str| fs::read_link(format!("/proc/{p}/ns/{n}")).unwrap();
    assert_eq!(ns(pid, "net"), ns(init, "net"));
    assert_ne!(ns(pid, "mnt"), ns(init, "mnt"));
    assert_ne!(ns(pid, "mnt"), fs::read_link("/proc/self/ns/mnt").unwrap());
    let root: Vec<_> = fs::read_dir(format!("/proc/{pid}/root"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(root.is_empty(), "the forwarder's root holds {root:?}");
    let mounts = fs::read_to_string(format!("/proc/{pid}/mounts")).unwrap();
    assert_eq!(mounts.lines().count(), 1, "{mounts}");
    assert!(mounts.starts_with("moat-dns / tmpfs ro,"), "{mounts}");
    for n in ["pid", "user"] {
        assert_eq!(
            ns(pid, n),
            fs::read_link(format!("/proc/self/ns/{n}")).unwrap(),
            "{n}"
        );
    }
    // Its own cgroup, next to the container's, in every hierarchy.
    let cg = cgroups_of(pid);
    assert!(
        cg.iter().all(|p| *p == format!("/moat/{}@dns", c.id)),
        "the forwarder's cgroups: {cg:?}"
    );
    assert_eq!(status_field(pid, "Uid"), "65534\t65534\t65534\t65534");
    assert_eq!(status_field(pid, "CapEff"), "0000000000000000");
    assert_eq!(status_field(pid, "CapPrm"), "0000000000000000");
    assert_eq!(status_field(pid, "NoNewPrivs"), "1");
    assert_eq!(
        status_field(pid, "Seccomp"),
        "2",
        "a seccomp filter of its own"
    );
    assert_eq!(status_field(pid, "Seccomp_filters"), "1");
    let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
    let pss: u64 = rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    eprintln!("moat-dns PSS: {pss} kB");
    if !cfg!(debug_assertions) {
        assert!(pss <= 1024, "forwarder PSS {pss} kB > 1 MiB");
    }
    let stats = ctx.moat(&["events", "--stats", &c.id]).ok();
    let v: Value = serde_json::from_str(stats.stdout.trim()).unwrap();
    assert_eq!(v["data"]["moat"]["dns_forwarder"], "running", "{v}");

    // delete ends it.
    ctx.moat(&["delete", "--force", &c.id]).ok();
    assert!(
        forwarders_in(world.inode()).is_empty(),
        "forwarder left after delete"
    );
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn a_dead_forwarder_fails_closed_and_events_reports_it() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("dead") else {
        return;
    };
    let ctx = ctx_in(&world, "dns-dead", "allowed.test:80");
    let c = ctx.create_ok("d");
    ctx.moat(&["start", &c.id]).ok();
    let ok = lookup(&ctx, &c.id, "allowed.test");
    assert!(ok.contains(&format!("Address: {ALLOWED}")), "{ok}");
    let events = ctx.moat_bg(&["events", "--interval", "1s", &c.id]);
    std::thread::sleep(Duration::from_millis(500));
    let pid = forwarder(&ctx, &c.id)["pid"].as_i64().unwrap();
    host(&["kill", "-KILL", &pid.to_string()]);
    let t = Instant::now();
    while !is_gone(i32::try_from(pid).unwrap()) {
        assert!(t.elapsed() < Duration::from_secs(5), "forwarder not dead");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing else answers: the lookup fails, closed.
    let after = lookup(&ctx, &c.id, "allowed.test");
    assert!(!after.contains("Address: 198.51.100"), "{after}");
    std::thread::sleep(Duration::from_millis(1500));
    let reported = events.stdout_now();
    assert!(
        reported
            .lines()
            .any(|l| l.contains("\"type\":\"error\"") && l.contains("DNS forwarder")),
        "events: {reported}"
    );
    let stats = ctx.moat(&["events", "--stats", &c.id]).ok();
    assert!(
        stats.stdout.contains("\"dns_forwarder\":\"exited\""),
        "{}",
        stats.stdout
    );
    ctx.moat(&["delete", "--force", &c.id]).ok();
    let _ = events.wait(CALL_TIMEOUT);
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn a_killed_create_or_a_delete_leaves_no_forwarder() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("kill") else {
        return;
    };
    let ctx = ctx_in(&world, "dns-kill", "allowed.test:80");
    let b = ctx.bundle_str();
    ctx.write_config();
    // create killed right before and right after the forwarder starts (debug builds).
    if cfg!(debug_assertions) {
        for point in [
            "create:parent:Dns",
            "create:parent:Dns.cgroup",
            "create:parent:Ready",
        ] {
            let id = ctx.id(&point.replace(':', "-").to_lowercase());
            let mut cmd = ctx.cmd();
            cmd.env("MOAT_TEST_KILL_AT", point)
                .args(["create", "--bundle", &b, &id]);
            let out = ctx.run(cmd);
            assert_ne!(out.code, 0, "{point}: create went through");
            ctx.moat(&["delete", "--force", &id]).ok();
            reap();
            let t = Instant::now();
            while !forwarders_in(world.inode()).is_empty() {
                assert!(
                    t.elapsed() < Duration::from_secs(5),
                    "{point}: forwarder left: {:?}",
                    forwarders_in(world.inode())
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            ctx.assert_no_trace(&id);
        }
    }
    // delete without --force, after the init exited by itself.
    let c = ctx.create_ok("k");
    ctx.moat(&["start", &c.id]).ok();
    assert_eq!(forwarders_in(world.inode()).len(), 1);
    ctx.moat(&["kill", &c.id, "KILL"]).ok();
    let t = Instant::now();
    while c.status() != "stopped" {
        assert!(t.elapsed() < Duration::from_secs(10), "init did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    ctx.moat(&["delete", &c.id]).ok();
    let t = Instant::now();
    while !forwarders_in(world.inode()).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "forwarder left after delete"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn update_egress_hands_the_forwarder_the_new_list_and_trie() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("upd") else {
        return;
    };
    let ctx = ctx_in(&world, "dns-upd", "allowed.test:80,rot.test:80");
    let c = ctx.create_ok("u");
    ctx.moat(&["start", &c.id]).ok();
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    let r = lookup(&ctx, &c.id, "rot.test");
    assert!(r.contains(&format!("Address: {ROT_OLD}")), "{r}");
    ctx.moat(&["update", "--egress", "allowed.test:80", &c.id])
        .ok();
    // The live answer of a name the new list keeps is in the new trie, without a lookup;
    // the dropped name's address is gone with the old trie, and its lookups are refused.
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "refused");
    let r = lookup(&ctx, &c.id, "rot.test");
    assert!(r.contains("REFUSED"), "after update: {r}");
    // And it admits into the new trie from then on.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "refused", "expired");
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    assert!(forwarders_in(world.inode()).is_empty());
    ctx.assert_no_trace(&c.id);
}

/// The forwarder's control socket is in the state directory, which under an engine's root
/// can be longer than `sun_path` (108 bytes) alone: containerd's
/// `<Root>/k8s.io/<64 hex digits>`. Create and `update --egress` must still work.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn a_state_directory_longer_than_sun_path_still_gets_its_forwarder() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("long") else {
        return;
    };
    let mut ctx = ctx_in(&world, "dns-long", "allowed.test:80,rot.test:80");
    ctx.root = ctx
        .dir
        .join(format!("state-{}", "r".repeat(48)))
        .join("k8s.io");
    let c = ctx.create_ok(&"0123456789abcdef".repeat(3));
    let sock = ctx.state_dir(&c.id).join("dns.sock");
    assert!(
        sock.as_os_str().len() > 108,
        "the test's state directory is too short to say anything: {}",
        sock.display()
    );
    ctx.moat(&["start", &c.id]).ok();
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    // update reaches the forwarder over that socket.
    ctx.moat(&["update", "--egress", "rot.test:80", &c.id]).ok();
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "refused");
    let r = lookup(&ctx, &c.id, "allowed.test");
    assert!(r.contains("REFUSED"), "after update: {r}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    assert!(forwarders_in(world.inode()).is_empty());
    ctx.assert_no_trace(&c.id);
}

/// `events --stats`' `moat` object.
fn moat_stats(ctx: &Ctx, id: &str) -> Value {
    let stats = ctx.moat(&["events", "--stats", id]).ok();
    let v: Value = serde_json::from_str(stats.stdout.trim()).unwrap();
    v["data"]["moat"].clone()
}

fn rss_kb(pid: i64) -> u64 {
    status_field(pid, "VmRSS")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The container holds its forwarder busy: TCP queries trickled a byte a second (each read
/// comes before a per-read timeout would end it) opened every half second, and lookups
/// whose upstream never answers. Meanwhile another client's lookup is answered, `update
/// --egress` narrows at once (the narrowed list is what holds), and answers expire.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn a_stalling_client_delays_no_other_client_no_update_and_no_expiry() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("stall") else {
        return;
    };
    let ctx = ctx_in(
        &world,
        "dns-stall",
        "allowed.test:80,rot.test:80,*.slow.test:80",
    );
    let c = ctx.create_ok("s");
    ctx.moat(&["start", &c.id]).ok();
    let fwd = forwarder(&ctx, &c.id)["addr"].as_str().unwrap().to_string();
    let r = lookup(&ctx, &c.id, "rot.test");
    assert!(r.contains(&format!("Address: {ROT_OLD}")), "{r}");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "reached");
    // One message gets its deadline however its bytes are spread: a query trickled a byte
    // a second (8 bytes, of a length announcing 30840) is cut after 2 s, not served on.
    let cut = sh(
        &ctx,
        &c.id,
        &format!(
            "s=$(date +%s); (i=0; while [ $i -lt 8 ]; do printf x; sleep 1; i=$((i+1)); done) \
             | nc {fwd} 53; echo took $(( $(date +%s) - s ))"
        ),
    );
    let took: u64 = cut
        .split("took ")
        .nth(1)
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or_else(|| panic!("{cut}"));
    assert!(took < 6, "a trickled query held its connection {took} s");
    let stall = ctx.moat_bg(&[
        "exec",
        &c.id,
        "sh",
        "-c",
        &format!(
            "i=0; while :; do i=$((i+1)); \
             (while :; do printf x; sleep 1; done) | nc {fwd} 53 >/dev/null 2>&1 & \
             nslookup -type=a s$i.slow.test >/dev/null 2>&1 & sleep 0.5; done"
        ),
    ]);
    std::thread::sleep(Duration::from_millis(1500));

    // Another client is answered while they stall (one loop would serve it never).
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    let admitted = Instant::now();

    // update narrows at once: it waits for nothing the container can hold.
    let t = Instant::now();
    let out = ctx.moat(&[
        "update",
        "--egress",
        "allowed.test:80,*.slow.test:80",
        &c.id,
    ]);
    let took = t.elapsed();
    eprintln!("update --egress under a stalling client: {took:?}");
    assert_eq!(out.code, 0, "update: {}", out.stderr);
    assert!(
        !out.stderr.contains("forwarder"),
        "the forwarder did not take the new list: {}",
        out.stderr
    );
    assert!(took < Duration::from_secs(3), "update took {took:?}");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "refused", "narrowed");
    let r = lookup(&ctx, &c.id, "rot.test");
    assert!(r.contains("REFUSED"), "after update: {r}");

    // Answers still expire (2 s TTL, held 5 s) while the container stalls the forwarder.
    std::thread::sleep(Duration::from_secs(7).saturating_sub(admitted.elapsed()));
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "refused", "expired");
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    let _ = stall.wait(CALL_TIMEOUT);
    assert!(forwarders_in(world.inode()).is_empty());
    ctx.assert_no_trace(&c.id);
}

/// Many distinct names under an allowed wildcard (dnsmasq answers any name under
/// allowed.test): the forwarder holds at most `forwarder_names`, counts the rest, and its
/// memory stays put.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn the_forwarder_holds_at_most_its_limits_and_counts_the_rest() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("bound") else {
        return;
    };
    let ctx = ctx_with(
        &world,
        "dns-bound",
        "*.allowed.test:80",
        &format!("resolvers = [\"{DNS}\"]\nforwarder_names = 20\nforwarder_answers = 2\n"),
    );
    let c = ctx.create_ok("b");
    ctx.moat(&["start", &c.id]).ok();
    let pid = forwarder(&ctx, &c.id)["pid"].as_i64().unwrap();
    let m = moat_stats(&ctx, &c.id);
    assert_eq!(
        m["dns_forwarder_limits"],
        json!({"names": 20, "answers": 2, "memory": 64 << 20, "pids": 80}),
        "{m}"
    );
    let v = ctx.moat(&["verify", &c.id]).ok();
    assert!(
        v.stdout.lines().any(
            |l| l.contains("dns forwarder") && l.contains("at most 20 names, 2 addresses each")
        ),
        "verify: {}",
        v.stdout
    );
    let ask = |from: u32, n: u32| {
        let out = sh(
            &ctx,
            &c.id,
            &format!(
                "i={from}; while [ $i -lt {} ]; do nslookup -type=a n$i.allowed.test >/dev/null 2>&1; \
                 i=$((i+1)); done; echo asked",
                from + n
            ),
        );
        assert!(out.contains("asked"), "{out}");
    };
    ask(0, 50);
    let before = rss_kb(pid);
    ask(50, 400);
    let after = rss_kb(pid);
    let m = moat_stats(&ctx, &c.id);
    eprintln!(
        "moat-dns RSS {before} kB after 50 names, {after} kB after 450; {}",
        m["egress"]
    );
    let held = m["egress"]["forwarder_names_held"].as_u64().unwrap();
    assert!(held <= 20, "{held} names held: {m}");
    assert!(
        m["egress"]["forwarder_full_refused"].as_u64().unwrap() > 0,
        "{m}"
    );
    assert!(
        after <= before + 2048,
        "RSS grew from {before} to {after} kB"
    );
    // Still serving: a name lands once the held ones expire.
    std::thread::sleep(Duration::from_secs(6));
    let a = lookup(&ctx, &c.id, "last.allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    assert_eq!(connect(&ctx, &c.id, ALLOWED), "reached");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    ctx.assert_no_trace(&c.id);
}

/// Loopback under a list: a server in the container on another port works; port 53 of any
/// loopback address but the forwarder's, every port of an engine's loopback resolver
/// (Docker's 127.0.0.11 serves on a port of its own) and every port but 53 of the
/// forwarder's address are refused.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn loopback_serves_the_container_but_not_dns_around_the_forwarder() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("loop") else {
        return;
    };
    let ctx = ctx_with(
        &world,
        "dns-loop",
        "allowed.test:80",
        &format!("resolvers = [\"{DNS}\", \"127.0.0.11\"]\n"),
    );
    let c = ctx.create_ok("l");
    ctx.moat(&["start", &c.id]).ok();
    let fwd = forwarder(&ctx, &c.id)["addr"].as_str().unwrap().to_string();
    let served = sh(
        &ctx,
        &c.id,
        "sleep 3 | nc -l -p 8080 & for i in 1 2 3 4 5 6 7 8 9 10; do \
         echo hello | nc -w 1 127.0.0.1 8080 2>/dev/null && break; sleep 0.2; done; wait",
    );
    assert!(served.contains("hello"), "in-container server: {served}");
    for (addr, port) in [
        ("127.0.0.1", 53),
        ("127.0.0.11", 53),
        ("127.0.0.11", 40000),
        (fwd.as_str(), 8080),
    ] {
        let out = sh(&ctx, &c.id, &format!("nc -w 1 {addr} {port} </dev/null"));
        assert!(
            out.contains("Operation not permitted"),
            "{addr}:{port}: {out}"
        );
    }
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    ctx.assert_no_trace(&c.id);
}

/// `tests/support/dnsfake.c`, built statically once per run; `None` after a loud
/// [`missing`] without a compiler.
fn dnsfake() -> Option<PathBuf> {
    static P: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    P.get_or_init(|| static_fixture("dnsfake.c", "moat-dnsfake"))
        .clone()
}

/// The engine's resolver is on loopback (Docker's 127.0.0.11): a container process binds
/// its address and port 53 (free: Docker translates 53 to a port of its own) and answers
/// the forwarder's query with an address of its choosing. The forwarder's upstream sockets
/// are on its own address, which the container's programs let nothing but DNS reach, so
/// the forged answer never arrives and its address is not admitted.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq, gcc -static"]
fn a_container_answering_for_the_upstream_is_not_heard() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("fake") else {
        return;
    };
    let Some(fake) = dnsfake() else {
        return;
    };
    // Port 53 needs CAP_NET_BIND_SERVICE (Docker's containers bind it without: it sets
    // net.ipv4.ip_unprivileged_port_start to 0).
    let mut ctx = ctx_with(
        &world,
        "dns-fake",
        "fake.test:80",
        "resolvers = [\"127.0.0.11\"]\n\
         [restricted]\nallowed_capabilities = [\"CAP_NET_BIND_SERVICE\"]\n",
    );
    let caps = json!(["CAP_NET_BIND_SERVICE"]);
    for set in ["bounding", "effective", "permitted"] {
        ctx.set(&format!("/process/capabilities/{set}"), caps.clone());
    }
    let dst = ctx.rootfs().join("bin/dnsfake");
    fs::copy(&fake, &dst).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let c = ctx.create_ok("f");
    ctx.moat(&["start", &c.id]).ok();
    let out = sh(
        &ctx,
        &c.id,
        &format!(
            "dnsfake 127.0.0.11 {ALLOWED} 5 & sleep 0.3; \
             nslookup -type=a fake.test; nslookup -type=a fake.test; wait"
        ),
    );
    assert!(out.contains("listening"), "dnsfake did not run: {out}");
    assert!(
        !out.contains(&format!("Address: {ALLOWED}")),
        "forged answer relayed: {out}"
    );
    assert_eq!(
        connect(&ctx, &c.id, ALLOWED),
        "refused",
        "forged answer admitted"
    );
    assert!(
        out.contains("send err EPERM"),
        "the forged answer was not refused by the container's programs: {out}"
    );
    ctx.moat(&["delete", "--force", &c.id]).ok();
    let _ = fs::remove_file(&fake);
    ctx.assert_no_trace(&c.id);
}

/// A forwarder that does not take the new list (stopped here; a container cannot stall its
/// control socket, served by a thread that never reads from a client) holds no update
/// back: the narrowed list is in force at once, and the forwarder is stopped, so lookups
/// fail closed instead of going on under the old list.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn update_egress_narrows_without_waiting_for_the_forwarder() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("nowait") else {
        return;
    };
    let ctx = ctx_in(&world, "dns-nowait", "allowed.test:80,rot.test:80");
    let c = ctx.create_ok("w");
    ctx.moat(&["start", &c.id]).ok();
    let r = lookup(&ctx, &c.id, "rot.test");
    assert!(r.contains(&format!("Address: {ROT_OLD}")), "{r}");
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "reached");
    let pid = forwarder(&ctx, &c.id)["pid"].as_i64().unwrap();
    host(&["kill", "-STOP", &pid.to_string()]);
    let t = Instant::now();
    let out = ctx.moat(&["update", "--egress", "allowed.test:80", &c.id]);
    eprintln!(
        "update --egress with a stopped forwarder: {:?}",
        t.elapsed()
    );
    assert_eq!(out.code, 0, "update: {}", out.stderr);
    assert!(
        out.stderr.contains("the new egress list is in force")
            && out.stderr.contains("forwarder was stopped"),
        "{}",
        out.stderr
    );
    assert_eq!(connect(&ctx, &c.id, ROT_OLD), "refused", "narrowed");
    let t = Instant::now();
    while !is_gone(i32::try_from(pid).unwrap()) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "forwarder not stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(!a.contains("Address: 198.51.100"), "{a}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    assert!(forwarders_in(world.inode()).is_empty());
    ctx.assert_no_trace(&c.id);
}

/// A file of the forwarder's cgroup (`/moat/<id>@dns`, next to the container's): from the
/// controller's v1 hierarchy, or the cgroup v2 one.
fn fwd_cgroup_file(id: &str, controller: &str, v1: &str, v2: &str) -> Option<String> {
    let rel = format!("moat/{id}@dns");
    [
        format!("/sys/fs/cgroup/{controller}/{rel}/{v1}"),
        format!("/sys/fs/cgroup/{rel}/{v2}"),
    ]
    .iter()
    .find_map(|p| fs::read_to_string(p).ok())
    .map(|s| s.trim().to_string())
}

/// The cgroup paths of `pid`, one per hierarchy (`/proc/<pid>/cgroup`).
fn cgroups_of(pid: i64) -> Vec<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2).map(str::to_string))
        .collect()
}

/// The forwarder runs in a cgroup of its own next to the container's, in every hierarchy
/// (never the container's: its egress programs, limits, freeze and kill are the
/// container's), with `[egress] forwarder_memory` and `forwarder_pids` in force, shown by
/// `verify` and `events --stats`; delete removes it.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn the_forwarder_runs_in_a_cgroup_of_its_own_with_its_limits() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("cg") else {
        return;
    };
    let ctx = ctx_with(
        &world,
        "dns-cg",
        "allowed.test:80",
        &format!("resolvers = [\"{DNS}\"]\nforwarder_memory = \"24m\"\nforwarder_pids = 20\n"),
    );
    let c = ctx.create_ok("c");
    ctx.moat(&["start", &c.id]).ok();
    let a = lookup(&ctx, &c.id, "allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    let rec = forwarder(&ctx, &c.id);
    let pid = rec["pid"].as_i64().unwrap();
    let sibling = format!("/moat/{}@dns", c.id);
    assert_eq!(rec["cgroup"], json!(sibling), "{rec}");
    let own = cgroups_of(pid);
    assert!(!own.is_empty());
    assert!(
        own.iter().all(|p| *p == sibling),
        "the forwarder's cgroups: {own:?}"
    );
    let init = c.state()["pid"].as_i64().unwrap();
    let container = format!("/moat/{}", c.id);
    assert!(
        cgroups_of(init).iter().all(|p| *p == container),
        "the init's cgroups: {:?}",
        cgroups_of(init)
    );
    let mem = fwd_cgroup_file(&c.id, "memory", "memory.limit_in_bytes", "memory.max");
    assert_eq!(mem.as_deref(), Some("25165824"), "memory limit");
    let pids = fwd_cgroup_file(&c.id, "pids", "pids.max", "pids.max");
    assert_eq!(pids.as_deref(), Some("20"), "pids limit");
    let v = ctx.moat(&["verify", &c.id]).ok();
    let row = v
        .stdout
        .lines()
        .find(|l| l.contains("dns cgroup"))
        .unwrap_or_else(|| panic!("verify: {}", v.stdout));
    assert!(row.starts_with("ok"), "{row}");
    assert!(row.contains("memory 25165824 bytes, 20 pids"), "{row}");
    let m = moat_stats(&ctx, &c.id);
    let u = &m["dns_forwarder_cgroup"];
    eprintln!("events --stats: dns_forwarder_cgroup {u}");
    assert_eq!(u["path"], json!(sibling), "{m}");
    assert_eq!(u["memory_limit"], json!(24 << 20), "{m}");
    assert_eq!(u["pids_limit"], json!(20), "{m}");
    assert!(u["memory_usage"].as_u64().unwrap() > 0, "{m}");
    assert!(u["pids_current"].as_u64().unwrap() >= 1, "{m}");
    assert_eq!(m["dns_forwarder_limits"]["memory"], json!(24 << 20), "{m}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    assert!(forwarders_in(world.inode()).is_empty());
    ctx.assert_no_trace(&c.id);
}

/// The container floods its forwarder: distinct names under an allowed wildcard, many at
/// once, with TCP clients trickling a byte a second to hold its threads. What the
/// forwarder takes is charged to its own cgroup and held there: its tasks never pass
/// `forwarder_pids` (the threads past it are refused, counted), its memory never passes
/// `forwarder_memory`, and it serves on once the flood ends.
#[test]
#[ignore = "needs root: real containers, a network namespace, dnsmasq"]
fn a_flooding_container_cannot_push_the_forwarder_past_its_cgroup() {
    if !require_root() {
        return;
    }
    let Some(world) = World::new("flood") else {
        return;
    };
    let (memory, max_pids) = (16u64 << 20, 6u64);
    let ctx = ctx_with(
        &world,
        "dns-flood",
        "*.allowed.test:80",
        &format!(
            "resolvers = [\"{DNS}\"]\nforwarder_memory = \"16m\"\nforwarder_pids = {max_pids}\n"
        ),
    );
    let c = ctx.create_ok("f");
    ctx.moat(&["start", &c.id]).ok();
    let rec = forwarder(&ctx, &c.id);
    let (pid, fwd) = (
        rec["pid"].as_i64().unwrap(),
        rec["addr"].as_str().unwrap().to_string(),
    );
    let stall = ctx.moat_bg(&[
        "exec",
        &c.id,
        "sh",
        "-c",
        &format!(
            "i=0; while [ $i -lt 40 ]; do i=$((i+1)); \
             (while :; do printf x; sleep 1; done) | nc {fwd} 53 >/dev/null 2>&1 & \
             sleep 0.1; done; sleep 30"
        ),
    ]);
    let flood = ctx.moat_bg(&[
        "exec",
        &c.id,
        "sh",
        "-c",
        "i=0; while [ $i -lt 240 ]; do timeout 5 nslookup -type=a f$i.allowed.test \
         >/dev/null 2>&1 & i=$((i+1)); [ $((i % 40)) = 0 ] && wait; done; wait; echo flooded",
    ]);
    let mut most = 0u64;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(8) {
        let n: u64 = fwd_cgroup_file(&c.id, "pids", "pids.current", "pids.current")
            .and_then(|s| s.parse().ok())
            .expect("the forwarder's pids.current");
        most = most.max(n);
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = flood.wait(Duration::from_secs(90));
    assert!(out.stdout.contains("flooded"), "{}", out.stderr);
    let m = moat_stats(&ctx, &c.id);
    let u = &m["dns_forwarder_cgroup"];
    eprintln!("under the flood: most tasks {most}; {u}; {}", m["egress"]);
    assert!(most <= max_pids, "{most} tasks in the forwarder's cgroup");
    assert!(
        u["pids_limit_hits"].as_u64().unwrap() > 0,
        "the flood never reached forwarder_pids: {u}"
    );
    let peak = u["memory_peak"]
        .as_u64()
        .or(u["memory_usage"].as_u64())
        .unwrap();
    assert!(
        u["memory_usage"].as_u64().unwrap() > 0,
        "nothing charged: {u}"
    );
    assert!(peak <= memory, "memory peak {peak} over {memory}: {u}");
    assert!(
        cgroups_of(pid)
            .iter()
            .all(|p| *p == format!("/moat/{}@dns", c.id)),
        "{:?}",
        cgroups_of(pid)
    );
    // It serves on once the trickling clients are done (each bounded, in the script).
    let _ = stall.wait(CALL_TIMEOUT);
    assert!(
        forwarders_in(world.inode()).contains(&i32::try_from(pid).unwrap()),
        "the forwarder died"
    );
    let a = lookup(&ctx, &c.id, "last.allowed.test");
    assert!(a.contains(&format!("Address: {ALLOWED}")), "{a}");
    ctx.moat(&["delete", "--force", &c.id]).ok();
    ctx.assert_no_trace(&c.id);
}
