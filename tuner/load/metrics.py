"""Per-request records and the aggregate metrics of a load run, pinned to ``vllm bench serve``.

Formulas and JSON field names: docs/load-metrics.md section 1 (checked against
vllm/benchmarks/serve.py). Aggregates are over successful requests only; mean, median and
population std with numpy, numpy's default (linear) percentiles, all in ms.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from .sse import ERROR_EXCERPT, StreamRecorder

GOODPUT_KEYS = ("ttft", "tpot", "e2el")
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")
QUEUE_METRICS = ("client_queue_time", "e2el_including_client_queue")  # vLLM: only under --max-concurrency
VLLM_DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")  # vllm bench serve, generative models
_DIGITS = re.compile(r"\d+")
# Ids a server or client puts in a message (a completion's "cmpl-3fa9...", a request's "bench-1a2b3c4d-7",
# a bare uuid): one failure repeated over requests differs only by them, so they are taken out.
_IDS = re.compile(r"\b((?:chatcmpl|cmpl|chat|req|request|bench|run)-)[0-9A-Za-z_-]*\d[0-9A-Za-z_-]*"
                  r"|\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
                  r"|\b(?=[0-9a-f]*\d)[0-9a-f]{16,}\b")


def without_ids(text: str) -> str:
    """The message with request and completion ids replaced by "<id>" (their prefix kept)."""
    return _IDS.sub(lambda m: (m.group(1) or "") + "<id>", text)


# ---- Per-request record


@dataclass
class RequestOutcome:
    index: int
    prompt_len: int              # usage.prompt_tokens when sent, else the prompt we sent
    expected_output_len: int     # max_tokens we asked for
    scheduled_offset: float = 0.0  # planned send time, s after the run started
    sent: bool = False
    dispatch_offset: float = 0.0   # actual dispatch time, s after the run started
    arrival_time: float = 0.0    # perf_counter when dispatched (before the concurrency wait)
    start_time: float = 0.0      # perf_counter just before the POST
    client_queue_time: float = 0.0
    success: bool = False
    http_status: int | None = None
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    output_tokens: int = 0
    output_tokens_source: str = ""   # "usage" | "chunks"
    chunks: int = 0
    done_received: bool = False
    generated_text: str = ""
    error: str = ""
    failure_reason: str = ""         # short category for the summary
    stream_errors: list[str] = field(default_factory=list)
    inputs: int = 1                  # a pooling request's inputs (vLLM's num_input_sequences)

    def fail(self, reason: str, message: str) -> None:
        self.success, self.failure_reason, self.error = False, reason, message

    def absorb(self, rec: StreamRecorder) -> None:
        self.itl, self.chunks, self.done_received = rec.itl, rec.chunks, rec.done
        self.generated_text = "".join(rec.text)
        self.stream_errors = rec.stream_errors
        self.ttft = rec.ttft or 0.0
        self.latency = rec.last_token_ts - rec.start
        usage = rec.usage or {}
        if usage.get("completion_tokens"):
            self.output_tokens, self.output_tokens_source = int(usage["completion_tokens"]), "usage"
        else:
            self.output_tokens, self.output_tokens_source = rec.chunks, "chunks"
        if usage.get("prompt_tokens") is not None:
            self.prompt_len = int(usage["prompt_tokens"])


# ---- Metrics (pure functions over outcomes)


def percentile_key(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def summary_stats(name: str, values_s: Sequence[float], percentiles: Iterable[float]) -> dict[str, float]:
    """vLLM's ``mean_/median_/std_/p<P>_<name>_ms`` from values in seconds (empty -> 0)."""
    v = list(values_s) or 0
    out = {f"mean_{name}_ms": float(np.mean(v) * 1000),
           f"median_{name}_ms": float(np.median(v) * 1000),
           f"std_{name}_ms": float(np.std(v) * 1000)}
    for p in percentiles:
        out[f"p{percentile_key(p)}_{name}_ms"] = float(np.percentile(v, p) * 1000)
    return out


