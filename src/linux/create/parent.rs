//! The parent's side of the create table (`super`'s module doc): rows 2–14, one
//! function each, called in the table's order by [`create`]. Each row undoes what it made
//! when a later one fails: a failed create leaves no process, cgroup, id range or state
//! directory.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixDatagram, UnixStream};

use super::plan::{CgroupPlan, Plan};
use super::{child, Error};
use crate::linux::cgroups::{Cgroup, NoCgroup};
use crate::linux::killpoint;
use crate::linux::sync::{self, Channel, ToChild, ToParent};
use crate::linux::{apparmor, hooks, idmap, namespaces, notify, rootfs, sys};
use crate::state::idpool::pool_root;
use crate::state::{self, budget, idpool, ContainerDir, Record};

/// The result of a successful create.
pub struct Created {
    pub record: Record,
    /// Set for a foreground run: the init is our child (or reparented to us).
    pub pidfd: Option<OwnedFd>,
    /// Foreground run with a terminal and no `--console-socket`: the pty master, which
    /// the caller relays to its own stdio.
    pub console: Option<OwnedFd>,
}

/// Rows 2–14 for a finished plan (row 1): the container created, its init waiting for
/// `start`; returns its locked state directory.
pub fn create(mut plan: Plan) -> Result<(ContainerDir, Created), Error> {
    killpoint::at("create", "parent", "Profile");
    profile(&plan)?; // 2
    killpoint::at("create", "parent", "StateDir");
    let (dir, notify_sock) = state_dir(&plan)?; // 3
    let created = with_state_dir(&mut plan, &dir);
    // Open until the init has inherited it (see linux/notify.rs).
    drop(notify_sock);
    match created {
        Ok(c) => Ok((dir, c)),
        Err(e) => {
            let _ = dir.remove();
            Err(e)
        }
    }
}

/// `restore`: rows 2–6 for a finished plan (profile, state dir, cgroups, record), then
/// `run` in place of the fork (CRIU restores the image's process tree into the cgroup
/// just made) answering the restored init's pid, which the record then names. Anything
/// failing undoes what was made, as for create.
pub fn restore(
    mut plan: Plan,
    run: impl FnOnce(&Plan, &Cgroup) -> Result<i32, Error>,
) -> Result<(ContainerDir, Record), Error> {
    killpoint::at("restore", "parent", "Profile");
    profile(&plan)?; // 2
    killpoint::at("restore", "parent", "StateDir");
    let (dir, notify_sock) = state_dir(&plan)?; // 3
    drop(notify_sock);
    let restored = (|| {
        let ids = ids(&mut plan, &dir)?; // 4
        let share = budget(&plan, &dir)?; // 4
        if ids || share {
            // Refused before the plan gets here (`container::checkpoint`); never left held.
            if ids {
                release_ids(&plan);
            }
            if share {
                release_budget(&plan);
            }
            return Err(Error::Restore(
                "moat.userns=auto and bounded roots are not restored yet".into(),
            ));
        }
        if let Some(planned) = plan.cgroup.planned() {
            let json = serde_json::to_vec(&planned).expect("serialises");
            dir.save_file(state::CGROUP_PLANNED_FILE, &json)?;
        }
        killpoint::at("restore", "parent", "Cgroup");
        let cgroup = cgroup(&mut plan)?; // 5
        let done = (|| {
            killpoint::at("restore", "parent", "Record");
            let mut record = record(&plan, &dir, &cgroup)?; // 6
            let pid = run(&plan, &cgroup)?;
            killpoint::at("restore", "parent", "Restored");
            let Some((_, start)) = state::process_start_time(pid) else {
                return Err(died(pid));
            };
            record.pid = pid;
            record.pid_start = start;
            dir.save(&record)?;
            if let Some(pf) = &plan.opts.pid_file {
                state::write_pid_file(pf, pid)?;
            }
            Ok(record)
        })();
        if done.is_err() {
            let _ = cgroup.kill_all(libc::SIGKILL, std::time::Duration::from_secs(5));
            let _ = cgroup.remove();
        }
        done
    })();
    match restored {
        Ok(r) => Ok((dir, r)),
        Err(e) => {
            let _ = dir.remove();
            Err(e)
        }
    }
}

fn with_state_dir(plan: &mut Plan, dir: &ContainerDir) -> Result<Created, Error> {
    killpoint::at("create", "parent", "Ids");
    let ids = ids(plan, dir)?; // 4
    let created = with_ids(plan, dir);
    if created.is_err() && ids {
        release_ids(plan);
    }
    created
}

