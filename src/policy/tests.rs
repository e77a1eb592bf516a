//! The policy as a pure function: specs in, decisions and changed specs out.

use super::rootfs::has_mount;
use super::*;
use crate::spec::{self, Mount, Namespace};

fn podman_like() -> Spec {
    let mut v = crate::spec::default::spec(false, true);
    v["process"]["capabilities"]["bounding"] =
        serde_json::json!(["CAP_CHOWN", "CAP_NET_RAW", "CAP_SYS_CHROOT"]);
    v["process"]["noNewPrivileges"] = serde_json::json!(false);
    serde_json::from_value(v).unwrap()
}

#[test]
fn restricted_drops_everything_and_says_so() {
    let mut s = podman_like();
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    let caps = s.process().capabilities.as_ref().unwrap();
    assert!(caps.bounding.as_ref().unwrap().is_empty());
    assert!(caps.effective.as_ref().unwrap().is_empty());
    assert_eq!(s.process().no_new_privileges, Some(true));
    assert!(s.linux().seccomp.is_some());
    assert!(d
        .changes
        .iter()
        .any(|c| c.field == "process.capabilities.bounding" && c.detail.contains("CAP_NET_RAW")));
    assert_eq!(
        s.linux()
            .resources
            .as_ref()
            .unwrap()
            .pids
            .as_ref()
            .unwrap()
            .limit,
        Some(4096)
    );
    assert_eq!(s.linux().cgroups_path.as_deref(), Some("/moat/c1"));
}

#[test]
fn allowed_caps_survive_but_never_inheritable() {
    let mut s = podman_like();
    s.process
        .as_mut()
        .unwrap()
        .capabilities
        .as_mut()
        .unwrap()
        .inheritable = Some(vec!["CAP_CHOWN".into()]);
    let cfg = Config {
        allowed_capabilities: vec!["CAP_CHOWN".into()],
        ..Config::default()
    };
    apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    let caps = s.process().capabilities.as_ref().unwrap();
    assert_eq!(
        caps.bounding.as_deref(),
        Some(&["CAP_CHOWN".to_string()][..])
    );
    assert!(caps.inheritable.as_ref().unwrap().is_empty());
}

#[test]
fn engine_profile_gets_the_floor() {
    let mut s = podman_like();
    s.linux.as_mut().unwrap().seccomp = Some(spec::Seccomp {
        default_action: "SCMP_ACT_ALLOW".into(),
        ..Default::default()
    });
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(d.seccomp_floor);
    assert_eq!(
        s.linux().seccomp.as_ref().unwrap().default_action,
        "SCMP_ACT_ALLOW"
    );
}

/// Host namespaces as a test host has them: ids no spec path below names.
fn facts() -> FloorFacts {
    FloorFacts {
        host_ns: vec![
            ("pid", (4, 0xeffffffc)),
            ("network", (4, 0xeffffff8)),
            ("ipc", (4, 0xeffffffe)),
            ("uts", (4, 0xeffffffd)),
        ],
        ns_paths: vec![
            ("/proc/1/ns/net".into(), Ok((4, 0xeffffff8))),
            ("/proc/1/ns/pid".into(), Ok((4, 0xeffffffc))),
            ("/run/netns/pod".into(), Ok((4, 0xf0000001))),
            ("/proc/77/ns/ipc".into(), Ok((4, 0xf0000002))),
            (
                "/proc/9/ns/uts".into(),
                Err(NsPathError::Stat(libc::ENOENT)),
            ),
        ],
        cgroup_v2: false,
        cgroup_nsdelegate: false,
        systemd_cgroup: false,
        bpf_cgroup: true,
        resolvers: vec!["10.88.0.1:53".parse().unwrap()],
    }
}

#[test]
fn egress_metadata_is_refused_by_default_and_a_list_only_narrows() {
    let cfg = Config::default();
    let mut s = podman_like();
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    let e = d.egress.expect("RESTRICTED refuses the metadata endpoints");
    assert_eq!(e.allow, None);
    assert!(e.deny.contains(&"::ffff:169.254.169.254".parse().unwrap()));
    assert_eq!(e.resolvers, vec!["10.88.0.1:53".parse().unwrap()]);
    // No cut in the summary for the block alone.
    assert!(!d.changes.iter().any(|c| c.field == "egress"));
    // OPEN: nothing, unless the annotation asks.
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let mut s = podman_like();
    let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d.egress.is_none());
    let mut s = podman_like();
    s.annotations.insert("moat.egress".into(), "none".into());
    let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(d.egress.unwrap().allow.unwrap().0.len(), 0);
    // Under a configured list, an annotation narrows or is refused, naming the rule.
    let listed = Config {
        egress_allow: Some(egress::parse_list("10.0.0.0/8,*.corp.example:443").unwrap()),
        ..Config::default()
    };
    let mut s = podman_like();
    let d = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d
        .changes
        .iter()
        .any(|c| c.field == "egress" && c.action == "set"));
    let mut s = podman_like();
    s.annotations.insert(
        "moat.egress".into(),
        "tcp/10.1.0.0/16:22,git.corp.example:443".into(),
    );
    let d = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(
        d.egress.unwrap().allow.unwrap().to_string(),
        "tcp/10.1.0.0/16:22,git.corp.example:443"
    );
    for widening in ["11.0.0.1", "git.corp.example", "0.0.0.0/0:443"] {
        let mut s = podman_like();
        s.annotations
            .insert("moat.egress".into(), format!("10.1.1.1,{widening}"));
        let e = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts())
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside what"), "{e}");
        assert!(
            e.contains(&egress::parse_rule(widening).unwrap().to_string()),
            "{e}"
        );
    }
    let mut s = podman_like();
    s.annotations
        .insert("moat.egress".into(), "10.0.0.1/8".into());
    let e = apply(&mut s, &listed, "c1", &HostFacts::default(), &facts()).unwrap_err();
    assert!(e.to_string().contains("host bits"), "{e}");
    // moat.network=none: no network, nothing to police.
    let mut s = podman_like();
    s.annotations.insert("moat.network".into(), "none".into());
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d.egress.is_none());
}

