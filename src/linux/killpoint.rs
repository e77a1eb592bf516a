//! Kill points, for the tests that prove an interrupted operation leaves nothing behind
//! (tests/killpoints.rs): in debug builds, `MOAT_TEST_KILL_AT=<op>:<side>:<step>` makes
//! moat SIGKILL itself on reaching that step, where `op` is `create`, `start`, `exec`,
//! `delete`, `run`, `update`, `checkpoint` or `restore` (the gVisor path's points are create's, start's and delete's
//! with a `gvisor.` step; `cgroup:parent:frozen` is inside a freeze round of whatever
//! kills a container's processes, `kill --all` or delete), `side` the process (`parent`, `child`; exec's `joiner` and `process`), and
//! `step` a row of that operation's documented sequence (create's `Step` names, exec's
//! table). `MOAT_TEST_STALL_AT=<op>:<side>:<step>` instead sleeps two seconds there, for
//! the tests that race another command into that window (tests/concurrency.rs). Release
//! builds contain none of it.
//!
//! Every kill point, and the [`mark`]s placed where no kill is of interest, is also a
//! point of the step trace of a profiling build (`--features steptrace`,
//! `MOAT_STEPTRACE=<file>`: `linux/sys/steptrace.rs`), from which `scripts/bench
//! --profile` times each step of the documented sequences. Without the feature a mark is
//! nothing.

/// A point of the step trace only (see the module doc). `op` and `side` `*` stand for the
/// process's own (a step shared by create's init and exec's process).
#[inline]
pub fn mark(op: &str, side: &str, step: &str) {
    #[cfg(feature = "steptrace")]
    super::sys::steptrace(op, side, step);
    #[cfg(not(feature = "steptrace"))]
    let _ = (op, side, step);
}

/// Dies as if SIGKILLed when `MOAT_TEST_KILL_AT` names this point (debug builds only).
#[inline]
pub fn at(op: &str, side: &str, step: &str) {
    mark(op, side, step);
    #[cfg(debug_assertions)]
    {
        if named("MOAT_TEST_KILL_AT", op, side, step) {
            let _ = super::sys::kill(std::process::id().try_into().unwrap_or(0), libc::SIGKILL);
            // The init of its own pid namespace ignores a SIGKILL it sends itself: it
            // ends the same way, with no unwinding and no destructor run.
            super::sys::exit_now(137);
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (op, side, step);
}

/// Sleeps two seconds when `MOAT_TEST_STALL_AT` names this point (debug builds only): the
/// window a racing command is aimed at, held open.
#[inline]
pub fn stall(op: &str, side: &str, step: &str) {
    #[cfg(debug_assertions)]
    {
        if named("MOAT_TEST_STALL_AT", op, side, step) {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (op, side, step);
}

/// Whether the variable `var` is `<op>:<side>:<step>`.
#[cfg(debug_assertions)]
fn named(var: &str, op: &str, side: &str, step: &str) -> bool {
    let Some(v) = std::env::var_os(var) else {
        return false;
    };
    let mut it = v.to_str().unwrap_or("").splitn(3, ':');
    (it.next(), it.next(), it.next()) == (Some(op), Some(side), Some(step))
}
