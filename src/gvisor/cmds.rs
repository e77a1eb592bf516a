//! The lifecycle commands for a gVisor container, each reached from one early branch in
//! `src/cli/<cmd>.rs`. Flags arrive parsed by moat's runc-compatible CLI (short forms
//! included) and leave as runsc's long `--name=value` forms, before the id.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::runsc::Runsc;
use super::select::{self, Prepared, Selection};
use super::Gvisor;
use crate::cli::{create as create_cli, exec as exec_cli, run as run_cli, Global};
use crate::linux::{capabilities, sys};
use crate::state::{ContainerDir, Record, Status};

/// What `runsc state` says, or `None` when runsc does not know the container.
pub(super) struct RunscState {
    pub status: Status,
    pub pid: i32,
    pub raw: Value,
}

pub(super) fn runsc_state(g: &Global, gv: &Gvisor, id: &str) -> Result<Option<RunscState>> {
    let out = Runsc::quiet(gv, g, "state").args([id]).output()?;
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
    let pid = raw["pid"].as_i64().unwrap_or(0) as i32;
    // runsc probes its sandbox with kill(pid, 0), which a zombie passes: a sandbox that
    // exited but is not reaped yet (this host's PID 1 reaps late) is stopped.
    let status = match status {
        Status::Created | Status::Running | Status::Paused if !alive(pid) => Status::Stopped,
        s => s,
    };
    Ok(Some(RunscState { status, pid, raw }))
}

fn alive(pid: i32) -> bool {
    pid > 0 && crate::state::process_start_time(pid).is_some_and(|(st, _)| st != 'Z' && st != 'X')
}

/// Status and host pid (0 when stopped) for `list`; a container runsc does not know
/// (a create that failed half-way) shows as stopped.
pub fn status(g: &Global, rec: &Record, gv: &Gvisor) -> Result<(Status, i32)> {
    Ok(match runsc_state(g, gv, &rec.id)? {
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

pub fn state(g: &Global, rec: &Record, gv: &Gvisor) -> Result<i32> {
    let Some(st) = runsc_state(g, gv, &rec.id)? else {
        bail!("container does not exist");
    };
    println!(
        "{}",
        serde_json::to_string_pretty(&complete_state(rec, &st))?
    );
    Ok(0)
}

/// Removes runsc's container (if any) and the state directory; errors are ignored (this
/// undoes a create that failed).
fn discard(g: &Global, gv: &Gvisor, root: &Path, id: &str) {
    let _ = Runsc::quiet(gv, g, "delete")
        .flag("force", true)
        .args([id])
        .output();
    if let Ok(dir) = ContainerDir::open(root, id) {
        let _ = dir.remove();
    }
}

/// `runsc create` for a prepared container; a failure leaves nothing behind, as runc.
fn create_prepared(g: &Global, p: Prepared, a: &create_cli::Args) -> Result<i32> {
    let code = Runsc::new(&p.gv, g, "create")
        .opt("bundle", &p.shadow)
        .opt_some("console-socket", a.console_socket.as_ref())
        .opt_some("pid-file", a.pid_file.as_ref())
        .args([&a.id])
        .wait()?;
    drop(p.dir);
    if code != 0 {
        discard(g, &p.gv, &g.state_root(), &a.id);
    }
    Ok(code)
}

pub fn create(g: &Global, a: &create_cli::Args, sel: Selection) -> Result<i32> {
    // --no-pivot and --no-new-keyring mean nothing to the sentry; --preserve-fds > 0 is
    // refused in prepare.
    let p = select::prepare(g, &a.bundle, &a.id, a.preserve_fds, sel)?;
    create_prepared(g, p, a)
}

pub fn run(g: &Global, a: &run_cli::Args, sel: Selection) -> Result<i32> {
    if a.keep {
        bail!("--keep is not supported for gVisor containers (runsc removes its container when the process exits)");
    }
    let c = &a.create;
    let p = select::prepare(g, &c.bundle, &c.id, c.preserve_fds, sel)?;
    let root = g.state_root();
    if a.detach {
        // create + start rather than `runsc run --detach`, whose re-execution drops every
        // argument containing "detach".
        let gv = p.gv.clone();
        let code = create_prepared(g, p, c)?;
        if code != 0 {
            return Ok(code);
        }
        let code = Runsc::new(&gv, g, "start").args([&c.id]).wait()?;
        if code != 0 {
            discard(g, &gv, &root, &c.id);
        }
        return Ok(code);
    }
    let Prepared { dir, gv, shadow } = p;
    // Unlocked while the container runs, so kill and state can reach it.
    drop(dir);
    let status = Runsc::new(&gv, g, "run")
        .opt("bundle", &shadow)
        .opt_some("console-socket", c.console_socket.as_ref())
        .opt_some("pid-file", c.pid_file.as_ref())
        .args([&c.id])
        .wait_raw();
    discard(g, &gv, &root, &c.id);
    status
}

pub fn start(g: &Global, rec: &Record, gv: &Gvisor) -> Result<i32> {
    Runsc::new(gv, g, "start").args([&rec.id]).wait()
}

pub fn pause(g: &Global, rec: &Record, gv: &Gvisor) -> Result<i32> {
    Runsc::new(gv, g, "pause").args([&rec.id]).wait()
}

pub fn resume(g: &Global, rec: &Record, gv: &Gvisor) -> Result<i32> {
    Runsc::new(gv, g, "resume").args([&rec.id]).wait()
}

/// `ps --format table|json`. runsc lists the sandbox's own pids; ps arguments after `--`
/// are not supported by runsc and are dropped.
pub fn ps(g: &Global, rec: &Record, gv: &Gvisor, format: &str, ps_args: &[String]) -> Result<i32> {
    if !ps_args.is_empty() {
        crate::log::warn(&format!(
            "ps arguments {ps_args:?} ignored: runsc's ps takes none"
        ));
    }
    Runsc::new(gv, g, "ps")
        .opt("format", format)
        .args([&rec.id])
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
        Err(e) => return Err(e).context("pidfd_open sandbox"),
    };
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !cmdline.starts_with(b"runsc-sandbox\0") {
        return Ok(());
    }
    match sys::pidfd_send_signal(std::os::fd::AsFd::as_fd(&pidfd), libc::SIGKILL) {
        Err(e) if e.raw_os_error() != Some(libc::ESRCH) => Err(e).context("kill sandbox"),
        _ => Ok(()),
    }
}

/// runc's kill on top of runsc's: a created container is killed by killing its sandbox
/// (runsc refuses to signal it); a stopped one is `container not running` (success with
/// `--all`, which containerd's shim sends after every exit).
pub fn kill(g: &Global, rec: &Record, gv: &Gvisor, all: bool, sig: i32) -> Result<i32> {
    let Some(st) = runsc_state(g, gv, &rec.id)? else {
        bail!("container does not exist");
    };
    match st.status {
        Status::Stopped if all => Ok(0),
        Status::Stopped => bail!("container not running"),
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
                let code = Runsc::new(gv, g, "resume").args([&rec.id]).wait()?;
                if code != 0 {
                    return Ok(code);
                }
            }
            Runsc::new(gv, g, "kill")
                .flag("all", all)
                .args([rec.id.clone(), sig.to_string()])
                .wait()
        }
    }
}

