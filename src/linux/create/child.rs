//! The child's side of the create table (`super`'s module doc): one function per row
//! that has a child column, called in the table's order by [`main`]. It only issues
//! syscalls on data the parent prepared in the plan. Every wait is a read on the sync
//! socket, so if the parent dies the child sees EOF and exits.

use std::os::fd::{AsFd, OwnedFd};

use super::plan::Plan;
use crate::linux::cgroups::Placement;
use crate::linux::killpoint;
use crate::linux::rootfs;
use crate::linux::sync::{self, Channel, InitFailure, Kind, Step, StepExt, ToChild, ToParent};
use crate::linux::{console, devices, hooks, procfs, sys};

/// Entry of the forked child. Never returns: it execs the container process or exits.
pub(super) fn main(
    plan: &Plan,
    placement: Placement,
    ch: &Channel,
    fifo: &OwnedFd,
    console: Option<&OwnedFd>,
) -> ! {
    let err = match init(plan, placement, ch, fifo, console) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    if ch.created() {
        // After `start` (row 15) create has returned and nobody reads the socket: the init
        // says why itself, on the container's stderr and in the create call's `--log`.
        // A failed execve of the container's program is said bare, as runc's init says it
        // (`exec /run.sh: no such file or directory`): the line is about the container's
        // program, and scripts written for runc look for it as the output's first line.
        let mut msg = match err.step {
            Step::Execve => err.to_string(),
            _ => format!("container init: {err}"),
        };
        if let (Some(cut), libc::EPERM | libc::EACCES) = (&plan.cut, err.errno) {
            msg = format!("{msg}; {cut}");
        }
        if err.step == Step::Execve {
            crate::log::error_bare(&msg);
        } else {
            crate::log::error(&msg);
        }
        sys::exit_now(1)
    }
    let _ = ch.send_parent(&ToParent::Failed(err.clone()), None);
    // Wait for the parent to read the failure, so it is reported before we are reaped.
    while matches!(ch.recv_parent(), Ok(m) if !matches!(m, ToChild::Created)) {}
    sys::exit_now(1)
}

enum Never {}

/// The rows, in order; each returns what the next ones need.
fn init(
    plan: &Plan,
    placement: Placement,
    ch: &Channel,
    fifo: &OwnedFd,
    console_sock: Option<&OwnedFd>,
) -> Result<Never, InitFailure> {
    killpoint::at("create", "child", "Fork");
    let mut state = enter(plan, placement, ch)?; // 8
    killpoint::at("create", "child", "Release");
    let mut idmapped = namespaces(plan, ch)?; // 9
    killpoint::at("create", "child", "Rootfs");
    let (mut mounts, pty) = rootfs(plan, ch, &mut idmapped, console_sock)?; // 10
    drop(idmapped);
    killpoint::at("create", "child", "Pivot");
    pivot(plan, ch, &mut state, &mounts)?; // 11
    killpoint::at("create", "child", "Finalize");
    finalize(plan, &mut mounts)?; // 12
    killpoint::at("create", "child", "Attrs");
    let exe = attributes(plan, ch, mounts, pty)?; // 13
    killpoint::at("create", "child", "Ready");
    ready(ch, fifo)?; // 14
    killpoint::at("create", "child", "Start");
    exec(plan, &state, &exe) // 15
}

/// Row 8: in the cgroup (v1 by the inherited `tasks` fds), non-dumpable, `Go` received.
/// Returns the state JSON hooks get.
fn enter(plan: &Plan, placement: Placement, ch: &Channel) -> Result<Vec<u8>, InitFailure> {
    enter_cgroup(placement)?;
    crate::linux::affinity::reset();
    // Nothing in the container may ptrace or read /proc/<pid>/* of this process before exec.
    if !plan.dumpable_until_mapped {
        sys::prctl(libc::PR_SET_DUMPABLE, 0).step(Step::Namespaces, || "PR_SET_DUMPABLE".into())?;
    }
    let ToChild::Go(state) = wait_parent(ch)? else {
        return Err(InitFailure::new(Step::Sync, "expected go"));
    };
    Ok(state)
}

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

