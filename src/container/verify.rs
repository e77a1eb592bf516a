//! `verify <id>`: read from the kernel what a container really got and compare it with
//! what its policy demands. Exits 1 on any mismatch. The gVisor checks (from the host and
//! through `runsc exec`) are `gvisor::verify`'s.

use anyhow::Context as _;
use serde::Serialize;

use super::{Container, Context, Error, Result};
use crate::linux::attrs::Attrs;
use crate::linux::hostfacts::HostFacts;
use crate::linux::seccomp::Filter;
use crate::linux::{capabilities, exec};
use crate::policy::{self, Decision};
use crate::state::{self, Status};

/// runc-style flags of `moat verify`.
#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    /// `table` or `json`.
    pub format: String,
}

/// What one backend found: its checks and, for gVisor, the policy's changes it does not
/// apply.
pub struct Verdict {
    /// `native` or `gvisor`.
    pub backend: &'static str,
    pub checks: Vec<Check>,
    pub not_applied: Vec<policy::Change>,
}

#[derive(Serialize)]
pub struct Check {
    pub check: String,
    pub expected: String,
    pub actual: String,
    pub ok: bool,
}

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

pub fn verify(ctx: &Context, req: &Request) -> Result<i32> {
    let c = Container::open_read(ctx, &req.id)?;
    let v = c.engine().verify(ctx, &c)?;
    report(
        req,
        c.record.policy.as_str(),
        v.backend,
        &v.checks,
        &v.not_applied,
    )
}

