//! The lifecycle commands for a gVisor container, each reached through the
//! `container::Engine` implementation of [`Gvisor`] (create and run through
//! `gvisor::select`). Flags arrive parsed by moat's runc-compatible CLI (short forms
//! included) and leave as runsc's long `--name=value` forms, before the id.

use std::os::fd::AsFd as _;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::pod;
use super::rollback;
use super::runsc::Runsc;
use super::select::{self, Prepared, Selection};
use super::Gvisor;
use crate::container::{create as create_req, Context};
use crate::linux::sys;
use crate::state::{ContainerDir, Record, Status};

/// What `runsc state` says, or `None` when runsc does not know the container.
pub(super) struct RunscState {
    pub status: Status,
    pub pid: i32,
    pub raw: Value,
}

pub(super) fn runsc_state(g: &Context, gv: &Gvisor, id: &str) -> Result<Option<RunscState>> {
    let out = Runsc::quiet(gv, g, "state").id(id).output()?;
    if out.not_exist() {
        return Ok(None);
    }
    if out.code != 0 {
        bail!("{}", out.error());
    }
    let raw: Value = serde_json::from_slice(&out.stdout).context("runsc state: invalid JSON")?;
    let status = match raw["status"].as_str().unwrap_or("") {
        "creating" => Status::Creating,
        "created" => Status::Created,
        "running" => Status::Running,
        "paused" => Status::Paused,
        "stopped" => Status::Stopped,
        other => bail!("runsc state: unknown status {other:?}"),
    };
    let pid = i32::try_from(raw["pid"].as_i64().unwrap_or(0)).unwrap_or(0);
    // runsc probes its sandbox with kill(pid, 0), which a zombie passes: a sandbox that
    // exited but is not reaped yet (this host's PID 1 reaps late) is stopped.
    let status = match status {
        Status::Created | Status::Running | Status::Paused if !alive(pid) => Status::Stopped,
        s => s,
    };
    Ok(Some(RunscState { status, pid, raw }))
}

/// [`runsc_state`] as the engine sees the container: for an app container of a pod,
/// runsc's pid is the pod's sandbox, so the pid is its waiter's (`super::pod`), and a
/// container whose waiter is gone is stopped (the engine saw it exit).
fn container_state(g: &Context, rec: &Record, gv: &Gvisor) -> Result<Option<RunscState>> {
    let mut st = runsc_state(g, gv, &rec.id)?;
    if let Some(st) = st.as_mut().filter(|_| pod::app_sandbox(gv).is_some()) {
        if rec.alive() {
            st.pid = if st.status == Status::Stopped {
                0
            } else {
                rec.pid
            };
        } else {
            st.status = Status::Stopped;
            st.pid = 0;
        }
    }
    Ok(st)
}

fn alive(pid: i32) -> bool {
    pid > 0 && crate::state::process_start_time(pid).is_some_and(|(st, _)| st != 'Z' && st != 'X')
}

/// Status and host pid (0 when stopped) for `list`; a container runsc does not know
/// (a create that failed half-way) shows as stopped.
pub fn status(g: &Context, rec: &Record, gv: &Gvisor) -> Result<(Status, i32)> {
    Ok(match container_state(g, rec, gv)? {
        Some(s) if s.status != Status::Stopped => (s.status, s.pid.max(0)),
        _ => (Status::Stopped, 0),
    })
}

/// runc's state JSON, field for field.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct OciState<'a> {
    oci_version: &'a str,
    id: &'a str,
    pid: i32,
    status: &'static str,
    bundle: &'a Path,
    rootfs: &'a Path,
    created: &'a str,
    owner: &'a str,
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    annotations: &'a std::collections::BTreeMap<String, String>,
}

/// runsc's state completed to runc's: the caller's bundle (not the shadow), `rootfs`,
/// `created`, `owner`, `annotations`, and pid 0 instead of -1 when stopped.
fn complete_state<'a>(rec: &'a Record, st: &'a RunscState) -> OciState<'a> {
    OciState {
        oci_version: st.raw["ociVersion"]
            .as_str()
            .unwrap_or(crate::spec::OCI_VERSION),
        id: &rec.id,
        pid: if st.status == Status::Stopped {
            0
        } else {
            st.pid.max(0)
        },
        status: st.status.as_str(),
        bundle: &rec.bundle,
        rootfs: &rec.rootfs,
        created: &rec.created,
        owner: &rec.owner,
        annotations: &rec.annotations,
    }
}

