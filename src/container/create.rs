//! `create` and `run`: a container from a bundle.

use std::path::PathBuf;

/// runc's `create` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// The bundle directory (holding `config.json`), as given.
    pub bundle: PathBuf,
    /// Where the pty master goes when `process.terminal` is true.
    pub console_socket: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    /// `MS_MOVE` + chroot instead of `pivot_root`.
    pub no_pivot: bool,
    pub no_new_keyring: bool,
    /// Fds 3.. passed on to the init.
    pub preserve_fds: u32,
}

/// runc's `run` flags: a create, then start, then (in the foreground) wait and delete.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub create: Request,
    pub detach: bool,
    /// Leave the container after it exits.
    pub keep: bool,
}
