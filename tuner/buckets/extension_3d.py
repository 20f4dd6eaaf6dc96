"""3-D bucketing of vllm-hpu-extension's `HPUBucketingManager`, as driven by the vllm-fork v0 runner.

Three releases share this code and differ only in the `_Version` flags below:

* fork-1.22: vllm-fork v0.9.0.1+Gaudi-1.22.0, extension 8211e0b;
* fork-main: vllm-fork habana_main, extension main 7717587 (the fork pins f1d9275, absent from our
  snapshot; the bucketing code is unchanged since b7ce4ba);
* fork-1.23: vllm-fork v1.23.0 (6ecf39ca), the same extension pin as habana_main; its runner generates
  the prompt buckets of pooling models at warm-up (#2098), which 1.22 and habana_main never do.

Prompt buckets are (bs, query_len, ctx_blocks), decode buckets (bs, 1, num_blocks); the runner asks for
them after memory profiling, so the decode block range ends at num_hpu_blocks (N). Exponential is the
default; VLLM_EXPONENTIAL_BUCKETING, read with the extension's boolean parser, can select linear.

Settings under exponential: every MIN/STEP/MAX/LIMIT gets an entry with the value the strategy uses
(FORCED when the user had set the variable, else DEFAULT); a user-set one gets a second, IGNORED entry
carrying the user's value and the release's "will be overwritten" text. `plan.setting(name)` therefore
returns the value in use, `plan.ignored_settings()` what the user set in vain.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .base import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    USER,
    Bucket,
    BucketConfigError,
    BucketPlan,
    PadResult,
    ReleaseProfile,
    ServerConfig,
    Setting,
    env_int,
    linear_range,
)

_PARAMS = ("MIN", "STEP", "MAX", "LIMIT")
_DIMS = {"prompt": ("BS", "SEQ"), "decode": ("BS", "BLOCK")}
_TRUE_WORDS = ("true", "t", "1", "yes", "y", "on")  # extension config.py `boolean`
_STRATEGY_CHOICES = ("exponential_bucketing", "linear_bucketing")
_STARS = "*" * 55  # frame of the exponential "will be overwritten" warnings


def _var(phase: str, dim: str, param: str) -> str:
    return f"VLLM_{phase.upper()}_{dim}_BUCKET_{param}"


# Integer flags of the extension's config framework, in the order it evaluates them. The fork runner
# evaluates all of them at start-up (8211e0b: first get_config(); 7717587: finalize_config()), so a
# malformed value fails even when the chosen strategy would never look at it.
_INT_FLAGS = tuple(_var(ph, d, p) for ph in _DIMS for d in _DIMS[ph] for p in _PARAMS) + (
    "PT_HPU_SDPA_BC_FACTOR", "VLLM_FUSEDSDPA_SLIDE_THLD")
_LINEAR_VARS = tuple(_var(ph, d, p) for ph in _DIMS for d in _DIMS[ph] for p in _PARAMS[:3])
# Bucket-looking names this family reads elsewhere or deliberately leaves to other code.
_BUCKET_LOOKING = re.compile(r"^VLLM_\w*BUCKET")
_NOT_OURS = {"VLLM_MULTIMODAL_BUCKETS"}  # the fork runner's vision buckets, not this manager


def parse_bool(raw: str) -> bool:
    """The extension's boolean parser: anything outside the true-words list means False."""
    return raw.lower() in _TRUE_WORDS


@dataclass(frozen=True)
class _Version:
    name: str
    upstream: str
    aliases: tuple[str, ...]
    # 8211e0b's linear APC loop runs ctx over 0..R+1, one block past (max - query)//block_size.
    linear_ctx_overshoot: bool
    # 7717587 collects the surviving prompt buckets in a set (drops duplicate exponential ctx values).
    dedup_prompt: bool
    # How the config framework rejects an invalid VLLM_BUCKETING_STRATEGY (it validates but never uses it).
    strategy_error: str
    # Pooling models: the v0 engine skips initialize_cache, where 1.22 / habana_main generate every bucket,
    # so they warm up empty lists; 1.23 generates the prompt buckets in warmup_model (vllm-fork #2098).
    pooling_prompt_buckets: bool = False


