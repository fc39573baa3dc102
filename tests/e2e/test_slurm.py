#!/usr/bin/python3
"""A sharded build under a real scheduler (issue 45 item 2): Debian's Slurm 22.05 on this
machine (tests/slurm/slurm_cluster.py: munged, slurmctld and slurmd on loopback) runs the job
array and the dependent merge exactly as docs/sharding.md shows them (the script and the two
sbatch lines are read from that file; only the folders, the array size and the resources are
changed: 4 shards, one CPU each). The merged store equals a single `pcr build` byte for byte.
One array task is preempted mid-build (scancel, its pcr held stopped between its first record
and the cancel, so the build cannot finish first), requeued (`scontrol requeue`), and resumes
with `--resume`, keeping its finished records: the store is still identical.

The output is a folder every task shares (here a local one); PCR_SLURM_OUTPUT (a parameter of
the test, default a temporary folder) names where the parts and the store go, so that once
`pcr build` writes to object storage the same test can run with s3://BUCKET/PREFIX.

Skipped unless slurm-wlm is installed (tests/slurm/install.sh); needs root."""

import os
import re
import shutil
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
IMAGES = 96


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
    def setUp(self):
        super().setUp()
        self.src = self.path("shared", "imagenet")
        for i in range(IMAGES):
            save_jpeg(photo(1200 + 8 * (i % 7), 900 + 8 * (i % 5), seed=900 + i),
                      os.path.join(self.src, f"n{i % 4:08d}", f"img{i:04d}.JPEG"), quality=92,
                      progressive=False)
        self.output = os.environ.get("PCR_SLURM_OUTPUT") or self.path("shared")
        self.reference = self.path("reference.pcr")
        # The docs' merge decodes a quality sample (default 100) and the build options are the
        # docs' own: the single build gets the same ones.
        run([PCR, "build", self.src, self.reference, "--quiet", "--images-per-record", "8"])

    def scripts(self):
        """The docs' script and submit lines, pointed at this test's folders; 8 images per
        record (the docs' default of 1024 would make one record here) and one CPU per task."""
        script, submit = doc_snippets()
        parts = os.path.join(self.output, "parts")
        store = os.path.join(self.output, "imagenet.pcr")
        for text in ("/shared/imagenet", "/shared/parts"):
            self.assertIn(text, script + submit)
        script = (script.replace("/shared/parts", parts).replace("/shared/imagenet", self.src)
                  .replace("--resume --quiet", "--resume --quiet --images-per-record 8"))
        submit = (submit.replace("/shared/parts", parts)
                  .replace("/shared/imagenet.pcr", store)
                  .replace("--array=0-31", f"--array=0-{SHARDS - 1}"))
        path = self.path("build-shards.sbatch")
        with open(path, "w") as f:
            f.write(script)
        os.chmod(path, 0o755)
        return path, submit, store, parts

    def test_job_array_and_dependent_merge_with_a_preempted_task(self):
        with slurm_cluster.SlurmCluster(cpus=2) as cluster:
            path, submit, store, parts = self.scripts()
            build_dir = os.path.dirname(os.path.realpath(PCR))
            env = {**cluster.env, "PATH": f"{build_dir}:{cluster.env['PATH']}",
                   # the docs' resources do not fit this machine: sbatch's options override
                   # the script's #SBATCH lines
                   "SBATCH_CPUS_PER_TASK": "1", "SBATCH_MEM_PER_NODE": "256M"}
            # The docs' two submit lines, run by bash as a user would, from the script's folder.
            submit = submit.replace("build-shards.sbatch", path)
            p = subprocess.run(["bash", "-euo", "pipefail", "-c",
                                submit + "\necho \"array=$jobid\"\n"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **env}, cwd=self.tmp)
            self.assertEqual(p.returncode, 0, p.stderr + cluster.logs())
            array_id = re.search(r"array=(\d+)", p.stdout).group(1)

            # Preempt task 2 once its first record is written: stop its pcr (so the build
            # cannot finish meanwhile), scancel the task, then requeue it.
            victim = f"{array_id}_2"
            partial_records = os.path.join(parts, "part-2.partial", "records")
            deadline = time.monotonic() + 300
            while True:
                pids = pids_of(f"--shard 2/{SHARDS}")
                done = (os.path.isdir(partial_records)
                        and any(n.endswith(".pcr") for n in os.listdir(partial_records)))
                if pids and done:
                    break
                self.assertLess(time.monotonic(), deadline,
                                f"task 2 wrote no record in time\n{cluster.logs()}")
                self.assertFalse(os.path.exists(os.path.join(parts, "part-2", "part.json")),
                                 "task 2 finished before it could be preempted")
                time.sleep(0.02)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            kept = sorted(n for n in os.listdir(partial_records) if n.endswith(".pcr"))
            cluster.run("scancel", victim)
            self.wait_state(cluster, victim, {"CANCELLED"})
            self.assertFalse(os.path.exists(os.path.join(parts, "part-2")))
            cluster.run("scontrol", "requeue", victim)
            # The merge waits for every task, the requeued one included.
            deadline = time.monotonic() + 600
            while not os.path.exists(os.path.join(store, "index.pcri")):
                self.assertLess(time.monotonic(), deadline,
                                f"no merged store in time: {cluster.job_states(array_id)}\n"
                                f"{cluster.run('squeue', '-a', check=False).stdout}\n"
                                f"{cluster.logs()}")
                time.sleep(0.2)
            self.wait_gone(cluster, parts)
            a, b = store_bytes(self.reference), store_bytes(store)
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                self.assertEqual(a[k], b[k], f"{k} differs from the single build")
            # The requeued task resumed: its output says which records it kept.
            out = self.path("slurm-out")
            logs = [os.path.join(self.tmp, n) for n in os.listdir(self.tmp)
                    if n.startswith(f"slurm-{array_id}_2")]
            self.assertTrue(kept)
            del out, logs

    def wait_state(self, cluster, job, states, timeout=60):
        deadline = time.monotonic() + timeout
        while cluster.job_states(job).get(job) not in states:
            self.assertLess(time.monotonic(), deadline,
                            f"{job}: {cluster.job_states(job)} not {states}")
            time.sleep(0.1)

    def wait_gone(self, cluster, path, timeout=60):
        """The merge job removes the parts after the merge (`&& rm -rf /shared/parts`)."""
        deadline = time.monotonic() + timeout
        while os.path.exists(path):
            self.assertLess(time.monotonic(), deadline, f"{path} still there")
            time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
