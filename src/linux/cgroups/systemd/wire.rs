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
    /// `unit` with `props` and waits for its job; answers the unit's cgroup.
    Start {
        user: Option<u32>,
        unit: String,
        props: Props,
        fleet: Option<(String, Props)>,
    },
    /// Runtime properties of a running unit (`update`).
    Set {
        user: Option<u32>,
        unit: String,
        props: Props,
    },
    /// Stops the unit (one already gone is fine) and resets it if it failed.
    Stop { user: Option<u32>, unit: String },
}

/// The unit's cgroup after `Start`, empty otherwise; or the error, one line naming the
/// unit.
pub type Reply = Result<String, String>;