class Extension3DProfile(ReleaseProfile):
    # Speculative decoding: refused with contiguous PA by the runner; pooling: no decode buckets.
    model_inputs = ("num_speculative_tokens", "pooling")

    engine = "v0"
    strategies = (EXPONENTIAL, LINEAR)
    default_strategy = EXPONENTIAL
    dims = 3

    def __init__(self, version: _Version):
        self.v = version
        self.name = version.name
        self.upstream = version.upstream
        self.aliases = version.aliases

    # ---- strategy selection ------------------------------------------------------------------
    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
        raw = env.get("VLLM_EXPONENTIAL_BUCKETING")
        # Unset means exponential; a set value goes through the boolean parser, so "ture" is linear.
        return (EXPONENTIAL if raw is None or parse_bool(raw) else LINEAR), []

    def strategy_env(self, strategy: str) -> dict[str, str]:
        self._check_strategy(strategy)
        # Explicit both ways: the caller's env may already select the other strategy.
        return {"VLLM_EXPONENTIAL_BUCKETING": "true" if strategy == EXPONENTIAL else "false"}

    def bucket_variables(self, strategy: str) -> tuple[str, ...]:
        self._check_strategy(strategy)
        if strategy == EXPONENTIAL:  # min/step/max/limit are only read to warn that they are overwritten
            return ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_CONTIGUOUS_PA")
        return ("VLLM_EXPONENTIAL_BUCKETING", *_LINEAR_VARS, "VLLM_CONTIGUOUS_PA", "VLLM_MERGED_PREFILL")

    def _check_strategy(self, strategy: str):
        if strategy not in self.strategies:
            raise BucketConfigError(f"strategy {strategy!r} is not available on {self.name}", "strategy")

    # ---- generation --------------------------------------------------------------------------
    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        self._check_strategy(strategy)
        self._validate_env(cfg.env)
        plan = BucketPlan(profile=self.name, strategy=strategy, prompt=[], decode=[], dims=3)
        ctx = _Context(cfg, plan)
        if cfg.num_speculative_tokens and ctx.cpa:
            # The runner refuses speculative decoding with contiguous PA at start-up.
            raise BucketConfigError("ValueError: Speculative decoding is not supported with contiguous PA, please set "
                                    "VLLM_CONTIGUOUS_PA=false", "VLLM_CONTIGUOUS_PA")
        plan.prefix_caching, plan.contiguous_pa = ctx.apc, ctx.cpa
        plan.state = {"max_num_batched_tokens": cfg.max_num_batched_tokens,
                      "num_hpu_blocks": cfg.num_hpu_blocks, "sliding": ctx.sliding}
        ctx.engine_settings()
        if cfg.pooling and not self.v.pooling_prompt_buckets:
            ctx.setting("pooling", True, USER, _NO_POOLING_BUCKETS)
            plan.warnings.append(f"pooling model on {self.name}: {_NO_POOLING_BUCKETS}")
            self._ignored(cfg.env, strategy, plan)
            return plan
        prompt, omitted = (self._exp_prompt if strategy == EXPONENTIAL else self._linear_prompt)(ctx)
        if ctx.sliding:  # the manager drops long queries that are not a multiple of the slice size
            thld, size = ctx.sliding
            omitted += [b for b in prompt if b[1] >= thld and b[1] % size]
            prompt = [b for b in prompt if b[1] < thld or b[1] % size == 0]
        plan.prompt, plan.omitted_prompt = prompt, sorted(omitted)
        ctx.log(f"Generated {len(prompt)} prompt buckets [bs, query, num_blocks]: {prompt}")
        if not cfg.pooling:  # the worker skips decode buckets for pooling models
            plan.decode = self._exp_decode(ctx) if strategy == EXPONENTIAL else self._linear_decode(ctx)
            ctx.log(f"Generated {len(plan.decode)} decode buckets [bs, query, num_blocks]: {plan.decode}")
        self._ignored(cfg.env, strategy, plan)
        return plan

    def _validate_env(self, env: Mapping[str, str]):
        for name in _INT_FLAGS:
            if name in env:
                try:
                    int(env[name])
                except ValueError as e:
                    raise BucketConfigError(f"{name}: exception during construction: {e}", name) from None
        value = env.get("VLLM_BUCKETING_STRATEGY")
        if value is not None and value not in _STRATEGY_CHOICES:
            raise BucketConfigError(self.v.strategy_error.format(value=value), "VLLM_BUCKETING_STRATEGY")

    # -- linear
    def _linear_prompt(self, ctx: _Context) -> tuple[list[Bucket], list[Bucket]]:
        cfg = ctx.cfg
        bs_cfg = ctx.read_linear("prompt", "BS", 1, 32, ctx.max_prefill)
        seq_cfg = ctx.read_linear("prompt", "SEQ", cfg.block_size, cfg.block_size, cfg.max_model_len)
        if ctx.merged:
            # Merged prefill packs all prompts into one row: bs pinned to 1, query max widened.
            old_bs, old_seq = tuple(bs_cfg), tuple(seq_cfg)
            bs_cfg = (1, 1, 1)
            seq_cfg = (old_seq[0], old_seq[1], min(old_bs[2] * old_seq[2], cfg.max_num_batched_tokens))
            ctx.log("Merged prefill is enabled!\nOverriding prompt bucketing settings!\n"
                    f"prompt bs cfg: {old_bs} -> {bs_cfg}\nprompt seq cfg: {old_seq} -> {seq_cfg}\n")
            for param, value in zip(_PARAMS, bs_cfg):
                ctx.override(_var("prompt", "BS", param), value, "merged prefill pins prompt bs to 1")
            ctx.override(_var("prompt", "SEQ", "MAX"), seq_cfg[2],
                         "merged prefill: min(prompt bs max * seq max, max_num_batched_tokens)")
        ctx.log(f"Prompt bucket config (min, step, max_warmup) bs:{bs_cfg}, seq:{seq_cfg}")
        bs_values = _linear_range(bs_cfg, "VLLM_PROMPT_BS_BUCKET")
        seq_values = _linear_range(seq_cfg, "VLLM_PROMPT_SEQ_BUCKET")
        last_ctx_offset = 2 if self.v.linear_ctx_overshoot else 1
        buckets = []
        for bs in bs_values:
            for q in seq_values:
                reach = (seq_cfg[2] - q) // cfg.block_size + last_ctx_offset if ctx.apc else 1
                buckets += [(bs, q, c) for c in range(reach)]
        return self._budget_filter(ctx, buckets, bs_cfg, seq_values, check_len=False)

    def _linear_decode(self, ctx: _Context) -> list[Bucket]:
        cfg, n = ctx.cfg, ctx.cfg.num_hpu_blocks
        bs_cfg = ctx.read_linear("decode", "BS", 1, 32, cfg.max_num_seqs)
        blk_cfg = ctx.read_linear("decode", "BLOCK", cfg.block_size, cfg.block_size, n)
        ctx.log(f"Decode bucket config (min, step, max_warmup) bs:{bs_cfg}, blocks:{blk_cfg}")
        bs_values = _linear_range(bs_cfg, "VLLM_DECODE_BS_BUCKET")  # upstream's order: bs, then blocks
        blocks = _linear_range(blk_cfg, "VLLM_DECODE_BLOCK_BUCKET")
        # Contiguous PA addresses blocks by id, so unless the user fixed the max, N itself is a bucket.
        if ctx.cpa and "VLLM_DECODE_BLOCK_BUCKET_MAX" not in cfg.env and n not in blocks:
            blocks.append(n)
        buckets = []
        for bs in bs_values:
            for b in blocks:
                if bs > b:  # more sequences than blocks cannot happen
                    continue
                if b >= n:  # the walk clamps to N and stops
                    buckets.append((bs, 1, n))
                    break
                buckets.append((bs, 1, b))
        return sorted(buckets)

    # -- exponential
    def _exp_prompt(self, ctx: _Context) -> tuple[list[Bucket], list[Bucket]]:
        cfg = ctx.cfg
        length, blk = cfg.max_model_len, cfg.block_size
        bs_cfg = [1, 2, ctx.max_prefill, _limit(ctx.max_prefill)]
        seq_cfg = [blk, blk, length, _limit(length)]
        ctx.exp_settings("prompt", bs_cfg, seq_cfg)
        if ctx.merged:
            ctx.log("Merged prefill warmup is not implemented for exponential bucketing yet")
        ctx.log(f"Prompt bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, seq:{seq_cfg}")
        bs_values = exp_range(*bs_cfg, ctx.cpa)
        seq_values = exp_range(*seq_cfg, ctx.cpa, long_context=length >= 8192)
        buckets = []
        for bs in bs_values:
            for q in seq_values:
                buckets.append((bs, q, 0))
                if ctx.apc:
                    buckets += [(bs, q, c) for c in _exp_ctx(length, q, blk)]
        return self._budget_filter(ctx, buckets, bs_cfg, seq_values, check_len=True)

    def _exp_decode(self, ctx: _Context) -> list[Bucket]:
        cfg, n = ctx.cfg, ctx.cfg.num_hpu_blocks
        bs_cfg = [1, 2, cfg.max_num_seqs, _limit(cfg.max_num_seqs)]
        blk_cfg = [cfg.block_size, cfg.block_size, n, _limit(n)]
        ctx.exp_settings("decode", bs_cfg, blk_cfg)
        ctx.log(f"Decode bucket config (min, step, max_warmup, limit) bs:{bs_cfg}, block:{blk_cfg}")
        blocks = exp_range(*blk_cfg, ctx.cpa)
        # Every combination, even those no real batch can reach (upstream never uses `skip_invalid`).
        return sorted({(bs, 1, b) for bs in exp_range(*bs_cfg, ctx.cpa) for b in blocks})

    # -- shared
    def _budget_filter(self, ctx: _Context, buckets, bs_cfg, seq_values, check_len: bool):
        """Token-budget filter (exponential also drops queries longer than max_model_len)."""
        cfg = ctx.cfg
        if not buckets:
            raise BucketConfigError("No buckets could be captured with following config (min, step, max_warmup): "
                                    f"bs:{bs_cfg}, seq:{seq_values}",
                                    "VLLM_PROMPT_BS_BUCKET_MIN" if seq_values else "VLLM_PROMPT_SEQ_BUCKET_MIN")

        def fits(b):
            return (b[0] * (b[1] + b[2] * cfg.block_size) <= cfg.max_num_batched_tokens
                    and (not check_len or b[1] <= cfg.max_model_len))

        kept = [b for b in buckets if fits(b)]
        if not kept:
            # Upstream keeps everything rather than fail, after saying so.
            bs, q, c = min(buckets, key=lambda b: b[0] * b[1])
            msg = ("The current bucketing configuration (min, step, max_warmup): "
                   f"bs:{bs_cfg}, seq:{seq_values} cannot be used with specified max_num_batched_tokens "
                   f"({cfg.max_num_batched_tokens}), as the smallest bucket ({bs * (q + c * cfg.block_size)}) "
                   "would exceed token budget. Please increase max_num_batched_tokens or decrease bucket "
                   "minimum. Ignoring max_num_batched_tokens at risk of out-of-memory errors.")
            ctx.log(msg, warn=True)
            return sorted(buckets), []
        kept_set = set(kept)
        omitted = [b for b in buckets if b not in kept_set]
        return sorted(kept_set if self.v.dedup_prompt else kept), omitted

    def _ignored(self, env: Mapping[str, str], strategy: str, plan: BucketPlan):
        # Exponential already reported the user's MIN/STEP/MAX/LIMIT with the release's own warning.
        read = {"VLLM_EXPONENTIAL_BUCKETING", *_NOT_OURS}
        read.update(_LINEAR_VARS if strategy == LINEAR else
                    (_var(ph, d, p) for ph in _DIMS for d in _DIMS[ph] for p in _PARAMS))
        for name in sorted(env):
            if name in read or not _BUCKET_LOOKING.match(name):
                continue
            plan.settings.append(Setting(name, env[name], IGNORED, _ignored_note(name, self.name, strategy)))

    # ---- padding -----------------------------------------------------------------------------
    def pad_prompt(self, plan: BucketPlan, bs: int, seq: int, ctx: int = 0) -> PadResult:
        return self._pad(plan, plan.prompt, "Prompt", (bs, seq, ctx))

    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        return self._pad(plan, plan.decode, "Decode", (bs, 1, blocks))

    def _pad(self, plan: BucketPlan, buckets: list[Bucket], phase: str, target: Bucket) -> PadResult:
        # The list is sorted, so bisect lands on the first candidate; the first later bucket that
        # covers every dimension wins (not necessarily the one with the fewest padded tokens).
        for b in buckets[bisect.bisect_left(buckets, target):]:
            if all(x >= t for x, t in zip(b, target)):
                return PadResult(target, b, warmed=True)
        new = _fallback(plan.state, target)
        buckets.append(new)
        buckets.sort()
        return PadResult(target, new, warmed=False,
                         warning=f"{phase} bucket for {target} was not prepared. Adding new bucket: {new}")


