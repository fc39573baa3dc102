#!/usr/bin/python3
"""The credential test servers themselves (tests/remote/cred_servers.py): STS, IMDSv2 and the
container endpoint, each driven by Debian's botocore through tests/remote/botocore_judge.py, and
the S3 front following the keys they mint (a key works until its expiry, then 400 ExpiredToken).
Loopback only; needs tests/remote/install.sh (setup.sh test runs it): a missing package fails
here, never skips."""

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REMOTE = os.path.join(os.path.dirname(HERE), "remote")
sys.path.insert(0, REMOTE)

import botocore.auth  # noqa: E402
import botocore.awsrequest  # noqa: E402
import botocore.credentials  # noqa: E402
import botocore.exceptions  # noqa: E402

from botocore_judge import judge  # noqa: E402
from cred_servers import ContainerServer, ImdsServer, Minter, StsServer  # noqa: E402
from remote_servers import S3Server  # noqa: E402

PYTHON = "/usr/bin/python3"
CRED_SERVERS = os.path.join(REMOTE, "cred_servers.py")
BUCKET = "creds"
OBJECT = "data/hello.txt"
CONTENT = b"hello through temporary credentials\n"
STATIC_AK, STATIC_SK = "AKIDPCRFSSTATIC", "static/secret+key"
SOURCE_AK, SOURCE_SK = "AKIDPCRFSSOURCE", "source/secret+key"
ROLE = "arn:aws:iam::123456789012:role/pcrfs-reader"
CHAINED_ROLE = "arn:aws:iam::123456789012:role/pcrfs-chained"
WEB_TOKEN = "eyJhbGciOiJSUzI1NiJ9.web-identity-1.sig"
CONTAINER_TOKEN = "container-auth-token-1"
LIFETIME = 4.0  # seconds: short enough to watch keys expire, long enough for one GET
POLL_BOUND = 30.0  # seconds any poll may wait (the lifetime plus slack on a loaded machine)


def wait_until(predicate, what, timeout=POLL_BOUND):
    """Polls predicate until true; fails after timeout (a bound on hangs, not on speed)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def http(url, method="GET", headers=None, data=None):
    """(status, body) of one request; HTTP errors are answers too."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read()


def sts_call(url, form, access_key=None, secret_key=None, token=None, region="us-east-1"):
    """A form POST to STS, signed with botocore's SigV4Auth when access_key is given."""
    body = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in form.items()).encode()
    req = botocore.awsrequest.AWSRequest(
        method="POST", url=url + "/", data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"})
    if access_key:
        botocore.auth.SigV4Auth(botocore.credentials.Credentials(access_key, secret_key, token),
                                "sts", region).add_auth(req)
    prepared = req.prepare()
    return http(prepared.url, "POST", dict(prepared.headers), prepared.body)


def error_code(xml):
    text = xml.decode()
    return text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else text


SERVERS = contextlib.ExitStack()


def setUpModule():
    """One S3 server and the three fakes for every test (each test gets a fresh HOME)."""
    try:
        tmp = SERVERS.enter_context(tempfile.TemporaryDirectory(prefix="cred-servers-"))
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "data"))
        with open(os.path.join(root, OBJECT), "wb") as f:
            f.write(CONTENT)
        s3 = CredTest.s3 = SERVERS.enter_context(S3Server(root, BUCKET, STATIC_AK, STATIC_SK))
        CredTest.sts = SERVERS.enter_context(StsServer(
            s3, roles=[ROLE, CHAINED_ROLE], source_keys={SOURCE_AK: SOURCE_SK},
            web_identity_token=WEB_TOKEN, lifetime=LIFETIME))
        CredTest.imds = SERVERS.enter_context(ImdsServer(s3, lifetime=LIFETIME))
        CredTest.container = SERVERS.enter_context(ContainerServer(
            s3, auth_token=CONTAINER_TOKEN, lifetime=LIFETIME))
    except BaseException:
        SERVERS.close()
        raise


def tearDownModule():
    SERVERS.close()


