//! Unit tests: path rules, mountinfo parsing, conversions, and value formatting against
//! a fake v2 tree.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use super::layout::parse_mountinfo;
use super::*;
use crate::spec::{self, DeviceCgroup, Resources};

/// A scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("moat-cg-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn touch(dir: &Path, files: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    for f in files {
        fs::write(dir.join(f), "").unwrap();
    }
}

fn read(dir: &Path, f: &str) -> String {
    fs::read_to_string(dir.join(f)).unwrap()
}

#[test]
fn path_rules() {
    assert_eq!(resolve_path(None, "abc").unwrap(), "/moat/abc");
    assert_eq!(resolve_path(Some(""), "abc").unwrap(), "/moat/abc");
    assert_eq!(resolve_path(Some("pod/ct"), "abc").unwrap(), "/moat/pod/ct");
    assert_eq!(resolve_path(Some("/a/b"), "abc").unwrap(), "/a/b");
    assert_eq!(resolve_path(Some("//a//./b/"), "x").unwrap(), "/a/b");
    for bad in ["/a/../b", "../x", "/", "/./"] {
        let e = resolve_path(Some(bad), "x").unwrap_err().to_string();
        assert!(e.starts_with("linux.cgroupsPath: "), "{bad}: {e}");
    }
    assert!(resolve_path(None, "").is_err());
    assert!(resolve_path(None, "a/b").is_err());
    assert!(resolve_path(None, "..").is_err());
}

const MOUNTINFO: &str = "\
23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset,clone_children
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/net_cls,net_prio rw - cgroup cgroup rw,net_cls,net_prio
37 31 0:33 / /mnt/again rw - cgroup cgroup rw,net_cls,net_prio
38 31 0:34 /sub /mnt/bind rw - cgroup cgroup rw,freezer
40 31 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd,release_agent=/x
41 31 0:38 / /sys/fs/cgroup/uni\\040fied rw,relatime - cgroup2 cgroup2 rw,nsdelegate
";

#[test]
fn mountinfo_hierarchies() {
    let hs = parse_mountinfo(MOUNTINFO);
    let got: Vec<(String, Vec<String>, bool)> = hs
        .iter()
        .map(|h| (h.mount.display().to_string(), h.controllers.clone(), h.v2))
        .collect();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        got,
        vec![
            ("/sys/fs/cgroup/cpu".into(), s(&["cpu"]), false),
            ("/sys/fs/cgroup/cpuset".into(), s(&["cpuset"]), false),
            ("/sys/fs/cgroup/memory".into(), s(&["memory"]), false),
            (
                "/sys/fs/cgroup/net_cls,net_prio".into(),
                s(&["net_cls", "net_prio"]),
                false
            ),
            ("/sys/fs/cgroup/systemd".into(), s(&["name=systemd"]), false),
            ("/sys/fs/cgroup/uni fied".into(), vec![], true),
        ]
    );
}

#[test]
fn nsdelegate_is_read_from_the_topmost_mount_at_sys_fs_cgroup() {
    let v2 = |opts: &str| {
        format!(
            "23 1 0:21 / /sys rw,nosuid - sysfs sysfs rw\n\
             31 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 {opts}\n"
        )
    };
    assert!(nsdelegate(&v2("rw,nsdelegate,memory_recursiveprot")));
    assert!(!nsdelegate(&v2("rw,memory_recursiveprot")));
    assert!(!nsdelegate(&v2("rw,nsdelegated")));
    // Hybrid: a tmpfs at /sys/fs/cgroup, cgroup2 with nsdelegate below it.
    assert!(!nsdelegate(MOUNTINFO));
    // A later mount over /sys/fs/cgroup is what a path there reaches.
    let over = v2("rw,nsdelegate") + "50 31 0:40 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    assert!(!nsdelegate(&over));
    assert!(!nsdelegate(""));
}

#[test]
fn conversions() {
    assert_eq!(v2::cpu_weight(2), 1);
    assert_eq!(v2::cpu_weight(1024), 39);
    assert_eq!(v2::cpu_weight(262_144), 10_000);
    assert_eq!(v2::cpu_weight(1), 1);
    assert_eq!(v2::cpu_weight(1 << 40), 10_000);
    assert_eq!(v2::io_weight(10), 1);
    assert_eq!(v2::io_weight(500), 4950);
    assert_eq!(v2::io_weight(1000), 10_000);
    assert_eq!(v2::pids_max(0), "1");
    assert_eq!(v2::pids_max(-1), "max");
    assert_eq!(v2::pids_max(-2), "max");
    assert_eq!(v2::pids_max(42), "42");
    assert_eq!(
        v2::cpu_max(Some(50_000), Some(100_000)).unwrap(),
        "50000 100000"
    );
    assert_eq!(v2::cpu_max(Some(-1), Some(100_000)).unwrap(), "max 100000");
    assert_eq!(v2::cpu_max(Some(20_000), None).unwrap(), "20000");
    assert_eq!(v2::cpu_max(None, None), None);
    assert_eq!(v2::cpu_max(Some(0), Some(0)), None);
}

