//! The cgroup of a rootless container: only a cgroup v2 subtree the caller may write (one
//! that systemd or an administrator delegated) is used. Anything else (v1 and hybrid
//! hosts, a hierarchy owned by root) means no cgroup at all, which the caller reports
//! as one warning: the limits are not applied, and nothing fails.

use std::path::{Path, PathBuf};

use super::layout::Layout;
use super::{v2, Cgroup, CgroupError, Hierarchy};

/// Why a rootless container runs without a cgroup.
pub struct NoCgroup(pub String);

impl Cgroup {
    /// The rootless counterpart of [`Cgroup::plan`], creating nothing: the v2 hierarchy and
    /// the path below it, or why there is no cgroup on this host. `linux.cgroupsPath` absolute: as
    /// given; relative or absent (then the container id): below the parent of moat's own
    /// cgroup, as runc does, because moat's own cgroup holds processes and so cannot
    /// hand controllers to a child.
    pub fn plan_rootless(
        cgroups_path: Option<&str>,
        id: &str,
    ) -> Result<Result<(Hierarchy, String), NoCgroup>, CgroupError> {
        let layout = Layout::detect()?;
        if !layout.unified {
            return Ok(Err(NoCgroup(
                "the host's cgroups are v1 or hybrid, and rootless moat only uses a delegated cgroup v2 subtree".into(),
            )));
        }
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(str::to_string))
            })
            .unwrap_or_else(|| "/".into());
        let path = rootless_path(cgroups_path, id, &own)?;
        Ok(Ok((layout.hierarchies[0].clone(), path)))
    }

    /// Creates the planned delegated cgroup; no cgroup when the subtree is not writable.
    pub fn create_rootless(
        h: Hierarchy,
        path: String,
    ) -> Result<Result<Cgroup, NoCgroup>, CgroupError> {
        match create_delegated(&h, &path) {
            Ok(()) => {}
            Err(e) if e.is_permission() => {
                return Ok(Err(NoCgroup(format!(
                    "no delegated cgroup v2 subtree is writable there ({e})"
                ))))
            }
            Err(e) => return Err(e),
        }
        let cg = Cgroup {
            path,
            unified: true,
            hierarchies: vec![h],
            skipped: Vec::new(),
            systemd: None,
            joined: false,
        };
        let pids = cg.pids()?;
        if !pids.is_empty() {
            return Err(CgroupError::NotEmpty {
                path: cg.hierarchies[0].dir(&cg.path),
                count: pids.len(),
            });
        }
        Ok(Ok(cg))
    }
}

/// `linux.cgroupsPath` for a rootless container, below the hierarchy root.
pub fn rootless_path(
    cgroups_path: Option<&str>,
    id: &str,
    own: &str,
) -> Result<String, CgroupError> {
    let p = cgroups_path.filter(|p| !p.is_empty()).unwrap_or(id);
    if p.starts_with('/') {
        return super::resolve_path(Some(p), id);
    }
    let parent = Path::new(own)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    super::resolve_path(Some(&format!("{}/{p}", parent.trim_end_matches('/'))), id)
}

/// Creates `path` like `files::create_in`, but enables controllers only in the levels the
/// caller may write: the ones above the delegation point belong to whoever delegated it.
fn create_delegated(h: &Hierarchy, path: &str) -> Result<(), CgroupError> {
    let mut dir: PathBuf = h.mount.clone();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        if writable(&dir.join("cgroup.subtree_control")) {
            match v2::enable_controllers(&dir) {
                Err(e) if e.is_permission() => {}
                r => r?,
            }
        }
        dir.push(comp);
        match std::fs::DirBuilder::new().create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CgroupError::io("create cgroup", dir, e)),
        }
    }
    // A directory that exists but is not ours (root's /sys/fs/cgroup/<id>, say) is no
    // delegation either.
    let procs = dir.join("cgroup.procs");
    if !writable(&procs) {
        return Err(CgroupError::io(
            "write",
            procs,
            std::io::Error::from_raw_os_error(libc::EACCES),
        ));
    }
    Ok(())
}

fn writable(p: &Path) -> bool {
    nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootless_paths() {
        let own = "/user.slice/user-1000.slice/user@1000.service/app.slice/shell.scope";
        let base = "/user.slice/user-1000.slice/user@1000.service/app.slice";
        assert_eq!(
            rootless_path(None, "c1", own).unwrap(),
            format!("{base}/c1")
        );
        assert_eq!(
            rootless_path(Some("moat/c1"), "c1", own).unwrap(),
            format!("{base}/moat/c1")
        );
        assert_eq!(
            rootless_path(Some("/deleg/c1"), "c1", own).unwrap(),
            "/deleg/c1"
        );
        assert_eq!(rootless_path(None, "c1", "/").unwrap(), "/c1");
        assert!(rootless_path(Some("../x"), "c1", own).is_err());
    }
}
