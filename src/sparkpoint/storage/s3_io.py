"""S3 and S3-compatible stores as one FileIO on s3fs: conditional creates by
``If-None-Match``, server-side copies that report the SHA-256 S3 computed, listings stamped
with S3's own clock (its Date header)."""

from __future__ import annotations

import datetime as dt
import email.utils
import os
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

from sparkpoint.storage.fileio import (
    TRANSFER_CONCURRENCY,
    Capabilities,
    FileIO,
    StampedListing,
    StoredFile,
    join,
    listed_modified,
)


def _date_header(answer: dict[str, Any]) -> float | None:
    """The HTTP Date of an S3 answer (the server's clock, to the second), if it sent one."""
    text = answer.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(str(text)).timestamp()
    except (TypeError, ValueError):
        return None


def _stored_time(value: Any) -> dt.datetime:
    """A time in an S3 answer, as botocore's own parser gives it (aware, UTC): ISO 8601 in
    listings and XML bodies by Python's parser, anything else (HTTP dates in headers) by
    botocore's."""
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)
    from botocore.utils import parse_timestamp

    result: dt.datetime = parse_timestamp(value)
    return result


class S3FileIO(FileIO):
    """S3 and S3-compatible stores. Endpoint, credentials and region come from the standard
    AWS environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION),
    the same variables ``spark_s3a_conf`` hands to Spark."""

    def __init__(self) -> None:
        import s3fs
        from aiobotocore.session import AioSession

        # botocore parses every LastModified of a listing with dateutil's general parser:
        # about 0.7 ms each, most of the client's time in a listing of a job's commits (100
        # files by Spark's default retention); S3 gives ISO 8601, which Python parses itself.
        session = AioSession()
        session.get_component("response_parser_factory").set_parser_defaults(
            timestamp_parser=_stored_time)
        client_kwargs: dict[str, Any] = {}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            client_kwargs["endpoint_url"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            client_kwargs["region_name"] = region
        # skip_instance_cache: credentials and endpoint are read from the environment now,
        # not from an instance built for other settings earlier in the process (file_io
        # keeps one S3FileIO per set of AWS variables instead). No listings cache: other
        # processes and homes change the store, so a listing is only good when just made.
        fs = s3fs.S3FileSystem(session=session, client_kwargs=client_kwargs,
                               skip_instance_cache=True, use_listings_cache=False)
        super().__init__(
            fs,
            Capabilities(atomic_rename=False, hard_links=False, server_side_copy=True,
                         conditional_create=True),
        )

    def path(self, location: str) -> str:
        parsed = urlparse(location)
        return f"{parsed.netloc}{parsed.path}".rstrip("/") if parsed.path.strip("/") \
            else parsed.netloc

    def is_file(self, location: str) -> bool:
        # One HEAD: fsspec's exists/isfile follow a missing key with a listing that looks for
        # a directory of that name, a second round trip on every check.
        bucket, key, _ = self.fs.split_path(self.path(location))
        try:
            self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def read_bytes(self, location: str) -> bytes:
        # One GET: fsspec's cat_file asks for the object's details first, and for a missing
        # key also lists a directory of that name (three round trips where one tells).
        bucket, key, _ = self.fs.split_path(self.path(location))
        if not key:
            raise IsADirectoryError(location)

        async def get() -> bytes:
            response = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        from fsspec.asyn import sync

        return bytes(sync(self.fs.loop, get))

    def _copy_within(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        # CopyObject, TRANSFER_CONCURRENCY at once on s3fs's event loop. S3 computes the
        # copy's SHA-256 from the bytes it copies and returns it (x-amz-checksum-algorithm).
        # One CopyObject takes objects up to 5 GiB, far above any state file Spark writes.
        import asyncio

        from fsspec.asyn import sync

        async def copy_all() -> list[str]:
            gate = asyncio.Semaphore(TRANSFER_CONCURRENCY)

            async def copy(source: str, target: str) -> str:
                src_bucket, src_key, _ = self.fs.split_path(self.path(source))
                bucket, key, _ = self.fs.split_path(self.path(target))
                async with gate:
                    result = await self.fs._call_s3(
                        "copy_object", Bucket=bucket, Key=key, ChecksumAlgorithm="SHA256",
                        CopySource={"Bucket": src_bucket, "Key": src_key})
                return str(result["CopyObjectResult"]["ChecksumSHA256"])

            return list(await asyncio.gather(*(copy(s, t) for s, t in pairs)))

        return sync(self.fs.loop, copy_all) if pairs else []

    def _move(self, source: str, target: str) -> bool:
        # S3 has no rename: a copy inside the store, then the source deleted. Cut off
        # between the two, both exist with the same bytes, and moving again completes it.
        try:
            self._copy_within([(source, target)])
        except FileNotFoundError:
            return False
        self._delete(source)
        return True

    def stamped_listing(self, location: str) -> StampedListing:
        # One LIST per thousand keys: each entry's LastModified and the answer's Date header
        # are both S3's clock.
        bucket, key, _ = self.fs.split_path(self.path(location))
        prefix = f"{key.rstrip('/')}/" if key else ""

        async def listing() -> StampedListing:
            files: dict[str, StoredFile] = {}
            now: float | None = None
            token: str | None = None
            while True:
                ask: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
                if token:
                    ask["ContinuationToken"] = token
                answer = await self.fs._call_s3("list_objects_v2", **ask)
                now = now if now is not None else _date_header(answer)
                for item in answer.get("Contents", []):
                    name = str(item["Key"])[len(prefix):]
                    if name and "/" not in name:
                        etag = item.get("ETag")
                        files[name] = StoredFile(join(location, name), int(item["Size"]),
                                                 listed_modified(item),
                                                 str(etag).strip('"') if etag else None)
                if not answer.get("IsTruncated"):
                    break
                token = answer.get("NextContinuationToken")
            if files and now is None:
                now = await self._probe_now(bucket, prefix)
            return StampedListing(files, now if files else None)

        from fsspec.asyn import sync

        result: StampedListing = sync(self.fs.loop, listing)
        return result

    def clock_of(self, location: str) -> float:
        """The store's clock now, from the Date of one request about ``location``'s bucket."""
        bucket, key, _ = self.fs.split_path(self.path(location))

        async def ask() -> float:
            answer = await self.fs._call_s3("head_bucket", Bucket=bucket)
            now = _date_header(answer)
            return now if now is not None else await self._probe_now(bucket, key)

        from fsspec.asyn import sync

        result: float = sync(self.fs.loop, ask)
        return result

    async def _probe_now(self, bucket: str, prefix: str) -> float:
        """The store's clock from an object written now, for a server that sends no Date."""
        probe = f"{prefix}.clock-{uuid.uuid4().hex}"
        await self.fs._call_s3("put_object", Bucket=bucket, Key=probe, Body=b"")
        try:
            head = await self.fs._call_s3("head_object", Bucket=bucket, Key=probe)
            return _stored_time(head["LastModified"]).timestamp()
        finally:
            await self.fs._call_s3("delete_object", Bucket=bucket, Key=probe)

    def stored_sha256(self, location: str) -> str | None:
        bucket, key, _ = self.fs.split_path(self.path(location))
        head = self.fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        value = head.get("ChecksumSHA256")
        return str(value) if value and head.get("ChecksumType", "FULL_OBJECT") == "FULL_OBJECT" \
            else None

    def _create_exclusive(self, location: str, data: bytes) -> bool:
        # S3's conditional put (If-None-Match: *): the second of two creators gets 412.
        try:
            self.fs.pipe_file(self.path(location), data, mode="create")
        except FileExistsError:
            return False
        return True
