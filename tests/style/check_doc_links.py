#!/usr/bin/env python3
"""Fails (exit 1) when a tracked file names a document that does not exist, listing each.

Checks, in every tracked Markdown file, each relative link and image target ([text](path),
![alt](path); the #anchor dropped) against the file's own folder; and, in every tracked text
file (Markdown, C++, Python, shell, CMake), each plain mention of a path under docs/ or tests/
ending in .md or .png against the top of the checkout.
Run from anywhere; checks the git checkout this script lives in.
"""
import os
import re
import subprocess
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MENTION = re.compile(r"(?<![\w/.-])((?:docs|tests)/[\w./-]*?(?:\.md|\.png))")
TEXT_SUFFIXES = (".md", ".cc", ".h", ".py", ".sh", ".txt", ".cmake")


def tracked():
    out = subprocess.run(["git", "-C", TOP, "ls-files", "-z"], check=True, capture_output=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def main():
    bad = []
    files = tracked()
    for rel in files:
        if not rel.endswith(TEXT_SUFFIXES) and os.path.basename(rel) != "CMakeLists.txt":
            continue
        path = os.path.join(TOP, rel)
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for n, line in enumerate(text.split("\n"), 1):
            if rel.endswith(".md"):
                for target in LINK.findall(line):
                    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                        continue
                    target = target.split("#", 1)[0]
                    if target and not os.path.exists(
                            os.path.normpath(os.path.join(os.path.dirname(path), target))):
                        bad.append(f"{rel}:{n}: link to {target}")
            for mention in MENTION.findall(line):
                if not os.path.exists(os.path.join(TOP, mention)):
                    bad.append(f"{rel}:{n}: names {mention}")
    if bad:
        print("check_doc_links: missing documents:", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        return 1
    print(f"check_doc_links: {len(files)} tracked files, every named document exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
