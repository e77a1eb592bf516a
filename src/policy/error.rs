//! Why the policy refuses a spec.

use super::egress;
use super::ANNOTATIONS;

/// Why the policy refuses a spec: each variant names the spec field (or config key) and
/// the value it refuses.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("annotation {key}: unknown value {value:?}")]
    AnnotationValue { key: String, value: String },
    #[error("annotation {key}: unknown moat annotation (known: {})", ANNOTATIONS.join(", "))]
    AnnotationUnknown { key: String },
    /// A `linux.namespaces[].path` the floor facts could not read.
    #[error("{field}: cannot open {path}: {reason}")]
    NamespacePath {
        field: String,
        path: String,
        reason: NsPathError,
    },
    #[error("{field}: {path} was not examined by the RESTRICTED floor")]
    NamespaceNotExamined { field: String, path: String },
    #[error(
        "{field}: cannot tell whether {path} is the host's {typ} namespace (moat's own could \
         not be read)"
    )]
    HostNamespaceUnknown {
        field: String,
        path: String,
        typ: &'static str,
    },
    /// `field` is the namespace entry (or its path) that shares the host's namespace.
    #[error(
        "{field}: the host's {typ} namespace is refused under RESTRICTED (allow with \
         [restricted] host_namespaces = [\"{typ}\"])"
    )]
    HostNamespace { field: String, typ: &'static str },
    #[error("annotation moat.egress: {0}")]
    Egress(#[from] egress::ParseError),
    #[error(
        "annotation moat.egress: rule {rule} is outside what {config} allows ([egress] allow = \"{allowed}\"); \
         an annotation may only narrow it"
    )]
    EgressWidens {
        rule: String,
        config: String,
        allowed: String,
    },
    #[error(
        "egress policy {rules}: this host or caller cannot attach cgroup BPF programs (rootless, \
         or no cgroup v2 hierarchy), and moat does not run a container with a list it cannot enforce"
    )]
    EgressUnenforceable { rules: String },
    #[error("egress policy: {0}")]
    EgressInvalid(String),
    #[error(
        "egress rule {rule}: binding a connection to a name (tls/, http/) is not enforced by \
         this moat, natively or under gVisor, and moat does not run it as a plain name rule \
         (allow the name without tls/ or http/: its addresses, whatever name a connection speaks)"
    )]
    EgressNameBound { rule: String },
    #[error("built-in restricted seccomp profile: {0}")]
    RestrictedProfile(serde_json::Error),
    #[error(
        "process.apparmorProfile: profile {0:?} is not loaded on this host (load it with \
         apparmor_parser, or name another profile)"
    )]
    AppArmorNotLoaded(String),
    #[error(
        "process.apparmorProfile: profile {0:?} is not in restricted.apparmor_profiles, and \
         moat-default, which would replace it, is not loaded and cannot be loaded by a \
         rootless moat"
    )]
    AppArmorUnavailable(String),
    #[error("process.selinuxLabel: {0:?} is not a user:role:type[:level] label")]
    SelinuxLabel(String),
    #[error("restricted.selinux_types: no type without `*` to give a label")]
    SelinuxNoType,
    #[error(
        "moat.rootfs=ephemeral: the root's {size} bytes plus its {inode_space} bytes of \
         inode space (files and xattrs) plus tmp_size {tmp} do not fit below \
         linux.resources.memory.limit {limit} (the root's tmpfs is charged to the container's \
         memory cgroup: it would be OOM-killed before it saw ENOSPC); lower [restricted] \
         rootfs_size, rootfs_inodes or moat.rootfs.size, or raise the memory limit"
    )]
    EphemeralMemory {
        size: u64,
        inode_space: u64,
        tmp: u64,
        limit: i64,
    },
    /// A key of config.json no field of moat's spec types reads: nobody judged it.
    #[error(
        "{key}: not a field moat knows (runtime-spec 1.3 as moat reads it); RESTRICTED refuses \
         what it cannot judge"
    )]
    UnknownKey { key: String },
    #[error(
        "process.scheduler: {what} is refused under RESTRICTED (the cpu cgroup bounds only \
         CFS time: a realtime or raised-priority process starves the host's CPUs)"
    )]
    Scheduler { what: String },
    #[error(
        "process.ioPriority: the realtime class is refused under RESTRICTED (it starves the \
         host's other I/O)"
    )]
    IoPriorityRealtime,
    /// A capability the operator allows that would void a promise in force.
    #[error(
        "process.capabilities: {cap} voids {promise} ({how}); RESTRICTED refuses the pair \
         (remove {cap} from [restricted] allowed_capabilities or from the spec, or accept it with \
         [restricted] accept_voided = [\"{cap}\"])"
    )]
    CapabilityVoids {
        cap: String,
        promise: &'static str,
        how: &'static str,
    },
    /// A host interface `[restricted] net_devices` does not name.
    #[error(
        "linux.netDevices[{host:?}]: moving the host's interface {host:?} into a container is \
         refused under RESTRICTED (allow with [restricted] net_devices = [\"{host}\"])"
    )]
    NetDeviceNotAllowed { host: String },
    #[error(
        "linux.netDevices: refused with moat.network=none (an interface moved in would give \
         the container the network it is denied)"
    )]
    NetDevicesNetworkNone,
}

/// Why a `linux.namespaces[].path` could not be examined for the floor facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NsPathError {
    /// `stat` failed with this errno, shown as the C library's text without std's
    /// " (os error N)" suffix.
    #[error("{}", crate::error_text::errno_text(*.0))]
    Stat(i32),
    #[error("file name contained an unexpected NUL byte")]
    Nul,
}