/// The parent's next message; EOF (the parent is gone: nobody will ever start us) exits,
/// a message out of order fails the create.
fn wait_parent(ch: &Channel) -> Result<ToChild, InitFailure> {
    match ch.recv_parent() {
        Ok(m) => Ok(m),
        Err(e) => match sync::OutOfOrder::of(&e) {
            Some(o) => Err(InitFailure::new(Step::Sync, o.detail())),
            None => sys::exit_now(1),
        },
    }
}

/// Row 9: procfs handle, namespaces joined and unshared (staged: the init forked), the
/// parent's mount fds received.
fn namespaces(plan: &Plan, ch: &Channel) -> Result<Vec<(u32, OwnedFd)>, InitFailure> {
    let mut idmapped = if plan.idmapped_late() {
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
    Ok(idmapped)
}

/// Row 10: cgroup namespace, keyring, `lo`, hostname; the rootfs and every mount, held by
/// fd from here on; devices; the pty.
fn rootfs(
    plan: &Plan,
    ch: &Channel,
    idmapped: &mut Vec<(u32, OwnedFd)>,
    console_sock: Option<&OwnedFd>,
) -> Result<(rootfs::Mounts, Option<OwnedFd>), InitFailure> {
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
        sys::sethostname(h).step(Step::Hostname, || format!("hostname {h:?}"))?;
    }
    if let Some(d) = &plan.domainname {
        sys::setdomainname(d).step(Step::Hostname, || format!("domainname {d:?}"))?;
    }

    // Root filesystem: every mount moat makes is held by fd from here on.
    let mut mounts = rootfs::mount_all(&plan.rootfs, idmapped, &|index, tree| {
        ch.idmap_please(index, tree)
    })?;
    if plan.rootfs.default_devices || !plan.devices.is_empty() {
        devices::create(&mut mounts, &plan.devices, plan.userns)?;
    }
    if plan.rootfs.default_devices {
        devices::symlinks(&mounts, plan.rootfs.kcore)?;
    }
    let pty = if plan.attrs.terminal {
        let (master, peer) = console::open_pty_in(&mounts)?;
        console::give_to_user(peer.as_fd(), plan.attrs.uid)?;
        console::mount_console(&mut mounts, peer.as_fd())?;
        if let Some(sock) = console_sock {
            console::send_master(
                sock.as_fd(),
                master.as_fd(),
                plan.attrs.console_size,
                plan.attrs.clear_onlcr,
            )?;
        }
        Some(peer)
    } else {
        None
    };
    Ok((mounts, pty))
}

/// Row 11: the parent's hooks asked for, createContainer hooks, `pivot_root` (a late init
/// is forked right after).
fn pivot(
    plan: &Plan,
    ch: &Channel,
    state: &mut Vec<u8>,
    mounts: &rootfs::Mounts,
) -> Result<(), InitFailure> {
    ch.send_parent(&ToParent::HooksPlease, None)
        .step(Step::Sync, || "hooks".into())?;
    if let ToChild::HooksDone(s) = wait_parent(ch)? {
        *state = s;
    }
    if let Some(h) = plan
        .hooks
        .as_ref()
        .filter(|h| !h.create_container.is_empty())
    {
        // The hooks' working directory is the container's root, as runc's (a hook may
        // `touch ./lib/…`): entered by the held fd, inherited by each hook. pivot_root
        // enters it again anyway.
        sys::fchdir(mounts.root().fd()).step(Step::Hooks, || {
            "createContainer: chdir to the container's root".into()
        })?;
        hooks::run("createContainer", &h.create_container, state)
            .map_err(|e| InitFailure::new(Step::Hooks, e.to_string()))?;
    }
    rootfs::pivot(mounts, plan.rootfs.no_pivot)?;
    if plan.ns.late_init {
        // Inside the container's root now: the init may appear in the joined pid namespace.
        fork_init(ch)?;
        procfs::renew();
    }
    Ok(())
}

