//! The egress policy under gVisor (docs/security.md "Egress", docs/gvisor.md "Egress").
//!
//! In a network namespace the engine prepared, runsc runs with `--network=host`: the
//! sentry serves every socket of the container with a host socket it opens itself, in that
//! namespace. The kernel binds a socket to the cgroup of the task that creates it, and the
//! sock_addr programs of `linux::egress` run for every socket of their cgroup; so the
//! native programs hold for the whole sandbox if the sentry is born in their cgroup:
//! moat makes a cgroup v2 directory, attaches the programs, and starts `runsc create` in
//! it (`Runsc::in_cgroup`), so the gofer and the sandbox start there before the container
//! has run anything. On a hybrid host runsc places the sandbox in its v1 hierarchies only
//! and never moves it in the v2 one; on a pure v2 host it places it in
//! `linux.cgroupsPath`, which is the directory moat chose. `exec` runs inside the sentry:
//! the same sockets, the same rules.
//!
//! What cannot be policed is refused (a list) or recorded as not applied (the metadata
//! block alone): a cgroup the systemd driver makes (runsc's scope, not moat's directory),
//! a relative `linux.cgroupsPath` (runsc resolves it against its own cgroup). Under
//! `--network=none` the sentry opens no host socket at all: there is nothing to police.
//!
//! A gVisor pod is one sentry: its app containers' sockets are the pod sandbox's, under
//! the sandbox's programs. An app container whose own list differs is refused, naming the
//! sandbox's; without a list it runs under the sandbox's policy, which `policy.json` records.

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::linux::cgroups::{Cgroup, Layout};
use crate::linux::egress::forwarder;
use crate::policy::egress::Egress;
use crate::policy::{Change, Decision};
use crate::spec::Spec;
use crate::state::ContainerDir;

/// The egress policy a gVisor create puts in force, planned before anything exists.
pub struct Planned {
    pub egress: Egress,
    /// The cgroup path (below the v2 root) runsc is started in.
    pub path: String,
    /// The list names domains: the container's resolv.conf names its forwarder.
    pub dns: Option<forwarder::Plan>,
}

/// The cgroup v2 directory holding the programs, made by [`install`]; the record holds
/// its [`cgroup`] as the container's, where `delete`, `update --egress` and `verify` find
/// the programs.
pub struct Installed {
    pub v2: PathBuf,
    /// Its `cgroup.procs`, open for writing: runsc create is started in it.
    pub procs: File,
}

impl Installed {
    /// Removes the directory again (create failed): the programs go with it.
    pub fn remove(&self) {
        let _ = std::fs::remove_dir(&self.v2);
    }
}

fn not_applied(d: &mut Decision, why: &'static str) {
    d.not_applied.push(Change {
        field: "egress".into(),
        action: "not applied",
        detail: "the metadata endpoints are not refused".into(),
        reason: why.into(),
    });
}

/// Decides what of `d.egress` gVisor enforces, after `policy::adjust`: `None` when
/// nothing is to be installed (no policy, nothing to police, a pod's app container, or a
/// metadata block that cannot be placed, then listed in `d.not_applied`). Errors refuse
/// the container: a list that cannot be enforced.
pub fn plan(
    spec: &mut Spec,
    d: &mut Decision,
    network: &str,
    systemd: bool,
    state_dir: &Path,
    id: &str,
    pod_sandbox: Option<&ContainerDir>,
) -> Result<Option<Planned>> {
    let Some(e) = d.egress.clone() else {
        return Ok(None);
    };
    if network == "none" {
        // runsc's own network stack with loopback only: no host socket to police.
        d.egress = None;
        return Ok(None);
    }
    if let Some(sb) = pod_sandbox {
        let theirs = sandbox_egress(sb)?;
        // The rules in force are the allow list and the refused addresses (the resolvers
        // are the sandbox forwarder's).
        let same = theirs
            .as_ref()
            .is_some_and(|t| t.allow == e.allow && t.deny == e.deny);
        if e.allow.is_some() && !same {
            bail!(
                "egress policy {}: a container of a gVisor pod shares its pod sandbox's \
                 sentry, whose policy is {}; give the pod sandbox the list",
                e.allow
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                describe(theirs.as_ref())
            );
        }
        // Whatever the container asked for, the sandbox's programs are the ones in force;
        // with names, its lookups go to the sandbox's forwarder (DNS elsewhere is refused).
        if theirs.as_ref().is_some_and(Egress::has_names) {
            forwarder::plan(spec, &sb.file(""), id);
        }
        d.egress = theirs;
        if d.egress.is_none() {
            not_applied(d, "the pod sandbox's sentry runs without an egress policy");
        }
        return Ok(None);
    }
    let path = match spec
        .linux()
        .cgroups_path
        .as_deref()
        .filter(|p| !p.is_empty())
    {
        _ if systemd => None,
        None => Some(format!("/{id}")),
        Some(p) if p.starts_with('/') && !p.contains(':') => Some(p.to_string()),
        Some(_) => None,
    };
    let Some(path) = path else {
        if let Some(l) = &e.allow {
            bail!(
                "egress policy {l}: not enforceable for this gVisor container: its sandbox's \
                 cgroup is {} (runsc's, not a directory moat can attach the programs to); \
                 use cgroupfs with an absolute linux.cgroupsPath, or run it natively",
                if systemd {
                    "a systemd scope"
                } else {
                    "a relative linux.cgroupsPath"
                }
            );
        }
        d.egress = None;
        not_applied(
            d,
            "the sandbox's cgroup is runsc's (systemd driver or a relative cgroupsPath), \
             not a directory moat attaches its egress programs to",
        );
        return Ok(None);
    };
    let path = crate::linux::cgroups::resolve_path(Some(&path), id)?;
    let dns = if e.has_names() {
        if e.resolvers.is_empty() {
            bail!(
                "egress names: DNS forwarder: the list has names but there is no resolver to \
                 ask: the spec binds no /etc/resolv.conf with a nameserver, and [egress] \
                 resolvers is unset"
            );
        }
        Some(forwarder::plan(spec, state_dir, id).0)
    } else {
        None
    };
    Ok(Some(Planned {
        egress: e,
        path,
        dns,
    }))
}

