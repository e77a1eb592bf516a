//! The lifecycle calls engines make on every container (`create`, `start`, `state`,
//! `kill`, `delete`, `run`, `exec`), parsed without clap when they use only their plain
//! forms.
//!
//! Building even one subcommand's clap tree and matching it costs ~150 µs per call on
//! the reference host, the largest part of a short call such as `start` after the
//! process start itself (docs/gvisor.md). This parser accepts a strict subset of what
//! clap accepts: each flag at most once, as `--name value` or `--name=value` (short
//! `-b`, `-f`, `-a` on their own), no value empty or starting with `-`, UTF-8 where the
//! field is a `String`. Anything else (help, `--version`, `--`, an unknown or repeated
//! flag, a missing or extra argument) returns `None` and clap parses the command line,
//! with its errors and help. The tests check that whatever this parser accepts, clap
//! parses to the same `Cli`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::{create, delete, exec, kill, run, start, state, Cli, Command, Global};

/// One command-line token split at `=` for `--name=value`.
fn split(arg: &OsStr) -> (&[u8], Option<&OsStr>) {
    let b = arg.as_bytes();
    match b.iter().position(|&c| c == b'=') {
        Some(i) if b.starts_with(b"--") => (&b[..i], Some(OsStr::from_bytes(&b[i + 1..]))),
        _ => (b, None),
    }
}

/// A flag's value: inline (`--x=v`) or the next token; not empty, not looking like a flag.
fn value<'a>(
    inline: Option<&'a OsStr>,
    rest: &mut impl Iterator<Item = &'a OsString>,
) -> Option<&'a OsStr> {
    let v = match inline {
        Some(v) => v,
        None => rest.next()?.as_os_str(),
    };
    // clap refuses an empty path and treats a leading '-' as the next flag.
    (!v.is_empty() && !v.as_bytes().starts_with(b"-")).then_some(v)
}

fn utf8(v: &OsStr) -> Option<String> {
    v.to_str().map(str::to_string)
}

/// Sets `slot` once; a second occurrence gives up (clap rejects or overrides it).
fn once<T>(slot: &mut Option<T>, v: Option<T>) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(v?);
    Some(())
}

/// Consumes a global flag, `Some(false)` when `name` is not one.
fn global<'a>(
    g: &mut Globals,
    name: &[u8],
    inline: Option<&'a OsStr>,
    rest: &mut impl Iterator<Item = &'a OsString>,
) -> Option<bool> {
    let path = |v: Option<&OsStr>| v.map(PathBuf::from);
    match name {
        b"--root" => once(&mut g.root, path(value(inline, rest)))?,
        b"--log" => once(&mut g.log, path(value(inline, rest)))?,
        b"--log-format" => once(&mut g.log_format, value(inline, rest).and_then(utf8))?,
        b"--rootless" => once(&mut g.rootless, value(inline, rest).and_then(utf8))?,
        b"--criu" => once(&mut g.criu, value(inline, rest).and_then(utf8))?,
        b"--debug" if inline.is_none() => once(&mut g.debug, Some(true))?,
        b"--systemd-cgroup" if inline.is_none() => once(&mut g.systemd_cgroup, Some(true))?,
        _ => return Some(false),
    }
    Some(true)
}

#[derive(Default)]
struct Globals {
    root: Option<PathBuf>,
    log: Option<PathBuf>,
    log_format: Option<String>,
    debug: Option<bool>,
    systemd_cgroup: Option<bool>,
    rootless: Option<String>,
    criu: Option<String>,
}

/// What one subcommand collects besides the globals.
#[derive(Default)]
struct Sub {
    positional: Vec<String>,
    bundle: Option<PathBuf>,
    console_socket: Option<PathBuf>,
    pid_file: Option<PathBuf>,
    preserve_fds: Option<u32>,
    no_pivot: Option<bool>,
    no_new_keyring: Option<bool>,
    force: Option<bool>,
    all: Option<bool>,
    detach: Option<bool>,
    keep: Option<bool>,
    no_subreaper: Option<bool>,
    tty: Option<bool>,
    process: Option<PathBuf>,
    cwd: Option<String>,
    user: Option<String>,
    env: Vec<String>,
    /// `exec`'s command: every token after the id.
    command: Vec<String>,
}

