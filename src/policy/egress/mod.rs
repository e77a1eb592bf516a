//! The egress policy: which destinations a container may open connections and send
//! datagrams to (`moat.egress`, `[egress]`, `moat update --egress`). Pure: the grammar, the
//! narrowing check, and the effective policy a container gets; `linux::egress` enforces it.
//!
//! ```text
//! list  := "none" | rule ("," rule)*
//! rule  := [("tcp"|"udp") "/"] (v4cidr | "[" v6cidr "]" | name) [":" port ["-" port]]
//!        | ("tls"|"http") "/" name ":" port ["-" port]
//! ```
//!
//! `tls/NAME:PORT` and `http/NAME:PORT` bind a connection to the name: its TLS ClientHello
//! must carry that SNI, or its HTTP/1 request that `Host`. No runtime of moat enforces that
//! binding yet, so a list holding one is refused where a container would get it
//! ([`List::name_bound`]), never run as a plain name rule.
//!
//! A bare address is a /32 or /128; a name is case-insensitive, its trailing dot ignored,
//! and `*.x` matches the subdomains of `x` but not `x` itself; no protocol means TCP and
//! UDP (and ICMP echo to an address rule), no port means every port. `none` allows nothing
//! but loopback. A list means default deny for new outbound connections and datagrams.

mod decide;
/// Built for its tests and its fuzz target only until a runtime reads connections with it
/// (the splice that binds `tls/` and `http/` connections to their names, not built yet).
#[cfg(any(fuzzing, test))]
pub mod first_bytes;

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize, Serializer};

pub(super) use decide::decide;

/// The protocols a rule allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    /// No protocol given: TCP, UDP and (for an address rule) ICMP echo.
    Any,
}

impl Proto {
    fn covers(self, other: Proto) -> bool {
        self == Proto::Any || self == other
    }
}

/// Where a rule points: an address block, or a domain name the DNS forwarder resolves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// An IPv4 block is held as its IPv4-mapped IPv6 block (`::ffff:a.b.c.d/96+n`), the
    /// form the kernel's IPv6 hooks see for IPv4 on a dual-stack socket: one trie, one
    /// comparison for both families.
    Net { addr: Ipv6Addr, len: u8 },
    /// Lower case, no trailing dot; `wildcard`: `*.name`, the subdomains of `name` only.
    Name { name: String, wildcard: bool },
}

/// What a connection admitted by a rule must name, read from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    /// Nothing: an address rule, or a bare name rule (whose admitted addresses are reachable
    /// whatever name the connection then speaks, docs/security.md "Shared addresses").
    Plain,
    /// `tls/NAME:PORT`: a TLS ClientHello whose SNI the rule's name matches.
    Tls,
    /// `http/NAME:PORT`: an HTTP/1 request whose `Host` the rule's name matches.
    Http,
}

/// One allow rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub proto: Proto,
    pub dest: Dest,
    /// Inclusive; (1, 65535) when no port is given.
    pub ports: (u16, u16),
    /// `Plain` but for `tls/` and `http/` (always a name, TCP, with ports).
    pub bind: Bind,
}

/// A parsed list: `none`, or rules (default deny for everything else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct List(pub Vec<Rule>);

/// `::ffff:0:0/96`: where IPv4 lives in the trie.
pub fn mapped(v4: Ipv4Addr) -> Ipv6Addr {
    v4.to_ipv6_mapped()
}

/// The address as the trie holds it.
pub fn key_addr(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => mapped(v4),
        IpAddr::V6(v6) => v6,
    }
}

fn mask(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let bits = u128::from(addr);
    let m = if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    };
    Ipv6Addr::from(bits & m)
}

impl Dest {
    /// Whether every address of `other` is in `self` (names: the same name, or a name
    /// under a wildcard).
    fn covers(&self, other: &Dest) -> bool {
        match (self, other) {
            (Dest::Net { addr, len }, Dest::Net { addr: a2, len: l2 }) => {
                l2 >= len && mask(*a2, *len) == *addr
            }
            (
                Dest::Name { name, wildcard },
                Dest::Name {
                    name: n2,
                    wildcard: w2,
                },
            ) => {
                if *wildcard {
                    // `*.x` covers `*.x`, `a.x`, `*.a.x`; never `x`.
                    n2.strip_suffix(name.as_str())
                        .is_some_and(|head| head.ends_with('.'))
                        || (*w2 && n2 == name)
                } else {
                    !*w2 && n2 == name
                }
            }
            _ => false,
        }
    }

    /// Whether `name` (lower case, no trailing dot) is matched by this name rule.
    pub fn matches_name(&self, query: &str) -> bool {
        match self {
            Dest::Name { name, wildcard } => {
                if *wildcard {
                    query
                        .strip_suffix(name.as_str())
                        .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                } else {
                    query == name
                }
            }
            Dest::Net { .. } => false,
        }
    }
}

impl Rule {
    /// Whether everything `other` allows, this rule allows too.
    pub fn covers(&self, other: &Rule) -> bool {
        // A bound rule admits less than a plain one of the same name and ports (only
        // connections naming it), never something a plain rule does not.
        (self.bind == Bind::Plain || self.bind == other.bind)
            && self.proto.covers(other.proto)
            && self.ports.0 <= other.ports.0
            && other.ports.1 <= self.ports.1
            && self.dest.covers(&other.dest)
    }

    pub fn is_name(&self) -> bool {
        matches!(self.dest, Dest::Name { .. })
    }

    /// Whether a connection this rule admits must name the rule's name (`tls/`, `http/`).
    pub fn is_name_bound(&self) -> bool {
        self.bind != Bind::Plain
    }
}

impl List {
    /// The first rule binding connections to a name (`tls/`, `http/`): what a runtime that
    /// does not enforce the binding must refuse rather than run as a plain name rule.
    pub fn name_bound(&self) -> Option<&Rule> {
        self.0.iter().find(|r| r.is_name_bound())
    }
}

impl fmt::Display for Rule {
    /// The canonical spelling: what `policy explain` shows and a message names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.bind, self.proto) {
            (Bind::Tls, _) => f.write_str("tls/")?,
            (Bind::Http, _) => f.write_str("http/")?,
            (Bind::Plain, Proto::Tcp) => f.write_str("tcp/")?,
            (Bind::Plain, Proto::Udp) => f.write_str("udp/")?,
            (Bind::Plain, Proto::Any) => {}
        }
        match &self.dest {
            Dest::Net { addr, len } => match addr.to_ipv4_mapped() {
                Some(v4) if *len >= 96 => {
                    write!(f, "{v4}")?;
                    if *len != 128 {
                        write!(f, "/{}", len - 96)?;
                    }
                }
                _ => {
                    write!(f, "[{addr}")?;
                    if *len != 128 {
                        write!(f, "/{len}")?;
                    }
                    f.write_str("]")?;
                }
            },
            Dest::Name { name, wildcard } => {
                if *wildcard {
                    f.write_str("*.")?;
                }
                f.write_str(name)?;
            }
        }
        match self.ports {
            (1, 65535) => Ok(()),
            (a, b) if a == b => write!(f, ":{a}"),
            (a, b) => write!(f, ":{a}-{b}"),
        }
    }
}

