//! Mounts: tmpfs options, binds (ro, recursive), masked and read-only paths, the read-only
//! root, and the rootfs as hostile ground (symlinks that point out of it).

mod support;

use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use support::*;

/// The mountinfo line for `mountpoint` as printed by the container, split into
/// (per-mount options, super options).
fn mount_opts(out: &str, mountpoint: &str) -> (Vec<String>, Vec<String>) {
    let line = out
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(mountpoint))
        .unwrap_or_else(|| panic!("{mountpoint} not in mountinfo:\n{out}"));
    let (pre, post) = line.split_once(" - ").expect("mountinfo separator");
    let per: Vec<String> = pre
        .split(' ')
        .nth(5)
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    let sup: Vec<String> = post
        .split(' ')
        .nth(2)
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    (per, sup)
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn tmpfs_mount_gets_its_options() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("tmpfs");
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/t", "type": "tmpfs", "source": "tmpfs",
               "options": ["nosuid", "nodev", "noexec", "size=1m", "mode=700"]}),
    );
    ctx.sh("cat /proc/self/mountinfo; stat -c 'mode=%a' /mnt/t; echo x > /mnt/t/f && echo wrote");
    let (out, err) = run_to_end(&ctx, "c");
    let (per, sup) = mount_opts(&out, "/mnt/t");
    for o in ["rw", "nosuid", "nodev", "noexec"] {
        assert!(per.iter().any(|p| p == o), "{o} missing in {per:?}");
    }
    assert!(sup.iter().any(|s| s == "size=1024k"), "{sup:?}");
    assert!(sup.iter().any(|s| s == "mode=700"), "{sup:?}");
    assert!(out.contains("mode=700\n"), "{out}");
    assert!(out.ends_with("wrote\n"), "{out}{err}");
    assert!(
        !ctx.rootfs().join("mnt/t/f").exists(),
        "write went to the rootfs"
    );
}

/// runc's mounts.bats "ro /dev mount": a read-only tmpfs at `/dev` is made read-only
/// after its submounts (`/dev/pts`, `/dev/shm`, `/dev/mqueue`), device nodes and links,
/// as runc does; before, mounting `/dev/pts` on it failed ("Read-only file system").
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn read_only_dev_is_made_read_only_after_its_submounts() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rodev");
    let dev = ctx.config["mounts"]
        .as_array_mut()
        .expect("mounts")
        .iter_mut()
        .find(|m| m["destination"] == "/dev")
        .expect("a /dev mount in the spec");
    dev["options"]
        .as_array_mut()
        .expect("/dev has options")
        .push(json!("ro"));
    ctx.sh(
        "cat /proc/self/mountinfo; test -c /dev/null && echo null; test -L /dev/fd && echo fd; \
         touch /dev/x 2>/dev/null || echo refused",
    );
    let (out, err) = run_to_end(&ctx, "c");
    let (per, _) = mount_opts(&out, "/dev");
    assert!(per.iter().any(|p| p == "ro"), "/dev not read-only: {per:?}");
    for sub in ["/dev/pts", "/dev/shm", "/dev/mqueue"] {
        mount_opts(&out, sub);
    }
    assert!(out.ends_with("null\nfd\nrefused\n"), "{out}{err}");
}

/// runc's start_hello.bats "rootless with host pidns": without a pid namespace of its own
/// the container may have the host's `/proc` bound at `/proc` (it sees the host's
/// processes either way); the masked and read-only paths still apply on top of the bind:
/// `/proc/sys` stays read-only, `/proc/kcore` and `/proc/acpi` masked, `/proc/sysrq-trigger`
/// read-only. With a pid namespace of its own it is refused before anything exists.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn host_proc_bind_without_a_pid_namespace_keeps_masks_and_read_only_paths() {
    if !require_root() {
        return;
    }
    let proc_bind = |ctx: &mut Ctx| {
        let m = ctx.config["mounts"]
            .as_array_mut()
            .expect("mounts")
            .iter_mut()
            .find(|m| m["destination"] == "/proc")
            .expect("a /proc mount in the spec");
        *m = json!({"destination": "/proc", "type": "none", "source": "/proc",
                    "options": ["rbind", "nosuid", "nodev", "noexec"]});
    };
    let mut ctx = Ctx::new("hostproc");
    ctx.without_ns("pid");
    proc_bind(&mut ctx);
    ctx.sh("cat /proc/self/mountinfo; \
         echo x > /proc/sys/kernel/domainname 2>/dev/null && echo sys-rw || echo sys-ro; \
         echo h > /proc/sysrq-trigger 2>/dev/null && echo sysrq-rw || echo sysrq-ro; \
         echo kcore=$(head -c 16 /proc/kcore 2>/dev/null | wc -c); \
         echo acpi=$(ls /proc/acpi 2>/dev/null | wc -l); test -d /proc/1 && echo host-pids");
    let (out, err) = run_to_end(&ctx, "c");
    let (per, sup) = mount_opts(&out, "/proc");
    for o in ["nosuid", "nodev", "noexec"] {
        assert!(per.iter().any(|p| p == o), "{o} missing on /proc: {per:?}");
    }
    let _ = sup;
    let tail: Vec<&str> = out.lines().rev().take(5).collect();
    assert_eq!(
        tail,
        ["host-pids", "acpi=0", "kcore=0", "sysrq-ro", "sys-ro"],
        "{out}{err}"
    );
    let (per, _) = mount_opts(&out, "/proc/sys");
    assert!(per.iter().any(|p| p == "ro"), "/proc/sys: {per:?}");
    // The host's pid namespace is the only one whose /proc this can be.
    let mut ctx = Ctx::new("hostprocns");
    proc_bind(&mut ctx);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(
        out.stderr
            .contains("/proc may be a bind of the host's /proc only without a pid namespace"),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

/// A host directory with a file, for bind sources.
fn host_src(ctx: &Ctx, name: &str) -> PathBuf {
    let src = ctx.dir.join(name);
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("file"), "from-host\n").unwrap();
    src
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn read_only_bind_is_readable_but_not_writable() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("bindro");
    let src = host_src(&ctx, "src");
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/b", "type": "bind", "source": src,
               "options": ["bind", "ro"]}),
    );
    ctx.sh("cat /mnt/b/file; touch /mnt/b/new; echo rc=$?; echo changed > /mnt/b/file; echo rc=$?");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "from-host\nrc=1\nrc=1\n", "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(read(src.join("file")), "from-host\n");
    assert!(!src.join("new").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn read_write_bind_writes_reach_the_host() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("bindrw");
    let src = host_src(&ctx, "src");
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/b", "type": "bind", "source": src, "options": ["rbind"]}),
    );
    ctx.sh("echo from-container > /mnt/b/new");
    let (_, err) = run_to_end(&ctx, "c");
    assert_eq!(read(src.join("new")), "from-container\n", "{err}");
}

