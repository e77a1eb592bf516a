//! Entry points for the fuzz targets (`fuzz/fuzz_targets/`): one function per input an
//! engine, an image or a user controls, each running the same code moat runs on it (parse,
//! then what create or exec does next with a value that parsed), with no I/O. They return
//! nothing: a target fails only by panicking, and each `assert!` here is a property the
//! runtime relies on, not a test of one value. Not part of moat's interface (`doc(hidden)`):
//! the binary never calls them, and LTO leaves them out of it.

use std::path::Path;

use crate::linux::cgroups::{self, systemd};
use crate::linux::hostfacts::HostFacts;
use crate::policy::{self, Config, FloorFacts};
use crate::spec::{self, Spec};

/// moat's annotation keys, for structure-aware targets to pick from.
pub const ANNOTATIONS: &[&str] = &policy::ANNOTATIONS;

/// `moat spec`'s config.json, for structure-aware targets to edit.
pub fn default_spec() -> serde_json::Value {
    spec::default::spec(false, true)
}

/// The host facts the policy is fuzzed against: a cgroup v2 host with its own namespaces,
/// no LSM. (The policy is pure; these stand for what `container::policy::decide` probes.)
fn floor() -> FloorFacts {
    FloorFacts {
        host_ns: vec![
            ("pid", (4, 0xefff_fffc)),
            ("network", (4, 0xefff_fff8)),
            ("ipc", (4, 0xefff_fffe)),
            ("uts", (4, 0xefff_fffd)),
        ],
        ns_paths: Vec::new(),
        cgroup_v2: true,
        cgroup_nsdelegate: true,
        systemd_cgroup: false,
        bpf_cgroup: true,
        resolvers: vec!["10.0.0.2:53".parse().expect("an address")],
    }
}

/// What create does with `<bundle>/config.json` before it forks: the keys checked, the
/// typed parse, validation, then the policy (which reads the annotations) and, when the
/// result has a seccomp section, its compilation to BPF.
pub fn config_json(bytes: &[u8]) {
    let Ok(mut spec) = Spec::parse_file(bytes, Path::new("config.json")) else {
        return;
    };
    policy_then_seccomp(&mut spec);
}

/// Create's path from a parsed spec on: validation, the policy, seccomp.
fn policy_then_seccomp(spec: &mut Spec) {
    if spec::validate::validate(spec).is_err() {
        return;
    }
    let id = "fuzz";
    if policy::apply(
        spec,
        &Config::default(),
        id,
        &HostFacts::default(),
        &floor(),
    )
    .is_err()
    {
        return;
    }
    if let Some(s) = &spec.linux().seccomp {
        let _ = crate::linux::seccomp::compile(s);
    }
}

/// The default spec (`moat spec`) with `annotations` set, through validation and the policy:
/// annotations are the image's, so every value is the attacker's.
pub fn annotations(annotations: &[(String, String)]) {
    let mut v = spec::default::spec(false, true);
    v["annotations"] = annotations
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into();
    let bytes = serde_json::to_vec(&v).expect("a JSON value serialises");
    config_json(&bytes);
}

/// `exec --process FILE`: the keys checked, the typed parse, then the RESTRICTED
/// narrowing against the container's own process.
pub fn exec_process(bytes: &[u8]) {
    let Ok(mut p) = spec::from_slice::<spec::Process>(bytes) else {
        return;
    };
    let init: Spec =
        serde_json::from_value(spec::default::spec(false, true)).expect("the default spec parses");
    let _ = policy::restrict_exec(&mut p, init.process());
}

/// `linux.seccomp` alone, keys checked, to BPF; a compiled filter survives the round trip
/// through its cache form (`state/seccomp.N`).
pub fn seccomp(bytes: &[u8]) {
    // In a config.json the keys are checked with the whole spec's (the config_json target).
    let Ok(s) = serde_json::from_slice::<spec::Seccomp>(bytes) else {
        return;
    };
    let Ok(filter) = crate::linux::seccomp::compile(&s) else {
        return;
    };
    let cached = filter.to_bytes();
    let back =
        crate::linux::seccomp::Filter::from_bytes(&cached).expect("a cached filter reads back");
    assert_eq!(
        back.to_bytes(),
        cached,
        "the seccomp cache form round-trips"
    );
}

