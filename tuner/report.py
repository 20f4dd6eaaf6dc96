"""Results of a study: trials.csv, pareto.csv, a self-contained report.html, and a terminal table.

Reads only the Optuna storage (and the per-trial files it points to), so it works on a finished
study, a running one, or one left by a killed tuner.
"""

from __future__ import annotations

import html
import math
import warnings
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
from optuna.trial import TrialState

from .pareto import hypervolume

KEY_METRICS = ("output_throughput", "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms",
               "p99_tpot_ms", "p99_itl_ms", "p99_e2el_ms", "completed", "failed")


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per trial: state, classification, objectives, parameters, server-side findings."""
    names = study.metric_names or [f"objective_{i}" for i in range(len(study.directions))]
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        row: dict[str, Any] = {
            "number": t.number,
            "state": t.state.name,
            "status": a.get("status", "running" if t.state == TrialState.RUNNING else t.state.name.lower()),
            "feasible": a.get("feasible", False),
            "reason": a.get("reason", ""),
            "seed": a.get("seed", ""),
        }
        for name, value in zip(names, t.values or [None] * len(names)):
            row[name] = value if t.state == TrialState.COMPLETE else None
        for k, v in t.params.items():
            row[f"param:{k}"] = v
        for group in ("predicted", "observed"):
            for k, v in (a.get(group) or {}).items():
                if not isinstance(v, (dict, list)):
                    row[f"{group}:{k}"] = v
        metrics = a.get("metrics") or {}
        for k in KEY_METRICS:
            if k in metrics:
                row[k] = metrics[k]
        row["duration_s"] = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        rows.append(row)
    return pd.DataFrame(rows)


def pareto_frame(study: optuna.Study, frame: pd.DataFrame | None = None) -> pd.DataFrame:
    """The feasible Pareto set (Optuna's best_trials honours set_constraint), best throughput first."""
    frame = trials_frame(study) if frame is None else frame
    numbers = {t.number for t in study.best_trials}
    out = frame[frame["number"].isin(numbers)]
    if not out.empty and study.metric_names:
        out = out.sort_values(study.metric_names[0], ascending=False)
    return out.reset_index(drop=True)


def study_hypervolume(study: optuna.Study, reference: list[float]) -> float:
    best = [t.values for t in study.best_trials]
    return hypervolume(best, reference, [d.name.lower() for d in study.directions])


def write_csvs(study: optuna.Study, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = trials_frame(study)
    trials_csv, pareto_csv = out_dir / "trials.csv", out_dir / "pareto.csv"
    frame.to_csv(trials_csv, index=False)
    pareto_frame(study, frame).to_csv(pareto_csv, index=False)
    return trials_csv, pareto_csv


# ------------------------------------------------------------------------------------------ terminal

def print_pareto(study: optuna.Study, console=None, limit: int = 15) -> None:
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:  # a log file or a pipe: no reason to squeeze the table into 80 columns
            console = Console(width=200)
    frame = trials_frame(study)
    pareto = pareto_frame(study, frame)
    names = study.metric_names or []
    counts = frame["status"].value_counts().to_dict() if not frame.empty else {}
    console.print(f"[bold]{study.study_name}[/]: {len(frame)} trials "
                  + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if pareto.empty:
        console.print("No feasible trial yet: no Pareto front. See trials.csv for the reasons.")
        return
    table = Table(title=f"Pareto front ({len(pareto)} feasible trials)")
    table.add_column("#", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    params = [c for c in pareto.columns if c.startswith("param:")]
    for c in params:
        table.add_column(c[len("param:"):], justify="right")
    for _, row in pareto.head(limit).iterrows():
        cells = [str(row["number"])] + [_fmt(row.get(n)) for n in names] + [_fmt(row.get(c)) for c in params]
        table.add_row(*cells)
    console.print(table)


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


# -------------------------------------------------------------------------------------------- html

def write_html(study: optuna.Study, path: Path) -> Path:
    """A self-contained report: Pareto fronts in 2-D and 3-D, warmup vs throughput, parameter
    importances, and the trial table with failures and their reasons."""
    import plotly.express as px
    import plotly.io as pio

    frame = trials_frame(study)
    names = study.metric_names or []
    done = frame[frame["state"] == "COMPLETE"].copy() if not frame.empty else frame
    pareto_numbers = {t.number for t in study.best_trials}
    parts: list[str] = []
    figures = []
    if len(names) >= 3 and not done.empty:
        done["front"] = done["number"].map(lambda n: "Pareto" if n in pareto_numbers else
                                           ("feasible" if bool(done.set_index("number").loc[n, "feasible"])
                                            else "infeasible"))
        ok = done[done["status"] == "ok"]
        hover = ["number", "status"] + [c for c in done.columns if c.startswith("param:")]
        if not ok.empty:
            figures.append(px.scatter(ok, x=names[1], y=names[0], color=names[2], symbol="front",
                                      hover_data=hover, title=f"{names[0]} vs {names[1]} (colour: {names[2]})"))
            figures.append(px.scatter_3d(ok, x=names[1], y=names[2], z=names[0], color="front",
                                         hover_data=hover, title="Pareto front in 3-D"))
            figures.append(px.scatter(ok, x=names[2], y=names[0], color="front", hover_data=hover,
                                      title=f"warmup vs {names[0]}"))
        imp = _importances(study, names)
        if imp is not None:
            figures.append(px.bar(imp, x="importance", y="parameter", color="objective", barmode="group",
                                  orientation="h", title="Parameter importances (Optuna default evaluator)"))
    for i, fig in enumerate(figures):
        parts.append(pio.to_html(fig, full_html=False, include_plotlyjs="inline" if i == 0 else False))
    table = frame.drop(columns=[c for c in frame.columns if c.startswith("predicted:")], errors="ignore")
    body = "\n".join(parts) or "<p>No completed trial yet.</p>"
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(study.study_name)}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}} tr.fail td{{background:#fee}}</style></head><body>
<h1>bucket-tuner study {html.escape(study.study_name)}</h1>
<p>{len(frame)} trials, {len(pareto_numbers)} on the feasible Pareto front.
Objectives: {html.escape(', '.join(f'{n} ({d.name.lower()})' for n, d in zip(names, study.directions)))}.</p>
{body}
<h2>Trials</h2>
{_trial_table_html(table)}
</body></html>"""
    path.write_text(doc)
    return path


def _importances(study: optuna.Study, names: list[str]):
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    if len(complete) < 4 or not any(t.params for t in complete):
        return None
    rows = []
    signs = [-1.0 if d.name == "MAXIMIZE" else 1.0 for d in study.directions]
    for i, name in enumerate(names):
        try:
            # The default evaluator (PED-ANOVA) looks for what makes the target low: flip maximised
            # ones. It warns about that, and about thinly sampled conditional parameters, on every
            # call: the report is a best effort over what the study has, so keep the terminal quiet.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                imp = optuna.importance.get_param_importances(study, target=lambda t, i=i: signs[i] * t.values[i])
        except (RuntimeError, ValueError, ZeroDivisionError):
            continue  # too few distinct values, or conditional parameters absent everywhere
        rows += [{"objective": name, "parameter": p, "importance": v} for p, v in imp.items()]
    return pd.DataFrame(rows) if rows else None


def _trial_table_html(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>No trials.</p>"
    cols = list(frame.columns)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    rows = []
    for _, r in frame.iterrows():
        cls = "" if r.get("status") == "ok" else ' class="fail"'
        cells = "".join(f"<td>{html.escape(_fmt(r[c]) if not isinstance(r[c], str) else r[c])}</td>" for c in cols)
        rows.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def write_report(study: optuna.Study, out_dir: Path) -> dict[str, Path]:
    trials_csv, pareto_csv = write_csvs(study, out_dir)
    report = write_html(study, out_dir / "report.html")
    return {"trials_csv": trials_csv, "pareto_csv": pareto_csv, "report_html": report}
