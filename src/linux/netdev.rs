//! `linux.netDevices` (runtime-spec 1.3): host interfaces moved into the container's
//! network namespace by the parent, over rtnetlink, as runc 1.3+ does.
//!
//! For each interface, in the map's (sorted) order: looked up by name in moat's own
//! (the host's) network namespace; its permanent addresses of global scope read (the
//! kernel drops every address when an interface changes namespace; runc carries exactly
//! these over: dynamic ones live only as long as their source, and host- or link-scoped
//! ones mean nothing elsewhere); set down on the host; moved and renamed by one
//! `RTM_SETLINK` (`IFLA_NET_NS_FD` with `IFLA_IFNAME`, as runc); then, through a netlink
//! socket opened inside the container's namespace, the addresses added back and the
//! interface set up (always, as runc). MTU and MAC address move with the device. The
//! kernel renames only after the move (unless the host name is taken inside), so a new
//! name the container's namespace already has is refused before anything changes, and an
//! interface a failed rename left inside is moved back.
//!
//! Nothing is moved back: on delete (or a failed create) the namespace goes with its last
//! process, and the kernel returns a physical interface to the host's initial network
//! namespace (renamed `devN` if its name is taken there) and destroys a virtual one (a
//! veth takes its peer with it), as it does for runc. An interface moved into a
//! namespace joined by path stays there with that namespace.
//!
//! This runs only for a spec with `linux.netDevices`; the netlink crates cost nothing to
//! any other container (no start-up work, no socket).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use netlink_packet_core::{
    DefaultNla, Emitable, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, Parseable, NLMSG_DONE, NLMSG_ERROR, NLM_F_ACK,
    NLM_F_CREATE, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_EXCL, NLM_F_MULTIPART, NLM_F_REQUEST,
};
use netlink_packet_route::address::{
    AddressAttribute, AddressHeaderFlags, AddressMessage, AddressScope,
};
use netlink_packet_route::link::{LinkFlags, LinkHeader};
use netlink_packet_route::AddressFamily;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::sys;

/// A move that failed, naming the interface (its key in `linux.netDevices`) and the step.
#[derive(Debug, thiserror::Error)]
pub enum NetdevError {
    #[error("linux.netDevices[{host:?}]: {what}")]
    Step {
        host: String,
        what: String,
        source: io::Error,
    },
    #[error(
        "linux.netDevices: refused: the container's network namespace is moat's own (the \
         host's): the interfaces would only be renamed on the host"
    )]
    HostNamespace,
    #[error("linux.netDevices: {what}")]
    Namespace {
        what: &'static str,
        source: io::Error,
    },
}

/// Moves `devices` ((host name, name in the container), as `spec::Linux::net_devices`
/// gives them) into the network namespace of process `pid` (the init, or the staged
/// intermediate that made the namespace). Stops at the first failure; what was moved
/// before it goes with the namespace when the create is rolled back.
pub fn move_into(pid: i32, devices: &[(&str, &str)]) -> Result<(), NetdevError> {
    if devices.is_empty() {
        return Ok(());
    }
    let ns_err = |what| move |source| NetdevError::Namespace { what, source };
    let path = format!("/proc/{pid}/ns/net\0");
    let path = std::ffi::CStr::from_bytes_with_nul(path.as_bytes()).expect("one NUL, at the end");
    let target = sys::openat(super::path::cwd(), path, libc::O_RDONLY, 0)
        .map_err(ns_err("open the container's network namespace"))?;
    let own = sys::openat(
        super::path::cwd(),
        c"/proc/thread-self/ns/net",
        libc::O_RDONLY,
        0,
    )
    .map_err(ns_err("open moat's own network namespace"))?;
    let id = |fd: BorrowedFd<'_>| sys::fstat(fd).map(|st| (st.st_dev, st.st_ino));
    let target_id =
        id(target.as_fd()).map_err(ns_err("fstat the container's network namespace"))?;
    let own_id = id(own.as_fd()).map_err(ns_err("fstat moat's own network namespace"))?;
    if target_id == own_id {
        return Err(NetdevError::HostNamespace);
    }
    let mut host = Route::open().map_err(ns_err("open a netlink socket on the host"))?;
    let mut inside = Route::open_in(target.as_fd()).map_err(ns_err(
        "open a netlink socket in the container's network namespace",
    ))?;
    for &(from, to) in devices {
        move_one(
            &mut host,
            &mut inside,
            (target.as_fd(), own.as_fd()),
            from,
            to,
        )?;
    }
    Ok(())
}

