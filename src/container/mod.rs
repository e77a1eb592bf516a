//! The lifecycle layer: what each runc operation does to a container, for either backend.
//!
//! `src/cli/` only turns flags into the request structs defined here and resolves one
//! [`Context`]; each operation lives in one file of this module. A container's backend
//! (native, or gVisor's runsc) is chosen once, at create, and recorded in its state;
//! every later operation opens the container ([`Container::open`]) and runs on
//! [`Container::engine`]: [`engine`] holds the one match on the record's backend, and
//! the [`Engine`] trait has one method per operation, implemented by [`Native`] (bodies
//! in this module's files, `<op>::native`) and by the record's `Gvisor` (in
//! `src/gvisor/`). An operation's file checks its request first (a bad signal or format
//! fails before the state is opened), then opens and dispatches.

pub mod checkpoint;
pub mod create;
pub mod delete;
mod error;
pub mod events;
pub mod exec;
pub mod kill;
pub mod lookup;
pub mod pause;
pub mod policy;
pub mod ps;
pub mod start;
pub mod startup;
pub mod state;
pub mod update;
pub mod verify;

use std::path::PathBuf;

pub use error::Error;

use crate::spec::Resources;
use crate::state::{ContainerDir, Record, StateError, Status};

/// The result of an operation: the exit status moat ends with (`verify` exits 1 on a
/// mismatch), or the error it prints.
pub type Result<T> = anyhow::Result<T>;

/// The global flags of one moat call, resolved once: where the state lives, whether moat
/// is rootless, which cgroup driver the caller asked for, and where errors are logged
/// (replayed to runsc for a gVisor container).
#[derive(Debug, Clone)]
pub struct Context {
    /// The state root: `--root`, else `/run/moat` (rootless: `linux/rootless.rs`).
    pub root: PathBuf,
    /// Whether `root` came from `--root`.
    pub root_given: bool,
    /// `--rootless` as given; resolved on first use ([`Context::rootless`]).
    pub rootless_flag: crate::linux::rootless::Flag,
    rootless: std::cell::OnceCell<bool>,
    /// `--systemd-cgroup` as this call gave it.
    pub systemd_cgroup: bool,
    /// `--log`, `--log-format`, `--debug` of this call.
    pub log: Option<PathBuf>,
    pub log_format: String,
    pub debug: bool,
}

impl Context {
    /// A context for the global flags of this call (`rootless_flag` already checked).
    pub fn new(
        root: Option<PathBuf>,
        rootless_flag: crate::linux::rootless::Flag,
        systemd_cgroup: bool,
        log: Option<PathBuf>,
        log_format: String,
        debug: bool,
    ) -> std::io::Result<Context> {
        let ctx = Context {
            root: PathBuf::new(),
            root_given: root.is_some(),
            rootless_flag,
            rootless: std::cell::OnceCell::new(),
            systemd_cgroup,
            log,
            log_format,
            debug,
        };
        // Without `--root`, where the state lives depends on being rootless; with it (as
        // engines always call), a short command never needs to know.
        let root = match root {
            Some(r) => r,
            None if ctx.rootless() => crate::linux::rootless::state_root()?,
            None => PathBuf::from("/run/moat"),
        };
        Ok(Context { root, ..ctx })
    }

    /// `--rootless` resolved (`linux::rootless::Flag::resolve`), once, when first asked.
    pub fn rootless(&self) -> bool {
        *self.rootless.get_or_init(|| self.rootless_flag.resolve())
    }
}

/// A container that exists: its locked (or read-only) state directory and its record.
pub struct Container {
    pub dir: ContainerDir,
    pub record: Record,
}

impl Container {
    /// Opens `id` under the context's root, holding the state lock (for operations that
    /// change the container).
    pub fn open(ctx: &Context, id: &str) -> std::result::Result<Container, StateError> {
        let dir = ContainerDir::open(&ctx.root, id)?;
        let record = dir.load()?;
        Ok(Container { dir, record })
    }

