"""Repeated wall-clock samples of one benchmark step, shared by the benchmark scripts."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def describe(self, decimals: int = 3) -> str:
        return " ".join(f"{s:.{decimals}f}" for s in self.samples)
