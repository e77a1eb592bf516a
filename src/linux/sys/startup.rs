//! moat's own process start-up (for its C `main`): the command line, SIGPIPE, and
//! descriptors 0-2.

use std::ffi::CStr;

use super::exit_now;

/// The command line `main` received.
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// moat's command line: what `main` received, or std's view of it where moat did not
/// start through its own `main` (unit tests).
pub fn args() -> Vec<std::ffi::OsString> {
    ARGS.get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect())
}

/// Keeps the command line `main` received, for [`args`]; nothing else of
/// [`process_init`] (the seccomp trampoline, `src/bin/moat-seccomp-exec.rs`, hands the
/// container's process its descriptors and signal dispositions as they came).
///
/// # Safety
/// `argv` must hold `argc` valid NUL-terminated strings, as libc passes to `main`.
pub unsafe fn keep_args(argc: libc::c_int, argv: *const *const libc::c_char) {
    use std::os::unix::ffi::OsStrExt;
    let args = (0..usize::try_from(argc).unwrap_or(0))
        // SAFETY: the caller guarantees argc valid strings.
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) })
        .map(|a| std::ffi::OsStr::from_bytes(a.to_bytes()).to_os_string())
        .collect();
    let _ = ARGS.set(args);
}

/// What Rust's own start-up would have done, for moat's C `main` (`src/main.rs`): keep
/// the command line (std finds it by itself under glibc only; musl hands it to `main`
/// alone), ignore SIGPIPE, so that a write to a closed pipe is an error rather than
/// death, and open descriptors 0-2 on /dev/null when closed, so that no file moat opens
/// later takes their place and receives output meant for a terminal.
///
/// # Safety
/// `argv` must hold `argc` valid NUL-terminated strings, as libc passes to `main`.
pub unsafe fn process_init(argc: libc::c_int, argv: *const *const libc::c_char) {
    // SAFETY: the caller's contract is keep_args's.
    unsafe { keep_args(argc, argv) };
    // SAFETY: setting a disposition to SIG_IGN and polling three fds are always valid.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: a valid array of three pollfds, zero timeout.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0;
    for p in fds {
        let closed = if polled {
            p.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD on a number only queries the table.
            (unsafe { libc::fcntl(p.fd, libc::F_GETFD) }) < 0
        };
        if closed {
            // SAFETY: opens /dev/null on the lowest free number, which is this one; it is
            // never closed (as std does), so the number stays taken.
            if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } < 0 {
                exit_now(127);
            }
        }
    }
}
