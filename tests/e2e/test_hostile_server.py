#!/usr/bin/python3
"""A hostile or broken HTTP origin against a mounted remote store (review 2, 2026-11-27).

Each test states the behaviour pcrfs must have; on main at 912cfd8 every one of them failed,
each demonstrating a bug that a review found. Run through ctest (e2e_hostile_server), or:
PCR=build/mount-tools/pcr PCRFS=build/fs/pcrfs /usr/bin/python3 THIS.

The origin is a small threaded http.server on loopback that serves a store with ranges, ETags
and If-None-Match, and misbehaves per path as a test sets it (self.server.rules).
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pcrtest import PCR, Mount, photo, remote_env, run, save_jpeg


class Origin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root):
        super().__init__(("127.0.0.1", 0), Handler)
        self.root = root
        self.rules = {}  # path substring -> dict of misbehaviour
        self.log = []  # (time, path, Range)
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def rule(self, path):
        for k, v in self.rules.items():
            if k in path:
                return v
        return {}

    def requests(self, part):
        with self.lock:
            return [r for r in self.log if part in r[1]]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        srv = self.server
        path = self.path.split("?")[0]
        rng = self.headers.get("Range", "")
        with srv.lock:
            srv.log.append((time.time(), path, rng))
        m = srv.rule(path)
        if m.get("status"):
            self.send_response(m["status"])
            for k, v in m.get("headers", {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        try:
            with open(os.path.join(srv.root, path.lstrip("/")), "rb") as f:
                data = f.read()
        except OSError:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        etag = '"v1"'
        if self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.send_header("ETag", etag)
            self.end_headers()
            return
        total = m.get("claim_total", len(data))
        start, end, status = 0, total - 1, 200
        r = re.match(r"bytes=(\d+)-(\d+)", rng)
        if r:
            start, end, status = int(r.group(1)), min(int(r.group(2)), total - 1), 206
        n = end - start + 1
        body = data[start:end + 1]
        body += b"\0" * (n - len(body))
        self.send_response(status)
        self.send_header("ETag", etag)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{total}")
        self.send_header("Content-Length", str(n))
        self.end_headers()
        if m.get("stall"):  # one byte, then nothing
            try:
                self.wfile.write(body[:1])
                self.wfile.flush()
                time.sleep(m["stall"])
            except OSError:
                pass
            self.close_connection = True
            return
        self.wfile.write(body)


def cache_bytes(folder):
    total = 0
    for d, _, names in os.walk(folder):
        total += sum(os.path.getsize(os.path.join(d, n)) for n in names)
    return total


class HostileServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="hostile-server-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.env = remote_env(cls.tmp)
        src = os.path.join(cls.tmp, "src")
        for i in range(48):
            save_jpeg(photo(480, 360, seed=i), os.path.join(src, f"c{i % 3}", f"img{i:03d}.jpg"),
                      quality=90, progressive=True)
        cls.www = os.path.join(cls.tmp, "www")
        os.makedirs(cls.www)
        run([PCR, "build", src, os.path.join(cls.www, "store"), "--quiet",
             "--images-per-record", "8", "--quality-sample", "0"])
        cls.origin = Origin(cls.www)
        cls.addClassCleanup(cls.origin.shutdown)

    def setUp(self):
        self.origin.rules = {}

    def mount(self, name, *options):
        self.cache = os.path.join(self.tmp, "cache-" + name)
        mnt = os.path.join(self.tmp, "mnt-" + name)
        return Mount(self.origin.url + "/store", mnt,
                     "-o", ",".join(["cache_dir=" + self.cache, *options]), env=self.env)

    def files(self, mnt):
        out = []
        for d, _, names in os.walk(os.path.join(mnt, "scan10")):
            out += [os.path.join(d, n) for n in names]
        return sorted(out)

    def test_index_claiming_a_huge_size_fills_no_disk(self):
        # The index's first GET answers 206 with Content-Range ".../268435456": pcrfs allocates
        # and downloads 256 MiB (up to 16 GiB by default) and keeps it in the cache folder after
        # the mount failed, though the index's own header (in the first bytes) says 925 bytes.
        self.origin.rules = {"index.pcri": {"claim_total": 256 << 20}}
        before = len(self.origin.requests("index.pcri"))  # the origin serves every test
        with self.assertRaises(AssertionError):
            with self.mount("huge"):
                pass
        self.assertLess(cache_bytes(self.cache), 16 << 20)
        self.assertLess(len(self.origin.requests("index.pcri")) - before, 4)

    def test_damaged_cached_index_is_downloaded_again(self):
        with self.mount("damaged") as m:
            self.files(m.mnt)
        with open(os.path.join(self.cache, "index.pcri"), "r+b") as f:
            f.seek(100)
            f.write(b"XXXX")  # a crash before the rename's data reached the disk, a bad sector
        # The origin answers 304 to the saved ETag: the damaged copy must not be trusted.
        with self.mount("damaged") as m:
            self.assertTrue(self.files(m.mnt))

    def test_retry_after_zero_keeps_the_backoff(self):
        # 503 with Retry-After: 0 made 10 tries in ~12 ms (no backoff): a retry storm.
        self.origin.rules = {"records/": {"status": 503, "headers": {"Retry-After": "0"}}}
        with self.mount("storm") as m:
            started = time.time()  # the origin serves every test: only this one's requests
            p = subprocess.Popen(["cat", self.files(m.mnt)[0]], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            # Until the first record request is 0.5 s old (at most 20 s for it to come).
            deadline = time.time() + 20
            while True:
                first = [r for r in self.origin.requests("records/") if r[0] >= started]
                if (first and time.time() >= first[0][0] + 0.5) or time.time() > deadline:
                    break
                time.sleep(0.02)
            self.assertTrue(first)
            t0 = first[0][0]
            early = [r for r in first if r[0] - t0 < 0.5]
            self.assertLessEqual(len(early), 6, f"{len(early)} record requests in 0.5 s")
            p.kill()
            p.wait()
            # A 503 is no damage: the damage gauge stays 0.
            metrics = os.getxattr(m.mnt, "user.pcrfs.metrics").decode()
            self.assertIn("pcrfs_damaged_files 0", metrics)

    def test_stalled_origin_read_ends_near_the_timeout(self):
        # Headers, one byte, then nothing: with remote_timeout=3 one read(2) took 18-24 s.
        self.origin.rules = {"records/": {"stall": 60}}
        with self.mount("stall", "remote_timeout=3", "prefetch=0") as m:
            t = time.time()
            r = subprocess.run(["cat", self.files(m.mnt)[0]], capture_output=True)
            took = time.time() - t
            self.assertNotEqual(r.returncode, 0)
            self.assertLess(took, 7.0)

    def test_second_epoch_still_speculates(self):
        # A dataset larger than the caches, read twice in order: the first pass speculates, the
        # second must too (SpeculationQueue forgets what it took once the caches took in as much).
        # Bytes read and evicted are not fetched ahead for 2 s (RangeCache::MissingUnread: a
        # fetch ahead decided just before their read would fetch them again); a real epoch of a
        # level larger than the cache takes longer, this one well under a second, so the second
        # starts once the daemon says it holds no such bytes (recently_read_bytes).
        with self.mount("epochs", "remote_cache=1M", "cache_size=1M") as m:
            def recently_read():
                client = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]
                return client["cache"]["recently_read_bytes"]

            def epoch():
                before = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]
                for path in self.files(m.mnt):
                    fd = os.open(path, os.O_RDONLY)
                    while os.read(fd, 1 << 20):
                        pass
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    os.close(fd)
                after = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]
                return after["background_requests"] - before["background_requests"]
            self.assertGreater(epoch(), 0)
            deadline = time.time() + 30
            while recently_read() > 0 and time.time() < deadline:
                time.sleep(0.1)
            self.assertEqual(recently_read(), 0)
            self.assertGreater(epoch(), 0)


if __name__ == "__main__":
    unittest.main()