#[test]
fn egress_rules_binding_a_name_are_refused_not_run_plain() {
    // No runtime enforces tls/ or http/ yet: whichever list brings one (the annotation under
    // OPEN or RESTRICTED, or the config's own), the container is refused, naming the rule.
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let listed = Config {
        egress_allow: Some(egress::parse_list("a.test:443,tls/b.test:443").unwrap()),
        ..Config::default()
    };
    let narrow = Config {
        egress_allow: Some(egress::parse_list("a.test:80-443").unwrap()),
        ..Config::default()
    };
    for (cfg, annotation, named) in [
        (&open, Some("10.0.0.1,tls/a.test:443"), "tls/a.test:443"),
        (&open, Some("http/*.a.test:80"), "http/*.a.test:80"),
        (&narrow, Some("tls/a.test:443"), "tls/a.test:443"),
        (&narrow, Some("a.test:443,http/a.test:80"), "http/a.test:80"),
        (&listed, None, "tls/b.test:443"),
    ] {
        let mut s = podman_like();
        if let Some(a) = annotation {
            s.annotations.insert("moat.egress".into(), a.into());
        }
        let e = apply(&mut s, cfg, "c1", &HostFacts::default(), &facts())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("egress rule {named}:")), "{e}");
        assert!(e.contains("not enforced"), "{e}");
    }
    // The plain name stays what it was.
    let mut s = podman_like();
    s.annotations
        .insert("moat.egress".into(), "a.test:443".into());
    let d = apply(&mut s, &narrow, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(d.egress.unwrap().allow.unwrap().to_string(), "a.test:443");
}

#[test]
fn egress_without_cgroup_bpf_refuses_a_list_and_records_the_block_absent() {
    let no_bpf = FloorFacts {
        bpf_cgroup: false,
        ..facts()
    };
    let mut s = podman_like();
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &no_bpf,
    )
    .unwrap();
    assert!(d.egress.is_none());
    assert!(d
        .changes
        .iter()
        .any(|c| c.field == "egress" && c.action == "absent"));
    let mut s = podman_like();
    s.annotations
        .insert("moat.egress".into(), "10.0.0.1".into());
    let e = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &no_bpf,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("cannot attach cgroup BPF"), "{e}");
}

fn restricted_caps(s: &Spec) -> Vec<String> {
    s.process()
        .capabilities
        .as_ref()
        .and_then(|c| c.effective.clone())
        .unwrap_or_default()
}

#[test]
fn loosening_annotations_are_ignored_and_reported() {
    for (k, v, cfg) in [
        ("moat.policy", "open", Config::default()),
        (
            "moat.rootfs",
            "writable",
            Config {
                readonly_rootfs: true,
                ..Config::default()
            },
        ),
        (
            "moat.network",
            "engine",
            Config {
                network_none: true,
                ..Config::default()
            },
        ),
        (
            "moat.userns",
            "engine",
            Config {
                userns_auto: true,
                ..Config::default()
            },
        ),
    ] {
        let mut s = podman_like();
        s.annotations.insert(k.into(), v.into());
        let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        assert_eq!(d.policy, Mode::Restricted, "{k}={v}");
        assert!(restricted_caps(&s).is_empty(), "{k}={v}");
        assert_eq!(s.process().no_new_privileges, Some(true));
        let c = d
            .changes
            .iter()
            .find(|c| c.field == format!("annotations.{k}"))
            .unwrap_or_else(|| panic!("{k}={v} not reported: {:?}", d.changes));
        assert_eq!(c.action, "ignored");
        assert!(c.detail.contains(&format!("{k}={v}")), "{}", c.detail);
        assert!(c.reason.contains("[alias.NAME]"), "{}", c.reason);
        // The config's setting holds.
        assert_eq!(d.readonly_rootfs, cfg.readonly_rootfs, "{k}");
        assert_eq!(d.network_none, cfg.network_none, "{k}");
        assert_eq!(d.userns == Userns::Auto, cfg.userns_auto, "{k}");
    }
    // Restating what the config gives, or tightening, is not reported.
    let mut s = podman_like();
    s.annotations
        .insert("moat.rootfs".into(), "writable".into());
    s.annotations
        .insert("moat.policy".into(), "restricted".into());
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(!d.changes.iter().any(|c| c.action == "ignored"));
}

#[test]
fn the_old_allow_open_cannot_bring_loosening_back() {
    // The only configs that used to let moat.policy=open through now fail to load.
    let path = std::path::Path::new("/etc/moat/config.toml");
    for text in ["allow_open = true\n", "[alias.moat]\nallow_open = true\n"] {
        assert!(Config::from_str_as(text, path, Some("moat")).is_err());
    }
}

