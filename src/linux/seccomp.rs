//! `linux.seccomp` → a classic BPF program (compiled by libseccomp in the parent, before
//! clone) → installed by the container init with seccomp(2).
//!
//! Compiling in the parent keeps libseccomp (and its allocations) out of the child, whose
//! only seccomp work is one syscall on a ready-made program.

use std::io::{Read, Seek};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::str::FromStr;

use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
    ScmpVersion,
};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};

use crate::spec;

// seccomp(2) `SECCOMP_FILTER_FLAG_*` bits, from linux/seccomp.h (libc lacks the newer ones).
const FLAG_TSYNC: u32 = 1;
const FLAG_LOG: u32 = 2;
const FLAG_SPEC_ALLOW: u32 = 4;
const FLAG_NEW_LISTENER: u32 = 8;
const FLAG_TSYNC_ESRCH: u32 = 16;
const FLAG_WAIT_KILLABLE_RECV: u32 = 32;

#[rustfmt::skip]
const FLAGS: &[&str] = &[
    "SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
    "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
];

#[rustfmt::skip]
const ACTIONS: &[&str] = &[
    "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP",
    "SCMP_ACT_ERRNO", "SCMP_ACT_TRACE", "SCMP_ACT_ALLOW", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY",
];

#[rustfmt::skip]
const OPERATORS: &[&str] = &[
    "SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT",
    "SCMP_CMP_MASKED_EQ",
];

// SCMP_ARCH_NATIVE is also accepted, but it is not a name a profile should need.
#[rustfmt::skip]
const ARCHS: &[&str] = &[
    "SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32", "SCMP_ARCH_ARM", "SCMP_ARCH_AARCH64",
    "SCMP_ARCH_LOONGARCH64", "SCMP_ARCH_M68K", "SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64",
    "SCMP_ARCH_MIPS64N32", "SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64", "SCMP_ARCH_MIPSEL64N32",
    "SCMP_ARCH_PPC", "SCMP_ARCH_PPC64", "SCMP_ARCH_PPC64LE", "SCMP_ARCH_S390", "SCMP_ARCH_S390X",
    "SCMP_ARCH_PARISC", "SCMP_ARCH_PARISC64", "SCMP_ARCH_RISCV64", "SCMP_ARCH_SHEB", "SCMP_ARCH_SH",
];

/// BPF_MAXINSNS: checked here so that an oversized profile fails `create` with a reason
/// instead of failing in the container init with a bare EINVAL.
const MAX_INSNS: usize = 4096;

/// Above this many rules libseccomp's binary-tree layout beats its linear one; below it
/// the linear one is as fast, and libseccomp <= 2.5.4 mishandles the tree with no rules.
const BINARY_TREE_MIN_RULES: usize = 32;

/// Part of the cache key of compiled programs: bumped whenever `compile` turns the same
/// profile into a different program (2: arguments narrowed to their declared width; 3: the
/// ENOSYS stub for syscalls newer than the profile, [`newer_than_profile`]), so a
/// cache written by an older moat of the same version is never used.
const COMPILER_REVISION: u32 = 3;

/// A compiled filter, ready to be installed in the child without further allocation.
#[derive(Debug, Clone)]
pub struct Filter {
    /// The BPF program as exported by libseccomp.
    pub prog: Vec<libc::sock_filter>,
    /// seccomp(2) `SECCOMP_FILTER_FLAG_*` bits (TSYNC, LOG, SPEC_ALLOW, NEW_LISTENER,
    /// TSYNC_ESRCH, WAIT_KILLABLE_RECV).
    pub flags: u32,
}

#[derive(Debug, thiserror::Error)]
#[error("linux.seccomp{field}: {reason}")]
pub struct SeccompError {
    /// JSON path below `linux.seccomp`, e.g. `.syscalls[3].action`.
    pub field: String,
    pub reason: String,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> SeccompError {
    SeccompError {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Action names accepted in `defaultAction` and `syscalls[].action`.
pub fn known_actions() -> &'static [&'static str] {
    ACTIONS
}

/// Architecture names accepted in `architectures`; the linked libseccomp may still lack
/// some of them (e.g. LoongArch before 2.6), which `compile` reports.
pub fn known_archs() -> &'static [&'static str] {
    ARCHS
}

/// Operator names accepted in `syscalls[].args[].op`.
pub fn known_operators() -> &'static [&'static str] {
    OPERATORS
}

/// Flag names accepted in `flags`.
pub fn known_flags() -> &'static [&'static str] {
    FLAGS
}

/// The architectures of [`known_archs`] that a filter can hold on this host: the linked
/// libseccomp must know them, and put them next to the native one (it refuses to mix
/// byte orders), as `compile` does.
pub fn supported_archs() -> Vec<&'static str> {
    known_archs()
        .iter()
        .copied()
        .filter(|name| {
            let Ok(arch) = ScmpArch::from_str(name) else {
                return false;
            };
            ScmpFilterContext::new(ScmpAction::Allow)
                .is_ok_and(|mut ctx| ctx.add_arch(arch).is_ok())
        })
        .collect()
}

/// The flags of [`known_flags`] that the running kernel accepts. WAIT_KILLABLE_RECV is
/// only valid with NEW_LISTENER, which moat adds when a listener is asked for.
pub fn supported_flags() -> Vec<&'static str> {
    FLAGS
        .iter()
        .copied()
        .filter(|name| {
            flag_bit(name).is_some_and(|bit| {
                let with = if bit == FLAG_WAIT_KILLABLE_RECV {
                    bit | FLAG_NEW_LISTENER
                } else {
                    bit
                };
                crate::linux::sys::seccomp_flags_known(with)
            })
        })
        .collect()
}

/// The version of the libseccomp moat is linked against at run time, e.g. "2.5.4".
pub fn libseccomp_version() -> String {
    ScmpVersion::current().map_or_else(|_| "unknown".into(), |v| v.to_string())
}

/// Maps an OCI action name; `errno_ret` is only meaningful for ERRNO and TRACE, and
/// defaults to EPERM for both, as runc does.
fn action(
    name: &str,
    errno_ret: Option<u32>,
    field: &str,
    errno_field: &str,
) -> Result<ScmpAction, SeccompError> {
    let ret = || {
        let v = errno_ret.unwrap_or(libc::EPERM as u32);
        // The kernel keeps only SECCOMP_RET_DATA (16 bits); refuse rather than truncate.
        u16::try_from(v).map_err(|_| err(errno_field, format!("{v} does not fit in 16 bits")))
    };
    Ok(match name {
        "SCMP_ACT_KILL" | "SCMP_ACT_KILL_THREAD" => ScmpAction::KillThread,
        "SCMP_ACT_KILL_PROCESS" => ScmpAction::KillProcess,
        "SCMP_ACT_TRAP" => ScmpAction::Trap,
        "SCMP_ACT_ERRNO" => ScmpAction::Errno(i32::from(ret()?)),
        "SCMP_ACT_TRACE" => ScmpAction::Trace(ret()?),
        "SCMP_ACT_ALLOW" => ScmpAction::Allow,
        "SCMP_ACT_LOG" => ScmpAction::Log,
        "SCMP_ACT_NOTIFY" => ScmpAction::Notify,
        _ => return Err(err(field, format!("unknown action {name:?}"))),
    })
}

/// The profile's `defaultAction` (with `defaultErrnoRet`).
fn default_action(seccomp: &spec::Seccomp) -> Result<ScmpAction, SeccompError> {
    action(
        &seccomp.default_action,
        seccomp.default_errno_ret,
        ".defaultAction",
        ".defaultErrnoRet",
    )
}

/// The action of the `syscalls[]` entry at `at` (with its `errnoRet`).
fn entry_action(call: &spec::SeccompSyscall, at: &str) -> Result<ScmpAction, SeccompError> {
    action(
        &call.action,
        call.errno_ret,
        &format!("{at}.action"),
        &format!("{at}.errnoRet"),
    )
}

fn flag_bit(name: &str) -> Option<u32> {
    Some(match name {
        "SECCOMP_FILTER_FLAG_TSYNC" => FLAG_TSYNC,
        "SECCOMP_FILTER_FLAG_LOG" => FLAG_LOG,
        "SECCOMP_FILTER_FLAG_SPEC_ALLOW" => FLAG_SPEC_ALLOW,
        "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV" => FLAG_WAIT_KILLABLE_RECV,
        _ => return None,
    })
}