/// Moves one interface; `ns` is (the container's network namespace, moat's own).
fn move_one(
    host: &mut Route,
    inside: &mut Route,
    ns: (BorrowedFd<'_>, BorrowedFd<'_>),
    from: &str,
    to: &str,
) -> Result<(), NetdevError> {
    let (target, own) = ns;
    let step = |what: String| {
        move |source| NetdevError::Step {
            host: from.to_string(),
            what,
            source,
        }
    };
    let link = host.link(from).map_err(step(
        "no such interface in the host's network namespace".into(),
    ))?;
    let index = link.index;
    let was_up = link.flags.contains(LinkFlags::Up);
    // The kernel moves the interface first and renames it inside after: a name taken
    // there would fail the rename with the interface already moved. Refused before.
    if inside.link(to).is_ok() {
        return Err(step(format!(
            "the container's network namespace already has an interface named {to:?}"
        ))(io::Error::from_raw_os_error(libc::EEXIST)));
    }
    // Whether a failed move may have left it inside under its host name (see below).
    let from_taken_inside = inside.link(from).is_ok();
    let addrs = host
        .addresses(index)
        .map_err(step("read its addresses".into()))?;
    host.set_up(index, false)
        .map_err(step("set it down on the host".into()))?;
    let moved = Request::set_link(index, vec![if_name(to), net_ns_fd(target)]);
    if let Err(e) = host.request(moved, 0) {
        // A rename refused inside after the move (a name taken in between) leaves the
        // interface there under its host name: brought back, then as it was.
        if let (false, Ok(l)) = (from_taken_inside, inside.link(from)) {
            let back = Request::set_link(l.index, vec![net_ns_fd(own)]);
            let _ = inside.request(back, 0);
        }
        if let Ok(l) = host.link(from) {
            // Moved there and back, it lost its addresses on the way.
            for &(addr, prefix) in &addrs {
                let _ = host.add_address(l.index, addr, prefix);
            }
            if was_up {
                let _ = host.set_up(l.index, true);
            }
        }
        return Err(step(format!(
            "move it into the container's network namespace as {to:?}"
        ))(e));
    }
    let index = inside
        .link(to)
        .map_err(step(format!(
            "find {to:?} in the container's network namespace"
        )))?
        .index;
    for (addr, prefix) in addrs {
        inside
            .add_address(index, addr, prefix)
            .map_err(step(format!(
                "add its address {addr}/{prefix} in the container"
            )))?;
    }
    inside
        .set_up(index, true)
        .map_err(step(format!("set {to:?} up in the container")))?;
    Ok(())
}

/// `IFLA_IFNAME`: an interface name, NUL-terminated.
fn if_name(name: &str) -> DefaultNla {
    let mut v = name.as_bytes().to_vec();
    v.push(0);
    DefaultNla::new(libc::IFLA_IFNAME, v)
}

/// `IFLA_NET_NS_FD`: the network namespace an interface is to move into.
fn net_ns_fd(ns: BorrowedFd<'_>) -> DefaultNla {
    // A descriptor is never negative.
    let fd = u32::try_from(ns.as_raw_fd()).unwrap_or(u32::MAX);
    DefaultNla::new(libc::IFLA_NET_NS_FD, fd.to_ne_bytes().to_vec())
}

