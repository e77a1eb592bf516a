//! `moat exec`: run a new process in a container, with runc's flags.

use std::path::PathBuf;

use super::{Global, Result};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Unix socket to send the pty master to (with --tty)
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// Working directory inside the container
    #[arg(long)]
    pub cwd: Option<String>,
    /// Set an environment variable (KEY=VALUE)
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// Allocate a pseudo-TTY
    #[arg(short = 't', long)]
    pub tty: bool,
    /// uid[:gid] to run as
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Additional gids
    #[arg(short = 'g', long = "additional-gids")]
    pub additional_gids: Vec<u32>,
    /// Path to a process.json; other process flags are then ignored
    #[arg(short = 'p', long)]
    pub process: Option<PathBuf>,
    /// Detach from the process
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// File to write the process pid to
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Unix socket to send a pidfd of the exec'd process to (SCM_RIGHTS), as runc 1.5
    #[arg(long = "pidfd-socket")]
    pub pidfd_socket: Option<PathBuf>,
    /// SELinux label for the process
    #[arg(long = "process-label")]
    pub process_label: Option<String>,
    /// AppArmor profile for the process
    #[arg(long)]
    pub apparmor: Option<String>,
    /// Set no_new_privs
    #[arg(long = "no-new-privs")]
    pub no_new_privs: bool,
    /// Add a capability (must be in the container's bounding set)
    #[arg(short = 'c', long = "cap")]
    pub cap: Vec<String>,
    /// Pass N additional fds (from 3 up)
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    /// Sub-cgroup of the container to run in: `[controller[,controller]:]path`, repeatable
    #[arg(long)]
    pub cgroup: Vec<String>,
    /// Allow exec into a paused container
    #[arg(long = "ignore-paused")]
    pub ignore_paused: bool,
    pub id: String,
    /// The command and its arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// runc's words and status for an exec that never ran: `exec failed: …`, exit 255 (the
/// exec'd process's own status is passed through once it runs).
pub fn run(g: &Global, a: Args) -> Result<i32> {
    g.context()
        .and_then(|ctx| crate::container::exec::exec(&ctx, &a.request()))
        .map_err(|e| e.context("exec failed").context(super::ExitWith(255)))
}

impl Args {
    /// The flags as the lifecycle layer takes them.
    pub fn request(&self) -> crate::container::exec::Request {
        crate::container::exec::Request {
            id: self.id.clone(),
            command: self.command.clone(),
            process: self.process.clone(),
            console_socket: self.console_socket.clone(),
            pidfd_socket: self.pidfd_socket.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            tty: self.tty,
            user: self.user.clone(),
            additional_gids: self.additional_gids.clone(),
            detach: self.detach,
            pid_file: self.pid_file.clone(),
            process_label: self.process_label.clone(),
            apparmor: self.apparmor.clone(),
            no_new_privs: self.no_new_privs,
            cap: self.cap.clone(),
            preserve_fds: self.preserve_fds,
            cgroup: self.cgroup.clone(),
            ignore_paused: self.ignore_paused,
        }
    }
}
