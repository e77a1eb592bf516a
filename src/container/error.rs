//! The lifecycle layer's refusals: one variant per operation and what it refused, each
//! naming its object. The texts are the ones runc prints and clients match
//! (`../shared/notes/clients.md`: "container not running", "cannot start a container
//! that has stopped", ...): they must not change.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot start a container that has stopped")]
    StartStopped,
    #[error("cannot start an already running container")]
    StartRunning,
    #[error("cannot start a container that is still being created")]
    StartCreating,
    /// Opening, writing or removing the exec fifo `start` releases the init through.
    #[error("{op} {}", path.display())]
    StartFifo {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The init did not exec within `[runtime] sync_timeout` (and its startContainer
    /// hooks' timeouts) after start; it was killed.
    #[error("start: no answer from the init within {secs}s (it did not exec; killed)")]
    StartTimeout { id: String, secs: u64 },
    #[error("wait for the exec of {id}")]
    StartWait {
        id: String,
        #[source]
        source: std::io::Error,
    },
    /// kill, update, verify, pause of a container whose init is gone.
    #[error("container not running")]
    NotRunning,
    #[error("invalid signal {0:?}")]
    KillSignal(String),
    #[error("container already paused")]
    PauseAlreadyPaused,
    #[error("container not paused")]
    ResumeNotPaused,
    /// pause/resume: the cgroup to freeze or thaw.
    #[error("container has no cgroup to {0}")]
    FreezeNoCgroup(&'static str),
    #[error("cannot delete container {id} that is not stopped: {status}")]
    DeleteNotStopped { id: String, status: &'static str },
    #[error("container init {pid} did not exit after SIGKILL")]
    DeleteKill { pid: i32 },
    #[error("container {id} has no cgroup to update")]
    UpdateNoCgroup { id: String },
    #[error("container with id {id} is not running")]
    EventsNotRunning { id: String },
    #[error("container {id} has no cgroup to read stats from")]
    EventsNoCgroup { id: String },
    #[error("invalid format option")]
    PsFormat,
    #[error("couldn't find PID field in ps output")]
    PsNoPidColumn,
    #[error("invalid format {0:?} (want table or json)")]
    ListFormat(String),
}
