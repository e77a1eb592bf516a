//! Undoing a gVisor create that failed after `runsc create` started the sandbox, in
//! bounded time.
//!
//! The sandbox and the gofer are children of `runsc create`; once it has exited they belong
//! to the caller's subreaper (conmon, the shim) or PID 1. When the create fails after that
//! (`runsc create` killed after it saved its state — by a prestart hook, the OOM killer, a
//! signal —, or moat's own steps after it: the egress forwarder, a pod's waiter, `run
//! --detach`'s start), `runsc delete --force` SIGKILLs the sandbox and then polls
//! `kill(pid, 0)` until it fails, which it never does for a zombie: for 5 s (runsc
//! 20221219) or 2 min (20240729). conmon reaps only after moat's create has returned, so a
//! failed create under podman hung that long, each time.
//!
//! So moat ends the two processes itself, by pidfd, each checked to still be this
//! container's (runsc's `argv[0]`, moat's runsc root and the container's bundle on its
//! command line: a recorded pid may be another container's sandbox by now), and waits for
//! their exit, at most [`END_WITHIN`]. runsc's own delete is not called where runsc saved a
//! state: it would wait on a zombie, and signal the recorded pids without asking whose they
//! are. moat removes what runsc keeps of the container instead (its state and lock files,
//! the control socket file, the rootfs overlay's filestore); the caller's reap finishes the
//! rest, and the sandbox's cgroup is drained and removed in `cmds::discard`. Without a saved
//! state, runsc's delete runs, bounded by [`DELETE_WITHIN`]. What could not be ended is
//! reported, never waited for without bound.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::linux::sys;

/// How long the sandbox and the gofer get to exit after SIGKILL (a sandbox with a large
/// address space takes a while to tear it down).
pub const END_WITHIN: Duration = Duration::from_secs(10);

/// `runsc delete --force` of a container runsc saved no state for is killed after this
/// long.
pub const DELETE_WITHIN: Duration = Duration::from_secs(10);

/// runsc's `argv[0]` for the sandbox and the gofer (both releases).
const SANDBOX_ARGV0: &[u8] = b"runsc-sandbox";
const GOFER_ARGV0: &[u8] = b"runsc-gofer";

/// What runsc's state file records of a root container: its processes and the files only a
/// completed `runsc delete` would remove.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RunscFiles {
    pub sandbox_pid: i32,
    pub gofer_pid: i32,
    /// The bundle runsc was given (moat's state directory of the container): on the command
    /// line of both processes, and of no other container's.
    pub bundle: Option<PathBuf>,
    /// runsc 20240729's control socket file (20221219: an abstract name, nothing to remove).
    pub control_socket: Option<PathBuf>,
    /// `root.path` of the spec runsc read: where runsc 20240729 keeps the rootfs overlay's
    /// filestore (`.gvisor.filestore.<sandbox id>`, its default `--overlay2=root:self`).
    pub rootfs: Option<PathBuf>,
}

/// runsc's state file of root container `id` under runsc root `root`, if runsc saved one.
pub fn read_state(root: &Path, id: &str) -> Option<RunscFiles> {
    let bytes = std::fs::read(root.join(format!("{id}_sandbox:{id}.state"))).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    Some(parse_state(&v))
}

fn parse_state(v: &Value) -> RunscFiles {
    let pid = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0)
    };
    let path = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .filter(|s| s.starts_with('/'))
            .map(PathBuf::from)
    };
    RunscFiles {
        sandbox_pid: pid("/sandbox/pid"),
        gofer_pid: pid("/goferPid"),
        bundle: path("/bundleDir"),
        control_socket: path("/sandbox/controlSocketPath"),
        rootfs: path("/spec/root/path"),
    }
}

/// How one of runsc's processes ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Exited and reaped, or never there (or the pid is another process's by now).
    Gone,
    /// Exited, not reaped yet by its parent (the caller's subreaper, PID 1).
    Zombie,
    /// Still running after SIGKILL and the bound.
    Running,
}

/// Who a process must be for moat to signal it: runsc's sandbox or gofer (`argv0`) started
/// with moat's runsc root and this container's bundle. A pid runsc recorded may be another
/// process's by now, another container's sandbox among them (same `argv0`): its command
/// line names another bundle.
struct Runscs<'a> {
    argv0: &'a [u8],
    root: &'a Path,
    bundle: &'a Path,
}

