/*
 * sockprobe: the listening-socket audit's client (tests/sockets.rs). Built statically at
 * test time; run on the host as an unprivileged user (setpriv) and copied into another
 * container's rootfs. One line per probe:
 *
 *   sockprobe unix TYPE NAME   connect to the Unix socket NAME of type TYPE (1 stream,
 *                              2 dgram, 5 seqpacket, as /proc/net/unix writes it); a NAME
 *                              beginning with '@' is abstract, and as /proc/net/unix
 *                              writes NUL bytes as '@', the name is tried with every '@'
 *                              a NUL and then with only the first one:
 *                              "unix NAME ok" | "unix NAME err ERRNO"
 *   sockprobe tcp ADDR PORT    connect (2 s timeout): "tcp ADDR PORT ok" | "... err ERRNO"
 *   sockprobe udp ADDR PORT    send a DNS query for "." and wait 1 s for any answer (UDP
 *                              has no connection: an answer is what shows a reachable
 *                              listener): "udp ADDR PORT ok" | "... err ERRNO|TIMEOUT"
 *
 * ERRNO is the symbolic name (EACCES, ECONNREFUSED, ...). ADDR may be IPv4 or IPv6.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *errname(int e)
{
	const char *n = strerrorname_np(e);
	return n ? n : "E?";
}

static int unix_try(int type, const char *name, int all_nul)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	if (len > sizeof(a.sun_path))
		return ENAMETOOLONG;
	memcpy(a.sun_path, name, len);
	if (name[0] == '@') {
		for (size_t i = 0; i < len; i++)
			if (a.sun_path[i] == '@' && (all_nul || i == 0))
				a.sun_path[i] = 0;
	}
	int s = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errno;
	socklen_t sl = offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '@' ? 0 : 1);
	int r = connect(s, (struct sockaddr *)&a, sl) == 0 ? 0 : errno;
	close(s);
	return r;
}

static int probe_unix(int type, const char *name)
{
	int e = unix_try(type, name, 1);
	if (e && name[0] == '@')
		e = unix_try(type, name, 0);
	if (e)
		printf("unix %s err %s\n", name, errname(e));
	else
		printf("unix %s ok\n", name);
	return 0;
}

static int addr_of(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *sl)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		*sl = sizeof(*a4);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, addr, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		*sl = sizeof(*a6);
		return AF_INET6;
	}
	return -1;
}

static int probe_ip(const char *proto, const char *addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t sl;
	int fam = addr_of(addr, port, &ss, &sl);
	int udp = strcmp(proto, "udp") == 0;
	if (fam < 0) {
		printf("%s %s %d err EINVAL\n", proto, addr, port);
		return 0;
	}
	int s = socket(fam, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0) {
		printf("%s %s %d err %s\n", proto, addr, port, errname(errno));
		return 0;
	}
	int e = 0;
	if (connect(s, (struct sockaddr *)&ss, sl) != 0 && errno != EINPROGRESS)
		e = errno;
	if (!e && !udp) {
		struct pollfd p = {.fd = s, .events = POLLOUT};
		if (poll(&p, 1, 2000) != 1) {
			printf("tcp %s %d err TIMEOUT\n", addr, port);
			return 0;
		}
		socklen_t el = sizeof(e);
		getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
	}
	if (!e && udp) {
		/* id 0x6d6f, recursion desired, one question: ". IN NS" */
		static const unsigned char q[] = {0x6d, 0x6f, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1};
		if (send(s, q, sizeof(q), 0) < 0) {
			e = errno;
		} else {
			struct pollfd p = {.fd = s, .events = POLLIN};
			if (poll(&p, 1, 1000) != 1) {
				printf("udp %s %d err TIMEOUT\n", addr, port);
				return 0;
			}
			char buf[512];
			if (recv(s, buf, sizeof(buf), 0) < 0)
				e = errno;
		}
	}
	if (e)
		printf("%s %s %d err %s\n", proto, addr, port, errname(e));
	else
		printf("%s %s %d ok\n", proto, addr, port);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && strcmp(argv[1], "unix") == 0) {
		int t = atoi(argv[2]);
		return probe_unix(t == 2 ? SOCK_DGRAM : t == 5 ? SOCK_SEQPACKET : SOCK_STREAM, argv[3]);
	}
	if (argc == 4 && (strcmp(argv[1], "tcp") == 0 || strcmp(argv[1], "udp") == 0))
		return probe_ip(argv[1], argv[2], atoi(argv[3]));
	fprintf(stderr, "usage: sockprobe unix TYPE NAME | tcp|udp ADDR PORT\n");
	return 2;
}
