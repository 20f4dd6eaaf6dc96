"""For releases that cannot read a bucket file: the linear MIN/STEP/MAX that come closest to a fitted set.

Every (min, step, max) a release's linear strategy accepts expands through the same ramp-up-then-step
range the bucket engine uses; each candidate's expected padding on the workload is computed exactly and
the cheapest candidate with at most k buckets is the answer for k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...buckets.base import linear_range
from .quantize import expected_waste


@dataclass(frozen=True)
class LinearChoice:
    minimum: int
    step: int
    maximum: int
    boundaries: tuple[int, ...]
    waste: float

    @property
    def count(self) -> int:
        return len(self.boundaries)


def linear_candidates(values: Sequence[int], granularity: int, weights: Sequence[float] | None = None,
                      steps: Sequence[int] = (), top: int | None = None) -> list[LinearChoice]:
    """`top`: the value the largest bucket must reach (default: the largest value)."""
    top = max(max(values), top or 0)
    steps = steps or [granularity * 2**i for i in range(12) if granularity * 2**i <= max(top, granularity)]
    out = []
    for step in steps:
        maximum = -(-top // step) * step
        lo = granularity
        while lo <= step:
            bounds = tuple(linear_range(lo, step, maximum))
            if bounds and bounds[-1] >= top:
                out.append(LinearChoice(lo, step, maximum, bounds, expected_waste(values, bounds, weights)))
            lo *= 2
    return out


def closest_linear(candidates: list[LinearChoice], max_count: int) -> LinearChoice | None:
    fitting = [c for c in candidates if c.count <= max_count]
    return min(fitting, key=lambda c: (c.waste, c.count)) if fitting else None
