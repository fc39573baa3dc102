#!/usr/bin/python3
"""Credentials that outlive a mount (issue 30), end to end: real pcrfs mounts of an s3:// store
on the project's S3 front (which accepts only the currently valid keys and answers 400
ExpiredToken for expired ones), with credentials from loopback fakes of STS, IMDSv2 and the
container endpoint (tests/remote/cred_servers.py), and Debian's botocore as the judge
(tests/remote/botocore_judge.py): for each configuration pcrfs must pick the same source and key
as botocore from exactly the same environment and files, and fail where botocore fails.

- ChainTest: every source of the chain, and the failures (one line naming the s3:// URL and the
  sources tried, no secret anywhere).
- NoCredentialsTest: a private bucket without credentials fails at mount; -o no_sign mounts a
  public one.
- SoakTest: credentials that live 12 s, renewed in the background while 4 readers read 4 cold
  epochs: 0 failed reads, every byte equal to pcr cat of the local store.
- HeaderFileRotationTest: nginx's bearer token rotated while readers read (-o header_file).
- SighupTest: a rewritten credentials file, the old key removed from the front, SIGHUP.

Loopback only; needs tests/remote/install.sh. Run as root (drop_caches makes epochs cold).
Bounded waits only; no speed bound."""

import contextlib
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.join(os.path.dirname(HERE), "remote")
sys.path.insert(0, REMOTE)

from pcrtest import (PCR, PCRFS, Mount, is_mounted, pcr_cat, pcr_extract, photo,  # noqa: E402
                     read_tree, run, save_jpeg, sha)
from botocore_judge import judge  # noqa: E402
from cred_servers import ContainerServer, ImdsServer, StsServer  # noqa: E402
from forward_proxy import ForwardProxy  # noqa: E402
from remote_servers import Nginx, S3Server  # noqa: E402

PYTHON = "/usr/bin/python3"
CRED_SERVERS = os.path.join(REMOTE, "cred_servers.py")
BUCKET = "pcrfs-creds"
PREFIX = "datasets/store"
URL = f"s3://{BUCKET}/{PREFIX}"
PUBLIC_BUCKET = "pcrfs-public"
# The front's long-term keys: the uploader's, and others that profiles hold.
STATIC_AK, STATIC_SK = "AKIDPCRFSSTATICKEY", "static/secret+key/0123456789"
ALT_AK, ALT_SK = "AKIDPCRFSALTERNATE", "alternate/secret+key/0123456789"
SOURCE_AK, SOURCE_SK = "AKIDPCRFSSOURCEKEY", "source/secret+key/0123456789"
HUP_OLD_AK, HUP_OLD_SK = "AKIDPCRFSHUPOLDKEY", "hup-old/secret+key/0123456789"
HUP_NEW_AK, HUP_NEW_SK = "AKIDPCRFSHUPNEWKEY", "hup-new/secret+key/9876543210"
ROLE = "arn:aws:iam::123456789012:role/pcrfs-reader"
ENV_ROLE = "arn:aws:iam::123456789012:role/pcrfs-from-environment"
WEB_TOKEN = "eyJhbGciOiJSUzI1NiJ9.pcrfs-web-identity-1.c2lnbmF0dXJl"
CONTAINER_TOKEN = "container-auth-token/pcrfs+1"
BEARER_TOKENS = [f"bearer-{i}-{'x' * 8}{i}" for i in range(6)]
CHAIN_LIFETIME = 600  # s: IMDS and the container hand out one key for 300 s, botocore and pcrfs
# s: issue 30's soak (20 s there). The daemon renews min(10 min, lifetime / 4) before expiry
# (RenewalMargin), so epochs paced at 1.1 lifetimes see the same number of renewals at any
# lifetime; above RenewingCredentials::kRefusedAfterRenewal (10 s), so that an ExpiredToken
# refusal may still renew as it would with real (>= 15 min) credentials.
SOAK_LIFETIME = 12
N_FILES = 96
LEVELS = (3, 10)
SERVERS = contextlib.ExitStack()


def masked(access_key):
    """remote/request_signer.cc's MaskedKeyId: first and last four characters."""
    return access_key[:4] + "..." + access_key[-4:] if len(access_key) >= 12 else "..."


