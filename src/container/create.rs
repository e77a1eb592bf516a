//! `create` and `run`: a container from a bundle. The backend is chosen here, in one
//! place ([`backend`]): gVisor's runsc (`src/gvisor/`) or moat's own create sequence
//! (`linux/create/`: plan → parent → child).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::Context;
use crate::gvisor::Selection;
use crate::linux::create::{self as native, Created, Options, Plan};
use crate::linux::signal;
use crate::policy;
use crate::spec::Spec;
use crate::state::{self, ContainerDir, StateError};

/// runc's `create` flags.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// The bundle directory (holding `config.json`), as given.
    pub bundle: PathBuf,
    /// Where the pty master goes when `process.terminal` is true.
    pub console_socket: Option<PathBuf>,
    /// Where a pidfd of the init goes (runc 1.5's `--pidfd-socket`).
    pub pidfd_socket: Option<PathBuf>,
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

/// `moat create`: the container set up, its init waiting for `start`.
pub fn create(ctx: &Context, req: &Request) -> Result<i32> {
    super::seal()?;
    if let Some(sel) = backend(req)? {
        return crate::gvisor::create(ctx, req, sel);
    }
    create_native(ctx, req, false)?;
    Ok(0)
}

/// `moat run`: create + start; in the foreground, wait, forward signals, exit with the
/// container's status (128+N for a signal), then delete unless `--keep`.
pub fn run(ctx: &Context, req: &RunRequest) -> Result<i32> {
    super::seal()?;
    if let Some(sel) = backend(&req.create)? {
        return crate::gvisor::run(ctx, req, sel);
    }
    // Block forwarded signals before the container exists, so none is lost; the init
    // resets its mask before exec.
    let set = signal::forwarded_set();
    if !req.detach {
        set.thread_block().context("block signals")?;
    }
    let (dir, created) = create_native(ctx, &req.create, !req.detach)?;
    let rec = created.record;
    crate::linux::killpoint::at("run", "parent", "Created");
    if let Err(e) = super::start::native(&dir, &rec) {
        let _ = super::delete::force_delete(dir, &rec);
        super::delete::release_host_wide(ctx, &rec.id);
        return Err(e);
    }
    crate::linux::killpoint::at("run", "parent", "Started");
    if req.detach {
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
    let pidfd = created.pidfd.context("no pidfd for the init")?;
    let status = signal::forward_and_wait(rec.pid, &pidfd, &set, created.console.as_ref())?;
    crate::log::debug_with(|| {
        format!(
            "container {}: init {} exited, status {status}",
            rec.id, rec.pid
        )
    });
    crate::linux::killpoint::at("run", "parent", "Exited");
    if !req.keep {
        match ContainerDir::open(&root, &rec.id) {
            // Unless someone else deleted it meanwhile (and maybe reused the id).
            Ok(dir) => {
                if dir
                    .load()
                    .is_ok_and(|r| r.pid == rec.pid && r.pid_start == rec.pid_start)
                {
                    super::delete::force_delete(dir, &rec)?;
                    super::delete::release_host_wide(ctx, &rec.id);
                }
            }
            Err(StateError::NotExist) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(status)
}

/// The one place the backend is chosen: runsc when the bundle or the operator asks for
/// gVisor, else moat's own. The id is checked first, before the bundle is read or any
/// profile loaded, for both backends.
fn backend(req: &Request) -> Result<Option<Selection>> {
    state::validate_id(&req.id)?;
    crate::gvisor::select(&req.bundle)
}

/// The native create: what the caller passed checked, the plan made (row 1 of the create
/// table, before anything exists), then the parent's rows.
fn create_native(
    ctx: &Context,
    req: &Request,
    foreground: bool,
) -> Result<(ContainerDir, Created)> {
    let listen_fds = super::before_fork(req.preserve_fds, true)?.sweep()?;
    crate::linux::killpoint::mark("create", "parent", "Plan");
    let cwd = std::env::current_dir().context("getcwd")?;
    let bundle = bundle_path(&cwd, &req.bundle);
    let mut spec = Spec::load(&bundle)?;
    let cfg = policy::Config::load()?;
    let decided = super::policy::decide(&mut spec, &cfg, &req.id, ctx.systemd_cgroup)?;
    let opts = Options {
        id: req.id.clone(),
        bundle,
        console_socket: req.console_socket.clone(),
        pidfd_socket: req.pidfd_socket.clone(),
        pid_file: req.pid_file.as_ref().map(|p| cwd.join(p)),
        no_pivot: req.no_pivot,
        new_keyring: !req.no_new_keyring,
        preserve_fds: req.preserve_fds,
        listen_fds,
        systemd_cgroup: ctx.systemd_cgroup,
        foreground,
        rootless: ctx.rootless(),
        root: ctx.root.clone(),
        notify_socket: std::env::var("NOTIFY_SOCKET")
            .ok()
            .filter(|s| !s.is_empty()),
    };
    let plan = Plan::new(spec, &cfg, decided, opts)?;
    let cut = plan.cut.clone();
    crate::log::debug_with(|| format!("container {}: planned", req.id));
    let (dir, created) = native::create(plan).map_err(|e| name_the_cut(e, cut.clone()))?;
    if let Some(line) = &cut {
        crate::log::warn_policy(line, cfg.warn_stderr, true);
    }
    crate::log::debug_with(|| {
        let r = &created.record;
        format!(
            "container {}: created, init {} (policy {})",
            r.id, r.pid, r.policy
        )
    });
    Ok((dir, created))
}

/// A create the kernel refused with EPERM/EACCES, or that failed dropping capabilities or
/// loading a filter, in a container whose spec the policy changed: the error line (the one
/// the engine shows) ends with the policy's summary, so a cut capability or a profile that
/// denies what the image needs is named where the failure is read.
fn name_the_cut(e: native::Error, cut: Option<String>) -> anyhow::Error {
    use crate::linux::sync::Step;
    let refused = match &e {
        native::Error::Init(f) => {
            matches!(f.errno, libc::EPERM | libc::EACCES)
                || matches!(f.step, Step::Capabilities | Step::Seccomp)
        }
        _ => false,
    };
    match cut {
        Some(cut) if refused => {
            let e = anyhow::Error::from(e);
            let msg = crate::error_text::one_line(e.chain());
            anyhow::anyhow!("{msg}; {cut}")
        }
        _ => e.into(),
    }
}

/// Absolute and lexically clean, like runc's filepath.Abs: `state` shows it.
pub fn bundle_path(cwd: &Path, bundle: &Path) -> PathBuf {
    cwd.join(bundle)
        .components()
        .fold(PathBuf::new(), |mut p, c| {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    p.pop();
                }
                c => p.push(c),
            }
            p
        })
}
