"""How one load test is run: concurrency, arrivals, the unmeasured warm pass, the figures it reports
(the options of vLLM's `vllm bench serve` that the tuner sets per study)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The API flavour a request speaks: vllm bench serve's --backend names of the generating APIs (the first
# two are the same). The client's routes: tuner/load/client.py.
API_FLAVOURS = ("openai", "vllm", "openai-chat", "openai-responses")
# vllm bench serve's other backends (0.32): no token stream, so no TTFT, TPOT or output throughput to tune by
NOT_STREAMED = ("openai-audio", "openai-embeddings", "openai-embeddings-chat", "openai-embeddings-clip",
                "openai-embeddings-vlm2vec", "infinity-embeddings", "infinity-embeddings-clip", "vllm-pooling",
                "vllm-rerank")


def api_flavour(name: str) -> str:
    """--backend's value checked: a flavour, or one sentence saying why vLLM's other backends are not here."""
    if name in API_FLAVOURS:
        return name
    if name in NOT_STREAMED:
        what = "speech recognition" if name == "openai-audio" else "pooling (embeddings, scores)"
        raise ValueError(f"{name} is vllm bench serve's {what} backend, which is not offered here: bucket-tuner "
                         f"measures streamed generation ({', '.join(API_FLAVOURS)})")
    raise ValueError(f"{name!r} is not a backend; choose one of {', '.join(API_FLAVOURS)}")


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
