//! cgroups: create the container's cgroup from `linux.cgroupsPath`, apply
//! `linux.resources`, place processes, freeze, report, remove. Works on cgroup v2
//! (unified), v1 and hybrid hosts (v1 controllers plus a v2 mount at
//! `/sys/fs/cgroup/unified`).
//!
//! The cgroup path is the same in every hierarchy. Hierarchies moat cannot write
//! (rootless) are remembered as skipped: that is only an error once resources for one of
//! their controllers are requested.

mod devices;
mod files;
mod layout;
mod placement;
mod rootless;
pub mod stats;
pub mod systemd;
mod update;
mod v1;
mod v2;

#[cfg(test)]
mod devices_tests;
#[cfg(test)]
mod root_tests;
#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::spec;

use files::{collect_pids, create_in, read_file, remove_tree, write_file};
pub use layout::{nsdelegate, resolve_path, unified_mode, Layout};
pub use placement::Placement;
pub use rootless::NoCgroup;
pub use v2::pids_max;
// For the fuzz targets (src/fuzzing.rs).
#[cfg(any(fuzzing, test))]
pub use {layout::parse_mountinfo, rootless::rootless_path};

pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("{field}: write {value} to {}: {}", path.display(), crate::error_text::strerror(err))]
    Write {
        field: String,
        value: String,
        path: PathBuf,
        err: io::Error,
    },
    #[error("{op} {}: {}", path.display(), crate::error_text::strerror(err))]
    Io {
        op: &'static str,
        path: PathBuf,
        err: io::Error,
    },
    #[error("{field}: {msg}")]
    Invalid { field: String, msg: String },
    #[error("{field}: cannot use the {controller} controller at {}: {reason}", path.display())]
    Unavailable {
        field: String,
        controller: String,
        path: PathBuf,
        reason: String,
    },
    #[error("systemd not running on this host, cannot use systemd cgroups manager")]
    SystemdNotRunning,
    /// A D-Bus call to systemd failed or was not answered (the message names the unit).
    #[error("{msg}")]
    Systemd { msg: String },
    /// runc's words first ("container's cgroup is not empty"), which clients grep.
    #[error("container's cgroup is not empty: {} already holds {count} process(es)", path.display())]
    NotEmpty { path: PathBuf, count: usize },
    /// runc's words: an init placed in a frozen cgroup never runs, and create would wait
    /// for it for ever.
    #[error("container's cgroup unexpectedly frozen: {}", path.display())]
    Frozen { path: PathBuf },
    /// The cgroup path (as recorded) is in no mounted hierarchy.
    #[error("cgroup {path} exists in no hierarchy moat can read")]
    NoHierarchy { path: String },
    /// `state`: what `cgroup.events`/`freezer.state` still said at the deadline.
    #[error("freeze {}: {state} after 5s, thawed again", dir.display())]
    NotFrozen { dir: PathBuf, state: &'static str },
    /// [`Cgroup::kill_all`] ran out of rounds: what the cgroup still held then.
    #[error("cgroup {} still holds {count} process(es) after {rounds} kill rounds in {ms} ms: pids {pids}", path.display())]
    Survivors {
        path: PathBuf,
        count: usize,
        rounds: u32,
        ms: u128,
        pids: String,
    },
}

impl CgroupError {
    fn io(op: &'static str, path: impl Into<PathBuf>, err: io::Error) -> Self {
        CgroupError::Io {
            op,
            path: path.into(),
            err,
        }
    }

    fn invalid(field: impl Into<String>, msg: impl Into<String>) -> Self {
        CgroupError::Invalid {
            field: field.into(),
            msg: msg.into(),
        }
    }

    /// An EACCES/EPERM/EROFS while creating: the hierarchy is not ours to write.
    fn is_permission(&self) -> bool {
        let e = match self {
            CgroupError::Io { err, .. } | CgroupError::Write { err, .. } => err,
            _ => return false,
        };
        matches!(
            e.raw_os_error(),
            Some(libc::EACCES | libc::EPERM | libc::EROFS)
        )
    }
}

