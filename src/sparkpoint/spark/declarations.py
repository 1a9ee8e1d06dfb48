"""What a job declares of its stateful operators through ``JobContext.stateful``: each one's
name and the frame it names, matched to Spark's plan by spark/plan.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


@dataclass
class StatefulDeclaration:
    name: str
    frame: DataFrame
