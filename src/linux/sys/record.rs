//! A recording fake of `sys` for unit tests (compiled only under `cfg(test)`): the order
//! of the kernel calls a sequence makes, checked without a kernel and without root.
//!
//! While a [`Fake`] runs a closure on the current thread, every `sys` wrapper appends a
//! [`Call`] (its name and the arguments that decide order and security: flags, path or
//! name, namespace type, resource, capability masks, ids; descriptors by the small names
//! the fake handed out) and returns a scripted or default result **without entering the
//! kernel**. With no recording active on the thread the wrappers run the real call, so
//! every other test is unaffected; the real binary contains none of this.
//!
//! The hook is the first statement of every wrapper: [`fake!`] (record and return a fake
//! result) or [`not_faked!`] (a call with no sensible fake, e.g. `spawn`: under a
//! recording it panics "not faked: <name>", so a sequence that reaches it fails the test
//! instead of changing the host). `tests::every_wrapper_has_the_hook` reads the sources of
//! `sys/` and fails for a `pub fn` without one, so a new wrapper cannot forget it.
//!
//! A call that reaches the kernel *around* `sys` (a `nix::` or `std::fs` call not yet
//! routed through it) is stopped too: [`Fake::run`] runs the closure on a thread of its own
//! behind a per-thread seccomp filter that hands every host-changing syscall ([`GUARDED`])
//! to a supervisor, which answers EPERM and makes the run panic "not faked: <syscall>". So
//! a recorded test is safe as root: it never sets the host's name, mounts, joins a
//! namespace or signals a process.
//!
//! Descriptors the fake returns are real and harmless: close-on-exec duplicates of an
//! `O_PATH` descriptor of an empty temporary directory, so code that closes, borrows or
//! `as_fd`s them works, and nothing can be read, written or mounted through them.
//!
//! The extension point for sequence tests: [`Fake::run`] returns the calls, and
//! [`assert_before`], [`position`], [`names`] state order relations over them (models:
//! youki's `TestHelperSyscall`, crun's `tests/init.c`).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// One recorded kernel call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: &'static str,
    /// `(argument, value)` in the wrapper's order; descriptors as `fdN` (handed out by the
    /// fake), their given name ([`Fake::name_fd`], [`fd`]) or `AT_FDCWD`.
    pub args: Vec<(&'static str, String)>,
    /// The descriptor the fake returned, if any.
    pub ret: Option<String>,
}

impl Call {
    /// The value of argument `name`.
    pub fn arg(&self, name: &str) -> Option<&str> {
        self.args
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}(", self.name)?;
        for (i, (k, v)) in self.args.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        write!(f, ")")?;
        if let Some(r) = &self.ret {
            write!(f, " -> {r}")?;
        }
        Ok(())
    }
}

/// What a faked call answers.
#[derive(Debug, Clone)]
// Part of the extension point: not every answer is scripted by today's tests.
#[allow(dead_code)]
pub enum Reply {
    /// Success with the wrapper's default value (0, an empty buffer, a zeroed struct, a
    /// new fake descriptor, the full length for a write, `Forked::Child` for a clone).
    Default,
    /// Failure with this errno.
    Err(i32),
    /// Success with this number (a return value, a mount id; for a seccomp filter with a
    /// listener non-zero means "return a listener fd"; for a clone the child's pid, 0 the
    /// child).
    Int(i64),
    /// Success with these bytes (a read, a link's text, the working directory).
    Bytes(Vec<u8>),
    /// An `fstat` answer.
    Stat { mode: u32, rdev: u64, ino: u64 },
    /// An `fstatfs` answer: the filesystem's magic.
    Statfs(u64),
}

struct Recorder {
    calls: Vec<Call>,
    fd_names: HashMap<RawFd, String>,
    next_fd: u32,
    /// The `O_PATH` descriptor of an empty directory every fake fd duplicates.
    base: OwnedFd,
    dir: std::path::PathBuf,
    always: HashMap<&'static str, Reply>,
    once: HashMap<&'static str, VecDeque<Reply>>,
    after: Vec<(&'static str, &'static str, Reply)>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Whether a recording is active on this thread.
pub fn active() -> bool {
    ACTIVE.with(|a| a.borrow().is_some())
}

/// A fake kernel for one closure: scripted replies, then [`Fake::run`].
#[derive(Default)]
pub struct Fake {
    always: HashMap<&'static str, Reply>,
    once: HashMap<&'static str, VecDeque<Reply>>,
    after: Vec<(&'static str, &'static str, Reply)>,
    names: Vec<(RawFd, String)>,
}

impl Fake {
    pub fn new() -> Fake {
        Fake::default()
    }

