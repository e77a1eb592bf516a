//! Container state under `<root>/<id>/`.
//!
//! | file          | what                                                                    |
//! |---------------|-------------------------------------------------------------------------|
//! | `state.json`  | the [`Record`]: what `state` prints plus what later calls need           |
//! | `config.json` | the effective spec that ran (what exec, delete's poststop hooks use)    |
//! | `policy.json` | the policy's [`crate::policy::Decision`] (`decision.rs`)               |
//! | `exec.fifo`   | present while the container is *created*; `start` opens and removes it  |
//! | `rootfs-budget.json` | the bounded root's share of `[fleet] rootfs_budget` (`budget.rs`) |
//!
//! Every command that changes a container holds an exclusive `flock` on the directory.
//! Status is never stored: it is read from the live process, identified by pid *and* its
//! start time, so a recycled pid is never mistaken for the container.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod backend;
pub mod budget;
mod decision;
pub mod idpool;

pub use backend::{Backend, Gvisor, PodRole};
pub use decision::Save;

use crate::linux::cgroups::Cgroup;
use crate::spec::Spec;

/// The record format this moat writes. A change an older moat would misread (a field
/// renamed, retyped or given a new meaning) bumps it and appends a step to [`MIGRATIONS`];
/// a field added with `#[serde(default)]` needs neither. A record of an older format is
/// read and migrated in memory (the file keeps its format until the next save); a newer
/// one is refused, since what it means is unknown here.
pub const FORMAT_VERSION: u32 = 1;

/// The format of the first released records: the oldest this moat reads.
pub const OLDEST_FORMAT: u32 = 1;

/// `MIGRATIONS[i]` turns a record of format `OLDEST_FORMAT + i` into one of the next
/// format, on its JSON (an old record need not parse as today's [`Record`]). Empty while
/// every released record is format 1.
const MIGRATIONS: &[fn(&mut serde_json::Value)] = &[];

pub const STATE_FILE: &str = "state.json";
pub const SPEC_FILE: &str = "config.json";
pub const FIFO_FILE: &str = "exec.fifo";
/// The compiled seccomp programs, in install order (`seccomp.bpf`, `seccomp.1.bpf`, …).
pub fn seccomp_file(i: usize) -> String {
    if i == 0 {
        "seccomp.bpf".into()
    } else {
        format!("seccomp.{i}.bpf")
    }
}

pub const POLICY_FILE: &str = "policy.json";
/// The host id range taken from the userns pool (`moat.userns=auto`), as [`idpool::IdRange`].
pub const USERNS_FILE: &str = "userns.json";
/// The bounded root's share of `[fleet] rootfs_budget`, as [`budget::Taken`].
pub const BUDGET_FILE: &str = "rootfs-budget.json";
/// The cgroup a create is about to make, written before it makes it: a create killed
/// before its first record leaves only this to say which directories are its own.
pub const CGROUP_PLANNED_FILE: &str = "cgroup.planned.json";

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("container does not exist")]
    NotExist,
    #[error("container with id exists: {0}")]
    Exists(String),
    #[error("invalid container id {0:?}: {1}")]
    InvalidId(String, &'static str),
    /// The io error is part of the line, not a source: the error printer joins sources
    /// with ": ", and the reason would appear twice.
    #[error("{what} {path}: {err}")]
    Io {
        what: &'static str,
        path: PathBuf,
        err: io::Error,
    },
    #[error("{path}: corrupt state: {reason}")]
    Corrupt { path: PathBuf, reason: Corruption },
}

/// What is wrong with a container's state directory (`StateError::Corrupt`).
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    #[error("no state file (interrupted create?)")]
    NoStateFile,
    #[error(transparent)]
    Record(RecordError),
    /// `config.json` as moat wrote it does not parse: the spec field and why.
    #[error(transparent)]
    Spec(crate::spec::JsonError),
    /// `policy.json` does not parse as a decision: the field and why.
    #[error("policy decision: {0}")]
    Decision(serde_json::Error),
}

