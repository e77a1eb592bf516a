//! bpf(2) for the cgroup v2 device controller (filled in with the cgroups layer).
