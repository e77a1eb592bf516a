//! What the runsc binary a container is handed to supports: its version, its platforms and
//! its default platform, asked of runsc itself (`runsc --version`, `runsc help platforms`,
//! `runsc flags`, `runsc help syscalls`), since releases differ (20221219 has ptrace and kvm, ptrace the
//! default; 20240729 adds systrap, its default).
//!
//! Asking costs four runsc starts (~15 ms each), so the answer is cached under moat's root
//! in `@cache/runsc/`, one file per binary, named by what identifies that file's content on
//! this host: device, inode, size, mtime and ctime. A binary replaced or rewritten in place
//! gets another name; a stale file is never read for it. Only gVisor creates (and `verify`)
//! look: the native path never stats runsc.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What one runsc binary says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// `runsc --version`'s version, e.g. `0.0~20240729.0`.
    pub version: String,
    /// The names `runsc help platforms` lists.
    pub platforms: Vec<String>,
    /// `--platform`'s default in `runsc flags`.
    pub default_platform: String,
    /// The sentry's system call table for this architecture, as `runsc help syscalls`
    /// lists it: number and name (gVisor's, e.g. `pselect` for `pselect6`). runsc's OCI
    /// seccomp conversion knows these names and no others. Empty when runsc does not
    /// list them (`super::seccomp_runsc` then never applies).
    pub syscalls: Vec<(u32, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{runsc}: {what}")]
    Run { runsc: PathBuf, what: String },
    #[error("{runsc}: cannot tell {what} from `runsc {args}`: {output:?}")]
    Parse {
        runsc: PathBuf,
        what: &'static str,
        args: &'static str,
        output: String,
    },
    #[error(
        "gvisor.platform {name:?} ({source_file}): not a platform of {runsc} (runsc {version} \
         has {list}; kvm also needs /dev/kvm with VMX/SVM)"
    )]
    Platform {
        name: String,
        source_file: PathBuf,
        runsc: PathBuf,
        version: String,
        list: String,
    },
    #[error("gvisor.platform \"kvm\" ({source_file}): this host cannot run it: {why}")]
    Kvm { source_file: PathBuf, why: String },
}

/// The cache directory under a moat root.
fn cache_dir(root: &Path) -> PathBuf {
    root.join("@cache").join("runsc")
}

