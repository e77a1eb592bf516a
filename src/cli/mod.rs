//! The command line, flag for flag as runc has it. One file per subcommand.

mod check;
mod checkpoint;
pub(crate) mod create;
pub(crate) mod delete;
mod events;
pub(crate) mod exec;
mod fast;
mod features;
mod kill;
mod list;
mod pause;
mod policy;
mod ps;
mod restore;
pub(crate) mod run;
mod spec;
pub(crate) mod start;
mod state;
mod update;
mod verify;

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
    /// Path to criu (default: criu on PATH), for checkpoint, restore, features and check
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
    /// Checkpoint a running container (CRIU)
    Checkpoint(Box<checkpoint::Args>),
    /// Restore a container from a previous checkpoint (CRIU)
    Restore(Box<restore::Args>),
}

/// A failure with the exit status it maps to (1 for errors, like runc).
pub type Result<T> = anyhow::Result<T>;

/// The command line parsed with only the named subcommand's part of the tree built: clap
/// builds (allocates, faults in) every argument of every subcommand it is given, which was
/// a third of the page faults of a short command such as `start` (docs/performance.md).
/// Help, an unknown or missing subcommand get the whole tree (usage, suggestions).
fn parse() -> std::result::Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let args = crate::linux::sys::args();
    if let Some(cli) = fast::parse(&args) {
        return Ok(cli);
    }
    let version_only = args.len() > 1 && args[1..].iter().all(|a| a == "-v" || a == "--version");
    let cmd = match subcommand_name(&args) {
        Some(name) => light_command(name),
        None if version_only => Some(light_root()),
        None => None,
    }
    .unwrap_or_else(Cli::command);
    let mut m = cmd.try_get_matches_from(args)?;
    Cli::from_arg_matches_mut(&mut m)
}

/// The subcommand named on the command line, when nothing asks for help: the first
/// argument that is neither a global flag nor a global flag's value.
fn subcommand_name(args: &[std::ffi::OsString]) -> Option<&str> {
    if args
        .iter()
        .skip(1)
        .any(|a| a == "-h" || a == "--help" || a == "help")
    {
        return None;
    }
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let a = a.to_str()?;
        match a {
            "--root" | "--log" | "--log-format" | "--rootless" | "--criu" => {
                it.next();
            }
            _ if a.starts_with('-') => {}
            _ => return Some(a),
        }
    }
    None
}

/// moat's root command with the global flags and one subcommand, as the derive builds them.
fn light_command(name: &str) -> Option<clap::Command> {
    use clap::Args as A;
    type Augment = fn(clap::Command) -> clap::Command;
    let (name, augment): (&'static str, Augment) = match name {
        "create" => ("create", create::Args::augment_args),
        "start" => ("start", start::Args::augment_args),
        "run" => ("run", run::Args::augment_args),
        "state" => ("state", state::Args::augment_args),
        "exec" => ("exec", exec::Args::augment_args),
        "kill" => ("kill", kill::Args::augment_args),
        "delete" => ("delete", delete::Args::augment_args),
        "list" => ("list", list::Args::augment_args),
        "pause" => ("pause", pause::Args::augment_args),
        "resume" => ("resume", pause::Args::augment_args),
        "policy" => ("policy", policy::Args::augment_args),
        "verify" => ("verify", verify::Args::augment_args),
        "check" => ("check", check::Args::augment_args),
        "spec" => ("spec", spec::Args::augment_args),
        "ps" => ("ps", ps::Args::augment_args),
        "events" => ("events", events::Args::augment_args),
        "update" => ("update", update::Args::augment_args),
        "features" => ("features", features::Args::augment_args),
        "checkpoint" => ("checkpoint", checkpoint::Args::augment_args),
        "restore" => ("restore", restore::Args::augment_args),
        _ => return None,
    };
    Some(light_root().subcommand(augment(clap::Command::new(name))))
}

/// moat's root command with the global flags only.
fn light_root() -> clap::Command {
    use clap::Args as A;
    Global::augment_args(clap::Command::new("moat").disable_version_flag(true))
}

/// The whole clap tree, for the man page and completions (`src/bin/moat-gen.rs`): what
/// clap parses, which the fast parser's tests keep a superset of what it parses.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// The whole call, between the step trace's first and last point (a profiling build's:
/// `linux/killpoint.rs`).
pub fn main() -> i32 {
    crate::linux::killpoint::mark("-", "main", "start");
    let code = call();
    crate::linux::killpoint::mark("-", "main", "exit");
    code
}

