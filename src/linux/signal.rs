//! Signal names as runc accepts them, and race-free delivery to a recorded process.

use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::sys;
use crate::state::Record;

const NAMES: [(&str, i32); 31] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("IOT", libc::SIGIOT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("SYS", libc::SIGSYS),
];

/// `9`, `KILL`, `SIGKILL`, `sigkill`, `RTMIN+3`; `0` is the liveness probe callers use
/// (`kill ID 0`: nothing is delivered, and the call fails when the init is not running,
/// as kill(2) and runc do).
pub fn parse(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (0..=libc::SIGRTMAX()).contains(&n).then_some(n);
    }
    let up = s.to_ascii_uppercase();
    let name = up.strip_prefix("SIG").unwrap_or(&up);
    if let Some(&(_, n)) = NAMES.iter().find(|(k, _)| *k == name) {
        return Some(n);
    }
    if let Some(rest) = name.strip_prefix("RTMIN") {
        let off: i32 = if rest.is_empty() {
            0
        } else {
            rest.strip_prefix('+')?.parse().ok()?
        };
        let n = libc::SIGRTMIN() + off;
        return (n <= libc::SIGRTMAX()).then_some(n);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        let off: i32 = if rest.is_empty() {
            0
        } else {
            rest.strip_prefix('-')?.parse().ok()?
        };
        let n = libc::SIGRTMAX() - off;
        return (n >= libc::SIGRTMIN()).then_some(n);
    }
    None
}

/// `SIGKILL` for 9, `SIGRTMIN+3`; `None` for a number that is no signal.
pub fn name(sig: i32) -> Option<String> {
    if let Some((n, _)) = NAMES.iter().find(|(_, n)| *n == sig) {
        return Some(format!("SIG{n}"));
    }
    (libc::SIGRTMIN()..=libc::SIGRTMAX())
        .contains(&sig)
        .then(|| format!("SIGRTMIN+{}", sig - libc::SIGRTMIN()))
}

/// How a child moat waited for (a hook, runsc, newuidmap, the container's init) ended, as
/// moat prints it: "exited with status 1", "killed by signal 9 (SIGKILL)", never a raw
/// wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildEnd {
    Exited(i32),
    Killed {
        signal: i32,
        core_dumped: bool,
    },
    Stopped(i32),
    /// Not ended yet (a `WNOHANG` wait that found it alive, or a continued child).
    Running,
}

/// strsignal's words for the signals a failed program most often dies of (runc prints
/// Go's, the same: "bad system call" is how a seccomp kill reads).
fn describe(n: i32) -> Option<&'static str> {
    Some(match n {
        libc::SIGSYS => "bad system call",
        libc::SIGSEGV => "segmentation fault",
        libc::SIGABRT => "aborted",
        libc::SIGBUS => "bus error",
        libc::SIGILL => "illegal instruction",
        libc::SIGFPE => "floating point exception",
        _ => return None,
    })
}

impl std::fmt::Display for ChildEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sig = |f: &mut std::fmt::Formatter<'_>, n: i32| match (name(n), describe(n)) {
            (Some(name), Some(what)) => write!(f, "signal {n} ({name}: {what})"),
            (Some(name), None) => write!(f, "signal {n} ({name})"),
            _ => write!(f, "signal {n}"),
        };
        match *self {
            ChildEnd::Exited(c) => write!(f, "exited with status {c}"),
            ChildEnd::Killed {
                signal,
                core_dumped,
            } => {
                f.write_str("killed by ")?;
                sig(f, signal)?;
                if core_dumped {
                    f.write_str(" (core dumped)")?;
                }
                Ok(())
            }
            ChildEnd::Stopped(n) => {
                f.write_str("stopped by ")?;
                sig(f, n)
            }
            ChildEnd::Running => f.write_str("still running"),
        }
    }
}

impl From<std::process::ExitStatus> for ChildEnd {
    fn from(s: std::process::ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (s.code(), s.signal(), s.stopped_signal()) {
            (Some(c), _, _) => ChildEnd::Exited(c),
            (_, Some(signal), _) => ChildEnd::Killed {
                signal,
                core_dumped: s.core_dumped(),
            },
            (_, _, Some(n)) => ChildEnd::Stopped(n),
            _ => ChildEnd::Running,
        }
    }
}

