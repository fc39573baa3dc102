#!/usr/bin/python3
"""One origin for many nodes (issue 45 item 3): the shared cache tier of contrib/cache-tier
(nginx proxy_cache + slice, configured by pcr-cache-tier) between pcrfs mounts and an origin.
Two mounts read the same level in different shuffled orders at the same time through the
tier: their bytes equal a local mount's, and the origin sees each slice of a record once (the
fault proxy in front of the origin logs every request). A private S3 origin is read with the
tier's own credentials (the S3 test server checks every signature); nodes need the tier's
bearer token, which never reaches the origin; an Azure origin through the tier's SAS
(Azurite checks it). pcr-cache-tier refuses bad arguments with one line. Needs
tests/remote/install.sh (nginx, libnginx-mod-http-js, node_modules)."""

import os
import re
import subprocess
import sys
import threading
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, LoopbackServersCase, photo, read_levels, read_tree,  # noqa: E402
                     run, save_jpeg, sha)
from cache_tier import GENERATOR, CacheTier  # noqa: E402
from remote_servers import FaultProxy, Nginx, S3Server  # noqa: E402

SLICE = 64 << 10
LEVEL = 5


class CacheTierCase(LoopbackServersCase):
    tmp_prefix = "cache-tier-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        src = os.path.join(cls.tmp, "src")
        for i in range(48):
            save_jpeg(photo(480 + 16 * (i % 5), 360 + 8 * (i % 3), seed=300 + i),
                      os.path.join(src, f"c{i % 4}", f"img{i:03d}.jpg"), quality=92,
                      progressive=False)
        cls.www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(cls.www, "store")
        os.makedirs(cls.www)
        run([PCR, "build", src, cls.store, "--quiet", "--images-per-record", "12",
             "--quality-sample", "0"])
        cls.local = read_levels(cls.store, os.path.join(cls.tmp, "local-mnt"), [LEVEL])[LEVEL]
        cls.record_sizes = {
            "/store/records/" + n: os.path.getsize(os.path.join(cls.store, "records", n))
            for n in os.listdir(os.path.join(cls.store, "records"))}

    def header_file(self, token):
        path = os.path.join(self.tmp, f"header-{token[:8]}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"Authorization: Bearer {token}\n")
        return path

    def read_concurrently(self, tier, names, header_file=None):
        """Mounts the store through the tier once per name, each with its own cache folder (a
        node), and reads scan LEVEL in a different shuffled order in each, all at once."""
        mounts = [self.mount(tier.store_url("store"), name,
                             *tier.mount_options(header_file)).__enter__() for name in names]
        try:
            results = [None] * len(mounts)

            def read(i):
                results[i] = read_tree(os.path.join(mounts[i].mnt, f"scan{LEVEL}"), seed=i + 1)

            threads = [threading.Thread(target=read, args=(i,)) for i in range(len(mounts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for m in mounts:
                m.__exit__(None, None, None)
        for name, got in zip(names, results):
            self.assertIsNotNone(got, name)
            self.assertEqual(sorted(got), sorted(self.local), name)
            for rel, data in got.items():
                self.assertEqual(sha(data), sha(self.local[rel]), f"{name}: {rel}")

    def test_two_mounts_through_the_tier_fetch_each_slice_once(self):
        access_log = os.path.join(self.tmp, "tier-access.log")
        with Nginx(self.www) as origin, FaultProxy(origin.url) as proxy, \
                CacheTier(proxy.url, slice_size="64k") as tier:
            tier.keep_access_log = access_log
            self.read_concurrently(tier, ["node-a", "node-b"])
            reqs = [r for r in proxy.requests() if "/records/" in r["path"]]
            self.assertTrue(reqs)
            seen = set()
            for r in reqs:
                # Each origin request is one aligned slice (the last one of a record ends at
                # its end), answered in full, and no slice is asked for twice.
                self.assertEqual(r["status"], 206, r)
                first, last = (int(x) for x in r["range"].removeprefix("bytes=").split("-"))
                self.assertEqual(first % SLICE, 0, r)
                self.assertEqual(last - first + 1, SLICE, r)
                self.assertEqual(r["bytes"], min(SLICE, self.record_sizes[r["path"]] - first), r)
                self.assertNotIn((r["path"], first), seen, r)
                seen.add((r["path"], first))
            # Two nodes moved one copy of what they read: at most the records' bytes.
            self.assertLessEqual(sum(r["bytes"] for r in reqs), sum(self.record_sizes.values()))

            # A third node later: every slice it needs is in the tier; only the metadata
            # (passed through, uncached) goes to the origin.
            proxy.reset()
            self.read_concurrently(tier, ["node-c"])
            paths = sorted(r["path"] for r in proxy.requests())
            self.assertEqual(paths, ["/store/index.pcri", "/store/manifest.json"], paths)
        # The nodes mount with -o fetch_align=64k (CacheTier.mount_options): each of their
        # record GETs asks for whole slices, so no two of a node's GETs wait on one slice
        # (nginx's cache lock polls every 500 ms).
        with open(access_log) as f:
            node_gets = [m.groups() for m in re.finditer(
                r'"GET /[^/]+(/store/records/[^ ]+) HTTP/1.1" 206 \d+ range="bytes=(\d+)-(\d+)"',
                f.read())]
        self.assertTrue(node_gets)
        for path, first, last in node_gets:
            first, last = int(first), int(last)
            self.assertEqual(first % SLICE, 0, (path, first, last))
            self.assertTrue((last + 1) % SLICE == 0 or last + 1 == self.record_sizes[path],
                            (path, first, last))

    def test_private_s3_origin_signed_by_the_tier_only_for_token_holders(self):
        token = "tenant-a-0123456789abcdef"
        with S3Server(self.store, "data", "AKTIER", "tier-secret", prefix="stores/store") as s3, \
                CacheTier("s3://data/stores", endpoint=s3.endpoint, token=token,
                          slice_size="64k", env={"AWS_ACCESS_KEY_ID": "AKTIER",
                                                 "AWS_SECRET_ACCESS_KEY": "tier-secret"}) as tier:
            self.assertEqual(tier.store_url("store"), "s3://data/store")
            # Without the token (or with another) the tier answers 401 before its cache.
            refused = self.mount(tier.store_url("store"), "no-token", *tier.mount_options())
            with self.assertRaises(AssertionError) as cm:
                refused.__enter__()
            self.assertIn("401", str(cm.exception))
            self.read_concurrently(tier, ["node-a", "node-b"], self.header_file(token))
            stats = s3.front_stats()
            # Every origin request carried the tier's signature, none the nodes' token (the
            # front refuses any other Authorization), and nothing was refused.
            self.assertEqual(stats["refused"], {}, stats)
            self.assertEqual(set(stats["signed_by_key"]), {"AKTIER"}, stats)
            self.assertEqual(stats["anonymous"], 0, stats)
            # A cached slice is no exception: another token gets 401 for it.
            record = sorted(self.record_sizes)[0].removeprefix("/store/")
            for auth in ("Bearer tenant-b-0123456789abcdef", None):
                req = urllib.request.Request(f"{tier.endpoint}/data/store/{record}",
                                             headers={"Range": "bytes=0-99"})
                if auth:
                    req.add_header("Authorization", auth)
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen(req, timeout=30)
                self.assertEqual(cm.exception.code, 401)
                cm.exception.close()
            req = urllib.request.Request(f"{tier.endpoint}/data/store/{record}",
                                         headers={"Range": "bytes=0-99",
                                                  "Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                with open(os.path.join(self.store, record), "rb") as f:
                    self.assertEqual(r.read(), f.read(100))

    def test_azure_origin_through_the_tiers_sas(self):
        from azurite import Azurite
        with Azurite() as az:
            az.upload(self.store, "data", "stores/store")
            sas = az.sas("data", permissions="r")
            with CacheTier("az://data/stores", endpoint=az.endpoint, slice_size="64k",
                           env={"AZURE_STORAGE_SAS_TOKEN": sas}) as tier:
                self.assertEqual(tier.store_url("store"), "s3://pcr/store")
                self.read_concurrently(tier, ["node-a"])
            # Without the SAS Azurite refuses the tier: the SAS is what authorizes it.
            with CacheTier("az://data/stores", endpoint=az.endpoint, slice_size="64k") as tier:
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen(f"{tier.endpoint}/pcr/store/manifest.json",
                                           timeout=30)
                self.assertEqual(cm.exception.code, 403)
                cm.exception.close()

    def test_generator_refuses_bad_arguments_with_one_line(self):
        out = os.path.join(self.tmp, "gen")
        cases = [
            (["--origin", "ftp://x/y"], "--origin ftp://x/y: not an http(s)://, s3:// or az://"),
            (["--origin", "s3://Bad_Bucket"], "is not an S3 bucket name"),
            (["--origin", "http://h/p?Signature=x"], "a query or fragment is not supported"),
            (["--origin", "http://h/p", "--slice", "4k"], "--slice=4k: at least 64k"),
            (["--origin", "http://h/p", "--slice", "lots"], "--slice=lots: not a size"),
            (["--origin", "http://h/p", "--listen", "a b"], "--listen a b: not ADDRESS:PORT"),
            (["--origin", "az://data"], "give --account or --endpoint"),
            (["--origin", "http://h/p", "--token-file", os.path.join(self.tmp, "none")],
             "--token-file " + os.path.join(self.tmp, "none") + ": No such file"),
        ]
        for args, want in cases:
            p = subprocess.run([sys.executable, GENERATOR, *args, "--out", out, "--cache-dir",
                                os.path.join(self.tmp, "gen-cache")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, (args, p.stderr))
            self.assertIn(want, p.stderr, args)
            self.assertTrue(p.stderr.startswith("pcr-cache-tier: "), p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "nginx.conf")))


if __name__ == "__main__":
    unittest.main()
