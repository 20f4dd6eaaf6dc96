"""The plan's answer: the predicted Pareto front, the configurations that could be on it, and the few
worth booting first.

Vectors are (throughput, latency, warm-up): throughput maximised, the others minimised. The front is
the feasible configurations no other one beats everywhere (as predicted). A configuration *could be*
on it when its favourable end is not beaten by a front member's unfavourable end, counting only the
scatter of one configuration around the others (the calibration's `spread`: a correction shared by
every configuration moves them all together and leaves the front where it is).

The picks are chosen greedily by expected hypervolume gain under the model's uncertainty: in each of
SAMPLES draws, every correction takes a value shared by all configurations (its standard error) and
every configuration its own scatter; a draw's configuration whose warm-up exceeds the budget counts for
nothing. The first pick adds the most hypervolume on average over the draws to what is known (the
baseline, when there is one), the next the most to that, and so on.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

import numpy as np

DIRECTIONS = ("maximize", "minimize", "minimize")
SAMPLES = 256
MAX_CANDIDATES = 120


def _as_min(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    a = np.asarray(vectors, dtype=float).reshape(-1, 3).copy()
    a[:, 0] = -a[:, 0]
    return a


def front_indices(vectors: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated vectors (duplicates all kept), in O(distinct x front) with numpy."""
    a = _as_min(vectors)
    if not len(a):
        return []
    distinct, inverse = np.unique(a, axis=0, return_inverse=True)  # sorted: a dominator comes first
    front = np.empty((0, 3))
    on = np.zeros(len(distinct), dtype=bool)
    for k, v in enumerate(distinct):
        if len(front) and np.any(np.all(front <= v, axis=1) & np.any(front < v, axis=1)):
            continue
        on[k] = True
        front = np.vstack([front, v])
    return [int(i) for i in np.nonzero(on[inverse.ravel()])[0]]


def could_be_on_front(vectors: Sequence[Sequence[float]], front: Sequence[int], factors: Sequence[float]
                      ) -> list[int]:
    """Indices whose favourable end (each objective moved by `factors`, >= 1, in its good direction) is not
    beaten by any front member's unfavourable end; the front itself included."""
    a = _as_min(vectors)
    if not len(front):
        return []
    f = np.asarray(factors, dtype=float)
    # favourable: -thr * f0, lat / f1, warm / f2; the front's unfavourable: -thr / f0, lat * f1, warm * f2
    distinct, inverse = np.unique(a, axis=0, return_inverse=True)
    fav = distinct * np.array([f[0], 1 / f[1], 1 / f[2]])
    unf = np.unique(a[list(front)], axis=0) * np.array([1 / f[0], f[1], f[2]])
    ok = np.array([not np.any(np.all(unf <= x, axis=1) & np.any(unf < x, axis=1)) for x in fav])
    return [int(i) for i in np.nonzero(ok[inverse.ravel()])[0]]


def reference_point(vectors: Sequence[Sequence[float]], worst: Sequence[Sequence[float]],
                    latency_limit: float | None, warmup_budget: float | None) -> tuple[float, float, float]:
    """Zero throughput; the latency SLO and the warm-up budget where given, else 10% past the worst ends."""
    lat = latency_limit if latency_limit is not None else 1.1 * max(w[1] for w in worst)
    warm = warmup_budget if warmup_budget is not None else 1.1 * max(w[2] for w in worst)
    return (0.0, float(lat), float(warm))


def choose(central: Sequence[Sequence[float]], candidates: Sequence[int], k: int, sd_global: Sequence[float],
           sd_own: Sequence[float], reference: Sequence[float], warmup_budget: float | None,
           known: Sequence[Sequence[float]] = (), samples: int = SAMPLES, seed: int = 0
           ) -> list[tuple[int, float]]:
    """Greedy expected-hypervolume picks among `candidates` (indices into `central`): [(index, expected gain)].
    `sd_global` / `sd_own`: log standard deviations (throughput, latency, warm-up) shared by every
    configuration / of each one; `known`: central vectors already measured or to be (the baseline), drawn
    the same way."""
    cand = list(candidates)[:MAX_CANDIDATES]
    if not cand or k < 1:
        return []
    rng = np.random.default_rng(seed)
    base = np.asarray([central[i] for i in cand] + list(known), dtype=float)
    g = _stratified(rng, samples, 1) * np.asarray(sd_global)
    noise = np.exp(g + _stratified(rng, samples, len(base)) * np.asarray(sd_own))
    draws = base[None, :, :] * np.concatenate([1 / noise[:, :, :1], noise[:, :, 1:]], axis=2)  # thr falls, others rise
    ref = np.array([-reference[0], reference[1], reference[2]], dtype=float)
    pts = draws * np.array([-1.0, 1.0, 1.0])  # minimised
    if warmup_budget is not None:  # a draw over the budget is infeasible: it adds nothing
        pts[draws[:, :, 2] > warmup_budget] = ref
    chosen: list[tuple[int, float]] = []
    held = [pts[:, len(cand) + j] for j in range(len(known))]  # (samples, 3) each
    remaining = list(range(len(cand)))
    for _ in range(min(k, len(cand))):
        gains = _exclusive(pts[:, remaining], held, ref).mean(axis=0)
        best = int(np.argmax(gains))
        j = remaining.pop(best)
        chosen.append((cand[j], float(gains[best])))
        held.append(pts[:, j])
    return chosen


def _stratified(rng: np.random.Generator, samples: int, n: int) -> np.ndarray:
    """Standard normal draws (samples x n x 3), each column the `samples` quantiles in a random order: the
    columns stay independent, and an average over the draws is far less noisy than with plain draws."""
    q = np.array([statistics.NormalDist().inv_cdf((i + 0.5) / samples) for i in range(samples)])
    return np.stack([[q[rng.permutation(samples)] for _ in range(3)] for _ in range(n)]).transpose(2, 0, 1)


def _exclusive(c: np.ndarray, held: list[np.ndarray], ref: np.ndarray) -> np.ndarray:
    """Hypervolume each candidate (c: samples x candidates x 3, minimised) adds to the held points (each
    samples x 3), per sample, by inclusion-exclusion over the held points (a plan holds a handful)."""
    total = np.zeros(c.shape[:2])
    for r in range(len(held) + 1):
        for subset in itertools.combinations(held, r):
            corner = c
            for h in subset:
                corner = np.maximum(corner, h[:, None, :])
            total += (-1) ** r * np.prod(np.clip(ref - corner, 0.0, None), axis=2)
    return total


def closeness(vectors: Sequence[Sequence[float]], front: Sequence[int], indices: Sequence[int]) -> list[int]:
    """`indices` ordered by how far they trail the front: the least log-factor by which a configuration must
    improve in every objective to match some front member (front members: zero or less, first)."""
    all_v = np.log(np.maximum(np.asarray(vectors, dtype=float).reshape(-1, 3), 1e-300))
    idx = list(indices)
    if not idx:
        return []
    f = np.unique(all_v[list(front)], axis=0)
    distinct, inverse = np.unique(all_v[idx], axis=0, return_inverse=True)
    gaps = []
    for start in range(0, len(distinct), 1024):  # in slices: vectors x front x 3 can be large
        v = distinct[start:start + 1024]
        need = f[None, :, :] - v[:, None, :]  # what each needs to match each front member: throughput up ...
        need[:, :, 1:] = -need[:, :, 1:]  # ... latency and warm-up down
        gaps.append(need.max(axis=2).min(axis=1))
    gap = np.concatenate(gaps)[inverse.ravel()]
    return [idx[i] for i in np.argsort(gap, kind="stable")]
