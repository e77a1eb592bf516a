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

# on_exit FUNC -- run FUNC when the script ends: on exit, and on INT or TERM (which exit
# 130 or 143, so FUNC sees that status).
on_exit() {
	# shellcheck disable=SC2064 # FUNC is expanded now, on purpose
	trap "$1" EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
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
			# A plain tmpfs standing for a hierarchy this host does not mount (hugetlb,
			# net_cls, … here): podman writes conmon's `tasks` file there, which no rmdir
			# removes. Not a cgroup: removed as files.
			if [[ $(stat -f -c %T "$h") == tmpfs ]]; then
				rm -r --one-file-system -- "${h%/}/$rel" 2>/dev/null || true
				continue
			fi
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

# stop_pid PID TIMEOUT_S -- SIGTERM PID, SIGKILL it if it still runs after TIMEOUT_S
# seconds, then reap it when it is this shell's child. Only the pid given, never a name;
# an empty PID or one already gone is nothing to do. Never fails.
stop_pid() {
	[[ -n ${1:-} ]] && pid_alive "$1" || return 0
	kill -TERM "$1" 2>/dev/null || true
	wait_pid_gone "$1" "$2" || kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# wait_for TIMEOUT_S CMD... -- run CMD every 0.1 s until it succeeds (true) or TIMEOUT_S
# seconds pass (false).
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@"; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# cap_until WANT TRIES CMD... -- `cap CMD` up to TRIES times, 0.1 s apart, until OUT is
# WANT (for what a container does a moment after the call that asked for it). Leaves
# OUT, ERR and RC of the last try.
cap_until() {
	local want=$1 tries=$2 i
	shift 2
	for ((i = 0; i < tries; i++)); do
		cap "$@"
		[[ $OUT == "$want" ]] && return 0
		sleep 0.1
	done
	return 1
}

# status_line KEY -- the value of `KEY:` in $OUT, a /proc/<pid>/status that cap captured.
status_line() { printf '%s\n' "$OUT" | awk -v k="$1:" '$1 == k {print $2}'; }

# --- containerd -----------------------------------------------------------------
# ctr_up SOCK PID -- wait (up to 20 s) until containerd, started as PID, answers on
# SOCK; false when it died or never answered.
ctr_up() {
	local i
	for ((i = 0; i < 200; i++)); do
		[[ -S $1 ]] && ctr -a "$1" version >/dev/null 2>&1 && return 0
		pid_alive "$2" || break
		sleep 0.1
	done
	return 1
}

# ensure_cri_client [--no-gogo] -- what scripts/lib/cri.py and its siblings need: python3's
# gRPC, protobuf and grpc_tools.protoc (bookworm's protoc imports pkg_resources, which
# python3-grpc-tools does not depend on; forky's needs none and has no such package), and
# gogo.proto, which api.proto before cri-api 0.3x imports (--no-gogo: the caller installs it
# only where its api.proto imports it). Installed only when missing: the world and the VM
# guests carry them and are offline.
ensure_cri_client() {
	/usr/bin/python3 -c 'import grpc, google.protobuf, grpc_tools' 2>/dev/null ||
		ensure_pkgs python3-grpcio python3-protobuf python3-grpc-tools
	/usr/bin/python3 -c 'import grpc_tools.protoc' 2>/dev/null || ensure_pkgs python3-pkg-resources
	[[ ${1:-} == --no-gogo || -f /usr/share/gocode/src/github.com/gogo/protobuf/gogoproto/gogo.proto ]] ||
		ensure_pkgs golang-github-gogo-protobuf-dev
}

# containerd_major -- the installed containerd's major version (1 on Debian 12, 2 on forky).
containerd_major() {
	containerd --version | awk '{ v = $3; sub(/^v/, "", v); split(v, p, "."); print p[1] }'
}

# containerd_config KEY=VALUE... -- print a private containerd's config.toml in the format
# of the installed containerd: version 2 for 1.x (the CRI's settings in one plugin,
# io.containerd.grpc.v1.cri), version 3 for 2.x (io.containerd.cri.v1.images holds the
# snapshotter and the sandbox image, io.containerd.cri.v1.runtime the CNI network,
# oom_score_adj and the runtime handlers; io.containerd.grpc.v1.cri only the streaming
# server). Keys: dir (root, state and opt below it), sock, cri (on|off), sandbox (image),
# cni_conf, cni_bin, handler, binary (its BinaryName), runtime_root (its Root, optional),
# systemd_cgroup (true|false, default false). restrict_oom_score_adj: sandboxes ask for
# oom_score_adj -998, which needs CAP_SYS_RESOURCE; root on this host lacks it
# (CapBnd 000001fffeffffff), so create would fail.
containerd_config() {
	local kv dir='' sock='' cri=on sandbox='' cni_conf='' cni_bin='' handler='' binary='' runtime_root=''
	local systemd_cgroup=false disabled images runtime
	for kv in "$@"; do
		case ${kv%%=*} in
		dir | sock | cri | sandbox | cni_conf | cni_bin | handler | binary | runtime_root | systemd_cgroup)
			printf -v "${kv%%=*}" '%s' "${kv#*=}" ;;
		*) die "containerd_config: unknown key ${kv%%=*}" ;;
		esac
	done
	disabled='"io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"'
	[[ $cri == on ]] || disabled="\"io.containerd.grpc.v1.cri\", $disabled"
	if (($(containerd_major) >= 2)); then
		images='plugins."io.containerd.cri.v1.images"' runtime='plugins."io.containerd.cri.v1.runtime"'
		cat <<EOF
version = 3
root = "$dir/root"
state = "$dir/state"
disabled_plugins = [$disabled]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[$images]
  snapshotter = "overlayfs"
  [$images.pinned_images]
    sandbox = "$sandbox"

[$runtime]
  enable_selinux = false
  restrict_oom_score_adj = true
  [$runtime.cni]
    conf_dir = "$cni_conf"
    bin_dirs = ["$cni_bin"]
  [$runtime.containerd]
    default_runtime_name = "$handler"
    [$runtime.containerd.runtimes.$handler]
      runtime_type = "io.containerd.runc.v2"
      [$runtime.containerd.runtimes.$handler.options]
        BinaryName = "$binary"
${runtime_root:+        Root = \"$runtime_root\"
}        SystemdCgroup = $systemd_cgroup
EOF
		return
	fi
	cat <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
disabled_plugins = [$disabled]

[grpc]
  address = "$sock"
[ttrpc]
  address = "$sock.ttrpc"
[debug]
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox"
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "$cni_conf"
    bin_dir = "$cni_bin"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "$handler"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$handler]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.$handler.options]
        BinaryName = "$binary"
