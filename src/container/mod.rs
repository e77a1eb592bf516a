//! The lifecycle layer: what each runc operation does to a container, for either backend.
//!
//! `src/cli/` only turns flags into the request structs defined here and resolves one
//! [`Context`]; each operation lives in one file of this module. A container's backend
//! (native, or gVisor's runsc) is chosen once, at create, and recorded in its state;
//! every later operation opens the container with [`Container::open`], which is the one
//! place that routes it to its backend.

// The skeleton of the lifecycle layer: the operations move in next (issue 13).
#![allow(dead_code)]

pub mod create;
pub mod exec;
pub mod startup;

use std::path::PathBuf;

use crate::state::{ContainerDir, Record, StateError};

/// The global flags of one moat call, resolved once: where the state lives, whether moat
/// is rootless, which cgroup driver the caller asked for, and where errors are logged
/// (replayed to runsc for a gVisor container).
#[derive(Debug, Clone)]
pub struct Context {
    /// The state root: `--root`, else `/run/moat` (rootless: `linux/rootless.rs`).
    pub root: PathBuf,
    /// `--rootless` resolved (`linux::rootless::detect`).
    pub rootless: bool,
    /// `--systemd-cgroup` as this call gave it.
    pub systemd_cgroup: bool,
    /// `--log`, `--log-format`, `--debug` of this call.
    pub log: Option<PathBuf>,
    pub log_format: String,
    pub debug: bool,
}

/// A container that exists: its locked (or read-only) state directory and its record.
pub struct Container {
    pub dir: ContainerDir,
    pub record: Record,
}

impl Container {
    /// Opens `id` under the context's root, holding the state lock (for operations that
    /// change the container).
    pub fn open(ctx: &Context, id: &str) -> Result<Container, StateError> {
        let dir = ContainerDir::open(&ctx.root, id)?;
        let record = dir.load()?;
        Ok(Container { dir, record })
    }

    /// Opens `id` without the lock (for operations that only read or only join).
    pub fn open_read(ctx: &Context, id: &str) -> Result<Container, StateError> {
        let dir = ContainerDir::open_read(&ctx.root, id)?;
        let record = dir.load()?;
        Ok(Container { dir, record })
    }
}

/// What create, run and exec do before anything forks into a container: the preserved
/// range (`socket_activation`: create and run put the honoured `LISTEN_FDS` first, as
/// runc does; exec never) must be fds the caller really passed (`startup.rs`); every
/// other fd the caller leaked must not reach the container (CVE-2024-21626); and the
/// moat binary must not be writable through `/proc/self/exe`. Returns the number of
/// socket-activation fds passed on.
pub fn before_fork(preserve_fds: u32, socket_activation: bool) -> anyhow::Result<u32> {
    use anyhow::Context;
    let listen = if socket_activation {
        startup::listen_fds()
    } else {
        0
    };
    startup::check_range(preserve_fds, listen)?;
    // Checked above: the sum fits below the first fd that was not open.
    let first = crate::linux::sys::FdNumber(3 + preserve_fds + listen);
    crate::linux::sys::close_range_from(first, true).context("close_range")?;
    crate::linux::exeseal::ensure(startup::listen_env()).context("protect the moat binary")?;
    Ok(listen)
}
