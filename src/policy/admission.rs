//! The admission table: every field of the runtime spec moat reads, and what RESTRICTED
//! does with it. The floor is written as rules over the whole spec, not as a list of
//! known-dangerous fields: a field the table does not name is a field nobody judged, and
//! the unit test below fails when the spec types gain one (it walks the fields serde
//! asks for, `spec::keys::Checked::shape`, so a new field cannot be missed by forgetting
//! a name). A key the spec types do not know at all is refused under RESTRICTED
//! (`PolicyError::UnknownKey`) and ignored with a warning under OPEN, as OCI asks.
//!
//! Each row also carries a probe: the most permissive value an engine could send for the
//! field and a check, run inside a RESTRICTED container, that holds when the row's promise
//! does. `tests/admission.rs` runs every probe (`moat policy table --format json` prints
//! them), so a new row is swept without anyone writing its test. docs/security.md carries
//! the table as `moat policy table` prints it (a unit test compares them).

use serde::Serialize;

/// What RESTRICTED does with a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Admission {
    /// Runs as the engine sent it: the field reaches nothing the other rows do not bound.
    Kept,
    /// Runs, narrowed to the floor (a limit set where none was, a list cut to what the
    /// operator allows); the change is reported.
    Tightened,
    /// Removed or replaced, and reported; the container still runs.
    Cut,
    /// The create fails with an error naming the field.
    Refused,
}

impl Admission {
    pub fn as_str(self) -> &'static str {
        match self {
            Admission::Kept => "kept",
            Admission::Tightened => "tightened",
            Admission::Cut => "cut",
            Admission::Refused => "refused",
        }
    }
}

/// How the sweep tries a row: `value` (JSON) is set at the row's path (an element
/// appended for a `[]` path, an entry merged for a `{}` one) in a busybox spec run under
/// RESTRICTED; `check` is a shell command run inside that holds when the promise does.
/// For a refused row the create must fail naming the field, and `check` is empty.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Probe {
    pub value: &'static str,
    pub check: &'static str,
}

/// One row: a JSON path of the spec (`[]` an array's elements, `{}` a map's values);
/// `subtree` rows decide every field below them too.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Row {
    pub path: &'static str,
    pub subtree: bool,
    pub admission: Admission,
    pub why: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<Probe>,
}

const fn row(
    path: &'static str,
    subtree: bool,
    admission: Admission,
    why: &'static str,
    probe: Option<Probe>,
) -> Row {
    Row {
        path,
        subtree,
        admission,
        why,
        probe,
    }
}

const fn p(value: &'static str, check: &'static str) -> Option<Probe> {
    Some(Probe { value, check })
}

use Admission::{Cut, Kept, Refused, Tightened};

/// Every capability, for the probes that ask for all of them.
const ALL_CAPS: &str = r#"["CAP_CHOWN","CAP_DAC_OVERRIDE","CAP_DAC_READ_SEARCH","CAP_FOWNER","CAP_FSETID","CAP_KILL","CAP_SETGID","CAP_SETUID","CAP_SETPCAP","CAP_LINUX_IMMUTABLE","CAP_NET_BIND_SERVICE","CAP_NET_BROADCAST","CAP_NET_ADMIN","CAP_NET_RAW","CAP_IPC_LOCK","CAP_IPC_OWNER","CAP_SYS_MODULE","CAP_SYS_RAWIO","CAP_SYS_CHROOT","CAP_SYS_PTRACE","CAP_SYS_PACCT","CAP_SYS_ADMIN","CAP_SYS_BOOT","CAP_SYS_NICE","CAP_SYS_RESOURCE","CAP_SYS_TIME","CAP_SYS_TTY_CONFIG","CAP_MKNOD","CAP_LEASE","CAP_AUDIT_WRITE","CAP_AUDIT_CONTROL","CAP_SETFCAP","CAP_MAC_OVERRIDE","CAP_MAC_ADMIN","CAP_SYSLOG","CAP_WAKE_ALARM","CAP_BLOCK_SUSPEND","CAP_AUDIT_READ","CAP_PERFMON","CAP_BPF","CAP_CHECKPOINT_RESTORE"]"#;

/// A check that the process holds no capability in the named set.
macro_rules! no_caps {
    ($set:literal) => {
        concat!(
            "grep -q '^",
            $set,
            ":[[:space:]]*0000000000000000$' /proc/self/status"
        )
    };
}