/// What moat sends: a link header with raw attributes, or an address message. Not the
/// crate's `RouteNetlinkMessage`, whose emitters and parsers for every kind of message,
/// link and qdisc made the static binary about 0.5 MB larger and every moat call fault
/// in more text, container or not.
struct Request {
    kind: u16,
    body: Body,
}

enum Body {
    Link(LinkHeader, Vec<DefaultNla>),
    Address(AddressMessage),
}

impl Request {
    fn set_link(index: u32, attrs: Vec<DefaultNla>) -> Request {
        let header = LinkHeader {
            index,
            ..LinkHeader::default()
        };
        Request {
            kind: libc::RTM_SETLINK,
            body: Body::Link(header, attrs),
        }
    }
}

impl NetlinkSerializable for Request {
    fn message_type(&self) -> u16 {
        self.kind
    }

    fn buffer_len(&self) -> usize {
        match &self.body {
            Body::Link(h, attrs) => h.buffer_len() + attrs.as_slice().buffer_len(),
            Body::Address(m) => m.buffer_len(),
        }
    }

    fn serialize(&self, buffer: &mut [u8]) {
        match &self.body {
            Body::Link(h, attrs) => {
                h.emit(buffer);
                attrs.as_slice().emit(&mut buffer[h.buffer_len()..]);
            }
            Body::Address(m) => m.emit(buffer),
        }
    }
}

impl From<Request> for NetlinkPayload<Request> {
    fn from(r: Request) -> Self {
        NetlinkPayload::InnerMessage(r)
    }
}

/// What moat reads back: a link's header (its index and flags), or an address.
enum Answer {
    Link(LinkHeader),
    Address(AddressMessage),
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// An rtnetlink socket of one network namespace, and its requests' sequence numbers.
struct Route {
    sock: Socket,
    seq: u32,
}

impl Route {
    /// A socket in the calling thread's network namespace.
    fn open() -> io::Result<Route> {
        let mut sock = Socket::new(NETLINK_ROUTE)?;
        sock.bind_auto()?;
        sock.connect(&SocketAddr::new(0, 0))?;
        Ok(Route { sock, seq: 0 })
    }

