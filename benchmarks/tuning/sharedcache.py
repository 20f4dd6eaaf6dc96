"""Shared-cache mode (`tune --shared-recipe-cache`): the full method's study with one recipe cache for all
its boots, on the virtual clock.

SharedCacheRunner is the full contender's VirtualRunner plus a virtual recipe cache: the recipe keys the
true server compiled so far (tuner.perfmodel.costs.recipe_key: shapes and KV block count). A boot hits
the keys already there; its true warmup is the truth's prediction with those recipes cached (the same
perturbation factor as its cold warmup), its accelerator time shrinks by the difference, and the tuner
sees what `tune` would: the warmup of the mixed boot, the hit rate, and (tuner/recipecache/warmupmode.py) a cold
warmup predicted from them. At the end the trials `tune` re-boots cold are charged (start to ready): the
exported picks and the Pareto trials whose predicted cold warmup is uncertain (tuner/study/sharedcache.py
reboot_targets, the same selection). Reported per problem: accelerator-hours saved (cache savings minus
the re-boots), the median error of the predicted cold warmups (against the true cold warmup of the same
configuration), the error of those the front keeps predicted, and whether every exported pick carries a
measured cold warmup.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.tuning.contenders import _memory_storage
from benchmarks.tuning.problems import OBJECTIVES
from benchmarks.tuning.runner import VirtualRunner
from benchmarks.tuning.truth import TABLES, key_of, truth, warmup_factor
from tuner.commands.tunecache import exported_picks
from tuner.perfmodel import target as M
from tuner.recipecache.warmupmode import COLD, NO_HIT, WarmupOptions, finish_trial
from tuner.study import options as study_options
from tuner.study.options import Constraints, StudyOptions
from tuner.study.pareto import measured_front
from tuner.study.run import run_study
from tuner.study.sharedcache import cold_reboots, extrapolated_share
from tuner.trial import run as T


def _keys(pred) -> frozenset[str]:
    return frozenset(pred.recipe_id(phase, b) for phase, buckets in (("prompt", pred.plan.prompt),
                                                                     ("decode", pred.plan.decode))
                     for b in buckets)


@dataclass
class SharedCacheRunner(VirtualRunner):
    cache: set = field(default_factory=set)
    boots: dict = field(default_factory=dict)  # params key -> {"true_cold", "hit_rate", "pred_cold"}

    def __call__(self, ctx, settings, trial_dir=None, slot=None, stop_event=None) -> T.TrialResult:
        res = super().__call__(ctx, settings, trial_dir, slot, stop_event)
        e = TABLES[(self.problem.key, self.scenario)].get(key_of(settings.params))
        if not res.booted or res.status.value not in ("ok", "load_errors") or e is None or e.warmup_s is None:
            return res
        prior = M.predict(ctx, settings)
        real_cold = M.predict(ctx, settings, truth(self.scenario))
        keys = _keys(real_cold)
        hits = keys & self.cache
        f = warmup_factor(prior, self.sigma)
        mixed = M.predict(ctx, settings, truth(self.scenario), frozenset(hits)) if hits else real_cold
        mixed_s = (sum(s.seconds for s in mixed.steps) + mixed.sampler_seconds) * f
        self.cache |= keys
        rate = len(hits) / len(keys) if keys else 0.0
        saved = max(0.0, e.warmup_s - mixed_s) * self.problem.cards
        res.observed["warmup_s"] = round(mixed_s)  # "Warmup finished in N secs" is whole seconds
        res.timings = {"accelerator_s": res.timings.get("accelerator_s", 0.0) - saved, "cache_saved_s": saved}
        finish_trial(ctx, settings, res,
                     M.predict_calibrated(ctx, settings), rate)
        self.boots[key_of(settings.params)] = {"true_cold": e.warmup_s, "hit_rate": rate,
                                               "pred_cold": res.predicted.get("warmup_cold_s"), "saved_s": saved}
        return res


def run_shared_cache(task) -> dict:
    """The full contender with a shared recipe cache on one problem (nominal scenario), one seed."""
    problem, scenario, seed, n_trials, quick, sigma, root = task
    study_options.make_storage = _memory_storage
    space = problem.search_space(quick)
    opts = StudyOptions(name=f"{problem.key}-{scenario}-shared-cache-{seed}", results_root=Path(root), sampler="tpe",
                        seed=seed, n_trials=n_trials, enqueue_defaults=True, grid_levels=3, remeasure=1,
                        screening=True)
    runner = SharedCacheRunner(problem, scenario, sigma, checked=True)
    ctx, t0 = problem.context(problem.warmup_budget_s), time.monotonic()
    ctx.warmup = WarmupOptions(mode=COLD, shared=True)  # scored by the cold warmup, predicted on hits
    constraints = Constraints(warmup_budget_s=problem.warmup_budget_s, allow_recompiles=True)
    run = run_study(opts, space, ctx, OBJECTIVES, constraints, install_sigint=False, runner=runner)
    cards, saved = problem.cards, sum(b["saved_s"] for b in runner.boots.values())
    reboot_s, errors = 0.0, []
    for b in runner.boots.values():
        if b["hit_rate"] > NO_HIT and b["pred_cold"] and b["true_cold"]:
            errors.append(abs(b["pred_cold"] / b["true_cold"] - 1))
    table = TABLES[(problem.key, scenario)]
    picks = exported_picks(run.study)
    front = measured_front(run.study)
    truth_of = {t.number: runner.boots.get(key_of(t.params)) for t in front}

    def measure(t, why):  # what tune's cold re-boot measures (start to ready, charged)
        nonlocal reboot_s
        reboot_s += table[key_of(t.params)].startup_s * cards
        return table[key_of(t.params)].warmup_s

    rebooted = set(cold_reboots(run.study, picks, measure))  # the same selection as tune's after_study
    kept, points = [], []
    for t in front:
        b, measured = truth_of[t.number], (t.user_attrs.get("observed") or {}).get("warmup_cold_s") is not None
        error = (b["pred_cold"] / b["true_cold"] - 1) if b and b["pred_cold"] and b["true_cold"] else None
        if not measured and t.number not in rebooted and error is not None:
            kept.append(abs(error))  # left predicted: how far off it is
        points.append({"trial": t.number, "pick": t.number in picks, "measured": measured,
                       "rebooted": t.number in rebooted, "share": extrapolated_share(t), "error": error})
    picks_cold = [t.number in rebooted or (t.user_attrs.get("observed") or {}).get("warmup_cold_s") is not None
                  for t in front if t.number in picks]
    spent = sum((t.user_attrs.get("timings") or {}).get("accelerator_s", 0.0) for t in run.study.trials)
    return {"problem": problem.key, "scenario": scenario, "seed": seed, "wall_s": round(time.monotonic() - t0, 1),
            "saved_h": (saved - reboot_s) / 3600, "cache_saved_h": saved / 3600, "reboot_h": reboot_s / 3600,
            "spent_h": spent / 3600 + reboot_s / 3600, "cold_errors": errors,
            "hit_trials": len(errors), "boots": len(runner.boots), "reboots": len(rebooted), "kept_errors": kept,
            "front_points": points,
            "front": len(front), "picks_measured_cold": all(picks_cold) and bool(picks_cold)}


def summarize(runs: list[dict]) -> dict:
    """problem -> the figures of summary[problem]["shared_cache"], over seeds."""
    out: dict = {}
    for key in sorted({r["problem"] for r in runs}):
        mine = [r for r in runs if r["problem"] == key]
        errors = [x for r in mine for x in r["cold_errors"]]
        out[key] = {
            "seeds": len(mine),
            "hours_saved": round(statistics.mean(r["saved_h"] for r in mine), 4),
            "cache_hours_saved": round(statistics.mean(r["cache_saved_h"] for r in mine), 4),  # before re-boots
            "hours_saved_share": round(statistics.mean(r["saved_h"] / (r["spent_h"] + r["saved_h"])
                                                       for r in mine if r["spent_h"] + r["saved_h"] > 0), 4),
            "reboot_hours": round(statistics.mean(r["reboot_h"] for r in mine), 4),
            "median_cold_error": round(statistics.median(errors), 4) if errors else None,
            "predicted_cold_trials": sum(r["hit_trials"] for r in mine),
            "reboots": round(statistics.mean(r["reboots"] for r in mine), 2),
            "front": round(statistics.mean(r["front"] for r in mine), 2),
            "kept_predicted": sum(len(r["kept_errors"]) for r in mine),
            "kept_max_error": round(max(kept), 4) if (kept := [x for r in mine for x in r["kept_errors"]]) else None,
            "picks_measured_cold": all(r["picks_measured_cold"] for r in mine),
        }
    return out


def tasks(probs: dict, wanted: list[str], seeds: list[int], n_trials: int, quick: bool, sigma: float,
          root: str) -> list[tuple]:
    return [(probs[k], "nominal", s, n_trials, quick, sigma, root) for k in wanted if k != "upgrade" for s in seeds]


def markdown(summary: dict) -> str:
    lines = ["", "Shared recipe cache (tune --shared-recipe-cache; full method, nominal scenario, mean over seeds):",
             "", "| problem | accelerator-hours saved (net) | share of the study | saved by cache hits (h) | cold "
             "re-boots (h) | re-boots / front points | median error of predicted cold warmups | trials with a "
             "predicted cold warmup | front points kept predicted (max error) | exported picks measured cold |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for key, s in summary.items():
        err = "-" if s["median_cold_error"] is None else f"{100 * s['median_cold_error']:.1f}%"
        kept = "-" if s["kept_max_error"] is None else f"{100 * s['kept_max_error']:.1f}%"
        lines.append(f"| {key} | {s['hours_saved']:.3f} | {100 * s['hours_saved_share']:.0f}% | "
                     f"{s['cache_hours_saved']:.3f} | {s['reboot_hours']:.3f} | "
                     f"{s['reboots']:.1f} / {s['front']:.1f} | "
                     f"{err} | {s['predicted_cold_trials']} | {s['kept_predicted']} ({kept}) | "
                     f"{'yes' if s['picks_measured_cold'] else 'no'} |")
    return "\n".join(lines)

