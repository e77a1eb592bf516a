//! The create sequence. Parent and child each read top to bottom.
//!
//! | # | parent (`moat create`)                                   | child (container init)                         |
//! |---|----------------------------------------------------------|------------------------------------------------|
//! | 1 | [`Plan::new`]: every spec field parsed and checked; seccomp compiled; namespace paths opened | —                  |
//! | 2 | cgroup created, `linux.resources` applied; preliminary state written | —                                  |
//! | 3 | exec fifo, sync socketpair, console socket connected     | —                                              |
//! | 4 | `clone3` (direct) or fork of an intermediate (staged), into the v2 cgroup | joins the v1 cgroups itself ([`Placement`]); non-dumpable (unprivileged parent: once its id maps are written); waits for `Go` |
//! | 5 | rlimits, oom_score_adj, id maps; `Go`; idmapped mounts by fd once maps are written ([`send_idmapped`]) | joins / unshares namespaces (staged: forks init); receives mount fds |
//! | 6 | —                                                        | cgroup ns, hostname, rootfs + mounts + devices + console |
//! | 7 | prestart + createRuntime hooks on `HooksPlease`          | createContainer hooks, pivot_root              |
//! | 8 | —                                                        | sysctl (moat's procfs), read-only then masked paths (by held mount fds), ro root, AppArmor/SELinux, personality, scheduler, ioprio |
//! | 9 | —                                                        | NNP; seccomp (early without NNP); groups, gid, uid; capabilities; umask; cwd (verified inside the root); seccomp (late with NNP); executable looked up |
//! |10 | on `Ready`: state.json, `--pid-file`, seccomp listener; `Created` | blocks reading exec.fifo                |
//! |11 | (`moat start` writes the fifo)                           | startContainer hooks, fd sweep, execve         |
//!
//! The child only issues syscalls on data the parent prepared: a bad spec fails in step 1,
//! before anything exists. Every wait in the child is a read on the sync socket, so if the
//! parent dies the child sees EOF and exits.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use super::attrs::Attrs;
use super::cgroups::{Cgroup, Placement};
use super::namespaces::{self, Plan as NsPlan};
use super::rootfs;
use super::rootless;
use super::seccomp;
use super::sync::{self, Channel, InitFailure, Step, StepExt, ToChild, ToParent};
use super::{console, devices, hooks, idmap, procfs, sys};
use crate::spec::{Device, Spec};
use crate::state::{self, ContainerDir, Record};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Spec(String),
    #[error(transparent)]
    Cgroup(#[from] super::cgroups::CgroupError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    Hook(#[from] hooks::HookError),
    #[error(transparent)]
    Init(#[from] InitFailure),
    #[error(transparent)]
    State(#[from] state::StateError),
    /// The source is printed by the error chain (`cli::run` joins it), not here again.
    #[error("{what}")]
    Io { what: String, source: io::Error },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

pub struct CreateOpts {
    pub id: String,
    pub bundle: PathBuf,
    pub console_socket: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    pub no_pivot: bool,
    pub new_keyring: bool,
    pub preserve_fds: u32,
    /// Socket-activation fds passed on ahead of the preserved ones (`container/startup.rs`).
    pub listen_fds: u32,
    pub systemd_cgroup: bool,
    /// Foreground `run`: the caller waits for the init, so it must be its parent.
    pub foreground: bool,
    /// Set by the policy: stack moat's deny floor on the spec's own seccomp profile.
    pub seccomp_floor: bool,
    /// Where compiled seccomp programs are cached (under the state root).
    pub seccomp_cache: Option<PathBuf>,
    /// Set by the policy (`moat.network=none`): bring `lo` up in the new netns.
    pub loopback_up: bool,
    pub policy: &'static str,
    /// The caller's sd_notify socket (see `linux/notify.rs`).
    pub notify_socket: Option<String>,
    /// The fleet budget: the parent cgroup and its limits, ensured before the container's.
    pub fleet: Option<(String, crate::spec::Resources)>,
    /// `moat.userns=auto`: the rootfs is shown to the container through an idmapped mount.
    pub idmap_rootfs: bool,
    /// `--rootless` resolved: no real root (see `linux/rootless.rs`).
    pub rootless: bool,
    /// RESTRICTED: the host namespaces no joined fd may be (`policy::refused_host_namespaces`).
    pub host_ns_refused: Vec<(&'static str, crate::policy::NsId)>,
    /// The host's LSMs, probed on the host before the policy ran; the child sets its
    /// labels from these, never from its own view of `/sys`.
    pub host: super::hostfacts::HostFacts,
}

/// Everything the child needs, computed before clone.
struct Plan {
    ns: NsPlan,
    rootfs: rootfs::Plan,
    devices: Vec<Device>,
    userns: bool,
    attrs: Attrs,
    hostname: Option<String>,
    domainname: Option<String>,
    sysctl: Vec<(String, String)>,
    /// Sysctls of a namespace joined by path while the container gets a new user
    /// namespace: written by the intermediate right after the join, while it is still
    /// privileged over that namespace (container root never is).
    sysctl_joined: Vec<(String, String)>,
    personality: Option<libc::c_ulong>,
    hooks: Option<crate::spec::Hooks>,
    new_keyring: Option<CString>,
    loopback_up: bool,
    /// An unprivileged parent writes the child's id maps, which needs the child's
    /// `/proc/<pid>` to be its own: the child stays dumpable until they are written.
    dumpable_until_mapped: bool,
}

fn spec_err(field: &str, reason: impl std::fmt::Display) -> Error {
    Error::Spec(format!("{field}: {reason}"))
}

impl Plan {
    fn new(spec: &Spec, opts: &CreateOpts, cgroup: &Cgroup) -> Result<Plan, Error> {
        let Some(p) = spec.process.as_ref() else {
            return Err(spec_err(
                "process",
                "missing: create needs a process to run",
            ));
        };
        if p.args.is_empty() {
            return Err(spec_err("process.args", "must name the program to run"));
        }
        if p.terminal && opts.console_socket.is_none() && !opts.foreground {
            return Err(spec_err(
                "process.terminal",
                "a terminal was requested but no --console-socket was given to send it to",
            ));
        }
        let ns = NsPlan::from_spec(spec).map_err(|e| spec_err(&e.field, e.reason))?;
        ns.refuse_host(&opts.host_ns_refused)
            .map_err(|e| spec_err(&e.field, e.reason))?;
        let linux = spec.linux();
        if (spec.hostname.as_deref().is_some_and(|h| !h.is_empty()) || spec.domainname.is_some())
            && !ns.has_new(libc::CLONE_NEWUTS)
            && !ns.joins.iter().any(|j| j.flag == libc::CLONE_NEWUTS)
        {
            return Err(spec_err(
                "hostname",
                "setting a hostname needs a private uts namespace",
            ));
        }
        let (mut sysctl, mut sysctl_joined) = (Vec::new(), Vec::new());
        for (k, v) in &linux.sysctl {
            let owner = namespaces::sysctl_namespace(k);
            let private =
                owner.is_some_and(|f| ns.has_new(f) || ns.joins.iter().any(|j| j.flag == f));
            if !private {
                return Err(spec_err(
                    &format!("linux.sysctl.{k}"),
                    "refused: it would change the host (the namespace it belongs to is not the container's own)",
                ));
            }
            if k.contains('/') || k.contains("..") {
                return Err(spec_err(&format!("linux.sysctl.{k}"), "invalid key"));
            }
            // Joined, and container root will not be privileged over it.
            let early = owner.is_some_and(|f| !ns.has_new(f)) && ns.has_new(libc::CLONE_NEWUSER);
            let list = if early {
                &mut sysctl_joined
            } else {
                &mut sysctl
            };
            list.push((k.replace('.', "/"), v.clone()));
        }
        let cache = opts.seccomp_cache.as_deref();
        let mut seccomp: Vec<_> = linux
            .seccomp
            .iter()
            .map(|s| seccomp::compile_cached(s, cache))
            .collect::<Result<_, _>>()?;
        if opts.seccomp_floor {
            seccomp.push(seccomp::floor(crate::policy::FLOOR_PROFILE, cache)?);
        }
        let mut attrs = Attrs::from_process(p, "process", seccomp, opts.preserve_fds)
            .map_err(|e| spec_err(&e.field, e.reason))?
            .on_host(&opts.host);
        attrs.pass_listen_fds(opts.listen_fds);
        if opts.rootless {
            rootless_checks(spec, &ns)?;
        }
        // mknod needs the initial user namespace: in any other, device nodes are bound.
        let userns = ns.has_new(libc::CLONE_NEWUSER) || ns.user_join.is_some() || opts.rootless;
        let cgroup_mounts = cgroup.mount_sources();
        let rootfs = rootfs::plan(
            spec,
            &opts.bundle,
            opts.no_pivot,
            cgroup_mounts,
            ns.has_new(libc::CLONE_NEWCGROUP),
        )
        .map_err(|e| spec_err(&e.field, e.reason))?;
        let mut rootfs = rootfs;
        rootfs.strict_missing = opts.policy == "restricted";
        if opts.idmap_rootfs {
            rootfs.idmap_root = idmap_root(spec)?;
        }
        let mut devs = if rootfs.default_devices {
            devices::defaults()
        } else {
            Vec::new()
        };
        devs.extend(linux.devices.iter().cloned());
        let personality = match &linux.personality {
            None => None,
            Some(pers) => Some(match pers.domain.as_str() {
                "LINUX" => 0,
                "LINUX32" => 0x0008,
                other => {
                    return Err(spec_err(
                        "linux.personality.domain",
                        format!("unknown domain {other:?}"),
                    ))
                }
            }),
        };
        let dumpable_until_mapped =
            opts.rootless && sys::geteuid() != 0 && ns.has_new(libc::CLONE_NEWUSER);
        Ok(Plan {
            ns,
            rootfs,
            devices: devs,
            userns,
            attrs,
            hostname: spec.hostname.clone().filter(|h| !h.is_empty()),
            domainname: spec.domainname.clone(),
            sysctl_joined,
            sysctl,
            personality,
            hooks: spec.hooks.clone(),
            loopback_up: opts.loopback_up,
            dumpable_until_mapped,
            new_keyring: opts
                .new_keyring
                .then(|| CString::new(opts.id.as_str()).unwrap_or_default()),
        })
    }
}

/// `moat.userns=auto`: the host id container root maps to (the rootfs is idmapped to it).
fn idmap_root(spec: &Spec) -> Result<Option<u32>, Error> {
    let find = |m: &[crate::spec::IdMapping]| {
        m.iter()
            .find(|m| m.container_id == 0 && m.size > 0)
            .map(|m| m.host_id)
    };
    let l = spec.linux();
    match (find(&l.uid_mappings), find(&l.gid_mappings)) {
        (Some(u), Some(g)) if u == g => Ok(Some(u)),
        _ => Err(spec_err(
            "linux.uidMappings",
            "an idmapped rootfs needs container 0 mapped to the same host uid and gid",
        )),
    }
}

/// Whether the idmapped mounts go to the child only once it has unshared its user
/// namespace (staged create), rather than right after `Go`.
fn idmapped_late(plan: &Plan) -> bool {
    plan.ns.staged && plan.ns.has_new(libc::CLONE_NEWUSER)
}

/// Parent: builds the idmapped rootfs and bind mounts (`linux/idmap.rs`) once the
/// container's user namespace is mapped, and sends them to the child.
fn send_idmapped(plan: &Plan, ch: &Channel, userns_pid: Option<i32>) -> Result<(), Error> {
    if plan.rootfs.idmapped_count() == 0 {
        return Ok(());
    }
    let container = match (userns_pid, &plan.ns.user_join) {
        (Some(pid), _) => {
            Some(idmap::userns_of(pid).map_err(io_err("open the container's user namespace"))?)
        }
        (None, Some(j)) => Some(
            sys::dup_cloexec(j.fd.as_fd())
                .map_err(io_err(format!("{}: duplicate the namespace fd", j.path)))?,
        ),
        (None, None) => None,
    };
    let failed = |e: idmap::IdmapError| Error::Io {
        what: e.what,
        source: e.source,
    };
    if let Some(host) = plan.rootfs.idmap_root {
        let ns = container.as_ref().ok_or_else(|| {
            spec_err(
                "linux.namespaces",
                "an idmapped rootfs needs a user namespace",
            )
        })?;
        let fd = idmap::rootfs(&plan.rootfs.rootfs, ns.as_fd(), host).map_err(failed)?;
        ch.send_mount(idmap::ROOTFS, fd.as_fd())
            .map_err(io_err("sync: send the idmapped rootfs"))?;
    }
    for m in &plan.rootfs.mounts {
        let rootfs::Kind::Bind { source, .. } = &m.kind else {
            continue;
        };
        if !plan.rootfs.parent_built(m) {
            continue;
        }
        if let Some(im) = &m.idmap {
            let fd = idmap::bind(source, &m.opts, im, container.as_ref().map(|f| f.as_fd()))
                .map_err(|e| Error::Io {
                    what: format!("mounts[{}].uidMappings: {}", m.index, e.what),
                    source: e.source,
                })?;
            ch.send_mount(m.index as u32, fd.as_fd())
                .map_err(io_err("sync: send an idmapped mount"))?;
        } else {
            let fd = super::mount::clone_tree(
                super::path::cwd(),
                source.to_str().unwrap_or_default(),
                m.opts.recursive,
            )
            .map_err(io_err(format!(
                "mounts[{}]: clone {}",
                m.index,
                source.display()
            )))?;
            ch.send_mount(m.index as u32, fd.as_fd())
                .map_err(io_err("sync: send a bind mount"))?;
        }
    }
    Ok(())
}

/// Child: the idmapped mounts from [`send_idmapped`].
fn recv_idmapped(plan: &Plan, ch: &Channel) -> Result<Vec<(u32, OwnedFd)>, InitFailure> {
    (0..plan.rootfs.idmapped_count())
        .map(|_| {
            ch.recv_mount()
                .step(Step::Mounts, || "receive an idmapped mount".into())
        })
        .collect()
}

/// The result of a successful create.
pub struct Created {
    pub record: Record,
    /// Set for a foreground run: the init is our child (or reparented to us).
    pub pidfd: Option<OwnedFd>,
    /// Foreground run with a terminal and no `--console-socket`: the pty master, which
    /// the caller relays to its own stdio.
    pub console: Option<OwnedFd>,
}

/// Runs the whole create sequence for `spec` into the locked `dir`. On failure everything
/// it made (process, cgroup) is gone; the caller removes the state directory.
pub fn create(spec: &Spec, opts: &CreateOpts, dir: &ContainerDir) -> Result<Created, Error> {
    if opts.rootless {
        return create_rootless(spec, opts, dir);
    }
    // 1–2. Plan, cgroup, preliminary record (so an interrupted create can be deleted).
    if let Some((path, res)) = &opts.fleet {
        Cgroup::prepare(Some(path), &opts.id, false)?.apply(res)?;
    }
    let cgroup = Cgroup::prepare(
        spec.linux().cgroups_path.as_deref(),
        &opts.id,
        opts.systemd_cgroup,
    )?;
    let result = create_in_cgroup(spec, opts, dir, &cgroup);
    if result.is_err() {
        let _ = cgroup.remove();
    }
    result
}

/// `create` without real root: a delegated cgroup v2 subtree when there is one, else no
/// cgroup and no `linux.resources`, said in one warning line.
fn create_rootless(spec: &Spec, opts: &CreateOpts, dir: &ContainerDir) -> Result<Created, Error> {
    let l = spec.linux();
    match Cgroup::prepare_rootless(l.cgroups_path.as_deref(), &opts.id)? {
        Ok(cgroup) => {
            let result = create_in_cgroup(spec, opts, dir, &cgroup);
            if result.is_err() {
                let _ = cgroup.remove();
            }
            result
        }
        Err(super::cgroups::NoCgroup(why)) => {
            let mut spec = spec.clone();
            if let Some(res) = spec.linux.as_mut().and_then(|l| l.resources.take()) {
                let asked = rootless::resource_names(&res);
                if !asked.is_empty() {
                    crate::log::warn(&format!(
                        "rootless: no cgroup: {why}; linux.resources not applied ({asked})"
                    ));
                }
            }
            create_in_cgroup(&spec, opts, dir, &Cgroup::default())
        }
    }
}

/// A rootless create fails here, before anything exists, where the kernel or newuidmap
/// would fail later with less to say.
fn rootless_checks(spec: &Spec, ns: &NsPlan) -> Result<(), Error> {
    if sys::geteuid() == 0 {
        // uid 0 inside someone's user namespace (rootless podman): its own maps apply.
        return Ok(());
    }
    let l = spec.linux();
    if !ns.has_new(libc::CLONE_NEWUSER) && ns.user_join.is_none() {
        return Err(spec_err(
            "linux.namespaces",
            "a rootless container needs a user namespace (`moat spec --rootless` writes one)",
        ));
    }
    if ns.has_new(libc::CLONE_NEWUSER) {
        if l.uid_mappings.is_empty() || l.gid_mappings.is_empty() {
            return Err(spec_err(
                "linux.uidMappings",
                "a rootless container's new user namespace needs uidMappings and gidMappings",
            ));
        }
        rootless::check_spec_maps(&l.uid_mappings, &l.gid_mappings).map_err(Error::Spec)?;
    }
    Ok(())
}

fn create_in_cgroup(
    spec: &Spec,
    opts: &CreateOpts,
    dir: &ContainerDir,
    cgroup: &Cgroup,
) -> Result<Created, Error> {
    let plan = Plan::new(spec, opts, cgroup)?;
    let mut record = Record {
        format: state::FORMAT_VERSION,
        id: opts.id.clone(),
        pid: 0,
        pid_start: 0,
        bundle: opts.bundle.clone(),
        rootfs: plan.rootfs.rootfs.clone(),
        created: crate::log::now_rfc3339(true),
        owner: String::new(),
        annotations: spec.annotations.clone(),
        cgroup: Some(cgroup.clone()),
        systemd_cgroup: opts.systemd_cgroup,
        rootless: opts.rootless,
        own_pidns: plan.ns.has_new(libc::CLONE_NEWPID),
        policy: opts.policy.to_string(),
        notify_socket: opts.notify_socket.clone(),
        backend: Default::default(),
    };
    dir.save(&record)?;
    dir.save_spec(spec)?;
    // exec installs exactly these programs, without compiling anything.
    for (i, f) in plan.attrs.seccomp.iter().enumerate() {
        dir.save_file(&state::seccomp_file(i), &f.to_bytes())?;
    }
    if let Some(res) = &spec.linux().resources {
        // The devices the spec asks moat to create may be created (mknod), whatever the
        // access rules say about opening them.
        let mut res = res.clone();
        if !res.devices.is_empty() {
            res.devices.extend(
                spec.linux()
                    .devices
                    .iter()
                    .map(|d| crate::spec::DeviceCgroup {
                        allow: true,
                        typ: Some(if d.typ == "b" { "b" } else { "c" }.into()),
                        major: Some(d.major),
                        minor: Some(d.minor),
                        access: Some("m".into()),
                    }),
            );
        }
        cgroup.apply(&res)?;
    }

    // 3. The exec fifo: the init blocks reading it until `start` writes a byte.
    let fifo_path = dir.file(state::FIFO_FILE);
    nix::unistd::mkfifo(&fifo_path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| io_err(format!("mkfifo {}", fifo_path.display()))(e.into()))?;
    let fifo: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo_path)
        .map_err(io_err(format!("open {}", fifo_path.display())))?
        .into();
    let (parent_ch, child_ch) = sync::pair().map_err(io_err("socketpair"))?;
    // A foreground run with a terminal and no console socket relays the pty itself, so
    // the init sends the master over a socketpair to us instead.
    let mut console_relay = None;
    let console_sock = match &opts.console_socket {
        Some(p) => Some(OwnedFd::from(UnixStream::connect(p).map_err(io_err(
            format!("connect to console socket {}", p.display()),
        ))?)),
        None if plan.attrs.terminal => {
            let (ours, theirs) =
                UnixStream::pair().map_err(io_err("socketpair for the console"))?;
            console_relay = Some(ours);
            Some(OwnedFd::from(theirs))
        }
        None => None,
    };
    if opts.foreground && plan.ns.staged {
        // The init will be a grandchild; make it ours when its parent exits.
        sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1).map_err(io_err("PR_SET_CHILD_SUBREAPER"))?;
    }

    // 4. Fork.
    let direct_flags = if plan.ns.staged {
        0
    } else {
        plan.ns.clone_flags()
    };
    // The child enters the cgroup by itself, without the parent's cgroup.procs write
    // and its RCU grace period (see cgroups/placement.rs).
    let placement = cgroup.placement(None)?;
    let forked = sys::clone_fork(direct_flags, placement.clone_into()).map_err(io_err("clone"))?;
    let child = match forked {
        sys::Forked::Child => {
            // The state lock belongs to this create call, not to the container: an
            // inherited copy would keep the directory locked for the container's life.
            sys::close_raw(dir.fd());
            drop(parent_ch);
            child_main(&plan, placement, &child_ch, &fifo, console_sock.as_ref());
        }
        sys::Forked::Parent(pid) => pid,
    };
    drop(placement);
    drop(child_ch);
    drop(console_sock);
    drop(fifo);
    let mut guard = KillGuard(Some(child));

    // 5. Limits and id maps, then let the child go.
    for &(res, soft, hard) in &plan.attrs.rlimits {
        sys::prlimit(child, res, soft, hard)
            .map_err(io_err(format!("setrlimit {res} on the container")))?;
    }
    if let Some(adj) = spec.process().oom_score_adj {
        std::fs::write(format!("/proc/{child}/oom_score_adj"), adj.to_string())
            .map_err(io_err("process.oomScoreAdj: write oom_score_adj"))?;
    }
    let l = spec.linux();
    if !plan.ns.staged && plan.ns.has_new(libc::CLONE_NEWUSER) {
        namespaces::write_id_maps(child, &l.uid_mappings, &l.gid_mappings)
            .map_err(io_err("linux.uidMappings: write id maps"))?;
    }
    let mut init_pid = child;
    let creating = state_json(&record, "creating", child);
    parent_ch
        .send_child(&ToChild::Go(creating))
        .map_err(io_err("sync: send go"))?;
    if !idmapped_late(&plan) {
        let userns_pid = plan.ns.has_new(libc::CLONE_NEWUSER).then_some(child);
        send_idmapped(&plan, &parent_ch, userns_pid)?;
    }

    // 6–10. Serve the child until it is ready.
    let listener = loop {
        let (msg, fd) = match parent_ch.recv_child() {
            Ok(m) => m,
            Err(_) => return Err(died(init_pid)),
        };
        match msg {
            ToParent::UsernsReady => {
                namespaces::write_id_maps(child, &l.uid_mappings, &l.gid_mappings)
                    .map_err(io_err("linux.uidMappings: write id maps"))?;
                parent_ch
                    .send_child(&ToChild::MapsWritten)
                    .map_err(io_err("sync"))?;
                send_idmapped(&plan, &parent_ch, Some(child))?;
            }
            ToParent::InitPid(pid) => {
                // The intermediate exits right after sending this; reap it.
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
                init_pid = pid;
                guard.0 = Some(pid);
            }
            ToParent::HooksPlease => {
                let st = state_json(&record, "creating", init_pid);
                if let Some(h) = &spec.hooks {
                    hooks::run("prestart", &h.prestart, &st)?;
                    hooks::run("createRuntime", &h.create_runtime, &st)?;
                }
                parent_ch
                    .send_child(&ToChild::HooksDone(st))
                    .map_err(io_err("sync"))?;
            }
            ToParent::Ready => break fd,
            ToParent::Failed(f) => {
                let _ = parent_ch.send_child(&ToChild::Created);
                return Err(Error::Init(f));
            }
        }
    };

    // 10. Record, pid file, seccomp listener, release.
    let Some((_, start)) = state::process_start_time(init_pid) else {
        return Err(died(init_pid));
    };
    record.pid = init_pid;
    record.pid_start = start;
    dir.save(&record)?;
    if let (Some(fd), Some(sc)) = (listener, spec.linux().seccomp.as_ref()) {
        send_listener(sc, fd, &record)?;
    }
    if let Some(pf) = &opts.pid_file {
        state::write_pid_file(pf, init_pid)?;
    }
    let pidfd = if opts.foreground {
        Some(sys::pidfd_open(init_pid).map_err(io_err("pidfd_open"))?)
    } else {
        None
    };
    let console = match &console_relay {
        Some(sock) => Some(
            sys::recv_with_fd(sock.as_fd(), &mut [0u8; 64])
                .map_err(io_err("receive the pty master"))?
                .1
                .ok_or_else(|| Error::Spec("no pty master received".into()))?,
        ),
        None => None,
    };
    parent_ch
        .send_child(&ToChild::Created)
        .map_err(io_err("sync: release init"))?;
    guard.0 = None;
    Ok(Created {
        record,
        pidfd,
        console,
    })
}

/// Kills and reaps the child if create fails half-way.
struct KillGuard(Option<i32>);

impl Drop for KillGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        }
    }
}

