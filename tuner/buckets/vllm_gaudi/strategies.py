"""v0.15.1+: each strategy's prompt and decode configs and the sorted 1-D ranges it makes of them
(get_prompt_cfgs / get_decode_cfgs + get_range), including the decode block clamps."""

from __future__ import annotations

import math

from ..base import EXPONENTIAL, FORCED, LINEAR, PADDING_AWARE, USER, BucketConfigError
from .padding_aware import pad_defaults_decode, pad_defaults_prompt, padding_aware_range
from .ranges import _exponential_range, _linear_range, _log2_limit
from .releases import LONG_CTX_THRESHOLD
from .settings import _cfg_setting, _Engine, _exp_user_flags, _Run

_MAX_OF_EMPTY = "ValueError: max() arg is an empty sequence"


def _empty_range(dim_prefix: str, cfg, upstream_error: str) -> BucketConfigError:
    return BucketConfigError(f"{dim_prefix}_* (min, step, max) = {list(cfg)} give an empty range; upstream fails: "
                             f"{upstream_error}", f"{dim_prefix}_MIN")


def _prompt_ranges(run: _Run, eng: _Engine) -> tuple[list[int], list[int], list[int]]:
    """The strategy's get_prompt_cfgs + get_range: sorted bs, query and ctx-block ranges."""
    cfg = run.cfg
    B, L, T, P = cfg.block_size, cfg.max_model_len, cfg.max_num_batched_tokens, eng.max_num_prefill_seqs

    if run.strategy == EXPONENTIAL:
        flagged = _exp_user_flags(run, "PROMPT")
        if "VLLM_PROMPT_BS_BUCKET_MAX" in flagged:
            # Warned about, yet the runner already turned it into max_num_prefill_seqs = the bs max.
            run.setting("VLLM_PROMPT_BS_BUCKET_MAX", P, USER,
                        run.settings["VLLM_PROMPT_BS_BUCKET_MAX"].note + " (yet the runner uses it as "
                        "max_num_prefill_seqs, which is the exponential prompt bs max)")
        query_min = B
        if run.user_int("VLLM_PROMPT_QUERY_BUCKET_MIN") == 1:
            query_min = 1
            run.warn("It's only recommended to use VLLM_PROMPT_QUERY_BUCKET_MIN=1 on the decode instance under "
                     "P/D disaggregation scenario.")
            run.setting("VLLM_PROMPT_QUERY_BUCKET_MIN", 1, USER, "exponential honours only the value 1")
        bs_cfg = [1, 2, P, _log2_limit(P, "VLLM_PROMPT_BS_BUCKET_MAX") + 1]
        query_cfg = [query_min, B, T, _log2_limit(T, "max_num_batched_tokens")]
        if L >= LONG_CTX_THRESHOLD:
            # Long contexts: the ctx range stops where a full-budget query still fits; the per-query
            # edge buckets added by the combiner cover the rest.
            max_ctx = max(1, (L - T) // B)
        else:
            max_ctx = max(1, (L - query_min) // B)
        ctx_cfg = [0, 1, max_ctx, 2 if max_ctx == 1 else math.ceil(math.log2(max_ctx)) + 1]
        if eng.merged_prefill:
            new = ([1, 1, 1, 1], [query_cfg[0], query_cfg[1] * 4, T, query_cfg[3]], [0, 4, max_ctx * P, ctx_cfg[3]])
            bs_cfg, query_cfg, ctx_cfg = _merged_log(run, (bs_cfg, query_cfg, ctx_cfg), new)
        _cfg_setting(run, "prompt bs", bs_cfg, flagged, "VLLM_PROMPT_BS")
        _cfg_setting(run, "prompt query", query_cfg, flagged, "VLLM_PROMPT_SEQ")
        _cfg_setting(run, "prompt blocks", ctx_cfg, flagged, None)
        run.info(f"Prompt bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, query:{query_cfg}, "
                 f"blocks:{ctx_cfg}")

        def make(c, label):
            return _exponential_range(*c, eng.contiguous_pa, label)
    elif run.strategy == LINEAR:
        bs_cfg = run.read_dims("PROMPT", "BS", dict(min=1, step=1, max=P))
        query_cfg = run.read_dims("PROMPT", "QUERY", dict(min=B, step=B, max=T))
        max_ctx = (L - query_cfg[0]) // B
        ctx_cfg = run.read_dims("PROMPT", "CTX", dict(min=0, step=1, max=max_ctx))
        if eng.merged_prefill:
            old = (tuple(bs_cfg), tuple(query_cfg), tuple(ctx_cfg))
            bs_cfg, query_cfg = [1, 1, 1], [query_cfg[0], query_cfg[1] * 4, T]
            # The ctx variables are read a second time, against merged defaults.
            ctx_cfg = run.read_dims("PROMPT", "CTX", dict(min=0, step=4, max=max_ctx * P))
            _merged_log(run, old, (bs_cfg, query_cfg, ctx_cfg))
        run.info(f"Prompt bucket config (min, step, max_warmup) bs:{bs_cfg}, query:{query_cfg}, blocks:{ctx_cfg}")

        def make(c, label):
            return _linear_range(*c, label, zero_rule=True)
    else:
        defaults = pad_defaults_prompt(P, B, T, L)
        bs_cfg = run.read_dims("PROMPT", "BS", defaults["BS"])
        query_cfg = run.read_dims("PROMPT", "QUERY", defaults["QUERY"])
        ctx_defaults = pad_defaults_prompt(P, B, T, L, query_cfg[0])["CTX"]
        ctx_cfg = run.read_dims("PROMPT", "CTX", ctx_defaults)
        if eng.merged_prefill:
            old = (tuple(bs_cfg), tuple(query_cfg), tuple(ctx_cfg))
            bs_cfg = [1, 1, 1, bs_cfg[3], bs_cfg[4]]
            query_cfg = [query_cfg[0], query_cfg[1] * 4, T, query_cfg[3], query_cfg[4]]
            ctx_cfg = run.read_dims("PROMPT", "CTX", {**ctx_defaults, "step": 4, "max": ctx_defaults["max"] * P})
            _merged_log(run, old, (bs_cfg, query_cfg, ctx_cfg))
        run.info("Prompt bucket config (min, step, max_warmup, pad_max, pad_percent) "
                 f"bs:{bs_cfg}, query:{query_cfg}, blocks:{ctx_cfg}")

        def make(c, label):
            return padding_aware_range(*c, label=label)

    dims = ((bs_cfg, "VLLM_PROMPT_BS_BUCKET"), (query_cfg, "VLLM_PROMPT_QUERY_BUCKET"),
            (ctx_cfg, "VLLM_PROMPT_CTX_BUCKET"))
    ranges = [sorted(make(c, label)) for c, label in dims]
    # Upstream pairs bs with ctx first (max() of that empty product fails), then adds the queries.
    no_prompt = f"RuntimeError: Generated 0 prompt buckets. {run.rel.zero_buckets_hint}"
    for i, why in ((0, _MAX_OF_EMPTY), (2, _MAX_OF_EMPTY), (1, no_prompt)):
        if not ranges[i]:
            raise _empty_range(dims[i][1], dims[i][0][:3], why)
    return ranges[0], ranges[1], ranges[2]


def _merged_log(run: _Run, old, new):
    """Merged prefill packs every prompt of a step into one bs=1 row; the strategy logs its rewrite."""
    run.info("Merged prefill is enabled!\nOverriding prompt bucketing settings!\n"
             f"prompt bs cfg: {tuple(old[0])} -> {tuple(new[0])}\n"
             f"prompt query cfg: {tuple(old[1])} -> {tuple(new[1])}\n"
             f"prompt ctx cfg: {tuple(old[2])} -> {tuple(new[2])}\n")
    for label, cfg in zip(("prompt bs", "prompt query", "prompt blocks"), new):
        run.setting(f"{label} (merged prefill)", str(list(cfg)), FORCED, "rewritten by merged prefill")
    return [list(c) for c in new]


def _decode_ranges(run: _Run, eng: _Engine) -> tuple[list[int], list[int]]:
    """The strategy's get_decode_cfgs + get_range: sorted bs and block ranges (query is always 1)."""
    cfg, rel = run.cfg, run.rel
    B, L, S, N = cfg.block_size, cfg.max_model_len, cfg.max_num_seqs, cfg.num_hpu_blocks

    if run.strategy == EXPONENTIAL:
        flagged = _exp_user_flags(run, "DECODE")
        bs_cfg = [1, 2, S, _log2_limit(S, "max_num_seqs") + 1]
        if rel.exp_decode == "v0.15":
            limit = _log2_limit(N, "num_hpu_blocks") + 1
            max_blocks = N if eng.contiguous_pa else min(L // B * S, int(N * S // 4))
        else:
            # Worst case: every sequence at max_model_len; contiguous PA bounds it by the cache size.
            max_blocks = math.ceil(L / B) * S
            if eng.contiguous_pa:
                max_blocks = min(N, max_blocks)
            elif rel.exp_decode == "main" and not cfg.skip_decode_block_clamp:
                # main: block references may exceed N with prefix caching (shared blocks count once
                # per sequence); 3x N keeps headroom while bounding warmup memory.
                max_blocks = min(max_blocks, N * 3)
            limit = _log2_limit(max_blocks, "decode block") + 1
            if not eng.contiguous_pa and N > 0 and max_blocks > N * 3:
                limit += math.ceil(math.log2(max_blocks / (N * 3))) + 1  # denser high end of a wide range
        block_cfg = [1, S, max_blocks, limit]
        _cfg_setting(run, "decode bs", bs_cfg, flagged, "VLLM_DECODE_BS")
        _cfg_setting(run, "decode block", block_cfg, flagged, "VLLM_DECODE_BLOCK")
        run.info(f"Decode bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, block:{block_cfg}")

        def make(c, label):
            return _exponential_range(*c, eng.contiguous_pa, label)
    else:
        if run.strategy == LINEAR:
            max_blocks = N if eng.contiguous_pa else max(L * S // B, B)
            bs_cfg = run.read_dims("DECODE", "BS", dict(min=1, step=32, max=S))
            block_cfg = run.read_dims("DECODE", "BLOCK", dict(min=1, step=B, max=max_blocks))
        else:
            defaults = pad_defaults_decode(S, B, L, N, eng.contiguous_pa)
            bs_cfg = run.read_dims("DECODE", "BS", defaults["BS"])
            block_cfg = run.read_dims("DECODE", "BLOCK", defaults["BLOCK"])
        _clamp_decode_blocks(run, eng, block_cfg, N)
        if run.strategy == LINEAR:
            run.info(f"Decode bucket config (min, step, max_warmup) bs:{bs_cfg}, blocks:{block_cfg}")

            def make(c, label):
                return _linear_range(*c, label, zero_rule=True)
        else:
            run.info("Decode bucket config (min, step, max_warmup, pad_max, pad_percent) "
                     f"bs:{bs_cfg}, blocks:{block_cfg}")

            def make(c, label):
                return padding_aware_range(*c, label=label)

    bs_vals = sorted(make(bs_cfg, "VLLM_DECODE_BS_BUCKET"))
    block_vals = sorted(make(block_cfg, "VLLM_DECODE_BLOCK_BUCKET"))
    if not block_vals:
        # With contiguous PA upstream first compares the last block value with the cache size.
        why = "IndexError: list index out of range" if eng.contiguous_pa else _MAX_OF_EMPTY
        raise _empty_range("VLLM_DECODE_BLOCK_BUCKET", block_cfg[:3], why)
    if not bs_vals:
        raise _empty_range("VLLM_DECODE_BS_BUCKET", bs_cfg[:3], _MAX_OF_EMPTY)
    if eng.contiguous_pa and block_vals[-1] < N:
        block_vals.append(N)  # with contiguous PA the highest block id can always reach the cache size
    return bs_vals, block_vals


def _clamp_decode_blocks(run: _Run, eng: _Engine, block_cfg: list[int], N: int):
    """Linear / padding-aware: pull the decode block max (and min) back inside the KV cache.

    v0.15.1 clamps the max whenever it exceeds N and only then checks the min against N. v0.26+
    clamps the max only with contiguous PA (without it the dimension counts block references, which
    may exceed N); then linear checks the min against the max, padding-aware against N.
    """
    v26 = run.rel.linear_decode_clamp_v26
    if block_cfg[2] > N and (eng.contiguous_pa or not v26):
        line = (f"VLLM_DECODE_BLOCK_BUCKET_MAX={block_cfg[2]} is higher than max_blocks={N}. Your configuration "
                f"VLLM_DECODE_BLOCK_BUCKET_MAX={block_cfg[2]} will be overwritten to VLLM_DECODE_BLOCK_BUCKET_MAX={N}")
        run.warn(line)
        block_cfg[2] = N
        run.override("VLLM_DECODE_BLOCK_BUCKET_MAX", N, line)
        if not v26:
            _clamp_decode_min(run, block_cfg, N)
    if v26:
        _clamp_decode_min(run, block_cfg, N if run.strategy == PADDING_AWARE else block_cfg[2])


def _clamp_decode_min(run: _Run, block_cfg: list[int], bound: int):
    if block_cfg[0] > bound:
        new_min = max(1, bound - block_cfg[1])
        line = (f"VLLM_DECODE_BLOCK_BUCKET_MIN={block_cfg[0]} is higher than max_blocks={bound}. Your configuration "
                f"VLLM_DECODE_BLOCK_BUCKET_MIN={block_cfg[0]} will be overwritten to "
                f"VLLM_DECODE_BLOCK_BUCKET_MIN={new_min}")
        run.warn(line)
        block_cfg[0] = new_min
        run.override("VLLM_DECODE_BLOCK_BUCKET_MIN", new_min, line)
