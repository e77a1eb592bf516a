//! What moat asks its CRIU helper, `moat-criu` (src/bin/moat-criu.rs), and what it answers:
//! one JSON [`Request`] on the helper's stdin, one JSON [`Reply`] on its stdout. Shared by
//! both binaries (the helper includes this file), so the two cannot disagree.

use serde::{Deserialize, Serialize};

/// One conversation with `criu swrk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// CRIU's version (the `VERSION` request): answers [`Answer::Version`].
    Version {
        /// The `criu` to run: `--criu`, else `criu` looked up on `PATH` (as runc).
        criu: String,
    },
    /// `DUMP` of the process tree at `pid`: answers [`Answer::Dumped`].
    Dump(Dump),
    /// `RESTORE` of an image: answers [`Answer::Restored`].
    Restore(Restore),
}

/// What `RESTORE` is given. moat-criu makes `root` a mount point in a mount namespace of
/// its own (a bind onto itself), as CRIU wants the root it restores into.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restore {
    pub criu: String,
    pub images_dir: std::path::PathBuf,
    pub work_dir: Option<std::path::PathBuf>,
    pub root: std::path::PathBuf,
    /// `ext_mnt`: the dump's external mount names (key) and the host paths bound there.
    pub ext_mnt: Vec<(String, String)>,
    /// The container has a cgroup namespace of its own: the helper, already in the
    /// container's cgroups, unshares one before starting CRIU, so the restored tree is born
    /// in a namespace rooted at its cgroup (CRIU, told to ignore cgroups, makes none).
    pub cgroupns: bool,
    /// What the restored tree must be, from moat's plan for the bundle: checked by the
    /// helper while CRIU still holds the tree stopped (its `pre-resume` notification).
    pub expect: Expect,
    /// `inherit_fd`: the restored files CRIU names by `key` (the container's stdio as the
    /// dump recorded it) are given the helper's descriptor `fd` (inherited from moat).
    pub inherit_fd: Vec<(i32, String)>,
    /// A container with a terminal: the helper's descriptor (inherited from moat) of the
    /// connected `--console-socket`, which gets the master of the pty CRIU makes for the
    /// restored tree (`orphan_pts_master`), as runc sends it.
    pub console_fd: Option<i32>,
    /// The spec's binds (mount point, host source) in the spec's order, but those under
    /// one of its tmpfs mounts (CRIU restores a tmpfs's content): their mount points are
    /// made before CRIU runs, as runc makes them (`prepare_binds` in the helper).
    pub binds: Vec<(String, String)>,
}

/// What moat's plan says the restored tree is. A process may lose capabilities, gain
/// seccomp filters or set no_new_privs on its own after moat started it, never the
/// reverse: so the sets are upper bounds, the filter count and NNP lower bounds; the
/// init's namespaces and every restored process's cgroups are exact.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expect {
    /// The init's namespaces, by their `/proc/<pid>/ns/` name.
    pub namespaces: Vec<NsExpect>,
    /// Upper bounds of `CapBnd`, `CapEff`, `CapPrm`, `CapInh`, `CapAmb`.
    pub cap_bounding: u64,
    pub cap_effective: u64,
    pub cap_permitted: u64,
    pub cap_inheritable: u64,
    pub cap_ambient: u64,
    /// The spec's `noNewPrivileges`: then `NoNewPrivs` must be 1.
    pub no_new_privs: bool,
    /// The number of seccomp filters moat loads: with one or more, `Seccomp` must be 2
    /// (filter) and `Seccomp_filters` at least this.
    pub seccomp_filters: u32,
    /// The container's cgroup directory in each hierarchy (host paths): every restored
    /// process must be listed in each one's `cgroup.procs`.
    pub cgroup_dirs: Vec<std::path::PathBuf>,
    /// The init's mount table as the checkpoint found it ([`mount_table`], recorded under
    /// moat's root, never read from the image): the restored init's must be the same.
    pub mounts: Vec<MountEntry>,
    /// The mount points whose source moat gives the restore (the rootfs, the spec's binds,
    /// the cgroup views): their source is compared by what moat gave, not by device.
    pub given: Vec<String>,
}

/// One mount of a container's mount table: where it is, what it is and how it may be
/// used. A restore must give back exactly the table its checkpoint recorded: CRIU mounts
/// what the image lists, as root on the host, so an image that lists a host disk, a
/// `/proc` without moat's masks or a writable read-only path is refused before the tree
/// runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct MountEntry {
    /// The mount point, as the container sees it (mountinfo's escapes kept).
    pub point: String,
    /// How many mounts on the same point lie below this one.
    pub layer: u32,
    pub fstype: String,
    /// Which of `ro`, `nosuid`, `nodev`, `noexec` the mount has.
    pub flags: Vec<String>,
    /// The directory of its filesystem mounted there (mountinfo's root) and its device
    /// where it has one (major not 0: an anonymous device is renumbered by a restore); both
    /// `None` for a point whose source moat gives.
    pub root: Option<String>,
    pub dev: Option<String>,
}

