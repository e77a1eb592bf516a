//! Rootless moat: an ordinary user, created by the test with /etc/subuid and /etc/subgid
//! ranges (and removed again), runs moat without real root. Run as root (to create the
//! user); every moat call goes through `runuser -u <user>` with no `XDG_RUNTIME_DIR`, as
//! on this host without logind, so the state lives in `/tmp/moat-<uid>`.

mod support;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use support::*;

/// useradd/userdel lock /etc/passwd; tests in this file run in parallel threads.
static USERDB: Mutex<()> = Mutex::new(());

struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
    /// First subordinate uid (and gid: useradd hands out the same ranges here).
    sub: u32,
}

fn userdb(args: &[&str]) -> std::process::Output {
    let _g = USERDB.lock().unwrap_or_else(|e| e.into_inner());
    let mut last = None;
    for _ in 0..20 {
        let out = Command::new(args[0])
            .args(&args[1..])
            .run_output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        // Another process (a concurrent test binary, apt) may hold the lock briefly.
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("lock") {
            return out;
        }
        last = Some(out);
        std::thread::sleep(Duration::from_millis(200));
    }
    last.expect("tried")
}

fn sub_start(file: &str, name: &str) -> Option<u32> {
    fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.first() == Some(&name)).then(|| f[1].parse().ok())?
    })
}

impl TestUser {
    /// A new user with subordinate ids (`with_subids`) or none at all.
    fn new(tag: &str, with_subids: bool) -> TestUser {
        let name = format!("mrl{}{tag}", std::process::id());
        let out = userdb(&["useradd", "-M", "-s", "/bin/sh", &name]);
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = |flag: &str| -> u32 {
            let o = Command::new("id").args([flag, &name]).run_output().unwrap();
            String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        let mut user = TestUser {
            name,
            uid,
            gid,
            sub: 0,
        };
        if with_subids {
            // useradd may give one range and not the other (it allocates each on its own):
            // the missing one starts where the other does, or both at a range of our own.
            let (u, g) = (
                sub_start("/etc/subuid", &user.name),
                sub_start("/etc/subgid", &user.name),
            );
            if u.is_none() || g.is_none() {
                let start = u.or(g).unwrap_or(300000 + uid * 65536);
                let r = format!("{start}-{}", start + 65535);
                let mut args = vec!["usermod"];
                if u.is_none() {
                    args.extend(["--add-subuids", r.as_str()]);
                }
                if g.is_none() {
                    args.extend(["--add-subgids", r.as_str()]);
                }
                args.push(&user.name);
                userdb(&args);
            }
            user.sub = sub_start("/etc/subuid", &user.name).expect("subuid range");
            assert_eq!(
                sub_start("/etc/subgid", &user.name),
                Some(user.sub),
                "subgid range differs from the subuid range"
            );
        } else {
            user.drop_subids();
        }
        user
    }

    fn drop_subids(&self) {
        let _g = USERDB.lock().unwrap_or_else(|e| e.into_inner());
        for f in ["/etc/subuid", "/etc/subgid"] {
            if let Ok(t) = fs::read_to_string(f) {
                let keep: String = t
                    .lines()
                    .filter(|l| !l.starts_with(&format!("{}:", self.name)))
                    .map(|l| format!("{l}\n"))
                    .collect();
                fs::write(f, keep).expect("rewrite subid file");
            }
        }
    }

    fn state_root(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/moat-{}", self.uid))
    }

    /// Pids (host view) of every process of this user.
    fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for e in fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let zombie = proc_state(pid).is_some_and(|(st, _)| st == 'Z');
            if host_uid(pid) == Some(self.uid) && !zombie {
                out.push(pid);
            }
        }
        out
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        for pid in self.pids() {
            kill_and_wait(pid, Duration::from_secs(5));
        }
        let _ = fs::remove_dir_all(self.state_root());
        self.drop_subids();
        userdb(&["userdel", &self.name]);
    }
}

