#!/usr/bin/python3
"""End-to-end checks of sharded builds: `pcr build SRC PART --shard I/N` and `pcr merge`.

The merged store must be byte-identical (records, index.pcri, manifest.json) to the single build
with the same options; wrong sets of parts must be refused with a one-line error.
"""

import os
import random
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import unittest

from pcrtest import (PCR, Mount, TempDirTest, make_messy_tree, photo, pil_pixels, run, save_jpeg,
                     store_bytes)

OPTS = ["--images-per-record", "3", "--quality-sample", "7", "--quality-seed", "11"]


def make_source(root):
    make_messy_tree(root)
    for i in range(30):
        save_jpeg(photo(64 + 3 * i, 48 + 2 * i, 500 + i), os.path.join(
            root, f"class{i % 3}", f"img{i:03d}.jpg"), quality=80 + i % 15)
    # Pieces longer than a checksum block (1 MiB) carry block CRCs in the index.
    with open(os.path.join(root, "class1", "blob.bin"), "wb") as f:
        f.write(random.Random(5).randbytes(2_500_000))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class ShardTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = TempDirTest()
        cls.shared.setUp()
        cls.src = cls.shared.path("src")
        make_source(cls.src)
        cls.single = cls.shared.path("single")
        run([PCR, "build", cls.src, cls.single, "--quiet", "--threads", "2", *OPTS])
        cls.parts3 = [cls.shard(cls.src, cls.shared.path(f"p3_{i}"), i, 3) for i in range(3)]

    @classmethod
    def tearDownClass(cls):
        cls.shared.tearDown()

    @staticmethod
    def shard(src, part, i, n, *extra, opts=OPTS, expect=0):
        p = run([PCR, "build", src, part, "--quiet", "--threads", "1", "--shard", f"{i}/{n}",
                 *opts, *extra], check=False, text=True)
        if p.returncode != expect:
            raise AssertionError(f"shard {i}/{n} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return part

    def merge(self, parts, store, expect=0):
        p = run([PCR, "merge", *parts, store], check=False, text=True)
        self.assertEqual(p.returncode, expect, f"pcr merge exited {p.returncode}:\n{p.stdout}\n"
                         f"{p.stderr}")
        return p

    def assert_identical(self, store, reference):
        a, b = store_bytes(reference), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        self.assertGreater(len([k for k in a if k.startswith("records/")]), 7)
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs from the single build")

    def refused(self, parts, needle, code=2):
        store = self.path("refused")
        p = self.merge(parts, store, expect=code)
        lines = p.stderr.strip().splitlines()
        self.assertIn(needle, lines[0])
        self.assertFalse(os.path.exists(store), "a refused merge must write no store")
        self.assertFalse(os.path.exists(store + ".partial"))
        return lines[0]

    def test_merged_shards_equal_the_single_build(self):
        for n in (1, 2, 3, 7):
            with self.subTest(n=n):
                parts = [self.shard(self.src, self.path(f"n{n}_{i}"), i, n) for i in range(n)]
                random.Random(n).shuffle(parts)  # any order
                store = self.path(f"merged{n}")
                p = self.merge(parts, store)
                self.assertIn("records", p.stdout)
                self.assert_identical(store, self.single)

    def test_more_shards_than_records(self):
        # 16 records over 20 shards: some parts hold no record and are still required.
        parts = [self.shard(self.src, self.path(f"n20_{i}"), i, 20) for i in range(20)]
        self.assertFalse(os.listdir(os.path.join(parts[0], "records")))
        store = self.path("merged20")
        self.merge(parts, store)
        self.assert_identical(store, self.single)
        self.refused(parts[1:], "shard 0/20 is missing")

    def test_shard_argument_checked(self):
        for spec, needle in [("3/3", "I must be between 0 and 2"), ("0/0", "N must be between"),
                             ("1", "expected I/N"), ("a/b", "expected I/N"), ("-1/2", "expected")]:
            with self.subTest(spec=spec):
                p = run([PCR, "build", self.src, self.path("x"), "--shard", spec], check=False,
                        text=True)
                self.assertEqual(p.returncode, 2)
                self.assertIn(needle, p.stderr)
                self.assertIn("--shard", p.stderr)
                self.assertFalse(os.path.exists(self.path("x")))

    def test_wrong_sets_of_parts_are_refused(self):
        p0, p1, p2 = self.parts3
        self.refused([p0, p2], "shard 1/3 is missing (3 parts needed, 2 given)")
        self.refused([p0, p1, p1, p2], "shard 1/3 given twice")
        other_n = self.shard(self.src, self.path("q1_2"), 1, 2)
        self.refused([p0, p1, other_n], "parts of different N cannot be merged")
        other_opts = self.shard(self.src, self.path("strip"), 2, 3, "--strip-metadata")
        line = self.refused([p0, p1, other_opts], "built with other options")
        self.assertIn("strip_metadata=1", line)
        other_src = self.path("src2")
        shutil.copytree(self.src, other_src)
        save_jpeg(photo(50, 40, 77), os.path.join(other_src, "class0", "new.jpg"))
        self.refused([p0, p1, self.shard(other_src, self.path("other"), 2, 3)],
                     "built from a different source")
        self.refused([p0, p1, self.src], "not a pcrfs shard part")
        self.refused([p0, p1, self.single], "not a pcrfs shard part")
        self.refused([p0, p1, self.path("nothing")], "no such part folder")
        # A store already there is not replaced without --force.
        os.makedirs(self.path("exists"))
        p = self.merge([p0, p1, p2], self.path("exists"), expect=2)
        self.assertIn("already exists", p.stderr)

    def test_damaged_parts_are_refused(self):
        def damaged_copy(name, edit):
            parts = [self.path(f"{name}_{i}") for i in range(3)]
            for a, b in zip(self.parts3, parts):
                shutil.copytree(a, b)
            edit(parts[1])
            return parts

        def flip(path, offset):
            with open(path, "r+b") as f:
                f.seek(offset)
                b = f.read(1)
                f.seek(offset)
                f.write(bytes([b[0] ^ 0x40]))

        def first_record(part):
            recs = sorted(os.listdir(os.path.join(part, "records")))
            return os.path.join(part, "records", recs[0])

        # A flipped byte in the middle of a record: found while copying, exit 1, named.
        parts = damaged_copy("rec", lambda p: flip(first_record(p), 300))
        line = self.refused(parts, "damaged part", code=1)
        self.assertIn(first_record(parts[1]), line)
        # A truncated record: found before any work.
        parts = damaged_copy("trunc", lambda p: os.truncate(first_record(p), 100))
        self.refused(parts, "damaged part")
        parts = damaged_copy("gone", lambda p: os.unlink(first_record(p)))
        self.refused(parts, "damaged part")
        # part.json edited (its checksum no longer matches), or cut short.
        def edit_json(p):
            path = os.path.join(p, "part.json")
            with open(path) as f:
                text = f.read().replace('"num_files": ', '"num_files": 1')
            with open(path, "w") as f:
                f.write(text)
        parts = damaged_copy("json", edit_json)
        self.assertIn("checksum mismatch", self.refused(parts, "damaged part"))
        parts = damaged_copy("json2", lambda p: os.truncate(os.path.join(p, "part.json"), 40))
        self.refused(parts, "damaged part")
        parts = damaged_copy("listing", lambda p: flip(os.path.join(p, "listing.bin"), 20))
        self.refused(parts, "listing.bin does not match")

    def test_records_are_linked_on_one_filesystem_and_copied_across(self):
        store = self.path("linked")
        self.merge(self.parts3, store)
        for part in self.parts3:
            for name in os.listdir(os.path.join(part, "records")):
                a = os.stat(os.path.join(part, "records", name))
                b = os.stat(os.path.join(store, "records", name))
                self.assertEqual((a.st_dev, a.st_ino), (b.st_dev, b.st_ino), name)
        if os.stat("/dev/shm").st_dev == os.stat(self.tmp).st_dev:
            self.skipTest("no second filesystem (/dev/shm) to copy across")
        other = tempfile.mkdtemp(prefix="pcrfs-shards-", dir="/dev/shm")
        try:
            store = os.path.join(other, "copied")
            self.merge(self.parts3, store)
            self.assert_identical(store, self.single)
            for name in os.listdir(os.path.join(store, "records")):
                self.assertEqual(os.stat(os.path.join(store, "records", name)).st_nlink, 1)
        finally:
            shutil.rmtree(other, ignore_errors=True)

    def test_mount_of_the_merged_store(self):
        store = self.path("merged")
        self.merge(self.parts3, store)
        mnt = self.path("mnt")
        seen = 0
        with Mount(store, mnt, "-o", "scans=10"):
            for dirpath, _, files in os.walk(self.src):
                for name in files:
                    rel = os.path.relpath(os.path.join(dirpath, name), self.src)
                    src_bytes = read_bytes(os.path.join(self.src, rel))
                    got = read_bytes(os.path.join(mnt, rel))
                    seen += 1
                    if rel.startswith("class") and rel.endswith(".jpg"):
                        self.assertEqual(pil_pixels(got), pil_pixels(src_bytes), rel)
                        self.assertNotEqual(got, src_bytes)  # it was transcoded
                    elif not rel.endswith((".jpg", ".JPEG", ".jpeg")):
                        self.assertEqual(got, src_bytes, rel)
            self.assertEqual(sorted(os.listdir(mnt)), sorted(os.listdir(self.src)))
        self.assertGreater(seen, 40)
        p = run([PCR, "verify", store, "--source", self.src], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_killed_shard_resumes(self):
        src = self.path("big")
        for i in range(150):
            save_jpeg(photo(150 + i % 40, 110 + i % 20, 2000 + i), os.path.join(
                src, f"c{i % 3}", f"{i:04d}.jpg"), quality=85)
        opts = ["--images-per-record", "5", "--quality-sample", "3"]
        ref = self.path("ref")
        run([PCR, "build", src, ref, "--quiet", *opts])
        part = self.path("part1")
        partial = part + ".partial"
        proc = subprocess.Popen([PCR, "build", src, part, "--quiet", "--threads", "1",
                                 "--shard", "1/2", *opts], stdout=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            recs = os.path.join(partial, "records")
            if os.path.isdir(recs) and len([n for n in os.listdir(recs) if n.endswith(".pcr")]) >= 4:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.assertFalse(os.path.exists(part), "a killed shard must not look complete")
        self.assertTrue(os.path.isdir(partial))
        # Resuming as another shard is refused, and leaves the partial part alone.
        p = run([PCR, "build", src, part, "--quiet", "--shard", "0/2", "--resume", *opts],
                check=False, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("shard=1/2", p.stderr)
        p = run([PCR, "build", src, part, "--shard", "1/2", "--resume", "--quiet", *opts],
                text=True)
        self.assertIn("records kept", p.stdout)
        self.assertFalse(os.path.exists(partial))
        part0 = self.shard(src, self.path("part0"), 0, 2, opts=opts)
        store = self.path("store")
        self.merge([part0, part], store)
        a, b = store_bytes(ref), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs after a resumed shard")

    def test_archive_source_shards(self):
        tar = self.path("src.tar")
        with tarfile.open(tar, "w") as t:
            t.add(self.src, arcname=".")
        ref = self.path("tar_single")
        run([PCR, "build", tar, ref, "--quiet", *OPTS])
        parts = [self.shard(tar, self.path(f"tar_{i}"), i, 3) for i in range(3)]
        store = self.path("tar_merged")
        self.merge(parts, store)
        self.assert_identical(store, ref)
        # A part of the folder is not a part of the archive (options and listing differ).
        self.refused([parts[0], parts[1], self.parts3[2]], "built from a different source")


if __name__ == "__main__":
    unittest.main()
