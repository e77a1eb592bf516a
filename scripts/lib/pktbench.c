/*
 * pktbench: scripts/bench's per-packet cost test (--tests packets). Static; the sender
 * runs in a container, the sink in the world's network namespace.
 *
 *   pktbench sink PORT            TCP: accept and read to EOF, again and again; UDP: read
 *                                 datagrams on the same port; until killed
 *   pktbench tcp ADDR PORT MB     connect, write MB MiB in 64 KiB writes, shutdown, wait
 *                                 for the sink's EOF: prints the milliseconds
 *   pktbench udp ADDR PORT N      a connected UDP socket (no sendmsg hook per datagram)
 *                                 sends N datagrams of 1200 bytes: prints the milliseconds
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int conn(int type, const char *addr, int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, addr, &sa.sin_addr);
	int s = socket(AF_INET, type, 0);
	if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("connect");
		exit(1);
	}
	return s;
}

static int sink(int port)
{
	static char buf[1 << 16];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1, t = socket(AF_INET, SOCK_STREAM, 0), u = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(t, (struct sockaddr *)&sa, sizeof sa) || listen(t, 8) ||
	    bind(u, (struct sockaddr *)&sa, sizeof sa)) {
		perror("sink");
		return 1;
	}
	for (;;) {
		struct pollfd p[2] = {{.fd = t, .events = POLLIN}, {.fd = u, .events = POLLIN}};
		poll(p, 2, -1);
		if (p[1].revents)
			while (recv(u, buf, sizeof buf, MSG_DONTWAIT) > 0)
				;
		if (p[0].revents) {
			int c = accept(t, NULL, NULL);
			while (c >= 0 && read(c, buf, sizeof buf) > 0)
				;
			close(c);
		}
	}
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	if (argc >= 3 && !strcmp(argv[1], "sink"))
		return sink(atoi(argv[2]));
	if (argc >= 5 && !strcmp(argv[1], "tcp")) {
		long mb = atol(argv[4]);
		double t0 = now_ms();
		int s = conn(SOCK_STREAM, argv[2], atoi(argv[3]));
		for (long i = 0; i < mb * 16; i++)
			for (size_t off = 0; off < sizeof buf;) {
				ssize_t n = write(s, buf + off, sizeof buf - off);
				if (n <= 0) {
					perror("write");
					return 1;
				}
				off += n;
			}
		shutdown(s, SHUT_WR);
		while (read(s, buf, sizeof buf) > 0)
			;
		printf("%.3f\n", now_ms() - t0);
		return 0;
	}
	if (argc >= 5 && !strcmp(argv[1], "udp")) {
		long n = atol(argv[4]);
		int s = conn(SOCK_DGRAM, argv[2], atoi(argv[3]));
		double t0 = now_ms();
		for (long i = 0; i < n; i++)
			(void)!send(s, buf, 1200, 0);
		printf("%.3f\n", now_ms() - t0);
		return 0;
	}
	fprintf(stderr, "usage: pktbench sink PORT | tcp ADDR PORT MB | udp ADDR PORT N\n");
	return 2;
}