fn with_ids(plan: &mut Plan, dir: &ContainerDir) -> Result<Created, Error> {
    killpoint::at("create", "parent", "Ids.budget");
    let share = budget(plan, dir)?; // 4
    let created = with_shares(plan, dir);
    if created.is_err() && share {
        release_budget(plan);
    }
    created
}

fn with_shares(plan: &mut Plan, dir: &ContainerDir) -> Result<Created, Error> {
    // Before anything is made: a create killed between the cgroup and the record would
    // otherwise leave directories no delete knows of.
    if let Some(planned) = plan.cgroup.planned() {
        let json = serde_json::to_vec(&planned).expect("serialises");
        dir.save_file(state::CGROUP_PLANNED_FILE, &json)?;
    }
    killpoint::at("create", "parent", "Cgroup");
    let mut cgroup = cgroup(plan)?; // 5
    let created = in_cgroup(plan, dir, &mut cgroup);
    if created.is_err() {
        let _ = cgroup.remove();
    }
    created
}

fn in_cgroup(plan: &Plan, dir: &ContainerDir, cgroup: &mut Cgroup) -> Result<Created, Error> {
    killpoint::at("create", "parent", "Record");
    let mut record = record(plan, dir, cgroup)?; // 6
    killpoint::at("create", "parent", "Channels");
    let ch = channels(plan, dir)?; // 7
    killpoint::at("create", "parent", "Fork");
    let (child, mut guard, parent_ch, console_relay) = fork(plan, dir, cgroup, ch)?; // 8
    killpoint::at("create", "parent", "Fork.scope");
    cgroup.start_systemd(
        &plan.opts.id,
        child,
        resources(plan).as_ref(),
        plan.fleet_slice.as_ref().map(|(s, r)| (s.as_str(), r)),
    )?; // 8: the systemd driver's scope
    let cgroup = &*cgroup;
    if cgroup.systemd.is_some() {
        // The unit's InvocationID, at once: the record is what proves the unit this
        // container's to a delete after a create killed from here on.
        record.cgroup = Some(cgroup.clone());
        dir.save(&record)?;
        egress(plan, cgroup)?;
    }
    killpoint::at("create", "parent", "Release");
    release(plan, child, &record, &parent_ch)?; // 9

    // Rows 9 (staged) to 14: serve the child until it is ready.
    let init_pid = serve(plan, child, &record, &parent_ch, &mut guard)?;
    killpoint::at("create", "parent", "Dns");
    let dns = dns(plan, dir, cgroup, init_pid)?; // 14: before the record names the init
    killpoint::at("create", "parent", "Ready");
    let created = ready(plan, dir, &mut record, init_pid, console_relay, &parent_ch)?; // 14
    guard.0 = None;
    if let Some(d) = dns {
        d.keep();
    }
    Ok(created)
}

/// Row 2: moat's AppArmor profile, loaded unless the host facts say the kernel has it.
fn profile(plan: &Plan) -> Result<(), Error> {
    if plan.apparmor_profile {
        apparmor::ensure_loaded(
            crate::policy::APPARMOR_PROFILE_NAME,
            crate::policy::APPARMOR_PROFILE,
            &plan.host,
        )
        .map_err(Error::AppArmor)?;
    }
    Ok(())
}

/// Row 3: the state directory, exclusively (a second create of the id fails here), and
/// the container's notify socket in it.
fn state_dir(plan: &Plan) -> Result<(ContainerDir, Option<UnixDatagram>), Error> {
    let dir = ContainerDir::create(&plan.opts.root, &plan.opts.id)?;
    let Some(n) = &plan.notify else {
        return Ok((dir, None));
    };
    match notify::prepare(n, &dir, plan.opts.preserve_fds.saturating_add(3)) {
        Ok(sock) => Ok((dir, sock)),
        Err(e) => {
            let _ = dir.remove();
            Err(Error::Notify(e))
        }
    }
}

/// Row 4: `moat.userns=auto`: a free range from the host-wide pool becomes the
/// container's id mapping (container 0.. → the range), recorded in the state directory.
/// Returns whether a range was taken.
fn ids(plan: &mut Plan, dir: &ContainerDir) -> Result<bool, Error> {
    let Some((pool, size)) = plan.userns_pool else {
        return Ok(false);
    };
    let r = idpool::Pool::default()
        .allocate(pool, size, &pool_root(&plan.opts.root), &plan.opts.id)
        .map_err(Error::UsernsAllocate)?;
    let saved = dir.save_file(
        state::USERNS_FILE,
        &serde_json::to_vec(&r).expect("serialises"),
    );
    if let Err(e) = saved {
        release_ids(plan);
        return Err(e.into());
    }
    plan.set_userns_range(r);
    Ok(true)
}

