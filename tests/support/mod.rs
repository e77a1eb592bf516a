//! Shared helpers for the integration tests: real containers, run as root with the real
//! `moat` binary.
//!
//! * [`Ctx`]: one test's temp dir holding a bundle (a private copy of the cached busybox
//!   rootfs and a `config.json` built from `moat spec`) and a private `--root` state dir.
//!   Dropping it force-deletes every container left in its state dir and removes the dir.
//! * [`Container`]: a created container; dropping it runs `moat delete --force`.
//! * Every child process goes through [`spawn`], so the zombie reaper ([`reap`]) never
//!   steals a status that a `wait` in another thread is about to collect. The test process
//!   is a child subreaper (as conmon and the containerd shim are): container inits are
//!   reparented to it when `moat create` exits.
//!
//! * Written once here: the console socket ([`console_socket`], [`receive_fds`],
//!   [`read_pty`]), kill-and-reap ([`kill_and_wait`], [`wait_exit`]), fds leaked into moat
//!   ([`leak_fd`]), a number out of a probe's `key=N` output ([`count_in`], [`number_after`]).
//!
//! Each file in `tests/` includes this module; not every file uses every helper.
#![allow(dead_code)]

use std::collections::HashSet;
use std::fs;
use std::io::{IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

pub use serde_json::{json, Value};

/// Listening sockets from /proc and the sockprobe client (tests/sockets.rs).
pub mod sockets;
/// The egress tests' private network world (scripts/lib/networld).
pub mod world;

pub const MOAT: &str = env!("CARGO_BIN_EXE_moat");

/// How long any single moat call may take before the test fails (and the call is killed).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

fn next() -> usize {
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------------
// Root, subreaper, child processes

/// Every test that calls this is `#[ignore]`d, so a plain `cargo test` lists it as ignored
/// (skipped), never as passed; scripts/test runs them as root with `--include-ignored`. Run
/// that way without root, the test fails saying why. Returns true (callers keep their
/// `if !require_root() { return; }` shape).
pub fn require_root() -> bool {
    if !is_root() {
        panic!("this moat integration test needs root (it runs real containers): run it as root, as scripts/test does");
    }
    become_subreaper();
    true
}

/// Whether the test process runs as (effective) root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A tool or facility the test needs is missing: under scripts/test (`MOAT_TEST_STRICT=1`,
/// which installs every tool) that fails the test; elsewhere it prints a loud SKIPPED line
/// and the caller returns.
pub fn missing(what: &str) {
    if std::env::var_os("MOAT_TEST_STRICT").is_some() {
        panic!("{what} (MOAT_TEST_STRICT is set: scripts/test installs what the tests need)");
    }
    eprintln!("SKIPPED: {what}");
}

/// Makes the test process a child subreaper, once: orphaned container inits become our
/// children, as they do under conmon or the containerd shim.
pub fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER");
    });
}

/// Reaps orphans reparented to this process every 100 ms from a thread of its own, as
/// conmon and the containerd shim reap on SIGCHLD. runsc 20240729's `delete` polls a killed
/// sandbox until it is reaped (up to two minutes): with only [`reap`] calls between steps,
/// tests blocked in such deletes side by side wait for each other's reaps.
pub fn reap_in_background() {
    static ONCE: Once = Once::new();
    become_subreaper();
    ONCE.call_once(|| {
        std::thread::spawn(|| loop {
            std::thread::sleep(Duration::from_millis(100));
            reap();
        });
    });
}

/// Pids of children spawned through [`spawn`] and not yet waited for: the reaper leaves
/// them alone. Held across spawn+insert so the reaper never sees an unregistered child.
static SPAWNED: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn spawned() -> MutexGuard<'static, Option<HashSet<i32>>> {
    SPAWNED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spawns `cmd`, registering it so that [`reap`] does not collect it.
pub fn spawn(cmd: &mut Command) -> Child {
    try_spawn(cmd).unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"))
}

/// [`spawn`], with the error returned (a tool that may be missing).
///
/// This is the only place a test starts a process: `Command::spawn`, `output` and
/// `status` are refused by clippy (`clippy.toml`), because [`reap`], run by any test
/// thread, collects every zombie child it does not know, and a `Command`'s own wait then
/// fails with ECHILD (CI saw it: `bpftool: No child process`).
pub fn try_spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let mut g = spawned();
    // ETXTBSY: a write-open of the same inode elsewhere, even one that then fails with
    // EROFS on a read-only bind (security T1's watcher hammers exactly that), holds the
    // inode's write count for an instant; the execve is simply retried.
    let mut tries = 0;
    let child = loop {
        #[allow(clippy::disallowed_methods)] // the one registered spawn
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            r => break r?,
        }
    };
    g.get_or_insert_with(HashSet::new)
        .insert(i32::try_from(child.id()).unwrap());
    Ok(child)
}

/// Forgets a child from [`spawn`] (its `Child::id`) that has been waited for.
fn unregister(id: u32) {
    let pid = i32::try_from(id).unwrap();
    spawned().get_or_insert_with(HashSet::new).remove(&pid);
}

/// `Child::wait_with_output` for a child from [`spawn`], which it then forgets.
pub fn wait_output(child: Child) -> std::io::Result<std::process::Output> {
    let id = child.id();
    let out = child.wait_with_output();
    unregister(id);
    out
}

/// `Command::output` and `Command::status` for tests: the child is registered (see
/// [`try_spawn`]) until it has been waited for.
pub trait Run {
    /// As `Command::output`, but stdio is always set: stdin from /dev/null, stdout and
    /// stderr captured (for other stdio, [`spawn`] and [`wait_output`]).
    fn run_output(&mut self) -> std::io::Result<std::process::Output>;
    /// As `Command::status`: stdio inherited.
    fn run_status(&mut self) -> std::io::Result<ExitStatus>;
}

