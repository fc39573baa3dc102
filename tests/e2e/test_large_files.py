#!/usr/bin/python3
"""Large files (issue 16 items 1-2): served by range in checked 1 MiB blocks in bounded daemon
memory, built in bounded memory, damage costs only its block, files changing during a build."""

import os
import random
import resource
import subprocess
import threading
import time
import unittest

from pcrtest import (PCR, Mount, TempDirTest, is_mounted, photo, run, save_jpeg,
                     store_resident)

MIB = 1 << 20
# In a sanitizer build (ASan's shadow memory and quarantine of freed blocks) resident memory is
# not the product's: the memory bounds are asserted in the plain build, correctness in both.
SANITIZED = bool(os.environ.get("PCRFS_SANITIZE"))
BIG = 200 * MIB + 12345
BUILD_OPTS = ["--quiet", "--quality-sample", "0"]


def write_random(path, size, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 4 * MIB)
            f.write(rng.randbytes(n))
            left -= n


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def read_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("no read_bytes")


def drop_caches():
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class LargeFileTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        import tempfile
        cls.dir = tempfile.mkdtemp(prefix="pcrfs-large-")
        cls.src = os.path.join(cls.dir, "src")
        os.makedirs(os.path.join(cls.src, "img"))
        write_random(os.path.join(cls.src, "video.bin"), BIG, 1)
        write_random(os.path.join(cls.src, "f70.bin"), 70_000_000, 2)
        for i in range(3):
            save_jpeg(photo(120, 90, i), os.path.join(cls.src, "img", f"{i}.jpg"), quality=90)
        cls.store = os.path.join(cls.dir, "store")
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        run([PCR, "build", cls.src, cls.store, *BUILD_OPTS])
        cls.build_maxrss_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        cls.build_rss_known = cls.build_maxrss_kib > before

    @classmethod
    def tearDownClass(cls):
        import shutil
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_builder_memory_is_bounded(self):
        # The whole 200 MB file never sits in memory (it used to: RSS = file size).
        if SANITIZED:
            self.skipTest("memory bounds are asserted in the unsanitized build")
        self.assertTrue(self.build_rss_known)
        self.assertLess(self.build_maxrss_kib, 150 * 1024, f"pcr build peak RSS {self.build_maxrss_kib} KiB")

    def test_random_reads_in_bounded_memory(self):
        mnt = self.path("mnt")
        src = os.path.join(self.src, "video.bin")
        with Mount(self.store, mnt, "-o", "scans=1,cache_size=64M") as m:
            rng = random.Random(5)
            fd = os.open(os.path.join(mnt, "video.bin"), os.O_RDONLY)
            sfd = os.open(src, os.O_RDONLY)
            try:
                self.assertEqual(os.fstat(fd).st_size, BIG)
                for _ in range(400):
                    n = rng.choice([1, 4096, 100_000, 3 * MIB])
                    off = rng.randrange(0, BIG)
                    self.assertEqual(os.pread(fd, n, off), os.pread(sfd, n, off), (off, n))
                # The tail, the last block's end.
                self.assertEqual(os.pread(fd, 100, BIG - 50), os.pread(sfd, 100, BIG - 50))
                self.assertEqual(os.pread(fd, 10, BIG), b"")
            finally:
                os.close(fd)
                os.close(sfd)
            # Then the whole file, in order.
            with open(os.path.join(mnt, "video.bin"), "rb") as a, open(src, "rb") as b:
                while True:
                    x, y = a.read(8 * MIB), b.read(8 * MIB)
                    self.assertEqual(x, y)
                    if not x:
                        break
            hwm = status_kib(m.proc.pid, "VmHWM")
            # The cache budget (64 MiB) plus a small constant, whatever the file's size.
            if not SANITIZED:
                self.assertLess(hwm, (64 + 64) * 1024, f"daemon VmHWM {hwm} KiB")

    def test_small_read_of_a_cold_large_file_reads_about_one_block(self):
        mnt = self.path("mnt")
        with Mount(self.store, mnt, "-o", "scans=1") as m:
            drop_caches()
            before = read_bytes(m.proc.pid)
            with open(os.path.join(mnt, "video.bin"), "rb") as f:
                f.seek(123 * MIB + 777)
                got = f.read(4096)
            moved = read_bytes(m.proc.pid) - before
            with open(os.path.join(self.src, "video.bin"), "rb") as f:
                f.seek(123 * MIB + 777)
                self.assertEqual(got, f.read(4096))
            # About one checksum block (kernel readahead may add one more), never the 200 MB
            # piece (the index pages it touched count too): the store's pages brought into the
            # page cache. The daemon's read_bytes also counts its own code paged back in after
            # drop_caches, 7.6 MB for an ASan build, so it is shown, not asserted.
            resident = store_resident(self.store)
            self.assertLess(sum(resident.values()), 4 * MIB,
                            f"the store's resident bytes after a 4 KiB read: {resident} "
                            f"(daemon read_bytes {moved})")

    def test_cat_and_verify_stream(self):
        for name in ("video.bin", "f70.bin"):
            out = self.path(name)
            with open(out, "wb") as f:
                p = subprocess.run([PCR, "cat", self.store, name], stdout=f, stderr=subprocess.PIPE)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.path.getsize(out), os.path.getsize(os.path.join(self.src, name)))
            self.assertEqual(subprocess.run(["cmp", out, os.path.join(self.src, name)]).returncode, 0)
            os.unlink(out)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        run([PCR, "verify", self.store, "--source", self.src])
        after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        if after > before and not SANITIZED:  # the largest child so far: this verify
            self.assertLess(after, 150 * 1024, f"pcr verify peak RSS {after} KiB")


