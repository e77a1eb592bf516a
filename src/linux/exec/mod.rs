//! `exec`: a new process in a running container, confined exactly as its init.
//!
//! Three processes take part: the parent (`moat exec`), the joiner (its fork, which
//! enters the container's namespaces but never appears in its pid namespace) and the
//! exec'd process (the joiner's fork, born in the container's pid namespace, inside its
//! root). `plan.rs` reads and checks everything before anything is made; `parent.rs`
//! holds the parent's rows, `child.rs` the joiner's and the exec'd process's, one
//! function per row, in this order (the [`Step`] enum and docs/architecture.md carry the
//! same table; a unit test keeps the three in step):
//!
//! | # | step | process | function | what it does |
//! |---|---|---|---|---|
//! | 1 | facts | parent | `plan::Facts::read` | status checked (stopped; paused without `--ignore-paused`); the saved spec and its bounding set, the container's compiled seccomp programs and the host facts (AppArmor, SELinux) read. `container/exec.rs` then builds the process (`--process` or the flags, the policy under RESTRICTED) and its attributes |
//! | 2 | plan | parent | `plan::Plan::new` | pidfd of the init (`container not running`); the namespaces that differ from moat's; the cgroup placement opened (v2 directory, v1 `tasks` files, `--cgroup`). Nothing exists yet |
//! | 3 | channels | parent | `parent::channels` | the sync socketpair; the console socket connected, or (foreground with a terminal, no socket) a socketpair to relay the pty |
//! | 4 | clone | parent | `parent::clone_joiner` | clone of the joiner (into the v2 cgroup) |
//! | 5 | place | joiner | `child::place` | joins the v1 cgroups itself; non-dumpable; rlimits (still with the caller's privileges) |
//! | 6 | procfs | joiner | `child::own_procfs` | moat's own procfs handle, taken before joining anything |
//! | 7 | join | joiner | `child::join_namespaces` | one `setns(pidfd, …)`: user, mount (root and cwd become the container's), the rest; pid and time for children |
//! | 8 | fork | joiner | `child::fork_process` | the init's pidfd and the log file closed; fork (`CLONE_PARENT`); `ExecPid` sent; exits |
//! | 9 | console | exec'd | `child::console` | `/` opened; the pty (master to the console socket, the peer given to the process's uid by fd) as stdio, or a session of its own |
//! | 10 | attrs | exec'd | `child::apply_attrs` | [`Attrs::apply`]: LSM, NNP, fd sweep and seccomp (its listener sent to the parent at once), user, caps, cwd, the executable looked up |
//! | 11 | execve | exec'd | `child::execve` | `execve` (the sync socket is close-on-exec); a probe tries its calls and exits instead |
//! | 12 | wait | parent | `parent::wait_exec` | `ExecPid` (and the seccomp listener, handed to `listenerPath` at once), then EOF on the sync socket = exec'd; `Failed` = error (the exec'd process killed); the joiner reaped |
//! | 13 | report | parent | `parent::report` | `--pid-file`; the relayed pty master received |
//! | 14 | forward | parent | `container::exec::forward` | detached: done; else signals forwarded until the process exits, its status returned |
//!
//! Nothing in the container can see a moat process whose root is the host's: the joiner
//! stays in the caller's pid namespace, and what appears in the container's is forked
//! after the mount namespace was entered (runc's nsexec order). moat is never executed
//! inside the container: both processes are forks, non-dumpable until execve, so nothing
//! in the container without CAP_SYS_PTRACE over them can ptrace them or open their
//! `/proc/<pid>` files.

mod child;
mod parent;
pub mod plan;

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::attrs::Attrs;
use super::sync::{InitFailure, Step as InitStep};
use crate::state::Record;

pub use plan::{Facts, Plan};

