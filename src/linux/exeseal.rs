//! Protection of the moat binary against `/proc/self/exe` attacks (CVE-2019-5736).
//!
//! moat never executes itself inside a container, but the container init is a fork of moat,
//! so until its final execve its exe is moat's file; an entrypoint such as
//! `#!/proc/self/exe` makes the kernel run that file as the interpreter, after which a
//! process in the container could reopen it for writing and replace the host's moat.
//! Before create, run or exec forks anything, moat therefore makes sure its own exe cannot
//! be written: if the file is not already on a read-only mount (or a sealed memfd), moat
//! re-executes itself once, on the host, from a detached read-only bind mount of itself
//! (`open_tree` + `mount_setattr`; no copy, the page cache is shared). Where that is not
//! permitted (unprivileged, no user namespace), a sealed memfd copy is used instead.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::{mount, path, sys};

/// The environment variable a re-executed moat finds its original path in.
pub const SEALED_FROM: &str = "MOAT_SEALED_FROM";

/// The path the running moat binary was started from: `/proc/self/exe`, or, when moat
/// runs from its sealed copy (which names no file), the path it was sealed from.
pub fn original_path() -> Option<std::path::PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    if exe.is_absolute() && exe.is_file() {
        return Some(exe);
    }
    std::env::var_os(SEALED_FROM).map(std::path::PathBuf::from)
}

fn is_protected(exe: &OwnedFd) -> bool {
    if sys::fstatvfs(exe.as_fd()).is_ok_and(|s| s.f_flag & libc::ST_RDONLY != 0) {
        return true;
    }
    // A memfd sealed against writes.
    nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(exe),
        nix::fcntl::FcntlArg::F_GET_SEALS,
    )
    .is_ok_and(|s| s & libc::F_SEAL_WRITE != 0)
}

/// Returns only when the running binary is write-protected; otherwise re-executes, with
/// `restore_env` (variables moat took out of its own environment at start-up, which the
/// re-executed moat must see again) added to the environment.
pub fn ensure(restore_env: &[(std::ffi::OsString, std::ffi::OsString)]) -> io::Result<()> {
    let exe = sys::openat(path::cwd(), c"/proc/self/exe", libc::O_RDONLY, 0)?;
    if is_protected(&exe) {
        return Ok(());
    }
    let argv: Vec<CString> = sys::args()
        .into_iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_default())
        .collect();
    // The re-executed moat's /proc/self/exe names no file (a detached mount or a memfd):
    // where the binary came from is passed on, for what is installed next to it
    // (`moat-dbus`, see cgroups/systemd/bus.rs).
    let from = std::fs::read_link("/proc/self/exe")
        .ok()
        .map(|p| (SEALED_FROM.into(), p.into_os_string()));
    let envp: Vec<CString> = std::env::vars_os()
        .filter(|(k, _)| k != SEALED_FROM)
        .chain(restore_env.iter().cloned())
        .chain(from)
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            CString::new(b).unwrap_or_default()
        })
        .collect();
    let sealed = match read_only_bind(&exe) {
        Ok(fd) => fd,
        Err(_) => sealed_copy(&exe)?,
    };
    Err(sys::fexecve(sealed.as_fd(), &argv, &envp))
}

fn read_only_bind(exe: &OwnedFd) -> io::Result<OwnedFd> {
    let tree = mount::clone_tree(exe.as_fd(), "", false)?;
    mount::setattr(tree.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)?;
    Ok(tree)
}

fn sealed_copy(exe: &OwnedFd) -> io::Result<OwnedFd> {
    let memfd = nix::sys::memfd::memfd_create(
        c"moat",
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC
            | nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING,
    )?;
    let mut src = std::fs::File::from(exe.try_clone()?);
    let mut dst = std::fs::File::from(memfd);
    io::copy(&mut src, &mut dst)?;
    let fd: OwnedFd = dst.into();
    nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        nix::fcntl::FcntlArg::F_ADD_SEALS(
            nix::fcntl::SealFlag::F_SEAL_SEAL
                | nix::fcntl::SealFlag::F_SEAL_SHRINK
                | nix::fcntl::SealFlag::F_SEAL_GROW
                | nix::fcntl::SealFlag::F_SEAL_WRITE,
        ),
    )?;
    Ok(fd)
}
