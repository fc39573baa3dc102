#!/usr/bin/python3
"""Signed HTTP URLs (issue 30 item 6): a store behind nginx that answers 403 unless the query
carries the token (Nginx(required_query=...), as a CDN or a presigned store does), mounted as
`pcrfs http://127.0.0.1:PORT/store?sig=TOKEN&sv=1 MNT` and read with `pcr`: every file at every
level byte for byte equal to `pcr` on the local store, the query sent exactly as given on every
request, and the token never shown: not in pcrfs's stderr, the log file, /proc/mounts (the
fsname), user.pcrfs.remote, an error message or the cache folder's name. Needs
tests/remote/install.sh (nginx)."""

import json
import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, LoopbackServersCase, Mount, pcr_extract, photo,  # noqa: E402
                     read_tree, run, save_jpeg, sha)
from remote_servers import FaultProxy, Nginx  # noqa: E402

LEVELS = tuple(range(1, 11))
# Characters a SAS or a CDN token holds, percent-escapes included: sent exactly as given.
TOKEN = "k7Q-_x%2Bz%2FW9e%3Dsecret"
WRONG = "wrongQ-_x%2Bz%2FW9e%3Dtoken"
SECRET_PARTS = ("k7Q-_x", "secret", "wrongQ")


class SignedUrlTest(LoopbackServersCase):
    tmp_prefix = "signed-url-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        for i in range(20):
            save_jpeg(photo(90 + 8 * (i % 5), 70 + 4 * (i % 3), seed=700 + i),
                      os.path.join(cls.src, f"class{i % 2}", f"img{i:03d}.jpg"),
                      quality=90, progressive=bool(i % 2))
        www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(www, "store")
        os.makedirs(www)
        run([PCR, "build", cls.src, cls.store, "--quiet", "--images-per-record", "5"])
        cls.records = sorted(os.listdir(os.path.join(cls.store, "records")))
        cls.local = {k: pcr_extract(cls.store, k) for k in LEVELS}
        cls.nginx = cls.serve(Nginx(www, required_query={"sig": TOKEN, "sv": "1"}))
        cls.base = cls.nginx.url + "/store"
        cls.url = f"{cls.base}?sig={TOKEN}&sv=1"

    def assert_no_token(self, text, what=""):
        for part in SECRET_PARTS:
            self.assertNotIn(part, text, what)
        self.assertNotIn("sig=", text, what)

    def assert_every_level(self, mnt):
        for k in LEVELS:
            got = read_tree(os.path.join(mnt, f"scan{k}"))
            self.assertEqual(sorted(got), sorted(self.local[k]), f"level {k}")
            for rel, data in got.items():
                self.assertEqual(sha(data), sha(self.local[k][rel]), f"level {k}: {rel}")
                self.assertEqual(os.path.getsize(os.path.join(mnt, f"scan{k}", rel)), len(data))

    def access_log(self):
        with open(self.nginx.access_log) as f:
            return f.read()

    def test_server_requires_the_token(self):
        for url, want in ((self.base + "/manifest.json", 403),
                          (f"{self.base}/manifest.json?sig={WRONG}&sv=1", 403),
                          (f"{self.base}/manifest.json?sig={TOKEN}", 403),
                          (f"{self.base}/manifest.json?sig={TOKEN}&sv=1", 200)):
            status = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                                     "--noproxy", "*", url], capture_output=True,
                                    text=True).stdout
            self.assertEqual(status, str(want), url)

    def test_mount_every_level_and_the_token_never_shown(self):
        log_file = os.path.join(self.tmp, "pcrfs.log")
        with self.mount(self.url, "signed", f"log_file={log_file}") as m:
            self.assert_every_level(m.mnt)
            xattr = os.getxattr(m.mnt, "user.pcrfs.remote").decode()
            stats = json.loads(xattr)
            self.assertEqual(stats["client"]["failed"], 0, stats)
            self.assertGreater(stats["client"]["requests"], 2)
            with open("/proc/mounts") as f:
                mounts = [line for line in f if m.mnt in line]
            mount_out = run(["mount"], text=True).stdout
            stderr = m.log()
        self.assertEqual(len(mounts), 1, mounts)
        # The fsname is the URL without its query.
        self.assertTrue(mounts[0].startswith(f"pcrfs:{self.base} "), mounts[0])
        for what, text in (("xattr", xattr), ("/proc/mounts", mounts[0]),
                           ("mount", mount_out), ("stderr", stderr)):
            self.assert_no_token(text, what)
        if os.path.exists(log_file):
            with open(log_file) as f:
                self.assert_no_token(f.read(), "log file")
        # Every request pcrfs sent carried the query as given (nginx refuses the rest).
        requests = [line for line in self.access_log().splitlines() if "pcrfs" in line or
                    "/store/" in line]
        self.assertTrue(requests)
        refused = [line for line in requests if '" 403 ' in line]
        self.assertEqual(refused, [])

    def test_a_failing_record_is_logged_without_the_token(self):
        """A 404 for one record (through the fault proxy): its files EIO, the log names the
        record (so the log has URLs in it), never the token."""
        log_file = os.path.join(self.tmp, "pcrfs-404.log")
        victim = self.records[1]
        with FaultProxy(self.nginx.url) as proxy:
            proxy.fault(fault="status", status=404, path="/records/" + re.escape(victim))
            url = f"{proxy.url}/store?sig={TOKEN}&sv=1"
            with self.mount(url, "signed-404", f"log_file={log_file}") as m:
                failed = 0
                for rel in sorted(self.local[4]):
                    try:
                        with open(os.path.join(m.mnt, "scan4", rel), "rb") as f:
                            self.assertEqual(f.read(), self.local[4][rel], rel)
                    except OSError as e:
                        self.assertEqual(e.errno, 5, rel)
                        failed += 1
                stderr = m.log()
                xattr = os.getxattr(m.mnt, "user.pcrfs.remote").decode()
            sent = [r["path"] for r in proxy.requests()]
        self.assertGreater(failed, 0)
        self.assertIn(victim, stderr)
        self.assert_no_token(stderr, "stderr")
        self.assert_no_token(xattr, "xattr")
        if os.path.exists(log_file):
            with open(log_file) as f:
                self.assert_no_token(f.read(), "log file")
        # Every request through the proxy had the query, exactly as given.
        self.assertTrue(sent)
        for path in sent:
            self.assertTrue(path.endswith(f"?sig={TOKEN}&sv=1"), path)

    def test_cache_folder_does_not_depend_on_the_query(self):
        home = os.path.join(self.tmp, "home-cache")
        os.makedirs(home)
        env = dict(self.env, HOME=home)
        cache_root = os.path.join(home, ".cache", "pcrfs")
        folders = []
        # The same store with its query in another order, and with one more parameter.
        for i, url in enumerate((self.url, f"{self.base}?sv=1&sig={TOKEN}",
                                 f"{self.base}?sig={TOKEN}&sv=1&extra=2")):
            mnt = os.path.join(self.tmp, f"mnt-default-cache-{i}")
            with Mount(url, mnt, "-o", "scans=6", env=env) as m:
                got = read_tree(m.mnt)
                self.assertEqual(got, self.local[6])
            folders.append(sorted(os.listdir(cache_root)))
        self.assertEqual(len(folders[0]), 1, folders)
        self.assertEqual(folders, [folders[0]] * 3)
        name = folders[0][0]
        self.assert_no_token(name)
        self.assertRegex(name, r"^[0-9a-f]{64}$")
        # The same folder as the URL without a query (pcr with the token: cat reads through
        # it).
        p = run([PCR, "cat", self.url, sorted(self.local[2])[0], "--scans", "2"], env=env)
        self.assertEqual(p.stdout, self.local[2][sorted(self.local[2])[0]])
        self.assertEqual(sorted(os.listdir(cache_root)), folders[0])
        for dirpath, dirnames, filenames in os.walk(cache_root):
            for n in dirnames + filenames:
                self.assert_no_token(n)

    def test_pcr_over_a_signed_url(self):
        env = dict(self.env, PCRFS_CACHE_DIR=self.cache("pcr"))
        for k in (1, 5, 10):
            self.assertEqual(pcr_extract(self.url, k, env=env), self.local[k], f"level {k}")
        p = run([PCR, "inspect", self.url], env=env)
        self.assert_no_token((p.stdout + p.stderr).decode())
        self.assertIn(str(len(self.records)), p.stdout.decode())
        p = run([PCR, "verify", self.url, "--source", self.src], env=env, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assert_no_token((p.stdout + p.stderr).decode())

    def test_errors_never_show_the_token(self):
        mnt = os.path.join(self.tmp, "mnt-fail")
        os.makedirs(mnt, exist_ok=True)
        for query in (f"sig={WRONG}&sv=1", "sv=1", ""):
            url = self.base + (f"?{query}" if query else "")
            p = subprocess.run([PCRFS, url, mnt, "-f", "-o",
                                f"cache_dir={self.cache('fail')}"], env=self.env,
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 1, p.stderr)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn("403", lines[0])
            self.assertIn(f"{self.base}/manifest.json", lines[0])
            self.assert_no_token(p.stderr)
            p = subprocess.run([PCR, "cat", url, "class0/img000.jpg"],
                               env=dict(self.env, PCRFS_CACHE_DIR=self.cache("fail-pcr")),
                               capture_output=True, text=True, timeout=120)
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            self.assertIn("403", p.stderr)
            self.assert_no_token(p.stderr + p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
