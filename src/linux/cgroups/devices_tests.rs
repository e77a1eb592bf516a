//! Device rules and the BPF program, the latter run in a small interpreter of the eBPF
//! subset the generator emits and compared with a direct model of the semantics.

use super::devices::{self, DevType, Rule, ACC_ALL, ACC_MKNOD, ACC_READ, ACC_WRITE};
use crate::linux::sys::bpf::Insn;
use crate::spec::DeviceCgroup;

fn dc(allow: bool, typ: &str, major: i64, minor: i64, access: &str) -> DeviceCgroup {
    DeviceCgroup {
        allow,
        typ: Some(typ.into()),
        major: Some(major),
        minor: Some(minor),
        access: Some(access.into()),
    }
}

#[test]
fn device_rules_spec_first_then_defaults() {
    let spec_rules = vec![
        DeviceCgroup {
            allow: false,
            access: Some("rwm".into()),
            ..Default::default()
        },
        dc(true, "c", 10, 200, "rw"),
    ];
    let rules = devices::rules(&spec_rules).unwrap();
    assert_eq!(rules.len(), 2 + 2 + 9);
    let head: Vec<String> = rules[..2].iter().flat_map(|r| r.v1_lines().1).collect();
    assert_eq!(
        head,
        ["c *:* m", "b *:* m"],
        "mknod-anything comes before the spec"
    );
    assert!(rules[2].is_reset() && !rules[2].allow);
    assert_eq!(
        rules[3].v1_lines(),
        ("devices.allow", vec!["c 10:200 rw".to_string()])
    );
    let lines: Vec<String> = rules[4..].iter().flat_map(|r| r.v1_lines().1).collect();
    assert_eq!(
        lines,
        [
            "c 1:3 rwm",
            "c 1:5 rwm",
            "c 1:7 rwm",
            "c 5:0 rwm",
            "c 5:1 rwm",
            "c 5:2 rwm",
            "c 136:* rwm",
            "c 1:8 rwm",
            "c 1:9 rwm"
        ]
    );
    // "a" with anything narrower than everything must not become a v1 reset.
    let narrow = devices::rules(&[dc(false, "a", -1, -1, "w")]).unwrap();
    assert_eq!(
        narrow[2].v1_lines(),
        (
            "devices.deny",
            vec!["b *:* w".to_string(), "c *:* w".to_string()]
        )
    );
    let reset = devices::rules(&[DeviceCgroup {
        allow: true,
        ..Default::default()
    }])
    .unwrap();
    assert_eq!(
        reset[2].v1_lines(),
        ("devices.allow", vec!["a".to_string()])
    );
}

#[test]
fn device_rules_are_validated() {
    for (d, field) in [
        (dc(true, "x", 1, 1, "r"), "devices[0].type"),
        (dc(true, "c", -2, 1, "r"), "devices[0].major"),
        (dc(true, "c", 1, 1 << 40, "r"), "devices[0].minor"),
    ] {
        let e = devices::rules(&[d]).unwrap_err().to_string();
        assert!(e.starts_with(&format!("linux.resources.{field}")), "{e}");
    }
    let many = vec![DeviceCgroup::default(); devices::MAX_RULES + 1];
    assert!(devices::rules(&many).is_err());
}

/// runc's update.bats writes access "rwa": a letter the kernel does not know never widens
/// what a rule allows: an allow rule keeps its known letters (none: dropped), a deny rule
/// denies every access.
#[test]
fn unknown_access_letters_never_widen_a_rule() {
    let rules = devices::rules(&[
        dc(true, "c", 1, 1, "rx"),
        dc(true, "c", 1, 2, "a"),
        dc(false, "c", 1, 11, "rwa"),
    ])
    .unwrap();
    let lines: Vec<(&str, Vec<String>)> = rules[2..4].iter().map(|r| r.v1_lines()).collect();
    assert_eq!(
        lines,
        [
            ("devices.allow", vec!["c 1:1 r".to_string()]),
            ("devices.deny", vec!["c 1:11 rwm".to_string()]),
        ]
    );
    assert_eq!(
        rules.len(),
        2 + 2 + 9,
        "the allow rule of nothing is dropped"
    );
}

/// Runs the subset of eBPF the generator emits, checking bounds as it goes.
fn run(prog: &[Insn], typ: u32, access: u32, major: u32, minor: u32) -> u64 {
    let ctx = [(access << 16) | typ, major, minor];
    let mut r = [0u64; 11];
    let mut pc = 0usize;
    for _ in 0..100_000 {
        let i = prog[pc];
        let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
        #[allow(clippy::cast_sign_loss)] // sign-extended to 64 bits, as eBPF does
        let imm = i.imm as i64 as u64;
        pc += 1;
        let jump = |pc: usize| {
            pc.checked_add_signed(isize::from(i.off))
                .expect("jump before 0")
        };
        match i.code {
            0x61 => {
                assert_eq!(src, 1, "loads only from the context");
                r[dst] = u64::from(ctx[usize::try_from(i.off / 4).unwrap()]);
            }
            0xbf => r[dst] = r[src],
            0xb7 => r[dst] = imm,
            0x57 => r[dst] &= imm,
            0x77 => r[dst] >>= imm,
            0x05 => pc = jump(pc),
            0x15 if r[dst] == imm => pc = jump(pc),
            0x55 if r[dst] != imm => pc = jump(pc),
            0x15 | 0x55 => {}
            0x95 => return r[0],
            c => panic!("unexpected opcode {c:#x}"),
        }
    }
    panic!("program did not terminate");
}

