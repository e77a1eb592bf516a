//! Root integration tests of the operations on a running container: `ps`, `events`,
//! `update`, and `features`. Each test makes its own state root and bundle (with
//! `scripts/mkbundle`) and deletes its container on the way out, pass or fail.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{is_root, mkbundle, stderr_of as stderr, Run};

const MOAT: &str = env!("CARGO_BIN_EXE_moat");

/// Root and a v1 memory hierarchy (this project's hybrid hosts), or a loud skip.
fn can_run(test: &str) -> bool {
    let ok = is_root() && Path::new("/sys/fs/cgroup/memory/memory.stat").exists();
    if !ok {
        support::missing(&format!("{test}: needs root and cgroup v1 memory"));
    }
    ok
}

/// A container of this test: its own state root and bundle, removed on drop.
struct Ctr {
    id: String,
    root: PathBuf,
    bundle: PathBuf,
}

impl Ctr {
    /// `moat run -d` of a busybox bundle running `args`.
    fn run(tag: &str, args: &[&str]) -> Ctr {
        let base = std::env::temp_dir().join(format!("moat-ops-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let c = Ctr {
            id: format!("ops-{tag}-{}", std::process::id()),
            root: base.join("root"),
            bundle: base.join("bundle"),
        };
        mkbundle(&c.bundle, args, &[("BUNDLE_ROOTFS", "hardlink")]);
        // The detached container keeps the stdio it is given: no pipes, or reading
        // them would wait for the container to exit.
        let log = base.join("run.err");
        let st = Command::new(MOAT)
            .arg("--root")
            .arg(&c.root)
            .args(["run", "-d", "-b", c.bundle.to_str().unwrap(), &c.id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .run_status()
            .expect("spawn moat run");
        assert!(
            st.success(),
            "run: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        c
    }

    fn moat(&self, args: &[&str]) -> Output {
        self.moat_stdin(args, None)
    }

    fn moat_stdin(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = support::spawn(
            Command::new(MOAT)
                .arg("--root")
                .arg(&self.root)
                .args(args)
                .stdin(if stdin.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped()),
        );
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        support::wait_output(child).unwrap()
    }

    fn state(&self) -> Value {
        let out = self.moat(&["state", &self.id]);
        assert!(out.status.success(), "state: {}", stderr(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn pid(&self) -> i64 {
        self.state()["pid"].as_i64().unwrap()
    }

    /// The container's directory in a v1 hierarchy, from its state record.
    fn cgroup_dir(&self, controller: &str) -> PathBuf {
        let rec: Value = serde_json::from_slice(
            &std::fs::read(self.root.join(&self.id).join("state.json")).unwrap(),
        )
        .unwrap();
        let path = rec["cgroup"]["path"]
            .as_str()
            .unwrap()
            .trim_start_matches('/');
        Path::new("/sys/fs/cgroup").join(controller).join(path)
    }

    fn wait_stopped(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state()["status"] != "stopped" {
            assert!(Instant::now() < deadline, "container did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Ctr {
    fn drop(&mut self) {
        let out = self.moat(&["delete", "--force", &self.id]);
        if !out.status.success() {
            eprintln!("cleanup: delete {}: {}", self.id, stderr(&out));
        }
        if let Some(base) = self.root.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn ps_json_lists_the_init_and_table_filters_ps() {
    if !can_run("ps") {
        return;
    }
    let c = Ctr::run("ps", &["sleep", "1000"]);
    let pid = c.pid();
    let out = c.moat(&["ps", "--format", "json", &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let pids: Vec<i64> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(pids, [pid]);

    let out = c.moat(&["ps", &c.id, "-o", "pid,comm"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].contains("PID"), "{text}");
    assert!(lines[1].trim().starts_with(&pid.to_string()), "{text}");
    assert!(lines[1].ends_with("sleep"), "{text}");

    let out = c.moat(&["ps", "-f", "yaml", &c.id]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("invalid format option"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn events_stats_match_the_cgroup_files() {
    if !can_run("events") {
        return;
    }
    let c = Ctr::run("events", &["sleep", "1000"]);
    let out = c.moat(&["events", "--stats", &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "one event, one line: {text}");
    let ev: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(ev["type"], "stats");
    assert_eq!(ev["id"], c.id.as_str());
    let data = &ev["data"];

    let usage = data["memory"]["usage"]["usage"].as_u64().unwrap();
    assert!(usage > 0, "{data}");
    let mem = c.cgroup_dir("memory");
    let limit: u64 = read(&mem, "memory.limit_in_bytes").parse().unwrap();
    assert_eq!(data["memory"]["usage"]["limit"].as_u64(), Some(limit));
    let max: u64 = read(&mem, "memory.max_usage_in_bytes").parse().unwrap();
    assert!(usage <= max, "usage {usage} above the recorded peak {max}");
    assert!(data["memory"]["raw"]["total_rss"].is_u64(), "{data}");

    let current = data["pids"]["current"].as_u64().unwrap();
    assert!(current >= 1);
    let file: u64 = read(&c.cgroup_dir("pids"), "pids.current").parse().unwrap();
    assert_eq!(current, file);

    for key in ["cpu", "cpuset", "blkio", "hugetlb", "intel_rdt"] {
        assert!(data.get(key).is_some(), "{key} missing: {data}");
    }
    assert!(data["cpu"]["usage"]["kernel"].is_u64());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn events_streams_until_the_container_stops() {
    if !can_run("events-stream") {
        return;
    }
    let c = Ctr::run("stream", &["sleep", "2"]);
    let t0 = Instant::now();
    let out = c.moat(&["events", "--interval", "300ms", &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(t0.elapsed() < Duration::from_secs(10));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().count() >= 2, "{text}");
    for line in text.lines() {
        let ev: Value = serde_json::from_str(line).unwrap();
        assert_eq!(ev["type"], "stats");
    }
    c.wait_stopped();
    let out = c.moat(&["events", "--stats", &c.id]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not running"), "{}", stderr(&out));
    let out = c.moat(&["ps", "-f", "json", &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]");
    let out = c.moat(&["update", "--pids-limit", "5", &c.id]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("container not running"),
        "{}",
        stderr(&out)
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn events_on_a_missing_container() {
    if !is_root() {
        panic!("events_on_a_missing_container needs root: run it as root, as scripts/test does");
    }
    let root = std::env::temp_dir().join(format!("moat-ops-{}-missing", std::process::id()));
    let out = Command::new(MOAT)
        .arg("--root")
        .arg(&root)
        .args(["events", "--stats", "nope"])
        .run_output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("container does not exist"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn update_changes_limits_and_bad_json_changes_nothing() {
    if !can_run("update") {
        return;
    }
    let c = Ctr::run("update", &["sleep", "1000"]);
    let (mem, pids) = (c.cgroup_dir("memory"), c.cgroup_dir("pids"));
    let devices_before = read(&c.cgroup_dir("devices"), "devices.list");

    let out = c.moat(&["update", "--memory", "64m", "--pids-limit", "20", &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&mem, "memory.limit_in_bytes"), "67108864");
    assert_eq!(read(&pids, "pids.max"), "20");
    assert_eq!(
        read(&c.cgroup_dir("devices"), "devices.list"),
        devices_before
    );

    // The saved spec carries the new limits.
    let spec: Value =
        serde_json::from_slice(&std::fs::read(c.root.join(&c.id).join("config.json")).unwrap())
            .unwrap();
    assert_eq!(spec["linux"]["resources"]["memory"]["limit"], 67108864);
    assert_eq!(spec["linux"]["resources"]["pids"]["limit"], 20);

    for bad in [
        "{\"memory\": {\"limit\": \"lots\"}, \"pids\": {\"limit\": 5}}",
        "{\"pids\": {\"limit\": 5}",
    ] {
        let out = c.moat_stdin(&["update", "--resources", "-", &c.id], Some(bad));
        assert_eq!(out.status.code(), Some(1), "{bad} accepted");
        let err = stderr(&out);
        assert!(err.contains("line 1"), "{err}");
        assert_eq!(read(&mem, "memory.limit_in_bytes"), "67108864");
        assert_eq!(read(&pids, "pids.max"), "20");
    }
    let out = c.moat_stdin(
        &["update", "--resources", "-", &c.id],
        Some("{\"memory\": {\"limit\": \"lots\"}}"),
    );
    assert!(stderr(&out).contains("memory.limit"), "{}", stderr(&out));

    // Values the kernel refuses fail naming file and value, and undo what went before
    // them: v1 writes pids before blkio, so pids.max is written, then restored.
    let out = c.moat_stdin(
        &["update", "--resources", "-", &c.id],
        Some(r#"{"cpu": {"cpus": "4095"}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cpuset.cpus"), "{}", stderr(&out));
    let out = c.moat_stdin(
        &["update", "--resources", "-", &c.id],
        Some(r#"{"pids": {"limit": 7}, "blockIO": {"weight": 1001}}"#),
    );
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("weight") && err.contains("1001"), "{err}");
    assert_eq!(read(&pids, "pids.max"), "20");
    assert_eq!(read(&mem, "memory.limit_in_bytes"), "67108864");

    // --resources from a file; the container keeps running throughout.
    let file = c.bundle.join("res.json");
    std::fs::write(&file, r#"{"pids": {"limit": 30}}"#).unwrap();
    let out = c.moat(&["update", "-r", file.to_str().unwrap(), &c.id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&pids, "pids.max"), "30");
    assert_eq!(c.state()["status"], "running");

    let out = c.moat(&["update", "--mem-bw-schema", "MB:0=50", &c.id]);
    assert!(
        stderr(&out).contains("Intel RDT is not supported"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn features_is_json_with_the_expected_keys() {
    let out = Command::new(MOAT).arg("features").run_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let f: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(f["ociVersionMin"], "1.0.0");
    assert!(f["ociVersionMax"].as_str().unwrap().starts_with("1."));
    assert_eq!(f["hooks"].as_array().unwrap().len(), 6);
    assert!(f["mountOptions"]
        .as_array()
        .unwrap()
        .contains(&Value::from("rbind")));
    let l = &f["linux"];
    for k in [
        "namespaces",
        "capabilities",
        "cgroup",
        "seccomp",
        "apparmor",
        "selinux",
        "intelRdt",
        "mountExtensions",
    ] {
        assert!(l.get(k).is_some(), "linux.{k} missing");
    }
    assert!(l["capabilities"]
        .as_array()
        .unwrap()
        .contains(&Value::from("CAP_SYS_ADMIN")));
    for k in ["v1", "v2", "systemd", "systemdUser", "rdma"] {
        assert!(l["cgroup"][k].is_boolean(), "cgroup.{k}");
    }
    for k in [
        "enabled",
        "actions",
        "operators",
        "archs",
        "knownFlags",
        "supportedFlags",
    ] {
        assert!(l["seccomp"].get(k).is_some(), "seccomp.{k}");
    }
    let a = &f["annotations"];
    assert_eq!(a["org.opencontainers.runc.checkpoint.enabled"], "false");
    assert!(a["io.github.moat.version"].is_string());
}
