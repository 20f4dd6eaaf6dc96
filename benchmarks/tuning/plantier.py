"""The zero-boot tier in the tuning-efficiency benchmark: contender "plan" (`bucket-tuner plan`, then the full
method booting the plan's picks first, as `tune --from-plan`) and what the plan alone is worth before any
accelerator-hour.

The plan runs the problem's space through the tuner's *prior* model (it is told nothing of the scenario),
at the problem's workload, arrivals and warm-up budget, recompiles allowed as in the benchmark's studies.
It is the same in every scenario and for every seed, so it is made once per problem, before the worker
pool forks (PLANS). Its zero-hour figures per scenario, against the scenario's true table:

* hv_share: the hypervolume of the true objectives of the configurations the plan predicts on the front
  (those that are truly feasible), over the true front's hypervolume (same reference point);
* picks_on_front: how many of the plan's picks are truly on the true front (of `picks`);
* predicted_feasible_true: the share of the predicted-feasible configurations that are truly feasible.
"""

from __future__ import annotations

import time

from benchmarks.tuning.problems import DIRECTIONS, OBJECTIVES, Problem
from benchmarks.tuning.truth import feasible, front, key_of, objective_vector
from tuner.plan.build import make_plan
from tuner.plan.evaluate import FEASIBLE, Evaluator, Limits
from tuner.study.pareto import hypervolume

PICKS = 5
PLANS: dict[tuple[str, bool], dict] = {}  # (problem, quick) -> the plan (forked workers inherit it)


def plan_for(problem: Problem, quick: bool) -> dict:
    """The problem's plan: its predicted front and picks (parameter values), and what it cost."""
    key = (problem.key, quick)
    if key not in PLANS:
        space = problem.search_space(quick)
        limits = Limits(latency_key=OBJECTIVES.latency_key, warmup_budget_s=problem.warmup_budget_s,
                        allow_recompiles=True)
        t0 = time.process_time()
        plan = make_plan(space, Evaluator(problem.context(), limits), max_points=10**6, n_picks=PICKS)
        PLANS[key] = {"front": [plan.points[i].values for i in plan.front],
                      "picks": [plan.points[i].values for i, _ in plan.picks],
                      "feasible": [p.values for p in plan.points if p.verdict == FEASIBLE],
                      "points": len(plan.points), "cpu_s": round(time.process_time() - t0, 2),
                      "per_point_ms": round(plan.timing["per_point_ms"], 3),
                      "clock_runs": plan.timing["clock_runs"]}
    return PLANS[key]


def zero_hour(problem: Problem, plan: dict, table: dict, true_front: dict) -> dict:
    """The plan's worth before any boot, against one scenario's truth (see the module docstring)."""
    budget = problem.warmup_budget_s
    truly = [table[key_of(v)] for v in plan["front"] if key_of(v) in table]
    vectors = [objective_vector(e) for e in truly if feasible(e, budget)]
    hv = hypervolume(front(vectors), problem.reference, DIRECTIONS) if vectors else 0.0
    on_front = {tuple(v) for v in true_front["front"]}
    picks = [table.get(key_of(v)) for v in plan["picks"]]
    hits = sum(1 for e in picks if e is not None and feasible(e, budget) and objective_vector(e) in on_front)
    pf = [table[key_of(v)] for v in plan["feasible"] if key_of(v) in table]
    return {"hv_share": round(hv / true_front["hv"], 4) if true_front["hv"] else 0.0,
            "predicted_front": len(plan["front"]), "predicted_front_truly_feasible": len(vectors),
            "picks": len(plan["picks"]), "picks_on_front": hits,
            "predicted_feasible_true": round(sum(feasible(e, budget) for e in pf) / len(pf), 4) if pf else None,
            "plan_cpu_s": plan["cpu_s"], "per_point_ms": plan["per_point_ms"], "points": plan["points"]}


def markdown(res: dict) -> str:
    """The zero-boot tier's table (problem x scenario), from each scenario's "plan" figures."""
    rows = []
    for key, pr in res["problems"].items():
        for scenario, sc in pr["scenarios"].items():
            z = sc.get("plan")
            if z is None:
                continue
            s = res["summary"].get(key, {}).get(scenario, {})
            plan, full = s.get("plan", {}), s.get("full", {})
            rows.append(f"| {key} | {scenario} | {z['hv_share']:.3f} | {z['picks_on_front']} of {z['picks']} | "
                        f"{z['predicted_front_truly_feasible']} of {z['predicted_front']} | "
                        f"{_h(full.get('hours_to_95'))} / {_h(plan.get('hours_to_95'))} | "
                        f"{_v(full.get('hv_at_equal_hours'))} / {_v(plan.get('hv_at_equal_hours'))} |")
    if not rows:
        return ""
    return "\n".join(["### The zero-boot tier: `plan`, then its picks booted first (contender plan)", "",
                      "| problem | scenario | plan's front, true HV share (0 h) | picks truly on the front | "
                      "predicted front truly feasible | h→95% full / plan | HV at full's hours full / plan |",
                      "|---|---|---|---|---|---|---|", *rows, ""])


def _h(v) -> str:
    return "—" if v is None else f"{v:.1f}"


def _v(v) -> str:
    return "—" if v is None else f"{v:.3f}"