/// The rows of the exec table (module doc), in order. Errors keep naming the init steps
/// users see (`sync::Step`: "namespaces", "exec", …); these name the sequence, which the
/// unit tests hold to the module doc, docs/architecture.md and the functions.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Row 1 (parent, `plan::Facts::read`): status, spec, seccomp programs, host facts.
    Facts = 1,
    /// Row 2 (parent, `plan::Plan::new`): init pidfd, namespaces, cgroup placement.
    Plan,
    /// Row 3 (parent, `parent::channels`): sync socketpair, console socket or relay.
    Channels,
    /// Row 4 (parent, `parent::clone_joiner`): clone of the joiner.
    Clone,
    /// Row 5 (joiner, `child::place`): v1 cgroups, non-dumpable, rlimits.
    Place,
    /// Row 6 (joiner, `child::own_procfs`): moat's own procfs handle.
    Procfs,
    /// Row 7 (joiner, `child::join_namespaces`): one setns into the container.
    Join,
    /// Row 8 (joiner, `child::fork_process`): fork of the exec'd process, `ExecPid`.
    Fork,
    /// Row 9 (exec'd, `child::console`): the pty or a session of its own.
    Console,
    /// Row 10 (exec'd, `child::apply_attrs`): `Attrs::apply`.
    Attrs,
    /// Row 11 (exec'd, `child::execve`): execve (or the probes).
    Execve,
    /// Row 12 (parent, `parent::wait_exec`): the sync socket read to EOF.
    Wait,
    /// Row 13 (parent, `parent::report`): `--pid-file`, the relayed pty master.
    Report,
    /// Row 14 (parent, `container::exec::forward`): signals forwarded, status returned.
    Forward,
}

#[cfg_attr(not(test), allow(dead_code))]
impl Step {
    pub const ALL: [Step; 14] = [
        Step::Facts,
        Step::Plan,
        Step::Channels,
        Step::Clone,
        Step::Place,
        Step::Procfs,
        Step::Join,
        Step::Fork,
        Step::Console,
        Step::Attrs,
        Step::Execve,
        Step::Wait,
        Step::Report,
        Step::Forward,
    ];

    /// The row's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Step::Facts => "facts",
            Step::Plan => "plan",
            Step::Channels => "channels",
            Step::Clone => "clone",
            Step::Place => "place",
            Step::Procfs => "procfs",
            Step::Join => "join",
            Step::Fork => "fork",
            Step::Console => "console",
            Step::Attrs => "attrs",
            Step::Execve => "execve",
            Step::Wait => "wait",
            Step::Report => "report",
            Step::Forward => "forward",
        }
    }
}

pub struct ExecOpts {
    pub console_socket: Option<PathBuf>,
    pub pid_file: Option<PathBuf>,
    /// `--cgroup`: a sub-cgroup of the container's, relative.
    pub sub_cgroup: Vec<String>,
    /// Where the exec'd process's seccomp listener goes, as the init's did.
    pub seccomp_agent: Option<SeccompAgent>,
}

/// The saved spec's `linux.seccomp` (with a `listenerPath`) and the container's record,
/// whose state the agent is sent with the listener.
pub struct SeccompAgent {
    pub seccomp: crate::spec::Seccomp,
    pub record: Record,
}

