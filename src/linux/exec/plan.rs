//! Rows 1 and 2 of the exec table: everything read and checked before anything is made.
//!
//! [`Facts::read`] reads what the state directory and the host say (status, the saved
//! spec, the compiled seccomp programs, the host's LSMs); the lifecycle layer decides the
//! process from them; [`Plan::new`] then opens what the forks need (the init's pidfd, its
//! namespaces, the cgroup placement). A failure in either leaves nothing behind, because
//! nothing has been forked, joined or connected yet.

use std::os::fd::OwnedFd;

use super::{ExecError, ExecOpts};
use crate::linux::attrs::Attrs;
use crate::linux::cgroups::Placement;
use crate::linux::hostfacts::HostFacts;
use crate::linux::seccomp::Filter;
use crate::linux::{capabilities, namespaces, sys};
use crate::spec::Spec;
use crate::state::{self, ContainerDir, Record, Status};

/// Row 1: what the container's state directory and the host say.
pub struct Facts {
    /// The container's `config.json` as saved at create (the policy applied).
    pub spec: Spec,
    /// The container's bounding set (`process.capabilities.bounding`), which an exec'd
    /// process's `--cap` may not exceed under RESTRICTED.
    pub bounding: u64,
    /// The container's compiled seccomp programs, in load order.
    pub filters: Vec<Filter>,
    /// Read on the host, before joining anything: the exec'd process's LSM labels follow
    /// these.
    pub host: HostFacts,
    /// The container is paused (`--ignore-paused`): the exec'd process freezes as it
    /// enters the cgroup, so the state lock must not be held for it ([`Plan::hold`]).
    pub paused: bool,
}

impl Facts {
    /// Row 1: the status checked (a stopped container, a paused one without
    /// `ignore_paused`), then the spec (and its bounding set), the seccomp programs and
    /// the host facts read.
    pub fn read(dir: &ContainerDir, rec: &Record, ignore_paused: bool) -> Result<Facts, ExecError> {
        let status = rec.status(dir);
        match status {
            Status::Stopped => return Err(ExecError::Stopped { id: rec.id.clone() }),
            Status::Paused if !ignore_paused => {
                return Err(ExecError::Paused { id: rec.id.clone() })
            }
            _ => {}
        }
        // What the state directory holds first, then what it means.
        let spec = dir.load_spec()?;
        let mut programs = Vec::new();
        while let Some(b) = dir.read_file(&state::seccomp_file(programs.len()))? {
            programs.push(b);
        }
        let bounding = capabilities::from_saved(spec.process().capabilities.as_ref()).bounding;
        let filters = programs
            .iter()
            .enumerate()
            .map(|(i, b)| {
                Filter::from_bytes(b).ok_or_else(|| ExecError::SeccompProgram {
                    file: state::seccomp_file(i),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Facts {
            spec,
            bounding,
            filters,
            host: HostFacts::probe(),
            paused: status == Status::Paused,
        })
    }
}

/// Row 2: what the joiner and the exec'd process are given.
pub struct Plan<'a> {
    pub(super) attrs: &'a Attrs,
    /// The init's pidfd: what the joiner joins (`setns` on a pidfd).
    pub(super) pidfd: OwnedFd,
    /// The init's namespaces that differ from moat's, as `CLONE_NEW*` flags.
    pub(super) flags: libc::c_int,
    /// The cgroup the exec'd process enters (the container's, or `--cgroup` below it).
    pub(super) placement: Placement,
    pub(super) opts: ExecOpts,
    /// The container's state directory, locked shared, until the exec'd process is in
    /// the container's pid namespace ([`Plan::hold`]).
    pub(super) hold: Option<OwnedFd>,
}

impl<'a> Plan<'a> {
    /// Row 2: the init's pidfd (`container not running` if it is gone), the namespaces
    /// to join, and the cgroup placement (the files opened, nothing written).
    pub fn new(rec: &Record, attrs: &'a Attrs, opts: ExecOpts) -> Result<Plan<'a>, ExecError> {
        let not_running = || ExecError::NotRunning { pid: rec.pid };
        let pidfd = sys::pidfd_open(rec.pid).map_err(|_| not_running())?;
        if !rec.alive() {
            return Err(not_running());
        }
        let flags = namespaces_of(rec.pid)?;
        // The joiner enters the cgroup by itself (see cgroups/placement.rs); the exec'd
        // process, its child, inherits it.
        let placement = match &rec.cgroup {
            Some(cg) => cg.placement(&opts.sub_cgroup)?,
            None => Placement::none(),
        };
        Ok(Plan {
            attrs,
            pidfd,
            flags,
            placement,
            opts,
            hold: None,
        })
    }

    /// Keeps `lock` (the state directory's fd, flocked shared) until the exec'd process
    /// has been forked into the container's pid namespace. Between the joiner's cgroup
    /// placement and that fork, the joiner is in the container's cgroup but not in its pid
    /// namespace: a `delete` then would kill the init (and with it the pid namespace) but
    /// not the joiner, and could not remove the cgroup it still holds. `delete` locks
    /// exclusively, so it waits for this. The joiner closes its copy first thing.
    pub fn hold(mut self, lock: OwnedFd) -> Plan<'a> {
        self.hold = Some(lock);
        self
    }
}

/// Namespaces of `pid` that differ from ours, as CLONE_NEW* flags.
fn namespaces_of(pid: i32) -> Result<libc::c_int, ExecError> {
    let mut flags = 0;
    for (name, flag) in [
        ("user", libc::CLONE_NEWUSER),
        ("mnt", libc::CLONE_NEWNS),
        ("pid", libc::CLONE_NEWPID),
        ("net", libc::CLONE_NEWNET),
        ("ipc", libc::CLONE_NEWIPC),
        ("uts", libc::CLONE_NEWUTS),
        ("cgroup", libc::CLONE_NEWCGROUP),
        ("time", namespaces::CLONE_NEWTIME),
    ] {
        let stat = |p: String| {
            std::ffi::CString::new(p)
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
                .and_then(|c| sys::stat(&c))
        };
        let theirs = stat(format!("/proc/{pid}/ns/{name}"));
        let ours = stat(format!("/proc/self/ns/{name}"));
        match (theirs, ours) {
            (Ok(t), Ok(o)) => {
                if (t.st_dev, t.st_ino) != (o.st_dev, o.st_ino) {
                    flags |= flag;
                }
            }
            // A namespace type this kernel lacks (time before 5.6) cannot differ.
            (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound && name == "time" => {}
            (Err(err), _) => {
                return Err(ExecError::Namespace {
                    path: format!("/proc/{pid}/ns/{name}").into(),
                    err,
                })
            }
            (_, Err(err)) => {
                return Err(ExecError::Namespace {
                    path: format!("/proc/self/ns/{name}").into(),
                    err,
                })
            }
        }
    }
    Ok(flags)
}
