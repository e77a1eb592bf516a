//! Egress enforcement on the container's cgroup v2 (docs/security.md, "Egress"): the
//! policy's trie ([`Egress::entries`]) in an LPM-trie map, held in slot 0 of a one-slot
//! `ARRAY_OF_MAPS`, and one program per socket hook ([`prog`]) attached to the cgroup with
//! `BPF_F_ALLOW_MULTI` before the init exists, so every process of the container — the
//! init, its children, every `exec` — is bound whatever network namespace it is in and
//! whatever interface is added to it later. A refused `connect`/`sendmsg` fails at once
//! with `EPERM` and is counted in the stats map.
//!
//! `update` swaps the trie in the outer slot: one map write, so every hook sees the old
//! rules or the new ones, never a mix. The programs and maps live as long as the cgroup
//! (the kernel drops them with it); moat finds them again by name through the cgroup
//! ([`Installed::find`]).

pub mod prog;

use std::fs::File;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::linux::sys::bpf;
use crate::policy::egress::{Egress, Entry, Range, RANGES};
use prog::Hook;

/// Entries one trie holds: the policy's (at most 256 rules) and the forwarder's answers.
pub const TRIE_ENTRIES: u32 = 16384;
const KEY_SIZE: u32 = 20;
const VALUE_SIZE: u32 = (RANGES * prog::RANGE_SIZE) as u32;
/// Stats slots: one per hook (refusals), then the forwarder's refused queries.
pub const STATS_SLOTS: u32 = 8;
pub const STATS_REFUSED_NAMES: u32 = 4;

const OUTER_NAME: &str = "moat_eg_outer";
const TRIE_NAME: &str = "moat_eg_allow";
const STATS_NAME: &str = "moat_eg_stats";

/// Why the egress policy could not be put in force (or read back).
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("egress policy: {op} {}: {}", .dir.display(), errno(.err))]
    Io {
        op: &'static str,
        dir: PathBuf,
        err: io::Error,
    },
    #[error("egress policy: the kernel refused the {hook} program: {}{log}", errno(.err))]
    Load {
        hook: &'static str,
        err: io::Error,
        log: String,
    },
    #[error("egress policy: {0}")]
    Invalid(String),
    #[error(
        "egress policy: the container has no cgroup v2 directory to attach it to ({0}); \
         refusing to run it unpoliced"
    )]
    NoCgroup(String),
}

fn errno(e: &io::Error) -> String {
    let s = e.to_string();
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => s[..i].to_string(),
        _ => s,
    }
}

/// A trie key: prefix length, then the 16 address bytes in network order.
pub fn key_bytes(addr: Ipv6Addr, len: u8) -> [u8; KEY_SIZE as usize] {
    let mut k = [0u8; KEY_SIZE as usize];
    k[..4].copy_from_slice(&u32::from(len).to_ne_bytes());
    k[4..].copy_from_slice(&addr.octets());
    k
}

fn value_bytes(ranges: &[Range]) -> [u8; VALUE_SIZE as usize] {
    let mut v = [0u8; VALUE_SIZE as usize];
    for (r, chunk) in ranges.iter().zip(v.chunks_exact_mut(prog::RANGE_SIZE)) {
        chunk[..2].copy_from_slice(&r.lo.to_ne_bytes());
        chunk[2..4].copy_from_slice(&r.hi.to_ne_bytes());
        chunk[4] = r.protos;
    }
    v
}

fn ranges_of(v: &[u8]) -> Vec<Range> {
    v.chunks_exact(prog::RANGE_SIZE)
        .filter(|c| c[4] != 0)
        .map(|c| Range {
            lo: u16::from_ne_bytes([c[0], c[1]]),
            hi: u16::from_ne_bytes([c[2], c[3]]),
            protos: c[4],
        })
        .collect()
}

fn new_trie() -> io::Result<OwnedFd> {
    bpf::map_create(
        bpf::BPF_MAP_TYPE_LPM_TRIE,
        KEY_SIZE,
        VALUE_SIZE,
        TRIE_ENTRIES,
        bpf::BPF_F_NO_PREALLOC,
        None,
        TRIE_NAME,
    )
}

/// A trie filled with `entries`.
fn filled_trie(entries: &[Entry]) -> io::Result<OwnedFd> {
    let t = new_trie()?;
    for e in entries {
        bpf::map_update(
            t.as_fd(),
            &key_bytes(e.addr, e.len),
            &value_bytes(&e.ranges),
        )?;
    }
    Ok(t)
}

fn fd_word(fd: BorrowedFd<'_>) -> [u8; 4] {
    u32::try_from(fd.as_raw_fd())
        .expect("descriptors are not negative")
        .to_ne_bytes()
}

