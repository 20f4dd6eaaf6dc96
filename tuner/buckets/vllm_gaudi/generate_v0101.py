"""v0.10.1: each strategy generates and filters its own lists (linear.py / exponential.py upstream)."""

from __future__ import annotations

import math

from ..base import FORCED, LINEAR, Bucket, BucketConfigError
from .logs import _bucket_list_line
from .ranges import _exponential_range_fill, _fpow, _linear_range, _log2_limit
from .settings import _cfg_setting, _Engine, _exp_user_flags, _Run


def _generate_v0101(run: _Run, eng: _Engine) -> tuple[list[Bucket], list[Bucket], list[Bucket]]:
    """v0.10.1: each strategy generates and filters its own lists (linear.py / exponential.py)."""
    cfg = run.cfg
    B, L, T, N = cfg.block_size, cfg.max_model_len, cfg.max_num_batched_tokens, cfg.num_hpu_blocks
    P, S = eng.max_num_prefill_seqs, cfg.max_num_seqs

    if run.strategy == LINEAR:
        bs_cfg = run.read_dims("PROMPT", "BS", dict(min=1, step=32, max=P))
        seq_cfg = run.read_dims("PROMPT", "SEQ", dict(min=B, step=B, max=L))
        if eng.merged_prefill:
            # Prompts packed into one row: bs pinned to 1, the length range widened to the packed size.
            old = (tuple(bs_cfg), tuple(seq_cfg))
            # Tuples from here on, as upstream's (its log lines and errors print them so).
            bs_cfg, seq_cfg = (1, 1, 1), (seq_cfg[0], seq_cfg[1], min(bs_cfg[2] * seq_cfg[2], T))
            run.info("Merged prefill is enabled!\nOverriding prompt bucketing settings!\n"
                     f"prompt bs cfg: {old[0]} -> {bs_cfg}\nprompt seq cfg: {old[1]} -> {seq_cfg}\n")
            run.setting("prompt bs, seq (merged prefill)", str([list(bs_cfg), list(seq_cfg)]), FORCED,
                        "rewritten by merged prefill")
        run.info(f"Prompt bucket config (min, step, max_warmup) bs:{bs_cfg}, seq:{seq_cfg}")
        bs_vals = _linear_range(*bs_cfg, "VLLM_PROMPT_BS_BUCKET", zero_rule=False)
        seq_vals = _linear_range(*seq_cfg, "VLLM_PROMPT_SEQ_BUCKET", zero_rule=False)
        seq_max = seq_cfg[2]
        # Prefix caching: every context length 0 .. (max - query)//B + 1 blocks (one more than fits).
        ctx_of = {s: range((seq_max - s) // B + 2) if eng.prefix_caching else (0,) for s in seq_vals}
        prompt_cfg_text = f"bs:{bs_cfg}, seq:{seq_vals}"
        len_limit = None
    else:
        flagged = _exp_user_flags(run, "PROMPT")
        if eng.merged_prefill:
            run.info("Merged prefill warmup is not implemented for exponential bucketing yet")
        bs_cfg = [1, 2, P, _log2_limit(P, "VLLM_PROMPT_BS_BUCKET_MAX") + 1]
        seq_cfg = [B, B, L, _log2_limit(L, "max_model_len") + 1]
        _cfg_setting(run, "prompt bs", bs_cfg, flagged, "VLLM_PROMPT_BS")
        _cfg_setting(run, "prompt seq", seq_cfg, flagged, "VLLM_PROMPT_SEQ")
        run.info(f"Prompt bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, seq:{seq_cfg}")
        bs_vals = _exponential_range_fill(*bs_cfg, eng.contiguous_pa, "prompt bs")
        # v0.10.1 always asks for the long-context split on the sequence dimension.
        seq_vals = _exponential_range_fill(*seq_cfg, eng.contiguous_pa, "prompt seq", long_context=True)
        ctx_of = {s: _exp_ctx_v0101(s, L, B) if eng.prefix_caching else (0,) for s in seq_vals}
        prompt_cfg_text = f"bs:{bs_cfg}, seq:{seq_vals}"
        len_limit = L

    buckets = [(bs, s, c) for bs in bs_vals for s in seq_vals for c in ctx_of[s]]
    if not buckets:
        raise BucketConfigError(
            "ValueError: No buckets could be captured with following config (min, step, max_warmup): "
            f"bs:{bs_cfg}, seq:{seq_vals}",
            "VLLM_PROMPT_BS_BUCKET_MIN" if not bs_vals else "VLLM_PROMPT_SEQ_BUCKET_MIN",
        )

    def fits(b):
        return b[0] * (b[1] + b[2] * B) <= T and (len_limit is None or b[1] <= len_limit)

    kept = [b for b in buckets if fits(b)]
    omitted = sorted(b for b in buckets if not fits(b))
    if not kept:
        smallest = min(buckets, key=lambda b: b[0] * b[1])
        budget = smallest[0] * (smallest[1] + smallest[2] * B)
        line = (f"The current bucketing configuration (min, step, max_warmup): {prompt_cfg_text} cannot be used "
                f"with specified max_num_batched_tokens ({T}), as the smallest bucket ({budget}) would exceed "
                "token budget. Please increase max_num_batched_tokens or decrease bucket minimum. Ignoring "
                "max_num_batched_tokens at risk of out-of-memory errors.")
        run.warn(line)
        kept, omitted = buckets, []
    prompt = sorted(kept)  # duplicates survive, as upstream's lists keep them
    run.info(_bucket_list_line(len(prompt), "prompt", prompt))

    if run.strategy == LINEAR:
        bs_cfg = run.read_dims("DECODE", "BS", dict(min=1, step=32, max=S))
        block_cfg = run.read_dims("DECODE", "BLOCK", dict(min=B, step=B, max=N))
        run.info(f"Decode bucket config (min, step, max_warmup) bs:{bs_cfg}, blocks:{block_cfg}")
        bs_vals = _linear_range(*bs_cfg, "VLLM_DECODE_BS_BUCKET", zero_rule=False)
        max_set = "VLLM_DECODE_BLOCK_BUCKET_MAX" in run.env
        if not max_set and eng.contiguous_pa:
            block_cfg[2] = N
        block_vals = _linear_range(*block_cfg, "VLLM_DECODE_BLOCK_BUCKET", zero_rule=False)
        if not max_set and eng.contiguous_pa and N not in block_vals:
            block_vals.append(N)
        decode = []
        for bs in bs_vals:
            for blocks in block_vals:
                if bs > blocks:
                    continue  # a batch never has fewer blocks than sequences
                if blocks >= N:
                    decode.append((bs, 1, N))  # everything from N on collapses into N
                    break
                decode.append((bs, 1, blocks))
        decode.sort()
    else:
        flagged = _exp_user_flags(run, "DECODE")
        bs_cfg = [1, 2, S, _log2_limit(S, "max_num_seqs") + 1]
        block_cfg = [B, B, N, _log2_limit(N, "num_hpu_blocks") + 1]
        _cfg_setting(run, "decode bs", bs_cfg, flagged, "VLLM_DECODE_BS")
        _cfg_setting(run, "decode block", block_cfg, flagged, "VLLM_DECODE_BLOCK")
        run.info(f"Decode bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, block:{block_cfg}")
        bs_vals = _exponential_range_fill(*bs_cfg, eng.contiguous_pa, "decode bs")
        block_vals = _exponential_range_fill(*block_cfg, eng.contiguous_pa, "decode block")
        decode = sorted({(bs, 1, b) for bs in bs_vals for b in block_vals})
    run.info(_bucket_list_line(len(decode), "decode", decode))
    return prompt, decode, omitted


def _exp_ctx_v0101(seq: int, max_model_len: int, block_size: int) -> tuple[int, ...]:
    """v0.10.1 exponential prompt contexts for one query length: 0 and ceil(R^(i/n)), i = 1..n, with
    R = (max_model_len - seq) // block_size blocks left and n = ceil(log2 R) + 1."""
    room = (max_model_len - seq) // block_size
    if room == 0:
        return (0,)
    if room < 0:
        raise BucketConfigError(
            f"ValueError: math domain error: v0.10.1 exponential bucketing rounds the largest prompt query "
            f"length up to a block multiple ({seq}) above max_model_len={max_model_len}, which is not a multiple "
            f"of block_size={block_size}; the context room (max_model_len - query) // block_size = {room} "
            "goes into math.log2. Use a max_model_len that is a multiple of the block size.",
            "max_model_len",
        )
    n = math.ceil(math.log2(room)) + 1
    return (0,) + tuple(math.ceil(_fpow(room, (1 / float(n)) * i)) for i in range(1, n + 1))
