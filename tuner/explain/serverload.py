"""A live server's load, read off its Prometheus `/metrics` (vLLM's own names, v0 and v1 engines alike).

    parse_metrics   Prometheus text -> (name, labels, value) rows
    Sample          one reading: running and waiting requests, KV-cache usage, the counters
    sample_server   readings every `interval_s` for `window_s` seconds (the doctor's window)
    Window          what the window shows: per-sample series and the counters' increase over it

Names (vLLM 0.32 v1/metrics/loggers.py; the simulator serves the same, tuner/sim/http.py):
vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc (v0: gpu_cache_usage_perc;
a fraction, not a percentage), the counters vllm:num_preemptions_total, vllm:prompt_tokens_total,
vllm:generation_tokens_total, vllm:request_success_total, the histograms vllm:iteration_tokens_total (tokens
per engine step, v1), vllm:request_prompt_tokens and vllm:request_generation_tokens (per finished request),
and the info gauge vllm:cache_config_info (its num_gpu_blocks label).
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # v1, then v0's name
COUNTERS = {"preemptions": "vllm:num_preemptions_total", "prompt_tokens": "vllm:prompt_tokens_total",
            "generation_tokens": "vllm:generation_tokens_total", "requests": "vllm:request_success_total",
            "step_tokens": "vllm:iteration_tokens_total_sum", "steps": "vllm:iteration_tokens_total_count",
            # per finished request (histograms): the traffic's lengths, exact where the totals above are cut
            # by the window's edges
            "request_prompt_tokens": "vllm:request_prompt_tokens_sum",
            "request_generation_tokens": "vllm:request_generation_tokens_sum",
            "finished": "vllm:request_generation_tokens_count"}
CACHE_INFO = "vllm:cache_config_info"
_ROW = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(RuntimeError):
    """The server's /metrics cannot be read, or is not vLLM's; the message says which and why."""


def parse_metrics(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Prometheus exposition text -> (name, labels, value); comments and unreadable lines are skipped."""
    rows = []
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if not m or line.startswith("#"):
            continue
        try:
            value = float(m[4])
        except ValueError:
            continue
        rows.append((m[1], dict(_LABEL.findall(m[3] or "")), value))
    return rows


@dataclass
class Sample:
    t: float  # seconds since the first reading
    running: float
    waiting: float
    kv_usage: float | None  # 0..1, the fullest engine's
    counters: dict[str, float] = field(default_factory=dict)  # summed over engines and labels
    kv_blocks: int | None = None  # cache_config_info num_gpu_blocks (v1), summed over engines


def read_sample(text: str, t: float) -> Sample:
    rows = parse_metrics(text)
    names = {name for name, _, _ in rows}
    if RUNNING not in names:
        raise MetricsError(f"no {RUNNING} in it: not a vLLM server's /metrics")

    def total(name: str) -> float:
        return sum(v for n, _, v in rows if n == name)

    kv = [v for n, _, v in rows if n in KV_USAGE]
    blocks = [int(lab["num_gpu_blocks"]) for n, lab, _ in rows
              if n == CACHE_INFO and lab.get("num_gpu_blocks", "").isdigit()]
    counters = {key: total(name) for key, name in COUNTERS.items() if name in names}
    return Sample(t, total(RUNNING), total(WAITING), max(kv) if kv else None, counters,
                  sum(blocks) if blocks else None)


def fetch_metrics(url: str, timeout: float = 10.0) -> str:
    """GET {url}/metrics as text; a MetricsError names the URL and what went wrong."""
    where = url.rstrip("/") + "/metrics"
    try:
        with urllib.request.urlopen(where, timeout=timeout) as resp:
            return resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        raise MetricsError(f"{where} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MetricsError(f"cannot read {where}: {reason}") from None


def sample_server(url: str, window_s: float, interval_s: float, *, clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep) -> list[Sample]:
    """Readings from the first at 0 s to the last at or after `window_s`, every `interval_s`."""
    start = clock()
    samples = []
    while True:
        samples.append(read_sample(fetch_metrics(url), clock() - start))
        if samples[-1].t >= window_s:
            return samples
        sleep(max(0.0, min(interval_s, window_s - (clock() - start))))


@dataclass
class Window:
    """What a window of samples shows."""

    samples: list[Sample]

    @property
    def seconds(self) -> float:
        return self.samples[-1].t - self.samples[0].t

    def increase(self, key: str) -> float | None:
        """A counter's increase over the window (None when the server does not count it; a restart
        that reset it is read as what was counted since)."""
        first, last = self.samples[0].counters.get(key), self.samples[-1].counters.get(key)
        if first is None or last is None:
            return None
        return last - first if last >= first else last

    def rate(self, key: str) -> float | None:
        inc = self.increase(key)
        return inc / self.seconds if inc is not None and self.seconds > 0 else None

    def share(self, test: Callable[[Sample], bool]) -> float:
        return sum(1 for s in self.samples if test(s)) / len(self.samples)

    def mean(self, get: Callable[[Sample], float | None]) -> float | None:
        values = [v for s in self.samples if (v := get(s)) is not None]
        return sum(values) / len(values) if values else None

    @property
    def kv_blocks(self) -> int | None:
        return self.samples[-1].kv_blocks
