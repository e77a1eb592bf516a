//! Row 1 of the create table: the spec, with the policy applied on the host facts it was
//! decided from (`container::policy::decide`, the one place both backends and `policy
//! explain` decide), every other host fact read and every spec field checked and turned
//! into what the parent and the child will do, **before any side effect**. A bad spec fails here, so it leaves nothing because nothing was made.
//!
//! What only a side effect can tell is left open in the plan and written into it by the
//! row that makes it, with no check left for after: the `moat.userns=auto` range (row 4:
//! the mappings and the idmapped rootfs), the cgroup's hierarchies (row 5: one that
//! refused moat is not mounted; a rootless subtree that is not writable means no cgroup).
//! The only write of this row is the seccomp cache under the state root (`@cache`),
//! shared by every container and never the container's own.

use std::ffi::CString;
use std::os::fd::AsFd;
use std::path::PathBuf;

use super::Error;
use crate::linux::attrs::Attrs;
use crate::linux::cgroups::{Cgroup, Hierarchy, Layout, NoCgroup};
use crate::linux::hostfacts::HostFacts;
use crate::linux::namespaces::{self, Plan as NsPlan};
use crate::linux::sync::Shape;
use crate::linux::{devices, notify, rootfs, rootless, seccomp, sys};
use crate::policy;
use crate::spec::{Device, Spec};
use crate::state::idpool::IdRange;

/// What the caller asked for: `create`'s flags, resolved by the lifecycle layer.
pub struct Options {
    pub id: String,
    /// Absolute and lexically clean.
    pub bundle: PathBuf,
    pub console_socket: Option<PathBuf>,
    /// Where a pidfd of the init is sent once it exists (`--pidfd-socket`).
    pub pidfd_socket: Option<PathBuf>,
    /// Absolute (relative to the caller's cwd).
    pub pid_file: Option<PathBuf>,
    pub no_pivot: bool,
    pub new_keyring: bool,
    pub preserve_fds: u32,
    /// Socket-activation fds passed on ahead of the preserved ones (`container/startup.rs`).
    pub listen_fds: u32,
    pub systemd_cgroup: bool,
    /// Foreground `run`: the caller waits for the init, so it must be its parent.
    pub foreground: bool,
    /// `--rootless` resolved: no real root (see `linux/rootless.rs`).
    pub rootless: bool,
    /// The state root (`--root` resolved).
    pub root: PathBuf,
    /// The caller's sd_notify socket (see `linux/notify.rs`).
    pub notify_socket: Option<String>,
}

/// Where the container's cgroup will be.
pub(super) enum CgroupPlan {
    /// `path` in every hierarchy of the host's layout.
    Host { layout: Layout, path: String },
    /// Rootless on a pure v2 host: a delegated subtree, if the caller may write it.
    Delegated { hierarchy: Hierarchy, path: String },
    /// Rootless, and no cgroup can be had on this host (why).
    None,
    /// The systemd driver: the scope's cgroup as it will be (row 8 asks systemd for it,
    /// once the child exists to be its first process).
    Systemd(Cgroup),
}

impl CgroupPlan {
    /// The cgroup this plan makes in row 5 (the systemd driver's: its directories, the
    /// unit not yet asked for), for [`crate::state::CGROUP_PLANNED_FILE`].
    pub(super) fn planned(&self) -> Option<Cgroup> {
        match self {
            CgroupPlan::Host { layout, path } => Some(Cgroup::planned(layout, path)),
            CgroupPlan::Delegated { hierarchy, path } => Some(Cgroup {
                path: path.clone(),
                unified: true,
                hierarchies: vec![hierarchy.clone()],
                skipped: Vec::new(),
                systemd: None,
                joined: false,
            }),
            CgroupPlan::None => None,
            CgroupPlan::Systemd(cg) => Some(Cgroup {
                systemd: None,
                ..cg.clone()
            }),
        }
    }
}

