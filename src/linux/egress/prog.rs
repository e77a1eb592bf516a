//! The egress programs (`BPF_PROG_TYPE_CGROUP_SOCK_ADDR`), one per hook: `connect4`,
//! `connect6` (TCP, connected UDP, a ping socket's `connect`) and `sendmsg4`, `sendmsg6`
//! (unconnected UDP); with a list (or raw sockets allowed) also the packet program on
//! `BPF_CGROUP_INET_EGRESS` ([`packet_program`]: a ping socket's `sendto` and raw sockets
//! pass no hook above, and a header can route past the address a hook judged). Each computes the destination's trie key (IPv4 as `::ffff:a.b.c.d`), looks it up
//! in the container's current allow trie (of two: the selector's slot 0 says which), and
//! allows when one of the matched prefix's ranges holds the protocol and port; otherwise it
//! counts the refusal (stats slot of the hook) and returns 0, which the kernel turns into
//! `EPERM`. Two tries and a selector rather than a map of maps: replacing an element of
//! a map of maps waits for an RCU grace period (16 ms measured here, in every create),
//! writing an array element does not.
//!
//! Without a list (the default: only the metadata endpoints refused), [`fixed_program`]:
//! the refused addresses as immediates, no map at all.
//! Loopback is looked up like any address: under a list the trie allows it but port 53
//! (DNS goes to moat's forwarder only, which has its own entry), the forwarder's own
//! address but DNS, and an engine's loopback resolver not at all (`Egress::entries`).
//!
//! The programs are the same for every container; only the map fds differ. Registers:
//! r6 ctx, r7 destination port (host order; 0 for ICMP), r8 the protocol's bit.

use crate::linux::sys::bpf::{Insn, BPF_PSEUDO_MAP_FD};

/// A range's protocol bits (`Range::protos`).
pub const TCP: u8 = 1;
pub const UDP: u8 = 2;
pub const ICMP: u8 = 4;
/// Ranges per trie value.
pub const RANGES: usize = 8;
/// Bytes of one range: lo u16, hi u16, protos u8, 3 bytes of padding.
pub const RANGE_SIZE: usize = 8;

/// The hooks, in the order of their stats slots (but [`Hook::InetEgress`]'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    Connect4,
    Connect6,
    Sendmsg4,
    Sendmsg6,
    /// `BPF_CGROUP_INET_EGRESS` (`BPF_PROG_TYPE_CGROUP_SKB`): the packets the container's
    /// sockets send. A list's only (or raw sockets allowed): [`packet_program`].
    InetEgress,
    /// `BPF_CGROUP_INET_SOCK_CREATE` (`BPF_PROG_TYPE_CGROUP_SOCK`): `socket(2)` itself,
    /// refusing the protocols no hook above judges ([`sock_program`]).
    SockCreate,
}

impl Hook {
    /// Every hook a list's programs are on.
    pub const ALL: [Hook; 6] = [
        Hook::Connect4,
        Hook::Connect6,
        Hook::Sendmsg4,
        Hook::Sendmsg6,
        Hook::InetEgress,
        Hook::SockCreate,
    ];

    /// The `connect`/`sendmsg` hooks (`BPF_PROG_TYPE_CGROUP_SOCK_ADDR`).
    #[cfg(test)]
    pub const SOCK_ADDR: [Hook; 4] = [
        Hook::Connect4,
        Hook::Connect6,
        Hook::Sendmsg4,
        Hook::Sendmsg6,
    ];

    /// The stats slot counting this hook's refusals (slot 4 is the forwarder's).
    pub fn slot(self) -> u32 {
        match self {
            Hook::Connect4 => 0,
            Hook::Connect6 => 1,
            Hook::Sendmsg4 => 2,
            Hook::Sendmsg6 => 3,
            Hook::InetEgress => 5,
            Hook::SockCreate => 6,
        }
    }

    pub fn v4(self) -> bool {
        matches!(self, Hook::Connect4 | Hook::Sendmsg4)
    }

    /// The program's name: how moat finds its own programs on a cgroup.
    pub fn name(self) -> &'static str {
        match self {
            Hook::Connect4 => "moat_eg_c4",
            Hook::Connect6 => "moat_eg_c6",
            Hook::Sendmsg4 => "moat_eg_s4",
            Hook::Sendmsg6 => "moat_eg_s6",
            Hook::InetEgress => "moat_eg_icmp",
            Hook::SockCreate => "moat_eg_sock",
        }
    }

    pub fn prog_type(self) -> u32 {
        use crate::linux::sys::bpf;
        match self {
            Hook::InetEgress => bpf::BPF_PROG_TYPE_CGROUP_SKB,
            Hook::SockCreate => bpf::BPF_PROG_TYPE_CGROUP_SOCK,
            _ => bpf::BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        }
    }

    pub fn attach_type(self) -> u32 {
        use crate::linux::sys::bpf;
        match self {
            Hook::Connect4 => bpf::BPF_CGROUP_INET4_CONNECT,
            Hook::Connect6 => bpf::BPF_CGROUP_INET6_CONNECT,
            Hook::Sendmsg4 => bpf::BPF_CGROUP_UDP4_SENDMSG,
            Hook::Sendmsg6 => bpf::BPF_CGROUP_UDP6_SENDMSG,
            Hook::InetEgress => bpf::BPF_CGROUP_INET_EGRESS,
            Hook::SockCreate => bpf::BPF_CGROUP_INET_SOCK_CREATE,
        }
    }
}

// struct bpf_sock_addr
const USER_IP4: i16 = 4;
const USER_IP6: i16 = 8;
const USER_PORT: i16 = 24;
const PROTOCOL: i16 = 36;

// Stack: the trie key at fp-24 (prefixlen u32, then 16 address bytes), the selector index
// at fp-28, the stats index at fp-32; below the echo program's packet buffers (`HDR`,
// `EXT`) the IP protocol number at fp-84 and the refusal ring's key and value
// (`record_refusal`).
const KEY: i16 = -24;
const SEL_IDX: i16 = -28;
const STATS_IDX: i16 = -32;
const PROTO: i16 = -84;
const RING_KEY: i16 = -104;
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)] // 88 bytes
const RING_VAL: i16 = RING_KEY - RING_VALUE_SIZE as i16;

