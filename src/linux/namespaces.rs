//! Which namespaces the container gets, and how: created at clone, joined by path, or
//! unshared by an intermediate process.
//!
//! The common case ("direct") is one `clone3` with every new namespace flag: the child is
//! the container init, in its new user namespace if any (the parent writes the id maps),
//! and joins path namespaces itself (possible because without a new user namespace it
//! still holds the host's capabilities). Everything else is "staged": an intermediate
//! child joins the path namespaces first (as runc: the others before a joined user
//! namespace, which need not own them, and those it may not join yet after it), then
//! unshares the new ones, and forks the init, which is what joining a pid namespace, setting time
//! namespace offsets, or joining host-owned namespaces from a new user namespace requires.
//!
//! A process must never appear in a pid namespace that others share while its root is
//! the host's: a process there holding CAP_SYS_PTRACE over it could open
//! `/proc/<pid>/root` and reach the host's `/` (being non-dumpable does not stop that
//! capability). When a pid namespace is joined (a pod) and the mount namespace is new,
//! the init would set up its rootfs from a copy of the host's tree; so then
//! ([`Plan::late_init`]) the intermediate sets up the rootfs itself, outside that pid
//! namespace, and forks the init only after `pivot_root`. The one thing it cannot make
//! there is a procfs of the joined namespace: a short-lived helper makes those contexts
//! from inside it, born on an empty detached root (`create::child::proc_contexts`).

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Command;

use super::sys;
use crate::spec::{IdMapping, Spec};

pub const CLONE_NEWTIME: libc::c_int = 0x80;

pub fn flag(typ: &str) -> libc::c_int {
    match typ {
        "pid" => libc::CLONE_NEWPID,
        "network" => libc::CLONE_NEWNET,
        "mount" => libc::CLONE_NEWNS,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "user" => libc::CLONE_NEWUSER,
        "cgroup" => libc::CLONE_NEWCGROUP,
        "time" => CLONE_NEWTIME,
        _ => 0,
    }
}

/// A namespace to join: its flag, an fd opened in the parent, and the spec path for errors.
pub struct Join {
    pub flag: libc::c_int,
    pub fd: OwnedFd,
    pub path: String,
}

pub struct Plan {
    /// New namespaces (CLONE_NEW* bits), cgroup and time included.
    pub new: libc::c_int,
    /// Path namespaces other than user and mount, joined in this order.
    pub joins: Vec<Join>,
    pub user_join: Option<Join>,
    pub mount_join: Option<Join>,
    pub staged: bool,
    /// A pid namespace joined with a new mount namespace: the init is forked only after
    /// `pivot_root` (see the module doc).
    pub late_init: bool,
    pub time_offsets: String,
}

/// A `linux.namespaces` entry the plan refuses, naming the entry (its index, its path).
/// An io error is part of the message, as before, not a source of its own.
#[derive(Debug, thiserror::Error)]
pub enum NsError {
    #[error("linux.namespaces[{index}].path: contains a NUL byte")]
    PathNul { index: usize },
    #[error("linux.namespaces[{index}].path: cannot open {path}: {err}")]
    Open {
        index: usize,
        path: String,
        err: io::Error,
    },
    #[error("linux.namespaces: a mount namespace is required (moat never sets up a rootfs in the host's)")]
    NoMount,
    /// The fd opened for a path to join (RESTRICTED's check of what is joined).
    #[error("linux.namespaces: fstat {path}: {err}")]
    Fstat { path: String, err: io::Error },
    #[error("linux.namespaces: {path} (opened): the host's {typ} namespace is refused under RESTRICTED (allow with [restricted] host_namespaces = [\"{typ}\"])")]
    HostRefused { path: String, typ: &'static str },
}

impl Plan {
    pub fn from_spec(spec: &Spec) -> Result<Plan, NsError> {
        let mut plan = Plan {
            new: 0,
            joins: Vec::new(),
            user_join: None,
            mount_join: None,
            staged: false,
            late_init: false,
            time_offsets: String::new(),
        };
        for (i, ns) in spec.linux().namespaces.iter().enumerate() {
            let f = flag(&ns.typ);
            match &ns.path {
                None => plan.new |= f,
                Some(path) => {
                    let c =
                        CString::new(path.as_str()).map_err(|_| NsError::PathNul { index: i })?;
                    let fd =
                        sys::openat(super::path::cwd(), &c, libc::O_RDONLY, 0).map_err(|err| {
                            NsError::Open {
                                index: i,
                                path: path.clone(),
                                err,
                            }
                        })?;
                    let j = Join {
                        flag: f,
                        fd,
                        path: path.clone(),
                    };
                    match f {
                        libc::CLONE_NEWUSER => plan.user_join = Some(j),
                        libc::CLONE_NEWNS => plan.mount_join = Some(j),
                        _ => plan.joins.push(j),
                    }
                }
            }
        }
        if plan.new & libc::CLONE_NEWNS == 0 && plan.mount_join.is_none() {
            return Err(NsError::NoMount);
        }
        let pid_join = plan.joins.iter().any(|j| j.flag == libc::CLONE_NEWPID);
        let new_user = plan.new & libc::CLONE_NEWUSER != 0;
        plan.staged = plan.user_join.is_some()
            || plan.mount_join.is_some()
            || pid_join
            || plan.new & CLONE_NEWTIME != 0
            || (new_user && !plan.joins.is_empty());
        plan.late_init = pid_join && plan.mount_join.is_none();
        if let Some(offsets) = &spec.linux().time_offsets {
            for (clock, off) in offsets {
                plan.time_offsets
                    .push_str(&format!("{clock} {} {}\n", off.secs, off.nanosecs));
            }
        }
        Ok(plan)
    }

