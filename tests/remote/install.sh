#!/usr/bin/env bash
# Installs what the remote-store test servers need (tests/remote/README.md): nginx, AWS's own S3
# clients (awscli, boto3), Microsoft's Azure SDK for Python (python3-azure: azurite.py uploads
# and makes SAS tokens with it), and the npm packages pinned in package-lock.json (s3rver, AWS's
# SigV4 signer, Azurite) into tests/remote/node_modules. Idempotent; after the first run it needs
# no network (PCRFS_SKIP_APT=1 skips apt-get; npm is skipped while node_modules matches the lock).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

deps=(nginx-light libnginx-mod-http-js awscli python3-boto3 python3-azure curl iproute2)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then deps+=(nodejs npm); fi

if [ "${PCRFS_SKIP_APT:-0}" != 1 ]; then
  missing=()
  for p in "${deps[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing Debian packages for the remote test servers: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo_cmd[@]}" apt-get update -qq
    "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# npm writes node_modules/.package-lock.json on install: equal to the lock's packages, nothing to do.
stamp="$here/node_modules/.pcrfs-lock.sha256"
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$here/node_modules/s3rver" ] &&
   [ -d "$here/node_modules/azurite" ]; then
  exit 0
fi
echo "==> installing npm packages into $here/node_modules"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error)
echo "$want" >"$stamp"
