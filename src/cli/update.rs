//! `moat update [--resources FILE|-] [flags] <id>`: runc's flags for changing a running
//! container's cgroup limits, turned into the resources `container::update` writes.

use super::{Global, Result};
use crate::container::update::{self, read_resources, Request};
use crate::log::warn;
use crate::spec::{self, Resources};

#[derive(clap::Args, Debug, Default)]
pub struct Args {
    /// Path to a file holding the resources (a linux.resources JSON object) to update,
    /// or '-' for standard input. All other flags are then ignored.
    #[arg(short = 'r', long)]
    pub resources: Option<String>,
    /// Per cgroup block I/O weight, 10 to 1000
    #[arg(long = "blkio-weight")]
    pub blkio_weight: Option<u16>,
    /// CPU CFS period (µs), for hard capping
    #[arg(long = "cpu-period")]
    pub cpu_period: Option<u64>,
    /// CPU CFS hard cap (µs of CPU time per period)
    #[arg(long = "cpu-quota", allow_negative_numbers = true)]
    pub cpu_quota: Option<i64>,
    /// CPU CFS burst (µs) that may accumulate on top of the quota
    #[arg(long = "cpu-burst")]
    pub cpu_burst: Option<u64>,
    /// CPU shares (weight relative to other containers)
    #[arg(long = "cpu-share")]
    pub cpu_share: Option<u64>,
    /// CPU realtime period (µs)
    #[arg(long = "cpu-rt-period")]
    pub cpu_rt_period: Option<u64>,
    /// CPU realtime budget (µs per realtime period)
    #[arg(long = "cpu-rt-runtime", allow_negative_numbers = true)]
    pub cpu_rt_runtime: Option<i64>,
    /// SCHED_IDLE for the cgroup: 0 or 1
    #[arg(long = "cpu-idle")]
    pub cpu_idle: Option<i64>,
    /// CPUs to use (e.g. 0-2,4)
    #[arg(long = "cpuset-cpus")]
    pub cpuset_cpus: Option<String>,
    /// Memory nodes to use
    #[arg(long = "cpuset-mems")]
    pub cpuset_mems: Option<String>,
    /// Kernel memory limit (ignored: gone from Linux 5.16 on)
    #[arg(long = "kernel-memory", value_parser = parse_size, allow_negative_numbers = true)]
    pub kernel_memory: Option<i64>,
    /// Kernel TCP buffer memory limit (cgroup v1)
    #[arg(long = "kernel-memory-tcp", value_parser = parse_size, allow_negative_numbers = true)]
    pub kernel_memory_tcp: Option<i64>,
    /// Memory limit (bytes, or with a k/m/g/t/p suffix; -1 for unlimited)
    #[arg(long, value_parser = parse_size, allow_negative_numbers = true)]
    pub memory: Option<i64>,
    /// Memory reservation (soft limit)
    #[arg(long = "memory-reservation", value_parser = parse_size, allow_negative_numbers = true)]
    pub memory_reservation: Option<i64>,
    /// Total memory usage (memory + swap); -1 for unlimited swap
    #[arg(long = "memory-swap", value_parser = parse_size, allow_negative_numbers = true)]
    pub memory_swap: Option<i64>,
    /// Maximum number of pids in the container (-1: unlimited)
    #[arg(long = "pids-limit", allow_negative_numbers = true)]
    pub pids_limit: Option<i64>,
    /// Intel RDT/CAT L3 cache schema (not supported)
    #[arg(long = "l3-cache-schema")]
    pub l3_cache_schema: Option<String>,
    /// Intel RDT/MBA memory bandwidth schema (not supported)
    #[arg(long = "mem-bw-schema")]
    pub mem_bw_schema: Option<String>,
    /// moat: replace the egress policy (a moat.egress list, within the config's
    /// [egress] allow; "" returns to the config's default), atomically
    #[arg(long)]
    pub egress: Option<String>,
    pub id: String,
}

impl Args {
    /// The resources the flags (or the `--resources` file) give.
    pub fn request(&self) -> Result<Request> {
        if self.l3_cache_schema.is_some() || self.mem_bw_schema.is_some() {
            anyhow::bail!("Intel RDT is not supported by moat: --l3-cache-schema and --mem-bw-schema cannot be used");
        }
        let resources = match self.resources.as_deref() {
            Some(src) => {
                if has_flags(self) {
                    warn("--resources given: the other resource flags are ignored");
                }
                read_resources(src)?
            }
            None => from_flags(self),
        };
        Ok(Request {
            id: self.id.clone(),
            resources,
            egress: self.egress.clone(),
        })
    }
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    update::update(&g.context()?, &a.request()?)
}

fn has_flags(a: &Args) -> bool {
    let probe = Args {
        id: a.id.clone(),
        egress: a.egress.clone(),
        ..Default::default()
    };
    from_flags(a) != from_flags(&probe)
}