/// Why no hierarchy offers `controller`, from `/proc/cgroups` (`name hierarchy
/// num_cgroups enabled` lines).
pub fn missing_controller_reason(proc_cgroups: &str, controller: &str) -> String {
    let line = proc_cgroups
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&controller));
    match line {
        None => format!(
            "this kernel has no {controller} controller (not in /proc/cgroups: built without it)"
        ),
        Some(f) if f.get(3) == Some(&"0") => format!(
            "the {controller} controller is disabled on this host (/proc/cgroups: enabled 0, \
             cgroup_disable= on the kernel command line)"
        ),
        Some(_) => format!(
            "no mounted hierarchy offers the {controller} controller (no cgroup v1 mount of it, \
             and not in the cgroup v2 root's cgroup.controllers)"
        ),
    }
}

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hierarchy {
    pub mount: PathBuf,
    /// v1: the mount's controllers (and `name=…`); v2: the root's `cgroup.controllers`.
    pub controllers: Vec<String>,
    pub v2: bool,
}

impl Hierarchy {
    pub fn dir(&self, path: &str) -> PathBuf {
        self.mount.join(path.trim_start_matches('/'))
    }

    fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }
}

/// The container's cgroup as recorded in its state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cgroup {
    /// The cgroup path relative to each hierarchy's root, e.g. `/moat/<id>`.
    pub path: String,
    /// Pure v2 host (else v1 or hybrid).
    #[serde(default)]
    pub unified: bool,
    /// Hierarchies in which the cgroup exists.
    #[serde(default)]
    pub hierarchies: Vec<Hierarchy>,
    /// Hierarchies moat could not write (rootless).
    #[serde(default)]
    pub skipped: Vec<Hierarchy>,
    /// The systemd driver's scope that owns the cgroup (`--systemd-cgroup` at create).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd: Option<systemd::Scope>,
    /// The cgroup was there before the create (in some hierarchy): the container joined
    /// it rather than made it, so what else is in it may be someone else's and a kill
    /// reaches only the container's own processes. Records written before this field
    /// read false, the kill-everything-in-it they always had.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined: bool,
}

impl Cgroup {
    /// The cgroup a create makes ([`Cgroup::create`]), found without creating anything:
    /// the host's hierarchies and the resolved path below each root.
    pub fn plan(
        cgroups_path: Option<&str>,
        id: &str,
        systemd: bool,
    ) -> Result<(Layout, String), CgroupError> {
        if systemd {
            return Err(CgroupError::SystemdNotRunning);
        }
        let path = resolve_path(cgroups_path, id)?;
        Ok((Layout::detect()?, path))
    }

    /// The systemd driver's counterpart of [`Cgroup::plan`]: the scope `cgroups_path`
    /// names (`user`: the rootless caller's host uid, whose user manager owns it) and the
    /// cgroup it will have, creating nothing.
    pub fn plan_systemd(
        cgroups_path: Option<&str>,
        id: &str,
        user: Option<u32>,
        root: &Path,
    ) -> Result<(Layout, systemd::Scope, String), CgroupError> {
        if !Path::new("/run/systemd/system").exists() {
            return Err(CgroupError::SystemdNotRunning);
        }
        let scope = systemd::Scope::parse(cgroups_path, id, user, root)?;
        let layout = Layout::detect()?;
        let path = scope.path();
        Ok((layout, scope, path))
    }

    /// The cgroup `path` would be in every hierarchy of `layout`, before it exists (what a
    /// plan reads [`Cgroup::mount_sources`] from).
    pub fn planned(layout: &Layout, path: &str) -> Cgroup {
        Cgroup {
            path: path.to_string(),
            unified: layout.unified,
            hierarchies: layout.hierarchies.clone(),
            skipped: Vec::new(),
            systemd: None,
            joined: false,
        }
    }