class _Context:
    """Per-generation view of the server and env as the extension sees them, plus plan output."""

    def __init__(self, cfg: ServerConfig, plan: BucketPlan):
        self.cfg, self.plan, env = cfg, plan, cfg.env
        self.max_prefill = cfg.max_num_prefill_seqs or cfg.max_num_seqs
        # The extension's `prefix_caching` comes from the engine config unless VLLM_PREFIX_CACHING overrides it.
        self.apc = parse_bool(env["VLLM_PREFIX_CACHING"]) if "VLLM_PREFIX_CACHING" in env else bool(cfg.prefix_caching)
        self.cpa = parse_bool(env["VLLM_CONTIGUOUS_PA"]) if "VLLM_CONTIGUOUS_PA" in env else not self.apc
        self.merged = parse_bool(env.get("VLLM_MERGED_PREFILL", "false"))
        self.sliding = None
        if parse_bool(env.get("PT_HPU_SDPA_QKV_SLICE_MODE_FWD", "false")):
            self.sliding = (env_int(env, "VLLM_FUSEDSDPA_SLIDE_THLD", 8192)[0],
                            env_int(env, "PT_HPU_SDPA_BC_FACTOR", 1024)[0])

    def log(self, line: str, warn: bool = False):
        self.plan.log_lines.append(line)
        if warn:
            self.plan.warnings.append(line)

    def setting(self, name, value, source, note=""):
        self.plan.settings.append(Setting(name, value, source, note))

    def override(self, name, value, note):
        """Replace what was read for `name` by the value the release forces."""
        self.plan.settings = [s for s in self.plan.settings if s.name != name]
        self.setting(name, value, FORCED, note)

    def engine_settings(self):
        cfg, env = self.cfg, self.cfg.env
        raw = env.get("VLLM_EXPONENTIAL_BUCKETING")
        note = "unset: exponential (the default since 1.22)"
        if raw is not None:
            note = f"{raw!r} parses as {parse_bool(raw)} (true only for {', '.join(_TRUE_WORDS)})"
        self.setting("VLLM_EXPONENTIAL_BUCKETING", raw is None or parse_bool(raw),
                     DEFAULT if raw is None else USER, note)
        self.setting("max_num_prefill_seqs", self.max_prefill, DEFAULT if cfg.max_num_prefill_seqs is None else USER,
                     "prompt batch-size max (--max-num-prefill-seqs, else max_num_seqs)")
        apc_note = "VLLM_PREFIX_CACHING overrides the engine's value" if "VLLM_PREFIX_CACHING" in env else \
            "v0 APC: prompt buckets get context-block variants"
        self.setting("prefix_caching", self.apc, USER if "VLLM_PREFIX_CACHING" in env or cfg.prefix_caching is not None
                     else DEFAULT, apc_note)
        self.setting("VLLM_CONTIGUOUS_PA", self.cpa, USER if "VLLM_CONTIGUOUS_PA" in env else DEFAULT,
                     "default: on unless prefix caching; decode block buckets end exactly at num_hpu_blocks")
        self.setting("num_hpu_blocks", cfg.num_hpu_blocks, DEFAULT, "decode block max (KV blocks after profiling)")
        if "VLLM_MERGED_PREFILL" in env:
            self.setting("VLLM_MERGED_PREFILL", self.merged, USER,
                         "linear: prompt bs pinned to 1; exponential: prompt buckets unchanged")
        if self.sliding:
            self.setting("PT_HPU_SDPA_QKV_SLICE_MODE_FWD", True, USER,
                         f"prompt queries >= {self.sliding[0]} must be multiples of {self.sliding[1]}")

    def read_linear(self, phase: str, dim: str, lo: int, step: int, hi: int) -> list[int]:
        values = []
        for param, default in zip(_PARAMS, (lo, step, hi)):
            name = _var(phase, dim, param)
            value, source = env_int(self.cfg.env, name, default)
            self.log(f"{name}={value} (default:{default})")
            self.setting(name, value, source)
            values.append(value)
        return values

    def exp_settings(self, phase: str, *cfgs: list[int]):
        """Settings for the values exponential uses, and the release's warnings for what it overrides."""
        overwritten = []
        for dim, used in zip(_DIMS[phase], cfgs):
            for param, value in zip(_PARAMS, used):
                name = _var(phase, dim, param)
                user_set = name in self.cfg.env
                self.setting(name, value, FORCED if user_set else DEFAULT, "derived by the exponential strategy")
                if user_set:
                    overwritten.append(f"Using Exponential Strategy - Your configuration {name}="
                                       f"{int(self.cfg.env[name])} will be overwritten!")
                    self.setting(name, int(self.cfg.env[name]), IGNORED, overwritten[-1])
        if overwritten:
            self.plan.warnings += [_STARS, *overwritten, _STARS]
            self.plan.log_lines += overwritten


