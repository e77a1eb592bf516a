//! Mount options as the OCI spec writes them, and the fd-based mount primitives.
//!
//! Mounts are built detached (`fsopen`/`fsmount` for filesystems, `open_tree` for binds),
//! given their attributes with `mount_setattr` while nobody can see them, and attached with
//! `move_mount` onto an fd the target was resolved to. No step re-resolves a path string.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::sys::{self, MountAttr};

/// Parsed `mounts[].options`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub bind: bool,
    pub recursive: bool,
    /// Attributes of the top mount.
    pub set: u64,
    pub clr: u64,
    /// Attributes applied to the whole tree (`rro`, `rnosuid`, …).
    pub rec_set: u64,
    pub rec_clr: u64,
    /// `MS_SHARED`/`MS_SLAVE`/`MS_PRIVATE`/`MS_UNBINDABLE` and whether recursive.
    pub propagation: Option<(libc::c_ulong, bool)>,
    /// Filesystem parameters passed to `fsconfig` (`mode=755` → ("mode", Some("755"))).
    pub data: Vec<(String, Option<String>)>,
    pub idmap: bool,
    /// Some flag option of the top mount was given (set or clear: `ro`, `dev`, `atime`, …).
    pub flags_given: bool,
    /// `noatime`, `relatime`, `strictatime` or `nodiratime` was given: the options that
    /// change the atime flags of a bind remount (mount(2) keeps them otherwise).
    pub atime_given: bool,
    /// `tmpcopyup`: a tmpfs starts with a copy of the directory it covers (`linux::copyup`);
    /// never passed to the kernel.
    pub copyup: bool,
}

const ATIME: u64 = sys::MOUNT_ATTR__ATIME;

/// Parses mount options; unknown `key=value` or bare words are filesystem data.
pub fn parse_options(opts: &[String]) -> Options {
    let mut o = Options::default();
    for opt in opts {
        let (set, clr, rec): (u64, u64, bool) = match opt.as_str() {
            "bind" => {
                o.bind = true;
                continue;
            }
            "rbind" => {
                o.bind = true;
                o.recursive = true;
                continue;
            }
            "ro" => (sys::MOUNT_ATTR_RDONLY, 0, false),
            "rw" => (0, sys::MOUNT_ATTR_RDONLY, false),
            "nosuid" => (sys::MOUNT_ATTR_NOSUID, 0, false),
            "suid" => (0, sys::MOUNT_ATTR_NOSUID, false),
            "nodev" => (sys::MOUNT_ATTR_NODEV, 0, false),
            "dev" => (0, sys::MOUNT_ATTR_NODEV, false),
            "noexec" => (sys::MOUNT_ATTR_NOEXEC, 0, false),
            "exec" => (0, sys::MOUNT_ATTR_NOEXEC, false),
            "noatime" => (sys::MOUNT_ATTR_NOATIME, ATIME, false),
            "relatime" => (sys::MOUNT_ATTR_RELATIME, ATIME, false),
            "strictatime" => (sys::MOUNT_ATTR_STRICTATIME, ATIME, false),
            "atime" | "norelatime" | "nostrictatime" => {
                o.flags_given = true;
                continue;
            }
            "nodiratime" => (sys::MOUNT_ATTR_NODIRATIME, 0, false),
            "diratime" => (0, sys::MOUNT_ATTR_NODIRATIME, false),
            "nosymfollow" => (sys::MOUNT_ATTR_NOSYMFOLLOW, 0, false),
            "symfollow" => (0, sys::MOUNT_ATTR_NOSYMFOLLOW, false),
            "rro" => (sys::MOUNT_ATTR_RDONLY, 0, true),
            "rrw" => (0, sys::MOUNT_ATTR_RDONLY, true),
            "rnosuid" => (sys::MOUNT_ATTR_NOSUID, 0, true),
            "rsuid" => (0, sys::MOUNT_ATTR_NOSUID, true),
            "rnodev" => (sys::MOUNT_ATTR_NODEV, 0, true),
            "rdev" => (0, sys::MOUNT_ATTR_NODEV, true),
            "rnoexec" => (sys::MOUNT_ATTR_NOEXEC, 0, true),
            "rexec" => (0, sys::MOUNT_ATTR_NOEXEC, true),
            "rnoatime" => (sys::MOUNT_ATTR_NOATIME, ATIME, true),
            "rrelatime" => (sys::MOUNT_ATTR_RELATIME, ATIME, true),
            "rstrictatime" => (sys::MOUNT_ATTR_STRICTATIME, ATIME, true),
            "ratime" | "rnorelatime" | "rnostrictatime" => continue,
            "rnodiratime" => (sys::MOUNT_ATTR_NODIRATIME, 0, true),
            "rdiratime" => (0, sys::MOUNT_ATTR_NODIRATIME, true),
            "rnosymfollow" => (sys::MOUNT_ATTR_NOSYMFOLLOW, 0, true),
            "rsymfollow" => (0, sys::MOUNT_ATTR_NOSYMFOLLOW, true),
            "private" => prop(&mut o, libc::MS_PRIVATE, false),
            "rprivate" => prop(&mut o, libc::MS_PRIVATE, true),
            "shared" => prop(&mut o, libc::MS_SHARED, false),
            "rshared" => prop(&mut o, libc::MS_SHARED, true),
            "slave" => prop(&mut o, libc::MS_SLAVE, false),
            "rslave" => prop(&mut o, libc::MS_SLAVE, true),
            "unbindable" => prop(&mut o, libc::MS_UNBINDABLE, false),
            "runbindable" => prop(&mut o, libc::MS_UNBINDABLE, true),
            "idmap" | "ridmap" => {
                o.idmap = true;
                continue;
            }
            // Remount requests and runc's own extensions carry no meaning for a fresh mount.
            "tmpcopyup" => {
                o.copyup = true;
                continue;
            }
            "remount" | "defaults" | "async" | "nomand" => continue,
            s if s.starts_with("X-mount.") || s.starts_with("x-") => continue,
            s => {
                let (k, v) = match s.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (s.to_string(), None),
                };
                o.data.push((k, v));
                continue;
            }
        };
        // Propagation options (`prop`) are no flags.
        if !rec && (set | clr) != 0 {
            o.flags_given = true;
            o.atime_given |= matches!(
                opt.as_str(),
                "noatime" | "relatime" | "strictatime" | "nodiratime"
            );
        }
        if rec {
            o.rec_set = (o.rec_set & !clr) | set;
            o.rec_clr = (o.rec_clr & !set) | clr;
        } else {
            o.set = (o.set & !clr) | set;
            o.clr = (o.clr & !set) | clr;
        }
    }
    o
}