/// The refusal ring's key: the destination (16 bytes, IPv4 as `::ffff:a.b.c.d`; for a
/// socket refused at creation its family and type as two u32), the port (u16, host
/// order), the IP protocol number (u8), the stats slot of what refused it (u8).
pub const RING_KEY_SIZE: usize = 20;
/// The refusal ring's value: first and last seen (`CLOCK_MONOTONIC` ns), the count, and
/// the name asked for (up to [`RING_NAME`] bytes, NUL-padded; the forwarder's records).
pub const RING_VALUE_SIZE: usize = 24 + RING_NAME;
pub const RING_NAME: usize = 64;

const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const LDX_DW: u8 = 0x79;
const ST_W: u8 = 0x62;
const STX_W: u8 = 0x63;
const ST_H: u8 = 0x6a;
const STX_H: u8 = 0x6b;
const ST_B: u8 = 0x72;
const STX_B: u8 = 0x73;
const ST_DW: u8 = 0x7a;
const STX_DW: u8 = 0x7b;
const ATOMIC_DW: u8 = 0xdb;
const LD_IMM64: u8 = 0x18;
const MOV_K: u8 = 0xb7;
const MOV_X: u8 = 0xbf;
const ADD_K: u8 = 0x07;
const AND_K: u8 = 0x57;
const AND_X: u8 = 0x5f;
const OR_X: u8 = 0x4f;
const SUB_X: u8 = 0x1f;
const XOR_K: u8 = 0xa7;
const RSH_K: u8 = 0x77;
const NEG: u8 = 0x87;
const TO_BE: u8 = 0xdc;
const JA: u8 = 0x05;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JGT_K: u8 = 0x25;
const JMP32_JNE_K: u8 = 0x56;
const MOV32_X: u8 = 0xbc;
const XOR32_K: u8 = 0xa4;
const OR32_X: u8 = 0x4c;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LSH_K: u8 = 0x67;
const ADD_X: u8 = 0x0f;
const MAP_LOOKUP_ELEM: i32 = 1;
const MAP_UPDATE_ELEM: i32 = 2;
const KTIME_GET_NS: i32 = 5;
const BPF_NOEXIST: i32 = 1;
const SKB_LOAD_BYTES_RELATIVE: i32 = 68;
const SK_FULLSOCK: i32 = 95;
const BPF_HDR_START_NET: i32 = 1;

// struct __sk_buff: the ethertype, in network order (as the 16 bits lie in memory).
const SKB_PROTOCOL: i16 = 16;
// struct __sk_buff: the sending socket (`struct bpf_sock *`).
const SKB_SK: i16 = 168;
const ETH_P_IP: i32 = i32::from_le_bytes([0x08, 0x00, 0, 0]);
const ETH_P_IPV6: i32 = i32::from_le_bytes([0x86, 0xdd, 0, 0]);
// The echo program's packet buffers on the stack: the IP header (40 bytes: an IPv6
// header, or the first 20 of an IPv4 one) and an extension header's (or ICMP) first bytes.
const HDR: i16 = -72;
const EXT: i16 = -80;
/// The packet program's flag: the packet is a raw socket's.
const RAW: i16 = -196;
/// IPv6 extension headers the echo program walks before it gives up on finding the upper
/// layer (and then judges the packet as an echo request: fail closed). A socket without
/// `CAP_NET_RAW` can put two on a packet (a routing header, and the kernel's fragment
/// header); each one walked costs about 0.2 ms of verifier time in every create.
const EXT_HEADERS: usize = 4;
const ICMP_ECHO: i32 = 8;
const ICMPV6_ECHO_REQUEST: i32 = 128;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    Addr,
    Key,
    Allow,
    Deny,
    DenyRet,
    Tcp,
    Udp,
    Icmp,
    NotLoop,
    Trie1,
    Lookup,
    Next(usize),
    V4,
    V6,
    Walk(usize),
    Ext(usize),
    Ah(usize),
    Frag(usize),
    Adv(usize),
    Icmp6,
    Echo6,
    Echo,
    Stream,
    Dgram,
    RingInsert,
    RingDone,
    Classified,
    Upper,
    Upper6,
    Link,
}

enum Op {
    I(Insn),
    J {
        code: u8,
        reg: u8,
        src: u8,
        imm: i32,
        to: L,
    },
    Mark(L),
}

fn i(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Op {
    Op::I(Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    })
}

fn jk(code: u8, reg: u8, imm: i32, to: L) -> Op {
    Op::J {
        code,
        reg,
        src: 0,
        imm,
        to,
    }
}

/// `ld_imm64 reg, map` (two instructions).
fn ld_map(ops: &mut Vec<Op>, reg: u8, map_fd: i32) {
    ops.push(i(LD_IMM64, reg, BPF_PSEUDO_MAP_FD, 0, map_fd));
    ops.push(i(0, 0, 0, 0, 0));
}

/// A 32-bit word as an immediate (its bits, as the instruction holds them).
fn word(bytes: [u8; 4]) -> i32 {
    i32::from_le_bytes(bytes)
}

/// The map fds a list program is loaded over.
#[derive(Debug, Clone, Copy)]
pub struct MapFds {
    /// ARRAY of one u32: which trie is in force (0 or 1).
    pub selector: i32,
    /// The two LPM tries.
    pub tries: [i32; 2],
    /// ARRAY of u64 refusal counters.
    pub stats: i32,
    /// LRU_HASH: the refusal ring ([`RING_KEY_SIZE`] → [`RING_VALUE_SIZE`]).
    pub ring: i32,
}