/// A tmpfs mounted on the host (for rbind tests); lazily unmounted on drop.
struct HostMount(PathBuf);

impl HostMount {
    fn tmpfs(at: &Path) -> HostMount {
        fs::create_dir_all(at).unwrap();
        let t = CString::new(at.to_str().unwrap()).unwrap();
        // SAFETY: NUL-terminated strings.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                t.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                c"size=1m".as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount tmpfs on {}", at.display());
        HostMount(at.to_path_buf())
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let t = CString::new(self.0.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        unsafe { libc::umount2(t.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rbind_carries_submounts_and_bind_does_not() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rbind");
    let src = host_src(&ctx, "src");
    let sub = HostMount::tmpfs(&src.join("sub"));
    fs::write(sub.0.join("inner"), "submount\n").unwrap();
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/r", "type": "bind", "source": src, "options": ["rbind", "ro"]}),
    );
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/n", "type": "bind", "source": src, "options": ["bind", "ro"]}),
    );
    ctx.sh("cat /mnt/r/file /mnt/r/sub/inner; echo n:$(ls -A /mnt/n/sub); cat /mnt/n/file");
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "from-host\nsubmount\nn:\nfrom-host\n", "{err}");
    drop(sub);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn rro_bind_makes_submounts_read_only() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rro");
    let src = host_src(&ctx, "src");
    let sub = HostMount::tmpfs(&src.join("sub"));
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt/r", "type": "bind", "source": src, "options": ["rbind", "rro"]}),
    );
    ctx.sh("touch /mnt/r/x; echo top=$?; touch /mnt/r/sub/x; echo sub=$?");
    let (out, _) = run_to_end(&ctx, "c");
    // (Plain "ro" is runc's top-mount-only read-only; "rro" covers the whole tree.)
    assert_eq!(
        out, "top=1\nsub=1\n",
        "a submount of an rro rbind must be ro too"
    );
    assert!(!sub.0.join("x").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn masked_file_is_the_null_device_and_reads_empty() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("maskfile");
    fs::write(ctx.rootfs().join("etc/secret"), "do not read\n").unwrap();
    ctx.push("/linux/maskedPaths", json!("/etc/secret"));
    // Of moat spec's masked /proc files, those this kernel has.
    let mut files = vec!["/etc/secret".to_string()];
    for p in moat_default_spec()["linux"]["maskedPaths"]
        .as_array()
        .unwrap()
    {
        let p = p.as_str().unwrap();
        if p.starts_with("/proc/") && Path::new(p).is_file() {
            files.push(p.to_string());
        }
    }
    assert!(files.len() > 1, "no masked /proc file exists on this host");
    ctx.sh(&format!(
        "for f in {}; do echo $f $(stat -c '%F %t:%T' $f) $(cat $f | wc -c); done",
        files.join(" ")
    ));
    let (out, err) = run_to_end(&ctx, "c");
    let want: String = files
        .iter()
        .map(|f| format!("{f} character special file 1:3 0\n"))
        .collect();
    assert_eq!(out, want, "{err}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn masked_directory_is_empty_and_read_only() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("maskdir");
    fs::create_dir_all(ctx.rootfs().join("secret")).unwrap();
    fs::write(ctx.rootfs().join("secret/key"), "k\n").unwrap();
    ctx.push("/linux/maskedPaths", json!("/secret"));
    ctx.set("/root/readonly", json!(false));
    ctx.sh(
        "echo secret:$(ls -A /secret) firmware:$(ls -A /sys/firmware); \
         touch /secret/x; echo rc=$?",
    );
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "secret: firmware:\nrc=1\n");
    // /sys/firmware (masked by moat spec) is not empty on the host, so the mask did it.
    let host_fw = fs::read_dir("/sys/firmware").map(|mut d| d.next().is_some());
    assert!(
        host_fw.unwrap_or(true),
        "host /sys/firmware is empty: weak test"
    );
    assert_eq!(read(ctx.rootfs().join("secret/key")), "k\n");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn missing_masked_path_is_skipped() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("maskmissing");
    ctx.push("/linux/maskedPaths", json!("/no/such/path"));
    ctx.args(&["true"]);
    let (_, err) = run_to_end(&ctx, "c");
    assert_eq!(err, "");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn readonly_paths_are_read_only_recursively() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ropaths");
    ctx.set("/root/readonly", json!(false));
    fs::create_dir_all(ctx.rootfs().join("data")).unwrap();
    ctx.push(
        "/mounts",
        json!({"destination": "/data/sub", "type": "tmpfs", "source": "tmpfs", "options": ["size=1m"]}),
    );
    ctx.push("/linux/readonlyPaths", json!("/data"));
    ctx.sh(
        "touch /data/x; echo data=$?; touch /data/sub/x; echo sub=$?; touch /ok; echo root=$?; \
         echo name > /proc/sys/kernel/hostname; echo procsys=$?; echo h > /proc/sysrq-trigger; echo sysrq=$?",
    );
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "data=1\nsub=1\nroot=0\nprocsys=1\nsysrq=1\n");
    assert!(ctx.rootfs().join("ok").exists());
    assert!(!ctx.rootfs().join("data/x").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn readonly_root_refuses_writes() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("roroot");
    ctx.set("/root/readonly", json!(true));
    ctx.sh(
        "touch /newfile; echo root=$?; touch /tmp/x; echo tmp=$?; touch /dev/shm/x; echo shm=$?",
    );
    let (out, err) = run_to_end(&ctx, "c");
    assert_eq!(out, "root=1\ntmp=1\nshm=0\n", "{err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!ctx.rootfs().join("newfile").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn writable_root_writes_reach_the_bundle() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("rwroot");
    ctx.set("/root/readonly", json!(false));
    ctx.sh("echo hi > /newfile");
    run_to_end(&ctx, "c");
    assert_eq!(read(ctx.rootfs().join("newfile")), "hi\n");
}

/// T10 (CVE-2024-45310): mount destinations through symlinks that point at the host's `/`
/// resolve inside the rootfs; nothing is created on the host.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bind_destination_through_symlink_to_slash_creates_nothing_on_the_host() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("t10");
    let src = host_src(&ctx, "src");
    let srcfile = src.join("file");
    let rootfs = ctx.rootfs();
    std::os::unix::fs::symlink("/", rootfs.join("escape")).unwrap();
    std::os::unix::fs::symlink("../../../../../..", rootfs.join("etc/up")).unwrap();
    let dname = format!("moat-t10-dir-{}", std::process::id());
    let fname = format!("moat-t10-file-{}", std::process::id());
    ctx.push(
        "/mounts",
        json!({"destination": format!("/escape/{dname}"), "type": "bind", "source": src, "options": ["bind"]}),
    );
    ctx.push(
        "/mounts",
        json!({"destination": format!("/etc/up/{fname}"), "type": "bind", "source": srcfile, "options": ["bind"]}),
    );
    ctx.sh(&format!("cat /{dname}/file /{fname}"));
    let c = ctx.create_ok("c");
    let out = c.start_and_wait();
    for host_path in [format!("/{dname}"), format!("/{fname}")] {
        assert!(
            !Path::new(&host_path).exists(),
            "{host_path} was created on the host"
        );
    }
    assert!(
        rootfs.join(&dname).is_dir(),
        "destination not made inside the rootfs"
    );
    assert!(rootfs.join(&fname).is_file());
    assert_eq!(out, "from-host\nfrom-host\n", "{}", c.stderr());
}

/// T4 (CVE-2019-19921 family): a rootfs whose /proc is a symlink must be refused, or the
/// procfs mount (and every later /proc write) lands where the image points it.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn proc_as_symlink_in_rootfs_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("t4");
    let rootfs = ctx.rootfs();
    fs::remove_dir(rootfs.join("proc")).unwrap();
    fs::create_dir(rootfs.join("fakeproc")).unwrap();
    std::os::unix::fs::symlink("/fakeproc", rootfs.join("proc")).unwrap();
    ctx.args(&["true"]);
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(out.stderr.contains("/proc"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

/// runc's mask.bats "duplicate paths": a masked path listed twice (or spelled twice, `/x/`)
/// is masked once. Before, the second mask was stacked on the first: OPEN had two mounts at
/// the path. Both policies.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_masked_path_listed_twice_is_masked_once() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        let mut ctx = Ctx::new("maskdup");
        fs::create_dir_all(ctx.rootfs().join("testdir")).unwrap();
        fs::write(ctx.rootfs().join("testdir/key"), "k\n").unwrap();
        fs::write(ctx.rootfs().join("testfile"), "secret\n").unwrap();
        for p in [
            "/testdir",
            "/testfile",
            "/testdir/",
            "/testfile",
            "/./testdir",
        ] {
            ctx.push("/linux/maskedPaths", json!(p));
        }
        if restricted {
            ctx.restricted();
        }
        ctx.sh(
            "grep -c ' /testdir ' /proc/self/mountinfo; grep -c ' /testfile ' /proc/self/mountinfo; \
             ls -A /testdir; cat /testfile; echo end",
        );
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "1\n1\nend\n", "restricted={restricted}: {err}");
    }
}

