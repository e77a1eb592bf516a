//! The parent ↔ init protocol: one `SOCK_SEQPACKET` socketpair, one message per packet,
//! a fixed binary encoding, fds next to the message that carries them. Every message is
//! named ([`Kind`]; its wire tag is the variant's discriminant, nothing else), and both
//! ends of a create's channel follow the same [`Phase`] machine: a message the peer
//! sends out of order is refused with the phase and the message named
//! (`sync: got HooksDone while waiting for Go`), never taken for another one.
//!
//! ```text
//!   phase        parent (moat create)                         child (container init)
//!   Start        clone (into the v2 cgroup) ────────────────▶ joins the v1 cgroups itself; waits
//!                rlimits, oom_score_adj, id maps*
//!                Go(state JSON) ────────────────────────────▶ joins/unshares namespaces
//!   Namespaces   MountFd(i) + fd, one per idmapped mount** ──▶
//!                                      ◀──────────────────── UsernsReady        (staged userns only)
//!   Mapping      writes id maps
//!                MapsWritten ───────────────────────────────▶
//!   Mapped       MountFd(i) + fd, one per idmapped mount** ──▶
//!                                      ◀──────────────────── InitPid(pid)       (staged only: the
//!                                                                                 grandchild is init)
//!   Rootfs                                                    rootfs, mounts, devices, console
//!                                      ◀──────────────────── IdmapPlease(i) + fd  (a copy of a
//!   Idmapping    mount_setattr(MOUNT_ATTR_IDMAP) on it          bind source inside the rootfs,
//!                Idmapped(i) ───────────────────────────────▶   any number, in the phase
//!                                                               the child mounts in)
//!                                      ◀──────────────────── HooksPlease
//!   Hooks        runs prestart, createRuntime hooks
//!                HooksDone ─────────────────────────────────▶ createContainer hooks, pivot_root
//!   Pivoted                            ◀──────────────────── InitPid(pid)       (late init only)
//!   Finalize                                                  masks, sysctl, LSM, seccomp, user, caps
//!                                      ◀──────────────────── Listener + fd  (right after a filter
//!                passes it to the seccomp agent                               with notify rules loads)
//!                                      ◀──────────────────── Ready
//!   Ready        writes state.json and --pid-file
//!                Created ───────────────────────────────────▶ blocks on exec.fifo until `start`
//!   Done
//! ```
//! (*) id maps are written right after clone when the child was cloned into its user
//! namespace. (**) `linux/idmap.rs`: sent once the container's user namespace is mapped,
//! after `Go`, or after `MapsWritten` when the userns is unshared by a staged
//! intermediate; the child knows how many to expect from its plan. Any failure in the
//! child is a `Failed` message carrying the step, errno and the object (path, field) it
//! failed on, accepted in every phase but `Done`; the parent answers it with `Created`
//! (what it sent before reading the failure is dropped), so the child is reaped only once
//! its failure was read. EOF on either side means the
//! peer died: the child exits, the parent cleans up.
//!
//! Which of the optional rows happen is the create's [`Shape`], known to both sides from
//! the plan. The helper channels of `idmap.rs` and the staged intermediate's procfs
//! helper (mount fds only), and exec's (pid and failure only), are unchecked [`pair`]s.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::sys;

/// The init steps, named in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Step {
    Namespaces = 1,
    UserMapping,
    Cgroup,
    Hostname,
    Rootfs,
    Mounts,
    Devices,
    Console,
    Hooks,
    PivotRoot,
    MaskedPaths,
    ReadonlyPaths,
    Sysctl,
    Lsm,
    Personality,
    Scheduler,
    User,
    Capabilities,
    Seccomp,
    Cwd,
    Exec,
    /// The `execve` of the container's process itself (its detail is the path).
    Execve,
    Sync,
}

