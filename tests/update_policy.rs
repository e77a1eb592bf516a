//! `update` admits what create would admit: under RESTRICTED no update lifts a limit of the
//! floor (`[restricted] memory`, `pids`, `cpus`), by runc's flags, a `--resources` file or
//! `linux.resources.unified`; device rules are refused. Under OPEN the same updates lift
//! the limits, as runc. Each limit is read back from the container's cgroup on the host.

mod support;

use std::path::{Path, PathBuf};

use support::*;

const MEMORY: i64 = 256 << 20;
const PIDS: i64 = 100;
/// `cpus = "0.5"`: 50000 µs per 100000.
const QUOTA: i64 = 50_000;

/// The floor this file's RESTRICTED containers get; OPEN keeps the same tables, unused.
fn config(ctx: &Ctx, mode: &str) -> PathBuf {
    let p = ctx.dir.join(format!("moat-{mode}.toml"));
    std::fs::write(
        &p,
        format!(
            "default_policy = \"{mode}\"\n[restricted]\nmemory = \"256m\"\npids = {PIDS}\n\
             cpus = \"0.5\"\n"
        ),
    )
    .expect("write config");
    p
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Limit {
    Memory,
    Pids,
    Cpu,
}

impl Limit {
    fn controller(self) -> &'static str {
        match self {
            Limit::Memory => "memory",
            Limit::Pids => "pids",
            Limit::Cpu => "cpu",
        }
    }

    fn floor(self) -> i64 {
        match self {
            Limit::Memory => MEMORY,
            Limit::Pids => PIDS,
            Limit::Cpu => QUOTA,
        }
    }

    /// The limit in force for `pid`, from the host's cgroupfs (v1 file or v2 file);
    /// `None`: unlimited.
    fn read(self, pid: i32) -> Option<i64> {
        let ctrl = self.controller();
        let text = match v1_cgroup_dir(pid, ctrl) {
            Some(dir) => read(dir.join(match self {
                Limit::Memory => "memory.limit_in_bytes",
                Limit::Pids => "pids.max",
                Limit::Cpu => "cpu.cfs_quota_us",
            })),
            None => read(v2_dir(pid).join(match self {
                Limit::Memory => "memory.max",
                Limit::Pids => "pids.max",
                Limit::Cpu => "cpu.max",
            })),
        };
        let first = text.split_whitespace().next().unwrap_or_default();
        // v1's unlimited memory is the largest page-aligned count, its cpu quota -1; v2's
        // is "max".
        first
            .parse::<i64>()
            .ok()
            .filter(|n| (0..i64::MAX - 4096).contains(n))
    }

    /// Whether the controller is a v1 one here (unified keys cannot reach it then).
    fn on_v1(self, pid: i32) -> bool {
        v1_cgroup_dir(pid, self.controller()).is_some()
    }
}

/// The v2 cgroup directory of `pid` (the `0::` line).
fn v2_dir(pid: i32) -> PathBuf {
    let (_, path) = proc_cgroups(pid)
        .into_iter()
        .find(|(ctrls, _)| ctrls.is_empty())
        .expect("a v2 line in /proc/PID/cgroup");
    let root = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        Path::new("/sys/fs/cgroup")
    } else {
        Path::new("/sys/fs/cgroup/unified")
    };
    root.join(path.trim_start_matches('/'))
}

/// How an update asks for no limit.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// runc's flag with -1.
    Flag,
    /// `--resources` with a limit of -1.
    Json,
    /// `--resources` with `unified` `*.max` = `max`.
    Unified,
}

