"""Shared helpers of the script tests in tests/py (run with the repository's .venv/bin/python):
a moto server on a free loopback port, boto3 clients for it, free ports, bounded polling.

Every wait polls a condition with a generous deadline that only turns a hang into a failure.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent.parent
WAIT = 90  # bound on any single wait (a hang guard, not a speed assertion)

# What a child process needs to talk to moto (dummy credentials, no instance metadata).
AWS_ENV = {
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class Failure(Exception):
    """A check that did not hold: the message says what, and the test exits 1."""


def token_key_secrets() -> tuple[str, str, str]:
    """A fresh Ed25519 pair as the operator makes it (deploy/README.md, "Signing keys"): the
    private key (PKCS#8 PEM), the signing secret's SecretString and the public key secret's."""
    import json

    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption()).decode()
    public = key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo).decode()
    return (
        private,
        json.dumps({"algorithm": "EdDSA", "privateKey": private}),
        json.dumps({"algorithm": "EdDSA", "publicKey": public}),
    )


def logger(name: str):
    def log(msg: str) -> None:
        print(f"[{name}] {msg}", file=sys.stderr, flush=True)

    return log


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check, timeout: float = WAIT):
    """Polls `check()` until it returns a truthy value; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Failure:
            raise
        except Exception as e:  # noqa: BLE001 - reported if the deadline passes
            last = e
        time.sleep(0.2)
    raise Failure(f"timed out after {timeout:.0f} s waiting for {what}" + (f" (last error: {last})" if last else ""))


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def moto_client(endpoint: str, service: str):
    """A boto3 client for the moto server at `endpoint`, with moto's dummy keys (valid until
    IAM enforcement is switched on) and one attempt per call."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
    )


class Moto:
    """moto_server on a free port (read from its own line `Running on http://127.0.0.1:N`);
    `wrapped`: tests/py/moto_server.py, moto as the Rust tests run it (DynamoDB's conditional
    writes atomic, session policies held)."""

    def __init__(self, wrapped: bool = False) -> None:
        command = (
            [str(ROOT / ".venv/bin/python"), str(ROOT / "tests/py/moto_server.py"), "127.0.0.1", "0"]
            if wrapped
            else [str(ROOT / ".venv/bin/moto_server"), "-H", "127.0.0.1", "-p", "0"]
        )
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        found: list[str] = []
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:  # drained to the end so moto never blocks on its pipe
                if not found and "http://127.0.0.1:" in line:
                    found.append(line[line.index("http://127.0.0.1:") :].split()[0])
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(WAIT):
            self.close()
            raise Failure("moto_server did not print its address")
        self.endpoint = found[0]

    def env(self) -> dict[str, str]:
        return {**AWS_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self, service: str):
        return moto_client(self.endpoint, service)

    def close(self) -> None:
        stop(self.proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s; reaped either way."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def report(tag: str, test) -> int:
    """Runs `test()`; a `Failure` is printed as `[tag] FAILED: …`. The exit status."""
    try:
        test()
    except Failure as e:
        print(f"[{tag}] FAILED: {e}", file=sys.stderr)
        return 1
    return 0


def s(item: dict, key: str) -> str | None:
    """A DynamoDB item's string attribute."""
    v = item.get(key)
    return v.get("S") if v else None