impl Run for Command {
    fn run_output(&mut self) -> std::io::Result<std::process::Output> {
        self.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        wait_output(try_spawn(self)?)
    }

    fn run_status(&mut self) -> std::io::Result<ExitStatus> {
        let mut child = try_spawn(self)?;
        let st = child.wait();
        unregister(child.id());
        st
    }
}

/// A pidfd for `pid`, or `None` when the process no longer exists.
pub fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes integers only.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(RawFd::try_from(fd).unwrap()) })
}

/// Waits until `pid` has exited (a zombie counts as exited). False on timeout.
pub fn wait_exit(pid: i32, timeout: Duration) -> bool {
    let Some(fd) = pidfd(pid) else {
        return true;
    };
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return true;
        }
        if n == 0 {
            return false;
        }
    }
}

/// Waits for a child from [`spawn`], killing it (and failing) after `timeout`.
pub fn wait_child(mut child: Child, timeout: Duration) -> ExitStatus {
    let pid = i32::try_from(child.id()).unwrap();
    if !wait_exit(pid, timeout) {
        kill_child(&mut child);
        panic!("process {pid} did not finish within {timeout:?}; killed it");
    }
    let st = child.wait().expect("wait");
    unregister(child.id());
    st
}

/// SIGKILLs a child from [`spawn`] and reaps it.
pub fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
    unregister(child.id());
}

/// SIGKILLs `pid` (not a child from [`spawn`]: a container process, an orphan) and waits
/// until it is gone or a zombie, then reaps whatever is ours. False on timeout.
pub fn kill_and_wait(pid: i32, timeout: Duration) -> bool {
    // SAFETY: kill takes integers only.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let gone = wait_exit(pid, timeout);
    reap();
    gone
}

/// Reaps every exited child that no [`wait_child`] is waiting for: container inits and
/// other orphans reparented to us as subreaper.
pub fn reap() {
    let me = i32::try_from(std::process::id()).unwrap();
    let Ok(rd) = fs::read_dir("/proc") else {
        return;
    };
    // Found without the lock (a scan of /proc is slow, and spawns wait on the lock);
    // checked against the registered children under it, so that a child registered by
    // now is left to its own wait.
    let zombies: Vec<i32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_state(pid) == Some(('Z', me)))
        .collect();
    let g = spawned();
    for pid in zombies {
        if !g.as_ref().is_some_and(|s| s.contains(&pid)) {
            // SAFETY: waitpid allows a null status pointer.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
        }
    }
}

/// (state, ppid) from /proc/<pid>/stat, `None` when the process is gone.
pub fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// A process that is gone or a zombie (PID 1 here reaps orphans late).
pub fn is_gone(pid: i32) -> bool {
    !matches!(proc_state(pid), Some((s, _)) if s != 'Z' && s != 'X')
}

// ---------------------------------------------------------------------------------------
// Commands

/// What a command left: exit code (128+N for a signal), stdout, stderr, and the files
/// they were written to (a detached container keeps writing to the create call's files).
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub out_file: PathBuf,
    pub err_file: PathBuf,
    pub what: String,
}

impl Out {
    /// Panics with everything known unless the command exited 0.
    #[track_caller]
    pub fn ok(self) -> Out {
        assert_eq!(self.code, 0, "{} failed: {self:#?}", self.what);
        self
    }

    /// Panics unless the command failed with runc's status for errors: 255 for an `exec`
    /// that never ran, 1 for everything else.
    #[track_caller]
    pub fn fails(self) -> Out {
        let want = if self.subcommand() == Some("exec") {
            255
        } else {
            1
        };
        assert_eq!(
            self.code, want,
            "{}: expected exit {want}: {self:#?}",
            self.what
        );
        self
    }

    /// The moat subcommand this was (`what` is the command line as `Command` prints it:
    /// quoted words, the binary, the global flags, then the subcommand).
    pub fn subcommand(&self) -> Option<&str> {
        let mut words = self.what.split(' ').map(|w| w.trim_matches('"'));
        words.find(|w| w.ends_with("/moat") || w.ends_with("/moat-open"))?;
        while let Some(w) = words.next() {
            match w {
                "--root" | "--log" | "--log-format" | "--rootless" | "--criu" => {
                    words.next();
                }
                _ if w.starts_with('-') => {}
                _ => return Some(w),
            }
        }
        None
    }

    /// The output file re-read now (a container started later may have added to it).
    pub fn stdout_now(&self) -> String {
        fs::read_to_string(&self.out_file).unwrap_or_default()
    }

    pub fn stderr_now(&self) -> String {
        fs::read_to_string(&self.err_file).unwrap_or_default()
    }

    /// stderr's lines, for the "exactly one error line" contract.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.is_empty()).collect()
    }
}

