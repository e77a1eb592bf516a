//! How a new process (container init, exec'd process) enters the container's cgroup.
//!
//! Moving a process by writing its pid to `cgroup.procs` takes the kernel's global
//! `cgroup_threadgroup_rwsem` for writing, and taking it waits for an RCU grace period
//! (~10 ms on the hosts measured, see docs/performance.md) unless another migration
//! happened just before. Two ways in avoid that lock:
//! - v2: `clone3(CLONE_INTO_CGROUP)` creates the process in the cgroup (the fork path
//!   only reads the lock);
//! - v1: the single-threaded child writes `0` ("myself") to each hierarchy's `tasks`
//!   file; moving only the calling thread needs no thread-group stability, so the kernel
//!   skips the global lock (the child has one thread, so the thread is the process).
//!
//! The parent opens every file (with its credentials, before anything enters the
//! container); the child only writes to the inherited fds, first thing after clone, and
//! closes them.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use super::{Cgroup, CgroupError};
use crate::linux::sys;

/// The open handles a child needs to place itself.
#[derive(Debug)]
pub struct Placement {
    /// The v2 directory (`O_PATH`), for `CLONE_INTO_CGROUP`.
    v2: Option<OwnedFd>,
    /// Each v1 hierarchy's `tasks` file, open for writing.
    v1: Vec<(PathBuf, OwnedFd)>,
}

impl Placement {
    /// Nothing to join (no cgroup).
    pub fn none() -> Placement {
        Placement {
            v2: None,
            v1: Vec::new(),
        }
    }

    /// v1 `tasks` files already open (a sequence test's fake descriptors).
    #[cfg(test)]
    pub fn v1(tasks: Vec<(PathBuf, OwnedFd)>) -> Placement {
        Placement {
            v2: None,
            v1: tasks,
        }
    }

    /// The fd to pass to `clone3` as `CLONE_INTO_CGROUP`.
    pub fn clone_into(&self) -> Option<BorrowedFd<'_>> {
        self.v2.as_ref().map(|f| f.as_fd())
    }

    /// In the child, before it does anything else: joins every v1 hierarchy. Returns the
    /// file that refused, with the error. Allocates nothing on success. The caller drops
    /// the placement right after, before it enters any container namespace.
    pub fn enter(&self) -> Result<(), (PathBuf, std::io::Error)> {
        for (path, fd) in &self.v1 {
            match sys::write(fd.as_fd(), b"0") {
                Ok(1) => {}
                Ok(_) => return Err((path.clone(), std::io::ErrorKind::WriteZero.into())),
                Err(e) => return Err((path.clone(), e)),
            }
        }
        Ok(())
    }
}

impl Cgroup {
    /// Opens what a child needs to place itself in this cgroup, or in sub-cgroups of it:
    /// `exec --cgroup`, runc's `[controller[,controller…]:]path` (relative, must exist),
    /// given any number of times; an entry naming controllers applies to their
    /// hierarchies, one without to the rest (cgroup v2 takes only that one).
    pub fn placement(&self, subs: &[String]) -> Result<Placement, CgroupError> {
        let field = if subs.is_empty() { "pid" } else { "--cgroup" };
        let mut all: Option<&str> = None;
        let mut by_controller: Vec<(&str, &str)> = Vec::new();
        for entry in subs {
            let (ctrls, sub) = match entry.split_once(':') {
                Some((c, p)) if !self.unified => (Some(c), p),
                _ => (None, entry.as_str()),
            };
            let sub = sub.trim_start_matches('/');
            if sub.split('/').any(|c| c == ".." || c == ".") {
                // runc 1.5's words, unquoted as runc prints them (quoted if it holds a
                // control character, which a log line must not carry raw).
                let shown = if sub.chars().any(char::is_control) {
                    format!("{sub:?}")
                } else {
                    sub.to_string()
                };
                return Err(CgroupError::invalid(
                    field,
                    format!(
                        "bad sub cgroup path: {shown} (it must stay below the container's cgroup)"
                    ),
                ));
            }
            match ctrls {
                None => all = Some(sub),
                Some(list) => {
                    for c in list.split(',') {
                        if !self
                            .hierarchies
                            .iter()
                            .chain(&self.skipped)
                            .any(|h| h.has(c))
                        {
                            return Err(CgroupError::invalid(
                                field,
                                format!("unknown controller {c:?} in {entry:?}"),
                            ));
                        }
                        by_controller.push((c, sub));
                    }
                }
            }
        }
        let below = |sub: &str| {
            if sub.is_empty() {
                self.path.clone()
            } else {
                format!("{}/{}", self.path.trim_end_matches('/'), sub)
            }
        };
        let mut placement = Placement::none();
        for h in &self.hierarchies {
            let sub = by_controller
                .iter()
                .find(|(c, _)| !h.v2 && h.has(c))
                .map(|(_, s)| *s)
                .or(all);
            let path = sub.map_or_else(|| self.path.clone(), below);
            let dir = h.dir(&path);
            // runc's words for a sub-cgroup that does not exist (clients grep them).
            if sub.is_some() && !dir.is_dir() {
                return Err(CgroupError::invalid(
                    field,
                    format!(
                        "adding pid to cgroups: {}/cgroup.procs: no such file or directory",
                        dir.display()
                    ),
                ));
            }
            if h.v2 {
                let fd = sys::openat(
                    sys::at_fdcwd(),
                    &path_c(&dir),
                    libc::O_PATH | libc::O_DIRECTORY,
                    0,
                )
                .map_err(|e| CgroupError::io("open", &dir, e))?;
                placement.v2 = Some(fd);
            } else {
                let file = dir.join("tasks");
                let fd = sys::openat(sys::at_fdcwd(), &path_c(&file), libc::O_WRONLY, 0).map_err(
                    |err| CgroupError::Write {
                        field: field.into(),
                        value: "0".into(),
                        path: file.clone(),
                        err,
                    },
                )?;
                placement.v1.push((file, fd));
            }
        }
        Ok(placement)
    }
}

/// A cgroup path as the kernel takes it (cgroup directory names hold no NUL).
fn path_c(p: &std::path::Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}
