/*
 * netprobe: the egress tests' in-container client (tests/egress.rs, scripts/e2e-egress).
 * Built statically at test time and copied into a container's rootfs; busybox's nc has no
 * UDP, no timing and no errno. One line per probe, times measured inside the container:
 *
 *   netprobe tcp ADDR PORT    connect (2 s timeout), send "probe", read the answer:
 *                             "tcp ADDR PORT ok MS ANSWER" | "tcp ADDR PORT err ERRNO MS"
 *   netprobe mptcp ADDR PORT  the same over an MPTCP socket (socket(..., IPPROTO_MPTCP)):
 *                             "mptcp ADDR PORT ..."
 *   netprobe udp ADDR PORT    sendto on an unconnected socket (the sendmsg hooks), 1 s for
 *                             the answer: "udp ADDR PORT ok MS ANSWER" | "... err ERRNO MS"
 *   netprobe udpc ADDR PORT   the same on a connected socket (the connect hooks)
 *   netprobe icmp ADDR 0      an ICMP echo request by sendto on an unconnected ping socket
 *                             (socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP): no connect hook
 *                             sees it), 1 s for the reply:
 *                             "icmp ADDR 0 ok MS reply" | "icmp ADDR 0 err ERRNO MS"
 *   netprobe icmpc ADDR 0     the same on a connected ping socket (the connect hooks)
 *   netprobe icmpraw ADDR 0   the same on a raw socket (needs CAP_NET_RAW)
 *                             an icmp probe's socket() failing: "... err socket:ERRNO MS"
 *   netprobe sockall          socket(2) for every (family, type, protocol) of AF_INET and
 *                             AF_INET6 x SOCK_STREAM, DGRAM, RAW, RDM, SEQPACKET, DCCP x
 *                             protocols 0-256 and 262 (MPTCP), one line for each the kernel
 *                             does not call unsupported: "sock F T P ok" | "sock F T P err ERRNO"
 *   netprobe udplite ADDR PORT [DATA]
 *                             a UDP-Lite socket connected to ADDR PORT sends DATA ("probe";
 *                             the receiver is the oracle): "udplite ADDR PORT ok MS" |
 *                             "... err ERRNO MS" | "... err socket:ERRNO MS"
 *   netprobe sock TYPE PROTO ADDR PORT DATA
 *                             socket(ADDR's family, TYPE, PROTO) connected to ADDR PORT sends
 *                             DATA (SCTP, DCCP, ...: the receiver or a capture is the oracle):
 *                             "sock T P ADDR PORT ok MS" | "... err ERRNO MS" | "... err socket:ERRNO MS"
 *   netprobe route ADDR PORT HOP DATA
 *                             a UDP datagram DATA to ADDR PORT (sendto, the hooks judge ADDR)
 *                             on a socket with a source route naming HOP as its first hop
 *                             (IPv4: IP_OPTIONS LSRR, needs CAP_NET_RAW; IPv6: IPV6_RTHDR, a
 *                             segment routing header, no capability); HOP "-": no route, the
 *                             control: "route ADDR PORT HOP ok MS" | "... err setsockopt:ERRNO MS"
 *                             | "... err ERRNO MS"
 *   netprobe udplite-recv ADDR PORT SECS
 *                             a UDP-Lite socket bound to ADDR PORT prints what arrives in
 *                             SECS seconds: "recv ADDR PORT got DATA" | "recv ADDR PORT none"
 *   netprobe dns NAME [a|aaaa [SERVER]]
 *                             an A (AAAA) query to SERVER or the first nameserver of
 *                             /etc/resolv.conf:
 *                             "dns NAME RCODE ttl=T addrs=A,B" | "dns NAME err ERRNO MS"
 *
 * ERRNO is the symbolic name (EPERM, ECONNREFUSED, ...) or TIMEOUT. ADDR may be IPv4 or IPv6.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/icmp6.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct timespec t0;
static double ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6;
}

static const char *ename(int e)
{
	switch (e) {
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ENETUNREACH: return "ENETUNREACH";
	case EHOSTUNREACH: return "EHOSTUNREACH";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNRESET: return "ECONNRESET";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EINVAL: return "EINVAL";
	case 0: return "TIMEOUT";
	default: {
		static char b[16];
		snprintf(b, sizeof b, "E%d", e);
		return b;
	}
	}
}

static socklen_t addr_of(const char *a, int port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof *ss);
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, a, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		return sizeof *s4;
	}
	if (inet_pton(AF_INET6, a, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		return sizeof *s6;
	}
	fprintf(stderr, "netprobe: bad address %s\n", a);
	exit(2);
}

/* Waits for fd to become readable (or writable): 0 on time, else the errno (0: timeout). */
static int wait_fd(int fd, short ev, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r = poll(&p, 1, timeout_ms);
	return r > 0 ? -1 : (r == 0 ? 0 : errno);
}