const STEPS: [Step; 23] = [
    Step::Namespaces,
    Step::UserMapping,
    Step::Cgroup,
    Step::Hostname,
    Step::Rootfs,
    Step::Mounts,
    Step::Devices,
    Step::Console,
    Step::Hooks,
    Step::PivotRoot,
    Step::MaskedPaths,
    Step::ReadonlyPaths,
    Step::Sysctl,
    Step::Lsm,
    Step::Personality,
    Step::Scheduler,
    Step::User,
    Step::Capabilities,
    Step::Seccomp,
    Step::Cwd,
    Step::Exec,
    Step::Execve,
    Step::Sync,
];

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Namespaces => "namespaces",
            Step::UserMapping => "user mapping",
            Step::Cgroup => "cgroup",
            Step::Hostname => "hostname",
            Step::Rootfs => "rootfs",
            Step::Mounts => "mounts",
            Step::Devices => "devices",
            Step::Console => "console",
            Step::Hooks => "hooks",
            Step::PivotRoot => "pivot_root",
            Step::MaskedPaths => "masked paths",
            Step::ReadonlyPaths => "read-only paths",
            Step::Sysctl => "sysctl",
            Step::Lsm => "LSM",
            Step::Personality => "personality",
            Step::Scheduler => "scheduler",
            Step::User => "user",
            Step::Capabilities => "capabilities",
            Step::Seccomp => "seccomp",
            Step::Cwd => "cwd",
            Step::Exec => "exec",
            Step::Execve => "execve",
            Step::Sync => "sync",
        }
    }
}

/// A failure inside the container init, carried typed across the fork.
#[derive(Debug, Clone, thiserror::Error)]
pub struct InitFailure {
    pub step: Step,
    pub errno: i32,
    /// What it failed on: the path, the spec field, the value.
    pub detail: String,
}

impl std::fmt::Display for InitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.step == Step::Execve {
            // The container's program did not start: said as runc says it (Go's
            // `exec PATH: reason`), the line scripts and runc's tests look for.
            return match self.errno {
                0 => write!(f, "exec {}", self.detail),
                e => write!(f, "exec {}: {}", self.detail, errno_text(e)),
            };
        }
        if self.errno != 0 {
            write!(
                f,
                "{}: {}: {}",
                self.step.name(),
                self.detail,
                io::Error::from_raw_os_error(self.errno)
            )
        } else {
            write!(f, "{}: {}", self.step.name(), self.detail)
        }
    }
}

/// An errno as runc's messages say it: the C library's text in lower case, as Go's
/// `syscall.Errno` prints it (glibc's wording, which Go's table follows, for the errors
/// a path lookup or an `execve` gives; musl words a few of them differently).
pub fn errno_text(errno: i32) -> String {
    let text = match errno {
        libc::E2BIG => "argument list too long",
        libc::EACCES => "permission denied",
        libc::EAGAIN => "resource temporarily unavailable",
        libc::EFAULT => "bad address",
        libc::EINVAL => "invalid argument",
        libc::EIO => "input/output error",
        libc::EISDIR => "is a directory",
        libc::ELIBBAD => "accessing a corrupted shared library",
        libc::ELOOP => "too many levels of symbolic links",
        libc::EMFILE => "too many open files",
        libc::ENAMETOOLONG => "file name too long",
        libc::ENFILE => "too many open files in system",
        libc::ENOENT => "no such file or directory",
        libc::ENOEXEC => "exec format error",
        libc::ENOMEM => "cannot allocate memory",
        libc::ENOTDIR => "not a directory",
        libc::EPERM => "operation not permitted",
        libc::ETXTBSY => "text file busy",
        _ => {
            let s = crate::error_text::errno_text(errno);
            let mut c = s.chars();
            return match c.next() {
                Some(first) => first.to_lowercase().chain(c).collect(),
                None => String::new(),
            };
        }
    };
    text.to_string()
}

impl InitFailure {
    pub fn new(step: Step, detail: impl Into<String>) -> Self {
        InitFailure {
            step,
            errno: 0,
            detail: detail.into(),
        }
    }
}

/// Attaches a step and an object to an io error.
pub trait StepExt<T> {
    fn step(self, step: Step, detail: impl FnOnce() -> String) -> Result<T, InitFailure>;
}

impl<T> StepExt<T> for io::Result<T> {
    fn step(self, step: Step, detail: impl FnOnce() -> String) -> Result<T, InitFailure> {
        self.map_err(|e| match e.raw_os_error() {
            Some(errno) => InitFailure {
                step,
                errno,
                detail: detail(),
            },
            // An error moat made up (a refusal): its text is the reason.
            None => InitFailure {
                step,
                errno: 0,
                detail: format!("{}: {e}", detail()),
            },
        })
    }
}

