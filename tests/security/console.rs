//! T7 (CVE-2025-52565): with `terminal: true` the console is a pty of the container's own
//! devpts instance — the master moat sends over `--console-socket` is a ptmx (5:2) on
//! devpts, the container's stdio is its peer and `/dev/console` a 136:N device — and an
//! image that pre-creates `/dev/pts` as a symlink cannot redirect any of it to the host.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use crate::support::*;
use crate::{ctx, entries, Policy, BOTH};

const SCRIPT: &str = "readlink /proc/self/fd/0; stat -c '%t:%T %F' /dev/console; \
    stat -f -c %T /dev/pts; stat -c '%t:%T' $(readlink /proc/self/fd/0); \
    grep -E ' /dev/(console|pts) ' /proc/self/mountinfo | cut -d' ' -f5,9";

/// Creates with a console socket; returns (create exit code and stderr, the master, and
/// what the container printed on its terminal) — master and output only if create worked.
fn run_with_console(ctx: &Ctx) -> (Out, Option<(OwnedFd, String)>) {
    let (c, out, fds) = ctx.create_with_console("c");
    let master = fds.and_then(|f| f.into_iter().next());
    if out.code != 0 {
        return (out, None);
    }
    let master = master.expect("create succeeded but sent no master");
    c.start();
    let (text, _) = read_pty(&master, Duration::from_secs(20));
    c.wait_stopped(Duration::from_secs(20));
    (out, Some((master, text)))
}

#[track_caller]
fn assert_devpts_console(policy: Policy, master: &OwnedFd, text: &str) {
    let st = nix::sys::stat::fstat(master.as_raw_fd()).expect("fstat master");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR);
    assert_eq!(
        st.st_rdev,
        libc::makedev(5, 2),
        "{policy:?}: master is not a ptmx"
    );
    let fs = nix::sys::statfs::fstatfs(master).expect("fstatfs");
    assert_eq!(fs.filesystem_type().0, 0x1cd1, "{policy:?}: not devpts");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 5, "{policy:?}: {text:?}");
    let pts = lines[0];
    let n = pts
        .strip_prefix("/dev/pts/")
        .unwrap_or_else(|| panic!("{policy:?}: stdin is {pts}"));
    // 0x88 = 136, the pty peer major.
    assert_eq!(
        lines[1],
        format!("88:{:x} character special file", n.parse::<u32>().unwrap()),
        "{policy:?}"
    );
    assert_eq!(lines[2], "devpts", "{policy:?}: /dev/pts is not devpts");
    assert_eq!(lines[3], format!("88:{:x}", n.parse::<u32>().unwrap()));
    // /dev/console is a bind of the peer (devpts), /dev/pts the devpts instance.
    assert!(lines.contains(&"/dev/pts devpts"), "{policy:?}: {text}");
    assert!(lines.contains(&"/dev/console devpts"), "{policy:?}: {text}");
}

/// T7: the console is a devpts pty, seen from both sides.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t7_console_is_a_devpts_pty() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("t7", policy);
        ctx.set("/process/terminal", json!(true));
        ctx.sh(SCRIPT);
        let (out, got) = run_with_console(&ctx);
        let (master, text) = got.unwrap_or_else(|| panic!("{policy:?}: create failed: {out:#?}"));
        assert_devpts_console(policy, &master, &text);
    }
}

/// T7: an image with `/dev/pts` (and `/dev/console`) pre-created as symlinks pointing out
/// of the rootfs, and no `/dev` tmpfs in the spec so the image's `/dev` is used as is.
/// Either create refuses, or the console is still the container's own devpts pty; nothing
/// appears on the host.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t7_dev_pts_symlink_in_rootfs_has_no_host_effect() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        // A dangling absolute link (were it followed on the host, it would create there),
        // and one to a directory that exists both in the rootfs and on the host.
        for target in ["dangling", "/tmp"] {
            let mut ctx = ctx("t7ln", policy);
            let tag = format!("moat-t7-{}-{}", std::process::id(), policy.tag());
            let dev = ctx.rootfs().join("dev");
            let pts = if target == "dangling" {
                format!("/{tag}")
            } else {
                target.to_string()
            };
            symlink(&pts, dev.join("pts")).unwrap();
            symlink(format!("/{tag}-console"), dev.join("console")).unwrap();
            ctx.config["mounts"]
                .as_array_mut()
                .unwrap()
                .retain(|m| m["destination"] != "/dev");
            ctx.set("/process/terminal", json!(true));
            ctx.set("/root/readonly", json!(false));
            ctx.sh(SCRIPT);
            let root_before = entries("/");
            let tmp_before = entries("/tmp");
            let (out, got) = run_with_console(&ctx);
            for p in [format!("/{tag}"), format!("/{tag}-console")] {
                assert!(
                    !Path::new(&p).exists(),
                    "{policy:?}: {p} created on the host"
                );
            }
            let new: Vec<_> = entries("/").difference(&root_before).cloned().collect();
            assert!(new.is_empty(), "{policy:?}: new in /: {new:?}");
            let new: Vec<_> = entries("/tmp")
                .difference(&tmp_before)
                .filter(|e| e.as_str() == "ptmx" || e.parse::<u32>().is_ok())
                .cloned()
                .collect();
            assert!(
                new.is_empty(),
                "{policy:?}: devpts entries in the host's /tmp: {new:?}"
            );
            match got {
                Some((master, text)) => {
                    eprintln!("{policy:?} /dev/pts -> {pts}: created; {text:?}");
                    let st = nix::sys::stat::fstat(master.as_raw_fd()).expect("fstat");
                    assert_eq!(st.st_rdev, libc::makedev(5, 2), "{policy:?}: not a ptmx");
                    let fs = nix::sys::statfs::fstatfs(&master).expect("fstatfs");
                    assert_eq!(fs.filesystem_type().0, 0x1cd1, "{policy:?}");
                    // The peer is a pty of the container's devpts (wherever the image's
                    // link put that), and so is /dev/console.
                    let lines: Vec<&str> = text.lines().collect();
                    assert!(lines.len() >= 4, "{policy:?}: {text}");
                    assert!(lines[1].starts_with("88:"), "{policy:?}: {text}");
                    assert_eq!(lines[2], "devpts", "{policy:?}: {text}");
                    assert!(lines.contains(&"/dev/console devpts"), "{policy:?}: {text}");
                }
                None => eprintln!(
                    "{policy:?} /dev/pts -> {pts}: create refused: {}",
                    out.stderr
                ),
            }
        }
    }
}
