"""The static bucket calculator: a first guess of the 12 linear bucket variables without hardware.

Same formulas and output layout as the community script `hpu-vllm-bucket-calc.py`
(docs/bucketing.md section F), so its documented example reproduces exactly. On top of
it, `release_review` says what a given release does with those numbers: which ones it ignores, which it
clamps, and which settings crash it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import BucketConfigError, ServerConfig, get_profile
from .base import LINEAR, is_overwrite_banner

VARIABLE_ORDER = (
    "MAX_MODEL_LEN",
    "VLLM_PROMPT_BS_BUCKET_MIN",
    "VLLM_PROMPT_BS_BUCKET_STEP",
    "VLLM_PROMPT_BS_BUCKET_MAX",
    "VLLM_PROMPT_SEQ_BUCKET_MIN",
    "VLLM_PROMPT_SEQ_BUCKET_STEP",
    "VLLM_PROMPT_SEQ_BUCKET_MAX",
    "VLLM_DECODE_BS_BUCKET_MIN",
    "VLLM_DECODE_BS_BUCKET_STEP",
    "VLLM_DECODE_BS_BUCKET_MAX",
    "VLLM_DECODE_BLOCK_BUCKET_MIN",
    "VLLM_DECODE_BLOCK_BUCKET_STEP",
    "VLLM_DECODE_BLOCK_BUCKET_MAX",
)


class CalcInputError(ValueError):
    """A calculator input that cannot produce meaningful settings; the message names the value."""


@dataclass(frozen=True)
class CalcInputs:
    input_len: int = 1024
    output_len: int = 1024
    range_ratio: float = 0.0
    bs_list: tuple[int, ...] = (16,)
    bucket_size: int = 128

    def __post_init__(self):
        if self.input_len < 1:
            raise CalcInputError(f"--input-len must be a positive number of tokens, got {self.input_len}")
        if self.output_len < 1:
            raise CalcInputError(f"--output-len must be a positive number of tokens, got {self.output_len}")
        if not (0.0 <= self.range_ratio < 1.0) or math.isnan(self.range_ratio):
            # At 1.0 or above the shortest request would have zero (or negative) tokens.
            raise CalcInputError(f"--range-ratio must be in [0, 1), got {self.range_ratio}")
        if not self.bs_list:
            raise CalcInputError("--bs-list is empty; give at least one batch size, e.g. 4,8,16")
        for bs in self.bs_list:
            if bs < 1:
                raise CalcInputError(f"--bs-list entries must be positive, got {bs}")
        if len(self.bs_list) > 1 and self.bs_list[1] <= self.bs_list[0]:
            # The bs step is taken from the first two entries; a non-increasing pair gives step <= 0.
            raise CalcInputError(
                f"--bs-list must start with two increasing values (the step is bs[1]-bs[0]), "
                f"got {self.bs_list[0]},{self.bs_list[1]}"
            )
        if self.bucket_size < 1:
            raise CalcInputError(f"--bucket-size must be positive, got {self.bucket_size}")


def parse_bs_list(text: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            values.append(int(part))
        except ValueError:
            raise CalcInputError(f"--bs-list must be integers separated by commas; {part!r} is not one") from None
    return tuple(values)


def _round_up(value: int, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def calculate(inputs: CalcInputs) -> dict:
    """The calculator's result, in its own JSON layout."""
    r = inputs.range_ratio
    # ceil on both ends, as the script does (vLLM's random dataset floors the lower bound instead).
    min_in = math.ceil(inputs.input_len * (1.0 - r))
    max_in = math.ceil(inputs.input_len * (1.0 + r))
    min_out = math.ceil(inputs.output_len * (1.0 - r))
    max_out = math.ceil(inputs.output_len * (1.0 + r))
    max_model_len = max_in + max_out

    k = inputs.bucket_size
    bs = inputs.bs_list
    bs_step = bs[1] - bs[0] if len(bs) > 1 else min(bs)
    blocks_per_longest = math.ceil(max_model_len / k)

    variables = {
        "MAX_MODEL_LEN": max_model_len,
        "VLLM_PROMPT_BS_BUCKET_MIN": 1,
        "VLLM_PROMPT_BS_BUCKET_STEP": bs_step,
        "VLLM_PROMPT_BS_BUCKET_MAX": max(bs),
        "VLLM_PROMPT_SEQ_BUCKET_MIN": k,
        "VLLM_PROMPT_SEQ_BUCKET_STEP": k,
        "VLLM_PROMPT_SEQ_BUCKET_MAX": blocks_per_longest * k,
        "VLLM_DECODE_BS_BUCKET_MIN": min(bs),
        "VLLM_DECODE_BS_BUCKET_STEP": bs_step,
        "VLLM_DECODE_BS_BUCKET_MAX": max(bs),
        # smallest batch of the shortest prompts .. largest batch of the longest requests, plus 2 blocks of slack
        "VLLM_DECODE_BLOCK_BUCKET_MIN": _round_up(min(bs) * math.ceil(min_in / k), k),
        "VLLM_DECODE_BLOCK_BUCKET_STEP": k,
        "VLLM_DECODE_BLOCK_BUCKET_MAX": _round_up(max(bs) * blocks_per_longest + 2 * k, k),
    }
    return {
        "benchmark_inputs": {
            "base_input_len": inputs.input_len,
            "base_output_len": inputs.output_len,
            "range_ratio": inputs.range_ratio,
            "concurrency_list": list(bs),
            "bucket_size": k,
        },
        "length_ranges": {
            "min_in_len": min_in,
            "max_in_len": max_in,
            "min_out_len": min_out,
            "max_out_len": max_out,
        },
        "calculated_variables": {name: variables[name] for name in VARIABLE_ORDER},
    }


