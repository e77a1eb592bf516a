//! The D-Bus conversation with systemd's manager (`org.freedesktop.systemd1.Manager`),
//! with zbus.
//!
//! Every conversation runs in a child process moat forks for it ([`in_helper`]): zbus
//! starts threads, and moat forks its own code later in create (idmap and overlay
//! helpers), which a thread holding the allocator's lock would deadlock. The child
//! sends one JSON line back over a pipe; the parent waits for it with a deadline and
//! kills the child when systemd does not answer, so a busy systemd fails the call
//! clearly instead of hanging it (runc #3904, #4853).
//!
//! Connection: the system bus (one connection per conversation; `Subscribe` and a match
//! rule narrowed to the unit's `JobRemoved` signals). systemd's private socket
//! (`/run/systemd/private`, no dbus-daemon hop) would be cheaper, but systemd sends
//! there as `org.freedesktop.systemd1`, which zbus refuses as a sender (it wants a
//! unique name). Rootless: the user bus (`$DBUS_SESSION_BUS_ADDRESS`, else
//! `$XDG_RUNTIME_DIR/bus`), authenticating (`EXTERNAL`) as the caller's host uid, which
//! is not the uid moat has inside an engine's user namespace.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::pin::Pin;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use zbus::export::futures_core::Stream;
use zbus::message::Type;
use zbus::{Connection, MatchRule, MessageStream};
use zbus::{OwnedObjectPath, Variant as Value};

use super::props::Prop;
use super::Scope;
use crate::linux::cgroups::CgroupError;
use crate::linux::sys;

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// How long one operation (its calls and its job) may take before moat gives up.
const DEADLINE: Duration = Duration::from_secs(30);

/// The unit as systemd made it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Started {
    /// Its cgroup, as systemd reports it (`ControlGroup`).
    pub cgroup: String,
}

fn err(op: &str, unit: &str, e: impl std::fmt::Display) -> String {
    format!("systemd: {op} {unit}: {e}")
}

/// Runs `work` (one conversation) in a forked child and returns its result, or an
/// error naming `what` when the child does not answer within [`DEADLINE`].
fn in_helper<T, F>(what: &str, work: F) -> Result<T, CgroupError>
where
    T: Serialize + for<'de> Deserialize<'de>,
    F: FnOnce() -> Result<T, String>,
{
    let failed = |msg: String| CgroupError::Systemd { msg };
    let (rd, wr) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| failed(format!("systemd: {what}: pipe: {e}")))?;
    let pid = match sys::clone_fork(0, None)
        .map_err(|e| failed(format!("systemd: {what}: fork: {e}")))?
    {
        sys::Forked::Child => {
            drop(rd);
            // Nothing of the caller's (the state lock, the sync socket, the console)
            // stays open in the helper: a create killed meanwhile must be seen as gone.
            let r = match sys::close_all_but(wr.as_fd()) {
                Ok(()) => work(),
                Err(e) => Err(format!("systemd: {what}: close inherited fds: {e}")),
            };
            let line = serde_json::to_vec(&r).unwrap_or_default();
            let _ = std::fs::File::from(wr).write_all(&line);
            sys::exit_now(0)
        }
        sys::Forked::Parent(pid) => pid,
    };
    drop(wr);
    let deadline = Instant::now() + DEADLINE;
    let mut out = Vec::new();
    let mut file = std::fs::File::from(rd);
    let answered = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sys::poll_readable_within(file.as_fd(), left) {
            Ok(true) => {}
            Ok(false) | Err(_) => break false,
        }
        let mut buf = [0u8; 4096];
        match file.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
    };
    if !answered {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    if !answered {
        return Err(failed(format!(
            "systemd: {what}: no answer within {}s",
            DEADLINE.as_secs()
        )));
    }
    match serde_json::from_slice::<Result<T, String>>(&out) {
        Ok(r) => r.map_err(failed),
        Err(_) => Err(failed(format!(
            "systemd: {what}: the D-Bus helper ended without an answer"
        ))),
    }
}

