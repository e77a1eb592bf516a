//! The host-wide pool of ids that `moat.userns=auto` containers are mapped to.
//!
//! One pool for the whole host, whatever `--root` each engine passes: two engines with
//! their own state roots must never hand the same host ids to two containers. So it lives
//! outside every state root, in [`POOL_DIR`] (a tmpfs: containers do not survive a reboot,
//! neither do their allocations):
//!
//! | file      | what                                                                 |
//! |-----------|----------------------------------------------------------------------|
//! | `lock`    | flocked for every allocation and release                             |
//! | `<start>` | one allocation: `{"start", "size", "root", "id"}` (JSON)             |
//!
//! An allocation whose container directory (`<root>/<id>`) is gone is stale (a create or
//! delete killed half-way) and is reclaimed by the next allocation. A range is handed
//! out only while no live process holds an id of it (a survivor of a container whose
//! record is gone must not share ids with the next container, whose init it could then
//! signal and ptrace): the allocation scans `/proc` for every process's uids and gids.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const POOL_DIR: &str = "/run/moat-userns";

/// A range of host ids: `start .. start + size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub start: u32,
    pub size: u32,
}

impl IdRange {
    fn end(&self) -> u64 {
        self.start as u64 + self.size as u64
    }

    fn overlaps(&self, o: &IdRange) -> bool {
        (self.start as u64) < o.end() && (o.start as u64) < self.end()
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Allocation {
    start: u32,
    size: u32,
    root: PathBuf,
    id: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("userns pool {dir}: {what}: {source}")]
    Io {
        dir: PathBuf,
        what: String,
        source: io::Error,
    },
    #[error(
        "userns pool exhausted: no free range of {size} ids left in {start}..{end} \
         ({used} ranges in use; see [userns] pool in the moat configuration)"
    )]
    Exhausted {
        size: u32,
        start: u32,
        end: u64,
        used: usize,
    },
}

/// The state root as the pool records it: absolute, so any caller can tell whether the
/// container still exists.
pub fn pool_root(root: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

/// Gives back whatever range `id` under `root` holds (a missing pool is fine); a failure
/// is a warning, as the range is reclaimed once the container's directory is gone.
pub fn release_or_warn(root: &Path, id: &str) {
    if let Err(e) = Pool::default().release(&pool_root(root), id) {
        crate::log::warn(&format!("release userns range of {id}: {e}"));
    }
}

pub struct Pool {
    dir: PathBuf,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            dir: PathBuf::from(POOL_DIR),
        }
    }
}

impl Pool {
    #[cfg(test)]
    pub fn at(dir: impl Into<PathBuf>) -> Pool {
        Pool { dir: dir.into() }
    }

