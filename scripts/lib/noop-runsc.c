/* noop-runsc: stands in for runsc when scripts/bench measures moat's own cost per gVisor
 * call. It does no work but keep the one piece of runsc state moat reads before naming
 * an id to runsc: `create ID` makes `<root>/ID_sandbox:ID.state` (src/gvisor/runsc.rs
 * known_exactly), `delete ID` removes it; it answers the three questions moat's probe asks
 * of a runsc (src/gvisor/probe.rs: --version, help platforms, flags) as runsc 20221219
 * does; every other call exits 0 at once.
 * Built by scripts/bench with `gcc -O2 -static`, so its start costs what /bin/true's does. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const char *root = NULL, *sub = NULL, *id = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--root=", 7))
			root = argv[i] + 7;
		else if (argv[i][0] != '-' && !sub)
			sub = argv[i];
		else if (argv[i][0] != '-')
			id = argv[i];
	}
	if (argc == 2 && !strcmp(argv[1], "--version")) {
		puts("runsc version 0.0~noop");
		return 0;
	}
	if (sub && !strcmp(sub, "help")) {
		puts("ptrace");
		return 0;
	}
	if (sub && !strcmp(sub, "flags")) {
		puts("  -platform string\n    \tspecifies which platform to use (default \"ptrace\")");
		return 0;
	}
	if (!root || !sub || !id)
		return 0;
	char path[4096];
	if (snprintf(path, sizeof path, "%s/%s_sandbox:%s.state", root, id, id) >= (int)sizeof path)
		return 1;
	if (!strcmp(sub, "create")) {
		int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		return fd < 0;
	}
	if (!strcmp(sub, "delete"))
		unlink(path);
	return 0;
}
