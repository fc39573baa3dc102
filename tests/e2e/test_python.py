#!/usr/bin/python3
"""pcrfs from Python without a mount (issue 41): pcrfs.Store (the extension pcrfs._pcrfs over
fs/store_session.h) reads every file at levels 1, 5 and 10 exactly as `pcr extract` writes it,
from a local store and from nginx; pcrfs.torch.ImageFolder equals torchvision's ImageFolder over
a mount of the same store; the documented exceptions (missing file, bad option, bad URL, refused
credentials, damaged record); DataLoader with 2 workers under fork and spawn reads every sample
exactly once; and an unprivileged user with /dev/fuse replaced by /dev/null reads a store.

The package is imported from the build tree (PCRFS_PYTHONPATH, set by CMake: BUILD/python, the
package's .py files beside the extension). Needs nginx (tests/remote), torch and torchvision."""

import errno
import hashlib
import json
import os
import shutil
import sys
import time
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))
PYTHONPATH = os.environ.get("PCRFS_PYTHONPATH", os.path.join(TOP, "build", "python"))
sys.path.insert(0, PYTHONPATH)

from pcrtest import (PCR, Indexed, LoopbackServersCase, Mount, pcr_extract, photo, run,  # noqa: E402
                     save_jpeg)
from remote_servers import Nginx  # noqa: E402

import pcrfs  # noqa: E402

CLASSES = {"cat": 7, "dog": 5, "eel": 6}
# 3 workers on a 2-core machine: torch warns, the test wants them anyway.
warnings.filterwarnings("ignore", message="This DataLoader will create")


def sha_loader(f):
    """A loader for the DataLoader tests: the sample's bytes, hashed (picklable for spawn)."""
    return hashlib.sha256(f.read()).hexdigest()


def walk_store(store):
    """{path: bytes} of every file of a pcrfs.Store, read both ways (read() and open())."""
    out = {}
    for dirpath, _, files in store.walk():
        for name in files:
            path = f"{dirpath}/{name}" if dirpath else name
            data = store.read(path)
            with store.open(path) as f:
                assert f.read() == data, path
            assert store.stat(path).st_size == len(data), path
            out[path] = data
    return out


