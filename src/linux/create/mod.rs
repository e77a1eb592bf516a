//! The create sequence: plan → parent → child, each read top to bottom.
//!
//! | # | parent (`moat create`) | child (container init) |
//! |---|---|---|
//! | 1 | the host facts read and the policy applied on them (`container::policy::decide`: AppArmor on and its loaded profiles, SELinux on, the host's namespace ids), then `Plan::new`: the cgroup layout, rootless, the kernel's mount API read, every spec field turned into a plan (mount options, capability masks, rlimits, sysctls checked against the namespaces, seccomp compiled to BPF (with a denying default, ENOSYS for native syscalls newer than the profile, as runc; `SCMP_ACT_NOTIFY` refused as the default and on the syscalls the init makes before the listener reaches the parent: `seccomp::BEFORE_HANDOVER`), namespace paths opened, the notify mount and the cgroup path planned). A bad spec fails here, before anything exists | — |
//! | 2 | moat's AppArmor profile loaded, when the spec runs under it and the host has not loaded it | — |
//! | 3 | state dir created exclusively (a second create of the id fails here); with `NOTIFY_SOCKET`, the container's socket bound in it | — |
//! | 4 | `moat.userns=auto`: a range taken from the host pool (flock on `/run/moat-userns/lock`), recorded in the state dir and written into the plan (`linux.uidMappings`/`gidMappings`, the idmapped rootfs); a bounded root under `[fleet] rootfs_budget`: its cap taken from the host's ledger (flock on `/run/moat-rootfs/lock`; refused when the live containers' caps plus this one exceed the budget), recorded in the state dir | — |
//! | 5 | the fleet cgroup with its limits, then the container's cgroup created (rootless: a delegated v2 subtree, or none; the systemd driver's scope only planned) | — |
//! | 6 | preliminary record, `config.json`, the compiled seccomp programs and `policy.json` written, so an interrupted create can be deleted; `linux.resources` applied | — |
//! | 7 | `exec.fifo`, the sync socketpair, the console socket connection | — |
//! | 8 | `clone3` with every new namespace flag ("direct"), or a plain fork of an intermediate ("staged": joining user/pid/mount namespaces by path, time namespaces); `CLONE_INTO_CGROUP` puts it in the v2 cgroup (pure v2 and hybrid); with `--systemd-cgroup`, the transient scope started over D-Bus with the child as its process (systemd moves it), then `linux.resources` written to the scope's files | joins the v1 cgroups itself (writes `0` to each `tasks` file the parent opened: `cgroups/placement.rs`); non-dumpable (rootless with an unprivileged parent: once the parent has written its id maps); waits for `Go` |
//! | 9 | `prlimit`, `oom_score_adj`, uid/gid maps; `Go` (carries the state JSON for hooks); idmapped mounts built with `open_tree`+`mount_setattr(MOUNT_ATTR_IDMAP)` once the maps are written (and, in any user namespace, every bind source: opened `O_PATH` in the init's mount namespace through `/proc/<init>/root` for a direct create, which the init clones so locked submounts stay locked; cloned on the host when staged) — after `Go`, or after `MapsWritten` when staged — and sent by fd (`MountFd`) | takes its own procfs handle (`linux/procfs.rs`; staged: the intermediate before joining anything, the init again in the container's pid namespace; direct: before the first mount); joins path namespaces (staged: the others before a joined user namespace, as runc, one refused with EPERM retried after it; `timens_offsets` opened before anything is joined, with moat's credentials the kernel checks on the write once the time namespace exists; sysctls of joined namespaces written while still privileged over them); staged: unshares and forks the real init (a pid namespace joined with a new mount namespace: the intermediate does rows 10–11 itself, with procfs contexts made inside the joined namespace by a helper on an empty root, and forks the init after `pivot_root`); receives the mount fds |
//! | 10 | on `IdmapPlease`: idmaps the detached copy the init sends of a bind source inside the rootfs (`mount_setattr(MOUNT_ATTR_IDMAP)`, which needs host root's privilege over its filesystem) and answers `Idmapped` | cgroup namespace, session keyring, `lo`, hostname; rootfs: propagation of `/`, the rootfs path opened once, the mount holding it made a slave unless `rslave`/`rprivate` (found by walking `..` up from it), the rootfs bound onto itself by fd (or the parent's idmapped rootfs attached over it, on `/` if container root cannot reach the path), `mounts[]` in order (a spec target resolved inside the root with `openat2(RESOLVE_IN_ROOT)`, one at or below `/proc`, `/sys`, `/dev` without symlinks below the mount that covers it; mounted by fd; a bind source inside the rootfs opened with `openat2(RESOLVE_IN_ROOT)` when its turn comes, after the mounts before it, and cloned there, an idmapped one sent to the parent to be idmapped before it is attached; every mount kept by its fd), devices, `/dev` links and the pty relative to the held `/dev` (its peer given to `process.user.uid` by fd) |
//! | 11 | on `HooksPlease`: `linux.netDevices` moved into the network namespace of the init (or of the staged intermediate that made it) and renamed, their global addresses carried over and set up (`linux/netdev.rs`); then prestart + createRuntime hooks | createContainer hooks (their cwd the held root, by `fchdir`, as runc); `pivot_root` on the held root (`fchdir`, then `"."`; the old root, `..` of the held root, made an rslave and detached; or `/` made a slave, `MS_MOVE`+chroot with `--no-pivot`); a late init is forked here |
//! | 12 | — | sysctls (through moat's procfs handle), read-only paths, masked paths (verified `/dev/null`, clones by fd of one read-only tmpfs), each target resolved without symlinks below the held mount that covers it and checked after the attach, read-only root, personality |
//! | 13 | on `Listener`: the seccomp listener fd to `listenerPath` at once | the asynchronous terminating signals made to end it (a pid namespace's init ignores them at their default action: `kill` of a created container ends it, as runc's); a session of its own (`setsid`) without a terminal; `attrs::apply`: AppArmor/SELinux exec label (for the LSMs the parent's host facts say are on, written through moat's procfs handle), scheduler, ioprio, NNP, fd sweep (`close_range` from 3 + preserved) and seccomp early (without NNP; a listener sent to the parent right after the load), bounding set, groups/gid/uid, capability sets, ambient, umask, cwd (verified inside the root), executable lookup (a missing binary fails create, as runc), fd sweep and seccomp late (with NNP; the listener likewise); the pty made stdio |
//! | 14 | on `Ready`: `state.json` with pid and start time, `--pid-file`; `Created` | blocks reading `exec.fifo` |
//! | 15 | `moat start`: writes one byte to the fifo, removes it, runs poststart hooks | startContainer hooks, signals reset, `execve` |
//!
//! Each row is a [`Step`] and a function: row 1 is `plan.rs`, the parent column
//! `parent.rs` (row 15's parent is `moat start`), the child column `child.rs`; a side that
//! reads "—" has no function. The same table is in docs/architecture.md, and a unit test
//! keeps the three equal.
//!
//! The table's rows are not the names errors carry: a failure in the child names the
//! operation that failed with `sync::Step` (`namespaces`, `rootfs`, `mounts`, `sysctl`,
//! …, the words users and tests match), and one row can fail in several of them (row 9:
//! `namespaces`, `user mapping`, `sysctl`, `mounts`, `sync`). The parent's failures are
//! [`Error`] variants, one per operation, carrying its object (spec field, path, pid).
//!
//! Parent and child talk over `linux/sync.rs`, whose phase machine refuses a message out
//! of order on both sides. Every wait in the child is a read on the sync socket, so a
//! parent killed mid-create makes the child exit on EOF; `delete --force` then removes the
//! state directory and the cgroup, and gives the userns range back to the pool and the
//! bounded root's share back to the budget.

