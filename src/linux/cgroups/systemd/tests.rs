use std::path::Path;

use super::props::{from_resources, mask, quota_per_sec, Prop, INFINITY};
use super::*;
use crate::spec;

const ROOT: &str = "/run/moat";

fn scope(p: &str) -> Result<Scope, String> {
    Scope::parse(Some(p), "c1", None, Path::new(ROOT)).map_err(|e| e.to_string())
}

#[test]
fn parses_slice_prefix_name() {
    let s = scope("machine.slice:libpod:abc").unwrap();
    assert_eq!(s.unit, "libpod-abc.scope");
    assert_eq!(s.slice, "machine.slice");
    assert_eq!(s.path(), "/machine.slice/libpod-abc.scope");
    let s = scope("kubepods-besteffort-pod1.slice:cri-containerd:x").unwrap();
    assert_eq!(
        s.path(),
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-x.scope"
    );
    // Empty parts: the default slice, no prefix.
    assert_eq!(scope("::t2").unwrap().path(), "/system.slice/t2.scope");
    assert_eq!(scope("-.slice:a:b").unwrap().path(), "/a-b.scope");
    let tag = root_tag(Path::new(ROOT));
    let d = Scope::parse(None, "c1", None, Path::new(ROOT)).unwrap();
    assert_eq!(d.path(), format!("/system.slice/moat-{tag}-c1.scope"));
    let u = Scope::parse(Some(""), "c1", Some(1000), Path::new(ROOT)).unwrap();
    assert_eq!(
        u.path(),
        format!("/user.slice/user-1000.slice/user@1000.service/user.slice/moat-{tag}-c1.scope")
    );
}

/// moat's own name differs per state root (two tenants, one id, two units); an engine's
/// name is the engine's whatever the root (its kubelet finds the unit by it).
#[test]
fn default_unit_is_unique_per_state_root() {
    let roots = [
        "/run/moat",
        "/run/moat2",
        "/var/run/moat",
        "/run/user/1000/moat",
        "/tmp/a",
        "/tmp/b",
    ];
    let units: Vec<String> = roots
        .iter()
        .map(|r| Scope::parse(None, "c1", None, Path::new(r)).unwrap().unit)
        .collect();
    for (i, a) in units.iter().enumerate() {
        assert!(a.starts_with("moat-") && a.ends_with("-c1.scope"), "{a}");
        for b in &units[i + 1..] {
            assert_ne!(a, b, "two state roots share a unit");
        }
    }
    // The same root, the same name (delete and a later create find it); a relative
    // --root is the absolute path it names.
    assert_eq!(
        root_tag(Path::new("/run/moat")),
        root_tag(Path::new("/run/moat"))
    );
    let cwd = std::env::current_dir().unwrap();
    assert_eq!(root_tag(Path::new("st")), root_tag(&cwd.join("st")));
    assert_eq!(root_tag(Path::new(ROOT)).len(), 8);
    for r in roots {
        let s = Scope::parse(
            Some("kubepods.slice:cri-containerd:c1"),
            "c1",
            None,
            Path::new(r),
        );
        assert_eq!(s.unwrap().unit, "cri-containerd-c1.scope");
    }
}

