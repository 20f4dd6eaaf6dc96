"""The virtual runner: a real study's runner answering from the true table on the simulated clock."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.tuning.boot import boot_events, replay_boot
from benchmarks.tuning.problems import Problem
from benchmarks.tuning.truth import TABLES, Eval, evaluate, key_of, true_prediction
from tuner.perfmodel import target as M
from tuner.perfmodel.calibration import observation_sample
from tuner.perfmodel.projection import BootTracker
from tuner.trial import run as T
from tuner.vocabulary.status import TrialStatus


@dataclass
class VirtualRunner:
    """`run_study`'s runner: answers from the true table and charges simulated accelerator seconds.
    `checked`: the product's checks (calibrated pre-boot rejection, the tracker's warmup abort, a
    calibration sample from what the boot showed); otherwise every proposal boots and runs to its end."""

    problem: Problem
    scenario: str
    sigma: float
    checked: bool = False

    def __call__(self, ctx, settings, trial_dir=None, slot=None, stop_event=None) -> T.TrialResult:
        base = {"params": settings.params, "server": settings.server, "env": settings.env}
        tp = None
        if self.checked:
            tp = M.predict_calibrated(ctx, settings)
            predicted, rejected = T.pre_boot_check(ctx, settings, tp)
            if rejected is not None:
                rejected.__dict__.update(base, timings={"accelerator_s": 0.0})
                return rejected
        table, k = TABLES[(self.problem.key, self.scenario)], key_of(settings.params)
        if k not in table:  # off the grid (cannot happen with categorical spaces; kept for safety)
            table[k] = evaluate(self.problem, settings, self.sigma, self.scenario)
        e = table[k]
        res = T.TrialResult(status=TrialStatus.OK, booted=True, predicted=tp.summary() if tp else {}, **base)
        seconds, tracker = None, None
        if self.checked:
            _, real = true_prediction(self.problem, settings, self.sigma, self.scenario)
            tracker = BootTracker(tp.calibrated, spread=ctx.calibration.warmup_spread() if ctx.calibration else 0.15)
            budget = None if e.failure else ctx.limits.warmup_budget_s
            if (t := replay_boot(tracker, boot_events(real), budget)) is not None:
                res.status, seconds = TrialStatus.WARMUP_OVER_BUDGET, t
                res.reason = f"warmup aborted over the budget of {budget:g} s"
        if seconds is not None:
            pass
        elif e.failure is not None:  # what run_trial makes of a server that exits: OOM seen or not
            res.status = TrialStatus.WARMUP_OOM if "PT_DEVMEM" in e.failure else TrialStatus.BOOT_FAILURE
            res.reason, seconds = e.failure, e.startup_s
        else:
            res.observed = {"warmup_s": e.warmup_s, "not_warmed_up": e.metrics["runtime_compiles"],
                            "buckets_not_prepared": 0, "preemptions": e.metrics["num_preemptions"]}
            res.metrics = dict(e.metrics)
            if e.metrics["failed"]:
                res.status, res.reason = TrialStatus.LOAD_ERRORS, f"{e.metrics['failed']} requests failed"
            seconds = e.startup_s + e.metrics["duration"]
        if tracker is not None:
            self.sample(res, tp, tracker, real, e, k)
        res.timings = {"accelerator_s": seconds * self.problem.cards}
        return res

    def sample(self, res, tp, tracker, real, e: Eval, k: str) -> None:
        """What trial.record_model_check does after a boot: prior vs observed, one calibration sample.
        The prior's serving figures are the nominal table's (the prior model's own run)."""
        observed = {**tracker.facts(), "kv_blocks": real.num_blocks if real.memory else None,
                    "graphs": len(real.graphed_prompt) + len(real.graphed_decode) if tracker.finished_s else None,
                    "median_tpot_ms": res.metrics.get("median_tpot_ms") if res.ok else None}
        prior = tp.prior_facts(observed)
        nominal = TABLES[(self.problem.key, "nominal")].get(k)
        if nominal is not None and nominal.failure is None:
            prior["median_tpot_ms"] = nominal.metrics.get("median_tpot_ms")
        res.calibration_sample = observation_sample(prior, observed)
