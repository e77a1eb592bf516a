//! The device floor: which device nodes a RESTRICTED container gets, and the device
//! cgroup that lets it open exactly those.
//!
//! Keyed on (type, major, minor), the numbers the kernel checks on open (devices.txt in
//! the kernel's Documentation/admin-guide), never on the path: a spec may name
//! `/dev/null` and give it `8:0`, and an engine may bind a node anywhere.
//!
//! An engine's `--privileged` lists every node of the host's `/dev` in `linux.devices`
//! and allows `a *:* rwm` in `linux.resources.devices`; with no capabilities left,
//! container root could still open `/dev/sda` read-write and rewrite the host's disk.
//! Under RESTRICTED block devices are cut, character devices are an allow-list, and the
//! device cgroup is replaced by deny-all plus one allow rule per node kept.

use super::decision::change;
use super::{Config, Decision};
use crate::spec::{DeviceCgroup, Linux};

/// A character device `[restricted] allowed_devices` names: `c MAJOR:MINOR`, either of
/// them `*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedDevice {
    /// `None` is `*`.
    pub major: Option<u32>,
    pub minor: Option<u32>,
}

impl AllowedDevice {
    fn matches(self, major: u32, minor: u32) -> bool {
        self.major.is_none_or(|m| m == major) && self.minor.is_none_or(|m| m == minor)
    }
}

impl std::fmt::Display for AllowedDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: Option<u32>| v.map_or("*".to_string(), |n| n.to_string());
        write!(f, "c {}:{}", n(self.major), n(self.minor))
    }
}

/// The character devices that give the host away whatever else is allowed: physical
/// memory, kernel virtual memory, I/O ports (devices.txt, major 1). An operator entry
/// that matches one of them is refused.
const RAW_MEMORY: [(u32, &str); 3] = [(1, "/dev/mem"), (2, "/dev/kmem"), (4, "/dev/port")];

/// Parses one `[restricted] allowed_devices` entry: `c MAJOR:MINOR`, either number `*`.
/// Block devices are refused (one listed node is the whole disk under the host's
/// filesystem), and so are a wildcard major (every character device there is) and an
/// entry matching raw memory or I/O ports.
pub fn parse_allowed(s: &str) -> Result<AllowedDevice, String> {
    let bad = || format!("{s:?}: expected \"c MAJOR:MINOR\" (numbers or *), as \"c 195:*\"");
    let mut words = s.split_whitespace();
    let (Some(typ), Some(nums), None) = (words.next(), words.next(), words.next()) else {
        return Err(bad());
    };
    match typ {
        "c" => {}
        "b" => {
            return Err(format!(
                "{s:?}: block devices are never allowed under RESTRICTED (a container that \
                 can write a disk owns every filesystem on it); run such a container under \
                 an OPEN [alias.NAME]"
            ))
        }
        _ => return Err(bad()),
    }
    let (major, minor) = nums.split_once(':').ok_or_else(bad)?;
    let num = |n: &str| -> Result<Option<u32>, String> {
        if n == "*" {
            return Ok(None);
        }
        // Device numbers: 12-bit majors, 20-bit minors.
        match n.parse::<u32>() {
            Ok(v) if v < 1 << 20 && !n.starts_with('+') => Ok(Some(v)),
            _ => Err(bad()),
        }
    };
    let dev = AllowedDevice {
        major: num(major)?,
        minor: num(minor)?,
    };
    let Some(major) = dev.major else {
        return Err(format!(
            "{s:?}: a wildcard major names every character device, /dev/mem among them; \
             name the major (devices.txt)"
        ));
    };
    if major >= 1 << 12 {
        return Err(bad());
    }
    if let Some((_, name)) = RAW_MEMORY.iter().find(|(m, _)| dev.matches(1, *m)) {
        return Err(format!(
            "{s:?} matches {name}: raw host memory or I/O ports are never allowed under \
             RESTRICTED"
        ));
    }
    Ok(dev)
}

