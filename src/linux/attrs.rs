//! The attributes of a container process (`process` in the spec): shared by the container
//! init and by every `exec`, so an exec'd process is confined exactly as the init is.
//!
//! Parsed in the parent; applied in the child in the order the kernel requires:
//! LSM label for the next exec → scheduler, I/O priority → no_new_privs → seccomp (early,
//! when NNP is off: loading then needs CAP_SYS_ADMIN) → bounding set → groups, gid, uid
//! (keeping caps) → capability sets → ambient → umask → cwd (verified inside the root) →
//! executable lookup → seccomp (late, with NNP, so the filter never sees moat's own setup).

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;

use super::capabilities::{self, Sets};
use super::hostfacts::HostFacts;
use super::seccomp::{self, Filter};
use super::sync::{InitFailure, Step, StepExt};
use super::sys;
use crate::spec::{ConsoleSize, Process, Scheduler};

/// What `Attrs::apply` found for the execve: the executable, and the environment when
/// moat added to it (`HOME`, as runc, when the spec's env has none).
pub struct Exe {
    pub path: CString,
    pub env: Option<Vec<CString>>,
}

/// A process attribute the plan refuses. `process` is where the process came from
/// (`process`, or the exec process file); the rest is the object refused.
#[derive(Debug, thiserror::Error)]
pub enum AttrError {
    /// `list` is the whole field (`process.args`, `process.env`).
    #[error("{list}[{index}]: contains a NUL byte")]
    Nul { list: String, index: usize },
    #[error("{process}.args: must name the program to run")]
    NoArgs { process: String },
    #[error("{process}.cwd: {cwd:?} is not an absolute path")]
    RelativeCwd { process: String, cwd: String },
    /// `id`: `uid`, `gid` or `additionalGids[N]`.
    #[error("{process}.user.{id}: {value} is out of range (0-{MAX_ID})")]
    IdRange {
        process: String,
        id: String,
        value: u32,
    },
    #[error("{process}.rlimits[{index}].type: unknown rlimit {typ:?}")]
    RlimitType {
        process: String,
        index: usize,
        typ: String,
    },
    #[error("{process}.rlimits[{index}]: soft limit is above the hard limit")]
    RlimitOrder { process: String, index: usize },
    #[error("{process}.ioPriority.class: unknown class {class:?}")]
    IoprioClass { process: String, class: String },
    #[error("{process}.ioPriority.priority: must be between 0 and 7")]
    IoprioPriority { process: String },
    #[error("{process}.scheduler.policy: unknown policy {policy:?}")]
    SchedPolicy { process: String, policy: String },
    #[error("{process}.scheduler.flags[{index}]: unknown flag {flag:?}")]
    SchedFlag {
        process: String,
        index: usize,
        flag: String,
    },
    #[error(transparent)]
    Affinity(#[from] super::affinity::AffinityError),
    #[error(transparent)]
    MemPolicy(#[from] super::mempolicy::MemPolicyError),
}

/// The largest uid or gid a process may be given (runc's limit too).
pub const MAX_ID: u32 = i32::MAX as u32;

pub struct Attrs {
    pub caps: Sets,
    /// The highest capability the kernel knows, read by the parent on the host: the child
    /// drops the bounding set up to it, never trusting a `cap_last_cap` in its own view.
    pub last_cap: u32,
    /// Installed in order; the kernel applies the strictest verdict of all of them.
    pub seccomp: Vec<Filter>,
    pub no_new_privs: bool,
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    pub umask: Option<u32>,
    pub rlimits: Vec<(libc::c_int, u64, u64)>,
    pub apparmor: Option<String>,
    pub selinux: Option<String>,
    /// The host's LSMs, probed by the parent on the host ([`Attrs::on_host`]); the child
    /// never decides them from its own view of `/sys`.
    pub host: Option<HostFacts>,
    pub scheduler: Option<Scheduler>,
    /// `linux.resources.cpu.cpus` is set: an EPERM from `sched_setattr` is then the
    /// cpuset's doing (SCHED_DEADLINE wants every CPU of its root domain), said in runc's
    /// words, which engines and runc's suite look for.
    pub cpuset_cpus: bool,
    pub ioprio: Option<(i32, i32)>,
    /// `linux.memoryPolicy`: the container's, for the init and every exec'd process
    /// ([`Attrs::memory_policy`]).
    pub mempolicy: Option<super::mempolicy::MemPolicy>,
    /// `process.execCPUAffinity`: applied by an exec's joiner and exec'd process only
    /// (never by `apply`); create checks it and leaves it out of the init's attributes.
    pub exec_affinity: Option<super::affinity::ExecAffinity>,
    pub cwd: String,
    pub args: Vec<CString>,
    pub env: Vec<CString>,
    pub path_env: String,
    pub terminal: bool,
    pub console_size: Option<ConsoleSize>,
    /// The terminal's `\n` stays `\n` (`ONLCR` cleared): set by the parent when it relays
    /// the pty to an output that is not a terminal itself (a file, a pipe), as runc does,
    /// so that scripts read the program's own bytes. On a terminal the caller's is raw
    /// and the pty's `\r\n` is what it displays.
    pub clear_onlcr: bool,
    /// `linux.personality` of an exec'd process (the container's; the init sets its own
    /// in create's row 12), set before the filters are loaded.
    pub personality: Option<libc::c_ulong>,
    pub preserve_fds: u32,
}

pub fn cstrings(v: &[String], field: &str) -> Result<Vec<CString>, AttrError> {
    v.iter()
        .enumerate()
        .map(|(i, s)| {
            CString::new(s.as_str()).map_err(|_| AttrError::Nul {
                list: field.to_string(),
                index: i,
            })
        })
        .collect()
}

/// `RLIMIT_NOFILE` for its number, as the spec names it.
pub fn rlimit_name(res: libc::c_int) -> &'static str {
    const NAMES: [&str; 16] = [
        "RLIMIT_CPU",
        "RLIMIT_FSIZE",
        "RLIMIT_DATA",
        "RLIMIT_STACK",
        "RLIMIT_CORE",
        "RLIMIT_RSS",
        "RLIMIT_NPROC",
        "RLIMIT_NOFILE",
        "RLIMIT_MEMLOCK",
        "RLIMIT_AS",
        "RLIMIT_LOCKS",
        "RLIMIT_SIGPENDING",
        "RLIMIT_MSGQUEUE",
        "RLIMIT_NICE",
        "RLIMIT_RTPRIO",
        "RLIMIT_RTTIME",
    ];
    NAMES
        .into_iter()
        .find(|n| rlimit_resource(n) == Some(res))
        .unwrap_or("RLIMIT_?")
}

/// Why a hard limit could not be set, when moat can tell: above its own hard limit, which
/// only `CAP_SYS_RESOURCE` raises (rootless, or an engine whose limits are lower than the
/// spec's, as podman's default 1048576 on a host with less). Read only on the error path.
pub fn rlimit_hint(res: libc::c_int, hard: u64) -> String {
    match crate::linux::sys::hard_rlimit(res) {
        Ok(own) if hard > own => format!(
            " (hard limit {hard} is above moat's own, {own}, which only CAP_SYS_RESOURCE \
             raises: lower the container's limit, e.g. podman --ulimit, or raise the engine's)"
        ),
        _ => String::new(),
    }
}

pub fn rlimit_resource(name: &str) -> Option<libc::c_int> {
    Some(match name {
        "RLIMIT_CPU" => libc::RLIMIT_CPU,
        "RLIMIT_FSIZE" => libc::RLIMIT_FSIZE,
        "RLIMIT_DATA" => libc::RLIMIT_DATA,
        "RLIMIT_STACK" => libc::RLIMIT_STACK,
        "RLIMIT_CORE" => libc::RLIMIT_CORE,
        "RLIMIT_RSS" => libc::RLIMIT_RSS,
        "RLIMIT_NPROC" => libc::RLIMIT_NPROC,
        "RLIMIT_NOFILE" => libc::RLIMIT_NOFILE,
        "RLIMIT_MEMLOCK" => libc::RLIMIT_MEMLOCK,
        "RLIMIT_AS" => libc::RLIMIT_AS,
        "RLIMIT_LOCKS" => libc::RLIMIT_LOCKS,
        "RLIMIT_SIGPENDING" => libc::RLIMIT_SIGPENDING,
        "RLIMIT_MSGQUEUE" => libc::RLIMIT_MSGQUEUE,
        "RLIMIT_NICE" => libc::RLIMIT_NICE,
        "RLIMIT_RTPRIO" => libc::RLIMIT_RTPRIO,
        "RLIMIT_RTTIME" => libc::RLIMIT_RTTIME,
        _ => return None,
    } as libc::c_int)
}

pub fn sched_policy(name: &str) -> Option<u32> {
    Some(match name {
        "SCHED_OTHER" => 0,
        "SCHED_FIFO" => 1,
        "SCHED_RR" => 2,
        "SCHED_BATCH" => 3,
        "SCHED_ISO" => 4,
        "SCHED_IDLE" => 5,
        "SCHED_DEADLINE" => 6,
        _ => return None,
    })
}

/// `sched_attr.sched_flags` of the spec's `process.scheduler.flags` (the kernel's
/// `SCHED_FLAG_*` values); `Err` holds the index of a name the spec does not define.
pub fn sched_flags(names: &[String]) -> Result<u64, usize> {
    names.iter().enumerate().try_fold(0, |flags, (i, name)| {
        Ok(flags
            | match name.as_str() {
                "SCHED_FLAG_RESET_ON_FORK" => 0x01,
                "SCHED_FLAG_RECLAIM" => 0x02,
                "SCHED_FLAG_DL_OVERRUN" => 0x04,
                "SCHED_FLAG_KEEP_POLICY" => 0x08,
                "SCHED_FLAG_KEEP_PARAMS" => 0x10,
                "SCHED_FLAG_UTIL_CLAMP_MIN" => 0x20,
                "SCHED_FLAG_UTIL_CLAMP_MAX" => 0x40,
                _ => return Err(i),
            })
    })
}

impl Attrs {
    /// `field` is where `p` came from (`process`, or the exec process file), for errors.
    pub fn from_process(
        p: &Process,
        field: &str,
        seccomp: Vec<Filter>,
        preserve_fds: u32,
    ) -> Result<Attrs, AttrError> {
        if p.args.is_empty() {
            return Err(AttrError::NoArgs {
                process: field.to_string(),
            });
        }
        if !p.cwd.starts_with('/') {
            return Err(AttrError::RelativeCwd {
                process: field.to_string(),
                cwd: p.cwd.clone(),
            });
        }
        // (uid_t)-1 means "leave unchanged" to setresuid/setresgid: a spec asking for it
        // would keep moat's own root. runc refuses everything above i32::MAX, and so do we.
        let ids = [("uid", p.user.uid), ("gid", p.user.gid)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain(
                p.user
                    .additional_gids
                    .iter()
                    .enumerate()
                    .map(|(i, g)| (format!("additionalGids[{i}]"), *g)),
            );
        for (k, v) in ids {
            if v > MAX_ID {
                return Err(AttrError::IdRange {
                    process: field.to_string(),
                    id: k,
                    value: v,
                });
            }
        }
        let caps =
            capabilities::from_spec(p.capabilities.as_ref(), &format!("{field}.capabilities"));
        let mut rlimits = Vec::new();
        for (i, r) in p.rlimits.iter().enumerate() {
            let res = rlimit_resource(&r.typ).ok_or_else(|| AttrError::RlimitType {
                process: field.to_string(),
                index: i,
                typ: r.typ.clone(),
            })?;
            if r.soft > r.hard {
                return Err(AttrError::RlimitOrder {
                    process: field.to_string(),
                    index: i,
                });
            }
            rlimits.push((res, r.soft, r.hard));
        }
        let ioprio = match &p.io_priority {
            None => None,
            Some(io) => {
                let class = match io.class.as_str() {
                    "IOPRIO_CLASS_RT" => 1,
                    "IOPRIO_CLASS_BE" => 2,
                    "IOPRIO_CLASS_IDLE" => 3,
                    other => {
                        return Err(AttrError::IoprioClass {
                            process: field.to_string(),
                            class: other.to_string(),
                        })
                    }
                };
                if !(0..=7).contains(&io.priority) {
                    return Err(AttrError::IoprioPriority {
                        process: field.to_string(),
                    });
                }
                Some((class, io.priority))
            }
        };
        if let Some(s) = &p.scheduler {
            if sched_policy(&s.policy).is_none() {
                return Err(AttrError::SchedPolicy {
                    process: field.to_string(),
                    policy: s.policy.clone(),
                });
            }
            if let Err(index) = sched_flags(&s.flags) {
                return Err(AttrError::SchedFlag {
                    process: field.to_string(),
                    index,
                    flag: s.flags[index].clone(),
                });
            }
        }
        let exec_affinity = p
            .exec_cpu_affinity
            .as_ref()
            .map(|a| super::affinity::ExecAffinity::from_spec(a, field))
            .transpose()?;
        let env = dedup_env(&p.env);
        let path_env = env
            .iter()
            .find_map(|e| e.strip_prefix("PATH="))
            .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .to_string();
        Ok(Attrs {
            caps,
            last_cap: capabilities::last_cap(),
            seccomp,
            no_new_privs: p.no_new_privileges.unwrap_or(false),
            uid: p.user.uid,
            gid: p.user.gid,
            additional_gids: p.user.additional_gids.clone(),
            umask: p.user.umask,
            rlimits,
            apparmor: p.apparmor_profile.clone().filter(|a| !a.is_empty()),
            selinux: p.selinux_label.clone().filter(|a| !a.is_empty()),
            host: None,
            scheduler: p.scheduler.clone(),
            cpuset_cpus: false,
            ioprio,
            mempolicy: None,
            exec_affinity,
            cwd: p.cwd.clone(),
            args: cstrings(&p.args, &format!("{field}.args"))?,
            env: cstrings(&env, &format!("{field}.env"))?,
            path_env,
            terminal: p.terminal,
            console_size: p.console_size,
            clear_onlcr: false,
            personality: None,
            preserve_fds,
        })
    }

    /// The container's `linux.memoryPolicy`, checked here (before anything is made), set
    /// by `apply` in the init and in every exec'd process, as runc sets it in both.
    pub fn memory_policy(
        mut self,
        policy: Option<&crate::spec::MemoryPolicy>,
    ) -> Result<Attrs, AttrError> {
        self.mempolicy = policy
            .map(super::mempolicy::MemPolicy::from_spec)
            .transpose()?;
        Ok(self)
    }

    /// Socket activation (create and run only; `container/startup.rs` decides whether the
    /// caller's `LISTEN_FDS` are this process's): the `n` fds from 3 are passed on, ahead
    /// of the preserved ones, and the process learns of them as systemd would tell it.
    pub fn pass_listen_fds(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.preserve_fds += n;
        self.env.retain(|e| {
            !e.to_bytes().starts_with(b"LISTEN_FDS=") && !e.to_bytes().starts_with(b"LISTEN_PID=")
        });
        for v in [format!("LISTEN_FDS={n}"), "LISTEN_PID=1".to_string()] {
            self.env.push(CString::new(v).expect("no NUL"));
        }
    }

    /// Applies everything up to (not including) execve, with `process.cwd` resolved inside
    /// `root` (an fd of the container's root moat holds) with `openat2(RESOLVE_IN_ROOT)` and
    /// entered by `fchdir`, never by name. Returns the executable to run.
    ///
    /// A filter with `SCMP_ACT_NOTIFY` rules gives a listener fd, which goes to
    /// `hand_over` (to the parent, which gives it to the seccomp agent) right after the
    /// filter is loaded: every syscall made after that may be one the agent must answer,
    /// so none may come before the agent can have it. The fd is closed once handed over
    /// (and is close-on-exec from the kernel), so it never reaches the container process.
    pub fn apply(
        &self,
        root: std::os::fd::BorrowedFd<'_>,
        hand_over: &mut dyn FnMut(OwnedFd) -> Result<(), InitFailure>,
    ) -> Result<Exe, InitFailure> {
        self.apply_lsm()?;
        if let Some(s) = &self.scheduler {
            let mut attr = sys::SchedAttr {
                sched_policy: sched_policy(&s.policy).unwrap_or(0),
                // Checked by `from_process`.
                sched_flags: sched_flags(&s.flags).unwrap_or(0),
                sched_nice: s.nice,
                // A negative priority is refused by the kernel (EINVAL), as u32::MAX is.
                sched_priority: u32::try_from(s.priority).unwrap_or(u32::MAX),
                sched_runtime: s.runtime,
                sched_deadline: s.deadline,
                sched_period: s.period,
                ..Default::default()
            };
            let set = sys::sched_setattr(&mut attr);
            let by_cpuset = self.cpuset_cpus
                && set.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EPERM);
            set.step(Step::Scheduler, || match by_cpuset {
                true => "process.scheduler: process scheduler can't be used together with \
                         AllowedCPUs (linux.resources.cpu.cpus)"
                    .into(),
                false => "process.scheduler".into(),
            })?;
        }
        if let Some((class, prio)) = self.ioprio {
            sys::ioprio_set(class, prio).step(Step::Scheduler, || "process.ioPriority".into())?;
        }
        // Before any filter: a profile may deny set_mempolicy.
        if let Some(m) = &self.mempolicy {
            m.apply().step(Step::Scheduler, || {
                "linux.memoryPolicy: set_mempolicy".into()
            })?;
        }
        if self.no_new_privs {
            sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1)
                .step(Step::Capabilities, || "PR_SET_NO_NEW_PRIVS".into())?;
        }
        // What moat reads and opens for itself comes before the early filter: a profile
        // written for runc (Docker's default, runtime-tools') denies openat2, which the
        // procfs read and the cwd lookup use.
        // setgroups is denied in a user namespace whose gid map was written unprivileged.
        // Read through moat's own procfs: a fake `setgroups` in the container's /proc
        // would otherwise keep moat's supplementary groups (group 0) for the process.
        let groups_denied = super::procfs::setgroups_denied().step(Step::User, || {
            "process.user.additionalGids: read setgroups".into()
        })?;
        // As runc: cwd is entered while moat still has access, and again as the container's
        // user only when that was refused (a directory only that user may enter).
        let cwd = || format!("process.cwd {}", self.cwd);
        let entered = match super::path::Root::chdir_in(root, &self.cwd) {
            Ok(()) => true,
            Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => false,
            Err(e) => return Err(e).step(Step::Cwd, cwd),
        };
        // Before any filter: a profile may deny the open.
        let env = self.with_home(root);
        if !self.no_new_privs {
            self.mark_fds_cloexec()?;
            self.install_seccomp(
                || "load filter (before dropping privileges)".into(),
                hand_over,
            )?;
        }
        self.set_identity(groups_denied)?;
        if let Some(m) = self.umask {
            sys::umask(m);
        }
        if !entered {
            super::path::Root::chdir_in(root, &self.cwd).step(Step::Cwd, cwd)?;
        }
        verify_cwd(&self.cwd)?;
        let path = self.find_executable()?;
        if self.no_new_privs {
            self.mark_fds_cloexec()?;
            self.install_seccomp(|| "load filter".into(), hand_over)?;
        }
        Ok(Exe { path, env })
    }

