//! Golden test of the strings clients match: each case provokes one
//! failure (or one success a client relies on) with the real binary and real containers,
//! and records its exit status, its line on stderr and the `msg` of its `--log-format
//! json` object. The record must equal `tests/golden/client-strings.txt` byte for byte,
//! after only the variable parts (container ids, the test's temp dir, pids) are replaced by
//! placeholders. A changed message fails here before it silently changes what podman,
//! conmon, containerd's runc shim, Docker or CRI make of it (`shared/notes/clients.md`):
//!
//! * containerd `checkKillError`: `container not running` / `does not exist` → NotFound;
//!   the shim's init delete ignores `does not exist`; `kill --all` of a stopped container
//!   must exit 0.
//! * podman `UpdateContainerStatus`: `does not exist` in `state`'s stderr → exited.
//! * podman `getOCIRuntimeError`: `permission denied` → `podman run` exits 126;
//!   `executable file not found in` / `no such file or directory` → 127.
//! * runc's own wording that scripts grep: `container with id exists`, `cannot start a
//!   container that has stopped`, `systemd not running on this host, …`.
//!
//! File format: one line per case, tab-separated: case name, exit status, stderr (its lines
//! joined by `\n`; `-` when empty), the log's objects (`msg` of each, a non-error one
//! prefixed by `[level]`; `-` when the log is empty). `MOAT_GOLDEN_BLESS=1` rewrites the
//! file from what the binary does now (then review the diff: every changed line is a
//! changed contract).

mod support;

use std::fs;
use std::path::{Path, PathBuf};

use support::*;

const GOLDEN: &str = "tests/golden/client-strings.txt";

/// What one case produced, placeholders already in.
struct Got {
    name: String,
    code: i32,
    stderr: String,
    log: String,
}

impl Got {
    fn line(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}",
            self.name, self.code, self.stderr, self.log
        )
    }
}

/// Runs the cases against one context, replacing its variable parts.
struct Golden {
    ctx: Ctx,
    /// (text, placeholder), longest text first.
    subs: Vec<(String, String)>,
    got: Vec<Got>,
    /// Cases that do not apply on this host (and so are not compared).
    not_here: Vec<&'static str>,
}

impl Golden {
    fn new(ctx: Ctx) -> Self {
        let dir = ctx.dir.to_str().expect("utf-8").to_string();
        let mut g = Golden {
            ctx,
            subs: Vec::new(),
            got: Vec::new(),
            not_here: Vec::new(),
        };
        g.sub(&dir, "<dir>");
        g
    }

    /// Text that varies from run to run, shown as `placeholder` in the record.
    fn sub(&mut self, text: &str, placeholder: &str) {
        self.subs.push((text.to_string(), placeholder.to_string()));
        self.subs.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
    }

    fn id(&mut self, name: &str) -> String {
        let id = self.ctx.id(name);
        self.sub(&id, &format!("<{name}>"));
        id
    }

    fn pid(&mut self, name: &str, pid: i32) {
        self.sub(&pid.to_string(), &format!("<{name}-pid>"));
    }

    fn placeholders(&self, s: &str) -> String {
        let mut s = s.to_string();
        for (text, ph) in &self.subs {
            s = s.replace(text.as_str(), ph);
        }
        s
    }

    /// `moat --root <root> --log <file> --log-format json ARGS…`, recorded as case `name`.
    #[track_caller]
    fn case(&mut self, name: &str, args: &[&str]) -> i32 {
        let log = self.ctx.dir.join(format!("{name}.log.json"));
        let l = log.to_str().expect("utf-8");
        let mut all = vec!["--log", l, "--log-format", "json"];
        all.extend_from_slice(args);
        let out = self.ctx.moat(&all);
        self.record(name, &out, &log)
    }

    #[track_caller]
    fn record(&mut self, name: &str, out: &Out, log: &Path) -> i32 {
        let stderr = if out.stderr.is_empty() {
            "-".to_string()
        } else {
            out.stderr.trim_end_matches('\n').replace('\n', "\\n")
        };
        let text = fs::read_to_string(log)
            .unwrap_or_else(|e| panic!("{name}: no --log file {} ({e}): {out:#?}", log.display()));
        let objects: Vec<String> = text
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{name}: log line is not JSON ({e}): {l:?}"));
                let msg = v["msg"].as_str().expect("msg is a string");
                match v["level"].as_str().expect("level is a string") {
                    "error" => msg.to_string(),
                    level => format!("[{level}] {msg}"),
                }
            })
            .collect();
        let log = if objects.is_empty() {
            "-".to_string()
        } else {
            objects.join("\\n")
        };
        self.got.push(Got {
            name: name.to_string(),
            code: out.code,
            stderr: self.placeholders(&stderr),
            log: self.placeholders(&log),
        });
        out.code
    }

    fn get(&self, name: &str) -> &Got {
        self.got
            .iter()
            .find(|g| g.name == name)
            .unwrap_or_else(|| panic!("no case {name}"))
    }
}

