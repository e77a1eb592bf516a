//! Egress enforcement on the container's cgroup v2 (docs/security.md, "Egress"): programs
//! ([`prog`]) attached to the cgroup with `BPF_F_ALLOW_MULTI` before the init exists, so
//! every process of the container — the init, its children, every `exec` — is bound
//! whatever network namespace it is in and whatever interface is added to it later. A
//! refused `connect`/`sendmsg` fails at once with `EPERM`.
//!
//! Two forms. Without a list (RESTRICTED's default: the metadata endpoints refused), the
//! fixed programs on the same four hooks, the addresses as immediates: no map.
//! Both forms also attach a program on `BPF_CGROUP_INET_SOCK_CREATE`
//! ([`prog::sock_program`]): a socket whose protocol no hook judges (UDP-Lite, SCTP, …)
//! is refused at `socket(2)`, and so is a ping socket where no echo backstop is attached.
//! With a list, or where every packet is judged (`Egress::packets`: the container may
//! hold `CAP_NET_RAW`; without a list the trie is then `::/0` but the refused addresses),
//! the policy's trie ([`Egress::entries`]) in one of two LPM tries, a
//! selector saying which is in force, a counters array, and a program on each of the four
//! hooks and on `BPF_CGROUP_INET_EGRESS` (the packet program: a ping socket's `sendto`
//! and raw sockets pass no `connect`/`sendmsg` hook, and a header can route elsewhere); `update` fills the other trie and
//! flips the selector: one array write, so every hook sees the old rules or the new ones,
//! never a mix. A change of form attaches the new
//! programs before it detaches the old (in between, both must allow). The programs and
//! maps live as long as the cgroup; moat finds them again by name ([`Installed::find`]).

pub mod forwarder;
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
#[allow(clippy::cast_possible_truncation)] // 64
const VALUE_SIZE: u32 = (RANGES * prog::RANGE_SIZE) as u32;
/// Stats slots: one per `connect`/`sendmsg` hook (refusals), the forwarder's refused
/// queries, the echo requests the packet program dropped, then the sockets refused at
/// creation (`Hook::slot`), the forwarder's rebinding and full refusals and its two
/// gauges; 5 spare (a
/// container made by an older moat has 8: its missing slots read 0).
pub const STATS_SLOTS: u32 = 16;
pub const STATS_REFUSED_NAMES: u32 = 4;
pub const STATS_REFUSED_ECHO: u32 = 5;
/// Answers the DNS forwarder did not admit: a name resolving into the host's own or a
/// private network (`policy::egress::special_block`) that no address rule names.
pub const STATS_REFUSED_REBIND: u32 = 7;
/// Answers the DNS forwarder did not admit because its state was full
/// (`[egress] forwarder_names`, `forwarder_answers`).
pub const STATS_REFUSED_FULL: u32 = 8;
/// Gauges the forwarder keeps: the names and the addresses it holds admitted now.
pub const STATS_HELD_NAMES: u32 = 9;
pub const STATS_HELD_ADDRS: u32 = 10;

const SELECTOR_NAME: &str = "moat_eg_sel";
const TRIE_NAMES: [&str; 2] = ["moat_eg_allow0", "moat_eg_allow1"];
const STATS_NAME: &str = "moat_eg_stats";
const RING_NAME: &str = "moat_eg_refused";
/// Distinct refusals the ring keeps per container (destination, port, protocol, what
/// refused it; or a name): the least recently refused is dropped for a new one. 88 bytes
/// of value, 20 of key: about 40 KiB of kernel memory per container with a list.
pub const RING_ENTRIES: u32 = 256;

/// Why the egress policy could not be put in force (or read back).
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("egress policy: {op} {}: {}", .dir.display(), crate::error_text::strerror(.err))]
    Io {
        op: &'static str,
        dir: PathBuf,
        err: io::Error,
    },
    #[error("egress policy: the kernel refused the {hook} program: {}{log}", crate::error_text::strerror(.err))]
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

fn new_trie(name: &str) -> io::Result<OwnedFd> {
    bpf::map_create(
        bpf::BPF_MAP_TYPE_LPM_TRIE,
        KEY_SIZE,
        VALUE_SIZE,
        TRIE_ENTRIES,
        bpf::BPF_F_NO_PREALLOC,
        None,
        name,
    )
}

