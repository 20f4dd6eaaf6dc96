"""Types shared by every release profile of the bucket engine.

A release profile answers three questions for one vLLM-on-Gaudi release:
which buckets it builds from a server configuration (`build`), how it pads a
live batch into them (`pad_prompt` / `pad_decode`), and what it would print
while doing so. Each family of releases (fork 1.17/1.18, the 2-D extension,
the 3-D extension, the vllm-gaudi plugin) subclasses `ReleaseProfile`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

Bucket = tuple[int, ...]

LINEAR = "linear"
EXPONENTIAL = "exponential"
PADDING_AWARE = "padding_aware"
STRATEGIES = (LINEAR, EXPONENTIAL, PADDING_AWARE)

# Where a resolved setting came from.
USER = "user"  # the user set it and the release honours it
DEFAULT = "default"  # the release's default, derived from the server configuration
FORCED = "forced"  # the release overrides whatever the user set (e.g. exponential min/step/max)
IGNORED = "ignored"  # the user set it but this release/strategy never reads it

# The banner a non-linear strategy logs once per linear variable it overwrites (and its frame of stars):
# restated once by the tools, with the switch that keeps the values, never repeated per variable.
OVERWRITE_BANNER = re.compile(r"^\*+$|^Using \w+ Strategy - Your configuration .* will be overwritten")


def is_overwrite_banner(text: str) -> bool:
    return bool(OVERWRITE_BANNER.match(text or ""))


def plain_overwrite(note: str, strategy: str | None) -> str:
    """A setting's note with the release's overwrite banner said in plain words."""
    return re.sub(r"Using \w+ Strategy - Your configuration \S+ will be overwritten!?",
                  f"its {strategy or 'non-linear'} bucketing overwrites it", note or "")


class BucketConfigError(ValueError):
    """The release itself would refuse this configuration (assertion, exception).

    `variable` names the offending setting when there is one, so callers can
    point the user at it.
    """

    def __init__(self, message: str, variable: str | None = None):
        super().__init__(message)
        self.variable = variable


@dataclass(frozen=True)
class ServerConfig:
    """What the bucketing code of a release sees of the server."""

    block_size: int
    max_num_seqs: int
    max_model_len: int
    max_num_batched_tokens: int
    num_hpu_blocks: int  # KV blocks allocated after memory profiling
    env: Mapping[str, str] = field(default_factory=dict)
    # None: the engine's default (v0 fork: off, v1 vllm-gaudi: on).
    prefix_caching: bool | None = None
    # fork only: --max-num-prefill-seqs (None: = max_num_seqs). vllm-gaudi derives its own.
    max_num_prefill_seqs: int | None = None
    # A LoRA adapter config is present (--enable-lora); fork 1.18's runner then caps and filters buckets.
    lora: bool = False
    # Model-dependent settings the runner hands to the bucketing code (vllm-gaudi v0.15.1+ unless noted;
    # docs/bucketing-inputs.md). Speculative decoding: tokens proposed per step (fork 1.20+: refused
    # with contiguous PA). Mamba-like layers: the chunk size the runner passes (v0.26+: 128 when the
    # model sets none) and whether the model set it. Pooling models have no decode phase. The kernel
    # block size of hybrid models' attention, used for decode buckets (v0.26+; None: block_size).
    # main: hybrid / GDN / mamba / interleaved-sliding-window models skip the 3x decode block clamp.
    num_speculative_tokens: int = 0
    mamba_chunk_size: int = 0
    mamba_chunk_size_explicit: bool = True
    pooling: bool = False
    decode_block_size: int | None = None
    skip_decode_block_clamp: bool = False
    # fork-1.17 only: the habana_main builds between the 1.17 and 1.18 releases (vllm-fork #208 of
    # 2024-08-27 on) drop the buckets whose bs x seq exceeds max_num_batched_tokens, in these phases:
    # prompt and decode until #241 (2024-09-04), prompt only after it. The 1.17 release filters nothing.
    token_budget_phases: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("block_size", "max_num_seqs", "max_model_len", "max_num_batched_tokens", "num_hpu_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BucketConfigError(f"{name} must be a positive integer, got {value!r}", name)
        for name in ("num_speculative_tokens", "mamba_chunk_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise BucketConfigError(f"{name} must be a non-negative integer, got {value!r}", name)
        if self.decode_block_size is not None and (not isinstance(self.decode_block_size, int)
                                                   or self.decode_block_size < 1):
            raise BucketConfigError(f"decode_block_size must be a positive integer, got {self.decode_block_size!r}",
                                    "decode_block_size")
        bad = [p for p in self.token_budget_phases if p not in ("prompt", "decode")]
        if bad:
            raise BucketConfigError(f"token_budget_phases: {bad[0]!r} is no phase (prompt, decode)",
                                    "token_budget_phases")
        if self.max_num_prefill_seqs is not None and self.max_num_prefill_seqs < 1:
            raise BucketConfigError(
                f"max_num_prefill_seqs must be a positive integer, got {self.max_num_prefill_seqs!r}",
                "max_num_prefill_seqs",
            )


@dataclass(frozen=True)
class Setting:
    """One resolved knob: an env variable (or engine option) and where its value came from."""

    name: str
    value: int | bool | str | None
    source: str  # USER, DEFAULT, FORCED or IGNORED
    note: str = ""


@dataclass
class BucketPlan:
    """The outcome of bucketing one configuration on one release."""

    profile: str
    strategy: str
    prompt: list[Bucket]  # in the release's order
    decode: list[Bucket]  # in the release's order
    settings: list[Setting] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the release warns about, verbatim
    log_lines: list[str] = field(default_factory=list)  # bucket-related lines, verbatim, in order
    # Bucket lines a release prints only when warmup starts (fork 1.18 generates its lists there),
    # after the memory profiling lines; empty where everything is logged at setup.
    warmup_log_lines: list[str] = field(default_factory=list)
    omitted_prompt: list[Bucket] = field(default_factory=list)  # dropped by the token budget / filters
    # vllm-gaudi v0.15.1 with unified attention: (query, shared_blocks, unique_blocks) buckets, which
    # replace the prompt and decode lists (both empty then).
    unified: list[Bucket] = field(default_factory=list)
    dims: int = 2  # 2: (bs, seq|blocks); 3: (bs, query, ctx_blocks) / (bs, 1, blocks)
    prefix_caching: bool = False
    contiguous_pa: bool = True
    # Family-private state needed to pad later (ranges, configs); not part of the public result.
    state: dict = field(default_factory=dict, repr=False)

    def setting(self, name: str) -> Setting | None:
        for s in self.settings:
            if s.name == name:
                return s
        return None

    def ignored_settings(self) -> list[Setting]:
        return [s for s in self.settings if s.source == IGNORED]


@dataclass(frozen=True)
class PadResult:
    """A live batch shape and the bucket the release runs it in."""

    requested: Bucket
    bucket: Bucket
    warmed: bool  # the bucket was in the warmed-up list before this call
    # What the release logs when it has to improvise (3-D fallback: "... was not prepared. Adding new
    # bucket: ..."); None otherwise. The runtime "was not warmed-up" line is the runner's, not ours.
    warning: str | None = None


class ReleaseProfile(ABC):
    """One vLLM-on-Gaudi release's bucketing behaviour."""

    name: str
    aliases: tuple[str, ...] = ()
    # Why an alias names this profile, where it names another release (e.g. a newer tag whose bucketing
    # code is identical); `bucket-tuner profiles` prints it.
    alias_notes: Mapping[str, str] = {}
    upstream: str = ""  # "repo@ref (commit)" of the code modelled
    engine: str = "v0"  # v0 (fork) or v1 (vllm-gaudi)
    strategies: tuple[str, ...] = (LINEAR,)
    default_strategy: str = LINEAR
    dims: int = 2
    # The runner/model inputs of ServerConfig this release's bucketing reads (beyond the five sizes,
    # prefix caching and max_num_prefill_seqs); the others are reported as IGNORED when set.
    model_inputs: tuple[str, ...] = ()

    @abstractmethod
    def select_strategy(self, env: Mapping[str, str]) -> tuple[str, list[str]]:
        """The strategy this release picks from `env`, and the warnings it prints doing so."""

    @abstractmethod
    def strategy_env(self, strategy: str) -> dict[str, str]:
        """The env variables that make this release pick `strategy`, set explicitly even for the
        default where the release has a switch (the caller's env may select another one)."""

    @abstractmethod
    def bucket_variables(self, strategy: str) -> tuple[str, ...]:
        """Every bucket-related env variable this release reads under `strategy`, switches included.

        An env file for this release lists all of them; a search space may only search these.
        """

    @abstractmethod
    def generate(self, cfg: ServerConfig, strategy: str) -> BucketPlan:
        """Prompt and decode buckets, settings, warnings and log lines for `cfg` under `strategy`.

        Raises BucketConfigError where the release itself would fail.
        """

    @abstractmethod
    def pad_prompt(self, plan: BucketPlan, bs: int, seq: int, ctx: int = 0) -> PadResult:
        """The bucket a prompt batch of `bs` sequences, `seq` tokens (and `ctx` cached blocks) runs in."""

    @abstractmethod
    def pad_decode(self, plan: BucketPlan, bs: int, blocks: int) -> PadResult:
        """The bucket a decode batch of `bs` sequences using `blocks` KV blocks runs in."""

    def build(self, cfg: ServerConfig, strategy: str | None = None) -> BucketPlan:
        """Resolve the strategy (explicit, else from env) and generate the plan."""
        if strategy is None:
            strategy, selection_warnings = self.select_strategy(cfg.env)
        else:
            if strategy not in self.strategies:
                raise BucketConfigError(
                    f"strategy {strategy!r} is not available on {self.name}; "
                    f"it has: {', '.join(self.strategies)}",
                    "strategy",
                )
            env = dict(cfg.env)
            env.update(self.strategy_env(strategy))
            cfg = _replace_env(cfg, env)
            selected, selection_warnings = self.select_strategy(cfg.env)
            if selected != strategy:  # a profile whose strategy_env does not select its strategy
                raise BucketConfigError(f"{self.name}: cannot select strategy {strategy!r} through the "
                                        f"environment (it picks {selected!r})", "strategy")
        plan = self.generate(cfg, strategy)
        plan.warnings[:0] = selection_warnings
        for name, unset in _MODEL_INPUTS.items():
            value = getattr(cfg, name)
            if value != unset and name not in self.model_inputs:
                plan.settings.append(Setting(name, value, IGNORED, f"{self.name} does not read it"))
        return plan


