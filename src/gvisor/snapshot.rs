//! `checkpoint` / `restore` of a gVisor container: runsc's own (the sentry saves its whole
//! kernel state to `<image-path>/checkpoint.img`, and a new sandbox loads it), no CRIU.
//!
//! The image holds the sentry's state, the container's seccomp filters and credentials
//! among it: an image changed after the checkpoint could restore the container without
//! them. So a restore takes only an image directory moat's own checkpoint wrote on this
//! host, its files as they were then: each file's device, inode, size and change time
//! are recorded under moat's root (never in the image directory) and compared before
//! runsc reads them. A file's change time moves with every write and cannot be set back
//! without root. The restored sandbox is otherwise made as create makes one (the policy,
//! the control namespace, the cgroup, the egress programs: `super::select::prepare`),
//! never from the image. The sentry's state in the image keeps the process's own
//! credentials and filters, whatever the new spec says: so the spec runsc is given must
//! ask of the process what the checkpointed one asked (its process, mounts, seccomp
//! profile, namespaces, masked and read-only paths: recorded with the files), or the
//! restore is refused: a container checkpointed under OPEN is not restored under a
//! RESTRICTED bundle as if RESTRICTED applied.
//!
//! Not for a container of a pod: runsc saves the whole sandbox, every container of it.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde::{Deserialize, Serialize};

use super::runsc::Runsc;
use super::select::{self, Selection};
use super::{cmds, pod, Gvisor};
use crate::container::Context;

/// One file of an image directory as the checkpoint left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageFile {
    pub name: String,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub ctime: i64,
    pub ctime_nsec: i64,
}

/// What a checkpoint records: the image's files, and what the container's spec asked of
/// its process ([`asked`]).
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    files: Vec<ImageFile>,
    spec: serde_json::Value,
}

/// The parts of runsc's spec (the state directory's `config.json`) that a restored
/// sentry does not apply again, because its saved state already holds them: the process
/// (user, capabilities, no_new_privs, rlimits, args, env), the mounts, the seccomp
/// profile, the namespaces' types, the masked and read-only paths, the sysctls. Not the
/// cgroup path, the annotations or a namespace's path (per container, or per call).
fn asked(config: &Path) -> Result<serde_json::Value> {
    let raw = std::fs::read(config).with_context(|| format!("read {}", config.display()))?;
    let spec: serde_json::Value =
        serde_json::from_slice(&raw).with_context(|| format!("parse {}", config.display()))?;
    let linux = &spec["linux"];
    let types: Vec<&serde_json::Value> = linux["namespaces"]
        .as_array()
        .map(|v| v.iter().map(|n| &n["type"]).collect())
        .unwrap_or_default();
    Ok(serde_json::json!({
        "process": spec["process"],
        "mounts": spec["mounts"],
        "linux.seccomp": linux["seccomp"],
        "linux.namespaces": types,
        "linux.maskedPaths": linux["maskedPaths"],
        "linux.readonlyPaths": linux["readonlyPaths"],
        "linux.sysctl": linux["sysctl"],
    }))
}

/// The first of [`asked`]'s parts in which `now` differs from `then`.
fn differs(then: &serde_json::Value, now: &serde_json::Value) -> Option<String> {
    let (a, b) = (then.as_object()?, now.as_object()?);
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .find(|k| a.get(*k) != b.get(*k))
        .map(|k| k.to_string())
}

