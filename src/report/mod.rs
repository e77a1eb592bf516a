//! What moat says about itself, a bundle and the host, without touching a container:
//! `features` (the OCI features structure), `check` (the host's facts and what each moat
//! control does here) and `policy explain` (what the policy would change in a bundle).
//! Apart from the lifecycle layer (`src/container/`) because they ask both backends
//! (`src/gvisor/` included) and belong to neither.

pub mod check;
mod doctor;
pub mod explain;
pub mod features;

/// Like the rest of the CLI's work: the exit status, or the error printed.
pub type Result<T> = anyhow::Result<T>;