impl From<WaitStatus> for ChildEnd {
    fn from(s: WaitStatus) -> Self {
        match s {
            WaitStatus::Exited(_, c) => ChildEnd::Exited(c),
            WaitStatus::Signaled(_, signal, core_dumped) => ChildEnd::Killed {
                signal: signal as i32,
                core_dumped,
            },
            WaitStatus::Stopped(_, n) => ChildEnd::Stopped(n as i32),
            WaitStatus::PtraceEvent(_, n, _) => ChildEnd::Stopped(n as i32),
            WaitStatus::PtraceSyscall(_) => ChildEnd::Stopped(libc::SIGTRAP),
            WaitStatus::Continued(_) | WaitStatus::StillAlive => ChildEnd::Running,
        }
    }
}

/// Signals the recorded init. The pidfd is opened first and the start time checked after,
/// so a pid recycled in between can never receive the signal.
pub fn signal_init(rec: &Record, sig: i32) -> std::io::Result<bool> {
    let pidfd = match sys::pidfd_open(rec.pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(false),
        Err(e) => return Err(e),
    };
    if !rec.alive() {
        return Ok(false);
    }
    match sys::pidfd_send_signal(pidfd.as_fd(), sig) {
        Ok(()) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The parent pid of `pid` (`/proc/<pid>/stat` field 4), or `None` once it is gone.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = crate::linux::read_kernel_file(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(1)?.parse().ok()
}

/// Sends `sig` to the recorded init and every descendant of it that can be proven one,
/// and to nothing else: for a container in a cgroup it joined, whose other processes
/// are someone else's. Each process is pinned by a pidfd first and its parent checked
/// after (a recycled pid fails the check). For SIGKILL the tree is stopped top-down
/// first: a process is added only once stopped, and its children are listed after, so
/// a fork cannot slip past the walk; a descendant orphaned before the walk (reparented
/// away) can no longer be proven the container's and is left. Returns how many were
/// signalled.
pub fn signal_descendants(rec: &Record, sig: i32) -> usize {
    let Ok(init) = sys::pidfd_open(rec.pid) else {
        return 0;
    };
    if !rec.alive() {
        return 0;
    }
    let stop = sig == libc::SIGKILL;
    if stop {
        let _ = sys::pidfd_send_signal(init.as_fd(), libc::SIGSTOP);
    }
    let mut tree: Vec<(i32, OwnedFd)> = vec![(rec.pid, init)];
    let mut rounds = 0;
    loop {
        rounds += 1;
        let mut found = false;
        let procs = std::fs::read_dir("/proc").map(|d| d.flatten().collect::<Vec<_>>());
        for e in procs.unwrap_or_default() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            if tree.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            let Some(ppid) = parent_of(pid) else { continue };
            if !tree.iter().any(|(p, _)| *p == ppid) {
                continue;
            }
            let Ok(fd) = sys::pidfd_open(pid) else {
                continue;
            };
            // Pinned now: if it is still the child of a member, it is this process.
            if parent_of(pid) != Some(ppid) {
                continue;
            }
            if stop {
                let _ = sys::pidfd_send_signal(fd.as_fd(), libc::SIGSTOP);
            }
            tree.push((pid, fd));
            found = true;
        }
        // Each walk finds at least the children of what the last one added; a tree that
        // keeps growing unstopped (any signal but SIGKILL) is cut off at the bound.
        if !found || rounds > 100 {
            break;
        }
    }
    for (_, fd) in &tree {
        let _ = sys::pidfd_send_signal(fd.as_fd(), sig);
    }
    tree.len()
}

/// Waits until the recorded init has exited (a zombie counts: PID 1 here may reap late).
pub fn wait_exit(rec: &Record, timeout: Duration) -> bool {
    let Ok(pidfd) = sys::pidfd_open(rec.pid) else {
        return true;
    };
    if !rec.alive() {
        return true;
    }
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return !rec.alive();
        }
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        let ms =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::MAX);
        match poll(&mut fds, ms) {
            Ok(n) if n > 0 => return true,
            Ok(_) => {}
            Err(nix::Error::EINTR) => {}
            Err(_) => return !rec.alive(),
        }
    }
}

/// Every signal a foreground `run`/`exec` passes on to the container process.
pub fn forwarded_set() -> SigSet {
    let mut set = SigSet::all();
    for s in [
        Signal::SIGKILL,
        Signal::SIGSTOP,
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGILL,
        Signal::SIGFPE,
    ] {
        set.remove(s);
    }
    set
}