    /// Every call of `name` answers `reply` (unless a [`Fake::then`] reply is queued).
    pub fn reply(mut self, name: &'static str, reply: Reply) -> Fake {
        self.always.insert(name, reply);
        self
    }

    /// The next call of `name` answers `reply` (queued, one per call).
    pub fn then(mut self, name: &'static str, reply: Reply) -> Fake {
        self.once.entry(name).or_default().push_back(reply);
        self
    }

    /// Once a call named `trigger` is made, the next call of `name` answers `reply`
    /// (queued as by [`Fake::then`] at that moment): an answer that depends on where in a
    /// long sequence the call comes, such as the mount ids `pivot_root` must see differ.
    pub fn after(mut self, trigger: &'static str, name: &'static str, reply: Reply) -> Fake {
        self.after.push((trigger, name, reply));
        self
    }

    /// Records the descriptor `fd` (one the test made) as `name`.
    #[allow(dead_code)] // extension point
    pub fn name_fd(mut self, fd: BorrowedFd<'_>, name: &str) -> Fake {
        self.names.push((fd.as_raw_fd(), name.to_string()));
        self
    }

    /// Runs `f` with the fake active; returns its result and the calls it made, in order.
    ///
    /// `f` runs on a thread of its own, behind a seccomp filter (per thread, with
    /// no_new_privs, both gone with the thread) that hands every host-changing syscall to a
    /// supervisor ([`GUARDED`]): a call that reaches the kernel around `sys` (a `nix::` or
    /// `std::fs` call not yet routed) fails with EPERM instead of changing the machine, and
    /// `run` then panics "not faked: <syscall>".
    pub fn run<T: Send>(self, f: impl FnOnce() -> T + Send) -> (T, Vec<Call>) {
        let denied = std::sync::Mutex::new(Vec::new());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (tx, rx) = std::sync::mpsc::channel::<OwnedFd>();
        let out = std::thread::scope(|s| {
            let (stop, denied) = (&stop, &denied);
            let supervisor = s.spawn(move || supervise(rx, stop, denied));
            let worker = s.spawn(move || {
                let listener = guard();
                let _ = tx.send(listener);
                self.run_here(f)
            });
            let out = worker.join();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = supervisor.join();
            out
        });
        let denied = denied.into_inner().unwrap_or_else(|e| e.into_inner());
        if !denied.is_empty() {
            panic!(
                "not faked: {} (reached the kernel around sys)",
                denied.join(", ")
            );
        }
        match out {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Runs `f` with the fake active on this thread.
    fn run_here<T>(self, f: impl FnOnce() -> T) -> (T, Vec<Call>) {
        assert!(!active(), "a recording is already active on this thread");
        let dir = std::env::temp_dir().join(format!(
            "moat-fake-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("temporary directory for fake fds");
        let base = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&dir)
            .expect("O_PATH fd of the fake's directory");
        let rec = Recorder {
            calls: Vec::new(),
            fd_names: self.names.into_iter().collect(),
            next_fd: 0,
            base: base.into(),
            dir,
            always: self.always,
            once: self.once,
            after: self.after,
        };
        ACTIVE.with(|a| *a.borrow_mut() = Some(rec));
        let guard = Stop;
        let out = f();
        let calls = guard.finish();
        (out, calls)
    }
}

/// The syscalls a recorded sequence must never make for real: they change the host (its
/// names, mounts, namespaces, files' owners, other processes, resource limits, keyrings) or
/// the whole test process (cwd, root, umask and credentials are shared by its threads; an
/// exec replaces it).
pub const GUARDED: &[&str] = &[
    "sethostname",
    "setdomainname",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "chdir",
    "fchdir",
    "umask",
    "setns",
    "unshare",
    "move_mount",
    "mount_setattr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "open_tree",
    "mknod",
    "mknodat",
    "symlinkat",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "kill",
    "tkill",
    "tgkill",
    "pidfd_send_signal",
    "prlimit64",
    "setrlimit",
    "keyctl",
    "reboot",
    "setuid",
    "setgid",
    "setreuid",
    "setregid",
    "setresuid",
    "setresgid",
    "setgroups",
    "setfsuid",
    "setfsgid",
    "capset",
    "execve",
    "execveat",
];

/// Puts the calling thread behind the guard filter; returns its notification listener.
fn guard() -> OwnedFd {
    static FILTER: std::sync::OnceLock<crate::linux::seccomp::Filter> = std::sync::OnceLock::new();
    let filter = FILTER.get_or_init(|| {
        let spec: crate::spec::Seccomp = serde_json::from_value(serde_json::json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "listenerPath": "/nonexistent/moat-fake",
            "syscalls": [{"names": GUARDED, "action": "SCMP_ACT_NOTIFY"}],
        }))
        .expect("the guard's profile");
        crate::linux::seccomp::compile(&spec).expect("the guard filter compiles")
    });
    super::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).expect("no_new_privs on the recording thread");
    super::seccomp_set_filter(filter.flags, &filter.prog)
        .expect("the guard filter on the recording thread")
        .expect("the guard filter's listener")
}

/// Answers every guarded syscall of the recording thread with EPERM, noting its name,
/// until `stop`.
fn supervise(
    rx: std::sync::mpsc::Receiver<OwnedFd>,
    stop: &std::sync::atomic::AtomicBool,
    denied: &std::sync::Mutex<Vec<String>>,
) {
    use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let Ok(listener) = rx.recv() else {
        return;
    };
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(20u8)) {
            Ok(n) if n > 0 => {}
            _ => continue,
        }
        let Ok(req) = ScmpNotifReq::receive(listener.as_raw_fd()) else {
            continue;
        };
        let name = req
            .data
            .syscall
            .get_name()
            .unwrap_or_else(|_| format!("syscall {}", i32::from(req.data.syscall)));
        denied.lock().unwrap_or_else(|e| e.into_inner()).push(name);
        let _ = ScmpNotifResp::new_error(req.id, -libc::EPERM, ScmpNotifRespFlags::empty())
            .respond(listener.as_raw_fd());
    }
}

