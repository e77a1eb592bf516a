//! `moat run`: create + start; in the foreground, wait, forward signals, exit with the
//! container's status (128+N for a signal), then delete unless `--keep`.

use std::os::fd::AsFd;

use anyhow::Context;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::{create, delete, start, Global, Result};
use crate::linux::sys;
use crate::state::{ContainerDir, StateError};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub create: create::Args,
    /// Detach from the container's process
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Do not delete the container after it exits
    #[arg(long)]
    pub keep: bool,
    /// Accepted for compatibility (moat never needs to be a subreaper in detached mode)
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    // Block forwarded signals before the container exists, so none is lost; the init
    // resets its mask before exec.
    let mut set = SigSet::all();
    for s in [
        Signal::SIGKILL,
        Signal::SIGSTOP,
        Signal::SIGSEGV,
        Signal::SIGBUS,
        Signal::SIGILL,
        Signal::SIGFPE,
    ] {
        set.remove(s);
    }
    if !a.detach {
        set.thread_block().context("block signals")?;
    }
    let (dir, created) = create::create(g, &a.create, !a.detach)?;
    let rec = created.record;
    if let Err(e) = start::start(&dir, &rec) {
        let _ = delete::force_delete(dir, &rec);
        return Err(e);
    }
    if a.detach {
        return Ok(0);
    }
    // The state lock is only for the create: held while the container runs, it would
    // block `kill`, `delete --force` (and anything else that locks) until it exits.
    let root = dir
        .path
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    drop(dir);
    let sfd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC).context("signalfd")?;
    let pidfd = created.pidfd.context("no pidfd for the init")?;
    let mut code = None;
    let status = loop {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = [
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e).context("poll"),
            Ok(_) => {}
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            if let Ok(Some(info)) = sfd.read_signal() {
                let sig = info.ssi_signo as i32;
                if sig != libc::SIGCHLD {
                    let _ = sys::pidfd_send_signal(pidfd.as_fd(), sig);
                }
            }
        }
        // Reap the init, and orphans reparented to us as subreaper.
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(p, c)) if p.as_raw() == rec.pid => code = Some(c),
                Ok(WaitStatus::Signaled(p, s, _)) if p.as_raw() == rec.pid => {
                    code = Some(128 + s as i32)
                }
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(_) => {}
            }
        }
        if let Some(c) = code {
            break c;
        }
    };
    if !a.keep {
        match ContainerDir::open(&root, &rec.id) {
            // Unless someone else deleted it meanwhile (and maybe reused the id).
            Ok(dir) => {
                if dir
                    .load()
                    .is_ok_and(|r| r.pid == rec.pid && r.pid_start == rec.pid_start)
                {
                    delete::force_delete(dir, &rec)?;
                }
            }
            Err(StateError::NotExist) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(status)
}
