#!/usr/bin/python3
"""Multithreaded read stress of the daemon: 16 threads read random files at random levels and
random offsets through one mount and compare every byte with `pcr cat`. Meant to run under
ThreadSanitizer (.ci/run builds build-tsan with -DPCRFS_SANITIZE=thread and runs this), and
under ASan in the ASan suite: any sanitizer report in the daemon's log fails it.

PCRFS_STRESS_SECONDS (default 8) sets how long the threads read."""

import os
import random
import shutil
import tempfile
import threading
import time
import unittest

from pcrtest import PCR, Mount, pcr_extract, photo, run, save_jpeg

SANITIZER_WORDS = ("ThreadSanitizer", "AddressSanitizer", "LeakSanitizer", "runtime error:")


class ReadStressTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/dev/fuse"):
            self.skipTest("/dev/fuse is missing")
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-stress-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_sixteen_threads_random_files_levels_offsets(self):
        src = os.path.join(self.tmp, "src")
        for i in range(40):
            mode = "L" if i % 9 == 4 else "RGB"
            save_jpeg(photo(100 + 11 * (i % 13), 80 + 7 * (i % 5), 700 + i, mode),
                      os.path.join(src, f"c{i % 5}", f"{i:03d}.jpg"), quality=70 + i % 25)
        with open(os.path.join(src, "c0", "notes.txt"), "w") as f:
            f.write("byte for byte\n" * 500)
        store = os.path.join(self.tmp, "store")
        # Small records: many records, so the per-record state (open files, readahead and
        # prefetch tracking) is shared by many threads at once.
        run([PCR, "build", src, store, "--quiet", "--images-per-record", "4",
             "--quality-sample", "0"])
        files = sorted(os.path.relpath(os.path.join(d, n), src)
                       for d, _, names in os.walk(src) for n in names)
        levels = {k: pcr_extract(store, k) for k in range(1, 11)}
        expected = {(f, k): levels[k][f] for f in files for k in range(1, 11)}
        seconds = float(os.environ.get("PCRFS_STRESS_SECONDS", "8"))
        mnt = os.path.join(self.tmp, "mnt")
        errors, reads = [], [0] * 16
        # A tiny cache: pieces are evicted while other threads use them. index_rss=1: the index
        # pages are unmapped every 50 ms while 16 threads look things up in it.
        m = Mount(store, mnt, "-o", "cache_size=1M,threads=16,index_rss=1", timeout=60)
        with m:
            deadline = time.monotonic() + seconds

            def worker(seed):
                rng = random.Random(seed)
                while time.monotonic() < deadline:
                    f, k = rng.choice(files), rng.randrange(1, 11)
                    want = expected[(f, k)]
                    try:
                        with open(os.path.join(mnt, f"scan{k}", f), "rb", buffering=0) as fh:
                            # Drop the kernel's cached pages, so the reads reach the daemon.
                            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                            for _ in range(3):
                                off = rng.randrange(0, len(want) + 10)
                                fh.seek(off)
                                got = fh.read(rng.choice((1, 100, 4096, 70000, 1 << 20)))
                                if got != want[off:off + len(got)] or (not got and off < len(want)):
                                    errors.append((f, k, off))
                    except OSError as e:
                        errors.append((f, k, repr(e)))
                    reads[seed] += 1

            threads = [threading.Thread(target=worker, args=(s,)) for s in range(16)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertIsNone(m.proc.poll(), "the daemon died:\n" + m.log()[-5000:])
            m.unmount()
            m.proc.wait(timeout=60)
            log = m.log()
        self.assertEqual(errors[:20], [])
        self.assertTrue(all(n > 0 for n in reads), reads)
        for w in SANITIZER_WORDS:
            self.assertNotIn(w, log, log[-8000:])
        self.assertEqual(m.proc.returncode, 0, log[-8000:])
        print(f"{sum(reads)} files read by 16 threads in {seconds:g} s", flush=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
