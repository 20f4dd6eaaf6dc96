"""What confirmation could buy at best: re-measuring policies that know the answer, on a run's own trials.

Issue 33 asks confirmation to halve the balanced pick's regret within 15% more accelerator-hours in every
noisy cell. `tune --confirm` does not (benchmarks/README.md "Noise"). This asks whether any policy of re-
measuring and averaging could: it replays each `full` study of a tuning-efficiency run kept with
`--keep-trials` and spends the same budget (a share of the study's own search accelerator-hours) on extra
measurements drawn from the benchmark's noise (benchmarks/tuning/noise.py: a fresh boot draws warm-up,
load and first-run noise; another load run on the same boot draws load noise only and costs its load test),
the estimates being the means as the study keeps them (tuner/study/measurements.py). After each
measurement the study's balanced pick is taken again (noisescore.picks) and the final pick is judged on the
truth (noisescore.regret).

Policies (the first four know which measured configuration is truly best, T; no real tuner can):

    oracle-pair        re-measure T and the current pick, the one measured less first, on fresh boots; stop
                       as soon as the pick is T
    oracle-pair-runs   the same, but a configuration's second and later extra measurements are load runs on
                       the boot its first one opened
    oracle-best        re-measure T alone (fresh boots) until it is the pick
    exact-best         T's measurements replaced by its true figures, at no cost (a bound on what knowing T
                       exactly does)
    rival-runs         no oracle: the pick and its nearest rival on the believed front, the one measured less
                       first, a boot then load runs on it, until the budget is spent
    chase-runs         no oracle: the current pick, a boot then load runs, until the budget is spent

    python benchmarks/confirm_oracle.py STEM-trials.json.gz [--shares 0.15,0.3] [--policies ...] [--jobs 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.tuning import noise as N  # noqa: E402
from benchmarks.tuning import noisescore as NS  # noqa: E402
from benchmarks.tuning.problems import problems  # noqa: E402
from benchmarks.tuning.truth import TABLES, key_of, objective_vector, true_table  # noqa: E402
from tuner.vocabulary.status import TrialStatus  # noqa: E402

POLICIES = ("oracle-pair", "oracle-pair-runs", "oracle-best", "exact-best", "rival-runs", "chase-runs")
FRESH = 1000  # boot indices of the policies' own boots: draws independent of the study's own


class Replay:
    """One study's measurements of each configuration, and further ones drawn as the benchmark draws them."""

    def __init__(self, problem, run: dict):
        self.problem, self.scenario, self.seed = problem, run["scenario"], run["seed"]
        self.boots: dict[str, list[tuple]] = {}   # key -> (throughput, p99, warm-up) per boot
        self.runs: dict[str, list[tuple]] = {}    # key -> (throughput, p99) of further load runs
        self.params: dict[str, dict] = {}
        self.told: dict[str, bool] = {}
        self.opened: dict[str, int] = {}          # key -> the boot a policy opened for it (load runs go there)
        self.search_s = 0.0
        for t in run["trials"]:
            self.search_s += t["accelerator_s"]
            if t["booted"] and t["status"] == TrialStatus.OK.value and not t["screened"] and t["values"]:
                k = key_of(t["params"])
                self.boots.setdefault(k, []).append(tuple(t["values"]))
                self.params[k], self.told[k] = t["params"], t["feasible"]

    def n(self, k: str) -> int:
        return len(self.boots[k]) + len(self.runs.get(k, ()))

    def current(self) -> dict:
        """key -> (estimate, feasible, params), the estimate the means of every load run and of every boot's warm-up."""
        out = {}
        for k, boots in self.boots.items():
            loads = boots + self.runs.get(k, [])
            est = (statistics.fmean(v[0] for v in loads), statistics.fmean(v[1] for v in loads),
                   statistics.fmean(v[2] for v in boots))
            out[k] = (est, self.told[k] and est[2] <= self.problem.warmup_budget_s, self.params[k])
        return out

    def pick(self) -> str | None:
        p = NS.picks(self.current(), self.problem.slo_ms)["balanced"]
        return key_of(p) if p else None

    def measure(self, k: str, load_run: bool) -> float:
        """One more measurement of k; its accelerator-seconds."""
        e = TABLES[(self.problem.key, "nominal")][k]
        level = N.level_of(self.scenario)
        if load_run and k in self.opened:
            rng = N.rng_for(self.seed, self.scenario, k, self.opened[k], len(self.runs.get(k, ())) + 1)
            m = N.load_run(e.metrics, level, rng, fresh_boot=False)
            self.runs.setdefault(k, []).append((m["output_throughput"], m[NS.LAT]))
            return m["duration"] * self.problem.cards
        boot = FRESH + len(self.boots[k])
        rng = N.rng_for(self.seed, self.scenario, k, boot)
        f = N.warmup_factor(level, rng)
        m = N.load_run(e.metrics, level, rng, fresh_boot=True)
        self.boots[k].append((m["output_throughput"], m[NS.LAT], e.warmup_s * f))
        self.opened[k] = boot
        return (e.startup_s + e.warmup_s * (f - 1) + m["duration"]) * self.problem.cards