    fn err(&self, what: impl Into<String>) -> impl FnOnce(io::Error) -> PoolError + '_ {
        let what = what.into();
        move |source| PoolError::Io {
            dir: self.dir.clone(),
            what,
            source,
        }
    }

    fn lock(&self) -> Result<OwnedFd, PoolError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(self.err("create"))?;
        let f: OwnedFd = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(self.dir.join("lock"))
            .map_err(self.err("open lock"))?
            .into();
        crate::linux::sys::flock_exclusive(f.as_fd()).map_err(self.err("lock"))?;
        Ok(f)
    }

    /// Every allocation file, parsed; unreadable entries are skipped (never reused blindly:
    /// a file named by a number still blocks its start id).
    fn entries(&self) -> Result<Vec<(PathBuf, Option<Allocation>)>, PoolError> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir).map_err(self.err("list"))? {
            let e = e.map_err(self.err("list"))?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.parse::<u32>().is_err() {
                continue;
            }
            let a = fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Allocation>(&b).ok());
            out.push((e.path(), a));
        }
        Ok(out)
    }

    /// Takes the first free `size`-aligned range of `pool` for the container `root`/`id`.
    pub fn allocate(
        &self,
        pool: IdRange,
        size: u32,
        root: &Path,
        id: &str,
    ) -> Result<IdRange, PoolError> {
        self.allocate_avoiding(pool, size, root, id, &live_ids())
    }

    /// [`Pool::allocate`], with the ids live processes hold given (sorted).
    fn allocate_avoiding(
        &self,
        pool: IdRange,
        size: u32,
        root: &Path,
        id: &str,
        live: &[u32],
    ) -> Result<IdRange, PoolError> {
        let _lock = self.lock()?;
        let mut used = Vec::new();
        for (path, a) in self.entries()? {
            match a {
                Some(a) if !a.root.join(&a.id).is_dir() => {
                    // The container is gone without releasing its range: reclaim it.
                    let _ = fs::remove_file(&path);
                }
                Some(a) => used.push(IdRange {
                    start: a.start,
                    size: a.size,
                }),
                None => {
                    let start = path
                        .file_name()
                        .and_then(|n| n.to_str())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0);
                    used.push(IdRange { start, size: 1 });
                }
            }
        }
        let mut candidate = pool.start as u64;
        while candidate + size as u64 <= pool.end() {
            let Ok(start) = u32::try_from(candidate) else {
                break; // no id lies above u32::MAX
            };
            let r = IdRange { start, size };
            // An id a live process holds blocks the range it lies in, as one used id.
            let held = live
                .iter()
                .filter(|&&i| r.overlaps(&IdRange { start: i, size: 1 }))
                .map(|&i| i as u64 + 1)
                .max();
            match used
                .iter()
                .filter(|u| u.overlaps(&r))
                .map(|u| u.end())
                .chain(held)
                .max()
            {
                None => {
                    let a = Allocation {
                        start: r.start,
                        size,
                        root: root.to_path_buf(),
                        id: id.to_string(),
                    };
                    let path = self.dir.join(r.start.to_string());
                    let tmp = self.dir.join(format!(".{}.tmp", r.start));
                    fs::write(&tmp, serde_json::to_vec(&a).expect("serialises"))
                        .map_err(self.err(format!("write {}", tmp.display())))?;
                    fs::rename(&tmp, &path)
                        .map_err(self.err(format!("rename into {}", path.display())))?;
                    return Ok(r);
                }
                // Skip past the blocking range, staying aligned to the pool's grid.
                Some(end) => {
                    let off = end.saturating_sub(pool.start as u64);
                    candidate = pool.start as u64 + off.div_ceil(size as u64) * size as u64;
                }
            }
        }
        Err(PoolError::Exhausted {
            size,
            start: pool.start,
            end: pool.end(),
            used: used.len(),
        })
    }

    /// Releases whatever the container `root`/`id` holds; returns the ranges released.
    pub fn release(&self, root: &Path, id: &str) -> Result<Vec<IdRange>, PoolError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        let _lock = self.lock()?;
        let mut out = Vec::new();
        for (path, a) in self.entries()? {
            if let Some(a) = a.filter(|a| a.root == root && a.id == id) {
                fs::remove_file(&path).map_err(self.err(format!("remove {}", path.display())))?;
                out.push(IdRange {
                    start: a.start,
                    size: a.size,
                });
            }
        }
        Ok(out)
    }
}

