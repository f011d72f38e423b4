#!/usr/bin/env python3
"""Smoke test of the controller image, run as ECS runs it (called by scripts/image.sh).

    .venv/bin/python tests/py/image_smoke.py --image NAME --token-binary PATH

One container of the image with its own entrypoint and user, configured as the API configures a
session task (SESSION_ID, the sessions table, the public key secret's ARN, a context with
CONTEXT_PERSIST=true), against a moto server on a free loopback port, with a stand-in for the ECS
task metadata endpoint. `--network=host` keeps every packet on 127.0.0.1; the proxy listens on a
free port instead of 9223 for that reason. Checks, failing loudly (exit 1) on any miss:

  1. the session item turns READY with the task's ARN, publicIP and the proxy's port (and no
     connectUrl: the controller never reads the token; the API forms a direct session's URL),
     GET /health answers 200, also to the task definition's health check command run inside the
     container, the controller runs as root and every Chromium process as the image's unprivileged
     user 10001, which cannot read the controller's /proc/<pid>/environ;
  2. a request without a token is refused (401);
  3. a real Puppeteer (tests/node/image-smoke.mjs) connects through the proxy with the token and
     drives a page served by a local HTTP server (its script runs, a cookie is stored);
  4. `podman stop -t 30` (SIGTERM, SIGKILL after 30 s) ends the container with exit code 0
     before the stop timeout, and the controller logged that SIGTERM (the session is keepAlive,
     so nothing else would end it);
  5. the profile archive is in moto's S3 (a gzip'd tar holding the cookie store), and the session
     item has its terminal status (STOPPED/COMPLETED) and endedAt;
  6. the container's log never contains the token or the signing key.

AWS calls here use boto3 (moto's own dependency); the controller in the container talks to moto
with the AWS SDK for Rust. The token and the signing key are never printed.
"""

from __future__ import annotations

import argparse
import gzip
import http.server
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from support import ROOT, WAIT, Failure, Moto, free_port, logger, report, s, token_key_secrets, wait_until

log = logger("image-smoke")
PROJECT = "proj_image_smoke"
TASK_ARN = "arn:aws:ecs:us-east-1:123456789012:task/wallcrawler/0123456789abcdef0"
STOP_TIMEOUT = 30  # seconds: what the task definition's stopTimeout is
PAGE = b"""<!doctype html><html><head><title>wallcrawler smoke</title></head>
<body><p id="out">static</p>
<script>document.getElementById('out').textContent = 'rendered by ' + (6 * 7);</script>
</body></html>"""