    /// RESTRICTED: none of the fds to join may be one of `refused` (the host's namespaces
    /// the policy refuses, by type and (st_dev, st_ino)). The policy looked at the paths
    /// with `stat` before they were opened here; this looks at what will be joined, so a
    /// path that changed in between (a pid reused, a bind replaced) cannot bring the host's
    /// namespace in.
    pub fn refuse_host(
        &self,
        refused: &[(&'static str, crate::policy::NsId)],
    ) -> Result<(), NsError> {
        for j in &self.joins {
            let st = sys::fstat(std::os::fd::AsFd::as_fd(&j.fd)).map_err(|err| NsError::Fstat {
                path: j.path.clone(),
                err,
            })?;
            let id = (st.st_dev, st.st_ino);
            if let Some((typ, _)) = refused.iter().find(|(t, h)| flag(t) == j.flag && *h == id) {
                return Err(NsError::HostRefused {
                    path: j.path.clone(),
                    typ,
                });
            }
        }
        Ok(())
    }

    pub fn has_new(&self, f: libc::c_int) -> bool {
        self.new & f != 0
    }

    /// Flags for the direct clone: every new namespace except cgroup (unshared by the init
    /// once the parent has placed it in its cgroup, so the namespace is rooted there).
    #[allow(clippy::cast_sign_loss)] // namespace flags only: bits 7-30, positive
    pub fn clone_flags(&self) -> u64 {
        (self.new & !libc::CLONE_NEWCGROUP & !CLONE_NEWTIME) as u64
    }
}

/// Writes `/proc/<pid>/{uid,gid}_map`. Root writes them directly; an unprivileged caller
/// can only map its own ids directly, and goes through the setuid newuidmap/newgidmap
/// helpers (which check /etc/subuid and /etc/subgid) for anything else.
pub fn write_id_maps(pid: i32, uid: &[IdMapping], gid: &[IdMapping]) -> io::Result<()> {
    let fmt = |m: &[IdMapping]| {
        m.iter()
            .map(|m| format!("{} {} {}\n", m.container_id, m.host_id, m.size))
            .collect::<String>()
    };
    let euid = sys::geteuid();
    let self_map =
        |m: &[IdMapping], own: u32| m.len() == 1 && m[0].size == 1 && m[0].host_id == own;
    let egid = sys::getegid();
    // The file is named: the caller's message says only that the maps were written.
    let write = |path: &str, data: &[u8]| {
        sys::write_file(Path::new(path), data)
            .map_err(|e| io::Error::new(e.kind(), format!("write {path}: {e}")))
    };
    if euid == 0 {
        if !gid.is_empty() {
            write(&format!("/proc/{pid}/gid_map"), fmt(gid).as_bytes())?;
        }
        if !uid.is_empty() {
            write(&format!("/proc/{pid}/uid_map"), fmt(uid).as_bytes())?;
        }
        return Ok(());
    }
    if !gid.is_empty() {
        if self_map(gid, egid) {
            // An unprivileged gid map requires setgroups to be denied first.
            write(&format!("/proc/{pid}/setgroups"), "deny".as_bytes())?;
            write(&format!("/proc/{pid}/gid_map"), fmt(gid).as_bytes())?;
        } else {
            helper("newgidmap", pid, gid)?;
        }
    }
    if !uid.is_empty() {
        if self_map(uid, euid) {
            write(&format!("/proc/{pid}/uid_map"), fmt(uid).as_bytes())?;
        } else {
            helper("newuidmap", pid, uid)?;
        }
    }
    Ok(())
}

fn helper(name: &str, pid: i32, maps: &[IdMapping]) -> io::Result<()> {
    let mut cmd = Command::new(name);
    cmd.arg(pid.to_string());
    for m in maps {
        cmd.args([
            m.container_id.to_string(),
            m.host_id.to_string(),
            m.size.to_string(),
        ]);
    }
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{name}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{name} failed ({}): {}",
            super::signal::ChildEnd::from(out.status),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Host facts for the RESTRICTED floor (`policy::FloorFacts`), read on the host before the
/// policy runs: moat's own pid, network, ipc and uts namespaces, the ones the spec names by
/// path (`stat` follows the nsfs magic link to the namespace itself), and whether the host
/// is cgroup v2. Five `stat`s; nothing is opened.
pub fn floor_facts(spec: &Spec) -> crate::policy::FloorFacts {
    use crate::policy::NsPathError;
    let ids = |p: &str| {
        let c = CString::new(p).map_err(|_| NsPathError::Nul)?;
        sys::stat(&c)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| NsPathError::Stat(e.raw_os_error().unwrap_or(0)))
    };
    let proc_name = |t: &str| if t == "network" { "net" } else { t }.to_string();
    let types = crate::policy::config::HOST_NAMESPACE_TYPES;
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let cgroup_v2 = sys::statfs(c"/sys/fs/cgroup")
        .is_ok_and(|s| s.f_type as u64 == libc::CGROUP2_SUPER_MAGIC as u64);
    crate::policy::FloorFacts {
        host_ns: types
            .iter()
            .filter_map(|t| {
                ids(&format!("/proc/self/ns/{}", proc_name(t)))
                    .ok()
                    .map(|i| (*t, i))
            })
            .collect(),
        ns_paths: spec
            .linux()
            .namespaces
            .iter()
            .filter(|n| types.contains(&n.typ.as_str()))
            .filter_map(|n| n.path.as_ref().map(|p| (p.clone(), ids(p))))
            .collect(),
        cgroup_nsdelegate: cgroup_v2 && writable_cgroupfs_in_own_ns(spec) && cgroup_nsdelegate(),
        cgroup_v2,
        systemd_cgroup: false,
        bpf_cgroup: bpf_cgroup(),
        resolvers: engine_resolvers(spec),
    }
}

/// Whether the spec has the one cgroupfs the RESTRICTED floor may leave writable (a cgroup
/// or cgroup2 mount without a final `ro`, in a cgroup namespace of the container's own), so
/// that only then is the host's mountinfo read: a create of a spec whose cgroupfs is
/// read-only anyway (runc's and podman's default) pays nothing for the fact.
fn writable_cgroupfs_in_own_ns(spec: &Spec) -> bool {
    let own_cgroupns = spec
        .linux()
        .namespaces
        .iter()
        .any(|n| n.typ == "cgroup" && n.path.is_none());
    own_cgroupns
        && spec.mounts.iter().any(|m| {
            matches!(m.typ.as_deref(), Some("cgroup" | "cgroup2"))
                && m.options
                    .iter()
                    .rev()
                    .find(|o| *o == "ro" || *o == "rw")
                    .map(String::as_str)
                    != Some("ro")
        })
}

/// Whether the host's cgroup2 at `/sys/fs/cgroup` is mounted with `nsdelegate`, from moat's
/// own mountinfo (read on the host, before anything forks). Unreadable counts as without:
/// the floor then cuts the cgroupfs to read-only.
fn cgroup_nsdelegate() -> bool {
    super::read_kernel_file("/proc/self/mountinfo").is_ok_and(|t| super::cgroups::nsdelegate(&t))
}

/// Whether this caller can attach cgroup BPF programs to a container's cgroup v2: root of
/// the host's user namespace (not rootless, not uid 0 of podman's user namespace), and a
/// cgroup2 mount at `/sys/fs/cgroup` or, on a hybrid host, `/sys/fs/cgroup/unified`.
pub fn bpf_cgroup() -> bool {
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let v2 = |p: &std::ffi::CStr| {
        sys::statfs(p).is_ok_and(|s| s.f_type as u64 == libc::CGROUP2_SUPER_MAGIC as u64)
    };
    sys::geteuid() == 0
        && !super::rootless::in_user_namespace()
        && (v2(c"/sys/fs/cgroup") || v2(c"/sys/fs/cgroup/unified"))
}

/// The nameservers of the engine's resolv.conf: the host-side source of the spec's bind
/// mount at `/etc/resolv.conf` (podman's, Docker's, the CRI's file), never the rootfs's
/// own `/etc/resolv.conf`, which the image controls. Empty without such a mount.
fn engine_resolvers(spec: &Spec) -> Vec<std::net::SocketAddr> {
    use std::io::Read;
    let Some(m) = spec.mounts.iter().rev().find(|m| {
        m.destination.trim_end_matches('/') == "/etc/resolv.conf"
            && (m.typ.as_deref() == Some("bind")
                || m.options.iter().any(|o| o == "bind" || o == "rbind"))
    }) else {
        return Vec::new();
    };
    let Some(src) = m.source.as_deref() else {
        return Vec::new();
    };
    let mut text = String::new();
    match std::fs::File::open(src) {
        Ok(f) => {
            let _ = f.take(64 * 1024).read_to_string(&mut text);
        }
        Err(_) => return Vec::new(),
    }
    crate::policy::egress::resolv_conf_nameservers(&text)
}

/// Which namespace a sysctl key lives in; `None` for host-global keys.
pub fn sysctl_namespace(key: &str) -> Option<libc::c_int> {
    const IPC: [&str; 7] = [
        "kernel.msgmax",
        "kernel.msgmnb",
        "kernel.msgmni",
        "kernel.sem",
        "kernel.shmall",
        "kernel.shmmax",
        "kernel.shmmni",
    ];
    if IPC.contains(&key) || key == "kernel.shm_rmid_forced" || key.starts_with("fs.mqueue.") {
        Some(libc::CLONE_NEWIPC)
    } else if key.starts_with("net.") {
        Some(libc::CLONE_NEWNET)
    } else if key == "kernel.hostname" || key == "kernel.domainname" {
        Some(libc::CLONE_NEWUTS)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ns: &str) -> Spec {
        Spec::parse(format!(r#"{{"ociVersion":"1.0.2","linux":{{"namespaces":{ns}}}}}"#).as_bytes())
            .unwrap()
    }

    #[test]
    fn direct_when_all_new() {
        let p = Plan::from_spec(&spec(
            r#"[{"type":"pid"},{"type":"mount"},{"type":"user"},{"type":"cgroup"}]"#,
        ))
        .unwrap();
        assert!(!p.staged);
        let f = libc::c_int::try_from(p.clone_flags()).unwrap();
        assert!(f & libc::CLONE_NEWUSER != 0 && f & libc::CLONE_NEWCGROUP == 0);
    }

    #[test]
    fn staged_for_pid_join_and_time() {
        let p = Plan::from_spec(&spec(
            r#"[{"type":"mount"},{"type":"pid","path":"/proc/self/ns/pid"}]"#,
        ))
        .unwrap();
        assert!(p.staged && p.late_init);
        let p = Plan::from_spec(&spec(
            r#"[{"type":"mount","path":"/proc/self/ns/mnt"},{"type":"pid","path":"/proc/self/ns/pid"}]"#,
        ))
        .unwrap();
        assert!(
            p.staged && !p.late_init,
            "a joined mount namespace is joined before the fork"
        );
        let p = Plan::from_spec(&spec(r#"[{"type":"mount"},{"type":"time"}]"#)).unwrap();
        assert!(!p.late_init);
        assert!(p.staged);
        let p = Plan::from_spec(&spec(
            r#"[{"type":"mount"},{"type":"network","path":"/proc/self/ns/net"}]"#,
        ))
        .unwrap();
        assert!(
            !p.staged,
            "a host-owned netns is joined directly without a new userns"
        );
    }

    #[test]
    fn mount_namespace_required() {
        let e = Plan::from_spec(&spec(r#"[{"type":"pid"}]"#)).err().unwrap();
        assert!(matches!(e, NsError::NoMount), "{e}");
        assert!(e.to_string().starts_with("linux.namespaces: "), "{e}");
    }

    #[test]
    fn bad_path_names_field() {
        let e = Plan::from_spec(&spec(
            r#"[{"type":"mount"},{"type":"network","path":"/nonexistent/ns"}]"#,
        ))
        .err()
        .unwrap();
        assert!(matches!(e, NsError::Open { index: 1, .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("linux.namespaces[1].path: cannot open /nonexistent/ns: "),
            "{e}"
        );
    }

    #[test]
    fn sysctl_owner() {
        assert_eq!(
            sysctl_namespace("net.ipv4.ip_forward"),
            Some(libc::CLONE_NEWNET)
        );
        assert_eq!(sysctl_namespace("kernel.shmmax"), Some(libc::CLONE_NEWIPC));
        assert_eq!(sysctl_namespace("kernel.core_pattern"), None);
    }
}