/// runc's idmap.bats "idmap mount with relative path": a relative mount destination is
/// taken relative to `/` with a warning (runc: deprecated, still accepted), under both
/// policies; a relative one climbing with `..` stays inside the rootfs like any other.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_relative_mount_destination_is_taken_from_the_root() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        let mut ctx = Ctx::new("reldest");
        let src = host_src(&ctx, "src");
        let escape = format!("moat-reldest-{}-{restricted}", std::process::id());
        ctx.push(
            "/mounts",
            json!({"destination": "mnt/rel", "type": "bind", "source": src, "options": ["bind"]}),
        );
        ctx.push(
            "/mounts",
            json!({"destination": format!("../../../../{escape}"), "type": "tmpfs",
                   "source": "tmpfs", "options": ["nosuid", "size=1m"]}),
        );
        if restricted {
            ctx.restricted();
        }
        ctx.sh(&format!(
            "cat /mnt/rel/file; grep -c ' /{escape} ' /proc/self/mountinfo"
        ));
        let c = ctx.create_ok("c");
        let create_err = c.out.as_ref().map(|o| o.stderr.clone()).unwrap_or_default();
        let out = c.start_and_wait();
        assert_eq!(
            out,
            "from-host\n1\n",
            "restricted={restricted}: {}",
            c.stderr()
        );
        assert!(
            create_err.contains("mounts[")
                && create_err.contains("\"mnt/rel\" is not absolute; taken as relative to /"),
            "no warning: {create_err}"
        );
        assert!(
            !Path::new(&format!("/{escape}")).exists(),
            "made on the host"
        );
        assert!(ctx.rootfs().join(&escape).is_dir());
    }
}

