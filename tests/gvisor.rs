//! gVisor delegation through moat's CLI, against the real runsc (Debian's `runsc`).
//! Needs root (every test is `#[ignore]`d: scripts/test runs them); runsc missing is a loud
//! SKIPPED line, and a failure under scripts/test (`MOAT_TEST_STRICT`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;
use support::{is_root, missing, mkbundle, require_root, stderr_of as stderr, Run};

const MOAT: &str = env!("CARGO_BIN_EXE_moat");

/// Which runsc a test runs against: every test below runs twice (a module per test, with
/// `runsc_on_path` and `runsc_from_env`), once with each.
#[derive(Clone, Copy)]
enum Which {
    /// The first runsc in PATH (Debian 12's 20221219 here).
    OnPath,
    /// The first path of `MOAT_TEST_RUNSC` (`:`-separated; scripts/test sets it to runsc
    /// 20240729, see scripts/lib/runsc-newer).
    FromEnv,
}

thread_local! {
    /// The runsc the test on this thread runs against (each test has its own thread).
    static RUNSC: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
    /// `p` or `e` (which runsc), in every name the test makes.
    static VARIANT: std::cell::Cell<char> = const { std::cell::Cell::new('x') };
}

fn path_runsc() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("runsc"))
            .find(|r| r.is_file())
    })
}

fn env_runsc() -> Option<PathBuf> {
    std::env::var_os("MOAT_TEST_RUNSC")
        .and_then(|v| std::env::split_paths(&v).find(|p| !p.as_os_str().is_empty()))
}

/// Runs `test` with the runsc `which` names, or says loudly why it cannot.
fn with_runsc(which: Which, name: &str, test: fn()) {
    let runsc = match which {
        Which::OnPath => path_runsc(),
        Which::FromEnv => env_runsc(),
    };
    let Some(runsc) = runsc.filter(|r| r.is_file()) else {
        missing(&match which {
            Which::OnPath => format!("runsc not installed ({name})"),
            Which::FromEnv => format!(
                "MOAT_TEST_RUNSC names no runsc (a second release to test against, e.g. \
                 scripts/lib/runsc-newer's) ({name})"
            ),
        });
        return;
    };
    eprintln!("== {name} against {}", runsc.display());
    RUNSC.with(|r| *r.borrow_mut() = Some(runsc));
    VARIANT.with(|v| {
        v.set(match which {
            Which::OnPath => 'p',
            Which::FromEnv => 'e',
        })
    });
    test();
}

/// The runsc of this test.
fn runsc() -> PathBuf {
    RUNSC
        .with(|r| r.borrow().clone())
        .or_else(path_runsc)
        .expect("runsc")
}

/// `PATH` with this test's runsc's directory first: moat looks runsc up in PATH.
fn test_path() -> std::ffi::OsString {
    let dir = runsc().parent().unwrap().to_path_buf();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&rest))).unwrap()
}

/// The release of this test's runsc, from `runsc --version` (e.g. 20240729).
fn runsc_release() -> u32 {
    let out = Command::new(runsc())
        .arg("--version")
        .run_output()
        .expect("runsc --version");
    let v = String::from_utf8_lossy(&out.stdout);
    v.split(['~', '.'])
        .find_map(|w| (w.len() == 8).then(|| w.parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no release in {v:?}"))
}

/// Each test named, as a module with one test per runsc.
macro_rules! on_both_runscs {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            #[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
            fn runsc_on_path() {
                super::with_runsc(super::Which::OnPath, stringify!($name), super::$name);
            }
            #[test]
            #[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
            fn runsc_from_env() {
                super::with_runsc(super::Which::FromEnv, stringify!($name), super::$name);
            }
        }
    )*};
}

on_both_runscs!(
    lifecycle_under_gvisor,
    native_and_gvisor_side_by_side,
    kill_created_and_stopped_like_runc,
    foreground_run_passes_the_status_and_removes_the_record,
    a_failed_foreground_run_leaves_no_cgroup_runsc_made,
    tmpcopyup_is_said_not_applied,
    alias_selects_gvisor_and_ignores_a_native_annotation,
    events_update_pause_and_ps,
    restricted_policy_reaches_runsc_and_verify_checks_it,
    host_network_refused_under_restricted_and_explained,
    host_netns_path_refused_under_restricted,
    case_variant_and_duplicate_keys_are_refused_under_gvisor,
    spec_1_3_fields_are_applied_or_refused_under_gvisor,
    runsc_config_holds_only_what_moat_read,
    gvisor_pod_lifecycle,
    gvisor_pod_join_needs_moats_own_pod_sandbox,
    gvisor_pod_app_seccomp_applies_under_a_sandbox_without_one,
    gvisor_ids_never_reach_another_by_prefix,
    seccomp_errnos_and_exec_under_the_containers_filter,
    runscs_conversion_answers_every_syscall_as_moats_filter,
    a_profile_denying_seccomp_and_prctl_runs_as_under_runc,
    seccomp_trampoline_missing_is_a_clear_error_and_leaves_nothing,
    platform_is_one_this_runsc_lists_and_defaults_to_its_own,
    control_socket_unreachable_from_host_users_and_host_network_containers,
    a_failed_create_ends_promptly_under_a_caller_that_reaps_after_it,
    a_failed_create_never_ends_another_containers_sandbox,
    kvm_only_where_the_cpu_can_run_it,
    checkpoint_restore_and_fork_through_runsc,
);

/// True when the test can run; says why not otherwise.
fn usable(test: &str) -> bool {
    if !runsc().is_file() {
        missing(&format!("runsc not installed ({test})"));
        return false;
    }
    if !is_root() {
        require_root();
        return false;
    }
    true
}

/// A temp dir with a state root and bundles; on drop every container it made is
/// force-deleted and the directory removed.
struct Env {
    dir: PathBuf,
    ids: Vec<String>,
    tag: String,
    /// `MOAT_CONFIG` for moat's calls; `None`: moat's default policy, RESTRICTED.
    config: Option<PathBuf>,
}

