//! Which backend a new container gets, and the preparation of a gVisor container's state
//! directory: checks that must fail before anything exists, the shadow bundle and the
//! record.
//!
//! | order | source | may choose |
//! |---|---|---|
//! | 1 | annotation `moat.runtime` in config.json | `gvisor` always; `native` only where nothing below chose gVisor (elsewhere ignored and reported) |
//! | 2 | argv[0] basename `moat-gvisor` (a symlink used as an engine's runtime path) | gVisor |
//! | 3 | `MOAT_RUNTIME` in moat's environment (daemon-wide default, tests) | either; `native` cannot undo 2 or 4 |
//! | 4 | `runtime` in the config file ([`super::config`]) | either |
//!
//! Annotations only tighten: `moat.runtime=native` cannot move a container off gVisor
//! where the operator chose it. The operator does that with a name: an alias whose
//! `[alias.NAME.gvisor]` sets `runtime = "native"` (`policy::config`).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

use super::config::GvisorConfig;
use super::Gvisor;
use crate::container::Context;
use crate::spec::Spec;
use crate::state::{self, ContainerDir, Record};

pub const RUNTIME_ANNOTATION: &str = "moat.runtime";
pub const NETWORK_ANNOTATION: &str = "moat.network";
pub const ALIAS: &str = "moat-gvisor";
pub const ENV: &str = "MOAT_RUNTIME";
/// runsc's `--root`, shared by the gVisor containers of one moat root: `<root>/@runsc`
/// (`@` is not valid in a container id, so it never collides with one). runsc keeps
/// `<id>_sandbox:<id>.{state,lock}` there and removes both on delete. A directory per
/// container would cost an `rmdir` per delete, which is slow on some filesystems (ext4
/// with `discard`: ≈ 4 ms each).
pub const RUNSC_ROOT: &str = "@runsc";
/// Records made before the shared root kept runsc's root and the shadow bundle in
/// `<root>/<id>/runsc` and `<root>/<id>/bundle`; they still work (the record names the
/// root, and [`shadow_config`] falls back to the old bundle).
const OLD_BUNDLE_DIR: &str = "bundle";

/// A create that goes to gVisor: the bundle's config.json as read, and why.
pub struct Selection {
    /// config.json's bytes, parsed (keys checked) by [`prepare`].
    pub raw: Vec<u8>,
    pub reason: String,
    pub config: GvisorConfig,
}

/// The `moat.runtime` annotation, read without parsing the rest of the document: every
/// create (native too) gets here first. Duplicate or case-variant keys are refused by the
/// full parse that follows on either path, so this quick look cannot pick a backend for a
/// document that is then accepted.
pub(crate) fn runtime_annotation(raw: &[u8]) -> serde_json::Result<Option<String>> {
    #[derive(serde::Deserialize)]
    struct Peek {
        #[serde(default)]
        annotations: Annotations,
    }
    #[derive(serde::Deserialize, Default)]
    struct Annotations {
        #[serde(default, rename = "moat.runtime")]
        runtime: Option<Value>,
    }
    let p: Peek = serde_json::from_slice(raw)?;
    match p.annotations.runtime {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(serde::de::Error::custom(format!(
            "annotation {RUNTIME_ANNOTATION}: want a string, got {v}"
        ))),
    }
}

/// True when moat was invoked through the `moat-gvisor` alias.
pub fn invoked_as_alias() -> bool {
    crate::linux::sys::args()
        .into_iter()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n == ALIAS))
        .unwrap_or(false)
}

/// The operator-level default (alias, environment, config): `Some(reason)` for gVisor.
pub fn operator_choice(
    alias: bool,
    env: Option<&str>,
    config: &GvisorConfig,
) -> Result<Option<String>> {
    let env = env.filter(|e| !e.is_empty());
    if let Some(e) = env.filter(|e| *e != "gvisor" && *e != "native") {
        bail!("{ENV}={e:?}: want gvisor or native");
    }
    let reason = if alias {
        Some(format!("invoked as {ALIAS}"))
    } else if env == Some("gvisor") {
        Some(format!("{ENV}=gvisor"))
    } else if config.runtime.as_deref() == Some("gvisor") {
        Some(format!(
            "runtime = \"gvisor\" in {}{}",
            config.source.display(),
            config
                .policy
                .alias
                .as_ref()
                .map_or(String::new(), |a| format!(" [alias.{a}]"))
        ))
    } else {
        None
    };
    if let (Some("native"), Some(r)) = (env, &reason) {
        bail!(
            "{ENV}=native refused: gVisor is required here ({r}); the operator moves containers \
             off gVisor with an alias whose [alias.NAME.gvisor] sets runtime = \"native\""
        );
    }
    Ok(reason)
}

