//! T1 (CVE-2019-5736): overwriting the runtime binary through `/proc/<pid>/exe`.
//!
//! moat is copied to a writable file on a writable filesystem and every moat call of the
//! test runs that copy. Container A's init is a watcher (`probe exe-watch`) that, for the
//! whole test, opens `/proc/<pid>/exe` of every process it can see for writing, keeps
//! read handles of any process whose exe is the moat copy (by inode), and keeps trying to
//! reopen those handles for writing after the process is gone — the original exploit's
//! move. Meanwhile the test
//! * runs `moat exec` into A, of a harmless command (the joining process is a fork of moat
//!   until its execve) and of `/evil.sh`, a `#!/proc/self/exe` script, which makes the
//!   kernel run the moat binary itself inside the container;
//! * creates and starts containers that join A's pid namespace (their inits, forks of
//!   moat, are visible to A from the moment they exist) with `/evil.sh` as entrypoint.
//!
//! Afterwards the copy must be byte-for-byte unchanged and no write may have succeeded,
//! and the watcher must have met moat's forks (refused with EACCES: they are non-dumpable),
//! so the attack really ran. Under OPEN the container's root is the host's root with no
//! filter: only moat's read-only re-execution (exeseal) and non-dumpable forks stand in
//! the way.
//!
//! (On the kernels seen so far the `#!/proc/self/exe` exec fails with ENOENT for a moat
//! fork inside a container — the interpreter lookup does not reach moat's binary outside
//! the container's mounts — so moat never runs inside and the watcher's `saw` stays 0. The
//! test does not rely on that: were moat to run inside, its exe is the read-only bind.)

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{ctx, install, probe, Policy};

const WATCH_SECS: u64 = 8;

fn evil_script(ctx: &Ctx) {
    let p = ctx.rootfs().join("evil.sh");
    fs::write(&p, "#!/proc/self/exe\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
}

fn exe_overwrite(policy: Policy) {
    let Some(probe) = probe() else {
        return;
    };
    let mut a = ctx("t1", policy);
    install(&a, probe, "probe");
    evil_script(&a);
    let copy = a.dir.join("moat-copy");
    fs::copy(MOAT, &copy).unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    let before = fs::read(&copy).unwrap();
    let ino = fs::metadata(&copy).unwrap().ino();
    a.args(&[
        "/bin/probe",
        "exe-watch",
        &ino.to_string(),
        &WATCH_SECS.to_string(),
    ]);
    let moat = |ctx: &Ctx, args: &[&str]| {
        let mut c = ctx.cmd_with(&copy);
        c.args(args);
        ctx.run(c)
    };
    let id = a.id("a");
    let mut ca = a.guard(&id);
    ca.out = Some(moat(&a, &["create", "--bundle", &a.bundle_str(), &id]).ok());
    moat(&a, &["start", &id]).ok();
    let apid = ca.pid();

    // Containers joining A's pid namespace, entrypoint #!/proc/self/exe.
    let mut b = ctx("t1b", policy);
    evil_script(&b);
    for n in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
        if n["type"] == "pid" {
            n["path"] = json!(format!("/proc/{apid}/ns/pid"));
        }
    }
    b.args(&["/evil.sh"]);

    let start = Instant::now();
    let mut rounds = 0;
    while start.elapsed() < Duration::from_secs(WATCH_SECS - 2) {
        // The #! exec fails (moat-in-the-container rejects its arguments); that is fine.
        moat(&a, &["exec", &id, "/evil.sh"]);
        moat(&a, &["exec", &id, "/bin/true"]).ok();
        let bid = b.id(&format!("b{rounds}"));
        let _g = b.guard(&bid);
        moat(&b, &["create", "--bundle", &b.bundle_str(), &bid]).ok();
        moat(&b, &["start", &bid]).ok();
        rounds += 1;
        reap();
    }
    // A's init cannot finish exiting while processes of its pid namespace (B's inits,
    // children of this test process) are unreaped zombies: reap while waiting.
    assert!(
        wait_until(Duration::from_secs(WATCH_SECS + 20), || {
            reap();
            is_gone(apid)
        }),
        "{policy:?}: watcher still running"
    );
    ca.wait_stopped(Duration::from_secs(20));
    let out = ca.stdout();
    let summary = out
        .lines()
        .find(|l| l.starts_with("exe-watch "))
        .unwrap_or_else(|| panic!("{policy:?}: watcher gave no summary: {out}{}", ca.stderr()));
    eprintln!("T1 {policy:?}: {rounds} rounds; {summary}");
    assert!(
        !out.contains("WROTE"),
        "{policy:?}: the container wrote to the moat binary:\n{out}"
    );
    assert!(
        fs::read(&copy).unwrap() == before,
        "{policy:?}: the moat binary changed"
    );
    assert!(rounds >= 3, "{policy:?}: only {rounds} rounds");
    let count = |k: &str| count_in(summary, k);
    assert!(
        count("eacces") > 0,
        "{policy:?}: the watcher never met a moat fork; the test proved nothing: {summary}"
    );
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t1_proc_self_exe_overwrite_restricted() {
    if !require_root() {
        return;
    }
    exe_overwrite(Policy::Restricted);
}

#[test]
#[ignore = "root: real containers (scripts/test runs it with --include-ignored)"]
fn t1_proc_self_exe_overwrite_open() {
    if !require_root() {
        return;
    }
    exe_overwrite(Policy::Open);
}