/// Why a `state.json` cannot be read as a [`Record`].
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not JSON, or not a record of its format.
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("written by a newer moat (format {format}, this moat reads up to {FORMAT_VERSION})")]
    Newer { format: u32 },
    #[error(
        "unknown record format {format} (this moat reads {OLDEST_FORMAT} to {FORMAT_VERSION})"
    )]
    Unknown { format: u32 },
    /// An older record that does not parse once migrated.
    #[error("format {format} record: {error}")]
    Migrated {
        format: u32,
        error: serde_json::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StateError + 'a {
    move |err| StateError::Io {
        what,
        path: path.to_path_buf(),
        err,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

/// What moat remembers about a container between calls.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub format: u32,
    pub id: String,
    /// Host pid of the container init.
    pub pid: i32,
    /// The init's start time (clock ticks since boot, /proc/<pid>/stat field 22).
    pub pid_start: u64,
    pub bundle: PathBuf,
    pub rootfs: PathBuf,
    pub created: String,
    pub owner: String,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub cgroup: Option<Cgroup>,
    /// `--systemd-cgroup` as given at create; replayed by later calls.
    #[serde(default)]
    pub systemd_cgroup: bool,
    #[serde(default)]
    pub rootless: bool,
    /// Whether the init has its own pid namespace (then killing it kills all).
    #[serde(default)]
    pub own_pidns: bool,
    /// The hardening policy it was created under (`restricted` or `open`).
    #[serde(default = "open_policy")]
    pub policy: crate::policy::Mode,
    /// The caller's `NOTIFY_SOCKET` at create, relayed to by `start`.
    #[serde(default)]
    pub notify_socket: Option<String>,
    /// Which engine runs the container (chosen at create); later commands route by it.
    #[serde(default)]
    pub backend: Backend,
    /// Whether the saved spec holds a `poststart` or `poststop` hook, so that `start` and
    /// `delete` parse the saved config.json only to run one; `None` (a record written
    /// before this field, or by the gVisor path) means "read the spec to know".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_hooks: Option<bool>,
}

/// Records written before the policy existed ran the spec as written.
fn open_policy() -> crate::policy::Mode {
    crate::policy::Mode::Open
}

/// The JSON `state` prints, field for field as runc.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OciState<'a> {
    pub oci_version: &'static str,
    pub id: &'a str,
    pub pid: i32,
    pub status: &'static str,
    pub bundle: &'a Path,
    pub rootfs: &'a Path,
    pub created: &'a str,
    pub owner: &'a str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: &'a BTreeMap<String, String>,
}

/// runc's id rule (`^[\w+-.]+$`, never `.` or `..`; moat leaves out the `,` that runc's
/// character range `+-.` lets in), and no leading `-`: an id is passed on as an argument
/// (to runsc, to hooks' tools, in logs an engine parses), where it would read as a flag.
pub fn validate_id(id: &str) -> Result<(), StateError> {
    let bad = |why| Err(StateError::InvalidId(id.to_string(), why));
    let chars = "use letters, digits, '_', '+', '-' and '.'";
    if id.is_empty() || id.len() > 1024 || id == "." || id == ".." {
        return bad(chars);
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.'))
    {
        return bad(chars);
    }
    if id.starts_with('-') {
        return bad("an id must not begin with '-' (it would read as a flag)");
    }
    Ok(())
}

/// The bind mount of a gVisor container's control network namespace in its state
/// directory (`gvisor::control`).
pub const CONTROL_NETNS: &str = "control-netns";

/// Unmounts a namespace pin (lazily: a runsc call may still be in it); nothing when it
/// is not mounted or absent.
fn unpin(path: &Path) {
    if fs::symlink_metadata(path).is_err() {
        return;
    }
    if let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) {
        let _ = crate::linux::sys::umount2(&c, libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW);
    }
}

/// An open, locked container directory.
pub struct ContainerDir {
    pub path: PathBuf,
    /// Holds the flock for as long as the handle lives.
    lock: OwnedFd,
}