    /// Creates `path` (already resolved) in every hierarchy of `layout`, and refuses it
    /// if it already holds processes; what this call made for it is removed then.
    pub fn create(layout: Layout, path: String) -> Result<Cgroup, CgroupError> {
        let (mut cg, held, existed) = Self::made_or_joined(layout, path)?;
        if held > 0 {
            cg.remove_made(&existed);
            return Err(CgroupError::NotEmpty {
                path: cg.hierarchies[0].dir(&cg.path),
                count: held,
            });
        }
        cg.joined = !existed.is_empty();
        Ok(cg)
    }

    /// The cgroup made or joined, how many processes it already holds, and the
    /// directories that were there before this call (someone else's: never removed here).
    fn made_or_joined(
        layout: Layout,
        path: String,
    ) -> Result<(Cgroup, usize, Vec<PathBuf>), CgroupError> {
        let (cg, existed) = Self::create_made(layout, path)?;
        // A cgroup that already holds processes belongs to someone else: limits, freeze
        // and kill would hit them too (the caller refuses it, or warns under OPEN). One
        // this call made everywhere holds none.
        let held = match existed.is_empty() {
            true => 0,
            false => match cg.pids() {
                Ok(p) => p.len(),
                Err(e) => {
                    cg.remove_made(&existed);
                    return Err(e);
                }
            },
        };
        // Before anything is placed in it: frozen by itself or by an ancestor.
        if let Some(path) = cg.frozen_dir() {
            cg.remove_made(&existed);
            return Err(CgroupError::Frozen { path });
        }
        Ok((cg, held, existed))
    }

    /// Removes the directories of `self` that this process made, leaving `existed`.
    fn remove_made(&self, existed: &[PathBuf]) {
        let made = Cgroup {
            hierarchies: self
                .hierarchies
                .iter()
                .filter(|h| !existed.contains(&h.dir(&self.path)))
                .cloned()
                .collect(),
            ..self.clone()
        };
        let _ = made.remove();
    }

    /// The fleet budget's cgroup (`path`, resolved) made or joined, with its limits `res`:
    /// it holds the other containers, so it is neither empty nor ours alone, and its
    /// limits are set as `update` sets them, device rules left to each container (v1
    /// refuses a new default rule on a cgroup with children). Both backends' creates
    /// make their container's cgroup below it through this.
    pub fn ensure_fleet(
        layout: Layout,
        path: String,
        res: &crate::spec::Resources,
    ) -> Result<Cgroup, CgroupError> {
        let cg = Self::create_shared(layout, path)?;
        cg.update(res)?;
        Ok(cg)
    }

    /// [`Cgroup::create`] for a parent shared by many containers (the fleet budget),
    /// whose subtree holds their processes by design.
    pub fn create_shared(layout: Layout, path: String) -> Result<Cgroup, CgroupError> {
        Self::create_made(layout, path).map(|(cg, _)| cg)
    }

    /// [`Cgroup::create_shared`], also returning the directories that were there before.
    fn create_made(layout: Layout, path: String) -> Result<(Cgroup, Vec<PathBuf>), CgroupError> {
        let mut existed = Vec::new();
        let mut cg = Cgroup {
            path,
            unified: layout.unified,
            ..Default::default()
        };
        let mut denied = Vec::new();
        for h in layout.hierarchies {
            match create_in(&h, &cg.path) {
                Ok(made) => {
                    if !made {
                        existed.push(h.dir(&cg.path));
                    }
                    cg.hierarchies.push(h)
                }
                Err(e) if e.is_permission() => {
                    denied.push(e.to_string());
                    cg.skipped.push(h);
                }
                Err(e) => {
                    let _ = cg.remove();
                    return Err(e);
                }
            }
        }
        if !denied.is_empty() {
            crate::log::warn(&format!(
                "cgroups: cannot write {} hierarchy(ies), so no limits can be set there: {}",
                denied.len(),
                denied.join("; ")
            ));
        }
        Ok((cg, existed))
    }

