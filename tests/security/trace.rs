//! The syscall-trace invariant (issue 20, native path; strace cannot follow runsc's ptrace
//! platform): once the container init is in the container's mount namespace, moat names
//! nothing of the rootfs by path — no syscall takes an absolute path inside the rootfs or a
//! path relative to the working directory. Every lookup goes through an fd moat holds
//! (`openat2` below the root or a mount moat made, `*at` calls relative to a held parent).
//!
//! `strace -f -y` follows `moat create` and the container init until its final `execve`.
//! Path-taking syscalls are classified per process:
//! * before `pivot_root`, an absolute path outside the rootfs is a host path, which the
//!   engine or moat chose on the host side (bind sources, cgroup directories, the host's
//!   device nodes for a user namespace, `/` of the new namespace): allowed. The rootfs path
//!   itself is opened once (the engine's `root.path`, following host symlinks as runc
//!   does); anything below it by path is a violation;
//! * after `pivot_root` every absolute path is a rootfs path: a violation;
//! * a path relative to the working directory is a violation, before or after.
//!
//! The exceptions, each justified, are [`EXCEPTIONS`] (empty) and the structural ones in
//! `classify`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use crate::{ctx, Policy, BOTH};

/// (syscall, path prefix or exact path, why it is allowed). A prefix ends with `/`.
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    // None: every `/proc` access of the container side goes through moat's own procfs
    // handle (`linux/procfs.rs`), and the LSM state is a host fact probed before fork
    // (`linux/hostfacts.rs`). The structural exceptions (`"."` after `fchdir` to the held
    // root, the engine's `root.path` and host paths before pivot, `execve` of
    // `process.args[0]` and its PATH probes) are in [`classify`].
];

/// For each path-taking syscall: (index of the dirfd argument, index of the path).
fn path_args(name: &str) -> &'static [(Option<usize>, usize)] {
    match name {
        "open" | "creat" | "stat" | "lstat" | "access" | "chdir" | "chroot" | "mkdir" | "mknod"
        | "chmod" | "chown" | "lchown" | "unlink" | "rmdir" | "readlink" | "truncate"
        | "statfs" | "execve" | "umount2" | "utime" | "utimes" | "getxattr" | "lgetxattr"
        | "setxattr" | "lsetxattr" | "listxattr" | "llistxattr" | "removexattr"
        | "lremovexattr" | "swapon" | "acct" => &[(None, 0)],
        "symlink" => &[(None, 1)],
        "link" | "rename" | "pivot_root" => &[(None, 0), (None, 1)],
        "mount" => &[(None, 1)],
        "openat" | "openat2" | "newfstatat" | "fstatat64" | "statx" | "faccessat"
        | "faccessat2" | "mkdirat" | "mknodat" | "fchmodat" | "fchmodat2" | "fchownat"
        | "unlinkat" | "readlinkat" | "utimensat" | "futimesat" | "name_to_handle_at"
        | "open_tree" | "mount_setattr" | "fspick" | "execveat" => &[(Some(0), 1)],
        "symlinkat" => &[(Some(1), 2)],
        "linkat" | "renameat" | "renameat2" | "move_mount" => &[(Some(0), 1), (Some(2), 3)],
        _ => &[],
    }
}

const STATS: &[&str] = &[
    "stat",
    "lstat",
    "newfstatat",
    "fstatat64",
    "statx",
    "access",
    "faccessat",
    "faccessat2",
];

/// One syscall as strace printed it.
struct Call {
    pid: i32,
    name: String,
    args: Vec<String>,
    ret: String,
}

