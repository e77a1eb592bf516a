//! Unit tests of the key check, and its cost bench.
use super::*;
use crate::spec::{Process, Resources, Spec};

fn refused(json: &str) -> KeyError {
    check::<Spec>(json.as_bytes()).expect_err(json)
}

fn accepted(json: &str) {
    check::<Spec>(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"));
    crate::spec::Spec::parse(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e:?}"));
}

#[test]
fn shape_is_traced_from_the_types() {
    let Node::Struct(top) = <Spec as Checked>::shape() else {
        panic!("Spec is a struct")
    };
    let field = |fields: &'static [(&'static str, Node)], name: &str| -> &'static Node {
        &fields.iter().find(|(f, _)| *f == name).expect(name).1
    };
    let Node::Struct(process) = field(top, "process") else {
        panic!("process")
    };
    assert!(matches!(field(process, "capabilities"), Node::Struct(_)));
    assert!(matches!(field(process, "args"), Node::Seq(_)));
    assert!(matches!(field(top, "annotations"), Node::Map(_)));
    let Node::Seq(m) = field(top, "mounts") else {
        panic!("mounts")
    };
    let Node::Struct(mount) = &**m else {
        panic!("mount")
    };
    assert!(mount.iter().any(|(f, _)| *f == "type"), "renamed fields");
    let mut opaque = opaque_fields::<Spec>();
    opaque.sort();
    // A new serde_json::Value field must be decided on: checked shape, and whether
    // runsc gets it (gvisor::spec::PASS_THROUGH).
    assert_eq!(
        opaque,
        [
            "linux.intelRdt",
            "linux.resources.network",
            "linux.resources.rdma"
        ]
    );
}