impl ContainerDir {
    /// Creates `<root>/<id>` exclusively and locks it. A second create of the same id fails
    /// here, before anything else happens.
    pub fn create(root: &Path, id: &str) -> Result<ContainerDir, StateError> {
        validate_id(id)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .map_err(io_err("cannot create state root", root))?;
        let path = root.join(id);
        // Between the mkdir and the flock, a `delete --force` may lock the directory
        // first, find no record (what a killed create leaves) and remove it: the lock is
        // then on a removed directory, and the id is free again.
        for _ in 0..3 {
            match fs::DirBuilder::new().mode(0o711).create(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(StateError::Exists(id.to_string()))
                }
                Err(e) => return Err(io_err("cannot create state directory", &path)(e)),
            }
            crate::linux::killpoint::stall("create", "parent", "StateDir.lock");
            match Self::lock(path.clone(), true) {
                Err(StateError::NotExist) => continue,
                r => return r,
            }
        }
        Err(StateError::Exists(id.to_string()))
    }

    /// Opens and locks an existing container directory.
    pub fn open(root: &Path, id: &str) -> Result<ContainerDir, StateError> {
        Self::open_with(root, id, true)
    }

    /// Opens without locking, for commands that only read (`state`, `list`): the record
    /// is replaced atomically, so a reader never sees a partial one.
    pub fn open_read(root: &Path, id: &str) -> Result<ContainerDir, StateError> {
        Self::open_with(root, id, false)
    }

    fn open_with(root: &Path, id: &str, lock: bool) -> Result<ContainerDir, StateError> {
        validate_id(id)?;
        let path = root.join(id);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => Self::lock(path, lock),
            Ok(_) => Err(StateError::NotExist),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(StateError::NotExist),
            Err(e) => Err(io_err("cannot open state directory", &path)(e)),
        }
    }

    fn lock(path: PathBuf, exclusive: bool) -> Result<ContainerDir, StateError> {
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    StateError::NotExist
                } else {
                    io_err("cannot open state directory", &path)(e)
                }
            })?;
        let lock: OwnedFd = dir.into();
        let dir = ContainerDir { path, lock };
        if exclusive {
            crate::linux::sys::flock_exclusive(dir.lock.as_fd())
                .map_err(io_err("cannot lock", &dir.path))?;
            dir.still_linked()?;
        }
        Ok(dir)
    }

    /// Takes the shared lock on a directory opened with [`ContainerDir::open_read`]:
    /// `exec` holds it while its process enters the container, so no command that locks
    /// exclusively (`delete` above all) runs between the cgroup placement and the pid
    /// namespace. [`StateError::NotExist`] if the container was deleted while waiting.
    pub fn lock_shared(&self) -> Result<(), StateError> {
        crate::linux::sys::flock_shared(self.lock.as_fd())
            .map_err(io_err("cannot lock", &self.path))?;
        self.still_linked()
    }

    /// A lock granted on a directory removed while the caller waited (a `delete` held it)
    /// is a lock on nothing: the container is gone, even if its id was created again.
    fn still_linked(&self) -> Result<(), StateError> {
        let st = crate::linux::sys::fstat(self.lock.as_fd())
            .map_err(io_err("cannot stat state directory", &self.path))?;
        if st.st_nlink == 0 {
            return Err(StateError::NotExist);
        }
        Ok(())
    }

    /// The directory's fd, which holds its lock: what `exec` keeps while its process is
    /// placed, after it has read everything it needs from the directory.
    pub fn into_lock(self) -> OwnedFd {
        self.lock
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.lock.as_fd()
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn load(&self) -> Result<Record, StateError> {
        let path = self.file(STATE_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            // A directory without a record is a create that was killed before it
            // finished: it exists (so delete can clean it) but has no process.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StateError::Corrupt {
                    path,
                    reason: Corruption::NoStateFile,
                })
            }
            Err(e) => return Err(io_err("cannot read", &path)(e)),
        };
        parse_record(&bytes).map_err(|e| StateError::Corrupt {
            path,
            reason: Corruption::Record(e),
        })
    }

    pub fn save(&self, rec: &Record) -> Result<(), StateError> {
        write_atomic(
            &self.file(STATE_FILE),
            &serde_json::to_vec(rec).expect("record serialises"),
        )
    }

    pub fn save_spec(&self, spec: &Spec) -> Result<(), StateError> {
        // Sized for a spec with a seccomp profile: one allocation instead of a chain of
        // doublings, each a copy onto fresh pages.
        let mut json = Vec::with_capacity(16 * 1024);
        serde_json::to_writer(&mut json, spec).expect("spec serialises");
        write_atomic(&self.file(SPEC_FILE), &json)
    }

    pub fn load_spec(&self) -> Result<Spec, StateError> {
        let path = self.file(SPEC_FILE);
        let bytes = fs::read(&path).map_err(io_err("cannot read", &path))?;
        Spec::parse_own(&bytes).map_err(|e| StateError::Corrupt {
            path,
            reason: Corruption::Spec(e),
        })
    }

    pub fn save_file(&self, name: &str, data: &[u8]) -> Result<(), StateError> {
        write_atomic(&self.file(name), data)
    }

    /// Writes a file that must not exist yet, in place (no temporary and rename, which
    /// cost a create and a rename each on ext4 with `discard`): only for files nobody
    /// reads before the record exists, since a reader could see them half-written.
    pub fn write_new(&self, name: &str, data: &[u8]) -> Result<(), StateError> {
        let path = self.file(name);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io_err("cannot write", &path))?;
        f.write_all(data).map_err(io_err("cannot write", &path))
    }

    /// Reads a file of the state directory; `None` when it does not exist.
    pub fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>, StateError> {
        let path = self.file(name);
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("cannot read", &path)(e)),
        }
    }

    /// Removes the directory and everything in it; the lock goes with the handle. A
    /// gVisor container's pinned control namespace ([`CONTROL_NETNS`]) is unmounted first.
    pub fn remove(self) -> Result<(), StateError> {
        unpin(&self.file(CONTROL_NETNS));
        fs::remove_dir_all(&self.path).map_err(io_err("cannot remove", &self.path))
    }
}

