#!/usr/bin/env bash
# Usage: scripts/prepare-tree.sh
# Make the working tree $CACHE/src = pristine + the project's overlay
# (OVERLAY=DIR and SRC_TREE=DIR take another overlay and tree; make
# patches-check uses them for each prefix of the series):
# new files from rust/ and drivers/ at their kernel paths, and patches/*.patch
# for existing files. The patches' hunks for new files of the overlay (a
# later patch extending a file an earlier one adds, scripts/lib.sh) are
# skipped: the overlay has those files at their final version. Updates are
# exact and incremental: only files whose content changes are rewritten, so
# Kbuild rebuilds only what changed.
. "$(dirname "$0")/lib.sh"

pristine=$CACHE/pristine src=${SRC_TREE:-$CACHE/src}
OVERLAY=${OVERLAY:-$TOP}
log=$CACHE/logs/prepare-tree.log
[ -f "$pristine/.complete" ] || die prepare-tree "" "no pristine tree (run scripts/fetch-kernel.sh)"

state=$src/.overlay-state
want=$(overlay_hash "$OVERLAY")
[ -f "$state" ] && [ "$(cat "$state")" = "$want" ] && exit 0

step "prepare-tree: overlay $want"
if [ ! -f "$src/.complete" ]; then
	rm -rf "$src" "$src.tmp"
	# Hard links: seconds and no extra space. Every write below replaces a
	# file instead of writing through its link, so the pristine tree stays.
	cp -al "$pristine" "$src.tmp"
	mv "$src.tmp" "$src"
fi
rm -f "$state"

# 1. Patched files: patch pristine copies in a scratch tree, then copy over
#    only what differs. A patch that does not apply leaves $src untouched.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
shopt -s nullglob
patches=("$OVERLAY"/patches/*.patch)
new_file_paths "$OVERLAY" "${patches[@]}" >"$scratch/skip"
skip=()
while IFS= read -r f; do skip+=(--exclude="$f"); done <"$scratch/skip"
: >"$scratch/all"
for p in "${patches[@]}"; do
	sed -n 's|^--- a/||p; s|^+++ b/||p' "$p" >>"$scratch/all"
done
sort -u "$scratch/all" | { grep -vxF -f "$scratch/skip" || true; } >"$scratch/files"
mkdir -p "$scratch/t"
while IFS= read -r f; do
	if [ -f "$pristine/$f" ]; then
		mkdir -p "$scratch/t/$(dirname "$f")"
		cp -p "$pristine/$f" "$scratch/t/$f"
	fi
done <"$scratch/files"
for p in "${patches[@]}"; do
	(cd "$scratch/t" && git apply --whitespace=nowarn "${skip[@]}" "$p") >>"$log" 2>&1 ||
		die prepare-tree "$log" "patch $(basename "$p") does not apply to the pristine tree"
done
# Files patched last time but not now go back to pristine.
prev=$src/.overlay-patched
if [ -f "$prev" ]; then
	comm -23 "$prev" "$scratch/files" | while IFS= read -r f; do
		# A copy, not a link: its new mtime makes make rebuild what uses it.
		if [ -f "$pristine/$f" ]; then cp --remove-destination "$pristine/$f" "$src/$f"; else rm -f "$src/$f"; fi
	done
fi
while IFS= read -r f; do
	if ! cmp -s "$scratch/t/$f" "$src/$f"; then
		mkdir -p "$(dirname "$src/$f")"
		cp --remove-destination "$scratch/t/$f" "$src/$f"
	fi
done <"$scratch/files"
cp "$scratch/files" "$prev"

# 2. New files at their kernel paths (checksums, so mtimes move only on change).
# (A staged prefix of the series may have no drivers/ yet.)
(cd "$OVERLAY" && { find rust drivers samples -type f 2>/dev/null || true; } | LC_ALL=C sort) >"$scratch/new"
prevnew=$src/.overlay-files
if [ -f "$prevnew" ]; then
	comm -23 "$prevnew" "$scratch/new" | while IFS= read -r f; do
		# A copy, not a link: its new mtime makes make rebuild what uses it.
		if [ -f "$pristine/$f" ]; then cp --remove-destination "$pristine/$f" "$src/$f"; else rm -f "$src/$f"; fi
	done
fi
if [ -s "$scratch/new" ]; then
	(cd "$OVERLAY" && rsync -c --files-from="$scratch/new" . "$src/") >>"$log" 2>&1 ||
		die prepare-tree "$log" "copying the overlay failed"
fi
cp "$scratch/new" "$prevnew"

echo "$want" >"$state"
done_step
