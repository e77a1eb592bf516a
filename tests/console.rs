//! process.terminal: the pty master arrives over --console-socket (SCM_RIGHTS), the
//! container's stdio and /dev/console are its devpts peer (T7).

mod support;

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

use support::*;

/// Waits up to `timeout` for one connection on `l` and returns the fd it sends.
fn receive_fd(l: &UnixListener, timeout: Duration) -> OwnedFd {
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd, for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    assert_eq!(n, 1, "nobody connected to the console socket");
    let (conn, _) = l.accept().expect("accept");
    let mut buf = [0u8; 256];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .expect("recvmsg");
    for c in msg.cmsgs().expect("cmsgs") {
        if let ControlMessageOwned::ScmRights(fds) = c {
            assert_eq!(fds.len(), 1, "one fd expected");
            // SAFETY: SCM_RIGHTS just installed it in our table; nothing else owns it.
            return unsafe { OwnedFd::from_raw_fd(fds[0]) };
        }
    }
    panic!("no SCM_RIGHTS message on the console socket");
}

/// Reads the pty master until the last peer fd closes (EIO), at most `timeout`.
fn read_all(master: &OwnedFd, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "pty still open after {timeout:?}: {:?}",
            String::from_utf8_lossy(&out)
        );
        let mut p = libc::pollfd {
            fd: master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) };
        let mut buf = [0u8; 4096];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            let e = std::io::Error::last_os_error();
            if n == 0 || e.raw_os_error() == Some(libc::EIO) {
                break;
            }
            if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            panic!("read pty master: {e}");
        }
        out.extend_from_slice(&buf[..usize::try_from(n).unwrap()]);
    }
    String::from_utf8_lossy(&out).replace("\r\n", "\n")
}

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
    let sock = ctx.dir.join("console.sock");
    let listener = UnixListener::bind(&sock).expect("bind console socket");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let create = ctx.moat_bg(&[
        "create",
        "--console-socket",
        sock.to_str().unwrap(),
        "--bundle",
        &b,
        &id,
    ]);
    let c = ctx.guard(&id);
    let master = receive_fd(&listener, Duration::from_secs(20));
    let out = create.wait(CALL_TIMEOUT);
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(out.stdout, "", "the container's output goes to the pty");
    // The master is a ptmx of a devpts instance (5:2 is the ptmx device).
    let st = nix::sys::stat::fstat(master.as_raw_fd()).expect("fstat master");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR);
    assert_eq!(st.st_rdev, libc::makedev(5, 2), "not a ptmx");
    let fs = nix::sys::statfs::fstatfs(&master).expect("fstatfs master");
    assert_eq!(fs.filesystem_type().0, 0x1cd1, "not on a devpts instance");
    c.start();
    let text = read_all(&master, Duration::from_secs(20));
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