def env_lines(result: dict, env: dict[str, str] | None = None) -> list[str]:
    """`export NAME=VALUE` lines of the bucket variables (`env`: the release's names, see release_env).
    MAX_MODEL_LEN is not among them: vLLM takes it as a flag (server_flags)."""
    if env is None:
        env = {k: v for k, v in result["calculated_variables"].items() if k.startswith("VLLM_")}
    return [f"export {name}={value}" for name, value in env.items()]


def server_flags(result: dict) -> list[str]:
    """The `vllm serve` flags of the result: --max-model-len (the script prints it as MAX_MODEL_LEN)."""
    return ["--max-model-len", str(result["calculated_variables"]["MAX_MODEL_LEN"])]


def server_config(result: dict, num_hpu_blocks: int, env: dict[str, str]) -> ServerConfig:
    """The server the calculated numbers describe: batch = the largest batch size, one full-length prompt's
    token budget, max_model_len as calculated."""
    values = result["calculated_variables"]
    max_model_len = values["MAX_MODEL_LEN"]
    return ServerConfig(
        block_size=result["benchmark_inputs"]["bucket_size"],
        max_num_seqs=values["VLLM_DECODE_BS_BUCKET_MAX"],
        max_model_len=max_model_len,
        # The script's prompt seq max is the natural token budget for one full-length prompt.
        max_num_batched_tokens=max(values["VLLM_PROMPT_SEQ_BUCKET_MAX"], max_model_len),
        num_hpu_blocks=num_hpu_blocks,
        env=env,
    )


def release_env(result: dict, profile_name: str) -> tuple[dict[str, str], list[str]]:
    """The calculated bucket variables under the names `profile_name` reads, and notes on what changed.

    MAX_MODEL_LEN is a server flag (--max-model-len), never a variable. Fork 1.17 buckets decode by context
    tokens per sequence (VLLM_DECODE_SEQ_BUCKET_*), not by KV blocks of the batch: there the decode range
    is the prompt's (block size .. the longest request, in block-size steps). Whatever else the release
    does not read is dropped through the one name resolver (tuner/buckets/names.py) and named in the notes.
    """
    from .names import counterpart, keep_read

    profile = get_profile(profile_name)
    values = result["calculated_variables"]
    env = {k: str(v) for k, v in values.items() if k.startswith("VLLM_")}
    notes: list[str] = []
    seq = counterpart("VLLM_DECODE_BLOCK_BUCKET_MIN", profile.name)
    if seq is not None:
        k = result["benchmark_inputs"]["bucket_size"]
        for param, value in (("MIN", k), ("STEP", k), ("MAX", values["VLLM_PROMPT_SEQ_BUCKET_MAX"])):
            env[f"VLLM_DECODE_SEQ_BUCKET_{param}"] = str(value)
            del env[f"VLLM_DECODE_BLOCK_BUCKET_{param}"]
        notes.append(f"{profile.name} buckets decode by context tokens per sequence: VLLM_DECODE_SEQ_BUCKET_* "
                     "take the prompt's range instead of the calculator's block range")
    query = counterpart("VLLM_PROMPT_SEQ_BUCKET_MIN", profile.name)
    if query is not None:  # vllm-gaudi 0.15.1+: the prompt length is the query (SEQ is a deprecated fallback)
        for param in ("MIN", "STEP", "MAX"):
            env[f"VLLM_PROMPT_QUERY_BUCKET_{param}"] = env.pop(f"VLLM_PROMPT_SEQ_BUCKET_{param}")
    kept, dropped = keep_read(env, profile.name)
    if dropped:
        notes.append(f"{profile.name} does not read {', '.join(dropped)}; left out")
    return kept, notes