    /// runc's default: without `HOME` in `process.env` (or with it empty: `dedup_env` drops
    /// an empty one), the process gets the home of its
    /// uid in the container's `/etc/passwd`, or `/`. The file is the container's (resolved
    /// inside `root`, opened non-blocking, a regular file only, read up to 1 MiB); nothing
    /// is read when the spec sets `HOME`, as engines do.
    fn with_home(&self, root: std::os::fd::BorrowedFd<'_>) -> Option<Vec<CString>> {
        if self.env.iter().any(|e| e.to_bytes().starts_with(b"HOME=")) {
            return None;
        }
        let home = passwd_home(root, self.uid).unwrap_or_else(|| "/".into());
        let mut env = self.env.clone();
        env.push(CString::new(format!("HOME={home}")).ok()?);
        Some(env)
    }

    /// The fd sweep: every fd above stdio and the preserved ones marked close-on-exec.
    /// Made just before the filter is loaded, never after: a profile written before
    /// close_range(2) (Linux 5.9) refuses it, with its defaultErrnoRet (runc's
    /// seccomp.bats profiles do), and the process would never start. Every fd moat opens
    /// later is `O_CLOEXEC`, so none can reach the container.
    fn mark_fds_cloexec(&self) -> Result<(), InitFailure> {
        sys::close_range_from(sys::FdNumber(3 + self.preserve_fds), true)
            .step(Step::Exec, || "close_range".into())
    }

