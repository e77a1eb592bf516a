//! `moat.userns=auto` on a rootful moat: container root is a range of unprivileged host ids
//! taken from the host-wide pool (`/run/moat-userns`), the rootfs is shown through an
//! idmapped mount, idmapped bind mounts write as the ids the container used, and the range
//! goes back to the pool with the container.

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

const POOL_DIR: &str = "/run/moat-userns";

/// `/proc/<pid>/<file>` as (container, host, size) triples.
fn id_map(pid: i32, file: &str) -> Vec<(u64, u64, u64)> {
    fs::read_to_string(format!("/proc/{pid}/{file}"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/{file}: {e}"))
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .collect()
}

/// The pool files naming this container (by id; ids are unique per test run).
fn allocations(id: &str) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(POOL_DIR) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| {
            fs::read_to_string(e.path())
                .ok()
                .and_then(|s| serde_json::from_str::<Value>(&s).ok())
                .is_some_and(|v| v["id"] == id)
        })
        .map(|e| e.path())
        .collect()
}

/// Root, and a kernel that can idmap the test directories (5.19+; tmpfs from 6.3).
/// Anything else is said loudly: these tests would otherwise fail for the kernel's reasons.
fn can_run() -> bool {
    if !require_root() {
        return false;
    }
    let rel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|x| x.parse::<u32>().ok());
    let ver = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    let tmpfs = nix::sys::statfs::statfs(&tmp_base())
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
    let need = if tmpfs { (6, 3) } else { (5, 19) };
    if ver < need {
        missing(&format!(
            "kernel {} cannot idmap {} (needs {}.{}+); set MOAT_IT_TMPDIR to an ext4 directory",
            rel.trim(),
            tmp_base().display(),
            need.0,
            need.1
        ));
        return false;
    }
    true
}

fn auto(ctx: &mut Ctx) -> &mut Ctx {
    ctx.set("/annotations", json!({"moat.userns": "auto"}))
}

