"""Scores: each study's curve (hypervolume ratio against accelerator-hours), the aggregates over seeds,
the machine-readable summary and the JSON document of a run."""

from __future__ import annotations

import math
import statistics
from collections import Counter

from benchmarks.tuning import noisescore
from benchmarks.tuning.contenders import CONTENDERS
from benchmarks.tuning.problems import DIRECTIONS, Problem
from benchmarks.tuning.replay import replay
from benchmarks.tuning.truth import NOISE_SCENARIOS, SCENARIOS, TABLES, fits, front, key_of, objective_vector
from tuner.study.pareto import hypervolume
from tuner.vocabulary.status import TrialStatus

REJECTED = (TrialStatus.INVALID_CONFIG.value, TrialStatus.WARMUP_OVER_BUDGET.value)


def score(run: dict, problem: Problem, true_hv: float, budgets: list[int]) -> dict:
    """Curve of one study: (accelerator-hours so far, hypervolume ratio) after each counted trial
    (screened proposals cost nothing and do not count as trials; their hours, zero, still add up)."""
    table = TABLES[(problem.key, run["scenario"])]
    pts, hours, curve, wasted, booted = [], 0.0, [], 0.0, set()
    counts = {"repeat_boots": 0, "aborted": 0, "rejected": 0, "reused": 0, "screened": 0, "dominated": 0}
    good, false_rej, false_abort = set(), set(), set()
    for t in run["trials"]:
        h, k = t["accelerator_s"] / 3600, key_of(t["params"])
        e = table.get(k)
        is_good = bool(e and fits(e, problem.warmup_budget_s))
        if is_good:
            good.add(k)
        hours += h
        if t["feasible"] and t["status"] == TrialStatus.OK.value and t["screened"] != "dominated":  # measured
            pts.append(tuple(t["values"]))
        elif h > 0:
            wasted += h
        counts["repeat_boots"] += h > 0 and k in booted
        counts["reused"] += t["screened"] == "reused"
        counts["screened"] += bool(t["screened"])
        counts["dominated"] += t["screened"] == "dominated"
        if h == 0 and t["status"] in REJECTED and t["screened"] != "reused":
            counts["rejected"] += 1
            if is_good:
                false_rej.add(k)
        if h > 0 and t["status"] == TrialStatus.WARMUP_OVER_BUDGET.value:  # booted, then aborted in warmup
            counts["aborted"] += 1
            if is_good:
                false_abort.add(k)
        if h > 0:
            booted.add(k)
        if not t["screened"] and not t.get("confirm"):  # tune --confirm's re-measurements are not trials of the budget
            curve.append((hours, hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv if true_hv else 0.0))
        elif curve:  # a screened trial's feasible point (reused) adds nothing new; keep the curve's last value
            curve[-1] = (hours, max(curve[-1][1], hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv))
    reach = {x: next((h for h, r in curve if r >= x / 100 - 1e-12), math.inf) for x in (90, 95)}
    n_good = max(1, len(good))
    return {"seed": run["seed"], "curve": [(round(h, 4), round(r, 4)) for h, r in curve],
            "at": {n: {"hv_ratio": curve[n - 1][1], "accel_h": curve[n - 1][0]} for n in budgets if n <= len(curve)},
            "hours_to_90": reach[90], "hours_to_95": reach[95], "wasted_frac": wasted / hours if hours else 0.0,
            "false_rejects": len(false_rej), "false_aborts": len(false_abort), "good": len(good),
            "false_reject_rate": len(false_rej) / n_good, "false_abort_rate": len(false_abort) / n_good, **counts}


def aggregate(scores: list[dict], budgets: list[int], hours: float | None) -> dict:
    """Means (± sd) over seeds; `hours`: also the ratio each study held after that many accelerator-hours."""
    out = {"seeds": len(scores)}
    if hours is not None:
        held = [max([r for h, r in s["curve"] if h <= hours + 1e-9], default=0.0) for s in scores]
        out["hv@hours"] = (hours, statistics.mean(held), statistics.pstdev(held))
    for n in budgets:
        r = [s["at"][n]["hv_ratio"] for s in scores if n in s["at"]]
        if r:
            out[f"hv@{n}"] = (statistics.mean(r), statistics.pstdev(r))
            out[f"h@{n}"] = statistics.mean(s["at"][n]["accel_h"] for s in scores if n in s["at"])
    for x in ("90", "95"):  # median over seeds, a seed that never got there counting as infinite
        v = [s[f"hours_to_{x}"] for s in scores]
        out[f"to{x}"] = (statistics.median(v), sum(math.isfinite(y) for y in v))
    for k in ("wasted_frac", "repeat_boots", "rejected", "aborted", "false_aborts", "false_rejects", "reused",
              "screened", "dominated", "false_reject_rate", "false_abort_rate", "good"):
        out[k] = statistics.mean(s[k] for s in scores)
    return out