    /// Makes the preserved fds inheritable, resets signals, execs (the fd sweep was made
    /// by `apply`).
    pub fn exec(&self, exe: &Exe) -> InitFailure {
        for fd in 3..3 + self.preserve_fds {
            let _ = sys::clear_cloexec(sys::FdNumber(fd));
        }
        sys::reset_signals();
        crate::linux::killpoint::mark("*", "*", "execve.call");
        let e = sys::execve(&exe.path, &self.args, exe.env.as_ref().unwrap_or(&self.env));
        InitFailure {
            step: Step::Execve,
            errno: e.raw_os_error().unwrap_or(0),
            detail: exe.path.to_string_lossy().into_owned(),
        }
    }

    /// Loads every filter, then hands the listener over before any other syscall (the
    /// calls in between are the ones `seccomp::refuse_notify_before_handover` refuses to
    /// notify on).
    fn install_seccomp(
        &self,
        what: impl Fn() -> String,
        hand_over: &mut dyn FnMut(OwnedFd) -> Result<(), InitFailure>,
    ) -> Result<(), InitFailure> {
        let mut listener = None;
        for f in &self.seccomp {
            if let Some(fd) = seccomp::install(f).step(Step::Seccomp, &what)? {
                listener.get_or_insert(fd);
            }
        }
        match listener {
            Some(fd) => hand_over(fd),
            None => Ok(()),
        }
    }