/// Arguments the kernel declares narrower than a register, by syscall: one letter per
/// argument index, `i` for 32 bits (`int`, `unsigned int`, `pid_t`, `uid_t`, `gid_t`,
/// `key_t`, `clockid_t`, `u32`), `m` for `umode_t` (16 bits), `.` (or past the end) for a
/// whole register (pointers, `long`, `size_t`, `loff_t`, `unsigned long` flags).
///
/// Why it matters: seccomp sees the six registers as the caller left them, all 64 bits,
/// while the syscall's entry wrapper casts each register to its declared type, so the call
/// never sees the bits above. A rule comparing all 64 bits of an `int` argument is
/// dodged by setting a high bit: `ioctl(0, 1 << 32 | TIOCSTI, …)` is TIOCSTI to the tty
/// layer but not to `cmd == TIOCSTI`. [`narrow`] rewrites every comparison on these
/// arguments to look at their declared bits only, for every profile moat compiles (its
/// own and the engine's). Legacy `clone` reads its flags with `lower_32_bits()`; on s390x
/// its first argument is the stack pointer, so it is left out there. The layouts are
/// those of x86_64, x32, i386 and the generic (arm64, riscv64) syscall tables, with one
/// known gap: i386's legacy `setuid`/`chown` family takes 16-bit ids (`old_uid_t`), which
/// the table compares on 32 bits. Sorted by name (a unit test checks).
#[rustfmt::skip]
const NARROW_ARGS: &[(&str, &str)] = &[
    ("accept", "i"), ("accept4", "i..i"), ("access", ".i"), ("arch_prctl", "i"),
    ("bind", "i.i"), ("bpf", "i.i"), ("chmod", ".m"), ("chown", ".ii"),
    ("clock_adjtime", "i"), ("clock_settime", "i"),
    #[cfg(not(target_arch = "s390x"))]
    ("clone", "i"),
    ("close", "i"), ("close_range", "iii"), ("connect", "i.i"), ("copy_file_range", "i.i..i"),
    ("creat", ".m"), ("delete_module", ".i"), ("dup", "i"), ("dup2", "ii"), ("dup3", "iii"),
    ("epoll_create1", "i"), ("epoll_ctl", "iii"), ("epoll_pwait", "i.ii"),
    ("epoll_wait", "i.ii"), ("eventfd2", "ii"), ("execveat", "i...i"), ("exit", "i"),
    ("exit_group", "i"), ("faccessat", "i.i"), ("faccessat2", "i.ii"), ("fadvise64", "i..i"),
    ("fallocate", "ii"), ("fanotify_init", "ii"), ("fchdir", "i"), ("fchmod", "im"),
    ("fchmodat", "i.m"), ("fchmodat2", "i.mi"), ("fchown", "iii"), ("fchownat", "i.iii"),
    ("fcntl", "ii"), ("fdatasync", "i"), ("finit_module", "i.i"), ("flock", "ii"),
    ("fsconfig", "ii..i"), ("fsmount", "iii"), ("fsopen", ".i"), ("fspick", "i.i"),
    ("fstat", "i"), ("fsync", "i"), ("ftruncate", "i"), ("futex", ".ii..i"),
    ("getdents64", "i"), ("getpeername", "i"), ("getpgid", "i"), ("getpriority", "ii"),
    ("getrandom", "..i"), ("getsid", "i"), ("getsockname", "i"), ("getsockopt", "iii"),
    ("inotify_add_watch", "i.i"), ("inotify_init1", "i"), ("inotify_rm_watch", "ii"),
    ("io_uring_enter", "iiii"), ("io_uring_register", "ii.i"), ("io_uring_setup", "i"),
    ("ioctl", "ii"), ("ioprio_get", "ii"), ("ioprio_set", "iii"),
    ("kcmp", "iii"), ("kexec_file_load", "ii"), ("keyctl", "i"), ("kill", "ii"),
    ("landlock_add_rule", "ii.i"), ("landlock_create_ruleset", "..i"),
    ("landlock_restrict_self", "ii"), ("lchown", ".ii"), ("linkat", "i.i.i"), ("listen", "ii"),
    ("lseek", "i.i"), ("madvise", "..i"), ("membarrier", "iii"), ("memfd_create", ".i"),
    ("mkdir", ".m"), ("mkdirat", "i.m"), ("mknod", ".mi"), ("mknodat", "i.mi"),
    ("mlockall", "i"), ("mount_setattr", "i.i"), ("move_mount", "i.i.i"), ("mq_open", ".im"),
    ("msgctl", "ii"), ("msgget", "ii"), ("name_to_handle_at", "i...i"),
    ("newfstatat", "i..i"), ("open", ".im"), ("open_by_handle_at", "i.i"),
    ("open_tree", "i.i"), ("openat", "i.im"), ("perf_event_open", ".iii"),
    ("personality", "i"), ("pidfd_getfd", "iii"), ("pidfd_open", "ii"),
    ("pidfd_send_signal", "ii.i"), ("pipe2", ".i"), ("pkey_mprotect", "...i"),
    ("prctl", "i"), ("pread64", "i"), ("process_madvise", "i..ii"),
    ("process_mrelease", "ii"), ("process_vm_readv", "i"), ("process_vm_writev", "i"),
    ("pwrite64", "i"), ("quotactl", "i.i"), ("read", "i"), ("readlinkat", "i..i"),
    ("reboot", "iii"), ("recvfrom", "i..i"), ("recvmmsg", "i.ii"), ("recvmsg", "i.i"),
    ("renameat", "i.i"), ("renameat2", "i.i.i"), ("rt_sigaction", "i"),
    ("rt_sigprocmask", "i"), ("rt_sigqueueinfo", "ii"), ("rt_tgsigqueueinfo", "iii"),
    ("sched_getscheduler", "i"), ("sched_setaffinity", "ii"), ("sched_setattr", "i.i"),
    ("sched_setparam", "i"), ("sched_setscheduler", "ii"), ("seccomp", "ii"),
    ("semctl", "iii"), ("semget", "iii"), ("sendfile", "ii"), ("sendmmsg", "i.ii"),
    ("sendmsg", "i.i"), ("sendto", "i..i.i"), ("setdomainname", ".i"), ("setfsgid", "i"),
    ("setfsuid", "i"), ("setgid", "i"), ("setgroups", "i"), ("sethostname", ".i"),
    ("setns", "ii"), ("setpgid", "ii"), ("setpriority", "iii"), ("setregid", "ii"),
    ("setresgid", "iii"), ("setresuid", "iii"), ("setreuid", "ii"), ("setsockopt", "iii.i"),
    ("setuid", "i"), ("shmat", "i.i"), ("shmctl", "ii"), ("shmget", "i.i"),
    ("shutdown", "ii"), ("signalfd4", "i..i"), ("socket", "iii"), ("socketcall", "i"),
    ("socketpair", "iii"), ("splice", "i.i..i"), ("statx", "i.ii"), ("swapon", ".i"),
    ("symlinkat", ".i"), ("sync_file_range", "i..i"), ("syslog", "i.i"), ("tee", "ii.i"),
    ("tgkill", "iii"), ("timer_create", "i"), ("timerfd_create", "ii"), ("tkill", "ii"),
    ("umask", "i"), ("umount2", ".i"), ("unlinkat", "i.i"), ("userfaultfd", "i"),
    ("utimensat", "i..i"), ("vmsplice", "i..i"), ("wait4", "i.i"), ("waitid", "ii.i"),
    ("write", "i"),
];

/// How many bits of argument `index` of `name` the kernel reads (64: all of them).
fn arg_bits(name: &str, index: u32) -> u32 {
    let Ok(i) = NARROW_ARGS.binary_search_by(|(n, _)| n.cmp(&name)) else {
        return 64;
    };
    match NARROW_ARGS[i].1.as_bytes().get(index as usize) {
        Some(b'i') => 32,
        Some(b'm') => 16,
        _ => 64,
    }
}

/// One rule may become this many after [`narrow`] (the product of each argument's
/// alternatives); beyond it the profile is refused rather than compiled into thousands.
const MAX_NARROWED_RULES: usize = 256;

/// `[lo, hi]` (within `0..=top`, `top` = 2^bits - 1) as aligned blocks `(mask, value)`:
/// `x` is in the range exactly when `x & mask == value` for one of them. At most about
/// 2·bits blocks.
fn blocks(mut lo: u64, hi: u64, top: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while lo <= hi {
        let mut size = if lo == 0 {
            top + 1
        } else {
            1u64 << lo.trailing_zeros()
        };
        while lo + (size - 1) > hi {
            size >>= 1;
        }
        out.push((top & !(size - 1), lo));
        lo += size;
    }
    out
}

/// One comparison of a rule as compiled: argument `index` against `datum` (for
/// `MaskedEqual(mask)`, `arg & mask == datum`), all 64 bits as libseccomp compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgCmp {
    pub index: u32,
    pub op: ScmpCompareOp,
    pub datum: u64,
}

impl ArgCmp {
    fn scmp(&self) -> ScmpArgCompare {
        ScmpArgCompare::new(self.index, self.op, self.datum)
    }

    /// The comparison as an OCI `args[]` entry (the mask in `value`, the expected value
    /// in `valueTwo` for `SCMP_CMP_MASKED_EQ`).
    pub fn oci(&self) -> spec::SeccompArg {
        let (op, value, value_two) = match self.op {
            ScmpCompareOp::NotEqual => ("SCMP_CMP_NE", self.datum, 0),
            ScmpCompareOp::Less => ("SCMP_CMP_LT", self.datum, 0),
            ScmpCompareOp::LessOrEqual => ("SCMP_CMP_LE", self.datum, 0),
            ScmpCompareOp::Equal => ("SCMP_CMP_EQ", self.datum, 0),
            ScmpCompareOp::GreaterEqual => ("SCMP_CMP_GE", self.datum, 0),
            ScmpCompareOp::Greater => ("SCMP_CMP_GT", self.datum, 0),
            ScmpCompareOp::MaskedEqual(mask) => ("SCMP_CMP_MASKED_EQ", mask, self.datum),
            // Non-exhaustive upstream; `conditions` only produces the seven above.
            _ => unreachable!("an operator `conditions` never produces"),
        };
        spec::SeccompArg {
            index: self.index,
            value,
            value_two,
            op: op.into(),
        }
    }
}