impl fmt::Display for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl Serialize for List {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|r| r.to_string()))
    }
}

/// Why a list does not parse: the rule and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress rule {rule:?}: {reason}")]
pub struct ParseError {
    pub rule: String,
    pub reason: String,
}

/// At most this many rules in one list (each name rule costs the forwarder a comparison per
/// query, each address rule a trie entry).
pub const MAX_RULES: usize = 256;

/// Parses a list (`none`, or comma-separated rules).
pub fn parse_list(text: &str) -> Result<List, ParseError> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("none") {
        return Ok(List(Vec::new()));
    }
    let mut rules = Vec::new();
    for raw in text.split(',') {
        let raw = raw.trim();
        if raw.eq_ignore_ascii_case("none") {
            return Err(ParseError {
                rule: raw.into(),
                reason: "`none` stands alone: it allows nothing but loopback".into(),
            });
        }
        let rule = parse_rule(raw)?;
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    if rules.len() > MAX_RULES {
        return Err(ParseError {
            rule: text.chars().take(40).collect(),
            reason: format!("{} rules; at most {MAX_RULES}", rules.len()),
        });
    }
    Ok(List(rules))
}

/// Parses one rule.
pub fn parse_rule(raw: &str) -> Result<Rule, ParseError> {
    let err = |reason: &str| ParseError {
        rule: raw.to_string(),
        reason: reason.to_string(),
    };
    if raw.is_empty() {
        return Err(err("empty rule (two commas, or a trailing one)"));
    }
    let lower = raw.to_ascii_lowercase();
    let (proto, bind, rest) = match lower.split_once('/') {
        Some(("tcp", r)) => (Proto::Tcp, Bind::Plain, r),
        Some(("udp", r)) => (Proto::Udp, Bind::Plain, r),
        Some(("tls", r)) => (Proto::Tcp, Bind::Tls, r),
        Some(("http", r)) => (Proto::Tcp, Bind::Http, r),
        _ => (Proto::Any, Bind::Plain, lower.as_str()),
    };
    let (dest_text, port_text, v6) = if let Some(inner) = rest.strip_prefix('[') {
        let (addr, after) = inner
            .split_once(']')
            .ok_or_else(|| err("an IPv6 block opened with `[` is not closed with `]`"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| err("after `]` only `:port` may follow"))?,
            ),
        };
        (addr, port, true)
    } else {
        if rest.matches(':').count() > 1 {
            return Err(err("an IPv6 address goes in brackets: [2001:db8::/32]:443"));
        }
        match rest.split_once(':') {
            Some((d, p)) => (d, Some(p), false),
            None => (rest, None, false),
        }
    };
    let ports = match port_text {
        None => (1, 65535),
        Some(p) => parse_ports(p).ok_or_else(|| {
            err("a port is 1-65535, a range LOW-HIGH with LOW <= HIGH (`:443`, `:8000-8080`)")
        })?,
    };
    let dest = if v6 {
        let (addr, len) = parse_cidr(dest_text, 128).map_err(|r| err(&r))?;
        let addr: Ipv6Addr = addr.parse().map_err(|_| err("not an IPv6 address"))?;
        net(addr, len).map_err(|r| err(&r))?
    } else if dest_text.starts_with(|c: char| c.is_ascii_digit())
        && dest_text
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == '/')
    {
        let (addr, len) = parse_cidr(dest_text, 32).map_err(|r| err(&r))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| err("not an IPv4 address"))?;
        net(mapped(addr), len + 96).map_err(|r| err(&r))?
    } else {
        parse_name(dest_text).map_err(|r| err(&r))?
    };
    if bind != Bind::Plain {
        if !matches!(dest, Dest::Name { .. }) {
            return Err(err(
                "tls/ and http/ bind a connection to a name: they take a name, not an address",
            ));
        }
        if port_text.is_none() {
            return Err(err(
                "tls/ and http/ take a port (`tls/api.example.com:443`, `http/a.example:80`)",
            ));
        }
    }
    Ok(Rule {
        proto,
        dest,
        ports,
        bind,
    })
}

fn parse_ports(p: &str) -> Option<(u16, u16)> {
    let one = |s: &str| s.parse::<u16>().ok().filter(|n| *n > 0);
    match p.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (one(a)?, one(b)?);
            (a <= b).then_some((a, b))
        }
        None => one(p).map(|n| (n, n)),
    }
}

fn parse_cidr(text: &str, max: u8) -> Result<(&str, u8), String> {
    match text.split_once('/') {
        None => Ok((text, max)),
        Some((a, l)) => match l.parse::<u8>() {
            Ok(n) if n <= max => Ok((a, n)),
            _ => Err(format!("a prefix length is 0-{max}")),
        },
    }
}

fn net(addr: Ipv6Addr, len: u8) -> Result<Dest, String> {
    let base = mask(addr, len);
    if base != addr {
        return Err(format!(
            "host bits are set below the prefix (the block is {})",
            Rule {
                proto: Proto::Any,
                dest: Dest::Net { addr: base, len },
                ports: (1, 65535),
                bind: Bind::Plain,
            }
        ));
    }
    Ok(Dest::Net { addr, len })
}

fn parse_name(text: &str) -> Result<Dest, String> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let (wildcard, name) = match text.strip_prefix("*.") {
        Some(n) => (true, n),
        None => (false, text),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(
            "not an address block or a domain name (labels of letters, digits, `-`; `*.` only \
             in front)"
                .into(),
        );
    }
    Ok(Dest::Name {
        name: name.to_string(),
        wildcard,
    })
}

/// The metadata endpoints `[egress] deny_metadata` blocks by default: AWS/GCE/Azure/
/// OpenStack (169.254.169.254), AWS's IPv6 (fd00:ec2::254), ECS task credentials
/// (169.254.170.2), Alibaba (100.100.100.200). Exact addresses: the rest of 169.254.0.0/16
/// carries AWS's time and DNS, EKS Pod Identity and NodeLocal DNSCache.
pub const METADATA: [&str; 4] = [
    "169.254.169.254",
    "fd00:ec2::254",
    "169.254.170.2",
    "100.100.100.200",
];