/// Writes `entries` into `trie`.
fn fill(trie: BorrowedFd<'_>, entries: &[Entry]) -> io::Result<()> {
    for e in entries {
        bpf::map_update(trie, &key_bytes(e.addr, e.len), &value_bytes(&e.ranges))?;
    }
    Ok(())
}

/// Empties `trie`.
fn clear(trie: BorrowedFd<'_>) -> io::Result<()> {
    let mut key = [0u8; KEY_SIZE as usize];
    while bpf::map_next_key(trie, None, &mut key)? {
        bpf::map_delete(trie, &key)?;
    }
    Ok(())
}

/// A container's list maps, as found on (or installed in) its cgroup.
pub struct ListMaps {
    pub selector: OwnedFd,
    pub tries: [OwnedFd; 2],
    pub stats: OwnedFd,
    /// The refusal ring ([`Refusal`]); `None` on a cgroup whose programs an older moat
    /// loaded.
    pub ring: Option<OwnedFd>,
}

/// What moat has attached to a container's cgroup.
pub struct Installed {
    /// The list form's maps; `None`: the fixed form (no list).
    pub list: Option<ListMaps>,
    /// The hooks moat's programs are attached to.
    pub hooks: Vec<Hook>,
    /// The fixed programs' hooks.
    pub fixed: Vec<Hook>,
}

fn open_dir(dir: &Path) -> Result<File, EgressError> {
    File::open(dir).map_err(|err| EgressError::Io {
        op: "open cgroup",
        dir: dir.to_path_buf(),
        err,
    })
}

/// Loads `insns` for `hook` (named `name`), with the verifier's log on refusal.
fn load(hook: Hook, name: &'static str, insns: &[bpf::Insn]) -> Result<OwnedFd, EgressError> {
    let t = hook.prog_type();
    let at = hook.attach_type();
    bpf::prog_load_for(t, at, insns, c"Apache-2.0", name, None).map_err(|err| {
        let mut buf = vec![0u8; 64 * 1024];
        let _ = bpf::prog_load_for(t, at, insns, c"Apache-2.0", name, Some(&mut buf));
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
            hook: name,
            err,
            log,
        }
    })
}

/// Each refused address with the ports left open to it (DNS to a resolver there).
fn deny_with_open(egress: &Egress) -> Vec<(Ipv6Addr, Vec<u16>)> {
    egress
        .deny
        .iter()
        .map(|d| {
            let open = egress
                .resolvers
                .iter()
                .filter(|r| crate::policy::egress::key_addr(r.ip()) == *d)
                .map(|r| r.port())
                .collect();
            (*d, open)
        })
        .collect()
}

fn io_err(op: &'static str, dir: &Path) -> impl FnOnce(io::Error) -> EgressError {
    let dir = dir.to_path_buf();
    move |err| EgressError::Io { op, dir, err }
}

/// The fixed form's programs (no list): each hook's name and instructions.
fn fixed(egress: &Egress) -> Vec<(Hook, &'static str, Vec<bpf::Insn>)> {
    let deny = deny_with_open(egress);
    prog::FIXED_HOOKS
        .iter()
        .map(|h| (*h, prog::fixed_name(*h), prog::fixed_program(*h, &deny)))
        .collect()
}