/// The connection to the manager that owns `scope`.
async fn connect(user: Option<u32>) -> zbus::Result<Connection> {
    let timeout = DEADLINE;
    let Some(uid) = user else {
        return zbus::connection::Builder::system()
            .method_timeout(timeout)
            .build()
            .await;
    };
    let runtime = std::env::var("XDG_RUNTIME_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| format!("/run/user/{uid}"));
    let addr = std::env::var("DBUS_SESSION_BUS_ADDRESS")
        .ok()
        .filter(|a| a.starts_with("unix:"))
        .unwrap_or_else(|| format!("unix:path={runtime}/bus"));
    zbus::connection::Builder::address(addr.as_str())
        .user_id(uid)
        .method_timeout(timeout)
        .build()
        .await
}

async fn call(
    conn: &Connection,
    method: &str,
    body: &(impl serde::Serialize + zbus::zvariant::DynamicType),
) -> zbus::Result<zbus::Message> {
    conn.call_method(Some(DEST), PATH, Some(MANAGER), method, body)
        .await
}

/// The D-Bus error name of a method error (`org.freedesktop.systemd1.NoSuchUnit`, …).
fn error_name(e: &zbus::Error) -> Option<&str> {
    match e {
        zbus::Error::MethodError(name, _, _) => Some(name.as_str()),
        _ => None,
    }
}

/// Sends a job-returning call and waits for its `JobRemoved`, whose result must be
/// `done`. The signal stream is set up before the call, so the signal cannot be missed.
async fn job(
    conn: &Connection,
    unit: &str,
    method: &str,
    body: &(impl serde::Serialize + zbus::zvariant::DynamicType),
) -> zbus::Result<Result<(), String>> {
    // Only this unit's jobs: on a busy host systemd signals every job to every
    // subscriber.
    let rule = MatchRule::builder()
        .msg_type(Type::Signal)
        .interface(MANAGER)
        .member("JobRemoved")
        .arg(2, unit.to_string())
        .build()?;
    let mut stream = MessageStream::for_match_rule(rule, conn, None).await?;
    call(conn, "Subscribe", &()).await?;
    let reply = call(conn, method, body).await?;
    let job: OwnedObjectPath = reply.body().deserialize()?;
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await;
        let Some(msg) = next else {
            return Ok(Err("the connection closed before the job ended".into()));
        };
        let msg = msg?;
        let Ok((_, path, _, result)) = msg
            .body()
            .deserialize::<(u32, OwnedObjectPath, String, String)>()
        else {
            continue;
        };
        if path == job {
            return Ok(if result == "done" {
                Ok(())
            } else {
                Err(format!("job {result}"))
            });
        }
    }
}

fn variants(props: &[Prop]) -> Vec<(&'static str, Value<'static>)> {
    props
        .iter()
        .map(|p| {
            let v = match p {
                Prop::U64(_, n) => Value::from(*n),
                Prop::Str(_, s) => Value::from(s.clone()),
                Prop::Bytes(_, b) => Value::from(b.clone()),
                Prop::Devices(d) => Value::from(d.clone()),
            };
            (p.name(), v)
        })
        .collect()
}

/// The unit's `ControlGroup` property.
async fn control_group(conn: &Connection, unit: &str, iface: &str) -> zbus::Result<String> {
    let reply = call(conn, "GetUnit", &(unit,)).await?;
    let path: OwnedObjectPath = reply.body().deserialize()?;
    let reply = conn
        .call_method(
            Some(DEST),
            path.as_str(),
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(iface, "ControlGroup"),
        )
        .await?;
    let v: zbus::OwnedVariant = reply.body().deserialize()?;
    Ok(String::try_from(v).unwrap_or_default())
}