/// The well-known NAT64 prefix (RFC 6052): on a network that has a NAT64 gateway,
/// `64:ff9b::a.b.c.d` reaches IPv4 `a.b.c.d`, so each IPv4 metadata address is denied in
/// that form too.
const NAT64: Ipv6Addr = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0);

/// The trie addresses of a metadata list: each as given, and each IPv4 one also in its
/// NAT64 form.
pub fn deny_addrs(metadata: &[IpAddr]) -> Vec<Ipv6Addr> {
    let mut out = Vec::new();
    for ip in metadata {
        out.push(key_addr(*ip));
        if let IpAddr::V4(v4) = ip {
            let n = u128::from(NAT64) | u128::from(u32::from(*v4));
            out.push(Ipv6Addr::from(n));
        }
    }
    out.dedup();
    out
}

/// `IP[:port]` or `[v6]:port` (`[egress] resolvers`): port 53 when none is given.
pub fn parse_resolver(s: &str) -> Option<SocketAddr> {
    let s = s.trim();
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    if let Some(v6) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().ok().map(|ip| (ip, 53).into());
    }
    s.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// The nameservers of a resolv.conf (the engine's, read from the bind source in the spec,
/// never from the rootfs), at most three as the C library uses.
pub fn resolv_conf_nameservers(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("nameserver")).then(|| w.next()).flatten()
        })
        .filter_map(|a| a.split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .take(3)
        .collect()
}

/// The rules of `narrow` that `wide` does not cover (`wide` = `None`: unrestricted,
/// covers everything). Empty: `narrow` only narrows.
pub fn widening<'a>(narrow: &'a List, wide: Option<&List>) -> Vec<&'a Rule> {
    match wide {
        None => Vec::new(),
        Some(w) => narrow
            .0
            .iter()
            .filter(|r| !w.0.iter().any(|o| o.covers(r)))
            .collect(),
    }
}

/// What a container's egress is: the policy's decision, recorded in `policy.json` and
/// enforced by `linux::egress`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Recorded")]
pub struct Egress {
    /// Default deny with these rules; `None`: every destination but `deny`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<List>,
    /// Refused whatever `allow` says (`[egress] deny_metadata`), but DNS (port 53) to one
    /// of `resolvers` (GCE serves DNS on 169.254.169.254).
    #[serde(serialize_with = "addrs")]
    pub deny: Vec<Ipv6Addr>,
    /// Where name lookups go: the forwarder's upstreams, and the resolvers `deny` leaves
    /// DNS open to.
    pub resolvers: Vec<SocketAddr>,
    /// What the DNS forwarder may hold (`[egress] forwarder_names`, `forwarder_answers`).
    #[serde(default, skip_serializing_if = "ForwarderLimits::is_default")]
    pub forwarder: ForwarderLimits,
    /// Every packet is judged, lists or not: the container may hold `CAP_NET_RAW`
    /// (`[egress] allow_raw_sockets`), whose raw sockets pass no `connect`/`sendmsg` hook.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub packets: bool,
}

/// The bounds of the DNS forwarder: of its state, the names whose answers it holds
/// admitted at once and the addresses held per name (an answer past either is not
/// admitted, counted in the forwarder's `full` stats slot; their product stays within the
/// trie's room); of its cgroup (a sibling of the container's), the memory and the tasks it
/// may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwarderLimits {
    pub names: u32,
    pub answers: u32,
    /// Bytes of memory its cgroup may charge (`[egress] forwarder_memory`); a record of an
    /// older moat, without it, reads the default.
    #[serde(default = "ForwarderLimits::default_memory")]
    pub memory: u64,
    /// Tasks (its threads) its cgroup may hold (`[egress] forwarder_pids`).
    #[serde(default = "ForwarderLimits::default_pids")]
    pub pids: u32,
}

impl ForwarderLimits {
    /// The most answers held at once: room left in the 16384-entry trie for the rules.
    pub const MAX_HELD: u32 = 12288;
    /// An answer's records past this are never needed (DNS over UDP answers ~30 A records).
    pub const MAX_ANSWERS: u32 = 64;
    /// The least memory a forwarder starts in: its binary's pages, its heap and a thread
    /// stack's touched pages, with room.
    pub const MIN_MEMORY: u64 = 8 << 20;
    /// Its main thread and one client thread.
    pub const MIN_PIDS: u32 = 2;

    fn default_memory() -> u64 {
        64 << 20
    }

    fn default_pids() -> u32 {
        // The main thread and the 64 client threads it runs at most, with room.
        80
    }

    fn is_default(&self) -> bool {
        *self == ForwarderLimits::default()
    }

    /// Refuses limits of 0 or whose product exceeds [`ForwarderLimits::MAX_HELD`], and a
    /// cgroup the forwarder cannot start in.
    pub fn check(&self) -> Result<(), String> {
        if self.names == 0 || self.answers == 0 {
            return Err("forwarder_names and forwarder_answers must be at least 1".into());
        }
        if self.answers > Self::MAX_ANSWERS {
            return Err(format!(
                "forwarder_answers = {}: at most {}",
                self.answers,
                Self::MAX_ANSWERS
            ));
        }
        if u64::from(self.names) * u64::from(self.answers) > u64::from(Self::MAX_HELD) {
            return Err(format!(
                "forwarder_names * forwarder_answers = {} * {}: at most {} addresses held",
                self.names,
                self.answers,
                Self::MAX_HELD
            ));
        }
        if self.memory < Self::MIN_MEMORY {
            return Err(format!(
                "forwarder_memory = {}: at least {} (8m)",
                self.memory,
                Self::MIN_MEMORY
            ));
        }
        if self.pids < Self::MIN_PIDS {
            return Err(format!(
                "forwarder_pids = {}: at least {}",
                self.pids,
                Self::MIN_PIDS
            ));
        }
        Ok(())
    }
}

impl Default for ForwarderLimits {
    fn default() -> Self {
        ForwarderLimits {
            names: 1024,
            answers: 8,
            memory: Self::default_memory(),
            pids: Self::default_pids(),
        }
    }
}

fn addrs<S: Serializer>(v: &[Ipv6Addr], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|a| match a.to_ipv4_mapped() {
        Some(v4) => v4.to_string(),
        None => a.to_string(),
    }))
}

/// [`Egress`] as `policy.json` records it: rules and addresses in their written form.
#[derive(Deserialize)]
struct Recorded {
    #[serde(default)]
    allow: Option<Vec<String>>,
    deny: Vec<String>,
    resolvers: Vec<String>,
    /// Absent in a record of a moat before the forwarder's bounds: the defaults.
    #[serde(default)]
    forwarder: Option<ForwarderLimits>,
    #[serde(default)]
    packets: bool,
}

