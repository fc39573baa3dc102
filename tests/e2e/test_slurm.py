#!/usr/bin/python3
"""A sharded build under a real scheduler (issue 45 item 2): Debian's Slurm 22.05 on this
machine (tests/slurm/slurm_cluster.py: munged, slurmctld and slurmd on loopback) runs the job
array and the dependent merge exactly as docs/sharding.md shows them (the script and the two
sbatch lines are read from that file; only the folders, the array size and the resources are
changed: 4 shards). The merged store equals a single `pcr build` byte for byte, and the merge
job removes the parts. One array task is preempted mid-build (scancel, its pcr held stopped
between its first record and the cancel, so the build cannot finish first) and requeued
(`scontrol requeue`): it resumes with `--resume`, keeping its finished records. Slurm counts a
cancelled task as failed, so the afterok merge never starts (DependencyNeverSatisfied): the
docs' merge line is submitted again without the dependency, as docs/sharding.md says, and the
store is still identical.

The output is a folder every task shares (here a local one); PCR_SLURM_OUTPUT (a parameter of
the test, default a temporary folder) names where the parts and the store go, so that once
`pcr build` writes to object storage the same test can run with s3://BUCKET/PREFIX.

Skipped unless slurm-wlm is installed (tests/slurm/install.sh); needs root."""

import os
import re
import signal
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "slurm"))

from pcrtest import PCR, TempDirTest, photo, run, save_jpeg, store_bytes  # noqa: E402
import slurm_cluster  # noqa: E402

SHARDS = 4
# The docs' script keeps pcr build's default of 1,024 images per record: 9 records, so that
# every shard has two or three and task 2 can be stopped between its first and its last.
IMAGES = 9 * 1024 - 300


