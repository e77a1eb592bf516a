//! `linux.rootfsPropagation` and the propagation options of `mounts[]`: every value
//! creates and runs a container, and none lets the container's mounts into the host's
//! mount table, before, during or after the container — also when the rootfs lies on a
//! shared host mount (systemd makes `/` shared; Docker's rshared volumes need it), where
//! the copy of that mount in the container's namespace is a peer of the host's. The
//! semantics users rely on hold: with `rshared` and an `rshared` volume, what the host
//! mounts under the volume's source appears in the container.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use support::*;

const VALUES: [&str; 8] = [
    "shared",
    "rshared",
    "slave",
    "rslave",
    "private",
    "rprivate",
    "unbindable",
    "runbindable",
];

/// A host mount the test made (a shared self-bind, a tmpfs); detached on drop, with
/// whatever is under it.
struct HostMount(PathBuf);

impl HostMount {
    /// `dir` bound onto itself and made shared, as a systemd host's `/` is.
    fn shared(dir: &Path) -> HostMount {
        fs::create_dir_all(dir).unwrap();
        mount(Some(dir), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .unwrap_or_else(|e| panic!("bind {} onto itself: {e}", dir.display()));
        let m = HostMount(dir.to_path_buf());
        mount(
            None::<&str>,
            dir,
            None::<&str>,
            MsFlags::MS_SHARED,
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("make {} shared: {e}", dir.display()));
        m
    }

    fn tmpfs(at: &Path) -> HostMount {
        fs::create_dir_all(at).unwrap();
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::empty(),
            Some("size=1m"),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", at.display()));
        HostMount(at.to_path_buf())
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

/// The test process's (the host's) mount table at and below `dir`, sorted: any mount of
/// the container that propagated out lands at the rootfs path, under `dir`.
fn host_mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap();
    let mut v: Vec<String> = read("/proc/self/mountinfo")
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(4)
                .is_some_and(|mp| mp == dir || mp.starts_with(&format!("{dir}/")))
        })
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[track_caller]
fn assert_host_unchanged(before: &[String], dir: &Path, when: &str) {
    let now = host_mounts_under(dir);
    assert_eq!(
        now,
        before,
        "{when}: the host's mount table under {} changed:\nbefore:\n{}\nnow:\n{}",
        dir.display(),
        before.join("\n"),
        now.join("\n")
    );
}

/// The optional fields (propagation) of the mount at `mountpoint` in `mountinfo`.
fn propagation_of(mountinfo: &str, mountpoint: &str) -> String {
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mountpoint))
        .unwrap_or_else(|| panic!("{mountpoint} not in mountinfo:\n{mountinfo}"));
    let pre = line.split(" - ").next().unwrap();
    pre.split(' ').skip(6).collect::<Vec<_>>().join(" ")
}