#[test]
fn swap_conversion() {
    let s = |l, w| v2::swap_max(l, w).map_err(|e| e.to_string());
    assert_eq!(s(Some(100), Some(300)).unwrap().as_deref(), Some("200"));
    assert_eq!(s(Some(100), Some(100)).unwrap().as_deref(), Some("0"));
    assert_eq!(s(Some(100), Some(-1)).unwrap().as_deref(), Some("max"));
    assert_eq!(s(Some(-1), None).unwrap().as_deref(), Some("max"));
    assert_eq!(s(Some(100), None).unwrap(), None);
    assert_eq!(s(None, None).unwrap(), None);
    assert!(s(Some(300), Some(100))
        .unwrap_err()
        .contains("below the memory limit"));
    assert!(s(None, Some(100))
        .unwrap_err()
        .contains("needs a memory limit"));
    assert!(s(Some(100), Some(-5)).is_err());
}

#[test]
fn page_sizes() {
    assert!(v2::page_size("2MB", "f").is_ok());
    assert!(v2::page_size("1GB", "f").is_ok());
    assert!(v2::page_size("64KB", "f").is_ok());
    for bad in ["", "MB", "2M", "2MB/../x", "../2MB", "2 MB", "2TB"] {
        assert!(v2::page_size(bad, "f").is_err(), "{bad}");
    }
}

#[test]
fn io_max_lines_merge_per_device() {
    let t = |major, minor, rate| spec::ThrottleDevice { major, minor, rate };
    let b = spec::BlockIo {
        throttle_read_bps_device: vec![t(8, 0, 1000), t(254, 0, 5)],
        throttle_write_iops_device: vec![t(8, 0, 0)],
        throttle_read_iops_device: vec![t(8, 0, 7)],
        ..Default::default()
    };
    assert_eq!(
        v2::io_max_lines(&b).unwrap(),
        vec!["8:0 rbps=1000 riops=7 wiops=max", "254:0 rbps=5"]
    );
    let bad = spec::BlockIo {
        throttle_write_bps_device: vec![t(-3, 0, 1)],
        ..Default::default()
    };
    let e = v2::io_max_lines(&bad).unwrap_err().to_string();
    assert!(
        e.starts_with("linux.resources.blockIO.throttleWriteBpsDevice[0]"),
        "{e}"
    );
}

#[test]
fn error_messages_name_field_value_and_file() {
    let e = CgroupError::Write {
        field: "linux.resources.memory.limit".into(),
        value: "12".into(),
        path: "/sys/fs/cgroup/memory/moat/x/memory.limit_in_bytes".into(),
        err: io::Error::from_raw_os_error(libc::EBUSY),
    };
    // The errno's text is libc's: "Device or resource busy" (glibc), "Resource busy" (musl).
    let e = e.to_string();
    assert!(
        e.starts_with(
            "linux.resources.memory.limit: write 12 to \
             /sys/fs/cgroup/memory/moat/x/memory.limit_in_bytes: "
        ) && e.ends_with("esource busy"),
        "{e}"
    );
}

#[test]
fn systemd_is_refused() {
    let e = Cgroup::plan(None, "x", true).unwrap_err().to_string();
    if Path::new("/run/systemd/system").exists() {
        assert!(e.contains("not supported"), "{e}");
    } else {
        assert_eq!(
            e,
            "systemd not running on this host, cannot use systemd cgroups manager"
        );
    }
}

const LEAF_FILES: [&str; 17] = [
    "cgroup.procs",
    "cgroup.controllers",
    "memory.max",
    "memory.swap.max",
    "memory.low",
    "cpu.weight",
    "cpu.max",
    "cpu.max.burst",
    "cpuset.cpus",
    "cpuset.mems",
    "pids.max",
    "io.weight",
    "io.max",
    "hugetlb.2MB.max",
    "hugetlb.2MB.rsvd.max",
    "memory.oom.group",
    "cgroup.freeze",
];

