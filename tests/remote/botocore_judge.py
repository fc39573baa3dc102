#!/usr/bin/python3
"""The judge of pcrfs's AWS credential chain: which credentials Debian's botocore (1.29) resolves
from an environment and a profile, as an SDK user would get them (tests/remote/README.md).

  judge(env, profile=None) -> {"method": "assume-role", "access_key": "ASIA...", ...}
                              or {"error": "CredentialRetrievalError: ..."}

It runs botocore.session.Session(profile=profile).get_credentials() in a subprocess with exactly
env as its environment (HOME, AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE and PATH for a
credential_process included; nothing of the caller's leaks in), so the judge and pcrfs read the
same variables and files.

The one deviation from stock botocore 1.29: it has no AWS_ENDPOINT_URL_STS (1.31 added endpoint
overrides), so when env sets it, the subprocess makes every STS client botocore creates for the
credential chain use that endpoint_url (a wrapper around Session.create_client; with no region
configured such a client signs for us-east-1, as it would for STS's global endpoint). Nothing
else is patched: the IMDS endpoint comes from AWS_EC2_METADATA_SERVICE_ENDPOINT and the container
endpoint from AWS_CONTAINER_CREDENTIALS_FULL_URI, both of which 1.29 honours.

What 1.29 cannot judge: AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (it sends no Authorization), a
container endpoint at AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (always 169.254.170.2) or at a host
other than 127.0.0.1/localhost/169.254.170.2 (EKS Pod Identity's 169.254.170.23 is refused),
and renewal timing (it refreshes 15/10 minutes before expiry, so short-lived credentials are
re-fetched on every use, and it stretches IMDS credentials that are about to expire).
"""

import json
import os
import subprocess
import sys

PYTHON = "/usr/bin/python3"  # Debian's botocore lives there

CHILD = r"""
import json, os, sys

def patch_sts_endpoint(url):
    # The judge's only deviation (botocore 1.29 has no AWS_ENDPOINT_URL_STS): STS clients the
    # credential providers create go to url. Without a region configured they sign for us-east-1,
    # as they do for STS's global endpoint (an endpoint_url alone would be NoRegionError).
    import botocore.session
    create_client = botocore.session.Session.create_client

    def create_client_with_sts_endpoint(self, service_name, *args, **kwargs):
        if service_name == "sts" and not args and kwargs.get("endpoint_url") is None:
            kwargs["endpoint_url"] = url
            if kwargs.get("region_name") is None and self.get_config_variable("region") is None:
                kwargs["region_name"] = "us-east-1"
        return create_client(self, service_name, *args, **kwargs)

    botocore.session.Session.create_client = create_client_with_sts_endpoint

def main():
    profile = sys.argv[1] or None
    with_secrets = sys.argv[2] == "1"
    if os.environ.get("AWS_ENDPOINT_URL_STS"):
        patch_sts_endpoint(os.environ["AWS_ENDPOINT_URL_STS"])
    import botocore.session
    try:
        creds = botocore.session.Session(profile=profile).get_credentials()
        if creds is None:
            return {"error": "NoCredentials: botocore found no credentials"}
        frozen = creds.get_frozen_credentials()  # one refresh at most, like a first request
        out = {"method": creds.method, "access_key": frozen.access_key,
               "has_token": frozen.token is not None}
        expiry = getattr(creds, "_expiry_time", None)
        out["expiry"] = expiry.isoformat() if expiry is not None else None
        if with_secrets:
            out.update(secret_key=frozen.secret_key, token=frozen.token)
        return out
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}

print(json.dumps(main()))
"""


def judge(env, profile=None, secrets=False, timeout=60):
    """What botocore resolves from exactly env (and profile; None: AWS_PROFILE or default).

    Returns {"method", "access_key", "has_token", "expiry": ISO or None} (with secrets=True
    also "secret_key" and "token" as strings), or {"error": "..."} when botocore fails or finds
    nothing. method is botocore's name of the source: env, assume-role-with-web-identity,
    shared-credentials-file, config-file, custom-process, assume-role, container-role, iam-role.
    A profile that fails in botocore and not in pcrfs (or the reverse) is a finding."""
    env = {str(k): str(v) for k, v in env.items()}
    proc = subprocess.run([PYTHON, "-I", "-c", CHILD, profile or "", "1" if secrets else "0"],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": f"the judge exited {proc.returncode} without an answer: "
                         f"{proc.stderr.strip()[-2000:]}"}


def main(argv=None):
    """CLI: botocore_judge.py [--profile P]: judges this process's environment."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile")
    args = ap.parse_args(argv)
    out = judge(dict(os.environ), args.profile)
    print(json.dumps(out))
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
