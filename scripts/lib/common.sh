# shellcheck shell=bash
# Shared helpers for moat's test and benchmark scripts. Sourced, never executed.
#
# Everything here is runtime-agnostic: the scripts drive whichever runc-compatible
# binary $RUNTIME names, so the same checks run against runc, crun and moat.

# Directory holding the scripts (scripts/), resolved once.
MOAT_SCRIPTS_DIR=${MOAT_SCRIPTS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
# Persistent cache for the busybox rootfs and the OCI image tarball built from it.
MOAT_CACHE=${MOAT_CACHE:-/var/cache/moat-e2e}

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ensure_cmds CMD:PKG ... -- install the Debian package PKG for every CMD missing
# from PATH (CMD may also be an absolute path). Idempotent: nothing runs when all
# are present; `apt-get update` only when the first install attempt fails. Waits for
# the dpkg lock, since other jobs on the machine may be installing at the same time.
ensure_cmds() {
	local spec cmd pkg missing=()
	for spec in "$@"; do
		cmd=${spec%%:*} pkg=${spec#*:}
		if [[ $cmd == /* ]]; then [[ -x $cmd ]] && continue; else command -v "$cmd" >/dev/null 2>&1 && continue; fi
		missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	apt_install "${missing[@]}"
}

# ensure_pkgs PKG ... -- like ensure_cmds, keyed on dpkg's installed status.
ensure_pkgs() {
	local pkg missing=()
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
	done
	((${#missing[@]})) || return 0
	apt_install "${missing[@]}"
}

apt_install() {
	[[ $(id -u) == 0 ]] || die "need root to install: $*"
	log "installing: $*"
	local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends)
	if ! "${apt[@]}" install "$@" >&2; then
		"${apt[@]}" update >&2 || true
		"${apt[@]}" install "$@" >&2 || die "apt-get install $* failed"
	fi
}

# Result bookkeeping. Each check prints `ok - NAME` or `not ok - NAME: DETAIL`;
# summary prints `N passed, M failed` and returns non-zero when anything failed.
T_PASS=0
T_FAIL=0
ok() { T_PASS=$((T_PASS + 1)); printf 'ok - %s\n' "$1"; }
not_ok() {
	T_FAIL=$((T_FAIL + 1))
	# Keep the detail on one line: the line is the whole report for that check.
	local d=${2//$'\n'/\\n}
	printf 'not ok - %s: %s\n' "$1" "${d:0:400}"
}
# expect NAME WANT GOT [EXTRA-DETAIL]: ok if the strings match exactly.
expect() {
	if [[ $3 == "$2" ]]; then ok "$1"; else not_ok "$1" "want '$2', got '$3'${4:+ ($4)}"; fi
}
summary() {
	printf '%d passed, %d failed\n' "$T_PASS" "$T_FAIL"
	((T_FAIL == 0))
}

# cap CMD... -- run CMD with a timeout; sets OUT (stdout, trailing newlines stripped),
# ERR (stderr) and RC. Never fails, so it is safe under `set -e`. A runtime under test
# may hang, hence the timeout (CMD_TIMEOUT seconds, default 60; rc 124 on expiry).
# shellcheck disable=SC2034 # OUT, ERR and RC are read by the caller
cap() {
	local errf
	errf=$(mktemp)
	RC=0
	OUT=$(timeout -k 5 "${CMD_TIMEOUT:-60}" "$@" </dev/null 2>"$errf") || RC=$?
	ERR=$(<"$errf")
	rm -f "$errf"
}

# umount_under DIR -- unmount every mount point at or below DIR, deepest first.
umount_under() {
	local dir mp
	dir=$(realpath -m "$1")
	# mountinfo field 5 is the mount point, with spaces etc. escaped as octal.
	awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo |
		sort -r -u | while IFS= read -r mp; do
		mp=$(printf '%b' "$mp")
		umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || log "warning: could not unmount $mp"
	done
}

# remove_tree DIR -- unmount what is below DIR, then delete it without crossing into
# any mount that survived.
remove_tree() {
	[[ -n ${1:-} && -e $1 ]] || return 0
	umount_under "$1"
	rm -rf --one-file-system -- "$1" || log "warning: could not remove $1"
}

# rmdir_cgroup REL [WAIT_S] -- remove the cgroup REL (e.g. /moat-e2e-123) from every
# hierarchy (v1 controllers and the v2 tree), leaves first. Only empty cgroups can
# go; processes still exiting (a conmon after `rm -f`) are waited for up to WAIT_S
# seconds (default 10).
rmdir_cgroup() {
	local rel=${1#/} deadline=$((SECONDS + ${2:-10})) h left
	[[ -n $rel ]] || return 0
	while :; do
		left=0
		for h in /sys/fs/cgroup /sys/fs/cgroup/*/; do
			[[ -d ${h%/}/$rel ]] || continue
			find "${h%/}/$rel" -depth -type d -exec rmdir {} + 2>/dev/null || true
			[[ -d ${h%/}/$rel ]] && left=1
		done
		((left)) || return 0
		if ((SECONDS >= deadline)); then
			log "warning: cgroup $rel still busy, left in place"
			return 0
		fi
		sleep 0.2
	done
}

# wait_pid_gone PID TIMEOUT_S -- true once PID no longer runs. A zombie counts as
# gone: PID 1 on this host reaps orphans late.
pid_alive() {
	local st
	[[ -r /proc/$1/stat ]] || return 1
	st=$(sed -E 's/^.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && $st != Z && $st != X ]]
}
wait_pid_gone() {
	local pid=$1 deadline=$((SECONDS + $2))
	while pid_alive "$pid"; do
		((SECONDS < deadline)) || return 1
		sleep 0.05
	done
}

# resolve_runtime NAME-OR-PATH -- print the absolute path of a runtime binary.
resolve_runtime() {
	local r=$1
	if [[ $r == */* ]]; then [[ -x $r ]] && { realpath "$r"; return 0; }; return 1; fi
	command -v "$r" 2>/dev/null
}

# rootfs_version -- the stamp mkrootfs writes; changes when busybox or the layout does.
MOAT_ROOTFS_LAYOUT=1
rootfs_version() {
	local sum
	sum=$(sha256sum /bin/busybox | cut -c1-16)
	printf 'layout=%s busybox=%s\n' "$MOAT_ROOTFS_LAYOUT" "$sum"
}

# cached_rootfs -- build (if needed) and print the shared cached rootfs path.
cached_rootfs() {
	"$MOAT_SCRIPTS_DIR/mkrootfs" "$MOAT_CACHE/rootfs" >&2
	printf '%s\n' "$MOAT_CACHE/rootfs"
}
