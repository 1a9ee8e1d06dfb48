"""Rewinding a file sink's output (sinks/rewind.py) on logs in Spark's format, and the batch
choices around it (upgrade/batches.py). Spark reading the rewound table is pinned by
tests/integration/test_rewind_output.py."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from sparkpoint.checkpoint.sink_log import files_up_to, latest_batch
from sparkpoint.errors import CorruptRecordError, SinkRewindError, UsageError
from sparkpoint.sinks import rewind as rewind_module
from sparkpoint.sinks.rewind import (
    ABANDONED_LOG_DIR,
    INTENT_FILE,
    RECORD_FILE,
    RewindPlan,
    finish_pending,
    finished,
    pending,
    plan_rewind,
    rewind,
)
from sparkpoint.upgrade.batches import BatchChoice, SinkInfo, number_batches
from tests.support.s3 import S3Server

INTERVAL = 3  # compactions at batches 2, 5, 8...


def _status(path: Path) -> str:
    # FileStreamSinkLog's SinkFileStatus, as Spark's json4s writes it.
    return json.dumps({"path": path.as_uri(), "size": 10, "isDir": False,
                       "modificationTime": 1, "blockReplication": 1, "blockSize": 33554432,
                       "action": "add"}, separators=(",", ":"))


def _sink(out: Path, batches: int, partitioned: bool = False) -> dict[int, list[Path]]:
    """A sink log of batches 0..batches-1 with two data files each (compacted every 3)."""
    log = out / "_spark_metadata"
    log.mkdir(parents=True)
    files: dict[int, list[Path]] = {}
    for batch in range(batches):
        where = out / f"day={batch % 2}" if partitioned else out
        where.mkdir(exist_ok=True)
        files[batch] = [where / f"part-{batch}-{n}.parquet" for n in range(2)]
        for path in files[batch]:
            path.write_bytes(b"data")
            (path.parent / f".{path.name}.crc").write_bytes(b"crc")
        if (batch + 1) % INTERVAL == 0:
            listed = [p for b in range(batch + 1) for p in files[b]]
            name = f"{batch}.compact"
        else:
            listed = files[batch]
            name = str(batch)
        (log / name).write_text("v1\n" + "\n".join(_status(p) for p in listed))
        (log / f".{name}.crc").write_bytes(b"crc")
    return files


def _uris(files: dict[int, list[Path]], batches: range) -> set[str]:
    return {p.as_uri() for b in batches for p in files[b]}


@pytest.mark.parametrize(("to_batch", "moved_entries"), [
    (1, ["7", "6", "5.compact", "4", "3", "2.compact"]),  # back past two compactions
    (2, ["7", "6", "5.compact", "4", "3"]),  # to a compaction batch
    (6, ["7"]),  # within the newest compaction's span
])
def test_rewind_moves_later_entries_and_their_files_aside(
    tmp_path: Path, to_batch: int, moved_entries: list[str]
) -> None:
    out = tmp_path / "out"
    files = _sink(out, 8, partitioned=True)
    plan = plan_rewind(out, to_batch, "test")
    assert plan is not None
    assert plan.log_entries == moved_entries
    assert plan.latest_batch == 7
    rewind(plan)
    assert latest_batch(out) == to_batch
    assert files_up_to(out, to_batch) == _uris(files, range(to_batch + 1))
    for batch, paths in files.items():
        for path in paths:
            relative = path.relative_to(out)
            assert path.exists() == (batch <= to_batch)
            assert (Path(plan.directory) / relative).exists() == (batch > to_batch)
            assert (Path(plan.directory) / relative.parent / f".{path.name}.crc").exists() == \
                (batch > to_batch)
    for name in moved_entries:
        assert (Path(plan.directory) / ABANDONED_LOG_DIR / name).is_file()
        assert (Path(plan.directory) / ABANDONED_LOG_DIR / f".{name}.crc").is_file()
        assert not (out / "_spark_metadata" / f".{name}.crc").exists()
    assert not (Path(plan.directory) / INTENT_FILE).exists()
    record = json.loads((Path(plan.directory) / RECORD_FILE).read_text())
    assert record["to_batch"] == to_batch and record["log_entries"] == moved_entries
    assert pending(out) == []


def test_nothing_to_rewind_at_or_past_the_latest_batch(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 4)
    assert plan_rewind(out, 3, "test") is None
    assert plan_rewind(out, 9, "test") is None
    assert plan_rewind(tmp_path / "absent", 0, "test") is None


def test_a_log_that_no_longer_tells_the_batch_is_refused(tmp_path: Path) -> None:
    """Spark deletes entries before an old compaction: batch 1's files are then unknown."""
    out = tmp_path / "out"
    _sink(out, 8)
    for name in ("0", "1", "2.compact"):
        (out / "_spark_metadata" / name).unlink()
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(SinkRewindError, match="no longer holds the entries"):
        plan_rewind(out, 1, "test")
    assert sorted(p.name for p in out.rglob("*")) == before
    assert plan_rewind(out, 5, "test") is not None  # from 5.compact on it still can


