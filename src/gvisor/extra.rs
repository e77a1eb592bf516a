//! What runsc 20221219 lacks or gets wrong, done by moat: `update` (missing in runsc),
//! `events` on a created container (runsc panics), and `features` for the gVisor path.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Value};

use super::cmds::runsc_state;
use super::runsc::Runsc;
use super::{select, Gvisor};
use crate::container::Context;
use crate::linux::cgroups::{Cgroup, Layout};
use crate::spec::Resources;
use crate::state::{Record, Status};

/// The sandbox's host cgroup, read from `/proc/<pid>/cgroup`: the hierarchies in which
/// it is below the root (runsc places it at `linux.cgroupsPath`; hierarchies where it
/// stayed at `/` are never written).
pub(super) fn sandbox_cgroup(pid: i32, proc_cgroup: &str, layout: Layout) -> Result<Cgroup> {
    let mut path: Option<String> = None;
    let mut hierarchies = Vec::new();
    for h in layout.hierarchies {
        let line = proc_cgroup.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, p) = (f.next()?, f.next()?, f.next()?);
            let matches = if h.v2 {
                ctrl.is_empty()
            } else {
                let mut a: Vec<&str> = ctrl.split(',').collect();
                let mut b: Vec<&str> = h.controllers.iter().map(String::as_str).collect();
                a.sort_unstable();
                b.sort_unstable();
                !ctrl.is_empty() && a == b
            };
            matches.then_some(p)
        });
        let Some(p) = line.filter(|p| *p != "/" && !p.is_empty()) else {
            continue;
        };
        match &path {
            None => path = Some(p.to_string()),
            Some(q) if q == p => {}
            Some(q) => bail!("sandbox {pid} is in different cgroups ({q} and {p}); not updating"),
        }
        hierarchies.push(h);
    }
    let Some(path) = path else {
        bail!("sandbox {pid} is in the root cgroup (no linux.cgroupsPath?): nothing to update");
    };
    Ok(Cgroup {
        path,
        unified: layout.unified,
        hierarchies,
        skipped: Vec::new(),
        systemd: None,
        joined: false,
    })
}

