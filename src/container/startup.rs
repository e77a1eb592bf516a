//! What moat inherits from its caller besides arguments: descriptors above stdio and the
//! systemd socket-activation variables. Both are taken once, in `main`, before moat opens
//! anything, because both decide what reaches a container.
//!
//! * **Descriptors.** `--preserve-fds N` (and socket activation's `LISTEN_FDS`) hand the
//!   numbers `3 .. 3+N` to the container as they are. Were one of them not open, the
//!   first file moat opens (its log, the state directory, the exec fifo, the sync socket,
//!   a pidfd) would take that number — the kernel always gives the lowest free one — and
//!   would be passed on as if the caller had sent it. So the range must consist of fds
//!   that were open when moat started. Since moat never closes a descriptor it did not
//!   open, a range that was entirely open at start-up stays taken, and every descriptor
//!   moat opens lands above it: checking is all that reserving the range needs.
//!   `first_closed` is the lowest number ≥ 3 that was not open at start-up; the range
//!   is valid exactly when it ends at or below it.
//! * **`LISTEN_*`.** Honoured as systemd (and runc) define them: only when `LISTEN_PID`
//!   is this process's pid, so variables inherited from some ancestor that was socket
//!   activated are ignored; only by `create` and `run` (an `exec` never passes them);
//!   and removed from moat's own environment, so neither moat's children (hooks, runsc,
//!   newuidmap) nor a later re-execution see them as theirs. The container gets
//!   `LISTEN_FDS=N` and `LISTEN_PID=1` in its own environment (`linux::attrs`).

use std::ffi::OsString;
use std::sync::OnceLock;

use anyhow::bail;

/// The socket-activation variables systemd sets (sd_listen_fds(3)).
const LISTEN_VARS: [&str; 3] = ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"];

#[derive(Debug)]
struct Inherited {
    /// The lowest descriptor number ≥ 3 that was not open at start-up.
    first_closed: i32,
    /// `LISTEN_FDS` when `LISTEN_PID` named this process, else 0.
    listen_fds: u32,
    /// The `LISTEN_*` variables as received, for moat's re-execution of itself
    /// (`linux::exeseal`): the same process (same pid) must see what it was given.
    listen_env: Vec<(OsString, OsString)>,
}

static INHERITED: OnceLock<Inherited> = OnceLock::new();

/// Takes stock of what the caller passed. Called first thing in `main` (after stdio is
/// made valid), while the process is single-threaded and has opened nothing.
pub fn capture() {
    INHERITED.get_or_init(take);
}

fn take() -> Inherited {
    let mut fd = 3;
    // One fcntl per inherited descriptor, one more for the first closed: usually one.
    while nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).is_ok() {
        fd += 1;
    }
    let listen_env: Vec<(OsString, OsString)> = LISTEN_VARS
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (OsString::from(k), v)))
        .collect();
    let get = |k: &str| -> Option<u32> {
        listen_env
            .iter()
            .find(|(name, _)| name == k)
            .and_then(|(_, v)| v.to_str()?.parse().ok())
    };
    let listen_fds = match (get("LISTEN_PID"), get("LISTEN_FDS")) {
        (Some(pid), Some(n)) if pid == std::process::id() => n,
        _ => 0,
    };
    for k in LISTEN_VARS {
        // Single-threaded here (nothing has been spawned yet).
        std::env::remove_var(k);
    }
    Inherited {
        first_closed: fd,
        listen_fds,
        listen_env,
    }
}

fn inherited() -> &'static Inherited {
    INHERITED.get_or_init(take)
}

/// The socket-activation fds this process was given (0 unless `LISTEN_PID` is ours).
pub fn listen_fds() -> u32 {
    inherited().listen_fds
}

/// The `LISTEN_*` variables as moat received them (for its re-execution).
pub fn listen_env() -> &'static [(OsString, OsString)] {
    &inherited().listen_env
}

/// Checks that `3 .. 3+listen+preserve` were all open at start-up: the `listen`
/// socket-activation fds first, then `--preserve-fds` (runc's order).
pub fn check_range(preserve_fds: u32, listen_fds: u32) -> super::Result<()> {
    check_against(inherited().first_closed, preserve_fds, listen_fds)
}

fn check_against(first_closed: i32, preserve_fds: u32, listen_fds: u32) -> super::Result<()> {
    let end = 3 + u64::from(listen_fds) + u64::from(preserve_fds);
    if end <= u64::try_from(first_closed).unwrap_or(0) {
        return Ok(());
    }
    if u64::try_from(first_closed).unwrap_or(0) < 3 + u64::from(listen_fds) {
        bail!("LISTEN_FDS={listen_fds}: fd {first_closed} is not open");
    }
    bail!("--preserve-fds {preserve_fds}: fd {first_closed} is not open")
}

#[cfg(test)]
mod tests {
    use super::check_against;

    #[test]
    fn range_must_end_at_the_first_closed_fd() {
        assert!(check_against(3, 0, 0).is_ok());
        assert!(check_against(5, 2, 0).is_ok());
        assert!(check_against(6, 2, 1).is_ok());
        let msg = |r: anyhow::Result<()>| r.unwrap_err().to_string();
        assert_eq!(
            msg(check_against(4, 2, 0)),
            "--preserve-fds 2: fd 4 is not open"
        );
        assert_eq!(
            msg(check_against(3, 1, 0)),
            "--preserve-fds 1: fd 3 is not open"
        );
        assert_eq!(
            msg(check_against(4, 0, 2)),
            "LISTEN_FDS=2: fd 4 is not open"
        );
        assert_eq!(
            msg(check_against(5, 1, 2)),
            "--preserve-fds 1: fd 5 is not open"
        );
        assert_eq!(
            msg(check_against(3, u32::MAX, u32::MAX)),
            "LISTEN_FDS=4294967295: fd 3 is not open"
        );
    }
}
