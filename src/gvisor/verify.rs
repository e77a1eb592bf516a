//! `moat verify` for a gVisor container: what can be checked from the host (the sandbox
//! process, the flags runsc was started with, its host cgroup and the fleet parent) and,
//! through `runsc exec`, the sentry's view of the container's PID 1.

use anyhow::Context as _;

use super::runsc::Runsc;
use super::Gvisor;
use crate::container::verify::{Check, Verdict};
use crate::container::{Container, Context};
use crate::linux::capabilities;
use crate::linux::cgroups::Cgroup;
use crate::policy;
use crate::spec::Spec;
use crate::state::{self, Record, Status};

/// The checks against the effective spec (the shadow bundle's), and what the recorded
/// decision says gVisor does not apply.
pub fn verdict(g: &Context, c: &Container, gv: &Gvisor) -> anyhow::Result<Verdict> {
    let spec: Spec = {
        let v = super::select::shadow_config(&c.dir)?;
        serde_json::from_value(v).context("the container's effective spec")?
    };
    let checks = checks(g, &c.record, gv, &spec)?;
    // As `verify --format json` has always listed them: field and detail (the reason is
    // `policy explain`'s).
    let not_applied: Vec<policy::Change> = c
        .dir
        .load_decision()?
        .map(|d| d.not_applied)
        .unwrap_or_default()
        .into_iter()
        .map(|c| policy::Change {
            action: "not applied",
            reason: "".into(),
            ..c
        })
        .collect();
    Ok(Verdict {
        backend: "gvisor",
        checks,
        not_applied,
    })
}

fn field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
        .unwrap_or_default()
}

/// The value of `--name=` in runsc's argv, if present.
fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    argv.iter().find_map(|a| a.strip_prefix(prefix.as_str()))
}

/// A controller file of the cgroup, from the hierarchy that has the controller (v1) or
/// the unified one.
fn read(cg: &Cgroup, controller: &str, v1: &str, v2: &str) -> Option<String> {
    cg.hierarchies.iter().find_map(|h| {
        let file = if h.v2 {
            v2
        } else if h.controllers.iter().any(|c| c == controller) {
            v1
        } else {
            return None;
        };
        std::fs::read_to_string(h.dir(&cg.path).join(file))
            .ok()
            .map(|s| s.trim().to_string())
    })
}

/// The kernel's text for a limit: v1 prints "max"-less byte counts, v2 "max".
fn same_limit(got: &str, want: i64) -> bool {
    got == want.to_string() || (want < 0 && (got == "max" || got == "9223372036854771712"))
}

/// `<who> pids.max` and `<who> memory limit` of a cgroup against the wanted limits.
fn limits(
    add: &mut impl FnMut(&str, String, String, bool),
    who: &str,
    cg: &Cgroup,
    pids: Option<i64>,
    memory: Option<i64>,
) {
    if let Some(want) = pids {
        let got = cg.read_pids_max().unwrap_or_else(|| "unreadable".into());
        add(
            &format!("{who} pids.max"),
            want.to_string(),
            got.clone(),
            got == want.to_string(),
        );
    }
    if let Some(want) = memory {
        let got = read(cg, "memory", "memory.limit_in_bytes", "memory.max")
            .unwrap_or_else(|| "unreadable".into());
        add(
            &format!("{who} memory limit"),
            want.to_string(),
            got.clone(),
            same_limit(&got, want),
        );
    }
}

