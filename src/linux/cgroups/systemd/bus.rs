//! moat's side of the conversation with systemd: each one is a run of `moat-dbus`, the
//! D-Bus client (src/bin/moat-dbus.rs), installed next to moat's own binary. moat writes
//! one request to its stdin and reads one reply from its stdout (`wire.rs`), with a
//! deadline: a helper systemd does not answer is killed and the call fails naming the
//! unit, instead of hanging (runc #3904, #4853).
//!
//! A program of its own rather than a library in moat: zbus's code stays out of every
//! start of moat (a larger binary faults in more text at every call, systemd or not), its
//! threads stay out of the process that forks the container, and it inherits nothing
//! but three pipes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::props::Prop;
use super::wire::{Answer, Props, Reply, Request, Value};
use super::Scope;
use crate::linux::cgroups::CgroupError;

/// How long one conversation (its calls and its job) may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// The helper: `moat-dbus` in the directory of the moat binary that runs (symlinks such
/// as `moat-open` resolved; the file moat sealed itself from), never one on `$PATH`.
fn helper() -> Result<PathBuf, CgroupError> {
    let exe = crate::linux::exeseal::original_path().ok_or_else(|| CgroupError::Systemd {
        msg: "systemd: cannot tell where moat's binary is (/proc/self/exe)".into(),
    })?;
    let path = exe.with_file_name("moat-dbus");
    if path.is_file() {
        Ok(path)
    } else {
        Err(CgroupError::Systemd {
            msg: format!(
                "systemd: the systemd cgroup driver needs {}, moat's D-Bus helper, next to {}",
                path.display(),
                exe.display()
            ),
        })
    }
}

fn converse(req: &Request, what: &str) -> Result<Answer, CgroupError> {
    let failed = |msg: String| CgroupError::Systemd { msg };
    let path = helper()?;
    let mut child = Command::new(&path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("systemd: {what}: run {}: {e}", path.display())))?;
    let body = serde_json::to_vec(req).expect("serialises");
    let Some(out) = crate::linux::helper::ask(&mut child, &body, DEADLINE) else {
        return Err(failed(format!(
            "systemd: {what}: no answer within {}s",
            DEADLINE.as_secs()
        )));
    };
    match serde_json::from_slice::<Reply>(&out) {
        Ok(r) => r.map_err(failed),
        Err(_) => Err(failed(format!(
            "systemd: {what}: {} ended without an answer",
            path.display()
        ))),
    }
}

fn wire(props: &[Prop]) -> Props {
    props
        .iter()
        .map(|p| {
            let v = match p {
                Prop::U64(_, n) => Value::U64(*n),
                Prop::Str(_, s) => Value::Str(s.clone()),
                Prop::Bytes(_, b) => Value::Bytes(b.clone()),
                Prop::Devices(d) => Value::Devices(d.clone()),
            };
            (p.name().to_string(), v)
        })
        .collect()
}

/// Row 8 of create under this driver: the fleet slice's limits (when there is a fleet
/// budget), then the scope with `pid` in it, `Delegate=yes` and `props`. Returns the
/// scope's cgroup as systemd reports it and its `InvocationID`. A scope of that name
/// already there is refused and left alone (a failed one is reset and reused).
pub fn start(
    scope: &Scope,
    id: &str,
    pid: i32,
    props: &[Prop],
    fleet: Option<(&str, &[Prop])>,
) -> Result<(String, String), CgroupError> {
    let pid = u32::try_from(pid).unwrap_or(0);
    let s = |v: &str| Value::Str(v.to_string());
    let mut all: Props = vec![
        ("Description".into(), s(&format!("moat container {id}"))),
        ("Slice".into(), s(&scope.slice)),
        ("Delegate".into(), Value::Bool(true)),
        ("PIDs".into(), Value::Pids(vec![pid])),
        ("DefaultDependencies".into(), Value::Bool(false)),
        ("MemoryAccounting".into(), Value::Bool(true)),
        ("CPUAccounting".into(), Value::Bool(true)),
        ("IOAccounting".into(), Value::Bool(true)),
        ("TasksAccounting".into(), Value::Bool(true)),
    ];
    all.extend(wire(props));
    let req = Request::Start {
        user: scope.user,
        unit: scope.unit.clone(),
        props: all,
        fleet: fleet.map(|(slice, p)| (slice.to_string(), wire(p))),
    };
    match converse(&req, &format!("start {}", scope.unit))? {
        Answer::Started { cgroup, invocation } => Ok((cgroup, invocation)),
        a => Err(unexpected(&scope.unit, &a)),
    }
}

fn unexpected(unit: &str, a: &Answer) -> CgroupError {
    CgroupError::Systemd {
        msg: format!("systemd: {unit}: moat-dbus answered {a:?}"),
    }
}

/// `update`: the new values as runtime properties of the scope, if it is still the unit
/// the create started (its `InvocationID` the recorded one); refused otherwise, before
/// any of the scope's files is written.
pub fn set_properties(scope: &Scope, props: &[Prop]) -> Result<(), CgroupError> {
    if props.is_empty() {
        return Ok(());
    }
    let req = Request::Set {
        user: scope.user,
        unit: scope.unit.clone(),
        props: wire(props),
        invocation: scope.invocation.clone().unwrap_or_default(),
    };
    match converse(&req, &format!("update {}", scope.unit))? {
        Answer::Done => Ok(()),
        Answer::NotOurs(found) => Err(CgroupError::Systemd {
            msg: format!(
                "systemd: update {}: not the unit this container started (InvocationID {}, recorded {}): nothing changed",
                scope.unit,
                if found.is_empty() { "none: no such unit" } else { &found },
                scope.invocation.as_deref().unwrap_or("none")
            ),
        }),
        a => Err(unexpected(&scope.unit, &a)),
    }
}

/// `delete`: the scope stopped (a unit systemd already collected is fine) and a failed
/// one reset, so its name can be used again; only if its `InvocationID` is still
/// `invocation`, the one recorded when moat started it. Returns the unit's `InvocationID`
/// when it was not stopped for not being that one (empty: no such unit any more).
pub fn delete(scope: &Scope, invocation: &str) -> Result<Option<String>, CgroupError> {
    let req = Request::Stop {
        user: scope.user,
        unit: scope.unit.clone(),
        invocation: invocation.to_string(),
    };
    match converse(&req, &format!("stop {}", scope.unit))? {
        Answer::Done => Ok(None),
        Answer::NotOurs(found) => Ok(Some(found)),
        a => Err(unexpected(&scope.unit, &a)),
    }
}

/// The scope's `InvocationID` now (empty: no such unit).
pub fn invocation(scope: &Scope) -> Result<String, CgroupError> {
    let req = Request::Invocation {
        user: scope.user,
        unit: scope.unit.clone(),
    };
    match converse(&req, &format!("look up {}", scope.unit))? {
        Answer::Invocation(found) => Ok(found),
        a => Err(unexpected(&scope.unit, &a)),
    }
}
