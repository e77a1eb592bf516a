//! `moat checkpoint`: runc's flags (`container::checkpoint`). A flag moat does not apply
//! yet is refused with an error naming it, never ignored.

use std::path::PathBuf;

use super::{Global, Result};
use crate::container::checkpoint::{self, CheckpointError, CheckpointRequest};
use crate::container::Container;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Path for saving criu image files (default ./checkpoint)
    #[arg(long = "image-path")]
    pub image_path: Option<PathBuf>,
    /// Path for saving work files and logs
    #[arg(long = "work-path")]
    pub work_path: Option<PathBuf>,
    /// Path for previous criu image files in pre-dump (not implemented: refused)
    #[arg(long = "parent-path")]
    pub parent_path: Option<String>,
    /// Leave the process running after checkpointing
    #[arg(long = "leave-running")]
    pub leave_running: bool,
    /// Allow open tcp connections (not implemented: refused)
    #[arg(long = "tcp-established")]
    pub tcp_established: bool,
    /// Skip in-flight tcp connections (not implemented: refused)
    #[arg(long = "tcp-skip-in-flight")]
    pub tcp_skip_in_flight: bool,
    /// Link unlinked files back when possible (not implemented: refused)
    #[arg(long = "link-remap")]
    pub link_remap: bool,
    /// Allow external unix sockets (not implemented: refused)
    #[arg(long = "ext-unix-sk")]
    pub ext_unix_sk: bool,
    /// Allow shell jobs (not implemented: refused)
    #[arg(long = "shell-job")]
    pub shell_job: bool,
    /// Use userfaultfd to lazily restore memory pages (not implemented: refused)
    #[arg(long = "lazy-pages")]
    pub lazy_pages: bool,
    /// criu writes \0 to this FD once lazy-pages is ready (not implemented: refused)
    #[arg(long = "status-fd", allow_negative_numbers = true, default_value_t = -1)]
    pub status_fd: i32,
    /// ADDRESS:PORT of the page server (not implemented: refused)
    #[arg(long = "page-server")]
    pub page_server: Option<String>,
    /// Handle file locks, for safety (not implemented: refused)
    #[arg(long = "file-locks")]
    pub file_locks: bool,
    /// Dump the container's memory only, leave it running (not implemented: refused)
    #[arg(long = "pre-dump")]
    pub pre_dump: bool,
    /// cgroups mode: moat takes only "ignore" (cgroups come from its record, never the image)
    #[arg(long = "manage-cgroups-mode")]
    pub manage_cgroups_mode: Option<String>,
    /// Create a namespace, but don't restore its properties (not implemented: refused)
    #[arg(long = "empty-ns")]
    pub empty_ns: Vec<String>,
    /// Enable auto deduplication of memory images (not implemented: refused)
    #[arg(long = "auto-dedup")]
    pub auto_dedup: bool,
    pub id: String,
}

/// The one refusal of a flag moat does not apply.
fn flag(flag: &'static str, why: &'static str) -> CheckpointError {
    CheckpointError::Flag { flag, why }
}

/// `--manage-cgroups-mode`: moat recreates a restored container's cgroups from its own
/// record and never lets CRIU act on the image's, so only `ignore` is what it does.
pub fn cgroups_mode(mode: Option<&str>) -> std::result::Result<(), CheckpointError> {
    match mode {
        None | Some("ignore") => Ok(()),
        Some(_) => Err(flag(
            "--manage-cgroups-mode",
            "moat takes cgroups from its record, never from the image: only \"ignore\"",
        )),
    }
}

impl Args {
    pub fn request(&self, g: &Global) -> Result<CheckpointRequest> {
        let refused = [
            (self.parent_path.is_some(), "--parent-path", "pre-dumps"),
            (
                self.tcp_established,
                "--tcp-established",
                "established TCP connections",
            ),
            (
                self.tcp_skip_in_flight,
                "--tcp-skip-in-flight",
                "in-flight TCP connections",
            ),
            (self.link_remap, "--link-remap", "unlinked open files"),
            (self.ext_unix_sk, "--ext-unix-sk", "external unix sockets"),
            (self.shell_job, "--shell-job", "a terminal (shell jobs)"),
            (self.lazy_pages, "--lazy-pages", "lazy pages"),
            (self.status_fd != -1, "--status-fd", "lazy pages"),
            (self.page_server.is_some(), "--page-server", "a page server"),
            (self.file_locks, "--file-locks", "file locks"),
            (self.pre_dump, "--pre-dump", "pre-dumps"),
            (!self.empty_ns.is_empty(), "--empty-ns", "empty namespaces"),
            (self.auto_dedup, "--auto-dedup", "image deduplication"),
        ];
        if let Some((_, name, what)) = refused.iter().find(|(on, _, _)| *on) {
            return Err(CheckpointError::Unsupported { flag: name, what }.into());
        }
        cgroups_mode(self.manage_cgroups_mode.as_deref())?;
        let cwd = std::env::current_dir()?;
        Ok(CheckpointRequest {
            id: self.id.clone(),
            image_path: cwd.join(
                self.image_path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("checkpoint")),
            ),
            work_path: self.work_path.as_ref().map(|w| cwd.join(w)),
            leave_running: self.leave_running,
            criu: g.criu.clone(),
        })
    }
}

/// Kept out of line and cold: called from `cli::call`'s one `match`, the only call would
/// otherwise be inlined there (as is any single-call static function, even at opt-level
/// "z"), and its code and stack slots (a restore's whole plan) would sit on the path of
/// every other command, `state` included: more text and stack pages faulted in per call.
#[cold]
#[inline(never)]
pub fn run(g: &Global, a: Args) -> Result<i32> {
    let req = a.request(g)?;
    let ctx = g.context()?;
    let c = Container::open(&ctx, &req.id)?;
    checkpoint::checkpoint(&ctx, c, &req)
}
