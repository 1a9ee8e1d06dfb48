"""Input for Spark's own example streaming queries, and the rows each must produce, computed
in plain Python without Spark.

The queries are Spark's `structured_network_wordcount_windowed.py` and
`structured_sessionization.py` (examples/src/main/python/sql/streaming/) and two patterns of
the Structured Streaming guide (a stream-stream join of ad impressions and clicks with
watermarks and a time range, and `dropDuplicatesWithinWatermark` on a guid). The socket
source becomes JSON files with the socket source's columns (`value`, `timestamp`, as with
`includeTimestamp`); the console sink becomes parquet in append mode, which needs a
watermark on the aggregations. Event times only grow from one file to the next, so nothing
is late and the expected rows do not depend on how Spark cuts the input into batches.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EPOCH = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
# Seconds of event time per file: Spark's examples count words over seconds.
SLICE_SECONDS = 20
WORDS = ("spark", "stream", "state", "window", "watermark", "sink", "offset", "batch")
WINDOW = dt.timedelta(seconds=10)
SLIDE = dt.timedelta(seconds=5)
SESSION_GAP = dt.timedelta(seconds=10)
# The guide's join: impressions watermarked 2 hours, clicks 3 hours, a click at most 1 hour
# after its impression; its event times are in minutes.
IMPRESSION_SLICE = dt.timedelta(minutes=20)
CLICK_WITHIN = dt.timedelta(hours=1)

_last_mtime_ns = 0


def _next_mtime_ns() -> int:
    """Strictly increasing modification times, 2 ms apart at least: Spark's file source
    orders new files by their modification time in milliseconds."""
    global _last_mtime_ns
    _last_mtime_ns = max(time.time_ns(), _last_mtime_ns + 2_000_000)
    return _last_mtime_ns


def _stamp(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def write_json_file(directory: Path, name: str, records: Iterable[dict[str, Any]]) -> None:
    """One JSON-lines file, written under a hidden name and renamed (file sources need
    complete files), with a modification time after every earlier one's."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    mtime = _next_mtime_ns()
    os.utime(tmp, ns=(mtime, mtime))
    os.replace(tmp, directory / name)


def _naive(ts: dt.datetime) -> dt.datetime:
    """Spark returns timestamps as naive datetimes in the session zone (UTC in the tests)."""
    return ts.astimezone(dt.UTC).replace(tzinfo=None)


# --- lines: the socket source's rows (value, timestamp) --------------------------------------

@dataclass(frozen=True)
class Line:
    value: str
    timestamp: dt.datetime

    def words(self) -> list[str]:
        return self.value.split(" ")


def lines_for_slice(index: int, seed: int = 11) -> list[Line]:
    """About 14 lines of 1-4 words over SLICE_SECONDS; rare words open and close sessions."""
    rng = random.Random(seed * 7_919 + index)
    start = EPOCH + dt.timedelta(seconds=SLICE_SECONDS * index)
    lines = []
    for n in range(14):
        ms = int((n + rng.random() * 0.9) * SLICE_SECONDS * 1000 / 14)
        words = [rng.choice(WORDS[:5] if rng.random() < 0.8 else WORDS)
                 for _ in range(rng.randint(1, 4))]
        lines.append(Line(" ".join(words), start + dt.timedelta(milliseconds=ms)))
    return lines


def write_lines(directory: Path, indexes: Iterable[int]) -> list[Line]:
    written = []
    for index in indexes:
        lines = lines_for_slice(index)
        write_json_file(directory, f"lines-{index:05d}.json",
                        ({"value": line.value, "timestamp": _stamp(line.timestamp)}
                         for line in lines))
        written.extend(lines)
    return written


def expected_windowed_word_counts(lines: Sequence[Line]) -> Counter[tuple[Any, ...]]:
    """(window start, window end, word, count) for every sliding window (10 s, slide 5 s)
    holding a word: what the drained word count writes."""
    counts: Counter[tuple[dt.datetime, str]] = Counter()
    for line in lines:
        epoch_ms = int(line.timestamp.timestamp() * 1000)
        slide_ms = int(SLIDE.total_seconds() * 1000)
        window_ms = int(WINDOW.total_seconds() * 1000)
        last_start = epoch_ms - epoch_ms % slide_ms
        for word in line.words():
            start = last_start
            while start > epoch_ms - window_ms:
                counts[(dt.datetime.fromtimestamp(start / 1000, dt.UTC), word)] += 1
                start -= slide_ms
    return Counter((_naive(start), _naive(start + WINDOW), word, n)
                   for (start, word), n in counts.items())


def expected_sessions(lines: Sequence[Line]) -> Counter[tuple[Any, ...]]:
    """(sessionId, start, end, durationMs, numEvents) as the sessionization example selects
    them (start and end cast to seconds): each word is a session id, an event opens
    [t, t + gap) and overlapping spans of one id merge."""
    times: dict[str, list[dt.datetime]] = {}
    for line in lines:
        for word in line.words():
            times.setdefault(word, []).append(line.timestamp)
    rows: Counter[tuple[Any, ...]] = Counter()
    for word, stamps in times.items():
        stamps.sort()
        start, end, events = stamps[0], stamps[0] + SESSION_GAP, 1
        for ts in stamps[1:]:
            if ts == end:
                raise AssertionError(f"{word}: an event exactly one gap after the last; "
                                     "Spark's merge rule at the boundary is not modelled")
            if ts < end:
                end, events = max(end, ts + SESSION_GAP), events + 1
                continue
            rows[_session_row(word, start, end, events)] += 1
            start, end, events = ts, ts + SESSION_GAP, 1
        rows[_session_row(word, start, end, events)] += 1
    return rows


