#!/usr/bin/env bash
# Usage: scripts/fetch-kernel.sh
# Fetch Debian's linux-source-7.3 from trixie-backports without touching the
# system's apt sources, and unpack it as the pristine tree $CACHE/pristine.
. "$(dirname "$0")/lib.sh"

[ -f "$CACHE/pristine/.complete" ] && exit 0

log=$CACHE/logs/fetch-kernel.log
apt_dir=$CACHE/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$CACHE/dl"

# The Debian mirror this machine already uses (first non-security entry).
mirror=$(
	{
		cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '
			/^URIs:/ { for (i = 2; i <= NF; i++) print $i }'
		cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; break } }'
		true
	} | grep -v security | grep '/debian/\?$' | head -n 1 || true
)
[ -n "$mirror" ] || die fetch-kernel "" "no Debian mirror found in the apt configuration"

echo "deb ${mirror%/} trixie-backports main" >"$apt_dir/sources.list"
APT_OPTS=(-o Dir::Etc::SourceList="$apt_dir/sources.list"
	-o Dir::Etc::SourceParts=/dev/null
	-o Dir::State::Lists="$apt_dir/lists"
	-o Dir::State::Status="$apt_dir/status"
	-o Dir::Cache="$apt_dir/cache"
	-o APT::Architecture=amd64)
: >"$apt_dir/status"

step "fetch-kernel: apt-get update (trixie-backports)"
run_logged "$log" apt-get "${APT_OPTS[@]}" update ||
	die fetch-kernel "$log" "apt-get update of trixie-backports failed (mirror unreachable?)"
done_step

pkg=linux-source-$KVER_SERIES
avail=$(apt-cache "${APT_OPTS[@]}" madison "$pkg" 2>>"$log" | awk '{ print $3 }')
[ -n "$avail" ] || die fetch-kernel "$log" "$pkg is not in trixie-backports"
if echo "$avail" | grep -qxF "$KVER_PIN"; then
	ver=$KVER_PIN
else
	ver=$(echo "$avail" | sort -V | tail -n 1)
	echo "WARNING: $pkg $KVER_PIN is gone; using $ver instead" >&2
fi

step "fetch-kernel: apt-get download $pkg=$ver"
(cd "$CACHE/dl" && run_logged "$log" apt-get "${APT_OPTS[@]}" download "$pkg=$ver") ||
	die fetch-kernel "$log" "apt-get download $pkg=$ver failed"
done_step

step "fetch-kernel: unpack"
rm -rf "$CACHE/pristine" "$CACHE/pristine.tmp" "$CACHE/deb"
debs=("$CACHE"/dl/"$pkg"_*.deb)
deb=${debs[0]}
[ -f "$deb" ] || die fetch-kernel "$log" "apt-get download left no $pkg .deb in $CACHE/dl"
dpkg-deb -x "$deb" "$CACHE/deb" >>"$log" 2>&1 || die fetch-kernel "$log" "dpkg-deb -x failed"
mkdir -p "$CACHE/pristine.tmp"
tar -C "$CACHE/pristine.tmp" --strip-components=1 -xf "$CACHE"/deb/usr/src/"$pkg".tar.xz \
	>>"$log" 2>&1 || die fetch-kernel "$log" "unpacking $pkg.tar.xz failed"
rm -rf "$CACHE/deb"
echo "$ver" >"$CACHE/pristine.tmp/.debian-version"
touch "$CACHE/pristine.tmp/.complete"
mv "$CACHE/pristine.tmp" "$CACHE/pristine"
done_step
