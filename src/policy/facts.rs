//! Host facts the RESTRICTED floor decides from, read by the caller (never here) so that
//! the policy stays a pure function.

use super::NsPathError;

/// A namespace's identity: (st_dev, st_ino) of its nsfs inode.
pub type NsId = (u64, u64);

/// Host facts the RESTRICTED floor needs, read by the caller before the policy runs
/// (`linux::namespaces::floor_facts`), so that the policy itself stays pure.
#[derive(Debug, Clone, Default)]
pub struct FloorFacts {
    /// (st_dev, st_ino) of moat's own `/proc/self/ns/<type>`, by spec type (`pid`,
    /// `network`, `ipc`, `uts`): what "the host's namespace" is.
    pub host_ns: Vec<(&'static str, NsId)>,
    /// Every `linux.namespaces[].path` of those types: its (st_dev, st_ino), or why it
    /// could not be read.
    pub ns_paths: Vec<(String, Result<NsId, NsPathError>)>,
    /// The host's cgroup hierarchy is cgroup v2 alone (`/sys/fs/cgroup` is cgroup2).
    pub cgroup_v2: bool,
    /// The host's cgroup2 at `/sys/fs/cgroup` is mounted with `nsdelegate` (a super option
    /// in moat's own mountinfo): only then does the kernel refuse a cgroup namespace root's
    /// writes to its own limit files. Read only when the floor asks (cgroup v2, a writable
    /// cgroup mount in a cgroup namespace of the container's own); `false` otherwise.
    pub cgroup_nsdelegate: bool,
    /// The call's cgroup driver is systemd (`--systemd-cgroup`): `linux.cgroupsPath` is
    /// `slice:prefix:name`, and the fleet budget is a slice.
    pub systemd_cgroup: bool,
    /// The caller can attach cgroup BPF programs to the container's cgroup v2 (root of the
    /// host's user namespace, a v2 hierarchy mounted): the egress policy can be enforced.
    pub bpf_cgroup: bool,
    /// The nameservers of the engine's resolv.conf (the host-side source of the spec's
    /// `/etc/resolv.conf` bind, never the rootfs's file), for `[egress] resolvers`.
    pub resolvers: Vec<std::net::SocketAddr>,
}