/// Parses a `state.json`: its format first, then the record, migrated to
/// [`FORMAT_VERSION`] when older. A current record is parsed once, straight into [`Record`].
pub(crate) fn parse_record(bytes: &[u8]) -> Result<Record, RecordError> {
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    let format = serde_json::from_slice::<Format>(bytes)
        .map_err(RecordError::Json)?
        .format;
    if format > FORMAT_VERSION {
        return Err(RecordError::Newer { format });
    }
    if format < OLDEST_FORMAT {
        return Err(RecordError::Unknown { format });
    }
    if format == FORMAT_VERSION {
        return serde_json::from_slice(bytes).map_err(RecordError::Json);
    }
    let mut rec: serde_json::Value = serde_json::from_slice(bytes).map_err(RecordError::Json)?;
    migrate(format, &mut rec);
    serde_json::from_value(rec).map_err(|error| RecordError::Migrated { format, error })
}

/// Brings the JSON of a record of format `from` (at least [`OLDEST_FORMAT`]) to
/// [`FORMAT_VERSION`], one [`MIGRATIONS`] step per format.
fn migrate(from: u32, rec: &mut serde_json::Value) {
    for (_, step) in (OLDEST_FORMAT..FORMAT_VERSION)
        .zip(MIGRATIONS)
        .filter(|(v, _)| *v >= from)
    {
        step(rec);
    }
    rec["format"] = FORMAT_VERSION.into();
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<(), StateError> {
    let tmp = path.with_extension("tmp");
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io_err("cannot write", &tmp))?;
    f.write_all(data).map_err(io_err("cannot write", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("cannot rename into place", path))
}

/// Writes `data` to the file `name` of the cache directory `dir` (`<root>/@cache/…`,
/// made 0700 when missing): into a temporary of this process first, then renamed, so a
/// reader sees the old content or the new one whole, never a mix of two writers'.
pub fn write_cache_file(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    fs::write(&tmp, data)?;
    fs::rename(&tmp, dir.join(name))
}

/// Writes a pid file as runc does: a dot-prefixed temporary in the same directory, renamed
/// into place, so a reader never sees a partial number.
pub fn write_pid_file(path: &Path, pid: i32) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}"));
    fs::write(&tmp, pid.to_string()).map_err(io_err("cannot write pid file", &tmp))?;
    fs::rename(&tmp, path).map_err(io_err("cannot write pid file", path))
}

