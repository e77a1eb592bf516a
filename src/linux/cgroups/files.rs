//! File-level helpers shared by v1 and v2: single writes, reads, creating, listing and
//! removing cgroup directories.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{v1, v2, CgroupError, Hierarchy};

/// Writes one value with one write(2), never creating the file: cgroupfs has no such
/// thing, and in a fake tree a typo must fail as it would for real. O_APPEND changes
/// nothing on cgroupfs (as with a shell's `>>`) but lets a fake tree keep every write.
pub fn write_file(dir: &Path, file: &str, value: &str, field: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    let res = std::fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .and_then(|mut f| io::Write::write_all(&mut f, value.as_bytes()));
    res.map_err(|err| CgroupError::Write {
        field: field.into(),
        value: value.into(),
        path,
        err,
    })
}

pub fn read_file(dir: &Path, file: &str) -> Result<String, CgroupError> {
    let path = dir.join(file);
    crate::linux::read_kernel_file(&path).map_err(|e| CgroupError::io("read", path, e))
}

/// `mkdir -p` of `path` below `h`, preparing each level on the way down: v2 parents get
/// the controllers enabled for their children, v1 cpuset children get cpus/mems. Returns
/// whether this call made the last level (false: it was there).
///
/// A v1 hierarchy without cpuset has nothing to prepare, so its leaf is made first and the
/// walk from the top taken only when a parent is missing: one mkdir where most creates
/// find their parent (`/moat`) made by the containers before.
pub fn create_in(h: &Hierarchy, path: &str) -> Result<bool, CgroupError> {
    if !h.v2 && !h.has("cpuset") {
        let leaf = h.dir(path);
        match std::fs::DirBuilder::new().mode(0o755).create(&leaf) {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(CgroupError::io("create cgroup", leaf, e)),
        }
    }
    let mut made = false;
    let mut dir = h.mount.clone();
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        if h.v2 {
            v2::enable_controllers(&dir)?;
        }
        let parent = dir.clone();
        dir.push(comp);
        made = match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(CgroupError::io("create cgroup", dir, e)),
        };
        if !h.v2 && h.has("cpuset") {
            v1::inherit_cpuset(&parent, &dir)?;
        }
    }
    Ok(made)
}

/// Removes the cgroup `dir` and any it holds, waiting until `deadline` for processes that
/// are still leaving it. The common case, a cgroup without children, is one rmdir; only
/// when that is refused are its children looked for.
pub fn remove_tree(dir: &Path, deadline: Instant) -> Result<(), CgroupError> {
    match std::fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(CgroupError::io("read", dir, e)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path(), deadline)?;
        }
    }
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(CgroupError::io("rmdir", dir, e)),
        }
    }
}

pub fn collect_pids(dir: &Path, out: &mut Vec<i32>) -> Result<(), CgroupError> {
    let procs = match read_file(dir, "cgroup.procs") {
        Err(CgroupError::Io { err, .. }) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        r => r?,
    };
    out.extend(procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    let entries = std::fs::read_dir(dir).map_err(|e| CgroupError::io("read", dir, e))?;
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_pids(&entry.path(), out)?;
        }
    }
    Ok(())
}
