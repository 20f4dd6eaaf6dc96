"""Is the recommendation settled? The decision `tune --confirm` re-measures for (confirmrun.py runs it).

A recommendation is a rule applied to the configurations' estimates (measurements.py): the balanced pick
(export's default: the point of the feasible front nearest the ideal) and, per SLO, the highest
throughput that meets it. With noisy measurements the rule may pick another configuration on the next
measurements. So the estimates are redrawn many times within their noise (each quantity's mean, log-
normal with the standard error of its n measurements), the feasibility rechecked on the draw (warm-up
budget, SLOs) and the rules applied again. A rule is settled when, in at least `confidence` of the draws,
its pick is the draw's pick or scores within `tolerance` of it by the rule (the balanced pick's distance
from the ideal, on the front's range of each objective; the throughput under an SLO, which it must
meet). A pick measured only once is measured again first, settled or not (measured_once). Otherwise the
configurations that took the pick in the other draws (its rivals: the nearest
front points, SLO-borderline ones) and the pick itself are worth another measurement; the one whose
extra measurement removes the most of those draws per accelerator-hour is measured next: a new
boot, then more load runs on the same boot while one of those removes more doubt per hour than a boot of
anything else would (never when its warm-up is what is uncertain: a load run does not measure it).

The noise per quantity is pooled over every configuration measured more than once, shrunk towards a
prior from public evidence (PRIOR_SD; benchmarks/README.md "Noise") while few repeats exist.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .measurements import WARMUP, Estimate

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
    tolerance: float = 0.02  # as good a pick: within 2% of the front's range from the ideal, 2% of the throughput
    budget_share: float = 0.15  # of the accelerator-hours the search spent ...
    budget_hours: float | None = None  # ... or this many accelerator-hours
    pick_slos: dict[str, float] = field(default_factory=dict)  # throughput picks under these limits too
    per_configuration: int = 12  # measurements of one configuration at most

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

    # throughput (max), latency (min), warm-up (min); with --cost-objective, $ per million tokens (min)
    objectives: tuple[str, ...]
    warmup_budget_s: float | None = None
    slos: dict[str, float] = field(default_factory=dict)  # metric -> limit: part of feasibility
    pick_slos: dict[str, float] = field(default_factory=dict)  # metric -> limit: a throughput pick under it

    @property
    def signs(self) -> np.ndarray:
        """Per objective, the factor that makes it minimised: the first (throughput) is maximised."""
        return np.array([-1.0] + [1.0] * (len(self.objectives) - 1))

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


def narrowing(n: int) -> float:
    """How much one more measurement narrows a standard error, relative to one measurement's noise."""
    return 1 / math.sqrt(max(1, n)) - 1 / math.sqrt(max(1, n) + 1)


def gain(d: Decision, est: Estimate, load_only: bool = False) -> float:
    """Doubtful draws one more measurement of this configuration is expected to remove: those its own
    noise causes, times how much it narrows; `load_only`: another load run (its warm-up is not measured again)."""
    w = d.warmup_share.get(est.key, 0.0)  # the warm-up's part narrows with the boots, the rest with the load runs
    return d.involvement.get(est.key, 0.0) * ((0.0 if load_only else w * narrowing(est.boots))
                                              + (1 - w) * narrowing(est.n))


def next_measurement(d: Decision, ests: dict[str, Estimate], limit_per_config: int = 12,
                     cost: dict[str, float] | None = None) -> str | None:
    """The configuration whose next boot removes the most doubtful draws (per accelerator-hour, given `cost`)."""
    cands = [k for k, v in d.involvement.items() if v > 0 and ests[k].n < limit_per_config]
    per = (lambda k: gain(d, ests[k]) / max(cost[k], 1e-9)) if cost else (lambda k: gain(d, ests[k]))
    return max(cands, key=lambda k: (per(k), k)) if cands else None


def measured_once(d: Decision, ests: dict[str, Estimate]) -> list[str]:
    """The picks resting on a single measurement. A pick is the configuration whose draws happened to be
    best (the winner's curse): its one measurement is the likeliest of all to flatter it, and until a study
    has repeats of its own, the redraws know the noise only from the prior. So each pick is measured once
    more whatever the redraws say."""
    return sorted({p for p in d.picks.values() if p is not None and ests[p].n < 2})


