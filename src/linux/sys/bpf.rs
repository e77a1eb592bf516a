//! bpf(2) for the cgroup v2 device controller: load a `BPF_PROG_TYPE_CGROUP_DEVICE`
//! program, attach it to a cgroup directory, list and detach what is attached there.
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
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: u32::try_from(insns.len())
            .map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // The kernel wants a NUL-terminated name of at most 15 bytes.
    for (dst, src) in attr.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *dst = src;
    }
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
    let mut info = RawProgInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(prog),
        info_len: size_u32::<RawProgInfo>(),
        info: &mut info as *mut RawProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let len = info.name.iter().position(|&b| b == 0).unwrap_or(16);
    Ok(ProgInfo {
        id: info.id,
        prog_type: info.prog_type,
        name: String::from_utf8_lossy(&info.name[..len]).into_owned(),
    })
}
