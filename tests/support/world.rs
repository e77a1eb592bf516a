//! A private network "world" for the egress tests, driven through
//! `scripts/lib/networld` (the same library the e2e scripts source): network namespaces
//! made by the test, veth links straight into a world namespace that holds every server
//! address, TCP/UDP echo servers, a metadata imitation on 169.254.169.254, dnsmasq for
//! `*.test` names with 1 s TTLs, and nftables guards (in the host namespace first, then in
//! every namespace made) that drop anything addressed outside the world. Dropping the
//! [`World`] removes all of it, also when the test panics.
//!
//! Addresses (the world's blocks: 198.18.0.0/15, 169.254.169.254, 169.254.170.2,
//! 2001:db8:e::/48): servers answer on every address below, TCP ports [`TCP_PORTS`] and
//! UDP ports [`UDP_PORTS`], with `echo <addr>:<port> <what was sent>`.
//! Names: `a.test` → [`A`] and [`V6_A`], `b.test` → [`B`], `rot.test` → [`ROT_OLD`]
//! (see [`World::dns`]), `x.sub.test` → [`SUB`]; other `*.test` names: NXDOMAIN.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::*;

pub const A: &str = "198.18.0.10";
pub const B: &str = "198.18.0.11";
pub const ROT_OLD: &str = "198.18.0.12";
pub const SUB: &str = "198.18.0.13";
/// Another block (198.19/16), for a route over a link added later.
pub const FAR: &str = "198.19.0.10";
pub const METADATA: &str = "169.254.169.254";
pub const METADATA_ECS: &str = "169.254.170.2";
pub const DNS: &str = "198.18.0.53";
pub const V6_A: &str = "2001:db8:e::10";
pub const V6_B: &str = "2001:db8:e::11";
pub const TCP_PORTS: &[u16] = &[80, 443, 7000, 7001, 7002];
pub const UDP_PORTS: &[u16] = &[7000, 7001];

static N: AtomicUsize = AtomicUsize::new(0);

fn networld() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/lib/networld")
}

/// One world; `networld down` on drop.
pub struct World {
    pub name: String,
    pub dir: PathBuf,
    /// A resolv.conf naming the world's DNS server, to bind over a container's.
    pub resolv: PathBuf,
}

impl World {
    /// Builds a world (the guard first). `None` after a loud [`missing`] when a tool is
    /// absent (python3, nft, dnsmasq, ip: the script installs the last three when it can).
    pub fn new() -> Option<World> {
        let name = format!(
            "mw{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tmp_base().join(format!("moat-world-{name}"));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir world dir");
        if !Path::new("/usr/bin/python3").exists() {
            missing("egress world: /usr/bin/python3 (the world's echo servers)");
            return None;
        }
        let w = World {
            resolv: dir.join("resolv.conf"),
            name,
            dir,
        };
        let out = w.run(&["up", &w.name.clone(), &w.dir.display().to_string()]);
        if out.code != 0 {
            missing(&format!("egress world: networld up failed: {}", out.stderr));
            return None;
        }
        Some(w)
    }

    fn run(&self, args: &[&str]) -> Out {
        let mut c = Command::new(networld());
        c.args(args);
        let o = run_cmd(c, &self.dir, Duration::from_secs(120));
        let _ = fs::remove_file(&o.out_file);
        let _ = fs::remove_file(&o.err_file);
        o
    }

    /// A new network namespace `<name>-<suffix>` linked to the world (default routes
    /// through it); its path, for `linux.namespaces`.
    #[track_caller]
    pub fn netns(&self, suffix: &str) -> PathBuf {
        let o = self.run(&["ns", &self.name, suffix]);
        assert_eq!(o.code, 0, "networld ns {suffix}: {}", o.stderr);
        PathBuf::from(o.stdout.trim())
    }

    /// One more link from the namespace `suffix` into the world, with the route to `cidr`
    /// over it; the new interface's name.
    #[track_caller]
    pub fn link(&self, suffix: &str, cidr: &str) -> String {
        let o = self.run(&["link", &self.name, suffix, cidr]);
        assert_eq!(o.code, 0, "networld link {suffix} {cidr}: {}", o.stderr);
        o.stdout.trim().to_string()
    }

