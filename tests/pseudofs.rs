//! Binds of kernel interfaces under RESTRICTED: a bind whose mount is a procfs, sysfs,
//! cgroupfs, devtmpfs (but a few device nodes), … — or a recursive bind carrying one — is
//! refused before the container exists, naming `mounts[i]`, its destination and the type;
//! under OPEN the same bind works, as with runc.

mod support;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use support::*;

/// Every refused type, as mountinfo names it.
const REFUSED: &[&str] = &[
    "proc",
    "sysfs",
    "debugfs",
    "tracefs",
    "securityfs",
    "bpf",
    "configfs",
    "pstore",
    "efivarfs",
    "binfmt_misc",
    "nsfs",
    "selinuxfs",
    "fusectl",
    "cgroup",
    "cgroup2",
    "devtmpfs",
];

/// A mount the test made on the host; lazily unmounted however the test ends.
struct HostMount(PathBuf);

impl HostMount {
    fn new(src: &str, at: &Path, fstype: Option<&str>, flags: libc::c_ulong) -> Option<Self> {
        let s = CString::new(src).unwrap();
        let t = CString::new(at.to_str().unwrap()).unwrap();
        let ty = fstype.map(|f| CString::new(f).unwrap());
        // SAFETY: NUL-terminated strings (or null for a bind's type); no data.
        let rc = unsafe {
            libc::mount(
                s.as_ptr(),
                t.as_ptr(),
                ty.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
                flags,
                std::ptr::null(),
            )
        };
        (rc == 0).then(|| HostMount(at.to_path_buf()))
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let t = CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A directory of the test's, removed however the test ends (after the mounts in it, which
/// are made later and so dropped first).
struct TestDir(PathBuf);

impl TestDir {
    fn new(tag: &str) -> Self {
        let d = tmp_base().join(format!("moat-it-{}-pseudofs-{tag}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The host's mounts as (mount point, type), topmost at each mount point only, and only
/// mount points with no escaped characters (spaces and such).
fn host_mounts() -> Vec<(String, String)> {
    let text = read("/proc/self/mountinfo");
    let all: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            Some((f.get(4)?.to_string(), f.get(sep + 1)?.to_string()))
        })
        .collect();
    all.iter()
        .enumerate()
        .filter(|(i, (mp, _))| !mp.contains('\\') && !all[i + 1..].iter().any(|(m, _)| m == mp))
        .map(|(_, m)| m.clone())
        .collect()
}

/// Binds `source` at `dest` in a new RESTRICTED container: the create must fail naming
/// `mounts[i]`, `dest` and `fstype`, and leave nothing behind.
#[track_caller]
fn assert_refused(tag: &str, source: &Path, dest: &str, option: &str, fstype: &str) {
    let mut ctx = Ctx::new(tag);
    ctx.restricted();
    let index = ctx.config["mounts"].as_array().map_or(0, |m| m.len());
    ctx.push(
        "/mounts",
        json!({"destination": dest, "type": "bind", "source": source, "options": [option]}),
    );
    ctx.args(&["true"]);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    let line = format!("mounts[{index}] {dest}: ");
    assert!(
        out.stderr.contains(&line) && out.stderr.contains(&format!(" {fstype}")),
        "{} bound at {dest}: expected an error naming {line:?} and {fstype}: {}",
        source.display(),
        out.stderr
    );
    assert_eq!(
        out.stderr_lines().len(),
        1,
        "one error line: {}",
        out.stderr
    );
    eprintln!("refused as it should be: {}", out.stderr.trim());
    ctx.assert_no_trace(&c.id);
}

/// Runs `script` in a RESTRICTED container with `mounts` pushed; returns its stdout.
fn run_restricted(tag: &str, mounts: &[Value], script: &str) -> String {
    let mut ctx = Ctx::new(tag);
    ctx.restricted();
    for m in mounts {
        ctx.push("/mounts", m.clone());
    }
    ctx.sh(script);
    run_to_end(&ctx, "c").0
}

/// Every refused type mounted on this host, bound into a RESTRICTED container: refused.
/// Types the host lacks are mounted by the test where the kernel has them (in its own
/// directory, unmounted however the test ends); the rest are named as not tested.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_kernel_filesystem_bound_is_refused_under_restricted() {
    if !require_root() {
        return;
    }
    let tmp = TestDir::new("sweep");
    let dir = &tmp.0;
    let host = host_mounts();
    let mut held = Vec::new();
    let mut tested = Vec::new();
    let mut untested = Vec::new();
    for (i, fstype) in REFUSED.iter().enumerate() {
        let source = match host.iter().find(|(_, t)| t == fstype) {
            Some((mp, _)) => PathBuf::from(mp),
            None => {
                let at = dir.join(fstype);
                let made = if *fstype == "nsfs" {
                    fs::write(&at, "").unwrap();
                    HostMount::new("/proc/self/ns/net", &at, None, libc::MS_BIND)
                } else {
                    fs::create_dir_all(&at).unwrap();
                    HostMount::new(fstype, &at, Some(fstype), 0)
                };
                match made {
                    Some(m) => {
                        held.push(m);
                        at
                    }
                    None => {
                        untested.push(*fstype);
                        continue;
                    }
                }
            }
        };
        assert_refused(&format!("sweep{i}"), &source, "/mnt/k", "bind", fstype);
        tested.push(format!("{fstype} ({})", source.display()));
    }
    drop(held);
    eprintln!("refused under RESTRICTED: {}", tested.join(", "));
    if !untested.is_empty() {
        eprintln!(
            "NOT TESTED (neither mounted on this host nor mountable here): {}",
            untested.join(", ")
        );
    }
    assert!(tested.iter().any(|t| t.starts_with("proc ")), "{tested:?}");
}

/// OPEN keeps runc's semantics: the host's /proc bound elsewhere is the host's procfs.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn host_proc_bind_works_under_open() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("procopen");
    ctx.push(
        "/mounts",
        json!({"destination": "/hostproc", "type": "bind", "source": "/proc", "options": ["rbind"]}),
    );
    ctx.sh("test -f /hostproc/sys/kernel/core_pattern && echo host-proc");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "host-proc\n", "{err}");
}

/// `/proc` as a bind of the host's `/proc` (allowed under OPEN without a pid namespace)
/// is a bind of host procfs: refused under RESTRICTED, leaving nothing behind, even where
/// the config lets the container share the host's pid namespace.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn proc_as_host_proc_bind_is_refused_under_restricted() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("procbind");
    let config = ctx.dir.join("restricted-host-pid.toml");
    fs::write(&config, "[restricted]\nhost_namespaces = [\"pid\"]\n").unwrap();
    ctx.use_config(&config);
    ctx.without_ns("pid");
    let m = ctx.config["mounts"]
        .as_array_mut()
        .expect("mounts")
        .iter_mut()
        .find(|m| m["destination"] == "/proc")
        .expect("a /proc mount in the spec");
    *m = json!({"destination": "/proc", "type": "none", "source": "/proc",
                "options": ["rbind", "nosuid", "nodev", "noexec"]});
    ctx.args(&["true"]);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains(" /proc: the bind's source is on proc, a kernel interface"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// A directory with a procfs mounted below it: `rbind` carries the procfs and is
/// refused; `bind` leaves it out and is allowed.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rbind_carrying_a_procfs_is_refused_and_bind_is_not() {
    if !require_root() {
        return;
    }
    let tmp = TestDir::new("rbind");
    let dir = &tmp.0;
    let inner = dir.join("vol/deep/proc");
    fs::create_dir_all(&inner).unwrap();
    fs::write(dir.join("vol/file"), "from-host\n").unwrap();
    let held = HostMount::new("proc", &inner, Some("proc"), 0).expect("mount proc in the volume");
    let vol = dir.join("vol");
    assert_refused("rbindproc", &vol, "/mnt/v", "rbind", "proc");
    let out = run_restricted(
        "bindproc",
        &[json!({"destination": "/mnt/v", "type": "bind", "source": vol, "options": ["bind"]})],
        "cat /mnt/v/file; echo n:$(ls -A /mnt/v/deep/proc)",
    );
    assert_eq!(out, "from-host\nn:\n");
    drop(held);
}

/// The first block device node under /dev, if any.
fn a_block_device() -> Option<PathBuf> {
    fs::read_dir("/dev")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_block_device()))
}