/// Every message of the protocol, parent → child first; the discriminant is the wire tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Go = 1,
    MountFd,
    MapsWritten,
    HooksDone,
    Created,
    UsernsReady,
    InitPid,
    HooksPlease,
    Ready,
    Failed,
    Listener,
    IdmapPlease,
    Idmapped,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Go,
        Kind::MountFd,
        Kind::MapsWritten,
        Kind::HooksDone,
        Kind::Created,
        Kind::UsernsReady,
        Kind::InitPid,
        Kind::HooksPlease,
        Kind::Ready,
        Kind::Failed,
        Kind::Listener,
        Kind::IdmapPlease,
        Kind::Idmapped,
    ];

    fn tag(self) -> u8 {
        self as u8
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.tag() == tag)
    }

    /// Sent by the parent (else by the child).
    pub fn to_child(self) -> bool {
        matches!(
            self,
            Kind::Go
                | Kind::MountFd
                | Kind::MapsWritten
                | Kind::HooksDone
                | Kind::Created
                | Kind::Idmapped
        )
    }
}

#[derive(Debug)]
pub enum ToChild {
    Go(Vec<u8>),
    /// An idmapped (or parent-built) mount for `mounts[index]` (or the rootfs), by fd.
    MountFd(u32),
    MapsWritten,
    /// Carries the state JSON again: in a staged create only now is the init's pid known.
    HooksDone(Vec<u8>),
    Created,
    /// The detached copy the child sent with `IdmapPlease(index)` is idmapped now (the
    /// child's own fd names the same mount).
    Idmapped(u32),
}

impl ToChild {
    pub fn kind(&self) -> Kind {
        match self {
            ToChild::Go(_) => Kind::Go,
            ToChild::MountFd(_) => Kind::MountFd,
            ToChild::MapsWritten => Kind::MapsWritten,
            ToChild::HooksDone(_) => Kind::HooksDone,
            ToChild::Created => Kind::Created,
            ToChild::Idmapped(_) => Kind::Idmapped,
        }
    }
}

#[derive(Debug)]
pub enum ToParent {
    UsernsReady,
    InitPid(i32),
    HooksPlease,
    /// The seccomp listener (the fd next to it), sent the moment its filter is loaded.
    Listener,
    Ready,
    Failed(InitFailure),
    /// A detached copy (the fd next to it) of a bind source inside the rootfs that
    /// `mounts[index]` idmaps: the init cloned it in its own mount namespace, and only
    /// the parent, privileged over the source's filesystem, may idmap it.
    IdmapPlease(u32),
}

impl ToParent {
    pub fn kind(&self) -> Kind {
        match self {
            ToParent::UsernsReady => Kind::UsernsReady,
            ToParent::InitPid(_) => Kind::InitPid,
            ToParent::HooksPlease => Kind::HooksPlease,
            ToParent::Listener => Kind::Listener,
            ToParent::Ready => Kind::Ready,
            ToParent::Failed(_) => Kind::Failed,
            ToParent::IdmapPlease(_) => Kind::IdmapPlease,
        }
    }
}

/// Which optional rows of the protocol a create has, from its plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// An intermediate is forked (joins by path, time namespaces): `InitPid` comes.
    pub staged: bool,
    /// The intermediate unshares the user namespace: `UsernsReady`, `MapsWritten`, and the
    /// mount fds only after them.
    pub userns: bool,
    /// The init is forked after `pivot_root` (a joined pid namespace with a new mount
    /// namespace): `InitPid` comes after `HooksDone`.
    pub late_init: bool,
}

impl Shape {
    /// The phase in which the child makes its mounts: the direct init right after `Go`
    /// (or, with a late init, the intermediate: after `MapsWritten` when it unshares the
    /// user namespace), else the init once its pid is said.
    pub fn mounting(self) -> Phase {
        match (self.staged, self.late_init, self.userns) {
            (false, ..) => Phase::Namespaces,
            (true, true, false) => Phase::Namespaces,
            (true, true, true) => Phase::Mapped,
            (true, false, _) => Phase::Rootfs,
        }
    }
}