impl Runscs<'_> {
    /// `cmdline` is `/proc/PID/cmdline`: NUL-separated arguments. Both releases write
    /// `--root=R`; the bundle is `--bundle=B` (the sandbox; 20240729's gofer) or
    /// `--bundle B` (20221219's gofer).
    fn started(&self, cmdline: &[u8]) -> bool {
        use std::os::unix::ffi::OsStrExt as _;
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let flag = |name: &[u8], want: &Path| {
            let want = want.as_os_str().as_bytes();
            args.windows(2).any(|w| w[0] == name && w[1] == want)
                || args.iter().any(|a| {
                    a.strip_prefix(name)
                        .and_then(|v| v.strip_prefix(b"="))
                        .is_some_and(|v| v == want)
                })
        };
        args.first() == Some(&self.argv0)
            && flag(b"--root", self.root)
            && flag(b"--bundle", self.bundle)
    }
}

/// SIGKILLs `pid` if it still is the process runsc started for this container (`who`), and
/// waits until `deadline` for it to exit.
fn end(pid: i32, who: &Runscs, deadline: Instant) -> End {
    if pid <= 0 {
        return End::Gone;
    }
    let Ok(pidfd) = sys::pidfd_open(pid) else {
        return End::Gone;
    };
    let Some((state, start)) = crate::state::process_start_time(pid) else {
        return End::Gone;
    };
    use std::os::fd::AsFd as _;
    // A zombie leader (runsc's processes die with `runsc create`) has no command line left
    // to check and needs no signal, but its other threads may still be exiting, and hold
    // its cgroup until they have: waited for all the same.
    if state != 'Z' && state != 'X' {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !who.started(&cmdline) {
            return End::Gone;
        }
        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
    }
    // A pidfd is readable once the whole thread group has exited.
    let left = deadline.saturating_duration_since(Instant::now());
    if !sys::poll_readable_within(pidfd.as_fd(), left).unwrap_or(false) {
        return End::Running;
    }
    // Exited: still the same process (a zombie), or reaped.
    match crate::state::process_start_time(pid) {
        Some((_, s)) if s == start => End::Zombie,
        _ => End::Gone,
    }
}

/// What ending the sandbox and the gofer of a root container came to.
#[derive(Debug)]
pub struct Ended {
    pub files: RunscFiles,
    pub sandbox: End,
    pub gofer: End,
}

impl Ended {
    /// The processes left running, for the report.
    pub fn running(&self) -> Vec<String> {
        let mut left = Vec::new();
        if self.sandbox == End::Running {
            left.push(format!("sandbox pid {}", self.files.sandbox_pid));
        }
        if self.gofer == End::Running {
            left.push(format!("gofer pid {}", self.files.gofer_pid));
        }
        left
    }
}

/// Ends the sandbox and the gofer runsc recorded for root container `id`; `None` when
/// runsc saved no state for it (its create failed before, and reaped what it started).
pub fn end_processes(runsc_root: &Path, id: &str, deadline: Instant) -> Option<Ended> {
    let files = read_state(runsc_root, id)?;
    // Without the bundle nothing can be told apart: nothing is signalled.
    let (sandbox, gofer) = match &files.bundle {
        Some(bundle) => {
            let who = |argv0| Runscs {
                argv0,
                root: runsc_root,
                bundle,
            };
            (
                end(files.sandbox_pid, &who(SANDBOX_ARGV0), deadline),
                end(files.gofer_pid, &who(GOFER_ARGV0), deadline),
            )
        }
        None => (End::Gone, End::Gone),
    };
    Some(Ended {
        files,
        sandbox,
        gofer,
    })
}