/// A fake pure-v2 tree: root and /moat offer controllers, leaf files exist.
fn fake_v2(tmp: &TempDir) -> Cgroup {
    let root = tmp.0.join("cg");
    let controllers = "cpuset cpu io memory pids hugetlb rdma\n";
    for d in [root.clone(), root.join("moat")] {
        touch(
            &d,
            &[
                "cgroup.controllers",
                "cgroup.subtree_control",
                "cgroup.procs",
            ],
        );
        fs::write(d.join("cgroup.controllers"), controllers).unwrap();
    }
    fs::write(root.join("cgroup.subtree_control"), "memory pids\n").unwrap();
    let layout = Layout {
        unified: true,
        hierarchies: vec![Hierarchy {
            mount: root.clone(),
            controllers: controllers.split_whitespace().map(String::from).collect(),
            v2: true,
        }],
    };
    let cg = Cgroup::create(layout, "/moat/ct".into()).unwrap();
    touch(&root.join("moat/ct"), &LEAF_FILES);
    fs::write(root.join("moat/ct/cgroup.controllers"), controllers).unwrap();
    cg
}

#[test]
fn v2_create_enables_controllers_top_down() {
    let tmp = TempDir::new("v2create");
    let cg = fake_v2(&tmp);
    let root = tmp.0.join("cg");
    assert_eq!(cg.path, "/moat/ct");
    assert!(root.join("moat/ct").is_dir());
    // Only the missing ones, one write each.
    assert_eq!(
        read(&root, "cgroup.subtree_control"),
        "memory pids\n+cpuset+cpu+io+hugetlb+rdma"
    );
    assert_eq!(
        read(&root.join("moat"), "cgroup.subtree_control"),
        "+cpuset+cpu+io+memory+pids+hugetlb+rdma"
    );
    // The leaf never gets controllers enabled (no internal processes).
    assert!(!read(&root.join("moat/ct"), "cgroup.controllers").contains('+'));
    let placement = cg.placement(&[]).unwrap();
    let fd = placement.clone_into().expect("O_PATH fd of the v2 dir");
    let link = fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&fd)
    ))
    .unwrap();
    assert_eq!(link, root.join("moat/ct"));
}

#[test]
fn v2_values() {
    let tmp = TempDir::new("v2values");
    let _cg = fake_v2(&tmp);
    let leaf = tmp.0.join("cg/moat/ct");
    let res: Resources = serde_json::from_value(serde_json::json!({
        "memory": {"limit": 104857600, "swap": 209715200, "reservation": 52428800},
        "cpu": {"shares": 1024, "quota": 50000, "period": 100000, "burst": 1000,
                "cpus": "0-1", "mems": "0"},
        "pids": {"limit": 0},
        "blockIO": {"weight": 500, "weightDevice": [{"major": 8, "minor": 0, "weight": 1000}],
                    "throttleReadBpsDevice": [{"major": 8, "minor": 0, "rate": 1048576}]},
        "hugepageLimits": [{"pageSize": "2MB", "limit": 4194304}],
        "unified": {"memory.oom.group": "1"}
    }))
    .unwrap();
    v2::apply_limits(&leaf, &res).unwrap();
    let want = [
        ("memory.max", "104857600"),
        ("memory.swap.max", "104857600"),
        ("memory.low", "52428800"),
        ("cpu.weight", "39"),
        ("cpu.max", "50000 100000"),
        ("cpu.max.burst", "1000"),
        ("cpuset.cpus", "0-1"),
        ("cpuset.mems", "0"),
        ("pids.max", "1"),
        ("io.weight", "49508:0 10000"),
        ("io.max", "8:0 rbps=1048576"),
        ("hugetlb.2MB.max", "4194304"),
        ("hugetlb.2MB.rsvd.max", "4194304"),
        ("memory.oom.group", "1"),
    ];
    for (f, v) in want {
        assert_eq!(read(&leaf, f), v, "{f}");
    }
}

#[test]
fn v2_refusals() {
    let tmp = TempDir::new("v2refuse");
    let _cg = fake_v2(&tmp);
    let leaf = tmp.0.join("cg/moat/ct");
    let apply = |j: serde_json::Value| {
        let res: Resources = serde_json::from_value(j).unwrap();
        v2::apply_limits(&leaf, &res).unwrap_err().to_string()
    };
    let e = apply(serde_json::json!({"network": {"classID": 1}}));
    assert!(e.starts_with("linux.resources.network: "), "{e}");
    for key in [
        "../x.max",
        "a/b",
        "cgroup.procs",
        "cgroup.threads",
        "nodot",
        "",
    ] {
        let e = apply(serde_json::json!({"unified": {key: "1"}}));
        assert!(e.contains("not a writable cgroup file name"), "{key}: {e}");
    }
    // A file that does not exist because its controller is not enabled here.
    fs::write(leaf.join("cgroup.controllers"), "cpu memory\n").unwrap();
    let e = apply(serde_json::json!({"unified": {"misc.max": "x 1"}}));
    assert!(
        e.contains("misc controller") && e.contains("not enabled"),
        "{e}"
    );
    let e = apply(serde_json::json!({"cpu": {"realtimeRuntime": 5}}));
    assert!(e.starts_with("linux.resources.cpu.realtimeRuntime"), "{e}");
}

