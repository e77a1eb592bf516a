//! `linux.resources` as systemd unit properties, for the ones systemd has (the rest, and
//! every value again, goes to the cgroup files as under the cgroupfs driver). Values
//! systemd would otherwise reset on `daemon-reload` are sent here rather than written to
//! cgroupfs alone: `MemorySwapMax` also when it is 0, `IOWeight`.
//!
//! Pure: the D-Bus client turns each [`Prop`] into a variant.

use super::super::devices::{self, DevType, Rule};
use super::super::{v2, CgroupError};
use crate::spec;

/// systemd's "infinity" for the `u64` limits.
pub const INFINITY: u64 = u64::MAX;

/// One unit property and its value, in the D-Bus types systemd expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prop {
    U64(&'static str, u64),
    Str(&'static str, String),
    Bytes(&'static str, Vec<u8>),
    /// `DeviceAllow`: `(path, access)` pairs.
    Devices(Vec<(String, String)>),
}

impl Prop {
    pub fn name(&self) -> &'static str {
        match self {
            Prop::U64(n, _) | Prop::Str(n, _) | Prop::Bytes(n, _) => n,
            Prop::Devices(_) => "DeviceAllow",
        }
    }
}

/// OCI -1 (unlimited) → infinity; 0 or absent → not sent.
fn limit(v: Option<i64>) -> Option<u64> {
    match v? {
        -1 => Some(INFINITY),
        n if n > 0 => u64::try_from(n).ok(),
        _ => None,
    }
}

/// The properties for `res`, in the order systemd applies them. `devices_text` is
/// `/proc/devices` (names of majors, for wildcard minors). `v1`: a v1 or hybrid host,
/// where systemd has v1's names (`MemoryLimit`, `CPUShares`, `BlockIOWeight`) and none
/// for swap, low/high/min memory or cpusets: those are only in the files.
pub fn from_resources(
    res: &spec::Resources,
    devices_text: &str,
    v1: bool,
) -> Result<Vec<Prop>, CgroupError> {
    let mut out = from_resources_v2(res, devices_text)?;
    if v1 {
        out.retain(|p| {
            !matches!(
                p.name(),
                "MemoryLow"
                    | "MemoryHigh"
                    | "MemoryMin"
                    | "MemorySwapMax"
                    | "AllowedCPUs"
                    | "AllowedMemoryNodes"
            )
        });
        for p in out.iter_mut() {
            let renamed = match p {
                Prop::U64("MemoryMax", v) => Prop::U64("MemoryLimit", *v),
                Prop::U64("IOWeight", _) => Prop::U64(
                    "BlockIOWeight",
                    res.block_io
                        .as_ref()
                        .and_then(|b| b.weight)
                        .map_or(0, u64::from),
                ),
                Prop::U64("CPUWeight", _) => Prop::U64(
                    "CPUShares",
                    res.cpu.as_ref().and_then(|c| c.shares).unwrap_or(0),
                ),
                _ => continue,
            };
            *p = renamed;
        }
    }
    Ok(out)
}

fn from_resources_v2(res: &spec::Resources, devices_text: &str) -> Result<Vec<Prop>, CgroupError> {
    let mut out = Vec::new();
    if let Some(m) = &res.memory {
        if let Some(v) = limit(m.limit) {
            out.push(Prop::U64("MemoryMax", v));
        }
        if let Some(v) = limit(m.reservation) {
            out.push(Prop::U64("MemoryLow", v));
        }
        match v2::swap_max(m.limit, m.swap)?.as_deref() {
            None => {}
            Some("max") => out.push(Prop::U64("MemorySwapMax", INFINITY)),
            Some(n) => out.push(Prop::U64("MemorySwapMax", n.parse().unwrap_or(INFINITY))),
        }
    }
    if let Some(limit) = res.pids.as_ref().and_then(|p| p.limit) {
        // As the cgroupfs writers (`v2::pids_max`): 0 is 1, a negative limit none.
        let n = match limit {
            n if n > 0 => u64::try_from(n).unwrap_or(INFINITY),
            0 => 1,
            _ => INFINITY,
        };
        out.push(Prop::U64("TasksMax", n));
    }
    if let Some(c) = &res.cpu {
        if let Some(s) = c.shares.filter(|&s| s != 0) {
            out.push(Prop::U64("CPUWeight", v2::cpu_weight(s)));
        }
        let period = c.period.filter(|&p| p != 0);
        if let Some(p) = period {
            out.push(Prop::U64("CPUQuotaPeriodUSec", p));
        }
        match c.quota.filter(|&q| q != 0) {
            Some(q) if q > 0 => {
                out.push(Prop::U64(
                    "CPUQuotaPerSecUSec",
                    quota_per_sec(u64::try_from(q).unwrap_or(0), period.unwrap_or(100_000)),
                ));
            }
            Some(_) => out.push(Prop::U64("CPUQuotaPerSecUSec", INFINITY)),
            None => {}
        }
        if let Some(cpus) = c.cpus.as_deref().filter(|s| !s.is_empty()) {
            out.push(Prop::Bytes(
                "AllowedCPUs",
                mask(cpus, "linux.resources.cpu.cpus")?,
            ));
        }
        if let Some(mems) = c.mems.as_deref().filter(|s| !s.is_empty()) {
            out.push(Prop::Bytes(
                "AllowedMemoryNodes",
                mask(mems, "linux.resources.cpu.mems")?,
            ));
        }
    }
    if let Some(w) = res
        .block_io
        .as_ref()
        .and_then(|b| b.weight)
        .filter(|&w| w != 0)
    {
        out.push(Prop::U64("IOWeight", v2::io_weight(w)));
    }
    if let Some(u) = &res.unified {
        for (key, prop) in [
            ("memory.high", "MemoryHigh"),
            ("memory.low", "MemoryLow"),
            ("memory.min", "MemoryMin"),
            ("memory.max", "MemoryMax"),
            ("memory.swap.max", "MemorySwapMax"),
            ("pids.max", "TasksMax"),
        ] {
            if let Some(v) = u.get(key) {
                let v = match v.trim() {
                    "max" => INFINITY,
                    n => n.parse().map_err(|_| {
                        CgroupError::invalid(
                            format!("linux.resources.unified[{key:?}]"),
                            format!("{v:?} is not a number or \"max\""),
                        )
                    })?,
                };
                out.retain(|p| p.name() != prop);
                out.push(Prop::U64(prop, v));
            }
        }
    }
    if !res.devices.is_empty() {
        out.extend(device_props(&devices::rules(&res.devices)?, devices_text));
    }
    Ok(out)
}

/// `CPUQuotaPerSecUSec`: the quota per second, rounded up to systemd's 10 ms step so
/// that systemd's own `cpu.max` never allows less than asked (moat then writes the exact
/// value to `cpu.max`).
pub fn quota_per_sec(quota: u64, period: u64) -> u64 {
    let per_sec = quota.saturating_mul(1_000_000) / period.max(1);
    per_sec.div_ceil(10_000).saturating_mul(10_000)
}

/// `0-3,5` → the byte mask systemd takes for `AllowedCPUs`/`AllowedMemoryNodes` (bit n
/// of byte n/8).
pub fn mask(list: &str, field: &str) -> Result<Vec<u8>, CgroupError> {
    let bad = || {
        CgroupError::invalid(
            field,
            format!("{list:?} is not a list of numbers and ranges"),
        )
    };
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: usize = a.trim().parse().map_err(|_| bad())?;
        let b: usize = b.trim().parse().map_err(|_| bad())?;
        if a > b || b >= 8192 {
            return Err(bad());
        }
        for n in a..=b {
            if out.len() <= n / 8 {
                out.resize(n / 8 + 1, 0);
            }
            out[n / 8] |= 1 << (n % 8);
        }
    }
    Ok(out)
}

