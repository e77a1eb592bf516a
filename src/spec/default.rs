//! The starter `config.json` written by `moat spec`, shaped like `runc spec`'s.

use serde_json::{json, Value};

/// runc's default masked and read-only paths: the starter spec's, and what the
/// RESTRICTED policy adds to a spec that lacks them.
pub const MASKED_PATHS: [&str; 10] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/proc/scsi",
];

pub const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// `cgroupns`: give the container a cgroup namespace of its own. runc's starter spec has one
/// only on a cgroup v2-only host (`moat spec` passes whether this host is one), so that on a
/// v1 or hybrid host the container sees its cgroup paths as runc's tests and tools expect.
pub fn spec(rootless: bool, cgroupns: bool) -> Value {
    let caps = json!(["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]);
    let mut devpts = vec![
        "nosuid",
        "noexec",
        "newinstance",
        "ptmxmode=0666",
        "mode=0620",
    ];
    if !rootless {
        devpts.push("gid=5");
    }
    // Rootless too: a network namespace of its own (lo up at create) and so a fresh
    // read-only sysfs, where runc's rootless spec shares the host's network namespace and
    // binds the host's /sys, both of which RESTRICTED refuses.
    let sys = json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
                     "options": ["nosuid", "noexec", "nodev", "ro"]});
    let mut namespaces = vec![
        json!({"type": "pid"}),
        json!({"type": "network"}),
        json!({"type": "ipc"}),
        json!({"type": "uts"}),
        json!({"type": "mount"}),
    ];
    if cgroupns {
        namespaces.push(json!({"type": "cgroup"}));
    }
    let mut linux = json!({
        "namespaces": namespaces,
        "maskedPaths": MASKED_PATHS,
        "readonlyPaths": READONLY_PATHS,
    });
    if rootless {
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        linux["namespaces"]
            .as_array_mut()
            .expect("namespaces is an array")
            .push(json!({"type": "user"}));
        linux["uidMappings"] = json!([{"containerID": 0, "hostID": uid, "size": 1}]);
        linux["gidMappings"] = json!([{"containerID": 0, "hostID": gid, "size": 1}]);
    } else {
        linux["resources"] = json!({"devices": [{"allow": false, "access": "rwm"}]});
    }
    json!({
        "ociVersion": super::OCI_VERSION,
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            // No ambient set, as runc's spec since 1.2: without inheritable the kernel
            // raises none of them, and runc (and moat) warn about each one asked for.
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "moat",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": devpts},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            sys,
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": linux
    })
}