def wait_for(predicate, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def drop_caches():
    """The kernel's page cache (pcrfs's files included) forgets clean pages: the next epoch is
    cold (the daemon's own caches are 1M, far below the dataset)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def write_atomic(path, text, mode=0o600):
    """Replaces path with text in one rename, as a rotating agent (kubelet, a sidecar) does."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def remote_xattr(mnt):
    return json.loads(os.getxattr(mnt, "user.pcrfs.remote"))


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root: drop_caches makes every epoch cold")
    try:
        tmp = SERVERS.enter_context(tempfile.TemporaryDirectory(prefix="creds-e2e-"))
        Base.tmp = tmp
        src = os.path.join(tmp, "src")
        for i in range(N_FILES):
            save_jpeg(photo(480 + 16 * (i % 4), 360 + 8 * (i % 3), seed=3000 + i),
                      os.path.join(src, f"class{i % 4}", f"img{i:03d}.jpg"), quality=92)
        Base.store = os.path.join(tmp, "www", "store")
        os.makedirs(os.path.dirname(Base.store))
        run([PCR, "build", src, Base.store, "--quiet", "--images-per-record", "4",
             "--quality-sample", "0"])
        Base.want = {k: pcr_extract(Base.store, k) for k in LEVELS}
        Base.files = sorted(Base.want[LEVELS[0]])
        s3 = Base.s3 = SERVERS.enter_context(
            S3Server(Base.store, BUCKET, STATIC_AK, STATIC_SK, prefix=PREFIX))
        for ak, sk in ((ALT_AK, ALT_SK), (SOURCE_AK, SOURCE_SK)):
            s3.add_key(ak, sk)
        Base.sts = SERVERS.enter_context(StsServer(
            s3, roles=[ROLE, ENV_ROLE], source_keys={SOURCE_AK: SOURCE_SK},
            web_identity_token=WEB_TOKEN, lifetime=SOAK_LIFETIME))
        Base.imds = SERVERS.enter_context(ImdsServer(s3, lifetime=CHAIN_LIFETIME))
        Base.container = SERVERS.enter_context(ContainerServer(
            s3, auth_token=CONTAINER_TOKEN, lifetime=CHAIN_LIFETIME))
    except BaseException:
        SERVERS.close()
        raise


def tearDownModule():
    SERVERS.close()


class Base(unittest.TestCase):
    """The module's store, servers and fakes; a fresh HOME (with .aws/) per test; helpers that
    mount, read and look for secrets."""

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="home-", dir=self.tmp)
        os.makedirs(os.path.join(self.home, ".aws"))
        self.process_log = os.path.join(self.home, "minted.jsonl")
        self.extra_secrets = set()

    def env(self, **extra):
        """What pcrfs and the judge both get: a private HOME, no IMDS unless asked, loopback
        never through a proxy. None removes a variable."""
        env = {"HOME": self.home, "PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true",
               "AWS_DEFAULT_REGION": "us-east-1", "no_proxy": "127.0.0.1,localhost",
               "NO_PROXY": "127.0.0.1,localhost"}
        for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if name in os.environ:
                env[name] = os.environ[name]
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def write(self, rel, text):
        path = os.path.join(self.home, rel)
        write_atomic(path, text)
        return path

    def secrets(self):
        """Every secret and token in play: none may appear in pcrfs's output or xattrs."""
        out = {STATIC_SK, ALT_SK, SOURCE_SK, HUP_OLD_SK, HUP_NEW_SK, WEB_TOKEN, CONTAINER_TOKEN,
               *BEARER_TOKENS, *self.extra_secrets}
        for fake in (self.sts, self.imds, self.container):
            for c in fake.minted:
                out.update((c["secret_key"], c["token"]))
        if os.path.exists(self.process_log):
            with open(self.process_log) as f:
                for c in map(json.loads, f):
                    out.update((c["secret_key"], c["token"]))
        return out

    def assert_no_secret(self, *texts):
        secrets = self.secrets()
        for text in texts:
            for s in secrets:
                self.assertNotIn(s, text, "a secret or token leaked")

    def mount(self, name, env, *options, url=URL, endpoint=True):
        mnt = os.path.join(self.tmp, "mnt-" + name)
        opts = [f"cache_dir={os.path.join(self.tmp, 'cache-' + name)}", *options]
        if endpoint:
            opts.insert(0, "endpoint=" + self.s3.endpoint)
        return Mount(url, mnt, "-o", ",".join(opts), env=env, timeout=60)

    def pcrfs_fails(self, name, env, *options, url=URL, endpoint=True):
        """A mount that must fail: exit 1 with one line on stderr, naming the s3:// URL, no
        secret in it. Returns the line."""
        mnt = os.path.join(self.tmp, "mnt-" + name)
        os.makedirs(mnt, exist_ok=True)
        opts = [f"cache_dir={os.path.join(self.tmp, 'cache-' + name)}", *options]
        if endpoint:
            opts.insert(0, "endpoint=" + self.s3.endpoint)
        p = subprocess.run([PCRFS, url, mnt, "-f", "-o", ",".join(opts)], env=env,
                           capture_output=True, text=True, timeout=120)
        self.assertFalse(is_mounted(mnt))
        self.assertEqual(p.returncode, 1, p.stderr)
        lines = p.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertIn(url, lines[0])
        self.assert_no_secret(p.stdout, p.stderr)
        return lines[0]

    def signed_by_key(self):
        return self.s3.front_stats()["signed_by_key"]

    def keys_used_since(self, before):
        """The access key ids the S3 front accepted signatures from since `before`."""
        return {k for k, n in self.signed_by_key().items() if n > before.get(k, 0)}

    def assert_reads_exact(self, mnt, level=LEVELS[0]):
        got = read_tree(os.path.join(mnt, f"scan{level}"))
        self.assertEqual(sorted(got), sorted(self.want[level]))
        for rel, data in got.items():
            self.assertEqual(sha(data), sha(self.want[level][rel]), f"scan{level}/{rel}")
        # One file also against pcr cat of the local store itself.
        rel = self.files[len(self.files) // 2]
        with open(os.path.join(mnt, "scan10", rel), "rb") as f:
            self.assertEqual(f.read(), pcr_cat(self.store, rel, 10), rel)


# ---- 1. the chain, judged by botocore ---------------------------------------------------------

# botocore's name of a source -> what pcrfs's "auth.source" says of the same one.
SOURCE_WORDS = {
    "env": "environment",
    "assume-role-with-web-identity": "web identity",
    "shared-credentials-file": "profile ",
    "config-file": "profile ",
    "custom-process": "(credential_process)",
    "assume-role": "(assume role ",
    "container-role": "container",
    "iam-role": "instance metadata",
}


class ChainTest(Base):
    def mount_like_botocore(self, name, env, profile=None, provenance=None, options=()):
        """judge(env, profile) resolves credentials; pcrfs mounts with the same environment (and
        -o profile=profile): it names the same kind of source, signs with the same key (a
        long-term or metadata key: the very same id; a key minted per call (STS, a process):
        one minted the same way, checked by provenance(judge's key, pcrfs's keys)), reads
        byte-exact, and shows no secret. Returns (judge's answer, pcrfs's auth JSON)."""
        want = judge(env, profile)
        self.assertNotIn("error", want, want)
        before = self.signed_by_key()
        opts = list(options) + ([f"profile={profile}"] if profile else [])
        with self.mount(name, env, *opts) as m:
            self.assert_reads_exact(m.mnt)
            xattr = remote_xattr(m.mnt)
            auth = xattr["client"]["auth"]
            self.assertEqual(xattr["client"]["failed"], 0, xattr["client"])
            log = m.log()
        used = self.keys_used_since(before)
        self.assertTrue(used, "the S3 front saw no signed request")
        self.assertIn(SOURCE_WORDS[want["method"]], auth["source"], (want, auth))
        self.assertIn(auth["access_key_id"], {masked(k) for k in used}, (auth, used))
        if provenance is None:
            self.assertEqual(used, {want["access_key"]}, want)
            self.assertEqual(auth["access_key_id"], masked(want["access_key"]))
        else:
            provenance(want["access_key"], used)
        self.assert_no_secret(log, json.dumps(xattr))
        return want, auth

    def test_environment_keys(self):
        want, auth = self.mount_like_botocore(
            "env", self.env(AWS_ACCESS_KEY_ID=STATIC_AK, AWS_SECRET_ACCESS_KEY=STATIC_SK))
        self.assertEqual(want["method"], "env")
        self.assertEqual(auth["source"], "environment")

    def test_environment_keys_win_over_aws_profile(self):
        # AWS_PROFILE names a profile with other keys: the environment's keys still come first.
        self.write(".aws/credentials", f"[alt]\naws_access_key_id = {ALT_AK}\n"
                                       f"aws_secret_access_key = {ALT_SK}\n")
        want, _ = self.mount_like_botocore(
            "env-over-profile", self.env(AWS_ACCESS_KEY_ID=STATIC_AK,
                                         AWS_SECRET_ACCESS_KEY=STATIC_SK, AWS_PROFILE="alt"))
        self.assertEqual((want["method"], want["access_key"]), ("env", STATIC_AK))

    def test_explicit_profile_option_wins_over_environment_keys(self):
        # -o profile=P is botocore's Session(profile=P) (the CLI's --profile): an explicit
        # profile takes the environment provider out of the chain.
        self.write(".aws/credentials", f"[alt]\naws_access_key_id = {ALT_AK}\n"
                                       f"aws_secret_access_key = {ALT_SK}\n")
        want, auth = self.mount_like_botocore(
            "profile-option", self.env(AWS_ACCESS_KEY_ID=STATIC_AK,
                                       AWS_SECRET_ACCESS_KEY=STATIC_SK), profile="alt")
        self.assertEqual((want["method"], want["access_key"]),
                         ("shared-credentials-file", ALT_AK))
        self.assertIn("alt", auth["source"])

    def test_static_profile_from_the_config_file(self):
        self.write(".aws/config", f"[profile alt]\naws_access_key_id = {ALT_AK}\n"
                                  f"aws_secret_access_key = {ALT_SK}\nregion = us-east-1\n")
        want, _ = self.mount_like_botocore("config-file", self.env(AWS_PROFILE="alt"))
        self.assertEqual((want["method"], want["access_key"]), ("config-file", ALT_AK))

    def sts_provenance(self, action, role, source=None):
        """Checks that pcrfs's keys were minted by the STS fake as the judge's was."""
        def check(judged, used):
            record = {r["access_key"]: r for r in self.sts.requests(status=200)}
            self.assertEqual(record[judged]["action"], action)
            self.assertEqual(record[judged]["role_arn"], role)
            self.assertEqual(record[judged]["source_access_key"], source)
            for key in used:
                self.assertIn(key, record, f"{key}: not minted by the STS fake")
                self.assertNotEqual(key, judged)  # each call mints: pcrfs made its own call
                self.assertEqual((record[key]["action"], record[key]["role_arn"],
                                  record[key]["source_access_key"]), (action, role, source))
        return check

    def test_web_identity(self):
        token_file = self.write("web-token", WEB_TOKEN)
        env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE,
                       AWS_ROLE_SESSION_NAME="pcrfs-e2e", **self.sts.env())
        before = len(self.sts.requests())
        want, auth = self.mount_like_botocore(
            "web-identity", env,
            provenance=self.sts_provenance("AssumeRoleWithWebIdentity", ROLE))
        self.assertEqual(want["method"], "assume-role-with-web-identity")
        self.assertIn("expires", auth)
        # Both called STS with the session name of AWS_ROLE_SESSION_NAME.
        calls = self.sts.requests()[before:]
        self.assertGreaterEqual(len(calls), 2)
        self.assertEqual({(r["action"], r["session_name"], r["status"]) for r in calls},
                         {("AssumeRoleWithWebIdentity", "pcrfs-e2e", 200)})

    def test_credential_process(self):
        command = shlex.join([PYTHON, CRED_SERVERS, "credential-process", "--s3-endpoint",
                              self.s3.endpoint, "--lifetime", str(CHAIN_LIFETIME),
                              "--log", self.process_log])
        self.write(".aws/config", f"[profile proc]\ncredential_process = {command}\n")

        def provenance(judged, used):
            with open(self.process_log) as f:
                minted = [c["access_key"] for c in map(json.loads, f)]
            self.assertIn(judged, minted)
            for key in used:
                self.assertIn(key, minted)
                self.assertNotEqual(key, judged)
        want, auth = self.mount_like_botocore("process", self.env(AWS_PROFILE="proc"),
                                              provenance=provenance)
        self.assertEqual(want["method"], "custom-process")
        self.assertEqual(auth["source"], "profile proc (credential_process)")

    def test_assume_role_with_source_profile(self):
        self.write(".aws/config", f"[profile app]\nrole_arn = {ROLE}\nsource_profile = base\n")
        self.write(".aws/credentials", f"[base]\naws_access_key_id = {SOURCE_AK}\n"
                                       f"aws_secret_access_key = {SOURCE_SK}\n")
        want, auth = self.mount_like_botocore(
            "assume-role", self.env(AWS_PROFILE="app", **self.sts.env()),
            provenance=self.sts_provenance("AssumeRole", ROLE, SOURCE_AK))
        self.assertEqual(want["method"], "assume-role")
        self.assertIn(ROLE, auth["source"])

    def test_assume_role_with_credential_source_environment(self):
        # Reachable only with an explicit profile: otherwise the environment's keys come first.
        self.write(".aws/config", f"[profile envrole]\nrole_arn = {ENV_ROLE}\n"
                                  f"credential_source = Environment\n")
        env = self.env(AWS_ACCESS_KEY_ID=SOURCE_AK, AWS_SECRET_ACCESS_KEY=SOURCE_SK,
                       **self.sts.env())
        want, _ = self.mount_like_botocore(
            "credential-source", env, profile="envrole",
            provenance=self.sts_provenance("AssumeRole", ENV_ROLE, SOURCE_AK))
        self.assertEqual(want["method"], "assume-role")

    def test_container_with_authorization_token(self):
        env = self.env(**self.container.env())
        before = len(self.container.requests(kind="credentials"))
        want, auth = self.mount_like_botocore("container", env)
        self.assertEqual(want["method"], "container-role")
        self.assertEqual(auth["source"], "container")
        mine = self.container.requests(kind="credentials")[before:]
        self.assertGreaterEqual(len(mine), 2)  # the judge's and pcrfs's
        self.assertEqual({r["authorization"] for r in mine}, {CONTAINER_TOKEN})

    def test_container_with_authorization_token_file(self):
        # botocore 1.29 cannot judge AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (it sends no
        # Authorization): it fails; pcrfs must succeed, judged against the fake's record.
        token_file = self.write("container-token", CONTAINER_TOKEN + "\n")
        env = self.env(AWS_CONTAINER_CREDENTIALS_FULL_URI=self.container.full_uri,
                       AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token_file)
        self.assertIn("error", judge(env))
        before = len(self.container.requests(kind="credentials"))
        used_before = self.signed_by_key()
        with self.mount("container-file", env) as m:
            self.assert_reads_exact(m.mnt)
            xattr = remote_xattr(m.mnt)
            log = m.log()
        mine = self.container.requests(kind="credentials")[before:]
        self.assertGreaterEqual(len(mine), 1)
        self.assertEqual({r["authorization"] for r in mine}, {CONTAINER_TOKEN})
        used = self.keys_used_since(used_before)
        self.assertTrue(used)
        for key in used:
            self.assertIsNotNone(self.container.lookup(key), key)
        auth = xattr["client"]["auth"]
        self.assertEqual(auth["source"], "container")
        self.assertIn(auth["access_key_id"], {masked(k) for k in used})
        self.assert_no_secret(log, json.dumps(xattr))

    def test_a_proxy_never_sees_the_container_request(self):
        # Issue 43: with http_proxy set and NO_PROXY=127.0.0.1,localhost, the proxy received
        # the container endpoint's request with its Authorization token (CURLOPT_NOPROXY
        # replaced the user's list). Then without any NO_PROXY: the store's requests go through
        # the proxy as configured (so it is in use), the credential endpoint's never.
        for name, no_proxy in (("users-list", "127.0.0.1,localhost"), ("none", None)):
            with self.subTest(no_proxy=no_proxy), ForwardProxy() as proxy:
                env = self.env(no_proxy=no_proxy, NO_PROXY=no_proxy, http_proxy=proxy.url,
                               HTTP_PROXY=proxy.url, **self.container.env())
                before = len(self.container.requests(kind="credentials"))
                with self.mount("proxy-" + name, env) as m:
                    self.assert_reads_exact(m.mnt)
                self.assertGreater(len(self.container.requests(kind="credentials")), before)
                seen = proxy.requests()
                self.assertFalse([r for r in seen if self.container.url in r["url"]],
                                 [r["url"] for r in seen])
                for r in seen:
                    self.assertNotIn(CONTAINER_TOKEN, json.dumps(r), r)
                if no_proxy is None:
                    self.assertTrue([r for r in seen if self.s3.endpoint in r["url"]],
                                    [r["url"] for r in seen])
                else:
                    self.assertEqual([r["url"] for r in seen], [])

    def test_imdsv2(self):
        env = self.env(AWS_EC2_METADATA_DISABLED=None, **self.imds.env())
        counts = self.imds.counts()
        want, auth = self.mount_like_botocore("imds", env)
        self.assertEqual(want["method"], "iam-role")
        self.assertEqual(auth["source"], "instance metadata (role pcrfs-test-role)")
        after = self.imds.counts()
        # IMDSv2: a session token first, every time (the judge's and pcrfs's).
        self.assertGreaterEqual(after["token"] - counts.get("token", 0), 2)
        self.assertEqual(after.get("unauthorized", 0), counts.get("unauthorized", 0))

    # -- where botocore fails, pcrfs fails

    def assert_both_fail(self, name, env, profile=None, botocore_says=None):
        want = judge(env, profile)
        self.assertIn("error", want, want)
        if botocore_says:
            self.assertIn(botocore_says, want["error"])
        line = self.pcrfs_fails(name, env, *([f"profile={profile}"] if profile else []))
        # pcr, where no mount is needed, fails the same way.
        p = subprocess.run([PCR, "cat", URL, self.files[0]], capture_output=True, text=True,
                           timeout=120, env=dict(env, AWS_ENDPOINT_URL_S3=self.s3.endpoint,
                                                 PCRFS_CACHE_DIR=os.path.join(
                                                     self.tmp, "pcr-cache-" + name),
                                                 **({"AWS_PROFILE": profile} if profile
                                                    else {})))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertIn(URL, p.stderr)
        self.assert_no_secret(p.stderr)
        return want["error"], line

    def test_named_profile_that_does_not_exist(self):
        self.write(".aws/credentials", f"[alt]\naws_access_key_id = {ALT_AK}\n"
                                       f"aws_secret_access_key = {ALT_SK}\n")
        for how, env, profile in (("AWS_PROFILE", self.env(AWS_PROFILE="nope"), None),
                                  ("option", self.env(), "nope")):
            with self.subTest(how=how):
                _, line = self.assert_both_fail("no-profile-" + how, env, profile,
                                                "ProfileNotFound")
                self.assertIn("profile 'nope' not found", line)

    def test_nothing_anywhere(self):
        error, line = self.assert_both_fail("nothing", self.env(), botocore_says="NoCredentials")
        for source in ("environment", "web identity", "profile 'default'", "container",
                       "instance metadata"):
            self.assertIn(source, line)

    def test_web_identity_with_a_token_sts_refuses(self):
        token_file = self.write("web-token", "not-the-token")
        env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE,
                       **self.sts.env())
        _, line = self.assert_both_fail("bad-web-token", env, botocore_says="InvalidIdentityToken")
        self.assertIn("InvalidIdentityToken", line)

    def test_assume_role_with_a_wrong_source_secret(self):
        self.write(".aws/config", f"[profile app]\nrole_arn = {ROLE}\nsource_profile = base\n")
        self.write(".aws/credentials", f"[base]\naws_access_key_id = {SOURCE_AK}\n"
                                       f"aws_secret_access_key = wrong-{SOURCE_SK}\n")
        self.extra_secrets.add("wrong-" + SOURCE_SK)
        _, line = self.assert_both_fail("bad-source", self.env(AWS_PROFILE="app", **self.sts.env()),
                                        botocore_says="SignatureDoesNotMatch")
        self.assertIn("SignatureDoesNotMatch", line)

    def test_container_with_a_wrong_authorization_token(self):
        env = self.env(AWS_CONTAINER_CREDENTIALS_FULL_URI=self.container.full_uri,
                       AWS_CONTAINER_AUTHORIZATION_TOKEN="wrong-" + CONTAINER_TOKEN)
        self.extra_secrets.add("wrong-" + CONTAINER_TOKEN)
        _, line = self.assert_both_fail("bad-container-token", env, botocore_says="403")
        self.assertIn("403", line)

    def test_failing_credential_process(self):
        self.write(".aws/config", "[profile broken]\ncredential_process = /bin/sh -c "
                                  "'echo SECRET-ON-STDOUT; echo cannot reach the vault >&2; "
                                  "exit 3'\n")
        self.extra_secrets.add("SECRET-ON-STDOUT")
        _, line = self.assert_both_fail("bad-process", self.env(AWS_PROFILE="broken"))
        self.assertIn("cannot reach the vault", line)


