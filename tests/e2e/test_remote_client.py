#!/usr/bin/python3
"""The remote client library (remote/, pcrfs_remote) against real servers on loopback, through
its test CLI remote/pcr_fetch_test: ranged reads and downloads from nginx (HTTP and HTTPS with a
bearer token), from the S3 server that checks every SigV4 signature with AWS's own signer, and
through the fault proxy (503 + Retry-After, 429, resets, truncated bodies, a 200 for a 206, a
changed object, latency beyond the deadline, 404/403). Needs tests/remote/install.sh."""

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from remote_servers import FaultProxy, Nginx, S3Server, write_random_files  # noqa: E402

FETCH = os.environ.get("PCR_FETCH_TEST", "build/remote/pcr_fetch_test")
ACCESS_KEY = "AKIDPCRFSCLIENT"
SECRET_KEY = "client/test+secret"
BUCKET = "pcrfs-client"
PREFIX = "stores/one"


def make_files(root):
    files = {"manifest.json": 900, "index.lmdb": 200_000,
             "records/00000000.pcr": 3_000_000, "records/00000001.pcr": 70_000,
             "records/with space+plus.pcr": 5000}
    return write_random_files(root, files, 42)


def sha(b):
    return hashlib.sha256(b).hexdigest()


class ClientCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="remote-client-e2e-")
        cls.root = os.path.join(cls.tmp.name, "store")
        cls.files = make_files(cls.root)
        cls.home = os.path.join(cls.tmp.name, "home")
        os.makedirs(cls.home)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def fetch(self, *args, env=None, expect_ok=None):
        e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self.home,
             "no_proxy": "127.0.0.1,localhost"}
        e.update(env or {})
        start = time.monotonic()
        p = subprocess.run([FETCH, *args], env=e, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - start
        self.assertIn(p.returncode, (0, 1), p.stderr)
        out = json.loads(p.stdout)
        out["took"] = took
        out["raw"] = p.stdout + p.stderr
        if expect_ok is not None:
            self.assertEqual(out["ok"], expect_ok, out)
        return out

    def read(self, store, name, offset, length, size=None, opts=(), env=None, expect_ok=None):
        size = len(self.files[name]) if size is None else size
        return self.fetch(*opts, "read", store, name, str(offset), str(length), str(size),
                          env=env, expect_ok=expect_ok)

    def assert_read(self, store, name, offset, length, **kw):
        out = self.read(store, name, offset, length, expect_ok=True, **kw)
        self.assertEqual(out["sha256"], sha(self.files[name][offset:offset + length]), out)
        return out


class NginxTest(ClientCase):
    def test_ranged_reads_and_downloads(self):
        with Nginx(self.root) as n:
            for name, off, ln in [("records/00000000.pcr", 0, 1), ("records/00000000.pcr",
                                  123_457, 2_000_000), ("records/00000001.pcr", 69_000, 1000),
                                  ("records/with space+plus.pcr", 10, 4990)]:
                self.assert_read(n.url, name, off, ln)
            # Past the end: refused without a request.
            out = self.read(n.url, "records/00000001.pcr", 69_999, 2, expect_ok=False)
            self.assertEqual(out["code"], "corruption")
            self.assertEqual(out["stats"]["requests"], 0)
            # The index says another size: the object changed.
            out = self.read(n.url, "records/00000001.pcr", 0, 10, size=60_000, expect_ok=False)
            self.assertIn("the object changed (size 70000, index says 60000): remount",
                          out["error"])
            out = self.read(n.url, "records/missing.pcr", 0, 10, size=10, expect_ok=False)
            self.assertEqual(out["code"], "not_found")
            self.assertIn("records/missing.pcr: 404 Not Found", out["error"])

            dest = os.path.join(self.tmp.name, "index.lmdb")
            first = self.fetch("download", n.url, "index.lmdb", dest, expect_ok=True)
            self.assertTrue(first["modified"])
            with open(dest, "rb") as f:
                self.assertEqual(f.read(), self.files["index.lmdb"])
            again = self.fetch("download", n.url, "index.lmdb", dest, first["etag"],
                               expect_ok=True)
            self.assertFalse(again["modified"])
            self.assertEqual(again["stats"]["bytes_received"], 0)

    def test_https_with_bearer_token(self):
        token = "bearer-secret-1234"
        with Nginx(self.root, tls=True, bearer_token=token) as n:
            headers = os.path.join(self.tmp.name, "headers")
            with open(headers, "w") as f:
                f.write(f"# for the test store\nAuthorization: Bearer {token}\n")
            ok = ["--ca-file", n.ca_file, "--headers-file", headers]
            self.assert_read(n.url, "records/00000001.pcr", 5, 60_000, opts=ok)
            # TLS verification is on by default: the self-signed certificate is refused.
            out = self.read(n.url, "records/00000001.pcr", 0, 10, opts=["--headers-file", headers],
                            expect_ok=False)
            self.assertIn("certificate", out["error"].lower())
            self.assertEqual(out["stats"]["attempts"], 1)  # not retried
            # No token: 401, not retried; the token never appears in any output.
            out = self.read(n.url, "records/00000001.pcr", 0, 10, opts=["--ca-file", n.ca_file],
                            expect_ok=False)
            self.assertIn("401 Unauthorized", out["error"])
            self.assertEqual(out["stats"]["attempts"], 1)
            for o in (out,):
                self.assertNotIn(token, o["raw"])


class S3Test(ClientCase):
    def env(self, endpoint, secret=SECRET_KEY):
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}

    def test_signed_reads_wrong_secret_and_faults(self):
        with S3Server(self.root, BUCKET, ACCESS_KEY, SECRET_KEY, prefix=PREFIX) as s3:
            store = f"s3://{BUCKET}/{PREFIX}"
            env = self.env(s3.endpoint)
            before = s3.front_stats()
            for name, off, ln in [("records/00000000.pcr", 1_000_000, 1_500_000),
                                  ("records/with space+plus.pcr", 0, 5000),
                                  ("records/00000001.pcr", 0, 1)]:
                self.assert_read(store, name, off, ln, env=env)
            after = s3.front_stats()
            self.assertEqual(after["signed_ok"] - before["signed_ok"], 3, after)
            self.assertFalse(after.get("refused"), after)

            # ListObjectsV2 (a query, signed): the keys under the prefix.
            listed = self.fetch("list", store, env=env, expect_ok=True)
            self.assertEqual(sorted(listed["keys"]),
                             sorted(f"{PREFIX}/{k}" for k in self.files))

            # Metadata: downloaded, then not modified (If-None-Match, signed).
            dest = os.path.join(self.tmp.name, "s3-manifest.json")
            first = self.fetch("download", store, "manifest.json", dest, env=env, expect_ok=True)
            self.assertTrue(first["modified"])
            again = self.fetch("download", store, "manifest.json", dest, first["etag"], env=env,
                               expect_ok=True)
            self.assertFalse(again["modified"])

            # A wrong secret: refused by AWS's signer, a clear error, never retried or echoed.
            bad = self.read(store, "records/00000001.pcr", 0, 10,
                            env=self.env(s3.endpoint, secret="wrong-secret-xyz"), expect_ok=False)
            self.assertIn("403 Forbidden (SignatureDoesNotMatch)", bad["error"])
            self.assertEqual(bad["stats"]["attempts"], 1)
            self.assertNotIn("wrong-secret-xyz", bad["raw"])
            self.assertNotIn(SECRET_KEY, bad["raw"])
            # Anonymous requests are refused by this server: AccessDenied.
            anon = self.read(store, "records/00000001.pcr", 0, 10, opts=["--no-sign"],
                             env={"AWS_ENDPOINT_URL": s3.endpoint}, expect_ok=False)
            self.assertIn("403 Forbidden (AccessDenied)", anon["error"])

            # Behind the fault proxy: every retry is signed again and accepted.
            with FaultProxy(s3.endpoint) as proxy:
                penv = self.env(proxy.url)
                proxy.fault(fault="status", status=503, retry_after="1", count=1)
                proxy.fault(fault="reset", after_bytes=1000, count=1)
                out = self.assert_read(store, "records/00000000.pcr", 0, 100_000, env=penv)
                self.assertEqual(out["stats"]["attempts"], 3, out)
                self.assertEqual(out["stats"]["retries"]["slow_down"], 1)
                self.assertEqual(out["stats"]["retries"]["reset"], 1)
                self.assertGreaterEqual(out["took"], 1.0)  # the Retry-After was honoured


    def test_session_token(self):
        token = "session/token+of=the-client-test"
        with S3Server(self.root, BUCKET, ACCESS_KEY, SECRET_KEY, prefix=PREFIX,
                      session_token=token) as s3:
            store = f"s3://{BUCKET}/{PREFIX}"
            env = {**self.env(s3.endpoint), "AWS_SESSION_TOKEN": token}
            self.assert_read(store, "records/00000001.pcr", 100, 1000, env=env)
            out = self.read(store, "records/00000001.pcr", 0, 10, env=self.env(s3.endpoint),
                            expect_ok=False)
            self.assertIn("403 Forbidden (InvalidToken)", out["error"])
            # From a profile of the shared credentials file instead of the environment.
            creds = os.path.join(self.tmp.name, "credentials")
            with open(creds, "w") as f:
                f.write(f"[train]\naws_access_key_id = {ACCESS_KEY}\n"
                        f"aws_secret_access_key = {SECRET_KEY}\naws_session_token = {token}\n")
            self.assert_read(store, "records/00000000.pcr", 0, 1000,
                             env={"AWS_SHARED_CREDENTIALS_FILE": creds, "AWS_PROFILE": "train",
                                  "AWS_ENDPOINT_URL_S3": s3.endpoint})


