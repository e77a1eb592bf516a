//! The container's seccomp filter installed by moat inside the sandbox, in front of the
//! container's process and of every process started with `exec`.
//!
//! runsc's OCI conversion turns every `SCMP_ACT_ERRNO` into EPERM (it has no field for
//! `errnoRet`/`defaultErrnoRet`) and `runsc exec` starts processes without the profile
//! (`Seccomp: 0`; runsc 20221219 and 20240729). The sentry itself emulates seccomp(2)
//! with the kernel's semantics, errno data included. So moat compiles the profile as for
//! a native container and runs a trampoline of its own first inside the sandbox,
//! `moat-seccomp-exec` ([`TRAMPOLINE`], installed next to moat; [`MARKER`] as its first
//! argument) that sets no_new_privs when the process asks for it, installs the compiled
//! program with seccomp(2) and execve's the real argv. After the execve the process's
//! argv, exe and comm are the real ones. A program of its own rather than moat: every
//! page the sentry maps for an execve costs a trap under ptrace, and the small static
//! binary is ~1/10 of moat's (docs/gvisor.md, "runsc releases").
//!
//! runsc is not given the profile as well when the process runs through the trampoline:
//! its conversion would be a second filter over the same rules (errnos aside), run on every
//! system call after moat's, and over the trampoline's own calls too, so a profile that
//! denies `seccomp` or `prctl` (which runc never needs the container to be allowed) would
//! end the container's process before its command. The trampoline is moat's own file and
//! runs nothing of the container's before the filter is in: the command's first
//! instruction is filtered as under runc. A spec without a process (nothing to wrap) keeps
//! runsc's conversion.
//!
//! The binary reaches the sandbox as a read-only bind mount at [`DEST`], under the
//! sentry's own `/dev` tmpfs (not in the rootfs, which may be read-only or hostile). Its
//! source is a copy of the trampoline under the state root's `@cache/gvisor`, never the
//! installed file: what gets through the mount reaches that copy only (runsc 20240729 lets a
//! container that remounts it read-write chmod it; [`binary`] replaces such a copy).

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::linux::{seccomp, sys};
use crate::spec::{self, Spec};

/// The first argument that makes moat the trampoline: `DEST MARKER NNP FILTER ARGV…`.
pub const MARKER: &str = "--moat-gvisor-seccomp-exec";

/// Where the trampoline is inside the sandbox.
pub const DEST: &str = "/dev/.moat-seccomp-exec";

/// The trampoline's program, installed next to moat's binary.
pub const TRAMPOLINE: &str = "moat-seccomp-exec";

/// How many arguments precede the real argv.
const PREFIX: usize = 4;

/// Why a profile cannot be installed this way.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("linux.seccomp: SCMP_ACT_NOTIFY is not supported for gVisor containers (no listener reaches a seccomp agent from inside the sandbox)")]
    Notify,
    #[error(transparent)]
    Compile(#[from] seccomp::SeccompError),
    #[error("no path to moat's own binary (the seccomp trampoline {TRAMPOLINE} is installed next to it)")]
    NoBinary,
    #[error("the seccomp trampoline {0} is missing (install it next to moat, as scripts/package does): {1}")]
    NoTrampoline(PathBuf, io::Error),
}

