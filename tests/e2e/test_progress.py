#!/usr/bin/python3
"""Build progress on stderr (--progress, --quiet, a terminal) and provenance.json, the record of
how a store was built that `pcr inspect` shows (issue 14 item 4)."""

import json
import os
import re
import shutil
import tarfile

from pcrtest import (PCR, TempDirTest, make_messy_tree, photo, run, save_jpeg, store_bytes)

OPTS = ["--images-per-record", "4", "--quality-sample", "5"]
FILES = re.compile(r"^pcr build: (\d+)/(\d+) files \((\d+\.\d)%\), .* of .*, "
                   r"(--|[0-9.]+) files/s, .*/s, ETA (\?|\d+:\d\d)$")


def make_source(root):
    make_messy_tree(root)
    for i in range(12):
        save_jpeg(photo(80 + i, 60, 40 + i), os.path.join(root, "more", f"{i:02d}.jpg"))


def inspect(store):
    p = run([PCR, "inspect", store], text=True)
    j = json.loads(run([PCR, "inspect", store, "--json"], text=True).stdout)
    return p.stdout, j["built"]


class ProgressTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.src = self.path("src")
        make_source(self.src)
        self.files = sum(len(f) for _, _, f in os.walk(self.src))

    def build(self, src, store, *extra):
        return run([PCR, "build", src, store, *OPTS, *extra], text=True)

    def files_lines(self, stderr):
        return [m for m in (FILES.match(l) for l in stderr.splitlines()) if m]

    def test_progress_lines_with_progress_and_none_with_quiet(self):
        p = self.build(self.src, self.path("a"), "--progress")
        lines = p.stderr.splitlines()
        self.assertTrue(lines[0].startswith("pcr build: listing " + self.src + ": "), lines)
        done = self.files_lines(p.stderr)
        self.assertGreaterEqual(len(done), 2, p.stderr)  # the stage's start and its end at least
        last = done[-1]
        self.assertEqual(last[1], last[2])
        self.assertEqual(last[3], "100.0")
        self.assertEqual(last[5], "0:00")
        # The source's files, minus what cannot be stored (make_messy_tree has a few).
        self.assertLessEqual(int(last[2]), self.files)
        self.assertRegex(p.stderr, r"pcr build: quality sample: 5/5 JPEGs \(100.0%\)")
        # Not a terminal: plain lines, no carriage returns or escapes.
        self.assertNotIn("\r", p.stderr)
        self.assertNotIn("\033", p.stderr)
        self.assertIn("JPEGs transcoded", p.stdout)

        for extra in (["--quiet"], ["--quiet", "--progress"], []):
            with self.subTest(extra=extra):
                store = self.path("q")
                shutil.rmtree(store, ignore_errors=True)
                p = self.build(self.src, store, *extra)
                self.assertEqual(p.stderr, "", "no progress without a terminal or --progress, "
                                 "and none with --quiet")

    def test_archive_and_shard_progress(self):
        tar = self.path("src.tar")
        with tarfile.open(tar, "w") as t:
            t.add(self.src, arcname=".")
        p = self.build(tar, self.path("t"), "--progress")
        self.assertIn("pcr build: listing " + tar + ": ", p.stderr)
        total = int(self.files_lines(p.stderr)[-1][2])
        self.assertGreater(total, 10)
        # A shard counts its own files only.
        seen = 0
        for i in range(2):
            part = self.path(f"part{i}")
            p = self.build(self.src, part, "--progress", "--shard", f"{i}/2")
            last = self.files_lines(p.stderr)[-1]
            self.assertEqual(last[1], last[2])
            self.assertLess(int(last[2]), total)
            seen += int(last[2])
        self.assertEqual(seen, total)
        p = run([PCR, "merge", self.path("part0"), self.path("part1"), self.path("m"),
                 "--progress"], text=True)
        self.assertRegex(p.stderr, r"pcr merge: (\d+)/\1 records \(100.0%\), .* of .*, ETA 0:00")
        self.assertRegex(p.stderr, r"pcr merge: quality sample: 5/5 JPEGs")
        p = run([PCR, "merge", self.path("part0"), self.path("part1"), self.path("m2"),
                 "--progress", "--quiet"], text=True)
        self.assertEqual(p.stderr, "")

    def test_progress_on_a_terminal_is_one_redrawn_line(self):
        if shutil.which("script") is None:
            self.skipTest("script (util-linux) is missing")
        store = self.path("tty")
        p = run(["script", "-qec", f"'{PCR}' build '{self.src}' '{store}' " + " ".join(OPTS),
                 "/dev/null"], text=True)
        # (Python's text mode reads the line's "\r" as a line break.)
        self.assertRegex(p.stdout, r"\npcr build: (\d+)/\1 files \(100.0%\).*\033\[K")
        self.assertIn("JPEGs transcoded", p.stdout)
        p = run(["script", "-qec", f"'{PCR}' build '{self.src}' '{store}2' --quiet " +
                 " ".join(OPTS), "/dev/null"], text=True)
        self.assertNotIn("files (", p.stdout)