/// The list program of `hook` over `maps`.
pub fn program(hook: Hook, maps: MapFds) -> Vec<Insn> {
    if hook == Hook::InetEgress {
        return packet_program(maps);
    }
    if hook == Hook::SockCreate {
        return sock_program(Some(maps));
    }
    let mut o = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(LDX_W, 7, 6, USER_PORT, 0),
        i(TO_BE, 7, 0, 0, 16),
        i(LDX_W, 8, 6, PROTOCOL, 0),
        i(STX_W, 10, 8, PROTO, 0),
    ];
    zero_key(&mut o);
    o.extend([
        jk(JEQ_K, 8, libc::IPPROTO_TCP, L::Tcp),
        jk(JEQ_K, 8, libc::IPPROTO_UDP, L::Udp),
        jk(JEQ_K, 8, libc::IPPROTO_UDPLITE, L::Udp),
        jk(JEQ_K, 8, libc::IPPROTO_ICMP, L::Icmp),
        jk(JEQ_K, 8, libc::IPPROTO_ICMPV6, L::Icmp),
        // Any other protocol (SCTP, …): refused under a list.
        jk(JA, 0, 0, L::Deny),
        Op::Mark(L::Tcp),
        i(MOV_K, 8, 0, 0, i32::from(TCP)),
        jk(JA, 0, 0, L::Addr),
        Op::Mark(L::Udp),
        i(MOV_K, 8, 0, 0, i32::from(UDP)),
        jk(JA, 0, 0, L::Addr),
        Op::Mark(L::Icmp),
        // A ping socket's "port" is its echo id: ICMP ranges are 0-65535.
        i(MOV_K, 8, 0, 0, i32::from(ICMP)),
        i(MOV_K, 7, 0, 0, 0),
        Op::Mark(L::Addr),
        i(ST_W, 10, 0, KEY, 128),
    ]);
    if hook.v4() {
        o.extend([
            i(LDX_W, 2, 6, USER_IP4, 0),
            i(ST_W, 10, 0, KEY + 4, 0),
            i(ST_W, 10, 0, KEY + 8, 0),
            i(ST_W, 10, 0, KEY + 12, word([0, 0, 0xff, 0xff])),
            i(STX_W, 10, 2, KEY + 16, 0),
        ]);
    } else {
        o.extend([
            i(LDX_W, 2, 6, USER_IP6, 0),
            i(LDX_W, 3, 6, USER_IP6 + 4, 0),
            i(LDX_W, 4, 6, USER_IP6 + 8, 0),
            i(LDX_W, 5, 6, USER_IP6 + 12, 0),
            i(STX_W, 10, 2, KEY + 4, 0),
            i(STX_W, 10, 3, KEY + 8, 0),
            i(STX_W, 10, 4, KEY + 12, 0),
            i(STX_W, 10, 5, KEY + 16, 0),
        ]);
    }
    decide(&mut o, maps, hook.slot(), Some(7));
    assemble(o)
}

/// The trie key's address zeroed (a refusal before the address is read records `::`).
fn zero_key(o: &mut Vec<Op>) {
    for off in [4, 8, 12, 16] {
        o.push(i(ST_W, 10, 0, KEY + off, 0));
    }
}

/// `bpf_skb_load_bytes_relative(skb, off, fp + to, len, BPF_HDR_START_NET)`, the offset
/// in register `off` (or 0 when `off` is `None`); a packet too short for it is refused.
fn load_bytes(o: &mut Vec<Op>, off: Option<u8>, to: i16, len: i32) {
    o.push(i(MOV_X, 1, 6, 0, 0));
    o.push(match off {
        Some(r) => i(MOV_X, 2, r, 0, 0),
        None => i(MOV_K, 2, 0, 0, 0),
    });
    o.extend([
        i(MOV_X, 3, 10, 0, 0),
        i(ADD_K, 3, 0, 0, i32::from(to)),
        i(MOV_K, 4, 0, 0, len),
        i(MOV_K, 5, 0, 0, BPF_HDR_START_NET),
        i(CALL, 0, 0, 0, SKB_LOAD_BYTES_RELATIVE),
        jk(JNE_K, 0, 0, L::Deny),
    ]);
}