${runtime_root:+        Root = \"$runtime_root\"
}        SystemdCgroup = $systemd_cgroup
EOF
}

# containerd_up CONFIG SOCK LOG -- start containerd with CONFIG in the background (its
# output to LOG), DAEMON_PID its pid, and wait until it answers on SOCK; dies, showing
# LOG's tail, when it does not.
containerd_up() {
	containerd --config "$1" >"$3" 2>&1 &
	DAEMON_PID=$!
	ctr_up "$2" "$DAEMON_PID" && return 0
	tail -20 "$3" >&2
	die "containerd did not come up"
}

# ctr_remove_all SOCK NS... -- SIGKILL and delete every task, then delete every
# container, in each namespace NS of the containerd on SOCK (a script's cleanup).
ctr_remove_all() {
	local sock=$1 ns id
	shift
	for ns in "$@"; do
		for id in $(ctr -a "$sock" -n "$ns" task ls -q 2>/dev/null); do
			timeout 20 ctr -a "$sock" -n "$ns" task kill -s KILL "$id" >/dev/null 2>&1
			timeout 20 ctr -a "$sock" -n "$ns" task delete -f "$id" >/dev/null 2>&1
		done
		for id in $(ctr -a "$sock" -n "$ns" containers ls -q 2>/dev/null); do
			timeout 20 ctr -a "$sock" -n "$ns" containers delete "$id" >/dev/null 2>&1
		done
	done
	return 0
}

