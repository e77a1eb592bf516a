//! `update`: change the cgroup limits of a running container. Only what is given is
//! written, and only what the container's policy admits (`policy::update`: under
//! RESTRICTED no limit of the floor is lifted; device rules are never written, with a
//! warning, as runc never rewrites them). The change is folded into the saved spec so later
//! calls see it.

use std::io::Read;

use anyhow::Context as _;

use super::{Container, Context, Error, Result};
use crate::spec::Resources;
use crate::state::Status;

/// runc's `update`: the resources its flags or its `--resources` file give.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub resources: Resources,
    /// `--egress LIST`: the new egress list ("" = the config's default).
    pub egress: Option<String>,
}

pub fn update(ctx: &Context, req: &Request) -> Result<i32> {
    let mut res = req.resources.clone();
    normalize(&mut res);
    let c = Container::open(ctx, &req.id)?;
    // Before anything is written (the egress list included), so that a refused update
    // changes nothing, and for both backends alike.
    let res = admitted(&c, &res)?;
    if let Some(list) = &req.egress {
        c.engine().update_egress(ctx, &c, list)?;
        if res == Resources::default() {
            return Ok(0);
        }
    }
    c.engine().update(ctx, &c, res)
}

/// The resources the container's policy admits from `res` (`policy::update::admit`: update
/// admits what create would admit), with its changes logged as create logs its own.
fn admitted(c: &Container, res: &Resources) -> Result<Resources> {
    use crate::policy::update;
    let cfg = crate::policy::Config::load()?;
    let mode = c.record.policy;
    let a = update::admit(mode, &cfg, res)?;
    if let Some(line) = update::summary(&c.record.id, mode, &cfg, &a.changes) {
        crate::log::warn_policy(&line, cfg.warn_stderr, false);
    }
    Ok(a.resources)
}

/// `update --egress LIST`: the container's egress policy replaced in one map write (the
/// programs see the old rules or the new ones, never a mix), recorded in `policy.json`.
/// The list may only narrow the config's `[egress] allow` (RESTRICTED); "" returns to the
/// config's default. The DNS forwarder gets the new list and trie before the swap and
/// re-admits there the live answers the new list still allows (the others are dropped
/// with the old rules); names need the forwarder, which is
/// started at create.
pub fn native_egress(c: &Container, text: &str) -> Result<()> {
    if c.record.status(&c.dir) == Status::Stopped {
        return Err(Error::NotRunning.into());
    }
    replace_egress(c, text)
}