pub fn state(g: &Context, rec: &Record, gv: &Gvisor) -> Result<i32> {
    let Some(st) = container_state(g, rec, gv)? else {
        bail!("container does not exist");
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&complete_state(rec, &st))?
    );
    Ok(0)
}

/// Removes runsc's container (if any) and the state directory, in bounded time: a sandbox
/// left a zombie for a caller that reaps only after create returns would hold runsc's
/// delete (`super::rollback`). Errors are ignored (this undoes a create that failed); what
/// could not be removed is reported.
pub(super) fn discard(g: &Context, gv: &Gvisor, root: &Path, id: &str) {
    let rec = ContainerDir::open(root, id)
        .ok()
        .and_then(|d| d.load().ok());
    if let Some(rec) = &rec {
        let _ = pod::end_waiter(rec);
    }
    // An app container's sandbox is its pod's: runsc's delete ends only the container, over
    // the sandbox's control socket.
    let deadline = std::time::Instant::now() + rollback::END_WITHIN;
    let ended = match pod::app_sandbox(gv) {
        Some(_) => None,
        None => rollback::end_processes(&gv.root, id, deadline),
    };
    let mut left = ended
        .as_ref()
        .map(rollback::Ended::running)
        .unwrap_or_default();
    match &ended {
        // moat has ended what runsc recorded itself. runsc's delete is not called: it would
        // poll kill(pid, 0) on a zombie until it gave up, and SIGKILL the recorded pids
        // without asking whose they are by now.
        Some(e) => rollback::remove_runsc_files(&e.files, id),
        // runsc saved no state: its delete finds no process to signal, and removes what
        // else it may have left (bounded all the same).
        None => {
            let out = Runsc::quiet(gv, g, "delete")
                .flag("force", true)
                .id(id)
                .output_within(rollback::DELETE_WITHIN);
            if matches!(out, Ok(None)) {
                left.push(format!(
                    "runsc delete --force did not end within {} s (killed)",
                    rollback::DELETE_WITHIN.as_secs()
                ));
            }
        }
    }
    forget(gv, id);
    if let Ok(dir) = ContainerDir::open(root, id) {
        crate::linux::egress::forwarder::stop(
            &dir.file(""),
            rec.as_ref().and_then(|r| r.cgroup.as_ref()),
        );
        // A runsc that failed after making the sandbox's cgroup (a sandbox that did not
        // start) leaves it, and its `delete --force` of a container it never recorded
        // does not look; a delete moat skipped (above) leaves it too: removed once empty,
        // as delete does. Not for a pod's app container, whose cgroup is the sandbox's.
        if pod::app_sandbox(gv).is_none() {
            if let Some(cg) = rec.as_ref().and_then(|r| leftover_cgroup(&dir, r)) {
                if ended.is_some() {
                    let pids = rollback::drain_cgroup(&cg, deadline);
                    if !pids.is_empty() {
                        left.push(format!("processes {pids:?} in cgroup {}", cg.path));
                    }
                }
                cg.remove_empty();
                remove_empty_everywhere(&cg.path);
            }
        }
        let _ = dir.remove();
    }
    if !left.is_empty() {
        crate::log::warn(&format!(
            "undoing the failed create of {id:?}: {} left",
            left.join(", ")
        ));
    }
    // The egress programs' cgroup (super::egress), empty once the sandbox is gone.
    if let Some(cg) = rec.and_then(|r| r.cgroup) {
        let _ = cg.remove();
    }
}

/// Removes what runsc may have left of a container it no longer knows from its (shared)
/// root: the lock file of a failed create, the state of a delete that gave up.
fn forget(gv: &Gvisor, id: &str) {
    let sandbox = pod::app_sandbox(gv).unwrap_or(id);
    for ext in ["lock", "state"] {
        let _ = std::fs::remove_file(gv.root.join(format!("{id}_sandbox:{sandbox}.{ext}")));
    }
}

/// An image a prepared container is restored from (`super::snapshot`): its directory
/// and `--work-path`.
pub(super) struct Image<'a> {
    pub images: &'a Path,
    pub work: Option<&'a Path>,
}

