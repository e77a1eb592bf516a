//! Root integration test of `moat features`: every claim an engine acts on is tried on this
//! host with a real container, so a claim that stops being true fails here. containerd 2.x
//! and CRI-O read `linux.namespaces` (`user`: user-namespaced pods),
//! `linux.mountExtensions.idmap.enabled` (idmapped mounts), `mountOptions` (`rro`:
//! recursive read-only mounts), `linux.netDevices.enabled` (a veth end moved in) and the
//! spec versions; `shape` in src/report/features.rs checks the rest of the document's
//! form.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use support::{host_ns, missing, require_root, run_to_end, tmp_base, Ctx, Run, MOAT};

fn features() -> Value {
    let out = Command::new(MOAT).arg("features").run_output().unwrap();
    assert!(out.status.success(), "{}", support::stderr_of(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

fn proc_ns_name(typ: &str) -> &str {
    match typ {
        "mount" => "mnt",
        "network" => "net",
        t => t,
    }
}

/// A tmpfs mounted on the host below a test's directory; unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn at(dir: &Path) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(dir)
            .run_status()
            .unwrap();
        assert!(st.success(), "mount tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).run_status();
    }
}

/// Whether the kernel can idmap mounts of the test directories (5.19+; tmpfs from 6.3):
/// the idmap claim is about moat, the filesystem's support is the kernel's.
fn kernel_idmaps_tmp_base() -> bool {
    let rel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|x| x.parse::<u32>().ok());
    let ver = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    let tmpfs = nix::sys::statfs::statfs(&tmp_base())
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    ver >= if tmpfs { (6, 3) } else { (5, 19) }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_claim_engines_read_holds_on_this_host() {
    if !require_root() {
        return;
    }
    let f = features();

    // ociVersionMin and ociVersionMax: a bundle of each version runs.
    for key in ["ociVersionMin", "ociVersionMax"] {
        let v = f[key].as_str().expect(key);
        let mut ctx = Ctx::new("feat-ver");
        ctx.set("/ociVersion", json!(v)).sh("echo ran");
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "ran\n", "{key} {v}: {err}");
    }

    // linux.namespaces: one container with every namespace claimed, each a new one (user
    // with the explicit mappings Kubernetes sends); mountOptions rro and mountExtensions
    // idmap in the same container, since user-namespaced pods use them together.
    let claimed = strings(&f["linux"]["namespaces"]);
    assert!(
        claimed.iter().any(|n| n == "user"),
        "no user namespace: {claimed:?}"
    );
    let map = json!([{"containerID": 0, "hostID": 3_300_000_000u32, "size": 65536}]);
    let mut ctx = Ctx::new("feat");
    let nss: Vec<Value> = claimed.iter().map(|n| json!({"type": n})).collect();
    ctx.set("/linux/namespaces", json!(nss))
        .set("/linux/uidMappings", map.clone())
        .set("/linux/gidMappings", map.clone());
    let mut script: String = claimed
        .iter()
        .map(|n| format!("readlink /proc/self/ns/{};", proc_ns_name(n)))
        .collect();

    let rro = strings(&f["mountOptions"]).iter().any(|o| o == "rro");
    let src = ctx.dir.join("rro-src");
    let _sub = rro.then(|| {
        fs::create_dir_all(&src).unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o777)).unwrap();
        let sub = Tmpfs::at(&src.join("sub"));
        fs::set_permissions(&sub.0, fs::Permissions::from_mode(0o777)).unwrap();
        fs::create_dir(ctx.rootfs().join("rro")).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/rro", "type": "bind", "source": src, "options": ["rbind", "rro"]}),
        );
        script += "touch /rro/sub/x 2>/dev/null; echo rro-sub=$?;";
        sub
    });

    let idmap = f["linux"]["mountExtensions"]["idmap"]["enabled"] == true;
    let ws = ctx.dir.join("idmap-src");
    if idmap && !kernel_idmaps_tmp_base() {
        missing(&format!(
            "kernel cannot idmap {}: the idmap claim is not tried; set MOAT_IT_TMPDIR to an ext4 directory",
            tmp_base().display()
        ));
    } else if idmap {
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("root-owned"), "x").unwrap();
        fs::create_dir(ctx.rootfs().join("ws")).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/ws", "type": "bind", "source": ws, "options": ["rbind"],
                   "uidMappings": map, "gidMappings": map}),
        );
        // Host uid 0 is container uid 0 through the mount's map (unmapped: 65534).
        script += "stat -c idmap-owner=%u /ws/root-owned;";
    }
    // linux.netDevices: one end of a veth pair made here moved in, renamed, into this
    // container's network namespace (owned by its user namespace); the kernel destroys
    // the pair with that namespace (tests/netdevices.rs tries the rest).
    let netdev = f["linux"]["netDevices"]["enabled"] == true;
    let veth = format!("mfe{}", std::process::id());
    let _veth = netdev.then(|| {
        support::host(&[
            "ip",
            "link",
            "add",
            &format!("{veth}a"),
            "type",
            "veth",
            "peer",
            "name",
            &format!("{veth}b"),
        ]);
        ctx.set(
            "/linux/netDevices",
            json!({ format!("{veth}a"): {"name": "feat0"} }),
        );
        script += "test -e /sys/class/net/feat0 && echo netdev=moved;";
        DelLink(format!("{veth}b"))
    });
    ctx.sh(&script);
    let (out, err) = run_to_end(&ctx, "c");
    let lines: Vec<&str> = out.lines().collect();
    for (i, n) in claimed.iter().enumerate() {
        let inside = lines.get(i).copied().unwrap_or("");
        let host = host_ns(proc_ns_name(n));
        assert!(
            inside.starts_with(proc_ns_name(n)) && inside != host,
            "namespace {n}: container {inside:?}, host {host:?}\n{out}{err}"
        );
    }
    if rro {
        assert!(
            lines.contains(&"rro-sub=1"),
            "rro: a submount took a write\n{out}{err}"
        );
    }
    if idmap && kernel_idmaps_tmp_base() {
        assert!(
            lines.contains(&"idmap-owner=0"),
            "idmap: not mapped\n{out}{err}"
        );
    }
    assert!(netdev, "features says netDevices.enabled false");
    assert!(
        lines.contains(&"netdev=moved"),
        "netDevices: not moved in\n{out}{err}"
    );
}

/// Deletes a host interface when dropped, if it is still there.
struct DelLink(String);

impl Drop for DelLink {
    fn drop(&mut self) {
        if Path::new("/sys/class/net").join(&self.0).exists() {
            let mut c = Command::new("ip");
            c.args(["link", "del", "dev", &self.0]);
            let _ = support::run_host_cmd(c, support::CALL_TIMEOUT);
        }
    }
}
