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
    /// What the restored tree must be, from moat's plan for the bundle: checked by the
    /// helper while CRIU still holds the tree stopped (its `pre-resume` notification).
    pub expect: Expect,
    /// `inherit_fd`: the restored files CRIU names by `key` (the container's stdio as the
    /// dump recorded it) are given the helper's descriptor `fd` (inherited from moat).
    pub inherit_fd: Vec<(i32, String)>,
}

/// What moat's plan says the restored tree is. A process may lose capabilities, gain
/// seccomp filters or set no_new_privs on its own after moat started it, never the
/// reverse: so the sets are upper bounds, the filter count and NNP lower bounds; the
/// init's namespaces and every restored process's cgroups are exact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expect {
    /// The init's namespaces, by their `/proc/<pid>/ns/` name.
    pub namespaces: Vec<NsExpect>,
    /// Upper bounds of `CapBnd`, `CapEff`, `CapPrm`, `CapInh`, `CapAmb`.
    pub cap_bounding: u64,
    pub cap_effective: u64,
    pub cap_permitted: u64,
    pub cap_inheritable: u64,
    pub cap_ambient: u64,
    /// The spec's `noNewPrivileges`: then `NoNewPrivs` must be 1.
    pub no_new_privs: bool,
    /// The number of seccomp filters moat loads: with one or more, `Seccomp` must be 2
    /// (filter) and `Seccomp_filters` at least this.
    pub seccomp_filters: u32,
    /// The container's cgroup directory in each hierarchy (host paths): every restored
    /// process must be listed in each one's `cgroup.procs`.
    pub cgroup_dirs: Vec<std::path::PathBuf>,
}

/// One namespace of the restored init (`/proc/<pid>/ns/<name>`, by its `readlink`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsExpect {
    /// `pid`, `net`, `mnt`, `ipc`, `uts`, `user`, `cgroup`, `time`.
    pub name: String,
    pub rule: NsRule,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NsRule {
    /// The spec asks for a new one: anything but the host's (moat's own, this link).
    Own { host: String },
    /// The spec does not list it: the host's (moat's own, this link).
    Host { host: String },
    /// The spec joins one by path: that one (the link of the namespace file moat opened).
    Joined { link: String, path: String },
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
    /// `external`: the namespaces the spec joins by path, left out of the image as
    /// `NAME[INODE]:KEY` (CRIU's `--external` form; `KEY` from `criu::external_ns_key`), so a
    /// restore puts the tree back into the namespace it is given under that key.
    pub external: Vec<String>,
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
