//! What a sandbox can exhaust is bounded: inodes of every tmpfs moat mounts, memory with a
//! throttle (`memory.high`) before the hard limit, and the bytes and inodes of a bounded
//! (ephemeral) writable root.

mod support;

use std::fs;

use support::*;

/// Writes `text` as a moat config in the test's dir and returns its path.
fn config(ctx: &Ctx, name: &str, text: &str) -> String {
    let p = ctx.dir.join(name);
    fs::write(&p, text).expect("write config");
    p.to_str().expect("utf-8").to_string()
}

/// The super options of `mountpoint` in a mountinfo text.
fn super_opts(mountinfo: &str, mountpoint: &str) -> Vec<String> {
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mountpoint))
        .unwrap_or_else(|| panic!("{mountpoint} not in mountinfo:\n{mountinfo}"));
    let (_, post) = line.split_once(" - ").expect("mountinfo separator");
    post.split(' ')
        .nth(2)
        .unwrap()
        .split(',')
        .map(String::from)
        .collect()
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn tmpfs_under_a_read_only_root_stops_at_its_inode_cap() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("inodes");
    let cfg = config(
        &ctx,
        "inodes.toml",
        "[restricted]\nreadonly_rootfs = true\ntmp_inodes = 500\n",
    );
    ctx.use_config(cfg);
    // Each file written until the cap refuses one (a redirection of a regular builtin: no fork a file, and a failure does not end the shell).
    ctx.sh(
        "i=0; while true > /tmp/f$i 2>/dev/null; do i=$((i+1)); done; echo tmp=$i; \
         true > /tmp/one-more || true; \
         i=0; while true > /workspace/f$i 2>/dev/null; do i=$((i+1)); done; echo ws=$i; \
         rm /tmp/f0 && true > /tmp/again && echo freed; \
         cat /proc/self/mountinfo",
    );
    let (out, err) = run_to_end(&ctx, "c");
    // The root directory is one of the 500 inodes.
    assert!(out.contains("tmp=499\n"), "{out}{err}");
    assert!(out.contains("ws=499\n"), "{out}{err}");
    assert!(out.contains("freed\n"), "{out}{err}");
    assert!(err.contains("No space left on device"), "{err}");
    for m in ["/tmp", "/workspace"] {
        let sup = super_opts(&out, m);
        assert!(sup.iter().any(|o| o == "nr_inodes=500"), "{m}: {sup:?}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn dev_and_masked_tmpfs_have_inode_caps() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("devinodes");
    ctx.restricted();
    ctx.sh("cat /proc/self/mountinfo; true > /proc/acpi/x; echo masked=$?");
    let (out, err) = run_to_end(&ctx, "c");
    let dev = super_opts(&out, "/dev");
    assert!(dev.iter().any(|o| o == "nr_inodes=16384"), "/dev: {dev:?}");
    let masked = super_opts(&out, "/proc/acpi");
    assert!(
        masked.iter().any(|o| o == "nr_inodes=1"),
        "/proc/acpi: {masked:?}"
    );
    assert!(
        out.contains("masked=1\n") || out.contains("masked=2\n"),
        "{out}{err}"
    );
}

/// This host's memory controller is cgroup v1 (hybrid): RESTRICTED records that it has no
/// `memory.high` to set, without a warning line, and the limit applies as a hard one. On a
/// cgroup v2 host the same config sets `memory.high` (tests/vm/moat: throttled, pressure,
/// not killed, before memory.max kills).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn memory_high_on_v1_memory_is_recorded_as_absent() {
    if !require_root() {
        return;
    }
    let v2 = fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/sys/fs/cgroup") && l.contains(" - cgroup2 "));
    if v2 {
        missing(
            "cgroup v1 memory controller (this host is pure cgroup v2; tests/vm/moat covers v2)",
        );
        return;
    }
    let mut ctx = Ctx::new("memhigh");
    let cfg = config(&ctx, "mem.toml", "[restricted]\nmemory = \"64m\"\n");
    ctx.use_config(cfg);
    ctx.sh("cat /sys/fs/cgroup/memory/memory.limit_in_bytes");
    let c = ctx.create_ok("c");
    let create_err = c.out.as_ref().map(|o| o.stderr.clone()).unwrap_or_default();
    let policy = fs::read_to_string(ctx.state_dir(&c.id).join("policy.json")).unwrap();
    let spec = fs::read_to_string(ctx.state_dir(&c.id).join("config.json")).unwrap();
    let out = c.start_and_wait();
    let d = c.delete();
    assert_eq!(d.code, 0, "delete: {}", d.stderr);
    assert_eq!(out.trim(), "67108864", "the hard limit");
    let v: serde_json::Value = serde_json::from_str(&policy).unwrap();
    let note = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["field"] == "linux.resources.unified.memory.high")
        .unwrap_or_else(|| panic!("no memory.high note in {policy}"));
    assert_eq!(note["action"], "absent", "{note}");
    assert!(v.get("memory_high").is_none(), "{policy}");
    assert!(!spec.contains("memory.high"), "{spec}");
    assert!(!create_err.contains("memory.high"), "{create_err}");
}
