//! linux.resources on this host's v1 hierarchies, seen from the host through the
//! container pid's /proc/<pid>/cgroup; cgroupsPath forms; removal at delete.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

const T: Duration = Duration::from_secs(20);

/// Every v1 cgroup directory of `pid` (one per hierarchy line, skipping the v2 "0::").
fn all_dirs(pid: i32) -> Vec<PathBuf> {
    proc_cgroups(pid)
        .into_iter()
        .filter(|(ctrls, _)| !ctrls.is_empty())
        .map(|(ctrls, path)| {
            let name = ctrls.strip_prefix("name=").unwrap_or(&ctrls).to_string();
            Path::new("/sys/fs/cgroup")
                .join(name)
                .join(path.trim_start_matches('/'))
        })
        .collect()
}

fn file(pid: i32, ctrl: &str, name: &str) -> String {
    let dir = v1_cgroup_dir(pid, ctrl).unwrap_or_else(|| panic!("no {ctrl} cgroup for {pid}"));
    read(dir.join(name)).trim().to_string()
}

/// Creates and starts a `sleep` container with `resources`.
fn running(ctx: &mut Ctx, resources: Value) -> (Container, i32) {
    ctx.set("/linux/resources", resources);
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    (c, pid)
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn memory_limit_is_written_to_the_memory_controller() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgmem");
    let (c, pid) = running(&mut ctx, json!({"memory": {"limit": 64 << 20}}));
    let dir = v1_cgroup_dir(pid, "memory").unwrap();
    assert!(dir.ends_with(format!("moat/{}", c.id)), "{}", dir.display());
    assert_eq!(
        file(pid, "memory", "memory.limit_in_bytes"),
        (64u64 << 20).to_string()
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn pids_limit_is_written_and_enforced() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgpids");
    ctx.set("/linux/resources", json!({"pids": {"limit": 6}}));
    // sh + 5 sleeps reach the limit; the next fork fails and the shell gives up (its
    // exit takes the sleeps with it: they are in its pid namespace).
    ctx.sh("for i in 1 2 3 4 5 6 7 8; do sleep 5 & done; echo all-spawned");
    let c = ctx.create_ok("c");
    let pid = c.pid();
    assert_eq!(file(pid, "pids", "pids.max"), "6");
    c.start();
    c.wait_stopped(T);
    assert!(
        c.stderr().contains("can't fork"),
        "limit not enforced: {}",
        c.stderr()
    );
    assert!(!c.stdout().contains("all-spawned"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cpu_shares_and_quota_are_written_to_the_cpu_controller() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgcpu");
    let (_c, pid) = running(
        &mut ctx,
        json!({"cpu": {"shares": 512, "quota": 50000, "period": 100000}}),
    );
    assert_eq!(file(pid, "cpu", "cpu.shares"), "512");
    assert_eq!(file(pid, "cpu", "cpu.cfs_quota_us"), "50000");
    assert_eq!(file(pid, "cpu", "cpu.cfs_period_us"), "100000");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_cgroup_dir_is_removed_at_delete() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgrm");
    let (c, pid) = running(&mut ctx, json!({"pids": {"limit": 100}}));
    let dirs = all_dirs(pid);
    assert!(dirs.len() >= 5, "{dirs:?}");
    for d in &dirs {
        assert!(d.is_dir(), "{}", d.display());
        assert!(d.ends_with(format!("moat/{}", c.id)), "{}", d.display());
    }
    let v2 = Path::new("/sys/fs/cgroup/unified/moat").join(&c.id);
    c.moat(&["delete", "--force", &c.id]).ok();
    for d in &dirs {
        assert!(!d.exists(), "{} left after delete", d.display());
    }
    assert!(!v2.exists(), "{} left after delete", v2.display());
}

/// rmdir of a cgroup we made outside /moat, in every hierarchy (after the test).
struct TopCgroup(String);

impl Drop for TopCgroup {
    fn drop(&mut self) {
        if let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in rd.flatten() {
                let _ = std::fs::remove_dir(h.path().join(&self.0));
            }
        }
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn absolute_cgroups_path_is_used_as_given() {
    if !require_root() {
        return;
    }
    let name = format!("moat-it-abs-{}", std::process::id());
    let _cleanup = TopCgroup(name.clone());
    let mut ctx = Ctx::new("cgabs");
    ctx.set("/linux/cgroupsPath", json!(format!("/{name}")));
    let (c, pid) = running(&mut ctx, json!({"pids": {"limit": 50}}));
    let dir = v1_cgroup_dir(pid, "pids").unwrap();
    assert_eq!(dir, Path::new("/sys/fs/cgroup/pids").join(&name));
    assert_eq!(file(pid, "pids", "pids.max"), "50");
    c.moat(&["delete", "--force", &c.id]).ok();
    assert!(!dir.exists());
}

/// runc's update.bats "cpu period in a pod cgroup with pod limit set": under a pod
/// cgroup limited to 50% (cfs quota 50000 of 100000), a container at 500000/1000000
/// (also 50%) updated to 3000/10000 (30%). Writing the shorter period first would leave
/// 500000/10000 in between, which the pod's limit refuses (EINVAL); the quota goes
/// first then, as runc does, and the update lands whole.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cpu_quota_and_period_update_keeps_each_step_within_the_pods_limit() {
    if !require_root() {
        return;
    }
    let cpu = Path::new("/sys/fs/cgroup/cpu");
    if !cpu.join("cpu.cfs_quota_us").exists() {
        missing("cpu_quota_and_period_update…: no v1 cpu hierarchy with CFS bandwidth here");
        return;
    }
    let pod = format!("moat-it-pod-{}", std::process::id());
    let _cleanup = TopCgroup(pod.clone());
    std::fs::create_dir(cpu.join(&pod)).expect("pod cgroup");
    std::fs::write(cpu.join(&pod).join("cpu.cfs_quota_us"), "50000").expect("pod limit");
    assert_eq!(
        read(cpu.join(&pod).join("cpu.cfs_period_us")).trim(),
        "100000"
    );
    let mut ctx = Ctx::new("cgpod");
    ctx.set("/linux/cgroupsPath", json!(format!("/{pod}/c")));
    let (c, pid) = running(
        &mut ctx,
        json!({"cpu": {"quota": 500000, "period": 1000000}}),
    );
    assert_eq!(file(pid, "cpu", "cpu.cfs_period_us"), "1000000");
    let out = c.moat(&[
        "update",
        "--cpu-period",
        "10000",
        "--cpu-quota",
        "3000",
        &c.id,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(file(pid, "cpu", "cpu.cfs_period_us"), "10000");
    assert_eq!(file(pid, "cpu", "cpu.cfs_quota_us"), "3000");
    // And back up to a longer period: quota first would be 500000/10000, period first fits.
    let out = c.moat(&[
        "update",
        "--cpu-period",
        "1000000",
        "--cpu-quota",
        "400000",
        &c.id,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(file(pid, "cpu", "cpu.cfs_quota_us"), "400000");
    c.moat(&["delete", "--force", &c.id]).ok();
}

/// runc's cgroups.bats "exec (cgroup v1+hybrid joins correct cgroup)": an exec'd process
/// is in every cgroup the init is in, the v2 (unified) one of a hybrid host included, as
/// the host sees them (`/proc/<pid>/cgroup` of both, read on the host); with and without
/// a cgroup namespace (inside one the exec'd process reads its own cgroup as `/`, the
/// namespace's root, as the init does).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_exec_d_process_joins_every_cgroup_of_the_init() {
    if !require_root() {
        return;
    }
    for cgroupns in [true, false] {
        let mut ctx = Ctx::new(if cgroupns { "cgexecns" } else { "cgexec" });
        if !cgroupns {
            ctx.without_ns("cgroup");
        }
        let (c, pid) = running(&mut ctx, json!({}));
        let init = read(format!("/proc/{pid}/cgroup"));
        assert!(init.contains(&c.id), "{init}");
        let pid_file = ctx.dir.join("exec.pid");
        let pf = pid_file.to_str().expect("utf-8");
        c.moat(&["exec", "-d", "--pid-file", pf, &c.id, "sleep", "30"])
            .ok();
        let exec_pid = read(&pid_file).trim().to_string();
        let exec = read(format!("/proc/{exec_pid}/cgroup"));
        assert_eq!(
            init, exec,
            "cgroupns {cgroupns}: the exec'd process's cgroups"
        );
        let exec_pid: i32 = exec_pid.parse().expect("a pid");
        assert!(kill_and_wait(exec_pid, Duration::from_secs(10)));
        let inside = c.moat(&["exec", &c.id, "cat", "/proc/self/cgroup"]).ok();
        let v2 = inside.stdout.lines().find(|l| l.starts_with("0::"));
        if cgroupns {
            assert_eq!(v2, Some("0::/"), "{}", inside.stdout);
        } else if let Some(v2) = v2 {
            assert!(v2.contains(&c.id), "{}", inside.stdout);
        }
    }
}

/// runc's `exec --cgroup [controller[,controller]:]path`, given twice: each named
/// controller's hierarchy gets its sub-cgroup, the others the container's own; `..`, a
/// missing sub-cgroup and an unknown controller are refused in runc's words.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_cgroup_takes_runcs_controller_path_form() {
    if !require_root() {
        return;
    }
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        missing("a cgroup v1 host: exec --cgroup controller:path is v1 only");
        return;
    }
    let mut ctx = Ctx::new("cgsub");
    let (c, pid) = running(&mut ctx, json!({}));
    let pids_dir = v1_cgroup_dir(pid, "pids").unwrap();
    let mem_dir = v1_cgroup_dir(pid, "memory").unwrap();
    for d in [&pids_dir, &mem_dir] {
        std::fs::create_dir(d.join("sub")).unwrap();
    }
    let refused = |args: &[&str], want: &str| {
        let mut a = vec!["exec"];
        a.extend_from_slice(args);
        a.extend_from_slice(&[&c.id, "true"]);
        let out = c.moat(&a).fails();
        assert!(out.stderr.contains(want), "{args:?}: {}", out.stderr);
    };
    refused(&["--cgroup", ".."], "bad sub cgroup path: ..");
    refused(
        &["--cgroup", "nosuch"],
        "/nosuch/cgroup.procs: no such file or directory",
    );
    refused(
        &["--cgroup", "pids:nosuch"],
        "/nosuch/cgroup.procs: no such file or directory",
    );
    refused(&["--cgroup", "whaaat:/"], "unknown controller");
    let pid_file = ctx.dir.join("sub.pid");
    let pf = pid_file.to_str().expect("utf-8");
    c.moat(&[
        "exec",
        "-d",
        "--pid-file",
        pf,
        "--cgroup",
        "pids:sub",
        "--cgroup",
        "memory:/sub",
        &c.id,
        "sleep",
        "30",
    ])
    .ok();
    let exec_pid: i32 = read(&pid_file).trim().parse().expect("a pid");
    assert_eq!(
        v1_cgroup_dir(exec_pid, "pids").unwrap(),
        pids_dir.join("sub")
    );
    assert_eq!(
        v1_cgroup_dir(exec_pid, "memory").unwrap(),
        mem_dir.join("sub")
    );
    assert_eq!(
        v1_cgroup_dir(exec_pid, "freezer").unwrap(),
        v1_cgroup_dir(pid, "freezer").unwrap(),
        "a hierarchy no entry names: the container's own cgroup"
    );
    assert!(kill_and_wait(exec_pid, Duration::from_secs(10)));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn relative_cgroups_path_goes_under_moat() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgrel");
    let rel = format!("rel-{}", ctx.id("x"));
    ctx.set("/linux/cgroupsPath", json!(rel));
    let (c, pid) = running(&mut ctx, json!({}));
    let dir = v1_cgroup_dir(pid, "pids").unwrap();
    assert_eq!(dir, Path::new("/sys/fs/cgroup/pids/moat").join(&rel));
    c.moat(&["delete", "--force", &c.id]).ok();
    assert!(!dir.exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn container_sees_its_own_cgroup_read_only() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgns");
    ctx.set("/linux/resources", json!({"pids": {"limit": 33}}));
    ctx.sh(
        "grep ':pids:' /proc/self/cgroup; cat /sys/fs/cgroup/pids/pids.max; \
         echo 1000 > /sys/fs/cgroup/pids/pids.max; echo rc=$?",
    );
    let (out, err) = run_to_end(&ctx, "c");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}{err}");
    assert!(
        lines[0].ends_with(":pids:/"),
        "cgroup namespace root: {}",
        lines[0]
    );
    assert_eq!(lines[1], "33", "its own pids.max");
    assert_eq!(lines[2], "rc=1", "/sys/fs/cgroup must be read-only");
    assert!(err.contains("Read-only file system"), "{err}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bad_resource_value_fails_create_and_removes_the_cgroup() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgbad");
    // Below the quota minimum of 1ms: the kernel refuses the write.
    ctx.set(
        "/linux/resources",
        json!({"cpu": {"quota": 10, "period": 100000}}),
    );
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(out.stderr.contains("cpu"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

/// The fleet budget is a parent shared by every RESTRICTED container moat places: a second
/// container under it is created while the first one runs there (the fleet is not
/// "someone else's non-empty cgroup"), and both sit below the one capped parent.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn two_containers_share_the_fleet_budget() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgfleet");
    let fleet = format!("/{}-fleet", ctx.id("f"));
    let cfg = ctx.dir.join("moat.toml");
    std::fs::write(
        &cfg,
        format!("[fleet]\ncgroup = \"{fleet}\"\npids = 1000\n"),
    )
    .unwrap();
    ctx.use_config(&cfg).args(&["sleep", "30"]);
    let a = ctx.create_ok("a");
    a.start();
    let b = ctx.create_ok("b");
    b.start();
    for c in [&a, &b] {
        let dir = v1_cgroup_dir(c.pid(), "pids").unwrap();
        assert!(
            dir.ends_with(format!("{}/{}", fleet.trim_start_matches('/'), c.id)),
            "{}",
            dir.display()
        );
    }
    let top = Path::new("/sys/fs/cgroup/pids").join(fleet.trim_start_matches('/'));
    assert_eq!(read(top.join("pids.max")).trim(), "1000");
    drop(a);
    drop(b);
    // The fleet stays (it is shared); this test's own is removed here, in every hierarchy.
    for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let _ = std::fs::remove_dir(h.path().join(fleet.trim_start_matches('/')));
    }
}

/// Removes `/<rel>` (leaf first) from every v1 hierarchy, thawing it first.
struct FreezerTree(String);

impl Drop for FreezerTree {
    fn drop(&mut self) {
        let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else {
            return;
        };
        for root in rd.flatten().map(|e| e.path()) {
            let top = root.join(&self.0);
            let mut dirs = vec![top.clone()];
            let mut i = 0;
            while i < dirs.len() {
                if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
                    dirs.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
                }
                i += 1;
            }
            for d in dirs.iter().rev() {
                let _ = std::fs::write(d.join("freezer.state"), "THAWED");
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// An init placed in a frozen cgroup never runs, so create would wait for it for ever
/// (runc refuses this too, in its words): a cgroup frozen by itself, or one made below a
/// frozen parent, fails create at once and leaves nothing.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_into_a_frozen_cgroup_is_refused() {
    if !require_root() {
        return;
    }
    let freezer = Path::new("/sys/fs/cgroup/freezer");
    if !freezer.join("cgroup.procs").exists() {
        missing("no v1 freezer hierarchy at /sys/fs/cgroup/freezer");
        return;
    }
    let top = format!("moat-test-frozen-{}", std::process::id());
    let _tree = FreezerTree(top.clone());
    // The container's own cgroup, made and frozen beforehand; then a parent frozen.
    for (cgroups_path, frozen) in [
        (format!("/{top}/own"), format!("{top}/own")),
        (format!("/{top}/parent/c"), format!("{top}/parent")),
    ] {
        let dir = freezer.join(&frozen);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("freezer.state"), "FROZEN").unwrap();
        let mut ctx = Ctx::new("cgfrozen");
        ctx.set("/linux/cgroupsPath", json!(cgroups_path));
        let (c, out) = ctx.create("c");
        let out = out.fails();
        assert!(
            out.stderr
                .contains("container's cgroup unexpectedly frozen"),
            "{cgroups_path}: {}",
            out.stderr
        );
        ctx.assert_no_trace(&c.id);
        // Refused again (runc's test creates twice): a frozen cgroup that was there before
        // is left as it was, not removed and then made afresh unfrozen.
        let (_c2, again) = ctx.create("c2");
        assert!(
            again
                .fails()
                .stderr
                .contains("container's cgroup unexpectedly frozen"),
            "{cgroups_path}: a second create was not refused"
        );
        // Nothing of this call's making is left in the other hierarchies either.
        for h in ["pids", "cpu", "memory", "devices"] {
            let d = Path::new("/sys/fs/cgroup")
                .join(h)
                .join(cgroups_path.trim_start_matches('/'));
            assert!(!d.exists(), "{} left behind", d.display());
        }
        if cgroups_path.ends_with("/c") {
            assert!(
                !freezer.join(cgroups_path.trim_start_matches('/')).exists(),
                "{cgroups_path}: the container's cgroup was left"
            );
        }
    }
}

/// A cgroup that already holds processes (someone else's) is refused under both policies:
/// its limits, pause and kill would reach them, and a delete could not tell them from the
/// container's. OPEN used to warn and share it (runc 1.1's behaviour); runc now refuses
/// too, in the words clients grep ("container's cgroup is not empty").
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_non_empty_cgroup_is_refused_under_restricted_and_open() {
    if !require_root() {
        return;
    }
    let path = format!("/moat-test-shared-{}", std::process::id());
    let mut ctx = Ctx::new("cgshared");
    ctx.set("/linux/cgroupsPath", json!(path));
    ctx.args(&["sleep", "30"]);
    let first = ctx.create_ok("a");
    first.start();
    // OPEN (the tests' default config): refused, and nothing of the refused container left.
    let (second, out) = ctx.create("b");
    let out = out.fails();
    assert!(
        out.stderr.contains("container's cgroup is not empty: ")
            && out.stderr.contains("already holds 1 process(es)"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&second.id);
    // RESTRICTED: refused alike.
    let mut strict = Ctx::new("cgsharedr");
    strict.restricted();
    strict.set("/linux/cgroupsPath", json!(path));
    strict.args(&["sleep", "30"]);
    let (c, out) = strict.create("c");
    let out = out.fails();
    assert!(out.stderr.contains("is not empty"), "{}", out.stderr);
    strict.assert_no_trace(&c.id);
    // The first container runs on, untouched by either refusal.
    assert_eq!(first.status(), "running");
    first.kill("KILL").ok();
    first.wait_stopped(T);
}

/// A cgroup that holds someone else's process in one hierarchy only: RESTRICTED refuses
/// it, and the directories create made in the other hierarchies go with the refusal
/// (only the one that was there stays, with its process).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_cgroup_held_in_one_hierarchy_is_refused_and_the_rest_removed() {
    if !require_root() {
        return;
    }
    let root = Path::new("/sys/fs/cgroup");
    let held_in = root.join("pids");
    if !held_in.join("cgroup.procs").exists() {
        missing("no v1 pids hierarchy at /sys/fs/cgroup/pids");
        return;
    }
    let path = format!("moat-test-held-{}", std::process::id());
    // Every other hierarchy mounted here (cpu, cpuset, systemd, unified, …).
    let dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|h| *h != held_in && h.join("cgroup.procs").exists())
        .map(|h| h.join(&path))
        .collect();
    /// The sleeper and every directory of `path`, removed however the test ends (a
    /// failure here is a create that left cgroups behind).
    struct Held(std::process::Child, Vec<PathBuf>);
    impl Drop for Held {
        fn drop(&mut self) {
            kill_child(&mut self.0);
            for d in &self.1 {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
    let held = held_in.join(&path);
    std::fs::create_dir_all(&held).unwrap();
    let sleeper = spawn(std::process::Command::new("sleep").arg("30"));
    let pid = sleeper.id();
    let _held = Held(
        sleeper,
        dirs.iter().cloned().chain([held.clone()]).collect(),
    );
    std::fs::write(held.join("cgroup.procs"), pid.to_string()).unwrap();
    let mut ctx = Ctx::new("cgheld");
    ctx.restricted();
    ctx.set("/linux/cgroupsPath", json!(format!("/{path}")));
    let (c, out) = ctx.create("c");
    let stderr = out.fails().stderr;
    let left: Vec<&PathBuf> = dirs.iter().filter(|d| d.exists()).collect();
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert!(left.is_empty(), "the refused create left {left:?}");
    ctx.assert_no_trace(&c.id);
}

/// runc's update.bats writes `linux.resources.CPU` and `"Cpus"` beside `cpu`: a case
/// variant of a resources field is read as the field, in order with it (objects merged),
/// as runc's decoder reads it (with a warning), at create and in `update -r`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_case_variant_of_a_resources_field_is_applied() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("cgcase");
    ctx.set(
        "/linux/resources",
        json!({"cpu": {"shares": 512}, "CPU": {"Cpus": "0", "Mems": "0"}}),
    );
    ctx.args(&["sleep", "30"]);
    let c = ctx.create_ok("c");
    assert!(
        c.stderr().contains("\"CPU\" taken as \"cpu\""),
        "{}",
        c.stderr()
    );
    c.start();
    let pid = c.pid();
    assert_eq!(file(pid, "cpuset", "cpuset.cpus"), "0");
    assert_eq!(file(pid, "cpu", "cpu.shares"), "512");
    let res = ctx.dir.join("res.json");
    std::fs::write(&res, r#"{"PIDS": {"Limit": 42}}"#).unwrap();
    let out = c.moat(&["update", "-r", res.to_str().unwrap(), &c.id]).ok();
    assert!(
        out.stderr.contains("\"PIDS\" taken as \"pids\""),
        "{}",
        out.stderr
    );
    assert_eq!(file(pid, "pids", "pids.max"), "42");
}

/// runc's update.bats "devices [minimal transition rules]" denies `/dev/kmsg` with
/// access "rwa". A letter the kernel does not know never makes a deny rule deny less:
/// here a deny of "a" alone (runc's emulator drops the letter, which leaves the rule
/// denying nothing) denies every access, with a warning; the container cannot open
/// the device that an earlier rule allowed (and can, without the deny: the control).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_device_rule_with_an_unknown_access_letter_denies_no_less() {
    if !require_root() {
        return;
    }
    for deny in [false, true] {
        let mut ctx = Ctx::new(if deny { "cgrwa" } else { "cgrwactl" });
        let mut rules = vec![
            json!({"allow": false, "access": "rwm"}),
            json!({"allow": true, "type": "c", "major": 1, "minor": 11, "access": "rw"}),
        ];
        if deny {
            rules
                .push(json!({"allow": false, "type": "c", "major": 1, "minor": 11, "access": "a"}));
        }
        ctx.set("/linux/resources/devices", json!(rules));
        ctx.set(
            "/linux/devices",
            json!([{"path": "/dev/kmsg", "type": "c", "major": 1, "minor": 11}]),
        );
        // Opening /dev/kmsg for reading needs CAP_SYSLOG besides the device rule.
        for set in ["bounding", "permitted", "effective"] {
            ctx.push(&format!("/process/capabilities/{set}"), json!("CAP_SYSLOG"));
        }
        ctx.sh("(: </dev/kmsg) 2>/dev/null && echo opened || echo denied");
        let (out, err) = run_to_end(&ctx, "c");
        if deny {
            assert_eq!(out, "denied\n", "{err}");
            assert!(
                err.contains(
                    "access: \"a\": \"a\" is no device access (r, w, m); the rule denies \
                     every access"
                ),
                "{err}"
            );
        } else {
            assert_eq!(out, "opened\n", "the control: {err}");
        }
    }
}

/// runc's delete.bats takes `ro` out of the cgroup mount to make sub-cgroups: cgroupfs is
/// mounted as the spec says, as runc mounts it (read-only with `ro`, which moat's default
/// spec has: the control), and `delete --force` removes the sub-cgroup with the
/// container's.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn cgroupfs_without_ro_is_writable_and_sub_cgroups_go_at_delete() {
    if !require_root() {
        return;
    }
    if !Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists() {
        missing("cgroupfs_without_ro…: no v1 pids hierarchy here");
        return;
    }
    for ro in [true, false] {
        let mut ctx = Ctx::new(if ro { "cgro" } else { "cgrw" });
        if !ro {
            let m = ctx.config["mounts"]
                .as_array_mut()
                .expect("mounts")
                .iter_mut()
                .find(|m| m["type"] == "cgroup")
                .expect("a cgroup mount");
            m["options"]
                .as_array_mut()
                .expect("options")
                .retain(|o| o != "ro");
        }
        ctx.without_ns("cgroup");
        ctx.sh("mkdir /sys/fs/cgroup/pids/foo 2>/dev/null && echo made || echo refused; sleep 30");
        let c = ctx.create_ok("c");
        c.start();
        let pid = c.pid();
        assert!(wait_until(T, || !c.stdout().is_empty()));
        let dir = v1_cgroup_dir(pid, "pids").expect("pids cgroup");
        assert_eq!(c.stdout(), if ro { "refused\n" } else { "made\n" });
        assert_eq!(dir.join("foo").is_dir(), !ro);
        c.moat(&["delete", "--force", &c.id]).ok();
        assert!(!dir.exists(), "{} left after delete", dir.display());
    }
}