    /// Row 8 under the systemd driver: the scope started with `pid` (the child, waiting)
    /// and the properties of `res`, the fleet slice's limits first; then `res` written to
    /// the scope's files as [`Cgroup::apply`] does. systemd's cgroup for the scope must be
    /// the one planned: the child mounts that path as its `/sys/fs/cgroup`.
    pub fn start_systemd(
        &mut self,
        id: &str,
        pid: i32,
        res: Option<&spec::Resources>,
        fleet: Option<(&str, &spec::Resources)>,
    ) -> Result<(), CgroupError> {
        let Some(scope) = &mut self.systemd else {
            return Ok(());
        };
        let devices = std::fs::read_to_string("/proc/devices").unwrap_or_default();
        let props = match res {
            Some(r) => systemd::props::from_resources(r, &devices, !self.unified)?,
            None => Vec::new(),
        };
        let fleet_props = match fleet {
            Some((slice, r)) => {
                Some((slice, systemd::props::from_resources(r, "", !self.unified)?))
            }
            None => None,
        };
        let (cgroup, invocation) = systemd::start(
            scope,
            id,
            pid,
            &props,
            fleet_props.as_ref().map(|(s, p)| (*s, p.as_slice())),
        )?;
        // From here on the unit is this create's: what proves it to a rollback or delete.
        scope.invocation = Some(invocation);
        let scope = &*scope;
        if cgroup != self.path {
            return Err(CgroupError::Systemd {
                msg: format!(
                    "systemd: {} has cgroup {cgroup:?}, not the {:?} moat planned",
                    scope.unit, self.path
                ),
            });
        }
        // v1 and hybrid: systemd made the scope only in the hierarchies it manages; the
        // others (freezer, perf_event, net_cls, …) get it from moat, with the child moved in.
        if !self.unified {
            let child = pid.to_string();
            for h in &self.hierarchies {
                let dir = h.dir(&self.path);
                if !dir.is_dir() {
                    create_in(h, &self.path)?;
                    write_file(&dir, "cgroup.procs", &child, "pid")?;
                }
            }
        }
        match res {
            Some(r) => self.apply(r),
            None => Ok(()),
        }
    }

    pub fn apply(&self, res: &spec::Resources) -> Result<(), CgroupError> {
        if self.unified {
            v2::apply(self, res)
        } else {
            v1::apply(self, res)
        }
    }

    /// The directory that holds `controller`'s files, or why there is none. Only asked
    /// when the spec requests something from that controller.
    fn dir_for(&self, controller: &str, field: &str) -> Result<(PathBuf, bool), CgroupError> {
        let unavailable = |path: PathBuf, reason: &str| CgroupError::Unavailable {
            field: field.into(),
            controller: controller.into(),
            path,
            reason: reason.into(),
        };
        if self.path.is_empty() {
            return Err(unavailable(
                PathBuf::from(CGROUP_ROOT),
                "the container has no cgroup (rootless, and no cgroup v2 subtree was delegated to the user)",
            ));
        }
        // v1 first: on hybrid hosts the unified mount only holds what v1 left over.
        for want_v2 in [false, true] {
            let pick = |h: &&Hierarchy| {
                h.v2 == want_v2 && ((want_v2 && self.unified) || h.has(controller))
            };
            if let Some(h) = self.hierarchies.iter().find(pick) {
                return Ok((h.dir(&self.path), h.v2));
            }
            if let Some(h) = self.skipped.iter().find(pick) {
                let why = "the hierarchy is not writable by this user (rootless?)";
                return Err(unavailable(h.dir(&self.path), why));
            }
        }
        Err(unavailable(
            PathBuf::from(CGROUP_ROOT),
            "no hierarchy on this host provides it",
        ))
    }