/// Splits strace's argument list at top-level commas.
fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth, mut quoted, mut esc) =
        (Vec::new(), String::new(), 0i32, false, false);
    let mut prev = ' ';
    for ch in s.chars() {
        if quoted {
            cur.push(ch);
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                quoted = false;
            }
            continue;
        }
        match ch {
            '"' => quoted = true,
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            // -y: `5</path>`
            '<' if prev.is_ascii_digit() => depth += 1,
            '>' if depth > 0 => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                prev = ch;
                continue;
            }
            _ => {}
        }
        cur.push(ch);
        prev = ch;
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// Parses strace -f output, joining `<unfinished ...>` and `<... resumed>` halves.
fn parse(text: &str) -> Vec<Call> {
    let mut pending: HashMap<i32, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        let rest = rest.trim_start();
        let full = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid, head.to_string());
            continue;
        } else if rest.starts_with("<... ") {
            let Some((_, tail)) = rest.split_once(" resumed>") else {
                continue;
            };
            match pending.remove(&pid) {
                Some(head) => format!("{head}{tail}"),
                None => continue,
            }
        } else {
            rest.to_string()
        };
        let Some(open) = full.find('(') else { continue };
        let Some(eq) = full.rfind(" = ") else {
            continue;
        };
        let Some(close) = full[..eq].rfind(')') else {
            continue;
        };
        if close < open {
            continue;
        }
        calls.push(Call {
            pid,
            name: full[..open].to_string(),
            args: split_args(&full[open + 1..close]),
            ret: full[eq + 3..].trim().to_string(),
        });
    }
    calls
}

/// The text of a quoted strace string argument.
fn unquote(arg: &str) -> Option<String> {
    let s = arg.strip_prefix('"')?;
    let end = s.rfind('"')?;
    Some(s[..end].replace("\\\"", "\"").replace("\\\\", "\\"))
}

fn ret_num(ret: &str) -> Option<i64> {
    ret.split_whitespace().next()?.parse().ok()
}

struct Verdict {
    violations: Vec<String>,
    excepted: BTreeMap<String, usize>,
    saw_pivot: bool,
    saw_exec: bool,
}