type Aux = Vec<(&'static str, Vec<(&'static str, Value<'static>)>)>;

/// Starts the transient unit `unit` with `props`; a failed unit of that name left by an
/// earlier create is reset and the start tried once more.
async fn start_unit(
    conn: &Connection,
    unit: &str,
    props: &[(&'static str, Value<'static>)],
) -> Result<(), String> {
    let aux: Aux = Vec::new();
    for retry in [false, true] {
        let body = (unit, "replace", props.to_vec(), aux.clone());
        match job(conn, unit, "StartTransientUnit", &body).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => return Err(err("start", unit, e)),
            Err(e) if !retry && error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => {
                let _ = call(conn, "ResetFailedUnit", &(unit,)).await;
            }
            Err(e) => return Err(err("start", unit, e)),
        }
    }
    Err(err("start", unit, "the unit already exists"))
}

/// Row 8 of create under this driver: the fleet slice's limits (when there is a fleet
/// budget), then the scope with `pid` in it, `Delegate=yes` and `props`. Returns the
/// scope's cgroup as systemd reports it.
pub fn start_in_helper(
    scope: &Scope,
    id: &str,
    pid: i32,
    props: &[Prop],
    fleet: Option<(&str, &[Prop])>,
) -> Result<Started, CgroupError> {
    let pid = u32::try_from(pid).unwrap_or(0);
    in_helper(&format!("start {}", scope.unit), || {
        zbus::block_on(async {
            let conn = connect(scope.user)
                .await
                .map_err(|e| err("connect for", &scope.unit, e))?;
            if let Some((slice, limits)) = fleet {
                let limits = variants(limits);
                let set = call(&conn, "SetUnitProperties", &(slice, true, limits.clone())).await;
                if set.is_err() {
                    start_unit(&conn, slice, &limits).await?;
                }
            }
            let mut all: Vec<(&'static str, Value<'static>)> = vec![
                ("Description", Value::from(format!("moat container {id}"))),
                ("Slice", Value::from(scope.slice.clone())),
                ("Delegate", Value::from(true)),
                ("PIDs", Value::from(vec![pid])),
                ("DefaultDependencies", Value::from(false)),
                ("MemoryAccounting", Value::from(true)),
                ("CPUAccounting", Value::from(true)),
                ("IOAccounting", Value::from(true)),
                ("TasksAccounting", Value::from(true)),
            ];
            all.extend(variants(props));
            start_unit(&conn, &scope.unit, &all).await?;
            let cgroup = control_group(&conn, &scope.unit, "org.freedesktop.systemd1.Scope")
                .await
                .map_err(|e| err("read the cgroup of", &scope.unit, e))?;
            Ok(Started { cgroup })
        })
    })
}

/// `update`: the new values as runtime properties of the scope.
pub fn set_properties(scope: &Scope, props: &[Prop]) -> Result<(), CgroupError> {
    if props.is_empty() {
        return Ok(());
    }
    in_helper(&format!("update {}", scope.unit), || {
        zbus::block_on(async {
            let conn = connect(scope.user)
                .await
                .map_err(|e| err("connect for", &scope.unit, e))?;
            call(
                &conn,
                "SetUnitProperties",
                &(scope.unit.as_str(), true, variants(props)),
            )
            .await
            .map_err(|e| err("set properties of", &scope.unit, e))?;
            Ok(())
        })
    })
}

/// `delete`: the scope stopped (a unit systemd already collected is fine) and a failed
/// one reset, so its name can be used again.
pub fn delete(scope: &Scope) -> Result<(), CgroupError> {
    in_helper(&format!("stop {}", scope.unit), || {
        zbus::block_on(async {
            let conn = connect(scope.user)
                .await
                .map_err(|e| err("connect for", &scope.unit, e))?;
            let unit = scope.unit.as_str();
            match job(&conn, unit, "StopUnit", &(unit, "replace")).await {
                Ok(_) => {}
                Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {}
                Err(e) => return Err(err("stop", unit, e)),
            }
            let _ = call(&conn, "ResetFailedUnit", &(unit,)).await;
            Ok(())
        })
    })
}
