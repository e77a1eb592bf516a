/*
 * rawprobe: the packet program's in-container client (tests/egress_packets.rs). Built
 * statically at test time and copied into a container's rootfs. One line per command.
 *
 *   rawprobe send FAM PROTO DST PORT MARK MODE
 *       one packet of IP protocol PROTO (6 TCP, 17 UDP, 1/58 ICMP echo, any other number:
 *       MARK as its whole payload) to DST, the TCP/UDP destination port PORT, MARK in the
 *       payload, from a raw socket. FAM 4 or 6. MODE:
 *         hdr    the whole IP header written here (IPPROTO_RAW, header included)
 *         l4     the kernel writes the IP header (socket(FAM, SOCK_RAW, PROTO))
 *         srr    hdr with an IPv4 loose source route option (FAM 4) / an IPv6 routing
 *                header (FAM 6) naming DST
 *         frag   hdr as a non-first fragment (offset 800 bytes)
 *         ferr   hdr, ICMP(v6) destination unreachable (an error) quoting MARK
 *       "send FAM PROTO DST PORT MODE ok" | "... err ERRNO"
 *   rawprobe family FAM TYPE PROTO   socket(2): "family F T P ok" | "... err ERRNO"
 *   rawprobe serve PORT SECS         accept one TCP connection on [::]:PORT, write
 *       "served\n": "serve ok" | "serve err ERRNO"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IPV6_HDRINCL
#define IPV6_HDRINCL 36
#endif

static int fail(const char *what)
{
	printf("%s err %s\n", what, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
	return 1;
}

/* The container's first global IPv6 address (a header written here needs a source). */
static int src6(struct in6_addr *out)
{
	struct ifaddrs *ifa, *i;
	if (getifaddrs(&ifa))
		return -1;
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6)
			continue;
		struct in6_addr *a = &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_LINKLOCAL(a))
			continue;
		*out = *a;
		freeifaddrs(ifa);
		return 0;
	}
	freeifaddrs(ifa);
	return -1;
}

/* The upper layer: a TCP SYN, a UDP header, an ICMP(v6) echo request or error, or nothing. */
static size_t l4(uint8_t *b, int fam, int proto, int port, const char *mark, int err)
{
	size_t n = 0, m = strlen(mark);
	if (proto == IPPROTO_TCP) {
		b[0] = 0x9c, b[1] = 0x40; /* 40000 */
		b[2] = port >> 8, b[3] = port;
		b[12] = 5 << 4, b[13] = 0x02, b[14] = 0xff, b[15] = 0xff;
		n = 20;
	} else if (proto == IPPROTO_UDP) {
		b[0] = 0x9c, b[1] = 0x40;
		b[2] = port >> 8, b[3] = port;
		b[4] = (8 + m) >> 8, b[5] = 8 + m;
		n = 8;
	} else if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) {
		if (err)
			b[0] = fam == 4 ? 3 : 1, b[1] = fam == 4 ? 3 : 4;
		else
			b[0] = fam == 4 ? 8 : 128;
		n = 8;
	}
	memcpy(b + n, mark, m);
	return n + m;
}

