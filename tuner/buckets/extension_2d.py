"""2-D (bs, seq|blocks) bucketing of HabanaAI/vllm-hpu-extension, as used by vllm-fork 1.19 .. 1.21.3.

One class models the four extension commits; they differ only in a handful of rules, kept as flags:

* 4ff86cf (fork 1.19), d4b0d38 (1.20): linear only; prompt seq max / decode length hard-coded to
  1024 / 2048 (an upstream FIXME), not max_model_len.
* 2b4ba56 (1.21.0): the runner passes max_model_len; exponential strategy behind
  VLLM_EXPONENTIAL_BUCKETING (only the literal 'true', any case).
* 29bc7a4 (1.21.2, 1.21.3): contiguous PA (VLLM_CONTIGUOUS_PA) now shapes the buckets: linear decode
  blocks reach num_hpu_blocks, exponential ranges end exactly at their max; a missing exponential
  bucket is logged instead of dropping into pdb.

docs/bucketing.md sections A, B, C.1; truth: the ext-* rows of tests/data/vectors.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from .base import (
    DEFAULT,
    EXPONENTIAL,
    FORCED,
    IGNORED,
    LINEAR,
    USER,
    BucketConfigError,
    BucketPlan,
    PadResult,
    ReleaseProfile,
    ServerConfig,
    Setting,
    env_int,
    linear_range,
)
from .memo import remembered

# (phase, dim) in the order the extension reads (and logs) them.
_DIMS = (("PROMPT", "BS"), ("DECODE", "BS"), ("PROMPT", "SEQ"), ("DECODE", "BLOCK"))
_SWITCH = "VLLM_EXPONENTIAL_BUCKETING"
_BUCKETISH = re.compile(r"^VLLM_\w*BUCKET")  # anything a user may believe tunes buckets


def _var(phase: str, dim: str, param: str) -> str:
    return f"VLLM_{phase}_{dim}_BUCKET_{param}"


def _round_up(v: int, k: int) -> int:
    return (v + k - 1) // k * k


# --- linear find_bucket, one per commit (spec C.1). `lo`/`step` are the dimension's MIN/STEP. ---

def _pow2_by_halving(v: int, base: int) -> int:
    # 4ff86cf/d4b0d38: base * next_pow2(v), NOT the smallest base*2^k >= v (differs when base > 1).
    while v > 1:
        v = (v + 1) // 2
        base *= 2
    return base


def _pow2_by_doubling(v: int, base: int) -> int:
    # 2b4ba56/29bc7a4: the smallest base*2^k >= v.
    while v > base:
        base *= 2
    return base


def _pad_4ff(v, lo, step):
    return max(lo, min(_round_up(v, step), _pow2_by_halving(v, lo)))


def _pad_d4b(v, lo, step):
    return lo if v <= lo else min(_round_up(v, step), _pow2_by_halving(v, lo))


def _pad_2b4(v, lo, step):
    return lo if v <= lo else min(_round_up(v, step), _pow2_by_doubling(v, lo))


def _pad_29b(v, lo, step):
    # Powers of two only during the ramp-up (<= step); beyond it, the step grid.
    if v <= lo:
        return lo
    p = _pow2_by_doubling(v, lo)
    return p if p <= step else _round_up(v, step)


def _exp_range(lo: int, step: int, hi: int, limit: int, end_at_max: bool, name: str = "LIMIT") -> list[int]:
    """`limit` exponentially spaced values from lo to hi, rounded up to `step` ("fill" variant, B.1).

    The float arithmetic mirrors upstream's exactly (exponent = (1/(limit-1)) * i, then
    lo * (hi/lo)**exponent; math.pow equals numpy.float_power here), because the last point can land
    an ulp above or below hi and the ceil then decides whether hi + step appears.
    """
    if limit < 1:  # upstream asserts it when the range is built (decode ranges: only when decode is built)
        raise BucketConfigError(f"{name}={limit}: num_buckets must be a positive integer", name)
    if limit == 1:
        return [hi]
    candidates = range(lo, hi + 1, step)
    taken: set[int] = set()
    for i in range(limit):
        x = lo * math.pow(hi / lo, (1.0 / float(limit - 1)) * i)
        value = hi if (end_at_max and i == limit - 1) else math.ceil(x / step) * step
        if value in taken:
            # A duplicate is replaced by the unused step-grid value nearest to x. Upstream breaks exact
            # ties with min() over a set of ints, i.e. CPython's hash-table order. Such ties need x to
            # fall exactly midway between two grid values; none occurs in the vectors nor in 335k
            # fuzzed (lo, step, hi, limit) configurations, so we take the smaller value (the order a
            # small-int set gives before its table wraps) and keep the rule deterministic.
            free = [c for c in candidates if c not in taken]
            if not free:
                break  # upstream stops early: fewer than `limit` values, hi possibly missing
            value = min(free, key=lambda c: (abs(c - x), c))
        taken.add(value)
    return sorted(taken)


class Extension2DProfile(ReleaseProfile):
    """vllm-fork 1.19 .. 1.21.3 on the 2-D bucketing of vllm-hpu-extension."""

    engine = "v0"
    dims = 2
    default_strategy = LINEAR

    def __init__(self, name: str, short: str, fork_tags: str, pad_rule: Callable[[int, int, int], int],
                 *, uses_model_len: bool, has_exponential: bool, pa_aware: bool, aliases: tuple = ()):
        self.name = name
        self.aliases = aliases
        self.upstream = f"HabanaAI/vllm-hpu-extension@{short} via vllm-fork {fork_tags}"
        self.strategies = (LINEAR, EXPONENTIAL) if has_exponential else (LINEAR,)
        self._pad = pad_rule
        self._uses_model_len = uses_model_len  # runner passes max_model_len (2b4ba56 on)
        self._has_exp = has_exponential
        self._pa_aware = pa_aware  # the extension itself reads VLLM_CONTIGUOUS_PA (29bc7a4)
        # 1.20+ runners refuse speculative decoding with contiguous PA.
        self.model_inputs = () if name == "fork-1.19" else ("num_speculative_tokens",)
        if uses_model_len:  # 1.21 runners skip decode buckets for pooling models
            self.model_inputs += ("pooling",)

    # --- strategy ---

    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
        if self._has_exp and env.get(_SWITCH, "false").lower() == "true":
            return EXPONENTIAL, []
        return LINEAR, []

    def strategy_env(self, strategy: str) -> dict[str, str]:
        if not self._has_exp:
            return {}
        return {_SWITCH: "true" if strategy == EXPONENTIAL else "false"}

    def bucket_variables(self, strategy: str) -> tuple[str, ...]:
        params = ("LIMIT",) if strategy == EXPONENTIAL else ("MIN", "STEP", "MAX")
        names = tuple(_var(ph, d, p) for ph, d in _DIMS for p in params)
        return names + ((_SWITCH,) if self._has_exp else ())

    # --- generation ---

    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        env = cfg.env
        S, B, L = cfg.max_num_seqs, cfg.block_size, cfg.max_model_len
        T, N = cfg.max_num_batched_tokens, cfg.num_hpu_blocks
        P = cfg.max_num_prefill_seqs or S
        contiguous, contiguous_at_init = self._contiguous_pa(cfg)
        if not self._uses_model_len:  # 1.20: checked before any bucket is built (1.21: after the prompt ones)
            self._runner_checks(cfg, contiguous)
        plan = BucketPlan(profile=self.name, strategy=strategy, prompt=[], decode=[], dims=2,
                          prefix_caching=bool(cfg.prefix_caching), contiguous_pa=contiguous)
        # The extension's own defaults; 1024/2048 are hard-coded before 2b4ba56.
        prompt_seq_max = L if self._uses_model_len else 1024
        max_blocks = max(B, S * (L if self._uses_model_len else 2048) // B)
        defaults = {("PROMPT", "BS"): (1, 32, P), ("DECODE", "BS"): (1, 32, S),
                    ("PROMPT", "SEQ"): (B, B, prompt_seq_max), ("DECODE", "BLOCK"): (B, B, max_blocks)}
        if strategy == EXPONENTIAL:
            cfgs = self._read_exponential(plan, env, defaults)
        else:
            cfgs = self._read_linear(plan, env, defaults)
            cfgs = self._merged_prefill(plan, env, cfgs, T)
        bs_p, seq_p, bs_d, blk_d = (cfgs[k] for k in (("PROMPT", "BS"), ("PROMPT", "SEQ"),
                                                        ("DECODE", "BS"), ("DECODE", "BLOCK")))
        kind = ", limit" if strategy == EXPONENTIAL else ""
        plan.log_lines.append(f"Prompt bucket config (min, step, max_warmup{kind}) bs:{bs_p}, seq:{seq_p}")
        plan.log_lines.append(f"Decode bucket config (min, step, max_warmup{kind}) bs:{bs_d}, block:{blk_d}")

        if strategy == EXPONENTIAL:
            # 29bc7a4 reads VLLM_CONTIGUOUS_PA when each range is built: prompt ranges at runner init,
            # before the runner defaults it to False for APC; decode ranges at warm-up, after.
            def rng(c, contig, phase, dim):
                return _exp_range(*c, end_at_max=self._pa_aware and contig, name=_var(phase, dim, "LIMIT"))
            bs_range = rng(bs_p, contiguous_at_init, "PROMPT", "BS")
            seq_range = rng(seq_p, contiguous_at_init, "PROMPT", "SEQ")
            self._prompt(plan, bs_range, seq_range, T, L, bs_p, seq_p)
        else:
            bs_range, seq_range = (self._linear_range(c, "PROMPT", d) for c, d in ((bs_p, "BS"), (seq_p, "SEQ")))
            self._prompt(plan, bs_range, seq_range, T, None, bs_p, seq_p)
        if self._uses_model_len:
            # 1.21 runners construct the context (prompt buckets) first, then check.
            self._runner_checks(cfg, contiguous)
        if cfg.pooling and "pooling" in self.model_inputs:
            # 1.21 runners generate no decode buckets for pooling models (no decode phase).
            decode = []
        elif strategy == EXPONENTIAL:
            # Decode blocks always span up to num_hpu_blocks; the limit stays the one derived above.
            bs_range = rng(bs_d, contiguous, "DECODE", "BS")
            blk_range = rng((*blk_d[:2], N, blk_d[3]), contiguous, "DECODE", "BLOCK")
            decode = [(bs, b) for bs in bs_range for b in blk_range]
        else:
            decode = self._linear_decode(plan, env, bs_d, blk_d, N, contiguous)
        plan.decode = sorted(decode, key=lambda b: (b[0] * b[1], b[1], b[0]))
        if not (cfg.pooling and "pooling" in self.model_inputs):
            plan.log_lines.append(f"Generated {len(plan.decode)} decode buckets [bs, total_blocks]: "
                                  f"{sorted(plan.decode)}")

        self._engine_settings(plan, cfg, P, contiguous)
        self._ignored_settings(plan, env, strategy)
        plan.state = {"prompt_cfg": (bs_p, seq_p), "decode_cfg": (bs_d, blk_d), "num_hpu_blocks": N}
        return plan

    def _contiguous_pa(self, cfg: ServerConfig) -> tuple[bool, bool]:
        """(contiguous PA from warm-up on, as the extension saw it at runner init)."""
        raw = cfg.env.get("VLLM_CONTIGUOUS_PA")
        at_init = (raw if raw is not None else "true").lower() == "true"
        if cfg.prefix_caching and self._uses_model_len:
            # 1.21 runners: APC defaults contiguous PA off (and refuse it when explicitly on: _runner_checks).
            return False, at_init
        return at_init, at_init

    def _runner_checks(self, cfg: ServerConfig, contiguous: bool):
        """What the runner refuses at start-up: contiguous PA explicitly on with APC (1.21), speculative
        decoding with contiguous PA (1.20+)."""
        raw = cfg.env.get("VLLM_CONTIGUOUS_PA")
        if cfg.prefix_caching and self._uses_model_len and raw is not None and raw.lower() == "true":
            raise BucketConfigError("AssertionError: Contiguous PA doesn't support APC", "VLLM_CONTIGUOUS_PA")
        if cfg.num_speculative_tokens and contiguous and "num_speculative_tokens" in self.model_inputs:
            raise BucketConfigError("ValueError: Speculative decoding is not supported with contiguous PA, please set "
                                    "VLLM_CONTIGUOUS_PA=false", "VLLM_CONTIGUOUS_PA")

    def _read_linear(self, plan, env, defaults):
        cfgs = {}
        for phase, dim in _DIMS:
            values = []
            for param, default in zip(("MIN", "STEP", "MAX"), defaults[phase, dim], strict=True):
                name = _var(phase, dim, param)
                value, source = env_int(env, name, default)
                plan.log_lines.append(f"{name}={value} (default:{default})")
                plan.settings.append(Setting(name, value, source))
                values.append(value)
            cfgs[phase, dim] = values
        return cfgs

    def _read_exponential(self, plan, env, defaults):
        cfgs = {}
        for phase, dim in _DIMS:
            lo, step, hi = defaults[phase, dim]
            if dim == "BS":
                step = 1  # exponential bs ranges use step 1 (linear defaults use 32)
            for param, value in zip(("MIN", "STEP", "MAX"), (lo, step, hi), strict=True):
                name = _var(phase, dim, param)
                plan.log_lines.append(f"[non-modifiable] {name}={value}")
                note = "[non-modifiable] under exponential bucketing"
                if name in env:
                    note += f"; your value {env[name]!r} is overwritten"
                if (phase, dim, param) == ("DECODE", "BLOCK", "MAX"):
                    note += f"; logged as {value}, but decode buckets are generated up to num_hpu_blocks"
                plan.settings.append(Setting(name, value, FORCED, note))
            name = _var(phase, dim, "LIMIT")
            default = math.ceil(math.log2(hi)) + 1
            limit, source = env_int(env, name, default)
            plan.log_lines.append(f"{name}={limit} (default: {default})")
            plan.settings.append(Setting(name, limit, source))
            cfgs[phase, dim] = [lo, step, hi, limit]
        return cfgs

    def _merged_prefill(self, plan, env, cfgs, T):
        """VLLM_MERGED_PREFILL (1.21 runners, linear context only) folds prompts into one bs=1 row."""
        if not self._uses_model_len:
            return cfgs
        on = env.get("VLLM_MERGED_PREFILL", "false").lower() == "true"
        plan.settings.append(Setting("VLLM_MERGED_PREFILL", on, USER if "VLLM_MERGED_PREFILL" in env else DEFAULT))
        if on:
            old_bs, old_seq = cfgs["PROMPT", "BS"], cfgs["PROMPT", "SEQ"]
            cfgs["PROMPT", "BS"] = (1, 1, 1)
            cfgs["PROMPT", "SEQ"] = (old_seq[0], old_seq[1], min(old_bs[2] * old_seq[2], T))
            plan.log_lines += ["Merged prefill is enabled!", "Overriding prompt bucketing settings!",
                               f"prompt bs cfg: {tuple(old_bs)} -> {cfgs['PROMPT', 'BS']}",
                               f"prompt seq cfg: {tuple(old_seq)} -> {cfgs['PROMPT', 'SEQ']}"]
        return cfgs

    @staticmethod
    def _linear_range(c, phase: str, dim: str, hi_name: str | None = None) -> list[int]:
        label = f"VLLM_{phase}_{dim}_BUCKET"
        if hi_name and c[0] > c[2]:
            raise BucketConfigError(
                f"{label}_MIN={c[0]} is greater than {hi_name}={c[2]}: Min. batch size cannot be greater "
                "than max. batch size. If you want to skip warmup, set VLLM_SKIP_WARMUP=true", f"{label}_MIN")
        return linear_range(c[0], c[1], c[2], name=label)

    def _prompt(self, plan, bs_range, seq_range, T, L, bs_cfg, seq_cfg):
        """Cartesian product, token-budget filter (exponential: also seq <= max_model_len), sort; shared by
        configurations that differ elsewhere (buckets/memo.py), keyed by everything it reads."""
        key = ("extension-2d prompt", tuple(bs_range), tuple(seq_range), T, L, repr(bs_cfg), repr(seq_cfg))
        prompt, omitted, lines, warnings = remembered(key, lambda: self._prompt_lists(bs_range, seq_range, T, L,
                                                                                      bs_cfg, seq_cfg))
        plan.prompt, plan.omitted_prompt = list(prompt), list(omitted)
        plan.log_lines += lines
        plan.warnings += warnings

    @staticmethod
    def _prompt_lists(bs_range, seq_range, T, L, bs_cfg, seq_cfg) -> tuple[tuple, tuple, list, list]:
        """(prompt buckets, omitted ones, log lines, warnings) of _prompt."""
        product = [(bs, seq) for bs in bs_range for seq in seq_range]
        if not product:
            raise BucketConfigError("No buckets could be captured with following config (min, step, max_warmup): "
                                    f"bs:{bs_cfg}, seq:{seq_cfg}", "VLLM_PROMPT_SEQ_BUCKET_MIN")
        kept = [b for b in product if b[0] * b[1] <= T and (L is None or b[1] <= L)]
        kept_set = set(kept)
        omitted = [b for b in product if b not in kept_set]
        if not kept:
            smallest = min(product, key=lambda b: b[0] * b[1])
            msg = ("The current bucketing configuration (min, step, max_warmup): "
                   f"bs:{bs_cfg}, seq:{seq_cfg} cannot be used with specified max_num_batched_tokens ({T}), "
                   f"as the smallest bucket ({smallest[0] * smallest[1]}) would exceed token budget. Please "
                   "increase max_num_batched_tokens or decrease bucket minimum. Ignoring max_num_batched_tokens "
                   "at risk of out-of-memory errors.")
            warnings = [msg]
            kept, omitted = product, []
        else:
            warnings = []
        prompt = sorted(kept, key=lambda b: (b[0] * b[1], b[1], b[0]))
        omitted = sorted(omitted)
        lines = [*warnings,
                 f"Generated {len(prompt)} prompt buckets [bs, seq]: {sorted(prompt)}",
                 f"Omitted {len(omitted)} prompt buckets due to exceeded token budget (max_num_batched_tokens={T})",
                 f"Omitted prompt buckets: {omitted}"]
        return tuple(prompt), tuple(omitted), lines, warnings

    def _linear_decode(self, plan, env, bs_cfg, blk_cfg, N, contiguous):
        blk_cfg, hi_var = list(blk_cfg), "VLLM_DECODE_BLOCK_BUCKET_MAX"
        hi_name = hi_var
        # 29bc7a4: with contiguous PA and no user max, block ids up to num_hpu_blocks are bucketed.
        stretch = self._pa_aware and contiguous and hi_var not in env
        if stretch:
            blk_cfg[2], hi_name = N, "num_hpu_blocks"
            plan.settings = [
                s if s.name != hi_var else Setting(s.name, N, DEFAULT, f"default {s.value} replaced by num_hpu_blocks")
                for s in plan.settings
            ]
        bs_range = self._linear_range(bs_cfg, "DECODE", "BS")
        blocks = self._linear_range(blk_cfg, "DECODE", "BLOCK", hi_name)
        if stretch and N not in blocks:
            blocks.append(N)
        decode = []
        for bs in bs_range:
            for b in blocks:
                if self._pa_aware and bs > b:
                    continue  # 29bc7a4: fewer blocks than sequences cannot happen
                if b >= N:  # every bs gets exactly one bucket at num_hpu_blocks, then stops
                    decode.append((bs, N))
                    break
                decode.append((bs, b))
        return decode

    def _engine_settings(self, plan, cfg, P, contiguous):
        given = cfg.max_num_prefill_seqs is not None
        plan.settings.append(Setting("max_num_prefill_seqs", P, USER if given else DEFAULT,
                                     "" if given else "defaults to max_num_seqs; prompt bs max"))
        if self._uses_model_len:
            plan.settings.append(Setting("max_model_len", cfg.max_model_len, USER, "prompt seq max, decode block max"))
        plan.settings.append(Setting("num_hpu_blocks", cfg.num_hpu_blocks, DEFAULT,
                                     "KV blocks after memory profiling; caps decode block buckets"))
        note = ("also shapes decode buckets (29bc7a4)" if self._pa_aware else
                "runner only: decode pads the highest block id (on) or the block count (off)")
        if cfg.prefix_caching and self._uses_model_len:
            note += "; defaulted off because prefix caching (APC) is on"
        plan.settings.append(Setting("VLLM_CONTIGUOUS_PA", contiguous,
                                     USER if "VLLM_CONTIGUOUS_PA" in cfg.env else DEFAULT, note))

    def _ignored_settings(self, plan, env, strategy):
        if self._has_exp:
            plan.settings.append(Setting(_SWITCH, strategy == EXPONENTIAL, USER if _SWITCH in env else DEFAULT))
            if strategy == EXPONENTIAL and "VLLM_MERGED_PREFILL" in env:
                plan.settings.append(Setting("VLLM_MERGED_PREFILL", env["VLLM_MERGED_PREFILL"], IGNORED,
                                             "the exponential context ignores merged prefill"))
        known = {s.name for s in plan.settings}
        for name in sorted(n for n in env if _BUCKETISH.match(n) and n not in known):
            if name.endswith("_LIMIT"):
                note = ("read only by exponential bucketing (VLLM_EXPONENTIAL_BUCKETING=true)" if self._has_exp
                        else "this release has no exponential bucketing")
            elif name == _SWITCH:
                note = "this release has linear bucketing only"
            elif name.startswith("VLLM_DECODE_SEQ_BUCKET_"):
                note = "fork 1.17 name; decode is bucketed in blocks (VLLM_DECODE_BLOCK_BUCKET_*)"
            elif name.startswith(("VLLM_PROMPT_QUERY_", "VLLM_PROMPT_CTX_", "VLLM_BUCKETING_")) or "_PAD_" in name:
                note = "vllm-gaudi plugin variable; vllm-fork does not read it"
            else:
                note = "not read by this release"
            plan.settings.append(Setting(name, env[name], IGNORED, note))

    # --- padding (spec C.1 linear, B.2 exponential) ---

    def pad_prompt(self, plan: BucketPlan, bs: int, seq: int, ctx: int = 0) -> PadResult:
        # ctx is not a bucket dimension in the 2-D era: with APC the runner pads the query length only.
        return self._pad_shape(plan, "prompt", (bs, seq), cap=None)

    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        return self._pad_shape(plan, "decode", (bs, blocks), cap=plan.state["num_hpu_blocks"])

    def _pad_shape(self, plan, phase, shape, cap):
        buckets = plan.prompt if phase == "prompt" else plan.decode
        warnings = []
        if plan.strategy == EXPONENTIAL:
            padded = []
            for dim, v in enumerate(shape):
                values = [b[dim] for b in buckets]
                found = next((p for p in sorted(values) if p >= v), None)
                if found is None:
                    found = v
                    if self._pa_aware:  # 29bc7a4 logs and runs the shape unpadded
                        warnings.append(f"Couldn't find a bucket for value: {v} in {values} dim:{dim}")
                    else:  # 2b4ba56 calls pdb.set_trace(): a served process stalls there
                        warnings.append(f"no {phase} bucket >= {v} in dim {dim}: 2b4ba56 drops into pdb here "
                                        "(the server stalls); modelled as an unpadded, unwarmed shape")
                padded.append(found)
        else:
            cfgs = plan.state[f"{phase}_cfg"]
            padded = [self._pad(v, c[0], c[1]) for v, c in zip(shape, cfgs, strict=True)]
        if cap is not None:
            padded[1] = min(padded[1], cap)
        key = f"{phase}_set"
        if key not in plan.state:
            plan.state[key] = frozenset(buckets)
        bucket = tuple(padded)
        return PadResult(tuple(shape), bucket, bucket in plan.state[key], "\n".join(warnings) or None)


PROFILES: list[ReleaseProfile] = [
    Extension2DProfile("fork-1.19", "4ff86cf", "v0.6.4.post2+Gaudi-1.19.0", _pad_4ff,
                       uses_model_len=False, has_exponential=False, pa_aware=False),
    Extension2DProfile("fork-1.20", "d4b0d38", "v0.6.6.post1+Gaudi-1.20.0", _pad_d4b,
                       uses_model_len=False, has_exponential=False, pa_aware=False),
    Extension2DProfile("fork-1.21.0", "2b4ba56", "v0.7.2+Gaudi-1.21.0", _pad_2b4,
                       uses_model_len=True, has_exponential=True, pa_aware=False),
    Extension2DProfile("fork-1.21.2", "29bc7a4", "v0.7.2+Gaudi-1.21.2 / v0.8.5.post1+Gaudi-1.21.3", _pad_29b,
                       uses_model_len=True, has_exponential=True, pa_aware=True, aliases=("fork-1.21.3",)),
]