/// Gives back the range row 4 took.
fn release_ids(plan: &Plan) {
    idpool::release_or_warn(&plan.opts.root, &plan.opts.id);
}

/// Row 4: a bounded root under `[fleet] rootfs_budget`: its cap taken from the host's
/// ledger, refused when the live containers' caps and this one would exceed the budget;
/// recorded in the state directory. Returns whether a share was taken.
fn budget(plan: &Plan, dir: &ContainerDir) -> Result<bool, Error> {
    let Some((budget, bytes)) = plan.rootfs_budget else {
        return Ok(false);
    };
    budget::Ledger::default()
        .take(budget, bytes, &pool_root(&plan.opts.root), &plan.opts.id)
        .map_err(Error::RootfsBudget)?;
    let taken = budget::Taken { bytes, budget };
    let saved = dir.save_file(
        state::BUDGET_FILE,
        &serde_json::to_vec(&taken).expect("serialises"),
    );
    if let Err(e) = saved {
        release_budget(plan);
        return Err(e.into());
    }
    Ok(true)
}

/// Gives back the share row 4 took.
fn release_budget(plan: &Plan) {
    budget::release_or_warn(&plan.opts.root, &plan.opts.id);
}

/// Row 5: the fleet cgroup with its limits, the container's cgroup. Rootless: no cgroup
/// when the delegated subtree refuses moat.
fn cgroup(plan: &mut Plan) -> Result<Cgroup, Error> {
    if let Some((layout, path, res)) = &plan.fleet {
        Cgroup::ensure_fleet(layout.clone(), path.clone(), res)?;
    }
    let (cgroup, none) = match &plan.cgroup {
        // A cgroup that already holds processes is someone else's: its limits, pause and
        // kill would reach them, and a delete could not tell them from the container's.
        // Both policies refuse it, as runc does since it stopped only warning.
        CgroupPlan::Host { layout, path } => (Cgroup::create(layout.clone(), path.clone())?, None),
        CgroupPlan::Delegated { hierarchy, path } => {
            match Cgroup::create_rootless(hierarchy.clone(), path.clone())? {
                Ok(cg) => (cg, None),
                Err(NoCgroup(why)) => (Cgroup::default(), Some(why)),
            }
        }
        CgroupPlan::None => return Ok(Cgroup::default()),
        // Made in row 8, around the child.
        CgroupPlan::Systemd(cg) => (cg.clone(), None),
    };
    plan.set_cgroup(&cgroup, none.as_deref());
    Ok(cgroup)
}

/// Row 6: the preliminary record (so an interrupted create can be deleted), the spec,
/// the compiled seccomp programs and the policy decision; then `linux.resources`.
fn record(plan: &Plan, dir: &ContainerDir, cgroup: &Cgroup) -> Result<Record, Error> {
    let (spec, opts) = (&plan.spec, &plan.opts);
    let record = Record {
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
        policy: plan.policy,
        notify_socket: opts.notify_socket.clone(),
        backend: Default::default(),
        post_hooks: Some(
            spec.hooks
                .as_ref()
                .is_some_and(|h| !h.poststart.is_empty() || !h.poststop.is_empty()),
        ),
    };
    dir.save(&record)?;
    dir.save_spec(spec)?;
    // exec installs exactly these programs, without compiling anything.
    for (i, f) in plan.attrs.seccomp.iter().enumerate() {
        dir.save_file(&state::seccomp_file(i), &f.to_bytes())?;
    }
    dir.save_decision(&plan.decision, state::Save::Replace)?;
    if let Some(d) = &plan.dns {
        // The container's resolv.conf, bound in row 10; rewritten in place in row 14 if
        // the forwarder had to take another address.
        crate::linux::egress::forwarder::write_resolv(d, d.first).map_err(|err| {
            crate::linux::egress::forwarder::ForwarderError::Io {
                what: format!("write {}", d.resolv.display()),
                err,
            }
        })?;
    }
    // The systemd driver's cgroup exists only from row 8 on.
    if let (Some(res), None) = (resources(plan), &cgroup.systemd) {
        cgroup.apply(&res)?;
    }
    if cgroup.systemd.is_none() {
        egress(plan, cgroup)?;
    }
    Ok(record)
}

