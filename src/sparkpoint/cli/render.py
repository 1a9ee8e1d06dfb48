"""Text and JSON renderings of what the reading commands return."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from typing import Any

from sparkpoint.api import JobView, StartpointPreview
from sparkpoint.checkpoint.operators import schema_ddl
from sparkpoint.checkpoint.retained import iso_utc
from sparkpoint.runtime.registry import DrainRecord
from sparkpoint.snapshot.diff import SnapshotDiff
from sparkpoint.snapshot.inspect import InspectReport, OperatorReport
from sparkpoint.snapshot.manifest import Manifest
from sparkpoint.snapshot.store import Problem, Sharing
from sparkpoint.spark.state_diff import PartDiff
from sparkpoint.upgrade.batches import BatchNumbering
from sparkpoint.upgrade.validate import UpgradePlan


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def snapshot_row(manifest: Manifest) -> dict[str, Any]:
    return {
        "name": manifest.name,
        "job": manifest.job,
        "created_at": manifest.created_at,
        "batch_id": manifest.batch_id,
        "bytes": manifest.total_bytes,
        "operators": len(manifest.operators),
        "sources": len(manifest.sources),
    }


def snapshot_list_text(manifests: list[Manifest]) -> str:
    if not manifests:
        return "no snapshots"
    rows = [[m.created_at, human_bytes(m.total_bytes), m.job, m.name, str(m.batch_id)]
            for m in manifests]
    return table(["TIME", "SIZE", "JOB", "NAME", "BATCH"], rows)


def snapshot_show_dict(manifest: Manifest, sharing: Sharing | None = None,
                       location: str | None = None,
                       counted: dict[str, int] | None = None) -> dict[str, Any]:
    data = manifest.model_dump(mode="json")
    if counted is not None:
        for op in data["operators"]:
            op["counted_rows"] = counted.get(op["name"])
    data.pop("files")
    data["files"] = len(manifest.files)
    if sharing is not None:
        data["shared_bytes"] = sharing.shared_bytes
        data["own_bytes"] = sharing.own_bytes
    if location is not None:
        data["store"] = location
    return data


def _sharing_line(manifest: Manifest, sharing: Sharing | None) -> list[str]:
    if sharing is None:
        return []
    text = (f"shared    {human_bytes(sharing.shared_bytes)} held by other snapshots too, "
            f"{human_bytes(sharing.own_bytes)} by this one only")
    if manifest.added_bytes is not None:
        text += f"; {human_bytes(manifest.added_bytes)} added to the store when created"
    return [text]


def snapshot_show_text(manifest: Manifest, sharing: Sharing | None = None,
                       location: str | None = None,
                       counted: dict[str, int] | None = None) -> str:
    out = [
        f"snapshot  {manifest.name}",
        f"job       {manifest.job}",
        f"created   {manifest.created_at}",
        f"batch     {manifest.batch_id}",
        f"spark     {manifest.spark_version}, {manifest.state_store_provider.rsplit('.', 1)[-1]}, "
        f"{manifest.shuffle_partitions} shuffle partitions",
        f"size      {human_bytes(manifest.total_bytes)} in {len(manifest.files)} files",
        *_sharing_line(manifest, sharing),
        *([f"store     {location}"] if location else []),
        "",
        "sources:",
    ]
    for source in manifest.sources:
        out.append(f"  {source.name}: {json.dumps(source.offset)}")
    if manifest.accepted_loss:
        out.append("accepted loss:")
        out.extend(f"  {loss.describe()}" for loss in manifest.accepted_loss)
    out.append("operators:")
    for op in manifest.operators:
        rows = "?" if op.rows is None else str(op.rows)
        if counted is not None and op.name in counted:
            rows += f" ({counted[op.name]} counted)"
        window = f", {op.window.describe()}" if op.window and op.window.kind != "none" else ""
        out.append(f"  {op.name}  (id {op.operator_id}, {op.kind}{window}, {op.partitions} "
                   f"partitions, {rows} rows, {human_bytes(op.bytes)})")
        for store in op.stores:
            prefix = "    " if store.name == "default" else f"    [{store.name}] "
            if store.key_schema is not None:
                out.append(f"{prefix}key:   {schema_ddl(store.key_schema)}")
            if store.value_schema is not None:
                out.append(f"{prefix}value: {schema_ddl(store.value_schema)}")
    return "\n".join(out)


def problems_dict(name: str, problems: list[Problem]) -> dict[str, Any]:
    return {
        "snapshot": name,
        "ok": not problems,
        "problems": [{"path": p.path, "message": p.message} for p in problems],
    }


def rate_text(view: JobView) -> str:
    if view.progress is None:
        return "-"
    return f"{view.progress.rows_per_second:.1f} rows/s"


def human_seconds(seconds: float) -> str:
    """A lag in time, to the unit a reader takes in at a glance."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def lag_text(view: JobView, per_partition: bool = False) -> str:
    """How far behind its sources the job is, measured now (``views.py``): files not
    read yet of local file sources, records the broker holds past the committed batch of
    Kafka sources and how old the oldest of them is, '?' where it is not known. Sources are
    named when the job has several (or with ``per_partition``, which adds each Kafka
    partition's count); '-' when the job has no lag (drained, superseded), with the reason
    when ``per_partition``."""
    lags = view.lag
    if lags is None:
        return f"- ({view.lag_absent})" if per_partition else "-"
    parts = []
    for name, lag in lags.items():
        text = "?" if lag.behind is None or lag.unit is None else \
            f"{lag.behind} {lag.unit if lag.behind != 1 else lag.unit.removesuffix('s')}"
        if per_partition and lag.partitions:
            text += " (" + ", ".join(f"{p}: {n}" for p, n in sorted(lag.partitions.items())) \
                + ")"
        if lag.unit == "records" and lag.behind is not None:
            text += f" {'?' if lag.seconds is None else human_seconds(lag.seconds)} behind"
        parts.append(f"{name}: {text}" if per_partition or len(lags) > 1 else text)
    return ", ".join(parts) or "-"