    /// A socket in the network namespace `ns`: opened by a thread of its own that enters
    /// it (a socket keeps the namespace it was made in), so moat's own thread never
    /// leaves the host's.
    fn open_in(ns: BorrowedFd<'_>) -> io::Result<Route> {
        std::thread::scope(|s| {
            s.spawn(move || {
                sys::setns(ns, libc::CLONE_NEWNET)?;
                Route::open()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
        })
    }

    fn send(&mut self, msg: Request, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = NLM_F_REQUEST | flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut buf = vec![0; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.sock.send(&buf, 0)?;
        Ok(self.seq)
    }

    /// The messages answering request `seq`, datagram by datagram, until the kernel's
    /// acknowledgement or end of dump, or until `done` says the answer is complete. An
    /// error message ends it with that error. Each message is given to `each` with its
    /// netlink flags.
    fn answers(
        &mut self,
        seq: u32,
        mut each: impl FnMut(u16, Answer),
        done: impl Fn(u16) -> bool,
    ) -> io::Result<()> {
        loop {
            let (buf, _) = self.sock.recv_from_full()?;
            let mut off = 0;
            while off < buf.len() {
                let m = NetlinkBuffer::new_checked(&buf[off..]).map_err(invalid)?;
                let len = usize::try_from(m.length()).unwrap_or(usize::MAX);
                off = off.saturating_add((len + 3) & !3);
                if m.sequence_number() != seq {
                    continue;
                }
                let (kind, flags, payload) = (m.message_type(), m.flags(), m.payload());
                match kind {
                    NLMSG_ERROR => {
                        let e = ErrorBuffer::new_checked(payload).map_err(invalid)?;
                        return match e.code() {
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                            None => Ok(()),
                        };
                    }
                    NLMSG_DONE => return Ok(()),
                    libc::RTM_NEWLINK => {
                        each(
                            flags,
                            Answer::Link(LinkHeader::parse(payload).map_err(invalid)?),
                        );
                    }
                    libc::RTM_NEWADDR => {
                        let a = AddressMessage::parse(payload).map_err(invalid)?;
                        each(flags, Answer::Address(a));
                    }
                    _ => continue,
                }
                if done(flags) {
                    return Ok(());
                }
            }
        }
    }

    /// A request answered by an acknowledgement (or an error).
    fn request(&mut self, msg: Request, flags: u16) -> io::Result<()> {
        let seq = self.send(msg, NLM_F_ACK | flags)?;
        self.answers(seq, |_, _| {}, |_| false)
    }

    /// The header of the link named `name`.
    fn link(&mut self, name: &str) -> io::Result<LinkHeader> {
        let get = Request {
            kind: libc::RTM_GETLINK,
            body: Body::Link(LinkHeader::default(), vec![if_name(name)]),
        };
        let seq = self.send(get, 0)?;
        let mut found = None;
        self.answers(
            seq,
            |_, a| {
                if let Answer::Link(l) = a {
                    found = Some(l);
                }
            },
            |flags| flags & NLM_F_MULTIPART == 0,
        )?;
        found.ok_or_else(|| io::Error::from_raw_os_error(libc::ENODEV))
    }

    /// Adds `addr`/`prefix` to link `index` (an address it has already is an error).
    fn add_address(&mut self, index: u32, addr: IpAddr, prefix: u8) -> io::Result<()> {
        let mut m = AddressMessage::default();
        m.header.family = match addr {
            IpAddr::V4(_) => AddressFamily::Inet,
            IpAddr::V6(_) => AddressFamily::Inet6,
        };
        m.header.prefix_len = prefix;
        m.header.index = index;
        m.attributes = vec![
            AddressAttribute::Local(addr),
            AddressAttribute::Address(addr),
        ];
        let new = Request {
            kind: libc::RTM_NEWADDR,
            body: Body::Address(m),
        };
        self.request(new, NLM_F_CREATE | NLM_F_EXCL)
    }

    /// Sets link `index` up or down.
    fn set_up(&mut self, index: u32, up: bool) -> io::Result<()> {
        let header = LinkHeader {
            index,
            change_mask: LinkFlags::Up,
            flags: if up {
                LinkFlags::Up
            } else {
                LinkFlags::empty()
            },
            ..LinkHeader::default()
        };
        let set = Request {
            kind: libc::RTM_SETLINK,
            body: Body::Link(header, Vec::new()),
        };
        self.request(set, 0)
    }

    /// The permanent addresses of global scope of link `index`, as (address, prefix
    /// length). A dump the kernel marks interrupted (the table changed under it) is read
    /// again.
    fn addresses(&mut self, index: u32) -> io::Result<Vec<(IpAddr, u8)>> {
        for _ in 0..5 {
            let get = Request {
                kind: libc::RTM_GETADDR,
                body: Body::Address(AddressMessage::default()),
            };
            let seq = self.send(get, NLM_F_DUMP)?;
            let mut out = Vec::new();
            let mut interrupted = false;
            self.answers(
                seq,
                |flags, r| {
                    interrupted |= flags & NLM_F_DUMP_INTR != 0;
                    let Answer::Address(a) = r else {
                        return;
                    };
                    if a.header.index != index
                        || a.header.scope != AddressScope::Universe
                        || !a.header.flags.contains(AddressHeaderFlags::Permanent)
                    {
                        return;
                    }
                    let local = a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Local(ip) => Some(*ip),
                        _ => None,
                    });
                    let address = a.attributes.iter().find_map(|x| match x {
                        AddressAttribute::Address(ip) => Some(*ip),
                        _ => None,
                    });
                    if let Some(ip) = local.or(address) {
                        out.push((ip, a.header.prefix_len));
                    }
                },
                |_| false,
            )?;
            if !interrupted {
                return Ok(out);
            }
        }
        Err(io::Error::from_raw_os_error(libc::EINTR))
    }
}