def validate_goodput_slos(slos: Mapping[str, float] | None) -> dict[str, float]:
    slos = dict(slos or {})
    for k, v in slos.items():
        if k not in GOODPUT_KEYS:
            raise ValueError(f"goodput SLO key {k!r} is not one of {GOODPUT_KEYS}")
        if not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"goodput SLO {k} must be a non-negative number of ms, got {v!r}")
    return {k: float(v) for k, v in slos.items()}


def peak_output_and_concurrency(outcomes: Sequence[RequestOutcome]) -> tuple[float, int]:
    """``max_output_tokens_per_s`` (vLLM 0.32.0) and ``max_concurrent_requests`` (vLLM main, after 0.32.0).

    The first counts *chunk* arrivals (start + ttft + cumulative ITL, exactly as vLLM rebuilds
    them) in 1-second buckets from the earliest successful start, so with several tokens per chunk
    it is a chunk rate, as in vLLM. The second is the exact peak of a sweep over the half-open
    [start, start+latency) intervals, departures sorted before arrivals at ties, as newer vLLM
    computes it. vLLM 0.32.0 instead took the maximum over 1-second buckets of the requests active
    in any part of each bucket, an upper bound that grows with the bucket (under a time-compressed
    server a wall second holds many server seconds); :func:`peak_concurrency_1s_buckets` gives
    that figure, reported as ``tuner_max_concurrent_requests_vllm_0_32``.
    """
    ok = [o for o in outcomes if o.success]
    if not ok:
        return 0.0, 0
    t0 = min(o.start_time for o in ok)
    t_end = max(o.start_time + o.latency for o in ok)
    n_buckets = int(np.ceil(t_end - t0)) + 1
    per_s = np.zeros(n_buckets)
    for o in ok:
        t = o.start_time + o.ttft
        b = int(t - t0)
        if 0 <= b < n_buckets:
            per_s[b] += 1
        for gap in o.itl:
            t += gap
            b = int(t - t0)
            if 0 <= b < n_buckets:
                per_s[b] += 1
    events = sorted([(o.start_time, 1) for o in ok] + [(o.start_time + o.latency, -1) for o in ok])
    cur = peak = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return float(per_s.max()), peak


def peak_concurrency_1s_buckets(outcomes: Sequence[RequestOutcome]) -> int:
    """vLLM 0.32.0's ``max_concurrent_requests``: per 1-second bucket, the requests active in it."""
    ok = [o for o in outcomes if o.success]
    if not ok:
        return 0
    t0 = min(o.start_time for o in ok)
    n = int(np.ceil(max(o.start_time + o.latency for o in ok) - t0)) + 1
    conc = np.zeros(n)
    for o in ok:
        conc[int(o.start_time - t0): int(o.start_time + o.latency - t0) + 1] += 1
    return int(conc.max())


def _per_second(count: float, duration: float) -> float:
    return count / duration if duration > 0 else 0.0  # a run cancelled before it began has no duration