class PythonStoreTest(LoopbackServersCase):
    tmp_prefix = "python-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.chmod(cls.tmp, 0o755)  # the unprivileged test reads the store
        src = os.path.join(cls.tmp, "src")
        seed = 0
        for name, n in CLASSES.items():
            for i in range(n):
                seed += 1
                save_jpeg(photo(96 + 8 * (i % 4), 64 + 8 * (i % 3), seed),
                          os.path.join(src, "train", name, f"img{i:02d}.jpg"), quality=90)
        save_jpeg(photo(80, 60, 99), os.path.join(src, "train", "dog", "deeper", "x.JPEG"))
        with open(os.path.join(src, "train", "cat", "notes.txt"), "w") as f:
            f.write("not an image\n")
        save_jpeg(photo(64, 48, 100), os.path.join(src, "val", "v.jpg"))
        cls.www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(cls.www, "store")
        os.makedirs(cls.www)
        run([PCR, "build", src, cls.store, "--quiet", "--images-per-record", "4",
             "--quality-sample", "0"])
        cls.extracted = {k: pcr_extract(cls.store, k) for k in (1, 5, 10)}

    def test_local_store_equals_pcr_extract(self):
        for k in (1, 5, 10):
            store = pcrfs.Store(self.store, scans=k)
            self.assertEqual(store.scans, k)
            self.assertEqual(walk_store(store), self.extracted[k], f"level {k}")

    def test_http_store_equals_pcr_extract(self):
        nginx = self.serve(Nginx(self.www))
        for k in (1, 5, 10):
            store = pcrfs.Store(nginx.url + "/store", scans=k, cache_dir=self.cache(f"http{k}"),
                                remote_cache="8M")
            self.assertEqual(walk_store(store), self.extracted[k], f"level {k}")

    def test_listing_and_stat_are_the_mounts(self):
        store = pcrfs.Store(self.store, scans=5)
        mnt = os.path.join(self.tmp, "mnt-stat")
        with Mount(self.store, mnt, "-o", "scans=5"):
            for dirpath, dirs, files in store.walk():
                here = os.path.join(mnt, dirpath)
                self.assertEqual(sorted(store.listdir(dirpath)), sorted(os.listdir(here)))
                for name in dirs + files:
                    mine = store.stat(f"{dirpath}/{name}" if dirpath else name)
                    theirs = os.stat(os.path.join(here, name))
                    for field in ("st_mode", "st_size", "st_mtime_ns", "st_ino", "st_nlink"):
                        self.assertEqual(getattr(mine, field), getattr(theirs, field),
                                         f"{dirpath}/{name} {field}")

    def test_image_folder_equals_torchvisions_over_the_mount(self):
        import torch
        import torchvision
        from pcrfs.torch import ImageFolder
        to_tensor = torchvision.transforms.ToTensor()
        mine = ImageFolder(self.store, root="train", scans=5, transform=to_tensor)
        mnt = os.path.join(self.tmp, "mnt-if")
        with Mount(self.store, mnt, "-o", "scans=5"):
            theirs = torchvision.datasets.ImageFolder(os.path.join(mnt, "train"),
                                                      transform=to_tensor)
            self.assertEqual(mine.classes, theirs.classes)
            self.assertEqual(mine.class_to_idx, theirs.class_to_idx)
            self.assertEqual(mine.targets, theirs.targets)
            self.assertEqual(mine.samples, [(os.path.relpath(p, mnt), t) for p, t in theirs.samples])
            self.assertEqual(len(mine), len(theirs))
            for i in (0, 6, 8, len(mine) - 1):
                a, ta = mine[i]
                b, tb = theirs[i]
                self.assertEqual(ta, tb)
                self.assertTrue(torch.equal(a, b), mine.samples[i])

    def test_documented_exceptions(self):
        store = pcrfs.Store(self.store, scans=3)
        with self.assertRaises(FileNotFoundError):
            store.read("train/cat/none.jpg")
        with self.assertRaises(FileNotFoundError):
            store.open("nothing/here.jpg")
        with self.assertRaises(NotADirectoryError):
            store.listdir("val/v.jpg")
        with self.assertRaises(IsADirectoryError):
            store.read("train")
        with self.assertRaises(IsADirectoryError):
            store.open("train/cat")
        with self.assertRaises(ValueError) as e:
            pcrfs.Store(self.store, scans=11)
        self.assertEqual(str(e.exception), "-o scans=11: expected an integer in 1..10")
        with self.assertRaises(ValueError) as e:
            pcrfs.Store(self.store, threads=4)
        self.assertEqual(str(e.exception), "-o threads: only for a mount")
        with self.assertRaises(ValueError) as e:
            pcrfs.Store(self.store, remote_cache="1G")
        self.assertIn("only for a remote store", str(e.exception))
        with self.assertRaises(FileNotFoundError):
            pcrfs.Store(os.path.join(self.tmp, "no-store"))
        # A URL with nothing there, a server that is not a store, a refused token.
        with self.assertRaises(OSError) as e:
            pcrfs.Store("http://127.0.0.1:9/store", cache_dir=self.cache("refused"),
                        remote_timeout=2)
        self.assertEqual(e.exception.errno, errno.EIO, e.exception)
        nginx = self.serve(Nginx(self.www, bearer_token="letmein"))
        with self.assertRaises(PermissionError) as e:
            pcrfs.Store(nginx.url + "/store", cache_dir=self.cache("token"))
        self.assertNotIn("letmein", str(e.exception))
        header = os.path.join(self.tmp, "header")
        with open(header, "w") as f:
            f.write("Authorization: Bearer letmein\n")
        ok = pcrfs.Store(nginx.url + "/store", scans=3, cache_dir=self.cache("token"),
                         header_file=header)
        self.assertEqual(ok.read("val/v.jpg"), self.extracted_at(3)["val/v.jpg"])
        with self.assertRaises(ValueError) as e:
            pcrfs.Store(nginx.url + "/nothing", cache_dir=self.cache("nothing"),
                        header_file=header)
        self.assertIn("not a pcrfs store", str(e.exception))

    def extracted_at(self, k):
        if k not in self.extracted:
            self.extracted[k] = pcr_extract(self.store, k)
        return self.extracted[k]

    def test_damaged_record_is_eio_with_the_daemons_line(self):
        copy = os.path.join(self.tmp, "damaged")
        shutil.copytree(self.store, copy)
        records = sorted(os.listdir(os.path.join(copy, "records")))
        path = os.path.join(copy, "records", records[0])
        with open(path, "r+b") as f:
            data = bytearray(f.read())
            for i in range(len(data) // 3, 2 * len(data) // 3, 31):
                data[i] ^= 0x5A
            f.seek(0)
            f.write(data)
        store = pcrfs.Store(copy, scans=10)
        damaged = []
        for path in self.extracted[10]:
            try:
                self.assertEqual(store.read(path), self.extracted[10][path], path)
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, e)
                self.assertTrue(e.strerror.startswith("damaged data: "), e.strerror)
                self.assertIn(path, e.strerror)
                damaged.append(path)
        self.assertTrue(damaged)
        self.assertLessEqual(len(damaged), 4)  # that record's files only
        # RecordDataset reads the record's prefix in one read: the same files fail, with the
        # same line, when their samples come up, and every other file is its bytes.
        from pcrfs.torch import RecordDataset
        data = RecordDataset(copy, root="", scans=10, shuffle=False, loader=lambda f: f.read(),
                             is_valid_file=lambda p: True)
        it, got, failed = iter(data), [], []
        for i in range(len(data)):
            try:
                got.append(next(it)[0])
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, e)
                self.assertTrue(e.strerror.startswith("damaged data: "), e.strerror)
                failed.append(e.strerror)
                # A generator that raised is done: resume after the sample that failed.
                data.load_state_dict({"epoch": 0, "seed": 0, "samples": i + 1})
                it = iter(data)
        self.assertEqual(sorted(p for p in damaged if any(p in f for f in failed)),
                         sorted(damaged))
        self.assertEqual(len(failed), len(damaged))
        self.assertEqual(sorted(got), sorted(self.extracted[10][p] for p in self.extracted[10]
                                             if p not in damaged))

    def dataloader_reads_each_once(self, context):
        import torch.utils.data
        from pcrfs.torch import ImageFolder
        data = ImageFolder(pcrfs.Store(self.store, scans=5), root="train", loader=sha_loader)
        data[0]  # the parent's session is open (and its threads run) when the workers start
        want = {i: hashlib.sha256(self.extracted[5][p]).hexdigest()
                for i, (p, _) in enumerate(data.samples)}
        loader = torch.utils.data.DataLoader(Indexed(data), batch_size=3, shuffle=True,
                                             num_workers=2, multiprocessing_context=context)
        got = {}
        for indices, hashes in loader:
            for i, h in zip(indices.tolist(), hashes):
                self.assertNotIn(i, got)
                got[i] = h
        self.assertEqual(got, want)

    def test_dataloader_fork(self):
        self.dataloader_reads_each_once("fork")

    def test_dataloader_spawn(self):
        self.dataloader_reads_each_once("spawn")

    def test_dataloader_forkserver(self):
        self.dataloader_reads_each_once("forkserver")

    def record_dataset(self, **kw):
        from pcrfs.torch import RecordDataset
        return RecordDataset(self.store, root="train", scans=5, loader=sha_loader,
                             shuffle_buffer=5, **kw)

    def want_hashes(self, data):
        return sorted((hashlib.sha256(self.extracted[5][p]).hexdigest(), t)
                      for p, t in data.samples)

    def record_dataset_once(self, context):
        import torch.utils.data
        got = []
        for rank in range(2):
            data = self.record_dataset(rank=rank, world_size=2, seed=7)
            loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=3,
                                                 multiprocessing_context=context)
            got += [(h, int(t)) for h, t in loader]
        self.assertEqual(sorted(got), self.want_hashes(data))

    def test_record_dataset_2_ranks_3_workers_fork(self):
        self.record_dataset_once("fork")

    def test_record_dataset_2_ranks_3_workers_spawn(self):
        self.record_dataset_once("spawn")

    def test_record_dataset_over_http(self):
        """Each record's prefix is one ranged GET; the files then come from the range cache."""
        from pcrfs.torch import RecordDataset
        nginx = self.serve(Nginx(self.www))
        data = RecordDataset(nginx.url + "/store", root="train", scans=5, loader=sha_loader,
                             cache_dir=self.cache("records"))
        self.assertEqual(sorted(data), self.want_hashes(data))
        # At least a GET per record (its prefix), each logged as it ends.
        record_gets = nginx.wait_for_log(len(data.records), lambda line: "/records/" in line)
        # Opening a record reads its header and footer (ranges of one GET or two); its prefix is
        # one more GET, and no file needs another.
        self.assertLessEqual(len(record_gets), 3 * len(data.records), "".join(record_gets))
        self.assertGreaterEqual(len(record_gets), len(data.records))

    def test_record_dataset_epochs_and_resume(self):
        data = self.record_dataset(seed=3)
        self.assertEqual(data.classes, sorted(CLASSES))
        first = list(data)
        self.assertEqual(sorted(first), self.want_hashes(data))
        self.assertEqual(list(data), first)  # the same epoch, the same order
        data.set_epoch(1)
        second = list(data)
        self.assertEqual(sorted(second), sorted(first))
        self.assertNotEqual(second, first)
        # Resume after k samples of epoch 1: exactly the rest, nothing repeated or skipped.
        it = iter(data)
        head = [next(it) for _ in range(7)]
        state = data.state_dict()
        self.assertEqual(state, {"epoch": 1, "seed": 3, "samples": 7})
        resumed = self.record_dataset(seed=3)
        resumed.load_state_dict(state)
        self.assertEqual(head + list(resumed), second)

    def test_record_dataset_epochs_with_persistent_workers(self):
        """Persistent workers keep their copy of the dataset across epochs: set_epoch still
        reshuffles there (each epoch every file once, epoch 1's order not epoch 0's), and a
        resumed epoch's skip does not carry into the next."""
        import torch.utils.data
        data = self.record_dataset(seed=5)
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2,
                                             persistent_workers=True,
                                             multiprocessing_context="fork")
        epochs = []
        for e in range(2):
            data.set_epoch(e)
            epochs.append([(h, int(t)) for h, t in loader])
            self.assertEqual(sorted(epochs[-1]), self.want_hashes(data), f"epoch {e}")
        self.assertNotEqual(epochs[0], epochs[1])
        # Resume epoch 1 after 4 batches of 1, then epoch 2 whole.
        data.load_state_dict(data.state_dict(batches=4, batch_size=1) | {"epoch": 1})
        rest = [(h, int(t)) for h, t in loader]
        self.assertEqual(len(rest), len(data) - 4)
        data.set_epoch(2)
        self.assertEqual(sorted((h, int(t)) for h, t in loader), self.want_hashes(data))

    def test_pickle_carries_url_and_options_only(self):
        import pickle
        store = pcrfs.Store(self.store, scans=2, cache_size="16M")
        state = pickle.loads(pickle.dumps(store)).__getstate__()
        self.assertEqual(state, {"url": self.store, "scans": 2, "options": {"cache_size": "16M"}})
        copy = pickle.loads(pickle.dumps(store))
        self.assertEqual(copy.read("val/v.jpg"), store.read("val/v.jpg"))

    def test_unprivileged_without_fuse(self):
        """As nobody, in a mount namespace where /dev/fuse is /dev/null: no mount is possible,
        and a Store reads (the package imported from the build tree)."""
        want = {p: hashlib.sha256(b).hexdigest() for p, b in self.extracted[5].items()}
        script = (
            "import hashlib, json, os, sys\n"
            "assert os.getuid() == 65534, os.getuid()\n"
            "assert os.stat('/dev/fuse').st_rdev == os.stat('/dev/null').st_rdev\n"
            "import pcrfs\n"
            "s = pcrfs.Store(sys.argv[1], scans=5)\n"
            "got = {}\n"
            "for d, _, files in s.walk():\n"
            "    for n in files:\n"
            "        p = f'{d}/{n}' if d else n\n"
            "        got[p] = hashlib.sha256(s.read(p)).hexdigest()\n"
            "print(json.dumps(got))\n")
        p = run_unprivileged(script, [self.store])
        self.assertEqual(json.loads(p.stdout), want)


