"""vllm-gaudi's padding-aware strategy (VLLM_BUCKETING_STRATEGY=pad, v0.20.0rc0 and later).

Not written up in the spec; modelled from vllm-project/vllm-gaudi
`vllm_gaudi/extension/bucketing/padding_aware.py` (v0.26.0 b059f9c9, unchanged in main 091bbadd
except for a signature change). The per-dimension configs have five fields
(min, step, max, pad_max, pad_percent); `strategies.py` reads them and `generate.py` combines the
ranges exactly as for the other strategies.

The range generator in words: double from `min` while the current value is still <= `step` (0
becomes 1); above `step`, walk in `step` increments and keep the current value only where skipping it
would waste too much: the next candidate would pad more than `pad_percent` % of itself, or more than
`pad_max` elements in absolute terms, or the current value is a multiple of `pad_max` (pad_max 0 means
"= max"). `max` always closes the range. pad_percent 0 keeps every step (linear), 50 roughly doubles
(exponential).
"""

from __future__ import annotations

import math

from ..base import BucketConfigError


def pad_defaults_prompt(max_num_prefill_seqs: int, block_size: int, max_num_batched_tokens: int,
                        max_model_len: int, query_min: int | None = None) -> dict[str, dict[str, int]]:
    """Default (min, step, max, pad_max, pad_percent) per prompt dimension.

    The ctx max depends on the query min actually used (the user's, when set), so the caller passes it
    once known; with None only the bs and query defaults are meaningful.
    """
    out = {
        "BS": dict(min=1, step=1, max=max_num_prefill_seqs, pad_max=math.ceil(max_num_prefill_seqs / 4),
                   pad_percent=25),
        "QUERY": dict(min=block_size, step=block_size, max=max_num_batched_tokens,
                      pad_max=math.ceil(max_num_batched_tokens / 4), pad_percent=25),
    }
    if query_min is not None:
        # True division here, unlike linear's floor division: one more ctx block when L - qmin is not a
        # block multiple.
        out["CTX"] = dict(min=0, step=2, max=math.ceil((max_model_len - query_min) / block_size),
                          pad_max=math.ceil(max_num_batched_tokens / block_size), pad_percent=25)
    return out


def pad_defaults_decode(max_num_seqs: int, block_size: int, max_model_len: int, num_hpu_blocks: int,
                        contiguous_pa: bool) -> dict[str, dict[str, int]]:
    """Default (min, step, max, pad_max, pad_percent) per decode dimension."""
    # Without contiguous PA the block dimension counts block references over the whole batch, so the
    # worst case is every sequence at max_model_len; with it, the highest block id (< num_hpu_blocks).
    worst_case = max(math.ceil(max_model_len * max_num_seqs / block_size), block_size)
    max_blocks = num_hpu_blocks if contiguous_pa else worst_case
    return {
        "BS": dict(min=1, step=2, max=max_num_seqs, pad_max=math.ceil(max_num_seqs / 4), pad_percent=25),
        "BLOCK": dict(min=block_size, step=block_size, max=max_blocks, pad_max=math.ceil(max_blocks / 4),
                      pad_percent=25),
    }


def padding_aware_range(bmin: int, bstep: int, bmax: int, pad_max: int, pad_percent: int,
                        label: str = "bucket") -> list[int]:
    """The 1-D padding-aware range (unsorted as upstream builds it; it is monotonic anyway).

    `label` is the variable prefix (e.g. "VLLM_DECODE_BS_BUCKET") used to name the culprit in errors.
    """
    if pad_max == 0:
        pad_max = bmax
    if bmin > bmax:
        raise BucketConfigError(
            f"{label}_MIN={bmin} is greater than {label}_MAX={bmax}: AssertionError: bucket_min cannot be "
            "greater than bucket_max. If you want to skip warmup, set VLLM_SKIP_WARMUP=true",
            f"{label}_MIN",
        )
    if bstep <= 0:
        raise BucketConfigError(f"AssertionError: bucket_step must be positive, got: ({bstep})", f"{label}_STEP")
    if not 0 <= pad_percent <= 50:
        raise BucketConfigError(
            f"AssertionError: pad_percent must be between 0 and 50 percentage points, got: ({pad_percent})",
            f"{label}_PAD_PERCENT",
        )
    if bmin < 0:
        # Doubling a negative value never reaches the step: upstream loops forever.
        raise BucketConfigError(f"{label}_MIN={bmin} is negative: the release's range generator never terminates",
                                f"{label}_MIN")

    buckets = [bmin]
    current = bmin
    while current <= bmax:
        last = buckets[-1]
        if current <= bstep:
            # Ramp-up doubles the last kept value (0 -> 1); it may overshoot `step` once.
            nxt = last * 2 or 1
            if nxt <= bmax:
                buckets.append(nxt)
        else:
            nxt = current + bstep
            gap = nxt - last - 1  # the most a batch landing in `nxt` would be padded if `current` were skipped
            keep = gap / nxt > pad_percent / 100.0 or gap > pad_max or current % pad_max == 0
            if keep and current != last:
                buckets.append(current)
        current = nxt
    if buckets[-1] != bmax:
        buckets.append(bmax)
    return buckets
