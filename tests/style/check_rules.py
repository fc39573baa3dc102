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

3. Function length. No function defined in a .cc or .h file of the tree (sources, tests, fuzz
   targets, benchmarks) has a body over MAX_FUNCTION_LINES lines (the lines between its
   braces).
4. No include cycles between units. A unit is FOLDER/name: name.h with name.cc; unit A uses
   unit B when A.h or A.cc includes "B.h". Units that reach each other (a strongly connected
   set of two or more) are a cycle.

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


MAX_FUNCTION_LINES = 120


def source_files():
    """Paths (relative to TOP) of the tree's .cc and .h files."""
    for dirpath, dirs, files in os.walk(TOP):
        dirs[:] = sorted(d for d in dirs if not (d.startswith(".") or d == "build"
                                                  or d.startswith("build-")
                                                  or d == "node_modules"))
        for name in sorted(files):
            if name.endswith((".cc", ".h")):
                yield os.path.relpath(os.path.join(dirpath, name), TOP)


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


CODE_NOISE = re.compile(
    r'//[^\n]*'                          # line comment
    r'|/\*.*?\*/'                        # block comment
    r'|R"([^(\s"]*)\(.*?\)\1"'            # raw string
    r'|"(?:\\.|[^"\\\n])*"'              # string
    r"|(?<![\w'])'(?:\\.|[^'\\\n])+'"      # character (not a digit separator: 1'000)
    r'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',     # preprocessor line, with its continuations
    re.S | re.M)


def functions(text):
    """(name, line of its opening brace, body lines) of each function defined at namespace or
    class scope of a C++ source text."""
    code = CODE_NOISE.sub(blank, text)
    found = []

    def scan(begin, end):
        head = begin
        i = begin
        while i < end:
            c = code[i]
            if c in ";}":
                head = i + 1
            elif c == "{":
                depth, j = 1, i + 1
                while j < end and depth:
                    depth += {"{": 1, "}": -1}.get(code[j], 0)
                    j += 1
                h = " ".join(code[head:i].split())
                if re.match(r"(namespace\b|extern\s*\"C\")", h) or \
                        re.match(r"(template\s*<.*>\s*)?(class|struct|union)\b", h):
                    scan(i + 1, j - 1)  # functions defined inside
                elif "(" in h and not h.endswith("=") and not h.startswith("enum"):
                    first = code.count("\n", 0, i) + 1
                    last = code.count("\n", 0, j - 1) + 1
                    names = re.findall(r"([\w:~]+)\s*\(", h)
                    found.append((names[0] if names else h[:40], first, last - first - 1))
                i = head = j
                continue
            i += 1

    scan(0, len(code))
    return found


def check_function_lengths(problems):
    for rel in source_files():
        with open(os.path.join(TOP, rel), errors="replace") as f:
            text = f.read()
        for name, line, lines in functions(text):
            if lines > MAX_FUNCTION_LINES:
                problems.append(f"{rel}:{line}: {name} has {lines} lines (at most "
                                f"{MAX_FUNCTION_LINES}): split it into named steps")


def unit_graph():
    """{unit: set of units it uses} over the project folders."""
    graph = {}
    for rel in source_files():
        folder = rel.split("/")[0]
        if folder not in FOLDERS:
            continue
        unit = rel.rsplit(".", 1)[0]
        uses = graph.setdefault(unit, set())
        with open(os.path.join(TOP, rel), errors="replace") as f:
            for line in f:
                m = re.match(r'\s*#\s*include\s+"([^"]+)\.h"', line)
                if m and m.group(1) != unit and os.path.exists(os.path.join(TOP, m.group(1) + ".h")):
                    uses.add(m.group(1))
    return graph


def cycles(graph):
    """The strongly connected sets of two or more units (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.add(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(component)
    return out


def check_include_cycles(problems):
    graph = unit_graph()
    for component in cycles(graph):
        edges = ", ".join(f"{a} -> {b}" for a in sorted(component)
                          for b in sorted(graph[a] & component))
        problems.append(f"include cycle between units {', '.join(sorted(component))} ({edges}): "
                        f"move the declarations one of them needs into a unit of their own")


def main():
    problems = []
    check_dependencies(problems)
    check_semantics(problems)
    check_function_lengths(problems)
    check_include_cycles(problems)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
