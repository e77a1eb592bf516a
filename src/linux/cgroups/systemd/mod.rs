//! The systemd cgroup driver (`--systemd-cgroup`): the container's cgroup is a transient
//! scope unit that systemd makes and owns, asked for over D-Bus, as runc and crun do it.
//!
//! - cgroup v2, v1 and hybrid hosts (on v1, systemd makes the scope in the hierarchies it
//!   manages and moat in the others).
//! - `linux.cgroupsPath` is `slice:prefix:name` ([`Scope::parse`]): the scope
//!   `<prefix>-<name>.scope` in `slice` (empty: `system.slice`, or `user.slice` of the
//!   caller's user manager when rootless). Without one, moat names the scope itself,
//!   `moat-<root tag>-<id>.scope`: the tag ([`root_tag`]) keeps two state roots (two
//!   tenants, each with its own `--root`) from asking for one unit for the same id. Its cgroup is the slice's expanded path plus
//!   the unit, below the manager's own cgroup; it is known before the unit exists, so the
//!   plan (and the child's `/sys/fs/cgroup`) can use it, and it is checked against what
//!   systemd reports once the unit is up.
//! - A scope needs a process when it starts, so the driver runs after the fork (row 8):
//!   `StartTransientUnit` with the child's pid, `Delegate=yes` and every resource systemd
//!   has a property for ([`props`]); then everything is written to the scope's cgroup
//!   files as under the cgroupfs driver (moat's device filter included), because systemd
//!   knows only part of `linux.resources`.
//! - The D-Bus client is a program of its own, `moat-dbus` (src/bin/moat-dbus.rs, with
//!   zbus), run next to moat's binary for each conversation (`bus.rs`, `wire.rs`): zbus
//!   stays off every start of moat and out of the process that forks the container.
//! - The scope is recorded in the state (`Cgroup::systemd`), so `update` and `delete`,
//!   which engines call without the flag, use the driver; with the `InvocationID` systemd
//!   gave it at start. A name says nothing about who started the unit (an engine names
//!   it, any root caller can start one of that name), so moat acts on the unit, and on
//!   its cgroup, only while its `InvocationID` is the recorded one ([`Scope::proven`]):
//!   a create that finds the unit already there refuses and touches nothing, and a
//!   delete or rollback leaves a unit that is gone or was replaced.

mod bus;
pub mod props;
pub mod wire;

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CgroupError;

/// The unit a container's cgroup is, as recorded in its state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scope {
    /// `<prefix>-<name>.scope`.
    pub unit: String,
    /// The slice the scope is in (`system.slice`, `machine.slice`, …).
    pub slice: String,
    /// The host uid whose user manager owns the scope (rootless); the system manager
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<u32>,
    /// The unit's `InvocationID` (32 hex digits) from the start this create made; absent
    /// until then (and in records from before moat recorded it): no proof the unit is
    /// this container's, so nothing is done to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation: Option<String>,
}

fn bad(msg: impl Into<String>) -> CgroupError {
    CgroupError::invalid("linux.cgroupsPath", msg)
}