/// Every uid and gid (real, effective, saved, filesystem) of every live process, as the
/// host sees them, sorted. A process gone between the listing and the read is skipped.
fn live_ids() -> Vec<u32> {
    let mut ids = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return ids;
    };
    for e in dir.flatten() {
        let name = e.file_name();
        if name.to_str().and_then(|n| n.parse::<u32>().ok()).is_none() {
            continue;
        }
        let Ok(status) = crate::linux::read_kernel_file(e.path().join("status")) else {
            continue;
        };
        ids.extend(status_ids(&status));
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The ids on the `Uid:` and `Gid:` lines of a `/proc/<pid>/status`; none for a zombie,
/// which keeps its credentials until reaped (PID 1 here reaps late) but can act on
/// nothing.
fn status_ids(status: &str) -> impl Iterator<Item = u32> + '_ {
    let dead = status.lines().any(|l| {
        l.strip_prefix("State:")
            .is_some_and(|v| matches!(v.trim_start().chars().next(), Some('Z' | 'X')))
    });
    status
        .lines()
        .filter(move |_| !dead)
        .filter_map(|l| l.strip_prefix("Uid:").or_else(|| l.strip_prefix("Gid:")))
        .flat_map(|l| l.split_whitespace().filter_map(|v| v.parse::<u32>().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("moat-idpool-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn disjoint_release_reuse_and_exhaustion() {
        let base = tmp("a");
        let root = base.join("root");
        for id in ["a", "b", "c"] {
            fs::create_dir_all(root.join(id)).unwrap();
        }
        let pool = Pool::at(base.join("pool"));
        let range = IdRange {
            start: 1_000_000,
            size: 2 * 65536,
        };
        let a = pool.allocate(range, 65536, &root, "a").unwrap();
        let b = pool.allocate(range, 65536, &root, "b").unwrap();
        assert!(!a.overlaps(&b));
        assert_eq!((a.start, b.start), (1_000_000, 1_065_536));
        let e = pool.allocate(range, 65536, &root, "c").unwrap_err();
        assert!(e.to_string().contains("exhausted"), "{e}");
        assert_eq!(pool.release(&root, "a").unwrap(), vec![a]);
        assert_eq!(pool.allocate(range, 65536, &root, "c").unwrap(), a);
        // A container whose directory is gone loses its range to the next allocation.
        fs::remove_dir(root.join("b")).unwrap();
        fs::create_dir_all(root.join("d")).unwrap();
        assert_eq!(pool.allocate(range, 65536, &root, "d").unwrap(), b);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_range_a_live_process_holds_is_not_handed_out() {
        let base = tmp("live");
        let root = base.join("root");
        fs::create_dir_all(root.join("next")).unwrap();
        let pool = Pool::at(base.join("pool"));
        let range = IdRange {
            start: 1_000_000,
            size: 3 * 65536,
        };
        // A survivor of a released container holds an id in the first range (its record
        // and allocation gone), one unrelated process an id below the pool.
        let live = [1000, 1_000_000 + 4242];
        let r = pool
            .allocate_avoiding(range, 65536, &root, "next", &live)
            .unwrap();
        assert_eq!(r.start, 1_065_536, "the survivor's range was handed out");
        // Once it is gone, the range is free again.
        pool.release(&root, "next").unwrap();
        let r = pool
            .allocate_avoiding(range, 65536, &root, "next", &[1000])
            .unwrap();
        assert_eq!(r.start, 1_000_000);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn status_ids_reads_every_uid_and_gid() {
        let st =
            "Name:\tsh\nUid:\t1000000\t1000001\t1000002\t1000003\nGid:\t5\t5\t5\t7\nGroups:\t9\n";
        let mut ids: Vec<u32> = status_ids(st).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids, vec![5, 7, 1_000_000, 1_000_001, 1_000_002, 1_000_003]);
        let zombie = format!("State:\tZ (zombie)\n{st}");
        assert_eq!(status_ids(&zombie).count(), 0);
        // This process is live: its own uid is among the live ids.
        assert!(live_ids().contains(&nix::unistd::getuid().as_raw()));
    }

    #[test]
    fn foreign_ranges_are_skipped_on_the_grid() {
        let base = tmp("b");
        let root = base.join("root");
        fs::create_dir_all(root.join("x")).unwrap();
        fs::create_dir_all(root.join("y")).unwrap();
        let pool = Pool::at(base.join("pool"));
        // Another configuration's odd-sized range inside ours.
        pool.allocate(
            IdRange {
                start: 100,
                size: 10,
            },
            10,
            &root,
            "x",
        )
        .unwrap();
        let r = pool
            .allocate(
                IdRange {
                    start: 64,
                    size: 256,
                },
                64,
                &root,
                "y",
            )
            .unwrap();
        assert_eq!(r.start, 128);
        fs::remove_dir_all(&base).unwrap();
    }
}