_NO_POOLING_BUCKETS = ("no buckets: the v0 engine skips initialize_cache for pooling models, the only place this "
                       "release generates them; warm-up runs on empty lists and every shape compiles at first use "
                       "(fork 1.23 generates the prompt buckets at warm-up)")


def _linear_range(cfg, name: str) -> list[int]:
    lo, step, hi = cfg
    return linear_range(lo, step, hi, name=name)


def _limit(hi: int) -> int:
    return math.ceil(math.log2(hi)) + 1


def exp_range(lo: int, step: int, hi: int, limit: int, contiguous_pa: bool, long_context: bool = False) -> list[int]:
    """The extension's `warmup_range_with_limit` (fill variant): `limit` roughly exponential points.

    Points lo*(hi/lo)^(i/(limit-1)) are rounded up to `step`; the last is `hi` exactly with contiguous
    PA. A point whose rounded value is taken moves to the closest unused linear candidate
    (lo, lo+step, ... <= hi); when none is left the loop stops early. Upstream picks with `min` over a
    Python set, so among equally close candidates it returns the first in set iteration order. Ties
    only arise for tiny values (bs: candidate 1 vs 3 around the point 2.0), which sit below the set's
    table size and are therefore iterated in ascending order: the smaller candidate wins.
    Long context (prompt seq >= 8192): floor(limit/2) exponential points up to hi/limit, then evenly
    spaced points up to hi without the fill step. The "last point is hi" rule compares against
    `limit`, so it never fires there, and float error can push the top value one step past hi.
    """
    if limit == 1:
        return [hi]
    n_exp = limit // 2 if long_context else limit
    top = hi / limit if long_context else hi
    taken: set[int] = set()
    for i in range(n_exp):
        point = lo * (top / lo) ** ((1.0 / float(n_exp - 1)) * i)
        value = hi if i == limit - 1 and contiguous_pa else math.ceil(point / step) * step
        if value in taken:
            free = [c for c in range(lo, hi + 1, step) if c not in taken]
            if not free:
                break
            value = min(free, key=lambda c: (abs(c - point), c))
        taken.add(value)
    if long_context:
        n_lin = limit - n_exp
        stride = (hi - top) / n_lin
        taken.update(math.ceil((top + i * stride) / step) * step for i in range(1, n_lin + 1))
    return sorted(taken)