/// runsc 20221219 has no `update`: the resources are written into the sandbox's host
/// cgroup with moat's cgroup code. The sentry's own memory size stays as at create.
pub fn update(g: &Context, rec: &Record, gv: &Gvisor, res: Resources) -> Result<i32> {
    if super::pod::app_sandbox(gv).is_some() {
        bail!(
            "update of one container of a gVisor pod is not supported: the pod's containers \
             share the sandbox's host cgroup"
        );
    }
    if let Some(e) = super::select::zero_pids_limit(Some(&res)) {
        bail!("{e}");
    }
    let Some(st) = runsc_state(g, gv, &rec.id)? else {
        bail!("container does not exist");
    };
    if st.status == Status::Stopped {
        bail!("container not running");
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", st.pid)).unwrap_or_default();
    if !cmdline.starts_with(b"runsc-sandbox\0") {
        bail!("pid {} is not the container's sandbox", st.pid);
    }
    let text = std::fs::read_to_string(format!("/proc/{}/cgroup", st.pid))
        .with_context(|| format!("read /proc/{}/cgroup", st.pid))?;
    let cg = sandbox_cgroup(st.pid, &text, Layout::detect()?)?;
    // As natively: device rules are left as runsc set them (`policy::update::admit`, run
    // by `container::update`, refuses or drops them), `checkBeforeUpdate` is honoured, and
    // the files already written are restored when the kernel refuses a value.
    cg.update(&res)?;
    Ok(0)
}

fn zero_stats(id: &str) -> Value {
    json!({"type": "stats", "id": id, "data": {
        "cpu": {"usage": {"total": 0}},
        "memory": {"usage": {"limit": 0, "usage": 0, "failcnt": 0}},
        "pids": {"current": 0}
    }})
}

/// `events [--stats] [--interval N]`. While the container is only created, zero stats
/// are printed (runsc divides by zero there); once it runs, runsc takes over.
pub fn events(
    g: &Context,
    rec: &Record,
    gv: &Gvisor,
    stats: bool,
    interval: Duration,
) -> Result<i32> {
    loop {
        let Some(st) = runsc_state(g, gv, &rec.id)? else {
            bail!("container does not exist");
        };
        if !matches!(st.status, Status::Created | Status::Creating) {
            break;
        }
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", zero_stats(&rec.id)).context("write to standard output")?;
        out.flush().context("write to standard output")?;
        if stats {
            return Ok(0);
        }
        std::thread::sleep(interval);
    }
    // The sandbox's egress refusals (super::egress) join runsc's one stats line, under
    // `data.moat.egress` as natively.
    let counters = rec
        .cgroup
        .as_ref()
        .and_then(|cg| crate::container::events::egress_counters(cg, true));
    if let (true, Some(n)) = (stats, counters) {
        let out = Runsc::quiet(gv, g, "events")
            .flag("stats", true)
            .id(&rec.id)
            .output()?;
        if out.code != 0 {
            bail!("{}", out.error());
        }
        let mut v: Value =
            serde_json::from_slice(&out.stdout).context("runsc events: invalid JSON")?;
        if let Some(d) = v.get_mut("data").and_then(Value::as_object_mut) {
            d.insert("moat".into(), json!({ "egress": n }));
        }
        let mut o = std::io::stdout().lock();
        writeln!(o, "{v}").context("write to standard output")?;
        return Ok(0);
    }
    let secs = (interval.as_secs() + u64::from(interval.subsec_nanos() > 0)).max(1);
    let r = Runsc::new(gv, g, "events").flag("stats", stats);
    let r = if stats {
        r
    } else {
        r.opt("interval", secs.to_string())
    };
    Err(r.id(&rec.id).exec())
}

/// `features` asked of the gVisor path: moat invoked as `moat-gvisor`, or
/// `MOAT_RUNTIME=gvisor`.
pub fn wants_gvisor_features() -> bool {
    select::invoked_as_alias() || std::env::var(select::ENV).is_ok_and(|v| v == "gvisor")
}

/// What a container handed to runsc 20221219 gets, in runc's `features` schema, with
/// moat's notes under `annotations`.
pub fn features_json() -> Value {
    let caps: Vec<&str> = crate::linux::capabilities::NAMES.to_vec();
    let config = super::config::GvisorConfig::load().ok();
    let runsc = config
        .as_ref()
        .and_then(|c| select::find_runsc(c).ok())
        .map(|p: PathBuf| p.display().to_string())
        .unwrap_or_default();
    // The configured platform, else what the runsc found runs by default.
    let platform = config
        .and_then(|c| c.policy.platform)
        .or_else(|| {
            super::probe::ask(std::path::Path::new(&runsc))
                .ok()
                .map(|p| p.default_platform)
        })
        .unwrap_or_default();
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.0.2-dev",
        // createContainer and startContainer would run inside the sandbox: runsc skips them.
        "hooks": ["prestart", "createRuntime", "poststart", "poststop"],
        "mountOptions": ["ro", "rw", "bind", "rbind", "nosuid", "nodev", "noexec",
                         "private", "rprivate", "shared", "rshared", "slave", "rslave"],
        "linux": {
            "namespaces": ["pid", "ipc", "uts", "mount", "network"],
            "capabilities": caps,
            "cgroup": {"v1": true, "v2": true, "systemd": false, "systemdUser": false},
            "seccomp": {"enabled": true},
            "apparmor": {"enabled": false},
            "selinux": {"enabled": false}
        },
        "annotations": {
            "moat.runtime": "gvisor",
            "moat.gvisor.runsc": runsc,
            "moat.gvisor.platform": platform,
            "moat.gvisor.network": "none for a new netns, host for none or a joined one; never sandbox",
            "moat.gvisor.seccomp": "applied inside the sentry: moat's compiled filter (errnos as the profile says), installed by its trampoline before exec'd processes and the container's process run, or runsc's conversion for the container's process where it does the same",
            "moat.gvisor.ignored": "process.apparmorProfile, linux.maskedPaths, linux.readonlyPaths, linux.sysctl, hooks.createContainer, hooks.startContainer",
            "moat.gvisor.refused": "process.selinuxLabel, --preserve-fds > 0, rootless, CRI multi-container pods",
            "moat.gvisor.pid1-signals": "the container's PID 1 is not protected from signals it does not handle (TERM, USR1 kill it)"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linux::cgroups::Hierarchy;

    fn h(mount: &str, ctrl: &[&str], v2: bool) -> Hierarchy {
        Hierarchy {
            mount: mount.into(),
            controllers: ctrl.iter().map(|s| s.to_string()).collect(),
            v2,
        }
    }

    #[test]
    fn sandbox_cgroup_from_proc() {
        let layout = Layout {
            unified: false,
            hierarchies: vec![
                h("/sys/fs/cgroup/pids", &["pids"], false),
                h("/sys/fs/cgroup/cpu,cpuacct", &["cpuacct", "cpu"], false),
                h("/sys/fs/cgroup/unified", &[], true),
            ],
        };
        let text = "8:pids:/moat-x/c\n2:cpu,cpuacct:/moat-x/c\n0::/\n";
        let cg = sandbox_cgroup(7, text, layout.clone()).unwrap();
        assert_eq!(cg.path, "/moat-x/c");
        assert_eq!(cg.hierarchies.len(), 2, "the v2 root is never written");
        assert!(sandbox_cgroup(7, "8:pids:/\n0::/\n", layout.clone()).is_err());
        assert!(sandbox_cgroup(7, "8:pids:/a\n2:cpu,cpuacct:/b\n", layout).is_err());
    }

    #[test]
    fn features_say_what_is_ignored() {
        let f = features_json();
        assert_eq!(f["annotations"]["moat.runtime"], "gvisor");
        assert_eq!(f["linux"]["apparmor"]["enabled"], false);
        assert!(f["annotations"]["moat.gvisor.ignored"]
            .as_str()
            .unwrap()
            .contains("linux.maskedPaths"));
    }
}
