//! The command line, flag for flag as runc has it. One file per subcommand.

mod check;
pub(crate) mod create;
mod delete;
mod events;
pub(crate) mod exec;
mod features;
mod kill;
mod list;
mod pause;
mod policy;
mod ps;
pub(crate) mod run;
mod spec;
mod start;
mod state;
mod update;
pub(crate) mod verify;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::log;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Parser, Debug)]
#[command(
    name = "moat",
    disable_version_flag = true,
    about = "moat: a hardened, runc-compatible OCI runtime"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// runc's global flags. They are not stable across a container's life (podman's cleanup
/// `delete` drops some), so anything later calls need is recorded in the state at create.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// Root directory for container state (default /run/moat; $XDG_RUNTIME_DIR/moat rootless)
    #[arg(long, global = true)]
    pub root: Option<PathBuf>,
    /// Log file; always created when given
    #[arg(long, global = true)]
    pub log: Option<PathBuf>,
    /// Log format: text or json
    #[arg(long = "log-format", global = true, default_value = "text")]
    pub log_format: String,
    /// Debug logging
    #[arg(long, global = true)]
    pub debug: bool,
    /// Use systemd for cgroups (fails clearly where systemd is not running)
    #[arg(long = "systemd-cgroup", global = true)]
    pub systemd_cgroup: bool,
    /// Rootless mode: true, false or auto
    #[arg(long, global = true, default_value = "auto")]
    pub rootless: String,
    /// Path to criu (accepted for compatibility; checkpointing is not supported yet)
    #[arg(long, global = true)]
    pub criu: Option<String>,
    /// Print the version
    #[arg(short = 'v', long = "version")]
    pub version: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a container
    Create(create::Args),
    /// Start a created container
    Start(start::Args),
    /// Create and start a container
    Run(run::Args),
    /// Output the state of a container
    State(state::Args),
    /// Run a new process inside the container
    Exec(Box<exec::Args>),
    /// Send a signal to the container's init process
    Kill(kill::Args),
    /// Delete a container
    Delete(delete::Args),
    /// List containers
    List(list::Args),
    /// Suspend every process of the container
    Pause(pause::Args),
    /// Resume a paused container
    Resume(pause::Args),
    /// Explain the hardening policy for a bundle
    Policy(policy::Args),
    /// Compare what a container really got from the kernel with its policy
    Verify(verify::Args),
    /// What this host offers and what each moat control does here
    Check(check::Args),
    /// Create a new specification file
    Spec(spec::Args),
    /// Display the processes running inside a container
    Ps(ps::Args),
    /// Display container events such as OOM notifications and resource usage
    Events(events::Args),
    /// Update container resource constraints
    Update(Box<update::Args>),
    /// Show the enabled features
    Features(features::Args),
}

/// A failure with the exit status it maps to (1 for errors, like runc).
pub type Result<T> = anyhow::Result<T>;

pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let code = match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => 0,
                _ => 1,
            };
            let _ = e.print();
            return code;
        }
    };
    if cli.global.version {
        println!("moat version {VERSION}");
        println!(
            "commit: {}",
            option_env!("MOAT_COMMIT").unwrap_or("unknown")
        );
        println!("spec: {}", crate::spec::OCI_VERSION);
        return 0;
    }
    let format = match cli.global.log_format.as_str() {
        "json" => log::Format::Json,
        "text" => log::Format::Text,
        other => {
            log::error(&format!("invalid log format {other:?} (want text or json)"));
            return 1;
        }
    };
    if let Err(e) = log::init(cli.global.log.as_deref(), format, cli.global.debug) {
        eprintln!(
            "moat: cannot open log file {}: {e}",
            cli.global
                .log
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        );
        return 1;
    }
    if let Some(criu) = &cli.global.criu {
        log::warn(&format!(
            "--criu {criu} accepted but ignored: checkpoint/restore is not supported yet"
        ));
    }
    let Some(command) = cli.command else {
        let _ = <Cli as clap::CommandFactory>::command().print_help();
        return 0;
    };
    let g = &cli.global;
    let result = match command {
        Command::Create(a) => create::run(g, a),
        Command::Start(a) => start::run(g, a),
        Command::Run(a) => run::run(g, a),
        Command::State(a) => state::run(g, a),
        Command::Exec(a) => exec::run(g, *a),
        Command::Kill(a) => kill::run(g, a),
        Command::Delete(a) => delete::run(g, a),
        Command::List(a) => list::run(g, a),
        Command::Pause(a) => pause::pause(g, a),
        Command::Resume(a) => pause::resume(g, a),
        Command::Spec(a) => spec::run(g, a),
        Command::Policy(a) => policy::run(g, a),
        Command::Verify(a) => verify::run(g, a),
        Command::Check(a) => check::run(g, a),
        Command::Ps(a) => ps::run(g, a),
        Command::Events(a) => events::run(g, a),
        Command::Update(a) => update::run(g, *a),
        Command::Features(a) => features::run(g, a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain joined, outermost context first.
            let msg = e
                .chain()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(": ");
            log::error(&msg);
            1
        }
    }
}

/// What create, run and exec do before anything forks into a container: fds the caller
/// leaked must not reach it (CVE-2024-21626; the preserved range and socket-activation
/// fds excepted), and the moat binary must not be writable through `/proc/self/exe`.
pub fn before_fork(preserve_fds: u32) -> Result<()> {
    use anyhow::Context;
    let listen: u32 = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    crate::linux::sys::close_range_from(3 + preserve_fds + listen, true).context("close_range")?;
    crate::linux::exeseal::ensure().context("protect the moat binary")?;
    Ok(())
}

impl Global {
    /// `--rootless` resolved: `auto` is runc's rule (see `linux::rootless::detect`).
    pub fn rootless(&self) -> Result<bool> {
        crate::linux::rootless::detect(&self.rootless).map_err(anyhow::Error::msg)
    }

    /// The state root: `--root`, else /run/moat; rootless, `$XDG_RUNTIME_DIR/moat`, or
    /// a private `/tmp/moat-<uid>` when no runtime dir is set (hosts without logind).
    pub fn state_root(&self) -> Result<PathBuf> {
        if let Some(r) = &self.root {
            return Ok(r.clone());
        }
        if self.rootless()? {
            return Ok(crate::linux::rootless::state_root()?);
        }
        Ok(PathBuf::from("/run/moat"))
    }
}