def compute_metrics(outcomes: Sequence[RequestOutcome], duration: float,
                    percentiles: Sequence[float] = (50, 90, 99),
                    goodput_slos: Mapping[str, float] | None = None, *, time_scale: float = 1.0,
                    percentile_metrics: Sequence[str] = PERCENTILE_METRICS) -> dict[str, Any]:
    """The aggregate fields of vLLM's result JSON, computed as ``calculate_metrics`` does.

    ``time_scale`` < 1: the server runs time-compressed and ``outcomes`` hold wall times, while SLOs
    are in the server's time; a request is good when its wall latency <= SLO x time_scale.
    Only ``percentile_metrics`` get their mean/median/std/pNN fields (vLLM's --percentile-metrics).
    """
    slos = validate_goodput_slos(goodput_slos)
    if not 0 < time_scale <= 1:
        raise ValueError(f"time_scale must be in (0, 1], got {time_scale}")
    unknown = [m for m in percentile_metrics if m not in PERCENTILE_METRICS + QUEUE_METRICS]
    if unknown:
        raise ValueError(f"percentile metric {unknown[0]!r} is not one of "
                         f"{','.join(PERCENTILE_METRICS + QUEUE_METRICS)}")
    ok = [o for o in outcomes if o.success]
    ttfts = [o.ttft for o in ok]
    e2els = [o.latency for o in ok]
    itls = [g for o in ok for g in o.itl]
    tpots = [(o.latency - o.ttft) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1]
    # For goodput a request with <= 1 output token has TPOT 0 (vLLM's all_tpots).
    all_tpots = [(o.latency - o.ttft) / (o.output_tokens - 1) if o.output_tokens > 1 else 0.0 for o in ok]
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(o.output_tokens for o in ok)
    good = 0
    if slos:
        per_metric = {"ttft": ttfts, "tpot": all_tpots, "e2el": e2els}
        for i in range(len(ok)):
            if all(per_metric[k][i] <= slo_ms / 1000 * time_scale for k, slo_ms in slos.items()):
                good += 1
    peak_tok, peak_conc = peak_output_and_concurrency(outcomes)

    def per_s(x: float) -> float:
        return _per_second(x, duration)

    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(ok)),
        "request_goodput": per_s(good) if slos else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": peak_tok,
        "max_concurrent_requests": peak_conc,
        "rtfx": 0.0,
    }
    for name, vals in (("ttft", ttfts), ("tpot", tpots), ("itl", itls), ("e2el", e2els)):
        if name in percentile_metrics:
            out.update(summary_stats(name, vals, percentiles))
    return out


def compute_pooling_metrics(outcomes: Sequence[RequestOutcome], duration: float,
                            percentiles: Sequence[float] = (50, 90, 99),
                            percentile_metrics: Sequence[str] = ("e2el",)) -> dict[str, Any]:
    """vLLM's ``calculate_metrics_for_embeddings`` (pooling backends): inputs and tokens a second, and end-to-end
    latency, the only time a pooling answer has (its TTFT, TPOT and ITL are not figures)."""
    ok = [o for o in outcomes if o.success]
    total_in = sum(o.prompt_len for o in ok)
    inputs = sum(o.inputs for o in ok)

    def per_s(x: float) -> float:
        return _per_second(x, duration)

    out: dict[str, Any] = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_in,
        "total_input_sequences": inputs,
        "request_throughput": per_s(len(ok)),
        "input_sequence_throughput": per_s(inputs),
        "total_token_throughput": per_s(total_in),
    }
    if "e2el" in percentile_metrics:
        out.update(summary_stats("e2el", [o.latency for o in ok], percentiles))
    return out


# ---- Result