/// The table, in the spec's order. Paths are the JSON names.
pub const TABLE: &[Row] = &[
    row("ociVersion", false, Kept, "a version string; decides nothing", p(r#""1.3.0""#, "true")),
    row("process", false, Kept, "the rows below decide its fields", None),
    row("process.terminal", false, Kept, "a pty moat makes; its peer is the only terminal the container gets", p("true", "true")),
    row("process.consoleSize", true, Kept, "the pty's size", p(r#"{"height":9999,"width":9999}"#, "true")),
    row("process.user", true, Kept, "ids inside the container; root there holds only the capabilities the capability rows keep", p(r#"{"uid":0,"gid":0,"additionalGids":[0,1,2,3,4,6,10]}"#, no_caps!("CapEff"))),
    row("process.args", false, Kept, "the program the engine runs", None),
    row("process.env", false, Kept, "the program's environment", p(r#"["LD_PRELOAD=/nonexistent.so","PATH=/bin"]"#, "true")),
    row("process.cwd", false, Kept, "resolved inside the root and checked after the chdir", p(r#""/../../..""#, "test \"$(readlink /proc/self/cwd)\" = /")),
    row("process.capabilities", false, Tightened, "the rows below; no_new_privs and the seccomp floor hold whatever is kept", None),
    row("process.capabilities.bounding", false, Tightened, "only [restricted] allowed_capabilities survive; a capability that voids a promise in force is refused (see the capability table)", p(ALL_CAPS, no_caps!("CapBnd"))),
    row("process.capabilities.effective", false, Tightened, "only [restricted] allowed_capabilities survive", p(ALL_CAPS, no_caps!("CapEff"))),
    row("process.capabilities.permitted", false, Tightened, "only [restricted] allowed_capabilities survive", p(ALL_CAPS, no_caps!("CapPrm"))),
    row("process.capabilities.inheritable", false, Cut, "emptied: inheritable capabilities would survive an execve of a file with file capabilities", p(ALL_CAPS, no_caps!("CapInh"))),
    row("process.capabilities.ambient", false, Tightened, "only [restricted] allowed_capabilities survive", p(ALL_CAPS, no_caps!("CapAmb"))),
    row("process.rlimits", true, Kept, "per-process limits; memory, pids and CPU are bounded by the container's cgroup whatever they say", p(r#"[{"type":"RLIMIT_NOFILE","hard":4096,"soft":4096}]"#, "test \"$(ulimit -n)\" = 4096")),
    row("process.noNewPrivileges", false, Tightened, "set: setuid binaries and file capabilities must not raise privileges", p("false", "grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status")),
    row("process.apparmorProfile", false, Tightened, "where the host has AppArmor: a profile outside [restricted] apparmor_profiles becomes moat-default (a host without AppArmor ignores the field, as runc)", p(r#""unconfined""#, "true")),
    row("process.oomScoreAdj", false, Kept, "the engine's OOM ranking (Kubernetes gives Guaranteed pods -997); the container's memory limit bounds what it can take either way", p("500", "test \"$(cat /proc/self/oom_score_adj)\" = 500")),
    row("process.selinuxLabel", false, Tightened, "where the host has SELinux: a type outside [restricted] selinux_types is replaced by the first listed one (a host without SELinux ignores the field, as runc)", p(r#""system_u:system_r:spc_t:s0""#, "true")),
    row("process.scheduler", true, Refused, "a realtime policy (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE) or a negative nice is refused: the cpu cgroup bounds only CFS time, so such a process starves the host's CPUs; other policies are kept", p(r#"{"policy":"SCHED_OTHER","nice":-20}"#, "")),
    row("process.ioPriority", true, Refused, "the realtime class (IOPRIO_CLASS_RT) is refused: it starves the host's other I/O; best-effort and idle are kept", p(r#"{"class":"IOPRIO_CLASS_RT","priority":0}"#, "")),
    row("process.execCPUAffinity", true, Kept, "CPUs for an exec'd process while moat joins it to the container and once it is in (never the init's): inside, the kernel narrows the mask to the cgroup's cpuset, so it only restricts", None),
    row("root", true, Kept, "the engine's root filesystem, entered by fd; moat.rootfs may make it read-only or bounded", p(r#"{"path":"rootfs","readonly":false}"#, "true")),
    row("hostname", false, Kept, "set in the container's own uts namespace (the namespace rows refuse the host's)", p(r#""moat-admission""#, "test \"$(hostname)\" = moat-admission")),
    row("domainname", false, Kept, "set in the container's own uts namespace", p(r#""example.test""#, "true")),
    row("mounts", false, Tightened, "admitted by filesystem type (the mount table below); the rows below for the fields", None),
    row("mounts[].destination", false, Kept, "resolved inside the root (openat2 RESOLVE_IN_ROOT), never through a symlink out of it", p(r#"{"destination":"/../../../moat-escape","type":"tmpfs","source":"tmpfs","options":["nosuid"]}"#, "test -d /moat-escape")),
    row("mounts[].type", false, Tightened, "an allow-list of types: proc, sysfs, cgroup, cgroup2, tmpfs, devpts, mqueue, overlay, bind; any other type is cut and reported (a disk filesystem mounted by moat as host root would be the host's disk)", p(r#"{"destination":"/mnt","type":"ramfs","source":"none","options":[]}"#, "! grep -q ' /mnt ' /proc/self/mountinfo")),
    row("mounts[].source", false, Tightened, "a bind's source is judged by the filesystem of the mount moat attaches, never its name: kernel interfaces (procfs, sysfs, debugfs, tracefs, securityfs, bpffs, configfs, pstore, efivarfs, binfmt_misc, nsfs, selinuxfs, fusectl, cgroupfs, devtmpfs but its allow-listed nodes) are refused as sources", None),
    row("mounts[].options", false, Tightened, "sysfs, cgroupfs (but where the host's cgroup2 has nsdelegate and the container its own cgroup namespace) and binds of the host's /sys made read-only; a bind's flag options go on top of its source's flags, never dropping one the host set (OPEN: exactly the options given, as runc 1.5); tmpcopyup kept: the tmpfs starts with a copy of what the container sees at its destination, walked by fd, never through a symlink", p(r#"{"destination":"/sys","type":"sysfs","source":"sysfs","options":["rw"]}"#, "awk '$5 == \"/sys\" { o = $6 } END { exit o !~ /^ro/ }' /proc/self/mountinfo")),
    row("mounts[].uidMappings", true, Kept, "an idmapped mount: ids on the mount, never privileges", None),
    row("mounts[].gidMappings", true, Kept, "an idmapped mount: ids on the mount, never privileges", None),
    row("hooks", true, Kept, "programs of the engine's own configuration, run on the host as the engine asked: an image cannot write them", None),
    row("annotations", false, Tightened, "moat.* may only tighten what the config gives (a loosening one is ignored and reported); an unknown moat.* key is refused; others are the engine's", p(r#"{"moat.policy":"open","moat.network":"engine"}"#, "grep -q '^NoNewPrivs:[[:space:]]*1$' /proc/self/status")),
    row("linux", false, Kept, "the rows below decide its fields", None),
    row("linux.namespaces", true, Tightened, "the host's pid, network, ipc and uts namespaces are refused unless [restricted] host_namespaces names the type; user, mount, cgroup and time namespaces are the container's own or a pod's", p(r#"{"type":"pid","path":"/proc/1/ns/pid"}"#, "")),
    row("linux.uidMappings", true, Kept, "who container root is on the host: the engine's choice, or moat.userns=auto's range", None),
    row("linux.gidMappings", true, Kept, "who container root is on the host: the engine's choice, or moat.userns=auto's range", None),
    row("linux.timeOffsets", true, Kept, "offsets of the container's own time namespace", None),
    row("linux.devices", true, Tightened, "keyed on (type, major, minor), never the path: block devices are cut, character devices kept only if allow-listed (null, zero, full, random, urandom, tty, console, ptmx, devpts, fuse, [restricted] allowed_devices)", p(r#"[{"type":"b","path":"/dev/moat-loop","major":7,"minor":0,"fileMode":438}]"#, "test ! -e /dev/moat-loop")),
    row("linux.cgroupsPath", false, Tightened, "placed under the fleet cgroup ([fleet] cgroup) when moat names it; a cgroup that already holds processes is refused", p(r#""/moat-admission-elsewhere""#, "true")),
    row("linux.resources", false, Kept, "the rows below decide its fields", None),
    row("linux.resources.devices", true, Tightened, "the device cgroup allows exactly the nodes the linux.devices row keeps: the engine's wildcards are replaced by deny-all and one rule per kept node; update never rewrites them (said in a warning)", p(r#"[{"allow":true,"access":"rwm"}]"#, "true")),
    row("linux.resources.memory", false, Kept, "the rows below decide its fields", None),
    row("linux.resources.memory.limit", false, Tightened, "[restricted] memory where the engine set none or unlimited; update admits the same", None),
    row("linux.resources.memory.reservation", false, Kept, "a soft limit: reclaim order, never more memory", None),
    row("linux.resources.memory.swap", false, Kept, "memory+swap; the memory limit bounds RAM", None),
    row("linux.resources.memory.kernel", false, Kept, "a limit (ignored by kernels since 5.16)", None),
    row("linux.resources.memory.kernelTCP", false, Kept, "a limit (cgroup v1)", None),
    row("linux.resources.memory.swappiness", false, Kept, "reclaim preference", None),
    row("linux.resources.memory.disableOOMKiller", false, Kept, "a container at its limit waits instead of being killed; it still cannot pass the limit", None),
    row("linux.resources.memory.useHierarchy", false, Kept, "accounting (cgroup v1)", None),
    row("linux.resources.memory.checkBeforeUpdate", false, Kept, "a check update makes", None),
    row("linux.resources.cpu", false, Kept, "the rows below decide its fields", None),
    row("linux.resources.cpu.quota", false, Tightened, "[restricted] cpus where the engine set no quota or an unlimited one; update admits the same", None),
    row("linux.resources.cpu.shares", false, Kept, "a weight among siblings", None),
    row("linux.resources.cpu.burst", false, Kept, "bounded by the quota's period", None),
    row("linux.resources.cpu.period", false, Kept, "the quota's period", None),
    row("linux.resources.cpu.realtimeRuntime", false, Kept, "realtime time for the cgroup; the process.scheduler row refuses realtime policies", None),
    row("linux.resources.cpu.realtimePeriod", false, Kept, "realtime period for the cgroup", None),
    row("linux.resources.cpu.cpus", false, Kept, "which CPUs: a restriction", None),
    row("linux.resources.cpu.mems", false, Kept, "which memory nodes: a restriction", None),
    row("linux.resources.cpu.idle", false, Kept, "SCHED_IDLE for the cgroup: lower priority only", None),
    row("linux.resources.pids", true, Tightened, "[restricted] pids where the engine set none or unlimited (below 0; runtime-spec 1.3 makes 0 a limit, written as 1 as runc does); update admits the same", p(r#"{"limit":-1}"#, "for f in /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max; do test -r $f && exec grep -qx 4096 $f; done; exit 1")),
    row("linux.resources.blockIO", true, Kept, "weights and throttles: restrictions", None),
    row("linux.resources.hugepageLimits", true, Kept, "limits", None),
    row("linux.resources.network", false, Kept, "a class id and priorities (cgroup v1 net_cls, net_prio)", None),
    row("linux.resources.rdma", false, Kept, "limits on the HCA handles and objects per RDMA device (refused where the host has no rdma controller); update leaves them as create wrote them, as runc", None),
    row("linux.resources.unified", false, Tightened, "cgroup v2 files written last: a key that would lift a floor limit (memory.max, pids.max, cpu.max) gets the floor's value", None),
    row("linux.rootfsPropagation", false, Kept, "propagation of the container's own mounts; it cannot mount (no CAP_SYS_ADMIN, the seccomp floor)", None),
    row("linux.seccomp", true, Tightened, "moat's restricted profile where the engine sends none; the deny floor stacked as a second filter on the engine's", p(r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#, "grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status && ! unshare -U true 2>/dev/null")),
    row("linux.sysctl", false, Kept, "only sysctls of namespaces the container owns (checked against them at create)", None),
    row("linux.maskedPaths", false, Tightened, "runc's default masked paths added where the engine left them out", p("[]", "test ! -s /proc/kcore")),
    row("linux.readonlyPaths", false, Tightened, "runc's default read-only paths added where the engine left them out", p("[]", "! echo 1 > /proc/sys/kernel/domainname 2>/dev/null")),
    row("linux.mountLabel", false, Kept, "an SELinux label for the container's mounts: ignored where the host has no SELinux (a warning in the --log, as runc); where it has, every filesystem moat mounts gets it as `context=` as runc gives it (not procfs, sysfs, cgroupfs, nor binds; mqueue without it where the kernel refuses it)", None),
    row("linux.personality", true, Kept, "the execution domain (LINUX, LINUX32)", None),
    row("linux.memoryPolicy", true, Kept, "the NUMA policy of the container's processes (set_mempolicy): a preference or binding among the nodes the cgroup's cpuset.mems allows, never another", p(r#"{"mode":"MPOL_BIND","nodes":"0","flags":["MPOL_F_STATIC_NODES"]}"#, "grep -q ' bind=static:0 ' /proc/self/numa_maps")),
    row("linux.intelRdt", false, Refused, "moat does not apply Intel RDT", p(r#"{"closID":"moat"}"#, "")),
    // The probe names the host's usual uplink behind a missing interface (moved in sorted
    // order): were the refusal ever lost, the move would stop at the missing one.
    row("linux.netDevices", true, Tightened, "a host interface is moved into the container's own network namespace only if [restricted] net_devices names it (exactly, or by a prefix ending in `*`; none by default): any other is refused, the host's uplink with it; never into the host's namespace, never with moat.network=none", p(r#"{"0-moat-none":{},"eth0":{"name":"eth9"}}"#, "")),
];

/// The row that decides `path` (a path as `tests::paths` names it): its own, or the nearest
/// `subtree` row above it.
#[cfg(test)]
fn decides(path: &str) -> Option<&'static Row> {
    if let Some(r) = TABLE.iter().find(|r| r.path == path) {
        return Some(r);
    }
    TABLE.iter().filter(|r| r.subtree).find(|r| {
        path.strip_prefix(r.path)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    })
}

/// The tables as docs/security.md carries them (and `moat policy table` prints them):
/// the fields, the mount types, the capabilities that void a promise.
pub fn markdown() -> String {
    let mut s = String::from("| field | RESTRICTED | why |\n|---|---|---|\n");
    for r in TABLE {
        let path = if r.subtree {
            format!("`{}` (and below)", r.path)
        } else {
            format!("`{}`", r.path)
        };
        s.push_str(&format!(
            "| {path} | {} | {} |\n",
            r.admission.as_str(),
            r.why.replace('|', "\\|")
        ));
    }
    s.push_str(&format!(
        "\nMount types admitted (a bind is judged by its source): {}; any other is cut.\n",
        super::MOUNT_TYPES
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    s.push_str("\n| capability | voids | when | how |\n|---|---|---|---|\n");
    for c in super::CAPABILITIES {
        let when = match c.voids {
            super::Voids::Always => "always: refused",
            super::Voids::WithEgress => "with an egress policy in force: refused",
            super::Voids::WithEgressUnlessRawAllowed => {
                "with an egress policy in force: refused, unless `[egress] allow_raw_sockets`"
            }
            super::Voids::WithHostPid => "with the host's pid namespace: refused",
            super::Voids::Never => "never: kept",
        };
        s.push_str(&format!(
            "| `{}` | {} | {when} | {} |\n",
            c.cap, c.promise, c.how
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::keys::positions;

    /// Every field path of the spec types, as serde asks for them.
    fn paths() -> Vec<String> {
        positions::<crate::spec::Spec>()
            .into_iter()
            .map(|(p, _)| p)
            .collect()
    }

    #[test]
    fn every_field_of_the_spec_types_is_decided() {
        let undecided: Vec<String> = paths()
            .into_iter()
            .filter(|p| decides(p).is_none())
            .collect();
        assert!(
            undecided.is_empty(),
            "fields of the spec types no row of policy::admission::TABLE decides: {undecided:?}"
        );
    }

    #[test]
    fn every_row_names_a_field_of_the_spec_types() {
        let all = paths();
        for r in TABLE {
            assert!(
                all.iter().any(|p| p == r.path),
                "row {} names no field of the spec types",
                r.path
            );
        }
        for (i, r) in TABLE.iter().enumerate() {
            assert!(
                !TABLE[..i].iter().any(|q| q.path == r.path),
                "row {} twice",
                r.path
            );
        }
    }

    #[test]
    fn refused_rows_probe_a_refusal_and_probes_parse() {
        for r in TABLE {
            let Some(pr) = r.probe else { continue };
            serde_json::from_str::<serde_json::Value>(pr.value)
                .unwrap_or_else(|e| panic!("{}: probe value: {e}", r.path));
            // A row that may also refuse (namespaces) probes with an empty check too.
            assert!(
                r.admission != Refused || pr.check.is_empty(),
                "{}: a refused row's probe checks the refusal, not a check inside",
                r.path
            );
        }
    }

    #[test]
    fn docs_carry_the_table() {
        let docs = include_str!("../../docs/security.md");
        assert!(
            docs.contains(&markdown()),
            "docs/security.md does not carry the admission table as `moat policy table` \
             prints it; paste its output into the section \"The admission table\""
        );
    }
}
