//! gVisor on request: a container handed to runsc, invisibly to the engine.
//!
//! The backend is chosen once, at create/run ([`select`]), and recorded in the
//! container's [`Record`](crate::state::Record); every later command for that id is
//! routed by the record alone (clients' global flags and environment are not stable
//! across a container's life). Each command in `src/cli/` has one early branch into this
//! module for gVisor records.
//!
//! runsc's `--root` is `<root>/@runsc`, shared by the gVisor containers under one moat
//! root (runsc keeps `<id>_sandbox:<id>.{state,lock}` there). Under `<root>/<id>/`, next
//! to `state.json`:
//!
//! | path | what |
//! |---|---|
//! | `config.json` | the effective spec; `<root>/<id>` is the shadow bundle runsc reads: moat's typed spec after the policy, serialised by [`spec`] (never the engine's bytes), with `root.path` absolute; the rootfs stays where it is |
//! | `policy.json` | the policy decision: what was changed, and what gVisor does not apply |
//! | `exec-<pid>.json` | the process file runsc reads for `exec --process` (the caller's, parsed and serialised again) and for `exec -t` in argv form |
//!
//! What runsc is given and how it is run: [`runsc`]. How runsc 20221219 differs from runc
//! and what moat emulates: `docs/gvisor.md`.

mod cmds;
pub mod config;
mod exec;
mod extra;
pub mod policy;
mod runsc;
pub mod select;
pub mod spec;
pub mod verify;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use cmds::{create, delete, kill, pause, ps, resume, run, start, state, status};
pub use exec::exec;
pub use extra::{events, update, UpdateRequest};
pub use extra::{features_json, wants_gvisor_features};
pub use select::{select, Selection};

/// Which engine runs a container; recorded at create.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Backend {
    #[default]
    Native,
    Gvisor(Gvisor),
}

/// What every runsc call for the container replays.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gvisor {
    /// Absolute path of runsc, resolved at create.
    pub runsc: PathBuf,
    /// runsc's `--root`: `<root>/@runsc` (`<root>/<id>/runsc` in older records).
    pub root: PathBuf,
    /// `--platform`.
    pub platform: String,
    /// `--network`: `none` or `host` (never `sandbox` on runsc 20221219).
    pub network: String,
    /// `--oci-seccomp`: the spec has `linux.seccomp` (runsc ignores it otherwise).
    #[serde(default)]
    pub oci_seccomp: bool,
    /// `--systemd-cgroup` as given at create, replayed on every call.
    #[serde(default)]
    pub systemd_cgroup: bool,
}

impl Backend {
    pub fn gvisor(&self) -> Option<&Gvisor> {
        match self {
            Backend::Gvisor(g) => Some(g),
            Backend::Native => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_field_defaults_to_native_and_roundtrips() {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            backend: Backend,
        }
        let old: R = serde_json::from_str("{}").unwrap();
        assert_eq!(old.backend, Backend::Native);
        let gv = Backend::Gvisor(Gvisor {
            runsc: "/usr/bin/runsc".into(),
            root: "/run/moat/x/runsc".into(),
            platform: "ptrace".into(),
            network: "none".into(),
            oci_seccomp: false,
            systemd_cgroup: false,
        });
        let json = serde_json::to_string(&gv).unwrap();
        assert!(
            json.starts_with(r#"{"kind":"gvisor","runsc":"/usr/bin/runsc""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), gv);
        assert_eq!(
            serde_json::to_string(&Backend::Native).unwrap(),
            r#"{"kind":"native"}"#
        );
    }
}