/// runc's idmap.bats "mount source fds are cleaned up" (20 idmapped mounts under
/// `RLIMIT_NOFILE` 20): the spec's descriptor limit holds for the container's process,
/// not for moat setting it up. Before, the limit went on the init first and the init ran
/// out of descriptors half way: "receive an idmapped mount: No buffer space available"
/// (the kernel truncates SCM_RIGHTS it cannot install) in a user namespace, EMFILE on a
/// clone without one.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn many_mounts_under_a_low_descriptor_limit() {
    if !require_root() {
        return;
    }
    let map = json!([{"containerID": 0, "hostID": 3_300_000_000u32, "size": 65536}]);
    for userns in [false, true] {
        let mut ctx = Ctx::new("nofile");
        let src = host_src(&ctx, "src");
        if userns {
            ctx.push("/linux/namespaces", json!({"type": "user"}));
            ctx.set("/linux/uidMappings", map.clone())
                .set("/linux/gidMappings", map.clone());
        }
        for i in 0..30 {
            // Container root in the user namespace may not create them in the rootfs.
            fs::create_dir_all(ctx.rootfs().join(format!("mnt/m{i}"))).unwrap();
            ctx.push(
                "/mounts",
                json!({"destination": format!("/mnt/m{i}"), "type": "bind", "source": src,
                       "options": ["bind"]}),
            );
        }
        ctx.set(
            "/process/rlimits",
            json!([{"type": "RLIMIT_NOFILE", "soft": 20, "hard": 20}]),
        );
        ctx.sh("ulimit -n; ulimit -Hn; cat /mnt/m29/file");
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "20\n20\nfrom-host\n", "userns={userns}: {err}");
    }
}

/// runc's mounts.bats "tmpfs mount mode= inherit", "explicit mode=", "mode=1777 default":
/// a tmpfs over an existing directory takes that directory's mode unless the options set
/// `mode=`; over one moat creates, the tmpfs default (1777), the directories made on the
/// way 0755. The rootfs's directory itself is not changed.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_tmpfs_keeps_the_mode_of_the_directory_it_covers() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("tmpfsmode");
    ctx.set("/root/readonly", json!(false));
    for d in ["inherit", "explicit"] {
        let p = ctx.rootfs().join(d);
        fs::create_dir(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o710)).unwrap();
    }
    let _ = fs::remove_dir_all(ctx.rootfs().join("non-existent"));
    for (dest, opts) in [
        ("/inherit", json!(["rw", "nodev", "nosuid"])),
        ("/explicit", json!(["rw", "nodev", "nosuid", "mode=1500"])),
        ("/non-existent/foo/bar", json!(["rw", "nodev", "nosuid"])),
    ] {
        ctx.push(
            "/mounts",
            json!({"destination": dest, "type": "tmpfs", "source": "tmpfs", "options": opts}),
        );
    }
    ctx.sh("stat -c %a /inherit /explicit /non-existent/foo/bar; cat /proc/self/mountinfo");
    let (out, err) = run_to_end(&ctx, "c");
    assert!(out.starts_with("710\n1500\n1777\n"), "{out}{err}");
    let (_, sup) = mount_opts(&out, "/inherit");
    assert!(sup.iter().any(|o| o == "mode=710"), "{sup:?}");
    let (_, sup) = mount_opts(&out, "/explicit");
    assert!(sup.iter().any(|o| o == "mode=1500"), "{sup:?}");
    let (_, sup) = mount_opts(&out, "/non-existent/foo/bar");
    assert!(!sup.iter().any(|o| o.starts_with("mode=")), "{sup:?}");
    let mode = |p: &str| fs::metadata(ctx.rootfs().join(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("explicit"), 0o710);
    for p in ["non-existent", "non-existent/foo", "non-existent/foo/bar"] {
        assert_eq!(mode(p), 0o755, "{p}");
    }
}

