#!/usr/bin/python3
"""End-to-end checks of `pcr build` and `pcr cat` on real files, decoded with PIL and djpeg."""

import io
import json
import os
import shutil
import signal
import stat
import subprocess
import time
import unittest

from PIL import Image

from pcrtest import (EOI, MAKE_TEST_JPEGS, PCR, TempDirTest, djpeg_clean, make_messy_tree,
                     pcr_cat, pcr_extract, photo, pil_pixels, run, save_jpeg, store_bytes, tree_digest)


def store_levels(store):
    """{k: {relative path: bytes}}: the store at every level, one pcr extract per level."""
    return {k: pcr_extract(store, k) for k in range(1, 11)}


class BuildTest(TempDirTest):
    def build(self, src, store, *extra, expect=0):
        p = run([PCR, "build", src, store, "--quiet", *extra], check=False, text=True)
        self.assertEqual(p.returncode, expect, f"pcr build exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def check_jpeg_levels(self, levels, rel, source_bytes):
        """Every level decodes cleanly, ends with EOI, grows with k; level 10 = source pixels.
        levels[k] is the store at level k as pcr extract writes it (store_levels)."""
        sizes = []
        for k in range(1, 11):
            data = levels[k][rel]
            self.assertTrue(data.endswith(EOI), f"{rel} level {k} does not end with EOI")
            self.assertTrue(data.startswith(b"\xff\xd8"), f"{rel} level {k} lacks SOI")
            code, err = djpeg_clean(data)
            self.assertEqual((code, err), (0, ""), f"djpeg on {rel} level {k}")
            mode, size, _ = pil_pixels(data)
            self.assertEqual(size, Image.open(io.BytesIO(source_bytes)).size)
            sizes.append(len(data))
        self.assertEqual(sizes, sorted(sizes), f"{rel}: level sizes decrease: {sizes}")
        self.assertEqual(pil_pixels(levels[10][rel]), pil_pixels(source_bytes),
                         f"{rel}: level 10 pixels differ from the source")
        return sizes

    def test_every_jpeg_variety_is_lossless_at_level_10(self):
        src = self.path("varieties")
        run([MAKE_TEST_JPEGS, src])
        names = sorted(os.listdir(src))
        self.assertGreaterEqual(len(names), 12)
        store = self.path("store")
        self.build(src, store)
        manifest = json.load(open(os.path.join(store, "manifest.json")))
        self.assertEqual(manifest["num_passthrough"], 0, manifest)
        levels = store_levels(store)
        for name in names:
            with self.subTest(name=name):
                with open(os.path.join(src, name), "rb") as f:
                    self.check_jpeg_levels(levels, name, f.read())

    def test_messy_tree_comes_back_whole(self):
        src = self.path("src")
        make_messy_tree(src)
        # Symlinks to a file and to a folder are followed.
        os.symlink("cat/img 1.JPEG", os.path.join(src, "train/link.jpg"))
        os.symlink("../train/cat", os.path.join(src, "val/linked dir"))
        before = tree_digest(src)
        store = self.path("store")
        p = self.build(src, store)
        self.assertEqual(tree_digest(src), before, "the build modified the source")
        self.assertIn("passthrough", p.stdout)

        manifest = json.load(open(os.path.join(store, "manifest.json")))
        reasons = manifest["passthrough_by_reason"]
        for reason in ("empty", "not-jpeg", "truncated", "trailing-data"):
            self.assertIn(reason, reasons, manifest)
        for rel in ("train/truncated.jpg", "train/trailing.jpg"):
            self.assertIn(rel, p.stdout, "a JPEG stored byte for byte is named in the report")

        seen = 0
        levels = store_levels(store)
        for dirpath, dirnames, filenames in os.walk(src, followlinks=True):
            for name in filenames:
                abs_path = os.path.join(dirpath, name)
                rel = os.path.relpath(abs_path, src)
                data = open(abs_path, "rb").read()
                seen += 1
                try:
                    clean = Image.open(abs_path).format == "JPEG" and djpeg_clean(data) == (0, "") \
                        and not data.endswith(b"GARBAGE AFTER EOI")
                except Exception:
                    clean = False
                with self.subTest(rel=rel):
                    if clean:
                        self.check_jpeg_levels(levels, rel, data)
                    else:
                        for k in (1, 4, 10):
                            self.assertEqual(levels[k][rel], data,
                                             f"{rel} level {k} is not byte-identical")
        self.assertEqual(manifest["num_jpeg"] + manifest["num_passthrough"], seen)
        self.assertEqual(len(levels[10]), seen, "pcr extract wrote another number of files")
        # Empty folders are entries too: cat on them says "is a directory".
        p = run([PCR, "cat", store, "empty/also empty"], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("is a directory", p.stderr)
        p = run([PCR, "cat", store, "no/such/file.jpg"], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("no/such/file.jpg", p.stderr)

    def test_two_builds_are_byte_identical(self):
        src = self.path("src")
        make_messy_tree(src)
        a, b = self.path("a"), self.path("b")
        self.build(src, a, "--threads", "2", "--images-per-record", "3")
        self.build(src, b, "--threads", "1", "--images-per-record", "3")
        sa, sb = store_bytes(a), store_bytes(b)
        self.assertEqual(sorted(sa), sorted(sb))
        self.assertGreater(len([k for k in sa if k.startswith("records/")]), 3)
        for k in sa:
            self.assertEqual(sa[k], sb[k], f"{k} differs between two builds")

    def test_killed_build_resumes_to_identical_store(self):
        src = self.path("src")
        for i in range(240):
            save_jpeg(photo(160 + i % 50, 120 + i % 30, 1000 + i), os.path.join(
                src, f"c{i % 4}", f"{i:04d}.jpg"), quality=85)
        ref = self.path("ref")
        self.build(src, ref, "--images-per-record", "8", "--threads", "1")

        store = self.path("store")
        partial = store + ".partial"
        proc = subprocess.Popen([PCR, "build", src, store, "--quiet", "--images-per-record", "8",
                                 "--threads", "1"], stdout=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            recs = os.path.join(partial, "records")
            if os.path.isdir(recs) and len([n for n in os.listdir(recs) if n.endswith(".pcr")]) >= 6:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.assertFalse(os.path.exists(store), "a killed build must not look complete")
        self.assertTrue(os.path.isdir(partial))
        p = self.build(src, store, "--images-per-record", "8", "--threads", "1", "--resume")
        self.assertIn("kept from the interrupted build", p.stdout)
        self.assertFalse(os.path.exists(partial))
        sa, sb = store_bytes(ref), store_bytes(store)
        self.assertEqual(sorted(sa), sorted(sb))
        for k in sa:
            self.assertEqual(sa[k], sb[k], f"{k} differs after resume")

    def test_bad_arguments_fail_before_any_work(self):
        empty = self.path("empty")
        os.makedirs(empty)
        src = self.path("src")
        save_jpeg(photo(32, 32, 1), os.path.join(src, "a.jpg"))
        existing = self.path("existing")
        os.makedirs(existing)
        open(os.path.join(existing, "precious.txt"), "w").write("keep me")
        cases = [
            ([self.path("missing"), self.path("s1")], "missing"),
            ([empty, self.path("s2")], "empty"),
            ([os.path.join(src, "a.jpg"), self.path("s3")], "not a directory"),
            ([src, existing], "already exists"),
            ([src, existing, "--force"], "not a pcrfs store"),
            ([src, os.path.join(src, "inside")], "inside the source"),
            ([src, self.path("no/such/parent/store")], "does not exist"),
        ]
        for args, words in cases:
            with self.subTest(args=args):
                p = run([PCR, "build", *args], check=False, text=True)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(words, p.stderr)
                self.assertEqual(p.stderr.count("\n"), 1, "one clear line: " + p.stderr)
        self.assertEqual(open(os.path.join(existing, "precious.txt")).read(), "keep me")
        self.assertEqual(os.listdir(src), ["a.jpg"])
        # --force replaces an existing store.
        store = self.path("store")
        self.build(src, store)
        save_jpeg(photo(32, 32, 2), os.path.join(src, "b.jpg"))
        self.build(src, store, "--force")
        self.assertEqual(json.load(open(os.path.join(store, "manifest.json")))["num_jpeg"], 2)
        # A bare relative STORE name (no slash) is a store in the current folder.
        p = run([PCR, "build", src, "relative.pcr", "--quiet"], cwd=self.tmp, check=False,
                text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.isfile(self.path("relative.pcr", "manifest.json")))

    def test_unstorable_entries_are_named_and_exit_nonzero(self):
        src = self.path("src")
        save_jpeg(photo(40, 40, 3), os.path.join(src, "ok.jpg"))
        os.symlink("nowhere.jpg", os.path.join(src, "dangling.jpg"))
        os.symlink("loop_b", os.path.join(src, "loop_a"))
        os.symlink("loop_a", os.path.join(src, "loop_b"))
        os.symlink(".", os.path.join(src, "self"))
        os.mkfifo(os.path.join(src, "fifo"))
        store = self.path("store")
        p = self.build(src, store, expect=3)
        for words in ("dangling.jpg: dangling symlink", "loop_a: symlink loop", "self: symlink loop",
                      "fifo: not a regular file"):
            self.assertIn(words, p.stdout)
        self.assertIn("could not be stored", p.stderr)
        self.assertEqual(pcr_cat(store, "ok.jpg", 10)[:2], b"\xff\xd8")

    def test_unreadable_entries_are_named(self):
        # Root reads everything, so the build runs as nobody over a file and a folder it may
        # not read.
        if shutil.which("setpriv") is None:
            self.skipTest("setpriv (util-linux) is missing")
        os.chmod(self.tmp, 0o777)
        src = self.path("src")
        save_jpeg(photo(40, 40, 3), os.path.join(src, "ok.jpg"))
        save_jpeg(photo(40, 40, 4), os.path.join(src, "secret.jpg"))
        save_jpeg(photo(40, 40, 5), os.path.join(src, "locked", "inside.jpg"))
        os.chmod(os.path.join(src, "secret.jpg"), 0o000)
        os.chmod(os.path.join(src, "locked"), 0o000)
        for dirpath, dirnames, _ in os.walk(src):
            os.chmod(dirpath, 0o755 if not dirpath.endswith("locked") else 0o000)
        store = self.path("store")
        p = run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", PCR, "build",
                 src, store, "--quiet"], check=False, text=True)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("secret.jpg: unreadable", p.stdout)
        self.assertIn("locked: cannot", p.stdout)
        self.assertEqual(pcr_cat(store, "ok.jpg", 10)[:2], b"\xff\xd8")
        self.assertNotEqual(run([PCR, "cat", store, "secret.jpg"], check=False).returncode, 0)

    def test_progress_line_on_a_terminal(self):
        if shutil.which("script") is None:
            self.skipTest("script (util-linux) is missing")
        src = self.path("src")
        for i in range(30):
            save_jpeg(photo(200, 150, i), os.path.join(src, f"{i}.jpg"))
        store = self.path("store")
        p = run(["script", "-qec", f"'{PCR}' build '{src}' '{store}'", "/dev/null"], text=True)
        self.assertRegex(p.stdout, r"30/30 files \(100.0%\), .*, [0-9.]+ files/s, .*, ETA 0:00")
        self.assertIn("JPEGs transcoded     30", p.stdout)

    def test_non_utf8_names_are_kept_exactly(self):
        src = self.path("src")
        os.makedirs(src)
        name = b"caf\xe9 \xff\xfe.jpg"  # Latin-1, not UTF-8: legal on Linux
        data = io.BytesIO()
        photo(50, 40, 8).save(data, "JPEG")
        with open(os.path.join(os.fsencode(src), name), "wb") as f:
            f.write(data.getvalue())
        store = self.path("store")
        self.build(src, store)
        got = subprocess.run([os.fsencode(PCR), b"cat", os.fsencode(store), name],
                             stdout=subprocess.PIPE, check=True).stdout
        self.assertEqual(pil_pixels(got), pil_pixels(data.getvalue()))

    def test_metadata_kept_by_default_and_stripped_on_request(self):
        src = self.path("src")
        os.makedirs(src)
        exif = Image.Exif()
        exif[0x010F] = "pcrfs test camera"  # Make
        exif[0x0131] = "pcrfs"  # Software
        im = photo(120, 80, 11)
        im.save(os.path.join(src, "exif.jpg"), "JPEG", exif=exif.tobytes(), quality=90,
                comment=b"a JPEG comment")
        source = open(os.path.join(src, "exif.jpg"), "rb").read()
        kept, stripped = self.path("kept"), self.path("stripped")
        self.build(src, kept)
        self.build(src, stripped, "--strip-metadata")
        a = pcr_cat(kept, "exif.jpg", 10)
        b = pcr_cat(stripped, "exif.jpg", 10)
        self.assertEqual(Image.open(io.BytesIO(a)).getexif()[0x010F], "pcrfs test camera")
        self.assertIn(b"a JPEG comment", a)
        self.assertNotIn(0x010F, Image.open(io.BytesIO(b)).getexif())
        self.assertNotIn(b"a JPEG comment", b)
        self.assertNotIn(b"Exif\0\0", b)
        self.assertEqual(pil_pixels(a), pil_pixels(source))
        self.assertEqual(pil_pixels(b), pil_pixels(source))
        self.assertLess(len(b), len(a))

    def test_cat_arguments(self):
        src = self.path("src")
        save_jpeg(photo(40, 40, 3), os.path.join(src, "ok.jpg"))
        store = self.path("store")
        self.build(src, store)
        for bad in (["--scans", "0"], ["--scans", "11"]):
            p = run([PCR, "cat", store, "ok.jpg", *bad], check=False)
            self.assertEqual(p.returncode, 2)
        p = run([PCR, "cat", self.path("nostore"), "ok.jpg"], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("nostore", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
