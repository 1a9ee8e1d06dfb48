"""The S3 server of the tests keeps S3's promise that sparkpoint's leases, snapshot names and
startpoint ids rely on: of conditional puts (``If-None-Match: *``) of one key at once,
exactly one succeeds and the others are refused 412.

moto 5.2.5, as released, checks the condition and then stores the object with nothing held
between the two (``S3Response.put_object``, moto/s3/responses.py) and answers on threads;
tests/support/moto_server.py makes each put whole. Found when a race of six processes for one
job's lease on S3 had two holders under load."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import botocore.config
import botocore.exceptions

from tests.support.s3 import S3Server

CONTENDERS = 12


def test_of_conditional_puts_of_one_key_at_once_exactly_one_lands(s3_server: S3Server) -> None:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=s3_server.endpoint, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
        config=botocore.config.Config(max_pool_connections=CONTENDERS,
                                      retries={"max_attempts": 1}))
    bucket = s3_server.new_bucket()
    for round_number in range(5):
        key = f"generation-{round_number}"
        start = threading.Barrier(CONTENDERS)

        def put(contender: int, key: str = key, start: threading.Barrier = start) -> str:
            start.wait()
            try:
                client.put_object(Bucket=bucket, Key=key, Body=f"{contender}".encode() * 4096,
                                  IfNoneMatch="*")
            except botocore.exceptions.ClientError as error:
                return str(error.response["Error"]["Code"])
            return "created"

        with ThreadPoolExecutor(CONTENDERS) as pool:
            answers = list(pool.map(put, range(CONTENDERS)))
        assert sorted(answers) == ["PreconditionFailed"] * (CONTENDERS - 1) + ["created"]
        stored = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        winner = answers.index("created")
        assert stored == f"{winner}".encode() * 4096
