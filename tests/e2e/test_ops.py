#!/usr/bin/python3
"""Running pcrfs as a service (credentials that outlive a mount): SIGHUP reloads and never
unmounts, the daemon's messages reach the user (-o log_file, warnings before it detaches), and
fstab mounts work without HOME (mount --fstab through this tree's mount.pcrfs, in a private
mount namespace so the installed helpers and root's ~/.aws are left alone). Real mounts, real
processes; every mount is unmounted. Needs tests/remote/install.sh for the S3 and nginx cases."""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, LoopbackServersCase, Mount, is_mounted, pcr_cat,  # noqa: E402
                     pcr_extract, photo, read_tree, run, save_jpeg, sha)

RELOAD_LINE = "SIGHUP: reloading credentials and header files"
# "2026-11-27T12:19:44.123Z LEVEL pcrfs[PID]: MESSAGE"
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warning|info) "
                      r"pcrfs\[(\d+)\]: (.*)$")
ACCESS_KEY = "AKIDPCRFSOPS"
SECRET_KEY = "ops/test+secret"
BUCKET = "pcrfs-ops"


def build_store(root, n=12):
    src = os.path.join(root, "src")
    for i in range(n):
        save_jpeg(photo(120 + 8 * (i % 3), 90, 700 + i), os.path.join(src, f"d{i % 2}",
                                                                      f"{i:02d}.jpg"),
                  quality=88)
    store = os.path.join(root, "store")
    run([PCR, "build", src, store, "--quiet", "--images-per-record", "4"])
    return store