# ---- 2. no credentials for a private bucket; -o no_sign for a public one -----------------------


class NoCredentialsTest(Base):
    def test_private_bucket_without_credentials_fails_at_mount(self):
        env = self.env()
        self.assertIn("NoCredentials", judge(env).get("error", ""))
        before = self.s3.front_stats()["refused"].get("AccessDenied", 0)
        line = self.pcrfs_fails("private-anon", env)
        self.assertIn("no AWS credentials", line)
        for source in ("environment", "web identity", "profile 'default'", "container",
                       "instance metadata"):
            self.assertIn(source, line)
        self.assertIn("no_sign", line)
        self.assertGreater(self.s3.front_stats()["refused"].get("AccessDenied", 0), before)
        # -o no_sign on the private bucket: refused, and said so about the s3:// URL.
        line = self.pcrfs_fails("private-no-sign", env, "no_sign")
        self.assertIn("403", line)

    def test_no_sign_mounts_a_public_bucket(self):
        with S3Server(None, PUBLIC_BUCKET, STATIC_AK, STATIC_SK, allow_anonymous=True) as pub:
            pub.upload(self.store, prefix=PREFIX)
            stats = pub.front_stats()
            url = f"s3://{PUBLIC_BUCKET}/{PREFIX}"
            with Mount(url, os.path.join(self.tmp, "mnt-public"), "-o",
                       f"endpoint={pub.endpoint},no_sign,cache_dir="
                       f"{os.path.join(self.tmp, 'cache-public')}", env=self.env(),
                       timeout=60) as m:
                self.assert_reads_exact(m.mnt)
                auth = remote_xattr(m.mnt)["client"].get("auth")
            after = pub.front_stats()
            self.assertEqual(after["signed_ok"], stats["signed_ok"])
            self.assertGreater(after["anonymous"], stats["anonymous"])
            self.assertNotIn("access_key_id", json.dumps(auth))


