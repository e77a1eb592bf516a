//! moat-dbus: the D-Bus client of moat's systemd cgroup driver, a program of its own.
//!
//! moat runs it (next to its own binary) for each conversation with systemd: one JSON
//! request on stdin, one JSON reply on stdout (`src/linux/cgroups/systemd/wire.rs`).
//! Keeping zbus out of `moat` keeps its code, threads and start-up cost off every
//! container that does not use `--systemd-cgroup` (a larger binary faults in more text at
//! every start), and out of the process that forks the container.
//!
//! Connection: the system bus, or the user's bus (`$DBUS_SESSION_BUS_ADDRESS`, else
//! `$XDG_RUNTIME_DIR/bus`) for a user manager, authenticating (`EXTERNAL`) as the host
//! uid moat passes: inside an engine's user namespace moat is uid 0, which is not who
//! the bus sees. systemd's private socket (`/run/systemd/private`, no dbus-daemon hop)
//! would be cheaper, but systemd sends there as `org.freedesktop.systemd1`, which zbus
//! refuses as a sender. Every job is waited for through its `JobRemoved` signal, with a
//! match rule narrowed to the unit and set up before the call; moat bounds the whole
//! conversation with a deadline and kills this program when systemd does not answer.

#[path = "../linux/cgroups/systemd/wire.rs"]
mod wire;

use std::io::{Read, Write};
use std::pin::Pin;
use std::time::Duration;

use wire::{Answer, Props, Reply, Request, Value};
use zbus::export::futures_core::Stream;
use zbus::message::Type;
use zbus::{Connection, MatchRule, MessageStream, OwnedObjectPath};

const DEST: &str = "org.freedesktop.systemd1";
const PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";
const TIMEOUT: Duration = Duration::from_secs(30);

fn main() {
    let mut input = String::new();
    let reply: Reply = match std::io::stdin().read_to_string(&mut input) {
        Ok(_) => match serde_json::from_str::<Request>(&input) {
            Ok(req) => zbus::block_on(run(req)),
            Err(e) => Err(format!("moat-dbus: bad request: {e}")),
        },
        Err(e) => Err(format!("moat-dbus: read the request: {e}")),
    };
    let out = serde_json::to_vec(&reply).unwrap_or_default();
    let _ = std::io::stdout().write_all(&out);
}

fn err(op: &str, unit: &str, e: impl std::fmt::Display) -> String {
    format!("systemd: {op} {unit}: {e}")
}

async fn run(req: Request) -> Reply {
    let (user, unit) = match &req {
        Request::Start { user, unit, .. }
        | Request::Set { user, unit, .. }
        | Request::Stop { user, unit, .. }
        | Request::Invocation { user, unit } => (*user, unit.clone()),
    };
    let conn = connect(user)
        .await
        .map_err(|e| err("connect to the manager for", &unit, e))?;
    match req {
        Request::Start { props, fleet, .. } => {
            if let Some((slice, limits)) = fleet {
                fleet_slice(&conn, &slice, &variants(&limits)).await?;
            }
            start_unit(&conn, &unit, &variants(&props)).await?;
            let path = unit_path(&conn, &unit)
                .await
                .map_err(|e| err("find", &unit, e))?
                .ok_or_else(|| err("start", &unit, "the unit went away as it started"))?;
            let cgroup = control_group(&conn, &unit, &path)
                .await
                .map_err(|e| err("read the cgroup of", &unit, e))?;
            let invocation = invocation_id(&conn, &path)
                .await
                .map_err(|e| err("read the InvocationID of", &unit, e))?;
            if invocation.is_empty() {
                return Err(err("start", &unit, "systemd gave it no InvocationID"));
            }
            Ok(Answer::Started { cgroup, invocation })
        }
        Request::Set {
            props, invocation, ..
        } => {
            let found = current_invocation(&conn, &unit).await?;
            if invocation.is_empty() || found != invocation {
                return Ok(Answer::NotOurs(found));
            }
            call(
                &conn,
                "SetUnitProperties",
                &(unit.as_str(), true, variants(&props)),
            )
            .await
            .map_err(|e| err("set properties of", &unit, e))?;
            Ok(Answer::Done)
        }
        Request::Invocation { .. } => {
            let found = current_invocation(&conn, &unit).await?;
            Ok(Answer::Invocation(found))
        }
        Request::Stop { invocation, .. } => {
            // Only the unit moat started: a unit of that name started since (by another
            // state root, an engine, an admin) has another InvocationID.
            let found = current_invocation(&conn, &unit).await?;
            if invocation.is_empty() || found != invocation {
                return Ok(Answer::NotOurs(found));
            }
            match job(&conn, &unit, "StopUnit", &(unit.as_str(), "replace")).await {
                Ok(_) => {}
                Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => {}
                Err(e) => return Err(err("stop", &unit, e)),
            }
            let _ = call(&conn, "ResetFailedUnit", &(unit.as_str(),)).await;
            Ok(Answer::Done)
        }
    }
}