/// The character devices a RESTRICTED container keeps when its spec lists them
/// (devices.txt): (first major, last major, minor or `None` for all, name).
const ALLOWED: [(u32, u32, Option<u32>, &str); 10] = [
    (1, 1, Some(3), "null"),
    (1, 1, Some(5), "zero"),
    (1, 1, Some(7), "full"),
    (1, 1, Some(8), "random"),
    (1, 1, Some(9), "urandom"),
    (5, 5, Some(0), "tty"),
    (5, 5, Some(1), "console"),
    (5, 5, Some(2), "ptmx"),
    // Unix98 pty slaves: majors 136-143.
    (136, 143, None, "pts"),
    (10, 10, Some(229), "fuse"),
];

/// A node of `linux.devices` as the kernel sees it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Char,
    Block,
    Fifo,
}

fn kind(typ: &str) -> Option<Kind> {
    match typ {
        // `u` (unbuffered) is a character device to mknod.
        "c" | "u" => Some(Kind::Char),
        "b" => Some(Kind::Block),
        "p" => Some(Kind::Fifo),
        _ => None,
    }
}

/// Whether RESTRICTED keeps the character device `major:minor`.
fn char_allowed(cfg: &Config, major: i64, minor: i64) -> bool {
    let (Ok(major), Ok(minor)) = (u32::try_from(major), u32::try_from(minor)) else {
        return false;
    };
    ALLOWED
        .iter()
        .any(|&(lo, hi, m, _)| (lo..=hi).contains(&major) && m.is_none_or(|m| m == minor))
        || cfg.allowed_devices.iter().any(|a| a.matches(major, minor))
}

// --- the engine's device rules, evaluated as the kernel does ---------------------------

const ACC_MKNOD: u8 = 1;
const ACC_READ: u8 = 2;
const ACC_WRITE: u8 = 4;
const ACC_ALL: u8 = ACC_MKNOD | ACC_READ | ACC_WRITE;

/// One rule of `linux.resources.devices`: type `None` matches both, numbers `None` are
/// `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    allow: bool,
    typ: Option<char>,
    major: Option<i64>,
    minor: Option<i64>,
    access: u8,
}

/// Reads an engine rule the way `linux::cgroups::devices` does, never wider: an allow
/// keeps its known letters (none: it allows nothing and is `None`), a deny with an
/// unknown letter, type or number denies every access of every device it might mean.
fn parse_rule(r: &DeviceCgroup) -> Option<Rule> {
    let mut access = 0;
    let mut unknown = false;
    for c in r
        .access
        .as_deref()
        .filter(|a| !a.is_empty())
        .unwrap_or("rwm")
        .chars()
    {
        match c {
            'r' => access |= ACC_READ,
            'w' => access |= ACC_WRITE,
            'm' => access |= ACC_MKNOD,
            _ => unknown = true,
        }
    }
    let typ = match r.typ.as_deref() {
        None | Some("a") => Ok(None),
        Some("c") => Ok(Some('c')),
        Some("b") => Ok(Some('b')),
        Some(_) => Err(()),
    };
    let num = |n: Option<i64>| match n {
        None | Some(-1) => Ok(None),
        Some(n) if n >= 0 => Ok(Some(n)),
        Some(_) => Err(()),
    };
    let (major, minor) = (num(r.major), num(r.minor));
    if r.allow {
        let (Ok(typ), Ok(major), Ok(minor)) = (typ, major, minor) else {
            return None;
        };
        return (access != 0).then_some(Rule {
            allow: true,
            typ,
            major,
            minor,
            access,
        });
    }
    Some(Rule {
        allow: false,
        typ: typ.unwrap_or(None),
        major: major.unwrap_or(None),
        minor: minor.unwrap_or(None),
        access: if unknown { ACC_ALL } else { access },
    })
}

