//! Fields runtime-spec 1.3 added, on real containers and the real kernel:
//! `linux.memoryPolicy` (read back from `/proc/self/numa_maps`, which names the task's
//! policy), `process.execCPUAffinity` (from `Cpus_allowed_list`), `pids.limit: 0`, and
//! `memory.checkBeforeUpdate` (on this host's cgroup v1 memory controller).

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::*;

/// The policy `/proc/self/numa_maps` names for the first mapping of the process that
/// reads it (a task's own policy where the mapping has none).
const NUMA_POLICY: &str = "head -1 /proc/self/numa_maps | cut -d' ' -f2-";

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn every_memory_policy_mode_reaches_the_init() {
    if !require_root() {
        return;
    }
    // This host has node 0 (every NUMA kernel has): each mode with it, as the kernel
    // prints it back (mm/mempolicy.c mpol_to_str).
    let cases: [(Value, &str); 8] = [
        (json!({"mode": "MPOL_BIND", "nodes": "0"}), "bind:0 "),
        (
            json!({"mode": "MPOL_INTERLEAVE", "nodes": "0", "flags": ["MPOL_F_STATIC_NODES"]}),
            "interleave=static:0 ",
        ),
        (
            json!({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_RELATIVE_NODES"]}),
            "bind=relative:0 ",
        ),
        (json!({"mode": "MPOL_PREFERRED", "nodes": "0"}), "prefer:0 "),
        (
            json!({"mode": "MPOL_PREFERRED_MANY", "nodes": "0"}),
            "prefer (many):0 ",
        ),
        (
            json!({"mode": "MPOL_WEIGHTED_INTERLEAVE", "nodes": "0"}),
            "weighted interleave:0 ",
        ),
        (json!({"mode": "MPOL_LOCAL"}), "local "),
        (json!({"mode": "MPOL_DEFAULT"}), "default "),
    ];
    for (i, (policy, want)) in cases.into_iter().enumerate() {
        let mut ctx = Ctx::new(&format!("mpol{i}"));
        ctx.set("/linux/memoryPolicy", policy.clone())
            .sh(NUMA_POLICY);
        let (out, _) = run_to_end(&ctx, "c");
        assert!(out.starts_with(want), "{policy}: numa_maps says {out:?}");
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn the_memory_policy_reaches_exec_and_bad_ones_are_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("mpol-exec");
    ctx.restricted()
        .set(
            "/linux/memoryPolicy",
            json!({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_STATIC_NODES"]}),
        )
        .args(&["sleep", "60"]);
    let c = ctx.create_ok("c");
    c.start();
    let out = c.moat(&["exec", &c.id, "sh", "-c", NUMA_POLICY]).ok();
    assert!(out.stdout.starts_with("bind=static:0 "), "{out:#?}");
    drop(c);
    // Refused before anything is made, naming the field: a mode or flag no kernel has, a
    // node list that does not parse or does not fit the mode (checked by moat), and a
    // node this host lacks (refused by the kernel in the init).
    for (i, (policy, field)) in [
        (
            json!({"mode": "MPOL_NOPE"}),
            "linux.memoryPolicy.mode: invalid memory policy mode \"MPOL_NOPE\"",
        ),
        // No mode at all (and an empty policy): refused by moat's check in runc's words,
        // not by the JSON reader.
        (
            json!({"nodes": "0-7"}),
            "linux.memoryPolicy.mode: invalid memory policy mode \"\"",
        ),
        (
            json!({}),
            "linux.memoryPolicy.mode: invalid memory policy mode \"\"",
        ),
        (
            json!({"mode": "MPOL_BIND", "nodes": "0", "flags": ["MPOL_F_NOPE"]}),
            "linux.memoryPolicy.flags[0]: invalid memory policy flag \"MPOL_F_NOPE\"",
        ),
        (
            json!({"mode": "MPOL_BIND"}),
            "linux.memoryPolicy.nodes: MPOL_BIND: memory policy mode requires at least one node",
        ),
        (
            json!({"mode": "MPOL_LOCAL", "nodes": "0"}),
            "linux.memoryPolicy.nodes: MPOL_LOCAL: memory policy mode requires 0 nodes but got 1",
        ),
        (
            json!({"mode": "MPOL_BIND", "nodes": "0-x"}),
            "linux.memoryPolicy.nodes: invalid memory policy nodes \"0-x\": ",
        ),
        (
            json!({"mode": "MPOL_BIND", "nodes": "63"}),
            "linux.memoryPolicy: set_mempolicy",
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut ctx = Ctx::new(&format!("mpol-bad{i}"));
        ctx.set("/linux/memoryPolicy", policy.clone()).sh("true");
        let id = ctx.id("c");
        let b = ctx.bundle_str();
        let out = ctx.moat(&["run", "--bundle", &b, &id]).fails();
        assert!(out.stderr.contains(field), "{policy}: {}", out.stderr);
        ctx.assert_no_trace(&id);
    }
}

fn cpus_allowed(status: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status:?}"))
        .trim()
        .to_string()
}

/// `process.execCPUAffinity`: not the init's (the spec says so), every exec's: the
/// container's, or a process file's own. Needs two CPUs (CI and this host have them).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn exec_cpu_affinity_places_execs_and_not_the_init() {
    if !require_root() {
        return;
    }
    let own = cpus_allowed(&read("/proc/self/status"));
    assert_eq!(own, "0-1", "this test needs CPUs 0 and 1 and no pinning");
    let mut ctx = Ctx::new("affinity");
    ctx.set(
        "/process/execCPUAffinity",
        json!({"initial": "0", "final": "1"}),
    )
    .args(&["sleep", "60"]);
    let c = ctx.create_ok("c");
    c.start();
    let init = cpus_allowed(&read(format!("/proc/{}/status", c.pid())));
    assert_eq!(init, own, "the init keeps moat's affinity");
    let status = "cat /proc/self/status";
    let out = c.moat(&["exec", &c.id, "sh", "-c", status]).ok();
    assert_eq!(cpus_allowed(&out.stdout), "1", "the container's final");
    // A process file's own affinity wins; one without keeps the container's (runc).
    for (aff, want) in [(Some(json!({"final": "0"})), "0"), (None, "1")] {
        let mut p = json!({"args": ["sh", "-c", status], "cwd": "/", "user": {"uid": 0, "gid": 0}});
        if let Some(a) = aff {
            p["execCPUAffinity"] = a;
        }
        let file = ctx.dir.join("process.json");
        std::fs::write(&file, p.to_string()).unwrap();
        let out = c
            .moat(&["exec", "--process", file.to_str().unwrap(), &c.id])
            .ok();
        assert_eq!(cpus_allowed(&out.stdout), want, "{p}");
    }
    // Each mask is applied: a CPU this host lacks fails the exec at that step, naming it.
    for (aff, field) in [
        (json!({"initial": "63"}), "process.execCPUAffinity.initial"),
        (json!({"final": "63"}), "process.execCPUAffinity.final"),
    ] {
        let p = json!({"args": ["true"], "cwd": "/", "execCPUAffinity": aff});
        let file = ctx.dir.join("process.json");
        std::fs::write(&file, p.to_string()).unwrap();
        let out = c
            .moat(&["exec", "--process", file.to_str().unwrap(), &c.id])
            .fails();
        assert!(out.stderr.contains(field), "{aff}: {}", out.stderr);
    }
    drop(c);
    // A list that does not parse is refused at create, naming it, leaving nothing.
    let mut bad = Ctx::new("affinity-bad");
    bad.set("/process/execCPUAffinity", json!({"final": "1-0"}))
        .sh("true");
    let id = bad.id("c");
    let b = bad.bundle_str();
    let out = bad.moat(&["run", "--bundle", &b, &id]).fails();
    assert!(
        out.stderr
            .contains("process.execCPUAffinity.final: range \"1-0\""),
        "{}",
        out.stderr
    );
    bad.assert_no_trace(&id);
}

/// runtime-spec 1.3: `pids.limit` 0 is a limit (written as 1, as runc 1.4 does: no fork),
/// -1 none; at create and at update, under OPEN and RESTRICTED (whose floor replaces only
/// a limit below 0).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_pids_limit_of_zero_forbids_forks() {
    if !require_root() {
        return;
    }
    // Builtins only; the subshell is not the last command, so sh must fork for it,
    // which pids.max 1 refuses (busybox sh then gives up).
    let script = "read m < /sys/fs/cgroup/pids/pids.max; echo max=$m; (echo forked); echo";
    for restricted in [false, true] {
        let mut ctx = Ctx::new(&format!("pids0-{restricted}"));
        if restricted {
            ctx.restricted();
        }
        ctx.set("/linux/resources/pids", json!({"limit": 0}))
            .sh(script);
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "max=1\n", "restricted={restricted}: {err}");
        assert!(err.contains("fork"), "restricted={restricted}: {err}");
    }
    let mut ctx = Ctx::new("pids-1");
    ctx.set("/linux/resources/pids", json!({"limit": -1}))
        .sh("read m < /sys/fs/cgroup/pids/pids.max; echo max=$m");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out.trim(), "max=max");
    // update: 0 is a limit too (runc 1.5's --pids-limit 0), and a pids object without a
    // limit changes nothing.
    let mut ctx = Ctx::new("pids0-upd");
    ctx.set("/linux/resources/pids", json!({"limit": 100}))
        .args(&["sleep", "60"]);
    let c = ctx.create_ok("c");
    c.start();
    let dir = v1_cgroup_dir(c.pid(), "pids").expect("pids cgroup");
    c.moat(&["update", "--pids-limit", "0", &c.id]).ok();
    assert_eq!(read(dir.join("pids.max")).trim(), "1");
    let doc = ctx.dir.join("res.json");
    std::fs::write(&doc, r#"{"pids": {}}"#).unwrap();
    c.moat(&["update", "--resources", doc.to_str().unwrap(), &c.id])
        .ok();
    assert_eq!(read(dir.join("pids.max")).trim(), "1");
}

/// `memory.checkBeforeUpdate`: an update to a memory limit at or below the container's
/// usage is refused, naming it, and the limit stays. The usage is clean page cache (a
/// file written to a disk-backed bind and synced), which the v1 kernel would reclaim to
/// take the lower limit: without the check the same update goes through (the control).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn check_before_update_refuses_a_limit_below_usage() {
    if !require_root() {
        return;
    }
    let disk = std::env::temp_dir().join(format!("moat-cbu-{}", std::process::id()));
    std::fs::create_dir_all(&disk).unwrap();
    struct Gone(std::path::PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(disk.clone());
    let mut ctx = Ctx::new("cbu");
    ctx.set("/linux/resources/memory", json!({"limit": 256 << 20}))
        .push(
            "/mounts",
            json!({"destination": "/disk", "type": "bind", "source": disk.to_str().unwrap(),
                   "options": ["rbind", "rw"]}),
        )
        .sh("dd if=/dev/zero of=/disk/f bs=1M count=32 2>/dev/null && sync && echo written && sleep 60");
    let c = ctx.create_ok("c");
    c.start();
    assert!(
        wait_until(Duration::from_secs(20), || c.stdout().contains("written")),
        "the container did not write its file: {}",
        c.stderr()
    );
    let dir = v1_cgroup_dir(c.pid(), "memory").expect("memory cgroup");
    let usage: u64 = read(dir.join("memory.usage_in_bytes"))
        .trim()
        .parse()
        .unwrap();
    assert!(usage > 16 << 20, "usage {usage}");
    let update = |body: Value| {
        let doc = ctx.dir.join("res.json");
        std::fs::write(&doc, json!({"memory": body}).to_string()).unwrap();
        c.moat(&["update", "--resources", doc.to_str().unwrap(), &c.id])
    };
    let out = update(json!({"limit": 16 << 20, "checkBeforeUpdate": true})).fails();
    assert!(
        out.stderr
            .contains("linux.resources.memory.limit: memory limit 16777216 is not above"),
        "{}",
        out.stderr
    );
    assert_eq!(
        read(dir.join("memory.limit_in_bytes")).trim(),
        (256u64 << 20).to_string()
    );
    // Above the usage: taken.
    update(json!({"limit": 200 << 20, "checkBeforeUpdate": true})).ok();
    assert_eq!(
        read(dir.join("memory.limit_in_bytes")).trim(),
        (200u64 << 20).to_string()
    );
    // The control: without the check the kernel reclaims the cache and takes it.
    update(json!({"limit": 16 << 20})).ok();
    assert_eq!(
        read(dir.join("memory.limit_in_bytes")).trim(),
        (16u64 << 20).to_string()
    );
}

/// The pid a pidfd names (`Pid:` in its fdinfo), and that it is one.
fn pidfd_pid(fd: &std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
    assert_eq!(link.to_str(), Some("anon_inode:[pidfd]"), "not a pidfd");
    read(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))
        .expect("Pid: in a pidfd's fdinfo")
        .trim()
        .parse()
        .unwrap()
}

/// `--pidfd-socket` (runc 1.5): create, run and exec each send a pidfd of the process they
/// made; a socket nobody listens on fails the call naming it, leaving nothing.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn pidfd_socket_receives_the_container_process() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("pidfd");
    ctx.args(&["sleep", "60"]);
    let (sock, listener) = console_socket(&ctx.dir);
    let sock = sock.to_str().unwrap().to_string();
    let b = ctx.bundle_str();
    let id = ctx.id("c");
    let c = ctx.guard(&id);
    ctx.moat(&["create", "--pidfd-socket", &sock, "--bundle", &b, &id])
        .ok();
    let fds = receive_fds(&listener, Duration::from_secs(5)).expect("create sent no fd");
    assert_eq!(fds.len(), 1);
    assert_eq!(pidfd_pid(&fds[0]), c.pid(), "create: the init's pidfd");
    c.start();
    ctx.moat(&["exec", "-d", "--pidfd-socket", &sock, &id, "sleep", "61"])
        .ok();
    let fds = receive_fds(&listener, Duration::from_secs(5)).expect("exec sent no fd");
    let pid = pidfd_pid(&fds[0]);
    assert_eq!(read(format!("/proc/{pid}/cmdline")), "sleep\x0061\x00");
    drop(c);
    let id = ctx.id("r");
    let r = ctx.guard(&id);
    ctx.moat(&["run", "-d", "--pidfd-socket", &sock, "--bundle", &b, &id])
        .ok();
    let fds = receive_fds(&listener, Duration::from_secs(5)).expect("run sent no fd");
    assert_eq!(pidfd_pid(&fds[0]), r.pid(), "run: the init's pidfd");
    drop(r);
    // Nobody listening: refused, naming the flag, nothing left.
    let gone = ctx.dir.join("nobody.sock");
    let id = ctx.id("n");
    let out = ctx
        .moat(&[
            "create",
            "--pidfd-socket",
            gone.to_str().unwrap(),
            "--bundle",
            &b,
            &id,
        ])
        .fails();
    assert!(out.stderr.contains("--pidfd-socket"), "{}", out.stderr);
    ctx.assert_no_trace(&id);
}

