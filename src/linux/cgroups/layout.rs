//! Where the hierarchies are: detection from statfs and /proc/self/mountinfo, and the
//! container's path below each hierarchy root.

use std::path::{Path, PathBuf};

use super::{CgroupError, Hierarchy, CGROUP_ROOT};

/// The host's cgroup mounts; injectable so tests can point at a fake tree.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Pure cgroup v2: one hierarchy, v2 semantics for everything.
    pub unified: bool,
    pub hierarchies: Vec<Hierarchy>,
}

/// Whether the host is cgroup v2 only: cgroup2 mounted at `/sys/fs/cgroup` (not v1 or hybrid).
pub fn unified_mode() -> bool {
    nix::sys::statfs::statfs(Path::new(CGROUP_ROOT))
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
}

impl Layout {
    pub fn detect() -> Result<Layout, CgroupError> {
        let root = Path::new(CGROUP_ROOT);
        if unified_mode() {
            return Ok(Layout {
                unified: true,
                hierarchies: vec![v2_hierarchy(root.into())],
            });
        }
        let text = crate::linux::read_kernel_file("/proc/self/mountinfo")
            .map_err(|e| CgroupError::io("read", "/proc/self/mountinfo", e))?;
        let mut hierarchies = parse_mountinfo(&text);
        for h in hierarchies.iter_mut().filter(|h| h.v2) {
            *h = v2_hierarchy(std::mem::take(&mut h.mount));
        }
        Ok(Layout {
            unified: false,
            hierarchies,
        })
    }
}

impl Layout {
    /// Whether a hierarchy offers `controller` (a v1 mount of it, or the v2 root's
    /// `cgroup.controllers`).
    pub fn offers(&self, controller: &str) -> bool {
        self.hierarchies.iter().any(|h| h.has(controller))
    }
}

fn v2_hierarchy(mount: PathBuf) -> Hierarchy {
    let controllers = crate::linux::read_kernel_file(mount.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    Hierarchy {
        mount,
        controllers,
        v2: true,
    }
}

/// Decodes the octal escapes (`\040` for space) mountinfo uses in paths. The kernel
/// escapes a byte, `\000` to `\377`; anything above is not an escape (it overflowed a
/// byte: a debug build panicked, a release build decoded another path; found by
/// fuzz/fuzz_targets/mountinfo.rs).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).filter(|d| {
            (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match oct {
            Some(d) if b[i] == b'\\' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// v1 hierarchies (each once, however often it is mounted) followed by the first v2
/// mount. Only mounts of a hierarchy's root are used: a bind mount of a sub-cgroup
/// would put `/moat/<id>` somewhere unexpected.
pub fn parse_mountinfo(text: &str) -> Vec<Hierarchy> {
    const NOT_CONTROLLERS: [&str; 7] = [
        "rw",
        "ro",
        "clone_children",
        "noprefix",
        "xattr",
        "cpuset_v2_mode",
        "favordynmods",
    ];
    let mut seen = Vec::new();
    let mut v1 = Vec::new();
    let mut v2 = None;
    for line in text.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 || pre[3] != "/" {
            continue;
        }
        let mount = PathBuf::from(unescape(pre[4]));
        match post[0] {
            "cgroup" if !seen.contains(&pre[2]) => {
                seen.push(pre[2]);
                let controllers = post[2]
                    .split(',')
                    .filter(|o| !NOT_CONTROLLERS.contains(o) && !o.starts_with("release_agent="))
                    .map(String::from)
                    .collect();
                v1.push(Hierarchy {
                    mount,
                    controllers,
                    v2: false,
                });
            }
            "cgroup2" if v2.is_none() => {
                v2 = Some(Hierarchy {
                    mount,
                    controllers: Vec::new(),
                    v2: true,
                })
            }
            _ => {}
        }
    }
    v1.extend(v2);
    v1
}

/// Whether the topmost mount at `/sys/fs/cgroup` in a mountinfo text is cgroup2 with the
/// `nsdelegate` super option: the kernel then refuses a cgroup namespace root's writes to
/// its own interface files (`pids.max`, `memory.max`, ...). The option belongs to the v2
/// hierarchy, not to one mount of it, so the host's mount tells what every container's
/// cgroupfs gets.
pub fn nsdelegate(mountinfo: &str) -> bool {
    crate::linux::idmap::parse_mountinfo(mountinfo)
        .into_iter()
        .rev()
        .find(|m| m.mount_point == Path::new(CGROUP_ROOT))
        .is_some_and(|m| m.fstype == "cgroup2" && m.super_opts.iter().any(|o| o == "nsdelegate"))
}

/// `linux.cgroupsPath` → the path below each hierarchy root: none → `/moat/<id>`,
/// relative → `/moat/<relative>`, absolute → as given.
pub fn resolve_path(cgroups_path: Option<&str>, id: &str) -> Result<String, CgroupError> {
    let raw = match cgroups_path.filter(|p| !p.is_empty()) {
        Some(p) if p.starts_with('/') => p.to_string(),
        Some(p) => format!("/moat/{p}"),
        None if id.is_empty() || id.contains('/') => {
            return Err(CgroupError::invalid(
                "id",
                format!("{id:?} cannot name a cgroup"),
            ))
        }
        None => format!("/moat/{id}"),
    };
    let mut out = String::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                return Err(CgroupError::invalid(
                    "linux.cgroupsPath",
                    format!("{raw:?} must not contain \"..\""),
                ))
            }
            c => {
                out.push('/');
                out.push_str(c);
            }
        }
    }
    if out.is_empty() {
        return Err(CgroupError::invalid(
            "linux.cgroupsPath",
            "must not be the root cgroup",
        ));
    }
    Ok(out)
}