/// Ends the recording on drop (also when the closure panics).
struct Stop;

impl Stop {
    fn finish(self) -> Vec<Call> {
        let calls = take().map(|r| r.calls).unwrap_or_default();
        std::mem::forget(self);
        calls
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        take();
    }
}

fn take() -> Option<Recorder> {
    let rec = ACTIVE.with(|a| a.borrow_mut().take());
    if let Some(r) = &rec {
        let _ = std::fs::remove_dir(&r.dir);
    }
    rec
}

/// Queues `reply` for the next call of `name`, from inside a running recording (a step
/// of a sequence whose answer depends on the steps before, such as the mount ids
/// pivot_root must see differ).
pub fn then(name: &'static str, reply: Reply) {
    ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let rec = a.as_mut().expect("record::then outside a recording");
        rec.once.entry(name).or_default().push_back(reply);
    });
}

/// A harmless descriptor named `name` in the calls, for a test to pass to the code under
/// test (a rootfs, a root to chdir in). Only while a recording is active.
pub fn fd(name: &str) -> OwnedFd {
    let fd = ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let rec = a.as_mut().expect("record::fd outside a recording");
        let fd = rec.base.try_clone().expect("dup of the fake's O_PATH fd");
        rec.fd_names.insert(fd.as_raw_fd(), name.to_string());
        fd
    });
    fd
}

/// A new fake descriptor `fdN`, noted as the return value of the last call.
fn new_fd() -> OwnedFd {
    ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let rec = a.as_mut().expect("fake fd outside a recording");
        let fd = rec.base.try_clone().expect("dup of the fake's O_PATH fd");
        rec.next_fd += 1;
        let name = format!("fd{}", rec.next_fd);
        rec.fd_names.insert(fd.as_raw_fd(), name.clone());
        if let Some(c) = rec.calls.last_mut() {
            c.ret = Some(name);
        }
        fd
    })
}

