//! What runsc reads: its `config.json` and exec's process files are serialised from moat's
//! typed spec, after the policy, never copied from the engine's document.
//!
//! Go's `encoding/json` matches keys case-insensitively and keeps the last duplicate, so
//! any byte of the engine's JSON that moat's parse did not see could be a field runsc
//! applies (`process."Capabilities"`: CAP_SYS_ADMIN inside the sentry). The key check
//! (`spec::keys`) refuses those documents; this module makes sure runsc is given nothing
//! else to read: every key of runsc's JSON is a field of moat's spec types, and the
//! fields those types keep as opaque JSON reach runsc only when they are on
//! [`PASS_THROUGH`], re-serialised in their runtime-spec shape. Fields moat does not model
//! (`vm`, `windows`, `process.commandLine`, anything unknown) are dropped.

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::spec::{self, keys, Process, Spec};

/// A field moat keeps as opaque JSON that runsc is given.
pub struct PassThrough {
    /// Its JSON path.
    pub field: &'static str,
    /// What runsc does with it.
    pub why: &'static str,
    /// Parses the value in its runtime-spec shape and serialises it again, so that only
    /// the shape's keys reach runsc.
    retype: fn(&Value) -> serde_json::Result<Value>,
}

fn retype<T: serde::de::DeserializeOwned + serde::Serialize>(
    v: &Value,
) -> serde_json::Result<Value> {
    serde_json::to_value(serde_json::from_value::<T>(v.clone())?)
}

/// The opaque fields runsc 20221219 reads. The others moat keeps opaque
/// (`linux.intelRdt`, `linux.resources.rdma`) are dropped: runsc ignores them (its rdma
/// controller is a no-op). (`linux.netDevices` never gets here: `select` refuses it.)
pub const PASS_THROUGH: &[PassThrough] = &[PassThrough {
    field: "linux.resources.network",
    why: "runsc writes net_cls.classid and net_prio.ifpriomap of the sandbox's host cgroup",
    retype: retype::<spec::NetworkResources>,
}];

/// System calls whose kernel name (libseccomp's, the one profiles use) runsc 20221219's
/// x86_64 table spells differently: its OCI seccomp converter looks each name up in that
/// table and drops the ones it lacks (`OCI seccomp: ignoring syscall "pselect6"`), so a
/// rule naming only the kernel's name does nothing under gVisor. podman's and Docker's
/// profiles allow `pselect6`; without its other name the sentry gave syscall 270 the
/// profile's default action, and `make -j` died with `pselect jobs pipe: Operation not
/// permitted`. Found by comparing every x86_64 number's name in libseccomp with `runsc
/// help syscalls` (the rest differ only in syscalls runsc lacks: `openat2` and newer).
pub const RUNSC_SYSCALL_NAMES: &[(&str, &str)] = &[("pselect6", "pselect"), ("_sysctl", "sysctl")];

/// Adds runsc's name of a system call to every rule that names it the kernel's way
/// ([`RUNSC_SYSCALL_NAMES`]): same number, action and arguments, so an allow and a deny
/// both mean under gVisor what they mean natively.
fn add_runsc_syscall_names(seccomp: &mut spec::Seccomp) {
    for rule in &mut seccomp.syscalls {
        for (kernel, runsc) in RUNSC_SYSCALL_NAMES {
            if rule.names.iter().any(|n| n == kernel) && !rule.names.iter().any(|n| n == runsc) {
                rule.names.push((*runsc).to_string());
            }
        }
    }
}

/// runsc's config.json for `spec` (the policy already applied): `root.path` and relative
/// bind-mount sources made absolute against the caller's bundle (runsc would resolve them
/// against the shadow bundle), and the seccomp rules given runsc's names of the system
/// calls it spells differently.
pub fn config_json(spec: &Spec, bundle: &Path, rootfs: &Path) -> Result<Vec<u8>> {
    let mut s = spec.clone();
    if let Some(sc) = s.linux.as_mut().and_then(|l| l.seccomp.as_mut()) {
        add_runsc_syscall_names(sc);
    }
    if let Some(root) = s.root.as_mut() {
        root.path = rootfs.to_path_buf();
    }
    for m in &mut s.mounts {
        let bind = m.typ.as_deref() == Some("bind")
            || m.options.iter().any(|o| o == "bind" || o == "rbind");
        if let Some(src) = m.source.as_mut().filter(|s| bind && !s.starts_with('/')) {
            *src = bundle.join(&*src).display().to_string();
        }
    }
    let mut v = serde_json::to_value(&s).expect("spec serialises");
    for field in keys::opaque_fields::<Spec>() {
        let pointer = format!("/{}", field.replace('.', "/"));
        match PASS_THROUGH.iter().find(|p| p.field == field) {
            Some(p) => {
                if let Some(x) = v.pointer_mut(&pointer) {
                    *x = (p.retype)(x).with_context(|| format!("config.json: {field}"))?;
                    crate::log::debug(&format!("runsc is given {field}: {}", p.why));
                }
            }
            None => remove(&mut v, &pointer),
        }
    }
    Ok(serde_json::to_vec(&v)?)
}

/// Removes the value at a JSON pointer, if there is one.
fn remove(v: &mut Value, pointer: &str) {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    if let Some(o) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
        o.remove(last);
    }
}