    fn set_identity(&self, groups_denied: bool) -> Result<(), InitFailure> {
        let c = &self.caps;
        // Bounding set first, while CAP_SETPCAP is still effective.
        for cap in 0..=self.last_cap {
            if c.bounding & (1 << cap) == 0 {
                match sys::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong) {
                    Err(e) if e.raw_os_error() != Some(libc::EINVAL) => {
                        return Err(e).step(Step::Capabilities, || {
                            format!(
                                "drop {} from the bounding set",
                                capabilities::NAMES[cap as usize]
                            )
                        })
                    }
                    _ => {}
                }
            }
        }
        sys::prctl(libc::PR_SET_KEEPCAPS, 1).step(Step::User, || "PR_SET_KEEPCAPS".into())?;
        if !groups_denied {
            sys::setgroups(&self.additional_gids).step(Step::User, || {
                format!("process.user.additionalGids {:?}", self.additional_gids)
            })?;
        }
        sys::setresgid(self.gid).step(Step::User, || format!("process.user.gid {}", self.gid))?;
        sys::setresuid(self.uid).step(Step::User, || format!("process.user.uid {}", self.uid))?;
        sys::prctl(libc::PR_SET_KEEPCAPS, 0).step(Step::User, || "PR_SET_KEEPCAPS".into())?;
        sys::capset(c.effective, c.permitted, c.inheritable).step(Step::Capabilities, || {
            format!(
                "capset effective={:?} permitted={:?}",
                capabilities::names(c.effective),
                capabilities::names(c.permitted)
            )
        })?;
        sys::prctl5(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
        )
        .step(Step::Capabilities, || "clear ambient".into())?;
        for cap in 0..=self.last_cap {
            if c.ambient & (1 << cap) != 0 {
                sys::prctl5(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                )
                .step(Step::Capabilities, || {
                    format!("raise ambient {}", capabilities::NAMES[cap as usize])
                })?;
            }
        }
        Ok(())
    }

    /// The host facts the parent probed before fork: they decide which LSM labels the
    /// child writes.
    pub fn on_host(mut self, host: &HostFacts) -> Attrs {
        self.host = Some(host.clone());
        self
    }

    /// The LSM labels for the next execve, as the host facts decide: a label for an LSM
    /// the host does not run is ignored (runc's behaviour), any write that fails is fatal.
    fn apply_lsm(&self) -> Result<(), InitFailure> {
        if self.apparmor.is_none() && self.selinux.is_none() {
            return Ok(());
        }
        let Some(host) = &self.host else {
            return Err(InitFailure::new(
                Step::Lsm,
                "the host's LSMs were not probed before fork (refusing to guess from the \
                 container's view)",
            ));
        };
        if let (Some(profile), true) = (&self.apparmor, host.apparmor) {
            let (attr, value) = super::apparmor::exec_attr(profile, host);
            write_exec_attr(attr, &value)
                .step(Step::Lsm, || format!("process.apparmorProfile {profile}"))?;
        }
        if let (Some(label), true) = (&self.selinux, host.selinux) {
            write_exec_attr("exec", label)
                .step(Step::Lsm, || format!("process.selinuxLabel {label}"))?;
        }
        Ok(())
    }

    /// Looks up `args[0]` as execvp would, with the container's PATH, so a missing binary
    /// fails create (as with runc) instead of start.
    fn find_executable(&self) -> Result<CString, InitFailure> {
        let name = self.args[0].to_str().unwrap_or_default().to_string();
        let check = |p: &str| -> io::Result<()> {
            let p = CString::new(p).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let st = sys::stat(&p)?;
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                return Err(io::Error::from_raw_os_error(libc::EACCES));
            }
            Ok(())
        };
        if name.contains('/') {
            return match check(&name) {
                Ok(()) => Ok(self.args[0].clone()),
                Err(e) => Err(InitFailure::new(
                    Step::Exec,
                    format!("{name:?}: stat {name}: {}", errno_text(&e)),
                )),
            };
        }
        for dir in self.path_env.split(':') {
            let dir = if dir.is_empty() { "." } else { dir };
            let cand = format!("{dir}/{name}");
            if check(&cand).is_ok() {
                return Ok(CString::new(cand).expect("no NUL"));
            }
        }
        Err(InitFailure::new(
            Step::Exec,
            format!("{name:?}: executable file not found in $PATH"),
        ))
    }
}

