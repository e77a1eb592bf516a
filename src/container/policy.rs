//! The policy's host side: [`decide`] reads the host facts the pure `policy::apply` takes
//! and applies it (create, run and `policy explain` all decide through it), and
//! [`explain`] prints what it would change in a bundle (`moat policy explain`).

use std::path::Path;

use super::Result;
use crate::linux::hostfacts::HostFacts;
use crate::policy::{self, Config, Decision, FloorFacts, PolicyError};
use crate::spec::Spec;

/// A decision and the host facts it was made from, which create hands on to the child.
pub struct Decided {
    pub decision: Decision,
    pub host: HostFacts,
    pub floor: FloorFacts,
}

/// Probes the host (its LSMs, the namespaces the RESTRICTED floor compares with) and
/// applies the policy to `spec`. Call it on the host, before anything is forked: the
/// policy and the child decide LSMs and host namespaces from these facts, never from the
/// container's view.
pub fn decide(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
) -> std::result::Result<Decided, PolicyError> {
    let host = HostFacts::probe();
    let floor = crate::linux::namespaces::floor_facts(spec);
    let decision = if test_bypass() {
        policy::apply_unenforced(spec, cfg, id, &host, &floor)?
    } else {
        policy::apply(spec, cfg, id, &host, &floor)?
    };
    Ok(Decided {
        decision,
        host,
        floor,
    })
}

/// Debug (test) builds only: `MOAT_TEST_SKIP_POLICY=1` records a container as RESTRICTED
/// without applying the policy, so tests can prove that `verify` catches it. Release
/// builds do not contain this switch.
fn test_bypass() -> bool {
    cfg!(debug_assertions) && std::env::var_os("MOAT_TEST_SKIP_POLICY").is_some_and(|v| v == "1")
}

/// `moat policy explain` flags.
#[derive(Debug, Clone)]
pub struct ExplainRequest {
    pub bundle: std::path::PathBuf,
    /// `table` or `json`.
    pub format: String,
}

/// Prints what the policy would change in the bundle's spec, and why.
pub fn explain(req: &ExplainRequest) -> Result<i32> {
    let (bundle, format): (&Path, &str) = (&req.bundle, &req.format);
    let mut spec = Spec::load(bundle)?;
    let cfg = policy::Config::load()?;
    // The backend create would choose (annotation, moat-gvisor alias, MOAT_RUNTIME, config).
    let gvisor = crate::gvisor::select(bundle)?;
    let engine_apparmor = spec
        .process
        .as_ref()
        .and_then(|p| p.apparmor_profile.clone());
    let mut decision = decide(&mut spec, &cfg, "<id>")?.decision;
    if let Some(sel) = &gvisor {
        crate::gvisor::policy::adjust(&mut spec, &mut decision, engine_apparmor)?;
        if format != "json" {
            println!("runtime: gVisor ({})", sel.reason);
        }
    }
    if format == "json" {
        println!("{}", serde_json::to_string_pretty(&decision)?);
        return Ok(0);
    }
    let source = cfg
        .source
        .as_ref()
        .map_or("built-in defaults (no /etc/moat/config.toml)".into(), |p| {
            p.display().to_string()
        });
    println!("policy: {} (config: {source})", decision.policy);
    println!(
        "read-only root: {}   network: {}",
        if decision.readonly_rootfs {
            "yes"
        } else {
            "as the engine set it"
        },
        if decision.network_none {
            "none (new empty namespace, lo up)"
        } else {
            "as the engine set it"
        }
    );
    println!(
        "user namespace: {}",
        match (decision.userns, decision.userns_pool) {
            ("auto", true) => format!(
                "auto (container 0-{} mapped to a free range of the host pool {}+{}, \
                 rootfs idmapped)",
                cfg.userns_size - 1,
                cfg.userns_pool.0,
                cfg.userns_pool.1
            ),
            ("auto", false) => "auto, but the engine's own mapping is kept".into(),
            _ =>
                "as the engine set it (moat.userns=auto maps root to an unprivileged range)".into(),
        }
    );
    if decision.changes.is_empty() {
        println!("no changes: the spec runs as written");
    }
    for c in &decision.changes {
        println!("{:<34} {:<8} {}", c.field, c.action, c.detail);
        println!("{:<34} {:<8} because {}", "", "", c.reason);
    }
    if !decision.not_applied.is_empty() {
        println!("not applied under gVisor:");
        for c in &decision.not_applied {
            println!("{:<34} {}", c.field, c.detail);
            println!("{:<34} because {}", "", c.reason);
        }
    }
    Ok(0)
}
