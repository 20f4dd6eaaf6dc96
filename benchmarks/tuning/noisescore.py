"""Scores of the noise family (benchmarks/tuning/noise.py): what a contender recommends, judged on the truth.

The study believes its measurements: after each trial, its front is the configurations' current estimates
(the latest measurement of each, which holds the mean of all: tuner/study/measurements.py), its balanced pick
the front point nearest the ideal (export's default), its SLO pick the highest throughput whose estimated
p99 TTFT meets the problem's SLO (export --pick throughput --max-latency). Each is scored on the TRUE
figures of the configurations it names (the nominal table): the true-value hypervolume of the believed
front (its truly feasible members), and the pick's regret against the true best under the same rule (the
rule applied to the true table): by the rule's own score (regret()), and per objective in %. The
SLO-break rate: how often the SLO pick breaks the SLO when measured again (fresh boots of it, the
scenario's noise, BREAK_DRAWS of them).
"""

from __future__ import annotations

import math
import statistics

from benchmarks.tuning import noise as N
from benchmarks.tuning.problems import DIRECTIONS, OBJECTIVES, Problem
from benchmarks.tuning.truth import TABLES, feasible, front, key_of, objective_vector
from tuner.study.pareto import balanced_index, hypervolume
from tuner.vocabulary.status import TrialStatus

BREAK_DRAWS = 400
LAT = OBJECTIVES.latency_key


def believed(current: dict) -> list[tuple[tuple, dict]]:
    """(believed values, params) of the feasible configurations on the believed front."""
    ok = [(v, p) for v, f, p in current.values() if f]
    pts = set(front([v for v, _ in ok]))
    return [(v, p) for v, p in ok if v in pts]


def true_vector(problem: Problem, params: dict) -> tuple | None:
    e = TABLES[(problem.key, "nominal")].get(key_of(params))
    return objective_vector(e) if e is not None and feasible(e, problem.warmup_budget_s) else None


def true_ratio(problem: Problem, current: dict, true_hv: float) -> float:
    pts = [v for _, p in believed(current) if (v := true_vector(problem, p)) is not None]
    return hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv if true_hv and pts else 0.0


def picks(current: dict, slo: float) -> dict[str, dict | None]:
    """The study's balanced and SLO picks on its estimates (params)."""
    fr = believed(current)
    bal = fr[balanced_index([v for v, _ in fr], DIRECTIONS)][1] if fr else None
    under = [(v, p) for v, f, p in current.values() if f and v[1] <= slo]
    best = max(under, key=lambda x: (x[0][0], -x[0][1]))[1] if under else None
    return {"balanced": bal, "slo": best}


def true_best(problem: Problem) -> dict:
    """The same rules on the true table: the balanced point of the true front, the highest throughput under
    the SLO; and the true front (its range of each objective is the balanced rule's scale)."""
    table = TABLES[(problem.key, "nominal")]
    ok = [objective_vector(e) for e in table.values() if feasible(e, problem.warmup_budget_s)]
    fr = sorted(set(front(ok)))
    under = [v for v in ok if v[1] <= problem.slo_ms]
    return {"balanced": fr[balanced_index(fr, DIRECTIONS)] if fr else None,
            "slo": max(under, key=lambda v: (v[0], -v[1])) if under else None, "front": fr}


def ideal_distance(v: tuple, fr: list[tuple]) -> float:
    """The balanced rule's score of a point: its distance from the ideal, each objective on the front's range."""
    sign = [-1.0 if d == "maximize" else 1.0 for d in DIRECTIONS]
    lo = [min(s * p[i] for p in fr) for i, s in enumerate(sign)]
    hi = [max(s * p[i] for p in fr) for i, s in enumerate(sign)]
    return math.sqrt(sum((max(0.0, s * x - a) / (b - a) if b > a else 0.0) ** 2
                         for s, x, a, b in zip(sign, v, lo, hi)))


def regret(rule: str, pick: tuple | None, best: dict) -> dict | None:
    """The pick's regret under its rule, in %: balanced, how much farther from the ideal it truly is than the
    true balanced point (on the true front's range of each objective); SLO, its throughput short of the true
    best under the SLO (a pick truly over the SLO shows in the break rate). And per objective, how much worse
    (+) or better (-) than the true best it truly is, in % of the best's figure."""
    b = best[rule]
    if b is None:
        return None
    if pick is None:
        return {"pct": None, "rule": 100.0}  # nothing (truly feasible) recommended
    sign = [-1.0 if d == "maximize" else 1.0 for d in DIRECTIONS]
    pct = [round(100 * s * (p - x) / x, 2) for s, p, x in zip(sign, pick, b)]
    score = (100 * max(0.0, ideal_distance(pick, best["front"]) - ideal_distance(b, best["front"]))
             if rule == "balanced" else max(0.0, pct[0]))
    return {"pct": pct, "rule": score}


