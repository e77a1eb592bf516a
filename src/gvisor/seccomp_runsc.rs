//! runsc's own conversion of the profile for the container's process, where it does what
//! moat's filter does: the process then starts without moat's trampoline
//! (`super::seccomp_exec`), whose extra execve inside the sentry is most of what a gVisor
//! container costs over plain runsc. Processes started with `exec` keep the trampoline:
//! runsc starts them without any filter.
//!
//! runsc names system calls from the sentry's table (`runsc help syscalls`, which the probe
//! keeps), compares all 64 bits of an argument, answers `SCMP_ACT_ERRNO` with EPERM whatever
//! `errnoRet` says (20221219, 20240729) and has no `SCMP_ACT_KILL_PROCESS` or
//! `SCMP_ACT_LOG`. So the profile runsc gets is rewritten from what moat compiles
//! ([`seccomp::native_rules`]), one entry per system call of the sentry's table, under the
//! sentry's name for it, with the arguments as moat narrows them (32-bit arguments
//! compared as masks of their low bits), and is used only when every outcome survives:
//!
//! | moat's filter | runsc's profile | taken when |
//! |---|---|---|
//! | ALLOW | `SCMP_ACT_ALLOW` | always |
//! | ERRNO(EPERM) | `SCMP_ACT_ERRNO` | always |
//! | ERRNO(ENOSYS), TRACE | `SCMP_ACT_TRACE`: with no tracer the sentry answers ENOSYS, as the kernel does | `ptrace` is refused outright, so no process of the sandbox can become a tracer |
//! | KILL_THREAD, TRAP | `SCMP_ACT_KILL`, `SCMP_ACT_TRAP` | always |
//! | any other errno, KILL_PROCESS, LOG | none | never |
//!
//! Two more conditions. The default action must be ENOSYS (moat's RESTRICTED profile's):
//! any other refusal is one moat's stub turns into ENOSYS for system calls newer than the
//! profile (`seccomp::newer_than_profile`), which runsc would answer with the default; and
//! under a default that allows, a rule whose name runsc failed to look up would allow what
//! moat refuses, where under ENOSYS it can only refuse. And each system call must have one
//! action, so the order of runsc's and libseccomp's rules cannot matter. The one
//! difference left is by design: a system call the sentry does not have (no name in its
//! table, so runsc's profile cannot name it) gets the default's ENOSYS where a rule of the
//! profile named another action for it. It cannot run either way.

use libseccomp::ScmpAction;

use crate::linux::seccomp::{self, NativeRules};
use crate::spec;

/// What a process sees of an action inside the sentry, with no tracer possible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Allow,
    Eperm,
    Enosys,
    Kill,
    Trap,
}

impl Outcome {
    fn runsc_action(self) -> &'static str {
        match self {
            Outcome::Allow => "SCMP_ACT_ALLOW",
            Outcome::Eperm => "SCMP_ACT_ERRNO",
            Outcome::Enosys => "SCMP_ACT_TRACE",
            Outcome::Kill => "SCMP_ACT_KILL",
            Outcome::Trap => "SCMP_ACT_TRAP",
        }
    }
}

/// The outcome of `a` as runsc can express it; `tracer_free`: `ptrace` is refused, so
/// TRACE can stand for ENOSYS.
fn outcome(a: ScmpAction, tracer_free: bool) -> Result<Outcome, String> {
    Ok(match a {
        ScmpAction::Allow => Outcome::Allow,
        ScmpAction::Errno(libc::EPERM) => Outcome::Eperm,
        ScmpAction::Errno(libc::ENOSYS) | ScmpAction::Trace(_) if tracer_free => Outcome::Enosys,
        ScmpAction::Errno(libc::ENOSYS) | ScmpAction::Trace(_) => {
            return Err(format!(
                "{a:?} needs SCMP_ACT_TRACE, which a tracer could answer: ptrace is not refused"
            ))
        }
        ScmpAction::KillThread => Outcome::Kill,
        ScmpAction::Trap => Outcome::Trap,
        other => return Err(format!("runsc has no action for {other:?}")),
    })
}

