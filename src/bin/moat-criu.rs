//! moat-criu: moat's CRIU client, a program of its own.
//!
//! moat runs it (next to its own binary) for each conversation with CRIU: one JSON request
//! on stdin, one JSON reply on stdout (`src/linux/criu/wire.rs`). It speaks CRIU's RPC to a
//! `criu swrk` it starts, through the `rust-criu` crate. Keeping the crate's generated
//! protobuf code and the protobuf runtime out of `moat` keeps them off the start-up cost of
//! every container that is never checkpointed.

#[path = "../linux/criu/wire.rs"]
mod wire;

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};

use wire::{Answer, Reply, Request};

fn main() {
    // CRIU (and what it restores) inherit fd 1: the reply goes to a copy of it, fd 1 to
    // /dev/null.
    let reply_fd = std::io::stdout().as_fd().try_clone_to_owned();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2(null.as_raw_fd(), 1);
    }
    let mut input = String::new();
    let reply: Reply = match std::io::stdin().read_to_string(&mut input) {
        Ok(_) => match serde_json::from_str::<Request>(&input) {
            Ok(req) => run(req),
            Err(e) => Err(format!("moat-criu: bad request: {e}")),
        },
        Err(e) => Err(format!("moat-criu: read the request: {e}")),
    };
    let out = serde_json::to_vec(&reply).unwrap_or_default();
    if let Ok(fd) = reply_fd {
        let _ = std::fs::File::from(fd).write_all(&out);
    }
}

fn run(req: Request) -> Reply {
    match req {
        Request::Version { criu } => version(criu),
        Request::Dump(d) => dump(d),
        Request::Restore(r) => restore(r),
    }
}

/// The restored init's pid, from CRIU's notifications (a plain `fn` is what rust-criu
/// takes as the callback).
static RESTORED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// What the restored tree must be (moat's plan), set before the restore starts.
static EXPECT: std::sync::OnceLock<wire::Expect> = std::sync::OnceLock::new();
/// Why the restored tree was refused, for the reply.
static REFUSED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// CRIU's notifications. `pre-resume` is the last one while every restored task is still
/// stopped under CRIU's ptrace (after `post-restore`, CRIU restores the credentials,
/// seccomp included, then stops each task at its final `rt_sigreturn`; `pre-resume` comes
/// before it detaches): the restored tree is compared with moat's plan there, and on a
/// mismatch killed before it runs one restored instruction. (CRIU does not abort on a
/// failed `pre-resume`, so the kill is ours; `post-restore` would abort, but comes before
/// the credentials are restored, so it cannot see them.)
fn notified(
    script: &str,
    notify: &rust_criu::rust_criu_protobuf::rpc::Criu_notify,
    _fd: Option<std::os::fd::RawFd>,
) -> i32 {
    use std::sync::atomic::Ordering::SeqCst;
    if (script == "post-restore" || script == "setup-namespaces") && notify.pid() > 0 {
        RESTORED.store(notify.pid(), SeqCst);
    }
    if script == "pre-resume" {
        let pid = match RESTORED.load(SeqCst) {
            0 => notify.pid(),
            p => p,
        };
        let Some(expect) = EXPECT.get() else {
            return 0;
        };
        let tree = tree(pid);
        if let Err(why) = compare(expect, pid, &tree) {
            // Stopped under CRIU's ptrace and not yet reaped, so the pids are still
            // theirs: SIGKILL ends them before they resume (moat then kills what is left
            // in the container's cgroup and removes it).
            for p in tree.iter().rev() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            if let Ok(mut r) = REFUSED.lock() {
                *r = Some(why);
            }
            return 1;
        }
    }
    0
}

/// The init and its descendants (`/proc/<pid>/task/<tid>/children`), init first.
fn tree(init: i32) -> Vec<i32> {
    let mut all = vec![init];
    let mut i = 0;
    while i < all.len() && all.len() < 100_000 {
        let p = all[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                all.extend(
                    kids.split_whitespace()
                        .filter_map(|k| k.parse::<i32>().ok()),
                );
            }
        }
        i += 1;
    }
    all
}