impl Scope {
    /// `linux.cgroupsPath` for the systemd driver: empty →
    /// `<default slice>:moat-<root tag>:<id>` (`root`: the state root); otherwise exactly
    /// `slice:prefix:name`, the engine's name kept (kubelets and engines find their units
    /// by it). `user`: the rootless caller's host uid.
    pub fn parse(
        cgroups_path: Option<&str>,
        id: &str,
        user: Option<u32>,
        root: &Path,
    ) -> Result<Scope, CgroupError> {
        let default_slice = if user.is_some() {
            "user.slice"
        } else {
            "system.slice"
        };
        let raw = cgroups_path.filter(|p| !p.is_empty());
        let own = format!("moat-{}", root_tag(root));
        let (slice, prefix, name) = match raw {
            None => (default_slice, own.as_str(), id),
            Some(p) => {
                let parts: Vec<&str> = p.split(':').collect();
                let [slice, prefix, name] = parts[..] else {
                    return Err(bad(format!(
                        "expected \"slice:prefix:name\" for the systemd cgroup driver, got {p:?}"
                    )));
                };
                (
                    if slice.is_empty() {
                        default_slice
                    } else {
                        slice
                    },
                    prefix,
                    name,
                )
            }
        };
        if name.is_empty() {
            return Err(bad(format!(
                "{:?}: the name of \"slice:prefix:name\" is empty (two containers would share one unit)",
                raw.unwrap_or_default()
            )));
        }
        if name.ends_with(".slice") {
            return Err(bad(format!(
                "{name:?}: a slice cannot hold a container's processes; name a scope"
            )));
        }
        let unit = if prefix.is_empty() {
            format!("{name}.scope")
        } else {
            format!("{prefix}-{name}.scope")
        };
        check_unit_name(&unit)?;
        expand_slice(slice)?;
        Ok(Scope {
            unit,
            slice: slice.to_string(),
            user,
            invocation: None,
        })
    }

    /// The unit, whose `InvocationID` is now `found`, is the one this container's create
    /// started: the recorded `InvocationID` is that one. Nothing recorded proves nothing.
    pub fn proven(&self, found: &str) -> bool {
        self.invocation
            .as_deref()
            .is_some_and(|mine| !mine.is_empty() && mine == found)
    }

    /// The scope's cgroup below the hierarchy root: the manager's cgroup, the slice's
    /// expanded path, the unit.
    pub fn path(&self) -> String {
        let manager = match self.user {
            Some(uid) => format!("/user.slice/user-{uid}.slice/user@{uid}.service"),
            None => String::new(),
        };
        let slice = expand_slice(&self.slice).unwrap_or_default();
        format!("{manager}{}/{}", slice.trim_end_matches('/'), self.unit)
    }
}

/// Eight hex digits naming the state root `root` (its absolute path, FNV-1a): what keeps
/// the default units of two roots apart. Not a secret and not a proof (the
/// `InvocationID` is that): two roots that hash alike only refuse each other's create.
pub fn root_tag(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let abs = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in abs.as_os_str().as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{:08x}", (h >> 32) ^ (h & 0xffff_ffff))
}

/// The characters systemd takes in a unit name (`unit_name_is_valid`), at most 255.
fn check_unit_name(unit: &str) -> Result<(), CgroupError> {
    let ok = unit.len() <= 255
        && unit
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b":-_.\\@".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "{unit:?} is not a valid systemd unit name (letters, digits and \":-_.\\@\" only, at most 255)"
        )))
    }
}

/// `a-b.slice` → `/a.slice/a-b.slice`; `-.slice` (the root slice) → `/`.
pub fn expand_slice(slice: &str) -> Result<String, CgroupError> {
    let Some(stem) = slice.strip_suffix(".slice") else {
        return Err(bad(format!("{slice:?}: a slice name ends in \".slice\"")));
    };
    if stem == "-" {
        return Ok("/".into());
    }
    if stem.is_empty() || slice.contains('/') || stem.split('-').any(str::is_empty) {
        return Err(bad(format!("{slice:?} is not a valid slice name")));
    }
    check_unit_name(slice)?;
    let mut out = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        out.push('/');
        out.push_str(&prefix);
        out.push_str(".slice");
    }
    Ok(out)
}

/// The fleet budget's slice under this driver: the `[fleet] cgroup` path's components
/// joined by `-` (`/moat` → `moat.slice`, whose cgroup is `/moat.slice`).
pub fn fleet_slice(fleet_cgroup: &str) -> Result<String, CgroupError> {
    let stem: Vec<&str> = fleet_cgroup.split('/').filter(|c| !c.is_empty()).collect();
    let slice = format!("{}.slice", stem.join("-"));
    expand_slice(&slice)?;
    Ok(slice)
}

pub use bus::{delete, invocation, set_properties, start};

#[cfg(test)]
mod tests;
