//! `linux.seccomp` → a classic BPF program (compiled by libseccomp in the parent, before
//! clone) → installed by the container init with seccomp(2).

use std::os::fd::OwnedFd;

use crate::spec;

/// A compiled filter, ready to be installed in the child without further allocation.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The BPF program as exported by libseccomp.
    pub prog: Vec<libc::sock_filter>,
    /// seccomp(2) `SECCOMP_FILTER_FLAG_*` bits (TSYNC, LOG, SPEC_ALLOW, NEW_LISTENER).
    pub flags: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("linux.seccomp{field}: {reason}")]
pub struct SeccompError {
    /// JSON path below `linux.seccomp`, e.g. `.syscalls[3].action`.
    pub field: String,
    pub reason: String,
}

/// Compiles `linux.seccomp`. Syscall names unknown on this architecture are skipped with
/// a warning; unknown actions, operators, architectures or flags are errors naming the field.
pub fn compile(_seccomp: &spec::Seccomp) -> Result<Filter, SeccompError> {
    Err(SeccompError {
        field: String::new(),
        reason: "seccomp support is not built yet".into(),
    })
}

/// Installs the filter in the calling thread; returns the listener fd when the filter has
/// `SCMP_ACT_NOTIFY` rules.
pub fn install(filter: &Filter) -> std::io::Result<Option<OwnedFd>> {
    crate::linux::sys::seccomp_set_filter(filter.flags, &filter.prog)
}