/// What /proc says about a pid: `None` when gone, a zombie, or a different process.
pub fn process_start_time(pid: i32) -> Option<(char, u64)> {
    let stat = crate::linux::read_kernel_file(format!("/proc/{pid}/stat")).ok()?;
    // comm may contain spaces and parentheses: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    // rest starts at field 3 (state); starttime is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

impl Record {
    /// Whether `start` or `delete` may have a hook to run (read the saved spec to know).
    pub fn may_have_post_hooks(&self) -> bool {
        self.post_hooks != Some(false)
    }

    /// True when the recorded init is still this container's process and not a zombie.
    pub fn alive(&self) -> bool {
        self.pid > 0
            && matches!(process_start_time(self.pid),
                Some((state, start)) if start == self.pid_start && state != 'Z' && state != 'X')
    }

    /// The status, read from the kernel.
    pub fn status(&self, dir: &ContainerDir) -> Status {
        if !self.alive() {
            return Status::Stopped;
        }
        if dir.file(FIFO_FILE).exists() {
            return Status::Created;
        }
        if self.cgroup.as_ref().is_some_and(|c| c.is_frozen()) {
            return Status::Paused;
        }
        Status::Running
    }

    pub fn oci_state(&self, status: Status) -> OciState<'_> {
        OciState {
            oci_version: crate::spec::OCI_VERSION,
            id: &self.id,
            pid: if status == Status::Stopped {
                0
            } else {
                self.pid
            },
            status: status.as_str(),
            bundle: &self.bundle,
            rootfs: &self.rootfs,
            created: &self.created,
            owner: &self.owner,
            annotations: &self.annotations,
        }
    }
}