def slo_break_rate(problem: Problem, params: dict | None, scenario: str, seed: int) -> float | None:
    """Share of fresh re-measurements (new boot, its load run) of the pick whose p99 TTFT breaks the SLO."""
    level = N.level_of(scenario)
    e = TABLES[(problem.key, "nominal")].get(key_of(params)) if params else None
    if e is None or e.failure is not None or level is None:
        return None
    k = key_of(params)
    broken = sum(N.load_run(e.metrics, level, N.rng_for(seed + 10**6, scenario, k, i), fresh_boot=True)[LAT]
                 > problem.slo_ms for i in range(BREAK_DRAWS))
    return broken / BREAK_DRAWS


def true_score(run: dict, problem: Problem, true_hv: float, budgets: list[int]) -> dict:
    """One study of a noise scenario, judged on the truth."""
    current: dict = {}  # configuration -> (believed values, told feasible, params)
    hours, curve = 0.0, []
    for t in run["trials"]:
        hours += t["accelerator_s"] / 3600
        if t["booted"] and t["status"] == TrialStatus.OK.value and not t["screened"] and t["values"]:
            current[t["key"] or key_of(t["params"])] = (tuple(t["values"]), t["feasible"], t["params"])
        point = (hours, true_ratio(problem, current, true_hv))
        if not t["screened"] and not t.get("confirm"):
            curve.append(point)
        elif curve:  # not a counted trial: the same count, its hours and what it changed
            curve[-1] = point
    chosen, best = picks(current, problem.slo_ms), true_best(problem)
    out = {"seed": run["seed"], "curve": [(round(h, 4), round(r, 4)) for h, r in curve], "hours": hours,
           "confirm_h": sum(t["accelerator_s"] for t in run["trials"] if t.get("confirm")) / 3600,
           "at": {n: {"hv_ratio": curve[n - 1][1], "accel_h": curve[n - 1][0]} for n in budgets if n <= len(curve)}}
    for rule in ("balanced", "slo"):
        out[f"regret_{rule}"] = regret(rule, true_vector(problem, chosen[rule]) if chosen[rule] else None, best)
    out["slo_break"] = slo_break_rate(problem, chosen["slo"], run["scenario"], run["seed"])
    return out


def aggregate(scores: list[dict], budgets: list[int], hours: float | None) -> dict:
    """Means over seeds; at `hours`: the true-value hypervolume each study's front held then (its last point)."""
    out: dict = {"seeds": len(scores), "hours": statistics.mean(s["hours"] for s in scores),
                 "confirm_h": statistics.mean(s["confirm_h"] for s in scores)}
    for n in budgets:
        r = [s["at"][n]["hv_ratio"] for s in scores if n in s["at"]]
        if r:
            out[f"true_hv@{n}"] = (statistics.mean(r), statistics.pstdev(r))
    if hours is not None:
        held = [next((r for h, r in reversed(s["curve"]) if h <= hours + 1e-9), 0.0) for s in scores]
        out["true_hv@hours"] = (hours, statistics.mean(held))
    out["true_hv_final"] = statistics.mean(s["curve"][-1][1] if s["curve"] else 0.0 for s in scores)
    for rule in ("balanced", "slo"):
        d = [s[f"regret_{rule}"]["rule"] for s in scores if s[f"regret_{rule}"] is not None]
        out[f"regret_{rule}"] = statistics.mean(d) if d else None
        per = [s[f"regret_{rule}"]["pct"] for s in scores if s[f"regret_{rule}"] and s[f"regret_{rule}"]["pct"]]
        out[f"regret_{rule}_pct"] = [round(statistics.mean(x), 2) for x in zip(*per)] if per else None
    b = [s["slo_break"] for s in scores if s["slo_break"] is not None]
    out["slo_break"] = statistics.mean(b) if b else None
    return out


def score_cell(sc: dict, runs: list[dict], problem: Problem, true_hv: float, budgets: list[int],
               hours: float | None) -> None:
    """A noise cell of the JSON document: each contender's studies judged on the truth ("true_runs") and
    their means ("noise"); `hours`: the full method's, for the equal-hours figure."""
    sc["true_runs"] = {n: [true_score(r, problem, true_hv, budgets) for r in runs
                           if r["contender"] == n and "error" not in r] for n in sc["runs"]}
    sc["noise"] = {n: aggregate(v, budgets, hours) for n, v in sc["true_runs"].items() if v}


def add_to_summary(res: dict) -> None:
    """The noise cells' true-value figures beside the measured ones: summary[problem][scenario][contender]["true"]."""
    for key, pr in res["problems"].items():
        for scenario, sc in pr["scenarios"].items():
            for name, a in sc.get("noise", {}).items():
                res["summary"].setdefault(key, {}).setdefault(scenario, {}).setdefault(name, {})["true"] = dict(a)
