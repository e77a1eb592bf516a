#!/usr/bin/python3
"""Drive one Kubernetes pod through a containerd's CRI API, step by step, as a kubelet does.

Usage: cri.py --socket SOCK --handler NAME --image REF --proto API_PROTO
              --cgroup-driver cgroupfs|systemd --cgroup-parent BASE
              [--runtime-root DIR] [--proto-path DIR]... [--log-dir DIR] [--timeout S]
              [--expect-status KEY:VALUE]... [--pod-pids-limit N]

The CRI messages come from the CRI API's own api.proto (k8s.io/cri-api
pkg/apis/runtime/v1, as vendored in the containerd source package the daemon was
built from), compiled at run time by grpc_tools.protoc (python3-grpc-tools) into
a temporary directory and used through python3-protobuf and python3-grpcio;
nothing generated is kept. api.proto imports gogo.proto (Go-only options), found
in golang-github-gogo-protobuf-dev's /usr/share/gocode/src (the default
--proto-path).

The pod (a kubelet's default: own network, IPC and UTS namespaces, one PID
namespace per container) needs a CNI network in containerd's CRI config (see
scripts/lib/cni-podnet) and IMAGE imported in the k8s.io namespace. Its
cgroup parent is the kubelet's pod-level one in the driver's form:
BASE/pod<uid> for cgroupfs (BASE a cgroup path), <BASE without .slice>-pod<uid
with _>.slice for systemd (BASE a slice, e.g. kubepods-besteffort.slice).

Steps: RunPodSandbox; two containers created in the sandbox and started;
their network, IPC and UTS namespaces are the sandbox's (same inodes as the
pause process, passed by path in the runtime spec); ExecSync (stdout, stderr,
exit code); with --expect-status, lines of an exec'd process's
/proc/self/status (the policy the runtime applied); ContainerStats (non-zero cpu and memory); UpdateContainerResources
(memory and cpu limits, read back from the cgroup files); a container restart
(stop, remove, create again with the same name and attempt+1); StopPodSandbox,
RemovePodSandbox; and then nothing left: no process, no runtime state under
--runtime-root, no cgroup, no mount, no network namespace.

With the systemd driver, systemd's view too: the pod slice and each
container's scope (cri-containerd-<id>.scope) active with the ControlGroup the
process is in, the scope's MemoryMax the container's limit (and the update's),
every scope gone once its container is, the slice gone after the kubelet's
stop. --pod-pids-limit N makes the pod slice first, with TasksMax=N, as a
kubelet does for its podPidsLimit (StartTransientUnit on the system bus,
through busctl), and reads pids.max back from the slice's cgroup.

Prints one `ok - STEP (N ms)` or `not ok - STEP: DETAIL` line per check (the
time is the CRI calls' own), `# ...` comments, and exits 1 if a check failed.
Whatever happens, the pod is stopped and removed before exit and the pod-level
cgroup is removed as a kubelet removes it (rmdir for cgroupfs, `systemctl stop`
for the slice under systemd).
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

import grpc

# --- the CRI API, generated from its .proto at run time ----------------------


def load_cri_api(proto, proto_paths, out_dir):
    """Compile PROTO with grpc_tools.protoc into OUT_DIR; return (api_pb2, api_pb2_grpc)."""
    import importlib

    import grpc_tools
    from grpc_tools import protoc

    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")  # descriptor.proto
    src = os.path.join(out_dir, "src")
    os.makedirs(src)
    # module name api_pb2. A newer cri-api marks registry credentials `[debug_redact = true]`
    # (a field option of protobuf 22, for logs only: the wire format is the same), which an
    # older grpc_tools' protoc (forky's 1.14) refuses as unknown: dropped from the copy.
    with open(proto, encoding="utf-8") as f:
        text = re.sub(r"\s*\[debug_redact\s*=\s*true\]", "", f.read())
    with open(os.path.join(src, "api.proto"), "w", encoding="utf-8") as f:
        f.write(text)
    args = ["grpc_tools.protoc", "-I", src]
    for p in proto_paths:
        args += ["-I", p]
    args += ["-I", wkt, "--python_out", out_dir, "--grpc_python_out", out_dir,
             os.path.join(src, "api.proto")]
    # api.proto's imports (gogo.proto) are compiled too: the generated api_pb2 imports them.
    with open(proto, encoding="utf-8") as f:
        imports = [line.split('"')[1] for line in f if line.startswith("import ")]
    for imp in imports:
        found = [os.path.join(p, imp) for p in proto_paths if os.path.isfile(os.path.join(p, imp))]
        if not found:
            raise SystemExit(f"cri.py: {imp} (imported by {proto}) is in none of {proto_paths}")
        args.append(found[0])
    if protoc.main(args) != 0:
        raise SystemExit(f"cri.py: grpc_tools.protoc could not compile {proto}")
    sys.path.insert(0, out_dir)
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")


# --- host-side observations --------------------------------------------------


def pid_alive(pid):
    """A zombie counts as gone (the host's PID 1 may reap late)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def ns_inode(pid, ns):
    return os.stat(f"/proc/{pid}/ns/{ns}").st_ino


def cgroup_mounts():
    """{controller or '' (v2): mount point} from /proc/self/mountinfo."""
    out = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fstype, _, opts = right.split()[:3]
            mnt = left.split()[4]
            if fstype == "cgroup2":
                out.setdefault("", mnt)
            elif fstype == "cgroup":
                for o in opts.split(","):
                    out.setdefault(o, mnt)
    return out


def cgroup_dirs(pid):
    """{controller or '': directory} of PID's cgroups, in the host's view."""
    mounts, dirs = cgroup_mounts(), {}
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in (ctrls.split(",") if ctrls else [""]):
                c = c.removeprefix("name=")
                if c in mounts:
                    dirs[c] = mounts[c] + path
    return dirs


def read(path):
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def memory_limit(dirs):
    if "memory" in dirs:
        return int(read(dirs["memory"] + "/memory.limit_in_bytes"))
    return int(read(dirs[""] + "/memory.max"))


def cpu_quota(dirs):
    """(quota, period) in µs, quota -1 when unlimited."""
    if "cpu" in dirs:
        return (int(read(dirs["cpu"] + "/cpu.cfs_quota_us")),
                int(read(dirs["cpu"] + "/cpu.cfs_period_us")))
    q, p = read(dirs[""] + "/cpu.max").split()
    return (-1 if q == "max" else int(q)), int(p)


def unit_props(unit, *props):
    """{property: value} of a systemd UNIT (systemctl show)."""
    r = subprocess.run(["systemctl", "show", "--property=" + ",".join(props), unit],
                       capture_output=True, text=True, check=False)
    return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def unit_gone(unit, wait=10.0):
    """UNIT is unloaded or inactive (waiting up to WAIT seconds: systemd drops a scope
    once its last process is gone)."""
    end = time.monotonic() + wait
    while True:
        p = unit_props(unit, "ActiveState", "LoadState")
        if p.get("LoadState") == "not-found" or p.get("ActiveState") in ("inactive", ""):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.2)


