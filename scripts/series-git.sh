#!/usr/bin/env bash
# Usage: scripts/series-git.sh DIR
# Make DIR a git repository with the series as commits, to edit it with git
# (rebase -i, commit --amend, filter-branch): the base commit holds the
# pristine version of every file the series touches, then one commit per
# patches/*.patch with its message and its new files as they are after it
# (copy_series_files). Branch "series". scripts/series-export.py DIR writes
# the branch back to patches/ and to the overlay. Builds nothing.
. "$(dirname "$0")/lib.sh"

repo=${1:?usage: scripts/series-git.sh DIR}
"$TOP/scripts/fetch-kernel.sh"
pristine=$CACHE/pristine
[ ! -e "$repo" ] || die series-git "" "$repo exists"
mkdir -p "$repo"
G=(git -C "$repo" -c user.name=series -c user.email=series@example.invalid)
git init -q -b series "$repo"
# shellcheck disable=SC2013 # one path per line
for f in $(sed -n 's|^--- a/||p; s|^+++ b/||p' "$TOP"/patches/*.patch | sort -u); do
	[ -f "$pristine/$f" ] || continue
	mkdir -p "$repo/$(dirname "$f")"
	cp "$pristine/$f" "$repo/$f"
done
"${G[@]}" add -A
"${G[@]}" commit -q -m "Linux $(cat "$pristine/.debian-version") (files touched by the series)"
for p in "$TOP"/patches/*.patch; do
	name=$(basename "$p")
	"${G[@]}" apply --index "$p" || die series-git "" "$name does not apply"
	copy_series_files "$name" "$repo"
	"${G[@]}" add -A
	git mailinfo "$repo/.msg" "$repo/.patch" <"$p" >"$repo/.info"
	{
		sed -n 's/^Subject: //p' "$repo/.info"
		echo
		cat "$repo/.msg"
	} >"$repo/.commitmsg"
	# The author is the one who signed the patch off, whoever runs this.
	author=$(sed -n 's/^Signed-off-by: //p' "$repo/.commitmsg" | head -n 1)
	"${G[@]}" commit -q ${author:+--author="$author"} -F "$repo/.commitmsg"
	rm -f "$repo/.msg" "$repo/.patch" "$repo/.info" "$repo/.commitmsg"
done
"${G[@]}" log --oneline
