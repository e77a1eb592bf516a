//! What the host's Linux security modules are, probed once by moat on the host before
//! anything is forked or joined.
//!
//! Whether AppArmor or SELinux confines a container must never be decided from inside the
//! container's view: after `pivot_root` or `setns` the container's `/sys` may be absent,
//! renamed or a tmpfs, and a check made there would silently run the container unconfined.
//! `create` and `exec` probe these facts in the parent (the host's mount namespace), the
//! policy takes them as an argument, and the child gets them in memory across the fork
//! (see `attrs::Attrs::on_host`).

use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

use super::sys;

/// `SELINUX_MAGIC` (linux/magic.h): selinuxfs.
const SELINUX_MAGIC: u64 = 0xf97c_ff8c;

const APPARMOR_ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
const APPARMOR_PROFILES: &str = "/sys/kernel/security/apparmor/profiles";
const SELINUXFS: &str = "/sys/fs/selinux";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// AppArmor is an active LSM (`/sys/module/apparmor/parameters/enabled` is `Y`).
    pub apparmor: bool,
    /// The kernel has the per-LSM attr directory `/proc/<pid>/attr/apparmor/` (5.8 on);
    /// older kernels take AppArmor's labels in `/proc/<pid>/attr/{exec,current}`.
    pub apparmor_attr_dir: bool,
    /// The names of the loaded AppArmor profiles; `None` when AppArmor is off or
    /// securityfs cannot be read (then only the kernel's answer to the write tells).
    pub apparmor_profiles: Option<Vec<String>>,
    /// SELinux is active: selinuxfs is mounted at `/sys/fs/selinux` (checked by its magic,
    /// not by a file name a plain directory could also hold).
    pub selinux: bool,
    /// This moat may load an AppArmor profile: it is real root (euid 0 in the initial
    /// user namespace). Rootless moat (rootless podman: uid 0 in the user's namespace) may
    /// not, and uses moat's profile only where root has loaded it.
    pub apparmor_may_load: bool,
    /// moat-default is loaded: read from the list, or, where a user namespace hides the
    /// list from a moat that may not load it, asked of the kernel ([`probe_onexec`]).
    pub moat_profile_loaded: bool,
}

impl HostFacts {
    /// Reads the facts from the calling process's view, which must be the host's: call it
    /// in `create`/`exec` before forking or joining any container namespace.
    pub fn probe() -> HostFacts {
        let apparmor = std::fs::read_to_string(APPARMOR_ENABLED).is_ok_and(|s| s.trim() == "Y");
        let (apparmor_attr_dir, apparmor_profiles) = if apparmor {
            (
                std::path::Path::new("/proc/self/attr/apparmor").is_dir(),
                std::fs::read_to_string(APPARMOR_PROFILES)
                    .ok()
                    .map(|t| parse_profiles(&t)),
            )
        } else {
            (false, None)
        };
        // Asked only where it matters: an AppArmor host.
        let apparmor_may_load = apparmor
            && crate::linux::sys::geteuid() == 0
            && !crate::linux::rootless::in_user_namespace();
        let name = crate::policy::APPARMOR_PROFILE_NAME;
        let moat_profile_loaded = match &apparmor_profiles {
            Some(list) => list.iter().any(|p| p == name),
            None if apparmor && !apparmor_may_load => probe_onexec(name, apparmor_attr_dir),
            None => false,
        };
        HostFacts {
            apparmor,
            apparmor_attr_dir,
            apparmor_profiles,
            selinux: selinuxfs_mounted(),
            apparmor_may_load,
            moat_profile_loaded,
        }
    }

    /// `Some(true)` when the profile is loaded, `Some(false)` when it is not, `None` when
    /// the list could not be read.
    pub fn apparmor_loaded(&self, name: &str) -> Option<bool> {
        self.apparmor_profiles
            .as_ref()
            .map(|l| l.iter().any(|p| p == name))
    }

    /// The attr file that holds the AppArmor label of `pid`'s `file` (`current`, `exec`).
    pub fn apparmor_attr(&self, pid: &str, file: &str) -> String {
        if self.apparmor_attr_dir {
            format!("/proc/{pid}/attr/apparmor/{file}")
        } else {
            format!("/proc/{pid}/attr/{file}")
        }
    }
}

/// Whether the kernel knows the AppArmor profile `name`, asked the only way a process in a
/// user namespace may (securityfs's list is hidden there): a throwaway fork asks to run
/// its next exec under it, which AppArmor grants only for a loaded profile (ENOENT
/// otherwise), and exits without exec'ing. Only rootless moat on an AppArmor host pays
/// this fork.
fn probe_onexec(name: &str, attr_dir: bool) -> bool {
    let attr = if attr_dir {
        "/proc/thread-self/attr/apparmor/exec"
    } else {
        "/proc/thread-self/attr/exec"
    };
    let Ok(forked) = sys::clone_fork(0, None) else {
        return false;
    };
    match forked {
        sys::Forked::Child => {
            let ok = sys::write_file(
                std::path::Path::new(attr),
                format!("exec {name}").as_bytes(),
            );
            sys::exit_now(if ok.is_ok() { 0 } else { 1 })
        }
        sys::Forked::Parent(pid) => {
            sys::waitpid(pid).is_ok_and(|st| libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0)
        }
    }
}

/// `name (mode)` per line, as securityfs lists them.
fn parse_profiles(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.rsplit_once(" (").map(|(n, _)| n.to_string()))
        .collect()
}

/// Whether the host has SELinux (its filesystem mounted at /sys/fs/selinux).
pub fn selinuxfs_mounted() -> bool {
    let Ok(dir) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(SELINUXFS)
    else {
        return false;
    };
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    sys::fstatfs(dir.as_fd()).is_ok_and(|s| s.f_type as u64 == SELINUX_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_list() {
        let l = parse_profiles(
            "moat-default (enforce)\ndocker-default (enforce)\n/usr/bin/man (complain)\n",
        );
        assert_eq!(l, ["moat-default", "docker-default", "/usr/bin/man"]);
        let f = HostFacts {
            apparmor: true,
            apparmor_profiles: Some(l),
            ..Default::default()
        };
        assert_eq!(f.apparmor_loaded("docker-default"), Some(true));
        assert_eq!(f.apparmor_loaded("docker"), Some(false));
        assert_eq!(HostFacts::default().apparmor_loaded("x"), None);
    }

    /// The probe agrees with the kernel's own list of active LSMs (securityfs, where it
    /// is mounted; this host's kernel has neither AppArmor nor SELinux).
    #[test]
    fn probe_matches_the_kernel() {
        let f = HostFacts::probe();
        match std::fs::read_to_string("/sys/kernel/security/lsm") {
            Ok(lsm) => {
                let active: Vec<&str> = lsm.trim().split(',').collect();
                assert_eq!(f.apparmor, active.contains(&"apparmor"), "{lsm}");
                if !active.contains(&"selinux") {
                    assert!(!f.selinux, "{lsm}");
                }
            }
            Err(_) => {
                let aa = std::path::Path::new("/sys/module/apparmor").exists();
                if !aa {
                    assert!(!f.apparmor);
                }
            }
        }
        if !f.apparmor {
            assert_eq!(f.apparmor_profiles, None);
        }
    }
}