/// systemd's device list only allows, so it gets every device some rule allows after
/// the last rule that resets access; moat's own device filter, attached to the same
/// cgroup, then applies the exact rules (a device must pass both). An allow-all ends in
/// `DevicePolicy=auto`.
fn device_props(rules: &[Rule], devices_text: &str) -> Vec<Prop> {
    let start = rules.iter().rposition(Rule::is_reset);
    if let Some(i) = start {
        if rules[i].allow {
            return vec![Prop::Str("DevicePolicy", "auto".into())];
        }
    }
    let mut allow: Vec<(String, String)> = Vec::new();
    for r in rules[start.map_or(0, |i| i + 1)..]
        .iter()
        .filter(|r| r.allow)
    {
        let access = devices::access_str(r.access);
        for (kind, typ) in [("char", DevType::Char), ("block", DevType::Block)] {
            if r.typ != DevType::All && r.typ != typ {
                continue;
            }
            let path = match (r.major, r.minor) {
                (Some(ma), Some(mi)) => format!("/dev/{kind}/{ma}:{mi}"),
                (Some(ma), None) => match major_name(devices_text, kind, ma) {
                    Some(name) => format!("{kind}-{name}"),
                    None => format!("{kind}-*"),
                },
                (None, _) => format!("{kind}-*"),
            };
            match allow.iter_mut().find(|(p, _)| *p == path) {
                Some((_, a)) => {
                    let mut bits: Vec<char> = a.chars().collect();
                    bits.extend(access.chars().filter(|c| !a.contains(*c)));
                    *a = bits.into_iter().collect();
                }
                None => allow.push((path, access.clone())),
            }
        }
    }
    vec![
        Prop::Str("DevicePolicy", "strict".into()),
        Prop::Devices(allow),
    ]
}

/// The driver name of `major` in `/proc/devices`' "Character devices:" or "Block
/// devices:" section.
fn major_name(text: &str, kind: &str, major: u32) -> Option<String> {
    let header = if kind == "char" {
        "Character devices:"
    } else {
        "Block devices:"
    };
    text.split("\n\n")
        .find(|s| s.trim_start().starts_with(header))?
        .lines()
        .skip(1)
        .find_map(|l| {
            let (n, name) = l.trim().split_once(' ')?;
            (n.parse::<u32>().ok()? == major).then(|| name.trim().to_string())
        })
}
