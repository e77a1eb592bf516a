//! The hardening policy on the gVisor path: `policy::apply` on the engine's spec, then what
//! differs under runsc; `gvisor::spec` serialises the result for runsc.
//!
//! | control | under gVisor |
//! |---|---|
//! | capabilities, `noNewPrivileges` | applied by the sentry from the spec (NNP is always on there) |
//! | seccomp | moat's profile (or the engine's) applied by the sentry: moat passes `--oci-seccomp`, and installs its own compiled filter in the container's process and exec'd ones (`super::seccomp_exec`). The floor is not stacked: runsc takes one profile, and the container's system calls are served by the sentry, not the host kernel the floor protects |
//! | resource limits, `cgroupsPath` under the fleet cgroup | written by runsc into the sandbox's host cgroup; moat creates and caps the fleet parent first |
//! | AppArmor | not applied by runsc: moat does not set its profile (a profile the engine names is ignored, with runsc's warning) |
//! | masked / read-only paths, sysctl | not applied as such (listed by `policy explain`, recorded in `policy.json`) |
//! | network | the host's network (no network namespace in the spec) is refused under RESTRICTED: runsc would serve it with host sockets (`--network=host`) |

use serde_json::Value;

use crate::policy::{Change, Decision};
use crate::spec::Spec;

fn note(field: &str, detail: impl Into<String>, reason: &'static str) -> Change {
    Change {
        field: field.into(),
        action: "not applied",
        detail: detail.into(),
        reason: reason.into(),
    }
}

/// Adjusts a decision made by `policy::apply` for runsc: reverts what runsc cannot take
/// (moat's AppArmor profile, the stacked seccomp floor), refuses the host's network
/// under RESTRICTED, and lists what gVisor does not apply in `decision.not_applied`.
/// `engine_apparmor` is the profile the engine's spec named before the policy ran.
pub fn adjust(
    spec: &mut Spec,
    d: &mut Decision,
    engine_apparmor: Option<String>,
) -> anyhow::Result<()> {
    if d.policy == crate::policy::Mode::Restricted {
        // No network namespace, or a path to the host's (Docker's `--network host`), which
        // the policy lets through only where `[restricted] host_namespaces` allows it.
        let host_net = !spec.linux().namespaces.iter().any(|n| n.typ == "network")
            || d.host_namespaces.contains(&"network");
        if host_net {
            anyhow::bail!(
                "linux.namespaces: the container shares the host's network, which the RESTRICTED \
                 policy refuses for gVisor (runsc would serve it with host sockets); give it a \
                 network namespace, or moat.network=none"
            );
        }
    }
    if d.policy == crate::policy::Mode::Restricted {
        strip_runsc_annotations(spec, d);
    }
    // The egress policy stays in `d.egress`: `super::egress::plan` decides what of it the
    // sandbox gets.
    if let Some(i) = d
        .changes
        .iter()
        .position(|c| c.field == "process.apparmorProfile")
    {
        d.changes.remove(i);
        if let Some(p) = spec.process.as_mut() {
            p.apparmor_profile = engine_apparmor;
        }
    }
    if d.seccomp_floor {
        d.seccomp_floor = false;
        d.changes
            .retain(|c| !(c.field == "linux.seccomp" && c.action == "added"));
        d.not_applied.push(note(
            "linux.seccomp",
            "seccomp-profiles/floor.json (the engine's profile is applied by the sentry)",
            "runsc takes one profile; the container's system calls are served by the sentry, \
             not by the host kernel the floor protects",
        ));
    }
    if d.bounded_root.take().is_some() {
        d.changes.retain(|c| c.field != "root.path");
        d.not_applied.push(note(
            "root.path",
            "moat.rootfs=ephemeral",
            "the bounded root is an overlay moat builds for native containers; runsc gets the \
             engine's rootfs as given (moat.rootfs=readonly applies)",
        ));
    }
    d.not_applied.extend(ignored(spec));
    // This container runs under gVisor: a `moat.runtime=native` annotation asked to leave
    // it, and annotations only tighten (`gvisor::select::decide`).
    if let Some(v) = spec
        .annotations
        .get(super::select::RUNTIME_ANNOTATION)
        .filter(|v| *v == "native")
    {
        d.changes.push(Change {
            field: format!("annotations.{}", super::select::RUNTIME_ANNOTATION),
            action: "ignored",
            detail: format!(
                "{}={v} would leave gVisor, which the operator chose",
                super::select::RUNTIME_ANNOTATION
            ),
            reason: crate::policy::IGNORED_ANNOTATION.into(),
        });
    }
    Ok(())
}

/// runsc reads `dev.gvisor.*` annotations itself (mount hints that share a host path
/// between containers, flag overrides, internal settings): under RESTRICTED they are
/// written by whoever wrote the spec, often an image, so none reaches runsc.
fn strip_runsc_annotations(spec: &mut Spec, d: &mut Decision) {
    let keys: Vec<String> = spec
        .annotations
        .keys()
        .filter(|k| k.starts_with(RUNSC_ANNOTATIONS))
        .cloned()
        .collect();
    for k in keys {
        let v = spec.annotations.remove(&k).unwrap_or_default();
        d.changes.push(Change {
            field: format!("annotations.{k}"),
            action: "removed",
            detail: format!("{k}={v}"),
            reason: "runsc acts on dev.gvisor.* annotations; under RESTRICTED only the operator \
                     configures runsc"
                .into(),
        });
    }
}

