//! T5 (CVE-2019-19921, CVE-2021-30465, CVE-2025-31133, CVE-2025-52565, CVE-2025-52881):
//! bounded symlink-exchange races on a shared volume.
//!
//! A host directory S is shared: container A (the attacker, OPEN, S bind-mounted at
//! `/shared`) and container B, whose **rootfs lies in S** and whose `/dev` and `/vol` are
//! binds of directories in S. While B is created over and over, A swaps — atomically, with
//! `renameat2(RENAME_EXCHANGE)`, in a tight loop, back and forth — each of these with an
//! alternative:
//! * mount destinations: B's `/data` and `/vol/sub` (B mounts a tmpfs below each) with a
//!   symlink to `/` and to `/etc`;
//! * `/proc` and `/sys` with a symlink to `/`, and `/proc` with an empty directory (which
//!   moves B's procfs mount, once made, out of the way of the masks);
//! * `/dev/null` with a symlink to `/proc/sys/kernel/core_pattern` and `/dev/pts` with a
//!   symlink to `/`.
//!
//! Every create either fails (moat refusing is fine) or yields a container whose mount
//! table — read from the host in `/proc/<pid>/mountinfo` before the container ever runs —
//! has no read-write mount of anything from procfs but procfs itself, and whose every
//! reachable procfs has `/sys` read-only and `/keys`, `/timer_list` masked, every reachable
//! sysfs `/firmware` masked. Afterwards no entry has appeared in the host's `/` or `/etc`.
//! B alternates between RESTRICTED and OPEN.
//!
//! Bound: at most 1,000 creates or 45 s of creating, whichever comes first (on 2 loaded
//! cores that is a few hundred to 1,000); the count is printed.

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{ctx, entries, install, probe, Policy};

const MAX_CREATES: usize = 1000;
const MAX_TIME: Duration = Duration::from_secs(45);

fn mknod_null(p: &Path) {
    let c = CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    let rc = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod {}", p.display());
}

/// One mountinfo line: (mount point, root within its filesystem, per-mount options, fstype).
struct Mnt {
    point: String,
    root: String,
    opts: Vec<String>,
    fstype: String,
}

fn mountinfo(pid: i32) -> Option<Vec<Mnt>> {
    let text = fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    Some(
        text.lines()
            .filter_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let f: Vec<&str> = pre.split(' ').collect();
                Some(Mnt {
                    root: f.get(3)?.to_string(),
                    point: f.get(4)?.to_string(),
                    opts: f.get(5)?.split(',').map(String::from).collect(),
                    fstype: post.split(' ').next()?.to_string(),
                })
            })
            .collect(),
    )
}

fn join(p: &str, name: &str) -> String {
    format!("{}/{name}", p.trim_end_matches('/'))
}

