//! Checks made before any side effect: a bundle that fails here leaves nothing behind.

use super::Spec;

/// A spec field that moat cannot honour, named by its JSON path.
#[derive(Debug, thiserror::Error)]
#[error("config.json: {field}: {reason}")]
pub struct Invalid {
    pub field: String,
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

pub const NAMESPACE_TYPES: [&str; 8] = [
    "pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time",
];

/// `linux.devices[].path` made lexically clean (`.`, `..`, repeated `/`), or `None` when
/// the clean path is not strictly below `/dev`. The child creates (or, in a user
/// namespace, binds from the host) exactly this path, so no `..` ever reaches the kernel.
pub fn device_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut comps: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                comps.pop();
            }
            c => comps.push(c),
        }
    }
    (comps.len() >= 2 && comps[0] == "dev").then(|| format!("/{}", comps.join("/")))
}

/// The longest interface name the kernel takes: `IFNAMSIZ` (16) less its NUL.
pub const IFNAME_MAX: usize = 15;

/// Why the kernel would refuse `name` as an interface name (its `dev_valid_name`: empty,
/// longer than [`IFNAME_MAX`] bytes, `.` or `..`, a `/`, `:` or white space), or a NUL
/// (which would cut it short); `None` when it is valid.
pub fn interface_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an interface name must not be empty".into());
    }
    if name.len() > IFNAME_MAX {
        return Some(format!(
            "{name:?} is longer than {IFNAME_MAX} bytes (the kernel's IFNAMSIZ)"
        ));
    }
    if name == "." || name == ".." {
        return Some(format!("{name:?} is not an interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | ':' | '\0') || c.is_ascii_whitespace() || *c == '\x0b')
    {
        return Some(format!(
            "{name:?} contains {c:?}, which no interface name may hold"
        ));
    }
    None
}

/// `linux.netDevices`: a network namespace of the container's own to move them into (as
/// runc: without one they would land in the host's), valid names on both sides, and no
/// two interfaces given the same name in the container.
fn net_devices(linux: &super::Linux) -> Result<(), Invalid> {
    let devices = linux.net_devices();
    if devices.is_empty() {
        return Ok(());
    }
    if !linux.namespaces.iter().any(|n| n.typ == "network") {
        return Err(invalid(
            "linux.netDevices",
            "needs a network namespace of the container's own (linux.namespaces has no \
             \"network\" entry: the interfaces would stay in the host's)",
        ));
    }
    for (i, &(host, name)) in devices.iter().enumerate() {
        if let Some(why) = interface_name_problem(host) {
            return Err(invalid(format!("linux.netDevices[{host:?}]"), why));
        }
        let explicit = linux
            .net_devices
            .as_ref()
            .and_then(|m| m.get(host))
            .and_then(|d| d.name.as_deref())
            .filter(|n| !n.is_empty());
        if let Some(why) = explicit.and_then(interface_name_problem) {
            return Err(invalid(format!("linux.netDevices[{host:?}].name"), why));
        }
        if let Some((other, _)) = devices[..i].iter().find(|(_, n)| *n == name) {
            return Err(invalid(
                format!("linux.netDevices[{host:?}]"),
                format!(
                    "would be named {name:?} in the container, as linux.netDevices[{other:?}] \
                     would"
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the spec, and normalises what the rest of moat must see in one form only.
/// runc takes a namespace listed twice alike (same type, same or no path) as one: an
/// engine that appends one the spec already has (runc's delete.bats adds a cgroup
/// namespace to a spec that lists it) keeps working. The repeats are dropped, with a
/// warning; what is left is checked as usual.
fn drop_repeated_namespaces(namespaces: &mut Vec<super::Namespace>) {
    let mut kept: Vec<super::Namespace> = Vec::with_capacity(namespaces.len());
    for (i, ns) in std::mem::take(namespaces).into_iter().enumerate() {
        if kept.iter().any(|k| k.typ == ns.typ && k.path == ns.path) {
            crate::log::warn(&format!(
                "linux.namespaces[{i}]: namespace {:?} listed again; taken once, as runc does",
                ns.typ
            ));
            continue;
        }
        kept.push(ns);
    }
    *namespaces = kept;
}

/// The container path a host path names when it lies lexically inside the rootfs
/// (`/bundle/rootfs/mnt/x` → `/mnt/x`), else `None`. Lexical, as runc's check is: the
/// rootfs spelt another way (through a host symlink) is a host path like any other.
pub fn inside(rootfs: &std::path::Path, source: &std::path::Path) -> Option<String> {
    let clean = |p: &std::path::Path| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in p.components() {
            match c {
                std::path::Component::Normal(s) => out.push(s.to_string_lossy().into_owned()),
                std::path::Component::ParentDir => {
                    out.pop();
                }
                _ => {}
            }
        }
        out
    };
    let (root, src) = (clean(rootfs), clean(source));
    if rootfs.is_absolute() != source.is_absolute() || !src.starts_with(&root) {
        return None;
    }
    Some(format!("/{}", src[root.len()..].join("/")))
}

/// Mount destinations written as host paths inside the rootfs (`/bundle/rootfs/mnt`, as
/// runc's mounts.bats writes some) made container paths (`/mnt`), as runc strips the
/// rootfs from them; before the policy and the plan read them.
pub fn strip_rootfs(spec: &mut Spec, rootfs: &std::path::Path) {
    if !rootfs.is_absolute() {
        return;
    }
    for m in &mut spec.mounts {
        if let Some(p) = inside(rootfs, std::path::Path::new(&m.destination)) {
            m.destination = p;
        }
    }
}

pub fn validate(spec: &mut Spec) -> Result<(), Invalid> {
    if let Some(linux) = spec.linux.as_mut() {
        for (i, d) in linux.devices.iter_mut().enumerate() {
            match device_path(&d.path) {
                Some(p) => d.path = p,
                None => {
                    return Err(invalid(
                        format!("linux.devices[{i}].path"),
                        format!("{:?} is not a path under /dev", d.path),
                    ))
                }
            }
        }
        drop_repeated_namespaces(&mut linux.namespaces);
    }
    for (i, m) in spec.mounts.iter_mut().enumerate() {
        if m.destination.is_empty() {
            return Err(invalid(
                format!("mounts[{i}].destination"),
                "must not be empty",
            ));
        }
        // runc takes a relative destination as relative to `/` (deprecated, with a
        // warning). Made absolute here, so every later reader (the policy's floor, which
        // matches destinations, the plan, runsc's copy of the spec) sees one form.
        if !m.destination.starts_with('/') {
            crate::log::warn(&format!(
                "mounts[{i}].destination: {:?} is not absolute; taken as relative to /, as runc does",
                m.destination
            ));
            m.destination = format!("/{}", m.destination);
        }
    }
    let spec = &*spec;
    let major = spec.oci_version.split('.').next().unwrap_or("");
    if major != "1" {
        return Err(invalid(
            "ociVersion",
            format!(
                "unsupported version {:?} (moat supports 1.x)",
                spec.oci_version
            ),
        ));
    }
    if let Some(root) = &spec.root {
        if root.path.as_os_str().is_empty() {
            return Err(invalid("root.path", "must not be empty"));
        }
    }
    if let Some(p) = &spec.process {
        if p.cwd.is_empty() || !p.cwd.starts_with('/') {
            return Err(invalid(
                "process.cwd",
                format!("{:?} is not an absolute path", p.cwd),
            ));
        }
    }
    if let Some(hooks) = &spec.hooks {
        for (kind, list) in [
            ("prestart", &hooks.prestart),
            ("createRuntime", &hooks.create_runtime),
            ("createContainer", &hooks.create_container),
            ("startContainer", &hooks.start_container),
            ("poststart", &hooks.poststart),
            ("poststop", &hooks.poststop),
        ] {
            for (i, h) in list.iter().enumerate() {
                if !h.path.starts_with('/') {
                    return Err(invalid(
                        format!("hooks.{kind}[{i}].path"),
                        format!("{:?} is not an absolute path", h.path),
                    ));
                }
                if matches!(h.timeout, Some(t) if t <= 0) {
                    return Err(invalid(
                        format!("hooks.{kind}[{i}].timeout"),
                        "must be greater than zero",
                    ));
                }
            }
        }
    }
    let Some(linux) = &spec.linux else {
        return Ok(());
    };
    // Different paths (or a path and a new one) for one type cannot both be had: refused.
    let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
    for (i, ns) in linux.namespaces.iter().enumerate() {
        if !NAMESPACE_TYPES.contains(&ns.typ.as_str()) {
            return Err(invalid(
                format!("linux.namespaces[{i}].type"),
                format!("unknown namespace type {:?}", ns.typ),
            ));
        }
        if let Some(path) = &ns.path {
            if !path.starts_with('/') {
                return Err(invalid(
                    format!("linux.namespaces[{i}].path"),
                    format!("{path:?} is not an absolute path"),
                ));
            }
        }
        let this = (ns.typ.as_str(), ns.path.as_deref());
        match seen.iter().find(|(t, _)| *t == this.0) {
            Some((_, first_path)) => {
                let show =
                    |p: Option<&str>| p.map_or("a new one".to_string(), |p| format!("{p:?}"));
                return Err(invalid(
                    format!("linux.namespaces[{i}]"),
                    format!(
                        "namespace {:?} listed twice, as {} and as {}",
                        ns.typ,
                        show(*first_path),
                        show(this.1)
                    ),
                ));
            }
            None => seen.push(this),
        }
    }
    let seen: Vec<&str> = seen.iter().map(|(t, _)| *t).collect();
    let has_userns = seen.contains(&"user");
    if !has_userns && (!linux.uid_mappings.is_empty() || !linux.gid_mappings.is_empty()) {
        return Err(invalid(
            "linux.uidMappings",
            "id mappings need a user namespace in linux.namespaces",
        ));
    }
    if linux.time_offsets.is_some() && !seen.contains(&"time") {
        return Err(invalid(
            "linux.timeOffsets",
            "time offsets need a time namespace in linux.namespaces",
        ));
    }
    if let Some(offsets) = &linux.time_offsets {
        for clock in offsets.keys() {
            if clock != "monotonic" && clock != "boottime" {
                return Err(invalid(
                    format!("linux.timeOffsets.{clock}"),
                    "only monotonic and boottime clocks can be offset",
                ));
            }
        }
    }
    if let Some(p) = &linux.rootfs_propagation {
        if !matches!(
            p.as_str(),
            "" | "shared"
                | "slave"
                | "private"
                | "unbindable"
                | "rshared"
                | "rslave"
                | "rprivate"
                | "runbindable"
        ) {
            return Err(invalid(
                "linux.rootfsPropagation",
                format!("unknown propagation {p:?}"),
            ));
        }
    }
    if linux.intel_rdt.is_some() {
        return Err(invalid(
            "linux.intelRdt",
            "refused: moat does not apply Intel RDT (no resctrl support: `moat features` says \
             intelRdt.enabled false)",
        ));
    }
    net_devices(linux)?;
    if let Some(r) = &linux.resources {
        // Whether the host has the controller is the cgroup plan's to say (it knows the
        // hierarchies); the shape is checked here, before anything exists.
        if let Some(v) = &r.rdma {
            super::rdma_limits(v).map_err(|(field, reason)| invalid(field, reason))?;
        }
    }
    for (i, d) in linux.devices.iter().enumerate() {
        if !matches!(d.typ.as_str(), "c" | "b" | "u" | "p") {
            return Err(invalid(
                format!("linux.devices[{i}].type"),
                format!("unknown device type {:?}", d.typ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
        Spec::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn rejects_major_2() {
        let e = validate(&mut spec(r#"{"ociVersion":"2.0.0"}"#)).unwrap_err();
        assert_eq!(e.field, "ociVersion");
    }

    #[test]
    fn rejects_unknown_namespace() {
        let e = validate(&mut spec(
            r#"{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"pid"},{"type":"bogus"}]}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.field, "linux.namespaces[1].type");
        assert!(e.to_string().contains("bogus"));
    }

    #[test]
    fn a_repeated_namespace_is_taken_once_and_a_conflicting_one_refused() {
        let mut s = spec(
            r#"{"ociVersion":"1.0.2","process":{"args":["x"],"cwd":"/"},"linux":{"namespaces":
            [{"type":"pid"},{"type":"cgroup"},{"type":"pid"},{"type":"cgroup"}]}}"#,
        );
        validate(&mut s).unwrap();
        let types: Vec<&str> = s
            .linux()
            .namespaces
            .iter()
            .map(|n| n.typ.as_str())
            .collect();
        assert_eq!(types, ["pid", "cgroup"]);
        let e = validate(&mut spec(
            r#"{"ociVersion":"1.0.2","linux":{"namespaces":[{"type":"network"},
            {"type":"network","path":"/proc/1/ns/net"}]}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.field, "linux.namespaces[1]");
        assert_eq!(
            e.reason,
            "namespace \"network\" listed twice, as a new one and as \"/proc/1/ns/net\""
        );
    }

    #[test]
    fn rejects_mappings_without_userns() {
        let e = validate(&mut spec(
            r#"{"ociVersion":"1.0.2","linux":{"uidMappings":[{"containerID":0,"hostID":1,"size":1}]}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.field, "linux.uidMappings");
    }

    #[test]
    fn refuses_unimplemented_fields() {
        let e = validate(&mut spec(
            r#"{"ociVersion":"1.0.2","linux":{"intelRdt":{}}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.field, "linux.intelRdt");
    }

    fn net_devices(devices: &str, namespaces: &str) -> Result<(), Invalid> {
        validate(&mut spec(&format!(
            r#"{{"ociVersion":"1.3.0","linux":{{"namespaces":{namespaces},"netDevices":{devices}}}}}"#
        )))
    }

    #[test]
    fn net_devices_need_a_network_namespace_and_valid_distinct_names() {
        let own = r#"[{"type":"network"},{"type":"mount"}]"#;
        net_devices(
            r#"{"veth1":{},"veth2":{"name":"eth0"},"veth3":{"name":""}}"#,
            own,
        )
        .unwrap();
        net_devices(
            r#"{"a":{}}"#,
            r#"[{"type":"network","path":"/run/netns/x"}]"#,
        )
        .unwrap();
        net_devices("{}", "[]").unwrap();
        let e = net_devices(r#"{"veth1":{}}"#, r#"[{"type":"mount"}]"#).unwrap_err();
        assert_eq!(e.field, "linux.netDevices");
        assert!(e.reason.contains("network namespace"), "{e}");
        for (devices, field) in [
            (r#"{"a/b":{}}"#, r#"linux.netDevices["a/b"]"#),
            (r#"{"..":{}}"#, r#"linux.netDevices[".."]"#),
            (
                r#"{"veth1":{"name":"."}}"#,
                r#"linux.netDevices["veth1"].name"#,
            ),
            (
                r#"{"veth1":{"name":"a:b"}}"#,
                r#"linux.netDevices["veth1"].name"#,
            ),
            (
                r#"{"veth1":{"name":"a b"}}"#,
                r#"linux.netDevices["veth1"].name"#,
            ),
            (
                r#"{"veth1":{"name":"a\u0000"}}"#,
                r#"linux.netDevices["veth1"].name"#,
            ),
            (
                r#"{"veth1":{"name":"0123456789abcdef"}}"#,
                r#"linux.netDevices["veth1"].name"#,
            ),
            (
                r#"{"0123456789abcdef":{}}"#,
                r#"linux.netDevices["0123456789abcdef"]"#,
            ),
            (
                r#"{"a":{"name":"x"},"b":{"name":"x"}}"#,
                r#"linux.netDevices["b"]"#,
            ),
            (r#"{"a":{},"b":{"name":"a"}}"#, r#"linux.netDevices["b"]"#),
        ] {
            let e = net_devices(devices, own).unwrap_err();
            assert_eq!(e.field, field, "{devices}: {e}");
            assert!(!e.to_string().contains('\n'), "one line: {e}");
        }
        // The longest name the kernel takes.
        net_devices(r#"{"veth1":{"name":"0123456789abcde"}}"#, own).unwrap();
    }

    #[test]
    fn accepts_runc_default() {
        let mut s: Spec = serde_json::from_value(crate::spec::default::spec(false, true)).unwrap();
        validate(&mut s).unwrap();
    }

    fn device(path: &str) -> Result<String, Invalid> {
        let mut s = spec(&format!(
            r#"{{"ociVersion":"1.0.2","linux":{{"devices":[{{"type":"c","path":"/dev/null","major":1,"minor":3}},{{"type":"c","path":{path:?},"major":1,"minor":3}}]}}}}"#
        ));
        validate(&mut s)?;
        Ok(s.linux.unwrap().devices[1].path.clone())
    }

    #[test]
    fn device_paths_are_normalised_below_dev() {
        assert_eq!(device("/dev//fuse").unwrap(), "/dev/fuse");
        assert_eq!(device("/dev/./net/../net/tun").unwrap(), "/dev/net/tun");
        assert_eq!(device("//dev/kvm/").unwrap(), "/dev/kvm");
        for bad in [
            "/dev/../etc/x",
            "/tmp/x",
            "/dev",
            "/dev/",
            "/dev/x/../..",
            "dev/x",
            "/../dev/../etc",
            "",
        ] {
            let e = device(bad).unwrap_err();
            assert_eq!(e.field, "linux.devices[1].path", "{bad:?}");
            assert!(e.to_string().contains("under /dev"), "{e}");
        }
        // `/../dev/x` is `/dev/x`: `..` at the root stays there, as the kernel resolves it.
        assert_eq!(device("/../dev/x").unwrap(), "/dev/x");
    }

    /// `linux.resources.rdma` is checked before anything exists: each device name is one
    /// `rdma.max` token, each value a count the kernel takes.
    #[test]
    fn rdma_names_and_values_are_checked() {
        let check = |rdma: &str| {
            let j = format!(
                r#"{{"ociVersion":"1.3.0","process":{{"args":["x"],"cwd":"/"}},
                    "linux":{{"resources":{{"rdma":{rdma}}}}}}}"#
            );
            validate(&mut spec(&j)).map_err(|e| e.to_string())
        };
        check(r#"{"mlx5_0":{"hcaHandles":3,"hcaObjects":1000},"rxe0":{},"x":{"hcaObjects":0}}"#)
            .unwrap();
        check(r#"{"rxe0":{"hcaHandles":2147483647}}"#).unwrap();
        let long = "d".repeat(64);
        for (rdma, want) in [
            (
                r#"{"":{"hcaHandles":1}}"#.to_string(),
                r#"linux.resources.rdma[""]: not an RDMA device name"#,
            ),
            (
                r#"{"rxe 0":{"hcaHandles":1}}"#.into(),
                r#"linux.resources.rdma["rxe 0"]: not an RDMA device name"#,
            ),
            (
                r#"{"rxe0\nmlx5_0":{"hcaHandles":1}}"#.into(),
                r#"linux.resources.rdma["rxe0\nmlx5_0"]: not an RDMA device name"#,
            ),
            (r#"{"../rxe0":{}}"#.into(), "not an RDMA device name"),
            (format!(r#"{{"{long}":{{}}}}"#), "not an RDMA device name"),
            (
                r#"{"rxe0":{"hcaHandles":-1}}"#.into(),
                r#"linux.resources.rdma["rxe0"].hcaHandles: -1 is out of range: a count from 0 to 2147483647"#,
            ),
            (
                r#"{"rxe0":{"hcaObjects":-5}}"#.into(),
                r#"linux.resources.rdma["rxe0"].hcaObjects: -5 is out of range"#,
            ),
            (
                r#"{"rxe0":{"hcaObjects":4294967295}}"#.into(),
                "4294967295 is out of range",
            ),
            (
                r#"{"rxe0":{"hcaHandles":"3"}}"#.into(),
                r#"linux.resources.rdma["rxe0"]: invalid type: string"#,
            ),
            (
                r#"{"rxe0":{"hcaHandle":3}}"#.into(),
                r#"linux.resources.rdma["rxe0"]: unknown field `hcaHandle`"#,
            ),
            (
                r#"{"rxe0":3}"#.into(),
                r#"linux.resources.rdma["rxe0"]: invalid type"#,
            ),
            ("[]".into(), "linux.resources.rdma: must be an object"),
        ] {
            let e = check(&rdma).unwrap_err();
            assert!(
                e.starts_with("config.json: ") && e.contains(want),
                "{rdma}: {e}"
            );
        }
    }
}