/// What the program must compute: per requested access bit, the last matching rule
/// carrying that bit decides; no such rule denies.
fn model(rules: &[Rule], typ: u32, access: u8, major: u32, minor: u32) -> u64 {
    let ok = [ACC_MKNOD, ACC_READ, ACC_WRITE].iter().all(|&bit| {
        access & bit == 0
            || rules
                .iter()
                .rev()
                .find(|r| {
                    r.access & bit != 0
                        && match r.typ {
                            DevType::All => true,
                            DevType::Block => typ == 1,
                            DevType::Char => typ == 2,
                        }
                        && r.major.is_none_or(|m| m == major)
                        && r.minor.is_none_or(|m| m == minor)
                })
                .is_some_and(|r| r.allow)
    });
    u64::from(ok)
}

/// Every instruction reachable and every jump in bounds, as the verifier demands.
fn assert_verifiable(prog: &[Insn]) {
    let mut seen = vec![false; prog.len()];
    let mut todo = vec![0usize];
    while let Some(pc) = todo.pop() {
        assert!(pc < prog.len(), "jump out of the program");
        if std::mem::replace(&mut seen[pc], true) {
            continue;
        }
        let i = prog[pc];
        let target = (pc + 1)
            .checked_add_signed(isize::from(i.off))
            .expect("jump before 0");
        match i.code {
            0x95 => {}
            0x05 => todo.push(target),
            0x15 | 0x55 => todo.extend([pc + 1, target]),
            _ => todo.push(pc + 1),
        }
    }
    assert!(prog
        .last()
        .is_some_and(|i| i.code == 0x95 || i.code == 0x05));
    let dead: Vec<usize> = (0..prog.len()).filter(|&i| !seen[i]).collect();
    assert!(dead.is_empty(), "unreachable instructions {dead:?}");
}

fn check_all(rules: &[Rule]) {
    let prog = devices::program(rules);
    assert_verifiable(&prog);
    for typ in [1, 2] {
        for access in 1..=ACC_ALL {
            for major in [1, 5, 136, 254] {
                for minor in [0, 3, 9] {
                    assert_eq!(
                        run(&prog, typ, access.into(), major, minor),
                        model(rules, typ, access, major, minor),
                        "type {typ} access {access} {major}:{minor} rules {rules:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn bpf_program_last_match_wins() {
    let deny_all = DeviceCgroup {
        allow: false,
        access: Some("rwm".into()),
        ..Default::default()
    };
    let rules = devices::rules(&[deny_all.clone(), dc(true, "c", 254, 0, "r")]).unwrap();
    let prog = devices::program(&rules);
    let (r, w, m) = (ACC_READ as u32, ACC_WRITE as u32, ACC_MKNOD as u32);
    assert_eq!(run(&prog, 2, r | w, 1, 3), 1, "/dev/null from the defaults");
    assert_eq!(run(&prog, 2, r, 254, 0), 1);
    assert_eq!(run(&prog, 2, r | w, 254, 0), 0, "write was not allowed");
    assert_eq!(run(&prog, 1, r, 8, 0), 0, "default deny");
    assert_eq!(
        run(&prog, 1, m, 8, 0),
        0,
        "mknod of an unlisted device: the spec's deny-all wins"
    );
    let open = devices::rules(&[dc(true, "c", 254, 0, "r")]).unwrap();
    assert_eq!(
        run(&devices::program(&open), 1, m, 8, 0),
        1,
        "without a deny-all, mknod of anything (runc)"
    );
    // A later deny overrides an earlier allow, and vice versa.
    let rules = devices::rules(&[dc(true, "c", 5, -1, "rw"), dc(false, "c", 5, 3, "w")]).unwrap();
    let prog = devices::program(&rules);
    assert_eq!(run(&prog, 2, r, 5, 3), 1);
    assert_eq!(run(&prog, 2, w, 5, 3), 0);
    assert_eq!(run(&prog, 2, w, 5, 4), 1);
    check_all(&rules);
}

#[test]
fn bpf_program_matches_model() {
    // Small deterministic generator (no rand crate): many short rule lists from a domain
    // where collisions are likely.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        usize::try_from(seed % n).unwrap()
    };
    let majors = [None, Some(1), Some(5), Some(136)];
    let minors = [None, Some(0), Some(3), Some(9)];
    for _ in 0..300 {
        let n = next(6);
        let rules: Vec<Rule> = (0..n)
            .map(|_| Rule {
                allow: next(2) == 0,
                typ: [DevType::All, DevType::Block, DevType::Char][next(3)],
                major: majors[next(4)],
                minor: minors[next(4)],
                access: 1 + u8::try_from(next(7)).unwrap(),
            })
            .collect();
        check_all(&rules);
    }
    // No rules at all, allow-all, deny-all.
    check_all(&[]);
    let all = |allow| Rule {
        allow,
        typ: DevType::All,
        major: None,
        minor: None,
        access: ACC_ALL,
    };
    check_all(&[all(true)]);
    check_all(&[all(false)]);
    check_all(&[all(false), all(true)]);
}
