#!/usr/bin/env bash
# Usage: scripts/patches.sh [OUTDIR]
# Write the whole change as two git format-patch series against the
# pristine tree (the drain's, then the API's on it; below): each patches/*.patch, together with the new files patches/new-files
# assigns to it, becomes one commit: a new file as it is after that patch,
# which later patches may extend with hunks (copy_series_files in
# scripts/lib.sh). Then run checkpatch.pl on the series.
. "$(dirname "$0")/lib.sh"

out=${1:-$TOP/out/patches}
"$TOP/scripts/fetch-kernel.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A commit per patch (scripts/series-git.sh), on the pristine files.
repo=$tmp/series
"$TOP/scripts/series-git.sh" "$repo" >/dev/null
base=$(git -C "$repo" rev-list --max-parents=0 series)
# The series ends with every new file at its version in the overlay.
# shellcheck disable=SC2013 # words: a line of new-files gives several paths
for path in $(sed -n 's/^[^#][^:]*: //p' "$TOP/patches/new-files"); do
	for f in $(cd "$TOP" && find "$path" -type f); do
		cmp -s "$TOP/$f" "$repo/$f" || die patches "" "the series ends with another $f than the overlay's"
	done
done

# Two series: the drain's (patches/00*, out/patches, its cover letter
# patches/cover-letter) and, on top of its first 18, the RFC API for Rust
# ULPs (patches/01*, out/patches-api, patches/cover-letter-api). The API
# series must not need the drain series' last, not-for-merge patch: it is
# checked to apply without it.
n_drain=$(find "$TOP/patches" -maxdepth 1 -name '00*.patch' | wc -l)
mapfile -t commits < <(git -C "$repo" rev-list --reverse "$base..series")
drain_end=${commits[$((n_drain - 1))]}
rm -rf "$out" "$out-api"
mkdir -p "$out" "$out-api"
git -C "$repo" format-patch -q --no-signature --cover-letter -o "$out" "$base..$drain_end"
git -C "$repo" format-patch -q --no-signature --cover-letter --subject-prefix="RFC PATCH" \
	-o "$out-api" "$drain_end..series"
# The API series applies without the not-for-merge patch (the last of the
# drain series).
nfm=$(git -C "$repo" log -1 --format=%s "$drain_end")
case "$nfm" in *"NOT FOR MERGE"*) ;; *) die patches "" "the drain series does not end with its not-for-merge patch" ;; esac
git -C "$repo" worktree add -q --detach "$tmp/check" "$drain_end~1" >/dev/null
api=()
for p in "$out-api"/*.patch; do
	case "$p" in */0000-cover-letter.patch) ;; *) api+=("$p") ;; esac
done
git -C "$tmp/check" -c user.name=check -c user.email=check@example.invalid am -q "${api[@]}" ||
	die patches "" "the API series does not apply on the drain series without its not-for-merge patch"
# Each cover letter's subject and text (the subject, a blank line, the
# text); format-patch gives the shortlog and diffstat.
for pair in "$out:cover-letter" "$out-api:cover-letter-api"; do
	cover=${pair%%:*}/0000-cover-letter.patch
	python3 - "$cover" "$TOP/patches/${pair#*:}" <<'PY' || die patches "" "patches/${pair#*:} does not fill the cover letter"
import sys
cover, text = sys.argv[1], open(sys.argv[2]).read().split("\n", 2)
s = open(cover).read()
assert len(text) == 3 and text[0] and text[1] == "", "a subject, a blank line, the text"
assert "*** SUBJECT HERE ***" in s and "*** BLURB HERE ***" in s
s = s.replace("*** SUBJECT HERE ***", text[0]).replace("*** BLURB HERE ***", text[2].rstrip("\n"))
open(cover, "w").write(s)
PY
done
echo "patches: the drain series, $(find "$out" -maxdepth 1 -name '*.patch' ! -name '0000-*' | wc -l) patches and a cover letter, in $out"
echo "patches: the RFC API series on it, $(find "$out-api" -maxdepth 1 -name '*.patch' ! -name '0000-*' | wc -l) patches and a cover letter, in $out-api"
# checkpatch asks about MAINTAINERS for every new file; the series adds the
# F: lines the new directories need (drivers/infiniband/ has one already).
# The fixes' Fixes: tags name upstream commits: checkpatch looks them up in
# the git repository it runs in, this project's, which does not have them.
cp_log=$CACHE/logs/checkpatch.log
series=()
for p in "$out"/*.patch "$out-api"/*.patch; do
	case "$p" in */0000-cover-letter.patch) ;; *) series+=("$p") ;; esac
done
"$CACHE/pristine/scripts/checkpatch.pl" --no-tree --strict --show-types --ignore UNKNOWN_COMMIT_ID \
	"${series[@]}" >"$cp_log" 2>&1 || true
problems=$(grep -E '^(ERROR|WARNING|CHECK):' "$cp_log" | grep -v '^WARNING:FILE_PATH_CHANGES:' || true)
if [ -n "$problems" ]; then
	echo "$problems"
	die patches "$cp_log" "checkpatch.pl found problems"
fi
echo "patches: checkpatch.pl --strict clean ($(grep -c '^WARNING:FILE_PATH_CHANGES:' "$cp_log") MAINTAINERS questions on new files covered by existing F: lines)"