class CredTest(unittest.TestCase):
    """The servers of setUpModule, a fresh HOME per test, and the checks every fake shares."""

    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="cred-home-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.home])
        os.makedirs(os.path.join(self.home, ".aws"))

    def env(self, **extra):
        """The environment pcrfs and the judge both get: a private HOME, no IMDS unless asked,
        loopback never through a proxy."""
        env = {"HOME": self.home, "PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true",
               "AWS_DEFAULT_REGION": "us-east-1", "no_proxy": "127.0.0.1,localhost",
               "NO_PROXY": "127.0.0.1,localhost"}
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def write(self, rel, text):
        path = os.path.join(self.home, rel)
        with open(path, "w") as f:
            f.write(text)
        return path

    def get_object(self, creds):
        client = self.s3.client(creds["access_key"], creds["secret_key"], creds["token"])
        try:
            return client.get_object(Bucket=BUCKET, Key=OBJECT)["Body"].read()
        finally:
            client.close()

    def resolve_and_read(self, env, profile, method, lookup):
        """judge() resolves credentials through a fake; a GET with them reads the object.
        Returns the credentials. A machine slow enough to let them expire between the two gets
        another try (bounded): only a refusal of a valid key fails."""
        for _ in range(3):
            out = judge(env, profile)
            self.assertEqual(out.get("method"), method, out)
            creds = lookup(out["access_key"])
            self.assertIsNotNone(creds, f"{out['access_key']} was not minted by the fake")
            try:
                self.assertEqual(self.get_object(creds), CONTENT)
                return creds
            except botocore.exceptions.ClientError as e:
                if e.response["Error"]["Code"] != "ExpiredToken" or \
                        time.time() < creds["expires_at"]:
                    raise
        self.fail("the credentials expired before every one of 3 GETs")

    def assert_expires(self, creds):
        """Once its expiry has passed, the same key gets S3's 400 ExpiredToken."""
        before = self.s3.front_stats()["refused"].get("ExpiredToken", 0)
        wait_until(lambda: time.time() >= creds["expires_at"], "the credentials' expiry")
        with self.assertRaises(botocore.exceptions.ClientError) as cm:
            self.get_object(creds)
        self.assertEqual(cm.exception.response["Error"]["Code"], "ExpiredToken")
        self.assertEqual(cm.exception.response["ResponseMetadata"]["HTTPStatusCode"], 400)
        self.assertEqual(cm.exception.response["Error"]["Message"],
                         "The provided token has expired.")
        self.assertEqual(self.s3.front_stats()["refused"]["ExpiredToken"], before + 1)


