//! The hardening policy: a pure function from (engine's spec, config, annotations) to the
//! spec that actually runs, plus the list of what it changed and why.
//!
//! RESTRICTED (the default) enforces a floor whatever the engine asked for; OPEN runs the
//! spec as written (runc semantics) and is only reachable when the configuration says so.
//! Nothing here touches the system: `create` applies the result, `policy explain` prints
//! it, `verify` compares the kernel's view of a container with it.

pub mod config;
pub mod egress;

use serde::Serialize;

use crate::linux::hostfacts::HostFacts;
use crate::spec::{self, Mount, Namespace, Spec};
pub use config::{Config, Mode};

/// moat's own seccomp profile, used when the engine gives none.
pub const RESTRICTED_PROFILE: &str = include_str!("../../seccomp-profiles/restricted.json");

/// [`RESTRICTED_PROFILE`] parsed (once per process): what the policy puts in a spec
/// without a profile, and what `linux::seccomp` recognises as built in.
pub fn restricted_profile() -> Result<&'static crate::spec::Seccomp, PolicyError> {
    static P: std::sync::OnceLock<crate::spec::Seccomp> = std::sync::OnceLock::new();
    if let Some(p) = P.get() {
        return Ok(p);
    }
    let p = serde_json::from_str(RESTRICTED_PROFILE).map_err(PolicyError::RestrictedProfile)?;
    Ok(P.get_or_init(|| p))
}
/// The deny floor stacked on top of an engine's own profile.
pub const FLOOR_PROFILE: &str = include_str!("../../seccomp-profiles/floor.json");
/// The AppArmor profile moat loads where the host has AppArmor and the spec names none.
pub const APPARMOR_PROFILE_NAME: &str = "moat-default";
pub const APPARMOR_PROFILE: &str = include_str!("../../apparmor/moat-default");

/// runc's default masked and read-only paths (the starter spec's, `spec::default`).
pub use crate::spec::default::{MASKED_PATHS, READONLY_PATHS};

/// moat's annotation keys; any other `moat.*` key is an error.
pub const ANNOTATIONS: [&str; 7] = [
    "moat.policy",
    "moat.egress",
    "moat.rootfs",
    "moat.rootfs.size",
    "moat.network",
    "moat.runtime",
    "moat.userns",
];

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
    #[error("process.capabilities.{set}[{index}]: unknown capability {name:?}")]
    UnknownCapability {
        set: &'static str,
        index: usize,
        name: String,
    },
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
        "moat.rootfs=ephemeral: the root's {size} bytes plus tmp_size {tmp} do not fit below \
         linux.resources.memory.limit {limit} (the root's tmpfs is charged to the container's \
         memory cgroup: it would be OOM-killed before it saw ENOSPC); lower [restricted] \
         rootfs_size or moat.rootfs.size, or raise the memory limit"
    )]
    EphemeralMemory { size: u64, tmp: u64, limit: i64 },
}

/// One change the policy made to the engine's spec.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Change {
    /// The spec field, as a JSON path.
    pub field: String,
    /// What happened: `removed`, `set`, `added`, `replaced`, `kept`; `ignored` (a loosening
    /// annotation), `not applied` (a floor control this host or caller cannot apply: a
    /// warning line), `absent` (a control this host has no means for, recorded without a
    /// warning: `memory.high` on cgroup v1).
    pub action: &'static str,
    pub detail: String,
    pub reason: &'static str,
}

/// A decision and the host facts it was made from (`container::policy::decide`), which
/// create hands on to the child.
pub struct Decided {
    pub decision: Decision,
    pub host: HostFacts,
    pub floor: FloorFacts,
}

/// `moat.rootfs`, in the order an annotation may move it (only up).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rootfs {
    Writable,
    /// Writable, bounded in bytes and inodes, off the engine's storage, lost at delete.
    Ephemeral,
    Readonly,
}

impl Rootfs {
    pub fn as_str(self) -> &'static str {
        match self {
            Rootfs::Writable => "writable",
            Rootfs::Ephemeral => "ephemeral",
            Rootfs::Readonly => "readonly",
        }
    }

    pub fn of(cfg: &Config) -> Rootfs {
        match (
            cfg.readonly_rootfs || cfg.rootfs_readonly,
            cfg.ephemeral_rootfs,
        ) {
            (true, _) => Rootfs::Readonly,
            (false, true) => Rootfs::Ephemeral,
            (false, false) => Rootfs::Writable,
        }
    }
}

/// The caps of an ephemeral root (`moat.rootfs=ephemeral`): its tmpfs's `size=` and
/// `nr_inodes=`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct BoundedRoot {
    pub size: u64,
    pub inodes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub policy: &'static str,
    pub readonly_rootfs: bool,
    /// `moat.rootfs` as selected: `writable`, `ephemeral`, `readonly`.
    pub rootfs: &'static str,
    /// An ephemeral root's caps, when the container gets one (not when the spec's root is
    /// read-only anyway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounded_root: Option<BoundedRoot>,
    pub network_none: bool,
    /// Stack `FLOOR_PROFILE` on top of the spec's own seccomp profile.
    pub seccomp_floor: bool,
    /// `moat.userns`: `auto` (container root is an unprivileged host range) or `engine`.
    pub userns: &'static str,
    /// moat takes the container's id range from the host pool at create (`auto`, and the
    /// engine gave no mappings of its own).
    pub userns_pool: bool,
    pub changes: Vec<Change>,
    /// What the backend running the container does not apply (gVisor: AppArmor, masked
    /// paths, ...); empty for native containers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_applied: Vec<Change>,
    /// The namespace types (pid, network, ipc, uts) a RESTRICTED container shares with the
    /// host, as `[restricted] host_namespaces` allows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub host_namespaces: Vec<&'static str>,
    /// `audit` (an operator's alias): what RESTRICTED would have changed in a container
    /// that runs as OPEN; a refusal appears as `refused`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<Change>,
    /// The share of the memory limit moat set `memory.high` at (`[restricted]
    /// memory_high`), so that `update` moves it with the limit; `None` when moat set none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_high: Option<f64>,
    /// The egress policy in force (`moat.egress`, `[egress]`): `linux::egress` attaches it
    /// to the container's cgroup; `None`: every destination.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<egress::Egress>,
    /// RESTRICTED's floor was applied: false only from [`apply_unenforced`] (tests of
    /// `verify`); not recorded.
    #[serde(skip)]
    pub enforced: bool,
}

impl Decision {
    /// The one line that says what the policy changed in this container's spec (which
    /// field, what the engine asked, what runs instead) and where to see all of it, or
    /// `None` when the spec runs as written. Under `audit`, what RESTRICTED would have cut
    /// while the container runs as OPEN.
    pub fn summary(&self, id: &str, cfg: &Config) -> Option<String> {
        let from = config_name(cfg);
        let explain = format!("every change and why: moat policy explain {id}");
        if cfg.audit && self.policy == Mode::Open.as_str() {
            let items = summary_items(self.audit.iter());
            return Some(if items.is_empty() {
                format!(
                    "audit ({from}): container {id} runs as OPEN; RESTRICTED would change nothing"
                )
            } else {
                format!(
                    "audit ({from}): container {id} runs as OPEN; RESTRICTED would have: {items}; \
                     {explain}"
                )
            });
        }
        let items = summary_items(self.changes.iter().chain(&self.not_applied));
        (!items.is_empty()).then(|| {
            format!(
                "policy {} ({from}) changed container {id}: {items}; {explain}",
                self.policy
            )
        })
    }

    /// Logs [`Decision::summary`]: at level warning in the `--log` file always; on stderr
    /// only without `--log` (direct use) or with `[log] warn_stderr = true`, since at
    /// create moat's stderr is the container's and engines would show the line in every
    /// container log.
    pub fn report(&self, id: &str, cfg: &Config) {
        if let Some(line) = self.summary(id, cfg) {
            crate::log::warn_policy(&line, cfg.warn_stderr);
        }
    }
}

/// [`Decision::summary`] of a container's recorded decision (`policy.json`), for a failure
/// after create (`exec`); `None` when it records no change.
pub fn recorded_summary(policy_json: &[u8], id: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(policy_json).ok()?;
    const ACTIONS: [&str; 7] = [
        "removed",
        "set",
        "added",
        "replaced",
        "ignored",
        "not applied",
        "refused",
    ];
    let changes: Vec<Change> = ["changes", "not_applied"]
        .iter()
        .flat_map(|k| v[*k].as_array().cloned().unwrap_or_default())
        .map(|c| Change {
            field: c["field"].as_str().unwrap_or_default().to_string(),
            action: ACTIONS
                .into_iter()
                .find(|a| c["action"] == *a)
                .unwrap_or("changed"),
            detail: c["detail"].as_str().unwrap_or_default().to_string(),
            reason: "",
        })
        .collect();
    let items = summary_items(changes.iter());
    (!items.is_empty()).then(|| {
        format!(
            "policy {} changed container {id}: {items}; every change and why: moat policy \
             explain {id}",
            v["policy"].as_str().unwrap_or("?")
        )
    })
}

/// `field: action detail` for each change, `; `-joined; the capability sets' removals
/// (one change per set, usually the same names) merged into one item.
fn summary_items<'a>(changes: impl Iterator<Item = &'a Change>) -> String {
    let mut items: Vec<String> = Vec::new();
    let mut caps: Vec<&str> = Vec::new();
    let mut caps_at = None;
    for c in changes {
        // A documented absence (memory.high on v1) is no cut: policy explain shows it.
        if c.action == "absent" {
            continue;
        }
        if c.field.starts_with("process.capabilities.") && c.action == "removed" {
            caps_at.get_or_insert(items.len());
            for n in c.detail.split(',') {
                if !caps.contains(&n) {
                    caps.push(n);
                }
            }
            continue;
        }
        let mut item = format!("{}: {} {}", c.field, c.action, c.detail);
        if c.action == "ignored" {
            item.push_str(" (the operator loosens with [alias.NAME])");
        }
        items.push(item);
    }
    if let Some(at) = caps_at {
        items.insert(
            at,
            format!("process.capabilities: removed {}", caps.join(",")),
        );
    }
    items.join("; ")
}

/// A namespace's identity: (st_dev, st_ino) of its nsfs inode.
pub type NsId = (u64, u64);

/// Why a `linux.namespaces[].path` could not be examined for the floor facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NsPathError {
    /// `stat` failed with this errno, shown as the C library's text without std's
    /// " (os error N)" suffix.
    #[error("{}", errno_text(*.0))]
    Stat(i32),
    #[error("file name contained an unexpected NUL byte")]
    Nul,
}

/// strerror's text for `errno` (no I/O: the C library's table).
fn errno_text(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    s.split(" (os error ").next().unwrap_or(&s).to_string()
}

