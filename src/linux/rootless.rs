//! Rootless mode: moat run without real root, either by an ordinary user or as uid 0 inside
//! someone else's user namespace (rootless podman calls its runtime that way). Decides
//! whether moat is rootless (as runc does), where its state lives then, and checks the id
//! maps a rootless spec asks for against /etc/subuid and /etc/subgid before anything
//! exists, so a bad map fails with a sentence rather than newuidmap's exit status.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::sys;
use crate::spec::IdMapping;

/// `--rootless true|false|auto`. `auto` (runc's rule): not euid 0, or euid 0 inside a user
/// namespace other than the initial one.
/// `--rootless`: `true`, `false`, or `auto` (runc's rule, [`Flag::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    True,
    False,
    Auto,
}

impl Flag {
    pub fn parse(flag: &str) -> Result<Flag, BadFlag> {
        match flag {
            "true" => Ok(Flag::True),
            "false" => Ok(Flag::False),
            "auto" | "" => Ok(Flag::Auto),
            other => Err(BadFlag(other.to_string())),
        }
    }

    /// `auto`: rootless unless moat is real root (euid 0 in the initial user namespace).
    pub fn resolve(self) -> bool {
        match self {
            Flag::True => true,
            Flag::False => false,
            Flag::Auto => sys::geteuid() != 0 || in_user_namespace(),
        }
    }
}

/// A `--rootless` value other than `true`, `false` or `auto`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("--rootless {0:?}: want true, false or auto")]
pub struct BadFlag(pub String);

/// True unless `/proc/self/uid_map` is the initial namespace's identity map of every id.
pub fn in_user_namespace() -> bool {
    // In moat's container children, through moat's own procfs (never the container's).
    let map = if super::procfs::held() {
        super::procfs::uid_map().map_err(|e| io::Error::other(e.to_string()))
    } else {
        super::sys::read_file(std::path::Path::new("/proc/self/uid_map")).and_then(|b| {
            String::from_utf8(b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        })
    };
    match map {
        Ok(map) => !is_initial_map(&map),
        // No user namespace support at all: there is only the initial one.
        Err(_) => false,
    }
}

fn is_initial_map(map: &str) -> bool {
    let lines: Vec<Vec<&str>> = map
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|l: &Vec<&str>| !l.is_empty())
        .collect();
    lines.len() == 1 && lines[0] == ["0", "0", "4294967295"]
}

/// Maps an id of this namespace to the initial namespace through `map` (a
/// `/proc/<pid>/{uid,gid}_map`); `None` if it is not mapped.
fn to_host(map: &str, id: u32) -> Option<u32> {
    map.lines().find_map(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let (inside, outside, len) = (*f.first()?, *f.get(1)?, *f.get(2)?);
        let id = u64::from(id);
        let host = (id >= inside && id < inside + len).then(|| outside + id - inside)?;
        u32::try_from(host).ok()
    })
}

/// The state root of a rootless caller that gave no `--root`: `$XDG_RUNTIME_DIR/moat`, or
/// without a runtime directory (hosts without logind) `/tmp/moat-<host uid>`, which must
/// be a real directory owned by the caller and closed to others: /tmp is shared, and
/// whoever owns the state root decides which pids moat signals and which cgroups it
/// removes.
pub fn state_root() -> io::Result<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|x| !x.is_empty()) {
        return Ok(PathBuf::from(x).join("moat"));
    }
    let euid = sys::geteuid();
    let host_uid = super::read_kernel_file("/proc/self/uid_map")
        .ok()
        .and_then(|m| to_host(&m, euid))
        .unwrap_or(euid);
    let dir = PathBuf::from(format!("/tmp/moat-{host_uid}"));
    private_dir(&dir, euid)?;
    Ok(dir)
}

/// The caller's uid as the initial user namespace sees it (inside an engine's user
/// namespace moat is uid 0, mapped to the user who ran the engine).
pub fn host_uid() -> u32 {
    let euid = sys::geteuid();
    super::read_kernel_file("/proc/self/uid_map")
        .ok()
        .and_then(|m| to_host(&m, euid))
        .unwrap_or(euid)
}

