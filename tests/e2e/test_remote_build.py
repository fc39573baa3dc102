#!/usr/bin/python3
"""Building from remote sources (issue 14 item 2): `pcr build s3://BUCKET/PREFIX STORE` against
the S3 server (every SigV4 signature checked), and an archive at an http:// URL (nginx, the
fault proxy) or an s3:// URL. The same objects build, byte for byte, the store the same tree
builds from a local folder (or the same archive from a local file). Needs tests/remote/install.sh
(nginx, the npm packages of the S3 server)."""

import calendar
import json
import os
import random
import sys
import tarfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, LoopbackServersCase, photo, run, save_jpeg,  # noqa: E402
                     store_bytes)
from remote_servers import FaultProxy, Nginx, S3Server  # noqa: E402

ACCESS_KEY = "AKIDPCRFSBUILD"
SECRET_KEY = "build/test+secret"
BUCKET = "pcrfs-build"
OPTS = ["--images-per-record", "4", "--quality-sample", "5"]


def make_source(root):
    for i in range(14):
        save_jpeg(photo(70 + 6 * (i % 4), 50 + 4 * (i % 3), seed=300 + i),
                  os.path.join(root, f"class{i % 3}", "deeper" if i % 5 == 0 else "",
                               f"img{i:03d}.jpg"), quality=85)
    with open(os.path.join(root, "labels.csv"), "w") as f:
        f.write("img,label\n")
    open(os.path.join(root, "class1", "empty.txt"), "w").close()
    os.makedirs(os.path.join(root, "class0", "empty folder"))  # a folder marker in the bucket
    with open(os.path.join(root, "class2", "caf\u00e9 & co.txt"), "w") as f:
        f.write("a unicode name with an XML entity\n")
    # Larger than the builder's streaming threshold (16 MiB): fetched in 8 MiB ranges while its
    # record is written.
    with open(os.path.join(root, "video.bin"), "wb") as f:
        f.write(random.Random(7).randbytes(17 * 1024 * 1024 + 5))