/// Applies the annotation to the operator's choice. Annotations only tighten: `native`
/// where the operator chose gVisor is ignored (and reported by `policy::adjust`), as the
/// policy ignores a loosening `moat.*` annotation.
pub fn decide(operator: Option<String>, annotation: Option<&str>) -> Result<Option<String>> {
    match annotation {
        None => Ok(operator),
        Some("gvisor") => Ok(Some(format!("annotation {RUNTIME_ANNOTATION}=gvisor"))),
        Some("native") => Ok(operator),
        Some(other) => bail!("annotation {RUNTIME_ANNOTATION}={other:?}: want gvisor or native"),
    }
}

/// Decides at create/run: `None` for a native container. A bundle that cannot be read
/// is left to the native path to report, unless gVisor was required.
pub fn select(bundle: &Path) -> Result<Option<Selection>> {
    let config = GvisorConfig::load()?;
    let env = std::env::var(ENV).ok();
    let operator = operator_choice(invoked_as_alias(), env.as_deref(), &config)?;
    let path = bundle.join("config.json");
    let looked = std::fs::read(&path)
        .map_err(anyhow::Error::from)
        .and_then(|raw| Ok((runtime_annotation(&raw)?, raw)));
    let (annotation, raw) = match looked {
        Ok(v) => v,
        Err(_) if operator.is_none() => return Ok(None),
        Err(e) => return Err(e.context(format!("read {}", path.display()))),
    };
    Ok(
        decide(operator, annotation.as_deref())?.map(|reason| Selection {
            raw,
            reason,
            config,
        }),
    )
}

/// runsc from the config, else from PATH; it must be an executable file.
pub fn find_runsc(config: &GvisorConfig) -> Result<PathBuf> {
    let executable =
        |p: &Path| std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if let Some(p) = &config.runsc_path {
        return match executable(p) {
            Ok(true) => Ok(p.clone()),
            Ok(false) => bail!(
                "runsc not found ({}, runsc_path in {}, is not an executable file)",
                p.display(),
                config.source.display()
            ),
            Err(e) => bail!(
                "runsc not found ({}, runsc_path in {}: {})",
                p.display(),
                config.source.display(),
                crate::error_text::strerror(&e)
            ),
        };
    }
    let path = std::env::var("PATH").unwrap_or_default();
    for d in path.split(':').filter(|d| d.starts_with('/')) {
        let p = Path::new(d).join("runsc");
        if executable(&p).unwrap_or(false) {
            return Ok(p);
        }
    }
    bail!(
        "runsc not found (not in PATH={path:?}; install runsc or set runsc_path in {})",
        config.source.display()
    )
}

/// `--network` for runsc 20221219, whose default `sandbox` always fails on kernels that
/// show `net.core.rmem_default` in every namespace (gVisor #10704).
pub fn network_mode(spec: &Spec) -> Result<&'static str> {
    match spec.annotations.get(NETWORK_ANNOTATION).map(String::as_str) {
        None => {}
        Some("none") => return Ok("none"),
        Some("engine") => {}
        Some(other) => {
            bail!("annotation {NETWORK_ANNOTATION}={other:?}: want \"none\" or \"engine\"")
        }
    }
    Ok(
        match spec.linux().namespaces.iter().find(|n| n.typ == "network") {
            // The host's network: runsc's host stack.
            None => "host",
            // A new, empty namespace: nothing to attach to.
            Some(n) if n.path.as_deref().unwrap_or("").is_empty() => "none",
            // A namespace the engine prepared (CNI, netavark): the sandbox joins it.
            Some(_) => "host",
        },
    )
}