/// The first way the restored tree differs from moat's plan, in one line.
fn compare(e: &wire::Expect, init: i32, tree: &[i32]) -> Result<(), String> {
    use wire::NsRule;
    for ns in &e.namespaces {
        let got = std::fs::read_link(format!("/proc/{init}/ns/{}", ns.name))
            .map(|l| l.display().to_string())
            .map_err(|err| format!("the restored init's {} namespace: {err}", ns.name))?;
        match &ns.rule {
            NsRule::Own { host } if &got == host => {
                return Err(format!(
                    "restored into the host's {} namespace where the spec asks for a new one",
                    ns.name
                ))
            }
            NsRule::Host { host } if &got != host => {
                return Err(format!(
                    "restored into a {} namespace of its own ({got}) where the spec has the host's ({host})",
                    ns.name
                ))
            }
            NsRule::Joined { link, path } if &got != link => {
                return Err(format!(
                    "restored into {} namespace {got}, not the one the spec joins ({path}: {link})",
                    ns.name
                ))
            }
            _ => {}
        }
    }
    // The init's mount namespace: every process of the tree shares it (CRIU restores
    // none other that moat's plan could make).
    let mountinfo = std::fs::read_to_string(format!("/proc/{init}/mountinfo"))
        .map_err(|err| format!("the restored init's mountinfo: {err}"))?;
    let got = wire::mount_table(&mountinfo, &e.given);
    if let Some(d) = mount_difference(&e.mounts, &got) {
        return Err(format!("restored mounts: {d}"));
    }
    let init_mnt = std::fs::read_link(format!("/proc/{init}/ns/mnt"))
        .map_err(|err| format!("the restored init's mount namespace: {err}"))?;
    for &pid in tree {
        // Only the init's mount table is compared: a process in another mount namespace
        // could hold any mount the image listed.
        match std::fs::read_link(format!("/proc/{pid}/ns/mnt")) {
            Ok(l) if l == init_mnt => {}
            // Gone (a zombie of the image): checked below by its status.
            Err(_) => {}
            Ok(l) => {
                return Err(format!(
                    "restored process {pid} is in a mount namespace of its own ({}), whose mounts a checkpoint does not record",
                    l.display()
                ))
            }
        }
    }
    for &pid in tree {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|err| format!("restored process {pid}: status: {err}"))?;
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(':'))
                .map(str::trim)
        };
        // A zombie of the image (a child that had exited, unreaped, at the dump) is
        // restored as a task that exits at once, with CRIU's credentials: it runs nothing
        // and is in no cgroup's `cgroup.procs`.
        if field("State").is_some_and(|s| s.starts_with('Z') || s.starts_with('X')) {
            continue;
        }
        let hex = |k: &str| -> Result<u64, String> {
            field(k)
                .and_then(|v| u64::from_str_radix(v, 16).ok())
                .ok_or_else(|| format!("restored process {pid}: no {k} in its status"))
        };
        for (k, bound) in [
            ("CapBnd", e.cap_bounding),
            ("CapEff", e.cap_effective),
            ("CapPrm", e.cap_permitted),
            ("CapInh", e.cap_inheritable),
            ("CapAmb", e.cap_ambient),
        ] {
            let got = hex(k)?;
            if got & !bound != 0 {
                return Err(format!(
                    "restored process {pid} has {k} {got:016x}, more than the spec gives ({bound:016x})"
                ));
            }
        }
        if e.no_new_privs && field("NoNewPrivs") != Some("1") {
            return Err(format!(
                "restored process {pid} lacks no_new_privs, which the spec sets"
            ));
        }
        if e.seccomp_filters > 0 {
            if field("Seccomp") != Some("2") {
                return Err(format!(
                    "restored process {pid} has seccomp mode {}, not the filter mode (2) the spec loads",
                    field("Seccomp").unwrap_or("?")
                ));
            }
            // Counted by kernels since 5.9; an older one shows no count to compare.
            if let Some(n) = field("Seccomp_filters").and_then(|v| v.parse::<u32>().ok()) {
                if n < e.seccomp_filters {
                    return Err(format!(
                        "restored process {pid} has {n} seccomp filters, fewer than the {} moat loads",
                        e.seccomp_filters
                    ));
                }
            }
        }
        for dir in &e.cgroup_dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs"))
                .map_err(|err| format!("{}: {err}", dir.join("cgroup.procs").display()))?;
            if !procs.lines().any(|l| l.trim() == pid.to_string()) {
                return Err(format!(
                    "restored process {pid} is not in the container's cgroup {}",
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

/// `RESTORE`: cgroups ignored (moat made the container's from its record and put this
/// helper in them, so the restored tree is born there), the mounts the dump named external
/// bound from the paths moat gives, CRIU's log `restore.log`.
fn restore(r: wire::Restore) -> Reply {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("unshare a mount namespace: {e}"))?;
    if r.cgroupns {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP)
            .map_err(|e| format!("unshare a cgroup namespace: {e}"))?;
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("make / a slave: {e}"))?;
    mount(
        Some(&r.root),
        &r.root,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("bind {} onto itself: {e}", r.root.display()))?;
    for bound in prepare_binds(&r.root, &r.binds)?.iter().rev() {
        rustix::mount::unmount(
            format!("/proc/self/fd/{}", bound.as_raw_fd()),
            rustix::mount::UnmountFlags::DETACH,
        )
        .map_err(|e| format!("take the binds made for their mount points off again: {e}"))?;
    }
    let images = dir_fd(&r.images_dir, "--image-path")?;
    let work = match &r.work_dir {
        Some(w) => Some(dir_fd(w, "--work-path")?),
        None => None,
    };
    let mut c = rust_criu::Criu::new_with_criu_path(r.criu.clone())
        .map_err(|e| format!("criu {}: {e}", r.criu))?;
    c.set_images_dir_fd(images.as_raw_fd());
    if let Some(w) = &work {
        c.set_work_dir_fd(w.as_raw_fd());
    }
    c.set_log_level(4);
    c.set_log_file("restore.log".into());
    c.set_root(r.root.display().to_string());
    c.cgroups_mode(rust_criu::CgMode::IGNORE);
    c.set_notify_scripts(true);
    c.set_notify_cb(notified);
    let _ = EXPECT.set(r.expect.clone());
    for (fd, key) in &r.inherit_fd {
        c.add_inherit_fd(*fd, key.clone())
            .map_err(|e| format!("inherit_fd {key}: {e}"))?;
    }
    for (k, v) in r.ext_mnt {
        c.set_external_mount(k, v);
    }
    if r.console_fd.is_some() {
        c.set_orphan_pts_master(true);
    }
    let log = r
        .work_dir
        .as_ref()
        .unwrap_or(&r.images_dir)
        .join("restore.log");
    let done = c.restore();
    if let Some(why) = REFUSED.lock().ok().and_then(|mut r| r.take()) {
        return Err(format!(
            "refused: {why}; what was restored is killed (CRIU's log: {})",
            log.display()
        ));
    }
    done.map_err(|e| format!("{e} (CRIU's log: {})", log.display()))?;
    let pid = match RESTORED.load(std::sync::atomic::Ordering::SeqCst) {
        0 => {
            return Err(format!(
                "CRIU restored but named no init (CRIU's log: {})",
                log.display()
            ))
        }
        pid => pid,
    };
    if let Some(sock) = r.console_fd {
        let master = c.take_orphan_pts_master_fd().ok_or_else(|| {
            format!(
                "CRIU sent no pty master for the restored terminal (CRIU's log: {})",
                log.display()
            )
        })?;
        send_with_fd(sock, &master)
            .map_err(|e| format!("send the pty master to the console socket: {e}"))?;
    }
    Ok(Answer::Restored(pid))
}

/// Sends `fd` over the connected unix socket `sock` (SCM_RIGHTS), with runc's payload.
fn send_with_fd(sock: i32, fd: &std::os::fd::OwnedFd) -> nix::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd.as_raw_fd()];
    let iov = [std::io::IoSlice::new(b"/dev/ptmx")];
    sendmsg::<()>(
        sock,
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
}

