#!/usr/bin/python3
"""Archives as build sources (docs/design.md, "Archives").

A tar of tars (nested folders, unicode names, a non-JPEG, a broken JPEG) and a zip build stores
whose mounts equal the extracted tree: pixels at level 10 for JPEGs, bytes for the rest. Hostile
archives (path traversal, absolute names, links, duplicates, truncation, a 1 GiB member of zeros,
200k empty members) are reported, exit 3 or 2 as documented, and keep memory bounded.
"""

import io
import os
import subprocess
import tarfile
import tempfile
import unittest
import zipfile

from pcrtest import PCR, Mount, TempDirTest, make_messy_tree, pil_pixels, run, store_bytes

MTIME = 1700000000


def add(tf, name, data, mtime=MTIME, mode=0o644):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode = len(data), mtime, mode
    tf.addfile(ti, io.BytesIO(data))


def tar_bytes(files, mode="w"):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode=mode) as t:
        for name, data in files:
            add(t, name, data)
    return b.getvalue()


def tree_files(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = os.path.join(dirpath, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, root)] = f.read()
    return out


def modes(root):
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = os.stat(p).st_mode
    return out


def same_content(test, src, mounted):
    """Every source file is in the mount: JPEGs with the same pixels, others byte for byte."""
    a, b = tree_files(src), tree_files(mounted)
    test.assertEqual(sorted(a), sorted(b))
    for rel, data in a.items():
        if data == b[rel]:
            continue
        test.assertEqual(pil_pixels(data), pil_pixels(b[rel]), rel)


def build(src, store, *extra, check=False):
    return run([PCR, "build", src, store, "-q", "--quality-sample", "0", *extra], check=check,
               text=True)


# ASan's shadow memory and quarantine are not the builder's memory: under a sanitizer build
# (PCRFS_SANITIZE, passed by tests/CMakeLists.txt) the peak-RSS bounds are not asserted.
SANITIZED = bool(os.environ.get("PCRFS_SANITIZE"))