/// What is wrong with the created container `pid`'s mounts (empty: nothing).
fn audit(pid: i32) -> Vec<String> {
    let Some(m) = mountinfo(pid) else {
        return vec![];
    };
    let mut bad = Vec::new();
    let root = format!("/proc/{pid}/root");
    let ro_at = |p: &str| {
        m.iter()
            .rev()
            .find(|x| x.point == p)
            .is_some_and(|x| x.opts.iter().any(|o| o == "ro"))
    };
    let masked = |p: &str| {
        // A masked file is the null device; a masked directory an empty mount.
        let host = format!("{root}{p}");
        match fs::symlink_metadata(&host) {
            Ok(md) if md.file_type().is_char_device() => md.rdev() == libc::makedev(1, 3),
            Ok(md) if md.is_dir() => fs::read_dir(&host).is_ok_and(|mut d| d.next().is_none()),
            Ok(_) => false,
            Err(_) => true,
        }
    };
    for x in &m {
        if x.fstype == "proc" && x.root != "/" && x.opts.iter().any(|o| o == "rw") {
            bad.push(format!(
                "read-write mount of procfs {} at {}",
                x.root, x.point
            ));
        }
        if x.fstype == "proc" && x.root == "/" {
            // Reachable from the container's root? (A procfs stacked on the root itself or
            // under a later mount is out of reach.) Not `self`: that is the reader's pid.
            if !Path::new(&format!("{root}{}", join(&x.point, "uptime"))).exists() {
                continue;
            }
            if !ro_at(&join(&x.point, "sys")) {
                bad.push(format!("procfs at {}: sys not read-only", x.point));
            }
            if Path::new("/proc/sysrq-trigger").exists() && !ro_at(&join(&x.point, "sysrq-trigger"))
            {
                bad.push(format!(
                    "procfs at {}: sysrq-trigger not read-only",
                    x.point
                ));
            }
            for f in ["keys", "timer_list", "kcore"] {
                if Path::new("/proc").join(f).exists() && !masked(&join(&x.point, f)) {
                    bad.push(format!("procfs at {}: {f} not masked", x.point));
                }
            }
        }
        if x.fstype == "sysfs" && x.root == "/" {
            let fw = join(&x.point, "firmware");
            if Path::new(&format!("{root}{}", join(&x.point, "kernel"))).exists() && !masked(&fw) {
                bad.push(format!("sysfs at {}: firmware not masked", x.point));
            }
        }
    }
    bad
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t5_symlink_exchange_races_on_a_shared_volume() {
    if !require_root() {
        return;
    }
    let Some(probe) = probe() else {
        return;
    };
    let tag = format!("moat-t5-{}", std::process::id());
    // A: the attacker.
    let mut a = ctx("t5a", Policy::Open);
    install(&a, probe, "probe");
    let s = a.dir.join("shared");
    let rootfs = s.join("rootfs");
    copy_tree(shared_rootfs(), &rootfs);
    let (vol, dev) = (s.join("vol"), s.join("dev"));
    for d in [
        vol.join("sub"),
        dev.join("pts"),
        dev.join("shm"),
        dev.join("mqueue"),
        rootfs.join("data"),
        rootfs.join("proc.moved"),
    ] {
        fs::create_dir_all(d).unwrap();
    }
    mknod_null(&dev.join("null"));
    symlink("/", rootfs.join("data.alt")).unwrap();
    symlink("/", rootfs.join("proc.alt")).unwrap();
    symlink("/", rootfs.join("sys.alt")).unwrap();
    symlink("/etc", vol.join("sub.alt")).unwrap();
    symlink("/proc/sys/kernel/core_pattern", dev.join("null.alt")).unwrap();
    symlink("/", dev.join("pts.alt")).unwrap();
    let pairs: Vec<String> = [
        ("rootfs/data", "rootfs/data.alt"),
        ("vol/sub", "vol/sub.alt"),
        ("rootfs/proc", "rootfs/proc.alt"),
        ("rootfs/proc", "rootfs/proc.moved"),
        ("rootfs/sys", "rootfs/sys.alt"),
        ("dev/null", "dev/null.alt"),
        ("dev/pts", "dev/pts.alt"),
    ]
    .iter()
    .map(|(x, y)| format!("/shared/{x},/shared/{y}"))
    .collect();
    a.push(
        "/mounts",
        json!({"destination": "/shared", "type": "bind", "source": s, "options": ["rbind"]}),
    );
    let secs = (MAX_TIME + Duration::from_secs(10)).as_secs().to_string();
    let mut args = vec!["/bin/probe", "flip", &secs];
    args.extend(pairs.iter().map(String::as_str));
    a.args(&args);

    // B: the victim, one context per policy, both on the shared rootfs.
    let victim = |policy: Policy| {
        let mut b = ctx("t5b", policy);
        b.set("/root", json!({"path": rootfs, "readonly": false}));
        for m in b.config["mounts"].as_array_mut().unwrap() {
            if m["destination"] == "/dev" {
                *m = json!({"destination": "/dev", "type": "bind", "source": dev, "options": ["rbind"]});
            }
        }
        b.push(
            "/mounts",
            json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind"]}),
        );
        b.push("/mounts", json!({"destination": format!("/data/{tag}"), "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}));
        b.push("/mounts", json!({"destination": format!("/vol/sub/{tag}"), "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}));
        b.args(&["true"]);
        b
    };
    let bs = [victim(Policy::Restricted), victim(Policy::Open)];
    // Before the race: B works.
    for b in &bs {
        let c = b.create_ok("warmup");
        let bad = audit(c.pid());
        assert!(bad.is_empty(), "without a race: {bad:?}");
    }

    let root_before = entries("/");
    let etc_before = entries("/etc");
    let ca = a.create_ok("a");
    ca.start();
    let start = Instant::now();
    let (mut created, mut failed) = (0, 0);
    let mut problems = Vec::new();
    let mut errors = std::collections::BTreeMap::<String, usize>::new();
    let mut n = 0;
    let mut suspects = Vec::new();
    while n < MAX_CREATES && start.elapsed() < MAX_TIME {
        let b = &bs[n % 2];
        let (c, out) = b.create(&format!("b{n}"));
        if out.code == 0 {
            created += 1;
            let found = audit(c.pid());
            if !found.is_empty() {
                // Kept for a second look once the attacker has stopped (the audit itself
                // may have raced with a flip).
                suspects.push((n, c));
                n += 1;
                continue;
            }
        } else {
            failed += 1;
            let key: String = out.stderr.chars().take(140).collect();
            *errors.entry(key).or_default() += 1;
        }
        drop(c);
        n += 1;
    }
    let elapsed = start.elapsed();
    ca.kill("TERM");
    ca.wait_stopped(Duration::from_secs(20));
    let flips = ca.stdout();
    for (i, c) in &suspects {
        let again = audit(c.pid());
        if !again.is_empty() && problems.is_empty() {
            let mi = fs::read_to_string(format!("/proc/{}/mountinfo", c.pid())).unwrap_or_default();
            eprintln!("T5: mounts of the first bad container:\n{mi}");
        }
        for p in again {
            problems.push(format!(
                "create {i} ({:?}): {p}",
                [Policy::Restricted, Policy::Open][i % 2]
            ));
        }
    }
    eprintln!("T5: {} suspects on the first look", suspects.len());
    drop(suspects);
    eprintln!(
        "T5: {n} creates in {:.1} s: {created} created, {failed} refused; attacker: {}",
        elapsed.as_secs_f64(),
        flips.trim()
    );
    for (e, k) in &errors {
        eprintln!("T5:   {k} x {e}");
    }
    for host in [format!("/{tag}"), format!("/etc/{tag}")] {
        assert!(!Path::new(&host).exists(), "{host} created on the host");
    }
    let new_root: Vec<_> = entries("/").difference(&root_before).cloned().collect();
    assert!(new_root.is_empty(), "new in the host's /: {new_root:?}");
    let new_etc: Vec<_> = entries("/etc").difference(&etc_before).cloned().collect();
    assert!(new_etc.is_empty(), "new in the host's /etc: {new_etc:?}");
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for p in &problems {
        *kinds
            .entry(p.split_once(": ").map_or(p.as_str(), |x| x.1).to_string())
            .or_default() += 1;
    }
    assert!(
        problems.is_empty(),
        "{} problems in created containers: {kinds:#?}\nfirst: {}",
        problems.len(),
        problems[0]
    );
    assert!(n >= 100, "only {n} creates");
    assert!(created > 0, "no create succeeded: the race checked nothing");
}

// ---------------------------------------------------------------------------------------
// T5b: the battery. One component at a time, for every name moat resolves inside a shared
// rootfs or volume during create.
//
// The components, derived from the create sequence (`linux/rootfs.rs`, `devices.rs`,
// `console.rs`, `attrs.rs`), for the victim's spec below (the default mounts, a volume at
// `/vol`, a tmpfs at `/data/<tag>`, a device node, `cwd: /work`, a read-only path and a
// mask in the volume):
//
// | component (host path)  | what moat looks up there               | names moat uses below it |
// |------------------------|----------------------------------------|--------------------------|
// | rootfs/proc            | procfs mount target (moat-named)       | every /proc mask and read-only path |
// | rootfs/sys             | sysfs mount target (moat-named)        | firmware, fs (cgroup), the /sys masks |
// | rootfs/dev             | /dev tmpfs target (moat-named)         | pts, shm, mqueue, null, zero, full, random, urandom, tty, the spec's node, fd, stdin, stdout, stderr, ptmx, core |
// | rootfs/data            | spec mount destination /data/<tag>     | <tag> |
// | rootfs/vol             | spec mount destination /vol (a bind)   | sub, masked |
// | rootfs/work            | process.cwd                            | — |
// | vol/sub                | read-only path /vol/sub/ro (moat-named)| ro |
// | vol/sub/ro             | read-only path target                  | — |
// | vol/masked             | masked path target                     | — |
//
// The root path itself is the engine's (a host path moat opens once, following host
// symlinks as runc does) and the executable's PATH probes are the container's own lookups
// after pivot; neither is raced here. Names inside procfs, sysfs and the tmpfs/devpts moat
// mounts cannot be renamed by anyone else and are not raced either.
//
// For each component a racer (the probe, a second process on the host) exchanges it with
// a decoy — a directory holding a symlink under every name moat uses below it, pointing at
// what an attacker wants (`acpi -> /proc.decoy/sys`: the host's sysctls through the
// procfs, once the real /proc is at the decoy's name; `null -> core_pattern`; `pts -> /`)
// — or, for a leaf, a symlink itself; `/dev` also with an empty directory (nodes made by
// name would land on the shared rootfs's disk), `vol/sub` too (the read-only path would look
// missing, and a missing target skipped would be a dodge; RESTRICTED only, since OPEN skips a
// missing target as runc does). `MOAT_RACE_ROUNDS` creates per component
// (default 100; `scripts/race` runs a long battery), alternately RESTRICTED and OPEN.
//
// Oracle after each create (the container's mountinfo, read from the host before it runs,
// and read again once the racer has stopped for a suspect): exactly one procfs and one
// sysfs root mount; every other procfs/sysfs mount read-only (no rw bind of a procfs
// subtree anywhere); below the procfs every planned mask is the empty read-only tmpfs or
// /dev/null (1:3) and every read-only path read-only; /sys/firmware masked; below each
// mount of the volume, `sub/ro` a read-only bind of itself and `masked` the mask; the
// container's /dev holds the real nodes. After the battery: nothing new anywhere in the
// shared tree, in the host's `/` or `/etc`.

struct Case {
    name: &'static str,
    /// Only RESTRICTED victims: OPEN skips a missing masked or read-only target as runc does.
    restricted_only: bool,
    /// The component, relative to the shared directory.
    real: String,
    /// How the decoy is made, given its host path.
    decoy: Box<dyn Fn(&Path)>,
}

fn links<S: AsRef<str>>(dir: &Path, pairs: &[(S, String)]) {
    fs::create_dir_all(dir).unwrap();
    for (name, target) in pairs {
        symlink(target, dir.join(name.as_ref())).unwrap();
    }
}

/// Every mount of `pid`, with ids.
struct MntId {
    m: Mnt,
    id: u32,
    parent: u32,
}

fn mountinfo_ids(pid: i32) -> Option<Vec<MntId>> {
    let text = fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let ids: Vec<(u32, u32)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    let m = mountinfo(pid)?;
    (ids.len() == m.len()).then(|| {
        m.into_iter()
            .zip(ids)
            .map(|(m, (id, parent))| MntId { m, id, parent })
            .collect()
    })
}

struct Plan {
    /// Names below /proc: (name, is a directory) that exist on this kernel.
    proc_masks: Vec<(String, bool)>,
    proc_ro: Vec<String>,
    sys_masks: Vec<(String, bool)>,
    /// The volume bind's root in the volume's filesystem (mountinfo field 4).
    vol_root: String,
    devices: Vec<(&'static str, u64)>,
}

fn plan_of(config: &serde_json::Value) -> Plan {
    let list = |k: &str| -> Vec<String> {
        config["linux"][k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let below = |prefix: &str, l: &[String]| -> Vec<(String, bool)> {
        l.iter()
            .filter_map(|p| p.strip_prefix(prefix))
            .filter_map(|n| {
                let md = fs::symlink_metadata(format!("{prefix}{n}")).ok()?;
                Some((n.to_string(), md.is_dir()))
            })
            .collect()
    };
    let masked = list("maskedPaths");
    Plan {
        proc_masks: below("/proc/", &masked),
        proc_ro: below("/proc/", &list("readonlyPaths"))
            .into_iter()
            .map(|x| x.0)
            .collect(),
        sys_masks: below("/sys/", &masked),
        vol_root: String::new(),
        devices: vec![
            ("null", libc::makedev(1, 3)),
            ("zero", libc::makedev(1, 5)),
            ("full", libc::makedev(1, 7)),
            ("urandom", libc::makedev(1, 9)),
            ("moat-race", libc::makedev(1, 8)),
        ],
    }
}

/// What is wrong with the created container `pid`, against the plan (empty: nothing).
fn audit_plan(pid: i32, plan: &Plan) -> Vec<String> {
    let Some(ms) = mountinfo_ids(pid) else {
        return vec![];
    };
    let mut bad = Vec::new();
    let root = format!("/proc/{pid}/root");
    let top = |point: &str| ms.iter().rev().find(|x| x.m.point == point);
    let ro = |x: &MntId| x.m.opts.iter().any(|o| o == "ro");
    let is_mask = |point: &str, dir: bool| match top(point) {
        Some(x) if dir => x.m.fstype == "tmpfs" && x.m.root == "/" && ro(x),
        // A file mask is a bind of the container's /dev/null.
        Some(x) => {
            x.m.root.ends_with("/null")
                && fs::symlink_metadata(format!("{root}{point}")).is_ok_and(|md| {
                    md.file_type().is_char_device() && md.rdev() == libc::makedev(1, 3)
                })
        }
        None => false,
    };
    for fstype in ["proc", "sysfs"] {
        let roots: Vec<_> = ms
            .iter()
            .filter(|x| x.m.fstype == fstype && x.m.root == "/")
            .collect();
        if roots.len() != 1 {
            bad.push(format!("{} {fstype} root mounts (plan: 1)", roots.len()));
        }
        for x in ms
            .iter()
            .filter(|x| x.m.fstype == fstype && x.m.root != "/")
        {
            if !ro(x) {
                bad.push(format!(
                    "read-write {fstype} bind of {} at {}",
                    x.m.root, x.m.point
                ));
            }
        }
        for r in roots {
            let p = &r.m.point;
            if fstype == "proc" {
                for (n, dir) in &plan.proc_masks {
                    if !is_mask(&join(p, n), *dir) {
                        bad.push(format!("procfs at {p}: {n} not masked"));
                    }
                }
                for n in &plan.proc_ro {
                    let ok = top(&join(p, n)).is_some_and(|x| {
                        x.m.fstype == "proc" && x.m.root == format!("/{n}") && ro(x)
                    });
                    if !ok {
                        bad.push(format!("procfs at {p}: {n} not read-only"));
                    }
                }
            } else {
                for (n, dir) in &plan.sys_masks {
                    if !is_mask(&join(p, n), *dir) {
                        bad.push(format!("sysfs at {p}: {n} not masked"));
                    }
                }
            }
        }
    }
    let vols: Vec<_> = ms.iter().filter(|x| x.m.root == plan.vol_root).collect();
    if vols.is_empty() {
        bad.push("the volume is not mounted".into());
    }
    for v in vols {
        let p = &v.m.point;
        let ro_ok = top(&join(p, "sub/ro"))
            .is_some_and(|x| x.m.root == format!("{}/sub/ro", plan.vol_root) && ro(x));
        if !ro_ok {
            bad.push(format!("volume at {p}: sub/ro not read-only"));
        }
        if !is_mask(&join(p, "masked"), true) {
            bad.push(format!("volume at {p}: masked not masked"));
        }
    }
    // The container's /dev: the tmpfs devpts is mounted on.
    let dev = ms
        .iter()
        .find(|x| x.m.fstype == "devpts")
        .and_then(|pts| ms.iter().find(|x| x.id == pts.parent));
    match dev {
        None => bad.push("no /dev with a devpts".into()),
        Some(d) => {
            for (n, rdev) in &plan.devices {
                let node = format!("{root}{}", join(&d.m.point, n));
                let ok = fs::symlink_metadata(&node)
                    .is_ok_and(|md| md.file_type().is_char_device() && md.rdev() == *rdev);
                if !ok {
                    bad.push(format!("/dev at {}: {n} is not the device", d.m.point));
                }
            }
        }
    }
    bad
}

/// Every path below `dir` with its file type (for "nothing was written here").
fn tree(dir: &Path) -> std::collections::BTreeSet<(String, u32)> {
    let mut out = std::collections::BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(md) = fs::symlink_metadata(&p) else {
                continue;
            };
            out.insert((p.display().to_string(), md.mode() & libc::S_IFMT));
            if md.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}

/// The racer: the probe, run on the host, exchanging `a` and `b` in a loop until killed.
fn racer(probe: &Path, a: &Path, b: &Path, io: &Path) -> Running {
    let mut cmd = std::process::Command::new(probe);
    cmd.args(["flip", "600"])
        .arg(format!("{},{}", a.display(), b.display()));
    spawn_bg(cmd, io)
}

fn stop(r: Running) -> String {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(r.pid()),
        nix::sys::signal::Signal::SIGTERM,
    );
    r.wait(Duration::from_secs(20)).stdout.trim().to_string()
}

fn rounds() -> usize {
    std::env::var("MOAT_RACE_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100)
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t5_race_battery_every_component_flipped_with_a_decoy() {
    if !require_root() {
        return;
    }
    let Some(probe) = probe() else {
        return;
    };
    let tag = format!("moat-t5b-{}", std::process::id());
    let mut r = ctx("t5b", Policy::Restricted);
    let s = r.dir.join("shared");
    let rootfs = s.join("rootfs");
    copy_tree(shared_rootfs(), &rootfs);
    let vol = s.join("vol");
    for d in [
        vol.join("sub/ro"),
        vol.join("masked"),
        rootfs.join("data"),
        rootfs.join("work"),
    ] {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(vol.join("sub/ro/file"), "ro\n").unwrap();
    fs::write(vol.join("masked/secret"), "secret\n").unwrap();
    let victim = |policy: Policy| {
        let mut b = ctx("t5b", policy);
        b.set("/root", json!({"path": rootfs, "readonly": false}));
        b.push(
            "/mounts",
            json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind"]}),
        );
        b.push("/mounts", json!({"destination": format!("/data/{tag}"), "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}));
        b.push("/linux/readonlyPaths", json!("/vol/sub/ro"));
        b.push("/linux/maskedPaths", json!("/vol/masked"));
        b.push(
            "/linux/devices",
            json!({"path": "/dev/moat-race", "type": "c", "major": 1, "minor": 8, "fileMode": 438}),
        );
        b.set("/process/cwd", json!("/work"));
        b.args(&["true"]);
        b
    };
    let bs = [victim(Policy::Restricted), victim(Policy::Open)];
    let mut plan = plan_of(&bs[0].config);
    // Before the race: the victim works, and the audit passes; the volume's root learnt.
    for b in &bs {
        let c = b.create_ok("warmup");
        let ms = mountinfo_ids(c.pid()).unwrap();
        plan.vol_root = ms
            .iter()
            .rev()
            .find(|x| x.m.point == "/vol")
            .map(|x| x.m.root.clone())
            .expect("the volume is mounted at /vol");
        let bad = audit_plan(c.pid(), &plan);
        assert!(bad.is_empty(), "without a race: {bad:?}");
    }

    let proc_names: Vec<(String, String)> = plan
        .proc_masks
        .iter()
        .cloned()
        .chain(plan.proc_ro.iter().map(|n| (n.clone(), true)))
        .map(|(n, dir)| {
            let t = if dir {
                "/proc.decoy/sys"
            } else {
                "/proc.decoy/sys/kernel/core_pattern"
            };
            (n, t.to_string())
        })
        .collect();
    let sys_names: Vec<(&str, String)> = ["firmware", "fs", "dev", "devices", "kernel"]
        .into_iter()
        .map(|n| (n, "/sys.decoy/kernel".to_string()))
        .collect();
    let dev_names: Vec<(&str, String)> = [
        ("null", "/proc/sys/kernel/core_pattern".to_string()),
        ("pts", "/".into()),
        ("shm", "/".into()),
        ("mqueue", "/".into()),
    ]
    .into_iter()
    .chain(
        [
            "zero",
            "full",
            "random",
            "urandom",
            "tty",
            "moat-race",
            "console",
            "ptmx",
            "fd",
            "core",
        ]
        .into_iter()
        .map(|n| (n, format!("/etc/{tag}"))),
    )
    .collect();
    let t = tag.clone();
    let cases: Vec<Case> = vec![
        Case {
            name: "rootfs/proc",
            restricted_only: false,
            real: "rootfs/proc".into(),
            decoy: Box::new(move |d| links(d, &proc_names)),
        },
        Case {
            name: "rootfs/sys",
            restricted_only: false,
            real: "rootfs/sys".into(),
            decoy: Box::new(move |d| links(d, &sys_names)),
        },
        Case {
            name: "rootfs/dev (links)",
            restricted_only: false,
            real: "rootfs/dev".into(),
            decoy: Box::new(move |d| links(d, &dev_names)),
        },
        Case {
            name: "rootfs/dev (empty)",
            restricted_only: false,
            real: "rootfs/dev".into(),
            decoy: Box::new(|d| links::<&str>(d, &[])),
        },
        Case {
            name: "rootfs/data",
            restricted_only: false,
            real: "rootfs/data".into(),
            decoy: Box::new(move |d| links(d, &[(t.as_str(), "/etc".to_string())])),
        },
        Case {
            name: "rootfs/vol",
            restricted_only: false,
            real: "rootfs/vol".into(),
            decoy: Box::new(|d| {
                links(
                    d,
                    &[("sub", "/proc".into()), ("masked", "/proc/sys".into())],
                )
            }),
        },
        Case {
            name: "rootfs/work",
            restricted_only: false,
            real: "rootfs/work".into(),
            decoy: Box::new(|d| links::<&str>(d, &[])),
        },
        Case {
            name: "vol/sub",
            restricted_only: false,
            real: "vol/sub".into(),
            decoy: Box::new(|d| links(d, &[("ro", "/etc".into())])),
        },
        Case {
            name: "vol/sub (empty)",
            restricted_only: true,
            real: "vol/sub".into(),
            decoy: Box::new(|d| links::<&str>(d, &[])),
        },
        Case {
            name: "vol/sub/ro",
            restricted_only: false,
            real: "vol/sub/ro".into(),
            decoy: Box::new(|d| symlink("/etc", d).unwrap()),
        },
        Case {
            name: "vol/masked",
            restricted_only: false,
            real: "vol/masked".into(),
            decoy: Box::new(|d| symlink("/etc", d).unwrap()),
        },
    ];

    let n = rounds();
    let root_before = entries("/");
    let etc_before = entries("/etc");
    let mut report = Vec::new();
    let mut problems = Vec::new();
    for case in &cases {
        let real = s.join(&case.real);
        let decoy_path = PathBuf::from(format!("{}.decoy", real.display()));
        (case.decoy)(&decoy_path);
        let shared_before = tree(&s);
        let flip = racer(probe, &real, &decoy_path, &r.io);
        let (mut created, mut refused) = (0, 0);
        let mut alive = Vec::new();
        let mut errors = std::collections::BTreeMap::<String, usize>::new();
        for i in 0..n {
            let b = &bs[if case.restricted_only { 0 } else { i % 2 }];
            let (c, out) = b.create(&format!("b{}-{i}", report.len()));
            if out.code == 0 {
                created += 1;
                // The first look, while the racer runs; judged once it has stopped.
                let _ = audit_plan(c.pid(), &plan);
                alive.push((i, c));
            } else {
                refused += 1;
                let key: String = out.stderr.chars().take(120).collect();
                *errors.entry(key).or_default() += 1;
            }
        }
        let flips = stop(flip);
        // The racer stopped with every name back in place: judge every created container.
        // A hit: the race landed in the window (a mount of it now sits on the decoy).
        let (mut bad, mut hits) = (0, 0);
        for (i, c) in &alive {
            let pid = c.pid();
            let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_default();
            let on_decoy = |x: &Mnt| x.point.contains(".decoy") || x.point == "/etc";
            if cwd.to_string_lossy().contains(".decoy")
                || mountinfo(pid).is_some_and(|m| m.iter().any(on_decoy))
            {
                hits += 1;
            }
            let again = audit_plan(pid, &plan);
            if !again.is_empty() {
                if bad == 0 {
                    let mi =
                        fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
                    eprintln!(
                        "T5b {}: mounts of the first bad container:\n{mi}",
                        case.name
                    );
                }
                bad += 1;
                for p in again {
                    problems.push(format!("{} create {i}: {p}", case.name));
                }
            }
        }
        drop(alive);
        let shared_after = tree(&s);
        let written: Vec<_> = shared_after.difference(&shared_before).cloned().collect();
        for w in &written {
            problems.push(format!(
                "{}: written into the shared tree: {w:?}",
                case.name
            ));
        }
        remove(&decoy_path);
        eprintln!(
            "T5b {:<20} {n} creates: {created} created ({hits} with a mount on the decoy), {refused} refused, {bad} bad; racer: {flips}",
            case.name
        );
        for (e, k) in &errors {
            eprintln!("T5b {:<20}   {k} x {e}", case.name);
        }
        report.push((case.name, created, refused, bad));
        assert!(
            flips.contains("flips=") && !flips.contains("flips=0 "),
            "{}: the racer did not run: {flips:?}",
            case.name
        );
    }
    let new_root: Vec<_> = entries("/").difference(&root_before).cloned().collect();
    assert!(new_root.is_empty(), "new in the host's /: {new_root:?}");
    let new_etc: Vec<_> = entries("/etc").difference(&etc_before).cloned().collect();
    assert!(new_etc.is_empty(), "new in the host's /etc: {new_etc:?}");
    assert!(
        problems.is_empty(),
        "{} problems: {:#?}",
        problems.len(),
        &problems[..problems.len().min(30)]
    );
    for (name, created, _, _) in &report {
        assert!(
            *created > 0,
            "{name}: no create succeeded: the race checked nothing"
        );
    }
    r.args(&["true"]);
}

fn remove(p: &Path) {
    match fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => fs::remove_dir_all(p).unwrap(),
        Ok(_) => fs::remove_file(p).unwrap(),
        Err(_) => {}
    }
}

/// A rootfs whose `/dev` is a symlink is refused (moat names `/dev` itself: device nodes, the
/// console and `/dev/null` for the masks are made relative to it), with the spec's `/dev`
/// tmpfs and without one; nothing is created where the link points.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t5_symlinked_dev_is_refused() {
    if !require_root() {
        return;
    }
    for keep_dev_mount in [true, false] {
        let mut c = ctx("t5dev", Policy::Open);
        let r = c.rootfs();
        fs::remove_dir_all(r.join("dev")).unwrap();
        fs::create_dir_all(r.join("fakedev")).unwrap();
        symlink("/fakedev", r.join("dev")).unwrap();
        if !keep_dev_mount {
            c.config["mounts"]
                .as_array_mut()
                .unwrap()
                .retain(|m| !m["destination"].as_str().unwrap_or("").starts_with("/dev"));
        }
        c.args(&["true"]);
        let (g, out) = c.create("c");
        assert_eq!(out.code, 1, "create accepted a symlinked /dev: {out:#?}");
        assert!(
            out.stderr.contains("/dev") && out.stderr.contains("symlink"),
            "{}",
            out.stderr
        );
        c.assert_no_trace(&g.id);
        let made: Vec<_> = fs::read_dir(r.join("fakedev")).unwrap().flatten().collect();
        assert!(made.is_empty(), "created through the link: {made:?}");
    }
}