/// Host facts the RESTRICTED floor needs, read by the caller before the policy runs
/// (`linux::namespaces::floor_facts`), so that the policy itself stays pure.
#[derive(Debug, Clone, Default)]
pub struct FloorFacts {
    /// (st_dev, st_ino) of moat's own `/proc/self/ns/<type>`, by spec type (`pid`,
    /// `network`, `ipc`, `uts`): what "the host's namespace" is.
    pub host_ns: Vec<(&'static str, NsId)>,
    /// Every `linux.namespaces[].path` of those types: its (st_dev, st_ino), or why it
    /// could not be read.
    pub ns_paths: Vec<(String, Result<NsId, NsPathError>)>,
    /// The host's cgroup hierarchy is cgroup v2 alone (`/sys/fs/cgroup` is cgroup2).
    pub cgroup_v2: bool,
    /// The host's cgroup2 at `/sys/fs/cgroup` is mounted with `nsdelegate` (a super option
    /// in moat's own mountinfo): only then does the kernel refuse a cgroup namespace root's
    /// writes to its own limit files. Read only when the floor asks (cgroup v2, a writable
    /// cgroup mount in a cgroup namespace of the container's own); `false` otherwise.
    pub cgroup_nsdelegate: bool,
    /// The call's cgroup driver is systemd (`--systemd-cgroup`): `linux.cgroupsPath` is
    /// `slice:prefix:name`, and the fleet budget is a slice.
    pub systemd_cgroup: bool,
    /// The caller can attach cgroup BPF programs to the container's cgroup v2 (root of the
    /// host's user namespace, a v2 hierarchy mounted): the egress policy can be enforced.
    pub bpf_cgroup: bool,
    /// The nameservers of the engine's resolv.conf (the host-side source of the spec's
    /// `/etc/resolv.conf` bind, never the rootfs's file), for `[egress] resolvers`.
    pub resolvers: Vec<std::net::SocketAddr>,
}

/// The controls a container gets: config defaults, then annotations, which may only
/// tighten. A loosening annotation is ignored and reported (an image can carry one: podman
/// copies image annotations into the spec); loosening is the operator's, through the name
/// moat is invoked by (`[alias.NAME]` in the config).
struct Selection {
    mode: Mode,
    rootfs: Rootfs,
    /// `moat.rootfs.size`, at most `[restricted] rootfs_size`.
    rootfs_size: u64,
    network_none: bool,
    userns_auto: bool,
    /// `moat.egress`, parsed (checked against the config's list in `egress_policy`).
    egress: Option<egress::List>,
    ignored: Vec<Change>,
}

/// Why a loosening annotation is ignored.
pub const IGNORED_ANNOTATION: &str = "annotations may only tighten; the operator loosens \
     with an [alias.NAME] table in the config, NAME being the name moat is invoked by \
     (a symlink an engine runtime points at)";

fn select(spec: &Spec, cfg: &Config) -> Result<Selection, PolicyError> {
    let mut sel = Selection {
        mode: cfg.default_policy,
        rootfs: Rootfs::of(cfg),
        rootfs_size: cfg.rootfs_size,
        network_none: cfg.network_none,
        userns_auto: cfg.userns_auto,
        egress: None,
        ignored: Vec::new(),
    };
    for (k, v) in &spec.annotations {
        if !k.starts_with("moat.") {
            continue;
        }
        let bad = || PolicyError::AnnotationValue {
            key: k.clone(),
            value: v.clone(),
        };
        // `loosens`: the value asks for less than the config gives (ignored); otherwise it
        // tightens or restates the config.
        let loosens = match k.as_str() {
            "moat.policy" => match v.as_str() {
                "restricted" => {
                    sel.mode = Mode::Restricted;
                    false
                }
                "open" => cfg.default_policy != Mode::Open,
                // The operator's alone (`[alias.NAME] default_policy = "audit"`): an image
                // asking for it would run as OPEN.
                "audit" => true,
                _ => return Err(bad()),
            },
            "moat.rootfs" => {
                let want = match v.as_str() {
                    "readonly" => Rootfs::Readonly,
                    "ephemeral" => Rootfs::Ephemeral,
                    "writable" => Rootfs::Writable,
                    _ => return Err(bad()),
                };
                sel.rootfs = sel.rootfs.max(want);
                want < Rootfs::of(cfg)
            }
            "moat.rootfs.size" => {
                let n = config::parse_size(v).ok_or_else(bad)?.unsigned_abs();
                let loosens = n > cfg.rootfs_size;
                if !loosens {
                    sel.rootfs_size = sel.rootfs_size.min(n);
                }
                loosens
            }
            "moat.network" => match v.as_str() {
                "none" => {
                    sel.network_none = true;
                    false
                }
                "engine" => cfg.network_none,
                _ => return Err(bad()),
            },
            // Refused, not ignored, when it widens: checked in `egress_policy`.
            "moat.egress" => {
                sel.egress = Some(egress::parse_list(v)?);
                false
            }
            "moat.userns" => match v.as_str() {
                "auto" => {
                    sel.userns_auto = true;
                    false
                }
                "engine" => cfg.userns_auto,
                _ => return Err(bad()),
            },
            // Chosen with the backend (`gvisor::select`); `native` leaving the operator's
            // gVisor is ignored and reported there (`gvisor::policy::adjust`).
            "moat.runtime" => {
                if v != "gvisor" && v != "native" {
                    return Err(bad());
                }
                false
            }
            _ => return Err(PolicyError::AnnotationUnknown { key: k.clone() }),
        };
        if loosens {
            sel.ignored.push(Change {
                field: format!("annotations.{k}"),
                action: "ignored",
                detail: format!("{k}={v} would loosen {}", config_name(cfg)),
                reason: IGNORED_ANNOTATION,
            });
        }
    }
    Ok(sel)
}

/// The configuration a message names: its file and the alias that applied.
fn config_name(cfg: &Config) -> String {
    let file = cfg
        .source
        .as_ref()
        .map_or("the built-in configuration".to_string(), |p| {
            p.display().to_string()
        });
    match &cfg.alias {
        Some(a) => format!("{file} [alias.{a}]"),
        None => file,
    }
}

/// Applies the policy to `spec` in place and says what changed. `host` is what the host's
/// LSMs are and `floor` what its namespaces are, both probed on the host before this runs
/// ([`HostFacts::probe`], `linux::namespaces::floor_facts`; `container::policy::decide`
/// does both): the policy itself does no I/O, and its result is a function of its
/// arguments alone.
pub fn apply(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
) -> Result<Decision, PolicyError> {
    apply_with(spec, cfg, id, host, floor, true)
}

/// For tests of `verify` only (the caller allows it in debug builds alone, on
/// `MOAT_TEST_SKIP_POLICY=1`): the decision records the mode the spec asked for, RESTRICTED
/// included, but RESTRICTED's floor is not applied, so a test can prove that `verify`
/// catches the difference.
pub fn apply_unenforced(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
) -> Result<Decision, PolicyError> {
    apply_with(spec, cfg, id, host, floor, false)
}

fn apply_with(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    host: &HostFacts,
    floor: &FloorFacts,
    enforce: bool,
) -> Result<Decision, PolicyError> {
    let mut sel = select(spec, cfg)?;
    let wanted_egress = sel.egress.take();
    let mut d = Decision {
        policy: sel.mode.as_str(),
        readonly_rootfs: sel.rootfs == Rootfs::Readonly,
        rootfs: sel.rootfs.as_str(),
        bounded_root: None,
        network_none: sel.network_none,
        seccomp_floor: false,
        userns: if sel.userns_auto { "auto" } else { "engine" },
        userns_pool: false,
        changes: sel.ignored,
        not_applied: Vec::new(),
        host_namespaces: Vec::new(),
        audit: Vec::new(),
        memory_high: None,
        egress: None,
        enforced: enforce,
    };
    let restricted = sel.mode == Mode::Restricted && enforce;
    if cfg.audit && sel.mode == Mode::Open {
        d.audit = audit(spec, cfg, id, host, floor);
    }
    if restricted {
        restrict(spec, cfg, id, floor.systemd_cgroup, &mut d)?;
        memory_high(spec, cfg, floor.cgroup_v2, &mut d);
        mounts_floor(spec, floor, &mut d);
        restrict_lsm(spec, cfg, host, &mut d)?;
    }
    match sel.rootfs {
        Rootfs::Readonly => readonly_rootfs(spec, cfg, &mut d),
        Rootfs::Ephemeral => ephemeral_rootfs(spec, cfg, sel.rootfs_size, &mut d)?,
        Rootfs::Writable => {}
    }
    if sel.network_none {
        network_none(spec, &mut d);
    }
    if sel.userns_auto {
        userns_auto(spec, cfg, &mut d);
    }
    // After moat.network=none, which gives the container a namespace of its own.
    if restricted {
        namespace_floor(spec, cfg, floor, &mut d)?;
    }
    if !sel.network_none {
        egress_policy(wanted_egress, cfg, restricted, floor, &mut d)?;
    }
    Ok(d)
}

/// The egress policy: the annotation's list (which may only narrow the config's `allow`),
/// else the config's under RESTRICTED; the metadata endpoints refused under RESTRICTED
/// (`deny_metadata`), whatever the list says. OPEN takes only what the annotation asks.
fn egress_policy(
    wanted: Option<egress::List>,
    cfg: &Config,
    restricted: bool,
    floor: &FloorFacts,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    let configured = if restricted {
        cfg.egress_allow.clone()
    } else {
        None
    };
    let from_annotation = wanted.is_some();
    let allow = match wanted {
        Some(list) => {
            if let Some(r) = egress::widening(&list, configured.as_ref()).first() {
                return Err(PolicyError::EgressWidens {
                    rule: r.to_string(),
                    config: config_name(cfg),
                    allowed: configured.map(|c| c.to_string()).unwrap_or_default(),
                });
            }
            Some(list)
        }
        None => configured,
    };
    let deny = if restricted && cfg.egress_deny_metadata {
        egress::deny_addrs(&cfg.egress_metadata)
    } else {
        Vec::new()
    };
    if allow.is_none() && deny.is_empty() {
        return Ok(());
    }
    let e = egress::Egress {
        allow,
        deny,
        resolvers: cfg
            .egress_resolvers
            .clone()
            .unwrap_or_else(|| floor.resolvers.clone()),
    };
    // Checked here, so a list that cannot be a trie fails at create, before anything.
    e.entries(None).map_err(PolicyError::EgressInvalid)?;
    if !floor.bpf_cgroup {
        if let Some(l) = &e.allow {
            return Err(PolicyError::EgressUnenforceable {
                rules: l.to_string(),
            });
        }
        change(
            d,
            "egress",
            "absent",
            "the metadata endpoints stay reachable: no cgroup BPF for this caller",
            EGRESS_ABSENT,
        );
        return Ok(());
    }
    if let (Some(l), false) = (&e.allow, from_annotation) {
        change(
            d,
            "egress",
            "set",
            format!("only {l} (and loopback)"),
            "[egress] allow: new outbound connections and datagrams go only where the operator allows",
        );
    }
    d.egress = Some(e);
    Ok(())
}

/// Why the metadata block is absent for a rootless caller.
const EGRESS_ABSENT: &str = "rootless: the caller cannot attach cgroup BPF programs; \
     the engine's network (slirp4netns, pasta) decides what is reachable";

/// `audit`: RESTRICTED applied to a copy of the spec, for its list of changes alone (a
/// refusal is one `refused` change); the container runs the spec as OPEN.
fn audit(spec: &Spec, cfg: &Config, id: &str, host: &HostFacts, floor: &FloorFacts) -> Vec<Change> {
    let mut strict = cfg.clone();
    strict.default_policy = Mode::Restricted;
    strict.audit = false;
    let mut copy = spec.clone();
    match apply(&mut copy, &strict, id, host, floor) {
        Ok(d) => d.changes,
        Err(e) => vec![Change {
            field: "spec".into(),
            action: "refused",
            detail: e.to_string(),
            reason: "RESTRICTED refuses this spec",
        }],
    }
}

/// The host namespaces a RESTRICTED container must not join, for the check on the opened
/// fds (`linux::namespaces::Plan::refuse_host`): every floor type `[restricted]
/// host_namespaces` does not list. Empty under OPEN.
pub fn refused_host_namespaces(
    d: &Decision,
    cfg: &Config,
    facts: &FloorFacts,
) -> Vec<(&'static str, NsId)> {
    if d.policy != Mode::Restricted.as_str() || !d.enforced {
        return Vec::new();
    }
    facts
        .host_ns
        .iter()
        .filter(|(t, _)| !cfg.host_namespaces.iter().any(|c| c == t))
        .copied()
        .collect()
}

/// RESTRICTED: the container does not share the host's pid, network, ipc or uts namespace
/// (no entry, or a path to the namespace moat itself runs in) unless `[restricted]
/// host_namespaces` names the type. Without its own pid namespace container root (host
/// uid 0 without a user namespace) can signal host root's processes; a path to another
/// container's namespace (a pod) is not the host's and stays allowed.
fn namespace_floor(
    spec: &Spec,
    cfg: &Config,
    facts: &FloorFacts,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    for typ in config::HOST_NAMESPACE_TYPES {
        let host_ids = facts.host_ns.iter().find(|(t, _)| *t == typ).map(|x| x.1);
        let entry = spec
            .linux()
            .namespaces
            .iter()
            .enumerate()
            .find(|(_, n)| n.typ == typ);
        let shared = match entry {
            None => "linux.namespaces".to_string(),
            Some((_, n)) if n.path.is_none() => continue,
            Some((i, n)) => {
                let p = n.path.as_deref().unwrap_or_default();
                let field = format!("linux.namespaces[{i}].path");
                let ids = match facts.ns_paths.iter().find(|(q, _)| q == p) {
                    Some((_, Ok(ids))) => *ids,
                    Some((_, Err(e))) => {
                        return Err(PolicyError::NamespacePath {
                            field,
                            path: p.to_string(),
                            reason: *e,
                        })
                    }
                    None => {
                        return Err(PolicyError::NamespaceNotExamined {
                            field,
                            path: p.to_string(),
                        })
                    }
                };
                match host_ids {
                    Some(h) if h != ids => continue,
                    Some(_) => format!("{field} ({p})"),
                    None => {
                        return Err(PolicyError::HostNamespaceUnknown {
                            field,
                            path: p.to_string(),
                            typ,
                        })
                    }
                }
            }
        };
        if cfg.host_namespaces.iter().any(|t| t == typ) {
            d.host_namespaces.push(typ);
            change(
                d,
                "linux.namespaces",
                "kept",
                format!("the host's {typ} namespace"),
                "restricted.host_namespaces allows it",
            );
            continue;
        }
        return Err(PolicyError::HostNamespace { field: shared, typ });
    }
    Ok(())
}

/// RESTRICTED: sysfs and cgroupfs are read-only, and so is a bind of the host's `/sys` (or
/// anything below it, recursively). A writable cgroupfs stays where the container has a
/// cgroup namespace of its own on a cgroup v2 host mounted with `nsdelegate` (podman's
/// systemd mode needs it): only there does the kernel refuse writes to the namespace root's
/// own limits; without `nsdelegate` the container would set its `pids.max`, `memory.max`,
/// `cpu.max` back to `max`. What `--privileged` asks for (rw sysfs and cgroup) is cut and
/// reported, not refused.
fn mounts_floor(spec: &mut Spec, facts: &FloorFacts, d: &mut Decision) {
    let own_cgroupns = spec
        .linux()
        .namespaces
        .iter()
        .any(|n| n.typ == "cgroup" && n.path.is_none());
    // Kept writable only where the kernel guards the namespace root's own limits.
    let delegated = own_cgroupns && facts.cgroup_v2 && facts.cgroup_nsdelegate;
    // A cgroupfs cut that nsdelegate alone would have kept, for the reason's text.
    let mut no_nsdelegate = false;
    let mut cut = Vec::new();
    for (i, m) in spec.mounts.iter_mut().enumerate() {
        let typ = m.typ.as_deref().unwrap_or("");
        let bind = typ == "bind" || m.options.iter().any(|o| o == "bind" || o == "rbind");
        // The last of ro/rw wins, as in mount::parse_options.
        let last = m
            .options
            .iter()
            .rev()
            .find(|o| *o == "ro" || *o == "rw")
            .map(String::as_str);
        let (what, writable) = if bind {
            let host_sys = m.source.as_deref().is_some_and(|s| {
                let c = crate::linux::path::components(s);
                s.starts_with('/') && c.first().is_some_and(|f| *f == "sys")
            });
            if !host_sys {
                continue;
            }
            // `rbind,ro` leaves the submounts (cgroupfs, securityfs, debugfs, ...) writable.
            let recursive = m.options.iter().any(|o| o == "rbind");
            let rec_ro = m
                .options
                .iter()
                .rev()
                .find(|o| *o == "rro" || *o == "rrw")
                .is_some_and(|o| o == "rro");
            (
                "a bind of the host's /sys",
                last != Some("ro") || (recursive && !rec_ro),
            )
        } else if typ == "sysfs" {
            ("sysfs", last != Some("ro"))
        } else if typ == "cgroup" || typ == "cgroup2" {
            if delegated {
                continue;
            }
            // cgroupfs is mounted as the spec says (writable without `ro`, as runc).
            let writable = last != Some("ro");
            if own_cgroupns && facts.cgroup_v2 {
                no_nsdelegate |= writable;
                ("cgroupfs; the host's cgroup2 has no nsdelegate", writable)
            } else {
                ("cgroupfs", writable)
            }
        } else {
            continue;
        };
        if !writable {
            continue;
        }
        m.options
            .retain(|o| o != "rw" && o != "ro" && o != "rrw" && o != "rro");
        m.options.push("ro".into());
        if bind {
            m.options.push("rro".into());
        }
        cut.push(format!("mounts[{i}] {} ({what})", m.destination));
    }
    if !cut.is_empty() {
        let reason = if no_nsdelegate {
            "RESTRICTED: sysfs, cgroupfs and the host's /sys are read-only; a cgroup namespace \
             of its own on cgroup v2 keeps cgroupfs writable only with nsdelegate, and the \
             host's cgroup2 is mounted without it: the kernel would let the namespace root \
             write its own limits (pids.max, memory.max, cpu.max)"
        } else {
            "RESTRICTED: sysfs, cgroupfs (without a cgroup namespace of its own on cgroup v2 \
             mounted with nsdelegate) and the host's /sys are read-only"
        };
        change(
            d,
            "mounts",
            "set",
            format!("read-only: {}", cut.join(", ")),
            reason,
        );
    }
}

fn change(
    d: &mut Decision,
    field: impl Into<String>,
    action: &'static str,
    detail: impl Into<String>,
    reason: &'static str,
) {
    d.changes.push(Change {
        field: field.into(),
        action,
        detail: detail.into(),
        reason,
    });
}

fn restrict(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    systemd: bool,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    let Some(process) = spec.process.as_mut() else {
        return Ok(());
    };
    // Capabilities: only what the administrator allows survives; never inheritable.
    let allowed: Vec<u32> = cfg
        .allowed_capabilities
        .iter()
        .filter_map(|c| crate::linux::capabilities::number(c))
        .collect();
    let caps = process.capabilities.get_or_insert_with(Default::default);
    for (name, set) in [
        ("bounding", &mut caps.bounding),
        ("effective", &mut caps.effective),
        ("permitted", &mut caps.permitted),
        ("inheritable", &mut caps.inheritable),
        ("ambient", &mut caps.ambient),
    ] {
        let list = set.get_or_insert_with(Vec::new);
        // A name that is no capability at all is an error under any policy, not something
        // to drop quietly.
        if let Some((i, bad)) = list
            .iter()
            .enumerate()
            .find(|(_, c)| crate::linux::capabilities::number(c).is_none())
        {
            return Err(PolicyError::UnknownCapability {
                set: name,
                index: i,
                name: bad.clone(),
            });
        }
        let (keep, drop): (Vec<String>, Vec<String>) = list.drain(..).partition(|c| {
            name != "inheritable"
                && crate::linux::capabilities::number(c).is_some_and(|n| allowed.contains(&n))
        });
        if !drop.is_empty() {
            change(
                d,
                format!("process.capabilities.{name}"),
                "removed",
                drop.join(","),
                "not in restricted.allowed_capabilities",
            );
        }
        *list = keep;
    }
    if process.no_new_privileges != Some(true) {
        process.no_new_privileges = Some(true);
        change(
            d,
            "process.noNewPrivileges",
            "set",
            "true",
            "setuid binaries and file capabilities must not raise privileges",
        );
    }
    let linux = spec.linux.get_or_insert_with(Default::default);
    match &linux.seccomp {
        None => {
            linux.seccomp = Some(restricted_profile()?.clone());
            change(
                d,
                "linux.seccomp",
                "set",
                "seccomp-profiles/restricted.json",
                "no seccomp profile in the spec",
            );
        }
        Some(_) => {
            d.seccomp_floor = true;
            change(
                d,
                "linux.seccomp",
                "added",
                "seccomp-profiles/floor.json as a second filter",
                "the deny floor holds whatever profile the engine sends",
            );
        }
    }
    for (list, defaults, field) in [
        (
            &mut linux.masked_paths,
            &MASKED_PATHS[..],
            "linux.maskedPaths",
        ),
        (
            &mut linux.readonly_paths,
            &READONLY_PATHS[..],
            "linux.readonlyPaths",
        ),
    ] {
        let missing: Vec<&str> = defaults
            .iter()
            .copied()
            .filter(|p| !list.iter().any(|x| x == p))
            .collect();
        if !missing.is_empty() {
            list.extend(missing.iter().map(|s| s.to_string()));
            change(
                d,
                field,
                "added",
                missing.join(","),
                "runc's defaults, left out by the engine",
            );
        }
    }
    dev_inodes(&mut spec.mounts, d);
    let linux = spec.linux.get_or_insert_with(Default::default);
    let res = linux.resources.get_or_insert_with(Default::default);
    if let (Some(limit), None) = (cfg.memory, res.memory.as_ref().and_then(|m| m.limit)) {
        res.memory.get_or_insert_with(Default::default).limit = Some(limit);
        change(
            d,
            "linux.resources.memory.limit",
            "set",
            limit.to_string(),
            "restricted.memory: the engine set no memory limit",
        );
    }
    if let (Some(pids), true) = (cfg.pids, res.pids.as_ref().is_none_or(|p| p.limit <= 0)) {
        res.pids = Some(spec::Pids { limit: pids });
        change(
            d,
            "linux.resources.pids.limit",
            "set",
            pids.to_string(),
            "restricted.pids: the engine set no pids limit",
        );
    }
    if let (Some(cpus), None) = (cfg.cpus, res.cpu.as_ref().and_then(|c| c.quota)) {
        let cpu = res.cpu.get_or_insert_with(Default::default);
        let period = cpu.period.unwrap_or(100_000);
        cpu.period = Some(period);
        cpu.quota = Some(cpu_quota(cpus, period));
        change(
            d,
            "linux.resources.cpu.quota",
            "set",
            format!("{} per {period}", cpu.quota.unwrap_or(0)),
            "restricted.cpus: the engine set no cpu limit",
        );
    }
    // The fleet budget: containers moat places itself sit under one capped parent.
    let fleet = cfg.fleet_cgroup.trim_end_matches('/');
    let placed = if systemd {
        systemd_fleet_placement(linux.cgroups_path.as_deref(), cfg, id)
    } else {
        match linux.cgroups_path.as_deref() {
            None | Some("") => Some(format!("{fleet}/{id}")),
            Some(p) if !p.starts_with('/') && !p.contains(':') => Some(format!("{fleet}/{p}")),
            Some(p) if cfg.force_nesting && p.starts_with('/') => Some(format!("{fleet}{p}")),
            Some(_) => None,
        }
    };
    if let Some(p) = placed {
        change(
            d,
            "linux.cgroupsPath",
            "set",
            p.clone(),
            "under the fleet budget cgroup",
        );
        linux.cgroups_path = Some(p);
    }
    Ok(())
}

/// Why moat sets `memory.high`.
const MEMORY_HIGH: &str = "restricted.memory_high: throttle and reclaim before the memory \
     limit's OOM kill";

/// RESTRICTED: below a memory limit (the engine's or the config's) the kernel throttles
/// and reclaims from `memory_high` of it (`linux.resources.unified["memory.high"]`, which
/// the cgroupfs driver writes and the systemd driver sends as `MemoryHigh`), so a leaking
/// sandbox slows down and shows memory pressure before it is killed. An engine's own
/// `memory.high` (Kubernetes MemoryQoS) is kept. cgroup v1 has no such file: the decision
/// says so, and the limit stays a hard one.
fn memory_high(spec: &mut Spec, cfg: &Config, cgroup_v2: bool, d: &mut Decision) {
    if cfg.memory_high <= 0.0 {
        return;
    }
    let Some(res) = spec.linux.as_mut().and_then(|l| l.resources.as_mut()) else {
        return;
    };
    let unified = res.unified.get_or_insert_with(Default::default);
    // unified is written last, so its memory.max wins over memory.limit.
    let limit = match unified.get("memory.max") {
        Some(v) => v.trim().parse().ok(),
        None => res.memory.as_ref().and_then(|m| m.limit),
    }
    .filter(|l: &i64| *l > 0);
    let Some(limit) = limit else {
        return;
    };
    if unified.contains_key("memory.high") {
        change(
            d,
            "linux.resources.unified.memory.high",
            "kept",
            "the engine's memory.high",
            "the engine chose its own throttle",
        );
        return;
    }
    if !cgroup_v2 {
        if unified.is_empty() {
            res.unified = None;
        }
        change(
            d,
            "linux.resources.unified.memory.high",
            "absent",
            "the memory controller is cgroup v1 here, which has no memory.high: the limit \
             is a hard one (OOM kill, no throttle)",
            MEMORY_HIGH,
        );
        return;
    }
    let high = high_of(limit, cfg.memory_high);
    unified.insert("memory.high".into(), high.to_string());
    d.memory_high = Some(cfg.memory_high);
    change(
        d,
        "linux.resources.unified.memory.high",
        "set",
        format!("{high} ({} of the limit {limit})", cfg.memory_high),
        MEMORY_HIGH,
    );
}

/// `share` of `limit` bytes, whole pages: what `memory.high` is written as.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
pub fn high_of(limit: i64, share: f64) -> i64 {
    // The config admits shares in (0, 1); the cast saturates and is below `limit`.
    let bytes = (limit as f64 * share) as i64;
    bytes - bytes % 4096
}

/// RESTRICTED: the engine's `/dev` tmpfs gets an inode cap when it has none (a tmpfs's
/// default is half the host's RAM pages), so a container cannot fill it with empty files.
fn dev_inodes(mounts: &mut [Mount], d: &mut Decision) {
    for m in mounts.iter_mut().filter(|m| {
        m.typ.as_deref() == Some("tmpfs")
            && crate::linux::path::components(&m.destination) == ["dev"]
    }) {
        if m.options.iter().any(|o| o.starts_with("nr_inodes=")) {
            continue;
        }
        m.options.push(format!("nr_inodes={}", config::DEV_INODES));
        change(
            d,
            "mounts./dev",
            "set",
            format!("nr_inodes={}", config::DEV_INODES),
            "the engine's /dev tmpfs had no inode cap",
        );
    }
}

/// The fleet budget under the systemd driver is a slice named after `[fleet] cgroup`
/// (`/moat` → `moat.slice`): a container moat names itself goes in it; an engine's
/// `slice:prefix:name` only with `force_nesting`, its slice nested below the fleet's
/// (`machine.slice` → `moat-machine.slice`). Without a budget nothing moves.
fn systemd_fleet_placement(path: Option<&str>, cfg: &Config, id: &str) -> Option<String> {
    fleet_budget(cfg)?;
    let fleet = crate::linux::cgroups::systemd::fleet_slice(&cfg.fleet_cgroup).ok()?;
    let stem = fleet.strip_suffix(".slice")?;
    match path.filter(|p| !p.is_empty()) {
        None => Some(format!("{fleet}:moat:{id}")),
        Some(p) if cfg.force_nesting => {
            let (slice, rest) = p.split_once(':')?;
            let slice = if slice.is_empty() {
                "system.slice"
            } else {
                slice
            };
            (slice != fleet && !slice.starts_with(&format!("{stem}-")))
                .then(|| format!("{stem}-{slice}:{rest}"))
        }
        Some(_) => None,
    }
}

/// `name` is on an LSM list of the config: exact, or a prefix when the entry ends in `*`.
/// `unconfined` is never on an AppArmor list (the config refuses it).
pub fn lsm_listed(list: &[String], name: &str) -> bool {
    list.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => p == name,
    })
}

