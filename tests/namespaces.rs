//! Namespaces: created, joined by path, user namespace maps, uts names, time offsets.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use support::*;

const KINDS: [&str; 8] = ["pid", "net", "ipc", "uts", "mnt", "cgroup", "user", "time"];

/// `kind -> link text` as printed by the container's `readlink /proc/self/ns/*`.
fn container_ns(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| {
            let (kind, _) = l.split_once(":[")?;
            Some((kind.to_string(), l.to_string()))
        })
        .collect()
}

fn ns_script() -> String {
    format!(
        "for k in {}; do readlink /proc/self/ns/$k; done",
        KINDS.join(" ")
    )
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn requested_namespaces_are_new_and_the_others_are_the_hosts() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("nsnew");
    // moat spec: pid, network, ipc, uts, mount, cgroup.
    ctx.sh(&ns_script());
    let (out, _) = run_to_end(&ctx, "c");
    let inside = container_ns(&out);
    assert_eq!(inside.len(), KINDS.len(), "{out}");
    for (kind, link) in &inside {
        let host = host_ns(kind);
        if kind == "user" || kind == "time" {
            assert_eq!(*link, host, "{kind} was not requested, so it is the host's");
        } else {
            assert_ne!(*link, host, "{kind} namespace is the host's");
        }
    }
}

/// `moat spec` lists a cgroup namespace exactly where `runc spec` does: on a cgroup v2-only
/// host (cgroup2 mounted at /sys/fs/cgroup), not on a v1 or hybrid one, where runc's tests
/// read the host's cgroup paths from inside the container.
#[test]
fn moat_spec_has_a_cgroup_namespace_only_on_a_cgroup_v2_only_host() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let v2_only = mountinfo.lines().any(|l| {
        let (pre, post) = l.split_once(" - ").unwrap_or((l, ""));
        pre.split(' ').nth(4) == Some("/sys/fs/cgroup") && post.starts_with("cgroup2 ")
    });
    let types: Vec<&str> = moat_default_spec()["linux"]["namespaces"]
        .as_array()
        .expect("namespaces")
        .iter()
        .map(|n| n["type"].as_str().expect("type"))
        .collect();
    let expected: &[&str] = if v2_only {
        &["pid", "network", "ipc", "uts", "mount", "cgroup"]
    } else {
        &["pid", "network", "ipc", "uts", "mount"]
    };
    assert_eq!(types, expected, "cgroup v2 only: {v2_only}");
}

/// runc's delete.bats appends a cgroup namespace to a spec that lists one: a namespace
/// listed twice alike is taken once (a warning), as runc does, and the container runs in
/// a new one; the same type with a path and without is refused, naming the entry, before
/// anything exists.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_namespace_listed_twice_alike_is_taken_once_and_a_conflict_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("nstwice");
    ctx.push("/linux/namespaces", json!({"type": "cgroup"}));
    ctx.sh("readlink /proc/self/ns/cgroup");
    let (out, err) = run_to_end(&ctx, "c");
    assert_ne!(out.trim(), host_ns("cgroup"), "{out}{err}");
    assert!(out.starts_with("cgroup:["), "{out}{err}");
    assert!(
        err.contains("namespace \"cgroup\" listed again; taken once"),
        "{err}"
    );
    ctx.push(
        "/linux/namespaces",
        json!({"type": "cgroup", "path": "/proc/self/ns/cgroup"}),
    );
    let (c, out) = ctx.create("d");
    let out = out.fails();
    assert!(
        out.stderr.contains(
            "namespace \"cgroup\" listed twice, as a new one and as \"/proc/self/ns/cgroup\""
        ),
        "{}",
        out.stderr
    );
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn init_is_pid_1_in_its_pid_namespace() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("pid1");
    ctx.sh("echo $$; ps -o pid,comm | wc -l");
    let (out, _) = run_to_end(&ctx, "c");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "1");
    // header, sh, ps, wc: nothing of the host is visible.
    assert!(lines[1].trim().parse::<u32>().unwrap() <= 4, "{out}");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn without_a_network_namespace_the_host_one_is_shared() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("nsnonet");
    ctx.without_ns("network");
    ctx.args(&["readlink", "/proc/self/ns/net"]);
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out.trim(), host_ns("net"));
}