def damage_one_file(store, rel):
    """Flips a byte inside the level-3 piece of `rel`: levels 3+ of it get EIO."""
    l2 = len(pcr_cat(store, rel, 2)) - 2
    l3 = len(pcr_cat(store, rel, 3)) - 2
    piece = pcr_cat(store, rel, 3)[l2:l3]
    for name in sorted(os.listdir(os.path.join(store, "records"))):
        path = os.path.join(store, "records", name)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        pos = data.find(piece)
        if pos > 0:
            data[pos + len(piece) // 2] ^= 0x55
            with open(path, "wb") as f:
                f.write(bytes(data))
            return
    raise AssertionError(f"no record holds the level-3 piece of {rel}")


def daemon_pids(mnt):
    """Pids of the pcrfs processes whose command line names the mount point `mnt`."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and os.path.basename(args[0]) == b"pcrfs" and mnt.encode() in args:
            pids.append(int(pid))
    return pids


def wait_for(predicate, timeout=20, what="condition"):
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def unmount(mnt):
    if is_mounted(mnt):
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: not is_mounted(mnt), timeout=10, what="unmount")
    except AssertionError:
        subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)


def log_lines(path):
    with open(path) as f:
        return f.read().splitlines()


class LocalStoreCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists("/dev/fuse"):
            raise unittest.SkipTest("/dev/fuse is missing")
        cls.tmp = tempfile.mkdtemp(prefix="pcrfs-ops-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.store = build_store(cls.tmp)
        cls.want5 = pcr_extract(cls.store, 5)

    def mnt(self, name):
        path = os.path.join(self.tmp, "mnt-" + name)
        os.makedirs(path, exist_ok=True)
        self.addCleanup(unmount, path)
        return path

    def assert_serves_level5(self, root):
        got = read_tree(root)
        self.assertEqual(sorted(got), sorted(self.want5))
        for rel, data in got.items():
            self.assertEqual(sha(data), sha(self.want5[rel]), rel)


class SighupTest(LocalStoreCase):
    def test_sighup_reloads_three_times_and_sigterm_unmounts_cleanly(self):
        mnt = self.mnt("hup")
        with Mount(self.store, mnt, "-o", "scans=5") as m:
            self.assert_serves_level5(mnt)
            for i in range(1, 4):
                m.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: m.log().count(RELOAD_LINE) == i, what=f"reload {i}")
                self.assertIsNone(m.proc.poll(), "SIGHUP must not end the daemon")
                self.assertTrue(is_mounted(mnt))
                self.assert_serves_level5(mnt)
            m.proc.send_signal(signal.SIGTERM)
            self.assertEqual(m.proc.wait(timeout=20), 0, m.log())
            self.assertFalse(is_mounted(mnt))
            self.assertEqual(m.log().count(RELOAD_LINE), 3, m.log())

    def test_sighup_to_a_detached_daemon_reopens_its_log_file(self):
        mnt = self.mnt("hup-detached")
        log = os.path.join(self.tmp, "hup.log")
        p = run([PCRFS, self.store, mnt, "-o", f"scans=5,log_file={log}"])
        self.assertEqual(p.stderr, b"")
        pids = daemon_pids(mnt)
        self.assertEqual(len(pids), 1, pids)
        # logrotate moves the file away, then sends SIGHUP: the next lines go to a new file.
        os.rename(log, log + ".1")
        os.kill(pids[0], signal.SIGHUP)
        wait_for(lambda: os.path.exists(log) and any(RELOAD_LINE in line
                                                     for line in log_lines(log)),
                 what="the reload line in the reopened log file")
        line = next(line for line in log_lines(log) if RELOAD_LINE in line)
        match = LOG_LINE.match(line)
        self.assertIsNotNone(match, line)
        self.assertEqual(match.group(1), "info")
        self.assertEqual(int(match.group(2)), pids[0])
        self.assertTrue(is_mounted(mnt))
        self.assert_serves_level5(mnt)
        os.kill(pids[0], signal.SIGTERM)
        wait_for(lambda: not is_mounted(mnt), what="SIGTERM to unmount")
        wait_for(lambda: not daemon_pids(mnt), what="the daemon to exit")


class LogFileTest(LocalStoreCase):
    def test_a_log_file_in_a_missing_folder_fails_the_mount_in_one_line(self):
        mnt = self.mnt("nolog")
        log = os.path.join(self.tmp, "no-such-folder", "pcrfs.log")
        for extra in ([], ["-f"]):
            with self.subTest(extra=extra):
                p = subprocess.run([PCRFS, self.store, mnt, *extra, "-o", "log_file=" + log],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stderr, f"pcrfs: log file {log}: No such file or directory\n")
                self.assertFalse(is_mounted(mnt))
                self.assertFalse(os.path.exists(os.path.dirname(log)))

    def test_detached_daemon_writes_warnings_and_damage_to_the_log_file(self):
        store = os.path.join(self.tmp, "damaged-store")
        shutil.copytree(self.store, store)
        damage_one_file(store, "d1/05.jpg")
        mnt = self.mnt("logged")
        log = os.path.join(self.tmp, "logged.log")
        with open(log, "w") as f:
            f.write("an earlier line\n")
        # A relative path: the daemon changes to / once detached, the file stays the same one.
        p = run([PCRFS, store, mnt, "-o", "log_file=logged.log,prefetch_probe=1"], cwd=self.tmp)
        # The warning reached the terminal before the daemon detached ...
        self.assertIn("prefetch_probe", p.stderr.decode())
        self.assertTrue(is_mounted(mnt))
        # ... and the log file, as did what the daemon met once detached.
        with self.assertRaises(OSError) as cm:
            with open(os.path.join(mnt, "scan5", "d1", "05.jpg"), "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.EIO)
        with open(os.path.join(mnt, "scan2", "d1", "05.jpg"), "rb") as f:
            self.assertEqual(f.read(), pcr_cat(self.store, "d1/05.jpg", 2))
        wait_for(lambda: any("damaged data" in line for line in log_lines(log)),
                 what="the damage line in the log file")
        unmount(mnt)
        lines = log_lines(log)
        self.assertEqual(lines[0], "an earlier line")  # appended, never truncated
        parsed = [LOG_LINE.match(line) for line in lines[1:]]
        self.assertTrue(all(parsed), lines)
        warnings = [m.group(3) for m in parsed if m.group(1) == "warning"]
        errors = [m.group(3) for m in parsed if m.group(1) == "error"]
        self.assertTrue(any("prefetch_probe" in w for w in warnings), lines)
        damage = [e for e in errors if e.startswith("damaged data")]
        self.assertEqual(len(damage), 1, lines)
        self.assertIn("d1/05.jpg", damage[0])
        self.assertEqual(len({m.group(2) for m in parsed}), 2, "the mounting and the daemon pid")

    def test_foreground_messages_go_to_stderr(self):
        mnt = self.mnt("fg")
        with Mount(self.store, mnt, "-o", "prefetch_probe=1") as m:
            self.assert_serves_level5(os.path.join(mnt, "scan5"))
            self.assertIn("pcrfs: note: -o prefetch_probe", m.log())


class DiskCacheWarningTest(LoopbackServersCase):
    """The disk cache of a remote store is used by one mount at a time; the second says so on
    the terminal before it detaches, and in its log file."""

    tmp_prefix = "ops-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        from remote_servers import Nginx
        www = os.path.join(cls.tmp, "www")
        os.makedirs(www)
        cls.store = build_store(www)
        cls.nginx = cls.serve(Nginx(www))

    def test_disk_cache_in_use_is_said_before_detaching(self):
        url = self.nginx.url + "/store"
        cache = self.cache("shared")
        log = os.path.join(self.tmp, "second.log")
        mnts = []
        for name in ("first", "second"):
            mnt = os.path.join(self.tmp, "mnt-" + name)
            os.makedirs(mnt)
            self.addCleanup(unmount, mnt)
            mnts.append(mnt)
        # Both detached: the first one's lock on the disk cache outlives the process that
        # mounted (the daemon inherits it across the fork).
        p = subprocess.run([PCRFS, url, mnts[0], "-o", f"cache_dir={cache},disk_cache=16M"],
                           env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        p = subprocess.run([PCRFS, url, mnts[1], "-o",
                            f"cache_dir={cache},disk_cache=16M,scans=5,log_file={log}"],
                           env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("the disk cache is in use by another pcrfs process", p.stderr)
        self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
        # The line names the folder, what running without it costs, and the way out.
        self.assertIn(os.path.join(cache, "chunks"), p.stderr)
        self.assertIn("fetches again from the store", p.stderr)
        self.assertIn("its own -o cache_dir", p.stderr)
        want = {k: sha(v) for k, v in pcr_extract(self.store, 5).items()}
        self.assertEqual({k: sha(v) for k, v in read_tree(mnts[1]).items()}, want)
        for mnt in mnts:
            unmount(mnt)
        lines = [LOG_LINE.match(line) for line in log_lines(log)]
        self.assertTrue(any(m and m.group(1) == "warning" and "in use by another" in m.group(3)
                            for m in lines), log_lines(log))


# --- fstab without HOME -------------------------------------------------------------------------
#
# mount(8) runs /sbin/mount.<type> (a fixed search path) and mount.pcrfs runs the first pcrfs of
# /usr/local/bin:/usr/bin:/bin. To run this tree's helper and daemon without installing them, the
# fstab mounts happen in a child in a private mount namespace, where read-only overlays add
# them to /usr/sbin and /usr/local/bin and a folder of the test's is bound over root's home.
# Nothing of it is visible outside; the child unmounts everything before it exits.


def namespace_child(spec):
    """In the private namespace: overlays, then for each fstab entry `mount --fstab` without
    HOME, the tree's digest, `umount`. Prints {mnt: {"rc", "stderr", "tree"}} as JSON."""
    def sh(*args):
        subprocess.run(args, check=True, capture_output=True, timeout=60)
    sh("mount", "-t", "overlay", "overlay", "-o", f"lowerdir={spec['sbin']}:/usr/sbin",
       "/usr/sbin")
    sh("mount", "-t", "overlay", "overlay", "-o", f"lowerdir={spec['bin']}:/usr/local/bin",
       "/usr/local/bin")
    root_home = subprocess.run(["getent", "passwd", "root"], capture_output=True,
                               text=True).stdout.split(":")[5]
    sh("mount", "--bind", spec["home"], root_home)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "no_proxy": "127.0.0.1,localhost"}
    out = {}
    try:
        for mnt in spec["mounts"]:
            p = subprocess.run(["mount", "--fstab", spec["fstab"], mnt], env=env,
                               capture_output=True, text=True, timeout=120)
            entry = {"rc": p.returncode, "stderr": p.stderr, "tree": None}
            if p.returncode == 0:
                try:
                    entry["tree"] = {k: sha(v) for k, v in read_tree(mnt).items()}
                finally:
                    subprocess.run(["umount", mnt], capture_output=True, timeout=60)
            out[mnt] = entry
    finally:
        for mnt in spec["mounts"]:
            if is_mounted(mnt):
                subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)
    print(json.dumps(out))