/// A config file for this test: OPEN (runc semantics, as the other suites) plus `extra`.
fn config(ctx: &Ctx, extra: &str) -> PathBuf {
    let p = ctx.dir.join("moat.toml");
    fs::write(&p, format!("default_policy = \"open\"\n{extra}")).unwrap();
    p
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn two_containers_get_disjoint_unprivileged_ranges() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-two");
    auto(&mut ctx).sh(
        "id -u; id -g; cat /proc/self/uid_map; stat -c '%u:%g' /bin/busybox /etc/passwd; sleep 30",
    );
    let a = ctx.create_ok("a");
    let b = ctx.create_ok("b");
    let (ma, mb) = (id_map(a.pid(), "uid_map"), id_map(b.pid(), "uid_map"));
    assert_eq!(ma.len(), 1, "{ma:?}");
    assert_eq!(mb.len(), 1, "{mb:?}");
    let ((ca, ha, sa), (cb, hb, sb)) = (ma[0], mb[0]);
    assert_eq!((ca, sa, cb, sb), (0, 65536, 0, 65536));
    assert!(ha >= 65536 && hb >= 65536, "root maps to {ha} and {hb}");
    assert!(
        ha + sa <= hb || hb + sb <= ha,
        "ranges overlap: {ha}+{sa} and {hb}+{sb}"
    );
    assert_eq!(
        id_map(a.pid(), "gid_map"),
        ma,
        "gid map follows the uid map"
    );
    // Each range is held in the pool under the container's root and id.
    for c in [&a, &b] {
        let files = allocations(&c.id);
        assert_eq!(files.len(), 1, "{files:?}");
        let v: Value = serde_json::from_str(&fs::read_to_string(&files[0]).unwrap()).unwrap();
        assert_eq!(
            Path::new(v["root"].as_str().unwrap()),
            fs::canonicalize(&ctx.root).unwrap()
        );
    }
    a.start();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = a.stdout();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(&lines[..2], ["0", "0"], "{out}");
    let inside: Vec<u64> = lines[2]
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(
        inside,
        vec![0, ha, 65536],
        "/proc/self/uid_map inside: {out}"
    );
    // The image's root-owned files are root's inside (idmapped rootfs), not nobody's.
    assert_eq!(&lines[3..5], ["0:0", "0:0"], "{out}");
    // On the host the init runs as the range's first id.
    let status = fs::read_to_string(format!("/proc/{}/status", a.pid())).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid_line.contains(&ha.to_string()), "{uid_line}");
    for c in [&a, &b] {
        assert_eq!(c.moat(&["delete", "--force", &c.id]).code, 0);
        assert!(
            allocations(&c.id).is_empty(),
            "range of {} not released",
            c.id
        );
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn range_released_reused_and_pool_exhaustion_leaves_nothing() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-pool");
    // A private two-slot pool, far from the default one.
    let cfg = config(&ctx, "[userns]\npool = \"3100000000:131072\"\n");
    ctx.use_config(cfg);
    auto(&mut ctx).sh("sleep 30");
    let a = ctx.create_ok("a");
    let b = ctx.create_ok("b");
    let start = |c: &Container| id_map(c.pid(), "uid_map")[0].1;
    let (sa, sb) = (start(&a), start(&b));
    let mut got = [sa, sb];
    got.sort();
    assert_eq!(got, [3_100_000_000, 3_100_065_536]);

    let (c, out) = ctx.create("c");
    assert_ne!(out.code, 0, "third container fits in a two-slot pool?");
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("userns pool exhausted"), "{}", lines[0]);
    ctx.assert_no_trace(&c.id);
    assert!(allocations(&c.id).is_empty());
    drop(c);

    // delete gives the range back; the next container gets it.
    assert_eq!(a.delete().code, 0);
    assert!(allocations(&a.id).is_empty());
    let c = ctx.create_ok("c2");
    assert_eq!(start(&c), sa, "released range reused");
    // delete --force of a running container releases too.
    b.start();
    assert_eq!(b.moat(&["delete", "--force", &b.id]).code, 0);
    assert!(allocations(&b.id).is_empty());
    // A stale allocation (its container directory gone) is reclaimed.
    let stale_id = ctx.id("stale");
    fs::write(
        Path::new(POOL_DIR).join(sb.to_string()),
        json!({"start": sb, "size": 65536, "root": "/nonexistent/moat-root", "id": stale_id})
            .to_string(),
    )
    .unwrap();
    let d = ctx.create_ok("d");
    assert_eq!(start(&d), sb, "stale range reclaimed");
    assert!(allocations(&stale_id).is_empty());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn idmapped_bind_writes_as_the_ids_the_container_used() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-bind");
    let ws = ctx.dir.join("workspace");
    fs::create_dir(&ws).unwrap();
    fs::set_permissions(&ws, fs::Permissions::from_mode(0o777)).unwrap();
    fs::write(ws.join("from-host"), "x").unwrap();
    auto(&mut ctx)
        .push(
            "/mounts",
            json!({"destination": "/ws", "type": "bind", "source": ws, "options": ["bind", "idmap"]}),
        )
        .set("/process/capabilities", json!({
            "bounding": ["CAP_SETUID", "CAP_SETGID"],
            "effective": ["CAP_SETUID", "CAP_SETGID"],
            "permitted": ["CAP_SETUID", "CAP_SETGID"]}))
        .sh("stat -c '%u' /ws/from-host; echo r > /ws/by-root; \
             su -s /bin/sh u1000 -c 'echo u > /ws/by-1000'; stat -c '%u' /ws/by-1000");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "0\n1000\n", "{out}{err}");
    let owner = |f: &str| {
        let m = fs::metadata(ws.join(f)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(
        owner("by-root"),
        (0, 0),
        "container root's file is host root's"
    );
    assert_eq!(owner("by-1000"), (1000, 1000));

    // Explicit mappings (as Kubernetes sends them): the engine's own linux.uidMappings and
    // the same map on the mount.
    let map = json!([{"containerID": 0, "hostID": 3_200_000_000u32, "size": 65536}]);
    let mut ctx2 = Ctx::new("userns-bind2");
    fs::remove_file(ws.join("by-root")).unwrap();
    // Without moat.userns=auto the rootfs is the engine's to prepare: the mount point must
    // exist, container root cannot create it in a directory owned by host root.
    fs::create_dir(ctx2.rootfs().join("ws")).unwrap();
    ctx2.push("/linux/namespaces", json!({"type": "user"}))
        .set("/linux/uidMappings", map.clone())
        .set("/linux/gidMappings", map.clone())
        .push(
            "/mounts",
            json!({"destination": "/ws", "type": "bind", "source": ws, "options": ["rbind"],
                   "uidMappings": map, "gidMappings": map}),
        )
        .sh("cat /proc/self/uid_map; stat -c '%u' /ws/from-host; echo r > /ws/by-root");
    let (out, err) = run_to_end(&ctx2, "c");
    assert!(out.contains("3200000000"), "{out}{err}");
    assert!(out.ends_with("0\n"), "{out}{err}");
    assert_eq!(owner("by-root"), (0, 0));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn escaped_process_has_no_power_over_host_files() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-escape");
    let host_dir = ctx.dir.join("host-owned");
    fs::create_dir(&host_dir).unwrap();
    fs::set_permissions(&host_dir, fs::Permissions::from_mode(0o755)).unwrap();
    let victim = host_dir.join("victim");
    fs::write(&victim, "host\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
    auto(&mut ctx).sh("sleep 30");
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid().to_string();
    // The container's user namespace (as root there, with every capability in it) but the
    // host's mount namespace: what a mount-namespace escape would give.
    let attempt = |script: &str| {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &pid, "-U", "--", "sh", "-c", script]);
        run_cmd(cmd, &ctx.io, CALL_TIMEOUT)
    };
    let who = attempt("id -u; grep CapEff /proc/self/status").ok();
    assert!(who.stdout.starts_with("0\n"), "{}", who.stdout);
    let v = victim.display().to_string();
    for (what, script) in [
        ("append to a host root file", format!("echo pwned >> {v}")),
        (
            "chown a host root file",
            format!("chown 0:0 {v}; chown 12345 {v}"),
        ),
        ("chmod a host root file", format!("chmod 666 {v}")),
        (
            "create in a host root directory",
            format!("touch {}/new", host_dir.display()),
        ),
        ("read /etc/shadow", "cat /etc/shadow".into()),
    ] {
        let out = attempt(&script);
        assert_ne!(out.code, 0, "{what} succeeded: {}", out.stdout);
        assert!(
            out.stderr.contains("Permission denied")
                || out.stderr.contains("Operation not permitted"),
            "{what}: {}",
            out.stderr
        );
    }
    assert_eq!(fs::read_to_string(&victim).unwrap(), "host\n");
    let m = fs::metadata(&victim).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o644));
    assert!(!host_dir.join("new").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn overlay_rootfs_is_rebuilt_over_idmapped_layers() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-ovl");
    let (upper, work, merged) = (
        ctx.dir.join("upper"),
        ctx.dir.join("work"),
        ctx.dir.join("merged"),
    );
    for d in [&upper, &work, &merged] {
        fs::create_dir(d).unwrap();
    }
    let opts = format!(
        // podman mounts its overlays volatile: the kernel then refuses a second mount on
        // the same work directory.
        "lowerdir={},upperdir={},workdir={},volatile",
        ctx.rootfs().display(),
        upper.display(),
        work.display()
    );
    host(&[
        "mount",
        "-t",
        "overlay",
        "overlay",
        "-o",
        &opts,
        merged.to_str().unwrap(),
    ]);
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).run_status();
        }
    }
    let _m = Unmount(merged.clone());
    auto(&mut ctx)
        .set("/root", json!({"path": merged, "readonly": false}))
        .sh("id -u; stat -c '%u:%g' /bin/busybox /etc/passwd; echo hi > /etc/new; stat -c '%u' /etc/new; \
             echo changed >> /etc/passwd && echo copied-up");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "0\n0:0\n0:0\n0\ncopied-up\n", "{out}{err}");
    let m = fs::metadata(upper.join("etc/new")).unwrap();
    assert_eq!(
        (m.uid(), m.gid()),
        (0, 0),
        "new file stored as host root in the upper layer"
    );
    let m = fs::metadata(upper.join("etc/passwd")).unwrap();
    assert_eq!(m.uid(), 0, "copy-up keeps the owner");
    assert!(fs::read_to_string(merged.join("etc/passwd"))
        .unwrap()
        .ends_with("changed\n"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn filesystem_without_idmap_support_is_refused_cleanly() {
    if !can_run() {
        return;
    }
    // ramfs has no idmapped mount support on any kernel (tmpfs has since 6.3).
    let mut ctx = Ctx::new("userns-ramfs");
    let ram = ctx.dir.join("ramroot");
    fs::create_dir(&ram).unwrap();
    host(&["mount", "-t", "ramfs", "ramfs", ram.to_str().unwrap()]);
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).run_status();
        }
    }
    let _m = Unmount(ram.clone());
    copy_tree(&ctx.rootfs(), &ram);
    let mounts_before = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count();
    auto(&mut ctx)
        .set("/root", json!({"path": ram, "readonly": false}))
        .sh("true");
    let (c, out) = ctx.create("c");
    assert_ne!(out.code, 0, "a ramfs rootfs cannot be idmapped");
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("ramfs")
            && lines[0].contains("idmapped")
            && lines[0].contains("root.path"),
        "{}",
        lines[0]
    );
    ctx.assert_no_trace(&c.id);
    assert!(allocations(&c.id).is_empty(), "pool allocation left behind");
    let mounts_after = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .count();
    assert_eq!(mounts_before, mounts_after, "mounts left behind");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn verify_shows_the_map_and_fails_root_to_root() {
    if !can_run() {
        return;
    }
    let mut ctx = Ctx::new("userns-verify");
    // RESTRICTED with userns=auto as the configured default.
    let p = ctx.dir.join("moat.toml");
    fs::write(&p, "[userns]\ndefault = \"auto\"\n").unwrap();
    ctx.use_config(&p).sh("sleep 30");
    let explain = ctx
        .moat(&["policy", "explain", "--bundle", &ctx.bundle_str()])
        .ok();
    assert!(
        explain.stdout.contains("user namespace: auto"),
        "{}",
        explain.stdout
    );
    let c = ctx.create_ok("good");
    c.start();
    let mut cmd = ctx.cmd();
    cmd.args(["verify", &c.id]);
    let out = ctx.run(cmd);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let line = out.stdout.lines().find(|l| l.contains("uid_map")).unwrap();
    assert!(line.starts_with("ok") && line.contains(" 65536"), "{line}");
    assert!(out
        .stdout
        .lines()
        .any(|l| l.starts_with("ok") && l.contains("userns pool")));
    drop(c);

    // An engine that maps container root to host root keeps its mapping (the annotation
    // does not override the engine's own), and verify says it is not what was asked for.
    let map = json!([{"containerID": 0, "hostID": 0, "size": 65536}]);
    ctx.push("/linux/namespaces", json!({"type": "user"}))
        .set("/linux/uidMappings", map.clone())
        .set("/linux/gidMappings", map);
    let c = ctx.create_ok("rootmap");
    c.start();
    let mut cmd = ctx.cmd();
    cmd.args(["verify", &c.id]);
    let out = ctx.run(cmd);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let line = out.stdout.lines().find(|l| l.contains("uid_map")).unwrap();
    assert!(
        line.starts_with("FAIL") && line.contains("0 0 65536"),
        "{line}"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn staged_create_with_a_joined_network_namespace() {
    if !can_run() {
        return;
    }
    // Rootful podman passes its network namespace by path: the user namespace is then
    // unshared by an intermediate after the join (staged), the idmapped rootfs arrives
    // after the maps, and sysfs (refused in a netns the userns does not own) is the host's
    // /sys, read-only.
    let mut ctx = Ctx::new("userns-staged");
    let ns = ctx.id("ns");
    host(&["ip", "netns", "add", &ns]);
    struct DelNs(String);
    impl Drop for DelNs {
        fn drop(&mut self) {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.0])
                .run_status();
        }
    }
    let _ns = DelNs(ns.clone());
    ctx.without_ns("network").push(
        "/linux/namespaces",
        json!({"type": "network", "path": format!("/run/netns/{ns}")}),
    );
    auto(&mut ctx).sh("id -u; cat /proc/self/uid_map; stat -c '%u' /bin/busybox; \
         grep ' /sys ' /proc/self/mountinfo | grep -q ' ro,' && echo sys-ro");
    let (out, err) = run_to_end(&ctx, "c");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}{err}");
    assert_eq!(lines[0], "0");
    let host_root: u64 = lines[1].split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(host_root >= 65536, "{out}");
    assert_eq!(&lines[2..], ["0", "sys-ro"], "{out}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn engine_paths_closed_to_container_root_still_work() {
    if !can_run() {
        return;
    }
    // podman keeps rootfs and bind sources under 0700 root directories and does not know
    // moat maps root elsewhere: the parent makes those mounts, the child never walks them.
    let mut ctx = Ctx::new("userns-closed");
    let closed = ctx.dir.join("closed");
    fs::create_dir(&closed).unwrap();
    fs::set_permissions(&closed, fs::Permissions::from_mode(0o700)).unwrap();
    copy_tree(&ctx.rootfs(), &closed.join("rootfs"));
    fs::create_dir(closed.join("data")).unwrap();
    fs::write(closed.join("data/hosts"), "127.0.0.1 closed\n").unwrap();
    auto(&mut ctx)
        .set(
            "/root",
            json!({"path": closed.join("rootfs"), "readonly": false}),
        )
        .push(
            "/mounts",
            json!({"destination": "/etc/hosts", "type": "bind",
                   "source": closed.join("data/hosts"), "options": ["bind", "ro"]}),
        )
        .sh("cat /etc/hosts; stat -c '%u' /bin/busybox; echo ok > /root/w && cat /root/w");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "127.0.0.1 closed\n0\nok\n", "{err}");
    assert_eq!(fs::metadata(closed.join("rootfs/root/w")).unwrap().uid(), 0);
}
