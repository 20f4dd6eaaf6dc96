"""What a study already knows, used before the next boot: measured configurations and the calibration.

* Reuse: a proposal whose *effective* settings (what the release really reads: its resolved bucket
  settings, the runtime variables it reads, the server flags) were already measured is not booted
  again; the earlier result is told for it. `remeasure` N boots such a configuration up to N times and
  tells the mean of its measurements (noisy hardware; the estimator: measurements.py).
* Screening: a proposal the calibrated model confidently rejects (the release refuses it, out of memory
  even with favourable corrections, warmup lower bound over the budget) is told as infeasible without
  a boot; a small exploration share of the over-budget ones is booted anyway, to check the model.
  So is a proposal a measured point beats everywhere even at the favourable end of its calibrated
  prediction (guided.Guide.dominated; told its predicted figures, screened "dominated").
Screened proposals (reused or rejected) cost no accelerator time and do not count toward --n-trials;
at most MAX_SCREENED in a row, so that a study whose sampler only proposes known points still ends.
`--no-screening` turns reuse, screening and the model seeds off: every proposal runs and counts.
* Running elsewhere: a proposal whose effective settings another trial is running (another node of a
  shared study, or another slot) is not booted at the same time. Each trial claims its effective key
  (user attribute "effective_key") under the study's ask lock (nodes.AskLock), so of two claims of one
  key the later one always sees the earlier; it waits for those trials to end and then reuses their
  measurement (or boots, if they failed). `remeasure` N lets up to N boots of one configuration run at once.
* Calibration: every booted trial stores its sample (trial user attribute "calibration_sample");
  `study_calibration` refits from all of them (and from samples seeded from logs), so every node of a
  shared study uses the same corrections; the fit in force is kept in the study attribute "calibration".
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import TrialState

from ..perfmodel.calibration import Calibration, as_log_sample
from ..perfmodel.checks import rejection
from ..perfmodel.target import predict, predict_calibrated
from ..space.fitted import bucket_set_digest
from ..space.schema import BUCKET_FILE_VARIABLE, TrialSettings
from ..trial.run import TrialContext, TrialResult
from ..vocabulary.record import CALIBRATION_SAMPLE, EFFECTIVE_KEY, SCREENED, TrialRecord
from ..vocabulary.status import TrialStatus
from . import optuna_private
from .measurements import CONFIRM_ATTR, RAW_ATTR, WARMUP, combine, own_figures, representative, result_figures
from .nodes import BASELINE_ATTR

MAX_SCREENED = 8  # screened proposals in a row before the next one is run regardless
EXPLORE_SHARE = 0.05  # over-budget rejections booted anyway
SAMPLE_ATTR, KEY_ATTR, SCREENED_ATTR = CALIBRATION_SAMPLE, EFFECTIVE_KEY, SCREENED  # vocabulary/record.py
CAL_ATTR, SEED_ATTR = "calibration", "calibration_seed_samples"
REUSABLE = {s.value for s in TrialStatus if s is TrialStatus.OK or s.config_failure}


# ----------------------------------------------------------------------------------- effective key

def effective_settings(ctx: TrialContext, settings: TrialSettings) -> dict[str, Any]:
    """What the release really reads of these settings: its resolved bucket settings (not the ones it
    ignores), the runtime variables it reads (defaults filled in), every other variable verbatim (not
    known to be ignored), and the server flags. Without a release: env and flags as given."""
    from ..buckets import get_profile
    from ..buckets.runtime import runtime_variables
    from ..perfmodel.rules import env_value

    out: dict[str, Any] = {"server": {k: settings.server[k] for k in sorted(settings.server)}}
    pred = predict(ctx, settings)
    if pred is None or pred.plan is None:
        out["env"] = dict(sorted(settings.env.items()))
        return out
    plan = pred.plan
    out["strategy"] = plan.strategy
    out["buckets"] = {s.name: s.value for s in plan.settings if s.source != "ignored"}
    if out["buckets"].get(BUCKET_FILE_VARIABLE):  # a bucket file counts by the buckets it lists, not its path
        out["buckets"][BUCKET_FILE_VARIABLE] = bucket_set_digest(out["buckets"][BUCKET_FILE_VARIABLE])
    runtime = [v.name for v in runtime_variables(pred.profile)]
    out["runtime"] = {name: env_value(settings.env, pred.profile, name) for name in runtime}
    profile = get_profile(pred.profile)
    known = set(runtime).union(*(profile.bucket_variables(s) for s in profile.strategies))
    out["other_env"] = {k: v for k, v in sorted(settings.env.items()) if k not in known}
    return out


def effective_key(ctx: TrialContext, settings: TrialSettings) -> str:
    text = json.dumps(effective_settings(ctx, settings), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# ------------------------------------------------------------------------------------- calibration

def study_calibration(study: optuna.Study, device_model=None) -> Calibration:
    """The corrections every node of this study uses: seeded samples plus every booted trial's, for the
    target's device and model (Calibration.for_device: a generic prior where the tables lack them)."""
    samples = [as_log_sample(s, f"log {i + 1} seeded by an older version")
               for i, s in enumerate(study.user_attrs.get(SEED_ATTR) or [])]
    samples += [TrialRecord.from_frozen(t).calibration_sample
                for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    return Calibration.for_device(samples, device_model)


def seed_calibration(study: optuna.Study, samples: list[dict[str, float]]) -> None:
    """Samples from outside the study (logs of past boots) join every later fit."""
    study.set_user_attr(SEED_ATTR, list(study.user_attrs.get(SEED_ATTR) or []) + [s for s in samples if s])


def refresh_calibration(study: optuna.Study, ctx: TrialContext) -> Calibration:
    """Refit from every sample; say (once) when a log of a past boot is bounded or outvoted by the boots."""
    cal = study_calibration(study, ctx.device_model)
    ctx.calibration = cal
    said = set((study.user_attrs.get(CAL_ATTR) or {}).get("notes") or [])
    summary = cal.summary()
    older = sum(1 for x in study.user_attrs.get(SEED_ATTR) or [] if "evidence" not in x)
    if older:
        summary["notes"] = [f"{older} log sample(s) stored by an older version are read as logs, not as boots "
                            "(bounded, outvoted by the boots)", *summary.get("notes", [])]
    study.set_user_attr(CAL_ATTR, summary)
    for note in summary.get("notes", []):
        if note not in said:
            ctx.say(f"calibration: {note}")
    return cal


# ------------------------------------------------------------------------------- reuse / screening

class Screen:
    """Decides, per proposal, whether it boots; tells reused / screened results their provenance."""

    def __init__(self, study: optuna.Study, ctx: TrialContext, remeasure: int = 1, screening: bool = True,
                 seed: int | None = 0):
        self.study, self.ctx = study, ctx
        self.remeasure = max(1, remeasure)
        self.screening = screening
        self.rng = random.Random(seed)
        self.in_a_row: dict[int, int] = {}
        self.guide = None  # proposals.Guide (use_guide): predicted-dominated proposals are not booted either

    def use_guide(self, guide) -> None:
        """Screen what the guide's calibrated model predicts a measured point beats everywhere."""
        self.guide = guide

    def claim(self, trial: optuna.Trial, key: str) -> list[optuna.trial.FrozenTrial]:
        """Record the trial's effective key; return the running trials with that key it must wait for
        (empty: go on). Call under the study's ask lock, so that claims of one key are ordered."""
        trial.set_user_attr(KEY_ATTR, key)
        if not self.screening:
            return []
        measured = len(self.measurements(key))
        if measured >= self.remeasure:
            return []  # decide() reuses the record
        ahead = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                 if t.number != trial.number and TrialRecord.from_frozen(t).effective_key == key]
        return ahead if measured + len(ahead) >= self.remeasure else []

    def wait_for(self, trial: optuna.Trial, ahead: list[optuna.trial.FrozenTrial], stop, settings: TrialSettings,
                 poll_s: float = 0.5) -> TrialResult | None:
        """Wait until the trials `ahead` (claim()) are no longer running; None then (decide() reuses their
        result, or boots if they failed), or an interrupted result when `stop` is set meanwhile."""
        numbers = [t.number for t in ahead]
        trial.set_user_attr("waited_for", numbers)
        who = ", ".join(f"trial {t.number} ({_owner(t)})" for t in ahead)
        self.ctx.say(f"trial {trial.number}: the same effective settings as {who}, running now: "
                          "waiting for its result instead of booting them again")
        storage = optuna_private.storage_of(self.study)
        pending = list(ahead)
        while pending:
            if stop.wait(poll_s):
                return TrialResult(status=TrialStatus.INTERRUPTED, params=settings.params, server=settings.server,
                                   reason=f"interrupted while waiting for trial(s) {numbers} "
                                          "(the same effective settings)", timings={"accelerator_s": 0.0})
            pending = [t for t in pending if storage.get_trial(optuna_private.trial_id(t)).state == TrialState.RUNNING]
        return None

    def running_keys(self) -> set[str]:
        """The effective keys of the trials running now, on every node (claim() recorded them)."""
        return {key for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                if (key := TrialRecord.from_frozen(t).effective_key) is not None}

    def measurements(self, key: str) -> list[TrialRecord]:
        records = (TrialRecord.from_frozen(t) for t in self.study.get_trials(deepcopy=False,
                                                                             states=(TrialState.COMPLETE,)))
        return [r for r in records
                if r.effective_key == key and not r.screened and r.status in REUSABLE and r.booted]

    def decide(self, trial: optuna.Trial, settings: TrialSettings, slot: int) -> tuple[TrialResult | None,
                                                                                       TrialContext]:
        """(a result to tell without running, or None; the context to run with)."""
        key = trial.user_attrs.get(KEY_ATTR)  # claim() recorded it
        if key is None:
            key = effective_key(self.ctx, settings)
            trial.set_user_attr(KEY_ATTR, key)
        if trial.user_attrs.get(BASELINE_ATTR) is not None:
            # What the user runs today boots and is measured whatever the model says of it (no rejection, no
            # warm-up abort): it is what they compare with. Over the budget, it is told infeasible.
            return None, replace(self.ctx, preboot_reject=False, limits=replace(self.ctx.limits, warmup_budget_s=None))
        if not self.screening:  # every proposal runs (and counts), repeats included
            return None, self.ctx
        if self.in_a_row.get(slot, 0) >= MAX_SCREENED:
            self.in_a_row[slot] = 0
            return None, self.ctx
        done = self.measurements(key)
        if len(done) >= self.remeasure:
            self.in_a_row[slot] = self.in_a_row.get(slot, 0) + 1
            return self._reused(representative(done), settings), self.ctx
        if self.ctx.release is not None:
            tp = predict_calibrated(self.ctx, settings)
            refused = rejection(tp, self.ctx.limits.warmup_budget_s) if tp is not None else None
            if refused is not None:
                if refused[0] is TrialStatus.WARMUP_OVER_BUDGET and self.rng.random() < EXPLORE_SHARE:
                    trial.set_user_attr("explore", True)  # booted to check the model; the abort still applies
                    return None, replace(self.ctx, preboot_reject=False)
                self.in_a_row[slot] = self.in_a_row.get(slot, 0) + 1
                result = TrialResult(status=refused[0], reason=refused[1], predicted=tp.summary(),
                                     params=settings.params, server=settings.server,
                                     timings={"accelerator_s": 0.0})
                trial.set_user_attr(SCREENED_ATTR, "rejected")
                return result, self.ctx
            result = self.guide.dominated(settings, tp) if self.guide is not None else None
            if result is not None and self.rng.random() >= EXPLORE_SHARE:  # a share boots: checks the model
                self.in_a_row[slot] = self.in_a_row.get(slot, 0) + 1
                trial.set_user_attr(SCREENED_ATTR, "dominated")
                return result, self.ctx
        self.in_a_row[slot] = 0
        return None, self.ctx

    def _reused(self, earlier: TrialRecord, settings: TrialSettings) -> TrialResult:
        res = TrialResult(status=TrialStatus(earlier.status), reason=f"reused from trial {earlier.number}: "
                          f"same effective settings{'; ' + earlier.reason if earlier.reason else ''}",
                          params=settings.params, server=settings.server, predicted=dict(earlier.predicted),
                          observed=dict(earlier.observed), metrics=dict(earlier.metrics),
                          timings={"accelerator_s": 0.0})
        res.observed["reused_from"] = earlier.number
        return res

    def record(self, trial: optuna.Trial, result: TrialResult) -> None:
        """Before the result is told: provenance, --remeasure averaging, the calibration sample."""
        if result.observed.get("reused_from") is not None:
            trial.set_user_attr(SCREENED_ATTR, "reused")
        trial.set_user_attr("booted", bool(result.booted))
        self.average(trial, result)
        if result.calibration_sample:
            trial.set_user_attr(SAMPLE_ATTR, result.calibration_sample)

    def average(self, trial: optuna.Trial, result: TrialResult) -> None:
        """A configuration measured again on purpose (--remeasure, --confirm) is told the estimate over all
        its measurements (measurements.py); the trial keeps its own figures beside it. A search's re-boot of a
        measured configuration (MAX_SCREENED) tells its own measurement, as it always did."""
        if not result.ok or (self.remeasure <= 1 and not trial.user_attrs.get(CONFIRM_ATTR)):
            return
        earlier = [r for r in self.measurements(trial.user_attrs.get(KEY_ATTR) or "")
                   if r.status == TrialStatus.OK.value]
        if not earlier:
            return
        own = result_figures(result.metrics, result.observed)
        trial.set_user_attr(RAW_ATTR, own)
        est = combine([own_figures(r) for r in earlier] + [own])
        for k, v in est.means().items():
            if k in result.metrics:
                result.metrics[k] = v
        if est.mean(WARMUP) is not None and result.observed.get(WARMUP) is not None:
            result.observed[WARMUP] = est.mean(WARMUP)
        result.observed["measurements"] = est.n