/// `/etc/moat/config.toml` (as the plain `moat` and as an alias), the size and pool forms
/// its values use, and a config that parsed applied to the default spec.
pub fn config_toml(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let path = Path::new("/etc/moat/config.toml");
    let _ = policy::config::parse_size(text);
    let _ = policy::config::parse_pool(text);
    let _ = Config::from_str_as(text, path, Some("moat-gvisor"));
    let Ok(cfg) = Config::from_str_as(text, path, None) else {
        return;
    };
    let mut spec: Spec =
        serde_json::from_value(spec::default::spec(false, true)).expect("the default spec parses");
    let _ = policy::apply(&mut spec, &cfg, "fuzz", &HostFacts::default(), &floor());
}

/// A container's `state.json`, any format: the record parser with its migrations. A record
/// that parsed is saved as the current format and must parse again (what the next command
/// reads).
pub fn state_json(bytes: &[u8]) {
    let Ok(rec) = crate::state::parse_record(bytes) else {
        return;
    };
    let saved = serde_json::to_vec(&rec).expect("a record serialises");
    if let Err(e) = crate::state::parse_record(&saved) {
        panic!("a saved record does not parse again: {e}");
    }
}

/// Ids (`moat create ID`), `exec -u uid[:gid]` and signal names (`moat kill ID SIG`). moat
/// resolves no user names (`exec -u` is numeric: container/exec.rs); the one `/etc/passwd`
/// lookup is [`passwd`]'s. What parses must mean what it says.
pub fn ids(bytes: &[u8]) {
    let Ok(s) = std::str::from_utf8(bytes) else {
        return;
    };
    if crate::state::validate_id(s).is_ok() {
        assert!(!s.contains('/') && s != "." && s != ".." && !s.starts_with('-'));
    }
    if let Ok((uid, gid)) = crate::container::exec::parse_user(s) {
        let again = match gid {
            Some(g) => format!("{uid}:{g}"),
            None => uid.to_string(),
        };
        assert_eq!(
            crate::container::exec::parse_user(&again).ok(),
            Some((uid, gid))
        );
    }
    let _ = crate::linux::signal::parse(s);
}

/// An image's `/etc/passwd`, as exec and create read it for `$HOME` (the process's uid is
/// the first line, the file the rest): what is found is one field of one line.
pub fn passwd(bytes: &[u8]) {
    let (first, text) = match bytes.iter().position(|&b| b == b'\n') {
        Some(i) => (&bytes[..i], &bytes[i + 1..]),
        None => (bytes, &[][..]),
    };
    let uid = std::str::from_utf8(first)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if let Some(home) = crate::linux::attrs::home_in_passwd(text, uid) {
        assert!(
            !home.is_empty() && !home.contains([':', '\n']),
            "home {home:?}"
        );
    }
}

/// `linux.cgroupsPath` in every form: cgroupfs (`resolve_path`), rootless (below the
/// caller's own cgroup), and the systemd driver's `slice:prefix:name` with its slice
/// expansion. `input` is `cgroupsPath \n id \n own cgroup`.
pub fn cgroup_path(bytes: &[u8]) {
    let Ok(s) = std::str::from_utf8(bytes) else {
        return;
    };
    let mut parts = s.splitn(3, '\n');
    let path = parts.next().unwrap_or("");
    let id = parts.next().unwrap_or("c1");
    let own = parts
        .next()
        .unwrap_or("/user.slice/user-1000.slice/session-1.scope");
    for p in [Some(path), None] {
        if let Ok(r) = cgroups::resolve_path(p, id) {
            assert!(r.starts_with('/'), "resolve_path gave {r:?}");
        }
        let _ = cgroups::rootless_path(p, id, own);
        let root = std::path::Path::new("/run/moat");
        let _ = systemd::Scope::parse(p, id, None, root);
        let _ = systemd::Scope::parse(p, id, Some(1000), root);
    }
    let _ = systemd::expand_slice(path);
}

