//! OCI hooks: each gets the container state JSON on stdin, its own args (args[0] is argv[0])
//! and exactly its own env, and is killed when its timeout expires.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::sys;
use crate::spec::Hook;

#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error("error running {kind} hook #{index}: {path}: cannot start: {source}")]
    Spawn {
        kind: &'static str,
        index: usize,
        path: String,
        source: std::io::Error,
    },
    #[error("error running {kind} hook #{index}: {path}: {status}")]
    Failed {
        kind: &'static str,
        index: usize,
        path: String,
        status: super::signal::ChildEnd,
    },
    #[error("error running {kind} hook #{index}: {path}: timed out after {secs}s and was killed")]
    Timeout {
        kind: &'static str,
        index: usize,
        path: String,
        secs: i64,
    },
}

/// Runs hooks in order; the first failure stops the list.
pub fn run(kind: &'static str, hooks: &[Hook], state: &[u8]) -> Result<(), HookError> {
    // Under the recording fake of `sys` a hook is a step of the sequence, not a program:
    // recorded (its kind and path), never run.
    #[cfg(test)]
    if sys::record::active() {
        for h in hooks {
            sys::record::intercept("hook", &[("kind", &kind), ("path", &h.path)]);
        }
        return Ok(());
    }
    for (index, h) in hooks.iter().enumerate() {
        run_one(kind, index, h, state)?;
    }
    Ok(())
}

fn run_one(kind: &'static str, index: usize, h: &Hook, state: &[u8]) -> Result<(), HookError> {
    let mut cmd = Command::new(&h.path);
    if let Some((argv0, rest)) = h.args.split_first() {
        cmd.arg0(argv0).args(rest);
    }
    cmd.env_clear();
    for kv in &h.env {
        if let Some((k, v)) = kv.split_once('=') {
            cmd.env(k, v);
        }
    }
    // Hooks must not inherit moat's stdout: a client waiting for EOF on it would hang
    // for as long as a hook's children live. Their output goes to our stderr.
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    let spawn_err = |source| HookError::Spawn {
        kind,
        index,
        path: h.path.clone(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_err)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that does not read its stdin is fine (EPIPE is ignored).
        let _ = stdin.write_all(state);
    }
    let status = match h.timeout {
        None => child.wait().map_err(spawn_err)?,
        Some(secs) => {
            #[allow(clippy::cast_possible_wrap)] // a pid: at most pid_max, 2^22
            let pidfd = sys::pidfd_open(child.id() as i32).map_err(spawn_err)?;
            // Validated > 0 (spec/validate.rs).
            let deadline = Instant::now() + Duration::from_secs(secs.unsigned_abs());
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
                let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                match poll(
                    &mut fds,
                    PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
                ) {
                    Ok(0) => {
                        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                        let _ = child.wait();
                        return Err(HookError::Timeout {
                            kind,
                            index,
                            path: h.path.clone(),
                            secs,
                        });
                    }
                    Ok(_) => break child.wait().map_err(spawn_err)?,
                    Err(nix::Error::EINTR) => continue,
                    Err(e) => return Err(spawn_err(e.into())),
                }
            }
        }
    };
    if status.success() {
        Ok(())
    } else {
        Err(HookError::Failed {
            kind,
            index,
            path: h.path.clone(),
            status: status.into(),
        })
    }
}