/// Engines bind `--device` nodes in a user namespace: the allow-listed character devices
/// of devtmpfs may be bound; any other node of it may not.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn allowed_device_nodes_bind_and_others_are_refused() {
    if !require_root() {
        return;
    }
    for dev in ["/dev/null", "/dev/kmsg"] {
        let dev_on_devtmpfs = host_mounts()
            .iter()
            .any(|(mp, t)| mp == "/dev" && t == "devtmpfs");
        if !dev_on_devtmpfs || !Path::new(dev).exists() {
            missing(&format!("{dev} on a devtmpfs at /dev"));
            return;
        }
    }
    let out = run_restricted(
        "devnull",
        &[
            json!({"destination": "/mnt/null", "type": "bind", "source": "/dev/null",
                  "options": ["bind"]}),
        ],
        "test -c /mnt/null && echo x > /mnt/null && echo null-ok",
    );
    assert_eq!(out, "null-ok\n");
    let kmsg = fs::metadata("/dev/kmsg").unwrap();
    assert_eq!(
        (libc::major(kmsg.rdev()), libc::minor(kmsg.rdev())),
        (1, 11)
    );
    assert_refused(
        "kmsg",
        Path::new("/dev/kmsg"),
        "/mnt/kmsg",
        "bind",
        "devtmpfs",
    );
    match a_block_device() {
        Some(b) => assert_refused("blockdev", &b, "/mnt/blk", "bind", "devtmpfs"),
        None => eprintln!("NOT TESTED: a block device bind (no block device node in /dev)"),
    }
}
