//! Device nodes in the container's /dev: the default set, `linux.devices`, the standard
//! symlinks. Inside a user namespace mknod is not allowed, so the host's node is
//! bind-mounted onto an empty file instead.

use std::ffi::CString;
use std::os::fd::AsFd;

use super::mount;
use super::path::{self, Root};
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

pub fn create(root: &Root, devices: &[Device], bind: bool) -> Result<(), InitFailure> {
    for d in devices {
        let what = || d.path.clone();
        if bind {
            let target = root.mkfile(&d.path, 0o644).step(Step::Devices, what)?;
            let src = mount::clone_tree(path::cwd(), &d.path, false)
                .step(Step::Devices, || format!("bind host {}", d.path))?;
            mount::attach(src.as_fd(), target.as_fd()).step(Step::Devices, what)?;
            continue;
        }
        let kind = match d.typ.as_str() {
            "b" => libc::S_IFBLK,
            "p" => libc::S_IFIFO,
            _ => libc::S_IFCHR,
        };
        let (dir, name) = root.parent_of(&d.path).step(Step::Devices, what)?;
        let mode = d.file_mode.unwrap_or(0o666) & 0o7777;
        let dev = libc::makedev(d.major as u32, d.minor as u32);
        match sys::mknodat(dir.as_fd(), &name, kind | mode, dev) {
            Ok(()) => {}
            // Already provided (by the image or a bind mount): keep it.
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(e).step(Step::Devices, || format!("mknod {}", d.path)),
        }
        let node = sys::openat(dir.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0)
            .step(Step::Devices, what)?;
        // mknod is subject to the umask; the spec's mode is exact.
        super::procfs::chmod_fd(node.as_fd(), mode)
            .step(Step::Devices, || format!("chmod {}", d.path))?;
        sys::fchownat_empty(node.as_fd(), d.uid.unwrap_or(0), d.gid.unwrap_or(0))
            .step(Step::Devices, || format!("chown {}", d.path))?;
    }
    Ok(())
}

/// /dev/fd, stdin, stdout, stderr, ptmx (and core where the host has /proc/kcore).
pub fn symlinks(root: &Root) -> Result<(), InitFailure> {
    let dev = root
        .mkdir_all("/dev", 0o755)
        .step(Step::Devices, || "/dev".into())?;
    let mut links = vec![
        ("/proc/self/fd", "fd"),
        ("/proc/self/fd/0", "stdin"),
        ("/proc/self/fd/1", "stdout"),
        ("/proc/self/fd/2", "stderr"),
        ("pts/ptmx", "ptmx"),
    ];
    if std::path::Path::new("/proc/kcore").exists() {
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