/// podman's reading of a failed runtime call's stderr (`getOCIRuntimeError`): the exit
/// status `podman run` gives its user.
fn podman_exit_status(stderr: &str) -> i32 {
    let s = stderr.to_lowercase();
    if s.contains("permission denied") || s.contains("operation not permitted") {
        126
    } else if s.contains("executable file not found in") || s.contains("no such file or directory")
    {
        127
    } else {
        126
    }
}

/// containerd's `checkKillError`: a kill error it treats as "already gone" (NotFound).
fn containerd_kill_not_found(msg: &str) -> bool {
    let m = msg.to_lowercase();
    m.contains("container not running")
        || m.contains("no such process")
        || m.contains("does not exist")
        || m.contains("os: process already finished")
}

fn golden_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN)
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn client_strings_match_the_golden_file() {
    if !require_root() {
        return;
    }
    let mut g = Golden::new(Ctx::new("golden"));
    // A directory named as the executable: the lookup says "permission denied".
    fs::create_dir_all(g.ctx.rootfs().join("notabinary")).unwrap();

    // No such container: every subcommand an engine sends says "does not exist".
    for (name, args) in [
        ("state-missing", &["state", "nosuch"][..]),
        ("start-missing", &["start", "nosuch"]),
        ("kill-missing", &["kill", "nosuch", "9"]),
        ("kill-all-missing", &["kill", "--all", "nosuch", "9"]),
        ("delete-missing", &["delete", "nosuch"]),
        ("delete-force-missing", &["delete", "--force", "nosuch"]),
        ("exec-missing", &["exec", "nosuch", "true"]),
        ("ps-missing", &["ps", "--format", "json", "nosuch"]),
        ("pause-missing", &["pause", "nosuch"]),
        ("resume-missing", &["resume", "nosuch"]),
        (
            "update-missing",
            &["update", "--pids-limit", "10", "nosuch"],
        ),
        ("events-missing", &["events", "--stats", "nosuch"]),
    ] {
        g.case(name, args);
    }

    // A container that ran to its end (stopped), one that runs, one only created.
    let bundle = g.ctx.bundle_str();
    let stopped = g.id("stopped");
    let running = g.id("running");
    let created = g.id("created");
    g.ctx.args(&["true"]);
    let s = g.ctx.create_ok("stopped");
    s.start_and_wait();
    g.ctx.args(&["sleep", "600"]);
    let r = g.ctx.create_ok("running");
    r.start();
    let c = g.ctx.create_ok("created");
    g.pid("running", r.pid());
    g.pid("created", c.pid());

    g.case(
        "create-exists",
        &["create", "--bundle", &bundle, running.as_str()],
    );
    g.case("kill-stopped", &["kill", &stopped, "9"]);
    g.case("kill-all-stopped", &["kill", "--all", &stopped, "9"]);
    g.case("start-stopped", &["start", &stopped]);
    g.case("start-running", &["start", &running]);
    g.case("exec-stopped", &["exec", &stopped, "true"]);
    g.case("pause-stopped", &["pause", &stopped]);
    g.case("resume-running", &["resume", &running]);
    g.case("delete-running", &["delete", &running]);
    g.case("kill-created", &["kill", &created, "KILL"]);
    g.case("pause-running", &["pause", &running]);
    g.case("pause-paused", &["pause", &running]);
    g.case("exec-paused", &["exec", &running, "true"]);
    g.case("delete-paused", &["delete", &running]);
    g.case("resume-paused", &["resume", &running]);

    // The executable lookup, at create (as runc) and at exec: podman's 126/127.
    for (name, exe) in [
        ("abs-missing", "/no/such/binary"),
        ("path-missing", "nosuchcommand"),
        ("directory", "/notabinary"),
    ] {
        g.case(&format!("exec-{name}"), &["exec", &running, exe]);
        g.ctx.args(&[exe]);
        let id = g.id(&format!("create-{name}"));
        let _guard = g.ctx.guard(&id);
        g.case(
            &format!("create-{name}"),
            &["create", "--bundle", &bundle, &id],
        );
        g.ctx.assert_no_trace(&id);
    }

    // The container's program found but its execve failing (a script whose interpreter is
    // missing): said as runc's init says it, bare at run (after start the init reports on
    // the container's stderr), after "exec failed: " at exec.
    let script = g.ctx.rootfs().join("badinterp");
    fs::write(&script, "#!/no/such/interpreter\n").unwrap();
    fs::set_permissions(
        &script,
        <fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    g.case("exec-execve-fails", &["exec", &running, "/badinterp"]);
    g.ctx.args(&["/badinterp"]);
    let id = g.id("run-execve-fails");
    let guard = g.ctx.guard(&id);
    g.case("run-execve-fails", &["run", "--bundle", &bundle, &id]);
    drop(guard);
    g.ctx.assert_no_trace(&id);

    // --systemd-cgroup: runc's wording where systemd is not PID 1 (on a systemd host
    // the driver runs: tests/vm/systemd).
    g.ctx.args(&["true"]);
    let here = "systemd-cgroup-no-systemd";
    if Path::new("/run/systemd/system").exists() {
        g.not_here.push(here);
    } else {
        let id = g.id(here);
        let _guard = g.ctx.guard(&id);
        g.case(
            here,
            &["--systemd-cgroup", "create", "--bundle", &bundle, &id],
        );
        g.ctx.assert_no_trace(&id);
    }

    drop((s, r, c));

    // What the clients make of them, checked on the strings themselves.
    for name in [
        "create-abs-missing",
        "create-path-missing",
        "exec-abs-missing",
        "exec-execve-fails",
        "run-execve-fails",
    ] {
        let got = g.get(name);
        assert_eq!(podman_exit_status(&got.stderr), 127, "{}", got.line());
    }
    for name in ["create-directory", "exec-directory"] {
        let got = g.get(name);
        assert_eq!(podman_exit_status(&got.stderr), 126, "{}", got.line());
    }
    for name in [
        "kill-missing",
        "kill-stopped",
        "delete-missing",
        "state-missing",
    ] {
        let got = g.get(name);
        assert!(containerd_kill_not_found(&got.log), "{}", got.line());
    }
    for got in &g.got {
        if got.code != 0 {
            assert!(
                !got.stderr.contains("\\n") && !got.log.contains("\\n"),
                "{}: one error line and one log object per failing call",
                got.line()
            );
            // The container's program that did not start is said bare, as runc's init says it.
            let prefix = if got.name == "run-execve-fails" {
                ""
            } else {
                "moat: "
            };
            assert_eq!(
                got.stderr,
                format!("{prefix}{}", got.log),
                "{}: the same message on stderr and in the log",
                got.name
            );
        }
    }

    compare(&g);
}

fn compare(g: &Golden) {
    let path = golden_path();
    let header =
        "# case\tstatus\tstderr\tlog msg   (tests/golden.rs; MOAT_GOLDEN_BLESS=1 rewrites)\n";
    let expected = fs::read_to_string(&path).unwrap_or_default();
    if std::env::var_os("MOAT_GOLDEN_BLESS").is_some() {
        // Keep the lines of the cases that do not apply on this host.
        let mut text = header.to_string();
        let mut lines: Vec<String> = g.got.iter().map(Got::line).collect();
        lines.extend(
            expected
                .lines()
                .filter(|l| g.not_here.iter().any(|n| l.split('\t').next() == Some(n)))
                .map(str::to_string),
        );
        lines.sort();
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, text).unwrap();
        eprintln!("wrote {}", path.display());
        return;
    }
    let want: Vec<&str> = expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter(|l| !g.not_here.iter().any(|n| l.split('\t').next() == Some(n)))
        .collect();
    let mut have: Vec<String> = g.got.iter().map(Got::line).collect();
    have.sort();
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| !have.iter().any(|h| h == **w))
        .collect();
    let changed: Vec<&String> = have
        .iter()
        .filter(|h| !want.contains(&h.as_str()))
        .collect();
    for n in &g.not_here {
        eprintln!("SKIPPED: golden case {n} does not apply on this host");
    }
    assert!(
        missing.is_empty() && changed.is_empty(),
        "the strings clients match changed ({}):\n  golden:\n    {}\n  now:\n    {}\n\
         (if the change is meant, MOAT_GOLDEN_BLESS=1 rewrites the file; say why in the commit)",
        GOLDEN,
        missing
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join("\n    "),
        changed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n    "),
    );
}
