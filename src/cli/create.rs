//! `moat create`: set up a container and leave its init waiting for `start`.

use std::path::PathBuf;

use anyhow::Context;

use super::{Global, Result};
use crate::linux::{exeseal, process, sys};
use crate::spec::Spec;
use crate::state::ContainerDir;

#[derive(clap::Args, Debug, Clone)]
#[group(id = "create_args")]
pub struct Args {
    /// Path to the bundle (the directory holding config.json)
    #[arg(short = 'b', long, default_value = ".")]
    pub bundle: PathBuf,
    /// Unix socket to send the pty master to when process.terminal is true
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
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

/// Shared by create and run: everything up to a created container.
pub fn create(g: &Global, a: &Args, foreground: bool) -> Result<(ContainerDir, process::Created)> {
    // fds the caller leaked must not reach the container (CVE-2024-21626); the preserved
    // range and socket-activation fds are the exception.
    let listen: u32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    sys::close_range_from(3 + a.preserve_fds + listen, true).context("close_range")?;
    exeseal::ensure().context("protect the moat binary")?;
    let cwd = std::env::current_dir().context("getcwd")?;
    let bundle = if a.bundle.is_absolute() {
        a.bundle.clone()
    } else {
        cwd.join(&a.bundle)
    };
    let pid_file = a.pid_file.as_ref().map(|p| {
        if p.is_absolute() {
            p.clone()
        } else {
            cwd.join(p)
        }
    });
    let spec = Spec::load(&bundle)?;
    let dir = ContainerDir::create(&g.state_root(), &a.id)?;
    let opts = process::CreateOpts {
        id: a.id.clone(),
        bundle,
        console_socket: a.console_socket.clone(),
        pid_file,
        no_pivot: a.no_pivot,
        new_keyring: !a.no_new_keyring,
        preserve_fds: a.preserve_fds,
        systemd_cgroup: g.systemd_cgroup,
        foreground,
    };
    match process::create(&spec, &opts, &dir) {
        Ok(c) => Ok((dir, c)),
        Err(e) => {
            let _ = dir.remove();
            Err(e.into())
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    if let Some(sel) = crate::gvisor::select(&a.bundle)? {
        return crate::gvisor::create(g, &a, sel);
    }
    create(g, &a, false)?;
    Ok(0)
}
