//! Calling runsc: the global flags from the record and the current call, a clean
//! environment, and three ways to run it.
//!
//! | way | used for | what moat does |
//! |---|---|---|
//! | [`Runsc::exec`] | foreground `exec`, `events` | `execve`: nothing stays between the client and runsc (exit status, signals, stdio) |
//! | [`Runsc::wait`] | `create`, `start`, detached `exec`, `kill`, `pause`, `resume`, `ps` | spawn with the caller's stdio, forward signals, wait, map any failure status (runsc: 128) to runc's 1 |
//! | [`Runsc::output`] | `state`, `list`, `delete`, the `kill` pre-check | spawn, capture stdout and stderr, post-process |
//!
//! moat is never a subreaper, so everything `runsc create`/`exec --detach` leaves behind
//! (sandbox, gofer, `runsc-exec` child) is reparented to the client's subreaper (the
//! shim, conmon), exactly as when the client calls runsc itself. Before runsc runs,
//! every descriptor above 2 is marked close-on-exec (moat's own are already; this also
//! covers those the caller leaked) and `MOAT_*` variables are removed from the
//! environment. moat never changes directory, so relative `--pid-file`, `--log` and
//! `--console-socket` paths mean what the caller meant.

use std::ffi::{CString, OsString};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use anyhow::{Context as _, Result};

use super::Gvisor;
use crate::container::Context;
use crate::linux::{signal, sys};

/// One runsc invocation: global flags fixed at construction, then the subcommand.
pub struct Runsc<'a> {
    gv: &'a Gvisor,
    argv: Vec<OsString>,
    /// `--log` as passed to runsc.
    log: Option<std::path::PathBuf>,
    /// A cgroup v2 `cgroup.procs` (open for writing) runsc is started in.
    cgroup_procs: Option<BorrowedFd<'a>>,
    /// The subcommand, and the container id it names ([`Runsc::id`]).
    sub: String,
    id: Option<String>,
}

/// What a captured runsc call printed and how it ended.
pub struct Output {
    /// The exit status; 128 when runsc was killed by a signal.
    pub code: i32,
    /// How runsc ended, for the message when it printed none.
    pub end: crate::linux::signal::ChildEnd,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Output {
    /// The error runsc reported, trimmed to one line (runsc prints it on stderr).
    pub fn error(&self) -> String {
        let msg = self.stderr.trim();
        let msg = msg.lines().last().unwrap_or("").trim();
        if msg.is_empty() {
            format!("runsc {}", self.end)
        } else {
            msg.to_string()
        }
    }

    pub fn not_exist(&self) -> bool {
        self.code != 0 && self.stderr.contains("does not exist")
    }
}

/// runsc writes its error object to `--log` without a newline; clients expect one object
/// per line (containerd decodes a stream, but a later line must not run on).
pub fn end_line(log: &std::path::Path) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .open(log)
    else {
        return;
    };
    let mut last = [0u8; 1];
    let ends_open =
        f.seek(SeekFrom::End(-1)).is_ok() && f.read_exact(&mut last).is_ok() && last[0] != b'\n';
    if ends_open {
        let _ = f.write_all(b"\n");
    }
}

/// runsc's root holds state for exactly the container `id` (`<id>_sandbox:<sandbox>.state`,
/// the sandbox being the container itself or its pod's).
pub fn known_exactly(root: &std::path::Path, id: &str) -> bool {
    let prefix = format!("{id}_sandbox:");
    std::fs::read_dir(root).is_ok_and(|rd| {
        rd.flatten().any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(&prefix) && n.ends_with(".state")
        })
    })
}

/// The process environment minus moat's own variables.
pub fn environment() -> Vec<(OsString, OsString)> {
    without_moat(std::env::vars_os())
}

fn without_moat(vars: impl Iterator<Item = (OsString, OsString)>) -> Vec<(OsString, OsString)> {
    vars.filter(|(k, _)| !k.as_bytes().starts_with(b"MOAT_"))
        .collect()
}