/// The mount points of the spec's binds, made as runc makes them before a restore (CRIU
/// mounts onto what exists): in the spec's order, each missing one made beneath the root
/// (no symlink leads out of it), and the bind put there for the moment in this helper's
/// own mount namespace, so that a bind's mount point inside an earlier bind's source is
/// made in that source, as create made it. Answers the binds made, for the caller to take
/// off again before CRIU mounts them itself.
fn prepare_binds(
    root: &std::path::Path,
    binds: &[(String, String)],
) -> Result<Vec<std::os::fd::OwnedFd>, String> {
    use rustix::fs::{Mode, OFlags, ResolveFlags, CWD};
    use rustix::mount::{MoveMountFlags, OpenTreeFlags};
    let rootfd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("open {}: {e}", root.display()))?;
    let beneath = |path: &str, flags: OFlags| {
        let path = if path.is_empty() { "." } else { path };
        rustix::fs::openat2(
            &rootfd,
            path,
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
        )
    };
    let mut bound = Vec::new();
    for (dest, source) in binds {
        let what = |e: rustix::io::Errno| format!("mount point {dest} of {source}: {e}");
        let is_dir = std::fs::metadata(source)
            .map_err(|e| format!("{source}: {e}"))?
            .is_dir();
        let comps: Vec<&str> = dest
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        for i in 0..comps.len() {
            let here = comps[..=i].join("/");
            match beneath(&here, OFlags::PATH) {
                Ok(_) => continue,
                Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(what(e)),
            }
            let parent =
                beneath(&comps[..i].join("/"), OFlags::PATH | OFlags::DIRECTORY).map_err(what)?;
            if i + 1 == comps.len() && !is_dir {
                rustix::fs::openat(
                    &parent,
                    comps[i],
                    OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::WRONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .map_err(what)?;
            } else {
                rustix::fs::mkdirat(&parent, comps[i], Mode::from_raw_mode(0o755)).map_err(what)?;
            }
        }
        let target = beneath(&comps.join("/"), OFlags::PATH).map_err(what)?;
        let tree = rustix::mount::open_tree(
            CWD,
            source.as_str(),
            OpenTreeFlags::OPEN_TREE_CLONE
                | OpenTreeFlags::OPEN_TREE_CLOEXEC
                | OpenTreeFlags::AT_RECURSIVE,
        )
        .map_err(what)?;
        rustix::mount::move_mount(
            &tree,
            "",
            &target,
            "",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
        )
        .map_err(what)?;
        bound.push(beneath(&comps.join("/"), OFlags::PATH).map_err(what)?);
    }
    Ok(bound)
}

