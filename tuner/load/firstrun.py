"""The first requests after ready, apart from the rest: the first-run penalty of one load test.

A server that reports ready is not always warm: shapes compiled but never executed pay a first replay,
shapes the warm-up missed compile (vllm-gaudi #1188: first-run P95 TTFT ~2,400 ms against ~600 ms once
warm; #1602: 222 against 256 tok/s on the first benchmark run after warm-up). Both compare a first run
with the same run repeated; so does this, in small (docs/load-metrics.md section 4):

* the first window: the warm pass, the first requests the server serves after ready (`tune` sends one
  wave of the load, --max-concurrency requests, all at once);
* the warm reference: as many requests at the start of the measured run, in the order they were sent:
  the same lengths (the warm pass cycles the workload's lengths from its first request) on a server the
  window has just warmed;
* for each: TTFT mean / median / percentiles of its successful requests (each from its own start), and
  output throughput = its output tokens over its span (its first send to its last token);
* the penalty: first / warm, of the highest percentile asked for and of the median TTFT, and of the
  throughput (below 1: the first run served less).

Keys: `first_<stat>_ttft_ms`, `warm_<stat>_ttft_ms`, `first_output_throughput`, `warm_output_throughput`,
`first_requests`, `warm_requests`; `--slo first_p99_ttft_ms=MS` limits `first_p99_ttft_ms`. No warm pass
(--num-warmups 0): no window, and no figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .metrics import RequestOutcome, percentile_key, summary_stats

FIRST, WARM = "first_", "warm_"
PREFIXES = (FIRST, WARM)  # the keys a trial's metrics get (tuner/trial/run.py record_first_run)


def warm_reference(window: Sequence[RequestOutcome], measured: Sequence[RequestOutcome]) -> list[RequestOutcome]:
    """The measured run's first len(window) requests, in the order they were sent."""
    sent = sorted((o for o in measured if o.sent), key=lambda o: o.arrival_time)
    return sent[:len(window)]


def _throughput(outs: Sequence[RequestOutcome]) -> float | None:
    ok = [o for o in outs if o.success]
    if not ok:
        return None
    start = min(o.arrival_time for o in outs)
    end = max(o.start_time + o.latency for o in ok)
    return sum(o.output_tokens for o in ok) / (end - start) if end > start else None


def _set_figures(prefix: str, outs: Sequence[RequestOutcome], percentiles: Sequence[float]) -> dict[str, Any]:
    ok = [o for o in outs if o.success]
    out: dict[str, Any] = {f"{prefix}requests": len(outs), f"{prefix}failed": len(outs) - len(ok)}
    if ok:
        stats = summary_stats("ttft", [o.ttft for o in ok], percentiles)
        out.update({prefix + k: v for k, v in stats.items() if not k.startswith("std_")})
    out[f"{prefix}output_throughput"] = _throughput(outs)
    return out


def first_run_figures(warm_pass: Sequence[RequestOutcome], measured: Sequence[RequestOutcome],
                      percentiles: Sequence[float]) -> dict[str, Any]:
    """The first window's and the warm reference's figures and the penalties (first / warm); {} without
    a warm pass. In the client's (wall) time: tuner/load/metrics.py rescale_time converts them."""
    window = [o for o in warm_pass if o.sent]
    if not window:
        return {}
    reference = warm_reference(window, measured)
    out: dict[str, Any] = {"window": len(window)}
    out.update(_set_figures(FIRST, window, percentiles))
    out.update(_set_figures(WARM, reference, percentiles))
    ok = [o for o in window if o.success]
    # when the window's last request ended (time.perf_counter): which server log events fell in it
    out["window_end_perf_counter"] = max((o.start_time + o.latency for o in ok), default=None)
    tail = f"p{percentile_key(max(percentiles))}" if percentiles else "median"
    out["tail"] = tail  # the percentile the tail penalty compares
    for key, name in ((f"{tail}_ttft_ms", "penalty_tail_ttft"), ("median_ttft_ms", "penalty_median_ttft"),
                      ("output_throughput", "penalty_output_throughput")):
        a, b = out.get(FIRST + key), out.get(WARM + key)
        out[name] = a / b if a is not None and b else None
    return out