/// An exec process file as runsc gets it: the caller's file parsed (keys checked) and
/// serialised from moat's type.
pub fn read_process(path: &Path) -> Result<Value> {
    let b = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    let p: Process =
        spec::from_slice(&b).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(serde_json::to_value(p).expect("process serialises"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of `v`, as dotted paths with `[]` for array elements.
    fn keys_of(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, c) in o {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    out.push(p.clone());
                    keys_of(c, &p, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| keys_of(c, &format!("{path}[]"), out)),
            _ => {}
        }
    }

    #[test]
    fn runsc_gets_moats_fields_only() {
        let engine = br#"{"ociVersion":"1.0.2",
            "process":{"args":["sh"],"cwd":"/","fooBar":1,"commandLine":"x",
                       "user":{"uid":0,"gid":0,"username":"root"},
                       "capabilities":{"bounding":["CAP_CHOWN"]}},
            "root":{"path":"rootfs","readonly":true},
            "mounts":[{"destination":"/a","type":"bind","source":"data","extra":1},
                      {"destination":"/b","source":"/abs","options":["rbind"]},
                      {"destination":"/c","type":"tmpfs","source":"tmpfs"}],
            "annotations":{"dev.gvisor.x":"1","Foo":"a","foo":"b"},
            "linux":{"foo":{"bar":1},"namespaces":[{"type":"pid"}],
                     "resources":{"pids":{"limit":5},"rdma":{"mlx":{"hcaHandles":1}},
                                  "network":{"classID":7,"fooBar":2,
                                             "priorities":[{"name":"eth0","priority":3,"x":1}]}},
                     "intelRdt":{"closID":"x"}},
            "vm":{"hypervisor":{"path":"/x"}},"windows":{}}"#;
        let s = Spec::parse(engine).unwrap();
        let out = config_json(&s, Path::new("/b/x"), Path::new("/b/x/rootfs")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let mut all = Vec::new();
        keys_of(&v, "", &mut all);
        for gone in [
            "process.fooBar",
            "process.commandLine",
            "process.user.username",
            "mounts[].extra",
            "linux.foo",
            "linux.resources.rdma",
            "linux.resources.network.fooBar",
            "linux.resources.network.priorities[].x",
            "linux.intelRdt",
            "vm",
            "windows",
        ] {
            assert!(!all.iter().any(|k| k == gone), "{gone} reached runsc: {v}");
        }
        // The pass-through field, in its runtime-spec shape.
        assert_eq!(
            v["linux"]["resources"]["network"],
            serde_json::json!({"classID": 7, "priorities": [{"name": "eth0", "priority": 3}]})
        );
        assert_eq!(v["linux"]["resources"]["pids"]["limit"], 5);
        assert_eq!(v["annotations"]["Foo"], "a");
        assert_eq!(v["annotations"]["foo"], "b");
        assert_eq!(
            v["process"]["capabilities"]["bounding"],
            serde_json::json!(["CAP_CHOWN"])
        );
        assert_eq!(v["root"]["path"], "/b/x/rootfs");
        assert_eq!(v["root"]["readonly"], true);
        assert_eq!(v["mounts"][0]["source"], "/b/x/data");
        assert_eq!(v["mounts"][1]["source"], "/abs");
        assert_eq!(v["mounts"][2]["source"], "tmpfs");
        // What runsc reads is what moat reads back.
        let again = Spec::parse(&out).unwrap();
        assert_eq!(serde_json::to_value(&again).unwrap(), v);
    }

    #[test]
    fn seccomp_rules_get_runscs_syscall_names() {
        let s = Spec::parse(
            br#"{"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
                {"names":["read","pselect6"],"action":"SCMP_ACT_ALLOW"},
                {"names":["_sysctl"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":1,"op":"SCMP_CMP_EQ"}]},
                {"names":["pselect6","pselect"],"action":"SCMP_ACT_ALLOW"},
                {"names":["write"],"action":"SCMP_ACT_ALLOW"}]}}}"#,
        )
        .unwrap();
        let out = config_json(&s, Path::new("/b"), Path::new("/b/r")).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let rules = &v["linux"]["seccomp"]["syscalls"];
        assert_eq!(
            rules[0]["names"],
            serde_json::json!(["read", "pselect6", "pselect"])
        );
        assert_eq!(rules[1]["names"], serde_json::json!(["_sysctl", "sysctl"]));
        assert_eq!(rules[1]["args"][0]["value"], 1);
        assert_eq!(
            rules[2]["names"],
            serde_json::json!(["pselect6", "pselect"])
        );
        assert_eq!(rules[3]["names"], serde_json::json!(["write"]));
        // The engine's spec itself is unchanged (policy.json and verify read moat's view).
        assert_eq!(
            s.linux().seccomp.as_ref().unwrap().syscalls[0].names.len(),
            2
        );
    }

    #[test]
    fn every_opaque_field_is_decided() {
        for p in PASS_THROUGH {
            assert!(
                keys::opaque_fields::<Spec>().iter().any(|f| f == p.field),
                "{} is not an opaque field of Spec",
                p.field
            );
            assert!(!p.why.is_empty());
        }
    }

    #[test]
    fn a_pass_through_field_of_the_wrong_shape_is_refused() {
        let s = Spec::parse(br#"{"linux":{"resources":{"network":{"classID":"x"}}}}"#).unwrap();
        let e = config_json(&s, Path::new("/b"), Path::new("/b/r")).unwrap_err();
        assert!(
            format!("{e:#}").starts_with("config.json: linux.resources.network: "),
            "{e:#}"
        );
    }
}
