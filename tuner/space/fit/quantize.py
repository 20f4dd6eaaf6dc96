"""Optimal 1-D bucket boundaries: the least expected padding for a given number of buckets.

A value x is padded up to the smallest boundary b >= x and wastes b - x. For a weighted sample of
values and k boundaries, the set that minimises the expected waste has every boundary on a value of the
sample (moving a boundary down to the largest value it covers only lowers the waste), and the largest
boundary is the largest value. Over the sorted distinct values that is an optimal partition into k
contiguous groups, each padded to its own maximum: a dynamic programme over (groups, last value),
O(k n^2), vectorised over the previous cut. `granularity` first rounds every value up to a multiple
(a bucket of 1,000 tokens is no use when the release pads to blocks of 128).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_DISTINCT = 2048  # the programme holds an n x n table


class FitError(ValueError):
    """Input the fitter cannot work with; the message names the value."""


@dataclass(frozen=True)
class Fit:
    boundaries: tuple[int, ...]   # ascending; the last one covers the largest value
    waste: float                  # expected padding per value (same unit as the values)
    mean: float                   # expected value (so waste / mean is the relative waste)

    @property
    def count(self) -> int:
        return len(self.boundaries)

    @property
    def waste_share(self) -> float:
        return self.waste / (self.mean + self.waste) if self.mean + self.waste else 0.0


def _support(values: Sequence[int], weights: Sequence[float] | None, granularity: int):
    if granularity < 1:
        raise FitError(f"granularity must be >= 1, got {granularity}")
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        raise FitError("no values to fit (the workload is empty)")
    if (v < 0).any():
        raise FitError(f"values must be >= 0, got {int(v.min())}")
    w = np.ones(v.size) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != v.shape or (w < 0).any() or not np.isfinite(w).all() or w.sum() <= 0:
        raise FitError("weights must be one finite non-negative number per value, not all zero")
    g = -(-v // granularity) * granularity        # round up: the smallest shape a value can use
    xs, inverse = np.unique(g, return_inverse=True)
    mass = np.bincount(inverse, weights=w)
    keep = mass > 0
    if keep.sum() > MAX_DISTINCT:
        raise FitError(f"{int(keep.sum())} distinct lengths at granularity {granularity}; use a granularity that "
                       f"leaves at most {MAX_DISTINCT}")
    total = w.sum()
    mean = float((v * w).sum() / total)
    return xs[keep].astype(float), mass[keep] / total, mean, float(((g - v) * w).sum() / total)


def pareto_curve(values: Sequence[int], weights: Sequence[float] | None = None, *, max_buckets: int,
                 granularity: int = 1, cover: int | None = None) -> list[Fit]:
    """The optimal set for every bucket count 1..max_buckets (fewer when the sample has fewer distinct
    values: beyond that, more buckets cannot lower the waste). `cover`: a value the largest boundary must
    reach though the sample never does (the worst case a sample misses): it joins as a value of no
    weight, so the programme decides whether it closes its own bucket or widens the top one."""
    if max_buckets < 1:
        raise FitError(f"the number of buckets must be >= 1, got {max_buckets}")
    xs, p, mean, rounding = _support(values, weights, granularity)
    if cover is not None:
        top = -(-int(cover) // granularity) * granularity
        if top > xs[-1]:
            xs, p = np.append(xs, float(top)), np.append(p, 0.0)
    n = xs.size
    kmax = min(max_buckets, n)
    cw = np.concatenate(([0.0], np.cumsum(p)))            # mass of xs[:j]
    cx = np.concatenate(([0.0], np.cumsum(p * xs)))       # first moment of xs[:j]

    # cost[i, j]: values xs[i..j] (inclusive) padded to xs[j]; only i <= j is meaningful.
    i_idx = np.arange(n)[:, None]
    j_idx = np.arange(n)[None, :]
    cost = xs[None, :] * (cw[j_idx + 1] - cw[i_idx]) - (cx[j_idx + 1] - cx[i_idx])
    cost = np.where(i_idx <= j_idx, cost, np.inf)

    # best[k][j]: least waste covering xs[0..j] with k groups, the last ending at j.
    best = np.full((kmax + 1, n), np.inf)
    arg = np.zeros((kmax + 1, n), dtype=np.int64)
    best[1] = cost[0]
    for k in range(2, kmax + 1):
        # the previous group ends at i-1, the new one is xs[i..j]
        prev = np.concatenate(([np.inf], best[k - 1][:-1]))      # prev[i] = best[k-1][i-1]
        total = prev[:, None] + cost                              # [i, j]
        arg[k] = np.argmin(total, axis=0)
        best[k] = total[arg[k], np.arange(n)]
    fits = []
    for k in range(1, kmax + 1):
        cuts, j = [], n - 1
        for kk in range(k, 0, -1):
            cuts.append(int(xs[j]))
            if kk > 1:
                j = int(arg[kk][j]) - 1
        # max(0, .): the prefix-sum differences cancel to -1e-13 where the waste is exactly zero
        fits.append(Fit(tuple(sorted(cuts)), max(0.0, float(best[k][n - 1])) + rounding, mean))
    return fits


def optimal_boundaries(values: Sequence[int], k: int, weights: Sequence[float] | None = None, *,
                       granularity: int = 1) -> Fit:
    return pareto_curve(values, weights, max_buckets=k, granularity=granularity)[-1]


def expected_waste(values: Sequence[int], boundaries: Sequence[int], weights: Sequence[float] | None = None) -> float:
    """Expected padding of a given boundary set; inf when a value exceeds the largest boundary."""
    v = np.asarray(values, dtype=float)
    w = np.ones(v.size) if weights is None else np.asarray(weights, dtype=float)
    b = np.sort(np.asarray(boundaries, dtype=float))
    if b.size == 0 or v.max() > b[-1]:
        return float("inf")
    padded = b[np.searchsorted(b, v, side="left")]
    return float(((padded - v) * w).sum() / w.sum())
