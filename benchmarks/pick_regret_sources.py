"""Where the balanced pick's regret comes from, in the noise cells of a tuning-efficiency run.

Reads the trials a run kept (`benchmarks/tuning_efficiency.py ... --keep-trials` writes STEM-trials.json.gz)
and recomputes, for every study, the balanced pick under three rules that differ in what they know:

    study          the study's own pick: its estimates, on the scale of its believed front (what it did)
    true scale     its estimates again, but each objective's scale (the front's best and worst, which the
                   balanced rule divides by) taken from the true figures of the configurations it measured
    best measured  the configuration it measured that is truly best by the rule (what a noise-free
                   ranking of its own measurements would pick)

each judged on the truth as the run judges it (benchmarks/tuning/noisescore.py regret()). "best measured"
near 0 says the search found the answer and the noise hid it; the step from "study" to "true scale" is
what the noisy extremes of the believed front cost through the scale alone. Deterministic:

    python benchmarks/pick_regret_sources.py STEM-trials.json.gz [--json OUT]
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

from benchmarks.tuning import noisescore as NS  # noqa: E402
from benchmarks.tuning.problems import problems  # noqa: E402
from benchmarks.tuning.truth import TABLES, front, key_of, true_table  # noqa: E402
from tuner.vocabulary.status import TrialStatus  # noqa: E402

RULES = ("study", "true scale", "best measured")


def estimates(run: dict) -> dict:
    """configuration -> (believed values, told feasible, params): the study's latest estimate of each."""
    cur = {}
    for t in run["trials"]:
        if t["booted"] and t["status"] == TrialStatus.OK.value and not t["screened"] and t["values"]:
            cur[t["key"] or key_of(t["params"])] = (tuple(t["values"]), t["feasible"], t["params"])
    return cur


def nearest_ideal(cur: dict, scale: list[tuple]) -> dict | None:
    """The believed front's point nearest the ideal, with each objective's range taken from `scale`."""
    fr = NS.believed(cur)
    return min(fr, key=lambda vp: NS.ideal_distance(vp[0], scale))[1] if fr and scale else None


def regrets(problem, run: dict, best: dict) -> dict[str, float | None]:
    cur = estimates(run)
    measured = [(v, p) for _, _, p in cur.values() if (v := NS.true_vector(problem, p)) is not None]
    picks = {"study": NS.picks(cur, problem.slo_ms)["balanced"],
             "true scale": nearest_ideal(cur, sorted(set(front([v for v, _ in measured])))),
             "best measured": min(measured, key=lambda vp: NS.ideal_distance(vp[0], best["front"]))[1]
             if measured else None}
    out = {}
    for rule, params in picks.items():
        r = NS.regret("balanced", NS.true_vector(problem, params) if params else None, best)
        out[rule] = r["rule"] if r else None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trials", type=Path, help="STEM-trials.json.gz of a tuning-efficiency run (--keep-trials)")
    ap.add_argument("--json", type=Path, help="also write the per-study regrets here")
    ap.add_argument("--jobs", type=int, default=mp.cpu_count())
    args = ap.parse_args(argv)
    with gzip.open(args.trials, "rt") as f:
        doc = json.load(f)
    runs = [r for r in doc["runs"] if r["scenario"] in ("typical_noise", "noisy_node")]
    probs = problems()
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for key in sorted({r["problem"] for r in runs}):
            TABLES[(key, "nominal")] = true_table(probs[key], doc["quick"], doc["warmup_error"], "nominal", pool)
    cells: dict[tuple, list[dict]] = {}
    for r in runs:
        p = probs[r["problem"]]
        row = {"seed": r["seed"], **regrets(p, r, NS.true_best(p))}
        cells.setdefault((r["problem"], r["scenario"], r["contender"]), []).append(row)
    print("| problem | scenario | contender | seeds | " + " | ".join(RULES) + " |")
    print("|---|---|---|---|" + "---|" * len(RULES))
    for (prob, scen, cont), rows in sorted(cells.items()):
        means = [statistics.mean(x[k] for x in rows if x[k] is not None) for k in RULES]
        print(f"| {prob} | {scen} | {cont} | {len(rows)} | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    if args.json:
        args.json.write_text(json.dumps({"/".join(k): v for k, v in cells.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
