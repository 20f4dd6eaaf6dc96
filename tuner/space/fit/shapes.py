"""The shapes a workload puts in front of the buckets: prompt lengths, and the context blocks of a
decode batch in steady state.

Decode: at batch size B every step holds B running sequences, each somewhere in its own decode. A
sequence with output length n is in decode for n steps, so a step meets it with probability
proportional to n (long answers are seen more often), at a uniformly random point t in 0..n-1 of its
answer; its context is then prompt + t tokens, ceil(context / block_size) blocks. A 3-D decode bucket
(bs, 1, num_blocks) pads the batch's total blocks, so the sample is the sum over the B sequences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ...load.workload import Workload
from .quantize import FitError


def prompt_lengths(workload: Workload) -> list[int]:
    in_lens, _ = workload.lengths()
    prefix = getattr(workload, "prefix_len", 0)
    return [prefix + int(n) for n in in_lens]


def decode_block_totals(workload: Workload, batch_size: int, block_size: int, *, samples: int = 4000,
                        seed: int = 0) -> list[int]:
    if batch_size < 1:
        raise FitError(f"decode batch size must be >= 1, got {batch_size}")
    if block_size < 1:
        raise FitError(f"block size must be >= 1, got {block_size}")
    prompts = np.asarray(prompt_lengths(workload), dtype=np.int64)
    _, outs = workload.lengths()
    outs = np.asarray(outs, dtype=np.int64)
    if prompts.size == 0 or outs.sum() <= 0:
        raise FitError("the workload has no decode steps (every output length is 0)")
    rng = np.random.default_rng(seed)
    p = outs / outs.sum()
    who = rng.choice(prompts.size, size=(samples, batch_size), p=p)
    step = np.floor(rng.random((samples, batch_size)) * outs[who]).astype(np.int64)
    # the token being generated at step t sees prompt + t tokens of context, plus itself
    blocks = -(-(prompts[who] + step + 1) // block_size)
    return blocks.sum(axis=1).tolist()


def decode_worst_blocks(workload: Workload, batch_size: int, block_size: int) -> int:
    """The decode context of `batch_size` sequences all at the workload's longest request, in KV blocks."""
    ins, outs = workload.lengths()
    prefix = getattr(workload, "prefix_len", 0)
    longest = max(prefix + int(i) + int(o) for i, o in zip(ins, outs))
    return batch_size * math.ceil(longest / block_size)


def decode_batch_sizes(max_concurrency: int) -> list[int]:
    """Powers of two below the concurrency, and the concurrency itself: the batch sizes a load that
    ramps up and drains passes through."""
    if max_concurrency < 1:
        raise FitError(f"max concurrency must be >= 1, got {max_concurrency}")
    sizes = [1 << i for i in range(int(math.log2(max_concurrency)) + 1)]
    return sorted(set(sizes + [max_concurrency]))


def parse_int_list(text: str, flag: str) -> list[int]:
    try:
        values = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise FitError(f"{flag} expects comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise FitError(f"{flag} expects positive integers, got {text!r}")
    return values


def mean(values: Sequence[int]) -> float:
    return float(np.mean(values)) if len(values) else 0.0
