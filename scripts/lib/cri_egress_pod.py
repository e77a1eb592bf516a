#!/usr/bin/python3
"""Drive one pod with egress lists through containerd's CRI API (scripts/e2e-egress, part containerd).

Usage: cri_egress_pod.py --socket SOCK --handler NAME --image REF --proto API_PROTO
                         --cgroup-parent BASE --log-dir DIR --moat-root DIR
                         --world TAG --networld PATH --netprobe PATH --dns ADDR
                         --pod-list LIST --side-list LIST
                         --baseline SCRIPT --app SCRIPT --side-before SCRIPT --side SCRIPT
                         [--proto-path DIR]... [--timeout S] [--side-refused TEXT]

The pod as a kubelet makes it: RunPodSandbox with the pod annotation moat.egress=POD-LIST
(the handler's pod_annotations pass it to every container of the pod, the sandbox's too) and
DNS servers [ADDR]; its network namespace (CNI: scripts/lib/cni-podnet, a veth leading
nowhere) then joins the private world as TAG-cri (`networld adopt`: the world's guard in it
first, then the link), before any container exists. Then two containers: `app` with the
pod's list, `side` with a container annotation moat.egress=SIDE-LIST (container_annotations:
it replaces the pod's for that container; with --side-refused, a gVisor pod's handler, its
create must fail with TEXT instead: the pod is one sentry). Each gets netprobe (tests/support/netprobe.c)
bound read-only at /bin/netprobe.

Prints, for the caller to judge with the same checks as its other parts:
  PROBE<TAB>LABEL<TAB>OUTPUT   netprobe's lines (newlines as \\n): `baseline` (SCRIPT run on
                               the host in the pod's namespace, no container's programs),
                               `app`, `side-before` (before any lookup), `side` (ExecSync)
  PASS<TAB>NAME / FAIL<TAB>NAME<TAB>DETAIL   the pod's own steps and the leftovers check
Everything the pod made is removed before exit, also on error: the pod stopped and removed,
the world's name for its namespace deleted, the pod cgroup removed. Exit status 0 when every
check passed.

The CRI messages come from scripts/lib/cri.py's load_cri_api (the CRI API's api.proto
compiled at run time).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import uuid

import grpc

from cri import cgroup_dirs, cgroup_mounts, load_cri_api, mounts_naming, pid_alive


class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            print(f"PASS\t{name}", flush=True)
        else:
            self.failed += 1
            detail = str(detail).replace("\n", "\\n")[:600]
            print(f"FAIL\t{name}\t{detail}", flush=True)
        return cond

    @staticmethod
    def probe(label, out):
        print(f"PROBE\t{label}\t" + out.strip().replace("\n", "\\n"), flush=True)


class Pod:
    def __init__(self, a, api, api_grpc):
        self.a, self.api = a, api
        self.channel = grpc.insecure_channel("unix://" + a.socket)
        self.rt = api_grpc.RuntimeServiceStub(self.channel)
        self.pod_id = None
        self.ctrs = {}
        self.uid = str(uuid.uuid4())
        self.pod_cgroup = f"{a.cgroup_parent.rstrip('/')}/pod{self.uid}"
        m = api.NamespaceMode
        self.ns = api.NamespaceOption(network=m.Value("POD"), pid=m.Value("CONTAINER"),
                                      ipc=m.Value("POD"))
        self.config = api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name="moat-egress-pod", uid=self.uid,
                                            namespace="moat-e2e"),
            hostname="moat-egress-pod",
            log_directory=a.log_dir,
            annotations={"moat.egress": a.pod_list},
            dns_config=api.DNSConfig(servers=[a.dns]),
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=self.pod_cgroup,
                security_context=api.LinuxSandboxSecurityContext(namespace_options=self.ns)))

    def call(self, method, request, timeout=None):
        return getattr(self.rt, method)(request, timeout=timeout or self.a.timeout)

    def info(self, resp):
        return json.loads(resp.info["info"])

    def run_sandbox(self):
        r = self.call("RunPodSandbox", self.api.RunPodSandboxRequest(
            config=self.config, runtime_handler=self.a.handler))
        self.pod_id = r.pod_sandbox_id
        st = self.call("PodSandboxStatus", self.api.PodSandboxStatusRequest(
            pod_sandbox_id=self.pod_id, verbose=True))
        return st.status.state, self.info(st)

    def create_start(self, name, annotations):
        api = self.api
        cfg = api.ContainerConfig(
            metadata=api.ContainerMetadata(name=name),
            image=api.ImageSpec(image=self.a.image),
            command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"],
            log_path=f"{name}.log",
            annotations=annotations,
            mounts=[api.Mount(container_path="/bin/netprobe", host_path=self.a.netprobe,
                              readonly=True)],
            linux=api.LinuxContainerConfig(
                security_context=api.LinuxContainerSecurityContext(namespace_options=self.ns)))
        r = self.call("CreateContainer", api.CreateContainerRequest(
            pod_sandbox_id=self.pod_id, config=cfg, sandbox_config=self.config))
        cid = r.container_id
        self.ctrs[name] = cid
        self.call("StartContainer", api.StartContainerRequest(container_id=cid))
        st = self.call("ContainerStatus", api.ContainerStatusRequest(container_id=cid, verbose=True))
        return cid, st.status.state, self.info(st)

    def exec_sync(self, cid, script, timeout=30):
        r = self.call("ExecSync", self.api.ExecSyncRequest(container_id=cid,
                                                           cmd=["sh", "-c", script],
                                                           timeout=timeout),
                      timeout=timeout + self.a.timeout)
        return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")

    def cleanup(self):
        api = self.api
        for cid in list(self.ctrs.values()):
            for m, req in (("StopContainer", api.StopContainerRequest(container_id=cid, timeout=2)),
                           ("RemoveContainer", api.RemoveContainerRequest(container_id=cid))):
                try:
                    self.call(m, req)
                except grpc.RpcError as e:
                    print(f"# {m} {cid}: {e.code().name}: {e.details()}", file=sys.stderr)
        self.ctrs.clear()
        if self.pod_id:
            for m, req in (("StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=self.pod_id)),
                           ("RemovePodSandbox", api.RemovePodSandboxRequest(pod_sandbox_id=self.pod_id))):
                try:
                    self.call(m, req)
                except grpc.RpcError as e:
                    print(f"# {m}: {e.code().name}: {e.details()}", file=sys.stderr)
            self.pod_id = None


def forwarder_of(a, cid):
    """moat's record of CID's DNS forwarder ({pid, start, addr}), or None."""
    try:
        with open(os.path.join(a.moat_root, cid, "dns.json"), encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def scenario(a, pod, c, seen):
    api = pod.api
    state, info = pod.run_sandbox()
    seen["ids"].append(pod.pod_id)
    pause = info["pid"]
    seen["pids"].append(pause)
    seen["cgroups"].update(cgroup_dirs(pause).values())
    seen["netns"] = next((n.get("path") for n in info["runtimeSpec"]["linux"]["namespaces"]
                          if n["type"] == "network"), None)
    if not c.check("RunPodSandbox through handler " + a.handler + ", pod annotation moat.egress",
                   state == api.PodSandboxState.Value("SANDBOX_READY")
                   and info["runtimeSpec"].get("annotations", {}).get("moat.egress") == a.pod_list,
                   f"state {state}, sandbox annotations {info['runtimeSpec'].get('annotations')}"):
        return
    # The world's guard goes into the namespace before its link does (networld adopt).
    r = subprocess.run([a.networld, "adopt", a.world, "cri", str(pause)], capture_output=True,
                       text=True, check=False)
    seen["adopted"] = r.returncode == 0
    if not c.check("the pod's network namespace joined the world (guard first, then the link)",
                   r.returncode == 0, r.stderr.strip()):
        return
    r = subprocess.run(["ip", "netns", "exec", f"{a.world}-cri", "sh", "-c", a.baseline],
                       capture_output=True, text=True, check=False,
                       env=dict(os.environ, PATH=os.path.dirname(a.netprobe) + ":" + os.environ["PATH"]))
    c.probe("baseline", r.stdout + r.stderr)

    running = api.ContainerState.Value("CONTAINER_RUNNING")
    for name, ann, want in (("app", {}, a.pod_list),
                            ("side", {"moat.egress": a.side_list}, a.side_list)):
        if name == "side" and a.side_refused:
            # A gVisor pod is one sentry: a container's own list other than the pod's is
            # refused at create, naming the pod's.
            try:
                pod.create_start(name, ann)
                c.check("side (its own list, in a gVisor pod) refused at CreateContainer", False,
                        "created")
            except grpc.RpcError as e:
                c.check("side (its own list, in a gVisor pod) refused at CreateContainer, naming "
                        "the pod sandbox's list",
                        a.side_refused in e.details() and a.pod_list.split("/")[-1] in e.details(),
                        e.details())
            pod.ctrs.pop(name, None)
            break
        cid, state, cinfo = pod.create_start(name, ann)
        seen["ids"].append(cid)
        seen["pids"].append(cinfo["pid"])
        seen["cgroups"].update(cgroup_dirs(cinfo["pid"]).values())
        got = cinfo["runtimeSpec"].get("annotations", {}).get("moat.egress")
        c.check(f"{name} running, its spec's moat.egress the {'container' if ann else 'pod'}'s",
                state == running and got == want, f"state {state}, moat.egress {got!r}")

    c.probe("app", pod.exec_sync(pod.ctrs["app"], a.app))
    if a.side_refused:
        return
    c.probe("side-before", pod.exec_sync(pod.ctrs["side"], a.side_before))
    c.probe("side", pod.exec_sync(pod.ctrs["side"], a.side))
    fw = forwarder_of(a, pod.ctrs["side"])
    if fw:
        seen["pids"].append(fw["pid"])
    resolv = pod.exec_sync(pod.ctrs["side"], "cat /etc/resolv.conf")
    c.check("side (a list with a name): its own DNS forwarder, named by its resolv.conf",
            fw is not None and f"nameserver {fw.get('addr')}" in resolv and a.dns not in resolv,
            f"record {fw}, resolv.conf {resolv!r}")
    c.check("app (no name in its list): no forwarder", forwarder_of(a, pod.ctrs["app"]) is None)


def leftovers(a, pod, c, seen):
    found = [f"process {p}" for p in seen["pids"] if pid_alive(p)]
    for path in glob.glob(os.path.join(a.moat_root, "**"), recursive=True):
        if any(i in path for i in seen["ids"]):
            found.append(f"runtime state {path}")
    mine = [d for d in sorted(seen["cgroups"]) if pod.pod_cgroup in d]
    found += [f"cgroup {d}" for d in mine if os.path.isdir(d) and not d.endswith(pod.pod_cgroup)]
    found += [f"mount {m}" for m in mounts_naming(seen["ids"])]
    if seen["netns"] and os.path.exists(seen["netns"]):
        found.append(f"netns {seen['netns']}")
    if os.path.exists(f"/run/netns/{a.world}-cri"):
        found.append(f"netns /run/netns/{a.world}-cri")
    for mnt in set(cgroup_mounts().values()):
        d = mnt + pod.pod_cgroup
        if os.path.isdir(d):
            try:
                os.rmdir(d)  # as a kubelet removes the pod cgroup; EBUSY while anything is in it
            except OSError as e:
                found.append(f"pod cgroup {d}: {e.strerror}")
    c.check("nothing left: no process (forwarder included), moat state, cgroup, mount or netns",
            not found and bool(mine), "; ".join(found) or f"no cgroup seen: {sorted(seen['cgroups'])}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("--socket", "--handler", "--image", "--proto", "--cgroup-parent", "--log-dir",
              "--moat-root", "--world", "--networld", "--netprobe", "--dns", "--pod-list",
              "--side-list", "--baseline", "--app", "--side-before", "--side"):
        ap.add_argument(f, required=True)
    ap.add_argument("--proto-path", action="append", default=None,
                    help="where api.proto's imports are (default /usr/share/gocode/src)")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--side-refused", default="",
                    help="side's CreateContainer must fail with this text (a gVisor pod)")
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    c = Checks()
    seen = {"ids": [], "pids": [], "cgroups": set(), "netns": None, "adopted": False}
    with tempfile.TemporaryDirectory(prefix="cri-api.") as gen:
        api, api_grpc = load_cri_api(a.proto, a.proto_path or ["/usr/share/gocode/src"], gen)
        pod = Pod(a, api, api_grpc)
        try:
            scenario(a, pod, c, seen)
        except grpc.RpcError as e:
            c.check("CRI calls", False, f"{e.code().name}: {e.details()}")
        finally:
            pod.cleanup()
            # The world's name for the pod's namespace held it: it goes with the pod.
            subprocess.run(["ip", "netns", "del", f"{a.world}-cri"], capture_output=True, check=False)
            leftovers(a, pod, c, seen)
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