fn died(pid: i32) -> Error {
    let status = nix::sys::wait::waitpid(
        nix::unistd::Pid::from_raw(pid),
        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
    );
    Error::Spec(format!(
        "container init exited before it was ready ({status:?})"
    ))
}

/// The OCI state as hooks and the seccomp agent see it.
pub fn state_json(rec: &Record, status: &str, pid: i32) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ociVersion": crate::spec::OCI_VERSION,
        "id": rec.id,
        "status": status,
        "pid": pid,
        "bundle": rec.bundle,
        "annotations": rec.annotations,
    }))
    .expect("state serialises")
}

/// Hands the seccomp notify fd to the agent at `listenerPath`, with runc's message format.
fn send_listener(sc: &crate::spec::Seccomp, fd: OwnedFd, rec: &Record) -> Result<(), Error> {
    let path = sc.listener_path.as_deref().unwrap_or_default();
    let sock = UnixStream::connect(path).map_err(io_err(format!(
        "linux.seccomp.listenerPath: connect {path}"
    )))?;
    let msg = serde_json::to_vec(&serde_json::json!({
        "ociVersion": crate::spec::OCI_VERSION,
        "fds": ["seccompFd"],
        "pid": rec.pid,
        "metadata": sc.listener_metadata.clone().unwrap_or_default(),
        "state": {
            "ociVersion": crate::spec::OCI_VERSION,
            "id": rec.id, "status": "creating", "pid": rec.pid,
            "bundle": rec.bundle, "annotations": rec.annotations,
        },
    }))
    .expect("serialises");
    let fds = [fd.as_raw_fd()];
    nix::sys::socket::sendmsg::<()>(
        sock.as_raw_fd(),
        &[io::IoSlice::new(&msg)],
        &[nix::sys::socket::ControlMessage::ScmRights(&fds)],
        nix::sys::socket::MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| io_err(format!("linux.seccomp.listenerPath: send to {path}"))(e.into()))?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The child

/// Entry of the forked child. Never returns: it execs the container process or exits.
fn child_main(
    plan: &Plan,
    placement: Placement,
    ch: &Channel,
    fifo: &OwnedFd,
    console: Option<&OwnedFd>,
) -> ! {
    let err = match enter_cgroup(placement).and_then(|()| init(plan, ch, fifo, console)) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let _ = ch.send_parent(&ToParent::Failed(err.clone()), None);
    // Wait for the parent to read the failure, so it is reported before we are reaped.
    let _ = ch.recv_parent();
    sys::exit_now(1)
}

enum Never {}

/// First thing in the child, before any namespace is joined or unshared.
pub(crate) fn enter_cgroup(placement: Placement) -> Result<(), InitFailure> {
    let entered = placement.enter();
    // Host cgroupfs fds: closed before anything of the container is joined.
    drop(placement);
    match entered {
        Ok(()) => Ok(()),
        Err((path, e)) => Err(e).step(Step::Cgroup, || format!("write 0 to {}", path.display())),
    }
}

fn wait_parent(ch: &Channel) -> Result<ToChild, InitFailure> {
    ch.recv_parent().map_err(|_| {
        // The parent is gone: nobody will ever start us.
        sys::exit_now(1)
    })
}

fn init(
    plan: &Plan,
    ch: &Channel,
    fifo: &OwnedFd,
    console_sock: Option<&OwnedFd>,
) -> Result<Never, InitFailure> {
    // Nothing in the container may ptrace or read /proc/<pid>/* of this process before exec.
    if !plan.dumpable_until_mapped {
        sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    }
    let ToChild::Go(mut state) = wait_parent(ch)? else {
        return Err(InitFailure::new(Step::Sync, "expected go"));
    };

    let mut idmapped = if idmapped_late(plan) {
        Vec::new()
    } else {
        recv_idmapped(plan, ch)?
    };

    // Namespaces.
    if plan.ns.staged {
        staged_namespaces(plan, ch, &mut idmapped)?;
        // The init, in the container's pid namespace: a procfs of that namespace. With a
        // late init this is still the intermediate, outside that namespace: it keeps the
        // handle of moat's own and the init renews it once forked.
        if !plan.ns.late_init {
            procfs::renew();
        }
    } else {
        for j in &plan.ns.joins {
            sys::setns(j.fd.as_fd(), j.flag)
                .step(Step::Namespaces, || format!("join {}", j.path))?;
        }
        if plan.ns.has_new(libc::CLONE_NEWUSER) {
            become_root()?;
        }
        // Before any mount: the mount namespace is still the fresh copy of moat's own.
        procfs::open_own()?;
    }
    if plan.dumpable_until_mapped {
        // Maps written; nothing of the container runs yet.
        sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    }
    if plan.ns.has_new(libc::CLONE_NEWCGROUP) {
        sys::unshare(libc::CLONE_NEWCGROUP)
            .step(Step::Namespaces, || "unshare cgroup namespace".into())?;
    }
    if let Some(name) = &plan.new_keyring {
        // A session keyring of its own, so the container cannot read the caller's keys.
        match sys::join_session_keyring(name) {
            Err(e)
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::ENOSYS) | Some(libc::EPERM) | Some(libc::EACCES)
                ) =>
            {
                return Err(e).step(Step::Namespaces, || "join session keyring".into())
            }
            _ => {}
        }
    }
    if plan.loopback_up {
        sys::loopback_up().step(Step::Namespaces, || {
            "bring lo up in the new network namespace".into()
        })?;
    }
    if let Some(h) = &plan.hostname {
        nix::unistd::sethostname(h)
            .map_err(io::Error::from)
            .step(Step::Hostname, || format!("hostname {h:?}"))?;
    }
    if let Some(d) = &plan.domainname {
        sys::setdomainname(d).step(Step::Hostname, || format!("domainname {d:?}"))?;
    }

    // Root filesystem: every mount moat makes is held by fd from here on.
    let mut mounts = rootfs::mount_all(&plan.rootfs, &mut idmapped)?;
    drop(idmapped);
    if plan.rootfs.default_devices || !plan.devices.is_empty() {
        devices::create(&mut mounts, &plan.devices, plan.userns)?;
    }
    if plan.rootfs.default_devices {
        devices::symlinks(&mounts, plan.rootfs.kcore)?;
    }
    let pty = if plan.attrs.terminal {
        let (master, peer) = console::open_pty_in(&mounts)?;
        console::mount_console(&mut mounts, peer.as_fd())?;
        if let Some(sock) = console_sock {
            console::send_master(sock.as_fd(), master.as_fd(), plan.attrs.console_size)?;
        }
        Some(peer)
    } else {
        None
    };
    ch.send_parent(&ToParent::HooksPlease, None)
        .step(Step::Sync, || "hooks".into())?;
    if let ToChild::HooksDone(s) = wait_parent(ch)? {
        state = s;
    }
    if let Some(h) = &plan.hooks {
        hooks::run("createContainer", &h.create_container, &state)
            .map_err(|e| InitFailure::new(Step::Hooks, e.to_string()))?;
    }
    rootfs::pivot(&mounts, plan.rootfs.no_pivot)?;
    if plan.ns.late_init {
        // Inside the container's root now: the init may appear in the joined pid namespace.
        fork_init(ch)?;
        procfs::renew();
    }
    // sysctls go in before /proc/sys becomes a read-only path.
    for (key, value) in &plan.sysctl {
        procfs::write_sysctl(key, value).step(Step::Sysctl, || format!("linux.sysctl {key}"))?;
    }
    rootfs::finalize(&plan.rootfs, &mut mounts)?;
    rootfs::set_root_propagation(&plan.rootfs, &mounts)?;
    if let Some(p) = plan.personality {
        sys::personality(p).step(Step::Personality, || "linux.personality".into())?;
    }
    if pty.is_none() {
        // A session of its own without a terminal too (with one, make_stdio does it):
        // the caller's terminal must never be the container's controlling terminal,
        // which TIOCSTI could type into. Before `apply`, so no profile can refuse it.
        sys::setsid().step(Step::Console, || "setsid".into())?;
    }
    // cwd is resolved inside the held root (a spec path: in-root symlinks followed).
    let (exe, listener) = plan.attrs.apply(mounts.root().fd())?;
    drop(mounts);
    if let Some(peer) = &pty {
        console::make_stdio(peer)?;
    }
    drop(pty);

    // Ready; wait to be started.
    ch.send_parent(&ToParent::Ready, listener.as_ref().map(|l| l.as_fd()))
        .step(Step::Sync, || "ready".into())?;
    drop(listener);
    wait_parent(ch)?;
    wait_start(fifo)?;
    if let Some(h) = &plan.hooks {
        hooks::run("startContainer", &h.start_container, &state)
            .map_err(|e| InitFailure::new(Step::Hooks, e.to_string()))?;
    }
    Err(plan.attrs.exec(&exe))
}

