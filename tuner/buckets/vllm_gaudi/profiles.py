"""The ReleaseProfile of each vllm-gaudi release: strategy selection, generation, padding."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import replace

from ..base import (
    EXPONENTIAL,
    LINEAR,
    PADDING_AWARE,
    Bucket,
    BucketConfigError,
    BucketPlan,
    PadResult,
    ReleaseProfile,
    ServerConfig,
)
from .generate import _generate_pipeline
from .generate_v0101 import _generate_v0101
from .padding import (
    FALLBACK_BLOCKS_STEP,
    FALLBACK_BS_STEP,
    FALLBACK_SEQ_STEP,
    _calc_fallback,
    _contains,
    _index,
)
from .releases import (
    _MAIN,
    _PARAMS3,
    _PARAMS5,
    _V0101,
    _V0151,
    _V0260,
    _names,
    _Release,
    _select,
)
from .settings import (
    _check_env,
    _engine,
    _exponential_extras,
    _report_ignored,
    _Run,
    _strategy_settings,
)
from .unified import unified_buckets


class VllmGaudiProfile(ReleaseProfile):
    """One vllm-gaudi plugin release (see the package docstring in __init__.py for what differs)."""

    engine = "v1"
    default_strategy = EXPONENTIAL
    dims = 3

    def __init__(self, release: _Release):
        self._rel = release
        self.name = release.name
        self.upstream = release.upstream
        self.strategies = release.strategies
        self.alias_notes = dict(release.alias_notes)
        self.aliases = tuple(self.alias_notes)
        if release.range_pipeline:  # v0.15.1+: the runner passes these to the bucketing manager
            self.model_inputs = ("num_speculative_tokens", "mamba_chunk_size", "pooling")
            if release.strategy_variable:
                self.model_inputs += ("mamba_chunk_size_explicit", "decode_block_size")
            if release.exp_decode == "main":
                self.model_inputs += ("skip_decode_block_clamp",)

    # --- strategy selection

    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
        _check_env(self._rel, env)  # the config framework parses the integer flags before it checks choices
        return _select(self._rel, env)

    def strategy_env(self, strategy: str) -> dict[str, str]:
        self._check_strategy(strategy)
        # Explicit both ways: the caller's env may already select another strategy.
        if self._rel.strategy_variable:
            return {"VLLM_BUCKETING_STRATEGY": {EXPONENTIAL: "exp", LINEAR: "lin", PADDING_AWARE: "pad"}[strategy]}
        return {"VLLM_EXPONENTIAL_BUCKETING": "true" if strategy == EXPONENTIAL else "false"}

    def build(self, cfg: ServerConfig, strategy: str | None = None) -> BucketPlan:
        if strategy is not None and self._rel.strategy_variable:
            # An explicit strategy wins over the user's deprecated VLLM_EXPONENTIAL_BUCKETING, which would
            # otherwise override the VLLM_BUCKETING_STRATEGY that strategy_env sets.
            cfg = replace(cfg, env={k: v for k, v in cfg.env.items() if k != "VLLM_EXPONENTIAL_BUCKETING"})
        return super().build(cfg, strategy)

    def bucket_variables(self, strategy: str) -> tuple[str, ...]:
        self._check_strategy(strategy)
        rel = self._rel
        # The switch, and contiguous PA (which reshapes the decode blocks in every strategy).
        switch = ("VLLM_BUCKETING_STRATEGY" if rel.strategy_variable else "VLLM_EXPONENTIAL_BUCKETING",
                  "VLLM_CONTIGUOUS_PA")
        if rel.range_pipeline:  # v0.15.1+: a bucket file replaces every strategy's ranges
            switch += ("VLLM_BUCKETING_FROM_FILE",)
        if strategy == EXPONENTIAL:
            if not rel.range_pipeline:
                return switch
            # MIN/STEP/MAX are overwritten, but these three still act (see _exponential_extras and the
            # runner's max_num_prefill_seqs).
            return switch + ("VLLM_PROMPT_BS_BUCKET_MAX", "VLLM_PROMPT_QUERY_BUCKET_MIN", "VLLM_PROMPT_CTX_BUCKET_MAX")
        if rel.range_pipeline:
            dims = ("PROMPT_BS", "PROMPT_QUERY", "PROMPT_CTX", "DECODE_BS", "DECODE_BLOCK")
        else:
            dims = ("PROMPT_BS", "PROMPT_SEQ", "DECODE_BS", "DECODE_BLOCK")
        params = _PARAMS5 if strategy == PADDING_AWARE else _PARAMS3
        return switch + tuple(n for d in dims for n in _names(f"VLLM_{d}_BUCKET", params))

    def _check_strategy(self, strategy: str):
        if strategy not in self.strategies:
            raise BucketConfigError(f"strategy {strategy!r} is not available on {self.name}; "
                                    f"it has: {', '.join(self.strategies)}", "strategy")

    # --- generation

    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        self._check_strategy(strategy)
        rel = self._rel
        _, selection_lines = _select(rel, cfg.env)  # also validates the switches
        _check_env(rel, cfg.env)
        run = _Run(rel, cfg, strategy)
        _strategy_settings(run)
        eng = _engine(run)
        unified: list = []
        if not eng.bucketing:
            # The runner neither initialises the bucketing manager nor warms anything up.
            run.info("Bucketing is OFF.")
            prompt, decode, omitted = [], [], []
        elif eng.unified_attn:
            # v0.15.1's runner generates unified buckets only (and requires contiguous PA and merged prefill).
            if not eng.contiguous_pa:
                raise BucketConfigError("AssertionError: Unified attn requires contiguous_pa!", "VLLM_CONTIGUOUS_PA")
            if not eng.merged_prefill:
                raise BucketConfigError("AssertionError: Unified attn requires merged_prefill!", "VLLM_MERGED_PREFILL")
            unified = unified_buckets(cfg.max_num_seqs, cfg.max_model_len, cfg.block_size, cfg.num_hpu_blocks,
                                      cfg.max_num_batched_tokens)
            run.info(f"Generated {len(unified)} unified buckets [query, shared_blocks, unique_blocks]: {unified}")
            prompt, decode, omitted = [], [], []
        elif rel.range_pipeline:
            prompt, decode, omitted = _generate_pipeline(run, eng, selection_lines)
        else:
            prompt, decode, omitted = _generate_v0101(run, eng)
        _exponential_extras(run, eng)
        _report_ignored(run)
        return BucketPlan(
            profile=self.name, strategy=strategy, prompt=prompt, decode=decode,
            settings=list(run.settings.values()), warnings=run.warnings, log_lines=run.log_lines,
            omitted_prompt=omitted, unified=unified, dims=3, prefix_caching=eng.prefix_caching,
            contiguous_pa=eng.contiguous_pa,
            state={
                "max_num_seqs": cfg.max_num_seqs, "max_num_batched_tokens": cfg.max_num_batched_tokens,
                "max_model_len": cfg.max_model_len, "block_size": cfg.block_size, "num_hpu_blocks": cfg.num_hpu_blocks,
                # v0.26+ caps decode fallbacks (and lookups) at the largest prepared decode ctx.
                "fallback_max_ctx": max((b[2] for b in decode), default=0),
                "added": set(),  # fallback buckets appended at runtime: in the list, never warmed up
                "runtime_log": [],  # what the release logs while padding (fallbacks, caps)
            },
        )

    # --- padding (common.find_prompt_bucket / find_decode_bucket)

    def pad_prompt(self, plan: BucketPlan, bs: int, seq: int, ctx: int = 0) -> PadResult:
        target = (bs, seq, ctx)
        found = _index(plan, "prompt").find(target)
        if found is not None:
            return PadResult(target, found, found not in plan.state["added"])
        new = self._fallback(plan, bs, seq, ctx, is_prompt=True)
        warning = f"Prompt bucket for {target} was not prepared. Adding new bucket: {new}"
        self._add(plan, "prompt", new, warning)
        return PadResult(target, new, False, warning)

    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        requested = (bs, 1, blocks)
        cap = plan.state["fallback_max_ctx"]
        if self._rel.fallback_caps_v26 and cap > 0 and blocks > cap:
            # Lookups beyond the largest prepared ctx are capped first, so a capped fallback added
            # earlier is found again instead of warning on every step.
            blocks = cap
        target = (bs, 1, blocks)
        found = _index(plan, "decode").find(target)
        if found is not None:
            return PadResult(requested, found, found not in plan.state["added"])
        new = self._fallback(plan, bs, 1, blocks, is_prompt=False)
        if self._rel.fallback_caps_v26 and _contains(plan.decode, new):
            # v0.26+ returns an existing bucket silently (possible when bs was capped at max_num_seqs).
            return PadResult(requested, new, new not in plan.state["added"])
        warning = f"Decode bucket for {target} was not prepared. Adding new bucket: {new}"
        self._add(plan, "decode", new, warning)
        return PadResult(requested, new, False, warning)

    def _fallback(self, plan: BucketPlan, bs: int, seq: int, ctx: int, is_prompt: bool) -> Bucket:
        """generate_fallback_bucket: each dimension rounded by _calc_fallback, then capped."""
        st, rel = plan.state, self._rel
        new_bs = _calc_fallback(bs, FALLBACK_BS_STEP)
        if rel.range_pipeline:
            new_bs = min(new_bs, st["max_num_seqs"])
        new_seq = min(_calc_fallback(seq, FALLBACK_SEQ_STEP), st["max_num_batched_tokens"])
        new_ctx = _calc_fallback(ctx, FALLBACK_BLOCKS_STEP)
        if not rel.fallback_caps_v26:
            new_ctx = min(new_ctx, st["num_hpu_blocks"])
        elif is_prompt:
            limit = math.ceil((st["max_model_len"] - 1) / st["block_size"])
            if new_ctx > limit:
                st["runtime_log"].append(
                    f"Fallback prompt ctx {new_ctx} exceeds theoretical max {limit} (max_model_len="
                    f"{st['max_model_len']}, block_size={st['block_size']}), capping.")
                new_ctx = limit
        elif 0 < st["fallback_max_ctx"] < new_ctx:
            st["runtime_log"].append(f"Fallback ctx {new_ctx} exceeds max prepared decode bucket ctx "
                                     f"{st['fallback_max_ctx']}, capping.")
            new_ctx = st["fallback_max_ctx"]
        return (new_bs, new_seq, new_ctx)

    @staticmethod
    def _add(plan: BucketPlan, phase: str, bucket: Bucket, warning: str):
        idx = _index(plan, phase)
        bisect.insort(plan.prompt if phase == "prompt" else plan.decode, bucket)  # upstream: append + sort
        idx.add(bucket)
        plan.state["added"].add(bucket)
        plan.state["runtime_log"].append(warning)


PROFILES: list[ReleaseProfile] = [VllmGaudiProfile(r) for r in (_V0101, _V0151, _V0260, _MAIN)]
