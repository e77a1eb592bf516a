//! bpf(2) for cgroup v2 programs: the device controller's `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program and the egress policy's `BPF_PROG_TYPE_CGROUP_SOCK_ADDR` programs with their
//! maps (`linux::egress`): load, attach to a cgroup directory, list and detach what is
//! attached there, create maps and read and write their elements.
//!
//! Each command gets its own `#[repr(C)]` prefix of `union bpf_attr`; the kernel accepts a
//! shorter attr and treats the missing tail as zero, so only the fields moat sets exist.

use std::ffi::CStr;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

use super::{check, fd_u32, owned, size_u32, Result};

pub const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
pub const BPF_CGROUP_DEVICE: u32 = 6;
pub const BPF_F_ALLOW_MULTI: u32 = 2;

pub const BPF_PROG_TYPE_CGROUP_SOCK_ADDR: u32 = 18;
pub const BPF_PROG_TYPE_CGROUP_SKB: u32 = 8;
pub const BPF_CGROUP_INET_EGRESS: u32 = 1;
pub const BPF_PROG_TYPE_CGROUP_SOCK: u32 = 9;
pub const BPF_CGROUP_INET_SOCK_CREATE: u32 = 2;
pub const BPF_CGROUP_INET4_CONNECT: u32 = 10;
pub const BPF_CGROUP_INET6_CONNECT: u32 = 11;
pub const BPF_CGROUP_UDP4_SENDMSG: u32 = 14;
pub const BPF_CGROUP_UDP6_SENDMSG: u32 = 15;

pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub const BPF_MAP_TYPE_LPM_TRIE: u32 = 11;
pub const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
/// Required of an LPM trie: its nodes are allocated as entries arrive.
pub const BPF_F_NO_PREALLOC: u32 = 1;
/// `ld_imm64`'s source register when its immediate is a map fd the kernel replaces with
/// the map's address.
pub const BPF_PSEUDO_MAP_FD: u8 = 1;

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_MAP_DELETE_ELEM: libc::c_int = 3;
const BPF_MAP_GET_NEXT_KEY: libc::c_int = 4;
const BPF_MAP_GET_FD_BY_ID: libc::c_int = 14;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_PROG_ATTACH: libc::c_int = 8;
const BPF_PROG_DETACH: libc::c_int = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_int = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_PROG_QUERY: libc::c_int = 16;

/// One eBPF instruction (`struct bpf_insn`): `regs` is `dst | src << 4`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The leading part of `struct bpf_map_info`.
#[repr(C)]
#[derive(Default)]
struct RawMapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct GetFdByIdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The leading part of `struct bpf_prog_info`, up to and including `name`.
#[repr(C)]
#[derive(Default)]
struct RawProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// What moat needs to know about an attached program to decide whether it owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgInfo {
    pub id: u32,
    pub prog_type: u32,
    pub name: String,
    /// The kernel's hash of the program's instructions (map fds left out).
    pub tag: [u8; 8],
    /// The maps the program uses (at most 8 are listed).
    pub map_ids: Vec<u32>,
}

/// What a map is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapInfo {
    pub id: u32,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub name: String,
}

fn name16(name: &str) -> [u8; 16] {
    // The kernel wants a NUL-terminated name of at most 15 bytes.
    let mut out = [0u8; 16];
    for (dst, src) in out.iter_mut().zip(name.bytes().take(15)) {
        *dst = src;
    }
    out
}

fn unname16(name: &[u8; 16]) -> String {
    let len = name.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&name[..len]).into_owned()
}

fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> Result<libc::c_long> {
    loop {
        // SAFETY: attr is a live, initialised #[repr(C)] prefix of union bpf_attr for this
        // command, and the size passed is exactly its size; pointers inside it refer to
        // buffers the caller keeps alive across the call.
        let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, size_u32::<T>()) };
        match check(r) {
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            // The verifier can fail transiently under memory pressure; runc and libbpf
            // retry PROG_LOAD on EAGAIN as well.
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && cmd == BPF_PROG_LOAD => continue,
            r => return r,
        }
    }
}