    /// Opens `id` without the lock (for operations that only read or only join).
    pub fn open_read(ctx: &Context, id: &str) -> std::result::Result<Container, StateError> {
        let dir = ContainerDir::open_read(&ctx.root, id)?;
        let record = dir.load()?;
        Ok(Container { dir, record })
    }

    /// The engine that runs this container, as its record names it.
    pub fn engine(&self) -> &dyn Engine {
        engine(&self.record)
    }
}

/// The one place a container's backend is chosen for an operation: the record says which
/// engine runs it (chosen at create, `gvisor::select`), never a flag of this call.
pub fn engine(rec: &Record) -> &dyn Engine {
    match &rec.backend {
        crate::state::Backend::Native => &Native,
        crate::state::Backend::Gvisor(gv) => gv,
    }
}

/// What each operation does on one backend (the `i32` is the exit status: runsc's own,
/// passed through, for a gVisor container): moat's own (`Native`, whose bodies live in
/// this module's files, one per operation) or runsc's (`state::Gvisor`, implemented in
/// `src/gvisor/`). The caller opens the container; the operation's file checks the
/// request before it opens anything.
pub trait Engine {
    /// `start`: release the created init.
    fn start(&self, ctx: &Context, c: &Container) -> Result<i32>;
    /// `state`: print the OCI state JSON.
    fn state(&self, ctx: &Context, c: &Container) -> Result<i32>;
    /// The status and host pid of the init, for `list`.
    fn status(&self, ctx: &Context, c: &Container) -> Result<(Status, i32)>;
    /// `kill`: `sig` (already parsed) to the init, or to every process with `all`.
    fn kill(&self, ctx: &Context, c: &Container, all: bool, sig: i32) -> Result<i32>;
    fn pause(&self, ctx: &Context, c: &Container) -> Result<i32>;
    fn resume(&self, ctx: &Context, c: &Container) -> Result<i32>;
    fn ps(&self, ctx: &Context, c: &Container, req: &ps::Request) -> Result<i32>;
    fn events(&self, ctx: &Context, c: &Container, req: &events::Request) -> Result<i32>;
    /// `update`: the resources (devices already cleared) to the running container.
    fn update(&self, ctx: &Context, c: &Container, res: Resources) -> Result<i32>;
    /// `update --egress LIST`: the container's egress policy replaced.
    fn update_egress(&self, ctx: &Context, c: &Container, list: &str) -> Result<()>;
    /// `delete`: takes the directory, which is gone afterwards.
    fn delete(&self, ctx: &Context, dir: ContainerDir, rec: &Record, force: bool) -> Result<i32>;
    /// `verify`: what the kernel (or the sandbox) gave the container, check by check.
    fn verify(&self, ctx: &Context, c: &Container) -> Result<verify::Verdict>;
    /// `exec`: a new process in the container; its exit status (0 when detached). Takes
    /// the directory, which must not be open in anything that joins the container.
    fn exec(
        &self,
        ctx: &Context,
        dir: ContainerDir,
        rec: &Record,
        req: &exec::Request,
    ) -> Result<i32>;
}

/// moat's own engine: the container is a tree of host processes in moat's namespaces
/// and cgroup.
pub struct Native;

