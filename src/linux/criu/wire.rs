//! What moat asks its CRIU helper, `moat-criu` (src/bin/moat-criu.rs), and what it answers:
//! one JSON [`Request`] on the helper's stdin, one JSON [`Reply`] on its stdout. Shared by
//! both binaries (the helper includes this file), so the two cannot disagree.

use serde::{Deserialize, Serialize};

/// One conversation with `criu swrk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// CRIU's version (the `VERSION` request): answers [`Answer::Version`].
    Version {
        /// The `criu` to run: `--criu`, else `criu` looked up on `PATH` (as runc).
        criu: String,
    },
}

/// What a [`Request`] got done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// `major.minor.sublevel` (a git build's id after a `-`).
    Version(String),
}

/// The answer, or the error: one line.
pub type Reply = Result<Answer, String>;
