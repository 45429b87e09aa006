#!/usr/bin/env bash
# Usage: scripts/guest-userspace.sh ROOT
# Put the userspace the guest's ULP suites need into the initramfs tree ROOT:
# nfs-utils' rpc.mountd, exportfs and mount.nfs, and open-iscsi's iscsid and
# iscsiadm, with their shared libraries, from Debian packages of this
# machine's release (apt-get download with the machine's own apt
# configuration, cached in $CACHE/guest-debs). Nothing is installed on the
# host.
. "$(dirname "$0")/lib.sh"

root=$1
debs=$CACHE/guest-debs
log=$CACHE/logs/guest-userspace.log
# The binaries, and every package whose libraries they load (bookworm).
BINS="usr/sbin/rpc.mountd usr/sbin/exportfs sbin/mount.nfs
sbin/iscsid sbin/iscsiadm"
PKGS="nfs-kernel-server nfs-common libwrap0 libtirpc3 libtirpc-common
libmount1 libblkid1 libuuid1 libselinux1 libpcre2-8-0 libgssapi-krb5-2
libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2 libkeyutils1 libnsl2
open-iscsi libisns0 libopeniscsiusr libssl3 libkmod2 libsystemd0 libcap2
libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1"

# shellcheck disable=SC2086 # PKGS is a list of words
want=$(echo $PKGS | sha256sum | cut -c1-16)
if [ "$(cat "$debs/.complete" 2>/dev/null)" != "$want" ]; then
	step "guest userspace: apt-get download nfs-utils, open-iscsi and their libraries"
	rm -rf "$debs"
	mkdir -p "$debs/pkgs"
	# shellcheck disable=SC2086
	if ! (cd "$debs/pkgs" && run_logged "$log" apt-get download $PKGS); then
		# A fresh machine may have no package lists yet.
		[ "$(id -u)" = 0 ] || die guest-userspace "$log" "apt-get download failed (and not root: no apt-get update)"
		run_logged "$log.update" apt-get update ||
			die guest-userspace "$log.update" "apt-get update failed (mirror unreachable?)"
		# shellcheck disable=SC2086
		(cd "$debs/pkgs" && run_logged "$log" apt-get download $PKGS) ||
			die guest-userspace "$log" "apt-get download failed"
	fi
	for d in "$debs"/pkgs/*.deb; do
		dpkg-deb -x "$d" "$debs/root" >>"$log" 2>&1 || die guest-userspace "$log" "dpkg-deb -x $d failed"
	done
	echo "$want" >"$debs/.complete"
	done_step
fi

# Each binary with the libraries the dynamic loader finds for it, from the
# unpacked packages first, else the host's (libc, as for rdma).
r=$debs/root
libpath=$r/lib/x86_64-linux-gnu:$r/usr/lib/x86_64-linux-gnu
for b in $BINS; do
	mkdir -p "$root/$(dirname "$b")"
	cp "$r/$b" "$root/$b"
	deps=$(LD_LIBRARY_PATH=$libpath ldd "$r/$b") || die guest-userspace "" "ldd $b failed"
	if echo "$deps" | grep -q 'not found'; then
		die guest-userspace "" "$b needs a library no package in PKGS has: $(echo "$deps" | grep 'not found' | tr -s ' \t\n' ' ')"
	fi
	echo "$deps" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | while read -r lib; do
		[ -f "$lib" ] || continue
		dest=${lib#"$r"}
		[ -e "$root/$dest" ] && continue
		mkdir -p "$root/$(dirname "$dest")"
		cp -L "$lib" "$root/$dest"
	done
done
ln -sf mount.nfs "$root/sbin/mount.nfs4"
# libtirpc's network configuration database.
cp "$r/etc/netconfig" "$root/etc/netconfig"
