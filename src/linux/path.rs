//! Every lookup inside a container's root goes through this module.
//!
//! The rootfs is hostile: any component may be a symlink, and a second container sharing a
//! volume may swap it while we work. So paths are never joined as strings and handed to the
//! kernel; each is resolved once, relative to an fd moat holds, into an `O_PATH` fd, and
//! mounts target that fd. Two kinds of names, two resolutions:
//! * what the spec names (mount destinations, cwd, device paths) goes through [`Root`]:
//!   `openat2(RESOLVE_IN_ROOT)`, so in-root symlinks work as in runc (`/var/run -> /run`);
//! * what moat itself names (`/proc`, `/sys`, `/dev` and its entries, masked and read-only
//!   paths, `/dev/null`, the console) goes through [`open_beneath`] and friends:
//!   `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS` below the fd of the mount that covers it, so a
//!   symlink anywhere on the way is refused (ELOOP), never followed.
//!
//! Missing components are created with `mkdirat`/`mknodat` relative to the fd of their
//! parent, never through a path the kernel would re-resolve.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use super::sys::{
    self, OpenHow, RESOLVE_BENEATH, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS,
    RESOLVE_NO_XDEV,
};

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

/// The components of a path as written (`..` kept, `.` and empty ones dropped).
fn raw_components(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty() && *c != ".")
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
            flags: u64::try_from(flags | libc::O_CLOEXEC).unwrap_or(u64::MAX),
            mode: 0,
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        sys::openat2(self.fd.as_fd(), &cstr(&rel)?, &how)
    }

    /// [`Root::open_at`] for a root held by a borrowed fd.
    pub fn open_in(root: BorrowedFd<'_>, path: &str, flags: libc::c_int) -> io::Result<OwnedFd> {
        let rel = components(path).join("/");
        let rel = if rel.is_empty() { ".".to_string() } else { rel };
        let how = OpenHow {
            flags: u64::try_from(flags | libc::O_CLOEXEC).unwrap_or(u64::MAX),
            mode: 0,
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        sys::openat2(root, &cstr(&rel)?, &how)
    }

    /// Enters `path` (a spec path, such as `process.cwd`) inside the root held by `root`:
    /// resolved with `RESOLVE_IN_ROOT`, entered with `fchdir`.
    pub fn chdir_in(root: BorrowedFd<'_>, path: &str) -> io::Result<()> {
        let rel = components(path).join("/");
        let rel = if rel.is_empty() { ".".to_string() } else { rel };
        let how = OpenHow {
            flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
            mode: 0,
            resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
        };
        let fd = sys::openat2(root, &cstr(&rel)?, &how)?;
        sys::fchdir(fd.as_fd())
    }

    /// The path `path` names inside the root once its dangling symlinks are followed as
    /// if what they point at existed (runc 1.5's "hallucinated" path, mounts.bats "bind
    /// mount through a dangling symlink component"): `/etc/hosts -> /jump/baz/hosts` with
    /// `/jump -> /tmp/foo/bar` and no `/tmp/foo` gives `tmp/foo/bar/baz/hosts`. Each link
    /// is read by `readlinkat` relative to the fd of its directory, opened from the root
    /// one name at a time without following anything; an absolute target starts again at
    /// the root and `..` never climbs above it, so the result is a path inside the root
    /// with no symlink in it (as it was read). It is only a name: what is created is
    /// created through [`Root::mkdir_all`]'s confined lookups, so a racer who swaps a
    /// component afterwards still cannot lead it out of the root.
    pub fn dangling_target(&self, path: &str) -> io::Result<Vec<String>> {
        const MAX_LINKS: usize = 40; // the kernel's own limit
        let mut todo: std::collections::VecDeque<String> =
            raw_components(path).map(String::from).collect();
        let mut done: Vec<String> = Vec::new();
        // fds[k] is the directory `done[..k]`, for as long as it exists.
        let mut fds: Vec<OwnedFd> = vec![sys::dup_cloexec(self.fd.as_fd())?];
        let mut links = 0;
        while let Some(c) = todo.pop_front() {
            if c == ".." {
                done.pop();
                fds.truncate(done.len() + 1);
                continue;
            }
            if fds.len() != done.len() + 1 {
                // Below a missing component: nothing there to be a link.
                done.push(c);
                continue;
            }
            let dir = fds.last().expect("the root").as_fd();
            let name = cstr(&c)?;
            match sys::readlinkat(dir, &name) {
                Ok(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(io::Error::from_raw_os_error(libc::ELOOP));
                    }
                    let target = String::from_utf8(target)
                        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
                    if target.starts_with('/') {
                        done.clear();
                        fds.truncate(1);
                    }
                    for t in raw_components(&target).rev() {
                        todo.push_front(t.to_string());
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    // Not a link: step into it, following nothing.
                    fds.push(sys::openat(dir, &name, libc::O_PATH | libc::O_NOFOLLOW, 0)?);
                    done.push(c);
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => done.push(c),
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// Makes sure `path` exists as a directory inside the root, creating missing components
    /// relative to their parent's fd, and returns an `O_PATH` fd of it. A dangling symlink
    /// on the way is followed inside the root: what it points at is created.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> io::Result<OwnedFd> {
        let path = match self.open_at(path, libc::O_PATH | libc::O_DIRECTORY) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                self.dangling_target(path)?.join("/")
            }
            r => return r,
        };
        let comps = components(&path);
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
    /// `O_PATH` fd of it. Used as the target of file bind mounts and masks. A dangling
    /// symlink on the way or at the end is followed inside the root, as in
    /// [`Root::mkdir_all`].
    pub fn mkfile(&self, path: &str, mode: u32) -> io::Result<OwnedFd> {
        match self.open_at(path, libc::O_PATH) {
            Ok(fd) => return Ok(fd),
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
            Err(_) => {}
        }
        let path = self.dangling_target(path)?.join("/");
        let comps = components(&path);
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

/// The `openat2` resolve flags for a name moat chose: below the directory, no symlink or
/// magic link anywhere; with `same_mount`, no mount crossed either.
fn beneath_resolve(same_mount: bool) -> u64 {
    let xdev = if same_mount { RESOLVE_NO_XDEV } else { 0 };
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | xdev
}

fn rel_path(comps: &[&str]) -> io::Result<CString> {
    if comps.is_empty() {
        return Ok(c".".to_owned());
    }
    cstr(&comps.join("/"))
}

/// Opens `comps` below `dir` without following any symlink (a symlink anywhere on the way
/// fails with ELOOP) and without ever leaving `dir`; with `same_mount`, without crossing
/// onto another mount (EXDEV).
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    comps: &[&str],
    flags: libc::c_int,
    same_mount: bool,
) -> io::Result<OwnedFd> {
    // No O_NOFOLLOW: with it, RESOLVE_NO_SYMLINKS would hand back an O_PATH fd of a
    // trailing symlink (mounting on a symlink works); without it that is ELOOP too.
    let how = OpenHow {
        flags: u64::try_from(flags | libc::O_CLOEXEC).unwrap_or(u64::MAX),
        mode: 0,
        resolve: beneath_resolve(same_mount),
    };
    sys::openat2(dir, &rel_path(comps)?, &how)
}

/// Like [`open_beneath`] for a directory, creating missing components one at a time
/// relative to the fd of their parent.
pub fn mkdir_beneath(
    dir: BorrowedFd<'_>,
    comps: &[&str],
    mode: u32,
    same_mount: bool,
) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    let mut cur = open_beneath(dir, &[], flags, same_mount)?;
    for comp in comps {
        cur = match open_beneath(cur.as_fd(), &[comp], flags, same_mount) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                match sys::mkdirat(cur.as_fd(), &cstr(comp)?, mode) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                open_beneath(cur.as_fd(), &[comp], flags, same_mount)?
            }
            Err(e) => return Err(e),
        };
    }
    Ok(cur)
}

