//! `/etc/moat/config.toml` (or the file `MOAT_CONFIG` names).
//!
//! The file is TOML, read by the `toml` crate into the serde types of `config/file.rs`
//! (one struct per table, unknown keys refused), so that every error is one line naming
//! the file, the line, the key and what is wrong, and nothing unknown is silently
//! accepted: an unknown key, a wrong type or a malformed line makes moat refuse to run
//! (fail closed).
//!
//! ```toml
//! default_policy = "restricted"   # or "open"
//!
//! [restricted]
//! allowed_capabilities = []       # kept when the engine asks for them
//! accept_voided = []              # of those, ones kept although they void a promise (moat policy table)
//! allowed_devices = []            # character devices kept beyond the built-in list: "c 195:*"
//! host_namespaces = []            # host namespaces allowed: "pid", "network", "ipc", "uts"
//! net_devices = []                # host interfaces linux.netDevices may move: "veth-ci0", "veth-*"
//! rootfs = "writable"             # default of moat.rootfs: "writable", "ephemeral", "readonly"
//!                                 # (readonly_rootfs = true|false: the older spelling)
//! rootfs_size = "512m"            # bytes of data and inodes of an ephemeral root's writes
//! rootfs_inodes = 262144          # also KiB of inode space beside the data (files, xattrs)
//! network = "engine"              # default of moat.network: "engine" or "none"
//! workspace = "/workspace"        # writable under a read-only root
//! tmp_size = "64m"                # size of the private /tmp under a read-only root
//! tmp_inodes = 65536              # inodes (files) of each of those tmpfs (nr_inodes), and
//!                                 # KiB of inode space beside tmp_size (files, xattrs)
//! memory = "2g"                   # limits applied where the engine set none
//! memory_high = 0.9               # memory.high at this share of the memory limit (0: off)
//! pids = 4096
//! cpus = "2"
//! apparmor_profiles = ["moat-default", "docker-default", "containers-default-*", "cri-containerd.apparmor.d"]
//! selinux_types = ["container_t"]  # the type field of process.selinuxLabel
//!
//! [fleet]                         # one parent cgroup capping all containers moat places
//! cgroup = "/moat"
//! memory = "16g"
//! pids = 32768
//! cpus = "2"
//! rootfs_budget = "8g"            # the bounded roots' caps, summed over the host's live containers
//! force_nesting = false           # also nest engine-placed (absolute) cgroups under it
//!
//! [gvisor]
//! runtime = "native"              # default runtime: "native" or "gvisor"
//! runsc_path = "/usr/bin/runsc"
//! platform = "systrap"            # runsc --platform: one `runsc help platforms` lists; default: runsc's own
//!
//! [userns]
//! default = "engine"              # default of moat.userns: "engine" or "auto"
//! pool = "2147483648:1073741824"  # START:SIZE of the host ids moat.userns=auto maps to
//! size = 65536                    # ids per container (container 0..size-1)
//!
//! [runtime]
//! sync_timeout = 60               # seconds create waits for each answer of the init
//!
//! [egress]                        # where a RESTRICTED container may connect and send
//! allow = []                      # default list (moat.egress narrows it); [] = anywhere
//! deny_metadata = true            # refuse the cloud metadata endpoints, whatever allow says
//! metadata = ["169.254.169.254", "fd00:ec2::254", "169.254.170.2", "100.100.100.200"]
//! # resolvers = ["10.0.0.2"]       # the forwarder's upstreams; unset: the engine's resolv.conf
//! forwarder_names = 1024          # names whose answers the DNS forwarder holds at once
//! forwarder_answers = 8           # addresses held per name (names * answers <= 12288)
//! forwarder_memory = "64m"        # the forwarder's cgroup (a sibling of the container's): memory
//! forwarder_pids = 80             # … and tasks (its threads: 64 clients at most, and its own)
//! allow_raw_sockets = false       # CAP_NET_RAW kept: every packet judged, packet sockets refused
//!
//! [alias.moat-open]               # when invoked as moat-open (a symlink to moat)
//! default_policy = "open"
//! [alias.moat-open.restricted]    # [alias.NAME.TABLE]: keys of [TABLE]
//! network = "none"
//! ```
//!
//! Annotations only tighten. The operator's one way to loosen for some containers is the
//! name moat is invoked by: an engine's runtime entry points at a symlink to moat, and
//! `[alias.<basename of argv[0]>]` (and its `[alias.<name>.<table>]` subtables) replaces the
//! top-level keys it sets, key by key (an array replaces the whole array). Host-wide
//! settings (`[fleet]`, `userns.pool`, `userns.size`) cannot be set per alias. Every alias
//! table is checked whichever name moat runs as, so a typo fails every call.

use std::path::{Path, PathBuf};

