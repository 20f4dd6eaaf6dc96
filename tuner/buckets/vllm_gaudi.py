"""vllm-project/vllm-gaudi: the plugin's bucketing (v1 engine, 3-D buckets).

Prompt buckets are (bs, query_len, ctx_blocks), decode buckets (bs, 1, num_blocks). Four releases:

* v0.10.1 (ab65f9ba): each strategy builds its own lists. Linear reads VLLM_{PROMPT,DECODE}_{BS,SEQ,
  BLOCK}_BUCKET_*; exponential keeps the extension's "fill" generator and long-context split. The
  runner always passes max_num_prefill_seqs = 1.
* v0.15.1 (5d6a2db3): strategies only return (bs, query, ctx) configs and a common `generate_buckets`
  combines the three ranges. Prompt length is the QUERY dimension (SEQ kept as a deprecated
  fallback), prompt context blocks are a dimension of their own; max_num_prefill_seqs =
  VLLM_PROMPT_BS_BUCKET_MAX or 1.
* v0.26.0 (b059f9c9): VLLM_BUCKETING_STRATEGY=exp|lin|pad with the padding-aware strategy
  (vllm_gaudi_padding_aware.py); VLLM_EXPONENTIAL_BUCKETING still overrides it; new prompt filter,
  omitted-bucket debug log and fallback caps.
* main (091bbadd): as v0.26.0, except that exponential decode blocks are clamped to 3x the KV blocks
  without contiguous PA.

Sources (spec sections A, B, C.2, C.3, D.5, E of ../shared/spec/gaudi-bucketing.md, and upstream):
`vllm_gaudi/extension/bucketing/{common,linear,exponential,padding_aware}.py`,
`vllm_gaudi/extension/{features,environment,config,runtime}.py`, `vllm_gaudi/v1/worker/hpu_model_runner.py`.
The vectors in ../shared/vectors/ are the ground truth; where the spec and they disagree they win.

Upstream behaviour worth knowing (all modelled):
* From v0.15.1, exponential warns that VLLM_PROMPT_BS_BUCKET_MAX "will be overwritten", yet the runner
  has already made it max_num_prefill_seqs, the exponential prompt bs max.
* The bucketing's prefix caching (hence contiguous PA) follows VLLM_CONTIGUOUS_PA from v0.15.1 on, not
  the engine's --enable-prefix-caching.
* v0.10.1 / v0.15.1 validate VLLM_BUCKETING_STRATEGY against their own unused feature choices: the
  v0.20+ values exp|lin|pad make them fail at startup.
* v0.10.1 exponential crashes ("math domain error") when max_model_len is not a block multiple; its
  prompt lists keep duplicate buckets.
* The v0.26+ "Omitted N ... buckets" line is DEBUG output (the vectors were recorded at DEBUG).
Not modelled (refused with BucketConfigError): merged prefill, bucket files, unified attention,
bucketing off, and more than MAX_PROMPT_CANDIDATES prompt candidates. Spec decode, mamba chunking
and the sliding-window prompt filter depend on the model and are not inputs here.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import repeat

from .base import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    PADDING_AWARE,
    USER,
    Bucket,
    BucketConfigError,
    BucketPlan,
    PadResult,
    ReleaseProfile,
    ServerConfig,
    Setting,
)
from .vllm_gaudi_padding_aware import (
    pad_defaults_decode,
    pad_defaults_prompt,
    padding_aware_range,
)

REPO = "vllm-project/vllm-gaudi"
LONG_CTX_THRESHOLD = 8192  # max_model_len from which prompt buckets get per-query "edge" contexts
FALLBACK_BS_STEP, FALLBACK_SEQ_STEP, FALLBACK_BLOCKS_STEP = 2, 32, 32
# Refuse bs x query x ctx products beyond this (the largest vector has 295k; 10M take seconds and GBs).
MAX_PROMPT_CANDIDATES = 10_000_000
QUERY_FALLBACK_NOTE = "This fallback behavior is deprecated and will be removed in v0.12.0."
_PARAMS3 = ("MIN", "STEP", "MAX")
_PARAMS5 = ("MIN", "STEP", "MAX", "PAD_MAX", "PAD_PERCENT")
_BUCKET_LOOKING = re.compile(r"^VLLM_(PROMPT|DECODE)_[A-Z]+_BUCKET_[A-Z_]+$")
_SWITCHES = ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY")
_TRUE = ("true", "t", "1", "yes", "y", "on")  # the config framework's `boolean`

# generate_buckets' omission reasons, verbatim (they are printed inside the "Omitted" debug line).
_COND_TOKENS = "condition: bs * query <= max_num_batched_tokens"
_COND_LEN_TOKENS = "condition: (query + ctx * block_size) <= max_model_len"  # v0.15.1
_COND_LEN_BLOCKS = "condition: ctx <= ceil((max_model_len - 1) / block_size) and query <= max_model_len"  # v0.26+
_COND_DECODE = "condition: bs <= ctx, "


def _boolean(raw: str) -> bool:
    return raw.lower() in _TRUE


def _names(prefix: str, params=_PARAMS3) -> tuple[str, ...]:
    return tuple(f"{prefix}_{p}" for p in params)


# ------------------------------------------------------------------------------------------ releases

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
    # v0.15.1 only: unified attention switch (its own bucket shapes; not modelled).
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

    @property
    def upstream(self) -> str:
        return f"{REPO}@{self.ref} ({self.commit})"

    def int_flags(self) -> tuple[str, ...]:
        """Env variables the config framework parses with int() at startup (a non-integer is fatal)."""
        if not self.range_pipeline:
            dims = ("VLLM_PROMPT_BS_BUCKET", "VLLM_PROMPT_SEQ_BUCKET", "VLLM_DECODE_BS_BUCKET", "VLLM_DECODE_BLOCK_BUCKET")
            return tuple(n for d in dims for n in _names(d, _PARAMS3 + ("LIMIT",)))
        dims = ("VLLM_PROMPT_BS_BUCKET", "VLLM_PROMPT_QUERY_BUCKET", "VLLM_PROMPT_SEQ_BUCKET",
                "VLLM_PROMPT_CTX_BUCKET", "VLLM_DECODE_BS_BUCKET", "VLLM_DECODE_BLOCK_BUCKET")
        if self.strategy_variable:
            return tuple(n for d in dims for n in _names(d, _PARAMS5))
        return tuple(n for d in dims for n in _names(d)) + ("VLLM_DECODE_BLOCK_BUCKET_LIMIT",)


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
)
_MAIN = replace(_V0260, name="gaudi-main", ref="main", commit="091bbadda10bee4fd3f6d0efc1844d2610dd2707",
                exp_decode="main")

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


# ------------------------------------------------------------------------------------ 1-D range makers

def _linear_range(bmin: int, bstep: int, bmax: int, label: str, zero_rule: bool) -> list[int]:
    """`warmup_range`: ramp-up doubling from min below step, then multiples of step, values >= min.

    From v0.15.1 (`zero_rule`) a min of 0 means "start at step and add a 0 bucket at the end".
    """
    if bmin > bmax:
        raise BucketConfigError(
            f"{label}_MIN={bmin} is greater than {label}_MAX={bmax}: AssertionError: Min. batch size cannot be "
            "greater than max. batch size. If you want to skip warmup, set VLLM_SKIP_WARMUP=true",
            f"{label}_MIN",
        )
    add_zero = zero_rule and bmin == 0
    if add_zero:
        if bmax == 0:
            return [0]
        bmin = bstep
    if bmin <= 0 and bmin < bstep:
        # Doubling 0 (or a negative value) never reaches the step: upstream loops forever.
        raise BucketConfigError(f"{label}_MIN={bmin}: the release's range generator never terminates "
                                "(doubling a value <= 0 never reaches the step)", f"{label}_MIN")
    if bstep == 0:
        raise BucketConfigError(f"{label}_STEP=0: ValueError: range() arg 3 must not be zero", f"{label}_STEP")
    values = []
    v = bmin
    while v < bstep and v <= bmax:
        values.append(v)
        v *= 2
    values.extend(range(bstep, bmax + 1, bstep))
    values = [v for v in values if v >= bmin]
    if add_zero:
        values.append(0)
    return values


def _fpow(base: float, exponent: float) -> float:
    """np.float_power on scalars: C pow(); NaN (not complex) for a negative base."""
    if base < 0:
        return math.nan
    return base ** exponent


def _ceil_step(x: float, step: int, label: str) -> int:
    if math.isnan(x):
        raise BucketConfigError(f"{label}: ValueError: cannot convert float NaN to integer", label)
    return math.ceil(x / step) * step


def _exponential_range(bmin: int, bstep: int, bmax: int, limit: int, contiguous_pa: bool, label: str) -> list[int]:
    """v0.15.1+ `warmup_range_with_limit`: `limit` points on the curve min*(max/min)^(i/(limit-1)),
    rounded up to the step; duplicates collapse; a min of 0/1 starts the curve at step and is added
    back; with contiguous PA the last point is max itself; the top value is clamped to max."""
    origin = None
    if bmin in (0, 1):
        origin, bmin = bmin, bstep
    if limit <= 0:
        raise BucketConfigError(f"{label}: AssertionError: num_buckets must be a positive integer", label)
    if limit == 1:
        return [bmax]
    values = set()
    ratio = bmax / bmin
    for i in range(limit):
        if i == limit - 1 and contiguous_pa:
            values.add(bmax)
        else:
            values.add(_ceil_step(bmin * _fpow(ratio, (1.0 / float(limit - 1)) * i), bstep, label))
    if origin is not None:
        values.add(origin)
    out = sorted(values)
    if out[-1] > bmax:
        out[-1] = bmax
    return out


def _exponential_range_fill(bmin: int, bstep: int, bmax: int, limit: int, contiguous_pa: bool, label: str,
                            long_context: bool = False) -> list[int]:
    """v0.10.1 `warmup_range_with_limit` (fill=True): a rounded point that is already taken is replaced
    by the closest unused multiple of step counted from min (ties resolved as Python's `min` over the
    set, which our int sets reproduce); stops early when none is left. `long_context` spends half the
    points on an exponential curve up to max/limit and the rest on a linear ramp to max (no fill)."""
    linear = set(range(bmin, bmax + 1, bstep))
    if limit <= 0:
        raise BucketConfigError(f"{label}: AssertionError: num_buckets must be a positive integer", label)
    if limit == 1:
        return [bmax]
    if long_context:
        n_exp = limit // 2
        n_lin = limit - n_exp
        first_step = bmax / limit
    else:
        n_exp, n_lin, first_step = limit, 0, bmax
    if n_exp == 1:
        raise BucketConfigError(f"{label}: ZeroDivisionError: float division by zero (limit {limit})", label)
    values: set[int] = set()
    for i in range(n_exp):
        point = bmin * _fpow(first_step / bmin, (1.0 / float(n_exp - 1)) * i)
        value = bmax if (i == limit - 1 and contiguous_pa) else _ceil_step(point, bstep, label)
        if value in values:
            free = linear.difference(values)
            if not free:
                break
            values.add(min(free, key=lambda x: abs(x - point)))
        else:
            values.add(value)
    if long_context:
        lin_step = (bmax - first_step) / n_lin
        for i in range(1, n_lin + 1):
            point = first_step + i * lin_step
            values.add(bmax if (i == limit and contiguous_pa) else _ceil_step(point, bstep, label))
    return sorted(values)


def _log2_limit(value: int, label: str) -> int:
    """math.ceil(math.log2(value)), failing the way upstream does on values <= 0."""
    if value <= 0:
        raise BucketConfigError(f"ValueError: math domain error: log2({value}) for the number of {label} buckets", label)
    return math.ceil(math.log2(value))


# ----------------------------------------------------------------------------------- one generation run

class _Run:
    """State of one `generate` call: what the release logs, warns and resolves, in order."""

    def __init__(self, rel: _Release, cfg: ServerConfig, strategy: str):
        self.rel, self.cfg, self.env, self.strategy = rel, cfg, cfg.env, strategy
        self.log_lines: list[str] = []
        self.warnings: list[str] = []
        self.settings: dict[str, Setting] = {}

    def info(self, line: str):
        self.log_lines.append(line)

    def warn(self, line: str):
        self.log_lines.append(line)
        self.warnings.append(line)

    def setting(self, name: str, value, source: str, note: str = ""):
        self.settings[name] = Setting(name, value, source, note)

    def user_int(self, name: str) -> int | None:
        raw = self.env.get(name)
        return None if raw is None else int(raw)  # validated up front by _check_env

    def read_dims(self, phase: str, dim: str, defaults: Mapping[str, int]) -> list[int]:
        """`read_bucket_settings`: each variable int(env) or its default, one log line each; from
        v0.15.1 an unset QUERY variable falls back to the SEQ one with a deprecation warning."""
        values = []
        for param, default in defaults.items():
            name = f"VLLM_{phase}_{dim}_BUCKET_{param.upper()}"
            raw, note = self.env.get(name), ""
            if raw is None and dim == "QUERY":
                seq_name = f"VLLM_{phase}_SEQ_BUCKET_{param.upper()}"
                raw = self.env.get(seq_name)
                if raw is not None:
                    self.warn(f"{name} not set, using {seq_name} value ({raw}) instead. {QUERY_FALLBACK_NOTE}")
                    note = f"taken from {seq_name} (deprecated fallback)"
                    self.setting(seq_name, int(raw), USER, f"read as the fallback for {name}; {QUERY_FALLBACK_NOTE}")
            value = int(raw) if raw is not None else default
            self.info(f"{name}={value} (default:{default})")
            self.setting(name, value, USER if raw is not None else DEFAULT, note)
            values.append(value)
        return values

    def override(self, name: str, value: int, note: str):
        """The release replaced a value it had read (clamp): FORCED if the user set it."""
        old = self.settings.get(name)
        user_set = old is not None and old.source == USER
        self.setting(name, value, FORCED if user_set else DEFAULT, note)


def _check_env(rel: _Release, env: Mapping[str, str]):
    """Fail as the release's startup would, or refuse what this model does not cover."""
    for name in rel.int_flags():
        raw = env.get(name)
        if raw is None:
            continue
        try:
            int(raw)
        except ValueError:
            detail = (f"{name}: failed to process environment variable" if rel.strategy_variable
                      else f"{name}: exception during construction: invalid literal for int() with base 10: {raw!r}")
            raise BucketConfigError(f"{name}={raw!r} is not an integer (RuntimeError: {detail})", name) from None
    unmodelled = [("VLLM_MERGED_PREFILL", "merged prefill rewrites the prompt configs and filters")]
    if rel.range_pipeline:
        unmodelled.append(("VLLM_BUCKETING_FROM_FILE", "buckets are read from the given file"))
    if rel.has_unified_attn:
        unmodelled.append(("VLLM_UNIFIED_ATTN", "unified attention uses its own bucket shapes"))
    for name, why in unmodelled:
        raw = env.get(name)
        if raw and (name == "VLLM_BUCKETING_FROM_FILE" or _boolean(raw)):
            raise BucketConfigError(f"{name}={raw} is not modelled for {rel.name}: {why}", name)
    raw = env.get("VLLM_ENABLE_BUCKETING")
    if raw is not None and not _boolean(raw):
        raise BucketConfigError(f"VLLM_ENABLE_BUCKETING={raw}: bucketing is off (no buckets, no warmup); "
                                "not modelled", "VLLM_ENABLE_BUCKETING")