/// What went wrong on the exec path, one variant per operation with its object. The
/// messages are the ones moat has always printed (podman and tests match some).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot exec in a stopped container")]
    Stopped { id: String },
    #[error("cannot exec in a paused container (use --ignore-paused to override)")]
    Paused { id: String },
    #[error("corrupt seccomp program in the state directory ({file})")]
    SeccompProgram { file: String },
    #[error("container not running")]
    NotRunning { pid: i32 },
    /// A `/proc/<pid>/ns/<type>` link that could not be read.
    #[error("{}: {err}", path.display())]
    Namespace { path: PathBuf, err: std::io::Error },
    #[error("socketpair: {0}")]
    SyncSocket(std::io::Error),
    #[error("connect to console socket {}: {err}", path.display())]
    ConsoleSocket { path: PathBuf, err: std::io::Error },
    #[error("socketpair for the console: {0}")]
    ConsoleRelay(std::io::Error),
    #[error("clone: {0}")]
    Clone(std::io::Error),
    #[error("wait for probe (pid {pid}): {err}")]
    WaitProbe { pid: i32, err: std::io::Error },
    #[error("receive the pty master: {0}")]
    PtyMaster(std::io::Error),
    #[error(transparent)]
    Init(#[from] InitFailure),
    /// The exec'd process's seccomp listener could not reach the agent.
    #[error(transparent)]
    Listener(Box<super::create::Error>),
    #[error(transparent)]
    Cgroup(#[from] super::cgroups::CgroupError),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

/// The started process: its host pid, and (foreground) a pidfd to wait on.
pub struct Started {
    pub pid: i32,
    /// The pty master when the caller relays the terminal itself (no console socket).
    pub console: Option<OwnedFd>,
}

/// Rows 3–13 for a planned exec: the process runs (or failed) when this returns.
pub fn exec(plan: Plan<'_>) -> Result<Started, ExecError> {
    spawn(plan, false)
}

fn spawn(plan: Plan<'_>, probe: bool) -> Result<Started, ExecError> {
    crate::linux::killpoint::at("exec", "parent", "channels");
    let ch = parent::channels(plan.attrs, &plan.opts, probe)?;
    crate::linux::killpoint::at("exec", "parent", "clone");
    let (mut joiner, opts) = parent::clone_joiner(plan, ch, probe)?;
    crate::linux::killpoint::at("exec", "parent", "wait");
    let pid = parent::wait_exec(&mut joiner, &opts)?;
    crate::linux::killpoint::at("exec", "parent", "report");
    parent::report(&opts, pid, joiner)
}

/// The exec protocol, on the sync socket (`linux/sync.rs` encodes it), one way:
///
/// ```text
///   joiner (row 8)   ── ExecPid(pid) ──▶ parent   once, after forking the exec'd process
///   exec'd (row 10)  ── Listener + fd ─▶ parent   once, right after its seccomp filter
///                                                 with notify rules is loaded (the
///                                                 parent gives it to the agent)
///   exec'd (9–11)    ── Failed(f) ─────▶ parent   instead of execve
///   joiner (5–8)     ── Failed(f) ─────▶ parent   instead of forking
///   execve (row 11)  ── EOF ───────────▶ parent   the last copy of the socket closed
/// ```
///
/// The joiner and the exec'd process write independently, so `Failed` may come before
/// or after `ExecPid`; each comes at most once, and nothing else may come.
#[derive(Debug)]
enum Message {
    ExecPid(i32),
    Listener(OwnedFd),
    Failed(InitFailure),
}

/// What the parent has heard so far; refuses a message that cannot come now.
#[derive(Debug, Default)]
struct Heard {
    pid: Option<i32>,
    /// The exec'd process's seccomp listener, until it is handed to the agent.
    listener: Option<OwnedFd>,
    /// The listener came (and went to the agent, or is on its way).
    listened: bool,
    failure: Option<InitFailure>,
}

impl Heard {
    /// Takes the next message, or gives it back if it is out of order.
    fn hear(&mut self, m: Message) -> Result<(), Message> {
        match m {
            Message::ExecPid(pid) if self.pid.is_none() => self.pid = Some(pid),
            Message::Listener(fd) if !self.listened => {
                self.listened = true;
                self.listener = Some(fd);
            }
            Message::Failed(f) if self.failure.is_none() => self.failure = Some(f),
            m => return Err(m),
        }
        Ok(())
    }
}

/// Calls the container must not be able to make, as (name, syscall, args). Each uses
/// arguments that would fail harmlessly (EINVAL, ENOENT) if the call were allowed, so
/// only EPERM/EACCES/ENOSYS (or a missing address family) count as denied.
const PROBES: [(&str, libc::c_long, [libc::c_long; 5]); 5] = [
    (
        "unshare(CLONE_NEWUSER)",
        libc::SYS_unshare,
        [libc::CLONE_NEWUSER as libc::c_long, 0, 0, 0, 0],
    ),
    ("keyctl", libc::SYS_keyctl, [0, -3, 0, 0, 0]),
    (
        "socket(AF_ALG)",
        libc::SYS_socket,
        [
            libc::AF_ALG as libc::c_long,
            libc::SOCK_SEQPACKET as libc::c_long,
            0,
            0,
            0,
        ],
    ),
    ("io_uring_setup", libc::SYS_io_uring_setup, [0, 0, 0, 0, 0]),
    ("setns", libc::SYS_setns, [-1, 0, 0, 0, 0]),
];

fn run_probes() -> i32 {
    let mut escaped = 0;
    for (i, (_, nr, args)) in PROBES.iter().enumerate() {
        let denied = match super::sys::syscall_ints(*nr, *args) {
            Ok(_) => false,
            Err(e) => matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EAFNOSUPPORT)
            ),
        };
        if !denied {
            escaped |= 1 << i;
        }
    }
    escaped
}

