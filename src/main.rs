//! moat: a hardened, runc-compatible OCI runtime. The runtime is the library
//! (`src/lib.rs`); this binary is its C entry point and its allocator.
#![deny(unsafe_code)]
// The one `unsafe` block (the C entry point below) says why it is sound
// (`clippy::undocumented_unsafe_blocks`, denied in Cargo.toml's `[lints]`).
// moat's entry point is the C `main` below, not Rust's `fn main` (the test build keeps the
// test harness's).
#![cfg_attr(not(test), no_main)]

use moat::entry;

#[cfg(target_env = "musl")]
mod alloc;
mod musl;

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: alloc::Alloc = alloc::Alloc::new();

/// Called by libc's start-up in place of Rust's runtime entry. Rust's start-up installs
/// stack-overflow handlers on an alternate signal stack, and finding the main thread's
/// guard page makes glibc read `/proc/self/maps`: ~75 µs of every moat call on the
/// reference host, for a diagnostic that `panic = "abort"` does not need (an overflow
/// still ends in SIGSEGV at the kernel's guard gap). The rest of what it did is
/// [`entry::process_init`]; arguments and environment still come through std, which
/// reads them from libc's init arrays. `std::process::exit` flushes stdout.
#[allow(unsafe_code)] // `no_mangle`: this symbol is the one libc calls.
#[cfg_attr(not(test), no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    // SAFETY: libc calls main with argc valid argument strings.
    unsafe { entry::process_init(argc, argv) };
    // Before anything is opened: which fds the caller passed, and LISTEN_* (container/startup.rs).
    entry::capture();
    std::process::exit(entry::main())
}