class LargeFileDamageTest(TempDirTest):
    def test_damage_costs_only_its_block(self):
        src = self.path("src")
        os.makedirs(src)
        size = 20 * MIB + 5
        write_random(os.path.join(src, "big.bin"), size, 3)
        save_jpeg(photo(100, 80, 1), os.path.join(src, "a.jpg"))
        store = self.path("store")
        run([PCR, "build", src, store, *BUILD_OPTS])
        with open(os.path.join(src, "big.bin"), "rb") as f:
            data = f.read()
        rec = os.path.join(store, "records", "00000000.pcr")
        with open(rec, "r+b") as f:
            blob = f.read()
            at = blob.find(data[5 * MIB:5 * MIB + 64])
            self.assertGreater(at, 0)
            f.seek(at + 1000)
            f.write(bytes([blob[at + 1000] ^ 0x01]))
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=10") as m:
            with open(os.path.join(mnt, "big.bin"), "rb") as f:
                f.seek(0)
                self.assertEqual(f.read(MIB), data[:MIB])
                f.seek(9 * MIB)
                self.assertEqual(f.read(2 * MIB), data[9 * MIB:11 * MIB])
            fd = os.open(os.path.join(mnt, "big.bin"), os.O_RDONLY)
            try:
                with self.assertRaises(OSError) as e:
                    os.pread(fd, 4096, 5 * MIB + 100)
                self.assertEqual(e.exception.errno, 5)  # EIO
            finally:
                os.close(fd)
            with open(os.path.join(mnt, "a.jpg"), "rb") as f:
                self.assertTrue(f.read().startswith(b"\xff\xd8"))
            self.assertIn("damaged data", m.log())
        p = run([PCR, "cat", store, "big.bin"], check=False)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stdout), 5 * MIB)  # the checked blocks before the damage, no more
        self.assertEqual(p.stdout, data[:5 * MIB])
        self.assertIn(b"checksum mismatch", p.stderr)
        p = run([PCR, "verify", store], check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"big.bin", p.stdout + p.stderr)


class ChangingSourceTest(TempDirTest):
    def test_a_file_growing_during_the_build_is_reported_not_stored_stale(self):
        src = self.path("src")
        os.makedirs(src)
        for i in range(4):
            save_jpeg(photo(90, 60, i), os.path.join(src, f"{i}.jpg"))
        growing = os.path.join(src, "growing.log")
        write_random(growing, 40 * MIB, 9)
        stop = threading.Event()

        def append():
            with open(growing, "ab") as f:
                while not stop.is_set():
                    f.write(b"x" * 512)
                    f.flush()
                    time.sleep(0.0005)

        t = threading.Thread(target=append)
        t.start()
        try:
            p = run([PCR, "build", src, self.path("store"), "--quality-sample", "0"], check=False,
                    text=True)
        finally:
            stop.set()
            t.join()
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)  # complete, with a problem
        self.assertIn("growing.log", p.stdout)
        self.assertIn("changed while being read", p.stdout)
        ls = run([PCR, "cat", self.path("store"), "0.jpg"]).stdout
        self.assertTrue(ls.startswith(b"\xff\xd8"))
        self.assertNotEqual(run([PCR, "cat", self.path("store"), "growing.log"], check=False).returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
