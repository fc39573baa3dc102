#!/usr/bin/env bash
# Installs Debian's Slurm (slurm-wlm 22.05: slurmctld, slurmd, the client commands; munge comes
# with it) for tests/e2e/test_slurm.py, which starts its own munged, slurmctld and slurmd on
# loopback (tests/slurm/slurm_cluster.py) and skips when they are missing. `setup.sh test` runs
# it (pcrfs itself needs no scheduler). Idempotent; PCRFS_SKIP_APT=1 does nothing.
set -euo pipefail

if [ "${PCRFS_SKIP_APT:-0}" = 1 ]; then exit 0; fi
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
if dpkg-query -W -f='${Status}' slurm-wlm 2>/dev/null | grep -q "install ok installed"; then
  exit 0
fi
echo "==> installing Debian's slurm-wlm for tests/e2e/test_slurm.py"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends slurm-wlm >/dev/null