/// runc's mounts.bats "bind mount through a dangling symlink component" and "through a
/// trailing dangling symlink": a destination whose symlinks lead to nothing yet gets what
/// they point at created, inside the rootfs, and the bind lands there (a file, then a
/// directory). Both policies.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_bind_through_a_dangling_symlink_lands_where_it_points() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        let mut ctx = Ctx::new("dangling");
        let src = host_src(&ctx, "src");
        let r = ctx.rootfs();
        let _ = fs::remove_file(r.join("etc/hosts"));
        std::os::unix::fs::symlink("/tmp/foo/bar", r.join("jump")).unwrap();
        std::os::unix::fs::symlink("/jump/baz/hosts", r.join("etc/hosts")).unwrap();
        std::os::unix::fs::symlink("/tmp/dir", r.join("etc/dir")).unwrap();
        let _ = fs::remove_dir_all(r.join("tmp/foo"));
        ctx.push(
            "/mounts",
            json!({"destination": "/etc/hosts", "type": "bind", "source": src.join("file"), "options": ["bind"]}),
        );
        ctx.push(
            "/mounts",
            json!({"destination": "/etc/dir", "type": "bind", "source": src, "options": ["bind"]}),
        );
        if restricted {
            ctx.restricted();
        }
        ctx.sh("cat /tmp/foo/bar/baz/hosts /tmp/dir/file; \
             grep -c ' /tmp/foo/bar/baz/hosts ' /proc/self/mountinfo; \
             grep -c ' /tmp/dir ' /proc/self/mountinfo");
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(
            out, "from-host\nfrom-host\n1\n1\n",
            "restricted={restricted}: {err}"
        );
        assert!(r.join("tmp/foo/bar/baz/hosts").is_file());
        assert!(r.join("tmp/dir").is_dir());
    }
}

/// The attack on the above: dangling symlinks that point out of the rootfs (absolute at a
/// host directory, relative climbing past `/`), one of them swapped in and out by a racer
/// during the creates. What they point at is created inside the rootfs, never on the host.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn dangling_symlinks_out_of_the_rootfs_create_nothing_on_the_host() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("danglingout");
    let src = host_src(&ctx, "src");
    // On the host's disk /tmp, not below the test's directory: that is in /dev/shm, and
    // `/dev` of the container is a tmpfs of its own.
    let host = std::env::temp_dir().join(format!("moat-danglingout-{}", std::process::id()));
    let _ = fs::remove_dir_all(&host);
    fs::create_dir_all(&host).unwrap();
    let host_s = host.to_str().unwrap().to_string();
    let r = ctx.rootfs();
    std::os::unix::fs::symlink(format!("{host_s}/abs"), r.join("etc/abs")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../../../../..{host_s}/rel"),
        r.join("etc/rel"),
    )
    .unwrap();
    // The racer's pair: a directory and a symlink to the host, exchanged in a loop.
    fs::create_dir_all(r.join("race/real")).unwrap();
    std::os::unix::fs::symlink(&host_s, r.join("race/link")).unwrap();
    std::os::unix::fs::symlink("/race/real/made", r.join("etc/race")).unwrap();
    for (dest, source) in [
        ("/etc/abs/sub", src.clone()),
        ("/etc/rel", src.join("file")),
        ("/etc/race", src.join("file")),
    ] {
        ctx.push(
            "/mounts",
            json!({"destination": dest, "type": "bind", "source": source, "options": ["bind"]}),
        );
    }
    ctx.sh("cat /etc/abs/sub/file /etc/rel");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let racer = {
        let stop = stop.clone();
        let (a, b) = (
            CString::new(r.join("race/real").to_str().unwrap()).unwrap(),
            CString::new(r.join("race/link").to_str().unwrap()).unwrap(),
        );
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // SAFETY: NUL-terminated paths (musl has no renameat2 wrapper).
                unsafe {
                    libc::syscall(
                        libc::SYS_renameat2,
                        libc::AT_FDCWD,
                        a.as_ptr(),
                        libc::AT_FDCWD,
                        b.as_ptr(),
                        libc::RENAME_EXCHANGE,
                    )
                };
            }
        })
    };
    let mut ran = 0;
    for i in 0..20 {
        let (c, out) = ctx.create(&format!("c{i}"));
        if out.code == 0 {
            ran += 1;
            let _ = c.start_and_wait();
        }
        drop(c);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    racer.join().unwrap();
    let left: Vec<_> = fs::read_dir(&host)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    fs::remove_dir_all(&host).unwrap();
    assert!(left.is_empty(), "created on the host: {left:?}");
    assert!(ran > 0, "no create got through the race");
    let host_in_root = r.join(host_s.trim_start_matches('/'));
    assert!(
        host_in_root.join("abs/sub").is_dir(),
        "absolute link not made inside"
    );
    assert!(
        host_in_root.join("rel").is_file(),
        "relative link not made inside"
    );
}

