/*
 * sockmatrix: the egress protocol matrix's in-container sweep (tests/egress_matrix.rs).
 * Built statically at test time and copied into a container's rootfs. The test's packet
 * capture in the world is the oracle; what this prints is only what each syscall said.
 *
 *   sockmatrix enum
 *       socket(2) for every family 0..63 x type STREAM, DGRAM, RAW, RDM, SEQPACKET, DCCP,
 *       PACKET x protocol 0..256, 262 (MPTCP) and the AF_PACKET ethertypes ETH_P_ALL,
 *       ETH_P_IP, ETH_P_IPV6, ETH_P_ARP (network order); only the families named by
 *       SOCKMATRIX_FAMILIES ("1,2,10") when it is set: one line for each the kernel does
 *       not call unsupported: "sock F T P ok" | "sock F T P err ERRNO".
 *   sockmatrix sweep TRIPLES DEST...
 *       enum first, then for every triple of the file TRIPLES ("F T P" lines: what the
 *       host's kernel makes) and every triple enum made here, every send path below to every
 *       DEST ("label=addr": an IPv4 address is tried as itself and IPv4-mapped on an IPv6
 *       socket, an IPv6 one as itself), a fresh socket each. The first DEST is the one the
 *       "conn2" and "srr" paths connect to. One line per cell:
 *         "cell IDX F T P PATH LABEL FORM HDRDST PORT RESULT"
 *       HDRDST is the address the packet's header carries (what the capture sees), PORT the
 *       destination port, 1024 + IDX % 64000, so the capture tells cells apart; every
 *       payload carries "MXC<IDX>;". RESULT: "ok" | "STEP:ERRNO". A triple whose socket()
 *       fails gets one line for all its cells: "nosock F T P ERRNO NCELLS".
 *
 * Paths (MSG_DONTWAIT everywhere, each on a new SOCK_NONBLOCK socket):
 *   connect   connect(dst) (50 ms for a connection in progress), send
 *   sendto    sendto(dst)
 *   sendmsg   sendmsg with msg_name dst
 *   sendmmsg  sendmmsg, two messages to dst
 *   conn2     connect(the first DEST), then sendto(dst)
 *   srr       a source route naming dst as the first hop (IPv4: IP_OPTIONS LSRR, also on an
 *             IPv6 socket for the mapped form; IPv6: IPV6_RTHDR, a segment routing header),
 *             then connect + send (stream) or sendto (others) to the first DEST: the hooks
 *             judge the first DEST, the header carries dst
 *   srr2      the same with IPv4 SSRR, IPv6 a type 2 (Mobile IPv6) routing header
 *   srrcmsg   LSRR (IP_RETOPTS) or a type 2 routing header (IPV6_RTHDR) as ancillary data
 *             of one sendmsg to the first DEST
 *   tfo       sendto(dst, MSG_FASTOPEN)                    (SOCK_STREAM only)
 *   tfoc      TCP_FASTOPEN_CONNECT, connect(dst), send      (SOCK_STREAM only)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef TCP_FASTOPEN_CONNECT
#define TCP_FASTOPEN_CONNECT 30
#endif
#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif
#define SOL_TCP_ 6
#define NFAM 64

static const int types[] = { 1, 2, 3, 4, 5, 6, 10 };
#define NTYPES (int)(sizeof types / sizeof types[0])

static int protos[300], nprotos;

static void init_protos(void)
{
	for (int p = 0; p <= 256; p++)
		protos[nprotos++] = p;
	protos[nprotos++] = 262;
	/* htons(ETH_P_ALL), htons(ETH_P_IP) is 8 (above), htons(ETH_P_IPV6), htons(ETH_P_ARP) */
	protos[nprotos++] = 0x0300;
	protos[nprotos++] = 0xdd86;
	protos[nprotos++] = 0x0608;
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
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case ESOCKTNOSUPPORT: return "ESOCKTNOSUPPORT";
	case EPROTOTYPE: return "EPROTOTYPE";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EINVAL: return "EINVAL";
	case ENOTCONN: return "ENOTCONN";
	case EISCONN: return "EISCONN";
	case EPIPE: return "EPIPE";
	case EAGAIN: return "EAGAIN";
	case EINPROGRESS: return "EINPROGRESS";
	case EALREADY: return "EALREADY";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case EFAULT: return "EFAULT";
	case ENOENT: return "ENOENT";
	case ENXIO: return "ENXIO";
	case ENODEV: return "ENODEV";
	case EMSGSIZE: return "EMSGSIZE";
	case ENOBUFS: return "ENOBUFS";
	case ENOMEM: return "ENOMEM";
	case EBADF: return "EBADF";
	case ENOTSOCK: return "ENOTSOCK";
	case 0: return "TIMEOUT";
	default: {
		static char b[16];
		snprintf(b, sizeof b, "E%d", e);
		return b;
	}
	}
}