def doc_snippets():
    """The job script and the submit lines of docs/sharding.md's Slurm section."""
    with open(os.path.join(TOP, "docs", "sharding.md")) as f:
        text = f.read()
    section = text.split("## Slurm job array", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    if len(blocks) != 2:
        raise AssertionError(f"docs/sharding.md's Slurm section has {len(blocks)} sh blocks, "
                             "not 2 (the job script and the submit lines)")
    return blocks[0], blocks[1]


def pids_of(pattern):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if pattern in cmd:
            out.append(int(pid))
    return out


@unittest.skipIf(slurm_cluster.available(), slurm_cluster.available() or "")
@unittest.skipIf(os.geteuid() != 0, "slurmd needs root")
class SlurmShardsTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.shared = TempDirTest()
        cls.shared.setUp()
        cls.src = cls.shared.path("shared", "imagenet")
        for i in range(IMAGES):
            save_jpeg(photo(64 + i % 9, 48 + i % 5, seed=900 + i),
                      os.path.join(cls.src, f"n{i % 16:08d}", f"img{i:05d}.JPEG"), quality=90,
                      progressive=False)
        cls.reference = cls.shared.path("reference.pcr")
        # The docs' build options (the defaults): the single build gets the same.
        run([PCR, "build", cls.src, cls.reference, "--quiet"])
        # The node declares what the docs' script asks for: 4 tasks of 8 CPUs and 8G each.
        cls.cluster = slurm_cluster.SlurmCluster(cpus=32, memory_mb=4 * 8192).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.cluster.__exit__(None, None, None)
        cls.shared.tearDown()

    def scripts(self):
        """The docs' script and submit lines, pointed at this test's folders, 4 tasks."""
        script, submit = doc_snippets()
        output = os.environ.get("PCR_SLURM_OUTPUT") or self.path("shared")
        parts = os.path.join(output, "parts")
        store = os.path.join(output, "imagenet.pcr")
        for text in ("/shared/imagenet", "/shared/parts", "--array=0-31"):
            self.assertIn(text, script + submit)
        script = script.replace("/shared/parts", parts).replace("/shared/imagenet", self.src)
        path = self.path("build-shards.sbatch")
        submit = (submit.replace("/shared/parts", parts)
                  .replace("/shared/imagenet.pcr", store)
                  .replace("--array=0-31", f"--array=0-{SHARDS - 1}")
                  .replace("build-shards.sbatch", path))
        with open(path, "w") as f:
            f.write(script)
        return submit, store, parts

    def submit(self, lines):
        """Runs the docs' submit lines with bash in the test's folder (Slurm writes each task's
        output there); returns the array's job id."""
        env = {**os.environ, **self.cluster.env,
               "PATH": f"{os.path.dirname(os.path.realpath(PCR))}:{self.cluster.env['PATH']}"}
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", lines + '\necho "array=$jobid"\n'],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                           cwd=self.tmp)
        self.assertEqual(p.returncode, 0, p.stderr + self.cluster.logs())
        return re.search(r"array=(\d+)", p.stdout).group(1)

    def merge_job(self, array_id):
        """The job that depends on the array (the docs' merge)."""
        p = self.cluster.run("squeue", "-h", "-t", "all", "-o", "%i %E")
        for line in p.stdout.splitlines():
            job, _, dep = line.partition(" ")
            if f"afterok:{array_id}" in dep:
                return job
        self.fail(f"no job depends on {array_id}: {p.stdout}")

    def assert_same_store(self, store, parts):
        self.wait_until(lambda: not os.path.exists(parts), "the merge job removes the parts")
        a, b = store_bytes(self.reference), store_bytes(store)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs from the single build")

    def test_job_array_and_dependent_merge(self):
        submit, store, parts = self.scripts()
        array_id = self.submit(submit)
        self.wait_until(lambda: os.path.exists(os.path.join(store, "index.pcri")),
                        "the dependent merge writes the store", array_id=array_id)
        self.assert_same_store(store, parts)

    def test_scancel_mid_build_then_requeue_resumes(self):
        submit, store, parts = self.scripts()
        array_id = self.submit(submit)
        merge = self.merge_job(array_id)
        victim = f"{array_id}_2"
        # A record is finished once the draft's .build/N.members is written (its file under
        # records/ may still be half written: a resume builds such a record again).
        partial_state = os.path.join(parts, "part-2.partial", ".build")
        pids = []

        def first_record_written():
            pids[:] = pids_of(f"--shard 2/{SHARDS}")
            self.assertFalse(os.path.exists(os.path.join(parts, "part-2", "part.json")),
                             "task 2 finished before it could be preempted")
            return pids and os.path.isdir(partial_state) and any(
                n.endswith(".members") for n in os.listdir(partial_state))

        self.wait_until(first_record_written, "task 2 writes its first record", array_id,
                        poll=0.01)
        for pid in pids:  # held still: it cannot finish before the cancel lands
            os.kill(pid, signal.SIGSTOP)
        kept = sorted(n for n in os.listdir(partial_state) if n.endswith(".members"))
        self.cluster.run("scancel", victim)
        self.wait_until(lambda: self.state(victim) == "CANCELLED", "scancel", array_id)
        self.assertFalse(os.path.exists(os.path.join(parts, "part-2")))
        self.cluster.run("scontrol", "requeue", victim)
        # A requeued job waits until the cancelled run's job credential has expired (AuthInfo
        # cred_expire: 120 s by default, 10 s in this cluster). Forcing it earlier (scontrol
        # update StartTime=now) races with slurmd, which refuses a job whose credential it
        # revoked: "Job credential revoked", and the task fails for good.
        self.wait_until(lambda: self.state(victim) == "PENDING", "requeue", array_id)
        self.wait_until(lambda: self.state(victim) == "COMPLETED", "the requeued task", array_id)
        with open(os.path.join(self.tmp, f"slurm-{array_id}_2.out")) as f:
            out = f.read()
        m = re.search(r"(\d+) records kept", out)
        self.assertTrue(m, out)
        self.assertGreaterEqual(int(m.group(1)), len(kept), out)
        # The cancel counts as a failure for afterok, requeued or not.
        self.wait_until(lambda: "DependencyNeverSatisfied" in self.cluster.run(
            "squeue", "-h", "-j", merge, "-o", "%r").stdout, "the merge job's reason", array_id)
        self.assertFalse(os.path.exists(store))
        # docs/sharding.md: cancel it and submit the merge line again without the dependency.
        self.cluster.run("scancel", merge)
        self.assertIn("--dependency=afterok:$jobid --wrap", submit)
        lines = submit.replace("--dependency=afterok:$jobid ", "")
        jobid_line = next(line for line in lines.splitlines() if line.startswith("jobid="))
        self.submit(lines.replace(jobid_line, f"jobid={array_id}"))
        self.wait_until(lambda: os.path.exists(os.path.join(store, "index.pcri")),
                        "the merge writes the store", array_id)
        self.assert_same_store(store, parts)

    def state(self, job):
        return self.cluster.job_states(job).get(job)

    def wait_until(self, ready, what, array_id=None, timeout=300, poll=0.2):
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                states = self.cluster.job_states(array_id) if array_id else {}
                self.fail(f"{what}: not within {timeout} s; jobs {states}\n"
                          f"{self.cluster.run('squeue', '-a', '-t', 'all', check=False).stdout}"
                          f"\n{self.cluster.logs()}")
            time.sleep(poll)


if __name__ == "__main__":
    # Exit 77 (CTest's SKIP_RETURN_CODE) where Slurm cannot run, so a missing scheduler shows
    # as skipped, not passed.
    if slurm_cluster.available() or os.geteuid() != 0:
        print(f"skipped: {slurm_cluster.available() or 'needs root'}", file=sys.stderr)
        sys.exit(77)
    unittest.main()
