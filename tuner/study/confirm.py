"""Is the recommendation settled? The decision `tune --confirm` re-measures for (confirmrun.py runs it).

A recommendation is a rule applied to the configurations' estimates (estimates.py): the balanced pick
(export's default: the point of the feasible front nearest the ideal) and, per SLO, the highest
throughput that meets it. With noisy measurements the rule may pick another configuration on the next
measurements. So the estimates are redrawn many times within their noise (each quantity's mean, log-
normal with the standard error of its n measurements), the feasibility rechecked on the draw (warm-up
budget, SLOs) and the rules applied again. A rule is settled when, in at least `confidence` of the draws,
its pick is the draw's pick or within `tolerance` of it in every objective (and meets the SLO it was
chosen under). Otherwise the configurations that took the pick in the other draws (its rivals: the
nearest front points, SLO-borderline ones) and the pick itself are worth another measurement; the one
whose extra measurement removes the most of those draws is measured next, on a new boot when the
warm-up's noise causes the doubt (or it has only load runs of one boot), else as another load run.

The noise per quantity is pooled over every configuration measured more than once, shrunk towards a
prior from public evidence (PRIOR_SD; benchmarks/README.md "Noise") while few repeats exist.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .estimates import WARMUP, Estimate

THROUGHPUT = "output_throughput"
# Relative (log-scale) run-to-run sd of one measurement before the study has repeats of its own:
# throughput 3% (vLLM-Gaudi #1602: 251 vs 253 tok/s once warm; tt-inference-server #190: "within 5%"),
# median-type latencies 5% (vLLM #7062: p90 TTFT 319-341 ms over three identical runs), tail latencies
# 15% (same runs: p99 TTFT 533-741 ms), warm-up 3% (vLLM-Gaudi #1602: 948-988 s for one configuration).
PRIOR_SD = {THROUGHPUT: 0.03, "median": 0.05, "tail": 0.15, WARMUP: 0.03}
PRIOR_WEIGHT = 3.0  # the prior counts as this many degrees of freedom against the pooled repeats
DRAWS = 400


@dataclass(frozen=True)
class ConfirmOptions:
    """tune --confirm: how sure the recommendation must be, and what confirming it may spend."""

    confidence: float = 0.9  # share of redraws in which every pick must stand
    tolerance: float = 0.02  # a rival within 2% in every objective is as good a pick
    budget_share: float = 0.15  # of the accelerator-hours the search spent ...
    budget_hours: float | None = None  # ... or this many accelerator-hours
    pick_slos: dict[str, float] = field(default_factory=dict)  # throughput picks under these limits too
    per_configuration: int = 8  # measurements of one configuration at most

    def budget(self, search_hours: float) -> float:
        return self.budget_hours if self.budget_hours is not None else self.budget_share * search_hours


def prior_sd(quantity: str) -> float:
    if quantity in PRIOR_SD:
        return PRIOR_SD[quantity]
    head = quantity.split("_", 1)[0]
    tail = head.startswith("p") and head[1:].replace(".", "", 1).isdigit() and float(head[1:]) >= 90
    return PRIOR_SD["tail" if tail else "median"]


def pooled_sd(ests: Sequence[Estimate], quantity: str) -> float:
    """The log-scale sd of one measurement of `quantity`: the prior, and the repeats of every configuration."""
    ss, df = 0.0, 0
    for e in ests:
        v = [math.log(x) for x in e.samples.get(quantity, ()) if x > 0]
        if len(v) > 1:
            m = sum(v) / len(v)
            ss += sum((x - m) ** 2 for x in v)
            df += len(v) - 1
    p = prior_sd(quantity)
    return math.sqrt((PRIOR_WEIGHT * p * p + ss) / (PRIOR_WEIGHT + df))


@dataclass(frozen=True)
class Question:
    """What the recommendation answers: the objectives, the limits that decide feasibility, the SLO picks."""

    objectives: tuple[str, str, str]  # throughput (max), latency (min), warm-up (min)
    warmup_budget_s: float | None = None
    slos: dict[str, float] = field(default_factory=dict)  # metric -> limit: part of feasibility
    pick_slos: dict[str, float] = field(default_factory=dict)  # metric -> limit: a throughput pick under it

    @property
    def rules(self) -> list[str]:
        return ["balanced"] + [f"slo:{m}" for m in {**self.slos, **self.pick_slos}]

    @property
    def quantities(self) -> list[str]:
        return list(dict.fromkeys([*self.objectives, *self.slos, *self.pick_slos]))


@dataclass
class Decision:
    picks: dict[str, str | None]  # rule -> configuration key picked on the estimates
    confidence: dict[str, float]  # rule -> share of draws where the pick stands
    rivals: dict[str, dict[str, int]]  # rule -> configuration -> draws where it took the pick
    involvement: dict[str, float]  # configuration -> doubtful draws that its own noise causes
    warmup_share: dict[str, float]  # configuration -> share of those its warm-up's noise causes

    def settled(self, confidence: float) -> bool:
        return all(p is None or self.confidence[r] >= confidence for r, p in self.picks.items())


def decide(ests: dict[str, Estimate], eligible: set[str], q: Question, seed: int = 0, draws: int = DRAWS,
           tolerance: float = 0.02) -> Decision:
    """The picks on the estimates, and how often each stands when the estimates are redrawn within their
    noise. `eligible`: configurations no noise can make feasible or infeasible otherwise (ok, no
    recompile or failed request); the warm-up budget and SLOs are checked on each draw."""
    keys = sorted(k for k in ests if k in eligible and all(ests[k].mean(x) is not None for x in q.quantities))
    if not keys:
        return Decision({r: None for r in q.rules}, {r: 1.0 for r in q.rules}, {r: {} for r in q.rules}, {}, {})
    qs = q.quantities
    sd = {x: pooled_sd(list(ests.values()), x) for x in qs}

    def table(ks):
        m = np.array([[ests[k].mean(x) for x in qs] for k in ks], dtype=float)
        n = np.array([[max(1, len(ests[k].samples.get(x, ()))) for x in qs] for k in ks], dtype=float)
        return m, np.array([sd[x] for x in qs]) / np.sqrt(n)

    mean, se = table(keys)
    keys = [k for i, k in enumerate(keys) if not _clearly_dominated(i, mean, se, qs, q)]
    mean, se = table(keys)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((draws, len(keys), len(qs)))
    drawn = mean[None] * np.exp(z * se[None])
    picks = _picks(mean[None], keys, qs, q)
    stand = _stands(drawn, picks, keys, qs, q, tolerance)
    decision = Decision({r: (keys[int(p[0])] if p[0] >= 0 else None) for r, p in picks.items()}, {}, {}, {}, {})
    for r, (ok, winners) in stand.items():
        decision.confidence[r] = float(ok.mean())
        rivals: dict[str, int] = {}
        for w in winners[~ok]:
            if w >= 0 and keys[w] != decision.picks[r]:
                rivals[keys[w]] = rivals.get(keys[w], 0) + 1
        decision.rivals[r] = rivals
    lost = sum(int((~ok).sum()) for ok, _ in stand.values())
    doubtful = {p for p in decision.picks.values() if p is not None} | {k for v in decision.rivals.values() for k in v}
    warm = np.array([x == WARMUP for x in qs])
    for k in sorted(doubtful) if lost else []:
        i = keys.index(k)
        held, held_warm = drawn.copy(), drawn.copy()
        held[:, i, :] = mean[i]
        held_warm[:, i, warm] = mean[i, warm]
        removed = lost - _lost(_stands(held, picks, keys, qs, q, tolerance))
        by_warmup = lost - _lost(_stands(held_warm, picks, keys, qs, q, tolerance))
        if removed > 0:  # how many doubtful draws this configuration's own noise causes
            decision.involvement[k] = float(removed)
            decision.warmup_share[k] = max(0.0, min(1.0, by_warmup / removed))
    return decision


def _lost(stand: dict[str, tuple[np.ndarray, np.ndarray]]) -> int:
    return sum(int((~ok).sum()) for ok, _ in stand.values())


def next_measurement(d: Decision, ests: dict[str, Estimate], limit_per_config: int = 8) -> str | None:
    """The configuration whose next measurement removes the most doubtful draws: the draws its own noise
    causes (held at its estimate, they stand) times how much one more measurement narrows its error."""
    def gain(k: str) -> float:
        m = ests[k].n
        return d.involvement[k] * (1 / math.sqrt(m) - 1 / math.sqrt(m + 1))

    cands = [k for k, v in d.involvement.items() if v > 0 and ests[k].n < limit_per_config]
    return max(cands, key=lambda k: (gain(k), k)) if cands else None


def needs_new_boot(d: Decision, est: Estimate, warmup_share: float = 0.25) -> bool:
    """A new boot when its warm-up's noise causes a good part of the doubt it adds, or it has a single
    boot behind several load runs; else another load run on the same boot is enough."""
    return d.warmup_share.get(est.key, 0.0) >= warmup_share or (est.boots < 2 and est.n >= 3)


# ------------------------------------------------------------------------------------ the rules

def _clearly_dominated(i: int, mean: np.ndarray, se: np.ndarray, qs: list[str], q: Question) -> bool:
    """Another configuration beats it in every objective by more than four standard errors of both: no
    redraw makes it a pick (it is left out of the draws, which grow with the square of the candidates)."""
    sign = np.array([-1.0, 1.0, 1.0])
    cols = [qs.index(x) for x in q.objectives]
    lg = np.log(mean[:, cols]) * sign
    margin = 4 * (se[:, cols] + se[i, cols])
    return bool(np.any(np.all(lg + margin < lg[i], axis=1)))


def _feasible(v: np.ndarray, qs: list[str], q: Question) -> np.ndarray:
    ok = np.ones(v.shape[:2], dtype=bool)
    if q.warmup_budget_s is not None:
        ok &= v[..., qs.index(WARMUP)] <= q.warmup_budget_s
    for m, limit in q.slos.items():
        ok &= v[..., qs.index(m)] <= limit
    return ok


def _picks(v: np.ndarray, keys: list[str], qs: list[str], q: Question) -> dict[str, np.ndarray]:
    """Per rule, the index of the configuration each draw's rule picks (-1: none feasible). v: draws x configs x qs."""
    feas = _feasible(v, qs, q)
    thr, lat, warm = (v[..., qs.index(x)] for x in q.objectives)
    obj = np.stack([-thr, lat, warm], axis=-1)  # all minimised
    out = {"balanced": _balanced(obj, feas)}
    for m, limit in {**q.slos, **q.pick_slos}.items():
        ok = feas & (v[..., qs.index(m)] <= limit)
        score = np.where(ok, thr - 1e-9 * lat, -np.inf)
        idx = np.argmax(score, axis=1)
        out[f"slo:{m}"] = np.where(ok.any(axis=1), idx, -1)
    return out