/// runc's mounts.bats "mount order, container bind-mount source" (and its userns variant):
/// binds whose sources are host paths inside the rootfs, below what earlier mounts of
/// the same spec put there, are made in order and find those mounts (a tree of binds
/// copied whole onto `/final`). In a user namespace the host sources sit below a
/// directory closed to container root, so the parent opens them; the ones inside the
/// rootfs the init opens itself.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bind_sources_inside_the_rootfs_are_found_after_earlier_mounts() {
    if !require_root() {
        return;
    }
    let map = json!([{"containerID": 0, "hostID": 3_300_000_000u32, "size": 65536}]);
    for userns in [false, true] {
        let mut ctx = Ctx::new("mntorder");
        let r = ctx.rootfs();
        let r_s = r.to_str().unwrap().to_string();
        fs::create_dir_all(r.join("mnt")).unwrap();
        fs::create_dir_all(r.join("final")).unwrap();
        let bs = ctx.dir.join("bind-src");
        for sub in ["a/x", "b/y", "c/z"] {
            fs::create_dir_all(bs.join(sub)).unwrap();
            fs::write(bs.join(sub).join("file"), format!("{sub}\n")).unwrap();
            let top = &sub[..1];
            std::os::unix::fs::symlink(top, bs.join(format!("sym-{top}"))).unwrap();
        }
        fs::set_permissions(&bs, fs::Permissions::from_mode(0o750)).unwrap();
        if userns {
            ctx.push("/linux/namespaces", json!({"type": "user"}));
            ctx.set("/linux/uidMappings", map.clone())
                .set("/linux/gidMappings", map.clone());
        }
        let bs_s = bs.to_str().unwrap();
        for (src, dst) in [
            (format!("{bs_s}/a"), "/mnt".to_string()),
            (format!("{bs_s}/sym-b"), "/mnt/x".to_string()),
            (format!("{bs_s}/c"), "/mnt/x/y".to_string()),
            (format!("{bs_s}/sym-a"), "/mnt/x/y/z".to_string()),
            (format!("{r_s}/mnt/x"), format!("{r_s}/mnt/x/y/z/x")),
            (format!("{r_s}/mnt/x/y"), format!("{r_s}/mnt/x/y/z")),
            (format!("{r_s}/mnt"), format!("{r_s}/final")),
        ] {
            ctx.push(
                "/mounts",
                json!({"source": src, "destination": dst, "type": "bind",
                       "options": ["rbind", "rprivate"]}),
            );
        }
        ctx.args(&["cat", "/final/x/y/z/z/x/y/z/x/file"]);
        let (out, err) = run_to_end(&ctx, "c");
        assert_eq!(out, "a/x\n", "userns={userns}: {err}");
    }
}

/// The attack on the above: a bind source inside the rootfs that is (or passes) a symlink
/// to a host directory is resolved inside the rootfs, never on the host: the container
/// gets the rootfs's own directory of that name, not the host's.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_bind_source_inside_the_rootfs_never_follows_a_symlink_to_the_host() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        let mut ctx = Ctx::new("srcinroot");
        // On the host's /tmp: the test's directory is in /dev/shm, and the container's
        // `/dev` is a tmpfs of its own.
        let host = std::env::temp_dir().join(format!(
            "moat-srcinroot-{}-{restricted}",
            std::process::id()
        ));
        fs::create_dir_all(&host).unwrap();
        fs::write(host.join("file"), "host\n").unwrap();
        let r = ctx.rootfs();
        let decoy = r.join(host.strip_prefix("/").unwrap());
        fs::create_dir_all(&decoy).unwrap();
        fs::write(decoy.join("file"), "decoy\n").unwrap();
        std::os::unix::fs::symlink(&host, r.join("evil")).unwrap();
        std::os::unix::fs::symlink(host.join("file"), r.join("evil-file")).unwrap();
        let r_s = r.to_str().unwrap();
        ctx.push(
            "/mounts",
            json!({"source": format!("{r_s}/evil"), "destination": "/mnt/e", "type": "bind",
                   "options": ["rbind"]}),
        );
        ctx.push(
            "/mounts",
            json!({"source": format!("{r_s}/evil-file"), "destination": "/mnt/f", "type": "bind",
                   "options": ["bind"]}),
        );
        if restricted {
            ctx.restricted();
        }
        ctx.sh("cat /mnt/e/file /mnt/f");
        let (out, err) = run_to_end(&ctx, "c");
        fs::remove_dir_all(&host).unwrap();
        assert_eq!(out, "decoy\ndecoy\n", "restricted={restricted}: {err}");
    }
}

