//! `features`: the OCI features structure (runtime-spec `features.md`), as this build of
//! moat implements it on this host (or, on the gVisor path, as runsc is given it).
//!
//! Engines act on it: containerd 2.x's shim refuses idmapped mounts unless
//! `linux.mountExtensions.idmap.enabled`, CRI-O and containerd 2.x offer Kubernetes
//! recursive read-only mounts only when `mountOptions` has `rro`, and user-namespaced pods
//! only with `user` in `linux.namespaces` and idmap enabled (containerd 1.6/1.7 read
//! none of it). So every host-dependent claim is probed here, not assumed: a namespace
//! the kernel lacks (no `/proc/self/ns/<name>`), an LSM the host does not run, and idmap
//! without `mount_setattr` are left out. tests/ops.rs tries each claim.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::Result;
use crate::linux::{capabilities, criu, hostfacts::HostFacts, mempolicy, namespaces, seccomp, sys};

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Features {
    oci_version_min: &'static str,
    oci_version_max: &'static str,
    hooks: Vec<&'static str>,
    mount_options: Vec<&'static str>,
    linux: Linux,
    annotations: BTreeMap<&'static str, String>,
    /// Annotations of `config.json` that change what moat does (runtime-spec 1.3; a
    /// value ending in `.` is a prefix): moat's own `moat.*`, which only tighten.
    potentially_unsafe_config_annotations: Vec<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Linux {
    namespaces: Vec<&'static str>,
    capabilities: Vec<&'static str>,
    cgroup: Cgroup,
    seccomp: Seccomp,
    apparmor: Enabled,
    selinux: Enabled,
    intel_rdt: IntelRdt,
    mount_extensions: MountExtensions,
    memory_policy: MemoryPolicy,
    net_devices: Enabled,
}

#[derive(Serialize)]
struct IntelRdt {
    enabled: bool,
    schemata: bool,
    monitoring: bool,
}

/// The modes and flags of `linux.memoryPolicy` moat recognises (whether the kernel has
/// them is the kernel's to say at create).
#[derive(Serialize)]
struct MemoryPolicy {
    modes: Vec<&'static str>,
    flags: Vec<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Cgroup {
    v1: bool,
    v2: bool,
    systemd: bool,
    systemd_user: bool,
    rdma: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Seccomp {
    enabled: bool,
    actions: Vec<&'static str>,
    operators: Vec<&'static str>,
    archs: Vec<&'static str>,
    known_flags: Vec<&'static str>,
    supported_flags: Vec<&'static str>,
}

#[derive(Serialize)]
struct Enabled {
    enabled: bool,
}

#[derive(Serialize)]
struct MountExtensions {
    idmap: Enabled,
}

const HOOKS: [&str; 6] = [
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// The options `mount::parse_options` acts on (or knowingly accepts as no-ops) rather
/// than passing to the filesystem (`idmap`/`ridmap`: idmapped binds, `linux/idmap.rs`).
#[rustfmt::skip]
const MOUNT_OPTIONS: &[&str] = &[
    "async", "atime", "bind", "defaults", "dev", "diratime", "exec", "idmap", "noatime", "nodev",
    "nodiratime", "noexec", "nomand", "norelatime", "nostrictatime", "nosuid", "nosymfollow",
    "private", "ratime", "rbind", "rdev", "rdiratime", "relatime", "remount", "rexec",
    "ridmap", "rnoatime", "rnodev", "rnodiratime", "rnoexec", "rnorelatime", "rnostrictatime", "rnosuid",
    "rnosymfollow", "ro", "rprivate", "rrelatime", "rro", "rrw", "rshared", "rslave",
    "rstrictatime", "rsuid", "rsymfollow", "runbindable", "rw", "shared", "slave",
    "strictatime", "suid", "symfollow", "tmpcopyup", "unbindable",
];

const NAMESPACES: [&str; 8] = [
    "cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts",
];

/// The spec's namespace type as `/proc/<pid>/ns/` names it.
fn proc_ns_name(typ: &str) -> &str {
    match typ {
        "mount" => "mnt",
        "network" => "net",
        t => t,
    }
}

fn sorted(mut v: Vec<&'static str>) -> Vec<&'static str> {
    v.sort_unstable();
    v
}

pub fn features(criu: Option<&str>) -> Features {
    let last = capabilities::last_cap() as usize;
    let host = HostFacts::probe();
    // Idmapped mounts are mount_setattr(MOUNT_ATTR_IDMAP) (linux/idmap.rs).
    let idmap = sys::missing_mount_api().is_none();
    let mut annotations = BTreeMap::new();
    annotations.insert(
        "io.github.seccomp.libseccomp.version",
        seccomp::libseccomp_version(),
    );
    // Not claimed yet: moat checkpoints and restores native containers without TCP
    // connections or external sockets, and gVisor ones through runsc (docs/security.md
    // "Checkpoint images are data", docs/integrations.md), and the engines' flows have not
    // been run through it.
    annotations.insert("org.opencontainers.runc.checkpoint.enabled", "false".into());
    // Which CRIU `checkpoint`/`restore` would run (`criu` on PATH) and whether it answers
    // CRIU's RPC here, through moat's helper moat-criu: its version, or why not.
    annotations.insert("io.github.moat.criu", criu_usable(criu));
    annotations.insert("io.github.moat.version", VERSION.into());
    // moat.egress and [egress]: whether this caller on this host can attach the egress
    // programs (cgroup BPF on the container's cgroup v2).
    annotations.insert(
        "io.github.moat.egress",
        if namespaces::bpf_cgroup() {
            "cgroup-bpf"
        } else {
            "unavailable"
        }
        .into(),
    );
    if let Some(commit) = option_env!("MOAT_COMMIT") {
        annotations.insert("io.github.moat.commit", commit.into());
    }
    Features {
        oci_version_min: "1.0.0",
        oci_version_max: crate::spec::OCI_VERSION,
        hooks: HOOKS.to_vec(),
        mount_options: MOUNT_OPTIONS.to_vec(),
        linux: Linux {
            namespaces: NAMESPACES
                .iter()
                .copied()
                .filter(|n| namespaces::flag(n) != 0)
                .filter(|n| Path::new("/proc/self/ns").join(proc_ns_name(n)).exists())
                .collect(),
            capabilities: capabilities::NAMES.iter().take(last + 1).copied().collect(),
            cgroup: Cgroup {
                v1: true,
                v2: true,
                // The systemd cgroup driver, for root and through a user's manager.
                systemd: true,
                systemd_user: true,
                // Applied where the host has the rdma controller, refused where not.
                rdma: crate::linux::cgroups::Layout::detect().is_ok_and(|l| l.offers("rdma")),
            },
            seccomp: Seccomp {
                enabled: true,
                actions: sorted(seccomp::known_actions().to_vec()),
                operators: sorted(seccomp::known_operators().to_vec()),
                archs: sorted(seccomp::supported_archs()),
                known_flags: seccomp::known_flags().to_vec(),
                supported_flags: seccomp::supported_flags(),
            },
            // Profiles and labels are applied where the host has the LSM (and ignored,
            // as runc does, where it has not): enabled means the host runs it, as runc
            // reports it.
            apparmor: Enabled {
                enabled: host.apparmor,
            },
            selinux: Enabled {
                enabled: host.selinux,
            },
            // No resctrl support in moat: linux.intelRdt is refused.
            intel_rdt: IntelRdt {
                enabled: false,
                schemata: false,
                monitoring: false,
            },
            mount_extensions: MountExtensions {
                idmap: Enabled { enabled: idmap },
            },
            memory_policy: MemoryPolicy {
                modes: sorted(mempolicy::MODES.iter().map(|(m, _)| *m).collect()),
                flags: sorted(mempolicy::FLAGS.iter().map(|(f, _)| *f).collect()),
            },
            // linux.netDevices: moved by the native create (`linux/netdev.rs`); refused for
            // a rootless or gVisor container, as runc refuses a rootless one.
            net_devices: Enabled { enabled: true },
        },
        annotations,
        potentially_unsafe_config_annotations: vec!["moat."],
    }
}

/// `VERSION (PATH)` when the `criu` moat would run answers CRIU's RPC through moat-criu,
/// else `unavailable: WHY`.
pub fn criu_usable(flag: Option<&str>) -> String {
    let criu = criu::criu_path(flag);
    let Some(path) = criu::which(&criu) else {
        return format!("unavailable: no {criu} on PATH");
    };
    match criu::version(&criu) {
        Ok(v) => format!("{v} ({})", path.display()),
        Err(e) => format!("unavailable: {}: {e}", path.display()),
    }
}

/// Prints the features JSON.
pub fn print(criu: Option<&str>) -> Result<i32> {
    // Invoked as moat-gvisor (or MOAT_RUNTIME=gvisor): what the gVisor path honours.
    if crate::gvisor::wants_gvisor_features() {
        println!(
            "{}",
            serde_json::to_string_pretty(&crate::gvisor::features_json())?
        );
        return Ok(0);
    }
    println!("{}", serde_json::to_string_pretty(&features(criu))?);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::mount;

    #[test]
    fn mount_options_are_the_ones_parse_options_knows() {
        for o in MOUNT_OPTIONS {
            let parsed = mount::parse_options(&[o.to_string()]);
            assert!(parsed.data.is_empty(), "{o} would reach the filesystem");
            assert_eq!(parsed.idmap, o.ends_with("idmap"), "{o}");
        }
        let mut s = MOUNT_OPTIONS.to_vec();
        s.sort_unstable();
        assert_eq!(s, MOUNT_OPTIONS, "keep the list sorted");
        // Something parse_options does not know is filesystem data.
        assert!(!mount::parse_options(&["size=1m".into()]).data.is_empty());
    }

    #[test]
    fn shape() {
        let v = serde_json::to_value(features(None)).unwrap();
        assert_eq!(v["ociVersionMin"], "1.0.0");
        assert_eq!(v["ociVersionMax"], crate::spec::OCI_VERSION);
        assert_eq!(v["hooks"].as_array().unwrap().len(), 6);
        let l = &v["linux"];
        let on_host = NAMESPACES
            .iter()
            .filter(|n| Path::new("/proc/self/ns").join(proc_ns_name(n)).exists())
            .count();
        assert_eq!(l["namespaces"].as_array().unwrap().len(), on_host);
        assert_eq!(l["capabilities"][0], "CAP_CHOWN");
        assert_eq!(l["cgroup"]["systemd"], true);
        assert_eq!(l["cgroup"]["systemdUser"], true);
        let rdma = crate::linux::cgroups::Layout::detect().is_ok_and(|l| l.offers("rdma"));
        assert_eq!(l["cgroup"]["rdma"], rdma);
        assert_eq!(l["intelRdt"]["enabled"], false);
        assert_eq!(l["mountExtensions"]["idmap"]["enabled"], true);
        assert_eq!(v["ociVersionMax"], "1.3.0");
        assert_eq!(l["memoryPolicy"]["modes"].as_array().unwrap().len(), 7);
        assert_eq!(l["memoryPolicy"]["flags"].as_array().unwrap().len(), 3);
        assert_eq!(l["netDevices"]["enabled"], true);
        assert_eq!(v["potentiallyUnsafeConfigAnnotations"][0], "moat.");
        let sc = &l["seccomp"];
        assert!(sc["archs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "SCMP_ARCH_X86_64" || a == "SCMP_ARCH_AARCH64"));
        let known = sc["knownFlags"].as_array().unwrap();
        for f in sc["supportedFlags"].as_array().unwrap() {
            assert!(known.contains(f), "{f} supported but not known");
        }
        assert_eq!(
            v["annotations"]["org.opencontainers.runc.checkpoint.enabled"],
            "false"
        );
        assert_eq!(v["annotations"]["io.github.moat.version"], VERSION);
    }
}