/// The fleet budget's slice: its limits set, the slice started first if it is not loaded
/// (a slice holds no process: one another create started meanwhile is set, not refused).
async fn fleet_slice(
    conn: &Connection,
    slice: &str,
    limits: &[(String, zbus::Variant<'static>)],
) -> Result<(), String> {
    let body = (slice, true, limits.to_vec());
    let set = || call(conn, "SetUnitProperties", &body);
    if set().await.is_ok() {
        return Ok(());
    }
    let aux: Aux = Vec::new();
    let body = (slice, "replace", limits.to_vec(), aux);
    match job(conn, slice, "StartTransientUnit", &body).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(err("start", slice, e)),
        Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => set()
            .await
            .map(drop)
            .map_err(|e| err("set properties of", slice, e)),
        Err(e) => Err(err("start", slice, e)),
    }
}

/// The connection to the system manager, or to `user`'s.
async fn connect(user: Option<u32>) -> zbus::Result<Connection> {
    let Some(uid) = user else {
        return zbus::connection::Builder::system()
            .method_timeout(TIMEOUT)
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
        .method_timeout(TIMEOUT)
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
    // Once per connection: a second job on it (the start after a failed unit's reset)
    // finds the connection subscribed already.
    match call(conn, "Subscribe", &()).await {
        Ok(_) => {}
        Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.AlreadySubscribed") => {}
        Err(e) => return Err(e),
    }
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

fn variants(props: &Props) -> Vec<(String, zbus::Variant<'static>)> {
    props
        .iter()
        .map(|(name, v)| {
            let v = match v {
                Value::Bool(b) => zbus::Variant::from(*b),
                Value::U64(n) => zbus::Variant::from(*n),
                Value::Str(s) => zbus::Variant::from(s.clone()),
                Value::Bytes(b) => zbus::Variant::from(b.clone()),
                Value::Pids(p) => zbus::Variant::from(p.clone()),
                Value::Devices(d) => zbus::Variant::from(d.clone()),
            };
            (name.clone(), v)
        })
        .collect()
}

type Aux = Vec<(String, Vec<(String, zbus::Variant<'static>)>)>;

/// Starts the transient `unit`. A unit of that name already loaded is not this create's:
/// refused, nothing done to it; unless it is a failed one (a unit that ended badly keeps
/// its name until reset, and holds no process), which is reset and the start tried once
/// more.
async fn start_unit(
    conn: &Connection,
    unit: &str,
    props: &[(String, zbus::Variant<'static>)],
) -> Result<(), String> {
    let aux: Aux = Vec::new();
    for retry in [false, true] {
        let body = (unit, "replace", props.to_vec(), aux.clone());
        match job(conn, unit, "StartTransientUnit", &body).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => return Err(err("start", unit, e)),
            Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.UnitExists") => {
                let state = match unit_path(conn, unit).await {
                    Ok(Some(path)) => unit_string(conn, &path, "ActiveState")
                        .await
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                if retry || state != "failed" {
                    return Err(err(
                        "start",
                        unit,
                        format!(
                            "the unit already exists (ActiveState {}): it is not this container's, and moat leaves it alone",
                            if state.is_empty() { "unknown" } else { &state }
                        ),
                    ));
                }
                let _ = call(conn, "ResetFailedUnit", &(unit,)).await;
            }
            Err(e) => return Err(err("start", unit, e)),
        }
    }
    Err(err("start", unit, "the unit already exists"))
}

/// The unit's `InvocationID` now; empty when there is no such unit.
async fn current_invocation(conn: &Connection, unit: &str) -> Result<String, String> {
    match unit_path(conn, unit)
        .await
        .map_err(|e| err("find", unit, e))?
    {
        Some(path) => invocation_id(conn, &path)
            .await
            .map_err(|e| err("read the InvocationID of", unit, e)),
        None => Ok(String::new()),
    }
}

/// The unit's object path, `None` when no unit of that name is loaded.
async fn unit_path(conn: &Connection, unit: &str) -> zbus::Result<Option<OwnedObjectPath>> {
    match call(conn, "GetUnit", &(unit,)).await {
        Ok(reply) => Ok(Some(reply.body().deserialize()?)),
        Err(e) if error_name(&e) == Some("org.freedesktop.systemd1.NoSuchUnit") => Ok(None),
        Err(e) => Err(e),
    }
}

async fn property(
    conn: &Connection,
    path: &OwnedObjectPath,
    iface: &str,
    name: &str,
) -> zbus::Result<zbus::OwnedVariant> {
    let reply = conn
        .call_method(
            Some(DEST),
            path.as_str(),
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &(iface, name),
        )
        .await?;
    reply.body().deserialize()
}

/// A string property of the `org.freedesktop.systemd1.Unit` interface.
async fn unit_string(
    conn: &Connection,
    path: &OwnedObjectPath,
    name: &str,
) -> zbus::Result<String> {
    let v = property(conn, path, "org.freedesktop.systemd1.Unit", name).await?;
    Ok(String::try_from(v).unwrap_or_default())
}

/// The unit's `InvocationID` (`ay`, 16 bytes) as 32 lower-case hex digits; empty when
/// systemd has none for it (a unit not started).
async fn invocation_id(conn: &Connection, path: &OwnedObjectPath) -> zbus::Result<String> {
    let v = property(conn, path, "org.freedesktop.systemd1.Unit", "InvocationID").await?;
    let bytes = Vec::<u8>::try_from(v).unwrap_or_default();
    if bytes.iter().all(|&b| b == 0) {
        return Ok(String::new());
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The unit's `ControlGroup` property.
async fn control_group(
    conn: &Connection,
    unit: &str,
    path: &OwnedObjectPath,
) -> zbus::Result<String> {
    let iface = if unit.ends_with(".slice") {
        "org.freedesktop.systemd1.Slice"
    } else {
        "org.freedesktop.systemd1.Scope"
    };
    let v = property(conn, path, iface, "ControlGroup").await?;
    Ok(String::try_from(v).unwrap_or_default())
}
