//! Files by path relative to a directory descriptor: `openat2` with `RESOLVE_*`, the
//! other `*at` calls, `stat`/`statfs`/`statvfs`, `flock`, `fchdir`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{check, check_int, check_len, owned, retry, Result};

#[repr(C)]
#[derive(Default)]
pub struct OpenHow {
    pub flags: u64,
    pub mode: u64,
    pub resolve: u64,
}

pub const RESOLVE_NO_XDEV: u64 = 0x01;
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_BENEATH: u64 = 0x08;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

/// How often [`openat2`] retries EAGAIN before giving up (failing closed).
const OPENAT2_EAGAIN_TRIES: usize = 1024;

/// `openat2(2)`. With `RESOLVE_IN_ROOT`/`RESOLVE_BENEATH` the kernel answers EAGAIN when a
/// rename or mount anywhere on the system raced with the resolution of a `..`; that is
/// retried (a bounded number of times), or any process renaming files in a loop — in its
/// own container — would make every create with such a path fail.
pub fn openat2(dir: BorrowedFd<'_>, path: &CStr, how: &OpenHow) -> Result<OwnedFd> {
    fake!("openat2", dir, path, how);
    let mut tries = 0;
    loop {
        match openat2_once(dir, path, how) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && tries < OPENAT2_EAGAIN_TRIES => {
                tries += 1;
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

fn openat2_once(dir: BorrowedFd<'_>, path: &CStr, how: &OpenHow) -> Result<OwnedFd> {
    retry(|| {
        // SAFETY: valid dirfd, NUL-terminated path and a sized open_how.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        check(r).map(owned)
    })
}

pub fn openat(dir: BorrowedFd<'_>, path: &CStr, flags: libc::c_int, mode: u32) -> Result<OwnedFd> {
    fake!("openat", dir, path, flags, mode);
    retry(|| {
        // SAFETY: valid dirfd and NUL-terminated path.
        let r = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                path.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode,
            )
        };
        check_int(r).map(|fd| owned(fd as libc::c_long))
    })
}

/// The text of the symlink `path` names relative to `dir` (never followed).
pub fn readlinkat(dir: BorrowedFd<'_>, path: &CStr) -> Result<Vec<u8>> {
    fake!("readlinkat", dir, path);
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: valid dirfd, NUL-terminated path, and a buffer of the length passed.
    let n = check_len(unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            path.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        ) as libc::c_long
    })? as usize;
    if n == buf.len() {
        // Longer than any link the kernel stores (PATH_MAX with its NUL): refuse, never
        // truncate.
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(buf)
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    fake!("mkdirat", dir, name, mode);
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

pub fn mknodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32, dev: u64) -> Result<()> {
    fake!("mknodat", dir, name, mode, dev);
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, dev) }).map(drop)
}

pub fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    fake!("symlinkat", target, dir, name);
    // SAFETY: NUL-terminated strings and a valid dirfd.
    check_int(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) }).map(drop)
}