/// runtime-spec 1.3 makes `pids.limit: 0` a limit (no fork). runsc writes `pids.max` only
/// for a positive limit, so it would leave the sandbox unlimited, and the sandbox's host
/// cgroup cannot hold 0 (or runc's 1) either: the sentry's own threads count there.
pub fn zero_pids_limit(res: Option<&crate::spec::Resources>) -> Option<String> {
    res.and_then(|r| r.pids.as_ref())
        .filter(|p| p.limit == Some(0))
        .map(|_| {
            "linux.resources.pids.limit 0: refused under gVisor (runsc would set no limit, and \
             the sandbox's cgroup holds the sentry's own threads)"
                .to_string()
        })
}

/// The refusals that must happen before anything exists.
pub fn check(spec: &Spec, preserve_fds: u32) -> Result<()> {
    if crate::linux::sys::geteuid() != 0 {
        bail!("gVisor needs root (runsc's rootless mode is not used by moat)");
    }
    if preserve_fds > 0 {
        bail!("--preserve-fds {preserve_fds}: runsc cannot pass extra descriptors to a gVisor container");
    }
    let Some(process) = &spec.process else {
        bail!("process: required to create a container");
    };
    if process
        .selinux_label
        .as_deref()
        .is_some_and(|l| !l.is_empty())
    {
        bail!("process.selinuxLabel: SELinux is not supported by gVisor");
    }
    // runsc labels nothing: on an SELinux host a mount label would be dropped, so it is
    // refused as selinuxLabel is; elsewhere it is ignored as natively (and as runc does),
    // said in the --log.
    if let Some(label) = spec
        .linux()
        .mount_label
        .as_deref()
        .filter(|l| !l.is_empty())
    {
        if crate::linux::hostfacts::selinuxfs_mounted() {
            bail!("linux.mountLabel {label:?}: SELinux is not supported by gVisor");
        }
        crate::log::warn_log("linux.mountLabel ignored: the host has no SELinux (as runc)");
    }
    // runtime-spec 1.3 fields the native path applies and runsc would drop.
    if spec.linux().memory_policy.is_some() {
        bail!("linux.memoryPolicy: refused: gVisor does not apply it (the sentry's memory is placed by the host)");
    }
    if spec
        .linux()
        .resources
        .as_ref()
        .is_some_and(|r| r.rdma.is_some())
    {
        bail!("linux.resources.rdma: refused: gVisor does not apply it (runsc's rdma controller is a no-op)");
    }
    if !spec.linux().net_devices().is_empty() {
        bail!("linux.netDevices: refused: moat moves interfaces only into a native container's network namespace (runsc's sandbox takes its own)");
    }
    if let Some(e) = zero_pids_limit(spec.linux().resources.as_ref()) {
        bail!("{e}");
    }
    if process.exec_cpu_affinity.is_some() {
        bail!("process.execCPUAffinity: refused: gVisor does not apply it (exec'd processes live in the sentry)");
    }
    // runsc mounts a tmpfs empty whatever its options say (20221219 and 20240729 alike).
    // podman puts tmpcopyup on every --tmpfs and --read-only tmpfs, so refusing it would
    // refuse those containers: said in the --log instead of dropped in silence.
    for (i, m) in spec.mounts.iter().enumerate() {
        if m.options.iter().any(|o| o == "tmpcopyup") {
            crate::log::warn(&format!(
                "mounts[{i}].options: tmpcopyup not applied under gVisor (runsc mounts the tmpfs empty)"
            ));
        }
    }
    Ok(())
}

/// The effective spec runsc reads for this container, as JSON.
pub fn shadow_config(dir: &ContainerDir) -> Result<Value> {
    let mut path = dir.file(state::SPEC_FILE);
    if !path.exists() {
        path = dir.file(&format!("{OLD_BUNDLE_DIR}/{}", state::SPEC_FILE));
    }
    let b = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_slice(&b).with_context(|| format!("parse {}", path.display()))
}

