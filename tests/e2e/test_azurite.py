#!/usr/bin/python3
"""Azurite, the Azure Blob Storage test server (tests/remote/azurite.py), checked with real
requests on loopback: uploads and SAS tokens by Microsoft's Python SDK (Debian's python3-azure),
and pcrfs's own Azure code (remote/azure.h through azure_sign_test: the URLs, the Shared Key
signature, the SAS, the listing's parser) judged by Azurite, the requests sent with curl.
Needs tests/remote/install.sh: a missing package fails here, never skips.

Environment: AZURE_SIGN_TEST, the azure_sign_test binary (ctest sets it)."""

import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.join(os.path.dirname(HERE), "remote")
sys.path.insert(0, REMOTE)

from azurite import ACCOUNT, ACCOUNT_KEY, Azurite, sdk  # noqa: E402
from remote_servers import write_random_files  # noqa: E402

CONTAINER = "pcrfs-test"
PREFIX = "stores/one"
TOOL = os.environ.get("AZURE_SIGN_TEST", "")
CURL = "/usr/bin/curl"


def make_files(root):
    """A small tree of random files, including awkward names and an empty file."""
    files = {"a.bin": 100_000, "sub/b.bin": 3000, "sub/with space+plus.bin": 777,
             "one.bin": 1, "empty.bin": 0, "deep/er/c&d=e.bin": 65536 + 3,
             "unicode-\u00e9t\u00e9.bin": 10}
    return write_random_files(root, files, 17)


def curl(url, headers=()):
    """(status, {lower-case header: value}, body) of one GET with curl."""
    cmd = [CURL, "-s", "-S", "-i", "--noproxy", "*", url]
    for name, value in headers:
        cmd += ["-H", f"{name}: {value}"]
    out = subprocess.run(cmd, check=True, capture_output=True, timeout=60).stdout
    head, _, body = out.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


class AzuriteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not TOOL or not os.access(TOOL, os.X_OK):
            raise RuntimeError("AZURE_SIGN_TEST must name the azure_sign_test binary "
                               "(cmake --build BUILD --target azure_sign_test)")
        cls.tmp = tempfile.TemporaryDirectory(prefix="pcrfs-azurite-test-")
        cls.root = os.path.join(cls.tmp.name, "src")
        cls.files = make_files(cls.root)
        cls.server = Azurite().__enter__()
        cls.uploaded = cls.server.upload(cls.root, CONTAINER, PREFIX)

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)
        cls.tmp.cleanup()

    # ------------------------------------------------------------------ helpers

    def pcrfs(self, *args, env=None, options=()):
        """azure_sign_test OPTIONS ARGS with only the given AZURE_* variables: its JSON."""
        e = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_")}
        e.update(env or {})
        r = subprocess.run([TOOL, "--endpoint", self.server.endpoint, *options, *args],
                           capture_output=True, text=True, env=e, timeout=60)
        self.assertIn(r.returncode, (0, 1), r.stderr)
        out = json.loads(r.stdout)
        # Whatever pcrfs prints, a SAS's signature and the account key are not in it.
        self.assertNotIn(ACCOUNT_KEY, r.stdout + r.stderr)
        for v in (env or {}).values():
            if "sig=" in v:
                sig = v.split("sig=", 1)[1].split("&", 1)[0]
                shown = r.stdout.replace(out.get("url", ""), "")
                self.assertNotIn(sig, shown + r.stderr)
        return out

    def pcrfs_get(self, key, env, first=None, last=None, options=()):
        args = ["get", f"az://{CONTAINER}/{PREFIX}", key]
        if first is not None:
            args += [str(first), str(last)]
        req = self.pcrfs(*args, env=env, options=options)
        self.assertTrue(req["ok"], req)
        return curl(req["url"], req["headers"])

    def pcrfs_list_all(self, env, page=None):
        """Every page of the listing through pcrfs's URLs and parser: {key: (size, mtime)}."""
        out, marker, pages = {}, "", 0
        while True:
            args = ["list", f"az://{CONTAINER}/{PREFIX}", marker]
            if page:
                args.append(str(page))
            req = self.pcrfs(*args, env=env)
            self.assertTrue(req["ok"], req)
            status, _, body = curl(req["url"], req["headers"])
            self.assertEqual(status, 200, body[:500])
            r = subprocess.run([TOOL, "--endpoint", self.server.endpoint, "--no-sign", "parse",
                                f"az://{CONTAINER}/{PREFIX}"], input=body,
                               capture_output=True, timeout=60)
            parsed = json.loads(r.stdout)
            self.assertTrue(parsed["ok"], parsed)
            for key, size, mtime in parsed["entries"]:
                self.assertNotIn(key, out)
                out[key] = (size, mtime)
            pages += 1
            marker = parsed["next"]
            if not marker:
                return out, pages
            self.assertLess(pages, 100)

    def shared_key(self):
        return {"AZURE_STORAGE_KEY": ACCOUNT_KEY}

    # ------------------------------------------------------------------ the server and the SDK

    def test_sdk_upload_list_and_download(self):
        self.assertEqual(set(self.uploaded), {f"{PREFIX}/{k}" for k in self.files})
        with self.server.service().get_container_client(CONTAINER) as c:
            listed = {b.name: b.size for b in c.list_blobs(name_starts_with=PREFIX + "/")}
            self.assertEqual(listed, {f"{PREFIX}/{k}": len(v) for k, v in self.files.items()})
            for rel, data in self.files.items():
                self.assertEqual(c.download_blob(f"{PREFIX}/{rel}").readall(), data, rel)
            self.assertEqual(
                c.download_blob(f"{PREFIX}/a.bin", offset=1000, length=10).readall(),
                self.files["a.bin"][1000:1010])

    def test_unsigned_and_wrongly_signed_requests_are_refused(self):
        url = f"{self.server.endpoint}/{CONTAINER}/{PREFIX}/a.bin"
        status, hdrs, _ = curl(url)
        self.assertEqual(status, 403)
        # A signature by another key: Azurite checks Shared Key signatures.
        other = "cGNyZnMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZiE="
        status, hdrs, body = self.pcrfs_get("a.bin", {"AZURE_STORAGE_KEY": other})
        self.assertEqual(status, 403, body[:300])
        # Azure says AuthenticationFailed; Azurite 3.37 AuthorizationFailure.
        self.assertEqual(hdrs.get("x-ms-error-code"), "AuthorizationFailure")

    # ------------------------------------------------------------------ pcrfs's requests

    def test_shared_key_get_and_ranged_get(self):
        for rel, data in self.files.items():
            status, _, body = self.pcrfs_get(rel, self.shared_key())
            self.assertEqual(status, 200, f"{rel}: {body[:300]}")
            self.assertEqual(body, data, rel)
        data = self.files["a.bin"]
        for first, last in ((0, 0), (10, 19), (99_990, 99_999), (65_536, 99_999)):
            status, hdrs, body = self.pcrfs_get("a.bin", self.shared_key(), first, last)
            self.assertEqual(status, 206, body[:300])
            self.assertEqual(body, data[first:last + 1])
            self.assertEqual(hdrs["content-range"], f"bytes {first}-{last}/{len(data)}")
        # If-None-Match, signed: 304 while the ETag holds (how pcrfs revalidates its index).
        status, hdrs, _ = self.pcrfs_get("sub/b.bin", self.shared_key())
        etag = hdrs["etag"]
        for options, want in (((), 200), (("--if-none-match", etag), 304),
                              (("--if-none-match", '"0xOTHER"'), 200)):
            status, _, _ = self.pcrfs_get("sub/b.bin", self.shared_key(), options=options)
            self.assertEqual(status, want, options)
        status, hdrs, _ = self.pcrfs_get("no/such.bin", self.shared_key())
        self.assertEqual(status, 404)
        self.assertEqual(hdrs.get("x-ms-error-code"), "BlobNotFound")

    def test_connection_string(self):
        env = {"AZURE_STORAGE_CONNECTION_STRING": self.server.connection_string}
        req = self.pcrfs("get", f"az://{CONTAINER}/{PREFIX}", "sub/b.bin", env=env)
        self.assertEqual(req["auth"]["source"], "shared key")
        self.assertEqual(curl(req["url"], req["headers"])[2], self.files["sub/b.bin"])

    def test_listing_pages_through_pcrfs_parser(self):
        want = {k: len(v) for k, v in self.files.items()}
        for env in (self.shared_key(), {"AZURE_STORAGE_SAS_TOKEN": self.server.sas(CONTAINER)}):
            for page in (None, 2):
                got, pages = self.pcrfs_list_all(env, page)
                self.assertEqual({k: s for k, (s, _) in got.items()}, want)
                if page:
                    self.assertEqual(pages, (len(want) + page - 1) // page)
                now = time.time()
                for key, (_, mtime) in got.items():
                    self.assertLess(abs(mtime - now), 3600, key)

    def test_sas_get_and_list(self):
        token = self.server.sas(CONTAINER, permissions="rl")
        env = {"AZURE_STORAGE_SAS_TOKEN": token}
        req = self.pcrfs("get", f"az://{CONTAINER}/{PREFIX}", "a.bin", "5", "9", env=env)
        self.assertEqual(req["auth"]["source"], "sas")
        self.assertFalse(any(k == "Authorization" for k, _ in req["headers"]))
        status, _, body = curl(req["url"], req["headers"])
        self.assertEqual(status, 206, body[:300])
        self.assertEqual(body, self.files["a.bin"][5:10])
        # From a file, as -o sas_file reads it.
        with tempfile.NamedTemporaryFile("w", dir=self.tmp.name, delete=False) as f:
            f.write("?" + token + "\n")
        status, _, body = self.pcrfs_get("sub/with space+plus.bin", {},
                                         options=("--sas-file", f.name))
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(body, self.files["sub/with space+plus.bin"])

    def test_expired_sas_is_refused(self):
        start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)
        token = self.server.sas(CONTAINER, expiry=-3600, start=start)
        status, hdrs, body = self.pcrfs_get("a.bin", {"AZURE_STORAGE_SAS_TOKEN": token})
        self.assertEqual(status, 403, body[:300])
        # Azure answers an expired SAS with AuthenticationFailed ("Signature not valid in the
        # specified time frame"); Azurite 3.37 with AuthorizationFailure (its
        # BlobSASAuthenticator's time check). RefusalIsAuth takes both.
        self.assertEqual(hdrs.get("x-ms-error-code"), "AuthorizationFailure")
        self.assertIn(f"<Code>{hdrs.get('x-ms-error-code')}</Code>".encode(), body)
        # The SDK is refused the same way.
        blob = sdk()
        client = blob.BlobClient(account_url=self.server.endpoint, container_name=CONTAINER,
                                 blob_name=f"{PREFIX}/a.bin", credential=token)
        with client, self.assertRaises(Exception) as cm:
            client.download_blob().readall()
        self.assertEqual(getattr(cm.exception, "status_code", None), 403)
        # A read-only SAS cannot list.
        token = self.server.sas(CONTAINER, permissions="r")
        req = self.pcrfs("list", f"az://{CONTAINER}/{PREFIX}",
                         env={"AZURE_STORAGE_SAS_TOKEN": token})
        self.assertEqual(curl(req["url"], req["headers"])[0], 403)

    def test_anonymous_public_container(self):
        with self.server.create_container("public-data", public=True) as c:
            c.upload_blob("x/y.bin", b"public bytes", overwrite=True)
        r = subprocess.run([TOOL, "--endpoint", self.server.endpoint, "--no-sign", "get",
                            "az://public-data/x", "y.bin"], capture_output=True, text=True)
        req = json.loads(r.stdout)
        self.assertEqual(req["auth"], {"source": "none"})
        status, _, body = curl(req["url"], req["headers"])
        self.assertEqual((status, body), (200, b"public bytes"))

    def test_errors_never_show_secrets(self):
        token = self.server.sas(CONTAINER)
        sig = token.split("sig=", 1)[1].split("&", 1)[0]
        r = subprocess.run([TOOL, "get", f"az://{CONTAINER}?{token}", "a.bin"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no query", r.stdout)
        self.assertNotIn(sig, r.stdout + r.stderr)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_")}
        env["AZURE_STORAGE_CONNECTION_STRING"] = f"AccountName=Bad_Name;AccountKey={ACCOUNT_KEY}"
        r = subprocess.run([TOOL, "get", f"az://{CONTAINER}", "a.bin"], capture_output=True,
                           text=True, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("AccountName", r.stdout)
        self.assertNotIn(ACCOUNT_KEY, r.stdout + r.stderr)


class AzuriteCliTest(unittest.TestCase):
    def test_cli_ready_file_and_sigterm(self):
        with tempfile.TemporaryDirectory(prefix="pcrfs-azurite-cli-") as tmp:
            root = os.path.join(tmp, "src")
            files = make_files(root)
            ready = os.path.join(tmp, "ready.json")
            proc = subprocess.Popen([sys.executable, os.path.join(REMOTE, "azurite.py"), "blob",
                                     "--root", root, "--container", "cli", "--prefix", "p",
                                     "--ready-file", ready],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                deadline = time.monotonic() + 90
                while not os.path.exists(ready):
                    self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() else "")
                    self.assertLess(time.monotonic(), deadline, "no ready file")
                    time.sleep(0.1)
                with open(ready) as f:
                    info = json.load(f)
                self.assertEqual(info["account"], ACCOUNT)
                self.assertEqual(info["container"], "cli")
                blob = sdk()
                with blob.BlobServiceClient(
                        account_url=info["endpoint"],
                        credential={"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}) as svc:
                    data = svc.get_blob_client("cli", "p/sub/b.bin").download_blob().readall()
                self.assertEqual(data, files["sub/b.bin"])
            finally:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=30), 0)
                proc.stderr.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
