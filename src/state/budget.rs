//! The host-wide ledger of `[fleet] rootfs_budget`: the bytes the bounded (ephemeral)
//! roots of all live containers may take together.
//!
//! A bounded root's writes go to a tmpfs in host RAM, capped at its `rootfs_size` of data
//! and `rootfs_inodes` KiB of inode space (files and their xattrs, which tmpfs stores
//! outside `size`); each share is that whole cap, a promise of that much memory. One ledger for the whole host, whatever `--root`
//! each engine passes, like the userns pool (`idpool.rs`), outside every state root in
//! [`LEDGER_DIR`] (a tmpfs: neither the containers nor their shares survive a reboot):
//!
//! | file  | what                                                    |
//! |-------|---------------------------------------------------------|
//! | `lock`| flocked for every take and release                      |
//! | `<n>` | one container's share: `{"bytes", "root", "id"}` (JSON) |
//!
//! A share counts while its container's init lives, or has not been recorded yet (a
//! create under way, or one killed half-way, until `delete --force`): a stopped
//! container's tmpfs went with its mount namespace. A share whose container directory
//! (`<root>/<id>`) is gone is stale (a delete killed half-way) and is reclaimed by the
//! next take.

use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const LEDGER_DIR: &str = "/run/moat-rootfs";

/// One container's share of the budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    pub bytes: u64,
    pub root: PathBuf,
    pub id: String,
}

/// What the container's state directory records of its share (`state::BUDGET_FILE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taken {
    pub bytes: u64,
    pub budget: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    #[error("rootfs budget ledger {dir}: {what}: {source}")]
    Io {
        dir: PathBuf,
        what: String,
        source: io::Error,
    },
    #[error(
        "[fleet] rootfs_budget {} exceeded: {} in use by {live} bounded root(s), {} asked; \
         delete containers, lower moat.rootfs.size or [restricted] rootfs_size or \
         rootfs_inodes, or raise the budget",
        human(*.budget), human(*.in_use), human(*.asked)
    )]
    Exceeded {
        budget: u64,
        in_use: u64,
        live: usize,
        asked: u64,
    },
}

