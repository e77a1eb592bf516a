//! The device floor with real containers: what `--privileged` lists (every node of the
//! host's `/dev`, block devices included, and `a *:* rwm` in the device cgroup) under
//! RESTRICTED and under OPEN.
//!
//! RESTRICTED keeps, by (type, major, minor), only the allow-listed character devices and
//! those `[restricted] allowed_devices` names, and its device cgroup allows exactly those:
//! container root with CAP_MKNOD (allowed here on purpose) cannot make a node of a cut
//! device's numbers under another name and open it. OPEN is runc: a listed block device is
//! there and readable.

mod support;

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use support::*;

/// A device node of the host.
#[derive(Debug, Clone)]
struct Node {
    path: String,
    typ: char,
    major: u32,
    minor: u32,
    mode: u32,
}

/// Every block and character device below the host's `/dev`, as podman's `--privileged`
/// collects them: symlinks and the per-instance filesystems (pts, shm, mqueue) left out.
fn host_nodes() -> Vec<Node> {
    fn walk(dir: &Path, out: &mut Vec<Node>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            let ft = m.file_type();
            if ft.is_dir() {
                let name = e.file_name();
                if !["pts", "shm", "mqueue"].contains(&name.to_str().unwrap_or("")) {
                    walk(&p, out);
                }
                continue;
            }
            let typ = if ft.is_block_device() {
                'b'
            } else if ft.is_char_device() {
                'c'
            } else {
                continue;
            };
            let path = p.to_str().expect("utf-8 device path").to_string();
            // Paths the container's shell script names unquoted.
            if !path
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/-_.:".contains(c))
            {
                continue;
            }
            out.push(Node {
                path,
                typ,
                major: libc::major(m.rdev()),
                minor: libc::minor(m.rdev()),
                mode: m.mode() & 0o777,
            });
        }
    }
    let mut out = Vec::new();
    walk(Path::new("/dev"), &mut out);
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A loop device on a small file of the test's own, detached however the test ends.
struct Loop {
    dev: String,
    major: u32,
    minor: u32,
}

/// What the loop device's first bytes are.
const MARKER: &str = "moat-loop-marker";

impl Loop {
    fn new(dir: &Path) -> Option<Loop> {
        let file = dir.join("loop.img");
        let mut data = MARKER.as_bytes().to_vec();
        data.resize(1 << 20, 0);
        fs::write(&file, data).expect("write loop image");
        let mut cmd = Command::new("losetup");
        cmd.args(["--find", "--show"]).arg(&file);
        let out = run_host_cmd(cmd, CALL_TIMEOUT);
        if out.code != 0 {
            missing(&format!("losetup --find: {}", out.stderr.trim()));
            return None;
        }
        let dev = out.stdout.trim().to_string();
        let rdev = fs::metadata(&dev).expect("stat loop device").rdev();
        Some(Loop {
            dev,
            major: libc::major(rdev),
            minor: libc::minor(rdev),
        })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let mut cmd = Command::new("losetup");
        cmd.args(["-d", &self.dev]);
        let out = run_host_cmd(cmd, CALL_TIMEOUT);
        if out.code != 0 {
            eprintln!("losetup -d {}: {}", self.dev, out.stderr);
        }
    }
}

/// `linux.devices` and `linux.resources.devices` as podman's `--privileged` sends them.
fn privileged(ctx: &mut Ctx, nodes: &[Node]) {
    let devices: Vec<Value> = nodes
        .iter()
        .map(|n| {
            json!({
                "path": n.path, "type": n.typ.to_string(), "major": n.major, "minor": n.minor,
                "fileMode": n.mode, "uid": 0, "gid": 0,
            })
        })
        .collect();
    ctx.set("/linux/devices", json!(devices));
    ctx.set(
        "/linux/resources/devices",
        json!([{"allow": false, "access": "rwm"}, {"allow": true, "access": "rwm"}]),
    );
}

fn config(ctx: &Ctx, text: &str) -> PathBuf {
    let p = ctx.dir.join("moat.toml");
    fs::write(&p, text).unwrap();
    p
}

/// The char devices RESTRICTED keeps by default (devices.txt numbers).
fn allow_listed(n: &Node) -> bool {
    n.typ == 'c'
        && (matches!(
            (n.major, n.minor),
            (1, 3 | 5 | 7 | 8 | 9) | (5, 0..=2) | (10, 229)
        ) || (136..=143).contains(&n.major))
}

/// The per-node probe: whether the listed path is there, then a mknod of the same
/// numbers under another name and an open of it for reading, each `ok` or its error.
const PROBE: &str = r#"
t() {
    if [ -e "$2" ]; then pr=1; else pr=0; fi
    mk=$(mknod /dev/.probe$1 $3 $4 $5 2>&1) && mk=ok
    op=$( (: </dev/.probe$1) 2>&1) && op=ok
    rm -f /dev/.probe$1
    echo "R $1|$pr|$mk|$op"
}
"#;

fn probe_script(nodes: &[Node]) -> String {
    let mut s = PROBE.to_string();
    for (i, n) in nodes.iter().enumerate() {
        s.push_str(&format!(
            "t {i} {} {} {} {}\n",
            n.path, n.typ, n.major, n.minor
        ));
    }
    s
}