/// Everything create does, computed before anything exists. The parent's rows read the
/// first part; the child (a fork, so the plan is in its memory) reads the second.
pub struct Plan {
    pub(super) opts: Options,
    /// The spec that runs: the policy applied, the notify mount added.
    pub(super) spec: Spec,
    /// The policy's decision, recorded as `policy.json`.
    pub(super) decision: crate::policy::Decision,
    /// The egress policy attached to the container's cgroup in row 6 (8 under the systemd
    /// driver), before the init runs anything.
    pub(super) egress: Option<crate::policy::egress::Egress>,
    /// The egress list has names: the container's resolv.conf (written in row 6) and the
    /// DNS forwarder started once the init is ready (row 14).
    pub(super) dns: Option<crate::linux::egress::forwarder::Plan>,
    pub(super) policy: crate::policy::Mode,
    /// How long the parent waits for each answer of the child (`[runtime] sync_timeout`).
    pub(super) sync_timeout: std::time::Duration,
    /// The spec runs under moat's AppArmor profile on an AppArmor host (row 2 loads it
    /// unless the host facts say it is loaded).
    pub(super) apparmor_profile: bool,
    pub(super) host: HostFacts,
    pub(super) notify: Option<notify::Plan>,
    /// `moat.userns=auto`: the pool and the size of the range to take (row 4).
    pub(super) userns_pool: Option<(IdRange, u32)>,
    /// A bounded root under `[fleet] rootfs_budget`: (the budget, the root's cap) for
    /// row 4's ledger.
    pub(super) rootfs_budget: Option<(u64, u64)>,
    /// The fleet budget: its path in the container's layout and its limits.
    pub(super) fleet: Option<(Layout, String, crate::spec::Resources)>,
    /// The fleet budget under the systemd driver: its slice and its limits.
    pub(super) fleet_slice: Option<(String, crate::spec::Resources)>,
    pub(super) cgroup: CgroupPlan,

    pub(super) ns: NsPlan,
    pub(super) rootfs: rootfs::Plan,
    pub(super) devices: Vec<Device>,
    pub(super) userns: bool,
    pub(super) attrs: Attrs,
    pub(super) hostname: Option<String>,
    pub(super) domainname: Option<String>,
    pub(super) sysctl: Vec<(String, String)>,
    /// Sysctls of a namespace joined by path while the container gets a new user
    /// namespace: written by the intermediate right after the join, while it is still
    /// privileged over that namespace (container root never is).
    pub(super) sysctl_joined: Vec<(String, String)>,
    pub(super) personality: Option<libc::c_ulong>,
    pub(super) hooks: Option<crate::spec::Hooks>,
    pub(super) new_keyring: Option<CString>,
    pub(super) loopback_up: bool,
    /// What the policy changed, in one line (`policy::Decision::summary`).
    pub cut: Option<String>,
    /// An unprivileged parent writes the child's id maps, which needs the child's
    /// `/proc/<pid>` to be its own: the child stays dumpable until they are written.
    pub(super) dumpable_until_mapped: bool,
}

impl Plan {
    /// `restore`'s reads of the plan: the spec that runs, the rootfs on the host, and
    /// whether the container's egress list names domains (its DNS forwarder is not
    /// restarted by a restore yet; the egress programs are attached in row 6, as for create).
    pub fn for_restore(&self) -> (&Spec, &std::path::Path, bool) {
        (&self.spec, &self.rootfs.rootfs, self.dns.is_some())
    }