/// `runsc create` for a prepared container, or `runsc restore --detach` of `image`; a
/// failure leaves nothing behind, as runc.
pub(super) fn create_prepared(
    g: &Context,
    p: Prepared,
    a: &create_req::Request,
    image: Option<Image<'_>>,
) -> Result<i32> {
    let sandbox = pod::app_sandbox(&p.gv).map(str::to_string);
    crate::linux::killpoint::at("create", "parent", "gvisor.Prepared");
    let call = match &image {
        None => Runsc::new(&p.gv, g, "create"),
        Some(i) => Runsc::new(&p.gv, g, "restore")
            .opt("image-path", i.images)
            .opt_some("work-path", i.work)
            .flag("detach", true),
    };
    let what = if image.is_some() { "restore" } else { "create" };
    // An app container's pid file holds its waiter's pid, not the sandbox's (super::pod).
    let raw = call
        .in_cgroup(p.egress.as_ref().map(|(i, _)| i.procs.as_fd()))
        .opt("bundle", &p.shadow)
        .opt_some("console-socket", a.console_socket.as_ref())
        .opt_some(
            "pid-file",
            a.pid_file.as_ref().filter(|_| sandbox.is_none()),
        )
        .id(&a.id)
        .wait_raw();
    let raw = match raw {
        Ok(raw) => raw,
        // runsc did not run, or moat lost it: what was prepared goes.
        Err(e) => {
            drop(p.sandbox);
            drop(p.dir);
            discard(g, &p.gv, &g.root.clone(), &a.id);
            return Err(e);
        }
    };
    crate::linux::killpoint::at("create", "parent", "gvisor.Runsc");
    drop(p.sandbox);
    if raw != 0 {
        if let Some(log) = &g.log {
            super::runsc::end_line(log);
        }
        drop(p.dir);
        discard(g, &p.gv, &g.root.clone(), &a.id);
        // runsc printed its error; one killed by a signal (128+N) printed none.
        if let Some(sig) = raw.checked_sub(128).filter(|n| *n > 0) {
            let name = nix::sys::signal::Signal::try_from(sig).map_or("?", |s| s.as_str());
            bail!("runsc {what} was killed by signal {sig} ({name}); what it had made is removed");
        }
        return Ok(1);
    }
    if let Some((inst, plan)) = &p.egress {
        if let Err(e) = super::egress::start_forwarder(g, &p.gv, &p.dir, &a.id, inst, plan) {
            drop(p.dir);
            discard(g, &p.gv, &g.root.clone(), &a.id);
            return Err(e);
        }
    }
    if let Some(sandbox) = sandbox {
        let mut forked = 0;
        let waited = (|| -> Result<()> {
            let sandbox_pid = match runsc_state(g, &p.gv, &sandbox)? {
                Some(st) => st.pid,
                None => bail!("pod sandbox {sandbox:?} is gone"),
            };
            let pid = pod::spawn_waiter(&p.dir, &p.gv, &sandbox, sandbox_pid, &a.id)?;
            forked = pid;
            pod::place_waiter(&p.dir, pid);
            let mut rec = p.dir.load()?;
            rec.pid = pid;
            rec.pid_start = crate::state::process_start_time(pid).map_or(0, |(_, s)| s);
            p.dir.save(&rec)?;
            if let Some(f) = &a.pid_file {
                crate::state::write_pid_file(f, pid)?;
            }
            Ok(())
        })();
        if let Err(e) = waited {
            // Still moat's child: the pid cannot have been reused.
            if forked > 0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(forked),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = sys::waitpid(forked);
            }
            drop(p.dir);
            discard(g, &p.gv, &g.root.clone(), &a.id);
            return Err(e);
        }
    }
    Ok(0)
}

/// The sandbox's host cgroup, for when runsc's delete gave up on an unreaped sandbox
/// after removing its state but not the cgroup: records made before this version hold
/// it; otherwise it is `linux.cgroupsPath` of the effective spec (where runsc made it),
/// in the hierarchies where it exists (runsc's `/<id>` when the spec names none). Nothing
/// for a relative or systemd path.
fn leftover_cgroup(dir: &ContainerDir, rec: &Record) -> Option<crate::linux::cgroups::Cgroup> {
    if let Some(cg) = &rec.cgroup {
        return Some(cg.clone());
    }
    let spec = select::shadow_config(dir).ok()?;
    // Without one, runsc makes the sandbox's cgroup at `/<id>` (seen with 20221219).
    let default = format!("/{}", rec.id);
    let path = match spec.pointer("/linux/cgroupsPath") {
        Some(p) => p.as_str()?,
        None => &default,
    };
    if !path.starts_with('/') || path.contains(':') || path.trim_matches('/').is_empty() {
        return None;
    }
    let layout = crate::linux::cgroups::Layout::detect().ok()?;
    let hierarchies: Vec<_> = layout
        .hierarchies
        .into_iter()
        .filter(|h| h.dir(path).is_dir())
        .collect();
    Some(crate::linux::cgroups::Cgroup {
        path: path.to_string(),
        unified: layout.unified,
        hierarchies,
        skipped: Vec::new(),
        systemd: None,
        joined: false,
    })
}