# Reads every file of a store at levels 1, 5 and 10 as an unprivileged user in a mount
# namespace whose /dev/fuse is /dev/null, and then RecordDataset's samples at level 5: JSON
# {"1": {path: sha256}, ..., "records": [sha256, ...]}. argv: URL, cache folder; the store's
# options as JSON in PCRFS_TEST_OPTIONS.
UNPRIVILEGED_READER = """
import hashlib, json, os, sys
assert os.getuid() == 65534, os.getuid()
assert os.stat('/dev/fuse').st_rdev == os.stat('/dev/null').st_rdev
import pcrfs
from pcrfs.torch import RecordDataset
url, cache = sys.argv[1], sys.argv[2]
options = json.loads(os.environ['PCRFS_TEST_OPTIONS'])
out = {}
for k in (1, 5, 10):
    s = pcrfs.Store(url, scans=k, cache_dir=cache, **options)
    got = out[str(k)] = {}
    for d, _, files in s.walk():
        for n in files:
            p = f'{d}/{n}' if d else n
            got[p] = hashlib.sha256(s.read(p)).hexdigest()
data = RecordDataset(url, root='train', scans=5, cache_dir=cache,
                     loader=lambda f: hashlib.sha256(f.read()).hexdigest(), **options)
out['records'] = sorted(h for h, _ in data)
print(json.dumps(out))
"""