fn judge(calls: &[Call], rootfs: &str, exe: &str, arg0: &str, path_env: &str) -> Verdict {
    let (mut in_ns, mut pivoted, mut done) = (HashSet::new(), HashSet::new(), HashSet::new());
    let mut v = Verdict {
        violations: Vec::new(),
        excepted: BTreeMap::new(),
        saw_pivot: false,
        saw_exec: false,
    };
    let probes: HashSet<String> = path_env
        .split(':')
        .map(|d| format!("{}/{arg0}", if d.is_empty() { "." } else { d }))
        .collect();
    for c in calls {
        let args = c.args.join(", ");
        let ok = ret_num(&c.ret).is_some_and(|r| r >= 0);
        // Who is in the container's mount namespace.
        if matches!(c.name.as_str(), "clone" | "clone3" | "fork" | "vfork") {
            if let Some(child) = ret_num(&c.ret).filter(|r| *r > 0) {
                let child = i32::try_from(child).unwrap();
                if args.contains("CLONE_NEWNS") || in_ns.contains(&c.pid) {
                    in_ns.insert(child);
                }
                if pivoted.contains(&c.pid) {
                    pivoted.insert(child);
                }
            }
            continue;
        }
        if ok && c.name == "unshare" && args.contains("CLONE_NEWNS") {
            in_ns.insert(c.pid);
        }
        if ok && c.name == "setns" && (args.contains("CLONE_NEWNS") || args.contains("mnt:[")) {
            // A joined mount namespace comes with its root and cwd (moat exec, a spec's
            // mount namespace path): from here every absolute path is the container's.
            in_ns.insert(c.pid);
            pivoted.insert(c.pid);
            v.saw_pivot = true;
        }
        if !in_ns.contains(&c.pid) || done.contains(&c.pid) {
            continue;
        }
        let after = pivoted.contains(&c.pid);
        for &(dirfd, idx) in path_args(&c.name) {
            let Some(path) = c.args.get(idx).and_then(|a| unquote(a)) else {
                continue;
            };
            if path.is_empty() {
                continue; // AT_EMPTY_PATH: the fd itself
            }
            let at_cwd = match dirfd {
                None => true,
                Some(i) => c.args.get(i).is_some_and(|a| a.starts_with("AT_FDCWD")),
            };
            if !path.starts_with('/') && !at_cwd {
                continue; // relative to an fd moat holds
            }
            let what = format!("{}({args}) = {}", c.name, c.ret);
            let allow = |why: &str, v: &mut Verdict| {
                *v.excepted.entry(why.to_string()).or_default() += 1;
            };
            if path == "."
                && matches!(
                    c.name.as_str(),
                    "pivot_root" | "mount" | "umount2" | "chroot"
                )
            {
                allow("\".\" in pivot_root/mount/umount2/chroot: the working directory, set by fchdir to the held root; no name is looked up", &mut v);
                continue;
            }
            if !path.starts_with('/') {
                v.violations
                    .push(format!("relative to the working directory: {what}"));
                continue;
            }
            if !after {
                if path == rootfs {
                    allow("the engine's root.path, opened once before anything in it (host symlinks followed, as runc)", &mut v);
                } else if path.starts_with(&format!("{}/", rootfs.trim_end_matches('/'))) {
                    v.violations
                        .push(format!("a rootfs path by name before pivot: {what}"));
                } else {
                    allow("before pivot, a host path (bind source, cgroup directory, host device node, / of the new namespace)", &mut v);
                }
                continue;
            }
            if path == "/" && matches!(c.name.as_str(), "open" | "openat" | "openat2") {
                allow("\"/\" itself, the process root once in the namespace: no component of the container's tree is looked up to reach it", &mut v);
                continue;
            }
            if c.name == "execve" && path == exe {
                allow("execve of process.args[0]", &mut v);
                continue;
            }
            if STATS.contains(&c.name.as_str()) && probes.contains(&path) {
                allow("PATH probe of process.args[0]", &mut v);
                continue;
            }
            let exc = EXCEPTIONS.iter().find(|(call, p, _)| {
                (c.name == *call
                    || (*call == "stat" && STATS.contains(&c.name.as_str()))
                    || (*call == "open"
                        && matches!(c.name.as_str(), "open" | "openat" | "openat2")))
                    && if p.ends_with('/') {
                        path.starts_with(p)
                    } else {
                        path == *p
                    }
            });
            match exc {
                Some((_, _, why)) => allow(why, &mut v),
                None => v
                    .violations
                    .push(format!("a rootfs path by name after pivot: {what}")),
            }
        }
        if ok && matches!(c.name.as_str(), "pivot_root" | "chroot") {
            pivoted.insert(c.pid);
            v.saw_pivot = true;
        }
        if ok && c.name == "execve" && after {
            // From here on it is the container's own program.
            done.insert(c.pid);
            v.saw_exec = true;
        }
    }
    v
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn trace_no_rootfs_path_by_name_after_entering_the_mount_namespace() {
    if !require_root() {
        return;
    }
    if !strace_available("trace invariant") {
        return;
    }
    // Direct (clone3 into every namespace) under both policies, and staged (a time
    // namespace: an intermediate unshares the mount namespace and forks the init).
    for (policy, staged) in BOTH
        .into_iter()
        .map(|p| (p, false))
        .chain([(Policy::Open, true)])
    {
        let mut c = ctx("trace", policy);
        if staged {
            c.push("/linux/namespaces", json!({"type": "time"}));
        }
        let vol = c.dir.join("vol");
        fs::create_dir_all(vol.join("ro")).unwrap();
        fs::create_dir_all(vol.join("masked")).unwrap();
        // Every kind of rootfs work: a bind, a tmpfs below a spec path, a device node, a
        // read-only path and a mask outside /proc and /sys, a cwd that is not /.
        c.push(
            "/mounts",
            json!({"destination": "/vol", "type": "bind", "source": vol, "options": ["rbind"]}),
        );
        c.push(
            "/mounts",
            json!({"destination": "/data/t", "type": "tmpfs", "source": "tmpfs"}),
        );
        c.push("/linux/readonlyPaths", json!("/vol/ro"));
        c.push("/linux/maskedPaths", json!("/vol/masked"));
        c.push(
            "/linux/devices",
            json!({"path": "/dev/moat-trace", "type": "c", "major": 1, "minor": 5}),
        );
        c.set("/process/cwd", json!("/tmp"));
        c.args(&["true"]);
        c.write_config();
        let id = c.id("t");
        let log = c.dir.join("strace.log");
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-y", "-s", "4096", "-o"])
            .arg(&log)
            .arg(MOAT)
            .arg("--root")
            .arg(&c.root)
            .args(["create", "--bundle", &c.bundle_str(), &id]);
        if policy == Policy::Restricted {
            cmd.env("MOAT_CONFIG", "");
        }
        let traced = spawn_bg(cmd, &c.io);
        let guard = c.guard(&id);
        assert!(
            wait_until(Duration::from_secs(60), || c
                .moat(&["state", &id])
                .stdout
                .contains("\"created\"")),
            "create under strace did not finish: {}",
            fs::read_to_string(&traced.err_file).unwrap_or_default()
        );
        guard.start();
        let out = traced.wait(Duration::from_secs(60));
        assert_eq!(out.code, 0, "strace moat create: {}", out.stderr);
        drop(guard);
        let what = format!("create {policy:?} (staged: {staged})");
        check_log(&log, &c.rootfs().display().to_string(), &what);
    }
}

/// Judges a strace log of moat running `/bin/true` and fails on any violation; prints the
/// exceptions it used.
fn check_log(log: &std::path::Path, rootfs: &str, what: &str) {
    let text = fs::read_to_string(log).expect("strace log");
    let v = judge(
        &parse(&text),
        rootfs,
        "/bin/true",
        "true",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    eprintln!("trace {what}: exceptions used:");
    for (why, n) in &v.excepted {
        eprintln!("trace   {n:>3} x {why}");
    }
    assert!(
        v.saw_pivot && v.saw_exec,
        "{what}: the trace saw no pivot_root or mount namespace join, or no final execve: \
         the check checked nothing"
    );
    assert!(
        v.violations.is_empty(),
        "{what}: {} syscalls name a rootfs path by name:\n{}",
        v.violations.len(),
        v.violations.join("\n")
    );
}

/// Whether strace can run; a loud SKIPPED line otherwise.
fn strace_available(what: &str) -> bool {
    let ok = Command::new("strace")
        .arg("-V")
        .run_output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        missing(&format!(
            "{what}: strace is not installed (apt-get install strace)"
        ));
    }
    ok
}

#[test]
fn trace_parser_reads_strace_lines() {
    let text = "10  clone3({flags=CLONE_NEWNS|CLONE_NEWPID, exit_signal=SIGCHLD}, 88 <unfinished ...>\n\
                10  <... clone3 resumed>) = 11\n\
                11  openat(AT_FDCWD</x>, \"/r/a, b\", O_RDONLY) = 3</r/a, b>\n\
                11  openat2(3</r>, \"proc\", {flags=O_PATH, resolve=RESOLVE_BENEATH}, 24) = 4</r/proc>\n\
                11  pivot_root(\".\", \".\") = 0\n\
                11  open(\"/etc/passwd\", O_RDONLY) = 5</etc/passwd>\n\
                11  execve(\"/bin/true\", [\"true\"], 0x1 /* 2 vars */) = 0\n\
                11  open(\"/etc/x\", O_RDONLY) = 5\n";
    let calls = parse(text);
    assert_eq!(calls.len(), 7);
    assert_eq!(calls[1].args[1], "\"/r/a, b\"");
    let v = judge(&calls, "/r", "/bin/true", "true", "/bin");
    assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
    assert!(v.violations[0].contains("before pivot"));
    assert!(v.violations[1].contains("/etc/passwd"));
    assert!(v.saw_pivot && v.saw_exec);
}

/// The same invariant for `moat exec` (with and without a terminal): the joiner enters the
/// container's namespaces with one `setns`, and neither it nor the exec'd process names
/// anything of the container's tree by path before the final `execve`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn trace_exec_names_nothing_of_the_rootfs_by_path() {
    if !require_root() {
        return;
    }
    if !strace_available("trace invariant (exec)") {
        return;
    }
    for policy in BOTH {
        let mut c = ctx("trace-exec", policy);
        c.args(&["sleep", "60"]);
        let ct = c.create_ok("s");
        ct.start();
        for tty in [false, true] {
            let log = c.dir.join(format!("strace-exec-{tty}.log"));
            let mut cmd = Command::new("strace");
            cmd.args(["-f", "-qq", "-y", "-s", "4096", "-o"])
                .arg(&log)
                .arg(MOAT)
                .arg("--root")
                .arg(&c.root)
                .args(["exec", "--cwd", "/tmp"]);
            if tty {
                // A pty without a console socket: moat exec relays it itself.
                cmd.arg("-t");
            }
            cmd.args([ct.id.as_str(), "true"]);
            if policy == Policy::Restricted {
                cmd.env("MOAT_CONFIG", "");
            }
            let out = spawn_bg(cmd, &c.io).wait(Duration::from_secs(60));
            assert_eq!(out.code, 0, "strace moat exec (tty {tty}): {}", out.stderr);
            check_log(
                &log,
                &c.rootfs().display().to_string(),
                &format!("exec {policy:?} (tty {tty})"),
            );
        }
    }
}
