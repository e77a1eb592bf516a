//! The OCI runtime spec (`config.json`) as moat reads it.
//!
//! moat keeps its own serde types instead of the `oci-spec` crate: every field is a plain
//! public field with no hidden defaults (oci-spec's builders fill unset capability sets),
//! and deserialisation errors carry the JSON path of the offending field
//! (`serde_path_to_error`), which is what a user needs to fix a bundle. Before the typed
//! parse, [`keys`] refuses duplicate keys and case variants of field names, so that moat
//! and every Go reader of the same bytes (runsc, the engine) see one document.

pub mod default;
pub mod keys;
mod merge;
pub mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The OCI runtime-spec version moat implements and reports.
pub const OCI_VERSION: &str = "1.3.0";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default)]
    pub oci_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<Root>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domainname: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Hooks>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux: Option<Linux>,
    /// The keys of config.json that no field of these types reads (a newer spec's, or
    /// none at all), as JSON paths: refused under RESTRICTED, ignored with a warning under
    /// OPEN (the policy decides). Not part of the document.
    #[serde(skip)]
    pub unknown_keys: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Root {
    pub path: PathBuf,
    #[serde(default, skip_serializing_if = "is_false")]
    pub readonly: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    #[serde(default, skip_serializing_if = "is_false")]
    pub terminal: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_size: Option<ConsoleSize>,
    #[serde(default)]
    pub user: User,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default)]
    pub cwd: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rlimits: Vec<Rlimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_new_privileges: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apparmor_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<Scheduler>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_priority: Option<IoPriority>,
    #[serde(
        default,
        rename = "execCPUAffinity",
        skip_serializing_if = "Option::is_none"
    )]
    pub exec_cpu_affinity: Option<ExecCpuAffinity>,
}

/// `process.execCPUAffinity` (runtime-spec 1.3): the CPUs a process may run on while
/// moat puts it into the container (`initial`) and once it is there (`final`), as CPU
/// lists (`0-3,7`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExecCpuAffinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<String>,
    #[serde(default, rename = "final", skip_serializing_if = "Option::is_none")]
    pub final_: Option<String>,
}

/// `linux.memoryPolicy` (runtime-spec 1.3): the NUMA policy set_mempolicy(2) gives the
/// container's processes.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// Empty when the spec gives none: refused by `linux::mempolicy` in runc's words
    /// ("invalid memory policy mode"), not by the JSON reader.
    #[serde(default)]
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct ConsoleSize {
    pub height: u16,
    pub width: u16,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

/// Capability names are kept as strings: an unknown name must be reported with its
/// position, and a name the running kernel lacks must be skipped with a warning
/// (see `linux::capabilities`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bounding: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inheritable: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permitted: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambient: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rlimit {
    #[serde(rename = "type")]
    pub typ: String,
    pub hard: u64,
    pub soft: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scheduler {
    pub policy: String,
    #[serde(default)]
    pub nice: i32,
    #[serde(default)]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    #[serde(default)]
    pub runtime: u64,
    #[serde(default)]
    pub deadline: u64,
    #[serde(default)]
    pub period: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IoPriority {
    pub class: String,
    #[serde(default)]
    pub priority: i32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    pub destination: String,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uid_mappings: Vec<IdMapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gid_mappings: Vec<IdMapping>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hooks {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prestart: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_runtime: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub create_container: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub start_container: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststart: Vec<Hook>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststop: Vec<Hook>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Hook {
    pub path: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<Namespace>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uid_mappings: Vec<IdMapping>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gid_mappings: Vec<IdMapping>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_offsets: Option<BTreeMap<String, TimeOffset>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroups_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs_propagation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<Seccomp>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysctl: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masked_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readonly_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personality: Option<Personality>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_policy: Option<MemoryPolicy>,
    /// `linux.netDevices` (runtime-spec 1.3): host interface name → what it becomes in
    /// the container's network namespace (`linux/netdev.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub net_devices: Option<BTreeMap<String, NetDevice>>,
    /// Fields moat refuses rather than ignores (see `validate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intel_rdt: Option<serde_json::Value>,
}

/// One `linux.netDevices` entry: the interface's name in the container (`None` or empty:
/// the host's name is kept).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetDevice {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Linux {
    /// The interfaces `linux.netDevices` moves, as (host name, name in the container), in
    /// the map's (sorted) order.
    pub fn net_devices(&self) -> Vec<(&str, &str)> {
        self.net_devices
            .iter()
            .flatten()
            .map(|(host, d)| {
                let name = d.name.as_deref().filter(|n| !n.is_empty()).unwrap_or(host);
                (host.as_str(), name)
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Namespace {
    #[serde(rename = "type")]
    pub typ: String,
    /// An empty path is no path (a new namespace), as runc reads it (Go's empty string;
    /// runc's own tests write `"path": ""` for "make one").
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_is_none"
    )]
    pub path: Option<String>,
}

fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|p| !p.is_empty()))
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct IdMapping {
    #[serde(rename = "containerID")]
    pub container_id: u32,
    #[serde(rename = "hostID")]
    pub host_id: u32,
    pub size: u32,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct TimeOffset {
    #[serde(default)]
    pub secs: i64,
    #[serde(default)]
    pub nanosecs: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    #[serde(rename = "type")]
    pub typ: String,
    pub path: String,
    #[serde(default)]
    pub major: i64,
    #[serde(default)]
    pub minor: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_mode: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceCgroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Pids>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "blockIO")]
    pub block_io: Option<BlockIo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hugepage_limits: Vec<HugepageLimit>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unified: Option<BTreeMap<String, String>>,
}

/// `linux.resources.network` as the runtime spec defines it. moat keeps the field as
/// opaque JSON ([`Resources::network`], read by `linux::cgroups`); this type gives the
/// key check its shape ([`keys::OPAQUE_SHAPES`]) and runsc its copy.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NetworkResources {
    #[serde(default, rename = "classID", skip_serializing_if = "Option::is_none")]
    pub class_id: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<InterfacePriority>,
}

/// One device's entry of `linux.resources.rdma` (runtime-spec `LinuxRdma`): the most
/// HCA handles and HCA objects the container's cgroup may hold on that RDMA device. moat
/// keeps the field as opaque JSON ([`Resources::rdma`]) and reads it with [`rdma_limits`];
/// the values are read signed so that a negative one is named as such.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RdmaLimit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hca_handles: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hca_objects: Option<i64>,
}