/// The hook of every wrapper: records the call and returns its reply while a recording is
/// active, `None` (run the real call) otherwise.
pub fn intercept(name: &'static str, args: &[(&'static str, &dyn Arg)]) -> Option<Reply> {
    ACTIVE.with(|a| {
        let mut a = a.borrow_mut();
        let rec = a.as_mut()?;
        let args = args
            .iter()
            .map(|(k, v)| (*k, v.show(&rec.fd_names)))
            .collect();
        rec.calls.push(Call {
            name,
            args,
            ret: None,
        });
        let queued = rec.once.get_mut(name).and_then(VecDeque::pop_front);
        let reply = queued
            .or_else(|| rec.always.get(name).cloned())
            .unwrap_or(Reply::Default);
        // Triggers armed by this call, in the order the test gave them.
        let (fired, kept) = std::mem::take(&mut rec.after)
            .into_iter()
            .partition::<Vec<_>, _>(|(t, ..)| *t == name);
        rec.after = kept;
        for (_, n, r) in fired {
            rec.once.entry(n).or_default().push_back(r);
        }
        Some(reply)
    })
}

/// The hook of a wrapper with no fake: under a recording, the call is a route the fake
/// lacks, and the test fails rather than reach the kernel.
pub fn refuse(name: &'static str) {
    if active() {
        panic!("not faked: {name}");
    }
}

/// How an argument appears in a [`Call`].
pub trait Arg {
    fn show(&self, fds: &HashMap<RawFd, String>) -> String;
}

macro_rules! arg_display {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            fn show(&self, _: &HashMap<RawFd, String>) -> String {
                self.to_string()
            }
        }
    )*};
}
arg_display!(i16, u16, i32, u32, i64, u64, usize, bool, str, String);

impl Arg for std::time::Duration {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{self:?}")
    }
}

impl Arg for BorrowedFd<'_> {
    fn show(&self, fds: &HashMap<RawFd, String>) -> String {
        let n = self.as_raw_fd();
        if n == libc::AT_FDCWD {
            return "AT_FDCWD".into();
        }
        fds.get(&n).cloned().unwrap_or_else(|| "fd?".into())
    }
}

impl Arg for Option<BorrowedFd<'_>> {
    fn show(&self, fds: &HashMap<RawFd, String>) -> String {
        self.as_ref().map_or("none".into(), |f| f.show(fds))
    }
}

impl Arg for CStr {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{:?}", self.to_string_lossy())
    }
}

impl Arg for Option<&CStr> {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        self.map_or("none".into(), |s| format!("{:?}", s.to_string_lossy()))
    }
}

impl Arg for [u32] {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{self:?}")
    }
}

/// CPU and node masks, as their words in hex.
impl Arg for [libc::c_ulong] {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        let words: Vec<String> = self.iter().map(|w| format!("{w:#x}")).collect();
        format!("[{}]", words.join(","))
    }
}

/// Bytes written, as text (procfs values, LSM labels).
impl Arg for [u8] {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{:?}", String::from_utf8_lossy(self))
    }
}

impl Arg for [CString] {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{self:?}")
    }
}

impl<T: Arg + ?Sized> Arg for &T {
    fn show(&self, fds: &HashMap<RawFd, String>) -> String {
        (**self).show(fds)
    }
}

impl<T: Arg + ?Sized> Arg for &mut T {
    fn show(&self, fds: &HashMap<RawFd, String>) -> String {
        (**self).show(fds)
    }
}

impl Arg for super::FdNumber {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        self.0.to_string()
    }
}

impl Arg for super::OpenHow {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!(
            "{{flags={:#x}, mode={:#o}, resolve={:#x}}}",
            self.flags, self.mode, self.resolve
        )
    }
}

impl Arg for super::MountAttr {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!(
            "{{set={:#x}, clr={:#x}, propagation={:#x}, userns={}}}",
            self.attr_set, self.attr_clr, self.propagation, self.userns_fd
        )
    }
}

impl Arg for super::SchedAttr {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!(
            "{{policy={}, nice={}, priority={}}}",
            self.sched_policy, self.sched_nice, self.sched_priority
        )
    }
}

/// A seccomp program, by length.
impl Arg for [libc::sock_filter] {
    fn show(&self, _: &HashMap<RawFd, String>) -> String {
        format!("{} insns", self.len())
    }
}

/// The fake result of a wrapper's return type for a [`Reply`].
pub trait Faked {
    fn faked(r: Reply) -> Self;
}

fn errno(r: &Reply) -> Option<std::io::Error> {
    match r {
        Reply::Err(e) => Some(std::io::Error::from_raw_os_error(*e)),
        _ => None,
    }
}

fn int(r: &Reply) -> i64 {
    match r {
        Reply::Int(n) => *n,
        _ => 0,
    }
}