/// An open directory whose descriptor `criu swrk` inherits (no close-on-exec).
fn dir_fd(path: &std::path::Path, what: &str) -> Result<std::os::fd::OwnedFd, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    let fd = std::os::fd::OwnedFd::from(f);
    // The RPC names it by number; the child inherits it.
    nix::fcntl::fcntl(
        fd.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    Ok(fd)
}

/// `DUMP`: cgroups ignored (moat's record has them), CRIU's log `dump.log` in the work
/// directory (else the image directory), as runc names it.
fn dump(d: wire::Dump) -> Reply {
    let images = dir_fd(&d.images_dir, "--image-path")?;
    let work = match &d.work_dir {
        Some(w) => Some(dir_fd(w, "--work-path")?),
        None => None,
    };
    let mut c = rust_criu::Criu::new_with_criu_path(d.criu.clone())
        .map_err(|e| format!("criu {}: {e}", d.criu))?;
    c.set_pid(d.pid);
    c.set_images_dir_fd(images.as_raw_fd());
    if let Some(w) = &work {
        c.set_work_dir_fd(w.as_raw_fd());
    }
    c.set_log_level(4);
    c.set_log_file("dump.log".into());
    c.set_root(d.root.display().to_string());
    c.set_leave_running(d.leave_running);
    c.set_orphan_pts_master(d.terminal);
    c.cgroups_mode(rust_criu::CgMode::IGNORE);
    for (k, v) in d.ext_mnt {
        c.set_external_mount(k, v);
    }
    for e in d.external {
        c.add_external(e);
    }
    let log = d
        .work_dir
        .as_ref()
        .unwrap_or(&d.images_dir)
        .join("dump.log");
    c.dump()
        .map_err(|e| format!("dump of pid {}: {e} (CRIU's log: {})", d.pid, log.display()))?;
    Ok(Answer::Dumped)
}

