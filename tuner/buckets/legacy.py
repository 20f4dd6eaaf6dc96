"""Fork 1.17 and 1.18: bucketing that still lived inside vllm-fork's `habana_model_runner.py`.

Both releases run the v0 engine with linear 2-D buckets (bs, seq) for prompts. They differ in the
decode dimension: 1.17 buckets the longest sequence's length in tokens (VLLM_DECODE_SEQ_BUCKET_*),
1.18 the total number of KV blocks referenced by the batch (VLLM_DECODE_BLOCK_BUCKET_*). 1.18 also
drops ranged values below MIN, filters prompt buckets by the token budget, caps decode buckets near
the KV-cache size, and logs every variable it reads (with a bug: "(default:min)" where the default
value belongs).

The habana_main builds between the two releases (vllm-fork #208 of 2024-08-27 on) kept 1.17's lists and
added the token budget; fork-1.17 models them with ServerConfig.token_budget_phases.

Quirks reproduced on purpose (see the 1.17/1.18 sources):
* Batches are padded by repeating the first sequence, so on 1.18 the padding sequences add their own
  blocks to the decode block count before it is bucketed.
* 1.17 never pads the decode length through its bucket config: the shape is the block-table width,
  i.e. the longest sequence rounded up to the block size.
* 1.18 builds its buckets only at warm-up; the "Generated"/"Omitted" lines are logged there, while the
  reference vectors capture what `_setup_buckets` and the generators log. We therefore keep the
  warm-up lines apart, in `plan.warmup_log_lines`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .base import (
    DEFAULT,
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

_PARAMS = ("MIN", "STEP", "MAX")
# Variables from other releases that a user may carry over; we flag them as ignored.
_BUCKET_LOOKING = re.compile(r"^VLLM_\w*BUCKET")
_OTHER_BUCKET_SWITCHES = ("VLLM_CONTIGUOUS_PA", "VLLM_MERGED_PREFILL")


def _round_up(value: int, k: int) -> int:
    return (value + k - 1) // k * k  # upstream's formula (a negative STEP rounds it differently)


def _pow2_at_least(value: int) -> int:
    """Smallest power of two >= value (1 for value <= 1), as both releases' `next_pow2` compute it."""
    return 1 << max(value - 1, 0).bit_length()


def _tokens_key(bucket):
    # Both releases order bucket lists by padded tokens, then length, then batch size.
    return (bucket[0] * bucket[1], bucket[1], bucket[0])