def test_files_outside_the_output_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 3)
    elsewhere = tmp_path / "elsewhere" / "part-x.parquet"
    (out / "_spark_metadata" / "3").write_text("v1\n" + _status(elsewhere))
    with pytest.raises(SinkRewindError, match="outside the output"):
        plan_rewind(out, 2, "test")


def test_an_interrupted_rewind_is_finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    files = _sink(out, 8)

    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == "rewind.file_moved":
            raise Crash(name)

    monkeypatch.setattr(rewind_module, "crash_point", crash_at)
    plan = plan_rewind(out, 3, "test")
    assert plan is not None
    with pytest.raises(Crash):
        rewind(plan)
    assert latest_batch(out) == 3  # the log is rewound; one file moved, the rest not
    assert [p.rewind_id for p in pending(out)] == [plan.rewind_id]
    monkeypatch.undo()
    lines: list[str] = []
    assert [p.rewind_id for p in finish_pending(out, lines.append)] == [plan.rewind_id]
    assert "finished an interrupted rewind" in lines[0]
    assert pending(out) == []
    for batch, paths in files.items():
        for path in paths:
            assert path.exists() == (batch <= 3)
            assert (Path(plan.directory) / path.name).exists() == (batch > 3)


def test_sink_ahead_names_the_three_ways_out(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 10)
    sink = SinkInfo("parquet", out)
    check = number_batches(4, sink, BatchChoice())
    assert check.problem is not None
    for named in ("new output directory", "--rewind-output", "--renumber-batches",
                  "keeps the old run's rows of batches 5..9 in the table"):
        assert named in check.problem

    rewound = number_batches(4, sink, BatchChoice(rewind=True))
    assert rewound.problem is None and rewound.warning is None
    assert rewound.numbering.to_dict() == {"snapshot_batch": 4, "first_batch": 5,
                                           "renumbered": False, "sink_latest_batch": 9,
                                           "rewind_to_batch": 4}
    assert number_batches(9, sink, BatchChoice(rewind=True)).numbering.rewind_to_batch is None

    renumbered = number_batches(4, sink, BatchChoice(renumber=True))
    assert renumbered.problem is None and renumbered.warning is not None
    assert "keeps the old run's batches 5..9" in renumbered.warning
    assert "--rewind-output" in renumbered.warning


def test_rewind_needs_a_local_file_sink_and_excludes_the_other_choices() -> None:
    with pytest.raises(UsageError, match="not one"):
        number_batches(3, SinkInfo("foreachBatch", None), BatchChoice(rewind=True))
    with pytest.raises(UsageError, match="use only one of --renumber-batches, --rewind-output"):
        BatchChoice(renumber=True, rewind=True)
    with pytest.raises(UsageError, match="--first-batch, --rewind-output"):
        BatchChoice(first_batch=7, rewind=True)


def test_plan_text_shows_the_rewind() -> None:
    from sparkpoint.cli.render import plan_text
    from sparkpoint.upgrade.batches import BatchNumbering
    from sparkpoint.upgrade.validate import UpgradePlan

    text = plan_text(UpgradePlan(batches=BatchNumbering(1, 2, False, 5, rewind_to_batch=1)))
    assert "batches: snapshot batch 1, first new batch 2; the output is rewound to batch 1 " \
           "first (its batches 2..5 move aside)" in text


