#!/usr/bin/python3
"""Run one container in one pod through the CRI API of a containerd socket.

Usage: cri.py --socket SOCK --handler NAME --image REF --log-dir DIR
              [--cgroup-parent CG] [--timeout S] -- CMD [ARG...]

Used by scripts/e2e-containerd to drive a runtime handler configured in
config.toml (the CRI plugin is the only containerd component that reads the
`runtimes.<name>` table). Debian 12 packages no crictl, so this speaks the
runtime.v1 CRI gRPC API itself: python3-grpcio for transport and a small
hand-written protobuf encoder/decoder for the handful of messages needed.

The pod uses the host network namespace (no CNI needed); the container runs
CMD, and the script prints `exit_code=N stdout=TEXT` (stdout lines joined by
spaces, taken from the CRI log file). Pod and container are removed before
exit, also on error. Exit status 0 when the CRI calls succeeded, whatever N is.
"""

import argparse
import os
import sys
import time

import grpc

SERVICE = "/runtime.v1.RuntimeService/"

# --- protobuf wire format (just what the messages below need) ---------------


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_int(num, value):
    """A varint field (int32/int64/uint32/bool/enum, non-negative)."""
    return _varint(num << 3) + _varint(value) if value else b""


def f_bytes(num, value):
    """A length-delimited field: string (str) or embedded message (bytes)."""
    if isinstance(value, str):
        value = value.encode()
    return _varint(num << 3 | 2) + _varint(len(value)) + value


def f_strings(num, values):
    return b"".join(f_bytes(num, v) for v in values)


def decode(buf):
    """Decode one message level into {field: [values]} (ints or raw bytes)."""
    fields, i = {}, 0

    def read_varint():
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
        key = read_varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            val = read_varint()
        elif wire == 1:
            val, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n = read_varint()
            val, i = buf[i:i + n], i + n
        elif wire == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(num, []).append(val)
    return fields


def first(fields, num, default=None):
    return fields.get(num, [default])[0]


# --- CRI messages (field numbers from runtime.v1 api.proto) ------------------

NAMESPACE_MODE_NODE = 2
CONTAINER_EXITED = 2


def pod_sandbox_config(name, uid, log_dir, cgroup_parent):
    metadata = f_bytes(1, name) + f_bytes(2, uid) + f_bytes(3, "default")
    namespace_options = f_int(1, NAMESPACE_MODE_NODE)           # network = NODE
    security_context = f_bytes(1, namespace_options)
    linux = (f_bytes(1, cgroup_parent) if cgroup_parent else b"") + f_bytes(2, security_context)
    return f_bytes(1, metadata) + f_bytes(3, log_dir) + f_bytes(8, linux)


def container_config(name, image, argv, log_path):
    return (f_bytes(1, f_bytes(1, name))                        # metadata.name
            + f_bytes(2, f_bytes(1, image))                     # image.image
            + f_strings(3, argv)                                # command
            + f_bytes(11, log_path)
            + f_bytes(15, b""))                                 # linux (empty)


class Cri:
    def __init__(self, socket, timeout):
        self.channel = grpc.insecure_channel("unix://" + socket)
        self.timeout = timeout

    def call(self, method, request):
        rpc = self.channel.unary_unary(SERVICE + method)        # raw bytes in/out
        return decode(rpc(request, timeout=self.timeout))


def parse_cri_log(path):
    """CRI log lines are `TIMESTAMP STREAM P|F TEXT`; return stdout text lines."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(" ", 3)
                if len(parts) == 4 and parts[1] == "stdout":
                    out.append(parts[3])
    except FileNotFoundError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--handler", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--cgroup-parent", default="")
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("argv", nargs="+")
    a = ap.parse_args()

    os.makedirs(a.log_dir, exist_ok=True)
    cri = Cri(a.socket, a.timeout)
    version = cri.call("Version", f_bytes(1, "v1"))
    print(f"# CRI {first(version, 2, b'').decode()} {first(version, 3, b'').decode()}",
          file=sys.stderr)

    uid = f"moat-e2e-{os.getpid()}"
    sandbox_cfg = pod_sandbox_config("moat-e2e", uid, a.log_dir, a.cgroup_parent)
    pod_id = ctr_id = None
    try:
        resp = cri.call("RunPodSandbox", f_bytes(1, sandbox_cfg) + f_bytes(2, a.handler))
        pod_id = first(resp, 1).decode()
        resp = cri.call("CreateContainer",
                        f_bytes(1, pod_id)
                        + f_bytes(2, container_config("c0", a.image, a.argv, "c0.log"))
                        + f_bytes(3, sandbox_cfg))
        ctr_id = first(resp, 1).decode()
        cri.call("StartContainer", f_bytes(1, ctr_id))

        deadline = time.monotonic() + a.timeout
        while True:
            status = decode(first(cri.call("ContainerStatus", f_bytes(1, ctr_id)), 1, b""))
            if first(status, 3, 0) == CONTAINER_EXITED:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"container {ctr_id} did not exit within {a.timeout}s")
            time.sleep(0.1)
        code = first(status, 7, 0)
        if code >= 1 << 31:                                     # int32 sent as varint
            code -= 1 << 64
        stdout = parse_cri_log(os.path.join(a.log_dir, "c0.log"))
        print(f"exit_code={code} stdout={' '.join(stdout)}")
        return 0
    except grpc.RpcError as e:
        print(f"cri.py: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    finally:
        for method, ident in (("RemoveContainer", ctr_id), ("StopPodSandbox", pod_id),
                              ("RemovePodSandbox", pod_id)):
            if ident:
                try:
                    cri.call(method, f_bytes(1, ident))
                except grpc.RpcError as e:
                    print(f"cri.py: {method}: {e.code().name}: {e.details()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
