//! `linux.memoryPolicy` (runtime-spec 1.3): the NUMA memory policy of the container's
//! processes, set with set_mempolicy(2) by the init and by every exec'd process before
//! their execve (a policy is per task, inherited at fork and kept across execve), as runc
//! does. Checked in the parent, where a bad mode, flag or node list fails the create (or
//! exec) before anything is made.

use super::cpulist;
use super::sys;
use crate::spec::MemoryPolicy;

/// The modes, as `<linux/mempolicy.h>` numbers them.
pub const MODES: [(&str, libc::c_int); 7] = [
    ("MPOL_DEFAULT", 0),
    ("MPOL_PREFERRED", 1),
    ("MPOL_BIND", 2),
    ("MPOL_INTERLEAVE", 3),
    ("MPOL_LOCAL", 4),
    ("MPOL_PREFERRED_MANY", 5),
    ("MPOL_WEIGHTED_INTERLEAVE", 6),
];

/// The mode flags, or-ed into the mode.
pub const FLAGS: [(&str, libc::c_int); 3] = [
    ("MPOL_F_NUMA_BALANCING", 1 << 13),
    ("MPOL_F_RELATIVE_NODES", 1 << 14),
    ("MPOL_F_STATIC_NODES", 1 << 15),
];

/// A memory policy the spec asks for that cannot be set; each names the field, then says
/// what is wrong in runc's words ("invalid memory policy ...", "memory policy mode
/// requires ..."), which scripts and runc's suite look for.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MemPolicyError {
    /// An empty string is a policy without `mode` (`{}`), as runc reads it.
    #[error("linux.memoryPolicy.mode: invalid memory policy mode {0:?} (one of MPOL_DEFAULT, MPOL_PREFERRED, MPOL_BIND, MPOL_INTERLEAVE, MPOL_LOCAL, MPOL_PREFERRED_MANY, MPOL_WEIGHTED_INTERLEAVE)")]
    Mode(String),
    #[error("linux.memoryPolicy.flags[{index}]: invalid memory policy flag {flag:?} (one of MPOL_F_NUMA_BALANCING, MPOL_F_RELATIVE_NODES, MPOL_F_STATIC_NODES)")]
    Flag { index: usize, flag: String },
    /// The list's own reason in the message, not as a source: a chained report
    /// (`{:#}`) would print it twice.
    #[error("linux.memoryPolicy.nodes: invalid memory policy nodes {nodes:?}: {err}")]
    Nodes {
        nodes: String,
        err: cpulist::ListError,
    },
    #[error(
        "linux.memoryPolicy.nodes: {mode}: memory policy mode requires 0 nodes but got {count}"
    )]
    NoNodes { mode: String, count: u32 },
    #[error(
        "linux.memoryPolicy.nodes: {mode}: memory policy mode requires at least one node but got 0"
    )]
    NeedsNodes { mode: String },
}

/// What set_mempolicy(2) is called with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemPolicy {
    /// The mode with its flags or-ed in.
    pub mode: libc::c_int,
    pub nodes: Vec<libc::c_ulong>,
}

impl MemPolicy {
    /// The spec's policy checked as runc checks it: a known mode and flags, and nodes as
    /// the mode wants them (none for `MPOL_DEFAULT` and `MPOL_LOCAL`, at least one for
    /// the binding and interleaving modes, any for `MPOL_PREFERRED`). Whether the nodes
    /// exist, and flags the kernel refuses together, are the kernel's to say (at create).
    pub fn from_spec(p: &MemoryPolicy) -> Result<MemPolicy, MemPolicyError> {
        let mode = MODES
            .iter()
            .find(|(n, _)| *n == p.mode)
            .map(|(_, m)| *m)
            .ok_or_else(|| MemPolicyError::Mode(p.mode.clone()))?;
        let mut flags = 0;
        for (index, f) in p.flags.iter().enumerate() {
            flags |= FLAGS
                .iter()
                .find(|(n, _)| n == f)
                .map(|(_, v)| *v)
                .ok_or_else(|| MemPolicyError::Flag {
                    index,
                    flag: f.clone(),
                })?;
        }
        let list = p.nodes.as_deref().unwrap_or("");
        let nodes = cpulist::parse(list).map_err(|err| MemPolicyError::Nodes {
            nodes: list.to_string(),
            err,
        })?;
        let n = cpulist::count(&nodes);
        match p.mode.as_str() {
            "MPOL_DEFAULT" | "MPOL_LOCAL" if n != 0 => Err(MemPolicyError::NoNodes {
                mode: p.mode.clone(),
                count: n,
            }),
            "MPOL_BIND"
            | "MPOL_INTERLEAVE"
            | "MPOL_PREFERRED_MANY"
            | "MPOL_WEIGHTED_INTERLEAVE"
                if n == 0 =>
            {
                Err(MemPolicyError::NeedsNodes {
                    mode: p.mode.clone(),
                })
            }
            _ => Ok(MemPolicy {
                mode: mode | flags,
                nodes,
            }),
        }
    }