/// One parsed `args[]` entry of a `syscalls[]` entry.
#[derive(Clone, Copy)]
struct Cond {
    /// Position in `args[]`, for error messages.
    k: usize,
    index: u32,
    op: ScmpCompareOp,
    datum: u64,
}

/// `c` on an argument the kernel reads as `bits` bits, as alternatives (any one matches)
/// that look at those bits only. libseccomp compares all 64 bits and has no narrower
/// comparison, so every operator becomes `SCMP_CMP_MASKED_EQ` with a mask below 2^bits:
/// EQ is one mask of all ones; MASKED_EQ keeps its mask cut to the width; NE, LT, LE, GT
/// and GE become the aligned blocks of the values they accept (unsigned, as libseccomp
/// compares). An empty list: the condition can never hold. A value (or MASKED_EQ's
/// expected value) must fit the width, or be a negative number of that width written
/// sign-extended (`-1`, `AT_FDCWD`); anything else names a value the call can never see,
/// and is refused.
fn narrow(c: Cond, bits: u32, name: &str, at: &str) -> Result<Vec<ArgCmp>, SeccompError> {
    if bits >= 64 {
        return Ok(vec![ArgCmp {
            index: c.index,
            op: c.op,
            datum: c.datum,
        }]);
    }
    let top = (1u64 << bits) - 1;
    let field = match c.op {
        ScmpCompareOp::MaskedEqual(_) => format!("{at}.args[{}].valueTwo", c.k),
        _ => format!("{at}.args[{}].value", c.k),
    };
    let sign = 1u64 << (bits - 1);
    let v = if c.datum <= top || (c.datum | top == u64::MAX && c.datum & sign != 0) {
        c.datum & top
    } else {
        return Err(err(
            field,
            format!(
                "{:#x} does not fit argument {} of {name}, which the kernel reads as {bits} bits",
                c.datum, c.index
            ),
        ));
    };
    let masked = |(mask, value): (u64, u64)| ArgCmp {
        index: c.index,
        op: ScmpCompareOp::MaskedEqual(mask),
        datum: value,
    };
    let range =
        |lo: u64, hi: u64| -> Vec<ArgCmp> { blocks(lo, hi, top).into_iter().map(masked).collect() };
    Ok(match c.op {
        ScmpCompareOp::MaskedEqual(mask) => vec![masked((mask & top, v))],
        ScmpCompareOp::Equal => vec![masked((top, v))],
        ScmpCompareOp::NotEqual => {
            let mut r: Vec<_> = if v > 0 { range(0, v - 1) } else { Vec::new() };
            if v < top {
                r.extend(range(v + 1, top));
            }
            r
        }
        ScmpCompareOp::Less if v == 0 => Vec::new(),
        ScmpCompareOp::Less => range(0, v - 1),
        ScmpCompareOp::LessOrEqual => range(0, v),
        ScmpCompareOp::Greater if v == top => Vec::new(),
        ScmpCompareOp::Greater => range(v + 1, top),
        ScmpCompareOp::GreaterEqual => range(v, top),
        // The enum is non-exhaustive; `conditions` only produces the seven above.
        op => {
            return Err(err(
                format!("{at}.args[{}].op", c.k),
                format!("{op:?} cannot be narrowed"),
            ))
        }
    })
}

/// The argument conditions of one `syscalls[]` entry, and whether they must become one
/// rule each (OR) rather than one rule together (AND): libseccomp cannot AND two
/// conditions on the same argument, so runc falls back to OR for such entries and
/// profiles are written against that behaviour.
fn conditions(args: &[spec::SeccompArg], at: &str) -> Result<(Vec<Cond>, bool), SeccompError> {
    let mut seen = [0u8; 6];
    let mut conds = Vec::with_capacity(args.len());
    for (k, a) in args.iter().enumerate() {
        let idx = usize::try_from(a.index).ok().filter(|&i| i < seen.len());
        let Some(idx) = idx else {
            return Err(err(
                format!("{at}.args[{k}].index"),
                format!("{} is not a syscall argument index (0-5)", a.index),
            ));
        };
        seen[idx] = seen[idx].saturating_add(1);
        let op = match ScmpCompareOp::from_str(&a.op) {
            // OCI puts the mask in `value` and the expected value in `valueTwo`.
            Ok(ScmpCompareOp::MaskedEqual(_)) => ScmpCompareOp::MaskedEqual(a.value),
            Ok(op) => op,
            Err(_) => {
                return Err(err(
                    format!("{at}.args[{k}].op"),
                    format!("unknown operator {:?}", a.op),
                ))
            }
        };
        let datum = match op {
            ScmpCompareOp::MaskedEqual(_) => a.value_two,
            _ => a.value,
        };
        conds.push(Cond {
            k,
            index: a.index,
            op,
            datum,
        });
    }
    Ok((conds, seen.iter().any(|&n| n > 1)))
}

/// The libseccomp rules (each a list of conditions that must all hold) for one name of
/// an entry with `conds`, narrowed to the argument widths of `name`. No conditions: one
/// unconditional rule. No rules: the entry can never match this syscall.
fn rules_for(
    conds: &[Cond],
    separate: bool,
    name: &str,
    at: &str,
) -> Result<Vec<Vec<ArgCmp>>, SeccompError> {
    if conds.is_empty() {
        return Ok(vec![Vec::new()]);
    }
    let mut alts = Vec::with_capacity(conds.len());
    for &c in conds {
        alts.push(narrow(c, arg_bits(name, c.index), name, at)?);
    }
    if separate {
        return Ok(alts.into_iter().flatten().map(|c| vec![c]).collect());
    }
    let mut rules = vec![Vec::new()];
    for alt in alts {
        if rules.len() * alt.len() > MAX_NARROWED_RULES {
            return Err(err(
                format!("{at}.args"),
                format!(
                    "comparing the {name} arguments the kernel reads as 32 or 16 bits takes more than {MAX_NARROWED_RULES} rules"
                ),
            ));
        }
        rules = rules
            .iter()
            .flat_map(|r| {
                alt.iter().map(move |c| {
                    let mut r = r.clone();
                    r.push(*c);
                    r
                })
            })
            .collect();
    }
    Ok(rules)
}

/// The architectures of the filter: the native one first (a container can always make
/// native syscalls), then the listed ones.
fn add_archs(
    ctx: &mut ScmpFilterContext,
    names: &[String],
) -> Result<Vec<(ScmpArch, String)>, SeccompError> {
    let native = ScmpArch::native();
    let mut archs = vec![(native, format!("{} (native)", std::env::consts::ARCH))];
    for (i, name) in names.iter().enumerate() {
        let field = format!(".architectures[{i}]");
        let arch = ScmpArch::from_str(name)
            .map_err(|_| err(&field, format!("unknown architecture {name:?}")))?;
        let arch = if arch == ScmpArch::Native {
            native
        } else {
            arch
        };
        if archs.iter().any(|(a, _)| *a == arch) {
            continue;
        }
        ctx.add_arch(arch).map_err(|e| {
            let v = libseccomp_version();
            err(&field, format!("libseccomp {v} cannot add {name}: {e}"))
        })?;
        archs.push((arch, name.clone()));
    }
    Ok(archs)
}

/// Resolves a syscall for a rule, or None when no architecture of the filter has it.
/// The native number may be one of libseccomp's negative pseudo-numbers (a name that only
/// exists on another architecture, e.g. `socketcall` on x86_64); libseccomp translates it
/// per architecture, so such a name still matters when that architecture is listed.
fn resolve(name: &str, archs: &[(ScmpArch, String)]) -> Option<ScmpSyscall> {
    let nr = ScmpSyscall::from_name(name).ok()?;
    let known = archs.iter().any(|&(arch, _)| {
        ScmpSyscall::from_name_by_arch(name, arch).is_ok_and(|s| s.as_raw_syscall() >= 0)
    });
    known.then_some(nr)
}

/// A syscall's rules from one `syscalls[]` entry, as added to the filter.
struct Added<'a> {
    nr: i32,
    entry: usize,
    name: &'a str,
    action: ScmpAction,
    conditional: bool,
}