/// The cache file's name for `runsc` as it is now.
fn key(runsc: &Path) -> std::io::Result<String> {
    let m = std::fs::metadata(runsc)?;
    // `v2`: the syscall table joined the probe; earlier files lack it.
    Ok(format!(
        "v2-{:x}-{}-{}-{}.{}-{}.{}.json",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// The probe of `runsc`, from the cache under `root` when it holds one for this binary,
/// else asked and stored (a failed store only costs the next create the same time).
pub fn cached(runsc: &Path, root: &Path) -> Result<Probe, ProbeError> {
    let name = key(runsc).map_err(|e| ProbeError::Run {
        runsc: runsc.into(),
        what: e.to_string(),
    })?;
    let dir = cache_dir(root);
    if let Some(p) = std::fs::read(dir.join(&name))
        .ok()
        .and_then(|b| serde_json::from_slice::<Probe>(&b).ok())
    {
        return Ok(p);
    }
    let p = ask(runsc)?;
    let _ =
        crate::state::write_cache_file(&dir, &name, &serde_json::to_vec(&p).expect("serialises"));
    Ok(p)
}

/// Asks `runsc` (no cache).
pub fn ask(runsc: &Path) -> Result<Probe, ProbeError> {
    let run = |args: &'static [&'static str]| -> Result<String, ProbeError> {
        let out = super::runsc::plain_output(runsc, args).map_err(|e| ProbeError::Run {
            runsc: runsc.into(),
            what: format!("{e:#}"),
        })?;
        if out.code != 0 {
            return Err(ProbeError::Run {
                runsc: runsc.into(),
                what: format!("`runsc {}` failed: {}", args.join(" "), out.error()),
            });
        }
        // Go's flag package and runsc's help write to stderr or stdout by release.
        let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.push_str(&out.stderr);
        Ok(s)
    };
    let parse_err = |what, args, output: &str| ProbeError::Parse {
        runsc: runsc.into(),
        what,
        args,
        output: output.chars().take(200).collect(),
    };
    let v = run(&["--version"])?;
    let version = parse_version(&v).ok_or_else(|| parse_err("its version", "--version", &v))?;
    let p = run(&["help", "platforms"])?;
    let platforms = parse_platforms(&p);
    if platforms.is_empty() {
        return Err(parse_err("its platforms", "help platforms", &p));
    }
    let f = run(&["flags"])?;
    let default_platform =
        parse_default_platform(&f).ok_or_else(|| parse_err("its default platform", "flags", &f))?;
    // Without it (a runsc that does not list its table) the container's process always
    // runs through moat's trampoline: nothing is lost but speed.
    let syscalls = run(&["help", "syscalls", "-format", "csv"])
        .map(|t| parse_syscalls(&t))
        .unwrap_or_default();
    Ok(Probe {
        version,
        platforms,
        default_platform,
        syscalls,
    })
}

/// `OS,Arch,Num,Name,Support,Note` rows of this architecture (Go's names: amd64, arm64).
fn parse_syscalls(out: &str) -> Vec<(u32, String)> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    out.lines()
        .filter_map(|l| {
            let mut f = l.splitn(5, ',');
            let (os, a, nr, name) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (os == "linux" && a == arch && !name.is_empty())
                .then(|| Some((nr.parse().ok()?, name.to_string())))?
        })
        .collect()
}

impl Probe {
    /// The platform a container gets: the configured one if this runsc has it, else
    /// runsc's own default.
    pub fn platform(
        &self,
        configured: Option<&str>,
        runsc: &Path,
        source: &Path,
    ) -> Result<String, ProbeError> {
        match configured {
            None => Ok(self.default_platform.clone()),
            Some(p) if self.platforms.iter().any(|q| q == p) => Ok(p.to_string()),
            Some(p) => Err(ProbeError::Platform {
                name: p.into(),
                source_file: source.into(),
                runsc: runsc.into(),
                version: self.version.clone(),
                list: self.platforms.join(", "),
            }),
        }
    }
}

/// Refuses the kvm platform on a host where gVisor's KVM platform cannot run: it runs the
/// sentry in guest ring 0 on the CPU's virtualization extensions. Asked only of a container
/// that gets kvm. KVM's own answers are not enough: on this project's CI host (a VM without
/// nested virtualization whose kernel has `kvm_pvm`, the paravirtual KVM that needs no
/// VMX/SVM) `/dev/kvm` opens and KVM_CREATE_VM, KVM_CREATE_VCPU and a KVM_RUN of a `hlt`
/// all succeed, and runsc's sandbox then spins forever; the CPU flags tell.
pub fn check_kvm(source: &Path) -> Result<(), ProbeError> {
    let refuse = |why: String| ProbeError::Kvm {
        source_file: source.into(),
        why,
    };
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map_err(|e| refuse(format!("/dev/kvm: {e}")))?;
    if cfg!(target_arch = "x86_64") {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
            .map_err(|e| refuse(format!("/proc/cpuinfo: {e}")))?;
        if !has_vmx_or_svm(&cpuinfo) {
            return Err(refuse(
                "the CPU has neither VMX nor SVM (/proc/cpuinfo), which gVisor's KVM platform \
                 needs (its sandbox would spin forever); use systrap or ptrace"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// Whether the first `flags` line of /proc/cpuinfo (x86) names `vmx` or `svm`.
fn has_vmx_or_svm(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "flags").then_some(v)
        })
        .is_some_and(|flags| flags.split_whitespace().any(|f| f == "vmx" || f == "svm"))
}

/// `runsc version 0.0~20240729.0` → `0.0~20240729.0`.
fn parse_version(out: &str) -> Option<String> {
    out.lines()
        .find_map(|l| l.trim().strip_prefix("runsc version "))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// One platform name a line (`kvm`, `systrap`, `ptrace`).
fn parse_platforms(out: &str) -> Vec<String> {
    out.lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        })
        .map(str::to_string)
        .collect()
}

/// Go's flag listing: `  -platform string` then its usage ending `(default "systrap")`.
fn parse_default_platform(out: &str) -> Option<String> {
    let mut lines = out.lines();
    lines.find(|l| l.trim() == "-platform string")?;
    let usage = lines.next()?;
    let rest = &usage[usage.find("(default \"")? + "(default \"".len()..];
    Some(rest[..rest.find('"')?].to_string()).filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    // The outputs of runsc 20221219 and 20240729, as printed.
    const FLAGS_2022: &str = "  -panic-log string\n    \tfile path where panic reports and other Go's runtime messages are written.\n  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n  -platform_device_path string\n    \tpath to a platform-specific device file\n";
    const FLAGS_2024: &str = "  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")\n  -platform_device_path string\n";

    #[test]
    fn parses_both_releases() {
        assert_eq!(
            parse_version("runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n").as_deref(),
            Some("0.0~20221219.0")
        );
        assert_eq!(parse_platforms("kvm\nptrace\n"), ["kvm", "ptrace"]);
        assert_eq!(
            parse_platforms("kvm\nsystrap\nptrace\n"),
            ["kvm", "systrap", "ptrace"]
        );
        assert_eq!(
            parse_default_platform(FLAGS_2022).as_deref(),
            Some("ptrace")
        );
        assert_eq!(
            parse_default_platform(FLAGS_2024).as_deref(),
            Some("systrap")
        );
        assert_eq!(parse_default_platform("  -platform string\n"), None);
        let csv = "OS,Arch,Num,Name,Support,Note\nlinux,amd64,0,read,Full Support,Fully Supported.\nlinux,amd64,270,pselect,Full Support,\"a, b\"\nlinux,arm64,63,read,Full Support,x\n";
        let want: Vec<(u32, String)> = vec![(0, "read".into()), (270, "pselect".into())];
        if cfg!(target_arch = "x86_64") {
            assert_eq!(parse_syscalls(csv), want);
        }
        assert_eq!(parse_version("usage: runsc"), None);
    }

    #[test]
    fn kvm_needs_vmx_or_svm_in_the_cpu_flags() {
        let flags =
            |f: &str| format!("processor\t: 0\nflags\t\t: fpu {f} sse2\nbugs\t\t: spectre_v1\n");
        assert!(has_vmx_or_svm(&flags("vmx")));
        assert!(has_vmx_or_svm(&flags("svm")));
        // This host's: a hypervisor, no virtualization extensions (`vmx flags` is another
        // line, and `svm_lock` is not `svm`).
        assert!(!has_vmx_or_svm(&flags("hypervisor svm_lock")));
        assert!(!has_vmx_or_svm("processor\t: 0\nvmx flags\t: vnmi\n"));
    }

    #[test]
    fn platform_is_one_runsc_lists_and_defaults_to_its_own() {
        let p = Probe {
            version: "0.0~20221219.0".into(),
            platforms: vec!["kvm".into(), "ptrace".into()],
            default_platform: "ptrace".into(),
            syscalls: vec![(0, "read".into())],
        };
        let (r, s) = (
            Path::new("/usr/bin/runsc"),
            Path::new("/etc/moat/config.toml"),
        );
        assert_eq!(p.platform(None, r, s).unwrap(), "ptrace");
        assert_eq!(p.platform(Some("kvm"), r, s).unwrap(), "kvm");
        assert_eq!(
            p.platform(Some("systrap"), r, s).unwrap_err().to_string(),
            "gvisor.platform \"systrap\" (/etc/moat/config.toml): not a platform of \
             /usr/bin/runsc (runsc 0.0~20221219.0 has kvm, ptrace; kvm also needs /dev/kvm \
             with VMX/SVM)"
        );
    }
}
