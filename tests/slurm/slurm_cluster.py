#!/usr/bin/python3
"""A one-machine Slurm cluster for tests (issue 45 item 2): Debian's slurm-wlm 22.05, munged,
slurmctld and slurmd on loopback at free ports, every file under a temporary folder. A context
manager and a CLI:

    with SlurmCluster(cpus=32, memory_mb=65536) as c:
        c.env                    # SLURM_CONF etc.: run sbatch, squeue, scancel, scontrol with it
        c.run("sbatch", "--parsable", "--wrap", "true")

    slurm_cluster.py --ready-file F     # runs until SIGTERM; F gets {"SLURM_CONF": ...}

tests/slurm/install.sh installs slurm-wlm (munge comes with it). Needs root (slurmd runs the
jobs as the submitting user, and as root it may run them as anyone)."""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from remote_servers import die_with_parent, free_port, read_tail, stop_process  # noqa: E402

SBIN = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
START_TIMEOUT = 60.0


class SlurmError(RuntimeError):
    pass


def which(name):
    return shutil.which(name, path=os.pathsep.join(SBIN))


def available():
    """None when slurmctld, slurmd, sbatch and munged are installed, else what is missing."""
    missing = [n for n in ("slurmctld", "slurmd", "sbatch", "munged") if not which(n)]
    return f"{', '.join(missing)} not installed: run tests/slurm/install.sh" if missing else None


SLURM_CONF = """\
ClusterName=pcrtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={prefix}/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={prefix}/state
SlurmdSpoolDir={prefix}/spool
SlurmctldPidFile={prefix}/slurmctld.pid
SlurmdPidFile={prefix}/slurmd.pid
SlurmctldLogFile={prefix}/slurmctld.log
SlurmdLogFile={prefix}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=sched_interval=1
MpiDefault=none
# The node as configured, not as detected: a job script written for a real cluster's nodes
# (--cpus-per-task=8, --mem=8G) runs unchanged here; nothing enforces either.
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=5
InactiveLimit=0
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmCluster:
    def __init__(self, cpus=2, memory_mb=2048):
        """cpus, memory_mb: the node as slurm.conf declares it (config_overrides: whatever
        this machine has), so jobs that ask for more than it has still run."""
        self.cpus = cpus
        self.memory_mb = memory_mb
        self.prefix = None
        self.procs = []
        self.env = None

    def __enter__(self):
        why = available()
        if why:
            raise SlurmError(why)
        self.prefix = tempfile.mkdtemp(prefix="pcrfs-slurm-")
        os.chmod(self.prefix, 0o755)  # slurmd's job scripts and spool live here
        try:
            self.start_munge()
            self.start_slurm()
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def start_munge(self):
        d = os.path.join(self.prefix, "munge")
        os.makedirs(d, mode=0o700)
        key = os.path.join(d, "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        log = os.path.join(d, "munged.log")
        self.procs.append(subprocess.Popen(
            [which("munged"), "--foreground", "--force", "--key-file", key,
             "--socket", os.path.join(d, "munge.socket"), "--pid-file",
             os.path.join(d, "munged.pid"), "--log-file", log, "--seed-file",
             os.path.join(d, "munge.seed")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent))
        self.wait_for(lambda: os.path.exists(os.path.join(d, "munge.socket")), "munged", log)

    def start_slurm(self):
        host = socket.gethostname().split(".")[0]
        conf = os.path.join(self.prefix, "slurm.conf")
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.prefix, sub))
        with open(conf, "w") as f:
            f.write(SLURM_CONF.format(host=host, ctld_port=free_port(), slurmd_port=free_port(),
                                      prefix=self.prefix, cpus=self.cpus,
                                      memory_mb=self.memory_mb))
        self.env = {"SLURM_CONF": conf,
                    "PATH": os.pathsep.join(SBIN)}
        env = {**os.environ, **self.env}
        for daemon in ("slurmctld", "slurmd"):
            args = [which(daemon), "-D", "-f", conf]
            if daemon == "slurmctld":
                args.append("-c")  # a clean start: no state of an earlier run
            out = open(os.path.join(self.prefix, daemon + ".out"), "wb")
            self.procs.append(subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                               stderr=subprocess.STDOUT, env=env,
                                               preexec_fn=die_with_parent))
            out.close()
        self.wait_for(self.node_idle, "slurmd", os.path.join(self.prefix, "slurmd.log"))

    def node_idle(self):
        p = self.run("sinfo", "-h", "-o", "%t", check=False)
        return p.returncode == 0 and p.stdout.strip() in ("idle", "mix", "alloc")

    def wait_for(self, ready, what, log):
        deadline = time.monotonic() + START_TIMEOUT
        while not ready():
            for p in self.procs:
                if p.poll() is not None:
                    raise SlurmError(f"{p.args[0]} exited {p.returncode}:\n{read_tail(log)}\n"
                                     f"{self.logs()}")
            if time.monotonic() > deadline:
                raise SlurmError(f"{what} not ready within {START_TIMEOUT:.0f} s:\n"
                                 f"{read_tail(log)}\n{self.logs()}")
            time.sleep(0.1)

    def logs(self):
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            path = os.path.join(self.prefix or "", name)
            if os.path.exists(path):
                out.append(f"--- {name}\n{read_tail(path, 3000)}")
        return "\n".join(out)

    def run(self, *args, check=True, env=None):
        """Runs a Slurm client command against this cluster; CompletedProcess (text)."""
        p = subprocess.run([which(args[0]) or args[0], *args[1:]], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env={**os.environ, **self.env, **(env or {})})
        if check and p.returncode != 0:
            raise SlurmError(f"{' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
        return p

    def job_states(self, job_id):
        """{job id as squeue/sacct name it (ID or ID_TASK): state} from scontrol."""
        p = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        out = {}
        for line in p.stdout.splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            task = fields.get("ArrayTaskId")
            name = (f"{fields.get('ArrayJobId')}_{task}" if task and fields.get("ArrayJobId")
                    else fields.get("JobId"))
            out[name] = fields.get("JobState")
        return out

    def __exit__(self, *exc):
        if self.env:
            # Jobs first, while slurmd can still hear from their slurmstepd.
            self.run("scancel", "--full", "--user", "root", check=False)
            deadline = time.monotonic() + 20
            while (time.monotonic() < deadline
                   and self.run("squeue", "-h", check=False).stdout.strip()):
                time.sleep(0.2)
        for p in reversed(self.procs):
            stop_process(p, timeout=15)
        # A slurmstepd that outlived slurmd (it detaches: not a child of ours) is ended here.
        for pid in self.stray_stepds():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def stray_stepds(self):
        """Pids of the slurmstepd processes of this cluster (SLURM_CONF in their environment)."""
        if not self.env:
            return []
        want = f"SLURM_CONF={self.env['SLURM_CONF']}".encode()
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if not f.read().startswith(b"slurmstepd"):
                        continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        out.append(int(pid))
            except OSError:
                continue
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpus", type=int, default=32)
    ap.add_argument("--memory-mb", type=int, default=65536)
    ap.add_argument("--ready-file", required=True)
    args = ap.parse_args(argv)
    with SlurmCluster(cpus=args.cpus, memory_mb=args.memory_mb) as c:
        with open(args.ready_file, "w") as f:
            json.dump(c.env, f)
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
        signal.signal(signal.SIGINT, lambda *a: stop.append(1))
        while not stop:
            signal.pause()
    return 0


if __name__ == "__main__":
    sys.exit(main())
