"""Two studies side by side: the release-upgrade check (same workload, same search, two releases).

Reports, per study: the best trial per criterion, the hypervolume of each feasible front on one
common reference point, throughput at equal warmup budgets, and what differs between the balanced
picks (release, bucket counts, warmup, settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from .export import ExportError, Filters, pick_trial
from .pareto import hypervolume

CRITERIA = ("throughput", "latency", "warmup", "balanced")


@dataclass
class Comparison:
    names: tuple[str, str]
    releases: tuple[str | None, str | None]
    objective_names: list[str]
    reference: list[float]
    hypervolume: tuple[float, float]
    best: dict[str, tuple[dict | None, dict | None]] = field(default_factory=dict)
    at_budget: list[tuple[float, float | None, float | None]] = field(default_factory=list)
    setting_diffs: list[tuple[str, Any, Any]] = field(default_factory=list)


def _summary(t: optuna.trial.FrozenTrial | None) -> dict | None:
    if t is None:
        return None
    obs = t.user_attrs.get("observed", {})
    return {"trial": t.number, "values": list(t.values), "params": dict(t.params),
            "prompt_buckets": obs.get("prompt_buckets"), "decode_buckets": obs.get("decode_buckets"),
            "kv_blocks": obs.get("kv_blocks"), "env": t.user_attrs.get("env", {})}


def _pick(study: optuna.Study, criterion: str):
    try:
        return pick_trial(study, criterion, Filters())
    except ExportError:
        return None


def compare_studies(a: optuna.Study, b: optuna.Study) -> Comparison:
    names = a.metric_names or []
    if (b.metric_names or []) != names:
        raise ValueError(f"the studies have different objectives: {names} vs {b.metric_names}")
    directions = [d.name.lower() for d in a.directions]
    fronts = [[t.values for t in s.best_trials] for s in (a, b)]
    points = fronts[0] + fronts[1]
    # A common reference point, slightly worse than the worst front point on every objective.
    reference = []
    for i, d in enumerate(directions):
        col = [p[i] for p in points] or [0.0]
        reference.append(0.0 if d == "maximize" else max(col) * 1.1 + 1e-9)
    cmp = Comparison(
        names=(a.study_name, b.study_name),
        releases=tuple((s.user_attrs.get("space") or {}).get("release") for s in (a, b)),
        objective_names=names,
        reference=reference,
        hypervolume=tuple(hypervolume(f, reference, directions) for f in fronts),
    )
    for c in CRITERIA:
        cmp.best[c] = (_summary(_pick(a, c)), _summary(_pick(b, c)))
    warmups = sorted({round(p[2], 1) for p in points})
    budgets = sorted({warmups[0], warmups[len(warmups) // 2], warmups[-1]}) if warmups else []
    for budget in budgets:
        best = []
        for s in (a, b):
            fits = [t.values[0] for t in s.best_trials if t.values[2] <= budget]
            best.append(max(fits) if fits else None)
        cmp.at_budget.append((budget, best[0], best[1]))
    ba, bb = cmp.best["balanced"]
    if ba and bb:
        keys = sorted(set(ba["env"]) | set(bb["env"]) | set(ba["params"]) | set(bb["params"]))
        for k in keys:
            va = ba["params"].get(k, ba["env"].get(k))
            vb = bb["params"].get(k, bb["env"].get(k))
            if va != vb:
                cmp.setting_diffs.append((k, va, vb))
    return cmp


def print_comparison(cmp: Comparison, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    a, b = cmp.names
    console.print(f"[bold]{a}[/] ({cmp.releases[0]}) vs [bold]{b}[/] ({cmp.releases[1]})")
    console.print(f"hypervolume on reference {['%.4g' % r for r in cmp.reference]}: "
                  f"{a} {cmp.hypervolume[0]:.4g}, {b} {cmp.hypervolume[1]:.4g}")
    table = Table(title="best trial per criterion")
    for col in ("criterion", "study", "trial", *cmp.objective_names, "prompt buckets", "decode buckets"):
        table.add_column(col)
    for c, pair in cmp.best.items():
        for name, s in zip(cmp.names, pair):
            if s is None:
                table.add_row(c, name, "-", *["-"] * len(cmp.objective_names), "-", "-")
                continue
            table.add_row(c, name, str(s["trial"]), *[f"{v:.4g}" for v in s["values"]],
                          str(s["prompt_buckets"] if s["prompt_buckets"] is not None else "-"),
                          str(s["decode_buckets"] if s["decode_buckets"] is not None else "-"))
    console.print(table)
    if cmp.at_budget:
        t = Table(title=f"best {cmp.objective_names[0]} within a warmup budget")
        for col in ("warmup budget (s)", a, b):
            t.add_column(col)
        for budget, x, y in cmp.at_budget:
            t.add_row(f"{budget:g}", "-" if x is None else f"{x:.4g}", "-" if y is None else f"{y:.4g}")
        console.print(t)
    if cmp.setting_diffs:
        t = Table(title="balanced picks: settings that differ")
        for col in ("setting", a, b):
            t.add_column(col)
        for k, x, y in cmp.setting_diffs:
            t.add_row(k, str(x), str(y))
        console.print(t)


def write_overlay(a: optuna.Study, b: optuna.Study, path: Path) -> Path:
    import plotly.graph_objects as go

    names = a.metric_names or ["objective_0", "objective_1", "objective_2"]
    fig = go.Figure()
    for s in (a, b):
        pts = [t for t in s.best_trials]
        fig.add_trace(go.Scatter(x=[t.values[1] for t in pts], y=[t.values[0] for t in pts], mode="markers",
                                 name=s.study_name, text=[f"trial {t.number}, warmup {t.values[2]:.0f} s" for t in pts]))
    fig.update_layout(title="Pareto fronts", xaxis_title=names[1], yaxis_title=names[0])
    fig.write_html(path, include_plotlyjs="inline")
    return path
