//! `moat create`: set up a container and leave its init waiting for `start`
//! (`container/create.rs`).

use std::path::PathBuf;

use super::{Global, Result};

#[derive(clap::Args, Debug, Clone)]
#[group(id = "create_args")]
pub struct Args {
    /// Path to the bundle (the directory holding config.json)
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    /// Unix socket to send the pty master to when process.terminal is true
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// Unix socket to send a pidfd of the container's init to (SCM_RIGHTS), as runc 1.5
    #[arg(long = "pidfd-socket")]
    pub pidfd_socket: Option<PathBuf>,
    /// File to write the container init's pid to
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Use MS_MOVE and chroot instead of pivot_root (for initramfs hosts)
    #[arg(long = "no-pivot")]
    pub no_pivot: bool,
    /// Do not create a new session keyring for the container
    #[arg(long = "no-new-keyring")]
    pub no_new_keyring: bool,
    /// Pass N additional fds (from 3 up) to the container
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    pub id: String,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let ctx = g.context()?;
    crate::container::create::create(&ctx, &a.request())
}

impl Args {
    /// The flags as the lifecycle layer takes them.
    pub fn request(&self) -> crate::container::create::Request {
        crate::container::create::Request {
            id: self.id.clone(),
            bundle: self.bundle.clone(),
            console_socket: self.console_socket.clone(),
            pidfd_socket: self.pidfd_socket.clone(),
            pid_file: self.pid_file.clone(),
            no_pivot: self.no_pivot,
            no_new_keyring: self.no_new_keyring,
            preserve_fds: self.preserve_fds,
        }
    }
}