/// The kernel's limit for an `rdma.max` value: it parses an `int` and takes `S32_MAX` as
/// `max` (runtime-spec's `uint32` above this is refused by the kernel with EINVAL).
pub const RDMA_VALUE_MAX: i64 = i32::MAX as i64;

/// `linux.resources.rdma` read and checked: device name to limits, or the field (JSON
/// path) and why not. A device name is one `rdma.max` token: printable ASCII without
/// `/`, at most 63 bytes (the kernel's `IB_DEVICE_NAME_MAX` with its NUL); each value
/// 0 to [`RDMA_VALUE_MAX`].
pub fn rdma_limits(v: &serde_json::Value) -> Result<BTreeMap<String, RdmaLimit>, (String, String)> {
    let field = "linux.resources.rdma";
    let serde_json::Value::Object(map) = v else {
        return Err((
            field.into(),
            "must be an object of device name to limits".into(),
        ));
    };
    let mut out = BTreeMap::new();
    for (dev, limits) in map {
        let f = format!("{field}[{dev:?}]");
        let ok = !dev.is_empty()
            && dev.len() <= 63
            && dev.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
        if !ok {
            return Err((
                f,
                "not an RDMA device name (1 to 63 printable ASCII characters, no space or '/')"
                    .into(),
            ));
        }
        let l: RdmaLimit =
            serde_json::from_value(limits.clone()).map_err(|e| (f.clone(), e.to_string()))?;
        for (value, name) in [(l.hca_handles, "hcaHandles"), (l.hca_objects, "hcaObjects")] {
            if let Some(n) = value.filter(|n| !(0..=RDMA_VALUE_MAX).contains(n)) {
                return Err((
                    format!("{f}.{name}"),
                    format!("{n} is out of range: a count from 0 to {RDMA_VALUE_MAX}"),
                ));
            }
        }
        out.insert(dev.clone(), l);
    }
    Ok(out)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct InterfacePriority {
    pub name: String,
    pub priority: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceCgroup {
    pub allow: bool,
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kernelTCP")]
    pub kernel_tcp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swappiness: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "disableOOMKiller"
    )]
    pub disable_oom_killer: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_hierarchy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_before_update: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_runtime: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realtime_period: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mems: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<i64>,
}