/// A recorded [`Egress`] that does not parse: which part, its text and why.
#[derive(Debug, thiserror::Error)]
#[error("egress {what} {value:?}: {reason}")]
pub struct RecordedError {
    what: &'static str,
    value: String,
    reason: String,
}

impl TryFrom<Recorded> for Egress {
    type Error = RecordedError;

    fn try_from(r: Recorded) -> Result<Egress, RecordedError> {
        let bad = |what, value: &str, reason: String| RecordedError {
            what,
            value: value.to_string(),
            reason,
        };
        let allow = r
            .allow
            .map(|rules| {
                rules
                    .iter()
                    .map(|r| parse_rule(r).map_err(|e| bad("rule", r, e.reason)))
                    .collect::<Result<Vec<_>, _>>()
                    .map(List)
            })
            .transpose()?;
        let deny = r
            .deny
            .iter()
            .map(|a| {
                a.parse::<IpAddr>()
                    .map(key_addr)
                    .map_err(|e| bad("deny address", a, e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let resolvers = r
            .resolvers
            .iter()
            .map(|a| {
                a.parse::<SocketAddr>()
                    .map_err(|e| bad("resolver", a, e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Egress {
            allow,
            deny,
            resolvers,
            forwarder: r.forwarder.unwrap_or_default(),
            packets: r.packets,
        })
    }
}

impl Egress {
    /// The egress policy as JSON holds it (the forwarder's configuration); `None` when
    /// there is none or it does not parse.
    pub fn from_json(v: &serde_json::Value) -> Option<Egress> {
        Option::<Egress>::deserialize(v).ok().flatten()
    }

    /// The list form (a trie, the packet program) is needed: a list, or every packet
    /// judged; else the fixed form (the refused addresses as immediates, no packet program).
    pub fn list_form(&self) -> bool {
        self.allow.is_some() || self.packets
    }

    /// Names are allowed: the container needs moat's DNS forwarder.
    pub fn has_names(&self) -> bool {
        self.allow
            .as_ref()
            .is_some_and(|l| l.0.iter().any(Rule::is_name))
    }

    /// The one-line form `policy explain` and the summary show.
    pub fn describe(&self) -> String {
        let mut s = match &self.allow {
            None => "every destination".to_string(),
            Some(l) => format!("only {l} (and loopback)"),
        };
        if !self.deny.is_empty() {
            s.push_str(&format!(
                "; metadata endpoints refused ({})",
                self.deny
                    .iter()
                    .filter(|a| !u128::from(**a)
                        .to_be_bytes()
                        .starts_with(&[0, 0x64, 0xff, 0x9b]))
                    .map(|a| a.to_ipv4_mapped().map_or(a.to_string(), |v| v.to_string()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if self.packets {
            s.push_str("; every packet judged (CAP_NET_RAW kept)");
        }
        s
    }
}

/// A range's protocol bits, as the programs test them.
pub const TCP: u8 = 1;
pub const UDP: u8 = 2;
pub const ICMP: u8 = 4;
/// Ranges one trie value holds (the programs test each in turn).
pub const RANGES: usize = 8;

/// One (protocols, ports) range of a trie value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Range {
    pub lo: u16,
    pub hi: u16,
    pub protos: u8,
}

/// Every protocol, every port: the value of `::/0` without a list.
/// 127.0.0.0/8 as a trie prefix.
const LOOPBACK4: (Ipv6Addr, u8) = (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0x7f00, 0), 104);
/// Loopback under a list: everything but DNS (which goes to the forwarder's own entry).
const LOOPBACK: [Range; 3] = [
    Range {
        lo: 0,
        hi: 52,
        protos: TCP | UDP,
    },
    Range {
        lo: 54,
        hi: 65535,
        protos: TCP | UDP,
    },
    Range {
        lo: 0,
        hi: 65535,
        protos: ICMP,
    },
];
const EVERYTHING: Range = Range {
    lo: 0,
    hi: 65535,
    protos: TCP | UDP | ICMP,
};

/// One trie entry: a prefix of the 128-bit key space and what it allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub addr: Ipv6Addr,
    pub len: u8,
    pub ranges: Vec<Range>,
}

/// The ranges a rule gives to the addresses it matches: ICMP echo only with an address
/// rule that names no protocol.
fn rule_ranges(r: &Rule) -> Vec<Range> {
    let protos = match r.proto {
        Proto::Tcp => TCP,
        Proto::Udp => UDP,
        Proto::Any => TCP | UDP,
    };
    let mut v = vec![Range {
        lo: r.ports.0,
        hi: r.ports.1,
        protos,
    }];
    if r.proto == Proto::Any && !r.is_name() {
        v.push(Range {
            lo: 0,
            hi: 65535,
            protos: ICMP,
        });
    }
    v
}

/// Merged: the same ports once (their protocols joined), at most [`RANGES`].
fn merge(mut v: Vec<Range>, what: &dyn Fn() -> String) -> Result<Vec<Range>, String> {
    v.sort();
    let mut out: Vec<Range> = Vec::new();
    for r in v {
        match out.iter_mut().find(|o| o.lo == r.lo && o.hi == r.hi) {
            Some(o) => o.protos |= r.protos,
            None => out.push(r),
        }
    }
    // A range inside another with the same protocols adds nothing.
    let all = out.clone();
    out.retain(|r| {
        !all.iter()
            .any(|o| o != r && o.lo <= r.lo && r.hi <= o.hi && o.protos & r.protos == r.protos)
    });
    if out.len() > RANGES {
        return Err(format!(
            "{} port ranges apply to {}; at most {RANGES} (join them into wider ranges)",
            out.len(),
            what()
        ));
    }
    Ok(out)
}

fn contains(outer: (Ipv6Addr, u8), inner: (Ipv6Addr, u8)) -> bool {
    inner.1 >= outer.1 && mask(inner.0, outer.1) == outer.0
}

fn show(addr: Ipv6Addr, len: u8) -> String {
    Rule {
        proto: Proto::Any,
        dest: Dest::Net { addr, len },
        ports: (1, 65535),
        bind: Bind::Plain,
    }
    .to_string()
}

impl Egress {
    /// The allow trie the programs look destinations up in (longest prefix wins, so each
    /// entry holds the ranges of every rule whose block contains it): the address rules
    /// (`::/0` for everything without a list), each denied address with nothing but DNS to
    /// a resolver at it, and `forwarder` (moat's DNS forwarder, on loopback) with DNS.
    /// Names are added by the forwarder as they resolve ([`Egress::admitted`]).
    pub fn entries(&self, forwarder: Option<IpAddr>) -> Result<Vec<Entry>, String> {
        let mut nets: Vec<((Ipv6Addr, u8), Vec<Range>)> = match &self.allow {
            None => vec![((Ipv6Addr::UNSPECIFIED, 0), vec![EVERYTHING])],
            Some(l) => {
                l.0.iter()
                    .filter_map(|r| match r.dest {
                        Dest::Net { addr, len } => Some(((addr, len), rule_ranges(r))),
                        Dest::Name { .. } => None,
                    })
                    .collect()
            }
        };
        let dns = Range {
            lo: 53,
            hi: 53,
            protos: TCP | UDP,
        };
        if self.allow.is_some() {
            // Loopback under a list: in-container servers keep working, DNS goes to the
            // forwarder only.
            for lo in [LOOPBACK4, (Ipv6Addr::LOCALHOST, 128)] {
                nets.push((lo, LOOPBACK.to_vec()));
            }
        }
        if let Some(f) = forwarder {
            nets.push(((key_addr(f), 128), vec![dns]));
        }
        let mut prefixes: Vec<(Ipv6Addr, u8)> = nets.iter().map(|(p, _)| *p).collect();
        prefixes.sort();
        prefixes.dedup();
        let mut out = Vec::new();
        for p in prefixes {
            if self.deny.contains(&p.0) && p.1 == 128 {
                continue;
            }
            let ranges = nets
                .iter()
                .filter(|(q, _)| contains(*q, p))
                .flat_map(|(_, r)| r.iter().copied())
                .collect();
            out.push(Entry {
                addr: p.0,
                len: p.1,
                ranges: merge(ranges, &|| show(p.0, p.1))?,
            });
        }
        for d in &self.deny {
            let ranges = self
                .resolvers
                .iter()
                .filter(|r| key_addr(r.ip()) == *d)
                .map(|r| Range {
                    lo: r.port(),
                    hi: r.port(),
                    protos: TCP | UDP,
                })
                .collect();
            out.push(Entry {
                addr: *d,
                len: 128,
                ranges: merge(ranges, &|| show(*d, 128))?,
            });
        }
        if self.allow.is_some() {
            // Nothing but DNS to the forwarder's own address: the port its upstream
            // sockets use included, so no container process can answer for an upstream.
            // And nothing at all to an engine's resolver on loopback (Docker's
            // 127.0.0.11 serves on a port of its own that port 53 is translated to):
            // names go through the forwarder. 127.0.0.1 and ::1 keep every port but 53.
            let mut only = |addr: Ipv6Addr, ranges: Vec<Range>| {
                out.retain(|e| !(e.addr == addr && e.len == 128));
                out.push(Entry {
                    addr,
                    len: 128,
                    ranges,
                });
            };
            for r in &self.resolvers {
                let k = key_addr(r.ip());
                let lo = k.to_ipv4_mapped().is_some_and(|v| v.is_loopback());
                if lo && k != key_addr(IpAddr::V4(Ipv4Addr::LOCALHOST)) {
                    only(k, Vec::new());
                }
            }
            if let Some(f) = forwarder {
                only(key_addr(f), vec![dns]);
            }
        }
        Ok(out)
    }

    /// The ranges an address `name` resolved to gets (the name rules matching `name`, and
    /// whatever the static entries already give it), or `None` when it gets nothing: no
    /// rule matches, or it is a denied address (deny beats any allow).
    pub fn admitted(&self, name: &str, addr: IpAddr, statics: &[Entry]) -> Option<Vec<Range>> {
        let key = key_addr(addr);
        if self.deny.contains(&key) {
            return None;
        }
        let list = self.allow.as_ref()?;
        let mut ranges: Vec<Range> = list
            .0
            .iter()
            .filter(|r| r.dest.matches_name(name))
            .flat_map(rule_ranges)
            .collect();
        if ranges.is_empty() {
            return None;
        }
        if let Some(e) = longest(statics, key) {
            ranges.extend(e.ranges.iter().copied());
        }
        // Past the cap, the name's own ranges alone (still within the policy).
        merge(ranges.clone(), &|| String::new())
            .or_else(|_| merge(ranges[..1].to_vec(), &|| String::new()))
            .ok()
    }

    /// Why an answer's address is not admitted for a name whatever the name's rules say:
    /// the block it lies in (private, loopback, link-local, CGNAT, ULA, …: the host's own
    /// network, where a name that resolves there is DNS rebinding), unless an address rule
    /// of the list names that address (the operator chose to reach it). An IPv4-mapped or
    /// NAT64 address is judged by the IPv4 address it carries.
    pub fn rebinding(&self, addr: IpAddr) -> Option<&'static str> {
        let block = special_block(addr)?;
        let key = key_addr(addr);
        let named = self.allow.as_ref().is_some_and(|l| {
            l.0.iter().any(|r| match r.dest {
                Dest::Net { addr, len } => contains((addr, len), (key, 128)),
                Dest::Name { .. } => false,
            })
        });
        (!named).then_some(block)
    }

    /// Whether a query for `name` is answered (a name rule matches it).
    pub fn name_allowed(&self, name: &str) -> bool {
        self.allow
            .as_ref()
            .is_some_and(|l| l.0.iter().any(|r| r.dest.matches_name(name)))
    }
}

/// The block of the host's own or a private network `addr` lies in, if any (this
/// network, private, CGNAT, loopback, link-local, ULA, multicast and reserved): what a
/// public name has no business resolving to.
pub fn special_block(addr: IpAddr) -> Option<&'static str> {
    let v4 = match addr {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => a.to_ipv4_mapped().or_else(|| {
            // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
            let (s, o) = (a.segments(), a.octets());
            (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0])
                .then(|| Ipv4Addr::new(o[12], o[13], o[14], o[15]))
        }),
    };
    if let Some(a) = v4 {
        let [o0, o1, ..] = a.octets();
        return match (o0, o1) {
            (0, _) => Some("this network (0.0.0.0/8)"),
            (10, _) => Some("private (10.0.0.0/8)"),
            (100, 64..=127) => Some("CGNAT (100.64.0.0/10)"),
            (127, _) => Some("loopback (127.0.0.0/8)"),
            (169, 254) => Some("link-local (169.254.0.0/16)"),
            (172, 16..=31) => Some("private (172.16.0.0/12)"),
            (192, 168) => Some("private (192.168.0.0/16)"),
            (224..=255, _) => Some("multicast or reserved (224.0.0.0/3)"),
            _ => None,
        };
    }
    let IpAddr::V6(a) = addr else { return None };
    let s0 = a.segments()[0];
    if a.is_unspecified() {
        Some("unspecified (::)")
    } else if a.is_loopback() {
        Some("loopback (::1)")
    } else if s0 & 0xfe00 == 0xfc00 {
        Some("ULA (fc00::/7)")
    } else if s0 & 0xffc0 == 0xfe80 {
        Some("link-local (fe80::/10)")
    } else if s0 & 0xff00 == 0xff00 {
        Some("multicast (ff00::/8)")
    } else {
        None
    }
}

/// The longest static entry holding `key`.
#[allow(dead_code)] // the DNS forwarder's, through `admitted`
pub fn longest(entries: &[Entry], key: Ipv6Addr) -> Option<&Entry> {
    entries
        .iter()
        .filter(|e| contains((e.addr, e.len), (key, 128)))
        .max_by_key(|e| e.len)
}

/// Whether `entries` let (protocol bit, port) reach `ip`, as the programs decide it:
/// the longest prefix's ranges (loopback included). For `verify`
/// and the tests, which compare it with what the kernel does.
#[cfg(test)]
pub fn allows(entries: &[Entry], ip: IpAddr, proto: u8, port: u16) -> bool {
    let key = key_addr(ip);
    let port = if proto == ICMP { 0 } else { port };
    longest(entries, key).is_some_and(|e| {
        e.ranges
            .iter()
            .any(|r| r.protos & proto != 0 && r.lo <= port && port <= r.hi)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> Rule {
        parse_rule(s).unwrap()
    }

    #[test]
    fn name_binding_rules_parse_and_only_narrow() {
        for (given, canon, bind) in [
            (
                "TLS/Api.Example.com.:443",
                "tls/api.example.com:443",
                Bind::Tls,
            ),
            ("http/a.test:80", "http/a.test:80", Bind::Http),
            ("tls/*.a.test:443-8443", "tls/*.a.test:443-8443", Bind::Tls),
            ("a.test:443", "a.test:443", Bind::Plain),
            ("tcp/a.test", "tcp/a.test", Bind::Plain),
        ] {
            let rule = r(given);
            assert_eq!(rule.to_string(), canon, "{given}");
            assert_eq!(r(canon), rule);
            assert_eq!(rule.bind, bind, "{given}");
            assert_eq!(rule.is_name_bound(), bind != Bind::Plain);
            if bind != Bind::Plain {
                assert_eq!(rule.proto, Proto::Tcp, "{given}: TLS and HTTP/1 are TCP");
            }
        }
        for (bad, why) in [
            ("tls/a.test", "take a port"),
            ("http/a.test", "take a port"),
            ("tls/10.0.0.1:443", "not an address"),
            ("http/[2001:db8::1]:80", "not an address"),
            ("tls/10.0.0.0/8:443", "not an address"),
            ("quic/a.test:443", "not an address block or a domain name"),
        ] {
            let e = parse_rule(bad).unwrap_err();
            assert_eq!(e.rule, bad);
            assert!(e.reason.contains(why), "{bad}: {}", e.reason);
        }
        // A bound rule admits less than the plain rule of its name and ports, never more;
        // one binding does not cover the other.
        let covers = |wide: &str, narrow: &str| r(wide).covers(&r(narrow));
        assert!(covers("a.test:443", "tls/a.test:443"));
        assert!(covers("*.test", "http/a.test:80"));
        assert!(covers("tls/*.test:443", "tls/a.test:443"));
        assert!(!covers("tls/a.test:443", "a.test:443"));
        assert!(!covers("tls/a.test:443", "tcp/a.test:443"));
        assert!(!covers("tls/a.test:443", "http/a.test:443"));
        assert!(!covers("http/a.test:80", "tls/a.test:80"));
        assert!(!covers("udp/a.test:443", "tls/a.test:443"));
        assert!(!covers("a.test:443", "tls/b.test:443"));
        let l = parse_list("a.test:443,10.0.0.1,http/b.test:80,tls/c.test:443").unwrap();
        assert_eq!(
            l.name_bound().map(|r| r.to_string()).as_deref(),
            Some("http/b.test:80")
        );
        assert_eq!(
            parse_list("a.test:443,10.0.0.1").unwrap().name_bound(),
            None
        );
        // A recorded policy reads back the same rules.
        let e = Egress {
            allow: Some(l),
            deny: Vec::new(),
            resolvers: Vec::new(),
            forwarder: ForwarderLimits::default(),
            packets: false,
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(Egress::from_json(&v), Some(e));
    }

    #[test]
    fn grammar_round_trips_canonically() {
        for (given, canon) in [
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("TCP/10.1.2.3:443", "tcp/10.1.2.3:443"),
            ("udp/[2001:db8::/32]:53", "udp/[2001:db8::/32]:53"),
            ("[::1]", "[::1]"),
            ("Example.COM.:8000-8080", "example.com:8000-8080"),
            ("*.github.com:443", "*.github.com:443"),
            ("1.2.3.4:1-65535", "1.2.3.4"),
            ("0.0.0.0/0", "0.0.0.0/0"),
        ] {
            assert_eq!(r(given).to_string(), canon, "{given}");
            assert_eq!(r(canon), r(given));
        }
        assert_eq!(parse_list("none").unwrap(), List(vec![]));
        assert_eq!(parse_list("NONE").unwrap().to_string(), "none");
        assert_eq!(
            parse_list("a.b:1, tcp/1.2.3.4 ,a.b:1").unwrap().to_string(),
            "a.b:1,tcp/1.2.3.4"
        );
    }

    #[test]
    fn bad_rules_are_named() {
        for bad in [
            "",
            "10.0.0.1/8",
            "10.0.0.0/33",
            "[::1/129]",
            "2001:db8::1",
            "[2001:db8::1",
            "1.2.3.4:0",
            "1.2.3.4:9-8",
            "1.2.3.4:70000",
            "*.",
            "a..b",
            "-a.b",
            "a.*.b",
            "sctp/1.2.3.4",
            "[::1]x",
            "1.2.3",
        ] {
            let e = parse_rule(bad).unwrap_err();
            assert_eq!(e.rule, bad, "{bad}");
            assert!(!e.reason.is_empty());
        }
        assert!(parse_list("1.2.3.4,,5.6.7.8").is_err());
        assert!(parse_list("1.2.3.4,none").is_err());
        let many: Vec<String> = (0..300)
            .map(|i| format!("10.0.{}.{}", i / 256, i % 256))
            .collect();
        assert!(parse_list(&many.join(",")).is_err());
    }

    #[test]
    fn wildcards_match_subdomains_only() {
        let w = r("*.example.com").dest;
        assert!(w.matches_name("a.example.com"));
        assert!(w.matches_name("a.b.example.com"));
        assert!(!w.matches_name("example.com"));
        assert!(!w.matches_name("badexample.com"));
        assert!(!w.matches_name(".example.com"));
        let e = r("example.com").dest;
        assert!(e.matches_name("example.com"));
        assert!(!e.matches_name("a.example.com"));
    }

    #[test]
    fn covers_is_containment() {
        let wide = r("10.0.0.0/8");
        assert!(wide.covers(&r("tcp/10.1.0.0/16:443")));
        assert!(wide.covers(&r("10.0.0.0/8")));
        assert!(!wide.covers(&r("11.0.0.0/8")));
        assert!(!wide.covers(&r("0.0.0.0/0")));
        assert!(!r("tcp/10.0.0.0/8").covers(&r("10.1.1.1")));
        assert!(!r("10.0.0.0/8:443").covers(&r("10.1.1.1:442-443")));
        assert!(r("*.x.org").covers(&r("a.x.org:1")));
        assert!(r("*.x.org").covers(&r("*.a.x.org")));
        assert!(!r("*.x.org").covers(&r("x.org")));
        assert!(!r("a.x.org").covers(&r("*.a.x.org")));
        // An address block does not cover a name: its addresses are not known in advance.
        assert!(!r("0.0.0.0/0").covers(&r("x.org")));
        // IPv4 and IPv6 blocks do not cover each other, but ::/0 holds the mapped range.
        assert!(!r("0.0.0.0/0").covers(&r("[2001:db8::]")));
        assert!(r("[::/0]").covers(&r("1.2.3.4")));
        let cfg = parse_list("10.0.0.0/8,*.x.org:443").unwrap();
        let ann = parse_list("10.1.1.1:80,a.x.org:443,b.y.org").unwrap();
        let w: Vec<String> = widening(&ann, Some(&cfg))
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(w, ["b.y.org"]);
        assert!(widening(&ann, None).is_empty());
        assert_eq!(widening(&ann, Some(&List(vec![]))).len(), 3);
    }

    #[test]
    fn metadata_denies_include_nat64_forms() {
        let ips: Vec<IpAddr> = METADATA.iter().map(|s| s.parse().unwrap()).collect();
        let d = deny_addrs(&ips);
        assert!(d.contains(&"::ffff:169.254.169.254".parse().unwrap()));
        assert!(d.contains(&"64:ff9b::a9fe:a9fe".parse().unwrap()));
        assert!(d.contains(&"fd00:ec2::254".parse().unwrap()));
        assert_eq!(d.len(), 7);
    }

    fn egress(allow: Option<&str>, deny: &[&str], resolvers: &[&str]) -> Egress {
        let ips: Vec<IpAddr> = deny.iter().map(|s| s.parse().unwrap()).collect();
        Egress {
            allow: allow.map(|a| parse_list(a).unwrap()),
            deny: deny_addrs(&ips),
            resolvers: resolvers
                .iter()
                .map(|s| parse_resolver(s).unwrap())
                .collect(),
            forwarder: ForwarderLimits::default(),
            packets: false,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn without_a_list_everything_but_the_metadata_endpoints() {
        let e = egress(None, &METADATA, &["169.254.169.254"]);
        let t = e.entries(None).unwrap();
        assert!(allows(&t, ip("1.2.3.4"), TCP, 443));
        assert!(allows(&t, ip("2001:db8::1"), UDP, 443));
        assert!(allows(&t, ip("169.254.169.253"), TCP, 80));
        for m in [
            "169.254.169.254",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "fd00:ec2::254",
            "100.100.100.200",
        ] {
            assert!(!allows(&t, ip(m), TCP, 80), "{m}");
            assert!(!allows(&t, ip(m), ICMP, 0), "{m}");
        }
        // GCE's DNS on the metadata address stays open when it is a resolver.
        assert!(allows(&t, ip("169.254.169.254"), UDP, 53));
        assert!(!allows(&t, ip("169.254.170.2"), UDP, 53));
    }

    #[test]
    fn a_list_is_default_deny_and_the_longest_prefix_holds_its_ancestors() {
        let e = egress(
            Some("10.0.0.0/8:80,tcp/10.1.0.0/16:443,[2001:db8::/32]"),
            &METADATA,
            &[],
        );
        let t = e.entries(None).unwrap();
        assert!(allows(&t, ip("10.1.2.3"), TCP, 443));
        assert!(
            allows(&t, ip("10.1.2.3"), TCP, 80),
            "the /8's rule holds inside the /16"
        );
        assert!(!allows(&t, ip("10.1.2.3"), UDP, 443));
        assert!(allows(&t, ip("10.2.0.1"), UDP, 80));
        assert!(!allows(&t, ip("10.2.0.1"), TCP, 443));
        assert!(!allows(&t, ip("11.0.0.1"), TCP, 80));
        assert!(allows(&t, ip("10.9.9.9"), ICMP, 0));
        assert!(allows(&t, ip("2001:db8:1::1"), TCP, 22));
        assert!(allows(&t, ip("127.0.0.1"), TCP, 8080), "loopback");
        assert!(allows(&t, ip("::1"), UDP, 9), "loopback");
        assert!(
            !allows(&t, ip("127.0.0.11"), UDP, 53),
            "DNS only through the forwarder"
        );
        let none = egress(Some("none"), &[], &[]).entries(None).unwrap();
        assert_eq!(none.len(), 2, "loopback only: {none:?}");
        assert!(!allows(&none, ip("8.8.8.8"), UDP, 53));
        assert!(allows(&none, ip("127.0.0.1"), TCP, 1));
        assert!(allows(&none, ip("::ffff:127.9.9.9"), UDP, 54));
        assert!(allows(&none, ip("127.0.0.1"), ICMP, 0));
        assert!(!allows(&none, ip("::1"), TCP, 53));
    }

    #[test]
    fn loopback_under_a_list_spares_dns_the_forwarder_and_loopback_resolvers() {
        let e = egress(
            Some("allowed.test:80,127.0.0.0/8:9000"),
            &[],
            &["127.0.0.11", "127.0.0.1", "10.0.0.2"],
        );
        let f = ip("127.200.0.7");
        let t = e.entries(Some(f)).unwrap();
        for (a, proto, port, want) in [
            ("127.0.0.1", TCP, 8080, true),
            ("127.0.0.1", TCP, 9000, true),
            ("127.0.0.1", UDP, 53, false),
            ("127.0.0.1", TCP, 53, false),
            ("127.3.2.1", UDP, 53, false),
            ("::1", TCP, 53, false),
            ("::1", TCP, 8080, true),
            // Docker's resolver answers on a port of its own: every port refused.
            ("127.0.0.11", UDP, 53, false),
            ("127.0.0.11", UDP, 40000, false),
            ("127.0.0.11", TCP, 9000, false),
            ("::ffff:127.0.0.11", UDP, 40000, false),
            // The forwarder: DNS only (no answer for an upstream reaches its sockets).
            ("127.200.0.7", UDP, 53, true),
            ("127.200.0.7", TCP, 53, true),
            ("127.200.0.7", UDP, 40000, false),
            ("127.200.0.7", TCP, 9000, false),
        ] {
            assert_eq!(allows(&t, ip(a), proto, port), want, "{a} {proto} {port}");
        }
        // Without a list (the fixed programs: no trie) nothing of this is added.
        let open = egress(None, &[], &["127.0.0.11"]).entries(Some(f)).unwrap();
        assert!(allows(&open, ip("127.0.0.11"), UDP, 40000));
    }

    #[test]
    fn deny_beats_a_wider_allow_and_the_forwarder_gets_dns() {
        let e = egress(
            Some("10.0.0.0/8,*.example.com:443"),
            &METADATA,
            &["10.0.0.2"],
        );
        let t = e.entries(Some(ip("127.77.0.1"))).unwrap();
        assert!(!allows(&t, ip("169.254.169.254"), TCP, 80));
        assert!(allows(&t, ip("10.0.0.2"), UDP, 53));
        assert!(allows(&t, ip("127.77.0.1"), UDP, 53));
        assert!(!allows(&t, ip("127.0.0.11"), UDP, 53));
        // The forwarder admits resolved addresses of allowed names only.
        assert!(e.name_allowed("a.example.com"));
        assert!(!e.name_allowed("example.com"));
        let r = e.admitted("a.example.com", ip("2001:db8::5"), &t).unwrap();
        assert_eq!(
            r,
            vec![Range {
                lo: 443,
                hi: 443,
                protos: TCP | UDP
            }]
        );
        assert_eq!(e.admitted("a.example.com", ip("169.254.169.254"), &t), None);
        assert_eq!(e.admitted("b.other.org", ip("192.0.2.1"), &t), None);
        // An answer inside an address rule keeps what the block gives too.
        let r = e.admitted("a.example.com", ip("10.1.1.1"), &t).unwrap();
        assert!(r.iter().any(|x| x.protos & ICMP != 0), "{r:?}");
        assert!(r.iter().any(|x| x.lo == 1 && x.hi == 65535), "{r:?}");
        // Deny beats an allow that covers it.
        let wide = egress(Some("0.0.0.0/0"), &METADATA, &[]);
        let t = wide.entries(None).unwrap();
        assert!(!allows(&t, ip("169.254.169.254"), TCP, 80));
        assert!(allows(&t, ip("169.254.169.253"), TCP, 80));
    }

    #[test]
    fn the_record_round_trips() {
        for e in [
            egress(None, &METADATA, &["10.0.0.2:53", "[fd00::1]:5353"]),
            egress(Some("none"), &[], &[]),
            egress(
                Some("tcp/10.0.0.0/8:443,*.x.org,[2001:db8::/32]:1-1024"),
                &METADATA,
                &[],
            ),
        ] {
            let v = serde_json::to_value(&e).unwrap();
            assert_eq!(Egress::from_json(&v).as_ref(), Some(&e), "{v}");
        }
        assert_eq!(Egress::from_json(&serde_json::Value::Null), None);
    }

    #[test]
    fn too_many_ranges_for_one_prefix_are_refused() {
        let many: Vec<String> = (1..=9)
            .map(|p| format!("tcp/10.0.0.0/8:{}", p * 10))
            .collect();
        let e = egress(Some(&many.join(",")), &[], &[]);
        let err = e.entries(None).unwrap_err();
        assert!(err.contains("10.0.0.0/8"), "{err}");
        assert!(err.contains("at most 8"), "{err}");
    }

    #[test]
    fn resolvers_and_resolv_conf() {
        assert_eq!(
            parse_resolver("10.0.0.2"),
            Some("10.0.0.2:53".parse().unwrap())
        );
        assert_eq!(
            parse_resolver("10.0.0.2:5353"),
            Some("10.0.0.2:5353".parse().unwrap())
        );
        assert_eq!(
            parse_resolver("[fd00::1]"),
            Some("[fd00::1]:53".parse().unwrap())
        );
        assert_eq!(
            parse_resolver("[fd00::1]:54"),
            Some("[fd00::1]:54".parse().unwrap())
        );
        assert_eq!(parse_resolver("x"), None);
        assert_eq!(parse_resolver("1.2.3.4:0"), None);
        let text =
            "search a\nnameserver 10.88.0.1\n# nameserver 9.9.9.9\nnameserver fe80::1%eth0\n\
                    nameserver bogus\nnameserver 1.1.1.1\nnameserver 8.8.8.8\n";
        let got = resolv_conf_nameservers(text);
        let want: Vec<SocketAddr> = ["10.88.0.1:53", "[fe80::1]:53", "1.1.1.1:53"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn rebinding_is_an_answer_in_the_hosts_own_or_a_private_network_no_address_rule_names() {
        for (a, special) in [
            ("10.1.2.3", true),
            ("172.16.0.1", true),
            ("172.32.0.1", false),
            ("192.168.1.1", true),
            ("100.64.0.1", true),
            ("100.128.0.1", false),
            ("169.254.169.254", true),
            ("127.0.0.1", true),
            ("0.0.0.0", true),
            ("224.0.0.1", true),
            ("198.18.0.10", false),
            ("93.184.216.34", false),
            ("::1", true),
            ("fd00::1", true),
            ("fe80::1", true),
            ("ff02::1", true),
            ("2001:4860::8888", false),
            ("::ffff:10.0.0.1", true),
            ("64:ff9b::a00:1", true),
            ("64:ff9b::5db8:d822", false),
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert_eq!(special_block(ip).is_some(), special, "{a}");
        }
        let e = |list: &str| Egress {
            allow: Some(parse_list(list).unwrap()),
            deny: Vec::new(),
            resolvers: Vec::new(),
            forwarder: ForwarderLimits::default(),
            packets: false,
        };
        let private: IpAddr = "10.66.0.1".parse().unwrap();
        assert!(e("rebind.test:7000").rebinding(private).is_some());
        assert!(e("rebind.test:7000,10.66.0.0/16:9")
            .rebinding(private)
            .is_none());
        assert!(e("rebind.test:7000,10.67.0.0/16")
            .rebinding(private)
            .is_some());
        assert!(e("rebind.test")
            .rebinding("93.184.216.34".parse().unwrap())
            .is_none());
    }
}
