"""``snapshot inspect``'s text: Spark's default of 200 partitions holding a few dozen rows
is summarised as the largest partitions and a total; ``--all-partitions`` lists each."""

from __future__ import annotations

import re

from sparkpoint.checkpoint.boundedness import Boundedness
from sparkpoint.cli.render import inspect_text
from sparkpoint.snapshot.inspect import InspectReport, OperatorReport, PartitionStats


def _report(rows_by_partition: dict[int, int], partitions: int) -> InspectReport:
    stats = [PartitionStats(p, rows_by_partition.get(p, 0), 100 + 10 * rows_by_partition.get(p, 0))
             for p in range(partitions)]
    op = OperatorReport(
        name="hourly", operator_id=0, kind="aggregation", rows=sum(s.rows for s in stats),
        bytes=sum(s.bytes for s in stats), skew=None, event_time=None,
        boundedness=Boundedness("bounded", "watermarked"), partitions=stats)
    return InspectReport(4, "RocksDBStateStoreProvider", [op], "s", "j")


def _listed(text: str) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2)))
            for m in re.finditer(r"^  (\d+)\s+(\d+)\s+\S+ \S+$", text, re.MULTILINE)]


def test_two_hundred_partitions_are_summarised_by_the_largest_and_a_total() -> None:
    # 60 rows in 13 of 200 partitions, as a small word count under Spark's defaults has them.
    rows = {7: 12, 42: 9, 3: 8, 199: 8, 100: 5, 1: 3, 2: 3, 4: 3, 5: 3, 6: 2, 8: 2, 9: 1, 10: 1}
    assert sum(rows.values()) == 60
    text = inspect_text(_report(rows, 200))
    assert _listed(text) == [(7, 12), (42, 9), (3, 8), (199, 8), (100, 5)]
    rest = 60 - (12 + 9 + 8 + 8 + 5)
    assert f"... 195 more partitions (187 empty): {rest} rows" in text
    assert "total 200 partitions: 60 rows" in text and "--all-partitions" in text
    assert len(text.splitlines()) < 20

    every = inspect_text(_report(rows, 200), all_partitions=True)
    assert _listed(every) == [(p, rows.get(p, 0)) for p in range(200)]
    assert "more partitions" not in every


def test_a_few_partitions_are_all_listed() -> None:
    rows = {p: p for p in range(10)}
    text = inspect_text(_report(rows, 10))
    assert _listed(text) == sorted(rows.items())
    assert "more partitions" not in text