/// runc's mounts.bats "mount order, container idmap source" (and its userns variant): the
/// binds whose sources are inside the rootfs, below earlier mounts, are idmapped (the init
/// clones them there, the parent idmaps the copy). The tree is found whole on `/final`, and
/// a root-owned file on `/final`'s own mount shows the mount's mapping: host id `HOST`
/// without a user namespace, container root with one mapping 0 to `HOST` too; on `/mnt`,
/// the same file is not idmapped (host root; `nobody` in the user namespace).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn idmapped_bind_sources_inside_the_rootfs_are_found_after_earlier_mounts() {
    if !require_root() {
        return;
    }
    const HOST: u32 = 3_300_000_000;
    let map = json!([{"containerID": 0, "hostID": HOST, "size": 65536}]);
    for userns in [false, true] {
        let mut ctx = Ctx::new("idmaporder");
        let r = ctx.rootfs();
        let r_s = r.to_str().unwrap().to_string();
        fs::create_dir_all(r.join("mnt")).unwrap();
        fs::create_dir_all(r.join("final")).unwrap();
        let bs = ctx.dir.join("bind-src");
        for sub in ["a/x", "b/y", "c/z"] {
            fs::create_dir_all(bs.join(sub)).unwrap();
            fs::write(bs.join(sub).join("file"), format!("{sub}\n")).unwrap();
            let top = &sub[..1];
            std::os::unix::fs::symlink(top, bs.join(format!("sym-{top}"))).unwrap();
        }
        fs::write(bs.join("a/top"), "top\n").unwrap();
        fs::set_permissions(&bs, fs::Permissions::from_mode(0o750)).unwrap();
        if userns {
            ctx.push("/linux/namespaces", json!({"type": "user"}));
            ctx.set("/linux/uidMappings", map.clone())
                .set("/linux/gidMappings", map.clone());
        }
        let bs_s = bs.to_str().unwrap();
        for (src, dst, idmap) in [
            (format!("{bs_s}/a"), "/mnt".to_string(), false),
            (format!("{bs_s}/sym-b"), "/mnt/x".to_string(), false),
            (format!("{bs_s}/c"), "/mnt/x/y".to_string(), false),
            (format!("{bs_s}/sym-a"), "/mnt/x/y/z".to_string(), false),
            (format!("{r_s}/mnt/x"), format!("{r_s}/mnt/x/y/z/x"), true),
            (format!("{r_s}/mnt/x/y"), format!("{r_s}/mnt/x/y/z"), true),
            (format!("{r_s}/mnt"), format!("{r_s}/final"), true),
        ] {
            let mut m = json!({"source": src, "destination": dst, "type": "bind",
                               "options": ["rbind", "rprivate"]});
            if idmap {
                m["uidMappings"] = map.clone();
                m["gidMappings"] = map.clone();
            }
            ctx.push("/mounts", m);
        }
        ctx.sh("cat /final/x/y/z/z/x/y/z/x/file; stat -c %u:%g /final/top /mnt/top");
        let (out, err) = run_to_end(&ctx, "c");
        let (idmapped, plain) = if userns {
            ("0:0".to_string(), "65534:65534")
        } else {
            (format!("{HOST}:{HOST}"), "0:0")
        };
        assert_eq!(
            out,
            format!("a/x\n{idmapped}\n{plain}\n"),
            "userns={userns}: {err}"
        );
    }
}

/// The attack on the above: an idmapped bind whose source inside the rootfs is (or
/// passes) a symlink to a host directory or file is resolved inside the rootfs, never on
/// the host: the container gets the rootfs's own directory and file of that name
/// (idmapped), not the host's. Under both policies, with and without a user namespace.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn an_idmapped_bind_source_inside_the_rootfs_never_follows_a_symlink_to_the_host() {
    if !require_root() {
        return;
    }
    const HOST: u32 = 3_300_000_000;
    let map = json!([{"containerID": 0, "hostID": HOST, "size": 65536}]);
    for restricted in [false, true] {
        for userns in [false, true] {
            let mut ctx = Ctx::new("idmapsrcinroot");
            // On the host's /tmp: the test's directory is in /dev/shm, and the container's
            // `/dev` is a tmpfs of its own.
            let host = std::env::temp_dir().join(format!(
                "moat-idmapsrcinroot-{}-{restricted}-{userns}",
                std::process::id()
            ));
            fs::create_dir_all(&host).unwrap();
            fs::write(host.join("file"), "host\n").unwrap();
            let r = ctx.rootfs();
            let decoy = r.join(host.strip_prefix("/").unwrap());
            fs::create_dir_all(&decoy).unwrap();
            fs::write(decoy.join("file"), "decoy\n").unwrap();
            std::os::unix::fs::symlink(&host, r.join("evil")).unwrap();
            std::os::unix::fs::symlink(host.join("file"), r.join("evil-file")).unwrap();
            // Through a relative link climbing out with `..` as well.
            let up = "../".repeat(r.components().count() + 2);
            std::os::unix::fs::symlink(
                format!("{up}{}", host.strip_prefix("/").unwrap().display()),
                r.join("evil-rel"),
            )
            .unwrap();
            // The targets exist: container root may not create them in a rootfs that is
            // host root's.
            for d in ["mnt/e", "mnt/r"] {
                fs::create_dir_all(r.join(d)).unwrap();
            }
            fs::write(r.join("mnt/f"), "").unwrap();
            let r_s = r.to_str().unwrap();
            for (src, dst, opt) in [
                ("evil", "/mnt/e", "rbind"),
                ("evil-file", "/mnt/f", "bind"),
                ("evil-rel", "/mnt/r", "rbind"),
            ] {
                ctx.push(
                    "/mounts",
                    json!({"source": format!("{r_s}/{src}"), "destination": dst,
                           "type": "bind", "options": [opt],
                           "uidMappings": map.clone(), "gidMappings": map.clone()}),
                );
            }
            if userns {
                ctx.push("/linux/namespaces", json!({"type": "user"}));
                ctx.set("/linux/uidMappings", map.clone())
                    .set("/linux/gidMappings", map.clone());
            }
            if restricted {
                ctx.restricted();
            }
            ctx.sh("cat /mnt/e/file /mnt/f /mnt/r/file; stat -c %u /mnt/e/file");
            let (out, err) = run_to_end(&ctx, "c");
            fs::remove_dir_all(&host).unwrap();
            let owner = if userns { 0 } else { HOST };
            assert_eq!(
                out,
                format!("decoy\ndecoy\ndecoy\n{owner}\n"),
                "restricted={restricted} userns={userns}: {err}"
            );
        }
    }
}

