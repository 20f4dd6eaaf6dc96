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
from .base import LINEAR

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
    """What release `profile_name` does with the calculated numbers (under the names it reads, release_env).

    Builds the release's buckets (with `num_hpu_blocks` KV blocks: given, predicted by the caller, else
    the decode block max, i.e. "enough memory") and reports: the strategy it picks, the variables it
    ignores, the notes that matter (clamping, block-size alignment, what the buckets do not cover), and
    the bucket counts.
    """
    from .coverage import coverage_warnings

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
        notes.append(
            f"--max-model-len {max_model_len} is not a multiple of the block size {block_size}: "
            f"use {_round_up(max_model_len, block_size)} (some releases crash, e.g. vllm-gaudi 0.10.1 "
            "exponential bucketing fails with 'math domain error')"
        )
    review = {"profile": profile.name, "num_hpu_blocks": blocks, "kv_source": kv_source, "env": env,
              "notes": notes}
    default_strategy, _ = profile.select_strategy({})
    if default_strategy != LINEAR:
        if LINEAR in profile.strategies:
            switch = " ".join(f"{k}={v}" for k, v in profile.strategy_env(LINEAR).items())
            notes.append(
                f"{profile.name} defaults to {default_strategy} bucketing, which ignores these values; "
                f"set {switch} to use them"
            )
        else:
            notes.append(f"{profile.name} has no linear bucketing; these values are not used")
    try:
        plan = profile.build(cfg)
    except BucketConfigError as exc:
        review.update(strategy=None, error=str(exc), ignored=[])
        return review
    review["strategy"] = plan.strategy
    review["ignored"] = sorted({s.name for s in plan.ignored_settings() if s.name in env})
    review["prompt_buckets"] = len(plan.prompt)
    review["decode_buckets"] = len(plan.decode)
    review["warnings"] = list(plan.warnings)
    review["warnings"] += coverage_warnings(plan, cfg, profile.engine)
    dmax = values["VLLM_DECODE_BLOCK_BUCKET_MAX"]
    if plan.strategy == LINEAR and "VLLM_DECODE_BLOCK_BUCKET_MAX" in env and dmax > num_hpu_blocks:
        notes.append(
            f"VLLM_DECODE_BLOCK_BUCKET_MAX={dmax} exceeds the {num_hpu_blocks} KV blocks allocated; "
            f"decode block buckets are clamped to {num_hpu_blocks}"
        )
    if plan.omitted_prompt:
        notes.append(
            f"{len(plan.omitted_prompt)} prompt buckets exceed the token budget "
            f"(max_num_batched_tokens={cfg.max_num_batched_tokens}) and are not warmed up"
        )
    return review
