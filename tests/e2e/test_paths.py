#!/usr/bin/python3
"""Paths as users write them (`pcr cat STORE ./a//b.jpg`), sources deeper than PATH_MAX, and
sparse files: each built, mounted and read back."""

import hashlib
import io
import os
import unittest

from PIL import Image

from pcrtest import PCR, Mount, TempDirTest, photo, pil_pixels, run

PATH_MAX = 4096


def open_deep(root, parts, flags=os.O_RDONLY):
    """Opens root/parts[0]/.../parts[-1], each step relative to the last folder's descriptor,
    so the whole path may be longer than PATH_MAX."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in parts[:-1]:
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        return os.open(parts[-1], flags, 0o644, dir_fd=fd)
    finally:
        os.close(fd)


def read_fd(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def jpeg_bytes(seed):
    buf = io.BytesIO()
    photo(160, 120, seed).save(buf, "JPEG", quality=90)
    return buf.getvalue()


class CatPathsTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.src = self.path("src")
        os.makedirs(os.path.join(self.src, "a", "b"))
        self.data = jpeg_bytes(1)
        with open(os.path.join(self.src, "a", "b", "c.jpg"), "wb") as f:
            f.write(self.data)
        with open(os.path.join(self.src, "top.txt"), "wb") as f:
            f.write(b"top\n")
        self.store = self.path("store")
        run([PCR, "build", self.src, self.store, "--quiet", "--quality-sample", "0"])
        self.want = run([PCR, "cat", self.store, "a/b/c.jpg"]).stdout
        self.assertEqual(pil_pixels(self.want), pil_pixels(self.data))

    def cat(self, path):
        return run([PCR, "cat", self.store, path], check=False)

    def test_spellings_of_one_file(self):
        for path in ("./a/b/c.jpg", "a//b/c.jpg", "/a/b/c.jpg", "a/./b//./c.jpg",
                     "a/b/../b/c.jpg", "./a/../a/b/c.jpg", ".//a/b/c.jpg"):
            with self.subTest(path=path):
                p = self.cat(path)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(p.stdout, self.want)
        p = self.cat("a/b/../../top.txt")
        self.assertEqual((p.returncode, p.stdout), (0, b"top\n"), p.stderr)

    def test_bad_spellings_fail_clearly(self):
        cases = {
            "../a/b/c.jpg": '".." leads out of the dataset\'s root',
            "a/../../top.txt": '".." leads out of the dataset\'s root',
            "a/b/c.jpg/": "not a directory",
            "a/b/c.jpg/.": "not a directory",
            "top.txt/../a/b/c.jpg": "a component is not a directory",
            "a/nothing/../b/c.jpg": "no such file in the store",
            "a/b/": "is a directory",
            ".": "is a directory",
        }
        for path, message in cases.items():
            with self.subTest(path=path):
                p = self.cat(path)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, b"")
                self.assertEqual(p.stderr.decode(), f"pcr cat: {path}: {message}\n")


class DeepAndSparseTest(TempDirTest):
    def test_source_deeper_than_path_max_builds_mounts_and_reads_back(self):
        src = self.path("src")
        os.makedirs(src)
        parts = [f"{i:02d}" + "d" * 198 for i in range(24)]  # 24 x 201 bytes: ~4.8 KB
        fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
        for name in parts:
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
        rel = "/".join(parts)
        self.assertGreater(len(os.path.join(src, rel)), PATH_MAX)
        data = jpeg_bytes(2)
        blob = os.urandom(70000)
        for name, content in (("deep.jpg", data), ("deep.bin", blob)):
            fd = open_deep(src, parts + [name], os.O_WRONLY | os.O_CREAT)
            os.write(fd, content)
            os.close(fd)
        with open(os.path.join(src, "shallow.txt"), "w") as f:
            f.write("near the root\n")

        store = self.path("store")
        p = run([PCR, "build", src, store, "--quality-sample", "0"], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("3 files, 25 directories", p.stdout)
        self.assertIn("JPEGs transcoded     1", p.stdout)
        p = run([PCR, "verify", store, "--source", src], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("3 files compared", p.stdout)
        self.assertEqual(run([PCR, "cat", store, rel + "/deep.bin"]).stdout, blob)

        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10"):
            got_jpeg = read_fd(open_deep(mnt, parts + ["deep.jpg"]))
            got_blob = read_fd(open_deep(mnt, parts + ["deep.bin"]))
        self.assertEqual(got_blob, blob)
        self.assertEqual(pil_pixels(got_jpeg), pil_pixels(data))
        self.assertEqual(got_jpeg, run([PCR, "cat", store, rel + "/deep.jpg"]).stdout)

    def test_sparse_file_reads_back_identical_and_is_stored_at_full_size(self):
        src = self.path("src")
        os.makedirs(src)
        size = 48 << 20
        path = os.path.join(src, "sparse.img")
        with open(path, "wb") as f:
            f.truncate(size)
            f.seek(10 << 20)
            f.write(os.urandom(1 << 20))
            f.seek(size - 5000)
            f.write(b"tail" * 1250)
        st = os.stat(path)
        if st.st_blocks * 512 >= size:
            self.skipTest("the file system of /tmp does not keep holes")
        with open(path, "rb") as f:
            want = hashlib.sha256(f.read()).hexdigest()

        store = self.path("store")
        run([PCR, "build", src, store, "--quiet"])
        stored = sum(os.path.getsize(os.path.join(store, "records", n))
                     for n in os.listdir(os.path.join(store, "records")))
        self.assertGreaterEqual(stored, size, "sparse files are stored at full size")

        mnt = self.path("mnt")
        with Mount(store, mnt):
            for k in (1, 10):
                with open(os.path.join(mnt, f"scan{k}", "sparse.img"), "rb") as f:
                    digest = hashlib.sha256()
                    while chunk := f.read(1 << 20):
                        digest.update(chunk)
                self.assertEqual(digest.hexdigest(), want, f"level {k}")
                self.assertEqual(os.stat(os.path.join(mnt, f"scan{k}", "sparse.img")).st_size,
                                 size)


if __name__ == "__main__":
    unittest.main()
