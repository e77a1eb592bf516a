//! T9 (CVE-2023-25809, CVE-2022-0492): the cgroupfs inside is read-only and the container
//! has its own cgroup namespace. Under OPEN the container's root is the host's root and
//! could otherwise write `release_agent`, limits or `cgroup.procs` of any cgroup it sees.

use crate::support::*;
use crate::{ctx, BOTH};

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t9_cgroupfs_is_read_only_inside() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t9", policy);
        // Every file and directory under /sys/fs/cgroup that looks writable is tried:
        // opening for writing (no data written), mkdir, and a write to the usual targets.
        ctx.sh(
            "n=0; for f in $(find /sys/fs/cgroup -type f -perm -200 2>/dev/null); do \
                 n=$((n+1)); (: >> $f) 2>/dev/null && echo WRITABLE $f; done; echo checked=$n; \
             for d in $(find /sys/fs/cgroup -type d 2>/dev/null); do \
                 mkdir $d/moat-t9 2>/dev/null && { echo MKDIR $d; rmdir $d/moat-t9; }; done; \
             for f in /sys/fs/cgroup/*/release_agent /sys/fs/cgroup/release_agent \
                 /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/cgroup.procs \
                 /sys/fs/cgroup/*/pids.max /sys/fs/cgroup/pids.max; do \
                 [ -e $f ] || continue; echo 1 2>/tmp/err > $f && echo WROTE $f; \
                 grep -q 'Read-only file system' /tmp/err || echo NOT-EROFS $f $(cat /tmp/err); done; \
             grep cgroup /proc/self/mountinfo; readlink /proc/self/ns/cgroup",
        );
        ctx.set("/root/readonly", json!(false));
        let (out, err) = run_to_end(&ctx, "c");
        for bad in ["WRITABLE", "MKDIR", "WROTE", "NOT-EROFS"] {
            assert!(!out.contains(bad), "{policy:?}: {bad}: {out}{err}");
        }
        let checked = number_after(&out, "checked=").unwrap_or(0);
        assert!(
            checked > 10,
            "{policy:?}: only {checked} files tried: {out}"
        );
        for l in out.lines().filter(|l| l.contains(" - cgroup")) {
            let opts = l.split(' ').nth(5).unwrap();
            assert!(
                opts.split(',').any(|o| o == "ro"),
                "{policy:?}: rw cgroup mount {l}"
            );
        }
        let ns = out.lines().last().unwrap_or("");
        assert!(ns.starts_with("cgroup:["), "{out}");
        assert_ne!(ns, host_ns("cgroup"), "{policy:?}: host cgroup namespace");
    }
}
