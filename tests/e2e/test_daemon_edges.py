#!/usr/bin/python3
"""What a newcomer tried (issue 16): bad mount options, a hand-edited manifest, `ls -l` and
xattrs, and mounting again after the daemon was killed with SIGKILL. Real mounts, real
processes."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from pcrtest import MAKE_TEST_JPEGS, PCR, PCRFS, Mount, is_mounted, run

WORK = STORE = None


def setUpModule():
    global WORK, STORE
    if not os.path.exists("/dev/fuse"):
        raise unittest.SkipTest("/dev/fuse is missing")
    WORK = tempfile.mkdtemp(prefix="pcrfs-edges-")
    src = os.path.join(WORK, "src")
    os.makedirs(src)
    run([MAKE_TEST_JPEGS, os.path.join(src, "jpegs")])
    with open(os.path.join(src, "labels.csv"), "w") as f:
        f.write("file,label\n")
    STORE = os.path.join(WORK, "store")
    run([PCR, "build", src, STORE, "--quiet", "--images-per-record", "8"])


def tearDownModule():
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def run_pcrfs(*args, timeout=30):
    return subprocess.run([PCRFS, *args], capture_output=True, text=True, timeout=timeout)


def peak_rss_kib(pid_status):
    """VmHWM (peak resident set) in KiB from the text of /proc/PID/status."""
    for line in pid_status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def run_with_peak_rss(args, timeout=120):
    """Runs args to completion. Returns ((returncode, stdout, stderr), peak RSS in KiB): the
    largest VmHWM read from /proc/PID/status while it ran, or the kernel's own figure for the
    reaped child (wait4's ru_maxrss) if that is larger, as for a run too short to sample."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(args, stdout=out, stderr=err)
        peak, status, deadline = 0, None, time.time() + timeout
        while status is None:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    peak = max(peak, peak_rss_kib(f.read()))
            except OSError:
                pass
            pid, wstatus, usage = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                status = os.waitstatus_to_exitcode(wstatus)
                peak = max(peak, usage.ru_maxrss)
            elif time.time() > deadline:
                p.kill()
            else:
                time.sleep(0.002)
        p.returncode = status
        out.seek(0)
        err.seek(0)
        return (status, out.read().decode(errors="replace"),
                err.read().decode(errors="replace")), peak


class BadOptionsTest(unittest.TestCase):
    def test_each_bad_option_is_refused_naming_its_range(self):
        mnt = os.path.join(WORK, "mnt-options")
        os.makedirs(mnt, exist_ok=True)
        cases = [
            ("scans=0", "-o scans=0: expected an integer in 1..10"),
            ("scans=3x", "-o scans=3x: expected an integer in 1..10"),
            ("threads=-5", "-o threads=-5: expected an integer in 1..256"),
            ("threads=100000", "-o threads=100000: expected an integer in 1..256"),
            ("readahead=-1", "-o readahead=-1: expected an integer in 0..1024"),
            ("gid=99999999999", "-o gid=99999999999: expected an integer in 0..4294967294"),
            ("uid=-1", "-o uid=-1: expected an integer in 0..4294967294"),
            ("prefetch=101", "-o prefetch=101: expected a percentage"),
            ("cache_size=1Mixx", "-o cache_size=1Mixx: expected a size in 1M..1T"),
            ("msssim=2", "-o msssim=2: expected a number in (0, 1]"),
            ("kernel_readahead=17M", "-o kernel_readahead=17M: expected a size in 0..16M"),
            ("rw", "-o rw: the store is read-only"),
            ("allow_other,rw", "-o rw: the store is read-only"),
        ]
        for option, words in cases:
            with self.subTest(option=option):
                p = run_pcrfs(STORE, mnt, "-f", "-o", option)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(words, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertFalse(is_mounted(mnt))

    def test_ro_and_good_numbers_mount(self):
        mnt = os.path.join(WORK, "mnt-ro")
        with Mount(STORE, mnt, "-o", "ro,scans=2,threads=4,readahead=0,uid=0,gid=0"):
            self.assertIn("jpegs", os.listdir(mnt))
            with self.assertRaises(OSError):
                open(os.path.join(mnt, "new"), "w")


def mount_device(mnt):
    """MAJOR:MINOR of the mount at mnt (from mountinfo, no FUSE request)."""
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == os.path.realpath(mnt):
                dev = fields[2]
    return dev


def bdi_read_ahead_kb(mnt):
    """The read_ahead_kb of the bdi of the mount at mnt."""
    with open(f"/sys/class/bdi/{mount_device(mnt)}/read_ahead_kb") as f:
        return int(f.read())


class KernelReadaheadTest(unittest.TestCase):
    @unittest.skipUnless(os.geteuid() == 0, "only root may set a bdi's readahead")
    def test_the_mount_gets_the_readahead_window_asked_for(self):
        mnt = os.path.join(WORK, "mnt-ra")
        with Mount(STORE, mnt):
            self.assertEqual(bdi_read_ahead_kb(mnt), 1024)  # the default, 1M
        with Mount(STORE, mnt, "-o", "kernel_readahead=4M"):
            self.assertEqual(bdi_read_ahead_kb(mnt), 4096)
        with Mount(STORE, mnt, "-o", "kernel_readahead=0"):
            self.assertEqual(bdi_read_ahead_kb(mnt), 128)  # the kernel's own for FUSE


def fuse_connection_value(mnt, name):
    """A value of the mount's FUSE connection (/sys/fs/fuse/connections/DEV/NAME)."""
    major, minor = (int(x) for x in mount_device(mnt).split(":"))
    with open(f"/sys/fs/fuse/connections/{(major << 20) | minor}/{name}") as f:
        return int(f.read())


class BackgroundRequestsTest(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir("/sys/fs/fuse/connections"), "no fusectl file system")
    def test_readers_get_more_background_reads_than_the_kernels_twelve(self):
        # The kernel's readahead READs are background requests: with its default of 12
        # (congested at 9), 16 readers of a remote store fell back to one 4 KiB page per READ.
        mnt = os.path.join(WORK, "mnt-bg")
        with Mount(STORE, mnt, "-o", "threads=8"):
            self.assertEqual(fuse_connection_value(mnt, "max_background"), 64)
            self.assertEqual(fuse_connection_value(mnt, "congestion_threshold"), 48)
        with Mount(STORE, mnt, "-o", "threads=100"):
            self.assertEqual(fuse_connection_value(mnt, "max_background"), 200)
            self.assertEqual(fuse_connection_value(mnt, "congestion_threshold"), 150)


class XattrTest(unittest.TestCase):
    def test_foreign_namespaces_are_not_supported_and_ls_works(self):
        mnt = os.path.join(WORK, "mnt-xattr")
        with Mount(STORE, mnt, "-o", "scans=3"):
            f = os.path.join(mnt, "jpegs", sorted(os.listdir(os.path.join(mnt, "jpegs")))[0])
            p = subprocess.run(["getfattr", "-n", "security.selinux", f], capture_output=True,
                               text=True)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("Operation not supported", p.stderr)
            p = subprocess.run(["getfattr", "-n", "user.nonexistent", f], capture_output=True,
                               text=True)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("No such attribute", p.stderr)
            p = subprocess.run(["getfattr", "-n", "user.pcrfs.level", f], capture_output=True,
                               text=True)
            self.assertIn('user.pcrfs.level="3"', p.stdout)
            ls = run(["ls", "-l", os.path.join(mnt, "jpegs")]).stdout.decode().splitlines()
            self.assertEqual(len(ls) - 1, len(os.listdir(os.path.join(mnt, "jpegs"))))
            self.assertTrue(all(line.startswith("-r--r--r--") for line in ls[1:]), ls)
            # GNU ls stops asking a device that answered "not supported": the whole listing
            # costs at most one getxattr per namespace, not two per file.
            if shutil.which("strace"):
                trace = os.path.join(WORK, "ls.strace")
                run(["strace", "-f", "-e", "trace=getxattr,lgetxattr", "-o", trace, "ls", "-l",
                     os.path.join(mnt, "jpegs")])
                with open(trace) as f:
                    calls = [line for line in f if "getxattr(" in line]
                self.assertLessEqual(len(calls), 2, calls)
                self.assertTrue(all("EOPNOTSUPP" in c or "ENOTSUP" in c for c in calls), calls)


class TamperedManifestTest(unittest.TestCase):
    """Every numeric field of a hand-edited manifest is refused by pcrfs and pcr verify, in
    constant memory (peak RSS read from /proc)."""

    RSS_LIMIT_KIB = 200 * 1024  # the 4e9-record manifest once took 3.6 GB in verify

    def tampered_store(self, edit):
        store = os.path.join(WORK, "tampered")
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(STORE, store)
        path = os.path.join(store, "manifest.json")
        with open(path) as f:
            m = json.load(f)
        edit(m)
        with open(path, "w") as f:
            json.dump(m, f, indent=2)
        return store

    def test_each_numeric_field(self):
        def setter(*keys, value):
            def edit(m):
                d = m
                for k in keys[:-1]:
                    d = d[k]
                d[keys[-1]] = value(d[keys[-1]])
            return edit

        cases = [
            (setter("num_records", value=lambda v: 4000000000), '"num_records"'),
            (setter("num_records", value=lambda v: v + 1), '"num_records"'),
            (setter("num_entries", value=lambda v: v + 1), '"num_entries"'),
            (setter("num_directories", value=lambda v: v + 1), '"num_directories"'),
            (setter("num_jpeg", value=lambda v: v - 1), '"num_jpeg"'),
            (setter("num_passthrough", value=lambda v: v + 1), '"num_passthrough"'),
            (lambda m: m["passthrough_by_reason"].update(extra=5), '"passthrough_by_reason"'),
            (setter("options", "images_per_record", value=lambda v: 0),
             '"options.images_per_record"'),
            (setter("options", "images_per_record", value=lambda v: 2),
             '"options.images_per_record"'),
            (setter("options", "max_input_scans", value=lambda v: 0), '"options.max_input_scans"'),
            (setter("source_jpeg_bytes", value=lambda v: 10 ** 15), '"source_jpeg_bytes"'),
            (setter("level_bytes", value=lambda v: [x * 1000 for x in v]), '"level_bytes[0]"'),
            (setter("level_bytes", value=lambda v: v[::-1]), '"level_bytes[1]"'),
            (setter("jpeg_level_bytes", value=lambda v: [x + 10 ** 9 for x in v]),
             '"jpeg_level_bytes[0]"'),
        ]
        mnt = os.path.join(WORK, "mnt-tampered")
        os.makedirs(mnt, exist_ok=True)
        for edit, field in cases:
            store = self.tampered_store(edit)
            with self.subTest(field=field, tool="pcrfs"):
                (rc, _, err), peak = run_with_peak_rss([PCRFS, store, mnt, "-f"])
                self.assertEqual(rc, 1, err)
                self.assertIn("manifest.json: ", err)
                self.assertIn(field, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertLess(peak, self.RSS_LIMIT_KIB)
                self.assertFalse(is_mounted(mnt))
            with self.subTest(field=field, tool="pcr verify"):
                (rc, out, err), peak = run_with_peak_rss([PCR, "verify", store])
                self.assertEqual(rc, 1, out + err)
                self.assertIn("manifest.json: ", err)
                self.assertIn(field, err)
                self.assertLess(peak, self.RSS_LIMIT_KIB)

    def test_verify_recounts_what_opening_cannot(self):
        # Consistent sums, wrong facts: only a walk of the entries sees them.
        def edit(m):
            m["source_bytes"] += 7
            m["level_bytes"] = [x + 1 for x in m["level_bytes"]]
        store = self.tampered_store(edit)
        p = subprocess.run([PCR, "verify", store], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn('manifest.json: "source_bytes": says', p.stdout)
        self.assertIn('manifest.json: "level_bytes[0]": says', p.stdout)


class StaleMountTest(unittest.TestCase):
    def test_mount_after_kill_9_names_the_command_that_clears_it(self):
        mnt = os.path.join(WORK, "mnt-stale")
        os.makedirs(mnt, exist_ok=True)
        m = Mount(STORE, mnt)
        try:
            m.__enter__()
            self.assertIn("scan1", os.listdir(mnt))  # the kernel caches the root's listing
            m.proc.send_signal(signal.SIGKILL)
            m.proc.wait(timeout=20)
            self.assertTrue(is_mounted(mnt), "a killed daemon leaves its mount behind")
            for args in ([], ["-f"], ["-o", "scans=2"]):
                p = run_pcrfs(STORE, mnt, *args)
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertEqual(p.stderr.strip(),
                                 f"pcrfs: {mnt}: a previous pcrfs mount here has died; "
                                 f"run: fusermount3 -u {mnt}")
            run(["fusermount3", "-u", mnt])
            self.assertFalse(is_mounted(mnt))
            with Mount(STORE, mnt):
                self.assertIn("scan1", os.listdir(mnt))
        finally:
            m.__exit__(None, None, None)

    def test_live_mount_is_named(self):
        mnt = os.path.join(WORK, "mnt-live")
        with Mount(STORE, mnt):
            p = run_pcrfs(STORE, mnt)
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("a pcrfs store is already mounted here", p.stderr)


class VersionTest(unittest.TestCase):
    def test_pcrfs_says_its_own_version_first(self):
        # Into a pipe (fully buffered), where libfuse's child fusermount3 used to print first.
        cmake = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                             "CMakeLists.txt")
        with open(cmake) as f:
            version = re.search(r"project\(pcrfs VERSION (\S+)", f.read()).group(1)
        p = run_pcrfs("--version")
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.splitlines()
        self.assertEqual(lines[0], f"pcrfs {version}")
        self.assertTrue(any("FUSE" in line for line in lines[1:]), p.stdout)


def tree_bytes(root):
    return sum(os.lstat(os.path.join(d, n)).st_size
               for d, _, names in os.walk(root) for n in names)


class StatfsTest(unittest.TestCase):
    """df shows the source dataset's bytes as the size, the mounted level's bytes as used (what
    du of the tree adds up) and the difference, the bytes the level saves, as available: never
    100% at a level smaller than the source."""

    def test_df_size_is_the_source_and_used_is_the_level(self):
        unit = 4096
        source = tree_bytes(os.path.join(WORK, "src"))
        cases = [("mnt-df-ladder", (), "scan10"), ("mnt-df-1", ("-o", "scans=1"), ""),
                 ("mnt-df-10", ("-o", "scans=10"), "")]
        for name, options, tree in cases:
            with self.subTest(options=options):
                mnt = os.path.join(WORK, name)
                with Mount(STORE, mnt, *options):
                    used = tree_bytes(os.path.join(mnt, tree))
                    sv = os.statvfs(mnt)
                    self.assertEqual(sv.f_frsize, unit)
                    self.assertEqual(sv.f_blocks, -(-max(source, used) // unit))
                    self.assertEqual(sv.f_blocks - sv.f_bfree, -(-used // unit))
                    self.assertEqual(sv.f_bavail, sv.f_bfree)
                    self.assertEqual(sv.f_ffree, 0)
                    self.assertEqual(sv.f_namemax, 255)
                    self.assertTrue(sv.f_flag & os.ST_RDONLY)
                    df = run(["df", "-B1", "--output=size,used,avail,pcent", mnt],
                             text=True).stdout.splitlines()[1].split()
                    self.assertEqual(int(df[0]), sv.f_blocks * unit)
                    self.assertEqual(int(df[1]), -(-used // unit) * unit)
                    self.assertEqual(int(df[2]), sv.f_bavail * unit)
                    if options == ("-o", "scans=1"):
                        self.assertLess(int(df[3].rstrip("%")), 50, df)


class FuseDevicePermissionTest(unittest.TestCase):
    """A user who may not open /dev/fuse (the usual failure in a container) gets libfuse's line
    and pcrfs's line on what to do, the two that README's troubleshooting row quotes."""

    def test_permission_denied_on_dev_fuse_says_what_to_do(self):
        if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
            self.skipTest("needs root, unshare and setpriv")
        work = tempfile.mkdtemp(prefix="pcrfs-devfuse-")
        try:
            os.chmod(work, 0o755)
            store = os.path.join(work, "store")
            shutil.copytree(STORE, store)
            run(["chmod", "-R", "a+rX", store])
            mnt = os.path.join(work, "mnt")
            os.makedirs(mnt, mode=0o755)
            # In a private mount namespace, /dev/fuse is a node only root may open; pcrfs runs
            # as nobody, as a container's user would without --device /dev/fuse.
            node = os.path.join(work, "fuse")
            run(["mknod", "-m", "0600", node, "c", "10", "229"])
            script = (f"mount --bind {node} /dev/fuse && exec setpriv --reuid=65534 "
                      f"--regid=65534 --clear-groups {PCRFS} {store} {mnt}")
            p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                               capture_output=True, text=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)
            self.assertEqual(p.stderr.splitlines(), [
                "fuse: failed to open /dev/fuse: Permission denied",
                "pcrfs: /dev/fuse: Permission denied: this user may not use FUSE; in a "
                "container, pass --device /dev/fuse --cap-add SYS_ADMIN (README: "
                "Troubleshooting)"], p.stderr)
            self.assertFalse(is_mounted(mnt))
            readme = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                  "README.md")
            with open(readme) as f:
                text = f.read()
            self.assertIn("`fuse: failed to open /dev/fuse: Permission denied`", text)
        finally:
            shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    unittest.main(verbosity=2)