static void answer_line(char *buf, ssize_t n)
{
	buf[n < 0 ? 0 : n] = 0;
	char *nl = strchr(buf, '\n');
	if (nl)
		*nl = 0;
}

static int stream(const char *kind, const char *a, int port, int proto)
{
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, proto);
	if (fd < 0) {
		printf("%s %s %d err socket:%s %.3f\n", kind, a, port, ename(errno), ms());
		return 1;
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		int e = errno;
		if (e != EINPROGRESS) {
			printf("%s %s %d err %s %.3f\n", kind, a, port, ename(e), ms());
			return 1;
		}
		int w = wait_fd(fd, POLLOUT, 2000);
		if (w != -1) {
			printf("%s %s %d err %s %.3f\n", kind, a, port, ename(w), ms());
			return 1;
		}
		socklen_t el = sizeof e;
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
		if (e) {
			printf("%s %s %d err %s %.3f\n", kind, a, port, ename(e), ms());
			return 1;
		}
	}
	double t = ms();
	if (write(fd, "probe\n", 6) != 6 || wait_fd(fd, POLLIN, 2000) != -1) {
		printf("%s %s %d err NOANSWER %.3f\n", kind, a, port, ms());
		return 1;
	}
	char buf[512];
	ssize_t n = read(fd, buf, sizeof buf - 1);
	answer_line(buf, n);
	printf("%s %s %d ok %.3f %s\n", kind, a, port, t, buf);
	return 0;
}

static int udp(const char *a, int port, int connected)
{
	const char *kind = connected ? "udpc" : "udp";
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	ssize_t r;
	if (connected) {
		if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
			printf("%s %s %d err %s %.3f\n", kind, a, port, ename(errno), ms());
			return 1;
		}
		r = send(fd, "probe", 5, 0);
	} else {
		r = sendto(fd, "probe", 5, 0, (struct sockaddr *)&ss, len);
	}
	if (r < 0) {
		printf("%s %s %d err %s %.3f\n", kind, a, port, ename(errno), ms());
		return 1;
	}
	double t = ms();
	int w = wait_fd(fd, POLLIN, 1000);
	if (w != -1) {
		printf("%s %s %d err %s %.3f\n", kind, a, port, ename(w), ms());
		return 1;
	}
	char buf[512];
	r = recv(fd, buf, sizeof buf - 1, 0);
	if (r < 0) {
		printf("%s %s %d err %s %.3f\n", kind, a, port, ename(errno), ms());
		return 1;
	}
	answer_line(buf, r);
	printf("%s %s %d ok %.3f %s\n", kind, a, port, t, buf);
	return 0;
}

static unsigned short csum(const void *p, size_t n)
{
	const unsigned char *b = p;
	unsigned long s = 0;
	for (size_t k = 0; k + 1 < n; k += 2)
		s += b[k] << 8 | b[k + 1];
	if (n & 1)
		s += b[n - 1] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return htons(~s & 0xffff);
}