/// The arguments that run `args` under `filter`: the trampoline's prefix, then `args`.
fn wrap(filter: &seccomp::Filter, nnp: bool, args: &[String]) -> Vec<String> {
    // Two digits per byte from a table: a filter is thousands of bytes, and a `format!`
    // each was a tenth of moat's own CPU in a gVisor `run`.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let bytes = filter.to_bytes();
    let mut hex = String::with_capacity(2 * bytes.len());
    for b in bytes.iter() {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    let mut v = vec![
        DEST.to_string(),
        MARKER.to_string(),
        if nnp { "nnp" } else { "-" }.to_string(),
        hex,
    ];
    v.extend(args.iter().cloned());
    v
}

/// The trampoline's prefix of a process's args (the container's, as runsc was given
/// them), with no_new_privs set to `nnp`; `None` when the container has no profile.
pub fn prefix_of(args: &[String], nnp: bool) -> Option<Vec<String>> {
    if args.len() < PREFIX || args[0] != DEST || args[1] != MARKER {
        return None;
    }
    let mut p = args[..PREFIX].to_vec();
    p[2] = if nnp { "nnp" } else { "-" }.to_string();
    Some(p)
}

/// The file of a container's state directory holding the trampoline's prefix for
/// processes started with `exec`, when the container's own process runs without it
/// (`super::seccomp_runsc`).
pub const EXEC_PREFIX_FILE: &str = "seccomp-exec.json";

/// Rewrites the spec runsc is given when it has a profile: the process runs through the
/// trampoline, which is bind-mounted read-only at [`DEST`]; or, given the sentry's
/// system call `table` and where runsc's conversion does what moat's filter does
/// (`super::seccomp_runsc`), runsc converts the profile it is given for the process and
/// the trampoline waits at [`DEST`] for exec'd processes, whose prefix is returned (to be
/// kept as [`EXEC_PREFIX_FILE`]). `cache`: the state root's `@cache`.
pub fn wrap_spec(
    spec: &mut Spec,
    cache: &Path,
    table: Option<&[(u32, String)]>,
) -> Result<Option<Vec<String>>> {
    let Some(profile) = spec.linux().seccomp.clone() else {
        return Ok(None);
    };
    let filter = seccomp::compile_cached(&profile, None, Some(&cache.join("seccomp")))
        .map_err(Error::Compile)?;
    if filter.flags & FLAG_NEW_LISTENER != 0 {
        return Err(Error::Notify.into());
    }
    let Some(process) = spec.process.as_ref() else {
        return Ok(None);
    };
    let nnp = process.no_new_privileges == Some(true);
    let direct = table.map(|t| super::seccomp_runsc::runsc_profile(&profile, t));
    let binary = binary(&cache.join("gvisor"))?;
    match direct {
        Some(Ok(runsc_profile)) => {
            if let Some(linux) = spec.linux.as_mut() {
                linux.seccomp = Some(runsc_profile);
            }
            mount_trampoline(spec, &binary);
            Ok(Some(wrap(&filter, nnp, &[])))
        }
        other => {
            if let Some(Err(why)) = other {
                crate::log::debug(&format!(
                    "seccomp: the process runs through moat's trampoline: {why}"
                ));
            }
            apply(spec, &filter, &binary);
            Ok(None)
        }
    }
}

/// The process through the trampoline at [`DEST`], a read-only bind mount of `binary`; the
/// profile then no longer in runsc's spec (the module's doc says why).
fn apply(spec: &mut Spec, filter: &seccomp::Filter, binary: &Path) {
    if let Some(process) = spec.process.as_mut() {
        if let Some(linux) = spec.linux.as_mut() {
            linux.seccomp = None;
        }
        let nnp = process.no_new_privileges == Some(true);
        process.args = wrap(filter, nnp, &process.args);
        mount_trampoline(spec, binary);
    }
}

/// The trampoline `binary` bind-mounted read-only at [`DEST`].
fn mount_trampoline(spec: &mut Spec, binary: &Path) {
    spec.mounts.push(spec::Mount {
        destination: DEST.into(),
        typ: Some("bind".into()),
        source: Some(binary.display().to_string()),
        options: ["bind", "ro", "nosuid", "nodev"].map(String::from).to_vec(),
        uid_mappings: Vec::new(),
        gid_mappings: Vec::new(),
    });
}

const FLAG_NEW_LISTENER: u32 = 8;

/// The trampoline ([`TRAMPOLINE`], next to moat's binary) as a read-only copy under
/// `dir`, made once per build (keyed by the installed file's device, inode, size and
/// modification time).
fn binary(dir: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let src = crate::linux::exeseal::original_path()
        .ok_or(Error::NoBinary)?
        .with_file_name(TRAMPOLINE);
    let m = std::fs::metadata(&src).map_err(|e| Error::NoTrampoline(src.clone(), e))?;
    if !m.is_file() {
        let e = io::Error::other("not a regular file");
        return Err(Error::NoTrampoline(src, e).into());
    }
    let name = format!(
        "{TRAMPOLINE}-{:x}-{:x}-{:x}-{:x}.{}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec()
    );
    let dst = dir.join(&name);
    // Reused only as it was made: runsc 20240729 (directfs) lets a container that remounts
    // its bind mount read-write chmod the host file (writes, truncation and utimes still
    // fail with EROFS; seen inside a sandbox with CAP_SYS_ADMIN and CAP_DAC_OVERRIDE). A
    // copy whose metadata changed is replaced for the containers created after.
    let intact = |d: &std::fs::Metadata| {
        d.is_file()
            && d.len() == m.size()
            && d.mode() & 0o7777 == 0o555
            && d.uid() == sys::geteuid()
    };
    if std::fs::symlink_metadata(&dst).is_ok_and(|d| intact(&d)) {
        return Ok(dst);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("mkdir {}", dir.display()))?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let made = (|| -> io::Result<()> {
        std::fs::copy(&src, &tmp)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o555))?;
        std::fs::rename(&tmp, &dst)
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("copy {} to {}", src.display(), dst.display()));
    }
    // Copies of other builds (and of moat itself, the trampoline of earlier releases) are
    // no use to later creates; the sandboxes started with one hold it through their mounts.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let n = e.file_name();
            if n.to_string_lossy().starts_with("moat-") && n != name.as_str() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok(dst)
}

