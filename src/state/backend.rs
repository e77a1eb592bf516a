//! Which engine runs a container, as its record holds it: moat itself, or runsc with the
//! flags every later runsc call replays. Chosen once at create (`gvisor::select`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
    /// The container's part in a gVisor pod (one runsc sandbox for the pod), recorded by
    /// moat at create: absent for a container with a sandbox of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRole>,
    /// The pinned network namespace every runsc call for this container runs in
    /// (`gvisor::control`); absent in records made before moat pinned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_netns: Option<PathBuf>,
}

/// A container's part in a gVisor pod (`gvisor::pod`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum PodRole {
    /// The pod sandbox container (CRI `container-type=sandbox`): its create made the
    /// runsc sandbox, which app containers of the pod may join.
    Sandbox,
    /// An app container created inside the sandbox `sandbox` (a pod sandbox's id under the
    /// same root).
    Container { sandbox: String },
}
