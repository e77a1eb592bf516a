//! `moat create`: set up a container and leave its init waiting for `start`.

use std::path::PathBuf;

use anyhow::Context;

use super::{Global, Result};
use crate::linux::{apparmor, notify, process};
use crate::policy;
use crate::spec::Spec;
use crate::state::{self, idpool, ContainerDir};

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
    let listen_fds = crate::container::before_fork(a.preserve_fds, true)?;
    let cwd = std::env::current_dir().context("getcwd")?;
    // Absolute and lexically clean, like runc's filepath.Abs: `state` shows it.
    let bundle: std::path::PathBuf =
        cwd.join(&a.bundle)
            .components()
            .fold(std::path::PathBuf::new(), |mut p, c| {
                match c {
                    std::path::Component::CurDir => {}
                    std::path::Component::ParentDir => {
                        p.pop();
                    }
                    c => p.push(c),
                }
                p
            });
    let pid_file = a.pid_file.as_ref().map(|p| {
        if p.is_absolute() {
            p.clone()
        } else {
            cwd.join(p)
        }
    });
    let mut spec = Spec::load(&bundle)?;
    let cfg = policy::Config::load()?;
    // Host facts probed before anything is forked (`container::policy::decide`).
    let crate::container::policy::Decided {
        decision,
        host,
        floor: facts,
    } = crate::container::policy::decide(&mut spec, &cfg, &a.id)?;
    decision.warn_ignored();
    if host.apparmor
        && spec.process().apparmor_profile.as_deref() == Some(policy::APPARMOR_PROFILE_NAME)
    {
        apparmor::ensure_loaded(
            policy::APPARMOR_PROFILE_NAME,
            policy::APPARMOR_PROFILE,
            &host,
        )
        .context("load moat's AppArmor profile")?;
    }
    let rootless = g.rootless()?;
    let dir = ContainerDir::create(&g.state_root()?, &a.id)?;
    let notify_socket = std::env::var("NOTIFY_SOCKET")
        .ok()
        .filter(|s| !s.is_empty());
    // Open until the init has inherited it (see linux/notify.rs).
    let notify_sock = match notify_socket
        .as_ref()
        .map(|_| notify::prepare(&mut spec, &dir, a.preserve_fds.saturating_add(3)))
        .transpose()
    {
        Ok(s) => s,
        Err(e) => {
            let _ = dir.remove();
            return Err(
                anyhow::Error::from(e).context("NOTIFY_SOCKET: prepare the container's socket")
            );
        }
    };
    let userns_range = match userns_allocate(g, a, &cfg, &decision, &dir, &mut spec) {
        Ok(r) => r,
        Err(e) => {
            let _ = dir.remove();
            return Err(e);
        }
    };
    let opts = process::CreateOpts {
        id: a.id.clone(),
        bundle,
        console_socket: a.console_socket.clone(),
        pid_file,
        no_pivot: a.no_pivot,
        new_keyring: !a.no_new_keyring,
        preserve_fds: a.preserve_fds,
        listen_fds,
        systemd_cgroup: g.systemd_cgroup,
        foreground,
        seccomp_floor: decision.seccomp_floor,
        seccomp_cache: Some(g.state_root()?.join("@cache").join("seccomp")),
        loopback_up: decision.network_none,
        policy: decision.policy,
        notify_socket,
        // A fleet budget is a host-wide cgroup: never a rootless caller's.
        fleet: policy::fleet_budget(&cfg).filter(|_| !rootless),
        idmap_rootfs: userns_range.is_some(),
        rootless,
        host_ns_refused: policy::refused_host_namespaces(&decision, &cfg, &facts),
        host,
    };
    let created = process::create(&spec, &opts, &dir);
    drop(notify_sock);
    let created = created.and_then(|c| {
        dir.save_file(
            state::POLICY_FILE,
            &serde_json::to_vec_pretty(&decision).expect("serialises"),
        )?;
        Ok(c)
    });
    match created {
        Ok(c) => Ok((dir, c)),
        Err(e) => {
            let _ = dir.remove();
            if userns_range.is_some() {
                userns_release(g, &a.id);
            }
            Err(e.into())
        }
    }
}

/// `moat.userns=auto`: a free range from the host-wide pool becomes the container's id
/// mapping (container 0.. → the range), recorded in the state directory.
fn userns_allocate(
    g: &Global,
    a: &Args,
    cfg: &policy::Config,
    decision: &policy::Decision,
    dir: &ContainerDir,
    spec: &mut Spec,
) -> Result<Option<idpool::IdRange>> {
    if !decision.userns_pool {
        return Ok(None);
    }
    if g.rootless()? {
        anyhow::bail!(
            "moat.userns=auto: needs a rootful moat (host ids are allocated from the \
             host-wide pool); a rootless container is already in its user's namespace"
        );
    }
    let root = pool_root(g);
    let (start, size) = cfg.userns_pool;
    let r = idpool::Pool::default()
        .allocate(
            idpool::IdRange { start, size },
            cfg.userns_size,
            &root,
            &a.id,
        )
        .context("moat.userns=auto: allocate host ids")?;
    let saved = dir.save_file(
        state::USERNS_FILE,
        &serde_json::to_vec(&r).expect("serialises"),
    );
    if let Err(e) = saved {
        userns_release(g, &a.id);
        return Err(e.into());
    }
    let map = vec![crate::spec::IdMapping {
        container_id: 0,
        host_id: r.start,
        size: r.size,
    }];
    let linux = spec.linux.get_or_insert_with(Default::default);
    linux.uid_mappings = map.clone();
    linux.gid_mappings = map;
    Ok(Some(r))
}

/// The state root as the pool records it: absolute, so any caller can tell whether the
/// container still exists.
fn pool_root(g: &Global) -> PathBuf {
    // Only rootful moat allocates from the pool, and its state root cannot fail.
    let root = g
        .state_root()
        .unwrap_or_else(|_| PathBuf::from("/run/moat"));
    std::fs::canonicalize(&root).unwrap_or(root)
}

/// Gives back whatever range the container holds in the pool (a missing pool is fine).
pub fn userns_release(g: &Global, id: &str) {
    // A rootless moat never allocates, and may not even open the host-wide pool.
    if g.rootless().unwrap_or(false) {
        return;
    }
    if let Err(e) = idpool::Pool::default().release(&pool_root(g), id) {
        crate::log::warn(&format!("release userns range of {id}: {e}"));
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    // Before the bundle is read or any profile loaded, for both backends.
    state::validate_id(&a.id)?;
    if let Some(sel) = crate::gvisor::select(&a.bundle)? {
        return crate::gvisor::create(&g.context()?, &a.request(), sel);
    }
    create(g, &a, false)?;
    Ok(0)
}

impl Args {
    /// The flags as the lifecycle layer takes them.
    pub fn request(&self) -> crate::container::create::Request {
        crate::container::create::Request {
            id: self.id.clone(),
            bundle: self.bundle.clone(),
            console_socket: self.console_socket.clone(),
            pid_file: self.pid_file.clone(),
            no_pivot: self.no_pivot,
            no_new_keyring: self.no_new_keyring,
            preserve_fds: self.preserve_fds,
        }
    }
}