/// (present, mknod, open) per node, from the probe's output.
fn results(out: &str, n: usize) -> Vec<(bool, String, String)> {
    let mut r = vec![None; n];
    for l in out.lines().filter_map(|l| l.strip_prefix("R ")) {
        let f: Vec<&str> = l.splitn(4, '|').collect();
        let i: usize = f[0].parse().unwrap();
        r[i] = Some((f[1] == "1", f[2].to_string(), f[3].to_string()));
    }
    r.into_iter()
        .enumerate()
        .map(|(i, x)| x.unwrap_or_else(|| panic!("no probe line for node {i}: {out}")))
        .collect()
}

const EPERM: &str = "Operation not permitted";

/// The sweep: every device node of the host listed as `--privileged` lists them, under
/// RESTRICTED with CAP_MKNOD allowed (so that only the device cgroup stands between a
/// mknod and the device) and `c 10:183` (hwrng) allowed by the operator. Cut nodes are
/// absent and neither a mknod of their numbers nor an open of such a node gets through;
/// kept nodes are there and open.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn restricted_keeps_only_allow_listed_devices_and_the_cgroup_allows_only_those() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("dev-sweep");
    let Some(lp) = Loop::new(&ctx.dir) else {
        return;
    };
    let nodes = host_nodes();
    assert!(
        nodes.iter().any(|n| n.path == lp.dev),
        "{} not among {nodes:?}",
        lp.dev
    );
    assert!(
        nodes.iter().any(|n| n.typ == 'b'),
        "no block device on this host"
    );
    let cfg = config(
        &ctx,
        "[restricted]\nallowed_capabilities = [\"CAP_MKNOD\"]\nallowed_devices = [\"c 10:183\"]\n",
    );
    ctx.use_config(&cfg);
    privileged(&mut ctx, &nodes);
    for set in ["bounding", "permitted", "effective"] {
        ctx.push(&format!("/process/capabilities/{set}"), json!("CAP_MKNOD"));
    }
    let mut script = probe_script(&nodes);
    // The loop device's data, by its numbers under a name of the container's choosing.
    script.push_str(&format!(
        "mknod /dev/.disk b {} {} 2>/dev/null; head -c 16 /dev/.disk 2>&1; head -c 16 {} 2>&1; echo\n",
        lp.major, lp.minor, lp.dev
    ));
    ctx.sh(&script);
    let b = ctx.bundle_str();
    let explain = ctx.moat(&["policy", "explain", "--bundle", &b]).ok().stdout;
    assert!(
        explain.contains(&format!("{} (b {}:{})", lp.dev, lp.major, lp.minor))
            && explain.contains("linux.resources.devices")
            && explain.contains("a *:* rwm"),
        "policy explain names the cuts: {explain}"
    );
    let (out, err) = run_to_end(&ctx, "c");
    assert!(
        !out.contains(MARKER),
        "the loop device's data was read: {out}"
    );
    let res = results(&out, nodes.len());
    let mut cut = 0;
    for (n, (present, mknod, open)) in nodes.iter().zip(&res) {
        let what = format!("{} ({} {}:{})", n.path, n.typ, n.major, n.minor);
        if allow_listed(n) || (n.typ == 'c' && (n.major, n.minor) == (10, 183)) {
            assert!(*present, "{what} is kept: {out}\n{err}");
            assert_eq!(mknod, "ok", "{what}: mknod of a kept device");
            assert!(
                !open.contains(EPERM),
                "{what}: the cgroup allows it: {open}"
            );
            if matches!((n.major, n.minor), (1, 3 | 5 | 9)) {
                assert_eq!(open, "ok", "{what} opens");
            }
        } else {
            cut += 1;
            assert!(!*present, "{what} is cut, yet present in the container");
            assert!(
                mknod.contains(EPERM),
                "{what}: mknod of its numbers must be refused by the device cgroup: {mknod}"
            );
            assert!(open != "ok", "{what}: a node of its numbers opened");
        }
    }
    assert!(cut > 0, "nothing on this host to cut: {nodes:?}");
}

/// OPEN is runc: a block device the spec lists is there and readable.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn open_keeps_a_listed_block_device_readable() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("dev-open");
    let Some(lp) = Loop::new(&ctx.dir) else {
        return;
    };
    let node = Node {
        path: lp.dev.clone(),
        typ: 'b',
        major: lp.major,
        minor: lp.minor,
        mode: 0o660,
    };
    privileged(&mut ctx, &[node]);
    ctx.sh(&format!("head -c 16 {}", lp.dev));
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, MARKER, "{err}");
}

/// A block device in `allowed_devices` is refused at config load, naming key and line.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_block_device_in_allowed_devices_is_refused_at_load() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("dev-cfg");
    let cfg = config(&ctx, "[restricted]\n\nallowed_devices = [\"b 8:0\"]\n");
    ctx.use_config(&cfg);
    let b = ctx.bundle_str();
    let id = ctx.id("c");
    let out = ctx.moat(&["run", "--bundle", &b, &id]).fails();
    assert!(
        out.stderr.contains(&format!(
            "{}:3: restricted.allowed_devices[0]: \"b 8:0\": block devices are never allowed",
            cfg.display()
        )),
        "{}",
        out.stderr
    );
}