/// The access `rules` give the device `typ major:minor`: access starts denied, and for
/// each bit the last matching rule that carries it decides (the v1 controller's and the
/// BPF program's semantics).
fn access_of(rules: &[Rule], typ: char, major: i64, minor: i64) -> u8 {
    let mut out = 0;
    for bit in [ACC_MKNOD, ACC_READ, ACC_WRITE] {
        let last = rules.iter().rev().find(|r| {
            r.access & bit != 0
                && r.typ.is_none_or(|t| t == typ)
                && r.major.is_none_or(|m| m == major)
                && r.minor.is_none_or(|m| m == minor)
        });
        if last.is_some_and(|r| r.allow) {
            out |= bit;
        }
    }
    out
}

fn access_str(bits: u8) -> String {
    [(ACC_READ, 'r'), (ACC_WRITE, 'w'), (ACC_MKNOD, 'm')]
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|&(_, c)| c)
        .collect()
}

fn rule_str(r: &Rule) -> String {
    let n = |v: Option<i64>| v.map_or("*".to_string(), |n| n.to_string());
    format!(
        "{} {}:{} {}",
        r.typ.unwrap_or('a'),
        n(r.major),
        n(r.minor),
        access_str(r.access)
    )
}

/// runc's default allow-list, which `linux::cgroups::devices` appends to every
/// container's rules: an engine's allow rule equal to one of these is not a cut.
const RUNC_DEFAULTS: [(i64, Option<i64>); 9] = [
    (1, Some(3)),
    (1, Some(5)),
    (1, Some(7)),
    (5, Some(0)),
    (5, Some(1)),
    (5, Some(2)),
    (136, None),
    (1, Some(8)),
    (1, Some(9)),
];

fn is_runc_default(r: &Rule) -> bool {
    r.typ == Some('c')
        && r.access == ACC_ALL
        && RUNC_DEFAULTS
            .iter()
            .any(|&(major, minor)| r.major == Some(major) && r.minor == minor)
}

