//! What moat asks its CRIU helper, `moat-criu` (src/bin/moat-criu.rs), and what it answers:
//! one JSON [`Request`] on the helper's stdin, one JSON [`Reply`] on its stdout. Shared by
//! both binaries (the helper includes this file), so the two cannot disagree.

use serde::{Deserialize, Serialize};

/// One conversation with `criu swrk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// CRIU's version (the `VERSION` request): answers [`Answer::Version`].
    Version {
        /// The `criu` to run: `--criu`, else `criu` looked up on `PATH` (as runc).
        criu: String,
    },
    /// `DUMP` of the process tree at `pid`: answers [`Answer::Dumped`].
    Dump(Dump),
    /// `RESTORE` of an image: answers [`Answer::Restored`].
    Restore(Restore),
}

/// What `RESTORE` is given. moat-criu makes `root` a mount point in a mount namespace of
/// its own (a bind onto itself), as CRIU wants the root it restores into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    pub criu: String,
    pub images_dir: std::path::PathBuf,
    pub work_dir: Option<std::path::PathBuf>,
    pub root: std::path::PathBuf,
    /// `ext_mnt`: the dump's external mount names (key) and the host paths bound there.
    pub ext_mnt: Vec<(String, String)>,
    /// The container has a cgroup namespace of its own: the helper, already in the
    /// container's cgroups, unshares one before starting CRIU, so the restored tree is born
    /// in a namespace rooted at its cgroup (CRIU, told to ignore cgroups, makes none).
    pub cgroupns: bool,
}

/// What `DUMP` is given (CRIU's RPC options of the same names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    pub criu: String,
    /// The container's init (host pid).
    pub pid: i32,
    pub images_dir: std::path::PathBuf,
    pub work_dir: Option<std::path::PathBuf>,
    /// The container's rootfs on the host (`root`).
    pub root: std::path::PathBuf,
    pub leave_running: bool,
    /// `ext_mnt`: mount points inside the container (key) dumped as external, by the name
    /// a restore maps back to a host path (value).
    pub ext_mnt: Vec<(String, String)>,
}

/// What a [`Request`] got done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// `major.minor.sublevel` (a git build's id after a `-`).
    Version(String),
    Dumped,
    /// The restored init's host pid.
    Restored(i32),
}

/// The answer, or the error: one line.
pub type Reply = Result<Answer, String>;