def match_listing(root, client, bucket, prefix):
    """Gives the local tree what a listing says of the objects: each file the LastModified of its
    object, mode 0644; each folder mode 0755 and the newest mtime below it or of its marker."""
    modified = {}
    files = 0
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix + "/"):
        for o in page.get("Contents", []):
            t = o["LastModified"]
            modified[o["Key"][len(prefix) + 1:]] = (calendar.timegm(t.utctimetuple()) * 10**9 +
                                                    t.microsecond // 1000 * 10**6)
            files += not o["Key"].endswith("/")
    newest = {}
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        best = 0
        for name in filenames:
            path = os.path.join(dirpath, name)
            ns = modified[os.path.relpath(path, root)]
            del modified[os.path.relpath(path, root)]
            os.chmod(path, 0o644)
            os.utime(path, ns=(ns, ns))
            best = max(best, ns)
        for name in dirnames:
            best = max(best, newest[os.path.join(dirpath, name)])
        best = max(best, modified.get(os.path.relpath(dirpath, root) + "/", 0))
        newest[dirpath] = best
        os.chmod(dirpath, 0o755)
        os.utime(dirpath, ns=(best, best))
    return files


class RemoteBuildTest(LoopbackServersCase):
    tmp_prefix = "remote-build-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_source(cls.src)
        cls.www = os.path.join(cls.tmp, "www")
        os.makedirs(cls.www)
        cls.tar = os.path.join(cls.www, "src.tar")
        with tarfile.open(cls.tar, "w") as t:
            t.add(cls.src, arcname=".")
        cls.s3 = cls.serve(S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY))
        cls.s3.upload(cls.src, prefix="data/train")
        client = cls.s3.client()
        client.put_object(Bucket=BUCKET, Key="data/train/class0/empty folder/", Body=b"")
        client.close()
        cls.s3.upload(cls.www, prefix="archives")
        client = cls.s3.client()
        cls.objects = match_listing(cls.src, client, BUCKET, "data/train")
        client.close()
        cls.s3env = dict(cls.env, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                         AWS_ENDPOINT_URL=cls.s3.endpoint)
        cls.local = cls.path("local")
        run([PCR, "build", cls.src, cls.local, "--quiet", *OPTS])
        cls.local_tar = cls.path("local-tar")
        run([PCR, "build", cls.tar, cls.local_tar, "--quiet", *OPTS])

    @classmethod
    def path(cls, name):
        return os.path.join(cls.tmp, name)

    def build(self, src, name, *extra, env=None, expect=0):
        store = self.path(name)
        p = run([PCR, "build", src, store, *OPTS, *extra], env=env or self.s3env, check=False,
                text=True, timeout=600)
        self.assertEqual(p.returncode, expect, p.stdout + p.stderr)
        return store, p

    def assert_identical(self, store, reference):
        a, b = store_bytes(reference), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k}: {store} differs from {reference}")

    def built(self, store):
        return json.loads(run([PCR, "inspect", store, "--json"]).stdout)["built"]

    def one_line_error(self, p, url):
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(url, lines[0])
        self.assertNotIn(SECRET_KEY, p.stderr + p.stdout)
        self.assertNotIn(ACCESS_KEY, p.stderr + p.stdout)
        return lines[0]

    def test_s3_prefix_builds_the_store_of_the_same_local_tree(self):
        url = f"s3://{BUCKET}/data/train"
        before = self.s3.front_stats()["signed_ok"]
        # Pages of 3 keys: the listing follows a few continuation tokens.
        env = dict(self.s3env, PCRFS_S3_LIST_PAGE="3")
        store, p = self.build(url, "s3", "--progress", env=env)
        self.assert_identical(store, self.local)
        self.assertIn(f"pcr build: listing {url}: {self.objects} files", p.stderr)
        self.assertRegex(p.stderr, rf"pcr build: {self.objects - 0}/{self.objects} files "
                                   r"\(100.0%\)")
        built = self.built(store)
        self.assertEqual(built["source"], {"kind": "s3-prefix", "location": url})
        self.assertGreater(self.s3.front_stats()["signed_ok"] - before, self.objects)
        # A trailing slash names the same prefix.
        store2, _ = self.build(url + "/", "s3-slash")
        self.assert_identical(store2, self.local)
        self.assertEqual(run([PCR, "verify", store, "--source", self.src], check=False)
                         .returncode, 0)

    def test_s3_errors_are_one_line_naming_the_url(self):
        url = f"s3://{BUCKET}/data/train"
        bad = dict(self.s3env, AWS_SECRET_ACCESS_KEY="wrong" + SECRET_KEY)
        _, p = self.build(url, "bad-secret", env=bad, expect=1)
        line = self.one_line_error(p, BUCKET)
        self.assertIn("403", line)
        self.assertFalse(os.path.exists(self.path("bad-secret")))
        self.assertFalse(os.path.exists(self.path("bad-secret.partial")))

        _, p = self.build(f"s3://{BUCKET}/no/such/prefix", "empty", expect=2)
        self.assertIn("no objects under this prefix", self.one_line_error(
            p, f"s3://{BUCKET}/no/such/prefix"))
        _, p = self.build("s3://no-such-bucket/x", "nobucket", expect=2)
        self.assertIn("404", self.one_line_error(p, "no-such-bucket"))
        _, p = self.build(f"s3://{BUCKET}/archives/missing.tar", "missing-tar", expect=2)
        self.one_line_error(p, "missing.tar")

    def test_keys_no_folder_could_hold_are_reported(self):
        # (Keys with empty, "." or ".." components are refused too, but the test server keeps
        # objects in files and normalizes such keys away: "h/./i.txt" is stored as "h/i.txt".)
        client = self.s3.client()
        for key, body in [("odd/ok.txt", b"ok\n"), ("odd/folder/", b""), ("odd/x", b"x"),
                          ("odd/x/y.txt", b"y")]:
            client.put_object(Bucket=BUCKET, Key=key, Body=body)
        client.close()
        store, p = self.build(f"s3://{BUCKET}/odd", "odd", expect=3)
        self.assertIn("NOT STORED (1 source entries", p.stdout)
        # s3rver lists x/y.txt before x (S3 would list x first: then x/y.txt is the refused one).
        self.assertRegex(p.stdout, r"(x: also a folder of other objects|x/y.txt: a folder on its "
                                   r"path is also an object) \(not stored\)")
        self.assertEqual(run([PCR, "cat", store, "ok.txt"]).stdout, b"ok\n")
        kept, body = ("x/y.txt", b"y") if "x: also a folder" in p.stdout else ("x", b"x")
        self.assertEqual(run([PCR, "cat", store, kept]).stdout, body)
        # The folder marker is an empty folder.
        self.assertIn("is a directory", run([PCR, "cat", store, "folder"], check=False,
                                            text=True).stderr)
        self.assertIn("2 files, 3 directories", p.stdout)  # the root, folder/ and x/ or h/

    def test_archive_at_an_http_url(self):
        with Nginx(self.www) as nginx:
            url = f"{nginx.url}/src.tar"
            store, p = self.build(url, "http-tar", "--progress", env=self.env)
            self.assert_identical(store, self.local_tar)
            self.assertIn(f"pcr build: listing {url}: ", p.stderr)
            self.assertEqual(self.built(store)["source"],
                             {"kind": "remote-archive", "location": url, "nested_archives": True})
            _, p = self.build(f"{nginx.url}/nothing.tar", "http-404", env=self.env, expect=2)
            self.assertIn("404", self.one_line_error(p, f"{nginx.url}/nothing.tar"))
            with FaultProxy(nginx.url) as proxy:
                # Truncated bodies now and then are retried: the same store.
                proxy.fault(fault="truncate", bytes=1000, count=2, path=r"/src\.tar")
                store, _ = self.build(f"{proxy.url}/src.tar", "proxy-tar", env=self.env)
                self.assert_identical(store, self.local_tar)
                # Every body truncated: one line, non-zero exit, nothing written.
                proxy.fault(fault="truncate", bytes=1000, path=r"/src\.tar")
                env = dict(self.env, PCRFS_REMOTE_TIMEOUT="3")
                _, p = self.build(f"{proxy.url}/src.tar", "cut-tar", env=env, expect=2)
                self.one_line_error(p, f"{proxy.url}/src.tar")
                self.assertFalse(os.path.exists(self.path("cut-tar")))

    def test_archive_at_an_s3_url(self):
        url = f"s3://{BUCKET}/archives/src.tar"
        store, _ = self.build(url, "s3-tar")
        self.assert_identical(store, self.local_tar)
        self.assertEqual(self.built(store)["source"]["kind"], "remote-archive")


if __name__ == "__main__":
    unittest.main()
