//! `moat exec`: run a new process in a container, with runc's flags.

use std::path::PathBuf;

use anyhow::{bail, Context};

use super::{Global, Result};
use crate::linux::attrs::Attrs;
use crate::linux::exec::{self, ExecOpts};
use crate::linux::seccomp::Filter;
use crate::linux::{capabilities, signal, sys};
use crate::spec::Process;
use crate::state::{self, ContainerDir, Status};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Unix socket to send the pty master to (with --tty)
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// Working directory inside the container
    #[arg(long)]
    pub cwd: Option<String>,
    /// Set an environment variable (KEY=VALUE)
    #[arg(short = 'e', long = "env")]
    pub env: Vec<String>,
    /// Allocate a pseudo-TTY
    #[arg(short = 't', long)]
    pub tty: bool,
    /// uid[:gid] to run as
    #[arg(short = 'u', long)]
    pub user: Option<String>,
    /// Additional gids
    #[arg(short = 'g', long = "additional-gids")]
    pub additional_gids: Vec<u32>,
    /// Path to a process.json; other process flags are then ignored
    #[arg(short = 'p', long)]
    pub process: Option<PathBuf>,
    /// Detach from the process
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// File to write the process pid to
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// SELinux label for the process
    #[arg(long = "process-label")]
    pub process_label: Option<String>,
    /// AppArmor profile for the process
    #[arg(long)]
    pub apparmor: Option<String>,
    /// Set no_new_privs
    #[arg(long = "no-new-privs")]
    pub no_new_privs: bool,
    /// Add a capability (must be in the container's bounding set)
    #[arg(short = 'c', long = "cap")]
    pub cap: Vec<String>,
    /// Pass N additional fds (from 3 up)
    #[arg(long = "preserve-fds", default_value_t = 0)]
    pub preserve_fds: u32,
    /// Sub-cgroup of the container to run in
    #[arg(long)]
    pub cgroup: Option<String>,
    /// Allow exec into a paused container
    #[arg(long = "ignore-paused")]
    pub ignore_paused: bool,
    pub id: String,
    /// The command and its arguments
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// `bounding`: the container's bounding set, which `--cap` may not exceed (RESTRICTED);
/// `None` under OPEN, where moat does what runc does.
fn build_process(a: &Args, spec_process: &Process, bounding: Option<u64>) -> Result<Process> {
    if let Some(path) = &a.process {
        let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        // Keys checked first (duplicates, case variants of fields): spec::keys.
        let mut p: Process = crate::spec::from_slice(&bytes)
            .map_err(|(field, msg)| anyhow::anyhow!("{}: {field}: {msg}", path.display()))?;
        p.terminal |= a.tty;
        return Ok(p);
    }
    if a.command.is_empty() {
        bail!("exec needs a command to run");
    }
    let mut p = spec_process.clone();
    p.args = a.command.clone();
    p.terminal = a.tty;
    for kv in &a.env {
        let key = kv.split_once('=').map_or(kv.as_str(), |(k, _)| k);
        p.env
            .retain(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) != key);
        p.env.push(kv.clone());
    }
    if let Some(cwd) = &a.cwd {
        p.cwd = cwd.clone();
    }
    if let Some(u) = &a.user {
        let (uid, gid) = crate::container::exec::parse_user(u)?;
        p.user.uid = uid;
        p.user.gid = gid.unwrap_or(0);
    }
    if !a.additional_gids.is_empty() {
        p.user.additional_gids = a.additional_gids.clone();
    }
    if a.no_new_privs {
        p.no_new_privileges = Some(true);
    }
    if let Some(aa) = &a.apparmor {
        p.apparmor_profile = Some(aa.clone());
    }
    if let Some(l) = &a.process_label {
        p.selinux_label = Some(l.clone());
    }
    if !a.cap.is_empty() {
        let caps = p.capabilities.get_or_insert_with(Default::default);
        for c in &a.cap {
            let Some(bit) = capabilities::number(c) else {
                bail!("--cap {c}: unknown capability");
            };
            // Never wider than the container: exec must not be a way out of its bounding set.
            if bounding.is_some_and(|b| b & (1 << bit) == 0) {
                bail!("--cap {c}: not in the container's bounding set");
            }
            let name = capabilities::NAMES[bit as usize].to_string();
            for set in [
                &mut caps.bounding,
                &mut caps.effective,
                &mut caps.permitted,
                &mut caps.ambient,
            ] {
                let v = set.get_or_insert_with(Vec::new);
                if !v.contains(&name) {
                    v.push(name.clone());
                }
            }
        }
    }
    Ok(p)
}

