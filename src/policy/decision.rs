//! What the policy decided for one container: the controls it gets, every change made to
//! the engine's spec and why, and the one-line summary moat logs.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::config::HOST_NAMESPACE_TYPES;
use super::egress;
use super::rootfs::{BoundedRoot, Rootfs};
use super::{Config, FloorFacts, Mode};
use crate::linux::hostfacts::HostFacts;

/// Every [`Change::action`] the policy writes.
pub const ACTIONS: [&str; 9] = [
    "removed",
    "set",
    "added",
    "replaced",
    "kept",
    "ignored",
    "not applied",
    "absent",
    "refused",
];

/// One of [`ACTIONS`]. (An alias, not `&'static str` spelt out, which serde's derive would
/// borrow from the input.)
pub type Action = &'static str;

/// One change the policy made to the engine's spec.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Change {
    /// The spec field, as a JSON path.
    pub field: String,
    /// What happened: `removed`, `set`, `added`, `replaced`, `kept`; `ignored` (a loosening
    /// annotation), `not applied` (a floor control this host or caller cannot apply: a
    /// warning line), `absent` (a control this host has no means for, recorded without a
    /// warning: `memory.high` on cgroup v1); one of [`ACTIONS`].
    #[serde(deserialize_with = "action")]
    pub action: Action,
    pub detail: String,
    /// Written from the policy's own texts; read back from a record as it holds it.
    #[serde(default)]
    pub reason: Cow<'static, str>,
}

/// A recorded action, as the one of [`ACTIONS`] it names.
fn action<'de, D: Deserializer<'de>>(d: D) -> Result<Action, D::Error> {
    let s = <Cow<'de, str>>::deserialize(d)?;
    ACTIONS.into_iter().find(|a| *a == s).ok_or_else(|| {
        serde::de::Error::invalid_value(serde::de::Unexpected::Str(&s), &"a policy action")
    })
}

/// Recorded namespace types, as the ones of [`HOST_NAMESPACE_TYPES`] they name.
fn host_namespaces<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    <Vec<Cow<'de, str>>>::deserialize(d)?
        .iter()
        .map(|s| {
            HOST_NAMESPACE_TYPES
                .into_iter()
                .find(|t| t == s)
                .ok_or_else(|| {
                    serde::de::Error::invalid_value(
                        serde::de::Unexpected::Str(s),
                        &"a host namespace type (pid, network, ipc, uts)",
                    )
                })
        })
        .collect()
}

/// `moat.userns`: container root is an unprivileged host range (`auto`), or the engine's
/// mappings stand (`engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Userns {
    Auto,
    /// Also what a record written before `moat.userns` existed reads.
    #[default]
    Engine,
}

/// A decision and the host facts it was made from (`container::policy::decide`), which
/// create hands on to the child.
pub struct Decided {
    pub decision: Decision,
    pub host: HostFacts,
    pub floor: FloorFacts,
}

/// Written to `policy.json` at create and read back by every later command through
/// `state::ContainerDir::save_decision` / `load_decision` alone. A record of an older moat reads
/// through [`Recorded`], which gives the fields it lacks their meaning then.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(from = "Recorded")]
pub struct Decision {
    pub policy: Mode,
    pub readonly_rootfs: bool,
    /// `moat.rootfs` as selected.
    pub rootfs: Rootfs,
    /// An ephemeral root's caps, when the container gets one (not when the spec's root is
    /// read-only anyway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bounded_root: Option<BoundedRoot>,
    pub network_none: bool,
    /// Stack `FLOOR_PROFILE` on top of the spec's own seccomp profile.
    pub seccomp_floor: bool,
    pub userns: Userns,
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
    /// `verify`); not recorded (a recorded decision reads as enforced).
    #[serde(skip)]
    pub enforced: bool,
    /// Fields this moat does not know, in a record a newer moat wrote: kept, so that a
    /// rewrite (`update --egress`) passes them on and `policy explain --format json`
    /// shows them, but acted on by nothing here.
    #[serde(flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// [`Decision`] as `policy.json` holds it, the fields a record of an older moat lacks
/// given their meaning then: no `rootfs` (before `moat.rootfs=ephemeral`: what
/// `readonly_rootfs` says), no `userns` (`engine`), no `bounded_root`, `audit`,
/// `memory_high`, `egress` (none).
#[derive(Deserialize)]
struct Recorded {
    policy: Mode,
    readonly_rootfs: bool,
    #[serde(default)]
    rootfs: Option<Rootfs>,
    #[serde(default)]
    bounded_root: Option<BoundedRoot>,
    network_none: bool,
    seccomp_floor: bool,
    #[serde(default)]
    userns: Userns,
    #[serde(default)]
    userns_pool: bool,
    #[serde(default)]
    changes: Vec<Change>,
    #[serde(default)]
    not_applied: Vec<Change>,
    #[serde(default, deserialize_with = "host_namespaces")]
    host_namespaces: Vec<&'static str>,
    #[serde(default)]
    audit: Vec<Change>,
    #[serde(default)]
    memory_high: Option<f64>,
    #[serde(default)]
    egress: Option<egress::Egress>,
    #[serde(flatten)]
    unknown: BTreeMap<String, serde_json::Value>,
}

impl From<Recorded> for Decision {
    fn from(r: Recorded) -> Decision {
        Decision {
            policy: r.policy,
            readonly_rootfs: r.readonly_rootfs,
            rootfs: r.rootfs.unwrap_or(if r.readonly_rootfs {
                Rootfs::Readonly
            } else {
                Rootfs::Writable
            }),
            bounded_root: r.bounded_root,
            network_none: r.network_none,
            seccomp_floor: r.seccomp_floor,
            userns: r.userns,
            userns_pool: r.userns_pool,
            changes: r.changes,
            not_applied: r.not_applied,
            host_namespaces: r.host_namespaces,
            audit: r.audit,
            memory_high: r.memory_high,
            egress: r.egress,
            enforced: true,
            unknown: r.unknown,
        }
    }
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
pub fn recorded_summary(d: &Decision, id: &str) -> Option<String> {
    // As this summary has always said them: a kept or absent control as `changed`.
    let said: Vec<Change> = d
        .changes
        .iter()
        .chain(&d.not_applied)
        .map(|c| Change {
            action: match c.action {
                "kept" | "absent" => "changed",
                a => a,
            },
            ..c.clone()
        })
        .collect();
    let items = summary_items(said.iter());
    (!items.is_empty()).then(|| {
        format!(
            "policy {} changed container {id}: {items}; every change and why: moat policy \
             explain {id}",
            d.policy
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
        reason: reason.into(),
    });
}