def another_run(d: Decision, ests: dict[str, Estimate], key: str, run_h: float, boot_h: dict[str, float],
                limit_per_config: int = 12) -> bool:
    """Another load run on the boot of `key` (its server is up) beats booting anything else: more doubtful
    draws removed per accelerator-hour, its warm-up's share of the doubt left out (a load run does not
    measure it: when the warm-up is what is uncertain, a new boot is the measurement that helps)."""
    here = gain(d, ests[key], load_only=True)
    if here <= 0 or ests[key].n >= limit_per_config:
        return False
    other = max((gain(d, ests[k]) / max(boot_h.get(k, 0.0), 1e-9) for k in d.involvement if k != key), default=0.0)
    return here / max(run_h, 1e-9) >= other


# ------------------------------------------------------------------------------------ the rules

def _clearly_dominated(i: int, mean: np.ndarray, se: np.ndarray, qs: list[str], q: Question) -> bool:
    """Another configuration beats it in every objective by more than four standard errors of both: no
    redraw makes it a pick (it is left out of the draws, which grow with the square of the candidates)."""
    cols = [qs.index(x) for x in q.objectives]
    lg = np.log(mean[:, cols]) * q.signs
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
    thr, lat = (v[..., qs.index(x)] for x in q.objectives[:2])
    out = {"balanced": _balanced(_minimised(v, qs, q), feas)}
    for m, limit in {**q.slos, **q.pick_slos}.items():
        ok = feas & (v[..., qs.index(m)] <= limit)
        score = np.where(ok, thr - 1e-9 * lat, -np.inf)
        idx = np.argmax(score, axis=1)
        out[f"slo:{m}"] = np.where(ok.any(axis=1), idx, -1)
    return out


def _minimised(v: np.ndarray, qs: list[str], q: Question) -> np.ndarray:
    """The objectives of v (draws x configs x qs), all turned minimised: draws x configs x objectives."""
    return np.stack([v[..., qs.index(x)] for x in q.objectives], axis=-1) * q.signs


def _balanced(obj: np.ndarray, feas: np.ndarray, with_distances: bool = False):
    """pareto.balanced_index on each draw's feasible front: nearest the ideal after normalising over the front
    (and, asked for, every configuration's distance on that scale: +inf when infeasible)."""
    le, lt = None, None
    for o in range(obj.shape[-1]):  # per objective: numpy is slow at reducing an axis of three
        a, b = obj[:, :, None, o], obj[:, None, :, o]
        le = (a <= b) if le is None else le & (a <= b)
        lt = (a < b) if lt is None else lt | (a < b)
    dominated = np.any(le & lt & feas[:, :, None], axis=1)  # [d, j]: some feasible i dominates j
    front = feas & ~dominated
    big = np.where(front[..., None], obj, np.nan)
    with np.errstate(all="ignore"):
        lo, hi = np.nanmin(big, axis=1, keepdims=True), np.nanmax(big, axis=1, keepdims=True)
    span = np.where(hi > lo, hi - lo, 1.0)
    dist = np.sqrt(np.nansum(np.maximum((obj - lo) / span, 0.0) ** 2, axis=-1))
    idx = np.where(front.any(axis=1), np.argmin(np.where(front, dist, np.inf), axis=1), -1)
    return (idx, np.where(feas, dist, np.inf)) if with_distances else idx


def _stands(drawn: np.ndarray, picks: dict[str, np.ndarray], keys: list[str], qs: list[str], q: Question,
            tolerance: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per rule: (in which draws the estimate's pick stands, the draw's own pick). It stands when the draw's
    rule scores it within `tolerance` of the draw's pick: for the balanced pick, its distance from the ideal
    (on the front's range of each objective); under an SLO, its throughput, and it meets the SLO."""
    won = _picks(drawn, keys, qs, q)
    feas = _feasible(drawn, qs, q)
    thr = drawn[..., qs.index(q.objectives[0])]
    out = {}
    for r, p in picks.items():
        w, p0 = won[r], int(p[0])
        if p0 < 0:
            out[r] = (np.ones(len(w), dtype=bool), w)
            continue
        if r == "balanced":
            _, dist = _balanced(_minimised(drawn, qs, q), feas, with_distances=True)
            best = np.min(dist, axis=1)
            ok = (w == p0) | (feas[:, p0] & (dist[:, p0] <= best + tolerance))
        else:
            m = r.split(":", 1)[1]
            limit = {**q.slos, **q.pick_slos}[m]
            best = np.take_along_axis(thr, np.maximum(w, 0)[:, None], axis=1)[:, 0]
            meets = feas[:, p0] & (drawn[:, p0, qs.index(m)] <= limit)
            ok = (w == p0) | (meets & (thr[:, p0] >= (1 - tolerance) * best))
        out[r] = (ok, w)
    return out
