"""tune --confirm: after the search, re-measure what could change the recommendation (confirm.py decides).

Each re-measurement is a trial of its own, recorded like a --remeasure boot (booted, the configuration's
estimate told, its own figures in "measurement"; measurements.py), marked "confirm" with why it was measured
and not counted toward --n-trials. A configuration re-measured on a new boot gets fresh prompts (another
workload seed); while the decision still asks for it and the warm-up is not in doubt, the server stays up
and the next load run (fresh prompts again) is one more trial, "same_boot_as" the boot's trial. It ends
when every pick stands at the confidence asked, nothing left could change it, the budget is spent, or
the run is stopped. What it did is the study attribute "confirmation".
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from optuna.trial import TrialState

from ..trial.run import TrialResult
from ..vocabulary.cost import spent_hours
from ..vocabulary.record import records
from ..vocabulary.status import TrialStatus
from . import nodes, optuna_private
from .confirm import DRAWS, Decision, Question, another_run, decide, measured_once, next_measurement
from .measurements import CONFIRM_ATTR, SAME_BOOT, by_configuration, combine, own_figures
from .nodes import BASELINE_ATTR
from .screen import KEY_ATTR
from .seeding import trial_settings

if TYPE_CHECKING:
    from .loop import StudyLoop

CONFIRM_STUDY_ATTR = "confirmation"
SEED_STRIDE = 1000  # workload seeds of confirmation boots: base + 1000 x k (+ i for the i-th extra load run)
MARGIN = 1.25  # a boot may cost more than its configuration's earlier ones (its warm-up drifts): kept in budget
FIXED = ("ok", "recompiles", "failed_requests")  # constraints no re-measurement is expected to change


class Confirmation:
    """One confirmation phase over a study whose search has ended."""

    def __init__(self, loop: StudyLoop):
        self.loop, self.study, self.ctx = loop, loop.study, loop.ctx
        self.opts = loop.opts.confirm
        self.backend = self.ctx.backend.describe()
        c = loop.constraints
        self.question = Question(tuple(loop.objectives.names), c.warmup_budget_s, dict(c.slos_ms),
                                 {k: v for k, v in self.opts.pick_slos.items() if k not in c.slos_ms})
        recs = records(self.study.get_trials(deepcopy=False))
        search = sum(spent_hours(r, self.backend) for r in recs if not r.attrs.get(CONFIRM_ATTR))
        self.earlier = sum(spent_hours(r, self.backend) for r in recs if r.attrs.get(CONFIRM_ATTR))
        self.search_h, self.budget_h = search, max(0.0, self.opts.budget(search) - self.earlier)
        self.spent_h, self.rounds, self.measured = 0.0, 0, []
        self.base_seed = int(getattr(self.ctx.workload, "seed", 0) or 0)

    # --------------------------------------------------------------------------------- the state
    def state(self, pending: tuple[str, list[dict]] | None = None):
        """(estimates, eligible configurations, latest record per configuration); `pending`: load runs of
        a boot still up, as extra measurements of its configuration."""
        groups = by_configuration(records(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))
        ests = {k: combine([own_figures(r) for r in rs], k, [r.number for r in rs]) for k, rs in groups.items()}
        if pending is not None and pending[0] in groups:
            key, runs = pending
            figures = [own_figures(r) for r in groups[key]] + [{**m, SAME_BOOT: -1} for m in runs]
            ests[key] = combine(figures, key, [r.number for r in groups[key]] + [-1] * len(runs))
        latest = {k: rs[-1] for k, rs in groups.items()}
        eligible = {k for k, r in latest.items() if self._fixed_ok(r)}
        return ests, eligible, latest

    def _fixed_ok(self, rec) -> bool:
        values = self.loop.constraints.values(TrialResult(status=TrialStatus.OK, metrics=dict(rec.metrics),
                                                          observed=dict(rec.observed)))
        return all(values.get(k, 0.0) <= 0 for k in FIXED)

    def decision(self, ests, eligible) -> Decision:
        return decide(ests, eligible, self.question, seed=self.rounds, tolerance=self.opts.tolerance)

    # ------------------------------------------------------------------------------- the costs
    def boots(self, key: str) -> list:
        """The configuration's measurements that were boots (not another load run on a boot)."""
        groups = by_configuration(records(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))
        return [r for r in groups.get(key, []) if r.observed.get(SAME_BOOT) is None]

    def boot_hours(self, key: str) -> float:
        rs = self.boots(key)
        return sum(spent_hours(r, self.backend) for r in rs) / max(1, len(rs))

    def run_hours(self, key: str) -> float:
        """One more load run of this configuration: the load test's share of its boot's hours."""
        rs = self.boots(key)
        tm = rs[-1].timings if rs else {}
        whole = float(tm.get("boot_and_warmup_s", 0.0)) + float(tm.get("load_s", 0.0))
        share = float(tm.get("load_s", 0.0)) / whole if whole > 0 else 0.2
        return self.boot_hours(key) * share

    # -------------------------------------------------------------------------------- the phase
    def run(self) -> dict:
        stopped = "settled"
        asked: set[str] = set()  # picks measured once, measured again (or not affordable): asked once each
        while True:
            ests, eligible, latest = self.state()
            d = self.decision(ests, eligible)
            once = [k for k in measured_once(d, ests) if k not in asked]
            if not once and d.settled(self.opts.confidence):
                break
            if self.loop.stop.is_set() or time.monotonic() >= self.loop.deadline:
                stopped = "stopped"
                break
            if once:
                key = once[0]
                asked.add(key)  # a boot that fails leaves it measured once: not asked again
                if not self.affords(key):
                    continue
            else:
                key, why = self.choose(d, ests)
                if key is None:
                    stopped = why
                    break
            self.measure(key, d, ests, latest)
            self.rounds += 1
        ests, eligible, latest = self.state()
        d = self.decision(ests, eligible)
        summary = self.summary(d, latest, stopped)
        self.study.set_user_attr(CONFIRM_STUDY_ATTR, summary)
        self.ctx.say(summary["line"])
        return summary

    def choose(self, d: Decision, ests) -> tuple[str | None, str]:
        """The configuration to measure next that the budget still affords, or (None, why not)."""
        left = dict(d.involvement)
        cost = {k: self.boot_hours(k) for k in left}
        while True:
            key = next_measurement(replace(d, involvement=left), ests, self.opts.per_configuration, cost)
            if key is None:
                return None, "nothing left that could change the picks" if len(left) == len(d.involvement) \
                    else "budget spent"
            if self.affords(key):
                return key, ""
            left.pop(key)

    def affords(self, key: str) -> bool:
        """A new boot of `key` fits in what is left of the budget (at its earlier boots' cost, with a margin)."""
        return self.spent_h + MARGIN * self.boot_hours(key) <= self.budget_h + 1e-12

    def measure(self, key: str, d: Decision, ests, latest) -> None:
        """A new boot of the configuration, and more load runs on it while the decision asks for them."""
        rec = latest[key]
        why = self.why(key, d, ests)
        self.ctx.say(f"confirm: re-measuring trial {rec.number}'s configuration ({why})")
        trial = self.new_trial(rec, {CONFIRM_ATTR: why})
        settings = trial_settings(self.loop.space, trial)
        boot_h, run_h = self.boot_hours(key), self.run_hours(key)

        def again(runs: list[dict]) -> bool:
            if self.spent_h + MARGIN * (boot_h + run_h * len(runs)) > self.budget_h:
                return False
            e2, el2, _ = self.state((key, runs))
            d2 = self.decision(e2, el2)
            return not d2.settled(self.opts.confidence) and another_run(
                d2, e2, key, run_h, {k: self.boot_hours(k) for k in d2.involvement}, self.opts.per_configuration)

        seed = self.base_seed + SEED_STRIDE * (self.rounds + 1)
        run_ctx = replace(self.ctx, workload=replace(self.ctx.workload, seed=seed), again=again)
        beat = nodes.Heartbeat(self.study, trial)
        try:
            result, settings = self.loop.run_trial(trial, settings, run_ctx, self.loop.opts.slots[0])
        finally:
            beat.stop()
        runs = result.observed.pop("same_boot_runs", None) or []
        observed = dict(result.observed)
        self.loop.tell_trial(trial, result, settings)
        self.count(trial.number)
        for run in runs:  # each further load run on that boot: a measurement of its own
            extra = self.new_trial(rec, {CONFIRM_ATTR: f"{why}; another load run on trial {trial.number}'s boot"})
            timings = {"load_s": run["load_s"], **({"accelerator_s": run["accelerator_s"]}
                                                   if "accelerator_s" in run else {})}
            res = TrialResult(status=TrialStatus.OK, params=result.params, server=result.server, env=result.env,
                              argv=result.argv, booted=True, metrics=dict(run["metrics"]),
                              observed={**observed, SAME_BOOT: trial.number, "workload_seed": run["seed"]},
                              timings=timings, predicted=dict(result.predicted))
            self.loop.tell_trial(extra, res, settings)
            self.count(extra.number)

    def count(self, number: int) -> None:
        t = next(t for t in self.study.get_trials(deepcopy=False) if t.number == number)
        self.spent_h += spent_hours(t, self.backend)
        self.measured.append(number)

    def new_trial(self, rec, attrs: dict):
        """A RUNNING trial of the same configuration (not one of the waiting seeds study.ask would pop)."""
        frozen = next(t for t in self.study.get_trials(deepcopy=False) if t.number == rec.number)
        user = {KEY_ATTR: rec.effective_key, **attrs}
        if rec.attrs.get(BASELINE_ATTR) is not None:
            user[BASELINE_ATTR] = rec.attrs[BASELINE_ATTR]
        trial = optuna_private.new_running_trial(self.study, dict(frozen.params), dict(frozen.distributions), user)
        trial.set_user_attr("owner", self.loop.owner)
        return trial

    def why(self, key: str, d: Decision, ests) -> str:
        parts = []
        once = ests[key].n < 2
        for rule, pick in d.picks.items():
            name = "balanced pick" if rule == "balanced" else f"throughput pick under {rule.split(':', 1)[1]}"
            if pick == key and once:
                parts.append(f"the {name}, measured once (a pick's one measurement is the likeliest to flatter it)")
            elif pick == key:
                parts.append(f"the {name}, standing in {100 * d.confidence[rule]:.0f}% of redraws")
            elif key in d.rivals.get(rule, {}):
                parts.append(f"a rival of the {name} in {100 * d.rivals[rule][key] / DRAWS:.0f}% of redraws")
        return "; ".join(parts) or "could change a pick"

    def summary(self, d: Decision, latest, stopped: str) -> dict:
        rules = {r: {"trial": latest[p].number if p is not None else None, "confidence": round(d.confidence[r], 3),
                     "settled": p is None or d.confidence[r] >= self.opts.confidence} for r, p in d.picks.items()}
        words = ", ".join(f"{r} pick trial {v['trial']} stands in {100 * v['confidence']:.0f}% of redraws"
                          for r, v in rules.items() if v["trial"] is not None)
        return {"confidence": self.opts.confidence, "tolerance": self.opts.tolerance,
                "budget_h": round(self.budget_h, 4), "spent_h": round(self.spent_h, 4),
                "search_h": round(self.search_h, 4), "measured": self.measured, "rules": rules,
                "stopped": stopped,
                "line": (f"confirm: {len(self.measured)} re-measurement(s), {self.spent_h:.2f} of "
                         f"{self.budget_h:.2f} accelerator-hours; {words or 'no pick'} "
                         f"(target {100 * self.opts.confidence:.0f}%): {stopped}")}


def confirm_study(loop: StudyLoop) -> dict | None:
    """The confirmation phase, when the study asks for one and the search ended on its own."""
    if loop.opts.confirm is None or loop.stop.is_set() or loop.errors or time.monotonic() >= loop.deadline:
        return None  # not asked, stopped, failed, or the run's --timeout is over
    return Confirmation(loop).run()
