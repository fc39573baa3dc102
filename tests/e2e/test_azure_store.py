#!/usr/bin/python3
"""Azure Blob Storage stores end to end (issue 30 items 5 and 6): a store built by `pcr build`,
uploaded to Azurite (tests/remote/azurite.py) by Microsoft's Python SDK (Debian's python3-azure),
mounted with `pcrfs az://CONTAINER/PREFIX MNT -o endpoint=...` and read with `pcr
cat/extract/inspect/verify az://...`, every file at every level byte for byte equal to `pcr` on the
local store; Shared Key (AZURE_STORAGE_KEY, AZURE_STORAGE_CONNECTION_STRING) and SAS
(AZURE_STORAGE_SAS_TOKEN, the https:// URL's query, -o sas_file rotated while 4 readers read);
`pcr build az://...` equal to the build of the same local folder; the errors users see.

The https://ACCOUNT.blob.core.windows.net/... form is reached in a private mount namespace
(unshare -m) whose /etc/hosts maps devstoreaccount1.blob.core.windows.net to 127.0.0.1: Azurite
takes the account from such a host name (its "production-style" URLs). Needs root (FUSE mounts,
unshare) and tests/remote/install.sh: a missing package fails here, never skips."""

import calendar
import datetime
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, LoopbackServersCase, Mount, pcr_extract, photo,  # noqa: E402
                     read_tree, run, save_jpeg, sha, store_bytes)
from azurite import ACCOUNT, ACCOUNT_KEY, Azurite  # noqa: E402

LEVELS = tuple(range(1, 11))
STORE_CONTAINER = "pcrfs-stores"
STORE_PREFIX = "datasets/one"
SRC_CONTAINER = "pcrfs-src"
SRC_PREFIX = "data/train"
AZ_URL = f"az://{STORE_CONTAINER}/{STORE_PREFIX}"
BLOB_HOST = f"{ACCOUNT}.blob.core.windows.net"
BUILD_OPTS = ["--images-per-record", "4", "--quality-sample", "5"]
# Seconds: each rotated SAS expires this long after it is made, and is replaced 5 s before
# that (the signer looks at -o sas_file once a second): 5 s apart.
SAS_LIFETIME = 10
ROTATIONS = 5
WRONG_KEY = "cGNyZnMtdGVzdC1rZXktMDEyMzQ1Njc4OWFiY2RlZiE="


def sig_of(token):
    return token.split("sig=", 1)[1].split("&", 1)[0]


def make_photos(root, n, seed, size=(96, 80)):
    for i in range(n):
        save_jpeg(photo(size[0] + 8 * (i % 5), size[1] + 4 * (i % 3), seed=seed + i),
                  os.path.join(root, f"class{i % 3}", f"img{i:03d}.jpg"),
                  quality=88, progressive=bool(i % 2))


def ls_sizes(root):
    """{relative path: size} of every file under root as `ls -lnR` shows it."""
    out = run(["ls", "-lnR", "--time-style=+%s", root], text=True).stdout
    sizes, folder = {}, root
    for line in out.splitlines():
        if line.endswith(":") and line.startswith("/"):
            folder = line[:-1]
        elif line.startswith("-"):
            f = line.split(None, 6)
            sizes[os.path.relpath(os.path.join(folder, f[6]), root)] = int(f[4])
    return sizes


