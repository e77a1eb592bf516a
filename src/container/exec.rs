//! `exec`: a new process in a running container.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

/// runc's `exec` flags.
#[derive(Debug, Clone, Default)]
pub struct Request {
    pub id: String,
    /// The command and its arguments (ignored with `process`).
    pub command: Vec<String>,
    /// A process.json; the other process flags are then ignored.
    pub process: Option<PathBuf>,
    pub console_socket: Option<PathBuf>,
    pub cwd: Option<String>,
    /// `KEY=VALUE`, replacing the container's value of `KEY`.
    pub env: Vec<String>,
    pub tty: bool,
    /// `uid[:gid]`, numbers only.
    pub user: Option<String>,
    pub additional_gids: Vec<u32>,
    pub detach: bool,
    pub pid_file: Option<PathBuf>,
    pub process_label: Option<String>,
    pub apparmor: Option<String>,
    pub no_new_privs: bool,
    /// Capabilities added (never beyond the container's bounding set under RESTRICTED).
    pub cap: Vec<String>,
    pub preserve_fds: u32,
    /// A sub-cgroup of the container's to run in.
    pub cgroup: Option<String>,
    pub ignore_paused: bool,
}

/// `uid[:gid]`, numbers only: a name would be resolved with the host's passwd, and a
/// lenient parser is how users end up as someone else (crun CVE-2026-30892).
pub(crate) fn parse_user(s: &str) -> Result<(u32, Option<u32>)> {
    let (u, g) = match s.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (s, None),
    };
    let num = |v: &str, what: &str| -> Result<u32> {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            bail!("--user {s:?}: {what} must be a number");
        }
        v.parse::<u32>()
            .ok()
            .filter(|n| *n != u32::MAX)
            .with_context(|| format!("--user {s:?}: {what} out of range"))
    };
    Ok((num(u, "uid")?, g.map(|g| num(g, "gid")).transpose()?))
}

#[cfg(test)]
mod tests {
    use super::parse_user;

    #[test]
    fn user_forms() {
        assert_eq!(parse_user("0").unwrap(), (0, None));
        assert_eq!(parse_user("1000:1000").unwrap(), (1000, Some(1000)));
        for bad in [
            "",
            "root",
            "1000:",
            ":1000",
            "-1",
            "1 ",
            "4294967295",
            "99999999999",
            "1000:x",
        ] {
            assert!(parse_user(bad).is_err(), "{bad:?} accepted");
        }
    }
}
