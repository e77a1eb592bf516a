//! Everything that talks to the kernel, in the order the kernel sees it during create:
//! namespaces → rootfs/mounts/devices → console → hooks → pivot → process attributes
//! (rlimits, user, capabilities, seccomp, AppArmor) → exec. `create` holds the sequence
//! (plan → parent → child).

pub mod apparmor;
pub mod attrs;
pub mod capabilities;
pub mod cgroups;
pub mod console;
pub mod create;
pub mod devices;
pub mod egress;
pub mod exec;
pub mod exeseal;
pub mod hooks;
pub mod hostfacts;
pub mod idmap;
pub mod killpoint;
pub mod mount;
pub mod namespaces;
pub mod notify;
pub mod path;
pub mod procfs;
pub mod rootfs;
pub mod rootless;
pub mod seccomp;
pub mod signal;
pub mod sync;
pub mod sys;