fn call() -> i32 {
    let cli = match parse() {
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
        println!("commit: {}", env!("MOAT_COMMIT"));
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
        Command::Checkpoint(a) => checkpoint::run(g, *a),
        Command::Restore(a) => restore::run(g, *a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // One line: the chain joined, outermost context first (an `ExitWith`, always
            // the outermost, is the status, not part of the message).
            let status = e.downcast_ref::<ExitWith>().map(|x| x.0);
            let msg = crate::error_text::one_line(e.chain().skip(usize::from(status.is_some())));
            log::error(&msg);
            status.unwrap_or(1)
        }
    }
}

/// The status a failed command exits with when it is not 1 (runc's `exec`: 255), as the
/// outermost context of its error; it is not part of the message.
#[derive(Debug, Clone, Copy)]
pub struct ExitWith(pub i32);

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl Global {
    /// The flags resolved once, as the lifecycle layer (`src/container/`) takes them.
    pub fn context(&self) -> Result<crate::container::Context> {
        let rootless = crate::linux::rootless::Flag::parse(&self.rootless)?;
        Ok(crate::container::Context::new(
            self.root.clone(),
            rootless,
            self.systemd_cgroup,
            self.log.clone(),
            self.log_format.clone(),
            self.debug,
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches};

    fn ids(c: &clap::Command) -> Vec<String> {
        let mut v: Vec<String> = c.get_arguments().map(|a| a.get_id().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn light_tree_matches_the_full_one() {
        let full = Cli::command();
        let mut n = 0;
        for sub in full.get_subcommands() {
            let name = sub.get_name();
            let light = light_command(name).unwrap_or_else(|| panic!("no light tree for {name}"));
            assert_eq!(ids(&light), ids(&full), "global flags, {name}");
            let lsub = light.find_subcommand(name).unwrap();
            assert_eq!(ids(lsub), ids(sub), "arguments of {name}");
            let subs = |c: &clap::Command| -> Vec<String> {
                c.get_subcommands()
                    .map(|s| s.get_name().to_string())
                    .collect()
            };
            assert_eq!(subs(lsub), subs(sub), "subcommands of {name}");
            n += 1;
        }
        assert_eq!(n, 20);
    }

    fn both(argv: &[&str]) -> (String, String) {
        let args: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
        let name = subcommand_name(&args).expect("a subcommand");
        let parse = |c: clap::Command| match c.try_get_matches_from(&args) {
            Ok(mut m) => format!("{:?}", Cli::from_arg_matches_mut(&mut m)),
            Err(e) => format!("{:?} {}", e.kind(), e.render()),
        };
        (parse(light_command(name).unwrap()), parse(Cli::command()))
    }

    #[test]
    fn light_and_full_parse_alike() {
        for argv in [
            &[
                "moat",
                "--root",
                "/r",
                "--log=/l",
                "create",
                "-b",
                "/b",
                "--pid-file",
                "p",
                "c1",
            ][..],
            &["moat", "--log-format", "json", "start", "c1", "--debug"],
            &["moat", "delete", "-f", "c1"],
            &["moat", "exec", "-t", "c1", "sh", "-c", "true"],
            &["moat", "kill", "--all", "c1", "KILL"],
            &["moat", "--systemd-cgroup", "update", "--memory", "1m", "c1"],
            &["moat", "create", "c1", "--bogus"],
            &["moat", "start"],
            &["moat", "policy", "explain", "/b"],
        ] {
            let (light, full) = both(argv);
            assert_eq!(light, full, "{argv:?}");
        }
    }

    #[test]
    fn help_and_unknown_names_take_the_full_tree() {
        let name = |v: &[&str]| {
            let a: Vec<std::ffi::OsString> = v.iter().map(Into::into).collect();
            subcommand_name(&a).map(str::to_string)
        };
        assert_eq!(
            name(&["moat", "--root", "start", "delete", "x"]).as_deref(),
            Some("delete")
        );
        assert_eq!(name(&["moat", "create", "--help"]), None);
        assert_eq!(name(&["moat", "help", "create"]), None);
        assert_eq!(name(&["moat", "--debug"]), None);
        assert!(light_command("frobnicate").is_none());
    }

    #[test]
    fn version_alone_parses_alike() {
        for argv in [["moat", "-v"], ["moat", "--version"]] {
            let parse = |c: clap::Command| {
                let mut m = c.try_get_matches_from(argv).unwrap();
                format!("{:?}", Cli::from_arg_matches_mut(&mut m).unwrap())
            };
            assert_eq!(parse(light_root()), parse(Cli::command()), "{argv:?}");
        }
    }
}
