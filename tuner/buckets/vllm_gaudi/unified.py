"""vllm-gaudi v0.15.1 unified attention (VLLM_UNIFIED_ATTN): one bucket kind for every step.

Buckets are (query_tokens, shared_blocks, unique_blocks, causal). Each dimension is a 10-point
geometric range from its min to its max, rounded up to multiples of max_num_seqs (the "turning
point") except the last point, which is the max itself; 0 is kept as a point when it is the min.
Causal buckets need the shared blocks spread over min(bs, query) sequences to fit max_model_len;
non-causal ones (query <= max_num_seqs) need some context, at least `query` unique blocks when there
is no shared context, and the shared blocks over query // 2 sequences to fit max_model_len.

Modelled from vllm-project/vllm-gaudi v0.15.1 `vllm_gaudi/extension/bucketing/unified.py` and
`common.generate_unified_buckets`.
"""

from __future__ import annotations

import math
from itertools import product

from ..base import Bucket, BucketConfigError
from .ranges import _fpow

_POINTS = 10


def _unified_range(lo: int, hi: int, round_to: int) -> list[int]:
    values = set()
    if lo == 0:
        values.add(0)
        lo = 1
    for i in range(_POINTS):
        if i == _POINTS - 1:
            values.add(hi)
        else:
            values.add(math.ceil(lo * _fpow(hi / lo, i / (_POINTS - 1)) / round_to) * round_to)
    return sorted(values)


def unified_buckets(max_num_seqs: int, max_model_len: int, block_size: int, num_hpu_blocks: int,
                    max_num_batched_tokens: int) -> list[Bucket]:
    bs = max_num_seqs
    queries = _unified_range(1, max_num_batched_tokens, bs)
    shared = _unified_range(0, min(max_model_len // block_size, num_hpu_blocks), bs)
    unique = _unified_range(0, num_hpu_blocks, bs)
    out = set()
    for q, sh, un, causal in product(queries, shared, unique, (0, 1)):
        if causal:
            if sh * block_size // min(bs, q) <= max_model_len:
                out.add((q, sh, un, causal))
        elif q <= bs and (sh > 0 or un > 0):
            if sh == 0 or _shared_fits(sh, block_size, q, max_model_len):
                if sh > 0 or q <= un:
                    out.add((q, sh, un, causal))
    return sorted(out)


def _shared_fits(shared: int, block_size: int, query: int, max_model_len: int) -> bool:
    if query // 2 == 0:
        # Upstream divides by query // 2, which is 0 for a one-token query with shared context.
        raise BucketConfigError("ZeroDivisionError: integer division or modulo by zero (vllm-gaudi v0.15.1 "
                                "unified attention: a non-causal one-token query with shared blocks)",
                                "VLLM_UNIFIED_ATTN")
    return shared * block_size // (query // 2) <= max_model_len
