# shellcheck shell=bash
# Debian source packages fetched by name and version, checked against Debian's signed index.
# Sourced (after common.sh), never executed.
#
# The host's apt configuration has no deb-src lines and is left alone: a private sources
# list and list directory under DEBSRC_DIR hold the Sources indexes. apt verifies those
# indexes against the archive's signed InRelease files; every file fetched here is then
# checked against the SHA-256 that index gives, and a .dsc's own Checksums-Sha256 are
# checked too when the .dsc is one of the files. Fetched files stay in DEBSRC_DIR/files,
# so a second run downloads nothing.

DEBSRC_DIR=${DEBSRC_DIR:-/var/cache/moat-debsrc}
# Suites whose Sources indexes are read. trixie is there for packages whose bookworm
# tarballs the mirror no longer serves (runtime-tools).
DEBSRC_SUITES=${DEBSRC_SUITES:-"debian:bookworm debian:bookworm-updates debian-security:bookworm-security debian:trixie"}
DEBSRC_MIRROR=${DEBSRC_MIRROR:-http://deb.debian.org}
# Extra apt options for the update, e.g. "-o Acquire::Check-Valid-Until=false" for a suite
# (forky, sid) whose Release file on the mirror is past its Valid-Until date.
DEBSRC_APTOPTS=${DEBSRC_APTOPTS:-}

debsrc_apt() {
	apt-cache -o Dir::Etc::SourceList="$DEBSRC_DIR/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
		-o Dir::State::Lists="$DEBSRC_DIR/lists" -o Dir::Cache="$DEBSRC_DIR/apt" "$@"
}

# debsrc_update -- (re)write the private sources list and refresh its indexes.
debsrc_update() {
	local s
	mkdir -p "$DEBSRC_DIR/lists/partial" "$DEBSRC_DIR/apt/archives/partial" "$DEBSRC_DIR/files"
	: >"$DEBSRC_DIR/sources.list.new"
	for s in $DEBSRC_SUITES; do
		printf 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s/%s %s main\n' \
			"$DEBSRC_MIRROR" "${s%%:*}" "${s#*:}" >>"$DEBSRC_DIR/sources.list.new"
	done
	mv "$DEBSRC_DIR/sources.list.new" "$DEBSRC_DIR/sources.list"
	apt-get -q -o Dir::Etc::SourceList="$DEBSRC_DIR/sources.list" -o Dir::Etc::SourceParts=/nonexistent \
		-o Dir::State::Lists="$DEBSRC_DIR/lists" -o Dir::Cache="$DEBSRC_DIR/apt" \
		-o APT::Sandbox::User=root $DEBSRC_APTOPTS update >&2 || die "apt-get update of the private deb-src list failed"
}

# debsrc_stanza PKG VERSION -- print the Sources stanza of PKG at VERSION (empty if none).
debsrc_stanza() {
	# awk reads to the end (no early exit): apt-cache must not die of SIGPIPE under pipefail.
	debsrc_apt showsrc "$1" 2>/dev/null | awk -v v="$2" '
		/^$/ { if (keep && !done) { printf "%s", s; done = 1 } s = ""; keep = 0; next }
		{ s = s $0 "\n" }
		$1 == "Version:" && $2 == v { keep = 1 }
		END { if (keep && !done) printf "%s", s }' || true
}

# debsrc_fetch PKG VERSION [FILE-REGEX] -- download the source files of PKG at VERSION whose
# names match FILE-REGEX (default: all) into DEBSRC_DIR/files and print their paths, one a
# line. Refreshes the indexes once if the version is not listed. Dies on a missing file or
# a checksum mismatch.
debsrc_fetch() {
	local pkg=$1 ver=$2 re=${3:-.} stanza dir sum size name f s ok
	[[ -s $DEBSRC_DIR/sources.list ]] || debsrc_update
	stanza=$(debsrc_stanza "$pkg" "$ver")
	if [[ -z $stanza ]]; then
		debsrc_update
		stanza=$(debsrc_stanza "$pkg" "$ver")
	fi
	[[ -n $stanza ]] || die "Debian source package $pkg $ver is not in the indexes of $DEBSRC_SUITES"
	dir=$(sed -n 's/^Directory: //p' <<<"$stanza")
	while read -r sum size name; do
		[[ $name =~ $re ]] || continue
		f=$DEBSRC_DIR/files/$name
		if ! [[ -f $f ]] || ! sha256sum --status -c <<<"$sum  $f"; then
			ok=0
			for s in $DEBSRC_SUITES; do
				curl -fsSL --retry 3 -o "$f.part" "$DEBSRC_MIRROR/${s%%:*}/$dir/$name" 2>/dev/null || continue
				if sha256sum --status -c <<<"$sum  $f.part"; then
					mv "$f.part" "$f"
					ok=1
					break
				fi
				log "warning: $name from ${s%%:*} does not match the SHA-256 in the signed index"
			done
			rm -f "$f.part"
			((ok)) || die "could not fetch $name ($pkg $ver, $size bytes) from $DEBSRC_MIRROR"
		fi
		printf '%s\n' "$f"
	done < <(sed -n '/^Checksums-Sha256:/,/^[^ ]/{/^ /p}' <<<"$stanza")
}

# debsrc_check_dsc DSC -- check the files next to DSC against its Checksums-Sha256.
debsrc_check_dsc() {
	local dsc=$1 sum size name
	while read -r sum size name; do
		sha256sum --status -c <<<"$sum  $(dirname "$dsc")/$name" || die "$name does not match $dsc"
	done < <(sed -n '/^Checksums-Sha256:/,/^[^ ]/{/^ /p}' "$dsc")
}