/// A wrapper's success value from the reply, or its errno.
fn ok<T>(r: Reply, f: impl FnOnce(Reply) -> T) -> super::Result<T> {
    match errno(&r) {
        Some(e) => Err(e),
        None => Ok(f(r)),
    }
}

impl Faked for super::Result<()> {
    fn faked(r: Reply) -> Self {
        ok(r, drop)
    }
}

impl Faked for super::Result<OwnedFd> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| new_fd())
    }
}

/// A pair (a pipe, a socketpair): two new fake descriptors.
impl Faked for super::Result<(OwnedFd, OwnedFd)> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| {
            let a = new_fd();
            let b = new_fd();
            (a, b)
        })
    }
}

/// A wait status, or `None` (still running, the default).
impl Faked for super::Result<Option<libc::c_int>> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| match r {
            Reply::Int(n) => Some(libc::c_int::try_from(n).expect("a wait status")),
            _ => None,
        })
    }
}

impl Faked for super::Result<Option<OwnedFd>> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| (int(&r) != 0).then(new_fd))
    }
}

macro_rules! faked_int {
    ($($t:ty),*) => {$(
        impl Faked for super::Result<$t> {
            fn faked(r: Reply) -> Self {
                ok(r, |r| <$t>::try_from(int(&r)).expect("scripted value fits"))
            }
        }
        impl Faked for $t {
            fn faked(r: Reply) -> Self {
                <$t>::try_from(int(&r)).expect("scripted value fits")
            }
        }
    )*};
}
faked_int!(i32, i64, u32, u64, usize);

impl Faked for super::Result<Vec<u8>> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| match r {
            Reply::Bytes(b) => b,
            _ => Vec::new(),
        })
    }
}

impl Faked for super::Result<Vec<u32>> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| Vec::new())
    }
}

impl Faked for super::Result<std::path::PathBuf> {
    fn faked(r: Reply) -> Self {
        use std::os::unix::ffi::OsStringExt;
        ok(r, |r| match r {
            Reply::Bytes(b) => std::ffi::OsString::from_vec(b).into(),
            _ => "/".into(),
        })
    }
}

impl Faked for super::Result<(u64, u64, u64)> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| (0, 0, 0))
    }
}

impl Faked for super::Result<(u16, u16)> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| (0, 0))
    }
}

impl Faked for super::Result<(usize, Option<OwnedFd>)> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| (0, None))
    }
}

impl Faked for super::Result<libc::stat> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| {
            // SAFETY: plain data; all zeroes is a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            if let Reply::Stat { mode, rdev, ino } = r {
                st.st_mode = mode;
                st.st_rdev = rdev;
                st.st_ino = ino;
            }
            st
        })
    }
}

impl Faked for super::Result<libc::statfs> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| {
            // SAFETY: plain data; all zeroes is a valid value.
            let mut st: libc::statfs = unsafe { std::mem::zeroed() };
            if let Reply::Statfs(magic) = r {
                // f_type is i64 under glibc, unsigned under musl.
                #[allow(clippy::cast_possible_wrap, clippy::useless_conversion)]
                {
                    st.f_type = magic as _;
                }
            }
            st
        })
    }
}

impl Faked for super::Result<libc::statvfs> {
    fn faked(r: Reply) -> Self {
        // SAFETY: plain data; all zeroes is a valid value.
        ok(r, |_| unsafe { std::mem::zeroed() })
    }
}

impl Faked for super::Result<super::Forked> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| match int(&r) {
            0 => super::Forked::Child,
            pid => super::Forked::Parent(libc::pid_t::try_from(pid).expect("a pid")),
        })
    }
}

impl Faked for super::Result<super::bpf::ProgInfo> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| super::bpf::ProgInfo {
            id: 0,
            prog_type: 0,
            name: String::new(),
            tag: [0; 8],
            map_ids: Vec::new(),
        })
    }
}

impl Faked for super::Result<super::bpf::MapInfo> {
    fn faked(r: Reply) -> Self {
        ok(r, |_| super::bpf::MapInfo {
            id: 0,
            map_type: 0,
            key_size: 0,
            value_size: 0,
            max_entries: 0,
            name: String::new(),
        })
    }
}

/// An exec that "fails" (it never runs anything): with the scripted errno, else 0.
impl Faked for std::io::Error {
    fn faked(r: Reply) -> Self {
        errno(&r).unwrap_or_else(|| std::io::Error::from_raw_os_error(0))
    }
}