/// Where a create stands, the same on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Cloned: the child waits for `Go`.
    Start,
    /// `Go` sent: the child joins its namespaces; mount fds may follow.
    Namespaces,
    /// `UsernsReady`: the parent writes the id maps.
    Mapping,
    /// `MapsWritten`: mount fds may follow; the intermediate forks the init.
    Mapped,
    /// `InitPid`: the init sets up the rootfs.
    Rootfs,
    /// `IdmapPlease`: the parent idmaps a copy the child made; `Idmapped` goes back to
    /// the phase the child mounts in ([`Shape::mounting`]).
    Idmapping,
    /// `HooksPlease`: the parent runs its hooks.
    Hooks,
    /// `HooksDone` with a late init: the intermediate forks it after `pivot_root`.
    Pivoted,
    /// The init finishes (masks, attributes) and says `Ready`.
    Finalize,
    /// `Ready`: the parent records the container.
    Ready,
    /// `Failed`: only the parent's acknowledgement (`Created`) follows.
    Failed,
    /// `Created`: nothing more is said.
    Done,
}

impl Phase {
    /// The phase after `k`, or `None` when `k` is out of order here.
    pub fn next(self, shape: Shape, k: Kind) -> Option<Phase> {
        use Kind as K;
        use Phase as P;
        let direct = !shape.staged;
        Some(match (self, k) {
            (P::Done, _) => return None,
            (P::Failed, K::Created) => P::Done,
            // What the parent sent before it read the failure is dropped unread.
            (P::Failed, k) if k.to_child() => P::Failed,
            (P::Failed, _) => return None,
            (_, K::Failed) => P::Failed,
            (P::Start, K::Go) => P::Namespaces,
            (P::Namespaces, K::MountFd) if !shape.userns => P::Namespaces,
            (P::Namespaces, K::UsernsReady) if shape.staged && shape.userns => P::Mapping,
            (P::Namespaces, K::InitPid) if shape.staged && !shape.userns && !shape.late_init => {
                P::Rootfs
            }
            (P::Namespaces, K::HooksPlease) if direct || (shape.late_init && !shape.userns) => {
                P::Hooks
            }
            (P::Mapping, K::MapsWritten) => P::Mapped,
            (P::Mapped, K::MountFd) => P::Mapped,
            (P::Mapped, K::InitPid) if !shape.late_init => P::Rootfs,
            (P::Mapped, K::HooksPlease) if shape.late_init => P::Hooks,
            (P::Rootfs, K::HooksPlease) => P::Hooks,
            (p, K::IdmapPlease) if p == shape.mounting() => P::Idmapping,
            (P::Idmapping, K::Idmapped) => shape.mounting(),
            (P::Hooks, K::HooksDone) if shape.late_init => P::Pivoted,
            (P::Hooks, K::HooksDone) => P::Finalize,
            (P::Pivoted, K::InitPid) => P::Finalize,
            (P::Finalize, K::Listener) => P::Finalize,
            (P::Finalize, K::Ready) => P::Ready,
            (P::Ready, K::Created) => P::Done,
            _ => return None,
        })
    }

    /// What may come next from the side that sends `to_child` messages (or the other).
    fn expected(self, shape: Shape, to_child: bool) -> String {
        let names: Vec<String> = Kind::ALL
            .iter()
            .filter(|k| k.to_child() == to_child && **k != Kind::Failed)
            .filter(|k| self.next(shape, **k).is_some())
            .map(|k| format!("{k:?}"))
            .collect();
        if names.is_empty() {
            format!("nothing (phase {self:?})")
        } else {
            names.join(" or ")
        }
    }
}

/// A message out of order: received from the peer (`got`), or about to be sent by this
/// side (a bug of moat's). Carried inside the channel's `io::Error` (`InvalidData`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct OutOfOrder {
    pub kind: Kind,
    pub got: bool,
    pub phase: Phase,
    pub shape: Shape,
}

impl std::fmt::Display for OutOfOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sync: {}", self.detail())
    }
}

impl OutOfOrder {
    /// `got HooksDone while waiting for Go` (what an `InitFailure` of step `sync` says).
    pub fn detail(&self) -> String {
        let what = if self.got { "got" } else { "cannot send" };
        let expected = self.phase.expected(self.shape, self.kind.to_child());
        format!("{what} {:?} while waiting for {expected}", self.kind)
    }

    /// The out-of-order message inside a channel error, if that is what it is.
    pub fn of(e: &io::Error) -> Option<OutOfOrder> {
        e.get_ref()?.downcast_ref::<OutOfOrder>().copied()
    }
}