/// [`native_egress`] once the container is known to run: also a gVisor sandbox's, whose
/// programs are on the cgroup its record holds (`gvisor::egress`).
pub fn replace_egress(c: &Container, text: &str) -> Result<()> {
    use crate::linux::egress::{self as enforce, Installed};
    use crate::policy::egress::{self, Egress};
    let cfg = crate::policy::Config::load()?;
    let mut recorded = c.dir.load_decision()?.ok_or_else(|| {
        anyhow::anyhow!(
            "container {}: no {} recorded",
            c.record.id,
            crate::state::POLICY_FILE
        )
    })?;
    let restricted = recorded.policy == crate::policy::Mode::Restricted;
    let old = recorded.egress.clone();
    let configured = if restricted {
        cfg.egress_allow.clone()
    } else {
        None
    };
    let allow = if text.trim().is_empty() {
        configured
    } else {
        let list = egress::parse_list(text).map_err(|e| anyhow::anyhow!("--egress: {e}"))?;
        if let Some(r) = egress::widening(&list, configured.as_ref()).first() {
            anyhow::bail!(
                "--egress: rule {r} is outside what the config allows ([egress] allow = \"{}\"); \
                 update may only narrow it",
                configured.map(|l| l.to_string()).unwrap_or_default()
            );
        }
        Some(list)
    };
    if let Some(r) = allow.as_ref().and_then(|l| l.name_bound()) {
        anyhow::bail!(
            "--egress: rule {r} binds connections to a name (tls/, http/), which this moat \
             does not enforce, natively or under gVisor; it is not run as a plain name rule"
        );
    }
    let new = Egress {
        allow,
        deny: match &old {
            Some(o) => o.deny.clone(),
            None if restricted && cfg.egress_deny_metadata => {
                egress::deny_addrs(&cfg.egress_metadata)
            }
            None => Vec::new(),
        },
        resolvers: old
            .as_ref()
            .map(|o| o.resolvers.clone())
            .or_else(|| cfg.egress_resolvers.clone())
            .unwrap_or_default(),
        forwarder: old.as_ref().map_or(cfg.egress_forwarder, |o| o.forwarder),
        packets: old.as_ref().is_some_and(|o| o.packets),
    };
    if new.has_names() && !old.as_ref().is_some_and(Egress::has_names) {
        anyhow::bail!(
            "--egress: {} names domains, which need moat's DNS forwarder; it starts at create \
             when the container's list names one: create the container with such a list",
            new.allow
                .as_ref()
                .map(|l| l.to_string())
                .unwrap_or_default()
        );
    }
    let Some(dir) = c.record.cgroup.as_ref().and_then(|cg| cg.v2_dir()) else {
        return Err(enforce::EgressError::NoCgroup(format!("container {}", c.record.id)).into());
    };
    // Raw sockets already open pass no connect or sendmsg hook, and cannot be closed: a
    // list is put in force over them only where the packet program already judges them.
    let installed = Installed::find(&dir)?;
    if new.allow.is_some() && installed.as_ref().is_none_or(|i| i.list.is_none()) {
        let raw = c
            .dir
            .load_spec()
            .ok()
            .and_then(|s| s.process)
            .is_none_or(|p| crate::policy::holds(&p, "CAP_NET_RAW"));
        if raw {
            anyhow::bail!(
                "--egress: container {} holds CAP_NET_RAW and has no packet program: raw \
                 sockets it already opened would send past the list; recreate it with the list \
                 (or with [egress] allow_raw_sockets)",
                c.record.id
            );
        }
    }
    // The forwarder's own entry (a loopback /128 the old rules did not make) stays.
    let old_static = old
        .as_ref()
        .and_then(|o| o.entries(None).ok())
        .unwrap_or_default();
    let forwarder = match installed {
        Some(inst) => inst
            .entries()
            .map_err(|e| anyhow::anyhow!("egress policy: cannot read the rules in force: {e}"))?
            .into_iter()
            .find(|e| {
                e.len == 128
                    && e.addr.to_ipv4_mapped().is_some_and(|v| v.is_loopback())
                    && !old_static.iter().any(|s| s.addr == e.addr && s.len == 128)
            })
            .and_then(|e| e.addr.to_ipv4_mapped())
            .map(std::net::IpAddr::V4),
        None => None,
    };
    // The new list is in force first (the selector flips: moat's own decision); then the
    // DNS forwarder gets it and the trie now selected (it cannot open maps itself) and
    // re-admits there the answers the new list still allows. Its answers under the old
    // list never reach the new trie. A forwarder that does not take the new list is
    // stopped: lookups fail closed rather than go on under the old list.
    let state = c.dir.file("");
    enforce::replace_with(&dir, &new, forwarder, |t| {
        if let Err(e) = crate::linux::egress::forwarder::reconfigure(&state, &new, t) {
            crate::linux::egress::forwarder::stop(&state, None);
            crate::log::warn(&format!(
                "container {}: the new egress list is in force; {e}: the DNS forwarder was \
                 stopped (names no longer resolve)",
                c.record.id
            ));
        }
        Ok(())
    })?;
    recorded.egress = Some(new);
    c.dir
        .save_decision(&recorded, crate::state::Save::Replace)
        .context("cannot record the egress update")?;
    Ok(())
}