/// `/proc/self/mountinfo` as the cgroup layout and the id-mapping code read it (a
/// container's mount namespace is the attacker's to fill).
pub fn mountinfo(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let _ = cgroups::parse_mountinfo(&text);
    let _ = crate::linux::idmap::parse_mountinfo(&text);
}

/// A container connection's first bytes, as the binding of connections to names reads
/// them (`policy::egress::first_bytes`, the container's to write): a name it gives is a
/// host name as it reads them, and a verdict reached on the first half holds for the whole
/// (more bytes never change a name read, nor turn a refusal into a name).
pub fn first_bytes(bytes: &[u8]) {
    use crate::policy::egress::first_bytes::{read, FirstBytes};
    let whole = read(bytes);
    if let FirstBytes::Tls { sni: Some(n), .. } | FirstBytes::Http { host: Some(n) } = &whole {
        assert!(
            !n.is_empty()
                && n.len() <= 253
                && !n.contains("..")
                && n.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'-'
                    || b == b'.'),
            "{n:?}"
        );
    }
    // (A refusal may name another reason once more is read: it stays a refusal.)
    let half = read(&bytes[..bytes.len() / 2]);
    let holds = match (&half, &whole) {
        (FirstBytes::NeedMore, _) | (FirstBytes::Other(_), FirstBytes::Other(_)) => true,
        (h, w) => h == w,
    };
    assert!(holds, "{half:?} on the first half, {whole:?} on the whole");
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every committed seed and crash input of the byte-input targets, through the entry
    /// point its target calls: what `scripts/fuzz` found stays fixed without cargo-fuzz. (The
    /// structure-aware targets' crashes become tests of their own below.)
    #[test]
    fn seeds_and_crashes_replay() {
        type Target = (&'static str, fn(&[u8]));
        let targets: [Target; 10] = [
            ("passwd", super::passwd),
            ("config_json", super::config_json),
            ("exec_process", super::exec_process),
            ("seccomp", super::seccomp),
            ("config_toml", super::config_toml),
            ("state_json", super::state_json),
            ("ids", super::ids),
            ("cgroup_path", super::cgroup_path),
            ("mountinfo", super::mountinfo),
            ("first_bytes", super::first_bytes),
        ];
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        let mut ran = 0;
        for (name, run) in targets {
            for dir in ["seeds", "crashes"] {
                let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(name)) else {
                    continue;
                };
                for e in entries {
                    let path = e.unwrap().path();
                    run(&std::fs::read(&path).unwrap());
                    ran += 1;
                }
            }
        }
        assert!(ran >= 8, "only {ran} inputs under {}", fuzz.display());
    }

    /// fuzz/crashes/mountinfo/crash-176e…: an octal escape above a byte (`\777`) in a
    /// mount point overflowed the cgroup layout's decoder. It is not an escape: the path
    /// keeps it as written, and a real escape still decodes.
    #[test]
    fn mountinfo_escape_above_a_byte_is_literal() {
        let text = "40 31 0:37 / /sys/fs/cgroup/a\\777b rw - cgroup cgroup rw,pids\n\
                    41 31 0:38 / /sys/fs/cgroup/c\\040d rw - cgroup cgroup rw,cpu\n";
        let h = crate::linux::cgroups::parse_mountinfo(text);
        let mounts: Vec<_> = h.iter().map(|h| h.mount.to_str().unwrap()).collect();
        assert_eq!(mounts, ["/sys/fs/cgroup/a\\777b", "/sys/fs/cgroup/c d"]);
    }
}