/// Loads a program. When `log` is given the verifier writes its log there (used to
/// explain a rejection).
pub fn prog_load(
    prog_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd> {
    fake!("prog_load", prog_type, insns.len(), name);
    load(prog_type, 0, insns, license, name, log)
}

/// [`prog_load`] for a program type that needs its attach type at load
/// (`BPF_PROG_TYPE_CGROUP_SOCK_ADDR`).
pub fn prog_load_for(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd> {
    fake!("prog_load_for", prog_type, expected_attach_type, name);
    load(prog_type, expected_attach_type, insns, license, name, log)
}

fn load(
    prog_type: u32,
    expected_attach_type: u32,
    insns: &[Insn],
    license: &CStr,
    name: &str,
    log: Option<&mut [u8]>,
) -> Result<OwnedFd> {
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: u32::try_from(insns.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name16(name),
        expected_attach_type,
        ..Default::default()
    };
    if let Some(buf) = log {
        attr.log_level = 1;
        attr.log_size = u32::try_from(buf.len()).unwrap_or(u32::MAX);
        attr.log_buf = buf.as_mut_ptr() as u64;
    }
    bpf(BPF_PROG_LOAD, &mut attr).map(owned)
}

pub fn prog_attach(
    target: BorrowedFd<'_>,
    prog: BorrowedFd<'_>,
    attach_type: u32,
    flags: u32,
) -> Result<()> {
    fake!("prog_attach", target, prog, attach_type, flags);
    let mut attr = AttachAttr {
        target_fd: fd_u32(target),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        attach_flags: flags,
        ..Default::default()
    };
    bpf(BPF_PROG_ATTACH, &mut attr).map(drop)
}

pub fn prog_detach(target: BorrowedFd<'_>, prog: BorrowedFd<'_>, attach_type: u32) -> Result<()> {
    fake!("prog_detach", target, prog, attach_type);
    let mut attr = AttachAttr {
        target_fd: fd_u32(target),
        attach_bpf_fd: fd_u32(prog),
        attach_type,
        ..Default::default()
    };
    bpf(BPF_PROG_DETACH, &mut attr).map(drop)
}

/// Ids of the programs attached directly to `target` (not inherited ones).
pub fn prog_query(target: BorrowedFd<'_>, attach_type: u32) -> Result<Vec<u32>> {
    fake!("prog_query", target, attach_type);
    let mut ids = vec![0u32; 64];
    loop {
        let mut attr = QueryAttr {
            target_fd: fd_u32(target),
            attach_type,
            prog_ids: ids.as_mut_ptr() as u64,
            prog_cnt: u32::try_from(ids.len())
                .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
            ..Default::default()
        };
        match bpf(BPF_PROG_QUERY, &mut attr) {
            // ENOSPC: the buffer was too small, and prog_cnt now says how many there are.
            Err(e)
                if e.raw_os_error() == Some(libc::ENOSPC) && attr.prog_cnt as usize > ids.len() =>
            {
                ids = vec![0u32; attr.prog_cnt as usize];
            }
            Err(e) => return Err(e),
            Ok(_) => {
                ids.truncate(attr.prog_cnt as usize);
                return Ok(ids);
            }
        }
    }
}

pub fn prog_get_fd_by_id(id: u32) -> Result<OwnedFd> {
    fake!("prog_get_fd_by_id", id);
    let mut attr = GetFdByIdAttr {
        prog_id: id,
        ..Default::default()
    };
    bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(owned)
}

pub fn prog_info(prog: BorrowedFd<'_>) -> Result<ProgInfo> {
    fake!("prog_info", prog);
    let mut map_ids = [0u32; 8];
    let mut info = RawProgInfo {
        nr_map_ids: 8,
        map_ids: map_ids.as_mut_ptr() as u64,
        ..Default::default()
    };
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(prog),
        info_len: size_u32::<RawProgInfo>(),
        info: &mut info as *mut RawProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let n = (info.nr_map_ids as usize).min(map_ids.len());
    Ok(ProgInfo {
        id: info.id,
        prog_type: info.prog_type,
        name: unname16(&info.name),
        tag: info.tag,
        map_ids: map_ids[..n].to_vec(),
    })
}

/// Creates a map; `inner` is the template of an `ARRAY_OF_MAPS`'s elements.
pub fn map_create(
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    flags: u32,
    inner: Option<BorrowedFd<'_>>,
    name: &str,
) -> Result<OwnedFd> {
    fake!("map_create", map_type, max_entries, name);
    let mut attr = MapCreateAttr {
        map_type,
        key_size,
        value_size,
        max_entries,
        map_flags: flags,
        inner_map_fd: inner.map_or(0, fd_u32),
        map_name: name16(name),
        ..Default::default()
    };
    bpf(BPF_MAP_CREATE, &mut attr).map(owned)
}

/// Sets `key` to `value` (`BPF_ANY`: created or replaced). Both must be exactly the map's
/// key and value sizes; the kernel reads that many bytes.
pub fn map_update(map: BorrowedFd<'_>, key: &[u8], value: &[u8]) -> Result<()> {
    fake!("map_update", map, key.len(), value.len());
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: key.as_ptr() as u64,
        value: value.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Reads `key` into `value` (exactly the map's value size); `false`: no such key.
pub fn map_lookup(map: BorrowedFd<'_>, key: &[u8], value: &mut [u8]) -> Result<bool> {
    fake!("map_lookup", map, key.len());
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: key.as_ptr() as u64,
        value: value.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes `key`; `false`: it was not there.
pub fn map_delete(map: BorrowedFd<'_>, key: &[u8]) -> Result<bool> {
    fake!("map_delete", map, key.len());
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: key.as_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_DELETE_ELEM, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The key after `key` (the first with `None`) into `next`; `false`: no more keys.
pub fn map_next_key(map: BorrowedFd<'_>, key: Option<&[u8]>, next: &mut [u8]) -> Result<bool> {
    fake!("map_next_key", map);
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map),
        key: key.map_or(0, |k| k.as_ptr() as u64),
        value: next.as_mut_ptr() as u64,
        ..Default::default()
    };
    match bpf(BPF_MAP_GET_NEXT_KEY, &mut attr) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

pub fn map_get_fd_by_id(id: u32) -> Result<OwnedFd> {
    fake!("map_get_fd_by_id", id);
    let mut attr = GetFdByIdAttr {
        prog_id: id,
        ..Default::default()
    };
    bpf(BPF_MAP_GET_FD_BY_ID, &mut attr).map(owned)
}

pub fn map_info(map: BorrowedFd<'_>) -> Result<MapInfo> {
    fake!("map_info", map);
    let mut info = RawMapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(map),
        info_len: size_u32::<RawMapInfo>(),
        info: &mut info as *mut RawMapInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(MapInfo {
        id: info.id,
        map_type: info.map_type,
        key_size: info.key_size,
        value_size: info.value_size,
        max_entries: info.max_entries,
        name: unname16(&info.name),
    })
}