@dataclass(frozen=True)
class _Engine:
    """What the runner and the config framework hand to the bucketing code."""

    max_num_prefill_seqs: int
    prefix_caching: bool
    contiguous_pa: bool


def _engine(run: _Run) -> _Engine:
    rel, cfg, env = run.rel, run.cfg, run.env
    if rel.prefill_bs_from_env:
        bs_max = run.user_int("VLLM_PROMPT_BS_BUCKET_MAX")
        prefill = bs_max if bs_max is not None else 1
        prefill_note = "the runner's prompt batch size limit: VLLM_PROMPT_BS_BUCKET_MAX when set, else 1"
    else:
        prefill, prefill_note = 1, "hard-coded to 1 by the v0.10.1 runner (prompts run one at a time)"
    if cfg.max_num_prefill_seqs is not None and cfg.max_num_prefill_seqs != prefill:
        run.setting("max_num_prefill_seqs", prefill, FORCED,
                    f"{prefill_note}; --max-num-prefill-seqs={cfg.max_num_prefill_seqs} is a fork option")
    else:
        run.setting("max_num_prefill_seqs", prefill, DEFAULT, prefill_note)

    engine_prefix = True if cfg.prefix_caching is None else cfg.prefix_caching
    raw_prefix, raw_contig = env.get("VLLM_PREFIX_CACHING"), env.get("VLLM_CONTIGUOUS_PA")
    if raw_prefix is not None:
        prefix, source, note = _boolean(raw_prefix), USER, "VLLM_PREFIX_CACHING overrides the engine value"
    elif rel.prefix_from_contiguous_env:
        # environment._get_prefix: on unless VLLM_CONTIGUOUS_PA is true; the engine flag is not consulted
        # (the platform turns the engine's prefix caching off itself when VLLM_CONTIGUOUS_PA is set).
        if rel.has_unified_attn and env.get("VLLM_UNIFIED_ATTN"):
            prefix = True
        else:
            prefix = raw_contig is None or not _boolean(raw_contig)
        source = DEFAULT if prefix == engine_prefix else FORCED
        note = "the plugin treats prefix caching as on unless VLLM_CONTIGUOUS_PA=true"
        if not engine_prefix and prefix:
            note += "; disabling it in the engine does not change the buckets"
    else:
        prefix, source = engine_prefix, DEFAULT
        note = "engine default (v1: on)" if cfg.prefix_caching is None else "engine setting"
    run.setting("prefix_caching", prefix, source, note)

    if raw_contig is not None:
        contiguous, source, note = _boolean(raw_contig), USER, ""
    else:
        contiguous, source, note = not prefix, DEFAULT, "contiguous PA = not prefix caching"
    run.setting("VLLM_CONTIGUOUS_PA", contiguous, source, note)
    run.setting("num_hpu_blocks", cfg.num_hpu_blocks, DEFAULT, "KV-cache blocks allocated (measured on the server)")
    return _Engine(prefill, prefix, contiguous)