def _exp_ctx(max_len: int, query: int, block_size: int) -> list[int]:
    """Exponential APC context-block values for one query length (0 is added by the caller)."""
    reach = (max_len - query) // block_size
    if reach == 0:
        return []
    if reach < 0:  # a query bucket rounded past max_model_len (no contiguous PA): upstream log2 fails
        raise BucketConfigError(
            f"math domain error: prompt query bucket {query} exceeds max_model_len={max_len} "
            "(the exponential strategy takes log2 of the remaining context blocks)", "max_model_len")
    n = math.ceil(math.log2(reach)) + 1
    return [math.ceil(reach ** ((1 / float(n)) * i)) for i in range(1, n + 1)]


def _fallback_value(n: int, base_step: int) -> int:
    """Round n up to a multiple of ceil(cbrt(n))*base_step: coarser gaps for larger values."""
    if n <= 1:
        return n
    size = math.ceil(math.pow(n, 1 / 3)) * base_step
    return math.ceil(n / size) * size


def _fallback(state: dict, target: Bucket) -> Bucket:
    bs, seq, ctx = target
    sliding = state.get("sliding")
    if sliding and seq >= sliding[0]:
        new_seq = math.ceil(seq / sliding[1]) * sliding[1]
    else:
        new_seq = min(_fallback_value(seq, 32), state["max_num_batched_tokens"])
    return (_fallback_value(bs, 2), new_seq, min(_fallback_value(ctx, 32), state["num_hpu_blocks"]))