impl Way {
    /// The update's arguments before the id, and the key the warning names.
    fn args(self, limit: Limit, file: &Path) -> (Vec<String>, &'static str) {
        let (flag, json, key) = match (self, limit) {
            (Way::Flag, Limit::Memory) => ("--memory", "", "linux.resources.memory.limit"),
            (Way::Flag, Limit::Pids) => ("--pids-limit", "", "linux.resources.pids.limit"),
            (Way::Flag, Limit::Cpu) => ("--cpu-quota", "", "linux.resources.cpu.quota"),
            (Way::Json, Limit::Memory) => (
                "",
                r#"{"memory":{"limit":-1}}"#,
                "linux.resources.memory.limit",
            ),
            (Way::Json, Limit::Pids) => {
                ("", r#"{"pids":{"limit":-1}}"#, "linux.resources.pids.limit")
            }
            (Way::Json, Limit::Cpu) => ("", r#"{"cpu":{"quota":-1}}"#, "linux.resources.cpu.quota"),
            (Way::Unified, Limit::Memory) => (
                "",
                r#"{"unified":{"memory.max":"max"}}"#,
                "linux.resources.unified.memory.max",
            ),
            (Way::Unified, Limit::Pids) => (
                "",
                r#"{"unified":{"pids.max":"max"}}"#,
                "linux.resources.unified.pids.max",
            ),
            (Way::Unified, Limit::Cpu) => (
                "",
                r#"{"unified":{"cpu.max":"max"}}"#,
                "linux.resources.unified.cpu.max",
            ),
        };
        let args = if flag.is_empty() {
            std::fs::write(file, json).expect("write resources");
            vec!["--resources".to_string(), file.display().to_string()]
        } else {
            vec![flag.to_string(), "-1".to_string()]
        };
        (args, key)
    }
}

/// A started `sleep` under `mode`; under OPEN with the floor's limits in its spec, so
/// that there is a limit to lift. The context's own moat calls (`ctx.moat`) carry its
/// config; the container's (`c.moat`) the OPEN test config.
fn sleeper(mode: &str, tag: &str) -> (Ctx, Container, i32) {
    let mut ctx = Ctx::new(tag);
    let cfg = config(&ctx, mode);
    ctx.use_config(cfg);
    if mode == "open" {
        ctx.set(
            "/linux/resources",
            json!({
                "memory": {"limit": MEMORY},
                "pids": {"limit": PIDS},
                "cpu": {"quota": QUOTA, "period": 100_000},
            }),
        );
    }
    ctx.args(&["sleep", "1000"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    (ctx, c, pid)
}

/// Every limit the floor sets, lifted every way: RESTRICTED keeps the floor's (and the
/// warning names the key), OPEN lifts it (runc). A unified key of a controller that is
/// cgroup v1 here is refused by the cgroup code under either policy (runc's "invalid
/// configuration"), and the limit holds.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn no_update_lifts_a_limit_of_the_floor_under_restricted() {
    if !require_root() {
        return;
    }
    let mut failures = Vec::new();
    for limit in [Limit::Memory, Limit::Pids, Limit::Cpu] {
        for way in [Way::Flag, Way::Json, Way::Unified] {
            for mode in ["restricted", "open"] {
                let case = format!("{limit:?} by {way:?} under {mode}");
                let (ctx, c, pid) = sleeper(mode, "updfloor");
                assert_eq!(limit.read(pid), Some(limit.floor()), "{case}: at create");
                let (mut args, key) = way.args(limit, &ctx.dir.join("res.json"));
                args.insert(0, "update".into());
                args.push(c.id.clone());
                let argv: Vec<&str> = args.iter().map(String::as_str).collect();
                let out = ctx.moat(&argv);
                let now = limit.read(pid);
                let v1_unified = matches!(way, Way::Unified) && limit.on_v1(pid);
                let warned = out.stderr.contains("changed the update of container")
                    && out.stderr.contains(key);
                let ok = match (mode, v1_unified) {
                    ("restricted", false) => out.code == 0 && now == Some(limit.floor()) && warned,
                    ("restricted", true) => out.code != 0 && now == Some(limit.floor()) && warned,
                    (_, false) => out.code == 0 && now.is_none(),
                    (_, true) => {
                        out.code != 0
                            && out.stderr.contains("is on cgroup v1")
                            && now == Some(limit.floor())
                    }
                };
                if !ok {
                    failures.push(format!(
                        "{case}: exit {}, limit now {now:?} (floor {}), stderr: {}",
                        out.code,
                        limit.floor(),
                        out.stderr.trim()
                    ));
                }
                c.moat(&["delete", "--force", &c.id]).ok();
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Device rules in an update are never written, under either policy (as runc: containerd's
/// UpdateContainerResources sends the container's rules with every resize), and never
/// dropped quietly: the warning names them, the rest of the update is written (through
/// the floor under RESTRICTED: pids 50 is a tightening). rdma limits likewise (runc's
/// update reads none): left out with a warning naming them, the rest written.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn device_rules_in_an_update_are_never_written_and_said_so() {
    if !require_root() {
        return;
    }
    let res = r#"{"pids":{"limit":50},"devices":[{"allow":true,"access":"rwm"}]}"#;
    for mode in ["restricted", "open"] {
        let (ctx, c, pid) = sleeper(mode, "upddev");
        let file = ctx.dir.join("res.json");
        std::fs::write(&file, res).unwrap();
        let f = file.to_str().unwrap();
        let before = read(v1_cgroup_dir(pid, "devices").unwrap().join("devices.list"));
        let out = ctx.moat(&["update", "--resources", f, &c.id]).ok();
        assert!(
            out.stderr.contains("linux.resources.devices: ignored"),
            "{mode}: dropped without a word: {}",
            out.stderr
        );
        assert_eq!(Limit::Pids.read(pid), Some(50), "{mode}");
        let after = read(v1_cgroup_dir(pid, "devices").unwrap().join("devices.list"));
        assert_eq!(before, after, "{mode}: the device rules changed");
        std::fs::write(
            &file,
            r#"{"pids":{"limit":40},"rdma":{"mlx5_0":{"hcaHandles":1}}}"#,
        )
        .unwrap();
        let out = ctx.moat(&["update", "--resources", f, &c.id]).ok();
        assert!(
            out.stderr
                .contains("linux.resources.rdma: ignored device(s) mlx5_0"),
            "{mode}: rdma dropped without a word: {}",
            out.stderr
        );
        assert_eq!(Limit::Pids.read(pid), Some(40), "{mode}");
        c.moat(&["delete", "--force", &c.id]).ok();
    }
}

/// An update that keeps every limit (a lower pids limit, a lower memory limit) is written
/// as asked under RESTRICTED, with no warning.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_tightening_update_is_written_as_asked_under_restricted() {
    if !require_root() {
        return;
    }
    let (ctx, c, pid) = sleeper("restricted", "updtight");
    let out = ctx
        .moat(&["update", "--pids-limit", "20", "--memory", "128m", &c.id])
        .ok();
    assert!(!out.stderr.contains("changed the update"), "{}", out.stderr);
    assert_eq!(Limit::Pids.read(pid), Some(20));
    assert_eq!(Limit::Memory.read(pid), Some(128 << 20));
    // And back up to the floor, or above it: create admits any limit the engine sets.
    ctx.moat(&["update", "--pids-limit", "200", &c.id]).ok();
    assert_eq!(Limit::Pids.read(pid), Some(200));
    c.moat(&["delete", "--force", &c.id]).ok();
}

/// The same rule at create: a spec whose limits are unlimited (-1) gets the floor's, as a
/// spec without limits does, so that what update is held to is what create gives.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_gives_the_floor_for_an_unlimited_value_too() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("updcreate");
    let cfg = config(&ctx, "restricted");
    ctx.use_config(cfg);
    ctx.set(
        "/linux/resources",
        json!({"memory": {"limit": -1}, "pids": {"limit": -1}, "cpu": {"quota": -1}}),
    );
    ctx.args(&["sleep", "1000"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    for limit in [Limit::Memory, Limit::Pids, Limit::Cpu] {
        assert_eq!(limit.read(pid), Some(limit.floor()), "{limit:?}");
    }
    c.moat(&["delete", "--force", &c.id]).ok();
}

/// Removes the fleet cgroup directories a test made (after its containers are deleted).
struct FleetDirs(Vec<PathBuf>);

impl Drop for FleetDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The fleet budget is the container's parent cgroup: an update writes the container's
/// own files only, so the fleet's limit holds whatever the update asks (a higher limit
/// than the floor's, which create admits too, or a unified key that names the parent).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn the_fleet_budget_holds_whatever_an_update_asks() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("updfleet");
    let fleet = format!("{}-fleet", ctx.id("f"));
    let cfg = ctx.dir.join("moat.toml");
    std::fs::write(
        &cfg,
        format!("[restricted]\npids = {PIDS}\n[fleet]\ncgroup = \"/{fleet}\"\npids = 50\n"),
    )
    .unwrap();
    ctx.use_config(&cfg).args(&["sleep", "1000"]);
    // Dropped after the container's guard, which deletes it: the fleet is empty by then.
    let mut cleanup = FleetDirs(Vec::new());
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    let dir = v1_cgroup_dir(pid, "pids").unwrap();
    let top = dir.parent().unwrap().to_path_buf();
    assert!(top.ends_with(&fleet), "{}", dir.display());
    cleanup.0 = proc_cgroups(pid)
        .into_iter()
        .filter(|(ctrls, _)| !ctrls.is_empty())
        .filter_map(|(ctrls, path)| {
            let name = ctrls.strip_prefix("name=").unwrap_or(&ctrls).to_string();
            let d = Path::new("/sys/fs/cgroup")
                .join(name)
                .join(path.trim_start_matches('/'));
            d.parent().map(Path::to_path_buf)
        })
        .collect();
    assert_eq!(read(top.join("pids.max")).trim(), "50");
    ctx.moat(&["update", "--pids-limit", "-1", &c.id]).ok();
    assert_eq!(Limit::Pids.read(pid), Some(PIDS));
    ctx.moat(&["update", "--pids-limit", "1000", &c.id]).ok();
    assert_eq!(Limit::Pids.read(pid), Some(1000));
    let res = ctx.dir.join("res.json");
    std::fs::write(&res, r#"{"unified":{"../pids.max":"max"}}"#).unwrap();
    ctx.moat(&["update", "-r", res.to_str().unwrap(), &c.id])
        .fails();
    assert_eq!(read(top.join("pids.max")).trim(), "50", "the fleet's limit");
    c.moat(&["delete", "--force", &c.id]).ok();
}

/// The same policy for a gVisor container, whose update moat writes into the sandbox's
/// host cgroup itself (runsc has none): a pids limit of -1 gets the floor's, and device
/// rules are refused.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_gvisor_update_is_held_to_the_same_floor() {
    if !require_root() {
        return;
    }
    let runsc = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("runsc").is_file()));
    if !runsc {
        missing("runsc not installed (a_gvisor_update_is_held_to_the_same_floor)");
        return;
    }
    let mut ctx = Ctx::new("updgv");
    let cfg = config(&ctx, "restricted");
    ctx.use_config(cfg);
    ctx.set("/annotations/moat.runtime", json!("gvisor"));
    ctx.args(&["sleep", "1000"]);
    let c = ctx.create_ok("c");
    c.start();
    let pid = c.pid();
    assert_eq!(Limit::Pids.read(pid), Some(PIDS), "at create");
    let out = ctx.moat(&["update", "--pids-limit", "-1", &c.id]).ok();
    assert_eq!(Limit::Pids.read(pid), Some(PIDS), "after update");
    assert!(
        out.stderr
            .contains("linux.resources.pids.limit: replaced -1"),
        "{}",
        out.stderr
    );
    let res = ctx.dir.join("res.json");
    std::fs::write(
        &res,
        r#"{"pids":{"limit":-1},"devices":[{"allow":true,"access":"rwm"}]}"#,
    )
    .unwrap();
    let out = ctx
        .moat(&["update", "-r", res.to_str().unwrap(), &c.id])
        .ok();
    assert!(
        out.stderr.contains("linux.resources.devices: ignored"),
        "{}",
        out.stderr
    );
    assert_eq!(Limit::Pids.read(pid), Some(PIDS), "-1 beside device rules");
    ctx.moat(&["update", "--pids-limit", "30", &c.id]).ok();
    assert_eq!(Limit::Pids.read(pid), Some(30), "a tightening");
    c.moat(&["delete", "--force", &c.id]).ok();
}
