"""A study as tables: one row per trial (trials.csv) and the feasible Pareto set (pareto.csv).

Reads only the Optuna storage, so it works on a finished study, a running one, or one left by a
killed tuner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState

from ..study.pareto import hypervolume, measured_front
from ..vocabulary.errors.disk import write_text
from ..vocabulary.record import TrialRecord, records
from .sweep import sweep_columns

KEY_METRICS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
               "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "completed", "failed",
               # the first requests after ready against as many warm ones (tuner/load/firstrun.py)
               "first_p99_ttft_ms", "warm_p99_ttft_ms", "first_output_throughput", "warm_output_throughput")


def objective_names(study: optuna.Study) -> list[str]:
    return study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]


def directions(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: state, classification, objectives, parameters, server-side findings."""
    names = objective_names(study)
    rows = []
    trials = study.get_trials(deepcopy=False)
    for t, rec in zip(trials, records(trials)):
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "status": rec.status_text,  # a running trial: its state, "running"
            "feasible": rec.feasible,
            "reason": rec.reason,
            "seed": "" if rec.seed is None else rec.seed,
        }
        blank = placeholders(rec, names)
        for name, value in zip(names, t.values or [None] * len(names)):
            row[name] = value if t.state == TrialState.COMPLETE and name not in blank else None
        for k, v in t.params.items():
            row[f"param:{k}"] = v
        for group, values in (("predicted", rec.predicted), ("observed", rec.observed)):
            for k, v in values.items():
                if not isinstance(v, (dict, list)):
                    row[f"{group}:{k}"] = v
        for k in KEY_METRICS:
            if k in rec.metrics:
                row[k] = rec.metrics[k]
        row.update(sweep_columns(rec, names[1] if len(names) > 1 else None))  # --load-sweep: the curve
        row["duration_s"] = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        rows.append(row)
    return pd.DataFrame(rows)


def placeholders(rec: TrialRecord, names: list[str]) -> set[str]:
    """Objectives told to Optuna as penalties, not measured (tuner/study/tell.py tell_result): empty cells in the
    data files. Studies recorded before the attribute: worked out from the status and what was observed."""
    if rec.placeholders is not None:
        return set(rec.placeholders)
    out = set(names[:2]) if not rec.ok else set()
    if len(names) > 2 and all(rec.observed.get(k) is None for k in ("warmup_s", "warmup_scored_s")):
        out.add(names[2])
    return out


def pareto_frame(study: optuna.Study, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The feasible Pareto set (Optuna's best_trials honours set_constraint), best throughput first."""
    frame = trials_frame(study) if frame is None else frame
    numbers = {t.number for t in measured_front(study)}
    if frame.empty:
        return frame
    out = frame[frame["number"].isin(numbers)]
    if not out.empty and study.metric_names:
        out = out.sort_values(study.metric_names[0], ascending=False)
    return out.reset_index(drop=True)


def study_hypervolume(study: optuna.Study, reference: list[float]) -> float:
    best = [t.values for t in measured_front(study)]
    return hypervolume(best, reference, directions(study))


def write_csvs(study: optuna.Study, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    trials_text, pareto_text = csv_texts(study)
    return write_text(out_dir / "trials.csv", trials_text), write_text(out_dir / "pareto.csv", pareto_text)


def csv_texts(study: optuna.Study) -> tuple[str, str]:
    """trials.csv's and pareto.csv's content."""
    frame = trials_frame(study)
    return frame.to_csv(index=False), pareto_frame(study, frame).to_csv(index=False)
