//! Issue 20, item 7: what a container can do to the host through the sd_notify socket,
//! an id that reads as a flag, and a device path that leaves `/dev`.
//!
//! * The notify socket's host side must be out of the container's reach: a process exec'd
//!   into a created container that keeps planting a symlink at the socket's path must not
//!   make `moat start` change a host file, and container root must not be able to create
//!   files (a setuid binary) next to the socket on the host.
//! * The relay tells the engine `READY=1` and moat's own `MAINPID` (the init's host pid),
//!   nothing the container wrote, and never a descriptor it attached.
//! * `-x` as an id is refused by every subcommand; `linux.devices[].path` is refused
//!   unless it is below `/dev` once lexically clean.
//!
//! Path handling is the mechanism, so the host-side attacks run under OPEN (the relay
//! under both policies).

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use crate::{ctx, install, probe, Policy, BOTH};

/// The engine's side: a datagram socket the test listens on, given as NOTIFY_SOCKET.
fn engine_socket(ctx: &Ctx) -> (PathBuf, UnixDatagram) {
    let path = ctx.dir.join("engine.sock");
    let sock = UnixDatagram::bind(&path).expect("bind the engine's socket");
    (path, sock)
}

/// The two ways moat lays the socket out (see linux/notify.rs): with CAP_SYS_PTRACE the
/// socket file alone, taken from the init at start; without it (a plain rootless user, or
/// here root with the capability out of its bounding set) a read-only directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Socket,
    Directory,
}

const LAYOUTS: [Layout; 2] = [Layout::Socket, Layout::Directory];

/// A moat command of `ctx` (its policy, its root) in `layout`; `pre` runs before moat.
fn moat_cmd(ctx: &Ctx, layout: Layout, pre: &[&str]) -> Command {
    let base = ctx.cmd();
    let mut c = match layout {
        Layout::Socket => Command::new(pre.first().copied().unwrap_or(MOAT)),
        Layout::Directory => {
            let mut c = Command::new("setpriv");
            c.args(["--bounding-set", "-sys_ptrace", "--"])
                .args(pre.first());
            c
        }
    };
    if !pre.is_empty() {
        c.args(&pre[1..]).arg(MOAT);
    } else if layout == Layout::Directory {
        c.arg(MOAT);
    }
    c.args(base.get_args());
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c
}

/// `moat create` with NOTIFY_SOCKET set to `engine`; the guard deletes the container.
#[track_caller]
fn create_notify(ctx: &Ctx, name: &str, engine: &Path, layout: Layout) -> Container {
    let id = ctx.id(name);
    let mut c = moat_cmd(ctx, layout, &[]);
    c.env("NOTIFY_SOCKET", engine)
        .args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let mut guard = ctx.guard(&id);
    guard.out = Some(ctx.run(c).ok());
    guard
}

/// `moat start` in `layout`.
fn start(ctx: &Ctx, c: &Container, layout: Layout, pre: &[&str]) -> Out {
    let mut cmd = moat_cmd(ctx, layout, pre);
    cmd.args(["start", &c.id]);
    ctx.run(cmd)
}

