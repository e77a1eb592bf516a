//! Changing the limits of a running container (`moat update`): only the fields given are
//! written, device rules are never touched, and a write the kernel refuses undoes the
//! ones that went before it, so the container keeps the limits it had.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{read_file, v1, v2, write_file, Cgroup, CgroupError};
use crate::log::warn;
use crate::spec::Resources;

/// Limit files holding one value, which reads back in a form the file accepts.
#[rustfmt::skip]
const SINGLE: &[&str] = &[
    // v1
    "cpu.shares", "cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.cfs_burst_us",
    "cpu.rt_period_us", "cpu.rt_runtime_us", "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.swappiness",
    "memory.kmem.tcp.limit_in_bytes", "blkio.weight", "blkio.leaf_weight", "net_cls.classid",
    // v2
    "memory.max", "memory.swap.max", "memory.low", "cpu.weight", "cpu.max", "cpu.max.burst",
    // both
    "cpu.idle", "cpuset.cpus", "cpuset.mems", "pids.max",
];

/// Per-device files: one `MAJ:MIN …` line per device, and what a line written for a
/// device removes its limit.
const KEYED: &[(&str, &str)] = &[
    ("blkio.throttle.read_bps_device", "0"),
    ("blkio.throttle.write_bps_device", "0"),
    ("blkio.throttle.read_iops_device", "0"),
    ("blkio.throttle.write_iops_device", "0"),
    ("io.max", "rbps=max wbps=max riops=max wiops=max"),
];

/// The contents of every limit file an update may write, per directory.
#[derive(Debug, Default)]
pub struct Snapshot {
    files: Vec<(PathBuf, String, String)>,
}