/// The AppArmor profiles a RESTRICTED container may run under: the config's list and
/// moat's own profile, never `unconfined`.
pub fn apparmor_allowed(cfg: &Config, profile: &str) -> bool {
    profile != "unconfined"
        && (profile == APPARMOR_PROFILE_NAME || lsm_listed(&cfg.apparmor_profiles, profile))
}

/// The type field of an SELinux label `user:role:type[:level]`.
pub fn selinux_type(label: &str) -> Option<&str> {
    let mut f = label.splitn(4, ':');
    let (_, _, t) = (f.next()?, f.next()?, f.next()?);
    (!t.is_empty()).then_some(t)
}

/// The LSM floor under RESTRICTED, decided from the host facts: an AppArmor profile
/// outside `[restricted] apparmor_profiles` (`unconfined` included) becomes moat-default,
/// a spec without one gets moat-default, a listed profile the host has not loaded is an
/// error; an SELinux label whose type is outside `[restricted] selinux_types` gets the
/// first listed type. A host without the LSM leaves the field alone (it is ignored, as
/// runc ignores it).
fn restrict_lsm(
    spec: &mut Spec,
    cfg: &Config,
    host: &HostFacts,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    let Some(process) = spec.process.as_mut() else {
        return Ok(());
    };
    // moat loads its own profile when the host has not; a moat that may not load one
    // (rootless) uses it only where it can see that root has (the list of loaded profiles
    // may be hidden from a user namespace: then it is taken as not loaded).
    let moat_profile = host.apparmor_may_load || host.moat_profile_loaded;
    if host.apparmor && !moat_profile {
        if let Some(p) = process
            .apparmor_profile
            .as_deref()
            .filter(|p| !p.is_empty() && !apparmor_allowed(cfg, p))
        {
            return Err(PolicyError::AppArmorUnavailable(p.to_string()));
        }
        if process
            .apparmor_profile
            .as_deref()
            .is_none_or(str::is_empty)
        {
            change(
                d,
                "process.apparmorProfile",
                "not applied",
                APPARMOR_PROFILE_NAME,
                "rootless moat may not load AppArmor profiles and the host has not loaded \
                 moat-default (a rootful moat create loads it)",
            );
        } else if let Some(p) = process.apparmor_profile.as_deref() {
            apparmor_check_loaded(p, host)?;
        }
    } else if host.apparmor {
        match process
            .apparmor_profile
            .as_deref()
            .filter(|p| !p.is_empty())
        {
            None => {
                process.apparmor_profile = Some(APPARMOR_PROFILE_NAME.into());
                change(
                    d,
                    "process.apparmorProfile",
                    "set",
                    APPARMOR_PROFILE_NAME,
                    "the host has AppArmor and the spec names no profile",
                );
            }
            Some(p) if apparmor_allowed(cfg, p) => apparmor_check_loaded(p, host)?,
            Some(p) => {
                let detail = format!("{p} → {APPARMOR_PROFILE_NAME}");
                process.apparmor_profile = Some(APPARMOR_PROFILE_NAME.into());
                change(
                    d,
                    "process.apparmorProfile",
                    "replaced",
                    detail,
                    "not in restricted.apparmor_profiles",
                );
            }
        }
    }
    if host.selinux {
        if let Some(label) = process.selinux_label.as_deref().filter(|l| !l.is_empty()) {
            if let Some(fixed) = selinux_confined(cfg, label)? {
                change(
                    d,
                    "process.selinuxLabel",
                    "replaced",
                    format!("{label} → {fixed}"),
                    "its type is not in restricted.selinux_types",
                );
                process.selinux_label = Some(fixed);
            }
        }
    }
    Ok(())
}

