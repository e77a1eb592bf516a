//! T4 (CVE-2019-16884, CVE-2019-19921, CVE-2023-27561/28642, CVE-2025-54867): an image or a
//! spec that puts something other than the real procfs/sysfs at `/proc` or `/sys`. moat
//! writes LSM labels and sysctls through `/proc` and masks through both, so each is refused
//! at create, under either policy.

use std::fs;
use std::os::unix::fs::symlink;

use crate::support::*;
use crate::{ctx, BOTH};

#[track_caller]
fn refused(ctx: &Ctx, name: &str, needle: &str) {
    let (c, out) = ctx.create(name);
    assert_eq!(out.code, 1, "create accepted it: {out:#?}");
    assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

fn with_fake(ctx: &Ctx, dir: &str) {
    let fake = ctx.rootfs().join(format!("fake{dir}"));
    fs::create_dir_all(&fake).unwrap();
    fs::write(fake.join("marker"), "fake\n").unwrap();
}

/// T4: rootfs `/proc` is a symlink (to a directory of the image's choosing).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t4_proc_symlink_in_rootfs_is_refused() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t4procln", policy);
        with_fake(&ctx, "proc");
        fs::remove_dir(ctx.rootfs().join("proc")).unwrap();
        symlink("/fakeproc", ctx.rootfs().join("proc")).unwrap();
        ctx.args(&["true"]);
        refused(&ctx, "c", "/proc");
    }
}

/// T4: rootfs `/sys` is a symlink.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t4_sys_symlink_in_rootfs_is_refused() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t4sysln", policy);
        with_fake(&ctx, "sys");
        fs::remove_dir(ctx.rootfs().join("sys")).unwrap();
        symlink("fakesys", ctx.rootfs().join("sys")).unwrap();
        ctx.args(&["true"]);
        refused(&ctx, "c", "/sys");
    }
}

/// T4: a spec bind mount over `/proc` (a volume of fake proc files), whether it replaces
/// the procfs mount or is stacked after it; and a tmpfs at `/proc`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t4_bind_or_other_fs_over_proc_is_refused() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t4procbind", policy);
        let vol = ctx.dir.join("fakeproc");
        fs::create_dir_all(vol.join("self/attr")).unwrap();
        fs::write(vol.join("self/attr/exec"), "").unwrap();
        ctx.args(&["true"]);
        let base = ctx.config.clone();
        // Stacked on top of the real one.
        ctx.push(
            "/mounts",
            json!({"destination": "/proc", "type": "bind", "source": vol, "options": ["rbind"]}),
        );
        refused(&ctx, "stacked", "/proc");
        // Replacing it.
        ctx.config = base.clone();
        for m in ctx.config["mounts"].as_array_mut().unwrap() {
            if m["destination"] == "/proc" {
                *m = json!({"destination": "/proc", "type": "bind", "source": vol, "options": ["rbind"]});
            }
        }
        refused(&ctx, "replaced", "/proc");
        // The same through a destination spelled differently.
        ctx.config = base.clone();
        ctx.push(
            "/mounts",
            json!({"destination": "/tmp/../proc/", "type": "bind", "source": vol, "options": ["bind"]}),
        );
        refused(&ctx, "spelled", "/proc");
        // Not a bind, not procfs.
        ctx.config = base.clone();
        ctx.push(
            "/mounts",
            json!({"destination": "/proc", "type": "tmpfs", "source": "tmpfs"}),
        );
        refused(&ctx, "tmpfs", "/proc");
        // A bind over /sys of anything but the host's /sys.
        ctx.config = base;
        ctx.push(
            "/mounts",
            json!({"destination": "/sys", "type": "bind", "source": vol, "options": ["rbind"]}),
        );
        refused(&ctx, "sysbind", "/sys");
    }
}