def peak_rss_kib(args):
    """Runs args in a child; returns (CompletedProcess with text output, that child's own peak
    RSS in KiB, from wait4: RUSAGE_CHILDREN would give the largest child ever reaped)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        p = subprocess.CompletedProcess(args, proc.returncode, out.read().decode(),
                                        err.read().decode())
    return p, usage.ru_maxrss


class ArchiveTest(TempDirTest):
    def messy(self):
        src = self.path("src")
        make_messy_tree(src)
        return src

    def test_tar_of_tars_mounts_as_the_extracted_tree(self):
        src = self.messy()
        # Outer tar: every top-level folder of src as an inner archive (tar, tar.gz, zip).
        outer = self.path("data.tar")
        expected = self.path("expected")
        kinds = {"train": ".tar", "val": ".tar.gz", "empty": ".zip"}
        with tarfile.open(outer, "w") as t:
            for top in sorted(os.listdir(src)):
                p = os.path.join(src, top)
                if os.path.isfile(p):
                    t.add(p, arcname=top)
                    continue
                inner = self.path(top + kinds[top])
                if kinds[top] == ".zip":
                    with zipfile.ZipFile(inner, "w") as z:
                        for d, dirs, names in os.walk(p):
                            for n in dirs + names:
                                z.write(os.path.join(d, n), os.path.relpath(os.path.join(d, n), p))
                else:
                    with tarfile.open(inner, "w:gz" if inner.endswith("gz") else "w") as it:
                        for n in sorted(os.listdir(p)):
                            it.add(os.path.join(p, n), arcname=n)
                t.add(inner, arcname=top + kinds[top])
        os.rename(src, expected)
        store = self.path("st")
        p = build(outer, store, check=True)
        self.assertIn("files", p.stdout)
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10"):
            same_content(self, expected, mnt)
            self.assertTrue(os.path.isdir(os.path.join(mnt, "empty", "also empty")))
        # Deterministic: the same archive gives the same store.
        store2 = self.path("st2")
        build(outer, store2, check=True)
        self.assertEqual(store_bytes(store), store_bytes(store2))
        # --no-nested keeps the inner archives as files.
        store3 = self.path("st3")
        build(outer, store3, "--no-nested", check=True)
        with Mount(store3, mnt, "-o", "scans=10"):
            self.assertEqual(sorted(os.listdir(mnt)),
                             sorted(["empty.zip", "labels.csv", "top level.jpg", "train.tar",
                                     "val.tar.gz"]))
            with open(os.path.join(mnt, "train.tar"), "rb") as f, \
                    open(self.path("train.tar"), "rb") as g:
                self.assertEqual(f.read(), g.read())

    def test_zip_and_tgz(self):
        src = self.messy()
        z = self.path("data.zip")
        with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
            for d, _, names in os.walk(src):
                for n in names:
                    zf.write(os.path.join(d, n), os.path.relpath(os.path.join(d, n), src))
        tgz = self.path("data.bin")  # detected by content, not by name
        with tarfile.open(tgz, "w:gz") as t:
            t.add(src, arcname=".")
        mnt = self.path("mnt")
        folder_store = self.path("folder.st")
        build(src, folder_store, check=True)
        with Mount(folder_store, mnt, "-o", "scans=10"):
            folder_modes = modes(mnt)
        for archive in (z, tgz):
            store = archive + ".st"
            build(archive, store, check=True)
            with Mount(store, mnt, "-o", "scans=10"):
                same_content(self, src, mnt)
                # Modes come from the headers: the same as a build of the folder.
                got = modes(mnt)
                for rel, mode in folder_modes.items():
                    if rel in got or archive == tgz:
                        self.assertEqual(got[rel], mode, rel)

    def test_hostile_members_are_reported_and_nothing_escapes(self):
        good = b"fine\n"
        a = self.path("evil.tar")
        with tarfile.open(a, "w") as t:
            add(t, "ok/a.txt", good)
            add(t, "../escape.txt", b"x")
            add(t, "ok/../../escape2.txt", b"x")
            add(t, "/etc/abs.txt", b"x")
            add(t, "ok/a.txt", b"second copy")
            ln = tarfile.TarInfo("ok/link")
            ln.type, ln.linkname = tarfile.SYMTYPE, "/etc/passwd"
            t.addfile(ln)
            hl = tarfile.TarInfo("ok/hard")
            hl.type, hl.linkname = tarfile.LNKTYPE, "ok/a.txt"
            t.addfile(hl)
        store = self.path("st")
        p = build(a, store)
        self.assertEqual(p.returncode, 3, p.stderr)
        for what in ("../escape.txt", "escape2.txt", "/etc/abs.txt", "duplicate name",
                     "symbolic link", "hard link"):
            self.assertIn(what, p.stdout)
        self.assertFalse(os.path.exists(self.path("escape.txt")))
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10"):
            self.assertEqual(tree_files(mnt), {"ok/a.txt": good})

    def test_truncated_and_unreadable_archives(self):
        files = [(f"f{i}.bin", os.urandom(20000)) for i in range(10)]
        data = tar_bytes(files)
        cut = self.path("cut.tar")
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        store = self.path("st")
        p = build(cut, store)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertRegex(p.stdout, "truncated|damaged|ends early")
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10"):
            got = tree_files(mnt)
            self.assertGreater(len(got), 0)
            for name, content in files:
                if name in got:
                    self.assertEqual(got[name], content)
        junk = self.path("junk.tar")
        with open(junk, "wb") as f:
            f.write(os.urandom(5000))
        p = build(junk, self.path("st2"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("junk.tar", p.stderr)
        self.assertFalse(os.path.exists(self.path("st2")))

    def test_gigabyte_member_of_zeros_in_bounded_memory(self):
        a = self.path("zeros.tar.gz")
        size = 1 << 30
        with tarfile.open(a, "w:gz", compresslevel=1) as t:
            ti = tarfile.TarInfo("big/zeros.bin")
            ti.size = size

            class Zeros(io.RawIOBase):
                left = size

                def readinto(self, b):
                    n = min(len(b), self.left)
                    b[:n] = bytes(n)
                    self.left -= n
                    return n

            t.addfile(ti, Zeros())
            add(t, "big/small.txt", b"small\n")
        store = self.path("st")
        p, rss = peak_rss_kib([PCR, "build", a, store, "-q", "--quality-sample", "0"])
        self.assertEqual(p.returncode, 0, p.stderr)
        if not SANITIZED:
            self.assertLess(rss, 200 * 1024, f"peak RSS {rss} KiB")
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10"):
            path = os.path.join(mnt, "big", "zeros.bin")
            self.assertEqual(os.path.getsize(path), size)
            with open(path, "rb") as f:
                f.seek(size - 4096)
                self.assertEqual(f.read(), bytes(4096))

    def test_bomb_of_tiny_members(self):
        n = 200000
        a = self.path("bomb.tar.gz")
        with tarfile.open(a, "w:gz") as t:
            ti = tarfile.TarInfo()
            ti.mtime = MTIME
            for i in range(n):
                ti.name = f"d{i % 100:02d}/e{i:06d}"
                t.addfile(ti)
        store = self.path("st")
        p, rss = peak_rss_kib([PCR, "build", a, store, "-q", "--quality-sample", "0",
                               "--images-per-record", "4096"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{n} files", p.stdout)
        if not SANITIZED:
            self.assertLess(rss, 200 * 1024, f"peak RSS {rss} KiB")


if __name__ == "__main__":
    unittest.main(verbosity=2)