/// Waits for our child `pid`, forwarding every signal in `set` (blocked by the caller
/// before the child existed, so none is lost) except SIGCHLD. Orphans reparented to us as
/// subreaper are reaped on the way. Returns the exit status, 128+N for a signal.
/// With `master`, also relays a terminal: the caller's stdin to the pty master and
/// the master to the caller's stdout, with the caller's window size kept in sync (used by
/// foreground `run`/`exec` with a terminal and no `--console-socket`, as runc does).
pub fn forward_and_wait(
    pid: i32,
    pidfd: &OwnedFd,
    set: &SigSet,
    master: Option<&OwnedFd>,
) -> std::io::Result<i32> {
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC)?;
    let _raw = master.and_then(|_| super::console::RawMode::enter(std::io::stdin().as_fd()));
    if let Some(m) = master {
        super::console::copy_winsize(std::io::stdin().as_fd(), m.as_fd());
    }
    let mut stdin_open = master.is_some();
    let mut code = None;
    loop {
        let mut fds = vec![
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        let stdin = std::io::stdin();
        if let Some(m) = master {
            fds.push(PollFd::new(m.as_fd(), PollFlags::POLLIN));
            if stdin_open {
                fds.push(PollFd::new(stdin.as_fd(), PollFlags::POLLIN));
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(_) => {}
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (sig_ready, master_ready, stdin_ready) = (ready(0), ready(2), ready(3));
        drop(fds);
        if sig_ready {
            if let Ok(Some(info)) = sfd.read_signal() {
                let sig = i32::try_from(info.ssi_signo).unwrap_or(0);
                if sig == libc::SIGWINCH {
                    if let Some(m) = master {
                        super::console::copy_winsize(std::io::stdin().as_fd(), m.as_fd());
                    }
                } else if sig != libc::SIGCHLD {
                    let _ = sys::pidfd_send_signal(pidfd.as_fd(), sig);
                }
            }
        }
        if let (Some(m), true) = (master, master_ready) {
            super::console::pump(m.as_fd(), std::io::stdout().as_fd());
        }
        if let (Some(m), true) = (master, stdin_ready) {
            stdin_open = super::console::pump(std::io::stdin().as_fd(), m.as_fd());
        }
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, c)) if p.as_raw() == pid => code = Some(c),
                Ok(WaitStatus::Signaled(p, s, _)) if p.as_raw() == pid => {
                    code = Some(128 + s as i32)
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if let Some(c) = code {
            if let Some(m) = master {
                // What the process wrote just before exiting is still in the pty.
                while super::console::pump(m.as_fd(), std::io::stdout().as_fd()) {}
            }
            return Ok(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, ChildEnd};

    #[test]
    fn ends_read_as_statuses() {
        assert_eq!(ChildEnd::Exited(1).to_string(), "exited with status 1");
        let killed = ChildEnd::Killed {
            signal: 9,
            core_dumped: false,
        };
        assert_eq!(killed.to_string(), "killed by signal 9 (SIGKILL)");
        let core = ChildEnd::Killed {
            signal: libc::SIGSEGV,
            core_dumped: true,
        };
        assert_eq!(
            core.to_string(),
            "killed by signal 11 (SIGSEGV: segmentation fault) (core dumped)"
        );
        let rt = ChildEnd::Killed {
            signal: libc::SIGRTMIN() + 2,
            core_dumped: false,
        };
        assert!(rt.to_string().ends_with("(SIGRTMIN+2)"), "{rt}");
        use std::os::unix::process::ExitStatusExt;
        let raw = std::process::ExitStatus::from_raw(9);
        assert_eq!(ChildEnd::from(raw), killed);
        let exited = std::process::ExitStatus::from_raw(1 << 8);
        assert_eq!(ChildEnd::from(exited), ChildEnd::Exited(1));
    }

    #[test]
    fn forms() {
        assert_eq!(parse("9"), Some(9));
        assert_eq!(parse("KILL"), Some(9));
        assert_eq!(parse("SIGTERM"), Some(15));
        assert_eq!(parse("sigusr1"), Some(10));
        assert_eq!(parse("RTMIN+1"), Some(libc::SIGRTMIN() + 1));
        assert_eq!(parse("NOPE"), None);
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("99"), None);
    }
}