/* mode 0: ping socket, sendto; 1: ping socket, connect + send; 2: raw socket, sendto. */
static int icmp(const char *a, int mode)
{
	static const char *kinds[] = { "icmp", "icmpc", "icmpraw" };
	const char *kind = kinds[mode];
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, 0, &ss);
	int v6 = ss.ss_family == AF_INET6;
	int fd = socket(ss.ss_family, mode == 2 ? SOCK_RAW : SOCK_DGRAM,
			v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
	if (fd < 0) {
		printf("%s %s 0 err socket:%s %.3f\n", kind, a, ename(errno), ms());
		return 1;
	}
	unsigned short id = (unsigned short)getpid();
	unsigned char req[16] = { v6 ? ICMP6_ECHO_REQUEST : ICMP_ECHO, 0, 0, 0, id >> 8, id & 0xff,
				  0, 1, 'p', 'r', 'o', 'b', 'e', 0, 0, 0 };
	/* The kernel fills the checksum of ICMPv6 (raw sockets too) and a ping socket's. */
	if (mode == 2 && !v6) {
		unsigned short c = csum(req, sizeof req);
		memcpy(req + 2, &c, 2);
	}
	ssize_t r;
	if (mode == 1) {
		if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
			printf("%s %s 0 err %s %.3f\n", kind, a, ename(errno), ms());
			return 1;
		}
		r = send(fd, req, sizeof req, 0);
	} else {
		r = sendto(fd, req, sizeof req, 0, (struct sockaddr *)&ss, len);
	}
	if (r < 0) {
		printf("%s %s 0 err %s %.3f\n", kind, a, ename(errno), ms());
		return 1;
	}
	double t = ms();
	for (;;) {
		double left = 1000 - (ms() - t);
		int w = left > 0 ? wait_fd(fd, POLLIN, (int)left) : 0;
		if (w != -1) {
			printf("%s %s 0 err %s %.3f\n", kind, a, ename(w), ms());
			return 1;
		}
		unsigned char buf[1500];
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		r = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
		if (r < 0) {
			printf("%s %s 0 err %s %.3f\n", kind, a, ename(errno), ms());
			return 1;
		}
		unsigned char *h = buf;
		/* A raw IPv4 socket gets the IP header too; it also sees every other ICMP packet. */
		if (mode == 2 && !v6) {
			if (r < 20 || r < (buf[0] & 0xf) * 4 + 8)
				continue;
			h = buf + (buf[0] & 0xf) * 4;
		}
		int reply = v6 ? ICMP6_ECHO_REPLY : ICMP_ECHOREPLY;
		/* A ping socket's replies carry the socket's own id (the kernel rewrites it). */
		if (h[0] != reply || (mode == 2 && (h[4] != (id >> 8) || h[5] != (id & 0xff))))
			continue;
		char src[64] = "";
		if (v6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&from)->sin6_addr, src, sizeof src);
		else
			inet_ntop(AF_INET, &((struct sockaddr_in *)&from)->sin_addr, src, sizeof src);
		printf("%s %s 0 ok %.3f reply from %s\n", kind, a, t, src);
		return 0;
	}
}

static const char *rcode_name(int r)
{
	static const char *n[] = { "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED" };
	return r >= 0 && r < 6 ? n[r] : "RCODE?";
}