/// Loads the programs `egress` needs (the list maps created and filled first); returns
/// them by hook and name, not attached.
fn programs(
    dir: &Path,
    egress: &Egress,
    forwarder: Option<IpAddr>,
) -> Result<Vec<(Hook, &'static str, OwnedFd)>, EgressError> {
    let mut out = Vec::new();
    if !egress.list_form() {
        for (hook, name, insns) in fixed(egress) {
            out.push((hook, name, load(hook, name, &insns)?));
        }
        return Ok(out);
    }
    let entries = egress.entries(forwarder).map_err(EgressError::Invalid)?;
    let tries = [new_trie(TRIE_NAMES[0]), new_trie(TRIE_NAMES[1])];
    let [Ok(t0), Ok(t1)] = tries else {
        let e = tries.into_iter().find_map(Result::err).expect("one failed");
        return Err(io_err("create the allow maps for", dir)(e));
    };
    fill(t0.as_fd(), &entries).map_err(io_err("fill the allow map for", dir))?;
    // Zero-filled: slot 0 selects trie 0 without a write.
    let selector = bpf::map_create(bpf::BPF_MAP_TYPE_ARRAY, 4, 4, 1, 0, None, SELECTOR_NAME)
        .map_err(io_err("create the selector for", dir))?;
    let stats = bpf::map_create(
        bpf::BPF_MAP_TYPE_ARRAY,
        4,
        8,
        STATS_SLOTS,
        0,
        None,
        STATS_NAME,
    )
    .map_err(io_err("create the counters for", dir))?;
    let ring = bpf::map_create(
        bpf::BPF_MAP_TYPE_LRU_HASH,
        u32::try_from(prog::RING_KEY_SIZE).expect("small"),
        u32::try_from(prog::RING_VALUE_SIZE).expect("small"),
        RING_ENTRIES,
        0,
        None,
        RING_NAME,
    )
    .map_err(io_err("create the refusal ring for", dir))?;
    let raw = |f: &OwnedFd| f.as_raw_fd();
    let maps = prog::MapFds {
        selector: raw(&selector),
        tries: [raw(&t0), raw(&t1)],
        stats: raw(&stats),
        ring: raw(&ring),
    };
    for hook in Hook::ALL {
        out.push((
            hook,
            hook.name(),
            load(hook, hook.name(), &prog::program(hook, maps))?,
        ));
    }
    // The programs hold the maps from here on.
    Ok(out)
}