/// A [`std::process::Output`]'s stderr as text.
pub fn stderr_of(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn exit_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Runs `cmd` to completion with stdin from /dev/null and stdout/stderr to files under
/// `io_dir` (never pipes: a detached container inherits them and would hold them open).
/// These tests check runc semantics, so moat runs under an OPEN policy unless a test sets
/// `MOAT_CONFIG` itself (an empty value means moat's default, RESTRICTED).
pub fn policy_env(cmd: &mut Command) {
    static OPEN: OnceLock<PathBuf> = OnceLock::new();
    if cmd.get_envs().any(|(k, _)| k == "MOAT_CONFIG") {
        return;
    }
    let path = OPEN.get_or_init(|| {
        // One file for every test binary (the content never changes), written beside a
        // per-process name and renamed over it so a reader never sees it half-written.
        let p = target_dir().join("moat-test-open.toml");
        let tmp = target_dir().join(format!(".moat-test-open-{}.toml", std::process::id()));
        fs::write(&tmp, "default_policy = \"open\"\n").expect("write open config");
        fs::rename(&tmp, &p).expect("rename open config");
        p
    });
    cmd.env("MOAT_CONFIG", path);
}

pub fn run_cmd(cmd: Command, io_dir: &Path, timeout: Duration) -> Out {
    spawn_bg(cmd, io_dir).wait(timeout)
}

/// Runs a command on the host (ip, gcc, losetup, …: not a container's call) like
/// [`run_cmd`], its output kept in the returned `Out` only: the files it went to are
/// removed before returning.
pub fn run_host_cmd(cmd: Command, timeout: Duration) -> Out {
    let out = run_cmd(cmd, &tmp_base(), timeout);
    let _ = fs::remove_file(&out.out_file);
    let _ = fs::remove_file(&out.err_file);
    out
}

/// A network namespace the test made (`ip netns add`; a stale one of the same name, left
/// by a killed run, removed first), deleted on drop. The drop never panics: it may run
/// while a failed assertion unwinds.
pub struct NetNs(pub String);

impl NetNs {
    pub fn new(name: &str) -> NetNs {
        let mut del = Command::new("ip");
        del.args(["netns", "delete", name]);
        let _ = run_host_cmd(del, CALL_TIMEOUT);
        host(&["ip", "netns", "add", name]);
        NetNs(name.to_string())
    }

    /// Its file, as `ip netns` keeps it.
    pub fn path(&self) -> String {
        format!("/var/run/netns/{}", self.0)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "delete", &self.0]);
        let _ = run_host_cmd(cmd, CALL_TIMEOUT);
    }
}

/// Runs a host command (ip, mount, …) and panics if it fails.
#[track_caller]
pub fn host(args: &[&str]) -> String {
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]);
    run_host_cmd(cmd, CALL_TIMEOUT).ok().stdout
}

// ---------------------------------------------------------------------------------------
// Rootfs and bundles

/// The target directory (`…/debug/moat` → `…`).
fn target_dir() -> PathBuf {
    Path::new(MOAT)
        .parent()
        .and_then(Path::parent)
        .expect("moat binary lives in <target>/<profile>/")
        .to_path_buf()
}

/// The shared busybox rootfs, built once per run by `scripts/mkrootfs` (which is
/// idempotent and locks the directory, so concurrent test binaries are fine).
pub fn shared_rootfs() -> &'static Path {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS.get_or_init(|| {
        let dir = target_dir().join("moat-test-rootfs");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mkrootfs");
        let mut cmd = Command::new(script);
        cmd.arg(&dir);
        let out = run_host_cmd(cmd, Duration::from_secs(300));
        assert_eq!(out.code, 0, "scripts/mkrootfs failed: {}", out.stderr);
        dir
    })
}

/// Copies a rootfs: directories and symlinks recreated, small files copied, large files
/// (the busybox binary) hard-linked. Modes are kept; everything is owned by root anyway.
pub fn copy_tree(src: &Path, dst: &Path) {
    let meta = fs::symlink_metadata(src).expect("stat rootfs");
    fs::create_dir_all(dst).expect("mkdir");
    fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777)).expect("chmod");
    for e in fs::read_dir(src).expect("read rootfs") {
        let e = e.expect("entry");
        let (from, to) = (e.path(), dst.join(e.file_name()));
        let m = fs::symlink_metadata(&from).expect("stat");
        if m.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&from).expect("readlink"), &to)
                .expect("symlink");
        } else if m.is_dir() {
            copy_tree(&from, &to);
        } else if m.len() > 64 * 1024 {
            // Across filesystems (cache on disk, tests on tmpfs) a copy it is.
            if fs::hard_link(&from, &to).is_err() {
                fs::copy(&from, &to).expect("copy");
            }
        } else {
            fs::copy(&from, &to).expect("copy");
        }
    }
}

/// Where per-test directories go: `$MOAT_IT_TMPDIR`, else /dev/shm when it is a tmpfs
/// (a rootfs copy is ~270 symlinks: milliseconds on tmpfs, far more on this disk), else
/// the usual temp dir.
pub fn tmp_base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(d) = std::env::var_os("MOAT_IT_TMPDIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(d);
        }
        let shm = nix::sys::statfs::statfs("/dev/shm");
        if shm.is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC) {
            return PathBuf::from("/dev/shm");
        }
        std::env::temp_dir()
    })
    .clone()
}

/// A busybox bundle in `dir` made by `scripts/mkbundle DIR ARGS…` (the e2e scripts' bundle,
/// for tests that work without a [`Ctx`]), `env` set for the script.
#[track_caller]
pub fn mkbundle(dir: &Path, args: &[&str], env: &[(&str, &str)]) {
    let mut cmd = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mkbundle"));
    cmd.arg(dir).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_host_cmd(cmd, Duration::from_secs(300));
    assert_eq!(out.code, 0, "mkbundle failed: {}", out.stderr);
}

/// The config `moat spec` writes, read once.
pub fn moat_default_spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let dir = tmp_base().join(format!("moat-it-spec-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("mkdir");
        let mut cmd = Command::new(MOAT);
        cmd.args(["spec", "--bundle"]).arg(&dir);
        let out = run_cmd(cmd, &dir, CALL_TIMEOUT).ok();
        assert!(out.stdout.is_empty(), "spec printed {:?}", out.stdout);
        let v = serde_json::from_slice(&fs::read(dir.join("config.json")).expect("config"))
            .expect("moat spec writes JSON");
        fs::remove_dir_all(&dir).expect("rm");
        v
    })
}