fn staged_namespaces(
    plan: &Plan,
    ch: &Channel,
    idmapped: &mut Vec<(u32, OwnedFd)>,
) -> Result<(), InitFailure> {
    // Before anything is joined: the mount namespace is still moat's own.
    procfs::open_own()?;
    if let Some(j) = &plan.ns.user_join {
        sys::setns(j.fd.as_fd(), j.flag).step(Step::Namespaces, || format!("join {}", j.path))?;
        become_root()?;
    }
    for j in &plan.ns.joins {
        sys::setns(j.fd.as_fd(), j.flag).step(Step::Namespaces, || format!("join {}", j.path))?;
    }
    if let Some(j) = &plan.ns.mount_join {
        sys::setns(j.fd.as_fd(), j.flag).step(Step::Namespaces, || format!("join {}", j.path))?;
    }
    for (key, value) in &plan.sysctl_joined {
        procfs::write_sysctl(key, value).step(Step::Sysctl, || format!("linux.sysctl {key}"))?;
    }
    if plan.ns.has_new(libc::CLONE_NEWUSER) {
        sys::unshare(libc::CLONE_NEWUSER)
            .step(Step::Namespaces, || "unshare user namespace".into())?;
        ch.send_parent(&ToParent::UsernsReady, None)
            .step(Step::Sync, || "userns".into())?;
        wait_parent(ch)?;
        *idmapped = recv_idmapped(plan, ch)?;
        become_root()?;
    }
    let flags = plan.ns.new & !libc::CLONE_NEWUSER & !libc::CLONE_NEWCGROUP;
    if flags != 0 {
        sys::unshare(flags).step(Step::Namespaces, || {
            format!("unshare namespaces {flags:#x}")
        })?;
    }
    if !plan.ns.time_offsets.is_empty() {
        procfs::write_timens_offsets(&plan.ns.time_offsets)
            .step(Step::Namespaces, || "linux.timeOffsets".into())?;
    }
    if plan.ns.late_init {
        // This process sets up the rootfs; the init is forked after pivot_root.
        return proc_contexts(plan);
    }
    // Joining or creating a pid (or time) namespace takes effect for children only.
    fork_init(ch)
}