/// One side's view of a create's protocol.
#[derive(Debug)]
struct Protocol {
    shape: Shape,
    phase: Cell<Phase>,
}

impl Protocol {
    /// Moves on by `k`: received (`got`) from the peer, or about to be sent.
    fn advance(&self, k: Kind, got: bool) -> io::Result<()> {
        let phase = self.phase.get();
        match phase.next(self.shape, k) {
            Some(p) => {
                self.phase.set(p);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                OutOfOrder {
                    kind: k,
                    got,
                    phase,
                    shape: self.shape,
                },
            )),
        }
    }
}

pub struct Channel {
    pub sock: OwnedFd,
    /// A create's channel: the phase machine this end follows (`None`: unchecked).
    protocol: Option<Protocol>,
}

/// An unchecked channel pair (helpers, exec).
pub fn pair() -> io::Result<(Channel, Channel)> {
    let (a, b) = sys::socketpair_seqpacket()?;
    Ok((
        Channel {
            sock: a,
            protocol: None,
        },
        Channel {
            sock: b,
            protocol: None,
        },
    ))
}

/// A create's channel pair (parent's end first), both ends checking `shape`'s order.
pub fn create_pair(shape: Shape) -> io::Result<(Channel, Channel)> {
    let (mut a, mut b) = pair()?;
    for ch in [&mut a, &mut b] {
        ch.protocol = Some(Protocol {
            shape,
            phase: Cell::new(Phase::Start),
        });
    }
    Ok((a, b))
}

const MAX_MSG: usize = 64 * 1024;

impl Channel {
    fn check(&self, k: Kind, got: bool) -> io::Result<()> {
        match &self.protocol {
            Some(p) => p.advance(k, got),
            None => Ok(()),
        }
    }

    /// `Created` has been said: the parent has recorded the container and left (a checked
    /// channel only; an unchecked one never knows).
    pub fn created(&self) -> bool {
        self.protocol
            .as_ref()
            .is_some_and(|p| p.phase.get() == Phase::Done)
    }

    /// The staged init's own view: `k` was sent on its behalf by the intermediate
    /// (`InitPid`, sent by the process that forked it).
    pub fn sent_for_us(&self, k: Kind) -> io::Result<()> {
        self.check(k, false)
    }

    fn send(&self, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        sys::send_msg(self.sock.as_fd(), bytes, fd)
    }