def job_list_text(views: list[JobView]) -> str:
    if not views:
        return "no jobs"
    rows = [[v.record.name, v.status, "-" if v.batch is None else str(v.batch), rate_text(v),
             lag_text(v), v.record.run_id or "-", v.record.lineage.from_snapshot or "-"]
            for v in views]
    return table(["JOB", "STATE", "BATCH", "RATE", "LAG", "RUN ID", "FROM SNAPSHOT"], rows)


def progress_lines(view: JobView) -> list[str]:
    progress = view.progress
    if progress is None:
        # Counted now, with or without a batch run.
        return ["progress  - (no batch has run in the latest run)",
                f"lag       {lag_text(view, per_partition=True)}"]
    out = [
        f"progress  batch {progress.batch} at {progress.timestamp}: {progress.input_rows} input "
        f"rows, {progress.rows_per_second:.1f} rows/s, {progress.duration_ms} ms",
        f"watermark {progress.watermark or '-'}",
        f"lag       {lag_text(view, per_partition=True)}",
    ]
    # Spark's progress names operators by kind; a kind the job has once names the operator.
    kinds = Counter(op.spark_operator_name for op in view.record.operators)
    names = {op.spark_operator_name: op.name for op in view.record.operators
             if kinds[op.spark_operator_name] == 1}
    for op in progress.operators:
        name = names.get(op.operator, op.operator)
        out.append(f"state     {name}: {op.rows} rows, {human_bytes(op.bytes)}")
    return out


# A longer per-partition listing shows its largest partitions and a total (Spark's default of
# 200 partitions would otherwise bury a few rows under 200 lines).
PARTITIONS_LISTED = 10
LARGEST_PARTITIONS = 5