/// Creates `dir` mode 0700 if missing, then insists it is a directory (not a symlink)
/// owned by `uid` with no access for group or others.
pub fn private_dir(dir: &Path, uid: u32) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create state root {}: {e}", dir.display()),
            ))
        }
    }
    let refuse = |why: String| {
        Err(io::Error::other(format!(
            "state root {}: {why}; refusing to use it (remove it, or pass --root)",
            dir.display()
        )))
    };
    let m = std::fs::symlink_metadata(dir)?;
    if m.file_type().is_symlink() {
        return refuse("is a symlink".into());
    }
    if !m.is_dir() {
        return refuse("is not a directory".into());
    }
    if m.uid() != uid {
        return refuse(format!("is owned by uid {}, not by uid {uid}", m.uid()));
    }
    if m.mode() & 0o077 != 0 {
        return refuse(format!(
            "has mode {:04o}: group and others may enter it",
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

/// One subordinate id range from /etc/subuid or /etc/subgid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubRange {
    pub start: u64,
    pub count: u64,
}

/// The ranges `/etc/sub{u,g}id` (`text`) grants to the user named `name` or numbered `id`.
pub fn sub_ranges(text: &str, name: Option<&str>, id: u32) -> Vec<SubRange> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (who, start, count) = (f.next()?, f.next()?, f.next()?);
            let mine = Some(who) == name || who.parse::<u32>().ok() == Some(id);
            let r = SubRange {
                start: start.trim().parse().ok()?,
                count: count.trim().parse().ok()?,
            };
            (mine && r.count > 0).then_some(r)
        })
        .collect()
}

/// Why a rootless spec's id map is refused; `field` is `linux.uidMappings` or
/// `linux.gidMappings`, `index` the entry, id ranges are inclusive (`first`, `last`).
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("{field}[{index}]: size must not be 0")]
    ZeroSize { field: &'static str, index: usize },
    #[error("{field}[{index}]: container ids {}-{} overlap {field}[{other}] ({}-{})", .ids.0, .ids.1, .other_ids.0, .other_ids.1)]
    ContainerOverlap {
        field: &'static str,
        index: usize,
        ids: (u64, u64),
        other: usize,
        other_ids: (u64, u64),
    },
    #[error("{field}[{index}]: host ids {}-{} overlap {field}[{other}] ({}-{})", .ids.0, .ids.1, .other_ids.0, .other_ids.1)]
    HostOverlap {
        field: &'static str,
        index: usize,
        ids: (u64, u64),
        other: usize,
        other_ids: (u64, u64),
    },
    /// Host ids neither the caller's own nor granted to it in `sub_file`.
    #[error("{field}[{index}]: host ids {}-{} are neither the caller's own id {own} nor subordinate ids of it ({})", .ids.0, .ids.1, granted_text(.sub_file, .user, .granted))]
    NotGranted {
        field: &'static str,
        index: usize,
        ids: (u64, u64),
        own: u32,
        sub_file: &'static str,
        user: String,
        granted: Vec<SubRange>,
    },
    #[error("{field}: mapping ids other than the caller's own needs {helper} (Debian package uidmap), which is not on PATH")]
    NoHelper {
        field: &'static str,
        helper: &'static str,
    },
}

