//! Device access rules: the spec's `linux.resources.devices` followed by runc's default
//! allowed devices, rendered as v1 `devices.allow`/`devices.deny` lines or as a cgroup v2
//! `BPF_PROG_TYPE_CGROUP_DEVICE` program.
//!
//! Semantics on both: access starts denied, and for each access bit (mknod, read, write)
//! the last rule that matches the device and carries that bit decides.

use crate::linux::sys::bpf::Insn;
use crate::spec::DeviceCgroup;

use super::CgroupError;

/// Access bits, numbered as in `bpf_cgroup_dev_ctx.access_type >> 16`.
pub const ACC_MKNOD: u8 = 1;
pub const ACC_READ: u8 = 2;
pub const ACC_WRITE: u8 = 4;
pub const ACC_ALL: u8 = ACC_MKNOD | ACC_READ | ACC_WRITE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevType {
    All,
    Block,
    Char,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub allow: bool,
    pub typ: DevType,
    /// `None` is the wildcard `*`.
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: u8,
}

const fn allow(typ: DevType, major: Option<u32>, minor: Option<u32>, access: u8) -> Rule {
    Rule {
        allow: true,
        typ,
        major,
        minor,
        access,
    }
}

/// runc's mknod-anything rules. moat puts them *before* the spec's rules, so a spec that
/// starts by denying everything (as every engine's does) also denies creating device
/// nodes it does not list; runc appends them after, which leaves mknod of any device
/// allowed. moat allows mknod of the spec's own `linux.devices` (see `linux/create/parent.rs`).
const MKNOD_ANY: [Rule; 2] = [
    allow(DevType::Char, None, None, ACC_MKNOD),
    allow(DevType::Block, None, None, ACC_MKNOD),
];

/// runc's default device allow-list, so that containers behave the same under both.
const DEFAULTS: [Rule; 9] = [
    allow(DevType::Char, Some(1), Some(3), ACC_ALL), // null
    allow(DevType::Char, Some(1), Some(5), ACC_ALL), // zero
    allow(DevType::Char, Some(1), Some(7), ACC_ALL), // full
    allow(DevType::Char, Some(5), Some(0), ACC_ALL), // tty
    allow(DevType::Char, Some(5), Some(1), ACC_ALL), // console
    allow(DevType::Char, Some(5), Some(2), ACC_ALL), // ptmx
    allow(DevType::Char, Some(136), None, ACC_ALL),  // pts/*
    allow(DevType::Char, Some(1), Some(8), ACC_ALL), // random
    allow(DevType::Char, Some(1), Some(9), ACC_ALL), // urandom
];

/// Keeps every jump in the generated program within an i16 offset (at most 4
/// instructions per rule per access bit).
pub const MAX_RULES: usize = 1000;

/// Validates the spec's rules and appends the defaults after them (so a spec cannot deny
/// /dev/null and friends, exactly as with runc).
pub fn rules(spec: &[DeviceCgroup]) -> Result<Vec<Rule>, CgroupError> {
    if spec.len() > MAX_RULES {
        return Err(CgroupError::Invalid {
            field: "linux.resources.devices".into(),
            msg: format!("{} rules; at most {MAX_RULES} are supported", spec.len()),
        });
    }
    let mut out = Vec::with_capacity(spec.len() + MKNOD_ANY.len() + DEFAULTS.len());
    out.extend(MKNOD_ANY.iter().cloned());
    for (i, d) in spec.iter().enumerate() {
        out.extend(parse(i, d)?);
    }
    out.extend(DEFAULTS.iter().cloned());
    Ok(out)
}

