//! Bad bundles and bad calls: each fails with exit 1 and one stderr line naming what is
//! wrong, and leaves no state directory and no cgroup. A create killed half-way is
//! cleaned up by `delete --force`.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::*;

/// `moat create` must fail with one stderr line containing every `needle`, and leave
/// nothing behind.
#[track_caller]
fn create_fails(ctx: &Ctx, needles: &[&str]) -> Out {
    let (c, out) = ctx.create("c");
    let out = out.fails();
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr_lines().len(),
        1,
        "one line expected: {}",
        out.stderr
    );
    for n in needles {
        assert!(out.stderr.contains(n), "{n:?} not in {}", out.stderr);
    }
    ctx.assert_no_trace(&c.id);
    out
}

/// Rust's start-up reopens closed 0-2 on /dev/null, and moat's own entry point must too:
/// otherwise the first file moat opens (here the `--log` file) takes fd 1, and what it
/// prints on stdout (here `list`'s table) lands in that file.
#[test]
fn closed_stdout_is_reopened_on_dev_null() {
    let dir = std::env::temp_dir().join(format!("moat-stdio-{}", std::process::id()));
    fs::create_dir_all(dir.join("root")).unwrap();
    let log = dir.join("log.json");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", "exec \"$0\" --root \"$1\" --log \"$2\" list >&-"])
        .arg(env!("CARGO_BIN_EXE_moat"))
        .arg(dir.join("root"))
        .arg(&log)
        .run_output()
        .unwrap();
    let logged = fs::read_to_string(&log).unwrap_or_default();
    let _ = fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(logged, "", "stdout went into the log file");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn malformed_config_json() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("badjson");
    ctx.write_config();
    fs::write(
        ctx.bundle.join("config.json"),
        "{\"ociVersion\": \"1.0.2\", ",
    )
    .unwrap();
    // Ctx::create rewrites config.json; call moat directly.
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let _g = ctx.guard(&id);
    let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT).fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("config.json"), "{}", out.stderr);
    ctx.assert_no_trace(&id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn wrongly_typed_field_is_named() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("badtype");
    ctx.set("/process/user/uid", json!("root"));
    create_fails(&ctx, &["process.user.uid"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn uid_that_setresuid_would_ignore() {
    if !require_root() {
        return;
    }
    // 4294967295 is (uid_t)-1, "unchanged" to setresuid: the process would stay root.
    let mut ctx = Ctx::new("baduid");
    ctx.set("/process/user/uid", json!(4294967295u32));
    create_fails(&ctx, &["process.user.uid", "4294967295", "out of range"]);
    ctx.set("/process/user/uid", json!(0));
    ctx.set("/process/user/gid", json!(2147483648u32));
    create_fails(&ctx, &["process.user.gid", "2147483648"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn missing_config_json() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("noconfig");
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let _g = ctx.guard(&id);
    // Nothing written: Ctx::run would write it.
    let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT).fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("config.json"), "{}", out.stderr);
    ctx.assert_no_trace(&id);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn missing_rootfs() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("norootfs");
    ctx.set("/root/path", json!("no-such-rootfs"));
    create_fails(&ctx, &["root.path", "no-such-rootfs"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn unsupported_oci_version() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("ociversion");
    ctx.set("/ociVersion", json!("2.0.0"));
    create_fails(&ctx, &["ociVersion", "2.0.0"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn unknown_namespace_type() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("badns");
    ctx.push("/linux/namespaces", json!({"type": "galaxy"}));
    create_fails(&ctx, &["linux.namespaces[", "].type", "galaxy"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn bind_mount_with_missing_source() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("badbind");
    ctx.push(
        "/mounts",
        json!({"destination": "/mnt", "type": "bind", "source": "/no/such/source", "options": ["rbind"]}),
    );
    create_fails(&ctx, &["mounts[", "].source", "/no/such/source"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn relative_cwd() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("relcwd");
    ctx.set("/process/cwd", json!("tmp"));
    create_fails(&ctx, &["process.cwd"]);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn invalid_container_id() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("badid");
    ctx.write_config();
    for id in ["../x", "a/b", ".."] {
        let out = ctx
            .moat(&["create", "--bundle", &ctx.bundle_str(), id])
            .fails();
        assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("invalid container id"),
            "{id}: {}",
            out.stderr
        );
    }
    assert!(
        !ctx.dir.join("x").exists(),
        "created outside the state root"
    );
    assert!(!ctx.root.join("a").exists());
    assert!(
        !ctx.root.exists() || ctx.moat(&["list", "-q"]).ok().stdout.is_empty(),
        "a container left in the state root"
    );
    assert!(!Path::new("/sys/fs/cgroup/pids/x").exists());
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn duplicate_id_fails_and_leaves_the_first_unharmed() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("dup");
    ctx.sh("echo first");
    let first = ctx.create_ok("c");
    let st = first.state();
    ctx.sh("echo second");
    let (_second, out) = ctx.create("c");
    let out = out.fails();
    assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("container with id exists"),
        "{}",
        out.stderr
    );
    // Same record, same process, still startable.
    let again = first.state();
    assert_eq!(again["pid"], st["pid"]);
    assert_eq!(again["created"], st["created"]);
    assert_eq!(again["status"], "created");
    let pid = i32::try_from(again["pid"].as_i64().unwrap()).unwrap();
    let cg = v1_cgroup_dir(pid, "pids").unwrap();
    assert!(cg.is_dir());
    assert_eq!(first.start_and_wait(), "first\n");
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn create_killed_mid_way_is_cleaned_by_delete_force() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("killed");
    let marker = ctx.dir.join("hook.pid");
    ctx.set(
        "/hooks/createRuntime",
        json!([{"path": "/bin/sh",
                "args": ["sh", "-c", format!("echo $$ > {}; exec sleep 30", marker.display())]}]),
    );
    ctx.args(&["sleep", "30"]);
    let id = ctx.id("c");
    let b = ctx.bundle_str();
    let c = ctx.guard(&id);
    let create = ctx.moat_bg(&["create", "--bundle", &b, &id]);
    let t = Duration::from_secs(20);
    assert!(
        wait_until(t, || fs::read_to_string(&marker)
            .is_ok_and(|s| s.ends_with('\n'))),
        "the hook never ran"
    );
    let hook: i32 = read(&marker).trim().parse().unwrap();
    let cg = Path::new("/sys/fs/cgroup/pids/moat").join(&id);
    let members: Vec<i32> = read(cg.join("cgroup.procs"))
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert!(
        !members.is_empty(),
        "the container's init is in its cgroup by now"
    );
    // SAFETY: kill takes integers only.
    unsafe { libc::kill(create.pid(), libc::SIGKILL) };
    let out = create.wait(t);
    assert_eq!(out.code, 128 + libc::SIGKILL);
    // The hook is moat's child, not the container's: end it ourselves.
    // SAFETY: kill takes integers only.
    unsafe { libc::kill(hook, libc::SIGKILL) };
    assert!(
        ctx.state_dir(&id).exists(),
        "an interrupted create leaves its state"
    );
    let out = c.moat(&["delete", "--force", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    ctx.assert_no_trace(&id);
    for pid in members {
        assert!(
            wait_until(t, || is_gone(pid)),
            "container process {pid} left"
        );
    }
    assert!(wait_until(t, || is_gone(hook)));
    reap();
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn missing_config_json_reason_is_not_repeated() {
    if !require_root() {
        return;
    }
    let ctx = Ctx::new("noconfig2");
    let id = ctx.id("c");
    let mut cmd = ctx.cmd();
    cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
    let _g = ctx.guard(&id);
    let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT).fails();
    assert_eq!(
        out.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        out.stderr
    );
}

/// One JSON truth: Go's `encoding/json` (runsc, the engines) reads a key that
/// differs from a field only in case as that field, and takes the last of two equal keys;
/// moat ignored the first and kept the last silently. Both are refused at create, with
/// the JSON path; map keys keep their case and unknown fields stay ignored.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn duplicate_and_case_variant_keys_are_refused() {
    if !require_root() {
        return;
    }
    let mut ctx = Ctx::new("keys");
    let admin = json!(["CAP_SYS_ADMIN"]);
    ctx.set(
        "/process/Capabilities",
        json!({"bounding": admin, "effective": admin, "permitted": admin}),
    );
    create_fails(
        &ctx,
        &[
            r#"config.json: process: "Capabilities" differs only in case from "capabilities"; refused"#,
        ],
    );
    ctx.config["process"]
        .as_object_mut()
        .unwrap()
        .remove("Capabilities");

    // Duplicates are written as text: serde_json's Value cannot hold them.
    for (from, to, needle) in [
        (
            r#""process":{"#,
            r#""process":{"args":["true"],"#,
            r#"config.json: process: duplicate key "args"; refused"#,
        ),
        (
            r#""annotations":{"#,
            r#""annotations":{"a":"1","a":"2","#,
            r#"config.json: annotations: duplicate key "a"; refused"#,
        ),
        (
            r#""ociVersion":"#,
            r#""x":{"y":[{"z":1,"z":2}]},"ociVersion":"#,
            r#"config.json: x.y[0]: duplicate key "z"; refused"#,
        ),
    ] {
        let mut cfg = ctx.config.clone();
        cfg["annotations"]["keep"] = json!("x");
        let text = serde_json::to_string(&cfg).unwrap();
        assert!(text.contains(from), "{from} not in {text}");
        fs::write(ctx.bundle.join("config.json"), text.replacen(from, to, 1)).unwrap();
        // Ctx::create rewrites config.json; call moat directly.
        let id = ctx.id("dup");
        let mut cmd = ctx.cmd();
        cmd.args(["create", "--bundle", &ctx.bundle_str(), &id]);
        let _g = ctx.guard(&id);
        let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT).fails();
        assert_eq!(out.stderr_lines().len(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(needle),
            "{needle:?} not in {}",
            out.stderr
        );
        ctx.assert_no_trace(&id);
    }

    // What is not refused: case variants among map keys, unknown fields.
    ctx.set("/annotations/Foo", json!("1"))
        .set("/annotations/foo", json!("2"))
        .set("/process/fooBar", json!(1))
        .set("/linux/foo", json!({"Bar": 1, "bar": 2}));
    ctx.create_ok("ok");
}

/// Every cgroup hierarchy the host mounts (v1 controllers, named ones, the v2 mount),
/// from mountinfo: a refused create must leave a directory in none of them.
fn cgroup_mounts() -> Vec<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    text.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fstype = post.split(' ').next()?;
            (fstype == "cgroup" || fstype == "cgroup2")
                .then(|| PathBuf::from(pre.split(' ').nth(4).unwrap()))
        })
        .collect()
}

/// A spec the plan refuses leaves nothing because nothing was made: no state directory,
/// no notify socket, no userns range in the host pool, no cgroup in any hierarchy (the
/// fleet's included). `NOTIFY_SOCKET` and `moat.userns=auto` are asked for, so every side
/// effect of create would have had its chance before the check.
#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn refused_spec_makes_nothing() {
    if !require_root() {
        return;
    }
    type Edit = fn(&mut Ctx);
    let cases: [(&str, Edit, &[&str]); 4] = [
        (
            "sysctl",
            |c| {
                c.without_ns("network")
                    .set("/linux/sysctl", json!({"net.ipv4.ip_forward": "1"}));
            },
            &["linux.sysctl.net.ipv4.ip_forward", "refused"],
        ),
        (
            "personality",
            |c| {
                c.set("/linux/personality", json!({"domain": "LINUX64"}));
            },
            &["linux.personality.domain", "LINUX64"],
        ),
        (
            "noargs",
            |c| {
                c.set("/process/args", json!([]));
            },
            &["process.args"],
        ),
        (
            "hostname",
            |c| {
                c.without_ns("uts").set("/hostname", json!("h"));
            },
            &["hostname", "uts namespace"],
        ),
    ];
    for (tag, edit, needles) in cases {
        let mut ctx = Ctx::new(&format!("refused-{tag}"));
        let fleet = format!("/{}-fleet", ctx.id("f"));
        let cfg = ctx.dir.join("moat.toml");
        fs::write(
            &cfg,
            format!("default_policy = \"open\"\n\n[fleet]\ncgroup = \"{fleet}\"\npids = 1000\n"),
        )
        .unwrap();
        ctx.use_config(&cfg);
        ctx.set("/annotations", json!({"moat.userns": "auto"}));
        edit(&mut ctx);
        ctx.write_config();
        let id = ctx.id("c");
        let notify = std::os::unix::net::UnixDatagram::bind(ctx.dir.join("notify.sock")).unwrap();
        let mut cmd = ctx.cmd();
        cmd.env("NOTIFY_SOCKET", ctx.dir.join("notify.sock")).args([
            "create",
            "--bundle",
            &ctx.bundle_str(),
            &id,
        ]);
        let _g = ctx.guard(&id);
        let out = run_cmd(cmd, &ctx.io, CALL_TIMEOUT).fails();
        drop(notify);
        assert_eq!(out.stderr_lines().len(), 1, "{tag}: {}", out.stderr);
        for n in needles {
            assert!(out.stderr.contains(n), "{tag}: {n:?} not in {}", out.stderr);
        }
        assert!(
            !ctx.state_dir(&id).exists(),
            "{tag}: state dir {} made",
            ctx.state_dir(&id).display()
        );
        for m in cgroup_mounts() {
            for dir in [
                m.join("moat").join(&id),
                m.join(fleet.trim_start_matches('/')),
            ] {
                assert!(!dir.exists(), "{tag}: cgroup {} made", dir.display());
            }
        }
        for e in fs::read_dir("/run/moat-userns")
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = fs::read_to_string(e.path()).unwrap_or_default();
            assert!(
                !text.contains(&id),
                "{tag}: userns range {} taken",
                e.path().display()
            );
        }
    }
}