def _ignored_note(name: str, profile: str, strategy: str) -> str:
    if name == "VLLM_BUCKETING_STRATEGY":
        return ("defined (and validated) by the extension's config, but the bucketing manager never reads it; "
                "VLLM_EXPONENTIAL_BUCKETING selects the strategy")
    if re.match(r"VLLM_PROMPT_(QUERY|CTX)_BUCKET_", name) or "_PAD_" in name or name == "VLLM_BUCKETING_FROM_FILE":
        return "a vllm-gaudi (v1 plugin) variable; the fork's extension never reads it"
    if name.endswith("_LIMIT"):
        return "only the exponential strategy of extension 2b4ba56/29bc7a4 read *_LIMIT; not read here"
    if name == "VLLM_ENABLE_BUCKETING":
        return "only the v1 runner reads it; the v0 runner always buckets"
    if name.startswith("VLLM_DECODE_SEQ_BUCKET_"):
        return "fork 1.17 name; the decode dimension is KV blocks (VLLM_DECODE_BLOCK_BUCKET_*) since 1.18"
    return f"not read by {profile} under the {strategy} strategy"


_E821 = _Version(
    name="fork-1.22",
    upstream="HabanaAI/vllm-hpu-extension@8211e0b (8211e0ba420e976cca07be323328e41fa8a1a9da), used by "
             "HabanaAI/vllm-fork v0.9.0.1+Gaudi-1.22.0 (2e9b2b3d4ddeab7dc42a0dcc1237fc4b109b8001)",
    aliases=("fork-1.22.0",),
    linear_ctx_overshoot=True,
    dedup_prompt=False,
    strategy_error="VLLM_BUCKETING_STRATEGY: exception during construction: {value} is not in allowed options: "
                   "('exponential_bucketing', 'linear_bucketing')!",
)
_E771 = _Version(
    name="fork-main",
    upstream="HabanaAI/vllm-hpu-extension@main (7717587d178061aaab7498c077b41501944bb288), used by "
             "HabanaAI/vllm-fork habana_main (95af70093fc0dbb1a8b16d4a2913c674a02434ac)",
    aliases=("fork-habana_main",),
    linear_ctx_overshoot=False,
    dedup_prompt=True,
    strategy_error="bucketing_strategy: {value} is not in allowed options: [exponential_bucketing, linear_bucketing]!",
)

_F123 = _Version(
    name="fork-1.23",
    upstream="HabanaAI/vllm-hpu-extension@f1d9275 (bucketing as main 7717587d178061aaab7498c077b41501944bb288), "
             "used by HabanaAI/vllm-fork v1.23.0 (6ecf39ca9354a4fb83789cc31aa7bb5ec35541df)",
    aliases=("fork-1.23.0",),
    linear_ctx_overshoot=False,
    dedup_prompt=True,
    strategy_error=_E771.strategy_error,
    pooling_prompt_buckets=True,
)

PROFILES: list[ReleaseProfile] = [Extension3DProfile(_E821), Extension3DProfile(_E771), Extension3DProfile(_F123)]
