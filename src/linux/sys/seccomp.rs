//! seccomp(2): installing a filter (with its notification listener when asked), which
//! filter flags the kernel knows, and raw syscalls by number for the probes and tests of
//! filters.

use std::io;
use std::os::fd::OwnedFd;

use super::{check, owned, Result};

/// Installs a classic BPF program as a seccomp filter. With `SECCOMP_FILTER_FLAG_NEW_LISTENER`
/// in `flags` the kernel returns the notification fd.
pub fn seccomp_set_filter(flags: u32, prog: &[libc::sock_filter]) -> Result<Option<OwnedFd>> {
    fake!("seccomp_set_filter", flags, prog);
    const SECCOMP_SET_MODE_FILTER: u32 = 1;
    const SECCOMP_FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;
    let fprog = libc::sock_fprog {
        // Longer than the kernel takes (BPF_MAXINSNS, 4096): refused, never cut short.
        len: u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: fprog points at a valid filter array that outlives the call.
    let r = check(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags,
            &fprog as *const libc::sock_fprog,
        )
    })?;
    Ok((flags & SECCOMP_FILTER_FLAG_NEW_LISTENER != 0).then(|| owned(r)))
}

/// Whether the kernel knows the `SECCOMP_FILTER_FLAG_*` bits in `flags`: it checks them
/// before reading the program, so a NULL program fails with EFAULT when they are known
/// and EINVAL when not. Nothing is installed either way.
pub fn seccomp_flags_known(flags: u32) -> bool {
    fake!("seccomp_flags_known", flags);
    const SECCOMP_SET_MODE_FILTER: u32 = 1;
    // SAFETY: the NULL program is never dereferenced in user space; the kernel fails
    // the copy with EFAULT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            flags,
            std::ptr::null::<libc::sock_fprog>(),
        )
    };
    r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

/// A raw syscall whose arguments are all integers or NULL pointers: the kernel validates
/// them and fails with EFAULT/EINVAL rather than touching our memory. For probes only.
pub fn syscall_ints(nr: libc::c_long, args: [libc::c_long; 5]) -> Result<libc::c_long> {
    fake!("syscall_ints", nr);
    // SAFETY: no argument is a pointer into our memory (see above).
    check(unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4]) })
}

/// A raw syscall whose arguments are all numbers, passed in the registers exactly as
/// given, high bits included (libc's wrappers may cut them): for the tests of seccomp
/// argument rules, which must see what a hostile caller can put there.
#[cfg(test)]
pub fn syscall_numbers(nr: libc::c_long, a: u64, b: u64, c: u64) -> Result<libc::c_long> {
    fake!("syscall_numbers", nr, a, b, c);
    // SAFETY: callers pass syscalls that take no pointers (or a null/absent one), so the
    // kernel reads no memory of ours; the result is checked like any other.
    let r = unsafe { libc::syscall(nr, a, b, c) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}