/// Row 12: sysctls, read-only and masked paths, read-only root, personality.
fn finalize(plan: &Plan, mounts: &mut rootfs::Mounts) -> Result<(), InitFailure> {
    // sysctls go in before /proc/sys becomes a read-only path.
    for (key, value) in &plan.sysctl {
        procfs::write_sysctl(key, value).step(Step::Sysctl, || format!("linux.sysctl {key}"))?;
    }
    rootfs::finalize(&plan.rootfs, mounts)?;
    rootfs::set_root_propagation(&plan.rootfs, mounts)?;
    if let Some(p) = plan.personality {
        sys::personality(p).step(Step::Personality, || "linux.personality".into())?;
    }
    Ok(())
}

/// Row 13: a session, the process attributes (`attrs::apply`: the seccomp listener goes
/// to the parent the moment its filter is loaded), the pty as stdio. Returns the
/// executable.
fn attributes(
    plan: &Plan,
    ch: &Channel,
    mounts: rootfs::Mounts,
    pty: Option<OwnedFd>,
) -> Result<crate::linux::attrs::Exe, InitFailure> {
    // Before any filter can refuse rt_sigaction: `kill` of the created init must end it.
    sys::exit_on_terminating_signals();
    if pty.is_none() {
        // A session of its own without a terminal too (with one, make_stdio does it):
        // the caller's terminal must never be the container's controlling terminal,
        // which TIOCSTI could type into. Before `apply`, so no profile can refuse it.
        sys::setsid().step(Step::Console, || "setsid".into())?;
    }
    // The mounts moat holds are closed before the spec's RLIMIT_NOFILE goes in: the
    // parent gave the init room for them (`create::parent::nofile_for_setup`); lowering a
    // limit needs no privilege, and no profile is loaded yet to refuse it.
    let root = sys::dup_cloexec(mounts.root().fd()).step(Step::Cwd, || "hold the root".into())?;
    drop(mounts);
    for &(res, soft, hard) in &plan.attrs.rlimits {
        if res == libc::RLIMIT_NOFILE as libc::c_int {
            sys::prlimit(0, res, soft, hard)
                .step(Step::Exec, || "process.rlimits: RLIMIT_NOFILE".into())?;
        }
    }
    // cwd is resolved inside the held root (a spec path: in-root symlinks followed).
    let exe = plan.attrs.apply(root.as_fd(), &mut |listener| {
        ch.send_parent(&ToParent::Listener, Some(listener.as_fd()))
            .step(Step::Seccomp, || "send the listener to moat".into())
    })?;
    drop(root);
    if let Some(peer) = &pty {
        console::make_stdio(peer)?;
    }
    drop(pty);
    Ok(exe)
}

/// Row 14: `Ready`, `Created`, then blocked on `exec.fifo`.
fn ready(ch: &Channel, fifo: &OwnedFd) -> Result<(), InitFailure> {
    // Ready; wait to be started.
    ch.send_parent(&ToParent::Ready, None)
        .step(Step::Sync, || "ready".into())?;
    wait_parent(ch)?;
    wait_start(fifo)
}

/// Row 15: startContainer hooks, then signals and `execve` (`attrs::exec`).
fn exec(plan: &Plan, state: &[u8], exe: &crate::linux::attrs::Exe) -> Result<Never, InitFailure> {
    if let Some(h) = &plan.hooks {
        // A startContainer hook without an `env` of its own gets the process's, as runc's
        // hooks always have (not the spec's rule, but what hooks written for runc expect).
        let env: Vec<String> = exe
            .env
            .as_ref()
            .unwrap_or(&plan.attrs.env)
            .iter()
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        let mut start = h.start_container.clone();
        for hook in start.iter_mut().filter(|h| h.env.is_empty()) {
            hook.env.clone_from(&env);
        }
        hooks::run("startContainer", &start, state)
            .map_err(|e| InitFailure::new(Step::Hooks, e.to_string()))?;
    }
    Err(plan.attrs.exec(exe))
}

