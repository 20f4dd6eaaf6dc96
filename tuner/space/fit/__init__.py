"""Buckets fitted to the workload: the bucket set with the least expected padding for its size.

    quantize.py   optimal 1-D boundaries by dynamic programming, and the waste-vs-count curve
    shapes.py     prompt lengths and steady-state decode context blocks of a workload
    linear.py     the linear MIN/STEP/MAX closest to a fitted set (releases without a bucket file)
    bucketfile.py vllm-gaudi's VLLM_BUCKETING_FROM_FILE format: write and read
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...load.workload import Workload
from .linear import LinearChoice, closest_linear, linear_candidates
from .quantize import Fit, FitError, pareto_curve
from .shapes import decode_batch_sizes, decode_block_totals, decode_worst_blocks, prompt_lengths


@dataclass
class WorkloadFit:
    block_size: int
    prompt_curve: list[Fit]                      # k = 1..max
    decode_curves: dict[int, list[Fit]]          # batch size -> curve over total context blocks
    prompt_linear: list[LinearChoice] = field(default_factory=list)
    decode_linear: list[LinearChoice] = field(default_factory=list)   # at the largest batch size
    prompt_mean: float = 0.0

    def prompt(self, k: int) -> Fit:
        return self.prompt_curve[min(k, len(self.prompt_curve)) - 1]

    def decode(self, bs: int, k: int) -> Fit:
        curve = self.decode_curves[bs]
        return curve[min(k, len(curve)) - 1]


def fit_workload(workload: Workload, *, block_size: int = 128, max_concurrency: int = 64,
                 decode_bs: list[int] | None = None, max_buckets: int = 16, samples: int = 4000,
                 seed: int = 0) -> WorkloadFit:
    prompts = prompt_lengths(workload)
    # prompt query buckets on the block grid: the release pads a prompt to whole blocks anyway
    prompt_curve = pareto_curve(prompts, max_buckets=max_buckets, granularity=block_size)
    sizes = decode_bs or decode_batch_sizes(max_concurrency)
    curves = {}
    for bs in sizes:
        totals = decode_block_totals(workload, bs, block_size, samples=samples, seed=seed + bs)
        granularity = max(1, -(-(max(totals) - min(totals) + 1) // 1024))  # keep the table small
        # the top bucket reaches the worst case the sample misses: a batch past it would not be warmed up
        curves[bs] = pareto_curve(totals, max_buckets=max_buckets, granularity=granularity,
                                  cover=decode_worst_blocks(workload, bs, block_size))
    largest = max(sizes)
    totals = decode_block_totals(workload, largest, block_size, samples=samples, seed=seed + largest)
    worst = decode_worst_blocks(workload, largest, block_size)
    return WorkloadFit(block_size, prompt_curve, curves,
                       prompt_linear=linear_candidates(prompts, block_size),
                       decode_linear=linear_candidates(totals, 1, steps=[2**i for i in range(13)], top=worst),
                       prompt_mean=sum(prompts) / len(prompts))


__all__ = ["Fit", "FitError", "WorkloadFit", "fit_workload", "closest_linear", "pareto_curve"]
