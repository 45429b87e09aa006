#!/usr/bin/env bash
# Usage: scripts/initramfs.sh FLAVOUR
# Make $CACHE/build-FLAVOUR/initramfs.cpio.gz: static busybox, iproute2's rdma,
# nfs-utils and open-iscsi with their libraries, the modules, the guest's
# plumbing (scripts/guest/: /init, /ktap.sh, ...) and its suites
# (drivers/infiniband/tests/suites/ and ulp/ as /tests/suites/ and
# /tests/ulp/).
. "$(dirname "$0")/lib.sh"

flavour=${1:-test}
build=$CACHE/build-$flavour
out=$build/initramfs.cpio.gz
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT

bb=/bin/busybox
# ldd fails on a static binary, which is what the initramfs needs.
if ldd "$bb" >/dev/null 2>&1; then
	die initramfs "" "$bb is not static (is busybox-static installed?)"
fi
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc,lib,lib64,root,sys/kernel/tracing}
cp "$bb" "$root/bin/busybox"
for app in $("$bb" --list); do
	[ -e "$root/bin/$app" ] || ln -s busybox "$root/bin/$app"
done

# iproute2's rdma and the shared libraries it needs.
cp /usr/bin/rdma "$root/sbin/rdma"
ldd /usr/bin/rdma | awk '/=>/ { print $3 } /ld-linux/ { print $1 }' | while read -r lib; do
	[ -f "$lib" ] || continue
	mkdir -p "$root/$(dirname "$lib")"
	cp -L "$lib" "$root/$lib"
done

# nfs-utils and open-iscsi for the NFS/RDMA and iSER suites
# (drivers/infiniband/tests/ulp/nfs.sh, iser.sh).
"$TOP/scripts/guest-userspace.sh" "$root"
echo "127.0.0.1 localhost" >"$root/etc/hosts"
echo "169.254.1.1 rxe-guest" >>"$root/etc/hosts"

cp -a "$build/mods/lib/modules" "$root/lib/"
cp "$TOP"/scripts/guest/* "$root/"
mkdir -p "$root/tests"
cp -r "$TOP/drivers/infiniband/tests/suites" "$TOP/drivers/infiniband/tests/ulp" "$root/tests/"
chmod +x "$root/init"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out.tmp"
mv "$out.tmp" "$out"
