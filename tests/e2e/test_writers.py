#!/usr/bin/python3
"""One writer per store (STORE.lock, taken by pcr build and pcr merge) and `pcr verify`'s report
of stray files in a store."""

import json
import os
import shutil
import signal
import subprocess
import time
import unittest

from pcrtest import MAKE_TEST_JPEGS, PCR, TempDirTest, pcr_cat, run

EXIT_BUSY = 4


def lock_holder(store):
    """The pid written into STORE.lock, or None while there is none (yet)."""
    try:
        with open(store + ".lock") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return int(text.split()[0]) if text.endswith("\n") else None


class WritersTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.src = self.path("src")
        os.makedirs(self.src)
        run([MAKE_TEST_JPEGS, os.path.join(self.src, "jpegs")])
        # One file per record and an fsync per record: a build that lasts a few seconds, so a
        # second writer started with it meets it while it runs.
        os.makedirs(os.path.join(self.src, "bin"))
        for i in range(300):
            with open(os.path.join(self.src, "bin", f"f{i:03d}.bin"), "wb") as f:
                f.write(os.urandom(4096 + i))
        self.store = self.path("store")
        self.args = ["--images-per-record", "1", "--quality-sample", "0", "-j", "1", "--quiet"]
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        super().tearDown()

    def start(self, *extra):
        p = subprocess.Popen([PCR, "build", self.src, self.store, *self.args, *extra],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def wait_for_lock(self, proc):
        """Waits until proc holds the lock (its pid is in STORE.lock)."""
        deadline = time.time() + 120
        while lock_holder(self.store) != proc.pid:
            self.assertIsNone(proc.poll(), "the build ended before it was seen holding the lock")
            self.assertLess(time.time(), deadline, "the build never took the lock")
            time.sleep(0.001)

    def check_store(self):
        """The store verifies against its source and every file reads back exactly."""
        p = run([PCR, "verify", self.store, "--source", self.src], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for name in sorted(os.listdir(os.path.join(self.src, "bin")))[::37]:
            with open(os.path.join(self.src, "bin", name), "rb") as f:
                self.assertEqual(pcr_cat(self.store, "bin/" + name, 1), f.read(), name)
        self.assertFalse(os.path.exists(self.store + ".lock"), "the lock file outlived the build")
        self.assertFalse(os.path.exists(self.store + ".partial"))

    def test_second_writer_is_refused_while_the_first_runs(self):
        first = self.start()
        self.wait_for_lock(first)
        # Stopped while it holds the lock: every other writer meets it, whatever its options.
        first.send_signal(signal.SIGSTOP)
        try:
            for extra in ([], ["--resume"], ["--force"]):
                with self.subTest(extra=extra):
                    p = run([PCR, "build", self.src, self.store, *self.args, *extra],
                            check=False, text=True, timeout=60)
                    self.assertEqual(p.returncode, EXIT_BUSY, p.stderr)
                    self.assertIn(f"another pcr build (pid {first.pid}", p.stderr)
                    self.assertIn("is writing this store", p.stderr)
                    self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                    self.assertEqual(lock_holder(self.store), first.pid)
        finally:
            first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=600)
        self.assertEqual(first.returncode, 0, err)
        self.check_store()

    def test_builds_started_at_once_exactly_one_proceeds(self):
        for round in range(2):
            with self.subTest(round=round):
                shutil.rmtree(self.store, ignore_errors=True)
                extra = ["--resume"] if round else []
                a, b = self.start(*extra), self.start(*extra)
                (_, a_err), (_, b_err) = a.communicate(timeout=600), b.communicate(timeout=600)
                codes = sorted([a.returncode, b.returncode])
                self.assertEqual(codes, [0, EXIT_BUSY], a_err + b_err)
                winner, loser_err = (a, b_err) if a.returncode == 0 else (b, a_err)
                self.assertIn(f"(pid {winner.pid}", loser_err)
                self.check_store()

    def test_killed_writer_leaves_a_stale_lock_that_resume_takes(self):
        first = self.start()
        self.wait_for_lock(first)
        records = os.path.join(self.store + ".partial", "records")
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(records, "00000003.pcr")):
            self.assertIsNone(first.poll(), "the build ended before it could be killed")
            self.assertLess(time.time(), deadline)
            time.sleep(0.001)
        first.kill()
        first.wait()
        self.assertEqual(lock_holder(self.store), first.pid, "the dead writer's lock file stays")
        p = run([PCR, "build", self.src, self.store, *self.args, "--resume"], check=False,
                text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("kept from the interrupted build", p.stdout)
        self.check_store()


    def test_merge_takes_the_same_lock(self):
        # Two parts of the source: the merge that joins them holds STORE.lock from before it
        # touches STORE.partial until STORE exists, against builds and merges alike.
        opts = [a for a in self.args if a != "--quiet"]
        parts = []
        for i in range(2):
            part = self.path(f"part{i}")
            run([PCR, "build", self.src, part, *opts, "--quiet", "--shard", f"{i}/2"])
            parts.append(part)

        first = self.start()
        self.wait_for_lock(first)
        first.send_signal(signal.SIGSTOP)
        try:
            p = run([PCR, "merge", *parts, self.store], check=False, text=True, timeout=60)
            self.assertEqual(p.returncode, EXIT_BUSY, p.stderr)
            self.assertIn(f"another pcr build (pid {first.pid}", p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        finally:
            first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=600)
        self.assertEqual(first.returncode, 0, err)
        shutil.rmtree(self.store)

        merge = subprocess.Popen([PCR, "merge", *parts, self.store, "-j", "1"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(merge)
        self.wait_for_lock(merge)
        merge.send_signal(signal.SIGSTOP)
        try:
            with open(self.store + ".lock") as f:
                self.assertTrue(f.read().endswith(" merge\n"))
            for argv in ([PCR, "build", self.src, self.store, *self.args, "--resume"],
                         [PCR, "build", self.src, self.store, *self.args, "--force"],
                         [PCR, "merge", *parts, self.store, "--force"]):
                with self.subTest(argv=argv[1]):
                    p = run(argv, check=False, text=True, timeout=60)
                    self.assertEqual(p.returncode, EXIT_BUSY, p.stderr)
                    self.assertIn(f"another pcr merge (pid {merge.pid}", p.stderr)
                    self.assertIn("is writing this store", p.stderr)
                    self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                    self.assertEqual(lock_holder(self.store), merge.pid)
        finally:
            merge.send_signal(signal.SIGCONT)
        out, err = merge.communicate(timeout=600)
        self.assertEqual(merge.returncode, 0, err)
        self.check_store()


class StrayFilesTest(TempDirTest):
    def test_verify_reports_what_the_store_does_not_name(self):
        src = self.path("src")
        run([MAKE_TEST_JPEGS, src])
        store = self.path("store")
        run([PCR, "build", src, store, "--images-per-record", "5", "--quiet"])
        with open(os.path.join(store, "manifest.json")) as f:
            num_records = json.load(f)["num_records"]
        self.assertGreater(num_records, 1)
        self.assertEqual(run([PCR, "verify", store], check=False).returncode, 0)

        records = os.path.join(store, "records")
        stray_record = "records/%08d.pcr" % num_records
        shutil.copy(os.path.join(records, "00000000.pcr"), os.path.join(store, stray_record))
        strays = {
            stray_record: "a record file the store does not name",
            "records/00000001.pcr.tmp": "not a record file of the store",
            "records/1.pcr": "not a record file of the store",
            "records/old": "a folder among the record files",
            "notes.txt": "not part of the store",
            ".build": "not part of the store",
        }
        open(os.path.join(store, "records/00000001.pcr.tmp"), "wb").close()
        open(os.path.join(store, "records/1.pcr"), "wb").close()
        os.mkdir(os.path.join(store, "records/old"))
        open(os.path.join(store, "notes.txt"), "w").close()
        os.mkdir(os.path.join(store, ".build"))
        p = run([PCR, "verify", store], check=False, text=True)
        self.assertEqual(p.returncode, 1, p.stdout)
        lines = [l for l in p.stdout.splitlines() if l.startswith("stray")]
        self.assertEqual(len(lines), len(strays), p.stdout)
        for path, reason in strays.items():
            self.assertIn(f"stray    {path}: {reason}", p.stdout)
        self.assertIn(f"pcr verify: {len(strays)} problems", p.stdout)
        # The store itself is intact: nothing but the strays is reported.
        self.assertNotIn("damaged", p.stdout)

        for path in strays:
            full = os.path.join(store, path)
            (os.rmdir if os.path.isdir(full) else os.remove)(full)
        p = run([PCR, "verify", store], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout)


if __name__ == "__main__":
    unittest.main()