# ---- 3. the soak ------------------------------------------------------------------------------

SOAK_READERS = 4
SOAK_EPOCHS = 4
SOAK_EPOCH_SECONDS = 1.1 * SOAK_LIFETIME  # paced: 4 epochs span > 4 lifetimes
SOAK_LEVEL = 10  # whole files: every epoch needs every record's every byte


class Readers:
    """`n` threads reading every file of an epoch (shuffled, split among them) through the mount,
    paced evenly over `seconds`, each read compared with the local store's bytes."""

    def __init__(self, mnt, want, files, n):
        self.mnt, self.want, self.files, self.n = mnt, want, files, n
        self.failures = []  # (level, rel, what)
        self.reads = 0
        self.lock = threading.Lock()

    def epoch(self, epoch, level, seconds):
        order = list(self.files)
        random.Random(epoch).shuffle(order)
        shares = [order[i::self.n] for i in range(self.n)]
        start = time.monotonic()

        def read_share(share):
            step = seconds / max(1, len(share))
            for i, rel in enumerate(share):
                delay = start + i * step - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                try:
                    with open(os.path.join(self.mnt, f"scan{level}", rel), "rb") as f:
                        data = f.read()
                    ok = data == self.want[level][rel]
                    what = None if ok else f"{len(data)} bytes differ from the store's"
                except OSError as e:
                    what = f"{type(e).__name__}: {e}"
                with self.lock:
                    self.reads += 1
                    if what:
                        self.failures.append((level, rel, what))

        threads = [threading.Thread(target=read_share, args=(s,)) for s in shares]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


