//! Everything that talks to the kernel, in the order the kernel sees it during create:
//! namespaces → rootfs/mounts/devices → console → hooks → pivot → process attributes
//! (rlimits, user, capabilities, seccomp, AppArmor) → exec.

pub mod cgroups;
pub mod seccomp;
pub mod sys;
