//! `moat restore`: runc's flags (`container::checkpoint`). A flag moat does not apply yet
//! is refused with an error naming it, never ignored.

use std::path::{Path, PathBuf};

use super::{Global, Result};
use crate::container::checkpoint::{self, CheckpointError, RestoreRequest};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Path to an AF_UNIX socket which will receive the file descriptor referencing the master end of the console's pseudoterminal
    #[arg(long = "console-socket")]
    pub console_socket: Option<PathBuf>,
    /// Path to criu image files for restoring (default ./checkpoint)
    #[arg(long = "image-path")]
    pub image_path: Option<PathBuf>,
    /// Path for saving work files and logs
    #[arg(long = "work-path")]
    pub work_path: Option<PathBuf>,
    /// Allow open tcp connections (not implemented: refused)
    #[arg(long = "tcp-established")]
    pub tcp_established: bool,
    /// Allow external unix sockets (not implemented: refused)
    #[arg(long = "ext-unix-sk")]
    pub ext_unix_sk: bool,
    /// Allow shell jobs (not implemented: refused)
    #[arg(long = "shell-job")]
    pub shell_job: bool,
    /// Handle file locks, for safety (not implemented: refused)
    #[arg(long = "file-locks")]
    pub file_locks: bool,
    /// cgroups mode: moat takes only "ignore" (cgroups come from its record, never the image)
    #[arg(long = "manage-cgroups-mode")]
    pub manage_cgroups_mode: Option<String>,
    /// Path to the root of the bundle directory
    #[arg(short = 'b', long)]
    pub bundle: Option<PathBuf>,
    /// Detach from the container's process (moat restores detached only)
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Specify the file to write the process id to
    #[arg(long = "pid-file")]
    pub pid_file: Option<PathBuf>,
    /// Disable the use of the subreaper used to reap reparented processes (not implemented: refused)
    #[arg(long = "no-subreaper")]
    pub no_subreaper: bool,
    /// Do not use pivot root to jail process inside rootfs (not implemented: refused)
    #[arg(long = "no-pivot")]
    pub no_pivot: bool,
    /// Create a namespace, but don't restore its properties (not implemented: refused)
    #[arg(long = "empty-ns")]
    pub empty_ns: Vec<String>,
    /// Enable auto deduplication of memory images (not implemented: refused)
    #[arg(long = "auto-dedup")]
    pub auto_dedup: bool,
    /// Use userfaultfd to lazily restore memory pages (not implemented: refused)
    #[arg(long = "lazy-pages")]
    pub lazy_pages: bool,
    /// Allow to specify the LSM profile to be used during restore (not implemented: refused)
    #[arg(long = "lsm-profile")]
    pub lsm_profile: Option<String>,
    /// Allow to specify the SELinux mount context to be used during restore (not implemented: refused)
    #[arg(long = "lsm-mount-context")]
    pub lsm_mount_context: Option<String>,
    pub id: String,
}

impl Args {
    pub fn request(&self, g: &Global) -> Result<RestoreRequest> {
        let refused = [
            (
                self.tcp_established,
                "--tcp-established",
                "established TCP connections",
            ),
            (self.ext_unix_sk, "--ext-unix-sk", "external unix sockets"),
            (self.shell_job, "--shell-job", "a terminal (shell jobs)"),
            (self.file_locks, "--file-locks", "file locks"),
            (
                !self.detach,
                "--detach",
                "a restore in the foreground (without --detach)",
            ),
            (self.no_subreaper, "--no-subreaper", "without a subreaper"),
            (self.no_pivot, "--no-pivot", "a root without pivot_root"),
            (!self.empty_ns.is_empty(), "--empty-ns", "empty namespaces"),
            (self.auto_dedup, "--auto-dedup", "image deduplication"),
            (self.lazy_pages, "--lazy-pages", "lazy pages"),
            (
                self.lsm_profile.is_some(),
                "--lsm-profile",
                "another LSM profile",
            ),
            (
                self.lsm_mount_context.is_some(),
                "--lsm-mount-context",
                "another mount context",
            ),
        ];
        if let Some((_, name, what)) = refused.iter().find(|(on, _, _)| *on) {
            let e = if *name == "--detach" {
                CheckpointError::Flag {
                    flag: "restore without --detach",
                    why: "not implemented: moat restores only with --detach yet",
                }
            } else {
                CheckpointError::Unsupported { flag: name, what }
            };
            return Err(e.into());
        }
        super::checkpoint::cgroups_mode(self.manage_cgroups_mode.as_deref())?;
        let cwd = std::env::current_dir()?;
        Ok(RestoreRequest {
            id: self.id.clone(),
            bundle: crate::container::create::bundle_path(
                &cwd,
                self.bundle.as_deref().unwrap_or(Path::new("")),
            ),
            image_path: cwd.join(
                self.image_path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("checkpoint")),
            ),
            work_path: self.work_path.as_ref().map(|w| cwd.join(w)),
            pid_file: self.pid_file.as_ref().map(|p| cwd.join(p)),
            criu: g.criu.clone(),
            console_socket: self.console_socket.clone(),
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
    checkpoint::restore(&g.context()?, &req)
}