/// The packet program (`BPF_CGROUP_INET_EGRESS`): every IPv4/IPv6 packet one of the
/// container's sockets sends, on its real header, after every `connect`/`sendmsg` hook.
/// Attached with a list, and without one where the container may hold `CAP_NET_RAW`
/// (`[egress] allow_raw_sockets`: then over a trie of `::/0` but the refused addresses).
///
/// Every packet, whatever its socket: refused when its route is not the header's
/// destination alone or its upper layer cannot be judged: IPv4 options (a source or record
/// route), an IPv4 fragment other than the first, an IPv6 routing header, an IPv6
/// fragment other than the first, an upper layer past [`EXT_HEADERS`] extension headers, a
/// header too short to read. The kernel fragments after this hook, so the packets of its
/// own sockets never arrive here as fragments; only a raw socket can make one.
///
/// A raw socket's packet (`SOCK_RAW`: the sender wrote what follows the IP header, or the
/// whole header) is judged on the header against the trie in force, as the `connect`
/// hooks judge a connection: TCP and UDP on their destination port, ICMP and every other
/// protocol on the ICMP bit (port 0: an address rule naming no protocol). Loopback is
/// judged as any address, by the trie's loopback entries (every port but 53). ICMPv6 neighbour discovery and multicast listener messages (types 130-137,
/// 143) pass to link-local and link-scope multicast destinations: the link needs them, and
/// no router forwards them.
///
/// Any other socket's packet: an ICMP echo request (a ping socket's `sendto`, which no
/// `connect` hook sees) is judged as above; every other passes, because the kernel built
/// its header to the address the `connect`/`sendmsg` hook judged (or, for a connection
/// the container accepted, the peer that opened it), or the socket-creation program
/// refused its protocol. Judging those again per packet would cut an established
/// connection when a name's answer expires from the trie.
///
/// Refusals are counted in stats slot 5 and dropped (`EPERM` to a sender that waits).
///
/// Registers: r6 ctx, r7 the port, r8 the next header (then the protocol's bit), r9 the
/// offset of the next header; the stack word at `RAW` is 1 for a raw socket's packet.
pub fn packet_program(maps: MapFds) -> Vec<Insn> {
    let mut o = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(MOV_K, 7, 0, 0, 0),
        i(ST_W, 10, 0, RAW, 0),
        i(LDX_DW, 1, 6, SKB_SK, 0),
        jk(JEQ_K, 1, 0, L::Classified),
        i(CALL, 0, 0, 0, SK_FULLSOCK),
        jk(JEQ_K, 0, 0, L::Classified),
        i(LDX_W, 2, 0, SK_TYPE, 0),
        jk(JNE_K, 2, libc::SOCK_RAW, L::Classified),
        i(ST_W, 10, 0, RAW, 1),
        Op::Mark(L::Classified),
        i(ST_W, 10, 0, KEY, 128),
        i(ST_W, 10, 0, PROTO, 0),
    ];
    zero_key(&mut o);
    o.extend([
        i(LDX_W, 2, 6, SKB_PROTOCOL, 0),
        jk(JEQ_K, 2, ETH_P_IP, L::V4),
        jk(JEQ_K, 2, ETH_P_IPV6, L::V6),
        jk(JA, 0, 0, L::Allow),
        Op::Mark(L::V4),
    ]);
    load_bytes(&mut o, None, HDR, 20);
    o.extend([
        // Options (IHL other than 5): a source route names the first hop, not the end.
        i(LDX_B, 2, 10, HDR, 0),
        i(AND_K, 2, 0, 0, 0xf),
        jk(JNE_K, 2, 5, L::Deny),
        // The fragment offset (13 bits after the flags), as it lies in memory.
        i(LDX_H, 2, 10, HDR + 6, 0),
        i(AND_K, 2, 0, 0, i32::from_le_bytes([0x1f, 0xff, 0, 0])),
        jk(JNE_K, 2, 0, L::Deny),
        i(LDX_B, 8, 10, HDR + 9, 0),
        i(MOV_K, 9, 0, 0, 20),
        i(ST_W, 10, 0, KEY + 4, 0),
        i(ST_W, 10, 0, KEY + 8, 0),
        i(ST_W, 10, 0, KEY + 12, word([0, 0, 0xff, 0xff])),
        i(LDX_W, 2, 10, HDR + 16, 0),
        i(STX_W, 10, 2, KEY + 16, 0),
        jk(JA, 0, 0, L::Upper),
        Op::Mark(L::V6),
    ]);
    load_bytes(&mut o, None, HDR, 40);
    o.extend([i(LDX_B, 8, 10, HDR + 6, 0), i(MOV_K, 9, 0, 0, 40)]);
    // Every extension header is at least 8 bytes: one load per header.
    for k in 0..EXT_HEADERS {
        o.extend([
            Op::Mark(L::Walk(k)),
            jk(JEQ_K, 8, libc::IPPROTO_HOPOPTS, L::Ext(k)),
            jk(JEQ_K, 8, libc::IPPROTO_DSTOPTS, L::Ext(k)),
            jk(JEQ_K, 8, libc::IPPROTO_AH, L::Ext(k)),
            jk(JEQ_K, 8, libc::IPPROTO_FRAGMENT, L::Ext(k)),
            // A routing header: the destination is the first hop's.
            jk(JEQ_K, 8, libc::IPPROTO_ROUTING, L::Deny),
            jk(JA, 0, 0, L::Upper6),
            Op::Mark(L::Ext(k)),
        ]);
        load_bytes(&mut o, Some(9), EXT, 8);
        o.extend([
            jk(JEQ_K, 8, libc::IPPROTO_FRAGMENT, L::Frag(k)),
            i(LDX_B, 2, 10, EXT + 1, 0),
            jk(JEQ_K, 8, libc::IPPROTO_AH, L::Ah(k)),
            // Hop-by-hop, destination options: (length + 1) * 8 bytes.
            i(ADD_K, 2, 0, 0, 1),
            i(LSH_K, 2, 0, 0, 3),
            jk(JA, 0, 0, L::Adv(k)),
            // AH: (length + 2) * 4 bytes.
            Op::Mark(L::Ah(k)),
            i(ADD_K, 2, 0, 0, 2),
            i(LSH_K, 2, 0, 0, 2),
            jk(JA, 0, 0, L::Adv(k)),
            Op::Mark(L::Frag(k)),
            // The fragment offset (13 bits before the flags), as it lies in memory: a
            // later fragment carries no upper-layer header to judge.
            i(LDX_H, 2, 10, EXT + 2, 0),
            i(AND_K, 2, 0, 0, i32::from_le_bytes([0xff, 0xf8, 0, 0])),
            jk(JNE_K, 2, 0, L::Deny),
            i(MOV_K, 2, 0, 0, 8),
            Op::Mark(L::Adv(k)),
            i(ADD_X, 9, 2, 0, 0),
            i(LDX_B, 8, 10, EXT, 0),
        ]);
    }
    o.extend([
        // Past the walk: the upper layer is not found, so not judged: refused.
        Op::Mark(L::Walk(EXT_HEADERS)),
        jk(JA, 0, 0, L::Deny),
        Op::Mark(L::Upper6),
        i(LDX_W, 2, 10, HDR + 24, 0),
        i(LDX_W, 3, 10, HDR + 28, 0),
        i(LDX_W, 4, 10, HDR + 32, 0),
        i(LDX_W, 5, 10, HDR + 36, 0),
        i(STX_W, 10, 2, KEY + 4, 0),
        i(STX_W, 10, 3, KEY + 8, 0),
        i(STX_W, 10, 4, KEY + 12, 0),
        i(STX_W, 10, 5, KEY + 16, 0),
        // The upper layer: r8 its protocol, r9 its offset, the key at KEY.
        Op::Mark(L::Upper),
        i(STX_W, 10, 8, PROTO, 0),
        jk(JEQ_K, 8, libc::IPPROTO_ICMP, L::Icmp),
        jk(JEQ_K, 8, libc::IPPROTO_ICMPV6, L::Icmp6),
        i(LDX_W, 2, 10, RAW, 0),
        jk(JEQ_K, 2, 0, L::Allow),
        jk(JEQ_K, 8, libc::IPPROTO_TCP, L::Tcp),
        jk(JEQ_K, 8, libc::IPPROTO_UDP, L::Udp),
        // Any other protocol: as ICMP, on the address alone.
        i(MOV_K, 8, 0, 0, i32::from(ICMP)),
        jk(JA, 0, 0, L::Echo),
        Op::Mark(L::Tcp),
        i(MOV_K, 8, 0, 0, i32::from(TCP)),
        jk(JA, 0, 0, L::Stream),
        Op::Mark(L::Udp),
        i(MOV_K, 8, 0, 0, i32::from(UDP)),
        Op::Mark(L::Stream),
    ]);
    // The destination port: the second 16 bits of either header.
    load_bytes(&mut o, Some(9), EXT, 4);
    o.extend([
        i(LDX_H, 7, 10, EXT + 2, 0),
        i(TO_BE, 7, 0, 0, 16),
        jk(JA, 0, 0, L::NotLoop),
        Op::Mark(L::Icmp6),
    ]);
    load_bytes(&mut o, Some(9), EXT, 1);
    o.extend([
        i(LDX_B, 2, 10, EXT, 0),
        jk(JEQ_K, 2, ICMPV6_ECHO_REQUEST, L::Echo6),
        i(LDX_W, 3, 10, RAW, 0),
        jk(JEQ_K, 3, 0, L::Allow),
        // Neighbour discovery and multicast listener messages, to the link only.
        jk(JEQ_K, 2, 143, L::Link),
        i(ADD_K, 2, 0, 0, -130),
        i(AND_K, 2, 0, 0, 0xff),
        jk(JGT_K, 2, 137 - 130, L::Echo6),
        Op::Mark(L::Link),
        i(LDX_H, 2, 10, KEY + 4, 0),
        jk(JEQ_K, 2, i32::from_le_bytes([0xff, 0x02, 0, 0]), L::Allow),
        i(AND_K, 2, 0, 0, i32::from_le_bytes([0xff, 0xc0, 0, 0])),
        jk(JEQ_K, 2, i32::from_le_bytes([0xfe, 0x80, 0, 0]), L::Allow),
        Op::Mark(L::Echo6),
        i(MOV_K, 8, 0, 0, i32::from(ICMP)),
        jk(JA, 0, 0, L::Echo),
        Op::Mark(L::Icmp),
    ]);
    load_bytes(&mut o, Some(9), EXT, 1);
    o.extend([
        i(LDX_B, 2, 10, EXT, 0),
        i(MOV_K, 8, 0, 0, i32::from(ICMP)),
        jk(JEQ_K, 2, ICMP_ECHO, L::Echo),
        i(LDX_W, 3, 10, RAW, 0),
        jk(JEQ_K, 3, 0, L::Allow),
        // Judged on the address: the ICMP "port" is 0.
        Op::Mark(L::Echo),
        i(MOV_K, 7, 0, 0, 0),
        // Loopback as any address: the trie's loopback entries (every port but 53).
        Op::Mark(L::NotLoop),
    ]);
    decide(&mut o, maps, Hook::InetEgress.slot(), Some(7));
    assemble(o)
}