fn prop(o: &mut Options, flag: libc::c_ulong, rec: bool) -> (u64, u64, bool) {
    o.propagation = Some((flag, rec));
    (0, 0, false)
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// procfs contexts made in the container's pid namespace by a process that could make
/// them there (`create::child::proc_contexts`), for a process that is not in it: while set
/// (`Some`), [`new_fs`] of `proc` takes one of these, and fails with EAGAIN when none is
/// left, rather than make a procfs of its caller's (the host's) pid namespace.
static PROC_CONTEXTS: std::sync::Mutex<Option<Vec<OwnedFd>>> = std::sync::Mutex::new(None);

/// Starts (`Some`) or ends (`None`, dropping what is left) [`PROC_CONTEXTS`].
pub fn set_proc_contexts(contexts: Option<Vec<OwnedFd>>) {
    *PROC_CONTEXTS.lock().unwrap_or_else(|e| e.into_inner()) = contexts;
}

/// `fsopen(fstype)`, or for `proc` a stashed context of the right pid namespace.
fn fs_context(fstype: &str) -> io::Result<OwnedFd> {
    if fstype == "proc" {
        if let Some(stash) = PROC_CONTEXTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            return stash
                .pop()
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EAGAIN));
        }
    }
    sys::fsopen(&cstring(fstype)?)
}

