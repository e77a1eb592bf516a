//! Root tests against this host's real hierarchies. Every cgroup lives under
//! `/moat-test-<pid>-…` and is removed by a drop guard, also when an assertion fails.
//! Only children of the test are moved; the host's own cgroups are never written.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::*;
use crate::linux::sys::bpf;
use crate::spec::{DeviceCgroup, Resources};

fn root() -> bool {
    if crate::linux::sys::geteuid() == 0 {
        return true;
    }
    eprintln!("\n**********************************************\n*** SKIPPED: not root (cgroup root tests) ***\n**********************************************\n");
    false
}

/// Kills the children (by pid), removes the cgroups, restores files it was told about.
#[derive(Default)]
struct Guard {
    children: Vec<Child>,
    dirs: Vec<PathBuf>,
    restore: Vec<(PathBuf, String)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        for d in self.dirs.iter().rev() {
            if let Err(e) = remove_tree(d, deadline) {
                eprintln!("cleanup: {e}");
            }
        }
        for (file, value) in &self.restore {
            let _ = fs::write(file, value);
        }
    }
}

fn read(dir: &Path, f: &str) -> String {
    fs::read_to_string(dir.join(f))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(f).display()))
        .trim()
        .to_string()
}

fn v1_dir(cg: &Cgroup, controller: &str) -> PathBuf {
    let h = cg.hierarchies.iter().find(|h| !h.v2 && h.has(controller));
    h.unwrap_or_else(|| panic!("no {controller} hierarchy"))
        .dir(&cg.path)
}