static int dns(const char *name, int aaaa, const char *server)
{
	char ns[64] = "";
	if (server)
		snprintf(ns, sizeof ns, "%s", server);
	FILE *f = fopen("/etc/resolv.conf", "r");
	char line[256];
	while (!*ns && f && fgets(line, sizeof line, f))
		if (sscanf(line, "nameserver %63s", ns) == 1)
			break;
	if (f)
		fclose(f);
	if (!*ns) {
		printf("dns %s err NONAMESERVER %.3f\n", name, ms());
		return 1;
	}
	unsigned char q[512], *p = q;
	unsigned short id = (unsigned short)getpid();
	*p++ = id >> 8; *p++ = id & 0xff;
	*p++ = 1; *p++ = 0; /* RD */
	*p++ = 0; *p++ = 1; /* QDCOUNT */
	memset(p, 0, 6); p += 6;
	const char *s = name;
	while (*s) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);
		if (l == 0 || l > 63 || p + l + 6 > q + sizeof q)
			break;
		*p++ = (unsigned char)l;
		memcpy(p, s, l);
		p += l;
		s += l + (dot ? 1 : 0);
	}
	*p++ = 0;
	*p++ = 0; *p++ = aaaa ? 28 : 1;
	*p++ = 0; *p++ = 1;
	struct sockaddr_storage ss;
	socklen_t len = addr_of(ns, 53, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	if (sendto(fd, q, p - q, 0, (struct sockaddr *)&ss, len) < 0) {
		printf("dns %s err %s %.3f\n", name, ename(errno), ms());
		return 1;
	}
	int w = wait_fd(fd, POLLIN, 2000);
	if (w != -1) {
		printf("dns %s err %s %.3f\n", name, ename(w), ms());
		return 1;
	}
	unsigned char r[1500];
	ssize_t n = recv(fd, r, sizeof r, 0);
	if (n < 12) {
		printf("dns %s err %s %.3f\n", name, n < 0 ? ename(errno) : "SHORT", ms());
		return 1;
	}
	int rcode = r[3] & 0xf, an = r[6] << 8 | r[7];
	unsigned char *e = r + n, *c = r + 12;
	/* Skip the question. */
	while (c < e && *c) c += *c + 1;
	c += 5;
	char addrs[1024] = "";
	long ttl = -1;
	for (int i = 0; i < an && c < e; i++) {
		if ((*c & 0xc0) == 0xc0) c += 2;
		else { while (c < e && *c) c += *c + 1; c++; }
		if (c + 10 > e) break;
		int type = c[0] << 8 | c[1];
		long t = (long)c[4] << 24 | c[5] << 16 | c[6] << 8 | c[7];
		int rl = c[8] << 8 | c[9];
		c += 10;
		if (c + rl > e) break;
		char a[64] = "";
		if (type == 1 && rl == 4) inet_ntop(AF_INET, c, a, sizeof a);
		if (type == 28 && rl == 16) inet_ntop(AF_INET6, c, a, sizeof a);
		if (*a) {
			if (*addrs) strcat(addrs, ",");
			strncat(addrs, a, sizeof addrs - strlen(addrs) - 1);
			if (ttl < 0 || t < ttl) ttl = t;
		}
		c += rl;
	}
	printf("dns %s %s ttl=%ld addrs=%s\n", name, rcode_name(rcode), ttl, addrs);
	return rcode != 0;
}

static int sockall(void)
{
	int fams[] = { AF_INET, AF_INET6 };
	int types[] = { SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_DCCP };
	for (int f = 0; f < 2; f++)
		for (int t = 0; t < 6; t++)
			for (int p = 0; p <= 262; p++) {
				if (p > 256 && p != 262)
					continue;
				int fd = socket(fams[f], types[t], p);
				if (fd >= 0) {
					printf("sock %d %d %d ok\n", fams[f], types[t], p);
					close(fd);
				} else if (errno != EPROTONOSUPPORT && errno != ESOCKTNOSUPPORT &&
					   errno != EPROTOTYPE && errno != EINVAL) {
					printf("sock %d %d %d err %s\n", fams[f], types[t], p, ename(errno));
				}
			}
	return 0;
}

static int udplite(const char *a, int port, const char *data)
{
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM, IPPROTO_UDPLITE);
	if (fd < 0) {
		printf("udplite %s %d err socket:%s %.3f\n", a, port, ename(errno), ms());
		return 1;
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 || send(fd, data, strlen(data), 0) < 0) {
		printf("udplite %s %d err %s %.3f\n", a, port, ename(errno), ms());
		return 1;
	}
	printf("udplite %s %d ok %.3f\n", a, port, ms());
	return 0;
}

static int sock_send(int type, int proto, const char *a, int port, const char *data)
{
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, type, proto);
	if (fd < 0) {
		printf("sock %d %d %s %d err socket:%s %.3f\n", type, proto, a, port, ename(errno), ms());
		return 1;
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0 || send(fd, data, strlen(data), 0) < 0) {
		printf("sock %d %d %s %d err %s %.3f\n", type, proto, a, port, ename(errno), ms());
		return 1;
	}
	printf("sock %d %d %s %d ok %.3f\n", type, proto, a, port, ms());
	return 0;
}

/* A source route naming hop (the header's first destination): IPv4 a loose source route
 * option (NOP, LSRR, pointer 4, hop), IPv6 a segment routing header (type 4) whose one
 * segment is hop. */