/// "`sub_file` grants `user` only 100000-165535, …", or "… no range".
fn granted_text(sub_file: &str, user: &str, subs: &[SubRange]) -> String {
    if subs.is_empty() {
        format!("{sub_file} grants {user} no range")
    } else {
        format!(
            "{sub_file} grants {user} only {}",
            subs.iter()
                .map(|r| format!("{}-{}", r.start, r.start + r.count - 1))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Checks a rootless caller's `linux.uidMappings` (`kind` "uid") or `gidMappings` against
/// what the kernel and newuidmap/newgidmap will accept: the caller's own id (written
/// directly when it is the whole map), or ranges of its subordinate ids, with no two
/// entries overlapping on either side. `field` names the spec field in errors.
pub fn check_maps(
    field: &'static str,
    maps: &[IdMapping],
    own: u32,
    subs: &[SubRange],
    sub_file: &'static str,
    user: &str,
) -> Result<(), MapError> {
    for (index, m) in maps.iter().enumerate() {
        if m.size == 0 {
            return Err(MapError::ZeroSize { field, index });
        }
        let (c, h, n) = (
            u64::from(m.container_id),
            u64::from(m.host_id),
            u64::from(m.size),
        );
        for (j, o) in maps.iter().enumerate().take(index) {
            let (oc, oh, on) = (
                u64::from(o.container_id),
                u64::from(o.host_id),
                u64::from(o.size),
            );
            if c < oc + on && oc < c + n {
                return Err(MapError::ContainerOverlap {
                    field,
                    index,
                    ids: (c, c + n - 1),
                    other: j,
                    other_ids: (oc, oc + on - 1),
                });
            }
            if h < oh + on && oh < h + n {
                return Err(MapError::HostOverlap {
                    field,
                    index,
                    ids: (h, h + n - 1),
                    other: j,
                    other_ids: (oh, oh + on - 1),
                });
            }
        }
        if h == u64::from(own) && n == 1 {
            continue;
        }
        let covered = subs
            .iter()
            .any(|r| h >= r.start && h + n <= r.start + r.count);
        if !covered {
            return Err(MapError::NotGranted {
                field,
                index,
                ids: (h, h + n - 1),
                own,
                sub_file,
                user: user.to_string(),
                granted: subs.to_vec(),
            });
        }
    }
    Ok(())
}

/// Whether writing `maps` needs the setuid helper (anything but a single self-mapping).
pub fn needs_helper(maps: &[IdMapping], own: u32) -> bool {
    !(maps.is_empty() || (maps.len() == 1 && maps[0].size == 1 && maps[0].host_id == own))
}

/// [`check_maps`] for both maps of a spec, for an unprivileged caller (euid != 0): reads
/// /etc/subuid and /etc/subgid, and requires newuidmap/newgidmap when they are needed.
pub fn check_spec_maps(uid: &[IdMapping], gid: &[IdMapping]) -> Result<(), MapError> {
    let euid = sys::geteuid();
    let egid = nix::unistd::getegid().as_raw();
    let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(euid))
        .ok()
        .flatten()
        .map(|u| u.name);
    let user = name.clone().unwrap_or_else(|| format!("uid {euid}"));
    for (field, maps, own, file, helper) in [
        ("linux.uidMappings", uid, euid, "/etc/subuid", "newuidmap"),
        ("linux.gidMappings", gid, egid, "/etc/subgid", "newgidmap"),
    ] {
        let text = if needs_helper(maps, own) {
            std::fs::read_to_string(file).unwrap_or_default()
        } else {
            String::new()
        };
        check_maps(
            field,
            maps,
            own,
            &sub_ranges(&text, name.as_deref(), euid),
            file,
            &user,
        )?;
        if needs_helper(maps, own) && which(helper).is_none() {
            return Err(MapError::NoHelper { field, helper });
        }
    }
    Ok(())
}

/// The limits in `res` a container without a cgroup loses, for the warning. Device rules
/// are not among them: in a user namespace no device node can be made, and the nodes
/// moat binds are the harmless default set and the spec's own.
pub fn resource_names(res: &crate::spec::Resources) -> String {
    let unified = res.unified.as_ref().is_some_and(|u| !u.is_empty());
    [
        (res.pids.is_some(), "pids"),
        (res.memory.is_some(), "memory"),
        (res.cpu.is_some(), "cpu"),
        (res.block_io.is_some(), "blockIO"),
        (!res.hugepage_limits.is_empty(), "hugepageLimits"),
        (res.network.is_some(), "network"),
        (res.rdma.is_some(), "rdma"),
        (unified, "unified"),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .map(|(_, n)| n)
    .collect::<Vec<_>>()
    .join(", ")
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(c: u32, h: u32, n: u32) -> IdMapping {
        IdMapping {
            container_id: c,
            host_id: h,
            size: n,
        }
    }

    #[test]
    fn rootless_flag() {
        let detect = |f: &str| Flag::parse(f).map(Flag::resolve);
        assert_eq!(detect("true"), Ok(true));
        assert_eq!(detect("false"), Ok(false));
        assert_eq!(
            detect("auto"),
            Ok(sys::geteuid() != 0 || in_user_namespace())
        );
        assert_eq!(
            detect("yes").unwrap_err().to_string(),
            r#"--rootless "yes": want true, false or auto"#
        );
    }

    #[test]
    fn initial_namespace() {
        assert!(is_initial_map("         0          0 4294967295\n"));
        assert!(!is_initial_map("         0       1000          1\n"));
        assert!(!is_initial_map("0 1000 1\n1 100000 65536\n"));
    }

    #[test]
    fn host_id_through_map() {
        let map = "0 1000 1\n1 100000 65536\n";
        assert_eq!(to_host(map, 0), Some(1000));
        assert_eq!(to_host(map, 5), Some(100004));
        assert_eq!(to_host(map, 70000), None);
    }

    #[test]
    fn subordinate_ranges_by_name_or_uid() {
        let text = "alice:100000:65536\n1001:300000:10\nbob:200000:65536\n";
        assert_eq!(
            sub_ranges(text, Some("alice"), 1001),
            vec![
                SubRange {
                    start: 100000,
                    count: 65536
                },
                SubRange {
                    start: 300000,
                    count: 10
                }
            ]
        );
        assert!(sub_ranges(text, Some("carol"), 1002).is_empty());
    }

    #[test]
    fn maps_checked_against_ranges() {
        let subs = [SubRange {
            start: 100000,
            count: 65536,
        }];
        let ok = [m(0, 1000, 1), m(1, 100000, 65536)];
        assert!(check_maps("linux.uidMappings", &ok, 1000, &subs, "/etc/subuid", "a").is_ok());
        let e = check_maps(
            "linux.uidMappings",
            &[m(0, 1000, 1), m(1, 100000, 65537)],
            1000,
            &subs,
            "/etc/subuid",
            "a",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("linux.uidMappings[1]: host ids 100000-165536"),
            "{e}"
        );
        let e = check_maps("linux.uidMappings", &ok, 1000, &[], "/etc/subuid", "a")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/subuid grants a no range"), "{e}");
        let e = check_maps(
            "linux.uidMappings",
            &[m(0, 100000, 10), m(5, 100010, 10)],
            1000,
            &subs,
            "/etc/subuid",
            "a",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("container ids 5-14 overlap linux.uidMappings[0]"),
            "{e}"
        );
        let e = check_maps(
            "linux.uidMappings",
            &[m(0, 100000, 10), m(10, 100005, 10)],
            1000,
            &subs,
            "/etc/subuid",
            "a",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("host ids 100005-100014 overlap"), "{e}");
    }

    #[test]
    fn helper_only_beyond_self_map() {
        assert!(!needs_helper(&[m(0, 1000, 1)], 1000));
        assert!(needs_helper(&[m(0, 1001, 1)], 1000));
        assert!(needs_helper(&[m(0, 1000, 1), m(1, 100000, 5)], 1000));
    }

    #[test]
    fn private_dir_refuses_others_and_symlinks() {
        let base = std::env::temp_dir().join(format!("moat-rl-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir(&base).unwrap();
        let uid = sys::geteuid();
        let d = base.join("own");
        private_dir(&d, uid).unwrap();
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        let e = private_dir(&d, uid + 1).unwrap_err().to_string();
        assert!(e.contains("is owned by uid"), "{e}");
        let l = base.join("link");
        std::os::unix::fs::symlink(&d, &l).unwrap();
        let e = private_dir(&l, uid).unwrap_err().to_string();
        assert!(e.contains("is a symlink"), "{e}");
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let e = private_dir(&d, uid).unwrap_err().to_string();
        assert!(e.contains("mode 0755"), "{e}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