/// `linux.resources.pids` as runtime-spec 1.3 reads it: `limit` is optional (unset: leave
/// `pids.max` alone), `-1` (any negative) is no limit, and `0` is a limit like any other.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Pids {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BlockIo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_weight: Option<u16>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_device: Vec<WeightDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle_read_bps_device: Vec<ThrottleDevice>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub throttle_write_bps_device: Vec<ThrottleDevice>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "throttleReadIOPSDevice"
    )]
    pub throttle_read_iops_device: Vec<ThrottleDevice>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        rename = "throttleWriteIOPSDevice"
    )]
    pub throttle_write_iops_device: Vec<ThrottleDevice>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WeightDevice {
    pub major: i64,
    pub minor: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaf_weight: Option<u16>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ThrottleDevice {
    pub major: i64,
    pub minor: i64,
    pub rate: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HugepageLimit {
    pub page_size: String,
    pub limit: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    pub default_action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_errno_ret: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub architectures: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener_metadata: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub syscalls: Vec<SeccompSyscall>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeccompSyscall {
    pub names: Vec<String>,
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<SeccompArg>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeccompArg {
    pub index: u32,
    pub value: u64,
    #[serde(default)]
    pub value_two: u64,
    pub op: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Personality {
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Why a bundle could not be loaded; each variant names the file or field.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: invalid JSON at {field}: {message}")]
    Parse {
        path: PathBuf,
        field: String,
        message: String,
    },
    /// A duplicate key or a case variant of a field name ([`keys`]).
    #[error("{path}: {field}: {message}")]
    Key {
        path: PathBuf,
        field: String,
        message: String,
    },
    #[error(transparent)]
    Invalid(#[from] validate::Invalid),
}

/// Where a JSON document was refused: the JSON path of the field (`process.args[1]`,
/// `top level` for the document itself, `syntax` where serde could not name one) and why
/// (a refused key, or serde's message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct JsonError {
    pub field: String,
    pub message: String,
}

/// Parses JSON that an engine or image controls into `T`: keys checked first
/// ([`keys::check`]), then the typed parse, reporting the JSON path of the field that
/// failed.
pub fn from_slice<T: keys::Checked>(bytes: &[u8]) -> Result<T, JsonError> {
    let key = |e: keys::KeyError| JsonError {
        field: e.field,
        message: e.message,
    };
    if keys::check::<T>(bytes).map_err(key)?.folds {
        let (folded, warnings) = keys::fold_resources::<T>(bytes).map_err(key)?;
        warnings.iter().for_each(|w| crate::log::warn(w));
        return typed(&folded);
    }
    typed(bytes)
}

/// The typed parse alone. Parsed first without tracking the path (every create and exec
/// parses a spec, and the tracking doubles the parse's cost); only a failed parse is
/// repeated with `serde_path_to_error`, for the path its message names.
fn typed<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, JsonError> {
    if let Ok(v) = serde_json::from_slice(bytes) {
        return Ok(v);
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        // "." is the document itself, "?" a position serde could not name (syntax).
        let field = match field.as_str() {
            "." => "top level".to_string(),
            "?" => "syntax".to_string(),
            _ => field,
        };
        JsonError {
            field,
            message: e.into_inner().to_string(),
        }
    })
}

impl Spec {
    /// Reads `<bundle>/config.json` and validates it.
    pub fn load(bundle: &Path) -> Result<Spec, LoadError> {
        let mut spec = Self::read(bundle)?;
        validate::validate(&mut spec)?;
        let rootfs = spec.rootfs(bundle);
        validate::strip_rootfs(&mut spec, &rootfs);
        Ok(spec)
    }

    /// Reads and parses `<bundle>/config.json`, keys checked, without validating it.
    pub fn read(bundle: &Path) -> Result<Spec, LoadError> {
        let path = bundle.join("config.json");
        let bytes = std::fs::read(&path).map_err(|err| LoadError::Read {
            path: path.clone(),
            err,
        })?;
        Self::parse_file(&bytes, &path)
    }

    /// Parses the bytes of `path`, keys checked, each error naming the file.
    pub fn parse_file(bytes: &[u8], path: &Path) -> Result<Spec, LoadError> {
        let key = |e: keys::KeyError| LoadError::Key {
            path: path.to_path_buf(),
            field: e.field,
            message: e.message,
        };
        let folded;
        let mut bytes = bytes;
        let found = keys::check::<Spec>(bytes).map_err(key)?;
        let unknown_keys = if found.unknown {
            keys::unknown_keys::<Spec>(bytes)
        } else {
            Vec::new()
        };
        if found.folds {
            let (f, warnings) = keys::fold_resources::<Spec>(bytes).map_err(key)?;
            warnings.iter().for_each(|w| crate::log::warn(w));
            folded = f;
            bytes = &folded;
        }
        let mut spec: Spec = typed(bytes).map_err(|e| LoadError::Parse {
            path: path.to_path_buf(),
            field: e.field,
            message: e.message,
        })?;
        spec.unknown_keys = unknown_keys;
        Ok(spec)
    }

    /// Parses JSON (keys checked), reporting the JSON path of the field that failed.
    /// (Only tests call it today: create and the gVisor path use [`Spec::parse_file`].)
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn parse(bytes: &[u8]) -> Result<Spec, JsonError> {
        from_slice(bytes)
    }

    /// Parses a spec moat wrote itself (a state directory's `config.json`, root-only):
    /// the key check is skipped, since serde's output has neither duplicates nor case
    /// variants and `exec` reads this file on every call.
    pub fn parse_own(bytes: &[u8]) -> Result<Spec, JsonError> {
        typed(bytes)
    }

    pub fn linux(&self) -> &Linux {
        static EMPTY: std::sync::OnceLock<Linux> = std::sync::OnceLock::new();
        self.linux
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Linux::default))
    }

    /// Absolute rootfs path: `root.path` resolved against the bundle.
    pub fn rootfs(&self, bundle: &Path) -> PathBuf {
        let p = self
            .root
            .as_ref()
            .map(|r| r.path.clone())
            .unwrap_or_default();
        if p.is_absolute() {
            p
        } else {
            bundle.join(p)
        }
    }

    pub fn process(&self) -> &Process {
        // validate() guarantees a process for create; other callers only read defaults.
        static EMPTY: std::sync::OnceLock<Process> = std::sync::OnceLock::new();
        self.process
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Process::default))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_names_field() {
        let e =
            Spec::parse(br#"{"ociVersion":"1.0.2","process":{"user":{"uid":"x"}}}"#).unwrap_err();
        assert_eq!(e.field, "process.user.uid");
        assert!(e.message.contains("invalid type"), "{e}");
    }

    #[test]
    fn an_empty_namespace_path_is_a_new_namespace() {
        let s = Spec::parse(
            br#"{"linux":{"namespaces":[{"type":"mount","path":""},{"type":"pid","path":"/p"}]}}"#,
        )
        .unwrap();
        let ns = &s.linux.unwrap().namespaces;
        assert_eq!(ns[0].path, None);
        assert_eq!(ns[1].path.as_deref(), Some("/p"));
    }

    #[test]
    fn key_errors_name_the_file_and_the_path() {
        let p = Path::new("/b/config.json");
        let e = Spec::parse_file(br#"{"process":{"Capabilities":{}}}"#, p).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"/b/config.json: process: "Capabilities" differs only in case from "capabilities"; refused"#
        );
        let e = Spec::parse_file(br#"{"process":{"args":[],"args":[]}}"#, p).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"/b/config.json: process: duplicate key "args"; refused"#
        );
        // Type errors keep their own wording; moat's own files skip the key check.
        let e = Spec::parse_file(br#"{"process":{"args":1}}"#, p).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("/b/config.json: invalid JSON at process.args: "));
        assert!(Spec::parse_own(br#"{"a":1,"a":2}"#).is_ok());
        let e = from_slice::<Process>(br#"{"args":[],"Args":[]}"#).unwrap_err();
        assert_eq!(e.field, "top level");
    }

    #[test]
    fn roundtrip_keeps_fields() {
        let json = br#"{"ociVersion":"1.0.2","root":{"path":"rootfs","readonly":true},
            "linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}],
            "uidMappings":[{"containerID":0,"hostID":1000,"size":1}],
            "resources":{"memory":{"limit":1048576},"blockIO":{"weight":10}}}}"#;
        let s = Spec::parse(json).unwrap();
        assert!(s.root.as_ref().unwrap().readonly);
        assert_eq!(
            s.linux().namespaces[1].path.as_deref(),
            Some("/run/netns/x")
        );
        assert_eq!(s.linux().uid_mappings[0].host_id, 1000);
        let back = serde_json::to_string(&s).unwrap();
        assert!(back.contains("\"blockIO\":{\"weight\":10}"), "{back}");
        assert!(back.contains("\"containerID\":0"), "{back}");
    }
}
