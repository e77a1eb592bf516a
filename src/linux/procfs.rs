//! moat's own procfs: the one way the container init, the staged intermediate and an
//! `exec`'d child reach `/proc` (CVE-2019-16884, CVE-2025-52881).
//!
//! The `/proc` a container sees is the container's: anything that can mount in its mount
//! namespace (a createContainer hook, a racing container whose mounts propagate into it, a
//! joined mount namespace) can put another file — even a real procfs file, such as
//! `/proc/self/sched`, which passes an "is it on procfs" check — over `/proc/sys/<key>`,
//! `/proc/self/attr/exec` or `/proc/self/setgroups`. A write by name then lands in the
//! wrong file (an AppArmor label that is never applied, a sysctl value written into
//! another sysctl), and a read by name believes the wrong answer.
//!
//! So the child takes a handle of its own before it has mounted anything, and every
//! `/proc` access goes through it:
//! * the handle is a new procfs instance of the caller's pid namespace, detached
//!   (`fsopen("proc")` + `fsmount`): it is in no mount namespace, so nothing can be
//!   mounted on it. Where the caller may not mount procfs (an unprivileged moat; an exec
//!   child in a user namespace that does not own its mount namespace), the `/proc` of the
//!   mount namespace it is still in — moat's own, before any container namespace is
//!   joined — is opened instead ([`open_own`] is only called at such a point). Either is
//!   checked to be the root of a procfs (`PROC_SUPER_MAGIC`, inode 1);
//! * files are opened with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS)`: no symlink (`self`, `thread-self`) is
//!   followed and no mount crossed — a bind over the target is refused by the kernel
//!   (EXDEV), reported as such — and each opened file is checked to be on procfs;
//! * the caller's own entries are named by number, `<pid>/task/<tid>`, as that procfs's
//!   pid namespace numbers them: the kernel's text of the instance's `thread-self` link
//!   (read, not followed), which is right whichever pid namespace the instance belongs to.
//!
//! The handle is per process: the intermediate of a staged create takes one before it
//! joins anything, the init it forks inherits it and replaces it with one of the
//! container's pid namespace where it may ([`renew`]). It lives until execve
//! (close-on-exec). The parent's writes on the host's `/proc` (`/proc/<pid>/uid_map`,
//! `oom_score_adj`) are not made from a container's view and do not come here.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

use super::sync::{InitFailure, Step, StepExt};
use super::{mount, path, sys};

/// The root directory of every procfs instance.
const PROC_ROOT_INO: u64 = 1;

/// What went wrong with a `/proc` access, naming the file.
#[derive(Debug)]
pub struct ProcError {
    /// The path below the procfs root, as moat named it (`sys/net/ipv4/…`, `12/task/12/…`).
    pub path: String,
    pub source: io::Error,
}

impl ProcError {
    fn new(path: &str, source: io::Error) -> ProcError {
        ProcError {
            path: path.to_string(),
            source,
        }
    }

    fn other(path: &str, why: &str) -> ProcError {
        ProcError::new(path, io::Error::other(why.to_string()))
    }
}

impl std::fmt::Display for ProcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.source.raw_os_error() {
            Some(libc::EXDEV) => write!(
                f,
                "/proc/{}: another mount covers it in the container's /proc (a bind over a \
                 procfs file); refused",
                self.path
            ),
            Some(libc::ELOOP) => write!(f, "/proc/{}: a symlink on the way; refused", self.path),
            _ => write!(f, "/proc/{}: {}", self.path, self.source),
        }
    }
}

impl std::error::Error for ProcError {}

impl<T> StepExt<T> for Result<T, ProcError> {
    fn step(self, step: Step, detail: impl FnOnce() -> String) -> Result<T, InitFailure> {
        // The message already carries the errno's text.
        self.map_err(|e| InitFailure::new(step, format!("{}: {e}", detail())))
    }
}

/// A verified procfs root.
struct Procfs {
    fd: OwnedFd,
}

/// The calling process's handle (each forked child has its own copy of the variable).
static HANDLE: Mutex<Option<Procfs>> = Mutex::new(None);

fn is_procfs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let fs = sys::fstatfs(fd)?;
    // f_type and the magic are i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    Ok(fs.f_type as u64 == libc::PROC_SUPER_MAGIC as u64)
}

impl Procfs {
    fn verified(fd: OwnedFd) -> io::Result<Procfs> {
        let st = sys::fstat(fd.as_fd())?;
        if !is_procfs(fd.as_fd())? || st.st_ino != PROC_ROOT_INO {
            return Err(io::Error::other("not the root of a procfs"));
        }
        Ok(Procfs { fd })
    }

    /// A new, detached procfs instance of the caller's pid namespace.
    fn private() -> io::Result<Procfs> {
        let fd = mount::new_fs("proc", Some("proc"), &[])?;
        Procfs::verified(fd)
    }