def _session_row(word: str, start: dt.datetime, end: dt.datetime,
                 events: int) -> tuple[Any, ...]:
    start_s, end_s = int(start.timestamp() // 1), int(end.timestamp() // 1)
    return (word, start_s, end_s, end_s - start_s, events)


# --- the guide's ad impressions and clicks ---------------------------------------------------

@dataclass(frozen=True)
class AdEvent:
    ad_id: int
    time: dt.datetime


def ads_for_slice(index: int, seed: int = 5) -> tuple[list[AdEvent], list[AdEvent]]:
    """Impressions of slice ``index`` (20 minutes), and the clicks that happen during it on
    impressions of this slice and the three before: most within the hour, some after it
    (no match)."""
    start = EPOCH + IMPRESSION_SLICE * index
    impressions = _impressions(index, seed)
    clicks = []
    for earlier in range(max(0, index - 3), index + 1):
        rng = random.Random(seed * 104_729 + earlier)
        for impression in _impressions(earlier, seed):
            if rng.random() < 0.5:
                continue
            after = dt.timedelta(seconds=rng.randint(1, 75 * 60))
            click_time = impression.time + after
            if start <= click_time < start + IMPRESSION_SLICE:
                clicks.append(AdEvent(impression.ad_id, click_time))
    clicks.sort(key=lambda c: c.time)
    return impressions, clicks


def _impressions(index: int, seed: int) -> list[AdEvent]:
    rng = random.Random(seed * 15_485_863 + index)
    start = EPOCH + IMPRESSION_SLICE * index
    return [AdEvent(index * 100 + n,
                    start + dt.timedelta(seconds=n * 100 + rng.randint(0, 90)))
            for n in range(12)]


def write_ads(impressions_dir: Path, clicks_dir: Path,
              indexes: Iterable[int]) -> tuple[list[AdEvent], list[AdEvent]]:
    all_impressions, all_clicks = [], []
    for index in indexes:
        impressions, clicks = ads_for_slice(index)
        write_json_file(impressions_dir, f"impressions-{index:05d}.json",
                        ({"adId": e.ad_id, "impressionTime": _stamp(e.time)}
                         for e in impressions))
        write_json_file(clicks_dir, f"clicks-{index:05d}.json",
                        ({"adId": e.ad_id, "clickTime": _stamp(e.time)} for e in clicks))
        all_impressions.extend(impressions)
        all_clicks.extend(clicks)
    return all_impressions, all_clicks


def expected_ad_matches(impressions: Sequence[AdEvent],
                        clicks: Sequence[AdEvent]) -> Counter[tuple[Any, ...]]:
    """(impressionAdId, impressionTime, clickAdId, clickTime) of the guide's inner join:
    same ad, click at or after the impression and at most an hour later."""
    by_ad: dict[int, list[AdEvent]] = {}
    for impression in impressions:
        by_ad.setdefault(impression.ad_id, []).append(impression)
    rows: Counter[tuple[Any, ...]] = Counter()
    for click in clicks:
        for impression in by_ad.get(click.ad_id, []):
            if impression.time <= click.time <= impression.time + CLICK_WITHIN:
                rows[(impression.ad_id, _naive(impression.time), click.ad_id,
                      _naive(click.time))] += 1
    return rows


# --- the guide's dropDuplicatesWithinWatermark --------------------------------------------

@dataclass(frozen=True)
class Delivery:
    guid: str
    event_time: dt.datetime
    payload: str


def _fresh_deliveries(index: int, seed: int) -> list[Delivery]:
    rng = random.Random(seed * 32_452_843 + index)
    start = EPOCH + dt.timedelta(seconds=SLICE_SECONDS * index)
    return [Delivery(f"g{index}-{n}",
                     start + dt.timedelta(milliseconds=n * 1_500 + rng.randint(0, 900)),
                     rng.choice(WORDS))
            for n in range(12)]


def deliveries_for_slice(index: int, seed: int = 3) -> list[Delivery]:
    """Events of slice ``index`` (20 s), preceded by some events of the two slices before:
    a message delivered twice, the copy identical and at most 40 s of event time late."""
    rng = random.Random(seed * 49_979_687 + index)
    again = [d for earlier in range(max(0, index - 2), index)
             for d in _fresh_deliveries(earlier, seed) if rng.random() < 0.2]
    return again + _fresh_deliveries(index, seed)


def write_deliveries(directory: Path, indexes: Iterable[int]) -> list[Delivery]:
    written = []
    for index in indexes:
        deliveries = deliveries_for_slice(index)
        write_json_file(directory, f"events-{index:05d}.json",
                        ({"guid": d.guid, "eventTime": _stamp(d.event_time),
                          "payload": d.payload} for d in deliveries))
        written.extend(deliveries)
    return written


def expected_unique_deliveries(deliveries: Sequence[Delivery]) -> Counter[tuple[Any, ...]]:
    """(guid, eventTime, payload) once per guid: every copy of a guid is identical."""
    first: dict[str, Delivery] = {}
    for delivery in deliveries:
        assert first.setdefault(delivery.guid, delivery) == delivery
    return Counter((d.guid, _naive(d.event_time), d.payload) for d in first.values())