/// The mount table of a `/proc/<pid>/mountinfo` text, sorted; `given`: the points whose
/// source moat gives ([`Expect::given`]).
pub fn mount_table(mountinfo: &str, given: &[String]) -> Vec<MountEntry> {
    struct Line<'a> {
        id: &'a str,
        parent: &'a str,
        dev: &'a str,
        root: &'a str,
        point: &'a str,
        opts: &'a str,
        fstype: &'a str,
    }
    let lines: Vec<Line<'_>> = mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (sep >= 6 && f.len() > sep + 1).then(|| Line {
                id: f[0],
                parent: f[1],
                dev: f[2],
                root: f[3],
                point: f[4],
                opts: f[5],
                fstype: f[sep + 1],
            })
        })
        .collect();
    let by_id: std::collections::HashMap<&str, &Line<'_>> =
        lines.iter().map(|l| (l.id, l)).collect();
    let mut out: Vec<MountEntry> = lines
        .iter()
        .map(|l| {
            let mut layer = 0;
            let mut p = by_id.get(l.parent);
            let mut steps = 0;
            while let Some(up) = p {
                if up.point != l.point || steps > lines.len() {
                    break;
                }
                layer += 1;
                steps += 1;
                p = by_id.get(up.parent);
            }
            let mine = !given.iter().any(|g| g == l.point);
            let flags = l
                .opts
                .split(',')
                .filter(|o| matches!(*o, "ro" | "nosuid" | "nodev" | "noexec"))
                .map(String::from)
                .collect();
            MountEntry {
                point: l.point.to_string(),
                layer,
                fstype: l.fstype.to_string(),
                flags,
                root: mine.then(|| l.root.to_string()),
                dev: (mine && !l.dev.starts_with("0:")).then(|| l.dev.to_string()),
            }
        })
        .collect();
    out.sort();
    out
}

/// One namespace of the restored init (`/proc/<pid>/ns/<name>`, by its `readlink`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsExpect {
    /// `pid`, `net`, `mnt`, `ipc`, `uts`, `user`, `cgroup`, `time`.
    pub name: String,
    pub rule: NsRule,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NsRule {
    /// The spec asks for a new one: anything but the host's (moat's own, this link).
    Own { host: String },
    /// The spec does not list it: the host's (moat's own, this link).
    Host { host: String },
    /// The spec joins one by path: that one (the link of the namespace file moat opened).
    Joined { link: String, path: String },
}

/// What `DUMP` is given (CRIU's RPC options of the same names).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dump {
    pub criu: String,
    /// The container's init (host pid).
    pub pid: i32,
    pub images_dir: std::path::PathBuf,
    pub work_dir: Option<std::path::PathBuf>,
    /// The container's rootfs on the host (`root`).
    pub root: std::path::PathBuf,
    pub leave_running: bool,
    /// `ext_mnt`: mount points inside the container (key) dumped as external, by the name
    /// a restore maps back to a host path (value).
    pub ext_mnt: Vec<(String, String)>,
    /// `external`: the namespaces the spec joins by path, left out of the image as
    /// `NAME[INODE]:KEY` (CRIU's `--external` form; `KEY` from `criu::external_ns_key`), so a
    /// restore puts the tree back into the namespace it is given under that key.
    pub external: Vec<String>,
    /// The container has a terminal whose master is outside the tree (the engine's):
    /// dumped as an orphan pty (`orphan_pts_master`, as runc dumps).
    pub terminal: bool,
}

/// What a [`Request`] got done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// `major.minor.sublevel` (a git build's id after a `-`).
    Version(String),
    Dumped,
    /// The restored init's host pid.
    Restored(i32),
}

/// The answer, or the error: one line.
pub type Reply = Result<Answer, String>;

#[cfg(test)]
mod tests {
    use super::*;

    // Two mounts on /proc/kcore (procfs's file under moat's /dev/null bind), a bind of the
    // spec at /data, and a tmpfs.
    const INFO: &str = "\
20 1 8:1 /var/lib/b/rootfs / rw,relatime - ext4 /dev/sda1 rw
21 20 0:22 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
22 21 0:5 /null /proc/kcore ro,nosuid - devtmpfs udev rw
23 20 8:1 /srv/data /data ro,relatime - ext4 /dev/sda1 rw
24 20 0:40 / /tmp rw,nosuid - tmpfs tmpfs rw
25 22 0:41 / /proc/kcore ro - tmpfs tmpfs rw
";

    #[test]
    fn the_table_keeps_what_a_restore_must_give_back() {
        let given = ["/".to_string(), "/data".to_string()];
        let t = mount_table(INFO, &given);
        assert_eq!(t.len(), 6);
        let at = |p: &str| -> Vec<&MountEntry> { t.iter().filter(|e| e.point == p).collect() };
        // The rootfs and the spec's bind: moat gives their sources.
        assert_eq!(
            (at("/")[0].root.as_deref(), at("/")[0].dev.as_deref()),
            (None, None)
        );
        assert_eq!(at("/data")[0].flags, ["ro"]);
        // Anonymous devices are renumbered by a restore; roots are kept.
        let kcore = at("/proc/kcore");
        assert_eq!(kcore.len(), 2);
        assert_eq!((kcore[0].layer, kcore[0].fstype.as_str()), (0, "devtmpfs"));
        assert_eq!((kcore[1].layer, kcore[1].fstype.as_str()), (1, "tmpfs"));
        assert_eq!(kcore[0].root.as_deref(), Some("/null"));
        assert_eq!(kcore[0].dev, None);
        assert_eq!(at("/proc")[0].flags, ["nosuid", "nodev", "noexec"]);
        // Not given: a disk's device and root are kept.
        let t2 = mount_table(INFO, &[]);
        let data = t2.iter().find(|e| e.point == "/data").unwrap();
        assert_eq!(
            (data.root.as_deref(), data.dev.as_deref()),
            (Some("/srv/data"), Some("8:1"))
        );
    }
}
