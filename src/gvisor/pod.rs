//! gVisor pods behind the runc shim: one runsc sandbox per pod, made by the pod sandbox
//! container's create, and each app container of the pod created inside it with runsc's
//! multi-container mode.
//!
//! The roles come from the CRI annotations, read exactly as runsc 20221219 reads them
//! (`specutils.SpecContainerType`, `specutils.SandboxID`): the first of containerd's and
//! CRI-O's container-type keys present decides, and the sandbox id is containerd's key,
//! else CRI-O's. So moat checks the very id runsc will join.
//!
//! | role | create | pid in `--pid-file` |
//! |---|---|---|
//! | pod sandbox (`container-type=sandbox`) | as a container with a sandbox of its own, recorded as a pod sandbox, `--oci-seccomp` always (the sandbox's flags are the pod's, and any app container may bring a profile) | the sandbox's (runsc's) |
//! | app container (`container-type=container`, `sandbox-id=S`) | only if moat's record of `S` under the same `--root` is a gVisor pod sandbox moat created there, still running, with this root's shared runsc root; the runsc flags are the sandbox's | the waiter's |
//!
//! The sandbox-id annotation is written by whoever wrote the spec (an image's annotations
//! can reach it): without the check, a container could join another pod's sandbox.
//!
//! **The waiter.** The shim waits on the pid in the pid file, and runsc writes the
//! sandbox's pid for an app container (it is the pod's, shared). So moat forks a small
//! process of its own per app container ("the waiter", a copy of moat that executes
//! nothing), whose exit is the container's: it waits on `<root>/<id>/start`, a FIFO that
//! `start` writes once runsc started the container, then asks the sandbox for the
//! container's exit status over runsc's control socket (the `containerManager.Wait` call
//! `runsc wait` makes, without keeping a 17 MB Go process per container; in the control
//! namespace, `super::control`, from a peer that is root) and exits with it
//! (128+N for a signal; 137 when the sandbox went away). Its pid and start time are the
//! record's `pid`/`pid_start`; `kill` of a created app container kills it, `state`
//! reports it, and a container whose waiter is gone is stopped for the engine.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::OpenOptionsExt as _;

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::Value;

use super::select::RUNSC_ROOT;
use super::{Backend, Gvisor, PodRole};
use crate::container::Context;
use crate::linux::sys;
use crate::state::{ContainerDir, Record, StateError, Status};

/// The CRI container-type keys, in runsc's order: containerd's, then CRI-O's.
pub const CONTAINER_TYPE: [&str; 2] = [
    "io.kubernetes.cri.container-type",
    "io.kubernetes.cri-o.ContainerType",
];
/// The CRI sandbox-id keys, in runsc's order.
pub const SANDBOX_ID: [&str; 2] = [
    "io.kubernetes.cri.sandbox-id",
    "io.kubernetes.cri-o.SandboxID",
];
/// The FIFO `start` writes to release an app container's waiter.
pub const START_FIFO: &str = "start";

/// What runsc will do with the spec's CRI annotations.
#[derive(Debug, PartialEq, Eq)]
pub enum Requested {
    /// No container-type: a sandbox of its own (moat's plain gVisor path).
    Own,
    /// `container-type=sandbox`: a new sandbox, the pod's.
    Sandbox,
    /// `container-type=container`: join the sandbox of this id.
    Container(String),
}

/// Reads the annotations as runsc does; a type runsc would treat as "join a sandbox"
/// without being `container` (any other value) is refused.
pub fn requested(annotations: &BTreeMap<String, String>) -> Result<Requested> {
    let Some((key, kind)) = CONTAINER_TYPE
        .iter()
        .find_map(|k| annotations.get(*k).map(|v| (*k, v.as_str())))
    else {
        return Ok(Requested::Own);
    };
    match kind {
        "sandbox" => Ok(Requested::Sandbox),
        "container" => match SANDBOX_ID.iter().find_map(|k| annotations.get(*k)) {
            Some(id) => Ok(Requested::Container(id.clone())),
            None => bail!(
                "annotation {key}=container: no {} annotation names the pod sandbox to join",
                SANDBOX_ID[0]
            ),
        },
        other => bail!(
            "annotation {key}={other:?}: want \"sandbox\" or \"container\" (runsc would try to \
             join a pod sandbox)"
        ),
    }
}

