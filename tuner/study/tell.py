"""A trial's result told to Optuna, and which told trials count toward `--n-trials`.

A trial is told back with three objectives (throughput up, a latency percentile down, warmup seconds
down; with --cost-objective, $ per million output tokens down as a fourth) and `trial.set_constraint`
values (feasible when all <= 0). A failure the configuration caused
(invalid settings, warmup over budget, OOM, failed requests) is told as an infeasible COMPLETE trial with
penalty values, so the sampler learns to avoid the region; a failure of the environment (boot failure,
crash, port clash) or an interruption is a FAIL and its parameters are enqueued again.
"""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from ..trial.run import TrialResult
from ..vocabulary.record import TrialRecord
from ..vocabulary.status import CONFIG_FAILURES, TrialStatus
from . import optuna_private
from .dashboard import trial_figures
from .nodes import requeue_attrs
from .options import COST, COST_PENALTY, THROUGHPUT, WARMUP, Constraints, Objectives
from .screen import counts_toward_budget

LATENCY_PENALTY_MS = 1e5  # latency told for a trial that produced none (100 s: worse than any real one)


def tell_result(study: optuna.Study, trial: optuna.Trial, result: TrialResult, objectives: Objectives,
                constraints: Constraints) -> TrialState:
    """Record the result on the trial and tell it: COMPLETE with its objectives and constraint values, or
    FAIL when the environment failed it (its parameters enqueued again). Returns the state told."""
    attrs = result.to_json()
    for key in ("status", "reason", "server", "env", "predicted", "observed", "artifacts", "timings", "argv"):
        trial.set_user_attr(key, attrs[key])
    trial.set_user_attr("metrics", {k: v for k, v in result.metrics.items() if not k.startswith("tuner_")})
    for key, value in trial_figures(result, objectives).items():  # plain numbers optuna-dashboard sorts and plots
        trial.set_user_attr(key, value)
    cons = constraints.values(result)
    feasible = all(v <= 0 for v in cons.values())
    trial.set_user_attr("feasible", feasible)  # optuna-dashboard 0.21 does not read set_constraint
    misses = constraints.misses(result)
    if misses:  # a measured trial outside a limit: its reason says which, with the figures
        trial.set_user_attr("reason", "; ".join([*misses, *([result.reason] if result.reason else [])]))
    if result.status not in CONFIG_FAILURES and not result.ok:
        # The environment failed, not the configuration: no values; run these parameters again.
        requeue = result.status in (TrialStatus.INTERRUPTED, TrialStatus.PORT_IN_USE)
        trial.set_user_attr("requeued", requeue)
        study.tell(trial, state=TrialState.FAIL)
        if requeue:
            study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number, **requeue_attrs(trial)})
        return TrialState.FAIL
    for name, value in cons.items():
        trial.set_constraint(name, float(value))
    # optuna-dashboard 0.21 reads only the legacy "constraints" system attribute; mirror the values
    # there (same numbers, same order) so its Pareto view hides infeasible trials too.
    optuna_private.mirror_constraints(study, trial, [float(v) for v in cons.values()])
    # Penalties for what was not measured: they steer the sampler away, and stay inside Optuna (the names
    # are recorded so that trials.csv and pareto.csv leave those cells empty, tuner/report/frame.py).
    placeholders = []
    throughput = float(result.metrics.get(THROUGHPUT) or 0.0) if result.ok else 0.0
    if not result.ok or result.metrics.get(THROUGHPUT) is None:
        placeholders.append(THROUGHPUT)
    latency = result.metrics.get(objectives.latency_key)
    if latency is None or not result.ok:
        latency = max([LATENCY_PENALTY_MS, *constraints.slos_ms.values()])
        placeholders.append(objectives.latency_key)
    warmup = result.warmup_s
    if warmup is None or not result.warmup_measured:
        placeholders.append(WARMUP)
    if warmup is None:
        warmup = constraints.warmup_budget_s or result.predicted.get("warmup_s") or 0.0
    values = [throughput, float(latency), float(warmup)]
    if objectives.cost:
        cost = result.metrics.get(COST) if result.ok else None
        if cost is None:
            placeholders.append(COST)
        values.append(float(cost) if cost is not None else COST_PENALTY)
    trial.set_user_attr("placeholders", placeholders)
    study.tell(trial, values)
    return TrialState.COMPLETE


def counted(study: optuna.Study) -> int:
    """Trials that count toward --n-trials: running ones (any worker's), completed ones, and failed
    ones that were not re-enqueued; not the screened ones (reused or rejected without a boot).
    Workers sharing a study can overshoot by at most one trial each."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if (t.state in (TrialState.RUNNING, TrialState.COMPLETE)
                   or (t.state == TrialState.FAIL and not TrialRecord.from_frozen(t).requeued))
               and counts_toward_budget(t))


def already_done(opts) -> tuple[int, tuple[float, int] | None]:
    """What an existing study already holds: the trials counted toward --n-trials, and its best measured
    feasible throughput (tok/s, trial); (0, None) for a new one. Read-only: a mistyped name creates nothing."""
    from .storage import open_storage_readonly

    try:
        storage = opts.storage_object or open_storage_readonly(opts.storage_url)
        study = optuna.load_study(study_name=opts.name, storage=storage)
    except Exception:  # no database yet, no such study, a storage that cannot be read now: said later
        return 0, None
    best = None
    for rec in map(TrialRecord.from_frozen, study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))):
        thr = rec.metrics.get("output_throughput")
        if rec.measured and rec.feasible and thr is not None and (best is None or thr > best[0]):
            best = (float(thr), rec.number)
    return counted(study), best