/// A listed profile must be loaded: moat loads only its own, and a container must not
/// start with a profile the kernel would refuse halfway through create.
fn apparmor_check_loaded(profile: &str, host: &HostFacts) -> Result<(), PolicyError> {
    if profile != APPARMOR_PROFILE_NAME && host.apparmor_loaded(profile) == Some(false) {
        return Err(PolicyError::AppArmorNotLoaded(profile.to_string()));
    }
    Ok(())
}

/// `None` when `label`'s type is listed, else the label with its type replaced by the
/// first listed type that is no pattern.
fn selinux_confined(cfg: &Config, label: &str) -> Result<Option<String>, PolicyError> {
    let t = selinux_type(label).ok_or_else(|| PolicyError::SelinuxLabel(label.to_string()))?;
    if lsm_listed(&cfg.selinux_types, t) {
        return Ok(None);
    }
    let Some(want) = cfg.selinux_types.iter().find(|t| !t.ends_with('*')) else {
        return Err(PolicyError::SelinuxNoType);
    };
    let mut f: Vec<&str> = label.splitn(4, ':').collect();
    f[2] = want;
    Ok(Some(f.join(":")))
}

/// The LSM part of [`restrict_exec`], run after it: an exec'd process under RESTRICTED
/// gets the init's AppArmor profile or SELinux label instead of one that is not listed
/// (`exec --apparmor unconfined`); a listed profile the host has not loaded is an error.
pub fn restrict_exec_lsm(
    p: &mut spec::Process,
    init: &spec::Process,
    cfg: &Config,
    host: &HostFacts,
) -> Result<Vec<String>, PolicyError> {
    let mut replaced = Vec::new();
    if host.apparmor {
        if let Some(prof) = p.apparmor_profile.clone().filter(|x| !x.is_empty()) {
            if apparmor_allowed(cfg, &prof) {
                apparmor_check_loaded(&prof, host)?;
            } else {
                replaced.push(format!("apparmorProfile {prof}"));
                p.apparmor_profile = init.apparmor_profile.clone();
            }
        }
    }
    if host.selinux {
        if let Some(label) = p.selinux_label.clone().filter(|x| !x.is_empty()) {
            if selinux_confined(cfg, &label)?.is_some() {
                replaced.push(format!("selinuxLabel {label}"));
                p.selinux_label = init.selinux_label.clone();
            }
        }
    }
    Ok(replaced)
}

/// Under RESTRICTED an exec'd process never gets more than the container's init: each
/// capability set is cut to the init's (inheritable emptied), NNP is forced, and the
/// init's AppArmor profile applies when the exec names none. Engines send full process
/// specs with their default capabilities on every exec (podman does).
pub fn restrict_exec(p: &mut spec::Process, init: &spec::Process) -> Vec<String> {
    let mut removed = Vec::new();
    let ic = init.capabilities.clone().unwrap_or_default();
    let caps = p.capabilities.get_or_insert_with(Default::default);
    for (name, set, allowed) in [
        ("bounding", &mut caps.bounding, &ic.bounding),
        ("effective", &mut caps.effective, &ic.effective),
        ("permitted", &mut caps.permitted, &ic.permitted),
        ("inheritable", &mut caps.inheritable, &None),
        ("ambient", &mut caps.ambient, &ic.ambient),
    ] {
        let allowed = allowed.clone().unwrap_or_default();
        let list = set.get_or_insert_with(Vec::new);
        list.retain(|c| {
            let keep = allowed.iter().any(|a| a.eq_ignore_ascii_case(c));
            if !keep {
                removed.push(format!("{name}:{c}"));
            }
            keep
        });
    }
    p.no_new_privileges = Some(true);
    if p.apparmor_profile.as_deref().unwrap_or("").is_empty() {
        p.apparmor_profile = init.apparmor_profile.clone();
    }
    removed
}