/// The native checks: /proc of the init against the recorded decision and the config.
pub fn native(c: &Container) -> Result<Verdict> {
    let (dir, rec) = (&c.dir, &c.record);
    if !matches!(rec.status(dir), Status::Running | Status::Created) {
        return Err(Error::NotRunning.into());
    }
    let spec = dir.load_spec()?;
    let decision: Option<Decision> = dir.load_decision()?;
    let restricted = rec.policy == policy::Mode::Restricted;
    let cfg = policy::Config::load()?;
    let pid = rec.pid;
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let mut checks = Vec::new();
    let mut add = |check: &str, expected: String, actual: String, ok: bool| {
        checks.push(Check {
            check: check.into(),
            expected,
            actual,
            ok,
        })
    };
    // Capabilities: under RESTRICTED only what the config allows; never inheritable.
    let allowed: u64 = cfg
        .allowed_capabilities
        .iter()
        .filter_map(|c| capabilities::number(c))
        .fold(0, |m, b| m | 1 << b);
    let spec_caps = capabilities::from_saved(spec.process().capabilities.as_ref());
    for (key, want) in [
        ("CapEff", spec_caps.effective),
        ("CapPrm", spec_caps.permitted),
        ("CapBnd", spec_caps.bounding),
        ("CapInh", 0),
        ("CapAmb", spec_caps.ambient),
    ] {
        let got = status_field(&status, key);
        let mask = u64::from_str_radix(&got, 16).unwrap_or(u64::MAX);
        let ok = mask == want && (!restricted || mask & !allowed == 0);
        let expected = if restricted && key != "CapInh" {
            format!("{want:016x} (within allowed {allowed:016x})")
        } else {
            format!("{want:016x}")
        };
        add(key, expected, got, ok);
    }
    let nnp = status_field(&status, "NoNewPrivs");
    let want_nnp = restricted || spec.process().no_new_privileges == Some(true);
    add(
        "NoNewPrivs",
        if want_nnp { "1" } else { "0" }.into(),
        nnp.clone(),
        nnp == if want_nnp { "1" } else { "0" },
    );
    let sc = status_field(&status, "Seccomp");
    let filters: usize = status_field(&status, "Seccomp_filters")
        .parse()
        .unwrap_or(0);
    let mut programs = Vec::new();
    loop {
        let file = state::seccomp_file(programs.len());
        let Some(b) = dir.read_file(&file)? else {
            break;
        };
        programs.push(
            Filter::from_bytes(&b).with_context(|| {
                format!("corrupt seccomp program in the state directory ({file})")
            })?,
        );
    }
    let want_sc = restricted || !programs.is_empty();
    add(
        "Seccomp",
        if want_sc {
            format!("2 (filter, ≥{} programs)", programs.len().max(1))
        } else {
            "any".into()
        },
        format!("{sc} ({filters} programs)"),
        !want_sc || (sc == "2" && filters >= programs.len().max(1)),
    );
    let host = HostFacts::probe();
    for c in lsm_checks(&host, &cfg, restricted, spec.process(), pid) {
        add(&c.check, c.expected, c.actual, c.ok);
    }
    if let Some(d) = &decision {
        let mountinfo =
            std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
        let root_ro = mountinfo
            .lines()
            .find(|l| l.split(' ').nth(4) == Some("/"))
            .is_some_and(|l| {
                l.split(' ')
                    .nth(5)
                    .is_some_and(|o| o.split(',').any(|x| x == "ro"))
            });
        if d.readonly_rootfs || spec.root.as_ref().is_some_and(|r| r.readonly) {
            add(
                "read-only root",
                "ro".into(),
                if root_ro { "ro" } else { "rw" }.into(),
                root_ro,
            );
        }
        if let Some(b) = d.bounded_root {
            // The root's statfs is its upper layer's: moat's tmpfs and its caps.
            let root = std::ffi::CString::new(format!("/proc/{pid}/root")).unwrap_or_default();
            let got = crate::linux::sys::openat(
                crate::linux::path::cwd(),
                &root,
                libc::O_PATH | libc::O_DIRECTORY,
                0,
            )
            .and_then(|fd| crate::linux::sys::fstatvfs(std::os::fd::AsFd::as_fd(&fd)))
            .map(|st| crate::linux::cgroups::stats::fs_use(&st));
            // Both parts the kernel bounds: `size` of data, and `nr_inodes` KiB of inode
            // space that holds the files and their xattrs beside it.
            let caps = |bytes: u64, inodes: u64| {
                let (data, ispace) = policy::tmpfs_caps(bytes, inodes);
                format!(
                    "{data} bytes of data, {inodes} inodes: {ispace} bytes of inode space for \
                     files and xattrs ({} bytes in all)",
                    data.saturating_add(ispace)
                )
            };
            let want = (b.size.div_ceil(4096) * 4096, b.inodes);
            let (actual, ok) = match got {
                Ok(u) => (
                    caps(u.bytes_allowed, u.inodes_allowed),
                    (u.bytes_allowed, u.inodes_allowed) == want,
                ),
                Err(e) => (format!("statfs: {e}"), false),
            };
            add("bounded root", caps(want.0, want.1), actual, ok);
        }
        if d.network_none {
            let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap_or_default();
            let ifaces: Vec<&str> = dev
                .lines()
                .skip(2)
                .filter_map(|l| l.split(':').next())
                .map(str::trim)
                .collect();
            add("network", "lo".into(), ifaces.join(","), ifaces == ["lo"]);
        }
        if let Some(e) = &d.egress {
            let (actual, ok) = egress_in_force(rec, pid, e);
            add("egress", e.describe(), actual, ok);
            if e.has_names() {
                let (want, actual, ok) = forwarder_in_force(&dir.file(""), e);
                add("dns forwarder", want, actual, ok);
                let (want, actual, ok) = forwarder_cgroup(&dir.file(""), rec, e);
                add("dns cgroup", want, actual, ok);
            }
        }
    }
    // The id mapping: container root must not be host root when a user namespace is in use
    // (a FAIL when the policy asked for one, informational otherwise).
    let read_map = |f: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{f}"))
            .map(|m| {
                m.lines()
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_else(|e| format!("unreadable: {e}"))
    };
    let (uid_map, gid_map) = (read_map("uid_map"), read_map("gid_map"));
    let root_host = |map: &str| {
        map.split(", ").find_map(|l| {
            let v: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3 && v[0] == 0 && v[2] > 0).then_some(v[1])
        })
    };
    let own_userns = std::fs::read_link(format!("/proc/{pid}/ns/user")).ok()
        != std::fs::read_link("/proc/1/ns/user").ok();
    let asked = decision
        .as_ref()
        .is_some_and(|d| d.userns == policy::Userns::Auto);
    let ok = !asked || (own_userns && root_host(&uid_map).is_some_and(|h| h != 0));
    add(
        "uid_map",
        if asked {
            "container 0 → a host id that is not 0".into()
        } else {
            "(informational)".into()
        },
        if own_userns {
            uid_map
        } else {
            format!("host user namespace ({uid_map})")
        },
        ok,
    );
    let ok = !asked || (own_userns && root_host(&gid_map).is_some_and(|h| h != 0));
    add(
        "gid_map",
        if asked {
            "container 0 → a host id that is not 0".into()
        } else {
            "(informational)".into()
        },
        gid_map,
        ok,
    );
    if let Some(r) = dir
        .read_file(state::USERNS_FILE)?
        .and_then(|b| serde_json::from_slice::<state::idpool::IdRange>(&b).ok())
    {
        add(
            "userns pool",
            format!("{}+{}", r.start, r.size),
            root_host(&read_map("uid_map")).map_or("no root mapping".into(), |h| h.to_string()),
            root_host(&read_map("uid_map")) == Some(r.start as u64),
        );
    }
    if let Some(t) = dir
        .read_file(state::BUDGET_FILE)?
        .and_then(|b| serde_json::from_slice::<state::budget::Taken>(&b).ok())
    {
        let root = state::idpool::pool_root(dir.path.parent().unwrap_or(std::path::Path::new("/")));
        let held: u64 = state::budget::Ledger::default()
            .shares()
            .iter()
            .filter(|s| s.root == root && s.id == rec.id)
            .map(|s| s.bytes)
            .sum();
        add(
            "rootfs budget",
            format!(
                "{} bytes held in {} (of [fleet] rootfs_budget {}){}",
                t.bytes,
                state::budget::LEDGER_DIR,
                t.budget,
                decision
                    .as_ref()
                    .and_then(|d| d.bounded_root)
                    .map_or(String::new(), |b| format!(
                        ": {} of data and {} of inode space",
                        b.size,
                        b.inode_space()
                    ))
            ),
            format!("{held} bytes held"),
            held == t.bytes,
        );
    }
    // Every tmpfs of the spec with an inode cap (the policy's `/tmp` and workspace, its
    // `/dev`, the engine's own): the cap as the kernel reports the mount's super options.
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    for m in &spec.mounts {
        let Some(want) = m
            .options
            .iter()
            .find_map(|o| o.strip_prefix("nr_inodes="))
            .filter(|_| m.typ.as_deref() == Some("tmpfs"))
        else {
            continue;
        };
        let got = tmpfs_inodes(&mountinfo, &m.destination);
        // tmpfs reads `nr_inodes` with a k/m/g suffix as it reads `size`.
        let ispace = policy::config::parse_size(want)
            .map(|n| policy::tmpfs_caps(0, n.unsigned_abs()).1)
            .map_or(String::new(), |b| {
                format!(" (inode space for files and xattrs: {b} bytes)")
            });
        add(
            &format!("tmpfs {} inodes", m.destination),
            format!("nr_inodes={want}{ispace}"),
            got.clone().unwrap_or_else(|| "not mounted".into()),
            got.as_deref() == Some(&format!("nr_inodes={want}")),
        );
    }
    // memory.high: set on cgroup v2 by the policy or the engine; v1 memory has none.
    let unified_high = spec
        .linux()
        .resources
        .as_ref()
        .and_then(|r| r.unified.as_ref())
        .and_then(|u| u.get("memory.high"))
        .cloned();
    let absent = decision.as_ref().is_some_and(|d| {
        d.changes
            .iter()
            .any(|c| c.field == "linux.resources.unified.memory.high" && c.action == "absent")
    });
    if let Some(want) = unified_high {
        let got = rec
            .cgroup
            .as_ref()
            .and_then(|c| c.read_memory_high())
            .unwrap_or_else(|| "unreadable".into());
        add(
            "memory.high",
            want.trim().to_string(),
            got.clone(),
            got == want.trim(),
        );
    } else if absent {
        add(
            "memory.high",
            "absent: cgroup v1 memory has no memory.high (recorded by the policy)".into(),
            match rec.cgroup.as_ref().and_then(|c| c.read_memory_high()) {
                Some(v) => format!("memory.high {v}"),
                None => "no memory.high file".into(),
            },
            true,
        );
    }
    if restricted {
        if let Some(want) = cfg.pids.or_else(|| {
            spec.linux()
                .resources
                .as_ref()
                .and_then(|r| r.pids.as_ref())
                .and_then(|p| p.limit)
        }) {
            let got = rec
                .cgroup
                .as_ref()
                .and_then(|c| c.read_pids_max())
                .unwrap_or_else(|| "unreadable".into());
            let spec_limit = spec
                .linux()
                .resources
                .as_ref()
                .and_then(|r| r.pids.as_ref())
                .and_then(|p| p.limit)
                .unwrap_or(want);
            let written = crate::linux::cgroups::pids_max(spec_limit);
            add("pids.max", written.clone(), got.clone(), got == written);
        }
        // Probe: a fork joined to the container with its confinement tries denied calls.
        let attrs = Attrs::from_process(spec.process(), "process", programs, 0)?.on_host(&host);
        let escaped = exec::probe(rec, &attrs)?;
        add(
            "denied syscalls",
            "unshare, keyctl, AF_ALG socket, io_uring_setup, setns all fail".into(),
            if escaped.is_empty() {
                "all failed".into()
            } else {
                format!("succeeded: {}", escaped.join(", "))
            },
            escaped.is_empty(),
        );
    }
    Ok(Verdict {
        backend: "native",
        checks,
        not_applied: Vec::new(),
    })
}