impl Env {
    fn new(name: &str) -> Env {
        support::reap_in_background();
        // The two runs of a test (one per runsc) run side by side: apart by a letter.
        let variant = VARIANT.with(std::cell::Cell::get);
        let tag = format!("gvt{}{variant}-{name}", std::process::id());
        let dir = std::env::temp_dir().join(&tag);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env {
            dir,
            ids: Vec::new(),
            tag,
            config: None,
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn id(&mut self, name: &str) -> String {
        let id = format!("{}-{name}", self.tag);
        self.ids.push(id.clone());
        id
    }

    /// A busybox bundle (scripts/mkbundle) running `args`, with extra annotations.
    fn bundle(&self, name: &str, annotations: &[(&str, &str)], args: &[&str]) -> PathBuf {
        let b = self.dir.join(name);
        mkbundle(&b, args, &[]);
        let cfg = b.join("config.json");
        let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
        for (k, v) in annotations {
            spec["annotations"][*k] = Value::String(v.to_string());
        }
        std::fs::write(&cfg, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
        b
    }

    fn moat(&self) -> Command {
        let mut c = Command::new(MOAT);
        c.arg("--root").arg(self.root()).stdin(Stdio::null());
        c.env_remove("MOAT_RUNTIME").env_remove("MOAT_CONFIG");
        c.env("PATH", test_path());
        if let Some(cfg) = &self.config {
            c.env("MOAT_CONFIG", cfg);
        }
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut c = self.moat();
        c.args(args);
        let out = output(&mut c, &self.dir);
        eprintln!(
            "moat {args:?} -> {:?}\n  stdout: {}\n  stderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        out
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "moat {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn state(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["state", id])).expect("state JSON")
    }

    fn wait_status(&self, id: &str, want: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let st = self.state(id);
            if st["status"] == want || Instant::now() > deadline {
                return st;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        for id in &self.ids {
            let _ = self
                .moat()
                .args(["delete", "--force", id])
                .stderr(Stdio::null())
                .run_status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `Command::output` through files: a created container's sandbox and gofer keep the
/// caller's stdout and stderr open (as a runc container's init does), so reading pipes
/// to EOF would wait for the container to exit.
fn output(c: &mut Command, dir: &Path) -> Output {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (o, e) = (dir.join(format!(".out{n}")), dir.join(format!(".err{n}")));
    let status = c
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .run_status()
        .expect("run moat");
    let out = Output {
        status,
        stdout: std::fs::read(&o).unwrap(),
        stderr: std::fs::read(&e).unwrap(),
    };
    let _ = (std::fs::remove_file(o), std::fs::remove_file(e));
    out
}

fn lifecycle_under_gvisor() {
    if !usable("lifecycle_under_gvisor") {
        return;
    }
    let mut e = Env::new("life");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let pid_file = e.dir.join("pid");
    e.ok(&[
        "create",
        "--bundle",
        bundle.to_str().unwrap(),
        "--pid-file",
        pid_file.to_str().unwrap(),
        &id,
    ]);

    let st = e.state(&id);
    assert_eq!(st["status"], "created");
    assert_eq!(
        st["bundle"],
        bundle.to_str().unwrap(),
        "state shows the engine's bundle"
    );
    assert_eq!(st["rootfs"], bundle.join("rootfs").to_str().unwrap());
    assert_eq!(st["annotations"]["moat.runtime"], "gvisor");
    assert!(st["created"].as_str().is_some_and(|c| !c.is_empty()));
    let pid: i64 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(st["pid"], pid, "pid-file holds the sandbox pid");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        cmdline.starts_with(b"runsc-sandbox\0"),
        "pid is runsc's sandbox"
    );
    let rec = std::fs::read_to_string(e.root().join(&id).join("state.json")).unwrap();
    assert!(rec.contains(r#""kind":"gvisor""#), "{rec}");

    e.ok(&["start", &id]);
    assert_eq!(e.state(&id)["status"], "running");
    // A runsc failure: runc's status 1 (runsc exits 128), its message on stderr and as
    // one JSON line in --log.
    let log = e.dir.join("start-log.json");
    let o = e.run(&[
        "--log",
        log.to_str().unwrap(),
        "--log-format",
        "json",
        "start",
        &id,
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("in state running"), "{}", stderr(&o));
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.ends_with("}\n") && logged.lines().count() == 1,
        "{logged:?}"
    );
    let obj: Value = serde_json::from_str(logged.trim()).unwrap();
    assert_eq!(obj["level"], "error");

    let out = e.ok(&["exec", &id, "sh", "-c", "echo exec-out"]);
    assert_eq!(out.trim(), "exec-out");
    let o = e.run(&["exec", &id, "sh", "-c", "exit 5"]);
    assert_eq!(
        o.status.code(),
        Some(5),
        "exec passes the exit status through"
    );

    // Proof of gVisor: its own kernel version. Its kernel log is out of reach: RESTRICTED's
    // profile denies syslog(2) with ENOSYS, in an exec'd process too (runsc alone would
    // start it unfiltered, and answer EPERM).
    let o = e.run(&["exec", &id, "dmesg"]);
    assert!(
        !o.status.success() && stderr(&o).contains("klogctl: Function not implemented"),
        "dmesg in an exec'd process is denied as the profile says"
    );
    let inside = e.ok(&["exec", &id, "uname", "-r"]);
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(inside.trim(), host.trim(), "same kernel inside and outside");

    e.ok(&["kill", &id, "KILL"]);
    let st = e.wait_status(&id, "stopped");
    assert_eq!(st["status"], "stopped");
    assert_eq!(st["pid"], 0, "pid 0 when stopped, as runc");

    e.ok(&["delete", &id]);
    assert!(!e.root().join(&id).exists(), "record gone after delete");
    let o = e.run(&["state", &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"));
}

fn native_and_gvisor_side_by_side() {
    if !usable("native_and_gvisor_side_by_side") {
        return;
    }
    let mut e = Env::new("both");
    let (n, g) = (e.id("native"), e.id("gvisor"));
    let nb = e.bundle("nb", &[], &["sleep", "600"]);
    let gb = e.bundle("gb", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    e.ok(&["run", "-d", "--bundle", nb.to_str().unwrap(), &n]);
    e.ok(&["run", "-d", "--bundle", gb.to_str().unwrap(), &g]);

    let list: Value = serde_json::from_str(&e.ok(&["list", "--format", "json"])).unwrap();
    let rows = list.as_array().expect("list is an array");
    for id in [&n, &g] {
        let row = rows.iter().find(|r| r["id"] == id.as_str());
        let row = row.unwrap_or_else(|| panic!("{id} not listed: {list}"));
        assert_eq!(row["status"], "running", "{row}");
        assert!(row["pid"].as_i64().unwrap() > 0, "{row}");
    }
    let table = e.ok(&["list"]);
    assert!(table.contains(&n) && table.contains(&g), "{table}");

    // Only the gVisor one runs gVisor's kernel.
    let gk = e.ok(&["exec", &g, "cat", "/proc/version"]);
    let nk = e.ok(&["exec", &n, "cat", "/proc/version"]);
    let host = std::fs::read_to_string("/proc/version").unwrap();
    assert_eq!(nk.trim(), host.trim());
    assert_ne!(gk.trim(), host.trim());

    e.ok(&["delete", "--force", &n]);
    e.ok(&["delete", "--force", &g]);
    assert_eq!(e.ok(&["list", "--format", "json"]).trim(), "null");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn runsc_missing_is_a_clear_error_and_leaves_nothing() {
    if !usable("runsc_missing") {
        return;
    }
    let mut e = Env::new("missing");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["true"]);
    let cfg = e.dir.join("config.toml");
    std::fs::write(&cfg, "[gvisor]\nrunsc_path = \"/nonexistent/runsc\"\n").unwrap();
    let log = e.dir.join("log.json");
    let o = output(
        e.moat()
            .env("MOAT_CONFIG", &cfg)
            .args(["--log", log.to_str().unwrap(), "--log-format", "json"])
            .args(["create", "--bundle", bundle.to_str().unwrap(), &id]),
        &e.dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("runsc not found (/nonexistent/runsc"),
        "{}",
        stderr(&o)
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    let last: Value = serde_json::from_str(logged.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "error");
    assert!(last["msg"].as_str().unwrap().starts_with("runsc not found"));
    assert!(!e.root().join(&id).exists(), "no state dir left behind");

    // Not in PATH either.
    std::fs::write(e.dir.join("none.toml"), "").unwrap();
    let o = output(
        e.moat()
            .env("PATH", "/nonexistent")
            .env("MOAT_CONFIG", e.dir.join("none.toml"))
            .args(["run", "--bundle", bundle.to_str().unwrap(), &id]),
        &e.dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("runsc not found (not in PATH"),
        "{}",
        stderr(&o)
    );
    assert!(!e.root().join(&id).exists());
}

fn kill_created_and_stopped_like_runc() {
    if !usable("kill_created_and_stopped") {
        return;
    }
    let mut e = Env::new("kill");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let log = e.dir.join("log.json");
    e.ok(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    // runsc refuses to signal a created container; runc kills its init.
    e.ok(&["kill", &id, "TERM"]);
    assert_eq!(e.wait_status(&id, "stopped")["status"], "stopped");

    let o = output(
        e.moat()
            .args(["--log", log.to_str().unwrap(), "--log-format", "json"])
            .args(["kill", &id, "KILL"]),
        &e.dir,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("container not running"),
        "{}",
        stderr(&o)
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.ends_with("}\n"),
        "one JSON object per line: {logged:?}"
    );
    let last: Value = serde_json::from_str(logged.lines().last().unwrap()).unwrap();
    assert_eq!(last["msg"], "container not running");
    // containerd's shim sends `kill --all <id> 9` after every exit.
    e.ok(&["kill", "--all", &id, "9"]);
    e.ok(&["delete", &id]);
    assert!(!e.root().join(&id).exists());
}

fn foreground_run_passes_the_status_and_removes_the_record() {
    if !usable("foreground_run") {
        return;
    }
    let mut e = Env::new("fg");
    let id = e.id("c");
    let bundle = e.bundle("b", &[], &["sh", "-c", "echo fg-out; exit 7"]);
    let o = output(
        e.moat().env("MOAT_RUNTIME", "gvisor").args([
            "run",
            "--bundle",
            bundle.to_str().unwrap(),
            &id,
        ]),
        &e.dir,
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "fg-out");
    assert!(!e.root().join(&id).exists(), "record removed after the run");
}

/// A runsc whose sandbox fails to start after it made the sandbox's cgroup (seen under
/// strace with 20221219): the foreground run's clean-up removes that cgroup in every
/// hierarchy, as delete does. The stand-in runsc makes the cgroup where runsc would (the
/// spec's cgroupsPath, `/<id>` without one) and fails; every other call is the real one's.
fn a_failed_foreground_run_leaves_no_cgroup_runsc_made() {
    if !usable("failed_foreground_run") {
        return;
    }
    let mut e = Env::new("fgfail");
    let id = e.id("c");
    let bundle = e.bundle("b", &[], &["true"]);
    let made = e.dir.join("made");
    let fake = e.dir.join("runsc");
    std::fs::write(
        &fake,
        format!(
            r#"#!/bin/sh
run= bundle= prev= last=
for a; do
  [ "$prev" = --bundle ] && bundle=$a
  case "$a" in run) run=1;; --bundle=*) bundle=${{a#--bundle=}};; esac
  prev=$a last=$a
done
if [ -n "$run" ]; then
  p=$(grep -o '"cgroupsPath": *"[^"]*"' "$bundle/config.json" | sed 's/.*"\([^"]*\)"$/\1/')
  [ -n "$p" ] || p=/$last
  for h in /sys/fs/cgroup/*/; do mkdir -p "$h${{p#/}}"; done
  echo "$p" >{made}
  echo "starting sandbox: failed" >&2
  exit 1
fi
exec {real} "$@"
"#,
            made = made.display(),
            real = runsc().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cfg = e.dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gvisor]\nruntime = \"gvisor\"\nrunsc_path = \"{}\"\n",
            fake.display()
        ),
    )
    .unwrap();
    e.config = Some(cfg);
    let o = e.run(&["run", "--bundle", bundle.to_str().unwrap(), &id]);
    assert!(!o.status.success(), "the stand-in runsc's run fails");
    let path = std::fs::read_to_string(&made).expect("the stand-in made a cgroup");
    let path = path.trim().trim_start_matches('/');
    assert!(!path.is_empty());
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup")
        .unwrap()
        .flatten()
        .map(|h| h.path().join(path))
        .filter(|d| d.is_dir())
        .collect();
    for d in &left {
        let _ = std::fs::remove_dir(d);
    }
    assert!(left.is_empty(), "runsc's cgroup left behind: {left:?}");
    assert!(!e.root().join(&id).exists(), "record removed after the run");
}

/// runsc mounts a tmpfs empty whatever its options say: a `tmpcopyup` (podman's default
/// on --tmpfs and --read-only) is reported in the --log, and the container still runs.
fn tmpcopyup_is_said_not_applied() {
    if !usable("tmpcopyup") {
        return;
    }
    let mut e = Env::new("tcu");
    let id = e.id("c");
    let bundle = e.bundle(
        "b",
        &[("moat.runtime", "gvisor")],
        &["sh", "-c", "ls /etc | wc -l"],
    );
    let cfg = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "destination": "/etc", "type": "tmpfs", "source": "tmpfs",
            "options": ["tmpcopyup", "nosuid", "nodev"]
        }));
    std::fs::write(&cfg, serde_json::to_vec(&spec).unwrap()).unwrap();
    let log = e.dir.join("log");
    let o = e.run(&[
        "--log",
        log.to_str().unwrap(),
        "run",
        "--bundle",
        bundle.to_str().unwrap(),
        &id,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let n = std::fs::read(&cfg).unwrap();
    let mounts = serde_json::from_slice::<Value>(&n).unwrap()["mounts"]
        .as_array()
        .unwrap()
        .len();
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains(&format!(
            "mounts[{}].options: tmpcopyup not applied under gVisor",
            mounts - 1
        )),
        "{logged}"
    );
    // What runsc does today: the tmpfs starts empty (the day it copies, the warning goes).
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "0");
}

fn alias_selects_gvisor_and_ignores_a_native_annotation() {
    if !usable("alias") {
        return;
    }
    let mut e = Env::new("alias");
    let alias = e.dir.join("moat-gvisor");
    std::os::unix::fs::symlink(MOAT, &alias).unwrap();
    // Annotations only tighten: moat.runtime=native cannot leave the operator's gVisor; the
    // container runs under gVisor, and the ignored annotation is reported.
    let nid = e.id("n");
    let native = e.bundle("nb", &[("moat.runtime", "native")], &["true"]);
    // The warning goes to the `--log` file (create's stderr is the container's).
    let log = e.dir.join("alias.log");
    let o = output(
        Command::new(&alias)
            .arg("--log")
            .arg(&log)
            .arg("--root")
            .arg(e.root())
            .args(["create", "--bundle", native.to_str().unwrap(), &nid])
            .stdin(Stdio::null()),
        &e.dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        err.contains("annotations.moat.runtime: ignored") && err.contains("[alias.NAME]"),
        "{err}"
    );
    let rec = std::fs::read_to_string(e.root().join(&nid).join("state.json")).unwrap();
    assert!(rec.contains(r#""kind":"gvisor""#), "{rec}");
    let policy = std::fs::read_to_string(e.root().join(&nid).join("policy.json")).unwrap();
    assert!(
        policy.contains("\"annotations.moat.runtime\"") && policy.contains("\"ignored\""),
        "{policy}"
    );
    let o = e.run(&["delete", "--force", &nid]);
    assert!(o.status.success(), "{}", stderr(&o));

    let id = e.id("c");
    let plain = e.bundle("pb", &[], &["sleep", "600"]);
    let o = output(
        Command::new(&alias)
            .arg("--root")
            .arg(e.root())
            .args(["run", "-d", "--bundle", plain.to_str().unwrap(), &id])
            .stdin(Stdio::null()),
        &e.dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    // Later calls route by the record, whatever the binary's name.
    let st = e.state(&id);
    assert_eq!(st["status"], "running");
    let rec = std::fs::read_to_string(e.root().join(&id).join("state.json")).unwrap();
    assert!(rec.contains(r#""kind":"gvisor""#), "{rec}");
    e.ok(&["delete", "--force", &id]);
}

fn events_update_pause_and_ps() {
    if !usable("events_update_pause_and_ps") {
        return;
    }
    let mut e = Env::new("extra");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    // A cgroup of our own, so that update has something to write to.
    let cgpath = format!("/{}/c", e.tag);
    let cfg = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["linux"]["cgroupsPath"] = Value::String(cgpath.clone());
    std::fs::write(&cfg, serde_json::to_vec(&spec).unwrap()).unwrap();
    let _cg = CgroupGuard(format!("/{}", e.tag));
    e.ok(&["create", "--bundle", bundle.to_str().unwrap(), &id]);

    // runsc panics on events of a created container; moat answers with zeros.
    let ev: Value = serde_json::from_str(&e.ok(&["events", "--stats", &id])).unwrap();
    assert_eq!(ev["type"], "stats");
    assert_eq!(ev["data"]["pids"]["current"], 0);

    // runsc has no update: moat writes the sandbox's host cgroup.
    e.ok(&["update", "--pids-limit", "77", &id]);
    let pids_max = Path::new("/sys/fs/cgroup/pids").join(cgpath.trim_start_matches('/'));
    if pids_max.is_dir() {
        let v = std::fs::read_to_string(pids_max.join("pids.max")).unwrap();
        assert_eq!(v.trim(), "77");
    }

    e.ok(&["start", &id]);
    let ev: Value = serde_json::from_str(&e.ok(&["events", "--stats", &id])).unwrap();
    assert!(ev["data"]["pids"]["current"].as_i64().unwrap() >= 1, "{ev}");
    let ps: Value = serde_json::from_str(&e.ok(&["ps", "-f", "json", &id])).unwrap();
    assert!(!ps.as_array().unwrap().is_empty(), "{ps}");

    e.ok(&["pause", &id]);
    assert_eq!(e.state(&id)["status"], "paused");
    e.ok(&["resume", &id]);
    assert_eq!(e.state(&id)["status"], "running");
    e.ok(&["pause", &id]);
    // runsc refuses to signal a paused container; SIGKILL must still end it.
    e.ok(&["kill", &id, "KILL"]);
    assert_eq!(e.wait_status(&id, "stopped")["status"], "stopped");
    e.ok(&["delete", &id]);
}

/// Every runtime-spec 1.3 field under gVisor: what runsc would drop is refused before
/// anything exists, naming the field (`pids.limit: 0` included: runsc writes no limit for
/// it); `mountLabel` is ignored with a `--log` warning where the host has no SELinux, as
/// natively; `checkBeforeUpdate` holds on update (moat writes the sandbox's cgroup), and an
/// update to a pids limit of 0 is refused as the create is.
fn spec_1_3_fields_are_applied_or_refused_under_gvisor() {
    if !usable("spec_1_3_fields_are_applied_or_refused_under_gvisor") {
        return;
    }
    let mut e = Env::new("spec13");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let b = bundle.to_str().unwrap().to_string();
    let spec_path = bundle.join("config.json");
    let mut good: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    // A cgroup of our own, which the updates below write to.
    good["linux"]["cgroupsPath"] = Value::String(format!("/{}/c", e.tag));
    let _cg = CgroupGuard(format!("/{}", e.tag));
    let cases: [(&str, &str, Value); 5] = [
        (
            "/linux/memoryPolicy",
            "linux.memoryPolicy: refused",
            json!({"mode": "MPOL_LOCAL"}),
        ),
        (
            "/linux/resources/rdma",
            "linux.resources.rdma: refused",
            json!({"rxe0": {"hcaHandles": 1}}),
        ),
        (
            "/linux/netDevices",
            "linux.netDevices: refused",
            json!({"eth9": {}}),
        ),
        (
            "/process/execCPUAffinity",
            "process.execCPUAffinity: refused",
            json!({"final": "0"}),
        ),
        (
            "/linux/resources/pids",
            "linux.resources.pids.limit 0: refused under gVisor",
            json!({"limit": 0}),
        ),
    ];
    for (pointer, needle, value) in cases {
        let mut spec = good.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let mut at = &mut spec;
        for part in parent.split('/').skip(1) {
            if at.get(part).is_none() {
                at[part] = json!({});
            }
            at = at.get_mut(part).unwrap();
        }
        at[key] = value;
        std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
        let o = e.run(&["create", "--bundle", &b, &id]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{pointer}: {err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            !e.root().join(&id).exists(),
            "{pointer}: state directory left"
        );
        assert_eq!(
            runsc_files(&e.root(), &id),
            Vec::<String>::new(),
            "{pointer}"
        );
        assert_eq!(runsc_processes(&e.root()), Vec::<i32>::new(), "{pointer}");
    }

    // mountLabel: ignored with a --log warning where the host has no SELinux; refused
    // where it has (runsc labels nothing).
    let selinux = Path::new("/sys/fs/selinux/enforce").exists();
    let mut spec = good.clone();
    spec["linux"]["mountLabel"] = json!("system_u:object_r:container_file_t:s0:c1,c2");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let log = e.dir.join("spec13.log");
    let mut c = e.moat();
    c.args([
        "--log",
        log.to_str().unwrap(),
        "create",
        "--bundle",
        &b,
        &id,
    ]);
    let o = output(&mut c, &e.dir);
    if selinux {
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("linux.mountLabel"), "{}", stderr(&o));
        assert!(!e.root().join(&id).exists());
        std::fs::write(&spec_path, serde_json::to_vec(&good).unwrap()).unwrap();
        e.ok(&["create", "--bundle", &b, &id]);
    } else {
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(!stderr(&o).contains("mountLabel"), "{}", stderr(&o));
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            logged.contains("linux.mountLabel ignored: the host has no SELinux"),
            "{logged}"
        );
    }
    e.ok(&["start", &id]);

    // Updates: a pids limit of 0 is refused; checkBeforeUpdate refuses a memory limit at
    // or below the sandbox's usage (the sentry's own memory counts there) and writes
    // nothing.
    let pids_before = e.state(&id)["pid"].as_i64().unwrap();
    let res = e.dir.join("res.json");
    std::fs::write(&res, json!({"pids": {"limit": 0}}).to_string()).unwrap();
    let o = e.run(&["update", "--resources", res.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("linux.resources.pids.limit 0: refused under gVisor"),
        "{}",
        stderr(&o)
    );
    let cgroup = std::fs::read_to_string(format!("/proc/{pids_before}/cgroup")).unwrap();
    let memory_dir = cgroup
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
        .map(|p| Path::new("/sys/fs/cgroup/memory").join(p.trim_start_matches('/')));
    let limit_before = memory_dir
        .as_ref()
        .and_then(|d| std::fs::read_to_string(d.join("memory.limit_in_bytes")).ok());
    std::fs::write(
        &res,
        json!({"memory": {"limit": 4 << 20, "checkBeforeUpdate": true}}).to_string(),
    )
    .unwrap();
    let o = e.run(&["update", "--resources", res.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("linux.resources.memory.limit: memory limit 4194304 is not above"),
        "{}",
        stderr(&o)
    );
    if let (Some(d), Some(before)) = (&memory_dir, &limit_before) {
        assert_eq!(
            &std::fs::read_to_string(d.join("memory.limit_in_bytes")).unwrap(),
            before,
            "checkBeforeUpdate wrote the limit"
        );
    }
    e.ok(&["kill", &id, "KILL"]);
    e.wait_status(&id, "stopped");
    e.ok(&["delete", &id]);
}

/// Removes a cgroup (every hierarchy, leaves first) when dropped.
struct CgroupGuard(String);

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        let rel = self.0.trim_start_matches('/');
        let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        let mut roots: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        roots.push(PathBuf::from("/sys/fs/cgroup"));
        // A sandbox that has just exited may still be leaving its cgroup (EBUSY).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut left = false;
            for r in &roots {
                let dir = r.join(rel);
                if dir.is_dir() {
                    remove_cgroup_tree(&dir);
                    left |= dir.is_dir();
                }
            }
            if !left || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Every runsc process under a moat root: its cmdline mentions the root.
fn runsc_processes(root: &Path) -> Vec<i32> {
    let root = root.to_str().unwrap().as_bytes();
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args[0].starts_with(b"runsc")
            && args
                .iter()
                .any(|a| a.windows(root.len()).any(|w| w == root))
        {
            pids.push(pid);
        }
    }
    pids
}

fn restricted_policy_reaches_runsc_and_verify_checks_it() {
    if !usable("restricted_policy_reaches_runsc_and_verify_checks_it") {
        return;
    }
    let mut e = Env::new("pol");
    let id = e.id("c");
    let fleet = format!("/{}-fleet", e.tag);
    let _cg = CgroupGuard(fleet.clone());
    let cfg = e.dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!("[restricted]\nmemory = \"512m\"\n\n[fleet]\ncgroup = \"{fleet}\"\npids = 20000\n"),
    )
    .unwrap();
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let spec_path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    spec["process"]["capabilities"]["bounding"]
        .as_array_mut()
        .unwrap()
        .push("CAP_SYS_ADMIN".into());
    spec["process"]["noNewPrivileges"] = Value::Bool(false);
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();

    // A descriptor leaked by the caller (no FD_CLOEXEC) and moat variables in the
    // environment must not reach runsc's processes.
    let marker = e.dir.join("leaked-fd-marker");
    let leaked = std::fs::File::create(&marker).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let mut c = e.moat();
    c.env("MOAT_CONFIG", &cfg)
        .env("MOAT_LEAK_PROBE", "1")
        .args(["create", "--bundle", bundle.to_str().unwrap(), &id]);
    let out = output(&mut c, &e.dir);
    drop(leaked);
    assert!(out.status.success(), "create: {}", stderr(&out));

    let dir = e.root().join(&id);
    let rec: Value =
        serde_json::from_slice(&std::fs::read(dir.join("state.json")).unwrap()).unwrap();
    assert_eq!(rec["policy"], "restricted", "the real policy is recorded");
    let eff: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    assert_eq!(
        eff["process"]["capabilities"]["bounding"],
        serde_json::json!([])
    );
    assert_eq!(eff["process"]["noNewPrivileges"], true);
    // moat's profile, which runsc's conversion can express: rewritten for runsc
    // (ENOSYS as SCMP_ACT_TRACE, ptrace refused), the process's args its own, and the
    // trampoline's prefix kept for exec'd processes.
    assert_eq!(
        eff["process"]["args"],
        serde_json::json!(["sleep", "600"]),
        "moat's profile, through runsc's conversion"
    );
    assert_eq!(
        eff["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_TRACE",
        "{}",
        eff["linux"]
    );
    let prefix: Vec<String> =
        serde_json::from_slice(&std::fs::read(dir.join("seccomp-exec.json")).unwrap()).unwrap();
    assert_eq!(prefix[1], "--moat-gvisor-seccomp-exec", "{prefix:?}");
    assert_eq!(eff["linux"]["cgroupsPath"], format!("{fleet}/{id}"));
    assert_eq!(eff["linux"]["resources"]["memory"]["limit"], 512 << 20);
    let decision: Value =
        serde_json::from_slice(&std::fs::read(dir.join("policy.json")).unwrap()).unwrap();
    assert!(
        decision["not_applied"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["field"] == "linux.maskedPaths"),
        "{decision}"
    );

    let procs = runsc_processes(&e.root());
    assert!(procs.len() >= 2, "sandbox and gofer: {procs:?}");
    for pid in &procs {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(
            !environ.windows(5).any(|w| w == b"MOAT_"),
            "pid {pid} got moat's environment"
        );
        for f in std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
        {
            let target = std::fs::read_link(f.path()).unwrap_or_default();
            assert_ne!(target, marker, "pid {pid} got the leaked descriptor");
        }
    }
    let sandbox = e.state(&id)["pid"].as_i64().unwrap();
    let cmdline = String::from_utf8(std::fs::read(format!("/proc/{sandbox}/cmdline")).unwrap())
        .unwrap()
        .replace('\0', " ");
    assert!(cmdline.contains("--oci-seccomp=true"), "{cmdline}");

    // The fleet parent is capped, the sandbox's cgroup holds the policy's limits.
    let pids_root = Path::new("/sys/fs/cgroup/pids");
    if pids_root.join(fleet.trim_start_matches('/')).is_dir() {
        let parent = pids_root.join(fleet.trim_start_matches('/'));
        assert_eq!(
            std::fs::read_to_string(parent.join("pids.max"))
                .unwrap()
                .trim(),
            "20000"
        );
        assert_eq!(
            std::fs::read_to_string(parent.join(&id).join("pids.max"))
                .unwrap()
                .trim(),
            "4096"
        );
    }

    // Created, not started: runsc's sandbox has no filter of its own yet (it installs it at
    // start), which verify says rather than failing the container.
    let mut v = e.moat();
    v.env("MOAT_CONFIG", &cfg).args(["verify", &id]);
    let out = output(&mut v, &e.dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "verify of the created container:\n{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("ok")
            && l.contains("sandbox Seccomp")
            && l.contains("at start")),
        "{text}"
    );

    e.ok(&["start", &id]);
    // The sentry's view of PID 1: no capabilities, moat's seccomp profile.
    let mut v = e.moat();
    v.env("MOAT_CONFIG", &cfg).args(["verify", &id]);
    let out = output(&mut v, &e.dir);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}{}", stderr(&out));
    assert!(out.status.success(), "verify failed:\n{text}");
    for key in ["NoNewPrivs", "Seccomp"] {
        assert!(
            text.lines().any(|l| l.starts_with("ok")
                && l.contains(&format!("sandbox {key}"))
                && !l.contains("at start")),
            "the started sandbox's {key} is checked for real:\n{text}"
        );
    }
    for check in [
        "gVisor sandbox",
        "runsc --oci-seccomp",
        "sandbox pids.max",
        "sandbox memory limit",
        "fleet pids.max",
        "inside: CapBnd",
        "inside: Seccomp",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("ok") && l.contains(check)),
            "{check} not checked:\n{text}"
        );
    }
    assert!(text.contains("n/a  linux.maskedPaths"), "{text}");

    // verify notices when the sandbox's cgroup no longer holds the policy's limit.
    let sandbox_pids = pids_root.join(fleet.trim_start_matches('/')).join(&id);
    if sandbox_pids.is_dir() {
        std::fs::write(sandbox_pids.join("pids.max"), "4000").unwrap();
        let mut v = e.moat();
        v.env("MOAT_CONFIG", &cfg).args(["verify", &id]);
        let out = output(&mut v, &e.dir);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("FAIL") && l.contains("sandbox pids.max")),
            "{text}"
        );
    }

    // An exec gets no more than the container, whatever the process file asks for.
    let proc_file = e.dir.join("process.json");
    let mut p = spec["process"].clone();
    p["args"] = serde_json::json!(["cat", "/proc/self/status"]);
    p["capabilities"]["bounding"] = serde_json::json!(["CAP_SYS_ADMIN", "CAP_CHOWN"]);
    p["capabilities"]["effective"] = serde_json::json!(["CAP_SYS_ADMIN", "CAP_CHOWN"]);
    p["capabilities"]["permitted"] = serde_json::json!(["CAP_SYS_ADMIN", "CAP_CHOWN"]);
    std::fs::write(&proc_file, serde_json::to_vec(&p).unwrap()).unwrap();
    let status = e.ok(&["exec", "--process", proc_file.to_str().unwrap(), &id]);
    for key in ["CapEff", "CapBnd"] {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap_or("");
        assert!(line.ends_with("0000000000000000"), "{key}: {line}");
    }

    e.ok(&["kill", &id, "KILL"]);
    e.wait_status(&id, "stopped");
    e.ok(&["delete", &id]);
}

fn host_network_refused_under_restricted_and_explained() {
    if !usable("host_network_refused_under_restricted_and_explained") {
        return;
    }
    let mut e = Env::new("net");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["true"]);
    let spec_path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network");
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let o = e.run(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("linux.namespaces") && err.contains("host's network"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!e.root().join(&id).exists(), "nothing left behind");

    // policy explain for a gVisor spec lists what gVisor does not apply.
    let b2 = e.bundle("b2", &[("moat.runtime", "gvisor")], &["true"]);
    let text = e.ok(&["policy", "explain", "--bundle", b2.to_str().unwrap()]);
    assert!(text.contains("runtime: gVisor"), "{text}");
    assert!(text.contains("not applied under gVisor"), "{text}");
    assert!(text.contains("linux.maskedPaths"), "{text}");
    assert!(
        !text.contains("process.apparmorProfile         set"),
        "{text}"
    );
}

/// Docker's `--network host` passes the host's network namespace by path: under RESTRICTED
/// the policy's floor refuses it, and where `[restricted] host_namespaces` lets it through
/// natively, gVisor still refuses it (runsc would serve it with host sockets).
fn host_netns_path_refused_under_restricted() {
    if !usable("host_netns_path_refused_under_restricted") {
        return;
    }
    let mut e = Env::new("netpath");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["true"]);
    let spec_path = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    let ns = spec["linux"]["namespaces"].as_array_mut().unwrap();
    ns.retain(|n| n["type"] != "network");
    ns.push(serde_json::json!({"type": "network",
                               "path": format!("/proc/{}/ns/net", std::process::id())}));
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let allowed = e.dir.join("hostnet.toml");
    std::fs::write(&allowed, "[restricted]\nhost_namespaces = [\"network\"]\n").unwrap();
    for (cfg, want) in [
        (
            None,
            "the host's network namespace is refused under RESTRICTED",
        ),
        (Some(&allowed), "shares the host's network"),
    ] {
        let id = e.id("c");
        let mut c = e.moat();
        if let Some(cfg) = cfg {
            c.env("MOAT_CONFIG", cfg);
        }
        let o = output(
            c.args(["create", "--bundle", bundle.to_str().unwrap(), &id]),
            &e.dir,
        );
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains(want), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!e.root().join(&id).exists(), "nothing left behind");
    }
}

/// The files runsc keeps for `id` under the shared `--root` (`<root>/@runsc`).
fn runsc_files(root: &Path, id: &str) -> Vec<String> {
    std::fs::read_dir(root.join("@runsc"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(id))
                .collect()
        })
        .unwrap_or_default()
}

/// One JSON truth: Go's `encoding/json` matches keys case-insensitively, so
/// runsc applied `process."Capabilities"` (CAP_SYS_ADMIN inside the sentry) while moat's
/// policy never saw it. Refused at create, before anything exists (no state directory,
/// no runsc state, no sandbox), for a duplicate key too, and in an exec process file.
fn case_variant_and_duplicate_keys_are_refused_under_gvisor() {
    if !usable("case_variant_and_duplicate_keys_are_refused_under_gvisor") {
        return;
    }
    let mut e = Env::new("keys");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let b = bundle.to_str().unwrap();
    let spec_path = bundle.join("config.json");
    let good = std::fs::read(&spec_path).unwrap();
    let spec: Value = serde_json::from_slice(&good).unwrap();
    let admin = serde_json::json!(["CAP_SYS_ADMIN"]);
    let caps = serde_json::json!({"bounding": admin, "effective": admin, "permitted": admin});

    let refused = |text: Vec<u8>, needle: &str| {
        std::fs::write(&spec_path, text).unwrap();
        let o = e.run(&["create", "--bundle", b, &id]);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!e.root().join(&id).exists(), "state directory left behind");
        assert_eq!(runsc_files(&e.root(), &id), Vec::<String>::new());
        assert_eq!(runsc_processes(&e.root()), Vec::<i32>::new());
    };
    let mut bad = spec.clone();
    bad["process"]["Capabilities"] = caps.clone();
    refused(
        serde_json::to_vec(&bad).unwrap(),
        r#"config.json: process: "Capabilities" differs only in case from "capabilities"; refused"#,
    );
    let text = serde_json::to_string(&spec).unwrap();
    assert!(text.contains(r#""process":{"#));
    refused(
        text.replacen(r#""process":{"#, r#""process":{"args":["true"],"#, 1)
            .into_bytes(),
        r#"config.json: process: duplicate key "args"; refused"#,
    );
    // Validated as natively: what moat refuses never reaches runsc (which would ignore it).
    let mut rdt = spec.clone();
    rdt["linux"]["intelRdt"] = serde_json::json!({"closID": "x"});
    refused(
        serde_json::to_vec(&rdt).unwrap(),
        "linux.intelRdt: refused: moat does not apply Intel RDT",
    );

    // exec: a process file with "Capabilities" is refused, whatever the policy.
    std::fs::write(&spec_path, &good).unwrap();
    e.ok(&["create", "--bundle", b, &id]);
    e.ok(&["start", &id]);
    let mut p = spec["process"].clone();
    p.as_object_mut().unwrap().remove("capabilities");
    p["Capabilities"] = caps;
    p["args"] = serde_json::json!(["cat", "/proc/self/status"]);
    let proc_file = e.dir.join("process.json");
    std::fs::write(&proc_file, serde_json::to_vec(&p).unwrap()).unwrap();
    let o = e.run(&["exec", "--process", proc_file.to_str().unwrap(), &id]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let eff = out
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    assert_eq!(
        eff & (1 << 21),
        0,
        "the exec'd process holds CAP_SYS_ADMIN: {out}"
    );
    assert_eq!(o.status.code(), Some(255), "exec ran: {out}");
    assert!(
        stderr(&o).contains(
            r#"top level: "Capabilities" differs only in case from "capabilities"; refused"#
        ),
        "{}",
        stderr(&o)
    );
    e.ok(&["kill", &id, "KILL"]);
    e.wait_status(&id, "stopped");
    e.ok(&["delete", &id]);
}

/// runsc's config.json is moat's typed spec serialised, never the engine's document:
/// fields moat does not know (planted at several depths) are not in it; the one opaque
/// field on the pass-through list, `linux.resources.network`, reaches runsc.
fn runsc_config_holds_only_what_moat_read() {
    if !usable("runsc_config_holds_only_what_moat_read") {
        return;
    }
    let mut e = Env::new("cfg");
    let id = e.id("c");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let b = bundle.to_str().unwrap();
    let spec_path = bundle.join("config.json");
    let spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    let mut planted = spec.clone();
    planted["process"]["fooBar"] = 1.into();
    planted["process"]["user"]["username"] = "root".into();
    planted["process"]["commandLine"] = "sh".into();
    planted["root"]["fooBar"] = 1.into();
    planted["mounts"][0]["fooBar"] = 1.into();
    planted["linux"]["foo"] = serde_json::json!({"bar": 1});
    planted["vm"] = serde_json::json!({"hypervisor": {"path": "/bin/sh"}});
    planted["annotations"]["Foo"] = "1".into();
    planted["annotations"]["foo"] = "2".into();
    std::fs::write(&spec_path, serde_json::to_vec(&planted).unwrap()).unwrap();
    // RESTRICTED refuses a key it cannot judge, naming it; OPEN ignores it, as OCI asks,
    // and runsc must not see it either.
    let o = e.run(&["create", "--bundle", b, &id]);
    assert!(
        !o.status.success() && stderr(&o).contains("linux.foo: not a field moat knows"),
        "{}",
        stderr(&o)
    );
    let open = e.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    e.config = Some(open);
    e.ok(&["create", "--bundle", b, &id]);
    let eff: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&id).join("config.json")).unwrap())
            .unwrap();
    for (pointer, key) in [
        ("/process", "fooBar"),
        ("/process/user", "username"),
        ("/process", "commandLine"),
        ("/root", "fooBar"),
        ("/mounts/0", "fooBar"),
        ("/linux", "foo"),
        ("", "vm"),
    ] {
        let parent = eff.pointer(pointer).unwrap_or_else(|| panic!("{pointer}"));
        assert!(
            parent.get(key).is_none(),
            "{pointer}/{key} reached runsc: {eff}"
        );
    }
    assert_eq!(eff["annotations"]["Foo"], "1");
    assert_eq!(eff["annotations"]["foo"], "2");
    assert_eq!(eff["process"]["args"], spec["process"]["args"]);
    e.ok(&["delete", "--force", &id]);

    // The pass-through field: runsc sets the sandbox's net_cls class from it. This host
    // may lack net_cls, in which case runsc's refusal shows it read the field.
    let mut net = spec.clone();
    net["linux"]["cgroupsPath"] = format!("/{}-net", e.tag).into();
    net["linux"]["resources"]["network"] = serde_json::json!({"classID": 1048577, "fooBar": 1});
    std::fs::write(&spec_path, serde_json::to_vec(&net).unwrap()).unwrap();
    let _cg = CgroupGuard(format!("/{}-net", e.tag));
    let o = e.run(&["create", "--bundle", b, &id]);
    // A mounted net_cls hierarchy, not merely a directory of that name: runsc makes its
    // cgroup directories with mkdir -p, so a controller this host does not mount can
    // leave plain directories in the /sys/fs/cgroup tmpfs.
    let net_cls = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/sys/fs/cgroup/net_cls"));
    if net_cls {
        assert!(o.status.success(), "{}", stderr(&o));
        let eff: Value =
            serde_json::from_slice(&std::fs::read(e.root().join(&id).join("config.json")).unwrap())
                .unwrap();
        assert_eq!(
            eff["linux"]["resources"]["network"],
            serde_json::json!({"classID": 1048577})
        );
        let class = std::fs::read_to_string(format!(
            "/sys/fs/cgroup/net_cls/{}-net/net_cls.classid",
            e.tag
        ))
        .unwrap();
        assert_eq!(class.trim(), "1048577");
    } else {
        // runsc refuses the class one of two ways: no net_cls directory at all, or a
        // plain directory of that name (left in the tmpfs by another runsc's mkdir -p,
        // e.g. a test running beside this one) without the controller's files. Either
        // way it read the field.
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(
            err.contains("Network.ClassID set but net_cls cgroup controller not found")
                || err.contains("net_cls.classid: no such file or directory"),
            "runsc did not get linux.resources.network: {err}"
        );
        assert!(!e.root().join(&id).exists(), "state directory left behind");
    }
}

// ---------------------------------------------------------------------------------------
// gVisor pods: a pod sandbox container makes the runsc sandbox, app containers join it.

const CRI_TYPE: &str = "io.kubernetes.cri.container-type";
const CRI_SANDBOX: &str = "io.kubernetes.cri.sandbox-id";

/// A subreaper standing in for the shim: runs `moat create …` (argv after the status
/// file), writes `create=<rc>` to the status file, then waits for the pid in the pid
/// file (the app container's waiter, reparented to it) and writes `waiter=<status>`.
const REAPER: &str = r#"
import ctypes, os, subprocess, sys
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
status, pidfile, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
rc = subprocess.call(argv)
with open(status, "a") as f:
    f.write(f"create={rc}\n")
if rc == 0:
    want = int(open(pidfile).read())
    while True:
        pid, ws = os.wait()
        if pid == want:
            with open(status, "a") as f:
                code = os.waitstatus_to_exitcode(ws)  # -N for signal N: the shim's 128+N
                f.write(f"waiter={code if code >= 0 else 128 - code}\n")
            break
"#;

impl Env {
    /// A pod sandbox bundle (CRI annotations as containerd writes them).
    fn pod_sandbox(&self, name: &str, id: &str) -> PathBuf {
        self.bundle(
            name,
            &[
                ("moat.runtime", "gvisor"),
                (CRI_TYPE, "sandbox"),
                (CRI_SANDBOX, id),
            ],
            &["sleep", "600"],
        )
    }

    /// An app container bundle joining `sandbox`.
    fn pod_app(&self, name: &str, sandbox: &str, args: &[&str]) -> PathBuf {
        self.bundle(
            name,
            &[
                ("moat.runtime", "gvisor"),
                (CRI_TYPE, "container"),
                (CRI_SANDBOX, sandbox),
            ],
            args,
        )
    }

    /// `moat create` of an app container under the subreaper [`REAPER`]; returns the
    /// reaper (a child of the test), its status file and the create's stdout file.
    fn create_under_reaper(
        &self,
        id: &str,
        bundle: &Path,
    ) -> (std::process::Child, PathBuf, PathBuf) {
        let script = self.dir.join("reaper.py");
        std::fs::write(&script, REAPER).unwrap();
        let status = self.dir.join(format!("{id}.status"));
        let out = self.dir.join(format!("{id}.out"));
        let pid_file = self.dir.join(format!("{id}.pid"));
        let mut c = Command::new("python3");
        c.arg(&script).arg(&status).arg(&pid_file).arg(MOAT);
        c.arg("--root")
            .arg(self.root())
            .args(["create", "--bundle"]);
        c.arg(bundle).arg("--pid-file").arg(&pid_file).arg(id);
        c.env("PATH", test_path());
        c.env_remove("MOAT_RUNTIME").env_remove("MOAT_CONFIG");
        c.stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(self.dir.join(format!("{id}.err"))).unwrap());
        let child = support::spawn(&mut c);
        (child, status, out)
    }
}

/// The line `key=value` of a reaper status file, once written.
fn reaper_value(status: &Path, key: &str, timeout: Duration) -> Option<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(status).unwrap_or_default();
        if let Some(v) = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
        {
            return v.parse().ok();
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn python_installed() -> bool {
    Command::new("python3")
        .arg("-c")
        .arg("import ctypes")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .run_status()
        .is_ok_and(|s| s.success())
}

/// runsc sandbox processes whose last argument is `id`.
fn sandboxes_of(id: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv: Vec<&[u8]> = cmd.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
            argv.first() == Some(&&b"runsc-sandbox"[..]) && argv.last() == Some(&id.as_bytes())
        })
        .collect()
}

fn status_field(pid: i32, field: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
}

fn gvisor_pod_lifecycle() {
    if !usable("gvisor_pod_lifecycle") {
        return;
    }
    if !python_installed() {
        missing("python3 (the subreaper standing in for the shim)");
        return;
    }
    let mut e = Env::new("pod");
    // As long as the CRI's (64 hex): runsc 20240729's control socket file under this root,
    // `…/@runsc/runsc-<id>.sock`, is then longer than a sockaddr_un holds (108 bytes).
    let sb = e.id(&format!("sb{}", "0".repeat(58)));
    assert!(
        e.root()
            .join("@runsc")
            .join(format!("runsc-{sb}.sock"))
            .as_os_str()
            .len()
            > 108
    );
    let sbb = e.pod_sandbox("sbb", &sb);
    let sb_pid_file = e.dir.join("sb.pid");
    e.ok(&[
        "create",
        "--bundle",
        sbb.to_str().unwrap(),
        "--pid-file",
        sb_pid_file.to_str().unwrap(),
        &sb,
    ]);
    e.ok(&["start", &sb]);
    let sandbox = sandboxes_of(&sb);
    assert_eq!(sandbox.len(), 1, "one runsc sandbox for the pod");
    let rec: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&sb).join("state.json")).unwrap())
            .unwrap();
    assert_eq!(
        rec["backend"]["pod"],
        serde_json::json!({"role": "sandbox"})
    );
    assert_eq!(
        rec["backend"]["oci_seccomp"], true,
        "--oci-seccomp for the pod"
    );

    // An app container that exits 7: its waiter, not the sandbox, is in the pid file, and
    // the waiter's exit is the container's.
    let a = e.id("a");
    let ab = e.pod_app("ab", &sb, &["sh", "-c", "echo hi-from-a; sleep 1; exit 7"]);
    let (reaper, status, out) = e.create_under_reaper(&a, &ab);
    assert_eq!(
        reaper_value(&status, "create", Duration::from_secs(30)),
        Some(0)
    );
    let waiter: i32 = std::fs::read_to_string(e.dir.join(format!("{a}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !sandbox.contains(&waiter),
        "pid file holds the sandbox's pid"
    );
    let st = e.state(&a);
    assert_eq!(
        (st["status"].as_str(), st["pid"].as_i64()),
        (Some("created"), Some(i64::from(waiter)))
    );
    let rss = status_field(waiter, "VmRSS").unwrap();
    eprintln!("FIGURE waiter VmRSS: {rss}");
    // Before start the waiter holds create's stdio and the start FIFO, nothing else (no
    // state-directory lock: start and delete would block on it).
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{waiter}/fd"))
        .unwrap()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(fds.len(), 4, "waiter's fds: {fds:?}");
    // In the container's own host cgroup (the shim reads the task's metrics there).
    let eff: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&a).join("config.json")).unwrap())
            .unwrap();
    let cg_path = eff["linux"]["cgroupsPath"].as_str().unwrap().to_string();
    let cgroups = std::fs::read_to_string(format!("/proc/{waiter}/cgroup")).unwrap();
    assert!(
        cgroups.lines().any(|l| l.ends_with(&format!(":{cg_path}"))),
        "waiter not in {cg_path}: {cgroups}"
    );
    e.ok(&["start", &a]);
    assert_eq!(
        reaper_value(&status, "waiter", Duration::from_secs(30)),
        Some(7)
    );
    support::wait_child(reaper, Duration::from_secs(10));
    // The container wrote to create's stdout (runc's init inherits it).
    assert_eq!(std::fs::read_to_string(&out).unwrap().trim(), "hi-from-a");
    assert_eq!(e.state(&a)["status"], "stopped");
    e.ok(&["delete", &a]);
    assert!(!e.root().join(&a).exists());
    assert!(
        !std::path::Path::new(&format!("/sys/fs/cgroup/pids{cg_path}")).exists(),
        "the app container's cgroup {cg_path} left"
    );
    assert!(!e
        .root()
        .join("@runsc")
        .join(format!("{a}_sandbox:{sb}.state"))
        .exists());
    assert_eq!(
        sandboxes_of(&sb),
        sandbox,
        "deleting an app container leaves the sandbox"
    );
    assert_eq!(e.state(&sb)["status"], "running");

    // A long-running one: exec into it, kill it while running (TERM kills PID 1 under
    // gVisor: 143).
    let b = e.id("b");
    let bb = e.pod_app("bb", &sb, &["sleep", "600"]);
    let (reaper, status, _) = e.create_under_reaper(&b, &bb);
    assert_eq!(
        reaper_value(&status, "create", Duration::from_secs(30)),
        Some(0)
    );
    e.ok(&["start", &b]);
    assert_eq!(e.state(&b)["status"], "running");
    // verify checks the pod's sandbox cgroup (the pod sandbox container's) and lists the
    // app container's own resources as not applied.
    let v = e.ok(&["verify", &b]);
    assert!(v.contains(&format!("/moat/{sb}")) || v.contains(&sb), "{v}");
    assert!(
        v.contains("linux.resources") && v.contains("checks, 0 failed"),
        "{v}"
    );
    let o = e.run(&[
        "exec",
        &b,
        "sh",
        "-c",
        "echo exec-out; ps -o pid,args; exit 5",
    ]);
    assert_eq!(o.status.code(), Some(5));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.starts_with("exec-out"), "{text}");
    // Its own pid namespace inside the pod: the pod sandbox's sleep is not in it.
    assert_eq!(text.matches("sleep").count(), 1, "{text}");
    e.ok(&["kill", &b, "TERM"]);
    assert_eq!(
        reaper_value(&status, "waiter", Duration::from_secs(30)),
        Some(143)
    );
    support::wait_child(reaper, Duration::from_secs(10));
    e.ok(&["delete", &b]);

    // Killed while created: the waiter ends of the signal (the engine sees 143, as for a
    // started gVisor container whose PID 1 has no TERM handler), the sandbox stays.
    let c = e.id("c");
    let cb = e.pod_app("cb", &sb, &["sleep", "600"]);
    let (reaper, status, _) = e.create_under_reaper(&c, &cb);
    assert_eq!(
        reaper_value(&status, "create", Duration::from_secs(30)),
        Some(0)
    );
    e.ok(&["kill", &c, "TERM"]);
    assert_eq!(
        reaper_value(&status, "waiter", Duration::from_secs(30)),
        Some(143)
    );
    support::wait_child(reaper, Duration::from_secs(10));
    assert_eq!(e.state(&c)["status"], "stopped");
    let o = e.run(&["exec", &c, "true"]);
    assert_eq!(
        o.status.code(),
        Some(255),
        "runc's status for an exec that never ran"
    );
    assert!(
        stderr(&o).contains("container not running"),
        "{}",
        stderr(&o)
    );
    let o = e.run(&["start", &c]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot start a container that has stopped"),
        "{}",
        stderr(&o)
    );
    e.ok(&["delete", &c]);
    assert_eq!(sandboxes_of(&sb), sandbox);

    // Deleting the sandbox ends the app containers that are still in it.
    let d = e.id("d");
    let db = e.pod_app("db", &sb, &["sleep", "600"]);
    let (reaper, status, _) = e.create_under_reaper(&d, &db);
    assert_eq!(
        reaper_value(&status, "create", Duration::from_secs(30)),
        Some(0)
    );
    e.ok(&["start", &d]);
    e.ok(&["delete", "--force", &sb]);
    assert_eq!(
        reaper_value(&status, "waiter", Duration::from_secs(30)),
        Some(137)
    );
    support::wait_child(reaper, Duration::from_secs(10));
    assert!(sandboxes_of(&sb).is_empty(), "sandbox still running");
    assert_eq!(e.state(&d)["status"], "stopped");
    e.ok(&["delete", &d]);
    let left: Vec<_> = std::fs::read_dir(e.root())
        .unwrap()
        .flatten()
        .map(|f| f.file_name())
        // `@cache`: what the runsc binary supports (src/gvisor/probe.rs), not a record.
        .filter(|n| n != "@cache")
        .collect();
    assert_eq!(left, ["@runsc"], "records left");
    assert_eq!(
        std::fs::read_dir(e.root().join("@runsc")).unwrap().count(),
        0,
        "runsc state left"
    );
}

fn gvisor_pod_join_needs_moats_own_pod_sandbox() {
    if !usable("gvisor_pod_join_needs_moats_own_pod_sandbox") {
        return;
    }
    let mut e = Env::new("podjoin");
    // Under another root: a real pod sandbox.
    let other = e.id("other");
    let other_root = e.dir.join("other-root");
    let ob = e.pod_sandbox("ob", &other);
    let dir = e.dir.clone();
    let in_other = |args: &[&str]| {
        let mut c = Command::new(MOAT);
        c.arg("--root")
            .arg(&other_root)
            .args(args)
            .stdin(Stdio::null());
        c.env("PATH", test_path());
        c.env_remove("MOAT_RUNTIME").env_remove("MOAT_CONFIG");
        output(&mut c, &dir)
    };
    // Deleted before `e` removes the directory, also when an assertion fails.
    struct OtherRoot(PathBuf, String);
    impl Drop for OtherRoot {
        fn drop(&mut self) {
            let _ = Command::new(MOAT)
                .arg("--root")
                .arg(&self.0)
                .args(["delete", "--force", &self.1])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .run_status();
        }
    }
    let _other_guard = OtherRoot(other_root.clone(), other.clone());
    let o = in_other(&["create", "--bundle", ob.to_str().unwrap(), &other]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Under this root: a plain gVisor container (a sandbox of its own, not a pod's), a
    // native container, and a pod sandbox with an app container in it.
    let plain = e.id("plain");
    let pb = e.bundle("pb", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    e.ok(&["create", "--bundle", pb.to_str().unwrap(), &plain]);
    let native = e.id("native");
    let nb = e.bundle("nb", &[], &["sleep", "600"]);
    e.ok(&["create", "--bundle", nb.to_str().unwrap(), &native]);
    let sb = e.id("sb");
    let sbb = e.pod_sandbox("sbb", &sb);
    e.ok(&["create", "--bundle", sbb.to_str().unwrap(), &sb]);
    let app = e.id("app");
    let ab = e.pod_app("ab", &sb, &["sleep", "600"]);
    e.ok(&["create", "--bundle", ab.to_str().unwrap(), &app]);
    let before: Vec<i32> = [&plain, &sb].iter().flat_map(|i| sandboxes_of(i)).collect();

    let cases = [
        (other.as_str(), "no container of that id under"),
        (plain.as_str(), "not a pod sandbox"),
        (app.as_str(), "not a pod sandbox"),
        (native.as_str(), "not a gVisor container"),
        ("../other", "refused"),
    ];
    for (i, (claim, why)) in cases.iter().enumerate() {
        let id = e.id(&format!("claim{i}"));
        let bundle = e.pod_app(&format!("claim{i}"), claim, &["sleep", "600"]);
        let o = e.run(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "joined {claim}: {err}");
        assert!(
            err.contains(&format!("annotation {CRI_SANDBOX}="))
                && err.contains(why)
                && err.contains("; refused"),
            "{claim}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            !e.root().join(&id).exists(),
            "state directory left for {claim}"
        );
        let runsc_files: Vec<_> = std::fs::read_dir(e.root().join("@runsc"))
            .unwrap()
            .flatten()
            .filter(|f| f.file_name().to_string_lossy().starts_with(&id))
            .collect();
        assert!(
            runsc_files.is_empty(),
            "runsc state for {claim}: {runsc_files:?}"
        );
    }
    let after: Vec<i32> = [&plain, &sb].iter().flat_map(|i| sandboxes_of(i)).collect();
    assert_eq!(before, after, "the sandboxes changed");
    // The engine put the container in another pod (its ipc and uts paths name pod sb2's
    // sandbox process) while the annotation names sb: refused.
    let sb2 = e.id("othersb");
    let sb2b = e.pod_sandbox("sb2b", &sb2);
    e.ok(&["create", "--bundle", sb2b.to_str().unwrap(), &sb2]);
    let sb2_pid = sandboxes_of(&sb2)[0];
    let id = e.id("crossed");
    let bundle = e.pod_app("crossed", &sb, &["true"]);
    let cfg = bundle.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    for n in spec["linux"]["namespaces"].as_array_mut().unwrap() {
        let t = n["type"].as_str().unwrap().to_string();
        if t == "ipc" || t == "uts" {
            n["path"] = Value::String(format!("/proc/{sb2_pid}/ns/{t}"));
        }
    }
    std::fs::write(&cfg, serde_json::to_vec(&spec).unwrap()).unwrap();
    let o = e.run(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "the namespaces of another gVisor sandbox (pid {sb2_pid})"
        )) && err.contains("; refused"),
        "{err}"
    );
    assert!(!e.root().join(&id).exists());
    // With the pod's own sandbox's paths, the same container joins.
    let sb_pid = sandboxes_of(&sb)[0];
    for n in spec["linux"]["namespaces"].as_array_mut().unwrap() {
        let t = n["type"].as_str().unwrap().to_string();
        if t == "ipc" || t == "uts" {
            n["path"] = Value::String(format!("/proc/{sb_pid}/ns/{t}"));
        }
    }
    std::fs::write(&cfg, serde_json::to_vec(&spec).unwrap()).unwrap();
    let id = e.id("wired");
    e.ok(&["create", "--bundle", bundle.to_str().unwrap(), &id]);

    // A type runsc would read as "join" without being "container" is refused too.
    let id = e.id("unknown");
    let bundle = e.bundle(
        "unknown",
        &[
            ("moat.runtime", "gvisor"),
            (CRI_TYPE, "pod"),
            (CRI_SANDBOX, &sb),
        ],
        &["true"],
    );
    let o = e.run(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("want \"sandbox\" or \"container\""),
        "{}",
        stderr(&o)
    );
    assert!(!e.root().join(&id).exists());
    let o = in_other(&["delete", "--force", &other]);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn gvisor_pod_app_seccomp_applies_under_a_sandbox_without_one() {
    if !usable("gvisor_pod_app_seccomp_applies_under_a_sandbox_without_one") {
        return;
    }
    // OPEN: the pod sandbox's spec has no seccomp profile (kubelet's default for a pause
    // container), an app container's has one; runsc ignores profiles without
    // --oci-seccomp, which the pod sandbox's create sets for the whole pod.
    let mut e = Env::new("podsc");
    let open = e.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    let (sb, app) = (e.id("sb"), e.id("app"));
    let root = e.root();
    let moat = |args: &[&str], out: &Path| {
        let mut c = Command::new(MOAT);
        c.arg("--root").arg(&root).args(args).stdin(Stdio::null());
        c.env("PATH", test_path());
        c.env_remove("MOAT_RUNTIME").env("MOAT_CONFIG", &open);
        c.stdout(std::fs::File::create(out).unwrap())
            .stderr(std::fs::File::create(out.with_extension("err")).unwrap());
        let st = c.run_status().unwrap();
        assert!(
            st.success(),
            "moat {args:?}: {}",
            std::fs::read_to_string(out.with_extension("err")).unwrap()
        );
    };
    let sbb = e.pod_sandbox("sbb", &sb);
    let spec: Value =
        serde_json::from_slice(&std::fs::read(sbb.join("config.json")).unwrap()).unwrap();
    assert!(
        spec["linux"]["seccomp"].is_null(),
        "the sandbox bundle has a profile"
    );
    moat(
        &["create", "--bundle", sbb.to_str().unwrap(), &sb],
        &e.dir.join("sb.out"),
    );
    moat(&["start", &sb], &e.dir.join("sb-start.out"));
    let ab = e.pod_app(
        "ab",
        &sb,
        &[
            "sh",
            "-c",
            "mkdir /tmp/x 2>/dev/null && echo made || echo denied",
        ],
    );
    let cfg = ab.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["root"]["readonly"] = Value::Bool(false);
    spec["linux"]["seccomp"] = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]
    });
    std::fs::write(&cfg, serde_json::to_vec(&spec).unwrap()).unwrap();
    let out = e.dir.join("app.out");
    moat(&["create", "--bundle", ab.to_str().unwrap(), &app], &out);
    moat(&["start", &app], &e.dir.join("app-start.out"));
    assert!(
        support::wait_until(Duration::from_secs(20), || !std::fs::read_to_string(&out)
            .unwrap_or_default()
            .is_empty()),
        "no output from the app container"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        "denied",
        "the app container's profile was not applied"
    );
}

/// runsc 20221219 takes every id as a prefix (`web` is ambiguous once `web2` exists): a
/// gVisor id that begins or is begun by another gVisor container's is refused at create,
/// leaving nothing; and a runsc call for an id runsc has no exact state for (a lost
/// container) is never made, so it cannot reach another container by prefix.
fn gvisor_ids_never_reach_another_by_prefix() {
    if !usable("gvisor_ids_never_reach_another_by_prefix") {
        return;
    }
    let mut e = Env::new("pfx");
    let web = e.id("web");
    let web2 = e.id("web2");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let b = bundle.to_str().unwrap();
    e.ok(&["create", "--bundle", b, &web2]);
    let out = e.run(&["create", "--bundle", b, &web]);
    assert!(!out.status.success(), "{web} created beside {web2}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("runsc takes ids as prefixes"), "{err}");
    assert!(
        !e.root().join(&web).exists(),
        "the refused create left its state dir"
    );
    assert_eq!(e.state(&web2)["status"], "created");
    // A record runsc lost (its state files gone): delete --force and kill never reach
    // web2 through runsc's prefix match.
    let lost = e.root().join(&web);
    std::fs::create_dir(&lost).unwrap();
    let mut rec: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&web2).join("state.json")).unwrap())
            .unwrap();
    rec["id"] = Value::String(web.clone());
    rec["pid"] = Value::from(0);
    std::fs::write(lost.join("state.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
    let _ = e.run(&["kill", &web, "KILL"]);
    let out = e.run(&["delete", "--force", &web]);
    assert!(out.status.success(), "delete --force of the lost container");
    assert_eq!(
        e.state(&web2)["status"],
        "created",
        "{web2} must be untouched by the kill and delete of {web}"
    );
}

/// The bundle `name` in `e` without a network namespace: the host's network.
fn host_network_bundle(e: &Env, name: &str, annotations: &[(&str, &str)]) -> PathBuf {
    let b = e.bundle(name, annotations, &["sleep", "600"]);
    let cfg = b.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network");
    std::fs::write(&cfg, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    b
}

/// runsc's control server (exec as root inside the sandbox, signals, checkpoint) is
/// reachable from no namespace the container does not own: a gVisor container sharing the
/// host's network (OPEN), then an unprivileged host user and a host-network container try
/// runsc 20221219's abstract name and the file a newer runsc records.
fn control_socket_unreachable_from_host_users_and_host_network_containers() {
    if !usable("control_socket_unreachable_from_host_users_and_host_network_containers") {
        return;
    }
    let Some(probe) = support::sockets::sockprobe() else {
        return;
    };
    let host_net = support::sockets::netns_of(i32::try_from(std::process::id()).unwrap()).unwrap();
    {
        let runsc = runsc();
        let mut e = Env::new("ctl");
        let cfg = e.dir.join("open.toml");
        std::fs::write(
            &cfg,
            format!(
                "default_policy = \"open\"\n[gvisor]\nrunsc_path = \"{}\"\n",
                runsc.display()
            ),
        )
        .unwrap();
        e.config = Some(cfg);
        let id = e.id("g");
        let gb = host_network_bundle(&e, "gb", &[("moat.runtime", "gvisor")]);
        e.ok(&["create", "--bundle", gb.to_str().unwrap(), &id]);
        e.ok(&["start", &id]);
        let sandbox = i32::try_from(e.state(&id)["pid"].as_i64().unwrap()).unwrap();
        assert_eq!(
            support::sockets::netns_of(sandbox),
            Some(host_net),
            "the sandbox keeps the host's network"
        );
        // A host-network container with the probe.
        let hid = e.id("h");
        let hb = host_network_bundle(&e, "hb", &[]);
        std::fs::copy(probe, hb.join("rootfs/bin/sockprobe")).unwrap();
        e.ok(&["create", "--bundle", hb.to_str().unwrap(), &hid]);
        e.ok(&["start", &hid]);
        let init = i32::try_from(e.state(&hid)["pid"].as_i64().unwrap()).unwrap();
        assert_eq!(support::sockets::netns_of(init), Some(host_net));

        let abstract_name = format!("@runsc-sandbox.{id}@");
        let state = e
            .root()
            .join("@runsc")
            .join(format!("{id}_sandbox:{id}.state"));
        let state: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        let file = state
            .pointer("/sandbox/controlSocketPath")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_string);
        let served = file.clone().unwrap_or_else(|| abstract_name.clone());
        eprintln!("runsc serves its control server on {served}");
        for name in [Some(&abstract_name), file.as_ref()].into_iter().flatten() {
            let args = ["unix", "1", name.as_str()];
            let nobody = support::sockets::probe_as_nobody(probe, &args);
            eprintln!("as uid 65534 on the host: {nobody}");
            assert!(
                !support::sockets::reached(&nobody),
                "an unprivileged host user reached runsc's control server: {nobody}"
            );
            let mut exec = vec!["exec", hid.as_str(), "/bin/sockprobe"];
            exec.extend(args);
            let inside = e.ok(&exec);
            eprintln!("from the host-network container: {}", inside.trim());
            assert!(
                !support::sockets::reached(inside.trim()),
                "a host-network container reached runsc's control server: {inside}"
            );
        }
        let unix = std::fs::read_to_string("/proc/net/unix").unwrap();
        assert!(
            !unix.contains(&abstract_name),
            "{abstract_name} in the host's network namespace"
        );
        // The probe does reach it where moat's runsc calls run: root in the pinned
        // namespace (so the refusals above are not the probe's failure).
        let pin = e.root().join(&id).join("control-netns");
        let own = support::sockets::probe_with(
            &["nsenter", &format!("--net={}", pin.display())],
            probe,
            &["unix", "1", &served],
        );
        assert!(support::sockets::reached(&own), "{own}");
        // moat's own calls still reach it.
        let out = e.ok(&["exec", &id, "echo", "through-the-control-namespace"]);
        assert_eq!(out.trim(), "through-the-control-namespace");
        // --force: runsc 20240729 may still call a sandbox moat saw exit unstopped.
        e.ok(&["delete", "--force", &id]);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(
            !mounts.contains(pin.to_str().unwrap()),
            "the control namespace's pin is left mounted"
        );
    }
}

/// The engine's seccomp profile under gVisor (OPEN: the engine's profile, not moat's), on
/// both runscs: each `SCMP_ACT_ERRNO` answers with its `errnoRet` (EPERM without one) in the
/// container's process and in processes started with `exec`, argv form and `--process`
/// file alike, and every one of them is filtered (`Seccomp: 2`). runsc alone gives EPERM
/// for every errno and starts exec'd processes unfiltered: moat's trampoline installs the
/// filter inside the sandbox (src/gvisor/seccomp_exec.rs). The process's argv is its own
/// once the trampoline has exec'd it.
/// runc installs the container's filter itself, as its last step, so a profile need not
/// allow `seccomp` or `prctl` (no_new_privs) for the container to run. Under gVisor moat's
/// trampoline makes those calls inside the sandbox; runsc is not given the profile as well
/// (its conversion would filter the trampoline's own calls and end the process with status
/// 126 before its command). The container runs (NNP asked for), its command under the
/// filter (`Seccomp: 2`), and the spec runsc read holds no profile.
fn a_profile_denying_seccomp_and_prctl_runs_as_under_runc() {
    if !usable("a_profile_denying_seccomp_and_prctl_runs_as_under_runc") {
        return;
    }
    let mut e = Env::new("scdeny");
    let cfg = e.dir.join("open.toml");
    std::fs::write(&cfg, "default_policy = \"open\"\n").unwrap();
    e.config = Some(cfg);
    let b = e.bundle(
        "run",
        &[("moat.runtime", "gvisor")],
        &[
            "sh",
            "-c",
            "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; echo ran",
        ],
    );
    let cfg = b.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["process"]["noNewPrivileges"] = Value::from(true);
    spec["linux"]["seccomp"] = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["seccomp", "prctl"], "action": "SCMP_ACT_ERRNO"}]
    });
    std::fs::write(&cfg, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let id = e.id("run");
    e.ok(&["create", "--bundle", b.to_str().unwrap(), &id]);
    let runsc_config: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&id).join("config.json")).unwrap())
            .unwrap();
    assert!(
        runsc_config.pointer("/linux/seccomp").is_none(),
        "runsc is given the profile too: {}",
        runsc_config["linux"]
    );
    e.ok(&["delete", "--force", &id]);
    let o = e.run(&["run", "--bundle", b.to_str().unwrap(), &id]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    // (gVisor's /proc/PID/status has no NoNewPrivs line.)
    for want in ["Seccomp:\t2", "ran"] {
        assert!(out.contains(want), "no {want:?} in {out}");
    }
}

fn seccomp_errnos_and_exec_under_the_containers_filter() {
    if !usable("seccomp_errnos_and_exec_under_the_containers_filter") {
        return;
    }
    let release = runsc_release();
    let mut e = Env::new("scmp");
    let cfg = e.dir.join("open.toml");
    std::fs::write(&cfg, "default_policy = \"open\"\n").unwrap();
    e.config = Some(cfg);
    let script = "mkdir /tmp/a 2>&1; rmdir /tmp/x 2>&1; ln -s a /tmp/l 2>&1; \
                  grep Seccomp: /proc/self/status; tr '\\0' ' ' < /proc/$$/cmdline; echo";
    let profile = serde_json::json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [
            {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
            {"names": ["rmdir"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
            {"names": ["symlink", "symlinkat"], "action": "SCMP_ACT_ERRNO"}
        ]
    });
    let with_profile = |b: &Path| {
        let cfg = b.join("config.json");
        let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
        spec["linux"]["seccomp"] = profile.clone();
        std::fs::write(&cfg, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    };
    let check = |what: &str, out: &str| {
        for want in [
            "/tmp/a': Function not implemented",
            "/tmp/x': Permission denied",
            "Operation not permitted",
            "Seccomp:\t2",
            "sh -c mkdir",
        ] {
            assert!(
                out.contains(want),
                "runsc {release}, {what}: no {want:?} in {out}"
            );
        }
        assert!(
            !out.contains("moat-gvisor-seccomp-exec"),
            "runsc {release}, {what}: the trampoline's argv is visible: {out}"
        );
    };

    // The container's process: a foreground run, its output the script's.
    let b = e.bundle("run", &[("moat.runtime", "gvisor")], &["sh", "-c", script]);
    with_profile(&b);
    let id = e.id("run");
    let o = e.run(&["run", "--bundle", b.to_str().unwrap(), &id]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    check("the container's process", &out);

    // Processes started with exec: argv form, and a process file (engines' form).
    let b = e.bundle("long", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    with_profile(&b);
    let id = e.id("long");
    e.ok(&["create", "--bundle", b.to_str().unwrap(), &id]);
    e.ok(&["start", &id]);
    let out = e.ok(&["exec", &id, "sh", "-c", script]);
    check("exec", &out);
    let spec: Value =
        serde_json::from_slice(&std::fs::read(b.join("config.json")).unwrap()).unwrap();
    let mut p = spec["process"].clone();
    p["args"] = serde_json::json!(["sh", "-c", script]);
    let proc_file = e.dir.join("process.json");
    std::fs::write(&proc_file, serde_json::to_vec(&p).unwrap()).unwrap();
    let out = e.ok(&["exec", "--process", proc_file.to_str().unwrap(), &id]);
    check("exec --process", &out);
    e.ok(&["delete", "--force", &id]);

    // The trampoline is a copy of moat-seccomp-exec (installed next to moat), not of moat:
    // one copy, read-only, its size the installed file's.
    let installed = Path::new(MOAT).with_file_name("moat-seccomp-exec");
    let size = std::fs::metadata(&installed).unwrap().len();
    assert!(size < std::fs::metadata(MOAT).unwrap().len());
    let copies: Vec<_> = std::fs::read_dir(e.root().join("@cache/gvisor"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let name = copies[0].file_name().to_string_lossy().into_owned();
    assert!(name.starts_with("moat-seccomp-exec-"), "{name}");
    let m = copies[0].metadata().unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!((m.len(), m.permissions().mode() & 0o7777), (size, 0o555));
}

/// The sentry's system call table as this test's runsc lists it (number → gVisor's name).
fn sentry_syscalls() -> std::collections::BTreeMap<u32, String> {
    let out = Command::new(runsc())
        .args(["help", "syscalls", "-format", "csv"])
        .run_output()
        .expect("runsc help syscalls");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(5, ',').collect();
            (f.len() == 5 && f[0] == "linux" && f[1] == "amd64")
                .then(|| Some((f[2].parse().ok()?, f[3].to_string())))?
        })
        .collect()
}

/// moat's RESTRICTED profile reaches the container's process through runsc's own
/// conversion (no trampoline: the profile in runsc's spec, the process's argv its own),
/// rewritten by moat (src/gvisor/seccomp_runsc.rs); a profile runsc cannot express (here
/// the same one with a KILL_PROCESS rule for `vfork`, which the sweep never calls) runs
/// through the trampoline. A static program calls every system call number with every
/// argument -1, in both, with no_new_privs asked: each gets the same answer, but those
/// the sentry lacks (not in `runsc help syscalls`, so runsc cannot name them), which get
/// ENOSYS under runsc's conversion. `ioctl(TIOCSTI)` with high bits set in its 32-bit
/// command is refused in both (runsc compares 64 bits: moat's rewrite masks the low 32),
/// and no_new_privs reads the same. Exec'd processes keep the container's filter.
fn runscs_conversion_answers_every_syscall_as_moats_filter() {
    if !usable("runscs_conversion_answers_every_syscall_as_moats_filter") {
        return;
    }
    let Some(sweep) = support::static_fixture("syscallsweep.c", "syscallsweep") else {
        return;
    };
    let release = runsc_release();
    let mut e = Env::new("sweep");
    let cfg = e.dir.join("open.toml");
    std::fs::write(&cfg, "default_policy = \"open\"\n").unwrap();
    e.config = Some(cfg);
    let restricted: Value =
        serde_json::from_str(include_str!("../seccomp-profiles/restricted.json")).unwrap();
    let mut forced = restricted.clone();
    forced["syscalls"]
        .as_array_mut()
        .unwrap()
        .push(json!({"names": ["vfork"], "action": "SCMP_ACT_KILL_PROCESS"}));
    let parse = |what: &str, out: &str| -> std::collections::BTreeMap<String, i32> {
        let map: std::collections::BTreeMap<String, i32> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
            .collect();
        assert!(map.len() > 450, "runsc {release}, {what}: {out}");
        map
    };
    let mut answers = Vec::new();
    for (name, profile, direct) in [("direct", &restricted, true), ("tramp", &forced, false)] {
        let b = e.bundle(name, &[("moat.runtime", "gvisor")], &["/sweep"]);
        std::fs::copy(&sweep, b.join("rootfs/sweep")).unwrap();
        let cfgf = b.join("config.json");
        let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfgf).unwrap()).unwrap();
        spec["process"]["noNewPrivileges"] = Value::from(true);
        spec["linux"]["seccomp"] = profile.clone();
        std::fs::write(&cfgf, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
        let id = e.id(name);
        e.ok(&["create", "--bundle", b.to_str().unwrap(), &id]);
        let dir = e.root().join(&id);
        let rc: Value =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        assert_eq!(
            (
                rc["process"]["args"][0] == "/sweep",
                rc.pointer("/linux/seccomp").is_some(),
                dir.join("seccomp-exec.json").is_file()
            ),
            (direct, direct, direct),
            "runsc {release}, {name}: process {} seccomp {}",
            rc["process"]["args"],
            rc["linux"]["seccomp"]
        );
        e.ok(&["delete", "--force", &id]);
        let o = e.run(&["run", "--bundle", b.to_str().unwrap(), &id]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "runsc {release}, {name}: {}",
            stderr(&o)
        );
        answers.push(parse(name, &String::from_utf8_lossy(&o.stdout)));
        if direct {
            // A process started with exec runs under moat's filter of the same profile.
            spec["process"]["args"] = json!(["sleep", "600"]);
            std::fs::write(&cfgf, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
            let id = e.id("long");
            e.ok(&["create", "--bundle", b.to_str().unwrap(), &id]);
            e.ok(&["start", &id]);
            let out = e.ok(&["exec", &id, "/sweep"]);
            answers.push(parse("exec", &out));
            e.ok(&["delete", "--force", &id]);
        }
    }
    let differ = |a: &std::collections::BTreeMap<String, i32>,
                  b: &std::collections::BTreeMap<String, i32>| {
        a.iter()
            .filter(|(k, v)| b.get(*k) != Some(*v))
            .map(|(k, v)| format!("{k}: {v} against {:?}", b.get(k)))
            .collect::<Vec<_>>()
    };
    let d = differ(&answers[1], &answers[2]);
    assert!(
        d.is_empty(),
        "runsc {release}: an exec'd process's answers, against moat's filter's: {d:?}"
    );
    answers.remove(1);
    let (direct, tramp) = (&answers[0], &answers[1]);
    let table = sentry_syscalls();
    let mut lacking = Vec::new();
    for (k, t) in tramp {
        let d = direct[k];
        if d == *t {
            continue;
        }
        let nr: Option<u32> = k.parse().ok();
        assert!(
            nr.is_some_and(|n| !table.contains_key(&n)) && d == libc::ENOSYS,
            "runsc {release}: {k}: {d} under runsc's conversion, {t} under moat's filter"
        );
        lacking.push(format!("{k}: {t}"));
    }
    eprintln!("runsc {release}: ENOSYS under runsc's conversion, not in its table: {lacking:?}");
    // Not vacuous: refusals of each kind and calls that ran, in both.
    for (k, want) in [
        ("165", libc::EPERM),   // mount: the floor's EPERM
        ("101", libc::EPERM),   // ptrace
        ("0", libc::EBADF),     // read(-1): allowed, failed in the sentry
        ("1000", libc::ENOSYS), // no such call: the default
        ("tiocsti", libc::ENOSYS),
        ("nnp", 1),
    ] {
        assert_eq!((direct[k], tramp[k]), (want, want), "runsc {release}: {k}");
    }
}

/// moat without `moat-seccomp-exec` next to it: a gVisor create with a profile fails
/// naming it, before anything exists (no state, no runsc container, no copy).
fn seccomp_trampoline_missing_is_a_clear_error_and_leaves_nothing() {
    if !usable("seccomp_trampoline_missing") {
        return;
    }
    let mut e = Env::new("notramp");
    let bin = e.dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    let moat = bin.join("moat");
    std::fs::copy(MOAT, &moat).unwrap();
    let open = e.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    e.config = Some(open);
    let b = e.bundle("b", &[("moat.runtime", "gvisor")], &["true"]);
    let cfg = b.join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
    spec["linux"]["seccomp"] = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW"});
    std::fs::write(&cfg, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let id = e.id("c");
    let mut c = e.moat();
    c.args(["create", "--bundle", b.to_str().unwrap(), &id]);
    let mut c2 = Command::new(&moat);
    c2.args(c.get_args()).stdin(Stdio::null());
    c2.env_remove("MOAT_RUNTIME").env("PATH", test_path());
    c2.env("MOAT_CONFIG", e.config.as_ref().unwrap());
    let o = output(&mut c2, &e.dir);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let want = format!(
        "the seccomp trampoline {} is missing",
        bin.join("moat-seccomp-exec").display()
    );
    assert!(stderr(&o).contains(&want), "{}", stderr(&o));
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));
    assert!(!e.root().join(&id).exists(), "no state dir left behind");
    assert!(
        !e.root().join("@runsc").exists()
            || std::fs::read_dir(e.root().join("@runsc"))
                .unwrap()
                .next()
                .is_none(),
        "no runsc container"
    );
    assert!(!e.root().join("@cache/gvisor").exists(), "no copy made");
}

/// `[gvisor] platform` is checked against what the runsc found lists (`runsc help
/// platforms`), and without it the container gets runsc's own default (`runsc flags`):
/// ptrace for 20221219, systrap for 20240729. The answer is cached under the root.
fn platform_is_one_this_runsc_lists_and_defaults_to_its_own() {
    if !usable("platform_is_one_this_runsc_lists_and_defaults_to_its_own") {
        return;
    }
    let release = runsc_release();
    let default = if release >= 20230621 {
        "systrap"
    } else {
        "ptrace"
    };
    let mut e = Env::new("plat");
    let bundle = e.bundle("b", &[("moat.runtime", "gvisor")], &["sleep", "600"]);
    let open = e.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    e.config = Some(open);
    let id = e.id("d");
    e.ok(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    let rec: Value =
        serde_json::from_slice(&std::fs::read(e.root().join(&id).join("state.json")).unwrap())
            .unwrap();
    assert_eq!(
        rec["backend"]["platform"], default,
        "runsc {release}'s default"
    );
    e.ok(&["start", &id]);
    assert_eq!(e.ok(&["exec", &id, "echo", "up"]).trim(), "up");
    e.ok(&["delete", "--force", &id]);
    let cached: Vec<_> = std::fs::read_dir(e.root().join("@cache/runsc"))
        .unwrap()
        .flatten()
        .map(|f| std::fs::read_to_string(f.path()).unwrap())
        .collect();
    assert_eq!(cached.len(), 1, "one probe for one binary: {cached:?}");
    assert!(
        cached[0].contains(&format!("\"default_platform\":\"{default}\"")),
        "{cached:?}"
    );

    // A name this runsc does not list: one line naming it, nothing left.
    let bad = if release >= 20230621 {
        "nosuch"
    } else {
        "systrap"
    };
    let cfg = e.dir.join("bad.toml");
    std::fs::write(
        &cfg,
        format!("default_policy = \"open\"\n[gvisor]\nplatform = \"{bad}\"\n"),
    )
    .unwrap();
    e.config = Some(cfg);
    let id = e.id("bad");
    let o = e.run(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains(&format!("gvisor.platform \"{bad}\"")) && err.contains("not a platform of"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!e.root().join(&id).exists(), "no state dir left behind");
    assert!(runsc_files(&e.root(), &id).is_empty(), "no runsc state");

    // Each platform it lists runs a container.
    let listed = Command::new(runsc())
        .args(["help", "platforms"])
        .run_output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned()
        + &String::from_utf8_lossy(&listed.stderr);
    for p in listed.split_whitespace().filter(|p| *p != "kvm") {
        let cfg = e.dir.join(format!("{p}.toml"));
        std::fs::write(
            &cfg,
            format!("default_policy = \"open\"\n[gvisor]\nplatform = \"{p}\"\n"),
        )
        .unwrap();
        e.config = Some(cfg);
        let id = e.id(p);
        e.ok(&["create", "--bundle", bundle.to_str().unwrap(), &id]);
        e.ok(&["start", &id]);
        assert_eq!(e.ok(&["exec", &id, "echo", p]).trim(), p, "platform {p}");
        e.ok(&["delete", "--force", &id]);
    }
}

/// A caller that reaps only once `create` has returned, as conmon and the shim do: a
/// subreaper that runs `moat create …` (argv after the status file), writes
/// `create=<rc> ms=<elapsed>` to the status file (renamed into place; moat's pid in
/// `<status>.pid`), then reaps nothing until its stdin closes, and then everything.
const LATE_REAPER: &str = r#"
import ctypes, os, subprocess, sys, time
assert ctypes.CDLL(None).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
status, argv = sys.argv[1], sys.argv[2:]
t = time.monotonic()
p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
with open(status + ".pid", "w") as f:
    f.write(str(p.pid))
rc = p.wait()  # waits for moat's pid alone
with open(status + ".tmp", "w") as f:
    f.write(f"create={rc}\nms={int((time.monotonic() - t) * 1000)}\n")
os.rename(status + ".tmp", status)
sys.stdin.read()
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"#;

/// A create that fails after `runsc create` started the sandbox, under a caller that reaps
/// only after create returns: a prestart hook SIGKILLs `runsc create` (runsc runs the hooks
/// after it saved its state, with the sandbox and the gofer up), which leaves them to the
/// caller. `runsc delete --force` would SIGKILL the sandbox and then poll `kill(pid, 0)`,
/// which a zombie passes, until it gave up: 5 s with 20221219, 2 min with 20240729, while
/// conmon waits for create. Here create fails within 4 s with one line saying why, and
/// leaves nothing: no state directory, no runsc state, lock or socket, no cgroup, no mount,
/// no filestore in the rootfs, no live runsc process (the zombies are the caller's to reap,
/// and once it has, no process either).
fn a_failed_create_ends_promptly_under_a_caller_that_reaps_after_it() {
    if !usable("a_failed_create_ends_promptly") {
        return;
    }
    if !python_installed() {
        missing("python3 (the caller that reaps late, standing in for conmon)");
        return;
    }
    let mut ctx = support::Ctx::new("gvlate");
    let id = ctx.id("c");
    let _guard = ctx.guard(&id);
    ctx.config["annotations"]["moat.runtime"] = Value::from("gvisor");
    ctx.config["process"]["args"] = serde_json::json!(["sleep", "600"]);
    ctx.config["hooks"] = serde_json::json!({
        "prestart": [{"path": "/bin/sh", "args": ["sh", "-c", "kill -KILL $PPID"]}]
    });
    ctx.write_config();
    let open = ctx.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    let script = ctx.dir.join("late-reaper.py");
    std::fs::write(&script, LATE_REAPER).unwrap();
    let status = ctx.dir.join("late.status");
    let err_file = ctx.dir.join("late.err");
    let mut c = Command::new("python3");
    c.arg(&script).arg(&status).arg(MOAT);
    c.arg("--root").arg(&ctx.root).args(["create", "--bundle"]);
    c.arg(&ctx.bundle).arg(&id);
    c.env("PATH", test_path())
        .env("MOAT_CONFIG", &open)
        .env_remove("MOAT_RUNTIME");
    c.stdin(Stdio::piped())
        .stdout(std::fs::File::create(ctx.dir.join("late.out")).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap());
    let mut reaper = support::spawn(&mut c);
    let rc = reaper_value(&status, "create", Duration::from_secs(30));
    let Some(rc) = rc else {
        // moat, started by this test: once it is gone the caller reaps, and whatever moat
        // was waiting for ends.
        let moat: i32 = std::fs::read_to_string(ctx.dir.join("late.status.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .expect("moat's pid");
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(moat),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = reaper_value(&status, "create", Duration::from_secs(10));
        drop(reaper.stdin.take());
        let _ = reaper.wait();
        panic!("create did not return within 30 s under a caller that reaps late");
    };
    let ms = reaper_value(&status, "ms", Duration::from_secs(1));
    let err = std::fs::read_to_string(&err_file).unwrap_or_default();
    eprintln!("create -> {rc} after {ms:?} ms\n  stderr: {}", err.trim());
    assert_eq!(rc, 1, "create fails");
    let ms = ms.expect("elapsed");
    assert!(
        ms < 4000,
        "create took {ms} ms to fail: the rollback waited for a reap that comes after it"
    );
    assert!(
        err.contains("runsc create was killed by signal 9 (SIGKILL)"),
        "one line saying why: {err}"
    );
    assert!(!err.contains("left"), "the rollback left something: {err}");
    // While the caller still holds the zombies.
    ctx.assert_no_trace(&id);
    let filestore = ctx.rootfs().join(format!(".gvisor.filestore.{id}"));
    assert!(!filestore.exists(), "{} left", filestore.display());
    // The caller reaps; then no process of the container either.
    drop(reaper.stdin.take());
    let _ = reaper.wait();
    ctx.assert_no_trace(&id);
}

/// The sandbox and gofer pids runsc recorded for a container.
fn runsc_pids(root: &Path, id: &str) -> (i32, i32) {
    let f = root.join("@runsc").join(format!("{id}_sandbox:{id}.state"));
    let v: Value = serde_json::from_slice(&std::fs::read(&f).expect("runsc state")).unwrap();
    let pid = |p: &str| i32::try_from(v.pointer(p).and_then(Value::as_i64).unwrap()).unwrap();
    (pid("/sandbox/pid"), pid("/goferPid"))
}

/// Undoing a failed create ends only what runsc started for that container: a pid runsc
/// recorded may be another process's by then, another container's sandbox (same `argv[0]`)
/// among them. Here B's prestart hook rewrites B's runsc state to name A's sandbox and
/// gofer (standing in for the pids' reuse) and SIGKILLs `runsc create`. B's create fails and
/// leaves nothing (its own sandbox and gofer ended through its cgroup); A's sandbox and
/// gofer are the same processes after, and A starts and runs. With only `argv[0]` checked,
/// or runsc's delete called on B, A's sandbox is SIGKILLed.
fn a_failed_create_never_ends_another_containers_sandbox() {
    if !usable("a_failed_create_never_ends_another_containers_sandbox") {
        return;
    }
    if !python_installed() {
        missing("python3 (the hook that rewrites runsc's state)");
        return;
    }
    let mut ctx = support::Ctx::new("gvdecoy");
    ctx.config["annotations"]["moat.runtime"] = Value::from("gvisor");
    ctx.config["process"]["args"] = serde_json::json!(["sh", "-c", "echo a-runs; sleep 600"]);
    let open = ctx.dir.join("open.toml");
    std::fs::write(
        &open,
        format!(
            "default_policy = \"open\"\n[gvisor]\nrunsc_path = \"{}\"\n",
            runsc().display()
        ),
    )
    .unwrap();
    ctx.use_config(&open);
    let a = ctx.create_ok("a");
    let (sandbox, gofer) = runsc_pids(&ctx.root, &a.id);
    // The start time of `pid` while it runs (not a zombie).
    let started = |pid: i32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after = stat
            .rsplit_once(')')
            .map(|x| x.1.to_string())
            .unwrap_or_default();
        let f: Vec<&str> = after.split_whitespace().collect();
        (f.len() > 19 && f[0] != "Z" && f[0] != "X").then(|| f[19].to_string())
    };
    let before = (started(sandbox), started(gofer));
    assert!(
        before.0.is_some() && before.1.is_some(),
        "A's sandbox and gofer run"
    );

    let b = ctx.id("b");
    let state = ctx
        .root
        .join("@runsc")
        .join(format!("{b}_sandbox:{b}.state"));
    let rewrite = format!(
        "import json, os\n\
         p = {state:?}\n\
         v = json.load(open(p))\n\
         v['sandbox']['pid'] = {sandbox}\n\
         v['goferPid'] = {gofer}\n\
         open(p + '.tmp', 'w').write(json.dumps(v))\n\
         os.rename(p + '.tmp', p)\n\
         os.kill(os.getppid(), 9)\n",
        state = state.display().to_string()
    );
    ctx.config["process"]["args"] = serde_json::json!(["sleep", "600"]);
    ctx.config["hooks"] = serde_json::json!({
        "prestart": [{"path": "/usr/bin/python3", "args": ["python3", "-c", rewrite]}]
    });
    let (bc, out) = ctx.create("b");
    let err = out.fails().stderr;
    assert!(
        err.contains("runsc create was killed by signal 9 (SIGKILL)"),
        "B's create fails saying why: {err}"
    );
    // B's own processes were in its cgroup, drained; the caller (this test) reaps them.
    // (A's mounts, under the same test directory, are A's.)
    let b_traces = || -> Vec<String> {
        let mut t = ctx.traces(&bc.id);
        t.retain(|t| !t.contains(&a.id));
        t
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !b_traces().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(b_traces(), Vec::<String>::new(), "B left behind");

    assert_eq!(
        (started(sandbox), started(gofer)),
        before,
        "A's sandbox and gofer were ended by B's rollback"
    );
    ctx.config.as_object_mut().unwrap().remove("hooks");
    ctx.moat(&["start", &a.id]).ok();
    let st: Value = serde_json::from_str(&ctx.moat(&["state", &a.id]).ok().stdout).unwrap();
    assert_eq!(st["status"], "running", "{st}");
    ctx.moat(&["delete", "--force", &a.id]).ok();
    ctx.assert_no_trace(&a.id);
}

/// Whether this host can run gVisor's KVM platform: /dev/kvm and VMX or SVM in the CPU's
/// flags (x86).
fn host_runs_kvm() -> bool {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let flags = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "flags").then_some(v)
        })
        .unwrap_or("");
    Path::new("/dev/kvm").exists() && flags.split_whitespace().any(|f| f == "vmx" || f == "svm")
}

/// `[gvisor] platform = "kvm"`, which every runsc lists: on a host whose CPU has neither VMX
/// nor SVM (this one: /dev/kvm is there, from a paravirtual KVM, and runsc's sandbox spins
/// forever on it) create refuses it in one line naming why, before anything exists; on a
/// host that can run it, a container runs on it (every call bounded: a spin fails the test).
fn kvm_only_where_the_cpu_can_run_it() {
    if !usable("kvm_only_where_the_cpu_can_run_it") {
        return;
    }
    let mut ctx = support::Ctx::new("gvkvm");
    ctx.config["annotations"]["moat.runtime"] = Value::from("gvisor");
    ctx.config["process"]["args"] = serde_json::json!(["sleep", "600"]);
    let cfg = ctx.dir.join("kvm.toml");
    std::fs::write(
        &cfg,
        format!(
            "default_policy = \"open\"\n[gvisor]\nruntime = \"gvisor\"\nrunsc_path = \"{}\"\n\
             platform = \"kvm\"\n",
            runsc().display()
        ),
    )
    .unwrap();
    ctx.use_config(&cfg);
    let (c, out) = ctx.create("k");
    if host_runs_kvm() {
        eprintln!("this host has /dev/kvm and VMX/SVM: a container runs on kvm");
        let out = out.ok();
        assert!(out.stderr.trim().is_empty(), "{}", out.stderr);
        ctx.moat(&["start", &c.id]).ok();
        let o = ctx.moat(&["exec", &c.id, "echo", "on-kvm"]).ok();
        assert_eq!(o.stdout.trim(), "on-kvm");
        ctx.moat(&["delete", "--force", &c.id]).ok();
        ctx.assert_no_trace(&c.id);
        return;
    }
    eprintln!("this host cannot run kvm: create must refuse it");
    let out = out.fails();
    let err = out.stderr.trim();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("gvisor.platform \"kvm\"")
            && err.contains("this host cannot run it")
            && (err.contains("neither VMX nor SVM") || err.contains("/dev/kvm")),
        "{err}"
    );
    ctx.assert_no_trace(&c.id);
    assert!(
        runsc_files(&ctx.root, &c.id).is_empty(),
        "no runsc state: {:?}",
        runsc_files(&ctx.root, &c.id)
    );
    assert!(sandboxes_of(&c.id).is_empty(), "no sandbox");
}

/// The counter a snapshot test's container keeps in its tmpfs (`/dev/shm`).
fn counter(e: &Env, id: &str) -> u64 {
    let out = e.ok(&["exec", id, "cat", "/dev/shm/c"]);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{id}: counter {out:?}"))
}

/// runsc's own snapshot under moat: a RESTRICTED container checkpointed (and gone, as
/// runc's checkpoint leaves it), restored into two new ids at once (a fork: each its own
/// sandbox, record and cgroup), both going on from where the checkpoint stopped with
/// the container's seccomp filter still on its process and `verify` passing. A bundle
/// whose spec asks other than the checkpointed one (another policy), an image changed
/// after the checkpoint, an image directory moat's checkpoint never wrote, an image path
/// inside the rootfs and `--criu` are refused, leaving nothing; delete leaves no sandbox
/// and no runsc state.
fn checkpoint_restore_and_fork_through_runsc() {
    if !usable("checkpoint_restore_and_fork_through_runsc") {
        return;
    }
    let release = runsc_release();
    let mut e = Env::new("snap");
    let b = e.bundle(
        "b",
        &[("moat.runtime", "gvisor")],
        &[
            "sh",
            "-c",
            // Renamed into place: a read never sees the file half written.
            "i=0; while :; do i=$((i+1)); echo $i > /dev/shm/t; mv /dev/shm/t /dev/shm/c; \
             sleep 0.05; done",
        ],
    );
    let bs = b.to_str().unwrap();
    let orig = e.id("orig");
    e.ok(&["run", "--detach", "--bundle", bs, &orig]);
    // Far enough that a process started again (from 1) could not be taken for one going on.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counter(&e, &orig) < 40 {
        assert!(Instant::now() < deadline, "the counter never reached 40");
        std::thread::sleep(Duration::from_millis(100));
    }
    let images = e.dir.join("img");
    let img = images.to_str().unwrap();
    // Refused before anything is written: inside the rootfs, and a CRIU named.
    let inside = b.join("rootfs/img");
    let o = e.run(&[
        "checkpoint",
        "--image-path",
        inside.to_str().unwrap(),
        &orig,
    ]);
    assert!(!o.status.success(), "checkpoint into the rootfs");
    assert!(
        stderr(&o).contains("inside the container's rootfs"),
        "{}",
        stderr(&o)
    );
    assert!(
        !inside.exists(),
        "the refused checkpoint made its image dir"
    );
    let o = e.run(&[
        "--criu",
        "/bin/true",
        "checkpoint",
        "--image-path",
        img,
        &orig,
    ]);
    assert!(!o.status.success(), "--criu for a gVisor container");
    assert!(stderr(&o).contains("--criu"), "{}", stderr(&o));

    let saved = counter(&e, &orig);
    e.ok(&["checkpoint", "--image-path", img, &orig]);
    assert!(
        !e.root().join(&orig).exists(),
        "runsc {release}: the checkpointed container is still recorded"
    );
    assert!(
        runsc_files(&e.root(), &orig).is_empty(),
        "runsc {release}: runsc state left"
    );
    assert!(
        sandboxes_of(&orig).is_empty(),
        "runsc {release}: its sandbox still runs"
    );

    // A fork: two restores of the one image, side by side.
    let forks = [e.id("fork1"), e.id("fork2")];
    for f in &forks {
        e.ok(&[
            "restore",
            "--detach",
            "--image-path",
            img,
            "--bundle",
            bs,
            f,
        ]);
    }
    for f in &forks {
        assert_eq!(e.state(f)["status"], "running", "runsc {release}: {f}");
        let n = counter(&e, f);
        assert!(
            n >= saved,
            "runsc {release}: {f} counts from {n}, not on from {saved}"
        );
        let st = e.ok(&["exec", f, "grep", "Seccomp:", "/proc/1/status"]);
        assert!(
            st.contains("Seccomp:\t2"),
            "runsc {release}: {f}'s process: {st}"
        );
        e.ok(&["verify", f]);
        assert_eq!(
            sandboxes_of(f).len(),
            1,
            "runsc {release}: {f}'s own sandbox"
        );
    }
    // Each goes on alone: stopping one leaves the other counting.
    e.ok(&["delete", "--force", &forks[0]]);
    let n = counter(&e, &forks[1]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        counter(&e, &forks[1]) > n,
        "runsc {release}: the second fork stopped"
    );

    // Refusals, each leaving nothing.
    let refused = |e: &mut Env, name: &str, images: &Path, want: &str| {
        let id = e.id(name);
        let o = e.run(&[
            "restore",
            "--detach",
            "--image-path",
            images.to_str().unwrap(),
            "--bundle",
            bs,
            &id,
        ]);
        assert!(!o.status.success(), "runsc {release}: restore {name}");
        assert!(
            stderr(&o).contains(want),
            "runsc {release}: {name}: {}",
            stderr(&o)
        );
        assert!(!e.root().join(&id).exists(), "{name}: state dir left");
        assert!(
            runsc_files(&e.root(), &id).is_empty(),
            "{name}: runsc state left"
        );
        assert!(sandboxes_of(&id).is_empty(), "{name}: a sandbox left");
    };
    // The image as written, under a policy that asks less of the process (OPEN keeps the
    // bundle's capabilities and drops moat's seccomp profile): the restored process would
    // keep what RESTRICTED gave it, so the bundle's spec must ask what it asked.
    let open = e.dir.join("open.toml");
    std::fs::write(&open, "default_policy = \"open\"\n").unwrap();
    e.config = Some(open);
    refused(
        &mut e,
        "open",
        &images,
        "differs from the checkpointed container's in",
    );
    e.config = None;
    // A copy of the image: same bytes, a directory no checkpoint wrote.
    let copy = e.dir.join("copy");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(images.join("checkpoint.img"), copy.join("checkpoint.img")).unwrap();
    refused(&mut e, "copy", &copy, "no record of a gVisor checkpoint");
    // The image changed after the checkpoint: one byte appended.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(images.join("checkpoint.img"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"\0").unwrap();
    drop(f);
    refused(
        &mut e,
        "tampered",
        &images,
        "changed since moat's checkpoint",
    );
    // A file added beside it.
    std::fs::write(images.join("extra.img"), b"x").unwrap();
    refused(&mut e, "extra", &images, "changed since moat's checkpoint");

    e.ok(&["delete", "--force", &forks[1]]);
    for f in &forks {
        assert!(!e.root().join(f).exists(), "{f}: state dir left");
        assert!(
            runsc_files(&e.root(), f).is_empty(),
            "{f}: runsc state left"
        );
        assert!(sandboxes_of(f).is_empty(), "{f}: a sandbox left");
    }
}