    /// The namespace of kind `flag` (`CLONE_NEW*`) the spec joins by path, as moat opened
    /// it: a restore hands it to CRIU for an image that left that namespace out.
    pub fn joined_ns(&self, flag: libc::c_int) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.ns
            .joins
            .iter()
            .chain(self.ns.user_join.iter())
            .chain(self.ns.mount_join.iter())
            .find(|j| j.flag == flag)
            .map(|j| j.fd.as_fd())
    }

    /// What the tree a restore of this plan must be, checked before it runs
    /// (`moat-criu`, see [`crate::linux::criu::wire::Expect`]): the init's capability sets,
    /// NNP and seccomp filters as this plan would give them, its namespaces as this plan
    /// makes (new: not the host's) or joins them, `cgroup`'s directories.
    pub fn restore_expect(&self, cgroup: &Cgroup) -> crate::linux::criu::wire::Expect {
        use crate::linux::criu::wire::{Expect, NsExpect, NsRule};
        let link = |p: &str| {
            std::fs::read_link(p)
                .map(|l| l.display().to_string())
                .unwrap_or_default()
        };
        let kinds = [
            ("pid", libc::CLONE_NEWPID),
            ("net", libc::CLONE_NEWNET),
            ("mnt", libc::CLONE_NEWNS),
            ("ipc", libc::CLONE_NEWIPC),
            ("uts", libc::CLONE_NEWUTS),
            ("user", libc::CLONE_NEWUSER),
            ("cgroup", libc::CLONE_NEWCGROUP),
            ("time", namespaces::CLONE_NEWTIME),
        ];
        let joins: Vec<&namespaces::Join> = self
            .ns
            .joins
            .iter()
            .chain(self.ns.user_join.iter())
            .chain(self.ns.mount_join.iter())
            .collect();
        let namespaces = kinds
            .iter()
            .filter(|(name, _)| std::path::Path::new(&format!("/proc/self/ns/{name}")).exists())
            // CRIU gives every tree it restores a time namespace of its own, to carry its
            // monotonic and boot clocks over (offsets only, nothing else): the host's one
            // is not expected back unless the spec joins it by path.
            .filter(|&&(_, flag)| {
                flag != namespaces::CLONE_NEWTIME
                    || self.ns.new & flag != 0
                    || joins.iter().any(|j| j.flag == flag)
            })
            .map(|&(name, flag)| {
                let host = link(&format!("/proc/self/ns/{name}"));
                let rule = if let Some(j) = joins.iter().find(|j| j.flag == flag) {
                    // By the inode of the file moat opened, in `/proc/<pid>/ns/`'s form: a
                    // namespace file opened through a bind mount (`ip netns`'s) reads
                    // back as that mount's path, never as `NAME:[INODE]`.
                    NsRule::Joined {
                        link: sys::fstat(j.fd.as_fd())
                            .map(|st| format!("{name}:[{}]", st.st_ino))
                            .unwrap_or_default(),
                        path: j.path.clone(),
                    }
                } else if self.ns.new & flag != 0 {
                    NsRule::Own { host }
                } else {
                    NsRule::Host { host }
                };
                NsExpect {
                    name: name.to_string(),
                    rule,
                }
            })
            .collect();
        let caps = &self.attrs.caps;
        Expect {
            namespaces,
            cap_bounding: caps.bounding,
            cap_effective: caps.effective,
            cap_permitted: caps.permitted,
            cap_inheritable: caps.inheritable,
            cap_ambient: caps.ambient,
            no_new_privs: self.attrs.no_new_privs,
            seccomp_filters: u32::try_from(self.attrs.seccomp.len()).unwrap_or(u32::MAX),
            cgroup_dirs: cgroup
                .hierarchies
                .iter()
                .map(|h| h.dir(&cgroup.path))
                .collect(),
            // The checkpoint's record, which the plan does not know: the caller's.
            mounts: Vec::new(),
            given: Vec::new(),
        }
    }

    /// Row 1. Takes `spec` with the policy (`cfg`) applied on the host facts it was decided
    /// from (`container::policy::decide`, probed on the host before anything is forked: the
    /// policy and the child decide LSMs and host namespaces from these facts, never from
    /// the container's view), checks every field. Creates nothing.
    pub fn new(
        spec: Spec,
        cfg: &policy::Config,
        decided: policy::Decided,
        opts: Options,
    ) -> Result<Plan, Error> {
        Plan::with_host_cgroup(spec, cfg, decided, opts, Cgroup::plan)
    }

    /// [`Plan::new`] with the host's cgroup layout and the container's path from
    /// `host_cgroup` (`Cgroup::plan`, which reads the layout from the host; a sequence
    /// test gives a fixed one, so nothing is probed).
    pub(super) fn with_host_cgroup(
        spec: Spec,
        cfg: &policy::Config,
        decided: policy::Decided,
        opts: Options,
        host_cgroup: impl FnOnce(
            Option<&str>,
            &str,
            bool,
        )
            -> Result<(Layout, String), crate::linux::cgroups::CgroupError>,
    ) -> Result<Plan, Error> {
        let mut spec = spec;
        let policy::Decided {
            decision,
            host,
            floor: facts,
        } = decided;
        // The policy's one line, logged once the create succeeded (a failed call writes
        // its error line alone: podman reads the log as one object), and kept for the
        // init: an execve the kernel refuses after `start` names the cut too.
        let cut = decision.summary(&opts.id, cfg);
        // Only a moat that may load profiles tries (a rootless one uses moat-default only
        // where root has loaded it: `policy`).
        let apparmor_profile = host.apparmor
            && host.apparmor_may_load
            && spec.process().apparmor_profile.as_deref() == Some(policy::APPARMOR_PROFILE_NAME);
        let userns_pool = if decision.userns_pool {
            if opts.rootless {
                return Err(Error::UsernsRootless);
            }
            let (start, size) = cfg.userns_pool;
            Some((IdRange { start, size }, cfg.userns_size))
        } else {
            None
        };
        if decision.bounded_root.is_some() && opts.rootless {
            return Err(Error::EphemeralRootless);
        }
        // The whole cap: the data and the inode space (files and xattrs) the tmpfs holds
        // beside it, both host RAM.
        let rootfs_budget = cfg
            .rootfs_budget
            .zip(decision.bounded_root.map(|b| b.cap()));
        // The state directory does not exist yet; the socket's mount is planned for it.
        let dir = opts.root.join(&opts.id);
        let (notify, notify_source) = match &opts.notify_socket {
            Some(_) => {
                let (p, source) = notify::Plan::new(&mut spec, &dir);
                (Some(p), Some(source))
            }
            None => (None, None),
        };
        // Names in the egress list: the container's resolv.conf names its DNS forwarder.
        let (dns, dns_source) = match &decision.egress {
            Some(e) if e.has_names() => {
                if e.resolvers.is_empty() {
                    return Err(crate::linux::egress::forwarder::ForwarderError::Failed(
                        "the list has names but there is no resolver to ask: the spec binds no \
                         /etc/resolv.conf with a nameserver, and [egress] resolvers is unset"
                            .into(),
                    )
                    .into());
                }
                let (p, source) = crate::linux::egress::forwarder::plan(&mut spec, &dir, &opts.id);
                (Some(p), Some(source))
            }
            _ => (None, None),
        };
        let made_later: Vec<(PathBuf, bool)> =
            notify_source.into_iter().chain(dns_source).collect();
        let cgroups_path = spec.linux().cgroups_path.clone();
        let (cgroup, planned) = if opts.systemd_cgroup {
            let user = opts.rootless.then(crate::linux::rootless::host_uid);
            let (layout, scope, path) =
                Cgroup::plan_systemd(cgroups_path.as_deref(), &opts.id, user, &opts.root)?;
            let mut planned = Cgroup::planned(&layout, &path);
            planned.systemd = Some(scope);
            // runc turns these into unit properties; an image can carry annotations, and
            // a property such as DeviceAllow or Delegate would widen its own scope.
            let props: Vec<&str> = spec
                .annotations
                .keys()
                .filter(|k| k.starts_with("org.systemd.property."))
                .map(String::as_str)
                .collect();
            if !props.is_empty() {
                crate::log::warn(&format!(
                    "--systemd-cgroup: annotations {} ignored: moat takes no unit properties from annotations, which an image can set",
                    props.join(", ")
                ));
            }
            (CgroupPlan::Systemd(planned.clone()), planned)
        } else if opts.rootless {
            match Cgroup::plan_rootless(cgroups_path.as_deref(), &opts.id)? {
                Ok((hierarchy, path)) => {
                    let planned = Cgroup {
                        path: path.clone(),
                        unified: true,
                        hierarchies: vec![hierarchy.clone()],
                        skipped: Vec::new(),
                        systemd: None,
                        joined: false,
                    };
                    (CgroupPlan::Delegated { hierarchy, path }, planned)
                }
                Err(NoCgroup(why)) => {
                    no_cgroup(&mut spec, &why);
                    (CgroupPlan::None, Cgroup::default())
                }
            }
        } else {
            let (layout, path) =
                host_cgroup(cgroups_path.as_deref(), &opts.id, opts.systemd_cgroup)?;
            let planned = Cgroup::planned(&layout, &path);
            (CgroupPlan::Host { layout, path }, planned)
        };
        // A controller only some kernels have, refused before anything is made.
        if spec
            .linux()
            .resources
            .as_ref()
            .is_some_and(|r| r.rdma.is_some())
        {
            planned.require_controller("rdma", "linux.resources.rdma")?;
        }
        // A fleet budget is a host-wide cgroup: never a rootless caller's.
        let fleet = match (policy::fleet_budget(cfg), &cgroup) {
            (Some((path, res)), CgroupPlan::Host { layout, .. }) => {
                let path = crate::linux::cgroups::resolve_path(Some(&path), &opts.id)?;
                Some((layout.clone(), path, res))
            }
            _ => None,
        };
        let fleet_slice = match (policy::fleet_budget(cfg), &cgroup) {
            (Some((path, res)), CgroupPlan::Systemd(cg))
                if cg.systemd.as_ref().is_some_and(|s| s.user.is_none()) =>
            {
                Some((crate::linux::cgroups::systemd::fleet_slice(&path)?, res))
            }
            _ => None,
        };
        let host_ns_refused = policy::refused_host_namespaces(&decision, cfg, &facts);
        let seccomp_cache = opts.root.join("@cache").join("seccomp");

        let Some(p) = spec.process.as_ref() else {
            return Err(Error::NoProcess);
        };
        if p.args.is_empty() {
            return Err(Error::NoArgs);
        }
        if p.terminal && opts.console_socket.is_none() && !opts.foreground {
            return Err(Error::TerminalWithoutSocket);
        }
        let ns = NsPlan::from_spec(&spec)?;
        ns.refuse_host(&host_ns_refused)?;
        let linux = spec.linux();
        if (spec.hostname.as_deref().is_some_and(|h| !h.is_empty()) || spec.domainname.is_some())
            && !ns.has_new(libc::CLONE_NEWUTS)
            && !ns.joins.iter().any(|j| j.flag == libc::CLONE_NEWUTS)
        {
            return Err(Error::HostnameWithoutUts);
        }
        let (mut sysctl, mut sysctl_joined) = (Vec::new(), Vec::new());
        for (k, v) in &linux.sysctl {
            let owner = namespaces::sysctl_namespace(k);
            let private =
                owner.is_some_and(|f| ns.has_new(f) || ns.joins.iter().any(|j| j.flag == f));
            if !private {
                return Err(Error::SysctlNotPrivate { key: k.clone() });
            }
            if k.contains('/') || k.contains("..") {
                return Err(Error::SysctlKey { key: k.clone() });
            }
            // Joined, and container root will not be privileged over it.
            let early = owner.is_some_and(|f| !ns.has_new(f)) && ns.has_new(libc::CLONE_NEWUSER);
            let list = if early {
                &mut sysctl_joined
            } else {
                &mut sysctl
            };
            list.push((k.replace('.', "/"), v.clone()));
        }
        if let Some(s) = &linux.seccomp {
            seccomp::refuse_notify_before_handover(s, decision.seccomp_floor)?;
        }
        let cache = Some(seccomp_cache.as_path());
        let mut seccomp: Vec<_> = linux
            .seccomp
            .iter()
            .map(|s| {
                // The built-in profile is keyed by its source (the policy put it there
                // unchanged when this compares equal).
                let builtin = policy::restricted_profile().is_ok_and(|r| r == s);
                let source = builtin.then_some(policy::RESTRICTED_PROFILE.as_bytes());
                seccomp::compile_cached(s, source, cache)
            })
            .collect::<Result<_, _>>()?;
        if decision.seccomp_floor {
            seccomp.push(seccomp::floor(policy::FLOOR_PROFILE, cache)?);
        }
        // Packet sockets send below every egress program: refused where raw sockets are
        // kept under an egress policy (the capability set is fixed from here on).
        if decision.egress.as_ref().is_some_and(|e| e.packets) {
            seccomp.push(seccomp::floor(policy::PACKET_PROFILE, cache)?);
        }
        let mut attrs = Attrs::from_process(p, "process", seccomp, opts.preserve_fds)?
            .memory_policy(linux.memory_policy.as_ref())?
            .on_host(&host);
        // Checked above, kept in the spec for later execs: the spec makes
        // execCPUAffinity inapplicable to the init.
        attrs.exec_affinity = None;
        attrs.cpuset_cpus = crate::linux::attrs::cpuset_cpus(linux);
        attrs.pass_listen_fds(opts.listen_fds);
        // A foreground run relaying the pty to a file or pipe: the program's own bytes.
        attrs.clear_onlcr = attrs.terminal
            && opts.foreground
            && opts.console_socket.is_none()
            && !std::io::IsTerminal::is_terminal(&std::io::stdout());
        if opts.rootless {
            rootless_checks(&spec, &ns)?;
            if !linux.net_devices().is_empty() {
                return Err(Error::NetDevicesRootless);
            }
        }
        if userns_pool.is_some() && !ns.has_new(libc::CLONE_NEWUSER) && ns.user_join.is_none() {
            return Err(Error::IdmapNoUserns);
        }
        // mknod needs the initial user namespace: in any other, device nodes are bound.
        let userns = ns.has_new(libc::CLONE_NEWUSER) || ns.user_join.is_some() || opts.rootless;
        let rootfs = rootfs::plan(
            &spec,
            &opts.bundle,
            opts.no_pivot,
            planned.mount_sources(),
            ns.has_new(libc::CLONE_NEWCGROUP),
            &made_later,
        )?;
        let mut rootfs = rootfs;
        let restricted = decision.policy == crate::policy::Mode::Restricted;
        rootfs.strict_missing = restricted;
        rootfs.bind_flags_exact = !restricted;
        rootfs.refuse_kernel_binds = restricted && decision.enforced;
        rootfs.allowed_bind_devices = cfg
            .allowed_devices
            .iter()
            .filter_map(|d| Some((d.major?, d.minor)))
            .collect();
        // In a user namespace the init may not reach a bind source the caller can (a 0700
        // directory of host root's on the way): a privileged parent clones each one on the
        // host and hands it over by fd, as runc opens them before joining the namespace.
        rootfs.binds_from_parent = !opts.rootless
            && sys::geteuid() == 0
            && (ns.has_new(libc::CLONE_NEWUSER) || ns.user_join.is_some());
        rootfs.binds_by_source = !ns.staged && ns.has_new(libc::CLONE_NEWNS);
        rootfs.ephemeral = decision
            .bounded_root
            .map(|b| crate::linux::idmap::Ephemeral {
                size: b.size,
                inodes: b.inodes,
                at: opts.root.join(&opts.id),
            });
        let mut devs = if rootfs.default_devices {
            devices::defaults()
        } else {
            Vec::new()
        };
        devs.extend(linux.devices.iter().cloned());
        // runc ignores a mount label where the host has no SELinux, and so does moat (said
        // in the `--log`); where it has, every filesystem moat mounts gets it (`context=`).
        if let Some(label) = linux.mount_label.as_deref().filter(|l| !l.is_empty()) {
            if host.selinux {
                rootfs.mount_label = Some(label.to_string());
            } else {
                crate::log::warn_log("linux.mountLabel ignored: the host has no SELinux (as runc)");
            }
        }
        let personality = match &linux.personality {
            None => None,
            Some(pers) => Some(crate::linux::attrs::personality(&pers.domain).ok_or_else(
                || Error::Personality {
                    domain: pers.domain.clone(),
                },
            )?),
        };
        let dumpable_until_mapped =
            opts.rootless && sys::geteuid() != 0 && ns.has_new(libc::CLONE_NEWUSER);
        let new_keyring = opts
            .new_keyring
            .then(|| CString::new(opts.id.as_str()).unwrap_or_default());
        // runc brings `lo` up in every network namespace it creates: 127.0.0.1 must
        // answer whatever the policy (a joined namespace is its owner's to set up).
        let loopback_up = ns.has_new(libc::CLONE_NEWNET);
        Ok(Plan {
            decision: decision.clone(),
            egress: decision.egress.clone(),
            dns,
            policy: decision.policy,
            sync_timeout: std::time::Duration::from_secs(cfg.sync_timeout.into()),
            apparmor_profile,
            host,
            notify,
            userns_pool,
            rootfs_budget,
            fleet,
            fleet_slice,
            cgroup,
            ns,
            rootfs,
            devices: devs,
            userns,
            attrs,
            hostname: spec.hostname.clone().filter(|h| !h.is_empty()),
            domainname: spec.domainname.clone(),
            sysctl_joined,
            sysctl,
            personality,
            hooks: spec.hooks.clone(),
            loopback_up,
            cut,
            dumpable_until_mapped,
            new_keyring,
            spec,
            opts,
        })
    }

    /// Row 4's result: container 0.. maps to `range`, and the rootfs is shown to the
    /// container through an idmapped mount of it.
    pub(super) fn set_userns_range(&mut self, range: IdRange) {
        let map = vec![crate::spec::IdMapping {
            container_id: 0,
            host_id: range.start,
            size: range.size,
        }];
        let linux = self.spec.linux.get_or_insert_with(Default::default);
        linux.uid_mappings = map.clone();
        linux.gid_mappings = map;
        self.rootfs.idmap_root = Some(range.start);
    }

    /// Row 5's result: the cgroup as made (the hierarchies that refused moat are not
    /// mounted in the container; no cgroup drops `linux.resources`, said in one line).
    pub(super) fn set_cgroup(&mut self, cgroup: &Cgroup, none: Option<&str>) {
        if let Some(why) = none {
            no_cgroup(&mut self.spec, why);
        }
        self.rootfs.cgroup_mounts = cgroup.mount_sources();
    }

    /// Which optional messages the sync protocol has (`linux/sync.rs`).
    pub(super) fn shape(&self) -> Shape {
        Shape {
            staged: self.ns.staged,
            userns: self.idmapped_late(),
            late_init: self.ns.late_init,
        }
    }

    /// Whether the idmapped mounts go to the child only once it has unshared its user
    /// namespace (staged create), rather than right after `Go`.
    pub(super) fn idmapped_late(&self) -> bool {
        self.ns.staged && self.ns.has_new(libc::CLONE_NEWUSER)
    }
}