/// Rows 6/8: the egress policy attached to the container's cgroup v2, before the init
/// runs anything (the programs bind every process placed in the cgroup later: the init's
/// children, every `exec`).
fn egress(plan: &Plan, cgroup: &Cgroup) -> Result<(), Error> {
    let Some(e) = &plan.egress else {
        return Ok(());
    };
    let dir = cgroup.v2_dir().ok_or_else(|| {
        crate::linux::egress::EgressError::NoCgroup(format!("cgroup {}", cgroup.path))
    })?;
    let cache = plan.opts.root.join("@cache").join("egress");
    crate::linux::egress::install(&dir, e, None, Some(&cache))?;
    Ok(())
}

/// Row 14: the DNS forwarder of the egress list's names, in the ready init's network
/// namespace (`linux/egress/forwarder.rs`). Killed again if create fails after this; a
/// create killed outright leaves it to exit with the init (it polls the init's pidfd).
fn dns(
    plan: &Plan,
    dir: &ContainerDir,
    cgroup: &Cgroup,
    init_pid: i32,
) -> Result<Option<crate::linux::egress::forwarder::Running>, Error> {
    let (Some(p), Some(e)) = (&plan.dns, &plan.egress) else {
        return Ok(None);
    };
    let v2 = cgroup.v2_dir().ok_or_else(|| {
        crate::linux::egress::EgressError::NoCgroup(format!("cgroup {}", cgroup.path))
    })?;
    let state = dir.file("");
    let site = crate::linux::egress::forwarder::Site {
        id: &plan.opts.id,
        init_pid,
        v2: &v2,
        cgroup: &cgroup.path,
        rootless: plan.opts.rootless,
    };
    Ok(Some(crate::linux::egress::forwarder::start(
        p, &state, e, &site,
    )?))
}

/// `linux.resources` as the cgroup gets them: the devices the spec asks moat to create
/// may be created (mknod), whatever the access rules say about opening them.
fn resources(plan: &Plan) -> Option<crate::spec::Resources> {
    let linux = plan.spec.linux();
    let mut res = linux.resources.clone()?;
    if !res.devices.is_empty() {
        res.devices
            .extend(linux.devices.iter().map(|d| crate::spec::DeviceCgroup {
                allow: true,
                typ: Some(if d.typ == "b" { "b" } else { "c" }.into()),
                major: Some(d.major),
                minor: Some(d.minor),
                access: Some("m".into()),
            }));
    }
    Some(res)
}

/// What row 7 opens for the fork.
struct Channels {
    fifo: OwnedFd,
    parent: Channel,
    child: Channel,
    console_sock: Option<OwnedFd>,
    console_relay: Option<UnixStream>,
}

/// Row 7: the exec fifo (the init blocks reading it until `start` writes a byte), the
/// sync socketpair, the console socket.
fn channels(plan: &Plan, dir: &ContainerDir) -> Result<Channels, Error> {
    let fifo_path = dir.file(state::FIFO_FILE);
    let mkfifo_err = |source| Error::Mkfifo {
        path: fifo_path.clone(),
        source,
    };
    // No NUL in a state path (nix refused one with EINVAL too).
    let c_path = std::ffi::CString::new(fifo_path.as_os_str().as_bytes())
        .map_err(|_| mkfifo_err(io::Error::from_raw_os_error(libc::EINVAL)))?;
    sys::mkfifo(&c_path, 0o600).map_err(mkfifo_err)?;
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let fifo =
        sys::openat(sys::at_fdcwd(), &c_path, flags, 0).map_err(|source| Error::OpenFifo {
            path: fifo_path.clone(),
            source,
        })?;
    let (parent_ch, child_ch) = sync::create_pair(plan.shape()).map_err(Error::Socketpair)?;
    // A foreground run with a terminal and no console socket relays the pty itself, so
    // the init sends the master over a socketpair to us instead.
    let mut console_relay = None;
    let console_sock = match &plan.opts.console_socket {
        Some(p) => Some(sys::connect_unix(p).map_err(|source| Error::ConsoleSocket {
            path: p.clone(),
            source,
        })?),
        None if plan.attrs.terminal => {
            let (ours, theirs) = sys::unix_stream_pair().map_err(Error::ConsolePair)?;
            console_relay = Some(UnixStream::from(ours));
            Some(theirs)
        }
        None => None,
    };
    if plan.opts.foreground && plan.ns.staged {
        // The init will be a grandchild; make it ours when its parent exits.
        sys::prctl(libc::PR_SET_CHILD_SUBREAPER, 1).map_err(Error::Subreaper)?;
    }
    Ok(Channels {
        fifo,
        parent: parent_ch,
        child: child_ch,
        console_sock,
        console_relay,
    })
}