/// A cwd reached through a leaked fd (`/proc/self/fd/N`) lies outside the root; the kernel
/// then reports it as unreachable (CVE-2024-21626).
/// The home directory of `uid` in the container's `/etc/passwd` (`name:pw:uid:gid:gecos:
/// home:shell`), if the file is a readable regular file naming it.
fn passwd_home(root: std::os::fd::BorrowedFd<'_>, uid: u32) -> Option<String> {
    const MAX: usize = 1 << 20;
    let fd = super::path::Root::open_in(
        root,
        "/etc/passwd",
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .ok()?;
    let st = sys::fstat(std::os::fd::AsFd::as_fd(&fd)).ok()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let mut buf = vec![0u8; MAX.min(usize::try_from(st.st_size).unwrap_or(MAX))];
    let mut len = 0;
    while len < buf.len() {
        match sys::read(std::os::fd::AsFd::as_fd(&fd), &mut buf[len..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
    }
    home_in_passwd(&buf[..len], uid)
}

/// The home directory of `uid` in the text of a `/etc/passwd` (the image's: fuzzed,
/// `fuzz/fuzz_targets/passwd.rs`).
pub(crate) fn home_in_passwd(passwd: &[u8], uid: u32) -> Option<String> {
    let uid = uid.to_string();
    String::from_utf8_lossy(passwd).lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 6 && f[2] == uid && !f[5].is_empty()).then(|| f[5].to_string())
    })
}

fn verify_cwd(cwd: &str) -> Result<(), InitFailure> {
    let outside = || {
        InitFailure::new(
            Step::Cwd,
            format!("process.cwd {cwd} is outside the container root"),
        )
    };
    let real = match sys::getcwd() {
        Ok(p) => p,
        // glibc (2.27 on) reports a directory not reachable from the root as ENOENT
        // instead of an "(unreachable)" path: a leaked fd's directory, as
        // /proc/self/fd/N, is that case.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(outside()),
        Err(e) => return Err(e).step(Step::Cwd, || format!("process.cwd {cwd}: getcwd")),
    };
    if !real.is_absolute() || real.to_string_lossy().starts_with("(unreachable)") {
        return Err(outside());
    }
    Ok(())
}

fn errno_text(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(errno) => super::sync::errno_text(errno),
        None => e.to_string(),
    }
}

/// The one place an LSM label for the next execve is written: `attr` below the calling
/// thread's `attr/` (`apparmor/exec`, `exec`), through moat's own procfs.
fn write_exec_attr(attr: &str, value: &str) -> Result<(), super::procfs::ProcError> {
    super::procfs::write_attr(attr, value)
}

/// Whether `linux.resources.cpu.cpus` bounds the container to a cpuset ([`Attrs::cpuset_cpus`]).
pub fn cpuset_cpus(linux: &crate::spec::Linux) -> bool {
    linux
        .resources
        .as_ref()
        .and_then(|r| r.cpu.as_ref())
        .and_then(|c| c.cpus.as_deref())
        .is_some_and(|c| !c.is_empty())
}