mod child;
#[cfg(test)]
pub(crate) use child::tests::reached_execve;
mod parent;
pub mod plan;

use std::io;
use std::path::PathBuf;

pub(crate) use child::enter_cgroup;
pub use parent::{create, restore, send_listener, state_json, Created};
pub use plan::{Options, Plan};

use super::sync::InitFailure;
use super::{cgroups, hooks, seccomp};
use crate::state;

/// What went wrong in create, one variant per operation, each carrying its object. The
/// source of an operation's error is printed by the error chain (`cli::main` joins it).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `restore`: CRIU (through moat-criu) did not restore the image.
    #[error("restore: {0}")]
    Restore(String),
    /// A `linux.namespaces` entry the namespace plan refused.
    #[error(transparent)]
    Namespaces(#[from] super::namespaces::NsError),
    /// A `process` field the attribute plan refused.
    #[error(transparent)]
    Attrs(#[from] super::attrs::AttrError),
    /// A `root.path` or `mounts[]` entry the rootfs plan refused.
    #[error(transparent)]
    Rootfs(#[from] super::rootfs::PlanError),
    #[error("process: missing: create needs a process to run")]
    NoProcess,
    #[error("process.args: must name the program to run")]
    NoArgs,
    #[error("process.terminal: a terminal was requested but no --console-socket was given to send it to")]
    TerminalWithoutSocket,
    #[error("hostname: setting a hostname needs a private uts namespace")]
    HostnameWithoutUts,
    #[error("linux.sysctl.{key}: refused: it would change the host (the namespace it belongs to is not the container's own)")]
    SysctlNotPrivate { key: String },
    #[error("linux.sysctl.{key}: invalid key")]
    SysctlKey { key: String },
    #[error("linux.personality.domain: unknown domain {domain:?}")]
    Personality { domain: String },
    #[error("linux.namespaces: a rootless container needs a user namespace (`moat spec --rootless` writes one)")]
    RootlessNoUserns,
    #[error("linux.uidMappings: a rootless container's new user namespace needs uidMappings and gidMappings")]
    RootlessNoMaps,
    /// `linux.uidMappings`/`gidMappings` against `/etc/subuid`, `/etc/subgid` (the message
    /// names the field).
    #[error(transparent)]
    RootlessMaps(#[from] crate::linux::rootless::MapError),
    #[error(
        "moat.userns=auto: needs a rootful moat (host ids are allocated from the \
         host-wide pool); a rootless container is already in its user's namespace"
    )]
    UsernsRootless,
    #[error(
        "moat.rootfs=ephemeral: needs a rootful moat (the bounded root is an overlay moat \
         builds on the host); use moat.rootfs=readonly for a rootless container"
    )]
    EphemeralRootless,
    #[error("linux.namespaces: an idmapped rootfs needs a user namespace")]
    IdmapNoUserns,
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error("load moat's AppArmor profile")]
    AppArmor(#[source] io::Error),
    #[error("NOTIFY_SOCKET: prepare the container's socket")]
    Notify(#[source] io::Error),
    #[error("moat.userns=auto: allocate host ids")]
    UsernsAllocate(#[source] state::idpool::PoolError),
    #[error("moat.rootfs=ephemeral: take the root's cap from the host's budget")]
    RootfsBudget(#[source] state::budget::BudgetError),
    #[error(transparent)]
    Cgroup(#[from] cgroups::CgroupError),
    /// The egress policy could not be attached to the container's cgroup.
    #[error(transparent)]
    Egress(#[from] crate::linux::egress::EgressError),
    /// The DNS forwarder of the egress policy's names could not be started.
    #[error(transparent)]
    Dns(#[from] crate::linux::egress::forwarder::ForwarderError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    /// `linux.netDevices`: an interface could not be moved (`linux/netdev.rs`).
    #[error(transparent)]
    NetDevices(#[from] crate::linux::netdev::NetdevError),
    #[error("linux.netDevices: refused for a rootless container (moving a host interface needs the host's CAP_NET_ADMIN), as runc refuses it")]
    NetDevicesRootless,
    #[error(transparent)]
    Hook(#[from] hooks::HookError),
    #[error(transparent)]
    Init(#[from] InitFailure),
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error("mkfifo {}", path.display())]
    Mkfifo { path: PathBuf, source: io::Error },
    #[error("open {}", path.display())]
    OpenFifo { path: PathBuf, source: io::Error },
    #[error("socketpair")]
    Socketpair(#[source] io::Error),
    #[error("connect to console socket {}", path.display())]
    ConsoleSocket { path: PathBuf, source: io::Error },
    #[error("socketpair for the console")]
    ConsolePair(#[source] io::Error),
    #[error("PR_SET_CHILD_SUBREAPER")]
    Subreaper(#[source] io::Error),
    #[error("clone")]
    Clone(#[source] io::Error),
    #[error("process.rlimits[{index}]: setrlimit {resource} on the container{hint}")]
    Rlimit {
        index: usize,
        resource: &'static str,
        hint: String,
        source: io::Error,
    },
    #[error("process.oomScoreAdj: write oom_score_adj")]
    OomScoreAdj(#[source] io::Error),
    #[error("linux.uidMappings: write id maps")]
    IdMaps(#[source] io::Error),
    /// Sending `message` to the child.
    #[error("{message}")]
    Send {
        message: &'static str,
        source: io::Error,
    },
    /// No answer from the child within `[runtime] sync_timeout` (stuck in D state, a
    /// hook inside the container that never returns): killed and rolled back.
    #[error("create: no answer from the init within {secs}s at step {step}")]
    SyncTimeout { secs: u64, step: &'static str },
    /// The child's message out of order (`sync: got … while waiting for …`).
    #[error(transparent)]
    Protocol(crate::linux::sync::OutOfOrder),
    /// `status`: how it ended, or why waiting for it failed.
    #[error("container init exited before it was ready ({})", ended(.status, .pid))]
    Died {
        pid: i32,
        status: Result<super::signal::ChildEnd, io::Error>,
    },
    #[error("open the container's user namespace")]
    UsernsOf(#[source] io::Error),
    #[error("{path}: duplicate the namespace fd")]
    NsDup { path: String, source: io::Error },
    /// An idmapped mount (`linux/idmap.rs`); `what` names it.
    #[error("{what}")]
    Idmap { what: String, source: io::Error },
    #[error("sync: the init asked to idmap mounts[{index}], which is not an idmapped bind of a path inside the rootfs")]
    IdmapRequest { index: u32 },
    #[error("mounts[{index}].uidMappings: {what}")]
    IdmapBind {
        index: usize,
        what: String,
        source: io::Error,
    },
    #[error("mounts[{index}]: clone {}", path.display())]
    CloneBind {
        index: usize,
        path: PathBuf,
        source: io::Error,
    },
    #[error("pidfd_open of the container init (pid {pid})")]
    PidfdOpen { pid: i32, source: io::Error },
    #[error(transparent)]
    PidfdSocket(#[from] crate::linux::pidfd::PidfdSocketError),
    #[error("receive the pty master")]
    PtyMaster(#[source] io::Error),
    #[error("no pty master received")]
    NoPtyMaster,
    #[error("linux.seccomp.listenerPath: failed to connect with seccomp agent at {path}")]
    ListenerConnect { path: String, source: io::Error },
    #[error("linux.seccomp.listenerPath: send to {path}")]
    ListenerSend { path: String, source: io::Error },
}

/// How the init ended, or why it could not be waited for (`Error::Died`).
fn ended(status: &Result<super::signal::ChildEnd, io::Error>, pid: &i32) -> String {
    match status {
        Ok(end) => end.to_string(),
        Err(e) => format!("waitpid {pid}: {e}"),
    }
}

/// The rows of the create table (the module doc): [`Step::ALL`] in order, row `n` at
/// index `n - 1`, each with its parent and child text.
macro_rules! steps {
    ($($name:ident = $n:literal : $parent:literal | $child:literal,)*) => {
        // The table in code: the parent's and child's functions carry its numbers, and the
        // tests below keep the module doc and docs/architecture.md equal to it.
        #[cfg_attr(not(test), allow(dead_code))]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Step {
            $(
                #[doc = concat!("Row ", $n, ". **Parent**: ", $parent, ". **Child**: ", $child, ".")]
                $name,
            )*
        }

        #[cfg_attr(not(test), allow(dead_code))]
        impl Step {
            pub const ALL: &'static [Step] = &[$(Step::$name),*];

            /// The row's number.
            pub fn number(self) -> usize {
                match self { $(Step::$name => $n,)* }
            }

            /// What the parent does in this row ("—": nothing).
            pub fn parent(self) -> &'static str {
                match self { $(Step::$name => $parent,)* }
            }

            /// What the child does in this row ("—": nothing).
            pub fn child(self) -> &'static str {
                match self { $(Step::$name => $child,)* }
            }
        }
    };
}

steps! {
    Plan = 1: "the host facts read and the policy applied on them (`container::policy::decide`: AppArmor on and its loaded profiles, SELinux on, the host's namespace ids), then `Plan::new`: the cgroup layout, rootless, the kernel's mount API read, every spec field turned into a plan (mount options, capability masks, rlimits, sysctls checked against the namespaces, seccomp compiled to BPF (with a denying default, ENOSYS for native syscalls newer than the profile, as runc; `SCMP_ACT_NOTIFY` refused as the default and on the syscalls the init makes before the listener reaches the parent: `seccomp::BEFORE_HANDOVER`), namespace paths opened, the notify mount and the cgroup path planned). A bad spec fails here, before anything exists" | "—",
    Profile = 2: "moat's AppArmor profile loaded, when the spec runs under it and the host has not loaded it" | "—",
    StateDir = 3: "state dir created exclusively (a second create of the id fails here); with `NOTIFY_SOCKET`, the container's socket bound in it" | "—",
    Ids = 4: "`moat.userns=auto`: a range taken from the host pool (flock on `/run/moat-userns/lock`), recorded in the state dir and written into the plan (`linux.uidMappings`/`gidMappings`, the idmapped rootfs); a bounded root under `[fleet] rootfs_budget`: its cap taken from the host's ledger (flock on `/run/moat-rootfs/lock`; refused when the live containers' caps plus this one exceed the budget), recorded in the state dir" | "—",
    Cgroup = 5: "the fleet cgroup with its limits, then the container's cgroup created (rootless: a delegated v2 subtree, or none; the systemd driver's scope only planned)" | "—",
    Record = 6: "preliminary record, `config.json`, the compiled seccomp programs and `policy.json` written, so an interrupted create can be deleted; `linux.resources` applied" | "—",
    Channels = 7: "`exec.fifo`, the sync socketpair, the console socket connection" | "—",
    Fork = 8: "`clone3` with every new namespace flag (\"direct\"), or a plain fork of an intermediate (\"staged\": joining user/pid/mount namespaces by path, time namespaces); `CLONE_INTO_CGROUP` puts it in the v2 cgroup (pure v2 and hybrid); with `--systemd-cgroup`, the transient scope started over D-Bus with the child as its process (systemd moves it), then `linux.resources` written to the scope's files" | "joins the v1 cgroups itself (writes `0` to each `tasks` file the parent opened: `cgroups/placement.rs`); non-dumpable (rootless with an unprivileged parent: once the parent has written its id maps); waits for `Go`",
    Release = 9: "`prlimit`, `oom_score_adj`, uid/gid maps; `Go` (carries the state JSON for hooks); idmapped mounts built with `open_tree`+`mount_setattr(MOUNT_ATTR_IDMAP)` once the maps are written (and, in any user namespace, every bind source: opened `O_PATH` in the init's mount namespace through `/proc/<init>/root` for a direct create, which the init clones so locked submounts stay locked; cloned on the host when staged) — after `Go`, or after `MapsWritten` when staged — and sent by fd (`MountFd`)" | "takes its own procfs handle (`linux/procfs.rs`; staged: the intermediate before joining anything, the init again in the container's pid namespace; direct: before the first mount); joins path namespaces (staged: the others before a joined user namespace, as runc, one refused with EPERM retried after it; `timens_offsets` opened before anything is joined, with moat's credentials the kernel checks on the write once the time namespace exists; sysctls of joined namespaces written while still privileged over them); staged: unshares and forks the real init (a pid namespace joined with a new mount namespace: the intermediate does rows 10–11 itself, with procfs contexts made inside the joined namespace by a helper on an empty root, and forks the init after `pivot_root`); receives the mount fds",
    Rootfs = 10: "on `IdmapPlease`: idmaps the detached copy the init sends of a bind source inside the rootfs (`mount_setattr(MOUNT_ATTR_IDMAP)`, which needs host root's privilege over its filesystem) and answers `Idmapped`" | "cgroup namespace, session keyring, `lo`, hostname; rootfs: propagation of `/`, the rootfs path opened once, the mount holding it made a slave unless `rslave`/`rprivate` (found by walking `..` up from it), the rootfs bound onto itself by fd (or the parent's idmapped rootfs attached over it, on `/` if container root cannot reach the path), `mounts[]` in order (a spec target resolved inside the root with `openat2(RESOLVE_IN_ROOT)`, one at or below `/proc`, `/sys`, `/dev` without symlinks below the mount that covers it; mounted by fd; a bind source inside the rootfs opened with `openat2(RESOLVE_IN_ROOT)` when its turn comes, after the mounts before it, and cloned there, an idmapped one sent to the parent to be idmapped before it is attached; every mount kept by its fd), devices, `/dev` links and the pty relative to the held `/dev` (its peer given to `process.user.uid` by fd)",
    Pivot = 11: "on `HooksPlease`: `linux.netDevices` moved into the network namespace of the init (or of the staged intermediate that made it) and renamed, their global addresses carried over and set up (`linux/netdev.rs`); then prestart + createRuntime hooks" | "createContainer hooks (their cwd the held root, by `fchdir`, as runc); `pivot_root` on the held root (`fchdir`, then `\".\"`; the old root, `..` of the held root, made an rslave and detached; or `/` made a slave, `MS_MOVE`+chroot with `--no-pivot`); a late init is forked here",
    Finalize = 12: "—" | "sysctls (through moat's procfs handle), read-only paths, masked paths (verified `/dev/null`, clones by fd of one read-only tmpfs), each target resolved without symlinks below the held mount that covers it and checked after the attach, read-only root, personality",
    Attrs = 13: "on `Listener`: the seccomp listener fd to `listenerPath` at once" | "the asynchronous terminating signals made to end it (a pid namespace's init ignores them at their default action: `kill` of a created container ends it, as runc's); a session of its own (`setsid`) without a terminal; `attrs::apply`: AppArmor/SELinux exec label (for the LSMs the parent's host facts say are on, written through moat's procfs handle), scheduler, ioprio, NNP, fd sweep (`close_range` from 3 + preserved) and seccomp early (without NNP; a listener sent to the parent right after the load), bounding set, groups/gid/uid, capability sets, ambient, umask, cwd (verified inside the root), executable lookup (a missing binary fails create, as runc), fd sweep and seccomp late (with NNP; the listener likewise); the pty made stdio",
    Ready = 14: "on `Ready`: `state.json` with pid and start time, `--pid-file`; `Created`" | "blocks reading `exec.fifo`",
    Start = 15: "`moat start`: writes one byte to the fifo, removes it, runs poststart hooks" | "startContainer hooks, signals reset, `execve`",
}

#[cfg(test)]
mod tests {
    use super::Step;

    /// The rows of the first markdown table after `after` in `text` (lines starting with
    /// `prefix`, which is stripped): (number, parent, child).
    fn table(text: &str, after: &str, prefix: &str) -> Vec<(String, String, String)> {
        let start = text
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} not found"));
        let rows: Vec<(String, String, String)> = text[start..]
            .lines()
            .map(|l| l.strip_prefix(prefix).unwrap_or("").trim())
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2) // header, separator
            .map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
                assert_eq!(cells.len(), 3, "three cells: {l}");
                (cells[0].into(), cells[1].into(), cells[2].into())
            })
            .collect();
        assert!(!rows.is_empty(), "no table after {after:?}");
        rows
    }

    fn steps() -> Vec<(String, String, String)> {
        Step::ALL
            .iter()
            .map(|s| (s.number().to_string(), s.parent().into(), s.child().into()))
            .collect()
    }

    #[test]
    fn steps_are_numbered_in_order() {
        for (i, s) in Step::ALL.iter().enumerate() {
            assert_eq!(s.number(), i + 1, "{s:?}");
        }
    }

    #[test]
    fn module_doc_is_the_step_table() {
        let doc = table(include_str!("mod.rs"), "//! | # |", "//!");
        assert_eq!(doc, steps());
    }

    #[test]
    fn architecture_md_is_the_step_table() {
        let md = table(
            include_str!("../../../docs/architecture.md"),
            "## The create sequence",
            "",
        );
        assert_eq!(md, steps());
    }
}