/// CRIU's `VERSION` answer as `major.minor.sublevel`; rust-criu folds it into one number
/// (`major * 10000 + minor * 100 + sublevel`, a git build counted as the next minor).
fn version(criu: String) -> Reply {
    let mut c = rust_criu::Criu::new_with_criu_path(criu.clone())
        .map_err(|e| format!("criu {criu}: {e}"))?;
    let v = c
        .get_criu_version()
        .map_err(|e| format!("criu {criu}: version: {e}"))?;
    Ok(Answer::Version(format!(
        "{}.{}.{}",
        v / 10000,
        v / 100 % 100,
        v % 100
    )))
}

/// The first difference between two mount tables, in one line.
fn mount_difference(want: &[wire::MountEntry], got: &[wire::MountEntry]) -> Option<String> {
    if want == got {
        return None;
    }
    let missing = want.iter().find(|w| !got.contains(w));
    let extra = got.iter().find(|g| !want.contains(g));
    match (missing, extra) {
        (_, Some(g)) => Some(format!(
            "{} ({}{}, {}) is not in the checkpoint's mount table",
            g.point,
            g.fstype,
            g.root
                .as_deref()
                .map(|r| format!(" of {r}"))
                .unwrap_or_default(),
            if g.flags.is_empty() {
                "no flags".to_string()
            } else {
                g.flags.join(",")
            }
        )),
        (Some(w), None) => Some(format!(
            "{} ({}, {}) of the checkpoint's mount table is missing",
            w.point,
            w.fstype,
            if w.flags.is_empty() {
                "no flags".to_string()
            } else {
                w.flags.join(",")
            }
        )),
        (None, None) => Some(format!(
            "the mount table differs from the checkpoint's ({} mounts where it had {})",
            got.len(),
            want.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(point: &str, fstype: &str) -> wire::MountEntry {
        wire::MountEntry {
            point: point.into(),
            layer: 0,
            fstype: fstype.into(),
            flags: vec!["ro".into()],
            root: Some("/".into()),
            dev: None,
        }
    }

    #[test]
    fn a_mount_table_must_come_back_exactly() {
        let (a, b) = (entry("/a", "tmpfs"), entry("/b", "proc"));
        let want = vec![a.clone(), a.clone(), b.clone()];
        assert_eq!(mount_difference(&want, &want), None);
        let extra = mount_difference(
            &want,
            &[a.clone(), a.clone(), b.clone(), entry("/x", "ext4")],
        );
        assert!(extra.unwrap().starts_with("/x (ext4 of /, ro) is not in"));
        let missing = mount_difference(&want, &[a.clone(), a.clone()]);
        assert!(missing
            .unwrap()
            .starts_with("/b (proc, ro) of the checkpoint's"));
        // Same mounts, other counts.
        let counts = mount_difference(&want, &[a.clone(), b.clone(), b.clone()]);
        assert!(counts.unwrap().contains("differs"));
        let mut rw = b.clone();
        rw.flags.clear();
        assert!(mount_difference(&want, &[a.clone(), a, rw]).is_some());
    }
}
