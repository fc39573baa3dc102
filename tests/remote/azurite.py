#!/usr/bin/python3
"""Azurite, the Azure Blob Storage emulator, as a test server for pcrfs (tests/remote/README.md):
a module and a CLI, like remote_servers.py.

  Azurite()                        azurite-blob on 127.0.0.1 at a free port, in a temp folder
  .upload(dir, container, prefix)  uploads a folder with Microsoft's Python SDK (Debian's
                                   python3-azure), signed with the account key
  .sas(container, expiry, perms)   a container SAS made by the same SDK
  .endpoint                        http://127.0.0.1:PORT/devstoreaccount1 (path style)

Azurite serves the well-known development account devstoreaccount1 (ACCOUNT_KEY below, published
by Microsoft) and checks Shared Key signatures and SAS tokens as Azure does. The CLI runs it until
SIGTERM/SIGINT and writes a ready file with JSON once it answers:

  azurite.py blob [--root DIR --container C --prefix P] [--port N] --ready-file F

Run with /usr/bin/python3 (the SDK is Debian's). Needs tests/remote/install.sh (node_modules).
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote_servers import (ServerError, die_with_parent, free_port, read_tail,  # noqa: E402
                            serve_until_signal, stop_process, wait_until_answers)

AZURITE_BLOB = os.path.join(HERE, "node_modules", ".bin", "azurite-blob")
NODE = shutil.which("node") or "/usr/bin/node"
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/"
               "KBHBeksoGMGw==")
START_TIMEOUT = 60.0


def sdk():
    """Microsoft's blob SDK (Debian's python3-azure); a clear error when it is missing."""
    try:
        import azure.storage.blob as blob
    except ImportError as e:
        raise ServerError(f"the Azure SDK is missing ({e}): run tests/remote/install.sh "
                          f"(Debian's python3-azure) and use /usr/bin/python3") from e
    return blob


class Azurite:
    """azurite-blob on 127.0.0.1 with its data in a temporary --location, removed on exit.
    --loose accepts headers Azurite does not implement; --skipApiVersionCheck any
    x-ms-version (the SDK's may be newer than Azurite knows)."""

    def __init__(self, port=None):
        self.port = port
        self.tmp = None
        self.proc = None

    @property
    def pid(self):
        return self.proc.pid

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    url = endpoint

    @property
    def connection_string(self):
        return (f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
                f"BlobEndpoint={self.endpoint};")

    @property
    def log_path(self):
        return os.path.join(self.tmp, "azurite.log")

    def __enter__(self):
        if not os.path.exists(AZURITE_BLOB):
            raise ServerError(f"{AZURITE_BLOB} is missing: run tests/remote/install.sh (it needs "
                              f"the npm registry once)")
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-azurite-")
        try:
            fixed = self.port
            for _ in range(20):
                self.port = fixed or free_port()
                if self.try_start():
                    return self
                if fixed:
                    break
            raise ServerError(f"azurite: could not listen on a free port:\n"
                              f"{read_tail(self.log_path)}")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def try_start(self):
        location = os.path.join(self.tmp, f"data-{self.port}")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [NODE, AZURITE_BLOB, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                 "--location", location, "--skipApiVersionCheck", "--loose", "--silent"],
                cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent)
        try:
            # Any answer will do: an unsigned request gets 403 once it listens.
            wait_until_answers(f"{self.endpoint}?comp=list", self.proc, self.log_path,
                               timeout=START_TIMEOUT)
            return True
        except ServerError:
            if self.proc.poll() is not None and "EADDRINUSE" in read_tail(self.log_path):
                return False
            raise

    def __exit__(self, *exc):
        # azurite-blob's SIGTERM handler waits 10 s before it exits (a test paid that per
        # class); its data is a temp folder removed right after, so it gets 1 s, then SIGKILL.
        stop_process(self.proc, timeout=1)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def ready_info(self):
        return {"endpoint": self.endpoint, "account": ACCOUNT, "pid": self.pid}

    # ------------------------------------------------------------------ the SDK's side

    def service(self, credential=None):
        """A BlobServiceClient for the emulator (the account key unless credential given)."""
        blob = sdk()
        if credential is None:
            credential = {"account_name": ACCOUNT, "account_key": ACCOUNT_KEY}
        return blob.BlobServiceClient(account_url=self.endpoint, credential=credential)

    def create_container(self, container, public=False):
        """Creates container (no error if it exists); returns a ContainerClient for it (close it,
        or use it in a with statement)."""
        c = self.service().get_container_client(container)
        try:
            c.create_container(public_access="container" if public else None)
        except Exception as e:  # ResourceExistsError: already there
            if type(e).__name__ != "ResourceExistsError":
                c.close()
                raise
        return c

    def upload(self, root, container, prefix=""):
        """Uploads every file under root as PREFIX/RELATIVE/PATH (block blobs) into container,
        created if needed. Returns {blob name: size}."""
        if not os.path.isdir(root):
            raise ServerError(f"azurite upload: {root} is not a directory")
        prefix = prefix.strip("/")
        out = {}
        with self.create_container(container) as c:
            for dirpath, _, files in os.walk(root):
                for name in sorted(files):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, root).replace(os.sep, "/")
                    blob_name = f"{prefix}/{rel}" if prefix else rel
                    with open(path, "rb") as f:
                        c.upload_blob(blob_name, f, overwrite=True)
                    out[blob_name] = os.path.getsize(path)
        return out

    def sas(self, container, expiry=None, permissions="rl", start=None):
        """A container SAS (the query string, without '?') signed with the account key by the
        SDK. expiry: a datetime (default: an hour from now) or seconds from now."""
        blob = sdk()
        now = datetime.datetime.now(datetime.timezone.utc)
        if expiry is None:
            expiry = now + datetime.timedelta(hours=1)
        elif isinstance(expiry, (int, float)):
            expiry = now + datetime.timedelta(seconds=expiry)
        return blob.generate_container_sas(
            account_name=ACCOUNT, container_name=container, account_key=ACCOUNT_KEY,
            permission=blob.ContainerSasPermissions.from_string(permissions), expiry=expiry,
            start=start)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("blob", help="azurite-blob with the devstoreaccount1 account")
    p.add_argument("--root", help="folder uploaded into --container (with the SDK)")
    p.add_argument("--container", default="pcrfs")
    p.add_argument("--prefix", default="")
    p.add_argument("--port", type=int)
    p.add_argument("--ready-file")
    args = ap.parse_args(argv)

    class Serving(Azurite):
        def __enter__(self):
            super().__enter__()
            try:
                if args.root:
                    self.upload(args.root, args.container, args.prefix)
                else:
                    self.create_container(args.container).close()
            except BaseException:
                self.__exit__(None, None, None)
                raise
            return self

        def ready_info(self):
            info = super().ready_info()
            info["container"] = args.container
            return info

    try:
        return serve_until_signal(Serving(port=args.port), args.ready_file)
    except (ServerError, OSError, subprocess.CalledProcessError, urllib.error.URLError) as e:
        print(f"azurite {args.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