/// One spec rule. An access letter that is not r, w or m (runc's update.bats writes
/// `"rwa"`) means nothing to the kernel; runc's rule emulator drops it. moat never lets
/// one widen what the rule allows: an allow rule keeps its known letters only (none: the
/// rule allows nothing and is dropped), a deny rule denies every access. Either is said
/// in a warning.
fn parse(i: usize, d: &DeviceCgroup) -> Result<Option<Rule>, CgroupError> {
    let field = |f: &str| format!("linux.resources.devices[{i}]{f}");
    let typ = match d.typ.as_deref() {
        None | Some("a") => DevType::All,
        Some("b") => DevType::Block,
        Some("c") => DevType::Char,
        Some(t) => {
            return Err(CgroupError::Invalid {
                field: field(".type"),
                msg: format!("{t:?} is not a, b or c"),
            })
        }
    };
    let number = |v: Option<i64>, name: &str| match v {
        None | Some(-1) => Ok(None),
        // The BPF program compares against sign-extended 32-bit immediates; real device
        // numbers are far smaller (12-bit majors, 20-bit minors).
        Some(n) if (0..=i64::from(i32::MAX)).contains(&n) => Ok(u32::try_from(n).ok()),
        Some(n) => Err(CgroupError::Invalid {
            field: field(name),
            msg: format!("{n} is not a device number"),
        }),
    };
    let major = number(d.major, ".major")?;
    let minor = number(d.minor, ".minor")?;
    let access = match d.access.as_deref() {
        None | Some("") => ACC_ALL,
        Some(s) => {
            let mut bits = 0;
            let mut unknown = String::new();
            for c in s.chars() {
                match c {
                    'r' => bits |= ACC_READ,
                    'w' => bits |= ACC_WRITE,
                    'm' => bits |= ACC_MKNOD,
                    _ if !unknown.contains(c) => unknown.push(c),
                    _ => {}
                }
            }
            if unknown.is_empty() {
                bits
            } else if d.allow {
                crate::log::warn(&format!(
                    "{}: {s:?}: {unknown:?} is no device access (r, w, m); ignored, as runc \
                     does: the rule allows {}",
                    field(".access"),
                    if bits == 0 {
                        "nothing and is dropped".to_string()
                    } else {
                        format!("{:?}", access_str(bits))
                    }
                ));
                if bits == 0 {
                    return Ok(None);
                }
                bits
            } else {
                crate::log::warn(&format!(
                    "{}: {s:?}: {unknown:?} is no device access (r, w, m); the rule denies \
                     every access (\"rwm\"), never less than asked",
                    field(".access")
                ));
                ACC_ALL
            }
        }
    };
    Ok(Some(Rule {
        allow: d.allow,
        typ,
        major,
        minor,
        access,
    }))
}

pub fn access_str(bits: u8) -> String {
    [(ACC_READ, 'r'), (ACC_WRITE, 'w'), (ACC_MKNOD, 'm')]
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|&(_, c)| c)
        .collect()
}

fn num(n: Option<u32>) -> String {
    n.map_or("*".into(), |n| n.to_string())
}

impl Rule {
    /// Matches every device with every access: v1 can only express this as `a`, which
    /// also resets the cgroup's exception list.
    pub fn is_reset(&self) -> bool {
        self.typ == DevType::All
            && self.major.is_none()
            && self.minor.is_none()
            && self.access == ACC_ALL
    }

    /// The v1 file this rule goes to and the lines to write, one per write(2).
    pub fn v1_lines(&self) -> (&'static str, Vec<String>) {
        let file = if self.allow {
            "devices.allow"
        } else {
            "devices.deny"
        };
        if self.is_reset() {
            return (file, vec!["a".into()]);
        }
        // v1 reads any "a ..." line as a reset whatever follows, so a narrower
        // all-types rule becomes one rule per type.
        let types: &[char] = match self.typ {
            DevType::All => &['b', 'c'],
            DevType::Block => &['b'],
            DevType::Char => &['c'],
        };
        let lines = types
            .iter()
            .map(|t| {
                format!(
                    "{t} {}:{} {}",
                    num(self.major),
                    num(self.minor),
                    access_str(self.access)
                )
            })
            .collect();
        (file, lines)
    }
}

// ---------------------------------------------------------------------------------------
// The BPF program

const BPF_DEVCG_DEV_BLOCK: i32 = 1;
const BPF_DEVCG_DEV_CHAR: i32 = 2;

// Registers: r1 = ctx, then scratch; r2 = device type; r3 = requested access;
// r4 = major; r5 = minor.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;

const LDX_MEM_W: u8 = 0x61;
const ALU64_MOV_K: u8 = 0xb7;
const ALU64_MOV_X: u8 = 0xbf;
const ALU64_AND_K: u8 = 0x57;
const ALU64_RSH_K: u8 = 0x77;
const JMP_JA: u8 = 0x05;
const JMP_JEQ_K: u8 = 0x15;
const JMP_JNE_K: u8 = 0x55;
const JMP_EXIT: u8 = 0x95;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

/// A device number as an instruction's 32-bit immediate: `parse` accepts none above
/// `i32::MAX`.
fn imm32(n: u32) -> i32 {
    i32::try_from(n).expect("device numbers are checked to fit an immediate")
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    BitDone(usize),
    Next(usize, usize),
    Deny,
}

enum Op {
    Insn(Insn),
    Jump {
        code: u8,
        reg: u8,
        imm: i32,
        to: Label,
    },
    Mark(Label),
}

