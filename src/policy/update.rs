//! `update` under the container's policy: what create would not admit, update does not
//! write either. A pure function from (the mode the container was created under, the
//! config, the resources asked for) to the resources to write and what was changed, or the
//! refusal; `container::update` runs it once, before either backend writes anything.
//!
//! RESTRICTED: a memory, pids or cpu value that would lift a limit of the floor (`-1`,
//! `max`; see `resources::floor_limits`, the code create's floor runs) gets the floor's
//! value instead, and each such change is reported. Device rules are never written, under
//! either policy (update never rewrites them, as runc): containerd's
//! UpdateContainerResources sends the container's rules with every update, so refusing
//! them would refuse every Kubernetes resize; they are left out aloud (a warning naming
//! them), never quietly. rdma limits are not written either, as runc's update reads none
//! (the limits create wrote stay): left out aloud in the same way.

use super::decision::{config_name, summary_items};
use super::resources::{floor_limits, Asked};
use super::{Change, Config, Mode, PolicyError};
use crate::spec::Resources;

/// The resources `update` writes and what the policy changed in them.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    pub resources: Resources,
    pub changes: Vec<Change>,
}

/// Why device rules are left alone.
const DEVICES_DROPPED: &str = "update never rewrites device rules (as runc); recreate the \
     container to change them";

/// Why rdma limits are left alone.
const RDMA_DROPPED: &str = "update never rewrites rdma limits (as runc); the limits create \
     wrote stay; recreate the container to change them";

/// The resources an update of a container created under `mode` may write, from the
/// `requested` ones (after `container::update::normalize`, runc's reading of its flags).
pub fn admit(mode: Mode, cfg: &Config, requested: &Resources) -> Result<Admitted, PolicyError> {
    let mut resources = requested.clone();
    let mut changes = Vec::new();
    if let Some(rdma) = resources.rdma.take() {
        let devices: Vec<&str> = rdma
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        changes.push(Change {
            field: "linux.resources.rdma".into(),
            action: "ignored",
            detail: format!("device(s) {}", devices.join(", ")),
            reason: RDMA_DROPPED.into(),
        });
    }
    if !resources.devices.is_empty() {
        changes.push(Change {
            field: "linux.resources.devices".into(),
            action: "ignored",
            detail: format!("{} rule(s)", resources.devices.len()),
            reason: DEVICES_DROPPED.into(),
        });
        resources.devices.clear();
    }
    if mode == Mode::Restricted {
        changes.extend(floor_limits(&mut resources, cfg, Asked::Update));
    }
    Ok(Admitted { resources, changes })
}