/// runc's flags → the resources they set; unset flags stay unset.
pub fn from_flags(a: &Args) -> Resources {
    let memory = spec::Memory {
        limit: a.memory,
        reservation: a.memory_reservation,
        swap: a.memory_swap,
        kernel: a.kernel_memory,
        kernel_tcp: a.kernel_memory_tcp,
        ..Default::default()
    };
    let cpu = spec::Cpu {
        shares: a.cpu_share,
        quota: a.cpu_quota,
        burst: a.cpu_burst,
        period: a.cpu_period,
        realtime_runtime: a.cpu_rt_runtime,
        realtime_period: a.cpu_rt_period,
        cpus: a.cpuset_cpus.clone(),
        mems: a.cpuset_mems.clone(),
        idle: a.cpu_idle,
    };
    Resources {
        memory: (memory != spec::Memory::default()).then_some(memory),
        cpu: (cpu != spec::Cpu::default()).then_some(cpu),
        pids: a.pids_limit.map(|limit| spec::Pids { limit: Some(limit) }),
        block_io: a.blkio_weight.map(|w| spec::BlockIo {
            weight: Some(w),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Why a size flag was refused (clap prints it after the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("invalid size {0:?} (want bytes, or a number with k, m, g, t or p)")]
    Invalid(String),
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// A memory size as runc (docker's go-units `RAMInBytes`) reads it: `1024`, `100m`,
/// `1.5g`, `64MiB`, `512 kb`; the unit is binary (k = 1024). `-1` means unlimited.
pub fn parse_size(s: &str) -> std::result::Result<i64, SizeError> {
    let t = s.trim();
    if t == "-1" {
        return Ok(-1);
    }
    let num_len = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(num_len);
    let bad = || SizeError::Invalid(s.to_string());
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return Err(bad());
    }
    let value: f64 = num.parse().map_err(|_| bad())?;
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_lowercase();
    let mut chars = unit.chars();
    let shift = match chars.next() {
        None | Some('b') => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some('p') => 50,
        Some(_) => return Err(bad()),
    };
    let rest: String = chars.collect();
    let suffix_ok = if unit.starts_with('b') {
        rest.is_empty()
    } else {
        matches!(rest.as_str(), "" | "b" | "i" | "ib")
    };
    if !suffix_ok {
        return Err(bad());
    }
    let bytes = value * (1u64 << shift) as f64;
    if bytes >= i64::MAX as f64 {
        return Err(SizeError::TooLarge(s.to_string()));
    }
    #[allow(clippy::cast_possible_truncation)] // below i64::MAX (checked above), and whole
    Ok(bytes as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: Args,
    }

    fn flags(argv: &[&str]) -> Resources {
        let mut v = vec!["update"];
        v.extend_from_slice(argv);
        let t = T::try_parse_from(v).unwrap();
        let mut r = from_flags(&t.a);
        update::normalize(&mut r);
        r
    }

    #[test]
    fn sizes() {
        let ok = [
            ("1024", 1024),
            ("1024b", 1024),
            ("100m", 100 << 20),
            ("100M", 100 << 20),
            ("64MiB", 64 << 20),
            ("64mb", 64 << 20),
            ("1.5g", 3 << 29),
            ("2 kb", 2048),
            ("1t", 1 << 40),
            ("1p", 1 << 50),
            ("-1", -1),
            ("0", 0),
        ];
        for (s, want) in ok {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for bad in [
            "",
            "m",
            "-2",
            "1x",
            "1.2.3m",
            "10mbb",
            "1bm",
            ".5m",
            "99999999p",
            "1e3",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn flags_to_resources() {
        let r = flags(&["--memory", "64m", "--pids-limit", "20", "c1"]);
        assert_eq!(r.memory.as_ref().unwrap().limit, Some(64 << 20));
        assert_eq!(r.memory.as_ref().unwrap().swap, None);
        assert_eq!(r.pids.as_ref().unwrap().limit, Some(20));
        assert!(r.cpu.is_none() && r.block_io.is_none());

        let r = flags(&[
            "--cpu-quota",
            "-1",
            "--cpu-period",
            "100000",
            "--cpu-share",
            "512",
            "--cpuset-cpus",
            "0",
            "--blkio-weight",
            "300",
            "c1",
        ]);
        let c = r.cpu.as_ref().unwrap();
        assert_eq!(
            (c.quota, c.period, c.shares),
            (Some(-1), Some(100000), Some(512))
        );
        assert_eq!(c.cpus.as_deref(), Some("0"));
        assert_eq!(r.block_io.as_ref().unwrap().weight, Some(300));
        assert!(r.memory.is_none() && r.pids.is_none());

        // Unlimited memory takes swap along; pids 0 is a limit (runtime-spec 1.3, runc 1.4).
        let r = flags(&["--memory", "-1", "--pids-limit", "0", "c1"]);
        assert_eq!(r.memory.as_ref().unwrap().swap, Some(-1));
        assert_eq!(r.pids.unwrap().limit, Some(0));
        let r = flags(&["--memory", "-1", "--memory-swap", "1g", "c1"]);
        assert_eq!(r.memory.as_ref().unwrap().swap, Some(1 << 30));

        assert_eq!(flags(&["c1"]), Resources::default());
        let t = T::try_parse_from(["update", "--memory", "12q", "c1"]);
        assert!(t.is_err());
    }

    #[test]
    fn flags_are_noticed_next_to_resources() {
        let t = T::try_parse_from(["update", "-r", "-", "c1"]).unwrap();
        assert!(!has_flags(&t.a));
        let t = T::try_parse_from(["update", "-r", "-", "--memory", "1m", "c1"]).unwrap();
        assert!(has_flags(&t.a));
    }
}
