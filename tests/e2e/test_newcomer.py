#!/usr/bin/python3
"""What a newcomer hit (issue 46), each with the check that fails without its fix: the quality
sample of a camera-size photo (bounded memory, measured on its centred window), a store moved
or rebuilt under its mount, `mount -a` twice with the README's fstab line, `pcr verify --source`
of an archive (local and at an http:// URL), SIGTERM with files open, a rerun over an
interrupted build, and folders that a copy can remove."""

import errno
import io
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import (PCR, PCRFS, Mount, TempDirTest, is_mounted, pcr_cat, photo,  # noqa: E402
                     remote_env, run, save_jpeg)

MiB = 1024 * 1024


def poll(what, deadline_s=20, interval=0.02):
    """what() until it is true, for at most deadline_s seconds; returns its last value."""
    deadline = time.monotonic() + deadline_s
    value = what()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = what()
    return value


def small_tree(root, n, size=(96, 64)):
    for i in range(n):
        save_jpeg(photo(size[0] + i % 7, size[1] + i % 5, 4600 + i),
                  os.path.join(root, f"c{i % 3}", f"{i:04d}.jpg"), quality=85)


def manifest(store):
    with open(os.path.join(store, "manifest.json")) as f:
        return json.load(f)


def run_measured(args):
    """Runs args, returns (returncode, stdout, stderr, peak RSS bytes) from its own rusage."""
    r, w = os.pipe()
    er, ew = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(w, 1)
        os.dup2(ew, 2)
        os.close(r)
        os.close(er)
        try:
            os.execvp(args[0], args)
        finally:
            os._exit(127)
    os.close(w)
    os.close(ew)
    out, err = b"", b""
    # The outputs are small (a report): read one after the other.
    with os.fdopen(r, "rb") as f:
        out = f.read()
    with os.fdopen(er, "rb") as f:
        err = f.read()
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), out.decode(), err.decode(), usage.ru_maxrss * 1024


class QualitySampleTest(TempDirTest):
    """Issue 46 item 1: 24 s and 1.47 GB for the sample of one 6000x4000 photo."""

    def test_large_photo_is_measured_on_its_centred_window_in_bounded_memory(self):
        # 4000x3000, 4:2:0: 12 megapixels (the benchmark has the 6000x4000 of the issue).
        src = self.path("src")
        big = os.path.join(src, "camera.jpg")
        save_jpeg(photo(4000, 3000, 46), big, quality=90)
        store = self.path("store")
        code, out, err, rss = run_measured([PCR, "build", src, store, "--quiet"])
        self.assertEqual(code, 0, err)
        # Measured whole, the sample alone took ~0.75 GB here (decoded levels and MS-SSIM
        # planes of 12 megapixels); the window's coefficients and pixels are a few MB.
        if not os.environ.get("PCRFS_SANITIZE"):  # ASan's shadow memory and quarantine
            self.assertLess(rss, 200 * MiB, f"peak RSS {rss / MiB:.0f} MiB")
        self.assertIn("measured on its centred 512x512 window", out)
        quality = manifest(store)["quality"]
        self.assertEqual(quality["measured"], 1)
        # The window, cut by jpegtran from the source (its MCUs are 16x16: the offsets are the
        # centre rounded down to them), built as a store of its own, has exactly these figures:
        # same coefficients, same transcoding, same metrics.
        x0, y0 = (4000 - 512) // 2 // 16 * 16, (3000 - 512) // 2 // 16 * 16
        wsrc = self.path("window")
        os.makedirs(wsrc)
        with open(os.path.join(wsrc, "camera.jpg"), "wb") as f:
            f.write(run(["jpegtran", "-copy", "none", "-crop", f"512x512+{x0}+{y0}",
                         big]).stdout)
        wstore = self.path("wstore")
        run([PCR, "build", wsrc, wstore, "--quiet"])
        wquality = manifest(wstore)["quality"]
        self.assertEqual(quality["levels"], wquality["levels"])
        # Not the trivial figures of identical images: level 1 is far from level 10.
        self.assertLess(quality["levels"][0]["msssim"]["mean"], 0.999)