def _partition_lines(op: OperatorReport, all_partitions: bool) -> list[str]:
    parts = op.partitions
    if all_partitions or len(parts) <= PARTITIONS_LISTED:
        shown = parts
    else:
        shown = sorted(parts, key=lambda p: (-p.rows, -p.bytes, p.partition))[
            :LARGEST_PARTITIONS]
    rows = [[str(p.partition), str(p.rows), human_bytes(p.bytes)] for p in shown]
    out = ["  " + line for line in table(["PARTITION", "ROWS", "SIZE"], rows).split("\n")]
    if len(shown) < len(parts):
        rest = [p for p in parts if p not in shown]
        empty = sum(1 for p in rest if p.rows == 0)
        out.append(f"  ... {len(rest)} more partitions ({empty} empty): "
                   f"{sum(p.rows for p in rest)} rows, {human_bytes(sum(p.bytes for p in rest))}")
        out.append(f"  total {len(parts)} partitions: {op.rows} rows, {human_bytes(op.bytes)} "
                   "(the largest listed; all with --all-partitions)")
    return out


def _operator_inspect_lines(op: OperatorReport, all_partitions: bool = False) -> list[str]:
    skew = "-" if op.skew is None else f"{op.skew:.2f}"
    out = [f"{op.name}  (id {op.operator_id}, {op.kind}): {op.rows} rows, "
           f"{human_bytes(op.bytes)}, key skew {skew} (largest partition / mean)"]
    if op.event_time is not None:
        out.append(f"  event time of keys ({op.event_time.column}): "
                   f"{op.event_time.min or '-'} .. {op.event_time.max or '-'}")
    check = op.boundedness
    out.append(f"  {check.status.upper() if check.status == 'unbounded' else check.status}: "
               f"{check.reason}")
    if check.fix:
        out.append(f"  fix: {check.fix}")
    out.extend(_partition_lines(op, all_partitions))
    for note in op.undecoded:
        out.append(f"  not decoded: {note}")
    for sample in op.sample or []:
        out.append(f"  p{sample.partition} {json.dumps(sample.key)} -> "
                   f"{json.dumps(sample.value)}")
    return out


def inspect_text(report: InspectReport, all_partitions: bool = False) -> str:
    out = [f"snapshot '{report.snapshot}' of job '{report.job}' at batch {report.batch_id} "
           f"({report.state_store_provider.rsplit('.', 1)[-1]})"]
    if not report.operators:
        out.append("no stateful operators")
    for op in report.operators:
        out.append("")
        out.extend(_operator_inspect_lines(op, all_partitions))
    return "\n".join(out)


def snapshottable_lines(view: JobView) -> list[str]:
    """The batches 'snapshot create --batch K' can still take, with their time (the one
    '--at' goes by)."""
    held = view.snapshottable
    if held is None:
        return []
    if not held:
        return ["past      no committed batch can be snapshotted"]
    out = [f"past      {len(held)} committed batch{'es' if len(held) != 1 else ''} can be "
           f"snapshotted (--batch K / --at TIME):"]
    shown = held if len(held) <= 6 else [*held[:3], None, *held[-2:]]
    for entry in shown:
        out.append("            ..." if entry is None else
                   f"            batch {entry.batch}  time {iso_utc(entry.batch_time)}")
    return out


