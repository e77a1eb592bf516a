//! Credentials of the calling thread: user and group ids, supplementary groups,
//! capability sets, filesystem ids.

use super::{check, Result};

pub fn setresuid(uid: u32) -> Result<()> {
    fake!("setresuid", uid);
    // SAFETY: the raw syscall sets the ids of this thread only, which is what a
    // single-threaded container init wants (glibc's wrapper would broadcast to threads).
    check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) }).map(drop)
}

pub fn setresgid(gid: u32) -> Result<()> {
    fake!("setresgid", gid);
    // SAFETY: as setresuid.
    check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) }).map(drop)
}

pub fn setgroups(gids: &[u32]) -> Result<()> {
    fake!("setgroups", gids);
    // SAFETY: pointer and length describe a valid slice of gid_t.
    check(unsafe { libc::syscall(libc::SYS_setgroups, gids.len(), gids.as_ptr()) }).map(drop)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const CAP_V3: u32 = 0x2008_0522;

/// Sets the effective, permitted and inheritable sets of the calling thread.
pub fn capset(effective: u64, permitted: u64, inheritable: u64) -> Result<()> {
    fake!("capset", effective, permitted, inheritable);
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [
        CapData {
            effective: (effective & 0xffff_ffff) as u32,
            permitted: (permitted & 0xffff_ffff) as u32,
            inheritable: (inheritable & 0xffff_ffff) as u32,
        },
        CapData {
            effective: (effective >> 32) as u32,
            permitted: (permitted >> 32) as u32,
            inheritable: (inheritable >> 32) as u32,
        },
    ];
    // SAFETY: header and a two-element data array, as _LINUX_CAPABILITY_VERSION_3 requires.
    check(unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) })
        .map(drop)
}

/// The (effective, permitted, inheritable) sets of the calling thread.
pub fn capget() -> Result<(u64, u64, u64)> {
    fake!("capget");
    let mut hdr = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a writable two-element data array, as version 3 requires.
    check(unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut hdr as *mut CapHeader,
            data.as_mut_ptr(),
        )
    })?;
    let join = |lo: u32, hi: u32| lo as u64 | (hi as u64) << 32;
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ))
}

/// Sets the filesystem uid and gid of the calling thread; returns the previous pair.
/// (The kernel reports no error: the caller checks by setting again.)
pub fn setfsids(uid: u32, gid: u32) -> (u32, u32) {
    fake!("setfsids", uid, gid);
    // SAFETY: scalar arguments; affects this thread's credentials only.
    let old_gid = unsafe { libc::syscall(libc::SYS_setfsgid, gid) };
    // SAFETY: as above.
    let old_uid = unsafe { libc::syscall(libc::SYS_setfsuid, uid) };
    // Ids in 0..=u32::MAX; a (never seen) -1 stays u32::MAX, as the cast made it.
    let id = |r: libc::c_long| u32::try_from(r).unwrap_or(u32::MAX);
    (id(old_uid), id(old_gid))
}

pub fn getegid() -> u32 {
    fake!("getegid");
    // SAFETY: always succeeds.
    unsafe { libc::getegid() }
}

pub fn geteuid() -> u32 {
    fake!("geteuid");
    // SAFETY: always succeeds.
    unsafe { libc::geteuid() }
}