class StoreUnderTheMountTest(TempDirTest):
    """Issue 46 item 2: a store moved or rebuilt under its mount was called damaged."""

    def setUp(self):
        super().setUp()
        self.src = self.path("src")
        small_tree(self.src, 24)
        self.store = self.path("store")
        run([PCR, "build", self.src, self.store, "--quiet", "--images-per-record", "4"])
        self.files = sorted(os.path.relpath(os.path.join(d, n), self.src)
                            for d, _, names in os.walk(self.src) for n in names)
        self.expected = {f: pcr_cat(self.store, f, 5) for f in self.files}
        self.mnt = self.path("mnt")

    def read(self, rel):
        with open(os.path.join(self.mnt, rel), "rb") as f:
            return f.read()

    def test_a_moved_store_keeps_being_served(self):
        with Mount(self.store, self.mnt, "-o", "scans=5") as m:
            self.assertEqual(self.read(self.files[0]), self.expected[self.files[0]])
            os.rename(self.store, self.path("elsewhere"))
            # Every other record is opened after the move: all read exactly.
            for f in self.files:
                self.assertEqual(self.read(f), self.expected[f], f)
            self.assertNotIn("damaged", m.log())
            self.assertNotIn("missing", m.log())

    def test_force_refuses_a_mounted_store_and_a_rebuild_under_the_mount_is_named(self):
        with Mount(self.store, self.mnt, "-o", "scans=5") as m:
            p = run([PCR, "build", self.src, self.store, "--quiet", "--force"], check=False,
                    text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(p.stderr, f"pcr build: {self.store}: mounted at {self.mnt}; "
                             f"unmount it first (fusermount3 -u {self.mnt}), then replace it "
                             "with --force\n")
            self.assertTrue(os.path.exists(os.path.join(self.store, "manifest.json")))
            # What --force cannot see (a mount in another namespace, a rebuild by hand) still
            # is no damage: files of the record already open are served, the others fail with
            # EIO and one line says what happened and what to do.
            first = self.files[0]
            self.assertEqual(self.read(first), self.expected[first])
            other = self.path("other")
            run([PCR, "build", self.src, other, "--quiet", "--images-per-record", "4"])
            os.rename(self.store, self.store + ".old")
            os.rename(other, self.store)
            shutil.rmtree(self.store + ".old")
            self.assertEqual(self.read(first), self.expected[first])
            failed = 0
            for f in self.files[4:]:
                try:
                    self.read(f)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EIO, f)
                    failed += 1
            self.assertEqual(failed, len(self.files) - 4)
            log = m.log()
            self.assertNotIn("damaged", log)
            self.assertEqual(log.count("store changed under the mount"), 1, log)
            self.assertIn(f"{self.store}: changed since it was opened (rebuilt, replaced or "
                          "removed: records/", log)
            self.assertIn("(a mount: unmount and mount it again) to read the new store", log)
            self.assertIsNone(m.proc.poll())
        # Remounted: the new store, every file.
        with Mount(self.store, self.mnt, "-o", "scans=5"):
            for f in self.files:
                self.assertEqual(self.read(f), pcr_cat(self.store, f, 5), f)