class FstabWithoutHomeTest(LoopbackServersCase):
    tmp_prefix = "ops-fstab-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if shutil.which("unshare") is None:
            raise unittest.SkipTest("unshare (util-linux) is missing")
        probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                               capture_output=True, text=True)
        if probe.returncode != 0:
            raise unittest.SkipTest("no private mount namespace here: " + probe.stderr.strip())
        cls.store = build_store(cls.tmp)
        cls.want5 = {k: sha(v) for k, v in pcr_extract(cls.store, 5).items()}
        # This tree's helper under both names, and its pcrfs first in mount.pcrfs's PATH.
        cls.sbin = os.path.join(cls.tmp, "sbin")
        os.makedirs(cls.sbin)
        for name in ("mount.pcrfs", "mount.fuse.pcrfs"):
            shutil.copy(os.path.join(TREE, "mount-tools", "mount.pcrfs"),
                        os.path.join(cls.sbin, name))
            os.chmod(os.path.join(cls.sbin, name), 0o755)
        cls.bin = os.path.join(cls.tmp, "bin")
        os.makedirs(cls.bin)
        os.symlink(os.path.abspath(shutil.which(PCRFS) or PCRFS), os.path.join(cls.bin, "pcrfs"))

    def fstab_mount(self, lines, home):
        """Writes the fstab, mounts each of its mount points in the namespace child, returns the
        child's answers by mount point."""
        fstab = os.path.join(self.tmp, "fstab")
        mounts = []
        with open(fstab, "w") as f:
            for source, mnt, options in lines:
                os.makedirs(mnt, exist_ok=True)
                mounts.append(mnt)
                f.write(f"{source} {mnt} fuse.pcrfs {options} 0 0\n")
        spec = {"sbin": self.sbin, "bin": self.bin, "home": home, "fstab": fstab,
                "mounts": mounts}
        p = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                            os.path.abspath(__file__), "--namespace-child", json.dumps(spec)],
                           capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        self.assertEqual(p.returncode, 0, p.stderr)
        for mnt in mounts:  # the namespace is gone: nothing can be left mounted out here
            self.assertFalse(is_mounted(mnt))
        return json.loads(p.stdout)

    def test_local_store_from_fstab(self):
        home = os.path.join(self.tmp, "home-local")
        os.makedirs(home)
        mnt = os.path.join(self.tmp, "mnt-fstab-local")
        log = os.path.join(self.tmp, "fstab-local.log")
        got = self.fstab_mount([(self.store, mnt, f"ro,noauto,nofail,scans=5,log_file={log}")],
                               home)[mnt]
        self.assertEqual(got["rc"], 0, got["stderr"])
        self.assertEqual(got["tree"], self.want5)
        self.assertTrue(os.path.exists(log))

    def s3_store(self):
        from remote_servers import S3Server
        s3 = self.serve(S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY))
        s3.upload(self.store, prefix="datasets/store")
        return s3, f"s3://{BUCKET}/datasets/store"

    def test_s3_store_from_fstab_finds_roots_aws_credentials_without_home(self):
        s3, url = self.s3_store()
        # The namespace's root home: only ~/.aws/credentials, with the test server's keys.
        home = os.path.join(self.tmp, "home-s3")
        os.makedirs(os.path.join(home, ".aws"))
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write(f"[default]\naws_access_key_id = {ACCESS_KEY}\n"
                    f"aws_secret_access_key = {SECRET_KEY}\n")
        os.chmod(os.path.join(home, ".aws", "credentials"), 0o600)
        mnt = os.path.join(self.tmp, "mnt-fstab-s3")
        options = (f"ro,noauto,_netdev,nofail,scans=5,endpoint={s3.endpoint},"
                   f"cache_dir={self.cache('fstab-s3')}")
        signed_before = s3.front_stats()["signed_ok"]
        got = self.fstab_mount([(url, mnt, options)], home)[mnt]
        self.assertEqual(got["rc"], 0, got["stderr"])
        self.assertEqual(got["tree"], self.want5)
        self.assertGreater(s3.front_stats()["signed_ok"], signed_before)
        # The control: without the helper, pcrfs has no HOME, no keys, and S3 refuses it.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "no_proxy": "127.0.0.1"}
        fail_mnt = os.path.join(self.tmp, "mnt-no-home")
        os.makedirs(fail_mnt)
        p = subprocess.run([PCRFS, url, fail_mnt, "-f", "-o",
                            f"endpoint={s3.endpoint},cache_dir={self.cache('no-home')}"],
                           env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("403", p.stderr)

    def test_s3_store_from_fstab_with_credentials_file(self):
        s3, url = self.s3_store()
        home = os.path.join(self.tmp, "home-empty")  # root's ~/.aws holds nothing
        os.makedirs(home)
        creds = os.path.join(self.tmp, "aws-credentials")
        with open(creds, "w") as f:
            f.write(f"[ops]\naws_access_key_id = {ACCESS_KEY}\n"
                    f"aws_secret_access_key = {SECRET_KEY}\n")
        os.chmod(creds, 0o600)
        mnt = os.path.join(self.tmp, "mnt-fstab-creds")
        options = (f"ro,noauto,_netdev,scans=5,endpoint={s3.endpoint},profile=ops,"
                   f"credentials_file={creds},cache_dir={self.cache('fstab-creds')}")
        signed_before = s3.front_stats()["signed_by_key"].get(ACCESS_KEY, 0)
        got = self.fstab_mount([(url, mnt, options)], home)[mnt]
        self.assertEqual(got["rc"], 0, got["stderr"])
        self.assertEqual(got["tree"], self.want5)
        # Signed with the file's key (root's ~/.aws is empty: nothing else could sign).
        self.assertGreater(s3.front_stats()["signed_by_key"].get(ACCESS_KEY, 0), signed_before)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--namespace-child":
        namespace_child(json.loads(sys.argv[2]))
    else:
        unittest.main(verbosity=2)