def job_show_text(view: JobView) -> str:
    record = view.record
    out = [
        f"job       {record.name}",
        f"state     {view.status}" + (f" ({record.describe_process()})"
                                      if view.status == "running" else "")
        + (f" (superseded by job '{view.superseded_by}', created after its last run)"
           if view.superseded_by is not None else ""),
        f"batch     {'-' if view.batch is None else view.batch}",
        f"run id    {record.run_id or '-'}",
        f"job file  {record.job_file}",
        f"params    {' '.join(f'{k}={v}' for k, v in record.params.items()) or '-'}",
        *progress_lines(view),
    ]
    out.extend(snapshottable_lines(view))
    for checked in view.state_checks or []:
        out.append(f"bounded   {checked['operator']}: {checked['status']}"
                   + (f" - {checked['reason']}" if checked["status"] != "bounded" else ""))
        if checked.get("fix"):
            out.append(f"          fix: {checked['fix']}")
    if record.error:
        out.append(f"error     {record.error}")
    lineage = record.lineage
    if lineage.from_snapshot:
        out.append(f"lineage   from snapshot '{lineage.from_snapshot}' of job "
                   f"'{lineage.snapshot_job}' at batch {lineage.snapshot_batch}")
    for loss in lineage.accepted_loss:
        out.append(f"lost      {loss.describe()}")
    for replay in lineage.kafka_replays:
        out.append(f"replayed  {replay.message()}")
    if record.drain is not None:
        out.append(f"drained   at batch {record.drain.batch} ({record.drain.drained_at}); "
                   + drain_residual_text(record.drain))
    if record.startpoints_applied:
        out.append("startpoints applied:")
        for applied in record.startpoints_applied[-5:]:
            out.append(f"  {applied.applied_at}  {applied.source} (after batch {applied.batch}): "
                       + "; ".join(applied.positions))
    out.append("operators:")
    for op in record.operators:
        named = "" if op.named_by_user else "  (derived name)"
        out.append(f"  {op.name}  (id {op.operator_id}, {op.spark_operator_name}){named}")
    out.append("runs:")
    for run in record.runs[-10:]:
        first = "new" if run.first_batch is None else f"after {run.first_batch}"
        last = "-" if run.last_batch is None else str(run.last_batch)
        out.append(f"  {run.started_at}  {run.status:8}  started {first}, last batch {last}  "
                   f"{run.run_id}")
    return "\n".join(out)


def plan_text(plan: UpgradePlan) -> str:
    # Columns are as wide as their longest entry, so long derived names keep rows aligned.
    names = [row.name for row in plan.sources] + [row.name for row in plan.operators]
    name_width = max([24, *map(len, names)])
    actions = [row.action for row in plan.sources] + [row.shown_action for row in plan.operators]
    action_width = max([10, *map(len, actions)])
    origins = [f"{op.origin['snapshot']}/{op.origin['operator']}" if op.origin else "-"
               for op in plan.operators]
    origin_width = max([28, *map(len, origins)])
    out = ["sources:"]
    for source in plan.sources:
        if source.action == "resume" and source.origin is not None:
            where = f"from {source.origin['snapshot']}/{source.origin['source']}"
            out.append(f"  {source.name:{name_width}} {source.action:{action_width}} {where} "
                       f"at {json.dumps(source.offset)}")
        else:
            at = f" at {json.dumps(source.offset)}" if source.offset is not None else ""
            start = json.dumps(source.start)
            out.append(f"  {source.name:{name_width}} {source.action:{action_width}} "
                       f"start {start}{at}")
    out.append("operators:")
    for op, origin in zip(plan.operators, origins, strict=True):
        mark = "" if op.compatible else "  INCOMPATIBLE"
        out.append(f"  {op.name:{name_width}} {op.shown_action:{action_width}} "
                   f"{origin:{origin_width}} {op.reason}{mark}")
        out.extend(f"  {'':{name_width}} {'':{action_width}} - {change}"
                   for change in op.changes)
    if plan.batches is not None:
        out.append(f"batches: {batches_text(plan.batches)}")
    for warning in plan.warnings:
        out.append(f"warning: {warning}")
    if plan.problems:
        out.append(f"{len(plan.problems)} problem(s):")
        out.extend(f"  - {problem}" for problem in plan.problems)
    else:
        out.append("ok: the job can start from this resume point")
    return "\n".join(out)