/// [`NsPlan::late_init`]: procfs contexts of the joined pid namespace, for the rootfs
/// set up by this process, which is not in it (`mount::new_fs` takes them). They come from
/// a helper forked into that namespace while this process's root and cwd are an empty,
/// read-only, detached tmpfs — a root with nothing above it, so `/proc/<helper>/root`
/// leads nowhere — and holding no fd but its socket.
fn proc_contexts(plan: &Plan) -> Result<(), InitFailure> {
    let n = 2 + plan
        .rootfs
        .mounts
        .iter()
        .filter(|m| matches!(&m.kind, rootfs::Kind::Fs { fstype, .. } if fstype == "proc"))
        .count();
    let what = || "procfs of the joined pid namespace".to_string();
    let empty = super::mount::new_fs("tmpfs", None, &[]).step(Step::Namespaces, what)?;
    super::mount::setattr(empty.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
        .step(Step::Namespaces, what)?;
    let dir = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let root = sys::openat(super::path::cwd(), c"/", dir, 0).step(Step::Namespaces, what)?;
    let cwd = sys::openat(super::path::cwd(), c".", dir, 0).step(Step::Namespaces, what)?;
    let (ours, theirs) = sync::pair().step(Step::Namespaces, what)?;
    sys::fchdir(empty.as_fd()).step(Step::Namespaces, what)?;
    sys::chroot(c".").step(Step::Namespaces, what)?;
    let forked = sys::clone_fork(0, None);
    if !matches!(forked, Ok(sys::Forked::Child)) {
        // Back on the (private copy of the) host's root, whatever the fork did; never
        // carry on from the empty one.
        let back = sys::fchdir(root.as_fd())
            .and_then(|()| sys::chroot(c"."))
            .and_then(|()| sys::fchdir(cwd.as_fd()));
        if back.is_err() {
            sys::exit_now(1);
        }
    }
    match forked.step(Step::Namespaces, what)? {
        sys::Forked::Child => {
            let ok = sys::close_all_but(theirs.sock.as_fd()).is_ok()
                && (0..n).all(|i| {
                    sys::fsopen(c"proc")
                        .is_ok_and(|fc| theirs.send_mount(i as u32, fc.as_fd()).is_ok())
                });
            sys::exit_now(if ok { 0 } else { 1 })
        }
        sys::Forked::Parent(pid) => {
            drop(theirs);
            let got: Result<Vec<OwnedFd>, _> =
                (0..n).map(|_| ours.recv_mount().map(|m| m.1)).collect();
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            super::mount::set_proc_contexts(Some(got.step(Step::Namespaces, what)?));
            Ok(())
        }
    }
}

/// Forks the init (staged create; [`NsPlan::late_init`]: after `pivot_root`); this
/// process reports the init's pid and exits. The init goes on only once that report is
/// sent (EOF on a pipe at this process's exit), so the parent never takes a message of
/// the init's for one of this process's.
fn fork_init(ch: &Channel) -> Result<(), InitFailure> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(io::Error::from)
        .step(Step::Namespaces, || "pipe".into())?;
    match sys::clone_fork(0, None).step(Step::Namespaces, || "fork init".into())? {
        sys::Forked::Child => {
            drop(w);
            let mut b = [0u8; 1];
            let mut f = std::fs::File::from(r);
            while matches!(f.read(&mut b), Err(ref e) if e.kind() == io::ErrorKind::Interrupted) {}
            // In the pid namespace now: its own fsopen("proc") is right again.
            super::mount::set_proc_contexts(None);
            Ok(())
        }
        sys::Forked::Parent(pid) => {
            let _ = ch.send_parent(&ToParent::InitPid(pid), None);
            sys::exit_now(0)
        }
    }
}

/// In a new user namespace, become its root (ids were mapped by the parent).
fn become_root() -> Result<(), InitFailure> {
    // EINVAL means 0 is not mapped (e.g. a rootless map of a single non-root id): stay as is.
    match sys::setresgid(0) {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => {
            return Err(e).step(Step::UserMapping, || "setresgid 0".into())
        }
        _ => {}
    }
    match sys::setresuid(0) {
        Err(e) if e.raw_os_error() != Some(libc::EINVAL) => {
            Err(e).step(Step::UserMapping, || "setresuid 0".into())
        }
        _ => Ok(()),
    }
}

/// Blocks until `moat start` writes the fifo.
fn wait_start(fifo: &OwnedFd) -> Result<(), InitFailure> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let mut fds = [PollFd::new(fifo.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)).step(Step::Sync, || "wait for start".into()),
        }
    }
    let mut b = [0u8; 1];
    let mut f = std::fs::File::from(fifo.try_clone().step(Step::Sync, || "exec fifo".into())?);
    match f.read(&mut b) {
        Ok(1) => Ok(()),
        _ => Err(InitFailure::new(
            Step::Sync,
            "exec fifo closed without a start",
        )),
    }
}
