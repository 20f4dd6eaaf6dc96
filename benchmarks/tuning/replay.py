"""The upgrade problem: problem linear's chosen settings replayed unchanged on fork-1.22."""

from __future__ import annotations

from benchmarks.tuning.problems import DIRECTIONS, Problem
from benchmarks.tuning.truth import TABLES, evaluate, feasible, front, key_of, objective_vector
from tuner.study.pareto import balanced_index, dominates, hypervolume
from tuner.vocabulary.status import TrialStatus


def replay(probs: dict[str, Problem], fronts: dict, runs: list[dict], quick: bool, sigma: float) -> dict:
    """Problem linear's chosen settings replayed unchanged (same env) on fork-1.22 (nominal scenario)."""
    lin, up = probs["linear"], probs["upgrade"]
    space, up_front = lin.search_space(quick), fronts[("upgrade", "nominal")]["front"]
    picks = [("1.21.2 true front's balanced point", b.params) for b in [fronts[("linear", "nominal")]["balanced"]] if b]
    for r in sorted((r for r in runs if (r["problem"], r["scenario"], r["contender"]) == ("linear", "nominal", "full")
                     and "trials" in r), key=lambda r: r["seed"]):
        ok = [t for t in r["trials"] if t["feasible"] and t["status"] == TrialStatus.OK.value
              and hypervolume([t["values"]], lin.reference, DIRECTIONS) > 0]
        if ok:
            picks.append((f"full method's balanced pick, seed {r['seed']}",
                          ok[balanced_index([t["values"] for t in ok], DIRECTIONS)]["params"]))
    rows = []
    for label, params in picks:
        after = evaluate(up, space.settings_for(params), sigma)  # same env; 1.22 reads it its own way
        vec = objective_vector(after) if feasible(after, up.warmup_budget_s) else None
        rows.append({"label": label, "params": params,
                     "on_1.21.2": objective_vector(TABLES[("linear", "nominal")][key_of(params)]),
                     "on_1.22": vec, "failure": after.failure, "dominated_on_1.22": vec is None or any(
                         dominates((-p[0], p[1], p[2]), (-vec[0], vec[1], vec[2])) for p in up_front)})
    rows += [{"label": "1.22 true front's balanced point", "params": b.params, "on_1.21.2": None,
              "on_1.22": objective_vector(b), "failure": None, "dominated_on_1.22": False}
             for b in [fronts[("upgrade", "nominal")]["balanced"]] if b]
    carried = [evaluate(up, space.settings_for(e.params), sigma) for e in fronts[("linear", "nominal")]["members"]]
    up_hv = fronts[("upgrade", "nominal")]["hv"]
    carried_hv = hypervolume(front([objective_vector(e) for e in carried if feasible(e, up.warmup_budget_s)]),
                             up.reference, DIRECTIONS)
    mine = [r for r in rows if r["label"].startswith("full")]
    shown = [r for r in rows if r not in mine[4:]]  # the table shows the first four picks
    return {"rows": shown, "front_1.21.2_vs_1.22": fronts[("linear", "nominal")]["hv"] / up_hv,
            "front_1.21.2_replayed_on_1.22": carried_hv / up_hv,
            "full_picks": len(mine), "full_picks_dominated_on_1.22": sum(r["dominated_on_1.22"] for r in mine),
            "full_picks_distinct_on_1.22": len({r["on_1.22"] for r in mine})}
