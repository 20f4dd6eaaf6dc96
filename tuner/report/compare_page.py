"""compare.html: the report page for several studies (releases side by side)."""

from __future__ import annotations

from pathlib import Path

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState

from ..compare import Comparison
from . import charts, units
from .convergence import front_volume
from .facts import accelerator_hours, settings_text
from .html import chart, page
from .tables import esc, table

COMPARE_IDS = ("summary", "regressions", "pareto", "budgets", "settings", "convergence", "studies")
COMPARE_TITLES = {"summary": "Coverage", "regressions": "Regressions", "pareto": "Fronts",
                  "budgets": "Warmup budgets", "settings": "Settings that differ", "convergence": "Convergence",
                  "studies": "Best per criterion"}


def _points(cmp: Comparison, x: int, y: int) -> dict[str, list[dict]]:
    out = {}
    for name, front in zip(cmp.names, cmp.fronts):
        out[name] = [{"x": t.values[x], "y": t.values[y],
                      "text": esc(f"{name} trial {t.number}") + "<br>" + "<br>".join(
                          esc(f"{units.short(n)}: {units.metric(n, v)}") for n, v in zip(cmp.objective_names, t.values))
                      + "<br>" + esc(settings_text(t, " "))} for t in front]
    return out


def _share_chart(cmp: Comparison) -> go.Figure:
    fig = go.Figure(go.Bar(x=cmp.names, y=[100 * s for s in cmp.share], marker_color=charts.SERIES[:len(cmp.names)],
                           text=[f"{s:.0%}" for s in cmp.share], textposition="outside",
                           hovertemplate="%{x}: %{y:.0f}% of the union front<extra></extra>"))
    fig.update_yaxes(range=[0, 110])
    return charts._layout(fig, "Front hypervolume as a share of the union of all fronts", None, "% of union",
                          height=320)


def _convergence_chart(cmp: Comparison, studies: list[optuna.Study]) -> go.Figure:
    fig = go.Figure()
    for i, s in enumerate(studies):
        backend = s.user_attrs.get("backend") or {}
        spent, seen, xs, ys = 0.0, [], [], []
        for t in sorted(s.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL)),
                        key=lambda t: t.number):
            spent += accelerator_hours(t, backend)
            if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible") and t.values:
                seen.append(t.values)
            xs.append(spent)
            ys.append(100 * front_volume(seen, cmp.reference, cmp.directions) / cmp.union_hypervolume
                      if cmp.union_hypervolume else 0.0)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", line_shape="hv", name=s.study_name,
                                 marker={"color": charts.SERIES[i % len(charts.SERIES)]}))
    fig.update_yaxes(range=[0, 105])
    return charts._layout(fig, "Share of the union front reached per accelerator-hour", "accelerator-hours",
                          "% of union front", height=340)


def write_compare_html(cmp: Comparison, studies: list[optuna.Study], path: Path) -> Path:
    names = cmp.objective_names
    body = []
    rows = [(n, r or "-", cmp.trials[i], len(cmp.fronts[i]), (f"{cmp.share[i]:.0%}", 100 * cmp.share[i]))
            for i, (n, r) in enumerate(zip(cmp.names, cmp.releases))]
    best = max(range(len(cmp.names)), key=lambda i: cmp.share[i])
    body.append("<section id='summary'><h2>Which study found more</h2>"
                f"<p class='answer'>{esc(cmp.names[best])} covers the most of the union of all feasible fronts "
                f"({cmp.share[best]:.0%}); the first study, {esc(cmp.names[0])}, is the baseline.</p>"
                + table(["study", "release", "trials", "front", "share of union"], rows)
                + chart(_share_chart(cmp), "chart-compare-share") + "</section>")
    if cmp.regressions:
        items = "".join(f"<li>{esc(r)}</li>" for r in cmp.regressions)
        body.append(f"<section id='regressions'><h2>Regressions against {esc(cmp.names[0])}</h2>"
                    f"<ul class='warn'>{items}</ul></section>")
    else:
        body.append(f"<section id='regressions'><h2>Regressions</h2><p>None: no study does worse than "
                    f"{esc(cmp.names[0])} by more than 5% on any pick or warmup budget.</p></section>")
    body.append("<section id='pareto'><h2>The fronts</h2><div class='grid'>"
                + chart(charts.fronts(_points(cmp, 1, 0), units.short(names[1]), "output tok/s",
                                      f"Throughput vs {units.short(names[1])}"), "chart-compare-latency")
                + chart(charts.fronts(_points(cmp, 2, 0), "warmup (s)", "output tok/s", "Throughput vs warmup"),
                        "chart-compare-warmup")
                + "</div></section>")
    rows = [(units.seconds(b), *[("-", None) if x is None else (units.metric(names[0], x), x) for x in row])
            for b, row in cmp.at_budget]
    body.append("<section id='budgets'><h2>Best throughput within a warmup budget</h2>"
                + table(["warmup budget", *cmp.names], rows) + "</section>")
    rows = [(k, *["unset" if v is None else str(v) for v in values]) for k, values in cmp.setting_diffs]
    body.append("<section id='settings'><h2>Balanced picks: settings that differ</h2>"
                + (table(["setting", *cmp.names], rows) if rows else "<p>The balanced picks use the same settings "
                   "(or a study has no feasible trial).</p>") + "</section>")
    body.append("<section id='convergence'><h2>What each study cost</h2>"
                + chart(_convergence_chart(cmp, studies), "chart-compare-convergence") + "</section>")
    rows = []
    for c, picks in cmp.best.items():
        for n, s in zip(cmp.names, picks):
            vals = [units.metric(o, v) for o, v in zip(names, s["values"])] if s else ["-"] * len(names)
            rows.append((c, n, s["trial"] if s else "-", *vals, s["prompt_buckets"] if s else "-",
                         s["decode_buckets"] if s else "-"))
    body.append("<section id='studies'><h2>Best trial per criterion</h2>"
                + table(["pick", "study", "trial", *[units.short(n) for n in names], "prompt buckets",
                         "decode buckets"], rows, cls="sortable") + "</section>")
    intro = ("<p>" + ", ".join(f"<b>{esc(n)}</b> ({esc(r or 'no release')})" for n, r in zip(cmp.names, cmp.releases))
             + ". Hypervolumes are taken on one common reference point, worse than every front point.</p>")
    path.write_text(page("bucket-tuner: " + " vs ".join(cmp.names), intro, body, COMPARE_IDS, COMPARE_TITLES))
    return path