def drop_file_cache(path):
    """Drops the kernel's cached pages of one file, so the next read reaches the daemon."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def ns_main(argv):
    """Run inside `unshare -m` after /etc/hosts was bind-mounted (see BlobHostNamespace): mounts
    argv URL at MNT with OPTIONS (JSON list) and prints JSON: {"levels": {k: {rel: sha}},
    "xattr": ..., "log": stderr of pcrfs}."""
    url, mnt, options, levels = argv[0], argv[1], json.loads(argv[2]), json.loads(argv[3])
    out = {"levels": {}}
    with Mount(url, mnt, *options, timeout=60) as m:
        for k in levels:
            got = read_tree(os.path.join(mnt, f"scan{k}"))
            out["levels"][str(k)] = {rel: sha(data) for rel, data in got.items()}
        out["xattr"] = os.getxattr(mnt, "user.pcrfs.remote").decode()
        with open("/proc/self/mounts") as f:
            out["mounts"] = [line for line in f if mnt in line]
        out["log"] = m.log()
    print(json.dumps(out))
    return 0


class AzureStoreBase(LoopbackServersCase):
    tmp_prefix = "azure-store-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.az = cls.serve(Azurite())
        cls.key_env = dict(cls.env, AZURE_STORAGE_ACCOUNT=ACCOUNT, AZURE_STORAGE_KEY=ACCOUNT_KEY)
        cls.endpoint_opt = "endpoint=" + cls.az.endpoint

    # ------------------------------------------------------------------ helpers

    def az_mount(self, name, *options, env, url=AZ_URL):
        return self.mount(url, name, self.endpoint_opt, *options, env=env)

    def assert_every_level(self, mnt, levels=LEVELS, prefix="scan{k}"):
        for k in levels:
            root = os.path.join(mnt, prefix.format(k=k))
            got = read_tree(root)
            self.assertEqual(sorted(got), sorted(self.local[k]), f"level {k}")
            for rel, data in got.items():
                self.assertEqual(sha(data), sha(self.local[k][rel]), f"level {k}: {rel}")
            self.assertEqual(ls_sizes(root), {rel: len(d) for rel, d in self.local[k].items()},
                             f"ls -l of level {k}")

    def remote_xattr(self, mnt):
        text = os.getxattr(mnt, "user.pcrfs.remote").decode()
        self.assert_no_secret(text)
        return text, json.loads(text)

    def assert_no_secret(self, text, *tokens):
        self.assertNotIn(ACCOUNT_KEY, text)
        self.assertNotIn("sig=", text)
        self.assertNotIn("AccountKey=", text)
        for t in tokens:
            self.assertNotIn(sig_of(t), text)

    def fails(self, args, env, expect=1):
        """Runs a command expected to fail: its one-line stderr."""
        p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, expect, p.stdout + p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assert_no_secret(p.stdout + p.stderr)
        return lines[0]

    def mount_fails(self, url, options, env):
        mnt = os.path.join(self.tmp, "mnt-fail")
        os.makedirs(mnt, exist_ok=True)
        return self.fails([PCRFS, url, mnt, "-f", "-o", ",".join(options)], env)


class AzureStoreTest(AzureStoreBase):
    """Mounts, pcr az://, pcr build az://, the errors users see."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        make_photos(cls.src, 24, seed=500)
        with open(os.path.join(cls.src, "notes.txt"), "w") as f:
            f.write("not a jpeg\n")
        cls.store = os.path.join(cls.tmp, "store")
        run([PCR, "build", cls.src, cls.store, "--quiet", "--images-per-record", "6"])
        cls.records = sorted(os.listdir(os.path.join(cls.store, "records")))
        # The reference: what `pcr` gives of the local store at each level.
        cls.local = {k: pcr_extract(cls.store, k) for k in LEVELS}
        cls.az.upload(cls.store, STORE_CONTAINER, STORE_PREFIX)

    # ------------------------------------------------------------------ mounts

    def test_mount_shared_key_every_level(self):
        with self.az_mount("key", env=self.key_env) as m:
            self.assert_every_level(m.mnt)
            text, stats = self.remote_xattr(m.mnt)
            self.assertIn('"shared key"', text)
            self.assertIn("AZURE_STORAGE_KEY", text)
            self.assertGreater(stats["bytes_served"], 0)
            self.assertEqual(stats["client"]["failed"], 0, stats)
            log = m.log()
        self.assert_no_secret(log)

    def test_mount_connection_string_fixed_level(self):
        env = dict(self.env, AZURE_STORAGE_CONNECTION_STRING=self.az.connection_string)
        # The connection string's BlobEndpoint and AccountName: no -o endpoint, no account.
        for k in (3, 10):
            with self.mount(AZ_URL, f"cs{k}", f"scans={k}", env=env) as m:
                self.assert_every_level(m.mnt, levels=(k,), prefix="")
                text, _ = self.remote_xattr(m.mnt)
                self.assertIn("AZURE_STORAGE_CONNECTION_STRING", text)
                self.assertIn('"shared key"', text)

    def test_mount_sas_from_environment(self):
        token = self.az.sas(STORE_CONTAINER, permissions="rl")
        env = dict(self.env, AZURE_STORAGE_ACCOUNT=ACCOUNT, AZURE_STORAGE_SAS_TOKEN=token)
        with self.az_mount("sas-env", env=env) as m:
            self.assert_every_level(m.mnt)
            text, stats = self.remote_xattr(m.mnt)
            self.assert_no_secret(text, token)
            self.assertIn('"sas"', text)
            self.assertIn("AZURE_STORAGE_SAS_TOKEN", text)
            self.assertEqual(stats["client"]["failed"], 0, stats)
            log = m.log()
        self.assert_no_secret(log, token)
        # A read-only SAS (no list permission) mounts too: a mount never lists.
        env["AZURE_STORAGE_SAS_TOKEN"] = self.az.sas(STORE_CONTAINER, permissions="r")
        with self.az_mount("sas-env-r", "scans=7", env=env) as m:
            self.assert_every_level(m.mnt, levels=(7,), prefix="")

    def blob_host_namespace(self):
        """A hosts file naming the blob host: bind-mounted over /etc/hosts inside unshare -m."""
        hosts = os.path.join(self.tmp, "hosts")
        with open("/etc/hosts") as f, open(hosts, "w") as g:
            g.write(f.read())
            g.write(f"\n127.0.0.1 {BLOB_HOST}\n")
        return ["unshare", "-m", "--propagation", "private", "sh", "-c",
                f'mount --bind "{hosts}" /etc/hosts && exec "$@"', "ns"]

    def test_https_url_with_sas_query(self):
        """https://ACCOUNT.blob.core.windows.net/C/P?SAS (here http:// and Azurite's port: the
        same parser and signer; Azurite takes the account from the host name)."""
        token = self.az.sas(STORE_CONTAINER, permissions="rl")
        port = self.az.port
        url = f"http://{BLOB_HOST}:{port}/{STORE_CONTAINER}/{STORE_PREFIX}?{token}"
        mnt = os.path.join(self.tmp, "mnt-https-sas")
        options = ["-o", f"cache_dir={self.cache('https-sas')}"]
        p = subprocess.run(self.blob_host_namespace() + [
            sys.executable, os.path.abspath(__file__), "--in-namespace", url, mnt,
            json.dumps(options), json.dumps(list(LEVELS))],
            env=dict(self.env, PCRFS=PCRFS, PYTHONDONTWRITEBYTECODE="1"),
            capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        out = json.loads(p.stdout)
        for k in LEVELS:
            want = {rel: sha(d) for rel, d in self.local[k].items()}
            self.assertEqual(out["levels"][str(k)], want, f"level {k}")
        self.assertIn('"URL query"', out["xattr"])
        for text in (out["xattr"], out["log"], p.stderr, "".join(out["mounts"])):
            self.assert_no_secret(text, token)
        # mount(8) shows the URL without its query.
        self.assertEqual(len(out["mounts"]), 1, out["mounts"])
        self.assertTrue(out["mounts"][0].startswith(
            f"http://{BLOB_HOST}:{port}/{STORE_CONTAINER}/{STORE_PREFIX} "), out["mounts"][0])
        # The cache folder's name does not depend on the SAS: the same without a query.
        for name in ("manifest.json", "index.pcri"):
            with open(os.path.join(self.cache("https-sas"), name), "rb") as f:
                with open(os.path.join(self.store, name), "rb") as g:
                    self.assertEqual(f.read(), g.read())
        # pcr over the same URL, with the Shared Key instead of a SAS (no query).
        rel = sorted(self.local[4])[5]
        env = dict(self.env, AZURE_STORAGE_KEY=ACCOUNT_KEY,
                   PCRFS_CACHE_DIR=self.cache("https-key"))
        plain = f"http://{BLOB_HOST}:{port}/{STORE_CONTAINER}/{STORE_PREFIX}"
        p = run(self.blob_host_namespace() + [PCR, "cat", plain, rel, "--scans", "4"], env=env)
        self.assertEqual(p.stdout, self.local[4][rel])

    # ------------------------------------------------------------------ pcr az://

    def test_pcr_cat_extract_inspect_verify(self):
        env = dict(self.key_env, AZURE_STORAGE_CONNECTION_STRING=self.az.connection_string)
        del env["AZURE_STORAGE_KEY"]  # the connection string's key
        env["PCRFS_CACHE_DIR"] = self.cache("pcr")
        for rel in sorted(self.local[5])[:5]:
            for k in (1, 6, 10):
                got = run([PCR, "cat", AZ_URL, rel, "--scans", str(k)], env=env).stdout
                self.assertEqual(got, self.local[k][rel], f"{rel} at {k}")
        for k in LEVELS:
            self.assertEqual(pcr_extract(AZ_URL, k, env=env), self.local[k], f"level {k}")
        local = json.loads(run([PCR, "inspect", self.store, "--json"]).stdout)
        remote = json.loads(run([PCR, "inspect", AZ_URL, "--json"], env=env).stdout)
        # Every field but the store's name and "built": a remote store's provenance.json is not
        # fetched (mount-tools/cmd_inspect.cc), so it is null there.
        # "store" is the folder the metadata was fetched into (PCRFS_CACHE_DIR), not the URL.
        self.assertEqual(remote.pop("store"), env["PCRFS_CACHE_DIR"])
        self.assertIsNone(remote.pop("built"))
        del local["store"], local["built"]
        self.assertEqual(remote, local)
        # The text report: the same but for the store line and the "built by" block.
        def report(text):
            lines, skipping = [], False
            for line in text.splitlines():
                if line.startswith("built by"):
                    skipping = True
                elif skipping and not line.strip():
                    skipping = False
                if not skipping and not line.startswith("store "):
                    lines.append(line)
            return lines
        remote_text = run([PCR, "inspect", AZ_URL], env=env).stdout.decode()
        self.assertIn("built by         unknown (no provenance.json", remote_text)
        self.assertEqual(report(remote_text),
                         report(run([PCR, "inspect", self.store]).stdout.decode()))
        p = run([PCR, "verify", AZ_URL, "--source", self.src], env=env, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(str(len(self.records)), p.stdout.decode())
        want = run([PCR, "verify", self.store, "--source", self.src]).stdout.decode()
        self.assertEqual(p.stdout.decode().replace(AZ_URL, self.store), want)
        self.assert_no_secret((p.stdout + p.stderr).decode())

    def test_pcr_verify_reports_a_damaged_blob(self):
        damaged = os.path.join(self.tmp, "damaged")
        shutil.copytree(self.store, damaged)
        victim = os.path.join(damaged, "records", self.records[2])
        with open(victim, "r+b") as f:
            f.seek(os.path.getsize(victim) - 200)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x55]))
        self.az.upload(damaged, STORE_CONTAINER, "damaged/store")
        env = dict(self.key_env, PCRFS_CACHE_DIR=self.cache("verify-damaged"),
                   AZURE_STORAGE_CONNECTION_STRING=self.az.connection_string)
        p = run([PCR, "verify", f"az://{STORE_CONTAINER}/damaged/store"], env=env, check=False)
        local = run([PCR, "verify", damaged], check=False)
        self.assertEqual((p.returncode, local.returncode), (1, 1), p.stderr)
        out = (p.stdout + p.stderr).decode()
        self.assertIn("damaged", out)
        self.assertIn(self.records[2], out)

    # ------------------------------------------------------------------ pcr build az://

    def test_build_from_az_prefix_equals_local_build(self):
        src = os.path.join(self.tmp, "build-src")
        make_photos(src, 17, seed=900, size=(64, 48))
        os.makedirs(os.path.join(src, "class1", "deeper"))
        save_jpeg(photo(50, 40, seed=77), os.path.join(src, "class1", "deeper", "x y&z.jpg"),
                  quality=80)
        with open(os.path.join(src, "labels.csv"), "w") as f:
            f.write("img,label\n")
        open(os.path.join(src, "class2", "empty.txt"), "w").close()
        uploaded = self.az.upload(src, SRC_CONTAINER, SRC_PREFIX)
        # A decoy beside the prefix: "data/train2/..." is not under "data/train/".
        with self.az.create_container(SRC_CONTAINER) as c:
            c.upload_blob(SRC_PREFIX + "2/decoy.jpg", b"not this", overwrite=True)
            # The local tree gets what the listing says: each file its blob's Last-Modified,
            # mode 0644; each folder 0755 and the newest mtime below it.
            modified = {b.name[len(SRC_PREFIX) + 1:]: calendar.timegm(
                b.last_modified.utctimetuple())
                for b in c.list_blobs(name_starts_with=SRC_PREFIX + "/")}
        self.assertEqual(len(modified), len(uploaded))
        newest = {}
        for dirpath, dirnames, filenames in os.walk(src, topdown=False):
            best = 0
            for name in filenames:
                path = os.path.join(dirpath, name)
                t = modified[os.path.relpath(path, src)]
                os.chmod(path, 0o644)
                os.utime(path, (t, t))
                best = max(best, t)
            for name in dirnames:
                best = max(best, newest[os.path.join(dirpath, name)])
            newest[dirpath] = best
            os.chmod(dirpath, 0o755)
            os.utime(dirpath, (best, best))
        local = os.path.join(self.tmp, "built-local")
        run([PCR, "build", src, local, "--quiet", *BUILD_OPTS])
        url = f"az://{SRC_CONTAINER}/{SRC_PREFIX}"
        # pcr takes an emulator's endpoint from the connection string's BlobEndpoint; the SAS
        # in AZURE_STORAGE_SAS_TOKEN comes before its key.
        cs = self.az.connection_string
        for page, auth in (("3", {}), ("7", {"AZURE_STORAGE_SAS_TOKEN":
                                             self.az.sas(SRC_CONTAINER, permissions="rl")})):
            with self.subTest(page=page):
                store = os.path.join(self.tmp, f"built-az-{page}")
                # Small pages: the listing follows several NextMarkers.
                env = dict(self.env, AZURE_STORAGE_CONNECTION_STRING=cs, PCRFS_S3_LIST_PAGE=page,
                           **auth)
                p = run([PCR, "build", url, store, "--progress", *BUILD_OPTS], env=env,
                        check=False, text=True, timeout=600)
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                self.assertIn(f"pcr build: listing {url}: {len(uploaded)} files", p.stderr)
                self.assert_no_secret(p.stdout + p.stderr)
                a, b = store_bytes(local), store_bytes(store)
                self.assertEqual(sorted(a), sorted(b))
                for k in a:
                    self.assertEqual(a[k], b[k], f"{k}: the az:// build differs")
                built = json.loads(run([PCR, "inspect", store, "--json"]).stdout)["built"]
                self.assertEqual(built["source"]["location"], url)

    # ------------------------------------------------------------------ errors

    def test_errors_are_one_line_without_secrets(self):
        url = AZ_URL
        # A wrong key: Azurite refuses the signature.
        env = dict(self.env, AZURE_STORAGE_ACCOUNT=ACCOUNT, AZURE_STORAGE_KEY=WRONG_KEY)
        line = self.mount_fails(url, [f"cache_dir={self.cache('bad-key')}", self.endpoint_opt],
                                env)
        self.assertNotIn(WRONG_KEY, line)
        self.assertIn("403 Forbidden (AuthorizationFailure)", line)
        self.assertIn(f"/{STORE_CONTAINER}/{STORE_PREFIX}/manifest.json", line)
        env = dict(self.env, PCRFS_CACHE_DIR=self.cache("bad-key-pcr"),
                   AZURE_STORAGE_CONNECTION_STRING=f"AccountName={ACCOUNT};AccountKey={WRONG_KEY};"
                                                   f"BlobEndpoint={self.az.endpoint}")
        line = self.fails([PCR, "cat", url, "notes.txt"], env, expect=2)
        self.assertNotIn(WRONG_KEY, line)
        self.assertIn("403", line)
        # A missing container.
        line = self.mount_fails("az://no-such-container/x", [
            f"cache_dir={self.cache('no-container')}", self.endpoint_opt], self.key_env)
        self.assertIn("no-such-container", line)
        self.assertIn("no such container (404 ContainerNotFound)", line)
        build_env = dict(self.env, AZURE_STORAGE_CONNECTION_STRING=self.az.connection_string)
        self.az.create_container(SRC_CONTAINER).close()  # whichever test runs first
        line = self.fails([PCR, "build", "az://no-such-container/x",
                           os.path.join(self.tmp, "never-built")], build_env, expect=2)
        self.assertIn("no-such-container", line)
        self.assertIn("404 Not Found (ContainerNotFound)", line)
        line = self.fails([PCR, "build", f"az://{SRC_CONTAINER}/no/such/prefix",
                           os.path.join(self.tmp, "never-built")], build_env, expect=2)
        self.assertIn(f"az://{SRC_CONTAINER}/no/such/prefix: no objects under this prefix", line)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never-built")))
        # A missing prefix in a container that exists: not a store.
        line = self.mount_fails(f"az://{STORE_CONTAINER}/nothing/here", [
            f"cache_dir={self.cache('no-prefix')}", self.endpoint_opt], self.key_env)
        self.assertIn("not a pcrfs store", line)
        # az:// without an account: the options that give one are named.
        env = dict(self.env, AZURE_STORAGE_KEY=ACCOUNT_KEY)
        line = self.mount_fails(url, [f"cache_dir={self.cache('no-account')}"], env)
        self.assertIn("-o account", line)
        self.assertIn("AZURE_STORAGE_ACCOUNT", line)
        line = self.fails([PCR, "cat", url, "notes.txt"], env, expect=2)
        self.assertIn("-o account", line)
        # A SAS in an az:// URL: refused, the signature not shown.
        token = self.az.sas(STORE_CONTAINER)
        line = self.mount_fails(f"{url}?{token}", [self.endpoint_opt], self.key_env)
        self.assertNotIn(sig_of(token), line)
        self.assertIn("az:// URLs take no query", line)
        # An expired SAS at mount: one line with Azurite's refusal.
        start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=2)
        old = self.az.sas(STORE_CONTAINER, expiry=-3600, start=start)
        env = dict(self.env, AZURE_STORAGE_ACCOUNT=ACCOUNT, AZURE_STORAGE_SAS_TOKEN=old)
        line = self.mount_fails(url, [f"cache_dir={self.cache('expired')}", self.endpoint_opt],
                                env)
        self.assertNotIn(sig_of(old), line)
        self.assertIn("403", line)