/// Waits until `deadline` for the sandbox's host cgroup to hold no process, SIGKILLing
/// those still there: besides the sandbox and the gofer, the platform's stub processes
/// (systrap, ptrace), which die with the sandbox a moment later. Returns the pids left.
pub fn drain_cgroup(cg: &crate::linux::cgroups::Cgroup, deadline: Instant) -> Vec<i32> {
    use std::os::fd::AsFd as _;
    loop {
        let pids = cg.pids().unwrap_or_default();
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        for pid in pids {
            // Only the sandbox's own run in its cgroup (runsc made it for them).
            if let Ok(fd) = sys::pidfd_open(pid) {
                let _ = sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// In place of `runsc delete`, which would wait on a zombie: the files runsc keeps of root
/// container `id` beyond its state and lock (those go in `cmds::forget`). Errors are
/// ignored (this undoes a create that failed; a file already gone is the aim).
pub fn remove_runsc_files(files: &RunscFiles, id: &str) {
    if let Some(sock) = &files.control_socket {
        let _ = std::fs::remove_file(sock);
    }
    if let Some(rootfs) = &files.rootfs {
        // runsc's own delete removes it by the same name (boot.SelfFilestorePath); unlink
        // never follows the last component.
        let _ = std::fs::remove_file(rootfs.join(format!(".gvisor.filestore.{id}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_file_fields_of_both_releases() {
        let v: Value = serde_json::from_str(
            r#"{"goferPid":12,"sandbox":{"pid":11,"controlSocketPath":"/r/@runsc/runsc-c.sock"},
                "bundleDir":"/r/c","spec":{"root":{"path":"/b/rootfs"}}}"#,
        )
        .unwrap();
        assert_eq!(
            parse_state(&v),
            RunscFiles {
                sandbox_pid: 11,
                gofer_pid: 12,
                bundle: Some("/r/c".into()),
                control_socket: Some("/r/@runsc/runsc-c.sock".into()),
                rootfs: Some("/b/rootfs".into()),
            }
        );
        // 20221219: no socket file; a relative path is never acted on.
        let v: Value = serde_json::from_str(
            r#"{"goferPid":0,"sandbox":{"pid":5},"spec":{"root":{"path":"rootfs"}}}"#,
        )
        .unwrap();
        assert_eq!(
            parse_state(&v),
            RunscFiles {
                sandbox_pid: 5,
                ..RunscFiles::default()
            }
        );
    }

    #[test]
    fn a_pid_that_is_not_runscs_is_left_alone() {
        // This test process is not runsc-sandbox: never signalled, counted as gone.
        let me = i32::try_from(std::process::id()).unwrap();
        let who = Runscs {
            argv0: SANDBOX_ARGV0,
            root: Path::new("/r/@runsc"),
            bundle: Path::new("/r/c"),
        };
        assert_eq!(end(me, &who, Instant::now()), End::Gone);
        assert_eq!(end(0, &who, Instant::now()), End::Gone);
    }

    #[test]
    fn only_this_containers_sandbox_and_gofer_are_runscs() {
        let who = |argv0| Runscs {
            argv0,
            root: Path::new("/r/@runsc"),
            bundle: Path::new("/r/c"),
        };
        let cmd = |s: &str| s.replace(' ', "\0").into_bytes();
        // The command lines of both releases (shortened).
        let sandbox_2024 =
            cmd("runsc-sandbox --root=/r/@runsc --network=none boot --bundle=/r/c --spec-fd=7 c");
        let gofer_2022 = cmd("runsc-gofer --root=/r/@runsc gofer --bundle /r/c --spec-fd=3");
        let gofer_2024 = cmd("runsc-gofer --root=/r/@runsc gofer --bundle=/r/c --io-fds=5");
        assert!(who(SANDBOX_ARGV0).started(&sandbox_2024));
        assert!(who(GOFER_ARGV0).started(&gofer_2022));
        assert!(who(GOFER_ARGV0).started(&gofer_2024));
        // The pid reused by another container's sandbox, another root's, or another program.
        for other in [
            cmd("runsc-sandbox --root=/r/@runsc boot --bundle=/r/d d"),
            cmd("runsc-sandbox --root=/s/@runsc boot --bundle=/r/c c"),
            cmd("runsc-sandbox --root=/r/@runsc boot --bundle=/r/cc c"),
            cmd("sleep --root=/r/@runsc --bundle=/r/c"),
            cmd("runsc-sandbox --root=/r/@runsc boot"),
        ] {
            assert!(!who(SANDBOX_ARGV0).started(&other), "{other:?}");
        }
        assert!(!who(GOFER_ARGV0).started(&sandbox_2024));
    }
}
