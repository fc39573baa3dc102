#!/usr/bin/python3
"""Sizing a remote mount's caches (issue 40 item 3): when the mounted level does not fit the
larger cache tier the daemon prints one line at mount, before it detaches (and logs it), and
nothing when it fits; -o disk_cache=auto gives the disk tier room for the level (a remount then
reads it with no record request), or half of the cache folder's free space when that is less,
and the line says so; `pcr inspect URL` shows the level's record bytes the daemon sizes by.
Served by nginx (through the fault proxy, which counts requests). Needs tests/remote/install.sh."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, LoopbackServersCase, is_mounted, photo, read_levels,  # noqa: E402
                     read_tree, run, save_jpeg, sha)
from remote_servers import FaultProxy, Nginx  # noqa: E402

PCRFS = os.environ.get("PCRFS", "pcrfs")
MiB = 1 << 20


class CacheSizingCase(LoopbackServersCase):
    tmp_prefix = "cache-sizing-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        for i in range(48):
            save_jpeg(photo(480 + 16 * (i % 5), 360 + 8 * (i % 3), seed=300 + i),
                      os.path.join(src, f"c{i % 3}", f"img{i:03d}.jpg"), quality=92,
                      progressive=False)
        www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(www, "store")
        os.makedirs(www)
        run([PCR, "build", src, cls.store, "--quiet", "--images-per-record", "16",
             "--quality-sample", "0"])
        cls.info = json.loads(run([PCR, "inspect", cls.store, "--json"]).stdout)
        cls.record_bytes = {lv["level"]: lv["record_bytes"] for lv in cls.info["levels"]}
        cls.local = read_levels(cls.store, os.path.join(cls.tmp, "local-mnt"), (10,))
        cls.nginx = cls.serve(Nginx(www))
        cls.url = cls.nginx.url + "/store"

    def sizing(self, mnt):
        return json.loads(os.getxattr(mnt, "user.pcrfs.remote"))["client"]["sizing"]

    def cache_stats(self, mnt):
        return json.loads(os.getxattr(mnt, "user.pcrfs.remote"))["client"]["cache"]

    def warnings(self, text):
        return [line for line in text.splitlines() if "more than its caches" in line]

    def assert_level10(self, mnt, seed=None):
        got = read_tree(mnt, seed)
        self.assertEqual(sorted(got), sorted(self.local[10]))
        for rel, data in got.items():
            self.assertEqual(sha(data), sha(self.local[10][rel]), rel)

    def test_inspect_url_shows_the_record_bytes_the_daemon_sizes_by(self):
        env = dict(self.env, PCRFS_CACHE_DIR=self.cache("inspect"))
        remote = json.loads(run([PCR, "inspect", self.url, "--json"], env=env).stdout)
        self.assertEqual(remote["levels"], self.info["levels"])
        self.assertIn("record bytes", run([PCR, "inspect", self.url], env=env).stdout.decode())
        with self.mount(self.url, "inspect-mount", "scans=3") as m:
            self.assertEqual(self.sizing(m.mnt)["level"], 3)
            self.assertEqual(self.sizing(m.mnt)["level_bytes"], self.record_bytes[3])

    def test_one_line_when_the_level_does_not_fit_and_none_when_it_does(self):
        level10 = self.record_bytes[10]
        self.assertGreater(level10, 2 * MiB)  # more than a 1 MiB memory cache
        with self.mount(self.url, "small", "scans=10,remote_cache=1M") as m:
            self.assert_level10(m.mnt)  # the mount serves all the same
            log = m.log()
            sizing = self.sizing(m.mnt)
        lines = self.warnings(log)
        self.assertEqual(len(lines), 1, log)
        self.assertRegex(lines[0], r"^pcrfs: level 10 of http://127\.0\.0\.1:\d+/store is "
                         r"\d+\.\d MiB, more than its caches \(remote_cache 1\.0 MiB, no "
                         r"disk_cache\): each epoch fetches it again; -o disk_cache=auto keeps "
                         r"it on disk$")
        self.assertEqual(sizing, {"level": 10, "level_bytes": level10, "fits": False,
                                  "memory_cache": MiB, "disk_cache": 0, "disk_cache_auto": None})
        # A memory tier that holds the level: nothing said.
        with self.mount(self.url, "big", "scans=10,remote_cache=64M") as m:
            self.assert_level10(m.mnt)
            self.assertTrue(self.sizing(m.mnt)["fits"])
            self.assertEqual(self.warnings(m.log()), [], m.log())
        # A disk tier that holds it: nothing said either.
        with self.mount(self.url, "disk", "scans=10,remote_cache=1M,disk_cache=64M") as m:
            self.assertTrue(self.sizing(m.mnt)["fits"])
            self.assertEqual(self.warnings(m.log()), [], m.log())

    def test_the_line_reaches_the_terminal_and_the_log_before_the_daemon_detaches(self):
        # Without -f: the line is printed before the fork, the command exits 0 mounted.
        mnt = os.path.join(self.tmp, "mnt-detached")
        log = os.path.join(self.tmp, "detached.log")
        os.makedirs(mnt)
        p = run([PCRFS, self.url, mnt, "-o",
                 f"cache_dir={self.cache('detached')},remote_cache=1M,log_file={log}"],
                env=self.env)
        try:
            self.assertTrue(is_mounted(mnt))
            # Without -o scans: level 10, the largest a reader of scan1..scan10 may read.
            lines = self.warnings(p.stderr.decode())
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn("level 10 of http://", lines[0])
            self.assertIn("(the largest of scan1..scan10)", lines[0])
            self.assertTrue(lines[0].endswith("(or -o scans=K mounts one level)"), lines[0])
            with open(log) as f:
                logged = self.warnings(f.read())
            self.assertEqual(len(logged), 1)
            self.assertIn(" warning pcrfs[", logged[0])
            self.assertTrue(logged[0].endswith(lines[0][len("pcrfs: "):]), logged[0])
        finally:
            subprocess.run(["fusermount3", "-u", mnt])

    def test_disk_cache_auto_keeps_the_level_on_disk(self):
        with FaultProxy(self.nginx.url) as proxy:
            url = proxy.url + "/store"
            opts = ("scans=10", "remote_cache=1M", "disk_cache=auto")
            with self.mount(url, "auto", *opts) as m:
                sizing = self.sizing(m.mnt)
                self.assert_level10(m.mnt, seed=1)
                cache = self.cache_stats(m.mnt)
                self.assertEqual(self.warnings(m.log()), [], m.log())
            level10 = self.record_bytes[10]
            auto = sizing["disk_cache_auto"]
            # The level and its disk entries (32 bytes per extent): a few percent more.
            self.assertGreater(auto["wanted"], level10)
            self.assertLess(auto["wanted"], level10 * 1.1)
            self.assertEqual(auto["bytes"], auto["wanted"])  # /tmp has room
            self.assertEqual(sizing["disk_cache"], auto["wanted"])
            self.assertTrue(sizing["fits"])
            self.assertTrue(cache["disk"], cache)
            self.assertLessEqual(cache["disk_file_bytes"], auto["bytes"], cache)
            # Room for the whole level: a remount reads it with no record request (the two
            # conditional metadata requests only), although its memory holds 1 MiB.
            proxy.reset()
            with self.mount(url, "auto", *opts) as m:
                again = self.sizing(m.mnt)["disk_cache_auto"]
                self.assert_level10(m.mnt, seed=2)
            self.assertEqual(proxy.stats()["statuses"], {"304": 2}, proxy.requests())
            # What the folder holds counts as room: the budget did not shrink.
            self.assertEqual(again["bytes"], auto["bytes"])

    @unittest.skipUnless(os.geteuid() == 0, "mounts a small tmpfs (root)")
    def test_disk_cache_auto_takes_half_the_free_space_and_says_so(self):
        cache_dir = self.cache("tight")
        os.makedirs(cache_dir)
        p = run(["mount", "-t", "tmpfs", "-o", "size=2M,mode=0700", "tmpfs", cache_dir], check=False)
        if p.returncode != 0:
            self.skipTest(f"cannot mount a tmpfs: {p.stderr.decode().strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", cache_dir])
        with self.mount(self.url, "tight", "scans=10", "remote_cache=1M",
                        "disk_cache=auto") as m:
            self.assert_level10(m.mnt)
            sizing = self.sizing(m.mnt)
            cache = self.cache_stats(m.mnt)
            log = m.log()
        lines = self.warnings(log)
        auto = sizing["disk_cache_auto"]
        self.assertLess(auto["room"], 2 * MiB)  # the metadata took some of it
        self.assertEqual(auto["bytes"], auto["room"] // 2)
        self.assertLess(auto["bytes"], auto["wanted"])
        self.assertEqual(sizing["disk_cache"], auto["bytes"])
        self.assertFalse(sizing["fits"])
        self.assertLessEqual(cache["disk_file_bytes"], auto["bytes"], cache)
        self.assertEqual(len(lines), 1, log)
        self.assertIn(f"disk_cache=auto {auto['bytes'] / 1024:.1f} KiB: half of the ", lines[0])
        self.assertIn(f" free in {cache_dir}): each epoch fetches it again; with ", lines[0])
        self.assertTrue(lines[0].endswith(
            " more free there (or -o cache_dir on a larger disk) disk_cache=auto keeps it on "
            "disk"), lines[0])


if __name__ == "__main__":
    unittest.main()
