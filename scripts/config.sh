#!/usr/bin/env bash
# Usage: scripts/config.sh SRC BUILD FRAGMENT...
# tinyconfig + fragments via the tree's merge_config.sh, then olddefconfig, then
# a check that every option the fragments ask for really is set.
. "$(dirname "$0")/lib.sh"

src=$1 build=$2
shift 2
mapfile -t fragments < <(realpath "$@")
set -- "${fragments[@]}"
log=$CACHE/logs/config.log
# The fragments, and the Kconfig files the patches change: a symbol a patch
# adds goes through olddefconfig here, not through the build's syncconfig,
# which would ask for it in a cached build directory.
want=$({
	cat "$@"
	grep 'Kconfig' "$src/.overlay-patched" 2>/dev/null | sed "s|^|$src/|" | xargs -r cat
} | sha256sum | cut -c1-16)
if [ -f "$build/.config" ] && [ "$(cat "$build/.config.fragment-hash" 2>/dev/null)" = "$want" ]; then
	exit 0
fi

step "config: tinyconfig + $(basename -a "$@" | tr '\n' ' ')"
mkdir -p "$build"
tmp=$build/.config.new
K=(make -C "$src" O="$build" LLVM=1)
{
	"${K[@]}" KCONFIG_CONFIG=.config.new tinyconfig &&
		(cd "$build" && "$src/scripts/kconfig/merge_config.sh" -m -O . .config.new "$@" &&
			mv .config .config.new) &&
		"${K[@]}" KCONFIG_CONFIG=.config.new olddefconfig
} >"$log" 2>&1 || die config "$log" "make tinyconfig/olddefconfig failed"

# Kconfig drops options whose dependencies are missing: fail loudly instead.
bad=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=*)
		if ! grep -qxF "$line" "$tmp"; then
			echo "config: asked for '$line', got '$(grep "^${line%%=*}=" "$tmp" || echo "not set")'" >&2
			bad=1
		fi
		;;
	"# CONFIG_"*" is not set")
		opt=${line#\# }
		opt=${opt%% *}
		if grep -q "^$opt=" "$tmp"; then
			echo "config: asked for $opt off, got '$(grep "^$opt=" "$tmp")'" >&2
			bad=1
		fi
		;;
	esac
done < <(cat "$@" | awk '
	# A later fragment overrides an earlier one, as in merge_config.sh.
	/^CONFIG_[A-Za-z0-9_]*=/ { o = $0; sub(/=.*/, "", o) }
	/^# CONFIG_[A-Za-z0-9_]* is not set/ { o = $2 }
	o != "" { last[o] = $0; order[++n] = o; o = "" }
	END { for (i = 1; i <= n; i++) if (!seen[order[i]]++) print last[order[i]] }')
[ "$bad" = 0 ] || die config "$log" "Kconfig dropped options (missing dependencies?)"

if ! cmp -s "$tmp" "$build/.config"; then
	mv "$tmp" "$build/.config"
else
	rm -f "$tmp"
fi
echo "$want" >"$build/.config.fragment-hash"
done_step
