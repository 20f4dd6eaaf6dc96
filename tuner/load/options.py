"""How one load test is run: concurrency, arrivals, the unmeasured warm pass, the figures it reports
(the options of vLLM's `vllm bench serve` that the tuner sets per study)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# The API flavour a request speaks: vllm bench serve's --backend names of the generating APIs (the first
# two are the same). The client's routes: tuner/load/client.py.
API_FLAVOURS = ("openai", "vllm", "openai-chat", "openai-responses")
# vllm bench serve's pooling backends (0.32's POOLING_BACKENDS, text ones): one answer, no token stream, so
# end-to-end latency, requests and inputs a second are the figures (vLLM's EmbedBenchmarkMetrics)
POOLING_FLAVOURS = ("openai-embeddings", "openai-embeddings-chat", "infinity-embeddings", "vllm-pooling",
                    "vllm-rerank", "openai-embeddings-clip", "openai-embeddings-vlm2vec", "infinity-embeddings-clip")
BACKENDS = API_FLAVOURS + POOLING_FLAVOURS
# vLLM's other backends, and why this client does not offer them
NOT_OFFERED = {
    "openai-audio": "speech recognition backend (audio datasets)",
}


def is_pooling(name: str) -> bool:
    return name in POOLING_FLAVOURS


def api_flavour(name: str) -> str:
    """--backend's value checked: a backend offered, or one sentence saying why vLLM's others are not here."""
    if name in BACKENDS:
        return name
    if name in NOT_OFFERED:
        raise ValueError(f"{name} is vllm bench serve's {NOT_OFFERED[name]}, which is not offered here; "
                         f"choose one of {', '.join(BACKENDS)}")
    raise ValueError(f"{name!r} is not a backend; choose one of {', '.join(BACKENDS)}")


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