/// A pod sandbox an app container may join.
pub struct Joined {
    /// The sandbox's state directory, locked so that the sandbox is not deleted while
    /// runsc adds the container.
    pub dir: ContainerDir,
    /// The app container's runsc flags: the sandbox's, with its role.
    pub gv: Gvisor,
    /// The runsc sandbox's host pid.
    pub pid: i32,
}

/// Checks that `sandbox` may be joined by the app container `id`. Refused unless moat's
/// own record of `sandbox` under this `--root` shows a gVisor pod sandbox with this
/// root's shared runsc root, still running.
pub fn join(g: &Context, id: &str, sandbox: &str) -> Result<Joined> {
    let refuse = |why: String| {
        anyhow!(
            "annotation {}={sandbox:?}: {why}; refused (a gVisor app container joins only a pod \
             sandbox moat created under the same --root)",
            SANDBOX_ID[0]
        )
    };
    if sandbox == id {
        return Err(refuse("names the container itself".into()));
    }
    let dir = match ContainerDir::open(&g.root, sandbox) {
        Ok(d) => d,
        Err(StateError::NotExist) => {
            return Err(refuse(format!(
                "no container of that id under {}",
                g.root.display()
            )))
        }
        Err(e) => return Err(refuse(e.to_string())),
    };
    let rec = dir.load().map_err(|e| refuse(e.to_string()))?;
    let Backend::Gvisor(gv) = &rec.backend else {
        return Err(refuse("not a gVisor container".into()));
    };
    if gv.pod != Some(PodRole::Sandbox) {
        return Err(refuse("not a pod sandbox".into()));
    }
    if gv.root != g.root.join(RUNSC_ROOT) {
        return Err(refuse(format!(
            "its runsc root {} is not this root's",
            gv.root.display()
        )));
    }
    let pid = match super::cmds::runsc_state(g, gv, sandbox)? {
        Some(s) if matches!(s.status, Status::Created | Status::Running) => s.pid,
        _ => return Err(refuse("the pod sandbox is not running".into())),
    };
    let mut gv = gv.clone();
    gv.pod = Some(PodRole::Container {
        sandbox: sandbox.to_string(),
    });
    Ok(Joined { dir, gv, pid })
}