def _next(policy: str, r: Replay, pick: str, best: str) -> str | None:
    """The configuration the policy measures next, or None when it stops."""
    if policy.startswith("oracle") and pick == best:
        return None
    if policy in ("oracle-pair", "oracle-pair-runs"):
        return best if r.n(best) <= r.n(pick) else pick
    if policy == "oracle-best":
        return best
    if policy == "chase-runs":
        return pick
    fr = NS.believed(r.current())   # rival-runs
    scale = [v for v, _ in fr]
    ranked = [key_of(p) for _, p in sorted(fr, key=lambda vp: NS.ideal_distance(vp[0], scale))]
    rival = ranked[1] if len(ranked) > 1 else pick
    return rival if r.n(rival) < r.n(pick) else pick


def replay(args) -> tuple:
    """(cell, regret before, regret after, extra share of the search's accelerator-hours) of one study."""
    problem, run, truth, policy, share = args
    r = Replay(problem, run)
    measured = [(v, k) for k in r.boots if (v := NS.true_vector(problem, r.params[k])) is not None]
    best = min(measured, key=lambda vk: NS.ideal_distance(vk[0], truth["front"]))[1]

    def regret() -> float:
        k = r.pick()
        return NS.regret("balanced", NS.true_vector(problem, r.params[k]) if k else None, truth)["rule"]

    before, spent, budget = regret(), 0.0, share * r.search_s
    if policy == "exact-best":
        r.boots[best] = [objective_vector(TABLES[(problem.key, "nominal")][best])]
    while policy != "exact-best" and (k := _next(policy, r, r.pick(), best)) is not None:
        snapshot = (list(r.boots[k]), list(r.runs.get(k, ())), r.opened.get(k))
        cost = r.measure(k, load_run=policy.endswith("-runs"))
        if spent + cost > budget:  # not affordable: undone, and the policy stops
            r.boots[k], r.runs[k] = snapshot[0], snapshot[1]
            if snapshot[2] is None:
                r.opened.pop(k, None)
            else:
                r.opened[k] = snapshot[2]
            break
        spent += cost
    return (run["problem"], run["scenario"]), before, regret(), spent / r.search_s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trials", type=Path, help="STEM-trials.json.gz of a tuning-efficiency run (--keep-trials)")
    ap.add_argument("--shares", default="0.15", help="budgets, shares of each study's search accelerator-hours")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--jobs", type=int, default=mp.cpu_count())
    args = ap.parse_args(argv)
    with gzip.open(args.trials, "rt") as f:
        doc = json.load(f)
    runs = [r for r in doc["runs"] if r["scenario"] in N.SCENARIO_LEVEL and r["contender"] == "full"]
    probs = problems()
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for key in sorted({r["problem"] for r in runs}):
            TABLES[(key, "nominal")] = true_table(probs[key], doc["quick"], doc["warmup_error"], "nominal", pool)
    truths = {key: NS.true_best(probs[key]) for key in {r["problem"] for r in runs}}
    with mp.get_context("fork").Pool(args.jobs) as pool:  # forked after the tables: the workers read them
        print("| policy | budget | problem | scenario | seeds | full | with the policy | policy - full (paired) | "
              "share left | extra accel-h |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for policy in args.policies.split(","):
            for share in (float(x) for x in args.shares.split(",")):
                jobs = [(probs[r["problem"]], r, truths[r["problem"]], policy, share) for r in runs]
                cells: dict[tuple, list] = {}
                for cell, before, after, extra in pool.map(replay, jobs):
                    cells.setdefault(cell, []).append((before, after, extra))
                for (prob, scen), rows in sorted(cells.items()):
                    a, b = statistics.mean(x[0] for x in rows), statistics.mean(x[1] for x in rows)
                    c = statistics.mean(x[2] for x in rows)
                    se = statistics.stdev(x[1] - x[0] for x in rows) / len(rows) ** 0.5
                    print(f"| {policy} | {share:.0%} | {prob} | {scen} | {len(rows)} | {a:.1f} | {b:.1f} | "
                          f"{b - a:+.1f} ± {se:.1f} | {100 * b / a:.0f}% | +{100 * c:.0f}% |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