def release_review(result: dict, profile_name: str, num_hpu_blocks: int | None = None,
                   kv_source: str = "given") -> dict:
    """What release `profile_name` does with the calculated numbers (under the names it reads, release_env),
    made to pass the review's own checks wherever a setting can.

    Builds the release's buckets (with `num_hpu_blocks` KV blocks: given, predicted by the caller, else
    the decode block max, i.e. "enough memory"). The settings are then adjusted, each adjustment said in
    the notes: --max-model-len rounded up to the block size (some releases crash otherwise), the decode
    block max lowered to the KV blocks, the prompt batch capped to what the token budget holds (a batch
    past it would run in buckets the release skips), and a range raised to cover max_model_len. What
    cannot be adjusted stays in `warnings`, with the setting to relax. `server_flags` are the `vllm serve`
    flags the review assumed (the token budget included).
    """
    from dataclasses import replace

    from .coverage import close_gaps, coverage_gaps, coverage_warnings

    profile = get_profile(profile_name)
    values = result["calculated_variables"]
    block_size = result["benchmark_inputs"]["bucket_size"]
    max_model_len = values["MAX_MODEL_LEN"]
    env, renamed = release_env(result, profile.name)
    if num_hpu_blocks is None:
        num_hpu_blocks, kv_source = values["VLLM_DECODE_BLOCK_BUCKET_MAX"], "assumed: the decode block max"
    blocks = num_hpu_blocks
    cfg = server_config(result, blocks, env)
    notes: list[str] = list(renamed)
    if max_model_len % block_size:
        rounded = _round_up(max_model_len, block_size)
        notes.append(f"--max-model-len {max_model_len} rounded up to {rounded}, a multiple of the block size "
                     f"{block_size} (some releases crash otherwise, e.g. vllm-gaudi 0.10.1 exponential bucketing "
                     "fails with 'math domain error')")
        cfg = replace(cfg, max_model_len=rounded, max_num_batched_tokens=max(cfg.max_num_batched_tokens, rounded))
    review = {"profile": profile.name, "num_hpu_blocks": blocks, "kv_source": kv_source, "env": env,
              "notes": notes}
    default_strategy, _ = profile.select_strategy({})
    if default_strategy != LINEAR:
        if LINEAR in profile.strategies:
            switch = " ".join(f"{k}={v}" for k, v in profile.strategy_env(LINEAR).items())
            notes.append(f"{profile.name} defaults to {default_strategy} bucketing, which ignores these values "
                         f"(the figures below are of its {default_strategy} buckets); set {switch} to use them")
        else:
            notes.append(f"{profile.name} has no linear bucketing; these values are not used")
    dmax = env.get("VLLM_DECODE_BLOCK_BUCKET_MAX")
    step = int(env.get("VLLM_DECODE_BLOCK_BUCKET_STEP", 1))
    top = _round_up(blocks, step)
    if default_strategy == LINEAR and dmax is not None and int(dmax) > top:
        env["VLLM_DECODE_BLOCK_BUCKET_MAX"] = str(top)
        notes.append(f"VLLM_DECODE_BLOCK_BUCKET_MAX lowered from {int(dmax):,} to {top:,}, the first step past the "
                     f"{blocks:,} KV blocks {kv_source.split(':')[0]} (no decode context is larger)")
    try:
        plan = profile.build(replace(cfg, env=env))
        if plan.strategy == LINEAR and plan.dims == 2 and plan.omitted_prompt:
            cfg, plan = _fit_prompt_batch(profile, cfg, env, plan, notes)
        gaps = coverage_gaps(plan, cfg, profile.engine)
        if gaps and plan.strategy == LINEAR:
            env, raised = close_gaps(env, gaps)
            notes += raised
            plan = profile.build(replace(cfg, env=env))
    except BucketConfigError as exc:
        review.update(strategy=None, error=str(exc), ignored=[], server_flags=_flags(cfg))
        return review
    review["env"] = env
    review["server_flags"] = _flags(cfg)
    review["strategy"] = plan.strategy
    review["ignored"] = sorted({s.name for s in plan.ignored_settings() if s.name in env})
    review["prompt_buckets"] = len(plan.prompt)
    review["decode_buckets"] = len(plan.decode)
    # the release's own "your configuration will be overwritten" banners: the strategy note above says it
    review["warnings"] = [w for w in plan.warnings if not is_overwrite_banner(w)]
    review["warnings"] += coverage_warnings(plan, cfg, profile.engine)
    if plan.omitted_prompt and plan.dims == 3:
        notes.append(f"{profile.name} leaves out {len(plan.omitted_prompt):,} (batch, query, context) prompt "
                     "buckets no prefill can form (query plus context past max_model_len, or the query past the "
                     "token budget)")
    elif plan.omitted_prompt:  # what no setting above could avoid: said with what to relax
        seq = max(b[1] for b in plan.prompt + plan.omitted_prompt)
        review["warnings"].append(
            f"{len(plan.omitted_prompt)} prompt buckets exceed the token budget (max_num_batched_tokens="
            f"{cfg.max_num_batched_tokens:,}) and are not warmed up: {profile.name} cannot cap the prompt batch "
            f"(no --max-num-prefill-seqs); raise --max-num-batched-tokens towards "
            f"VLLM_PROMPT_BS_BUCKET_MAX x {seq:,} or lower VLLM_PROMPT_BS_BUCKET_MAX")
    return review


