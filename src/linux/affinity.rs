//! `process.execCPUAffinity` (runtime-spec 1.3): the CPUs an exec'd process runs on while
//! moat puts it into the container (`initial`, set by the joiner as its first act, before
//! it enters the container's cgroups) and once it is there (`final`, set by the exec'd
//! process before anything else, so before its execve). Entering a cpuset cgroup resets a
//! task's affinity to the cgroup's CPUs, which is why there are two; with neither mask the
//! process is reset to every CPU its cgroup allows, as runc 1.5 resets it (`reset`). The spec makes the field inapplicable
//! to the container's init: create checks it and keeps it in the container's spec, where it
//! is the default of every `exec` without a process file of its own that sets it, as
//! runc's is. The kernel intersects each mask with the task's cpuset: a mask with no CPU
//! of the cpuset is refused (EINVAL) and fails the exec.

use super::cpulist;
use super::sync::{InitFailure, Step, StepExt};
use super::sys;
use crate::spec::ExecCpuAffinity;

/// The masks, each `None` where the spec leaves it out or empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecAffinity {
    pub initial: Option<Vec<libc::c_ulong>>,
    pub final_: Option<Vec<libc::c_ulong>>,
}

/// A list refused, naming the field (`process.execCPUAffinity.final`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{field}: {err}")]
pub struct AffinityError {
    pub field: String,
    pub err: cpulist::ListError,
}

/// The CPUs a container's process runs on when no `execCPUAffinity` says otherwise: all
/// that its cgroup's cpuset allows, as runc 1.5 resets them, not the affinity of whoever
/// called moat (a `taskset` around an engine or a pinned daemon must not pin every
/// container). Made right after the cgroup is entered (the init; an exec's joiner, whose
/// fork inherits it), so the kernel clamps the mask to the container's cpuset. A failure
/// leaves the caller's affinity, as in runc, where it is only a warning.
pub fn reset() {
    // 65536 CPUs, the most a kernel configures (CONFIG_NR_CPUS); the kernel cuts a longer
    // mask to its own and clears the CPUs outside the cpuset.
    static ALL: [libc::c_ulong; 1024] = [libc::c_ulong::MAX; 1024];
    let _ = sys::sched_setaffinity(0, &ALL);
}

impl ExecAffinity {
    /// `process` is where the field came from (`process`, or the exec process file).
    pub fn from_spec(a: &ExecCpuAffinity, process: &str) -> Result<ExecAffinity, AffinityError> {
        let mask = |v: &Option<String>, name: &str| -> Result<_, AffinityError> {
            match v.as_deref().map(str::trim) {
                None | Some("") => Ok(None),
                Some(list) => cpulist::parse(list).map(Some).map_err(|err| AffinityError {
                    field: format!("{process}.execCPUAffinity.{name}"),
                    err,
                }),
            }
        };
        Ok(ExecAffinity {
            initial: mask(&a.initial, "initial")?,
            final_: mask(&a.final_, "final")?,
        })
    }

    /// The joiner, before it enters the container's cgroups (its children inherit it).
    pub fn apply_initial(&self) -> Result<(), InitFailure> {
        match &self.initial {
            Some(m) => sys::sched_setaffinity(0, m).step(Step::Scheduler, || {
                "process.execCPUAffinity.initial: sched_setaffinity".into()
            }),
            None => Ok(()),
        }
    }

    /// The exec'd process, in the container's cgroups, before anything else it does.
    pub fn apply_final(&self) -> Result<(), InitFailure> {
        match &self.final_ {
            Some(m) => sys::sched_setaffinity(0, m).step(Step::Scheduler, || {
                "process.execCPUAffinity.final: sched_setaffinity".into()
            }),
            None => Ok(()),
        }
    }
}