class AzureSasTest(AzureStoreBase):
    """SAS tokens that expire while readers read (timed: ctest runs it alone)."""

    # ------------------------------------------------------------------ a rotated SAS

    soak = None

    def soak_store(self):
        """A store of several MiB (64 photos 480x360) uploaded as datasets/soak, built once:
        (local store, {level: pcr extract}, levels)."""
        cls = type(self)
        if cls.soak is None:
            src = os.path.join(self.tmp, "soak-src")
            make_photos(src, 64, seed=1300, size=(480, 360))
            store = os.path.join(self.tmp, "soak-store")
            run([PCR, "build", src, store, "--quiet", "--images-per-record", "4",
                 "--quality-sample", "0"])
            records_bytes = sum(os.path.getsize(os.path.join(store, "records", n))
                                for n in os.listdir(os.path.join(store, "records")))
            self.assertGreater(records_bytes, 3 * 2**20)
            levels = (6, 8, 9, 10)
            self.az.upload(store, STORE_CONTAINER, "datasets/soak")
            cls.soak = (store, {k: pcr_extract(store, k) for k in levels}, levels)
        return cls.soak

    def test_rotated_sas_file_while_four_readers_read(self):
        """4 readers read cold epochs through a mount whose cache (1 MiB) is a fraction of the
        store (several MiB), so reads keep reaching Azurite, while the SAS in -o sas_file is
        replaced ROTATIONS times, each a few seconds before the one in use expires."""
        store, local, levels = self.soak_store()
        records_bytes = sum(os.path.getsize(os.path.join(store, "records", n))
                            for n in os.listdir(os.path.join(store, "records")))
        sas_file = os.path.join(self.tmp, "sas.token")

        def write_sas():
            token = self.az.sas(STORE_CONTAINER, expiry=SAS_LIFETIME, permissions="r")
            tmp = sas_file + ".new"
            with open(tmp, "w") as f:
                f.write(token + "\n")
            os.replace(tmp, sas_file)  # as a sidecar or a Kubernetes secret update does
            return token, time.monotonic()

        tokens = [write_sas()]
        env = dict(self.env, AZURE_STORAGE_ACCOUNT=ACCOUNT)
        failures, reads, errors, epochs = [], [0], [], [0] * 4
        done = threading.Event()
        lock = threading.Lock()
        started = time.monotonic()
        with self.az_mount("sas-file", f"sas_file={sas_file}", "remote_cache=1M", env=env,
                           url=f"az://{STORE_CONTAINER}/datasets/soak") as m:
            def reader(n):
                rng = random.Random(n)
                try:
                    while not done.is_set() or epochs[n] < 4:
                        k = levels[(n + epochs[n]) % len(levels)]
                        files = sorted(local[k])
                        rng.shuffle(files)
                        for rel in files:
                            path = os.path.join(m.mnt, f"scan{k}", rel)
                            try:
                                drop_file_cache(path)  # a cold read: the daemon serves it
                                with open(path, "rb") as f:
                                    data = f.read()
                            except OSError as e:
                                with lock:
                                    failures.append((k, rel, str(e)))
                                continue
                            with lock:
                                reads[0] += 1
                                if data != local[k][rel]:
                                    failures.append((k, rel, "different bytes"))
                        epochs[n] += 1
                except BaseException as e:  # noqa: B902: reported by the main thread
                    errors.append(repr(e))

            threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            try:
                # A fresh SAS a few seconds before the current one expires, ROTATIONS times;
                # then reads go on until the one before the last has expired too.
                for _ in range(ROTATIONS):
                    time.sleep(max(0.0, tokens[-1][1] + SAS_LIFETIME - 5 - time.monotonic()))
                    tokens.append(write_sas())
                time.sleep(max(0.0, tokens[-2][1] + SAS_LIFETIME + 2 - time.monotonic()))
                before_end = json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]
            finally:
                done.set()
                for t in threads:
                    t.join(timeout=300)
            self.assertEqual(errors, [])
            self.assertEqual(failures, [], f"{len(failures)} failed of {reads[0]} reads")
            text, stats = self.remote_xattr(m.mnt)
            self.assert_no_secret(text, *(t for t, _ in tokens))
            client = stats["client"]
            self.assertEqual(client["failed"], 0, stats)
            self.assertIn("option sas_file", text)
            self.assertIn(sas_file, text)
            # The readers kept reaching Azurite through the whole run (a cache that held the
            # store would need no SAS after the first epoch).
            self.assertGreater(client["requests"], 8 * len(os.listdir(
                os.path.join(store, "records"))), stats)
            self.assertGreater(client["cache"]["miss_bytes"], 2 * records_bytes, stats)
            self.assertGreater(before_end["requests"], 0)
            # Every token was read: the signer's generation counts the file's tokens.
            self.assertGreaterEqual(stats["client"]["auth"]["generation"], ROTATIONS + 1, text)
            log = m.log()
        elapsed = time.monotonic() - started
        print(f"\nrotated SAS: {reads[0]} reads, epochs {epochs}, {client['requests']} requests, "
              f"retries {client['retries']}, {elapsed:.0f} s", file=sys.stderr)
        # Reads went on for several lifetimes of a SAS, and past the expiry of all but the last.
        self.assertGreater(elapsed, ROTATIONS * (SAS_LIFETIME - 5) + 5)
        self.assertGreaterEqual(min(epochs), 4, epochs)
        self.assert_no_secret(log, *(t for t, _ in tokens))
        # The first token has long expired: Azurite refuses it (the daemon did not use it).
        status = subprocess.run(
            ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--noproxy", "*",
             f"{self.az.endpoint}/{STORE_CONTAINER}/datasets/soak/manifest.json?{tokens[0][0]}"],
            capture_output=True, text=True).stdout
        self.assertEqual(status, "403")

    def test_expired_sas_refused_then_the_file_reread(self):
        """The 403 path: the SAS in the file expires, a new one is written, and the next
        request (within the second in which the signer does not look at the file again) goes
        out with the expired one: Azurite answers 403 AuthorizationFailure, the signer re-reads
        the file at once, and the request is retried with the new SAS. The read succeeds."""
        store, local, _ = self.soak_store()
        files = sorted(local[10])
        sas_file = os.path.join(self.tmp, "sas-expiring.token")
        env = dict(self.env, AZURE_STORAGE_ACCOUNT=ACCOUNT)

        def write(token):
            with open(sas_file + ".new", "w") as f:
                f.write(token + "\n")
            os.replace(sas_file + ".new", sas_file)

        def read(rel):
            path = os.path.join(m.mnt, "scan10", rel)
            drop_file_cache(path)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), local[10][rel], rel)

        def stats():
            return json.loads(os.getxattr(m.mnt, "user.pcrfs.remote"))["client"]

        auth_retries = []
        for attempt in range(3):
            # The SAS expires at a whole second E (its se=); the last look at the file is a
            # read at E - 0.6 s; the new SAS is written just after E and read at once.
            expiry = int(time.time()) + 6
            write(self.az.sas(STORE_CONTAINER, permissions="r",
                              expiry=datetime.datetime.fromtimestamp(
                                  expiry, datetime.timezone.utc)))
            with self.az_mount(f"sas-expiring-{attempt}", f"sas_file={sas_file}",
                               "remote_cache=1M", env=env,
                               url=f"az://{STORE_CONTAINER}/datasets/soak") as m:
                time.sleep(max(0.0, expiry - 0.6 - time.time()))
                read(files[0])
                while stats()["in_flight"] and time.time() < expiry:
                    time.sleep(0.02)
                time.sleep(max(0.0, expiry + 0.05 - time.time()))
                write(self.az.sas(STORE_CONTAINER, permissions="r", expiry=120))
                read(files[len(files) // 2])
                for rel in files[-8:]:
                    read(rel)
                client = stats()
                self.assertEqual(client["failed"], 0, client)
                self.assertEqual(client["auth"]["generation"], 2, client)
                auth_retries.append(client["retries"]["auth"])
            if auth_retries[-1] > 0:
                break
        print(f"\nexpired SAS: auth retries per try {auth_retries}", file=sys.stderr)
        # Timing on a loaded machine may let the signer look at the file first: then there is
        # no 403 to see; three tries give the 403 path at least once.
        self.assertGreater(max(auth_retries), 0, auth_retries)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--in-namespace":
        sys.exit(ns_main(sys.argv[2:]))
    unittest.main(verbosity=2)
