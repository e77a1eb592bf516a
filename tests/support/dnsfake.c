/*
 * dnsfake: a container process answering for the DNS forwarder's upstream
 * (tests/egress_dns.rs). Bound to ADDR:53 (UDP), it answers every query it receives with
 * one A record, ANSWER, and reports each answer's fate:
 *
 *   dnsfake ADDR ANSWER SECS   "sent" | "send err ERRNO" per query, then "done"
 *
 * Built statically at test time and copied into the container's rootfs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: dnsfake ADDR ANSWER SECS\n");
		return 2;
	}
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53) };
	struct in_addr answer;
	if (inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 || inet_pton(AF_INET, argv[2], &answer) != 1)
		return 2;
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
		printf("bind err %s\n", strerror(errno));
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	time_t end = time(NULL) + atoi(argv[3]);
	while (time(NULL) < end) {
		struct pollfd p = { .fd = s, .events = POLLIN };
		if (poll(&p, 1, 200) <= 0)
			continue;
		unsigned char m[1500];
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t n = recvfrom(s, m, sizeof m - 16, 0, (struct sockaddr *)&from, &fl);
		if (n < 12)
			continue;
		/* The question back, as a response with one answer: A ANSWER, TTL 60. */
		m[2] |= 0x80;
		m[3] = 0x80;
		m[6] = 0;
		m[7] = 1;
		m[8] = m[9] = m[10] = m[11] = 0;
		unsigned char rr[16] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4 };
		memcpy(rr + 12, &answer, 4);
		memcpy(m + n, rr, 16);
		if (sendto(s, m, n + 16, 0, (struct sockaddr *)&from, fl) < 0)
			printf("send err %s\n", errno == EPERM ? "EPERM" : strerror(errno));
		else
			printf("sent\n");
		fflush(stdout);
	}
	printf("done\n");
	return 0;
}