/// The fleet budget cgroup and its limits, when the config caps anything.
pub fn fleet_budget(cfg: &Config) -> Option<(String, spec::Resources)> {
    if cfg.fleet_memory.is_none() && cfg.fleet_pids.is_none() && cfg.fleet_cpus.is_none() {
        return None;
    }
    let res = spec::Resources {
        memory: cfg.fleet_memory.map(|m| spec::Memory {
            limit: Some(m),
            ..Default::default()
        }),
        pids: cfg.fleet_pids.map(|limit| spec::Pids { limit }),
        cpu: cfg.fleet_cpus.map(|c| spec::Cpu {
            quota: Some(cpu_quota(c, 100_000)),
            period: Some(100_000),
            ..Default::default()
        }),
        ..Default::default()
    };
    Some((cfg.fleet_cgroup.clone(), res))
}

/// The CFS quota (µs per `period`) of `cpus` CPUs: the config admits only positive
/// numbers, and a float-to-integer cast saturates.
#[allow(clippy::cast_possible_truncation)]
fn cpu_quota(cpus: f64, period: u64) -> i64 {
    (cpus * period as f64) as i64
}

fn has_mount(spec: &Spec, dest: &str) -> bool {
    spec.mounts.iter().any(|m| {
        crate::linux::path::components(&m.destination) == crate::linux::path::components(dest)
    })
}

fn readonly_rootfs(spec: &mut Spec, cfg: &Config, d: &mut Decision) {
    let root = spec.root.get_or_insert_with(Default::default);
    if !root.readonly {
        root.readonly = true;
        change(d, "root.readonly", "set", "true", "moat.rootfs=readonly");
    }
    for (dest, mode) in [("/tmp", "1777"), (cfg.workspace.as_str(), "0755")] {
        if has_mount(spec, dest) {
            continue;
        }
        spec.mounts.push(Mount {
            destination: dest.to_string(),
            typ: Some("tmpfs".into()),
            source: Some("tmpfs".into()),
            options: vec![
                "nosuid".into(),
                "nodev".into(),
                format!("mode={mode}"),
                format!("size={}", cfg.tmp_size),
                format!("nr_inodes={}", cfg.tmp_inodes),
            ],
            ..Default::default()
        });
        change(
            d,
            "mounts",
            "added",
            format!(
                "tmpfs {dest} size={} nr_inodes={}",
                cfg.tmp_size, cfg.tmp_inodes
            ),
            "writable paths under a read-only root",
        );
    }
}

/// `moat.rootfs=ephemeral`: a writable root whose writes go to a tmpfs of `size` bytes and
/// `[restricted] rootfs_inodes` inodes over the engine's layers, never to the engine's
/// storage (`linux::idmap::ephemeral` builds it at create). tmpfs pages are charged to the
/// container's memory cgroup, so the cap plus `tmp_size` must fit below its memory limit,
/// or the sandbox would be OOM-killed before it saw ENOSPC: such a create is refused. A
/// root the spec makes read-only needs no writable layer.
fn ephemeral_rootfs(
    spec: &mut Spec,
    cfg: &Config,
    size: u64,
    d: &mut Decision,
) -> Result<(), PolicyError> {
    if spec.root.as_ref().is_some_and(|r| r.readonly) {
        change(
            d,
            "root.readonly",
            "kept",
            "true: the root is read-only, no writable layer to bound",
            "moat.rootfs=ephemeral",
        );
        return Ok(());
    }
    let res = spec.linux.as_ref().and_then(|l| l.resources.as_ref());
    let limit = res
        .and_then(|r| r.unified.as_ref())
        .and_then(|u| u.get("memory.max"))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .or_else(|| res.and_then(|r| r.memory.as_ref()).and_then(|m| m.limit))
        .filter(|l| *l > 0);
    let tmp = config::parse_size(&cfg.tmp_size)
        .unwrap_or(0)
        .unsigned_abs();
    if let Some(limit) = limit {
        if size.saturating_add(tmp) > limit.unsigned_abs() {
            return Err(PolicyError::EphemeralMemory { size, tmp, limit });
        }
    }
    let b = BoundedRoot {
        size,
        inodes: cfg.rootfs_inodes,
    };
    d.bounded_root = Some(b);
    change(
        d,
        "root.path",
        "set",
        format!(
            "ephemeral: the engine's layers read-only below a tmpfs of {} bytes and {} \
             inodes that takes every write",
            b.size, b.inodes
        ),
        "moat.rootfs=ephemeral: writes bounded, kept off the engine's storage, lost at delete",
    );
    Ok(())
}

/// `moat.userns=auto`: a new user namespace whose root is a host range from the pool. An
/// engine that maps ids itself (`linux.uidMappings`, or a user namespace joined by path)
/// keeps its mapping: it already chose who container root is on the host.
fn userns_auto(spec: &mut Spec, cfg: &Config, d: &mut Decision) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    if linux
        .namespaces
        .iter()
        .any(|n| n.typ == "user" && n.path.is_some())
    {
        change(
            d,
            "linux.namespaces.user",
            "kept",
            "the engine's user namespace (joined by path)",
            "moat.userns=auto: the engine chose the mapping",
        );
        return;
    }
    if !linux.uid_mappings.is_empty() || !linux.gid_mappings.is_empty() {
        change(
            d,
            "linux.uidMappings",
            "kept",
            "the engine's id mappings",
            "moat.userns=auto: the engine chose the mapping",
        );
        return;
    }
    if !linux.namespaces.iter().any(|n| n.typ == "user") {
        linux.namespaces.push(Namespace {
            typ: "user".into(),
            path: None,
        });
        change(
            d,
            "linux.namespaces",
            "added",
            "a new user namespace",
            "moat.userns=auto",
        );
    }
    d.userns_pool = true;
    change(
        d,
        "linux.uidMappings",
        "set",
        format!(
            "container 0-{} → a free host range from the pool {}+{} (allocated at create); \
             the rootfs idmapped to it",
            cfg.userns_size - 1,
            cfg.userns_pool.0,
            cfg.userns_pool.1
        ),
        "moat.userns=auto: container root is an unprivileged host user",
    );
}

