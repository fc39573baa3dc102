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

The output is a folder every task shares (here a local one; PCR_SLURM_OUTPUT, a parameter of the
test, names another). The same two runs go again with the docs' script into a bucket ("Into a
bucket"): the parts and the merged store in the S3 test server of tests/remote (s3rver behind a
front that checks every signature), the credentials and the endpoint in the submitting shell's
AWS_* variables, which sbatch passes to the jobs. The store, downloaded, equals the single build
byte for byte; the cancelled task's local draft is removed before its requeue (as if it ran on
another node), so it resumes from the bucket's listing alone; no part.json, index.pcri or
manifest.json is in the bucket before the part or the store is whole.

Skipped unless slurm-wlm is installed (tests/slurm/install.sh); needs root; the bucket runs need
tests/remote/install.sh."""

import hashlib
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
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import PCR, TempDirTest, photo, run, save_jpeg, store_bytes  # noqa: E402
from remote_servers import S3Server  # noqa: E402
import slurm_cluster  # noqa: E402

SHARDS = 4
# The docs' script keeps pcr build's default of 1,024 images per record: 9 records, so that
# every shard has two or three and task 2 can be stopped between its first and its last.
IMAGES = 9 * 1024 - 300
BUCKET = "pcrfs-slurm"
ACCESS_KEY = "AKIDPCRFSSLURM"
SECRET_KEY = "slurm/test+secret"


def doc_snippets(bucket=False):
    """The job script and the submit lines of docs/sharding.md's Slurm section (bucket: of its
    "Into a bucket" part)."""
    with open(os.path.join(TOP, "docs", "sharding.md")) as f:
        text = f.read()
    section = text.split("## Slurm job array", 1)[1].split("\n## ", 1)[0]
    local, _, into_bucket = section.partition("\n### Into a bucket\n")
    blocks = re.findall(r"```sh\n(.*?)```", into_bucket if bucket else local, re.S)
    if len(blocks) != 2:
        raise AssertionError(f"docs/sharding.md's Slurm section {'(into a bucket) ' * bucket}"
                             f"has {len(blocks)} sh blocks, not 2 (the job script and the "
                             "submit lines)")
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
        cls.s3 = S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY)
        cls.s3.__enter__()
        # The node declares what the docs' script asks for: 4 tasks of 8 CPUs and 8G each.
        try:
            cls.cluster = slurm_cluster.SlurmCluster(cpus=32, memory_mb=4 * 8192).__enter__()
        except BaseException:
            cls.s3.__exit__(None, None, None)
            raise

    @classmethod
    def tearDownClass(cls):
        cls.cluster.__exit__(None, None, None)
        cls.s3.__exit__(None, None, None)
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

    def bucket_scripts(self, name):
        """The docs' script and submit lines into a bucket, pointed at this test's source and at
        s3://BUCKET/name/, 4 tasks; (submit lines, the parts' prefix, the store's prefix)."""
        script, submit = doc_snippets(bucket=True)
        for text in ("/data/imagenet", "s3://B/parts/part-$I", "s3://B/parts s3://B/imagenet",
                     "--array=0-31", "build-shards-s3.sbatch"):
            self.assertIn(text, script + submit)
        path = self.path("build-shards-s3.sbatch")
        with open(path, "w") as f:
            f.write(script.replace("/data/imagenet", self.src)
                    .replace("s3://B/", f"s3://{BUCKET}/{name}/"))
        submit = (submit.replace("s3://B/", f"s3://{BUCKET}/{name}/")
                  .replace("--array=0-31", f"--array=0-{SHARDS - 1}")
                  .replace("build-shards-s3.sbatch", path))
        return submit, f"{name}/parts", f"{name}/imagenet"

    def bucket_env(self):
        """What the submitting shell exports for the bucket runs: the S3 test server's key and
        endpoint (sbatch passes them to every job), and the nodes' cache folder (root's
        default is /var/cache/pcrfs)."""
        os.makedirs(self.path("home"), exist_ok=True)
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.s3.endpoint, "AWS_REGION": self.s3.region,
                "PCRFS_CACHE_DIR": self.path("cache"), "HOME": self.path("home"),
                "no_proxy": "127.0.0.1,localhost"}

    def requeue_and_resume(self, victim, array_id, kept):
        """Requeues the cancelled task `victim` and waits for it to finish; asserts that its
        --resume kept at least `kept` records; returns its output."""
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
        self.assertGreaterEqual(int(m.group(1)), kept, out)
        return out

    def keys(self, prefix):
        """{key under prefix/: size} in the bucket."""
        return self.s3.sizes(prefix, BUCKET)

    def assert_same_bucket_store(self, prefix):
        """The store at prefix, downloaded, equals the single build (every object but
        provenance.json)."""
        dst = self.path("downloaded")
        shutil.rmtree(dst, ignore_errors=True)
        client = self.s3.client()
        try:
            for key in self.keys(prefix):
                path = os.path.join(dst, key)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                client.download_file(BUCKET, f"{prefix}/{key}", path)
        finally:
            client.close()
        a, b = store_bytes(self.reference), store_bytes(dst)
        self.assertEqual(sorted(a), sorted(b))
        for k in a:
            self.assertEqual(a[k], b[k], f"{k} differs from the single build")

    def assert_whole_parts(self, parts):
        keys = self.keys(parts)
        for i in range(SHARDS):
            self.assertIn(f"part-{i}/part.json", keys)
        self.assertFalse([k for k in keys if "/.build/" in k], keys)

    def submit(self, lines, env=None):
        """Runs the docs' submit lines with bash in the test's folder (Slurm writes each task's
        output there), with env's variables exported too; returns the array's job id."""
        env = {**{k: v for k, v in os.environ.items()
                  if not k.startswith(("AWS_", "PCRFS_")) or env is None},
               **(env or {}), **self.cluster.env,
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
        self.requeue_and_resume(victim, array_id, len(kept))
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

    def test_bucket_job_array_and_dependent_merge(self):
        submit, parts, store = self.bucket_scripts("array")
        array_id = self.submit(submit, self.bucket_env())
        merge = self.merge_job(array_id)
        # index.pcri is written last: once a mount would take the prefix for a store, every
        # object of it is there.
        self.wait_until(lambda: "index.pcri" in self.keys(store),
                        "the dependent merge writes the store", array_id=array_id)
        self.assert_same_bucket_store(store)
        self.assert_whole_parts(parts)
        self.wait_until(lambda: self.state(merge) == "COMPLETED", "the merge job", array_id)

    def test_bucket_scancel_mid_build_then_requeue_resumes_from_the_listing(self):
        submit, parts, store = self.bucket_scripts("requeue")
        env = self.bucket_env()
        array_id = self.submit(submit, env)
        merge = self.merge_job(array_id)
        victim = f"{array_id}_2"
        part = f"{parts}/part-2"
        pids = []

        def first_record_uploaded():
            pids[:] = pids_of(f"--shard 2/{SHARDS}")
            keys = self.keys(part)
            self.assertNotIn("part.json", keys, "task 2 finished before it could be preempted")
            return pids and any(k.endswith(".members") for k in keys)

        self.wait_until(first_record_uploaded, "task 2 uploads its first record", array_id,
                        poll=0.02)
        for pid in pids:  # held still: it cannot finish before the cancel lands
            os.kill(pid, signal.SIGSTOP)
        keys = self.keys(part)
        kept = [k for k in keys if k.startswith(".build/") and k.endswith(".members")]
        self.assertTrue(kept, keys)
        for name in ("part.json", "index.pcri", "manifest.json"):
            self.assertNotIn(name, keys)
        self.cluster.run("scancel", victim)
        self.wait_until(lambda: self.state(victim) == "CANCELLED", "scancel", array_id)
        self.assertNotIn("part.json", self.keys(part))
        # The requeued task runs "on another node": the cancelled run's local draft is gone
        # (object_target.cc keeps it in PCRFS_CACHE_DIR/build/<sha256 of the URL>[:16]).
        draft = os.path.join(env["PCRFS_CACHE_DIR"], "build", hashlib.sha256(
            f"s3://{BUCKET}/{part}".encode()).hexdigest()[:16])
        self.assertTrue(os.path.isdir(draft), os.listdir(os.path.dirname(draft)))
        shutil.rmtree(draft)
        out = self.requeue_and_resume(victim, array_id, len(kept))
        self.assertNotIn(SECRET_KEY, out)
        self.wait_until(lambda: "DependencyNeverSatisfied" in self.cluster.run(
            "squeue", "-h", "-j", merge, "-o", "%r").stdout, "the merge job's reason", array_id)
        self.assertEqual(self.keys(store), {})
        self.assert_whole_parts(parts)
        self.cluster.run("scancel", merge)
        self.assertIn("--dependency=afterok:$jobid --wrap", submit)
        lines = submit.replace("--dependency=afterok:$jobid ", "")
        jobid_line = next(line for line in lines.splitlines() if line.startswith("jobid="))
        self.submit(lines.replace(jobid_line, f"jobid={array_id}"), env)
        self.wait_until(lambda: "index.pcri" in self.keys(store), "the merge writes the store",
                        array_id)
        self.assert_same_bucket_store(store)

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
