"""What a report needs to know about a study beyond its values: the limits the user tuned under, the
seed trials (release defaults, static calculator), the recommended picks, and what a trial cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..results.export import ExportError, Filters, pick_trial
from ..vocabulary.cost import accelerator_hours, cards, device_seconds  # noqa: F401 (read from here too)
from ..vocabulary.record import TrialRecord, as_record, records

DEFAULTS_SEED = "release defaults"  # the labels tuner/study/seeding.py default_seeds gives its seeds
CALCULATOR_SEED = "calculator"
BASELINE_SEED = "baseline"  # tune --baseline: what the user runs today (study/seeding.py BASELINE_SEED)
PLAN_SEED = "plan pick"  # tune --from-plan: "plan pick 1", ...
_CONSTRAINT = "constraints:"  # Optuna's system-attribute prefix of trial.set_constraint


@dataclass
class Limits:
    """The warmup budget and SLOs the study was tuned under (recovered from the constraint values)."""

    warmup_budget_s: float | None = None
    slos_ms: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"warmup <= {self.warmup_budget_s:g} s"] if self.warmup_budget_s is not None else []
        parts += [f"{k} <= {v:g} ms" for k, v in self.slos_ms.items()]
        return ", ".join(parts)


def study_limits(study: optuna.Study) -> Limits:
    """The limits tuner/study/run.py recorded; older studies: it stores `value - limit` per constraint, so a
    measured trial gives the limit back."""
    stored = study.user_attrs.get("constraints")
    if isinstance(stored, dict):
        return Limits(stored.get("warmup_budget_s"), dict(stored.get("slos_ms") or {}))
    out = Limits()
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for t, rec in zip(complete, records(complete)):
        if not rec.ok or not t.values:
            continue
        cons = {k[len(_CONSTRAINT):]: v for k, v in t.system_attrs.items() if k.startswith(_CONSTRAINT)}
        metrics = rec.metrics
        warm = rec.observed.get("warmup_s")
        if "warmup_budget" in cons and warm is not None and out.warmup_budget_s is None:
            out.warmup_budget_s = round(float(warm) - cons["warmup_budget"], 6)
        for key, value in cons.items():
            metric = key[len("slo_"):] if key.startswith("slo_") else None
            if metric and metric not in out.slos_ms and metrics.get(metric) is not None:
                out.slos_ms[metric] = round(float(metrics[metric]) - value, 6)
    return out


@dataclass
class Admission:
    """The trial closest to the limits and the smallest change of the tune command that would admit it."""

    trial: FrozenTrial
    changes: list[str]  # e.g. ["--slo p99_ttft_ms=4875 (now 3000)", "--allow-recompiles (2 shapes compiled ...)"]
    measured: bool  # False: the trial never served its load (rejected before boot, or its warm-up stopped)

    def sentence(self) -> str:
        what = "admits it" if self.measured else "lets it boot"
        return f"closest trial: {self.trial.number}; the smallest change that {what}: {' and '.join(self.changes)}"


# The figure a warm-up abort names (tuner/trial/run.py warmup_abort_reason and the early-pace check): what
# the warm-up had already run, or the whole warm-up its pace projected.
_ABORT_FIGURES = (r"warmup has run ([\d,.]+) s", r"projected warmup ([\d,.]+) s")


def _abort_figure(reason: str) -> float | None:
    import re

    for pattern in _ABORT_FIGURES:
        found = re.search(pattern, reason or "")
        if found:
            return float(found.group(1).replace(",", ""))
    return None


def _warmup_over_budget_change(rec: TrialRecord, budget: float) -> tuple[float, str] | None:
    """What lets a trial told over the warm-up budget boot: the figure that excluded it, which is over
    the budget. Rejected before boot: the calibrated prediction (its point; its lower bound was over).
    Stopped while warming up: the live watch's figure at the boot's own pace (on a busy machine or a slow
    node above the prediction, which the trial may well have met)."""
    import math

    if rec.booted:
        figure = _abort_figure(rec.reason)
        if figure is None or figure <= budget:
            return None
        predicted = rec.predicted.get("warmup_s")
        said = f"; predicted {predicted:.0f} s" if predicted is not None else ""
        return figure, (f"--warmup-budget {math.ceil(figure)} (now {budget:g}; its boot was stopped when its own "
                        f"pace put the warm-up at {figure:,.0f} s{said})")
    warm = rec.predicted.get("warmup_s")
    low = rec.predicted.get("warmup_low_s")
    if warm is None or max(warm, low or 0.0) <= budget:
        return None
    warm = max(warm, low or 0.0)
    return warm, f"--warmup-budget {math.ceil(warm)} (now {budget:g}; predicted {warm:.0f} s)"


def closest_admission(study: optuna.Study) -> Admission | None:
    """When no trial is feasible: which one the least relaxation admits (trials that served their load
    first, then fewest limits changed, then the smallest relative change), and how: each change names the
    limit that excluded the trial (SLO, warm-up budget, recompiles, failed requests) and the value that
    admits it, which is always past the limit in force. Trials the configuration broke (invalid, out of
    memory) cannot be admitted by a limit; those over the warm-up budget can, by a larger budget."""
    import math

    limits = study_limits(study)
    best: tuple[tuple[bool, int, float], Admission] | None = None
    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    for t, rec in zip(complete, records(complete)):
        metrics, observed = rec.metrics, rec.observed
        changes, cost = [], 0.0
        if rec.ok:
            cons = {k[len(_CONSTRAINT):]: v for k, v in t.system_attrs.items() if k.startswith(_CONSTRAINT)}
            for key, over in cons.items():
                if over <= 0:
                    continue
                if key.startswith("slo_") and metrics.get(key[4:]) is not None:
                    limit = limits.slos_ms.get(key[4:], metrics[key[4:]] - over)
                    changes.append(f"--slo {key[4:]}={math.ceil(metrics[key[4:]])} (now {limit:g})")
                    cost += over / max(limit, 1e-9)
                elif key == "warmup_budget" and limits.warmup_budget_s:
                    warm = observed.get("warmup_scored_s", observed.get("warmup_s"))
                    changes.append(f"--warmup-budget {math.ceil(warm)} (now {limits.warmup_budget_s:g}; "
                                   f"measured {warm:.0f} s)")
                    cost += over / limits.warmup_budget_s
                elif key == "recompiles":
                    changes.append(f"--allow-recompiles ({over:.0f} shape(s) compiled while serving)")
                    cost += 1.0
                elif key == "failed_requests":
                    changes.append(f"--allow-failed-requests ({over:.0f} request(s) failed)")
                    cost += 1.0
            measured = True
        elif rec.status == "warmup_over_budget" and limits.warmup_budget_s:
            found = _warmup_over_budget_change(rec, limits.warmup_budget_s)
            if found is None:
                continue
            figure, change = found
            changes.append(change)
            cost, measured = figure / limits.warmup_budget_s - 1, False
        else:
            continue
        if not changes:
            continue
        key = (not measured, len(changes), cost)  # a trial that never served ranks after every one that did
        if best is None or key < best[0]:
            best = (key, Admission(t, changes, measured))
    return best[1] if best else None


BALANCED_RULE = ("each objective is scaled over the feasible front from 0 (its best there) to 1 (its worst), and the "
                 "pick is the trial nearest the point that is best at all of them")


def runner_up(front: list[FrozenTrial], pick: FrozenTrial | None, dirs: list[str]) -> FrozenTrial | None:
    """The front trial nearest the ideal point after the pick (the balanced rule's runner-up), or None."""
    from ..study.pareto import ideal_distances

    if pick is None or len(front) < 2 or pick.number not in {t.number for t in front}:
        return None
    dist = ideal_distances([t.values for t in front], dirs)
    return min((t for t in front if t.number != pick.number), key=lambda t: dist[front.index(t)])


def balanced_rule(front: list[FrozenTrial], pick: FrozenTrial | None, names: list[str], dirs: list[str],
                  spread=None) -> str | None:
    """The balanced pick's rule in one sentence, with the runner-up and the objective it lost on; with a
    study/estimates.py Spread, also on what evidence (whether the difference is inside the noise)."""
    from ..study.pareto import ideal_distances, normalised
    from ..vocabulary import display

    if not front or pick is None or pick.number not in {t.number for t in front}:
        return None
    points = [t.values for t in front]
    dist = ideal_distances(points, dirs)
    p = next(i for i, t in enumerate(front) if t.number == pick.number)
    order = [p, *sorted((i for i in range(len(front)) if i != p), key=lambda i: dist[i])]
    if len(front) == 1:
        return f"Trial {pick.number} is the only trial on the feasible front, so it is the balanced pick."
    norm = normalised(points, dirs)
    r = order[1]
    runner = front[r]
    lost = max(range(len(names)), key=lambda k: norm[r][k] ** 2 - norm[p][k] ** 2)
    better = [display.short(names[k]) for k in range(len(names)) if norm[r][k] < norm[p][k]]

    def shown(i: int, k: int) -> str:
        return f"{display.metric(names[k], points[i][k])}, scaled {norm[i][k]:.2f}"

    rule = (f"Balanced pick rule: {BALANCED_RULE}; trial {pick.number} is at {dist[p]:.2f}, and the runner-up, trial "
            f"{runner.number} at {dist[r]:.2f}, loses on {display.short(names[lost])} ({shown(r, lost)}, against "
            f"{shown(p, lost)})" + (f" though it is better on {' and '.join(better)}." if better else "."))
    return rule if spread is None else f"{rule} {spread.pick_evidence(pick.number, runner.number)}"


def seed_trial(study: optuna.Study, label: str) -> FrozenTrial | None:
    """The trial that ran the seed `label`: the enqueued one, or its re-run when the environment
    failed it (tuner/study/tell.py enqueues the parameters again with `requeued_from`)."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    recs = records(trials)
    family = {r.number for r in recs if r.seed == label}
    if not family:
        return None
    for r in recs:
        if r.requeued_from in family:
            family.add(r.number)
    members = [t for t in trials if t.number in family]
    done = [t for t in members if t.state == TrialState.COMPLETE]
    return (done or members)[0]


def safe_pick(study: optuna.Study, pick: str, filters: Filters | None = None) -> FrozenTrial | None:
    try:
        return pick_trial(study, pick, filters or Filters())
    except ExportError:
        return None


def release_of(study: optuna.Study) -> str | None:
    return (study.user_attrs.get("space") or {}).get("release")


def release_notes(study: optuna.Study) -> list[str]:
    """How the study's release was chosen (tune --release auto) and what the release's own code said of
    the engine's buckets; plain sentences, empty when neither happened."""
    out = []
    det = study.user_attrs.get("release_detection") or {}
    if det:
        out.append(f"Release read off the node ({det.get('python')}): {det.get('why')}.")
        out += [f"{det[k][0].upper()}{det[k][1:]}." for k in ("nearest", "log_witness") if det.get(k)]
    check = study.user_attrs.get("release_check") or {}
    if check:
        n = check.get("n_differences", 0)
        out.append(f"Release code check: {check.get('checked', 0)} configuration(s) run through the release's own "
                   f"{check.get('module')}; {n} differ from the engine's buckets"
                   + (f" (the study used the release's lists for them; both lists in {check.get('file')})." if n
                      else "."))
    return out


def trial_class(t: FrozenTrial | TrialRecord, pareto: set[int]) -> str:
    """How a trial shows in the charts: on the front, feasible, infeasible (measured but outside a
    limit), failed (the configuration or the environment failed it)."""
    if t.number in pareto:
        return "Pareto front"
    rec = as_record(t)
    if t.state == TrialState.COMPLETE and rec.ok:
        return "feasible" if rec.feasible else "infeasible"
    if t.state in (TrialState.RUNNING, TrialState.WAITING):
        return "running"
    return "failed"


def value_text(v: Any) -> str:
    """A setting's value as a person writes it: 0.12, not 0.12000000000000001."""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def settings_text(t: FrozenTrial, sep: str = ", ", drop_prefix: str = "") -> str:
    return sep.join(f"{k[len(drop_prefix):] if drop_prefix and k.startswith(drop_prefix) else k}={value_text(v)}"
                    for k, v in t.params.items())