pub fn native(c: &Container, res: &Resources) -> Result<()> {
    if c.record.status(&c.dir) == Status::Stopped {
        return Err(Error::NotRunning.into());
    }
    let Some(cg) = &c.record.cgroup else {
        return Err(Error::UpdateNoCgroup {
            id: c.record.id.clone(),
        }
        .into());
    };
    let res = &with_memory_high(c, res);
    crate::linux::killpoint::at("update", "parent", "cgroup");
    cg.update(res)?;
    crate::linux::killpoint::at("update", "parent", "record");
    let mut spec = c.dir.load_spec().context("cannot record the update")?;
    let linux = spec.linux.get_or_insert_with(Default::default);
    linux
        .resources
        .get_or_insert_with(Default::default)
        .merge(res);
    c.dir.save_spec(&spec).context("cannot record the update")?;
    Ok(())
}

/// A new memory limit moves the `memory.high` moat set at create with it (the share
/// `policy.json` records), unless the update sets `memory.high` itself; unlimited memory
/// lifts it too.
fn with_memory_high(c: &Container, res: &Resources) -> Resources {
    let mut res = res.clone();
    let Some(limit) = res.memory.as_ref().and_then(|m| m.limit) else {
        return res;
    };
    if res
        .unified
        .as_ref()
        .is_some_and(|u| u.contains_key("memory.high"))
    {
        return res;
    }
    let share = c
        .dir
        .load_decision()
        .ok()
        .flatten()
        .and_then(|d| d.memory_high);
    if let Some(share) = share {
        let high = if limit > 0 {
            crate::policy::high_of(limit, share).to_string()
        } else {
            "max".to_string()
        };
        res.unified
            .get_or_insert_with(Default::default)
            .insert("memory.high".into(), high);
    }
    res
}

/// Reads a `linux.resources` object from a file or stdin ('-'), naming the field and
/// line of a mistake.
pub fn read_resources(src: &str) -> Result<Resources> {
    let (bytes, name) = if src == "-" {
        let mut b = Vec::new();
        std::io::stdin()
            .read_to_end(&mut b)
            .context("cannot read resources from standard input")?;
        (b, "standard input".to_string())
    } else {
        let b = std::fs::read(src).with_context(|| format!("cannot read {src}"))?;
        (b, src.to_string())
    };
    parse_resources(&bytes).with_context(|| format!("invalid resources in {name}"))
}

pub fn parse_resources(bytes: &[u8]) -> Result<Resources> {
    // Keys checked first (duplicates, case variants of fields): spec::keys.
    let res: Resources = crate::spec::from_slice(bytes).map_err(|e| {
        if e.field == "top level" {
            anyhow::anyhow!("{}", e.message)
        } else {
            anyhow::anyhow!("{e}")
        }
    })?;
    // devices and rdma are kept: the container's policy decides (`policy::update`).
    Ok(res)
}

/// runc's update semantics: unlimited memory without a swap value means unlimited swap
/// too (or the memsw limit would refuse it). (A pids limit of 0 is a limit, as
/// runtime-spec 1.3 and runc 1.4 read it; a `pids` without a limit changes nothing.)
pub fn normalize(res: &mut Resources) {
    if let Some(m) = &mut res.memory {
        if m.limit == Some(-1) && m.swap.is_none() {
            m.swap = Some(-1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_errors_name_field_and_line() {
        let e = parse_resources(b"{\"memory\": {\n \"limit\": \"lots\"}}").unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("memory.limit"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
        let e = parse_resources(b"{\"memory\": ").unwrap_err();
        assert!(format!("{e:#}").contains("line 1"), "{e:#}");
        let r = parse_resources(br#"{"pids":{"limit":5},"devices":[{"allow":true}]}"#).unwrap();
        assert_eq!(r.pids.unwrap().limit, Some(5));
        assert_eq!(r.devices.len(), 1, "the policy decides about device rules");
    }
}
