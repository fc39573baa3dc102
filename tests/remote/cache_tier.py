#!/usr/bin/python3
"""The shared cache tier of contrib/cache-tier (docs/cache-tier.md) as a test server: nginx
with the configuration `pcr-cache-tier` writes, on 127.0.0.1 at a free port, in front of one
origin (a test server of remote_servers.py or azurite.py). A context manager, like those:

    with CacheTier("http://127.0.0.1:PORT", slice_size="64k") as tier:
        tier.endpoint          # http://127.0.0.1:PORT: nodes mount s3://pcr/STORE with it
        tier.mount_options()   # ["endpoint=...", "no_sign", "fetch_align=SLICE"] (+ header_file)

env holds the origin's credentials (AWS_* or AZURE_STORAGE_SAS_TOKEN): nginx gets them in its
environment only, never in its configuration."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote_servers import (NGINX, ServerError, die_with_parent, free_port,  # noqa: E402
                            read_tail, stop_process, wait_until_answers)

GENERATOR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "contrib", "cache-tier",
                         "pcr-cache-tier")


class CacheTier:
    def __init__(self, origin, slice_size="256k", bucket=None, token=None, endpoint=None,
                 env=None, workers=2, cache_size="10g", extra_args=()):
        self.origin = origin
        self.slice_size = slice_size
        self.bucket = bucket
        self.token = token
        self.endpoint_of_origin = endpoint
        self.env = dict(env or {})
        self.workers = workers
        self.cache_size = cache_size
        self.extra_args = list(extra_args)
        self.prefix = None
        self.proc = None
        self.port = None
        self.bucket_name = None
        self.keep_access_log = None  # a path: the access log is copied there at exit

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    url = endpoint

    @property
    def pid(self):
        return self.proc.pid

    @property
    def cache_dir(self):
        return os.path.join(self.prefix, "cache")

    def __enter__(self):
        self.prefix = tempfile.mkdtemp(prefix="pcrfs-tier-")
        try:
            for _ in range(20):
                self.port = free_port()
                if self.try_start():
                    return self
            raise ServerError("cache tier: no free port after 20 tries")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def generate(self):
        args = [sys.executable, GENERATOR, "--origin", self.origin,
                "--out", os.path.join(self.prefix, "conf"), "--cache-dir", self.cache_dir,
                "--listen", f"127.0.0.1:{self.port}", "--slice", self.slice_size,
                "--workers", str(self.workers), "--cache-size", self.cache_size,
                *self.extra_args]
        if self.bucket:
            args += ["--bucket", self.bucket]
        if self.endpoint_of_origin:
            args += ["--endpoint", self.endpoint_of_origin]
        if self.token:
            token_file = os.path.join(self.prefix, "token")
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.token + "\n")
            args += ["--token-file", token_file]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise ServerError(f"pcr-cache-tier exited {p.returncode}: {p.stderr.strip()}")
        self.bucket_name = re.search(r"mount s3://([^/]+)/", p.stdout).group(1)
        return os.path.join(self.prefix, "conf", "nginx.conf")

    def try_start(self):
        conf = self.generate()
        log = os.path.join(self.prefix, "conf", "error.log")
        open(log, "w").close()
        env = {"PATH": "/usr/sbin:/usr/bin:/bin", **self.env}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [NGINX, "-p", os.path.dirname(conf), "-c", conf, "-e", log, "-g",
                 "daemon off;" + (" user root root;" if os.geteuid() == 0 else "")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                preexec_fn=die_with_parent)
        try:
            wait_until_answers(self.endpoint + "/", self.proc, log)
            return True
        except ServerError:
            if "Address already in use" in read_tail(log):
                stop_process(self.proc)
                self.proc = None
                return False
            raise

    def __exit__(self, *exc):
        stop_process(self.proc)
        log = os.path.join(self.prefix or "", "conf", "access.log")
        if self.keep_access_log and os.path.exists(log):
            shutil.copy(log, self.keep_access_log)
        if self.prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def mount_options(self, header_file=None):
        """The -o options of a node mounting s3://BUCKET/STORE through this tier."""
        opts = [f"endpoint={self.endpoint}", "no_sign", f"fetch_align={self.slice_size}"]
        if header_file:
            opts.append(f"header_file={header_file}")
        return opts

    def store_url(self, store):
        return f"s3://{self.bucket_name}/{store}"

    def error_log(self):
        return read_tail(os.path.join(self.prefix, "conf", "error.log"), limit=100000)