/// `delete [--force]`: runsc deletes, then the state directory goes. runsc deletes a
/// created container without `--force`, as runc does. A container runsc no longer knows
/// is gone: with `--force` that is success.
pub fn delete(
    g: &Global,
    dir: ContainerDir,
    rec: &Record,
    gv: &Gvisor,
    force: bool,
) -> Result<i32> {
    let out = Runsc::quiet(gv, g, "delete")
        .flag("force", force)
        .args([&rec.id])
        .output()?;
    if out.code == 0 || (force && out.not_exist()) {
        dir.remove()?;
        return Ok(0);
    }
    if out.not_exist() {
        bail!("container does not exist");
    }
    // runsc gives up waiting for a sandbox nobody has reaped yet, after removing its
    // state: the container is gone all the same.
    if matches!(runsc_state(g, gv, &rec.id), Ok(None)) {
        dir.remove()?;
        return Ok(0);
    }
    bail!("{}", out.error())
}

/// `exec`: runc's flags translated; `--tty` dropped (the terminal setting travels in a
/// process.json, written here for the argv form). Detached: runsc is waited for and its
/// status made runc's; foreground: runsc replaces moat, so the process's status, stdio
/// and signals pass straight through.
pub fn exec(
    g: &Global,
    dir: &ContainerDir,
    rec: &Record,
    gv: &Gvisor,
    a: &exec_cli::Args,
) -> Result<i32> {
    if a.preserve_fds > 0 {
        bail!(
            "--preserve-fds {}: runsc cannot pass extra descriptors to a gVisor container",
            a.preserve_fds
        );
    }
    if a.process_label.as_deref().is_some_and(|l| !l.is_empty()) {
        bail!("--process-label: SELinux is not supported by gVisor");
    }
    if a.apparmor.is_some() {
        crate::log::warn("--apparmor ignored: gVisor does not apply AppArmor profiles");
    }
    if a.tty && a.console_socket.is_some() && !a.detach {
        bail!(
            "--tty --console-socket without --detach: runsc uses its own stdio as the terminal \
             of a foreground exec; add --detach, or drop --console-socket"
        );
    }
    if a.cgroup.is_some() {
        crate::log::warn("--cgroup ignored: a gVisor container has one host cgroup, its sandbox's");
    }
    let shadow: Value = {
        let path = dir.file(&format!("{}/config.json", select::BUNDLE_DIR));
        let b = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        serde_json::from_slice(&b).with_context(|| format!("parse {}", path.display()))?
    };
    let bounding = container_bounding(&shadow)?;
    for c in &a.cap {
        cap_name(c, bounding)?;
    }
    let mut r = Runsc::new(gv, g, "exec");
    let process = match (&a.process, a.tty) {
        (Some(p), false) => Some(p.clone()),
        (Some(p), true) => Some(with_terminal(dir, p)?),
        (None, true) => Some(write_process(dir, &argv_process(&shadow, a, bounding)?)?),
        (None, false) => {
            if a.command.is_empty() {
                bail!("exec needs a command to run");
            }
            if let Some(u) = &a.user {
                crate::cli::exec::parse_user(u)?;
                r = r.opt("user", u);
            }
            r = r.opt_some("cwd", a.cwd.as_ref());
            for e in &a.env {
                r = r.opt("env", e);
            }
            for gid in &a.additional_gids {
                r = r.opt("additional-gids", gid.to_string());
            }
            for c in &a.cap {
                r = r.opt("cap", cap_name(c, bounding)?);
            }
            None
        }
    };
    r = r
        .opt_some("process", process)
        .opt_some("console-socket", a.console_socket.as_ref())
        .opt_some("pid-file", a.pid_file.as_ref())
        .flag("detach", a.detach)
        .args([&rec.id]);
    if a.process.is_none() && !a.tty {
        r = r.args(&a.command);
    }
    if a.detach {
        r.check_detach_bug()?;
        return r.wait();
    }
    Err(r.exec())
}

