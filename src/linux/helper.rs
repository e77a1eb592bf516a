//! moat's helper binaries (`moat-dbus`, `moat-criu`), which keep their crates off moat's own
//! start-up: each is asked one JSON request on its stdin and answers once on its stdout.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::Child;
use std::time::{Duration, Instant};

use super::sys;

/// Writes `request` to the started `child`'s stdin (then closed) and reads its stdout to the
/// end, for at most `within`. `None`: no end within the bound; the child is killed. The
/// child is reaped either way.
pub fn ask(child: &mut Child, request: &[u8], within: Duration) -> Option<Vec<u8>> {
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exited already is seen below, as an answer that does not parse.
        let _ = stdin.write_all(request);
    }
    let answered = match child.stdout.take() {
        Some(mut stdout) => read_to_end_within(&mut stdout, within),
        None => Some(Vec::new()),
    };
    if answered.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
    answered
}

fn read_to_end_within(stdout: &mut std::process::ChildStdout, within: Duration) -> Option<Vec<u8>> {
    let until = Instant::now() + within;
    let mut out = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match sys::poll_readable_within(stdout.as_fd(), left) {
            Ok(true) => {}
            Ok(false) | Err(_) => return None,
        }
        let mut buf = [0u8; 4096];
        match stdout.read(&mut buf) {
            Ok(0) => return Some(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Some(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn piped(cmd: &mut Command) -> Child {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn")
    }

    #[test]
    fn the_answer_is_what_the_helper_wrote_before_its_end() {
        let mut cat = piped(&mut Command::new("cat"));
        let out = ask(&mut cat, b"{\"q\":1}", Duration::from_secs(10));
        assert_eq!(out.as_deref(), Some(&b"{\"q\":1}"[..]));
    }

    #[test]
    fn a_helper_that_does_not_end_in_time_is_killed() {
        let mut sleeper = piped(Command::new("sleep").arg("30"));
        let t = Instant::now();
        assert_eq!(ask(&mut sleeper, b"{}", Duration::from_millis(200)), None);
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        // Reaped: nothing left to wait for.
        assert!(sleeper.try_wait().is_ok_and(|s| s.is_some()));
    }
}