/// Row 8: the fork, into the v2 cgroup; the child runs `child::main`. Returns the
/// child's pid, the guard that kills it if create fails from here on, the parent's end
/// of the sync channel and the console relay.
fn fork(
    plan: &Plan,
    dir: &ContainerDir,
    cgroup: &Cgroup,
    ch: Channels,
) -> Result<(i32, KillGuard, Channel, Option<UnixStream>), Error> {
    let Channels {
        fifo,
        parent: parent_ch,
        child: child_ch,
        console_sock,
        console_relay,
    } = ch;
    let direct_flags = if plan.ns.staged {
        0
    } else {
        plan.ns.clone_flags()
    };
    // The child enters the cgroup by itself, without the parent's cgroup.procs write
    // and its RCU grace period (see cgroups/placement.rs).
    // (The systemd driver's scope does not exist yet: systemd moves the child in.)
    let placement = match cgroup.systemd {
        None => cgroup.placement(&[])?,
        Some(_) => crate::linux::cgroups::Placement::none(),
    };
    let forked = sys::clone_fork(direct_flags, placement.clone_into()).map_err(Error::Clone)?;
    let child = match forked {
        sys::Forked::Child => {
            // The state lock belongs to this create call, not to the container: an
            // inherited copy would keep the directory locked for the container's life.
            sys::close_raw(dir.fd());
            drop(parent_ch);
            child::main(plan, placement, &child_ch, &fifo, console_sock.as_ref());
        }
        sys::Forked::Parent(pid) => pid,
    };
    drop(placement);
    drop(child_ch);
    drop(console_sock);
    drop(fifo);
    Ok((child, KillGuard(Some(child)), parent_ch, console_relay))
}

/// Row 9: limits and id maps, then let the child go; the mount fds once the maps are
/// written.
fn release(plan: &Plan, child: i32, record: &Record, parent_ch: &Channel) -> Result<(), Error> {
    for (index, &(res, soft, hard)) in plan.attrs.rlimits.iter().enumerate() {
        let (soft, hard) = if res == libc::RLIMIT_NOFILE as libc::c_int {
            nofile_for_setup(soft, hard)
        } else {
            (soft, hard)
        };
        sys::prlimit(child, res, soft, hard).map_err(|source| Error::Rlimit {
            index,
            resource: crate::linux::attrs::rlimit_name(res),
            hint: crate::linux::attrs::rlimit_hint(res, hard),
            source,
        })?;
    }
    if let Some(adj) = plan.spec.process().oom_score_adj {
        let path = format!("/proc/{child}/oom_score_adj");
        sys::write_file(std::path::Path::new(&path), adj.to_string().as_bytes())
            .map_err(Error::OomScoreAdj)?;
    }
    let l = plan.spec.linux();
    if !plan.ns.staged && plan.ns.has_new(libc::CLONE_NEWUSER) {
        namespaces::write_id_maps(child, &l.uid_mappings, &l.gid_mappings)
            .map_err(Error::IdMaps)?;
    }
    let creating = state_json(record, "creating", child);
    parent_ch
        .send_child(&ToChild::Go(creating))
        .map_err(send("sync: send go"))?;
    if !plan.idmapped_late() {
        let userns_pid = plan.ns.has_new(libc::CLONE_NEWUSER).then_some(child);
        send_idmapped(plan, parent_ch, userns_pid, child)?;
    }
    Ok(())
}

/// `RLIMIT_NOFILE` while the init sets the container up: the spec's limits where they
/// raise moat's own (which needs the parent's privilege), moat's own where they are lower.
/// The init holds a descriptor per mount it makes (and receives one per bind the parent
/// opened) until its root is done; a spec's low limit (runc's idmap.bats: 20, with 20
/// idmapped mounts) would fail that half way, where runc sets the limits only once the
/// init is ready. The init lowers the limit to the spec's itself once its mounts are
/// closed (`create::child::attributes`), which needs no privilege.
fn nofile_for_setup(soft: u64, hard: u64) -> (u64, u64) {
    let res = libc::RLIMIT_NOFILE as libc::c_int;
    let (Ok(own_soft), Ok(own_hard)) = (sys::soft_rlimit(res), sys::hard_rlimit(res)) else {
        return (soft, hard);
    };
    let hard = hard.max(own_hard);
    (soft.max(own_soft).min(hard), hard)
}

