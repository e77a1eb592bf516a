//! What moat asks its D-Bus helper, `moat-dbus` (src/bin/moat-dbus.rs), and what it
//! answers: one JSON [`Request`] on the helper's stdin, one JSON [`Reply`] on its stdout.
//! Shared by both binaries (the helper includes this file), so the two cannot disagree.

use serde::{Deserialize, Serialize};

/// A unit property's value, in the D-Bus type systemd expects for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Value {
    Bool(bool),
    U64(u64),
    Str(String),
    /// `ay`: `AllowedCPUs`, `AllowedMemoryNodes`.
    Bytes(Vec<u8>),
    /// `au`: `PIDs`.
    Pids(Vec<u32>),
    /// `a(ss)`: `DeviceAllow`.
    Devices(Vec<(String, String)>),
}

pub type Props = Vec<(String, Value)>;

/// One conversation with a manager: the system manager, or `user`'s (a host uid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Sets the fleet slice's limits (starting it if needed), then starts the transient
    /// `unit` with `props` and waits for its job; answers [`Answer::Started`]. A `unit`
    /// that already exists is refused and left as it is, unless it is a failed one (no
    /// process, only its failure kept): that is reset and the start tried once more.
    Start {
        user: Option<u32>,
        unit: String,
        props: Props,
        fleet: Option<(String, Props)>,
    },
    /// Runtime properties of a running unit (`update`), set only if its `InvocationID` is
    /// `invocation`: else [`Answer::NotOurs`], nothing set.
    Set {
        user: Option<u32>,
        unit: String,
        props: Props,
        invocation: String,
    },
    /// Stops the unit and resets it if it failed, only if its `InvocationID` is
    /// `invocation` (the one moat recorded when it started it): answers [`Answer::Done`],
    /// or [`Answer::NotOurs`] (gone, or replaced by another unit of that name) having
    /// touched nothing.
    Stop {
        user: Option<u32>,
        unit: String,
        invocation: String,
    },
    /// The unit's `InvocationID` now: [`Answer::Invocation`], empty when no such unit is
    /// loaded.
    Invocation { user: Option<u32>, unit: String },
}

/// What a [`Request`] got done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// The unit is up: its cgroup and its `InvocationID` (32 hex digits), which tell this
    /// start of it from any other unit of the same name.
    Started {
        cgroup: String,
        invocation: String,
    },
    Done,
    /// The unit's `InvocationID` (empty: no such unit).
    Invocation(String),
    /// Not stopped: the unit is gone, or its `InvocationID` is this one (empty: gone).
    NotOurs(String),
}

/// The answer, or the error: one line naming the unit.
pub type Reply = Result<Answer, String>;
