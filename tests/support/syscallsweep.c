/* Every x86_64 system call number (but those that would end, fork or stall this
 * process or hang up its terminal), called with every argument -1, each in a child; prints
 * "NR ERRNO" a line (0: it returned; negative: the signal that ended the child),
 * then two probes: ioctl TIOCSTI with high bits set in its 32-bit cmd ("tiocsti"),
 * and prctl(PR_GET_NO_NEW_PRIVS)'s answer ("nnp"). Used to compare two seccomp
 * filters of one profile call by call (tests/gvisor.rs). */
#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const long skip[] = {
	15,  /* rt_sigreturn */
	34,  /* pause */
	56,  /* clone */
	57,  /* fork */
	58,  /* vfork */
	60,  /* exit */
	62,  /* kill: kill(-1, ...) answers by which processes exist */
	153, /* vhangup */
	231, /* exit_group */
	435, /* clone3 */
};

static int skipped(long nr)
{
	for (unsigned i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
		if (skip[i] == nr)
			return 1;
	return 0;
}

/* The call in a child of its own: its errno (0: it returned) as the child's status, or
 * minus the signal that ended it (runsc 20240729 ends a process that makes an unknown
 * system call between 335 and 423 with SIGILL, filter or none). */
static int call(long nr, long a)
{
	pid_t pid = fork();
	if (pid < 0)
		return -1000;
	if (pid == 0) {
		errno = 0;
		long r = syscall(nr, a, a, a, a, a, a);
		_exit(r == -1 ? errno : 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1001;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (long nr = 0; nr <= 470; nr++)
		if (!skipped(nr))
			printf("%ld %d\n", nr, call(nr, -1));
	printf("1000 %d\n", call(1000, -1));
	errno = 0;
	long r = syscall(SYS_ioctl, 0, 0x100005412L, "x");
	printf("tiocsti %d\n", r == -1 ? errno : 0);
	printf("nnp %d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0));
	return 0;
}
