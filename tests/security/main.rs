//! The security regression battery (issue 5; the CVE table and tests T1–T15 of the shared
//! security notes). Every test **attacks** moat and fails if the attack works.
//!
//! Each attack runs under RESTRICTED (moat's default policy) and, where it applies, under
//! OPEN too. Tests that prove a mechanism other than seccomp or dropped capabilities
//! (non-dumpable joins, fd hygiene, path resolution, the `/dev/null` check, the read-only
//! binary) always run under OPEN, where the container's root is the host's root and no
//! filter can hide a missing defence.
//!
//! Some attacks need calls busybox cannot make; `fixtures/probe.c` is compiled statically
//! at test time (`gcc -static`, and `gcc -m32 -static` for the 32-bit `socketcall` probe)
//! and copied into the rootfs. Without a compiler those tests print a loud SKIPPED line.

#[path = "../support/mod.rs"]
mod support;

mod caps;
mod cgroupfs;
mod console;
mod exe;
mod fds;
mod lsm;
mod masks;
mod notify;
mod procfs;
mod procsys;
mod ptrace;
mod race;
mod seccomp;
mod symlinks;
mod trace;
mod user;
mod verify;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use support::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Restricted,
    Open,
}

pub const BOTH: [Policy; 2] = [Policy::Restricted, Policy::Open];

impl Policy {
    pub fn tag(self) -> &'static str {
        match self {
            Policy::Restricted => "r",
            Policy::Open => "o",
        }
    }
}

/// A fresh test context whose moat calls run under `policy`.
pub fn ctx(tag: &str, policy: Policy) -> Ctx {
    let mut c = Ctx::new(&format!("{tag}-{}", policy.tag()));
    if policy == Policy::Restricted {
        c.restricted();
    }
    c
}

/// Writes a moat config file into the context's dir and makes the context use it.
pub fn use_config_file(ctx: &mut Ctx, text: &str) -> PathBuf {
    let p = ctx.dir.join("moat-config.toml");
    fs::write(&p, text).expect("write config");
    ctx.use_config(&p);
    p
}

fn build_probe(name: &str, extra: &[&str]) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/security/fixtures/probe.c");
    let dir = Path::new(MOAT).parent().expect("target dir");
    let out = dir.join(name);
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let mut cmd = Command::new("gcc");
    cmd.args(extra)
        .args(["-static", "-O2", "-o"])
        .arg(&tmp)
        .arg(&src);
    let res = run_host_cmd(cmd, Duration::from_secs(120));
    if res.code != 0 {
        missing(&format!(
            "part of the battery: cannot build {name} with gcc {extra:?} -static \
             (install gcc and libc6-dev; gcc-multilib for -m32): {}",
            res.stderr
        ));
        let _ = fs::remove_file(&tmp);
        return None;
    }
    fs::rename(&tmp, &out).expect("rename probe");
    Some(out)
}

/// The static probe binary (x86_64), built once per run.
pub fn probe() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| build_probe("moat-security-probe", &[]))
        .as_deref()
}

/// The same program built for 32-bit x86, for the `socketcall` probe.
pub fn probe32() -> Option<&'static Path> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| build_probe("moat-security-probe32", &["-m32"]))
        .as_deref()
}

/// Copies `bin` into the context's rootfs as `/bin/<name>` (a copy, never a hard link).
pub fn install(ctx: &Ctx, bin: &Path, name: &str) {
    let dst = ctx.rootfs().join("bin").join(name);
    fs::copy(bin, &dst).expect("copy probe into the rootfs");
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The value of `Key:` in /proc/<pid>/status-like text, whitespace collapsed.
pub fn field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| panic!("{key} not in {text}"))
}

/// Creates and starts a container whose init sleeps (for `exec` attacks).
#[track_caller]
pub fn sleeper(ctx: &mut Ctx, name: &str) -> Container {
    ctx.args(&["sleep", "120"]);
    let c = ctx.create_ok(name);
    c.start();
    c
}

/// `moat exec` (through the context, so under its policy) of `args` in `c`.
pub fn exec(ctx: &Ctx, c: &Container, args: &[&str]) -> Out {
    let mut a = vec!["exec", c.id.as_str()];
    a.extend_from_slice(args);
    ctx.moat(&a)
}

/// Every entry of a host directory, for "nothing new appeared here" checks.
pub fn entries(dir: &str) -> std::collections::BTreeSet<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