def test_each_abandoned_file_is_moved_once_and_the_summary_names_the_batches(
    tmp_path: Path,
) -> None:
    """A compaction above the batch (5.compact) repeats batch 4's files: they are planned
    once."""
    out = tmp_path / "out"
    files = _sink(out, 8, partitioned=True)
    plan = plan_rewind(out, 3, "test")
    assert plan is not None
    expected = sorted(str(p.relative_to(out)) for b in range(4, 8) for p in files[b])
    assert sorted(plan.files) == expected and len(plan.files) == len(expected)
    assert plan.summary() == (
        f"rewound the output {out} to batch 3: the sink log entries of batches 4..7 and "
        f"their 8 data file(s) moved aside to {plan.directory}")


def test_a_plan_is_named_and_stamped_in_utc_whatever_the_local_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _sink(out, 5)
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        before = dt.datetime.now(dt.UTC).replace(microsecond=0)
        plan = plan_rewind(out, 3, "test")
        after = dt.datetime.now(dt.UTC)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert plan is not None
    named = re.fullmatch(r"(\d{8}T\d{6}Z)-to-batch-3-[0-9a-f]{6}", plan.rewind_id)
    assert named is not None, plan.rewind_id
    stamp = dt.datetime.strptime(named.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    recorded = dt.datetime.fromisoformat(plan.recorded_at)
    assert recorded.utcoffset() == dt.timedelta(0)
    assert before <= stamp <= after and before <= recorded <= after


def test_files_in_nested_partitions_move_with_their_checksums(tmp_path: Path) -> None:
    """Two partition levels below the output: the directories are made on the way, for a
    file with its ``.crc`` sibling and for one without."""
    out = tmp_path / "out"
    _sink(out, 3)
    nested = [out / "day=1" / "hour=2" / "part-a.parquet",
              out / "day=3" / "hour=4" / "part-b.parquet"]
    for path in nested:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"data")
    (nested[0].parent / f".{nested[0].name}.crc").write_bytes(b"crc")
    (out / "_spark_metadata" / "3").write_text("v1\n" + "\n".join(_status(p) for p in nested))
    plan = plan_rewind(out, 2, "test")
    assert plan is not None
    rewind(plan)
    moved = Path(plan.directory)
    assert [p.exists() for p in nested] == [False, False]
    assert (moved / "day=1" / "hour=2" / "part-a.parquet").read_bytes() == b"data"
    assert (moved / "day=1" / "hour=2" / ".part-a.parquet.crc").read_bytes() == b"crc"
    assert (moved / "day=3" / "hour=4" / "part-b.parquet").read_bytes() == b"data"


def test_a_log_naming_plain_paths_inside_the_output_is_rewound(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 3)
    plain = out / "part-plain.parquet"
    plain.write_bytes(b"data")
    status = json.loads(_status(plain))
    (out / "_spark_metadata" / "3").write_text("v1\n" + json.dumps({**status, "path": str(plain)}))
    plan = plan_rewind(out, 2, "test")
    assert plan is not None and plan.files == ["part-plain.parquet"]
    rewind(plan)
    assert not plain.exists() and (Path(plan.directory) / "part-plain.parquet").is_file()


DATA_FILE_ONLY = (" as a data file, expected files of the table only; the log was not "
                  "written by Spark's file sink alone, so the output cannot be taken back: "
                  "write the new job to a new output directory instead; nothing was changed")


