"""The start pipeline: a job's checkpoint built from snapshots, once, in three modes.

``plan`` (a dry run: every problem listed, the checkpoint built in scratch space and thrown
away after Spark's restart check), ``rehearse`` (built and published in the rehearsal's
scratch home, problems refused) and ``run`` (built and published in the job's home, problems
refused). Each mode goes through the same two steps, the command's own steps between them:

1. ``resolve``: the resume point (given, or the default one of a snapshot) checked against
   the planned job and the snapshots: what resumes, initializes or is dropped, the batch
   ids, the start positions; whose output the job would write into (``plan`` and ``run``);
   whether every source still holds what the job resumes at (``run`` refuses a gap unless
   it is accepted; ``plan`` lists it after its dry-run build: ``sources/input_gaps.py``).
2. ``build``: the checkpoint assembled, repartitioned if asked, checked by Spark and (not in
   ``plan``) published at the target (``upgrade/restore.py``).

A start from a snapshot (``upgrade/start.py``) rewinds the output between the two, a
rehearsal (``rehearse/run.py``) checks that it replays only what the old job read; ``plan``
(``api.plan``) reports.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from sparkpoint.errors import SinkAheadError, ValidationError
from sparkpoint.losses import ACCEPT_OPTION
from sparkpoint.runtime.registry import JobRegistry, now_iso
from sparkpoint.runtime.runner import PlannedJob
from sparkpoint.snapshot.store import SnapshotStore
from sparkpoint.sources.input_gaps import InputCheck, check
from sparkpoint.spark.sink import kafka_output
from sparkpoint.storage.home import Home
from sparkpoint.storage.location import Location, StorePath
from sparkpoint.upgrade.assemble import AssembleResult, used_snapshots
from sparkpoint.upgrade.batches import BatchChoice
from sparkpoint.upgrade.inputs_held import start_sources
from sparkpoint.upgrade.kafka_rollback import kafka_replays
from sparkpoint.upgrade.output_ownership import refuse_start_outside_lineage, start_outside_lineage
from sparkpoint.upgrade.restore import Resolution, build_new_checkpoint, resolve
from sparkpoint.upgrade.resume_point import ReadResumePoint, ResumePoint
from sparkpoint.upgrade.validate import UpgradePlan

Echo = Callable[[str], None]


class Mode(enum.Enum):
    PLAN = "plan"
    REHEARSE = "rehearse"
    RUN = "run"


@dataclass
class StartPipeline:
    """One start from snapshots of the planned job ``planned`` (see the module's docs).
    ``job``: the new job's name (``run``); ``target``: where its checkpoint goes (``run``,
    ``rehearse``; ``plan`` of a home in a store: its scratch prefix there); ``read``: the
    resume point as ``plan`` reads it (problems included)."""

    mode: Mode
    home: Home
    store: SnapshotStore
    planned: PlannedJob
    point: ResumePoint | None
    from_snapshot: str | None
    choice: BatchChoice
    job: str | None = None
    target: Location | None = None
    read: ReadResumePoint | None = None
    # --accept-data-loss: input the sources no longer hold is gone without a refusal (and
    # recorded in the job's lineage).
    accept_data_loss: bool = False

    def resolve(self, echo: Echo) -> Resolution:
        """Step 1. In ``plan`` problems are listed; else they refuse the start (nothing
        was created)."""
        resolution = resolve(self.store, self.planned, self.point, self.from_snapshot,
                             self.choice, self.read, target=self.target)
        plan = resolution.plan
        sink = self.planned.sink
        output = sink.location if sink is not None else None
        if self.mode is not Mode.REHEARSE:  # a rehearsal writes into scratch outputs
            self._name_kafka_replays(resolution)
        if self.mode is Mode.PLAN:
            for unfinished in sink.pending_rewinds() if sink is not None else []:
                plan.warnings.append(
                    f"the output {unfinished.output} has an interrupted rewind to batch "
                    f"{unfinished.to_batch}; the next run into it finishes it (the sink checks "
                    "here read its log as it is now)")
            return resolution
        if self.mode is Mode.RUN:
            assert self.job is not None
            refuse_start_outside_lineage(JobRegistry(self.home), self.store, self.job, output,
                                         used_snapshots(plan))
        for warning in plan.warnings:
            echo(f"warning: {warning}")
        if self.mode is Mode.RUN and resolution.sink_problem is not None and \
                plan.problems == [resolution.sink_problem]:
            raise SinkAheadError(f"job '{self.job}' not started, nothing was created: "
                                 f"{resolution.sink_problem}")
        if not plan.ok:
            what = "the job cannot resume" if self.mode is Mode.RUN else \
                "the new version cannot resume"
            done = "nothing was created" if self.mode is Mode.RUN else "nothing was run"
            raise ValidationError(
                f"{what} ({len(plan.problems)} problem(s)); {done}:\n  "
                + "\n  ".join(plan.problems), problems=plan.problems)
        if self.mode is Mode.RUN:
            self._prove_sources(resolution, echo)
        return resolution

    def _name_kafka_replays(self, resolution: Resolution) -> None:
        """A rollback into a Kafka topic writes its batches again: said in the plan's
        warnings (echoed by a run before Spark starts) and kept for the job's lineage."""
        plan = resolution.plan
        replays = kafka_replays(
            JobRegistry(self.home), kafka_output(self.planned.writer),
            {name: (used.manifest.job, used.manifest.batch_id)
             for name, used in resolution.snapshots.items()})
        plan.kafka_replays.extend(replays)
        plan.warnings.extend(replay.message() for replay in replays)

    def _sources_held(self, resolution: Resolution) -> InputCheck:
        return check(start_sources(resolution, JobRegistry(self.home)))

    def _remedy(self) -> str:
        return (f"to go on from what they still hold, start with {ACCEPT_OPTION} (Kafka "
                "partitions resume at the earliest offset the broker holds; the loss is "
                "recorded in the job's lineage), or start from a newer snapshot")

    def _prove_sources(self, resolution: Resolution, echo: Echo) -> None:
        """Before Spark starts: every source still holds what the start resumes at, or the
        start is refused (nothing created) unless the loss is accepted; then the Kafka
        sources resume at the earliest offsets held, and the loss goes to the lineage."""
        found = self._sources_held(resolution)
        if not found.refuse_unless_accepted(
                self.accept_data_loss, f"job '{self.job}' not started, nothing was created",
                self._remedy(), echo):
            return
        started = f"run --from-snapshot {self.from_snapshot}" if self.from_snapshot \
            else "run --resume-point"
        resolution.accepted_loss = found.accepted(now_iso(), started)
        raised = found.raised_offsets()
        for name, offset in raised.items():
            if name in resolution.positions:  # an initialized source's resolved start
                resolution.positions[name] = replace(resolution.positions[name],
                                                     offset_json=offset)
            else:
                resolution.raised_offsets[name] = offset
        for line in found.source_lines():
            echo(f"warning: accepted ({ACCEPT_OPTION}): {line}")

    def build(self, resolution: Resolution, echo: Echo,
              spark_location: str | None = None) -> AssembleResult | None:
        """Step 2: the checkpoint built, checked by Spark and published at ``target`` (in
        ``plan``: built in scratch space and removed; Spark's refusal becomes a problem of
        the plan, and what the start would not be allowed is listed after it)."""
        if self.mode is not Mode.PLAN:
            assert self.target is not None
            return build_new_checkpoint(self.planned, resolution, self.target, echo,
                                        spark_location=spark_location)
        plan = resolution.plan
        if plan.ok and isinstance(self.target, StorePath):
            # A home in a store: built as the start would build it, in the plan's scratch
            # prefix there (upgrade/plan_scratch.py, which removes it).
            with contextlib.suppress(ValidationError):  # the problem is in the plan already
                build_new_checkpoint(self.planned, resolution, self.target, echo)
        elif plan.ok:
            scratch = Path(tempfile.mkdtemp(prefix="sparkpoint-plan-")) / "checkpoint"
            try:
                build_new_checkpoint(self.planned, resolution, scratch, echo, publish=False)
            except ValidationError:
                pass  # the problem is in the plan already
            finally:
                shutil.rmtree(scratch.parent, ignore_errors=True)
        # A precondition of the start, not of the checkpoint it builds: listed after the
        # dry-run build, which it does not change.
        outside = start_outside_lineage(JobRegistry(self.home), self.store,
                                        self.planned.sink.location if self.planned.sink
                                        is not None else None, used_snapshots(plan))
        if outside is not None:
            plan.problems.append(outside)
        found = self._sources_held(resolution)
        plan.warnings.extend(found.warnings)
        if self.accept_data_loss:
            plan.warnings.extend(f"accepted ({ACCEPT_OPTION}): {line}"
                                 for line in found.source_lines())
        else:
            plan.problems.extend(found.problems(self._remedy()))
        return None

    def dry_run(self, echo: Echo) -> UpgradePlan:
        """``plan``: both steps, the plan with every problem."""
        resolution = self.resolve(echo)
        self.build(resolution, echo)
        return resolution.plan