pub fn fchownat_empty(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<()> {
    fake!("fchownat_empty", fd, uid, gid);
    // SAFETY: AT_EMPTY_PATH on a valid fd.
    check_int(unsafe {
        libc::fchownat(
            fd.as_raw_fd(),
            c"".as_ptr(),
            uid,
            gid,
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// `fstatat(2)` of the name `name` in `dir`, never following a symlink.
pub fn fstatat_nofollow(dir: BorrowedFd<'_>, name: &CStr) -> Result<libc::stat> {
    fake!("fstatat_nofollow", dir, name);
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: valid dirfd, NUL-terminated name; fstatat fills the buffer on success.
    check_int(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    // SAFETY: initialised by the successful call (and zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// `fchownat(2)` of the name `name` in `dir`, a symlink itself rather than its target.
pub fn fchownat_nofollow(dir: BorrowedFd<'_>, name: &CStr, uid: u32, gid: u32) -> Result<()> {
    fake!("fchownat_nofollow", dir, name, uid, gid);
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

/// `fchmod(2)`.
pub fn fchmod(fd: BorrowedFd<'_>, mode: u32) -> Result<()> {
    fake!("fchmod", fd, mode);
    // SAFETY: plain syscall on a valid fd.
    check_int(unsafe { libc::fchmod(fd.as_raw_fd(), mode) }).map(drop)
}

/// `fchmodat(2)` of the name `name` in `dir` (a name only the caller can reach: a
/// symlink there would be followed).
pub fn fchmodat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> Result<()> {
    fake!("fchmodat", dir, name, mode);
    // SAFETY: valid dirfd and NUL-terminated name.
    check_int(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0) }).map(drop)
}

/// Calls `each` with every name in the directory `dir` (an `O_PATH` fd is enough), but
/// `.` and `..`, as the kernel lists them; stops at the first error `each` returns.
/// The listing streams: a directory of any size costs one buffer.
pub fn for_each_dir_entry(
    dir: BorrowedFd<'_>,
    each: &mut dyn FnMut(&CStr) -> Result<()>,
) -> Result<()> {
    fake!("for_each_dir_entry", dir);
    let fd = openat(
        dir,
        c".",
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )?;
    let mut d = nix::dir::Dir::from(fd).map_err(io::Error::from)?;
    for entry in d.iter() {
        let entry = entry.map_err(io::Error::from)?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        each(name)?;
    }
    Ok(())
}

pub fn fstat(fd: BorrowedFd<'_>) -> Result<libc::stat> {
    fake!("fstat", fd);
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: fstat fills the buffer on success.
    check_int(unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call (and zeroed before).
    Ok(unsafe { st.assume_init() })
}

pub fn fstatfs(fd: BorrowedFd<'_>) -> Result<libc::statfs> {
    fake!("fstatfs", fd);
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs fills the buffer on success.
    check_int(unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn fstatvfs(fd: BorrowedFd<'_>) -> Result<libc::statvfs> {
    fake!("fstatvfs", fd);
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    // SAFETY: fstatvfs fills the buffer on success.
    check_int(unsafe { libc::fstatvfs(fd.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

pub fn flock_exclusive(fd: BorrowedFd<'_>) -> Result<()> {
    fake!("flock_exclusive", fd);
    // SAFETY: plain syscall on a valid fd.
    retry(|| check_int(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) }).map(drop))
}

/// `flock(LOCK_SH)`: many holders at once, none while an exclusive holder has it.
pub fn flock_shared(fd: BorrowedFd<'_>) -> Result<()> {
    fake!("flock_shared", fd);
    // SAFETY: plain syscall on a valid fd.
    retry(|| check_int(unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_SH) }).map(drop))
}

pub fn fchdir(fd: BorrowedFd<'_>) -> Result<()> {
    fake!("fchdir", fd);
    // SAFETY: plain syscall.
    check_int(unsafe { libc::fchdir(fd.as_raw_fd()) }).map(drop)
}

/// `stat(2)` of `path`, following symlinks, as `std::fs::metadata` does: for a lookup by
/// name in the caller's own root (the container's `$PATH` search after pivot_root).
pub fn stat(path: &CStr) -> Result<libc::stat> {
    fake!("stat", path);
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: NUL-terminated path; stat fills the buffer on success.
    check_int(unsafe { libc::stat(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call (and zeroed before).
    Ok(unsafe { st.assume_init() })
}

/// The working directory, as `getcwd(3)` reports it (`std::env::current_dir`, which sizes
/// the buffer): ENOENT or an "(unreachable)" path for a directory outside the root.
pub fn getcwd() -> Result<std::path::PathBuf> {
    fake!("getcwd");
    std::env::current_dir()
}

/// `statfs(2)` of `path` (a host fact: which filesystem is mounted there).
pub fn statfs(path: &CStr) -> Result<libc::statfs> {
    fake!("statfs", path);
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: NUL-terminated path; statfs fills the buffer on success.
    check_int(unsafe { libc::statfs(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: initialised by the successful call.
    Ok(unsafe { st.assume_init() })
}

/// The whole of the file at `path`, as `std::fs::read` reads it: host facts and moat's own
/// view (`/proc/sys/kernel/cap_last_cap`, `/proc/self/uid_map`).
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>> {
    fake!("read_file", path.display().to_string());
    super::super::read_kernel_file(path).map(String::into_bytes)
}

/// Writes `data` to the file at `path` as `std::fs::write` does (created if missing,
/// truncated): the parent's writes to a child's `/proc/<pid>/{uid_map,gid_map,setgroups}`.
/// `mkfifo(path, mode)` (the exec fifo).
pub fn mkfifo(path: &CStr, mode: libc::mode_t) -> Result<()> {
    fake!("mkfifo", path, mode);
    // SAFETY: NUL-terminated path.
    check_int(unsafe { libc::mkfifo(path.as_ptr(), mode) }).map(drop)
}

pub fn write_file(path: &std::path::Path, data: &[u8]) -> Result<()> {
    fake!("write_file", path.display().to_string(), data);
    std::fs::write(path, data)
}