/// Whether the profile refuses `ptrace` whatever its arguments.
fn ptrace_refused(r: &NativeRules) -> bool {
    let Some(nr) = libseccomp::ScmpSyscall::from_name("ptrace")
        .ok()
        .and_then(|s| u32::try_from(s.as_raw_syscall()).ok())
    else {
        return false;
    };
    let refuses = |a: ScmpAction| {
        matches!(
            a,
            ScmpAction::Errno(_)
                | ScmpAction::KillThread
                | ScmpAction::KillProcess
                | ScmpAction::Trap
        )
    };
    match r.named.get(&nr) {
        Some(rules) => {
            rules
                .iter()
                .any(|(a, conds)| conds.is_empty() && refuses(*a))
                && rules.iter().all(|(a, _)| refuses(*a))
        }
        None => refuses(r.default) || r.enosys_above.is_some_and(|l| nr > l),
    }
}

/// The profile runsc is given in place of `profile` for the container's process, or why
/// runsc's conversion would not do what moat's filter does. `table`: the sentry's system
/// calls (number, gVisor's name).
pub fn runsc_profile(
    profile: &spec::Seccomp,
    table: &[(u32, String)],
) -> Result<spec::Seccomp, String> {
    let r = seccomp::native_rules(profile).map_err(|e| e.to_string())?;
    if !matches!(
        r.default,
        ScmpAction::Errno(libc::ENOSYS) | ScmpAction::Trace(_)
    ) {
        return Err(format!(
            "the default action {:?} is not ENOSYS: moat answers system calls newer than \
             the profile with ENOSYS where runsc would give them the default, and under a \
             default that allows, a name runsc failed to look up would be allowed",
            r.default
        ));
    }
    let tracer_free = ptrace_refused(&r);
    let default = outcome(r.default, tracer_free)?;
    // Unconditional rules, one entry per action naming all its calls (runsc builds one
    // rule set per entry and looks a call up within a set by number, so hundreds of
    // one-name entries would be hundreds of sets tried in turn on every system call);
    // then the conditional ones.
    let mut whole: Vec<(Outcome, Vec<String>)> = Vec::new();
    let mut syscalls = Vec::new();
    for (nr, name) in table {
        let Some(rules) = r.named.get(nr) else {
            continue;
        };
        let action = outcome(rules[0].0, tracer_free)?;
        if rules.iter().any(|(a, _)| *a != rules[0].0) {
            return Err(format!("{name} has rules with different actions"));
        }
        if action == default {
            continue;
        }
        let entry = |args: Vec<spec::SeccompArg>| spec::SeccompSyscall {
            names: vec![name.clone()],
            action: action.runsc_action().into(),
            errno_ret: None,
            args,
        };
        if rules.iter().any(|(_, conds)| conds.is_empty()) {
            match whole.iter_mut().find(|(a, _)| *a == action) {
                Some((_, names)) => names.push(name.clone()),
                None => whole.push((action, vec![name.clone()])),
            }
        } else if rules.len() > 1
            && rules
                .iter()
                .all(|(_, conds)| conds.len() == 1 && conds[0].index == rules[0].1[0].index)
        {
            // Alternatives on one argument (what narrowing a 32-bit argument makes): one
            // entry, whose comparisons on a repeated argument runsc (like runc) ORs, one rule
            // set instead of one per alternative.
            syscalls.push(entry(
                rules.iter().map(|(_, conds)| conds[0].oci()).collect(),
            ));
        } else {
            // One entry per rule: its comparisons are on distinct arguments, which runsc
            // (like runc) ANDs; the entries of one system call are alternatives.
            syscalls.extend(
                rules
                    .iter()
                    .map(|(_, conds)| entry(conds.iter().map(seccomp::ArgCmp::oci).collect())),
            );
        }
    }
    let whole = whole
        .into_iter()
        .map(|(action, names)| spec::SeccompSyscall {
            names,
            action: action.runsc_action().into(),
            errno_ret: None,
            args: Vec::new(),
        });
    syscalls.splice(0..0, whole);
    Ok(spec::Seccomp {
        default_action: default.runsc_action().into(),
        default_errno_ret: None,
        architectures: Vec::new(),
        flags: Vec::new(),
        listener_path: None,
        listener_metadata: None,
        syscalls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> spec::Seccomp {
        serde_json::from_value(v).unwrap()
    }

    /// A table like runsc 20221219's: gVisor's own name for 270, nothing above 441.
    fn table() -> Vec<(u32, String)> {
        [
            (0, "read"),
            (16, "ioctl"),
            (101, "ptrace"),
            (135, "personality"),
            (165, "mount"),
            (270, "pselect"),
            (435, "clone3"),
        ]
        .iter()
        .map(|&(n, s)| (n, s.to_string()))
        .collect()
    }

    fn restricted() -> spec::Seccomp {
        serde_json::from_str(include_str!("../../seccomp-profiles/restricted.json")).unwrap()
    }

    #[test]
    fn restricted_is_taken_with_the_sentrys_names_and_narrowed_arguments() {
        let p = runsc_profile(&restricted(), &table()).expect("exact");
        assert_eq!(p.default_action, "SCMP_ACT_TRACE");
        let names: Vec<&str> = p
            .syscalls
            .iter()
            .flat_map(|s| s.names.iter().map(String::as_str))
            .collect();
        // pselect6 is allowed under gVisor's name; mount_setattr (442) is not in the
        // table and cannot be named.
        for n in ["read", "pselect", "mount", "ptrace", "ioctl", "personality"] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert!(!names.contains(&"clone3"), "clone3 is the default's ENOSYS");
        let mount = p
            .syscalls
            .iter()
            .find(|s| s.names.iter().any(|n| n == "mount"))
            .unwrap();
        assert!(
            mount.names.len() > 1,
            "one entry per action: {:?}",
            mount.names
        );
        assert_eq!(mount.action, "SCMP_ACT_ERRNO");
        // ioctl: every comparison on the 32-bit cmd is a mask of its low bits.
        // One entry whose comparisons, all on the command (runsc ORs a repeated argument),
        // are masks of its low 32 bits.
        let ioctl: Vec<_> = p.syscalls.iter().filter(|s| s.names == ["ioctl"]).collect();
        assert_eq!(ioctl.len(), 1);
        assert_eq!(ioctl[0].action, "SCMP_ACT_ALLOW");
        assert!(ioctl[0].args.len() > 1);
        for a in &ioctl[0].args {
            assert_eq!((a.index, a.op.as_str()), (1, "SCMP_CMP_MASKED_EQ"));
            assert!(a.value <= 0xffff_ffff, "{a:?}");
        }
    }

    #[test]
    fn what_runsc_cannot_say_keeps_the_trampoline() {
        let enosys = |calls: serde_json::Value| {
            let p = json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
                           "syscalls": calls});
            runsc_profile(&parse(p), &table())
        };
        let deny_ptrace = json!({"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"});
        let ok = enosys(
            json!([deny_ptrace, {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                               {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]),
        )
        .unwrap();
        let names: Vec<_> = ok.syscalls.iter().map(|s| s.names.clone()).collect();
        assert_eq!(names, [vec!["read"], vec!["ptrace"]]);
        // An errno other than EPERM or ENOSYS.
        let r = enosys(json!([deny_ptrace,
            {"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]));
        assert!(r.unwrap_err().contains("no action"));
        // ptrace allowed, or refused only for some arguments: a tracer could answer TRACE.
        let r = enosys(json!([{"names": ["ptrace"], "action": "SCMP_ACT_ALLOW"}]));
        assert!(r.unwrap_err().contains("ptrace"));
        let r = enosys(json!([{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "op": "SCMP_CMP_EQ", "value": 16}]}]));
        assert!(r.unwrap_err().contains("ptrace"));
        // Defaults other than ENOSYS.
        for (d, e) in [
            ("SCMP_ACT_ALLOW", None),
            ("SCMP_ACT_ERRNO", None),
            ("SCMP_ACT_KILL", None),
            ("SCMP_ACT_ERRNO", Some(13)),
        ] {
            let mut p = json!({"defaultAction": d, "syscalls": [deny_ptrace]});
            if let Some(e) = e {
                p["defaultErrnoRet"] = json!(e);
            }
            let r = runsc_profile(&parse(p), &table());
            assert!(r.unwrap_err().contains("not ENOSYS"), "{d} {e:?}");
        }
        // Two actions for one call.
        let r = enosys(json!([deny_ptrace,
            {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "op": "SCMP_CMP_EQ", "value": 8}]},
            {"names": ["personality"], "action": "SCMP_ACT_KILL",
             "args": [{"index": 0, "op": "SCMP_CMP_EQ", "value": 9}]}]));
        assert!(r.unwrap_err().contains("different actions"));
        // KILL_PROCESS and LOG have no runsc action.
        for a in ["SCMP_ACT_KILL_PROCESS", "SCMP_ACT_LOG"] {
            let r = enosys(json!([deny_ptrace, {"names": ["mount"], "action": a}]));
            assert!(r.is_err(), "{a}");
        }
    }
}
