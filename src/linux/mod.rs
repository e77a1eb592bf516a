//! Everything that talks to the kernel, in the order the kernel sees it during create:
//! namespaces → rootfs/mounts/devices → console → hooks → pivot → process attributes
//! (rlimits, user, capabilities, seccomp, AppArmor) → exec. `create` holds the sequence
//! (plan → parent → child).

pub mod affinity;
pub mod apparmor;
pub mod attrs;
pub mod capabilities;
pub mod cgroups;
pub mod console;
pub mod copyup;
pub mod cpulist;
pub mod create;
pub mod criu;
pub mod devices;
pub mod egress;
pub mod exec;
pub mod exeseal;
pub mod helper;
pub mod hooks;
pub mod hostfacts;
pub mod idmap;
pub mod kernelfs;
pub mod killpoint;
pub mod mempolicy;
pub mod mount;
pub mod namespaces;
pub mod netdev;
pub mod notify;
pub mod path;
pub mod pidfd;
pub mod procfs;
pub mod rootfs;
pub mod rootless;
pub mod seccomp;
pub mod signal;
pub mod sync;
pub mod sys;

/// The text of a file the kernel makes up as it is read (`/proc`, `/sys`, cgroupfs). Those
/// report a size of 0, so std's `fs::read_to_string` asks for the size (`fstat`), then
/// reads 32 bytes and doubles its way up: nine reads for this host's
/// `/proc/self/mountinfo`, six for `/proc/<pid>/stat`. Here the first read takes up to
/// 4 KiB: two reads, the second finding the end, for nearly all of them.
pub fn read_kernel_file(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::with_capacity(4096);
    std::fs::File::open(path)?.read_to_string(&mut text)?;
    Ok(text)
}
