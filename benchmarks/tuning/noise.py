"""The noise family of scenarios: the truth is the nominal table, but no measurement repeats exactly.

Every measurement of a configuration (a boot and its load run, or another load run on the same boot)
draws fresh noise, seeded by (study seed, scenario, configuration, how many times this study measured
it): reproducible, and two contenders with the same seed see the same draws for the same measurement.
Magnitudes from public evidence (benchmarks/README.md "Noise" cites the same):

- warm-up, per boot: vllm-gaudi PR #1602 logs 948-988 s for one Qwen3.5-MoE configuration (±2%);
  a noisy node adds host load (HabanaAI/vllm-fork PR #1304: one TP2 warm-up 243 s, or 144 s with the
  host's cores compiling in parallel, so a loaded host can stretch it by up to x1.7) and leftover
  recipe-cache entries (vllm-gaudi docs managing_warm-up.md: BF16 66 s cold, 23 s cached, x0.35).
- throughput, per load run: vllm-gaudi #1602 251 / 253 tok/s once warm (±1%); tenstorrent
  tt-inference-server #190: decode throughput "within 5% variance across runs" (the noisy node).
- latency, per load run: medians vLLM PR #7062 (p90 TTFT 319-341 ms over three identical runs, ±3%);
  tails heavier (same runs: p99 TTFT 533-741 ms, log-sd 0.17): a Student-t with 3 degrees of freedom
  on the log scale, so a p99 now and then lands far out.
- the first requests after ready (a fresh boot's load run only): vllm-gaudi #1602, first benchmark run
  after warm-up 222 tok/s against 256 on the second (-13%); vllm-gaudi #1188, first-run P95 TTFT ~2,400
  ms against ~600 ms (x4). The tuner's unmeasured warm pass absorbs most of it: typically a share of
  the boots carries part of it into the measured window; on a noisy node more boots, all of it.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

MEDIANS = ("median_ttft_ms", "median_tpot_ms")
TAILS = ("p99_ttft_ms", "p99_tpot_ms")


@dataclass(frozen=True)
class NoiseLevel:
    name: str
    warmup_sd: float  # log-sd of a boot's warm-up
    host_load: tuple[float, float]  # (probability, largest factor) of a warm-up slowed by host load
    cache_hit: tuple[float, float]  # (probability, smallest factor) of a warm-up shortened by leftover recipes
    throughput_sd: float  # log-sd of a load run's throughput
    median_sd: float  # log-sd of median latencies
    tail_scale: float  # scale of the log-t(3) noise of tail latencies
    # (probability, throughput loss, median TTFT rise, tail rise), each at most
    first_run: tuple[float, float, float, float]


LEVELS = {
    "typical": NoiseLevel("typical", 0.02, (0.0, 1.0), (0.0, 1.0), 0.02, 0.03, 0.09, (0.2, 0.065, 0.1, 1.0)),
    "noisy": NoiseLevel("noisy", 0.05, (0.15, 1.7), (0.1, 0.35), 0.05, 0.06, 0.18, (0.5, 0.13, 0.3, 3.0)),
}
SCENARIO_LEVEL = {"typical_noise": "typical", "noisy_node": "noisy"}  # scenario -> level (truth: nominal's)
TAIL_CLIP = 6.0  # t(3) draws beyond 6 scales are clipped (a p99 off by more than e^1 on a noisy node)


def level_of(scenario: str) -> NoiseLevel | None:
    name = SCENARIO_LEVEL.get(scenario)
    return LEVELS[name] if name else None


def rng_for(seed: int, scenario: str, key: str, index: int, run: int = 0) -> np.random.Generator:
    h = int(hashlib.sha256(f"{scenario}|{key}".encode()).hexdigest()[:12], 16)
    return np.random.default_rng([seed, h, index, run, 0x4E4F4953])  # "NOIS"


def warmup_factor(level: NoiseLevel, rng: np.random.Generator) -> float:
    f = math.exp(level.warmup_sd * rng.standard_normal())
    p, most = level.host_load
    if rng.random() < p:
        f *= rng.uniform(1.0, most)
    p, least = level.cache_hit
    if rng.random() < p:
        f *= rng.uniform(least, 1.0)
    return f


def load_run(metrics: dict, level: NoiseLevel, rng: np.random.Generator, fresh_boot: bool) -> dict:
    """One load run's figures: the true ones with this run's noise (and the first-run penalty on a fresh boot)."""
    out = dict(metrics)
    thr = math.exp(level.throughput_sd * rng.standard_normal())
    med = {k: math.exp(level.median_sd * rng.standard_normal()) for k in MEDIANS}
    tail = {k: math.exp(level.tail_scale * float(np.clip(rng.standard_t(3), -TAIL_CLIP, TAIL_CLIP))) for k in TAILS}
    p, loss, rise_med, rise_tail = level.first_run
    if fresh_boot and rng.random() < p:
        u = rng.random()
        thr *= 1 - loss * u
        med["median_ttft_ms"] *= 1 + rise_med * u
        tail["p99_ttft_ms"] *= 1 + rise_tail * u
    out["output_throughput"] = metrics["output_throughput"] * thr
    out["duration"] = metrics["duration"] / thr
    for k, f in {**med, **tail}.items():
        if out.get(k) is not None:
            out[k] = metrics[k] * f
    return out
