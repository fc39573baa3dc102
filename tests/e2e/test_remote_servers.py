#!/usr/bin/python3
"""The remote-store test servers themselves (tests/remote): nginx, the S3 server with its SigV4
check, and the fault proxy, each checked with real requests on loopback. Needs
tests/remote/install.sh (setup.sh test runs it): a missing package fails here, never skips."""

import hashlib
import http.client
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.join(os.path.dirname(HERE), "remote")
sys.path.insert(0, REMOTE)

import boto3  # noqa: E402
import botocore.auth  # noqa: E402
import botocore.awsrequest  # noqa: E402
import botocore.credentials  # noqa: E402
import botocore.exceptions  # noqa: E402

from remote_servers import (FaultProxy, Nginx, S3Server, ServerError,  # noqa: E402
                            write_random_files)

AWS = "/usr/bin/aws"  # Debian's awscli: how users upload a store
ACCESS_KEY = "AKIDPCRFSTEST"
SECRET_KEY = "pcrfs/test+secret"
TOKEN = "session-token-of-the-test"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def make_files(root):
    """A small tree of random files, including awkward names and an empty file."""
    files = {"a.bin": 100_000, "sub/b.bin": 3000, "sub/with space+plus.bin": 777,
             "one.bin": 1, "empty.bin": 0, "deep/er/c.bin": 65536 + 3}
    return write_random_files(root, files, 13)


