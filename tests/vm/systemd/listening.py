#!/usr/bin/env python3
"""The listening-socket audit in the systemd guest (docs/security.md, "Listening sockets").

listening.py snapshot            the host namespace's listening sockets, one per line
listening.py audit BEFORE PID ROOT
    every socket listening after a create that was not before, in the host's namespace
    and in the namespace of PID (the container's init): each must be in the documented
    table (the forwarder's 127.*:53 in the container's own namespace) or refuse uid 65534.
    Prints one line per socket ("ok ..." / "FAIL ..."); exits 1 on any FAIL.
"""
import os
import socket
import sys


def addr(hexaddr, v6):
    ip, port = hexaddr.split(":")
    raw = bytes.fromhex(ip)
    # /proc/net/{tcp,udp}*: each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    fam = socket.AF_INET6 if v6 else socket.AF_INET
    return socket.inet_ntop(fam, raw), int(port, 16)


def listening(pid):
    base = f"/proc/{pid}/net"
    out = set()
    with open(f"{base}/unix") as f:
        for line in f.read().splitlines()[1:]:
            w = line.split()
            # Flags __SO_ACCEPTCON: a listening stream or seqpacket socket; a name to reach.
            if len(w) >= 8 and w[3] == "00010000":
                out.add(("unix", w[7]))
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        with open(f"{base}/{proto}") as f:
            for line in f.read().splitlines()[1:]:
                w = line.split()
                if proto.startswith("tcp") and w[3] != "0A":
                    continue
                ip, port = addr(w[1], proto.endswith("6"))
                out.add((proto, f"{ip}:{port}"))
    return out


def reaches(kind, where, path_prefix):
    """Whether uid 65534 in this (the host's) namespace connects to the socket."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            if kind == "unix":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                name = where.replace("@", "\0", 1) if where.startswith("@") else where
                if name.startswith("/proc/self/fd/"):
                    # The forwarder binds through a directory fd: the real path is its
                    # state directory's.
                    name = os.path.join(path_prefix, os.path.basename(name))
                s.settimeout(2)
                s.connect(name)
            else:
                ip, port = where.rsplit(":", 1)
                fam = socket.AF_INET6 if ":" in ip else socket.AF_INET
                typ = socket.SOCK_STREAM if kind.startswith("tcp") else socket.SOCK_DGRAM
                s = socket.socket(fam, typ)
                s.settimeout(2)
                s.connect((ip, int(port)))
                if typ == socket.SOCK_DGRAM:
                    s.send(b"\0" * 12)
                    s.recv(512)
            os._exit(0)
        except OSError as e:
            print(f"     {kind} {where}: {e.strerror or e}", file=sys.stderr)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def documented(kind, where, ns):
    ip = where.rsplit(":", 1)[0]
    return ns == "container" and kind in ("udp", "tcp") and ip.startswith("127.") \
        and where.endswith(":53")


def main():
    if sys.argv[1] == "snapshot":
        for k, w in sorted(listening("self")):
            print(f"{k} {w}")
        return 0
    before = {tuple(l.split(" ", 1)) for l in open(sys.argv[2]).read().splitlines() if l}
    pid, state_dir = sys.argv[3], sys.argv[4]
    bad = 0
    found = [("host", k, w) for k, w in listening("self") - before]
    found += [("container", k, w) for k, w in listening(pid)]
    for ns, kind, where in sorted(found):
        if documented(kind, where, ns):
            print(f"ok   {ns} {kind} {where}: documented (the forwarder, container's own namespace)")
        elif ns == "container" and kind != "unix":
            # Only processes in the container's namespace reach it: not documented, a FAIL.
            print(f"FAIL {ns} {kind} {where}: listening in the container's namespace, not documented")
            bad += 1
        elif ns == "container" and where.startswith("@"):
            print(f"FAIL {ns} {kind} {where}: an abstract name in the container's namespace, not documented")
            bad += 1
        elif reaches(kind, where, state_dir):
            print(f"FAIL {ns} {kind} {where}: uid 65534 connects")
            bad += 1
        else:
            print(f"ok   {ns} {kind} {where}: uid 65534 refused")
    if not found:
        print("FAIL nothing found: the forwarder should listen in the container's namespace")
        bad += 1
    return 1 if bad else 0


sys.exit(main())