/// The base config of every test: `moat spec`'s, with `terminal: false`, `args: ["true"]`, and a
/// cgroup namespace of its own on every host (`moat spec`, as runc's, lists one only on a
/// cgroup v2-only host), so that a test sees the same container on a hybrid host as on v2.
pub fn base_config() -> Value {
    let mut c = moat_default_spec().clone();
    c["process"]["terminal"] = json!(false);
    c["process"]["args"] = json!(["true"]);
    let ns = c["linux"]["namespaces"]
        .as_array_mut()
        .expect("moat spec lists namespaces");
    if !ns.iter().any(|n| n["type"] == "cgroup") {
        ns.push(json!({"type": "cgroup"}));
    }
    c
}

/// Sets `v` at a `/`-separated path, creating objects on the way (`/linux/resources/pids`).
pub fn set_at(root: &mut Value, path: &str, v: Value) {
    let mut cur = root;
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        if i == parts.len() - 1 {
            match cur {
                Value::Array(a) => {
                    let idx: usize = p.parse().expect("array index");
                    a[idx] = v;
                }
                _ => {
                    if !cur.is_object() {
                        *cur = json!({});
                    }
                    cur[*p] = v;
                }
            }
            return;
        }
        cur = match cur {
            Value::Array(a) => &mut a[p.parse::<usize>().expect("array index")],
            _ => {
                if !cur.is_object() {
                    *cur = json!({});
                }
                let o = cur.as_object_mut().expect("object");
                o.entry(p.to_string()).or_insert_with(|| json!({}))
            }
        };
    }
}

/// One test's world: temp dir, bundle, state root, config.
pub struct Ctx {
    pub dir: PathBuf,
    pub bundle: PathBuf,
    pub root: PathBuf,
    pub io: PathBuf,
    pub config: Value,
    tag: String,
    /// `MOAT_CONFIG` for every moat call made through [`Ctx::cmd`]; `None`: the OPEN test
    /// config (see [`policy_env`]).
    moat_config: Option<std::ffi::OsString>,
}

impl Ctx {
    /// A fresh bundle with its own rootfs copy. `tag` goes into ids and the dir name.
    pub fn new(tag: &str) -> Ctx {
        become_subreaper();
        let rootfs = shared_rootfs();
        let n = next();
        let dir = tmp_base().join(format!("moat-it-{}-{n}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let bundle = dir.join("bundle");
        let root = dir.join("state");
        let io = dir.join("io");
        fs::create_dir_all(&bundle).expect("mkdir bundle");
        fs::create_dir_all(&io).expect("mkdir io");
        // Reachable by mapped users (user namespace tests).
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).expect("chmod");
        copy_tree(rootfs, &bundle.join("rootfs"));
        Ctx {
            dir,
            bundle,
            root,
            io,
            config: base_config(),
            tag: format!("it{}-{n}-{tag}", std::process::id()),
            moat_config: None,
        }
    }

    /// A container id unique to this test run (cgroup paths are global).
    pub fn id(&self, name: &str) -> String {
        format!("{}-{name}", self.tag)
    }

    pub fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }

    /// Sets a config field (see [`set_at`]).
    pub fn set(&mut self, path: &str, v: Value) -> &mut Self {
        set_at(&mut self.config, path, v);
        self
    }

    pub fn args(&mut self, args: &[&str]) -> &mut Self {
        self.set("/process/args", json!(args))
    }

    /// `sh -c SCRIPT`.
    pub fn sh(&mut self, script: &str) -> &mut Self {
        self.args(&["sh", "-c", script])
    }

    /// Appends to an array field (created if missing).
    pub fn push(&mut self, path: &str, v: Value) -> &mut Self {
        let mut cur = &mut self.config;
        for p in path.trim_start_matches('/').split('/') {
            if !cur.is_object() {
                *cur = json!({});
            }
            cur = cur
                .as_object_mut()
                .expect("object")
                .entry(p.to_string())
                .or_insert(Value::Null);
        }
        if !cur.is_array() {
            *cur = json!([]);
        }
        cur.as_array_mut().expect("array").push(v);
        self
    }

    /// Removes a namespace type from `linux.namespaces`.
    pub fn without_ns(&mut self, typ: &str) -> &mut Self {
        let ns = self.config["linux"]["namespaces"]
            .as_array_mut()
            .expect("namespaces");
        ns.retain(|n| n["type"] != typ);
        self
    }

    /// Writes config.json unless it already holds this config; atomically (a temporary
    /// renamed into place), since threads of one test may share a bundle.
    pub fn write_config(&self) {
        let path = self.bundle.join("config.json");
        let bytes = serde_json::to_vec_pretty(&self.config).expect("json");
        if fs::read(&path).is_ok_and(|old| old == bytes) {
            return;
        }
        let tmp = self.bundle.join(format!(".config.json.{}", next()));
        fs::write(&tmp, &bytes).expect("write config.json");
        fs::rename(&tmp, &path).expect("rename config.json");
    }

    /// Runs this context's moat calls with `MOAT_CONFIG=config` instead of the OPEN test
    /// config; an empty value means moat's default policy, RESTRICTED.
    pub fn use_config(&mut self, config: impl Into<std::ffi::OsString>) -> &mut Self {
        self.moat_config = Some(config.into());
        self
    }

    /// Runs this context's moat calls under moat's default policy, RESTRICTED.
    pub fn restricted(&mut self) -> &mut Self {
        self.use_config("")
    }

