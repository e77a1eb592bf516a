//! Structure-aware inputs for the fuzz targets: JSON built from the fuzzer's bytes with
//! `arbitrary`, drawn from the names the OCI spec and moat use, so that the runtime's code
//! past the parsers (validation, the policy, seccomp) sees most inputs, not only serde.

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Value};

/// The spec fields create acts on, as dotted paths from the document's root.
const PATHS: &[&str] = &[
    "ociVersion",
    "root.path",
    "root.readonly",
    "hostname",
    "domainname",
    "annotations",
    "mounts",
    "process.args",
    "process.env",
    "process.cwd",
    "process.terminal",
    "process.user.uid",
    "process.user.gid",
    "process.user.additionalGids",
    "process.user.umask",
    "process.capabilities.bounding",
    "process.capabilities.effective",
    "process.capabilities.ambient",
    "process.rlimits",
    "process.noNewPrivileges",
    "process.apparmorProfile",
    "process.selinuxLabel",
    "process.oomScoreAdj",
    "process.scheduler",
    "process.ioPriority",
    "hooks.prestart",
    "hooks.createRuntime",
    "hooks.poststart",
    "linux.namespaces",
    "linux.uidMappings",
    "linux.gidMappings",
    "linux.devices",
    "linux.cgroupsPath",
    "linux.resources.memory.limit",
    "linux.resources.memory.swap",
    "linux.resources.cpu.shares",
    "linux.resources.cpu.quota",
    "linux.resources.cpu.cpus",
    "linux.resources.pids.limit",
    "linux.resources.devices",
    "linux.resources.unified",
    "linux.resources.blockIO",
    "linux.resources.hugepageLimits",
    "linux.sysctl",
    "linux.seccomp",
    "linux.seccomp.defaultAction",
    "linux.seccomp.architectures",
    "linux.seccomp.syscalls",
    "linux.seccomp.flags",
    "linux.seccomp.listenerPath",
    "linux.maskedPaths",
    "linux.readonlyPaths",
    "linux.rootfsPropagation",
    "linux.mountLabel",
    "linux.personality",
    "linux.timeOffsets",
    "linux.intelRdt",
];

/// Object keys of the spec's nested records (mounts, namespaces, id maps, devices, rlimits,
/// seccomp rules, hooks).
const KEYS: &[&str] = &[
    "destination",
    "source",
    "type",
    "options",
    "uidMappings",
    "gidMappings",
    "path",
    "hostID",
    "containerID",
    "size",
    "major",
    "minor",
    "fileMode",
    "uid",
    "gid",
    "allow",
    "access",
    "hard",
    "soft",
    "names",
    "action",
    "args",
    "index",
    "value",
    "valueTwo",
    "op",
    "errnoRet",
    "includes",
    "excludes",
    "caps",
    "arches",
    "defaultAction",
    "architectures",
    "syscalls",
    "flags",
    "env",
    "timeout",
    "domain",
    "flags",
    "limit",
    "pageSize",
    "moat.policy",
    "moat.rootfs",
    "moat.network",
    "moat.runtime",
    "moat.userns",
];