# oci_archive -- print the OCI image archive of the cached busybox rootfs (made once per
# rootfs version by lib/mkociarchive), for `ctr images import --base-name localhost/moat-bb`.
oci_archive() {
	local rootfs version tarball
	rootfs=$(cached_rootfs)
	version=$(sha256sum "$rootfs/.moat-rootfs-version" | cut -c1-12)
	tarball=$MOAT_CACHE/oci/moat-bb-$version.tar
	[[ -f $tarball ]] || "$MOAT_SCRIPTS_DIR/lib/mkociarchive" "$rootfs" "$tarball" >&2
	printf '%s\n' "$tarball"
}

# Tasks of the ctr argv the caller keeps in C=(ctr -a SOCK -n NS).
task_status() { "${C[@]}" task ls 2>/dev/null | awk -v id="$1" '$1 == id { print $3 }'; }
task_has_status() { [[ $(task_status "$1") == "$2" ]]; }
wait_status() { wait_for "$3" task_has_status "$1" "$2"; } # ID WANT TIMEOUT_S

# stop_shims SOCK RUNTIME-ROOT... -- a shim of the containerd on SOCK that outlived it:
# delete what $RUNTIME still has under each root, then SIGKILL those shims (by pid).
stop_shims() {
	local sock=$1 p pids=() r id
	shift
	for p in /proc/[0-9]*; do
		{ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "-address $sock " && pids+=("${p#/proc/}")
	done
	((${#pids[@]})) || return 0
	log "warning: stopping leftover shims ${pids[*]}"
	for r in "$@"; do
		[[ -d $r ]] || continue
		for id in $("$RUNTIME" --root "$r" list -q 2>/dev/null); do
			"$RUNTIME" --root "$r" delete -f "$id" >/dev/null 2>&1
		done
	done
	kill -KILL "${pids[@]}" 2>/dev/null
}

# --- podman ---------------------------------------------------------------------
# podman_image IMAGE PODMAN-ARGV... -- import the cached busybox rootfs as IMAGE unless
# IMAGE already carries this rootfs version (label moat.rootfs).
podman_image() {
	local img=$1 rootfs version have
	shift
	rootfs=$(cached_rootfs)
	version=$(<"$rootfs/.moat-rootfs-version")
	have=$("$@" image inspect -f '{{index .Labels "moat.rootfs"}}' "$img" 2>/dev/null || true)
	[[ $have == "$version" ]] && return 0
	tar -C "$rootfs" -c . | "$@" import -q --change "LABEL moat.rootfs=$version" \
		--change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin' --change 'CMD ["/bin/sh"]' - "$img" >/dev/null ||
		die "podman import failed"
}

# resolve_runtime NAME-OR-PATH -- print the absolute path of a runtime binary.
resolve_runtime() {
	local r=$1
	if [[ $r == */* ]]; then [[ -x $r ]] && { realpath "$r"; return 0; }; return 1; fi
	command -v "$r" 2>/dev/null
}

# runsc_select -- the runsc moat hands gVisor containers to: RUNSC (which must be an
# executable: a missing one fails the script, never passes it), else Debian's /usr/bin/runsc
# (installed when missing). Sets RUNSC to its absolute path.
runsc_select() {
	if [[ -z ${RUNSC:-} ]]; then
		ensure_cmds /usr/bin/runsc:runsc
		RUNSC=/usr/bin/runsc
	fi
	[[ -x $RUNSC ]] || die "RUNSC=$RUNSC is not an executable"
	RUNSC=$(realpath "$RUNSC")
}

# runsc_wrap MOAT DIR -- print the path of DIR/moat, a wrapper starting MOAT with RUNSC's
# directory first in PATH (moat finds runsc in PATH, which the engines set themselves) and
# argv[0] kept (an alias symlinked to the wrapper stays that alias), as scripts/e2e-gvisor.
runsc_wrap() {
	mkdir -p "$2"
	printf '#!/bin/bash\nPATH=%q:$PATH exec -a "$0" %q "$@"\n' "$(dirname "$RUNSC")" "$1" >"$2/moat"
	chmod 0755 "$2" "$2/moat"
	printf '%s\n' "$2/moat"
}

# runsc_default_platform -- RUNSC's default --platform (`runsc flags`, on stderr), the one moat passes
# when [gvisor] platform names none (src/gvisor/probe.rs).
runsc_default_platform() {
	"$RUNSC" flags 2>&1 | awk '$1 == "-platform" && $2 == "string" { p = 1; next }
		p && match($0, /\(default "[^"]*"\)/) { s = substr($0, RSTART + 10, RLENGTH - 12); print s; exit }'
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

# ensure_build_env: what building moat needs, for every script that builds it (scripts/test,
# scripts/demo, scripts/bench): the C toolchain and libseccomp.a for the static link, cargo,
# and rustup's musl target (.cargo/config.toml builds for it; a fresh rustup has only the
# host's target, and the build then fails with "can't find crate for std").
ensure_build_env() {
	ensure_pkgs gcc libc6-dev pkg-config libseccomp-dev
	command -v cargo >/dev/null || die "cargo is not installed (moat builds with the machine's Rust toolchain: https://rustup.rs)"
	if ! rustc --print target-libdir --target x86_64-unknown-linux-musl 2>/dev/null | xargs -r ls 2>/dev/null | grep -q '^libstd-'; then
		command -v rustup >/dev/null || die "the x86_64-unknown-linux-musl target is missing and rustup is not installed"
		log "adding rustup's x86_64-unknown-linux-musl target"
		rustup target add x86_64-unknown-linux-musl
	fi
}

# doc_snippet NAME: the code block of docs/integrations.md whose fence reads
# ```LANG snippet=NAME, exactly as printed (fails if there is none), so the e2e scripts
# use what a reader pastes.
doc_snippet() {
	awk -v want="snippet=$1" '
		!on && /^```/ { n = split($0, w, " "); for (i = 2; i <= n; i++) if (w[i] == want) { on = 1; found = 1; next } }
		on && /^```/ { exit }
		on { print }
		END { exit !found }' "$MOAT_SCRIPTS_DIR/../docs/integrations.md"
}

# doc_ns MOAT CMD...: CMD in a private mount namespace where moat is installed as
# docs/integrations.md says: /usr/local/bin and /etc/moat become overlays of themselves
# whose writes go to a temp dir (MOAT and the moat-dbus, moat-seccomp-exec and moat-criu beside it copied in, whatever CMD
# writes there), so the host keeps none of it (an /etc/moat it lacked is made for the mount
# point and removed after, as is the temp dir).
doc_ns() {
	local bin=$1 made= rc=0 tmp
	shift
	[[ -e /etc/moat ]] || { mkdir /etc/moat && made=1; }
	tmp=$(mktemp -d /tmp/moat-doc-ns.XXXXXX)
	unshare --mount --propagation private -- bash -c '
		set -e
		tmp=$1 bin=$2
		shift 2
		mount -t tmpfs -o mode=0700 moat-doc "$tmp"
		for d in /usr/local/bin /etc/moat; do
			n=${d//\//_}
			mkdir -p "$tmp/$n.up" "$tmp/$n.work"
			chmod 0755 "$tmp/$n.up"
			mount -t overlay -o "lowerdir=$d,upperdir=$tmp/$n.up,workdir=$tmp/$n.work" moat-doc "$d"
		done
		install -m 0755 "$bin" /usr/local/bin/moat
		for b in moat-dbus moat-seccomp-exec moat-criu; do
			if [[ -x $(dirname "$bin")/$b ]]; then install -m 0755 "$(dirname "$bin")/$b" /usr/local/bin/; fi
		done
		exec "$@"' doc-ns "$tmp" "$bin" "$@" || rc=$?
	rmdir "$tmp"
	[[ -z $made ]] || rmdir /etc/moat
	return "$rc"
}