    /// Refuses, before anything is made, a controller that no hierarchy of the cgroup
    /// offers (a v1 mount bound to it, or the v2 root's `cgroup.controllers`), with the
    /// reason the host gives: for a controller only some kernels have (`rdma`), which a
    /// limit write in a made cgroup would find missing too late.
    pub fn require_controller(&self, controller: &str, field: &str) -> Result<(), CgroupError> {
        if self.path.is_empty() || self.hierarchies.iter().any(|h| h.has(controller)) {
            return Ok(());
        }
        let proc_cgroups = crate::linux::read_kernel_file("/proc/cgroups").unwrap_or_default();
        Err(CgroupError::Unavailable {
            field: field.into(),
            controller: controller.into(),
            path: PathBuf::from(CGROUP_ROOT),
            reason: missing_controller_reason(&proc_cgroups, controller),
        })
    }

    /// The v2 directory on a hybrid or pure v2 host, if moat could create it.
    pub fn v2_dir(&self) -> Option<PathBuf> {
        self.hierarchies
            .iter()
            .find(|h| h.v2)
            .map(|h| h.dir(&self.path))
    }

    /// Moves an existing process in: `restore`'s CRIU helper, before CRIU forks the
    /// restored tree (moat's own children place themselves, see [`Placement`]).
    pub fn add_pid(&self, pid: libc::pid_t) -> Result<(), CgroupError> {
        for h in &self.hierarchies {
            write_file(&h.dir(&self.path), "cgroup.procs", &pid.to_string(), "pid")?;
        }
        Ok(())
    }

