"""What a report needs to know about a study beyond its values: the limits the user tuned under, the
seed trials (release defaults, static calculator), the recommended picks, and what a trial cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from ..results.export import ExportError, Filters, pick_trial

DEFAULTS_SEED = "release defaults"  # the labels tuner/study/run.py default_seeds gives its seeds
CALCULATOR_SEED = "calculator"
BASELINE_SEED = "baseline"  # tune --baseline: what the user runs today (study/run.py BASELINE_SEED)
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
    """tuner/study/run.py stores `value - limit` per constraint; a measured trial gives the limit back."""
    out = Limits()
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get("status") != "ok" or not t.values:
            continue
        cons = {k[len(_CONSTRAINT):]: v for k, v in t.system_attrs.items() if k.startswith(_CONSTRAINT)}
        metrics = t.user_attrs.get("metrics") or {}
        warm = (t.user_attrs.get("observed") or {}).get("warmup_s")
        if "warmup_budget" in cons and warm is not None and out.warmup_budget_s is None:
            out.warmup_budget_s = round(float(warm) - cons["warmup_budget"], 6)
        for key, value in cons.items():
            metric = key[len("slo_"):] if key.startswith("slo_") else None
            if metric and metric not in out.slos_ms and metrics.get(metric) is not None:
                out.slos_ms[metric] = round(float(metrics[metric]) - value, 6)
    return out


def seed_trial(study: optuna.Study, label: str) -> FrozenTrial | None:
    """The trial that ran the seed `label`: the enqueued one, or its re-run when the environment
    failed it (tuner/study/run.py enqueues the parameters again with `requeued_from`)."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    family = {t.number for t in trials if t.user_attrs.get("seed") == label}
    if not family:
        return None
    for t in trials:
        if t.user_attrs.get("requeued_from") in family:
            family.add(t.number)
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


def cards(t: FrozenTrial) -> int:
    """Accelerator cards a trial held: the tensor-parallel size of its server command line."""
    argv = t.user_attrs.get("argv") or []
    for flag in ("--tensor-parallel-size", "-tp"):
        if flag in argv[:-1]:
            try:
                return max(1, int(argv[argv.index(flag) + 1]))
            except ValueError:
                pass
    return max(1, int((t.user_attrs.get("server") or {}).get("tensor_parallel_size", 1)))


def device_seconds(t: FrozenTrial, backend: dict[str, Any]) -> float:
    """Seconds the trial held its cards (boot + warmup + load test), in the server's own time: the
    simulator runs compressed, so its wall times are scaled back to what a real node would spend.
    A trial rejected before boot held nothing."""
    tm = t.user_attrs.get("timings") or {}
    load_scale = float(backend.get("time_scale") or 1.0)
    startup_scale = float(backend.get("startup_time_scale") or load_scale)
    return float(tm.get("boot_and_warmup_s", 0.0)) / startup_scale + float(tm.get("load_s", 0.0)) / load_scale


def accelerator_hours(t: FrozenTrial, backend: dict[str, Any]) -> float:
    return device_seconds(t, backend) * cards(t) / 3600.0


def trial_class(t: FrozenTrial, pareto: set[int]) -> str:
    """How a trial shows in the charts: on the front, feasible, infeasible (measured but outside a
    limit), failed (the configuration or the environment failed it)."""
    if t.number in pareto:
        return "Pareto front"
    status = t.user_attrs.get("status")
    if t.state == TrialState.COMPLETE and status == "ok":
        return "feasible" if t.user_attrs.get("feasible") else "infeasible"
    if t.state in (TrialState.RUNNING, TrialState.WAITING):
        return "running"
    return "failed"


def value_text(v: Any) -> str:
    """A setting's value as a person writes it: 0.12, not 0.12000000000000001."""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def settings_text(t: FrozenTrial, sep: str = ", ", drop_prefix: str = "") -> str:
    return sep.join(f"{k[len(drop_prefix):] if drop_prefix and k.startswith(drop_prefix) else k}={value_text(v)}"
                    for k, v in t.params.items())