/// Builds the device program. For each requested access bit it walks the rules carrying
/// that bit from last to first; the first that matches type, major and minor decides
/// (allow: on to the next bit, deny: return 0). No match denies. All bits allowed
/// returns 1.
///
/// Nothing unreachable is emitted (the verifier rejects dead instructions): a chain stops
/// at a rule that matches every device, and the deny exit exists only if something
/// jumps to it.
pub fn program(rules: &[Rule]) -> Vec<Insn> {
    let mut ops = vec![
        Op::Insn(insn(LDX_MEM_W, R2, R1, 0, 0)), // access_type
        Op::Insn(insn(ALU64_MOV_X, R3, R2, 0, 0)),
        Op::Insn(insn(ALU64_RSH_K, R3, 0, 0, 16)),
        Op::Insn(insn(ALU64_AND_K, R2, 0, 0, 0xffff)),
        Op::Insn(insn(LDX_MEM_W, R4, R1, 4, 0)), // major
        Op::Insn(insn(LDX_MEM_W, R5, R1, 8, 0)), // minor
    ];
    let mut deny_used = false;
    for (b, bit) in [ACC_MKNOD, ACC_READ, ACC_WRITE].into_iter().enumerate() {
        let done = Label::BitDone(b);
        ops.push(Op::Insn(insn(ALU64_MOV_X, R1, R3, 0, 0)));
        ops.push(Op::Insn(insn(ALU64_AND_K, R1, 0, 0, bit as i32)));
        ops.push(Op::Jump {
            code: JMP_JEQ_K,
            reg: R1,
            imm: 0,
            to: done,
        });
        let mut exhaustive = false;
        for (r, rule) in rules.iter().enumerate().rev() {
            if rule.access & bit == 0 {
                continue;
            }
            let next = Label::Next(b, r);
            let typ = match rule.typ {
                DevType::All => None,
                DevType::Block => Some(BPF_DEVCG_DEV_BLOCK),
                DevType::Char => Some(BPF_DEVCG_DEV_CHAR),
            };
            let checks = [
                (R2, typ),
                (R4, rule.major.map(imm32)),
                (R5, rule.minor.map(imm32)),
            ];
            let mut conditional = false;
            for (reg, want) in checks {
                if let Some(imm) = want {
                    conditional = true;
                    ops.push(Op::Jump {
                        code: JMP_JNE_K,
                        reg,
                        imm,
                        to: next,
                    });
                }
            }
            if rule.allow {
                // A wildcard allow falls straight through to `done`: a jump of 0 is
                // pointless.
                if conditional {
                    ops.push(Op::Jump {
                        code: JMP_JA,
                        reg: 0,
                        imm: 0,
                        to: done,
                    });
                }
            } else {
                deny_used = true;
                ops.push(Op::Jump {
                    code: JMP_JA,
                    reg: 0,
                    imm: 0,
                    to: Label::Deny,
                });
            }
            if !conditional {
                exhaustive = true;
                break;
            }
            ops.push(Op::Mark(next));
        }
        if !exhaustive {
            deny_used = true;
            ops.push(Op::Jump {
                code: JMP_JA,
                reg: 0,
                imm: 0,
                to: Label::Deny,
            });
        }
        ops.push(Op::Mark(done));
    }
    ops.push(Op::Insn(insn(ALU64_MOV_K, R0, 0, 0, 1)));
    ops.push(Op::Insn(insn(JMP_EXIT, 0, 0, 0, 0)));
    if deny_used {
        ops.push(Op::Mark(Label::Deny));
        ops.push(Op::Insn(insn(ALU64_MOV_K, R0, 0, 0, 0)));
        ops.push(Op::Insn(insn(JMP_EXIT, 0, 0, 0, 0)));
    }
    assemble(&ops)
}

fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = Vec::new();
    let mut pc = 0usize;
    for op in ops {
        match op {
            Op::Mark(l) => at.push((*l, pc)),
            _ => pc += 1,
        }
    }
    let find = |l: Label| {
        at.iter()
            .find(|(x, _)| *x == l)
            .map(|&(_, p)| p)
            .expect("jump to a label that was never placed")
    };
    let mut out = Vec::with_capacity(pc);
    for op in ops {
        match op {
            Op::Insn(i) => out.push(*i),
            Op::Jump { code, reg, imm, to } => {
                #[allow(clippy::cast_possible_wrap)] // instruction counts, far below i64::MAX
                let off = find(*to) as i64 - out.len() as i64 - 1;
                // `rules` caps the rule count so that no jump spans more than ~13k
                // instructions.
                let off = i16::try_from(off).expect("BPF jump offset fits in i16");
                out.push(insn(*code, *reg, 0, off, *imm));
            }
            Op::Mark(_) => {}
        }
    }
    out
}
