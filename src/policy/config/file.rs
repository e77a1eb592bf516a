//! The schema of `config.toml`: serde types the `toml` crate fills in, one struct per table,
//! every one `deny_unknown_fields` (an unknown key fails the load: fail closed).
//!
//! Each value type checks itself while it is read, so an error carries the value's span (its
//! line) and the key path (`serde_path_to_error`), whichever alias table holds it; `apply`
//! then only copies what a table sets onto a [`Config`]. A new setting is a field here, its
//! `apply` line, and a field of `Config`.

use std::collections::BTreeMap;

use serde::de::{self, Unexpected, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::{lsm_list, parse_pool, parse_size, Config, Mode, ALIAS_HINT, HOST_NAMESPACE_TYPES};

/// The whole file: the top-level keys and tables, and the `[alias.NAME]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    pub default_policy: Option<Spanned<Policy>>,
    allow_open: Option<AllowOpen>,
    restricted: Option<Restricted>,
    gvisor: Option<Gvisor>,
    runtime: Option<Runtime>,
    log: Option<Log>,
    egress: Option<Egress>,
    fleet: Option<Fleet>,
    pub userns: Option<Userns>,
    #[serde(default)]
    pub alias: BTreeMap<AliasName, Alias>,
}

/// `[alias.NAME]`: the keys an alias may set over the top level (none host-wide).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table [alias.NAME]")]
pub(super) struct Alias {
    default_policy: Option<Policy>,
    allow_open: Option<AllowOpen>,
    restricted: Option<Restricted>,
    gvisor: Option<Gvisor>,
    runtime: Option<Runtime>,
    log: Option<Log>,
    egress: Option<Egress>,
    fleet: Option<HostWide>,
    userns: Option<AliasUserns>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Restricted {
    allowed_capabilities: Option<Vec<Capability>>,
    accept_voided: Option<Vec<Capability>>,
    allowed_devices: Option<Vec<AllowedDevice>>,
    host_namespaces: Option<Vec<HostNamespace>>,
    net_devices: Option<Vec<NetDeviceName>>,
    readonly_rootfs: Option<bool>,
    rootfs: Option<Rootfs>,
    rootfs_size: Option<Size>,
    rootfs_inodes: Option<Count>,
    network: Option<Network>,
    workspace: Option<AbsPath>,
    tmp_size: Option<TmpSize>,
    tmp_inodes: Option<Count>,
    memory: Option<Size>,
    memory_high: Option<Share>,
    pids: Option<Count>,
    cpus: Option<Cpus>,
    apparmor_profiles: Option<AppArmorProfiles>,
    selinux_types: Option<SelinuxTypes>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Fleet {
    cgroup: Option<CgroupPath>,
    memory: Option<Size>,
    pids: Option<Count>,
    cpus: Option<Cpus>,
    force_nesting: Option<bool>,
    rootfs_budget: Option<Size>,
}

/// `[egress]` (docs/configuration.md, "Egress").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Egress {
    allow: Option<EgressList>,
    deny_metadata: Option<bool>,
    metadata: Option<Vec<IpAddress>>,
    resolvers: Option<Vec<Resolver>>,
    forwarder_names: Option<u32>,
    forwarder_answers: Option<u32>,
    forwarder_memory: Option<Size>,
    forwarder_pids: Option<u32>,
    allow_raw_sockets: Option<bool>,
}

/// `[egress] allow`: rules, one per string ([] = every destination, ["none"] = loopback).
#[derive(Deserialize)]
#[serde(try_from = "Vec<String>")]
struct EgressList(Option<crate::policy::egress::List>);
impl TryFrom<Vec<String>> for EgressList {
    type Error = String;
    fn try_from(l: Vec<String>) -> Result<Self, String> {
        if l.is_empty() {
            return Ok(EgressList(None));
        }
        crate::policy::egress::parse_list(&l.join(","))
            .map(|l| EgressList(Some(l)))
            .map_err(|e| e.to_string())
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct IpAddress(std::net::IpAddr);
impl TryFrom<String> for IpAddress {
    type Error = String;
    fn try_from(a: String) -> Result<Self, String> {
        a.parse()
            .map(IpAddress)
            .map_err(|_| format!("{a:?} is not an IP address"))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Resolver(std::net::SocketAddr);
impl TryFrom<String> for Resolver {
    type Error = String;
    fn try_from(a: String) -> Result<Self, String> {
        crate::policy::egress::parse_resolver(&a)
            .map(Resolver)
            .ok_or_else(|| format!("{a:?} is not IP[:port] or [IPv6]:port"))
    }
}

impl Egress {
    fn apply(&self, c: &mut Config) {
        if let Some(l) = &self.allow {
            c.egress_allow = l.0.clone();
        }
        if let Some(d) = self.deny_metadata {
            c.egress_deny_metadata = d;
        }
        if let Some(m) = &self.metadata {
            c.egress_metadata = m.iter().map(|a| a.0).collect();
        }
        if let Some(r) = &self.resolvers {
            c.egress_resolvers = Some(r.iter().map(|a| a.0).collect());
        }
        if let Some(n) = self.forwarder_names {
            c.egress_forwarder.names = n;
        }
        if let Some(n) = self.forwarder_answers {
            c.egress_forwarder.answers = n;
        }
        if let Some(Size(n)) = self.forwarder_memory {
            c.egress_forwarder.memory = n.unsigned_abs();
        }
        if let Some(n) = self.forwarder_pids {
            c.egress_forwarder.pids = n;
        }
        if let Some(r) = self.allow_raw_sockets {
            c.egress_allow_raw_sockets = r;
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Gvisor {
    runtime: Option<GvisorRuntime>,
    runsc_path: Option<String>,
    platform: Option<Platform>,
    allow_native: Option<AllowNative>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Userns {
    default: Option<UsernsDefault>,
    pub pool: Option<Spanned<Pool>>,
    pub size: Option<Spanned<IdCount>>,
}

/// `[alias.NAME.userns]`: only the default; the pool and the size are host-wide.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AliasUserns {
    default: Option<UsernsDefault>,
    pool: Option<HostWide>,
    size: Option<HostWide>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Runtime {
    sync_timeout: Option<SyncTimeout>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Log {
    warn_stderr: Option<bool>,
}

impl File {
    /// The top-level keys onto the defaults.
    pub fn apply(&self, c: &mut Config) {
        let _ = &self.allow_open; // refused while reading
        if let Some(p) = &self.default_policy {
            p.get_ref().apply(c);
        }
        tables(&self.restricted, &self.gvisor, &self.runtime, &self.log, c);
        if let Some(e) = &self.egress {
            e.apply(c);
        }
        if let Some(f) = &self.fleet {
            f.apply(c);
        }
        if let Some(u) = &self.userns {
            if let Some(d) = u.default {
                c.userns_auto = d == UsernsDefault::Auto;
            }
            if let Some(p) = &u.pool {
                c.userns_pool = p.get_ref().0;
            }
            if let Some(s) = &u.size {
                c.userns_size = s.get_ref().0;
            }
        }
    }
}

impl Alias {
    /// The keys this alias sets, over the top level's, key by key.
    pub fn apply(&self, c: &mut Config) {
        let _ = (&self.allow_open, &self.fleet); // refused while reading
        if let Some(p) = self.default_policy {
            p.apply(c);
        }
        tables(&self.restricted, &self.gvisor, &self.runtime, &self.log, c);
        if let Some(e) = &self.egress {
            e.apply(c);
        }
        if let Some(AliasUserns {
            default: Some(d), ..
        }) = &self.userns
        {
            c.userns_auto = *d == UsernsDefault::Auto;
        }
        if let Some(u) = &self.userns {
            let _ = (&u.pool, &u.size); // refused while reading
        }
    }
}

/// The tables an alias may set as the top level does.
fn tables(
    restricted: &Option<Restricted>,
    gvisor: &Option<Gvisor>,
    runtime: &Option<Runtime>,
    log: &Option<Log>,
    c: &mut Config,
) {
    if let Some(r) = restricted {
        r.apply(c);
    }
    if let Some(g) = gvisor {
        let _ = &g.allow_native; // refused while reading
        if let Some(r) = g.runtime {
            c.runtime_gvisor = r == GvisorRuntime::Gvisor;
        }
        if let Some(p) = &g.runsc_path {
            c.runsc_path = Some(p.clone());
        }
        if let Some(p) = &g.platform {
            c.platform = Some(p.0.clone());
        }
    }
    if let Some(SyncTimeout(s)) = runtime.as_ref().and_then(|r| r.sync_timeout) {
        c.sync_timeout = s;
    }
    if let Some(w) = log.as_ref().and_then(|l| l.warn_stderr) {
        c.warn_stderr = w;
    }
}

impl Restricted {
    fn apply(&self, c: &mut Config) {
        if let Some(l) = &self.allowed_capabilities {
            c.allowed_capabilities = l.iter().map(|x| x.0.clone()).collect();
        }
        if let Some(l) = &self.accept_voided {
            c.accept_voided = l.iter().map(|x| x.0.clone()).collect();
        }
        if let Some(l) = &self.allowed_devices {
            c.allowed_devices = l.iter().map(|x| x.0).collect();
        }
        if let Some(l) = &self.host_namespaces {
            c.host_namespaces = l.iter().map(|x| x.0.clone()).collect();
        }
        if let Some(l) = &self.net_devices {
            c.net_devices = l.iter().map(|x| x.0.clone()).collect();
        }
        if let Some(r) = self.readonly_rootfs {
            c.readonly_rootfs = r;
        }
        if let Some(r) = self.rootfs {
            (c.rootfs_readonly, c.ephemeral_rootfs) = match r {
                Rootfs::Writable => (false, false),
                Rootfs::Ephemeral => (false, true),
                Rootfs::Readonly => (true, false),
            };
        }
        if let Some(Size(s)) = self.rootfs_size {
            c.rootfs_size = s.unsigned_abs();
        }
        if let Some(Count(n)) = self.rootfs_inodes {
            c.rootfs_inodes = n.unsigned_abs();
        }
        if let Some(n) = self.network {
            c.network_none = n == Network::None;
        }
        if let Some(w) = &self.workspace {
            c.workspace = w.0.clone();
        }
        if let Some(t) = &self.tmp_size {
            c.tmp_size = t.0.clone();
        }
        if let Some(Count(n)) = self.tmp_inodes {
            c.tmp_inodes = n.unsigned_abs();
        }
        if let Some(Size(s)) = self.memory {
            c.memory = Some(s);
        }
        if let Some(Share(s)) = self.memory_high {
            c.memory_high = s;
        }
        if let Some(Count(n)) = self.pids {
            c.pids = Some(n);
        }
        if let Some(Cpus(n)) = self.cpus {
            c.cpus = Some(n);
        }
        if let Some(l) = &self.apparmor_profiles {
            c.apparmor_profiles = l.0.clone();
        }
        if let Some(l) = &self.selinux_types {
            c.selinux_types = l.0.clone();
        }
    }
}

impl Fleet {
    fn apply(&self, c: &mut Config) {
        if let Some(g) = &self.cgroup {
            c.fleet_cgroup = g.0.clone();
        }
        if let Some(Size(s)) = self.memory {
            c.fleet_memory = Some(s);
        }
        if let Some(Count(n)) = self.pids {
            c.fleet_pids = Some(n);
        }
        if let Some(Cpus(n)) = self.cpus {
            c.fleet_cpus = Some(n);
        }
        if let Some(Size(s)) = self.rootfs_budget {
            c.rootfs_budget = Some(s.unsigned_abs());
        }
        if let Some(f) = self.force_nesting {
            c.force_nesting = f;
        }
    }
}

// --- values: each checks itself while it is read --------------------------------------

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(super) enum Policy {
    Restricted,
    Open,
    /// An alias setting only: runs as OPEN, reports what RESTRICTED would cut.
    Audit,
}

impl Policy {
    fn apply(self, c: &mut Config) {
        c.audit = self == Policy::Audit;
        c.default_policy = match self {
            Policy::Restricted => Mode::Restricted,
            Policy::Open | Policy::Audit => Mode::Open,
        };
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Rootfs {
    Writable,
    Ephemeral,
    Readonly,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Network {
    Engine,
    None,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum GvisorRuntime {
    Native,
    Gvisor,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum UsernsDefault {
    Engine,
    Auto,
}

/// A key that no longer exists, with the way that replaced it.
struct AllowOpen;
impl<'de> Deserialize<'de> for AllowOpen {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::custom(format!(
            "removed: annotations may only tighten, so moat.policy=open can no longer be \
             allowed; {ALIAS_HINT}"
        )))
    }
}

struct AllowNative;
impl<'de> Deserialize<'de> for AllowNative {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::custom(
            "removed: annotations may only tighten, so moat.runtime=native cannot leave a \
             gVisor default; name an alias whose [alias.NAME.gvisor] sets runtime = \"native\" \
             (docs/configuration.md)",
        ))
    }
}

/// A host-wide setting inside an alias table.
struct HostWide;
impl<'de> Deserialize<'de> for HostWide {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::custom(
            "host-wide (one fleet cgroup, one id pool per host): set it at the top level, \
             not per alias",
        ))
    }
}

/// The `NAME` of `[alias.NAME]`: a program name moat can be invoked by.
#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(try_from = "String")]
pub(super) struct AliasName(pub String);
impl TryFrom<String> for AliasName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s.is_empty()
            || !s
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(format!(
                "invalid alias name {s:?}: the basename of a program (letters, digits, -, _)"
            ));
        }
        Ok(AliasName(s))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Capability(String);
impl TryFrom<String> for Capability {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match crate::linux::capabilities::number(&s) {
            Some(_) => Ok(Capability(s)),
            None => Err(format!("unknown capability {s:?}")),
        }
    }
}

/// `[restricted] allowed_devices`: `"c MAJOR:MINOR"` (`policy::devices::parse_allowed`).
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct AllowedDevice(crate::policy::devices::AllowedDevice);
impl TryFrom<String> for AllowedDevice {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        crate::policy::devices::parse_allowed(&s).map(AllowedDevice)
    }
}

/// `[restricted] net_devices`: a host interface name, or a prefix of one ending in `*`.
/// `"*"` alone is refused: it would let any container take any interface, the host's
/// uplink included.
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct NetDeviceName(String);
impl TryFrom<String> for NetDeviceName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        let name = s.strip_suffix('*').unwrap_or(&s);
        if name.is_empty() {
            return Err(format!(
                "{s:?} would allow every interface of the host, its uplink too: name the \
                 interfaces, or a prefix of theirs such as \"veth-*\""
            ));
        }
        if name.contains('*') {
            return Err(format!(
                "{s:?} contains '*' before its end (only a trailing '*' makes a prefix)"
            ));
        }
        // A prefix is checked as the start of a name: only its length may fall short.
        if let Some(why) = crate::spec::validate::interface_name_problem(name) {
            return Err(why);
        }
        Ok(NetDeviceName(s))
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct HostNamespace(String);
impl TryFrom<String> for HostNamespace {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if HOST_NAMESPACE_TYPES.contains(&s.as_str()) {
            Ok(HostNamespace(s))
        } else {
            Err(format!(
                "unknown namespace type {s:?} (one of {})",
                HOST_NAMESPACE_TYPES.join(", ")
            ))
        }
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct AbsPath(String);
impl TryFrom<String> for AbsPath {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, &'static str> {
        if s.starts_with('/') {
            Ok(AbsPath(s))
        } else {
            Err("must be an absolute path")
        }
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct CgroupPath(String);
impl TryFrom<String> for CgroupPath {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, &'static str> {
        if s.starts_with('/') && !s.split('/').any(|p| p == "..") {
            Ok(CgroupPath(s))
        } else {
            Err("must be an absolute cgroup path without ..")
        }
    }
}

/// `tmp_size`, kept as written (it becomes a tmpfs `size=`).
#[derive(Deserialize)]
#[serde(try_from = "String")]
struct TmpSize(String);
impl TryFrom<String> for TmpSize {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, &'static str> {
        parse_size(&s)
            .map(|_| TmpSize(s))
            .ok_or("expected a size such as \"64m\"")
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
struct Platform(String);
impl TryFrom<String> for Platform {
    type Error = String;
    fn try_from(p: String) -> Result<Self, String> {
        // Which names exist depends on the runsc found, checked at create
        // (`gvisor::probe`); here only that it can be one.
        if !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            Ok(Platform(p))
        } else {
            Err(format!(
                "unknown platform {p:?} (a name `runsc help platforms` lists: systrap, \
                 ptrace, kvm)"
            ))
        }
    }
}

#[derive(Deserialize)]
#[serde(try_from = "String")]
pub(super) struct Pool(pub (u32, u32));
impl TryFrom<String> for Pool {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, &'static str> {
        parse_pool(&s)
            .map(Pool)
            .ok_or("expected \"START:SIZE\" with START >= 65536 and START+SIZE < 2^32")
    }
}

/// An integer, with what the key expects in the error when it is something else.
fn int<'de, D: Deserializer<'de>>(d: D, expecting: &'static str) -> Result<i64, D::Error> {
    struct V(&'static str);
    impl Visitor<'_> for V {
        type Value = i64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<i64, E> {
            Ok(n)
        }
    }
    d.deserialize_any(V(expecting))
}

/// An integer in `range`, or the error saying what the key expects.
fn int_in<'de, D: Deserializer<'de>>(
    d: D,
    range: std::ops::RangeInclusive<i64>,
    expecting: &'static str,
) -> Result<i64, D::Error> {
    let n = int(d, expecting)?;
    if range.contains(&n) {
        Ok(n)
    } else {
        Err(de::Error::invalid_value(Unexpected::Signed(n), &expecting))
    }
}

/// A positive integer (inodes, pids).
#[derive(Clone, Copy)]
struct Count(i64);
impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        int_in(d, 1..=i64::MAX, "a positive integer").map(Count)
    }
}

/// `[userns] size`: ids per container.
#[derive(Clone, Copy)]
pub(super) struct IdCount(pub u32);
impl<'de> Deserialize<'de> for IdCount {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = int_in(d, 1..=u32::MAX.into(), "a positive integer below 2^32")?;
        Ok(IdCount(u32::try_from(n).map_err(de::Error::custom)?))
    }
}

/// `[runtime] sync_timeout`, seconds.
#[derive(Clone, Copy)]
struct SyncTimeout(u32);
impl<'de> Deserialize<'de> for SyncTimeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = int_in(d, 1..=3600, "seconds, 1 to 3600")?;
        Ok(SyncTimeout(u32::try_from(n).map_err(de::Error::custom)?))
    }
}

/// A byte count: a positive integer or a string such as `"512m"`.
#[derive(Clone, Copy)]
struct Size(i64);
impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size such as \"512m\"")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Size, E> {
                if n > 0 {
                    Ok(Size(n))
                } else {
                    Err(E::invalid_value(Unexpected::Signed(n), &self))
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Size, E> {
                parse_size(s)
                    .map(Size)
                    .ok_or_else(|| E::invalid_value(Unexpected::Str(s), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// A number of CPUs: a positive integer, float, or a string such as `"1.5"`.
#[derive(Clone, Copy)]
struct Cpus(f64);
impl<'de> Deserialize<'de> for Cpus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Cpus;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number of CPUs such as \"1.5\"")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Cpus, E> {
                // Small counts are exact as f64; anything else is not a CPU count.
                #[allow(clippy::cast_precision_loss)]
                self.visit_f64(n as f64)
            }
            fn visit_f64<E: de::Error>(self, f: f64) -> Result<Cpus, E> {
                if f.is_finite() && f > 0.0 {
                    Ok(Cpus(f))
                } else {
                    Err(E::invalid_value(Unexpected::Float(f), &self))
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Cpus, E> {
                match s.trim().parse::<f64>() {
                    Ok(f) if f.is_finite() && f > 0.0 => Ok(Cpus(f)),
                    _ => Err(E::invalid_value(Unexpected::Str(s), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `memory_high`: a share of the memory limit, `0` (off) or a float in `[0, 1)`.
#[derive(Clone, Copy)]
struct Share(f64);
impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Share;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a share of the memory limit such as 0.9 (0: off)")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Share, E> {
                if n == 0 {
                    Ok(Share(0.0))
                } else {
                    Err(E::invalid_value(Unexpected::Signed(n), &self))
                }
            }
            fn visit_f64<E: de::Error>(self, f: f64) -> Result<Share, E> {
                if (0.0..1.0).contains(&f) {
                    Ok(Share(f))
                } else {
                    Err(E::invalid_value(Unexpected::Float(f), &self))
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
#[serde(try_from = "Vec<String>")]
struct AppArmorProfiles(Vec<String>);
impl TryFrom<Vec<String>> for AppArmorProfiles {
    type Error = String;
    fn try_from(l: Vec<String>) -> Result<Self, String> {
        lsm_list(&l, true)
            .map(AppArmorProfiles)
            .map_err(|e| e.to_string())
    }
}

#[derive(Deserialize)]
#[serde(try_from = "Vec<String>")]
struct SelinuxTypes(Vec<String>);
impl TryFrom<Vec<String>> for SelinuxTypes {
    type Error = String;
    fn try_from(l: Vec<String>) -> Result<Self, String> {
        lsm_list(&l, false)
            .map(SelinuxTypes)
            .map_err(|e| e.to_string())
    }
}
