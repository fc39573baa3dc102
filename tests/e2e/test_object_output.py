#!/usr/bin/python3
"""Stores and parts written straight into object storage (issue 45 item 1): `pcr build SRC
s3://B/P` (and `--shard I/N` parts), `pcr merge s3://B/parts s3://B/store` copying the records on
the server, `--resume` from the bucket's state on a machine without the local draft. Against the
S3 server of tests/remote (s3rver behind a front that checks every SigV4 signature). Every store
is downloaded and compared, byte for byte, with the local build of the same source. Needs
tests/remote/install.sh."""

import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, LoopbackServersCase, make_messy_tree, photo, run,  # noqa: E402
                     save_jpeg, store_bytes)
from azurite import Azurite  # noqa: E402
from remote_servers import FaultProxy, S3Server  # noqa: E402

ACCESS_KEY = "AKIDPCRFSOUTPUT"
SECRET_KEY = "output/test+secret"
BUCKET = "pcrfs-out"
OPTS = ["--images-per-record", "3", "--quality-sample", "7", "--quality-seed", "11"]


def make_source(root):
    make_messy_tree(root)
    for i in range(30):
        save_jpeg(photo(64 + 3 * i, 48 + 2 * i, 500 + i), os.path.join(
            root, f"class{i % 3}", f"img{i:03d}.jpg"), quality=80 + i % 15)
    # Pieces longer than a checksum block (1 MiB) carry block CRCs in the index, and a record
    # longer than a part (8 MiB) goes up as a multipart upload.
    with open(os.path.join(root, "class1", "blob.bin"), "wb") as f:
        f.write(random.Random(5).randbytes(9_500_000))