fn container_bounding(shadow: &Value) -> Result<u64> {
    let caps = shadow.pointer("/process/capabilities").cloned();
    let caps: Option<crate::spec::Capabilities> = match caps {
        Some(c) => Some(serde_json::from_value(c).context("process.capabilities")?),
        None => None,
    };
    Ok(capabilities::from_spec(caps.as_ref(), "process.capabilities")?.bounding)
}

/// `--cap X` as runsc wants it (`CAP_X`), never wider than the container.
fn cap_name(c: &str, bounding: u64) -> Result<String> {
    let Some(bit) = capabilities::number(c) else {
        bail!("--cap {c}: unknown capability");
    };
    if bounding & (1 << bit) == 0 {
        bail!("--cap {c}: not in the container's bounding set");
    }
    Ok(capabilities::NAMES[bit as usize].to_string())
}

/// A process.json for `exec -t` in argv form: the container's process with runc's
/// overrides applied.
fn argv_process(shadow: &Value, a: &exec_cli::Args, bounding: u64) -> Result<Value> {
    if a.command.is_empty() {
        bail!("exec needs a command to run");
    }
    let mut p = shadow.get("process").cloned().unwrap_or_else(|| json!({}));
    p["args"] = json!(a.command);
    p["terminal"] = json!(true);
    if !a.env.is_empty() {
        let mut env: Vec<String> = p["env"]
            .as_array()
            .map(|e| {
                e.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let key = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).to_string();
        for kv in &a.env {
            env.retain(|e| key(e) != key(kv));
            env.push(kv.clone());
        }
        p["env"] = json!(env);
    }
    if let Some(cwd) = &a.cwd {
        p["cwd"] = json!(cwd);
    }
    if let Some(u) = &a.user {
        let (uid, gid) = crate::cli::exec::parse_user(u)?;
        p["user"]["uid"] = json!(uid);
        p["user"]["gid"] = json!(gid.unwrap_or(0));
    }
    if !a.additional_gids.is_empty() {
        p["user"]["additionalGids"] = json!(a.additional_gids);
    }
    for c in &a.cap {
        let name = cap_name(c, bounding)?;
        for set in ["bounding", "effective", "permitted", "ambient"] {
            let caps = &mut p["capabilities"][set];
            if !caps.is_array() {
                *caps = json!([]);
            }
            let list = caps.as_array_mut().expect("array");
            if !list.iter().any(|n| n == name.as_str()) {
                list.push(json!(name));
            }
        }
    }
    Ok(p)
}

/// Writes a process.json into the state directory (removed with it at delete).
fn write_process(dir: &ContainerDir, p: &Value) -> Result<std::path::PathBuf> {
    let name = format!("exec-{}.json", std::process::id());
    dir.save_file(&name, &serde_json::to_vec(p)?)?;
    Ok(dir.file(&name))
}

/// `--process F --tty`: runsc has no `--tty`; a process file without `terminal: true`
/// gets a copy that has it.
fn with_terminal(dir: &ContainerDir, path: &Path) -> Result<std::path::PathBuf> {
    let b = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let mut p: Value =
        serde_json::from_slice(&b).with_context(|| format!("parse {}", path.display()))?;
    if p["terminal"] == json!(true) {
        return Ok(path.to_path_buf());
    }
    p["terminal"] = json!(true);
    write_process(dir, &p)
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
    fn caps_are_named_and_bounded() {
        let b = 1 << capabilities::number("CAP_KILL").unwrap();
        assert_eq!(cap_name("kill", b).unwrap(), "CAP_KILL");
        assert!(cap_name("CAP_SYS_ADMIN", b).is_err());
        assert!(cap_name("CAP_NOPE", b).is_err());
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
            backend: crate::gvisor::Backend::Native,
        };
        let st = RunscState {
            status: Status::Stopped,
            pid: -1,
            raw: json!({"ociVersion":"1.0.2-dev","id":"c","status":"stopped","pid":-1,"bundle":"/run/moat/c/bundle"}),
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
