//! The policy's host side: [`decide`] reads the host facts the pure `policy::apply` takes
//! and applies it. Create (both backends) and `policy explain` all decide through it.

use crate::linux::hostfacts::HostFacts;
use crate::policy::{self, Config, Decided, PolicyError};
use crate::spec::Spec;

/// Probes the host (its LSMs, the namespaces the RESTRICTED floor compares with) and
/// applies the policy to `spec`. Call it on the host, before anything is forked: the
/// policy and the child decide LSMs and host namespaces from these facts, never from the
/// container's view.
pub fn decide(
    spec: &mut Spec,
    cfg: &Config,
    id: &str,
    systemd_cgroup: bool,
) -> std::result::Result<Decided, PolicyError> {
    let host = HostFacts::probe();
    let mut floor = crate::linux::namespaces::floor_facts(spec);
    floor.systemd_cgroup = systemd_cgroup;
    let decision = if test_bypass() {
        policy::apply_unenforced(spec, cfg, id, &host, &floor)?
    } else {
        policy::apply(spec, cfg, id, &host, &floor)?
    };
    Ok(Decided {
        decision,
        host,
        floor,
    })
}

/// Debug (test) builds only: `MOAT_TEST_SKIP_POLICY=1` records a container as RESTRICTED
/// without applying the policy, so tests can prove that `verify` catches it. Release
/// builds do not contain this switch.
fn test_bypass() -> bool {
    cfg!(debug_assertions) && std::env::var_os("MOAT_TEST_SKIP_POLICY").is_some_and(|v| v == "1")
}