class FstabTest(TempDirTest):
    """Issue 46 items 3 and 7: `mount -a` twice with the README's fstab line, and no "ignoring
    'rw'" for the README's `mount -t fuse.pcrfs` line. Runs in a private mount namespace
    (unshare -m) where this tree's mount.pcrfs and pcrfs are bound over the installed ones."""

    def tools(self):
        """(this tree's mount.pcrfs, this tree's pcrfs, the installed pcrfs), or a skip without
        root and unshare(1)."""
        if shutil.which("unshare") is None or os.geteuid() != 0:
            self.skipTest("needs root and unshare(1) for a private mount namespace")
        helper = os.path.join(os.path.dirname(os.path.dirname(HERE)), "mount-tools",
                              "mount.pcrfs")
        pcrfs = shutil.which(PCRFS) or PCRFS
        installed = shutil.which("pcrfs", path="/usr/local/bin:/usr/bin:/bin")
        if not os.path.exists("/sbin/mount.pcrfs") or installed is None:
            self.fail("mount.pcrfs or pcrfs is not installed: run ./setup.sh")
        return helper, pcrfs, installed

    def test_mount_a_twice_and_the_mount_table_source(self):
        helper, pcrfs, installed = self.tools()
        src = self.path("src")
        small_tree(src, 6)
        # A store named through a symlink: mount(8) resolves it, so must the daemon.
        real = self.path("data", "set.pcr")
        os.makedirs(os.path.dirname(real))
        run([PCR, "build", src, real, "--quiet"])
        store = self.path("link.pcr")
        os.symlink(real, store)
        mnt = self.path("mnt")
        os.makedirs(mnt)
        fstab = self.path("fstab")
        with open(fstab, "w") as f:
            f.write(f"{store}  {mnt}  fuse.pcrfs  ro,scans=5,allow_other,nofail  0  0\n")
        script = f"""
set -u
mount --make-rprivate /
mount --bind {helper} /sbin/mount.pcrfs
mount --bind {pcrfs} {installed}
for i in 1 2 3; do
  mount -a -T {fstab}; echo "mount -a: $?"
done
grep -c " {mnt} " /proc/self/mountinfo
grep " {mnt} " /proc/mounts
umount {mnt}; echo "umount: $?"
mount -t fuse.pcrfs {store} {mnt} -o scans=5 2>&1; echo "mount -t: $?"
umount {mnt}
"""
        p = run(["unshare", "-m", "sh", "-c", script], check=False, text=True, timeout=120)
        self.assertEqual(p.stderr, "")
        lines = p.stdout.splitlines()
        self.assertEqual(lines[:4], ["mount -a: 0"] * 3 + ["1"], p.stdout)
        source, target, fstype = lines[4].split()[:3]
        self.assertEqual((source, target, fstype), (real, mnt, "fuse.pcrfs"))
        self.assertEqual(lines[5:], ["umount: 0", "mount -t: 0"], p.stdout)

    def test_mount_a_twice_with_a_url(self):
        """The README's fstab and systemd lines for remote stores name a URL: the mount table's
        source is that URL."""
        helper, pcrfs, installed = self.tools()
        from remote_servers import Nginx
        src = self.path("src")
        small_tree(src, 4)
        www = self.path("www")
        os.makedirs(www)
        run([PCR, "build", src, os.path.join(www, "set.pcr"), "--quiet"])
        mnt = self.path("mnt")
        os.makedirs(mnt)
        with Nginx(www) as nginx:
            url = f"{nginx.url}/set.pcr"
            fstab = self.path("fstab")
            with open(fstab, "w") as f:
                f.write(f"{url}  {mnt}  fuse.pcrfs  ro,scans=5,cache_dir={self.path('cache')},"
                        "_netdev,nofail  0  0\n")
            script = f"""
set -u
mount --make-rprivate /
mount --bind {helper} /sbin/mount.pcrfs
mount --bind {pcrfs} {installed}
for i in 1 2; do
  mount -a -T {fstab}; echo "mount -a: $?"
done
grep -c " {mnt} " /proc/self/mountinfo
grep " {mnt} " /proc/mounts
umount {mnt}
"""
            p = run(["unshare", "-m", "sh", "-c", script], check=False, text=True, timeout=120,
                    env=remote_env(self.tmp))
        self.assertEqual(p.stderr, "")
        lines = p.stdout.splitlines()
        self.assertEqual(lines[:3], ["mount -a: 0"] * 2 + ["1"], p.stdout)
        self.assertEqual(lines[3].split()[:3], [url, mnt, "fuse.pcrfs"])


