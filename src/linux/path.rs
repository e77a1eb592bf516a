//! Every lookup inside a container's root goes through [`Root`].
//!
//! The rootfs is hostile: any component may be a symlink, and a second container sharing a
//! volume may swap it while we work. So paths are never joined as strings and handed to the
//! kernel; each is resolved once with `openat2(RESOLVE_IN_ROOT)` into an `O_PATH` fd, and
//! mounts target that fd. Missing components are created with `mkdirat`/`mknodat` relative
//! to the fd of their parent, never through a path the kernel would re-resolve.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use super::sys::{self, OpenHow, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS};

pub struct Root {
    fd: OwnedFd,
}

/// Splits a container path into normal components, resolving `.` and `..` lexically so
/// that nothing is ever created outside the path the spec named.
pub fn components(path: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in Path::new(path).components() {
        match c {
            Component::Normal(s) => out.push(s.to_str().unwrap_or_default()),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

impl Root {
    pub fn open(path: &Path) -> io::Result<Root> {
        let c = cstr(
            path.to_str()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?,
        )?;
        let fd = sys::openat(cwd(), &c, libc::O_PATH | libc::O_DIRECTORY, 0)?;
        Ok(Root { fd })
    }

    /// The root held by an fd already open on it (a mount made by the parent).
    pub fn from_fd(fd: OwnedFd) -> Root {
        Root { fd }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Resolves `path` inside the root (symlinks are followed but stay inside) and opens it
    /// with `flags` (`O_PATH` when only a handle is needed).
    pub fn open_at(&self, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
        let rel = components(path).join("/");
        let rel = if rel.is_empty() { ".".to_string() } else { rel };
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        sys::openat2(self.fd.as_fd(), &cstr(&rel)?, &how)
    }

    /// Like [`open_at`](Self::open_at) but does not follow a symlink in the last component:
    /// the result is the link itself (opened `O_PATH|O_NOFOLLOW`).
    pub fn open_nofollow(&self, path: &str) -> io::Result<OwnedFd> {
        self.open_at(path, libc::O_PATH | libc::O_NOFOLLOW)
    }

    /// Makes sure `path` exists as a directory inside the root, creating missing components
    /// relative to their parent's fd, and returns an `O_PATH` fd of it.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> io::Result<OwnedFd> {
        let comps = components(path);
        let mut cur = sys::dup_cloexec(self.fd.as_fd())?;
        for i in 0..comps.len() {
            let prefix = comps[..=i].join("/");
            match self.open_at(&prefix, libc::O_PATH | libc::O_DIRECTORY) {
                Ok(fd) => cur = fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    let name = cstr(comps[i])?;
                    match sys::mkdirat(cur.as_fd(), &name, mode) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => return Err(e),
                    }
                    // O_NOFOLLOW|O_DIRECTORY: if someone swapped in a symlink since mkdirat,
                    // this fails instead of following it.
                    cur = sys::openat(
                        cur.as_fd(),
                        &name,
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                        0,
                    )?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(cur)
    }

    /// Makes sure `path` exists (as an empty regular file if missing) and returns an
    /// `O_PATH` fd of it. Used as the target of file bind mounts and masks.
    pub fn mkfile(&self, path: &str, mode: u32) -> io::Result<OwnedFd> {
        match self.open_at(path, libc::O_PATH) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
            Err(_) => {}
        }
        let comps = components(path);
        let Some((name, parent)) = comps.split_last() else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        let dir = self.mkdir_all(&parent.join("/"), 0o755)?;
        let name = cstr(name)?;
        match sys::mknodat(dir.as_fd(), &name, libc::S_IFREG | mode, 0) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(e),
        }
        sys::openat(dir.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0)
    }

    /// The fd of the parent directory of `path` (created if missing) and the final name.
    pub fn parent_of(&self, path: &str) -> io::Result<(OwnedFd, CString)> {
        let comps = components(path);
        let Some((name, parent)) = comps.split_last() else {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        };
        Ok((self.mkdir_all(&parent.join("/"), 0o755)?, cstr(name)?))
    }
}

pub fn cwd() -> BorrowedFd<'static> {
    sys::at_fdcwd()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_components() {
        assert_eq!(components("/a/./b/../c"), vec!["a", "c"]);
        assert_eq!(components("/../../etc"), vec!["etc"]);
        assert!(components("/").is_empty());
    }

    #[test]
    fn symlink_escape_stays_inside() {
        let dir = std::env::temp_dir().join(format!("moat-path-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("rootfs")).unwrap();
        std::os::unix::fs::symlink("/", dir.join("rootfs/escape")).unwrap();
        std::os::unix::fs::symlink("../../..", dir.join("rootfs/up")).unwrap();
        let root = Root::open(&dir.join("rootfs")).unwrap();
        // mkdir through an absolute symlink lands inside the root, not on the host.
        root.mkdir_all("/escape/moat-created", 0o755).unwrap();
        assert!(dir.join("rootfs/moat-created").is_dir());
        root.mkfile("/up/moat-file", 0o644).unwrap();
        assert!(dir.join("rootfs/moat-file").is_file());
        assert!(!Path::new("/moat-created").exists());
        assert!(!Path::new("/moat-file").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