def _balanced(obj: np.ndarray, feas: np.ndarray) -> np.ndarray:
    """pareto.balanced_index on each draw's feasible front: nearest the ideal after normalising over the front."""
    le = np.all(obj[:, :, None, :] <= obj[:, None, :, :], axis=-1)
    lt = np.any(obj[:, :, None, :] < obj[:, None, :, :], axis=-1)
    dominated = np.any(le & lt & feas[:, :, None], axis=1)  # [d, j]: some feasible i dominates j
    front = feas & ~dominated
    big = np.where(front[..., None], obj, np.nan)
    lo, hi = np.nanmin(big, axis=1, keepdims=True), np.nanmax(big, axis=1, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    dist = np.sqrt(np.nansum(((big - lo) / span) ** 2, axis=-1))
    dist = np.where(front, dist, np.inf)
    return np.where(front.any(axis=1), np.argmin(dist, axis=1), -1)


def _stands(drawn: np.ndarray, picks: dict[str, np.ndarray], keys: list[str], qs: list[str], q: Question,
            tolerance: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per rule: (in which draws the estimate's pick stands, the draw's own pick)."""
    won = _picks(drawn, keys, qs, q)
    feas = _feasible(drawn, qs, q)
    cols = [qs.index(x) for x in q.objectives]
    out = {}
    for r, p in picks.items():
        w = won[r]
        p0 = int(p[0])
        if p0 < 0:
            out[r] = (np.ones(len(w), dtype=bool), w)
            continue
        mine = drawn[:, p0, :][:, cols]
        theirs = np.take_along_axis(drawn[..., cols], np.maximum(w, 0)[:, None, None], axis=1)[:, 0, :]
        close = np.all(np.abs(mine / theirs - 1) <= tolerance, axis=1)
        ok = (w == p0) | ((w >= 0) & close)
        if r != "balanced":
            m = r.split(":", 1)[1]
            limit = {**q.slos, **q.pick_slos}[m]
            ok &= feas[:, p0] & (drawn[:, p0, qs.index(m)] <= limit)
            ok |= w == p0
        else:
            ok &= feas[:, p0]
        out[r] = (ok, w)
    return out