/// Strings the spec's fields take, and their traps.
const WORDS: &[&str] = &[
    "",
    "/",
    "/proc",
    "/sys",
    "/dev",
    "/dev/null",
    "/etc/passwd",
    "..",
    "../..",
    "/proc/self",
    "/sys/fs/cgroup",
    "tmpfs",
    "proc",
    "sysfs",
    "bind",
    "rbind",
    "ro",
    "rw",
    "nosuid",
    "nodev",
    "noexec",
    "rshared",
    "rslave",
    "rprivate",
    "idmap",
    "ridmap",
    "mode=755",
    "size=1",
    "pid",
    "network",
    "mount",
    "ipc",
    "uts",
    "user",
    "cgroup",
    "time",
    "/proc/1/ns/net",
    "CAP_SYS_ADMIN",
    "CAP_NET_RAW",
    "CAP_CHOWN",
    "CAP_BPF",
    "CAP_SYS_PTRACE",
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "SCMP_ACT_ALLOW",
    "SCMP_ACT_ERRNO",
    "SCMP_ACT_KILL",
    "SCMP_ACT_NOTIFY",
    "SCMP_ACT_TRACE",
    "SCMP_ACT_LOG",
    "SCMP_ARCH_X86_64",
    "SCMP_ARCH_X86",
    "SCMP_ARCH_AARCH64",
    "SCMP_CMP_EQ",
    "SCMP_CMP_MASKED_EQ",
    "SCMP_CMP_GT",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "mount",
    "ptrace",
    "clone",
    "clone3",
    "unshare",
    "open",
    "openat",
    "execve",
    "a",
    "c",
    "b",
    "rwm",
    "r",
    "open",
    "restricted",
    "gvisor",
    "runsc",
    "native",
    "none",
    "private",
    "host",
    "auto",
    "system.slice:moat:c1",
    "/moat/c1",
    "unconfined",
    "runtime/default",
    "system_u:system_r:container_t:s0",
    "1.0.2",
    "1.2.0",
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_forward",
    "memory.max",
    "cgroup.procs",
    "PER_LINUX32",
    "SCHED_FIFO",
    "IOPRIO_CLASS_RT",
];

fn word(u: &mut Unstructured) -> Result<String> {
    if u.ratio(1, 4)? {
        Ok(u.arbitrary::<String>()?)
    } else {
        Ok((*u.choose(WORDS)?).to_string())
    }
}

fn number(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=5)? {
        0 => Value::from(u.int_in_range(0u8..=3)?),
        1 => Value::from(u.arbitrary::<u32>()?),
        2 => Value::from(u.arbitrary::<i64>()?),
        3 => Value::from(u.arbitrary::<u64>()?),
        4 => Value::from(-1),
        _ => serde_json::Number::from_f64(u.arbitrary::<f64>()?).map_or(Value::Null, Value::Number),
    })
}

/// A JSON value of depth at most `depth`, its strings and keys mostly the spec's.
fn value(u: &mut Unstructured, depth: u32) -> Result<Value> {
    let kinds = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=kinds)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 | 4 => Value::String(word(u)?),
        5 => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| value(u, depth - 1)).collect::<Result<_>>()?)
        }
        _ => {
            let n = u.int_in_range(0..=5)?;
            let mut m = Map::new();
            for _ in 0..n {
                let k = if u.ratio(1, 8)? {
                    u.arbitrary::<String>()?
                } else {
                    (*u.choose(KEYS)?).to_string()
                };
                m.insert(k, value(u, depth - 1)?);
            }
            Value::Object(m)
        }
    })
}

/// Sets `v` at the dotted `path` below `root`, making objects on the way.
fn set(root: &mut Value, path: &str, v: Value) {
    let mut cur = root;
    for part in path.split('.') {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .expect("made an object above")
            .entry(part)
            .or_insert(Value::Null);
    }
    *cur = v;
}

/// `moat spec`'s default config.json with a few fields replaced, serialised.
pub fn spec_edits(u: &mut Unstructured) -> Result<Vec<u8>> {
    let mut spec = moat::fuzzing::default_spec();
    let n = u.int_in_range(1..=8)?;
    for _ in 0..n {
        let path = *u.choose(PATHS)?;
        let v = value(u, 3)?;
        set(&mut spec, path, v);
    }
    Ok(serde_json::to_vec(&spec).expect("a JSON value serialises"))
}

/// An annotation map: keys mostly moat's, values mostly the words its annotations take.
pub fn annotations(u: &mut Unstructured) -> Result<Vec<(String, String)>> {
    let n = u.int_in_range(0..=6)?;
    (0..n)
        .map(|_| {
            let k = if u.ratio(3, 4)? {
                (*u.choose(moat::fuzzing::ANNOTATIONS)?).to_string()
            } else {
                word(u)?
            };
            Ok((k, word(u)?))
        })
        .collect()
}