/// runc 1.5's bind flags (mounts_sshfs.bats, with its tmpfs fallback): a bind with flag
/// options gets exactly those under OPEN (the source's `ro`, `nosuid`, `nodev`, `noexec`,
/// `nosymfollow` not named are cleared; atime kept unless an atime option is given); with
/// none it keeps the source's. In a user namespace of the container's own the source's
/// lockable flags stay unless named, and naming one to clear fails the create. RESTRICTED
/// applies the options on top of the source's flags (nothing the host set is dropped
/// without being named).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bind_flags_are_the_options_given_and_locked_ones_stay() {
    if !require_root() {
        return;
    }
    const RO: u64 = libc::MS_RDONLY;
    const NOSUID: u64 = libc::MS_NOSUID;
    const NODEV: u64 = libc::MS_NODEV;
    const NOEXEC: u64 = libc::MS_NOEXEC;
    const NOSYMFOLLOW: u64 = 256; // MS_NOSYMFOLLOW
    const NODIRATIME: u64 = libc::MS_NODIRATIME;
    // (user namespace, RESTRICTED, the source's flags, the options, in the container's
    // per-mount options, not there; None: the create fails)
    type Case = (
        bool,
        bool,
        u64,
        &'static str,
        &'static [&'static str],
        Option<&'static [&'static str]>,
    );
    let cases: &[Case] = &[
        (
            false,
            false,
            RO | NOEXEC | NOSYMFOLLOW | NODIRATIME,
            "bind",
            &["ro", "noexec", "nosymfollow", "nodiratime"],
            Some(&["rw"]),
        ),
        (
            false,
            false,
            RO | NOEXEC | NOSYMFOLLOW | NODIRATIME,
            "bind,dev",
            &["rw", "nodiratime"],
            Some(&["ro", "noexec", "nosymfollow"]),
        ),
        (
            false,
            false,
            RO,
            "bind,nosuid,nodev,rprivate",
            &["rw", "nosuid", "nodev"],
            Some(&["ro"]),
        ),
        // Propagation is no flag: the source's flags stay.
        (
            false,
            false,
            RO | NOSUID | NOEXEC,
            "rbind,rprivate",
            &["ro", "nosuid", "noexec"],
            Some(&["rw"]),
        ),
        (
            false,
            false,
            NODEV | NOSUID | NOEXEC,
            "bind,ro",
            &["ro"],
            Some(&["nosuid", "nodev", "noexec"]),
        ),
        (
            true,
            false,
            RO | NOEXEC | NOSYMFOLLOW | NODIRATIME,
            "bind,dev",
            &["ro", "noexec", "nodiratime"],
            Some(&["rw", "nosymfollow"]),
        ),
        (
            true,
            false,
            RO,
            "bind,nosuid,nodev,rprivate",
            &["ro", "nosuid", "nodev"],
            Some(&[]),
        ),
        (true, false, RO, "bind,rw,nosuid,nodev,rprivate", &[], None),
        (
            true,
            false,
            NODEV | NOSUID | NOEXEC,
            "bind,ro",
            &["ro", "nosuid", "nodev", "noexec"],
            Some(&[]),
        ),
        (
            true,
            false,
            NODEV | NOSYMFOLLOW,
            "bind,rw",
            &["rw", "nodev"],
            Some(&["nosymfollow"]),
        ),
        (
            false,
            true,
            NODEV | NOSUID | NOEXEC | RO,
            "bind,nosuid",
            &["ro", "nosuid", "nodev", "noexec"],
            Some(&[]),
        ),
    ];
    let map = json!([{"containerID": 0, "hostID": 3_300_000_000u32, "size": 65536}]);
    for &(userns, restricted, src_flags, opts, there, absent) in cases {
        let what =
            format!("userns={userns} restricted={restricted} source={src_flags:#x} options={opts}");
        let mut ctx = Ctx::new("bindflags");
        let src = HostMount::tmpfs(&ctx.dir.join("src"));
        let t = CString::new(src.0.to_str().unwrap()).unwrap();
        // SAFETY: NUL-terminated path; the flags of a bind remount of the test's tmpfs.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                t.as_ptr(),
                std::ptr::null(),
                (libc::MS_BIND | libc::MS_REMOUNT | src_flags) as libc::c_ulong,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "{what}: remount the source");
        fs::create_dir_all(ctx.rootfs().join("mnt")).unwrap();
        if userns {
            ctx.push("/linux/namespaces", json!({"type": "user"}));
            ctx.set("/linux/uidMappings", map.clone())
                .set("/linux/gidMappings", map.clone());
        }
        if restricted {
            ctx.restricted();
        }
        let options: Vec<&str> = opts.split(',').collect();
        ctx.push(
            "/mounts",
            json!({"destination": "/mnt", "type": "bind", "source": src.0, "options": options}),
        );
        ctx.args(&["cat", "/proc/self/mountinfo"]);
        let Some(absent) = absent else {
            let (c, out) = ctx.create("c");
            let out = out.fails();
            assert!(
                out.stderr.contains("cannot clear locked flags ro")
                    && out.stderr.contains("Operation not permitted"),
                "{what}: {}",
                out.stderr
            );
            ctx.assert_no_trace(&c.id);
            continue;
        };
        let (out, err) = run_to_end(&ctx, "c");
        let (per, _) = mount_opts(&out, "/mnt");
        for o in there {
            assert!(
                per.iter().any(|p| p == o),
                "{what}: {o} missing in {per:?} {err}"
            );
        }
        for o in absent {
            assert!(!per.iter().any(|p| p == o), "{what}: {o} kept in {per:?}");
        }
    }
}