/* The kernel has no such (family, type, protocol): not a refusal. */
static int unsupported(int e)
{
	return e == EAFNOSUPPORT || e == EPROTONOSUPPORT || e == ESOCKTNOSUPPORT ||
	       e == EPROTOTYPE || e == EINVAL || e == EOPNOTSUPP;
}

struct triple { int f, t, p; };
static struct triple made[4096];
static int nmade;

/* SOCKMATRIX_FAMILIES="1,2,10": only these families (a kernel that could load a module for
 * a family it lacks: the test names the families already registered). */
static int family_ok(int f)
{
	const char *l = getenv("SOCKMATRIX_FAMILIES");
	if (!l || !*l)
		return 1;
	for (const char *p = l; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		if (v == f)
			return 1;
		p = *end ? end + 1 : end;
	}
	return 0;
}

static void do_enum(void)
{
	for (int f = 0; f < NFAM; f++)
		if (family_ok(f))
			for (int t = 0; t < NTYPES; t++)
			for (int k = 0; k < nprotos; k++) {
				int fd = socket(f, types[t], protos[k]);
				if (fd >= 0) {
					printf("sock %d %d %d ok\n", f, types[t], protos[k]);
					close(fd);
					if (nmade < 4096)
						made[nmade++] = (struct triple){ f, types[t], protos[k] };
				} else if (!unsupported(errno)) {
					printf("sock %d %d %d err %s\n", f, types[t], protos[k], ename(errno));
				}
			}
}

/* A destination form: the address as the socket is given it, and the header's address. */
struct dest {
	char label[32];
	char form[8];  /* v4 | mapped | v6 */
	char hdr[64];  /* the address the packet's header carries (IPv4 for mapped) */
	int v6sock;    /* the form needs an AF_INET6 sockaddr */
	struct sockaddr_storage ss;
	socklen_t len;
	unsigned char raw[16]; /* the address's bytes (4 for IPv4 and mapped, 16 for v6) */
};
static struct dest dests[64];
static int ndests;

static void add_dest(const char *label, const char *addr)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (inet_pton(AF_INET, addr, &a4) == 1) {
		struct dest *d = &dests[ndests++];
		snprintf(d->label, sizeof d->label, "%s", label);
		snprintf(d->form, sizeof d->form, "v4");
		snprintf(d->hdr, sizeof d->hdr, "%s", addr);
		struct sockaddr_in *s = (struct sockaddr_in *)&d->ss;
		s->sin_family = AF_INET;
		s->sin_addr = a4;
		d->len = sizeof *s;
		memcpy(d->raw, &a4, 4);
		d = &dests[ndests++];
		snprintf(d->label, sizeof d->label, "%s", label);
		snprintf(d->form, sizeof d->form, "mapped");
		snprintf(d->hdr, sizeof d->hdr, "%s", addr);
		d->v6sock = 1;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&d->ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr.s6_addr[10] = 0xff;
		s6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&s6->sin6_addr.s6_addr[12], &a4, 4);
		d->len = sizeof *s6;
		memcpy(d->raw, &a4, 4);
	} else if (inet_pton(AF_INET6, addr, &a6) == 1) {
		struct dest *d = &dests[ndests++];
		snprintf(d->label, sizeof d->label, "%s", label);
		snprintf(d->form, sizeof d->form, "v6");
		snprintf(d->hdr, sizeof d->hdr, "%s", addr);
		d->v6sock = 1;
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&d->ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_addr = a6;
		d->len = sizeof *s6;
		memcpy(d->raw, &a6, 16);
	} else {
		fprintf(stderr, "sockmatrix: bad address %s\n", addr);
		exit(2);
	}
}

