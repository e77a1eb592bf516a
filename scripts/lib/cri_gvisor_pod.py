#!/usr/bin/python3
"""Drive one gVisor pod (a sandbox and two containers) through containerd's CRI API.

Usage: cri_gvisor_pod.py --socket SOCK --handler NAME --image REF --log-dir DIR
                         --moat BIN --moat-root DIR [--cgroup-parent CG] [--timeout S]

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

Self-contained (its own few lines of protobuf wire format), so that it does not depend
on scripts/lib/cri.py's internals; field numbers from the runtime.v1 api.proto.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import grpc

SERVICE = "/runtime.v1.RuntimeService/"

CONTAINER_RUNNING, CONTAINER_EXITED = 1, 2
SANDBOX_READY = 0


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def f_int(num, value):
    return _varint(num << 3) + _varint(value) if value else b""


def f_bytes(num, value):
    if isinstance(value, str):
        value = value.encode()
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def decode(buf):
    fields, i = {}, 0

    def varint():
        nonlocal i
        shift = result = 0
        while True:
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    while i < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            val = varint()
        elif wire == 1:
            val, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n = varint()
            val, i = buf[i:i + n], i + n
        elif wire == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(num, []).append(val)
    return fields


def first(fields, num, default=None):
    return fields.get(num, [default])[0]


def int32(v):
    return v - (1 << 64) if v >= 1 << 63 else v


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
    def __init__(self, a):
        self.a = a
        self.channel = grpc.insecure_channel("unix://" + a.socket)
        self.pod_id = None
        self.ctrs = []
        uid = f"moat-e2e-gv-{os.getpid()}"
        meta = f_bytes(1, "moat-gv-pod") + f_bytes(2, uid) + f_bytes(3, "default")
        # A kubelet's defaults: the pod's network (CNI) and ipc, a pid namespace per
        # container (NamespaceOption.pid = CONTAINER).
        security = f_bytes(2, f_bytes(1, f_int(2, 1)))
        linux = (f_bytes(1, a.cgroup_parent) if a.cgroup_parent else b"") + security
        self.config = f_bytes(1, meta) + f_bytes(3, a.log_dir) + f_bytes(8, linux)

    def call(self, method, request, timeout=None):
        rpc = self.channel.unary_unary(SERVICE + method)
        return decode(rpc(request, timeout=timeout or self.a.timeout))

    def run(self):
        r = self.call("RunPodSandbox", f_bytes(1, self.config) + f_bytes(2, self.a.handler))
        self.pod_id = first(r, 1).decode()
        return self.pod_id

    def sandbox_state(self):
        st = decode(first(self.call("PodSandboxStatus", f_bytes(1, self.pod_id)), 1, b""))
        return first(st, 3, 0)

    def create(self, name, argv):
        cfg = (f_bytes(1, f_bytes(1, name)) + f_bytes(2, f_bytes(1, self.a.image))
               + b"".join(f_bytes(3, x) for x in argv) + f_bytes(11, f"{name}.log")
               + f_bytes(15, b""))
        r = self.call("CreateContainer", f_bytes(1, self.pod_id) + f_bytes(2, cfg)
                      + f_bytes(3, self.config))
        cid = first(r, 1).decode()
        self.ctrs.append(cid)
        return cid

    def start(self, cid):
        self.call("StartContainer", f_bytes(1, cid))

    def status(self, cid):
        st = decode(first(self.call("ContainerStatus", f_bytes(1, cid)), 1, b""))
        return first(st, 3, 0), int32(first(st, 7, 0))

    def wait_state(self, cid, want, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            state, code = self.status(cid)
            if state == want or time.monotonic() > deadline:
                return state, code
            time.sleep(0.1)

    def exec_sync(self, cid, argv):
        r = self.call("ExecSync", f_bytes(1, cid) + b"".join(f_bytes(2, x) for x in argv)
                      + f_int(3, 20))
        return (first(r, 1, b"").decode(), first(r, 2, b"").decode(), int32(first(r, 3, 0)))

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
        self.call("RemoveContainer", f_bytes(1, cid))
        self.ctrs.remove(cid)

    def cleanup(self):
        for cid in list(self.ctrs):
            try:
                self.remove(cid)
            except grpc.RpcError as e:
                print(f"# RemoveContainer {cid}: {e.details()}", file=sys.stderr)
        if self.pod_id:
            for m in ("StopPodSandbox", "RemovePodSandbox"):
                try:
                    self.call(m, f_bytes(1, self.pod_id))
                except grpc.RpcError as e:
                    print(f"# {m}: {e.details()}", file=sys.stderr)
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
    stats = decode(first(pod.call("ContainerStats", f_bytes(1, long_id)), 1, b""))
    memory = decode(first(stats, 3, b""))
    working_set = first(decode(first(memory, 2, b"")), 1, 0)
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

    pod.call("StopContainer", f_bytes(1, long_id) + f_int(2, 5))
    state, code = pod.status(long_id)
    # sleep as PID 1 dies of TERM under gVisor (runc: ignored, then KILL).
    c.check("StopContainer c1: exited 143", state == CONTAINER_EXITED and code == 143,
            f"state {state} code {code}")
    c.check("waiter of c1 gone", waiter <= 0 or not os.path.exists(f"/proc/{waiter}")
            or open(f"/proc/{waiter}/stat").read().split(") ")[1][0] in "ZX")

    pod.call("StopPodSandbox", f_bytes(1, pod_id))
    c.check("StopPodSandbox: no runsc sandbox left", not sandboxes(pod_id))
    pod.remove(long_id)
    pod.call("RemovePodSandbox", f_bytes(1, pod_id))
    pod.pod_id = None
    left = [e for e in os.listdir(a.moat_root) if e != "@runsc"] if os.path.isdir(a.moat_root) else []
    runsc_left = os.listdir(os.path.join(a.moat_root, "@runsc")) if os.path.isdir(
        os.path.join(a.moat_root, "@runsc")) else []
    c.check("RemovePodSandbox: no record and no runsc state left", not left and not runsc_left,
            f"records {left} runsc {runsc_left}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("--socket", "--handler", "--image", "--log-dir", "--moat", "--moat-root"):
        ap.add_argument(f, required=True)
    ap.add_argument("--cgroup-parent", default="")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    c = Checks()
    pod = Pod(a)
    try:
        scenario(a, pod, c)
    except grpc.RpcError as e:
        c.check("CRI calls", False, f"{e.code().name}: {e.details()}")
    finally:
        pod.cleanup()
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