// struct bpf_sock
const SK_FAMILY: i16 = 4;
const SK_TYPE: i16 = 8;
const SK_PROTOCOL: i16 = 12;

/// The socket-creation program (`BPF_CGROUP_INET_SOCK_CREATE`): the kernel runs the
/// `connect` programs only for protocols with a `pre_connect` (TCP, MPTCP, UDP, ping) and
/// the `sendmsg` programs only for UDP, so a socket of any other protocol — UDP-Lite,
/// SCTP, L2TP/IP, … — would carry traffic past every hook above. It is refused at
/// `socket(2)` (the program returns 0: `EPERM`). Allowed: `SOCK_STREAM` TCP and MPTCP,
/// `SOCK_DGRAM` UDP, and with a list (`maps`: the echo backstop is attached and judges a
/// ping socket's `sendto`) the ping sockets (`SOCK_DGRAM` ICMP, ICMPv6); without one (the
/// fixed form has no backstop) they are refused too. `SOCK_RAW` passes: `inet_create`
/// refused it already unless the container holds `CAP_NET_RAW`, which the policy refuses
/// with egress in force under RESTRICTED. The kernel has resolved protocol 0 to the type's
/// default (TCP, UDP) and stripped `SOCK_NONBLOCK`/`SOCK_CLOEXEC` from the type before it
/// runs the program. With a list, refusals are counted in stats slot 6.
pub fn sock_program(maps: Option<MapFds>) -> Vec<Insn> {
    let mut o = vec![
        i(MOV_X, 6, 1, 0, 0),
        // The hook runs only in inet_create and inet6_create; anything else: not ours.
        i(LDX_W, 2, 6, SK_FAMILY, 0),
        jk(JEQ_K, 2, libc::AF_INET, L::Addr),
        jk(JNE_K, 2, libc::AF_INET6, L::Allow),
        Op::Mark(L::Addr),
        i(LDX_W, 2, 6, SK_TYPE, 0),
        i(LDX_W, 4, 6, SK_PROTOCOL, 0),
        jk(JEQ_K, 2, libc::SOCK_STREAM, L::Stream),
        jk(JEQ_K, 2, libc::SOCK_DGRAM, L::Dgram),
        jk(JEQ_K, 2, libc::SOCK_RAW, L::Allow),
        jk(JA, 0, 0, L::Deny),
        Op::Mark(L::Stream),
        jk(JEQ_K, 4, libc::IPPROTO_TCP, L::Allow),
        jk(JEQ_K, 4, libc::IPPROTO_MPTCP, L::Allow),
        jk(JA, 0, 0, L::Deny),
        Op::Mark(L::Dgram),
        jk(JEQ_K, 4, libc::IPPROTO_UDP, L::Allow),
    ];
    if maps.is_some() {
        o.extend([
            jk(JEQ_K, 4, libc::IPPROTO_ICMP, L::Allow),
            jk(JEQ_K, 4, libc::IPPROTO_ICMPV6, L::Allow),
        ]);
    }
    o.extend([
        jk(JA, 0, 0, L::Deny),
        Op::Mark(L::Allow),
        i(MOV_K, 0, 0, 0, 1),
        i(EXIT, 0, 0, 0, 0),
        Op::Mark(L::Deny),
    ]);
    if let Some(maps) = maps {
        count_refusal(&mut o, maps, Hook::SockCreate.slot());
        // The ring's key: family and type where the address goes, no port.
        o.extend([
            i(LDX_W, 2, 6, SK_FAMILY, 0),
            i(STX_W, 10, 2, RING_KEY, 0),
            i(LDX_W, 2, 6, SK_TYPE, 0),
            i(STX_W, 10, 2, RING_KEY + 4, 0),
            i(ST_W, 10, 0, RING_KEY + 8, 0),
            i(ST_W, 10, 0, RING_KEY + 12, 0),
            i(ST_H, 10, 0, RING_KEY + 16, 0),
            i(LDX_W, 2, 6, SK_PROTOCOL, 0),
            i(STX_B, 10, 2, RING_KEY + 18, 0),
        ]);
        record_refusal(&mut o, maps, Hook::SockCreate.slot());
    }
    o.extend([i(MOV_K, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    assemble(o)
}

/// The hooks of the fixed program (no list): connections and datagrams alike, the
/// sockets whose traffic they cannot judge, and the packets whose header routes past the
/// address they judged ([`route_program`]).
pub const FIXED_HOOKS: [Hook; 6] = [
    Hook::Connect4,
    Hook::Connect6,
    Hook::Sendmsg4,
    Hook::Sendmsg6,
    Hook::SockCreate,
    Hook::InetEgress,
];

/// The fixed program's name for `hook`.
pub fn fixed_name(hook: Hook) -> &'static str {
    match hook {
        Hook::Connect4 => "moat_md_c4",
        Hook::Connect6 => "moat_md_c6",
        Hook::Sendmsg4 => "moat_md_s4",
        Hook::Sendmsg6 => "moat_md_s6",
        Hook::InetEgress => "moat_md_route",
        Hook::SockCreate => "moat_md_sock",
    }
}

/// The program of `hook` refusing `deny`, each address with the
/// ports left open to it (DNS to a resolver there), everything else allowed.
pub fn fixed_program(hook: Hook, deny: &[(std::net::Ipv6Addr, Vec<u16>)]) -> Vec<Insn> {
    if hook == Hook::SockCreate {
        return sock_program(None);
    }
    if hook == Hook::InetEgress {
        return route_program();
    }
    let mut o = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(LDX_W, 7, 6, USER_PORT, 0),
        i(TO_BE, 7, 0, 0, 16),
    ];
    if hook.v4() {
        o.push(i(LDX_W, 2, 6, USER_IP4, 0));
    } else {
        for (r, off) in [(2u8, 0i16), (3, 4), (4, 8), (5, 12)] {
            o.push(i(LDX_W, r, 6, USER_IP6 + off, 0));
        }
    }
    let mut n = 0;
    for (addr, open) in deny {
        let b = addr.octets();
        let w = |k: usize| word([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
        let next = L::Next(n);
        if hook.v4() {
            let Some(v4) = addr.to_ipv4_mapped() else {
                continue;
            };
            o.push(jk(JMP32_JNE_K, 2, word(v4.octets()), next));
        } else {
            // r8 = OR of each word XOR the address's word: zero exactly on a match. One
            // branch per address instead of four: the verifier's cost is its branches,
            // and every RESTRICTED create loads this program (unless it is shared,
            // `egress::install`).
            for (k, r) in [2u8, 3, 4, 5].into_iter().enumerate() {
                match (k, w(k)) {
                    (0, 0) => o.push(i(MOV32_X, 8, r, 0, 0)),
                    (0, x) => o.extend([i(MOV32_X, 8, r, 0, 0), i(XOR32_K, 8, 0, 0, x)]),
                    (_, 0) => o.push(i(OR32_X, 8, r, 0, 0)),
                    (_, x) => o.extend([
                        i(MOV32_X, 9, r, 0, 0),
                        i(XOR32_K, 9, 0, 0, x),
                        i(OR32_X, 8, 9, 0, 0),
                    ]),
                }
            }
            o.push(jk(JMP32_JNE_K, 8, 0, next));
        }
        for p in open {
            o.push(jk(JEQ_K, 7, i32::from(*p), L::Allow));
        }
        o.push(jk(JA, 0, 0, L::Deny));
        o.push(Op::Mark(next));
        n += 1;
    }
    o.extend([
        Op::Mark(L::Allow),
        i(MOV_K, 0, 0, 0, 1),
        i(EXIT, 0, 0, 0, 0),
    ]);
    if n > 0 {
        o.extend([Op::Mark(L::Deny), i(MOV_K, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]);
    }
    assemble(o)
}

/// The fixed form's packet program (`BPF_CGROUP_INET_EGRESS`, no map): an IPv6 packet
/// carrying a routing header is dropped. `setsockopt(IPV6_RTHDR)` (type 4, segment
/// routing) takes no capability, and a Debian kernel (`CONFIG_IPV6_MIP6`) takes a type 2
/// header as `sendmsg` ancillary data too: either way the `connect`/`sendmsg` hooks judge
/// the address the socket names while the packet goes to the header's first segment — the
/// metadata endpoint, say. Hop-by-hop and destination options headers before it are walked
/// ([`EXT_HEADERS`] of them, then the packet is dropped: fail closed); the kernel puts a
/// routing header before any fragment or AH header. IPv4 needs nothing here: a source
/// route option takes `CAP_NET_RAW`, which a container with the fixed form does not hold
/// (holding it under egress selects the list form, `Egress::packets`). Every other packet
/// passes after two loads: the per-packet cost every RESTRICTED container pays.
pub fn route_program() -> Vec<Insn> {
    let mut o = vec![
        i(MOV_X, 6, 1, 0, 0),
        i(LDX_W, 2, 6, SKB_PROTOCOL, 0),
        jk(JNE_K, 2, ETH_P_IPV6, L::Allow),
    ];
    load_bytes(&mut o, None, HDR, 8);
    o.extend([i(LDX_B, 8, 10, HDR + 6, 0), i(MOV_K, 9, 0, 0, 40)]);
    for k in 0..EXT_HEADERS {
        o.extend([
            Op::Mark(L::Walk(k)),
            jk(JEQ_K, 8, libc::IPPROTO_ROUTING, L::Deny),
            jk(JEQ_K, 8, libc::IPPROTO_HOPOPTS, L::Ext(k)),
            jk(JNE_K, 8, libc::IPPROTO_DSTOPTS, L::Allow),
            Op::Mark(L::Ext(k)),
        ]);
        load_bytes(&mut o, Some(9), EXT, 2);
        o.extend([
            i(LDX_B, 8, 10, EXT, 0),
            i(LDX_B, 2, 10, EXT + 1, 0),
            // (length + 1) * 8 bytes.
            i(ADD_K, 2, 0, 0, 1),
            i(LSH_K, 2, 0, 0, 3),
            i(ADD_X, 9, 2, 0, 0),
        ]);
    }
    o.extend([
        Op::Mark(L::Walk(EXT_HEADERS)),
        Op::Mark(L::Deny),
        i(MOV_K, 0, 0, 0, 0),
        i(EXIT, 0, 0, 0, 0),
        Op::Mark(L::Allow),
        i(MOV_K, 0, 0, 0, 1),
        i(EXIT, 0, 0, 0, 0),
    ]);
    assemble(o)
}

/// From `L::Key` on, shared by every list program: the trie key at `KEY` (its prefix
/// length set), r7 the port, r8 the protocol's bit. Looks the key up in the trie the
/// selector names and allows when one of the matched prefix's ranges holds both; otherwise
/// counts the refusal in stats slot `slot`, records it in the ring (the port from
/// register `port`, else 0) and refuses.
fn decide(o: &mut Vec<Op>, maps: MapFds, slot: u32, port: Option<u8>) {
    o.push(Op::Mark(L::Key));
    o.push(i(ST_W, 10, 0, SEL_IDX, 0));
    ld_map(o, 1, maps.selector);
    o.extend([
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, i32::from(SEL_IDX)),
        i(CALL, 0, 0, 0, MAP_LOOKUP_ELEM),
        jk(JEQ_K, 0, 0, L::Deny),
        i(LDX_W, 1, 0, 0, 0),
        jk(JEQ_K, 1, 1, L::Trie1),
    ]);
    ld_map(o, 1, maps.tries[0]);
    o.push(jk(JA, 0, 0, L::Lookup));
    o.push(Op::Mark(L::Trie1));
    ld_map(o, 1, maps.tries[1]);
    o.push(Op::Mark(L::Lookup));
    o.extend([
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, i32::from(KEY)),
        i(CALL, 0, 0, 0, MAP_LOOKUP_ELEM),
        jk(JEQ_K, 0, 0, L::Deny),
    ]);
    // Whether one of the ranges holds the protocol and the port, without a branch: r9 is
    // the OR over the ranges of `protocol in protos` AND `lo <= port <= hi`, each a 0/1
    // from sign bits (ports are u16, so the differences cannot overflow). Straight-line
    // code is what the verifier walks once; a range check of three branches per range
    // forked its states ~2^8 ways (0.8 ms a program at every list create).
    o.push(i(MOV_K, 9, 0, 0, 0));
    for r in 0..RANGES {
        let base = i16::try_from(r * RANGE_SIZE).expect("small offsets");
        o.extend([
            // r1 = (protos & bit) != 0: a non-zero value negated has its sign bit set.
            i(LDX_B, 1, 0, base + 4, 0),
            i(AND_X, 1, 8, 0, 0),
            i(NEG, 1, 0, 0, 0),
            i(RSH_K, 1, 0, 0, 63),
            // r4 = (port - lo) | (hi - port) is negative when the port is outside.
            i(LDX_H, 2, 0, base, 0),
            i(LDX_H, 3, 0, base + 2, 0),
            i(MOV_X, 4, 7, 0, 0),
            i(SUB_X, 4, 2, 0, 0),
            i(SUB_X, 3, 7, 0, 0),
            i(OR_X, 4, 3, 0, 0),
            i(RSH_K, 4, 0, 0, 63),
            i(XOR_K, 4, 0, 0, 1),
            i(AND_X, 1, 4, 0, 0),
            i(OR_X, 9, 1, 0, 0),
        ]);
    }
    o.push(jk(JEQ_K, 9, 0, L::Deny));
    o.extend([
        Op::Mark(L::Allow),
        i(MOV_K, 0, 0, 0, 1),
        i(EXIT, 0, 0, 0, 0),
        Op::Mark(L::Deny),
    ]);
    count_refusal(o, maps, slot);
    for (k, off) in [4i16, 8, 12, 16].into_iter().enumerate() {
        let to = RING_KEY + i16::try_from(4 * k).expect("small");
        o.extend([i(LDX_W, 2, 10, KEY + off, 0), i(STX_W, 10, 2, to, 0)]);
    }
    o.push(match port {
        Some(r) => i(STX_H, 10, r, RING_KEY + 16, 0),
        None => i(ST_H, 10, 0, RING_KEY + 16, 0),
    });
    o.extend([i(LDX_W, 2, 10, PROTO, 0), i(STX_B, 10, 2, RING_KEY + 18, 0)]);
    record_refusal(o, maps, slot);
    o.extend([i(MOV_K, 0, 0, 0, 0), i(EXIT, 0, 0, 0, 0)]);
}

/// Records a refusal in the ring, its key at `RING_KEY` but for the slot: the entry's
/// count and last-seen time bumped, or a new one inserted (the LRU map evicts the least
/// recently refused destination when full, so the ring stays bounded). A lost race
/// between two CPUs inserting the same key loses one count, never a refusal.
fn record_refusal(o: &mut Vec<Op>, maps: MapFds, slot: u32) {
    o.push(i(
        ST_B,
        10,
        0,
        RING_KEY + 19,
        i32::try_from(slot).expect("slot"),
    ));
    ld_map(o, 1, maps.ring);
    o.extend([
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, i32::from(RING_KEY)),
        i(CALL, 0, 0, 0, MAP_LOOKUP_ELEM),
        jk(JEQ_K, 0, 0, L::RingInsert),
        i(MOV_X, 9, 0, 0, 0),
        i(CALL, 0, 0, 0, KTIME_GET_NS),
        i(STX_DW, 9, 0, 8, 0),
        i(MOV_K, 1, 0, 0, 1),
        i(ATOMIC_DW, 9, 1, 16, 0),
        jk(JA, 0, 0, L::RingDone),
        Op::Mark(L::RingInsert),
        i(CALL, 0, 0, 0, KTIME_GET_NS),
        i(STX_DW, 10, 0, RING_VAL, 0),
        i(STX_DW, 10, 0, RING_VAL + 8, 0),
        i(ST_DW, 10, 0, RING_VAL + 16, 1),
    ]);
    for k in 0..RING_NAME / 8 {
        let off = RING_VAL + 24 + i16::try_from(8 * k).expect("small");
        o.push(i(ST_DW, 10, 0, off, 0));
    }
    ld_map(o, 1, maps.ring);
    o.extend([
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, i32::from(RING_KEY)),
        i(MOV_X, 3, 10, 0, 0),
        i(ADD_K, 3, 0, 0, i32::from(RING_VAL)),
        i(MOV_K, 4, 0, 0, BPF_NOEXIST),
        i(CALL, 0, 0, 0, MAP_UPDATE_ELEM),
        Op::Mark(L::RingDone),
    ]);
}

