//! Capability names → bit masks, and the order in which a process gives them up.

use crate::log;
use crate::spec;

/// Capability names in kernel bit order (`include/uapi/linux/capability.h`).
pub const NAMES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The highest capability the running kernel knows, a host fact: read only on the host,
/// by the parent (`Attrs::last_cap` carries it into the child), never in a container's view.
/// Read once per process (the parent asks for it for each set of attributes it plans).
pub fn last_cap() -> u32 {
    static LAST: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *LAST.get_or_init(|| {
        super::sys::read_file(std::path::Path::new("/proc/sys/kernel/cap_last_cap"))
            .ok()
            .and_then(|s| String::from_utf8(s).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40)
    })
}

pub fn number(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    let i = NAMES.iter().position(|n| *n == full)?;
    u32::try_from(i).ok()
}

/// The five sets as masks, ready for capset/prctl in the child.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sets {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

/// Converts the spec's sets, warning once about the names it ignores. A name that is no
/// capability (`CAP_UNKNOWN`), or one this kernel does not have, is ignored with a warning,
/// as runc does: the one place moat drops rather than refuses what a spec asks, because
/// engines and runc's suite send such names and dropping one grants nothing (RESTRICTED's
/// floor has removed them before this, as capabilities it does not allow).
pub fn from_spec(caps: Option<&spec::Capabilities>, field: &str) -> Sets {
    let (sets, mut ignored, unraisable) = masks(caps);
    // runc tries each ambient capability and warns for the ones the kernel refuses
    // (logrus, on stderr or in the --log): scripts and runc's suite look for its words.
    for name in names(unraisable) {
        log::warn(&format!(
            "{field}.ambient: can't raise ambient capability {name}: not in both permitted \
             and inheritable"
        ));
    }
    if !ignored.is_empty() {
        ignored.sort_unstable();
        ignored.dedup();
        log::warn(&format!(
            "{field}: ignoring unknown or unavailable capabilities: {}",
            ignored.join(" ")
        ));
    }
    sets
}

/// [`from_spec`] without the warning: the saved spec of a container whose create warned
/// already (exec's bounding set, `verify`).
pub fn from_saved(caps: Option<&spec::Capabilities>) -> Sets {
    masks(caps).0
}

/// The sets as masks (ambient cut to what the kernel lets be raised), the names that are
/// no capability of this kernel, and the ambient capabilities cut.
fn masks(caps: Option<&spec::Capabilities>) -> (Sets, Vec<String>, u64) {
    let last = last_cap();
    let mut ignored = Vec::new();
    let Some(c) = caps else {
        return (Sets::default(), ignored, 0);
    };
    let mut mask = |set: &Option<Vec<String>>| -> u64 {
        let mut m = 0u64;
        for n in set.iter().flatten() {
            match number(n) {
                Some(bit) if bit <= last => m |= 1 << bit,
                _ => ignored.push(n.clone()),
            }
        }
        m
    };
    let mut sets = Sets {
        bounding: mask(&c.bounding),
        effective: mask(&c.effective),
        permitted: mask(&c.permitted),
        inheritable: mask(&c.inheritable),
        ambient: mask(&c.ambient),
    };
    // The kernel only lets a capability be ambient if it is permitted and inheritable
    // (PR_CAP_AMBIENT_RAISE fails with EPERM): the others are not raised.
    let raisable = sets.permitted & sets.inheritable;
    let unraisable = sets.ambient & !raisable;
    sets.ambient &= raisable;
    (sets, ignored, unraisable)
}

pub fn names(mask: u64) -> Vec<&'static str> {
    (0..NAMES.len())
        .filter(|i| mask & (1 << i) != 0)
        .map(|i| NAMES[i])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(number("CAP_SYS_ADMIN"), Some(21));
        assert_eq!(number("net_raw"), Some(13));
        assert_eq!(number("CAP_NOPE"), None);
        assert_eq!(names(1 << 21 | 1), vec!["CAP_CHOWN", "CAP_SYS_ADMIN"]);
    }

    #[test]
    fn unknown_names_are_ignored_and_named() {
        let c = spec::Capabilities {
            bounding: Some(vec!["CAP_KILL".into(), "CAP_FLY".into()]),
            effective: Some(vec!["CAP_FLY".into(), "UNKNOWN_CAP".into()]),
            ..Default::default()
        };
        let (sets, ignored, _) = masks(Some(&c));
        assert_eq!(sets.bounding, 1 << 5);
        assert_eq!(sets.effective, 0);
        assert_eq!(ignored, ["CAP_FLY", "CAP_FLY", "UNKNOWN_CAP"]);
    }

    /// runc's capabilities.bats case: only an ambient capability both permitted and
    /// inheritable is raised; the others are returned to be named.
    #[test]
    fn ambient_outside_permitted_and_inheritable_is_cut_and_named() {
        let c = spec::Capabilities {
            permitted: Some(vec!["CAP_KILL".into(), "CAP_CHOWN".into()]),
            inheritable: Some(vec!["CAP_KILL".into(), "CAP_NET_RAW".into()]),
            ambient: Some(vec![
                "CAP_KILL".into(),
                "CAP_CHOWN".into(),
                "CAP_NET_RAW".into(),
            ]),
            ..Default::default()
        };
        let (sets, _, unraisable) = masks(Some(&c));
        assert_eq!(sets.ambient, 1 << 5);
        assert_eq!(names(unraisable), ["CAP_CHOWN", "CAP_NET_RAW"]);
    }
}
