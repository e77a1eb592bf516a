//! process.terminal: the pty master arrives over --console-socket (SCM_RIGHTS), the
//! container's stdio and /dev/console are its devpts peer (T7).

mod support;

use std::os::fd::AsRawFd;
use std::time::Duration;

use support::*;

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn terminal_master_arrives_over_the_console_socket() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("console");
    ctx.set("/process/terminal", json!(true));
    ctx.set("/process/consoleSize", json!({"height": 40, "width": 100}));
    ctx.sh(
        "echo hello-tty; tty; stat -c '%F %t' /dev/console; stty size; \
         [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-ttys",
    );
    let (c, out, fds) = ctx.create_with_console("c");
    let fds = fds.expect("nobody connected to the console socket");
    assert_eq!(fds.len(), 1, "one fd expected");
    let master = fds.into_iter().next().expect("one fd");
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(out.stdout, "", "the container's output goes to the pty");
    // The master is a ptmx of a devpts instance (5:2 is the ptmx device).
    let st = nix::sys::stat::fstat(master.as_raw_fd()).expect("fstat master");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR);
    assert_eq!(st.st_rdev, libc::makedev(5, 2), "not a ptmx");
    let fs = nix::sys::statfs::fstatfs(&master).expect("fstatfs master");
    assert_eq!(fs.filesystem_type().0, 0x1cd1, "not on a devpts instance");
    c.start();
    let (text, closed) = read_pty(&master, Duration::from_secs(20));
    assert!(closed, "pty still open after 20 s: {text:?}");
    assert_eq!(
        text,
        // 0x88 = 136, the pty peer major.
        "hello-tty\n/dev/pts/0\ncharacter special file 88\n40 100\nall-ttys\n"
    );
    c.wait_stopped(Duration::from_secs(20));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn terminal_without_console_socket_fails_create_naming_the_field() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("noconsole");
    ctx.set("/process/terminal", json!(true));
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("process.terminal"), "{}", out.stderr);
    assert!(out.stderr.contains("console-socket"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn console_socket_that_nobody_listens_on_fails_create() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("deadconsole");
    ctx.set("/process/terminal", json!(true));
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let sock = ctx.dir.join("nobody.sock");
    let _g = ctx.guard(&id);
    let out = ctx
        .moat(&[
            "create",
            "--console-socket",
            sock.to_str().unwrap(),
            "--bundle",
            &b,
            &id,
        ])
        .fails();
    assert!(out.stderr.contains("console socket"), "{}", out.stderr);
    ctx.assert_no_trace(&id);
}

/// runc's tty.bats "[tty owner] ({u,g}id != 0)": the pty peer of the init and
/// of `exec -t` belongs to `process.user.uid`, as runc makes it, so that the user can
/// reopen its own terminal; the group stays the devpts one (`gid=5` in the default spec,
/// which runc's test expects), under both policies.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn pty_peer_belongs_to_the_process_user() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        let mut ctx = Ctx::new("ptyowner");
        if restricted {
            ctx.restricted();
        }
        ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
        ctx.set("/process/terminal", json!(true));
        ctx.sh("stat -c %u:%g:%a $(tty); sleep 600");
        let (c, out, fds) = ctx.create_with_console("c");
        assert_eq!(out.code, 0, "{out:#?}");
        let master = fds
            .expect("no pty master")
            .into_iter()
            .next()
            .expect("one fd");
        c.start();
        let mut text = String::new();
        assert!(
            wait_until(Duration::from_secs(20), || {
                text.push_str(&read_pty(&master, Duration::from_millis(200)).0);
                text.ends_with('\n')
            }),
            "restricted={restricted}: init printed {text:?}"
        );
        assert_eq!(text, "1000:5:620\n", "restricted={restricted}: init");

        let (sock, listener) = console_socket(&ctx.dir);
        let exec = ctx.moat_bg(&[
            "exec",
            "-t",
            "--console-socket",
            sock.to_str().unwrap(),
            &c.id,
            "sh",
            "-c",
            "stat -c %u:%g:%a $(tty)",
        ]);
        let master = receive_fds(&listener, Duration::from_secs(20))
            .expect("no exec pty master")
            .into_iter()
            .next()
            .expect("one fd");
        let (text, _) = read_pty(&master, Duration::from_secs(20));
        assert_eq!(
            exec.wait(CALL_TIMEOUT).code,
            0,
            "restricted={restricted}: exec"
        );
        assert_eq!(text, "1000:5:620\n", "restricted={restricted}: exec -t");
        c.kill("KILL");
    }
}

/// runc's foreground terminal (`run` and `exec -t` without `--console-socket`) relays the
/// pty with `ONLCR` cleared when moat's own output is a file or a pipe: a script reads the
/// program's `\n`, not the pty's `\r\n` (nine of runc 1.5's tests compare such lines).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn foreground_terminal_to_a_file_keeps_the_programs_newlines() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("onlcr");
    ctx.set("/process/terminal", json!(true));
    ctx.sh("printf 'a\\nb\\n'");
    let id = ctx.id("run");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["run", "--bundle", &b, &id]).ok();
    assert_eq!(out.stdout, "a\nb\n", "run -t: {out:#?}");

    ctx.args(&["sleep", "600"]);
    ctx.set("/process/terminal", json!(false));
    let c = ctx.create_ok("c");
    c.start().ok();
    let out = c
        .moat(&["exec", "-t", &c.id, "sh", "-c", "printf 'c\\nd\\n'"])
        .ok();
    assert_eq!(out.stdout, "c\nd\n", "exec -t: {out:#?}");
    c.kill("KILL");
}