#[test]
fn open_comes_from_the_config_or_its_alias() {
    let text = "[alias.moat-open]\ndefault_policy = \"open\"\n";
    let path = std::path::Path::new("/etc/moat/config.toml");
    let plain = Config::from_str_as(text, path, Some("moat")).unwrap();
    let mut s = podman_like();
    let d = apply(&mut s, &plain, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(d.policy, Mode::Restricted);
    let open = Config::from_str_as(text, path, Some("moat-open")).unwrap();
    let mut s = podman_like();
    let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(d.policy, Mode::Open);
    assert!(d.changes.is_empty());
    assert_eq!(s.process().no_new_privileges, Some(false));
    assert_eq!(restricted_caps(&s).len(), 3);
    // Under OPEN an annotation still tightens.
    let mut s = podman_like();
    s.annotations
        .insert("moat.policy".into(), "restricted".into());
    let d = apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(d.policy, Mode::Restricted);
}

fn with_ns(typ: &str, path: Option<&str>) -> Spec {
    let mut s = podman_like();
    let ns = &mut s.linux.as_mut().unwrap().namespaces;
    ns.retain(|n| n.typ != typ);
    if let Some(p) = path {
        ns.push(Namespace {
            typ: typ.into(),
            path: (!p.is_empty()).then(|| p.to_string()),
        });
    }
    s
}

#[test]
fn host_namespaces_are_refused_unless_listed() {
    for typ in config::HOST_NAMESPACE_TYPES {
        let e = apply(
            &mut with_ns(typ, None),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            format!(
                "linux.namespaces: the host's {typ} namespace is refused under RESTRICTED \
                 (allow with [restricted] host_namespaces = [\"{typ}\"])"
            )
        );
        let cfg = Config {
            host_namespaces: vec![typ.into()],
            ..Config::default()
        };
        let d = apply(
            &mut with_ns(typ, None),
            &cfg,
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
        assert_eq!(d.host_namespaces, [typ]);
        assert!(d
            .changes
            .iter()
            .any(|c| c.action == "kept" && c.detail.contains(typ)));
        // OPEN runs the spec as written.
        let open = Config {
            default_policy: Mode::Open,
            ..Config::default()
        };
        apply(
            &mut with_ns(typ, None),
            &open,
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
    }
    // Listing one type allows only that one.
    let cfg = Config {
        host_namespaces: vec!["pid".into()],
        ..Config::default()
    };
    assert!(apply(
        &mut with_ns("uts", None),
        &cfg,
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .is_err());
}

#[test]
fn a_path_to_the_host_namespace_is_refused_another_containers_is_not() {
    for (typ, p) in [("network", "/proc/1/ns/net"), ("pid", "/proc/1/ns/pid")] {
        let e = apply(
            &mut with_ns(typ, Some(p)),
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("({p}): the host's {typ} namespace is refused")),
            "{e}"
        );
        assert!(e.contains(&format!("host_namespaces = [\"{typ}\"]")), "{e}");
        let cfg = Config {
            host_namespaces: vec![typ.into()],
            ..Config::default()
        };
        apply(
            &mut with_ns(typ, Some(p)),
            &cfg,
            "c1",
            &HostFacts::default(),
            &facts(),
        )
        .unwrap();
    }
    // A pod: another container's namespaces.
    let d = apply(
        &mut with_ns("network", Some("/run/netns/pod")),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(d.host_namespaces.is_empty());
    apply(
        &mut with_ns("ipc", Some("/proc/77/ns/ipc")),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    // Unreadable or unexamined paths fail closed.
    let e = apply(
        &mut with_ns("uts", Some("/proc/9/ns/uts")),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("cannot open /proc/9/ns/uts"), "{e}");
    assert!(apply(
        &mut with_ns("uts", Some("/elsewhere")),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .is_err());
    // moat.network=none replaces the host's network before the floor looks.
    let mut s = with_ns("network", Some("/proc/1/ns/net"));
    s.annotations.insert("moat.network".into(), "none".into());
    apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
}

#[test]
fn the_fd_check_gets_every_host_namespace_the_config_does_not_allow() {
    let cfg = Config {
        host_namespaces: vec!["uts".into()],
        ..Config::default()
    };
    let d = apply(
        &mut podman_like(),
        &cfg,
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    let refused = refused_host_namespaces(&d, &cfg, &facts());
    let types: Vec<&str> = refused.iter().map(|r| r.0).collect();
    assert_eq!(types, ["pid", "network", "ipc"]);
    assert_eq!(refused[1].1, (4, 0xeffffff8));
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let d = apply(
        &mut podman_like(),
        &open,
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(refused_host_namespaces(&d, &open, &facts()).is_empty());
}

fn mount(dest: &str, typ: &str, source: &str, opts: &[&str]) -> Mount {
    Mount {
        destination: dest.into(),
        typ: Some(typ.into()),
        source: Some(source.into()),
        options: opts.iter().map(|o| o.to_string()).collect(),
        ..Default::default()
    }
}

#[test]
fn privileged_sysfs_and_cgroupfs_are_cut_to_read_only() {
    let privileged = || {
        let mut s = podman_like();
        s.mounts = vec![
            mount("/sys", "sysfs", "sysfs", &["nosuid", "rw"]),
            mount("/sys/fs/cgroup", "cgroup", "cgroup", &["rw"]),
            mount("/host-sys", "bind", "/sys", &["rbind", "ro"]),
            mount("/data", "bind", "/srv/data", &["rbind", "rw"]),
        ];
        s
    };
    let mut s = privileged();
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    let opts = |i: usize| s.mounts[i].options.clone();
    assert_eq!(opts(0), ["nosuid", "ro"]);
    assert_eq!(opts(1), ["ro"]);
    assert_eq!(opts(2), ["rbind", "ro", "rro"]);
    assert_eq!(opts(3), ["rbind", "rw"], "other binds are the engine's");
    let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
    assert!(c.detail.contains("mounts[0] /sys (sysfs)"), "{}", c.detail);
    assert!(c.detail.contains("mounts[2] /host-sys"), "{}", c.detail);
    assert!(
        c.detail.contains("mounts[1] /sys/fs/cgroup (cgroupfs)"),
        "{}",
        c.detail
    );
    // A cgroup namespace of its own on cgroup v2 with nsdelegate keeps a writable
    // cgroupfs: the kernel refuses the namespace root's writes to its own limits.
    let mut s = privileged();
    let v2 = FloorFacts {
        cgroup_v2: true,
        cgroup_nsdelegate: true,
        systemd_cgroup: false,
        ..facts()
    };
    apply(&mut s, &Config::default(), "c1", &HostFacts::default(), &v2).unwrap();
    assert_eq!(s.mounts[1].options, ["rw"]);
    let mut s = privileged();
    s.linux
        .as_mut()
        .unwrap()
        .namespaces
        .retain(|n| n.typ != "cgroup");
    apply(&mut s, &Config::default(), "c1", &HostFacts::default(), &v2).unwrap();
    assert_eq!(s.mounts[1].options, ["ro"]);
    // OPEN keeps what --privileged asked for.
    let mut s = privileged();
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(s.mounts[0].options, ["nosuid", "rw"]);
}

#[test]
fn cgroupfs_in_its_own_namespace_without_nsdelegate_is_cut_to_read_only() {
    // cgroup2 mounted without nsdelegate: the kernel lets a cgroup namespace root write
    // its own pids.max and memory.max, so the namespace alone keeps nothing writable.
    let mut s = podman_like();
    s.mounts = vec![
        mount("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "rw"]),
        mount("/cg2", "cgroup2", "cgroup2", &["ro", "rw"]),
        mount("/cg-ro", "cgroup", "cgroup", &["rw", "ro"]),
    ];
    assert!(s
        .linux()
        .namespaces
        .iter()
        .any(|n| n.typ == "cgroup" && n.path.is_none()));
    let plain = FloorFacts {
        cgroup_v2: true,
        cgroup_nsdelegate: false,
        ..facts()
    };
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &plain,
    )
    .unwrap();
    assert_eq!(s.mounts[0].options, ["nosuid", "ro"]);
    assert_eq!(s.mounts[1].options, ["ro"]);
    assert_eq!(s.mounts[2].options, ["rw", "ro"], "already read-only");
    let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
    assert_eq!(
        c.detail,
        "read-only: mounts[0] /sys/fs/cgroup (cgroupfs; the host's cgroup2 has no \
         nsdelegate), mounts[1] /cg2 (cgroupfs; the host's cgroup2 has no nsdelegate)"
    );
    assert!(c.reason.contains("without it"), "{}", c.reason);
    assert!(c.reason.contains("write its own limits"), "{}", c.reason);
    // The fact alone keeps nothing: nsdelegate on a host that is not pure v2.
    let mut s = podman_like();
    s.mounts = vec![mount("/sys/fs/cgroup", "cgroup", "cgroup", &["rw"])];
    let hybrid = FloorFacts {
        cgroup_v2: false,
        cgroup_nsdelegate: true,
        ..facts()
    };
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &hybrid,
    )
    .unwrap();
    assert_eq!(s.mounts[0].options, ["ro"]);
    let c = d.changes.iter().find(|c| c.field == "mounts").unwrap();
    assert!(!c.reason.contains("without it"), "{}", c.reason);
}

#[test]
fn unknown_annotations_fail_closed() {
    let mut s = podman_like();
    s.annotations.insert("moat.polcy".into(), "open".into());
    assert!(apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .unwrap_err()
    .to_string()
    .contains("unknown moat annotation"));
    let mut s = podman_like();
    s.annotations.insert("moat.network".into(), "some".into());
    assert!(apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .is_err());
}

#[test]
fn readonly_and_network_controls() {
    let mut s = podman_like();
    s.root.as_mut().unwrap().readonly = false;
    s.annotations
        .insert("moat.rootfs".into(), "readonly".into());
    s.annotations.insert("moat.network".into(), "none".into());
    s.linux
        .as_mut()
        .unwrap()
        .namespaces
        .retain(|n| n.typ != "network");
    s.linux.as_mut().unwrap().namespaces.push(Namespace {
        typ: "network".into(),
        path: Some("/run/netns/x".into()),
    });
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(d.readonly_rootfs && d.network_none);
    assert!(s.root.as_ref().unwrap().readonly);
    assert!(has_mount(&s, "/tmp") && has_mount(&s, "/workspace"));
    assert!(s
        .linux()
        .namespaces
        .iter()
        .any(|n| n.typ == "network" && n.path.is_none()));
}

fn with_memory(limit: Option<i64>, unified: &[(&str, &str)]) -> Spec {
    let mut s = podman_like();
    let res = s
        .linux
        .as_mut()
        .unwrap()
        .resources
        .get_or_insert_with(Default::default);
    res.memory = limit.map(|l| spec::Memory {
        limit: Some(l),
        ..Default::default()
    });
    if !unified.is_empty() {
        res.unified = Some(
            unified
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    s
}

fn high(s: &Spec) -> Option<String> {
    s.linux()
        .resources
        .as_ref()?
        .unified
        .as_ref()?
        .get("memory.high")
        .cloned()
}

#[test]
fn memory_high_throttles_below_every_limit_on_v2_only() {
    let v2 = FloorFacts {
        cgroup_v2: true,
        ..facts()
    };
    let run = |s: &mut Spec, cfg: &Config, f: &FloorFacts| {
        apply(s, cfg, "c1", &HostFacts::default(), f).unwrap()
    };
    let cfg = Config::default();
    // The engine's limit: 0.9 of it, whole pages.
    let mut s = with_memory(Some(100 << 20), &[]);
    let d = run(&mut s, &cfg, &v2);
    assert_eq!(high(&s).as_deref(), Some("94371840"));
    assert_eq!(d.memory_high, Some(0.9));
    // The config's limit.
    let mut s = with_memory(None, &[]);
    let lim = Config {
        memory: Some(1 << 30),
        ..Config::default()
    };
    run(&mut s, &lim, &v2);
    assert_eq!(high(&s), Some(high_of(1 << 30, 0.9).to_string()));
    // unified memory.max wins over memory.limit, as when the files are written.
    let mut s = with_memory(Some(1 << 30), &[("memory.max", "10485760")]);
    run(&mut s, &cfg, &v2);
    assert_eq!(high(&s).as_deref(), Some("9437184"));
    // The engine's own memory.high is never overwritten.
    let mut s = with_memory(Some(1 << 30), &[("memory.high", "12345")]);
    let d = run(&mut s, &cfg, &v2);
    assert_eq!(high(&s).as_deref(), Some("12345"));
    assert!(d.memory_high.is_none());
    assert!(d
        .changes
        .iter()
        .any(|c| c.action == "kept" && c.detail.contains("memory.high")));
    // No limit, unlimited, 0 (off), OPEN: nothing.
    for (limit, cfg) in [
        (None, Config::default()),
        (Some(-1), Config::default()),
        (
            Some(1 << 30),
            Config {
                memory_high: 0.0,
                ..Config::default()
            },
        ),
        (
            Some(1 << 30),
            Config {
                default_policy: Mode::Open,
                ..Config::default()
            },
        ),
    ] {
        let mut s = with_memory(limit, &[]);
        let d = run(&mut s, &cfg, &v2);
        assert!(high(&s).is_none() && d.memory_high.is_none(), "{limit:?}");
    }
    // v1 (and hybrid) memory: recorded as absent, no warning line, no unified key
    // (which the v1 driver would refuse).
    let mut s = with_memory(Some(1 << 30), &[]);
    let d = run(&mut s, &cfg, &facts());
    assert!(s.linux().resources.as_ref().unwrap().unified.is_none());
    let c = d
        .changes
        .iter()
        .find(|c| c.field == "linux.resources.unified.memory.high")
        .unwrap();
    assert_eq!(c.action, "absent");
    assert!(c.detail.contains("cgroup v1"), "{}", c.detail);
}

#[test]
fn rootfs_annotations_only_move_toward_readonly_and_size_only_down() {
    let run = |cfg: &Config, ann: &[(&str, &str)]| {
        let mut s = podman_like();
        s.root.as_mut().unwrap().readonly = false;
        for (k, v) in ann {
            s.annotations.insert(k.to_string(), v.to_string());
        }
        let d = apply(&mut s, cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        let ignored = d.changes.iter().filter(|c| c.action == "ignored").count();
        (d, ignored)
    };
    let writable = Config::default();
    let eph = Config {
        ephemeral_rootfs: true,
        rootfs_size: 1 << 30,
        ..Config::default()
    };
    let ro = Config {
        readonly_rootfs: true,
        ..Config::default()
    };
    let (d, n) = run(&writable, &[("moat.rootfs", "ephemeral")]);
    assert_eq!((d.rootfs, n), (Rootfs::Ephemeral, 0));
    assert_eq!(d.bounded_root.unwrap().size, config::ROOTFS_SIZE);
    let (d, n) = run(&eph, &[("moat.rootfs", "writable")]);
    assert_eq!((d.rootfs, n), (Rootfs::Ephemeral, 1));
    let (d, n) = run(&ro, &[("moat.rootfs", "ephemeral")]);
    assert_eq!(
        (d.rootfs, n, d.readonly_rootfs),
        (Rootfs::Readonly, 1, true)
    );
    assert!(d.bounded_root.is_none());
    let (d, n) = run(&eph, &[("moat.rootfs", "readonly")]);
    assert_eq!((d.rootfs, n), (Rootfs::Readonly, 0));
    let (d, n) = run(&eph, &[("moat.rootfs.size", "64m")]);
    assert_eq!((d.bounded_root.unwrap().size, n), (64 << 20, 0));
    let (d, n) = run(&eph, &[("moat.rootfs.size", "2g")]);
    assert_eq!((d.bounded_root.unwrap().size, n), (1 << 30, 1));
    let mut s = podman_like();
    s.annotations
        .insert("moat.rootfs.size".into(), "lots".into());
    assert!(apply(&mut s, &eph, "c1", &HostFacts::default(), &facts()).is_err());
    // A read-only spec root needs no bounded layer.
    let mut s = podman_like();
    s.root.as_mut().unwrap().readonly = true;
    let d = apply(&mut s, &eph, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d.bounded_root.is_none() && d.rootfs == Rootfs::Ephemeral);
}

#[test]
fn ephemeral_root_must_fit_below_the_memory_limit() {
    let cfg = Config {
        ephemeral_rootfs: true,
        rootfs_size: 512 << 20,
        ..Config::default()
    };
    let mut s = with_memory(Some(512 << 20), &[]);
    s.root.as_mut().unwrap().readonly = false;
    let e = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "moat.rootfs=ephemeral: the root's 536870912 bytes plus its 268435456 bytes of \
         inode space (files and xattrs) plus tmp_size 67108864 do not fit below \
         linux.resources.memory.limit 536870912 (the root's tmpfs is charged to the \
         container's memory cgroup: it would be OOM-killed before it saw ENOSPC); lower \
         [restricted] rootfs_size, rootfs_inodes or moat.rootfs.size, or raise the memory \
         limit"
    );
    // The inode space counts: data and /tmp fit, the xattrs the inodes allow would not.
    let mut s = with_memory(Some((512 << 20) + (64 << 20) + (255 << 20)), &[]);
    s.root.as_mut().unwrap().readonly = false;
    assert!(apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).is_err());
    let mut s = with_memory(Some((512 << 20) + (64 << 20) + (256 << 20)), &[]);
    s.root.as_mut().unwrap().readonly = false;
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    let b = d.bounded_root.unwrap();
    assert_eq!((b.inode_space(), b.cap()), (256 << 20, 768 << 20));
    let mut s = with_memory(Some(1 << 30), &[]);
    s.root.as_mut().unwrap().readonly = false;
    assert!(apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).is_ok());
}

fn dev_opts(s: &Spec) -> Vec<String> {
    s.mounts
        .iter()
        .find(|m| m.destination == "/dev")
        .unwrap()
        .options
        .clone()
}

#[test]
fn every_tmpfs_gets_an_inode_cap_an_engine_cap_is_kept() {
    let mut s = podman_like();
    s.annotations
        .insert("moat.rootfs".into(), "readonly".into());
    let cfg = Config {
        tmp_inodes: 777,
        ..Config::default()
    };
    apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(dev_opts(&s).contains(&"nr_inodes=16384".to_string()));
    for dest in ["/tmp", "/workspace"] {
        let m = s.mounts.iter().find(|m| m.destination == dest).unwrap();
        assert!(m.options.contains(&"nr_inodes=777".to_string()), "{m:?}");
    }
    let mut s = podman_like();
    let dev = s
        .mounts
        .iter_mut()
        .find(|m| m.destination == "/dev")
        .unwrap();
    dev.options.push("nr_inodes=99".into());
    apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    let o = dev_opts(&s);
    assert!(
        o.contains(&"nr_inodes=99".to_string()) && o.len() == 5,
        "{o:?}"
    );
    // `nr_inodes=0` is no cap (neither files nor xattrs bounded): replaced.
    for zero in ["nr_inodes=0", "nr_inodes=00", "nr_inodes=0k"] {
        let mut s = podman_like();
        let dev = s
            .mounts
            .iter_mut()
            .find(|m| m.destination == "/dev")
            .unwrap();
        dev.options.push(zero.into());
        apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
        let o = dev_opts(&s);
        assert!(
            o.contains(&"nr_inodes=16384".to_string())
                && !o.iter().any(|x| x == zero)
                && o.len() == 5,
            "{o:?}"
        );
    }
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let mut s = podman_like();
    apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(!dev_opts(&s).iter().any(|o| o.starts_with("nr_inodes")));
}

#[test]
fn userns_auto_adds_a_namespace_and_keeps_engine_maps() {
    let mut s = podman_like();
    s.annotations.insert("moat.userns".into(), "auto".into());
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(d.userns_pool && d.userns == Userns::Auto);
    assert!(s.linux().namespaces.iter().any(|n| n.typ == "user"));
    let mut s = podman_like();
    s.annotations.insert("moat.userns".into(), "auto".into());
    s.linux.as_mut().unwrap().uid_mappings = vec![spec::IdMapping {
        container_id: 0,
        host_id: 5000,
        size: 10,
    }];
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(!d.userns_pool && d.userns == Userns::Auto);
    let mut s = podman_like();
    s.annotations.insert("moat.userns".into(), "yes".into());
    assert!(apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .is_err());
    // Config default auto: the annotation cannot turn it off.
    let cfg = Config {
        userns_auto: true,
        ..Config::default()
    };
    let mut s = podman_like();
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d.userns_pool);
    let mut s = podman_like();
    s.annotations.insert("moat.userns".into(), "engine".into());
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(d.userns_pool && d.userns == Userns::Auto);
}

fn apparmor_host(loaded: &[&str]) -> HostFacts {
    HostFacts {
        apparmor: true,
        apparmor_attr_dir: true,
        apparmor_profiles: Some(loaded.iter().map(|s| s.to_string()).collect()),
        selinux: false,
        apparmor_may_load: true,
        moat_profile_loaded: loaded.contains(&"moat-default"),
    }
}

/// Rootless on an AppArmor host (rootless podman on Debian or Ubuntu): moat may not
/// load its profile, so it uses it only where root has loaded it, and says when not.
#[test]
fn rootless_apparmor_uses_moat_default_only_where_loaded() {
    let cfg = Config::default();
    let rootless = |loaded: &[&str]| HostFacts {
        apparmor_may_load: false,
        moat_profile_loaded: loaded.contains(&"moat-default"),
        ..apparmor_host(loaded)
    };
    let mut s = with_profile(None);
    let d = apply(&mut s, &cfg, "c1", &rootless(&[]), &facts()).unwrap();
    assert_eq!(s.process().apparmor_profile, None);
    let c = d
        .changes
        .iter()
        .find(|c| c.field == "process.apparmorProfile")
        .unwrap();
    assert_eq!(
        (c.action, c.detail.as_str()),
        ("not applied", "moat-default")
    );
    let mut s = with_profile(None);
    apply(&mut s, &cfg, "c1", &rootless(&["moat-default"]), &facts()).unwrap();
    assert_eq!(
        s.process().apparmor_profile.as_deref(),
        Some("moat-default")
    );
    // An unlisted profile would become moat-default: refused, not run as it asked.
    let mut s = with_profile(Some("unconfined"));
    let e = apply(&mut s, &cfg, "c1", &rootless(&[]), &facts()).unwrap_err();
    assert!(matches!(e, PolicyError::AppArmorUnavailable(_)), "{e}");
    // Rootful: moat loads its own profile, as before.
    let mut s = with_profile(None);
    apply(&mut s, &cfg, "c1", &apparmor_host(&[]), &facts()).unwrap();
    assert_eq!(
        s.process().apparmor_profile.as_deref(),
        Some("moat-default")
    );
}

fn with_profile(p: Option<&str>) -> Spec {
    let mut s = podman_like();
    s.process.as_mut().unwrap().apparmor_profile = p.map(str::to_string);
    s
}

fn profile_change(d: &Decision) -> Option<&Change> {
    d.changes
        .iter()
        .find(|c| c.field == "process.apparmorProfile")
}

#[test]
fn apparmor_unconfined_is_replaced_and_reported() {
    let host = apparmor_host(&["docker-default"]);
    for asked in ["unconfined", "my-loose-profile", "docker-default-ish"] {
        let mut s = with_profile(Some(asked));
        let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
        assert_eq!(
            s.process().apparmor_profile.as_deref(),
            Some("moat-default")
        );
        let c = profile_change(&d).expect("reported");
        assert_eq!(c.action, "replaced");
        assert_eq!(c.detail, format!("{asked} → moat-default"));
        assert_eq!(c.reason, "not in restricted.apparmor_profiles");
    }
    // None named: moat-default set, as before.
    let mut s = with_profile(None);
    let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
    assert_eq!(
        s.process().apparmor_profile.as_deref(),
        Some("moat-default")
    );
    assert_eq!(profile_change(&d).unwrap().action, "set");
}

#[test]
fn apparmor_listed_profiles_are_kept() {
    let host = apparmor_host(&["docker-default", "containers-default-0.50.1"]);
    for kept in [
        "docker-default",
        "containers-default-0.50.1",
        "moat-default",
    ] {
        let mut s = with_profile(Some(kept));
        let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
        assert_eq!(s.process().apparmor_profile.as_deref(), Some(kept));
        assert!(profile_change(&d).is_none(), "{kept}: {:?}", d.changes);
    }
    // The glob is a prefix match only.
    let cfg = Config {
        apparmor_profiles: vec!["team-*".into()],
        ..Config::default()
    };
    let host = apparmor_host(&["team-web", "other-team-x"]);
    let mut s = with_profile(Some("team-web"));
    apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
    assert_eq!(s.process().apparmor_profile.as_deref(), Some("team-web"));
    let mut s = with_profile(Some("other-team-x"));
    apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
    assert_eq!(
        s.process().apparmor_profile.as_deref(),
        Some("moat-default")
    );
    // No longer on the list: replaced.
    let mut s = with_profile(Some("docker-default"));
    apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
    assert_eq!(
        s.process().apparmor_profile.as_deref(),
        Some("moat-default")
    );
}

#[test]
fn apparmor_listed_but_not_loaded_is_an_error() {
    let host = apparmor_host(&["moat-default"]);
    let mut s = with_profile(Some("docker-default"));
    let e = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("process.apparmorProfile: profile \"docker-default\" is not loaded"),
        "{e}"
    );
    // moat-default is loaded by create itself; an unreadable list leaves it to the kernel.
    let mut s = with_profile(Some("moat-default"));
    assert!(apply(
        &mut s,
        &Config::default(),
        "c1",
        &apparmor_host(&[]),
        &facts()
    )
    .is_ok());
    let unknown = HostFacts {
        apparmor_profiles: None,
        ..apparmor_host(&[])
    };
    let mut s = with_profile(Some("docker-default"));
    assert!(apply(&mut s, &Config::default(), "c1", &unknown, &facts()).is_ok());
}

#[test]
fn apparmor_without_apparmor_or_under_open() {
    // A host without AppArmor: the spec's profile stays and is ignored at create.
    let mut s = with_profile(Some("unconfined"));
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert_eq!(s.process().apparmor_profile.as_deref(), Some("unconfined"));
    assert!(profile_change(&d).is_none());
    // OPEN runs the spec as written.
    let cfg = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let mut s = with_profile(Some("unconfined"));
    apply(&mut s, &cfg, "c1", &apparmor_host(&[]), &facts()).unwrap();
    assert_eq!(s.process().apparmor_profile.as_deref(), Some("unconfined"));
}

#[test]
fn selinux_types() {
    let host = HostFacts {
        selinux: true,
        ..HostFacts::default()
    };
    let label = |s: &Spec| s.process().selinux_label.clone();
    let mut s = podman_like();
    s.process.as_mut().unwrap().selinux_label = Some("system_u:system_r:spc_t:s0:c1,c2".into());
    let d = apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
    assert_eq!(
        label(&s).as_deref(),
        Some("system_u:system_r:container_t:s0:c1,c2")
    );
    let c = d
        .changes
        .iter()
        .find(|c| c.field == "process.selinuxLabel")
        .unwrap();
    assert_eq!(c.action, "replaced");
    let mut s = podman_like();
    s.process.as_mut().unwrap().selinux_label = Some("system_u:system_r:container_t:s0:c5".into());
    apply(&mut s, &Config::default(), "c1", &host, &facts()).unwrap();
    assert_eq!(
        label(&s).as_deref(),
        Some("system_u:system_r:container_t:s0:c5")
    );
    let cfg = Config {
        selinux_types: vec!["container_t".into(), "svirt_*".into()],
        ..Config::default()
    };
    let mut s = podman_like();
    s.process.as_mut().unwrap().selinux_label = Some("u:r:svirt_lxc_net_t:s0".into());
    apply(&mut s, &cfg, "c1", &host, &facts()).unwrap();
    assert_eq!(label(&s).as_deref(), Some("u:r:svirt_lxc_net_t:s0"));
    let mut s = podman_like();
    s.process.as_mut().unwrap().selinux_label = Some("garbage".into());
    assert!(apply(&mut s, &cfg, "c1", &host, &facts())
        .unwrap_err()
        .to_string()
        .contains("not a user:role:type"));
    // No SELinux on the host: untouched.
    let mut s = podman_like();
    s.process.as_mut().unwrap().selinux_label = Some("u:r:spc_t:s0".into());
    apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert_eq!(label(&s).as_deref(), Some("u:r:spc_t:s0"));
}

#[test]
fn exec_gets_the_init_profile_instead_of_an_unlisted_one() {
    let host = apparmor_host(&["docker-default"]);
    let init = spec::Process {
        apparmor_profile: Some("moat-default".into()),
        ..Default::default()
    };
    let mut p = spec::Process {
        apparmor_profile: Some("unconfined".into()),
        ..Default::default()
    };
    let r = restrict_exec_lsm(&mut p, &init, &Config::default(), &host).unwrap();
    assert_eq!(r, ["apparmorProfile unconfined"]);
    assert_eq!(p.apparmor_profile.as_deref(), Some("moat-default"));
    let mut p = spec::Process {
        apparmor_profile: Some("docker-default".into()),
        ..Default::default()
    };
    assert!(restrict_exec_lsm(&mut p, &init, &Config::default(), &host)
        .unwrap()
        .is_empty());
    assert_eq!(p.apparmor_profile.as_deref(), Some("docker-default"));
    let mut p = spec::Process {
        apparmor_profile: Some("containers-default-1".into()),
        ..Default::default()
    };
    assert!(restrict_exec_lsm(&mut p, &init, &Config::default(), &host).is_err());
}

/// Everything `apply` does to a spec, and says it did, as one value.
fn outcome(
    spec: &Spec,
    cfg: &Config,
    host: &HostFacts,
    floor: &FloorFacts,
) -> (serde_json::Value, serde_json::Value) {
    let mut s = spec.clone();
    let d = apply(&mut s, cfg, "c1", host, floor).unwrap();
    (
        serde_json::to_value(&s).unwrap(),
        serde_json::to_value(&d).unwrap(),
    )
}

#[test]
fn apply_is_a_function_of_its_arguments() {
    let spec = podman_like();
    let cfg = Config::default();
    let aa = HostFacts {
        apparmor: true,
        apparmor_profiles: Some(vec!["moat-default".into()]),
        moat_profile_loaded: true,
        ..Default::default()
    };
    let first = outcome(&spec, &cfg, &aa, &facts());
    // The same arguments give the same spec and decision, whatever the process's
    // environment holds: the test switch is the caller's (`container::policy`), and
    // the host is read only through the facts passed in.
    std::env::set_var("MOAT_TEST_SKIP_POLICY", "1");
    let again = outcome(&spec, &cfg, &aa, &facts());
    std::env::remove_var("MOAT_TEST_SKIP_POLICY");
    assert_eq!(first, again);
    assert_eq!(first.0["process"]["apparmorProfile"], "moat-default");
    assert_eq!(first.1["policy"], "restricted");
    // Other facts, another result, and only where the facts differ.
    let plain = outcome(&spec, &cfg, &HostFacts::default(), &facts());
    assert!(plain.0["process"].get("apparmorProfile").is_none());
    let mut without_lsm = first.0.clone();
    without_lsm["process"]
        .as_object_mut()
        .unwrap()
        .remove("apparmorProfile");
    assert_eq!(without_lsm, plain.0);
    // And another config, another result.
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    assert_eq!(outcome(&spec, &open, &aa, &facts()).1["policy"], "open");
}

#[test]
fn unenforced_records_restricted_and_changes_no_floor() {
    let spec = podman_like();
    let mut s = spec.clone();
    let d = apply_unenforced(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert_eq!(d.policy, Mode::Restricted);
    assert!(!d.enforced && d.changes.is_empty());
    assert_eq!(
        serde_json::to_value(&s).unwrap(),
        serde_json::to_value(&spec).unwrap()
    );
    assert!(refused_host_namespaces(&d, &Config::default(), &facts()).is_empty());
    let d = apply(
        &mut spec.clone(),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert!(d.enforced);
    assert!(!refused_host_namespaces(&d, &Config::default(), &facts()).is_empty());
}

#[test]
fn builtin_profiles_parse() {
    // Both are also compiled by `linux::seccomp`'s tests.
    for p in [RESTRICTED_PROFILE, FLOOR_PROFILE] {
        let s: spec::Seccomp = serde_json::from_str(p).unwrap();
        assert!(!s.syscalls.is_empty());
    }
}

#[test]
fn mounts_of_a_type_outside_the_allow_list_are_cut_binds_kept() {
    let mut s = podman_like();
    s.mounts.push(mount("/mnt/disk", "ext4", "/dev/vda", &[]));
    s.mounts.push(mount("/mnt/ram", "ramfs", "ramfs", &[]));
    s.mounts
        .push(mount("/mnt/vol", "none", "/srv/vol", &["rbind"]));
    let d = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    let dests: Vec<&str> = s.mounts.iter().map(|m| m.destination.as_str()).collect();
    assert!(!dests.contains(&"/mnt/disk") && !dests.contains(&"/mnt/ram"));
    assert!(dests.contains(&"/mnt/vol") && dests.contains(&"/proc"));
    let c = d
        .changes
        .iter()
        .find(|c| c.field == "mounts" && c.action == "removed")
        .expect("the cut is reported");
    assert!(c.detail.contains("\"ext4\"") && c.detail.contains("\"ramfs\""));
    // OPEN mounts them as runc would.
    let mut s = podman_like();
    s.mounts.push(mount("/mnt/ram", "ramfs", "ramfs", &[]));
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    apply(&mut s, &open, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(s.mounts.iter().any(|m| m.destination == "/mnt/ram"));
}

#[test]
fn realtime_scheduling_and_io_are_refused() {
    for (sched, ok) in [
        (r#"{"policy":"SCHED_FIFO","priority":1}"#, false),
        (r#"{"policy":"SCHED_RR","priority":1}"#, false),
        (
            r#"{"policy":"SCHED_DEADLINE","runtime":1,"deadline":2,"period":3}"#,
            false,
        ),
        (r#"{"policy":"SCHED_OTHER","nice":-5}"#, false),
        (r#"{"policy":"SCHED_BATCH","nice":5}"#, true),
        (r#"{"policy":"SCHED_IDLE"}"#, true),
    ] {
        let mut s = podman_like();
        s.process.as_mut().unwrap().scheduler = Some(serde_json::from_str(sched).unwrap());
        let r = apply(
            &mut s,
            &Config::default(),
            "c1",
            &HostFacts::default(),
            &facts(),
        );
        assert_eq!(r.is_ok(), ok, "{sched}");
        if let Err(e) = r {
            assert!(e.to_string().starts_with("process.scheduler: "), "{e}");
        }
    }
    let mut s = podman_like();
    s.process.as_mut().unwrap().io_priority =
        Some(serde_json::from_str(r#"{"class":"IOPRIO_CLASS_RT","priority":0}"#).unwrap());
    let e = apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("process.ioPriority: "), "{e}");
}

#[test]
fn a_capability_that_voids_a_promise_in_force_is_refused_unless_accepted() {
    let with_caps = |caps: &[&str]| {
        let mut s = podman_like();
        let all: Vec<String> = caps.iter().map(|c| c.to_string()).collect();
        let c = s.process.as_mut().unwrap().capabilities.as_mut().unwrap();
        c.bounding = Some(all.clone());
        c.effective = Some(all.clone());
        c.permitted = Some(all);
        s
    };
    let allow = |caps: &[&str], accept: &[&str]| Config {
        allowed_capabilities: caps.iter().map(|c| c.to_string()).collect(),
        accept_voided: accept.iter().map(|c| c.to_string()).collect(),
        ..Config::default()
    };
    // NET_RAW with the metadata block in force (the default): refused, naming both.
    let mut s = with_caps(&["CAP_NET_RAW"]);
    let e = apply(
        &mut s,
        &allow(&["CAP_NET_RAW"], &[]),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("CAP_NET_RAW voids the egress policy"),
        "{e}"
    );
    // Without an egress policy in force it voids nothing.
    let mut cfg = allow(&["CAP_NET_RAW"], &[]);
    cfg.egress_deny_metadata = false;
    let mut s = with_caps(&["CAP_NET_RAW"]);
    apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    // NET_RAW with [egress] allow_raw_sockets: kept, every packet judged (the metadata
    // block without a list too), which the decision records.
    let mut cfg = allow(&["CAP_NET_RAW"], &[]);
    cfg.egress_allow_raw_sockets = true;
    let mut s = with_caps(&["CAP_NET_RAW"]);
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    let e = d.egress.as_ref().expect("the metadata block");
    assert!(e.packets && e.allow.is_none() && e.list_form(), "{e:?}");
    // Without CAP_NET_RAW the metadata block stays the fixed form.
    let mut s = with_caps(&["CAP_CHOWN"]);
    let d = apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).unwrap();
    assert!(!d.egress.as_ref().unwrap().list_form());
    // allow_raw_sockets does not keep CAP_NET_ADMIN.
    let mut cfg = allow(&["CAP_NET_ADMIN"], &[]);
    cfg.egress_allow_raw_sockets = true;
    let mut s = with_caps(&["CAP_NET_ADMIN"]);
    assert!(apply(&mut s, &cfg, "c1", &HostFacts::default(), &facts()).is_err());
    // SYS_ADMIN always; accepted by the operator it is kept.
    let mut s = with_caps(&["CAP_SYS_ADMIN"]);
    assert!(apply(
        &mut s,
        &allow(&["CAP_SYS_ADMIN"], &[]),
        "c1",
        &HostFacts::default(),
        &facts()
    )
    .is_err());
    let mut s = with_caps(&["CAP_SYS_ADMIN"]);
    apply(
        &mut s,
        &allow(&["CAP_SYS_ADMIN"], &["CAP_SYS_ADMIN"]),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    // Asked for but not allowed: cut as before, nothing to refuse.
    let mut s = with_caps(&["CAP_SYS_ADMIN", "CAP_NET_RAW"]);
    apply(
        &mut s,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    // A capability that voids nothing in force passes (PTRACE without the host's pid).
    let mut s = with_caps(&["CAP_SYS_PTRACE", "CAP_MKNOD"]);
    apply(
        &mut s,
        &allow(&["CAP_SYS_PTRACE", "CAP_MKNOD"], &[]),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
}

#[test]
fn unknown_keys_are_refused_under_restricted_ignored_and_reported_under_open() {
    let json = serde_json::to_vec(&crate::spec::default::spec(false, true)).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    v["linux"]["futureField"] = serde_json::json!({"x": 1});
    v["process"]["user"]["username"] = serde_json::json!("root");
    let bytes = serde_json::to_vec(&v).unwrap();
    let spec = Spec::parse_file(&bytes, std::path::Path::new("config.json")).unwrap();
    assert_eq!(
        spec.unknown_keys,
        ["linux.futureField", "process.user.username"]
    );
    let e = apply(
        &mut spec.clone(),
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "linux.futureField: not a field moat knows (runtime-spec 1.3 as moat reads it); \
         RESTRICTED refuses what it cannot judge"
    );
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    let d = apply(
        &mut spec.clone(),
        &open,
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    let ignored: Vec<&str> = d
        .changes
        .iter()
        .filter(|c| c.action == "ignored")
        .map(|c| c.field.as_str())
        .collect();
    assert_eq!(ignored, ["linux.futureField", "process.user.username"]);
    // The runtime-spec 1.3 fields moat applies are fields, not unknown keys: kept as sent.
    v["linux"]["memoryPolicy"] = serde_json::json!({"mode": "MPOL_BIND", "nodes": "0"});
    v["process"]["execCPUAffinity"] = serde_json::json!({"initial": "0", "final": "0-1"});
    let bytes = serde_json::to_vec(&v).unwrap();
    let spec = Spec::parse_file(&bytes, std::path::Path::new("config.json")).unwrap();
    assert_eq!(
        spec.unknown_keys,
        ["linux.futureField", "process.user.username"]
    );
    let mut restricted = spec.clone();
    restricted.unknown_keys.clear();
    apply(
        &mut restricted,
        &Config::default(),
        "c1",
        &HostFacts::default(),
        &facts(),
    )
    .unwrap();
    assert_eq!(restricted.linux().memory_policy, spec.linux().memory_policy);
    assert_eq!(
        restricted.process().exec_cpu_affinity,
        spec.process().exec_cpu_affinity
    );
}

#[test]
fn net_devices_move_only_listed_interfaces_under_restricted() {
    let with = |devices: serde_json::Value| {
        let mut s = podman_like();
        s.linux.as_mut().unwrap().net_devices = Some(serde_json::from_value(devices).unwrap());
        s
    };
    let run = |s: &mut Spec, cfg: &Config| {
        apply(s, cfg, "c1", &HostFacts::default(), &facts()).map_err(|e| e.to_string())
    };
    let two = serde_json::json!({"veth-a1": {"name": "eth0"}, "eth0": {}});
    // Nothing listed (the default): the first interface is refused, naming it.
    let e = run(&mut with(two.clone()), &Config::default()).unwrap_err();
    assert_eq!(
        e,
        "linux.netDevices[\"eth0\"]: moving the host's interface \"eth0\" into a container is \
         refused under RESTRICTED (allow with [restricted] net_devices = [\"eth0\"])"
    );
    // A prefix lets its interfaces through, not the others.
    let prefix = Config {
        net_devices: vec!["veth-*".into()],
        ..Config::default()
    };
    run(
        &mut with(serde_json::json!({"veth-a1": {"name": "eth0"}})),
        &prefix,
    )
    .unwrap();
    let e = run(&mut with(two.clone()), &prefix).unwrap_err();
    assert!(e.starts_with("linux.netDevices[\"eth0\"]"), "{e}");
    // An exact name matches only itself.
    let exact = Config {
        net_devices: vec!["veth-a".into()],
        ..Config::default()
    };
    let e = run(&mut with(serde_json::json!({"veth-a1": {}})), &exact).unwrap_err();
    assert!(e.starts_with("linux.netDevices[\"veth-a1\"]"), "{e}");
    // OPEN follows runc: any interface.
    let open = Config {
        default_policy: Mode::Open,
        ..Config::default()
    };
    run(&mut with(two.clone()), &open).unwrap();
    // moat.network=none denies the network an interface would bring, under both.
    let none = Config {
        network_none: true,
        ..open
    };
    let e = run(&mut with(two), &none).unwrap_err();
    assert!(
        e.starts_with("linux.netDevices: refused with moat.network=none"),
        "{e}"
    );
}