    /// Removes the cgroup (and any sub-cgroups the container made) in every hierarchy.
    /// Shared parents such as `/moat` stay. EBUSY is retried for up to half a second, the
    /// time exiting processes take to leave on a loaded host (a killed init's last
    /// children, an exec's joiner failing to join a dead pid namespace).
    pub fn remove(&self) -> Result<(), CgroupError> {
        let deadline = Instant::now() + Duration::from_millis(500);
        let mut first = None;
        // The scope goes first (systemd removes its cgroup); what is left (sub-cgroups
        // the container made) is removed below. Only the unit this container's create
        // started: one it never started (a create refused because the unit was there)
        // and one started since under the same name are someone else's, cgroup and all.
        if let Some(scope) = &self.systemd {
            let mine = match scope.invocation.as_deref() {
                Some(mine) => mine.to_string(),
                // Not proven this container's: a create refused because the unit was
                // there, or killed between the unit's start and its record. Stopped only
                // while it holds no process, which ends nothing of anyone's (a scope whose
                // process died before systemd watched it stays active, empty, forever),
                // and only as the unit found now (its InvocationID compared at the stop).
                None => {
                    if self.pids().map_or(true, |p| !p.is_empty()) {
                        return Ok(());
                    }
                    match systemd::invocation(scope)? {
                        found if found.is_empty() => return Ok(()),
                        found => found,
                    }
                }
            };
            let mine = mine.as_str();
            match systemd::delete(scope, mine) {
                Ok(None) => {}
                // Gone: what moat made in the hierarchies systemd does not manage (v1)
                // is still to be removed.
                Ok(Some(found)) if found.is_empty() => {}
                Ok(Some(found)) => {
                    crate::log::warn(&format!(
                        "systemd: {} is not the unit this container started (InvocationID {found}, recorded {mine}): left as it is",
                        scope.unit
                    ));
                    return Ok(());
                }
                Err(e) => first = Some(e),
            }
        }
        for h in &self.hierarchies {
            if let Err(e) = remove_tree(&h.dir(&self.path), deadline) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether the container may act on everything in this cgroup as its own: always
    /// under cgroupfs; under the systemd driver only while the scope is the unit this
    /// container's create started (its `InvocationID` the recorded one). A unit replaced
    /// under the same name has the same cgroup path and someone else's processes.
    pub fn unit_proven(&self) -> Result<bool, CgroupError> {
        let Some(scope) = &self.systemd else {
            return Ok(true);
        };
        if scope.invocation.is_none() {
            return Ok(false);
        }
        Ok(scope.proven(&systemd::invocation(scope)?))
    }

    /// Removes the cgroup's own directory in every hierarchy where it is empty (no
    /// process, no child), and nothing else: for a cgroup that may not be the caller's
    /// to take apart (a create killed before it recorded it).
    pub fn remove_empty(&self) {
        for h in &self.hierarchies {
            let _ = std::fs::remove_dir(h.dir(&self.path));
        }
    }

    /// Every process in the cgroup and its descendants.
    pub fn pids(&self) -> Result<Vec<i32>, CgroupError> {
        let pref = ["pids", "freezer", "memory", "cpu"];
        let h = pref
            .iter()
            .find_map(|c| self.hierarchies.iter().find(|h| !h.v2 && h.has(c)))
            .or_else(|| self.hierarchies.iter().find(|h| self.unified || !h.v2))
            .or(self.hierarchies.first());
        let mut out = Vec::new();
        if let Some(h) = h {
            collect_pids(&h.dir(&self.path), &mut out)?;
        }
        Ok(out)
    }

    pub fn freeze(&self) -> Result<(), CgroupError> {
        match self.freezer()? {
            (dir, false) => v1::freeze(&dir),
            (dir, true) => v2::freeze(&dir),
        }
    }

    pub fn thaw(&self) -> Result<(), CgroupError> {
        match self.freezer()? {
            (dir, false) => write_file(&dir, "freezer.state", "THAWED", "thaw"),
            (dir, true) => write_file(&dir, "cgroup.freeze", "0", "thaw"),
        }
    }

    /// Sends `sig` to every process in the cgroup (and its sub-cgroups) so that none is
    /// missed by a fork racing the listing: on v2 (the unified hierarchy of a hybrid host
    /// too) SIGKILL goes through `cgroup.kill`, which the kernel applies atomically to
    /// the whole subtree; otherwise, and for what that left, the cgroup is frozen, its
    /// processes listed and signalled while none can fork, then thawed (a cgroup frozen
    /// before stays frozen for any signal but SIGKILL, which needs the thaw to act).
    /// SIGKILL is repeated until the cgroup is empty, for at most `bound`; any other
    /// signal goes out once. Only for a cgroup the container made: in a joined one the
    /// other processes are someone else's.
    pub fn kill_all(&self, sig: i32, bound: Duration) -> Result<(), CgroupError> {
        let start = Instant::now();
        let mut rounds = 0u32;
        loop {
            rounds += 1;
            if sig == libc::SIGKILL {
                if let Some(dir) = self.v2_dir().filter(|d| d.join("cgroup.kill").exists()) {
                    let _ = write_file(&dir, "cgroup.kill", "1", "kill");
                }
            }
            let left = self.pids()?;
            if !left.is_empty() {
                self.signal_frozen(sig);
            }
            if sig != libc::SIGKILL {
                return Ok(());
            }
            // Killed processes leave the cgroup as they exit: give them a moment.
            let settle = Instant::now() + Duration::from_millis(100);
            let left = loop {
                let left = self.pids()?;
                if left.is_empty() {
                    return Ok(());
                }
                if Instant::now() >= settle {
                    break left;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            if start.elapsed() >= bound {
                let shown: Vec<String> = left.iter().take(8).map(|p| p.to_string()).collect();
                let more = if left.len() > 8 { ", …" } else { "" };
                return Err(CgroupError::Survivors {
                    path: self
                        .hierarchies
                        .first()
                        .map(|h| h.dir(&self.path))
                        .unwrap_or_else(|| PathBuf::from(&self.path)),
                    count: left.len(),
                    rounds,
                    ms: start.elapsed().as_millis(),
                    pids: format!("{}{more}", shown.join(",")),
                });
            }
        }
    }

    /// One round of [`Cgroup::kill_all`] by the freezer: freeze, signal what is listed,
    /// thaw. Without a freezer (or one that would not freeze) it signals unfrozen, and
    /// the caller's next round catches what forked meanwhile.
    fn signal_frozen(&self, sig: i32) {
        let was_frozen = self.is_frozen();
        let froze = was_frozen || self.freeze().is_ok();
        // Killed here, moat leaves the cgroup frozen: the next delete must still end it.
        crate::linux::killpoint::at("cgroup", "parent", "frozen");
        for pid in self.pids().unwrap_or_default() {
            let _ = crate::linux::sys::kill(pid, sig);
        }
        if froze && (!was_frozen || sig == libc::SIGKILL) {
            let _ = self.thaw();
        }
    }

    /// v1 freezer if mounted, else the v2 core freezer (also present on hybrid hosts).
    fn freezer(&self) -> Result<(PathBuf, bool), CgroupError> {
        self.dir_for("freezer", "freezer").or_else(|e| {
            self.v2_dir()
                .filter(|d| d.join("cgroup.freeze").exists())
                .map(|d| (d, true))
                .ok_or(e)
        })
    }
}

impl Cgroup {
    /// The freezer directory when the cgroup is frozen or freezing, its own setting or an
    /// ancestor's (v1 `freezer.state` not THAWED; v2 `cgroup.events` `frozen 1`, or
    /// `cgroup.freeze` 1 while the freeze is still under way).
    pub fn frozen_dir(&self) -> Option<PathBuf> {
        match self.freezer().ok()? {
            (dir, false) => read_file(&dir, "freezer.state")
                .is_ok_and(|s| s.trim() != "THAWED")
                .then_some(dir),
            (dir, true) => {
                let events = read_file(&dir, "cgroup.events").unwrap_or_default();
                let own = read_file(&dir, "cgroup.freeze").is_ok_and(|s| s.trim() == "1");
                (own || events.lines().any(|l| l.trim() == "frozen 1")).then_some(dir)
            }
        }
    }

    /// True when the cgroup's freezer reports it frozen (v1 `freezer.state` FROZEN,
    /// v2 `cgroup.freeze` 1).
    pub fn is_frozen(&self) -> bool {
        match self.freezer() {
            Ok((dir, false)) => {
                read_file(&dir, "freezer.state").is_ok_and(|s| s.trim() == "FROZEN")
            }
            Ok((dir, true)) => read_file(&dir, "cgroup.freeze").is_ok_and(|s| s.trim() == "1"),
            Err(_) => false,
        }
    }
}

impl Cgroup {
    /// What the container's `/sys/fs/cgroup` shows: its own directory of each hierarchy,
    /// named as on the host (`cpu,cpuacct`, `unified`, …); one unnamed entry on pure v2.
    pub fn mount_sources(&self) -> Vec<crate::linux::rootfs::CgroupMount> {
        self.hierarchies
            .iter()
            .map(|h| crate::linux::rootfs::CgroupMount {
                name: if self.unified {
                    String::new()
                } else {
                    h.mount
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                },
                host_dir: h.dir(&self.path),
            })
            .collect()
    }
}

impl Cgroup {
    /// `pids.max` as the kernel reports it (for `verify`).
    /// `memory.high` of the container's cgroup v2 directory (`None` without one: cgroup v1
    /// memory has no such file).
    pub fn read_memory_high(&self) -> Option<String> {
        self.hierarchies
            .iter()
            .filter(|h| h.v2 && (h.has("memory") || self.unified))
            .find_map(|h| std::fs::read_to_string(h.dir(&self.path).join("memory.high")).ok())
            .map(|s| s.trim().to_string())
    }

    pub fn read_pids_max(&self) -> Option<String> {
        self.hierarchies
            .iter()
            .filter(|h| h.has("pids") || (h.v2 && self.unified))
            .find_map(|h| std::fs::read_to_string(h.dir(&self.path).join("pids.max")).ok())
            .map(|s| s.trim().to_string())
    }
}