/// The maps of a container's programs, as found on (or installed in) its cgroup.
pub struct Installed {
    pub outer: OwnedFd,
    pub stats: OwnedFd,
    /// The hooks moat's programs are attached to.
    pub hooks: Vec<Hook>,
}

fn open_dir(dir: &Path) -> Result<File, EgressError> {
    File::open(dir).map_err(|err| EgressError::Io {
        op: "open cgroup",
        dir: dir.to_path_buf(),
        err,
    })
}

/// Loads one hook's program over the maps.
fn load(hook: Hook, outer: BorrowedFd<'_>, stats: BorrowedFd<'_>) -> Result<OwnedFd, EgressError> {
    let as_imm = |fd: BorrowedFd<'_>| fd.as_raw_fd();
    let insns = prog::program(hook, as_imm(outer), as_imm(stats));
    let t = bpf::BPF_PROG_TYPE_CGROUP_SOCK_ADDR;
    let at = hook.attach_type();
    bpf::prog_load_for(t, at, &insns, c"Apache-2.0", hook.name(), None).map_err(|err| {
        let mut buf = vec![0u8; 64 * 1024];
        let _ = bpf::prog_load_for(t, at, &insns, c"Apache-2.0", hook.name(), Some(&mut buf));
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        let text = String::from_utf8_lossy(&buf[..end]);
        let tail: Vec<&str> = text.lines().rev().take(3).collect();
        let log = if tail.is_empty() {
            String::new()
        } else {
            format!(
                " (verifier: {})",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        };
        EgressError::Load {
            hook: hook.name(),
            err,
            log,
        }
    })
}

/// Puts `egress` in force on the cgroup v2 directory `dir` before any process is in it:
/// the maps, then each hook's program attached. On failure what was attached is detached
/// again (nothing is left on the cgroup).
pub fn install(dir: &Path, egress: &Egress, forwarder: Option<IpAddr>) -> Result<(), EgressError> {
    let entries = egress.entries(forwarder).map_err(EgressError::Invalid)?;
    let io_err = |op: &'static str| {
        let dir = dir.to_path_buf();
        move |err| EgressError::Io { op, dir, err }
    };
    let trie = filled_trie(&entries).map_err(io_err("create the allow map for"))?;
    let outer = bpf::map_create(
        bpf::BPF_MAP_TYPE_ARRAY_OF_MAPS,
        4,
        4,
        1,
        0,
        Some(trie.as_fd()),
        OUTER_NAME,
    )
    .map_err(io_err("create the outer map for"))?;
    bpf::map_update(outer.as_fd(), &0u32.to_ne_bytes(), &fd_word(trie.as_fd()))
        .map_err(io_err("fill the outer map for"))?;
    let stats = bpf::map_create(
        bpf::BPF_MAP_TYPE_ARRAY,
        4,
        8,
        STATS_SLOTS,
        0,
        None,
        STATS_NAME,
    )
    .map_err(io_err("create the counters for"))?;
    let cg = open_dir(dir)?;
    let mut attached: Vec<(Hook, OwnedFd)> = Vec::new();
    let result = (|| {
        for hook in Hook::ALL {
            let p = load(hook, outer.as_fd(), stats.as_fd())?;
            bpf::prog_attach(
                cg.as_fd(),
                p.as_fd(),
                hook.attach_type(),
                bpf::BPF_F_ALLOW_MULTI,
            )
            .map_err(io_err("attach the egress program to"))?;
            attached.push((hook, p));
        }
        Ok(())
    })();
    if result.is_err() {
        for (hook, p) in &attached {
            let _ = bpf::prog_detach(cg.as_fd(), p.as_fd(), hook.attach_type());
        }
    }
    result
}