/// `linux.mountLabel`: on a host without SELinux ignored as runc ignores it, with a warning
/// in the `--log` file and none on stderr; on an SELinux host applied as `context=` (the VM
/// suite `scripts/vm-selinux` proves it on every mount runc labels).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_mount_label_is_ignored_with_a_log_warning_without_selinux() {
    if !require_root() {
        return;
    }
    let selinux = std::path::Path::new("/sys/fs/selinux/enforce").exists();
    let mut ctx = Ctx::new("mountlabel");
    ctx.set(
        "/linux/mountLabel",
        json!("system_u:object_r:container_file_t:s0:c1,c2"),
    )
    .sh("echo ran; grep -c 'context=' /proc/self/mountinfo || true");
    let log = ctx.dir.join("moat.log");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let out = ctx.moat(&["--log", log.to_str().unwrap(), "run", "--bundle", &b, &id]);
    let out = out.ok();
    if selinux {
        assert!(
            !out.stdout.ends_with("\n0\n"),
            "no mount labelled: {}",
            out.stdout
        );
        return;
    }
    assert_eq!(out.stdout, "ran\n0\n");
    assert!(!out.stderr.contains("mountLabel"), "{}", out.stderr);
    assert!(
        read(&log).contains("linux.mountLabel ignored: the host has no SELinux"),
        "{}",
        read(&log)
    );
}

