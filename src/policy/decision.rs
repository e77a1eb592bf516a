//! What the policy decided for one container: the controls it gets, every change made to
//! the engine's spec and why, and the one-line summary moat logs.

use serde::Serialize;

use super::egress;
use super::rootfs::BoundedRoot;
use super::{Config, FloorFacts, Mode};
use crate::linux::hostfacts::HostFacts;

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

#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub policy: Mode,
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
        if cfg.audit && self.policy == Mode::Open {
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
    /// only when it is a terminal and there is no `--log` (a person at a shell), or with
    /// `[log] warn_stderr = true`, since at create moat's stderr is the container's:
    /// engines would show the line in every container log, and scripts would read it
    /// where runc prints nothing.
    pub fn report(&self, id: &str, cfg: &Config) {
        if let Some(line) = self.summary(id, cfg) {
            crate::log::warn_policy(&line, cfg.warn_stderr, true);
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
pub(super) fn summary_items<'a>(changes: impl Iterator<Item = &'a Change>) -> String {
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
        if c.action == "ignored" && c.field.starts_with("annotations.") {
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

/// The configuration a message names: its file and the alias that applied.
pub(super) fn config_name(cfg: &Config) -> String {
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

pub(super) fn change(
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
