#!/usr/bin/env python3
"""Usage: scripts/series-export.py DIR

Write the branch "series" of DIR (made by scripts/series-git.sh, then
edited with git) back to the project: one patches/NNNN-*.patch per commit
after the base (git format-patch names), without the new files that
patches/new-files gives to that patch, which go to the overlay instead, at
their version at the branch's end. A patch keeps its new files across
renumbering (by its name without the number) and rewording (by its
number, if no patch had its new name) in patches/new-files. Patches whose text did
not change keep their file byte for byte (their hunks' context lines are
what scripts/mutants/ patch, and the notes after "---", which git drops).
Two series are kept in patches/: the drain's, numbered from 0001, and the
API for Rust ULPs after it, from 0101 (make patches writes each with its
cover letter). The API series begins at the first commit that had a number
from 0101 on (by its name without the number); what follows it is
numbered on from there.
Builds nothing; run make patches after it.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("RDMA_RUST_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "rdma-rust-drain")
PRISTINE = os.path.join(CACHE, "pristine")
HEADER = """# New files that belong to each patch of the series (make patches): not a
# quilt series (patch order is the file names' order).
# Format: PATCH-FILE: path [path ...]   (a path ending in / means everything below)
# A later patch may extend such a file with ordinary diff hunks; the file
# here is always its final version (scripts/lib.sh, copy_series_files).
"""


def git(repo, *args, **kw):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True,
                          text=True, **kw).stdout


def owners():
    """patches/new-files as {slug: paths} and {number: paths}."""
    by_slug, by_num = {}, {}
    for line in open(os.path.join(TOP, "patches/new-files")):
        if line.startswith("#") or ": " not in line:
            continue
        name, paths = line.rstrip("\n").split(": ", 1)
        by_slug[name[5:]] = paths.split()
        by_num[name[:4]] = paths.split()
    return by_slug, by_num


def body_of(text):
    """A patch without what format-patch makes up (date, author, the
    function names on hunk lines), to compare two versions."""
    text = re.sub(r"(?m)^(Date|From): .*\n([ \t].*\n)*", "", text)
    text = re.sub(r"(?m)^(Subject: .*)\n[ \t]+", r"\1 ", text)
    text = re.sub(r"\n---\n[\s\S]*?(?=^diff --git )", "\n---\n", text, count=1, flags=re.M)
    return re.sub(r"(?m)^(@@ [^@]* @@).*$", r"\1", text)


def main():
    repo = sys.argv[1]
    base = git(repo, "rev-list", "--max-parents=0", "series").split()[0]
    commits = git(repo, "rev-list", "--reverse", base + "..series").split()
    by_slug, by_num = owners()
    out = tempfile.mkdtemp()
    git(repo, "format-patch", "-q", "--no-signature", "--zero-commit", "-N", "-o", out,
        base + "..series")
    old = {os.path.basename(f): open(f).read() for f in glob.glob(TOP + "/patches/0*.patch")}
    old_slugs = {n[5:] for n in old}
    api_slugs = {n[5:] for n in old if int(n[:4]) > 100}
    written, new_files = [], []
    api_k = 0
    for commit, f in zip(commits, sorted(glob.glob(out + "/*.patch"))):
        name = os.path.basename(f)
        if api_k or name[5:] in api_slugs:
            api_k += 1
            name = f"{100 + api_k:04d}-{name[5:]}"
        if name[5:] in by_slug:
            own = by_slug[name[5:]]
        elif name[5:] in old_slugs:
            own = []
        else:  # reworded: the patch that had this number
            own = by_num.get(name[:4], [])
        head, rest = open(f).read().split("\n---\n", 1)
        keep = []
        for d in re.split(r"(?m)^(?=diff --git )", rest[rest.index("diff --git "):]):
            if not d:
                continue
            path = re.match(r"diff --git a/(\S+) b/(\S+)", d).group(2)
            is_new = "\nnew file mode" in d.split("@@")[0]
            if is_new and any(path == o or (o.endswith("/") and path.startswith(o)) for o in own):
                continue
            if is_new and os.path.exists(os.path.join(PRISTINE, path)):
                # The base lacks a kernel file that only this patch touches.
                tmp = tempfile.mkdtemp()
                for side, data in (("a", open(os.path.join(PRISTINE, path), "rb").read()),
                                   ("b", subprocess.run(["git", "-C", repo, "show",
                                                         f"{commit}:{path}"],
                                                        check=True, capture_output=True).stdout)):
                    os.makedirs(os.path.join(tmp, side, os.path.dirname(path)), exist_ok=True)
                    open(os.path.join(tmp, side, path), "wb").write(data)
                d = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "a/" + path,
                                    "b/" + path], cwd=tmp, capture_output=True, text=True).stdout
                shutil.rmtree(tmp)
            keep.append(re.sub(r"(?m)^index [0-9a-f]+\.\.[0-9a-f]+( \d+)?\n", "", d))
        body = re.sub(r"\n-- \n[\s\S]*$", "\n", "".join(keep))
        head = re.sub(r"(?m)^From: .*(\n[ \t].*)*$",
                      "From: RDMA Rust team <rdma-rust@example.invalid>", head, count=1)
        text = head + "\n---\n" + body
        if name in old and body_of(old[name]) == body_of(text):
            # As it was, with its notes after "---" (git drops them); an
            # author folded onto two lines is unfolded.
            text = re.sub(r"(?m)^(From: .*)(\n[ \t].*)+$", r"\1", old[name], count=1)
        written.append((name, text))
        if own:
            new_files.append((name, own))
    for f in glob.glob(TOP + "/patches/0*.patch"):
        os.remove(f)
    for name, text in written:
        open(os.path.join(TOP, "patches", name), "w").write(text)
    with open(os.path.join(TOP, "patches/new-files"), "w") as nf:
        nf.write(HEADER)
        for name, paths in new_files:
            nf.write(f"{name}: {' '.join(paths)}\n")
            for p in paths:
                for src in glob.glob(os.path.join(repo, p) + ("**" if p.endswith("/") else ""),
                                     recursive=True):
                    if os.path.isfile(src):
                        dst = os.path.join(TOP, os.path.relpath(src, repo))
                        os.makedirs(os.path.dirname(dst), exist_ok=True)
                        shutil.copy(src, dst)
    shutil.rmtree(out)
    print("\n".join(name for name, _ in written))


if __name__ == "__main__":
    main()
