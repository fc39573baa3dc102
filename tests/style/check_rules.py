#!/usr/bin/python3
"""Rules of docs/design.md and docs/semantics.md that a test can check, so that they stay true:

1. Dependencies. design.md's table "What each folder may depend on" lists, per folder, the
   project folders its library may use. Every `#include "FOLDER/..."` in a source file of a
   folder (tests, fuzz targets and test support excluded: they may build stores and use fakes)
   must name the folder itself or one the table's row allows; an exception the row writes as
   "never X" is enforced too, and a header the row names (`fs/mount_options.h`) is allowed
   alone, not its folder.
2. Tests named. Every test docs/semantics.md names exists: `file::Class.test` is a method
   `def test` of class `Class` in tests/e2e/file.py, `binary:Suite.Test` a GoogleTest
   TEST/TEST_F/TEST_P(Suite, Test) in some .cc file of the tree.

Prints one line per violation (file and reason) and exits 1 if there is any."""

import os
import re
import sys

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ["common", "codec", "index", "builder", "fs", "mount-tools", "location", "remote",
           "python"]


def dependency_table():
    """{folder: set of project folders it may include}, from design.md's table."""
    with open(os.path.join(TOP, "docs", "design.md")) as f:
        text = f.read()
    start = text.index("What each folder may depend on")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        m = re.fullmatch(r"`([\w-]+)/(?:\w+/)?`", cells[0])
        if not m or m.group(1) not in FOLDERS:
            continue
        allowed_text = cells[2]
        # "never X" and "everything above but X, Y" are read before the plain names.
        never = set(re.findall(r"never ([\w-]+)", allowed_text))
        allowed = set()
        everything = re.search(r"everything above but ([\w ,-]+?)(?:,\s*[A-Z]|$)", allowed_text)
        if everything:
            but = {w.strip() for w in everything.group(1).split(",")}
            above = list(rows)
            allowed |= {f for f in above if f not in but}
        for word in re.findall(r"[\w-]+", re.sub(r"\([^)]*\)", "", allowed_text)):
            if word in FOLDERS:
                allowed.add(word)
        # A header of another folder named in the cell: that header only.
        headers = set(re.findall(r"`([\w-]+/\w+\.h)`", allowed_text))
        allowed -= {h.split("/")[0] for h in headers}
        rows[m.group(1)] = (allowed - never, never, headers)
    return rows


def is_test_source(name):
    return (name.endswith("_test.cc") or "fuzz" in name or "test_support" in name
            or name.endswith("_bench.cc") or name.startswith("test_"))


def check_dependencies(problems):
    rows = dependency_table()
    for folder in FOLDERS:
        if folder not in rows:
            problems.append(f"docs/design.md: no row for `{folder}/` in the dependency table")
            continue
        allowed, never, headers = rows[folder]
        root = os.path.join(TOP, folder)
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith((".h", ".cc")) or is_test_source(name):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, TOP)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = re.match(r'\s*#\s*include\s+"(([\w-]+)/[^"]+)"', line)
                        if not m or m.group(1) in headers:
                            continue
                        used = m.group(2)
                        if used == folder or used not in FOLDERS:
                            continue
                        if used in never or used not in allowed:
                            problems.append(f"{rel}:{n}: includes {used}/, which design.md's "
                                            f"table does not allow `{folder}/`")


def e2e_tests():
    """{(file, class): set of test methods} of tests/e2e."""
    out = {}
    e2e = os.path.join(TOP, "tests", "e2e")
    for name in os.listdir(e2e):
        if not name.endswith(".py"):
            continue
        cls = None
        with open(os.path.join(e2e, name)) as f:
            for line in f:
                m = re.match(r"class (\w+)", line)
                if m:
                    cls = m.group(1)
                    out.setdefault((name[:-3], cls), set())
                    continue
                m = re.match(r"    def (test\w*)\(", line)
                if m and cls:
                    out[(name[:-3], cls)].add(m.group(1))
    return out


def gtest_tests():
    found = set()
    for dirpath, dirs, files in os.walk(TOP):
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d == "build"
                                           or d.startswith("build-") or d == "node_modules")]
        for name in files:
            if not name.endswith(".cc"):
                continue
            with open(os.path.join(dirpath, name), errors="replace") as f:
                text = f.read()
            for m in re.finditer(r"\bTEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)", text):
                found.add((m.group(1), m.group(2)))
    return found


def check_semantics(problems):
    with open(os.path.join(TOP, "docs", "semantics.md")) as f:
        text = f.read()
    py, cc = e2e_tests(), gtest_tests()
    for m in re.finditer(r"`(\w+)::(\w+)\.(\w+)`", text):
        file, cls, test = m.groups()
        if file == "file":  # the format's own example
            continue
        if test not in py.get((file, cls), ()):
            problems.append(f"docs/semantics.md: names {file}::{cls}.{test}, which "
                            f"tests/e2e/{file}.py does not define")
    for m in re.finditer(r"`([\w-]+):(\w+)\.(\w+)`", text):
        binary, suite, test = m.groups()
        if binary == "binary":  # the format's own example
            continue
        # Parameterized tests are named Prefix/Suite.Test/N by GoogleTest: the doc may give
        # the suite as written in TEST_P.
        if (suite, test) not in cc:
            problems.append(f"docs/semantics.md: names {m.group(1)}:{suite}.{test}, which no "
                            f"TEST(...) in the tree defines")


def main():
    problems = []
    check_dependencies(problems)
    check_semantics(problems)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
