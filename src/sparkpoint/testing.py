"""Builders for tests of streaming jobs: deterministic click events and expected results.

Events are written in event-time order, one JSON file per batch-sized slice, with
duplicates close enough in time that a 10-minute watermark dedupe always catches them, so
the expected output does not depend on how Spark cuts the input into batches.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SLICE_MINUTES = 20
USERS = ("ana", "bo", "cy", "dee", "eli")


@dataclass(frozen=True)
class Click:
    event_id: str
    user: str
    url: str
    ts: dt.datetime

    def to_json(self) -> str:
        return json.dumps({
            "event_id": self.event_id, "user": self.user, "url": self.url,
            "ts": self.ts.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        })


def clicks_for_slice(index: int, events: int = 20, seed: int = 7) -> list[Click]:
    """Events of slice ``index`` (20 minutes of event time), about 10% of them repeated.

    Another ``seed`` gives other events (other ids) over the same 20 minutes.
    """
    rng = random.Random(seed * 1_000_003 + index)
    start = EPOCH + dt.timedelta(minutes=SLICE_MINUTES * index)
    step = SLICE_MINUTES * 60 / events
    clicks = []
    for n in range(events):
        ts = start + dt.timedelta(seconds=n * step + rng.random() * step * 0.5)
        event_id = f"e{index}-{n}" if seed == 7 else f"s{seed}e{index}-{n}"
        clicks.append(Click(event_id, rng.choice(USERS), f"/p/{rng.randint(1, 9)}",
                            ts.replace(microsecond=ts.microsecond // 1000 * 1000)))
    repeats = [rng.choice(clicks) for _ in range(max(1, events // 10))]
    return clicks + repeats


_last_mtime_ns = 0


def _next_mtime_ns() -> int:
    """Strictly increasing modification times, 2 ms apart at least.

    Spark's file source orders new files by modification time in milliseconds; files written
    within the same millisecond would be read in directory-listing order, and a later slice
    read first moves the watermark past an earlier one, whose events are then dropped.
    """
    global _last_mtime_ns
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 2_000_000)
    return _last_mtime_ns


def write_clicks(
    directory: Path, indexes: Iterable[int], events: int = 20, seed: int = 7
) -> list[Click]:
    """Write one file per slice (atomically, as file sources require); return the events."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index in indexes:
        clicks = clicks_for_slice(index, events, seed)
        tmp = directory / f".clicks-{index:05d}.json.tmp"
        tmp.write_text("\n".join(c.to_json() for c in clicks) + "\n")
        mtime = _next_mtime_ns()
        os.utime(tmp, ns=(mtime, mtime))
        os.replace(tmp, directory / f"clicks-{index:05d}.json")
        written.extend(clicks)
    return written


def expected_hourly_counts(
    clicks: Iterable[Click], delay: dt.timedelta = dt.timedelta(minutes=10)
) -> Counter[tuple[Any, ...]]:
    """Rows (window_start, window_end, user, clicks) the example job emits in append mode once
    it has seen ``clicks``: unique events per (hour, user), for every hour that ends at or
    before the final watermark."""
    unique = {(c.event_id, c.ts): c for c in clicks}
    if not unique:
        return Counter()
    watermark = max(c.ts for c in unique.values()) - delay
    counts: Counter[tuple[Any, ...]] = Counter()
    for click in unique.values():
        start = click.ts.replace(minute=0, second=0, microsecond=0)
        if start + dt.timedelta(hours=1) <= watermark:
            counts[(start.replace(tzinfo=None), click.user)] += 1
    return Counter((start, start + dt.timedelta(hours=1), user, n)
                   for (start, user), n in counts.items())


def output_rows(spark: SparkSession, path: Path, files: list[str] | None = None) -> Counter[Any]:
    """Rows of a parquet sink as a multiset of tuples (all committed files, or ``files``)."""
    if files is not None:
        if not files:
            return Counter()
        frame = spark.read.parquet(*files)
    elif not (path / "_spark_metadata").is_dir():
        return Counter()
    else:
        frame = spark.read.parquet(str(path))
    return Counter(tuple(row) for row in frame.collect())


def sink_files_up_to(path: Path, batch: int) -> list[str]:
    """Files a file sink committed in batches 0..``batch`` (needs an uncompacted sink log)."""
    files: list[str] = []
    log = path / "_spark_metadata"
    for entry in sorted(log.iterdir()):
        if entry.name.isdigit() and int(entry.name) <= batch:
            lines = entry.read_text().splitlines()[1:]
            files.extend(json.loads(line)["path"] for line in lines if line.strip())
        elif entry.name.endswith(".compact"):
            raise ValueError(f"{entry}: compacted sink log; raise the compact interval")
    return files