class _ForkProfile(ReleaseProfile):
    """What 1.17 and 1.18 share: linear only, four (min, step, max) triples read in the same order."""

    engine = "v0"
    strategies = (LINEAR,)
    default_strategy = LINEAR
    dims = 2
    decode_dim = ""  # "SEQ" (1.17) or "BLOCK" (1.18)
    drop_below_min = True  # range values below MIN are dropped (from 1.18 on)

    # -- strategy -------------------------------------------------------------------------------
    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
        return LINEAR, []  # these releases have no switch; exponential arrived with the extension

    def strategy_env(self, strategy: str) -> dict[str, str]:
        if strategy != LINEAR:
            raise BucketConfigError(f"strategy {strategy!r} is not available on {self.name}", "strategy")
        return {}

    def _triples(self) -> tuple[tuple[str, str], ...]:
        # The order in which `_setup_buckets` reads (and on 1.18 logs) them.
        return (("PROMPT", "BS"), ("DECODE", "BS"), ("PROMPT", "SEQ"), ("DECODE", self.decode_dim))

    def bucket_variables(self, strategy: str) -> tuple[str, ...]:
        self.strategy_env(strategy)
        return tuple(f"VLLM_{ph}_{dim}_BUCKET_{p}" for ph, dim in self._triples() for p in _PARAMS)

    # -- reading --------------------------------------------------------------------------------
    def _defaults(self, cfg: ServerConfig) -> dict[str, tuple[int, str]]:
        """Variable -> (default value, how the release derives it)."""
        raise NotImplementedError

    def _read(self, cfg: ServerConfig) -> tuple[dict[str, list[int]], list[Setting]]:
        defaults = self._defaults(cfg)
        triples: dict[str, list[int]] = {}
        settings = []
        for phase, dim in self._triples():
            prefix = f"VLLM_{phase}_{dim}_BUCKET"
            values = []
            for p in _PARAMS:
                name = f"{prefix}_{p}"
                default, how = defaults[name]
                value, source = env_int(cfg.env, name, default)
                note = f"default {how}" if source == DEFAULT else f"default would be {default} ({how})"
                settings.append(Setting(name, value, source, note))
                values.append(value)
            triples[prefix] = values
        return triples, settings

    def _ignored(self, cfg: ServerConfig) -> list[Setting]:
        read = set(self.bucket_variables(LINEAR))
        out = []
        for name in sorted(cfg.env):
            if name in read or not (_BUCKET_LOOKING.match(name) or name in _OTHER_BUCKET_SWITCHES):
                continue
            note = f"{self.name} does not read it"
            if name.startswith("VLLM_DECODE_SEQ_BUCKET_") or name.startswith("VLLM_DECODE_BLOCK_BUCKET_"):
                unit = "blocks" if self.decode_dim == "BLOCK" else "context tokens"
                note += f"; its decode dimension is {unit} (VLLM_DECODE_{self.decode_dim}_BUCKET_*)"
            elif name in ("VLLM_EXPONENTIAL_BUCKETING", "VLLM_BUCKETING_STRATEGY"):
                note += "; it has linear bucketing only"
            out.append(Setting(name, cfg.env[name], IGNORED, note))
        if cfg.max_num_prefill_seqs is not None:
            out.append(Setting("max_num_prefill_seqs", cfg.max_num_prefill_seqs, IGNORED,
                               f"{self.name} has no --max-num-prefill-seqs; prompt bs max comes from "
                               "VLLM_PROMPT_BS_BUCKET_MAX (default min(max_num_seqs, 64))"))
        return out

    def _range(self, triple: list[int], prefix: str) -> list[int]:
        lo, step, hi = triple
        return linear_range(lo, step, hi, drop_below_min=self.drop_below_min, name=prefix)

    # -- padding helpers ------------------------------------------------------------------------
    def _pad_value(self, value: int, triple: list[int]) -> int:
        raise NotImplementedError

    def _check_plan(self, plan: BucketPlan, **shape: int):
        if plan.profile != self.name:
            raise ValueError(f"plan was built by {plan.profile}, not {self.name}")
        for what, value in shape.items():
            if value < (0 if what == "ctx" else 1):
                raise BucketConfigError(f"{what} must be {'>= 0' if what == 'ctx' else '>= 1'}, got {value}", what)

    def pad_prompt(self, plan: BucketPlan, bs: int, seq: int, ctx: int = 0) -> PadResult:
        self._check_plan(plan, bs=bs, seq=seq, ctx=ctx)
        st = plan.state
        # The prompt tensor spans the whole sequence, cached prefix included (2-D era: no ctx axis),
        # and is never narrower than one block.
        length = seq + ctx * st["block_size"]
        bucket = (
            self._pad_value(bs, st["VLLM_PROMPT_BS_BUCKET"]),
            max(self._pad_value(length, st["VLLM_PROMPT_SEQ_BUCKET"]), st["block_size"]),
        )
        return PadResult((bs, seq), bucket, bucket in st["prompt_set"])


