//! CRIU, moat's checkpoint/restore engine for native containers, driven through its RPC
//! (`criu swrk`) by a program of its own: `moat-criu` (src/bin/moat-criu.rs, with the
//! `rust-criu` crate), installed next to moat's binary, as `moat-dbus` is. moat writes one
//! JSON request ([`wire::Request`]) to its stdin and reads one reply; `moat-criu` starts the
//! `criu` it is told: `--criu`, else `criu` on `PATH`, as runc and podman find it.

pub mod wire;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wire::{Answer, Reply, Request};

/// The helper's name, next to moat's own binary.
pub const HELPER: &str = "moat-criu";

/// The namespaces CRIU can leave out of an image and restore a tree into as given (its
/// `--external net[INODE]:KEY`), by their `/proc/<pid>/ns/` name. Others joined by path
/// are restored by CRIU as new ones, which the pre-resume comparison then refuses.
pub const EXTERNAL_NS: &[&str] = &["net"];

/// The key a namespace left out of an image is named by, at dump (`external`) and at
/// restore (`inherit_fd`): `extRoot` + the name capitalised + `NS`, runc's, so an image
/// runc made and one moat made name it alike.
pub fn external_ns_key(name: &str) -> String {
    let mut chars = name.chars();
    let first: String = chars
        .next()
        .map(|c| c.to_uppercase().collect())
        .unwrap_or_default();
    format!("extRoot{first}{}NS", chars.as_str())
}

/// How long a version query may take.
const VERSION_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum CriuError {
    #[error("cannot tell where moat's binary is (/proc/self/exe), so not where {HELPER} is")]
    NoExe,
    #[error("checkpoint/restore needs {}, moat's CRIU helper, next to {}", helper.display(), exe.display())]
    NoHelper { helper: PathBuf, exe: PathBuf },
    #[error("run {}: {err}", helper.display())]
    Run {
        helper: PathBuf,
        err: std::io::Error,
    },
    #[error("{}: no answer within {}s", helper.display(), secs)]
    Timeout { helper: PathBuf, secs: u64 },
    #[error("{} ended without an answer", helper.display())]
    NoAnswer { helper: PathBuf },
    /// CRIU's (or the helper's) own error line.
    #[error("{0}")]
    Criu(String),
}

/// `moat-criu` in the directory of the moat binary that runs (symlinks such as `moat-open`
/// resolved; the file moat sealed itself from), never one on `$PATH`.
pub fn helper() -> Result<PathBuf, CriuError> {
    let exe = super::exeseal::original_path().ok_or(CriuError::NoExe)?;
    let path = exe.with_file_name(HELPER);
    if path.is_file() {
        Ok(path)
    } else {
        Err(CriuError::NoHelper { helper: path, exe })
    }
}

/// The `criu` moat-criu runs: `--criu` as given, else `criu` (looked up on `PATH` by the
/// helper when it starts it).
pub fn criu_path(flag: Option<&str>) -> String {
    flag.unwrap_or("criu").to_string()
}

/// Where `criu` resolves on `PATH` (for the reports; `None` when it is not there).
pub fn which(criu: &str) -> Option<PathBuf> {
    if criu.contains('/') {
        return Path::new(criu).is_file().then(|| PathBuf::from(criu));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(criu))
        .find(|c| c.is_file())
}

/// CRIU's version as its RPC answers it (`major.minor.sublevel`): proof that this `criu`
/// runs here and speaks the RPC moat-criu uses.
pub fn version(criu: &str) -> Result<String, CriuError> {
    let req = Request::Version {
        criu: criu.to_string(),
    };
    match converse(&req, VERSION_DEADLINE)? {
        Answer::Version(v) => Ok(v),
        a => Err(CriuError::Criu(format!("{HELPER} answered {a:?}"))),
    }
}

/// How long a dump or a restore may take.
const IMAGE_DEADLINE: Duration = Duration::from_secs(600);

/// `RESTORE` of `r.images_dir`; `place` puts the helper (by pid) into the container's
/// cgroups before it is sent the request, so CRIU and the tree it restores are born there.
/// Answers the restored init's pid.
pub fn restore(
    r: wire::Restore,
    place: impl FnOnce(i32) -> Result<(), String>,
) -> Result<i32, CriuError> {
    match converse_placed(&Request::Restore(r), IMAGE_DEADLINE, place)? {
        Answer::Restored(pid) => Ok(pid),
        a => Err(CriuError::Criu(format!("{HELPER} answered {a:?}"))),
    }
}

/// `DUMP` of the process tree `d.pid` into `d.images_dir`.
pub fn dump(d: wire::Dump) -> Result<(), CriuError> {
    match converse(&Request::Dump(d), IMAGE_DEADLINE)? {
        Answer::Dumped => Ok(()),
        a => Err(CriuError::Criu(format!("{HELPER} answered {a:?}"))),
    }
}

fn converse(req: &Request, deadline: Duration) -> Result<Answer, CriuError> {
    converse_placed(req, deadline, |_| Ok(()))
}

fn converse_placed(
    req: &Request,
    deadline: Duration,
    place: impl FnOnce(i32) -> Result<(), String>,
) -> Result<Answer, CriuError> {
    let path = helper()?;
    // CRIU resolves a relative log file (its default configuration may name one) against
    // its working directory: the work (else image) directory, never the caller's.
    let cwd = match req {
        Request::Dump(d) => d.work_dir.as_ref().unwrap_or(&d.images_dir).clone(),
        Request::Restore(r) => r.work_dir.as_ref().unwrap_or(&r.images_dir).clone(),
        Request::Version { .. } => PathBuf::from("/"),
    };
    // A directory that is not there is the helper's to name (`--image-path …`), not a
    // failure to start it.
    let cwd = if cwd.is_dir() {
        cwd
    } else {
        PathBuf::from("/")
    };
    let mut child = Command::new(&path)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| CriuError::Run {
            helper: path.clone(),
            err,
        })?;
    if let Err(e) = place(i32::try_from(child.id()).unwrap_or(0)) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(CriuError::Criu(e));
    }
    let body = serde_json::to_vec(req).expect("serialises");
    let Some(out) = super::helper::ask(&mut child, &body, deadline) else {
        return Err(CriuError::Timeout {
            helper: path,
            secs: deadline.as_secs(),
        });
    };
    match serde_json::from_slice::<Reply>(&out) {
        Ok(r) => r.map_err(CriuError::Criu),
        Err(_) => Err(CriuError::NoAnswer { helper: path }),
    }
}