class StsTest(CredTest):
    def test_web_identity_then_expiry_then_a_rotated_token(self):
        token_file = self.write("token", WEB_TOKEN)
        env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE,
                       AWS_ROLE_SESSION_NAME="pcrfs-test", **self.sts.env())
        creds = self.resolve_and_read(env, None, "assume-role-with-web-identity",
                                      self.sts.lookup)
        calls = self.sts.requests(access_key=creds["access_key"])
        self.assertEqual([(c["action"], c["role_arn"], c["session_name"]) for c in calls],
                         [("AssumeRoleWithWebIdentity", ROLE, "pcrfs-test")])
        self.assert_expires(creds)

        # The identity provider rotates its token: the file's old one is now expired.
        self.sts.rotate_web_identity_token(WEB_TOKEN + "-2")
        self.addCleanup(self.sts.rotate_web_identity_token, WEB_TOKEN)
        self.assertIn("ExpiredTokenException", judge(env).get("error", ""))
        self.write("token", "not-the-token")
        self.assertIn("InvalidIdentityToken", judge(env).get("error", ""))
        self.write("token", WEB_TOKEN + "-2")
        fresh = self.resolve_and_read(env, None, "assume-role-with-web-identity",
                                      self.sts.lookup)
        self.assertNotEqual(fresh["access_key"], creds["access_key"])
        self.assertEqual(self.sts.requests(role_arn="arn:aws:iam::123456789012:role/nope"), [])

    def test_assume_role_with_a_source_profile_and_a_chain(self):
        self.write(".aws/config", f"[profile app]\nrole_arn = {ROLE}\nsource_profile = base\n"
                                  f"[profile chained]\nrole_arn = {CHAINED_ROLE}\n"
                                  f"source_profile = app\n")
        self.write(".aws/credentials", f"[base]\naws_access_key_id = {SOURCE_AK}\n"
                                       f"aws_secret_access_key = {SOURCE_SK}\n")
        env = self.env(**self.sts.env())
        creds = self.resolve_and_read(env, "app", "assume-role", self.sts.lookup)
        call, = self.sts.requests(access_key=creds["access_key"])
        self.assertEqual((call["action"], call["role_arn"], call["source_access_key"]),
                         ("AssumeRole", ROLE, SOURCE_AK))
        self.assert_expires(creds)

        # Role chaining: the second AssumeRole is signed with the first one's minted key.
        chained = self.resolve_and_read(env, "chained", "assume-role", self.sts.lookup)
        call, = self.sts.requests(access_key=chained["access_key"])
        self.assertEqual(call["role_arn"], CHAINED_ROLE)
        self.assertEqual(self.sts.lookup(call["source_access_key"])["role_arn"], ROLE)

    def test_bad_signatures_and_unknown_callers_are_refused_like_sts(self):
        form = {"Action": "AssumeRole", "Version": "2011-06-15", "RoleArn": ROLE,
                "RoleSessionName": "pcrfs-test"}
        status, body = sts_call(self.sts.url, form, SOURCE_AK, SOURCE_SK)
        self.assertEqual(status, 200, body)
        self.assertIn(b"<AssumeRoleResult>", body)
        for args, want in [((SOURCE_AK, "wrong/secret"), (403, "SignatureDoesNotMatch")),
                           (("AKIDUNKNOWN", SOURCE_SK), (403, "InvalidClientTokenId")),
                           ((SOURCE_AK, SOURCE_SK, "a-token-it-never-had"),
                            (403, "InvalidClientTokenId")),
                           ((), (403, "MissingAuthenticationToken"))]:
            status, body = sts_call(self.sts.url, form, *args)
            self.assertEqual((status, error_code(body)), want, args)
            self.assertIn(b"<ErrorResponse", body)
        status, body = sts_call(self.sts.url, dict(form, RoleArn=ROLE + "-other"),
                                SOURCE_AK, SOURCE_SK)
        self.assertEqual((status, error_code(body)), (403, "AccessDenied"))
        refused = [c["code"] for c in self.sts.requests(source_access_key=SOURCE_AK)]
        self.assertIn("SignatureDoesNotMatch", refused)

        # Through botocore: a profile whose secret is wrong gets STS's answer.
        self.write(".aws/config", f"[profile bad]\nrole_arn = {ROLE}\nsource_profile = wrong\n")
        self.write(".aws/credentials", f"[wrong]\naws_access_key_id = {SOURCE_AK}\n"
                                       f"aws_secret_access_key = not-the-secret\n")
        self.assertIn("SignatureDoesNotMatch", judge(self.env(**self.sts.env()), "bad")["error"])

    def test_curls_own_sigv4_is_accepted(self):
        """What pcrfs signs with (libcurl's CURLOPT_AWS_SIGV4) verifies like botocore's."""
        form = (f"Action=AssumeRole&Version=2011-06-15&RoleArn={ROLE}"
                f"&RoleSessionName=curl-test")
        for secret, want in [(SOURCE_SK, "200"), ("wrong", "403")]:
            out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                  "--aws-sigv4", "aws:amz:eu-west-1:sts",
                                  "--user", f"{SOURCE_AK}:{secret}", "-d", form,
                                  self.sts.url + "/"],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.stdout, want, out.stderr)


class ProcessTest(CredTest):
    def test_credential_process(self):
        log = os.path.join(self.home, "minted.jsonl")
        command = shlex.join([PYTHON, CRED_SERVERS, "credential-process", "--s3-endpoint",
                              self.s3.endpoint, "--lifetime", str(LIFETIME), "--log", log])
        self.write(".aws/config", f"[profile proc]\ncredential_process = {command}\n")

        def lookup(access_key):
            with open(log) as f:
                return next((c for c in map(json.loads, f) if c["access_key"] == access_key),
                            None)

        creds = self.resolve_and_read(self.env(), "proc", "custom-process", lookup)
        self.assert_expires(creds)


