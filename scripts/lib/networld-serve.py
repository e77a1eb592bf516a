#!/usr/bin/python3
"""The servers of a test network world (scripts/lib/networld): run inside the world's network
namespace, bound to the wildcard address of both families, so every address the world holds
answers on every port given.

  networld-serve.py --tcp 80,443,7000 --udp 7000,7001 --ready FILE

TCP: reads one line, answers "echo <local addr>:<port> <line>" (or, for a line starting with
"GET ", an HTTP/1.0 response whose body is "metadata <local addr>"), then closes.
UDP: answers each datagram with "echo <local addr>:<port> <datagram>". The local address in
the answer tells the test which of the world's addresses it reached. Writes FILE once every
socket is bound.
"""
import argparse
import selectors
import socket


def local(sock):
    host, port = sock.getsockname()[:2]
    if host.startswith("::ffff:"):
        host = host[7:]
    return f"{host}:{port}"




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tcp", default="")
    ap.add_argument("--udp", default="")
    ap.add_argument("--ready", required=True)
    a = ap.parse_args()
    sel = selectors.DefaultSelector()
    for p in filter(None, a.tcp.split(",")):
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.bind(("::", int(p)))
        s.listen(64)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, "tcp")
    for p in filter(None, a.udp.split(",")):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
        s.bind(("::", int(p)))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, "udp")
    with open(a.ready, "w") as f:
        f.write("ready\n")
    while True:
        for key, _ in sel.select():
            s = key.fileobj
            if key.data == "tcp":
                try:
                    c, _ = s.accept()
                except OSError:
                    continue
                c.settimeout(2)
                try:
                    line = c.recv(512).decode(errors="replace").splitlines()
                    line = line[0] if line else ""
                    here = local(c)
                    if line.startswith("GET "):
                        body = f"metadata {here.rsplit(':', 1)[0]}\n"
                        c.sendall(
                            f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
                        )
                    else:
                        c.sendall(f"echo {here} {line}\n".encode())
                except OSError:
                    pass
                finally:
                    c.close()
            else:
                try:
                    data, anc, _, peer = s.recvmsg(512, socket.CMSG_SPACE(20))
                except OSError:
                    continue
                dest, pktinfo = "?", []
                for level, typ, val in anc:
                    if level == socket.IPPROTO_IPV6 and typ == socket.IPV6_PKTINFO:
                        dest = socket.inet_ntop(socket.AF_INET6, val[:16])
                        # Answer from the address the datagram was sent to, or a connected
                        # client socket drops the answer.
                        pktinfo = [(level, typ, val)]
                if dest.startswith("::ffff:"):
                    dest = dest[7:]
                port = s.getsockname()[1]
                msg = data.decode(errors="replace").strip()
                try:
                    s.sendmsg([f"echo {dest}:{port} {msg}\n".encode()], pktinfo, 0, peer)
                except OSError:
                    pass


if __name__ == "__main__":
    main()
