"""An S3-compatible server on loopback for the store tests: moto's server mode (with S3's
atomic conditional writes: tests/support/moto_server.py), started once per test session in
its own process, with one bucket per test."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import requests

from tests.support.servers import environment


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables a user sets; sparkpoint reads nothing else."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        }

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                            aws_secret_access_key="testing", region_name="us-east-1")

    def new_bucket(self) -> str:
        name = f"b-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object in the bucket under prefix: key -> size."""
        found: dict[str, int] = {}
        paginator = self.client().get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                found[item["Key"]] = item["Size"]
        return found


def start_s3_server(log_dir: Path) -> Iterator[S3Server]:
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - open while the server runs
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.moto_server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                requests.get(endpoint, timeout=5)
                break
            except requests.RequestException:  # not listening yet, or too busy to answer
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto server did not start; see {log_dir / 'moto.log'}"
                    ) from None
                time.sleep(0.2)  # polling for readiness, not synchronising test steps
        server = S3Server(endpoint)
        with environment(server.env):
            yield server
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
