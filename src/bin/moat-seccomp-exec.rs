//! moat-seccomp-exec: the seccomp trampoline of gVisor containers, a program of its own
//! (`src/gvisor/seccomp_exec.rs`; docs/gvisor.md, "runsc releases").
//!
//! moat bind-mounts a copy of it read-only at `/dev/.moat-seccomp-exec` inside the sandbox
//! and puts it in front of the container's process and of every exec'd one: it installs
//! the container's compiled seccomp filter and execve's the real command. A program of its
//! own rather than moat re-executed: the sentry maps and faults in every page an execve
//! touches, each a trap to the sentry under `--platform=ptrace`, and this binary is a small
//! fraction of moat's. Nothing else runs before it: no SIGPIPE change, no descriptor
//! set-up, no allocator of moat's (musl's serves the few allocations it makes).
#![deny(unsafe_code)]
// The entry point is the C `main` below, not Rust's `fn main`, whose start-up would add
// signal handlers and an alternate stack the exec'd process does not need (the test build
// keeps the test harness's).
#![cfg_attr(not(test), no_main)]

/// Called by libc's start-up in place of Rust's runtime entry.
#[allow(unsafe_code)] // `no_mangle`: this symbol is the one libc calls.
#[cfg_attr(not(test), no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: libc calls main with argc valid argument strings.
    unsafe { moat::entry::keep_args(argc, argv) };
    std::process::exit(moat::entry::gvisor_seccomp_exec())
}