    /// A moat command with `--root` set, ready for more args.
    pub fn cmd(&self) -> Command {
        self.cmd_with(Path::new(MOAT))
    }

    /// Like [`Ctx::cmd`], running the moat binary at `bin` (a copy, for instance).
    pub fn cmd_with(&self, bin: &Path) -> Command {
        let mut c = Command::new(bin);
        c.arg("--root").arg(&self.root);
        if let Some(cfg) = &self.moat_config {
            c.env("MOAT_CONFIG", cfg);
        }
        c
    }

    /// Runs `moat --root <root> ARGS…` (config.json is written first).
    pub fn moat(&self, args: &[&str]) -> Out {
        self.write_config();
        let mut c = self.cmd();
        c.args(args);
        run_cmd(c, &self.io, CALL_TIMEOUT)
    }

    /// Runs a prepared command (from [`Ctx::cmd`]) with the same io handling.
    pub fn run(&self, c: Command) -> Out {
        self.write_config();
        run_cmd(c, &self.io, CALL_TIMEOUT)
    }

    /// `moat --root <root> ARGS…` in the background (config.json is written first).
    pub fn moat_bg(&self, args: &[&str]) -> Running {
        self.write_config();
        let mut c = self.cmd();
        c.args(args);
        spawn_bg(c, &self.io)
    }

    pub fn bundle_str(&self) -> String {
        self.bundle.to_str().expect("utf-8").to_string()
    }

    /// `moat create`; the guard force-deletes the container when dropped.
    pub fn create(&self, name: &str) -> (Container, Out) {
        let id = self.id(name);
        let b = self.bundle.to_str().expect("utf-8").to_string();
        let out = self.moat(&["create", "--bundle", &b, &id]);
        (self.guard(&id), out)
    }

    /// `moat create` that must succeed.
    #[track_caller]
    pub fn create_ok(&self, name: &str) -> Container {
        let (mut c, out) = self.create(name);
        c.out = Some(out.ok());
        c
    }

    /// `moat create --console-socket` of `name` (`process.terminal` set by the caller):
    /// the guard, the create call's output, and the fds moat sent over the socket (`None`
    /// when nothing came within 20 s).
    pub fn create_with_console(&self, name: &str) -> (Container, Out, Option<Vec<OwnedFd>>) {
        let (sock, listener) = console_socket(&self.dir);
        let id = self.id(name);
        let b = self.bundle_str();
        let sock = sock.to_str().expect("utf-8");
        let create = self.moat_bg(&["create", "--console-socket", sock, "--bundle", &b, &id]);
        let c = self.guard(&id);
        let fds = receive_fds(&listener, Duration::from_secs(20));
        (c, create.wait(CALL_TIMEOUT), fds)
    }

    /// A delete guard for `id` in this context's state root.
    pub fn guard(&self, id: &str) -> Container {
        Container {
            id: id.to_string(),
            root: self.root.clone(),
            io: self.io.clone(),
            out: None,
        }
    }

    /// Path of the container's state directory.
    pub fn state_dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// Asserts that create left nothing behind for `id`: no state dir, no cgroup.
    #[track_caller]
    pub fn assert_no_trace(&self, id: &str) {
        let left = self.traces(id);
        assert!(left.is_empty(), "{id} left behind: {}", left.join("; "));
    }