class ObjectOutputTest(LoopbackServersCase):
    tmp_prefix = "object-output-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = cls.path("src")
        make_source(cls.src)
        cls.s3 = cls.serve(S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY))
        # The local drafts go to PCRFS_CACHE_DIR (root's default is /var/cache/pcrfs).
        cls.s3env = dict(cls.env, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                         AWS_ENDPOINT_URL=cls.s3.endpoint, PCRFS_CACHE_DIR=cls.path("cache"))
        cls.local = cls.path("local")
        run([PCR, "build", cls.src, cls.local, "--quiet", *OPTS])

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    def pcr(self, *args, expect=0, env=None):
        p = run([PCR, *args], env=env or self.s3env, check=False, text=True, timeout=600)
        self.assertEqual(p.returncode, expect, f"pcr {args[0]} exited {p.returncode}:\n"
                         f"{p.stdout}\n{p.stderr}")
        return p

    def keys(self, prefix):
        return self.s3.sizes(prefix, BUCKET)

    def download(self, prefix, name):
        """The objects under prefix, as a local folder."""
        dst = self.path(name)
        shutil.rmtree(dst, ignore_errors=True)
        client = self.s3.client()
        try:
            for key in self.keys(prefix):
                path = os.path.join(dst, key)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                client.download_file(BUCKET, f"{prefix}/{key}", path)
        finally:
            client.close()
        return dst

    def assert_identical(self, store, reference):
        a, b = store_bytes(reference), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        self.assertGreater(len([k for k in a if k.startswith("records/")]), 7)
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs from the local build")

    def one_line(self, p, needle):
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(needle, lines[0])
        self.assertNotIn(SECRET_KEY, p.stderr + p.stdout)
        return lines[0]

    def test_build_into_s3_is_the_local_build(self):
        url = f"s3://{BUCKET}/stores/one"
        p = self.pcr("build", self.src, url, "--quiet", *OPTS)
        self.assertIn(url, p.stdout)
        keys = self.keys("stores/one")
        self.assertFalse([k for k in keys if k.startswith(".build/")], keys)
        self.assertIn("provenance.json", keys)
        # The record holding the 9.5 MB blob went up as a multipart upload.
        self.assertGreater(max(keys.values()), 8 << 20)
        self.assert_identical(self.download("stores/one", "one"), self.local)
        # It is a store pcr reads from the bucket.
        self.assertEqual(self.pcr("verify", url).returncode, 0)
        # Again without --force: refused, one line, nothing touched.
        p = self.pcr("build", self.src, url, "--quiet", *OPTS, expect=2)
        self.assertIn("already exists (use --force", self.one_line(p, url))
        # --force with other options replaces it: no record of the old store is left.
        self.pcr("build", self.src, url, "--quiet", "--force", "--images-per-record", "50",
                 "--quality-sample", "0")
        self.assertEqual(len([k for k in self.keys("stores/one") if k.startswith("records/")]), 1)

    def test_unsupported_output_urls_are_one_line(self):
        for url in ("http://127.0.0.1:1/store", "gs://b/store", "ftp://x/y",
                    "s3x://what/ever"):
            p = self.pcr("build", self.src, url, "--quiet", expect=2)
            line = self.one_line(p, url.split("://")[0] + "://")
            self.assertIn("cannot write a store there", line)
            self.assertNotIn("parent folder", line)
            p = self.pcr("merge", url + "/p0", url, expect=2)
            self.one_line(p, "://")
        # A bucket without a prefix, and a prefix holding other data.
        p = self.pcr("build", self.src, f"s3://{BUCKET}", "--quiet", expect=2)
        self.one_line(p, "needs a prefix")
        client = self.s3.client()
        client.put_object(Bucket=BUCKET, Key="notastore/data.csv", Body=b"a,b\n")
        client.close()
        p = self.pcr("build", self.src, f"s3://{BUCKET}/notastore", "--quiet", "--force",
                     expect=2)
        self.assertIn("data.csv", self.one_line(p, "not a pcrfs store"))
        self.assertEqual(sorted(self.keys("notastore")), ["data.csv"])

    def test_shards_into_s3_merge_on_the_server(self):
        for i in range(3):
            self.pcr("build", self.src, f"s3://{BUCKET}/parts/part-{i}", "--quiet", "--threads",
                     "1", "--shard", f"{i}/3", *OPTS)
        keys = self.keys("parts")
        record_bytes = sum(v for k, v in keys.items() if "/records/" in k)
        self.assertEqual(len([k for k in keys if k.endswith("/part.json")]), 3)
        before = self.s3.front_stats()["bytes_to_client"]
        # The prefix that holds the parts is enough.
        self.pcr("merge", f"s3://{BUCKET}/parts", f"s3://{BUCKET}/merged")
        fetched = self.s3.front_stats()["bytes_to_client"] - before
        # Records copied on the server: what came back is the parts' metadata, the records'
        # tables and the quality sample's pieces, not the records (the blob alone is 9.5 MB).
        self.assertLess(fetched, record_bytes // 4, (fetched, record_bytes))
        self.assert_identical(self.download("merged", "merged"), self.local)
        # Parts named one by one, in any order, give the same store.
        self.pcr("merge", *[f"s3://{BUCKET}/parts/part-{i}" for i in (2, 0, 1)],
                 f"s3://{BUCKET}/merged2")
        self.assert_identical(self.download("merged2", "merged2"), self.local)
        # A record over the single-copy limit is copied as a multipart upload of UploadPartCopy
        # ranges. S3's limit is 5 GiB; PCRFS_TEST_S3_COPY_LIMIT lowers it to 5 MiB here, so the
        # blob's record (9.5 MB) goes as two 5 MiB-at-most parts (the S3 server's front does
        # UploadPartCopy, which s3rver lacks, and refuses a short part that is not the last).
        big = [v for k, v in keys.items() if "/records/" in k and v > 5 << 20]
        self.assertEqual(len(big), 1, keys)
        before = self.s3.front_stats()
        self.pcr("merge", f"s3://{BUCKET}/parts", f"s3://{BUCKET}/merged-parts",
                 env=dict(self.s3env, PCRFS_TEST_S3_COPY_LIMIT=str(5 << 20)))
        after = self.s3.front_stats()
        self.assertEqual(after["part_copies"] - before["part_copies"], -(-big[0] // (5 << 20)))
        self.assertEqual(after["part_copy_bytes"] - before["part_copy_bytes"], big[0])
        self.assertLess(after["bytes_to_client"] - before["bytes_to_client"], record_bytes // 4)
        self.assert_identical(self.download("merged-parts", "merged-parts"), self.local)
        # The test-only knob refuses what is not a number of bytes: a wrong value would let the
        # check above pass without a copy in parts.
        p = self.pcr("merge", f"s3://{BUCKET}/parts", f"s3://{BUCKET}/merged-knob",
                     env=dict(self.s3env, PCRFS_TEST_S3_COPY_LIMIT="5M"), expect=2)
        self.one_line(p, "PCRFS_TEST_S3_COPY_LIMIT=5M: not a number of bytes")
        self.assertEqual(self.keys("merged-knob"), {})
        # A missing shard is named.
        p = self.pcr("merge", f"s3://{BUCKET}/parts/part-0", f"s3://{BUCKET}/parts/part-2",
                     f"s3://{BUCKET}/merged3", expect=2)
        self.one_line(p, "shard 1/3 is missing")
        self.assertEqual(self.keys("merged3"), {})

    def test_writes_are_retried_and_refusals_are_one_line(self):
        with FaultProxy(self.s3.endpoint) as proxy:
            env = dict(self.s3env, AWS_ENDPOINT_URL=proxy.url)
            # 503 SlowDown-like answers to the first PUTs (a record, a multipart part) and the
            # first POSTs (CreateMultipartUpload, CompleteMultipartUpload): retried.
            proxy.fault(fault="status", status=503, count=3, method="PUT")
            proxy.fault(fault="status", status=500, count=2, method="POST")
            self.pcr("build", self.src, f"s3://{BUCKET}/retried", "--quiet", *OPTS, env=env)
            statuses = [r["status"] for r in proxy.requests()
                        if r["method"] in ("PUT", "POST")]
            self.assertEqual(statuses.count(503), 3)
            self.assertEqual(statuses.count(500), 2)
        self.assert_identical(self.download("retried", "retried"), self.local)
        # A wrong secret: the first write is refused, one line naming the object, no secret.
        bad = dict(self.s3env, AWS_SECRET_ACCESS_KEY="wrong" + SECRET_KEY)
        p = self.pcr("build", self.src, f"s3://{BUCKET}/refused", "--quiet", *OPTS, env=bad,
                     expect=1)
        line = self.one_line(p, "403")
        self.assertIn(BUCKET, line)
        self.assertNotIn("wrong", line)
        self.assertEqual(self.keys("refused"), {})

    def test_killed_build_resumes_on_another_machine(self):
        src = self.path("big")
        for i in range(150):
            save_jpeg(photo(150 + i % 40, 110 + i % 20, 2000 + i), os.path.join(
                src, f"c{i % 3}", f"{i:04d}.jpg"), quality=85)
        opts = ["--images-per-record", "5", "--quality-sample", "3"]
        ref = self.path("ref")
        run([PCR, "build", src, ref, "--quiet", *opts])
        url = f"s3://{BUCKET}/resumed"
        proc = subprocess.Popen([PCR, "build", src, url, "--quiet", "--threads", "1", *opts],
                                env=self.s3env, stdout=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            if len([k for k in self.keys("resumed") if k.endswith(".members")]) >= 4:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        keys = self.keys("resumed")
        self.assertGreaterEqual(len([k for k in keys if k.endswith(".members")]), 4)
        # Nothing that a mount or a merge takes for whole.
        for name in ("index.pcri", "manifest.json", "part.json"):
            self.assertNotIn(name, keys)
        # Bounded local disk: uploaded records left the draft; at most the one being written.
        drafts = glob.glob(os.path.join(self.s3env["PCRFS_CACHE_DIR"], "build", "*",
                                        "store.partial", "records"))
        self.assertEqual(len(drafts), 1, drafts)
        self.assertLessEqual(len(os.listdir(drafts[0])), 1, os.listdir(drafts[0]))
        p = self.pcr("verify", url, expect=2)
        # Without --resume or --force: refused, naming what would be lost.
        p = self.pcr("build", src, url, "--quiet", *opts, expect=2)
        self.assertIn("--resume keeps them", self.one_line(p, url))
        # Another machine (its own HOME: no local draft) resumes from the bucket.
        other = dict(self.s3env, HOME=self.path("other-home"),
                     PCRFS_CACHE_DIR=self.path("other-cache"))
        os.makedirs(other["HOME"])
        p = self.pcr("build", src, url, "--resume", *opts, env=other)
        kept = re.search(r"\((\d+) kept from the interrupted build\)", p.stdout)
        self.assertTrue(kept, p.stdout)
        self.assertGreaterEqual(int(kept.group(1)), 4)
        self.assertFalse([k for k in self.keys("resumed") if k.startswith(".build/")])
        a, b = store_bytes(ref), store_bytes(self.download("resumed", "resumed"))
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs after a resumed build")


class AzureOutputTest(LoopbackServersCase):
    """The same into Azurite: Put Blob / Put Block + Put Block List, and Copy Blob for the merge."""
    tmp_prefix = "object-output-azure-e2e-"
    container = "pcrfs-out"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_source(cls.src)
        cls.az = cls.serve(Azurite())
        cls.az.create_container(cls.container).close()
        cls.azenv = dict(cls.env, AZURE_STORAGE_CONNECTION_STRING=cls.az.connection_string,
                         PCRFS_CACHE_DIR=os.path.join(cls.tmp, "cache"))
        cls.local = os.path.join(cls.tmp, "local")
        run([PCR, "build", cls.src, cls.local, "--quiet", *OPTS])

    def pcr(self, *args, expect=0):
        p = run([PCR, *args], env=self.azenv, check=False, text=True, timeout=600)
        self.assertEqual(p.returncode, expect, f"pcr {args[0]} exited {p.returncode}:\n"
                         f"{p.stdout}\n{p.stderr}")
        return p

    def download(self, prefix):
        dst = os.path.join(self.tmp, "dl-" + prefix.replace("/", "-"))
        shutil.rmtree(dst, ignore_errors=True)
        with self.az.create_container(self.container) as c:
            for b in c.list_blobs(name_starts_with=prefix + "/"):
                path = os.path.join(dst, b.name[len(prefix) + 1:])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(c.download_blob(b.name).readall())
        return dst

    def assert_identical(self, store):
        a, b = store_bytes(self.local), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs from the local build")

    def test_build_and_merge_into_azure_are_the_local_build(self):
        c = self.container
        self.pcr("build", self.src, f"az://{c}/stores/one", "--quiet", *OPTS)
        one = self.download("stores/one")
        self.assertFalse(os.path.exists(os.path.join(one, ".build")))
        self.assertGreater(max(os.path.getsize(os.path.join(one, "records", n))
                               for n in os.listdir(os.path.join(one, "records"))), 8 << 20)
        self.assert_identical(one)
        for i in range(3):
            self.pcr("build", self.src, f"az://{c}/parts/part-{i}", "--quiet", "--threads", "1",
                     "--shard", f"{i}/3", *OPTS)
        self.pcr("merge", f"az://{c}/parts", f"az://{c}/merged")
        self.assert_identical(self.download("merged"))
        # Parts in S3 do not merge into Azure: one line.
        p = self.pcr("merge", f"az://{c}/parts", "s3://b/x", expect=2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main()
