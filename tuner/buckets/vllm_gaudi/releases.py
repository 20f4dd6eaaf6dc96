"""What differs between the modelled vllm-gaudi releases, and how each selects its strategy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..base import EXPONENTIAL, LINEAR, PADDING_AWARE, BucketConfigError

REPO = "vllm-project/vllm-gaudi"
LONG_CTX_THRESHOLD = 8192  # max_model_len from which prompt buckets get per-query "edge" contexts
_PARAMS3 = ("MIN", "STEP", "MAX")
_PARAMS5 = ("MIN", "STEP", "MAX", "PAD_MAX", "PAD_PERCENT")
_TRUE = ("true", "t", "1", "yes", "y", "on")  # the config framework's `boolean`


def _boolean(raw: str) -> bool:
    return raw.lower() in _TRUE


def _names(prefix: str, params=_PARAMS3) -> tuple[str, ...]:
    return tuple(f"{prefix}_{p}" for p in params)


@dataclass(frozen=True)
class _Release:
    """What differs between the four modelled plugin releases (each one a delta on the previous)."""

    name: str
    ref: str
    commit: str
    strategies: tuple[str, ...]
    # v0.15.1+: strategies return configs, common.generate_buckets combines bs x query x ctx ranges.
    range_pipeline: bool = False
    # v0.15.1+: the runner derives max_num_prefill_seqs from VLLM_PROMPT_BS_BUCKET_MAX (else 1).
    prefill_bs_from_env: bool = False
    # v0.15.1+: the config's prefix_caching comes from VLLM_CONTIGUOUS_PA, not from the engine flag.
    prefix_from_contiguous_env: bool = False
    # v0.15.1 only: unified attention switch (its own bucket kind: query, shared blocks, unique blocks).
    has_unified_attn: bool = False
    # exponential decode block config: "v0.15" | "v0.26" | "main" (v0.10.1 has its own path).
    exp_decode: str = ""
    # v0.26+: VLLM_BUCKETING_STRATEGY=exp|lin|pad; VLLM_EXPONENTIAL_BUCKETING is a deprecated override.
    strategy_variable: bool = False
    # v0.26+: prompt filter on ctx blocks (ceil((L-1)/B)) instead of query + ctx*B <= L.
    ctx_filter_in_blocks: bool = False
    # v0.26+: the "Omitted N ... buckets" debug line.
    log_omitted: bool = False
    # v0.26+: linear decode block max clamped to N only with contiguous PA; min fixed against the max.
    linear_decode_clamp_v26: bool = False
    # v0.26+: fallback caps on prompt ctx (ceil((L-1)/B)) and decode ctx (largest prepared).
    fallback_caps_v26: bool = False
    # The advice of the "Generated 0 ... buckets" RuntimeError (v0.15.1+).
    zero_buckets_hint: str = ""
    # Later tags whose bucketing code is this release's, and why (ReleaseProfile.alias_notes).
    alias_notes: tuple[tuple[str, str], ...] = ()

    @property
    def upstream(self) -> str:
        return f"{REPO}@{self.ref} ({self.commit})"

    def int_flags(self) -> tuple[str, ...]:
        """Env variables the config framework parses with int() at startup (a non-integer is fatal)."""
        if not self.range_pipeline:
            dims = ("VLLM_PROMPT_BS_BUCKET", "VLLM_PROMPT_SEQ_BUCKET", "VLLM_DECODE_BS_BUCKET",
                    "VLLM_DECODE_BLOCK_BUCKET")
            return tuple(n for d in dims for n in _names(d, _PARAMS3 + ("LIMIT",)))
        dims = ("VLLM_PROMPT_BS_BUCKET", "VLLM_PROMPT_QUERY_BUCKET", "VLLM_PROMPT_SEQ_BUCKET",
                "VLLM_PROMPT_CTX_BUCKET", "VLLM_DECODE_BS_BUCKET", "VLLM_DECODE_BLOCK_BUCKET")
        sliding = ("PT_HPU_SDPA_BC_FACTOR", "VLLM_FUSEDSDPA_SLIDE_THLD")
        if self.strategy_variable:
            return tuple(n for d in dims for n in _names(d, _PARAMS5)) + sliding
        return tuple(n for d in dims for n in _names(d)) + ("VLLM_DECODE_BLOCK_BUCKET_LIMIT",) + sliding


_V0101 = _Release("gaudi-0.10.1", "v0.10.1", "ab65f9ba2abbaf4c30f8cdb24a62c731f8bbdf4c", (EXPONENTIAL, LINEAR))
_V0151 = replace(
    _V0101, name="gaudi-0.15.1", ref="v0.15.1", commit="5d6a2db38ea74249a2359a3f75db391a47b70495",
    range_pipeline=True, prefill_bs_from_env=True, prefix_from_contiguous_env=True, has_unified_attn=True,
    exp_decode="v0.15",
    zero_buckets_hint="Please use default exponential bucketing, VLLM_EXPONENTIAL_BUCKETING=true or generate "
                      "linear warmup flags according to README",
)
_V0260 = replace(
    _V0151, name="gaudi-0.26.0", ref="v0.26.0", commit="b059f9c95d6a07f19eb00aa06d1ec8b87b296437",
    strategies=(EXPONENTIAL, LINEAR, PADDING_AWARE), has_unified_attn=False, exp_decode="v0.26",
    strategy_variable=True, ctx_filter_in_blocks=True, log_omitted=True, linear_decode_clamp_v26=True,
    fallback_caps_v26=True, zero_buckets_hint="Please adjust the bucketing configuration according to README",
    alias_notes=(("gaudi-0.27.0", f"{REPO}@v0.27.0rc0 (d01a3caecd8d818c29c06af56591e40eb4e3dcca): the same "
                  "text bucketing as v0.26.0 (extension/bucketing differs in vision.py only, the runner's "
                  "bucketing calls not at all); tests/data/sweep/gaudi-0.27.0.json checks it"),),
)
_MAIN = replace(_V0260, name="gaudi-main", ref="main", commit="091bbadda10bee4fd3f6d0efc1844d2610dd2707",
                exp_decode="main", alias_notes=())

_STRATEGY_CODES = {"exp": EXPONENTIAL, "lin": LINEAR, "pad": PADDING_AWARE}
_STRATEGY_CLASSES = {EXPONENTIAL: "ExponentialBucketingStrategy", LINEAR: "LinearBucketingStrategy",
                     PADDING_AWARE: "PaddingAwareBucketingStrategy"}
# v0.10.1 / v0.15.1 validate VLLM_BUCKETING_STRATEGY against these (and then never read it).
_OLD_STRATEGY_CHOICES = ("exponential_bucketing", "linear_bucketing")


def _select(rel: _Release, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """The strategy `rel` picks from env and the lines get_bucketing_strategy logs (at WARNING)."""
    exp_flag = env.get("VLLM_EXPONENTIAL_BUCKETING")
    if not rel.strategy_variable:
        raw = env.get("VLLM_BUCKETING_STRATEGY")
        if raw is not None and raw not in _OLD_STRATEGY_CHOICES:
            # The config framework validates the feature's choices at startup even though the
            # bucketing manager never reads it: the values of v0.20+ (exp|lin|pad) crash these releases.
            if rel.range_pipeline:
                why = f"bucketing_strategy: {raw} is not in allowed options: [{', '.join(_OLD_STRATEGY_CHOICES)}]!"
            else:
                why = (f"VLLM_BUCKETING_STRATEGY: exception during construction: {raw} is not in allowed options: "
                       f"{_OLD_STRATEGY_CHOICES}!")
            raise BucketConfigError(
                f"RuntimeError: {why} ({rel.name} selects the strategy with VLLM_EXPONENTIAL_BUCKETING; "
                "VLLM_BUCKETING_STRATEGY=exp|lin|pad exists from v0.20.0rc0 on)",
                "VLLM_BUCKETING_STRATEGY",
            )
        return (EXPONENTIAL if exp_flag is None or _boolean(exp_flag) else LINEAR), []

    code = env.get("VLLM_BUCKETING_STRATEGY", "exp")
    if code not in _STRATEGY_CODES:
        raise BucketConfigError(
            f"RuntimeError: bucketing_strategy: {code} is not in allowed options: [exp, lin, pad]!",
            "VLLM_BUCKETING_STRATEGY",
        )
    strategy = _STRATEGY_CODES[code]
    lines: list[str] = []
    if exp_flag is not None:
        lines.append("VLLM_EXPONENTIAL_BUCKETING is deprecated and will be removed in a future release. "
                     "Use VLLM_BUCKETING_STRATEGY='exp'|'lin'|'pad' instead.")
        override = EXPONENTIAL if _boolean(exp_flag) else LINEAR
        if override != strategy:
            lines.append(f"Overriding bucketing strategy {_STRATEGY_CLASSES[strategy]} with "
                         f"{_STRATEGY_CLASSES[override]} due to VLLM_EXPONENTIAL_BUCKETING={exp_flag}")
            strategy = override
    return strategy, lines