    /// The `/proc` of the caller's current mount namespace, by name: only where that view
    /// is moat's own.
    fn own_view() -> io::Result<Procfs> {
        let fd = sys::openat(
            path::cwd(),
            c"/proc",
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )?;
        Procfs::verified(fd)
    }

    /// `<pid>/task/<tid>` of the caller, numbered by this instance's pid namespace.
    fn task_dir(&self) -> Result<String, ProcError> {
        let link = sys::readlinkat(self.fd.as_fd(), c"thread-self")
            .map_err(|e| ProcError::new("thread-self", e))?;
        let text = String::from_utf8(link).unwrap_or_default();
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        match text.split('/').collect::<Vec<_>>()[..] {
            [pid, "task", tid] if numeric(pid) && numeric(tid) => Ok(text),
            _ => Err(ProcError::other(
                "thread-self",
                &format!("unexpected link text {text:?}"),
            )),
        }
    }

    /// Opens `rel` below the root, crossing no symlink and no mount, and checks the file
    /// is on procfs (a non-procfs object bound over it is refused even if the kernel
    /// lets the open through).
    fn open(&self, rel: &str, flags: libc::c_int) -> Result<std::fs::File, ProcError> {
        let c = CString::new(rel).map_err(|_| ProcError::other(rel, "contains a NUL byte"))?;
        let how = sys::OpenHow {
            flags: u64::try_from(flags | libc::O_CLOEXEC | libc::O_NOCTTY).unwrap_or(u64::MAX),
            mode: 0,
            resolve: sys::RESOLVE_BENEATH
                | sys::RESOLVE_NO_SYMLINKS
                | sys::RESOLVE_NO_XDEV
                | sys::RESOLVE_NO_MAGICLINKS,
        };
        let fd = sys::openat2(self.fd.as_fd(), &c, &how).map_err(|e| ProcError::new(rel, e))?;
        match is_procfs(fd.as_fd()) {
            Ok(true) => Ok(std::fs::File::from(fd)),
            Ok(false) => Err(ProcError::other(rel, "not on procfs; refused")),
            Err(e) => Err(ProcError::new(rel, e)),
        }
    }

    fn write(&self, rel: &str, value: &str) -> Result<(), ProcError> {
        let f = self.open(rel, libc::O_WRONLY)?;
        // One write: sysctls and timens_offsets take the value in a single call.
        match sys::write(f.as_fd(), value.as_bytes()) {
            Ok(n) if n == value.len() => Ok(()),
            Ok(_) => Err(ProcError::other(rel, "short write")),
            Err(e) => Err(ProcError::new(rel, e)),
        }
    }

    fn read(&self, rel: &str) -> Result<String, ProcError> {
        let f = self.open(rel, libc::O_RDONLY)?;
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match sys::read(f.as_fd(), &mut buf) {
                Ok(0) => break,
                Ok(n) => data.extend_from_slice(&buf[..n]),
                Err(e) => return Err(ProcError::new(rel, e)),
            }
        }
        String::from_utf8(data).map_err(|_| {
            ProcError::new(
                rel,
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "stream did not contain valid UTF-8",
                ),
            )
        })
    }
}

fn set(p: Procfs) {
    // Under the recording fake the handle is a fake descriptor: never kept in the test
    // process's static (`with` makes one per access).
    #[cfg(test)]
    if sys::record::active() {
        return;
    }
    *HANDLE.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
}

fn with<T>(f: impl FnOnce(&Procfs) -> Result<T, ProcError>) -> Result<T, ProcError> {
    // Under the recording fake of `sys` (unit tests of the child's order) the handle is
    // a fake descriptor, so every procfs access is recorded relative to it.
    #[cfg(test)]
    if sys::record::active() {
        return f(&Procfs {
            fd: sys::record::fd("procfs"),
        });
    }
    let guard = HANDLE.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(p) => f(p),
        None => Err(ProcError::other(
            "",
            "moat holds no procfs handle in this process",
        )),
    }
}

/// Takes the calling process's handle. Call only while the caller's mount namespace is
/// moat's own (before any container mount namespace is joined, before any rootfs mount):
/// where a private instance cannot be made, this view's `/proc` is used.
pub fn open_own() -> Result<(), InitFailure> {
    let p = match Procfs::private() {
        Ok(p) => p,
        Err(private) => Procfs::own_view().map_err(|e| InitFailure {
            step: Step::Namespaces,
            errno: e
                .raw_os_error()
                .unwrap_or(private.raw_os_error().unwrap_or(0)),
            detail: format!(
                "no procfs of moat's own (new instance: {private}; /proc of moat's mount \
                 namespace: {e})"
            ),
        })?,
    };
    set(p);
    Ok(())
}

/// After entering the container's pid namespace (the init of a staged create): a private
/// instance of that namespace if the caller may make one, else the inherited handle stays.
pub fn renew() {
    if let Ok(p) = Procfs::private() {
        set(p);
    }
}

