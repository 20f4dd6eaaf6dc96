"""The methods compared (CONTENDERS) and one study of one of them on one problem, scenario and seed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import optuna

from benchmarks.tuning import plantier
from benchmarks.tuning.problems import OBJECTIVES, Problem
from benchmarks.tuning.runner import VirtualRunner
from benchmarks.tuning.truth import TABLES
from tuner.study import options as study_options
from tuner.study import proposals as guided
from tuner.study.confirm import ConfirmOptions
from tuner.study.options import Constraints, StudyOptions
from tuner.study.run import run_study
from tuner.vocabulary.errors import StudyError


@dataclass(frozen=True)
class Contender:
    name: str
    sampler: str
    note: str
    full: bool = False  # bucket-tuner's method: seeds, calibrated checks, reuse, screening
    coarse: bool = False  # a low/middle/high lattice of each parameter
    seed_from: bool = False  # upgrade: the Pareto set of the same seed's 1.21.2 full study (--seed-from)
    plan: bool = False  # `bucket-tuner plan` first, its picks booted first (tune --from-plan)
    confirm: bool = False  # tune --confirm: the picks re-measured after the search (noise scenarios)


CONTENDERS = {c.name: c for c in (
    Contender("random", "random", "Optuna RandomSampler"),
    Contender("grid", "grid", "auto_tune-style grid: low/middle/high of each parameter (Optuna GridSampler), "
                              "visited in a seeded shuffled order", coarse=True),
    Contender("tpe", "tpe", "Optuna TPESampler as it comes"),
    Contender("gp", "gp", "Optuna GPSampler as it comes"),
    Contender("nsga2", "nsga2", "Optuna NSGAIISampler (population 16, study.make_sampler)"),
    Contender("full", "tpe", "bucket-tuner: TPE + release-default and calculator seeds + the performance model "
                             "calibrated from every boot (pre-boot rejection only when confidently invalid, out of "
                             "memory or over budget; the warmup abort on the known bucket list) + measured "
                             "configurations reused + every other trial the calibrated model's proposal (largest "
                             "predicted hypervolume gain) + predicted-dominated proposals not booted + screened "
                             "proposals not counted", full=True),
    Contender("full+seed-from", "tpe", "full, also seeded with the Pareto set of the same seed's 1.21.2 full study",
              full=True, seed_from=True),
    Contender("full+confirm", "tpe", "full, then tune --confirm (default budget: 15% of the search's "
                                     "accelerator-hours; confidence 90%)", full=True, confirm=True),
    Contender("plan", "tpe", "`bucket-tuner plan` (every configuration through the prior model, no boot), then full "
                             "with the plan's picks booted first (tune --from-plan)", full=True, plan=True),
)}
PLAIN_REMEASURE = 10**6  # the plain contenders boot every proposal, repeats included


def _memory_storage(url: str, *args, **kwargs):
    """Optuna's in-memory storage for the studies no other study reads (--seed-from reads the 1.21.2 full
    studies from their sqlite file): the same study loop, without a database round trip per attribute."""
    if "linear-nominal-full-" in url or "seed-from" in url:
        return _SQLITE_STORAGE(url, *args, **kwargs)
    return optuna.storages.InMemoryStorage()


_SQLITE_STORAGE = study_options.make_storage


def share_prior_serving(problem: Problem, space, ctx) -> None:
    """The nominal table ran the prior model's serving clock for every configuration, exactly as
    trial.predict_serving does (same workload, arrivals and prediction): the guided proposals
    (tuner/study/proposals.py) read those figures instead of running the clock again (speed only)."""
    for e in TABLES[(problem.key, "nominal")].values():
        if e.failure is None:
            guided.remember_prior_serving(ctx, space.settings_for(e.params),
                                          {k: e.metrics[k] for k in SHARED_SERVING if k in e.metrics})


SHARED_SERVING = ("output_throughput", "median_ttft_ms", "p99_ttft_ms")


def run_contender(task) -> dict:
    """One study (the real loop) of one contender on one problem and scenario; its trials in order."""
    problem, scenario, name, seed, n_trials, quick, sigma, root = task
    study_options.make_storage = _memory_storage
    c = CONTENDERS[name]
    space = problem.search_space(quick, coarse=c.coarse)
    opts = StudyOptions(name=f"{problem.key}-{scenario}-{name}-{seed}", results_root=Path(root), sampler=c.sampler,
                        seed=seed, n_trials=n_trials, enqueue_defaults=c.full, grid_levels=3,
                        seed_from=f"linear-{scenario}-full-{seed}" if c.seed_from else None,
                        remeasure=1 if c.full else PLAIN_REMEASURE, screening=c.full,
                        plan_seeds=plantier.plan_for(problem, quick)["picks"] if c.plan else [],
                        confirm=ConfirmOptions(pick_slos={OBJECTIVES.latency_key: problem.slo_ms}) if c.confirm
                        else None)
    runner = VirtualRunner(problem, scenario, sigma, checked=c.full, seed=seed)
    constraints = Constraints(warmup_budget_s=problem.warmup_budget_s, allow_recompiles=True)
    ctx, t0 = problem.context(problem.warmup_budget_s if c.full else None), time.monotonic()
    if c.full:
        share_prior_serving(problem, space, ctx)
    try:
        run = run_study(opts, space, ctx, OBJECTIVES, constraints, install_sigint=False, runner=runner)
    except StudyError as exc:
        return {"problem": problem.key, "scenario": scenario, "contender": name, "seed": seed, "error": str(exc)}
    trials = [{"params": t.params, "status": t.user_attrs.get("status"), "feasible": bool(t.user_attrs.get("feasible")),
               "values": list(t.values) if t.values else None, "screened": t.user_attrs.get("screened"),
               "accelerator_s": (t.user_attrs.get("timings") or {}).get("accelerator_s", 0.0),
               "booted": bool(t.user_attrs.get("booted")), "key": t.user_attrs.get("effective_key"),
               **({"confirm": True} if t.user_attrs.get("confirm") else {})}
              for t in sorted(run.study.trials, key=lambda t: t.number)
              if t.state.is_finished()]  # enqueued seeds the budget left waiting never ran
    return {"problem": problem.key, "scenario": scenario, "contender": name, "seed": seed, "trials": trials,
            "calibration": run.study.user_attrs.get("calibration"), "wall_s": round(time.monotonic() - t0, 1),
            **({"confirmation": run.study.user_attrs.get("confirmation")} if c.confirm else {})}