static int route(const char *a, int port, const char *hop, const char *data)
{
	struct sockaddr_storage ss, hs;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
	if (fd < 0) {
		printf("route %s %d %s err socket:%s %.3f\n", a, port, hop, ename(errno), ms());
		return 1;
	}
	if (strcmp(hop, "-")) {
		unsigned char o[24] = {0};
		int r;
		addr_of(hop, 0, &hs);
		if (ss.ss_family == AF_INET) {
			o[0] = 1, o[1] = 0x83, o[2] = 7, o[3] = 4;
			memcpy(o + 4, &((struct sockaddr_in *)&hs)->sin_addr, 4);
			r = setsockopt(fd, IPPROTO_IP, IP_OPTIONS, o, 8);
		} else {
			o[1] = 2, o[2] = 4, o[3] = 0;
			memcpy(o + 8, &((struct sockaddr_in6 *)&hs)->sin6_addr, 16);
			r = setsockopt(fd, IPPROTO_IPV6, IPV6_RTHDR, o, 24);
		}
		if (r < 0) {
			printf("route %s %d %s err setsockopt:%s %.3f\n", a, port, hop, ename(errno), ms());
			return 1;
		}
	}
	if (sendto(fd, data, strlen(data), 0, (struct sockaddr *)&ss, len) < 0) {
		printf("route %s %d %s err %s %.3f\n", a, port, hop, ename(errno), ms());
		return 1;
	}
	printf("route %s %d %s ok %.3f\n", a, port, hop, ms());
	return 0;
}

static int udplite_recv(const char *a, int port, int secs)
{
	struct sockaddr_storage ss;
	socklen_t len = addr_of(a, port, &ss);
	int fd = socket(ss.ss_family, SOCK_DGRAM, IPPROTO_UDPLITE);
	if (fd < 0 || bind(fd, (struct sockaddr *)&ss, len) < 0) {
		printf("recv %s %d err %s\n", a, port, ename(errno));
		return 1;
	}
	if (wait_fd(fd, POLLIN, secs * 1000) != -1) {
		printf("recv %s %d none\n", a, port);
		return 1;
	}
	char buf[256];
	ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
	buf[n < 0 ? 0 : n] = 0;
	printf("recv %s %d got %s\n", a, port, buf);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (argc >= 4 && !strcmp(argv[1], "tcp")) return stream("tcp", argv[2], atoi(argv[3]), 0);
	if (argc >= 4 && !strcmp(argv[1], "mptcp")) return stream("mptcp", argv[2], atoi(argv[3]), IPPROTO_MPTCP);
	if (argc >= 4 && !strcmp(argv[1], "udp")) return udp(argv[2], atoi(argv[3]), 0);
	if (argc >= 4 && !strcmp(argv[1], "udpc")) return udp(argv[2], atoi(argv[3]), 1);
	if (argc >= 3 && !strcmp(argv[1], "icmp")) return icmp(argv[2], 0);
	if (argc >= 3 && !strcmp(argv[1], "icmpc")) return icmp(argv[2], 1);
	if (argc >= 3 && !strcmp(argv[1], "icmpraw")) return icmp(argv[2], 2);
	if (argc >= 2 && !strcmp(argv[1], "sockall")) return sockall();
	if (argc >= 4 && !strcmp(argv[1], "udplite")) return udplite(argv[2], atoi(argv[3]), argc > 4 ? argv[4] : "probe");
	if (argc >= 7 && !strcmp(argv[1], "sock")) return sock_send(atoi(argv[2]), atoi(argv[3]), argv[4], atoi(argv[5]), argv[6]);
	if (argc >= 6 && !strcmp(argv[1], "route")) return route(argv[2], atoi(argv[3]), argv[4], argv[5]);
	if (argc >= 5 && !strcmp(argv[1], "udplite-recv")) return udplite_recv(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (argc >= 3 && !strcmp(argv[1], "dns")) return dns(argv[2], argc > 3 && !strcmp(argv[3], "aaaa"), argc > 4 ? argv[4] : NULL);
	fprintf(stderr, "usage: netprobe tcp|mptcp|udp|udpc|icmp|icmpc|icmpraw|udplite ADDR PORT | udplite-recv ADDR PORT SECS | sockall | dns NAME [a|aaaa [SERVER]]\n");
	return 2;
}
