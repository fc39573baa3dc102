#!/usr/bin/python3
"""Mounting a remote store (issue 13): a store built by pcr build, served by nginx, by the S3
server (which checks every SigV4 signature with AWS's own signer) and through the fault proxy,
mounted with `pcrfs URL MNT` and read by `pcr cat URL`, compared byte for byte with the local
store. Needs tests/remote/install.sh (nginx, the npm packages of the S3 server)."""

import collections
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, LoopbackServersCase, pcr_extract, photo, pil_pixels,  # noqa: E402
                     read_levels, read_tree, run, save_jpeg, sha)
from remote_servers import FaultProxy, Nginx, S3Server  # noqa: E402

ACCESS_KEY = "AKIDPCRFSMOUNT"
SECRET_KEY = "mount/test+secret"
BUCKET = "pcrfs-mount"
LEVELS = (1, 5, 10)




class RemoteMountCase(LoopbackServersCase):
    tmp_prefix = "remote-mount-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        for i in range(24):
            save_jpeg(photo(96 + 8 * (i % 5), 80 + 4 * (i % 3), seed=i),
                      os.path.join(cls.src, f"class{i % 3}", f"img{i:03d}.jpg"),
                      quality=90, progressive=bool(i % 2))
        with open(os.path.join(cls.src, "notes.txt"), "w") as f:
            f.write("not a jpeg\n")
        cls.www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(cls.www, "store")
        os.makedirs(cls.www)
        run([PCR, "build", cls.src, cls.store, "--quiet", "--images-per-record", "6"])
        cls.records = sorted(os.listdir(os.path.join(cls.store, "records")))
        cls.local = read_levels(cls.store, os.path.join(cls.tmp, "local-mnt"), LEVELS)
        cls.nginx = cls.serve(Nginx(cls.www))

    def pcrfs_fails(self, url, *options, env=None):
        """Runs a mount expected to fail; returns its stderr."""
        mnt = os.path.join(self.tmp, "mnt-fail")
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.run([PCRFS, url, mnt, "-f", *options], env=env or self.env,
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        return p.stderr.strip()

    def assert_same_as_local(self, mnt, levels=LEVELS):
        for k in levels:
            got = read_tree(os.path.join(mnt, f"scan{k}"))
            self.assertEqual(sorted(got), sorted(self.local[k]))
            for rel, data in got.items():
                self.assertEqual(sha(data), sha(self.local[k][rel]), f"scan{k}/{rel}")

    def test_http_mount_every_level_and_pixels(self):
        url = self.nginx.url + "/store"
        with self.mount(url, "http") as m:
            self.assert_same_as_local(m.mnt)
            # Level 10 decodes to the source's pixels.
            for dirpath, _, names in os.walk(self.src):
                for name in names:
                    if not name.endswith(".jpg"):
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, name), self.src)
                    with open(os.path.join(dirpath, name), "rb") as f:
                        want = pil_pixels(f.read())
                    with open(os.path.join(m.mnt, "scan10", rel), "rb") as f:
                        self.assertEqual(pil_pixels(f.read()), want, rel)
            stats = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))
            self.assertGreater(stats["bytes_served"], 0)
            self.assertGreater(stats["client"]["requests"], 0)
            self.assertGreater(stats["client"]["bytes_received"], 0)
            self.assertIn("user.pcrfs.remote", os.listxattr(m.mnt))
            self.assertNotIn("fsname", m.log())
        # The cache holds the metadata, each with its ETag.
        for name in ("manifest.json", "index.pcri"):
            with open(os.path.join(self.cache("http"), name), "rb") as f:
                with open(os.path.join(self.store, name), "rb") as g:
                    self.assertEqual(f.read(), g.read())
            self.assertTrue(os.path.exists(os.path.join(self.cache("http"), name + ".etag")))

    def test_remount_sends_one_conditional_request_per_metadata_file(self):
        with FaultProxy(self.nginx.url) as proxy:
            url = proxy.url + "/store"
            with self.mount(url, "remount") as m:
                # The index's first GET asks for a range (a large one's rest would follow in
                # parallel ranges): this small one is that one answer.
                self.assertEqual(proxy.stats()["statuses"], {"200": 1, "206": 1})
                self.assertIn(": index of 29 entries, parsed 1 time(s) by this process",
                              m.log())
            proxy.reset()
            with self.mount(url, "remount") as m:
                self.assertEqual(proxy.stats()["statuses"], {"304": 2})
                self.assert_same_as_local(m.mnt, levels=(5,))
                self.assertIn("parsed 1 time(s) by this process", m.log())

    def test_older_store_with_index_lmdb_is_converted_once_into_the_cache(self):
        # A store as pcr built it before index format 4 (index.lmdb, manifest format 1).
        old = os.path.join(self.www, "oldstore")
        shutil.copytree(self.store, old)
        run([PCR, "lmdb-index", old])
        self.assertFalse(os.path.exists(os.path.join(old, "index.pcri")))
        cache = self.cache("old")
        with FaultProxy(self.nginx.url) as proxy:
            url = proxy.url + "/oldstore"
            with self.mount(url, "old") as m:
                self.assert_same_as_local(m.mnt, levels=(1, 10))
                # The conversion's own check is the one parse.
                self.assertIn("parsed 1 time(s) by this process", m.log())
            # manifest.json (200) and index.lmdb (206: its first range is all of it), after
            # index.pcri's 404; not counting the records' ranges.
            metadata = lambda: dict(collections.Counter(
                str(e["status"]) for e in proxy.requests() if "/records/" not in e["path"]))
            self.assertEqual(metadata(), {"200": 1, "206": 1, "404": 1})
            converted = os.path.join(cache, "index.pcri")
            self.assertTrue(os.path.exists(converted + ".from"))
            before = os.stat(converted).st_mtime_ns
            proxy.reset()
            with self.mount(url, "old") as m:
                self.assertEqual(metadata(), {"304": 2, "404": 1})
                self.assert_same_as_local(m.mnt, levels=(5,))
                self.assertIn("parsed 1 time(s) by this process", m.log())
            self.assertEqual(os.stat(converted).st_mtime_ns, before, "converted once")
            # pcr upgrade adds index.pcri to the store: the next mount takes it instead.
            run([PCR, "upgrade", old])
            proxy.reset()
            with self.mount(url, "old") as m:
                self.assertEqual(metadata(), {"304": 1, "206": 1})
                self.assert_same_as_local(m.mnt, levels=(5,))
            self.assertFalse(os.path.exists(converted + ".from"))
            self.assertFalse(os.path.exists(os.path.join(cache, "index.lmdb")))

    def test_faults_cost_time_or_only_their_record(self):
        with FaultProxy(self.nginx.url) as proxy:
            url = proxy.url + "/store"
            with self.mount(url, "faults", "remote_timeout=60") as m:
                proxy.fault(fault="status", status=503, retry_after="1", count=3,
                            path=r"/records/")
                proxy.fault(fault="reset", count=2, path=r"/records/")
                proxy.fault(fault="truncate", bytes=10, count=1, path=r"/records/")
                self.assert_same_as_local(m.mnt, levels=(10,))
                faults = proxy.stats()["faults"]
                self.assertEqual(faults.get("status"), 3)
                self.assertEqual(faults.get("reset"), 2)
                client = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]
                retries = client["retries"]
                # curl itself may resend a request whose reused connection was reset.
                self.assertEqual(retries["slow_down"] + retries["server_error"], 3, client)
                self.assertEqual(retries["short_body"], 1, client)
                self.assertEqual(client["failed"], 0, client)
            # A 404 for one record file: its files get EIO, every other file reads.
            proxy.reset()
            victim = self.records[1]
            proxy.fault(fault="status", status=404, path="/records/" + victim)
            with self.mount(url, "faults-404") as m:
                root = os.path.join(m.mnt, "scan3")
                failed, read = 0, 0
                for dirpath, _, names in os.walk(root):
                    for name in names:
                        p = os.path.join(dirpath, name)
                        rel = os.path.relpath(p, root)
                        try:
                            with open(p, "rb") as f:
                                f.read()
                            read += 1
                        except OSError as e:
                            self.assertEqual(e.errno, 5, rel)  # EIO
                            failed += 1
                self.assertGreater(failed, 0)
                self.assertGreater(read, 0)
                self.assertLessEqual(failed, 6)  # at most the files of one record
                self.assertIn(victim, m.log())

    def test_pcr_cat_and_inspect_over_http(self):
        url = self.nginx.url + "/store"
        env = dict(self.env, PCRFS_CACHE_DIR=self.cache("pcr"))
        for rel in sorted(self.local[5])[:4]:
            for k in (1, 10):
                got = run([PCR, "cat", url, rel, "--scans", str(k)], env=env).stdout
                want = run([PCR, "cat", self.store, rel, "--scans", str(k)]).stdout
                self.assertEqual(got, want, rel)
        out = run([PCR, "inspect", url], env=env).stdout.decode()
        self.assertIn(str(len(self.records)), out)
        # pcr extract URL: the whole tree at a level, as the local store's mount shows it.
        for k in LEVELS:
            self.assertEqual(pcr_extract(url, k, env=env), self.local[k], f"level {k}")

    def test_pcr_verify_over_http(self):
        env = dict(self.env, PCRFS_CACHE_DIR=self.cache("verify"))
        p = run([PCR, "verify", self.nginx.url + "/store", "--source", self.src], env=env,
                check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(str(len(self.records)), p.stdout.decode())
        # A damaged record served over HTTP: its files are listed, exit 1.
        www = os.path.join(self.tmp, "www-damaged")
        shutil.copytree(self.store, os.path.join(www, "store"))
        victim = os.path.join(www, "store", "records", self.records[2])
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) - 200)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x55]))
        with Nginx(www) as nginx:
            env = dict(self.env, PCRFS_CACHE_DIR=self.cache("verify-damaged"))
            p = run([PCR, "verify", nginx.url + "/store"], env=env, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        out = p.stdout.decode() + p.stderr.decode()
        self.assertIn("damaged", out)
        self.assertIn(self.records[2], out)

    def test_fstab_line_with_a_url(self):
        """mount(8) -T FSTAB through the installed mount.fuse.pcrfs, as a node's fstab would."""
        helper = "/sbin/mount.fuse.pcrfs"
        if not os.path.exists(helper) or shutil.which("pcrfs") is None:
            self.fail(f"{helper} or pcrfs is not installed: run ./setup.sh (or cmake --install)")
        mnt = os.path.join(self.tmp, "mnt-fstab")
        os.makedirs(mnt)
        fstab = os.path.join(self.tmp, "fstab")
        url = self.nginx.url + "/store"
        with open(fstab, "w") as f:
            f.write(f"{url} {mnt} fuse.pcrfs ro,noauto,_netdev,nofail,scans=5,"
                    f"cache_dir={self.cache('fstab')},disk_cache=16M 0 0\n")
        p = subprocess.run(["mount", "-T", fstab, mnt], capture_output=True, text=True,
                           timeout=60, env=self.env)
        try:
            self.assertEqual(p.returncode, 0, p.stderr)
            got = read_tree(mnt)
            self.assertEqual(sorted(got), sorted(self.local[5]))
            for rel, data in got.items():
                self.assertEqual(sha(data), sha(self.local[5][rel]), rel)
        finally:
            subprocess.run(["umount", mnt], timeout=30)

    def test_daemonized_mount_with_relative_cache_dir(self):
        # Without -f the daemon changes to / after the fork: the relative cache_dir still holds.
        mnt = os.path.join(self.tmp, "mnt-daemon")
        os.makedirs(mnt)
        p = subprocess.run([PCRFS, self.nginx.url + "/store", mnt, "-o", "cache_dir=rel-cache"],
                           env=self.env, cwd=self.tmp, capture_output=True, text=True, timeout=120)
        try:
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assert_same_as_local(mnt, levels=(5,))
            self.assertTrue(os.path.exists(os.path.join(self.tmp, "rel-cache", "index.pcri")))
        finally:
            subprocess.run(["fusermount3", "-u", mnt])

    def test_clear_errors(self):
        missing = self.nginx.url + "/nothing-here"
        err = self.pcrfs_fails(missing, "-o", "cache_dir=" + self.cache("err"))
        self.assertIn(missing, err)
        self.assertIn("not a pcrfs store", err)
        import socket
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        err = self.pcrfs_fails(f"http://127.0.0.1:{port}/store", "-o",
                               "cache_dir=" + self.cache("err2") + ",remote_timeout=2")
        self.assertIn(f"127.0.0.1:{port}/store", err)
        # With the default remote_timeout too: a refused connection before any answer is not
        # retried for the deadline (issue 46: 8.9 s at mount).
        t0 = time.monotonic()
        err = self.pcrfs_fails(f"http://127.0.0.1:{port}/store", "-o",
                               "cache_dir=" + self.cache("err3"))
        took = time.monotonic() - t0
        self.assertIn("cannot connect", err)
        self.assertLess(took, 5.0, f"a mount of a dead port failed after {took:.1f} s: {err}")
        err = self.pcrfs_fails(self.store, "-o", "endpoint=http://127.0.0.1:1")
        self.assertIn("only for a remote store", err)

    def test_s3_mount_and_wrong_secret(self):
        with S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY) as s3:
            s3.upload(self.store, prefix="datasets/store")
            url = f"s3://{BUCKET}/datasets/store"
            env = dict(self.env, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
            with self.mount(url, "s3", "endpoint=" + s3.endpoint, env=env) as m:
                self.assert_same_as_local(m.mnt, levels=(1, 10))
                xattr = os.getxattr(m.mnt, "user.pcrfs.remote").decode()
                self.assertNotIn(SECRET_KEY, xattr)
                self.assertNotIn(ACCESS_KEY, xattr)
            self.assertGreater(s3.front_stats()["signed_ok"], 0)
            bad = dict(env, AWS_SECRET_ACCESS_KEY="wrong" + SECRET_KEY)
            err = self.pcrfs_fails(url, "-o", f"cache_dir={self.cache('s3bad')},"
                                   f"endpoint={s3.endpoint}", env=bad)
            self.assertIn(f"/{BUCKET}/datasets/store/manifest.json", err)
            self.assertIn("403", err)
            self.assertIn("SignatureDoesNotMatch", err)
            self.assertNotIn(SECRET_KEY, err)


if __name__ == "__main__":
    unittest.main()
