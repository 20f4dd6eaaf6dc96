"""Do the buckets cover what the server will be asked? The longest prompt and the worst-case decode.

A shape no bucket covers is not warmed up: it compiles (or the 3-D releases improvise a bucket) while
serving, at the cost of a latency spike. Two limits are checked against a plan:

* prompts: the longest prompt the server accepts runs in one prompt bucket without cached context:
  max_model_len on the v0 fork engine, min(max_model_len, max_num_batched_tokens) with vLLM v1's
  chunked prefill (a longer prompt is split into chunks of the token budget);
* decode: at the largest batch, every sequence may hold max_model_len tokens: batch x blocks per
  sequence KV blocks (never more than the KV cache holds); fork 1.17 counts context tokens per
  sequence, so there it is max_model_len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .base import LINEAR, BucketPlan, ServerConfig
from .names import release_variables

TOKEN_DECODE = ("fork-1.17",)  # decode buckets in context tokens per sequence


def longest_prompt(plan: BucketPlan) -> int | None:
    """Tokens of the longest prompt a bucket without cached context holds."""
    if not plan.prompt:
        return None
    if plan.dims == 3:
        fresh = [b for b in plan.prompt if b[2] == 0] or plan.prompt
        return max(b[1] for b in fresh)
    return max(b[1] for b in plan.prompt)


def prompt_target(cfg: ServerConfig, engine: str) -> int:
    return cfg.max_model_len if engine == "v0" else min(cfg.max_model_len, cfg.max_num_batched_tokens)


def decode_worst(plan: BucketPlan, cfg: ServerConfig, batch: int) -> int:
    """The decode context at `batch` sequences of max_model_len tokens, in the plan's decode unit."""
    if plan.profile in TOKEN_DECODE:
        return cfg.max_model_len
    return min(cfg.num_hpu_blocks, batch * math.ceil(cfg.max_model_len / cfg.block_size))


@dataclass(frozen=True)
class Gap:
    """One limit the plan does not cover: the sentence, and the variable whose raise closes it."""
    message: str
    variable: str       # the release's name of the MAX to raise
    needed: int         # the value that covers the limit


def coverage_gaps(plan: BucketPlan, cfg: ServerConfig, engine: str) -> list[Gap]:
    """What the plan leaves uncovered (empty when it covers both limits)."""
    out = []
    longest, target = longest_prompt(plan), prompt_target(cfg, engine)
    if longest is not None and longest < target:
        why = "max_model_len" if target == cfg.max_model_len else "the token budget (max_num_batched_tokens)"
        name = _fix(plan, "PROMPT_QUERY", "PROMPT_SEQ")
        out.append(Gap(f"prompt buckets stop at {longest:,} tokens, short of {why} {target:,}: longer prompts run "
                       f"in shapes that were not warmed up ({_raise(plan, name)})", name,
                       math.ceil(target / cfg.block_size) * cfg.block_size))
    if plan.decode:
        batch = max(b[0] for b in plan.decode)
        reach = max(b[-1] for b in plan.decode if b[0] == batch)
        worst = decode_worst(plan, cfg, batch)
        unit = "context tokens" if plan.profile in TOKEN_DECODE else "KV blocks"
        if reach < worst:
            name = _fix(plan, "DECODE_SEQ", "DECODE_BLOCK")
            out.append(Gap(f"decode buckets reach {reach:,} {unit} at batch {batch}, short of the worst case "
                           f"{worst:,} ({batch} sequences of max_model_len {cfg.max_model_len:,}): longer contexts "
                           f"run in shapes that were not warmed up ({_raise(plan, name)})", name, worst))
        if batch < cfg.max_num_seqs:
            out.append(Gap(f"decode buckets stop at batch {batch}, short of max_num_seqs {cfg.max_num_seqs}",
                           "VLLM_DECODE_BS_BUCKET_MAX", cfg.max_num_seqs))
    return out


def coverage_warnings(plan: BucketPlan, cfg: ServerConfig, engine: str) -> list[str]:
    """What the plan leaves uncovered, one sentence each (empty when it covers both limits)."""
    return [g.message for g in coverage_gaps(plan, cfg, engine)]


def close_gaps(env: dict[str, str], gaps: list[Gap]) -> tuple[dict[str, str], list[str]]:
    """`env` with each gap's MAX raised to what covers it (linear settings), and one note per raise."""
    env, notes = dict(env), []
    for gap in gaps:
        old = env.get(gap.variable)
        step = int(env.get(gap.variable.replace("_MAX", "_STEP"), 1))
        needed = math.ceil(gap.needed / step) * step   # a linear range ends on its last step
        if old is not None and int(old) >= needed:
            continue
        env[gap.variable] = str(needed)
        notes.append(f"{gap.variable} raised {f'from {int(old):,} ' if old else ''}to {needed:,}, else "
                     f"{gap.message.split(':')[0]}")
    return env, notes


def _fix(plan: BucketPlan, preferred: str, other: str) -> str:
    """The variable that raises the range: VLLM_<preferred>_BUCKET_MAX where the release reads it."""
    return next(f"VLLM_{d}_BUCKET_MAX" for d in (preferred, other)
                if f"VLLM_{d}_BUCKET_MAX" in release_variables(plan.profile) or d == other)


def _raise(plan: BucketPlan, name: str) -> str:
    return f"raise {name}" if plan.strategy == LINEAR else f"with linear bucketing, raise {name}"