/// RESTRICTED: block devices and character devices off the allow-list are cut from
/// `linux.devices`; `linux.resources.devices` becomes deny-all followed by one allow per
/// character device kept, with the access the engine's rules gave it (never more than
/// `rwm`). A deny-all first also revokes the mknod-anything rules
/// `linux::cgroups::devices` puts before the spec's. FIFOs stay (the device cgroup
/// does not govern them); their numbers are zeroed, since `create` allows mknod of every
/// listed node's numbers as a character device.
pub(super) fn floor(linux: &mut Linux, cfg: &Config, d: &mut Decision) {
    let mut blocks = Vec::new();
    let mut chars = Vec::new();
    let mut fifos = Vec::new();
    linux.devices.retain_mut(|dev| {
        let what = format!("{} ({} {}:{})", dev.path, dev.typ, dev.major, dev.minor);
        match kind(&dev.typ) {
            Some(Kind::Fifo) => {
                if (dev.major, dev.minor) != (0, 0) {
                    fifos.push(what);
                    (dev.major, dev.minor) = (0, 0);
                }
                true
            }
            Some(Kind::Char) if char_allowed(cfg, dev.major, dev.minor) => true,
            Some(Kind::Char) => {
                chars.push(what);
                false
            }
            // Block devices, and a type the spec check refuses anyway.
            Some(Kind::Block) | None => {
                blocks.push(what);
                false
            }
        }
    });
    if !blocks.is_empty() {
        change(
            d,
            "linux.devices",
            "removed",
            blocks.join(", "),
            "RESTRICTED: no block devices (container root could read and rewrite the \
             host's disks under its filesystems)",
        );
    }
    if !chars.is_empty() {
        change(
            d,
            "linux.devices",
            "removed",
            chars.join(", "),
            "RESTRICTED: character devices only from the allow-list (null, zero, full, \
             random, urandom, tty, console, ptmx, pts, fuse) and [restricted] \
             allowed_devices, by number",
        );
    }
    if !fifos.is_empty() {
        change(
            d,
            "linux.devices",
            "set",
            format!("major:minor 0:0 for {}", fifos.join(", ")),
            "a FIFO has no device number; create allows mknod of every listed node's",
        );
    }

    let res = linux.resources.get_or_insert_with(Default::default);
    let engine: Vec<Rule> = res.devices.iter().filter_map(parse_rule).collect();
    let mut rules = vec![Rule {
        allow: false,
        typ: None,
        major: None,
        minor: None,
        access: ACC_ALL,
    }];
    for dev in &linux.devices {
        if kind(&dev.typ) != Some(Kind::Char) {
            continue;
        }
        let access = access_of(&engine, 'c', dev.major, dev.minor) & ACC_ALL;
        let rule = Rule {
            allow: true,
            typ: Some('c'),
            major: Some(dev.major),
            minor: Some(dev.minor),
            access,
        };
        if access != 0 && !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    let new: Vec<DeviceCgroup> = rules
        .iter()
        .map(|r| DeviceCgroup {
            allow: r.allow,
            typ: Some(r.typ.unwrap_or('a').to_string()),
            major: r.major,
            minor: r.minor,
            access: Some(access_str(r.access)),
        })
        .collect();
    let same = res
        .devices
        .iter()
        .filter_map(parse_rule)
        .eq(rules.iter().cloned())
        && res.devices.len() == rules.len();
    if !same {
        let cut: Vec<String> = engine
            .iter()
            .filter(|r| r.allow && !rules.contains(r) && !is_runc_default(r))
            .map(rule_str)
            .collect();
        let kept: Vec<String> = rules.iter().map(rule_str).collect();
        change(
            d,
            "linux.resources.devices",
            "replaced",
            if cut.is_empty() {
                format!("allow: {}", kept.join(", "))
            } else {
                format!("allow: {} (cut: {})", kept.join(", "), cut.join(", "))
            },
            "RESTRICTED: the device cgroup denies all but the device nodes kept, with no \
             more access than the engine's rules gave them (runc's defaults follow)",
        );
        res.devices = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Device, Spec};

    fn dev(typ: &str, path: &str, major: i64, minor: i64) -> Device {
        Device {
            typ: typ.into(),
            path: path.into(),
            major,
            minor,
            file_mode: Some(0o660),
            uid: Some(0),
            gid: Some(0),
        }
    }

    fn rule(allow: bool, typ: &str, major: i64, minor: i64, access: &str) -> DeviceCgroup {
        DeviceCgroup {
            allow,
            typ: Some(typ.into()),
            major: (major >= 0).then_some(major),
            minor: (minor >= 0).then_some(minor),
            access: Some(access.into()),
        }
    }

    /// What podman's `--privileged` sends on a host like the test VM's: every node of
    /// the host's /dev, block ones included, and `a *:* rwm` after the deny-all.
    fn privileged() -> Spec {
        let mut s: Spec = serde_json::from_value(crate::spec::default::spec(false, true)).unwrap();
        let linux = s.linux.get_or_insert_with(Default::default);
        linux.devices = vec![
            dev("c", "/dev/null", 1, 3),
            dev("c", "/dev/zero", 1, 5),
            dev("c", "/dev/full", 1, 7),
            dev("c", "/dev/random", 1, 8),
            dev("c", "/dev/urandom", 1, 9),
            dev("c", "/dev/mem", 1, 1),
            dev("c", "/dev/kmsg", 1, 11),
            dev("c", "/dev/tty", 5, 0),
            dev("c", "/dev/console", 5, 1),
            dev("c", "/dev/ptmx", 5, 2),
            dev("c", "/dev/tty0", 4, 0),
            dev("c", "/dev/fuse", 10, 229),
            dev("c", "/dev/kvm", 10, 232),
            dev("c", "/dev/loop-control", 10, 237),
            dev("c", "/dev/nvidia0", 195, 0),
            dev("c", "/dev/nvidiactl", 195, 255),
            dev("b", "/dev/vda", 253, 0),
            dev("b", "/dev/sda", 8, 0),
            dev("b", "/dev/loop0", 7, 0),
            dev("b", "/dev/nvme0n1", 259, 0),
        ];
        linux.resources.get_or_insert_with(Default::default).devices = vec![
            rule(false, "a", -1, -1, "rwm"),
            rule(true, "a", -1, -1, "rwm"),
        ];
        s
    }

    fn decision() -> Decision {
        Decision {
            policy: super::super::Mode::Restricted,
            readonly_rootfs: false,
            rootfs: super::super::Rootfs::Writable,
            bounded_root: None,
            network_none: false,
            seccomp_floor: false,
            userns: super::super::Userns::Engine,
            userns_pool: false,
            changes: Vec::new(),
            not_applied: Vec::new(),
            host_namespaces: Vec::new(),
            audit: Vec::new(),
            memory_high: None,
            egress: None,
            enforced: true,
            unknown: Default::default(),
        }
    }

    fn run(s: &mut Spec, cfg: &Config) -> Decision {
        let mut d = decision();
        floor(s.linux.as_mut().unwrap(), cfg, &mut d);
        d
    }

    fn numbers(s: &Spec) -> Vec<(String, i64, i64)> {
        s.linux()
            .devices
            .iter()
            .map(|d| (d.typ.clone(), d.major, d.minor))
            .collect()
    }

    fn rules_of(s: &Spec) -> Vec<Rule> {
        let res = s.linux().resources.as_ref().unwrap();
        res.devices.iter().filter_map(parse_rule).collect()
    }

    #[test]
    fn privileged_keeps_the_allow_list_and_no_block_device() {
        let mut s = privileged();
        let d = run(&mut s, &Config::default());
        let kept = numbers(&s);
        let want: Vec<(String, i64, i64)> = [
            (1, 3),
            (1, 5),
            (1, 7),
            (1, 8),
            (1, 9),
            (5, 0),
            (5, 1),
            (5, 2),
            (10, 229),
        ]
        .iter()
        .map(|&(a, b)| ("c".to_string(), a, b))
        .collect();
        assert_eq!(kept, want);
        let removed: Vec<&str> = d
            .changes
            .iter()
            .filter(|c| c.field == "linux.devices" && c.action == "removed")
            .map(|c| c.detail.as_str())
            .collect();
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert_eq!(
            removed[0],
            "/dev/vda (b 253:0), /dev/sda (b 8:0), /dev/loop0 (b 7:0), /dev/nvme0n1 (b 259:0)"
        );
        for cut in [
            "/dev/mem (c 1:1)",
            "/dev/kmsg (c 1:11)",
            "/dev/tty0 (c 4:0)",
            "/dev/kvm (c 10:232)",
            "/dev/loop-control (c 10:237)",
            "/dev/nvidia0 (c 195:0)",
        ] {
            assert!(removed[1].contains(cut), "{cut}: {}", removed[1]);
        }
    }

    #[test]
    fn the_cgroup_allows_exactly_the_nodes_kept() {
        let mut s = privileged();
        let d = run(&mut s, &Config::default());
        let rules = rules_of(&s);
        assert_eq!(rule_str(&rules[0]), "a *:* rwm");
        assert!(!rules[0].allow);
        let allowed: Vec<String> = rules[1..].iter().map(rule_str).collect();
        assert_eq!(
            allowed,
            [
                "c 1:3 rwm",
                "c 1:5 rwm",
                "c 1:7 rwm",
                "c 1:8 rwm",
                "c 1:9 rwm",
                "c 5:0 rwm",
                "c 5:1 rwm",
                "c 5:2 rwm",
                "c 10:229 rwm"
            ]
        );
        assert!(rules[1..].iter().all(|r| r.allow));
        for (typ, major, minor) in [('b', 8, 0), ('b', 7, 0), ('c', 1, 1), ('c', 10, 232)] {
            assert_eq!(
                access_of(&rules, typ, major, minor),
                0,
                "{typ} {major}:{minor}"
            );
        }
        let c = d
            .changes
            .iter()
            .find(|c| c.field == "linux.resources.devices")
            .expect("reported");
        assert_eq!(c.action, "replaced");
        assert!(c.detail.ends_with("(cut: a *:* rwm)"), "{}", c.detail);
    }

    /// The numbers decide, not the name: `/dev/null` with the numbers of a disk is cut,
    /// `/dev/disk` with those of /dev/null kept.
    #[test]
    fn keyed_on_numbers_never_on_the_path() {
        let mut s = privileged();
        s.linux.as_mut().unwrap().devices = vec![
            dev("c", "/dev/null", 8, 0),
            dev("b", "/dev/null2", 1, 3),
            dev("c", "/dev/disk", 1, 3),
            dev("u", "/dev/fuse", 1, 1),
        ];
        run(&mut s, &Config::default());
        assert_eq!(numbers(&s), [("c".to_string(), 1, 3)]);
        assert_eq!(s.linux().devices[0].path, "/dev/disk");
    }

    /// Access never grows: a node the engine allowed read-only stays read-only, one it
    /// gave nothing gets no rule (create still allows its mknod).
    #[test]
    fn access_is_the_narrower_of_rwm_and_the_engines() {
        let mut s = privileged();
        let linux = s.linux.as_mut().unwrap();
        linux.devices = vec![
            dev("c", "/dev/fuse", 10, 229),
            dev("c", "/dev/pts/3", 136, 3),
            dev("c", "/dev/null", 1, 3),
        ];
        linux.resources.as_mut().unwrap().devices = vec![
            rule(false, "a", -1, -1, "rwm"),
            rule(true, "c", 10, 229, "r"),
            rule(true, "c", 136, -1, "rwm"),
            rule(true, "c", 137, -1, "rwm"),
            rule(true, "b", -1, -1, "rw"),
            rule(true, "c", 1, 3, "rwx"),
        ];
        let d = run(&mut s, &Config::default());
        let allowed: Vec<String> = rules_of(&s)[1..].iter().map(rule_str).collect();
        assert_eq!(allowed, ["c 10:229 r", "c 136:3 rwm", "c 1:3 rw"]);
        let c = d
            .changes
            .iter()
            .find(|c| c.field == "linux.resources.devices")
            .unwrap();
        // `c 136:* rwm` is runc's default, kept for every container: not a cut.
        assert!(
            c.detail.ends_with("(cut: c 137:* rwm, b *:* rw)"),
            "{}",
            c.detail
        );
        let mut s = privileged();
        let linux = s.linux.as_mut().unwrap();
        linux.devices = vec![dev("c", "/dev/fuse", 10, 229)];
        linux.resources.as_mut().unwrap().devices = vec![rule(false, "a", -1, -1, "rwm")];
        let d = run(&mut s, &Config::default());
        assert_eq!(rules_of(&s).len(), 1);
        assert!(
            d.changes.is_empty(),
            "deny-all alone is what the engine sent: {:?}",
            d.changes
        );
    }

    /// A deny the kernel would not understand denies everything it might mean.
    #[test]
    fn an_engine_deny_never_widens() {
        let mut s = privileged();
        let linux = s.linux.as_mut().unwrap();
        linux.devices = vec![dev("c", "/dev/null", 1, 3), dev("c", "/dev/zero", 1, 5)];
        linux.resources.as_mut().unwrap().devices = vec![
            rule(true, "a", -1, -1, "rwm"),
            rule(false, "c", 1, 3, "a"),
            rule(false, "x", 1, 5, "w"),
        ];
        run(&mut s, &Config::default());
        let allowed: Vec<String> = rules_of(&s)[1..].iter().map(rule_str).collect();
        assert_eq!(allowed, ["c 1:5 rm"]);
    }

    #[test]
    fn the_operator_allows_character_devices_by_number() {
        let cfg = Config {
            allowed_devices: vec![parse_allowed("c 195:*").unwrap()],
            ..Config::default()
        };
        let mut s = privileged();
        run(&mut s, &cfg);
        let kept = numbers(&s);
        assert!(kept.contains(&("c".into(), 195, 0)) && kept.contains(&("c".into(), 195, 255)));
        assert!(!kept.iter().any(|(t, _, _)| t == "b"));
        let allowed: Vec<String> = rules_of(&s)[1..].iter().map(rule_str).collect();
        assert!(
            allowed.contains(&"c 195:255 rwm".to_string()),
            "{allowed:?}"
        );
    }

    #[test]
    fn allowed_devices_entries_are_checked() {
        assert_eq!(
            parse_allowed("c 195:*").unwrap(),
            AllowedDevice {
                major: Some(195),
                minor: None
            }
        );
        assert_eq!(
            parse_allowed(" c  10:200 ").unwrap().to_string(),
            "c 10:200"
        );
        assert_eq!(parse_allowed("c 1:11").unwrap().to_string(), "c 1:11");
        for (bad, why) in [
            ("b 8:0", "block devices are never allowed"),
            ("b 7:*", "block devices are never allowed"),
            ("c *:*", "wildcard major"),
            ("c *:3", "wildcard major"),
            ("c 1:*", "/dev/mem"),
            ("c 1:2", "/dev/kmem"),
            ("c 1:4", "/dev/port"),
            ("a 1:3", "expected"),
            ("c 195", "expected"),
            ("c 195:x", "expected"),
            ("c -1:0", "expected"),
            ("c 4096:0", "expected"),
            ("c 1:3 rw", "expected"),
            ("", "expected"),
        ] {
            let e = parse_allowed(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    #[test]
    fn fifos_stay_without_a_device_number() {
        let mut s = privileged();
        s.linux.as_mut().unwrap().devices = vec![dev("p", "/dev/myfifo", 8, 0)];
        let d = run(&mut s, &Config::default());
        assert_eq!(numbers(&s), [("p".to_string(), 0, 0)]);
        assert!(d
            .changes
            .iter()
            .any(|c| c.field == "linux.devices" && c.action == "set"));
        assert_eq!(rules_of(&s).len(), 1, "no allow rule for a FIFO");
    }

    /// Through `apply`: RESTRICTED cuts, OPEN runs the spec as written (runc).
    #[test]
    fn restricted_only() {
        let facts = super::super::FloorFacts::default();
        let mut open = privileged();
        let before = open.clone();
        let cfg = Config {
            default_policy: super::super::Mode::Open,
            ..Config::default()
        };
        super::super::apply(&mut open, &cfg, "o", &Default::default(), &facts).unwrap();
        assert_eq!(numbers(&open), numbers(&before));
        assert_eq!(
            open.linux().resources.as_ref().unwrap().devices,
            before.linux().resources.as_ref().unwrap().devices
        );
        let mut s = privileged();
        let d = super::super::apply(&mut s, &Config::default(), "r", &Default::default(), &facts)
            .unwrap();
        assert!(!s.linux().devices.iter().any(|d| d.typ == "b"));
        assert!(d
            .changes
            .iter()
            .any(|c| c.field == "linux.resources.devices"));
        // An empty spec gets deny-all too: no mknod-anything left.
        let mut s: Spec = serde_json::from_value(crate::spec::default::spec(false, true)).unwrap();
        s.linux.as_mut().unwrap().resources = None;
        super::super::apply(&mut s, &Config::default(), "e", &Default::default(), &facts).unwrap();
        assert_eq!(
            s.linux().resources.as_ref().unwrap().devices,
            [rule(false, "a", -1, -1, "rwm")]
        );
    }
}