/// The engine wires a pod's containers to their sandbox's namespaces by path
/// (`/proc/<sandbox pid>/ns/…`), which an annotation cannot change: an app container
/// whose paths name another gVisor sandbox's process than the one its sandbox-id
/// annotation names was put in another pod by the engine, and is refused.
pub fn check_paths(spec: &crate::spec::Spec, sandbox: &str, pid: i32) -> Result<()> {
    for (i, n) in spec.linux().namespaces.iter().enumerate() {
        let Some(path) = n.path.as_deref() else {
            continue;
        };
        let Some(other) = path
            .strip_prefix("/proc/")
            .and_then(|r| r.split_once("/ns/"))
            .and_then(|(p, _)| p.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{other}/cmdline")).unwrap_or_default();
        if other != pid && cmdline.starts_with(b"runsc-sandbox\0") {
            bail!(
                "linux.namespaces[{i}].path ({path}): the namespaces of another gVisor sandbox \
                 (pid {other}) than pod sandbox {sandbox:?}'s (pid {pid}), which annotation {}={sandbox:?} \
                 names; refused",
                SANDBOX_ID[0]
            );
        }
    }
    Ok(())
}

/// The namespace paths the engine gave an app container that name the pod's runsc
/// sandbox process (`/proc/<sandbox pid>/ns/<type>`: containerd joins a pod's containers
/// to its sandbox's ipc, uts and, for a shared process namespace, pid namespaces),
/// taken out of the spec for the policy and put back after it ([`restore_paths`]).
/// Under gVisor they join nothing on the host: the sentry gives the container the
/// pod's namespaces, and runsc only compares the pid path between the pod's containers
/// to share one pid namespace. The sandbox process runs in the host's pid, ipc and uts
/// namespaces, so the policy would refuse them as the host's.
pub fn take_sandbox_paths(spec: &mut crate::spec::Spec, pid: i32) -> Vec<(String, String)> {
    let prefix = format!("/proc/{pid}/ns/");
    let mut taken = Vec::new();
    let Some(linux) = spec.linux.as_mut() else {
        return taken;
    };
    for n in &mut linux.namespaces {
        let of_sandbox = n
            .path
            .as_deref()
            .and_then(|p| p.strip_prefix(&prefix))
            .is_some_and(|t| t == ns_file(&n.typ));
        if of_sandbox && matches!(n.typ.as_str(), "pid" | "ipc" | "uts") {
            taken.push((n.typ.clone(), n.path.take().unwrap_or_default()));
        }
    }
    taken
}

/// Puts back what [`take_sandbox_paths`] took, on the entry of the same type.
pub fn restore_paths(spec: &mut crate::spec::Spec, taken: Vec<(String, String)>) {
    let Some(linux) = spec.linux.as_mut() else {
        return;
    };
    for (typ, path) in taken {
        if let Some(n) = linux
            .namespaces
            .iter_mut()
            .find(|n| n.typ == typ && n.path.is_none())
        {
            n.path = Some(path);
        }
    }
}

/// What an app container's `linux.resources` become: runsc writes them to a host cgroup
/// of the container's own, which holds none of its processes (they run in the pod's
/// sandbox, in the pod sandbox's host cgroup, under the pod sandbox container's limits).
pub fn resources_note(spec: &crate::spec::Spec) -> crate::policy::Change {
    crate::policy::Change {
        field: "linux.resources".into(),
        action: "not applied",
        detail: format!(
            "for this container alone, at {}",
            spec.linux()
                .cgroups_path
                .as_deref()
                .unwrap_or("runsc's default")
        ),
        reason: "the containers of a gVisor pod run in its sandbox, in the host cgroup and \
                 under the limits of the pod sandbox container"
            .into(),
    }
}

/// The file under `/proc/<pid>/ns/` of a namespace type.
fn ns_file(typ: &str) -> &str {
    match typ {
        "network" => "net",
        "mount" => "mnt",
        t => t,
    }
}

/// The sandbox an app container lives in, if the record is one.
pub fn app_sandbox(gv: &Gvisor) -> Option<&str> {
    match &gv.pod {
        Some(PodRole::Container { sandbox }) => Some(sandbox),
        _ => None,
    }
}

/// runsc's control socket for a sandbox.
#[derive(Debug, PartialEq, Eq)]
enum ControlSocket {
    /// runsc 20221219: an abstract name, NUL included, in the namespace `runsc create`
    /// ran in (moat's control namespace, `super::control`).
    Abstract(Vec<u8>),
    /// Later runsc: a file, recorded in the sandbox's state as `controlSocketPath`.
    Path(std::path::PathBuf),
}

/// Where the sandbox `sandbox` under runsc root `root` serves its control server: the
/// path its state records, else runsc 20221219's abstract name.
fn control_socket(root: &std::path::Path, sandbox: &str) -> ControlSocket {
    let state = root.join(format!("{sandbox}_sandbox:{sandbox}.state"));
    let path = std::fs::read(state)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| {
            v.pointer("/sandbox/controlSocketPath")?
                .as_str()
                .map(str::to_string)
        })
        .filter(|p| !p.is_empty());
    match path {
        Some(p) => ControlSocket::Path(p.into()),
        None => {
            let mut name = format!("runsc-sandbox.{sandbox}").into_bytes();
            name.push(0);
            ControlSocket::Abstract(name)
        }
    }
}