class FaultProxyTest(ClientCase):
    NAME = "records/00000000.pcr"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.nginx = Nginx(cls.root).__enter__()
        cls.proxy = FaultProxy(cls.nginx.url).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.proxy.__exit__(None, None, None)
        cls.nginx.__exit__(None, None, None)
        super().tearDownClass()

    def setUp(self):
        self.proxy.reset()

    def retried(self, rule, reason, tries=2, offset=4096, length=200_000):
        self.proxy.fault(**rule)
        out = self.assert_read(self.proxy.url, self.NAME, offset, length)
        self.assertEqual(out["stats"]["attempts"], tries, out)
        self.assertEqual(out["stats"]["retries"][reason], tries - 1, out)
        return out

    def test_503_with_retry_after(self):
        out = self.retried({"fault": "status", "status": 503, "retry_after": "1", "count": 2},
                           "slow_down", tries=3)
        self.assertGreaterEqual(out["took"], 2.0)

    def test_500_and_429(self):
        self.retried({"fault": "status", "status": 500, "count": 1}, "server_error")
        self.proxy.reset()
        self.retried({"fault": "status", "status": 429, "count": 2}, "throttled", tries=3)

    def test_resets(self):
        self.retried({"fault": "reset", "count": 1}, "reset")
        self.proxy.reset()
        self.retried({"fault": "reset", "after_bytes": 50_000, "count": 1}, "reset")

    def test_truncated_body(self):
        self.retried({"fault": "truncate", "bytes": 1000, "count": 1}, "short_body")

    def test_200_instead_of_206(self):
        self.retried({"fault": "full", "count": 2}, "full_body", tries=3)
        # Always a 200: an error after the retries, never the wrong bytes.
        self.proxy.reset()
        self.proxy.fault(fault="full")
        out = self.read(self.proxy.url, self.NAME, 4096, 1000, opts=["--max-attempts", "3"],
                        expect_ok=False)
        self.assertEqual(out["code"], "io_error")
        self.assertIn("200 with the whole object for a range", out["error"])

    def test_changed_object(self):
        self.proxy.fault(fault="change", what=["total"])
        out = self.read(self.proxy.url, self.NAME, 0, 1000, expect_ok=False)
        self.assertEqual(out["code"], "corruption")
        size = len(self.files[self.NAME])
        self.assertIn(f"the object changed (size {size + 1}, index says {size}): remount",
                      out["error"])
        self.assertEqual(out["stats"]["attempts"], 1)

    def test_latency_beyond_the_deadline(self):
        self.proxy.fault(fault="latency", ms=5000)
        out = self.read(self.proxy.url, self.NAME, 0, 1000, opts=["--deadline-ms", "1000"],
                        expect_ok=False)
        self.assertEqual(out["code"], "io_error")
        self.assertIn("gave up after", out["error"])
        self.assertLess(out["took"], 3.0)  # bounded by the deadline, not the server
        # A stall mid-body: the same bound.
        self.proxy.reset()
        self.proxy.fault(fault="stall", after_bytes=1000, ms=5000)
        out = self.read(self.proxy.url, self.NAME, 0, 100_000, opts=["--deadline-ms", "1000"],
                        expect_ok=False)
        self.assertIn("timeout", out["error"])
        self.assertLess(out["took"], 3.0)

    def test_404_and_403_are_not_retried(self):
        for status, code, text in [(404, "not_found", "404 Not Found"),
                                   (403, "io_error", "403 Forbidden (AccessDenied)")]:
            self.proxy.reset()
            self.proxy.fault(fault="status", status=status)
            out = self.read(self.proxy.url, self.NAME, 0, 1000, expect_ok=False)
            self.assertEqual(out["code"], code, out)
            self.assertIn(text, out["error"])
            self.assertEqual(self.proxy.stats()["requests"], 1)
            self.assertEqual(out["stats"]["attempts"], 1)

    def test_random_faults_every_read_correct(self):
        self.proxy.fault(fault="reset", after_bytes=2000, probability=0.2, seed=7)
        self.proxy.fault(fault="status", status=503, probability=0.2, seed=8)
        self.proxy.fault(fault="truncate", bytes=3000, probability=0.1, seed=9)
        rng = random.Random(5)
        for _ in range(8):
            off = rng.randrange(0, 2_000_000)
            self.assert_read(self.proxy.url, self.NAME, off, rng.randrange(1, 500_000))


if __name__ == "__main__":
    unittest.main(verbosity=2)
