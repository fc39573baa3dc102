#!/usr/bin/python3
"""`pcr inspect`, `pcr verify` and `pcr extract` on real stores, damaged on purpose."""

import json
import os
import shutil
import tempfile
import unittest

from pcrtest import (PCR, PCRFS, Mount, TempDirTest, make_messy_tree, pcr_cat, photo, pil_pixels,
                     read_tree, run, save_jpeg)


def build_store(tmp, n=20, per_record=6):
    src = os.path.join(tmp, "src")
    for i in range(n):
        save_jpeg(photo(180 + i, 120 + i, 300 + i), os.path.join(src, f"d{i % 3}", f"{i:02d}.jpg"),
                  quality=85)
    with open(os.path.join(src, "notes.txt"), "w") as f:
        f.write("not an image\n" * 50)
    store = os.path.join(tmp, "store")
    run([PCR, "build", src, store, "--quiet", "--images-per-record", str(per_record)])
    return src, store


def damage_group5_piece(store, rel, level4, level5):
    """Flips one byte inside the group-5 piece of `rel` (its level-4 and level-5 bytes given)
    in whichever record file holds it; returns the names of the record files changed."""
    piece = level5[len(level4) - 2:len(level5) - 2]
    damaged = []
    for name in sorted(os.listdir(os.path.join(store, "records"))):
        path = os.path.join(store, "records", name)
        data = bytearray(open(path, "rb").read())
        pos = data.find(piece)
        if pos >= 0:
            data[pos + len(piece) // 3] ^= 0x01
            open(path, "wb").write(bytes(data))
            damaged.append(name)
    return damaged


def verify(store, *extra):
    return run([PCR, "verify", store, *extra], check=False, text=True)


class InspectTest(TempDirTest):
    def test_totals_equal_sizes_read_through_a_mount(self):
        src = self.path("src")
        make_messy_tree(src)
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet"])
        info = json.loads(run([PCR, "inspect", store, "--json"], text=True).stdout)
        self.assertEqual(info["format_version"], 2)
        self.assertEqual(info["files"], info["jpeg"] + info["passthrough"])
        self.assertEqual(sum(info["passthrough_by_reason"].values()), info["passthrough"])
        mnt = self.path("mnt")
        with Mount(store, mnt):
            for level in info["levels"]:
                k = level["level"]
                total = 0
                for dirpath, _, names in os.walk(os.path.join(mnt, f"scan{k}")):
                    total += sum(len(open(os.path.join(dirpath, n), "rb").read()) for n in names)
                self.assertEqual(level["bytes"], total, f"level {k}")
        source_total = sum(os.path.getsize(os.path.join(d, n))
                           for d, _, ns in os.walk(src) for n in ns)
        self.assertEqual(info["source_bytes"], source_total)
        # Record bytes, what reading a level reads of the records: level 10 is every record
        # file whole, and each level adds to them exactly the bytes it adds to the files.
        levels = info["levels"]
        records = os.path.join(store, "records")
        self.assertEqual(levels[9]["record_bytes"],
                         sum(os.path.getsize(os.path.join(records, n))
                             for n in os.listdir(records)))
        for below, above in zip(levels, levels[1:]):
            self.assertEqual(above["record_bytes"] - below["record_bytes"],
                             above["bytes"] - below["bytes"], f"level {above['level']}")
        self.assertGreater(levels[0]["record_bytes"], 0)
        self.assertAlmostEqual(levels[0]["record_percent_of_source"],
                               100 * levels[0]["record_bytes"] / source_total)
        text = run([PCR, "inspect", store], text=True).stdout
        for words in ("format version   2", "records", "not-jpeg", "% of source", "record bytes"):
            self.assertIn(words, text)

    def test_bad_store(self):
        p = run([PCR, "inspect", self.path("nope")], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("nope", p.stderr)


class RecommendTest(TempDirTest):
    def test_recommend_is_monotone_and_the_mount_follows_it(self):
        src, store = build_store(self.tmp, n=30)
        info = json.loads(run([PCR, "inspect", store, "--json"], text=True).stdout)
        q = info["quality"]
        self.assertEqual(q["measured"], 30)
        self.assertIsNone(q["levels"][9]["psnr"]["mean"])  # identical pixels
        self.assertEqual(q["levels"][9]["msssim"]["p5"], 1.0)
        p5 = [lv["msssim"]["p5"] for lv in q["levels"]]
        levels = []
        grid = [0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0]
        for x in grid:
            out = run([PCR, "inspect", store, "--recommend", "--min-msssim", str(x)], text=True)
            k = int(out.stdout.strip())
            # The lowest level that reaches x, by the manifest's own numbers.
            self.assertGreaterEqual(p5[k - 1], x)
            self.assertTrue(all(v < x for v in p5[:k - 1]), (x, k, p5))
            self.assertIn(f"level {k}", out.stderr)
            levels.append(k)
        self.assertEqual(levels, sorted(levels), "recommend must be monotone in X")
        self.assertLess(levels[0], levels[-1])

        x = grid[4]
        k = levels[4]
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", f"msssim={x}") as m:
            f = os.path.join(mnt, "d0", "00.jpg")
            self.assertEqual(os.getxattr(f, "user.pcrfs.level"), str(k).encode())
            self.assertEqual(open(f, "rb").read(), pcr_cat(store, "d0/00.jpg", k))
            self.assertIn(f"serving level {k}", m.log())

    def test_quality_sample_is_optional_and_remeasurable(self):
        src = self.path("src")
        for i in range(5):
            save_jpeg(photo(200, 150, i), os.path.join(src, f"{i}.jpg"))
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet", "--quality-sample", "0"])
        info = json.loads(run([PCR, "inspect", store, "--json"], text=True).stdout)
        self.assertNotIn("quality", info)
        p = run([PCR, "inspect", store, "--recommend", "--min-msssim", "0.9"], check=False,
                text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no quality sample", p.stderr)
        p = run([PCR, "inspect", store, "--recommend", "--min-msssim", "0.9", "--quality"],
                text=True)
        self.assertIn(p.stdout.strip(), [str(k) for k in range(1, 11)])
        p = run([PCRFS, store, self.path("mnt"), "-o", "msssim=0.9", "-f"],
                check=False, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no quality sample", p.stderr)
        for bad in (["--min-msssim", "0.9"], ["--recommend", "--min-msssim", "1.5"]):
            p = run([PCR, "inspect", store, *bad], check=False, text=True)
            self.assertEqual(p.returncode, 2, bad)


def tree_meta(root):
    """{relative path: (kind, permission bits, mtime ns)} of everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, n))
            kind = "d" if n in dirnames else "f"
            out[os.path.relpath(os.path.join(dirpath, n), root)] = (kind, st.st_mode & 0o777,
                                                                     st.st_mtime_ns)
    return out


class ExtractTest(TempDirTest):
    def extract(self, store, out, *extra):
        return run([PCR, "extract", store, out, *extra], check=False, text=True)

    def test_every_level_is_the_tree_pcr_cat_and_the_mount_give(self):
        src = self.path("src")
        make_messy_tree(src)
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet", "--images-per-record", "4"])
        source = read_tree(src)
        mnt = self.path("mnt")
        with Mount(store, mnt):
            for k in (1, 3, 10):
                out = self.path(f"level{k}")
                p = self.extract(store, out, "--scans", str(k), "--jobs", "3")
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(f"{len(source)} files", p.stdout)
                # Folders (empty ones too), files, permission bits and times as the source has
                # them; the bytes as pcr cat and the mount give them at that level.
                self.assertEqual(tree_meta(out), tree_meta(src), f"level {k}")
                got = read_tree(out)
                self.assertEqual(sorted(got), sorted(source))
                for rel, data in got.items():
                    self.assertEqual(data, pcr_cat(store, rel, k), f"{rel} level {k}")
                    self.assertEqual(data, open(os.path.join(mnt, f"scan{k}", rel), "rb").read())
        level10 = read_tree(self.path("level10"))
        self.assertEqual(pil_pixels(level10["top level.jpg"]), pil_pixels(source["top level.jpg"]))
        for rel in ("labels.csv", "train/random.jpg", "train/truncated.jpg", "train/zero.jpg"):
            self.assertEqual(read_tree(self.path("level1"))[rel], source[rel], rel)

    def test_refuses_a_folder_that_is_not_empty(self):
        src, store = build_store(self.tmp, n=4)
        out = self.path("out")
        os.makedirs(out)
        open(os.path.join(out, "mine.txt"), "w").write("keep me")
        p = self.extract(store, out)
        self.assertEqual(p.returncode, 2)
        self.assertIn(out, p.stderr)
        self.assertIn("not empty", p.stderr)
        self.assertEqual(os.listdir(out), ["mine.txt"])
        self.assertEqual(open(os.path.join(out, "mine.txt")).read(), "keep me")
        p = self.extract(store, os.path.join(out, "mine.txt"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a folder", p.stderr)
        for bad in (["--scans", "11"], ["--scans", "0"]):
            p = self.extract(store, self.path("fresh"), *bad)
            self.assertEqual(p.returncode, 2, bad)
            self.assertFalse(os.path.exists(self.path("fresh")))
        p = self.extract(self.path("nope"), self.path("fresh"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("nope", p.stderr)
        self.assertFalse(os.path.exists(self.path("fresh")))

    def test_damaged_file_is_named_and_left_out_the_others_are_exact(self):
        src, store = build_store(self.tmp)
        rel = "d1/07.jpg"
        clean = {k: read_tree(self.path(f"clean{k}")) for k in (4, 5)
                 if self.extract(store, self.path(f"clean{k}"), "-k", str(k)).returncode == 0}
        self.assertEqual(sorted(clean), [4, 5])
        self.assertEqual(len(damage_group5_piece(store, rel, clean[4][rel], clean[5][rel])), 1)
        # Level 4 does not touch group 5: all exact.
        p = self.extract(store, self.path("out4"), "-k", "4")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(read_tree(self.path("out4")), clean[4])
        # Level 5: that one file is named and absent (never partly written); the rest exact.
        p = self.extract(store, self.path("out5"), "-k", "5")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(rel, p.stderr)
        self.assertIn("1 of 21 files failed", p.stderr)
        got = read_tree(self.path("out5"))
        self.assertNotIn(rel, sorted(got))
        self.assertEqual(got, {f: b for f, b in clean[5].items() if f != rel})


class VerifyTest(TempDirTest):
    def test_clean_store_verifies(self):
        src, store = build_store(self.tmp)
        p = verify(store, "--source", src)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("pcr verify: OK", p.stdout)
        self.assertIn("21 files compared", p.stdout)

    def test_older_store_verifies_mounts_and_upgrades(self):
        # A store as pcr built it before index format 4: index.lmdb, manifest format 1.
        src, store = build_store(self.tmp)
        run([PCR, "extract", store, self.path("want"), "--scans", "5"])
        want = read_tree(self.path("want"))
        run([PCR, "lmdb-index", store])
        self.assertEqual(sorted(os.listdir(store)),
                         ["index.lmdb", "manifest.json", "provenance.json", "records"])
        p = verify(store, "--source", src)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with Mount(store, self.path("mnt")) as m:
            self.assertEqual(read_tree(os.path.join(m.mnt, "scan5")), want)
        p = run([PCR, "upgrade", store], text=True)
        self.assertIn("wrote index.pcri", p.stdout)
        self.assertIn("index.pcri", os.listdir(store))
        self.assertEqual(verify(store).returncode, 0)
        with Mount(store, self.path("mnt")) as m:
            self.assertEqual(read_tree(os.path.join(m.mnt, "scan5")), want)
        # The store keeps index.lmdb and format 1, for older readers.
        self.assertIn('"format_version": 1', open(os.path.join(store, "manifest.json")).read())

    def test_lmdb_image_named_index_pcri_is_refused(self):
        # index.pcri is read by pcrfs's own parser only; an LMDB image under that name must not
        # reach liblmdb (which trusts its pages: the reason index.lmdb now goes through the
        # bounds-checked page walker). Review finding; fails on 135374f (verify says OK and the
        # file is mapped by liblmdb).
        _, store = build_store(self.tmp)
        run([PCR, "lmdb-index", store])
        os.rename(os.path.join(store, "index.lmdb"), os.path.join(store, "index.pcri"))
        p = verify(store)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("index.pcri", p.stderr)

    def test_flipped_byte_names_exactly_the_damaged_file(self):
        src, store = build_store(self.tmp)
        # Damage the group-5 piece of one file in record 1.
        rel = "d1/07.jpg"
        self.assertEqual(
            len(damage_group5_piece(store, rel, pcr_cat(store, rel, 4), pcr_cat(store, rel, 5))), 1)
        p = verify(store)
        self.assertEqual(p.returncode, 1, p.stdout)
        lines = [l for l in p.stdout.splitlines() if l.startswith("damaged")]
        self.assertEqual(len(lines), 1, p.stdout)
        self.assertIn(rel, lines[0])
        self.assertIn("group 5", lines[0])

    def test_truncated_record_names_its_files(self):
        src, store = build_store(self.tmp)
        path = os.path.join(store, "records", "00000002.pcr")
        size = os.path.getsize(path)
        os.truncate(path, size - 100)
        p = verify(store)
        self.assertEqual(p.returncode, 1)
        damaged = sorted(l.split()[1].rstrip(":") for l in p.stdout.splitlines()
                         if l.startswith("damaged") and not l.split()[1].startswith("records/"))
        # Record 2 holds slots 12..17 of the walk order.
        walk = sorted(os.path.relpath(os.path.join(d, n), src)
                      for d, _, ns in os.walk(src) for n in ns)
        self.assertEqual(len(damaged), 6, p.stdout)
        self.assertIn("records/00000002.pcr", p.stdout)
        for rel in damaged:
            self.assertIn(rel, walk)

    def test_missing_record_file(self):
        src, store = build_store(self.tmp)
        os.unlink(os.path.join(store, "records", "00000000.pcr"))
        p = verify(store)
        self.assertEqual(p.returncode, 1)
        self.assertIn("record file is missing", p.stdout)

    def test_source_changed_after_build(self):
        src, store = build_store(self.tmp)
        save_jpeg(photo(180 + 4, 120 + 4, 9999), os.path.join(src, "d1", "04.jpg"), quality=85)
        with open(os.path.join(src, "notes.txt"), "a") as f:
            f.write("one more line\n")
        save_jpeg(photo(50, 50, 1), os.path.join(src, "new.jpg"))
        os.unlink(os.path.join(src, "d2", "05.jpg"))
        p = verify(store, "--source", src)
        self.assertEqual(p.returncode, 1)
        out = p.stdout
        self.assertIn("differs  d1/04.jpg: level 10 pixels differ", out)
        self.assertIn("differs  notes.txt: bytes differ", out)
        self.assertIn("missing  new.jpg", out)
        self.assertIn("extra    d2/05.jpg", out)
        self.assertEqual(out.count("\ndiffers") + out.startswith("differs"), 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