    /// The leak auditor, scoped to this test's root, id and cgroup subtree: what is still
    /// there of `id` — its state dir, its cgroup in any hierarchy (`/moat/<id>` or `/<id>`, below
    /// the fleet budget's `/moat` too) and its DNS forwarder's next to it (`…@dns`), a
    /// process in such a cgroup, a mount under this
    /// test's directory, a range of the userns pool or a share of the rootfs budget held
    /// for it.
    pub fn traces(&self, id: &str) -> Vec<String> {
        let mut left = Vec::new();
        if self.state_dir(id).exists() {
            left.push(format!("state dir {}", self.state_dir(id).display()));
        }
        let cg_suffix = format!("/moat/{id}");
        let mut hierarchies = vec![PathBuf::from("/sys/fs/cgroup")];
        if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
            hierarchies.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
        // `/<id>` too: where runsc puts a gVisor sandbox whose spec names no cgroupsPath
        // (moat's OPEN policy places none).
        let top = format!("/{id}");
        // The DNS forwarder's cgroup, next to the container's (`<path>@dns`).
        let (fwd, fwd_top) = (format!("{cg_suffix}@dns"), format!("{top}@dns"));
        for h in hierarchies {
            for p in [&cg_suffix, &top, &fwd, &fwd_top] {
                let cg = h.join(p.trim_start_matches('/'));
                if cg.is_dir() {
                    left.push(format!("cgroup {}", cg.display()));
                }
            }
        }
        if let Ok(rd) = fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let cgs = fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
                let ours = cgs.lines().any(|l| {
                    let p = l.splitn(3, ':').nth(2).unwrap_or("");
                    [&cg_suffix, &top, &fwd, &fwd_top]
                        .iter()
                        .any(|c| p == c.as_str() || p.starts_with(&format!("{c}/")))
                });
                if ours && !is_gone(pid) {
                    left.push(format!("process {pid} in {cg_suffix} or {fwd}"));
                }
            }
        }
        // moat's mounts on the host side: in the state root, or below the bundle's rootfs
        // (a test's own mounts elsewhere in its directory are its own).
        let state = format!("{}/", self.root.display());
        let below_rootfs = format!("{}/", self.bundle.join("rootfs").display());
        for l in fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
        {
            let mnt = l.split(' ').nth(4).unwrap_or("");
            // Another gVisor container's pinned control namespace is that container's.
            let others_pin = mnt
                .strip_prefix(&state)
                .and_then(|r| r.strip_suffix("/control-netns"))
                .is_some_and(|other| other != id && !other.contains('/'));
            if others_pin {
                continue;
            }
            if mnt.starts_with(&state) || mnt.starts_with(&below_rootfs) {
                left.push(format!("mount {mnt}"));
            }
        }
        // A process rooted in this container's rootfs though outside its cgroup (a
        // half-made init, an exec'd process that escaped the cgroup): it would hold the
        // container's namespaces (its netns among them) alive.
        let rootfs = fs::canonicalize(self.bundle.join("rootfs")).unwrap_or_default();
        if let Ok(rd) = fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
                let mentions = |b: &[u8]| cmdline.windows(b.len()).any(|w| w == b);
                let in_rootfs = fs::read_link(e.path().join("root"))
                    .is_ok_and(|r| !rootfs.as_os_str().is_empty() && r.starts_with(&rootfs));
                // runsc's sandbox and gofer name the test's root (`<root>/@runsc`) and the id.
                let runsc = cmdline.starts_with(b"runsc")
                    && mentions(self.root.as_os_str().as_encoded_bytes())
                    && mentions(id.as_bytes());
                if (in_rootfs || runsc)
                    && !is_gone(pid)
                    && !left
                        .iter()
                        .any(|l| l.starts_with(&format!("process {pid} ")))
                {
                    left.push(format!(
                        "process {pid} of {id} ({})",
                        if runsc {
                            "runsc"
                        } else {
                            "rooted in its rootfs"
                        }
                    ));
                }
            }
        }
        // A namespace kept by a bind mount (nsfs) of this test's, or one named after the id
        // (`ip netns`' /run/netns/<id>).
        let dir = format!("{}/", self.dir.display());
        for l in fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
        {
            let mnt = l.split(' ').nth(4).unwrap_or("");
            let fstype = l
                .split(" - ")
                .nth(1)
                .and_then(|t| t.split(' ').next())
                .unwrap_or("");
            if fstype == "nsfs" && (mnt.starts_with(&dir) || mnt.ends_with(&format!("/{id}"))) {
                left.push(format!("namespace mount {mnt}"));
            }
        }
        // Fifos and temporary files of the id next to its state dir (`.<id>…`, `<id>.tmp`),
        // and runsc's own files for it under `<root>/@runsc`.
        for d in [self.root.clone(), self.root.join("@runsc")] {
            if let Ok(rd) = fs::read_dir(&d) {
                for e in rd.flatten() {
                    let n = e.file_name().to_string_lossy().into_owned();
                    if n != id && n.contains(id) {
                        left.push(format!("file {}", e.path().display()));
                    }
                }
            }
        }
        // The host-wide userns pool (`/run/moat-userns/<start>`: {"start","size","root","id"}).
        let root = fs::canonicalize(&self.root).unwrap_or_else(|_| self.root.clone());
        if let Ok(rd) = fs::read_dir("/run/moat-userns") {
            for e in rd.flatten() {
                let Ok(v) =
                    serde_json::from_slice::<Value>(&fs::read(e.path()).unwrap_or_default())
                else {
                    continue;
                };
                if v["id"] == id && Path::new(v["root"].as_str().unwrap_or("")) == root {
                    left.push(format!("userns pool allocation {}", e.path().display()));
                }
            }
        }
        // The host-wide rootfs budget (`/run/moat-rootfs/<n>`: {"bytes","root","id"}).
        if let Ok(rd) = fs::read_dir("/run/moat-rootfs") {
            for e in rd.flatten() {
                let Ok(v) =
                    serde_json::from_slice::<Value>(&fs::read(e.path()).unwrap_or_default())
                else {
                    continue;
                };
                if v["id"] == id && Path::new(v["root"].as_str().unwrap_or("")) == root {
                    left.push(format!("rootfs budget share {}", e.path().display()));
                }
            }
        }
        left
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // Anything a test left (a guard forgotten, a panic mid-way): force-delete it.
        if let Ok(rd) = fs::read_dir(&self.root) {
            for e in rd.flatten() {
                // `@cache`, `@runsc`: moat's own entries, never a container id.
                if let Some(id) = e.file_name().to_str().filter(|n| !n.starts_with('@')) {
                    force_delete(&self.root, &self.io, id);
                }
            }
        }
        reap();
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("warning: cannot remove {}: {e}", self.dir.display());
        }
    }
}

fn force_delete(root: &Path, io: &Path, id: &str) {
    let mut c = Command::new(MOAT);
    c.arg("--root").arg(root).args(["delete", "--force", id]);
    let out = run_cmd(c, io, CALL_TIMEOUT);
    if out.code != 0 {
        eprintln!("warning: delete --force {id}: {}", out.stderr);
    }
}

/// A container in some state dir; dropping it runs `moat delete --force`.
pub struct Container {
    pub id: String,
    pub root: PathBuf,
    io: PathBuf,
    /// The create call's output (the container's stdout/stderr go to the same files).
    pub out: Option<Out>,
}

impl Container {
    pub fn moat(&self, args: &[&str]) -> Out {
        let mut c = Command::new(MOAT);
        c.arg("--root").arg(&self.root).args(args);
        run_cmd(c, &self.io, CALL_TIMEOUT)
    }

    #[track_caller]
    pub fn start(&self) -> Out {
        self.moat(&["start", &self.id]).ok()
    }

    pub fn kill(&self, sig: &str) -> Out {
        self.moat(&["kill", &self.id, sig])
    }

    pub fn delete(&self) -> Out {
        self.moat(&["delete", &self.id])
    }