impl Faked for () {
    fn faked(_: Reply) {}
}

/// Readable in time (the default), or the time ran out (`Reply::Int(0)`).
impl Faked for super::Result<bool> {
    fn faked(r: Reply) -> Self {
        ok(r, |r| !matches!(r, Reply::Int(0)))
    }
}

impl Faked for bool {
    fn faked(r: Reply) -> Self {
        !matches!(r, Reply::Int(0) | Reply::Err(_))
    }
}

impl Faked for Option<&'static str> {
    fn faked(_: Reply) -> Self {
        None
    }
}

impl Faked for (u32, u32) {
    fn faked(_: Reply) -> Self {
        (0, 0)
    }
}

/// A faked read: the scripted bytes (cut to `buf`), or end of file.
pub fn fill(r: Reply, buf: &mut [u8]) -> super::Result<usize> {
    ok(r, |r| match r {
        Reply::Bytes(b) => {
            let n = b.len().min(buf.len());
            buf[..n].copy_from_slice(&b[..n]);
            n
        }
        _ => 0,
    })
}

/// A faked write: all of it, or the scripted count.
pub fn written(r: Reply, len: usize) -> super::Result<usize> {
    ok(r, |r| match r {
        Reply::Int(n) => usize::try_from(n).expect("a byte count"),
        _ => len,
    })
}

/// The names of `calls`, in order.
pub fn names(calls: &[Call]) -> Vec<&'static str> {
    calls.iter().map(|c| c.name).collect()
}

/// The index of the first call `pred` accepts; panics with the whole recording if none.
pub fn position(calls: &[Call], what: &str, pred: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} in:\n{}", show(calls)))
}

/// The index of the last call `pred` accepts; panics with the whole recording if none.
pub fn last_position(calls: &[Call], what: &str, pred: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .rposition(pred)
        .unwrap_or_else(|| panic!("no {what} in:\n{}", show(calls)))
}

/// A call named `name`, whatever its arguments.
pub fn named(name: &'static str) -> impl Fn(&Call) -> bool {
    move |c| c.name == name
}

/// A call named `name` whose arguments include every `(key, value)` of `args`.
#[allow(dead_code)] // extension point
pub fn is(
    name: &'static str,
    args: &'static [(&'static str, &'static str)],
) -> impl Fn(&Call) -> bool {
    move |c| c.name == name && args.iter().all(|(k, v)| c.arg(k) == Some(v))
}

/// Asserts that the last call `a` accepts comes before the first call `b` accepts (so
/// every `a` precedes every `b`), showing the recording when not.
pub fn assert_before(
    calls: &[Call],
    (a_what, a): (&str, impl Fn(&Call) -> bool),
    (b_what, b): (&str, impl Fn(&Call) -> bool),
) {
    let ia = last_position(calls, a_what, a);
    let ib = position(calls, b_what, b);
    assert!(
        ia < ib,
        "{a_what} (call {ia}) must come before {b_what} (call {ib}):\n{}",
        show(calls)
    );
}