/// runsc makes the sandbox's cgroup in every mounted v1 hierarchy, moat's layout lists only
/// those it manages (not `net_cls`, `perf_event`, …): the directory goes from each, where it
/// is empty (`rmdir` refuses one that is not).
fn remove_empty_everywhere(path: &str) {
    let root = std::path::Path::new(crate::linux::cgroups::CGROUP_ROOT);
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for h in rd.flatten() {
        let _ = std::fs::remove_dir(h.path().join(path.trim_start_matches('/')));
    }
}

/// The sentry's processes are not host processes a pidfd could name.
const NO_PIDFD: &str = "--pidfd-socket is not supported for gVisor containers (their \
     processes live in the sentry, where no host pidfd names them)";

pub fn create(g: &Context, a: &create_req::Request, sel: Selection) -> Result<i32> {
    if a.pidfd_socket.is_some() {
        bail!(NO_PIDFD);
    }
    // --no-pivot and --no-new-keyring mean nothing to the sentry; --preserve-fds > 0 is
    // refused in prepare.
    let p = select::prepare(g, &a.bundle, &a.id, a.preserve_fds, sel)?;
    create_prepared(g, p, a, None)
}

pub fn run(g: &Context, a: &create_req::RunRequest, sel: Selection) -> Result<i32> {
    if a.create.pidfd_socket.is_some() {
        bail!(NO_PIDFD);
    }
    if a.keep {
        bail!("--keep is not supported for gVisor containers (runsc removes its container when the process exits)");
    }
    let c = &a.create;
    let p = select::prepare(g, &c.bundle, &c.id, c.preserve_fds, sel)?;
    let root = g.root.clone();
    if a.detach {
        // create + start rather than `runsc run --detach`, whose re-execution drops every
        // argument containing "detach".
        let gv = p.gv.clone();
        let code = create_prepared(g, p, c, None)?;
        if code != 0 {
            return Ok(code);
        }
        let rec = ContainerDir::open_read(&root, &c.id)?.load()?;
        let code = start(g, &rec, &gv)?;
        if code != 0 {
            discard(g, &gv, &root, &c.id);
        }
        return Ok(code);
    }
    if p.gv.pod.is_some() {
        let Prepared { dir, gv, .. } = p;
        drop(dir);
        discard(g, &gv, &root, &c.id);
        bail!(
            "a container of a gVisor pod is created and started (as the CRI does): foreground \
             run refused"
        );
    }
    let Prepared {
        dir, gv, shadow, ..
    } = p;
    // Unlocked while the container runs, so kill and state can reach it.
    drop(dir);
    let status = Runsc::new(&gv, g, "run")
        .opt("bundle", &shadow)
        .opt_some("console-socket", c.console_socket.as_ref())
        .opt_some("pid-file", c.pid_file.as_ref())
        .id(&c.id)
        .wait_raw();
    discard(g, &gv, &root, &c.id);
    status
}

pub fn start(g: &Context, rec: &Record, gv: &Gvisor) -> Result<i32> {
    crate::linux::killpoint::at("start", "parent", "gvisor.Start");
    if pod::app_sandbox(gv).is_none() {
        return Runsc::new(gv, g, "start").id(&rec.id).wait();
    }
    let stdio = pod::waiter_stdio(rec)?;
    let code = Runsc::new(gv, g, "start")
        .id(&rec.id)
        .wait_stdio(stdio.each_ref().map(|f| Some(f.as_fd())))?;
    drop(stdio);
    if code == 0 {
        pod::release_waiter(g, rec)?;
    }
    Ok(code)
}

/// runsc pauses the whole sandbox for any of its containers: one container of a pod
/// cannot be paused alone.
fn no_pod_pause(gv: &Gvisor, what: &str) -> Result<()> {
    if pod::app_sandbox(gv).is_some() {
        bail!("{what} of one container of a gVisor pod is not supported (runsc would {what} the whole pod's sandbox)");
    }
    Ok(())
}