def get(url, headers=None, method="GET", context=None):
    """(status, headers, body) of one request; HTTP errors are answers too."""
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60, context=context) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def raw_get(url, headers=None):
    """One GET on a fresh connection: (status, headers, body read so far, exception or None)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", parts.path, headers=headers or {})
        resp = conn.getresponse()
    except (ConnectionError, http.client.HTTPException) as e:
        conn.close()
        return None, None, b"", e
    try:
        return resp.status, resp.headers, resp.read(), None
    except http.client.IncompleteRead as e:
        return resp.status, resp.headers, e.partial, e
    except ConnectionError as e:
        return resp.status, resp.headers, b"", e
    finally:
        conn.close()


class Files:
    @classmethod
    def make_root(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="remote-servers-test-")
        cls.root = os.path.join(cls.tmp.name, "root")
        cls.files = make_files(cls.root)


class NginxTest(unittest.TestCase, Files):
    @classmethod
    def setUpClass(cls):
        cls.make_root()
        cls.nginx = Nginx(cls.root).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.nginx.__exit__(None, None, None)
        cls.tmp.cleanup()

    def test_whole_files_and_missing(self):
        for rel, data in self.files.items():
            status, _, body = get(f"{self.nginx.url}/{urllib.parse.quote(rel)}")
            self.assertEqual((status, body), (200, data), rel)
        self.assertEqual(get(self.nginx.url + "/nope.bin")[0], 404)

    def test_single_ranges(self):
        data = self.files["a.bin"]
        for rng, start, end in [("0-0", 0, 0), ("10-19", 10, 19), ("99990-", 99990, 99999),
                                ("-7", 99993, 99999), ("99999-200000", 99999, 99999)]:
            status, headers, body = get(self.nginx.url + "/a.bin", {"Range": f"bytes={rng}"})
            self.assertEqual(status, 206, rng)
            self.assertEqual(headers["Content-Range"], f"bytes {start}-{end}/100000", rng)
            self.assertEqual(body, data[start:end + 1], rng)
        status, _, _ = get(self.nginx.url + "/a.bin", {"Range": "bytes=100000-"})
        self.assertEqual(status, 416)

    def test_etag_and_if_none_match(self):
        status, headers, _ = get(self.nginx.url + "/sub/b.bin")
        etag = headers["ETag"]
        self.assertTrue(etag and etag.startswith('"'), etag)
        status, headers, body = get(self.nginx.url + "/sub/b.bin", {"If-None-Match": etag})
        self.assertEqual((status, body), (304, b""))
        status, _, body = get(self.nginx.url + "/sub/b.bin", {"If-None-Match": '"other"'})
        self.assertEqual((status, body), (200, self.files["sub/b.bin"]))

    def test_keep_alive_serves_many_requests_on_one_connection(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.nginx.port, timeout=60)
        data = self.files["a.bin"]
        for i in range(50):
            conn.request("GET", "/a.bin", headers={"Range": f"bytes={i * 100}-{i * 100 + 99}"})
            r = conn.getresponse()
            self.assertEqual((r.status, r.read()), (206, data[i * 100:i * 100 + 100]))
            sock = conn.sock
            self.assertIsNotNone(sock, "nginx closed the keep-alive connection")
        conn.close()

    def test_tls_with_its_certificate_and_bearer_token(self):
        with Nginx(self.root, tls=True, bearer_token="tok123") as n:
            self.assertTrue(n.url.startswith("https://127.0.0.1:"))
            ctx = ssl.create_default_context(cafile=n.ca_file)
            self.assertEqual(get(n.url + "/one.bin", context=ctx)[0], 401)
            status, _, body = get(n.url + "/one.bin", {"Authorization": "Bearer tok123"},
                                  context=ctx)
            self.assertEqual((status, body), (200, self.files["one.bin"]))
            with self.assertRaises(urllib.error.URLError) as cm:
                get(n.url + "/one.bin", context=ssl.create_default_context())
            self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))

    def test_a_missing_root_is_a_clear_error(self):
        with self.assertRaises(ServerError) as cm:
            Nginx(os.path.join(self.root, "nope"))
        self.assertIn("not a directory", str(cm.exception))


def s3_error(callable_):
    try:
        callable_()
    except botocore.exceptions.ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]
    raise AssertionError("the request succeeded")


def signed_headers(method, url, secret=SECRET_KEY, headers=None, token=None, region="us-east-1"):
    """botocore's own SigV4 signer (what AWS's SDKs send), for hand-made requests."""
    creds = botocore.credentials.Credentials(ACCESS_KEY, secret, token)
    req = botocore.awsrequest.AWSRequest(method=method, url=url, headers=dict(headers or {}))
    botocore.auth.S3SigV4Auth(creds, "s3", region).add_auth(req)
    return dict(req.headers.items())


def client_of(test, server, **kw):
    """server.client(**kw), closed when the test ends."""
    client = server.client(**kw)
    test.addCleanup(client.close)
    return client


class S3Test(unittest.TestCase, Files):
    @classmethod
    def setUpClass(cls):
        cls.make_root()
        cls.s3 = S3Server(cls.root, "pcrfs-test", ACCESS_KEY, SECRET_KEY, prefix="stores/one",
                          session_token=TOKEN).__enter__()
        cls.client = cls.s3.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.s3.__exit__(None, None, None)
        cls.tmp.cleanup()

    def test_uploaded_objects_equal_the_files(self):
        listed = self.client.list_objects_v2(Bucket="pcrfs-test", Prefix="stores/one/")
        keys = {o["Key"]: o["Size"] for o in listed["Contents"]}
        self.assertEqual(keys, {f"stores/one/{rel}": len(d) for rel, d in self.files.items()})
        for rel, data in self.files.items():
            obj = self.client.get_object(Bucket="pcrfs-test", Key=f"stores/one/{rel}")
            self.assertEqual(obj["Body"].read(), data, rel)
            self.assertEqual(obj["ETag"], '"' + hashlib.md5(data).hexdigest() + '"', rel)

    def test_aws_s3_sync_uploads_a_folder_with_a_multipart_object(self):
        self.assertTrue(os.path.exists(AWS), f"{AWS} missing: run tests/remote/install.sh")
        big = os.path.join(self.tmp.name, "synced")
        os.makedirs(os.path.join(big, "r"))
        data = random.Random(5).randbytes(9 * 1024 * 1024 + 17)  # over the 8 MiB part size
        with open(os.path.join(big, "r", "big.bin"), "wb") as f:
            f.write(data)
        with open(os.path.join(big, "manifest.json"), "w") as f:
            f.write('{"x": 1}')
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_SESSION_TOKEN=TOKEN, AWS_DEFAULT_REGION="us-east-1",
                   AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
        p = subprocess.run([AWS, "s3", "sync", big, "s3://pcrfs-test/synced",
                            "--endpoint-url", self.s3.endpoint, "--only-show-errors"],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        obj = self.client.get_object(Bucket="pcrfs-test", Key="synced/r/big.bin")
        self.assertEqual(obj["Body"].read(), data)
        got = self.client.get_object(Bucket="pcrfs-test", Key="synced/manifest.json")
        self.assertEqual(got["Body"].read(), b'{"x": 1}')

    def test_upload_part_copy_and_short_parts_like_s3(self):
        """s3rver lacks UploadPartCopy and lets a short part through: the front does both as S3
        does (tests/remote/README.md)."""
        c, b = self.client, "pcrfs-test"
        data = random.Random(7).randbytes(6 * 1024 * 1024 + 3)
        c.put_object(Bucket=b, Key="copy/src.bin", Body=data)
        mib5 = 5 * 1024 * 1024
        before = self.s3.front_stats()
        up = c.create_multipart_upload(Bucket=b, Key="copy/dst.bin")["UploadId"]
        etags = []
        for n, (first, last) in enumerate([(0, mib5 - 1), (mib5, len(data) - 1)], 1):
            r = c.upload_part_copy(Bucket=b, Key="copy/dst.bin", UploadId=up, PartNumber=n,
                                   CopySource={"Bucket": b, "Key": "copy/src.bin"},
                                   CopySourceRange=f"bytes={first}-{last}")
            etags.append(r["CopyPartResult"]["ETag"])
            self.assertEqual(etags[-1].strip('"'),
                             hashlib.md5(data[first:last + 1]).hexdigest())
        with self.assertRaises(botocore.exceptions.ClientError) as cm:
            c.upload_part_copy(Bucket=b, Key="copy/dst.bin", UploadId=up, PartNumber=3,
                               CopySource={"Bucket": b, "Key": "copy/src.bin"},
                               CopySourceRange=f"bytes=0-{len(data)}")
        self.assertEqual(cm.exception.response["Error"]["Code"], "InvalidRange")
        c.complete_multipart_upload(Bucket=b, Key="copy/dst.bin", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]})
        self.assertEqual(c.get_object(Bucket=b, Key="copy/dst.bin")["Body"].read(), data)
        after = self.s3.front_stats()
        self.assertEqual(after["part_copies"] - before["part_copies"], 2)
        self.assertEqual(after["part_copy_bytes"] - before["part_copy_bytes"], len(data))
        # A part under 5 MiB that is not the last: CompleteMultipartUpload refuses it.
        up = c.create_multipart_upload(Bucket=b, Key="copy/short.bin")["UploadId"]
        parts = [{"PartNumber": n, "ETag": c.upload_part(
            Bucket=b, Key="copy/short.bin", UploadId=up, PartNumber=n, Body=b"x" * 1024)["ETag"]}
            for n in (1, 2)]
        with self.assertRaises(botocore.exceptions.ClientError) as cm:
            c.complete_multipart_upload(Bucket=b, Key="copy/short.bin", UploadId=up,
                                        MultipartUpload={"Parts": parts})
        self.assertEqual(cm.exception.response["Error"]["Code"], "EntityTooSmall")
        # Alone, the short part is the last one: accepted.
        c.complete_multipart_upload(Bucket=b, Key="copy/short.bin", UploadId=up,
                                    MultipartUpload={"Parts": parts[:1]})
        self.assertEqual(c.get_object(Bucket=b, Key="copy/short.bin")["Body"].read(), b"x" * 1024)

    def test_signed_ranged_gets_with_a_session_token_are_exact(self):
        data = self.files["a.bin"]
        before = self.s3.front_stats()["signed_ok"]
        # s3rver alone gets 0-0, suffix and multi-range requests wrong: the front fixes them.
        for rng, start, end, status in [("0-0", 0, 0, 206), ("10-19", 10, 19, 206),
                                        ("99990-", 99990, 99999, 206), ("-7", 99993, 99999, 206),
                                        ("-200000", 0, 99999, 206), ("5-5", 5, 5, 206),
                                        ("0-1,5-6", 0, 99999, 200)]:
            obj = self.client.get_object(Bucket="pcrfs-test", Key="stores/one/a.bin",
                                         Range=f"bytes={rng}")
            self.assertEqual(obj["ResponseMetadata"]["HTTPStatusCode"], status, rng)
            if status == 206:
                self.assertEqual(obj["ContentRange"], f"bytes {start}-{end}/100000", rng)
            self.assertEqual(obj["Body"].read(), data[start:end + 1], rng)
        self.assertEqual(self.s3.front_stats()["signed_ok"], before + 7)
        self.assertEqual(s3_error(lambda: self.client.get_object(
            Bucket="pcrfs-test", Key="stores/one/a.bin", Range="bytes=100000-")),
            (416, "InvalidRange"))
        self.assertEqual(s3_error(lambda: self.client.get_object(
            Bucket="pcrfs-test", Key="stores/one/nope")), (404, "NoSuchKey"))

    def test_listings_with_pages_and_delimiters(self):
        # What rclone, s3fs and `aws s3 ls` ask (pcrfs itself never lists). s3rver alone fails
        # on pages (DES continuation tokens) and on prefixes with no object directly in them.
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket="pcrfs-test", Prefix="stores/one/", PaginationConfig={"PageSize": 2})
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        self.assertEqual(keys, sorted(f"stores/one/{rel}" for rel in self.files))
        for list_call in (self.client.list_objects_v2, self.client.list_objects):
            for prefix, contents, prefixes in [
                    ("stores/", [], ["one/"]),
                    ("stores/one/", ["a.bin", "empty.bin", "one.bin"], ["deep/", "sub/"]),
                    ("stores/one/deep/", [], ["er/"])]:
                listed = list_call(Bucket="pcrfs-test", Prefix=prefix, Delimiter="/")
                self.assertEqual([o["Key"] for o in listed.get("Contents", [])],
                                 [prefix + c for c in contents], prefix)
                self.assertEqual([p["Prefix"] for p in listed.get("CommonPrefixes", [])],
                                 [prefix + p for p in prefixes], prefix)

    def test_etag_and_if_none_match(self):
        etag = self.client.head_object(Bucket="pcrfs-test", Key="stores/one/sub/b.bin")["ETag"]
        self.assertEqual(s3_error(lambda: self.client.get_object(
            Bucket="pcrfs-test", Key="stores/one/sub/b.bin", IfNoneMatch=etag)), (304, "304"))

    def test_wrong_secret_unknown_key_and_wrong_token_are_refused(self):
        key = "stores/one/a.bin"
        wrong = client_of(self, self.s3, secret_key="not-the-secret")
        self.assertEqual(s3_error(lambda: wrong.get_object(Bucket="pcrfs-test", Key=key)),
                         (403, "SignatureDoesNotMatch"))
        unknown = client_of(self, self.s3, access_key="AKIDUNKNOWN")
        self.assertEqual(s3_error(lambda: unknown.get_object(Bucket="pcrfs-test", Key=key)),
                         (403, "InvalidAccessKeyId"))
        token = client_of(self, self.s3, session_token="another-token")
        self.assertEqual(s3_error(lambda: token.get_object(Bucket="pcrfs-test", Key=key)),
                         (403, "InvalidToken"))
        url = f"{self.s3.endpoint}/pcrfs-test/{key}"
        status, _, body = get(url)
        self.assertEqual(status, 403)
        self.assertIn(b"<Code>AccessDenied</Code>", body)

    def test_the_error_body_shows_the_canonical_request_like_s3(self):
        url = f"{self.s3.endpoint}/pcrfs-test/stores/one/a.bin"
        headers = signed_headers("GET", url, secret="wrong", headers={"Range": "bytes=0-9"},
                                 token=TOKEN)
        status, _, body = get(url, headers)
        self.assertEqual(status, 403)
        self.assertIn(b"<Code>SignatureDoesNotMatch</Code>", body)
        self.assertIn(b"<CanonicalRequest>GET\n/pcrfs-test/stores/one/a.bin\n", body)
        self.assertIn(b"range:bytes=0-9", body)
        self.assertNotIn(SECRET_KEY.encode(), body)

    def test_every_signed_part_is_checked(self):
        url = f"{self.s3.endpoint}/pcrfs-test/stores/one/a.bin"
        headers = signed_headers("GET", url, headers={"Range": "bytes=0-9"}, token=TOKEN)
        self.assertEqual(get(url, headers)[0], 206)
        # A changed signed header, method, path, query or date breaks the signature.
        self.assertEqual(get(url, dict(headers, Range="bytes=0-10"))[0], 403)
        self.assertEqual(get(url, headers, method="HEAD")[0], 403)
        self.assertEqual(get(url.replace("a.bin", "one.bin"), headers)[0], 403)
        self.assertEqual(get(url + "?versionId=1", headers)[0], 403)
        date = headers["X-Amz-Date"]
        later = date[:-3] + ("%02dZ" % ((int(date[-3:-1]) + 1) % 60))
        self.assertEqual(get(url, dict(headers, **{"X-Amz-Date": later}))[0], 403)
        # S3 requires x-amz-content-sha256 and a credential scope in its own region.
        no_sha = {k: v for k, v in headers.items() if k.lower() != "x-amz-content-sha256"}
        status, _, body = get(url, no_sha)
        self.assertEqual(status, 400)
        self.assertIn(b"x-amz-content-sha256", body)
        other = signed_headers("GET", url, token=TOKEN, region="eu-west-1")
        status, _, body = get(url, other)
        self.assertEqual(status, 400)
        self.assertIn(b"AuthorizationHeaderMalformed", body)

    def test_query_strings_and_odd_keys_are_signed_like_aws(self):
        # ListObjectsV2 has a query; a key with a space and a '+' has an encoded path.
        listed = self.client.list_objects_v2(Bucket="pcrfs-test", Prefix="stores/one/sub/")
        self.assertEqual([o["Key"] for o in listed["Contents"]],
                         ["stores/one/sub/b.bin", "stores/one/sub/with space+plus.bin"])
        obj = self.client.get_object(Bucket="pcrfs-test",
                                     Key="stores/one/sub/with space+plus.bin")
        self.assertEqual(obj["Body"].read(), self.files["sub/with space+plus.bin"])

    def curl(self, url, secret, *args):
        p = subprocess.run(["curl", "-sS", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                            f"{ACCESS_KEY}:{secret}", "-H", f"x-amz-security-token: {TOKEN}",
                            *args, "-w", "\n%{http_code}", url],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        body, _, code = p.stdout.rpartition(b"\n")
        return int(code), body

    def test_curls_own_sigv4_is_accepted(self):
        # libcurl 7.88's CURLOPT_AWS_SIGV4, what pcrfs's transport is: a second, independent
        # signer. It signs host, x-amz-date and the x-amz-* headers it is given.
        base = f"{self.s3.endpoint}/pcrfs-test/stores/one/"
        unsigned = ["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        code, body = self.curl(base + "a.bin", SECRET_KEY, *unsigned, "-r", "0-9")
        self.assertEqual((code, body), (206, self.files["a.bin"][:10]))
        code, body = self.curl(base + "sub/with%20space%2Bplus.bin", SECRET_KEY, *unsigned)
        self.assertEqual((code, body), (200, self.files["sub/with space+plus.bin"]))
        code, body = self.curl(base + "a.bin", "wrong", *unsigned)
        self.assertEqual(code, 403)
        self.assertIn(b"<Code>SignatureDoesNotMatch</Code>", body)
        code, body = self.curl(base + "a.bin", SECRET_KEY)  # curl 7.88 adds no content hash
        self.assertEqual(code, 400)
        self.assertIn(b"x-amz-content-sha256", body)

    def test_virtual_host_style(self):
        port = urllib.parse.urlsplit(self.s3.endpoint).port
        vurl = f"http://pcrfs-test.localhost:{port}/stores/one/sub/b.bin"
        headers = signed_headers("GET", vurl, headers={"Range": "bytes=1-2"}, token=TOKEN)
        headers["Host"] = f"pcrfs-test.localhost:{port}"
        # Sent to 127.0.0.1 with the virtual host's Host header (no DNS for *.localhost needed).
        status, _, body = get(f"{self.s3.endpoint}/stores/one/sub/b.bin", headers)
        self.assertEqual((status, body), (206, self.files["sub/b.bin"][1:3]))

    def test_awss_published_get_with_range_example_verifies(self):
        # AWS's Signature V4 documentation, "Example: GET Object" (examplebucket, test.txt,
        # bytes=0-9, 2013-05-24, AWS's example key): the front must accept that exact signature,
        # and refuse it with one hex digit changed.
        secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        signature = "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        text = self.tmp.name + "/example"
        os.makedirs(text)
        with open(os.path.join(text, "test.txt"), "wb") as f:
            f.write(b"Welcome to Amazon S3.")
        headers = {
            "Host": "examplebucket.s3.amazonaws.com", "Range": "bytes=0-9",
            "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": "20130524T000000Z",
            "Authorization": "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
                             "us-east-1/s3/aws4_request,SignedHeaders=host;range;"
                             "x-amz-content-sha256;x-amz-date,Signature=" + signature}
        with S3Server(text, "examplebucket", "AKIAIOSFODNN7EXAMPLE", secret,
                      check_clock=False) as s3:
            status, _, body = get(s3.endpoint + "/test.txt", headers)
            self.assertEqual((status, body), (206, b"Welcome to"))
            bad = dict(headers, Authorization=headers["Authorization"][:-1] + "2")
            self.assertEqual(get(s3.endpoint + "/test.txt", bad)[0], 403)

    def test_anonymous_gets_only_when_allowed(self):
        with S3Server(self.root, "open", ACCESS_KEY, SECRET_KEY, allow_anonymous=True) as s3:
            status, headers, body = get(f"{s3.endpoint}/open/a.bin", {"Range": "bytes=0-0"})
            self.assertEqual((status, headers["Content-Range"], body),
                             (206, "bytes 0-0/100000", self.files["a.bin"][:1]))
            status, _, body = get(f"{s3.endpoint}/open/x", method="PUT")
            self.assertEqual(status, 403)
            self.assertEqual(s3.front_stats()["anonymous"], 1)


class ProxyTest(unittest.TestCase, Files):
    @classmethod
    def setUpClass(cls):
        cls.make_root()
        cls.nginx = Nginx(cls.root).__enter__()
        cls.proxy = FaultProxy(cls.nginx.url).__enter__()
        cls.data = cls.files["a.bin"]

    @classmethod
    def tearDownClass(cls):
        cls.proxy.__exit__(None, None, None)
        cls.nginx.__exit__(None, None, None)
        cls.tmp.cleanup()

    def setUp(self):
        self.proxy.reset()
        self.url = self.proxy.url + "/a.bin"

    def test_passes_everything_through_on_kept_alive_connections(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.proxy.server.server_address[1],
                                          timeout=60)
        etag = None
        for i in range(20):
            conn.request("GET", "/a.bin", headers={"Range": f"bytes={i}-{i + 999}"})
            r = conn.getresponse()
            self.assertEqual((r.status, r.read()), (206, self.data[i:i + 1000]))
            self.assertEqual(r.getheader("Content-Range"), f"bytes {i}-{i + 999}/100000")
            etag = r.getheader("ETag")
        conn.request("GET", "/a.bin", headers={"If-None-Match": etag})
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (304, b""))
        for path in ("/empty.bin", "/one.bin"):  # an empty body leaves the connections usable
            conn.request("GET", path)
            r = conn.getresponse()
            self.assertEqual((r.status, r.read()), (200, self.files[path[1:]]))
        conn.close()
        stats = self.proxy.stats()
        self.assertEqual(stats["requests"], 23)
        self.assertEqual(stats["upstream_requests"], 23)
        self.assertEqual(stats["statuses"], {"206": 20, "304": 1, "200": 2})
        self.assertEqual(stats["bytes_to_client"], 20 * 1000 + 1)
        self.assertEqual(stats["faults"], {})
        log = self.proxy.requests()
        self.assertEqual([e["range"] for e in log[:2]], ["bytes=0-999", "bytes=1-1000"])

    def test_latency_is_added_before_the_response(self):
        self.proxy.fault(fault="latency", ms=300, count=1)
        t0 = time.monotonic()
        self.assertEqual(get(self.url)[2], self.data)
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertEqual(self.proxy.stats()["faults"], {"latency": 1})

    def test_injected_statuses_for_the_next_n_requests(self):
        for code in (503, 429, 500, 404, 403):
            self.proxy.fault(fault="status", status=code, retry_after="2", count=2)
            for _ in range(2):
                status, headers, body = get(self.url)
                self.assertEqual(status, code)
                self.assertEqual(headers["Retry-After"], "2")
                self.assertIn(b"<Error><Code>", body)
            self.assertEqual(get(self.url)[:3:2], (200, self.data))
        stats = self.proxy.stats()
        self.assertEqual(stats["faults"], {"status": 10})
        self.assertEqual(stats["upstream_requests"], 5)  # injected answers never reach nginx
        self.assertEqual(get(self.url)[0], 200)

    def test_reset_before_any_response(self):
        self.proxy.fault(fault="reset", count=1)
        status, _, _, err = raw_get(self.url)
        self.assertIsNone(status)
        self.assertIsInstance(err, (ConnectionResetError, http.client.RemoteDisconnected))
        self.assertEqual(get(self.url)[2], self.data)
        self.assertEqual(self.proxy.stats()["statuses"], {"reset": 1, "200": 1})

    def test_reset_mid_body(self):
        self.proxy.fault(fault="reset", after_bytes=5000, count=1)
        status, headers, body, err = raw_get(self.url)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Length"], "100000")
        self.assertIsNotNone(err)
        self.assertLessEqual(len(body), 5000)
        self.assertEqual(self.proxy.requests()[0]["bytes"], 5000)

    def test_truncated_body(self):
        self.proxy.fault(fault="truncate", bytes=1234, count=1)
        status, headers, body, err = raw_get(self.url, {"Range": "bytes=100-50099"})
        self.assertEqual((status, headers["Content-Length"]), (206, "50000"))
        self.assertIsInstance(err, http.client.IncompleteRead)
        self.assertEqual(body, self.data[100:1334])
        self.assertEqual(raw_get(self.url, {"Range": "bytes=100-50099"})[2], self.data[100:50100])

    def test_a_stall_mid_body(self):
        self.proxy.fault(fault="stall", after_bytes=4096, ms=2000, count=1)
        parts = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        conn.request("GET", "/a.bin")
        r = conn.getresponse()
        t0 = time.monotonic()
        head = r.read(4096)
        # The first 4096 bytes came, the rest waits: the proxy has sent exactly those.
        self.assertEqual(self.proxy.requests()[0]["bytes"], 4096)
        rest = r.read()
        elapsed = time.monotonic() - t0
        conn.close()
        self.assertEqual(head + rest, self.data)
        self.assertGreaterEqual(elapsed, 1.5)
        self.assertEqual(self.proxy.stats()["faults"], {"stall": 1})

    def test_a_200_with_the_whole_object_instead_of_a_206(self):
        self.proxy.fault(fault="full", count=1)
        status, headers, body = get(self.url, {"Range": "bytes=10-19"})
        self.assertEqual((status, body), (200, self.data))
        self.assertIsNone(headers["Content-Range"])
        self.assertEqual(get(self.url, {"Range": "bytes=10-19"})[:3:2], (206, self.data[10:20]))

    def test_a_changed_object(self):
        _, headers, _ = get(self.url, {"Range": "bytes=10-19"})
        etag = headers["ETag"]
        self.proxy.fault(fault="change", what=["total"], count=1)
        status, headers, body = get(self.url, {"Range": "bytes=10-19"})
        self.assertEqual((status, headers["Content-Range"], headers["ETag"], body),
                         (206, "bytes 10-19/100001", etag, self.data[10:20]))
        self.proxy.fault(fault="change", what=["bytes"], count=1)
        status, headers, body = get(self.url, {"Range": "bytes=10-19"})
        self.assertEqual(headers["Content-Range"], "bytes 10-19/100000")
        self.assertEqual(body, bytes([self.data[10] ^ 0xFF]) + self.data[11:20])
        # A changed ETag: a conditional GET is answered 200 with the new tag, not 304.
        self.proxy.fault(fault="change", what=["etag"], count=1)
        status, headers, body = get(self.url, {"If-None-Match": etag})
        self.assertEqual((status, body), (200, self.data))
        self.assertNotEqual(headers["ETag"], etag)
        self.assertEqual(get(self.url, {"If-None-Match": etag})[0], 304)

    def test_seeded_probability_is_reproducible(self):
        def pattern():
            self.proxy.reset()
            self.proxy.fault(fault="status", status=500, probability=0.3, seed=42)
            return [get(self.url, {"Range": "bytes=0-0"})[0] for _ in range(40)]
        first = pattern()
        self.assertEqual(first, pattern())
        self.assertTrue(0 < first.count(500) < 40, first)
        self.assertEqual(set(first), {206, 500})

    def test_path_regex_and_method_select_requests(self):
        self.proxy.fault(fault="status", status=404, path=r"^/sub/")
        self.proxy.fault(fault="status", status=403, method="HEAD")
        self.assertEqual(get(self.proxy.url + "/sub/b.bin")[0], 404)
        self.assertEqual(get(self.proxy.url + "/deep/er/c.bin")[0], 200)
        self.assertEqual(get(self.url, method="HEAD")[0], 403)
        rules = self.proxy.control("GET", "/__fault")["rules"]
        self.assertEqual([r["fired"] for r in rules], [1, 1])

    def test_bad_rules_are_refused_and_reset_clears(self):
        for rule in ({"fault": "explode"}, {"fault": "status", "status": 1000},
                     {"fault": "latency", "ms": 1, "colour": "red"}, [1],
                     {"fault": "reset", "probability": "often"},
                     {"fault": "reset", "probability": 2}, {"fault": "latency", "ms": -1},
                     {"fault": "status", "path": "("}):
            req = urllib.request.Request(self.proxy.url + "/__fault",
                                         data=json.dumps(rule).encode(), method="POST")
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req)
            self.assertEqual(cm.exception.code, 400)
        self.proxy.fault(fault="status", status=503)
        self.assertEqual(get(self.url)[0], 503)
        self.proxy.reset()
        self.assertEqual(get(self.url)[0], 200)
        self.assertEqual(self.proxy.stats()["requests"], 1)

    def test_signatures_still_verify_through_the_proxy(self):
        with S3Server(self.root, "bk", ACCESS_KEY, SECRET_KEY, prefix="p") as s3, \
                FaultProxy(s3.endpoint) as proxy:
            client = client_of(self, s3, endpoint=proxy.url)
            obj = client.get_object(Bucket="bk", Key="p/a.bin", Range="bytes=5-9")
            self.assertEqual(obj["Body"].read(), self.data[5:10])
            # The proxy removes the signed Range header: the front still checks the signature.
            proxy.fault(fault="full", count=1)
            obj = client.get_object(Bucket="bk", Key="p/a.bin", Range="bytes=5-9")
            self.assertEqual(obj["ResponseMetadata"]["HTTPStatusCode"], 200)
            self.assertEqual(obj["Body"].read(), self.data)
            proxy.fault(fault="status", status=503, count=1)
            self.assertEqual(s3_error(lambda: client.get_object(Bucket="bk", Key="p/a.bin")),
                             (503, "SlowDown"))
            # Uploads pass too (Expect: 100-continue, a multipart upload of 9 MiB).
            big = random.Random(9).randbytes(9 * 1024 * 1024)
            client.put_object(Bucket="bk", Key="p/put.bin", Body=big)
            self.assertEqual(client.get_object(Bucket="bk", Key="p/put.bin")["Body"].read(), big)
            wrong = client_of(self, s3, endpoint=proxy.url, secret_key="wrong")
            self.assertEqual(s3_error(lambda: wrong.get_object(Bucket="bk", Key="p/a.bin")),
                             (403, "SignatureDoesNotMatch"))
            # The uploads of the root, 2 GETs, 1 PUT and 1 GET.
            self.assertEqual(s3.front_stats()["signed_ok"], len(self.files) + 4)

    def test_a_dead_upstream_gives_502(self):
        port = socket.socket()
        port.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        with FaultProxy(f"http://127.0.0.1:{port.getsockname()[1]}") as proxy:
            status, _, body = get(proxy.url + "/a.bin")
            self.assertEqual(status, 502)
            self.assertIn(b"fault proxy: upstream 127.0.0.1:", body)
            self.assertEqual(proxy.stats()["statuses"], {"502": 1})
        port.close()


class CliTest(unittest.TestCase, Files):
    def setUp(self):
        self.make_root()

    def tearDown(self):
        self.tmp.cleanup()

    def serve(self, *args, env=None):
        ready = os.path.join(self.tmp.name, f"ready-{args[0]}.json")
        log = os.path.join(self.tmp.name, f"{args[0]}.log")
        with open(log, "wb") as err:
            proc = subprocess.Popen([sys.executable, os.path.join(REMOTE, "remote_servers.py"),
                                     *args, "--ready-file", ready], stdout=subprocess.DEVNULL,
                                    stderr=err, env=env)
        proc.log = log
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                with open(log) as f:
                    self.fail(f"{args}: no ready file; stderr {f.read()!r}")
            time.sleep(0.05)
        with open(ready) as f:
            return proc, json.load(f)

    def stop(self, proc):
        proc.send_signal(signal.SIGTERM)
        with open(proc.log) as f:
            self.assertEqual(proc.wait(timeout=30), 0, f.read())

    def test_nginx_s3_and_proxy_subcommands(self):
        nginx, info = self.serve("nginx", "--root", self.root)
        self.assertEqual(set(info), {"url", "pid"})
        proxy, pinfo = self.serve("proxy", "--upstream", info["url"])
        status, _, body = get(pinfo["url"] + "/a.bin", {"Range": "bytes=3-5"})
        self.assertEqual((status, body), (206, self.files["a.bin"][3:6]))
        self.assertEqual(json.loads(get(pinfo["url"] + "/__stats")[2])["requests"], 1)
        self.stop(proxy)
        self.stop(nginx)
        with self.assertRaises(ProcessLookupError):
            os.kill(info["pid"], 0)  # nginx's master is gone with it
        env = dict(os.environ, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        s3, sinfo = self.serve("s3", "--root", self.root, "--bucket", "cli", "--prefix", "x/y",
                               "--access-key", ACCESS_KEY, env=env)
        self.assertEqual(set(sinfo), {"endpoint", "bucket", "region", "pid"})
        self.assertEqual((sinfo["bucket"], sinfo["region"]), ("cli", "us-east-1"))
        client = boto3.client("s3", endpoint_url=sinfo["endpoint"], region_name="us-east-1",
                              aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
        obj = client.get_object(Bucket="cli", Key="x/y/sub/b.bin", Range="bytes=0-0")
        self.assertEqual(obj["Body"].read(), self.files["sub/b.bin"][:1])
        client.close()
        self.stop(s3)
        with self.assertRaises(ProcessLookupError):
            os.kill(sinfo["pid"], 0)

    def test_a_bad_upstream_is_a_one_line_error(self):
        p = subprocess.run([sys.executable, os.path.join(REMOTE, "remote_servers.py"), "proxy",
                            "--upstream", "ftp://x"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("upstream 'ftp://x'", p.stderr)


class NetnsTest(unittest.TestCase):
    """tests/bench/netns.py, the benchmarks' capped loopback (its rate: --self-check, a bench)."""

    NETNS = os.path.join(os.path.dirname(HERE), "bench", "netns.py")

    def test_runs_the_command_in_a_new_namespace_behind_the_cap(self):
        script = "ip -o link show lo; tc class show dev lo; ip -o link show | wc -l; exit 7"
        p = subprocess.run([sys.executable, self.NETNS, "--rate-mbit", "50", "--", "sh", "-c",
                            script], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 7, p.stderr)
        self.assertIn("state UNKNOWN", p.stdout)  # lo is up
        self.assertIn("qdisc htb", p.stdout)
        self.assertIn("rate 50Mbit ceil 50Mbit burst 256Kb", p.stdout)
        self.assertEqual(p.stdout.strip().splitlines()[-1], "1")  # lo alone: a new namespace

    def test_a_burst_below_lo_mtu_is_refused(self):
        p = subprocess.run([sys.executable, self.NETNS, "--rate-mbit", "50", "--burst-kib", "16",
                            "--", "true"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--burst-kib 16: at least 64", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