/// Forks the waiter of app container `id` in `sandbox` (after `runsc create` made it) and
/// returns its pid. The waiter holds nothing of moat's but the start FIFO, the control
/// namespace and create's stdio; it talks only to the sandbox process `sandbox_pid`: runsc gives an app container the stdio of `runsc start`
/// (it starts the container's gofer then), while the engine gave the container's at create
/// (runc's init inherits them), so `start` takes them from the waiter ([`waiter_stdio`]);
/// once released, the waiter puts /dev/null in their place. `/` as its directory, a
/// session of its own, no signal blocked.
pub fn spawn_waiter(
    dir: &ContainerDir,
    gv: &Gvisor,
    sandbox: &str,
    sandbox_pid: i32,
    id: &str,
) -> Result<i32> {
    let fifo = dir.file(START_FIFO);
    let path = std::ffi::CString::new(fifo.as_os_str().as_bytes()).context("start FIFO path")?;
    sys::mkfifo(&path, 0o600).with_context(|| format!("mkfifo {}", fifo.display()))?;
    let start: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo)
        .with_context(|| format!("open {}", fifo.display()))?
        .into();
    // Everything the child needs is made here: after the fork it only makes system calls.
    let netns = gv
        .control_netns
        .as_deref()
        .map(super::control::open)
        .transpose()?;
    let socket = control_socket(&gv.root, sandbox);
    let call = serde_json::to_vec(&serde_json::json!({
        "method": "containerManager.Wait",
        "arg": id,
    }))
    .expect("serialises");
    match sys::clone_fork(0, None).context("fork the waiter")? {
        sys::Forked::Parent(pid) => Ok(pid),
        sys::Forked::Child => {
            let code = waiter(start, netns, &socket, sandbox_pid, &call);
            sys::exit_now(code)
        }
    }
}

/// The waiter's life: detach, wait for start, wait for the container, exit with its
/// status.
fn waiter(
    start: OwnedFd,
    netns: Option<OwnedFd>,
    socket: &ControlSocket,
    sandbox_pid: i32,
    call: &[u8],
) -> i32 {
    if let Some(ns) = netns {
        if sys::setns(ns.as_fd(), libc::CLONE_NEWNET).is_err() {
            return 255;
        }
    }
    if sys::close_all_but(start.as_fd()).is_err() {
        return 255;
    }
    let _ = sys::setsid();
    let _ = std::env::set_current_dir("/");
    // moat blocked the signals it forwards while runsc ran; the waiter takes the default
    // actions (a SIGTERM from the engine ends it, as it would end runc's init).
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    if sys::poll_readable(start.as_fd()).is_err() {
        return 255;
    }
    drop(start);
    // The container has its stdio now (start took them from here).
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for n in 0..3 {
            let _ = sys::dup2(null.as_fd(), sys::FdNumber(n));
        }
    }
    exit_code(wait_container(socket, sandbox_pid, call))
}

/// Connects to the socket file `p`. A sockaddr_un holds 108 bytes, and runsc's root under
/// an engine's state directory with a 64-hex id makes a longer path (runsc binds and
/// connects it its own way): then through the directory, as a name relative to it.
fn connect_path(p: &std::path::Path) -> Option<std::os::unix::net::UnixStream> {
    const SUN_PATH: usize = 108;
    if p.as_os_str().len() < SUN_PATH {
        return std::os::unix::net::UnixStream::connect(p).ok();
    }
    let (dir, name) = (p.parent()?, p.file_name()?);
    std::env::set_current_dir(dir).ok()?;
    let conn = std::os::unix::net::UnixStream::connect(name);
    let _ = std::env::set_current_dir("/");
    conn.ok()
}

/// `containerManager.Wait` over the sandbox's control socket: the container's wait status,
/// `None` when the sandbox went away, answered with an error, or the peer is not the
/// sandbox process `sandbox_pid`.
fn wait_container(socket: &ControlSocket, sandbox_pid: i32, call: &[u8]) -> Option<u32> {
    use std::os::linux::net::SocketAddrExt as _;
    let mut conn = match socket {
        ControlSocket::Abstract(name) => {
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).ok()?;
            std::os::unix::net::UnixStream::connect_addr(&addr).ok()?
        }
        ControlSocket::Path(p) => connect_path(p)?,
    };
    // The sandbox itself listens (runsc create binds the socket and hands it over).
    let peer =
        nix::sys::socket::getsockopt(&conn, nix::sys::socket::sockopt::PeerCredentials).ok()?;
    if peer.pid() != sandbox_pid {
        return None;
    }
    conn.write_all(call).ok()?;
    let reply: Value = serde_json::Deserializer::from_reader(&conn)
        .into_iter::<Value>()
        .next()?
        .ok()?;
    if reply["success"] != Value::Bool(true) {
        return None;
    }
    u32::try_from(reply["result"].as_u64()?).ok()
}

