"""The load sweeps of a study (`tune --load-sweep`) as tables: load_sweep.csv, trials.csv columns and the
report's trials-table cell. Read from the trial attribute observed.load_sweep (tuner/trial/loadsweep.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pandas as pd

from ..vocabulary import display
from ..vocabulary.errors.disk import write_text
from ..vocabulary.record import TrialRecord, records

THROUGHPUT = "output_throughput"
CSV_NAME = "load_sweep.csv"


def sweep_points(rec: TrialRecord) -> list[dict[str, Any]]:
    return list(rec.observed.get("load_sweep") or [])


def sweep_columns(rec: TrialRecord, latency_key: str | None) -> dict[str, Any]:
    """trials.csv columns of one trial's sweep: the chosen point, then per point its status,
    throughput and the study's latency objective (load_sweep.csv has every figure)."""
    points = sweep_points(rec)
    if not points:
        return {}
    out: dict[str, Any] = {"sweep_selected": rec.observed.get("load_sweep_selected")}
    for p in points:
        m = p.get("metrics") or {}
        out[f"sweep:{p['point']}:status"] = p.get("status")
        out[f"sweep:{p['point']}:{THROUGHPUT}"] = m.get(THROUGHPUT)
        if latency_key:
            out[f"sweep:{p['point']}:{latency_key}"] = m.get(latency_key)
    return out


def sweep_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per (trial, load point), every metric of the point: what a throughput-latency plot needs."""
    rows = []
    for rec in records(study.get_trials(deepcopy=False)):
        for order, p in enumerate(sweep_points(rec), start=1):
            row: dict[str, Any] = {
                "number": rec.number, "trial_state": rec.state.name, "trial_status": rec.status,
                "order": order, "point": p.get("point"), "kind": p.get("kind"), "value": p.get("value"),
                "status": p.get("status"), "selected": bool(p.get("selected")), "meets_slo": p.get("meets_slo"),
                "slo_misses": "; ".join(p.get("slo_misses") or []), "reason": p.get("reason", ""),
            }
            for k, v in (p.get("metrics") or {}).items():
                if not isinstance(v, (list, dict)):
                    row[k] = v
            rows.append(row)
    return pd.DataFrame(rows)


def write_sweep_csv(study: optuna.Study, out_dir: Path) -> Path | None:
    """load_sweep.csv when some trial ran a sweep (None otherwise: no empty file)."""
    text = sweep_csv_text(study)
    return None if text is None else write_text(out_dir / CSV_NAME, text)


def sweep_csv_text(study: optuna.Study) -> str | None:
    """load_sweep.csv's content; None when no trial ran a sweep."""
    frame = sweep_frame(study)
    return None if frame.empty else frame.to_csv(index=False)


def sweep_cell(rec: TrialRecord) -> tuple[str, float | None]:
    """The curve in one cell: 'rate=2 31 tok/s; rate=8 119 tok/s *; rate=inf 366 tok/s (misses SLO)';
    * marks the point whose figures the trial reports. Sorted by that point's throughput."""
    parts, chosen = [], None
    for p in sweep_points(rec):
        m = p.get("metrics") or {}
        text = f"{p['point']} " + (display.metric(THROUGHPUT, m[THROUGHPUT]) if m.get(THROUGHPUT) is not None
                                   else p.get("status", "-"))
        if m and p.get("meets_slo") is False:
            text += " (misses SLO)" if p.get("status") == "ok" else f" ({p.get('status')})"
        if p.get("selected"):
            text += " *"
            chosen = m.get(THROUGHPUT)
        parts.append(text)
    return ("; ".join(parts) or "-", chosen)