    /// In the child, before the execve (and before any seccomp filter, which may deny the
    /// call): the calling task's policy.
    pub fn apply(&self) -> std::io::Result<()> {
        sys::set_mempolicy(self.mode, &self.nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: &str, nodes: Option<&str>, flags: &[&str]) -> Result<MemPolicy, String> {
        MemPolicy::from_spec(&MemoryPolicy {
            mode: mode.into(),
            nodes: nodes.map(Into::into),
            flags: flags.iter().map(|f| f.to_string()).collect(),
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn modes_flags_and_nodes() {
        assert_eq!(
            policy("MPOL_BIND", Some("0-1"), &["MPOL_F_STATIC_NODES"]).unwrap(),
            MemPolicy {
                mode: 2 | 1 << 15,
                nodes: vec![3]
            }
        );
        assert_eq!(
            policy("MPOL_DEFAULT", None, &[]).unwrap().nodes,
            Vec::<libc::c_ulong>::new()
        );
        assert_eq!(policy("MPOL_LOCAL", Some(""), &[]).unwrap().mode, 4);
        assert_eq!(policy("MPOL_PREFERRED", None, &[]).unwrap().mode, 1);
        assert_eq!(
            policy("MPOL_WEIGHTED_INTERLEAVE", Some("0"), &[])
                .unwrap()
                .mode,
            6
        );
    }

    #[test]
    fn bad_policies_name_the_field() {
        for (mode, nodes, flags, want) in [
            (
                "MPOL_NOPE",
                None,
                &[][..],
                "linux.memoryPolicy.mode: invalid memory policy mode \"MPOL_NOPE\"",
            ),
            (
                "MPOL_BIND",
                Some("0"),
                &["MPOL_F_X"][..],
                "linux.memoryPolicy.flags[0]: invalid memory policy flag \"MPOL_F_X\"",
            ),
            (
                "MPOL_BIND",
                None,
                &[][..],
                "linux.memoryPolicy.nodes: MPOL_BIND: memory policy mode requires at least one node but got 0",
            ),
            (
                "MPOL_INTERLEAVE",
                Some(" "),
                &[][..],
                "linux.memoryPolicy.nodes: MPOL_INTERLEAVE: memory policy mode requires at least one node",
            ),
            (
                "MPOL_DEFAULT",
                Some("0"),
                &[][..],
                "linux.memoryPolicy.nodes: MPOL_DEFAULT: memory policy mode requires 0 nodes but got 1",
            ),
            (
                "MPOL_DEFAULT",
                Some("0-7"),
                &[][..],
                "linux.memoryPolicy.nodes: MPOL_DEFAULT: memory policy mode requires 0 nodes but got 8",
            ),
            (
                "",
                Some("0-7"),
                &[][..],
                "linux.memoryPolicy.mode: invalid memory policy mode \"\"",
            ),
            (
                "MPOL_BIND",
                Some("x"),
                &[][..],
                "linux.memoryPolicy.nodes: invalid memory policy nodes \"x\": \"x\" is not a number",
            ),
        ] {
            let e = policy(mode, nodes, flags).unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
    }

    #[test]
    fn a_node_list_error_is_said_once_in_a_chained_report() {
        let e = MemPolicy::from_spec(&MemoryPolicy {
            mode: "MPOL_BIND".into(),
            nodes: Some("9000".into()),
            flags: Vec::new(),
        })
        .unwrap_err();
        let chained = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(
            chained.matches("the largest number the kernel has").count(),
            1,
            "{chained}"
        );
    }
}