static int send_raw(int fam, int proto, const char *dst, int port, const char *mark, const char *mode)
{
	char what[256];
	snprintf(what, sizeof what, "send %d %d %s %d %s", fam, proto, dst, port, mode);
	int hdr = strcmp(mode, "l4") != 0, srr = !strcmp(mode, "srr"), frag = !strcmp(mode, "frag");
	int err = !strcmp(mode, "ferr");
	uint8_t b[1500] = {0};
	size_t n;
	int s;
	if (fam == 4) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		if (inet_pton(AF_INET, dst, &sa.sin_addr) != 1)
			return printf("%s err address\n", what), 1;
		s = socket(AF_INET, SOCK_RAW, hdr ? IPPROTO_RAW : proto);
		if (s < 0)
			return fail(what);
		if (!hdr) {
			n = l4(b, 4, proto, port, mark, 0);
		} else {
			size_t ihl = srr ? 28 : 20;
			if (srr) {
				b[20] = 1; /* NOP */
				b[21] = 131, b[22] = 7, b[23] = 4;
				memcpy(b + 24, &sa.sin_addr, 4);
			}
			n = ihl + l4(b + ihl, 4, proto, port, mark, err);
			b[0] = 0x40 | (ihl / 4);
			b[2] = n >> 8, b[3] = n;
			b[4] = 0x12, b[5] = 0x34;
			if (frag)
				b[6] = 0, b[7] = 100; /* offset 100 * 8 bytes */
			b[8] = 64, b[9] = proto;
			memcpy(b + 16, &sa.sin_addr, 4);
		}
		if (sendto(s, b, n, 0, (struct sockaddr *)&sa, sizeof sa) < 0)
			return fail(what);
	} else {
		struct sockaddr_in6 sa = {.sin6_family = AF_INET6};
		if (inet_pton(AF_INET6, dst, &sa.sin6_addr) != 1)
			return printf("%s err address\n", what), 1;
		s = socket(AF_INET6, SOCK_RAW, hdr ? IPPROTO_RAW : proto);
		if (s < 0)
			return fail(what);
		if (!hdr) {
			n = l4(b, 6, proto, port, mark, 0);
		} else {
			int one = 1;
			struct in6_addr src;
			if (setsockopt(s, IPPROTO_IPV6, IPV6_HDRINCL, &one, sizeof one) < 0)
				return fail(what);
			if (src6(&src))
				return printf("%s err nosource\n", what), 1;
			size_t off = 40;
			uint8_t *next = b + 6;
			if (srr) { /* type 0, one segment left: DST */
				*next = IPPROTO_ROUTING;
				next = b + off;
				b[off + 1] = 2, b[off + 2] = 0, b[off + 3] = 1;
				memcpy(b + off + 8, &sa.sin6_addr, 16);
				off += 24;
			}
			if (frag) {
				*next = IPPROTO_FRAGMENT;
				next = b + off;
				b[off + 2] = (100 * 8) >> 8, b[off + 3] = (100 * 8) & 0xf8;
				b[off + 7] = 1;
				off += 8;
			}
			*next = proto;
			n = off + l4(b + off, 6, proto, port, mark, err);
			b[0] = 0x60;
			b[4] = (n - 40) >> 8, b[5] = n - 40;
			b[7] = 64;
			memcpy(b + 8, &src, 16);
			memcpy(b + 24, &sa.sin6_addr, 16);
		}
		if (sendto(s, b, n, 0, (struct sockaddr *)&sa, sizeof sa) < 0)
			return fail(what);
	}
	printf("%s ok\n", what);
	return 0;
}

static int family(int f, int t, int p)
{
	char what[64];
	snprintf(what, sizeof what, "family %d %d %d", f, t, p);
	int s = socket(f, t, p);
	if (s < 0)
		return fail(what);
	printf("%s ok\n", what);
	close(s);
	return 0;
}

static int serve(int port, int secs)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	int one = 1, s = socket(AF_INET6, SOCK_STREAM, 0);
	if (s < 0)
		return fail("serve");
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s, (struct sockaddr *)&sa, sizeof sa) || listen(s, 4))
		return fail("serve");
	printf("serve listening\n");
	fflush(stdout);
	struct pollfd p = {.fd = s, .events = POLLIN};
	if (poll(&p, 1, secs * 1000) != 1)
		return printf("serve err TIMEOUT\n"), 1;
	int c = accept(s, NULL, NULL);
	if (c < 0)
		return fail("serve");
	if (write(c, "served\n", 7) != 7)
		return fail("serve");
	char buf[64];
	(void)!read(c, buf, sizeof buf);
	printf("serve ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 8 && !strcmp(argv[1], "send"))
		return send_raw(atoi(argv[2]), atoi(argv[3]), argv[4], atoi(argv[5]), argv[6], argv[7]);
	if (argc >= 5 && !strcmp(argv[1], "family"))
		return family(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (argc >= 4 && !strcmp(argv[1], "serve"))
		return serve(atoi(argv[2]), atoi(argv[3]));
	fprintf(stderr, "usage: rawprobe send|family|serve ...\n");
	return 2;
}