def summary_of(res: dict) -> dict:
    """The machine-readable summary the issue asks for: problem -> scenario -> contender -> figures."""
    out: dict = {}
    for key, pr in res["problems"].items():
        for scenario, sc in pr["scenarios"].items():
            for name, a in sc["contenders"].items():
                if "error" in a:
                    continue
                to95 = a["to95"]
                out.setdefault(key, {}).setdefault(scenario, {})[name] = {
                    **{f"hv@{n}": round(a[f"hv@{n}"][0], 4) for n in res["budgets"] if f"hv@{n}" in a},
                    "hv_at_equal_hours": round(a["hv@hours"][1], 4) if "hv@hours" in a else None,
                    "equal_hours": round(a["hv@hours"][0], 3) if "hv@hours" in a else None,
                    "hours_to_90": a["to90"][0] if 2 * a["to90"][1] > a["seeds"] else None,
                    "hours_to_95": to95[0] if 2 * to95[1] > a["seeds"] else None,
                    "false_reject_rate": round(a["false_reject_rate"], 4),
                    "false_abort_rate": round(a["false_abort_rate"], 4)}
    return out


def collect(args, probs: dict[str, Problem], wanted: list[str], scenarios: list[str], fronts: dict,
            runs: list[dict], seeds: int) -> dict:
    """Scores per study, aggregates per contender, the summary, the upgrade replay: the JSON document."""
    res = {"quick": args.quick, "seeds": seeds, "budgets": args.budgets, "warmup_error": args.warmup_error,
           "scenarios": SCENARIOS, "contenders": {c.name: c.note for c in CONTENDERS.values()}, "problems": {}}
    for key in wanted:
        p = probs[key]
        entry = res["problems"][key] = {
            "title": p.title, "workload": f"random {p.input_len}/{p.output_len} tokens (range ratio {p.range_ratio}), "
                                          f"{p.num_prompts} prompts at {p.request_rate:g} req/s Poisson",
            "scenarios": {}}
        for scenario in scenarios:
            f = fronts[(key, scenario)]
            sc = entry["scenarios"][scenario] = {
                "true_front": {**{k: f[k] for k in ("points", "feasible", "failing", "front", "hv", "reference",
                                                     "watcher")},
                               "balanced": f["balanced"] and {"params": f["balanced"].params,
                                                              "objectives": objective_vector(f["balanced"])}},
                "contenders": {}, "runs": {}, "calibration": {}}
            errors = {}
            for name in CONTENDERS:
                mine = sorted((r for r in runs if (r["problem"], r["scenario"], r["contender"])
                               == (key, scenario, name)), key=lambda r: r["seed"])
                if any("error" in r for r in mine):
                    err = next(r["error"] for r in mine if "error" in r)
                    errors[name] = {"error": "not installed (needs scipy + torch)" if name == "gp" else err}
                elif mine:
                    sc["runs"][name] = [{**score(r, p, f["hv"], args.budgets), "wall_s": r["wall_s"],
                                         "statuses": dict(Counter(t["status"] for t in r["trials"]))} for r in mine]
                    if CONTENDERS[name].full:
                        sc["calibration"][name] = [r.get("calibration") for r in mine]
            if "plan" in sc["runs"]:  # the zero-boot tier: the plan alone, against this scenario's truth
                from benchmarks.tuning import plantier

                sc["plan"] = plantier.zero_hour(p, plantier.plan_for(p, args.quick), TABLES[(key, scenario)], f)
            full = sc["runs"].get("full")  # equal hours: what the full method spent on its largest budget
            last = args.budgets[-1]
            spent = [s["at"][last]["accel_h"] for s in full or [] if last in s["at"]]
            hours = statistics.mean(spent) if spent else None
            sc["contenders"] = {n: errors.get(n) or aggregate(sc["runs"][n], args.budgets, hours)
                                for n in CONTENDERS if n in errors or n in sc["runs"]}
            if scenario in NOISE_SCENARIOS:  # what each recommends, judged on the truth
                noisescore.score_cell(sc, [r for r in runs if (r["problem"], r["scenario"]) == (key, scenario)],
                                      p, f["hv"], args.budgets, hours)
    res["summary"] = summary_of(res)
    noisescore.add_to_summary(res)
    for key, pr in res["problems"].items():  # the plan's zero-hour figures beside its contender's
        for scenario, sc in pr["scenarios"].items():
            if "plan" in sc and "plan" in res["summary"].get(key, {}).get(scenario, {}):
                res["summary"][key][scenario]["plan"]["zero_hour"] = sc["plan"]
    if "upgrade" in wanted and "nominal" in scenarios:
        res["replay"] = replay(probs, fronts, runs, args.quick, args.warmup_error)
    return res