def _owner(t: optuna.trial.FrozenTrial) -> str:
    owner = TrialRecord.from_frozen(t).owner
    return f"pid {owner.get('pid', '?')} on {owner.get('host', '?')}"


def counts_toward_budget(t: optuna.trial.FrozenTrial) -> bool:
    """Not screened, and not a re-measurement of tune --confirm (it checks the search's answer)."""
    rec = TrialRecord.from_frozen(t)
    return not rec.screened and not rec.attrs.get(CONFIRM_ATTR)


# ----------------------------------------------------------------------------------- model seeds

MAX_CANDIDATES = 2000  # points of the space predicted for the model's seeds (sampled beyond that)


def model_seeds(space, ctx: TrialContext, n_trials: int, seed: int | None = 0) -> list[dict[str, Any]]:
    """Seeds the performance model proposes for a new study: for each bucketing strategy and setting of
    the server flags (the throughput lever), the configuration with the shortest predicted warmup that
    the model expects to start and fit the budget: the low-warmup end of the front at each capacity.
    At most n_trials // 6, spread evenly over the groups."""
    import itertools

    if ctx.release is None or ctx.device_model is None:
        return []
    grid = space.grid()
    names = list(grid)
    total = 1
    for values in grid.values():
        total *= len(values)
    rng = random.Random(seed)
    if total <= MAX_CANDIDATES:
        combos = [dict(zip(names, c)) for c in itertools.product(*grid.values())]
    else:
        combos = [{n: rng.choice(grid[n]) for n in names} for _ in range(MAX_CANDIDATES)]
    budget = ctx.limits.warmup_budget_s
    best: dict[tuple, tuple[float, dict]] = {}
    for values in combos:
        settings = space.settings_for(values)
        pred = predict(ctx, settings)
        if pred is None or pred.failure is not None or (budget is not None and pred.warmup_seconds > budget):
            continue
        # A group: the server flags (in numeric order), then the bucketing strategy the release picks.
        group = (tuple(_order(settings.server[k]) for k in sorted(settings.server)), pred.plan.strategy)
        if group not in best or pred.warmup_seconds < best[group][0]:
            best[group] = (pred.warmup_seconds, settings.params)
    groups = sorted(best)
    cap = max(1, n_trials // 6)
    if len(groups) > cap:  # evenly over the server settings (and strategies)
        groups = [groups[round(i * (len(groups) - 1) / (cap - 1))] for i in range(cap)] if cap > 1 else groups[:1]
    return [best[g][1] for g in groups]


def _order(value: Any) -> tuple:
    """Sort key for a flag value of any type: numbers by value, the rest by text."""
    return (0, float(value), "") if isinstance(value, (int, float)) else (1, 0.0, str(value))