/// The warning line for an update the policy changed, or `None` when it writes what was
/// asked; like create's summary (`Decision::summary`), logged with `log::warn_policy`.
pub fn summary(id: &str, mode: Mode, cfg: &Config, changes: &[Change]) -> Option<String> {
    let items = summary_items(changes.iter());
    (!items.is_empty()).then(|| {
        format!(
            "policy {mode} ({}) changed the update of container {id}: {items}",
            config_name(cfg)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{self, Resources};

    fn cfg() -> Config {
        Config {
            memory: Some(256 << 20),
            pids: Some(100),
            cpus: Some(0.5),
            ..Config::default()
        }
    }

    fn res(v: serde_json::Value) -> Resources {
        serde_json::from_value(v).unwrap()
    }

    fn fields(a: &Admitted) -> Vec<&str> {
        a.changes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn restricted_replaces_every_value_that_lifts_a_floor_limit() {
        let asked = res(serde_json::json!({
            "memory": {"limit": -1, "swap": -1},
            "pids": {"limit": -1},
            "cpu": {"quota": -1, "shares": 512},
        }));
        let a = admit(Mode::Restricted, &cfg(), &asked).unwrap();
        let r = &a.resources;
        assert_eq!(r.memory.as_ref().unwrap().limit, Some(256 << 20));
        // The floor sets no swap limit: what was asked stays.
        assert_eq!(r.memory.as_ref().unwrap().swap, Some(-1));
        assert_eq!(r.pids.as_ref().unwrap().limit, Some(100));
        let cpu = r.cpu.as_ref().unwrap();
        assert_eq!((cpu.quota, cpu.period), (Some(50_000), Some(100_000)));
        assert_eq!(cpu.shares, Some(512));
        assert_eq!(
            fields(&a),
            [
                "linux.resources.memory.limit",
                "linux.resources.pids.limit",
                "linux.resources.cpu.quota"
            ]
        );
        assert!(a.changes.iter().all(|c| c.action == "replaced"));
        assert_eq!(a.changes[1].detail, "-1 with 100");
        assert_eq!(a.changes[2].detail, "-1 with 50000 per 100000");
    }

    #[test]
    fn restricted_replaces_unified_max() {
        let asked = res(serde_json::json!({"unified": {
            "memory.max": "max",
            "pids.max": " max\n",
            "cpu.max": "max 20000",
            "memory.swap.max": "max",
            "memory.high": "max",
        }}));
        let a = admit(Mode::Restricted, &cfg(), &asked).unwrap();
        let u = a.resources.unified.as_ref().unwrap();
        assert_eq!(u["memory.max"], (256 << 20).to_string());
        assert_eq!(u["pids.max"], "100");
        assert_eq!(
            u["cpu.max"], "10000 20000",
            "the floor's share of the period given"
        );
        // Neither is a limit the floor sets.
        assert_eq!(u["memory.swap.max"], "max");
        assert_eq!(u["memory.high"], "max");
        assert_eq!(
            fields(&a),
            [
                "linux.resources.unified.memory.max",
                "linux.resources.unified.pids.max",
                "linux.resources.unified.cpu.max"
            ]
        );
        let a = admit(
            Mode::Restricted,
            &cfg(),
            &res(serde_json::json!({"unified": {"cpu.max": "max", "memory.max": "-1"}})),
        )
        .unwrap();
        let u = a.resources.unified.as_ref().unwrap();
        assert_eq!(u["cpu.max"], "50000 100000");
        assert_eq!(u["memory.max"], (256 << 20).to_string());
    }

    #[test]
    fn what_keeps_a_limit_is_written_as_asked() {
        let asked = res(serde_json::json!({
            "memory": {"limit": 1 << 30},
            "pids": {"limit": 5000},
            "cpu": {"quota": 400_000, "period": 100_000},
            "unified": {"memory.max": "1073741824", "pids.max": "0", "cpu.max": "300000 100000"},
            "blockIO": {"weight": 300},
        }));
        let a = admit(Mode::Restricted, &cfg(), &asked).unwrap();
        assert_eq!(a.resources, asked, "create would admit each of these");
        assert!(a.changes.is_empty());
        // Left out means unchanged at update (at create it would get the floor's).
        let a = admit(Mode::Restricted, &cfg(), &Resources::default()).unwrap();
        assert_eq!(a.resources, Resources::default());
        // A memory limit of 0 is not written at all (unset), so it lifts nothing.
        let zero = res(serde_json::json!({"memory": {"limit": 0}}));
        assert_eq!(
            admit(Mode::Restricted, &cfg(), &zero).unwrap().resources,
            zero
        );
    }

    #[test]
    fn a_period_without_a_quota_gets_the_floors_quota() {
        // cgroup v2 writes it as "max PERIOD", which lifts the quota.
        let asked = res(serde_json::json!({"cpu": {"period": 10_000}}));
        let a = admit(Mode::Restricted, &cfg(), &asked).unwrap();
        let cpu = a.resources.cpu.as_ref().unwrap();
        assert_eq!((cpu.quota, cpu.period), (Some(5_000), Some(10_000)));
        assert_eq!(fields(&a), ["linux.resources.cpu.quota"]);
    }

    #[test]
    fn a_floor_the_config_does_not_set_holds_nothing() {
        let asked = res(serde_json::json!({
            "memory": {"limit": -1},
            "cpu": {"quota": -1},
            "unified": {"memory.max": "max", "cpu.max": "max"},
        }));
        // The built-in config caps pids alone.
        let a = admit(Mode::Restricted, &Config::default(), &asked).unwrap();
        assert_eq!(a.resources, asked);
        let a = admit(
            Mode::Restricted,
            &Config::default(),
            &res(serde_json::json!({"pids": {"limit": -1}})),
        )
        .unwrap();
        assert_eq!(a.resources.pids, Some(spec::Pids { limit: Some(4096) }));
        // runtime-spec 1.3: 0 is a limit (the tightest), kept; a pids without a limit
        // changes nothing and lifts nothing.
        for kept in [serde_json::json!({"limit": 0}), serde_json::json!({})] {
            let asked = res(serde_json::json!({ "pids": kept }));
            let a = admit(Mode::Restricted, &Config::default(), &asked).unwrap();
            assert_eq!(a.resources, asked);
            assert!(a.changes.is_empty(), "{:?}", a.changes);
        }
    }

    #[test]
    fn open_writes_what_was_asked() {
        let asked = res(serde_json::json!({
            "memory": {"limit": -1},
            "pids": {"limit": -1},
            "cpu": {"quota": -1},
            "unified": {"pids.max": "max"},
        }));
        let a = admit(Mode::Open, &cfg(), &asked).unwrap();
        assert_eq!(a.resources, asked);
        assert!(a.changes.is_empty());
        assert!(summary("c1", Mode::Open, &cfg(), &a.changes).is_none());
    }

    #[test]
    fn device_rules_are_never_written_and_left_out_aloud() {
        let asked = res(serde_json::json!({
            "devices": [{"allow": true, "access": "rwm"}],
            "pids": {"limit": 50},
        }));
        for mode in [Mode::Restricted, Mode::Open] {
            let a = admit(mode, &cfg(), &asked).unwrap();
            assert!(a.resources.devices.is_empty(), "{mode}");
            assert_eq!(a.resources.pids, Some(spec::Pids { limit: Some(50) }));
            assert_eq!(fields(&a), ["linux.resources.devices"]);
            let line = summary("c1", mode, &cfg(), &a.changes).unwrap();
            assert!(line.contains("linux.resources.devices: ignored"), "{line}");
        }
    }

    #[test]
    fn rdma_is_left_out_aloud_in_both_modes() {
        let asked = res(serde_json::json!({"rdma": {"mlx5_0": {"hcaHandles": 1}},
                                           "pids": {"limit": 500}}));
        for mode in [Mode::Open, Mode::Restricted] {
            let a = admit(mode, &cfg(), &asked).unwrap();
            assert_eq!(a.resources.rdma, None, "{mode}");
            assert_eq!(
                a.resources.pids.as_ref().unwrap().limit,
                Some(500),
                "{mode}"
            );
            let c = &a.changes[0];
            assert_eq!(c.field, "linux.resources.rdma");
            assert_eq!(
                (c.action, c.detail.as_str()),
                ("ignored", "device(s) mlx5_0")
            );
        }
    }

    #[test]
    fn the_warning_names_each_key_and_value() {
        let asked = res(serde_json::json!({"pids": {"limit": -1}}));
        let a = admit(Mode::Restricted, &cfg(), &asked).unwrap();
        let line = summary("c1", Mode::Restricted, &cfg(), &a.changes).unwrap();
        assert_eq!(
            line,
            "policy restricted (the built-in configuration) changed the update of container \
             c1: linux.resources.pids.limit: replaced -1 with 100"
        );
    }

    #[test]
    fn create_and_update_share_the_floor() {
        // What update replaces, create replaces too: the same values get the same limits.
        let lifting = res(serde_json::json!({
            "memory": {"limit": -1},
            "pids": {"limit": -1},
            "cpu": {"quota": -1},
            "unified": {"memory.max": "max", "pids.max": "max", "cpu.max": "max"},
        }));
        let mut at_create = lifting.clone();
        let changes = floor_limits(&mut at_create, &cfg(), Asked::Create);
        let at_update = admit(Mode::Restricted, &cfg(), &lifting).unwrap();
        assert_eq!(at_create, at_update.resources);
        assert_eq!(changes.len(), at_update.changes.len());
        assert!(changes.iter().all(|c| c.action == "set"));
    }
}