def batches_text(batches: BatchNumbering) -> str:
    text = f"snapshot batch {batches.snapshot_batch}, first new batch {batches.first_batch}"
    if batches.renumbered:
        text += f" (renumbered: batch ids shifted by " \
                f"{batches.first_batch - batches.snapshot_batch - 1}"
        if batches.sink_latest_batch is not None:
            text += f", past the output's sink log at batch {batches.sink_latest_batch}"
        text += ")"
    if batches.rewind_to_batch is not None:
        text += (f"; the output is rewound to batch {batches.rewind_to_batch} first (its "
                 f"batches {batches.rewind_to_batch + 1}..{batches.sink_latest_batch} move "
                 "aside)")
    return text


def drain_residual_text(drain: DrainRecord) -> str:
    residual = drain.residual
    if not residual:
        return "all state emptied"
    parts = [f"{op.name} {'unknown' if op.rows is None else op.rows} rows" for op in residual]
    return "residual state: " + ", ".join(parts)


def drain_text(job: str, drain: DrainRecord) -> str:
    out = [f"job '{job}' drained at batch {drain.batch}: every event-time window and timer "
           "fired; watermark back to "
           f"{dt.datetime.fromtimestamp(drain.watermark_ms / 1000, dt.UTC).isoformat()}"]
    for op in drain.operators:
        rows = "unknown" if op.rows is None else str(op.rows)
        mark = "  RESIDUAL (no watermark clears this state)" if op.rows != 0 else ""
        out.append(f"  {op.name:24} {op.spark_operator_name:32} {rows:>8} rows{mark}")
    if drain.snapshot:
        out.append(f"snapshot '{drain.snapshot}' holds the drained state")
    return "\n".join(out)


def drain_dict(job: str, drain: DrainRecord) -> dict[str, Any]:
    data = drain.model_dump(mode="json")
    data["job"] = job
    data["residual"] = [op.model_dump(mode="json") for op in drain.residual]
    return data


def startpoint_text(preview: StartpointPreview) -> str:
    verb = "set" if preview.stored else "would set (dry run, nothing stored)"
    out = [f"startpoint {verb} for job '{preview.job}':"]
    out += [f"  {s.describe()}" for s in preview.startpoints]
    out.append("resolves now to:")
    out += [f"  {line}" for line in preview.resolved.lines]
    out.append("applied once, at the job's next start, then cleared")
    if preview.stateful_operators:
        out.append("note: state is not rewound; operators keep their state: "
                   + ", ".join(preview.stateful_operators))
    return "\n".join(out)


def _diff_part(part: PartDiff) -> list[str]:
    counts = (f"  {part.part}: {part.only_in_a} only in A, {part.only_in_b} only in B, "
              + (f"{part.changed} with other values, " if part.part == "keys" else "")
              + f"{part.same} alike")
    lines = [counts]
    if part.value_columns_only_in_a:
        lines.append(f"    value columns only in A: {', '.join(part.value_columns_only_in_a)}")
    if part.value_columns_only_in_b:
        lines.append(f"    value columns only in B: {', '.join(part.value_columns_only_in_b)}")
    for kind, label in (("only_in_a", "only in A"), ("only_in_b", "only in B"),
                        ("changed", "other values")):
        for example in part.examples.get(kind, []):
            shown = "  ".join(f"{side}={json.dumps(value, sort_keys=True)}"
                              for side, value in example.items())
            lines.append(f"    {label}: {shown}")
    return lines


def diff_text(diff: SnapshotDiff) -> str:
    """``snapshot diff``: one block per operator."""
    lines = [f"A: snapshot '{diff.a.name}' (job '{diff.a.job}', batch {diff.a.batch_id})",
             f"B: snapshot '{diff.b.name}' (job '{diff.b.job}', batch {diff.b.batch_id})"]
    for op in diff.operators:
        if not op.in_b:
            lines.append(f"{op.name} ({op.kind}): only in A ({op.rows_a} rows)")
        elif not op.in_a:
            lines.append(f"{op.name} ({op.kind}): only in B ({op.rows_b} rows)")
        else:
            lines.append(f"{op.name} ({op.kind})" + (f": {op.note}" if op.note else ""))
            for part in op.parts:
                lines.extend(_diff_part(part))
    return "\n".join(lines)