/// A new, detached filesystem mount.
pub fn new_fs(
    fstype: &str,
    source: Option<&str>,
    data: &[(String, Option<String>)],
) -> io::Result<OwnedFd> {
    let fs = fs_context(fstype)?;
    if let Some(src) = source {
        sys::fsconfig(
            fs.as_fd(),
            sys::FSCONFIG_SET_STRING,
            Some(c"source"),
            Some(&cstring(src)?),
        )?;
    }
    for (k, v) in data {
        let key = cstring(k)?;
        match v {
            Some(v) => sys::fsconfig(
                fs.as_fd(),
                sys::FSCONFIG_SET_STRING,
                Some(&key),
                Some(&cstring(v)?),
            )?,
            None => sys::fsconfig(fs.as_fd(), sys::FSCONFIG_SET_FLAG, Some(&key), None)?,
        }
    }
    sys::fsconfig(fs.as_fd(), sys::FSCONFIG_CMD_CREATE, None, None)?;
    sys::fsmount(fs.as_fd(), 0)
}

/// A detached copy of the mount (tree) at `source`.
pub fn clone_tree(dir: BorrowedFd<'_>, source: &str, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = sys::OPEN_TREE_CLONE;
    if recursive {
        flags |= libc::AT_RECURSIVE as u32;
    }
    if source.is_empty() {
        flags |= libc::AT_EMPTY_PATH as u32;
    }
    sys::open_tree(dir, &cstring(source)?, flags)
}

/// Applies the parsed attributes to a (detached or attached) mount.
pub fn set_attrs(mnt: BorrowedFd<'_>, o: &Options) -> io::Result<()> {
    if o.rec_set != 0 || o.rec_clr != 0 {
        setattr(mnt, true, o.rec_set, o.rec_clr)?;
    }
    if o.set != 0 || o.clr != 0 {
        setattr(mnt, false, o.set, o.clr)?;
    }
    Ok(())
}

pub fn setattr(mnt: BorrowedFd<'_>, recursive: bool, set: u64, clr: u64) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        ..Default::default()
    };
    sys::mount_setattr(mnt, recursive, &attr)
}

pub fn set_propagation(
    mnt: BorrowedFd<'_>,
    flag: libc::c_ulong,
    recursive: bool,
) -> io::Result<()> {
    let attr = MountAttr {
        propagation: flag,
        ..Default::default()
    };
    sys::mount_setattr(mnt, recursive, &attr)
}

pub fn attach(mnt: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    sys::move_mount_fd(mnt, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Options {
        parse_options(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    /// `tmpcopyup` is moat's to act on: never a filesystem parameter for the kernel.
    #[test]
    fn tmpcopyup_is_no_filesystem_data() {
        let o = p(&["tmpcopyup", "size=1m"]);
        assert!(o.copyup);
        assert_eq!(o.data, vec![("size".into(), Some("1m".into()))]);
        assert!(!p(&["size=1m"]).copyup);
    }

    #[test]
    fn flags_and_data() {
        let o = p(&[
            "nosuid",
            "strictatime",
            "mode=755",
            "size=65536k",
            "newinstance",
        ]);
        assert_eq!(o.set, sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_STRICTATIME);
        assert_eq!(o.clr, ATIME);
        assert_eq!(
            o.data,
            vec![
                ("mode".into(), Some("755".into())),
                ("size".into(), Some("65536k".into())),
                ("newinstance".into(), None)
            ]
        );
    }

    #[test]
    fn which_options_count_as_flags_of_a_bind() {
        for (opts, flags, atime) in [
            (&["rbind", "rprivate"][..], false, false),
            (&["bind", "rro", "rnosuid", "shared"][..], false, false),
            (&["bind", "mode=755", "idmap"][..], false, false),
            (&["bind", "dev"][..], true, false),
            (&["bind", "atime"][..], true, false),
            (&["bind", "diratime"][..], true, false),
            (&["bind", "ro", "nodiratime"][..], true, true),
            (&["bind", "relatime"][..], true, true),
        ] {
            let o = p(opts);
            assert_eq!((o.flags_given, o.atime_given), (flags, atime), "{opts:?}");
        }
    }

    #[test]
    fn later_option_wins_and_recursive_is_separate() {
        let o = p(&["rbind", "ro", "rw", "rro", "rprivate"]);
        assert!(o.bind && o.recursive);
        assert_eq!(o.set, 0);
        assert_eq!(o.clr, sys::MOUNT_ATTR_RDONLY);
        assert_eq!(o.rec_set, sys::MOUNT_ATTR_RDONLY);
        assert_eq!(o.propagation, Some((libc::MS_PRIVATE, true)));
    }
}
