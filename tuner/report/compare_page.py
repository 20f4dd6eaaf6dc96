"""compare.html: the report page for several studies (releases side by side), with the same section
ids as report.html: summary, pareto, warmup, workload, failures, convergence, trials."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import optuna
import plotly.graph_objects as go
from optuna.trial import TrialState

from ..results.compare import Comparison, cell, pick_noise
from ..vocabulary import display
from ..vocabulary.errors.disk import write_text
from . import charts
from .convergence import front_volume
from .data import ReportData, gather
from .facts import accelerator_hours, settings_text
from .html import SECTION_IDS, TITLES, chart, page
from .startup import PHASES
from .summary import stats
from .tables import esc, table
from .warmuprows import warmup_rows

COMPARE_IDS = SECTION_IDS


def _hover(name: str, t, names) -> str:
    lines = [f"{name} trial {t.number}",
             *[f"{display.short(n)}: {display.metric(n, v)}" for n, v in zip(names, t.values)],
             settings_text(t, " ")]
    return "<br>".join(esc(x) for x in lines)


def _points(cmp: Comparison, x: int, y: int) -> dict[str, list[dict]]:
    return {name: [{"x": t.values[x], "y": t.values[y], "v": t.values, "text": _hover(name, t, cmp.objective_names)}
                   for t in front] for name, front in zip(cmp.names, cmp.fronts)}


def _fronts_3d(cmp: Comparison) -> go.Figure:
    fig = go.Figure()
    for i, (name, rows) in enumerate(_points(cmp, 1, 0).items()):
        fig.add_trace(go.Scatter3d(x=[r["v"][1] for r in rows], y=[r["v"][2] for r in rows],
                                   z=[r["v"][0] for r in rows], mode="markers", name=name,
                                   marker={"color": charts.SERIES[i % len(charts.SERIES)], "size": 5},
                                   text=[r["text"] for r in rows], hovertemplate="%{text}<extra></extra>"))
    names = cmp.objective_names
    fig.update_layout(scene={"xaxis_title": display.short(names[1]), "yaxis_title": display.short(names[2]),
                             "zaxis_title": display.short(names[0])})
    return charts.layout(fig, "The fronts in 3-D (drag to turn)", height=520)


def _share_chart(cmp: Comparison) -> go.Figure:
    fig = go.Figure(go.Bar(x=cmp.names, y=[100 * s for s in cmp.share], marker_color=charts.SERIES[:len(cmp.names)],
                           text=[f"{s:.0%}" for s in cmp.share], textposition="outside",
                           hovertemplate="%{x}: %{y:.0f}% of the union front<extra></extra>"))
    fig.update_yaxes(range=[0, 115])
    return charts.layout(fig, "Front hypervolume as a share of the union of all fronts", None, "% of union",
                          height=320)


def _convergence_chart(cmp: Comparison, data: list[ReportData]) -> go.Figure:
    fig = go.Figure()
    for i, (label, d) in enumerate(zip(cmp.names, data)):
        spent, seen, xs, ys = 0.0, [], [], []
        for t in d.trials:  # in number order
            if t.state not in (TrialState.COMPLETE, TrialState.FAIL):
                continue
            rec = d.record(t)
            spent += accelerator_hours(rec, d.backend)
            if t.state == TrialState.COMPLETE and rec.feasible and t.values:
                seen.append(t.values)
            xs.append(spent)
            ys.append(100 * front_volume(seen, cmp.reference, cmp.directions) / cmp.union_hypervolume
                      if cmp.union_hypervolume else 0.0)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", line_shape="hv", name=label,
                                 marker={"color": charts.SERIES[i % len(charts.SERIES)]}))
    fig.update_yaxes(range=[0, 105])
    return charts.layout(fig, "Share of the union front reached per accelerator-hour", "accelerator-hours",
                          "% of union front", height=340)


def _summary(cmp: Comparison) -> str:
    names = cmp.objective_names
    rows = [(n, r or "-", cmp.trials[i], len(cmp.fronts[i]), (f"{cmp.share[i]:.0%}", 100 * cmp.share[i]))
            for i, (n, r) in enumerate(zip(cmp.names, cmp.releases))]
    best = max(range(len(cmp.names)), key=lambda i: cmp.share[i])
    out = ["<section id='summary'><h2>Which study found more</h2>",
           f"<p class='answer'>{esc(cmp.names[best])} covers the most of the union of all feasible fronts "
           f"({cmp.share[best]:.0%}); the first study, {esc(cmp.names[0])}, is the baseline.</p>",
           table(["study", "release", "trials", "front", "share of union"], rows),
           chart(_share_chart(cmp), "chart-compare-share")]
    if cmp.regressions:
        items = "".join(f"<li>{esc(r)}</li>" for r in cmp.regressions)
        out.append(f"<div id='regressions'><h3>Regressions against {esc(cmp.names[0])}</h3>"
                   f"<ul class='warn'>{items}</ul></div>")
    else:
        out.append(f"<div id='regressions'><h3>Regressions</h3><p>None: no study does worse than "
                   f"{esc(cmp.names[0])} by more than 5% on any pick or warmup budget.</p></div>")
    rows = [(k, *["unset" if v is None else str(v) for v in values]) for k, values in cmp.setting_diffs]
    out.append("<div id='settings'><h3>Balanced picks: settings that differ</h3>"
               + (table(["setting", *cmp.names], rows) if rows else "<p>The balanced picks use the same settings "
                  "(or a study has no feasible trial).</p>") + "</div>")
    rows = []
    for c, picks in cmp.best.items():
        for n, s in zip(cmp.names, picks):
            vals = [(cell(o, s, j), s["values"][j]) for j, o in enumerate(names)] if s else ["-"] * len(names)
            rows.append((c, n, s["trial"] if s else "-", s.get("n", 1) if s else "-", *vals,
                         s["prompt_buckets"] if s else "-", s["decode_buckets"] if s else "-"))
    out.append("<h3>Best trial per criterion</h3>"
               + table(["pick", "study", "trial", "boots", *[display.short(n) for n in names], "prompt buckets",
                        "decode buckets"], rows, cls="sortable")
               + "<p>boots: measurements of the pick's settings; measured more than once, a figure is their mean ± "
                 "half its 95% Student t-interval, and a regression says whether the intervals overlap.</p>"
               + "".join(f"<p>{esc(line)}</p>" for line in pick_noise(cmp)))
    return "".join(out) + "</section>"


def _pareto(cmp: Comparison) -> str:
    names = cmp.objective_names
    rows = [((display.seconds(b), b), *[("-", None) if x is None else (display.metric(names[0], x), x) for x in row])
            for b, row in cmp.at_budget]
    return ("<section id='pareto'><h2>The fronts</h2><div class='grid'>"
            + chart(charts.fronts(_points(cmp, 1, 0), display.short(names[1]), "output tok/s",
                                  f"Throughput vs {display.short(names[1])}"), "chart-compare-latency")
            + chart(charts.fronts(_points(cmp, 2, 0), "warmup (s)", "output tok/s", "Throughput vs warmup"),
                    "chart-compare-warmup")
            + "</div>" + chart(_fronts_3d(cmp), "chart-compare-3d")
            + "<h3 id='budgets'>Best throughput within a warmup budget</h3>"
            + table(["warmup budget", *cmp.names], rows) + "</section>")


def _picks(cmp: Comparison, data: list[ReportData]):
    return [(label, d, d.pick) for label, d in zip(cmp.names, data) if d.pick is not None]


def _warmup(cmp: Comparison, data: list[ReportData]) -> str:
    picks = _picks(cmp, data)
    out = ["<section id='warmup'><h2>Warmup of each balanced pick</h2>"]
    if not picks:
        return out[0] + "<p class='none'>No study has a feasible trial.</p></section>"
    by_trial = {id(t): d for _, d, t in picks}
    rows = warmup_rows([(t, d.log(t)) for _, d, t in picks], lambda t: stats(by_trial[id(t)], t))
    bars = {}
    for label, d, t in picks:
        if d.log(t) and d.log(t).phase_s:
            bars[f"{label} (trial {t.number})"] = d.log(t).phase_s
    out.append(table(["", *[f"{label}: trial {t.number}" for label, _, t in picks]], rows))
    if bars:
        out.append(chart(charts.warmup_phases(bars, PHASES), "chart-compare-warmup-phases"))
    return "".join(out) + "</section>"


def _workload(cmp: Comparison, data: list[ReportData]) -> str:
    rows = []
    for label, d, t in _picks(cmp, data):
        pad = d.padding(t)
        recompiling = sum(1 for x in d.measured() if d.record(x).observed.get("not_warmed_up"))
        preempting = sum(1 for x in d.measured() if d.record(x).observed.get("preemptions"))
        rows.append([f"{label}: trial {t.number}",
                     "-" if pad is None or pad.prompt_waste is None else f"{100 * pad.prompt_waste:.1f}%",
                     "-" if pad is None or pad.decode_waste is None else f"{100 * pad.decode_waste:.1f}%",
                     recompiling, preempting])
    return ("<section id='workload'><h2>Padding and runtime recompiles</h2><p>Padding of each balanced pick on "
            "its own study's workload (estimated per sequence, as in report.html); trials of each study that met "
            "a shape not warmed up, or preempted a request, under load.</p>"
            + table(["balanced pick", "prompt padding", "decode padding", "trials with recompiles",
                     "trials with preemptions"], rows) + "</section>")


def _failures(cmp: Comparison, data: list[ReportData]) -> str:
    counts = []
    for d in data:
        c: Counter = Counter()
        for t in d.trials:
            if t.state not in (TrialState.COMPLETE, TrialState.FAIL):
                continue
            rec = d.record(t)
            status = rec.status_text
            if status != "ok":
                c[status] += 1
            elif not rec.feasible:
                c["outside a limit (measured)"] += 1
        counts.append(c)
    classes = sorted(set().union(*counts))
    rows = [(cls, *[c.get(cls, 0) for c in counts]) for cls in classes]
    return ("<section id='failures'><h2>Failures and rejections per study</h2>"
            + (table(["class", *cmp.names], rows) if rows else "<p>No trial of any study failed.</p>")
            + "<p>Each study's report.html lists every failure with its reason and log excerpt.</p></section>")


def _trials(cmp: Comparison, data: list[ReportData]) -> str:
    names = cmp.objective_names
    rows = []
    for label, d in zip(cmp.names, data):
        for t in d.trials:  # in number order
            rec = d.record(t)
            ok = rec.ok and t.values
            values = ([(display.metric(n, v), v) for n, v in zip(names, t.values)] if ok
                      else [("-", None)] * len(names))
            hours = accelerator_hours(rec, d.backend)
            rows.append((label, t.number, rec.status_text, "yes" if rec.feasible else "no", *values,
                         (f"{hours:.3f}", hours), settings_text(t)))
    return ("<section id='trials'><h2>All trials</h2><p>Click a header to sort.</p>"
            + table(["study", "trial", "status", "feasible", *[display.short(n) for n in names], "acc-hours",
                     "settings"], rows, cls="sortable", table_id="trials-table") + "</section>")


def write_compare_html(cmp: Comparison, studies: list[optuna.Study], path: Path) -> Path:
    data = [gather(s) for s in studies]
    body = [_summary(cmp), _pareto(cmp), _warmup(cmp, data), _workload(cmp, data), _failures(cmp, data),
            "<section id='convergence'><h2>What each study cost</h2>"
            + chart(_convergence_chart(cmp, data), "chart-compare-convergence") + "</section>",
            _trials(cmp, data)]
    intro = ("<p>" + ", ".join(f"<b>{esc(n)}</b> ({esc(r or 'no release')})" for n, r in zip(cmp.names, cmp.releases))
             + ". Hypervolumes are taken on one common reference point, worse than every front point.</p>")
    titles = dict(TITLES, summary="Coverage and regressions", pareto="Fronts")
    return write_text(path, page("bucket-tuner: " + " vs ".join(cmp.names), intro, body, COMPARE_IDS, titles))
