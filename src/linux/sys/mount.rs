//! Mounts: the new mount API (Linux 5.2+, `mount_setattr` 5.12+), classic `mount(2)` and
//! `umount2` for propagation changes and remounts, `pivot_root`, `chroot`, and the mount
//! id a descriptor lies on.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use super::{check, check_int, owned, Result};

pub const OPEN_TREE_CLONE: u32 = 1;
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const FSMOUNT_CLOEXEC: u32 = 1;
pub const FSCONFIG_SET_FLAG: u32 = 0;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;

pub const MOUNT_ATTR_RDONLY: u64 = 0x01;
pub const MOUNT_ATTR_NOSUID: u64 = 0x02;
pub const MOUNT_ATTR_NODEV: u64 = 0x04;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x08;
pub const MOUNT_ATTR__ATIME: u64 = 0x70;
pub const MOUNT_ATTR_RELATIME: u64 = 0x00;
pub const MOUNT_ATTR_NOATIME: u64 = 0x10;
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x20;
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x80;
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
#[derive(Default, Debug, Clone, Copy)]
pub struct MountAttr {
    pub attr_set: u64,
    pub attr_clr: u64,
    pub propagation: u64,
    pub userns_fd: u64,
}

pub fn open_tree(dir: BorrowedFd<'_>, path: &CStr, flags: u32) -> Result<OwnedFd> {
    fake!("open_tree", dir, path, flags);
    // SAFETY: valid dirfd and NUL-terminated path.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            dir.as_raw_fd(),
            path.as_ptr(),
            flags | libc::O_CLOEXEC as u32,
        )
    })?;
    Ok(owned(r))
}

/// Attaches the detached mount `from` on top of the object `to` refers to.
pub fn move_mount_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<()> {
    fake!("move_mount_fd", from, to);
    // SAFETY: two valid fds with empty paths.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(drop)
}

pub fn fsopen(fstype: &CStr) -> Result<OwnedFd> {
    fake!("fsopen", fstype);
    const FSOPEN_CLOEXEC: u32 = 1;
    // SAFETY: NUL-terminated filesystem name.
    let r = check(unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) })?;
    Ok(owned(r))
}

pub fn fsconfig(
    fs: BorrowedFd<'_>,
    cmd: u32,
    key: Option<&CStr>,
    value: Option<&CStr>,
) -> Result<()> {
    fake!("fsconfig", fs, cmd, key, value);
    let k = key.map_or(std::ptr::null(), |k| k.as_ptr());
    let v = value.map_or(std::ptr::null(), |v| v.as_ptr());
    // SAFETY: NULL or NUL-terminated strings as the command requires.
    check(unsafe { libc::syscall(libc::SYS_fsconfig, fs.as_raw_fd(), cmd, k, v, 0) }).map(drop)
}

pub fn fsmount(fs: BorrowedFd<'_>, attrs: u64) -> Result<OwnedFd> {
    fake!("fsmount", fs, attrs);
    // SAFETY: valid fs context fd.
    let r =
        check(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })?;
    Ok(owned(r))
}

pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, attr: &MountAttr) -> Result<()> {
    fake!("mount_setattr", fd, recursive, attr);
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: valid fd, empty path, sized mount_attr.
    check(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// Classic mount(2), used only for propagation changes and remounts of mounts moat made,
/// always on a `/proc/self/fd/N` path of a pinned fd or on "/" / ".".
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<()> {
    fake!("mount", source, target, fstype, flags, data);
    // SAFETY: NULL or NUL-terminated strings.
    check_int(unsafe {
        libc::mount(
            source.map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |s| s.as_ptr().cast()),
        )
    })
    .map(drop)
}

pub fn umount2(target: &CStr, flags: libc::c_int) -> Result<()> {
    fake!("umount2", target, flags);
    // SAFETY: NUL-terminated path.
    check_int(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<()> {
    fake!("pivot_root", new_root, put_old);
    // SAFETY: NUL-terminated paths.
    check(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

pub fn chroot(path: &CStr) -> Result<()> {
    fake!("chroot", path);
    // SAFETY: NUL-terminated path.
    check_int(unsafe { libc::chroot(path.as_ptr()) }).map(drop)
}

/// The id of the mount `fd` lies on (`statx` `STATX_MNT_ID`, Linux 5.8+): which mount a
/// lookup ended on, compared with the mounts moat made.
pub fn mount_id(fd: BorrowedFd<'_>) -> Result<u64> {
    fake!("mount_id", fd);
    const STATX_MNT_ID: u32 = 0x1000;
    // struct statx is 256 bytes; stx_mask is at 0, stx_mnt_id at 0x90.
    let mut buf = [0u64; 32];
    // SAFETY: a 256-byte buffer for struct statx, an empty path with AT_EMPTY_PATH on a
    // valid fd.
    check(unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
            STATX_MNT_ID,
            buf.as_mut_ptr(),
        )
    })?;
    if buf[0] & u64::from(STATX_MNT_ID) == 0 {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    Ok(buf[0x90 / 8])
}

/// The first of `openat2`, `fsopen` and `mount_setattr` (and statx's mount id) this kernel
/// lacks, if any. Each is called with arguments it refuses before doing anything, so
/// nothing is opened or changed: only ENOSYS tells a missing call.
pub fn missing_mount_api() -> Option<&'static str> {
    fake!("missing_mount_api");
    let null = std::ptr::null::<u8>();
    let lacks =
        |r: libc::c_long| r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS);
    // SAFETY: NULL pointers and invalid fds: the kernel validates them and fails
    // (EFAULT/EBADF/EINVAL) without side effects, or answers ENOSYS when the call is missing.
    if lacks(unsafe { libc::syscall(libc::SYS_openat2, -1, null, null, 0) }) {
        return Some("openat2");
    }
    // SAFETY: as above.
    if lacks(unsafe { libc::syscall(libc::SYS_fsopen, null, 0) }) {
        return Some("fsopen");
    }
    // SAFETY: as above.
    if lacks(unsafe { libc::syscall(libc::SYS_mount_setattr, -1, null, 0, null, 0) }) {
        return Some("mount_setattr");
    }
    None
}