impl Installed {
    /// moat's egress programs on the cgroup `dir` and their maps; `None` when none is
    /// attached. Needs `CAP_SYS_ADMIN` (opening a program by id).
    pub fn find(dir: &Path) -> Result<Option<Installed>, EgressError> {
        let cg = open_dir(dir)?;
        let io_err = |op: &'static str| {
            let dir = dir.to_path_buf();
            move |err| EgressError::Io { op, dir, err }
        };
        let mut hooks = Vec::new();
        let mut maps: Option<(OwnedFd, OwnedFd)> = None;
        for hook in Hook::ALL {
            let ids = bpf::prog_query(cg.as_fd(), hook.attach_type())
                .map_err(io_err("list the programs of"))?;
            for id in ids {
                let Ok(p) = bpf::prog_get_fd_by_id(id) else {
                    continue;
                };
                let Ok(info) = bpf::prog_info(p.as_fd()) else {
                    continue;
                };
                if info.name != hook.name() {
                    continue;
                }
                hooks.push(hook);
                if maps.is_none() {
                    maps = maps_of(&info.map_ids);
                }
            }
        }
        Ok(maps.map(|(outer, stats)| Installed {
            outer,
            stats,
            hooks,
        }))
    }

    /// The trie in force now.
    pub fn trie(&self) -> io::Result<OwnedFd> {
        let mut id = [0u8; 4];
        if !bpf::map_lookup(self.outer.as_fd(), &0u32.to_ne_bytes(), &mut id)? {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        bpf::map_get_fd_by_id(u32::from_ne_bytes(id))
    }

    /// Every entry of the trie in force.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let t = self.trie()?;
        let mut out = Vec::new();
        let mut key = [0u8; KEY_SIZE as usize];
        let mut prev: Option<[u8; KEY_SIZE as usize]> = None;
        while bpf::map_next_key(t.as_fd(), prev.as_ref().map(|k| &k[..]), &mut key)? {
            let mut v = [0u8; VALUE_SIZE as usize];
            if bpf::map_lookup(t.as_fd(), &key, &mut v)? {
                let len = u32::from_ne_bytes([key[0], key[1], key[2], key[3]]);
                let mut a = [0u8; 16];
                a.copy_from_slice(&key[4..]);
                out.push(Entry {
                    addr: Ipv6Addr::from(a),
                    len: u8::try_from(len).unwrap_or(128),
                    ranges: ranges_of(&v),
                });
            }
            prev = Some(key);
        }
        out.sort_by(|a, b| (a.addr, a.len).cmp(&(b.addr, b.len)));
        Ok(out)
    }

    /// Replaces the rules: a new trie with `entries` swapped into the outer slot in one
    /// write.
    pub fn replace(&self, entries: &[Entry]) -> io::Result<()> {
        let t = filled_trie(entries)?;
        bpf::map_update(self.outer.as_fd(), &0u32.to_ne_bytes(), &fd_word(t.as_fd()))
    }

    /// Counters: refusals per hook (`Hook::slot`), and the forwarder's refused queries.
    pub fn counters(&self) -> io::Result<[u64; STATS_SLOTS as usize]> {
        let mut out = [0u64; STATS_SLOTS as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let mut v = [0u8; 8];
            let k = u32::try_from(i).expect("few slots").to_ne_bytes();
            if bpf::map_lookup(self.stats.as_fd(), &k, &mut v)? {
                *slot = u64::from_ne_bytes(v);
            }
        }
        Ok(out)
    }
}

/// The outer and stats maps among a program's maps.
fn maps_of(ids: &[u32]) -> Option<(OwnedFd, OwnedFd)> {
    let (mut outer, mut stats) = (None, None);
    for id in ids {
        let Ok(m) = bpf::map_get_fd_by_id(*id) else {
            continue;
        };
        match bpf::map_info(m.as_fd()).map(|i| i.name) {
            Ok(n) if n == OUTER_NAME => outer = Some(m),
            Ok(n) if n == STATS_NAME => stats = Some(m),
            _ => {}
        }
    }
    Some((outer?, stats?))
}

/// Admits `addr` (a /128 entry) with `ranges` into the trie in force: the forwarder, for
/// an allowed name's answer.
// The DNS forwarder's (it admits the answers of allowed names).
#[allow(dead_code)]
pub fn admit(trie: BorrowedFd<'_>, addr: IpAddr, ranges: &[Range]) -> io::Result<()> {
    let key = key_bytes(crate::policy::egress::key_addr(addr), 128);
    bpf::map_update(trie, &key, &value_bytes(ranges))
}

/// Removes `addr`'s /128 entry, or puts back `statics`' own entry for it.
// The DNS forwarder's (it admits the answers of allowed names).
#[allow(dead_code)]
pub fn revoke(trie: BorrowedFd<'_>, addr: IpAddr, statics: &[Entry]) -> io::Result<()> {
    let k = crate::policy::egress::key_addr(addr);
    match statics.iter().find(|e| e.addr == k && e.len == 128) {
        Some(e) => bpf::map_update(trie, &key_bytes(k, 128), &value_bytes(&e.ranges)),
        None => bpf::map_delete(trie, &key_bytes(k, 128)).map(drop),
    }
}

/// Bumps a stats slot from user space (the forwarder is its slot's only writer).
// The DNS forwarder's (it admits the answers of allowed names).
#[allow(dead_code)]
pub fn count(stats: BorrowedFd<'_>, slot: u32) -> io::Result<()> {
    let k = slot.to_ne_bytes();
    let mut v = [0u8; 8];
    bpf::map_lookup(stats, &k, &mut v)?;
    let n = u64::from_ne_bytes(v).saturating_add(1);
    bpf::map_update(stats, &k, &n.to_ne_bytes())
}