/// The mount fds the parent sends (`parent::send_idmapped`).
fn recv_idmapped(plan: &Plan, ch: &Channel) -> Result<Vec<(u32, OwnedFd)>, InitFailure> {
    (0..plan.rootfs.idmapped_count())
        .map(|_| {
            ch.recv_mount()
                .step(Step::Mounts, || "receive an idmapped mount".into())
        })
        .collect()
}

/// Row 9, staged: the intermediate joins by path, unshares, and forks the init (or, with
/// a late init, gets the procfs contexts it needs and stays to set up the rootfs).
fn staged_namespaces(
    plan: &Plan,
    ch: &Channel,
    idmapped: &mut Vec<(u32, OwnedFd)>,
) -> Result<(), InitFailure> {
    // Before anything is joined: the mount namespace is still moat's own.
    procfs::open_own()?;
    // With moat's credentials, which the kernel checks on the write (`procfs`).
    let timens_offsets = if plan.ns.time_offsets.is_empty() {
        None
    } else {
        Some(procfs::open_timens_offsets().step(Step::Namespaces, || "linux.timeOffsets".into())?)
    };
    let join = |j: &crate::linux::namespaces::Join| {
        sys::setns(j.fd.as_fd(), j.flag).step(Step::Namespaces, || format!("join {}", j.path))
    };
    // The mount namespace last: joining it moves root and cwd.
    let others = plan.ns.joins.iter().chain(plan.ns.mount_join.iter());
    let mut left = Vec::new();
    if let Some(user) = &plan.ns.user_join {
        // As runc: the others first, with moat's credentials, since the joined user
        // namespace need not own them (a network namespace an engine made on the host);
        // one moat may not join yet (EPERM: a rootless moat has CAP_SYS_ADMIN only in
        // the user namespace) is joined after it, as its root.
        for j in others {
            match sys::setns(j.fd.as_fd(), j.flag) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => left.push(j),
                r => r.step(Step::Namespaces, || format!("join {}", j.path))?,
            }
        }
        join(user)?;
        become_root()?;
    } else {
        left.extend(others);
    }
    for j in left {
        join(j)?;
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
    if let Some(file) = timens_offsets {
        procfs::write_timens_offsets(&file, &plan.ns.time_offsets)
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
    let empty = crate::linux::mount::new_fs("tmpfs", None, &[]).step(Step::Namespaces, what)?;
    crate::linux::mount::setattr(empty.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0)
        .step(Step::Namespaces, what)?;
    let dir = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let root = sys::openat(crate::linux::path::cwd(), c"/", dir, 0).step(Step::Namespaces, what)?;
    let cwd = sys::openat(crate::linux::path::cwd(), c".", dir, 0).step(Step::Namespaces, what)?;
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
                && (0u32..).take(n).all(|i| {
                    sys::fsopen(c"proc").is_ok_and(|fc| theirs.send_mount(i, fc.as_fd()).is_ok())
                });
            sys::exit_now(if ok { 0 } else { 1 })
        }
        sys::Forked::Parent(pid) => {
            drop(theirs);
            let got: Result<Vec<OwnedFd>, _> =
                (0..n).map(|_| ours.recv_mount().map(|m| m.1)).collect();
            let _ = sys::waitpid(pid);
            crate::linux::mount::set_proc_contexts(Some(got.step(Step::Namespaces, what)?));
            Ok(())
        }
    }
}