class SoakTest(Base):
    def test_web_identity_credentials_renewed_across_four_cold_epochs(self):
        token_file = self.write("web-token", WEB_TOKEN)
        env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE,
                       AWS_ROLE_SESSION_NAME="pcrfs-soak", **self.sts.env())
        self.assertEqual(judge(env)["method"], "assume-role-with-web-identity")
        self.assertEqual(self.sts.lifetime, SOAK_LIFETIME)
        calls = lambda: self.sts.requests(session_name="pcrfs-soak",  # noqa: E731
                                          action="AssumeRoleWithWebIdentity", status=200)
        judged = len(calls())
        refused_before = dict(self.s3.front_stats()["refused"])
        used_before = self.signed_by_key()
        rotated_token = WEB_TOKEN + "-rotated"
        self.addCleanup(self.sts.rotate_web_identity_token, WEB_TOKEN)
        with self.mount("soak", env, "remote_cache=1M", "cache_size=1M", "disk_cache=0") as m:
            readers = Readers(m.mnt, self.want, self.files, SOAK_READERS)
            started = time.time()
            per_epoch = []
            for epoch in range(SOAK_EPOCHS):
                drop_caches()
                front_before = self.s3.front_stats()["bytes_to_client"]
                if epoch == 2:
                    # The identity provider rotates the projected token mid-run (EKS does so
                    # hourly): the file gets the new one, STS refuses the old one from now on.
                    write_atomic(token_file, rotated_token)
                    self.sts.rotate_web_identity_token(rotated_token)
                readers.epoch(epoch, SOAK_LEVEL, SOAK_EPOCH_SECONDS)
                per_epoch.append(self.s3.front_stats()["bytes_to_client"] - front_before)
            elapsed = time.time() - started
            xattr = remote_xattr(m.mnt)
            log = m.log()
        client, auth = xattr["client"], xattr["client"]["auth"]
        refused = {k: v - refused_before.get(k, 0)
                   for k, v in self.s3.front_stats()["refused"].items()
                   if v != refused_before.get(k, 0)}
        summary = (f"{readers.reads} reads in {elapsed:.0f} s, bytes per epoch {per_epoch}, "
                   f"auth {auth}, refused {refused}, retries {client['retries']}, "
                   f"failed {client['failed']} {client.get('failed_by_reason')}")
        print("soak:", summary, file=sys.stderr)
        self.assertGreater(elapsed, 4 * SOAK_LIFETIME, summary)
        self.assertEqual(readers.failures, [], summary)
        self.assertEqual(readers.reads, SOAK_EPOCHS * len(self.files))
        self.assertEqual(client["failed"], 0, summary)
        # Cold epochs: each one fetched most of the store's records again from S3 (the daemon's
        # caches hold 2M of them at most).
        records = sum(os.path.getsize(os.path.join(d, n))
                      for d, _, names in os.walk(os.path.join(self.store, "records"))
                      for n in names)
        self.assertGreater(records, 6 << 20)
        for epoch, got in enumerate(per_epoch):
            self.assertGreater(got, records - (3 << 20), (epoch, records, summary))
        # Renewed in the background, the fakes agree: >= 4 renewals, each a new key the front
        # then saw in use.
        mine = calls()[judged:]
        self.assertGreaterEqual(len(mine), 5, summary)  # the first + >= 4 renewals
        self.assertGreaterEqual(auth["renewals"], 4, summary)
        used = self.keys_used_since(used_before)
        minted = {r["access_key"] for r in mine}
        self.assertTrue(used <= minted, (used - minted, summary))
        self.assertGreaterEqual(len(used), 5, summary)
        # Renewals went on after the token rotated (read from the file again).
        self.assertTrue(any(r["access_key"] in used for r in mine[-2:]), summary)
        # No expired key was ever sent, or each refusal was retried to success (failed is 0):
        # as an auth retry, or, when the front answered a request the daemon had already given
        # up on (a front stalled > 5 s on a loaded machine: a timeout retry), as that.
        self.assertLessEqual(refused.get("ExpiredToken", 0),
                             client["retries"]["auth"] + client["retries"]["timeout"], summary)
        self.assertEqual(set(refused) - {"ExpiredToken"}, set(), summary)
        self.assertEqual(auth["source"], "web identity")
        self.extra_secrets.add(rotated_token)
        self.assert_no_secret(log, json.dumps(xattr))