def mounts_naming(words):
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        return [line.split(" - ")[0].split()[4] for line in f if any(w in line for w in words)]


# --- the scenario ------------------------------------------------------------


class Fail(Exception):
    pass


class Pod:
    def __init__(self, a, api, grpc_mod):
        self.a, self.api = a, api
        self.channel = grpc.insecure_channel("unix://" + a.socket)
        self.rt = grpc_mod.RuntimeServiceStub(self.channel)
        self.passed = self.failed = 0
        self.pod_id = None
        self.ctrs = {}           # name -> container id (live ones)
        self.ids = []            # every sandbox/container id made, for the leftovers check
        self.pids = []           # every process seen, likewise
        self.cgroups = set()     # every container cgroup directory seen
        self.scopes = set()      # every systemd scope seen (systemd driver)
        self.netns = None
        self.uid = str(uuid.uuid4())
        self.pod_cgroup = self.pod_cgroup_parent()
        self.elapsed = 0.0

    # -- reporting
    def ok(self, name):
        self.passed += 1
        print(f"ok - {name} ({self.elapsed * 1000:.0f} ms)", flush=True)

    def not_ok(self, name, detail):
        self.failed += 1
        detail = str(detail).replace("\n", "\\n")[:400]
        print(f"not ok - {name}: {detail}", flush=True)

    def check(self, name, fn):
        """Run FN (which makes CRI calls through self.call); report; a failure stops nothing else."""
        self.elapsed = 0.0
        try:
            fn()
        except Fail as e:
            self.not_ok(name, e)
            return False
        except grpc.RpcError as e:
            self.not_ok(name, f"{e.code().name}: {e.details()}")
            return False
        except (OSError, ValueError, KeyError) as e:
            self.not_ok(name, f"{type(e).__name__}: {e}")
            return False
        self.ok(name)
        return True

    def call(self, method, req, timeout=None):
        t0 = time.monotonic()
        try:
            return getattr(self.rt, method)(req, timeout=timeout or self.a.timeout)
        finally:
            self.elapsed += time.monotonic() - t0

    # -- configs
    def pod_cgroup_parent(self):
        base = self.a.cgroup_parent
        if self.a.cgroup_driver == "systemd":
            if not base.endswith(".slice"):
                raise SystemExit("cri.py: --cgroup-parent must be a slice with --cgroup-driver systemd")
            return f"{base[:-len('.slice')]}-pod{self.uid.replace('-', '_')}.slice"
        return f"{base.rstrip('/')}/pod{self.uid}"

    def ns_options(self):
        m = self.api.NamespaceMode
        return self.api.NamespaceOption(network=m.Value("POD"), pid=m.Value("CONTAINER"),
                                        ipc=m.Value("POD"))

    def sandbox_config(self):
        api = self.api
        return api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name="moat-pod", uid=self.uid, namespace="moat-e2e"),
            hostname="moat-pod",
            log_directory=self.a.log_dir,
            labels={"io.kubernetes.pod.name": "moat-pod"},
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=self.pod_cgroup,
                security_context=api.LinuxSandboxSecurityContext(namespace_options=self.ns_options())))

    def container_config(self, name, attempt):
        api = self.api
        # TERM ends the loop at once (a kubelet's stop); the loop keeps the cpu counter moving.
        script = "trap 'exit 0' TERM; while :; do sleep 0.2; done"
        return api.ContainerConfig(
            metadata=api.ContainerMetadata(name=name, attempt=attempt),
            image=api.ImageSpec(image=self.a.image),
            command=["sh", "-c", script],
            log_path=f"{name}_{attempt}.log",
            linux=api.LinuxContainerConfig(
                resources=api.LinuxContainerResources(
                    cpu_period=100000, cpu_quota=50000, cpu_shares=256,
                    memory_limit_in_bytes=128 << 20),
                security_context=api.LinuxContainerSecurityContext(
                    namespace_options=self.ns_options())))

    # -- helpers
    def info(self, resp):
        return json.loads(resp.info["info"])

    def sandbox_status(self):
        return self.call("PodSandboxStatus", self.api.PodSandboxStatusRequest(
            pod_sandbox_id=self.pod_id, verbose=True))

    def container_status(self, cid):
        return self.call("ContainerStatus", self.api.ContainerStatusRequest(
            container_id=cid, verbose=True))

    def exec_sync(self, cid, cmd, timeout=10):
        return self.call("ExecSync", self.api.ExecSyncRequest(container_id=cid, cmd=cmd,
                                                              timeout=timeout),
                         timeout=timeout + self.a.timeout)

    def pause_pid(self):
        return self.info(self.sandbox_status())["pid"]

    def start_container(self, name, attempt):
        api = self.api
        resp = self.call("CreateContainer", api.CreateContainerRequest(
            pod_sandbox_id=self.pod_id, config=self.container_config(name, attempt),
            sandbox_config=self.sandbox_config()))
        cid = resp.container_id
        self.ctrs[name] = cid
        self.ids.append(cid)
        self.call("StartContainer", api.StartContainerRequest(container_id=cid))
        st = self.container_status(cid)
        if st.status.state != api.ContainerState.Value("CONTAINER_RUNNING"):
            raise Fail(f"{name}: state {api.ContainerState.Name(st.status.state)} after start")
        if st.status.metadata.attempt != attempt:
            raise Fail(f"{name}: attempt {st.status.metadata.attempt}, want {attempt}")
        pid = self.info(st)["pid"]
        self.pids.append(pid)
        self.cgroups.update(cgroup_dirs(pid).values())
        self.systemd_scope(name, pid, memory_max=128 << 20)
        self.saw_state(cid)
        return cid, pid

    def systemd_scope(self, what, pid, memory_max=None):
        """(systemd driver) PID's cgroup is an active scope in the pod slice, as systemd says."""
        if self.a.cgroup_driver != "systemd":
            return
        d = cgroup_dirs(pid).get("", "")
        unit = os.path.basename(d)
        if not unit.endswith(".scope") or os.path.basename(os.path.dirname(d)) != self.pod_cgroup:
            raise Fail(f"{what}: cgroup {d} is not a scope in {self.pod_cgroup}")
        self.scopes.add(unit)
        p = unit_props(unit, "ActiveState", "ControlGroup", "Slice", "MemoryMax")
        cg = d[len(cgroup_mounts()[""]):]
        if (p.get("ActiveState"), p.get("ControlGroup"), p.get("Slice")) != ("active", cg, self.pod_cgroup):
            raise Fail(f"{what}: systemd says {unit} is {p}, want active, ControlGroup {cg}, "
                       f"Slice {self.pod_cgroup}")
        if memory_max is not None and p.get("MemoryMax") != str(memory_max):
            raise Fail(f"{what}: {unit} MemoryMax {p.get('MemoryMax')}, want {memory_max}")

    def make_pod_slice(self):
        """The pod slice with TasksMax, as a kubelet's systemd cgroup manager makes it."""
        n = self.a.pod_pids_limit
        r = subprocess.run(
            ["busctl", "call", "--timeout=30", "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
             "org.freedesktop.systemd1.Manager", "StartTransientUnit", "ssa(sv)a(sa(sv))",
             self.pod_cgroup, "replace", "3", "Description", "s", "moat e2e pod",
             "DefaultDependencies", "b", "false", "TasksMax", "t", str(n), "0"],
            capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise Fail(f"StartTransientUnit {self.pod_cgroup}: {r.stderr.strip()}")
        end = time.monotonic() + 10
        while unit_props(self.pod_cgroup, "ActiveState").get("ActiveState") != "active":
            if time.monotonic() > end:
                raise Fail(f"{self.pod_cgroup} not active: {unit_props(self.pod_cgroup, 'ActiveState')}")
            time.sleep(0.1)

    def saw_state(self, ident):
        """The runtime keeps state for IDENT under --runtime-root (so its absence later means something)."""
        if self.a.runtime_root and not glob.glob(os.path.join(self.a.runtime_root, "*", ident)):
            raise Fail(f"no runtime state {self.a.runtime_root}/*/{ident}")

    def joined(self, name):
        """The container's net, ipc and uts namespaces are the pause process's, by path."""
        cid = self.ctrs[name]
        info = self.info(self.container_status(cid))
        pause, pid = self.pause_pid(), info["pid"]
        for ns in ("net", "ipc", "uts"):
            if ns_inode(pid, ns) != ns_inode(pause, ns):
                raise Fail(f"{name}: {ns} namespace {ns_inode(pid, ns)} is not the sandbox's "
                           f"{ns_inode(pause, ns)}")
            if ns_inode(pid, ns) == ns_inode(os.getpid(), ns):
                raise Fail(f"{name}: {ns} namespace is the host's")
        if ns_inode(pid, "pid") == ns_inode(pause, "pid"):
            raise Fail(f"{name}: pid namespace is the sandbox's (want its own)")
        spec_ns = {n["type"]: n.get("path", "") for n in info["runtimeSpec"]["linux"]["namespaces"]}
        for t in ("network", "ipc", "uts"):
            if not spec_ns.get(t):
                raise Fail(f"{name}: runtime spec has no path for the {t} namespace: {spec_ns}")
        host = self.exec_sync(cid, ["hostname"])
        if host.stdout.decode().strip() != "moat-pod":
            raise Fail(f"{name}: hostname {host.stdout!r}, want the pod's 'moat-pod'")

    # -- steps
    def run(self):
        api = self.api
        ver = self.call("Version", api.VersionRequest(version="v1"))
        print(f"# CRI {ver.runtime_api_version} via {ver.runtime_name} {ver.runtime_version}; "
              f"handler {self.a.handler}, {self.a.cgroup_driver} pod cgroup {self.pod_cgroup}",
              flush=True)

        if self.a.pod_pids_limit is not None:
            if not self.check(f"pod slice {self.pod_cgroup} made first with TasksMax="
                              f"{self.a.pod_pids_limit} (a kubelet's podPidsLimit)",
                              self.make_pod_slice):
                return

        def run_sandbox():
            resp = self.call("RunPodSandbox", api.RunPodSandboxRequest(
                config=self.sandbox_config(), runtime_handler=self.a.handler))
            self.pod_id = resp.pod_sandbox_id
            self.ids.append(self.pod_id)
            st = self.sandbox_status()
            info = self.info(st)
            self.pids.append(info["pid"])
            if st.status.state != api.PodSandboxState.Value("SANDBOX_READY"):
                raise Fail(f"state {api.PodSandboxState.Name(st.status.state)}")
            if info.get("runtimeHandler", self.a.handler) != self.a.handler:
                raise Fail(f"handler {info.get('runtimeHandler')}")
            if st.status.network.ip != "192.0.2.2":
                raise Fail(f"pod ip {st.status.network.ip!r}, want the CNI's 192.0.2.2")
            for n in info["runtimeSpec"]["linux"]["namespaces"]:
                if n["type"] == "network":
                    self.netns = n.get("path")
            dirs = cgroup_dirs(info["pid"])
            self.cgroups.update(dirs.values())
            want = self.pod_cgroup if self.a.cgroup_driver == "cgroupfs" else "/" + self.pod_cgroup
            if not any(want in d for d in dirs.values()):
                raise Fail(f"pause cgroups {sorted(set(dirs.values()))} are not under {want}")
            # What the leftovers check looks for must be there while the pod runs.
            if not self.netns or not os.path.exists(self.netns):
                raise Fail(f"no network namespace file ({self.netns})")
            if not mounts_naming([self.pod_id]):
                raise Fail(f"no mount names the sandbox {self.pod_id}")
            self.saw_state(self.pod_id)
            self.systemd_scope("pause", info["pid"])
        if not self.check("RunPodSandbox: pause running in the pod cgroup, CNI network up",
                          run_sandbox):
            return

        for name in ("app", "side"):
            if not self.check(f"CreateContainer + StartContainer {name} in the sandbox",
                              lambda n=name: self.start_container(n, 0)):
                return
        for name in ("app", "side"):
            self.check(f"{name} joined the sandbox's network, IPC and UTS namespaces (by path)",
                       lambda n=name: self.joined(n))

        if self.a.cgroup_driver == "systemd":
            def pod_slice():
                p = unit_props(self.pod_cgroup, "ActiveState", "ControlGroup", "TasksMax")
                if p.get("ActiveState") != "active":
                    raise Fail(f"{self.pod_cgroup}: {p}")
                d = cgroup_mounts()[""] + p.get("ControlGroup", "")
                have = read(d + "/pids.max") if os.path.exists(d + "/pids.max") else None
                if self.a.pod_pids_limit is not None and (
                        p.get("TasksMax"), have) != (str(self.a.pod_pids_limit),) * 2:
                    raise Fail(f"TasksMax {p.get('TasksMax')}, {d}/pids.max {have}, "
                               f"want {self.a.pod_pids_limit}")
                print(f"# {self.pod_cgroup}: {p}, pids.max {have}; scopes {sorted(self.scopes)}",
                      flush=True)
            self.check("systemd: pod slice active" + (
                f", TasksMax and pids.max {self.a.pod_pids_limit}"
                if self.a.pod_pids_limit is not None else "") + "; pause and containers in scopes of it",
                pod_slice)

        def exec_sync():
            r = self.exec_sync(self.ctrs["app"],
                               ["sh", "-c", "echo out-$((6*7)); echo err >&2; exit 5"])
            if (r.stdout, r.stderr, r.exit_code) != (b"out-42\n", b"err\n", 5):
                raise Fail(f"stdout={r.stdout!r} stderr={r.stderr!r} exit_code={r.exit_code}")
        self.check("ExecSync: stdout, stderr and exit code 5", exec_sync)

        if self.a.expect_status:
            def status_lines():
                r = self.exec_sync(self.ctrs["app"], ["cat", "/proc/self/status"])
                have = {l.split(":", 1)[0]: l.split(":", 1)[1].strip()
                        for l in r.stdout.decode(errors="replace").splitlines() if ":" in l}
                for want in self.a.expect_status:
                    key, val = want.split(":", 1)
                    if have.get(key) != val:
                        raise Fail(f"{key} is {have.get(key)!r}, not {val!r}")
            self.check("the app's /proc/self/status: " + ", ".join(self.a.expect_status),
                       status_lines)

        def stats():
            r = self.call("ContainerStats", api.ContainerStatsRequest(
                container_id=self.ctrs["app"]))
            cpu = r.stats.cpu.usage_core_nano_seconds.value
            mem = r.stats.memory.working_set_bytes.value
            if not (cpu > 0 and mem > 0):
                raise Fail(f"cpu usage_core_nano_seconds={cpu} memory working_set_bytes={mem}")
            print(f"# ContainerStats app: cpu {cpu} ns, working set {mem} bytes", flush=True)
        self.check("ContainerStats: non-zero cpu and memory", stats)

        def update():
            cid = self.ctrs["app"]
            dirs = cgroup_dirs(self.info(self.container_status(cid))["pid"])
            before = memory_limit(dirs), cpu_quota(dirs)
            if before != (128 << 20, (50000, 100000)):
                raise Fail(f"limits at create {before}, want the config's {(128 << 20, (50000, 100000))}")
            self.elapsed = 0.0
            self.call("UpdateContainerResources", api.UpdateContainerResourcesRequest(
                container_id=cid, linux=api.LinuxContainerResources(
                    cpu_period=100000, cpu_quota=20000, cpu_shares=256,
                    memory_limit_in_bytes=96 << 20)))
            after = memory_limit(dirs), cpu_quota(dirs)
            if after != (96 << 20, (20000, 100000)):
                raise Fail(f"cgroup files say {after} after the update, want {(96 << 20, (20000, 100000))}")
            if self.a.cgroup_driver == "systemd":
                unit = os.path.basename(dirs[""])
                mm = unit_props(unit, "MemoryMax").get("MemoryMax")
                if mm != str(96 << 20):
                    raise Fail(f"systemd says {unit} MemoryMax {mm} after the update, want {96 << 20}")
        self.check("UpdateContainerResources: memory 128->96 MiB, cpu quota 50->20 ms in the cgroup files",
                   update)

        def restart():
            old = self.ctrs["side"]
            old_pid = self.info(self.container_status(old))["pid"]
            self.call("StopContainer", api.StopContainerRequest(container_id=old, timeout=10),
                      timeout=10 + self.a.timeout)
            st = self.container_status(old).status
            if st.state != api.ContainerState.Value("CONTAINER_EXITED") or st.exit_code != 0:
                raise Fail(f"after StopContainer: {api.ContainerState.Name(st.state)} exit {st.exit_code}")
            self.call("RemoveContainer", api.RemoveContainerRequest(container_id=old))
            del self.ctrs["side"]
            if pid_alive(old_pid):
                raise Fail(f"the stopped container's init {old_pid} still runs")
            _, pid = self.start_container("side", 1)
            if pid == old_pid:
                raise Fail("same pid after the restart")
            self.joined("side")
        self.check("container restart in the pod: stop, remove, create side attempt 1, joined again",
                   restart)

        def stop_sandbox():
            self.call("StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=self.pod_id))
            st = self.call("PodSandboxStatus", api.PodSandboxStatusRequest(pod_sandbox_id=self.pod_id))
            if st.status.state != api.PodSandboxState.Value("SANDBOX_NOTREADY"):
                raise Fail(f"state {api.PodSandboxState.Name(st.status.state)}")
            for name, cid in self.ctrs.items():
                s = self.call("ContainerStatus", api.ContainerStatusRequest(container_id=cid)).status
                if s.state != api.ContainerState.Value("CONTAINER_EXITED"):
                    raise Fail(f"{name}: {api.ContainerState.Name(s.state)} after StopPodSandbox")
            alive = [p for p in self.pids if pid_alive(p)]
            if alive:
                raise Fail(f"processes {alive} still run")
        self.check("StopPodSandbox: sandbox NOTREADY, containers EXITED, no process", stop_sandbox)

        def remove_sandbox():
            self.call("RemovePodSandbox", api.RemovePodSandboxRequest(pod_sandbox_id=self.pod_id))
            self.pod_id = None
            self.ctrs.clear()
            left = [s.id for s in self.call("ListPodSandbox", api.ListPodSandboxRequest()).items
                    if s.id in self.ids]
            left += [c.id for c in self.call("ListContainers", api.ListContainersRequest()).containers
                     if c.id in self.ids]
            if left:
                raise Fail(f"still listed: {left}")
        self.check("RemovePodSandbox: sandbox and containers no longer listed", remove_sandbox)

    def leftovers(self):
        """After the pod is gone: nothing of it on the host."""
        def nothing_left():
            found = []
            found += [f"process {p}" for p in self.pids if pid_alive(p)]
            if self.a.runtime_root:
                for path in glob.glob(os.path.join(self.a.runtime_root, "**"), recursive=True):
                    if any(i in path for i in self.ids):
                        found.append(f"runtime state {path}")
            mine = [d for d in sorted(self.cgroups) if self.pod_cgroup in d and not d.endswith(self.pod_cgroup)]
            if not mine:
                raise Fail(f"no container cgroup below {self.pod_cgroup} was seen: {sorted(self.cgroups)}")
            found += [f"cgroup {d}" for d in mine if os.path.isdir(d)]
            found += [f"mount {m}" for m in mounts_naming(self.ids + ([self.netns] if self.netns else []))]
            if self.netns and os.path.exists(self.netns):
                found.append(f"netns {self.netns}")
            if self.a.cgroup_driver == "systemd" and not self.scopes:
                raise Fail("no systemd scope was seen")
            found += [f"unit {u}: {unit_props(u, 'ActiveState', 'LoadState')}"
                      for u in sorted(self.scopes) if not unit_gone(u)]
            if found:
                raise Fail("; ".join(found))
        self.check("nothing left: no process, runtime state, container cgroup, mount or netns",
                   nothing_left)
        self.check("pod cgroup empty, removed as a kubelet removes it", self.remove_pod_cgroup)

    def remove_pod_cgroup(self):
        if self.a.cgroup_driver == "systemd":
            r = subprocess.run(["systemctl", "stop", self.pod_cgroup], capture_output=True, text=True,
                               check=False)
            # A slice systemd already dropped (no unit left in it) is "not loaded": fine.
            if r.returncode != 0 and "not loaded" not in r.stderr:
                raise Fail(f"systemctl stop {self.pod_cgroup}: {r.stderr.strip()}")
            left = [d for d in glob.glob(f"/sys/fs/cgroup/**/{self.pod_cgroup}", recursive=True)]
            if not unit_gone(self.pod_cgroup):
                left.append(f"unit {unit_props(self.pod_cgroup, 'ActiveState', 'LoadState')}")
        else:
            left = []
            for mnt in set(cgroup_mounts().values()):
                d = mnt + self.pod_cgroup
                if os.path.isdir(d):
                    try:
                        os.rmdir(d)           # fails (EBUSY) while a process or child cgroup is in it
                    except OSError as e:
                        left.append(f"{d}: {e.strerror}")
        if left:
            raise Fail(f"left: {left}")

    def teardown(self):
        """On an error path: what is still there goes, quietly (the checks said what failed)."""
        api = self.api
        for cid in list(self.ctrs.values()):
            for req in (api.StopContainerRequest(container_id=cid, timeout=2),
                        api.RemoveContainerRequest(container_id=cid)):
                try:
                    getattr(self.rt, type(req).__name__.removesuffix("Request"))(req, timeout=30)
                except grpc.RpcError as e:
                    print(f"# teardown {cid}: {e.code().name}: {e.details()}", flush=True)
        if self.pod_id:
            for req in (api.StopPodSandboxRequest(pod_sandbox_id=self.pod_id),
                        api.RemovePodSandboxRequest(pod_sandbox_id=self.pod_id)):
                try:
                    getattr(self.rt, type(req).__name__.removesuffix("Request"))(req, timeout=30)
                except grpc.RpcError as e:
                    print(f"# teardown {self.pod_id}: {e.code().name}: {e.details()}", flush=True)
            self.pod_id = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--handler", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--proto", required=True, help="k8s.io/cri-api's pkg/apis/runtime/v1/api.proto")
    ap.add_argument("--proto-path", action="append", default=None,
                    help="where api.proto's imports are (default /usr/share/gocode/src)")
    ap.add_argument("--cgroup-driver", choices=("cgroupfs", "systemd"), required=True)
    ap.add_argument("--cgroup-parent", required=True)
    ap.add_argument("--runtime-root", default="")
    ap.add_argument("--log-dir", default="")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--expect-status", action="append", default=[], metavar="KEY:VALUE",
                    help="a line an exec'd process's /proc/self/status must hold (e.g. NoNewPrivs:1)")
    ap.add_argument("--pod-pids-limit", type=int, default=None, metavar="N",
                    help="make the pod slice first with TasksMax=N (systemd driver only)")
    a = ap.parse_args()
    if a.pod_pids_limit is not None and a.cgroup_driver != "systemd":
        ap.error("--pod-pids-limit is implemented for --cgroup-driver systemd only")
    a.proto_path = a.proto_path or ["/usr/share/gocode/src"]

    with tempfile.TemporaryDirectory(prefix="cri-api.") as gen:
        t0 = time.monotonic()
        api, api_grpc = load_cri_api(a.proto, a.proto_path, gen)
        print(f"# CRI API compiled from {a.proto} in {(time.monotonic() - t0) * 1000:.0f} ms",
              flush=True)
        a.log_dir = a.log_dir or os.path.join(gen, "logs")
        os.makedirs(a.log_dir, exist_ok=True)
        pod = Pod(a, api, api_grpc)
        try:
            pod.run()
        finally:
            pod.teardown()
            pod.leftovers()
        print(f"# cri.py: {pod.passed} passed, {pod.failed} failed", flush=True)
        return 1 if pod.failed else 0


if __name__ == "__main__":
    sys.exit(main())