/// runsc 20221219 takes every id as a prefix: with `web` and `web2` under one root, `web`
/// is ambiguous to each call and can no longer be addressed. A gVisor id that begins, or
/// is the beginning of, another gVisor container's (moat's records, and runsc's own state
/// files under `@runsc`) is refused. Checked after this create's directory exists, so of
/// two racing creates at least one sees the other; a directory without a readable record
/// (a create under way) counts as gVisor.
fn prefix_free(root: &Path, id: &str) -> Result<()> {
    let clash = |n: &str| n != id && (n.starts_with(id) || id.starts_with(n));
    let mut others: Vec<String> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n == RUNSC_ROOT || !clash(&n) {
                continue;
            }
            let native = ContainerDir::open_read(root, &n)
                .ok()
                .and_then(|d| d.load().ok())
                .is_some_and(|r| matches!(r.backend, super::Backend::Native));
            if !native {
                others.push(n);
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(root.join(RUNSC_ROOT)) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some((c, _)) = n.split_once("_sandbox:") {
                if clash(c) && !others.iter().any(|o| o == c) {
                    others.push(c.to_string());
                }
            }
        }
    }
    match others.first() {
        None => Ok(()),
        Some(o) => bail!(
            "container id {id:?}: gVisor container {o:?} under the same root begins or is the \
             beginning of it, and runsc takes ids as prefixes (one of the two could no longer \
             be addressed); choose an id that neither begins another gVisor container's nor \
             is begun by one"
        ),
    }
}

/// Everything a gVisor create needs, with the state directory, shadow bundle and record
/// in place. On error nothing is left behind.
pub struct Prepared {
    pub dir: ContainerDir,
    pub gv: Gvisor,
    pub shadow: PathBuf,
    /// For an app container of a gVisor pod: its pod sandbox's state directory, locked
    /// until runsc has added the container (`super::pod::join`).
    pub sandbox: Option<ContainerDir>,
    /// The egress programs' cgroup, and the plan they came from (`super::egress`).
    pub egress: Option<(super::egress::Installed, super::egress::Planned)>,
}

