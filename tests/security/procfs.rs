//! CVE-2025-52881 and its relatives: moat's own reads and writes of `/proc` misdirected by
//! a mount inside the container's `/proc`.
//!
//! The attacker here is a createContainer hook. It runs in the container's mount
//! namespace after moat has mounted the container's procfs (at `<rootfs>/proc` before
//! pivot_root) and before moat writes sysctls and reads `setgroups` and `cap_last_cap`:
//! exactly the window a racing container with shared mounts has in runc's advisory (a
//! mount made in a peer of the container's procfs mount lands in it the same way), without
//! the race, so every run hits. The hook only mounts **procfs files over procfs files**
//! (or over a procfs file with a regular file for `setgroups`), which an "is it on
//! procfs" check on the opened file cannot tell apart.
//!
//! Each attack succeeded against the by-name code this replaced (the sysctl landed in
//! the other file; a uid-1000 process kept group 0; the bounding set kept every
//! capability above 1); moat now reaches these files only through a procfs instance of
//! its own (`src/linux/procfs.rs`), where no such mount exists.

use std::fs;
use std::os::unix::process::CommandExt;

use crate::support::*;
use crate::{ctx, BOTH};

/// A createContainer hook running `script` with `$P` = the container's procfs as the
/// hook sees it (`<rootfs>/proc`, before pivot_root).
fn hook(ctx: &Ctx, script: &str) -> Value {
    json!({
        "path": "/bin/sh",
        "args": ["sh", "-euc", script],
        "env": [
            "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
            format!("P={}/proc", ctx.rootfs().display()),
        ],
    })
}

/// The mount points of `pid`'s mount namespace.
fn mount_points(pid: i32) -> Vec<String> {
    read(format!("/proc/{pid}/mountinfo"))
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(String::from))
        .collect()
}

#[track_caller]
fn assert_mounted(pid: i32, point: &str) {
    assert!(
        mount_points(pid).iter().any(|p| p == point),
        "the attack was not staged: no mount at {point} in {:?}",
        mount_points(pid)
    );
}

/// A sysctl the spec sets is written to that sysctl, although a bind of another sysctl
/// covers it in the container's `/proc/sys`. Both are ipc-namespace sysctls, read back
/// from the container's ipc namespace through the host's procfs; the same redirect by
/// name reaches host-global files (`kernel/core_pattern`), which this test does not touch.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn sysctl_write_is_not_redirected_by_a_bind_over_its_proc_file() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("pfsysctl", policy);
        ctx.set("/linux/sysctl", json!({"kernel.shmmni": "1234"}));
        ctx.push(
            "/hooks/createContainer",
            hook(
                &ctx,
                "mount --bind $P/sys/kernel/msgmni $P/sys/kernel/shmmni",
            ),
        );
        ctx.args(&["true"]);
        let c = ctx.create_ok("c");
        let pid = c.pid();
        assert_mounted(pid, "/proc/sys/kernel/shmmni");
        let ipc = format!("--ipc=/proc/{pid}/ns/ipc");
        let got = |key: &str| {
            host(&["nsenter", &ipc, "cat", &format!("/proc/sys/kernel/{key}")])
                .trim()
                .to_string()
        };
        assert_eq!(
            got("shmmni"),
            "1234",
            "{policy:?}: linux.sysctl kernel.shmmni was not written to kernel.shmmni"
        );
        assert_ne!(
            got("msgmni"),
            "1234",
            "{policy:?}: the write to kernel.shmmni landed in kernel.msgmni"
        );
    }
}

