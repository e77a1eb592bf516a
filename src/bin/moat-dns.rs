//! moat-dns: the per-container DNS forwarder of egress names, a program of its own
//! (`src/linux/egress/forwarder.rs`; docs/security.md, "Egress: names").
//!
//! `moat create` runs it, from the directory of moat's own binary, for a container whose
//! egress list has names. A program of its own rather than moat re-executed: moat runs
//! from a sealed copy of itself whose pages no two processes share, while this small
//! binary's pages are shared by every container's forwarder, and the DNS code stays out
//! of the binary every other container starts.
#![deny(unsafe_code)]

/// The same allocator as moat (src/alloc.rs): small and fast for a long-lived process
/// with a tiny heap.
#[cfg(target_env = "musl")]
#[path = "../alloc.rs"]
mod alloc;

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: alloc::Alloc = alloc::Alloc::new();

fn main() {
    std::process::exit(moat::entry::dns_forwarder())
}