/// `runsc ARGS` with no global flags, captured ([`Runsc::output`]): for asking a runsc
/// binary about itself (`super::probe`), where no container exists yet.
pub fn plain_output(runsc: &std::path::Path, args: &[&str]) -> Result<Output> {
    let gv = Gvisor {
        runsc: runsc.into(),
        root: std::path::PathBuf::new(),
        platform: String::new(),
        network: String::new(),
        oci_seccomp: false,
        systemd_cgroup: false,
        pod: None,
        control_netns: None,
    };
    let mut argv: Vec<OsString> = vec![runsc.as_os_str().into()];
    argv.extend(args.iter().map(OsString::from));
    Runsc {
        gv: &gv,
        argv,
        log: None,
        cgroup_procs: None,
        sub: args.first().copied().unwrap_or_default().to_string(),
        id: None,
    }
    .output()
}

impl<'a> Runsc<'a> {
    /// `runsc <global flags> <sub>`; the global flags replay the record (root, platform,
    /// network, seccomp, systemd) and pass this call's `--log`, `--log-format`, `--debug`.
    pub fn new(gv: &'a Gvisor, g: &Context, sub: &str) -> Runsc<'a> {
        let mut argv: Vec<OsString> = vec![gv.runsc.clone().into_os_string()];
        let mut flag = |name: &str, value: &std::ffi::OsStr| {
            let mut f = OsString::from(format!("--{name}="));
            f.push(value);
            argv.push(f);
        };
        flag("root", gv.root.as_os_str());
        flag("platform", gv.platform.as_ref());
        flag("network", gv.network.as_ref());
        if let Some(log) = &g.log {
            flag("log", log.as_os_str());
            flag("log-format", g.log_format.as_ref());
        }
        if gv.oci_seccomp {
            argv.push("--oci-seccomp".into());
        }
        if gv.systemd_cgroup {
            argv.push("--systemd-cgroup".into());
        }
        if g.debug {
            argv.push("--debug".into());
        }
        argv.push(sub.into());
        Runsc {
            gv,
            argv,
            log: g.log.clone(),
            cgroup_procs: None,
            sub: sub.to_string(),
            id: None,
        }
    }

    /// As [`Runsc::new`] without `--log`: for calls whose errors moat reports itself
    /// (one error object per failing call in the log, as clients expect).
    pub fn quiet(gv: &'a Gvisor, g: &Context, sub: &str) -> Runsc<'a> {
        let mut g = g.clone();
        g.log = None;
        Runsc::new(gv, &g, sub)
    }

    /// runsc 20221219 re-executes itself to detach and drops every argument containing
    /// "detach" on the way (not only the flag), which would silently change the call.
    pub fn check_detach_bug(&self) -> Result<()> {
        match self
            .argv
            .iter()
            .skip(1)
            .find(|a| *a != "--detach" && a.as_bytes().windows(6).any(|w| w == b"detach"))
        {
            Some(a) => anyhow::bail!(
                "{:?}: runsc drops every argument containing \"detach\" when it detaches; \
                 choose another id or path",
                a
            ),
            None => Ok(()),
        }
    }

    /// Starts runsc in the cgroup v2 directory whose `cgroup.procs` is `procs`: the
    /// sandbox it creates is born there (`super::egress`).
    pub fn in_cgroup(mut self, procs: Option<BorrowedFd<'a>>) -> Self {
        self.cgroup_procs = procs;
        self
    }

    /// Appends the container id. runsc takes an id it has no state for as a prefix of
    /// one it has (`web` finds `web2`): every call but create, run and restore is refused
    /// here unless runsc's root holds state for exactly this id ([`known_exactly`]), so a
    /// delete or kill of a container runsc lost can never reach another.
    pub fn id(mut self, id: &str) -> Self {
        self.argv.push(id.into());
        self.id = Some(id.to_string());
        self
    }

    /// The refusal of [`Runsc::id`], in runsc's words for a container it does not know.
    fn unknown(&self) -> Option<String> {
        let id = self.id.as_deref()?;
        if matches!(self.sub.as_str(), "create" | "run" | "restore")
            || known_exactly(&self.gv.root, id)
        {
            return None;
        }
        Some(format!("container {id:?} does not exist"))
    }

    /// Appends `--name=value`.
    pub fn opt(mut self, name: &str, value: impl Into<OsString>) -> Self {
        let mut f = OsString::from(format!("--{name}="));
        f.push(value.into());
        self.argv.push(f);
        self
    }

    /// Appends `--name=value` when there is a value.
    pub fn opt_some<V: Into<OsString>>(self, name: &str, value: Option<V>) -> Self {
        match value {
            Some(v) => self.opt(name, v),
            None => self,
        }
    }

    /// Appends `--name` when set.
    pub fn flag(mut self, name: &str, set: bool) -> Self {
        if set {
            self.argv.push(format!("--{name}").into());
        }
        self
    }

    /// Appends positional arguments (the id, a signal, a command).
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    #[cfg(test)]
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }

    /// Path, argv and environment as `execve` takes them.
    fn exec_args(&self) -> (CString, Vec<CString>, Vec<CString>) {
        let cstr = |b: Vec<u8>| CString::new(b).unwrap_or_default();
        let path = cstr(self.gv.runsc.as_os_str().as_bytes().to_vec());
        let argv = self
            .argv
            .iter()
            .map(|a| cstr(a.clone().into_vec()))
            .collect();
        let envp = environment()
            .into_iter()
            .map(|(k, v)| {
                let mut b = k.into_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                cstr(b)
            })
            .collect();
        (path, argv, envp)
    }

    /// Starts runsc with `stdio` in place of moat's 0-2 where given.
    fn spawn(&self, stdio: [Option<BorrowedFd<'_>>; 3]) -> Result<(i32, OwnedFd)> {
        if let Some(e) = self.unknown() {
            anyhow::bail!("{e}");
        }
        let netns = self.control_netns()?;
        let (path, argv, envp) = self.exec_args();
        sys::spawn_in_cgroup(
            &path,
            &argv,
            &envp,
            stdio,
            self.cgroup_procs,
            netns.as_ref().map(AsFd::as_fd),
        )
        .with_context(|| format!("execute {}", self.gv.runsc.display()))
    }

    /// The container's control namespace (`super::control`), opened for the child that
    /// executes runsc; `None` for a record made before moat pinned one.
    fn control_netns(&self) -> Result<Option<OwnedFd>> {
        self.gv
            .control_netns
            .as_deref()
            .map(super::control::open)
            .transpose()
    }

    /// Replaces moat with runsc. Returns only on failure.
    pub fn exec(self) -> anyhow::Error {
        if let Some(e) = self.unknown() {
            return anyhow::anyhow!("{e}");
        }
        // moat becomes runsc: it enters the control namespace itself.
        match self.control_netns() {
            Ok(Some(ns)) => {
                if let Err(e) = sys::setns(ns.as_fd(), libc::CLONE_NEWNET) {
                    return anyhow::Error::from(e).context("enter runsc's control namespace");
                }
            }
            Ok(None) => {}
            Err(e) => return e,
        }
        if let Err(e) = sys::close_range_from(sys::FdNumber(3), true) {
            return anyhow::Error::from(e).context("close_range");
        }
        let (path, argv, envp) = self.exec_args();
        let err = sys::execve(&path, &argv, &envp);
        anyhow::Error::from(err).context(format!("execute {}", self.gv.runsc.display()))
    }

    /// Runs runsc with the caller's stdio, forwarding signals, and returns runc's status
    /// for a runtime call: 0, or 1 for any failure (runsc's message is already on stderr
    /// and in `--log`).
    pub fn wait(self) -> Result<i32> {
        self.wait_stdio([None, None, None])
    }

    /// As [`Runsc::wait`], with `stdio` in place of moat's own 0-2 where given.
    pub fn wait_stdio(self, stdio: [Option<BorrowedFd<'_>>; 3]) -> Result<i32> {
        let log = self.log.clone();
        Ok(match self.wait_with(stdio)? {
            0 => 0,
            _ => {
                if let Some(log) = log {
                    end_line(&log);
                }
                1
            }
        })
    }

    /// As [`Runsc::wait`], but returns runsc's own status (a foreground process's).
    pub fn wait_raw(self) -> Result<i32> {
        self.wait_with([None, None, None])
    }

    fn wait_with(self, stdio: [Option<BorrowedFd<'_>>; 3]) -> Result<i32> {
        sys::close_range_from(sys::FdNumber(3), true).context("close_range")?;
        let set = signal::forwarded_set();
        set.thread_block().context("block signals")?;
        // The child empties its signal mask before it executes runsc.
        let (pid, pidfd) = self.spawn(stdio)?;
        // Signals stay blocked: a foreground `run` still has to delete after this.
        signal::forward_and_wait(pid, &pidfd, &set, None).context("wait for runsc")
    }

    /// Runs runsc with stdin from /dev/null and captures its output. stdout and stderr go
    /// to anonymous files, read once runsc has exited: no pipe to drain while it runs.
    pub fn output(self) -> Result<Output> {
        Ok(self
            .output_bounded(None)?
            .expect("an unbounded call always ends"))
    }

    /// As [`Runsc::output`], but runsc is SIGKILLed (and reaped) when it has not ended
    /// within `timeout`: `None` then.
    pub fn output_within(self, timeout: std::time::Duration) -> Result<Option<Output>> {
        self.output_bounded(Some(timeout))
    }

    fn output_bounded(self, timeout: Option<std::time::Duration>) -> Result<Option<Output>> {
        if let Some(e) = self.unknown() {
            return Ok(Some(Output {
                code: 1,
                end: crate::linux::signal::ChildEnd::Exited(1),
                stdout: Vec::new(),
                stderr: e,
            }));
        }
        sys::close_range_from(sys::FdNumber(3), true).context("close_range")?;
        let null = std::fs::File::open("/dev/null").context("open /dev/null")?;
        let out = sys::memfd(c"runsc-stdout").context("memfd_create")?;
        let err = sys::memfd(c"runsc-stderr").context("memfd_create")?;
        let (pid, pidfd) =
            self.spawn([Some(null.as_fd()), Some(out.as_fd()), Some(err.as_fd())])?;
        drop(null);
        if let Some(t) = timeout {
            if !sys::poll_readable_within(pidfd.as_fd(), t).context("wait for runsc")? {
                let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
                return Ok(None);
            }
        }
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None)
            .context("wait for runsc")?;
        let code = match status {
            nix::sys::wait::WaitStatus::Exited(_, c) => c,
            _ => 128,
        };
        let read = |fd: OwnedFd| -> Result<Vec<u8>> {
            let mut f = std::fs::File::from(fd);
            f.seek(SeekFrom::Start(0))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)?;
            Ok(buf)
        };
        Ok(Some(Output {
            code,
            end: status.into(),
            stdout: read(out).context("read runsc's output")?,
            stderr: String::from_utf8_lossy(&read(err).context("read runsc's output")?)
                .into_owned(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn global(log: Option<&str>, debug: bool) -> Context {
        Context::new(
            Some("/run/moat".into()),
            crate::linux::rootless::Flag::False,
            false,
            log.map(Into::into),
            "json".into(),
            debug,
        )
        .unwrap()
    }

    fn gv() -> Gvisor {
        Gvisor {
            runsc: "/usr/bin/runsc".into(),
            root: "/run/moat/c1/runsc".into(),
            platform: "ptrace".into(),
            network: "none".into(),
            oci_seccomp: true,
            systemd_cgroup: true,
            pod: None,
            control_netns: None,
        }
    }

    #[test]
    fn global_flags_replay_the_record_and_pass_this_calls_log() {
        let gv = gv();
        let r = Runsc::new(&gv, &global(Some("log.json"), true), "kill")
            .flag("all", true)
            .flag("never", false)
            .args(["c1", "9"]);
        let got: Vec<String> = r
            .argv()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            [
                "/usr/bin/runsc",
                "--root=/run/moat/c1/runsc",
                "--platform=ptrace",
                "--network=none",
                "--log=log.json",
                "--log-format=json",
                "--oci-seccomp",
                "--systemd-cgroup",
                "--debug",
                "kill",
                "--all",
                "c1",
                "9"
            ]
        );
        // --criu and --rootless never reach runsc.
        assert!(!got
            .iter()
            .any(|a| a.contains("criu") || a.contains("rootless")));
    }

    #[test]
    fn moat_variables_are_not_passed_on() {
        let vars = [
            ("MOAT_RUNTIME", "gvisor"),
            ("PATH", "/bin"),
            ("XMOAT_", "1"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let kept: Vec<_> = without_moat(vars.into_iter())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(kept, ["PATH", "XMOAT_"]);
    }
}