/// Adds one to the stats map's `slot` (a refusal counted); the caller returns 0 after.
fn count_refusal(o: &mut Vec<Op>, maps: MapFds, slot: u32) {
    o.push(i(
        ST_W,
        10,
        0,
        STATS_IDX,
        i32::try_from(slot).expect("slot"),
    ));
    ld_map(o, 1, maps.stats);
    o.extend([
        i(MOV_X, 2, 10, 0, 0),
        i(ADD_K, 2, 0, 0, i32::from(STATS_IDX)),
        i(CALL, 0, 0, 0, MAP_LOOKUP_ELEM),
        jk(JEQ_K, 0, 0, L::DenyRet),
        i(MOV_K, 1, 0, 0, 1),
        i(ATOMIC_DW, 0, 1, 0, 0),
        Op::Mark(L::DenyRet),
    ]);
}

fn assemble(ops: Vec<Op>) -> Vec<Insn> {
    let mut at = Vec::new();
    let mut pc = 0usize;
    for op in &ops {
        match op {
            Op::Mark(l) => at.push((*l, pc)),
            _ => pc += 1,
        }
    }
    let find = |l: L| {
        at.iter()
            .find(|(x, _)| *x == l)
            .map(|&(_, p)| p)
            .expect("jump to a label that was never placed")
    };
    let mut out = Vec::with_capacity(pc);
    for op in ops {
        match op {
            Op::I(insn) => out.push(insn),
            Op::J {
                code,
                reg,
                src,
                imm,
                to,
            } => {
                #[allow(clippy::cast_possible_wrap)] // a few hundred instructions
                let off = find(to) as i64 - out.len() as i64 - 1;
                let off = i16::try_from(off).expect("BPF jump offset fits in i16");
                out.push(Insn {
                    code,
                    regs: reg | (src << 4),
                    off,
                    imm,
                });
            }
            Op::Mark(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a socket-creation program on a `bpf_sock` of `(family, type, protocol)`: the
    /// few instructions it uses, a map lookup answering NULL.
    fn run_sock(prog: &[Insn], family: i32, ty: i32, protocol: i32) -> u64 {
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        for _ in 0..prog.len() {
            let n = prog[pc];
            let (dst, src) = (usize::from(n.regs & 0xf), usize::from(n.regs >> 4));
            let imm = u64::from(n.imm.cast_unsigned());
            pc += 1;
            let jump = |c: bool, pc: &mut usize| {
                if c {
                    *pc = pc.wrapping_add_signed(isize::from(n.off));
                }
            };
            match n.code {
                MOV_X => r[dst] = r[src],
                MOV_K => r[dst] = imm,
                LDX_W if src == 6 => {
                    r[dst] = match n.off {
                        SK_FAMILY => family,
                        SK_TYPE => ty,
                        SK_PROTOCOL => protocol,
                        o => panic!("reads bpf_sock at {o}"),
                    }
                    .cast_unsigned()
                    .into();
                }
                JEQ_K => jump(r[dst] == imm, &mut pc),
                JNE_K => jump(r[dst] != imm, &mut pc),
                JA => jump(true, &mut pc),
                LD_IMM64 => pc += 1,
                ST_W | ST_H | ST_B | ST_DW | STX_W | STX_H | STX_B | STX_DW | ADD_K => {}
                CALL => r[0] = 0,
                EXIT => return r[0],
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
        panic!("ran off the program");
    }

    #[test]
    fn the_socket_program_allows_what_the_hooks_judge() {
        use libc::*;
        let maps = MapFds {
            selector: 3,
            tries: [4, 5],
            stats: 6,
            ring: 7,
        };
        for (list, p) in [
            (true, sock_program(Some(maps))),
            (false, sock_program(None)),
        ] {
            for f in [AF_INET, AF_INET6] {
                for (ty, proto, allowed) in [
                    (SOCK_STREAM, IPPROTO_TCP, true),
                    (SOCK_STREAM, IPPROTO_MPTCP, true),
                    (SOCK_STREAM, IPPROTO_SCTP, false),
                    (SOCK_STREAM, 256, false),
                    (SOCK_DGRAM, IPPROTO_UDP, true),
                    (SOCK_DGRAM, IPPROTO_UDPLITE, false),
                    (SOCK_DGRAM, IPPROTO_ICMP, list),
                    (SOCK_DGRAM, IPPROTO_ICMPV6, list),
                    (SOCK_DGRAM, 115, false), // IPPROTO_L2TP
                    (SOCK_RAW, IPPROTO_UDPLITE, true),
                    (SOCK_RAW, IPPROTO_RAW, true),
                    (SOCK_SEQPACKET, IPPROTO_SCTP, false),
                    (SOCK_RDM, 0, false),
                    (SOCK_DCCP, IPPROTO_DCCP, false),
                ] {
                    assert_eq!(
                        run_sock(&p, f, ty, proto),
                        u64::from(allowed),
                        "list {list}: family {f} type {ty} protocol {proto}"
                    );
                }
            }
            // Another family never reaches the hook; if it did, not this program's.
            assert_eq!(run_sock(&p, AF_UNIX, SOCK_DGRAM, 0), 1);
        }
        assert_eq!(fixed_name(Hook::SockCreate), "moat_md_sock");
        assert_eq!(Hook::SockCreate.name(), "moat_eg_sock");
    }
}
