//! `moat policy explain`: what the policy would change in a bundle's spec, and why.

use std::path::Path;

use super::Result;
use crate::container::policy::decide;
use crate::policy;
use crate::spec::Spec;

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
    let mut decision = decide(&mut spec, &cfg, "<id>", false)?.decision;
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
        } else if decision.bounded_root.is_some() {
            "no, ephemeral (writes capped, off the engine's storage)"
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
            (policy::Userns::Auto, true) => format!(
                "auto (container 0-{} mapped to a free range of the host pool {}+{}, \
                 rootfs idmapped)",
                cfg.userns_size - 1,
                cfg.userns_pool.0,
                cfg.userns_pool.1
            ),
            (policy::Userns::Auto, false) => "auto, but the engine's own mapping is kept".into(),
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

/// `moat policy explain ID`: what the policy changed in a container, as recorded at create
/// (`policy.json` in its state directory), in the bundle form's layout.
pub fn recorded(root: &Path, id: &str, format: &str) -> Result<i32> {
    let dir = crate::state::ContainerDir::open_read(root, id)?;
    let d = dir.load_decision()?.ok_or_else(|| {
        anyhow::anyhow!("container {id}: no {} recorded", crate::state::POLICY_FILE)
    })?;
    if format == "json" {
        // Through a JSON value: its keys in the order this command has always printed.
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::to_value(&d)?)?
        );
        return Ok(0);
    }
    println!("container {id}: policy {}", d.policy);
    if d.changes.is_empty() {
        println!("no changes: the spec ran as written");
    }
    for (title, items) in [
        ("", &d.changes),
        ("not applied under gVisor:", &d.not_applied),
        ("RESTRICTED would have (audit):", &d.audit),
    ] {
        if items.is_empty() {
            continue;
        }
        if !title.is_empty() {
            println!("{title}");
        }
        for c in items {
            println!("{:<34} {:<8} {}", c.field, c.action, c.detail);
            println!("{:<34} {:<8} because {}", "", "", c.reason);
        }
    }
    Ok(0)
}

/// `moat policy table`: the admission table, as docs/security.md carries it (markdown) or
/// with the sweep's probes (json).
pub fn table(format: &str) -> Result<i32> {
    match format {
        "markdown" => print!("{}", policy::admission::markdown()),
        "json" => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "fields": policy::admission::TABLE,
                "mount_types": policy::MOUNT_TYPES,
                "capabilities": policy::CAPABILITIES,
            }))?
        ),
        f => anyhow::bail!("--format: {f:?} is neither markdown nor json"),
    }
    Ok(0)
}