@pytest.mark.parametrize(("named", "says"), [
    ("s3a://bucket/out/part-x.parquet", ", not a local file like the output; its files cannot "
     "be moved aside under the output; write the new job to a new output directory instead; "
     "nothing was changed"),
    ("{elsewhere}", ", outside the output {out} (was the output copied from elsewhere?); its "
     "files cannot be moved aside under the output; write the new job to a new output "
     "directory instead; nothing was changed"),
    ("{out}/_spark_metadata/0", DATA_FILE_ONLY),
    ("{out}/_sparkpoint_rewound/x/part-0.parquet", DATA_FILE_ONLY),
])
def test_a_log_naming_a_file_that_cannot_be_moved_aside_is_refused_with_the_way_out(
    tmp_path: Path, named: str, says: str
) -> None:
    out = tmp_path / "out"
    _sink(out, 3)
    where = {"out": out, "elsewhere": tmp_path / "elsewhere" / "part-x.parquet"}
    location = named.format(**where)
    location = Path(location).as_uri() if location.startswith("/") else location
    (out / "_spark_metadata" / "3").write_text("v1\n" + json.dumps(
        {**json.loads(_status(out / "x")), "path": location}))
    before = sorted(str(p) for p in out.rglob("*"))
    with pytest.raises(SinkRewindError) as refused:
        plan_rewind(out, 2, "test")
    assert refused.value.message == \
        f"{out}/_spark_metadata: names {location}{says.format(**where)}"
    assert sorted(str(p) for p in out.rglob("*")) == before


def test_a_log_that_no_longer_tells_the_batch_names_the_settings_behind_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    _sink(out, 8)
    for name in ("0", "1", "2.compact"):
        (out / "_spark_metadata" / name).unlink()
    with pytest.raises(SinkRewindError) as refused:
        plan_rewind(out, 1, "test")
    assert refused.value.message == (
        f"{out}/_spark_metadata: the sink log no longer holds the entries that tell which "
        "files batch 1 ended with (an entry is missing: Spark removes entries before an older "
        "compaction once spark.sql.streaming.minBatchesToRetain batches have passed and "
        "spark.sql.streaming.fileSink.log.cleanupDelay has elapsed, and a batch that wrote "
        "no entry leaves a hole); the output cannot be taken back to batch 1; write the new "
        "job to a new output directory instead; nothing was changed")


@pytest.mark.parametrize(("point", "moved_entries", "moved_files"), [
    ("rewind.log_entry_moved", ["7"], 0),
    ("rewind.file_moved", ["7", "6", "5.compact", "4"], 1),
])
def test_a_rewind_cut_off_at_its_first_move_has_made_exactly_that_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, moved_entries: list[str],
    moved_files: int,
) -> None:
    out = tmp_path / "out"
    files = _sink(out, 8)

    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == point:
            raise Crash(name)

    monkeypatch.setattr(rewind_module, "crash_point", crash_at)
    plan = plan_rewind(out, 3, "test")
    assert plan is not None
    with pytest.raises(Crash):
        rewind(plan)
    moved = Path(plan.directory)
    assert sorted(p.name for p in (moved / ABANDONED_LOG_DIR).iterdir()
                  if not p.name.startswith(".")) == sorted(moved_entries)
    abandoned = [p for b in range(4, 8) for p in files[b]]
    assert sum((moved / p.name).exists() for p in abandoned) == moved_files
    assert sum(not p.exists() for p in abandoned) == moved_files


def _record(plan: RewindPlan, rewind_id: str, recorded_at: str) -> RewindPlan:
    return plan.model_copy(update={"rewind_id": rewind_id, "recorded_at": recorded_at})