static void set_port(struct sockaddr_storage *ss, int port)
{
	if (ss->ss_family == AF_INET)
		((struct sockaddr_in *)ss)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
}

/* The payload: an ICMP echo request for ping and ICMP raw sockets, an IPv4 header for
 * IPPROTO_RAW (IP_HDRINCL), else the marker alone. */
static size_t payload(const struct triple *tr, const struct dest *d, int idx, unsigned char *buf)
{
	char mark[32];
	int ml = snprintf(mark, sizeof mark, "MXC%d;", idx);
	size_t off = 0;
	if ((tr->f == AF_INET && tr->p == IPPROTO_ICMP) || (tr->f == AF_INET6 && tr->p == IPPROTO_ICMPV6)) {
		memset(buf, 0, 8);
		buf[0] = tr->f == AF_INET6 ? 128 : 8;
		buf[5] = 1;
		off = 8;
	} else if (tr->f == AF_INET && tr->t == SOCK_RAW && tr->p == IPPROTO_RAW) {
		memset(buf, 0, 20);
		buf[0] = 0x45;
		size_t tot = 20 + (size_t)ml;
		buf[2] = (unsigned char)(tot >> 8);
		buf[3] = (unsigned char)tot;
		buf[8] = 64;
		buf[9] = 253; /* RFC 3692 experimentation */
		memcpy(buf + 16, d->raw, 4);
		off = 20;
	}
	memcpy(buf + off, mark, ml);
	off += ml;
	if (buf[0] == 8 && off > 8 && tr->p == IPPROTO_ICMP && tr->t == SOCK_RAW) {
		unsigned long s = 0;
		for (size_t k = 0; k + 1 < off; k += 2)
			s += buf[k] << 8 | buf[k + 1];
		if (off & 1)
			s += buf[off - 1] << 8;
		while (s >> 16)
			s = (s & 0xffff) + (s >> 16);
		buf[2] = (unsigned char)(~s >> 8);
		buf[3] = (unsigned char)~s;
	}
	return off;
}

static int wait_out(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	return poll(&p, 1, 50);
}

/* connect; a connection in progress gets 50 ms. 0 or the errno. */
static int do_connect(int fd, struct sockaddr_storage *ss, socklen_t len)
{
	if (connect(fd, (struct sockaddr *)ss, len) == 0)
		return 0;
	int e = errno;
	if (e != EINPROGRESS)
		return e;
	wait_out(fd);
	socklen_t el = sizeof e;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		return errno;
	return e == EINPROGRESS ? 0 : e;
}

static int cell_idx;
static const char *paths[] = { "connect", "sendto", "sendmsg", "sendmmsg", "conn2", "srr", "srr2", "srrcmsg", "tfo", "tfoc" };
#define NPATHS 10

static int path_applies(int path, const struct triple *tr)
{
	return path < 8 || tr->t == SOCK_STREAM;
}

/* The option naming hop as the first hop: IPv4 (the v4 and mapped forms) a loose (kind 0)
 * or strict (kind 1) source route; IPv6 a segment routing header (kind 0: type 4, its one
 * segment the header's destination) or a type 2 routing header (kind 1: Mobile IPv6, its
 * address the header's destination). 24 bytes at most; the length. */
static size_t route_option(const struct dest *hop, int kind, unsigned char *o)
{
	memset(o, 0, 24);
	if (strcmp(hop->form, "v6")) {
		o[0] = kind ? 0x89 : 0x83;
		o[1] = 7;
		o[2] = 4;
		memcpy(o + 3, hop->raw, 4);
		return 8;
	}
	o[1] = 2;
	o[2] = kind ? 2 : 4;
	o[3] = kind ? 1 : 0;
	memcpy(o + 8, hop->raw, 16);
	return 24;
}