/// Like [`mkdir_beneath`] for a file: the parents are made directories, the last an empty
/// regular file if missing. Returns an `O_PATH` fd of it.
pub fn mkfile_beneath(
    dir: BorrowedFd<'_>,
    comps: &[&str],
    mode: u32,
    same_mount: bool,
) -> io::Result<OwnedFd> {
    let Some((name, parents)) = comps.split_last() else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let parent = mkdir_beneath(dir, parents, 0o755, same_mount)?;
    match open_beneath(parent.as_fd(), &[name], libc::O_PATH, same_mount) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        r => return r,
    }
    match sys::mknodat(parent.as_fd(), &cstr(name)?, libc::S_IFREG | mode, 0) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    open_beneath(parent.as_fd(), &[name], libc::O_PATH, same_mount)
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

    #[test]
    fn dangling_symlinks_name_a_path_inside_the_root() {
        let dir = std::env::temp_dir().join(format!("moat-dangling-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = dir.join("rootfs");
        std::fs::create_dir_all(r.join("etc")).unwrap();
        std::fs::create_dir_all(r.join("tmp")).unwrap();
        let link = |target: &str, at: &str| std::os::unix::fs::symlink(target, r.join(at)).unwrap();
        link("/tmp/foo/bar", "jump");
        link("/jump/baz/hosts", "etc/hosts");
        link("../tmp/x", "etc/rel");
        link("/../../../../host/dir", "etc/abs-out");
        link("../../../../../host/dir/f", "etc/rel-out");
        link("loop2", "loop1");
        link("loop1", "loop2");
        let root = Root::open(&r).unwrap();
        let t = |p: &str| root.dangling_target(p).map(|v| v.join("/"));
        assert_eq!(t("/etc/hosts").unwrap(), "tmp/foo/bar/baz/hosts");
        assert_eq!(t("/etc/rel/y").unwrap(), "tmp/x/y");
        assert_eq!(t("/etc/abs-out/new").unwrap(), "host/dir/new");
        assert_eq!(t("/etc/rel-out").unwrap(), "host/dir/f");
        assert_eq!(t("/missing/../etc/hosts").unwrap(), "tmp/foo/bar/baz/hosts");
        assert_eq!(
            t("/loop1").err().and_then(|e| e.raw_os_error()),
            Some(libc::ELOOP)
        );
        // What is made through them is made inside the root.
        root.mkfile("/etc/hosts", 0o644).unwrap();
        assert!(r.join("tmp/foo/bar/baz/hosts").is_file());
        root.mkdir_all("/etc/abs-out/new", 0o755).unwrap();
        assert!(r.join("host/dir/new").is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_moat_chooses_never_follow_a_symlink() {
        let dir = std::env::temp_dir().join(format!("moat-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real/sub")).unwrap();
        std::os::unix::fs::symlink("real", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("sub", dir.join("real/leaf")).unwrap();
        let top = Root::open(&dir).unwrap();
        let loops =
            |r: io::Result<OwnedFd>| r.err().and_then(|e| e.raw_os_error()) == Some(libc::ELOOP);
        // On the way, and as the last component (even for an O_PATH handle).
        assert!(loops(open_beneath(
            top.fd(),
            &["link", "sub"],
            libc::O_PATH,
            false
        )));
        assert!(loops(open_beneath(
            top.fd(),
            &["real", "leaf"],
            libc::O_PATH,
            false
        )));
        assert!(loops(mkdir_beneath(
            top.fd(),
            &["link", "new"],
            0o755,
            false
        )));
        assert!(!dir.join("real/new").exists());
        assert!(open_beneath(top.fd(), &["real", "sub"], libc::O_PATH, true).is_ok());
        let made = mkfile_beneath(top.fd(), &["real", "d", "f"], 0o644, true).unwrap();
        assert!(sys::fstat(made.as_fd()).unwrap().st_mode & libc::S_IFMT == libc::S_IFREG);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