class Servers:
    """Local HTTP servers on 127.0.0.1: the test page and the ECS task metadata stand-in."""

    def __init__(self) -> None:
        metadata = json.dumps(
            {
                "Cluster": "wallcrawler",
                "TaskARN": TASK_ARN,
                "Family": "wallcrawler-browser",
                "Containers": [
                    {"Name": "controller", "Networks": [{"NetworkMode": "awsvpc", "IPv4Addresses": ["127.0.0.1"]}]}
                ],
            }
        ).encode()
        self.page_hits = 0
        servers = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.startswith("/v4/"):
                    body, kind = metadata, "application/json"
                else:
                    servers.page_hits += 1
                    body, kind = PAGE, "text/html"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(["podman", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise Failure(f"podman {args[0]} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    return out


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def processes(container: str) -> list[tuple[str, str, str]]:
    """(pid, name, uid) of every process in the container (the image has no ps)."""
    script = 'for d in /proc/[0-9]*; do awk -v p="${d#/proc/}" \'/^Name:/{n=$2} /^Uid:/{print p, n, $2}\' "$d/status" 2>/dev/null; done'
    out = podman("exec", container, "sh", "-c", script).stdout
    return [tuple(line.split(" ", 2)) for line in out.splitlines() if line.count(" ") == 2]


def smoke(image: str, token_binary: str) -> None:
    started = time.monotonic()
    moto = Moto()
    servers = Servers()
    container = f"wallcrawler-smoke-{uuid.uuid4().hex[:12]}"
    try:
        dynamo, s3, sm = moto.client("dynamodb"), moto.client("s3"), moto.client("secretsmanager")
        suffix = uuid.uuid4().hex[:12]
        table, bucket, context = f"sessions-{suffix}", f"contexts-{suffix}", f"ctx_{suffix}"
        key = f"{PROJECT}/{context}/profile.tar.gz"
        dynamo.create_table(
            TableName=table,
            AttributeDefinitions=[{"AttributeName": "sessionId", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "sessionId", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        s3.create_bucket(Bucket=bucket)
        private_pem, _, public_secret = token_key_secrets()
        # The private key's body: what must never show in the container's log.
        signing_key = "".join(private_pem.splitlines()[1:-1])
        secret_arn = sm.create_secret(Name=f"jwt-public-{suffix}", SecretString=public_secret)["ARN"]
        key_file = Path(tempfile.mkdtemp(prefix="smoke-key-")) / "key.pem"
        key_file.touch(mode=0o600)
        key_file.write_text(private_pem)

        session = f"sess_{uuid.uuid4()}"
        token = subprocess.run(
            [token_binary, "token", "--session-id", session, "--project-id", PROJECT, "--ttl", "3600"],
            env={**os.environ, "WALLCRAWLER_JWT_PRIVATE_KEY_FILE": str(key_file)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        now = int(time.time())
        dynamo.put_item(
            TableName=table,
            Item={
                "sessionId": {"S": session},
                "internalStatus": {"S": "PROVISIONING"},
                "status": {"S": "PENDING"},
                "projectId": {"S": PROJECT},
                "signingKey": {"S": token},
                # keepAlive: no idle end, so only the SIGTERM of `podman stop` can end the session.
                "keepAlive": {"BOOL": True},
                "createdAt": {"S": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now))},
                "expiresAt": {"N": str(now + 3600)},
            },
        )

        def item() -> dict:
            return dynamo.get_item(TableName=table, Key={"sessionId": {"S": session}}, ConsistentRead=True)["Item"]

        proxy_port, metrics_port = free_port(), free_port()
        env = {
            # What the API passes to a session task (README "The functions").
            "SESSION_ID": session,
            "PROJECT_ID": PROJECT,
            "SESSIONS_TABLE_NAME": table,
            "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN": secret_arn,
            "CONTEXT_ID": context,
            "CONTEXTS_BUCKET_NAME": bucket,
            "CONTEXT_S3_KEY": key,
            "CONTEXT_PERSIST": "true",
            # Host networking: free loopback ports instead of 9222-9224.
            "CDP_PROXY_PORT": str(proxy_port),
            "CHROME_DEBUG_PORT": "0",
            "METRICS_ADDR": f"127.0.0.1:{metrics_port}",
            # The test page is served on this machine's loopback, which pages may not reach
            # by default.
            "EGRESS_ALLOW": "127.0.0.1",
            # What ECS and the task role would provide.
            "ECS_CONTAINER_METADATA_URI_V4": f"http://127.0.0.1:{servers.port}/v4/smoke",
            **moto.env(),
        }
        run_args = ["run", "--detach", "--name", container, "--network=host", "--memory=2g", "--shm-size=64m"]
        for k, v in env.items():
            run_args += ["--env", f"{k}={v}"]
        podman(*run_args, image)
        log(f"container {container} started (proxy on 127.0.0.1:{proxy_port})")

        # 1. READY, /health.
        def ready() -> dict | None:
            state = podman("inspect", "--format", "{{.State.Status}}", container).stdout.strip()
            if state != "running":
                raise Failure(f"container is {state} before READY")
            it = item()
            return it if s(it, "internalStatus") == "READY" else None

        try:
            it = wait_until("the session item to turn READY", ready)
        except Failure as e:
            raise Failure(f"{e}; internalStatus={s(item(), 'internalStatus')}, terminationReason={s(item(), 'terminationReason')}") from None
        if s(it, "ecsTaskArn") != TASK_ARN:
            raise Failure(f"ecsTaskArn is {s(it, 'ecsTaskArn')!r}, want the task metadata's ARN")
        if s(it, "publicIP") != "127.0.0.1" or it.get("proxyPort", {}).get("N") != str(proxy_port):
            raise Failure("READY does not name the proxy's address and port")
        if "connectUrl" in it:
            raise Failure("the controller wrote a connectUrl (it never reads the session's token)")
        health = f"http://127.0.0.1:{proxy_port}/health"
        wait_until("/health to answer 200", lambda: http_status(health) == 200)
        # The task definition's health check, run inside the container as ECS runs it.
        check = podman("exec", container, "sh", "-c", f"curl -fsS {health} || exit 1", check=False)
        if check.returncode != 0 or json.loads(check.stdout or "{}").get("status") != "ok":
            raise Failure(f"the ECS health check command failed in the container ({check.returncode}): {check.stderr.strip()}")
        procs = processes(container)
        # /proc/<pid>/status names a process by its first 15 bytes.
        controller = [(pid, uid) for pid, name, uid in procs if name == "wallcrawler-con"]
        chrome_uids = {uid for _, name, uid in procs if name == "chromium"}
        if [u for _, u in controller] != ["0"] or chrome_uids != {"10001"}:
            raise Failure(f"the controller runs as {controller} and Chrome as {chrome_uids}, want uid 0 and the image's unprivileged user 10001")
        uid = controller[0][1]
        # Chrome's user cannot read the controller's environment (the secret's ARN, the task
        # role's credentials endpoint).
        denied = podman("exec", "--user", "10001:10001", container, "cat", f"/proc/{controller[0][0]}/environ", check=False)
        if denied.returncode == 0 or "Permission denied" not in denied.stderr:
            raise Failure(f"Chrome's user read the controller's environment ({denied.returncode}): {denied.stderr.strip()}")
        log(f"READY after {time.monotonic() - started:.1f} s; /health 200, also from the ECS health check in the container; controller uid {uid}, Chrome uid 10001")

        # 2. No token, no entry.
        status = http_status(f"http://127.0.0.1:{proxy_port}/json/version")
        if status != 401:
            raise Failure(f"/json/version without a token answered {status}, want 401")

        # 3. Puppeteer through the proxy.
        node = subprocess.run(
            ["node", str(ROOT / "tests/node/image-smoke.mjs"), "--page", f"http://127.0.0.1:{servers.port}/page", "--timeout-ms", "60000"],
            env={**os.environ, "WALLCRAWLER_CDP_URL": f"ws://127.0.0.1:{proxy_port}/?signingKey={token}"},
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        out = (node.stdout.strip().splitlines() or ["{}"])[-1].replace(token, "<token>")
        result = json.loads(out)
        if node.returncode != 0 or not result.get("ok"):
            raise Failure(f"Puppeteer failed: {out}; stderr: {node.stderr.replace(token, '<token>')[-2000:]}")
        want = {"status": 200, "title": "wallcrawler smoke", "rendered": "rendered by 42"}
        for k, v in want.items():
            if result.get(k) != v:
                raise Failure(f"Puppeteer saw {k}={result.get(k)!r}, want {v!r}")
        if "smoke=persisted" not in result.get("cookie", "") or result.get("screenshotBytes", 0) < 1000:
            raise Failure(f"page state not as expected: {out}")
        if servers.page_hits < 1:
            raise Failure("the page server saw no request from the container's Chrome")
        log(f"Puppeteer drove a page through the proxy ({result['browserVersion']})")

        # 4. Stop as ECS does.
        t0 = time.monotonic()
        podman("stop", "--time", str(STOP_TIMEOUT), container)
        stop_seconds = time.monotonic() - t0
        code = podman("inspect", "--format", "{{.State.ExitCode}}", container).stdout.strip()
        if code != "0":
            raise Failure(f"container exited with {code} after podman stop, want 0 (137 = killed at the stop timeout)")
        if stop_seconds >= STOP_TIMEOUT:
            raise Failure(f"podman stop took {stop_seconds:.1f} s, not within the {STOP_TIMEOUT} s stop timeout")
        log(f"podman stop: exit 0 after {stop_seconds:.1f} s")

        # 5. The archive and the terminal status.
        try:
            archive = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            raise Failure(f"no profile archive at s3://{bucket}/{key} after exit") from None
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
            names = tar.getnames()
        if not any(n.endswith("Cookies") for n in names):
            raise Failure(f"the profile archive has no cookie store: {names[:40]}")
        it = item()
        if (s(it, "internalStatus"), s(it, "status")) != ("STOPPED", "COMPLETED") or not s(it, "endedAt"):
            raise Failure(
                f"session item after stop: internalStatus={s(it, 'internalStatus')}, status={s(it, 'status')}, endedAt={s(it, 'endedAt')}"
            )
        log(f"profile archive uploaded ({len(archive)} bytes, {len(names)} entries); item STOPPED/COMPLETED with endedAt")

        # 6. No secret in the log.
        logs = podman("logs", container)
        text = logs.stdout + logs.stderr
        if token in text or signing_key in text:
            raise Failure("the container's log contains the token or the signing key")
        events = []
        for line in text.splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
        if not any(e.get("message") == "session ready" for e in events):
            raise Failure("the container's log has no 'session ready' event")
        if not any(e.get("message") == "shutting down" and e.get("signal") == "SIGTERM" for e in events):
            raise Failure("the controller never logged the SIGTERM (did the signal reach it?)")
        log(f"passed in {time.monotonic() - started:.1f} s")
    except Exception:
        logs = podman("logs", "--tail", "60", container, check=False)
        tail = (logs.stdout + logs.stderr).strip()
        if tail:
            for secret in [v for v in (locals().get("token"), locals().get("signing_key")) if v]:
                tail = tail.replace(secret, "<redacted>")
            print(f"[image-smoke] container log (last 60 lines):\n{tail}", file=sys.stderr)
        raise
    finally:
        podman("rm", "--force", "--time", "0", container, check=False)
        servers.close()
        moto.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", required=True)
    ap.add_argument("--token-binary", required=True, help="a wallcrawler-controller binary, to mint the token")
    a = ap.parse_args()
    return report("image-smoke", lambda: smoke(a.image, a.token_binary))


if __name__ == "__main__":
    sys.exit(main())