/// Creates and runs a container with `value` (None: the field absent) on a rootfs that
/// lies on a shared host mount; checks the host's mount table after create, while the
/// container runs, and after delete, and what propagation the container's `/` got.
fn runs_and_stays_inside(value: Option<&str>) {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new(&format!("prop-{}", value.unwrap_or("absent")));
    let shared = HostMount::shared(&ctx.dir);
    if let Some(v) = value {
        ctx.set("/linux/rootfsPropagation", json!(v));
    }
    ctx.sh("echo ready; exec sleep 60");
    let before = host_mounts_under(&shared.0);

    let c = ctx.create_ok("c");
    assert_host_unchanged(&before, &shared.0, "after create");
    c.start();
    assert!(
        wait_until(Duration::from_secs(10), || c.stdout().contains("ready")),
        "{value:?}: the container did not run: {}",
        c.stderr()
    );
    let inside = read(format!("/proc/{}/mountinfo", c.pid()));
    for mp in ["/", "/proc", "/dev", "/dev/pts", "/sys"] {
        propagation_of(&inside, mp); // panics when missing
    }
    assert_host_unchanged(&before, &shared.0, "while the container runs");

    // The container's `/` has what was asked (the rootfs's host mount is shared here, so
    // a slave's master is that mount's peer group).
    let root = propagation_of(&inside, "/");
    let has = |f: &str| root.split(' ').any(|o| o.starts_with(f));
    match value.unwrap_or("rslave") {
        "shared" | "rshared" => assert!(has("shared:"), "{value:?}: / is {root:?}"),
        "slave" | "rslave" => assert!(
            has("master:") && !has("shared:"),
            "{value:?}: / is {root:?}"
        ),
        "private" | "rprivate" => assert_eq!(root, "", "{value:?}: / is {root:?}"),
        _ => assert_eq!(root, "unbindable", "{value:?}: / is {root:?}"),
    }
    if value == Some("runbindable") {
        let p = propagation_of(&inside, "/proc");
        assert_eq!(p, "unbindable", "runbindable: /proc is {p:?}");
    }

    c.kill("KILL");
    c.wait_stopped(Duration::from_secs(10));
    assert_eq!(c.delete().code, 0);
    assert_host_unchanged(&before, &shared.0, "after delete");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_shared() {
    runs_and_stays_inside(Some("shared"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_rshared() {
    runs_and_stays_inside(Some("rshared"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_slave() {
    runs_and_stays_inside(Some("slave"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_rslave() {
    runs_and_stays_inside(Some("rslave"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_private() {
    runs_and_stays_inside(Some("private"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_rprivate() {
    runs_and_stays_inside(Some("rprivate"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_unbindable() {
    runs_and_stays_inside(Some("unbindable"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_runbindable() {
    runs_and_stays_inside(Some("runbindable"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_absent() {
    runs_and_stays_inside(None);
}

/// The same on a rootfs whose host mount is private (this machine's `/`): `rshared`
/// made the rootfs bind shared there, which pivot_root refused; `runbindable` refused the
/// bind itself.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootfs_propagation_on_a_private_host_mount() {
    if !require_root() {
        return;
    }
    for v in VALUES {
        let mut ctx = Ctx::new(&format!("priv-{v}"));
        ctx.set("/linux/rootfsPropagation", json!(v));
        ctx.sh("echo ran");
        let before = host_mounts_under(&ctx.dir);
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "ran\n", "{v}: {err}");
        assert_host_unchanged(&before, &ctx.dir, v);
    }
}

/// Docker's rshared volume: `rootfsPropagation: rshared` and a bind with `rshared` of a
/// shared host mount. What the host mounts under the source after the start appears in
/// the container; nothing of the container's reaches the host.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rshared_volume_sees_host_mounts_made_later() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rshared-vol");
    let shared = HostMount::shared(&ctx.dir);
    let vol = HostMount::shared(&ctx.dir.join("vol"));
    fs::write(vol.0.join("file"), "from-host\n").unwrap();
    ctx.set("/linux/rootfsPropagation", json!("rshared"));
    ctx.push(
        "/mounts",
        json!({"destination": "/vol", "type": "bind", "source": vol.0,
               "options": ["rbind", "rshared"]}),
    );
    ctx.sh("cat /vol/file; echo ready; i=0; \
         while [ ! -e /vol/sub/marker ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; \
         cat /vol/sub/marker; grep -c ' /vol/sub ' /proc/self/mountinfo");
    let before = host_mounts_under(&shared.0);
    let c = ctx.create_ok("c");
    assert_host_unchanged(&before, &shared.0, "after create");
    c.start();
    assert!(
        wait_until(Duration::from_secs(10), || c.stdout().contains("ready")),
        "the container did not run: {}",
        c.stderr()
    );
    {
        let sub = HostMount::tmpfs(&vol.0.join("sub"));
        fs::write(sub.0.join("marker"), "propagated\n").unwrap();
        c.wait_stopped(Duration::from_secs(20));
        assert_eq!(
            c.stdout(),
            "from-host\nready\npropagated\n1\n",
            "the host's mount under the volume did not reach the container: {}",
            c.stderr()
        );
    }
    assert_eq!(c.delete().code, 0);
    assert_host_unchanged(&before, &shared.0, "after delete");
}

/// `mounts[].options` `shared`/`rshared` on a bind under the default root propagation:
/// the bind's copy of the host mount is a slave (rslave), the option makes it shared as
/// well, in a peer group of its own. The host's mounts reach it; the container's own
/// mount below it (a spec tmpfs) does not reach the host.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn shared_bind_option_receives_but_does_not_send() {
    if !require_root() {
        return;
    }
    for opt in ["shared", "rshared"] {
        let mut ctx = Ctx::new(&format!("bindopt-{opt}"));
        let shared = HostMount::shared(&ctx.dir);
        let vol = HostMount::shared(&ctx.dir.join("vol"));
        let _pre = HostMount::tmpfs(&vol.0.join("pre"));
        fs::write(vol.0.join("pre/file"), "host-submount\n").unwrap();
        fs::create_dir_all(vol.0.join("t")).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/vol", "type": "bind", "source": vol.0,
                   "options": ["rbind", opt]}),
        );
        ctx.push(
            "/mounts",
            json!({"destination": "/vol/t", "type": "tmpfs", "source": "tmpfs",
                   "options": ["size=1m"]}),
        );
        ctx.sh("cat /vol/pre/file; grep ' /vol ' /proc/self/mountinfo");
        let before = host_mounts_under(&shared.0);
        let c = ctx.create_ok("c");
        assert_host_unchanged(&before, &shared.0, &format!("{opt}: after create"));
        let out = c.start_and_wait();
        assert!(
            out.starts_with("host-submount\n"),
            "{opt}: {out}{}",
            c.stderr()
        );
        let p = propagation_of(&out.lines().skip(1).collect::<Vec<_>>().join("\n"), "/vol");
        assert!(
            p.contains("shared:") && p.contains("master:"),
            "{opt}: /vol is {p:?}"
        );
        assert_eq!(c.delete().code, 0);
        assert_host_unchanged(&before, &shared.0, &format!("{opt}: after delete"));
    }
}

/// A create that fails after /proc, /dev and /dev/pts are mounted (an unknown filesystem
/// type last in `mounts[]`) leaves no mount on the host, and no trace.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn failed_create_leaves_no_host_mount() {
    if !require_root() {
        return;
    }
    for v in ["shared", "rshared", "private", "unbindable"] {
        let mut ctx = Ctx::new(&format!("propfail-{v}"));
        let shared = HostMount::shared(&ctx.dir);
        ctx.set("/linux/rootfsPropagation", json!(v));
        ctx.push(
            "/mounts",
            json!({"destination": "/mnt/bad", "type": "moatnofs", "source": "none"}),
        );
        let before = host_mounts_under(&shared.0);
        let (c, out) = ctx.create("c");
        let out = out.fails();
        assert!(out.stderr.contains("/mnt/bad"), "{v}: {}", out.stderr);
        ctx.assert_no_trace(&c.id);
        assert_host_unchanged(&before, &shared.0, &format!("{v}: after the failed create"));
    }
}

/// A systemd host: `/` itself shared. The test cannot make the host's `/` shared, so moat
/// runs in a mount namespace of its own (`unshare -m`) whose `/` is made shared and
/// stands for the host. `--no-pivot` moves the rootfs over the container namespace's `/`:
/// were that still a peer, the container's whole tree would land on the "host's" `/`.
/// The "host" table is read inside that namespace, its `/` and everything under the test's
/// directory (other tests' mounts come and go there as their directories are removed):
/// before create, while the container runs, after delete.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn shared_host_root_stays_inside_with_and_without_pivot() {
    if !require_root() {
        return;
    }
    if !Path::new("/usr/bin/unshare").exists() {
        missing("shared_host_root_stays_inside_with_and_without_pivot: no /usr/bin/unshare");
        return;
    }
    let script = r#"set -e
mount --make-shared /
n() { awk -v d="$D/" '$5 == "/" || index($5, d) == 1' /proc/self/mountinfo | md5sum | cut -c1-32; }
before=$(n)
"$M" --root "$R" create $NOPIVOT --bundle "$B" "$ID" >/dev/null
created=$(n)
"$M" --root "$R" start "$ID"
"$M" --root "$R" state "$ID" | grep -q '"status": "running"'
running=$(n)
"$M" --root "$R" delete --force "$ID"
after=$(n)
echo "$before $created $running $after""#;
    for v in ["shared", "rshared", "private", "unbindable"] {
        for nopivot in ["", "--no-pivot"] {
            let mut ctx = Ctx::new(&format!("rootshared-{v}"));
            ctx.set("/linux/rootfsPropagation", json!(v));
            ctx.sh("exec sleep 60");
            let mut cmd = std::process::Command::new("/usr/bin/unshare");
            cmd.args(["-m", "sh", "-c", script])
                .env("M", MOAT)
                .env("R", &ctx.root)
                .env("B", &ctx.bundle)
                .env("D", &ctx.dir)
                .env("ID", ctx.id("c"))
                .env("NOPIVOT", nopivot);
            let _c = ctx.guard(&ctx.id("c"));
            let out = ctx.run(cmd);
            let sums: Vec<&str> = out.stdout.split_whitespace().collect();
            assert!(
                sums.len() == 4 && sums.iter().all(|s| *s == sums[0]),
                "{v} {nopivot}: the \"host\" namespace's mount table changed (before, after \
                 create, running, after delete: {sums:?}); stderr: {}",
                out.stderr
            );
        }
    }
}

/// `moat.userns=auto`: the parent's idmapped rootfs is attached over the engine's path,
/// under the same rules.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn idmapped_rootfs_stays_inside() {
    if !require_root() {
        return;
    }
    for v in ["shared", "rshared", "unbindable", "runbindable", ""] {
        let mut ctx = Ctx::new(&format!("prop-userns-{v}"));
        let shared = HostMount::shared(&ctx.dir);
        if !v.is_empty() {
            ctx.set("/linux/rootfsPropagation", json!(v));
        }
        ctx.set("/annotations", json!({"moat.userns": "auto"}));
        ctx.sh("id -u; echo ran");
        let before = host_mounts_under(&shared.0);
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "0\nran\n", "{v}: {err}");
        assert_host_unchanged(&before, &shared.0, &format!("{v}: after delete"));
    }
}

/// `moat.userns=auto` builds every bind in the parent, from the host's namespace: a bind
/// of a shared host mount was still the host mount's peer, so a spec mount nested below it
/// propagated to the host. Under the default `rslave` it is a slave, as any bind's copy.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn idmapped_bind_is_a_slave_by_default() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("prop-userns-bind");
    let vol = HostMount::shared(&ctx.dir.join("vol"));
    fs::create_dir_all(vol.0.join("t")).unwrap();
    ctx.set("/annotations", json!({"moat.userns": "auto"}));
    ctx.push(
        "/mounts",
        json!({"destination": "/vol", "type": "bind", "source": vol.0, "options": ["rbind"]}),
    );
    ctx.push(
        "/mounts",
        json!({"destination": "/vol/t", "type": "tmpfs", "source": "tmpfs",
               "options": ["size=1m"]}),
    );
    ctx.sh("grep ' /vol ' /proc/self/mountinfo; exec sleep 60");
    let before = host_mounts_under(&vol.0);
    let c = ctx.create_ok("c");
    assert_host_unchanged(&before, &vol.0, "after create");
    c.start();
    assert!(
        wait_until(Duration::from_secs(10), || c.stdout().contains(" /vol ")),
        "the container did not run: {}",
        c.stderr()
    );
    let p = propagation_of(&c.stdout(), "/vol");
    assert!(p.starts_with("master:"), "/vol is {p:?}");
    c.kill("KILL");
    c.wait_stopped(Duration::from_secs(10));
    assert_eq!(c.delete().code, 0);
    assert_host_unchanged(&before, &vol.0, "after delete");
}
