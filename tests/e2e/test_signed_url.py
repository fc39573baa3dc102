#!/usr/bin/python3
"""Signed HTTP URLs (issue 30 item 6): a store behind nginx that answers 403 unless the query
carries the token (Nginx(required_query=...), as a CDN or a presigned store does), mounted as
`pcrfs http://127.0.0.1:PORT/store?sig=TOKEN&sv=1 MNT` and read with `pcr`: every file at every
level byte for byte equal to `pcr` on the local store, the query sent exactly as given on every
request, and the token never shown: not in pcrfs's stderr, the log file, /proc/mounts (the
fsname), user.pcrfs.remote, an error message or the cache folder's name. Needs
tests/remote/install.sh (nginx)."""

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, LoopbackServersCase, Mount, pcr_extract, photo,  # noqa: E402
                     read_tree, run, save_jpeg, sha, store_bytes)
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

    def access_log(self, offset=0):
        """nginx's access log from byte offset on."""
        with open(self.nginx.access_log) as f:
            f.seek(offset)
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
        offset = len(self.access_log())
        with self.mount(self.url, "signed", f"log_file={log_file}") as m:
            self.assert_every_level(m.mnt)
            xattr = os.getxattr(m.mnt, "user.pcrfs.remote").decode()
            stats = json.loads(xattr)
            self.assertEqual(stats["client"]["failed"], 0, stats)
            self.assertGreater(stats["client"]["requests"], 2)
            with open("/proc/mounts") as f:
                mounts = [line for line in f if m.mnt in line]
            mount_out = run(["mount"], text=True).stdout
            # Every user can read a process's command line: the daemon blanks the query there.
            with open(f"/proc/{m.proc.pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode()
            self.assertIn(self.base + "?", cmdline)
            stderr = m.log()
        self.assertEqual(len(mounts), 1, mounts)
        # The fsname is the URL without its query.
        self.assertTrue(mounts[0].startswith(f"{self.base} "), mounts[0])
        for what, text in (("xattr", xattr), ("/proc/mounts", mounts[0]),
                           ("mount", mount_out), ("stderr", stderr), ("cmdline", cmdline)):
            self.assert_no_token(text, what)
        with open(log_file) as f:
            self.assert_no_token(f.read(), "log file")
        # Every request pcrfs sent carried the query as given (nginx refuses the rest).
        requests = self.nginx.wait_for_log(stats["client"]["attempts"], offset=offset)
        self.assertGreater(len(requests), 2)
        refused = [line for line in requests if '" 403 ' in line]
        self.assertEqual(refused, [])
        for line in requests:
            self.assertIn(f"?sig={TOKEN}&sv=1 HTTP/1.1", line)

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
        with open(log_file) as f:
            self.assert_no_token(f.read(), "log file")
        # Every request through the proxy had the query, exactly as given.
        self.assertTrue(sent)
        for path in sent:
            self.assertTrue(path.endswith(f"?sig={TOKEN}&sv=1"), path)

    def test_cache_folder_does_not_depend_on_the_query(self):
        """Without -o cache_dir the cache folder is named by the SHA-256 of the URL without its
        query (remote/store_location.cc DefaultCacheDir): the same for any token and any order
        of the parameters."""
        home = os.path.join(self.tmp, "home-cache")
        os.makedirs(home)
        env = dict(self.env, HOME=home)
        root = "/var/cache/pcrfs" if os.geteuid() == 0 else os.path.join(home, ".cache", "pcrfs")
        want = os.path.join(root, hashlib.sha256(self.base.encode()).hexdigest())
        urls = (self.url, f"{self.base}?sv=1&sig={TOKEN}", f"{self.base}?sig={TOKEN}&sv=1&x=2")
        try:
            for i, url in enumerate(urls):
                shutil.rmtree(want, ignore_errors=True)
                mnt = os.path.join(self.tmp, f"mnt-default-cache-{i}")
                with Mount(url, mnt, "-o", "scans=6", env=env) as m:
                    self.assertEqual(read_tree(m.mnt), self.local[6])
                self.assertTrue(os.path.exists(os.path.join(want, "index.pcri")), url)
                for other in urls:
                    named = os.path.join(root, hashlib.sha256(other.encode()).hexdigest())
                    self.assertFalse(os.path.exists(named), other)
            # pcr with the token reads through the same folder.
            shutil.rmtree(want, ignore_errors=True)
            rel = sorted(self.local[2])[0]
            p = run([PCR, "cat", self.url, rel, "--scans", "2"], env=env)
            self.assertEqual(p.stdout, self.local[2][rel])
            self.assertTrue(os.path.exists(os.path.join(want, "index.pcri")))
            for dirpath, dirnames, filenames in os.walk(want):
                for n in dirnames + filenames:
                    self.assert_no_token(n)
        finally:
            shutil.rmtree(want, ignore_errors=True)

    def test_build_from_a_signed_archive_url(self):
        """pcr build http://HOST/src.tar?sig=...: the same store as from the local archive;
        the token in no message, not in provenance.json."""
        tar = os.path.join(self.nginx.root, "src.tar")
        with tarfile.open(tar, "w") as t:
            t.add(self.src, arcname=".")
        opts = ["--images-per-record", "5", "--quality-sample", "3"]
        local = os.path.join(self.tmp, "built-local-tar")
        run([PCR, "build", tar, local, "--quiet", *opts])
        store = os.path.join(self.tmp, "built-signed-tar")
        url = f"{self.nginx.url}/src.tar?sig={TOKEN}&sv=1"
        p = run([PCR, "build", url, store, "--progress", *opts], env=self.env)
        out = (p.stdout + p.stderr).decode()
        self.assert_no_token(out)
        self.assertIn(f"{self.nginx.url}/src.tar", out)
        a, b = store_bytes(local), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], k)
        with open(os.path.join(store, "provenance.json")) as f:
            provenance = f.read()
        self.assert_no_token(provenance)
        self.assertEqual(json.loads(provenance)["source"]["location"], f"{self.nginx.url}/src.tar")
        # A wrong token: one line, 403, no token.
        p = run([PCR, "build", f"{self.nginx.url}/src.tar?sig={WRONG}&sv=1",
                 os.path.join(self.tmp, "built-wrong"), *opts], env=self.env, check=False)
        self.assertNotEqual(p.returncode, 0)
        err = p.stderr.decode()
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("403", err)
        self.assert_no_token(err + p.stdout.decode())

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

    def test_pcr_blanks_the_query_in_its_command_line(self):
        # Every local user can read /proc/PID/cmdline: pcr blanks the query as the daemon does.
        # A server that accepts and never answers keeps pcr running while the test looks.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            url = f"http://127.0.0.1:{silent.getsockname()[1]}/store?sig={TOKEN}&sv=1"
            env = dict(self.env, PCRFS_CACHE_DIR=self.cache("pcr-argv"))
            for command in (["inspect", url], ["verify", url], ["cat", url, "a.jpg"]):
                with self.subTest(command=command[0]):
                    p = subprocess.Popen([PCR, *command], env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
                    try:
                        deadline = time.monotonic() + 20
                        cmdline = ""
                        while "?*" not in cmdline:
                            self.assertLess(time.monotonic(), deadline,
                                            f"the query stayed in {cmdline!r}")
                            with open(f"/proc/{p.pid}/cmdline", "rb") as f:
                                cmdline = f.read().replace(b"\0", b" ").decode()
                            time.sleep(0.01)
                        self.assertIsNone(p.poll())  # still waiting for the server
                        self.assert_no_token(cmdline, "cmdline")
                        self.assertIn("/store?" + "*" * len(f"sig={TOKEN}&sv=1"), cmdline)
                    finally:
                        p.kill()
                        p.wait()

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