/// A service on 127.0.0.1, reached from the same container: `lo` must be up in the network
/// namespace moat creates (runc brings it up; down, connect fails with ENETUNREACH).
fn loopback_answers(ctx: &mut Ctx) {
    ctx.sh("nc -l -p 7777 -e echo reached & \
         for i in 1 2 3 4 5 6 7 8 9 10; do nc -w 1 127.0.0.1 7777 && break; sleep 0.2; done; \
         cat /sys/class/net/lo/flags");
    let (out, err) = run_to_end(ctx, "c");
    assert_eq!(
        out, "reached\n0x9\n",
        "lo must be up (IFF_UP|IFF_LOOPBACK): {err}"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn loopback_is_up_in_a_new_network_namespace_under_open() {
    if !require_root() {
        return;
    }
    loopback_answers(&mut Ctx::new("lo-open"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn loopback_is_up_in_a_new_network_namespace_under_restricted() {
    if !require_root() {
        return;
    }
    loopback_answers(Ctx::new("lo-restr").restricted());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn network_namespace_is_joined_by_path() {
    if !require_root() {
        return;
    }
    let netns = NetNs::new(&format!("moat-test-{}", std::process::id()));
    // Something to recognise the namespace by from inside: lo is down in a new one.
    host(&[
        "ip", "netns", "exec", &netns.0, "ip", "link", "set", "lo", "up",
    ]);
    let ino = fs::metadata(netns.path()).expect("netns file").ino();
    let mut ctx = Ctx::new("nsjoin");
    let ns = ctx.config["linux"]["namespaces"].as_array_mut().unwrap();
    for n in ns.iter_mut() {
        if n["type"] == "network" {
            n["path"] = json!(netns.path());
        }
    }
    ctx.sh("readlink /proc/self/ns/net; cat /sys/class/net/lo/flags");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(
        out,
        format!("net:[{ino}]\n0x9\n"),
        "lo must be up (IFF_UP|IFF_LOOPBACK)"
    );
    assert_ne!(format!("net:[{ino}]"), host_ns("net"));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn uts_namespace_has_the_spec_hostname_and_domainname() {
    if !require_root() {
        return;
    }
    let host_name = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut ctx = Ctx::new("uts");
    ctx.set("/hostname", json!("moat-it-host"));
    ctx.set("/domainname", json!("moat.example"));
    ctx.sh("hostname; cat /proc/sys/kernel/domainname");
    let (out, _) = run_to_end(&ctx, "c");
    assert_eq!(out, "moat-it-host\nmoat.example\n");
    assert_eq!(
        fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_name,
        "the host's hostname changed"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn hostname_without_uts_namespace_is_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("utsnone");
    ctx.without_ns("uts");
    ctx.set("/hostname", json!("moat-it-host"));
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert!(out.stderr.contains("hostname"), "{}", out.stderr);
    ctx.assert_no_trace(&c.id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn user_namespace_maps_root_to_100000() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("userns");
    ctx.push("/linux/namespaces", json!({"type": "user"}));
    let map = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    ctx.set("/linux/uidMappings", map.clone());
    ctx.set("/linux/gidMappings", map);
    ctx.sh(
        "cat /proc/self/uid_map /proc/self/gid_map; id -u; readlink /proc/self/ns/user; sleep 30",
    );
    let c = ctx.create_ok("c");
    let pid = c.pid();
    c.start();
    assert!(wait_until(std::time::Duration::from_secs(20), || c
        .stdout()
        .lines()
        .count()
        == 4));
    let out = c.stdout();
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["0", "100000", "65536"], "{out}");
    assert_eq!(lines[1], ["0", "100000", "65536"], "{out}");
    assert_eq!(lines[2], ["0"], "root inside");
    assert_ne!(lines[3][0], host_ns("user"));
    // Seen from the host, the init runs as 100000.
    let status = read(format!("/proc/{pid}/status"));
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["100000"; 4]
    );
    c.kill("KILL").ok();
    c.wait_stopped(std::time::Duration::from_secs(20));
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn time_namespace_applies_boottime_offset() {
    if !require_root() {
        return;
    }
    if !Path::new("/proc/self/ns/time").exists() {
        missing("kernel has no time namespaces");
        return;
    }
    let mut ctx = Ctx::new("timens");
    ctx.push("/linux/namespaces", json!({"type": "time"}));
    let day = 86400;
    ctx.set(
        "/linux/timeOffsets",
        json!({"boottime": {"secs": 10 * day, "nanosecs": 0}, "monotonic": {"secs": day, "nanosecs": 0}}),
    );
    ctx.sh("cat /proc/uptime; readlink /proc/self/ns/time");
    let host_before: f64 = uptime();
    let (out, _) = run_to_end(&ctx, "c");
    let host_after: f64 = uptime();
    let mut lines = out.lines();
    let inside: f64 = lines
        .next()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no uptime in {out:?}"));
    let off = (10 * day) as f64;
    assert!(
        inside >= host_before + off && inside <= host_after + off,
        "uptime inside {inside}, host {host_before}..{host_after}"
    );
    assert_ne!(lines.next().unwrap(), host_ns("time"));
}

fn uptime() -> f64 {
    read("/proc/uptime")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// A user namespace of the spec's (container 0 → host 100000), as runc's userns.bats sets.
fn mapped_userns(ctx: &mut Ctx) {
    ctx.push("/linux/namespaces", json!({"type": "user"}));
    let map = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    ctx.set("/linux/uidMappings", map.clone());
    ctx.set("/linux/gidMappings", map);
}

/// runc's userns.bats "userns with 2 inaccessible mounts" (and "+ exec"): bind sources
/// below 0700 directories of host root, which host uid 100000 (container root) cannot
/// walk. moat's parent clones each source on the host and hands it over by fd (runc
/// opens them before joining the namespace); before, the init cloned them by name inside
/// the user namespace: "clone …: Permission denied".
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bind_sources_closed_to_the_user_namespace_are_mounted() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("usernsclosed");
    mapped_userns(&mut ctx);
    for n in ["1", "2"] {
        let closed = ctx.dir.join(format!("source-inaccessible-{n}"));
        fs::create_dir_all(closed.join("dir")).unwrap();
        fs::write(closed.join("dir/foo.txt"), format!("foo {n}\n")).unwrap();
        fs::set_permissions(&closed, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        ctx.push(
            "/mounts",
            json!({"destination": format!("/tmp/mount-{n}"), "type": "bind",
                   "source": closed.join("dir"), "options": ["bind"]}),
        );
    }
    ctx.sh("cat /tmp/mount-1/foo.txt /tmp/mount-2/foo.txt; sleep 30");
    let c = ctx.create_ok("c");
    c.start();
    assert!(
        wait_until(std::time::Duration::from_secs(20), || c
            .stdout()
            .lines()
            .count()
            == 2),
        "{}{}",
        c.stdout(),
        c.stderr()
    );
    assert_eq!(c.stdout(), "foo 1\nfoo 2\n");
    let out = c.moat(&["exec", &c.id, "cat", "/tmp/mount-2/foo.txt"]).ok();
    assert_eq!(out.stdout, "foo 2\n");
}

/// The attack on handing bind sources over by fd: a recursive bind whose source has a
/// mount on it hiding a file. Cloned by the container's own namespace, the submount is
/// locked (the kernel keeps a less privileged namespace from uncovering what a mount
/// hides); container root must not be able to unmount it and read the file beneath,
/// however the source reached the container: the spec's user namespace, and
/// `moat.userns=auto`'s (whose binds the parent makes too). Before, a tree the parent
/// cloned on the host carried no lock, and the file was read.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_submount_of_a_bind_stays_locked_in_a_user_namespace() {
    if !require_root() {
        return;
    }
    for auto in [false, true] {
        submount_stays_locked(auto);
    }
}

fn submount_stays_locked(auto: bool) {
    let mut ctx = Ctx::new(if auto { "usernslocka" } else { "usernslock" });
    if auto {
        ctx.set("/annotations", json!({"moat.userns": "auto"}));
    } else {
        mapped_userns(&mut ctx);
    }
    // Container root may unmount in its own mount namespace: only a lock can stop it.
    for set in ["bounding", "permitted", "effective"] {
        ctx.push(
            &format!("/process/capabilities/{set}"),
            json!("CAP_SYS_ADMIN"),
        );
    }
    let src = ctx.dir.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("sub/hidden"), "hidden by the mount\n").unwrap();
    let sub = std::ffi::CString::new(src.join("sub").to_str().unwrap()).unwrap();
    // SAFETY: plain mount(2) and umount2(2) calls on a path of this test's own directory.
    let rc = unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            sub.as_ptr(),
            c"tmpfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "tmpfs over src/sub");
    struct Unmount(std::ffi::CString);
    impl Drop for Unmount {
        fn drop(&mut self) {
            // SAFETY: see above.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }
    let _unmount = Unmount(sub);
    ctx.push(
        "/mounts",
        json!({"destination": "/tmp/src", "type": "bind", "source": src,
               "options": ["rbind"]}),
    );
    ctx.sh(
        "test -d /tmp/src/sub && echo bound; grep -c ' /tmp/src/sub ' /proc/self/mountinfo; \
         umount /tmp/src/sub 2>&1; cat /tmp/src/sub/hidden 2>/dev/null || echo covered",
    );
    let (out, err) = run_to_end(&ctx, "c");
    // The submount came with the bind (the attack has something to uncover).
    assert!(out.starts_with("bound\n1\n"), "auto {auto}: {out}{err}");
    assert!(
        !out.contains("hidden by the mount"),
        "auto {auto}: container root uncovered what a host mount hides: {out}"
    );
    assert!(out.ends_with("covered\n"), "auto {auto}: {out}{err}");
}

/// runc's timens.bats "runc run [simple timens + userns]": a time namespace with
/// offsets in a new user namespace, under both policies. The offsets read back inside.
/// Before, the intermediate opened `timens_offsets` as container root, after the user
/// namespace: "Permission denied".
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn time_offsets_apply_in_a_new_user_namespace() {
    if !require_root() {
        return;
    }
    if !Path::new("/proc/self/ns/time").exists() {
        missing("kernel has no time namespaces");
        return;
    }
    for restricted in [false, true] {
        time_offsets_in_userns(restricted);
    }
}

fn time_offsets_in_userns(restricted: bool) {
    let mut ctx = Ctx::new("timensuserns");
    if restricted {
        ctx.restricted();
    }
    mapped_userns(&mut ctx);
    ctx.push("/linux/namespaces", json!({"type": "time"}));
    ctx.set(
        "/linux/timeOffsets",
        json!({"monotonic": {"secs": 7881, "nanosecs": 2718281},
               "boottime": {"secs": 1337, "nanosecs": 3141519}}),
    );
    ctx.args(&["cat", "/proc/self/timens_offsets"]);
    let (out, err) = run_to_end(&ctx, "c");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(
        rows.contains(&vec!["monotonic", "7881", "2718281"])
            && rows.contains(&vec!["boottime", "1337", "3141519"]),
        "restricted {restricted}: {out}{err}"
    );
}

/// runc's run.bats "runc run [joining existing container namespaces]": a container with
/// a user namespace and a time namespace with offsets, and a second one that joins every
/// namespace of the first by `/proc/<pid>/ns/*` but its mount namespace (new; runc's
/// empty path). The second sees the first's processes, id maps and time offsets, under
/// both policies (nothing joined is the host's).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_container_joins_every_namespace_of_one_with_userns_and_timens() {
    if !require_root() {
        return;
    }
    if !Path::new("/proc/self/ns/time").exists() {
        missing("kernel has no time namespaces");
        return;
    }
    for restricted in [false, true] {
        join_every_namespace(restricted);
    }
}

fn join_every_namespace(restricted: bool) {
    let mut ctx = Ctx::new("joinall");
    if restricted {
        ctx.restricted();
    }
    ctx.push("/linux/namespaces", json!({"type": "user"}));
    ctx.set(
        "/linux/uidMappings",
        json!([{"containerID": 0, "hostID": 100000, "size": 100}]),
    );
    ctx.set(
        "/linux/gidMappings",
        json!([{"containerID": 0, "hostID": 200000, "size": 200}]),
    );
    ctx.push("/linux/namespaces", json!({"type": "time"}));
    ctx.set(
        "/linux/timeOffsets",
        json!({"monotonic": {"secs": 7881, "nanosecs": 2718281},
               "boottime": {"secs": 1337, "nanosecs": 3141519}}),
    );
    ctx.args(&["sleep", "infinity"]);
    let target = ctx.create_ok("target");
    target.start();
    let pid = target.pid();

    let file = |typ: &str| {
        match typ {
            "network" => "net",
            "mount" => "mnt",
            t => t,
        }
        .to_string()
    };
    for ns in ctx.config["linux"]["namespaces"].as_array_mut().unwrap() {
        let typ = ns["type"].as_str().unwrap().to_string();
        ns["path"] = if typ == "mount" {
            json!("")
        } else {
            json!(format!("/proc/{pid}/ns/{}", file(&typ)))
        };
    }
    let linux = ctx.config["linux"].as_object_mut().unwrap();
    for key in ["uidMappings", "gidMappings", "timeOffsets"] {
        linux.remove(key);
    }
    let attached = ctx.create_ok("attached");
    attached.start();

    let ps = attached.moat(&["exec", &attached.id, "ps", "aux"]).ok();
    let sleeps = ps.stdout.lines().filter(|l| l.contains("sleep infinity"));
    assert_eq!(sleeps.count(), 2, "{}", ps.stdout);
    let map = |f: &str| {
        let out = attached.moat(&["exec", &attached.id, "cat", f]).ok();
        out.stdout
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(map("/proc/self/uid_map"), ["0", "100000", "100"]);
    assert_eq!(map("/proc/self/gid_map"), ["0", "200000", "200"]);
    let offsets = map("/proc/self/timens_offsets").join(" ");
    assert!(
        offsets.contains("monotonic 7881 2718281") && offsets.contains("boottime 1337 3141519"),
        "{offsets}"
    );
    // The attached init first, reaped by this test (its subreaper): the target's pid
    // namespace ends only once every process in it is reaped.
    for c in [&attached, &target] {
        c.kill("KILL").ok();
        c.wait_stopped(std::time::Duration::from_secs(20));
    }
}

/// runc's userns.bats "userns join external namespaces [wrong userns owner]": a
/// container joins a user namespace by path (an earlier container's, kept by a bind
/// mount) and a network namespace that user namespace does not own (one made by the
/// test, owned by the host's). runc joins every other namespace before the user
/// namespace (a permission error skipped and retried after it), so moat does: joined
/// after the user namespace, as container root, setns of that network namespace was
/// refused (EPERM). Under both policies (the network namespace is not the host's).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn a_user_namespace_joined_with_a_network_namespace_it_does_not_own() {
    if !require_root() {
        return;
    }
    for restricted in [false, true] {
        join_userns_and_foreign_netns(restricted);
    }
}

fn join_userns_and_foreign_netns(restricted: bool) {
    let mut ctx = Ctx::new("usernsowner");
    if restricted {
        ctx.restricted();
    }
    /// Bind mounts of namespace files this test made, detached when dropped.
    struct Binds(Vec<std::path::PathBuf>);
    impl Drop for Binds {
        fn drop(&mut self) {
            for p in &self.0 {
                let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
                // SAFETY: umount2(2) of a bind this test made.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
    let mut binds = Binds(Vec::new());
    mapped_userns(&mut ctx);
    ctx.args(&["sleep", "infinity"]);
    let target = ctx.create_ok("target");
    let userns = ctx.dir.join("userns");
    fs::write(&userns, "").unwrap();
    host(&[
        "mount",
        "--bind",
        &format!("/proc/{}/ns/user", target.pid()),
        userns.to_str().unwrap(),
    ]);
    binds.0.push(userns.clone());
    target.moat(&["delete", "--force", &target.id]).ok();

    // A network namespace of the host's user namespace, made here and kept by a bind.
    let netns = ctx.dir.join("netns");
    fs::write(&netns, "").unwrap();
    host(&[
        "unshare",
        "--net",
        "--",
        "mount",
        "--bind",
        "/proc/self/ns/net",
        netns.to_str().unwrap(),
    ]);
    binds.0.push(netns.clone());

    let path = |p: &Path| json!(p.to_str().unwrap());
    for ns in ctx.config["linux"]["namespaces"].as_array_mut().unwrap() {
        match ns["type"].as_str().unwrap() {
            "user" => ns["path"] = path(&userns),
            "network" => ns["path"] = path(&netns),
            _ => {}
        }
    }
    let linux = ctx.config["linux"].as_object_mut().unwrap();
    linux.remove("uidMappings");
    linux.remove("gidMappings");
    // As runc's test: sysfs needs the network namespace's owner; the host's /sys instead
    // (RESTRICTED refuses that bind, and mounts the host's /sys read-only itself).
    for m in ctx.config["mounts"].as_array_mut().unwrap() {
        if m["type"] == "sysfs" && !restricted {
            *m = json!({"destination": m["destination"], "type": "bind", "source": "/sys",
                        "options": ["rbind"]});
        }
    }
    let c = ctx.create_ok("ctr");
    c.start();
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    for (link, want) in [
        ("/proc/self/ns/user", format!("user:[{}]", ino(&userns))),
        ("/proc/self/ns/net", format!("net:[{}]", ino(&netns))),
    ] {
        let out = c.moat(&["exec", &c.id, "readlink", link]).ok();
        assert_eq!(out.stdout.trim(), want, "restricted {restricted}");
    }
    c.kill("KILL").ok();
    c.wait_stopped(std::time::Duration::from_secs(20));
}
