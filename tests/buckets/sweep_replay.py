"""Replays one stored sweep row (tests/data/sweep/) against the bucket engine.

Shared by tests/buckets/test_sweep.py and the maintainer tool tools/bucket_sweep (its `check`).
"""

from __future__ import annotations

import hashlib
import os
import tempfile

import orjson

from tuner.buckets import BucketConfigError, ServerConfig, get_profile


def compact_sha(buckets) -> str:
    """sha256 of the list as compact JSON ([[1,2],[3,4]]); orjson writes the same bytes as json.dumps with
    compact separators, about ten times faster (the sweeps hash ~900 lists of up to thousands of buckets)."""
    return hashlib.sha256(orjson.dumps(list(buckets))).hexdigest()


def row_config(inputs: dict, bucket_file_dir: str | None = None) -> ServerConfig:
    env = dict(inputs["env"])
    if "bucket_file" in inputs:  # VLLM_BUCKETING_FROM_FILE: the file's text is stored with the row
        path = os.path.join(bucket_file_dir or tempfile.gettempdir(), "sweep-bucket-file.txt")
        with open(path, "w") as f:
            f.write(inputs["bucket_file"])
        env["VLLM_BUCKETING_FROM_FILE"] = path
    return ServerConfig(
        block_size=inputs["block_size"], max_num_seqs=inputs["max_num_seqs"], max_model_len=inputs["max_model_len"],
        max_num_batched_tokens=inputs["max_num_batched_tokens"], num_hpu_blocks=inputs["num_hpu_blocks"],
        env=env, prefix_caching=inputs["prefix_caching"],
        max_num_prefill_seqs=inputs.get("max_num_prefill_seqs"), lora=inputs.get("lora", False),
        num_speculative_tokens=inputs.get("num_speculative_tokens", 0),
        mamba_chunk_size=inputs.get("mamba_chunk_size", 0),
        mamba_chunk_size_explicit=inputs.get("mamba_chunk_size_explicit", True),
        pooling=inputs.get("pooling", False), decode_block_size=inputs.get("decode_block_size"),
        skip_decode_block_clamp=inputs.get("skip_decode_block_clamp", False),
    )


def _differs(ours: list, expected: dict, what: str) -> str | None:
    ours = list(ours)
    if len(ours) != expected["count"]:
        return f"{what}: {len(ours)} buckets, upstream {expected['count']}"
    if "buckets" in expected and [list(b) for b in ours] != expected["buckets"]:
        return f"{what}: lists differ"
    if compact_sha(ours) != expected["sha256"]:
        return f"{what}: sha256 differs"
    return None


def replay_row(profile_name: str, row: dict, bucket_file_dir: str | None = None) -> str | None:
    """None when the engine agrees with upstream on this row, else what differs."""
    profile = get_profile(profile_name)
    try:
        plan = profile.build(row_config(row["inputs"], bucket_file_dir))
    except BucketConfigError as exc:
        if "error" in row:
            # The release's own exception text is part of our message.
            upstream_text = row["error"].split(": ", 1)[-1]
            return None if upstream_text in str(exc) else f"error text differs: ours {exc}; upstream {row['error']}"
        return f"engine refused ({exc}); upstream gave {row['prompt']['count']}/{row['decode']['count']} buckets"
    except Exception as exc:  # an engine crash is a difference too, reported with the row's other ones
        return f"engine crashed: {type(exc).__name__}: {exc}"
    if "error" in row:
        return f"engine built {len(plan.prompt)}/{len(plan.decode)} buckets; upstream raised {row['error'][:200]}"
    if "strategy" in row and plan.strategy != row["strategy"]:
        return f"strategy {plan.strategy}, upstream {row['strategy']}"
    if "unified" in row:
        problem = _differs(plan.unified, row["unified"], "unified")
        if problem:
            return problem
    return _differs(plan.prompt, row["prompt"], "prompt") or _differs(plan.decode, row["decode"], "decode")