impl Engine for Native {
    fn start(&self, _: &Context, c: &Container) -> Result<i32> {
        start::native(&c.dir, &c.record).map(|()| 0)
    }
    fn state(&self, _: &Context, c: &Container) -> Result<i32> {
        state::native(c).map(|()| 0)
    }
    fn status(&self, _: &Context, c: &Container) -> Result<(Status, i32)> {
        Ok((c.record.status(&c.dir), c.record.pid))
    }
    fn kill(&self, _: &Context, c: &Container, all: bool, sig: i32) -> Result<i32> {
        kill::native(c, all, sig).map(|()| 0)
    }
    fn pause(&self, _: &Context, c: &Container) -> Result<i32> {
        pause::native_pause(c).map(|()| 0)
    }
    fn resume(&self, _: &Context, c: &Container) -> Result<i32> {
        pause::native_resume(c).map(|()| 0)
    }
    fn ps(&self, _: &Context, c: &Container, req: &ps::Request) -> Result<i32> {
        ps::native(c, req).map(|()| 0)
    }
    fn events(&self, _: &Context, c: &Container, req: &events::Request) -> Result<i32> {
        events::native(c, req).map(|()| 0)
    }
    fn update(&self, _: &Context, c: &Container, res: Resources) -> Result<i32> {
        update::native(c, &res).map(|()| 0)
    }
    fn update_egress(&self, _: &Context, c: &Container, list: &str) -> Result<()> {
        update::native_egress(c, list)
    }
    fn delete(&self, ctx: &Context, dir: ContainerDir, rec: &Record, force: bool) -> Result<i32> {
        delete::native(ctx, dir, rec, force).map(|()| 0)
    }
    fn verify(&self, _: &Context, c: &Container) -> Result<verify::Verdict> {
        verify::native(c)
    }
    fn exec(
        &self,
        _: &Context,
        dir: ContainerDir,
        rec: &Record,
        req: &exec::Request,
    ) -> Result<i32> {
        exec::native(dir, rec, req)
    }
}

/// What create, run and exec do before anything forks into a container, in two steps
/// around the reading of what the caller named by path. First [`before_fork`]: the
/// preserved range (`socket_activation`: create and run put the honoured `LISTEN_FDS`
/// first, as runc does; exec never) must be fds the caller really passed (`startup.rs`),
/// and the moat binary must not be writable through `/proc/self/exe` — which may
/// re-execute moat, so it comes while every fd the caller passed is still open: a file
/// named as one (`exec -p /dev/fd/63`, a shell's process substitution) reads the same in
/// the moat that goes on. Then the caller reads such files, and [`Inherited::sweep`]
/// marks every other fd the caller leaked close-on-exec, so none reaches the container
/// (CVE-2024-21626); nothing forks before it.
pub fn before_fork(preserve_fds: u32, socket_activation: bool) -> Result<Inherited> {
    use anyhow::Context;
    let listen = if socket_activation {
        startup::listen_fds()
    } else {
        0
    };
    startup::check_range(preserve_fds, listen)?;
    crate::linux::exeseal::ensure(startup::listen_env()).context("protect the moat binary")?;
    Ok(Inherited {
        preserve_fds,
        listen,
    })
}

/// The moat binary made unwritable through `/proc/self/exe` first thing in create, run and
/// exec, before the bundle or the record is read: when that re-executes moat, the moat
/// that goes on does the work once ([`before_fork`] finds the binary protected then).
/// Nothing the caller passed has been read or closed yet, so the re-executed moat sees
/// the same fds.
pub fn seal() -> Result<()> {
    use anyhow::Context;
    crate::linux::exeseal::ensure(startup::listen_env()).context("protect the moat binary")
}

/// The checked range of passed fds, until the rest is swept ([`before_fork`]).
#[must_use = "the fds the caller leaked reach the container unless swept"]
pub struct Inherited {
    preserve_fds: u32,
    listen: u32,
}

impl Inherited {
    /// Every fd the caller leaked above the passed range closed, so that not even the
    /// container's init holds one before its execve (runc's "detect fd leak" test reads
    /// a created init's fds), and every other one close-on-exec; returns the number of
    /// socket-activation fds passed on.
    pub fn sweep(self) -> Result<u32> {
        use anyhow::Context;
        // Checked by before_fork: the sum fits below the first fd that was not open.
        let first = 3 + self.preserve_fds + self.listen;
        crate::linux::sys::close_inherited_from(crate::linux::sys::FdNumber(first))
            .context("close the caller's other descriptors")?;
        crate::linux::sys::close_range_from(crate::linux::sys::FdNumber(first), true)
            .context("close_range")?;
        Ok(self.listen)
    }
}
