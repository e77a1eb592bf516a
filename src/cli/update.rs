//! `moat update [--resources FILE|-] [limit flags] <id>`: change a container's limits.

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::spec::{BlockIo, Cpu, Memory, Pids, Resources};
use crate::state::ContainerDir;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// JSON file with a LinuxResources object, or - for stdin (other flags then ignored)
    #[arg(short = 'r', long)]
    pub resources: Option<PathBuf>,
    /// Block IO weight (10-1000)
    #[arg(long = "blkio-weight")]
    pub blkio_weight: Option<u16>,
    /// CPU CFS period (microseconds)
    #[arg(long = "cpu-period")]
    pub cpu_period: Option<u64>,
    /// CPU CFS quota (microseconds)
    #[arg(long = "cpu-quota", allow_hyphen_values = true)]
    pub cpu_quota: Option<i64>,
    /// CPU shares (relative weight)
    #[arg(long = "cpu-share")]
    pub cpu_share: Option<u64>,
    /// CPUs to use (0-3, 0,1)
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes to use
    #[arg(long = "cpuset-mems")]
    pub cpuset_mems: Option<String>,
    /// Memory limit (bytes, or with k/m/g suffix; -1 for none)
    #[arg(long, allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Memory soft limit
    #[arg(long = "memory-reservation", allow_hyphen_values = true)]
    pub memory_reservation: Option<String>,
    /// Memory plus swap limit (-1 for unlimited swap)
    #[arg(long = "memory-swap", allow_hyphen_values = true)]
    pub memory_swap: Option<String>,
    /// Maximum number of pids (-1 for none)
    #[arg(long = "pids-limit", allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    pub id: String,
}

/// `123`, `-1`, `64m`, `1g`, `512KiB` (binary units, as runc's `RAMInBytes`).
fn bytes(flag: &str, s: &str) -> Result<i64> {
    let t = s.trim().to_ascii_lowercase();
    if t == "-1" {
        return Ok(-1);
    }
    let n = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let num: i64 = t[..n]
        .parse()
        .with_context(|| format!("--{flag} {s:?}: not a size"))?;
    let unit = t[n..].trim_end_matches("ib").trim_end_matches('b');
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => bail!("--{flag} {s:?}: unknown unit"),
    };
    num.checked_mul(1 << shift)
        .with_context(|| format!("--{flag} {s:?}: too large"))
}

impl Args {
    fn resources(&self) -> Result<Resources> {
        if let Some(path) = &self.resources {
            let mut buf = Vec::new();
            if path.as_os_str() == "-" {
                std::io::stdin()
                    .read_to_end(&mut buf)
                    .context("read stdin")?;
            } else {
                buf = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
            }
            let de = &mut serde_json::Deserializer::from_slice(&buf);
            return serde_path_to_error::deserialize(de).map_err(|e| {
                anyhow::anyhow!("--resources: invalid JSON at {}: {}", e.path(), e.inner())
            });
        }
        let mut r = Resources::default();
        let mem = |f: &str, v: &Option<String>| v.as_deref().map(|s| bytes(f, s)).transpose();
        let memory = Memory {
            limit: mem("memory", &self.memory)?,
            reservation: mem("memory-reservation", &self.memory_reservation)?,
            swap: mem("memory-swap", &self.memory_swap)?,
            ..Default::default()
        };
        if memory != Memory::default() {
            r.memory = Some(memory);
        }
        let cpu = Cpu {
            shares: self.cpu_share,
            quota: self.cpu_quota,
            period: self.cpu_period,
            cpus: self.cpuset_cpus.clone(),
            mems: self.cpuset_mems.clone(),
            ..Default::default()
        };
        if cpu != Cpu::default() {
            r.cpu = Some(cpu);
        }
        r.pids = self.pids_limit.map(|limit| Pids { limit });
        r.block_io = self.blkio_weight.map(|w| BlockIo {
            weight: Some(w),
            ..Default::default()
        });
        Ok(r)
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let mut resources = a.resources()?;
    // As runc: update never rewrites device rules.
    resources.devices.clear();
    let dir = ContainerDir::open(&g.state_root(), &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        let req = crate::gvisor::UpdateRequest { resources };
        return crate::gvisor::update(g, &rec, gv, req);
    }
    let Some(cg) = &rec.cgroup else {
        bail!("container has no cgroup to update");
    };
    if rec.status(&dir) == crate::state::Status::Stopped {
        bail!("container not running");
    }
    cg.apply(&resources)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn sizes() {
        assert_eq!(bytes("m", "64m").unwrap(), 64 << 20);
        assert_eq!(bytes("m", "1G").unwrap(), 1 << 30);
        assert_eq!(bytes("m", "512KiB").unwrap(), 512 << 10);
        assert_eq!(bytes("m", "100").unwrap(), 100);
        assert_eq!(bytes("m", "-1").unwrap(), -1);
        assert!(bytes("m", "x").is_err() && bytes("m", "5q").is_err());
    }
}
