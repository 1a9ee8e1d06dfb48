"""A test's own Spark reads of a bucket (Spark's state reader, a file sink's log), set up
as sparkpoint sets up the jobs of a home on S3: the s3a settings and Spark's
FileSystem-based checkpoint file manager (spark/s3a.py says why: a FileContext's S3A client
is closed when the JVM finalizes it, under a stream still read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparkpoint.spark.s3a import s3a_conf


def read_bucket_with(session: Any, location: str,
                     conf: dict[str, str] | None = None) -> Callable[[], None]:
    """Set, in ``session``'s conf, what reading ``location`` (an ``s3://`` URL) takes (the
    s3a settings of a home there, ``conf``'s instead where given); returns what unsets
    them (a test's shared session is left as it was)."""
    settings = {key.removeprefix("spark.hadoop."): value
                for key, value in {**s3a_conf(location, {}), **(conf or {})}.items()
                if key.startswith(("spark.hadoop.", "spark.sql."))}
    before = {key: session.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        session.conf.set(key, value)

    def undo() -> None:
        for key, earlier in before.items():
            if earlier is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, earlier)

    return undo