/// The label each LSM the host runs holds for the init (`attr/apparmor/current`,
/// `attr/current`), against what the policy expects: the spec's profile or label, which
/// under RESTRICTED must also be on the `[restricted]` lists (AppArmor in enforce mode).
fn lsm_checks(
    host: &HostFacts,
    cfg: &policy::Config,
    restricted: bool,
    p: &crate::spec::Process,
    pid: i32,
) -> Vec<Check> {
    let read = |path: String| {
        std::fs::read_to_string(&path)
            .map(|s| s.trim_end_matches(['\n', '\0']).to_string())
            .unwrap_or_else(|e| format!("unreadable ({path}: {e})"))
    };
    let mut out = Vec::new();
    if host.apparmor {
        let label = read(host.apparmor_attr(&pid.to_string(), "current"));
        let want = p.apparmor_profile.clone().unwrap_or_default();
        let (expected, ok) = if want.is_empty() && !restricted {
            ("any (the spec names no profile)".to_string(), true)
        } else if restricted && !policy::apparmor_allowed(cfg, &want) {
            let want = if want.is_empty() { "none" } else { &want };
            (
                format!("a profile in restricted.apparmor_profiles (spec: {want})"),
                false,
            )
        } else if restricted {
            (
                format!("{want} (enforce), in restricted.apparmor_profiles"),
                label == format!("{want} (enforce)"),
            )
        } else {
            // `unconfined` has no mode suffix; a profile has one (enforce, complain, ...).
            let name = label.rsplit_once(" (").map_or(label.as_str(), |(n, _)| n);
            (want.clone(), name == want)
        };
        out.push(Check {
            check: "AppArmor".into(),
            expected,
            actual: label,
            ok,
        });
    }
    if host.selinux {
        let label = read(format!("/proc/{pid}/attr/current"));
        let want = p.selinux_label.clone().unwrap_or_default();
        let (expected, ok) = if want.is_empty() {
            ("any (the spec names no label)".to_string(), true)
        } else if restricted {
            (
                format!("{want}, type in restricted.selinux_types"),
                policy::selinux_type(&want)
                    .is_some_and(|t| policy::lsm_listed(&cfg.selinux_types, t))
                    && label == want,
            )
        } else {
            (want.clone(), label == want)
        };
        out.push(Check {
            check: "SELinux".into(),
            expected,
            actual: label,
            ok,
        });
    }
    out
}

