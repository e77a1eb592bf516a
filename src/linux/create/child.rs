//! The child's side of the create table (`super`'s module doc): one function per row
//! that has a child column, called in the table's order by [`main`]. It only issues
//! syscalls on data the parent prepared in the plan. Every wait is a read on the sync
//! socket, so if the parent dies the child sees EOF and exits.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};

use super::plan::Plan;
use crate::linux::cgroups::Placement;
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
    let mut state = enter(plan, placement, ch)?; // 8
    let mut idmapped = namespaces(plan, ch)?; // 9
    let (mut mounts, pty) = rootfs(plan, &mut idmapped, console_sock)?; // 10
    drop(idmapped);
    pivot(plan, ch, &mut state, &mounts)?; // 11
    finalize(plan, &mut mounts)?; // 12
    let (exe, listener) = attributes(plan, mounts, pty)?; // 13
    ready(ch, listener, fifo)?; // 14
    exec(plan, &state, &exe) // 15
}

/// Row 8: in the cgroup (v1 by the inherited `tasks` fds), non-dumpable, `Go` received.
/// Returns the state JSON hooks get.
fn enter(plan: &Plan, placement: Placement, ch: &Channel) -> Result<Vec<u8>, InitFailure> {
    enter_cgroup(placement)?;
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
        nix::unistd::sethostname(h)
            .map_err(io::Error::from)
            .step(Step::Hostname, || format!("hostname {h:?}"))?;
    }
    if let Some(d) = &plan.domainname {
        sys::setdomainname(d).step(Step::Hostname, || format!("domainname {d:?}"))?;
    }

    // Root filesystem: every mount moat makes is held by fd from here on.
    let mut mounts = rootfs::mount_all(&plan.rootfs, idmapped)?;
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
    if let Some(h) = &plan.hooks {
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

/// Row 13: a session, the process attributes (`attrs::apply`), the pty as stdio. Returns
/// the executable and the seccomp listener.
fn attributes(
    plan: &Plan,
    mounts: rootfs::Mounts,
    pty: Option<OwnedFd>,
) -> Result<(std::ffi::CString, Option<OwnedFd>), InitFailure> {
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
    Ok((exe, listener))
}

/// Row 14: `Ready` (with the seccomp listener), `Created`, then blocked on `exec.fifo`.
fn ready(ch: &Channel, listener: Option<OwnedFd>, fifo: &OwnedFd) -> Result<(), InitFailure> {
    // Ready; wait to be started.
    ch.send_parent(&ToParent::Ready, listener.as_ref().map(|l| l.as_fd()))
        .step(Step::Sync, || "ready".into())?;
    drop(listener);
    wait_parent(ch)?;
    wait_start(fifo)
}

/// Row 15: startContainer hooks, then the fd sweep, signals and `execve` (`attrs::exec`).
fn exec(plan: &Plan, state: &[u8], exe: &std::ffi::CStr) -> Result<Never, InitFailure> {
    if let Some(h) = &plan.hooks {
        hooks::run("startContainer", &h.start_container, state)
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
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
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