/// The trampoline's main (inside the sandbox). It never returns on success: the real
/// process replaces it.
pub fn main(args: &[OsString]) -> i32 {
    if args.get(1).is_none_or(|a| a != MARKER) {
        eprintln!("{TRAMPOLINE}: moat's seccomp trampoline in gVisor sandboxes; not a command");
        return 2;
    }
    let (code, msg) = run(args);
    eprintln!("moat: seccomp: {msg}");
    code
}

/// Installs the filter and execs; returns the exit status and the reason on failure.
fn run(args: &[OsString]) -> (i32, String) {
    if args.len() <= PREFIX {
        return (126, "no command".into());
    }
    let Some(filter) = unhex(args[3].as_bytes()).and_then(|b| seccomp::Filter::from_bytes(&b))
    else {
        return (126, "the filter argument does not decode".into());
    };
    let argv: Vec<CString> = match args[PREFIX..]
        .iter()
        .map(|a| CString::new(a.clone().into_vec()))
        .collect()
    {
        Ok(v) => v,
        Err(_) => return (126, "an argument holds a NUL byte".into()),
    };
    let name = args[PREFIX].to_string_lossy().into_owned();
    // Looked up before the filter is installed (as runc's init does): the profile may deny
    // what the lookup uses.
    let path = match lookup(&args[PREFIX]) {
        Some(p) => p,
        None => return (127, format!("{name:?}: executable file not found in $PATH")),
    };
    if args[2] == "nnp" {
        if let Err(e) = sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
            return (126, format!("prctl(PR_SET_NO_NEW_PRIVS): {e}"));
        }
    }
    // Flags: none. The sentry has no audit log (LOG) and no host speculation controls
    // (SPEC_ALLOW); TSYNC is moot in this single thread; NOTIFY was refused at create.
    if let Err(e) = sys::seccomp_set_filter(0, &filter.prog) {
        return (126, format!("seccomp(SECCOMP_SET_MODE_FILTER): {e}"));
    }
    let envp: Vec<CString> = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect();
    // Signal dispositions and descriptors are as the sentry gave them: the trampoline's
    // start-up (`sys::keep_args`) changes neither, and the execve passes them on.
    let e = sys::execve(&path, &argv, &envp);
    (
        if e.raw_os_error() == Some(libc::ENOENT) {
            127
        } else {
            126
        },
        format!("exec {name:?}: {e}"),
    )
}