@dataclass
class BenchmarkResult:
    model: str
    endpoint: str
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    percentiles: tuple[float, ...]
    goodput_slos: dict[str, float]
    duration: float
    outcomes: list[RequestOutcome]
    metrics: dict[str, Any]
    workload: dict[str, Any]
    arrivals: dict[str, Any]
    warmup: dict[str, Any]
    cancelled: bool = False
    # the first requests after ready against the rest (tuner/load/firstrun.py first_run_figures)
    first_run: dict[str, Any] = field(default_factory=dict)
    run_info: dict[str, Any] = field(default_factory=dict)  # api, label, tokenizer_id, metadata, ...
    probes: dict[str, Any] = field(default_factory=dict)  # --probe-request-rate: probe_figures()
    percentile_metrics: tuple[str, ...] = PERCENTILE_METRICS + QUEUE_METRICS
    pooling: bool = False  # a pooling backend's run: vLLM's pooling result keys (no tokens generated)
    date: str = field(default_factory=lambda: datetime.now().strftime("%Y%m%d-%H%M%S"))

    def __getattr__(self, name: str) -> Any:  # result.output_throughput etc.
        metrics = self.__dict__.get("metrics") or {}
        if name in metrics:
            return metrics[name]
        raise AttributeError(name)

    def failure_summary(self) -> dict[str, Any]:
        """Failed requests counted by category and by the error text itself (the server's own
        message when it gave one), most frequent first."""
        failed = [o for o in self.outcomes if not o.success]
        examples: dict[str, list[str]] = defaultdict(list)
        for o in failed:
            if len(examples[o.failure_reason]) < 3:
                examples[o.failure_reason].append(o.error[:ERROR_EXCERPT])
        # Grouped with ids taken out and numbers masked: "Token id 7000 ..." and "Token id 7012 ..." are
        # one error, and so are two cut chunks that differ only by their completion's id.
        shown = [without_ids(o.error[:ERROR_EXCERPT]) for o in failed]
        by_message = Counter(_DIGITS.sub("N", m) for m in shown)
        first: dict[str, str] = {}
        for m in shown:
            first.setdefault(_DIGITS.sub("N", m), m)
        return {"count": len(failed), "by_reason": dict(Counter(o.failure_reason for o in failed)),
                "by_message": [{"message": first[m], "pattern": m, "count": n}
                               for m, n in by_message.most_common()],
                "examples": dict(examples)}

    def to_json(self, detailed: bool = True) -> dict[str, Any]:
        """A JSON-ready dict with ``vllm bench serve``'s field names, then our ``tuner_*`` keys.

        ``detailed=False`` drops the per-request arrays vLLM drops without ``--save-detailed``.
        """
        o = self.outcomes
        ok = [x for x in o if x.success]
        info = dict(self.run_info)
        metadata = info.pop("metadata", None) or {}
        ramp = info.pop("ramp_up", None) or {}
        api = info.pop("api", "openai")  # vLLM's result files call the API flavour "backend" and "endpoint_type"
        r: dict[str, Any] = {
            "date": self.date, "endpoint_type": api, "backend": api, "label": info.pop("label", None),
            "model_id": info.pop("model_id", self.model), "tokenizer_id": info.pop("tokenizer_id", None),
            "num_prompts": info.pop("num_prompts", len(o)),
        }
        r.update(metadata)  # top-level, as vLLM writes --metadata
        r.update({
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
        })
        r.update(ramp)
        m = dict(self.metrics)
        peak_keys = ("max_output_tokens_per_s", "max_concurrent_requests", "rtfx")
        peaks = {k: m.pop(k) for k in peak_keys if k in m}
        stats = {k: m.pop(k) for k in list(m) if k.endswith("_ms")}
        r.update(m)
        if self.pooling:  # vLLM's pooling result: no output, no stream
            r.update({"input_lens": [x.prompt_len for x in o], "latencies": [x.latency for x in o],
                      "queue_times": [x.client_queue_time for x in o], "errors": [x.error for x in o]})
        else:
            r.update({
                "input_lens": [x.prompt_len for x in o],
                "output_lens": [x.output_tokens if x.success else 0 for x in o],
                "ttfts": [x.ttft for x in o],
                "itls": [list(x.itl) for x in o],
                "latencies": [x.latency for x in o],
                "start_times": [x.start_time for x in o],
                "queue_times": [x.client_queue_time for x in o],
                "generated_texts": [x.generated_text for x in o],
                "errors": [x.error for x in o],
            })
        r.update(peaks)
        r.update(stats)
        r.update(self.probes)
        queue = [x.client_queue_time for x in ok]
        incl = [x.latency + x.client_queue_time for x in ok]
        # vLLM reports these two only under --max-concurrency (the second only with a finite rate).
        if self.max_concurrency is not None and "client_queue_time" in self.percentile_metrics:
            r.update(summary_stats("client_queue_time", queue, self.percentiles))
        if (self.max_concurrency is not None and not math.isinf(self.request_rate)
                and "e2el_including_client_queue" in self.percentile_metrics):
            r.update(summary_stats("e2el_including_client_queue", incl, self.percentiles))
        if not detailed:
            for k in ("input_lens", "output_lens", "start_times", "ttfts", "itls",
                      "generated_texts", "errors"):
                r.pop(k, None)
        lag = [x.dispatch_offset - x.scheduled_offset for x in o if x.sent]
        r.update({
            "tuner_metric_definitions": "vllm bench serve (vllm/benchmarks/serve.py); ITL per chunk; "
                                        "tokens from usage chunk; max_output_tokens_per_s counts chunks",
            "tuner_endpoint": self.endpoint,
            "tuner_workload": self.workload,
            "tuner_arrivals": self.arrivals,
            "tuner_goodput_slos_ms": self.goodput_slos or None,
            "tuner_percentiles": list(self.percentiles),
            "tuner_client_queue_time": summary_stats("client_queue_time", queue, self.percentiles),
            "tuner_e2el_including_client_queue": summary_stats("e2el_including_client_queue", incl,
                                                               self.percentiles),
            "tuner_send_lag": summary_stats("send_lag", lag, self.percentiles),
            "tuner_failures": self.failure_summary(),
            "tuner_warmup": self.warmup,
            "tuner_cancelled": self.cancelled,
        })
        if self.pooling:
            r["tuner_metric_definitions"] = ("vllm bench serve's pooling metrics (calculate_metrics_for_embeddings): "
                                             "latency = the whole answer read; input tokens from its usage")
            return r
        r.update({
            "tuner_max_concurrent_requests_vllm_0_32": peak_concurrency_1s_buckets(o),
            "tuner_peak_definitions": "max_output_tokens_per_s: vLLM 0.32.0 (1-second buckets of chunk "
                                      "arrivals); max_concurrent_requests: vLLM main after 0.32.0 (exact "
                                      "sweep line); tuner_max_concurrent_requests_vllm_0_32: 0.32.0's "
                                      "1-second buckets",
            "tuner_output_tokens_source": dict(Counter(x.output_tokens_source for x in ok)),
            "tuner_token_chunks": sum(x.chunks for x in ok),
            "tuner_streams_without_done": sum(1 for x in ok if not x.done_received),
            "tuner_stream_error_events": sum(len(x.stream_errors) for x in o),
            "tuner_first_run": self.first_run or None,
        })
        return r

    def dumps(self, detailed: bool = True, **kw: Any) -> str:
        return json.dumps(self.to_json(detailed), **kw)


