//! The egress policy a container gets: the annotation's list (narrowing the config's),
//! the config's under RESTRICTED, the metadata block.

use super::{self as egress};
use crate::policy::decision::{change, config_name};
use crate::policy::{Config, Decision, FloorFacts, PolicyError};

/// The egress policy: the annotation's list (which may only narrow the config's `allow`),
/// else the config's under RESTRICTED; the metadata endpoints refused under RESTRICTED
/// (`deny_metadata`), whatever the list says. OPEN takes only what the annotation asks.
pub(in crate::policy) fn decide(
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
    // Before anything else about the list: a runtime that enforced the binding would take
    // it here; none does yet, so the rule is refused by name rather than run plain.
    if let Some(r) = allow.as_ref().and_then(|l| l.name_bound()) {
        return Err(PolicyError::EgressNameBound {
            rule: r.to_string(),
        });
    }
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
        forwarder: cfg.egress_forwarder,
        packets: false,
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