/// Whether the calling process holds a handle (only moat's children ever do).
pub fn held() -> bool {
    HANDLE.lock().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// Writes a sysctl; `key` is the path below `/proc/sys` (`net/ipv4/ip_forward`).
pub fn write_sysctl(key: &str, value: &str) -> Result<(), ProcError> {
    with(|p| p.write(&format!("sys/{key}"), value))
}

/// Writes the calling thread's LSM attribute `attr`, a path below `attr/` (`exec`,
/// `apparmor/exec`): which one is decided from the host facts, never by probing the
/// container's view.
pub fn write_attr(attr: &str, value: &str) -> Result<(), ProcError> {
    with(|p| {
        let task = p.task_dir()?;
        p.write(&format!("{task}/attr/{attr}"), value)
    })
}

/// Whether `setgroups(2)` is denied in the caller's user namespace (a gid map written
/// without privilege), read from the caller's own `setgroups` file.
pub fn setgroups_denied() -> Result<bool, ProcError> {
    with(|p| Ok(p.read(&format!("{}/setgroups", p.task_dir()?))?.trim() == "deny"))
}

/// The caller's `mountinfo`: its mount namespace, paths as its root sees them.
pub fn mountinfo() -> Result<String, ProcError> {
    with(|p| p.read(&format!("{}/mountinfo", p.task_dir()?)))
}

/// The caller's `uid_map`.
pub fn uid_map() -> Result<String, ProcError> {
    with(|p| p.read(&format!("{}/uid_map", p.task_dir()?)))
}

/// The caller's `timens_offsets`, opened for writing: the offsets of the time namespace
/// its children will be in (the file is per process: `<pid>/timens_offsets`).
///
/// Open it before any user namespace is joined or unshared, and write it
/// ([`write_timens_offsets`]) once the time namespace exists. The kernel checks
/// `CAP_SYS_TIME` over the time namespace's owner with the credentials of whoever
/// *opened* the file: moat's, which hold it over any user namespace it makes or joins.
/// Opened later, by container root of a new user namespace, the open itself fails (the
/// non-dumpable process's `/proc` files belong to the host's root, which that namespace
/// does not map), as the offsets of runc's are written by its parent on the host.
pub fn open_timens_offsets() -> Result<std::fs::File, ProcError> {
    with(|p| {
        let task = p.task_dir()?;
        let pid = task.split('/').next().unwrap_or_default();
        p.open(&format!("{pid}/timens_offsets"), libc::O_WRONLY)
    })
}

/// Writes the offsets through the file [`open_timens_offsets`] opened, in one write.
pub fn write_timens_offsets(file: &std::fs::File, offsets: &str) -> Result<(), ProcError> {
    let rel = "timens_offsets";
    match sys::write(file.as_fd(), offsets.as_bytes()) {
        Ok(n) if n == offsets.len() => Ok(()),
        Ok(_) => Err(ProcError::other(rel, "short write")),
        Err(e) => Err(ProcError::new(rel, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // These run as any user: a private instance where the test may mount procfs, else
    // the test process's own /proc.
    fn handle() -> Procfs {
        Procfs::private()
            .or_else(|_| Procfs::own_view())
            .expect("a procfs handle")
    }

    #[test]
    fn task_dir_names_the_calling_thread_by_number() {
        let p = handle();
        let t = p.task_dir().unwrap();
        // The test process's pid namespace is the instance's: numbers are ours.
        let own = std::fs::read_link("/proc/thread-self").unwrap();
        assert_eq!(t, own.to_string_lossy());
        assert!(p.read(&format!("{t}/status")).unwrap().contains("Tgid:"));
    }

    #[test]
    fn symlinks_are_never_followed() {
        let p = handle();
        for rel in ["self/status", "thread-self/attr/current", "self"] {
            let e = p.open(rel, libc::O_RDONLY).expect_err(rel);
            assert_eq!(e.source.raw_os_error(), Some(libc::ELOOP), "{rel}: {e}");
        }
        // Nor anything above the root.
        let e = p.open("../etc/passwd", libc::O_RDONLY).expect_err("..");
        assert_eq!(e.source.raw_os_error(), Some(libc::EXDEV), "{e}");
    }

    #[test]
    fn a_non_procfs_root_is_refused() {
        let tmp = sys::openat(path::cwd(), c"/", libc::O_PATH | libc::O_DIRECTORY, 0).unwrap();
        assert!(Procfs::verified(tmp).is_err());
        // A procfs directory that is not the root.
        let sub = sys::openat(
            path::cwd(),
            c"/proc/sys",
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .unwrap();
        assert!(Procfs::verified(sub).is_err());
    }

    #[test]
    fn errors_name_the_file_and_say_why() {
        let e = ProcError::new("sys/kernel/x", io::Error::from_raw_os_error(libc::EXDEV));
        assert!(e
            .to_string()
            .contains("/proc/sys/kernel/x: another mount covers it"));
        let e = ProcError::other("sys/kernel/x", "not on procfs; refused");
        assert_eq!(e.to_string(), "/proc/sys/kernel/x: not on procfs; refused");
    }
}