class ContainerTest(CredTest):
    def test_container_endpoint_with_its_token(self):
        env = self.env(**self.container.env())
        creds = self.resolve_and_read(env, None, "container-role", self.container.lookup)
        self.assertEqual(self.container.requests(kind="credentials")[-1]["authorization"],
                         CONTAINER_TOKEN)
        self.assert_expires(creds)

        self.assertEqual(http(self.container.full_uri)[0], 401)
        self.assertEqual(http(self.container.url + "/other",
                              headers={"Authorization": CONTAINER_TOKEN})[0], 404)
        # The token rotates: the old one is refused, through botocore too.
        self.container.auth_token = CONTAINER_TOKEN + "-2"
        self.addCleanup(setattr, self.container, "auth_token", CONTAINER_TOKEN)
        self.assertIn("403", judge(env).get("error", ""))
        counts = self.container.counts()
        self.assertGreaterEqual(counts["forbidden"], 1, counts)
        self.assertGreaterEqual(counts["unauthorized"], 1, counts)
        self.resolve_and_read(self.env(**self.container.env()), None, "container-role",
                              self.container.lookup)


class ImdsTest(CredTest):
    def test_imdsv2_role_and_credentials(self):
        env = self.env(AWS_EC2_METADATA_DISABLED=None, **self.imds.env())
        creds = self.resolve_and_read(env, None, "iam-role", self.imds.lookup)
        counts = self.imds.counts()
        self.assertGreaterEqual(counts["token"], 1, counts)
        self.assertGreaterEqual(counts["role_list"], 1, counts)
        self.assertGreaterEqual(counts["credentials"], 1, counts)
        self.assertNotIn("unauthorized", counts)
        self.assert_expires(creds)

    def test_v1_requests_and_bad_tokens_are_refused(self):
        role_url = self.imds.url + ImdsServer.PREFIX
        self.assertEqual(http(role_url)[0], 401)
        self.assertEqual(http(role_url, headers={"X-aws-ec2-metadata-token": "forged"})[0], 401)
        self.assertEqual(http(self.imds.url + "/latest/api/token", "PUT")[0], 400)
        self.assertEqual(http(self.imds.url + "/latest/api/token", "PUT",
                              {"X-aws-ec2-metadata-token-ttl-seconds": "0"})[0], 400)
        status, token = http(self.imds.url + "/latest/api/token", "PUT",
                             {"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        self.assertEqual(status, 200)
        headers = {"X-aws-ec2-metadata-token": token.decode()}
        self.assertEqual(http(role_url, headers=headers), (200, self.imds.role.encode()))
        status, body = http(role_url + self.imds.role, headers=headers)
        doc = json.loads(body)
        self.assertEqual((status, doc["Code"], doc["Type"]), (200, "Success", "AWS-HMAC"))
        self.assertEqual(set(doc), {"Code", "LastUpdated", "Type", "AccessKeyId",
                                    "SecretAccessKey", "Token", "Expiration"})
        self.assertEqual(http(role_url + "other-role", headers=headers)[0], 404)
        self.imds.invalidate_tokens()
        self.assertEqual(http(role_url, headers=headers)[0], 401)
        self.assertGreaterEqual(self.imds.counts()["unauthorized"], 3)


class FrontKeysTest(CredTest):
    def test_keys_come_and_go_and_expire(self):
        creds = {"access_key": "ASIAPCRFSKEYAPI", "secret_key": "api/secret",
                 "token": "api-token", "expires_at": time.time() + 3600}
        self.s3.add_key(creds["access_key"], creds["secret_key"], creds["token"],
                        creds["expires_at"])
        self.assertEqual(self.get_object(creds), CONTENT)
        listed = {k["access_key"]: k for k in self.s3.keys()}
        self.assertEqual(listed[creds["access_key"]], {
            "access_key": creds["access_key"], "expires_at": creds["expires_at"],
            "session_token": True, "expired": False})
        self.assertNotIn("api/secret", json.dumps(self.s3.keys()))
        self.assertEqual(listed[STATIC_AK]["expires_at"], None)

        def refusal(**change):
            with self.assertRaises(botocore.exceptions.ClientError) as cm:
                self.get_object(dict(creds, **change))
            return (cm.exception.response["ResponseMetadata"]["HTTPStatusCode"],
                    cm.exception.response["Error"]["Code"])

        self.assertEqual(refusal(token="another-token"), (403, "InvalidToken"))
        self.s3.add_key(creds["access_key"], creds["secret_key"], creds["token"], time.time())
        self.assertEqual(refusal(), (400, "ExpiredToken"))
        self.assertTrue(self.s3.remove_key(creds["access_key"]))
        self.assertFalse(self.s3.remove_key(creds["access_key"]))
        self.assertEqual(refusal(), (403, "InvalidAccessKeyId"))
        status, body = http(self.s3.endpoint + "/__front/keys", "POST",
                            data=b'{"access_key": "A/B", "secret_key": "x"}')
        self.assertEqual(status, 400, body)

    def test_revoke_after_removes_expired_keys(self):
        minter = Minter(self.s3, lifetime=0.5, revoke_after=0)
        self.addCleanup(minter.close)
        creds = minter.mint()
        wait_until(lambda: creds["access_key"] not in {k["access_key"] for k in self.s3.keys()},
                   "the key's revocation")
        with self.assertRaises(botocore.exceptions.ClientError) as cm:
            self.get_object(creds)
        self.assertEqual(cm.exception.response["Error"]["Code"], "InvalidAccessKeyId")


class CliTest(CredTest):
    def start(self, *args):
        ready = os.path.join(self.home, f"ready-{args[0]}.json")
        proc = subprocess.Popen([PYTHON, CRED_SERVERS, *args, "--s3-endpoint", self.s3.endpoint,
                                 "--lifetime", str(LIFETIME), "--ready-file", ready],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=dict(os.environ, PCRFS_CONTAINER_TOKEN="cli-token"))

        def stop():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                self.assertEqual(proc.wait(timeout=POLL_BOUND), 0, proc.stderr.read())
            proc.stderr.close()
        self.addCleanup(stop)
        wait_until(lambda: os.path.exists(ready) or proc.poll() is not None, "the ready file")
        self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        with open(ready) as f:
            return json.load(f)

    def test_sts_imds_and_container_subcommands(self):
        token_file = self.write("token", "cli-web-token")
        sts = self.start("sts", "--role", ROLE, "--web-identity-token-file", token_file)
        imds = self.start("imds")
        container = self.start("container")
        env = self.env(AWS_WEB_IDENTITY_TOKEN_FILE=token_file, AWS_ROLE_ARN=ROLE,
                       AWS_ROLE_SESSION_NAME="cli", AWS_ENDPOINT_URL_STS=sts["url"])
        self.assertEqual(judge(env)["method"], "assume-role-with-web-identity")
        status, body = http(sts["url"] + "/__control", "POST",
                            data=b'{"web_identity_token": "cli-web-token-2"}')
        self.assertEqual(status, 200, body)
        self.assertIn("ExpiredTokenException", judge(env)["error"])
        status, body = http(sts["url"] + "/__requests")
        self.assertEqual([r["status"] for r in json.loads(body)["requests"]], [200, 400])

        env = self.env(AWS_EC2_METADATA_DISABLED=None,
                       AWS_EC2_METADATA_SERVICE_ENDPOINT=imds["AWS_EC2_METADATA_SERVICE_ENDPOINT"])
        self.assertEqual(judge(env)["method"], "iam-role")
        self.assertEqual(container["AWS_CONTAINER_AUTHORIZATION_TOKEN"], "cli-token")
        env = self.env(**{k: v for k, v in container.items() if k.startswith("AWS_")})
        out = judge(env, secrets=True)
        self.assertEqual(out["method"], "container-role")
        self.assertEqual(self.get_object({"access_key": out["access_key"],
                                          "secret_key": out["secret_key"],
                                          "token": out["token"]}), CONTENT)


if __name__ == "__main__":
    unittest.main()