class Fork117(_ForkProfile):
    name = "fork-1.17"
    aliases = ("fork-1.17.0",)
    upstream = "HabanaAI/vllm-fork@v0.5.3.post1-Gaudi-1.17.0 (1e0e492)"
    decode_dim = "SEQ"
    drop_below_min = False  # 1.17 keeps stable values below MIN when MIN > STEP
    model_inputs = ("token_budget_phases",)  # the habana_main builds after 1.17 (ServerConfig)

    def _defaults(self, cfg):
        s, b = cfg.max_num_seqs, cfg.block_size
        return {
            "VLLM_PROMPT_BS_BUCKET_MIN": (1, "1"),
            "VLLM_PROMPT_BS_BUCKET_STEP": (32, "32"),
            "VLLM_PROMPT_BS_BUCKET_MAX": (min(s, 64), "min(max_num_seqs, 64)"),
            "VLLM_DECODE_BS_BUCKET_MIN": (1, "1"),
            "VLLM_DECODE_BS_BUCKET_STEP": (128, "128"),
            "VLLM_DECODE_BS_BUCKET_MAX": (s, "max_num_seqs"),
            "VLLM_PROMPT_SEQ_BUCKET_MIN": (b, "block_size"),
            "VLLM_PROMPT_SEQ_BUCKET_STEP": (b, "block_size"),
            "VLLM_PROMPT_SEQ_BUCKET_MAX": (1024, "1024"),
            "VLLM_DECODE_SEQ_BUCKET_MIN": (b, "block_size"),
            "VLLM_DECODE_SEQ_BUCKET_STEP": (b, "block_size"),
            "VLLM_DECODE_SEQ_BUCKET_MAX": (2048, "2048"),
        }

    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        self.strategy_env(strategy)
        t, settings = self._read(cfg)
        pbs, pseq = t["VLLM_PROMPT_BS_BUCKET"], t["VLLM_PROMPT_SEQ_BUCKET"]
        dbs, dseq = t["VLLM_DECODE_BS_BUCKET"], t["VLLM_DECODE_SEQ_BUCKET"]
        # Plain products at runner init: no token budget, no KV-cache bound.
        # Built (and checked) in upstream's order: prompt bs, prompt seq, decode bs, decode seq.
        ranges = {prefix: self._range(t[prefix], prefix) for prefix in (
            "VLLM_PROMPT_BS_BUCKET", "VLLM_PROMPT_SEQ_BUCKET", "VLLM_DECODE_BS_BUCKET", "VLLM_DECODE_SEQ_BUCKET")}
        prompt = sorted(((b, s) for b in ranges["VLLM_PROMPT_BS_BUCKET"]
                         for s in ranges["VLLM_PROMPT_SEQ_BUCKET"]), key=_tokens_key)
        decode = sorted(((b, s) for b in ranges["VLLM_DECODE_BS_BUCKET"]
                         for s in ranges["VLLM_DECODE_SEQ_BUCKET"]), key=_tokens_key)
        tokens, warnings = cfg.max_num_batched_tokens, []
        prompt, omitted_prompt, prompt_lines = self._budget(prompt, "prompt", cfg, pbs, pseq, warnings)
        decode, _, decode_lines = self._budget(decode, "decode", cfg, dbs, dseq, warnings)
        log = [
            f"Prompt bucket config (min, step, max_warmup) bs:{pbs}, seq:{pseq}",
            f"Generated {len(prompt)} prompt buckets: {sorted(prompt)}", *prompt_lines,
            f"Decode bucket config (min, step, max_warmup) bs:{dbs}, seq:{dseq}",
            f"Generated {len(decode)} decode buckets: {sorted(decode)}", *decode_lines,
        ]
        if cfg.token_budget_phases:
            settings.append(Setting("max_num_batched_tokens", tokens, DEFAULT,
                                    f"{' and '.join(cfg.token_budget_phases)} buckets with bs*seq above it are "
                                    "omitted (habana_main after 1.17)"))
        return BucketPlan(
            profile=self.name, strategy=LINEAR, prompt=prompt, decode=decode,
            settings=settings + self._ignored(cfg), warnings=warnings, log_lines=log, dims=2,
            omitted_prompt=omitted_prompt,
            prefix_caching=bool(cfg.prefix_caching), contiguous_pa=False,
            state={**t, "block_size": cfg.block_size, "prompt_set": frozenset(prompt),
                   "decode_set": frozenset(decode)},
        )

    @staticmethod
    def _budget(buckets, phase: str, cfg: ServerConfig, bs_cfg, seq_cfg, warnings: list[str]):
        """The token budget of the habana_main builds after 1.17 (cfg.token_budget_phases): the kept
        buckets, the omitted ones and the lines those builds print; everything kept when none fits."""
        if phase not in cfg.token_budget_phases:
            return buckets, [], []
        tokens = cfg.max_num_batched_tokens
        kept = [c for c in buckets if c[0] * c[1] <= tokens]
        if not kept:
            smallest = min(c[0] * c[1] for c in buckets)
            msg = (f"The current bucketing configuration (min, step, max_warmup): bs:{bs_cfg}, seq:{seq_cfg} "
                   f"cannot be used with specified max_num_batched_tokens ({tokens}), as the smallest bucket "
                   f"({smallest}) would exceed token budget. Please increase max_num_batched_tokens or decrease "
                   "bucket minimum Ignoring max_num_batched_tokens at risk of out-of-memory errors.")
            warnings.append(msg)
            return buckets, [], [msg]
        omitted = sorted(c for c in buckets if c[0] * c[1] > tokens)
        return kept, omitted, [f"Omitted {len(omitted)} {phase} buckets due to exceeded token budget "
                               f"(max_num_batched_tokens={tokens})"]

    def _pad_value(self, value, triple):
        # MIN plays no part: below STEP the next power of two (capped at STEP), else a STEP multiple.
        step = triple[1]
        return min(_pow2_at_least(value), step) if value < step else _round_up(value, step)

    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        """`blocks` is, on 1.17, the longest sequence's length in tokens (the decode dimension)."""
        self._check_plan(plan, bs=bs, blocks=blocks)
        st = plan.state
        # The decode length is the block-table width times the block size; the SEQ config is only
        # used to pick which lengths to warm up.
        bucket = (self._pad_value(bs, st["VLLM_DECODE_BS_BUCKET"]), _round_up(blocks, st["block_size"]))
        return PadResult((bs, blocks), bucket, bucket in st["decode_set"])


