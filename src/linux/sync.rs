//! The parent ↔ init protocol: one `SOCK_SEQPACKET` socketpair, one message per packet,
//! a fixed binary encoding, fds next to the message that carries them.
//!
//! ```text
//!   parent (moat create)                         child (container init)
//!   clone (into the v2 cgroup) ────────────────▶ joins the v1 cgroups itself; waits
//!   rlimits, oom_score_adj, id maps*
//!   Go(state JSON) ────────────────────────────▶ joins/unshares namespaces
//!   MountFd(i) + fd, one per idmapped mount** ──▶
//!                         ◀──────────────────── UsernsReady        (staged userns only)
//!   writes id maps
//!   MapsWritten ───────────────────────────────▶
//!   MountFd(i) + fd, one per idmapped mount** ──▶
//!                         ◀──────────────────── InitPid(pid)       (staged only: the
//!                                                                    grandchild is init)
//!                                                rootfs, mounts, devices, console
//!                         ◀──────────────────── HooksPlease        (if prestart/createRuntime)
//!   runs prestart, createRuntime hooks
//!   HooksDone ─────────────────────────────────▶ createContainer hooks, pivot_root,
//!                                                masks, sysctl, LSM, user, caps, seccomp
//!                         ◀──────────────────── Ready [+ seccomp listener fd]
//!   writes state.json and --pid-file
//!   Created ───────────────────────────────────▶ blocks on exec.fifo until `start`
//! ```
//! (*) id maps are written right after clone when the child was cloned into its user
//! namespace. (**) `linux/idmap.rs`: sent once the container's user namespace is mapped,
//! after `Go`, or after `MapsWritten` when the userns is unshared by a staged
//! intermediate; the child knows how many to expect from its plan. Any failure in the child is a `Failed` message carrying the step, errno and
//! the object (path, field) it failed on. EOF on either side means the peer died: the
//! child exits, the parent cleans up.

use std::io;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};

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
    Sync,
}

const STEPS: [Step; 22] = [
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

#[derive(Debug)]
pub enum ToChild {
    Go(Vec<u8>),
    MapsWritten,
    /// Carries the state JSON again: in a staged create only now is the init's pid known.
    HooksDone(Vec<u8>),
    Created,
}

#[derive(Debug)]
pub enum ToParent {
    UsernsReady,
    InitPid(i32),
    HooksPlease,
    Ready,
    Failed(InitFailure),
}

pub struct Channel {
    pub sock: OwnedFd,
}

pub fn pair() -> io::Result<(Channel, Channel)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    Ok((Channel { sock: a }, Channel { sock: b }))
}

const MAX_MSG: usize = 64 * 1024;

impl Channel {
    fn send(&self, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        let iov = [IoSlice::new(bytes)];
        let raw;
        let cmsg;
        let cmsgs: &[ControlMessage] = match fd {
            Some(fd) => {
                raw = [fd.as_raw_fd()];
                cmsg = [ControlMessage::ScmRights(&raw)];
                &cmsg
            }
            None => &[],
        };
        loop {
            match sendmsg::<()>(
                self.sock.as_raw_fd(),
                &iov,
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Err(nix::Error::EINTR) => continue,
                r => return r.map(drop).map_err(io::Error::from),
            }
        }
    }

    fn recv(&self) -> io::Result<(Vec<u8>, Option<OwnedFd>)> {
        let mut buf = vec![0u8; MAX_MSG];
        let (n, fd) = sys::recv_with_fd(self.sock.as_fd(), &mut buf)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer exited"));
        }
        buf.truncate(n);
        Ok((buf, fd))
    }

    /// An idmapped mount the parent built for `mounts[index]` (or the rootfs), by fd.
    pub fn send_mount(&self, index: u32, fd: BorrowedFd<'_>) -> io::Result<()> {
        let mut b = vec![6u8];
        b.extend_from_slice(&index.to_le_bytes());
        self.send(&b, Some(fd))
    }

    pub fn recv_mount(&self) -> io::Result<(u32, OwnedFd)> {
        let (b, fd) = self.recv()?;
        match (b.first(), fd) {
            (Some(6), Some(fd)) if b.len() == 5 => {
                Ok((u32::from_le_bytes(b[1..5].try_into().expect("4 bytes")), fd))
            }
            _ => Err(bad(b[0])),
        }
    }

    pub fn send_child(&self, m: &ToChild) -> io::Result<()> {
        match m {
            ToChild::Go(state) => {
                let mut b = vec![1u8];
                b.extend_from_slice(state);
                self.send(&b, None)
            }
            ToChild::MapsWritten => self.send(&[2], None),
            ToChild::HooksDone(state) => {
                let mut b = vec![3u8];
                b.extend_from_slice(state);
                self.send(&b, None)
            }
            ToChild::Created => self.send(&[4], None),
        }
    }

    pub fn recv_parent(&self) -> io::Result<ToChild> {
        let (b, _) = self.recv()?;
        Ok(match b[0] {
            1 => ToChild::Go(b[1..].to_vec()),
            2 => ToChild::MapsWritten,
            3 => ToChild::HooksDone(b[1..].to_vec()),
            4 => ToChild::Created,
            t => return Err(bad(t)),
        })
    }

    pub fn send_parent(&self, m: &ToParent, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
        match m {
            ToParent::UsernsReady => self.send(&[1], None),
            ToParent::InitPid(pid) => {
                let mut b = vec![2u8];
                b.extend_from_slice(&pid.to_le_bytes());
                self.send(&b, None)
            }
            ToParent::HooksPlease => self.send(&[3], None),
            ToParent::Ready => self.send(&[4], fd),
            ToParent::Failed(f) => {
                let mut b = vec![5u8, f.step as u8];
                b.extend_from_slice(&f.errno.to_le_bytes());
                let d = f.detail.as_bytes();
                b.extend_from_slice(&d[..d.len().min(MAX_MSG - 16)]);
                self.send(&b, None)
            }
        }
    }

    pub fn recv_child(&self) -> io::Result<(ToParent, Option<OwnedFd>)> {
        let (b, fd) = self.recv()?;
        let m = match b[0] {
            1 => ToParent::UsernsReady,
            2 if b.len() >= 5 => {
                ToParent::InitPid(i32::from_le_bytes(b[1..5].try_into().expect("4 bytes")))
            }
            3 => ToParent::HooksPlease,
            4 => ToParent::Ready,
            5 if b.len() >= 6 => {
                let step = STEPS
                    .iter()
                    .copied()
                    .find(|s| *s as u8 == b[1])
                    .unwrap_or(Step::Sync);
                let errno = i32::from_le_bytes(b[2..6].try_into().expect("4 bytes"));
                ToParent::Failed(InitFailure {
                    step,
                    errno,
                    detail: String::from_utf8_lossy(&b[6..]).into_owned(),
                })
            }
            t => return Err(bad(t)),
        };
        Ok((m, fd))
    }
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
        c.send_parent(&ToParent::Ready, Some(std::os::fd::AsFd::as_fd(&f)))
            .unwrap();
        let (m, fd) = p.recv_child().unwrap();
        assert!(matches!(m, ToParent::Ready));
        assert!(fd.is_some());
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
}