/// libseccomp keeps only the unconditional rule of a syscall that also has conditional
/// rules with another action, whichever was added first, and says nothing: `ioctl`
/// allowed outright beside `ioctl` refused for TIOCSTI allows TIOCSTI. Such a profile does
/// not do what it says; runc compiles it the same way, so moat compiles it too and names
/// each such pair in a warning.
fn overridden(added: &[Added<'_>]) -> Vec<String> {
    let mut out = Vec::new();
    for u in added.iter().filter(|a| !a.conditional) {
        let lost = added
            .iter()
            .filter(|c| c.conditional && c.nr == u.nr && c.action != u.action);
        for c in lost {
            out.push(format!(
                "linux.seccomp.syscalls[{}]: libseccomp drops this entry's rules for {}: \
                 syscalls[{}] gives {} {:?} whatever the arguments",
                c.entry, c.name, u.entry, u.name, u.action
            ));
        }
    }
    out
}

/// The syscalls moat's init (or an exec'd process) makes after it loads a filter with
/// `SCMP_ACT_NOTIFY` rules and before the listener has left it for the parent, which hands
/// it to the agent at once (`attrs::Attrs::apply`): a notification then reaches nobody,
/// and the process (and `create`) would wait forever. Notifying on them is refused when
/// the container is planned, as runc refuses `write`, the call its init hands the
/// listener over with. After the handover every syscall may be notified (the agent
/// answers `execve`, `openat`, `read`, `close` of the init). Between the load and the
/// handover: the `sendmsg` carrying the listener, whose buffers the allocator may map;
/// `write` as runc (moat does not write there, but profiles made for runc are refused
/// alike).
const BEFORE_HANDOVER: &[&str] = &["brk", "mmap", "mremap", "munmap", "sendmsg", "write"];

/// Refuses `SCMP_ACT_NOTIFY` on a syscall the init makes before the listener is handed
/// over ([`BEFORE_HANDOVER`]); `floor` when the deny floor is loaded after the profile (a
/// `seccomp` call in between).
pub fn refuse_notify_before_handover(
    seccomp: &spec::Seccomp,
    floor: bool,
) -> Result<(), SeccompError> {
    let needed = |name: &str| BEFORE_HANDOVER.contains(&name) || (floor && name == "seccomp");
    for (i, call) in seccomp.syscalls.iter().enumerate() {
        if call.action != "SCMP_ACT_NOTIFY" {
            continue;
        }
        if let Some((j, name)) = call.names.iter().enumerate().find(|(_, n)| needed(n)) {
            return Err(err(
                format!(".syscalls[{i}].names[{j}]"),
                format!(
                    "SCMP_ACT_NOTIFY cannot be used for the {name} syscall: moat's init makes it \
                     after loading the filter, before the seccomp agent has the listener"
                ),
            ));
        }
    }
    Ok(())
}

/// Compiles `linux.seccomp`. Syscall names unknown on this architecture are skipped with
/// a warning; unknown actions, operators, architectures or flags are errors naming the field.
pub fn compile(seccomp: &spec::Seccomp) -> Result<Filter, SeccompError> {
    let default = default_action(seccomp)?;
    let lib = |field: &str, e: libseccomp::error::SeccompError| {
        err(field, format!("libseccomp {}: {e}", libseccomp_version()))
    };
    let mut ctx = ScmpFilterContext::new(default).map_err(|e| lib(".defaultAction", e))?;
    // Only the BPF is exported, so libseccomp never loads it; clearing NNP anyway keeps a
    // future `load()` from setting no_new_privs behind the caller's back.
    ctx.set_ctl_nnp(false).map_err(|e| lib("", e))?;
    let archs = add_archs(&mut ctx, &seccomp.architectures)?;

    let mut flags = 0;
    for (i, name) in seccomp.flags.iter().enumerate() {
        flags |= flag_bit(name)
            .ok_or_else(|| err(format!(".flags[{i}]"), format!("unknown flag {name:?}")))?;
    }

    if default == ScmpAction::Notify {
        // Every syscall the init makes after loading the filter would wait for an agent
        // that does not have the listener yet (see `BEFORE_HANDOVER`); runc refuses it too.
        return Err(err(
            ".defaultAction",
            "SCMP_ACT_NOTIFY cannot be used as the default action: moat's init makes syscalls \
             after loading the filter, before the seccomp agent has the listener",
        ));
    }
    let mut notify = false;
    let mut rules = 0;
    let mut unknown = Vec::new();
    let mut added_rules = Vec::new();
    for (i, call) in seccomp.syscalls.iter().enumerate() {
        let at = format!(".syscalls[{i}]");
        let act = entry_action(call, &at)?;
        let (conds, separate) = conditions(&call.args, &at)?;
        if call.names.is_empty() {
            return Err(err(
                format!("{at}.names"),
                "at least one syscall name is needed",
            ));
        }
        // libseccomp refuses rules whose action is the default one; they are no-ops.
        if act == default {
            continue;
        }
        notify |= act == ScmpAction::Notify;
        for (j, name) in call.names.iter().enumerate() {
            let Some(nr) = resolve(name, &archs) else {
                unknown.push(name.as_str());
                continue;
            };
            let narrowed = rules_for(&conds, separate, name, &at)?;
            if let Some(first) = narrowed.first() {
                added_rules.push(Added {
                    nr: nr.as_raw_syscall(),
                    entry: i,
                    name,
                    action: act,
                    conditional: !first.is_empty(),
                });
            }
            for rule in narrowed {
                let added = if rule.is_empty() {
                    ctx.add_rule(act, nr).map(drop)
                } else {
                    let rule: Vec<ScmpArgCompare> = rule.iter().map(ArgCmp::scmp).collect();
                    ctx.add_rule_conditional(act, nr, &rule).map(drop)
                };
                added.map_err(|e| lib(&format!("{at}.names[{j}]"), e))?;
                rules += 1;
            }
        }
    }
    for msg in overridden(&added_rules) {
        crate::log::warn(&msg);
    }
    if !unknown.is_empty() {
        // One line per container, not one per name: stock profiles list dozens of
        // syscalls that only exist on other architectures or newer kernels.
        let on: Vec<&str> = archs.iter().map(|(_, n)| n.as_str()).collect();
        crate::log::debug(&format!(
            "seccomp: skipping syscalls that libseccomp {} does not know on {}: {}",
            libseccomp_version(),
            on.join(", "),
            unknown.join(", ")
        ));
    }

    if notify {
        if seccomp.listener_path.as_deref().unwrap_or("").is_empty() {
            return Err(err(
                ".listenerPath",
                "SCMP_ACT_NOTIFY needs a listenerPath to send the listener fd to",
            ));
        }
        flags |= FLAG_NEW_LISTENER;
        // The kernel refuses TSYNC with NEW_LISTENER (both would report through the
        // return value) unless TSYNC failures are reported as ESRCH instead.
        if flags & FLAG_TSYNC != 0 {
            flags |= FLAG_TSYNC_ESRCH;
        }
    } else {
        // WAIT_KILLABLE_RECV is about notifications and the kernel rejects it alone.
        flags &= !FLAG_WAIT_KILLABLE_RECV;
    }
    if rules > BINARY_TREE_MIN_RULES {
        // Only a speed-up: an older libseccomp without it still builds a correct filter.
        let _ = ctx.set_ctl_optimize(2);
    }
    let mut prog = export(&ctx)?;
    // The stub leaves the accumulator holding the syscall number: libseccomp's program
    // must start by loading the arch itself, as it does.
    let loads_arch = prog.first().is_some_and(|i| {
        u32::from(i.code) == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS && i.k == 4
    });
    if let Some(stub) = newer_than_profile(seccomp, default).filter(|_| loads_arch) {
        prog.splice(0..0, stub);
        if prog.len() > MAX_INSNS {
            return Err(err(
                ".syscalls",
                format!(
                    "the filter has {} instructions; the kernel accepts at most {MAX_INSNS}",
                    prog.len()
                ),
            ));
        }
    }
    Ok(Filter { prog, flags })
}

/// `AUDIT_ARCH_*` of the native architecture, as the kernel puts it in `seccomp_data.arch`.
#[cfg(target_arch = "x86_64")]
const NATIVE_AUDIT_ARCH: Option<u32> = Some(0xc000_003e);
#[cfg(target_arch = "aarch64")]
const NATIVE_AUDIT_ARCH: Option<u32> = Some(0xc000_00b7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_AUDIT_ARCH: Option<u32> = None;

/// x32 syscalls enter as x86_64 ones with this bit set in their number; they are left to
/// libseccomp's program, which knows whether the profile lists x32.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The stub put before libseccomp's program when the default action denies: a native
/// syscall numbered above every syscall the profile names (one newer than the profile)
/// gets ENOSYS instead of the default action, so the C library falls back to the older
/// call it has for it (clone3 → clone, faccessat2 → faccessat, …) rather than failing
/// with EPERM or being killed; what runc does. A syscall the profile names is at or below
/// that number and keeps its action. The stub only ever refuses (it never allows), so it
/// cannot open what the profile closes. None when the default allows (ALLOW, LOG, TRACE:
/// new syscalls are allowed anyway), is ENOSYS already (moat's RESTRICTED profile), or the
/// profile names no native syscall.
fn newer_than_profile(
    seccomp: &spec::Seccomp,
    default: ScmpAction,
) -> Option<Vec<libc::sock_filter>> {
    const ENOSYS: i32 = libc::ENOSYS;
    let arch = NATIVE_AUDIT_ARCH?;
    let last = enosys_above(seccomp, default)?;
    // Classic BPF, jumps relative to the next instruction; seccomp_data: nr at 0, arch at 4.
    // BPF opcodes are 16 bits; libc spells them as u32.
    let insn = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: u16::try_from(code).expect("a BPF opcode fits in 16 bits"),
        jt,
        jf,
        k,
    };
    let ld = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    let (jeq, jgt, jset) = (
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K,
        libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K,
    );
    let x32 = cfg!(target_arch = "x86_64");
    // Instructions after the arch test: [ld nr, (jset x32,) jgt last, ret ENOSYS].
    let rest = if x32 { 4 } else { 3 };
    let mut stub = vec![
        insn(ld, 0, 0, 4),
        insn(jeq, 0, rest, arch),
        insn(ld, 0, 0, 0),
    ];
    if x32 {
        stub.push(insn(jset, 2, 0, X32_SYSCALL_BIT));
    }
    stub.push(insn(jgt, 0, 1, last));
    stub.push(insn(
        libc::BPF_RET | libc::BPF_K,
        0,
        0,
        libc::SECCOMP_RET_ERRNO | ENOSYS as u32,
    ));
    Some(stub)
}

/// The bound of [`newer_than_profile`]'s stub: the highest native syscall the profile
/// names, when the default action refuses with something other than ENOSYS.
fn enosys_above(seccomp: &spec::Seccomp, default: ScmpAction) -> Option<u32> {
    match default {
        ScmpAction::Allow | ScmpAction::Log | ScmpAction::Trace(_) => return None,
        ScmpAction::Errno(libc::ENOSYS) => return None,
        _ => {}
    }
    let native = ScmpArch::native();
    seccomp
        .syscalls
        .iter()
        .flat_map(|c| &c.names)
        .filter_map(|n| ScmpSyscall::from_name_by_arch(n, native).ok())
        .map(ScmpSyscall::as_raw_syscall)
        .max()
        .and_then(|nr| u32::try_from(nr).ok())
}

/// What [`compile`]'s program does with each native system call, for checking another
/// conversion of the same profile against it (runsc's, in `gvisor::seccomp_exec`).
#[derive(Debug)]
pub struct NativeRules {
    pub default: ScmpAction,
    /// Each native syscall number a rule names with an action other than the default:
    /// its rules in profile order, each an action and the comparisons that must all hold
    /// for it (none: always).
    pub named: std::collections::BTreeMap<u32, Vec<(ScmpAction, Vec<ArgCmp>)>>,
    /// Native syscalls numbered above this one get ENOSYS ([`newer_than_profile`]).
    pub enosys_above: Option<u32>,
}

/// [`NativeRules`] of a profile [`compile`] accepts (its errors otherwise).
pub fn native_rules(seccomp: &spec::Seccomp) -> Result<NativeRules, SeccompError> {
    let default = default_action(seccomp)?;
    let native = ScmpArch::native();
    let mut named = std::collections::BTreeMap::<u32, Vec<_>>::new();
    for (i, call) in seccomp.syscalls.iter().enumerate() {
        let at = format!(".syscalls[{i}]");
        let act = entry_action(call, &at)?;
        if act == default {
            continue;
        }
        let (conds, separate) = conditions(&call.args, &at)?;
        for name in &call.names {
            let Some(nr) = ScmpSyscall::from_name_by_arch(name, native)
                .ok()
                .and_then(|s| u32::try_from(s.as_raw_syscall()).ok())
            else {
                continue;
            };
            for rule in rules_for(&conds, separate, name, &at)? {
                named.entry(nr).or_default().push((act, rule));
            }
        }
    }
    Ok(NativeRules {
        default,
        named,
        enosys_above: enosys_above(seccomp, default),
    })
}

/// Exports through a memfd: `seccomp_export_bpf_mem` only exists from libseccomp 2.6, and
/// a pipe could fill up before the export returns.
fn export(ctx: &ScmpFilterContext) -> Result<Vec<libc::sock_filter>, SeccompError> {
    let io = |e: std::io::Error| err("", format!("cannot export the BPF program: {e}"));
    let fd =
        memfd_create(c"moat-seccomp", MemFdCreateFlag::MFD_CLOEXEC).map_err(|e| io(e.into()))?;
    ctx.export_bpf(&fd)
        .map_err(|e| err("", format!("libseccomp cannot export the filter: {e}")))?;
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    file.rewind().map_err(io)?;
    file.read_to_end(&mut bytes).map_err(io)?;
    let insn = std::mem::size_of::<libc::sock_filter>();
    if bytes.len() % insn != 0 || bytes.is_empty() {
        return Err(err(
            "",
            format!("libseccomp exported {} bytes", bytes.len()),
        ));
    }
    if bytes.len() / insn > MAX_INSNS {
        return Err(err(
            ".syscalls",
            format!(
                "the filter has {} instructions; the kernel accepts at most {MAX_INSNS}",
                bytes.len() / insn
            ),
        ));
    }
    // struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; } in host byte order.
    Ok(bytes
        .chunks_exact(insn)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// A deny floor the policy hands over (`policy::FLOOR_PROFILE`, moat's
/// `seccomp-profiles/floor.json`), compiled. The policy owns the profile; this module only
/// compiles what it is given.
pub fn floor(profile: &str, cache: Option<&Path>) -> Result<Filter, SeccompError> {
    let s: spec::Seccomp = serde_json::from_str(profile).map_err(|e| SeccompError {
        field: " (floor.json)".into(),
        reason: e.to_string(),
    })?;
    compile_cached(&s, Some(profile.as_bytes()), cache)
}

/// [`compile`] through a cache of compiled programs under `cache` (the state root's
/// `@cache/seccomp`; `@` cannot appear in a container id): compiling a large profile costs milliseconds of libseccomp work on
/// every create, and engines send the same profile each time. An entry is keyed by the
/// profile's canonical JSON plus the libseccomp and moat versions, stored next to the
/// program and compared byte for byte on use, so a hash collision can never hand a
/// container someone else's filter. Any cache failure falls back to compiling.
///
/// `source`: the JSON `seccomp` was parsed from, when the caller knows it is exactly that
/// (moat's built-in profiles): the key is then those bytes, and the profile need not be
/// serialised again (a cold serialisation of the restricted profile was ~0.2 ms of every
/// create). The two kinds of key cannot meet: each starts with its own tag.
pub fn compile_cached(
    seccomp: &spec::Seccomp,
    source: Option<&[u8]>,
    cache: Option<&Path>,
) -> Result<Filter, SeccompError> {
    use std::hash::{Hash, Hasher};
    let Some(dir) = cache else {
        return compile(seccomp);
    };
    let mut key = match source {
        Some(src) => [b"source\n".as_slice(), src].concat(),
        None => {
            let mut k = b"json\n".to_vec();
            let _ = serde_json::to_writer(&mut k, seccomp);
            k
        }
    };
    key.extend_from_slice(
        format!(
            "\n{}\n{}\n{COMPILER_REVISION}",
            libseccomp_version(),
            env!("CARGO_PKG_VERSION")
        )
        .as_bytes(),
    );
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    let name = format!("{:016x}", h.finish());
    let (key_path, bpf_path) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.bpf")),
    );
    if std::fs::read(&key_path).is_ok_and(|k| k == key) {
        if let Some(f) = std::fs::read(&bpf_path)
            .ok()
            .and_then(|b| Filter::from_bytes(&b))
        {
            return Ok(f);
        }
    }
    let filter = compile(seccomp)?;
    let _ = store(dir, &name, &key, &filter.to_bytes());
    Ok(filter)
}

fn store(dir: &Path, name: &str, key: &[u8], bpf: &[u8]) -> std::io::Result<()> {
    // Program first, key last: a reader only trusts a program whose key matches.
    crate::state::write_cache_file(dir, &format!("{name}.bpf"), bpf)?;
    crate::state::write_cache_file(dir, &format!("{name}.key"), key)
}

impl Filter {
    /// A flat encoding (flags, then 8 bytes per instruction) for the state directory, so
    /// `exec` installs exactly the program the init got without compiling it again.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + self.prog.len() * 8);
        b.extend_from_slice(&self.flags.to_le_bytes());
        for i in &self.prog {
            b.extend_from_slice(&i.code.to_le_bytes());
            b.push(i.jt);
            b.push(i.jf);
            b.extend_from_slice(&i.k.to_le_bytes());
        }
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<Filter> {
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(8) {
            return None;
        }
        let flags = u32::from_le_bytes(b[..4].try_into().ok()?);
        let prog = b[4..]
            .chunks_exact(8)
            .map(|c| libc::sock_filter {
                code: u16::from_le_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Some(Filter { prog, flags })
    }
}

/// Installs the filter in the calling thread; returns the listener fd when the filter has
/// `SCMP_ACT_NOTIFY` rules.
pub fn install(filter: &Filter) -> std::io::Result<Option<OwnedFd>> {
    crate::linux::sys::seccomp_set_filter(filter.flags, &filter.prog)
}

/// Debian's `libseccomp.a` is built against glibc with `_FORTIFY_SOURCE`, and its text
/// (PFC) export, which moat never calls, references glibc's `__fprintf_chk`. musl has no
/// such symbol; this one satisfies the static link and aborts if ever reached.
#[cfg(target_env = "musl")]
#[allow(unsafe_code)] // `no_mangle`: the symbol the C library links against.
#[no_mangle]
extern "C" fn __fprintf_chk() -> std::ffi::c_int {
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::sys::{self, Forked};
    use nix::errno::Errno;
    use nix::sys::signal::Signal;
    use nix::sys::wait::{waitpid, WaitStatus};
    use serde_json::{json, Value};
    use std::os::fd::AsRawFd;

    fn parse(v: Value) -> spec::Seccomp {
        serde_json::from_value(v).expect("valid linux.seccomp")
    }

    fn compiled(v: Value) -> Filter {
        compile(&parse(v)).expect("compiles")
    }

    fn words(v: Value) -> Vec<(u16, u8, u8, u32)> {
        compiled(v)
            .prog
            .iter()
            .map(|i| (i.code, i.jt, i.jf, i.k))
            .collect()
    }

    fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    /// Installs `f` in a forked child (after setting no_new_privs, as an unprivileged
    /// container init would), runs `body` there and returns how the child ended. The child
    /// makes syscalls only, no allocation: other test threads may hold locks at fork time.
    fn run_filtered(f: &Filter, body: impl FnOnce(Option<OwnedFd>) -> i32) -> WaitStatus {
        match sys::clone_fork(0, None).expect("fork") {
            Forked::Child => sys::exit_now(match sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1) {
                Err(_) => 10,
                Ok(_) => match install(f) {
                    Err(e) => 100 + e.raw_os_error().unwrap_or(0).min(100),
                    Ok(listener) => body(listener),
                },
            }),
            Forked::Parent(pid) => waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap(),
        }
    }

    fn exited_ok(status: WaitStatus) {
        assert_eq!(status, WaitStatus::Exited(status.pid().unwrap(), 0));
    }

    #[test]
    fn errors_name_the_field() {
        let ok = json!({"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"});
        let mut cases = vec![
            (json!({"defaultAction": "SCMP_ACT_BOGUS"}), ".defaultAction"),
            (json!({"defaultErrnoRet": 70000}), ".defaultErrnoRet"),
            (
                json!({"architectures": ["SCMP_ARCH_X86", "VAX"]}),
                ".architectures[1]",
            ),
            (json!({"flags": ["SECCOMP_FILTER_FLAG_NO"]}), ".flags[0]"),
        ];
        let eq = json!({"index": 0, "value": 1, "op": "SCMP_CMP_EQ"});
        let last_call = [
            (json!({"action": "SCMP_ACT_MAYBE"}), ".syscalls[3].action"),
            (json!({"errnoRet": 65536}), ".syscalls[3].errnoRet"),
            (json!({"names": []}), ".syscalls[3].names"),
            (json!({"action": "SCMP_ACT_NOTIFY"}), ".listenerPath"),
            (
                json!({"args": [eq, {"index": 1, "op": "EQ", "value": 1}]}),
                ".syscalls[3].args[1].op",
            ),
            (
                json!({"args": [{"index": 6, "op": "SCMP_CMP_EQ", "value": 1}]}),
                ".syscalls[3].args[0].index",
            ),
        ];
        for (edit, field) in last_call {
            let mut call = ok.clone();
            for (k, v) in edit.as_object().unwrap() {
                call[k] = v.clone();
            }
            cases.push((json!({"syscalls": [ok, ok, ok, call]}), field));
        }
        let base = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [ok, ok, ok, ok]});
        compiled(base.clone());
        for (edit, field) in cases {
            let mut p = base.clone();
            for (k, v) in edit.as_object().unwrap() {
                p[k] = v.clone();
            }
            let e = compile(&parse(p)).expect_err(field);
            assert_eq!(e.field, field, "{e}");
            assert!(
                e.to_string()
                    .starts_with(&format!("linux.seccomp{field}: ")),
                "{e}"
            );
        }
    }

    #[test]
    fn unknown_syscalls_are_skipped() {
        let with = |archs: &[&str], names: &[&str]| {
            let mut v = json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": archs});
            if !names.is_empty() {
                v["syscalls"] = json!([{"names": names, "action": "SCMP_ACT_ERRNO"}]);
            }
            words(v)
        };
        assert_ne!(with(&[], &["getppid"]), with(&[], &[]));
        let unknown = ["getppid", "no_such_syscall_moat"];
        assert_eq!(with(&[], &unknown), with(&[], &["getppid"]));
        assert_eq!(with(&[], &["no_such_syscall_moat"]), with(&[], &[]));
        // A name libseccomp knows only on another architecture matters once it is listed.
        if cfg!(target_arch = "x86_64") {
            let x86 = &["SCMP_ARCH_X86"];
            assert_eq!(with(&[], &["socketcall"]), with(&[], &[]));
            assert_ne!(with(x86, &["socketcall"]), with(x86, &[]));
        }
    }

    #[test]
    fn rules_like_the_default_are_skipped_and_errno_defaults_to_eperm() {
        let p = |default_ret: Option<u32>, ret: Option<u32>| {
            let call = json!({"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "errnoRet": ret});
            let mut v = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [call]});
            v["defaultErrnoRet"] = json!(default_ret);
            words(v)
        };
        // The profile with no syscalls has no ENOSYS stub (no newest syscall); the others
        // have the same one: libseccomp's part after it is what is compared.
        let empty = words(json!({"defaultAction": "SCMP_ACT_ERRNO"}));
        let skipped = p(None, None);
        assert!(skipped.ends_with(&empty), "{skipped:?}");
        assert_eq!(p(None, Some(1)), skipped);
        assert_eq!(p(Some(1), None), skipped);
        assert_ne!(p(None, Some(2)), skipped);
    }

    #[test]
    fn flags_map_to_kernel_bits() {
        let flags = |names: &[&str], default: &str, notify: bool| {
            let calls = match notify {
                true => json!([{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]),
                false => json!([]),
            };
            let v = json!({"defaultAction": default, "flags": names, "syscalls": calls,
                "listenerPath": "/run/listener.sock"});
            compiled(v).flags
        };
        let (allow, tsync) = ("SCMP_ACT_ALLOW", "SECCOMP_FILTER_FLAG_TSYNC");
        let wait = "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV";
        assert_eq!(flags(&[], allow, false), 0);
        assert_eq!(flags(&[tsync], allow, false), 1);
        assert_eq!(flags(&["SECCOMP_FILTER_FLAG_LOG"], allow, false), 2);
        assert_eq!(flags(&["SECCOMP_FILTER_FLAG_SPEC_ALLOW"], allow, false), 4);
        assert_eq!(flags(&[wait], allow, false), 0);
        assert_eq!(flags(&[wait], allow, true), 8 | 32);
        assert_eq!(flags(&[tsync], allow, true), 1 | 8 | 16);
        assert_eq!(flags(&[], allow, true), 8);
        let e = compile(&parse(json!({"defaultAction": "SCMP_ACT_NOTIFY",
            "listenerPath": "/run/listener.sock"})))
        .expect_err("default notify");
        assert_eq!(e.field, ".defaultAction", "{e}");
    }

    /// runc's seccomp-notify.bats "(SCMP_ACT_NOTIFY write)": notifying on a syscall the
    /// init makes before the agent has the listener is refused, naming the entry and the
    /// syscall; the floor's `seccomp` only with the floor. Other notify rules are fine,
    /// the calls the init makes after the handover too (runc's "important syscalls").
    #[test]
    fn notify_on_a_syscall_of_the_handover_is_refused() {
        let p = |names: &[&str]| {
            let ok = json!({"names": ["mkdir"], "action": "SCMP_ACT_NOTIFY"});
            let allow = json!({"names": ["write"], "action": "SCMP_ACT_ALLOW"});
            parse(
                json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": "/run/l.sock",
                "syscalls": [ok, allow, {"names": names, "action": "SCMP_ACT_NOTIFY"}]}),
            )
        };
        let e = refuse_notify_before_handover(&p(&["mkdirat", "write"]), false).expect_err("write");
        assert_eq!(
            e.to_string(),
            "linux.seccomp.syscalls[2].names[1]: SCMP_ACT_NOTIFY cannot be used for the write \
             syscall: moat's init makes it after loading the filter, before the seccomp agent \
             has the listener"
        );
        refuse_notify_before_handover(&p(&["sendmsg"]), false).expect_err("sendmsg");
        for after in ["execve", "openat", "read", "close", "setresuid"] {
            refuse_notify_before_handover(&p(&[after]), false).expect(after);
        }
        refuse_notify_before_handover(&p(&["seccomp"]), false).expect("no floor");
        refuse_notify_before_handover(&p(&["seccomp"]), true).expect_err("floor");
        refuse_notify_before_handover(&p(&["mkdirat", "chmod"]), true).expect("others");
        // Every name is one libseccomp knows: a typo would refuse nothing.
        for name in BEFORE_HANDOVER {
            assert!(ScmpSyscall::from_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn known_names_are_accepted() {
        for a in known_actions() {
            let call = json!({"names": ["getppid"], "action": a});
            compiled(
                json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [call],
                "listenerPath": "/run/listener.sock"}),
            );
        }
        for op in known_operators() {
            let args = json!([{"index": 0, "value": 1, "valueTwo": 1, "op": op}]);
            let call = json!({"names": ["getppid"], "action": "SCMP_ACT_ERRNO", "args": args});
            words(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [call]}));
        }
        for a in known_archs() {
            ScmpArch::from_str(a).expect(a);
        }
        for f in known_flags() {
            assert!(flag_bit(f).is_some(), "{f}");
        }
        let v = libseccomp_version();
        assert_eq!(v.split('.').count(), 3, "{v}");
    }

    #[test]
    fn installed_filter_denies_with_errno_and_matches_args() {
        use libc::PR_GET_TIMERSLACK;
        use libc::{PR_GET_DUMPABLE, PR_GET_KEEPCAPS, PR_GET_NO_NEW_PRIVS, PR_GET_SECCOMP};
        let eq =
            |index: u32, value: i32| json!({"index": index, "value": value, "op": "SCMP_CMP_EQ"});
        // Enough names to make libseccomp lay the filter out as a binary tree.
        #[rustfmt::skip]
        let denied = [
            "mkdir", "mkdirat", "acct", "add_key", "bpf", "clock_adjtime", "delete_module",
            "finit_module", "get_mempolicy", "init_module", "ioperm", "iopl", "kcmp",
            "kexec_file_load", "kexec_load", "keyctl", "mbind", "mount", "move_pages",
            "open_by_handle_at", "perf_event_open", "pivot_root", "process_vm_readv",
            "process_vm_writev", "ptrace", "quotactl", "reboot", "request_key", "set_mempolicy",
            "setns", "settimeofday", "swapon", "swapoff", "umount2", "unshare", "userfaultfd",
        ];
        let masked = json!({"index": 0, "value": 0xff, "valueTwo": 3, "op": "SCMP_CMP_MASKED_EQ"});
        let f = compiled(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": &denied[..], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
            // Same index twice: either matches.
            {"names": ["prctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 33,
                "args": [eq(0, PR_GET_SECCOMP), eq(0, PR_GET_TIMERSLACK)]},
            // Different indexes: both must match.
            {"names": ["prctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 34,
                "args": [eq(0, PR_GET_NO_NEW_PRIVS), eq(1, 7)]},
            // Mask in `value`, expected value in `valueTwo`: matches 3 and 0x103, not 7.
            {"names": ["prctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 35,
                "args": [masked]},
        ]}));
        exited_ok(run_filtered(&f, |_| {
            let mode = nix::sys::stat::Mode::S_IRWXU;
            if nix::unistd::mkdir("/nonexistent-moat-test/x", mode) != Err(Errno::ENOSYS)
                || nix::sched::unshare(nix::sched::CloneFlags::empty()) != Err(Errno::ENOSYS)
                || nix::unistd::getppid().as_raw() <= 0
            {
                return 12;
            }
            if errno(sys::prctl(PR_GET_SECCOMP, 0)) != Some(33)
                || errno(sys::prctl(PR_GET_TIMERSLACK, 0)) != Some(33)
            {
                return 13;
            }
            if errno(sys::prctl(PR_GET_NO_NEW_PRIVS, 7)) != Some(34)
                || sys::prctl(PR_GET_NO_NEW_PRIVS, 0).ok() != Some(1)
            {
                return 14;
            }
            if errno(sys::prctl(PR_GET_DUMPABLE, 0)) != Some(35)
                || errno(sys::prctl(PR_GET_DUMPABLE | 0x100, 0)) != Some(35)
                || sys::prctl(PR_GET_KEEPCAPS, 0).is_err()
            {
                return 15;
            }
            0
        }));
    }

    #[test]
    fn installed_allowlist_denies_by_default() {
        let archs = match cfg!(target_arch = "x86_64") {
            true => json!(["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]),
            false => json!([]),
        };
        let f = compiled(
            json!({"defaultAction": "SCMP_ACT_ERRNO", "architectures": archs,
            "syscalls": [
                {"names": ["exit_group", "exit"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
                    "args": [{"index": 0, "value": 0xffff_ffff_u32, "op": "SCMP_CMP_EQ"}]},
            ]}),
        );
        exited_ok(run_filtered(&f, |_| {
            if sys::personality(0xffff_ffff).is_err() {
                return 20;
            }
            if errno(sys::personality(0)) != Some(libc::EPERM) {
                return 21;
            }
            0
        }));
    }

    #[test]
    fn narrow_args_table_is_sorted_and_well_formed() {
        for w in NARROW_ARGS.windows(2) {
            assert!(w[0].0 < w[1].0, "{:?} before {:?}", w[0].0, w[1].0);
        }
        for (name, sig) in NARROW_ARGS {
            assert!(sig.len() <= 6 && !sig.ends_with('.'), "{name}: {sig:?}");
            assert!(sig.bytes().all(|b| b"im.".contains(&b)), "{name}: {sig:?}");
            assert!(
                ScmpSyscall::from_name(name).is_ok(),
                "{name} unknown to libseccomp"
            );
        }
        assert_eq!(arg_bits("ioctl", 1), 32);
        assert_eq!(arg_bits("ioctl", 2), 64);
        assert_eq!(arg_bits("openat", 3), 16);
        assert_eq!(arg_bits("mmap", 0), 64);
    }

    #[test]
    fn blocks_cover_exactly_the_range() {
        let top = 0xff;
        for lo in 0..=top {
            for hi in lo..=top {
                let b = blocks(lo, hi, top);
                assert!(b.len() <= 16, "[{lo}, {hi}]: {b:?}");
                for x in 0..=top {
                    let n = b.iter().filter(|&&(m, v)| x & m == v).count();
                    assert_eq!(n, usize::from((lo..=hi).contains(&x)), "[{lo}, {hi}] {x}");
                }
            }
        }
        assert_eq!(blocks(0, 0xffff_ffff, 0xffff_ffff), [(0, 0)]);
        assert_eq!(blocks(41, 0xffff_ffff, 0xffff_ffff).len(), 30);
    }

    #[test]
    fn narrowing_refuses_values_the_call_cannot_see() {
        let p = |op: &str, v: u64, v2: u64| {
            let args = json!([{"index": 1, "op": op, "value": v, "valueTwo": v2}]);
            let call = json!({"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": args});
            compile(&parse(
                json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [call]}),
            ))
        };
        let e = p("SCMP_CMP_EQ", 1 << 32 | 0x5412, 0).expect_err("high bits");
        assert_eq!(e.field, ".syscalls[0].args[0].value", "{e}");
        assert!(e.reason.contains("reads as 32 bits"), "{e}");
        let e = p("SCMP_CMP_MASKED_EQ", u64::MAX, 1 << 40).expect_err("high bits");
        assert_eq!(e.field, ".syscalls[0].args[0].valueTwo", "{e}");
        // Sign-extended negative numbers and masks with high bits are what they say.
        p("SCMP_CMP_EQ", 0u64.wrapping_sub(100), 0).expect("AT_FDCWD-like");
        p("SCMP_CMP_MASKED_EQ", u64::MAX, 0x5412).expect("mask");
        // On a full-width argument nothing changes.
        let args = json!([{"index": 2, "op": "SCMP_CMP_EQ", "value": 1u64 << 40}]);
        let call = json!({"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": args});
        compiled(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [call]}));
    }

    /// Every operator on a 32-bit argument (personality's), tried in the kernel with high
    /// bits set: the rule holds exactly when the operator holds on the low 32 bits.
    #[test]
    fn installed_comparisons_on_int_arguments_ignore_high_bits() {
        const V: u64 = 1000;
        const XS: [u64; 9] = [
            0,
            1,
            999,
            1000,
            1001,
            0x3e8 | 0x100,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fffe,
        ];
        const HIS: [u64; 3] = [0, 1 << 32, 0xffff_ffff << 32];
        type Holds = fn(u64) -> bool;
        let ops: [(&str, u64, Holds); 7] = [
            ("SCMP_CMP_EQ", 0, |x| x == V),
            ("SCMP_CMP_NE", 0, |x| x != V),
            ("SCMP_CMP_LT", 0, |x| x < V),
            ("SCMP_CMP_LE", 0, |x| x <= V),
            ("SCMP_CMP_GT", 0, |x| x > V),
            ("SCMP_CMP_GE", 0, |x| x >= V),
            // OCI: mask in `value`, expected value in `valueTwo`.
            ("SCMP_CMP_MASKED_EQ", 0xff, |x| x & 0xff == V & 0xff),
        ];
        for (op, mask, holds) in ops {
            let (value, value_two) = if mask == 0 { (V, 0) } else { (mask, V & 0xff) };
            let args = json!([{"index": 0, "op": op, "value": value, "valueTwo": value_two}]);
            let f = compiled(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
                {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": 77,
                 "args": args}]}));
            let status = run_filtered(&f, |_| {
                for (i, x) in XS.iter().enumerate() {
                    for (j, hi) in HIS.iter().enumerate() {
                        let r = sys::syscall_numbers(libc::SYS_personality, hi | x, 0, 0);
                        if (errno(r) == Some(77)) != holds(*x) {
                            return i32::try_from(1 + i * HIS.len() + j).unwrap_or(255);
                        }
                    }
                }
                0
            });
            assert_eq!(
                status,
                WaitStatus::Exited(status.pid().unwrap(), 0),
                "{op}: wrong verdict for case (x index * 3 + hi index + 1)"
            );
        }
    }

    /// moat's own profiles, installed: TIOCSTI, TIOCLINUX, AF_VSOCK and AF_ALG are refused
    /// by the filter with or without high bits (the kernel alone would answer EBADF for
    /// the bogus fd, and make the sockets), and an allowed value with high bits passes.
    #[test]
    fn installed_moat_profiles_hold_with_high_bits() {
        let restricted: spec::Seccomp =
            serde_json::from_str(include_str!("../../seccomp-profiles/restricted.json")).unwrap();
        let profiles = [
            ("restricted", compile(&restricted).unwrap(), libc::ENOSYS),
            (
                "floor",
                floor(include_str!("../../seccomp-profiles/floor.json"), None).unwrap(),
                libc::EPERM,
            ),
        ];
        const HIS: [u64; 3] = [0, 1 << 32, 0x8000_0000 << 32];
        for (what, f, denied) in profiles {
            let status = run_filtered(&f, |_| {
                for hi in HIS {
                    for cmd in [libc::TIOCSTI as u64, 0x541c /* TIOCLINUX */] {
                        let r = sys::syscall_numbers(libc::SYS_ioctl, 1000, hi | cmd, 0);
                        if errno(r) != Some(denied) {
                            return 1;
                        }
                    }
                    if errno(sys::syscall_numbers(libc::SYS_ioctl, 1000, hi | 0x5401, 0))
                        != Some(libc::EBADF)
                    {
                        return 2; // TCGETS reaches the kernel
                    }
                    for domain in [libc::AF_VSOCK, libc::AF_ALG] {
                        let r = sys::syscall_numbers(
                            libc::SYS_socket,
                            hi | u64::try_from(domain).unwrap(),
                            libc::SOCK_STREAM as u64,
                            0,
                        );
                        if errno(r) != Some(denied) {
                            return 3;
                        }
                    }
                    let unix = libc::AF_UNIX as u64;
                    let stream = libc::SOCK_STREAM as u64;
                    if sys::syscall_numbers(libc::SYS_socket, hi | unix, stream, 0).is_err() {
                        return 4;
                    }
                }
                0
            });
            assert_eq!(
                status,
                WaitStatus::Exited(status.pid().unwrap(), 0),
                "{what}: 1 ioctl, 3 socket not refused; 2, 4 an allowed call refused"
            );
        }
    }

    /// What libseccomp does with an unconditional and a conditional rule of different
    /// actions on one syscall (the conditional one is lost, in either order), and that
    /// moat names the pair.
    #[test]
    fn conditional_rules_beside_an_unconditional_one_are_named() {
        let tiocsti = json!([{"index": 1, "value": libc::TIOCSTI, "op": "SCMP_CMP_EQ"}]);
        let deny = json!({"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "args": tiocsti});
        let allow = json!({"names": ["ioctl"], "action": "SCMP_ACT_ALLOW"});
        let exit = json!({"names": ["exit_group", "exit"], "action": "SCMP_ACT_ALLOW"});
        for calls in [json!([allow, deny]), json!([deny, allow])] {
            let mut all = calls.clone();
            all.as_array_mut().unwrap().push(exit.clone());
            let p = parse(json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": all}));
            let f = compile(&p).unwrap();
            exited_ok(run_filtered(&f, |_| {
                // Reaches the kernel (EBADF): the TIOCSTI rule is gone.
                let r = sys::syscall_numbers(libc::SYS_ioctl, 1000, libc::TIOCSTI as u64, 0);
                i32::from(errno(r) != Some(libc::EBADF))
            }));
            let allow_at = usize::from(calls[0]["args"].is_array());
            let added = [
                Added {
                    nr: 16,
                    entry: allow_at,
                    name: "ioctl",
                    action: ScmpAction::Allow,
                    conditional: false,
                },
                Added {
                    nr: 16,
                    entry: 1 - allow_at,
                    name: "ioctl",
                    action: ScmpAction::Errno(1),
                    conditional: true,
                },
            ];
            let msgs = overridden(&added);
            assert_eq!(msgs.len(), 1, "{msgs:?}");
            assert!(
                msgs[0].starts_with(&format!("linux.seccomp.syscalls[{}]: ", 1 - allow_at)),
                "{msgs:?}"
            );
        }
        let same = |action| Added {
            nr: 16,
            entry: 0,
            name: "ioctl",
            action,
            conditional: true,
        };
        let uncond = Added {
            conditional: false,
            ..same(ScmpAction::Allow)
        };
        assert!(overridden(&[uncond, same(ScmpAction::Allow)]).is_empty());
    }

    #[test]
    fn installed_kill_process_kills_with_sigsys() {
        let call = json!({"names": ["getppid"], "action": "SCMP_ACT_KILL_PROCESS"});
        let f = compiled(json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [call]}));
        use nix::sys::resource::{setrlimit, Resource};
        let status = run_filtered(&f, |_| {
            // SIGSYS dumps core by default; keep test runs from leaving core files behind.
            let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
            nix::unistd::getppid();
            30
        });
        assert!(
            matches!(status, WaitStatus::Signaled(_, Signal::SIGSYS, _)),
            "{status:?}"
        );
    }

    #[test]
    fn installed_notify_filter_returns_a_listener() {
        let f = compiled(json!({"defaultAction": "SCMP_ACT_ALLOW",
            "flags": ["SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV"],
            "listenerPath": "/run/listener.sock",
            "syscalls": [{"names": ["getppid"], "action": "SCMP_ACT_NOTIFY"}]}));
        exited_ok(run_filtered(&f, |listener| match listener {
            Some(fd)
                if nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).is_ok() =>
            {
                0
            }
            _ => 41,
        }));
    }
    /// `defaultErrnoRet` is what a syscall no rule names returns (runc's seccomp.bats
    /// "defaultErrnoRet=ENXIO"), and a rule's `errnoRet` what its syscall returns, with the
    /// x86 family listed as engines do.
    #[test]
    fn installed_default_errno_ret_is_returned() {
        let archs = match cfg!(target_arch = "x86_64") {
            true => json!([
                "SCMP_ARCH_X86",
                "SCMP_ARCH_X32",
                "SCMP_ARCH_X86_64",
                "SCMP_ARCH_AARCH64",
                "SCMP_ARCH_ARM"
            ]),
            false => json!([]),
        };
        let f = compiled(
            json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": libc::ENXIO,
            "architectures": archs,
            "syscalls": [
                {"names": ["exit_group", "exit", "getppid"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOANO},
            ]}),
        );
        exited_ok(run_filtered(&f, |_| {
            if errno(sys::syscall_numbers(libc::SYS_chdir, 0, 0, 0)) != Some(libc::ENXIO) {
                return 50;
            }
            if errno(sys::personality(0)) != Some(libc::ENOANO) {
                return 51;
            }
            if nix::unistd::getppid().as_raw() <= 0 {
                return 52;
            }
            0
        }));
    }
    /// runc's seccomp.bats "-ENOSYS handling": with a denying default, a native syscall
    /// numbered above every syscall the profile names gets ENOSYS (the C library falls
    /// back); one below it gets the default's errno, a listed one its own action. With an
    /// allowing default, or ENOSYS as the default errno, the program is libseccomp's alone.
    #[test]
    fn installed_syscalls_newer_than_the_profile_get_enosys() {
        let profile = |default: &str, ret: Option<i32>| {
            json!({"defaultAction": default, "defaultErrnoRet": ret, "syscalls": [
                {"names": ["exit_group", "exit", "getppid"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": 77},
                // The profile's newest syscall: 437 on x86_64 and aarch64.
                {"names": ["openat2"], "action": "SCMP_ACT_ERRNO", "errnoRet": 78},
            ]})
        };
        let f = compiled(profile("SCMP_ACT_ERRNO", None));
        exited_ok(run_filtered(&f, |_| {
            let nr = |n: libc::c_long| errno(sys::syscall_numbers(n, 0, 0, 0));
            if nr(1000) != Some(libc::ENOSYS) || nr(438) != Some(libc::ENOSYS) {
                return 60;
            }
            if nr(libc::SYS_chdir) != Some(libc::EPERM) {
                return 61; // older than the profile's newest: the default
            }
            if nr(libc::SYS_openat2) != Some(78) || errno(sys::personality(0)) != Some(77) {
                return 62;
            }
            if nix::unistd::getppid().as_raw() <= 0 {
                return 63;
            }
            0
        }));
        let without = |v: Value| {
            let mut v = v;
            v["syscalls"][2]["names"] = json!(["getpid"]);
            words(v)
        };
        // Allowing default, ENOSYS default: no stub, the program does not depend on the
        // newest name.
        for (d, ret) in [
            ("SCMP_ACT_ALLOW", None),
            ("SCMP_ACT_ERRNO", Some(libc::ENOSYS)),
        ] {
            let with_stub = words(profile(d, ret));
            assert_eq!(with_stub.len(), without(profile(d, ret)).len(), "{d}");
        }
        let f = compiled(profile("SCMP_ACT_ALLOW", None));
        exited_ok(run_filtered(&f, |_| {
            i32::from(errno(sys::syscall_numbers(1000, 0, 0, 0)) != Some(libc::ENOSYS))
        }));
    }
}