/// Every entry of the image directory, sorted by name; anything but a regular file is
/// refused (runsc writes only files).
fn image_files(images: &Path) -> Result<Vec<ImageFile>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(images).with_context(|| format!("read {}", images.display()))? {
        let e = e.with_context(|| format!("read {}", images.display()))?;
        let m = e
            .metadata()
            .with_context(|| format!("stat {}", e.path().display()))?;
        if !m.file_type().is_file() {
            bail!(
                "--image-path {}: {} is not a regular file (runsc's images are files only)",
                images.display(),
                e.file_name().to_string_lossy()
            );
        }
        files.push(ImageFile {
            name: e.file_name().to_string_lossy().into_owned(),
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            ctime: m.ctime(),
            ctime_nsec: m.ctime_nsec(),
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// Where the record of a checkpoint into `images` is kept: beside the native ones.
fn record_path(root: &Path, images: &Path) -> Result<PathBuf> {
    crate::container::checkpoint::record_path(root, images, "gvisor.json")
        .with_context(|| format!("stat {}", images.display()))
}

/// Refused for a container of a pod, naming why.
fn no_pod(gv: &Gvisor, what: &str) -> Result<()> {
    if gv.pod.is_some() || pod::app_sandbox(gv).is_some() {
        bail!(
            "{what} of a container of a gVisor pod is not supported: runsc saves and restores \
             the whole sandbox, every container of the pod"
        );
    }
    Ok(())
}

/// `runsc checkpoint` of a running container into `images` (made and checked by the
/// caller), then the record of what it wrote. Without `leave_running` the container has
/// ended; the caller deletes it, as runc does.
#[allow(clippy::too_many_arguments)]
pub fn checkpoint(
    g: &Context,
    id: &str,
    gv: &Gvisor,
    config: &Path,
    images: &Path,
    work: Option<&Path>,
    leave_running: bool,
) -> Result<()> {
    no_pod(gv, "checkpoint")?;
    let spec = asked(config)?;
    // An earlier record of this directory says nothing of what runsc writes now.
    let record = record_path(&g.root, images)?;
    let _ = std::fs::remove_file(&record);
    crate::linux::killpoint::at("checkpoint", "parent", "gvisor.Runsc");
    let code = Runsc::new(gv, g, "checkpoint")
        .opt("image-path", images)
        .opt_some("work-path", work)
        .flag("leave-running", leave_running)
        .id(id)
        .wait()?;
    if code != 0 {
        bail!("runsc checkpoint of {id} failed (its error is above)");
    }
    crate::linux::killpoint::at("checkpoint", "parent", "gvisor.Record");
    let files = image_files(images)?;
    if files.is_empty() {
        bail!(
            "runsc checkpoint of {id} wrote nothing into {}",
            images.display()
        );
    }
    let json = serde_json::to_vec(&Recorded { files, spec }).expect("a record serialises");
    let (dir, name) = (
        record.parent().expect("a directory"),
        record.file_name().expect("a name"),
    );
    crate::state::write_cache_file(dir, &name.to_string_lossy(), &json)
        .with_context(|| format!("record the checkpoint in {}", record.display()))
}

/// The restore's flags that reach runsc.
pub struct Restore<'a> {
    pub id: &'a str,
    /// The bundle's, as the caller read them (a pod's are refused).
    pub annotations: &'a std::collections::BTreeMap<String, String>,
    pub bundle: &'a Path,
    pub images: &'a Path,
    pub work: Option<&'a Path>,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
}

/// Compares the image directory with the record of the checkpoint that wrote it.
fn check_image(root: &Path, images: &Path) -> Result<serde_json::Value> {
    let no = |why: String| {
        anyhow::anyhow!(
            "--image-path {}: no record of a gVisor checkpoint into this directory on this \
             host ({why}): moat restores only images its own checkpoint wrote here",
            images.display()
        )
    };
    let record = record_path(root, images).map_err(|e| no(format!("{e:#}")))?;
    let bytes = std::fs::read(&record).map_err(|e| no(format!("{}: {e}", record.display())))?;
    let Recorded {
        files: recorded,
        spec,
    } = serde_json::from_slice(&bytes).map_err(|e| no(format!("{}: {e}", record.display())))?;
    let now = image_files(images)?;
    if now != recorded {
        let names = |v: &[ImageFile]| v.iter().map(|f| f.name.clone()).collect::<Vec<_>>();
        let changed: Vec<String> = now
            .iter()
            .filter(|f| !recorded.contains(f))
            .map(|f| f.name.clone())
            .chain(
                recorded
                    .iter()
                    .filter(|f| !names(&now).contains(&f.name))
                    .map(|f| format!("{} (gone)", f.name)),
            )
            .collect();
        bail!(
            "--image-path {}: changed since moat's checkpoint wrote it ({}): refused",
            images.display(),
            changed.join(", ")
        );
    }
    Ok(spec)
}

/// `moat restore` of a gVisor container: prepared as create prepares one, then
/// `runsc restore --detach` in place of `runsc create` + `start`. A failure leaves
/// nothing behind.
pub fn restore(g: &Context, r: &Restore<'_>, sel: Selection) -> Result<i32> {
    if !matches!(pod::requested(r.annotations)?, pod::Requested::Own) {
        bail!(
            "restore of a container of a gVisor pod is not supported: runsc saves and \
             restores the whole sandbox, every container of the pod"
        );
    }
    let then = check_image(&g.root, r.images)?;
    let p = select::prepare(g, r.bundle, r.id, 0, sel)?;
    let now = asked(&p.shadow.join(crate::state::SPEC_FILE));
    let refused = match &now {
        Ok(now) => differs(&then, now).map(|part| {
            anyhow::anyhow!(
                "--bundle {}: its spec, as moat's policy makes it, differs from the \
                 checkpointed container's in {part}: the restored process keeps what it had \
                 at the checkpoint, so the restore is refused",
                r.bundle.display()
            )
        }),
        Err(_) => None,
    };
    if let Some(e) = refused.or_else(|| now.err()) {
        let (gv, root) = (p.gv.clone(), g.root.clone());
        drop(p);
        cmds::discard(g, &gv, &root, r.id);
        return Err(e);
    }
    let req = crate::container::create::Request {
        id: r.id.to_string(),
        bundle: r.bundle.to_path_buf(),
        console_socket: r.console_socket.map(Path::to_path_buf),
        pidfd_socket: None,
        pid_file: r.pid_file.map(Path::to_path_buf),
        no_pivot: false,
        no_new_keyring: false,
        preserve_fds: 0,
    };
    let image = cmds::Image {
        images: r.images,
        work: r.work,
    };
    cmds::create_prepared(g, p, &req, Some(image))
}