/// One datagram and the number of descriptors that came with it, or `None` on timeout.
fn recv_with_fds(sock: &UnixDatagram, timeout: Duration) -> Option<(String, usize)> {
    sock.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 4096];
    let mut ctl = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain data; all zeroes is a valid value.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.as_mut_ptr().cast();
    mh.msg_controllen = std::mem::size_of_val(&ctl).try_into().unwrap();
    // SAFETY: mh points at a live iovec and control buffer of the lengths it states.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut mh, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return None;
    }
    let mut fds = 0;
    // SAFETY: mh was filled by recvmsg.
    let mut c = unsafe { libc::CMSG_FIRSTHDR(&mh) };
    while !c.is_null() {
        // SAFETY: c is a non-null header inside the control buffer.
        let h = unsafe { &*c };
        if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: CMSG_LEN is arithmetic only.
            let len = h.cmsg_len as usize - unsafe { libc::CMSG_LEN(0) } as usize;
            // SAFETY: the data of an SCM_RIGHTS header inside the control buffer.
            let data = unsafe { libc::CMSG_DATA(c) } as *const i32;
            for i in 0..len / 4 {
                // SAFETY: closes a descriptor SCM_RIGHTS just installed, which nothing else owns.
                unsafe { libc::close(*data.add(i)) };
                fds += 1;
            }
        }
        // SAFETY: c is a header of mh.
        c = unsafe { libc::CMSG_NXTHDR(&mh, c) };
    }
    Some((
        String::from_utf8_lossy(&buf[..usize::try_from(n).unwrap()]).into_owned(),
        fds,
    ))
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn notify_symlink_planted_by_the_container_does_not_chmod_host_files() {
    if !require_root() {
        return;
    }
    let Some(probe) = probe() else { return };
    let mut ctx = ctx("notify-link", Policy::Open);
    install(&ctx, probe, "probe");
    let (engine, _listener) = engine_socket(&ctx);
    let secret = ctx.dir.join("host-secret");
    fs::write(&secret, "host\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let target = secret.to_str().unwrap().to_string();
    // Ready at once (when the socket is still there), so start returns.
    ctx.sh("probe notify $NOTIFY_SOCKET READY=1; sleep 3");
    // The racer replaces the socket with a symlink the moment one appears at the path.
    // A bind followed by a chmod by path leaves it well under a microsecond, so start
    // runs under strace, which holds every bind(2) of moat's for 300 ms on its way out:
    // the window is then wide open, and an implementation without one loses nothing.
    let strace = Command::new("strace")
        .arg("-V")
        .run_output()
        .is_ok_and(|o| o.status.success());
    if !strace {
        missing("part of notify_symlink: no strace to widen start's window (racing it plain)");
    }
    let rounds = if strace { 3 } else { 8 };
    let mut planted_any = false;
    for (layout, round) in LAYOUTS
        .into_iter()
        .flat_map(|l| (0..rounds).map(move |r| (l, r)))
    {
        let c = create_notify(&ctx, &format!("c{layout:?}{round}"), &engine, layout);
        let racer = ctx.moat_bg(&[
            "exec",
            &c.id,
            "probe",
            "plant-link",
            &target,
            "/run/notify/notify.sock",
            "2",
        ]);
        assert!(
            wait_until(Duration::from_secs(10), || racer
                .stdout_now()
                .contains("started")),
            "the racer did not start: {}",
            racer.stdout_now()
        );
        // start may fail when the plant wins the race for the path; the oracle is the host.
        let delay = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=bind"];
        let delay = [&delay[..], &["-e", "inject=bind:delay_exit=300000"]].concat();
        let _ = start(&ctx, &c, layout, if strace { &delay } else { &[] });
        let out = racer.wait(Duration::from_secs(20));
        planted_any |= out.stdout.contains("planted\n");
        assert_eq!(
            mode(&secret),
            0o600,
            "{layout:?} round {round}: moat start changed the mode of a host file the container \
             pointed the notify socket's path at (racer: {})",
            out.stdout.trim()
        );
        assert_eq!(fs::read_to_string(&secret).unwrap(), "host\n");
        c.moat(&["delete", "--force", &c.id]);
    }
    // The container may plant its symlink next to the mount point (its own rootfs) but
    // never replace the socket itself: the plants all failed.
    assert!(
        !planted_any,
        "the container replaced its notify socket's path"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn notify_socket_directory_is_not_writable_from_the_container() {
    if !require_root() {
        return;
    }
    let Some(probe) = probe() else { return };
    let mut ctx = ctx("notify-plant", Policy::Open);
    install(&ctx, probe, "probe");
    let (engine, _listener) = engine_socket(&ctx);
    // start returns once the container is ready.
    ctx.sh("probe notify $NOTIFY_SOCKET READY=1; sleep 30");
    for layout in LAYOUTS {
        let c = create_notify(&ctx, &format!("c{layout:?}"), &engine, layout);
        // Container root drops a setuid-root shell next to the socket, before and after start.
        let plant = "cp /bin/busybox /run/notify/plant-$0 && chmod 4755 /run/notify/plant-$0; \
                 grep ' /run/notify' /proc/self/mountinfo";
        let before = crate::exec(&ctx, &c, &["sh", "-c", plant, "created"]);
        start(&ctx, &c, layout, &[]).ok();
        let after = crate::exec(&ctx, &c, &["sh", "-c", plant, "running"]);
        // Whatever the container wrote (its own rootfs), nothing is in the host directory that
        // holds the socket, nor anywhere under the container's state directory.
        let mut found = Vec::new();
        let mut stack = vec![ctx.state_dir(&c.id)];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if e.file_name().to_string_lossy().starts_with("plant-") {
                    found.push(p.clone());
                }
                if e.file_type().unwrap().is_dir() {
                    stack.push(p);
                }
            }
        }
        assert!(
            found.is_empty(),
            "{layout:?}: container root created {found:?} on the host (exec: {} / {})",
            before.stderr,
            after.stderr
        );
        // What the container sees mounted there, read-only: the socket alone, or the
        // directory that holds only the socket.
        let lines: Vec<&str> = after
            .stdout
            .lines()
            .filter(|l| l.contains("/run/notify"))
            .collect();
        assert_eq!(lines.len(), 1, "{} {}", after.stdout, after.stderr);
        let f: Vec<&str> = lines[0].split(' ').collect();
        let want = match layout {
            Layout::Socket => "/run/notify/notify.sock",
            Layout::Directory => "/run/notify",
        };
        assert_eq!(f[4], want, "{}", lines[0]);
        assert!(
            f[5].split(',').any(|o| o == "ro"),
            "the socket's bind is not read-only: {}",
            lines[0]
        );
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn notify_relays_only_ready_with_moats_mainpid() {
    if !require_root() {
        return;
    }
    let Some(probe) = probe() else { return };
    for (layout, policy) in LAYOUTS.into_iter().flat_map(|l| BOTH.map(|p| (l, p))) {
        let mut ctx = ctx(&format!("notify-relay-{layout:?}"), policy);
        install(&ctx, probe, "probe");
        let (engine, listener) = engine_socket(&ctx);
        // Not ready yet, then ready with a forged MAINPID, a status and a descriptor.
        ctx.sh(
            "probe notify $NOTIFY_SOCKET 'MAINPID=1\\nSTATUS=starting' && \
             probe notify $NOTIFY_SOCKET 'MAINPID=1\\nREADY=1\\nSTATUS=x' && sleep 30",
        );
        let c = create_notify(&ctx, "c", &engine, layout);
        // A datagram sent before start (by a process exec'd into the created container)
        // waits in the socket, which the init holds from create on (socket layout: the
        // directory has no socket before start).
        if layout == Layout::Socket {
            let early = crate::exec(
                &ctx,
                &c,
                &["probe", "notify", "/run/notify/notify.sock", "STATUS=early"],
            );
            assert!(
                early.stdout.contains("notify sent"),
                "{layout:?} {policy:?}: {}",
                early.stdout
            );
        }
        let pid = c.pid();
        start(&ctx, &c, layout, &[]).ok();
        let (msg, fds) = recv_with_fds(&listener, Duration::from_secs(10)).unwrap_or_else(|| {
            panic!("{layout:?} {policy:?}: nothing arrived at the engine's socket")
        });
        assert_eq!(
            msg,
            format!("READY=1\nMAINPID={pid}"),
            "{layout:?} {policy:?}: the engine received what the container wrote"
        );
        assert_eq!(
            fds, 0,
            "{layout:?} {policy:?}: a descriptor reached the engine"
        );
        assert!(
            recv_with_fds(&listener, Duration::from_millis(300)).is_none(),
            "{layout:?} {policy:?}: more than one datagram reached the engine"
        );
        // The container's sends went through the read-only bind.
        let out = c.stdout();
        assert_eq!(
            out.matches("notify sent").count(),
            2,
            "{layout:?} {policy:?}: {out}"
        );
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn ids_beginning_with_a_dash_are_refused_by_every_subcommand() {
    if !require_root() {
        return;
    }
    let mut ctx = ctx("dash-id", Policy::Open);
    ctx.args(&["sleep", "30"]);
    let refused = |out: &Out, what: &str| {
        assert_ne!(out.code, 0, "{what}: accepted ({})", out.stdout);
        assert!(
            out.stderr.contains("must not begin with '-'"),
            "{what}: {}",
            out.stderr
        );
    };
    let b = ctx.bundle_str();
    for (what, args) in [
        ("create", vec!["create", "--bundle", &b, "--", "-x"]),
        ("run", vec!["run", "--detach", "--bundle", &b, "--", "-x"]),
    ] {
        let out = ctx.moat(&args);
        if out.code == 0 {
            // Made: remove it the only way a flag-like id can be named.
            ctx.moat(&["delete", "--force", "--", "-x"]);
        }
        refused(&out, what);
        ctx.assert_no_trace("-x");
    }
    // An existing container whose state directory is named "-x" (as a moat without the
    // rule would have made it) is out of reach of every command that takes an id.
    let c = ctx.create_ok("c");
    let dash = format!("-{}", c.id);
    fs::rename(ctx.state_dir(&c.id), ctx.state_dir(&dash)).unwrap();
    // Named back on any exit, so the guards can clean up.
    struct Back(PathBuf, PathBuf);
    impl Drop for Back {
        fn drop(&mut self) {
            let _ = fs::rename(&self.0, &self.1);
        }
    }
    let back = Back(ctx.state_dir(&dash), ctx.state_dir(&c.id));
    let cmds: [&[&str]; 13] = [
        &["start"],
        &["state"],
        &["kill"],
        &["delete", "--force"],
        &["exec"],
        &["pause"],
        &["resume"],
        &["ps"],
        &["events", "--stats"],
        &["update", "--pids-limit", "10"],
        &["verify"],
        &["kill", "--all"],
        &["delete"],
    ];
    for args in cmds {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["--", &dash]);
        if args[0] == "exec" {
            a.push("true");
        }
        if args[0] == "kill" {
            a.push("KILL");
        }
        let out = ctx.moat(&a);
        refused(&out, &a.join(" "));
    }
    assert!(ctx.state_dir(&dash).is_dir());
    // None of them acted: the container is still created, its init alive.
    drop(back);
    assert_eq!(c.status(), "created");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn device_paths_outside_dev_are_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = ctx("devpath", Policy::Open);
    ctx.args(&["true"]);
    for (i, bad) in [
        "/dev/../etc/moat-dev",
        "/tmp/moat-dev",
        "/dev/x/../../etc/moat-dev",
    ]
    .iter()
    .enumerate()
    {
        ctx.set(
            "/linux/devices",
            json!([{"path": bad, "type": "c", "major": 1, "minor": 3}]),
        );
        let id = ctx.id(&format!("c{i}"));
        let out = ctx.moat(&["create", "--bundle", &ctx.bundle_str(), &id]);
        let _guard = ctx.guard(&id);
        assert_ne!(out.code, 0, "{bad}: accepted");
        assert_eq!(out.stderr_lines().len(), 1, "{bad}: {}", out.stderr);
        assert!(
            out.stderr.contains("linux.devices[0].path"),
            "{bad}: {}",
            out.stderr
        );
        ctx.assert_no_trace(&id);
        for p in ["etc/moat-dev", "tmp/moat-dev"] {
            assert!(
                fs::symlink_metadata(ctx.rootfs().join(p)).is_err(),
                "{bad}: a node was made at {p} in the rootfs"
            );
        }
    }
    // The gVisor path (runsc makes the nodes) refuses them as well.
    if Path::new("/usr/bin/runsc").exists() || Path::new("/usr/local/bin/runsc").exists() {
        ctx.set("/annotations", json!({"moat.runtime": "gvisor"}));
        ctx.set(
            "/linux/devices",
            json!([{"path": "/dev/../etc/moat-dev", "type": "c", "major": 1, "minor": 3}]),
        );
        let id = ctx.id("gvisor");
        let out = ctx.moat(&["create", "--bundle", &ctx.bundle_str(), &id]);
        let _guard = ctx.guard(&id);
        assert_ne!(out.code, 0, "gVisor: accepted");
        assert!(
            out.stderr.contains("linux.devices[0].path"),
            "gVisor: {}",
            out.stderr
        );
        ctx.assert_no_trace(&id);
        ctx.set("/annotations", json!({}));
    } else {
        missing("part of device_paths: runsc not installed (gVisor path)");
    }
    // A path that is below /dev once clean is created where it says.
    ctx.set(
        "/linux/devices",
        json!([{"path": "/dev//./sub/../moat-null", "type": "c", "major": 1, "minor": 3}]),
    );
    ctx.args(&[
        "sh",
        "-c",
        "ls -l /dev/moat-null; echo x > /dev/moat-null && echo written",
    ]);
    let (out, err) = run_to_end(&ctx, "ok");
    assert!(out.contains("written"), "{out} {err}");
    assert!(out.starts_with('c'), "{out}");
}
