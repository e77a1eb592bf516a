#!/usr/bin/python3
"""Drive one gVisor pod (a sandbox and two containers) through containerd's CRI API.

Usage: cri_gvisor_pod.py --socket SOCK --handler NAME --image REF --proto API_PROTO
                         --log-dir DIR --moat BIN --moat-root DIR [--cgroup-parent CG]
                         [--proto-path DIR]... [--timeout S]

Used by scripts/e2e-gvisor for moat's gVisor pods: the pod sandbox container makes
one runsc sandbox, and both app containers are created inside it (runsc's
multi-container mode) behind containerd's runc shim. Steps, as a kubelet makes them:
RunPodSandbox (pod network from CNI), CreateContainer/StartContainer of a long-running
container and of one that exits 3, ExecSync, ContainerStatus, RemoveContainer of one
container (the sandbox and the other stay), StopContainer, StopPodSandbox,
RemovePodSandbox. On the host it checks what only moat can show: one runsc sandbox
process for the pod, moat's records naming the pod's roles, each app container's
waiter (its pid from `moat state`) and the waiter's RSS.

Prints one line per check, `PASS<TAB>NAME` or `FAIL<TAB>NAME<TAB>DETAIL`, and
`FIGURE<TAB>NAME<TAB>VALUE` lines; the caller counts them. Everything the pod made is
removed before exit, also on error. Exit status 0 when every check passed.

The CRI messages come from the CRI API's own api.proto (the one scripts/lib/cri-setup
takes from containerd's source package), compiled at run time into a temporary
directory by scripts/lib/cri.py's load_cri_api (grpc_tools.protoc; its import
gogo.proto from --proto-path, default /usr/share/gocode/src).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import grpc

from cri import load_cri_api


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            print(f"PASS\t{name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL\t{name}\t{detail}", flush=True)
        return cond

    def figure(self, name, value):
        print(f"FIGURE\t{name}\t{value}", flush=True)


class Pod:
    def __init__(self, a, api, api_grpc):
        self.a, self.api = a, api
        self.channel = grpc.insecure_channel("unix://" + a.socket)
        self.rt = api_grpc.RuntimeServiceStub(self.channel)
        self.pod_id = None
        self.ctrs = []
        uid = f"moat-e2e-gv-{os.getpid()}"
        # A kubelet's defaults: the pod's network (CNI) and ipc, a pid namespace per
        # container.
        ns = api.NamespaceOption(pid=api.NamespaceMode.Value("CONTAINER"))
        self.config = api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name="moat-gv-pod", uid=uid, namespace="default"),
            log_directory=a.log_dir,
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=a.cgroup_parent,
                security_context=api.LinuxSandboxSecurityContext(namespace_options=ns)))

    def call(self, method, request, timeout=None):
        return getattr(self.rt, method)(request, timeout=timeout or self.a.timeout)

    def run(self):
        r = self.call("RunPodSandbox", self.api.RunPodSandboxRequest(
            config=self.config, runtime_handler=self.a.handler))
        self.pod_id = r.pod_sandbox_id
        return self.pod_id

    def sandbox_state(self):
        return self.call("PodSandboxStatus", self.api.PodSandboxStatusRequest(
            pod_sandbox_id=self.pod_id)).status.state

    def create(self, name, argv):
        api = self.api
        cfg = api.ContainerConfig(metadata=api.ContainerMetadata(name=name),
                                  image=api.ImageSpec(image=self.a.image),
                                  command=argv, log_path=f"{name}.log")
        cfg.linux.SetInParent()  # present, empty: as a kubelet sends it
        r = self.call("CreateContainer", api.CreateContainerRequest(
            pod_sandbox_id=self.pod_id, config=cfg, sandbox_config=self.config))
        self.ctrs.append(r.container_id)
        return r.container_id

    def start(self, cid):
        self.call("StartContainer", self.api.StartContainerRequest(container_id=cid))

    def status(self, cid):
        st = self.call("ContainerStatus", self.api.ContainerStatusRequest(container_id=cid)).status
        return st.state, st.exit_code

    def wait_state(self, cid, want, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            state, code = self.status(cid)
            if state == want or time.monotonic() > deadline:
                return state, code
            time.sleep(0.1)

    def exec_sync(self, cid, argv):
        r = self.call("ExecSync", self.api.ExecSyncRequest(container_id=cid, cmd=argv, timeout=20))
        return r.stdout.decode(), r.stderr.decode(), r.exit_code

    def stats(self, cid):
        return self.call("ContainerStats", self.api.ContainerStatsRequest(container_id=cid)).stats

    def stop(self, cid, timeout):
        self.call("StopContainer", self.api.StopContainerRequest(container_id=cid, timeout=timeout))

    def stop_sandbox(self):
        self.call("StopPodSandbox", self.api.StopPodSandboxRequest(pod_sandbox_id=self.pod_id))

    def remove_sandbox(self):
        self.call("RemovePodSandbox", self.api.RemovePodSandboxRequest(pod_sandbox_id=self.pod_id))
        self.pod_id = None

    def log(self, name):
        out = []
        try:
            with open(os.path.join(self.a.log_dir, f"{name}.log"), encoding="utf-8") as f:
                for line in f:
                    parts = line.rstrip("\n").split(" ", 3)
                    if len(parts) == 4 and parts[1] == "stdout":
                        out.append(parts[3])
        except FileNotFoundError:
            pass
        return " ".join(out)

    def remove(self, cid):
        self.call("RemoveContainer", self.api.RemoveContainerRequest(container_id=cid))
        self.ctrs.remove(cid)

    def cleanup(self):
        for cid in list(self.ctrs):
            try:
                self.remove(cid)
            except grpc.RpcError as e:
                print(f"# RemoveContainer {cid}: {e.details()}", file=sys.stderr)
        if self.pod_id:
            for m in (self.stop_sandbox, self.remove_sandbox):
                try:
                    m()
                except grpc.RpcError as e:
                    print(f"# {m.__name__}: {e.details()}", file=sys.stderr)
            self.pod_id = None


def moat_state(a, cid):
    out = subprocess.run([a.moat, "--root", a.moat_root, "state", cid], capture_output=True,
                         text=True, check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def record(a, cid):
    try:
        with open(os.path.join(a.moat_root, cid, "state.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def sandboxes(pod_id):
    """Pids of runsc sandbox processes whose last argument is the pod's id."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if argv and argv[0] == b"runsc-sandbox" and argv[-1] == pod_id.encode():
            pids.append(int(p))
    return pids


