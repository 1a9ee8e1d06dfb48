"""What an aggregation's state holds per key: one part per aggregate function, in the order
Spark's planner gives them (``AggUtils.planStreamingAggregation``: the state value of format
2 is the partial-merge aggregate's buffer attributes, function after function).

Recorded per operator when a job runs and when a plain checkpoint is adopted (from Spark's
physical plan), carried into snapshot manifests, and compared when a job resumes: an
aggregate the new version adds starts from its function's own initial buffer values (as if
it had seen no row before the switch), one it removes is dropped, one it keeps is moved to
its new position.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class BufferColumn(BaseModel):
    """One column of an aggregate's buffer: its name and Spark's JSON of its type."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    type: Any


class AggregateState(BaseModel):
    """One aggregate function's part of the state value."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: Spark's SQL of the function (``count(1)``, ``max(score)``): what identifies it.
    function: str
    buffer: tuple[BufferColumn, ...]
    #: Spark's SQL of each buffer column's initial value (``DeclarativeAggregate
    #: .initialValues``); None for a function whose buffer is an object Spark serializes.
    initial: tuple[str, ...] | None = None
    #: Spark's SQL of the merge of two buffers per buffer column (``mergeExpressions``),
    #: reading the two buffers' columns as ``__left_i`` and ``__right_i``; None where Spark
    #: has none (an object buffer) or it was not read (a session without sparkpoint's jar).
    merge: tuple[str, ...] | None = None