/// Attaches `progs` to `cg`; on failure detaches what it attached.
fn attach_all(
    cg: &File,
    dir: &Path,
    progs: &[(Hook, &'static str, OwnedFd)],
) -> Result<(), EgressError> {
    for (n, (hook, _, p)) in progs.iter().enumerate() {
        if let Err(e) = bpf::prog_attach(
            cg.as_fd(),
            p.as_fd(),
            hook.attach_type(),
            bpf::BPF_F_ALLOW_MULTI,
        ) {
            for (hook, _, p) in &progs[..n] {
                let _ = bpf::prog_detach(cg.as_fd(), p.as_fd(), hook.attach_type());
            }
            return Err(io_err("attach the egress program to", dir)(e));
        }
    }
    Ok(())
}

/// Puts `egress` in force on the cgroup v2 directory `dir` before any process is in it.
/// On failure nothing is left on the cgroup. `cache` (the state root's `@cache/egress`)
/// lets containers share the fixed form's programs ([`shared_fixed`]).
pub fn install(
    dir: &Path,
    egress: &Egress,
    forwarder: Option<IpAddr>,
    cache: Option<&Path>,
) -> Result<(), EgressError> {
    let cg = open_dir(dir)?;
    if let (false, Some(cache)) = (egress.list_form(), cache) {
        let want = fixed(egress);
        if let Some(progs) = shared_fixed(cache, &want) {
            // A program whose expected attach type is not its hook's is refused here
            // (EINVAL): then it is loaded anew, as without the cache.
            if attach_all(&cg, dir, &progs).is_ok() {
                return Ok(());
            }
        }
        let mut progs = Vec::with_capacity(want.len());
        for (hook, name, insns) in &want {
            progs.push((*hook, *name, load(*hook, name, insns)?));
        }
        attach_all(&cg, dir, &progs)?;
        remember_fixed(cache, &want, &progs);
        return Ok(());
    }
    let progs = programs(dir, egress, forwarder)?;
    attach_all(&cg, dir, &progs)
}

/// The fixed form is the same few instructions for every RESTRICTED container of a
/// configuration, and loading it (the verifier and the JIT, four times) was ~0.5 ms of
/// every create. A loaded program lives as long as a cgroup it is attached to, so the
/// programs a create loaded are found again by id from `cache`: a file named after the
/// instructions, holding them (compared byte for byte, as the seccomp cache's key), then
/// each program's id and kernel tag. A program is taken only if the kernel still has it
/// (`BPF_PROG_GET_FD_BY_ID` takes a reference, or fails once it is freed) and it has the
/// type, name and tag recorded; else every program is loaded anew. Nothing is pinned:
/// the programs go with the last cgroup holding them, the file is a hint.
fn shared_fixed(
    cache: &Path,
    want: &[(Hook, &'static str, Vec<bpf::Insn>)],
) -> Option<Vec<(Hook, &'static str, OwnedFd)>> {
    let (key, name) = fixed_key(want);
    let b = std::fs::read(cache.join(name)).ok()?;
    let rest = b.strip_prefix(key.as_slice())?;
    let mut out = Vec::with_capacity(want.len());
    for ((hook, name, _), rec) in want.iter().zip(rest.chunks_exact(12)) {
        let id = u32::from_le_bytes(rec[..4].try_into().ok()?);
        let tag: [u8; 8] = rec[4..].try_into().ok()?;
        let fd = bpf::prog_get_fd_by_id(id).ok()?;
        let info = bpf::prog_info(fd.as_fd()).ok()?;
        if info.prog_type != hook.prog_type() || info.name != *name || info.tag != tag {
            return None;
        }
        out.push((*hook, *name, fd));
    }
    (out.len() == want.len()).then_some(out)
}

/// Records the programs just loaded for [`shared_fixed`]; a failure only costs the next
/// create a load.
fn remember_fixed(
    cache: &Path,
    want: &[(Hook, &'static str, Vec<bpf::Insn>)],
    progs: &[(Hook, &'static str, OwnedFd)],
) {
    let (mut b, name) = fixed_key(want);
    for (_, _, fd) in progs {
        let Ok(info) = bpf::prog_info(fd.as_fd()) else {
            return;
        };
        b.extend_from_slice(&info.id.to_le_bytes());
        b.extend_from_slice(&info.tag);
    }
    let _ = crate::state::write_cache_file(cache, &name, &b);
}

/// The fixed programs' key (each name, then its instructions) and the cache file it names.
fn fixed_key(want: &[(Hook, &'static str, Vec<bpf::Insn>)]) -> (Vec<u8>, String) {
    use std::hash::{Hash, Hasher};
    let mut key = b"moat fixed egress 1\n".to_vec();
    for (_, name, insns) in want {
        key.extend_from_slice(name.as_bytes());
        key.push(0);
        for i in insns {
            key.push(i.code);
            key.push(i.regs);
            key.extend_from_slice(&i.off.to_le_bytes());
            key.extend_from_slice(&i.imm.to_le_bytes());
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    (key, format!("fixed-{:016x}", h.finish()))
}

/// Replaces the rules on a running container's cgroup: a flip of the selector when both
/// the old and the new policy are lists, else the new programs attached before the old
/// ones are detached (in between both must allow: never more than either allows).
/// `after` runs on the trie just selected, once the flip put the new static entries in
/// force (the DNS forwarder re-admits there its live answers the new list still allows:
/// `forwarder::reconfigure`): narrowing never waits for the forwarder, which the
/// container talks to.
pub fn replace_with(
    dir: &Path,
    egress: &Egress,
    forwarder: Option<IpAddr>,
    after: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>,
) -> Result<(), EgressError> {
    let cg = open_dir(dir)?;
    let old = Installed::find(dir)?;
    if let (Some(inst), true) = (&old, egress.list_form()) {
        if let Some(l) = &inst.list {
            let entries = egress.entries(forwarder).map_err(EgressError::Invalid)?;
            l.flip(&entries, after)
                .map_err(io_err("swap the allow maps of", dir))?;
            // A list put in force by a moat before the echo backstop or the socket-creation
            // program: attached now, over the same maps (the hooks it lacks are the
            // kernel's record of that).
            for hook in Hook::ALL {
                if !inst.hooks.contains(&hook) {
                    let p = load(hook, hook.name(), &prog::program(hook, l.fds()))?;
                    attach_all(&cg, dir, &[(hook, hook.name(), p)])?;
                }
            }
            return Ok(());
        }
    }
    let progs = programs(dir, egress, forwarder)?;
    attach_all(&cg, dir, &progs)?;
    for (hook, name) in ours_on(&cg, dir)? {
        if progs.iter().any(|(h, n, _)| *h == hook && *n == name) {
            continue;
        }
        detach_named(&cg, dir, hook, name, &progs)?;
    }
    Ok(())
}

/// Every program attached directly to `cg` on `hook`, opened, with what the kernel says of
/// it (one gone meanwhile is skipped).
fn attached(
    cg: &File,
    dir: &Path,
    hook: Hook,
) -> Result<Vec<(OwnedFd, bpf::ProgInfo)>, EgressError> {
    let ids = bpf::prog_query(cg.as_fd(), hook.attach_type())
        .map_err(io_err("list the programs of", dir))?;
    Ok(ids
        .into_iter()
        .filter_map(|id| {
            let p = bpf::prog_get_fd_by_id(id).ok()?;
            let info = bpf::prog_info(p.as_fd()).ok()?;
            Some((p, info))
        })
        .collect())
}

/// Whether a program named `name` on `hook` is moat's list (`Some(false)`) or fixed
/// (`Some(true)`) egress program.
fn form_of(hook: Hook, name: &str) -> Option<bool> {
    if name == hook.name() {
        Some(false)
    } else if prog::FIXED_HOOKS.contains(&hook) && name == prog::fixed_name(hook) {
        Some(true)
    } else {
        None
    }
}

/// moat's egress programs attached to `cg`: (hook, name) pairs.
fn ours_on(cg: &File, dir: &Path) -> Result<Vec<(Hook, &'static str)>, EgressError> {
    let mut out = Vec::new();
    for hook in Hook::ALL {
        for (_, info) in attached(cg, dir, hook)? {
            match form_of(hook, &info.name) {
                Some(false) => out.push((hook, hook.name())),
                Some(true) => out.push((hook, prog::fixed_name(hook))),
                None => {}
            }
        }
    }
    Ok(out)
}

/// Detaches every program named `name` on `hook` except those in `keep`.
fn detach_named(
    cg: &File,
    dir: &Path,
    hook: Hook,
    name: &str,
    keep: &[(Hook, &'static str, OwnedFd)],
) -> Result<(), EgressError> {
    let keep_ids: Vec<u32> = keep
        .iter()
        .filter_map(|(_, _, p)| bpf::prog_info(p.as_fd()).ok().map(|i| i.id))
        .collect();
    for (p, info) in attached(cg, dir, hook)? {
        if info.name == name && !keep_ids.contains(&info.id) {
            bpf::prog_detach(cg.as_fd(), p.as_fd(), hook.attach_type())
                .map_err(io_err("detach the old egress program from", dir))?;
        }
    }
    Ok(())
}

impl Installed {
    /// moat's egress programs on the cgroup `dir` and their maps; `None` when none is
    /// attached. Needs `CAP_SYS_ADMIN` (opening a program by id).
    pub fn find(dir: &Path) -> Result<Option<Installed>, EgressError> {
        let cg = open_dir(dir)?;
        let mut inst = Installed {
            list: None,
            hooks: Vec::new(),
            fixed: Vec::new(),
        };
        for hook in Hook::ALL {
            for (_, info) in attached(&cg, dir, hook)? {
                match form_of(hook, &info.name) {
                    Some(false) => {
                        inst.hooks.push(hook);
                        if inst.list.is_none() {
                            inst.list = maps_of(&info.map_ids);
                        }
                    }
                    Some(true) => inst.fixed.push(hook),
                    None => {}
                }
            }
        }
        Ok((!inst.hooks.is_empty() || !inst.fixed.is_empty()).then_some(inst))
    }

    /// The trie in force now (`None`: the fixed form).
    pub fn trie(&self) -> io::Result<Option<BorrowedFd<'_>>> {
        match &self.list {
            None => Ok(None),
            Some(l) => Ok(Some(l.tries[l.selected()?].as_fd())),
        }
    }

    /// Every entry of the trie in force (none in the fixed form).
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let Some(t) = self.trie()? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut key = [0u8; KEY_SIZE as usize];
        let mut prev: Option<[u8; KEY_SIZE as usize]> = None;
        while bpf::map_next_key(t, prev.as_ref().map(|k| &k[..]), &mut key)? {
            let mut v = [0u8; VALUE_SIZE as usize];
            if bpf::map_lookup(t, &key, &mut v)? {
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
        out.sort_by_key(|e| (e.addr, e.len));
        Ok(out)
    }

    /// Counters: refusals per hook (`Hook::slot`), and the forwarder's refused queries;
    /// `None` in the fixed form, which counts nothing.
    pub fn counters(&self) -> io::Result<Option<[u64; STATS_SLOTS as usize]>> {
        let Some(l) = &self.list else {
            return Ok(None);
        };
        let mut out = [0u64; STATS_SLOTS as usize];
        for (i, slot) in out.iter_mut().enumerate() {
            let mut v = [0u8; 8];
            let k = u32::try_from(i).expect("few slots").to_ne_bytes();
            if bpf::map_lookup(l.stats.as_fd(), &k, &mut v)? {
                *slot = u64::from_ne_bytes(v);
            }
        }
        Ok(Some(out))
    }
}

impl Installed {
    /// Whether the programs attached are exactly those `egress` loads (same kernel tag:
    /// the hash of their instructions, map fds left out), each hook of its form present;
    /// `Err` says what differs.
    pub fn check_programs(&self, dir: &Path, egress: &Egress) -> Result<usize, String> {
        let cg = open_dir(dir).map_err(|e| e.to_string())?;
        let want: Vec<(Hook, &'static str, Vec<bpf::Insn>)> = match (egress.list_form(), &self.list)
        {
            (false, _) => fixed(egress),
            (true, Some(l)) => {
                let maps = l.fds();
                Hook::ALL
                    .iter()
                    .map(|h| (*h, h.name(), prog::program(*h, maps)))
                    .collect()
            }
            (true, None) => return Err("a list's programs are not attached".into()),
        };
        for (hook, name, insns) in &want {
            let fresh = load(*hook, name, insns).map_err(|e| e.to_string())?;
            let tag = bpf::prog_info(fresh.as_fd())
                .map_err(|e| e.to_string())?
                .tag;
            let ids = bpf::prog_query(cg.as_fd(), hook.attach_type()).map_err(|e| e.to_string())?;
            let attached = ids.into_iter().any(|id| {
                bpf::prog_get_fd_by_id(id)
                    .ok()
                    .and_then(|p| bpf::prog_info(p.as_fd()).ok())
                    .is_some_and(|i| i.name == *name && i.tag == tag)
            });
            if !attached {
                return Err(format!(
                    "{name} on its hook is not the program the policy loads"
                ));
            }
        }
        Ok(want.len())
    }
}

impl ListMaps {
    /// The fds the list programs are loaded over.
    fn fds(&self) -> prog::MapFds {
        let raw = |f: &OwnedFd| f.as_raw_fd();
        prog::MapFds {
            selector: raw(&self.selector),
            tries: [raw(&self.tries[0]), raw(&self.tries[1])],
            stats: raw(&self.stats),
            // An older moat's programs have no ring: a program loaded over -1 is refused,
            // so `verify` says they differ from this moat's.
            ring: self.ring.as_ref().map_or(-1, raw),
        }
    }

    /// Which trie the selector names.
    pub fn selected(&self) -> io::Result<usize> {
        let mut v = [0u8; 4];
        bpf::map_lookup(self.selector.as_fd(), &0u32.to_ne_bytes(), &mut v)?;
        Ok(usize::from(u32::from_ne_bytes(v) == 1))
    }

    /// The other trie emptied and filled with `entries`, then selected.
    fn flip(
        &self,
        entries: &[Entry],
        after: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>,
    ) -> io::Result<()> {
        let next = 1 - self.selected()?;
        let t = self.tries[next].as_fd();
        clear(t)?;
        fill(t, entries)?;
        let v = u32::try_from(next).expect("0 or 1").to_ne_bytes();
        bpf::map_update(self.selector.as_fd(), &0u32.to_ne_bytes(), &v)?;
        after(t)
    }
}

/// The list maps among a program's maps.
fn maps_of(ids: &[u32]) -> Option<ListMaps> {
    let (mut sel, mut t0, mut t1, mut stats, mut ring) = (None, None, None, None, None);
    for id in ids {
        let Ok(m) = bpf::map_get_fd_by_id(*id) else {
            continue;
        };
        match bpf::map_info(m.as_fd()).map(|i| i.name) {
            Ok(n) if n == SELECTOR_NAME => sel = Some(m),
            Ok(n) if n == TRIE_NAMES[0] => t0 = Some(m),
            Ok(n) if n == TRIE_NAMES[1] => t1 = Some(m),
            Ok(n) if n == STATS_NAME => stats = Some(m),
            Ok(n) if n == RING_NAME => ring = Some(m),
            _ => {}
        }
    }
    Some(ListMaps {
        selector: sel?,
        tries: [t0?, t1?],
        stats: stats?,
        ring,
    })
}

/// One entry of the refusal ring, as the kernel (or the forwarder) left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingEntry {
    /// The destination (IPv4 as `::ffff:a.b.c.d`); a socket refused at creation: its
    /// family and type in the first eight bytes; a refused name: a hash of it.
    pub addr: [u8; 16],
    pub port: u16,
    /// The IP protocol number.
    pub protocol: u8,
    /// The stats slot of what refused it ([`Hook::slot`], [`STATS_REFUSED_NAMES`],
    /// [`STATS_REFUSED_REBIND`]).
    pub slot: u8,
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub first_ns: u64,
    pub last_ns: u64,
    pub count: u64,
    /// The name asked for, if the forwarder knew one (cut to [`prog::RING_NAME`] bytes).
    pub name: Option<String>,
}

impl RingEntry {
    fn key(&self) -> [u8; prog::RING_KEY_SIZE] {
        let mut k = [0u8; prog::RING_KEY_SIZE];
        k[..16].copy_from_slice(&self.addr);
        k[16..18].copy_from_slice(&self.port.to_ne_bytes());
        k[18] = self.protocol;
        k[19] = self.slot;
        k
    }

    fn parse(k: &[u8], v: &[u8]) -> RingEntry {
        let u64_at = |o: usize| u64::from_ne_bytes(v[o..o + 8].try_into().expect("8 bytes"));
        let name = &v[24..];
        let name = &name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())];
        RingEntry {
            addr: k[..16].try_into().expect("16 bytes"),
            port: u16::from_ne_bytes([k[16], k[17]]),
            protocol: k[18],
            slot: k[19],
            first_ns: u64_at(0),
            last_ns: u64_at(8),
            count: u64_at(16),
            name: (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned()),
        }
    }
}

impl ListMaps {
    /// The refusal ring's entries, most recent first (none from an older moat's programs).
    pub fn refusals(&self) -> io::Result<Vec<RingEntry>> {
        let Some(ring) = &self.ring else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        let mut key = [0u8; prog::RING_KEY_SIZE];
        let mut prev: Option<[u8; prog::RING_KEY_SIZE]> = None;
        let mut v = [0u8; prog::RING_VALUE_SIZE];
        // Bounded: the map holds at most RING_ENTRIES keys, and a key evicted while
        // walking restarts the walk at most once more each.
        for _ in 0..RING_ENTRIES * 2 {
            if !bpf::map_next_key(ring.as_fd(), prev.as_ref().map(|k| &k[..]), &mut key)? {
                break;
            }
            if bpf::map_lookup(ring.as_fd(), &key, &mut v)? {
                out.push(RingEntry::parse(&key, &v));
            }
            prev = Some(key);
        }
        out.sort_by(|a, b| b.last_ns.cmp(&a.last_ns).then(a.key().cmp(&b.key())));
        out.dedup_by(|a, b| a.key() == b.key());
        Ok(out)
    }
}

/// Records a refusal the forwarder made (a name refused, an answer not admitted) in the
/// ring: `addr` the answer's address, or for a refused name none (the key then holds a
/// hash of the name). The forwarder is the only writer of its slots.
pub fn record_name(
    ring: BorrowedFd<'_>,
    slot: u32,
    name: &str,
    addr: Option<IpAddr>,
) -> io::Result<()> {
    let now = monotonic_ns();
    let mut e = RingEntry {
        addr: match addr {
            Some(a) => crate::policy::egress::key_addr(a).octets(),
            None => name_hash(name),
        },
        port: 0,
        protocol: 0,
        slot: u8::try_from(slot).unwrap_or(u8::MAX),
        first_ns: now,
        last_ns: now,
        count: 1,
        name: None,
    };
    let key = e.key();
    let mut v = [0u8; prog::RING_VALUE_SIZE];
    if bpf::map_lookup(ring, &key, &mut v)? {
        let old = RingEntry::parse(&key, &v);
        e.first_ns = old.first_ns;
        e.count = old.count.saturating_add(1);
    }
    let mut v = [0u8; prog::RING_VALUE_SIZE];
    v[..8].copy_from_slice(&e.first_ns.to_ne_bytes());
    v[8..16].copy_from_slice(&e.last_ns.to_ne_bytes());
    v[16..24].copy_from_slice(&e.count.to_ne_bytes());
    let n = name.len().min(prog::RING_NAME);
    v[24..24 + n].copy_from_slice(&name.as_bytes()[..n]);
    bpf::map_update(ring, &key, &v)
}

/// A refused name's place in the ring's address field: two FNV-1a hashes of it.
fn name_hash(name: &str) -> [u8; 16] {
    let fnv = |basis: u64| {
        name.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_ne_bytes());
    out[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_ne_bytes());
    out
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
            + u64::try_from(t.tv_nsec()).unwrap_or(0)
    })
}

/// Admits `addr` (a /128 entry) with `ranges` into the trie in force: the forwarder, for
/// an allowed name's answer.
pub fn admit(trie: BorrowedFd<'_>, addr: IpAddr, ranges: &[Range]) -> io::Result<()> {
    let key = key_bytes(crate::policy::egress::key_addr(addr), 128);
    bpf::map_update(trie, &key, &value_bytes(ranges))
}

/// Removes `addr`'s /128 entry, or puts back `statics`' own entry for it.
pub fn revoke(trie: BorrowedFd<'_>, addr: IpAddr, statics: &[Entry]) -> io::Result<()> {
    let k = crate::policy::egress::key_addr(addr);
    match statics.iter().find(|e| e.addr == k && e.len == 128) {
        Some(e) => bpf::map_update(trie, &key_bytes(k, 128), &value_bytes(&e.ranges)),
        None => bpf::map_delete(trie, &key_bytes(k, 128)).map(drop),
    }
}

/// Bumps a stats slot from user space (the forwarder is its slot's only writer).
pub fn count(stats: BorrowedFd<'_>, slot: u32) -> io::Result<()> {
    let k = slot.to_ne_bytes();
    let mut v = [0u8; 8];
    bpf::map_lookup(stats, &k, &mut v)?;
    let n = u64::from_ne_bytes(v).saturating_add(1);
    bpf::map_update(stats, &k, &n.to_ne_bytes())
}

/// Sets a gauge slot (the forwarder's, its only writer).
pub fn gauge(stats: BorrowedFd<'_>, slot: u32, n: u64) -> io::Result<()> {
    bpf::map_update(stats, &slot.to_ne_bytes(), &n.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_slots_are_distinct_and_in_the_map() {
        let mut slots: Vec<u32> = Hook::ALL.iter().map(|h| h.slot()).collect();
        slots.push(STATS_REFUSED_NAMES);
        slots.push(STATS_REFUSED_REBIND);
        slots.push(STATS_REFUSED_FULL);
        slots.push(STATS_HELD_NAMES);
        slots.push(STATS_HELD_ADDRS);
        assert!(slots.iter().all(|s| *s < STATS_SLOTS), "{slots:?}");
        assert_eq!(Hook::InetEgress.slot(), STATS_REFUSED_ECHO);
        let n = slots.len();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), n, "a slot counts two things");
    }

    #[test]
    fn both_forms_refuse_unjudged_sockets_at_creation() {
        assert!(prog::FIXED_HOOKS.contains(&Hook::SockCreate));
        assert!(Hook::ALL.contains(&Hook::SockCreate));
        assert_eq!(Hook::SockCreate.prog_type(), bpf::BPF_PROG_TYPE_CGROUP_SOCK);
        assert_eq!(
            Hook::SockCreate.attach_type(),
            bpf::BPF_CGROUP_INET_SOCK_CREATE
        );
        assert_ne!(prog::fixed_name(Hook::SockCreate), Hook::SockCreate.name());
    }

    #[test]
    fn each_form_has_its_own_packet_program() {
        assert_ne!(prog::fixed_name(Hook::InetEgress), Hook::InetEgress.name());
        assert!(Hook::ALL.contains(&Hook::InetEgress));
        assert_eq!(Hook::InetEgress.prog_type(), bpf::BPF_PROG_TYPE_CGROUP_SKB);
        assert!(Hook::SOCK_ADDR
            .iter()
            .all(|h| h.prog_type() == bpf::BPF_PROG_TYPE_CGROUP_SOCK_ADDR));
    }
}