pub fn run(g: &Global, a: Args) -> Result<i32> {
    let dir = ContainerDir::open_read(&g.state_root()?, &a.id)?;
    let rec = dir.load()?;
    if let Some(gv) = rec.backend.gvisor() {
        return crate::gvisor::exec(&g.context()?, &dir, &rec, gv, &a.request());
    }
    // exec never passes socket-activation fds (runc neither): LISTEN_* are ignored.
    crate::container::before_fork(a.preserve_fds, false)?;
    match rec.status(&dir) {
        Status::Stopped => bail!("cannot exec in a stopped container"),
        Status::Paused if !a.ignore_paused => {
            bail!("cannot exec in a paused container (use --ignore-paused to override)")
        }
        _ => {}
    }
    let spec = dir.load_spec()?;
    let container_caps =
        capabilities::from_spec(spec.process().capabilities.as_ref(), "process.capabilities")?;
    let bounding = (rec.policy != "open").then_some(container_caps.bounding);
    let mut process = build_process(&a, spec.process(), bounding)?;
    // On the host, before joining anything: the exec'd process's LSM labels follow these.
    let host = crate::linux::hostfacts::HostFacts::probe();
    if rec.policy == "restricted" {
        let removed = crate::policy::restrict_exec(&mut process, spec.process());
        if !removed.is_empty() {
            crate::log::debug(&format!(
                "policy: exec capabilities removed: {}",
                removed.join(" ")
            ));
        }
        let cfg = crate::policy::Config::load()?;
        let replaced = crate::policy::restrict_exec_lsm(&mut process, spec.process(), &cfg, &host)?;
        if !replaced.is_empty() {
            crate::log::debug(&format!(
                "policy: exec {} replaced by the container's (not in [restricted])",
                replaced.join(", ")
            ));
        }
    }
    if process.terminal && a.console_socket.is_none() && a.detach {
        bail!("a detached exec with a terminal needs a --console-socket to send it to");
    }
    let mut filters = Vec::new();
    while let Some(b) = dir.read_file(&state::seccomp_file(filters.len()))? {
        filters.push(
            Filter::from_bytes(&b).context("corrupt seccomp program in the state directory")?,
        );
    }
    let field = if a.process.is_some() {
        "process.json"
    } else {
        "process"
    };
    let attrs = Attrs::from_process(&process, field, filters, a.preserve_fds)?.on_host(&host);
    // Everything is read: the state directory's fd (a host directory) must not even be
    // open in the process that joins the container.
    drop(dir);
    let opts = ExecOpts {
        console_socket: a.console_socket.clone(),
        pid_file: a.pid_file.clone(),
        sub_cgroup: a.cgroup.clone(),
    };
    let set = signal::forwarded_set();
    if !a.detach {
        set.thread_block().context("block signals")?;
    }
    let started = exec::exec(&rec, &attrs, &opts)?;
    if a.detach {
        return Ok(0);
    }
    let pidfd = sys::pidfd_open(started.pid).context("pidfd_open")?;
    Ok(signal::forward_and_wait(
        started.pid,
        &pidfd,
        &set,
        started.console.as_ref(),
    )?)
}

impl Args {
    /// The flags as the lifecycle layer takes them.
    pub fn request(&self) -> crate::container::exec::Request {
        crate::container::exec::Request {
            id: self.id.clone(),
            command: self.command.clone(),
            process: self.process.clone(),
            console_socket: self.console_socket.clone(),
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            tty: self.tty,
            user: self.user.clone(),
            additional_gids: self.additional_gids.clone(),
            detach: self.detach,
            pid_file: self.pid_file.clone(),
            process_label: self.process_label.clone(),
            apparmor: self.apparmor.clone(),
            no_new_privs: self.no_new_privs,
            cap: self.cap.clone(),
            preserve_fds: self.preserve_fds,
            cgroup: self.cgroup.clone(),
            ignore_paused: self.ignore_paused,
        }
    }
}
