/*
 * Test fixture for tests/bounded.rs: fills a directory's filesystem with user xattrs, as a
 * container would to store data outside a tmpfs's `size=` (busybox has no setfattr).
 * Built statically at test time and copied into the container's rootfs.
 *
 *   xattrfill DIR [MAX]
 *                   create DIR/f0, DIR/f1, ... and set user.<n> xattrs of 4000 bytes on
 *                   each (64 a file) until the filesystem refuses, or MAX bytes of values
 *                   are stored (a cap that does not hold stops there, not at the host's
 *                   RAM); prints one line:
 *                   "xattrs=<n> value_bytes=<b> name_bytes=<b> files=<n> stop=<why>",
 *                   <why> ENOSPC, LIMIT or the error's text
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#define VALUE 4000
#define PER_FILE 64

int main(int argc, char **argv)
{
	static char value[VALUE];
	char path[4096], name[64];
	unsigned long n = 0, files = 0, value_bytes = 0, name_bytes = 0;
	int stop = 0;

	unsigned long max = 0;

	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: xattrfill DIR [MAX]\n");
		return 2;
	}
	if (argc == 3)
		max = strtoul(argv[2], NULL, 10);
	memset(value, 'x', sizeof(value));
	for (;;) {
		snprintf(path, sizeof(path), "%s/f%lu", argv[1], files);
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0) {
			stop = errno;
			break;
		}
		close(fd);
		files++;
		for (int i = 0; i < PER_FILE; i++) {
			if (max && value_bytes + sizeof(value) > max) {
				stop = -1;
				goto out;
			}
			snprintf(name, sizeof(name), "user.%lu", n);
			if (setxattr(path, name, value, sizeof(value), XATTR_CREATE) != 0) {
				stop = errno;
				goto out;
			}
			n++;
			value_bytes += sizeof(value);
			name_bytes += strlen(name);
		}
	}
out:
	printf("xattrs=%lu value_bytes=%lu name_bytes=%lu files=%lu stop=%s\n", n, value_bytes,
	       name_bytes, files,
	       stop == ENOSPC ? "ENOSPC" : stop < 0 ? "LIMIT" : strerror(stop));
	return stop == ENOSPC ? 0 : 1;
}
