"""The report's plotly figures. Colours are categorical with the legend above the plot area, so no
colour bar and nothing overlaps; every point's hover names its trial and settings."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..vocabulary.display import short

CLASS_STYLE = {  # trial class -> (colour, marker symbol)
    "Pareto front": ("#d62728", "star"),
    "feasible": ("#1f77b4", "circle"),
    "infeasible": ("#ff7f0e", "diamond-open"),
    "failed": ("#7f7f7f", "x"),
}
SERIES = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def layout(fig: go.Figure, title: str, x: str | None = None, y: str | None = None, height: int = 420) -> go.Figure:
    fig.update_layout(title={"text": title, "x": 0, "xanchor": "left"}, height=height, template="plotly_white",
                      margin={"l": 60, "r": 20, "t": 80, "b": 50},
                      legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom"})
    if x:
        fig.update_xaxes(title_text=x)
    if y:
        fig.update_yaxes(title_text=y)
    return fig


PICK_STYLE = {"color": "#111", "symbol": "circle-open", "size": 22, "line": {"width": 3}}


def pick_label(number: int) -> str:
    return f"the pick (trial {number})"


def scatter_2d(points: dict[str, list[dict]], x: str, y: str, title: str, pick: dict | None = None) -> go.Figure:
    """points: class -> [{"x", "y", "text"}]; pick: the deployed trial's point ({"x", "y", "text", "trial"}),
    ringed and labelled on the plot."""
    fig = go.Figure()
    for cls, rows in points.items():
        if not rows:
            continue
        colour, symbol = CLASS_STYLE.get(cls, ("#333", "circle"))
        fig.add_trace(go.Scatter(x=[r["x"] for r in rows], y=[r["y"] for r in rows], mode="markers", name=cls,
                                 marker={"color": colour, "symbol": symbol, "size": 11 if cls == "Pareto front" else 8},
                                 text=[r["text"] for r in rows], hovertemplate="%{text}<extra></extra>"))
    if pick is not None:
        fig.add_trace(go.Scatter(x=[pick["x"]], y=[pick["y"]], mode="markers+text", name=pick_label(pick["trial"]),
                                 marker=PICK_STYLE, text=[f"pick: trial {pick['trial']}"], textposition="top center",
                                 hovertext=[pick["text"]], hovertemplate="%{hovertext}<extra></extra>"))
    return layout(fig, title, x, y)


def scatter_3d(points: dict[str, list[dict]], names: Sequence[str], pick: dict | None = None) -> go.Figure:
    fig = go.Figure()
    for cls, rows in points.items():
        if not rows:
            continue
        colour, _ = CLASS_STYLE.get(cls, ("#333", "circle"))
        fig.add_trace(go.Scatter3d(x=[r["v"][1] for r in rows], y=[r["v"][2] for r in rows],
                                   z=[r["v"][0] for r in rows], mode="markers", name=cls,
                                   marker={"color": colour, "size": 6 if cls == "Pareto front" else 4},
                                   text=[r["text"] for r in rows], hovertemplate="%{text}<extra></extra>"))
    if pick is not None:
        v = pick["v"]
        fig.add_trace(go.Scatter3d(x=[v[1]], y=[v[2]], z=[v[0]], mode="markers+text", name=pick_label(pick["trial"]),
                                   marker={"color": "#111", "symbol": "diamond-open", "size": 10},
                                   text=[f"pick: trial {pick['trial']}"], hovertext=[pick["text"]],
                                   hovertemplate="%{hovertext}<extra></extra>"))
    # the whole cube in view: a camera a little further out, and no margin the scene cannot use
    fig.update_layout(scene={"xaxis_title": short(names[1]), "yaxis_title": short(names[2]),
                             "zaxis_title": short(names[0]), "camera": {"eye": {"x": 1.7, "y": 1.7, "z": 1.1}}})
    layout(fig, "The front in 3-D (drag to turn)", height=560)
    fig.update_layout(margin={"l": 0, "r": 0, "t": 90, "b": 0})
    return fig


def warmup_phases(rows: dict[str, dict[str, float]], phases: Sequence[str]) -> go.Figure:
    """rows: trial label -> phase -> seconds; one stacked bar per trial."""
    fig = go.Figure()
    labels = list(rows)
    for i, phase in enumerate(phases):
        fig.add_trace(go.Bar(y=labels, x=[rows[k].get(phase, 0.0) for k in labels], name=phase, orientation="h",
                             marker_color=SERIES[i % len(SERIES)],
                             hovertemplate=f"{phase}: %{{x:.0f}} s<extra>%{{y}}</extra>"))
    fig.update_layout(barmode="stack")
    return layout(fig, "Startup time per phase (from the server log)", "seconds", None, height=300)


def histogram(values: Sequence[float], edges: Sequence[float], title: str, x: str, edge_label: str) -> go.Figure:
    lo_all = min(list(values) + list(edges[:1]) or [0])
    hi_all = max(list(values) or list(edges[-1:]) or [1])
    size = max(8.0, (hi_all - lo_all) / 40)  # one bin is visible even when every request has one length
    fig = go.Figure(go.Histogram(x=list(values), name="requests", marker_color="#1f77b4",
                                 xbins={"start": lo_all - size / 2, "end": hi_all + size, "size": size},
                                 hovertemplate="%{x}: %{y} requests<extra></extra>"))
    # bucket boundaries as a line trace (it shows in the legend, unlike layout shapes)
    top = 1
    xs, ys = [], []
    for e in edges:
        xs += [e, e, None]
        ys += [0, top, None]
    if edges:
        fig.add_trace(go.Scatter(x=xs, y=ys, yaxis="y2", mode="lines", name=edge_label,
                                 line={"color": "#d62728", "dash": "dot", "width": 1}, hoverinfo="skip"))
        fig.update_layout(yaxis2={"overlaying": "y", "range": [0, 1], "visible": False})
        lo, hi = min(list(values) + [edges[0]]), max(values) if values else edges[-1]
        span = max(hi - lo, 1)
        fig.update_xaxes(range=[max(0, lo - 0.15 * span), hi + 0.6 * span])
    return layout(fig, title, x, "requests", height=340)


def convergence(xs: Sequence[float], share: Sequence[float], title: str, x: str, hover: Sequence[str],
                pick: tuple[float, float, int] | None = None) -> go.Figure:
    """pick: (x, share, trial) of the deployed trial, ringed on the curve."""
    fig = go.Figure(go.Scatter(x=list(xs), y=[100 * s for s in share], mode="lines+markers", line_shape="hv",
                               name="hypervolume", text=list(hover),
                               hovertemplate="%{text}: %{y:.0f}% of the final front<extra></extra>"))
    if pick is not None:
        fig.add_trace(go.Scatter(x=[pick[0]], y=[100 * pick[1]], mode="markers+text", name=pick_label(pick[2]),
                                 marker=PICK_STYLE, text=[f"pick: trial {pick[2]}"], textposition="bottom center",
                                 hoverinfo="skip"))
    fig.update_yaxes(range=[0, 105])
    return layout(fig, title, x, "hypervolume (% of final)", height=320)


def importances(rows: list[dict]) -> go.Figure:
    fig = go.Figure()
    objectives = list(dict.fromkeys(r["objective"] for r in rows))
    for i, obj in enumerate(objectives):
        sel = [r for r in rows if r["objective"] == obj]
        fig.add_trace(go.Bar(x=[r["importance"] for r in sel], y=[r["parameter"] for r in sel], orientation="h",
                             name=short(obj), marker_color=SERIES[i % len(SERIES)]))
    fig.update_layout(barmode="group")
    return layout(fig, "Which settings mattered (Optuna's parameter importances)", "importance", None,
                   height=120 + 40 * len({r["parameter"] for r in rows}))


def fronts(studies: dict[str, list[dict]], x: str, y: str, title: str) -> go.Figure:
    """Several studies' fronts on one plot: study -> [{"x", "y", "text"}]."""
    fig = go.Figure()
    for i, (name, rows) in enumerate(studies.items()):
        fig.add_trace(go.Scatter(x=[r["x"] for r in rows], y=[r["y"] for r in rows], mode="markers", name=name,
                                 marker={"color": SERIES[i % len(SERIES)], "size": 9},
                                 text=[r["text"] for r in rows], hovertemplate="%{text}<extra></extra>"))
    return layout(fig, title, x, y)