/// A wait status as the shim reports runc's: the exit code, 128+N for signal N, 137 when
/// the sandbox went away (SIGKILL is how a sandbox ends).
fn exit_code(ws: Option<u32>) -> i32 {
    match ws {
        // The low byte: 0 for an exit, else the signal; the next byte: the exit code.
        Some(ws) => match ws.to_le_bytes() {
            [0, code, ..] => i32::from(code),
            [sig, ..] => 128 + i32::from(sig & 0x7f),
        },
        None => 128 + libc::SIGKILL,
    }
}

/// Releases the waiter of a started app container. A waiter that is gone (killed) has
/// nothing to release.
pub fn release_waiter(g: &Context, rec: &Record) -> Result<()> {
    let fifo = g.root.join(&rec.id).join(START_FIFO);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo);
    match f {
        Ok(mut f) => f
            .write_all(b"s")
            .with_context(|| format!("write {}", fifo.display())),
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("open {}", fifo.display())),
    }
}

/// The stdio create was given, from the waiter of a created app container (for `runsc
/// start`, which hands its own to the container). A waiter that is gone means the
/// container was killed before it started.
pub fn waiter_stdio(rec: &Record) -> Result<[OwnedFd; 3]> {
    let pidfd = sys::pidfd_open(rec.pid)
        .ok()
        .filter(|_| rec.alive())
        .ok_or_else(|| anyhow!("cannot start a container that has stopped"))?;
    let fd = |n| {
        sys::pidfd_getfd(pidfd.as_fd(), sys::FdNumber(n))
            .with_context(|| format!("take descriptor {n} of the waiter (pid {})", rec.pid))
    };
    Ok([fd(0)?, fd(1)?, fd(2)?])
}

/// Moves the waiter into the app container's own host cgroup (`linux.cgroupsPath` of the
/// effective spec, which runsc made at create), as runc's init is in its container's: the
/// runc shim reads a task's metrics and OOM events from its pid's cgroup, and the
/// caller's (the shim's) would be reported as the container's (672 MB of working set
/// measured through `ContainerStats`). The container's own processes run in the pod's
/// sandbox, so the figures are the waiter's. Nothing for a systemd or relative path;
/// best effort otherwise (a warning).
pub fn place_waiter(dir: &ContainerDir, pid: i32) {
    let path = super::select::shadow_config(dir).ok().and_then(|v| {
        v.pointer("/linux/cgroupsPath")?
            .as_str()
            .map(str::to_string)
    });
    let Some(path) =
        path.filter(|p| p.starts_with('/') && !p.contains(':') && !p.trim_matches('/').is_empty())
    else {
        return;
    };
    let Ok(layout) = crate::linux::cgroups::Layout::detect() else {
        return;
    };
    for h in &layout.hierarchies {
        let d = h.dir(&path);
        if d.is_dir() {
            if let Err(e) = std::fs::write(d.join("cgroup.procs"), pid.to_string()) {
                crate::log::warn(&format!(
                    "move the waiter into {}: {e}",
                    d.join("cgroup.procs").display()
                ));
            }
        }
    }
}

/// SIGKILLs the waiter and waits (up to 1 s) until it has exited, so that it no longer
/// holds the container's cgroup when runsc removes it.
pub fn end_waiter(rec: &Record) -> Result<()> {
    let Ok(pidfd) = sys::pidfd_open(rec.pid) else {
        return Ok(());
    };
    if !rec.alive() {
        return Ok(());
    }
    match sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL) {
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
            return Err(e).with_context(|| format!("kill waiter (pid {})", rec.pid))
        }
        _ => {}
    }
    let _ = sys::poll_readable_within(pidfd.as_fd(), std::time::Duration::from_secs(1));
    Ok(())
}

