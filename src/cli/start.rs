//! `moat start`: release a created container's init.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::linux::{create, hooks, notify};
use crate::log;
use crate::state::{self, ContainerDir, Record, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    pub id: String,
}

/// Writes the exec fifo (the init is blocked reading it), removes it, runs poststart hooks.
pub fn start(dir: &ContainerDir, rec: &Record) -> Result<()> {
    match rec.status(dir) {
        Status::Created => {}
        Status::Stopped => bail!("cannot start a container that has stopped"),
        Status::Running | Status::Paused => bail!("cannot start an already running container"),
        Status::Creating => bail!("cannot start a container that is still being created"),
    }
    // The init holds the container's socket until it execs: take a copy first.
    let notify = match &rec.notify_socket {
        Some(_) => Some(
            notify::take(dir, rec.pid)
                .context("NOTIFY_SOCKET: take the container's socket from its init")?,
        ),
        None => None,
    };
    let fifo = dir.file(state::FIFO_FILE);
    let mut f = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo)
    {
        Ok(f) => f,
        // No reader: the init died between create and start.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            bail!("cannot start a container that has stopped")
        }
        Err(e) => return Err(e).with_context(|| format!("open {}", fifo.display())),
    };
    f.write_all(b"0")
        .with_context(|| format!("write {}", fifo.display()))?;
    std::fs::remove_file(&fifo).with_context(|| format!("remove {}", fifo.display()))?;
    // poststart hooks run once the process has started. The init holds the fifo's read
    // end (close-on-exec) through its startContainer hooks until it execs, so the last
    // reader going away (POLLERR on our write end) is that moment, or its death.
    wait_no_readers(&f).with_context(|| format!("wait for the exec of {}", rec.id))?;
    if let (Some(sock), Some(host)) = (&notify, &rec.notify_socket) {
        notify::relay(sock, host, rec.pid).context("NOTIFY_SOCKET: relay to the caller")?;
    }
    let spec = dir.load_spec()?;
    if let Some(h) = spec.hooks.as_ref().filter(|h| !h.poststart.is_empty()) {
        let st = create::state_json(rec, "running", rec.pid);
        // The process is already running: a failing poststart hook is reported, not fatal.
        if let Err(e) = hooks::run("poststart", &h.poststart, &st) {
            log::warn(&e.to_string());
        }
    }
    Ok(())
}

fn wait_no_readers(f: &std::fs::File) -> std::io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    loop {
        // No events asked: poll returns only for POLLERR (no reader left) or POLLHUP.
        let mut fds = [PollFd::new(f.as_fd(), PollFlags::empty())];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let dir = ContainerDir::open(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::start(&g.context()?, &rec, gv);
    }
    start(&dir, &rec)?;
    Ok(0)
}