fn network_none(spec: &mut Spec, d: &mut Decision) {
    let linux = spec.linux.get_or_insert_with(Default::default);
    let fresh = Namespace {
        typ: "network".into(),
        path: None,
    };
    match linux.namespaces.iter_mut().find(|n| n.typ == "network") {
        Some(n) if n.path.is_none() => {}
        Some(n) => {
            change(
                d,
                "linux.namespaces.network",
                "replaced",
                format!(
                    "path {} → a new empty namespace",
                    n.path.as_deref().unwrap_or("")
                ),
                "moat.network=none",
            );
            *n = fresh;
        }
        None => {
            linux.namespaces.push(fresh);
            change(
                d,
                "linux.namespaces",
                "added",
                "a new empty network namespace",
                "moat.network=none",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn podman_like() -> Spec {
        let mut v = crate::spec::default::spec(false);
        v["process"]["capabilities"]["bounding"] =
            serde_json::json!(["CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_CHROOT"]);
        v["process"]["noNewPrivileges"] = serde_json::json!(false);
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn restricted_drops_everything_and_says_so() {
        let mut s = podman_like();
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        let caps = s.process().capabilities.as_ref().unwrap();
        assert!(caps.bounding.as_ref().unwrap().is_empty());
        assert!(caps.effective.as_ref().unwrap().is_empty());
        assert_eq!(s.process().no_new_privileges, Some(true));
        assert!(s.linux().seccomp.is_some());
        assert!(d.changes.iter().any(
            |c| c.field == "process.capabilities.bounding" && c.detail.contains("CAP_NET_RAW")
        ));
        assert_eq!(
            s.linux()
                .resources
                .as_ref()
                .unwrap()
                .pids
                .as_ref()
                .unwrap()
                .limit,
            4096
        );
        assert_eq!(s.linux().cgroups_path.as_deref(), Some("/moat/c1"));
    }

    #[test]
    fn allowed_caps_survive_but_never_inheritable() {
        let mut s = podman_like();
        s.process
            .as_mut()
            .unwrap()
            .capabilities
            .as_mut()
            .unwrap()
            .inheritable = Some(vec!["CAP_CHOWN".into()]);
        let cfg = Config {
            allowed_capabilities: vec!["CAP_CHOWN".into()],
            ..Config::default()
        };
        apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        let caps = s.process().capabilities.as_ref().unwrap();
        assert_eq!(
            caps.bounding.as_deref(),
            Some(&["CAP_CHOWN".to_string()][..])
        );
        assert!(caps.inheritable.as_ref().unwrap().is_empty());
    }

    #[test]
    fn engine_profile_gets_the_floor() {
        let mut s = podman_like();
        s.linux.as_mut().unwrap().seccomp = Some(spec::Seccomp {
            default_action: "SCMP_ACT_ALLOW".into(),
            ..Default::default()
        });
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(d.seccomp_floor);
        assert_eq!(
            s.linux().seccomp.as_ref().unwrap().default_action,
            "SCMP_ACT_ALLOW"
        );
    }

    /// Host namespaces as a test host has them: ids no spec path below names.
    fn facts() -> FloorFacts {
        FloorFacts {
            host_ns: vec![
                ("pid", (4, 0xeffffffc)),
                ("network", (4, 0xeffffff8)),
                ("ipc", (4, 0xeffffffe)),
                ("uts", (4, 0xeffffffd)),
            ],
            ns_paths: vec![
                ("/proc/1/ns/net".into(), Ok((4, 0xeffffff8))),
                ("/proc/1/ns/pid".into(), Ok((4, 0xeffffffc))),
                ("/run/netns/pod".into(), Ok((4, 0xf0000001))),
                ("/proc/77/ns/ipc".into(), Ok((4, 0xf0000002))),
                (
                    "/proc/9/ns/uts".into(),
                    Err(NsPathError::Stat(libc::ENOENT)),
                ),
            ],
            cgroup_v2: false,
            cgroup_nsdelegate: false,
            systemd_cgroup: false,
            bpf_cgroup: true,
            resolvers: vec!["10.88.0.1:53".parse().unwrap()],
        }
    }

    #[test]
    fn egress_metadata_is_refused_by_default_and_a_list_only_narrows() {
        let cfg = Config::default();
        let mut s = podman_like();
        let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        let e = d.egress.expect("RESTRICTED refuses the metadata endpoints");
        assert_eq!(e.allow, None);
        assert!(e.deny.contains(&"::ffff:169.254.169.254".parse().unwrap()));
        assert_eq!(e.resolvers, vec!["10.88.0.1:53".parse().unwrap()]);
        // No cut in the summary for the block alone.
        assert!(!d.changes.iter().any(|c| c.field == "egress"));
        // OPEN: nothing, unless the annotation asks.
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        let mut s = podman_like();
        let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d.egress.is_none());
        let mut s = podman_like();
        s.annotations.insert("moat.egress".into(), "none".into());
        let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(d.egress.unwrap().allow.unwrap().0.len(), 0);
        // Under a configured list, an annotation narrows or is refused, naming the rule.
        let listed = Config {
            egress_allow: Some(egress::parse_list("10.0.0.0/8,*.corp.example:443").unwrap()),
            ..Config::default()
        };
        let mut s = podman_like();
        let d = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d
            .changes
            .iter()
            .any(|c| c.field == "egress" && c.action == "set"));
        let mut s = podman_like();
        s.annotations.insert(
            "moat.egress".into(),
            "tcp/10.1.0.0/16:22,git.corp.example:443".into(),
        );
        let d = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(
            d.egress.unwrap().allow.unwrap().to_string(),
            "tcp/10.1.0.0/16:22,git.corp.example:443"
        );
        for widening in ["11.0.0.1", "git.corp.example", "0.0.0.0/0:443"] {
            let mut s = podman_like();
            s.annotations
                .insert("moat.egress".into(), format!("10.1.1.1,{widening}"));
            let e = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts())
                .unwrap_err()
                .to_string();
            assert!(e.contains("outside what"), "{e}");
            assert!(
                e.contains(&egress::parse_rule(widening).unwrap().to_string()),
                "{e}"
            );
        }
        let mut s = podman_like();
        s.annotations
            .insert("moat.egress".into(), "10.0.0.1/8".into());
        let e = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
        // moat.network=none: no network, nothing to police.
        let mut s = podman_like();
        s.annotations.insert("moat.network".into(), "none".into());
        let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d.egress.is_none());
    }

    #[test]
    fn egress_without_cgroup_bpf_refuses_a_list_and_records_the_block_absent() {
        let no_bpf = FloorFacts {
            bpf_cgroup: false,
            ..facts()
        };
        let mut s = podman_like();
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &no_bpf,
        )
        .unwrap();
        assert!(d.egress.is_none());
        assert!(d
            .changes
            .iter()
            .any(|c| c.field == "egress" && c.action == "absent"));
        let mut s = podman_like();
        s.annotations
            .insert("moat.egress".into(), "10.0.0.1".into());
        let e = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &no_bpf,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot attach cgroup BPF"), "{e}");
    }

    fn restricted_caps(s: &Spec) -> Vec<String> {
        s.process()
            .capabilities
            .as_ref()
            .and_then(|c| c.effective.clone())
            .unwrap_or_default()
    }

    #[test]
    fn loosening_annotations_are_ignored_and_reported() {
        for (k, v, cfg) in [
            ("moat.policy", "open", Config::default()),
            (
                "moat.rootfs",
                "writable",
                Config {
                    readonly_rootfs: true,
                    ..Config::default()
                },
            ),
            (
                "moat.network",
                "engine",
                Config {
                    network_none: true,
                    ..Config::default()
                },
            ),
            (
                "moat.userns",
                "engine",
                Config {
                    userns_auto: true,
                    ..Config::default()
                },
            ),
        ] {
            let mut s = podman_like();
            s.annotations.insert(k.into(), v.into());
            let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
            assert_eq!(d.policy, "restricted", "{k}={v}");
            assert!(restricted_caps(&s).is_empty(), "{k}={v}");
            assert_eq!(s.process().no_new_privileges, Some(true));
            let c = d
                .changes
                .iter()
                .find(|c| c.field == format!("annotations.{k}"))
                .unwrap_or_else(|| panic!("{k}={v} not reported: {:?}", d.changes));
            assert_eq!(c.action, "ignored");
            assert!(c.detail.contains(&format!("{k}={v}")), "{}", c.detail);
            assert!(c.reason.contains("[alias.NAME]"), "{}", c.reason);
            // The config's setting holds.
            assert_eq!(d.readonly_rootfs, cfg.readonly_rootfs, "{k}");
            assert_eq!(d.network_none, cfg.network_none, "{k}");
            assert_eq!(d.userns == "auto", cfg.userns_auto, "{k}");
        }
        // Restating what the config gives, or tightening, is not reported.
        let mut s = podman_like();
        s.annotations
            .insert("moat.rootfs".into(), "writable".into());
        s.annotations
            .insert("moat.policy".into(), "restricted".into());
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(!d.changes.iter().any(|c| c.action == "ignored"));
    }

    #[test]
    fn the_old_allow_open_cannot_bring_loosening_back() {
        // The only configs that used to let moat.policy=open through now fail to load.
        let path = std::path::Path::new("/etc/moat/config.toml");
        for text in ["allow_open = true\n", "[alias.moat]\nallow_open = true\n"] {
            assert!(Config::from_str_as(text, path, Some("moat")).is_err());
        }
    }

    #[test]
    fn open_comes_from_the_config_or_its_alias() {
        let text = "[alias.moat-open]\ndefault_policy = \"open\"\n";
        let path = std::path::Path::new("/etc/moat/config.toml");
        let plain = Config::from_str_as(text, path, Some("moat")).unwrap();
        let mut s = podman_like();
        let d = apply(&mut s, &plain, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(d.policy, "restricted");
        let open = Config::from_str_as(text, path, Some("moat-open")).unwrap();
        let mut s = podman_like();
        let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(d.policy, "open");
        assert!(d.changes.is_empty());
        assert_eq!(s.process().no_new_privileges, Some(false));
        assert_eq!(restricted_caps(&s).len(), 3);
        // Under OPEN an annotation still tightens.
        let mut s = podman_like();
        s.annotations
            .insert("moat.policy".into(), "restricted".into());
        let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(d.policy, "restricted");
    }

    fn with_ns(typ: &str, path: Option<&str>) -> Spec {
        let mut s = podman_like();
        let ns = &mut s.linux.as_mut().unwrap().namespaces;
        ns.retain(|n| n.typ != typ);
        if let Some(p) = path {
            ns.push(Namespace {
                typ: typ.into(),
                path: (!p.is_empty()).then(|| p.to_string()),
            });
        }
        s
    }

    #[test]
    fn host_namespaces_are_refused_unless_listed() {
        for typ in config::HOST_NAMESPACE_TYPES {
            let e = apply(
                &mut with_ns(typ, None),
                &Config::default(),
                "c1",
                &HostFacts::default(),
                &facts(),
            )
            .unwrap_err()
            .to_string();
            assert_eq!(
                e,
                format!(
                    "linux.namespaces: the host's {typ} namespace is refused under RESTRICTED \
                     (allow with [restricted] host_namespaces = [\"{typ}\"])"
                )
            );
            let cfg = Config {
                host_namespaces: vec![typ.into()],
                ..Config::default()
            };
            let d = apply(
                &mut with_ns(typ, None),
                &cfg,
                "c1",
                &HostFacts::default(),
                &facts(),
            )
            .unwrap();
            assert_eq!(d.host_namespaces, [typ]);
            assert!(d
                .changes
                .iter()
                .any(|c| c.action == "kept" && c.detail.contains(typ)));
            // OPEN runs the spec as written.
            let open = Config {
                default_policy: Mode::Open,
                ..Config::default()
            };
            apply(
                &mut with_ns(typ, None),
                &open,
                "c1",
                &HostFacts::default(),
                &facts(),
            )
            .unwrap();
        }
        // Listing one type allows only that one.
        let cfg = Config {
            host_namespaces: vec!["pid".into()],
            ..Config::default()
        };
        assert!(apply(
            &mut with_ns("uts", None),
            &cfg,
            "c1",
            &HostFacts::default(),
            &facts()
        )
        .is_err());
    }

    #[test]
    fn a_path_to_the_host_namespace_is_refused_another_containers_is_not() {
        for (typ, p) in [("network", "/proc/1/ns/net"), ("pid", "/proc/1/ns/pid")] {
            let e = apply(
                &mut with_ns(typ, Some(p)),
                &Config::default(),
                "c1",
                &HostFacts::default(),
                &facts(),
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("({p}): the host's {typ} namespace is refused")),
                "{e}"
            );
            assert!(e.contains(&format!("host_namespaces = [\"{typ}\"]")), "{e}");
            let cfg = Config {
                host_namespaces: vec![typ.into()],
                ..Config::default()
            };
            apply(
                &mut with_ns(typ, Some(p)),
                &cfg,
                "c1",
                &HostFacts::default(),
                &facts(),
            )
            .unwrap();
        }
        // A pod: another container's namespaces.
        let d = apply(
            &mut with_ns("network", Some("/run/netns/pod")),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(d.host_namespaces.is_empty());
        apply(
            &mut with_ns("ipc", Some("/proc/77/ns/ipc")),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        // Unreadable or unexamined paths fail closed.
        let e = apply(
            &mut with_ns("uts", Some("/proc/9/ns/uts")),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("cannot open /proc/9/ns/uts"), "{e}");
        assert!(apply(
            &mut with_ns("uts", Some("/elsewhere")),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts()
        )
        .is_err());
        // moat.network=none replaces the host's network before the floor looks.
        let mut s = with_ns("network", Some("/proc/1/ns/net"));
        s.annotations.insert("moat.network".into(), "none".into());
        apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
    }

    #[test]
    fn the_fd_check_gets_every_host_namespace_the_config_does_not_allow() {
        let cfg = Config {
            host_namespaces: vec!["uts".into()],
            ..Config::default()
        };
        let d = apply(
            &mut podman_like(),
            &cfg,
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        let refused = refused_host_namespaces(&d, &cfg, &facts());
        let types: Vec<&str> = refused.iter().map(|r| r.0).collect();
        assert_eq!(types, ["pid", "network", "ipc"]);
        assert_eq!(refused[1].1, (4, 0xeffffff8));
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        let d = apply(
            &mut podman_like(),
            &open,
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(refused_host_namespaces(&d, &open, &facts()).is_empty());
    }

    fn mount(dest: &str, typ: &str, source: &str, opts: &[&str]) -> Mount {
        Mount {
            destination: dest.into(),
            typ: Some(typ.into()),
            source: Some(source.into()),
            options: opts.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn privileged_sysfs_and_cgroupfs_are_cut_to_read_only() {
        let privileged = || {
            let mut s = podman_like();
            s.mounts = vec![
                mount("/sys", "sysfs", "sysfs", &["nosuid", "rw"]),
                mount("/sys/fs/cgroup", "cgroup", "cgroup", &["rw"]),
                mount("/host-sys", "bind", "/sys", &["rbind", "ro"]),
                mount("/data", "bind", "/srv/data", &["rbind", "rw"]),
            ];
            s
        };
        let mut s = privileged();
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        let opts = |i: usize| s.mounts[i].options.clone();
        assert_eq!(opts(0), ["nosuid", "ro"]);
        assert_eq!(opts(1), ["ro"]);
        assert_eq!(opts(2), ["rbind", "ro", "rro"]);
        assert_eq!(opts(3), ["rbind", "rw"], "other binds are the engine's");
        let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
        assert!(c.detail.contains("mounts[0] /sys (sysfs)"), "{}", c.detail);
        assert!(c.detail.contains("mounts[2] /host-sys"), "{}", c.detail);
        assert!(
            c.detail.contains("mounts[1] /sys/fs/cgroup (cgroupfs)"),
            "{}",
            c.detail
        );
        // A cgroup namespace of its own on cgroup v2 with nsdelegate keeps a writable
        // cgroupfs: the kernel refuses the namespace root's writes to its own limits.
        let mut s = privileged();
        let v2 = FloorFacts {
            cgroup_v2: true,
            cgroup_nsdelegate: true,
            systemd_cgroup: false,
            ..facts()
        };
        apply(&mut s, &Config::default(), "c1", &HostFacts::default(), &v2).unwrap();
        assert_eq!(s.mounts[1].options, ["rw"]);
        let mut s = privileged();
        s.linux
            .as_mut()
            .unwrap()
            .namespaces
            .retain(|n| n.typ != "cgroup");
        apply(&mut s, &Config::default(), "c1", &HostFacts::default(), &v2).unwrap();
        assert_eq!(s.mounts[1].options, ["ro"]);
        // OPEN keeps what --privileged asked for.
        let mut s = privileged();
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(s.mounts[0].options, ["nosuid", "rw"]);
    }

    #[test]
    fn cgroupfs_in_its_own_namespace_without_nsdelegate_is_cut_to_read_only() {
        // cgroup2 mounted without nsdelegate: the kernel lets a cgroup namespace root write
        // its own pids.max and memory.max, so the namespace alone keeps nothing writable.
        let mut s = podman_like();
        s.mounts = vec![
            mount("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "rw"]),
            mount("/cg2", "cgroup2", "cgroup2", &["ro", "rw"]),
            mount("/cg-ro", "cgroup", "cgroup", &["rw", "ro"]),
        ];
        assert!(s
            .linux()
            .namespaces
            .iter()
            .any(|n| n.typ == "cgroup" && n.path.is_none()));
        let plain = FloorFacts {
            cgroup_v2: true,
            cgroup_nsdelegate: false,
            ..facts()
        };
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &plain,
        )
        .unwrap();
        assert_eq!(s.mounts[0].options, ["nosuid", "ro"]);
        assert_eq!(s.mounts[1].options, ["ro"]);
        assert_eq!(s.mounts[2].options, ["rw", "ro"], "already read-only");
        let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
        assert_eq!(
            c.detail,
            "read-only: mounts[0] /sys/fs/cgroup (cgroupfs; the host's cgroup2 has no \
             nsdelegate), mounts[1] /cg2 (cgroupfs; the host's cgroup2 has no nsdelegate)"
        );
        assert!(c.reason.contains("without it"), "{}", c.reason);
        assert!(c.reason.contains("write its own limits"), "{}", c.reason);
        // The fact alone keeps nothing: nsdelegate on a host that is not pure v2.
        let mut s = podman_like();
        s.mounts = vec![mount("/sys/fs/cgroup", "cgroup", "cgroup", &["rw"])];
        let hybrid = FloorFacts {
            cgroup_v2: false,
            cgroup_nsdelegate: true,
            ..facts()
        };
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &hybrid,
        )
        .unwrap();
        assert_eq!(s.mounts[0].options, ["ro"]);
        let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
        assert!(!c.reason.contains("without it"), "{}", c.reason);
    }

    #[test]
    fn unknown_annotations_fail_closed() {
        let mut s = podman_like();
        s.annotations.insert("moat.polcy".into(), "open".into());
        assert!(apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts()
        )
        .unwrap_err()
        .to_string()
        .contains("unknown moat annotation"));
        let mut s = podman_like();
        s.annotations.insert("moat.network".into(), "some".into());
        assert!(apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts()
        )
        .is_err());
    }

    #[test]
    fn readonly_and_network_controls() {
        let mut s = podman_like();
        s.root.as_mut().unwrap().readonly = false;
        s.annotations
            .insert("moat.rootfs".into(), "readonly".into());
        s.annotations.insert("moat.network".into(), "none".into());
        s.linux
            .as_mut()
            .unwrap()
            .namespaces
            .retain(|n| n.typ != "network");
        s.linux.as_mut().unwrap().namespaces.push(Namespace {
            typ: "network".into(),
            path: Some("/run/netns/x".into()),
        });
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(d.readonly_rootfs && d.network_none);
        assert!(s.root.as_ref().unwrap().readonly);
        assert!(has_mount(&s, "/tmp") && has_mount(&s, "/workspace"));
        assert!(s
            .linux()
            .namespaces
            .iter()
            .any(|n| n.typ == "network" && n.path.is_none()));
    }

    fn with_memory(limit: Option<i64>, unified: &[(&str, &str)]) -> Spec {
        let mut s = podman_like();
        let res = s
            .linux
            .as_mut()
            .unwrap()
            .resources
            .get_or_insert_with(Default::default);
        res.memory = limit.map(|l| spec::Memory {
            limit: Some(l),
            ..Default::default()
        });
        if !unified.is_empty() {
            res.unified = Some(
                unified
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        s
    }

    fn high(s: &Spec) -> Option<String> {
        s.linux()
            .resources
            .as_ref()?
            .unified
            .as_ref()?
            .get("memory.high")
            .cloned()
    }

    #[test]
    fn memory_high_throttles_below_every_limit_on_v2_only() {
        let v2 = FloorFacts {
            cgroup_v2: true,
            ..facts()
        };
        let run = |s: &mut Spec, cfg: &Config, f: &FloorFacts| {
            apply(s, cfg, "c1", &HostFacts::default(), f).unwrap()
        };
        let cfg = Config::default();
        // The engine's limit: 0.9 of it, whole pages.
        let mut s = with_memory(Some(100 << 20), &[]);
        let d = run(&mut s, &cfg, &v2);
        assert_eq!(high(&s).as_deref(), Some("94371840"));
        assert_eq!(d.memory_high, Some(0.9));
        // The config's limit.
        let mut s = with_memory(None, &[]);
        let lim = Config {
            memory: Some(1 << 30),
            ..Config::default()
        };
        run(&mut s, &lim, &v2);
        assert_eq!(high(&s), Some(high_of(1 << 30, 0.9).to_string()));
        // unified memory.max wins over memory.limit, as when the files are written.
        let mut s = with_memory(Some(1 << 30), &[("memory.max", "10485760")]);
        run(&mut s, &cfg, &v2);
        assert_eq!(high(&s).as_deref(), Some("9437184"));
        // The engine's own memory.high is never overwritten.
        let mut s = with_memory(Some(1 << 30), &[("memory.high", "12345")]);
        let d = run(&mut s, &cfg, &v2);
        assert_eq!(high(&s).as_deref(), Some("12345"));
        assert!(d.memory_high.is_none());
        assert!(d
            .changes
            .iter()
            .any(|c| c.action == "kept" && c.detail.contains("memory.high")));
        // No limit, unlimited, 0 (off), OPEN: nothing.
        for (limit, cfg) in [
            (None, Config::default()),
            (Some(-1), Config::default()),
            (
                Some(1 << 30),
                Config {
                    memory_high: 0.0,
                    ..Config::default()
                },
            ),
            (
                Some(1 << 30),
                Config {
                    default_policy: Mode::Open,
                    ..Config::default()
                },
            ),
        ] {
            let mut s = with_memory(limit, &[]);
            let d = run(&mut s, &cfg, &v2);
            assert!(high(&s).is_none() && d.memory_high.is_none(), "{limit:?}");
        }
        // v1 (and hybrid) memory: recorded as absent, no warning line, no unified key
        // (which the v1 driver would refuse).
        let mut s = with_memory(Some(1 << 30), &[]);
        let d = run(&mut s, &cfg, &facts());
        assert!(s.linux().resources.as_ref().unwrap().unified.is_none());
        let c = d
            .changes
            .iter()
            .find(|c| c.field == "linux.resources.unified.memory.high")
            .unwrap();
        assert_eq!(c.action, "absent");
        assert!(c.detail.contains("cgroup v1"), "{}", c.detail);
    }

    #[test]
    fn rootfs_annotations_only_move_toward_readonly_and_size_only_down() {
        let run = |cfg: &Config, ann: &[(&str, &str)]| {
            let mut s = podman_like();
            s.root.as_mut().unwrap().readonly = false;
            for (k, v) in ann {
                s.annotations.insert(k.to_string(), v.to_string());
            }
            let d = apply(&mut s, cfg, "c1", &HostFacts::default(), &facts()).unwrap();
            let ignored = d.changes.iter().filter(|c| c.action == "ignored").count();
            (d, ignored)
        };
        let writable = Config::default();
        let eph = Config {
            ephemeral_rootfs: true,
            rootfs_size: 1 << 30,
            ..Config::default()
        };
        let ro = Config {
            readonly_rootfs: true,
            ..Config::default()
        };
        let (d, n) = run(&writable, &[("moat.rootfs", "ephemeral")]);
        assert_eq!((d.rootfs, n), ("ephemeral", 0));
        assert_eq!(d.bounded_root.unwrap().size, config::ROOTFS_SIZE);
        let (d, n) = run(&eph, &[("moat.rootfs", "writable")]);
        assert_eq!((d.rootfs, n), ("ephemeral", 1));
        let (d, n) = run(&ro, &[("moat.rootfs", "ephemeral")]);
        assert_eq!((d.rootfs, n, d.readonly_rootfs), ("readonly", 1, true));
        assert!(d.bounded_root.is_none());
        let (d, n) = run(&eph, &[("moat.rootfs", "readonly")]);
        assert_eq!((d.rootfs, n), ("readonly", 0));
        let (d, n) = run(&eph, &[("moat.rootfs.size", "64m")]);
        assert_eq!((d.bounded_root.unwrap().size, n), (64 << 20, 0));
        let (d, n) = run(&eph, &[("moat.rootfs.size", "2g")]);
        assert_eq!((d.bounded_root.unwrap().size, n), (1 << 30, 1));
        let mut s = podman_like();
        s.annotations
            .insert("moat.rootfs.size".into(), "lots".into());
        assert!(apply(&mut s, &eph, "c1", &HostFacts::default(), &facts()).is_err());
        // A read-only spec root needs no bounded layer.
        let mut s = podman_like();
        s.root.as_mut().unwrap().readonly = true;
        let d = apply(&mut s, &eph, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d.bounded_root.is_none() && d.rootfs == "ephemeral");
    }

    #[test]
    fn ephemeral_root_must_fit_below_the_memory_limit() {
        let cfg = Config {
            ephemeral_rootfs: true,
            rootfs_size: 512 << 20,
            ..Config::default()
        };
        let mut s = with_memory(Some(512 << 20), &[]);
        s.root.as_mut().unwrap().readonly = false;
        let e = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "moat.rootfs=ephemeral: the root's 536870912 bytes plus tmp_size 67108864 do not \
             fit below linux.resources.memory.limit 536870912 (the root's tmpfs is charged to \
             the container's memory cgroup: it would be OOM-killed before it saw ENOSPC); \
             lower [restricted] rootfs_size or moat.rootfs.size, or raise the memory limit"
        );
        let mut s = with_memory(Some(1 << 30), &[]);
        s.root.as_mut().unwrap().readonly = false;
        assert!(apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).is_ok());
    }

    fn dev_opts(s: &Spec) -> Vec<String> {
        s.mounts
            .iter()
            .find(|m| m.destination == "/dev")
            .unwrap()
            .options
            .clone()
    }

    #[test]
    fn every_tmpfs_gets_an_inode_cap_an_engine_cap_is_kept() {
        let mut s = podman_like();
        s.annotations
            .insert("moat.rootfs".into(), "readonly".into());
        let cfg = Config {
            tmp_inodes: 777,
            ..Config::default()
        };
        apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(dev_opts(&s).contains(&"nr_inodes=16384".to_string()));
        for dest in ["/tmp", "/workspace"] {
            let m = s.mounts.iter().find(|m| m.destination == dest).unwrap();
            assert!(m.options.contains(&"nr_inodes=777".to_string()), "{m:?}");
        }
        let mut s = podman_like();
        let dev = s
            .mounts
            .iter_mut()
            .find(|m| m.destination == "/dev")
            .unwrap();
        dev.options.push("nr_inodes=99".into());
        apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        let o = dev_opts(&s);
        assert!(
            o.contains(&"nr_inodes=99".to_string()) && o.len() == 5,
            "{o:?}"
        );
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        let mut s = podman_like();
        apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(!dev_opts(&s).iter().any(|o| o.starts_with("nr_inodes")));
    }

    #[test]
    fn userns_auto_adds_a_namespace_and_keeps_engine_maps() {
        let mut s = podman_like();
        s.annotations.insert("moat.userns".into(), "auto".into());
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(d.userns_pool && d.userns == "auto");
        assert!(s.linux().namespaces.iter().any(|n| n.typ == "user"));
        let mut s = podman_like();
        s.annotations.insert("moat.userns".into(), "auto".into());
        s.linux.as_mut().unwrap().uid_mappings = vec![spec::IdMapping {
            container_id: 0,
            host_id: 5000,
            size: 10,
        }];
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(!d.userns_pool && d.userns == "auto");
        let mut s = podman_like();
        s.annotations.insert("moat.userns".into(), "yes".into());
        assert!(apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts()
        )
        .is_err());
        // Config default auto: the annotation cannot turn it off.
        let cfg = Config {
            userns_auto: true,
            ..Config::default()
        };
        let mut s = podman_like();
        let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d.userns_pool);
        let mut s = podman_like();
        s.annotations.insert("moat.userns".into(), "engine".into());
        let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert!(d.userns_pool && d.userns == "auto");
    }

    fn apparmor_host(loaded: &[&str]) -> HostFacts {
        HostFacts {
            apparmor: true,
            apparmor_attr_dir: true,
            apparmor_profiles: Some(loaded.iter().map(|s| s.to_string()).collect()),
            selinux: false,
            apparmor_may_load: true,
            moat_profile_loaded: loaded.contains(&"moat-default"),
        }
    }

    /// Rootless on an AppArmor host (rootless podman on Debian or Ubuntu): moat may not
    /// load its profile, so it uses it only where root has loaded it, and says when not.
    #[test]
    fn rootless_apparmor_uses_moat_default_only_where_loaded() {
        let cfg = Config::default();
        let rootless = |loaded: &[&str]| HostFacts {
            apparmor_may_load: false,
            moat_profile_loaded: loaded.contains(&"moat-default"),
            ..apparmor_host(loaded)
        };
        let mut s = with_profile(None);
        let d = apply(&mut s, &cfg, "c1", &rootless(&[]), &facts()).unwrap();
        assert_eq!(s.process().apparmor_profile, None);
        let c = d
            .changes
            .iter()
            .find(|c| c.field == "process.apparmorProfile")
            .unwrap();
        assert_eq!(
            (c.action, c.detail.as_str()),
            ("not applied", "moat-default")
        );
        let mut s = with_profile(None);
        apply(&mut s, &cfg, "c1", &rootless(&["moat-default"]), &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
        // An unlisted profile would become moat-default: refused, not run as it asked.
        let mut s = with_profile(Some("unconfined"));
        let e = apply(&mut s, &cfg, "c1", &rootless(&[]), &facts()).unwrap_err();
        assert!(matches!(e, PolicyError::AppArmorUnavailable(_)), "{e}");
        // Rootful: moat loads its own profile, as before.
        let mut s = with_profile(None);
        apply(&mut s, &cfg, "c1", &apparmor_host(&[]), &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
    }

    fn with_profile(p: Option<&str>) -> Spec {
        let mut s = podman_like();
        s.process.as_mut().unwrap().apparmor_profile = p.map(str::to_string);
        s
    }

    fn profile_change(d: &Decision) -> Option<&Change> {
        d.changes
            .iter()
            .find(|c| c.field == "process.apparmorProfile")
    }

    #[test]
    fn apparmor_unconfined_is_replaced_and_reported() {
        let host = apparmor_host(&["docker-default"]);
        for asked in ["unconfined", "my-loose-profile", "docker-default-ish"] {
            let mut s = with_profile(Some(asked));
            let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
            assert_eq!(
                s.process().apparmor_profile.as_deref(),
                Some("moat-default")
            );
            let c = profile_change(&d).expect("reported");
            assert_eq!(c.action, "replaced");
            assert_eq!(c.detail, format!("{asked} → moat-default"));
            assert_eq!(c.reason, "not in restricted.apparmor_profiles");
        }
        // None named: moat-default set, as before.
        let mut s = with_profile(None);
        let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
        assert_eq!(profile_change(&d).unwrap().action, "set");
    }

    #[test]
    fn apparmor_listed_profiles_are_kept() {
        let host = apparmor_host(&["docker-default", "containers-default-0.50.1"]);
        for kept in [
            "docker-default",
            "containers-default-0.50.1",
            "moat-default",
        ] {
            let mut s = with_profile(Some(kept));
            let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
            assert_eq!(s.process().apparmor_profile.as_deref(), Some(kept));
            assert!(profile_change(&d).is_none(), "{kept}: {:?}", d.changes);
        }
        // The glob is a prefix match only.
        let cfg = Config {
            apparmor_profiles: vec!["team-*".into()],
            ..Config::default()
        };
        let host = apparmor_host(&["team-web", "other-team-x"]);
        let mut s = with_profile(Some("team-web"));
        apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
        assert_eq!(s.process().apparmor_profile.as_deref(), Some("team-web"));
        let mut s = with_profile(Some("other-team-x"));
        apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
        // No longer on the list: replaced.
        let mut s = with_profile(Some("docker-default"));
        apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
    }

    #[test]
    fn apparmor_listed_but_not_loaded_is_an_error() {
        let host = apparmor_host(&["moat-default"]);
        let mut s = with_profile(Some("docker-default"));
        let e = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("process.apparmorProfile: profile \"docker-default\" is not loaded"),
            "{e}"
        );
        // moat-default is loaded by create itself; an unreadable list leaves it to the kernel.
        let mut s = with_profile(Some("moat-default"));
        assert!(apply(
            &mut s,
            &Config::default(),
            "c1",
            &apparmor_host(&[]),
            &facts()
        )
        .is_ok());
        let unknown = HostFacts {
            apparmor_profiles: None,
            ..apparmor_host(&[])
        };
        let mut s = with_profile(Some("docker-default"));
        assert!(apply(&mut s, &Config::default(), "c1", &unknown, &facts()).is_ok());
    }

    #[test]
    fn apparmor_without_apparmor_or_under_open() {
        // A host without AppArmor: the spec's profile stays and is ignored at create.
        let mut s = with_profile(Some("unconfined"));
        let d = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert_eq!(s.process().apparmor_profile.as_deref(), Some("unconfined"));
        assert!(profile_change(&d).is_none());
        // OPEN runs the spec as written.
        let cfg = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        let mut s = with_profile(Some("unconfined"));
        apply(&mut s, &cfg, "c1", &apparmor_host(&[]), &facts()).unwrap();
        assert_eq!(s.process().apparmor_profile.as_deref(), Some("unconfined"));
    }

    #[test]
    fn selinux_types() {
        let host = HostFacts {
            selinux: true,
            ..HostFacts::default()
        };
        let label = |s: &Spec| s.process().selinux_label.clone();
        let mut s = podman_like();
        s.process.as_mut().unwrap().selinux_label = Some("system_u:system_r:spc_t:s0:c1,c2".into());
        let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
        assert_eq!(
            label(&s).as_deref(),
            Some("system_u:system_r:container_t:s0:c1,c2")
        );
        let c = d
            .changes
            .iter()
            .find(|c| c.field == "process.selinuxLabel")
            .unwrap();
        assert_eq!(c.action, "replaced");
        let mut s = podman_like();
        s.process.as_mut().unwrap().selinux_label =
            Some("system_u:system_r:container_t:s0:c5".into());
        apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
        assert_eq!(
            label(&s).as_deref(),
            Some("system_u:system_r:container_t:s0:c5")
        );
        let cfg = Config {
            selinux_types: vec!["container_t".into(), "svirt_*".into()],
            ..Config::default()
        };
        let mut s = podman_like();
        s.process.as_mut().unwrap().selinux_label = Some("u:r:svirt_lxc_net_t:s0".into());
        apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
        assert_eq!(label(&s).as_deref(), Some("u:r:svirt_lxc_net_t:s0"));
        let mut s = podman_like();
        s.process.as_mut().unwrap().selinux_label = Some("garbage".into());
        assert!(apply(&mut s, &cfg, "c1", &host, &facts())
            .unwrap_err()
            .to_string()
            .contains("not a user:role:type"));
        // No SELinux on the host: untouched.
        let mut s = podman_like();
        s.process.as_mut().unwrap().selinux_label = Some("u:r:spc_t:s0".into());
        apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(label(&s).as_deref(), Some("u:r:spc_t:s0"));
    }

    #[test]
    fn exec_gets_the_init_profile_instead_of_an_unlisted_one() {
        let host = apparmor_host(&["docker-default"]);
        let init = spec::Process {
            apparmor_profile: Some("moat-default".into()),
            ..Default::default()
        };
        let mut p = spec::Process {
            apparmor_profile: Some("unconfined".into()),
            ..Default::default()
        };
        let r = restrict_exec_lsm(&mut p, &init, &Config::default(), &host).unwrap();
        assert_eq!(r, ["apparmorProfile unconfined"]);
        assert_eq!(p.apparmor_profile.as_deref(), Some("moat-default"));
        let mut p = spec::Process {
            apparmor_profile: Some("docker-default".into()),
            ..Default::default()
        };
        assert!(restrict_exec_lsm(&mut p, &init, &Config::default(), &host)
            .unwrap()
            .is_empty());
        assert_eq!(p.apparmor_profile.as_deref(), Some("docker-default"));
        let mut p = spec::Process {
            apparmor_profile: Some("containers-default-1".into()),
            ..Default::default()
        };
        assert!(restrict_exec_lsm(&mut p, &init, &Config::default(), &host).is_err());
    }

    /// Everything `apply` does to a spec, and says it did, as one value.
    fn outcome(
        spec: &Spec,
        cfg: &Config,
        host: &HostFacts,
        floor: &FloorFacts,
    ) -> (serde_json::Value, serde_json::Value) {
        let mut s = spec.clone();
        let d = apply(&mut s, cfg, "c1", host, floor).unwrap();
        (
            serde_json::to_value(&s).unwrap(),
            serde_json::to_value(&d).unwrap(),
        )
    }

    #[test]
    fn apply_is_a_function_of_its_arguments() {
        let spec = podman_like();
        let cfg = Config::default();
        let aa = HostFacts {
            apparmor: true,
            apparmor_profiles: Some(vec!["moat-default".into()]),
            moat_profile_loaded: true,
            ..Default::default()
        };
        let first = outcome(&spec, &cfg, &aa, &facts());
        // The same arguments give the same spec and decision, whatever the process's
        // environment holds: the test switch is the caller's (`container::policy`), and
        // the host is read only through the facts passed in.
        std::env::set_var("MOAT_TEST_SKIP_POLICY", "1");
        let again = outcome(&spec, &cfg, &aa, &facts());
        std::env::remove_var("MOAT_TEST_SKIP_POLICY");
        assert_eq!(first, again);
        assert_eq!(first.0["process"]["apparmorProfile"], "moat-default");
        assert_eq!(first.1["policy"], "restricted");
        // Other facts, another result, and only where the facts differ.
        let plain = outcome(&spec, &cfg, &HostFacts::default(), &facts());
        assert!(plain.0["process"].get("apparmorProfile").is_none());
        let mut without_lsm = first.0.clone();
        without_lsm["process"]
            .as_object_mut()
            .unwrap()
            .remove("apparmorProfile");
        assert_eq!(without_lsm, plain.0);
        // And another config, another result.
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        assert_eq!(outcome(&spec, &open, &aa, &facts()).1["policy"], "open");
    }

    #[test]
    fn unenforced_records_restricted_and_changes_no_floor() {
        let spec = podman_like();
        let mut s = spec.clone();
        let d = apply_unenforced(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert_eq!(d.policy, "restricted");
        assert!(!d.enforced && d.changes.is_empty());
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            serde_json::to_value(&spec).unwrap()
        );
        assert!(refused_host_namespaces(&d, &Config::default(), &facts()).is_empty());
        let d = apply(
            &mut spec.clone(),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert!(d.enforced);
        assert!(!refused_host_namespaces(&d, &Config::default(), &facts()).is_empty());
    }

    #[test]
    fn builtin_profiles_parse() {
        // Both are also compiled by `linux::seccomp`'s tests.
        for p in [RESTRICTED_PROFILE, FLOOR_PROFILE] {
            let s: spec::Seccomp = serde_json::from_str(p).unwrap();
            assert!(!s.syscalls.is_empty());
        }
    }
}