/// Runs moat with supplementary group 0 (the groups moat's own caller may have), which a
/// container process must not keep.
fn with_group_0(cmd: &mut std::process::Command) {
    // SAFETY: setgroups between fork and exec in the child, touching nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let g: libc::gid_t = 0;
            if libc::setgroups(1, &g) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn groups_line(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .unwrap_or_else(|| panic!("no Groups line in {out:?}"))
        .trim()
        .to_string()
}

/// `process.user` uid 1000 gid 1000 without additionalGids gets no supplementary group,
/// although the container's `/proc/1/setgroups` (the init's, which `/proc/self` names) is
/// a bind of the `setgroups` file of a process in another user namespace, which says
/// `deny` — believing it, moat skipped setgroups and the process kept moat's group 0.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn fake_setgroups_deny_does_not_keep_moats_groups() {
    if !require_root() {
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("pfgroups", policy);
        ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
        ctx.sh("grep -E '^(Uid|Gid|Groups):' /proc/self/status");
        // A process of the container's pid namespace in a user namespace of its own whose
        // setgroups is "deny" (unshare -r writes it); its file is bound over the init's.
        ctx.push(
            "/hooks/createContainer",
            hook(
                &ctx,
                "unshare -U -r sleep 600 </dev/null >/dev/null 2>&1 & p=$!
                 i=0
                 until [ \"$(cat $P/$p/setgroups 2>/dev/null)\" = deny ]; do
                   i=$((i+1)); [ $i -lt 500 ]; sleep 0.01
                 done
                 mount --bind $P/$p/setgroups $P/1/setgroups",
            ),
        );
        let id = ctx.id("c");
        let mut cmd = ctx.cmd();
        cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
        with_group_0(&mut cmd);
        let mut c = ctx.guard(&id);
        c.out = Some(ctx.run(cmd).ok());
        assert_mounted(c.pid(), "/proc/1/setgroups");
        let out = c.start_and_wait();
        assert!(out.contains("Uid:\t1000\t1000\t1000\t1000"), "{out}");
        assert_eq!(
            groups_line(&out),
            "",
            "{policy:?}: the uid-1000 process kept supplementary groups: {out}"
        );
    }
}

fn cap_bnd(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap_or_else(|| panic!("no CapBnd line in {out:?}"))
        .trim()
        .to_string()
}

/// The bounding set is the spec's, although the container's
/// `/proc/sys/kernel/cap_last_cap` is a bind of a sysctl reading `1`: moat drops every
/// capability up to the last one the kernel knows, and reading that number by name made it
/// drop only capabilities 0 and 1 (an OPEN container's setuid binaries then regain all the
/// others).
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn fake_cap_last_cap_does_not_shrink_the_bounding_set_drop() {
    if !require_root() {
        return;
    }
    if read("/proc/sys/kernel/ctrl-alt-del")
        .trim()
        .parse::<u32>()
        .unwrap_or(99)
        > 5
    {
        eprintln!("SKIPPED: /proc/sys/kernel/ctrl-alt-del does not read a small number");
        return;
    }
    for policy in BOTH {
        let mut ctx = ctx("pflastcap", policy);
        ctx.sh("grep CapBnd /proc/self/status");
        let (want, _) = run_to_end(&ctx, "plain");
        ctx.push(
            "/hooks/createContainer",
            hook(
                &ctx,
                "mount --bind $P/sys/kernel/ctrl-alt-del $P/sys/kernel/cap_last_cap",
            ),
        );
        let c = ctx.create_ok("attacked");
        assert_mounted(c.pid(), "/proc/sys/kernel/cap_last_cap");
        let got = c.start_and_wait();
        assert_eq!(
            cap_bnd(&got),
            cap_bnd(&want),
            "{policy:?}: the bounding set is wider with a fake cap_last_cap"
        );
    }
}

/// Where an attack cannot be staged on this host (LSM attributes: no AppArmor or SELinux
/// here; `timens_offsets`: written by the intermediate before any container mount exists),
/// the trace shows the mechanism: every `/proc` file moat's container-side processes touch
/// during a create is opened with `openat2` relative to a descriptor, by number and with
/// `RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS`, and none is
/// named by a path string. The create is a staged one (a time namespace with offsets), with
/// a sysctl and a non-root user, so the intermediate's and the init's accesses are both in
/// it. The one exception is listed in `ALLOWED`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn container_side_proc_accesses_go_through_moats_own_handle() {
    if !require_root() {
        return;
    }
    if !std::path::Path::new("/proc/self/ns/time").exists() {
        eprintln!("SKIPPED: kernel has no time namespaces");
        return;
    }
    if std::process::Command::new("strace")
        .arg("-V")
        .run_output()
        .is_err()
    {
        missing("no strace");
        return;
    }
    // `linux/devices.rs` asks whether the host has /proc/kcore (to link /dev/core) with a
    // stat by name: before pivot_root, in the copy of moat's own mount namespace.
    const ALLOWED: [&str; 1] = ["\"/proc/kcore\""];
    let mut ctx = ctx("pftrace", crate::Policy::Open);
    ctx.push("/linux/namespaces", json!({"type": "time"}));
    ctx.set(
        "/linux/timeOffsets",
        json!({"monotonic": {"secs": 86400, "nanosecs": 0}}),
    );
    ctx.set("/linux/sysctl", json!({"kernel.shmmni": "1234"}));
    ctx.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    ctx.args(&["true"]);
    let trace = ctx.dir.join("trace");
    let id = ctx.id("c");
    let mut cmd = std::process::Command::new("strace");
    cmd.args([
        "-f",
        "-qq",
        "-s",
        "256",
        "-e",
        "trace=%file,readlinkat",
        "-o",
    ])
    .arg(&trace)
    .arg(MOAT)
    .arg("--root")
    .arg(&ctx.root)
    .args(["run", "--bundle", &ctx.bundle_str(), &id]);
    // `run`: the init execs `true` and exits, so strace ends with it.
    let _c = ctx.guard(&id);
    ctx.run(cmd).ok();
    let text = fs::read_to_string(&trace).expect("trace");
    let pid_of = |l: &str| l.split_whitespace().next().unwrap_or("").to_string();
    let parent = pid_of(text.lines().next().expect("an empty trace"));
    // Each child's lines up to its successful execve (after it, the container's own).
    let mut execd = std::collections::HashSet::new();
    let mut child = Vec::new();
    for l in text.lines() {
        let pid = pid_of(l);
        if pid == parent || execd.contains(&pid) {
            continue;
        }
        // (An interleaved call is split: "execve(… <unfinished …>", "<… execve resumed>…".)
        let execve = l.contains(" execve(") || l.contains("<... execve resumed>");
        if execve && l.ends_with(" = 0") {
            execd.insert(pid);
            continue;
        }
        child.push(l);
    }
    assert!(!child.is_empty(), "no child in the trace");
    let by_name: Vec<&&str> = child
        .iter()
        .filter(|l| l.contains("\"/proc") && !ALLOWED.iter().any(|a| l.contains(a)))
        // A symlink's target is text, not a lookup (/dev/fd -> /proc/self/fd).
        .filter(|l| !l.contains("symlinkat(\"/proc"))
        .collect();
    assert!(
        by_name.is_empty(),
        "/proc named by path in a container-side process:\n{by_name:#?}"
    );
    let resolve =
        "resolve=RESOLVE_NO_XDEV|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH";
    let through_handle = |what: &str, pattern: &dyn Fn(&str) -> bool| {
        let hits: Vec<&&str> = child
            .iter()
            .filter(|l| l.contains("openat2(") && pattern(l))
            .collect();
        assert!(!hits.is_empty(), "{what}: no openat2 in\n{child:#?}");
        for l in hits {
            assert!(l.contains(resolve), "{what}: {l}");
            assert!(l.contains(" = "), "{what}: {l}");
        }
    };
    let numbered = |l: &str, file: &str| {
        l.split('"').nth(1).is_some_and(|p| {
            let parts: Vec<&str> = p.split('/').collect();
            let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            match parts[..] {
                [pid, "task", tid, f] => num(pid) && num(tid) && f == file,
                [pid, f] => num(pid) && f == file,
                _ => false,
            }
        })
    };
    through_handle("sysctl", &|l| l.contains("\"sys/kernel/shmmni\""));
    through_handle("timens_offsets", &|l| numbered(l, "timens_offsets"));
    through_handle("setgroups", &|l| numbered(l, "setgroups"));
}