/// A unit is the container's only when its InvocationID is the recorded one: nothing
/// recorded (a create refused, or killed before it knew) proves nothing, and an empty
/// one (no such unit) never matches.
#[test]
fn unit_proven_only_by_the_recorded_invocation() {
    let mine = "0123456789abcdef0123456789abcdef";
    let other = "fedcba9876543210fedcba9876543210";
    let mut s = scope("system.slice:moat:x").unwrap();
    assert!(!s.proven(mine), "nothing recorded");
    assert!(!s.proven(""));
    s.invocation = Some(mine.into());
    assert!(s.proven(mine));
    assert!(!s.proven(other), "replaced under the same name");
    assert!(!s.proven(""), "gone");
    s.invocation = Some(String::new());
    assert!(!s.proven(""), "an empty record proves nothing");
    // Records from before the field: no invocation, so nothing proven.
    let old: Scope =
        serde_json::from_str(r#"{"unit":"moat-x.scope","slice":"system.slice"}"#).unwrap();
    assert_eq!(old.invocation, None);
    let json = serde_json::to_string(&Scope {
        invocation: Some(mine.into()),
        ..old
    })
    .unwrap();
    assert!(json.contains(mine), "{json}");
}

#[test]
fn refuses_bad_paths_naming_them() {
    for (p, want) in [
        ("t6", "expected \"slice:prefix:name\""),
        ("a:b", "expected \"slice:prefix:name\""),
        ("a:b:c:d", "expected \"slice:prefix:name\""),
        (
            "system.slice:moat:",
            "the name of \"slice:prefix:name\" is empty",
        ),
        ("system.slice:moat:x.slice", "a slice cannot hold"),
        ("-:moat:t7", "a slice name ends in \".slice\""),
        ("a--b.slice:moat:t", "not a valid slice name"),
        ("-a.slice:moat:t", "not a valid slice name"),
        ("system.slice:moat:../x", "not a valid systemd unit name"),
        ("system.slice:mo at:x", "not a valid systemd unit name"),
    ] {
        let e = scope(p).unwrap_err();
        assert!(e.starts_with("linux.cgroupsPath: "), "{p}: {e}");
        assert!(e.contains(want), "{p}: {e}");
    }
}

#[test]
fn fleet_slice_follows_the_fleet_path() {
    assert_eq!(fleet_slice("/moat").unwrap(), "moat.slice");
    assert_eq!(fleet_slice("/moat/fleet").unwrap(), "moat-fleet.slice");
    assert!(fleet_slice("/").is_err());
}

fn get(props: &[Prop], name: &str) -> Option<Prop> {
    props.iter().find(|p| p.name() == name).cloned()
}

#[test]
fn resources_become_properties() {
    let res: spec::Resources = serde_json::from_value(serde_json::json!({
        "memory": {"limit": 67108864, "swap": 67108864, "reservation": 1048576},
        "pids": {"limit": 32},
        "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0-2,9"},
        "blockIO": {"weight": 200},
        "unified": {"memory.high": "50331648"},
        "devices": [{"allow": false, "access": "rwm"}, {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rw"},
                    {"allow": true, "type": "c", "major": 136, "access": "rwm"}]
    }))
    .unwrap();
    let devs = "Character devices:\n  1 mem\n136 pts\n\nBlock devices:\n  8 sd\n";
    let p = from_resources(&res, devs, false).unwrap();
    assert_eq!(get(&p, "MemoryMax"), Some(Prop::U64("MemoryMax", 67108864)));
    assert_eq!(get(&p, "MemoryLow"), Some(Prop::U64("MemoryLow", 1048576)));
    // swap = memory: no swap at all, said to systemd too (else daemon-reload resets it).
    assert_eq!(
        get(&p, "MemorySwapMax"),
        Some(Prop::U64("MemorySwapMax", 0))
    );
    assert_eq!(
        get(&p, "MemoryHigh"),
        Some(Prop::U64("MemoryHigh", 50331648))
    );
    assert_eq!(get(&p, "TasksMax"), Some(Prop::U64("TasksMax", 32)));
    assert_eq!(
        get(&p, "CPUQuotaPerSecUSec"),
        Some(Prop::U64("CPUQuotaPerSecUSec", 500_000))
    );
    assert_eq!(
        get(&p, "CPUQuotaPeriodUSec"),
        Some(Prop::U64("CPUQuotaPeriodUSec", 100_000))
    );
    assert_eq!(
        get(&p, "AllowedCPUs"),
        Some(Prop::Bytes("AllowedCPUs", vec![0b0000_0111, 0b0000_0010]))
    );
    assert!(matches!(get(&p, "IOWeight"), Some(Prop::U64(_, w)) if w > 0));
    assert_eq!(
        get(&p, "DevicePolicy"),
        Some(Prop::Str("DevicePolicy", "strict".into()))
    );
    let Some(Prop::Devices(d)) = get(&p, "DeviceAllow") else {
        panic!("no DeviceAllow in {p:?}")
    };
    // 1:3 is also one of runc's defaults (rwm): the two merge.
    assert!(d.contains(&("/dev/char/1:3".into(), "rwm".into())), "{d:?}");
    assert!(d.contains(&("char-pts".into(), "rwm".into())), "{d:?}");
    // runc's defaults are allowed too (moat's own filter has them).
    assert!(d.iter().any(|(p, _)| p == "/dev/char/1:9"), "{d:?}");
    // Nothing for a block device.
    assert!(
        !d.iter()
            .any(|(p, _)| p.starts_with("/dev/block") || p.starts_with("block-")),
        "{d:?}"
    );
}

#[test]
fn unlimited_and_allow_all() {
    let res: spec::Resources = serde_json::from_value(serde_json::json!({
        "memory": {"limit": -1},
        "pids": {"limit": -1},
        "cpu": {"quota": -1},
        "devices": [{"allow": true, "access": "rwm"}]
    }))
    .unwrap();
    let p = from_resources(&res, "", false).unwrap();
    assert_eq!(get(&p, "MemoryMax"), Some(Prop::U64("MemoryMax", INFINITY)));
    assert_eq!(
        get(&p, "MemorySwapMax"),
        Some(Prop::U64("MemorySwapMax", INFINITY))
    );
    assert_eq!(get(&p, "TasksMax"), Some(Prop::U64("TasksMax", INFINITY)));
    assert_eq!(
        get(&p, "CPUQuotaPerSecUSec"),
        Some(Prop::U64("CPUQuotaPerSecUSec", INFINITY))
    );
    assert_eq!(
        get(&p, "DevicePolicy"),
        Some(Prop::Str("DevicePolicy", "auto".into()))
    );
    assert_eq!(get(&p, "DeviceAllow"), None);
}

#[test]
fn quota_rounds_up_to_systemd_steps() {
    assert_eq!(quota_per_sec(50_000, 100_000), 500_000);
    assert_eq!(quota_per_sec(12_345, 100_000), 130_000);
    assert_eq!(quota_per_sec(1, 1_000_000), 10_000);
}

#[test]
fn masks() {
    assert_eq!(mask("0", "f").unwrap(), vec![1]);
    assert_eq!(mask("8-9", "f").unwrap(), vec![0, 3]);
    assert!(mask("3-1", "f").is_err());
    assert!(mask("x", "f").is_err());
}

#[test]
fn v1_names() {
    let res: spec::Resources = serde_json::from_value(serde_json::json!({
        "memory": {"limit": 67108864, "swap": 67108864, "reservation": 1},
        "cpu": {"shares": 512, "cpus": "0"},
        "blockIO": {"weight": 200},
    }))
    .unwrap();
    let p = from_resources(&res, "", true).unwrap();
    assert_eq!(
        get(&p, "MemoryLimit"),
        Some(Prop::U64("MemoryLimit", 67108864))
    );
    assert_eq!(get(&p, "CPUShares"), Some(Prop::U64("CPUShares", 512)));
    assert_eq!(
        get(&p, "BlockIOWeight"),
        Some(Prop::U64("BlockIOWeight", 200))
    );
    for v2_only in [
        "MemoryMax",
        "MemorySwapMax",
        "MemoryLow",
        "AllowedCPUs",
        "CPUWeight",
        "IOWeight",
    ] {
        assert_eq!(get(&p, v2_only), None, "{v2_only}");
    }
}
