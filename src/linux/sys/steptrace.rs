//! The step trace of a profiling build (`--features steptrace`; `scripts/bench --profile`):
//! with `MOAT_STEPTRACE=<file>` set, every step point (`linux/killpoint.rs`) appends one
//! line `<CLOCK_MONOTONIC ns> <pid> <op> <side> <step>` to the file, with one `write` on an
//! `O_APPEND` descriptor (so the lines of moat's processes never interleave). The
//! descriptor is opened at the first point, above 900 (the numbers a caller passes and
//! moat checks from 3 up are not touched), close-on-exec: forked children write through
//! it until they execute the container's program, and a re-executed moat opens it again.
//! Nothing of it is in a build without the feature.

use std::sync::atomic::{AtomicI32, Ordering};

/// The trace descriptor: -1 not looked at yet, -2 no trace asked for.
static FD: AtomicI32 = AtomicI32::new(-1);

fn fd() -> i32 {
    match FD.load(Ordering::Relaxed) {
        -1 => {}
        fd => return fd,
    }
    let fd = std::env::var_os("MOAT_STEPTRACE")
        .and_then(|p| {
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())).ok()
        })
        .map_or(-2, |p| {
            // SAFETY: a NUL-terminated path; the flags and mode are plain values.
            let f = unsafe {
                libc::open(
                    p.as_ptr(),
                    libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if f < 0 {
                return -2;
            }
            // SAFETY: duplicating an fd we own onto the lowest free number from 900, then
            // closing the original.
            let high = unsafe { libc::fcntl(f, libc::F_DUPFD_CLOEXEC, 900) };
            // SAFETY: f is ours and no longer needed.
            unsafe { libc::close(f) };
            if high < 0 {
                -2
            } else {
                high
            }
        });
    FD.store(fd, Ordering::Relaxed);
    fd
}

/// Appends this point's line (nothing without `MOAT_STEPTRACE`).
pub fn steptrace(op: &str, side: &str, step: &str) {
    not_faked!("steptrace");
    let fd = fd();
    if fd < 0 {
        return;
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let ns = i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec);
    let line = format!("{ns} {} {op} {side} {step}\n", std::process::id());
    // SAFETY: writes a live buffer of its own length to our descriptor.
    unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
}