#[test]
fn duplicate_keys_are_refused_at_every_depth() {
    for (json, field, key) in [
        (
            r#"{"ociVersion":"1.0.2","ociVersion":"1.0.2"}"#,
            "top level",
            "ociVersion",
        ),
        (
            r#"{"process":{"args":["a"],"cwd":"/","args":["b"]}}"#,
            "process",
            "args",
        ),
        (
            r#"{"process":{"capabilities":{"bounding":[],"bounding":["CAP_SYS_ADMIN"]}}}"#,
            "process.capabilities",
            "bounding",
        ),
        (
            r#"{"mounts":[{"destination":"/a"},{"destination":"/b","type":"bind","type":"proc"}]}"#,
            "mounts[1]",
            "type",
        ),
        (
            r#"{"annotations":{"a":"1","b":"2","a":"3"}}"#,
            "annotations",
            "a",
        ),
        (
            r#"{"linux":{"sysctl":{"net.ipv4.ip_forward":"0","net.ipv4.ip_forward":"1"}}}"#,
            "linux.sysctl",
            "net.ipv4.ip_forward",
        ),
        (
            r#"{"linux":{"resources":{"unified":{"memory.max":"1","memory.max":"2"}}}}"#,
            "linux.resources.unified",
            "memory.max",
        ),
        // Inside fields moat does not model, and inside opaque JSON.
        (
            r#"{"vm":{"hypervisor":{"path":"/a","path":"/b"}}}"#,
            "vm.hypervisor",
            "path",
        ),
        (
            r#"{"linux":{"intelRdt":{"closID":"a","closID":"b"}}}"#,
            "linux.intelRdt",
            "closID",
        ),
        (
            r#"{"linux":{"seccomp":{"syscalls":[{"names":["x"],"action":"a"},{"names":[],"action":"b","action":"c"}]}}}"#,
            "linux.seccomp.syscalls[1]",
            "action",
        ),
        (r#"{"x":[[{"k":1,"k":2}]]}"#, "x[0][0]", "k"),
        // The same key spelt with an escape.
        (
            r#"{"process":{"args":[],"\u0061rgs":[]}}"#,
            "process",
            "args",
        ),
    ] {
        let e = refused(json);
        assert_eq!(e.field, field, "{json}: {e}");
        assert_eq!(
            e.message,
            format!("duplicate key {key:?}; refused"),
            "{json}"
        );
    }
    // Past the short list, in a big map.
    let mut many: Vec<String> = (0..100).map(|i| format!(r#""k{i}":"v""#)).collect();
    many.push(r#""k7":"again""#.into());
    let e = refused(&format!(r#"{{"annotations":{{{}}}}}"#, many.join(",")));
    assert_eq!(
        (e.field.as_str(), e.message.as_str()),
        ("annotations", r#"duplicate key "k7"; refused"#)
    );
}

#[test]
fn case_variants_of_fields_are_refused() {
    for (json, field, key, want) in [
        (
            r#"{"process":{"Capabilities":{}}}"#,
            "process",
            "Capabilities",
            "capabilities",
        ),
        (
            r#"{"process":{"capabilities":{"bounding":[]},"CAPABILITIES":{}}}"#,
            "process",
            "CAPABILITIES",
            "capabilities",
        ),
        (r#"{"Process":{}}"#, "top level", "Process", "process"),
        // Go folds the long s and the Kelvin sign to ASCII.
        (
            "{\"proce\u{17f}\u{17f}\":{}}",
            "top level",
            "proce\u{17f}\u{17f}",
            "process",
        ),
        (
            r#"{"mounts":[{"Destination":"/x"}]}"#,
            "mounts[0]",
            "Destination",
            "destination",
        ),
        (
            r#"{"linux":{"UIDMappings":[]}}"#,
            "linux",
            "UIDMappings",
            "uidMappings",
        ),
        (
            r#"{"linux":{"namespaces":[{"type":"pid","Path":"/proc/1/ns/pid"}]}}"#,
            "linux.namespaces[0]",
            "Path",
            "path",
        ),
    ] {
        let e = refused(json);
        assert_eq!(e.field, field, "{json}: {e}");
        assert_eq!(
            e.message,
            format!("{key:?} differs only in case from {want:?}; refused"),
            "{json}"
        );
    }
}

#[test]
fn map_keys_keep_their_case_and_unknown_fields_stay_ignored() {
    accepted(
        r#"{"ociVersion":"1.0.2","annotations":{"Foo":"1","foo":"2","FOO":"3"},
            "linux":{"sysctl":{"net.ipv4.conf.all.Forwarding":"1","net.ipv4.conf.all.forwarding":"1"},
                     "resources":{"unified":{"Memory.max":"1","memory.max":"2"}},
                     "timeOffsets":{"Monotonic":{"secs":1},"monotonic":{"secs":2}}}}"#,
    );
    accepted(
        r#"{"ociVersion":"1.0.2","process":{"args":["sh"],"cwd":"/","fooBar":1,
              "capabilitiesX":{"a":1}},"linux":{"foo":{"Bar":1,"bar":2}},
            "vm":{"hypervisor":{"path":"/x"}},"windows":{"Layers":[]}}"#,
    );
}

#[test]
fn other_roots_and_syntax() {
    let e = check::<Process>(br#"{"args":["sh"],"Capabilities":{"bounding":["CAP_SYS_ADMIN"]}}"#)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        r#"top level: "Capabilities" differs only in case from "capabilities"; refused"#
    );
    // A resources document folds from its top: "Limit" is a second value for "limit".
    let r: Resources = crate::spec::from_slice(br#"{"pids":{"limit":1,"Limit":2}}"#).unwrap();
    assert_eq!(r.pids.unwrap().limit, Some(2));
    let e = check::<Spec>(br#"{"process":{"args":[1,}}"#).unwrap_err();
    assert_eq!(e.field, "process.args[1]");
    assert!(e.message.contains("line 1"), "{e}");
    assert!(check::<Spec>(b"{} x").is_err(), "trailing characters");
}

#[test]
fn go_folding() {
    assert!(go_fold_eq("CAPABILITIES", "capabilities"));
    assert!(go_fold_eq("\u{212a}ernel", "kernel"));
    assert!(go_fold_eq("\u{17f}wap", "swap"));
    assert!(!go_fold_eq("capabilitie", "capabilities"));
    assert!(!go_fold_eq("capabilitiess", "capabilities"));
    assert!(!go_fold_eq("\u{131}d", "id"), "dotless i is not i to Go");
}

/// A podman-like spec of ~10 KB: the default spec with podman's mounts, environment,
/// annotations and a full seccomp profile.
pub(crate) fn podman_like() -> Vec<u8> {
    let mut v = crate::spec::default::spec(false, true);
    v["linux"]["seccomp"] = serde_json::from_str(crate::policy::RESTRICTED_PROFILE).unwrap();
    for i in 0..12 {
        v["annotations"][format!("io.podman.annotations.k{i}")] = "value".into();
        v["mounts"].as_array_mut().unwrap().push(serde_json::json!({
            "destination": format!("/run/secrets/s{i}"), "type": "bind",
            "source": format!("/var/lib/containers/storage/overlay-containers/x/userdata/s{i}"),
            "options": ["bind", "rprivate", "nosuid", "nodev"]}));
    }
    v["process"]["env"] = (0..10)
        .map(|i| format!("VAR{i}=/usr/local/bin:/usr/bin"))
        .collect();
    serde_json::to_vec(&v).unwrap()
}

/// `cargo test --release --bin moat spec::keys::tests::cost -- --ignored --nocapture`;
/// `MOAT_BENCH_SPEC=FILE` measures FILE (a config.json podman wrote, say) instead.
#[test]
#[ignore]
fn cost() {
    let b = match std::env::var_os("MOAT_BENCH_SPEC") {
        Some(f) => std::fs::read(f).unwrap(),
        None => podman_like(),
    };
    // Best of 30 batches of 100: the machine is shared, preemption only adds.
    let time = |f: &dyn Fn()| {
        f();
        (0..30)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..100 {
                    f();
                }
                t.elapsed().as_secs_f64() * 1e6 / 100.0
            })
            .fold(f64::MAX, f64::min)
    };
    let check_us = time(&|| {
        check::<Spec>(&b).unwrap();
    });
    let parse_us = time(&|| {
        crate::spec::typed::<Spec>(&b).unwrap();
    });
    let value_us = time(&|| {
        serde_json::from_slice::<serde_json::Value>(&b).unwrap();
    });
    let peek_us = time(&|| {
        crate::gvisor::select::runtime_annotation(&b).unwrap();
    });
    println!(
        "{} bytes: key check {check_us:.1} µs, typed parse {parse_us:.1} µs; \
         gvisor::select: Value parse (before) {value_us:.1} µs, annotation peek {peek_us:.1} µs",
        b.len()
    );
}

/// runc's update.bats writes `"CPU"`: inside `linux.resources` (and a resources document
/// of `update -r`) a case variant of a field is taken as the field, as Go's decoder takes
/// it, with a warning naming it, and read in order with the field itself; outside
/// resources a variant is still refused.
#[test]
fn case_variants_in_resources_are_taken_as_the_field() {
    use crate::spec::{from_slice, Resources};
    let json =
        "{\"linux\":{\"resources\":{\"CPU\":{\"Cpus\":\"0\"},\"memory\":{\"\u{212a}ernel\":1},\
                \"network\":{\"ClassID\":7,\"priorities\":[{\"name\":\"eth0\",\"Priority\":1}]},\
                \"unified\":{\"Memory.Max\":\"1\"}}}}";
    assert!(
        check::<Spec>(json.as_bytes()).unwrap().folds,
        "folding needed"
    );
    let (folded, warnings) = fold_resources::<Spec>(json.as_bytes()).unwrap();
    assert_eq!(
        warnings,
        [
            "linux.resources: \"CPU\" taken as \"cpu\" (keys differ only in case; runc's decoder matches them so)",
            "linux.resources.cpu: \"Cpus\" taken as \"cpus\" (keys differ only in case; runc's decoder matches them so)",
            "linux.resources.memory: \"\u{212a}ernel\" taken as \"kernel\" (keys differ only in case; runc's decoder matches them so)",
            "linux.resources.network: \"ClassID\" taken as \"classID\" (keys differ only in case; runc's decoder matches them so)",
            "linux.resources.network.priorities[0]: \"Priority\" taken as \"priority\" (keys differ only in case; runc's decoder matches them so)",
        ]
    );
    let spec: Spec = serde_json::from_slice(&folded).unwrap();
    let res = spec.linux.unwrap().resources.unwrap();
    assert_eq!(res.cpu.unwrap().cpus.as_deref(), Some("0"));
    assert_eq!(res.memory.unwrap().kernel, Some(1));
    assert_eq!(res.network.unwrap()["classID"], 7);
    // A map's keys are the kernel's: never folded.
    assert!(res.unified.unwrap().contains_key("Memory.Max"));
    // An update's resources document is resources from its top level.
    let r: Resources = from_slice(br#"{"CPU":{"Cpus":"1"}}"#).unwrap();
    assert_eq!(r.cpu.unwrap().cpus.as_deref(), Some("1"));
    // The field and its variants are read in order into the field, as Go reads them:
    // objects merged, anything else replaced.
    let json = r#"{"linux":{"resources":{"cpu":{"shares":100,"cpus":"1"},"CPU":{"Cpus":"0"},
        "pids":{"limit":5},"Pids":{"limit":7},"devices":[{"allow":true}],"Devices":[]}}}"#;
    assert!(check::<Spec>(json.as_bytes()).unwrap().folds);
    let (folded, _) = fold_resources::<Spec>(json.as_bytes()).unwrap();
    let spec: Spec = serde_json::from_slice(&folded).unwrap();
    let res = spec.linux.unwrap().resources.unwrap();
    let cpu = res.cpu.unwrap();
    assert_eq!((cpu.shares, cpu.cpus.as_deref()), (Some(100), Some("0")));
    assert_eq!(res.pids.unwrap().limit, Some(7));
    assert!(res.devices.is_empty());
    // A key given twice as written is still refused.
    let e = refused(r#"{"linux":{"resources":{"CPU":{},"CPU":{}}}}"#);
    assert_eq!(e.message, "duplicate key \"CPU\"; refused");
    // Outside resources: refused as before.
    let e = refused(r#"{"linux":{"Resources":{}}}"#);
    assert_eq!(
        e.message,
        "\"Resources\" differs only in case from \"resources\"; refused"
    );
}