def test_pending_and_finished_rewinds_are_told_apart_and_listed_oldest_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listed by when they were recorded, not by name; a rewind with the other kind of
    record is passed over, not the end of the listing."""
    out = tmp_path / "out"
    _sink(out, 8)
    first = plan_rewind(out, 6, "test")
    assert first is not None
    # Named in the opposite order of their recording.
    rewind(_record(first, "2030-to-batch-6-bbbbbb", "2020-01-01T00:00:00.000+00:00"))
    second = plan_rewind(out, 5, "test")
    assert second is not None
    rewind(_record(second, "2020-to-batch-5-aaaaaa", "2021-01-01T00:00:00.000+00:00"))
    assert [p.rewind_id for p in finished(out)] == ["2030-to-batch-6-bbbbbb",
                                                    "2020-to-batch-5-aaaaaa"]

    class Crash(Exception):
        pass

    def crash_at(name: str) -> None:
        if name == "rewind.intent_recorded":
            raise Crash(name)

    monkeypatch.setattr(rewind_module, "crash_point", crash_at)
    third = plan_rewind(out, 4, "test")
    assert third is not None
    with pytest.raises(Crash):
        rewind(_record(third, "2040-to-batch-4-cccccc", "2022-01-01T00:00:00.000+00:00"))
    assert [p.rewind_id for p in pending(out)] == ["2040-to-batch-4-cccccc"]
    assert len(finished(out)) == 2


def test_an_unreadable_intent_is_refused_naming_it_and_what_was_wrong(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _sink(out, 3)
    intent = out / "_sparkpoint_rewound" / "x" / INTENT_FILE
    intent.parent.mkdir(parents=True)
    intent.write_text("not json")
    with pytest.raises(CorruptRecordError) as refused:
        pending(out)
    assert refused.value.message == (
        f"{intent}: expected the record of an interrupted rewind of the output, found "
        "unreadable content (Expecting value: line 1 column 1 (char 0)); nothing was "
        "changed: compare the output's _spark_metadata with the files beside the record, "
        "then remove it to go on")


def test_an_output_on_s3_is_rewound_inside_the_store(s3_server: S3Server) -> None:
    """Spark names the files as ``s3a://`` URLs, percent-encoded: each moves to the same path
    under the rewind's directory. The output's name ends in a letter Spark's paths never
    strip: only its slash is."""
    bucket = s3_server.new_bucket()
    output = f"s3a://{bucket}/tables/clicksX"
    client = s3_server.client()
    keys = {0: ["a.parquet"], 1: ["day=1/b c.parquet"], 2: ["c.parquet"]}
    for batch, names in keys.items():
        for name in names:
            client.put_object(Bucket=bucket, Key=f"tables/clicksX/{name}", Body=b"data")
        lines = [json.dumps({"path": f"{output}/{quote(name)}", "size": 4, "isDir": False,
                             "modificationTime": 1, "blockReplication": 1, "blockSize": 1,
                             "action": "add"}) for name in names]
        client.put_object(Bucket=bucket, Key=f"tables/clicksX/_spark_metadata/{batch}",
                          Body="\n".join(["v1", *lines]).encode())
    plan = plan_rewind(output, 0, "test")
    assert plan is not None
    assert plan.files == ["c.parquet", "day=1/b c.parquet"]
    rewind(plan)
    under = f"tables/clicksX/_sparkpoint_rewound/{plan.rewind_id}"
    assert set(s3_server.keys(bucket, "tables/")) == {
        "tables/clicksX/a.parquet", "tables/clicksX/_spark_metadata/0",
        f"{under}/c.parquet", f"{under}/day=1/b c.parquet",
        f"{under}/_spark_metadata_abandoned/1", f"{under}/_spark_metadata_abandoned/2",
        f"{under}/_rewind.json"}


@pytest.mark.parametrize("elsewhere", [
    "s3a://{other}/tables/clicksX/d.parquet",  # the same path in another bucket
    "s3a://{bucket}/tables/clicksXY/d.parquet",  # a sibling whose name starts the same
    "hdfs://{bucket}/tables/clicksX/d.parquet",  # the same path in another store
])
def test_a_file_outside_an_output_on_s3_is_refused(s3_server: S3Server, elsewhere: str) -> None:
    bucket = s3_server.new_bucket()
    output = f"s3a://{bucket}/tables/clicksX"
    client = s3_server.client()
    location = elsewhere.format(bucket=bucket, other=s3_server.new_bucket())
    for batch, path in ((0, f"{output}/a.parquet"), (1, location)):
        line = json.dumps({"path": path, "size": 4, "isDir": False, "modificationTime": 1,
                           "blockReplication": 1, "blockSize": 1, "action": "add"})
        client.put_object(Bucket=bucket, Key=f"tables/clicksX/_spark_metadata/{batch}",
                          Body=f"v1\n{line}".encode())
    with pytest.raises(SinkRewindError, match=f"names {location}, outside the output {output} "):
        plan_rewind(output, 0, "test")