class ProvenanceTest(TempDirTest):
    def test_inspect_shows_how_each_store_was_built(self):
        src = self.path("src")
        make_source(src)
        folder = self.path("folder")
        run([PCR, "build", src, folder, *OPTS, "--quiet", "-j", "2"])
        text, built = inspect(folder)
        self.assertEqual(built["command"], "build")
        self.assertEqual(built["source"], {"kind": "folder", "location": src})
        self.assertEqual(built["threads"], 2)
        self.assertLessEqual(built["started_unix_ms"], built["finished_unix_ms"])
        with open(os.path.join(folder, "manifest.json")) as f:
            manifest = f.read()
        self.assertEqual(built["generator"], json.loads(manifest)["generator"])
        self.assertIn(f"built by         pcr build of the folder {src}\n", text)
        self.assertRegex(text, r"from \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC to ")

        tar = self.path("src.tar")
        with tarfile.open(tar, "w") as t:
            t.add(src, arcname=".")
        archive = self.path("archive")
        run([PCR, "build", tar, archive, *OPTS, "--quiet"])
        text, built = inspect(archive)
        self.assertEqual(built["source"], {"kind": "archive", "location": tar,
                                           "nested_archives": True})
        self.assertIn(f"pcr build of the archive {tar}\n", text)

        parts = []
        for i in range(3):
            parts.append(self.path(f"p{i}"))
            run([PCR, "build", src, parts[-1], *OPTS, "--quiet", "--shard", f"{i}/3"])
        merged = self.path("merged")
        run([PCR, "merge", *parts, merged, "--quiet"])
        text, built = inspect(merged)
        self.assertEqual(built["command"], "merge")
        self.assertEqual(built["shards"], 3)
        self.assertEqual(built["source"]["kind"], "folder")
        self.assertIn("(a sharded build: 3 parts merged)", text)

        # Provenance differs (command, times), the store's content does not: merged == single.
        a, b = store_bytes(folder), store_bytes(merged)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k}: the merged store differs from the single build")
        with open(os.path.join(folder, "provenance.json")) as f1, \
                open(os.path.join(merged, "provenance.json")) as f2:
            self.assertNotEqual(f1.read(), f2.read())
        # ... and the manifest names no time, host or source.
        for fact in (src, str(built["started_unix_ms"]), built["host"]):
            if fact:
                self.assertNotIn(fact, manifest)
        self.assertEqual(run([PCR, "verify", merged], check=False).returncode, 0)

    def test_store_without_provenance_is_unknown_and_a_damaged_one_is_reported(self):
        src = self.path("src")
        make_source(src)
        store = self.path("store")
        run([PCR, "build", src, store, *OPTS, "--quiet"])
        path = os.path.join(store, "provenance.json")
        with open(path) as f:
            good = f.read()
        os.remove(path)  # as an older pcr left it
        text, built = inspect(store)
        self.assertIn("built by         unknown (no provenance.json", text)
        self.assertIsNone(built)
        self.assertEqual(run([PCR, "verify", store], check=False).returncode, 0)
        with open(path, "w") as f:
            f.write(good.replace('"command"', '"comand"'))
        text, built = inspect(store)
        self.assertIn('built by         unknown (provenance.json: missing field "command")', text)
        p = run([PCR, "verify", store], check=False, text=True)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("provenance.json", p.stdout)


if __name__ == "__main__":
    import unittest
    unittest.main()
