"""One generation run's inputs and bookkeeping: env variables read (with defaults and the QUERY -> SEQ
fallback), startup checks, what the runner derives, and the settings reported (ignored ones too)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..base import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    PADDING_AWARE,
    USER,
    BucketConfigError,
    ServerConfig,
    Setting,
)
from .releases import _PARAMS3, _STRATEGY_CODES, LONG_CTX_THRESHOLD, _boolean, _Release

QUERY_FALLBACK_NOTE = "This fallback behavior is deprecated and will be removed in v0.12.0."
_BUCKET_LOOKING = re.compile(r"^VLLM_(PROMPT|DECODE)_[A-Z]+_BUCKET_[A-Z_]+$")
_SWITCHES = ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY")


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


@dataclass(frozen=True)
class _Engine:
    """What the runner and the config framework hand to the bucketing code."""

    max_num_prefill_seqs: int
    prefix_caching: bool
    contiguous_pa: bool
    merged_prefill: bool = False
    bucketing: bool = True  # VLLM_ENABLE_BUCKETING: off means no buckets at all
    unified_attn: bool = False  # v0.15.1: unified attention (its own bucket kind)
    # v0.15.1+: sliding-window SDPA (VLLM_FUSEDSDPA_SLIDE_THLD, PT_HPU_SDPA_BC_FACTOR), None when off.
    sliding: tuple[int, int] | None = None


def _engine(run: _Run) -> _Engine:
    rel, cfg, env = run.rel, run.cfg, run.env
    unified = rel.has_unified_attn and _boolean(env.get("VLLM_UNIFIED_ATTN", "false"))
    raw_merged = env.get("VLLM_MERGED_PREFILL")
    merged = _boolean(raw_merged) if raw_merged is not None else unified  # v0.15.1: on with unified attention
    if raw_merged is not None or merged:
        run.setting("VLLM_MERGED_PREFILL", merged, USER if raw_merged is not None else DEFAULT,
                    "merged prefill: prompts packed into one bs=1 row, prompt configs rewritten")
    if unified:
        run.setting("VLLM_UNIFIED_ATTN", True, USER, "unified attention: only unified buckets are generated")
    if rel.prefill_bs_from_env and merged:
        prefill = cfg.max_num_seqs
        prefill_note = "merged prefill: the runner passes max_num_seqs"
    elif rel.prefill_bs_from_env:
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
        if rel.has_unified_attn and env.get("VLLM_UNIFIED_ATTN"):  # any non-empty value, even "false"
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
        contiguous, source, note = not prefix or unified, DEFAULT, "contiguous PA = not prefix caching"
    run.setting("VLLM_CONTIGUOUS_PA", contiguous, source, note)
    run.setting("num_hpu_blocks", cfg.num_hpu_blocks, DEFAULT, "KV-cache blocks allocated (measured on the server)")
    raw_on = env.get("VLLM_ENABLE_BUCKETING")
    bucketing = raw_on is None or _boolean(raw_on)
    if raw_on is not None:
        run.setting("VLLM_ENABLE_BUCKETING", bucketing, USER, "off: no buckets are generated and nothing is warmed up")
    sliding = None
    if rel.range_pipeline and _boolean(env.get("PT_HPU_SDPA_QKV_SLICE_MODE_FWD", "false")):
        thld = run.user_int("VLLM_FUSEDSDPA_SLIDE_THLD")
        size = run.user_int("PT_HPU_SDPA_BC_FACTOR")
        sliding = (8192 if thld is None else thld, 1024 if size is None else size)
        run.setting("PT_HPU_SDPA_QKV_SLICE_MODE_FWD", True, USER,
                    f"sliding-window SDPA: context-free prompt buckets with query >= {sliding[0]} must be multiples "
                    f"of {sliding[1]}")
    return _Engine(prefill, prefix, contiguous, merged, bucketing, unified, sliding)


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