#[test]
fn v1_unified_needs_a_v2_mount() {
    let cg = Cgroup {
        path: "/x".into(),
        ..Default::default()
    };
    let res = Resources {
        unified: Some(BTreeMap::from([("memory.max".into(), "1".into())])),
        ..Default::default()
    };
    let e = cg.apply(&res).unwrap_err().to_string();
    assert!(
        e.starts_with("linux.resources.unified: needs cgroup v2"),
        "{e}"
    );
}

/// A hierarchy moat cannot write (sysfs refuses mkdir with EPERM even for root) is
/// skipped with a warning; it only matters once its controller is asked for.
#[test]
fn unwritable_hierarchy_is_skipped_until_needed() {
    let layout = Layout {
        unified: false,
        hierarchies: vec![Hierarchy {
            mount: "/sys/kernel".into(),
            controllers: vec!["memory".into(), "devices".into()],
            v2: false,
        }],
    };
    let cg = Cgroup::create(layout, "/moat-test-unwritable".into()).unwrap();
    assert!(cg.hierarchies.is_empty());
    assert_eq!(cg.skipped.len(), 1);
    cg.apply(&Resources::default()).unwrap();
    cg.add_pid(1).unwrap();
    assert!(cg.pids().unwrap().is_empty());
    assert!(!cg.is_frozen());
    cg.remove().unwrap();
    let mut res = Resources {
        devices: vec![DeviceCgroup::default()],
        ..Default::default()
    };
    cg.apply(&res).unwrap();
    res.memory = Some(spec::Memory {
        limit: Some(1 << 20),
        ..Default::default()
    });
    let e = cg.apply(&res).unwrap_err().to_string();
    assert!(
        e.contains("memory controller at /sys/kernel/moat-test-unwritable")
            && e.contains("not writable"),
        "{e}"
    );
    let e = cg.freeze().unwrap_err().to_string();
    assert!(e.contains("freezer"), "{e}");
}

#[test]
fn v2_rootless_without_cgroup() {
    let cg = Cgroup {
        path: "/moat/x".into(),
        systemd: None,
        joined: false,
        unified: true,
        hierarchies: vec![],
        skipped: vec![Hierarchy {
            mount: "/sys/fs/cgroup".into(),
            controllers: vec!["memory".into(), "pids".into()],
            v2: true,
        }],
    };
    let devices_only = Resources {
        devices: vec![DeviceCgroup::default()],
        ..Default::default()
    };
    cg.apply(&devices_only).unwrap();
    let pids = Resources {
        pids: Some(spec::Pids { limit: Some(10) }),
        ..devices_only
    };
    let e = cg.apply(&pids).unwrap_err().to_string();
    assert_eq!(
        e,
        "linux.resources.pids: cannot use the pids controller at /sys/fs/cgroup/moat/x: \
         the hierarchy is not writable by this user (rootless?)"
    );
    assert!(cg.placement(&[]).unwrap().clone_into().is_none());
    assert!(cg.pids().unwrap().is_empty());
}

/// The real host as an unprivileged user: nothing writable, nothing asked, no failure.
#[test]
fn rootless_prepare_on_this_host() {
    if crate::linux::sys::geteuid() == 0 {
        eprintln!("SKIPPED: root (this test checks the rootless path of prepare)");
        return;
    }
    let (layout, path) = Cgroup::plan(Some("/moat-test-rootless"), "x", false).unwrap();
    let cg = Cgroup::create(layout, path).unwrap();
    assert!(cg.hierarchies.is_empty(), "{:?}", cg.hierarchies);
    assert!(!cg.skipped.is_empty());
    cg.apply(&Resources::default()).unwrap();
    cg.remove().unwrap();
}

