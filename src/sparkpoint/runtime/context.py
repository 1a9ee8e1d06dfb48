"""``JobContext``: what a job's ``build`` function receives besides the SparkSession."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkpoint.errors import JobFileError
from sparkpoint.spark.declarations import StatefulDeclaration
from sparkpoint.storage.home import operator_name_problem

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class JobContext:
    """Parameters from ``--param`` and the names a job gives its stateful operators."""

    job: str
    params: Mapping[str, str] = field(default_factory=dict)
    declarations: list[StatefulDeclaration] = field(default_factory=list)
    # How messages name what is being built: the job, or for a command that only reads the
    # job file (plan, resume-point build, snapshot import) that command, since no job with
    # the name in ``job`` exists.
    described: str | None = None
    # Kafka sources whose committed offsets also go to a consumer group: source -> group id.
    offset_groups: dict[str, str] = field(default_factory=dict)

    @property
    def who(self) -> str:
        return self.described or f"job '{self.job}'"

    def param(self, key: str, default: str | None = None) -> str | None:
        """The value of ``--param key=value``, else ``default``."""
        return self.params.get(key, default)

    def require_param(self, key: str) -> str:
        """The value of ``--param key=value``; missing, the job fails with a clear message.

        A call with a literal key that ``build`` always makes (not under an ``if``, loop or
        ``try``) is found by reading the job file, so a missing value fails before Spark
        starts."""
        value = self.params.get(key)
        if value is None:
            raise JobFileError(
                f"{self.who} needs --param {key}=...; pass it on the command line"
            )
        return value

    def stateful(self, name: str, frame: DataFrame) -> DataFrame:
        """Name the outermost stateful operator of ``frame``; its state follows this name."""
        problem = operator_name_problem(name)
        if problem is not None:
            raise JobFileError(f"{self.who}: {problem}")
        if any(existing.name == name for existing in self.declarations):
            raise JobFileError(
                f"{self.who}: the stateful name '{name}' is used twice; each stateful "
                "operator needs its own name"
            )
        self.declarations.append(StatefulDeclaration(name, frame))
        return frame

    def commit_offsets_to_group(self, source: str, group: str) -> None:
        """After each batch commits, commit its end offsets of the Kafka source named
        ``source`` (its ``.name()``) to the consumer group ``group``, so that Kafka's own
        tools (``kafka-consumer-groups.sh --describe``, Burrow, Kafka UIs) show how far behind
        the job is. Only for watching: the checkpoint stays the one record of positions and
        the group is never read back."""
        if not group or not group.strip():
            raise JobFileError(f"{self.who}: commit_offsets_to_group('{source}', ...) needs a "
                               "consumer group id; give a non-empty one")
        self.offset_groups[source] = group