    /// One packet: its kind (checked against the phase), payload and fd.
    fn recv(&self) -> io::Result<(Kind, Vec<u8>, Option<OwnedFd>)> {
        let (mut buf, fd) = sys::recv_msg(self.sock.as_fd(), MAX_MSG)?;
        if buf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer exited"));
        }
        let k = Kind::from_tag(buf[0]).ok_or_else(|| bad(buf[0]))?;
        self.check(k, true)?;
        buf.remove(0);
        Ok((k, buf, fd))
    }

    /// An idmapped mount the parent built for `mounts[index]` (or the rootfs), by fd.
    pub fn send_mount(&self, index: u32, fd: BorrowedFd<'_>) -> io::Result<()> {
        let m = ToChild::MountFd(index);
        self.check(m.kind(), false)?;
        self.send(&encode_child(&m), Some(fd))
    }

    pub fn recv_mount(&self) -> io::Result<(u32, OwnedFd)> {
        match self.recv()? {
            (Kind::MountFd, b, Some(fd)) if b.len() == 4 => {
                Ok((u32::from_le_bytes(b[..4].try_into().expect("4 bytes")), fd))
            }
            (k, ..) => Err(bad(k.tag())),
        }
    }

    pub fn send_child(&self, m: &ToChild) -> io::Result<()> {
        if let ToChild::MountFd(_) = m {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "sync: a MountFd goes with its fd (send_mount)",
            ));
        }
        self.check(m.kind(), false)?;
        self.send(&encode_child(m), None)
    }

    pub fn recv_parent(&self) -> io::Result<ToChild> {
        let (k, b, _) = self.recv()?;
        Ok(match k {
            Kind::Go => ToChild::Go(b),
            Kind::MapsWritten => ToChild::MapsWritten,
            Kind::HooksDone => ToChild::HooksDone(b),
            Kind::Created => ToChild::Created,
            Kind::MountFd if b.len() == 4 => {
                ToChild::MountFd(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
            }
            Kind::Idmapped if b.len() == 4 => {
                ToChild::Idmapped(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
            }
            k => return Err(bad(k.tag())),
        })
    }

    /// The child's side of `IdmapPlease`: sends the detached copy `tree` of `mounts[index]`'s
    /// source and waits until the parent has idmapped it.
    pub fn idmap_please(&self, index: u32, tree: BorrowedFd<'_>) -> io::Result<()> {
        self.send_parent(&ToParent::IdmapPlease(index), Some(tree))?;
        match self.recv_parent()? {
            ToChild::Idmapped(i) if i == index => Ok(()),
            m => Err(bad(m.kind().tag())),
        }
    }

    pub fn send_parent(&self, m: &ToParent, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        self.check(m.kind(), false)?;
        let mut b = vec![m.kind().tag()];
        match m {
            ToParent::InitPid(pid) => b.extend_from_slice(&pid.to_le_bytes()),
            ToParent::IdmapPlease(index) => b.extend_from_slice(&index.to_le_bytes()),
            ToParent::Failed(f) => {
                b.push(f.step as u8);
                b.extend_from_slice(&f.errno.to_le_bytes());
                let d = f.detail.as_bytes();
                b.extend_from_slice(&d[..d.len().min(MAX_MSG - 16)]);
            }
            ToParent::UsernsReady
            | ToParent::HooksPlease
            | ToParent::Listener
            | ToParent::Ready => {}
        }
        let fd = match m {
            ToParent::Listener | ToParent::IdmapPlease(_) => fd,
            _ => None,
        };
        self.send(&b, fd)
    }

    /// [`Channel::recv_child`] waiting at most `timeout` (`ErrorKind::TimedOut` after it),
    /// so no wait of create on the child is unbounded.
    pub fn recv_child_within(
        &self,
        timeout: std::time::Duration,
    ) -> io::Result<(ToParent, Option<OwnedFd>)> {
        if !sys::poll_readable_within(self.sock.as_fd(), timeout)? {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer"));
        }
        self.recv_child()
    }

    /// The phase this end of a checked channel is in (`None` for an unchecked one).
    pub fn phase(&self) -> Option<Phase> {
        self.protocol.as_ref().map(|p| p.phase.get())
    }

    pub fn recv_child(&self) -> io::Result<(ToParent, Option<OwnedFd>)> {
        let (k, b, fd) = self.recv()?;
        let m = match k {
            Kind::UsernsReady => ToParent::UsernsReady,
            Kind::InitPid if b.len() >= 4 => {
                ToParent::InitPid(i32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
            }
            Kind::HooksPlease => ToParent::HooksPlease,
            Kind::Listener if fd.is_some() => ToParent::Listener,
            Kind::IdmapPlease if fd.is_some() && b.len() == 4 => {
                ToParent::IdmapPlease(u32::from_le_bytes(b[..4].try_into().expect("4 bytes")))
            }
            Kind::Ready => ToParent::Ready,
            Kind::Failed if b.len() >= 5 => {
                let step = STEPS
                    .iter()
                    .copied()
                    .find(|s| *s as u8 == b[0])
                    .unwrap_or(Step::Sync);
                let errno = i32::from_le_bytes(b[1..5].try_into().expect("4 bytes"));
                ToParent::Failed(InitFailure {
                    step,
                    errno,
                    detail: String::from_utf8_lossy(&b[5..]).into_owned(),
                })
            }
            k => return Err(bad(k.tag())),
        };
        Ok((m, fd))
    }
}

fn encode_child(m: &ToChild) -> Vec<u8> {
    let mut b = vec![m.kind().tag()];
    match m {
        ToChild::Go(state) | ToChild::HooksDone(state) => b.extend_from_slice(state),
        ToChild::MountFd(index) | ToChild::Idmapped(index) => {
            b.extend_from_slice(&index.to_le_bytes())
        }
        ToChild::MapsWritten | ToChild::Created => {}
    }
    b
}

/// What the parent's `send_child(m)` puts on the wire: the packets a sequence test
/// scripts as the fake's `recv_msg` answers.
#[cfg(test)]
pub fn wire(m: &ToChild) -> Vec<u8> {
    encode_child(m)
}

/// A kind's tag, the first byte of its packet (what a sequence test looks for in the
/// recorded `send_msg` data).
#[cfg(test)]
pub fn wire_tag(k: Kind) -> u8 {
    k.tag()
}

fn bad(tag: u8) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("unexpected sync message {tag}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_roundtrip_with_fd() {
        let (p, c) = pair().unwrap();
        p.send_child(&ToChild::Go(b"{\"x\":1}".to_vec())).unwrap();
        assert!(matches!(c.recv_parent().unwrap(), ToChild::Go(s) if s == b"{\"x\":1}"));
        let f = std::fs::File::open("/dev/null").unwrap();
        c.send_parent(&ToParent::Listener, Some(std::os::fd::AsFd::as_fd(&f)))
            .unwrap();
        let (m, fd) = p.recv_child().unwrap();
        assert!(matches!(m, ToParent::Listener));
        assert!(fd.is_some());
        // An idmap request carries its copy's fd and is answered for the same index (the
        // answer queued first: one thread, unchecked ends).
        p.send_child(&ToChild::Idmapped(7)).unwrap();
        c.idmap_please(7, std::os::fd::AsFd::as_fd(&f)).unwrap();
        let (m, fd) = p.recv_child().unwrap();
        assert!(matches!(m, ToParent::IdmapPlease(7)));
        assert!(fd.is_some());
        p.send_child(&ToChild::Idmapped(8)).unwrap();
        assert!(c.idmap_please(7, std::os::fd::AsFd::as_fd(&f)).is_err());
        assert!(matches!(
            p.recv_child().unwrap().0,
            ToParent::IdmapPlease(7)
        ));
        c.send_parent(
            &ToParent::Failed(InitFailure {
                step: Step::Mounts,
                errno: libc::ENOENT,
                detail: "mounts[2].destination /x".into(),
            }),
            None,
        )
        .unwrap();
        let (m, _) = p.recv_child().unwrap();
        let ToParent::Failed(f) = m else { panic!() };
        assert_eq!(f.step, Step::Mounts);
        assert_eq!(
            f.to_string(),
            "mounts: mounts[2].destination /x: No such file or directory (os error 2)"
        );
        drop(c);
        assert!(p.recv_child().is_err(), "EOF must surface as an error");
    }

    /// Every shape a create can have, with its messages in order (one mount fd where
    /// mount fds go, one idmap request where the child mounts; they may repeat there).
    fn sequences() -> Vec<(Shape, Vec<Kind>)> {
        use Kind::*;
        let shape = |staged, userns, late_init| Shape {
            staged,
            userns,
            late_init,
        };
        vec![
            (
                shape(false, false, false),
                vec![
                    Go,
                    MountFd,
                    IdmapPlease,
                    Idmapped,
                    HooksPlease,
                    HooksDone,
                    Ready,
                    Created,
                ],
            ),
            (
                shape(true, false, false),
                vec![
                    Go,
                    MountFd,
                    InitPid,
                    IdmapPlease,
                    Idmapped,
                    HooksPlease,
                    HooksDone,
                    Ready,
                    Created,
                ],
            ),
            (
                shape(true, true, false),
                vec![
                    Go,
                    UsernsReady,
                    MapsWritten,
                    MountFd,
                    InitPid,
                    IdmapPlease,
                    Idmapped,
                    HooksPlease,
                    HooksDone,
                    Ready,
                    Created,
                ],
            ),
            (
                shape(true, false, true),
                vec![
                    Go,
                    MountFd,
                    IdmapPlease,
                    Idmapped,
                    HooksPlease,
                    HooksDone,
                    InitPid,
                    Ready,
                    Created,
                ],
            ),
            (
                shape(true, true, true),
                vec![
                    Go,
                    UsernsReady,
                    MapsWritten,
                    MountFd,
                    IdmapPlease,
                    Idmapped,
                    HooksPlease,
                    HooksDone,
                    InitPid,
                    Ready,
                    Created,
                ],
            ),
        ]
    }

    fn protocol(shape: Shape) -> Protocol {
        Protocol {
            shape,
            phase: Cell::new(Phase::Start),
        }
    }

    #[test]
    fn in_order_is_accepted_and_every_other_message_refused() {
        for (shape, seq) in sequences() {
            let p = protocol(shape);
            for (i, &k) in seq.iter().enumerate() {
                let here = p.phase.get();
                for other in Kind::ALL {
                    // The next message, a failure, and mount fds and idmap requests any
                    // number of times (none included) where they go: in order.
                    let after = |k: Kind| i > 0 && seq[i - 1] == k;
                    let repeat = (other == Kind::MountFd
                        && (after(Kind::MountFd) || after(Kind::Idmapped)))
                        || (other == Kind::IdmapPlease && after(Kind::Idmapped));
                    let skips = |from: usize, n: usize| seq.get(from + n) == Some(&other);
                    let no_mounts = k == Kind::MountFd
                        && (skips(i, 1)
                            || (seq.get(i + 1) == Some(&Kind::IdmapPlease) && skips(i, 3)));
                    let no_idmap = k == Kind::IdmapPlease && skips(i, 2);
                    // The seccomp listener may come (any number of times) before Ready.
                    let listener = other == Kind::Listener && k == Kind::Ready;
                    if other == k
                        || repeat
                        || no_mounts
                        || no_idmap
                        || listener
                        || other == Kind::Failed
                    {
                        continue;
                    }
                    let q = protocol(shape);
                    q.phase.set(here);
                    assert!(
                        q.advance(other, true).is_err(),
                        "{shape:?}: {other:?} accepted in {here:?} (expected {k:?})"
                    );
                    assert_eq!(q.phase.get(), here, "a refused message moves nothing");
                }
                p.advance(k, true)
                    .unwrap_or_else(|e| panic!("{shape:?}: {k:?} in {here:?}: {e}"));
            }
            assert_eq!(p.phase.get(), Phase::Done);
            for k in Kind::ALL {
                assert!(p.advance(k, true).is_err(), "{k:?} after Done");
            }
        }
    }

    #[test]
    fn a_failure_is_acknowledged_in_every_phase() {
        for (shape, seq) in sequences() {
            for n in 0..seq.len() - 1 {
                let p = protocol(shape);
                for &k in &seq[..n] {
                    p.advance(k, true).unwrap();
                }
                p.advance(Kind::Failed, true).unwrap();
                // What the parent sent before it read the failure is dropped.
                assert!(p.advance(Kind::Go, true).is_ok() || n > 0);
                for k in [Kind::Ready, Kind::HooksPlease, Kind::InitPid, Kind::Failed] {
                    assert!(p.advance(k, true).is_err(), "{k:?} after Failed");
                }
                p.advance(Kind::Created, true).unwrap();
                assert_eq!(p.phase.get(), Phase::Done);
            }
        }
    }

    #[test]
    fn out_of_order_names_the_phase_and_the_message() {
        let shape = Shape {
            staged: false,
            userns: false,
            late_init: false,
        };
        let (parent, child) = create_pair(shape).unwrap();
        // A raw end, to send what the checked one would refuse to.
        let raw = Channel {
            sock: parent.sock.try_clone().unwrap(),
            protocol: None,
        };
        raw.send_child(&ToChild::HooksDone(Vec::new())).unwrap();
        let e = child.recv_parent().unwrap_err();
        assert_eq!(e.to_string(), "sync: got HooksDone while waiting for Go");
        assert_eq!(
            OutOfOrder::of(&e),
            Some(OutOfOrder {
                kind: Kind::HooksDone,
                got: true,
                phase: Phase::Start,
                shape,
            })
        );
        // The sender's own machine refuses too.
        let e = parent.send_child(&ToChild::Created).unwrap_err();
        assert_eq!(
            e.to_string(),
            "sync: cannot send Created while waiting for Go"
        );
        parent.send_child(&ToChild::Go(b"{}".to_vec())).unwrap();
        assert!(matches!(child.recv_parent().unwrap(), ToChild::Go(_)));
        child.send_parent(&ToParent::Ready, None).unwrap_err();
        raw.send_child(&ToChild::Created).unwrap();
        let e = child.recv_parent().unwrap_err();
        assert_eq!(e.to_string(), "sync: got Created while waiting for MountFd");
    }

    #[test]
    fn wire_tags_are_the_kinds() {
        for (i, k) in Kind::ALL.iter().enumerate() {
            assert_eq!(Kind::from_tag(k.tag()), Some(*k));
            assert_eq!(usize::from(k.tag()), i + 1);
        }
        assert_eq!(Kind::from_tag(0), None);
    }
}
