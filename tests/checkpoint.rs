//! `moat checkpoint` / `moat restore` of a native container through CRIU (moat-criu):
//! a shell loop counting into a file keeps counting from where it was after a restore,
//! with and without `--leave-running`, in the cgroup moat made for it; and the refusals:
//! every runc flag moat does not apply yet, image and work paths the container can write;
//! a container joining a network namespace by path restored into that namespace.
//!
//! CRIU is Debian sid's 4.2.1 with its own libraries (scripts/lib/criu-newer; Debian 12's
//! 3.17 fails on this kernel): `MOAT_TEST_CRIU` names its `criu`, whose directory is put
//! first in PATH for moat's calls, as runc finds `criu`. scripts/test sets it.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use support::sockets::netns_of;
use support::*;

/// The `criu` to use, or `None` (and a loud skip, or a failure under scripts/test).
fn criu() -> Option<PathBuf> {
    match std::env::var_os("MOAT_TEST_CRIU") {
        Some(p) if Path::new(&p).is_file() => Some(PathBuf::from(p)),
        _ => {
            missing("MOAT_TEST_CRIU names no criu (scripts/lib/criu-newer prints one)");
            None
        }
    }
}

/// PATH with `criu`'s directory first.
fn path_with(criu: &Path) -> std::ffi::OsString {
    let mut dirs = vec![criu.parent().expect("criu's directory").to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).expect("PATH")
}

/// `moat ARGS…` with CRIU on PATH.
/// Run from an empty directory of the test's (see [`cwd`]), with a CRIU user configuration
/// naming a relative log file: nothing may land in the caller's working directory.
fn moat(ctx: &Ctx, criu: &Path, args: &[&str]) -> Out {
    ctx.run(moat_cmd(ctx, criu, args))
}

/// [`moat`]'s command, to run as it is or with more in its environment.
fn moat_cmd(ctx: &Ctx, criu: &Path, args: &[&str]) -> std::process::Command {
    let home = ctx.dir.join("home");
    std::fs::create_dir_all(home.join(".criu")).expect("mkdir");
    std::fs::write(
        home.join(".criu/default.conf"),
        "log-file=criu-in-cwd.log\n",
    )
    .expect("write");
    std::fs::create_dir_all(cwd(ctx)).expect("mkdir");
    let mut c = ctx.cmd();
    c.env("PATH", path_with(criu))
        .env("HOME", &home)
        .current_dir(cwd(ctx))
        .args(args);
    c
}