    /// `moat state` parsed.
    #[track_caller]
    pub fn state(&self) -> Value {
        let out = self.moat(&["state", &self.id]).ok();
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("state is not JSON ({e}): {:?}", out.stdout))
    }

    #[track_caller]
    pub fn status(&self) -> String {
        self.state()["status"]
            .as_str()
            .expect("status is a string")
            .to_string()
    }

    #[track_caller]
    pub fn pid(&self) -> i32 {
        i32::try_from(self.state()["pid"].as_i64().expect("pid")).expect("pid")
    }

    /// Waits until the init has exited and `state` says stopped.
    #[track_caller]
    pub fn wait_stopped(&self, timeout: Duration) {
        let st = self.state();
        if st["status"] != "stopped" {
            let pid = i32::try_from(st["pid"].as_i64().expect("pid")).expect("pid");
            assert!(
                wait_exit(pid, timeout),
                "container {} (pid {pid}) still running after {timeout:?}",
                self.id
            );
        }
        reap();
        assert_eq!(self.status(), "stopped");
    }

    /// The container's stdout so far (it writes to the create call's stdout file).
    pub fn stdout(&self) -> String {
        self.out
            .as_ref()
            .map(|o| o.stdout_now())
            .unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        self.out
            .as_ref()
            .map(|o| o.stderr_now())
            .unwrap_or_default()
    }

    /// start, wait for the exit, and return the container's stdout.
    #[track_caller]
    pub fn start_and_wait(&self) -> String {
        self.start();
        self.wait_stopped(Duration::from_secs(20));
        self.stdout()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if self.root.join(&self.id).exists() {
            force_delete(&self.root, &self.io, &self.id);
        }
    }
}

/// Creates, starts and waits for a container of `ctx`'s current config; returns its
/// stdout and stderr. Fails the test (with moat's stderr) if create fails.
#[track_caller]
pub fn run_to_end(ctx: &Ctx, name: &str) -> (String, String) {
    let c = ctx.create_ok(name);
    let out = c.start_and_wait();
    let err = c.stderr();
    let d = c.delete();
    assert_eq!(d.code, 0, "delete: {}", d.stderr);
    (out, err)
}

/// Host `/proc/self/ns/<kind>` link text, e.g. `net:[4026531840]`.
pub fn host_ns(kind: &str) -> String {
    fs::read_link(format!("/proc/self/ns/{kind}"))
        .expect("readlink ns")
        .to_string_lossy()
        .into_owned()
}

/// The lines of /proc/<pid>/cgroup as (controllers, path).
pub fn proc_cgroups(pid: i32) -> Vec<(String, String)> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _ = it.next()?;
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}

/// `/sys/fs/cgroup/<controller>/<path>` of `pid`'s v1 cgroup for `controller`.
pub fn v1_cgroup_dir(pid: i32, controller: &str) -> Option<PathBuf> {
    proc_cgroups(pid)
        .into_iter()
        .find(|(ctrls, _)| ctrls.split(',').any(|c| c == controller))
        .map(|(ctrls, path)| {
            Path::new("/sys/fs/cgroup")
                .join(ctrls)
                .join(path.trim_start_matches('/'))
        })
}

/// Reads a whole file that must exist.
#[track_caller]
pub fn read(p: impl AsRef<Path>) -> String {
    let p = p.as_ref();
    let mut s = String::new();
    fs::File::open(p)
        .and_then(|mut f| f.read_to_string(&mut s))
        .unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    s
}