/// The handle is taken in every way moat enters a container, and a uid-1000 process
/// started with moat's group 0 ends with no supplementary group while the spec's sysctl
/// is applied: a create that joins another container's pid namespace (staged: the
/// intermediate's handle, the init's own), one with a new user namespace mapping root to
/// 100000 (direct), and an `exec --user 1000:1000` into a running container (the exec
/// child, in the container's pid namespace, before it joins the mount namespace).
/// Rootless creates and execs are in `tests/rootless.rs`.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn handle_works_when_joining_a_pid_namespace_in_a_user_namespace_and_for_exec() {
    if !require_root() {
        return;
    }
    let script = "cat /proc/sys/kernel/shmmni; grep -E '^(Uid|Groups):' /proc/self/status";
    let check = |what: &str, out: &str, sysctl: &str| {
        assert!(
            out.starts_with(&format!("{sysctl}\n")),
            "{what}: sysctl: {out}"
        );
        assert!(
            out.contains("Uid:\t1000\t1000\t1000\t1000"),
            "{what}: {out}"
        );
        assert_eq!(
            groups_line(out),
            "",
            "{what}: supplementary groups kept: {out}"
        );
    };
    let create_with_group_0 = |ctx: &Ctx, name: &str| {
        let id = ctx.id(name);
        let mut cmd = ctx.cmd();
        cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
        with_group_0(&mut cmd);
        let mut c = ctx.guard(&id);
        c.out = Some(ctx.run(cmd).ok());
        c
    };
    let mut a = ctx("pfmodesa", crate::Policy::Open);
    a.args(&["sleep", "60"]);
    a.set("/linux/sysctl", json!({"kernel.shmmni": "2345"}));
    let ca = a.create_ok("a");
    ca.start();
    let apid = ca.pid();

    let mut b = ctx("pfmodesb", crate::Policy::Open);
    for n in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
        if n["type"] == "pid" {
            n["path"] = json!(format!("/proc/{apid}/ns/pid"));
        }
    }
    b.set("/linux/sysctl", json!({"kernel.shmmni": "2345"}));
    b.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    b.sh(script);
    let cb = create_with_group_0(&b, "joined");
    check("joined pid namespace", &cb.start_and_wait(), "2345");

    let mut u = ctx("pfmodesu", crate::Policy::Open);
    let map = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    u.push("/linux/namespaces", json!({"type": "user"}))
        .set("/linux/uidMappings", map.clone())
        .set("/linux/gidMappings", map);
    u.set("/linux/sysctl", json!({"kernel.shmmni": "2345"}));
    u.set("/process/user", json!({"uid": 1000, "gid": 1000}));
    u.sh(script);
    let cu = create_with_group_0(&u, "userns");
    check("new user namespace", &cu.start_and_wait(), "2345");

    let mut cmd = a.cmd();
    cmd.args(["exec", "--user", "1000:1000", &ca.id, "sh", "-c", script]);
    with_group_0(&mut cmd);
    let out = a.run(cmd).ok().stdout;
    check("exec", &out, "2345");
}