impl Snapshot {
    /// Reads the limit files present in `dirs`, plus the `unified` keys of `res`.
    pub fn take(dirs: &[PathBuf], res: &Resources) -> Snapshot {
        let mut files = Vec::new();
        let unified: Vec<&str> = res
            .unified
            .iter()
            .flat_map(|u| u.keys().map(String::as_str))
            .filter(|k| !k.contains('/') && !k.contains(".."))
            .collect();
        for dir in dirs {
            let hugetlb: Vec<String> = std::fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                        .filter(|n| {
                            n.starts_with("hugetlb.")
                                && (n.ends_with(".limit_in_bytes") || n.ends_with(".max"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let names = SINGLE
                .iter()
                .copied()
                .chain(KEYED.iter().map(|(f, _)| *f))
                .chain(hugetlb.iter().map(String::as_str))
                .chain(unified.iter().copied());
            for name in names {
                if files.iter().any(|(d, n, _)| d == dir && n == name) {
                    continue;
                }
                if let Ok(v) = read_file(dir, name) {
                    files.push((dir.clone(), name.to_string(), v));
                }
            }
        }
        Snapshot { files }
    }

    /// Writes back every file whose content changed. Values that depend on each other
    /// (memory and memsw, quota and period) may be refused in one order and accepted in
    /// the other, so refused writes are retried after the rest.
    pub fn restore(&self) -> Result<(), CgroupError> {
        let mut pending: Vec<&(PathBuf, String, String)> = self
            .files
            .iter()
            .filter(|(dir, name, old)| read_file(dir, name).ok().as_ref() != Some(old))
            .collect();
        let mut last = None;
        while !pending.is_empty() {
            let before = pending.len();
            pending.retain(|(dir, name, old)| match restore_one(dir, name, old) {
                Ok(()) => false,
                Err(e) => {
                    last = Some(e);
                    true
                }
            });
            if pending.len() == before {
                break;
            }
        }
        match last {
            Some(e) if !pending.is_empty() => Err(e),
            _ => Ok(()),
        }
    }
}

fn restore_one(dir: &Path, name: &str, old: &str) -> Result<(), CgroupError> {
    let field = "restore after failed update";
    if let Some((_, reset)) = KEYED.iter().find(|(f, _)| *f == name) {
        let now = read_file(dir, name)?;
        let old_lines = device_lines(old);
        for (dev, _) in device_lines(&now) {
            if !old_lines.contains_key(dev) {
                write_file(dir, name, &format!("{dev} {reset}"), field)?;
            }
        }
        for line in old_lines.values() {
            write_file(dir, name, line, field)?;
        }
        return Ok(());
    }
    let lines: Vec<&str> = old
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.len() == 1 {
        return write_file(dir, name, lines[0], field);
    }
    // Keyed files of other kinds (from `unified`): line by line.
    for l in lines {
        write_file(dir, name, l, field)?;
    }
    Ok(())
}

fn device_lines(text: &str) -> BTreeMap<&str, &str> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (dev, _) = l.split_once(' ')?;
            dev.contains(':').then_some((dev, l))
        })
        .collect()
}

impl Cgroup {
    /// Applies the limits of `res` to the live cgroup, leaving the device rules alone.
    /// When the kernel refuses a value, the files already written are restored and the
    /// refusal is returned.
    pub fn update(&self, res: &Resources) -> Result<(), CgroupError> {
        self.check_memory_usage(res)?;
        if let Some(scope) = &self.systemd {
            // systemd first, so that its view and the files agree; the files then get
            // every value (systemd knows only some).
            let no_devices = Resources {
                devices: Vec::new(),
                ..res.clone()
            };
            let props = super::systemd::props::from_resources(&no_devices, "", !self.unified)?;
            super::systemd::set_properties(scope, &props)?;
        }
        let dirs: Vec<PathBuf> = self.hierarchies.iter().map(|h| h.dir(&self.path)).collect();
        let snap = Snapshot::take(&dirs, res);
        let r = if self.unified {
            v2::update(self, res)
        } else {
            v1::update(self, res)
        };
        if let Err(e) = r {
            if let Err(re) = snap.restore() {
                warn(&format!(
                    "update failed and the old limits could not all be restored: {re}"
                ));
            }
            return Err(e);
        }
        Ok(())
    }
}

impl Cgroup {
    /// `linux.resources.memory.checkBeforeUpdate` (runtime-spec 1.3): a new memory (or
    /// memory+swap) limit at or below what the container uses now is refused before
    /// anything is written. On cgroup v2 the kernel would take such a limit and OOM-kill
    /// to meet it; this is runc's check there (`memory.current`). On cgroup v1 runc checks
    /// nothing, and the kernel reclaims towards the new limit and refuses it (EBUSY) only
    /// when reclaim falls short: a page cache it can drop lets a limit below usage through.
    /// The spec makes the refusal a MUST, so moat checks on v1 too, against
    /// `memory.usage_in_bytes` (`memory.memsw.usage_in_bytes` for memory+swap). A usage
    /// that cannot be read lets the update through, as runc's best-effort check does.
    fn check_memory_usage(&self, res: &Resources) -> Result<(), CgroupError> {
        let Some(m) = res
            .memory
            .as_ref()
            .filter(|m| m.check_before_update == Some(true))
        else {
            return Ok(());
        };
        let Ok((dir, v2)) = self.dir_for("memory", "linux.resources.memory") else {
            return Ok(());
        };
        let usage = |file: &str| -> Option<u64> { read_file(&dir, file).ok()?.trim().parse().ok() };
        let checks = [
            (
                m.swap,
                "swap",
                "memory+swap",
                if v2 {
                    "memory.current"
                } else {
                    "memory.memsw.usage_in_bytes"
                },
            ),
            (
                m.limit,
                "limit",
                "memory",
                if v2 {
                    "memory.current"
                } else {
                    "memory.usage_in_bytes"
                },
            ),
        ];
        for (value, field, what, file) in checks {
            let Some(limit) = value.and_then(|v| u64::try_from(v).ok()).filter(|&v| v > 0) else {
                continue;
            };
            if let Some(used) = usage(file).filter(|&u| limit <= u) {
                return Err(CgroupError::Invalid {
                    field: format!("linux.resources.memory.{field}"),
                    msg: format!(
                        "{what} limit {limit} is not above the container's usage {used} \
                         ({file}); refused (checkBeforeUpdate)"
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::linux::cgroups::tests::TempDir;
    use crate::linux::cgroups::Hierarchy;
    use crate::spec;

    /// A v1 tree with cpu, memory, pids and devices hierarchies. Writes append (see
    /// `write_file`), so a file's content is its history.
    fn fake(tmp: &TempDir) -> Cgroup {
        let mut hierarchies = Vec::new();
        for (c, files) in [
            (
                "cpu",
                &[("cpu.shares", "1024\n"), ("cpu.cfs_quota_us", "-1\n")][..],
            ),
            (
                "memory",
                &[("memory.soft_limit_in_bytes", "9223372036854771712\n")][..],
            ),
            ("pids", &[("pids.max", "max\n")][..]),
            (
                "devices",
                &[("devices.allow", ""), ("devices.deny", "")][..],
            ),
        ] {
            let mount = tmp.0.join(c);
            let dir = mount.join("moat/ct");
            fs::create_dir_all(&dir).unwrap();
            for (f, v) in files {
                fs::write(dir.join(f), v).unwrap();
            }
            hierarchies.push(Hierarchy {
                mount,
                controllers: vec![c.to_string()],
                v2: false,
            });
        }
        Cgroup {
            path: "/moat/ct".into(),
            systemd: None,
            joined: false,
            unified: false,
            hierarchies,
            skipped: vec![],
        }
    }

    fn read(tmp: &TempDir, c: &str, f: &str) -> String {
        fs::read_to_string(tmp.0.join(c).join("moat/ct").join(f)).unwrap()
    }

    #[test]
    fn only_given_fields_and_never_devices() {
        let tmp = TempDir::new("update-fields");
        let cg = fake(&tmp);
        let res = Resources {
            pids: Some(spec::Pids { limit: Some(20) }),
            devices: vec![spec::DeviceCgroup {
                allow: false,
                access: Some("rwm".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        cg.update(&res).unwrap();
        assert_eq!(read(&tmp, "pids", "pids.max"), "max\n20");
        assert_eq!(read(&tmp, "cpu", "cpu.shares"), "1024\n");
        assert_eq!(read(&tmp, "devices", "devices.deny"), "");
        assert_eq!(read(&tmp, "devices", "devices.allow"), "");
    }

    #[test]
    fn check_before_update_refuses_a_limit_not_above_usage() {
        let tmp = TempDir::new("update-check");
        let cg = fake(&tmp);
        let dir = tmp.0.join("memory/moat/ct");
        fs::write(dir.join("memory.usage_in_bytes"), "1048576\n").unwrap();
        fs::write(dir.join("memory.limit_in_bytes"), "").unwrap();
        let limit = |limit: i64, check: Option<bool>| Resources {
            memory: Some(spec::Memory {
                limit: Some(limit),
                check_before_update: check,
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = cg.update(&limit(1_048_576, Some(true))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "linux.resources.memory.limit: memory limit 1048576 is not above the container's \
             usage 1048576 (memory.usage_in_bytes); refused (checkBeforeUpdate)"
        );
        assert_eq!(read(&tmp, "memory", "memory.limit_in_bytes"), "");
        // Above usage, or without the check: written.
        cg.update(&limit(2_097_152, Some(true))).unwrap();
        cg.update(&limit(4096, None)).unwrap();
        assert_eq!(read(&tmp, "memory", "memory.limit_in_bytes"), "20971524096");
    }

    #[test]
    fn refused_write_restores_earlier_ones() {
        let tmp = TempDir::new("update-rollback");
        let cg = fake(&tmp);
        // A directory where the file should be: the write fails as a kernel refusal would.
        fs::create_dir(tmp.0.join("memory/moat/ct/memory.limit_in_bytes")).unwrap();
        let res = Resources {
            cpu: Some(spec::Cpu {
                shares: Some(512),
                quota: Some(50000),
                ..Default::default()
            }),
            memory: Some(spec::Memory {
                limit: Some(64 << 20),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = cg.update(&res).unwrap_err().to_string();
        assert!(e.contains("memory.limit_in_bytes"), "{e}");
        assert!(e.contains("67108864"), "{e}");
        // Written, then written back.
        assert_eq!(read(&tmp, "cpu", "cpu.shares"), "1024\n5121024");
        assert_eq!(read(&tmp, "cpu", "cpu.cfs_quota_us"), "-1\n50000-1");
        assert_eq!(
            read(&tmp, "memory", "memory.soft_limit_in_bytes"),
            "9223372036854771712\n"
        );
    }

    #[test]
    fn keyed_files_are_restored_per_device() {
        let tmp = TempDir::new("update-keyed");
        let dir = tmp.0.join("blkio");
        fs::create_dir_all(&dir).unwrap();
        let f = "blkio.throttle.read_bps_device";
        fs::write(dir.join(f), "8:0 100\n").unwrap();
        let snap = Snapshot::take(std::slice::from_ref(&dir), &Resources::default());
        fs::write(dir.join(f), "8:0 200\n8:16 300\n").unwrap();
        snap.restore().unwrap();
        let got = fs::read_to_string(dir.join(f)).unwrap();
        assert_eq!(got, "8:0 200\n8:16 300\n8:16 08:0 100");
    }

    #[test]
    fn v2_update_writes_limits_without_a_device_program() {
        let tmp = TempDir::new("update-v2");
        let dir = tmp.0.join("moat/ct");
        fs::create_dir_all(&dir).unwrap();
        for (f, v) in [
            ("cgroup.controllers", "cpu memory pids\n"),
            ("memory.max", "max\n"),
            ("memory.swap.max", "max\n"),
            ("pids.max", "max\n"),
        ] {
            fs::write(dir.join(f), v).unwrap();
        }
        let cg = Cgroup {
            path: "/moat/ct".into(),
            systemd: None,
            joined: false,
            unified: true,
            hierarchies: vec![Hierarchy {
                mount: tmp.0.clone(),
                controllers: vec!["cpu".into(), "memory".into(), "pids".into()],
                v2: true,
            }],
            skipped: vec![],
        };
        let res = Resources {
            memory: Some(spec::Memory {
                limit: Some(64 << 20),
                ..Default::default()
            }),
            pids: Some(spec::Pids { limit: Some(20) }),
            ..Default::default()
        };
        // A device program cannot attach to a plain directory: apply would fail here.
        assert!(cg.apply(&res).is_err());
        fs::write(dir.join("memory.max"), "max\n").unwrap();
        fs::write(dir.join("pids.max"), "max\n").unwrap();
        cg.update(&res).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join("memory.max")).unwrap(),
            "max\n67108864"
        );
        assert_eq!(fs::read_to_string(dir.join("pids.max")).unwrap(), "max\n20");
    }
}