def _flags(cfg: ServerConfig) -> list[str]:
    flags = ["--max-model-len", str(cfg.max_model_len), "--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
    if cfg.max_num_prefill_seqs is not None:
        flags += ["--max-num-prefill-seqs", str(cfg.max_num_prefill_seqs)]
    return flags


def _fit_prompt_batch(profile, cfg: ServerConfig, env: dict[str, str], plan, notes: list[str]):
    """Cap the prompt batch at what the token budget holds at the longest prompt bucket, so that no
    prompt bucket is skipped: a (batch, length) grid past the budget has corners the release omits, and
    a mixed prefill (one long prompt, a few short ones) pads into them. The cap needs the release to
    limit its prefill batch (--max-num-prefill-seqs); without it the buckets are left as they are."""
    from dataclasses import replace

    if any(s.name == "max_num_prefill_seqs" and s.source == "ignored" for s in plan.settings) \
            or not any(s.name == "max_num_prefill_seqs" for s in plan.settings):
        return cfg, plan
    seq = max(b[1] for b in plan.prompt + plan.omitted_prompt)
    cap = max(1, cfg.max_num_batched_tokens // seq)
    old = env.get("VLLM_PROMPT_BS_BUCKET_MAX")
    if old is None or cap >= int(old):   # the omission comes from elsewhere: the batch is not the cause
        return cfg, plan
    env["VLLM_PROMPT_BS_BUCKET_MAX"] = str(cap)
    env["VLLM_PROMPT_BS_BUCKET_MIN"] = str(min(cap, int(env.get("VLLM_PROMPT_BS_BUCKET_MIN", 1))))
    env["VLLM_PROMPT_BS_BUCKET_STEP"] = str(min(cap, int(env.get("VLLM_PROMPT_BS_BUCKET_STEP", 1))))
    capped = replace(cfg, max_num_prefill_seqs=cap)
    trial = profile.build(replace(capped, env=env))
    notes.append(f"prompt batch capped at {cap} (VLLM_PROMPT_BS_BUCKET_MAX {old} -> {cap}, --max-num-prefill-seqs "
                 f"{cap}): the token budget of {cfg.max_num_batched_tokens:,} tokens holds {cap} prompt"
                 f"{'s' if cap > 1 else ''} of {seq:,}, and a larger batch would pad into the "
                 f"{len(plan.omitted_prompt)} buckets {profile.name} skips; to batch more prompts, raise "
                 f"--max-num-batched-tokens to {cap + 1} x {seq:,}")
    return capped, trial