def run_unprivileged(script, args, env=None):
    """Runs /usr/bin/python3 -c script args as nobody, in a mount namespace where /dev/fuse is
    /dev/null (no mount is possible), with the package of the build tree."""
    env = dict({"PATH": "/usr/bin:/bin", "PYTHONPATH": PYTHONPATH, "HOME": "/nonexistent",
                "PYTHONDONTWRITEBYTECODE": "1"}, **(env or {}))
    return run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind /dev/null /dev/fuse && exec setpriv --reuid=65534 '
                '--regid=65534 --clear-groups "$@"', "sh", sys.executable, "-c", script, *args],
               env=env)


class PythonObjectStoreTest(LoopbackServersCase):
    """pcrfs.Store and RecordDataset over HTTP (nginx), S3 (the S3 test server, every request's
    SigV4 checked) and Azure (Azurite, Shared Key), as nobody without /dev/fuse: every file at
    levels 1, 5 and 10 equal to pcr extract; a refused credential is PermissionError."""

    tmp_prefix = "python-object-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        os.chmod(cls.tmp, 0o755)
        src = os.path.join(cls.tmp, "src")
        for i in range(9):
            save_jpeg(photo(72 + 8 * (i % 3), 56, 200 + i),
                      os.path.join(src, "train", "abc"[i % 3], f"p{i}.jpg"), quality=85)
        cls.store = os.path.join(cls.tmp, "store")
        run([PCR, "build", src, cls.store, "--quiet", "--images-per-record", "4",
             "--quality-sample", "0"])
        cls.want = {str(k): {p: hashlib.sha256(b).hexdigest()
                             for p, b in pcr_extract(cls.store, k).items()} for k in (1, 5, 10)}
        cls.want["records"] = sorted(cls.want["5"][p] for p in cls.want["5"]
                                     if p.startswith("train/"))

    def nobody_cache(self, name):
        path = self.cache(name)
        os.makedirs(path, mode=0o700)
        os.chown(path, 65534, 65534)
        return path

    def read_as_nobody(self, url, cache, options, env):
        p = run_unprivileged(UNPRIVILEGED_READER, [url, cache],
                             dict(env, PCRFS_TEST_OPTIONS=json.dumps(options)))
        return json.loads(p.stdout)

    def test_http(self):
        www = os.path.join(self.tmp, "www")
        os.makedirs(www, exist_ok=True)
        if not os.path.exists(os.path.join(www, "store")):
            shutil.copytree(self.store, os.path.join(www, "store"))
        nginx = self.serve(Nginx(www))
        got = self.read_as_nobody(nginx.url + "/store", self.nobody_cache("http"), {}, {})
        self.assertEqual(got, self.want)

    def test_s3(self):
        from remote_servers import S3Server
        key, secret = "AKIDPYTHONTEST", "python/test+secret"
        with S3Server(None, "py-bucket", key, secret) as s3:
            s3.upload(self.store, prefix="sets/store")
            url = "s3://py-bucket/sets/store"
            creds = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
            got = self.read_as_nobody(url, self.nobody_cache("s3"),
                                      {"endpoint": s3.endpoint}, creds)
            self.assertEqual(got, self.want)
            self.assertGreater(s3.front_stats()["signed_ok"], 0)
            os.environ.update(AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY="wrong" + secret)
            try:
                with self.assertRaises(PermissionError) as e:
                    pcrfs.Store(url, cache_dir=self.cache("s3-wrong"), endpoint=s3.endpoint)
            finally:
                del os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
            self.assertIn("SignatureDoesNotMatch", str(e.exception))
            self.assertNotIn(secret, str(e.exception))

    def test_azure(self):
        from azurite import ACCOUNT, ACCOUNT_KEY, Azurite
        with Azurite() as az:
            az.upload(self.store, "py-container", "sets/store")
            url = "az://py-container/sets/store"
            creds = {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": ACCOUNT_KEY}
            got = self.read_as_nobody(url, self.nobody_cache("az"), {"endpoint": az.endpoint},
                                      creds)
            self.assertEqual(got, self.want)
            wrong = "A" * len(ACCOUNT_KEY)
            os.environ.update(AZURE_STORAGE_ACCOUNT=ACCOUNT, AZURE_STORAGE_KEY=wrong)
            try:
                with self.assertRaises(PermissionError) as e:
                    pcrfs.Store(url, cache_dir=self.cache("az-wrong"), endpoint=az.endpoint)
            finally:
                del os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_KEY"]
            self.assertNotIn(wrong, str(e.exception))


if __name__ == "__main__":
    unittest.main()
