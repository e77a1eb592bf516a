//! Networking and sockets: bringing up `lo`, receiving a message with a descriptor.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::{check_int, Result};

/// Sets IFF_UP on `lo` in the current network namespace.
pub fn loopback_up() -> Result<()> {
    fake!("loopback_up");
    // SAFETY: a plain socket; the returned fd is owned below.
    let sock = check_int(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: the kernel just returned this fd.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data; zeroed is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = libc::c_char::from_ne_bytes([*s]);
    }
    // ioctl request numbers are 32 bits (musl's `Ioctl` is an int); IFF_UP is bit 0.
    #[allow(clippy::cast_possible_truncation)]
    let (get, set, up) = (
        libc::SIOCGIFFLAGS as libc::Ioctl,
        libc::SIOCSIFFLAGS as libc::Ioctl,
        libc::IFF_UP as libc::c_short,
    );
    // SAFETY: SIOCGIFFLAGS fills ifr_flags of a valid ifreq.
    check_int(unsafe { libc::ioctl(sock.as_raw_fd(), get, &mut req) })?;
    // SAFETY: reading and writing the flags member of the union SIOCGIFFLAGS filled.
    unsafe { req.ifr_ifru.ifru_flags |= up };
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq.
    check_int(unsafe { libc::ioctl(sock.as_raw_fd(), set, &req) }).map(drop)
}

/// A connected pair of `SOCK_SEQPACKET` Unix sockets, close-on-exec (the sync channels).
pub fn socketpair_seqpacket() -> Result<(OwnedFd, OwnedFd)> {
    fake!("socketpair_seqpacket");
    let mut fds: [libc::c_int; 2] = [0; 2];
    // SAFETY: `fds` is a valid array of two ints the kernel fills.
    check_int(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: the kernel just returned these two descriptors to us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Sends one message, with at most one descriptor as SCM_RIGHTS, retrying EINTR
/// (`MSG_NOSIGNAL`: a closed peer is an error, not SIGPIPE): a sync channel's packet.
pub fn send_msg(sock: BorrowedFd<'_>, data: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<()> {
    fake!("send_msg", sock, data, fd);
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(data)];
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
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::Error::EINTR) => continue,
            r => return r.map(drop).map_err(io::Error::from),
        }
    }
}

/// How long a connect to, and each send on, a socket the caller named may block: a
/// listener that never accepts (its backlog full) or never reads must not hang create or
/// exec.
pub const UNIX_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A stream socket connected to the Unix socket at `path` (a console socket, a seccomp
/// agent's `listenerPath`), close-on-exec. The connect and every later send on it give up
/// after [`UNIX_SEND_TIMEOUT`] (`SO_SNDTIMEO`, which a Unix stream connect honours): a
/// `TimedOut` error.
pub fn connect_unix(path: &std::path::Path) -> Result<OwnedFd> {
    use nix::sys::socket::{
        connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, UnixAddr,
    };
    fake!("connect_unix", path.display().to_string());
    let fd = socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(io::Error::from)?;
    let secs = i64::try_from(UNIX_SEND_TIMEOUT.as_secs()).unwrap_or(i64::MAX);
    let tv = nix::sys::time::TimeVal::new(secs, 0);
    setsockopt(&fd, sockopt::SendTimeout, &tv).map_err(io::Error::from)?;
    let addr = UnixAddr::new(path).map_err(io::Error::from)?;
    loop {
        match connect(fd.as_raw_fd(), &addr) {
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "nobody accepted the connection within {} s",
                        UNIX_SEND_TIMEOUT.as_secs()
                    ),
                ))
            }
            r => return r.map(|()| fd).map_err(io::Error::from),
        }
    }
}

/// A connected pair of Unix stream sockets, close-on-exec (a console relay).
pub fn unix_stream_pair() -> Result<(OwnedFd, OwnedFd)> {
    fake!("unix_stream_pair");
    std::os::unix::net::UnixStream::pair().map(|(a, b)| (a.into(), b.into()))
}

/// Receives one message and at most one fd passed with SCM_RIGHTS (installed close-on-exec).
/// Extra fds, if a peer sent more, are closed.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Option<OwnedFd>)> {
    fake!("recv_with_fd", sock; |r| super::record::fill(r, buf).map(|n| (n, None)));
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut cspace = nix::cmsg_space!([RawFd; 4]);
    loop {
        let mut iov = [io::IoSliceMut::new(buf)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cspace),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(msg) => {
                let mut fd = None;
                for c in msg.cmsgs()? {
                    if let ControlMessageOwned::ScmRights(fds) = c {
                        for f in fds {
                            // SAFETY: the kernel just installed f in our table for this message.
                            let owned = unsafe { OwnedFd::from_raw_fd(f) };
                            if fd.is_none() {
                                fd = Some(owned);
                            }
                        }
                    }
                }
                return Ok((msg.bytes, fd));
            }
        }
    }
}

/// Receives one whole packet of a `SOCK_SEQPACKET` socket (at most `max` bytes) and at
/// most one fd passed with it, into a buffer of the packet's size: its length is peeked
/// first (`MSG_PEEK | MSG_TRUNC` reports a packet's full length), so no `max`-sized
/// buffer is zeroed per message. An empty result is the peer's end of file.
pub fn recv_msg(sock: BorrowedFd<'_>, max: usize) -> Result<(Vec<u8>, Option<OwnedFd>)> {
    fake!("recv_msg", sock; |r| {
        <Result<Vec<u8>> as super::record::Faked>::faked(r).map(|b| (b, None))
    });
    use nix::sys::socket::{recv, MsgFlags};
    let len = loop {
        match recv(
            sock.as_raw_fd(),
            &mut [0u8; 1],
            MsgFlags::MSG_PEEK | MsgFlags::MSG_TRUNC,
        ) {
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(n) => break n,
        }
    };
    // An empty packet and end of file both read as 0 bytes; a 1-byte buffer still takes
    // the packet (and its fd) off the socket.
    let mut buf = vec![0u8; len.clamp(1, max)];
    let (n, fd) = recv_with_fd(sock, &mut buf)?;
    buf.truncate(n);
    Ok((buf, fd))
}

/// Sends `data` with one descriptor passed as SCM_RIGHTS (`MSG_NOSIGNAL`: a closed peer is
/// an error, not SIGPIPE): the pty master to the console socket.
pub fn send_with_fd(sock: BorrowedFd<'_>, data: &[u8], fd: BorrowedFd<'_>) -> Result<()> {
    fake!("send_with_fd", sock, data, fd);
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds = [fd.as_raw_fd()];
    let iov = [io::IoSlice::new(data)];
    sendmsg::<()>(
        sock.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(drop)
    .map_err(io::Error::from)
}
