"""The virtual runner: a real study's runner answering from the true table on the simulated clock."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from benchmarks.tuning import noise as N
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
    seed: int = 0  # the study's: with a noise scenario, the measurements' noise draws (benchmarks/tuning/noise.py)
    measured: dict = field(default_factory=dict)  # configuration -> boots so far (each draws fresh noise)

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
        level, boot = N.level_of(self.scenario), self.measured.get(k, 0)
        self.measured[k] = boot + 1
        rng = N.rng_for(self.seed, self.scenario, k, boot) if level else None
        if level and e.failure is None:  # this boot's warm-up: the truth's, drifting with the node
            f = N.warmup_factor(level, rng)
            e = replace(e, warmup_s=e.warmup_s * f, startup_s=e.startup_s + e.warmup_s * (f - 1))
        res = T.TrialResult(status=TrialStatus.OK, booted=True, predicted=tp.summary() if tp else {}, **base)
        seconds, tracker = None, None
        if self.checked:
            _, real = true_prediction(self.problem, settings, self.sigma, self.scenario)
            if level and real.failure is None and e.warmup_s is not None:  # the boot's log at its own pace
                g = e.warmup_s / real.warmup_seconds if real.warmup_seconds else 1.0
                real = replace(real, steps=[replace(x, seconds=x.seconds * g) for x in real.steps],
                               sampler_seconds=real.sampler_seconds * g)
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
            res.metrics = N.load_run(e.metrics, level, rng, fresh_boot=True) if level else dict(e.metrics)
            if e.metrics["failed"]:
                res.status, res.reason = TrialStatus.LOAD_ERRORS, f"{e.metrics['failed']} requests failed"
            seconds = e.startup_s + res.metrics["duration"]
            if level and res.ok:
                self.more_runs(ctx, res, e, k, boot)
        if tracker is not None:
            self.sample(res, tp, tracker, real, e, k)
        res.timings = {"accelerator_s": seconds * self.problem.cards}
        if res.booted and seconds is not None:
            res.timings.update(boot_and_warmup_s=e.startup_s, load_s=seconds - e.startup_s)
        return res

    def more_runs(self, ctx, res: T.TrialResult, e: Eval, k: str, boot: int) -> None:
        """tune --confirm's further load runs on this boot (ctx.again): fresh noise, no first-run penalty,
        each charged its own load test only (as run_trial records them in observed["same_boot_runs"])."""
        runs = []
        while ctx.again is not None and ctx.again([res.metrics] + [r["metrics"] for r in runs]):
            m = N.load_run(e.metrics, N.level_of(self.scenario), N.rng_for(self.seed, self.scenario, k, boot,
                                                                               len(runs) + 1), fresh_boot=False)
            runs.append({"metrics": m, "seed": len(runs) + 1, "load_s": m["duration"],
                         "accelerator_s": m["duration"] * self.problem.cards})
        if runs:
            res.observed["same_boot_runs"] = runs

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