/// Sends `sig` to the waiter if it still is the recorded process (pidfd, then the start
/// time). The waiter takes default actions, so a terminating signal ends it and the
/// engine sees 128+N, as when the signal ends a started gVisor container's PID 1.
pub fn kill_waiter(rec: &Record, sig: i32) -> Result<()> {
    if rec.pid <= 0 {
        return Ok(());
    }
    let pidfd = match sys::pidfd_open(rec.pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("pidfd_open waiter (pid {})", rec.pid)),
    };
    if !rec.alive() {
        return Ok(());
    }
    match sys::pidfd_send_signal(pidfd.as_fd(), sig) {
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
            Err(e).with_context(|| format!("signal waiter (pid {})", rec.pid))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn roles_are_read_as_runsc_reads_them() {
        assert_eq!(requested(&ann(&[])).unwrap(), Requested::Own);
        let sb = ann(&[(CONTAINER_TYPE[0], "sandbox"), (SANDBOX_ID[0], "x")]);
        assert_eq!(requested(&sb).unwrap(), Requested::Sandbox);
        let c = ann(&[(CONTAINER_TYPE[0], "container"), (SANDBOX_ID[0], "sb")]);
        assert_eq!(requested(&c).unwrap(), Requested::Container("sb".into()));
        // containerd's type key wins over CRI-O's; containerd's sandbox id over CRI-O's.
        let both = ann(&[
            (CONTAINER_TYPE[0], "container"),
            (CONTAINER_TYPE[1], "sandbox"),
            (SANDBOX_ID[0], "a"),
            (SANDBOX_ID[1], "b"),
        ]);
        assert_eq!(requested(&both).unwrap(), Requested::Container("a".into()));
        let crio = ann(&[(CONTAINER_TYPE[1], "container"), (SANDBOX_ID[1], "b")]);
        assert_eq!(requested(&crio).unwrap(), Requested::Container("b".into()));
        // A container without a sandbox id, or an unknown type (which runsc would treat
        // as "join"), is refused.
        let e = requested(&ann(&[(CONTAINER_TYPE[0], "container")])).unwrap_err();
        assert!(
            e.to_string().contains("no io.kubernetes.cri.sandbox-id"),
            "{e}"
        );
        let e = requested(&ann(&[(CONTAINER_TYPE[0], "pod")])).unwrap_err();
        assert!(
            e.to_string().contains("want \"sandbox\" or \"container\""),
            "{e}"
        );
    }

    #[test]
    fn only_the_sandbox_process_namespace_paths_are_set_aside() {
        let mut spec: crate::spec::Spec = serde_json::from_str(
            r#"{"linux":{"namespaces":[
                {"type":"pid","path":"/proc/42/ns/pid"},
                {"type":"ipc","path":"/proc/42/ns/ipc"},
                {"type":"uts","path":"/proc/43/ns/uts"},
                {"type":"network","path":"/proc/42/ns/net"},
                {"type":"mount"}]}}"#,
        )
        .unwrap();
        let taken = take_sandbox_paths(&mut spec, 42);
        assert_eq!(
            taken,
            [
                ("pid".to_string(), "/proc/42/ns/pid".to_string()),
                ("ipc".to_string(), "/proc/42/ns/ipc".to_string())
            ]
        );
        let paths = |s: &crate::spec::Spec| -> Vec<Option<String>> {
            s.linux()
                .namespaces
                .iter()
                .map(|n| n.path.clone())
                .collect()
        };
        // Another process's namespace and the network path stay for the policy to judge.
        assert_eq!(
            paths(&spec),
            [
                None,
                None,
                Some("/proc/43/ns/uts".into()),
                Some("/proc/42/ns/net".into()),
                None
            ]
        );
        restore_paths(&mut spec, taken);
        assert_eq!(
            paths(&spec)[..2],
            [
                Some("/proc/42/ns/pid".into()),
                Some("/proc/42/ns/ipc".into())
            ]
        );
    }

    #[test]
    fn wait_statuses_become_exit_codes() {
        assert_eq!(exit_code(Some(7 << 8)), 7);
        assert_eq!(exit_code(Some(0)), 0);
        assert_eq!(exit_code(Some(9)), 137);
        assert_eq!(exit_code(Some(15)), 143);
        assert_eq!(exit_code(None), 137);
        // A newer runsc records a file socket in the sandbox's state.
        let dir = std::env::temp_dir().join(format!("moat-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("sb1_sandbox:sb1.state"),
            r#"{"sandbox":{"pid":7,"controlSocketPath":"/r/@runsc/runsc-sb1.sock"}}"#,
        )
        .unwrap();
        assert_eq!(
            control_socket(&dir, "sb1"),
            ControlSocket::Path("/r/@runsc/runsc-sb1.sock".into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let none = std::path::Path::new("/nonexistent");
        assert_eq!(
            control_socket(none, "sb1"),
            ControlSocket::Abstract(b"runsc-sandbox.sb1\0".to_vec())
        );
    }
}