mod file;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}:{line}: {reason}")]
    Syntax {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The policy a container runs under, as recorded (`policy.json`, `state.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Restricted,
    Open,
}

impl Mode {
    pub const ALL: [Mode; 2] = [Mode::Restricted, Mode::Open];

    /// The name a record, the config and `moat.policy` use (serde's as well).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Restricted => "restricted",
            Mode::Open => "open",
        }
    }

    /// The policy `name` names ([`Mode::as_str`]), if any.
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub source: Option<PathBuf>,
    pub default_policy: Mode,
    /// The `[alias.NAME]` that applied (the basename of argv[0]), if the config has one.
    pub alias: Option<String>,
    /// `[restricted] host_namespaces`: the types (pid, network, ipc, uts) a RESTRICTED
    /// container may share with the host.
    pub host_namespaces: Vec<String>,
    pub allowed_capabilities: Vec<String>,
    /// `[restricted] accept_voided`: capabilities of `allowed_capabilities` the operator
    /// keeps although they void a promise RESTRICTED makes (`policy::CAPABILITIES`); any
    /// other such capability a container would keep is refused at create.
    pub accept_voided: Vec<String>,
    /// `[restricted] allowed_devices`: character devices (by number) a RESTRICTED
    /// container keeps when its spec lists them, beyond the built-in allow-list
    /// (`policy::devices`).
    pub allowed_devices: Vec<super::devices::AllowedDevice>,
    /// `[restricted] net_devices`: the host interfaces (exact names, or prefixes ending in
    /// `*`) a RESTRICTED container's `linux.netDevices` may move into its network
    /// namespace; none by default.
    pub net_devices: Vec<String>,
    pub readonly_rootfs: bool,
    /// `[restricted] rootfs = "ephemeral"`: the default root is writable, bounded, and
    /// throw-away (see `policy::ephemeral_rootfs`). With both `rootfs` and the older
    /// `readonly_rootfs` set, the stricter applies (`policy::Rootfs::of`).
    pub ephemeral_rootfs: bool,
    /// `[restricted] rootfs = "readonly"`.
    pub rootfs_readonly: bool,
    /// `[restricted] rootfs_size`, `rootfs_inodes`: the caps of an ephemeral root: bytes of
    /// data, and inodes, which also give the tmpfs `rootfs_inodes` KiB of inode space for
    /// its files and their xattrs beside the data (`policy::BoundedRoot::cap`).
    pub rootfs_size: u64,
    pub rootfs_inodes: u64,
    pub network_none: bool,
    pub workspace: String,
    pub tmp_size: String,
    /// `[restricted] tmp_inodes`: `nr_inodes` of the `/tmp` and workspace tmpfs under a
    /// read-only root (a tmpfs's default is half the host's RAM pages: no cap at all).
    pub tmp_inodes: u64,
    pub memory: Option<i64>,
    /// `[restricted] memory_high`: where a RESTRICTED container has a memory limit, the
    /// kernel throttles and reclaims from this share of it (cgroup v2 `memory.high`), so
    /// the sandbox slows down, and shows pressure, before it is OOM-killed. 0: off.
    pub memory_high: f64,
    pub pids: Option<i64>,
    pub cpus: Option<f64>,
    pub fleet_cgroup: String,
    pub fleet_memory: Option<i64>,
    pub fleet_pids: Option<i64>,
    pub fleet_cpus: Option<f64>,
    /// `[fleet] rootfs_budget`: the bytes the bounded roots of all live containers on the
    /// host may take together, each its data and its inode space (`state::budget`);
    /// `None`: no budget.
    pub rootfs_budget: Option<u64>,
    pub force_nesting: bool,
    pub runtime_gvisor: bool,
    pub runsc_path: Option<String>,
    /// `[gvisor] platform`: runsc's `--platform`; `None`: runsc's own default. Checked
    /// against what the runsc found lists at create (`gvisor::probe`).
    pub platform: Option<String>,
    /// `[userns] default = "auto"`: containers get a range from the pool by default.
    pub userns_auto: bool,
    /// The host-wide pool `moat.userns=auto` allocates from (`[userns] pool`).
    pub userns_pool: (u32, u32),
    /// Ids per container (`[userns] size`).
    pub userns_size: u32,
    /// `[runtime] sync_timeout`: how long create waits for each answer of the init (a
    /// child stuck in D state, a frozen cgroup, a hook inside that never returns), and
    /// start for the init's execve (plus its startContainer hooks' timeouts), in
    /// seconds. Generous: TCG and 50-way load are slow.
    pub sync_timeout: u32,
    /// `[restricted] apparmor_profiles`: the AppArmor profiles a RESTRICTED container
    /// may run under (a trailing `*` matches any suffix); any other is replaced.
    pub apparmor_profiles: Vec<String>,
    /// `[restricted] selinux_types`: the SELinux types a RESTRICTED container's label may
    /// carry (a trailing `*` matches any suffix); any other type is replaced.
    pub selinux_types: Vec<String>,
    /// `[alias.NAME] default_policy = "audit"`: run as OPEN, report what RESTRICTED would
    /// have cut (`default_policy` is `Open` then). An alias setting only.
    pub audit: bool,
    /// `[log] warn_stderr`: the policy's summary line on stderr always, not only on a terminal
    /// without `--log`.
    pub warn_stderr: bool,
    /// `[egress] allow`: the default list of a RESTRICTED container (`None`: every
    /// destination); `moat.egress` may only narrow it.
    pub egress_allow: Option<super::egress::List>,
    /// `[egress] deny_metadata`: refuse `egress_metadata` under RESTRICTED, with or
    /// without a list, whatever `allow` says.
    pub egress_deny_metadata: bool,
    /// `[egress] metadata`: exact addresses (default [`super::egress::METADATA`]).
    pub egress_metadata: Vec<std::net::IpAddr>,
    /// `[egress] resolvers`: where the forwarder sends queries, and the resolvers DNS
    /// stays open to at a metadata address; `None`: the engine's resolv.conf.
    pub egress_resolvers: Option<Vec<std::net::SocketAddr>>,
    /// `[egress] forwarder_names`, `forwarder_answers`, `forwarder_memory`,
    /// `forwarder_pids`: the DNS forwarder's bounds.
    pub egress_forwarder: super::egress::ForwarderLimits,
    /// `[egress] allow_raw_sockets`: under RESTRICTED with an egress policy in force,
    /// `CAP_NET_RAW` (when `[restricted] allowed_capabilities` keeps it) no longer voids
    /// the policy: every packet is judged and packet sockets are refused instead.
    pub egress_allow_raw_sockets: bool,
}

/// The default of `[restricted] apparmor_profiles`: moat's own profile and the engines'.
pub const APPARMOR_PROFILES: [&str; 4] = [
    "moat-default",
    "docker-default",
    "containers-default-*",
    "cri-containerd.apparmor.d",
];
/// The default of `[restricted] selinux_types`.
pub const SELINUX_TYPES: [&str; 1] = ["container_t"];

/// Why a list of LSM names is refused (the key and line are added by the caller).
#[derive(Debug, thiserror::Error)]
enum LsmListError {
    #[error("{0:?}: expected a name, optionally ending in one `*`")]
    NotAName(String),
    #[error("{0:?} would let a container run unconfined; use the OPEN policy for that")]
    Unconfined(String),
    #[error("needs at least one type without `*` (the one a label is given instead)")]
    NoPlainType,
}

/// A list of LSM names from the config: non-empty, `*` only as the last character, and
/// for AppArmor never `unconfined` (which names no confinement at all).
fn lsm_list(l: &[String], apparmor: bool) -> Result<Vec<String>, LsmListError> {
    for p in l {
        if p.is_empty() || p.trim_end_matches('*').contains('*') || p.contains(char::is_whitespace)
        {
            return Err(LsmListError::NotAName(p.clone()));
        }
        if p == "*" || (apparmor && p == "unconfined") {
            return Err(LsmListError::Unconfined(p.clone()));
        }
    }
    if !apparmor && !l.iter().any(|t| !t.ends_with('*')) {
        return Err(LsmListError::NoPlainType);
    }
    Ok(l.to_vec())
}

/// The defaults of `[restricted] rootfs_size` and `rootfs_inodes`.
pub const ROOTFS_SIZE: u64 = 512 << 20;
pub const ROOTFS_INODES: u64 = 262144;

/// The default of `[restricted] tmp_inodes`: 1 KiB a file on average in the default
/// 64 MiB `/tmp`.
pub const TMP_INODES: u64 = 65536;
/// `nr_inodes` of the engine's `/dev` tmpfs under RESTRICTED (when the engine sets none):
/// device nodes, pty links and sockets, with room to spare.
pub const DEV_INODES: u64 = 16384;

/// Above the ids of ordinary users and of systemd's container ranges, below 2^32 - 1.
pub const USERNS_POOL: (u32, u32) = (1 << 31, 1 << 30);
pub const USERNS_SIZE: u32 = 65536;

/// `START:SIZE`, never reaching host id 0 or the ordinary user range, nor the invalid
/// id 2^32 - 1.
pub fn parse_pool(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    let start: u32 = a.trim().replace('_', "").parse().ok()?;
    let size: u32 = b.trim().replace('_', "").parse().ok()?;
    (start >= 65536 && size > 0 && start as u64 + size as u64 <= u32::MAX as u64)
        .then_some((start, size))
}

impl Default for Config {
    /// No file: RESTRICTED, nothing allowed, a pids cap, no other limits imposed.
    fn default() -> Self {
        Config {
            source: None,
            default_policy: Mode::Restricted,
            alias: None,
            host_namespaces: Vec::new(),
            allowed_capabilities: Vec::new(),
            accept_voided: Vec::new(),
            allowed_devices: Vec::new(),
            net_devices: Vec::new(),
            readonly_rootfs: false,
            ephemeral_rootfs: false,
            rootfs_readonly: false,
            rootfs_size: ROOTFS_SIZE,
            rootfs_inodes: ROOTFS_INODES,
            network_none: false,
            workspace: "/workspace".into(),
            tmp_size: "64m".into(),
            tmp_inodes: TMP_INODES,
            memory: None,
            memory_high: 0.9,
            pids: Some(4096),
            cpus: None,
            fleet_cgroup: "/moat".into(),
            fleet_memory: None,
            fleet_pids: None,
            fleet_cpus: None,
            rootfs_budget: None,
            force_nesting: false,
            runtime_gvisor: false,
            runsc_path: None,
            platform: None,
            userns_auto: false,
            userns_pool: USERNS_POOL,
            userns_size: USERNS_SIZE,
            sync_timeout: 60,
            apparmor_profiles: APPARMOR_PROFILES.iter().map(|s| s.to_string()).collect(),
            selinux_types: SELINUX_TYPES.iter().map(|s| s.to_string()).collect(),
            audit: false,
            warn_stderr: false,
            egress_allow: None,
            egress_deny_metadata: true,
            egress_metadata: super::egress::METADATA
                .iter()
                .map(|a| a.parse().expect("the default metadata addresses parse"))
                .collect(),
            egress_resolvers: None,
            egress_forwarder: super::egress::ForwarderLimits::default(),
            egress_allow_raw_sockets: false,
        }
    }
}

/// `512`, `64k`, `100m`, `2g` → bytes.
pub fn parse_size(s: &str) -> Option<i64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        (i, 't' | 'T') => (&s[..i], 1i64 << 40),
        _ => (s, 1),
    };
    num.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0)?
        .checked_mul(mult)
}

/// The name moat was invoked by: the basename of argv[0] (exeseal's re-exec keeps argv).
pub fn invoked_name() -> Option<String> {
    crate::linux::sys::args()
        .into_iter()
        .next()
        .and_then(|a| {
            Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
        .filter(|n| !n.is_empty())
}

/// The namespace types `[restricted] host_namespaces` may name (spec type names).
pub const HOST_NAMESPACE_TYPES: [&str; 4] = ["pid", "network", "ipc", "uts"];

/// How to loosen now that annotations cannot: said by every error about a removed key.
const ALIAS_HINT: &str = "the operator loosens through the name moat is invoked by: \
     an engine runtime pointing at a symlink moat-open -> moat, and [alias.moat-open] \
     default_policy = \"open\" in the config (docs/configuration.md)";

impl Config {
    /// The config in effect, read once per process (create reads it to choose the backend,
    /// then to plan): later calls get a copy of the first successful read.
    pub fn load() -> Result<Config, ConfigError> {
        static LOADED: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
        if let Some(c) = LOADED.get() {
            return Ok(c.clone());
        }
        let c = Self::read()?;
        Ok(LOADED.get_or_init(|| c).clone())
    }

    /// Reads `MOAT_CONFIG` or `/etc/moat/config.toml`; a missing default file means the
    /// built-in defaults (RESTRICTED), a missing `MOAT_CONFIG` file is an error. The
    /// `[alias.NAME]` of the name moat was invoked by applies.
    fn read() -> Result<Config, ConfigError> {
        let (path, explicit) = match std::env::var_os("MOAT_CONFIG").filter(|v| !v.is_empty()) {
            Some(p) => (PathBuf::from(p), true),
            None => (PathBuf::from("/etc/moat/config.toml"), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::from_str_as(&text, &path, invoked_name().as_deref()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(source) => Err(ConfigError::Read { path, source }),
        }
    }

    /// The config as seen without an alias (as the plain name `moat`).
    #[cfg(test)]
    pub fn from_str(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::from_str_as(text, path, None)
    }

    /// The config as seen by a moat invoked as `name`: the top-level keys, then those of
    /// `[alias.<name>]` and its subtables over them.
    /// The config as seen by a moat invoked as `name`: the top-level keys, then those of
    /// `[alias.<name>]` and its subtables over them. Every alias table is read (and so
    /// checked) whatever the name.
    pub fn from_str_as(text: &str, path: &Path, name: Option<&str>) -> Result<Config, ConfigError> {
        let syntax = |line: usize, reason: String| ConfigError::Syntax {
            path: path.to_path_buf(),
            line,
            reason,
        };
        let de = toml::Deserializer::parse(text)
            .map_err(|e| syntax(line_of(text, e.span()), toml_reason(text, &e, "")))?;
        let f: file::File = serde_path_to_error::deserialize(de).map_err(|e| {
            // `Spanned` is read through a private inner key: not the user's.
            let key = e.path().to_string();
            let key = key
                .split('.')
                .filter(|k| *k != "." && !k.starts_with("$__serde_spanned"))
                .collect::<Vec<_>>()
                .join(".");
            syntax(
                line_of(text, e.inner().span()),
                toml_reason(text, e.inner(), &key),
            )
        })?;
        if let Some(p) = f
            .default_policy
            .as_ref()
            .filter(|p| *p.get_ref() == file::Policy::Audit)
        {
            return Err(syntax(
                line_of(text, Some(p.span())),
                "default_policy: \"audit\" is set per alias ([alias.NAME] default_policy = \
                 \"audit\"), so that the plain runtime keeps enforcing"
                    .into(),
            ));
        }
        let mut c = Config {
            source: Some(path.to_path_buf()),
            ..Config::default()
        };
        f.apply(&mut c);
        if let Err(reason) = c.egress_forwarder.check() {
            let at = text
                .lines()
                .position(|l| l.trim_start().starts_with("forwarder_"))
                .map_or(0, |i| i + 1);
            return Err(syntax(at, format!("[egress] {reason}")));
        }
        if c.userns_size > c.userns_pool.1 {
            let span = f.userns.as_ref().and_then(|u| {
                u.size
                    .as_ref()
                    .map(|s| s.span())
                    .or(u.pool.as_ref().map(|p| p.span()))
            });
            return Err(syntax(
                line_of(text, span),
                format!(
                    "userns.size: {} ids per container do not fit in the pool of {}",
                    c.userns_size, c.userns_pool.1
                ),
            ));
        }
        if let Some((alias, a)) = name.and_then(|n| f.alias.iter().find(|(k, _)| k.0 == n)) {
            a.apply(&mut c);
            c.alias = Some(alias.0.clone());
        }
        Ok(c)
    }
}

/// The line (from 1) a span of the file starts on; 0 when the error has no span.
fn line_of(text: &str, span: Option<std::ops::Range<usize>>) -> usize {
    span.map_or(0, |s| {
        text.as_bytes()[..s.start.min(text.len())]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1
    })
}

/// One line: the key path (when there is one) and what is wrong, in serde's words
/// ("unknown setting" for serde's "unknown field `x`"), with the text at the span for a
/// syntax error that names no key (a duplicate key, a bad token).
fn toml_reason(text: &str, e: &toml::de::Error, key: &str) -> String {
    let msg = e.message().trim().replace('\n', "; ");
    let msg = match msg.strip_prefix("unknown field `") {
        Some(rest) => match rest.split_once("`, ") {
            Some((_, expected)) => format!("unknown setting ({expected})"),
            None => "unknown setting".into(),
        },
        None => msg,
    };
    if !key.is_empty() {
        return format!("{key}: {msg}");
    }
    let at = e
        .span()
        .and_then(|s| text.get(s))
        .filter(|t| !t.is_empty() && t.len() <= 60 && !t.contains('\n'));
    match at {
        Some(t) => format!("{msg}: `{t}`"),
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fleet_rootfs_budget_is_a_host_wide_size() {
        let p = std::path::Path::new("t.toml");
        let c = super::Config::from_str("[fleet]\nrootfs_budget = \"4g\"\n", p).unwrap();
        assert_eq!(c.rootfs_budget, Some(4 << 30));
        assert_eq!(super::Config::from_str("", p).unwrap().rootfs_budget, None);
        let e = super::Config::from_str("[fleet]\nrootfs_budget = \"lots\"\n", p).unwrap_err();
        assert!(e.to_string().contains("fleet.rootfs_budget"), "{e}");
        let e = super::Config::from_str("[alias.moat-open.fleet]\nrootfs_budget = \"1g\"\n", p)
            .unwrap_err();
        assert!(e.to_string().contains("host-wide"), "{e}");
    }

    #[test]
    fn the_documented_config_parses_and_means_what_it_says() {
        let doc = include_str!("../../docs/configuration.md");
        let block = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .expect("docs/configuration.md holds a toml block");
        let c = super::Config::from_str(block, std::path::Path::new("docs/configuration.md"))
            .expect("the documented config parses");
        assert_eq!(c.egress_allow, None);
        assert!(c.egress_deny_metadata);
        assert_eq!(c.egress_metadata.len(), 4);
        assert_eq!(c.egress_resolvers, None);
    }

    #[test]
    fn egress_keys_parse_and_refuse_mistakes() {
        let p = std::path::Path::new("t.toml");
        let c = super::Config::from_str(
            "[egress]\nallow = [\"10.0.0.0/8:443\", \"*.example.com\"]\nresolvers = [\"10.0.0.2\", \"[fd00::1]:5353\"]\ndeny_metadata = false\n",
            p,
        )
        .unwrap();
        assert_eq!(
            c.egress_allow.unwrap().to_string(),
            "10.0.0.0/8:443,*.example.com"
        );
        assert!(!c.egress_deny_metadata);
        assert_eq!(c.egress_resolvers.unwrap().len(), 2);
        assert_eq!(
            c.egress_forwarder,
            crate::policy::egress::ForwarderLimits::default()
        );
        let f =
            super::Config::from_str("[egress]\nforwarder_names = 10\nforwarder_answers = 3\n", p)
                .unwrap();
        assert_eq!(
            (f.egress_forwarder.names, f.egress_forwarder.answers),
            (10, 3)
        );
        let f = super::Config::from_str(
            "[egress]\nforwarder_memory = \"16m\"\nforwarder_pids = 12\n",
            p,
        )
        .unwrap();
        assert_eq!(
            (f.egress_forwarder.memory, f.egress_forwarder.pids),
            (16 << 20, 12)
        );
        let raw = super::Config::from_str("[egress]\nallow_raw_sockets = true\n", p).unwrap();
        assert!(raw.egress_allow_raw_sockets);
        assert!(!super::Config::default().egress_allow_raw_sockets);
        let none = super::Config::from_str("[egress]\nallow = [\"none\"]\n", p).unwrap();
        assert_eq!(none.egress_allow.unwrap().0.len(), 0);
        for (bad, word) in [
            ("[egress]\nallow = [\"10.0.0.1/8\"]\n", "host bits"),
            ("[egress]\nallow = \"10.0.0.0/8\"\n", "expected a sequence"),
            ("[egress]\nmetadata = [\"x\"]\n", "not an IP address"),
            ("[egress]\nresolvers = [\"1.2.3.4:0\"]\n", "IP[:port]"),
            ("[egress]\nbogus = true\n", "unknown setting"),
            ("[egress]\nforwarder_names = 0\n", "at least 1"),
            ("[egress]\nforwarder_answers = 65\n", "at most 64"),
            ("[egress]\nforwarder_names = 100000\n", "at most 12288"),
            ("[egress]\nforwarder_names = -1\n", "forwarder_names"),
            ("[egress]\nforwarder_memory = \"1m\"\n", "at least 8388608"),
            ("[egress]\nforwarder_memory = 0\n", "forwarder_memory"),
            ("[egress]\nforwarder_pids = 1\n", "at least 2"),
            ("[egress]\nforwarder_pids = -3\n", "forwarder_pids"),
        ] {
            let e = super::Config::from_str(bad, p).unwrap_err().to_string();
            assert!(e.contains(word), "{bad}: {e}");
            assert!(e.contains("t.toml:"), "{bad}: {e}");
        }
    }

    use super::*;

    fn cfg(text: &str) -> Result<Config, ConfigError> {
        Config::from_str(text, Path::new("/etc/moat/config.toml"))
    }

    #[test]
    fn full_file() {
        let c = cfg(r#"
# comment
default_policy = "open"   # trailing
[restricted]
allowed_capabilities = ["CAP_NET_BIND_SERVICE", "CAP_CHOWN"]
memory = "512m"
pids = 100
cpus = "1.5"
tmp_inodes = 1000
memory_high = 0.75
rootfs = "ephemeral"
rootfs_size = "256m"
rootfs_inodes = 5000
network = "none"
[fleet]
memory = 1073741824
force_nesting = true
"#)
        .unwrap();
        assert_eq!(c.default_policy, Mode::Open);
        assert!(c.network_none && c.force_nesting);
        assert_eq!(c.allowed_capabilities.len(), 2);
        assert_eq!(c.memory, Some(512 << 20));
        assert_eq!(c.pids, Some(100));
        assert_eq!(c.tmp_inodes, 1000);
        assert_eq!(c.memory_high, 0.75);
        assert!(c.ephemeral_rootfs && !c.readonly_rootfs);
        assert_eq!((c.rootfs_size, c.rootfs_inodes), (256 << 20, 5000));
        let alias = cfg("[restricted]\nrootfs = \"ephemeral\"\nreadonly_rootfs = true\n").unwrap();
        assert!(
            alias.readonly_rootfs && alias.ephemeral_rootfs,
            "the stricter applies"
        );
        assert!(cfg("[restricted]\nrootfs = \"tmpfs\"\n").is_err());
        assert_eq!(
            cfg("[restricted]\nmemory_high = 0\n").unwrap().memory_high,
            0.0
        );
        for bad in ["1.0", "1", "-0.5", "\"0.9\"", "0.9.1"] {
            let e = cfg(&format!("[restricted]\nmemory_high = {bad}\n")).unwrap_err();
            assert!(e.to_string().contains(":2:"), "{bad}: {e}");
        }
        assert_eq!(c.cpus, Some(1.5));
        assert_eq!(c.fleet_memory, Some(1 << 30));
    }

    #[test]
    fn gvisor_platform_is_a_name() {
        assert_eq!(cfg("").unwrap().platform, None);
        for name in ["kvm", "systrap", "ptrace"] {
            assert_eq!(
                cfg(&format!("[gvisor]\nplatform = \"{name}\"\n"))
                    .unwrap()
                    .platform
                    .as_deref(),
                Some(name)
            );
        }
        for bad in ["KVM", "", "--debug", "a b"] {
            let e = cfg(&format!("[gvisor]\nplatform = \"{bad}\"\n")).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.starts_with("/etc/moat/config.toml:2: gvisor.platform: unknown platform"),
                "{msg}"
            );
        }
    }

    #[test]
    fn errors_name_the_line() {
        let e = cfg("pids_x = true\ndefault_policy = \"permissive\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/moat/config.toml:2: default_policy: unknown variant `permissive`, expected \
             one of `restricted`, `open`, `audit`"
        );
        let e = cfg("\n\nbogus = 1\n").unwrap_err();
        assert!(
            e.to_string().starts_with("/etc/moat/config.toml:3: bogus"),
            "{e}"
        );
        let e = cfg("[restricted]\nallowed_capabilities = [\"CAP_FLY\"]\n").unwrap_err();
        assert!(
            e.to_string().contains(":2:") && e.to_string().contains("CAP_FLY"),
            "{e}"
        );
        assert!(cfg("[fleet]\nforce_nesting = yes\n").is_err());
        assert!(cfg("default_policy\n").is_err());
        assert!(cfg("default_policy = \"open\"\ndefault_policy = \"open\"\n").is_err());
    }

    #[test]
    fn allow_open_is_gone_and_the_error_names_alias() {
        for text in [
            "allow_open = true\n",
            "allow_open = false\n",
            "[alias.moat-open]\nallow_open = true\n",
        ] {
            let e = cfg(text).unwrap_err().to_string();
            assert!(
                e.contains("allow_open: removed") && e.contains("[alias.moat-open]"),
                "{e}"
            );
        }
        let e = cfg("[gvisor]\nallow_native = true\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("removed") && e.contains("[alias.NAME.gvisor]"),
            "{e}"
        );
    }

    fn as_name(text: &str, name: &str) -> Config {
        Config::from_str_as(text, Path::new("/etc/moat/config.toml"), Some(name)).unwrap()
    }

    #[test]
    fn alias_overrides_top_level_keys_for_its_name_only() {
        let text = r#"
default_policy = "restricted"
[restricted]
memory = "1g"
allowed_capabilities = ["CAP_CHOWN"]
network = "none"
[alias.moat-open]
default_policy = "open"
[alias.moat-net.restricted]
network = "engine"
allowed_capabilities = []
host_namespaces = ["network"]
[alias.moat-gvisor.gvisor]
platform = "kvm"
"#;
        let plain = cfg(text).unwrap();
        assert_eq!(plain.default_policy, Mode::Restricted);
        assert!(plain.network_none && plain.alias.is_none());
        assert_eq!(as_name(text, "moat"), plain, "a name without a table");
        let open = as_name(text, "moat-open");
        assert_eq!(open.default_policy, Mode::Open);
        assert_eq!(open.alias.as_deref(), Some("moat-open"));
        // Keys the alias does not set keep the top-level value.
        assert!(open.network_none && open.memory == Some(1 << 30));
        let net = as_name(text, "moat-net");
        assert_eq!(net.default_policy, Mode::Restricted);
        assert!(!net.network_none && net.allowed_capabilities.is_empty());
        assert_eq!(net.host_namespaces, ["network"]);
        assert_eq!(
            as_name(text, "moat-gvisor").platform.as_deref(),
            Some("kvm")
        );
        assert_eq!(plain.platform, None);
        // The operator's way off a gVisor default (annotations cannot).
        let text =
            "[gvisor]\nruntime = \"gvisor\"\n[alias.moat-native.gvisor]\nruntime = \"native\"\n";
        assert!(cfg(text).unwrap().runtime_gvisor);
        assert!(!as_name(text, "moat-native").runtime_gvisor);
    }

    #[test]
    fn alias_tables_are_checked_whatever_the_name() {
        let e = cfg("[alias.moat-open]\ndefault_policy = \"wide\"\n").unwrap_err();
        assert!(
            e.to_string().contains(":2: alias.moat-open.default_policy"),
            "{e}"
        );
        let e = cfg("[alias.x.fleet]\npids = 5\n").unwrap_err().to_string();
        assert!(e.contains("host-wide"), "{e}");
        assert!(cfg("[alias.x.userns]\npool = \"100000:65536\"\n").is_err());
        assert!(cfg("[alias]\nx = 1\n").is_err());
        assert!(cfg("[alias.x.bogus]\ny = 1\n").is_err());
        assert!(cfg("[alias.bad name]\n").is_err());
        let e = cfg("[restricted]\nhost_namespaces = [\"mount\"]\n").unwrap_err();
        assert!(e.to_string().contains("\"mount\""), "{e}");
    }

    #[test]
    fn userns_keys() {
        let c = cfg("[userns]\ndefault = \"auto\"\npool = \"100000000:131072\"\nsize = 65536\n")
            .unwrap();
        assert!(c.userns_auto);
        assert_eq!(c.userns_pool, (100_000_000, 131_072));
        assert!(cfg("[userns]\ndefault = \"yes\"\n").is_err());
        assert!(
            cfg("[userns]\npool = \"0:65536\"\n").is_err(),
            "host root in the pool"
        );
        assert!(cfg("[userns]\npool = \"4294967000:65536\"\n").is_err());
        assert!(cfg("[userns]\npool = \"100000\"\n").is_err());
        assert!(
            cfg("[userns]\npool = \"100000:1000\"\n").is_err(),
            "size > pool"
        );
    }

    #[test]
    fn net_devices_are_interface_names_or_prefixes() {
        let c = cfg("[restricted]\nnet_devices = [\"veth-ci0\", \"veth-*\"]\n").unwrap();
        assert_eq!(c.net_devices, ["veth-ci0", "veth-*"]);
        assert!(Config::default().net_devices.is_empty());
        for (bad, why) in [
            ("[\"*\"]", "every interface of the host"),
            ("[\"\"]", "every interface of the host"),
            ("[\"a/b\"]", "contains '/'"),
            ("[\"eth*0\"]", "contains '*'"),
            ("[\"0123456789abcdef\"]", "longer than 15 bytes"),
            ("\"veth-*\"", "expected a sequence"),
        ] {
            let e = cfg(&format!("[restricted]\n\nnet_devices = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("/etc/moat/config.toml:3: restricted.net_devices") && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn allowed_devices_are_character_devices_by_number() {
        let c = cfg("[restricted]\nallowed_devices = [\"c 195:*\", \"c 10:200\"]\n").unwrap();
        let shown: Vec<String> = c.allowed_devices.iter().map(|d| d.to_string()).collect();
        assert_eq!(shown, ["c 195:*", "c 10:200"]);
        assert!(Config::default().allowed_devices.is_empty());
        for (bad, why) in [
            ("[\"b 8:0\"]", "block devices are never allowed"),
            ("[\"c *:*\"]", "wildcard major"),
            ("[\"c 1:*\"]", "/dev/mem"),
            ("[\"c 195\"]", "expected \"c MAJOR:MINOR\""),
            ("\"c 195:*\"", "expected a sequence"),
        ] {
            let e = cfg(&format!("[restricted]\n\nallowed_devices = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("/etc/moat/config.toml:3: restricted.allowed_devices")
                    && e.contains(why),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn lsm_lists() {
        let c = cfg("[restricted]\napparmor_profiles = [\"mine\", \"team-*\"]\nselinux_types = [\"container_t\", \"svirt_*\"]\n").unwrap();
        assert_eq!(c.apparmor_profiles, ["mine", "team-*"]);
        assert_eq!(c.selinux_types, ["container_t", "svirt_*"]);
        let d = Config::default();
        assert_eq!(d.apparmor_profiles.len(), 4);
        assert_eq!(d.selinux_types, ["container_t"]);
        for bad in [
            "apparmor_profiles = [\"unconfined\"]",
            "apparmor_profiles = [\"*\"]",
            "apparmor_profiles = [\"a*b\"]",
            "apparmor_profiles = \"moat-default\"",
            "selinux_types = [\"svirt_*\"]",
            "selinux_types = [\"*\"]",
        ] {
            let e = cfg(&format!("[restricted]\n{bad}\n")).unwrap_err();
            assert!(e.to_string().contains(":2: restricted."), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("100"), Some(100));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("m"), None);
    }

    #[test]
    fn toml_grammar_and_one_line_errors() {
        // What the toml crate brings: multi-line arrays, literal strings, comments.
        let c = cfg(
            "[restricted]\nallowed_capabilities = [\n  'CAP_CHOWN', # why\n  \"CAP_KILL\",\n]\n",
        )
        .unwrap();
        assert_eq!(c.allowed_capabilities, ["CAP_CHOWN", "CAP_KILL"]);
        for (text, want) in [
            ("bogus = 1\n", "/etc/moat/config.toml:1: bogus: unknown setting (expected one of `default_policy`"),
            ("\n[restricted]\nzap = 1\n", "/etc/moat/config.toml:3: restricted.zap: unknown setting"),
            ("[alias.x]\nfoo = 1\n", "/etc/moat/config.toml:2: alias.x.foo: unknown setting"),
            ("[alias.x.restricted]\npids = \"a\"\n", "/etc/moat/config.toml:2: alias.x.restricted.pids: invalid type: string \"a\", expected a positive integer"),
            ("[restricted]\npids = 0\n", "/etc/moat/config.toml:2: restricted.pids: invalid value: integer `0`, expected a positive integer"),
            ("[restricted]\nmemory = \"5x\"\n", "/etc/moat/config.toml:2: restricted.memory: invalid value: string \"5x\", expected a size such as \"512m\""),
            ("[alias]\nx = 1\n", "/etc/moat/config.toml:2: alias.x: invalid type: integer `1`, expected a table [alias.NAME]"),
            ("default_policy = \"open\"\ndefault_policy = \"open\"\n", "/etc/moat/config.toml:2: duplicate key: `default_policy`"),
            ("[fleet]\nforce_nesting = yes\n", "/etc/moat/config.toml:2: string values must be quoted"),
            ("[userns]\nsize = 70000\npool = \"100000:65536\"\n", "/etc/moat/config.toml:2: userns.size: 70000 ids per container do not fit in the pool of 65536"),
            ("[runtime]\nsync_timeout = 3601\n", "/etc/moat/config.toml:2: runtime.sync_timeout: invalid value: integer `3601`, expected seconds, 1 to 3600"),
            ("[alias.\"a b\"]\n", "/etc/moat/config.toml:1: alias.a b: invalid alias name \"a b\""),
        ] {
            let e = cfg(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: one line: {e}");
        }
    }

    /// The package's /etc/moat/config.toml (packaging/config.toml): as shipped, the
    /// built-in defaults; with every example line uncommented, a file moat accepts.
    #[test]
    fn packaged_config() {
        let text = include_str!("../../packaging/config.toml");
        let shipped = cfg(text).unwrap();
        assert_eq!(
            shipped,
            Config {
                source: shipped.source.clone(),
                ..Config::default()
            }
        );
        let examples: String = text
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| {
                l.starts_with('[')
                    || l.split_once(" = ")
                        .is_some_and(|(k, _)| k.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(examples.contains("[alias.moat-open]"), "{examples}");
        let all = cfg(&examples).unwrap_or_else(|e| panic!("{e}\n{examples}"));
        assert_eq!(all.memory, Some(2 << 30));
    }
}