/// `None` unless `args` (argv, program name first) is a plain lifecycle call.
pub fn parse(args: &[OsString]) -> Option<Cli> {
    let mut g = Globals::default();
    let mut sub = Sub::default();
    let mut name: Option<&str> = None;
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        let (flag, inline) = split(arg);
        if name == Some("exec") && !sub.positional.is_empty() {
            // After exec's id, every token is the command's (clap's trailing var arg),
            // unless it starts with '-' before the command has begun: clap may read that
            // as a flag.
            if sub.command.is_empty() && flag.starts_with(b"-") {
                return None;
            }
            sub.command.push(utf8(arg)?);
            continue;
        }
        if !flag.starts_with(b"-") {
            match name {
                None => name = Some(arg.to_str()?),
                Some(_) => sub.positional.push(utf8(arg).filter(|s| !s.is_empty())?),
            }
            continue;
        }
        if global(&mut g, flag, inline, &mut it)? {
            continue;
        }
        let path = |v: Option<&OsStr>| v.map(PathBuf::from);
        let bare = inline.is_none();
        match (name?, flag) {
            ("create" | "run", b"-b" | b"--bundle") => {
                once(&mut sub.bundle, path(value(inline, &mut it)))?
            }
            ("create" | "run" | "exec", b"--console-socket") => {
                once(&mut sub.console_socket, path(value(inline, &mut it)))?
            }
            ("create" | "run" | "exec", b"--pid-file") => {
                once(&mut sub.pid_file, path(value(inline, &mut it)))?
            }
            ("create" | "run" | "exec", b"--preserve-fds") => once(
                &mut sub.preserve_fds,
                value(inline, &mut it)?.to_str()?.parse().ok(),
            )?,
            ("create" | "run", b"--no-pivot") if bare => once(&mut sub.no_pivot, Some(true))?,
            ("create" | "run", b"--no-new-keyring") if bare => {
                once(&mut sub.no_new_keyring, Some(true))?
            }
            ("run" | "exec", b"-d" | b"--detach") if bare => once(&mut sub.detach, Some(true))?,
            ("run", b"--keep") if bare => once(&mut sub.keep, Some(true))?,
            ("run", b"--no-subreaper") if bare => once(&mut sub.no_subreaper, Some(true))?,
            ("exec", b"-t" | b"--tty") if bare => once(&mut sub.tty, Some(true))?,
            ("exec", b"-p" | b"--process") => once(&mut sub.process, path(value(inline, &mut it)))?,
            ("exec", b"--cwd") => once(&mut sub.cwd, value(inline, &mut it).and_then(utf8))?,
            ("exec", b"-u" | b"--user") => {
                once(&mut sub.user, value(inline, &mut it).and_then(utf8))?
            }
            // Repeatable, as clap takes it.
            ("exec", b"-e" | b"--env") => sub.env.push(value(inline, &mut it).and_then(utf8)?),
            ("delete", b"-f" | b"--force") if bare => once(&mut sub.force, Some(true))?,
            ("kill", b"-a" | b"--all") if bare => once(&mut sub.all, Some(true))?,
            _ => return None,
        }
    }
    let mut pos = sub.positional.into_iter();
    let id = pos.next()?;
    let create = |id| create::Args {
        bundle: sub.bundle.unwrap_or_else(|| PathBuf::from(".")),
        console_socket: sub.console_socket.clone(),
        pidfd_socket: None,
        pid_file: sub.pid_file.clone(),
        no_pivot: sub.no_pivot.unwrap_or(false),
        no_new_keyring: sub.no_new_keyring.unwrap_or(false),
        preserve_fds: sub.preserve_fds.unwrap_or(0),
        id,
    };
    let command = match name? {
        "create" => Command::Create(create(id)),
        "run" => Command::Run(run::Args {
            create: create(id),
            detach: sub.detach.unwrap_or(false),
            keep: sub.keep.unwrap_or(false),
            no_subreaper: sub.no_subreaper.unwrap_or(false),
        }),
        // Without a command exec needs `--process` (clap's error otherwise).
        "exec" if sub.command.is_empty() && sub.process.is_none() => return None,
        "exec" => Command::Exec(Box::new(exec::Args {
            console_socket: sub.console_socket,
            pidfd_socket: None,
            cwd: sub.cwd,
            env: sub.env,
            tty: sub.tty.unwrap_or(false),
            user: sub.user,
            additional_gids: Vec::new(),
            process: sub.process,
            detach: sub.detach.unwrap_or(false),
            pid_file: sub.pid_file,
            process_label: None,
            apparmor: None,
            no_new_privs: false,
            cap: Vec::new(),
            preserve_fds: sub.preserve_fds.unwrap_or(0),
            cgroup: Vec::new(),
            ignore_paused: false,
            id,
            command: sub.command,
        })),
        "start" => Command::Start(start::Args { id }),
        "state" => Command::State(state::Args { id }),
        "delete" => Command::Delete(delete::Args {
            force: sub.force.unwrap_or(false),
            id,
        }),
        "kill" => Command::Kill(kill::Args {
            all: sub.all.unwrap_or(false),
            id,
            signal: pos.next(),
        }),
        _ => return None,
    };
    if pos.next().is_some() {
        return None;
    }
    Some(Cli {
        global: Global {
            root: g.root,
            log: g.log,
            log_format: g.log_format.unwrap_or_else(|| "text".into()),
            debug: g.debug.unwrap_or(false),
            systemd_cgroup: g.systemd_cgroup.unwrap_or(false),
            rootless: g.rootless.unwrap_or_else(|| "auto".into()),
            criu: g.criu,
            version: false,
        },
        command: Some(command),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn argv(line: &str) -> Vec<OsString> {
        std::iter::once("moat")
            .chain(line.split(' ').filter(|s| !s.is_empty()))
            .map(OsString::from)
            .collect()
    }

    /// Whatever the fast parser accepts, clap parses identically.
    #[track_caller]
    fn same(line: &str) -> bool {
        let args = argv(line);
        let fast = parse(&args);
        let clap = Cli::try_parse_from(&args);
        if let Some(f) = &fast {
            let c = clap.unwrap_or_else(|e| panic!("{line:?}: fast parsed, clap refused: {e}"));
            assert_eq!(format!("{f:?}"), format!("{c:?}"), "{line:?}");
        }
        fast.is_some()
    }

    #[test]
    fn engine_calls_take_the_fast_path_and_match_clap() {
        for line in [
            "start c1",
            "--root /run/moat start c1",
            "--root=/run/moat --log /x/log.json --log-format json start c1",
            "--root /r --log /l --log-format json --systemd-cgroup state c1",
            "state --root /r c1",
            "delete c1",
            "--root /r delete --force c1",
            "delete -f c1",
            "kill c1",
            "kill c1 KILL",
            "kill --all c1 9",
            "--root /r kill -a c1 SIGTERM",
            "--root /r --log /l --log-format json create --bundle /b --pid-file /p c1",
            "create -b /b --console-socket /s --pid-file=/p --no-pivot --no-new-keyring c1",
            "create --preserve-fds 2 --bundle=/b c1",
            "create c1",
            "--debug --rootless true --criu /usr/sbin/criu start c1",
            "start c1 --rootless=false",
            "run c1",
            "--root /r run -b /b --pid-file /p -d c1",
            "run --bundle=/b --detach --keep --no-subreaper --console-socket /s c1",
            "run --no-pivot --no-new-keyring --preserve-fds 1 c1",
            "exec c1 true",
            "exec c1 sh -c echo",
            "exec c1 ls -la --color=never -- x",
            "--root /r --log /l --log-format json exec --process /p.json --detach --pid-file /x c1",
            "exec -d --pid-file=/x -p /p.json c1",
            "exec -t --console-socket /s --cwd /tmp -u 1000:1000 -e A=1 --env B=2 -e C=3 c1 top",
            "exec --preserve-fds 2 --user=root c1 true",
        ] {
            assert!(same(line), "{line:?} should take the fast path");
        }
    }

    #[test]
    fn anything_else_goes_to_clap() {
        for line in [
            "",
            "start",
            "start c1 c2",
            "start --help",
            "-h",
            "help start",
            "--version",
            "-v start c1",
            "start -- c1",
            "start --root /a --root /b c1",
            "delete -f -f c1",
            "delete --force=true c1",
            "kill c1 KILL extra",
            "kill c1 -9",
            "start --root -x c1",
            "create --preserve-fds x c1",
            "create --preserve-fds -1 c1",
            "create -bx c1",
            "create --unknown c1",
            "--bundle /b create c1",
            "start --force c1",
            "exec c1",
            "exec c1 -t true",
            "exec c1 --help",
            "exec --tty=true c1 true",
            "exec --cap CAP_KILL c1 true",
            "exec -d -d c1 true",
            "exec --cwd /a --cwd /b c1 true",
            "exec --env= c1 true",
            "run c1 c2",
            "run --keep --keep c1",
            "run -d=1 c1",
            "list",
            "--debug=true start c1",
            "--root",
            "--root= start c1",
            "create --bundle= c1",
            "--log-format= state c1",
        ] {
            assert!(!same(line), "{line:?} should go to clap");
        }
    }

    /// The flags the fast parser knows: `(subcommand, flag, takes a value)`, read from its
    /// own match arms ("" for the global flags), so a flag added there is seen here.
    fn fast_flags() -> Vec<(&'static str, &'static str, bool)> {
        let src = include_str!("fast.rs");
        let body = &src[..src.find("#[cfg(test)]").unwrap()];
        let mut out = Vec::new();
        let mut in_global = false;
        for line in body.lines() {
            if line.starts_with("fn global") {
                in_global = true;
            } else if line.starts_with('}') {
                in_global = false;
            }
            // `("a" | "b", b"-x" …)`: every subcommand before the first flag literal.
            let subs: Vec<&'static str> = match line.trim_start().strip_prefix('(') {
                Some(rest) if rest.starts_with('"') => {
                    let head = &rest[..rest.find(", b\"").unwrap_or(rest.len())];
                    head.split('|')
                        .map(|w| w.trim().trim_matches('"'))
                        .collect()
                }
                _ if in_global => vec![""],
                _ => continue,
            };
            let flag_only = line.contains("if bare") || line.contains("if inline.is_none()");
            // Each byte-string literal b"…", scanned left to right.
            let mut rest = line;
            while let Some(i) = rest.find("b\"") {
                let lit = &rest[i + 2..];
                let end = lit.find('"').unwrap();
                if lit[..end].starts_with('-') {
                    for sub in &subs {
                        out.push((*sub, &lit[..end], !flag_only));
                    }
                }
                rest = &lit[end + 1..];
            }
        }
        out
    }

    /// Every flag the fast parser accepts is in clap's tree (the one the man page and the
    /// completions are generated from, src/bin/moat-gen.rs), global or of the same
    /// subcommand, with the same arity; and a call using it parses alike in both. So the
    /// page is true of both parsers.
    #[test]
    fn every_fast_flag_is_in_the_clap_tree() {
        let root = crate::cli::command();
        let flags = fast_flags();
        assert!(flags.len() >= 15, "{flags:?}");
        for (sub, flag, takes_value) in flags {
            let cmd = if sub.is_empty() {
                &root
            } else {
                root.find_subcommand(sub)
                    .unwrap_or_else(|| panic!("{sub}: not a clap subcommand"))
            };
            let arg = cmd
                .get_arguments()
                .find(|a| match flag.strip_prefix("--") {
                    Some(long) => a.get_long() == Some(long),
                    None => a.get_short() == flag.chars().nth(1),
                })
                .unwrap_or_else(|| {
                    panic!("{sub} {flag}: the fast parser takes it, clap has no such flag")
                });
            assert_eq!(
                arg.get_action().takes_values(),
                takes_value,
                "{sub} {flag}: arity differs"
            );
            let value = match (takes_value, flag) {
                (false, _) => String::new(),
                (true, "--preserve-fds") => " 2".into(),
                (true, "--log-format") => " json".into(),
                (true, "--rootless") => " true".into(),
                (true, _) => " /x".into(),
            };
            let line = match sub {
                "" => format!("{flag}{value} state c1"),
                "exec" => format!("exec {flag}{value} c1 true"),
                s => format!("{s} {flag}{value} c1"),
            };
            assert!(same(&line), "{line:?} should take the fast path");
        }
    }
}