/// Ids of every container directory under the root, sorted; none for a root that does not
/// exist when `missing_ok`.
pub fn list_ids(root: &Path, missing_ok: bool) -> Result<Vec<String>, StateError> {
    let rd = match fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if missing_ok && e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("cannot read state root", root)(e)),
    };
    let mut ids: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|id| validate_id(id).is_ok())
        .collect();
    ids.sort();
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_rules() {
        for ok in ["a", "abc-1.2_x+y", &"f".repeat(64)] {
            validate_id(ok).unwrap();
        }
        for bad in [
            "", ".", "..", "a/b", "../x", "a b", "a\0b", "ä", "-x", "--help", "-",
        ] {
            assert!(validate_id(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn own_process_is_alive_and_pid_reuse_is_detected() {
        let pid = i32::try_from(std::process::id()).unwrap();
        let (_, start) = process_start_time(pid).unwrap();
        let mut rec = Record {
            format: FORMAT_VERSION,
            id: "t".into(),
            pid,
            pid_start: start,
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: String::new(),
            owner: String::new(),
            annotations: BTreeMap::new(),
            cgroup: None,
            systemd_cgroup: false,
            rootless: false,
            own_pidns: true,
            policy: crate::policy::Mode::Open,
            notify_socket: None,
            backend: Default::default(),
            post_hooks: None,
        };
        assert!(rec.alive());
        rec.pid_start += 1;
        assert!(
            !rec.alive(),
            "a different start time must read as another process"
        );
    }

    /// A record as the format-1 binary (afd98e2) writes it, for a native container on
    /// this hybrid host.
    const V1_RECORD: &str = r#"{"format":1,"id":"rec1","pid":18977,"pid_start":771878,"bundle":"/dev/shm/moat-rec.H1LN/b","rootfs":"/dev/shm/moat-rec.H1LN/b/rootfs","created":"2026-12-01T16:16:33.670360999Z","owner":"","annotations":{},"cgroup":{"path":"/moat/rec1","unified":false,"hierarchies":[{"mount":"/sys/fs/cgroup/cpu","controllers":["cpu"],"v2":false},{"mount":"/sys/fs/cgroup/cpuacct","controllers":["cpuacct"],"v2":false},{"mount":"/sys/fs/cgroup/cpuset","controllers":["cpuset"],"v2":false},{"mount":"/sys/fs/cgroup/memory","controllers":["memory"],"v2":false},{"mount":"/sys/fs/cgroup/devices","controllers":["devices"],"v2":false},{"mount":"/sys/fs/cgroup/freezer","controllers":["freezer"],"v2":false},{"mount":"/sys/fs/cgroup/blkio","controllers":["blkio"],"v2":false},{"mount":"/sys/fs/cgroup/pids","controllers":["pids"],"v2":false},{"mount":"/sys/fs/cgroup/systemd","controllers":["name=systemd"],"v2":false},{"mount":"/sys/fs/cgroup/unified","controllers":["hugetlb"],"v2":true}],"skipped":[]},"systemd_cgroup":false,"rootless":false,"own_pidns":true,"policy":"open","notify_socket":null,"backend":{"kind":"native"}}"#;

    #[test]
    fn a_format_1_record_is_read_and_migrates_to_the_current_format() {
        let rec = parse_record(V1_RECORD.as_bytes()).unwrap();
        assert_eq!(rec.format, FORMAT_VERSION);
        assert_eq!(
            (rec.id.as_str(), rec.pid, rec.pid_start),
            ("rec1", 18977, 771878)
        );
        assert_eq!(rec.policy, crate::policy::Mode::Open);
        assert!(rec.own_pidns && !rec.rootless && !rec.systemd_cgroup);
        assert_eq!(rec.backend, crate::gvisor::Backend::Native);
        let cg = rec.cgroup.as_ref().unwrap();
        assert_eq!((cg.path.as_str(), cg.hierarchies.len()), ("/moat/rec1", 10));
        // The migration of a format-1 record's JSON, whatever steps it takes, parses to
        // the same record as the direct read; and today's save writes what it read.
        let mut json: serde_json::Value = serde_json::from_str(V1_RECORD).unwrap();
        migrate(1, &mut json);
        let migrated: Record = serde_json::from_value(json).unwrap();
        assert_eq!(
            serde_json::to_value(&migrated).unwrap(),
            serde_json::to_value(&rec).unwrap()
        );
        if FORMAT_VERSION == 1 {
            assert_eq!(
                serde_json::to_value(&rec).unwrap(),
                serde_json::from_str::<serde_json::Value>(V1_RECORD).unwrap()
            );
        }
    }

    #[test]
    fn every_format_step_has_a_migration() {
        assert_eq!(
            MIGRATIONS.len(),
            usize::try_from(FORMAT_VERSION - OLDEST_FORMAT).unwrap()
        );
    }

    #[test]
    fn a_newer_or_unknown_format_is_refused_by_name() {
        let next = FORMAT_VERSION + 1;
        let newer = V1_RECORD.replacen(r#""format":1"#, &format!(r#""format":{next}"#), 1);
        assert_eq!(
            parse_record(newer.as_bytes()).unwrap_err().to_string(),
            format!(
                "written by a newer moat (format {next}, this moat reads up to {FORMAT_VERSION})"
            )
        );
        let zero = V1_RECORD.replacen(r#""format":1"#, r#""format":0"#, 1);
        assert!(parse_record(zero.as_bytes())
            .unwrap_err()
            .to_string()
            .starts_with("unknown record format 0"));
        let none = V1_RECORD.replacen(r#""format":1,"#, "", 1);
        assert!(parse_record(none.as_bytes())
            .unwrap_err()
            .to_string()
            .contains("format"));
    }

    #[test]
    fn create_twice_fails_and_keeps_the_first() {
        let root = std::env::temp_dir().join(format!("moat-state-test-{}", std::process::id()));
        let d = ContainerDir::create(&root, "x").unwrap();
        assert!(matches!(
            ContainerDir::create(&root, "x"),
            Err(StateError::Exists(_))
        ));
        assert!(d.path.is_dir());
        d.remove().unwrap();
        assert!(matches!(
            ContainerDir::open(&root, "x"),
            Err(StateError::NotExist)
        ));
        fs::remove_dir(&root).unwrap();
    }
}
