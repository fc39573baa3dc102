#!/usr/bin/python3
"""Faults: builds killed at random points and resumed, a full disk, SIGTERM under heavy reads,
storage that fails reads (docs/semantics.md)."""

import errno
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

from pcrtest import (PCR, Mount, TempDirTest, is_mounted, pcr_cat, photo, run, save_jpeg,
                     store_bytes)

BUILD_OPTS = ["--quiet", "--images-per-record", "8", "--quality-sample", "0"]


def small_tree(root, n, size=(64, 48)):
    for i in range(n):
        save_jpeg(photo(size[0] + i % 9, size[1] + i % 7, 2000 + i),
                  os.path.join(root, f"c{i % 4}", f"{i:04d}.jpg"), quality=85)


class KilledBuildTest(TempDirTest):
    def test_twenty_random_kills_then_resume_give_identical_stores(self):
        src = self.path("src")
        small_tree(src, 120)
        ref = self.path("ref")
        # The kill points are drawn from the build's duration: the shorter of two builds, so
        # a reference build slowed by a busy machine does not put the kills after the end.
        full = None
        for attempt in range(2):
            if attempt:
                shutil.rmtree(ref)
            t0 = time.monotonic()
            run([PCR, "build", src, ref, *BUILD_OPTS])
            took = time.monotonic() - t0
            full = took if full is None else min(full, took)
        ref_bytes = store_bytes(ref)
        rng = random.Random(20240601)
        killed = 0
        # 20 trials, more (up to 40) until 15 builds were really killed mid-way: on a busy
        # machine a run may finish before its kill point even so.
        for trial in range(40):
            if trial >= 20 and killed >= 15:
                break
            store = self.path(f"store{trial}")
            partial = store + ".partial"
            args = [PCR, "build", src, store, *BUILD_OPTS]
            # The first run, then for odd trials one resumed run, is killed at a random point
            # (anywhere from the walk to the final rename); then a resume runs to the end.
            for attempt in range(1 + trial % 2):
                proc = subprocess.Popen(args + (["--resume"] if attempt else []),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(rng.uniform(0, full * 1.05))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    killed += 1
                proc.communicate()
                if os.path.exists(store):
                    break  # it finished (or was killed after the rename): it must be complete
            if not os.path.exists(store):
                # A kill before STORE.partial was made leaves nothing; --resume then builds.
                p = run(args + ["--resume"], check=False, text=True)
                self.assertEqual(p.returncode, 0, f"trial {trial}: {p.stderr}")
            self.assertFalse(os.path.exists(partial), f"trial {trial}")
            got = store_bytes(store)
            self.assertEqual(sorted(got), sorted(ref_bytes), f"trial {trial}")
            for k in ref_bytes:
                self.assertEqual(got[k], ref_bytes[k], f"trial {trial}: {k} differs")
            shutil.rmtree(store)
        self.assertGreaterEqual(killed, 15, "most runs must really be killed mid-build")


class FullDiskTest(TempDirTest):
    def test_build_on_a_full_disk_fails_cleanly(self):
        src = self.path("src")
        small_tree(src, 8)
        for i in range(5):  # 5 MiB of incompressible passthrough files
            with open(os.path.join(src, f"blob{i}.bin"), "wb") as f:
                f.write(random.Random(i).randbytes(1 << 20))
        disk = self.path("disk")
        os.makedirs(disk)
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", disk],
                           capture_output=True, text=True)
        if p.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs here: {p.stderr.strip()}")
        try:
            store = os.path.join(disk, "store")
            p = run([PCR, "build", src, store, *BUILD_OPTS], check=False, text=True)
            self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
            self.assertIn("No space left on device", p.stderr)
            self.assertFalse(os.path.exists(store), "nothing may look like a complete store")
            self.assertEqual([n for n in os.listdir(disk) if n != "store.partial"], [])
        finally:
            subprocess.run(["umount", disk])


class SigtermUnderLoadTest(TempDirTest):
    def test_sigterm_keeps_a_busy_mount_and_sigint_unmounts_under_eight_threads_of_reads(self):
        src = self.path("src")
        small_tree(src, 48, size=(160, 120))
        store = self.path("store")
        run([PCR, "build", src, store, *BUILD_OPTS])
        files = sorted(os.path.relpath(os.path.join(d, n), src)
                       for d, _, names in os.walk(src) for n in names)
        expected = {(f, k): pcr_cat(store, f, k) for f in files[:12] for k in (1, 5, 10)}
        mnt = self.path("mnt")
        stop = threading.Event()
        good, wrong = [0], []

        def reader(seed):
            rng = random.Random(seed)
            while not stop.is_set():
                f, k = rng.choice(list(expected))
                try:
                    with open(os.path.join(mnt, f"scan{k}", f), "rb") as fh:
                        data = fh.read()
                except OSError as e:
                    # After the unmount: ENOTCONN (aborted connection) or ENOENT (the empty
                    # folder underneath). Nothing else, and no hang.
                    if e.errno not in (errno.ENOTCONN, errno.ENOENT, errno.EIO):
                        wrong.append(repr(e))
                    return
                if data != expected[(f, k)]:
                    if is_mounted(mnt):
                        wrong.append((f, k))
                    return
                good[0] += 1

        m = Mount(store, mnt, "-o", "cache_size=1M")
        with m:
            threads = [threading.Thread(target=reader, args=(s,), daemon=True) for s in range(8)]
            for t in threads:
                t.start()
            # A file held open, as a training job holds its files: SIGTERM leaves the busy
            # mount up (as fusermount3 -u does) and says so; the readers go on, exactly.
            held = open(os.path.join(mnt, "scan5", files[0]), "rb")
            deadline = time.monotonic() + 20  # the readers under way: 50 exact files read
            while good[0] < 50 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertGreaterEqual(good[0], 50, "the readers did not get going")
            m.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            while "stays mounted" not in m.log() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertIn(f"SIGTERM: {mnt} is busy", m.log())
            before = good[0]
            deadline = time.monotonic() + 20
            while good[0] < before + 50 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertIsNone(m.proc.poll(), "SIGTERM ended a busy mount")
            self.assertTrue(is_mounted(mnt))
            self.assertEqual(held.read(), expected[(files[0], 5)])
            # SIGINT detaches at once, busy or not.
            m.proc.send_signal(signal.SIGINT)
            try:
                m.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.fail("pcrfs did not exit within 20 s of SIGINT")
            self.assertEqual(m.proc.returncode, 0, m.log())
            self.assertFalse(is_mounted(mnt), "stale mount after SIGINT")
            held.close()
            stop.set()
            for t in threads:
                t.join(timeout=20)
            self.assertFalse(any(t.is_alive() for t in threads), "a reader hangs")
        self.assertEqual(wrong, [])
        self.assertGreater(good[0], 100)


class FailingDeviceTest(unittest.TestCase):
    def test_device_mapper_error_target(self):
        # The injected-fault variant runs everywhere: fs/filesystem_test.cc,
        # ReadErrorsFailExactlyTheFilesWhosePiecesOverlapThem.
        if not os.path.exists("/sys/module/dm_mod") or not os.path.exists("/dev/mapper/control"):
            self.skipTest("device-mapper is not available in this kernel (no /sys/module/dm_mod "
                          "or /dev/mapper/control; modules cannot be loaded here): the read-error "
                          "variant is covered by fs_test with an injected record source")
        self.skipTest("device-mapper present, but the dm error-target variant is not written yet")


if __name__ == "__main__":
    unittest.main(verbosity=2)
