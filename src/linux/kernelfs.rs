//! Binds of kernel interfaces, refused under RESTRICTED.
//!
//! A bind whose source is on a kernel pseudo-filesystem (procfs, sysfs, debugfs, cgroupfs,
//! nsfs, …) hands the container the host's view of the kernel: the host's
//! `/proc/sys/kernel/core_pattern`, other processes' `/proc/<pid>/mem`, the host's
//! cgroups. Any host directory may be a legitimate volume, so no source can be
//! allow-listed by name; what is refused is the filesystem type of the mount moat is about
//! to attach, read from its fd, and for a recursive bind the type of every mount it
//! carries, read from the mount table by the attached tree's mount id.

use std::os::fd::BorrowedFd;

use super::sys;

/// The filesystems that are kernel interfaces: `statfs` magic (`linux/magic.h`) and the
/// type name the kernel prints in mountinfo.
const REFUSED: &[(u64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6e73_6673, "nsfs"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x6573_5543, "fusectl"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
];

/// devtmpfs has no magic of its own: it is a tmpfs (or, without `CONFIG_TMPFS`, a ramfs)
/// superblock, told apart by its device number.
const TMPFS_MAGIC: u64 = 0x0102_1994;
const RAMFS_MAGIC: u64 = 0x8584_58f6;
const DEVTMPFS: &str = "devtmpfs";

/// The character devices of devtmpfs a bind may carry: engines pass `--device` as binds
/// of these in a user namespace (mknod is refused there). (major, minor, name)
const ALLOWED_DEVICES: &[(u32, u32, &str)] = &[
    (1, 3, "null"),
    (1, 5, "zero"),
    (1, 7, "full"),
    (1, 8, "random"),
    (1, 9, "urandom"),
    (5, 0, "tty"),
    (5, 2, "ptmx"),
    (10, 229, "fuse"),
];

/// The type name of a refused filesystem, by its `statfs` magic.
fn by_magic(magic: u64) -> Option<&'static str> {
    REFUSED.iter().find(|(m, _)| *m == magic).map(|(_, n)| *n)
}

/// The type name of a refused filesystem, by the name mountinfo gives it.
fn by_name(fstype: &str) -> Option<&'static str> {
    REFUSED
        .iter()
        .map(|(_, n)| *n)
        .chain(std::iter::once(DEVTMPFS))
        .find(|n| *n == fstype)
}

/// One line of mountinfo: mount id, parent id, the superblock's device, mount point, type.
struct Line<'a> {
    id: u64,
    parent: u64,
    dev: (u32, u32),
    mount_point: &'a str,
    fstype: &'a str,
}

fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    text.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        let (maj, min) = f.get(2)?.split_once(':')?;
        Some(Line {
            id: f.first()?.parse().ok()?,
            parent: f.get(1)?.parse().ok()?,
            dev: (maj.parse().ok()?, min.parse().ok()?),
            mount_point: f.get(4)?,
            fstype: f.get(sep + 1)?,
        })
    })
}

/// Why the mount `tree` (a bind's clone, not yet attached) may not be attached: the type
/// name of the kernel interface it is on, or `None`. `extra`: the character devices
/// (major, minor or any) `[restricted] allowed_devices` adds to the nodes a bind may be. `mountinfo` is read only for a tmpfs
/// or ramfs, to tell devtmpfs by its device number.
pub fn refused_root(
    tree: BorrowedFd<'_>,
    extra: &[(u32, Option<u32>)],
    mountinfo: impl FnOnce() -> std::io::Result<String>,
) -> std::io::Result<Option<&'static str>> {
    let fs = sys::fstatfs(tree)?;
    // f_type is i64 under glibc, unsigned under musl.
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.f_type as u64;
    if let Some(name) = by_magic(magic) {
        return Ok(Some(name));
    }
    if magic != TMPFS_MAGIC && magic != RAMFS_MAGIC {
        return Ok(None);
    }
    let st = sys::fstat(tree)?;
    let dev = (libc::major(st.st_dev), libc::minor(st.st_dev));
    let text = mountinfo()?;
    if !lines(&text).any(|l| l.fstype == DEVTMPFS && l.dev == dev) {
        return Ok(None);
    }
    let node = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
    let allowed = st.st_mode & libc::S_IFMT == libc::S_IFCHR
        && (ALLOWED_DEVICES.iter().any(|(a, b, _)| (*a, *b) == node)
            || extra
                .iter()
                .any(|(a, b)| *a == node.0 && b.is_none_or(|b| b == node.1)));
    Ok((!allowed).then_some(DEVTMPFS))
}

/// The first mount below the mount `root_id` (a recursive bind, attached) that is a
/// kernel interface: its type name and its path relative to the bind's mount point.
pub fn refused_submount(root_id: u64, mountinfo: &str) -> Option<(&'static str, String)> {
    let all: Vec<Line<'_>> = lines(mountinfo).collect();
    let top = all.iter().find(|l| l.id == root_id)?.mount_point;
    let below = |mut id: u64| {
        // Up the parent chain to the bind's mount, or out of it.
        for _ in 0..=all.len() {
            let Some(l) = all.iter().find(|l| l.id == id) else {
                return false;
            };
            if l.parent == root_id {
                return true;
            }
            if l.parent == id {
                return false;
            }
            id = l.parent;
        }
        false
    };
    all.iter()
        .filter(|l| l.id != root_id && below(l.id))
        .find_map(|l| {
            let name = by_name(l.fstype)?;
            let rel = l.mount_point.strip_prefix(top).unwrap_or(l.mount_point);
            Some((name, rel.trim_start_matches('/').to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 254:0 / / rw - ext4 /dev/vda rw
30 22 0:6 / /dev rw - devtmpfs devtmpfs rw
31 22 0:21 / /proc rw - proc proc rw
40 22 254:0 /srv /c/vol rw - ext4 /dev/vda rw
43 22 0:50 / /c/other rw - sysfs sysfs rw
41 40 0:40 / /c/vol/t rw - tmpfs tmpfs rw
42 41 0:21 / /c/vol/t/p rw - proc proc rw
";

    #[test]
    fn names_by_magic_and_by_mountinfo_type() {
        assert_eq!(by_magic(0x9fa0), Some("proc"));
        assert_eq!(by_magic(0x6367_7270), Some("cgroup2"));
        assert_eq!(by_magic(TMPFS_MAGIC), None);
        assert_eq!(by_name("devtmpfs"), Some("devtmpfs"));
        assert_eq!(by_name("bpf"), Some("bpf"));
        assert_eq!(by_name("tmpfs"), None);
        assert_eq!(by_name("fuse.sshfs"), None);
    }

    #[test]
    fn a_submount_at_any_depth_is_found_relative_to_the_bind() {
        assert_eq!(
            refused_submount(40, INFO),
            Some(("proc", "t/p".to_string()))
        );
        // Not below the bind: another mount's sysfs is none of its business.
        assert_eq!(refused_submount(41, INFO), Some(("proc", "p".to_string())));
        assert_eq!(refused_submount(42, INFO), None);
        assert_eq!(refused_submount(99, INFO), None);
    }

    #[test]
    fn mountinfo_lines_carry_the_device() {
        let l: Vec<_> = lines(INFO).collect();
        assert_eq!(l[1].dev, (0, 6));
        assert_eq!(l[1].fstype, "devtmpfs");
        assert_eq!(l[3].mount_point, "/c/vol");
        assert_eq!(l[4].fstype, "sysfs");
    }
}
