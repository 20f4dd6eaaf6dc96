"""v0.15.1+ common.generate_buckets: the strategy's ranges combined into prompt and decode buckets,
filtered, with the omitted candidates kept for the log and the plan."""

from __future__ import annotations

import bisect
import math
from dataclasses import replace
from itertools import repeat

from ..base import DEFAULT, USER, Bucket, BucketConfigError
from ..memo import remembered
from .bucket_file import read_bucket_file
from .logs import _bucket_list_line, _debug_logging, _expand, _omitted_line, _OmittedRun
from .releases import LONG_CTX_THRESHOLD
from .settings import _Engine, _Run
from .strategies import _decode_ranges, _prompt_ranges

# Refuse bs x query x ctx products beyond this (the largest vector has 295k; 10M take seconds and GBs).
MAX_PROMPT_CANDIDATES = 10_000_000

# generate_buckets' omission reasons, verbatim (they are printed inside the "Omitted" debug line).
_COND_TOKENS = "condition: bs * query <= max_num_batched_tokens"
_COND_LEN_TOKENS = "condition: (query + ctx * block_size) <= max_model_len"  # v0.15.1
_COND_LEN_BLOCKS = "condition: ctx <= ceil((max_model_len - 1) / block_size) and query <= max_model_len"  # v0.26+
_COND_DECODE = "condition: bs <= ctx, "
_COND_MERGED = ("ctx <= max_num_prefill_seqs * math.ceil((max_model_len - math.floor(query / max_num_prefill_seqs)) "
                "// block_size)")


def _zero_buckets(run: _Run, phase: str, omitted: dict[str, list[_OmittedRun]]) -> BucketConfigError:
    """Every candidate was filtered out; blame the first minimum the user raised, if any."""
    if phase == "prompt":
        suspects = ("VLLM_PROMPT_QUERY_BUCKET_MIN", "VLLM_PROMPT_SEQ_BUCKET_MIN", "VLLM_PROMPT_BS_BUCKET_MIN",
                    "VLLM_PROMPT_CTX_BUCKET_MIN")
    else:
        suspects = ("VLLM_DECODE_BS_BUCKET_MIN", "VLLM_DECODE_BLOCK_BUCKET_MIN")
    culprit = next((n for n in suspects if run.settings.get(n) and run.settings[n].source == USER), None)
    reasons = "; ".join(f"{sum(len(r[2]) for r in runs)} failed '{c}'" for c, runs in sorted(omitted.items()))
    return BucketConfigError(
        f"RuntimeError: Generated 0 {phase} buckets. {run.rel.zero_buckets_hint} (every candidate was filtered "
        f"out: {reasons or 'no candidates'})", culprit)