/// The `personality(2)` value of a `linux.personality.domain`; `None` for one moat does not
/// know.
pub fn personality(domain: &str) -> Option<libc::c_ulong> {
    match domain {
        "LINUX" => Some(0),
        "LINUX32" => Some(0x0008),
        _ => None,
    }
}

/// `process.env` as runc 1.5 passes it to execve: one entry per name, the last one given, in
/// the order of those last entries; an empty `HOME=` dropped, so that the home of the
/// process's user is set instead (`Attrs::with_home`). A name given twice otherwise reaches
/// the program twice, and which one it reads depends on its libc.
fn dedup_env(env: &[String]) -> Vec<String> {
    let name = |e: &str| e.split_once('=').map_or(e, |(n, _)| n).to_string();
    let mut seen = std::collections::HashSet::new();
    let mut out: Vec<String> = env
        .iter()
        .rev()
        .filter(|e| seen.insert(name(e)))
        .filter(|e| e.as_str() != "HOME=")
        .cloned()
        .collect();
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_keeps_the_last_of_each_name_and_no_empty_home() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            dedup_env(&v(&[
                "TERM=vt100",
                "HOME=/a",
                "HOME=/b",
                "TERM=xterm",
                "FOO=bar"
            ])),
            v(&["HOME=/b", "TERM=xterm", "FOO=bar"])
        );
        assert_eq!(dedup_env(&v(&["HOME=/a", "HOME="])), v(&[]));
        assert_eq!(dedup_env(&v(&["HOME=", "HOME=/a"])), v(&["HOME=/a"]));
        assert_eq!(dedup_env(&v(&["ONE=two", "ONE="])), v(&["ONE="]));
    }

    #[test]
    fn rlimit_and_policy_names() {
        // RLIMIT_* are u32 under glibc, i32 under musl.
        #[allow(clippy::unnecessary_cast)]
        let nofile = libc::RLIMIT_NOFILE as i32;
        assert_eq!(rlimit_resource("RLIMIT_NOFILE"), Some(nofile));
        assert_eq!(rlimit_resource("RLIMIT_BOGUS"), None);
        assert_eq!(sched_policy("SCHED_IDLE"), Some(5));
        assert_eq!(sched_policy("SCHED_NOPE"), None);
    }

    fn process(json: serde_json::Value) -> Process {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn ids_above_i32_max_are_refused() {
        let base = serde_json::json!({"args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0}});
        let ok = |p: &Process| Attrs::from_process(p, "process", Vec::new(), 0);
        assert!(ok(&process(base.clone())).is_ok());
        let mut p = process(base.clone());
        p.user.uid = MAX_ID;
        assert!(ok(&p).is_ok());
        for (k, set) in [
            (
                "uid",
                (|p: &mut Process| p.user.uid = u32::MAX) as fn(&mut Process),
            ),
            ("gid", |p: &mut Process| p.user.gid = MAX_ID + 1),
            ("additionalGids[1]", |p: &mut Process| {
                p.user.additional_gids = vec![5, u32::MAX]
            }),
        ] {
            let mut p = process(base.clone());
            set(&mut p);
            let e = ok(&p).err().expect("accepted");
            assert!(
                matches!(&e, AttrError::IdRange { id, .. } if id == k),
                "{e}"
            );
            assert!(
                e.to_string().starts_with(&format!("process.user.{k}: ")),
                "{e}"
            );
            assert!(e.to_string().contains("out of range"), "{e}");
        }
    }

    /// The order `apply` and `exec` make their kernel calls in, recorded by the fake `sys`
    /// (no kernel, no root): the security-critical relations of the module doc.
    mod order {
        use super::super::*;
        use crate::linux::sys::record::{self, assert_before, names, Call, Fake, Reply};
        use std::os::fd::AsFd;

        const PROC_SUPER_MAGIC: u64 = 0x9fa0;

        /// Answers that make the fake's procfs handle look like moat's own procfs.
        fn kernel() -> Fake {
            Fake::new()
                .reply("fstatfs", Reply::Statfs(PROC_SUPER_MAGIC))
                .reply("readlinkat", Reply::Bytes(b"7/task/7".to_vec()))
        }

        fn filter() -> Filter {
            Filter {
                prog: vec![
                    libc::sock_filter {
                        code: 0x06,
                        jt: 0,
                        jf: 0,
                        k: 0x7fff_0000,
                    };
                    3
                ],
                flags: 0,
            }
        }

        const CAP_CHOWN: u64 = 1 << 0;
        const CAP_NET_BIND_SERVICE: u64 = 1 << 10;
        const CAP_SYS_ADMIN: u64 = 1 << 21;

        /// A process as the tests vary it: root with caps, or a user.
        fn attrs(uid: u32, nnp: bool, caps: u64, ambient: u64) -> Attrs {
            Attrs {
                caps: Sets {
                    bounding: caps,
                    effective: caps,
                    permitted: caps,
                    inheritable: 0,
                    ambient,
                },
                last_cap: 40,
                seccomp: vec![filter()],
                no_new_privs: nnp,
                uid,
                gid: uid,
                additional_gids: vec![uid + 1, uid + 2],
                umask: Some(0o022),
                rlimits: Vec::new(),
                apparmor: Some("moat-default".into()),
                selinux: None,
                host: Some(HostFacts {
                    apparmor: true,
                    apparmor_attr_dir: true,
                    apparmor_profiles: None,
                    selinux: false,
                    apparmor_may_load: true,
                    moat_profile_loaded: false,
                }),
                scheduler: None,
                cpuset_cpus: false,
                ioprio: Some((2, 4)),
                mempolicy: Some(crate::linux::mempolicy::MemPolicy {
                    mode: 2,
                    nodes: vec![1],
                }),
                exec_affinity: None,
                cwd: "/work".into(),
                args: vec![CString::new("sh").unwrap()],
                env: Vec::new(),
                path_env: "/usr/bin:/bin".into(),
                terminal: false,
                console_size: None,
                clear_onlcr: false,
                personality: None,
                preserve_fds: 2,
            }
        }

        /// `apply` then `exec` under the fake: the calls.
        fn record(a: &Attrs) -> Vec<Call> {
            record_with(a, kernel())
        }

        fn record_with(a: &Attrs, kernel: Fake) -> Vec<Call> {
            let ((), calls) = kernel.run(|| {
                let root = record::fd("root");
                let exe = a
                    .apply(root.as_fd(), &mut |_| Ok(()))
                    .expect("apply under the fake");
                assert_eq!(exe.path.to_str(), Ok("/usr/bin/sh"));
                let failure = a.exec(&exe);
                assert_eq!(failure.step, Step::Execve);
            });
            calls
        }

        fn prctl(option: libc::c_int) -> impl Fn(&Call) -> bool {
            move |c| c.name.starts_with("prctl") && c.arg("option") == Some(&option.to_string())
        }

        fn named(name: &'static str) -> impl Fn(&Call) -> bool {
            move |c| c.name == name
        }

        /// The LSM label: the write to the thread's `attr/apparmor/exec`.
        fn lsm_write(calls: &[Call]) -> usize {
            let open = record::position(calls, "open of attr/apparmor/exec", |c| {
                c.name == "openat2" && c.arg("path") == Some("\"7/task/7/attr/apparmor/exec\"")
            });
            let fd = calls[open].ret.clone().expect("an fd");
            let write = record::position(calls, "LSM write", |c| {
                c.name == "write" && c.arg("fd") == Some(fd.as_str())
            });
            assert_eq!(calls[write].arg("data"), Some("\"exec moat-default\""));
            write
        }

        /// What every process has, whatever its attributes.
        fn common(calls: &[Call]) {
            let lsm = lsm_write(calls);
            let bset = ("bounding-set drop", prctl(libc::PR_CAPBSET_DROP));
            let seccomp = ("seccomp", named("seccomp_set_filter"));
            assert!(lsm < record::position(calls, "seccomp", named("seccomp_set_filter")));
            assert!(lsm < record::position(calls, "bounding drop", prctl(libc::PR_CAPBSET_DROP)));
            // The memory policy is set before any filter, which may deny set_mempolicy.
            let mpol = record::position(calls, "set_mempolicy", named("set_mempolicy"));
            assert_eq!(calls[mpol].arg("mode"), Some("2"));
            assert_eq!(calls[mpol].arg("nodes"), Some("[0x1]"));
            assert!(mpol < record::position(calls, "seccomp", named("seccomp_set_filter")));
            // Bounding set first (while CAP_SETPCAP is effective), then the ids.
            for id in ["setgroups", "setresgid", "setresuid"] {
                assert_before(calls, (bset.0, &bset.1), (id, named(id)));
            }
            assert_before(
                calls,
                ("setgroups", named("setgroups")),
                ("setresgid", named("setresgid")),
            );
            assert_before(
                calls,
                ("setresgid", named("setresgid")),
                ("setresuid", named("setresuid")),
            );
            // Caps survive the uid change (keep-caps on before, off after), then are set.
            let keepcaps = |v: &'static str| {
                move |c: &Call| {
                    c.name == "prctl" && c.arg("option") == Some("8") && c.arg("arg2") == Some(v)
                }
            };
            assert_before(
                calls,
                ("keep-caps on", keepcaps("1")),
                ("setresuid", named("setresuid")),
            );
            assert_before(
                calls,
                ("setresuid", named("setresuid")),
                ("keep-caps off", keepcaps("0")),
            );
            assert_before(
                calls,
                ("setresuid", named("setresuid")),
                ("capset", named("capset")),
            );
            // Ambient after the capability sets.
            assert_before(
                calls,
                ("capset", named("capset")),
                ("ambient", prctl(libc::PR_CAP_AMBIENT)),
            );
            // What moat opens for itself (the setgroups read, the cwd lookup) comes before
            // the first filter, which a profile written for runc may make deny openat2; the
            // cwd is entered while moat still has access (as runc), before the ids change.
            let setgroups_read = |c: &Call| {
                c.name == "openat2" && c.arg("path").is_some_and(|p| p.ends_with("setgroups\""))
            };
            assert_before(
                calls,
                ("setgroups read", setgroups_read),
                ("seccomp", named("seccomp_set_filter")),
            );
            assert_before(
                calls,
                ("fchdir", named("fchdir")),
                ("seccomp", named("seccomp_set_filter")),
            );
            assert_before(
                calls,
                ("fchdir", named("fchdir")),
                ("setresuid", named("setresuid")),
            );
            assert_before(
                calls,
                ("fchdir", named("fchdir")),
                ("getcwd", named("getcwd")),
            );
            let cwd = record::position(calls, "cwd open", |c| {
                c.name == "openat2"
                    && c.arg("dir") == Some("root")
                    && c.arg("path") == Some("\"work\"")
            });
            assert!(calls[cwd].arg("how").is_some_and(|h| h.contains(&format!(
                "resolve={:#x}}}",
                sys::RESOLVE_IN_ROOT | sys::RESOLVE_NO_MAGICLINKS
            ))));
            let fchdir = record::position(calls, "fchdir", named("fchdir"));
            assert_eq!(calls[fchdir].arg("fd"), calls[cwd].ret.as_deref());
            // exec: every fd above the preserved ones marked close-on-exec, then execve.
            let close = record::position(calls, "close_range", named("close_range_from"));
            assert_eq!(calls[close].arg("first"), Some("5"));
            assert_eq!(calls[close].arg("cloexec_only"), Some("true"));
            assert_before(
                calls,
                ("close_range", named("close_range_from")),
                ("execve", named("execve")),
            );
            assert_before(
                calls,
                ("reset_signals", named("reset_signals")),
                ("execve", named("execve")),
            );
            assert_before(calls, seccomp, ("execve", named("execve")));
            assert_eq!(calls.last().map(|c| c.name), Some("execve"));
        }

        /// A cwd moat may not enter but the container's user may (a volume chowned to it):
        /// entered again once the ids have changed, as runc does.
        #[test]
        fn cwd_refused_to_moat_is_entered_as_the_user() {
            let a = attrs(1000, false, 0, 0);
            let calls = record_with(&a, kernel().then("fchdir", Reply::Err(libc::EACCES)));
            let first = record::position(&calls, "fchdir", named("fchdir"));
            let second = record::last_position(&calls, "fchdir", named("fchdir"));
            assert!(first < second, "one fchdir:\n{}", record::show(&calls));
            let setresuid = record::position(&calls, "setresuid", named("setresuid"));
            assert!(
                first < setresuid && setresuid < second,
                "{}",
                record::show(&calls)
            );
        }

        #[test]
        fn root_with_caps_and_nnp() {
            let a = attrs(0, true, CAP_CHOWN | CAP_NET_BIND_SERVICE | CAP_SYS_ADMIN, 0);
            let calls = record(&a);
            common(&calls);
            let nnp = ("no_new_privs", prctl(libc::PR_SET_NO_NEW_PRIVS));
            assert!(lsm_write(&calls) < record::position(&calls, nnp.0, &nnp.1));
            // With NNP, seccomp is late: one load, after the ids, the caps, the cwd check
            // and the executable lookup, the last call before exec.
            let seccomp = record::position(&calls, "seccomp", named("seccomp_set_filter"));
            assert_eq!(
                seccomp,
                record::last_position(&calls, "seccomp", named("seccomp_set_filter"))
            );
            for before in ["setresuid", "capset", "getcwd", "stat"] {
                assert_before(
                    &calls,
                    (before, named(before)),
                    ("seccomp", named("seccomp_set_filter")),
                );
            }
            assert_before(
                &calls,
                (nnp.0, &nnp.1),
                ("seccomp", named("seccomp_set_filter")),
            );
            // The fd sweep right before the filter, which may refuse close_range.
            assert_eq!(calls[seccomp - 1].name, "close_range_from");
            // Caps dropped from the bounding set are exactly those not kept.
            let drops = calls
                .iter()
                .filter(|c| prctl(libc::PR_CAPBSET_DROP)(c))
                .count();
            assert_eq!(drops, 41 - 3);
            assert_eq!(
                calls
                    .iter()
                    .find(|c| c.name == "capset")
                    .map(|c| c.to_string()),
                Some(format!(
                    "capset(effective={m}, permitted={m}, inheritable=0)",
                    m = CAP_CHOWN | CAP_NET_BIND_SERVICE | CAP_SYS_ADMIN
                ))
            );
            assert!(calls.iter().any(|c| c.to_string() == "setresuid(uid=0)"));
            assert!(calls
                .iter()
                .any(|c| c.to_string() == "setgroups(gids=[1, 2])"));
        }

        #[test]
        fn user_without_nnp() {
            let a = attrs(1000, false, CAP_NET_BIND_SERVICE, CAP_NET_BIND_SERVICE);
            let calls = record(&a);
            common(&calls);
            assert!(!calls.iter().any(prctl(libc::PR_SET_NO_NEW_PRIVS)));
            // Without NNP, seccomp is early: loading needs CAP_SYS_ADMIN, so before any
            // privilege is dropped (bounding set, ids, caps), and only once.
            let seccomp = ("seccomp", named("seccomp_set_filter"));
            assert_before(
                &calls,
                (seccomp.0, &seccomp.1),
                ("bounding drop", prctl(libc::PR_CAPBSET_DROP)),
            );
            assert_before(
                &calls,
                (seccomp.0, &seccomp.1),
                ("setresuid", named("setresuid")),
            );
            assert_eq!(calls.iter().filter(|c| seccomp.1(c)).count(), 1);
            assert!(calls.iter().any(|c| c.to_string() == "setresuid(uid=1000)"));
            assert!(calls.iter().any(
                |c| c.to_string() == format!("prctl5(option=47, arg2=2, arg3={}, arg4=0)", 10)
            ));
        }

        #[test]
        fn user_with_nnp_and_denied_setgroups() {
            let a = attrs(1000, true, 0, 0);
            let ((), calls) = kernel()
                .then("read", Reply::Bytes(b"deny\n".to_vec()))
                .run(|| {
                    let root = record::fd("root");
                    let exe = a.apply(root.as_fd(), &mut |_| Ok(())).expect("apply");
                    a.exec(&exe);
                });
            // setgroups is denied in this user namespace: moat never calls it.
            assert!(
                !calls.iter().any(|c| c.name == "setgroups"),
                "{}",
                record::show(&calls)
            );
            assert_before(
                &calls,
                ("setresgid", named("setresgid")),
                ("setresuid", named("setresuid")),
            );
            assert_before(
                &calls,
                ("setresuid", named("setresuid")),
                ("seccomp", named("seccomp_set_filter")),
            );
            assert_eq!(calls.last().map(|c| c.name), Some("execve"));
            let _ = names(&calls);
        }

        #[test]
        fn a_failing_step_stops_the_sequence() {
            let a = attrs(1000, true, 0, 0);
            let (r, calls) = kernel().then("setresgid", Reply::Err(libc::EPERM)).run(|| {
                let root = record::fd("root");
                a.apply(root.as_fd(), &mut |_| Ok(())).map(drop)
            });
            let e = r.expect_err("setresgid failed");
            assert_eq!(e.step, Step::User);
            assert_eq!(e.errno, libc::EPERM);
            assert_eq!(calls.last().map(|c| c.name), Some("setresgid"));
            assert!(!calls
                .iter()
                .any(|c| c.name == "setresuid" || c.name == "seccomp_set_filter"));
        }
    }
}