/// The recording, one numbered call a line.
pub fn show(calls: &[Call]) -> String {
    calls
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{i:3} {c}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::sys;

    #[test]
    fn calls_are_recorded_and_never_reach_the_kernel() {
        let (r, calls) = Fake::new()
            .then("setresuid", Reply::Err(libc::EPERM))
            .run(|| {
                let fd = sys::openat(sys::at_fdcwd(), c"/nonexistent", libc::O_RDONLY, 0)
                    .expect("faked open");
                sys::fchdir(fd.as_fd()).expect("faked fchdir");
                // A real sethostname-like change would alter the host; this one is faked.
                sys::setdomainname("moat-fake-test").expect("faked");
                sys::setresuid(12345).unwrap_err().raw_os_error()
            });
        assert_eq!(r, Some(libc::EPERM));
        assert_eq!(
            show(&calls),
            "  0 openat(dir=AT_FDCWD, path=\"/nonexistent\", flags=0, mode=0) -> fd1\n  \
             1 fchdir(fd=fd1)\n  2 setdomainname(name=moat-fake-test)\n  \
             3 setresuid(uid=12345)\n"
        );
        // Outside the recording the real calls run again.
        assert!(!active());
        assert!(sys::openat(sys::at_fdcwd(), c"/nonexistent", libc::O_RDONLY, 0).is_err());
    }

    /// An `after` reply is queued only once its trigger was called.
    #[test]
    fn after_waits_for_its_trigger() {
        let (ids, _) = Fake::new()
            .after("setsid", "getegid", Reply::Int(7))
            .run(|| {
                let before = sys::getegid();
                sys::setsid().expect("faked");
                (before, sys::getegid(), sys::getegid())
            });
        assert_eq!(ids, (0, 7, 0));
    }

    /// A call around `sys` (here a harmless `chdir(".")` by nix) is stopped by the guard
    /// filter and named.
    #[test]
    #[should_panic(expected = "not faked: chdir")]
    fn a_call_around_sys_is_stopped_and_named() {
        let (r, _) = Fake::new().run(|| nix::unistd::chdir("."));
        assert_eq!(r, Err(nix::Error::EPERM));
    }

    #[test]
    #[should_panic(expected = "not faked: spawn")]
    fn a_call_without_a_fake_panics() {
        Fake::new().run(|| {
            let _ = sys::spawn_in_cgroups(c"/bin/true", &[], &[], [None, None, None], &[], None);
        });
    }

    /// Every `pub fn` of `sys/` starts with the recorder's hook (`fake!` or `not_faked!`)
    /// before its first `unsafe` or kernel call, or is listed here as making none.
    #[test]
    fn every_wrapper_has_the_hook() {
        const NO_KERNEL_CALL: &[&str] = &[
            // Pure: a constant or a borrow of stdio.
            "at_fdcwd",
            "borrow_stdio",
            // moat's own start-up, before anything a test would record.
            "args",
            "keep_args",
            "process_init",
        ];
        let sources = [
            ("bpf.rs", include_str!("bpf.rs")),
            ("creds.rs", include_str!("creds.rs")),
            ("fd.rs", include_str!("fd.rs")),
            ("fs.rs", include_str!("fs.rs")),
            ("mount.rs", include_str!("mount.rs")),
            ("net.rs", include_str!("net.rs")),
            ("process.rs", include_str!("process.rs")),
            ("seccomp.rs", include_str!("seccomp.rs")),
            ("signal.rs", include_str!("signal.rs")),
            ("spawn.rs", include_str!("spawn.rs")),
            ("startup.rs", include_str!("startup.rs")),
            ("steptrace.rs", include_str!("steptrace.rs")),
            ("tty.rs", include_str!("tty.rs")),
        ];
        // Every file of sys/ is scanned: a new kernel area is added here or this fails.
        for line in include_str!("mod.rs").lines() {
            let Some(m) = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("mod "))
                .and_then(|m| m.strip_suffix(';'))
            else {
                continue;
            };
            assert!(
                m == "record" || sources.iter().any(|(f, _)| *f == format!("{m}.rs")),
                "sys/{m}.rs is not scanned for the recorder's hook"
            );
        }
        let mut missing = Vec::new();
        let mut seen = 0;
        for (file, text) in sources {
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let Some(rest) = line
                    .strip_prefix("pub fn ")
                    .or_else(|| line.strip_prefix("pub unsafe fn "))
                else {
                    continue;
                };
                let name = rest.split(['(', '<']).next().unwrap_or_default();
                if NO_KERNEL_CALL.contains(&name) {
                    continue;
                }
                seen += 1;
                // The body runs from the line that ends the signature to the first line
                // that closes it at column 0.
                let body = lines[i..]
                    .iter()
                    .skip_while(|l| !l.ends_with('{'))
                    .skip(1)
                    .take_while(|l| **l != "}")
                    .copied()
                    .collect::<Vec<_>>()
                    .join("\n");
                let hook = [
                    body.find(&format!("fake!(\"{name}\"")),
                    body.find(&format!("not_faked!(\"{name}\"")),
                ]
                .into_iter()
                .flatten()
                .min();
                let first_call = [body.find("unsafe"), body.find("libc::")]
                    .into_iter()
                    .flatten()
                    .min();
                match (hook, first_call) {
                    (Some(h), Some(c)) if h < c => {}
                    (Some(_), None) => {}
                    _ => missing.push(format!("{file}: {name}")),
                }
            }
        }
        assert!(seen > 60, "found only {seen} wrappers: is the scan broken?");
        assert!(
            missing.is_empty(),
            "sys wrappers without the recorder's hook (fake!(\"<name>\", …) or \
             not_faked!(\"<name>\") as their first statement):\n{}",
            missing.join("\n")
        );
    }
}
