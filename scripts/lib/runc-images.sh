# shellcheck shell=bash
# The two images runc's integration tests download (get-images.sh), built locally: the tests
# skip a download when the file exists. Sourced (after common.sh and debsrc.sh), never executed.

# runc_suite_images DIR -- (re)make DIR/busybox-amd64.tar.xz and DIR/debian-amd64.tar.xz.
runc_suite_images() {
	local img=$1
	rm -rf "$img"
	mkdir -p "$img"
	# busybox: scripts/mkrootfs laid out as the Docker busybox image the tests expect: its
	# users, /home and /var, and no /proc, /sys or /run (mask.bats puts symlinks there).
	"$MOAT_SCRIPTS_DIR/mkrootfs" "$img/busybox" >&2
	rmdir "$img/busybox"/{proc,sys,run}
	mkdir -p "$img/busybox"/{home,var,usr/sbin}
	cat >"$img/busybox/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		daemon:x:1:1:daemon:/usr/sbin:/bin/false
		bin:x:2:2:bin:/bin:/bin/false
		sys:x:3:3:sys:/dev:/bin/false
		sync:x:4:100:sync:/bin:/bin/sync
		mail:x:8:8:mail:/var/spool/mail:/bin/false
		www-data:x:33:33:www-data:/var/www:/bin/false
		operator:x:37:37:Operator:/var:/bin/false
		nobody:x:65534:65534:nobody:/home:/bin/false
	EOF
	cat >"$img/busybox/etc/group" <<-'EOF'
		root:x:0:
		daemon:x:1:
		bin:x:2:
		sys:x:3:
		adm:x:4:
		tty:x:5:
		disk:x:6:
		wheel:x:10:root
		mail:x:12:
		www-data:x:33:
		operator:x:37:
		users:x:100:
		nogroup:x:65534:
	EOF
	rm -f "$img/busybox/.moat-rootfs-version"
	tar -C "$img/busybox" --numeric-owner -cf - . | xz -T2 -1 >"$img/busybox-amd64.tar.xz"
	rm -rf "$img/busybox"
	# Debian: the essential set of bookworm (sh, grep, ldconfig: what hooks.bats runs), no docs.
	mmdebstrap --quiet --variant=essential --mode=root \
		--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' \
		bookworm "$img/debian-amd64.tar" "$DEBSRC_MIRROR/debian" >&2 || die "mmdebstrap failed"
	xz -T2 -1 "$img/debian-amd64.tar"
}