/// The real uid of `pid` as the host sees it (`/proc/<pid>/status`).
fn host_uid(pid: i32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A bundle owned by the user, its config from `moat spec --rootless` run as that user.
struct Bundle {
    dir: PathBuf,
    io: PathBuf,
    config: Value,
    /// The moat binary as the user runs it: `MOAT`, or a copy when the user cannot reach
    /// the target directory (a checkout in a private home).
    moat: PathBuf,
    bin_copy: Option<PathBuf>,
}

/// Whether an ordinary user may execute `p`: every directory above it searchable by
/// others, the file executable by others (everything here is root's).
fn reachable_by_others(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |q: &Path| fs::metadata(q).map(|m| m.permissions().mode()).unwrap_or(0);
    mode(p) & 0o005 == 0o005 && p.ancestors().skip(1).all(|a| mode(a) & 0o001 != 0)
}

impl Bundle {
    fn new(user: &TestUser, tag: &str) -> Bundle {
        become_subreaper();
        let dir = tmp_base().join(format!("moat-rl-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let io = dir.join("io");
        fs::create_dir_all(dir.join("bundle")).unwrap();
        fs::create_dir_all(&io).unwrap();
        copy_tree(shared_rootfs(), &dir.join("bundle/rootfs"));
        host(&[
            "chown",
            "-R",
            &format!("{}:{}", user.uid, user.gid),
            dir.to_str().unwrap(),
        ]);
        let (moat, bin_copy) = if reachable_by_others(Path::new(MOAT)) {
            (PathBuf::from(MOAT), None)
        } else {
            let d = std::env::temp_dir().join(format!("moat-rl-bin-{}-{tag}", std::process::id()));
            fs::create_dir_all(&d).unwrap();
            let bin = d.join("moat");
            fs::copy(MOAT, &bin).unwrap();
            host(&["chmod", "0755", d.to_str().unwrap(), bin.to_str().unwrap()]);
            (bin, Some(d))
        };
        // The OPEN test policy (runc semantics), where the user can read it.
        fs::write(io.join("open.toml"), "default_policy = \"open\"\n").unwrap();
        let mut b = Bundle {
            dir,
            io,
            config: Value::Null,
            moat,
            bin_copy,
        };
        b.as_user(user, &["spec", "--rootless"]).ok();
        let text = fs::read_to_string(b.bundle().join("config.json")).unwrap();
        b.config = serde_json::from_str(&text).unwrap();
        set_at(&mut b.config, "/process/terminal", json!(false));
        b
    }

    fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }

    fn write(&self) {
        let p = self.bundle().join("config.json");
        fs::write(&p, serde_json::to_vec_pretty(&self.config).unwrap()).unwrap();
    }

    fn args(&mut self, script: &str) -> &mut Self {
        set_at(
            &mut self.config,
            "/process/args",
            json!(["sh", "-c", script]),
        );
        self
    }

    /// `moat ARGS` as the user, in the bundle, without XDG_RUNTIME_DIR.
    fn as_user(&self, user: &TestUser, args: &[&str]) -> Out {
        self.as_user_env(user, &[], args)
    }

    fn as_user_env(&self, user: &TestUser, env: &[(&str, &str)], args: &[&str]) -> Out {
        if !self.config.is_null() {
            self.write();
        }
        let mut c = Command::new("runuser");
        c.args(["-u", &user.name, "--", "env", "-u", "XDG_RUNTIME_DIR"]);
        c.arg(format!(
            "MOAT_CONFIG={}",
            self.io.join("open.toml").display()
        ));
        for (k, v) in env {
            c.arg(format!("{k}={v}"));
        }
        c.arg(&self.moat).args(args).current_dir(self.bundle());
        run_cmd(c, &self.io, CALL_TIMEOUT)
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        if let Some(d) = &self.bin_copy {
            let _ = fs::remove_dir_all(d);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn require_root_and_uidmap() -> bool {
    if !require_root() {
        return false;
    }
    if !Path::new("/usr/bin/newuidmap").exists() {
        panic!("newuidmap missing: install the Debian package uidmap (scripts/test does)");
    }
    true
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_run_create_exec_state_delete() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("a", true);
    let mut b = Bundle::new(&user, "a");

    // Foreground run: root inside, the user's own id outside (a single self-mapping).
    b.args("id -u; cat /proc/self/uid_map");
    let out = b.as_user(&user, &["run", "r1"]).ok();
    let lines: Vec<String> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        lines,
        ["0".to_string(), format!("0 {} 1", user.uid)],
        "{out:?}"
    );
    assert!(
        out.stderr
            .lines()
            .all(|l| l.contains("rootless: no cgroup")),
        "nothing but the one cgroup warning: {}",
        out.stderr
    );

    // Detached: create, start, the init seen from the host belongs to the user.
    b.args("sleep 600");
    b.as_user(&user, &["create", "c1"]).ok();
    let state_dir = user.state_root().join("c1");
    assert!(state_dir.is_dir(), "state under /tmp/moat-<uid>");
    let m = fs::symlink_metadata(user.state_root()).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o777), (user.uid, 0o700));
    b.as_user(&user, &["start", "c1"]).ok();
    let st: Value = serde_json::from_str(&b.as_user(&user, &["state", "c1"]).ok().stdout).unwrap();
    assert_eq!(st["status"], "running");
    let pid = i32::try_from(st["pid"].as_i64().unwrap()).unwrap();
    assert_eq!(host_uid(pid), Some(user.uid), "init {pid} on the host");

    let out = b
        .as_user(
            &user,
            &["exec", "c1", "sh", "-c", "id -u; cat /proc/1/cmdline"],
        )
        .ok();
    assert_eq!(out.stdout, "0\nsleep\x00600\x00", "{out:?}");
    let out = b.as_user(&user, &["exec", "c1", "sh", "-c", "exit 5"]);
    assert_eq!(out.code, 5, "{out:?}");
    let list = b.as_user(&user, &["list", "-q"]).ok();
    assert_eq!(list.stdout.trim(), "c1");

    b.as_user(&user, &["kill", "c1", "KILL"]).ok();
    assert!(wait_exit(pid, Duration::from_secs(10)), "init {pid} killed");
    let out = b.as_user(&user, &["delete", "c1"]).ok();
    assert_eq!(out.stderr, "", "delete says nothing");
    assert!(
        !state_dir.exists(),
        "delete removed {}",
        state_dir.display()
    );
    assert!(user.pids().is_empty(), "nothing of the user left running");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_multi_range_map_through_newuidmap() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("b", true);
    let mut b = Bundle::new(&user, "b");
    for (field, own) in [
        ("/linux/uidMappings", user.uid),
        ("/linux/gidMappings", user.gid),
    ] {
        set_at(
            &mut b.config,
            field,
            json!([{"containerID": 0, "hostID": own, "size": 1},
                   {"containerID": 1, "hostID": user.sub, "size": 65536}]),
        );
    }
    set_at(&mut b.config, "/root/readonly", json!(false));
    let caps = json!([
        "CAP_CHOWN",
        "CAP_SETUID",
        "CAP_SETGID",
        "CAP_DAC_OVERRIDE",
        "CAP_KILL"
    ]);
    for set in ["bounding", "effective", "permitted"] {
        set_at(
            &mut b.config,
            &format!("/process/capabilities/{set}"),
            caps.clone(),
        );
    }
    set_at(&mut b.config, "/process/capabilities/ambient", json!([]));
    b.args("touch /tmp/f && chown 1000:1000 /tmp/f && su -s /bin/sh u1000 -c 'id -u; touch /tmp/g'; wc -l < /proc/self/uid_map");
    let out = b.as_user(&user, &["run", "m1"]).ok();
    assert_eq!(out.stdout, "1000\n2\n", "{out:?}");
    let rootfs = b.bundle().join("rootfs/tmp");
    for f in ["f", "g"] {
        let m = fs::metadata(rootfs.join(f)).unwrap();
        assert_eq!(
            (m.uid(), m.gid()),
            (user.sub + 999, user.sub + 999),
            "container 1000 is subordinate id {} on the host",
            user.sub + 999
        );
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_bad_maps_fail_clearly_and_leave_nothing() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("c", true);
    let mut b = Bundle::new(&user, "c");
    b.args("true");
    let cases = [
        (
            json!([{"containerID": 0, "hostID": user.uid, "size": 1},
                   {"containerID": 1, "hostID": user.sub, "size": 70000}]),
            "linux.uidMappings[1]: host ids",
            "grants",
        ),
        (
            json!([{"containerID": 0, "hostID": user.sub, "size": 10},
                   {"containerID": 5, "hostID": user.sub + 100, "size": 10}]),
            "linux.uidMappings[1]: container ids 5-14 overlap linux.uidMappings[0]",
            "",
        ),
        (
            json!([{"containerID": 0, "hostID": user.sub, "size": 10},
                   {"containerID": 10, "hostID": user.sub + 5, "size": 10}]),
            "linux.uidMappings[1]: host ids",
            "overlap linux.uidMappings[0]",
        ),
    ];
    for (i, (map, want, also)) in cases.iter().enumerate() {
        set_at(&mut b.config, "/linux/uidMappings", map.clone());
        let id = format!("bad{i}");
        let out = b.as_user(&user, &["run", &id]).fails();
        let last = out.stderr.lines().last().unwrap_or_default().to_string();
        assert!(
            last.contains(want) && last.contains(also),
            "case {i}: {last}"
        );
        assert!(
            !user.state_root().join(&id).exists(),
            "case {i}: state left"
        );
        assert!(user.pids().is_empty(), "case {i}: process left");
    }

    // No user namespace at all: refused before anything exists.
    let mut nouserns = b.config.clone();
    nouserns["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "user");
    nouserns["linux"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k != "uidMappings" && k != "gidMappings");
    b.config = nouserns;
    let out = b.as_user(&user, &["run", "nous"]).fails();
    assert!(
        out.stderr
            .contains("linux.namespaces: a rootless container needs a user namespace"),
        "{}",
        out.stderr
    );
    assert!(!user.state_root().join("nous").exists());

    // A user without any subordinate ids: only the self-mapping works.
    let lone = TestUser::new("d", false);
    let mut b2 = Bundle::new(&lone, "d");
    b2.args("id -u");
    assert_eq!(b2.as_user(&lone, &["run", "ok"]).ok().stdout, "0\n");
    set_at(
        &mut b2.config,
        "/linux/gidMappings",
        json!([{"containerID": 0, "hostID": lone.gid, "size": 1},
               {"containerID": 1, "hostID": 500000, "size": 10}]),
    );
    let out = b2.as_user(&lone, &["run", "nosub"]).fails();
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("linux.gidMappings[1]")
            && last.contains(&format!("/etc/subgid grants {} no range", lone.name)),
        "{last}"
    );
    assert!(!lone.state_root().join("nosub").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_state_root_refuses_a_foreign_dir_and_uses_xdg_runtime_dir() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("e", true);
    let mut b = Bundle::new(&user, "e");
    b.args("true");
    // Someone else got /tmp/moat-<uid> first.
    fs::create_dir(user.state_root()).unwrap();
    let out = b.as_user(&user, &["run", "x1"]).fails();
    assert!(
        out.stderr.contains(&format!(
            "state root {}: is owned by uid 0, not by uid {}",
            user.state_root().display(),
            user.uid
        )),
        "{}",
        out.stderr
    );
    fs::remove_dir(user.state_root()).unwrap();
    std::os::unix::fs::symlink("/tmp", user.state_root()).unwrap();
    let out = b.as_user(&user, &["run", "x2"]).fails();
    assert!(out.stderr.contains("is a symlink"), "{}", out.stderr);
    fs::remove_file(user.state_root()).unwrap();

    // With a runtime dir the state goes there.
    let xdg = b.dir.join("xdg");
    fs::create_dir(&xdg).unwrap();
    host(&["chown", &user.uid.to_string(), xdg.to_str().unwrap()]);
    b.args("sleep 600");
    let env = [("XDG_RUNTIME_DIR", xdg.to_str().unwrap())];
    b.as_user_env(&user, &env, &["create", "x3"]).ok();
    assert!(xdg.join("moat/x3/state.json").exists());
    b.as_user_env(&user, &env, &["delete", "-f", "x3"]).ok();
    assert!(!xdg.join("moat/x3").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_sysfs_and_devpts_fallbacks() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("f", true);
    let mut b = Bundle::new(&user, "f");
    // What a rootful spec asks for: a fresh sysfs (no network namespace of its own: the
    // kernel refuses it) and devpts gid=5 (not mapped by a self-mapping).
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .retain(|n| n["type"] != "network");
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    for m in mounts.iter_mut() {
        match m["destination"].as_str() {
            Some("/sys") => {
                *m = json!({"destination": "/sys", "type": "sysfs", "source": "sysfs",
                            "options": ["nosuid", "noexec", "nodev", "ro"]})
            }
            Some("/dev/pts") => m["options"].as_array_mut().unwrap().push(json!("gid=5")),
            _ => {}
        }
    }
    b.args("ls /sys/kernel >/dev/null && echo sys; touch /sys/x 2>/dev/null || echo ro; ls /dev/null /dev/zero");
    let out = b.as_user(&user, &["run", "s1"]).ok();
    assert_eq!(out.stdout, "sys\nro\n/dev/null\n/dev/zero\n", "{out:?}");
    // Devices are the host's nodes, bound: writing /dev/null works inside.
    b.args("echo x > /dev/null && head -c 4 /dev/zero | wc -c");
    assert_eq!(b.as_user(&user, &["run", "s2"]).ok().stdout.trim(), "4");
}

/// moat's own recipe runs on moat: `moat spec --rootless` gives a spec the default policy
/// (RESTRICTED) runs rootless, with a network namespace of its own (`lo` up) and a fresh
/// read-only sysfs, where runc's rootless spec shares the host's network namespace and
/// binds the host's /sys (both refused by RESTRICTED).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rootless_spec_runs_under_the_default_policy() {
    if !require_root_and_uidmap() {
        return;
    }
    let user = TestUser::new("g", true);
    let mut b = Bundle::new(&user, "d");
    b.args(
        "readlink /proc/self/ns/net; cat /sys/class/net/lo/flags; \
         grep ' /sys sysfs ' /proc/self/mounts | cut -d' ' -f4 | cut -d, -f1",
    );
    let out = b
        .as_user_env(&user, &[("MOAT_CONFIG", "")], &["run", "d1"])
        .ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert_ne!(lines[0], host_ns("net"), "the host's network namespace");
    // IFF_UP | IFF_LOOPBACK (| IFF_RUNNING, which the kernel reports from 0x40).
    let flags = u32::from_str_radix(lines[1].trim_start_matches("0x"), 16).unwrap();
    assert_eq!(flags & 0x9, 0x9, "lo is not up: {}", lines[1]);
    assert_eq!(lines[2], "ro", "{out:?}");
}