/// Forks a process into the container with exactly `attrs` applied, which tries the calls
/// in `PROBES` instead of exec'ing anything; returns those that were *not* denied.
pub fn probe(rec: &Record, attrs: &Attrs) -> Result<Vec<&'static str>, ExecError> {
    let opts = ExecOpts {
        console_socket: None,
        pid_file: None,
        sub_cgroup: Vec::new(),
        seccomp_agent: None,
    };
    let plan = Plan::new(rec, attrs, opts)?;
    let started = spawn(plan, true)?;
    let status = super::sys::waitpid(started.pid)
        .and_then(|raw| {
            nix::sys::wait::WaitStatus::from_raw(nix::unistd::Pid::from_raw(started.pid), raw)
                .map_err(std::io::Error::from)
        })
        .map_err(|err| ExecError::WaitProbe {
            pid: started.pid,
            err,
        })?;
    let code = match status {
        nix::sys::wait::WaitStatus::Exited(_, c) => c,
        other => {
            return Err(ExecError::Init(InitFailure::new(
                InitStep::Exec,
                format!("probe {}", crate::linux::signal::ChildEnd::from(other)),
            )))
        }
    };
    Ok(PROBES
        .iter()
        .enumerate()
        .filter(|(i, _)| code & (1 << i) != 0)
        .map(|(_, p)| p.0)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{Heard, InitFailure, InitStep, Message, Step};

    fn failed() -> Message {
        Message::Failed(InitFailure::new(InitStep::Exec, "x"))
    }

    #[test]
    fn the_protocol_takes_each_message_once_in_either_order() {
        for order in [
            vec![Message::ExecPid(7), failed()],
            vec![failed(), Message::ExecPid(7)],
        ] {
            let mut h = Heard::default();
            for m in order {
                h.hear(m).unwrap();
            }
            assert_eq!(h.pid, Some(7));
            assert!(h.failure.is_some());
        }
        let mut h = Heard::default();
        h.hear(Message::ExecPid(7)).unwrap();
        assert!(matches!(
            h.hear(Message::ExecPid(8)),
            Err(Message::ExecPid(8))
        ));
        assert_eq!(h.pid, Some(7));
        let mut h = Heard::default();
        h.hear(failed()).unwrap();
        assert!(h.hear(failed()).is_err());
    }

    /// The numbered rows of the first table in `text` under `header`, each line's
    /// `prefix` (`//!`) removed: `(number, cells after the number)`.
    fn rows(text: &str, prefix: &str, header: &str) -> Vec<(usize, Vec<String>)> {
        let mut lines = text
            .lines()
            .map(|l| l.strip_prefix(prefix).unwrap_or(l).trim())
            .skip_while(|l| !l.starts_with(header));
        lines.next().expect("table header");
        lines.next().expect("table rule");
        lines
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<String> = l
                    .trim_matches('|')
                    .split(" | ")
                    .map(|c| c.trim().to_string())
                    .collect();
                (cells[0].parse().expect("row number"), cells[1..].to_vec())
            })
            .collect()
    }

    const HEADER: &str = "| # | step | process | function | what it does |";

    #[test]
    fn the_table_is_the_code_and_the_docs() {
        let module = rows(include_str!("mod.rs"), "//!", HEADER);
        let arch = include_str!("../../../docs/architecture.md");
        let section = arch
            .split_once("\n## The exec sequence\n")
            .expect("docs/architecture.md has a section \"The exec sequence\"")
            .1;
        let docs = rows(section.split("\n## ").next().unwrap(), "", HEADER);
        assert_eq!(module, docs, "docs/architecture.md's exec table differs");
        assert_eq!(module.len(), Step::ALL.len(), "rows and Step::ALL");
        for (i, (step, (n, cells))) in Step::ALL.iter().zip(&module).enumerate() {
            assert_eq!(*n, i + 1, "row numbers run 1, 2, …");
            assert_eq!(*step as usize, *n, "{step:?} is row {n}");
            assert_eq!(cells[0], step.name(), "row {n}'s step");
        }
    }

    /// Each variant's doc names its row, process and function as the table does.
    #[test]
    fn each_step_is_documented_with_its_row() {
        let src = include_str!("mod.rs");
        let table = rows(src, "//!", HEADER);
        let docs: Vec<&str> = src
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("/// Row "))
            .collect();
        assert_eq!(docs.len(), table.len());
        for (doc, (n, cells)) in docs.iter().zip(&table) {
            let want = format!("/// Row {n} ({}, {}):", cells[1], cells[2]);
            assert!(doc.starts_with(&want), "{doc:?} should start {want:?}");
        }
    }

    /// Each row's function exists in the file it names.
    #[test]
    fn each_row_names_a_function_that_exists() {
        for (n, cells) in rows(include_str!("mod.rs"), "//!", HEADER) {
            let path = cells[2].trim_matches('`');
            let (file, name) = path.rsplit_once("::").expect("module::function");
            let src = match file {
                "plan::Facts" | "plan::Plan" | "plan" => include_str!("plan.rs"),
                "parent" => include_str!("parent.rs"),
                "child" => include_str!("child.rs"),
                "container::exec" => include_str!("../../container/exec.rs"),
                other => panic!("row {n}: unknown module {other}"),
            };
            assert!(
                src.contains(&format!("fn {name}(")),
                "row {n}: no fn {name} in {file}"
            );
        }
    }
}
