"""`bench --plot-timeline` and `--plot-dataset-stats`: vllm bench serve 0.32's two figures, drawn with plotly.

The timeline shows each request on its own row: its time to first token, then every inter-token gap
coloured by `--timeline-itl-thresholds` (ms; vLLM's default 25,50: below, between, above), so a stall
that hits many streams at once is a vertical band. vLLM writes it next to the result file as
`<name>.timeline.html`; so do we. The dataset statistics are the prompt, output and total token
counts per request: vLLM draws them with matplotlib into `<name>.dataset_stats.png`; this project has
no matplotlib, so the same four panels go to `<name>.dataset_stats.html`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = ("#109618", "#FF7F0E", "#D62728")  # vLLM's: green, orange, red
TTFT_COLOUR = "#636EFA"


def parse_thresholds(text: str) -> tuple[float, float]:
    """`--timeline-itl-thresholds`: two increasing milliseconds, "25,50"."""
    try:
        low, high = (float(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--timeline-itl-thresholds expects two numbers of ms like 25,50, got {text!r}") from None
    if not 0 <= low < high:
        raise ValueError(f"--timeline-itl-thresholds must be two increasing ms values, got {text!r}")
    return low, high


def itl_labels(thresholds_ms: tuple[float, float]) -> tuple[str, str, str]:
    low, high = thresholds_ms
    return (f"ITL < {low:.0f}ms", f"{low:.0f}ms ≤ ITL < {high:.0f}ms", f"ITL ≥ {high:.0f}ms")


def timeline_segments(data: dict[str, Any], thresholds_ms: tuple[float, float]) -> dict[str, list[tuple]]:
    """Per legend label, the (request row, start s, length s) of each bar: TTFT, then each gap by its class.
    Times are from the first request's start; failed requests have no bars."""
    starts, ttfts, itls = data.get("start_times") or [], data.get("ttfts") or [], data.get("itls") or []
    labels = itl_labels(thresholds_ms)
    out: dict[str, list[tuple]] = {"TTFT": [], **{label: [] for label in labels}}
    timed = [s for s, t in zip(starts, ttfts) if s is not None and t]
    if not timed:
        return out
    t0 = min(timed)
    low, high = (x / 1000 for x in thresholds_ms)
    for row, (start, ttft, gaps) in enumerate(zip(starts, ttfts, itls)):
        if start is None or not ttft:
            continue
        at = start - t0
        out["TTFT"].append((row, at, ttft))
        at += ttft
        for gap in gaps or ():
            out[labels[0] if gap < low else labels[1] if gap < high else labels[2]].append((row, at, gap))
            at += gap
    return out


def write_timeline(data: dict[str, Any], path: Path, thresholds_ms: tuple[float, float]) -> Path:
    import plotly.graph_objects as go

    fig = go.Figure()
    colours = {"TTFT": TTFT_COLOUR, **dict(zip(itl_labels(thresholds_ms), COLOURS))}
    for label, bars in timeline_segments(data, thresholds_ms).items():
        if bars:
            rows, base, length = zip(*bars)
            fig.add_bar(y=rows, x=length, base=base, orientation="h", name=label, marker_color=colours[label],
                        hovertemplate="request %{y}<br>from %{base:.3f} s for %{x:.4f} s<extra>" + label + "</extra>")
    fig.update_layout(title="Request timeline (time to first token, then each inter-token gap)", barmode="overlay",
                      xaxis_title="seconds from the first request's start", yaxis_title="request",
                      yaxis_autorange="reversed", bargap=0.1)
    fig.write_html(path, include_plotlyjs=True)  # self-contained: a Gaudi node may have no network
    return path


def write_dataset_stats(data: dict[str, Any], path: Path) -> Path:
    from plotly.subplots import make_subplots

    prompt = list(data.get("input_lens") or [])
    output = list(data.get("output_lens") or [])
    total = [p + o for p, o in zip(prompt, output)]
    fig = make_subplots(rows=2, cols=2, subplot_titles=("Prompt tokens", "Output tokens", "Prompt + output tokens",
                                                        "Tokens per request"))
    fig.add_histogram(x=prompt, row=1, col=1, name="prompt", showlegend=False)
    fig.add_histogram(x=output, row=1, col=2, name="output", showlegend=False)
    fig.add_histogram(x=total, row=2, col=1, name="total", showlegend=False)
    fig.add_bar(x=list(range(len(prompt))), y=prompt, row=2, col=2, name="prompt")
    fig.add_bar(x=list(range(len(output))), y=output, row=2, col=2, name="output")
    fig.update_layout(barmode="stack", title="Dataset statistics")
    fig.write_html(path, include_plotlyjs=True)  # self-contained: a Gaudi node may have no network
    return path
