#!/usr/bin/python3
"""The README's main command, end to end: tests/demo.sh (sample from Debian wallpapers, build,
mount, the level table measured through the mount)."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

from pcrtest import PCR, PCRFS, is_mounted

HERE = os.path.dirname(os.path.abspath(__file__))


class DemoTest(unittest.TestCase):
    def test_demo_builds_mounts_and_measures_every_level(self):
        work = tempfile.mkdtemp(prefix="pcrfs-demo-")
        mnt = os.path.join(work, "mnt")
        env = dict(os.environ, PCRFS_DEMO_DIR=work)
        # The binaries under test first on PATH, as `./setup.sh demo` installs them.
        env["PATH"] = os.pathsep.join([os.path.dirname(PCR), os.path.dirname(PCRFS),
                                       env.get("PATH", "")])
        try:
            p = subprocess.run(["bash", os.path.join(HERE, "..", "demo.sh")], env=env,
                               capture_output=True, text=True, timeout=900)
            self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
            self.assertTrue(is_mounted(mnt), "the demo leaves the store mounted")
            rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)%\s+(\S+)", p.stdout, re.M)
            self.assertEqual([int(r[0]) for r in rows], list(range(1, 11)), p.stdout)
            sizes = [int(r[2]) for r in rows]
            self.assertEqual(sizes, sorted(sizes))
            self.assertLess(float(rows[0][3]), 20.0, "level 1 is a small fraction of the source")
            self.assertEqual(rows[9][4], "lossless")
            psnr = [float(r[4]) for r in rows[:9]]
            self.assertEqual(psnr, sorted(psnr))
            self.assertIn(f"fusermount3 -u {mnt}", p.stdout)
        finally:
            if is_mounted(mnt):
                subprocess.run(["fusermount3", "-u", mnt])
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)