/// `moat restore -d EXTRA… --bundle <ctx's> --image-path IMAGE ID`, CRIU on PATH.
fn restore(ctx: &Ctx, criu: &Path, image: &str, id: &str, extra: &[&str]) -> Out {
    let b = ctx.bundle_str();
    let mut args = vec!["restore", "-d"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--bundle", &b, "--image-path", image, id]);
    moat(ctx, criu, &args)
}

/// The working directory of [`moat`]'s calls.
fn cwd(ctx: &Ctx) -> PathBuf {
    ctx.dir.join("cwd")
}

/// Nothing written into the callers' working directory (CRIU's logs go to the work or
/// image directory).
#[track_caller]
fn assert_cwd_empty(ctx: &Ctx) {
    let left: Vec<_> = std::fs::read_dir(cwd(ctx))
        .expect("cwd")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in the caller's directory: {left:?}");
}

/// A writable root whose init counts into /count every 50 ms, its stdio its own /dev/null
/// (CRIU cannot dump a descriptor of a host file the container's mounts do not show).
fn counter(tag: &str) -> Ctx {
    let mut ctx = Ctx::new(tag);
    ctx.set("/root/readonly", json!(false)).sh(
        "exec </dev/null >/dev/null 2>&1; i=0; while :; do i=$((i+1)); echo $i >/count; sleep 0.05; done",
    );
    ctx
}

fn count(ctx: &Ctx) -> u64 {
    std::fs::read_to_string(ctx.rootfs().join("count"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the counter passes `n`; returns its value.
#[track_caller]
fn count_past(ctx: &Ctx, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = count(ctx);
        if c > n {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "the counter stayed at {c} (waiting to pass {n})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checkpoint then restore, with the original stopped (runc's default: the container is
/// gone after its checkpoint) and left running (then deleted before the restore): the
/// restored shell counts on from its checkpointed value, not from 1; its record names it,
/// it is in the container's cgroup, and a delete leaves nothing.
#[test]
#[ignore = "root: real containers, CRIU"]
fn restored_container_counts_on() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    for leave_running in [false, true] {
        let ctx = counter(if leave_running { "ckleave" } else { "ckstop" });
        let c = ctx.create_ok("c");
        c.start();
        count_past(&ctx, 10);
        let img = ctx.dir.join("image");
        let img_s = img.to_str().expect("utf-8");
        let mut args = vec!["checkpoint", "--image-path", img_s];
        if leave_running {
            args.push("--leave-running");
        }
        args.push(&c.id);
        moat(&ctx, &criu, &args).ok();
        let at = count(&ctx);
        if leave_running {
            assert_eq!(c.status(), "running");
            count_past(&ctx, at);
            c.moat(&["delete", "--force", &c.id]).ok();
        } else {
            // Gone, as runc's: no state, and the counter stopped.
            let st = c.moat(&["state", &c.id]);
            assert_ne!(st.code, 0, "state after checkpoint: {}", st.stdout);
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(count(&ctx), at, "the counter moved after the checkpoint");
        }
        ctx.assert_no_trace(&c.id);
        let at = count(&ctx);
        let b = ctx.bundle_str();
        moat(
            &ctx,
            &criu,
            &[
                "restore",
                "-d",
                "--bundle",
                &b,
                "--image-path",
                img_s,
                &c.id,
            ],
        )
        .ok();
        assert_eq!(c.status(), "running");
        let pid = c.pid();
        let next = count_past(&ctx, at);
        // Counting on: a fresh start would be back near 1.
        assert!(next > at, "restored counter {next} after checkpointed {at}");
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
        assert!(
            cg.lines().all(|l| l.ends_with(&format!("/moat/{}", c.id))),
            "restored init {pid} outside its cgroup:\n{cg}"
        );
        assert_eq!(
            std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok(),
            std::fs::read_link(format!("/proc/{pid}/ns/pid_for_children")).ok()
        );
        // The namespaces of its spec are its own again (the cgroup namespace is the one
        // CRIU leaves to moat when told to ignore cgroups).
        for ns in ["pid", "mnt", "net", "ipc", "uts", "cgroup"] {
            assert_ne!(
                std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok(),
                std::fs::read_link(format!("/proc/self/ns/{ns}")).ok(),
                "restored into the host's {ns} namespace"
            );
        }
        c.moat(&["delete", "--force", &c.id]).ok();
        ctx.assert_no_trace(&c.id);
        assert_cwd_empty(&ctx);
    }
}

/// Every runc flag moat does not apply yet is refused, naming it, before anything is made:
/// the container still runs, no image directory appears; a restore refused leaves no trace.
#[test]
#[ignore = "root: real containers"]
fn unapplied_flags_are_refused_by_name() {
    if !require_root() {
        return;
    }
    let ctx = counter("ckflags");
    let c = ctx.create_ok("c");
    c.start();
    let img = ctx.dir.join("image");
    let img_s = img.to_str().expect("utf-8");
    let b = ctx.bundle_str();
    let checkpoint: &[&[&str]] = &[
        &["--parent-path", "p"],
        &["--tcp-established"],
        &["--tcp-skip-in-flight"],
        &["--link-remap"],
        &["--ext-unix-sk"],
        &["--shell-job"],
        &["--lazy-pages"],
        &["--status-fd", "1"],
        &["--page-server", "127.0.0.1:1"],
        &["--file-locks"],
        &["--pre-dump"],
        &["--empty-ns", "network"],
        &["--auto-dedup"],
        &["--manage-cgroups-mode", "soft"],
    ];
    for flag in checkpoint {
        let mut args = vec!["checkpoint", "--image-path", img_s];
        args.extend_from_slice(flag);
        args.push(&c.id);
        let out = ctx.moat(&args).fails();
        assert!(
            out.stderr.contains(flag[0]),
            "checkpoint {flag:?}: the error does not name the flag: {}",
            out.stderr
        );
        assert!(!img.exists(), "checkpoint {flag:?} made {}", img.display());
        assert_eq!(c.status(), "running", "checkpoint {flag:?}");
    }
    let restore: &[&[&str]] = &[
        &["--console-socket", "/nonexistent"],
        &["--tcp-established"],
        &["--ext-unix-sk"],
        &["--shell-job"],
        &["--file-locks"],
        &["--no-subreaper"],
        &["--no-pivot"],
        &["--empty-ns", "network"],
        &["--auto-dedup"],
        &["--lazy-pages"],
        &["--lsm-profile", "x"],
        &["--lsm-mount-context", "x"],
        &["--manage-cgroups-mode", "full"],
    ];
    let rid = ctx.id("r");
    for flag in restore {
        let mut args = vec!["restore", "-d", "--bundle", &b, "--image-path", img_s];
        args.extend_from_slice(flag);
        args.push(&rid);
        let out = ctx.moat(&args).fails();
        assert!(
            out.stderr.contains(flag[0]),
            "restore {flag:?}: the error does not name the flag: {}",
            out.stderr
        );
        ctx.assert_no_trace(&rid);
    }
    // Hooks that run at create or start are not run by a restore: refused by name, not
    // skipped.
    let mut hooked = counter("ckhooks");
    let hb = hooked.bundle_str();
    let hid = hooked.id("r");
    for kind in [
        "prestart",
        "createRuntime",
        "createContainer",
        "startContainer",
        "poststart",
    ] {
        hooked.config["hooks"] = serde_json::json!({ kind: [{"path": "/bin/true"}] });
        let out = hooked
            .moat(&[
                "restore",
                "-d",
                "--bundle",
                &hb,
                "--image-path",
                img_s,
                &hid,
            ])
            .fails();
        assert!(
            out.stderr.contains(&format!("hooks.{kind}")),
            "restore with a {kind} hook: {}",
            out.stderr
        );
        hooked.assert_no_trace(&hid);
    }
    // runc's CRIU configuration file annotation: refused, not ignored.
    hooked.config["hooks"] = serde_json::json!({});
    hooked.config["annotations"]["org.criu.config"] = serde_json::json!("/etc/criu/x.conf");
    let out = hooked
        .moat(&[
            "restore",
            "-d",
            "--bundle",
            &hb,
            "--image-path",
            img_s,
            &hid,
        ])
        .fails();
    assert!(out.stderr.contains("org.criu.config"), "{}", out.stderr);
    hooked.assert_no_trace(&hid);
    let out = ctx
        .moat(&["restore", "--bundle", &b, "--image-path", img_s, &rid])
        .fails();
    assert!(out.stderr.contains("--detach"), "{}", out.stderr);
    ctx.assert_no_trace(&rid);
    // An image directory that is not there is named, and the restore leaves nothing.
    let out = ctx
        .moat(&["restore", "-d", "--bundle", &b, "--image-path", img_s, &rid])
        .fails();
    assert!(
        out.stderr.contains("--image-path") && out.stderr.contains(img_s),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&rid);
}

/// CRIU writes the images as root on the host and a restore reads them back: an image or
/// work directory at or below the container's rootfs or a bind source of its spec (however
/// it is spelled: the check is by device and inode, walking up) is refused before
/// anything is made or dumped.
#[test]
#[ignore = "root: real containers"]
fn image_paths_the_container_can_write_are_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = counter("ckpaths");
    let shared = ctx.dir.join("shared");
    std::fs::create_dir_all(shared.join("sub")).expect("mkdir");
    ctx.push(
        "/mounts",
        json!({"destination": "/shared", "type": "bind", "source": shared, "options": ["rbind", "rw"]}),
    );
    let c = ctx.create_ok("c");
    c.start();
    // The same directory spelled through a symlink outside the container's files.
    let link = ctx.dir.join("link-to-rootfs");
    std::os::unix::fs::symlink(ctx.rootfs(), &link).expect("symlink");
    let inside = [
        ctx.rootfs(),
        ctx.rootfs().join("tmp/new/image"),
        link.join("image"),
        shared.clone(),
        shared.join("sub/image"),
    ];
    let b = ctx.bundle_str();
    let rid = ctx.id("r");
    let outside = ctx.dir.join("image");
    let outside_s = outside.to_str().expect("utf-8");
    for p in &inside {
        let p_s = p.to_str().expect("utf-8");
        for flag in ["--image-path", "--work-path"] {
            let (img, work) = if flag == "--image-path" {
                (p_s, None)
            } else {
                (outside_s, Some(p_s))
            };
            let mut args = vec!["checkpoint", "--image-path", img];
            if let Some(w) = work {
                args.extend_from_slice(&["--work-path", w]);
            }
            args.push(&c.id);
            let out = ctx.moat(&args).fails();
            assert!(
                out.stderr.contains(flag) && out.stderr.contains("inside"),
                "checkpoint {flag} {p_s}: {}",
                out.stderr
            );
            assert_eq!(c.status(), "running");
            assert!(
                !ctx.rootfs().join("tmp/new").exists(),
                "{flag} {p_s} made a directory"
            );
            let mut args = vec!["restore", "-d", "--bundle", &b, "--image-path", img];
            if let Some(w) = work {
                args.extend_from_slice(&["--work-path", w]);
            }
            args.push(&rid);
            let out = ctx.moat(&args).fails();
            assert!(
                out.stderr.contains(flag) && out.stderr.contains("inside"),
                "restore {flag} {p_s}: {}",
                out.stderr
            );
            ctx.assert_no_trace(&rid);
        }
    }
    assert!(
        !outside.exists(),
        "a refused checkpoint made {}",
        outside.display()
    );
}

/// `moat features` names the CRIU moat would run and the version its RPC answers through
/// moat-criu; without a `criu` on PATH it says so.
#[test]
#[ignore = "root: runs CRIU"]
fn features_name_the_criu_in_use() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let ctx = Ctx::new("ckfeat");
    let out = moat(&ctx, &criu, &["features"]).ok();
    let f: serde_json::Value = serde_json::from_str(&out.stdout).expect("features JSON");
    let v = f["annotations"]["io.github.moat.criu"]
        .as_str()
        .expect("io.github.moat.criu");
    assert!(
        v.starts_with("4.") && v.contains(criu.to_str().expect("utf-8")),
        "io.github.moat.criu = {v:?}"
    );
    let mut c = ctx.cmd();
    c.env("PATH", "/nonexistent").arg("features");
    let out = ctx.run(c).ok();
    let f: serde_json::Value = serde_json::from_str(&out.stdout).expect("features JSON");
    assert_eq!(
        f["annotations"]["io.github.moat.criu"],
        "unavailable: no criu on PATH"
    );
}

/// A checkpoint image is data: restored under a bundle whose spec gives the container less
/// than the image's process had (a capability, no_new_privs, a seccomp filter, a namespace
/// of its own where the spec has the host's), the restore is refused while CRIU still holds
/// the tree stopped: the error names the difference, the restored process never runs (the
/// counter stays), and nothing is left. The same image under its own spec then restores.
#[test]
#[ignore = "root: real containers, CRIU"]
fn restore_refuses_an_image_that_differs_from_the_spec() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = counter("cktamper");
    ctx.set("/process/noNewPrivileges", json!(false));
    let original = ctx.config.clone();
    let c = ctx.create_ok("c");
    c.start();
    count_past(&ctx, 5);
    let img = ctx.dir.join("image");
    let img_s = img.to_str().expect("utf-8").to_string();
    moat(&ctx, &criu, &["checkpoint", "--image-path", &img_s, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    let at = count(&ctx);
    type Edit = fn(&mut Ctx);
    let cases: &[(&str, Edit, &str)] = &[
        (
            "a capability fewer",
            |ctx| {
                let caps = json!(["CAP_AUDIT_WRITE", "CAP_NET_BIND_SERVICE"]);
                for set in ["bounding", "effective", "permitted"] {
                    ctx.set(&format!("/process/capabilities/{set}"), caps.clone());
                }
            },
            "CapBnd",
        ),
        (
            "no_new_privs",
            |ctx| {
                ctx.set("/process/noNewPrivileges", json!(true));
            },
            "no_new_privs",
        ),
        (
            "a seccomp filter",
            |ctx| {
                ctx.set(
                    "/linux/seccomp",
                    json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
                           "syscalls": [{"names": ["kexec_load"], "action": "SCMP_ACT_ERRNO"}]}),
                );
            },
            "seccomp mode 0",
        ),
        (
            "the host's network namespace",
            |ctx| {
                ctx.without_ns("network");
            },
            "net namespace",
        ),
        (
            "the host's uts namespace",
            |ctx| {
                ctx.without_ns("uts");
                if let Some(o) = ctx.config.as_object_mut() {
                    o.remove("hostname");
                }
            },
            "uts namespace",
        ),
        (
            "the host's ipc namespace",
            |ctx| {
                ctx.without_ns("ipc");
            },
            "ipc namespace",
        ),
    ];
    let b = ctx.bundle_str();
    for (what, edit, says) in cases {
        ctx.config = original.clone();
        edit(&mut ctx);
        let rid = ctx.id("r");
        // Deletes what a wrongly accepted restore left running.
        let _guard = ctx.guard(&rid);
        let out = moat(
            &ctx,
            &criu,
            &[
                "restore",
                "-d",
                "--bundle",
                &b,
                "--image-path",
                &img_s,
                &rid,
            ],
        )
        .fails();
        assert!(
            out.stderr.contains("refused") && out.stderr.contains(says),
            "restore under a spec with {what}: {}",
            out.stderr
        );
        ctx.assert_no_trace(&rid);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            count(&ctx),
            at,
            "restore under a spec with {what}: the refused process ran"
        );
    }
    // The image under the spec it was made with: restored, counting on.
    ctx.config = original;
    let rid = ctx.id("ok");
    let r = ctx.guard(&rid);
    moat(
        &ctx,
        &criu,
        &[
            "restore",
            "-d",
            "--bundle",
            &b,
            "--image-path",
            &img_s,
            &rid,
        ],
    )
    .ok();
    count_past(&ctx, at);
    r.moat(&["delete", "--force", &rid]).ok();
    ctx.assert_no_trace(&rid);
}

/// A checkpoint records the container's mount table under moat's root, and a restore
/// gives back exactly that table or is refused while CRIU holds the tree stopped: CRIU
/// mounts what the image lists, as root on the host. The images of a later checkpoint,
/// taken after the container (with CAP_SYS_ADMIN) mounted a tmpfs on /mnt and took moat's
/// mask off /proc/keys, copied over an earlier checkpoint's image directory stand for a
/// forged image: restored from there, refused naming the tmpfs, the process never runs
/// and nothing is left. Restored from their own directory (the table recorded for them),
/// they run. An image directory no checkpoint of this moat wrote is refused.
#[test]
#[ignore = "root: real containers, CRIU"]
fn restore_gives_back_the_checkpoints_mount_table_or_is_refused() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = counter("ckmounts");
    for set in ["bounding", "effective", "permitted"] {
        ctx.config["process"]["capabilities"][set]
            .as_array_mut()
            .expect("capabilities")
            .push(json!("CAP_SYS_ADMIN"));
    }
    let c = ctx.create_ok("c");
    c.start();
    count_past(&ctx, 5);
    let (x, y) = (ctx.dir.join("image-x"), ctx.dir.join("image-y"));
    let (xs, ys) = (x.to_str().unwrap(), y.to_str().unwrap());
    moat(
        &ctx,
        &criu,
        &["checkpoint", "--leave-running", "--image-path", xs, &c.id],
    )
    .ok();
    c.moat(&[
        "exec",
        &c.id,
        "sh",
        "-c",
        "mkdir -p /mnt && mount -t tmpfs extra /mnt && umount /proc/keys",
    ])
    .ok();
    moat(&ctx, &criu, &["checkpoint", "--image-path", ys, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    let at = count(&ctx);
    // The later images in the earlier directory (its inode, so its record, kept).
    for e in std::fs::read_dir(&x).unwrap().flatten() {
        std::fs::remove_file(e.path()).unwrap();
    }
    for e in std::fs::read_dir(&y).unwrap().flatten() {
        std::fs::copy(e.path(), x.join(e.file_name())).unwrap();
    }
    let restore = |img: &str, id: &str| restore(&ctx, &criu, img, id, &[]);
    let rid = ctx.id("forged");
    let guard = ctx.guard(&rid);
    let out = restore(xs, &rid).fails();
    assert!(
        out.stderr.contains("restored mounts: /mnt (tmpfs")
            && out.stderr.contains("not in the checkpoint's mount table"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&rid);
    drop(guard);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(count(&ctx), at, "the refused process ran");
    // No record for a directory no checkpoint wrote.
    let z = ctx.dir.join("image-z");
    std::fs::create_dir(&z).unwrap();
    for e in std::fs::read_dir(&y).unwrap().flatten() {
        std::fs::copy(e.path(), z.join(e.file_name())).unwrap();
    }
    let rid = ctx.id("copy");
    let out = restore(z.to_str().unwrap(), &rid).fails();
    assert!(
        out.stderr.contains("no record of a checkpoint"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&rid);
    // The images with the table recorded for them.
    let rid = ctx.id("own");
    let r = ctx.guard(&rid);
    restore(ys, &rid).ok();
    count_past(&ctx, at);
    r.moat(&["delete", "--force", &rid]).ok();
    ctx.assert_no_trace(&rid);
}

/// A container with a terminal (its pty's master the caller's, over `--console-socket`)
/// checkpoints, and restores with `--console-socket`: CRIU makes a new pty for the
/// restored tree and its master reaches the socket (runc's `orphan_pts_master`), where the
/// restored shell's output goes on from the checkpointed count. Without the socket the
/// restore is refused naming it, leaving nothing.
#[test]
#[ignore = "root: real containers, CRIU"]
fn a_terminal_is_restored_through_the_console_socket() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = Ctx::new("ckterm");
    ctx.set("/root/readonly", json!(false))
        .set("/process/terminal", json!(true))
        .sh("i=0; while :; do i=$((i+1)); echo $i >/count; echo tick $i; sleep 0.05; done");
    let (c, out, fds) = ctx.create_with_console("c");
    assert_eq!(out.code, 0, "{}", out.stderr);
    let master = fds.expect("the pty master").remove(0);
    c.start();
    count_past(&ctx, 5);
    let (seen, _) = read_pty(&master, Duration::from_millis(200));
    assert!(seen.contains("tick"), "{seen:?}");
    let img = ctx.dir.join("image");
    let img_s = img.to_str().unwrap();
    moat(&ctx, &criu, &["checkpoint", "--image-path", img_s, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    let at = count(&ctx);
    let rid = ctx.id("r");
    let out = restore(&ctx, &criu, img_s, &rid, &[]).fails();
    assert!(out.stderr.contains("--console-socket"), "{}", out.stderr);
    ctx.assert_no_trace(&rid);
    let (sock, listener) = console_socket(&ctx.dir);
    let r = ctx.guard(&rid);
    let sock = sock.to_str().unwrap();
    restore(&ctx, &criu, img_s, &rid, &["--console-socket", sock]).ok();
    let master = receive_fds(&listener, Duration::from_secs(10))
        .expect("the restored pty's master")
        .remove(0);
    count_past(&ctx, at);
    let (seen, _) = read_pty(&master, Duration::from_millis(500));
    let ticks: Vec<u64> = seen
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tick ")?.parse().ok())
        .collect();
    assert!(
        ticks.iter().any(|&t| t > at),
        "no tick past {at} on the restored terminal: {seen:?}"
    );
    r.moat(&["delete", "--force", &rid]).ok();
    ctx.assert_no_trace(&rid);
}

/// A bind inside another bind's source (runc's "nested bind mounts"): its mount point,
/// made in the outer source at create, is removed after the checkpoint; the restore makes
/// it again (beneath the rootfs, in the helper's own mount namespace, as runc does before
/// CRIU mounts) and the restored container counts on with both binds in place.
#[test]
#[ignore = "root: real containers, CRIU"]
fn nested_binds_get_their_mount_points_back() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = counter("cknest");
    let (outer, inner) = (ctx.dir.join("outer"), ctx.dir.join("inner"));
    std::fs::create_dir_all(&outer).unwrap();
    std::fs::create_dir_all(&inner).unwrap();
    for (src, dest) in [(&outer, "/test"), (&inner, "/test/for/nested")] {
        ctx.push(
            "/mounts",
            json!({"type": "bind", "source": src, "destination": dest, "options": ["rw", "bind"]}),
        );
    }
    let c = ctx.create_ok("c");
    c.start();
    count_past(&ctx, 5);
    assert!(
        outer.join("for/nested").is_dir(),
        "create made the mount point"
    );
    let img = ctx.dir.join("image");
    let img_s = img.to_str().unwrap();
    moat(&ctx, &criu, &["checkpoint", "--image-path", img_s, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    std::fs::remove_dir_all(outer.join("for")).unwrap();
    let at = count(&ctx);
    let rid = ctx.id("r");
    let r = ctx.guard(&rid);
    restore(&ctx, &criu, img_s, &rid, &[]).ok();
    count_past(&ctx, at);
    let pid = r.pid();
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    for point in ["/test", "/test/for/nested"] {
        assert!(
            info.lines().any(|l| l.split(' ').nth(4) == Some(point)),
            "{point} not mounted in the restored container:\n{info}"
        );
    }
    r.moat(&["delete", "--force", &rid]).ok();
    ctx.assert_no_trace(&rid);
}

/// A bind whose source lies inside the rootfs, which the container can write: after its
/// checkpoint the container (or whoever writes its rootfs) swaps that source for a symlink
/// to a host directory. CRIU binds a source by path, as root, so a restore would give the
/// container the host's directory; it is refused naming the source and the rootfs, and
/// leaves nothing.
#[test]
#[ignore = "root: real containers, CRIU"]
fn a_bind_source_the_container_can_swap_is_refused_at_restore() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = counter("cksrc");
    std::fs::create_dir_all(ctx.rootfs().join("data")).unwrap();
    let source = ctx.rootfs().join("data");
    ctx.push(
        "/mounts",
        json!({"type": "bind", "source": source, "destination": "/mnt", "options": ["rbind"]}),
    );
    let host = ctx.dir.join("host-secret");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("secret"), "host\n").unwrap();
    let c = ctx.create_ok("c");
    c.start();
    count_past(&ctx, 5);
    let img = ctx.dir.join("image");
    let img_s = img.to_str().unwrap();
    moat(&ctx, &criu, &["checkpoint", "--image-path", img_s, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    std::fs::remove_dir(&source).unwrap();
    std::os::unix::fs::symlink(&host, &source).unwrap();
    let rid = ctx.id("r");
    let guard = ctx.guard(&rid);
    let out = restore(&ctx, &criu, img_s, &rid, &[]).fails();
    assert!(
        out.stderr.contains("mounts[].source") && out.stderr.contains("rootfs"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&rid);
    drop(guard);
}

/// moat SIGKILLed at each step of checkpoint and restore (`MOAT_TEST_KILL_AT`,
/// src/linux/killpoint.rs). A checkpoint killed with `--leave-running` leaves the original
/// running and counting; one killed after its dump without it leaves a container that
/// `delete --force` removes whole. A restore killed at any step, before CRIU, with the
/// helper placed and its request unsent, or after the tree is restored and before the
/// record names it, leaves nothing once `delete --force` has run (what an engine does
/// next), whatever CRIU had restored; the image then restores.
#[test]
#[ignore = "root: real containers, CRIU"]
fn checkpoint_and_restore_killed_at_every_step_leave_nothing() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let killed = |ctx: &Ctx, args: &[&str], point: &str| {
        ctx.write_config();
        let mut c = moat_cmd(ctx, &criu, args);
        c.env("MOAT_TEST_KILL_AT", point);
        let out = ctx.run(c);
        assert_eq!(out.code, 137, "{point}: not killed there: {}", out.stderr);
        reap();
    };
    let ctx = counter("ckkill");
    let c = ctx.create_ok("c");
    c.start();
    count_past(&ctx, 5);
    for point in ["Dump", "Record", "Delete"] {
        let img = ctx.dir.join(format!("image-{point}"));
        let args = [
            "checkpoint",
            "--leave-running",
            "--image-path",
            img.to_str().unwrap(),
            &c.id,
        ];
        killed(&ctx, &args, &format!("checkpoint:parent:{point}"));
        assert_eq!(c.status(), "running", "checkpoint killed at {point}");
        count_past(&ctx, count(&ctx));
    }
    let img = ctx.dir.join("image");
    let img_s = img.to_str().unwrap();
    killed(
        &ctx,
        &["checkpoint", "--image-path", img_s, &c.id],
        "checkpoint:parent:Delete",
    );
    let _ = ctx.moat(&["delete", "--force", &c.id]);
    reap();
    let left = ctx.traces(&c.id);
    assert!(
        left.is_empty(),
        "checkpoint killed before its delete: {left:?}"
    );
    let at = count(&ctx);
    for point in [
        "Profile", "StateDir", "Cgroup", "Record", "Criu", "Restored",
    ] {
        let rid = ctx.id(&format!("r-{}", point.to_lowercase()));
        let args = [
            "restore",
            "-d",
            "--bundle",
            &ctx.bundle_str(),
            "--image-path",
            img_s,
            &rid,
        ];
        killed(&ctx, &args, &format!("restore:parent:{point}"));
        if point == "Restored" {
            // Killed with the tree restored and running, before the record names it.
            count_past(&ctx, count(&ctx));
        }
        let _ = ctx.moat(&["delete", "--force", &rid]);
        reap();
        let left = ctx.traces(&rid);
        assert!(left.is_empty(), "restore killed at {point}: left {left:?}");
    }
    let rid = ctx.id("r");
    let r = ctx.guard(&rid);
    restore(&ctx, &criu, img_s, &rid, &[]).ok();
    count_past(&ctx, count(&ctx).max(at));
    r.moat(&["delete", "--force", &rid]).ok();
    ctx.assert_no_trace(&rid);
}

/// The container's stdio is the restore caller's: a pipe the container wrote to before
/// its checkpoint is given, at restore, the descriptor of the same number of `moat
/// restore` (CRIU's inherit_fd, as runc maps it), so what the restored process prints
/// reaches the caller (here its stdout file), counting on from the checkpoint.
#[test]
#[ignore = "root: real containers, CRIU"]
fn restored_stdout_reaches_the_restore_caller() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let mut ctx = Ctx::new("ckstdio");
    ctx.set("/root/readonly", json!(false)).sh(
        "exec </dev/null 2>/dev/null; i=0; while :; do i=$((i+1)); echo $i; echo $i >/count; sleep 0.05; done",
    );
    ctx.write_config();
    let id = ctx.id("c");
    let c = ctx.guard(&id);
    // `moat create` with its stdout a pipe this test reads: the container's stdout.
    let (mut reader, writer) = std::io::pipe().expect("pipe");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id])
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::null());
    policy_env(&mut cmd);
    let child = spawn(&mut cmd);
    drop(cmd);
    assert_eq!(
        exit_code(wait_child(child, Duration::from_secs(60))),
        0,
        "create"
    );
    c.start();
    count_past(&ctx, 5);
    let img = ctx.dir.join("image");
    let img_s = img.to_str().expect("utf-8");
    moat(&ctx, &criu, &["checkpoint", "--image-path", img_s, &id]).ok();
    // The original is gone: its pipe's writers with it.
    let mut before = String::new();
    std::io::Read::read_to_string(&mut reader, &mut before).expect("read the pipe");
    let last: u64 = before
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("the container printed before its checkpoint");
    let out = moat(
        &ctx,
        &criu,
        &[
            "restore",
            "-d",
            "--bundle",
            &ctx.bundle_str(),
            "--image-path",
            img_s,
            &id,
        ],
    )
    .ok();
    let deadline = Instant::now() + Duration::from_secs(20);
    let printed = loop {
        let now = out.stdout_now();
        let past: Vec<u64> = now
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|n| *n > last)
            .collect();
        if past.len() >= 3 {
            break past;
        }
        assert!(
            Instant::now() < deadline,
            "the restored container printed nothing past {last} to the restore caller: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        printed[0],
        last + 1,
        "restored output does not follow the checkpointed {last}: {printed:?}"
    );
    c.moat(&["delete", "--force", &id]).ok();
    ctx.assert_no_trace(&id);
}

/// A container whose spec joins a network namespace by path (as podman's netavark, CNI
/// and pods give it) is checkpointed with that namespace left out of the image (CRIU's
/// external `net[INODE]:KEY`) and restored into the one its spec joins (moat's descriptor
/// of the path, under that key): counting on, its netns inode the path's, with and without
/// `--leave-running`. Without the mapping CRIU makes it a new one and the pre-resume
/// comparison refuses the restore.
#[test]
#[ignore = "root: real containers, CRIU, a network namespace"]
fn restored_into_the_network_namespace_the_spec_joins() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    for leave_running in [false, true] {
        let netns = NetNs::new(&format!(
            "moat-ck{}-{}",
            if leave_running { "l" } else { "s" },
            std::process::id()
        ));
        let ino = std::fs::metadata(netns.path()).expect("netns file").ino();
        let mut ctx = counter(if leave_running { "cknetl" } else { "cknets" });
        for n in ctx.config["linux"]["namespaces"]
            .as_array_mut()
            .expect("namespaces")
            .iter_mut()
        {
            if n["type"] == "network" {
                n["path"] = json!(netns.path());
            }
        }
        let c = ctx.create_ok("c");
        c.start();
        assert_eq!(
            netns_of(c.pid()),
            Some(ino),
            "created outside the joined netns"
        );
        count_past(&ctx, 5);
        let img = ctx.dir.join("image");
        let img_s = img.to_str().expect("utf-8");
        let mut args = vec!["checkpoint", "--image-path", img_s];
        if leave_running {
            args.push("--leave-running");
        }
        args.push(&c.id);
        moat(&ctx, &criu, &args).ok();
        if leave_running {
            assert_eq!(netns_of(c.pid()), Some(ino), "the original left the netns");
            c.moat(&["delete", "--force", &c.id]).ok();
        }
        ctx.assert_no_trace(&c.id);
        let at = count(&ctx);
        let b = ctx.bundle_str();
        let out = moat(
            &ctx,
            &criu,
            &[
                "restore",
                "-d",
                "--bundle",
                &b,
                "--image-path",
                img_s,
                &c.id,
            ],
        );
        assert_eq!(out.code, 0, "restore: {}", out.stderr);
        let pid = c.pid();
        assert_eq!(
            netns_of(pid),
            Some(ino),
            "restored outside the network namespace the spec joins"
        );
        count_past(&ctx, at);
        c.moat(&["delete", "--force", &c.id]).ok();
        ctx.assert_no_trace(&c.id);
        assert_cwd_empty(&ctx);
    }
}

/// A fork: one image restored into two new ids, both alive at once, each in its own
/// namespaces and cgroup, each with the record and `verify` of a created container, the
/// counter going on from the checkpoint; deleting one leaves the other running, and
/// nothing of either is left after both are deleted.
#[test]
#[ignore = "root: real containers, CRIU"]
fn one_image_restores_into_two_ids_at_once() {
    if !require_root() {
        return;
    }
    let Some(criu) = criu() else { return };
    let ctx = counter("ckfork");
    let c = ctx.create_ok("orig");
    c.start();
    count_past(&ctx, 10);
    let img = ctx.dir.join("image");
    let img_s = img.to_str().expect("utf-8");
    moat(&ctx, &criu, &["checkpoint", "--image-path", img_s, &c.id]).ok();
    ctx.assert_no_trace(&c.id);
    let at = count(&ctx);
    let forks = [ctx.guard(&ctx.id("fork1")), ctx.guard(&ctx.id("fork2"))];
    for f in &forks {
        restore(&ctx, &criu, img_s, &f.id, &[]).ok();
        assert_eq!(f.status(), "running", "{}", f.id);
        f.moat(&["verify", &f.id]).ok();
    }
    let pids = [forks[0].pid(), forks[1].pid()];
    assert_ne!(pids[0], pids[1]);
    for (f, pid) in forks.iter().zip(pids) {
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
        assert!(
            cg.lines().all(|l| l.ends_with(&format!("/moat/{}", f.id))),
            "{}'s init {pid} outside its cgroup:\n{cg}",
            f.id
        );
    }
    for ns in ["pid", "mnt", "net", "ipc", "uts"] {
        let of = |pid: i32| std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).ok();
        assert_ne!(of(pids[0]), of(pids[1]), "the forks share a {ns} namespace");
    }
    let next = count_past(&ctx, at);
    assert!(next > at, "the forks counted from {next}, not on from {at}");
    forks[0].moat(&["delete", "--force", &forks[0].id]).ok();
    ctx.assert_no_trace(&forks[0].id);
    assert_eq!(forks[1].status(), "running");
    count_past(&ctx, count(&ctx));
    forks[1].moat(&["delete", "--force", &forks[1].id]).ok();
    ctx.assert_no_trace(&forks[1].id);
}