/// The annotation prefix runsc interprets.
pub const RUNSC_ANNOTATIONS: &str = "dev.gvisor.";

/// What runsc 20221219 does not apply of a spec, for `policy explain` and `policy.json`.
pub fn ignored(spec: &Spec) -> Vec<Change> {
    let mut out = Vec::new();
    if let Some(p) = spec
        .process
        .as_ref()
        .and_then(|p| p.apparmor_profile.as_deref())
        .filter(|p| !p.is_empty())
    {
        out.push(note(
            "process.apparmorProfile",
            p,
            "runsc ignores AppArmor (it warns); the sentry's own system call implementation and \
             its host seccomp filter stand in",
        ));
    }
    // linux.seccomp is applied (moat's filter through its trampoline, exec'd processes
    // included, or runsc's conversion where it does the same: super::seccomp_exec).
    let linux = spec.linux();
    if !linux.masked_paths.is_empty() {
        out.push(note(
            "linux.maskedPaths",
            linux.masked_paths.join(","),
            "not applied as such: gVisor's /proc and /sys are its own (no kcore, keys, \
             timer_list, sysrq-trigger)",
        ));
    }
    if !linux.readonly_paths.is_empty() {
        out.push(note(
            "linux.readonlyPaths",
            linux.readonly_paths.join(","),
            "not applied as such: gVisor's /proc/sys is read-only even for root",
        ));
    }
    if !linux.sysctl.is_empty() {
        out.push(note(
            "linux.sysctl",
            linux.sysctl.keys().cloned().collect::<Vec<_>>().join(","),
            "runsc ignores sysctl settings",
        ));
    }
    if let Some(h) = &spec.hooks {
        if !h.create_container.is_empty() || !h.start_container.is_empty() {
            out.push(note(
                "hooks",
                "createContainer, startContainer",
                "runsc does not run these hooks",
            ));
        }
    }
    out
}