/// `name` as execvp finds it: as given when it holds a `/`, else the first regular file
/// of that name in `$PATH` (runc's default PATH without one).
fn lookup(name: &std::ffi::OsStr) -> Option<CString> {
    let file = |p: Vec<u8>| -> Option<CString> {
        let c = CString::new(p).ok()?;
        let st = sys::stat(&c).ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(c)
    };
    if name.as_bytes().contains(&b'/') {
        return CString::new(name.as_bytes()).ok();
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    path.as_bytes().split(|b| *b == b':').find_map(|dir| {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        file([dir, b"/", name.as_bytes()].concat())
    })
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks_exact(2)
        .map(|c| u8::from_str_radix(std::str::from_utf8(c).ok()?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_round_trips_the_filter() {
        let f = seccomp::Filter::from_bytes(&[0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0xff, 0x7f]).unwrap();
        let args = wrap(&f, false, &["sh".into(), "-c".into(), "x".into()]);
        assert_eq!(&args[4..], ["sh", "-c", "x"]);
        let b = unhex(args[3].as_bytes()).unwrap();
        assert_eq!(b, f.to_bytes());
        let p = prefix_of(&args, true).unwrap();
        assert_eq!(p[..2], [DEST, MARKER]);
        assert_eq!(p[2], "nnp");
        assert_eq!(p[3], args[3]);
        assert!(prefix_of(&["sh".to_string()], false).is_none());
    }

    #[test]
    fn the_process_runs_through_a_read_only_trampoline() {
        let mut s = Spec::parse(
            br#"{"process":{"args":["sh","-c","x"],"cwd":"/","noNewPrivileges":true},
                 "mounts":[{"destination":"/dev","type":"tmpfs","source":"tmpfs"}],
                 "linux":{"seccomp":{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                   {"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":38}]}}}"#,
        )
        .unwrap();
        let f = seccomp::compile(s.linux().seccomp.as_ref().unwrap()).unwrap();
        apply(&mut s, &f, Path::new("/cache/moat-x"));
        let args = &s.process.as_ref().unwrap().args;
        assert_eq!(args[..3], [DEST, MARKER, "nnp"]);
        assert_eq!(args[4..], ["sh", "-c", "x"]);
        let decoded = seccomp::Filter::from_bytes(&unhex(args[3].as_bytes()).unwrap()).unwrap();
        assert_eq!(decoded.to_bytes(), f.to_bytes());
        // After /dev (the sentry's tmpfs), read-only, no set-id, no devices.
        let m = s.mounts.last().unwrap();
        assert_eq!(s.mounts.len(), 2);
        assert_eq!(m.destination, DEST);
        assert_eq!(m.source.as_deref(), Some("/cache/moat-x"));
        assert_eq!(m.options, ["bind", "ro", "nosuid", "nodev"]);
        // runsc is not given the profile too: moat's filter is the one the process runs
        // under.
        assert!(s.linux().seccomp.is_none());
    }

    #[test]
    fn notify_is_refused_and_no_profile_changes_nothing() {
        let mut s = Spec::parse(
            br#"{"process":{"args":["sh"],"cwd":"/"},"linux":{"seccomp":{
                 "defaultAction":"SCMP_ACT_ALLOW","listenerPath":"/run/agent.sock",
                 "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_NOTIFY"}]}}}"#,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("moat-scx-{}", std::process::id()));
        let e = wrap_spec(&mut s, &dir, None).unwrap_err();
        assert!(format!("{e:#}").contains("SCMP_ACT_NOTIFY"), "{e:#}");
        assert!(
            !dir.join("gvisor").exists(),
            "no copy made for a refused profile"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = Spec::parse(br#"{"process":{"args":["sh"],"cwd":"/"}}"#).unwrap();
        wrap_spec(&mut s, Path::new("/nonexistent"), None).unwrap();
        assert_eq!(s.process.unwrap().args, ["sh"]);
        assert!(s.mounts.is_empty());
    }
}
