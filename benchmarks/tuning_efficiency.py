"""Tuning efficiency per accelerator-hour: bucket-tuner's method against the alternatives a user has.

Every configuration of a discretised reference space is evaluated on the simulator's virtual clock
(`predict_startup` + `run_virtual`), which gives the true Pareto front and its hypervolume on a fixed
reference point. Each contender then runs the REAL study loop (`tuner.study.run.run_study`: samplers,
seeding, constraints, penalties) with a virtual runner that answers from that table and charges the
simulated accelerator time (x cards) a real trial would cost: 0 if rejected before boot; the startup
timeline up to the failure if it fails at boot; up to the abort if the warmup-budget abort fires
(the boot's log events fed to the tuner's BootTracker under trial.run_trial's rule); otherwise
weights + profiling + warmup + the measured load test (the warm pass is not charged).

The tuner's prior model and the simulator share one cost model, which would make pre-boot checks
exact. So the truth differs from the prior in ways the tuner is not told: per scenario (compile and
warmup x2 / x0.5, KV block memory +10%, graph memory +25%, decode step +25%; SCENARIOS), and per
effective configuration a warmup factor exp(N(0, sigma)) (--warmup-error, default 0.15). The full
method has to learn the scenario from its own boots (tuner/perfmodel/calibration.py). Scenario
real_steps (problem linear, on request) takes the warm-up steps' costs from real logs instead
(benchmarks/tuning/realsteps.py).

Usage: python benchmarks/tuning_efficiency.py [--quick] [--seeds N] [--budgets 10,20,30,50]
       [--problems linear,gaudi,upgrade,fitted] [--scenarios nominal,...] [--contenders random,tpe,full,...]
       [--jobs N]
Writes benchmarks/results/tuning_efficiency[-quick].json ("summary": problem -> scenario -> contender)
and .md, and prints the tables with the wall and CPU time.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The pieces live in benchmarks/tuning/ (its __init__ says which module holds what); the names the tests and
# other scripts use are re-exported here.
from benchmarks.tuning import fitted as fitted_problem
from benchmarks.tuning.boot import boot_events, replay_boot, watcher_check  # noqa: F401
from benchmarks.tuning.contenders import CONTENDERS, Contender, run_contender  # noqa: F401
from benchmarks.tuning.problems import DIRECTIONS, OBJECTIVES, Problem, problems  # noqa: F401
from benchmarks.tuning.render import finite, markdown
from benchmarks.tuning.runner import VirtualRunner  # noqa: F401
from benchmarks.tuning.scoring import aggregate, collect, score, summary_of  # noqa: F401
from benchmarks.tuning.truth import (  # noqa: F401
    NOISE_SCENARIOS,
    SCENARIOS,
    STEP_SCENARIOS,
    TABLES,
    Eval,
    evaluate,
    grid_points,
    key_of,
    true_front,
    true_prediction,
    true_table,
    truth,
)


def run_all(args, probs: dict[str, Problem], wanted: list[str], scenarios: list[str], names: list[str],
            seeds: list[int], log):
    fronts, runs, n = {}, [], args.budgets[-1]
    if "plan" in names:  # the zero-boot tier: one plan per problem (the prior model), inherited by the workers
        from benchmarks.tuning import plantier

        for key in wanted:
            p = plantier.plan_for(probs[key], args.quick)
            log(f"{key}: plan of {p['points']} configurations in {p['cpu_s']} s CPU, {len(p['picks'])} picks")
    pool_ctx = mp.get_context("fork")
    with pool_ctx.Pool(args.jobs) as pool:
        for key in wanted:
            for scenario in ["nominal"] + [s for s in scenarios if s != "nominal"]:
                if scenario in NOISE_SCENARIOS:  # the nominal truth, measured with noise
                    TABLES[(key, scenario)] = TABLES[(key, "nominal")]
                    fronts[(key, scenario)] = dict(fronts[(key, "nominal")])
                    continue
                TABLES[(key, scenario)] = true_table(probs[key], args.quick, args.warmup_error, scenario, pool)
                f = fronts[(key, scenario)] = true_front(probs[key], TABLES[(key, scenario)])
                f["watcher"] = watcher_check(probs[key], scenario, args.quick, args.warmup_error)
                log(f"{key}/{scenario}: {f['points']} configurations, true front of {len(f['front'])}")
    tmp = "/dev/shm" if Path("/dev/shm").is_dir() else None  # sqlite commits off the disk
    with tempfile.TemporaryDirectory(prefix="tuning-eff-", dir=tmp) as root:
        def tasks(keys, scens, contenders):
            return [(probs[k], sc, c, s, n, args.quick, args.warmup_error, root) for k in keys for sc in scens
                    for c in contenders + (confirmed if sc in NOISE_SCENARIOS else []) for s in seeds]
        plain = [c for c in names if c not in ("full+seed-from", "full+confirm")]
        # the noise cells also run full with tune --confirm (unless left out by --contenders without full)
        confirmed = ["full+confirm"] if "full+confirm" in names or "full" in plain else []
        first = tasks([k for k in wanted if k != "upgrade"], scenarios, plain)
        later = []
        if "upgrade" in wanted:  # the 1.22 seed-from studies read the 1.21.2 full studies (--seed-from)
            later = tasks(["upgrade"], scenarios, plain)
            if "full+seed-from" in names and "nominal" in scenarios:
                first += [] if "full" in plain else tasks(["linear"], ["nominal"], ["full"])
                later += tasks(["upgrade"], ["nominal"], ["full+seed-from"])
        with pool_ctx.Pool(args.jobs) as pool:  # forked after the tables exist: the workers inherit them
            for batch in (first, later):
                for r in pool.imap_unordered(run_contender, batch, chunksize=1):
                    runs.append(r)
                    log(f"{r['problem']}/{r['scenario']} {r['contender']} seed {r['seed']}: "
                        f"{r.get('error') or str(r['wall_s']) + ' s'}")
    return fronts, runs


def keep_trials(args, runs: list[dict]) -> None:
    """Every study's trials (the noise cells' picks can be recomputed from them under other rules)."""
    import gzip

    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "tuning_efficiency" + ("-quick" if args.quick else ""))
    fields = ("params", "feasible", "values", "screened", "accelerator_s", "booted", "key", "confirm")
    doc = {"quick": args.quick, "warmup_error": args.warmup_error,
           "runs": [{**{k: r[k] for k in ("problem", "scenario", "contender", "seed")},
                     "trials": [{"status": getattr(t["status"], "value", t["status"]),
                                 **{k: t.get(k) for k in fields}} for t in r["trials"]]}
                    for r in runs if "error" not in r]}
    stem.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(f"{stem}-trials.json.gz", "wt") as f:
        json.dump(finite(doc), f, default=str)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="coarser spaces, 4 seeds, 30 trials, random/tpe/full")
    ap.add_argument("--seeds", type=int, help="seeds per contender (default 20, quick 4)")
    ap.add_argument("--budgets", help="trial budgets read off each study's prefix (default 10,20,30,50; quick "
                                      "10,20,30)")
    ap.add_argument("--problems", default="linear,gaudi,upgrade,fitted",
                    help="fitted: fitted bucket sets vs ranges, nominal scenario only (benchmarks/tuning/fitted.py)")
    ap.add_argument("--scenarios", default=",".join(s for s in SCENARIOS if s not in STEP_SCENARIOS),
                    help="default: all but real_steps (problem linear only: --problems linear --scenarios real_steps)")
    ap.add_argument("--contenders", help="default random,tpe,full,full+seed-from, and full+confirm in the noise "
                                         "scenarios (all: random,grid,tpe,gp,nsga2,full,full+seed-from,"
                                         "full+confirm,plan)")
    ap.add_argument("--warmup-error", type=float, default=0.15, help="sigma of the real/predicted warmup factor")
    ap.add_argument("--jobs", type=int, default=mp.cpu_count())
    ap.add_argument("--out", help="output stem (default benchmarks/results/tuning_efficiency[-quick])")
    ap.add_argument("--keep-trials", action="store_true",
                    help="also write every study's trials to STEM-trials.json.gz (benchmarks/pick_regret_sources.py "
                         "reads them)")
    ap.add_argument("--no-shared-cache", action="store_true",
                    help="skip the shared-recipe-cache mode (full method, nominal scenario)")
    ap.add_argument("--only-shared-cache", action="store_true",
                    help="run only the shared-recipe-cache mode (its problems' nominal tables, no contenders)")
    args = ap.parse_args(argv)
    args.budgets = sorted(int(b) for b in (args.budgets or ("10,20,30" if args.quick else "10,20,30,50")).split(","))
    seeds = list(range(args.seeds or (4 if args.quick else 20)))
    wanted = [p for p in args.problems.split(",") if p]
    wanted = (["linear"] if "upgrade" in wanted and "linear" not in wanted else []) + wanted
    fitted = "fitted" in wanted  # two spaces on one scale: its own tables, studies and report
    wanted = [p for p in wanted if p != "fitted"]
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    from benchmarks.tuning.realsteps import SOURCES

    lacking = [p for p in wanted if p not in SOURCES] if set(scenarios) & set(STEP_SCENARIOS) else []
    if lacking:
        ap.error(f"scenario real_steps: no timed real log for problem {lacking[0]!r} (has: {', '.join(SOURCES)})")
    names = [c for c in (args.contenders or "random,tpe,full,full+seed-from").split(",") if c]
    probs, t0, c0 = problems(), time.monotonic(), _cpu_s()

    def log(text):
        print(f"[{time.monotonic() - t0:5.0f} s] {text}", file=sys.stderr, flush=True)

    if args.only_shared_cache:
        return shared_cache_only(args, probs, [k for k in wanted if k != "upgrade"], seeds, log, t0, c0)
    fronts, runs = run_all(args, probs, wanted, scenarios, names, seeds, log) if wanted else ({}, [])
    res = collect(args, probs, wanted, scenarios, fronts, runs, len(seeds))
    if args.keep_trials:
        keep_trials(args, runs)
    if fitted:
        res["fitted"] = fitted_problem.run(args, names, seeds, log, run_all)
    cache_md = ""
    if not args.no_shared_cache and "nominal" in scenarios and "full" in names:
        cache_md = shared_cache_mode(args, probs, wanted, seeds, res, log)
    res["wall_s"], res["cpu_s"] = round(time.monotonic() - t0, 1), round(_cpu_s() - c0, 1)
    from benchmarks.tuning import plantier

    table = markdown(res) + plantier.markdown(res) + (fitted_problem.markdown(res["fitted"]) if fitted else "") \
        + cache_md
    print(table + f"\n(wall time {res['wall_s']:.0f} s, CPU time {res['cpu_s']:.0f} s on {args.jobs} processes)")
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "tuning_efficiency" + ("-quick" if args.quick else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(finite(res), default=str) + "\n")
    Path(f"{stem}.md").write_text(table + "\n")
    return 0


def shared_cache_only(args, probs, wanted, seeds, log, t0, c0) -> int:
    """--only-shared-cache: the nominal truth tables of `wanted`, then the shared-cache mode alone."""
    with mp.get_context("fork").Pool(args.jobs) as pool:
        for key in wanted:
            TABLES[(key, "nominal")] = true_table(probs[key], args.quick, args.warmup_error, "nominal", pool)
            log(f"{key}/nominal: {len(TABLES[(key, 'nominal')])} configurations")
    res: dict = {"summary": {}}
    table = shared_cache_mode(args, probs, wanted, seeds, res, log)
    res["wall_s"], res["cpu_s"] = round(time.monotonic() - t0, 1), round(_cpu_s() - c0, 1)
    print(table + f"\n(wall time {res['wall_s']:.0f} s, CPU time {res['cpu_s']:.0f} s on {args.jobs} processes)")
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "tuning_efficiency-shared-cache" + ("-quick" if args.quick else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(finite(res), default=str) + "\n")
    Path(f"{stem}.md").write_text(table + "\n")
    return 0


def shared_cache_mode(args, probs, wanted, seeds, res, log) -> str:
    """The shared-recipe-cache mode (benchmarks/tuning/sharedcache.py): its figures go into
    summary[problem]["shared_cache"] and res["shared_cache"]; returns its markdown table."""
    from benchmarks.tuning import sharedcache

    with tempfile.TemporaryDirectory(prefix="tuning-cache-") as root, mp.get_context("fork").Pool(args.jobs) as pool:
        runs = []
        for r in pool.imap_unordered(sharedcache.run_shared_cache, sharedcache.tasks(
                probs, wanted, seeds, args.budgets[-1], args.quick, args.warmup_error, root), chunksize=1):
            runs.append(r)
            log(f"{r['problem']}/nominal full + shared recipe cache seed {r['seed']}: {r['wall_s']} s, "
                f"{r['saved_h']:.3f} accelerator-hours saved")
    summary = sharedcache.summarize(runs)
    for key, figures in summary.items():
        res["summary"].setdefault(key, {})["shared_cache"] = figures
    res["shared_cache"] = {"runs": runs}
    return "\n" + sharedcache.markdown(summary)


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the worker pools)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


if __name__ == "__main__":
    sys.exit(main())