/// Under RESTRICTED an exec'd process gets no more than the container's process: each
/// capability set cut to the container's, inheritable emptied, NNP on (as
/// `policy::restrict_exec` does natively), on the JSON runsc reads.
pub fn restrict_exec(p: &mut Value, container: &Value) -> Vec<String> {
    let mut removed = Vec::new();
    for set in [
        "bounding",
        "effective",
        "permitted",
        "inheritable",
        "ambient",
    ] {
        let allowed: Vec<String> = if set == "inheritable" {
            Vec::new()
        } else {
            container
                .pointer(&format!("/capabilities/{set}"))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_ascii_uppercase))
                        .collect()
                })
                .unwrap_or_default()
        };
        let Some(list) = p
            .pointer_mut(&format!("/capabilities/{set}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        list.retain(|c| {
            let name = c.as_str().unwrap_or("").to_ascii_uppercase();
            let keep = allowed.contains(&name);
            if !keep {
                removed.push(format!("{set}:{name}"));
            }
            keep
        });
    }
    if p.is_object() {
        p["noNewPrivileges"] = Value::Bool(true);
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{self, Config};

    fn runsc_json(spec: &Spec) -> Value {
        let b = crate::gvisor::spec::config_json(
            spec,
            std::path::Path::new("/b"),
            std::path::Path::new("/b/rootfs"),
        )
        .unwrap();
        serde_json::from_slice(&b).unwrap()
    }

    fn engine() -> Value {
        serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "cwd": "/", "noNewPrivileges": false,
                        "capabilities": {"bounding": ["CAP_CHOWN", "CAP_NET_RAW"],
                                         "effective": ["CAP_CHOWN"]},
                        "ioPriority": {"class": "IOPRIO_CLASS_IDLE"}},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                     {"type": "uts"}],
                      "intelRdt": {"closID": "x"},
                      "resources": {"memory": {"limit": 1048576}}},
            "vm": {"hypervisor": {"path": "/x"}}
        })
    }

    #[test]
    fn restricted_reaches_the_json_and_unknown_fields_do_not() {
        let v = engine();
        let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
        let mut d = policy::apply(
            &mut spec,
            &Config::default(),
            "c1",
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        adjust(&mut spec, &mut d, None).unwrap();
        let out = runsc_json(&spec);
        assert_eq!(
            out["process"]["capabilities"]["bounding"],
            serde_json::json!([])
        );
        assert_eq!(out["process"]["noNewPrivileges"], true);
        assert!(out["process"].get("apparmorProfile").is_none());
        assert!(out["linux"]["seccomp"]["syscalls"].is_array());
        assert_eq!(out["linux"]["cgroupsPath"], "/moat/c1");
        assert_eq!(out["linux"]["resources"]["pids"]["limit"], 4096);
        assert_eq!(out["linux"]["resources"]["memory"]["limit"], 1048576);
        assert!(out["linux"]["maskedPaths"].as_array().unwrap().len() >= 10);
        assert_eq!(out["process"]["ioPriority"]["class"], "IOPRIO_CLASS_IDLE");
        // Not modelled by moat (or opaque and not on PASS_THROUGH): not given to runsc.
        assert!(out["linux"].get("intelRdt").is_none());
        assert!(out.get("vm").is_none());
        assert_eq!(out["root"]["path"], "/b/rootfs");
        assert!(d.not_applied.iter().any(|c| c.field == "linux.maskedPaths"));
    }

    #[test]
    fn runsc_annotations_are_removed_under_restricted_only() {
        for (cfg, kept) in [
            (Config::default(), false),
            (
                Config {
                    default_policy: policy::Mode::Open,
                    ..Config::default()
                },
                true,
            ),
        ] {
            let mut v = engine();
            v["annotations"] = serde_json::json!({
                "dev.gvisor.spec.mount.vol.share": "shared",
                "dev.gvisor.flag.network": "host",
                "org.example": "x"});
            let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
            let mut d = policy::apply(
                &mut spec,
                &cfg,
                "c1",
                &Default::default(),
                &Default::default(),
            )
            .unwrap();
            adjust(&mut spec, &mut d, None).unwrap();
            let out = runsc_json(&spec);
            let a = &out["annotations"];
            assert_eq!(a.get("dev.gvisor.flag.network").is_some(), kept, "{a}");
            assert_eq!(a.get("dev.gvisor.spec.mount.vol.share").is_some(), kept);
            assert_eq!(a["org.example"], "x");
            let reported = d
                .changes
                .iter()
                .filter(|c| c.field.starts_with("annotations.dev.gvisor."))
                .count();
            assert_eq!(reported, if kept { 0 } else { 2 });
        }
    }

    #[test]
    fn host_network_is_refused_under_restricted_only() {
        let host = || policy::FloorFacts {
            host_ns: vec![("network", (4, 1))],
            ns_paths: vec![("/proc/1/ns/net".into(), Ok((4, 1)))],
            cgroup_v2: false,
            systemd_cgroup: false,
            ..Default::default()
        };
        let allowed = Config {
            host_namespaces: vec!["network".into()],
            ..Config::default()
        };
        for ns in [
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}]),
            serde_json::json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                               {"type": "network", "path": "/proc/1/ns/net"}]),
        ] {
            let mut v = engine();
            v["linux"]["namespaces"] = ns;
            // The policy's floor refuses it first ...
            let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
            let e = policy::apply(
                &mut spec,
                &Config::default(),
                "c1",
                &Default::default(),
                &host(),
            )
            .unwrap_err();
            assert!(
                e.to_string()
                    .contains("the host's network namespace is refused"),
                "{e}"
            );
            // ... and gVisor still refuses what host_namespaces lets through natively.
            let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
            let mut d =
                policy::apply(&mut spec, &allowed, "c1", &Default::default(), &host()).unwrap();
            let e = adjust(&mut spec, &mut d, None).unwrap_err().to_string();
            assert!(e.contains("host's network"), "{e}");
            let cfg = Config {
                default_policy: policy::Mode::Open,
                ..Config::default()
            };
            let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
            let mut d = policy::apply(&mut spec, &cfg, "c1", &Default::default(), &host()).unwrap();
            adjust(&mut spec, &mut d, None).unwrap();
        }
    }

    #[test]
    fn engine_profile_is_kept_and_the_floor_listed() {
        let mut v = engine();
        v["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW"});
        let mut spec = Spec::parse(&serde_json::to_vec(&v).unwrap()).unwrap();
        let mut d = policy::apply(
            &mut spec,
            &Config::default(),
            "c1",
            &Default::default(),
            &Default::default(),
        )
        .unwrap();
        assert!(d.seccomp_floor);
        adjust(&mut spec, &mut d, None).unwrap();
        assert!(!d.seccomp_floor);
        let out = runsc_json(&spec);
        assert_eq!(out["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
        assert!(d
            .not_applied
            .iter()
            .any(|c| c.field == "linux.seccomp" && c.detail.contains("floor")));
    }

    #[test]
    fn exec_gets_no_more_than_the_container() {
        let mut p = serde_json::json!({"args": ["sh"], "capabilities": {
            "bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"], "effective": ["cap_chown"],
            "inheritable": ["CAP_CHOWN"]}});
        let container = serde_json::json!({"capabilities": {"bounding": ["CAP_CHOWN"],
            "effective": ["CAP_CHOWN"]}});
        let removed = restrict_exec(&mut p, &container);
        assert_eq!(
            p["capabilities"]["bounding"],
            serde_json::json!(["CAP_CHOWN"])
        );
        assert_eq!(
            p["capabilities"]["effective"],
            serde_json::json!(["cap_chown"])
        );
        assert_eq!(p["capabilities"]["inheritable"], serde_json::json!([]));
        assert_eq!(p["noNewPrivileges"], true);
        assert_eq!(removed, ["bounding:CAP_SYS_ADMIN", "inheritable:CAP_CHOWN"]);
    }
}
