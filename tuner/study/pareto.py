"""Pareto fronts, hypervolume and the pick rules of `export`, on plain lists of objective vectors.

Objective vectors follow the study's directions; functions take `directions` ("maximize" /
"minimize") and work internally on minimisation by negating maximised objectives. Optuna 5 has no
public hypervolume function, hence this small exact one (2 or 3 objectives, a few hundred points).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..vocabulary.record import TrialRecord

Vector = Sequence[float]


def _as_min(points: Sequence[Vector], directions: Sequence[str]) -> list[tuple[float, ...]]:
    sign = [-1.0 if d == "maximize" else 1.0 for d in directions]
    return [tuple(s * v for s, v in zip(sign, p)) for p in points]


def dominates(a: Vector, b: Vector) -> bool:
    """a dominates b (minimisation): no worse everywhere, better somewhere."""
    return all(x <= y for x, y in zip(a, b)) and any(x < y for x, y in zip(a, b))


def pareto_indices(points: Sequence[Vector], directions: Sequence[str]) -> list[int]:
    """Indices of the non-dominated points (duplicates all kept)."""
    pts = _as_min(points, directions)
    return [i for i, p in enumerate(pts) if not any(dominates(q, p) for j, q in enumerate(pts) if j != i)]


def hypervolume(points: Sequence[Vector], reference: Vector, directions: Sequence[str]) -> float:
    """Volume dominated by `points` and bounded by `reference` (worse than every point of interest).

    Exact: sweep the first objective, and for each slab take the 2-D (or 1-D) volume of the points
    seen so far. O(n^2 log n) for 3 objectives, plenty for study-sized fronts.
    """
    ref = _as_min([reference], directions)[0]
    pts = [p for p in _as_min(points, directions) if all(x < r for x, r in zip(p, ref))]
    if not pts:
        return 0.0
    return _hv(sorted(set(pts)), ref)


def _hv(pts: list[tuple[float, ...]], ref: tuple[float, ...]) -> float:
    if len(ref) == 1:
        return ref[0] - min(p[0] for p in pts)
    pts = sorted(pts)
    volume = 0.0
    for i, p in enumerate(pts):
        upper = pts[i + 1][0] if i + 1 < len(pts) else ref[0]
        width = upper - p[0]
        if width > 0:
            volume += width * _hv([q[1:] for q in pts[: i + 1]], ref[1:])
    return volume


def normalised(points: Sequence[Vector], directions: Sequence[str]) -> list[tuple[float, ...]]:
    """Each objective mapped to [0, 1] over `points`, 0 = best."""
    pts = _as_min(points, directions)
    if not pts:
        return []
    lo = [min(c) for c in zip(*pts)]
    hi = [max(c) for c in zip(*pts)]
    return [tuple((v - a) / (b - a) if b > a else 0.0 for v, a, b in zip(p, lo, hi)) for p in pts]


def ideal_distances(points: Sequence[Vector], directions: Sequence[str], weights: Vector | None = None) -> list[float]:
    """Each point's Euclidean distance, after normalisation, to the ideal point of the set (best everywhere)."""
    norm = normalised(points, directions)
    w = weights or [1.0] * len(directions)
    return [sum((wi * x) ** 2 for wi, x in zip(w, p)) ** 0.5 for p in norm]


def balanced_index(points: Sequence[Vector], directions: Sequence[str], weights: Vector | None = None) -> int:
    """The point closest (Euclidean, after normalisation) to the ideal point of the set."""
    dist = ideal_distances(points, directions, weights)
    return min(range(len(dist)), key=lambda i: dist[i])


def measured_front(study) -> list:
    """Optuna's feasible best trials (set_constraint honoured) without copies: a trial that reused an
    earlier trial's measurement (observed.reused_from) stands for that same boot, so it is listed once.
    A configuration measured more than once stands by its latest measurement trial, which holds the
    estimate over all of them (measurements.py); the earlier ones, superseded, are not on the front."""
    from optuna.trial import TrialState

    from .measurements import superseded

    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    old = superseded(TrialRecord.from_frozen(t) for t in done)
    if old:  # neither a superseded measurement nor a reused copy of one stands (nor hides another point)
        pool = [t for t in done if t.number not in old and t.values is not None and _feasible(t)
                and TrialRecord.from_frozen(t).observed.get("reused_from") not in old]
        directions = [d.name.lower() for d in study.directions]
        best = [pool[i] for i in pareto_indices([t.values for t in pool], directions)]
    else:
        best = study.best_trials
    numbers = {t.number for t in best}
    return [t for t in best if TrialRecord.from_frozen(t).observed.get("reused_from") not in numbers]


def _feasible(t) -> bool:
    """Optuna's rule for best_trials: every constraint value (system attribute "constraints") <= 0."""
    return all(v <= 0 for v in t.system_attrs.get("constraints") or ())