/// Prints the checks (and, for gVisor, what it does not apply); 1 when any check failed.
fn report(
    a: &Request,
    policy: &str,
    backend: &str,
    checks: &[Check],
    not_applied: &[policy::Change],
) -> Result<i32> {
    let failed = checks.iter().filter(|c| !c.ok).count();
    if a.format == "json" {
        let mut v =
            serde_json::json!({"id": a.id, "policy": policy, "ok": failed == 0, "checks": checks});
        if backend != "native" {
            v["backend"] = serde_json::json!(backend);
            v["not_applied"] = serde_json::to_value(not_applied)?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if backend == "native" {
            println!("container {} (policy {policy})", a.id);
        } else {
            println!("container {} (policy {policy}, {backend})", a.id);
        }
        for c in checks {
            println!(
                "{:<4} {:<16} expected {:<48} got {}",
                if c.ok { "ok" } else { "FAIL" },
                c.check,
                c.expected,
                c.actual
            );
        }
        for n in not_applied {
            println!(
                "n/a  {:<24} not applied by {backend}: {}",
                n.field, n.detail
            );
        }
        println!("{} checks, {} failed", checks.len(), failed);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// The `nr_inodes=` super option of the mount at `target` in a mountinfo text (the last
/// mount there: the one the container sees).
fn tmpfs_inodes(mountinfo: &str, target: &str) -> Option<String> {
    let line = mountinfo
        .lines()
        .rfind(|l| l.split(' ').nth(4) == Some(target))?;
    let (_, post) = line.split_once(" - ")?;
    let mut f = post.split(' ');
    if f.next()? != "tmpfs" {
        return Some(format!(
            "not a tmpfs ({})",
            post.split(' ').next().unwrap_or("")
        ));
    }
    let sup = f.nth(1)?;
    Some(
        sup.split(',')
            .find(|o| o.starts_with("nr_inodes="))
            .unwrap_or("no nr_inodes (uncapped)")
            .to_string(),
    )
}

/// The egress names' DNS forwarder: running, with the bounds the policy gives it.
fn forwarder_in_force(dir: &std::path::Path, e: &policy::egress::Egress) -> (String, String, bool) {
    use crate::linux::egress::forwarder::Recorded;
    let show = |l: policy::egress::ForwarderLimits| {
        format!("at most {} names, {} addresses each", l.names, l.answers)
    };
    let want = format!("running, {}", show(e.forwarder));
    match Recorded::load(dir) {
        None => (want, "none recorded".into(), false),
        Some(r) if !r.alive() => (want, format!("pid {} exited", r.pid), false),
        Some(r) => {
            let limits = r.limits.map_or("bounds not recorded".into(), show);
            (
                want,
                format!("running (pid {}), {limits}", r.pid),
                r.limits == Some(e.forwarder),
            )
        }
    }
}

/// The DNS forwarder's cgroup (next to the container's): the forwarder in it, and its
/// memory and pids limits in force as `[egress] forwarder_memory`/`forwarder_pids` set.
fn forwarder_cgroup(
    dir: &std::path::Path,
    rec: &state::Record,
    e: &policy::egress::Egress,
) -> (String, String, bool) {
    use crate::linux::egress::forwarder::{self, CgroupUse, Recorded};
    let path = rec
        .cgroup
        .as_ref()
        .map(|c| forwarder::cgroup_path(&c.path))
        .unwrap_or_default();
    let want = format!(
        "{path}: memory {} bytes, {} pids",
        e.forwarder.memory, e.forwarder.pids
    );
    let Some(r) = Recorded::load(dir) else {
        return (want, "no forwarder recorded".into(), false);
    };
    if let Some(why) = &r.no_cgroup {
        return (
            want,
            format!("none: unlimited, in moat's own cgroup ({why})"),
            false,
        );
    }
    let Some(u) = r.cgroup.as_deref().and_then(CgroupUse::read) else {
        return (
            want,
            format!("{}: missing", r.cgroup.unwrap_or_default()),
            false,
        );
    };
    // Where the forwarder is: its own cgroup in every hierarchy, never the container's.
    let own = std::fs::read_to_string(format!("/proc/{}/cgroup", r.pid)).unwrap_or_default();
    let inside = r.alive()
        && own
            .lines()
            .filter_map(|l| l.splitn(3, ':').nth(2))
            .all(|p| p == u.path);
    let show = |v: Option<u64>| v.map_or("unlimited".into(), |v| v.to_string());
    let actual = format!(
        "{}: memory {} bytes, {} pids{}",
        u.path,
        show(u.memory_limit),
        show(u.pids_limit),
        if inside { "" } else { ", forwarder not in it" }
    );
    let ok = inside
        && u.path == path
        && u.memory_limit == Some(e.forwarder.memory)
        && u.pids_limit == Some(u64::from(e.forwarder.pids));
    (want, actual, ok)
}

/// The egress rules in force, read back from the kernel: moat's programs on every hook of
/// the container's cgroup v2 (the init's own v2 cgroup), and a trie holding every entry
/// of the recorded policy with the same ranges, plus only /128 entries the forwarder
/// admitted (when the policy names domains).
pub(crate) fn egress_in_force(
    rec: &state::Record,
    pid: i32,
    e: &policy::egress::Egress,
) -> (String, bool) {
    use crate::linux::egress::{prog::Hook, Installed};
    let Some(dir) = rec.cgroup.as_ref().and_then(|c| c.v2_dir()) else {
        return ("no cgroup v2 directory".into(), false);
    };
    // The init must be where the programs are (it cannot leave, but a record could lie).
    let v2 = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string));
    let cg_path = rec
        .cgroup
        .as_ref()
        .map(|c| c.path.clone())
        .unwrap_or_default();
    if v2.as_deref().is_some_and(|p| !p.starts_with(&cg_path)) {
        return (
            format!(
                "the init is in cgroup {}, not {cg_path}",
                v2.unwrap_or_default()
            ),
            false,
        );
    }
    let inst = match Installed::find(&dir) {
        Ok(Some(i)) => i,
        Ok(None) => return ("no egress programs on the cgroup".into(), false),
        Err(err) => return (err.to_string(), false),
    };
    let programs = match inst.check_programs(&dir, e) {
        Ok(n) => n,
        Err(why) => return (why, false),
    };
    if !e.list_form() {
        return (
            format!(
                "{programs} programs refusing {} addresses in force",
                e.deny.len()
            ),
            inst.fixed.len() == programs,
        );
    }
    let missing: Vec<&str> = Hook::ALL
        .iter()
        .filter(|h| !inst.hooks.contains(h))
        .map(|h| h.name())
        .collect();
    if !missing.is_empty() {
        return (format!("programs missing: {}", missing.join(", ")), false);
    }
    let got = match inst.entries() {
        Ok(g) => g,
        Err(err) => return (format!("cannot read the rules in force: {err}"), false),
    };
    let want = e.entries(None).unwrap_or_default();
    let absent: Vec<String> = want
        .iter()
        .filter(|w| !got.contains(w))
        .map(|w| format!("{}/{}", w.addr, w.len))
        .collect();
    let extra: Vec<String> = got
        .iter()
        .filter(|g| !want.iter().any(|w| w.addr == g.addr && w.len == g.len))
        .filter(|g| !(g.len == 128 && e.has_names()))
        .map(|g| format!("{}/{}", g.addr, g.len))
        .collect();
    let admitted = got.len() - (want.len() - absent.len()) - extra.len();
    if absent.is_empty() && extra.is_empty() {
        (
            format!(
                "{} rules in force on {} hooks ({admitted} admitted from names)",
                want.len(),
                inst.hooks.len()
            ),
            true,
        )
    } else {
        (
            format!(
                "rules in force differ: missing [{}], not in the policy [{}]",
                absent.join(", "),
                extra.join(", ")
            ),
            false,
        )
    }
}
