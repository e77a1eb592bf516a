#!/usr/bin/python3
"""Hold one CRI pod in the network world while the caller attacks it (scripts/e2e-egress, findings).

Usage: cri_hold_pod.py --socket SOCK --handler NAME --image REF --proto API_PROTO
                       --cgroup-parent BASE --log-dir DIR --world TAG --suffix S
                       --networld PATH --dns ADDR --pod-list LIST --ready FILE --release FILE
                       [--proto-path DIR]... [--timeout S] [--hold S]

The pod as a kubelet makes it: RunPodSandbox through handler NAME with the pod annotation
moat.egress=LIST (the handler's pod_annotations pass it on) and DNS servers [ADDR]; its
network namespace joins the world as TAG-S (`networld adopt`: the world's guard first, then the
link) before any container exists; then one container `app` of IMAGE (its probes are in the
image) keeping CAP_NET_RAW (added in its security context, as a pod spec's
`capabilities.add: [NET_RAW]` does). Writes FILE (--ready) as JSON {"pod": ID, "app": ID} and
waits until FILE (--release) exists (at most --hold seconds); the caller execs into the
container meanwhile. Then, whatever happened, the pod is stopped and removed and the world's
name for its namespace deleted. Exit status 0 when the pod came up.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

import grpc

from cri import cgroup_mounts, load_cri_api


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in ("--socket", "--handler", "--image", "--proto", "--cgroup-parent", "--log-dir",
              "--world", "--suffix", "--networld", "--dns", "--pod-list", "--ready", "--release"):
        ap.add_argument(f, required=True)
    ap.add_argument("--proto-path", action="append", default=None)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--hold", type=float, default=600)
    a = ap.parse_args()
    os.makedirs(a.log_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cri-api.") as gen:
        api, api_grpc = load_cri_api(a.proto, a.proto_path or ["/usr/share/gocode/src"], gen)
        rt = api_grpc.RuntimeServiceStub(grpc.insecure_channel("unix://" + a.socket))

        def call(method, req):
            return getattr(rt, method)(req, timeout=a.timeout)

        uid = str(uuid.uuid4())
        m = api.NamespaceMode
        ns = api.NamespaceOption(network=m.Value("POD"), pid=m.Value("CONTAINER"), ipc=m.Value("POD"))
        pod_cfg = api.PodSandboxConfig(
            metadata=api.PodSandboxMetadata(name="moat-find-pod", uid=uid, namespace="moat-e2e"),
            hostname="moat-find-pod", log_directory=a.log_dir,
            annotations={"moat.egress": a.pod_list},
            dns_config=api.DNSConfig(servers=[a.dns]),
            linux=api.LinuxPodSandboxConfig(
                cgroup_parent=f"{a.cgroup_parent.rstrip('/')}/pod{uid}",
                security_context=api.LinuxSandboxSecurityContext(namespace_options=ns)))
        pod_id, app = None, None
        rc = 1
        try:
            pod_id = call("RunPodSandbox", api.RunPodSandboxRequest(
                config=pod_cfg, runtime_handler=a.handler)).pod_sandbox_id
            st = call("PodSandboxStatus", api.PodSandboxStatusRequest(pod_sandbox_id=pod_id, verbose=True))
            pause = json.loads(st.info["info"])["pid"]
            r = subprocess.run([a.networld, "adopt", a.world, a.suffix, str(pause)],
                               capture_output=True, text=True, check=False)
            if r.returncode != 0:
                print(f"networld adopt: {r.stderr.strip()}", file=sys.stderr)
                return 1
            cfg = api.ContainerConfig(
                metadata=api.ContainerMetadata(name="app"),
                image=api.ImageSpec(image=a.image),
                command=["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 0.2; done"],
                log_path="app.log",
                linux=api.LinuxContainerConfig(security_context=api.LinuxContainerSecurityContext(
                    namespace_options=ns,
                    capabilities=api.Capability(add_capabilities=["NET_RAW"]))))
            app = call("CreateContainer", api.CreateContainerRequest(
                pod_sandbox_id=pod_id, config=cfg, sandbox_config=pod_cfg)).container_id
            call("StartContainer", api.StartContainerRequest(container_id=app))
            with open(a.ready + ".tmp", "w", encoding="utf-8") as f:
                json.dump({"pod": pod_id, "app": app}, f)
            os.rename(a.ready + ".tmp", a.ready)
            rc = 0
            deadline = time.monotonic() + a.hold
            while not os.path.exists(a.release) and time.monotonic() < deadline:
                time.sleep(0.1)
        except grpc.RpcError as e:
            print(f"CRI: {e.code().name}: {e.details()}", file=sys.stderr)
        finally:
            reqs = []
            if app:
                reqs += [("StopContainer", api.StopContainerRequest(container_id=app, timeout=2)),
                         ("RemoveContainer", api.RemoveContainerRequest(container_id=app))]
            if pod_id:
                reqs += [("StopPodSandbox", api.StopPodSandboxRequest(pod_sandbox_id=pod_id)),
                         ("RemovePodSandbox", api.RemovePodSandboxRequest(pod_sandbox_id=pod_id))]
            for method, req in reqs:
                try:
                    call(method, req)
                except grpc.RpcError as e:
                    print(f"# {method}: {e.code().name}: {e.details()}", file=sys.stderr)
                    rc = 1
            subprocess.run(["ip", "netns", "del", f"{a.world}-{a.suffix}"], capture_output=True, check=False)
            for mnt in set(cgroup_mounts().values()):
                try:  # as a kubelet removes the pod cgroup
                    os.rmdir(f"{mnt}{a.cgroup_parent.rstrip('/')}/pod{uid}")
                except OSError:
                    pass
    return rc


if __name__ == "__main__":
    sys.exit(main())