class VerifyArchiveTest(TempDirTest):
    """Issue 46 item 4: `pcr verify --source ARCHIVE.tar` said "not a directory"."""

    def make_tars(self):
        src = self.path("src")
        small_tree(src, 9)
        with open(os.path.join(src, "labels.csv"), "w") as f:
            f.write("a,b\n")
        # A tar of class tars, as ImageNet ships: each becomes a folder.
        inner = []
        for c in sorted(os.listdir(src)):
            path = os.path.join(src, c)
            if os.path.isdir(path):
                tar = self.path(f"{c}.tar")
                with tarfile.open(tar, "w") as t:
                    t.add(path, arcname=".")
                inner.append((tar, c + ".tar"))
        outer = self.path("train.tar")
        with tarfile.open(outer, "w") as t:
            for tar, name in inner:
                t.add(tar, arcname=name)
            t.add(os.path.join(src, "labels.csv"), arcname="labels.csv")
        return outer

    def test_verify_against_the_archive_it_was_built_from(self):
        outer = self.make_tars()
        store = self.path("store")
        run([PCR, "build", outer, store, "--quiet"])
        p = run([PCR, "verify", store, "--source", outer], check=False, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(f"10 files compared with {outer}", p.stdout)
        # Another archive with one byte of labels.csv changed: named, exit 1.
        changed = self.path("changed.tar")
        with tarfile.open(outer) as t, tarfile.open(changed, "w") as out:
            for member in t.getmembers():
                data = t.extractfile(member).read()
                if member.name == "labels.csv":
                    data = b"a,c\n"
                member.size = len(data)
                out.addfile(member, io.BytesIO(data))
        p = run([PCR, "verify", store, "--source", changed], check=False, text=True)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("labels.csv: bytes differ from the source", p.stdout)

    def test_verify_against_an_archive_at_an_http_url(self):
        from remote_servers import Nginx
        outer = self.make_tars()
        store = self.path("store")
        run([PCR, "build", outer, store, "--quiet"])
        www = self.path("www")
        os.makedirs(www)
        shutil.copy(outer, os.path.join(www, "train.tar"))
        env = remote_env(self.tmp)
        with Nginx(www) as nginx:
            url = f"{nginx.url}/train.tar"
            p = run([PCR, "verify", store, "--source", url], check=False, text=True, env=env)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn(f"10 files compared with {url}", p.stdout)


class SigtermTest(TempDirTest):
    """Issue 46 item 5: SIGTERM unmounted a mount whose files a training job had open."""

    def test_sigterm_leaves_a_busy_mount_up_and_unmounts_an_idle_one(self):
        src = self.path("src")
        small_tree(src, 6)
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet"])
        files = sorted(os.path.relpath(os.path.join(d, n), src)
                       for d, _, names in os.walk(src) for n in names)
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=3") as m:
            f = open(os.path.join(mnt, files[0]), "rb")
            try:
                m.proc.send_signal(signal.SIGTERM)
                self.assertTrue(poll(lambda: "stays mounted" in m.log()), m.log())
                self.assertIn(f"SIGTERM: {mnt} is busy", m.log())
                self.assertIsNone(m.proc.poll())
                self.assertTrue(is_mounted(mnt))
                self.assertEqual(f.read(), pcr_cat(store, files[0], 3))
                with open(os.path.join(mnt, files[1]), "rb") as g:
                    self.assertEqual(g.read(), pcr_cat(store, files[1], 3))
            finally:
                f.close()
            m.proc.send_signal(signal.SIGTERM)
            m.proc.wait(timeout=20)
            self.assertEqual(m.proc.returncode, 0, m.log())
            self.assertFalse(is_mounted(mnt))
            self.assertIn(f"SIGTERM: unmounted {mnt}", m.log())


class InterruptedBuildTest(TempDirTest):
    """Issue 46 item 6: a rerun without --resume threw the finished records away silently."""

    def test_rerun_without_resume_is_refused_naming_what_it_would_discard(self):
        src = self.path("src")
        small_tree(src, 120, size=(160, 120))
        store = self.path("store")
        partial = store + ".partial"
        args = [PCR, "build", src, store, "--quiet", "--images-per-record", "4", "--threads",
                "1", "--quality-sample", "0"]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        members = os.path.join(partial, ".build")
        finished = poll(lambda: os.path.isdir(members) and len(
            [n for n in os.listdir(members) if n.endswith(".members")]) >= 3, 120, 0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.assertTrue(finished, "the build ended before it could be killed")
        n = len([x for x in os.listdir(members) if x.endswith(".members")])
        before = sorted(os.listdir(os.path.join(partial, "records")))
        p = run(args, check=False, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(p.stderr, f"pcr build: {partial}: an interrupted build left {n} "
                         f"finished records there; --resume keeps them (same options), --force "
                         "discards them and builds from the start\n")
        self.assertEqual(sorted(os.listdir(os.path.join(partial, "records"))), before)
        p = run(args + ["--resume"], text=True)
        self.assertIn(f"({n} kept from the interrupted build)", p.stdout)
        # --force over a partial build: builds from the start, keeping nothing.
        proc = subprocess.Popen(args + ["--force"], stdout=subprocess.DEVNULL)
        proc.wait()
        self.assertEqual(proc.returncode, 0)


class CopiedFoldersTest(TempDirTest):
    """Issue 46 item 7: `cp -r MNT/... out/` made read-only folders a user could not remove."""

    def test_folders_are_0755_and_a_copy_is_removable(self):
        src = self.path("src")
        small_tree(src, 6)
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet"])
        mnt = self.path("mnt")
        with Mount(store, mnt, "-o", "scans=2,allow_other"):
            self.assertEqual(stat.S_IMODE(os.stat(mnt).st_mode), 0o755)
            self.assertEqual(stat.S_IMODE(os.stat(os.path.join(mnt, "c0")).st_mode), 0o755)
            # Copied by a user other than root (who passes any mode) into a folder of theirs.
            home = self.path("home")
            os.makedirs(home)
            shutil.chown(home, "nobody")
            os.chmod(self.tmp, 0o755)
            out = os.path.join(home, "out")
            as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
            run(as_nobody + ["cp", "-r", os.path.join(mnt, "c0"), out])
            self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o755)
            p = run(as_nobody + ["rm", "-rf", out], check=False, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    unittest.main()