def _exp_user_flags(run: _Run, phase: str) -> list[str]:
    """`check_for_user_flags`: the user's MIN/STEP/MAX (v0.10.1: and LIMIT) of the prompt BS/SEQ or
    decode BS/BLOCK variables, each warned about as "will be overwritten"."""
    params = _PARAMS3 if run.rel.range_pipeline else _PARAMS3 + ("LIMIT",)
    dims = ("BS", "SEQ") if phase == "PROMPT" else ("BS", "BLOCK")
    flagged = []
    for dim in dims:
        for param in params:
            name = f"VLLM_{phase}_{dim}_BUCKET_{param}"
            value = run.user_int(name)
            if value is not None:
                line = f"Using Exponential Strategy - Your configuration {name}={value} will be overwritten!"
                run.warn(line)
                flagged.append(name)
                run.setting(name, value, IGNORED, line)
    return flagged


def _cfg_setting(run: _Run, label: str, cfg: list, flagged: list[str], prefix: str | None):
    """Record a config the exponential strategy derives itself (not a variable): FORCED where it
    overwrote the user's variables of that dimension (those starting with `prefix`)."""
    forced = prefix is not None and any(n.startswith(prefix) for n in flagged)
    run.setting(f"{label} (min, step, max_warmup, limit)", str(list(cfg)), FORCED if forced else DEFAULT,
                "derived by the exponential strategy")


