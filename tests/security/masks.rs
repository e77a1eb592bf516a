//! T6 (CVE-2025-31133, youki's masked-directory TOCTOU): masked paths are really masked —
//! files by the real null device, directories by an empty read-only mount — and read-only
//! paths refuse writes all the way down. Under OPEN the container's root is the host's
//! root, so only the mounts stand between it and `/proc/sysrq-trigger`.

use std::fs;
use std::path::Path;

use crate::support::*;
use crate::{ctx, BOTH};

/// T6: `/proc/kcore`, `/proc/keys`, `/proc/timer_list` read empty and are char 1:3;
/// `/sys/firmware` is empty; every writable-looking file under the read-only paths
/// (`/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus`, `/proc/fs`) refuses to
/// open for writing, and a mount below a read-only path is read-only too.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t6_masked_paths_are_masked_and_readonly_paths_are_readonly() {
    if !require_root() {
        return;
    }
    let host_fw = fs::read_dir("/sys/firmware").map(|mut d| d.next().is_some());
    assert!(
        host_fw.unwrap_or(false),
        "host /sys/firmware is empty: the mask check would prove nothing"
    );
    for policy in BOTH {
        let mut ctx = ctx("t6", policy);
        ctx.set("/root/readonly", json!(false));
        fs::create_dir_all(ctx.rootfs().join("data")).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/data/sub", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}),
        );
        ctx.push("/linux/readonlyPaths", json!("/data"));
        let files: Vec<&str> = ["/proc/kcore", "/proc/keys", "/proc/timer_list"]
            .into_iter()
            .filter(|f| Path::new(f).exists())
            .collect();
        assert!(!files.is_empty());
        // `: >> f` opens for writing (O_APPEND|O_CREAT) and writes nothing: harmless if it
        // works, and it must not.
        ctx.sh(&format!(
            "for f in {}; do echo \"$f $(stat -c '%t:%T' $f) $(cat $f | wc -c)\"; done; \
             echo firmware=$(ls -A /sys/firmware | wc -l); \
             n=0; for f in $(find /proc/sys /proc/irq /proc/bus /proc/fs /proc/sysrq-trigger \
                 -type f -perm -200 2>/dev/null); do n=$((n+1)); \
                 (: >> $f) 2>/dev/null && echo WRITABLE $f; done; echo checked=$n; \
             (: >> /data/x) 2>/dev/null && echo WRITABLE /data/x; \
             (: >> /data/sub/x) 2>/dev/null && echo WRITABLE /data/sub/x; \
             mkdir /proc/sys/moat-x 2>/dev/null && echo WRITABLE mkdir; \
             grep -E ' /proc/(sys|sysrq-trigger|irq|bus|fs) ' /proc/self/mountinfo",
            files.join(" ")
        ));
        let (out, err) = run_to_end(&ctx, "c");
        for f in &files {
            assert!(
                out.lines().any(|l| l == format!("{f} 1:3 0")),
                "{policy:?}: {f} is not the null device: {out}{err}"
            );
        }
        assert!(out.contains("firmware=0\n"), "{policy:?}: {out}");
        assert!(
            !out.contains("WRITABLE"),
            "{policy:?}: writable read-only path: {out}"
        );
        let checked = number_after(&out, "checked=").unwrap_or(0);
        assert!(
            checked > 100,
            "{policy:?}: only {checked} files tried: {out}"
        );
        // Each read-only path (of those this kernel has) is its own read-only mount.
        let ro_lines: Vec<&str> = out.lines().filter(|l| l.contains(" /proc/")).collect();
        for p in [
            "/proc/sys",
            "/proc/sysrq-trigger",
            "/proc/irq",
            "/proc/bus",
            "/proc/fs",
        ] {
            if !Path::new(p).exists() {
                continue;
            }
            let l = ro_lines
                .iter()
                .find(|l| l.split(' ').nth(4) == Some(p))
                .unwrap_or_else(|| panic!("{policy:?}: no mount at {p}: {out}"));
            let opts = l.split(' ').nth(5).unwrap();
            assert!(opts.split(',').any(|o| o == "ro"), "{policy:?}: {l}");
        }
        assert!(!ctx.rootfs().join("data/x").exists());
    }
}
