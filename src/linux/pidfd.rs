//! `--pidfd-socket` (runc 1.5, create, run and exec): a pidfd of the container's process
//! (the init, or the exec'd process) sent over a unix socket the caller listens on, with
//! SCM_RIGHTS, so a supervisor can wait for and signal exactly that process whatever
//! becomes of its pid. The message's bytes name the process as runc's do: `standard` for
//! an init, `setns` for an exec'd process. moat opens the pidfd from the parent (the
//! process is its child, or was made by it and not yet released), where runc's init opens
//! its own: the fd is the same.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::sys;

/// Why the pidfd could not be handed over; names the socket.
#[derive(Debug, thiserror::Error)]
pub enum PidfdSocketError {
    #[error("--pidfd-socket {}: connect", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--pidfd-socket {}: pidfd_open of pid {pid}", path.display())]
    Open {
        path: PathBuf,
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("--pidfd-socket {}: send the pidfd", path.display())]
    Send {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The caller's socket, connected before the process exists: a path nobody listens on
/// fails the call before anything runs.
pub struct PidfdSocket {
    path: PathBuf,
    sock: OwnedFd,
}

impl PidfdSocket {
    pub fn connect(path: &Path) -> Result<PidfdSocket, PidfdSocketError> {
        let sock = sys::connect_unix(path).map_err(|source| PidfdSocketError::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(PidfdSocket {
            path: path.to_path_buf(),
            sock,
        })
    }

    /// Sends a pidfd of `pid` (`what`: `standard` or `setns`), then closes the socket.
    pub fn send(self, pid: i32, what: &str) -> Result<(), PidfdSocketError> {
        let pidfd = sys::pidfd_open(pid).map_err(|source| PidfdSocketError::Open {
            path: self.path.clone(),
            pid,
            source,
        })?;
        sys::send_with_fd(self.sock.as_fd(), what.as_bytes(), pidfd.as_fd()).map_err(|source| {
            PidfdSocketError::Send {
                path: self.path.clone(),
                source,
            }
        })
    }
}