/// The child's messages up to `Ready`: row 9's id maps of a staged user namespace, the
/// staged init's pid, row 11's hooks, row 13's seccomp listener (handed to the agent at
/// once: the init may already wait in a syscall only the agent answers). Returns the
/// init's pid.
fn serve(
    plan: &Plan,
    child: i32,
    record: &Record,
    parent_ch: &Channel,
    guard: &mut KillGuard,
) -> Result<i32, Error> {
    let l = plan.spec.linux();
    let mut init_pid = child;
    loop {
        let (msg, fd) = match parent_ch.recv_child_within(plan.sync_timeout) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                return Err(Error::SyncTimeout {
                    secs: plan.sync_timeout.as_secs(),
                    step: waiting_in(parent_ch.phase()),
                })
            }
            Err(e) => match sync::OutOfOrder::of(&e) {
                Some(o) => return Err(Error::Protocol(o)),
                None => return Err(died(init_pid)),
            },
        };
        match msg {
            ToParent::UsernsReady => {
                namespaces::write_id_maps(child, &l.uid_mappings, &l.gid_mappings)
                    .map_err(Error::IdMaps)?;
                parent_ch
                    .send_child(&ToChild::MapsWritten)
                    .map_err(send("sync"))?;
                send_idmapped(plan, parent_ch, Some(child), child)?;
            }
            ToParent::InitPid(pid) => {
                // The intermediate exits right after sending this; reap it.
                let _ = sys::waitpid(child);
                init_pid = pid;
                guard.0 = Some(pid);
            }
            ToParent::HooksPlease => hooks(plan, record, init_pid, parent_ch)?,
            ToParent::IdmapPlease(index) => {
                idmap_in_root(plan, index, fd, init_pid)?;
                parent_ch
                    .send_child(&ToChild::Idmapped(index))
                    .map_err(send("sync: the copy is idmapped"))?;
            }
            ToParent::Listener => {
                if let (Some(fd), Some(sc)) = (fd, l.seccomp.as_ref()) {
                    send_listener(sc, fd, record, init_pid, init_pid, "creating")?;
                }
            }
            ToParent::Ready => return Ok(init_pid),
            ToParent::Failed(f) => {
                let _ = parent_ch.send_child(&ToChild::Created);
                return Err(Error::Init(f));
            }
        }
    }
}

/// Row 10, on the init's request: idmaps the detached copy `tree` the init made of
/// `mounts[index]`'s source inside the rootfs (`idmap::idmap_detached`). The container's
/// user namespace, for `idmap` without mappings, is the init's (`init_pid`: the staged
/// intermediate may be gone) or the one it joined.
fn idmap_in_root(
    plan: &Plan,
    index: u32,
    tree: Option<OwnedFd>,
    init_pid: i32,
) -> Result<(), Error> {
    let m = plan.rootfs.mounts.iter().find(|m| {
        usize::try_from(index).is_ok_and(|i| m.index == i)
            && m.idmap.is_some()
            && matches!(
                m.kind,
                rootfs::Kind::Bind {
                    in_root: Some(_),
                    ..
                }
            )
    });
    let (Some(m), Some(tree)) = (m, tree) else {
        return Err(Error::IdmapRequest { index });
    };
    let (rootfs::Kind::Bind { source, .. }, Some(im)) = (&m.kind, &m.idmap) else {
        return Err(Error::IdmapRequest { index });
    };
    let container = match (plan.ns.has_new(libc::CLONE_NEWUSER), &plan.ns.user_join) {
        (true, _) => Some(idmap::userns_of(init_pid).map_err(Error::UsernsOf)?),
        (false, Some(j)) => {
            Some(
                sys::dup_cloexec(j.fd.as_fd()).map_err(|source| Error::NsDup {
                    path: j.path.clone(),
                    source,
                })?,
            )
        }
        (false, None) => None,
    };
    idmap::idmap_detached(
        tree.as_fd(),
        source,
        im,
        container.as_ref().map(|f| f.as_fd()),
    )
    .map_err(|e| Error::IdmapBind {
        index: m.index,
        what: e.what,
        source: e.source,
    })
}