def _combine_prompt(run: _Run, bs_vals: list[int], query_vals: list[int], ctx_vals: list[int], merged: bool = False,
                    prefill: int = 1):
    """common.generate_buckets for prompts: bs x query x ctx minus what exceeds max_model_len or the
    token budget; from max_model_len 8192 on, the largest ctx is replaced per query by the most blocks
    that still fit next to it (unless that reaches VLLM_PROMPT_CTX_BUCKET_MAX).

    Returns (sorted buckets, {condition: sorted runs of omitted buckets})."""
    cfg, rel = run.cfg, run.rel
    B, L, T = cfg.block_size, cfg.max_model_len, cfg.max_num_batched_tokens
    cond_len = _COND_LEN_BLOCKS if rel.ctx_filter_in_blocks else _COND_LEN_TOKENS
    max_ctx_blocks = math.ceil((L - 1) / B)

    if merged:
        # Merged prefill replaces both filters: the context of `prefill` packed prompts next to q tokens.
        cond_len = _COND_MERGED

    def ctx_limit(q: int) -> int:
        """The largest ctx the max_model_len filter lets through next to query q (-1: none)."""
        if merged:
            return prefill * ((L - q // prefill) // B)
        if rel.ctx_filter_in_blocks:
            return max_ctx_blocks if q <= L else -1
        return (L - q) // B  # query + ctx * block_size <= max_model_len

    chunk = cfg.mamba_chunk_size
    if chunk > 0 and (cfg.mamba_chunk_size_explicit or not rel.strategy_variable):
        # Mamba layers process prompts in whole chunks: queries round up to the chunk size.
        query_vals = [math.ceil(q / chunk) * chunk for q in query_vals]
    bs_u, query_u, ctx_u = sorted(set(bs_vals)), sorted(set(query_vals)), sorted(set(ctx_vals))
    candidates = len(bs_u) * len(query_u) * len(ctx_u)
    if candidates > MAX_PROMPT_CANDIDATES:
        dims = sorted(((len(bs_u), "BS"), (len(query_u), "QUERY"), (len(ctx_u), "CTX")), reverse=True)
        raise BucketConfigError(
            f"{len(bs_u)} bs x {len(query_u)} query x {len(ctx_u)} ctx values = {candidates:,} prompt bucket "
            f"candidates: beyond what this model builds ({MAX_PROMPT_CANDIDATES:,}); the release itself would spend "
            f"minutes and gigabytes on them. Raise VLLM_PROMPT_{dims[0][1]}_BUCKET_STEP.",
            f"VLLM_PROMPT_{dims[0][1]}_BUCKET_STEP")
    if L >= LONG_CTX_THRESHOLD:
        # The largest ctx becomes a per-query "edge": as many blocks as still fit next to the query.
        # Upstream rebinds its loop variable, so a query whose own edge is not allowed keeps the previous
        # query's edge (not the largest ctx); that depends on the query order only, not on bs.
        edge_cap = run.user_int("VLLM_PROMPT_CTX_BUCKET_MAX")
        plain, ctx = ctx_u[:-1], ctx_u[-1]
        ctx_per_query = {}
        for q in query_u:
            edge = (L - q) // B
            if edge >= 0 and (edge_cap is None or edge < edge_cap):
                ctx = edge
            ctx_per_query[q] = plain if ctx in plain else sorted(plain + [ctx])
    else:
        ctx_per_query = dict.fromkeys(query_u, ctx_u)

    texts_per_query = {q: [f"{c})" for c in ctxs] for q, ctxs in ctx_per_query.items()}
    kept: list[Bucket] = []
    too_long: list[_OmittedRun] = []
    too_many_tokens: list[_OmittedRun] = []
    # Unique sorted ranges walked in order give every list already sorted and free of duplicates.
    for bs in bs_u:
        for q in query_u:
            ctxs, texts = ctx_per_query[q], texts_per_query[q]
            split = bisect.bisect_right(ctxs, ctx_limit(q))
            if split < len(ctxs):
                too_long.append((bs, q, ctxs[split:], texts[split:]))
            if split:
                if merged or bs * q <= T:
                    kept.extend(zip(repeat(bs), repeat(q), ctxs[:split]))
                else:
                    too_many_tokens.append((bs, q, ctxs[:split], texts[:split]))
    omitted = {c: v for c, v in ((cond_len, too_long), (_COND_TOKENS, too_many_tokens)) if v}
    return kept, omitted


def _decode_corrector(run: _Run, contiguous_pa: bool):
    """generate_buckets' decode correction: without contiguous PA no more blocks than bs full-length
    sequences; v0.15.1 with mamba layers caps with floor(L / B) even with contiguous PA."""
    L, B = run.cfg.max_model_len, run.cfg.block_size
    if not run.rel.strategy_variable and run.cfg.mamba_chunk_size > 0:
        per_seq = L // B
        return lambda bs, b: min(b, bs * per_seq)
    if contiguous_pa:
        return lambda bs, b: b
    per_seq = math.ceil(L / B)
    return lambda bs, b: min(b, bs * per_seq)


def _combine_decode(run: _Run, bs_vals: list[int], block_vals: list[int], contiguous_pa: bool):
    """common.generate_buckets for decode: bs x blocks (the neighbour expansion covers exactly that
    product); without contiguous PA drop bs > blocks; then the corrector caps the blocks."""
    correct = _decode_corrector(run, contiguous_pa)
    kept, omitted = set(), set()
    top = max(block_vals, default=0)
    for bs in bs_vals:
        cap = correct(bs, math.inf)  # the corrector caps the blocks of bs sequences at this (inf: not at all)
        ok = block_vals if contiguous_pa else [b for b in block_vals if bs <= b]
        if not contiguous_pa:
            omitted.update((bs, 1, b) for b in block_vals if b < bs)
        kept.update(zip(repeat(bs), repeat(1), ok) if cap >= top else ((bs, 1, b if b <= cap else cap) for b in ok))
    runs = [(bs, q, [b], [f"{b})"]) for bs, q, b in sorted(omitted)]
    return sorted(kept), ({_COND_DECODE: runs} if runs else {})


def _combined(run: _Run, phase: str, ranges: tuple[list[int], ...], *flags) -> tuple[list, dict, str]:
    """(buckets, omitted, the "Generated N buckets" line) of _combine_prompt / _combine_decode, shared by
    configurations that differ elsewhere (buckets/memo.py): keyed by everything the combination reads."""
    cfg, rel = run.cfg, run.rel
    reads = ("vllm-gaudi combined", rel.name, phase, cfg.block_size, cfg.max_model_len, cfg.mamba_chunk_size,
             *flags, *(tuple(r) for r in ranges))
    if phase == "prompt":  # the token budget and the user's ctx cap decide prompts only
        reads += (cfg.max_num_batched_tokens, cfg.mamba_chunk_size_explicit,
                  run.user_int("VLLM_PROMPT_CTX_BUCKET_MAX"))

    def make():
        if phase == "prompt":
            buckets, omitted = _combine_prompt(run, *ranges, *flags)
        else:
            buckets, omitted = _combine_decode(run, *ranges, *flags)
        return tuple(buckets), omitted, _bucket_list_line(len(buckets), phase, buckets) if buckets else ""

    found = remembered(reads, make)
    return list(found[0]), found[1], found[2]


def _spec_decode(run: _Run, eng: _Engine, seed: list) -> list:
    """Speculative decoding: each seed bucket also gets bs * (1 + k) sequences, at the same blocks (when
    there are at least that many) and at k + 1 times the blocks."""
    n = 1 + run.cfg.num_speculative_tokens
    per_seq = math.ceil(run.cfg.max_model_len / run.cfg.block_size)

    def correct(bs, q, ctx):
        return (bs, q, ctx if eng.contiguous_pa else min(ctx, bs * per_seq))

    out = set(seed)
    for bs, q, ctx in seed:
        if bs * n <= ctx:
            out.add(correct(bs * n, q, ctx))
        out.add(correct(bs * n, q, ctx * n))
    added = sorted(out - set(seed))
    run.info(f"Generated {len(added)} spec decode buckets [bs, query, num_blocks]: {added}")
    return sorted(out)


def _filter_file_buckets(run: _Run, eng: _Engine, phase: str, candidates: list):
    """generate_buckets on a bucket file's list: the same filters as for generated ones, no edges."""
    cfg = run.cfg
    B, L, T, P = cfg.block_size, cfg.max_model_len, cfg.max_num_batched_tokens, eng.max_num_prefill_seqs
    kept, omitted = set(), {}
    for bs, q, ctx in candidates:
        if phase == "prompt":
            if eng.merged_prefill:
                failed = None if ctx <= P * ((L - q // P) // B) else _COND_MERGED
            elif run.rel.ctx_filter_in_blocks:
                failed = None if ctx <= math.ceil((L - 1) / B) and q <= L else _COND_LEN_BLOCKS
            else:
                failed = None if q + ctx * B <= L else _COND_LEN_TOKENS
            if failed is None and not eng.merged_prefill and bs * q > T:
                failed = _COND_TOKENS
            bucket = (bs, q, ctx)
        else:
            failed = None if eng.contiguous_pa or bs <= ctx else _COND_DECODE
            bucket = (bs, q, _decode_corrector(run, eng.contiguous_pa)(bs, ctx))
        if failed is None:
            kept.add(bucket)
        else:
            omitted.setdefault(failed, []).append((bs, q, [ctx], [f"{ctx})"]))
    return sorted(kept), omitted


def _generate_pipeline(run: _Run, eng: _Engine, selection_lines: list[str]):
    """v0.15.1+: ranges from the strategy, combined by common.generate_buckets, phase by phase."""
    results = []
    cfg = run.cfg
    chunk = cfg.mamba_chunk_size
    if run.rel.strategy_variable and chunk > 0 and cfg.max_num_batched_tokens % chunk:
        raise BucketConfigError(f"ValueError: max_num_batched_tokens ({cfg.max_num_batched_tokens}) must be divisible "
                                f"by mamba_chunk_size ({chunk})", "max_num_batched_tokens")
    file_name = run.env.get("VLLM_BUCKETING_FROM_FILE")
    from_file = read_bucket_file(file_name, capped=run.rel.strategy_variable) if file_name else None
    if from_file is not None:
        run.setting("VLLM_BUCKETING_FROM_FILE", file_name, USER,
                    "buckets read from this file, then filtered; the strategy's ranges are not used")
    else:
        run.setting("VLLM_BUCKETING_FROM_FILE", None, DEFAULT, "unset: the strategy's ranges build the buckets")
    for phase in ("prompt", "decode"):
        if phase == "decode":
            if cfg.pooling:  # pooling models have no decode phase
                results.append(([], {}, []))
                continue
            if run.rel.strategy_variable and cfg.decode_block_size and cfg.decode_block_size != cfg.block_size:
                # v0.26+: hybrid models' decode buckets count blocks of the attention kernel's size.
                run.cfg = replace(cfg, block_size=cfg.decode_block_size)
        if from_file is not None:
            listed = from_file[0 if phase == "prompt" else 1]
            if not listed:
                # An empty list counts as "no file" upstream: it then takes max() of no ranges at all.
                raise BucketConfigError(f"VLLM_BUCKETING_FROM_FILE lists no {phase} bucket; upstream fails: "
                                        "ValueError: max() arg is an empty sequence", "VLLM_BUCKETING_FROM_FILE")
            buckets, omitted = _filter_file_buckets(run, eng, phase, listed)
            if not buckets:
                raise _zero_buckets(run, phase, omitted)
            run.info(_bucket_list_line(len(buckets), phase, buckets))
            dropped = []
            if phase == "prompt" and eng.sliding:
                buckets, dropped = _sliding_window_filter(buckets, *eng.sliding)
                run.info(_bucket_list_line(len(buckets), phase, buckets))
            if phase == "decode" and cfg.num_speculative_tokens:
                buckets = _spec_decode(run, eng, buckets)
            results.append((buckets, omitted, dropped))
            continue
        for line in selection_lines:  # get_bucketing_strategy runs (and logs) once per phase
            run.info(line)
        if phase == "prompt":
            bs_vals, query_vals, ctx_vals = _prompt_ranges(run, eng)
            buckets, omitted, line = _combined(run, phase, (bs_vals, query_vals, ctx_vals), eng.merged_prefill,
                                               eng.max_num_prefill_seqs)
        else:
            bs_vals, block_vals = _decode_ranges(run, eng)
            buckets, omitted, line = _combined(run, phase, (bs_vals, block_vals), eng.contiguous_pa)
        if not buckets:
            raise _zero_buckets(run, phase, omitted)
        if run.rel.log_omitted and omitted and _debug_logging(run.env):
            run.info(_omitted_line(phase, omitted))
        run.info(line)
        dropped = []
        if phase == "prompt" and eng.sliding:
            buckets, dropped = _sliding_window_filter(buckets, *eng.sliding)
            run.info(_bucket_list_line(len(buckets), phase, buckets))  # logged again after the filter
        if phase == "decode" and cfg.num_speculative_tokens:
            buckets = _spec_decode(run, eng, buckets)
        results.append((buckets, omitted, dropped))
    run.cfg = cfg
    (prompt, prompt_omitted, dropped), (decode, _, _) = results
    # In the order of upstream's omitted log: by condition, then bucket.
    omitted = [b for cond in sorted(prompt_omitted) for b in _expand(prompt_omitted[cond])]
    return prompt, decode, omitted + dropped


def _sliding_window_filter(buckets: list, threshold: int, slice_size: int):
    """Sliding-window SDPA slices long context-free prompts: their query must be a slice multiple.
    Applied after generation (an empty result is not an error upstream)."""
    kept, dropped = [], []
    for b in buckets:
        (kept if b[2] != 0 or b[1] < threshold or b[1] % slice_size == 0 else dropped).append(b)
    return kept, dropped
