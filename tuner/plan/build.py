"""A plan: every point of a space (or a dense sample) through the model, the predicted front with its
bands, what is infeasible and why, and the configurations worth booting first."""

from __future__ import annotations

import math
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..buckets import BucketConfigError
from ..space.schema import SearchSpace, SpaceError
from . import picks as P
from .evaluate import FEASIBLE, INFEASIBLE, LIKELY, Evaluator, Limits, Point, message_shape
from .points import space_points

DEFAULT_PICKS = 5


@dataclass
class Baseline:
    """What the user runs today, as read from `source` (an env file, a `vllm serve` script, a server log)."""

    source: str
    kind: str  # "env file", "serve script", "server log"
    settings: Any  # space.TrialSettings
    notes: list[str] = field(default_factory=list)
    point: Point | None = None


@dataclass
class Plan:
    space: SearchSpace
    evaluator: Evaluator
    points: list[Point]
    discrete_size: int | None
    sampled: bool
    front: list[int]
    could_be: list[int]
    picks: list[tuple[int, float]]
    reference: tuple[float, float, float] | None
    baseline: Baseline | None = None
    timing: dict[str, float] = field(default_factory=dict)
    distinct: int = 0  # configurations that differ as the release reads them (predictions that differ)

    @property
    def limits(self) -> Limits:
        return self.evaluator.limits

    def count(self, verdict: str) -> int:
        return sum(1 for p in self.points if p.verdict == verdict)

    def reasons(self, verdict: str) -> list[tuple[str, int, list[tuple[str, int]]]]:
        """(reason, count, [(an example message, count of its shape)]) of `verdict`, largest first."""
        groups: dict[str, Counter] = {}
        examples: dict[tuple[str, str], str] = {}
        for p in self.points:
            if p.verdict != verdict:
                continue
            shape = message_shape(p.detail)
            groups.setdefault(p.reason or "?", Counter())[shape] += 1
            examples.setdefault((p.reason or "?", shape), p.detail or "")
        out = [(reason, sum(c.values()), [(examples[(reason, s)], n) for s, n in c.most_common(3)])
               for reason, c in groups.items()]
        return sorted(out, key=lambda r: -r[1])


def make_plan(space: SearchSpace, evaluator: Evaluator, max_points: int, n_picks: int = DEFAULT_PICKS,
              baseline: Baseline | None = None, seed: int = 0,
              progress: Callable[[int, int], None] | None = None) -> Plan:
    """Predict the space's points (points.space_points), then the front, its contenders and the picks."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="bucket-tuner-plan-") as tmp:
        if space.fitted_parameters:  # fitted bucket sets are placed on the workload, as a study does
            from ..space.fitted import bind_fitted

            bind_fitted(space, evaluator.target, Path(tmp))
        chosen = space_points(space, max_points, seed)
        points: list[Point] = []
        total = len(chosen.values)
        for i, values in enumerate(chosen.values):
            points.append(_evaluate(space, evaluator, values))
            if progress is not None and (i + 1) % 200 == 0:
                progress(i + 1, total)
        if baseline is not None:
            baseline.point = evaluator.evaluate(baseline.settings, values={})
        if progress is not None:
            progress(total, total)
    predicted_s = time.process_time() - cpu0
    plan = _answer(space, evaluator, points, chosen.discrete_size, chosen.sampled, n_picks, baseline, seed)
    plan.timing = {"points": total, "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
                   "predict_cpu_s": predicted_s, "per_point_ms": 1000 * predicted_s / max(total, 1),
                   "clock_runs": evaluator.serving.clock_runs, "replays": evaluator.serving.replays,
                   "bucket_builds": evaluator.bulk.builds}
    return plan


def _evaluate(space: SearchSpace, evaluator: Evaluator, values: dict[str, Any]) -> Point:
    try:
        settings = space.settings_for(values)
    except SpaceError as exc:
        return Point(values, INFEASIBLE, "the space's derived values fail", str(exc))
    try:
        return evaluator.evaluate(settings, values)
    except BucketConfigError as exc:
        return Point(values, INFEASIBLE, "refused by the release", str(exc))


def _answer(space, evaluator: Evaluator, points: list[Point], size, sampled, n_picks, baseline, seed) -> Plan:
    # One representative per distinct configuration (its twins read the same way by the release predict the
    # same): the front and the picks are worked out on those, then the twins are counted with them.
    twins: dict[tuple, list[int]] = {}
    for i, p in enumerate(points):
        if p.verdict == FEASIBLE:
            twins.setdefault(signature(p), []).append(i)
    reps = [members[0] for members in twins.values()]
    vectors = [points[i].vector for i in reps]
    front_local = P.front_indices(vectors)
    spread = evaluator.spread
    own = (spread["decode_step"], spread[evaluator.latency_factor()], spread["prompt_warmup"])
    factors = [math.exp(evaluator.z * s) for s in own]
    could_local = P.could_be_on_front(vectors, front_local, factors)

    def members(local: list[int]) -> list[int]:
        return sorted(i for j in local for i in twins[signature(points[reps[j]])])

    plan = Plan(space, evaluator, points, size, sampled, members(front_local), members(could_local), [], None,
                baseline, distinct=len({signature(p) for p in points}))
    if not front_local:
        return plan
    lim = evaluator.limits
    candidates = [reps[j] for j in P.closeness(vectors, front_local, could_local)]
    worst = [points[i].worst for i in candidates[:P.MAX_CANDIDATES]]
    all_vectors = [p.vector if p.vector is not None else (0.0, math.inf, math.inf) for p in points]
    plan.reference = P.reference_point(all_vectors, worst, lim.slos_ms.get(lim.latency_key), lim.warmup_budget_s)
    g = evaluator.global_sd
    sd_global = (g["decode_step"], g[evaluator.latency_factor()], max(g["prompt_warmup"], g["decode_warmup"]))
    known = [baseline.point.vector] if baseline is not None and baseline.point is not None \
        and baseline.point.verdict == FEASIBLE else []
    plan.picks = P.choose(all_vectors, candidates, n_picks, sd_global, own, plan.reference, lim.warmup_budget_s,
                          known=known, seed=seed)
    return plan


def signature(p: Point) -> tuple:
    """What tells two configurations apart as the release reads them: their predictions."""
    f = p.figures
    return (p.verdict, p.reason, p.detail if p.verdict != FEASIBLE else None,
            tuple(round(v, 6) for v in p.vector) if p.vector else None,
            *(f.get(k) for k in ("prompt_buckets", "decode_buckets", "kv_blocks", "prompt_graphs", "decode_graphs")),
            round(f["warmup_cold_s"], 6) if f.get("warmup_cold_s") is not None else None)


__all__ = ["Baseline", "FEASIBLE", "INFEASIBLE", "LIKELY", "Plan", "make_plan"]
