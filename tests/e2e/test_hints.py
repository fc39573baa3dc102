#!/usr/bin/python3
"""The reader's order as a hint (issue 40 item 4): a process writes the paths it will read next
to the mount's hint socket (named by the root's user.pcrfs.hint_socket) with the Python module
python/pcrfs/hint.py, and the daemon fetches those files ahead in exactly that order, within
its cache's room; reading them then is served from the cache. Garbage hints change nothing; a
mount with -o hints=no has no socket and the module does nothing. A remote store served by
nginx through the fault proxy, whose /__requests log says what was fetched when. Each file is
a record of its own (--images-per-record 1), so a request's path names its file. Needs
tests/remote/install.sh."""

import json
import os
import random
import socket
import stat
import sys
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))
sys.path.insert(0, os.path.join(TOP, "python"))

from pcrtest import PCR, LoopbackServersCase, photo, read_tree, run, save_jpeg  # noqa: E402
from remote_servers import FaultProxy, Nginx  # noqa: E402

from pcrfs.hint import HintedSampler, Hinter  # noqa: E402

FILES = 48


def eventually(done, timeout=60, what="condition"):
    """Polls done() until it is true; fails after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        value = done()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def hint_stats(mnt):
    return json.loads(os.getxattr(mnt, "user.pcrfs.hints"))


def remote_cache(mnt):
    return json.loads(os.getxattr(mnt, "user.pcrfs.remote"))["client"]["cache"]


class HintsTest(LoopbackServersCase):
    tmp_prefix = "hints-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        cls.rels = []
        for i in range(FILES):
            rel = os.path.join("train", f"c{i % 3}", f"img{i:03d}.jpg")
            save_jpeg(photo(320 + 16 * (i % 5), 240 + 8 * (i % 3), seed=300 + i),
                      os.path.join(src, rel), quality=92, progressive=False)
            cls.rels.append(rel)
        # One file per record, in sorted path order: record k is the k-th path.
        cls.rels.sort()
        cls.www = os.path.join(cls.tmp, "www")
        os.makedirs(cls.www)
        run([PCR, "build", src, os.path.join(cls.www, "store"), "--quiet",
             "--images-per-record", "1", "--quality-sample", "0"])
        cls.nginx = cls.serve(Nginx(cls.www))

    def record_of(self, request):
        """The file (index into self.rels) a request for a record fetched; None otherwise."""
        path = request.get("path", "")
        if "/records/" not in path:
            return None
        return int(os.path.basename(path).split(".")[0])

    def first_requests(self, proxy):
        """Files in the order their records were first requested."""
        order = []
        for r in proxy.requests():
            k = self.record_of(r)
            if k is not None and k not in order:
                order.append(k)
        return order

    def fetched(self, proxy, k):
        """Body bytes the origin sent for file k's record so far."""
        return sum(r["bytes"] for r in proxy.requests() if self.record_of(r) == k)

    def shuffled(self, seed):
        order = list(range(FILES))
        random.Random(seed).shuffle(order)
        return order

    def test_hinted_files_are_fetched_in_hint_order_and_then_read_from_the_cache(self):
        with FaultProxy(self.nginx.url) as proxy:
            with self.mount(proxy.url + "/store", "order", "scans=2") as m:
                # The socket: private, named by the root, listed.
                path = os.getxattr(m.mnt, "user.pcrfs.hint_socket").decode()
                self.assertIn("user.pcrfs.hint_socket", os.listxattr(m.mnt))
                self.assertTrue(stat.S_ISSOCK(os.stat(path).st_mode))
                self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
                self.assertEqual(os.stat(os.path.dirname(path)).st_mode & 0o777, 0o700)
                order = self.shuffled(1)
                proxy.reset()
                with Hinter(m.mnt) as hinter:
                    self.assertTrue(hinter.active)
                    # Absolute paths under the mount and root-relative ones alike.
                    hinter.hint(os.path.join(m.mnt, self.rels[k]) if n % 2 else self.rels[k]
                                for n, k in enumerate(order))
                    self.assertTrue(hinter.flush(60))
                    eventually(lambda: hint_stats(m.mnt)["taken"] == FILES, what="hints taken")
                # Every record first asked for in the hints' order (the consumer takes the
                # files one at a time), before anything was read.
                got = eventually(lambda: (lambda o: o if len(o) == FILES else None)(
                    self.first_requests(proxy)), what="every hinted record requested")
                self.assertEqual(got, order)
                stats = hint_stats(m.mnt)
                self.assertEqual((stats["queued"], stats["not_found"], stats["lines"]),
                                 (FILES, 0, FILES), stats)
                # Fetched: every file's level-2 bytes came from the origin (a stat costs none).
                sizes = [os.stat(os.path.join(m.mnt, rel)).st_size for rel in self.rels]
                eventually(lambda: all(self.fetched(proxy, k) >= sizes[k] - 2
                                       for k in range(FILES)), what="every file fetched")
                # Reading them in that order asks the origin for nothing more.
                before = len(proxy.requests())
                misses = remote_cache(m.mnt)["miss_bytes"]
                for k in order:
                    with open(os.path.join(m.mnt, self.rels[k]), "rb") as f:
                        f.read()
                records = [r for r in proxy.requests()[before:] if self.record_of(r) is not None]
                self.assertEqual(records, [])
                self.assertEqual(remote_cache(m.mnt)["miss_bytes"], misses)
            # Gone with the mount.
            self.assertFalse(os.path.exists(path))
            self.assertFalse(os.path.exists(os.path.dirname(path)))

    def test_a_cache_smaller_than_the_hinted_files_fetches_within_its_room(self):
        # Level 10 of every file is over 1.5 times the 1 MiB cache: fetched ahead as it is read,
        # each file once, never the whole epoch at once and evicted unread.
        with FaultProxy(self.nginx.url) as proxy:
            with self.mount(proxy.url + "/store", "small", "remote_cache=1M") as m:
                sizes = {k: os.stat(os.path.join(m.mnt, "scan10", self.rels[k])).st_size
                         for k in range(FILES)}
                self.assertGreater(sum(sizes.values()), 3 << 19)
                order = self.shuffled(2)
                proxy.reset()
                with Hinter(m.mnt) as hinter:
                    hinter.hint(os.path.join("scan10", self.rels[k]) for k in order)
                    for n, k in enumerate(order):
                        # The reader never outruns the fetcher: it waits until the origin has
                        # sent the file's bytes (its record's header and table come first).
                        eventually(lambda: self.fetched(proxy, k) >= sizes[k] - 2,
                                   what=f"file {n} fetched")
                        with open(os.path.join(m.mnt, "scan10", self.rels[k]), "rb") as f:
                            self.assertEqual(len(f.read()), sizes[k])
                self.assertEqual(self.first_requests(proxy), order)
                origin = sum(r["bytes"] for r in proxy.requests() if self.record_of(r) is not None)
                served = sum(sizes.values())
                # Each file fetched once (plus its record's header and table), not evicted
                # before its read and fetched again.
                self.assertLess(origin, 1.1 * served, (origin, served))
                cache = remote_cache(m.mnt)
                self.assertLess(cache["miss_bytes"], 0.05 * served, cache)

    def test_garbage_hints_change_nothing(self):
        with FaultProxy(self.nginx.url) as proxy:
            with self.mount(proxy.url + "/store", "garbage") as m:
                proxy.reset()
                path = os.getxattr(m.mnt, "user.pcrfs.hint_socket").decode()
                garbage = [b"nope.jpg", b"scan3/train/nope.jpg", b"train/c0/img000.jpg",
                           b"scan3/train", b"scan3", b"scan11/train/c0/img000.jpg",
                           b"scan3/train/../train/c0/img000.jpg", b"scan3/train/c0\0/x.jpg",
                           b"#bogus", b"\xff\xfe\xfd", b"x" * 5000,
                           b"scan3/train/c0/img000.jpg/more"]
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(path)
                    s.sendall(b"\n".join(garbage) + b"\n\n")
                eventually(lambda: hint_stats(m.mnt)["lines"] == len(garbage), what="lines")
                stats = hint_stats(m.mnt)
                self.assertEqual(stats["queued"], 0, stats)
                self.assertEqual((stats["not_found"], stats["folder"], stats["malformed"],
                                  stats["too_long"]), (6, 2, 3, 1), stats)
                self.assertNotIn("user.pcrfs.hint_socket", os.listxattr(os.path.join(m.mnt,
                                                                                      "scan3")))
                # Nothing was fetched for them, and the mount reads as before.
                self.assertEqual([r for r in proxy.requests() if self.record_of(r) is not None],
                                 [])
                self.assertTrue(os.getxattr(m.mnt, "user.pcrfs.prefetch").decode()
                                .startswith("speculative reads: 0 "))
                got = read_tree(os.path.join(m.mnt, "scan3", "train"))
                self.assertEqual(len(got), FILES)
                # A duplicate of a hint still queued is ignored too (counted).
                with Hinter(m.mnt) as hinter:
                    hinter.hint(["scan3/" + self.rels[0]] * 3)
                    hinter.flush(60)
                eventually(lambda: hint_stats(m.mnt)["lines"] == len(garbage) + 3, what="lines")
                stats = hint_stats(m.mnt)
                self.assertEqual(stats["queued"] + stats["duplicate"] + stats["read_before"], 3,
                                 stats)

    def test_sampler_hints_each_epoch_and_a_mount_without_hints_is_ignored(self):
        with self.mount(self.nginx.url + "/store", "sampler", "scans=1") as m:
            paths = [os.path.join(m.mnt, rel) for rel in self.rels]
            for ahead in (None, 5):
                before = hint_stats(m.mnt)["lines"]
                order = self.shuffled(3)
                with Hinter(m.mnt) as hinter:
                    sampler = HintedSampler(order, paths, hinter, ahead=ahead)
                    self.assertEqual(len(sampler), FILES)
                    got = []
                    for k in sampler:
                        got.append(k)
                        with open(paths[k], "rb") as f:
                            f.read()
                    self.assertEqual(got, order)
                    hinter.flush(60)
                eventually(lambda: hint_stats(m.mnt)["lines"] == before + FILES,
                           what=f"every index hinted (ahead={ahead})")
                self.assertGreaterEqual(hint_stats(m.mnt)["resets"], 1)
        with self.mount(self.nginx.url + "/store", "nohints", "hints=no") as m:
            self.assertNotIn("user.pcrfs.hint_socket", os.listxattr(m.mnt))
            self.assertNotIn("user.pcrfs.hints", os.listxattr(m.mnt))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                hinter = Hinter(os.path.join(m.mnt, "scan1"))
                hinter.hint(["scan1/" + self.rels[0]])
                hinter.reset()
                self.assertTrue(hinter.flush(1))
                hinter.close()
            self.assertFalse(hinter.active)
            self.assertEqual(len(caught), 1, [str(w.message) for w in caught])
            self.assertIn("no hint socket", str(caught[0].message))
            # The sampler passes through.
            self.assertEqual(list(HintedSampler([3, 1, 2], self.rels, hinter)), [3, 1, 2])


if __name__ == "__main__":
    unittest.main()