/// A rootless container without a cgroup: no `linux.resources`, said in one warning line.
fn no_cgroup(spec: &mut Spec, why: &str) {
    if let Some(res) = spec.linux.as_mut().and_then(|l| l.resources.take()) {
        let asked = rootless::resource_names(&res);
        if !asked.is_empty() {
            crate::log::warn(&format!(
                "rootless: no cgroup: {why}; linux.resources not applied ({asked})"
            ));
        }
    }
}

/// A rootless create fails here, before anything exists, where the kernel or newuidmap
/// would fail later with less to say.
fn rootless_checks(spec: &Spec, ns: &NsPlan) -> Result<(), Error> {
    if sys::geteuid() == 0 {
        // uid 0 inside someone's user namespace (rootless podman): its own maps apply.
        return Ok(());
    }
    let l = spec.linux();
    if !ns.has_new(libc::CLONE_NEWUSER) && ns.user_join.is_none() {
        return Err(Error::RootlessNoUserns);
    }
    if ns.has_new(libc::CLONE_NEWUSER) {
        if l.uid_mappings.is_empty() || l.gid_mappings.is_empty() {
            return Err(Error::RootlessNoMaps);
        }
        rootless::check_spec_maps(&l.uid_mappings, &l.gid_mappings).map_err(Error::RootlessMaps)?;
    }
    Ok(())
}