pub fn pause(g: &Context, rec: &Record, gv: &Gvisor) -> Result<i32> {
    no_pod_pause(gv, "pause")?;
    Runsc::new(gv, g, "pause").id(&rec.id).wait()
}

pub fn resume(g: &Context, rec: &Record, gv: &Gvisor) -> Result<i32> {
    no_pod_pause(gv, "resume")?;
    Runsc::new(gv, g, "resume").id(&rec.id).wait()
}

/// `ps --format table|json`. runsc lists the sandbox's own pids; ps arguments after `--`
/// are not supported by runsc and are dropped.
pub fn ps(g: &Context, rec: &Record, gv: &Gvisor, format: &str, ps_args: &[String]) -> Result<i32> {
    if !ps_args.is_empty() {
        crate::log::warn(&format!(
            "ps arguments {ps_args:?} ignored: runsc's ps takes none"
        ));
    }
    Runsc::new(gv, g, "ps")
        .opt("format", format)
        .id(&rec.id)
        .wait()
}

/// Default action of `sig` ends the process (what a created container's init would do
/// with it under runc).
fn terminates(sig: i32) -> bool {
    !matches!(
        sig,
        libc::SIGCHLD
            | libc::SIGCONT
            | libc::SIGURG
            | libc::SIGWINCH
            | libc::SIGSTOP
            | libc::SIGTSTP
            | libc::SIGTTIN
            | libc::SIGTTOU
    )
}

/// SIGKILLs the sandbox of a created container, after checking through a pidfd that
/// the pid still is a runsc sandbox.
fn kill_sandbox(pid: i32) -> Result<()> {
    if pid <= 0 {
        return Ok(());
    }
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("pidfd_open sandbox (pid {pid})")),
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !cmdline.starts_with(b"runsc-sandbox\0") {
        return Ok(());
    }
    match sys::pidfd_send_signal(std::os::fd::AsFd::as_fd(&pidfd), libc::SIGKILL) {
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
            Err(e).with_context(|| format!("kill sandbox (pid {pid})"))
        }
        _ => Ok(()),
    }
}

/// runc's kill on top of runsc's: a created container is killed by killing its sandbox
/// (runsc refuses to signal it); a stopped one is `container not running` (success with
/// `--all`, which containerd's shim sends after every exit).
pub fn kill(g: &Context, rec: &Record, gv: &Gvisor, all: bool, sig: i32) -> Result<i32> {
    let Some(st) = container_state(g, rec, gv)? else {
        bail!("container does not exist");
    };
    let app = pod::app_sandbox(gv).is_some();
    match st.status {
        Status::Stopped if all => Ok(0),
        Status::Stopped => bail!("container not running"),
        // A created app container ends for the engine when its waiter does (of the same
        // signal); the pod's sandbox stays.
        Status::Created | Status::Creating if app => {
            if terminates(sig) {
                pod::kill_waiter(rec, sig)?;
            }
            Ok(0)
        }
        Status::Created | Status::Creating => {
            if terminates(sig) {
                kill_sandbox(st.pid)?;
            }
            Ok(0)
        }
        Status::Running | Status::Paused => {
            // runsc refuses to signal a paused container; SIGKILL ends a paused runc
            // container all the same, so resume it first for that one.
            if st.status == Status::Paused && sig == libc::SIGKILL {
                let code = Runsc::new(gv, g, "resume").id(&rec.id).wait()?;
                if code != 0 {
                    return Ok(code);
                }
            }
            Runsc::new(gv, g, "kill")
                .flag("all", all)
                .id(&rec.id)
                .args([sig.to_string()])
                .wait()
        }
    }
}