# ServerConfig's runner/model inputs and their "not set" values.
_MODEL_INPUTS = {"lora": False, "num_speculative_tokens": 0, "mamba_chunk_size": 0, "mamba_chunk_size_explicit": True,
                 "pooling": False, "decode_block_size": None, "skip_decode_block_clamp": False,
                 "token_budget_phases": ()}


def _replace_env(cfg: ServerConfig, env: Mapping[str, str]) -> ServerConfig:
    from dataclasses import replace

    return replace(cfg, env=env)


def env_int(env: Mapping[str, str], name: str, default: int) -> tuple[int, str]:
    """`int(env[name])` as the releases read it, with its source; a clear error when not an integer."""
    raw = env.get(name)
    if raw is None:
        return default, DEFAULT
    try:
        return int(raw), USER
    except ValueError:
        raise BucketConfigError(f"{name}={raw!r} is not an integer (ValueError: invalid literal for int() with "
                                f"base 10: {raw!r})", name) from None


def linear_range(lo: int, step: int, hi: int, drop_below_min: bool = True, name: str | None = None) -> list[int]:
    """The 1-D "ramp-up then stable" range that every release's linear strategy uses (`warmup_range`).

    Ramp-up: lo, 2*lo, 4*lo, ... while < step and <= hi; then range(step, hi + 1, step).
    From fork 1.18 on, values below `lo` are dropped (fork 1.17 keeps them).
    `name` is the variable prefix (e.g. "VLLM_PROMPT_BS_BUCKET") used in error messages.
    Upstream's order of failures: the min <= max assertion, then range() refusing a step of 0 (built
    before the lazy ramp-up is consumed), then the ramp-up that never ends from a min <= 0 below the step.
    A negative step yields no stable values and, from a min >= 1, no ramp-up: an empty range, which the
    releases accept (their callers decide what an empty dimension means).
    """
    label = name or "bucket"
    if lo > hi:
        raise BucketConfigError(
            f"{label}_MIN={lo} is greater than {label}_MAX={hi}: "
            "Min. batch size cannot be greater than max. batch size. "
            "If you want to skip warmup, set VLLM_SKIP_WARMUP=true",
            f"{label}_MIN",
        )
    if step == 0:
        raise BucketConfigError(f"{label}_STEP=0: ValueError: range() arg 3 must not be zero", f"{label}_STEP")
    if lo <= 0 and lo < step:
        # Doubling a value <= 0 never reaches the step: the server hangs building the range.
        raise BucketConfigError(f"{label}_MIN={lo}: must be >= 1 (doubling {lo} never reaches "
                                f"{label}_STEP={step}: the release hangs at start-up)", f"{label}_MIN")
    values = []
    v = lo
    while v < step and v <= hi:
        values.append(v)
        v *= 2
    values.extend(range(step, hi + 1, step))
    if drop_below_min:
        values = [v for v in values if v >= lo]
    return values