/// Row 11: `linux.netDevices` moved into the container's network namespace (made by
/// now, and entered by `init_pid`, direct or staged), then prestart and createRuntime
/// hooks, in the container's namespaces' view of the init's pid: hooks and the
/// container's own createContainer hooks already see the interfaces, as runc's do.
fn hooks(plan: &Plan, record: &Record, init_pid: i32, parent_ch: &Channel) -> Result<(), Error> {
    crate::linux::netdev::move_into(init_pid, &plan.spec.linux().net_devices())?;
    let st = state_json(record, "creating", init_pid);
    if let Some(h) = &plan.spec.hooks {
        hooks::run("prestart", &h.prestart, &st)?;
        hooks::run("createRuntime", &h.create_runtime, &st)?;
    }
    parent_ch
        .send_child(&ToChild::HooksDone(st))
        .map_err(send("sync"))
}

/// Row 14: the record with the init's pid and start time, the pid file; `Created`
/// releases the init to block on the fifo.
fn ready(
    plan: &Plan,
    dir: &ContainerDir,
    record: &mut Record,
    init_pid: i32,
    console_relay: Option<UnixStream>,
    parent_ch: &Channel,
) -> Result<Created, Error> {
    let Some((_, start)) = state::process_start_time(init_pid) else {
        return Err(died(init_pid));
    };
    record.pid = init_pid;
    record.pid_start = start;
    dir.save(record)?;
    if let Some(pf) = &plan.opts.pid_file {
        state::write_pid_file(pf, init_pid)?;
    }
    let pidfd = if plan.opts.foreground {
        Some(
            sys::pidfd_open(init_pid).map_err(|source| Error::PidfdOpen {
                pid: init_pid,
                source,
            })?,
        )
    } else {
        None
    };
    // `--pidfd-socket`: before the init is released, so a failure is create's and undoes
    // it (the guard kills the init).
    if let Some(path) = &plan.opts.pidfd_socket {
        crate::linux::pidfd::PidfdSocket::connect(path)?.send(init_pid, "standard")?;
    }
    let console = match &console_relay {
        Some(sock) => Some(
            sys::recv_with_fd(sock.as_fd(), &mut [0u8; 64])
                .map_err(Error::PtyMaster)?
                .1
                .ok_or(Error::NoPtyMaster)?,
        ),
        None => None,
    };
    parent_ch
        .send_child(&ToChild::Created)
        .map_err(send("sync: release init"))?;
    Ok(Created {
        record: record.clone(),
        pidfd,
        console,
    })
}

fn send(message: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Send { message, source }
}

/// Row 9: builds the idmapped rootfs and bind mounts (`linux/idmap.rs`) once the
/// container's user namespace is mapped, and sends them to the child.
fn send_idmapped(
    plan: &Plan,
    ch: &Channel,
    userns_pid: Option<i32>,
    child: i32,
) -> Result<(), Error> {
    if plan.rootfs.idmapped_count() == 0 {
        return Ok(());
    }
    let mut init_root: Option<crate::linux::path::Root> = None;
    let container = match (userns_pid, &plan.ns.user_join) {
        (Some(pid), _) => Some(idmap::userns_of(pid).map_err(Error::UsernsOf)?),
        (None, Some(j)) => Some(
            sys::dup_cloexec(j.fd.as_fd()).map_err(|source| Error::NsDup {
                path: j.path.clone(),
                source,
            })?,
        ),
        (None, None) => None,
    };
    let failed = |e: idmap::IdmapError| Error::Idmap {
        what: e.what,
        source: e.source,
    };
    if let Some(e) = &plan.rootfs.ephemeral {
        let userns = match plan.rootfs.idmap_root {
            Some(host) => Some((
                container.as_ref().ok_or(Error::IdmapNoUserns)?.as_fd(),
                host,
            )),
            None => None,
        };
        let fd = idmap::ephemeral(&plan.rootfs.rootfs, e, userns).map_err(failed)?;
        ch.send_mount(idmap::ROOTFS, fd.as_fd())
            .map_err(send("sync: send the bounded rootfs"))?;
    } else if let Some(host) = plan.rootfs.idmap_root {
        let ns = container.as_ref().ok_or(Error::IdmapNoUserns)?;
        let fd = idmap::rootfs(&plan.rootfs.rootfs, ns.as_fd(), host).map_err(failed)?;
        ch.send_mount(idmap::ROOTFS, fd.as_fd())
            .map_err(send("sync: send the idmapped rootfs"))?;
    }
    for m in &plan.rootfs.mounts {
        let rootfs::Kind::Bind { source, .. } = &m.kind else {
            continue;
        };
        if !plan.rootfs.parent_built(m) {
            continue;
        }
        // A spec's mounts are a JSON array held in memory: far fewer than 2^32.
        let index = u32::try_from(m.index).expect("fewer than 2^32 mounts");
        if let Some(im) = &m.idmap {
            let fd = idmap::bind(source, &m.opts, im, container.as_ref().map(|f| f.as_fd()))
                .map_err(|e| Error::IdmapBind {
                    index: m.index,
                    what: e.what,
                    source: e.source,
                })?;
            ch.send_mount(index, fd.as_fd())
                .map_err(send("sync: send an idmapped mount"))?;
        } else if plan.rootfs.binds_by_source {
            // Opened in the init's mount namespace (its root is still the host's `/`
            // there), as host root: the init clones it itself (`rootfs::Plan::
            // binds_by_source`). Host symlinks are followed, inside that root.
            let fail = |e| Error::CloneBind {
                index: m.index,
                path: source.clone(),
                source: e,
            };
            if init_root.is_none() {
                let at = format!("/proc/{child}/root");
                init_root =
                    Some(crate::linux::path::Root::open(std::path::Path::new(&at)).map_err(fail)?);
            }
            let fd = init_root
                .as_ref()
                .expect("opened above")
                .open_at(source.to_str().unwrap_or_default(), libc::O_PATH)
                .map_err(fail)?;
            ch.send_mount(index, fd.as_fd())
                .map_err(send("sync: send a bind mount source"))?;
        } else {
            let fd = crate::linux::mount::clone_tree(
                crate::linux::path::cwd(),
                source.to_str().unwrap_or_default(),
                m.opts.recursive,
            )
            .map_err(|e| Error::CloneBind {
                index: m.index,
                path: source.clone(),
                source: e,
            })?;
            ch.send_mount(index, fd.as_fd())
                .map_err(send("sync: send a bind mount"))?;
        }
    }
    Ok(())
}