def rss_kb(pid):
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def scenario(a, pod, c):
    api = pod.api
    CONTAINER_RUNNING = api.ContainerState.Value("CONTAINER_RUNNING")
    CONTAINER_EXITED = api.ContainerState.Value("CONTAINER_EXITED")
    SANDBOX_READY = api.PodSandboxState.Value("SANDBOX_READY")
    t0 = time.monotonic()
    pod_id = pod.run()
    c.check("RunPodSandbox through handler " + a.handler, pod.sandbox_state() == SANDBOX_READY)
    rec = record(a, pod_id) or {}
    c.check("moat recorded the pod sandbox (gVisor, role sandbox)",
            rec.get("backend", {}).get("pod") == {"role": "sandbox"}, json.dumps(rec)[:300])

    long_id = pod.create("c1", ["sh", "-c", "echo hi-c1; exec sleep 600"])
    pod.start(long_id)
    state, _ = pod.wait_state(long_id, CONTAINER_RUNNING)
    c.check("container c1 created and started in the pod: RUNNING", state == CONTAINER_RUNNING,
            f"state {state}")
    short_id = pod.create("c2", ["sh", "-c", "echo hi-c2; sleep 1; exit 3"])
    pod.start(short_id)
    c.figure("pod sandbox + 2 containers created and started (s)",
             f"{time.monotonic() - t0:.2f}")

    rec = record(a, long_id) or {}
    c.check("moat recorded c1 as a container of the pod's sandbox",
            rec.get("backend", {}).get("pod") == {"role": "container", "sandbox": pod_id},
            json.dumps(rec.get("backend"))[:300])
    sb = sandboxes(pod_id)
    c.check("one runsc sandbox process for the whole pod", len(sb) == 1, f"sandboxes {sb}")
    st = moat_state(a, long_id) or {}
    waiter = st.get("pid", 0)
    ok = waiter > 0 and waiter not in sb
    c.check("moat state c1: running, pid is its waiter, not the sandbox",
            ok and st.get("status") == "running", f"state {st} sandbox {sb}")
    if ok:
        c.figure("waiter RSS (kB)", rss_kb(waiter))
        with open(f"/proc/{waiter}/status", encoding="utf-8") as f:
            ppid = next(int(line.split()[1]) for line in f if line.startswith("PPid:"))
        with open(f"/proc/{ppid}/comm", encoding="utf-8") as f:
            parent = f.read().strip()
        c.check("the waiter's parent is the shim", parent.startswith("containerd-shim"),
                f"parent {ppid} {parent}")

    # What the runc shim reports for an app container: it reads the cgroup of the pid in
    # the pid file, the waiter's (a figure, not a check: docs/gvisor.md, "Resources").
    working_set = pod.stats(long_id).memory.working_set_bytes.value
    c.figure("ContainerStats c1 memory working set (kB)", working_set // 1024)
    out, err, code = pod.exec_sync(long_id, ["sh", "-c",
                                             f"echo exec-out; [ \"$(uname -r)\" != \"{os.uname().release}\" ]"
                                             " && echo gvisor-kernel; exit 4"])
    c.check("ExecSync into c1: stdout, exit code 4, gVisor's kernel",
            code == 4 and out.split() == ["exec-out", "gvisor-kernel"],
            f"code {code} out {out!r} err {err!r}")

    state, code = pod.wait_state(short_id, CONTAINER_EXITED)
    c.check("c2 exited with its own status 3 (the waiter's exit), output in its log",
            state == CONTAINER_EXITED and code == 3 and pod.log("c2") == "hi-c2",
            f"state {state} code {code} log {pod.log('c2')!r}")
    c.check("the sandbox outlived c2", pod.sandbox_state() == SANDBOX_READY
            and sandboxes(pod_id) == sb)

    pod.remove(short_id)
    c.check("RemoveContainer c2: moat's record gone",
            record(a, short_id) is None and not os.path.exists(
                os.path.join(a.moat_root, "@runsc", f"{short_id}_sandbox:{pod_id}.state")))
    state, _ = pod.status(long_id)
    out, _, code = pod.exec_sync(long_id, ["echo", "still-here"])
    c.check("after RemoveContainer c2: the sandbox and c1 run on",
            state == CONTAINER_RUNNING and out.strip() == "still-here" and sandboxes(pod_id) == sb,
            f"state {state} out {out!r} code {code}")
    c.check("c1's output in its log", pod.log("c1") == "hi-c1", repr(pod.log("c1")))

    pod.stop(long_id, 5)
    state, code = pod.status(long_id)
    # sleep as PID 1 dies of TERM under gVisor (runc: ignored, then KILL).
    c.check("StopContainer c1: exited 143", state == CONTAINER_EXITED and code == 143,
            f"state {state} code {code}")
    c.check("waiter of c1 gone", waiter <= 0 or not os.path.exists(f"/proc/{waiter}")
            or open(f"/proc/{waiter}/stat").read().split(") ")[1][0] in "ZX")

    pod.stop_sandbox()
    c.check("StopPodSandbox: no runsc sandbox left", not sandboxes(pod_id))
    pod.remove(long_id)
    pod.remove_sandbox()
    # @cache: what the runsc binary supports (moat's src/gvisor/probe.rs), not a record.
    left = [e for e in os.listdir(a.moat_root) if e not in ("@runsc", "@cache")] \
        if os.path.isdir(a.moat_root) else []
    runsc_left = os.listdir(os.path.join(a.moat_root, "@runsc")) if os.path.isdir(
        os.path.join(a.moat_root, "@runsc")) else []
    c.check("RemovePodSandbox: no record and no runsc state left", not left and not runsc_left,
            f"records {left} runsc {runsc_left}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("--socket", "--handler", "--image", "--log-dir", "--moat", "--moat-root"):
        ap.add_argument(f, required=True)
    ap.add_argument("--proto", required=True, help="k8s.io/cri-api's pkg/apis/runtime/v1/api.proto")
    ap.add_argument("--proto-path", action="append", default=None,
                    help="where api.proto's imports are (default /usr/share/gocode/src)")
    ap.add_argument("--cgroup-parent", default="")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    c = Checks()
    with tempfile.TemporaryDirectory(prefix="cri-api.") as gen:
        api, api_grpc = load_cri_api(a.proto, a.proto_path or ["/usr/share/gocode/src"], gen)
        pod = Pod(a, api, api_grpc)
        try:
            scenario(a, pod, c)
        except grpc.RpcError as e:
            c.check("CRI calls", False, f"{e.code().name}: {e.details()}")
        finally:
            pod.cleanup()
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
