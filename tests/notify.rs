//! sd_notify passthrough: with NOTIFY_SOCKET set, the container gets its own socket and
//! `start` tells the caller's socket once the container sends READY=1, with the init's
//! host pid as MAINPID (the attacks on it are in tests/security/notify.rs).

mod support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use support::{require_root, Ctx};

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn start_relays_ready_to_the_callers_socket() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("notify");
    ctx.args(&["sh", "-c", "echo $NOTIFY_SOCKET > /dev/shm/ns; sleep 30"]);
    let host_path = ctx.root.with_file_name("host-notify.sock");
    let host = UnixDatagram::bind(&host_path).unwrap();
    host.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let id = ctx.id("c");
    ctx.write_config();
    let mut create = ctx.cmd();
    create
        .env("NOTIFY_SOCKET", &host_path)
        .args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let out = ctx.run(create);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let container_sock = ctx.root.join(&id).join("notify.sock");
    // The container's service becomes ready a little after start begins.
    let sender = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let s = UnixDatagram::unbound().unwrap();
        while Instant::now() < deadline {
            if s.send_to(b"STATUS=up\nREADY=1", &container_sock).is_ok() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    let started = Instant::now();
    let out = ctx.moat(&["start", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        sender.join().unwrap(),
        "the container's socket never appeared"
    );
    let mut buf = [0u8; 128];
    let n = host
        .recv(&mut buf)
        .expect("nothing relayed to the caller's socket");
    let state: serde_json::Value = serde_json::from_str(&ctx.moat(&["state", &id]).stdout).unwrap();
    let pid = state["pid"].as_i64().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        format!("READY=1\nMAINPID={pid}")
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let inside = ctx.moat(&["exec", &id, "cat", "/dev/shm/ns"]);
    assert_eq!(
        inside.stdout.trim(),
        "/run/notify/notify.sock",
        "{}",
        inside.stderr
    );
    ctx.moat(&["delete", "--force", &id]);
    let _ = std::fs::remove_file(&host_path);
}