/// Kills and reaps the child if create fails half-way.
struct KillGuard(Option<i32>);

impl Drop for KillGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = sys::waitpid(pid);
        }
    }
}

/// The row of the create table the child is in while the parent waits in `phase`.
fn waiting_in(phase: Option<sync::Phase>) -> &'static str {
    use sync::Phase as P;
    match phase {
        Some(P::Start | P::Namespaces | P::Mapping | P::Mapped) => "9 (release: namespaces)",
        Some(P::Rootfs) => "10 (rootfs)",
        Some(P::Hooks | P::Pivoted) => "11 (pivot)",
        Some(P::Finalize) => "12–13 (finalize, attributes)",
        _ => "14 (ready)",
    }
}

fn died(pid: i32) -> Error {
    use crate::linux::signal::ChildEnd;
    let status = match sys::waitpid_nohang(pid) {
        Ok(None) => Ok(ChildEnd::Running),
        Ok(Some(raw)) => nix::sys::wait::WaitStatus::from_raw(nix::unistd::Pid::from_raw(pid), raw)
            .map(ChildEnd::from)
            .map_err(io::Error::from),
        Err(e) => Err(e),
    };
    Error::Died { pid, status }
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

/// Hands the seccomp notify fd of `pid` (the init, or an exec'd process) to the agent at
/// `listenerPath`, with runc's message format (the state: the container's `status`, its
/// init's pid).
pub fn send_listener(
    sc: &crate::spec::Seccomp,
    fd: OwnedFd,
    rec: &Record,
    init_pid: i32,
    pid: i32,
    status: &str,
) -> Result<(), Error> {
    let path = sc.listener_path.as_deref().unwrap_or_default();
    let sock =
        sys::connect_unix(std::path::Path::new(path)).map_err(|source| Error::ListenerConnect {
            path: path.to_string(),
            source,
        })?;
    let msg = serde_json::to_vec(&serde_json::json!({
        "ociVersion": crate::spec::OCI_VERSION,
        "fds": ["seccompFd"],
        "pid": pid,
        "metadata": sc.listener_metadata.clone().unwrap_or_default(),
        "state": {
            "ociVersion": crate::spec::OCI_VERSION,
            "id": rec.id, "status": status, "pid": init_pid,
            "bundle": rec.bundle, "annotations": rec.annotations,
        },
    }))
    .expect("serialises");
    sys::send_with_fd(sock.as_fd(), &msg, fd.as_fd()).map_err(|source| Error::ListenerSend {
        path: path.to_string(),
        source,
    })?;
    Ok(())
}
