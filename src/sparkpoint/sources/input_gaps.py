"""What a start will read that its sources no longer hold, found before Spark starts.

A start from a snapshot, an import of a plain checkpoint and a start with startpoints each
resume every source at a position. Two ways the input there can be gone:

- Kafka (Spark's connector and sparkpoint's source): a partition whose earliest offset on
  the broker is above the resume offset lost ``earliest - resume`` records (retention deletes
  a segment at a time, DeleteRecords moves the log start at once). Spark's connector then
  fails at the first batch (failOnDataLoss) or, with it off, skips them without a word.
- Spark's file source: files its log names for batches after the resume position (planned
  and not committed, or read by the lineage after the snapshot) are read again on the next
  trigger because the source lists its directory anew; a file removed since is skipped
  without a word.

The comparisons are pure (``kafka_gaps``, ``missing_files``); ``check`` asks the brokers,
each with a short timeout: a broker that does not answer is reported as a warning naming
the source, and the start goes on (Spark's own check still runs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from sparkpoint.losses import ACCEPT_OPTION, AcceptedLoss
from sparkpoint.sources.kafka import KAFKA_KINDS, KafkaMetadata, Offsets, parse_offsets

log = logging.getLogger(__name__)

# Seconds a start waits for a broker's answer before it warns and goes on.
BROKER_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SourceToCheck:
    """A source as the start will resume it: its kind and options (the job's), the offset
    JSON it resumes from, and for a file source the input files its log names after that
    position (what the next batch reads again)."""

    name: str
    kind: str
    options: Mapping[str, str] = field(default_factory=dict)
    offset: str | None = None
    planned_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gap:
    """Input one source must read and cannot: a Kafka partition's offsets
    ``[resume, earliest)``, or a file source's missing files."""

    source: str
    topic: str | None = None
    partition: int | None = None
    resume: int = 0
    earliest: int = 0
    files: tuple[str, ...] = ()

    @property
    def kafka(self) -> bool:
        return self.topic is not None

    @property
    def lost(self) -> int:
        """Records (Kafka) or files (file source) gone."""
        return self.earliest - self.resume if self.kafka else len(self.files)

    def describe(self) -> str:
        if self.kafka:
            return (f"{self.lost} record(s) of {self.topic}-{self.partition} (offsets "
                    f"{self.resume}..{self.earliest - 1}; the broker's earliest offset there "
                    f"is {self.earliest})")
        shown = ", ".join(self.files[:3]) + (", ..." if len(self.files) > 3 else "")
        return f"{self.lost} input file(s) its log names for the next batch ({shown})"

    def to_dict(self) -> dict[str, Any]:
        if self.kafka:
            return {"source": self.source, "topic": self.topic, "partition": self.partition,
                    "resume_offset": self.resume, "earliest_offset": self.earliest,
                    "records": self.lost}
        return {"source": self.source, "missing_files": list(self.files)}

    def accepted(self, at: str, by: str) -> AcceptedLoss:
        if self.kafka:
            return AcceptedLoss(source=self.source, topic=self.topic, partition=self.partition,
                                resume_offset=self.resume, earliest_offset=self.earliest,
                                records=self.lost, accepted_at=at, by=by)
        return AcceptedLoss(source=self.source, missing_files=self.files, accepted_at=at,
                            by=by)


def kafka_gaps(source: str, resume: Offsets,
               earliest: Mapping[tuple[str, int], int]) -> list[Gap]:
    """Partitions whose resume offset is below the broker's earliest offset. Offsets the
    source resolves itself (-2 earliest, -1 latest) and partitions the broker was not asked
    about lose nothing."""
    gaps = []
    for topic, parts in sorted(resume.items()):
        for part, offset in sorted(parts.items(), key=lambda item: int(item[0])):
            held = earliest.get((topic, int(part)))
            if offset >= 0 and held is not None and held > offset:
                gaps.append(Gap(source, topic, int(part), offset, held))
    return gaps


def missing_files(source: str, planned: Sequence[str],
                  exists: Callable[[str], bool]) -> Gap | None:
    """The planned input files that no longer exist (each named once, in log order)."""
    gone = tuple(dict.fromkeys(uri for uri in planned if not exists(uri)))
    return Gap(source, files=gone) if gone else None


def local_file_exists(uri: str) -> bool | None:
    """Whether a file source's input file is there; None when it is not on this machine's
    file system (not checked)."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        return None
    return Path(url2pathname(parsed.path) if parsed.scheme else uri).exists()


@dataclass
class InputCheck:
    """Every gap found, and a warning per source that could not be checked."""

    sources: dict[str, SourceToCheck] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.gaps

    def by_source(self) -> dict[str, list[Gap]]:
        grouped: dict[str, list[Gap]] = {}
        for gap in self.gaps:
            grouped.setdefault(gap.source, []).append(gap)
        return grouped

    def source_lines(self) -> list[str]:
        """One phrase per source with gaps: what is gone."""
        lines = []
        for source, gaps in self.by_source().items():
            if gaps[0].kafka:
                lines.append(f"source '{source}' resumes at Kafka offsets the broker no longer "
                             "holds (deleted, e.g. by the topic's retention): "
                             + ", ".join(g.describe() for g in gaps))
            else:
                lines.append(f"source '{source}' must read again "
                             + ", ".join(g.describe() for g in gaps)
                             + ", which no longer exist")
        return lines

    def refusal(self, what: str, remedy: str) -> str:
        """The one line a refused start prints: ``what`` (the job or import and that
        nothing changed), each source's gaps, ``remedy``."""
        return f"{what}: " + "; ".join(self.source_lines()) + f"; {remedy}"

    def refuse_unless_accepted(self, accept: bool, what: str, remedy: str,
                               echo: Callable[[str], None]) -> bool:
        """The warnings echoed; a gap refused (``SourceDataLostError``, ``what`` was not
        done, ``remedy`` says what to do) unless ``accept``. True: there is an accepted
        gap for the caller to apply; False: nothing is lost."""
        from sparkpoint.errors import SourceDataLostError

        for warning in self.warnings:
            echo(f"warning: {warning}")
        if self.ok:
            return False
        if not accept:
            raise SourceDataLostError(self.refusal(what, remedy),
                                      gaps=[gap.to_dict() for gap in self.gaps])
        return True

    def problems(self, remedy: str) -> list[str]:
        """``plan``'s problems: one per source, each with what to do."""
        return [f"{line}; {remedy}" for line in self.source_lines()]

    def accepted(self, at: str, by: str) -> list[AcceptedLoss]:
        return [gap.accepted(at, by) for gap in self.gaps]

    def raised_offsets(self) -> dict[str, str]:
        """Per Kafka source with gaps, its resume offset JSON with each lost partition moved
        up to the broker's earliest offset: where a start that accepts the loss resumes
        (Spark's connector refuses a position below it)."""
        raised: dict[str, str] = {}
        for source, gaps in self.by_source().items():
            checked = self.sources.get(source)
            if not gaps[0].kafka or checked is None or checked.offset is None:
                continue
            offsets = parse_offsets(checked.offset, f"source '{source}'")
            for gap in gaps:
                assert gap.topic is not None
                offsets[gap.topic][str(gap.partition)] = gap.earliest
            raised[source] = json.dumps(offsets, separators=(",", ":"))
        return raised


def default_remedy(accepting: str) -> str:
    return (f"to go on from what the sources still hold, run again with {ACCEPT_OPTION} "
            f"({accepting})")


def check(sources: Sequence[SourceToCheck], timeout: float = BROKER_TIMEOUT_S) -> InputCheck:
    """Each source's gaps, asked of its broker or its file system now."""
    found = InputCheck(sources={s.name: s for s in sources})
    for source in sources:
        if source.kind in KAFKA_KINDS and source.offset:
            _check_kafka(source, timeout, found)
        elif source.kind == "file" and source.planned_files:
            _check_files(source, found)
    return found


def _check_kafka(source: SourceToCheck, timeout: float, found: InputCheck) -> None:
    bootstrap = source.options.get("kafka.bootstrap.servers")
    try:
        resume = parse_offsets(source.offset or "", f"source '{source.name}'")
    except ValueError:
        found.warnings.append(f"source '{source.name}': its offset {source.offset!r} is not "
                              "Kafka's offset JSON; whether the broker still holds it was not "
                              "checked")
        return
    if not bootstrap:
        found.warnings.append(f"source '{source.name}': no kafka.bootstrap.servers option; "
                              "whether the broker still holds its offsets was not checked")
        return
    earliest: dict[tuple[str, int], int] = {}
    try:
        meta = KafkaMetadata(bootstrap, timeout=timeout)
        try:
            for topic, parts in resume.items():
                for part in parts:
                    earliest[(topic, int(part))] = meta.bounds(topic, int(part))[0]
        finally:
            meta.close()
    except Exception as exc:  # any broker failure: said, never a reason to stop (see module)
        log.debug("asking %s for %s's earliest offsets failed", bootstrap, source.name,
                  exc_info=True)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        found.warnings.append(
            f"source '{source.name}': the Kafka broker at {bootstrap} did not answer within "
            f"{timeout:g}s ({reason}); whether it still holds the offsets the start resumes "
            "from was not checked (Spark's connector fails at the first batch if it does not)")
        return
    found.gaps.extend(kafka_gaps(source.name, resume, earliest))


def _check_files(source: SourceToCheck, found: InputCheck) -> None:
    unchecked = [uri for uri in source.planned_files if local_file_exists(uri) is None]
    if unchecked:
        found.warnings.append(
            f"source '{source.name}': {len(unchecked)} input file(s) its log names for the "
            f"next batch are not on this machine's file system ({unchecked[0]}); whether they "
            "still exist was not checked")
    gap = missing_files(source.name, source.planned_files,
                        lambda uri: local_file_exists(uri) is not False)
    if gap is not None:
        found.gaps.append(gap)