/// `N` bytes as the config writes sizes: `512m` when exact, else bytes.
pub fn human(n: u64) -> String {
    for (unit, shift) in [("t", 40), ("g", 30), ("m", 20), ("k", 10)] {
        if n != 0 && n.is_multiple_of(1u64 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// Gives back whatever share `id` under `root` holds (a missing ledger is fine); a
/// failure is a warning, as the share is reclaimed once the container's directory is
/// gone.
pub fn release_or_warn(root: &Path, id: &str) {
    if let Err(e) = Ledger::default().release(&super::idpool::pool_root(root), id) {
        crate::log::warn(&format!("release the rootfs budget share of {id}: {e}"));
    }
}

pub struct Ledger {
    dir: PathBuf,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            dir: PathBuf::from(LEDGER_DIR),
        }
    }
}

/// Whether the container `root`/`id` still holds its bounded root: its init lives, or
/// its state does not name one yet (create under way or interrupted).
fn live(root: &Path, id: &str) -> bool {
    let state = match fs::read(root.join(id).join(super::STATE_FILE)) {
        Ok(b) => b,
        Err(_) => return true,
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&state) else {
        return true;
    };
    let (pid, start) = (v["pid"].as_i64().unwrap_or(0), v["pid_start"].as_u64());
    if pid <= 0 {
        return true;
    }
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    matches!(super::process_start_time(pid),
        Some((s, t)) if Some(t) == start && s != 'Z' && s != 'X')
}

impl Ledger {
    #[cfg(test)]
    pub fn at(dir: impl Into<PathBuf>) -> Ledger {
        Ledger { dir: dir.into() }
    }

    fn err(&self, what: impl Into<String>) -> impl FnOnce(io::Error) -> BudgetError + '_ {
        let what = what.into();
        move |source| BudgetError::Io {
            dir: self.dir.clone(),
            what,
            source,
        }
    }

    fn lock(&self) -> Result<OwnedFd, BudgetError> {
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

    /// Every share file: its number and, when it parses, the share.
    fn entries(&self) -> Result<Vec<(u64, PathBuf, Option<Share>)>, BudgetError> {
        let mut out = Vec::new();
        for e in fs::read_dir(&self.dir).map_err(self.err("list"))? {
            let e = e.map_err(self.err("list"))?;
            let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            let s = fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Share>(&b).ok());
            out.push((n, e.path(), s));
        }
        Ok(out)
    }

    /// Every share on record, without the lock (for `verify` and the tests' auditor).
    pub fn shares(&self) -> Vec<Share> {
        self.entries()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(_, _, s)| s)
            .collect()
    }

    /// Takes `bytes` of `budget` for the container `root`/`id`, or says how much is in use.
    pub fn take(&self, budget: u64, bytes: u64, root: &Path, id: &str) -> Result<(), BudgetError> {
        let _lock = self.lock()?;
        let (mut in_use, mut live_n, mut numbers) = (0u64, 0usize, Vec::new());
        for (n, path, s) in self.entries()? {
            match s {
                Some(s) if !s.root.join(&s.id).is_dir() => {
                    // The container is gone without giving its share back: reclaim it.
                    let _ = fs::remove_file(&path);
                    continue;
                }
                Some(s) if live(&s.root, &s.id) => {
                    in_use = in_use.saturating_add(s.bytes);
                    live_n += 1;
                }
                // A stopped container (its tmpfs is gone; delete removes the file), or
                // an unreadable file (never reused: its number stays taken).
                _ => {}
            }
            numbers.push(n);
        }
        if in_use.saturating_add(bytes) > budget {
            return Err(BudgetError::Exceeded {
                budget,
                in_use,
                live: live_n,
                asked: bytes,
            });
        }
        numbers.sort_unstable();
        let n = (0..)
            .find(|n| numbers.binary_search(n).is_err())
            .unwrap_or(0);
        let share = Share {
            bytes,
            root: root.to_path_buf(),
            id: id.to_string(),
        };
        let path = self.dir.join(n.to_string());
        let tmp = self.dir.join(format!(".{n}.tmp"));
        fs::write(&tmp, serde_json::to_vec(&share).expect("serialises"))
            .map_err(self.err(format!("write {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(self.err(format!("rename into {}", path.display())))
    }

    /// Releases whatever the container `root`/`id` holds; returns the bytes released.
    pub fn release(&self, root: &Path, id: &str) -> Result<u64, BudgetError> {
        if !self.dir.exists() {
            return Ok(0);
        }
        let _lock = self.lock()?;
        let mut out = 0;
        for (_, path, s) in self.entries()? {
            if let Some(s) = s.filter(|s| s.root == root && s.id == id) {
                fs::remove_file(&path).map_err(self.err(format!("remove {}", path.display())))?;
                out += s.bytes;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("moat-budget-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn take_refuse_release_and_reclaim() {
        let base = tmp("a");
        let root = base.join("root");
        for id in ["a", "b", "c", "d"] {
            fs::create_dir_all(root.join(id)).unwrap();
        }
        let l = Ledger::at(base.join("ledger"));
        let budget = 1 << 30;
        l.take(budget, 512 << 20, &root, "a").unwrap();
        l.take(budget, 512 << 20, &root, "b").unwrap();
        let e = l.take(budget, 1 << 20, &root, "c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "[fleet] rootfs_budget 1g exceeded: 1g in use by 2 bounded root(s), 1m asked; \
             delete containers, lower moat.rootfs.size or [restricted] rootfs_size or \
             rootfs_inodes, or raise the budget"
        );
        assert_eq!(l.release(&root, "a").unwrap(), 512 << 20);
        assert_eq!(l.release(&root, "a").unwrap(), 0);
        l.take(budget, 256 << 20, &root, "c").unwrap();
        // A container whose directory is gone loses its share to the next take.
        fs::remove_dir_all(root.join("b")).unwrap();
        l.take(budget, 768 << 20, &root, "d").unwrap();
        let mut held: Vec<_> = l.shares().into_iter().map(|s| (s.id, s.bytes)).collect();
        held.sort();
        assert_eq!(held, [("c".into(), 256 << 20), ("d".into(), 768 << 20)]);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_stopped_container_holds_nothing() {
        let base = tmp("b");
        let root = base.join("root");
        fs::create_dir_all(root.join("gone")).unwrap();
        fs::create_dir_all(root.join("x")).unwrap();
        // An init that is not alive (pid 0x7fff_fff0 exists on no host).
        fs::write(
            root.join("gone").join(crate::state::STATE_FILE),
            br#"{"pid": 2147483632, "pid_start": 1}"#,
        )
        .unwrap();
        let l = Ledger::at(base.join("ledger"));
        l.take(100, 100, &root, "gone").unwrap();
        l.take(100, 100, &root, "x").unwrap();
        // "x" has no state file yet: a create under way, it counts.
        assert!(l.take(100, 1, &root, "y").is_err());
        assert_eq!(l.shares().len(), 2);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn take_waits_for_the_ledgers_lock() {
        let base = tmp("c");
        let root = base.join("root");
        fs::create_dir_all(root.join("a")).unwrap();
        let dir = base.join("ledger");
        let held = Ledger::at(&dir).lock().unwrap();
        let (d, r) = (dir.clone(), root.clone());
        let t = std::thread::spawn(move || Ledger::at(d).take(100, 10, &r, "a"));
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!t.is_finished(), "take did not wait for the lock");
        assert!(Ledger::at(&dir).shares().is_empty());
        drop(held);
        t.join().unwrap().unwrap();
        assert_eq!(Ledger::at(&dir).shares().len(), 1);
        fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn sizes_read_as_the_config_writes_them() {
        assert_eq!(human(512 << 20), "512m");
        assert_eq!(human(3 << 30), "3g");
        assert_eq!(human(1000), "1000 bytes");
        assert_eq!(human(0), "0 bytes");
    }
}
