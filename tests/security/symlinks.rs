//! T10 (CVE-2024-45310, CVE-2021-30465 without the race): bind destinations that pass
//! through symlinks in the (hostile) rootfs must resolve inside it; nothing may be created
//! on the host. Path resolution is the mechanism, so OPEN is the real test.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::support::*;
use crate::{ctx, entries, BOTH};

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t10_mount_targets_through_symlinks_create_nothing_on_the_host() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t10", policy);
        let src = ctx.dir.join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("file"), "from-host\n").unwrap();
        let rootfs = ctx.rootfs();
        // Absolute: /escape -> /, relative: /etc/up -> ../../../../tmp (four levels up from
        // the rootfs is the host's /, had it been resolved there).
        symlink("/", rootfs.join("escape")).unwrap();
        symlink("../../../../../../../../tmp", rootfs.join("etc/up")).unwrap();
        let tag = format!("moat-t10-{}-{}", std::process::id(), policy.tag());
        let dests = [
            (format!("/escape/{tag}-d"), true),
            (format!("/escape/{tag}-f"), false),
            (format!("/etc/up/{tag}-d"), true),
            (format!("/etc/up/{tag}-f"), false),
            (format!("/../../../../tmp/{tag}-dotdot"), true),
            (format!("/escape/escape/{tag}-deep/x/y"), true),
        ];
        for (d, is_dir) in &dests {
            let source = if *is_dir {
                src.clone()
            } else {
                src.join("file")
            };
            ctx.push(
                "/mounts",
                json!({"destination": d, "type": "bind", "source": source, "options": ["bind"]}),
            );
        }
        let root_before = entries("/");
        let tmp_before = entries("/tmp");
        ctx.sh(&format!(
            "cat /{tag}-d/file /{tag}-f /tmp/{tag}-d/file /tmp/{tag}-f /tmp/{tag}-dotdot/file"
        ));
        let (out, err) = run_to_end(&ctx, "c");
        for host in [
            format!("/{tag}-d"),
            format!("/{tag}-f"),
            format!("/{tag}-deep"),
            format!("/tmp/{tag}-d"),
            format!("/tmp/{tag}-f"),
            format!("/tmp/{tag}-dotdot"),
        ] {
            assert!(
                !Path::new(&host).exists(),
                "{policy:?}: {host} was created on the host"
            );
        }
        let new_root: Vec<_> = entries("/").difference(&root_before).cloned().collect();
        assert!(new_root.is_empty(), "{policy:?}: new in /: {new_root:?}");
        let new_tmp: Vec<_> = entries("/tmp")
            .difference(&tmp_before)
            .filter(|e| e.contains("moat-t10"))
            .cloned()
            .collect();
        assert!(new_tmp.is_empty(), "{policy:?}: new in /tmp: {new_tmp:?}");
        // Inside, everything landed in the rootfs.
        assert_eq!(out, "from-host\n".repeat(5), "{policy:?}: {err}");
        assert!(rootfs.join(format!("{tag}-deep/x/y")).is_dir());
    }
}

/// T10 under a rename storm: resolving a target through `..` inside the root makes the
/// kernel answer EAGAIN whenever a rename or mount anywhere on the system races with it.
/// A container renaming its own files in a loop must not be able to make other containers'
/// creates fail (nor, retried without bound, hang them).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t10_symlinked_targets_resolve_while_another_container_renames_in_a_loop() {
    if !require_root() {
        return;
    }
    let Some(probe) = crate::probe() else {
        return;
    };
    let mut storm = ctx("t10storm", crate::Policy::Open);
    crate::install(&storm, probe, "probe");
    fs::create_dir(storm.rootfs().join("x")).unwrap();
    symlink("/", storm.rootfs().join("y")).unwrap();
    storm.set("/root/readonly", json!(false));
    storm.args(&["/bin/probe", "flip", "60", "/x,/y"]);
    let s = storm.create_ok("s");
    s.start();
    for policy in BOTH {
        let mut ctx = ctx("t10eagain", policy);
        let src = ctx.dir.join("src");
        fs::create_dir_all(&src).unwrap();
        symlink("../../../../../../tmp", ctx.rootfs().join("etc/up")).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": "/etc/up/a/../b/../../up/d", "type": "bind", "source": src, "options": ["bind"]}),
        );
        ctx.args(&["true"]);
        for i in 0..20 {
            let (c, out) = ctx.create(&format!("c{i}"));
            assert_eq!(out.code, 0, "{policy:?}: create {i} failed: {}", out.stderr);
            drop(c);
        }
    }
    s.kill("TERM");
    s.wait_stopped(std::time::Duration::from_secs(20));
    assert!(
        s.stdout().contains("flips="),
        "the storm did not run: {}",
        s.stdout()
    );
}