/// runc's pidfd-socket.bats "runc create [ --pidfd-socket ]": SIGTERM sent through the
/// pidfd create handed over ends the created (never started) container; `state` says
/// stopped within the test's 10 s, and so does `moat kill` with SIGTERM. Before, the
/// created init (its pid namespace's init, which the kernel shields from a signal left at
/// its default action) ignored SIGTERM.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn sigterm_through_the_pidfd_of_a_created_container_stops_it() {
    if !require_root() {
        return;
    }
    use std::os::fd::AsRawFd;
    let mut ctx = Ctx::new("pidfdterm");
    ctx.args(&["/bin/sleep", "1d"]);
    let (sock, listener) = console_socket(&ctx.dir);
    let sock = sock.to_str().unwrap().to_string();
    let b = ctx.bundle_str();
    let id = ctx.id("c");
    let c = ctx.guard(&id);
    ctx.moat(&["create", "--pidfd-socket", &sock, "--bundle", &b, &id])
        .ok();
    let fds = receive_fds(&listener, Duration::from_secs(5)).expect("create sent no fd");
    assert_eq!(c.status(), "created");
    // SAFETY: pidfd_send_signal on a pidfd this test holds; no siginfo.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fds[0].as_raw_fd(),
            libc::SIGTERM,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    assert_eq!(rc, 0, "pidfd_send_signal");
    assert!(
        wait_until(Duration::from_secs(10), || {
            reap();
            c.status() == "stopped"
        }),
        "still {} 10 s after SIGTERM",
        c.status()
    );
    // The same signal through `moat kill`.
    let k = ctx.create_ok("k");
    k.kill("TERM").ok();
    assert!(
        wait_until(Duration::from_secs(10), || {
            reap();
            k.status() == "stopped"
        }),
        "kill TERM: still {}",
        k.status()
    );
}