class Fork118(_ForkProfile):
    name = "fork-1.18"
    model_inputs = ("lora",)
    aliases = ("fork-1.18.0",)
    upstream = "HabanaAI/vllm-fork@v0.5.3.post1+Gaudi-1.18.0 (8492294)"
    decode_dim = "BLOCK"

    def _defaults(self, cfg):
        s, b = cfg.max_num_seqs, cfg.block_size
        # With LoRA the runner lowers the 64 cap to max_num_batched_tokens // block_size when smaller.
        cap, cap_text = 64, "64"
        if cfg.lora and cap > cfg.max_num_batched_tokens // b:
            cap, cap_text = cfg.max_num_batched_tokens // b, "max_num_batched_tokens // block_size (LoRA)"
        return {
            "VLLM_PROMPT_BS_BUCKET_MIN": (1, "1"),
            "VLLM_PROMPT_BS_BUCKET_STEP": (min(s, 32), "min(max_num_seqs, 32)"),
            "VLLM_PROMPT_BS_BUCKET_MAX": (min(s, cap), f"min(max_num_seqs, {cap_text})"),
            "VLLM_DECODE_BS_BUCKET_MIN": (min(s, 32), "min(max_num_seqs, 32)"),
            "VLLM_DECODE_BS_BUCKET_STEP": (min(s, 32), "min(max_num_seqs, 32)"),
            "VLLM_DECODE_BS_BUCKET_MAX": (s, "max_num_seqs"),
            "VLLM_PROMPT_SEQ_BUCKET_MIN": (b, "block_size"),
            "VLLM_PROMPT_SEQ_BUCKET_STEP": (b, "block_size"),
            "VLLM_PROMPT_SEQ_BUCKET_MAX": (1024, "1024"),
            "VLLM_DECODE_BLOCK_BUCKET_MIN": (128, "128"),
            "VLLM_DECODE_BLOCK_BUCKET_STEP": (128, "128"),
            "VLLM_DECODE_BLOCK_BUCKET_MAX": (max(128, s * 2048 // b), "max(128, max_num_seqs * 2048 // block_size)"),
        }

    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        self.strategy_env(strategy)
        t, settings = self._read(cfg)
        pbs, pseq = t["VLLM_PROMPT_BS_BUCKET"], t["VLLM_PROMPT_SEQ_BUCKET"]
        dbs, dblk = t["VLLM_DECODE_BS_BUCKET"], t["VLLM_DECODE_BLOCK_BUCKET"]
        tokens, n_blocks = cfg.max_num_batched_tokens, cfg.num_hpu_blocks
        # The per-variable lines carry the key name where the default was meant to be (upstream bug).
        log = [f"{s.name}={s.value} (default:{s.name.rsplit('_', 1)[1].lower()})" for s in settings]
        log.append(f"Prompt bucket config (min, step, max_warmup) bs:{pbs}, seq:{pseq}")
        log.append(f"Decode bucket config (min, step, max_warmup) bs:{dbs}, block:{dblk}")
        warnings: list[str] = []

        bs_values = self._range(pbs, "VLLM_PROMPT_BS_BUCKET")
        seq_values = self._range(pseq, "VLLM_PROMPT_SEQ_BUCKET")
        candidates = [(b, s) for b in bs_values for s in seq_values]
        if not candidates:
            # Dropping values below MIN can empty a range when no STEP multiple lies in [MIN, MAX].
            empty = "VLLM_PROMPT_BS_BUCKET" if not bs_values else "VLLM_PROMPT_SEQ_BUCKET"
            raise BucketConfigError(
                f"{empty}: no value between MIN and MAX. No buckets could be captured with following "
                f"config (min, step, max_warmup): bs:{pbs}, seq:{pseq}", f"{empty}_MIN")
        kept = [c for c in candidates if c[0] * c[1] <= tokens]
        if kept:
            prompt = sorted(kept, key=_tokens_key)
            omitted = sorted(c for c in candidates if c[0] * c[1] > tokens)
        else:
            # Rather than warm nothing, 1.18 keeps every bucket and says so at ERROR level.
            smallest = min(candidates, key=lambda c: c[0] * c[1])
            msg = (f"The current bucketing configuration (min, step, max_warmup): bs:{pbs}, seq:{pseq} "
                   f"cannot be used with specified max_num_batched_tokens ({tokens}), as the smallest "
                   f"bucket ({smallest[0] * smallest[1]}) would exceed token budget. Please increase "
                   "max_num_batched_tokens or decrease bucket minimum Ignoring max_num_batched_tokens "
                   "at risk of out-of-memory errors.")
            warnings.append(msg)
            log.append(msg)
            prompt, omitted = sorted(candidates, key=_tokens_key), []

        # Decode: no more blocks than sequences, and nothing beyond the KV cache rounded up to STEP.
        # Upstream's order: both ranges (a STEP of 0 fails in range()), then the cap.
        dbs_values = self._range(dbs, "VLLM_DECODE_BS_BUCKET")
        block_values = self._range(dblk, "VLLM_DECODE_BLOCK_BUCKET")
        last = _round_up(n_blocks, dblk[1])
        decode = sorted(((b, k) for b in dbs_values for k in block_values if b <= k <= last), key=_tokens_key)
        if cfg.lora:
            # The runner's LoRA check keeps bs * second dimension <= max_num_batched_tokens, on both lists:
            # for decode it multiplies bs by the total block count (not tokens).
            prompt = [c for c in prompt if c[0] * c[1] <= tokens]
            decode = [c for c in decode if c[0] * c[1] <= tokens]
            settings.append(Setting("lora", True, USER, "LoRA: prompt bs max capped at max_num_batched_tokens // "
                                    "block_size; buckets with bs * seq (decode: bs * blocks) above "
                                    "max_num_batched_tokens dropped"))
        warmup_log = [
            f"Generated {len(prompt)} prompt buckets [bs, seq]: {sorted(prompt)}",
            f"Omitted {len(omitted)} prompt buckets due to exceeded token budget "
            f"(max_num_batched_tokens={tokens})",
            f"Generated {len(decode)} decode buckets [bs, total_blocks]: {sorted(decode)}",
        ]
        settings += [
            Setting("max_num_batched_tokens", tokens, DEFAULT, "prompt buckets with bs*seq above it are omitted"),
            Setting("num_hpu_blocks", n_blocks, DEFAULT,
                    f"decode block buckets stop at round_up(num_hpu_blocks, STEP) = {last}"),
        ]
        return BucketPlan(
            profile=self.name, strategy=LINEAR, prompt=prompt, decode=decode,
            settings=settings + self._ignored(cfg), warnings=warnings, log_lines=log, warmup_log_lines=warmup_log,
            omitted_prompt=omitted, dims=2, prefix_caching=bool(cfg.prefix_caching), contiguous_pa=False,
            state={**t, "block_size": cfg.block_size, "prompt_set": frozenset(prompt),
                   "decode_set": frozenset(decode)},
        )

    def _pad_value(self, value, triple):
        # The smaller of "next STEP multiple" and "MIN times the next power of two", never below MIN.
        lo, step, _ = triple
        return max(lo, min(_round_up(value, step), lo * _pow2_at_least(value)))

    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        self._check_plan(plan, bs=bs, blocks=blocks)
        st = plan.state
        padded_bs = self._pad_value(bs, st["VLLM_DECODE_BS_BUCKET"])
        # Padding sequences are copies of the first one and bring its blocks along; we assume the
        # first sequence holds an average share. 1.18 does not cap the result at num_hpu_blocks.
        total = blocks + (padded_bs - bs) * -(-blocks // bs)
        bucket = (padded_bs, self._pad_value(total, st["VLLM_DECODE_BLOCK_BUCKET"]))
        return PadResult((bs, blocks), bucket, bucket in st["decode_set"])


PROFILES: list[ReleaseProfile] = [Fork117(), Fork118()]
