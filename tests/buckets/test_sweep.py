"""The differential sweep (tests/data/sweep/): random configurations that each release's own bucketing
code was run on (tools/bucket_sweep/, refs in tests/data/sweep/SOURCES.md). The engine must agree on
every row: the same strategy, the same prompt and decode lists (count, sha256 of the list in upstream
order, and the list itself where stored), and an error wherever upstream raised, carrying its text.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tuner.buckets import get_profile, profiles

from .sweep_replay import compact_sha, replay_row

SWEEP_DIR = Path(__file__).resolve().parents[1] / "data" / "sweep"
MIN_ROWS_PER_STRATEGY = 150


def _load(profile: str) -> dict:
    return json.loads((SWEEP_DIR / f"{profile}.json").read_text())


@pytest.mark.parametrize("profile", list(profiles()))
def test_engine_agrees_with_upstream_on_every_sweep_row(profile, tmp_path):
    data = _load(profile)
    assert data["profile"] == profile
    problems = []
    for i, row in enumerate(data["rows"]):
        problem = replay_row(profile, row, str(tmp_path))
        if problem:
            problems.append(f"row {i}: {problem}; inputs={json.dumps(row['inputs'])}")
    assert not problems, f"{len(problems)} of {len(data['rows'])} rows differ:\n" + "\n".join(problems[:10])


@pytest.mark.parametrize("profile", list(profiles()))
def test_sweep_covers_each_strategy_and_the_inputs_that_matter(profile):
    rows = _load(profile)["rows"]
    generated = Counter(r["generated_for"] for r in rows)
    built = Counter(r["strategy"] for r in rows if "strategy" in r)
    for strategy in get_profile(profile).strategies:
        # Each strategy: its configurations (the env selects it), most of which upstream builds.
        assert generated[strategy] >= MIN_ROWS_PER_STRATEGY, (strategy, generated)
        assert built[strategy] >= MIN_ROWS_PER_STRATEGY / 3, (strategy, built)
    inputs = [r["inputs"] for r in rows]
    assert {i["prefix_caching"] for i in inputs} == {True, False}
    assert any(i["max_model_len"] % i["block_size"] for i in inputs)
    assert any(i["max_num_batched_tokens"] < i["max_model_len"] for i in inputs)
    assert any(i["max_num_batched_tokens"] > i["max_model_len"] for i in inputs)
    assert min(i["num_hpu_blocks"] for i in inputs) <= 8 and max(i["num_hpu_blocks"] for i in inputs) >= 100_000
    assert any("error" in r for r in rows) and sum("error" not in r for r in rows) > len(rows) / 2
    assert any(len([k for k in i["env"] if "_BUCKET_" in k]) == 1 for i in inputs)
    assert any(len([k for k in i["env"] if "_BUCKET_" in k]) >= 3 for i in inputs)


def _cli_args(profile: str, inputs: dict, bucket_file_dir: str) -> list[str]:
    args = ["buckets", "--release", profile, "--json"]
    for key in ("block_size", "max_num_seqs", "max_model_len", "max_num_batched_tokens", "num_hpu_blocks",
                "max_num_prefill_seqs", "num_speculative_tokens", "mamba_chunk_size", "decode_block_size"):
        if inputs.get(key) is not None:
            args += [f"--{key.replace('_', '-')}", str(inputs[key])]
    args.append("--prefix-caching" if inputs["prefix_caching"] else "--no-prefix-caching")
    for flag in ("lora", "pooling", "skip_decode_block_clamp"):
        if inputs.get(flag):
            args.append(f"--{flag.replace('_', '-')}")
    if not inputs.get("mamba_chunk_size_explicit", True):
        args.append("--mamba-chunk-size-implicit")
    env = dict(inputs["env"])
    if "bucket_file" in inputs:
        path = Path(bucket_file_dir) / "cli-bucket-file.txt"
        path.write_text(inputs["bucket_file"])
        env["VLLM_BUCKETING_FROM_FILE"] = str(path)
    for name, value in env.items():
        args += ["--env", f"{name}={value}"]
    return args


@pytest.mark.parametrize("profile", list(profiles()))
def test_cli_json_agrees_with_upstream_on_sample_rows(profile, tmp_path, capsys):
    """`bucket-tuner buckets ... --json` takes every sweep input; the first rows of each kind agree."""
    from tuner.cli import main

    rows = _load(profile)["rows"]
    sample = [r for r in rows if "error" in r][:3] + [r for r in rows if "error" not in r][:12]
    for row in sample:
        code = main(_cli_args(profile, row["inputs"], str(tmp_path)))
        out, err = capsys.readouterr()
        if "error" in row:
            assert code == 2 and "error" in err, row["inputs"]
            continue
        assert code == 0, err
        got = json.loads(out)
        assert "strategy" not in row or got["strategy"] == row["strategy"]
        for phase in ("prompt", "decode"):
            assert len(got[phase]) == row[phase]["count"]
            assert compact_sha(got[phase]) == row[phase]["sha256"], (phase, row["inputs"])