/// runc's no_pivot.bats: with `--no-pivot` the host's tree stays in the container's mount
/// namespace below the chroot, with the host's full `/proc`. The kernel lets a user
/// namespace mount a fresh procfs only where a fully visible one exists in its mount
/// namespace, so a container process that makes its own user (and pid, mount) namespace
/// could mount a bare `/proc` — no masked paths, a writable `/proc/sysrq-trigger` — were
/// that one still there. moat detaches the host's full procfs/sysfs mounts before the
/// move: the mount is refused. OPEN (RESTRICTED's seccomp refuses `unshare` anyway); the
/// same user namespace without the mount shows the attack could run.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn no_pivot_leaves_no_fully_visible_procfs_for_a_nested_user_namespace() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("nopivot-proc");
    // CAP_SETFCAP: `unshare -r` maps uid 0 onto itself.
    for set in ["bounding", "permitted", "effective"] {
        ctx.push(
            &format!("/process/capabilities/{set}"),
            json!("CAP_SETFCAP"),
        );
    }
    ctx.sh("unshare -mrpf sh -c 'echo in-userns' 2>&1; \
         unshare -mrpf sh -c 'mount -t proc none /proc && echo MOUNTED' 2>&1; echo done");
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let c = ctx.guard(&id);
    let created = ctx
        .moat(&["create", "--no-pivot", "--bundle", &b, &id])
        .ok();
    c.start();
    c.wait_stopped(std::time::Duration::from_secs(20));
    let out = created.stdout_now();
    if !out.contains("in-userns") {
        missing(&format!(
            "no_pivot_leaves_no_fully_visible_procfs: no user namespace inside the container \
             here: {out}"
        ));
        return;
    }
    assert!(out.contains("done"), "{out}");
    assert!(
        !out.contains("MOUNTED"),
        "a nested user namespace mounted a fresh procfs under --no-pivot: {out}"
    );
}