/// Forks the init (staged create; [`NsPlan::late_init`]: after `pivot_root`); this
/// process reports the init's pid and exits. The init goes on only once that report is
/// sent (EOF on a pipe at this process's exit), so the parent never takes a message of
/// the init's for one of this process's.
fn fork_init(ch: &Channel) -> Result<(), InitFailure> {
    let (r, w) = sys::pipe().step(Step::Namespaces, || "pipe".into())?;
    match sys::clone_fork(0, None).step(Step::Namespaces, || "fork init".into())? {
        sys::Forked::Child => {
            drop(w);
            // Blocks until the intermediate exits (EOF); `read` retries EINTR.
            let _ = sys::read(r.as_fd(), &mut [0u8; 1]);
            drop(r);
            // In the pid namespace now: its own fsopen("proc") is right again.
            crate::linux::mount::set_proc_contexts(None);
            // The intermediate reports this process's pid for it.
            ch.sent_for_us(Kind::InitPid)
                .step(Step::Sync, || "init pid".into())?;
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
    sys::poll_readable(fifo.as_fd()).step(Step::Sync, || "wait for start".into())?;
    let mut b = [0u8; 1];
    match sys::read(fifo.as_fd(), &mut b) {
        Ok(1) => Ok(()),
        _ => Err(InitFailure::new(
            Step::Sync,
            "exec fifo closed without a start",
        )),
    }
}

/// The child's rows (8–15) under the recording fake of `sys` (no kernel, no root): the
/// order of the table, as relations over the recorded calls. The parent is scripted:
/// its messages are the fake's answers to the child's reads of the sync socket, and the
/// child's end of the channel is a real create channel, so its phase machine checks
/// every message both ways.
#[cfg(test)]
pub(crate) mod tests {
    use std::os::fd::AsFd;
    use std::path::{Path, PathBuf};

    use super::super::plan::Options;
    use super::*;
    use crate::linux::cgroups::{Hierarchy, Layout};
    use crate::linux::hostfacts::HostFacts;
    use crate::linux::sync::{create_pair, wire, wire_tag, Kind};
    use crate::linux::sys::record::{assert_before, named, position, Call, Fake, Reply};
    use crate::policy;

    const PROC_SUPER_MAGIC: u64 = 0x9fa0;

    /// A bundle on disk (its rootfs and a bind source), removed on drop.
    struct Bundle(PathBuf);

    impl Drop for Bundle {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A v1 layout (pids and devices), as on a hybrid host; nothing probed.
    fn layout(
        _: Option<&str>,
        id: &str,
        _: bool,
    ) -> Result<(Layout, String), crate::linux::cgroups::CgroupError> {
        let h = |c: &str| Hierarchy {
            mount: Path::new("/sys/fs/cgroup").join(c),
            controllers: vec![c.to_string()],
            v2: false,
        };
        Ok((
            Layout {
                unified: false,
                hierarchies: vec![h("pids"), h("devices")],
            },
            format!("/moat/{id}"),
        ))
    }

    /// The plan of a small spec: new pid, mount, uts, ipc, net and cgroup namespaces (and
    /// a time namespace when `staged`, which makes the create staged), a hostname, /proc,
    /// a bind and a tmpfs, a masked and a read-only path, a sysctl, capabilities, a user,
    /// NNP and a seccomp filter.
    fn plan(staged: bool) -> (Plan, Bundle) {
        let dir =
            std::env::temp_dir().join(format!("moat-create-order-{}-{staged}", std::process::id()));
        std::fs::create_dir_all(dir.join("rootfs")).expect("rootfs");
        std::fs::create_dir_all(dir.join("data")).expect("bind source");
        let bundle = Bundle(dir.clone());
        let mut namespaces = vec![
            serde_json::json!({"type": "pid"}),
            serde_json::json!({"type": "mount"}),
            serde_json::json!({"type": "uts"}),
            serde_json::json!({"type": "ipc"}),
            serde_json::json!({"type": "network"}),
            serde_json::json!({"type": "cgroup"}),
        ];
        if staged {
            namespaces.push(serde_json::json!({"type": "time"}));
        }
        let caps = ["CAP_NET_BIND_SERVICE", "CAP_CHOWN"];
        let spec = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {
                "args": ["/bin/app"],
                "cwd": "/",
                "env": ["PATH=/bin"],
                "user": {"uid": 1000, "gid": 1000},
                "noNewPrivileges": true,
                "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            },
            "root": {"path": "rootfs"},
            "hostname": "box",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/data", "type": "bind", "source": dir.join("data"),
                 "options": ["rbind", "ro"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                 "options": ["nosuid", "mode=1777"]},
            ],
            "linux": {
                "namespaces": namespaces,
                "maskedPaths": ["/proc/kcore"],
                "readonlyPaths": ["/proc/sys"],
                "sysctl": {"net.ipv4.ip_forward": "1"},
                "seccomp": {
                    "defaultAction": "SCMP_ACT_ALLOW",
                    "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"}],
                },
            },
        });
        let mut spec: crate::spec::Spec = serde_json::from_value(spec).expect("the spec");
        let cfg = policy::Config {
            default_policy: policy::config::Mode::Open,
            ..Default::default()
        };
        let (host, floor) = (HostFacts::default(), policy::FloorFacts::default());
        let decision = policy::apply(&mut spec, &cfg, "order", &host, &floor).expect("the policy");
        let decided = policy::Decided {
            decision,
            host,
            floor,
        };
        let opts = Options {
            id: "order".into(),
            bundle: dir.clone(),
            console_socket: None,
            pidfd_socket: None,
            pid_file: None,
            no_pivot: false,
            new_keyring: false,
            preserve_fds: 0,
            listen_fds: 0,
            systemd_cgroup: false,
            foreground: false,
            rootless: false,
            root: dir.join("state"),
            notify_socket: None,
        };
        let plan = Plan::with_host_cgroup(spec, &cfg, decided, opts, layout).expect("the plan");
        assert_eq!(plan.ns.staged, staged);
        (plan, bundle)
    }

    /// Rows 8–15 under the fake, the parent's messages scripted in the protocol's order;
    /// the run ends at the (faked) `execve`, which "fails".
    fn record(staged: bool) -> Vec<Call> {
        let (plan, _bundle) = plan(staged);
        let (_parent, child) = create_pair(plan.shape()).expect("socketpair");
        let state = b"{\"id\":\"order\"}".to_vec();
        let fake = Fake::new()
            .name_fd(child.sock.as_fd(), "sync")
            // The fake's procfs handle is moat's own procfs.
            .reply("fstatfs", Reply::Statfs(PROC_SUPER_MAGIC))
            .reply("readlinkat", Reply::Bytes(b"7/task/7".to_vec()))
            .then(
                "fstat",
                Reply::Stat {
                    mode: libc::S_IFDIR | 0o555,
                    rdev: 0,
                    ino: 1,
                },
            )
            // The parent: Go, HooksDone, Created.
            .then("recv_msg", Reply::Bytes(wire(&ToChild::Go(state.clone()))))
            .then("recv_msg", Reply::Bytes(wire(&ToChild::HooksDone(state))))
            .then("recv_msg", Reply::Bytes(wire(&ToChild::Created)))
            // After pivot_root the old root is stacked on the new one; /dev/null is the
            // null device.
            .after("pivot_root", "mount_id", Reply::Int(2))
            .after(
                "pivot_root",
                "fstat",
                Reply::Stat {
                    mode: libc::S_IFCHR | 0o666,
                    rdev: libc::makedev(1, 3),
                    ino: 6,
                },
            )
            // `moat start` writes the fifo.
            .after("poll_readable", "read", Reply::Bytes(vec![0]));
        let (failure, calls) = fake.run(move || {
            let placement = Placement::v1(vec![
                (
                    "/sys/fs/cgroup/pids/moat/order/tasks".into(),
                    record::fd("tasks:pids"),
                ),
                (
                    "/sys/fs/cgroup/devices/moat/order/tasks".into(),
                    record::fd("tasks:devices"),
                ),
            ]);
            let fifo = record::fd("exec.fifo");
            match init(&plan, placement, &child, &fifo, None) {
                Ok(never) => match never {},
                Err(e) => e,
            }
        });
        reached_execve(&failure, &calls);
        calls
    }

    /// The faked execve "fails" with errno 0: the sequence ran to its end (shared with the
    /// exec order test).
    pub(crate) fn reached_execve(failure: &InitFailure, calls: &[Call]) {
        assert_eq!(
            failure.step,
            Step::Execve,
            "{failure}:\n{}",
            record::show(calls)
        );
    }

    use crate::linux::sys::record;

    fn tasks_write(c: &Call) -> bool {
        c.name == "write" && c.arg("fd").is_some_and(|f| f.starts_with("tasks:"))
    }

    fn dumpable(c: &Call) -> bool {
        c.name.starts_with("prctl") && c.arg("option") == Some(&libc::PR_SET_DUMPABLE.to_string())
    }

    fn ns_change(c: &Call) -> bool {
        c.name == "setns" || c.name == "unshare"
    }

    fn cgroupns(c: &Call) -> bool {
        c.name == "unshare" && c.arg("flags") == Some(&libc::CLONE_NEWCGROUP.to_string())
    }

    fn other_ns(c: &Call) -> bool {
        ns_change(c) && !cgroupns(c)
    }

    /// A mount made or changed (not the procfs handle's own instance).
    fn mount(c: &Call) -> bool {
        matches!(
            c.name,
            "mount" | "move_mount_fd" | "mount_setattr" | "pivot_root"
        )
    }

    fn sysctl(c: &Call) -> bool {
        c.name == "openat2"
            && c.arg("path")
                .is_some_and(|p| p.contains("sys/net/ipv4/ip_forward"))
    }

    /// The attach onto the target the first `openat2` of `path` returned.
    fn attach_onto(calls: &[Call], path: &str) -> impl Fn(&Call) -> bool {
        let quoted = format!("{path:?}");
        let i = position(calls, path, |c| {
            c.name == "openat2" && c.arg("path") == Some(quoted.as_str())
        });
        let to = calls[i].ret.clone().expect("an fd");
        move |c| c.name == "move_mount_fd" && c.arg("to") == Some(to.as_str())
    }

    fn sent(kind: Kind) -> impl Fn(&Call) -> bool {
        let tag = format!("{:?}", String::from_utf8_lossy(&[wire_tag(kind)]));
        move |c| {
            c.name == "send_msg"
                && c.arg("data")
                    .is_some_and(|d| d.starts_with(&tag[..tag.len() - 1]))
        }
    }

    /// The first call `a` accepts comes before the first `b` accepts.
    fn first_before(
        calls: &[Call],
        (a_what, a): (&str, impl Fn(&Call) -> bool),
        (b_what, b): (&str, impl Fn(&Call) -> bool),
    ) {
        let (ia, ib) = (position(calls, a_what, a), position(calls, b_what, b));
        assert!(
            ia < ib,
            "{a_what} (call {ia}) must come before {b_what} (call {ib}, the first):\n{}",
            record::show(calls)
        );
    }

    fn assert_order(calls: &[Call]) {
        // Row 8: in the cgroup before anything of the container is joined; non-dumpable
        // before the first namespace change.
        assert_before(
            calls,
            ("cgroup entry (tasks write)", tasks_write),
            ("a namespace call", ns_change),
        );
        assert_before(
            calls,
            ("cgroup entry (tasks write)", tasks_write),
            ("PR_SET_DUMPABLE", dumpable),
        );
        first_before(
            calls,
            ("PR_SET_DUMPABLE", dumpable),
            ("a namespace call", ns_change),
        );
        // Row 9: the procfs handle (a new proc instance) before any mount; namespaces
        // before any mount; the cgroup namespace after the others.
        first_before(
            calls,
            ("procfs handle", |c: &Call| {
                c.name == "fsopen" && c.arg("fstype") == Some("\"proc\"")
            }),
            ("a mount", mount),
        );
        assert_before(calls, ("unshare/setns", ns_change), ("mount", mount));
        if calls.iter().any(other_ns) {
            assert_before(
                calls,
                ("unshare/setns", other_ns),
                ("unshare cgroup ns", cgroupns),
            );
        }
        // Row 10: hostname in the new uts namespace, before the rootfs.
        assert_before(
            calls,
            ("a namespace call", ns_change),
            ("sethostname", named("sethostname")),
        );
        assert_before(
            calls,
            ("sethostname", named("sethostname")),
            ("a mount", mount),
        );
        // Rows 10–11: the rootfs mounts before pivot_root.
        for m in ["proc", "data", "tmp"] {
            let onto = attach_onto(calls, m);
            assert_before(calls, (m, &onto), ("pivot_root", named("pivot_root")));
        }
        // Row 11: HooksPlease, then pivot_root.
        assert_before(
            calls,
            ("HooksPlease", sent(Kind::HooksPlease)),
            ("pivot_root", named("pivot_root")),
        );
        // Row 12: sysctls after pivot_root, before read-only paths, before masks.
        assert_before(
            calls,
            ("pivot_root", named("pivot_root")),
            ("sysctl write", sysctl),
        );
        let ro = attach_onto(calls, "sys");
        let mask = attach_onto(calls, "kcore");
        assert_before(calls, ("sysctl write", sysctl), ("readonly /proc/sys", &ro));
        assert_before(
            calls,
            ("readonly /proc/sys", &ro),
            ("mask /proc/kcore", &mask),
        );
        // Row 13: setsid before attrs::apply's first call (its scheduler/ioprio/NNP/…;
        // the first capability or id change at the latest).
        let apply_first = |c: &Call| {
            c.name == "seccomp_set_filter"
                || c.name == "capset"
                || c.name == "setgroups"
                || c.name == "setresgid"
                || c.name == "ioprio_set"
                || (c.name.starts_with("prctl")
                    && c.arg("option") == Some(&libc::PR_SET_NO_NEW_PRIVS.to_string()))
        };
        assert_before(
            calls,
            ("mask /proc/kcore", &mask),
            ("setsid", named("setsid")),
        );
        assert_before(
            calls,
            ("setsid", named("setsid")),
            ("attrs::apply", apply_first),
        );
        // Row 14: everything before Ready; then the fifo.
        let ready = position(calls, "Ready", sent(Kind::Ready));
        for (i, c) in calls.iter().enumerate().skip(ready + 1) {
            assert!(
                matches!(
                    c.name,
                    "recv_msg"
                        | "poll_readable"
                        | "read"
                        | "close_range_from"
                        | "reset_signals"
                        | "execve"
                ),
                "call {i} {c} after Ready:\n{}",
                record::show(calls)
            );
        }
        assert_before(
            calls,
            ("Ready", sent(Kind::Ready)),
            ("wait on exec.fifo", named("poll_readable")),
        );
        // Row 13 swept the fds (close_range); row 15: execve last.
        let last = calls.last().expect("calls");
        assert_eq!(last.name, "execve", "{}", record::show(calls));
        assert_before(
            calls,
            ("close_range", named("close_range_from")),
            ("execve", named("execve")),
        );
    }

    #[test]
    fn create_child_order_direct() {
        let calls = record(false);
        assert!(
            !calls.iter().any(other_ns),
            "direct: the parent's clone made them"
        );
        assert_order(&calls);
    }

    #[test]
    fn create_child_order_staged() {
        let calls = record(true);
        assert!(calls.iter().any(other_ns), "{}", record::show(&calls));
        assert_order(&calls);
    }
}
