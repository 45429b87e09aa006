#!/usr/bin/env bash
# Usage: scripts/patches.sh [OUTDIR]
# Write the whole change as a git format-patch series against the pristine
# tree: each patches/*.patch, together with the new files patches/new-files
# assigns to it, becomes one commit: a new file as it is after that patch,
# which later patches may extend with hunks (copy_series_files in
# scripts/lib.sh). Then run checkpatch.pl on the series.
. "$(dirname "$0")/lib.sh"

out=${1:-$TOP/out/patches}
"$TOP/scripts/fetch-kernel.sh"
pristine=$CACHE/pristine
repo=$(mktemp -d)
trap 'rm -rf "$repo"' EXIT
G=(git -C "$repo" -c user.name="$(git -C "$TOP" config user.name || echo rdma)"
	-c user.email="$(git -C "$TOP" config user.email || echo rdma@example.invalid)")

# The base: the pristine versions of every file the series touches.
files=$(sed -n 's|^--- a/||p; s|^+++ b/||p' "$TOP"/patches/*.patch | sort -u)
git init -q "$repo"
for f in $files; do
	[ -f "$pristine/$f" ] || continue
	mkdir -p "$repo/$(dirname "$f")"
	cp "$pristine/$f" "$repo/$f"
done
"${G[@]}" add -A
"${G[@]}" commit -q -m "Linux $(cat "$pristine/.debian-version") (files touched by the series)"
base=$("${G[@]}" rev-parse HEAD)

for p in "$TOP"/patches/*.patch; do
	name=$(basename "$p")
	"${G[@]}" apply --index "$p" || die patches "" "$name does not apply"
	copy_series_files "$name" "$repo"
	"${G[@]}" add -A
	git mailinfo "$repo/.msg" "$repo/.patch" <"$p" >"$repo/.info"
	subject=$(sed -n 's/^Subject: //p' "$repo/.info")
	{
		echo "$subject"
		echo
		cat "$repo/.msg"
	} >"$repo/.commitmsg"
	rm -f "$repo/.msg" "$repo/.patch" "$repo/.info"
	# The author is the one who signed the patch off, whoever runs this.
	author=$(sed -n 's/^Signed-off-by: //p' "$repo/.commitmsg" | head -n 1)
	"${G[@]}" commit -q ${author:+--author="$author"} -F "$repo/.commitmsg"
	rm -f "$repo/.commitmsg"
done
# The series ends with every new file at its version in the overlay.
# shellcheck disable=SC2013 # words: a line of new-files gives several paths
for path in $(sed -n 's/^[^#][^:]*: //p' "$TOP/patches/new-files"); do
	for f in $(cd "$TOP" && find "$path" -type f); do
		cmp -s "$TOP/$f" "$repo/$f" || die patches "" "the series ends with another $f than the overlay's"
	done
done

rm -rf "$out"
mkdir -p "$out"
"${G[@]}" format-patch -q --no-signature --cover-letter -o "$out" "$base"
# The cover letter's subject and text (patches/cover-letter: the subject,
# a blank line, the text); format-patch gives the shortlog and diffstat.
cover=$out/0000-cover-letter.patch
python3 - "$cover" "$TOP/patches/cover-letter" <<'PY' || die patches "" "patches/cover-letter does not fill the cover letter"
import sys
cover, text = sys.argv[1], open(sys.argv[2]).read().split("\n", 2)
s = open(cover).read()
assert len(text) == 3 and text[0] and text[1] == "", "a subject, a blank line, the text"
assert "*** SUBJECT HERE ***" in s and "*** BLURB HERE ***" in s
s = s.replace("*** SUBJECT HERE ***", text[0]).replace("*** BLURB HERE ***", text[2].rstrip("\n"))
open(cover, "w").write(s)
PY
cat "$cover"
echo "patches: a cover letter and $(find "$out" -maxdepth 1 -name '*.patch' ! -name '0000-*' | wc -l) patches in $out"
# checkpatch asks about MAINTAINERS for every new file; the series adds the
# F: lines the new directories need (drivers/infiniband/ has one already).
# The fixes' Fixes: tags name upstream commits: checkpatch looks them up in
# the git repository it runs in, this project's, which does not have them.
cp_log=$CACHE/logs/checkpatch.log
series=()
for p in "$out"/*.patch; do [ "$p" = "$cover" ] || series+=("$p"); done
"$pristine/scripts/checkpatch.pl" --no-tree --strict --show-types --ignore UNKNOWN_COMMIT_ID \
	"${series[@]}" >"$cp_log" 2>&1 || true
problems=$(grep -E '^(ERROR|WARNING|CHECK):' "$cp_log" | grep -v '^WARNING:FILE_PATH_CHANGES:' || true)
if [ -n "$problems" ]; then
	echo "$problems"
	die patches "$cp_log" "checkpatch.pl found problems"
fi
echo "patches: checkpatch.pl --strict clean ($(grep -c '^WARNING:FILE_PATH_CHANGES:' "$cp_log") MAINTAINERS questions on new files covered by existing F: lines)"