# ---- 4. a rotated -o header_file token --------------------------------------------------------


class RotatingNginx(Nginx):
    """Nginx whose required bearer token changes at runtime: the configuration is rewritten and
    the master reloads it (SIGHUP), on the same port, as a deployment rotating a secret would."""

    def rotate(self, token):
        self.bearer_token = token
        self.write_config()
        os.kill(self.pid, signal.SIGHUP)


class HeaderFileRotationTest(Base):
    ROTATIONS = 4
    PERIOD = 5.0  # s between rotations

    def test_rotated_bearer_token_while_reading(self):
        www = os.path.dirname(self.store)
        header_file = os.path.join(self.home, "headers")
        write_atomic(header_file, f"Authorization: Bearer {BEARER_TOKENS[0]}\n")
        with RotatingNginx(www, bearer_token=BEARER_TOKENS[0]) as nginx:
            url = nginx.url + "/store"
            with self.mount("header-file", self.env(), "remote_cache=1M", "cache_size=1M",
                            f"header_file={header_file}", url=url, endpoint=False) as m:
                readers = Readers(m.mnt, self.want, self.files, 4)
                for i in range(1, self.ROTATIONS + 1):
                    drop_caches()
                    # Readers run; mid-way the server and the file change token together.
                    timer = threading.Timer(self.PERIOD / 2, lambda i=i: (
                        nginx.rotate(BEARER_TOKENS[i]),
                        write_atomic(header_file, f"Authorization: Bearer {BEARER_TOKENS[i]}\n")))
                    timer.start()
                    readers.epoch(i, LEVELS[i % 2], self.PERIOD)
                    timer.join()
                drop_caches()
                readers.epoch(0, 10, 0)  # after the last rotation: everything once more, at once
                # Fetches ahead of the readers end too: then the counters and nginx's log agree.
                wait_for(lambda: remote_xattr(m.mnt)["client"]["in_flight"] == 0,
                         "no request in flight")
                xattr = remote_xattr(m.mnt)
                log = m.log()
                # pcrfs's requests (not nginx's own probe), each of its attempts logged.
                lines = nginx.wait_for_log(
                    xattr["client"]["attempts"],
                    lambda line: line.count('"') >= 2 and " /store/" in line.split('"')[1])
                statuses = [line.split('"')[2].split()[0] for line in lines]
        client = xattr["client"]
        summary = (f"{readers.reads} reads, retries {client['retries']}, failed "
                   f"{client['failed']} {client.get('failed_by_reason')}, nginx 401s "
                   f"{statuses.count('401')}")
        print("header_file:", summary, file=sys.stderr)
        self.assertEqual(readers.failures, [], summary)
        self.assertEqual(readers.reads, (self.ROTATIONS + 1) * len(self.files))
        self.assertEqual(client["failed"], 0, summary)
        self.assertGreater(statuses.count("206") + statuses.count("200"), 0)
        # Every 401 the rotations caused was retried (with the new token) and none failed.
        self.assertGreater(statuses.count("401"), 0, summary)
        self.assertEqual(client["retries"]["auth"], statuses.count("401"), summary)
        self.assert_no_secret(log, json.dumps(xattr))