static int source_route(int fd, const struct dest *hop, int kind)
{
	unsigned char o[24];
	size_t n = route_option(hop, kind, o);
	if (strcmp(hop->form, "v6"))
		return setsockopt(fd, IPPROTO_IP, IP_OPTIONS, o, n) ? errno : 0;
	return setsockopt(fd, IPPROTO_IPV6, IPV6_RTHDR, o, n) ? errno : 0;
}

static void run_cell(const struct triple *tr, int path, struct dest *d, struct dest *allowed4,
		     struct dest *allowedm, struct dest *allowed6)
{
	int idx = cell_idx++;
	int port = 1024 + idx % 64000;
	unsigned char buf[128];
	size_t n = payload(tr, d, idx, buf);
	struct sockaddr_storage ss = d->ss;
	set_port(&ss, port);
	struct dest *first = !strcmp(d->form, "v4") ? allowed4 : !strcmp(d->form, "mapped") ? allowedm : allowed6;
	struct sockaddr_storage fs = first->ss;
	set_port(&fs, port);
	const char *step = "socket";
	int e = 0;
	int fd = socket(tr->f, tr->t | SOCK_NONBLOCK | SOCK_CLOEXEC, tr->p);
	if (fd < 0) {
		e = errno;
		goto out;
	}
	switch (path) {
	case 0: /* connect */
		step = "connect";
		if ((e = do_connect(fd, &ss, d->len)))
			break;
		step = "send";
		if (send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			e = errno;
		break;
	case 1: /* sendto */
		step = "sendto";
		if (sendto(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&ss, d->len) < 0)
			e = errno;
		break;
	case 2: { /* sendmsg */
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_name = &ss, .msg_namelen = d->len, .msg_iov = &iov, .msg_iovlen = 1 };
		step = "sendmsg";
		if (sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			e = errno;
		break;
	}
	case 3: { /* sendmmsg */
		struct iovec iov = { buf, n };
		struct mmsghdr mm[2];
		memset(mm, 0, sizeof mm);
		for (int k = 0; k < 2; k++) {
			mm[k].msg_hdr.msg_name = &ss;
			mm[k].msg_hdr.msg_namelen = d->len;
			mm[k].msg_hdr.msg_iov = &iov;
			mm[k].msg_hdr.msg_iovlen = 1;
		}
		step = "sendmmsg";
		if (sendmmsg(fd, mm, 2, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			e = errno;
		break;
	}
	case 4: /* conn2: connected to the first destination, sendto dst */
		step = "connect";
		if ((e = do_connect(fd, &fs, first->len)))
			break;
		step = "sendto";
		if (sendto(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&ss, d->len) < 0)
			e = errno;
		break;
	case 5: /* srr, srr2: the header names dst, the hooks see the first destination */
	case 6:
		step = "setsockopt";
		if ((e = source_route(fd, d, path - 5)))
			break;
		if (tr->t == SOCK_STREAM) {
			step = "connect";
			if ((e = do_connect(fd, &fs, first->len)))
				break;
			step = "send";
			if (send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
				e = errno;
		} else {
			step = "sendto";
			if (sendto(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&fs, first->len) < 0)
				e = errno;
		}
		break;
	case 7: { /* srrcmsg: a source route as ancillary data of one sendmsg */
		union {
			struct cmsghdr h;
			unsigned char b[CMSG_SPACE(24)];
		} c;
		memset(&c, 0, sizeof c);
		int v6 = !strcmp(d->form, "v6");
		/* The kernel takes only a type 2 routing header as ancillary data. */
		size_t ol = route_option(d, v6, CMSG_DATA(&c.h));
		c.h.cmsg_level = v6 ? IPPROTO_IPV6 : IPPROTO_IP;
		c.h.cmsg_type = v6 ? IPV6_RTHDR : IP_RETOPTS;
		c.h.cmsg_len = CMSG_LEN(ol);
		struct iovec iov = { buf, n };
		struct msghdr m = { .msg_name = &fs, .msg_namelen = first->len, .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = &c, .msg_controllen = CMSG_SPACE(ol) };
		step = "sendmsg";
		if (sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			e = errno;
		break;
	}
	case 8: /* tfo */
		step = "sendto";
		if (sendto(fd, buf, n, MSG_FASTOPEN | MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&ss, d->len) < 0 &&
		    errno != EINPROGRESS)
			e = errno;
		break;
	case 9: { /* tfoc */
		int one = 1;
		step = "setsockopt";
		if (setsockopt(fd, SOL_TCP_, TCP_FASTOPEN_CONNECT, &one, sizeof one) < 0) {
			e = errno;
			break;
		}
		step = "connect";
		if ((e = do_connect(fd, &ss, d->len)))
			break;
		step = "send";
		if (send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			e = errno;
		break;
	}
	}
	/* A connection in progress still sends its SYN: give it the 50 ms too. */
	if (tr->t == SOCK_STREAM && e == EAGAIN)
		wait_out(fd);
	close(fd);
out:
	/* The srr path's header carries dst; so does every other path's. */
	if (e)
		printf("cell %d %d %d %d %s %s %s %s %d %s:%s\n", idx, tr->f, tr->t, tr->p, paths[path], d->label,
		       d->form, d->hdr, port, step, ename(e));
	else
		printf("cell %d %d %d %d %s %s %s %s %d ok\n", idx, tr->f, tr->t, tr->p, paths[path], d->label, d->form,
		       d->hdr, port);
}

static void sweep_triple(const struct triple *tr)
{
	int fd = socket(tr->f, tr->t | SOCK_NONBLOCK | SOCK_CLOEXEC, tr->p);
	int cells = 0;
	for (int path = 0; path < NPATHS; path++)
		if (path_applies(path, tr))
			cells += ndests;
	if (fd < 0) {
		printf("nosock %d %d %d %s %d\n", tr->f, tr->t, tr->p, ename(errno), cells);
		return;
	}
	close(fd);
	struct dest *a4 = &dests[0], *am = &dests[1], *a6 = NULL;
	for (int k = 0; k < ndests; k++)
		if (!strcmp(dests[k].form, "v6")) {
			a6 = &dests[k];
			break;
		}
	for (int path = 0; path < NPATHS; path++) {
		if (!path_applies(path, tr))
			continue;
		for (int k = 0; k < ndests; k++)
			run_cell(tr, path, &dests[k], a4, am, a6 ? a6 : am);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	init_protos();
	if (argc == 2 && !strcmp(argv[1], "enum")) {
		do_enum();
		return 0;
	}
	if (argc < 4 || strcmp(argv[1], "sweep")) {
		fprintf(stderr, "usage: sockmatrix enum | sweep TRIPLES LABEL=ADDR...\n");
		return 2;
	}
	for (int k = 3; k < argc; k++) {
		char *eq = strchr(argv[k], '=');
		if (!eq) {
			fprintf(stderr, "sockmatrix: LABEL=ADDR: %s\n", argv[k]);
			return 2;
		}
		*eq = 0;
		add_dest(argv[k], eq + 1);
	}
	if (ndests < 2 || strcmp(dests[0].form, "v4")) {
		fprintf(stderr, "sockmatrix: the first destination must be IPv4\n");
		return 2;
	}
	do_enum();
	static struct triple all[8192];
	int nall = 0;
	FILE *f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		return 2;
	}
	struct triple t;
	while (nall < 8192 && fscanf(f, "%d %d %d", &t.f, &t.t, &t.p) == 3)
		all[nall++] = t;
	fclose(f);
	for (int k = 0; k < nmade; k++) {
		int seen = 0;
		for (int j = 0; j < nall && !seen; j++)
			seen = all[j].f == made[k].f && all[j].t == made[k].t && all[j].p == made[k].p;
		if (!seen && nall < 8192)
			all[nall++] = made[k];
	}
	for (int k = 0; k < nall; k++)
		sweep_triple(&all[k]);
	printf("done %d cells\n", cell_idx);
	return 0;
}