fn describe(e: Option<&Egress>) -> String {
    match e {
        None => "none (no egress policy)".into(),
        Some(e) => match &e.allow {
            Some(l) => format!("the list {l}"),
            None => "the metadata block alone".into(),
        },
    }
}

/// The pod sandbox's policy as its `policy.json` records it.
fn sandbox_egress(sb: &ContainerDir) -> Result<Option<Egress>> {
    Ok(sb.load_decision()?.and_then(|d| d.egress))
}

/// The cgroup the programs go on, as the record holds it (the v2 hierarchy alone: runsc
/// owns the v1 directories), found without creating anything: recorded before
/// [`install`] makes it, so that a create killed in between leaves `delete --force` the
/// path to remove.
pub fn cgroup(p: &Planned) -> Result<Cgroup> {
    let layout = Layout::detect()?;
    let mut cgroup = Cgroup::planned(&layout, &p.path);
    cgroup.hierarchies.retain(|h| h.v2);
    if cgroup.v2_dir().is_none() {
        return Err(crate::linux::egress::EgressError::NoCgroup(format!(
            "cgroup {} (no cgroup v2 hierarchy)",
            p.path
        ))
        .into());
    }
    Ok(cgroup)
}

/// Makes `cgroup`'s v2 directory and attaches the programs, before runsc exists. A
/// directory that is there already is refused.
pub fn install(p: &Planned, cgroup: &Cgroup) -> Result<Installed> {
    let v2 = cgroup.v2_dir().expect("checked by egress::cgroup");
    match std::fs::create_dir(&v2) {
        Ok(()) => {}
        // Someone else's, or a leftover with programs of its own: never shared.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "cgroup {}: already exists; a gVisor sandbox with an egress policy needs a cgroup \
             v2 directory of its own",
            v2.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&v2).with_context(|| format!("mkdir {}", v2.display()))?;
        }
        Err(e) => return Err(e).with_context(|| format!("mkdir {}", v2.display())),
    }
    let done = (|| -> Result<File> {
        crate::linux::egress::install(&v2, &p.egress, None, None)?;
        let procs = v2.join("cgroup.procs");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&procs)
            .with_context(|| format!("open {}", procs.display()))
    })();
    match done {
        Ok(procs) => Ok(Installed { v2, procs }),
        Err(e) => {
            let _ = std::fs::remove_dir(&v2);
            Err(e)
        }
    }
}

/// After `runsc create`: the DNS forwarder of the list's names, in the sandbox's network
/// namespace, exiting with the sandbox (`linux::egress::forwarder`).
pub fn start_forwarder(
    g: &crate::container::Context,
    gv: &super::Gvisor,
    dir: &ContainerDir,
    id: &str,
    inst: &Installed,
    p: &Planned,
) -> Result<()> {
    let Some(d) = &p.dns else {
        return Ok(());
    };
    let Some(st) = super::cmds::runsc_state(g, gv, id)? else {
        bail!("egress names: runsc no longer knows the sandbox it created");
    };
    // gVisor runs as root only (`select` refuses a rootless caller).
    let site = forwarder::Site {
        id,
        init_pid: st.pid,
        v2: &inst.v2,
        cgroup: &p.path,
        rootless: false,
    };
    forwarder::start(d, &dir.file(""), &p.egress, &site)?.keep();
    Ok(())
}
