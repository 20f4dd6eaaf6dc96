"""How one load test is run: concurrency, arrivals, the unmeasured warm pass, the figures it reports
(the options of vLLM's `vllm bench serve` that the tuner sets per study)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class LoadOptions:
    max_concurrency: int | None = 16
    request_rate: float = math.inf
    burstiness: float = 1.0
    warmup_requests: int = 8  # the unmeasured warm pass
    goodput_slos: dict[str, float] | None = None
    percentiles: tuple[float, ...] = (50, 90, 99)
    request_timeout_s: float = 600.0
    percentile_metrics: tuple[str, ...] | None = None  # vllm bench serve's --percentile-metrics (None: all)
