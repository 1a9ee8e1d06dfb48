"""The comparison behind starts that prove their sources (sources/input_gaps.py): Kafka resume
offsets against the broker's earliest ones, a file source's planned files against the file
system, the one refusal line, the offsets a start that accepts the loss resumes at, and a
broker that does not answer (a warning naming the source, never a refusal)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from sparkpoint.runtime.registry import Lineage
from sparkpoint.sources.input_gaps import (
    InputCheck,
    SourceToCheck,
    check,
    kafka_gaps,
    local_file_exists,
    missing_files,
)


def test_a_partition_loses_what_lies_between_its_resume_offset_and_the_earliest_held() -> None:
    resume = {"t": {"0": 3, "1": 5, "2": 7, "3": -2, "4": -1}, "u": {"0": 0}}
    earliest = {("t", 0): 6, ("t", 1): 5, ("t", 2): 2, ("t", 3): 9, ("t", 4): 9,
                ("u", 0): 1}
    gaps = kafka_gaps("events", resume, earliest)
    # Equal or below the resume offset: nothing lost; -2/-1 the source resolves itself.
    assert [(g.topic, g.partition, g.resume, g.earliest, g.lost) for g in gaps] == [
        ("t", 0, 3, 6, 3), ("u", 0, 0, 1, 1)]
    # A partition the broker was not asked about (none known) loses nothing.
    assert kafka_gaps("events", {"t": {"9": 0}}, earliest) == []


def test_the_refusal_is_one_line_per_start_and_names_every_partition_and_count() -> None:
    source = SourceToCheck("events", "kafka", {}, json.dumps({"t": {"0": 3, "1": 4, "2": 1}}))
    found = InputCheck(sources={"events": source},
                       gaps=kafka_gaps("events", {"t": {"0": 3, "1": 4, "2": 1}},
                                       {("t", 0): 6, ("t", 1): 5, ("t", 2): 0}))
    line = found.refusal("job 'k2' not started, nothing was created", "do X")
    assert "\n" not in line
    assert line == (
        "job 'k2' not started, nothing was created: source 'events' resumes at Kafka offsets "
        "the broker no longer holds (deleted, e.g. by the topic's retention): 3 record(s) of "
        "t-0 (offsets 3..5; the broker's earliest offset there is 6), 1 record(s) of t-1 "
        "(offsets 4..4; the broker's earliest offset there is 5); do X")
    # Accepted: only the lost partitions move, up to the earliest offset held.
    assert json.loads(found.raised_offsets()["events"]) == {"t": {"0": 6, "1": 5, "2": 1}}
    [first, second] = found.accepted("2026-01-01T00:00:00.000+00:00", "run --from-snapshot s")
    assert (first.records, second.records) == (3, 1)
    assert found.problems("do X") == [line.split(": ", 1)[1]]


def test_missing_planned_files_are_counted_once_each(tmp_path: Path) -> None:
    kept = tmp_path / "a b.json"  # a space: the log holds URIs, percent-encoded
    kept.write_text("{}")
    gone = (tmp_path / "gone.json").as_uri()
    planned = [kept.as_uri(), gone, gone]
    gap = missing_files("clicks", planned, lambda uri: local_file_exists(uri) is not False)
    assert gap is not None and gap.files == (gone,) and gap.lost == 1
    assert missing_files("clicks", [kept.as_uri()], lambda uri: True) is None
    found = check([SourceToCheck("clicks", "file", {}, '{"logOffset":1}', tuple(planned))])
    assert [g.files for g in found.gaps] == [(gone,)] and found.warnings == []
    assert "source 'clicks' must read again 1 input file(s)" in found.source_lines()[0]
    # Not on this machine's file system: not checked, and said so.
    remote = check([SourceToCheck("clicks", "file", {}, None, ("s3a://b/in/x.json",))])
    assert remote.ok and "not on this machine's file system" in remote.warnings[0]


def test_a_broker_that_does_not_answer_is_a_warning_naming_the_source() -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    source = SourceToCheck("events", "kafka", {"kafka.bootstrap.servers": f"127.0.0.1:{port}"},
                           '{"t":{"0":3}}')
    began = time.monotonic()
    found = check([source], timeout=1.0)
    assert time.monotonic() - began < 10
    assert found.ok
    [warning] = found.warnings
    assert warning.startswith(f"source 'events': the Kafka broker at 127.0.0.1:{port} did not "
                              "answer within 1s"), warning
    assert "was not checked" in warning


def test_records_of_older_versions_read_without_accepted_loss() -> None:
    assert Lineage.model_validate({"from_snapshot": "s1"}).accepted_loss == []
