//! moat: a hardened, runc-compatible OCI runtime, as a library.
//!
//! The binary (`src/main.rs`) is the C entry point and the allocator; everything else lives
//! here, so that the fuzz targets (`fuzz/`) can link the parsers they drive. The modules stay
//! private to the crate: only [`entry`] (what the binary calls) and [`fuzzing`] (what the fuzz
//! targets call) are public, so dead-code analysis still sees what the runtime uses.
#![deny(unsafe_code)]
// Every `unsafe` block (in `linux/sys/`) says why it is sound
// (`clippy::undocumented_unsafe_blocks`, denied in Cargo.toml's `[lints]`).
// `clippy.toml` refuses `Command::spawn`/`output`/`status` to the integration tests, whose
// reaper would race them; moat has no reaper waiting on any child but its own.
#![allow(clippy::disallowed_methods)]

/// moat's own output (`state`, `list`, `ps`, `spec`, …): std's `println!` panics when stdout
/// fails (its reader gone: EPIPE); this one ends the call with a one-line error and status 1.
/// Unit tests keep std's, which the test harness captures.
#[cfg(not(test))]
macro_rules! println {
    () => {
        $crate::log::write_stdout(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::log::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

mod cli;
mod container;
mod error_text;
mod gvisor;
mod linux;
mod log;
mod policy;
mod report;
mod spec;
mod state;

/// Built for the fuzz targets (`cargo fuzz` sets `--cfg fuzzing`) and the unit tests that
/// replay their inputs; the runtime never contains it.
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;

/// What `src/main.rs` calls, in this order.
pub mod entry {
    pub use crate::cli::{command, main};
    pub use crate::container::startup::capture;
    pub use crate::linux::sys::{keep_args, process_init};

    /// `moat-seccomp-exec` (src/bin/moat-seccomp-exec.rs), the seccomp trampoline inside a
    /// gVisor sandbox (`gvisor::seccomp_exec`): execs the container's process on success,
    /// else returns the status.
    pub fn gvisor_seccomp_exec() -> i32 {
        crate::gvisor::seccomp_exec::main(&crate::linux::sys::args())
    }

    /// `moat-dns` (src/bin/moat-dns.rs): the per-container DNS forwarder of egress names.
    pub fn dns_forwarder() -> i32 {
        crate::linux::egress::forwarder::main()
    }
}
