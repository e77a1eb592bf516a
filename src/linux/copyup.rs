//! `tmpcopyup` (an option of runc and crun): a new tmpfs starts with a copy of what the
//! directory it covers holds in the rootfs, as runc copies it (directories, regular files,
//! symlinks, fifos and sockets, with their owner and mode; no xattrs, no times).
//!
//! The rootfs is the image's and may be hostile, so the source is walked by fd only: each
//! name is looked at with `fstatat(AT_SYMLINK_NOFOLLOW)` relative to the fd of its
//! directory, opened with `O_NOFOLLOW` (`O_NONBLOCK` too: a fifo swapped in never blocks
//! the open), and what was opened must be what was looked at (same inode and type), or
//! the copy fails: a racer swapping an entry for a symlink is refused, never followed. A
//! symlink is copied as a symlink, its text never resolved. The walk stays on the mount of
//! the destination (a directory where another mount sits is copied empty): the copy is of
//! the image, never of a filesystem mounted into it. Device nodes are not copied (the
//! container's devices are `linux.devices`, under the device policy, and a node copied
//! onto a mount without `nodev` would open what the image's could not).
//!
//! The copy is written into the tmpfs while it is still detached, so nothing in the
//! container sees or changes it before it is complete. It is bounded by the tmpfs's own
//! size (ENOSPC fails the create with the path it stopped at) and by [`MAX_DEPTH`].

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::sys;

/// How deep a tree is copied: each level holds three descriptors (the source directory,
/// its listing, the copy), so this bounds them well below the usual 1024.
pub const MAX_DEPTH: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum CopyupError {
    #[error("tmpcopyup: {path}: {err}")]
    Io { path: String, err: io::Error },
    #[error("tmpcopyup: {path}: changed while it was copied (a racing rename?); refused")]
    Changed { path: String },
    #[error("tmpcopyup: {path}: deeper than {MAX_DEPTH} directories; refused")]
    TooDeep { path: String },
}

impl From<CopyupError> for io::Error {
    fn from(e: CopyupError) -> io::Error {
        io::Error::other(e.to_string())
    }
}

/// Copies the contents of the directory `src` (an fd of the destination in the rootfs,
/// `O_PATH` is enough) into the directory `dst` (the new tmpfs's root). `dest` names the
/// destination in errors. The root of the tmpfs keeps its own owner and mode (runc's
/// too; the mode was inherited from `src` already, see `rootfs::tmpfs_target`).
pub fn copy_tree(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, dest: &str) -> Result<(), CopyupError> {
    let mnt = sys::mount_id(src).map_err(|err| CopyupError::Io {
        path: dest.to_string(),
        err,
    })?;
    let mut path = dest.trim_end_matches('/').to_string();
    copy_dir(src, dst, mnt, &mut path, 0)
}

fn copy_dir(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    mnt: u64,
    path: &mut String,
    depth: usize,
) -> Result<(), CopyupError> {
    if depth >= MAX_DEPTH {
        return Err(CopyupError::TooDeep { path: path.clone() });
    }
    // Which entry failed: `for_each_dir_entry` carries only an io::Error back.
    let mut failed: Option<CopyupError> = None;
    let listed = sys::for_each_dir_entry(src, &mut |name| {
        let len = path.len();
        path.push('/');
        path.push_str(&name.to_string_lossy());
        let r = copy_entry(src, dst, name, mnt, path, depth);
        let r = r.map_err(|e| {
            failed = Some(e);
            io::Error::from_raw_os_error(libc::ECANCELED)
        });
        path.truncate(len);
        r
    });
    match (listed, failed) {
        (_, Some(e)) => Err(e),
        (Err(err), None) => Err(CopyupError::Io {
            path: path.clone(),
            err,
        }),
        (Ok(()), None) => Ok(()),
    }
}

fn copy_entry(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    name: &CStr,
    mnt: u64,
    path: &mut String,
    depth: usize,
) -> Result<(), CopyupError> {
    let here = path.clone();
    let io = |err: io::Error| CopyupError::Io {
        path: here.clone(),
        err,
    };
    let st = sys::fstatat_nofollow(src, name).map_err(io)?;
    let kind = st.st_mode & libc::S_IFMT;
    // The window between the look and the open, held open for the race test.
    super::killpoint::stall("create", "child", "tmpcopyup");
    let perm = st.st_mode & 0o7777;
    match kind {
        libc::S_IFDIR => {
            let from = open_same(src, name, libc::O_PATH | libc::O_DIRECTORY, &st, path)?;
            sys::mkdirat(dst, name, 0o700).map_err(io)?;
            let to = sys::openat(
                dst,
                name,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(io)?;
            // Another mount on the way (a spec mount below this destination): not the
            // image's; its mount point is copied, empty.
            if sys::mount_id(from.as_fd()).map_err(io)? == mnt {
                copy_dir(from.as_fd(), to.as_fd(), mnt, path, depth + 1)?;
            }
            own(to.as_fd(), &st).map_err(io)?;
        }
        libc::S_IFREG => {
            let from = open_same(
                src,
                name,
                libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
                &st,
                path,
            )?;
            let to = sys::openat(
                dst,
                name,
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                0o600,
            )
            .map_err(io)?;
            let mut r = std::fs::File::from(from);
            let mut w = std::fs::File::from(to);
            std::io::copy(&mut r, &mut w).map_err(io)?;
            own(w.as_fd(), &st).map_err(io)?;
        }
        libc::S_IFLNK => {
            let target = sys::readlinkat(src, name).map_err(io)?;
            let target = CString::new(target).map_err(|_| io(einval()))?;
            sys::symlinkat(&target, dst, name).map_err(io)?;
            sys::fchownat_nofollow(dst, name, st.st_uid, st.st_gid).map_err(io)?;
        }
        libc::S_IFIFO | libc::S_IFSOCK => {
            // The name is in the detached tmpfs, which only this process can reach.
            sys::mknodat(dst, name, kind | 0o600, 0).map_err(io)?;
            sys::fchownat_nofollow(dst, name, st.st_uid, st.st_gid).map_err(io)?;
            sys::fchmodat(dst, name, perm).map_err(io)?;
        }
        // Character and block devices: not copied (see the module comment).
        _ => {}
    }
    Ok(())
}

/// Opens `name` in `dir` without following a symlink and checks it is the inode `st`
/// describes.
fn open_same(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    st: &libc::stat,
    path: &str,
) -> Result<OwnedFd, CopyupError> {
    let changed = || CopyupError::Changed {
        path: path.to_string(),
    };
    let fd = match sys::openat(dir, name, flags | libc::O_NOFOLLOW, 0) {
        Ok(fd) => fd,
        // A symlink (O_NOFOLLOW), or no directory any more (O_DIRECTORY).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            return Err(changed())
        }
        Err(err) => {
            return Err(CopyupError::Io {
                path: path.to_string(),
                err,
            })
        }
    };
    let now = sys::fstat(fd.as_fd()).map_err(|err| CopyupError::Io {
        path: path.to_string(),
        err,
    })?;
    if now.st_ino != st.st_ino
        || now.st_dev != st.st_dev
        || now.st_mode & libc::S_IFMT != st.st_mode & libc::S_IFMT
    {
        return Err(changed());
    }
    Ok(fd)
}

/// The owner, then the mode (a chown clears set-id bits), of a copy open in `fd`.
fn own(fd: BorrowedFd<'_>, st: &libc::stat) -> io::Result<()> {
    sys::fchownat_empty(fd, st.st_uid, st.st_gid)?;
    sys::fchmod(fd, st.st_mode & 0o7777)
}

fn einval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}
