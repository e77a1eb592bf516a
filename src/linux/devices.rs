//! Device nodes in the container's /dev: the default set, `linux.devices`, the standard
//! symlinks. Inside a user namespace mknod is not allowed, so the host's node is
//! bind-mounted onto an empty file instead.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::mount;
use super::path;
use super::rootfs::Mounts;
use super::sync::{InitFailure, Step, StepExt};
use super::sys;
use crate::spec::Device;

/// What runc creates in every container with a private /dev.
pub fn defaults() -> Vec<Device> {
    [
        ("null", 1, 3),
        ("zero", 1, 5),
        ("full", 1, 7),
        ("random", 1, 8),
        ("urandom", 1, 9),
        ("tty", 5, 0),
    ]
    .into_iter()
    .map(|(n, major, minor)| Device {
        typ: "c".into(),
        path: format!("/dev/{n}"),
        major,
        minor,
        file_mode: Some(0o666),
        uid: Some(0),
        gid: Some(0),
    })
    .collect()
}

/// Creates the device nodes. Below `/dev` (every path the spec may name, once normalised)
/// the nodes are made relative to the held `/dev` fd, parents resolved without following
/// symlinks: a racer renaming the rootfs's `dev` cannot redirect them (onto the rootfs's
/// disk, say). mknod is subject to the umask, so it is cleared meanwhile: the spec's mode
/// is exact, with no chmod by path afterwards.
pub fn create(mounts: &mut Mounts, devices: &[Device], bind: bool) -> Result<(), InitFailure> {
    let dev = mounts.dev().step(Step::Devices, || "/dev".into())?;
    let old = sys::swap_umask(0);
    let r = devices
        .iter()
        .try_for_each(|d| create_one(mounts, dev.as_fd(), d, bind));
    sys::swap_umask(old);
    r
}

/// The parent directory of a device path, and the node's name.
fn parent_of(
    mounts: &Mounts,
    dev: BorrowedFd<'_>,
    path: &str,
) -> std::io::Result<(OwnedFd, CString)> {
    let comps = path::components(path);
    let Some((name, parents)) = comps.split_last() else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let name = CString::new(*name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    match parents.split_first() {
        Some((&"dev", below)) => Ok((path::mkdir_beneath(dev, below, 0o755, false)?, name)),
        // Outside /dev: a spec path, resolved inside the root.
        _ => mounts.root().parent_of(path),
    }
}

fn create_one(
    mounts: &mut Mounts,
    dev: BorrowedFd<'_>,
    d: &Device,
    bind: bool,
) -> Result<(), InitFailure> {
    let what = || d.path.clone();
    let (dir, name) = parent_of(mounts, dev, &d.path).step(Step::Devices, what)?;
    if bind {
        let target = path::mkfile_beneath(
            dir.as_fd(),
            &[name.to_str().unwrap_or_default()],
            0o644,
            false,
        )
        .step(Step::Devices, what)?;
        // The host's node (a host path from the spec), as runc binds it.
        let src = mount::clone_tree(path::cwd(), &d.path, false)
            .step(Step::Devices, || format!("bind host {}", d.path))?;
        mount::attach(src.as_fd(), target.as_fd()).step(Step::Devices, what)?;
        // Pinned: /dev/null is looked up again for the masks, and lands on this mount.
        return mounts
            .pin(&path::components(&d.path), src, false)
            .step(Step::Devices, what);
    }
    let kind = match d.typ.as_str() {
        "b" => libc::S_IFBLK,
        "p" => libc::S_IFIFO,
        _ => libc::S_IFCHR,
    };
    let mode = d.file_mode.unwrap_or(0o666) & 0o7777;
    // A number that is no u32 is no device's (was cut to 32 bits, making another node).
    let number =
        |n: i64| u32::try_from(n).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL));
    let (major, minor) = (
        number(d.major).step(Step::Devices, what)?,
        number(d.minor).step(Step::Devices, what)?,
    );
    let devno = libc::makedev(major, minor);
    match sys::mknodat(dir.as_fd(), &name, kind | mode, devno) {
        Ok(()) => {}
        // Already provided (by the image or a bind mount): keep it.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(()),
        Err(e) => return Err(e).step(Step::Devices, || format!("mknod {}", d.path)),
    }
    let node = sys::openat(dir.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0)
        .step(Step::Devices, what)?;
    sys::fchownat_empty(node.as_fd(), d.uid.unwrap_or(0), d.gid.unwrap_or(0))
        .step(Step::Devices, || format!("chown {}", d.path))
}

/// /dev/fd, stdin, stdout, stderr, ptmx (and core where the host has /proc/kcore), made
/// relative to the held `/dev`.
pub fn symlinks(mounts: &Mounts, kcore: bool) -> Result<(), InitFailure> {
    let dev = mounts.dev().step(Step::Devices, || "/dev".into())?;
    let mut links = vec![
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
        ("pts/ptmx", "ptmx"),
    ];
    if kcore {
        links.push(("/proc/kcore", "core"));
    }
    for (target, name) in links {
        let (t, n) = (
            CString::new(target).expect("static"),
            CString::new(name).expect("static"),
        );
        match sys::symlinkat(&t, dev.as_fd(), &n) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(e).step(Step::Devices, || format!("symlink /dev/{name}")),
        }
    }
    Ok(())
}