/// `delete [--force]`: runsc deletes, then the state directory goes. runsc deletes a
/// created container without `--force`, as runc does. A container runsc no longer knows
/// is gone: with `--force` that is success.
pub fn delete(
    g: &Context,
    dir: ContainerDir,
    rec: &Record,
    gv: &Gvisor,
    force: bool,
) -> Result<i32> {
    let app = pod::app_sandbox(gv).is_some();
    // An app container whose waiter is gone is stopped for the engine (which then deletes
    // without --force), though runsc may still run it in the pod's sandbox.
    let force = force || (app && !rec.alive());
    if app && force {
        // Ended first (as runc's delete --force kills the init): runsc removes the
        // container's cgroup, which holds the waiter.
        pod::end_waiter(rec)?;
    }
    crate::linux::killpoint::at("delete", "parent", "gvisor.runsc");
    let mut out = Runsc::quiet(gv, g, "delete")
        .flag("force", force)
        .id(&rec.id)
        .output()?;
    // runsc 20240729 takes a sandbox that has exited but is not reaped yet (a zombie, where
    // the caller's subreaper reaps late) for a running one and refuses a plain delete; for
    // runc's delete, and for moat's state, that container is stopped.
    if !force
        && out.code != 0
        && out.stderr.contains("not stopped")
        && status(g, rec, gv)?.0 == Status::Stopped
    {
        out = Runsc::quiet(gv, g, "delete")
            .flag("force", true)
            .id(&rec.id)
            .output()?;
    }
    crate::linux::killpoint::at("delete", "parent", "gvisor.state");
    if out.code == 0 || (force && out.not_exist()) {
        if out.code != 0 {
            forget(gv, &rec.id);
        }
        // A delete that ended (killed, or runsc giving up on an unreaped sandbox) between
        // runsc's delete and the state dir's removal left the sandbox's cgroup, and
        // `runsc delete --force` of a container it no longer knows succeeds without
        // touching it: removed here where it is empty (nothing of the sandbox runs).
        crate::linux::egress::forwarder::stop(&dir.file(""), rec.cgroup.as_ref());
        if !app {
            // The egress programs' cgroup (super::egress) goes with its programs; it is
            // empty once runsc's delete has ended the sandbox.
            if let Some(cg) = &rec.cgroup {
                if let Err(e) = cg.remove() {
                    crate::log::warn(&format!("remove the sandbox's cgroup: {e}"));
                }
            }
            if let Some(cg) = leftover_cgroup(&dir, rec) {
                cg.remove_empty();
                remove_empty_everywhere(&cg.path);
            }
        }
        if app {
            pod::kill_waiter(rec, libc::SIGKILL)?;
        }
        dir.remove()?;
        return Ok(0);
    }
    if out.not_exist() {
        bail!("container does not exist");
    }
    // runsc gives up waiting for a sandbox nobody has reaped yet, after removing its
    // state but not its cgroup: the container is gone all the same.
    if matches!(runsc_state(g, gv, &rec.id), Ok(None)) {
        forget(gv, &rec.id);
        crate::linux::egress::forwarder::stop(&dir.file(""), rec.cgroup.as_ref());
        if let Some(cg) = leftover_cgroup(&dir, rec) {
            if let Err(e) = cg.remove() {
                crate::log::warn(&format!("remove the sandbox's cgroup: {e}"));
            }
            remove_empty_everywhere(&cg.path);
        }
        dir.remove()?;
        return Ok(0);
    }
    bail!("{}", out.error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminating_signals() {
        assert!(
            terminates(libc::SIGTERM) && terminates(libc::SIGKILL) && terminates(libc::SIGUSR1)
        );
        assert!(
            !terminates(libc::SIGCHLD) && !terminates(libc::SIGWINCH) && !terminates(libc::SIGCONT)
        );
    }

    #[test]
    fn state_is_completed_like_runc() {
        let rec = Record {
            format: 1,
            id: "c".into(),
            pid: 0,
            pid_start: 0,
            bundle: "/engine/bundle".into(),
            rootfs: "/engine/bundle/rootfs".into(),
            created: "2026-01-01T00:00:00Z".into(),
            owner: String::new(),
            annotations: [("moat.runtime".to_string(), "gvisor".to_string())].into(),
            cgroup: None,
            systemd_cgroup: false,
            rootless: false,
            own_pidns: true,
            policy: crate::policy::Mode::Open,
            notify_socket: None,
            backend: crate::state::Backend::Native,
            post_hooks: None,
        };
        let st = RunscState {
            status: Status::Stopped,
            pid: -1,
            raw: serde_json::json!({"ociVersion":"1.0.2-dev","id":"c","status":"stopped","pid":-1,"bundle":"/run/moat/c/bundle"}),
        };
        let v = serde_json::to_value(complete_state(&rec, &st)).unwrap();
        assert_eq!(v["pid"], 0);
        assert_eq!(v["bundle"], "/engine/bundle");
        assert_eq!(v["rootfs"], "/engine/bundle/rootfs");
        assert_eq!(v["owner"], "");
        assert_eq!(v["created"], "2026-01-01T00:00:00Z");
        assert_eq!(v["annotations"]["moat.runtime"], "gvisor");
    }
}