fn checks(g: &Context, rec: &Record, gv: &Gvisor, spec: &Spec) -> anyhow::Result<Vec<Check>> {
    let mut out = Vec::new();
    let mut add = |check: &str, expected: String, actual: String, ok: bool| {
        out.push(Check {
            check: check.into(),
            expected,
            actual,
            ok,
        })
    };
    let restricted = rec.policy == crate::policy::Mode::Restricted;
    let st = super::cmds::runsc_state(g, gv, &rec.id)?;
    let Some(st) = st.filter(|s| s.status != Status::Stopped) else {
        anyhow::bail!("container not running");
    };
    let pid = st.pid;
    let argv: Vec<String> = std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let is_sandbox = argv.first().is_some_and(|a| a == "runsc-sandbox");
    add(
        "gVisor sandbox",
        "runsc-sandbox … boot".into(),
        format!(
            "pid {pid}: {}",
            argv.iter().take(1).cloned().collect::<Vec<_>>().join(" ")
        ),
        is_sandbox && argv.iter().any(|a| a == "boot"),
    );
    let root = gv.root.display().to_string();
    add(
        "runsc --root",
        root.clone(),
        flag(&argv, "root").unwrap_or("").into(),
        flag(&argv, "root") == Some(root.as_str()),
    );
    // runsc passes only flags that differ from its defaults to the sandbox: without one,
    // the sandbox runs this runsc's default platform.
    let platform = match flag(&argv, "platform") {
        Some(p) => p.to_string(),
        None => super::probe::cached(&gv.runsc, &g.root)
            .map(|p| p.default_platform)
            .unwrap_or_else(|e| format!("unknown ({e})")),
    };
    add(
        "runsc --platform",
        gv.platform.clone(),
        platform.clone(),
        platform == gv.platform,
    );
    let network = flag(&argv, "network").unwrap_or("sandbox");
    add(
        "runsc --network",
        gv.network.clone(),
        network.into(),
        network == gv.network,
    );
    // A profile reaches the process as moat's filter through the trampoline (its prefix in
    // the process's args), or, where runsc's spec still holds it (no process to wrap;
    // records of earlier moats), through runsc's conversion, which needs --oci-seccomp.
    let runsc_profile = spec.linux().seccomp.is_some();
    let trampoline = spec
        .process
        .as_ref()
        .and_then(|p| super::seccomp_exec::prefix_of(&p.args, false))
        .is_some();
    let has_seccomp = runsc_profile || trampoline;
    let oci_seccomp = flag(&argv, "oci-seccomp") == Some("true");
    add(
        "runsc --oci-seccomp",
        if runsc_profile { "true" } else { "any" }.into(),
        oci_seccomp.to_string(),
        oci_seccomp || !runsc_profile,
    );
    let override_flags = argv.iter().any(|a| a.starts_with("--allow-flag-override"));
    add(
        "no flag override",
        "absent".into(),
        if override_flags { "present" } else { "absent" }.into(),
        !override_flags,
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    // runsc's sandbox installs its own filter (and no_new_privs) when the container starts:
    // a created sandbox has run nothing of the container's yet, and shows 0 for both.
    let created = st.status == Status::Created;
    for (key, want) in [("NoNewPrivs", "1"), ("Seccomp", "2")] {
        let got = field(&status, key);
        if created && got == "0" {
            add(
                &format!("sandbox {key}"),
                format!("{want} once started"),
                "0 (created: runsc sets it at start)".into(),
                true,
            );
            continue;
        }
        add(
            &format!("sandbox {key}"),
            want.into(),
            got.clone(),
            got == want,
        );
    }

    // The sandbox's host cgroup, where runsc wrote linux.resources. An app container of a
    // pod runs in the pod's sandbox: the cgroup and limits are the pod sandbox container's
    // (its own are listed as not applied, `super::pod::resources_note`).
    let pod_sandbox_spec;
    let spec = match super::pod::app_sandbox(gv) {
        Some(sb) => {
            let dir = state::ContainerDir::open_read(&g.root, sb)
                .with_context(|| format!("the pod sandbox {sb}"))?;
            pod_sandbox_spec = serde_json::from_value::<Spec>(super::select::shadow_config(&dir)?)
                .context("the pod sandbox's effective spec")?;
            &pod_sandbox_spec
        }
        None => spec,
    };
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let cg = crate::linux::cgroups::Layout::detect()
        .ok()
        .and_then(|layout| super::extra::sandbox_cgroup(pid, &text, layout).ok());
    let want_path = spec.linux().cgroups_path.clone().unwrap_or_default();
    let got_path = cg.as_ref().map_or("/".to_string(), |c| c.path.clone());
    if !want_path.is_empty() {
        add(
            "sandbox cgroup",
            want_path.clone(),
            got_path.clone(),
            got_path == want_path,
        );
    }
    let res = spec.linux().resources.clone().unwrap_or_default();
    if let Some(cg) = &cg {
        let pids = res.pids.as_ref().and_then(|p| p.limit).filter(|&l| l >= 0);
        let memory = res.memory.as_ref().and_then(|m| m.limit);
        limits(&mut add, "sandbox", cg, pids, memory);
    }
    if restricted {
        let cfg = crate::policy::Config::load()?;
        if let Some((fleet, budget)) = crate::policy::fleet_budget(&cfg) {
            let fleet = fleet.trim_end_matches('/').to_string();
            let under = got_path.starts_with(&format!("{fleet}/"));
            add(
                "under fleet cgroup",
                format!("{fleet}/…"),
                got_path.clone(),
                under,
            );
            if let (true, Some(cg)) = (under, &cg) {
                let parent = Cgroup {
                    path: fleet.clone(),
                    ..cg.clone()
                };
                let pids = budget.pids.as_ref().and_then(|p| p.limit);
                let memory = budget.memory.as_ref().and_then(|m| m.limit);
                limits(&mut add, "fleet", &parent, pids, memory);
            }
        }
    }

    // The sentry's view of PID 1, read through `runsc exec` (needs `cat` in the image).
    if st.status == Status::Running {
        let out = Runsc::quiet(gv, g, "exec")
            .id(&rec.id)
            .args(["cat", "/proc/1/status"])
            .output()?;
        if out.code != 0 {
            add(
                "inside: /proc/1/status",
                "readable with cat".into(),
                out.error(),
                false,
            );
        } else {
            let inside = String::from_utf8_lossy(&out.stdout).into_owned();
            let caps = capabilities::from_saved(spec.process().capabilities.as_ref());
            for (key, want) in [
                ("CapEff", caps.effective),
                ("CapPrm", caps.permitted),
                ("CapBnd", caps.bounding),
                ("CapInh", caps.inheritable),
            ] {
                let got = field(&inside, key);
                let mask = u64::from_str_radix(&got, 16).unwrap_or(u64::MAX);
                add(
                    &format!("inside: {key}"),
                    format!("{want:016x}"),
                    got,
                    mask == want,
                );
            }
            let got = field(&inside, "Seccomp");
            let want = if has_seccomp { "2" } else { "0" };
            add("inside: Seccomp", want.into(), got.clone(), got == want);
        }
    }
    // The egress rules on the sandbox's cgroup (super::egress), read back from the kernel:
    // a pod's app container is checked through its sandbox.
    if super::pod::app_sandbox(gv).is_none() {
        let recorded = crate::state::ContainerDir::open_read(&g.root, &rec.id)?
            .load_decision()?
            .and_then(|d| d.egress);
        if let Some(e) = recorded {
            let (actual, ok) = crate::container::verify::egress_in_force(rec, pid, &e);
            add("egress", e.describe(), actual, ok);
        }
    }
    Ok(out)
}