pub fn prepare(
    g: &Context,
    bundle: &Path,
    id: &str,
    preserve_fds: u32,
    sel: Selection,
) -> Result<Prepared> {
    let mut spec = Spec::parse_file(&sel.raw, &bundle.join("config.json"))?;
    // The same validation as a native create: runsc gets nothing moat would refuse.
    crate::spec::validate::validate(&mut spec).map_err(crate::spec::LoadError::from)?;
    check(&spec, preserve_fds)?;
    // A pod's app container joins its sandbox only where moat's records show it as that
    // pod's, and takes the sandbox's runsc flags (super::pod).
    let (pod, sandbox) = match super::pod::requested(&spec.annotations)? {
        super::pod::Requested::Own => (None, None),
        super::pod::Requested::Sandbox => (Some(super::PodRole::Sandbox), None),
        super::pod::Requested::Container(sb) => {
            let joined = super::pod::join(g, id, &sb)?;
            super::pod::check_paths(&spec, &sb, joined.pid)?;
            (None, Some(joined))
        }
    };
    // A container of its own gets a new control namespace (super::control): made while
    // the spec is checked and written, taken once the record exists.
    let unshared = match sandbox {
        None => Some(super::control::unshare()?),
        Some(_) => None,
    };
    let sandbox_paths = sandbox
        .as_ref()
        .map(|j| super::pod::take_sandbox_paths(&mut spec, j.pid))
        .unwrap_or_default();
    let engine_apparmor = spec
        .process
        .as_ref()
        .and_then(|p| p.apparmor_profile.clone());
    let cfg = &sel.config.policy;
    let mut decision = crate::container::policy::decide(&mut spec, cfg, id, false)?.decision;
    super::policy::adjust(&mut spec, &mut decision, engine_apparmor)?;
    super::pod::restore_paths(&mut spec, sandbox_paths);
    if sandbox.is_some() {
        decision.not_applied.push(super::pod::resources_note(&spec));
    }
    let runsc = find_runsc(&sel.config)?;
    // What this runsc has (cached per binary under the root): the platform is one it
    // lists, runsc's own default where the config names none. An app container of a pod
    // takes its sandbox's flags instead.
    let probe = match sandbox {
        None => Some(super::probe::cached(&runsc, &g.root)?),
        Some(_) => None,
    };
    let platform = match &probe {
        Some(probe) => {
            let p = probe.platform(cfg.platform.as_deref(), &runsc, &sel.config.source)?;
            if p == "kvm" {
                super::probe::check_kvm(&sel.config.source)?;
            }
            p
        }
        None => String::new(),
    };
    let network = network_mode(&spec)?;
    let egress = super::egress::plan(
        &mut spec,
        &mut decision,
        network,
        g.systemd_cgroup,
        &g.root.join(id),
        id,
        sandbox.as_ref().map(|j| &j.dir),
    )?;
    // runsc runs in a namespace of its own (super::control) and starts a host-network
    // sandbox in the namespace it runs in: the host's network is named by path.
    if network == "host" && sandbox.is_none() {
        if let Some(linux) = spec.linux.as_mut() {
            if !linux.namespaces.iter().any(|n| n.typ == "network") {
                linux.namespaces.push(crate::spec::Namespace {
                    typ: "network".into(),
                    path: Some(super::control::host_netns_path()),
                });
            }
        }
    }
    let cwd = std::env::current_dir().context("getcwd")?;
    let bundle = cwd.join(bundle);
    let rootfs = spec.rootfs(&bundle);
    // Serialised from the typed spec: runsc reads what the policy saw (super::spec). Before
    // anything exists: a pass-through field of the wrong shape is refused here.
    // The profile's errnos and exec'd processes' filter: moat's own filter, installed
    // inside the sandbox in front of the process (super::seccomp_exec), or runsc's
    // conversion for the process where it does the same (super::seccomp_runsc): never in
    // a pod, whose other containers' processes share the sentry.
    let mut runsc_spec = spec.clone();
    let table = probe
        .as_ref()
        .filter(|_| pod.is_none())
        .map(|p| p.syscalls.as_slice());
    let exec_prefix =
        super::seccomp_exec::wrap_spec(&mut runsc_spec, &g.root.join("@cache"), table)?;
    let runsc_config = super::spec::config_json(&runsc_spec, &bundle, &rootfs)?;
    let state_root = g.root.clone();
    let dir = ContainerDir::create(&state_root, id)?;
    if let Err(e) = prefix_free(&state_root, id) {
        let _ = dir.remove();
        return Err(e);
    }
    crate::log::debug(&format!("{id}: gVisor ({})", sel.reason));
    let control = dir.file(super::control::CONTROL_NETNS);
    let sandbox_control = sandbox.as_ref().and_then(|j| j.gv.control_netns.clone());
    let (gv, sandbox) = match sandbox {
        // An app container's runsc create talks to its sandbox's control server: in the
        // sandbox's namespace, pinned again under this container's directory.
        Some(j) => {
            let mut gv = j.gv;
            gv.control_netns = gv.control_netns.as_ref().map(|_| control.clone());
            (gv, Some(j.dir))
        }
        None => (
            Gvisor {
                runsc,
                root: state_root.join(RUNSC_ROOT),
                // Recorded even when it is runsc's default, so every later call, and
                // `verify`, names the same one.
                platform,
                network: network.into(),
                // A pod sandbox's flags are its app containers' too, and any of them may
                // bring a profile (runsc ignores one without --oci-seccomp).
                oci_seccomp: spec.linux().seccomp.is_some() || pod.is_some(),
                systemd_cgroup: g.systemd_cgroup,
                pod,
                control_netns: Some(control),
            },
            None,
        ),
    };
    // The state directory is the shadow bundle: runsc reads `config.json` from it, as
    // `verify` reads a native container's effective spec.
    let shadow = dir.path.clone();
    let mut installed: Option<super::egress::Installed> = None;
    let made = (|| -> Result<()> {
        match std::fs::DirBuilder::new().mode(0o700).create(&gv.root) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(e).with_context(|| format!("mkdir {}", gv.root.display()))
            }
            _ => {}
        }
        // runsc creates the sandbox's cgroup at linux.cgroupsPath, under the fleet
        // parent when the policy placed it there; the parent and its caps are moat's.
        if let Some((path, res)) = crate::policy::fleet_budget(cfg) {
            use crate::linux::cgroups::Cgroup;
            Cgroup::plan(Some(&path), id, false)
                .and_then(|(layout, path)| Cgroup::ensure_fleet(layout, path, &res))
                .with_context(|| format!("fleet cgroup {path}"))?;
        }
        let egress_cgroup = egress.as_ref().map(super::egress::cgroup).transpose()?;
        // Written in place: nothing reads them before the record (saved atomically, last)
        // exists, and a create that fails removes the directory.
        dir.write_new(state::SPEC_FILE, &runsc_config)?;
        if let Some(prefix) = &exec_prefix {
            let json = serde_json::to_vec(prefix).expect("strings serialise");
            dir.write_new(super::seccomp_exec::EXEC_PREFIX_FILE, &json)?;
        }
        dir.save_decision(&decision, state::Save::New)?;
        let rec = Record {
            format: state::FORMAT_VERSION,
            id: id.to_string(),
            pid: 0,
            pid_start: 0,
            bundle: bundle.clone(),
            rootfs: rootfs.clone(),
            created: crate::log::now_rfc3339(true),
            owner: String::new(),
            annotations: spec.annotations.clone(),
            cgroup: egress_cgroup.clone(),
            systemd_cgroup: g.systemd_cgroup,
            rootless: false,
            own_pidns: true,
            policy: decision.policy,
            notify_socket: None,
            backend: super::Backend::Gvisor(gv.clone()),
            post_hooks: None,
        };
        dir.save(&rec)?;
        // After the record that names it: a create killed here leaves delete the pin to
        // unmount.
        if gv.control_netns.is_some() {
            match (&sandbox_control, unshared) {
                (Some(theirs), _) => super::control::share(&dir, theirs)?,
                (None, Some(unshared)) => unshared.pin(&dir)?,
                (None, None) => bail!("no control namespace was made for {id}"),
            };
        }
        // The egress programs on a cgroup v2 directory runsc create is started in: after
        // the record that names it, so that a create killed here leaves delete the path.
        if let (Some(p), Some(cg)) = (&egress, &egress_cgroup) {
            installed = Some(super::egress::install(p, cg)?);
            crate::linux::killpoint::at("create", "parent", "gvisor.egress");
            if let Some(d) = &p.dns {
                crate::linux::egress::forwarder::write_resolv(d, d.first)
                    .with_context(|| format!("write {}", d.resolv.display()))?;
            }
        }
        Ok(())
    })();
    if let Err(e) = made {
        if let Some(i) = &installed {
            i.remove();
        }
        let _ = dir.remove();
        return Err(e);
    }
    // The policy's one line once nothing moat checks can fail any more (a failed call
    // writes its error line alone).
    decision.report(id, cfg);
    Ok(Prepared {
        dir,
        gv,
        shadow,
        sandbox,
        egress: installed.map(|i| {
            let p = egress.expect("installed from a plan");
            (i, p)
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(runtime: Option<&str>) -> GvisorConfig {
        GvisorConfig {
            source: "/etc/moat/config.toml".into(),
            runtime: runtime.map(Into::into),
            runsc_path: None,
            policy: Default::default(),
        }
    }

    #[test]
    fn operator_sources() {
        assert_eq!(operator_choice(false, None, &cfg(None)).unwrap(), None);
        assert!(operator_choice(true, None, &cfg(None))
            .unwrap()
            .unwrap()
            .contains(ALIAS));
        assert!(operator_choice(false, Some("gvisor"), &cfg(None))
            .unwrap()
            .is_some());
        assert!(operator_choice(false, None, &cfg(Some("gvisor")))
            .unwrap()
            .is_some());
        assert_eq!(
            operator_choice(false, Some("native"), &cfg(None)).unwrap(),
            None
        );
        assert_eq!(operator_choice(false, Some(""), &cfg(None)).unwrap(), None);
        let e = operator_choice(false, Some("native"), &cfg(Some("gvisor"))).unwrap_err();
        assert!(e.to_string().contains("MOAT_RUNTIME=native refused"), "{e}");
        assert!(operator_choice(true, Some("native"), &cfg(None)).is_err());
        assert!(operator_choice(false, Some("kata"), &cfg(None)).is_err());
    }

    #[test]
    fn annotation_may_raise_but_not_lower() {
        assert_eq!(decide(None, None).unwrap(), None);
        assert!(decide(None, Some("gvisor")).unwrap().is_some());
        assert_eq!(decide(None, Some("native")).unwrap(), None);
        assert!(decide(Some("x".into()), Some("gvisor")).unwrap().is_some());
        // Annotations only tighten: native under the operator's gVisor is ignored.
        let r = decide(Some(format!("invoked as {ALIAS}")), Some("native")).unwrap();
        assert!(r.unwrap().contains(ALIAS));
        assert!(decide(None, Some("runc")).is_err());
    }

    fn spec(json: &str) -> Spec {
        Spec::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn network_follows_the_namespace() {
        assert_eq!(network_mode(&spec(r#"{"linux":{}}"#)).unwrap(), "host");
        let none = r#"{"linux":{"namespaces":[{"type":"network"}]}}"#;
        assert_eq!(network_mode(&spec(none)).unwrap(), "none");
        let joined = r#"{"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}"#;
        assert_eq!(network_mode(&spec(joined)).unwrap(), "host");
        let forced = r#"{"annotations":{"moat.network":"none"},"linux":{}}"#;
        assert_eq!(network_mode(&spec(forced)).unwrap(), "none");
        let bad = r#"{"annotations":{"moat.network":"sandbox"}}"#;
        assert!(network_mode(&spec(bad)).is_err());
    }

    #[test]
    fn refusals() {
        let ok = spec(r#"{"process":{"args":["sh"]}}"#);
        if crate::linux::sys::geteuid() == 0 {
            check(&ok, 0).unwrap();
        }
        assert!(check(&ok, 1)
            .unwrap_err()
            .to_string()
            .contains("--preserve-fds 1"));
        let se = spec(r#"{"process":{"args":["sh"],"selinuxLabel":"system_u:x"}}"#);
        assert!(check(&se, 0).unwrap_err().to_string().contains("SELinux"));
        let mp =
            spec(r#"{"process":{"args":["sh"]},"linux":{"memoryPolicy":{"mode":"MPOL_LOCAL"}}}"#);
        let aff = spec(r#"{"process":{"args":["sh"],"execCPUAffinity":{"final":"0"}}}"#);
        let rdma = spec(
            r#"{"process":{"args":["sh"]},"linux":{"resources":{"rdma":{"rxe0":{"hcaHandles":1}}}}}"#,
        );
        if crate::linux::sys::geteuid() == 0 {
            assert!(check(&mp, 0)
                .unwrap_err()
                .to_string()
                .starts_with("linux.memoryPolicy: refused"));
            assert!(check(&aff, 0)
                .unwrap_err()
                .to_string()
                .starts_with("process.execCPUAffinity: refused"));
            assert!(check(&rdma, 0)
                .unwrap_err()
                .to_string()
                .starts_with("linux.resources.rdma: refused: gVisor does not apply it"));
        }
        assert!(check(&spec("{}"), 0).is_err());
    }

    #[test]
    fn the_annotation_is_found_without_a_full_parse() {
        let a = |j: &str| runtime_annotation(j.as_bytes());
        assert_eq!(
            a(r#"{"annotations":{"moat.runtime":"gvisor","x":{}}}"#)
                .unwrap()
                .as_deref(),
            Some("gvisor")
        );
        assert_eq!(a(r#"{"process":{"args":1}}"#).unwrap(), None);
        assert!(a(r#"{"annotations":{"moat.runtime":1}}"#).is_err());
        assert!(a("{").is_err());
    }

    #[test]
    fn runsc_from_config_must_exist() {
        let mut c = cfg(None);
        c.runsc_path = Some("/nonexistent/runsc".into());
        let e = find_runsc(&c).unwrap_err().to_string();
        assert!(e.starts_with("runsc not found (/nonexistent/runsc"), "{e}");
    }
}