# ---- Time-scaled servers

_RATE_FIELDS = ("request_throughput", "request_goodput", "input_sequence_throughput", "output_throughput",
                "total_token_throughput", "max_output_tokens_per_s", "first_output_throughput",
                "warm_output_throughput")
_SECONDS_LISTS = ("ttfts", "latencies", "start_times", "queue_times")


def probe_figures(probes: list[RequestOutcome]) -> dict[str, Any]:
    """vLLM 0.32's probe figures (--probe-request-rate): E2E latency of the probes that succeeded, in ms;
    none when no probe succeeded (vLLM then reports nothing of them either)."""
    lat = [o.latency for o in probes if o.success]
    if not lat:
        return {}
    return {"probe_completed": len(lat), "probe_failed": len(probes) - len(lat),
            "probe_median_e2el_ms": float(np.median(lat)) * 1000,
            "probe_p99_e2el_ms": float(np.percentile(lat, 99)) * 1000,
            "probe_max_e2el_ms": float(max(lat)) * 1000}


def rescale_time(bench: dict[str, Any], time_scale: float) -> dict[str, Any]:
    """Convert a result measured against a time-compressed server (a simulator started with a time
    scale) back to the server's own time: durations and latencies / scale, rates * scale.

    max_output_tokens_per_s was binned in 1-second wall windows, i.e. `scale` server seconds; its
    rescaled value is therefore a peak over longer windows (flatter) than on a real server.
    """
    if time_scale == 1.0:
        return bench

    def conv(key: str, value: Any) -> Any:
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, dict):
            return {k: conv(k, v) for k, v in value.items()}
        if not isinstance(value, (int, float, list)):
            return value
        if key.endswith("_ms") or key == "duration":
            return value / time_scale
        if key in _RATE_FIELDS:
            return value * time_scale
        if key in _SECONDS_LISTS:
            return [None if v is None else v / time_scale for v in value]
        if key == "itls":
            return [[g / time_scale for g in gaps] for gaps in value]
        return value

    out = {k: conv(k, v) for k, v in bench.items()}
    out["tuner_time_scale"] = time_scale
    return out