    /// `host` now resolves to `addrs` (dnsmasq rereads its hosts file; TTL 1 s).
    #[track_caller]
    pub fn dns(&self, host: &str, addrs: &[&str]) {
        let mut args = vec!["dns", &self.name, host];
        args.extend_from_slice(addrs);
        let o = self.run(&args);
        assert_eq!(o.code, 0, "networld dns {host}: {}", o.stderr);
    }

    /// The queries dnsmasq saw (its log), to tell which names reached the world.
    pub fn dns_log(&self) -> String {
        fs::read_to_string(self.dir.join("dnsmasq.log")).unwrap_or_default()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let o = self.run(&["down", &self.name]);
        if o.code != 0 {
            eprintln!("warning: networld down {}: {}", self.name, o.stderr);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The static in-container client (`tests/support/netprobe.c`, gcc -static), built once per
/// run; `None` after a loud [`missing`] without a compiler.
pub fn netprobe() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| static_fixture("netprobe.c", "moat-netprobe"))
        .as_deref()
}

/// Puts `ctx`'s container in the network namespace `netns`, installs netprobe as
/// `/bin/netprobe` and binds the world's resolv.conf over `/etc/resolv.conf` (an engine's
/// bind, so moat's forwarder finds the resolvers in the spec, as the issue asks).
pub fn join(ctx: &mut Ctx, world: &World, netns: &Path, probe: &Path) {
    let ns = ctx.config["linux"]["namespaces"]
        .as_array_mut()
        .expect("namespaces");
    ns.retain(|n| n["type"] != "network");
    ns.push(json!({"type": "network", "path": netns}));
    let dst = ctx.rootfs().join("bin/netprobe");
    fs::copy(probe, &dst).expect("copy netprobe into the rootfs");
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).expect("chmod netprobe");
    let etc = ctx.rootfs().join("etc/resolv.conf");
    if !etc.exists() {
        fs::write(&etc, "").expect("resolv.conf mount point");
    }
    ctx.push(
        "/mounts",
        json!({"destination": "/etc/resolv.conf", "type": "bind",
               "source": world.resolv, "options": ["rbind", "ro"]}),
    );
}

/// One netprobe answer line, parsed.
#[derive(Debug, Clone)]
pub struct Probe {
    pub line: String,
    pub ok: bool,
    /// The errno name (EPERM, ECONNREFUSED, TIMEOUT, …) of a failed probe.
    pub err: String,
    /// Milliseconds, measured inside the container, until the answer or the error.
    pub ms: f64,
    /// What the server said (`echo <addr>:<port> probe`).
    pub answer: String,
}

/// Parses netprobe's `tcp|udp|udpc|icmp|icmpc|icmpraw ADDR PORT ok MS ANSWER` /
/// `... err ERRNO MS` lines.
pub fn probes(out: &str) -> Vec<Probe> {
    out.lines()
        .filter(|l| l.starts_with("tcp ") || l.starts_with("udp") || l.starts_with("icmp"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let ok = f.get(3) == Some(&"ok");
            Probe {
                line: l.to_string(),
                ok,
                err: if ok {
                    String::new()
                } else {
                    f.get(4).unwrap_or(&"").to_string()
                },
                ms: f
                    .get(if ok { 4 } else { 5 })
                    .and_then(|m| m.parse().ok())
                    .unwrap_or(f64::NAN),
                answer: if ok { f[5..].join(" ") } else { String::new() },
            }
        })
        .collect()
}

/// Lets every group open ping sockets (`net.ipv4.ping_group_range`, per network namespace;
/// podman and Docker set it so) in the namespace `netns`, which the test made.
#[track_caller]
pub fn allow_ping_sockets(netns: &Path) {
    let o = Command::new("nsenter")
        .arg(format!("--net={}", netns.display()))
        .args([
            "sh",
            "-c",
            "echo 0 2147483647 >/proc/sys/net/ipv4/ping_group_range",
        ])
        .run_output()
        .expect("nsenter");
    assert!(
        o.status.success(),
        "ping_group_range in {}: {}",
        netns.display(),
        stderr_of(&o)
    );
}

/// A shell line running netprobe for each `(kind, addr, port)`, one answer line each.
pub fn probe_script(targets: &[(&str, &str, u16)]) -> String {
    targets
        .iter()
        .map(|(k, a, p)| format!("netprobe {k} {a} {p}"))
        .collect::<Vec<_>>()
        .join("; ")
}