#[test]
fn v1_hybrid_roundtrip() {
    if !root() {
        return;
    }
    let layout = Layout::detect().unwrap();
    if layout.unified {
        eprintln!("SKIPPED: pure cgroup v2 host; the v1 round trip needs v1 hierarchies");
        return;
    }
    let top = format!("/moat-test-{}-v1", std::process::id());
    let mut guard = Guard::default();
    guard.dirs = layout.hierarchies.iter().map(|h| h.dir(&top)).collect();
    let unified = layout.hierarchies.iter().find(|h| h.v2).cloned();
    if let Some(u) = &unified {
        let sc = u.mount.join("cgroup.subtree_control");
        if !fs::read_to_string(&sc).unwrap().contains("hugetlb") {
            guard.restore.push((sc, "-hugetlb".into()));
        }
    }

    let cg = Cgroup::create(layout.clone(), format!("{top}/ct")).unwrap();
    assert!(cg.skipped.is_empty());
    assert_eq!(cg.hierarchies.len(), layout.hierarchies.len());
    for h in &cg.hierarchies {
        assert!(h.dir(&cg.path).is_dir(), "{}", h.dir(&cg.path).display());
    }
    // cpuset cpus/mems were copied down, or nothing could join.
    let cpuset = v1_dir(&cg, "cpuset");
    let cpuset_root = &cg
        .hierarchies
        .iter()
        .find(|h| h.has("cpuset"))
        .unwrap()
        .mount;
    assert_eq!(
        read(&cpuset, "cpuset.cpus"),
        read(cpuset_root, "cpuset.cpus")
    );
    assert_eq!(
        read(&cpuset, "cpuset.mems"),
        read(cpuset_root, "cpuset.mems")
    );

    let hugetlb = unified.as_ref().is_some_and(|u| u.has("hugetlb"));
    let mut res: Resources = serde_json::from_value(serde_json::json!({
        "memory": {"limit": 67108864, "swap": 134217728, "reservation": 33554432,
                   "swappiness": 10, "disableOOMKiller": true},
        "cpu": {"shares": 512, "quota": 50000, "period": 100000, "cpus": "0", "mems": "0"},
        "pids": {"limit": 32},
        "blockIO": {"throttleReadBpsDevice": [{"major": 7, "minor": 0, "rate": 1048576}],
                    "throttleWriteIOPSDevice": [{"major": 7, "minor": 0, "rate": 100}]},
        "devices": [{"allow": false, "access": "rwm"},
                    {"allow": true, "type": "c", "major": 10, "minor": 200, "access": "rw"}]
    }))
    .unwrap();
    if hugetlb {
        res.hugepage_limits = vec![spec::HugepageLimit {
            page_size: "2MB".into(),
            limit: 4 << 20,
        }];
    }
    cg.apply(&res).unwrap();

    let mem = v1_dir(&cg, "memory");
    assert_eq!(read(&mem, "memory.limit_in_bytes"), "67108864");
    if mem.join("memory.memsw.limit_in_bytes").exists() {
        assert_eq!(read(&mem, "memory.memsw.limit_in_bytes"), "134217728");
    }
    assert_eq!(read(&mem, "memory.soft_limit_in_bytes"), "33554432");
    assert_eq!(read(&mem, "memory.swappiness"), "10");
    assert!(read(&mem, "memory.oom_control").contains("oom_kill_disable 1"));
    let cpu = v1_dir(&cg, "cpu");
    assert_eq!(read(&cpu, "cpu.shares"), "512");
    assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
    assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "50000");
    assert_eq!(read(&cpuset, "cpuset.cpus"), "0");
    assert_eq!(read(&cpuset, "cpuset.mems"), "0");
    assert_eq!(read(&v1_dir(&cg, "pids"), "pids.max"), "32");
    let blkio = v1_dir(&cg, "blkio");
    assert_eq!(
        read(&blkio, "blkio.throttle.read_bps_device"),
        "7:0 1048576"
    );
    assert_eq!(read(&blkio, "blkio.throttle.write_iops_device"), "7:0 100");
    if hugetlb {
        let u = unified.as_ref().unwrap().dir(&cg.path);
        assert_eq!(read(&u, "hugetlb.2MB.max"), "4194304");
    } else {
        eprintln!("note: no hugetlb controller in the unified hierarchy, not tested");
    }
    let list = read(&v1_dir(&cg, "devices"), "devices.list");
    let list: Vec<&str> = list.lines().collect();
    for want in ["c 10:200 rw", "c 1:3 rwm", "c 136:* rwm"] {
        assert!(list.contains(&want), "{want} missing from {list:?}");
    }
    // The spec denies everything first, which also revokes mknod-anything.
    assert!(
        !list.contains(&"c *:* m") && !list.contains(&"b *:* m"),
        "{list:?}"
    );
    assert!(!list.contains(&"a *:* rwm"), "{list:?}");

    // A process of ours, in every hierarchy.
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = i32::try_from(child.id()).unwrap();
    guard.children.push(child);
    cg.add_pid(pid).unwrap();
    assert_eq!(cg.pids().unwrap(), vec![pid]);
    let membership = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for line in membership.lines() {
        assert!(line.ends_with(&cg.path), "{line} (want {})", cg.path);
    }

    cg.freeze().unwrap();
    assert!(cg.is_frozen());
    cg.thaw().unwrap();
    assert!(!cg.is_frozen());

    // A refused write names field, value and file, with the bare strerror text.
    let bad = Resources {
        cpu: Some(spec::Cpu {
            cpus: Some("4095".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let e = cg.apply(&bad).unwrap_err().to_string();
    let want = format!(
        "linux.resources.cpu.cpus: write 4095 to {}/cpuset.cpus: ",
        cpuset.display()
    );
    assert!(e.starts_with(&want) && !e.contains("os error"), "{e}");

    // Sub-cgroups the container made go with it.
    fs::create_dir(v1_dir(&cg, "pids").join("nested")).unwrap();
    for c in &mut guard.children {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    guard.children.clear();
    cg.remove().unwrap();
    for h in &cg.hierarchies {
        assert!(
            !h.dir(&cg.path).exists(),
            "{} left behind",
            h.dir(&cg.path).display()
        );
        assert!(
            h.dir(&top).is_dir(),
            "shared parent {} removed",
            h.dir(&top).display()
        );
    }
    cg.remove().unwrap(); // ENOENT is success
}

/// A v2 test cgroup directly below the unified mount (hybrid) or the v2 root.
fn v2_test_dir(tag: &str, guard: &mut Guard) -> Option<PathBuf> {
    let layout = Layout::detect().unwrap();
    let Some(h) = layout.hierarchies.iter().find(|h| h.v2) else {
        eprintln!("SKIPPED: no cgroup2 mount on this host");
        return None;
    };
    let dir = h
        .mount
        .join(format!("moat-test-{}-{tag}", std::process::id()));
    fs::create_dir(&dir).unwrap();
    guard.dirs.push(dir.clone());
    Some(dir)
}

/// Runs a shell script inside `dir`: it is started outside, moved in, then told to go
/// on through its stdin, so nothing runs before it is in the cgroup. A failing test
/// drops stdin, and the script then runs to its end by itself.
fn run_in(dir: &Path, script: &str) -> String {
    let mut child = Command::new("sh")
        .args(["-c", &format!("read go; {script}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    write_file(dir, "cgroup.procs", &child.id().to_string(), "test").unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap();
    out
}

// Subshells: a failed redirection of the special builtin `:` would end the script.
const PROBE: &str = "if (: </dev/null); then echo null-ok; fi; \
                     if (: </dev/kmsg) 2>/dev/null; then echo kmsg-ok; else echo kmsg-denied; fi";

#[test]
fn v2_device_program_loads_attaches_and_filters() {
    if !root() {
        return;
    }
    let mut guard = Guard::default();
    let Some(dir) = v2_test_dir("bpf", &mut guard) else {
        return;
    };
    // Control: without a program the probe device opens.
    assert_eq!(run_in(&dir, PROBE), "null-ok\nkmsg-ok\n");

    let deny_all = DeviceCgroup {
        allow: false,
        access: Some("rwm".into()),
        ..Default::default()
    };
    v2::apply_devices(&dir, std::slice::from_ref(&deny_all)).unwrap();
    assert_eq!(run_in(&dir, PROBE), "null-ok\nkmsg-denied\n");

    let kmsg = DeviceCgroup {
        allow: true,
        typ: Some("c".into()),
        major: Some(1),
        minor: Some(11),
        access: Some("r".into()),
    };
    v2::apply_devices(&dir, &[deny_all, kmsg]).unwrap();
    assert_eq!(run_in(&dir, PROBE), "null-ok\nkmsg-ok\n");

    // The first program was replaced, not stacked.
    let fd = fs::File::open(&dir).unwrap();
    let ids = bpf::prog_query(std::os::fd::AsFd::as_fd(&fd), bpf::BPF_CGROUP_DEVICE).unwrap();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let prog = bpf::prog_get_fd_by_id(ids[0]).unwrap();
    let info = bpf::prog_info(std::os::fd::AsFd::as_fd(&prog)).unwrap();
    assert_eq!(info.name, "moat_dev");
    assert_eq!(info.prog_type, bpf::BPF_PROG_TYPE_CGROUP_DEVICE);
}

#[test]
fn v2_core_freezer() {
    if !root() {
        return;
    }
    let mut guard = Guard::default();
    let Some(dir) = v2_test_dir("freeze", &mut guard) else {
        return;
    };
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = child.id();
    guard.children.push(child);
    write_file(&dir, "cgroup.procs", &pid.to_string(), "test").unwrap();
    v2::freeze(&dir).unwrap();
    assert!(read(&dir, "cgroup.events").contains("frozen 1"));
    write_file(&dir, "cgroup.freeze", "0", "thaw").unwrap();
    let mut pids = Vec::new();
    collect_pids(&dir, &mut pids).unwrap();
    assert_eq!(pids, vec![i32::try_from(pid).unwrap()]);
}

/// A child placed by `Placement` (clone into the v2 directory, `0` to each v1 `tasks`)
/// is in the container's cgroup in every hierarchy; a sub-cgroup works the same way.
#[test]
fn child_places_itself() {
    if !root() {
        return;
    }
    let layout = Layout::detect().unwrap();
    let top = format!("/moat-test-{}-place", std::process::id());
    let mut guard = Guard::default();
    guard.dirs = layout.hierarchies.iter().map(|h| h.dir(&top)).collect();
    let cg = Cgroup::create(layout, format!("{top}/ct")).unwrap();
    for h in &cg.hierarchies {
        guard.dirs.push(h.dir(&cg.path));
    }
    assert!(cg.placement(&["../escape".into()]).is_err());
    let e = cg.placement(&["missing".into()]).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
    for h in &cg.hierarchies {
        fs::create_dir(h.dir(&cg.path).join("sub")).unwrap();
        if !h.v2 && h.has("cpuset") {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = read(&h.dir(&cg.path), f);
                fs::write(h.dir(&cg.path).join("sub").join(f), v).unwrap();
            }
        }
    }
    for (sub, want) in [
        (Vec::new(), cg.path.clone()),
        (vec!["sub".to_string()], format!("{}/sub", cg.path)),
    ] {
        let placement = cg.placement(&sub).unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        let (placed_r, placed_w) = nix::unistd::pipe().unwrap();
        // The child only makes syscalls: no allocation after a raw clone in a threaded test.
        let pid = match crate::linux::sys::clone_fork(0, placement.clone_into()).unwrap() {
            crate::linux::sys::Forked::Child => {
                crate::linux::sys::close_raw(std::os::fd::AsFd::as_fd(&w));
                let ok = placement.enter().is_ok();
                let _ = nix::unistd::write(&placed_w, b"p");
                let _ = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&r), &mut [0u8]);
                crate::linux::sys::exit_now(if ok { 0 } else { 1 })
            }
            crate::linux::sys::Forked::Parent(pid) => pid,
        };
        drop(placement);
        drop(placed_w);
        let _ = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&placed_r), &mut [0u8]);
        let membership = fs::read_to_string(format!("/proc/{pid}/cgroup"));
        // Releases the child whatever the read gave, before anything can panic.
        drop(w);
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        let membership = membership.unwrap();
        assert_eq!(
            status,
            nix::sys::wait::WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 0)
        );
        let mut seen = 0;
        for line in membership.lines() {
            // Hierarchies the host has but moat did not use (none here) would differ.
            assert!(line.ends_with(&want), "{line} (want {want})");
            seen += 1;
        }
        assert_eq!(seen, cg.hierarchies.len(), "{membership}");
    }
    for h in &cg.hierarchies {
        fs::remove_dir(h.dir(&cg.path).join("sub")).unwrap();
    }
    cg.remove().unwrap();
}