def _bucket_list_line(n: int, phase: str, buckets) -> str:
    return f"Generated {n} {phase} buckets [bs, query, num_blocks]: {list(buckets)}"


def _empty_range(dim_prefix: str, cfg, where: str) -> BucketConfigError:
    return BucketConfigError(f"{dim_prefix}_* (min, step, max) = {list(cfg)} give an empty range: {where}",
                             f"{dim_prefix}_MIN")


# --------------------------------------------------------------------------------------- v0.10.1 path

def _generate_v0101(run: _Run, eng: _Engine) -> tuple[list[Bucket], list[Bucket], list[Bucket]]:
    """v0.10.1: each strategy generates and filters its own lists (linear.py / exponential.py)."""
    cfg, B, L, T, N = run.cfg, run.cfg.block_size, run.cfg.max_model_len, run.cfg.max_num_batched_tokens, run.cfg.num_hpu_blocks
    P, S = eng.max_num_prefill_seqs, cfg.max_num_seqs

    if run.strategy == LINEAR:
        bs_cfg = run.read_dims("PROMPT", "BS", dict(min=1, step=32, max=P))
        seq_cfg = run.read_dims("PROMPT", "SEQ", dict(min=B, step=B, max=L))
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


# ---------------------------------------------------------------------------- v0.15.1+ range pipeline

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
        _cfg_setting(run, "prompt bs", bs_cfg, flagged, "VLLM_PROMPT_BS")
        _cfg_setting(run, "prompt query", query_cfg, flagged, "VLLM_PROMPT_SEQ")
        _cfg_setting(run, "prompt blocks", ctx_cfg, flagged, None)
        run.info(f"Prompt bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, query:{query_cfg}, blocks:{ctx_cfg}")

        def make(c, label):
            return _exponential_range(*c, eng.contiguous_pa, label)
    elif run.strategy == LINEAR:
        bs_cfg = run.read_dims("PROMPT", "BS", dict(min=1, step=1, max=P))
        query_cfg = run.read_dims("PROMPT", "QUERY", dict(min=B, step=B, max=T))
        ctx_cfg = run.read_dims("PROMPT", "CTX", dict(min=0, step=1, max=(L - query_cfg[0]) // B))
        run.info(f"Prompt bucket config (min, step, max_warmup) bs:{bs_cfg}, query:{query_cfg}, blocks:{ctx_cfg}")

        def make(c, label):
            return _linear_range(*c, label, zero_rule=True)
    else:
        defaults = pad_defaults_prompt(P, B, T, L)
        bs_cfg = run.read_dims("PROMPT", "BS", defaults["BS"])
        query_cfg = run.read_dims("PROMPT", "QUERY", defaults["QUERY"])
        ctx_cfg = run.read_dims("PROMPT", "CTX", pad_defaults_prompt(P, B, T, L, query_cfg[0])["CTX"])
        run.info("Prompt bucket config (min, step, max_warmup, pad_max, pad_percent) "
                 f"bs:{bs_cfg}, query:{query_cfg}, blocks:{ctx_cfg}")

        def make(c, label):
            return padding_aware_range(*c, label=label)

    ranges = []
    for c, label in ((bs_cfg, "VLLM_PROMPT_BS_BUCKET"), (query_cfg, "VLLM_PROMPT_QUERY_BUCKET"),
                     (ctx_cfg, "VLLM_PROMPT_CTX_BUCKET")):
        values = sorted(make(c, label))
        if not values:
            raise _empty_range(label, c[:3], "upstream then generates no prompt bucket (or fails on max() of "
                                             "an empty sequence)")
        ranges.append(values)
    return ranges[0], ranges[1], ranges[2]


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
            elif rel.exp_decode == "main":
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
    for values, c, label in ((bs_vals, bs_cfg, "VLLM_DECODE_BS_BUCKET"), (block_vals, block_cfg, "VLLM_DECODE_BLOCK_BUCKET")):
        if not values:
            raise _empty_range(label, c[:3], "upstream then generates no decode bucket")
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
                f"VLLM_DECODE_BLOCK_BUCKET_MIN={block_cfg[0]} will be overwritten to VLLM_DECODE_BLOCK_BUCKET_MIN={new_min}")
        run.warn(line)
        block_cfg[0] = new_min
        run.override("VLLM_DECODE_BLOCK_BUCKET_MIN", new_min, line)


# Omitted candidates are kept as runs sharing (bs, query): (bs, query, ctx values, their "c)" texts).
# Pathological configs omit millions of candidates; runs keep expanding and printing them at C speed.
_OmittedRun = tuple[int, int, list[int], list[str]]


def _expand(runs: list[_OmittedRun]) -> list[Bucket]:
    out: list[Bucket] = []
    for b, q, ctxs, _ in runs:
        out.extend(zip(repeat(b), repeat(q), ctxs))
    return out


def _omitted_line(phase: str, groups: dict[str, list[_OmittedRun]]) -> str:
    """The v0.26+ debug line: every omitted (condition, label, bs, query, ctx) tuple, sorted."""
    total = sum(len(r[2]) for runs in groups.values() for r in runs)
    parts = []
    for cond in sorted(groups):
        for b, q, _, texts in groups[cond]:
            head = f"('{cond}', '-> bs, query, ctx: ', {b}, {q}, "
            parts.append(head + ("\n" + head).join(texts))
    return f"Omitted {total} {phase} buckets:\n" + "\n".join(parts)


def _debug_logging(env: Mapping[str, str]) -> bool:
    """The "Omitted" line is logged at DEBUG level only. The vectors were recorded at DEBUG, so an unset
    VLLM_LOGGING_LEVEL keeps it; an explicit INFO (vLLM's own default) or higher drops it."""
    level = env.get("VLLM_LOGGING_LEVEL")
    return level is None or level.upper() in ("DEBUG", "NOTSET")


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


def _combine_prompt(run: _Run, bs_vals: list[int], query_vals: list[int], ctx_vals: list[int]):
    """common.generate_buckets for prompts: bs x query x ctx minus what exceeds max_model_len or the
    token budget; from max_model_len 8192 on, the largest ctx is replaced per query by the most blocks
    that still fit next to it (unless that reaches VLLM_PROMPT_CTX_BUCKET_MAX).

    Returns (sorted buckets, {condition: sorted runs of omitted buckets})."""
    cfg, rel = run.cfg, run.rel
    B, L, T = cfg.block_size, cfg.max_model_len, cfg.max_num_batched_tokens
    cond_len = _COND_LEN_BLOCKS if rel.ctx_filter_in_blocks else _COND_LEN_TOKENS
    max_ctx_blocks = math.ceil((L - 1) / B)

    def ctx_limit(q: int) -> int:
        """The largest ctx the max_model_len filter lets through next to query q (-1: none)."""
        if rel.ctx_filter_in_blocks:
            return max_ctx_blocks if q <= L else -1
        return (L - q) // B  # query + ctx * block_size <= max_model_len

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
                if bs * q <= T:
                    kept.extend(zip(repeat(bs), repeat(q), ctxs[:split]))
                else:
                    too_many_tokens.append((bs, q, ctxs[:split], texts[:split]))
    omitted = {c: v for c, v in ((cond_len, too_long), (_COND_TOKENS, too_many_tokens)) if v}
    return kept, omitted


def _combine_decode(run: _Run, bs_vals: list[int], block_vals: list[int], contiguous_pa: bool):
    """common.generate_buckets for decode: bs x blocks (the neighbour expansion covers exactly that
    product); without contiguous PA drop bs > blocks and cap blocks at bs * ceil(L / B)."""
    if contiguous_pa:
        return sorted({(bs, 1, b) for bs in bs_vals for b in block_vals}), {}
    per_seq = math.ceil(run.cfg.max_model_len / run.cfg.block_size)
    kept, omitted = set(), set()
    for bs in bs_vals:
        for b in block_vals:
            if bs <= b:
                kept.add((bs, 1, min(b, bs * per_seq)))
            else:
                omitted.add((bs, 1, b))
    runs = [(bs, q, [b], [f"{b})"]) for bs, q, b in sorted(omitted)]
    return sorted(kept), ({_COND_DECODE: runs} if runs else {})


def _generate_pipeline(run: _Run, eng: _Engine, selection_lines: list[str]):
    """v0.15.1+: ranges from the strategy, combined by common.generate_buckets, phase by phase."""
    results = []
    for phase in ("prompt", "decode"):
        for line in selection_lines:  # get_bucketing_strategy runs (and logs) once per phase
            run.info(line)
        if phase == "prompt":
            bs_vals, query_vals, ctx_vals = _prompt_ranges(run, eng)
            buckets, omitted = _combine_prompt(run, bs_vals, query_vals, ctx_vals)
        else:
            bs_vals, block_vals = _decode_ranges(run, eng)
            buckets, omitted = _combine_decode(run, bs_vals, block_vals, eng.contiguous_pa)
        if not buckets:
            raise _zero_buckets(run, phase, omitted)
        if run.rel.log_omitted and omitted and _debug_logging(run.env):
            run.info(_omitted_line(phase, omitted))
        run.info(_bucket_list_line(len(buckets), phase, buckets))
        results.append((buckets, omitted))
    (prompt, prompt_omitted), (decode, _) = results
    # In the order of upstream's omitted log: by condition, then bucket.
    omitted = [b for cond in sorted(prompt_omitted) for b in _expand(prompt_omitted[cond])]
    return prompt, decode, omitted


# ------------------------------------------------------------------------------ settings bookkeeping

def _strategy_settings(run: _Run):
    """The switch variables and what they resolved to."""
    rel, env = run.rel, run.env
    raw_exp = env.get("VLLM_EXPONENTIAL_BUCKETING")
    if not rel.strategy_variable:
        run.setting("VLLM_EXPONENTIAL_BUCKETING", run.strategy == EXPONENTIAL, USER if raw_exp is not None else DEFAULT,
                    "selects the strategy (unset: exponential)")
        return
    raw = env.get("VLLM_BUCKETING_STRATEGY")
    code = raw if raw is not None else "exp"
    overridden = _STRATEGY_CODES[code] != run.strategy
    run.setting("VLLM_BUCKETING_STRATEGY", code, (FORCED if overridden else USER) if raw is not None else DEFAULT,
                "overridden by VLLM_EXPONENTIAL_BUCKETING" if overridden else "exp | lin | pad")
    if raw_exp is not None:
        run.setting("VLLM_EXPONENTIAL_BUCKETING", _boolean(raw_exp), USER,
                    "deprecated; when set it overrides VLLM_BUCKETING_STRATEGY (true: exp, otherwise lin)")


def _exponential_extras(run: _Run, eng: _Engine):
    """The three variables v0.15.1+ exponential still acts on (see bucket_variables)."""
    if not run.rel.range_pipeline or run.strategy != EXPONENTIAL:
        return
    if "VLLM_PROMPT_BS_BUCKET_MAX" not in run.settings:
        run.setting("VLLM_PROMPT_BS_BUCKET_MAX", eng.max_num_prefill_seqs, DEFAULT,
                    "unset: max_num_prefill_seqs = 1, which is the exponential prompt bs max")
    qmin = run.user_int("VLLM_PROMPT_QUERY_BUCKET_MIN")
    if qmin is None:
        run.setting("VLLM_PROMPT_QUERY_BUCKET_MIN", run.cfg.block_size, DEFAULT,
                    "unset: query min = block_size (exponential honours only the value 1)")
    elif qmin != 1:
        run.setting("VLLM_PROMPT_QUERY_BUCKET_MIN", qmin, IGNORED,
                    "exponential only honours VLLM_PROMPT_QUERY_BUCKET_MIN=1 (query min 1 instead of block_size)")
    cap = run.user_int("VLLM_PROMPT_CTX_BUCKET_MAX")
    long_ctx = run.cfg.max_model_len >= LONG_CTX_THRESHOLD
    if cap is None:
        run.setting("VLLM_PROMPT_CTX_BUCKET_MAX", None, DEFAULT, "unset: no cap on the long-context edge contexts")
    else:
        run.setting("VLLM_PROMPT_CTX_BUCKET_MAX", cap, USER if long_ctx else IGNORED,
                    "under exponential it only bounds the per-query edge contexts added when max_model_len >= 8192")


def _why_ignored(run: _Run, name: str) -> str:
    rel, strategy = run.rel, run.strategy
    if name == "VLLM_BUCKETING_STRATEGY":
        return ("validated by the config framework (exponential_bucketing | linear_bucketing) but never read by the "
                f"bucketing code of {rel.name}; VLLM_EXPONENTIAL_BUCKETING selects the strategy")
    if "_PAD_" in name:
        if PADDING_AWARE in rel.strategies:
            return "read only by the padding_aware strategy (VLLM_BUCKETING_STRATEGY=pad)"
        return f"padding-aware bucketing does not exist in {rel.name} (from v0.20.0rc0 on)"
    if name.endswith("_LIMIT"):
        return f"the *_BUCKET_LIMIT variables are not read by {rel.name}"
    if not rel.range_pipeline and ("_QUERY_" in name or "_CTX_" in name):
        return f"{rel.name} has no QUERY/CTX variables: prompt length is VLLM_PROMPT_SEQ_BUCKET_*"
    if rel.range_pipeline and name.startswith("VLLM_PROMPT_SEQ_BUCKET_") and strategy != EXPONENTIAL:
        return (f"{name.replace('_SEQ_', '_QUERY_')} is set, so the deprecated SEQ fallback is not used")
    if strategy == EXPONENTIAL:
        return "not read by the exponential strategy, which derives its own ranges"
    return f"not read by {rel.name} under {strategy} bucketing"


def _report_ignored(run: _Run):
    """Bucket-looking variables the user set that this release and strategy never read."""
    for name in sorted(run.env):
        if name in run.settings:
            continue
        if _BUCKET_LOOKING.match(name) or name in _SWITCHES or name == "VLLM_BUCKETING_FROM_FILE":
            if name == "VLLM_BUCKETING_FROM_FILE":
                note = f"{run.rel.name} has no bucket files"
            else:
                note = _why_ignored(run, name)
            raw = run.env[name]
            try:
                value = int(raw)
            except ValueError:
                value = raw
            run.setting(name, value, IGNORED, note)


# ----------------------------------------------------------------------------------------- padding

def _calc_fallback(n: int, base_step: int) -> int:
    """calc_fallback_value: round n up to a multiple of ceil(n^(1/3)) * base_step (n <= 1 unchanged),
    so gaps widen with n but more gently than exponential buckets."""
    if n <= 1:
        return n
    size = math.ceil(math.pow(n, 1 / 3)) * base_step
    return math.ceil(n / size) * size


class _Index:
    """bs -> query -> sorted ctx values of a sorted 3-D bucket list, to find the smallest bucket (in
    list order) that covers a target without scanning the whole list."""

    def __init__(self, buckets: list[Bucket]):
        self.size = len(buckets)
        self.tree: dict[int, dict[int, list[int]]] = {}
        for b, q, c in buckets:
            self.tree.setdefault(b, {}).setdefault(q, []).append(c)
        for by_query in self.tree.values():
            for ctxs in by_query.values():
                ctxs.sort()  # already sorted for our plans' lists; linear time then
        self.bs = sorted(self.tree)
        self.queries = {b: sorted(qs) for b, qs in self.tree.items()}

    def add(self, bucket: Bucket):
        b, q, c = bucket
        if b not in self.tree:
            bisect.insort(self.bs, b)
            self.tree[b], self.queries[b] = {}, []
        if q not in self.tree[b]:
            bisect.insort(self.queries[b], q)
            self.tree[b][q] = []
        bisect.insort(self.tree[b][q], c)
        self.size += 1

    def find(self, target: Bucket) -> Bucket | None:
        tb, tq, tc = target
        for b in self.bs[bisect.bisect_left(self.bs, tb):]:
            queries = self.queries[b]
            for q in queries[bisect.bisect_left(queries, tq):]:
                ctxs = self.tree[b][q]
                if ctxs[-1] >= tc:
                    return (b, q, ctxs[bisect.bisect_left(ctxs, tc)])
        return None


def _index(plan: BucketPlan, phase: str) -> _Index:
    buckets = plan.prompt if phase == "prompt" else plan.decode
    idx = plan.state.get(f"index_{phase}")
    if idx is None or idx.size != len(buckets):  # first use, or the list was changed behind our back
        idx = plan.state[f"index_{phase}"] = _Index(buckets)
    return idx


# ---------------------------------------------------------------------------------------- profiles

class VllmGaudiProfile(ReleaseProfile):
    """One vllm-gaudi plugin release (see the module docstring for what differs)."""

    engine = "v1"
    default_strategy = EXPONENTIAL
    dims = 3

    def __init__(self, release: _Release):
        self._rel = release
        self.name = release.name
        self.upstream = release.upstream
        self.strategies = release.strategies

    # --- strategy selection

    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
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
        switch = ("VLLM_BUCKETING_STRATEGY" if rel.strategy_variable else "VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA")
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
        if rel.range_pipeline:
            prompt, decode, omitted = _generate_pipeline(run, eng, selection_lines)
        else:
            prompt, decode, omitted = _generate_v0101(run, eng)
        _exponential_extras(run, eng)
        _report_ignored(run)
        return BucketPlan(
            profile=self.name, strategy=strategy, prompt=prompt, decode=decode,
            settings=list(run.settings.values()), warnings=run.warnings, log_lines=run.log_lines,
            omitted_prompt=omitted, dims=3, prefix_caching=eng.prefix_caching, contiguous_pa=eng.contiguous_pa,
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


def _contains(sorted_buckets: list[Bucket], bucket: Bucket) -> bool:
    i = bisect.bisect_left(sorted_buckets, bucket)
    return i < len(sorted_buckets) and sorted_buckets[i] == bucket


PROFILES: list[ReleaseProfile] = [VllmGaudiProfile(r) for r in (_V0101, _V0151, _V0260, _MAIN)]
