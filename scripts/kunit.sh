#!/usr/bin/env bash
# Usage: scripts/kunit.sh [kunit.py run options]
# Run the drain's unit suites the kernel-developer way: the tree's own
# tools/testing/kunit/kunit.py with drivers/infiniband/core/.kunitconfig, on
# the drain series alone (pristine + patches/00* and their new files: not
# the API series, patches/01*, which the drain must not need), tree
# $CACHE/kunit-src, build dir $CACHE/build-kunit.
#
# kunit.py starts QEMU with '-accel kvm' first. On these machines /dev/kvm
# exists but KVM does not work (the guest hangs silently), so /dev/kvm is
# hidden in a private mount namespace and QEMU falls back to TCG.
. "$(dirname "$0")/lib.sh"

"$TOP/scripts/toolchain.sh"
"$TOP/scripts/fetch-kernel.sh"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
(cd "$TOP" && cp -a Kbuild rust drivers samples patches "$stage/")
rm -f "$stage"/patches/01*.patch
# shellcheck disable=SC2013 # words: a line of new-files gives several paths
for path in $(sed -n 's/^01[^:]*: //p' "$TOP/patches/new-files"); do
	rm -rf "${stage:?}/$path"
done
OVERLAY=$stage SRC_TREE=$CACHE/kunit-src "$TOP/scripts/prepare-tree.sh"
cd "$CACHE/kunit-src" || die kunit "" "no working tree"
step "kunit.py run (build dir $CACHE/build-kunit)"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m sh -c 'if [ -e /dev/kvm ]; then mount --bind /dev/null /dev/kvm; fi; "$@"' sh \
	tools/testing/kunit/kunit.py run --arch=x86_64 --make_options LLVM=1 \
	--build_dir="$CACHE/build-kunit" --kunitconfig=drivers/infiniband/core \
	--timeout=600 --qemu_args="-smp $GUEST_CPUS" "$@" || die kunit "" "kunit.py run failed"
vcpus_up "$CACHE/build-kunit/test.log" ||
	die kunit "$CACHE/build-kunit/test.log" "the guest did not bring up all its vCPUs"
done_step
# The suites kunit.py ran, against the manifest (a filtered-out or missing
# suite fails here, by name, though kunit.py was content).
python3 "$TOP/scripts/results.py" "$CACHE/src" "$CACHE/build-kunit/test.log" noend \
	"expect=$TOP/scripts/expected/kunit.suites" || die kunit "" "the results do not match scripts/expected/kunit.suites"
