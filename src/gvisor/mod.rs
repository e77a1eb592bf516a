//! gVisor on request: a container handed to runsc, invisibly to the engine.
//!
//! The backend is chosen once, at create/run ([`select`]), and recorded in the
//! container's [`Record`](crate::state::Record); every later command for that id is
//! routed by the record alone (clients' global flags and environment are not stable
//! across a container's life): `container::engine` picks [`Gvisor`]'s implementation of
//! `container::Engine` for a gVisor record, and each operation lands here. Operations
//! whose gVisor form refuses or differs (exec's process file, update's runsc call,
//! verify from the host) are written here, not in `src/container/`.
//!
//! runsc's `--root` is `<root>/@runsc`, shared by the gVisor containers under one moat
//! root (runsc keeps `<id>_sandbox:<id>.{state,lock}` there; `<id>_sandbox:<pod sandbox>`
//! for an app container of a gVisor pod, [`pod`]). Under `<root>/<id>/`, next
//! to `state.json`:
//!
//! | path | what |
//! |---|---|
//! | `config.json` | the effective spec; `<root>/<id>` is the shadow bundle runsc reads: moat's typed spec after the policy, serialised by [`spec`] (never the engine's bytes), with `root.path` absolute; the rootfs stays where it is |
//! | `policy.json` | the policy decision: what was changed, and what gVisor does not apply |
//! | `exec-<pid>.json` | the process file runsc reads for `exec --process` (the caller's, parsed and serialised again) and for `exec -t` in argv form |
//! | `start` | an app container of a pod: the FIFO `start` writes to release its waiter ([`pod`]) |
//! | `control-netns` | the network namespace every runsc call for the container runs in, bind-mounted ([`control`]) |
//!
//! What runsc is given and how it is run: [`runsc`]. How runsc 20221219 differs from runc
//! and what moat emulates: `docs/gvisor.md`.

mod cmds;
pub mod config;
mod control;
mod egress;
mod exec;
mod extra;
mod pod;
pub mod policy;
mod probe;
mod rollback;
mod runsc;
pub mod seccomp_exec;
mod seccomp_runsc;
pub mod select;
pub mod snapshot;
pub mod spec;
pub mod verify;

use anyhow::Result;

use crate::container::{self, Container, Context, Engine};
use crate::spec::Resources;
use crate::state::{ContainerDir, Record, Status};

pub use cmds::{create, run};
pub use extra::{features_json, wants_gvisor_features};
pub use select::{select, Selection};

pub use crate::state::{Backend, Gvisor, PodRole};

/// Every operation after create, for a container runsc runs: the lifecycle layer
/// (`container::engine`) routes here by the record.
impl Engine for Gvisor {
    fn start(&self, ctx: &Context, c: &Container) -> Result<i32> {
        cmds::start(ctx, &c.record, self)
    }
    fn state(&self, ctx: &Context, c: &Container) -> Result<i32> {
        cmds::state(ctx, &c.record, self)
    }
    fn status(&self, ctx: &Context, c: &Container) -> Result<(Status, i32)> {
        cmds::status(ctx, &c.record, self)
    }
    fn kill(&self, ctx: &Context, c: &Container, all: bool, sig: i32) -> Result<i32> {
        cmds::kill(ctx, &c.record, self, all, sig)
    }
    fn pause(&self, ctx: &Context, c: &Container) -> Result<i32> {
        cmds::pause(ctx, &c.record, self)
    }
    fn resume(&self, ctx: &Context, c: &Container) -> Result<i32> {
        cmds::resume(ctx, &c.record, self)
    }
    fn ps(&self, ctx: &Context, c: &Container, req: &container::ps::Request) -> Result<i32> {
        cmds::ps(ctx, &c.record, self, &req.format, &req.ps_args)
    }
    fn events(
        &self,
        ctx: &Context,
        c: &Container,
        req: &container::events::Request,
    ) -> Result<i32> {
        extra::events(ctx, &c.record, self, req.stats, req.interval)
    }
    fn update(&self, ctx: &Context, c: &Container, res: Resources) -> Result<i32> {
        extra::update(ctx, &c.record, self, res)
    }
    fn update_egress(&self, ctx: &Context, c: &Container, list: &str) -> Result<()> {
        if pod::app_sandbox(self).is_some() {
            anyhow::bail!(
                "--egress: container {} is in a gVisor pod, whose containers share the pod \
                 sandbox's sentry and its policy: update the pod sandbox",
                c.record.id
            );
        }
        if c.record.cgroup.is_none() {
            anyhow::bail!(
                "--egress: gVisor container {} was created without egress programs (no \
                 policy, --network=none, or a sandbox cgroup moat does not own): nothing to \
                 replace",
                c.record.id
            );
        }
        if cmds::status(ctx, &c.record, self)?.0 == Status::Stopped {
            return Err(container::Error::NotRunning.into());
        }
        container::update::replace_egress(c, list)
    }
    fn delete(&self, ctx: &Context, dir: ContainerDir, rec: &Record, force: bool) -> Result<i32> {
        cmds::delete(ctx, dir, rec, self, force)
    }
    fn verify(&self, ctx: &Context, c: &Container) -> Result<container::verify::Verdict> {
        verify::verdict(ctx, c, self)
    }
    fn exec(
        &self,
        ctx: &Context,
        dir: ContainerDir,
        rec: &Record,
        req: &container::exec::Request,
    ) -> Result<i32> {
        exec::exec(ctx, &dir, rec, self, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn record_field_defaults_to_native_and_roundtrips() {
        #[derive(Deserialize)]
        struct R {
            #[serde(default)]
            backend: Backend,
        }
        let old: R = serde_json::from_str("{}").unwrap();
        assert_eq!(old.backend, Backend::Native);
        let gv = Backend::Gvisor(Gvisor {
            runsc: "/usr/bin/runsc".into(),
            root: "/run/moat/x/runsc".into(),
            platform: "ptrace".into(),
            network: "none".into(),
            oci_seccomp: false,
            systemd_cgroup: false,
            pod: None,
            control_netns: None,
        });
        let json = serde_json::to_string(&gv).unwrap();
        assert!(
            json.starts_with(r#"{"kind":"gvisor","runsc":"/usr/bin/runsc""#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Backend>(&json).unwrap(), gv);
        assert_eq!(
            serde_json::to_string(&Backend::Native).unwrap(),
            r#"{"kind":"native"}"#
        );
    }
}