#[test]
fn state_roundtrip() {
    let tmp = TempDir::new("serde");
    let cg = fake_v2(&tmp);
    let json = serde_json::to_string(&cg).unwrap();
    let back: Cgroup = serde_json::from_str(&json).unwrap();
    assert_eq!(back.hierarchies, cg.hierarchies);
    assert!(back.unified);
    // Older or hand-written state without the new fields still loads.
    let old: Cgroup = serde_json::from_str(r#"{"path":"/moat/x"}"#).unwrap();
    assert!(old.hierarchies.is_empty());
}

#[test]
fn rdma_max_lines_name_only_the_limits_given() {
    let tmp = TempDir::new("v2rdma");
    let _cg = fake_v2(&tmp);
    let leaf = tmp.0.join("cg/moat/ct");
    touch(&leaf, &["rdma.max"]);
    let res: Resources = serde_json::from_value(serde_json::json!({"rdma": {
        "rxe0": {"hcaHandles": 1},
        "mlx5_0": {"hcaHandles": 3, "hcaObjects": 1000},
        "mlx5_1": {"hcaObjects": 0},
        "mlx5_2": {}
    }}))
    .unwrap();
    v2::apply_limits(&leaf, &res).unwrap();
    // One write per device (a fake file keeps them all, in the map's order).
    assert_eq!(
        read(&leaf, "rdma.max"),
        "mlx5_0 hca_handle=3 hca_object=1000mlx5_1 hca_object=0mlx5_2rxe0 hca_handle=1"
    );
    // No rdma.max: the controller is not enabled for this cgroup, said so.
    fs::remove_file(leaf.join("rdma.max")).unwrap();
    fs::write(leaf.join("cgroup.controllers"), "cpu memory\n").unwrap();
    let e = v2::apply_limits(&leaf, &res).unwrap_err().to_string();
    assert!(
        e.starts_with("linux.resources.rdma[\"mlx5_0\"]: cannot use the rdma controller")
            && e.contains("not enabled in cgroup.controllers"),
        "{e}"
    );
}

/// v1: the `rdma` hierarchy when one is mounted; on a hybrid host without one, the
/// unified mount where its root offers rdma (as hugetlb on this development host).
#[test]
fn rdma_goes_to_the_v1_hierarchy_or_the_unified_one() {
    let tmp = TempDir::new("v1rdma");
    let hier = |name: &str, controllers: &[&str], v2: bool| {
        let mount = tmp.0.join(name);
        touch(&mount.join("moat/ct"), &["rdma.max", "cgroup.controllers"]);
        Hierarchy {
            mount,
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
            v2,
        }
    };
    let res: Resources =
        serde_json::from_value(serde_json::json!({"rdma": {"rxe0": {"hcaHandles": 2}}})).unwrap();
    let cg = |hierarchies| Cgroup {
        path: "/moat/ct".into(),
        hierarchies,
        ..Default::default()
    };
    let v1 = hier("rdma", &["rdma"], false);
    let unified = hier("unified", &["hugetlb", "rdma"], true);
    cg(vec![v1.clone(), unified.clone()]).apply(&res).unwrap();
    assert_eq!(read(&v1.dir("/moat/ct"), "rdma.max"), "rxe0 hca_handle=2");
    assert_eq!(read(&unified.dir("/moat/ct"), "rdma.max"), "");
    let pids = hier("pids", &["pids"], false);
    cg(vec![pids, unified.clone()]).apply(&res).unwrap();
    assert_eq!(
        read(&unified.dir("/moat/ct"), "rdma.max"),
        "rxe0 hca_handle=2"
    );
}

#[test]
fn a_missing_rdma_controller_is_refused_with_the_hosts_reason() {
    let planned = Cgroup {
        path: "/moat/ct".into(),
        hierarchies: vec![Hierarchy {
            mount: "/sys/fs/cgroup/unified".into(),
            controllers: vec!["hugetlb".into()],
            v2: true,
        }],
        ..Default::default()
    };
    let e = planned
        .require_controller("rdma", "linux.resources.rdma")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("linux.resources.rdma: cannot use the rdma controller at /sys/fs/cgroup: "),
        "{e}"
    );
    let head = "#subsys_name\thierarchy\tnum_cgroups\tenabled\npids\t8\t8\t1\n";
    let reason = |extra: &str| missing_controller_reason(&format!("{head}{extra}"), "rdma");
    assert!(reason("").starts_with("this kernel has no rdma controller"));
    assert!(reason("rdma\t0\t1\t0\n").starts_with("the rdma controller is disabled"));
    assert!(reason("rdma\t0\t1\t1\n").starts_with("no mounted hierarchy offers"));
    // Offered, or no cgroup at all (rootless without one: the limits go with a warning).
    let mut offered = planned.clone();
    offered.hierarchies[0].controllers.push("rdma".into());
    offered
        .require_controller("rdma", "linux.resources.rdma")
        .unwrap();
    Cgroup::default()
        .require_controller("rdma", "linux.resources.rdma")
        .unwrap();
}