# ---- 5. SIGHUP ----------------------------------------------------------------------------------


class SighupTest(Base):
    def test_rewritten_credentials_file_and_sighup(self):
        self.s3.add_key(HUP_OLD_AK, HUP_OLD_SK)
        self.addCleanup(self.s3.remove_key, HUP_NEW_AK)
        self.write(".aws/credentials", f"[default]\naws_access_key_id = {HUP_OLD_AK}\n"
                                       f"aws_secret_access_key = {HUP_OLD_SK}\n")
        env = self.env()
        self.assertEqual(judge(env)["access_key"], HUP_OLD_AK)
        with self.mount("sighup", env, "remote_cache=1M", "cache_size=1M") as m:
            self.assert_reads_exact(m.mnt)
            self.assertEqual(remote_xattr(m.mnt)["client"]["auth"]["access_key_id"],
                             masked(HUP_OLD_AK))
            # The keys rotate: the file gets new ones, the old one stops working.
            self.s3.add_key(HUP_NEW_AK, HUP_NEW_SK)
            self.write(".aws/credentials", f"[default]\naws_access_key_id = {HUP_NEW_AK}\n"
                                           f"aws_secret_access_key = {HUP_NEW_SK}\n")
            self.assertTrue(self.s3.remove_key(HUP_OLD_AK))
            self.assertEqual(judge(env)["access_key"], HUP_NEW_AK)
            before = self.signed_by_key()
            m.proc.send_signal(signal.SIGHUP)
            wait_for(lambda: "SIGHUP: reloading credentials" in m.log(), "the reload line")
            # SIGHUP alone (no read, no refusal yet) put the new key in place.
            wait_for(lambda: remote_xattr(m.mnt)["client"]["auth"]["access_key_id"] ==
                     masked(HUP_NEW_AK), "the new key after SIGHUP")
            self.assertIsNone(m.proc.poll())
            self.assertTrue(is_mounted(m.mnt))
            drop_caches()
            for level in LEVELS:
                self.assert_reads_exact(m.mnt, level)
            xattr = remote_xattr(m.mnt)
            self.assertEqual(xattr["client"]["failed"], 0, xattr["client"])
            self.assertEqual(self.keys_used_since(before), {HUP_NEW_AK})
            self.assertTrue(is_mounted(m.mnt))
            log = m.log()
        self.assert_no_secret(log, json.dumps(xattr))


if __name__ == "__main__":
    unittest.main(verbosity=2)