/// The BPF programs attached to the cgroup v2 directory `dir`, as (id, name), read by
/// `bpftool` (the tests hold no `unsafe`); `None`, said loudly, without bpftool.
pub fn bpf_progs_attached(dir: &Path) -> Option<Vec<(u64, String)>> {
    let out = match Command::new("bpftool")
        .args(["-j", "cgroup", "show"])
        .arg(dir)
        .run_output()
    {
        Ok(o) => o,
        Err(e) => {
            missing(&format!("bpftool ({e}): the BPF programs' leak check"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "bpftool cgroup show {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Array(Vec::new()));
    Some(
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
            .collect(),
    )
}

/// Whether the kernel still holds BPF program `id` (attached, pinned or open anywhere).
pub fn bpf_prog_exists(id: u64) -> bool {
    Command::new("bpftool")
        .args(["prog", "show", "id", &id.to_string()])
        .run_output()
        .is_ok_and(|o| o.status.success())
}

/// The programs of `progs` the kernel has not freed within `timeout` (a removed cgroup's
/// programs are released by a kernel worker, a moment after the rmdir).
pub fn bpf_progs_left(progs: &[(u64, String)], timeout: Duration) -> Vec<(u64, String)> {
    let mut left = progs.to_vec();
    wait_until(timeout, || {
        left.retain(|(id, _)| bpf_prog_exists(*id));
        left.is_empty()
    });
    left
}

/// Polls `f` every 10 ms until it is true; false after `timeout`.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A moat call running in the background (a foreground `run`, a create to interrupt).
pub struct Running {
    pub child: Option<Child>,
    pub out_file: PathBuf,
    pub err_file: PathBuf,
    pub what: String,
}

impl Running {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.as_ref().expect("not waited yet").id()).unwrap()
    }

    /// Waits for the call to end (at most `timeout`).
    pub fn wait(mut self, timeout: Duration) -> Out {
        let child = self.child.take().expect("waited twice");
        let code = exit_code(wait_child(child, timeout));
        Out {
            code,
            stdout: fs::read_to_string(&self.out_file).unwrap_or_default(),
            stderr: fs::read_to_string(&self.err_file).unwrap_or_default(),
            out_file: self.out_file.clone(),
            err_file: self.err_file.clone(),
            what: self.what.clone(),
        }
    }

    pub fn stdout_now(&self) -> String {
        fs::read_to_string(&self.out_file).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_child(&mut c);
        }
    }
}

/// Starts `cmd` in the background with the same stdio handling as [`run_cmd`].
pub fn spawn_bg(mut cmd: Command, io_dir: &Path) -> Running {
    policy_env(&mut cmd);
    let n = next();
    let out_file = io_dir.join(format!("{n}.out"));
    let err_file = io_dir.join(format!("{n}.err"));
    let what = format!("{cmd:?}");
    cmd.stdin(Stdio::null())
        .stdout(fs::File::create(&out_file).expect("stdout file"))
        .stderr(fs::File::create(&err_file).expect("stderr file"));
    let child = spawn(&mut cmd);
    Running {
        child: Some(child),
        out_file,
        err_file,
        what,
    }
}

/// Runs `f` in the spawned child right before exec: for leaking fds into moat.
///
/// # Safety
/// `f` runs between fork and exec and must only make async-signal-safe calls.
pub unsafe fn before_exec<F>(cmd: &mut Command, f: F)
where
    F: FnMut() -> std::io::Result<()> + Send + Sync + 'static,
{
    cmd.pre_exec(f);
}

/// In moat's child, right before exec: `fd` duplicated onto every number in `targets`,
/// without close-on-exec (a careless caller leaking fds).
pub fn leak_fd(cmd: &mut Command, fd: i32, targets: std::ops::RangeInclusive<i32>) {
    // SAFETY: the hook only calls dup2/fcntl, which are async-signal-safe.
    unsafe {
        before_exec(cmd, move || {
            for t in targets.clone() {
                // `fd` itself may be one of the targets: then only its close-on-exec goes.
                if (t != fd && libc::dup2(fd, t) < 0) || libc::fcntl(t, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------------------------------
// Console socket

/// A `--console-socket` for a test: `<dir>/console.sock` (a stale one removed), listening.
pub fn console_socket(dir: &Path) -> (PathBuf, UnixListener) {
    let sock = dir.join("console.sock");
    let _ = fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).expect("bind console socket");
    (sock, listener)
}

/// Waits up to `timeout` for one connection on `l` and returns the fds its first message
/// carries (SCM_RIGHTS): the pty master moat sends over `--console-socket`. `None` when
/// nobody connected in time or no message came.
pub fn receive_fds(l: &UnixListener, timeout: Duration) -> Option<Vec<OwnedFd>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut p = libc::pollfd {
        fd: l.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd, for the duration of the call.
    if unsafe { libc::poll(&mut p, 1, ms) } != 1 {
        return None;
    }
    let (conn, _) = l.accept().expect("accept");
    let mut buf = [0u8; 256];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .ok()?;
    let mut fds = Vec::new();
    for c in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(got) = c {
            fds.extend(
                got.into_iter()
                    // SAFETY: SCM_RIGHTS just installed it in our table; nothing else owns it.
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Some(fds)
}

/// Reads a pty master until the last peer fd closes (EIO) or `timeout` passes. Returns
/// what was read (CRLF as LF) and whether the peer side closed.
pub fn read_pty(master: &OwnedFd, timeout: Duration) -> (String, bool) {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    let closed = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut p = libc::pollfd {
            fd: master.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd, for the duration of the call.
        if left.is_zero() || unsafe { libc::poll(&mut p, 1, ms) } == 0 {
            break false;
        }
        let mut buf = [0u8; 4096];
        // SAFETY: reads at most buf.len() bytes into buf.
        let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            out.extend_from_slice(&buf[..usize::try_from(n).unwrap()]);
            continue;
        }
        let e = std::io::Error::last_os_error();
        if n == 0 || e.raw_os_error() == Some(libc::EIO) {
            break true;
        }
        if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        panic!("read pty master: {e}");
    };
    (String::from_utf8_lossy(&out).replace("\r\n", "\n"), closed)
}

// ---------------------------------------------------------------------------------------
// Probe output

/// The number `N` of the field `key=N` in a space-separated summary line (a probe's
/// `env-watch seen=3 marks=1 …`); panics when the line has none.
#[track_caller]
pub fn count_in(summary: &str, key: &str) -> u64 {
    summary
        .split(' ')
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {summary}"))
}

/// The number on the first line of `out` that starts with `prefix` (`checked=` → the
/// `42` of `checked=42`); `None` without one.
pub fn number_after(out: &str, prefix: &str) -> Option<usize> {
    out.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|n| n.parse().ok())
}

/// A fixture of `tests/support/<source>` built with `gcc -static` into the target dir as
/// `<name>`, once per run of the calling test binary; `None` after a loud [`missing`]
/// without a compiler or static libc.
pub fn static_fixture(source: &str, name: &str) -> Option<PathBuf> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(source);
    let dir = Path::new(MOAT).parent().expect("target dir");
    let out = dir.join(name);
    // Apart per call: the tests of one binary run side by side and may build the same one.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!("{name}.{}.{n}", std::process::id()));
    let mut cmd = Command::new("gcc");
    cmd.args(["-static", "-O2", "-o"]).arg(&tmp).arg(&src);
    let res = run_host_cmd(cmd, Duration::from_secs(120));
    if res.code != 0 {
        missing(&format!(
            "cannot build {source} with gcc -static (install gcc and libc6-dev): {}",
            res.stderr
        ));
        let _ = fs::remove_file(&tmp);
        return None;
    }
    fs::rename(&tmp, &out).expect("rename fixture");
    Some(out)
}
