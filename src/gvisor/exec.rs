//! `exec` into a gVisor container: runc's flags translated to runsc's. runsc has no
//! `--tty`: the terminal setting travels in a process.json, written here for the argv
//! form. A caller's `--process` file is never handed to runsc as it is: it is parsed (keys
//! checked) and serialised again from moat's type (`super::spec`).

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde_json::{json, Value};

use super::runsc::Runsc;
use super::{select, Gvisor};
use crate::container::exec::Error as RequestError;
use crate::container::{exec as exec_req, Context};
use crate::linux::capabilities;
use crate::state::{ContainerDir, Record};

/// What a gVisor container refuses of an exec request (runsc has no way to do it).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("--preserve-fds {0}: runsc cannot pass extra descriptors to a gVisor container")]
    PreserveFds(u32),
    #[error("--process-label: SELinux is not supported by gVisor")]
    ProcessLabel(String),
    #[error(
        "--tty --console-socket without --detach: runsc uses its own stdio as the terminal \
         of a foreground exec; add --detach, or drop --console-socket"
    )]
    ForegroundConsoleSocket(PathBuf),
    /// The shadow bundle's `process.capabilities` does not parse.
    #[error("process.capabilities")]
    ShadowCapabilities(#[source] serde_json::Error),
}

/// `exec`: runc's flags translated; `--tty` dropped (the terminal setting travels in a
/// process.json, written here for the argv form). Detached: runsc is waited for and its
/// status made runc's; foreground: runsc replaces moat, so the process's status, stdio
/// and signals pass straight through.
pub fn exec(
    g: &Context,
    dir: &ContainerDir,
    rec: &Record,
    gv: &Gvisor,
    a: &exec_req::Request,
) -> Result<i32> {
    if a.pidfd_socket.is_some() {
        anyhow::bail!(
            "--pidfd-socket is not supported for gVisor containers (their processes live in \
             the sentry, where no host pidfd names them)"
        );
    }
    // An app container of a pod whose waiter is gone has exited for the engine, though
    // runsc may still run it (`super::pod`).
    if super::pod::app_sandbox(gv).is_some() && !rec.alive() {
        anyhow::bail!("container not running");
    }
    if a.preserve_fds > 0 {
        return Err(Refused::PreserveFds(a.preserve_fds).into());
    }
    if let Some(l) = a.process_label.as_ref().filter(|l| !l.is_empty()) {
        return Err(Refused::ProcessLabel(l.clone()).into());
    }
    if a.apparmor.is_some() {
        crate::log::warn("--apparmor ignored: gVisor does not apply AppArmor profiles");
    }
    if let Some(sock) = a.console_socket.as_ref().filter(|_| a.tty && !a.detach) {
        return Err(Refused::ForegroundConsoleSocket(sock.clone()).into());
    }
    if !a.cgroup.is_empty() {
        crate::log::warn("--cgroup ignored: a gVisor container has one host cgroup, its sandbox's");
    }
    let shadow: Value = select::shadow_config(dir)?;
    let filter = container_filter(dir, &shadow)?;
    let bounding = container_bounding(&shadow)?;
    for c in &a.cap {
        cap_name(c, bounding)?;
    }
    let mut r = Runsc::new(gv, g, "exec");
    let restricted = rec.policy == crate::policy::Mode::Restricted;
    let process = match (&a.process, a.tty) {
        (Some(p), tty) => Some(process_file(dir, p, &shadow, &filter, restricted, tty)?),
        (None, true) => {
            let mut p = argv_process(&shadow, a, bounding)?;
            under_container_filter(&filter, &mut p);
            Some(write_process(dir, &p)?)
        }
        (None, false) => {
            if a.command.is_empty() {
                return Err(RequestError::NoCommand.into());
            }
            if let Some(u) = &a.user {
                crate::container::exec::parse_user(u)?;
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
        .id(&rec.id);
    if a.process.is_none() && !a.tty {
        let nnp = shadow
            .pointer("/process/noNewPrivileges")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut argv = container_prefix(&filter, nnp).unwrap_or_default();
        argv.extend(a.command.iter().cloned());
        r = r.args(&argv);
    }
    if a.detach {
        r.check_detach_bug()?;
        return r.wait();
    }
    Err(r.exec())
}

/// The args that begin with the seccomp trampoline's prefix (`super::seccomp_exec`) when
/// the container has a profile: kept apart when the container's own process runs under
/// runsc's conversion of it (`super::seccomp_runsc`), else that process's args.
fn container_filter(dir: &ContainerDir, shadow: &Value) -> Result<Option<Vec<String>>> {
    let file = super::seccomp_exec::EXEC_PREFIX_FILE;
    if let Some(b) = dir.read_file(file)? {
        let prefix = serde_json::from_slice(&b)
            .map_err(|e| anyhow::anyhow!("{}: {e}", dir.file(file).display()))?;
        return Ok(Some(prefix));
    }
    Ok(shadow
        .pointer("/process/args")
        .and_then(|a| serde_json::from_value(a.clone()).ok()))
}

/// The trampoline's prefix with no_new_privs set to `nnp`, when the container has a
/// profile.
fn container_prefix(filter: &Option<Vec<String>>, nnp: bool) -> Option<Vec<String>> {
    super::seccomp_exec::prefix_of(filter.as_deref()?, nnp)
}

/// Runs process `p` under the container's filter, as its own process runs: runsc starts
/// exec'd processes without the profile.
fn under_container_filter(filter: &Option<Vec<String>>, p: &mut Value) {
    let nnp = p
        .get("noNewPrivileges")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if let Some(mut args) = container_prefix(filter, nnp) {
        if let Some(a) = p.get("args").and_then(Value::as_array) {
            args.extend(a.iter().filter_map(|s| s.as_str().map(String::from)));
        }
        p["args"] = json!(args);
    }
}

fn container_bounding(shadow: &Value) -> Result<u64> {
    let caps = shadow.pointer("/process/capabilities").cloned();
    let caps: Option<crate::spec::Capabilities> = match caps {
        Some(c) => Some(serde_json::from_value(c).map_err(Refused::ShadowCapabilities)?),
        None => None,
    };
    Ok(capabilities::from_saved(caps.as_ref()).bounding)
}

/// `--cap X` as runsc wants it (`CAP_X`), never wider than the container.
fn cap_name(c: &str, bounding: u64) -> Result<String, RequestError> {
    let Some(bit) = capabilities::number(c) else {
        return Err(RequestError::UnknownCap(c.to_string()));
    };
    if bounding & (1 << bit) == 0 {
        return Err(RequestError::CapNotInBounding(c.to_string()));
    }
    Ok(capabilities::NAMES[bit as usize].to_string())
}

/// A process.json for `exec -t` in argv form: the container's process with runc's
/// overrides applied.
fn argv_process(shadow: &Value, a: &exec_req::Request, bounding: u64) -> Result<Value> {
    if a.command.is_empty() {
        return Err(RequestError::NoCommand.into());
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
        let (uid, gid) = crate::container::exec::parse_user(u)?;
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
fn write_process(dir: &ContainerDir, p: &Value) -> Result<PathBuf> {
    let name = format!("exec-{}.json", std::process::id());
    dir.save_file(&name, &serde_json::to_vec(p)?)?;
    Ok(dir.file(&name))
}

/// `--process F`: moat's serialisation of the file, with `terminal: true` for `--tty`.
/// Under RESTRICTED it is cut to the container's capabilities, with NNP:
/// engines send full process specs with their default capabilities on every exec (podman
/// does), which the sentry would grant.
fn process_file(
    dir: &ContainerDir,
    path: &Path,
    shadow: &Value,
    filter: &Option<Vec<String>>,
    restricted: bool,
    tty: bool,
) -> Result<PathBuf> {
    let mut p = super::spec::read_process(path)?;
    if restricted {
        let container = shadow.get("process").cloned().unwrap_or_else(|| json!({}));
        let removed = super::policy::restrict_exec(&mut p, &container);
        if !removed.is_empty() {
            crate::log::debug(&format!(
                "exec: capabilities beyond the container's removed (RESTRICTED): {}",
                removed.join(",")
            ));
        }
    }
    if tty {
        p["terminal"] = json!(true);
    }
    under_container_filter(filter, &mut p);
    write_process(dir, &p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_named_and_bounded() {
        let b = 1 << capabilities::number("CAP_KILL").unwrap();
        assert_eq!(cap_name("kill", b).unwrap(), "CAP_KILL");
        assert!(cap_name("CAP_SYS_ADMIN", b).is_err());
        assert!(cap_name("CAP_NOPE", b).is_err());
    }
}
