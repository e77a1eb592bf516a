/* floor: what the kernel alone charges for a container's start, the floor scripts/bench
 * --profile sets moat's steps against. No runtime work: no cgroup, mount, policy or state.
 *
 *   floor new PROG     clone into new mount, UTS, IPC, pid and network namespaces (the
 *                      bench bundle's), execute PROG there, wait for it
 *   floor join PID PROG  join the namespaces of PID (one setns on its pidfd), fork,
 *                      execute PROG, wait: the floor of `exec`
 *
 * Exits with PROG's status. Built static (gcc -O2 -static) so its own start costs what a
 * static /bin/true's does. */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define NEW_NS (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET)

static int run(const char *prog)
{
	pid_t pid = fork();
	if (pid < 0)
		return perror("fork"), 125;
	if (pid == 0) {
		char *argv[] = {(char *)prog, NULL};
		execv(prog, argv);
		_exit(127);
	}
	int st;
	if (waitpid(pid, &st, 0) < 0)
		return perror("waitpid"), 125;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "new")) {
		/* unshare then fork: the child is the new pid namespace's init, as a
		 * container's is (clone(2) with these flags does the same in one call). */
		if (unshare(NEW_NS))
			return perror("unshare"), 125;
		return run(argv[2]);
	}
	if (argc == 4 && !strcmp(argv[1], "join")) {
		int pidfd = (int)syscall(SYS_pidfd_open, atoi(argv[2]), 0);
		if (pidfd < 0)
			return perror("pidfd_open"), 125;
		if (setns(pidfd, NEW_NS))
			return perror("setns"), 125;
		return run(argv[3]);
	}
	fprintf(stderr, "usage: floor new PROG | floor join PID PROG\n");
	return 2;
}
