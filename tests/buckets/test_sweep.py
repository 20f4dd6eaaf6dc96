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

from tuner.buckets import BucketConfigError, get_profile, profiles

from .sweep_replay import compact_sha, replay_row, row_config

SWEEP_DIR = Path(__file__).resolve().parents[1] / "data" / "sweep"
MIN_ROWS_PER_STRATEGY = 150
MIN_EDGE_ROWS_PER_STRATEGY = 50
# Every profile, and every alias that names another release (its rows come from that release's code).
SWEPT = [*profiles(), *(a for p in profiles().values() for a in p.alias_notes)]
# Releases whose runner runs pooling models (fork 1.21+, vllm-gaudi v0.15.1+).
POOLING = [name for name in SWEPT if "pooling" in get_profile(name).model_inputs]


def _load(profile: str) -> dict:
    return json.loads((SWEEP_DIR / f"{profile}.json").read_text())


def _named(profile: str, name: str) -> dict:
    rows = [r for r in _load(profile)["rows"] if r.get("name") == name]
    assert len(rows) == 1, f"{profile}: no named row {name}"
    return rows[0]


def test_every_profile_and_noted_alias_has_a_sweep_file():
    assert sorted(p.stem for p in SWEEP_DIR.glob("*.json")) == sorted(SWEPT)


@pytest.mark.parametrize("profile", SWEPT)
def test_engine_agrees_with_upstream_on_every_sweep_row(profile, tmp_path):
    data = _load(profile)
    assert data["profile"] == profile
    problems = []
    for i, row in enumerate(data["rows"]):
        problem = replay_row(profile, row, str(tmp_path))
        if problem:
            problems.append(f"row {i}: {problem}; inputs={json.dumps(row['inputs'])}")
    assert not problems, f"{len(problems)} of {len(data['rows'])} rows differ:\n" + "\n".join(problems[:10])


@pytest.mark.parametrize("profile", SWEPT)
def test_sweep_covers_each_strategy_and_the_inputs_that_matter(profile):
    rows = [r for r in _load(profile)["rows"] if not r.get("edge") and "name" not in r]
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


def _steps(row: dict) -> list[int]:
    out = []
    for name, value in row["inputs"]["env"].items():
        if name.endswith("_BUCKET_STEP"):
            try:
                out.append(int(value))
            except ValueError:
                pass
    return out


@pytest.mark.parametrize("profile", SWEPT)
def test_edge_rows_vary_negative_zero_and_odd_steps_under_each_strategy(profile):
    edges = [r for r in _load(profile)["rows"] if r.get("edge")]
    for strategy in get_profile(profile).strategies:
        mine = [r for r in edges if r["generated_for"] == strategy]
        assert len(mine) >= MIN_EDGE_ROWS_PER_STRATEGY, (strategy, len(mine))
        steps = [v for r in mine for v in _steps(r)]
        assert any(v < 0 for v in steps) and 0 in steps and any(v % 2 for v in steps), (strategy, steps)
        # Both outcomes occur: upstream builds some of these and refuses others.
        assert any("error" in r for r in mine) and any("error" not in r for r in mine), strategy
    if profile in POOLING:
        assert any(r["inputs"].get("pooling") for r in edges)


@pytest.mark.parametrize("profile", ["fork-1.22", "fork-main", "fork-1.23"])
def test_fork_3d_linear_negative_decode_steps_start_as_upstream_does(profile):
    """Issue 26: the extension's linear range is empty for a negative step, and the fork's warm-up takes an
    empty list; the blocks step alone leaves the KV block count, which contiguous PA appends."""
    bs_negative = _named(profile, "decode-bs-step-negative")
    assert bs_negative["decode"]["count"] == 0 and bs_negative["prompt"]["count"] > 0
    blocks = _named(profile, "decode-block-step-negative")
    n = blocks["inputs"]["num_hpu_blocks"]
    assert blocks["decode"]["buckets"] == [[bs, 1, n] for bs in (1, 2, 4, 8, 16, 32)]
    assert _named(profile, "decode-block-step-negative-prefix-caching")["decode"]["count"] == 0
    assert _named(profile, "decode-bs-step-zero")["error"] == "ValueError: range() arg 3 must not be zero"
    for name in ("decode-bs-step-negative", "decode-block-step-negative",
                 "decode-block-step-negative-prefix-caching", "decode-bs-step-zero"):
        assert replay_row(profile, _named(profile, name)) is None, name


@pytest.mark.parametrize("profile", SWEPT)
def test_a_zero_step_fails_with_upstreams_text_on_every_profile(profile):
    row = _named(profile, "decode-bs-step-zero")
    assert row["error"].endswith("range() arg 3 must not be zero")
    with pytest.raises(BucketConfigError, match=r"range\(\) arg 3 must not be zero"):
        get_profile(profile).build(row_config(row["inputs"]))


@pytest.mark.parametrize("profile", POOLING)
def test_pooling_prompt_buckets_follow_each_releases_runner(profile):
    """fork 1.22 / habana_main never generate buckets for pooling models (the v0 engine skips
    initialize_cache); 1.23 (#2098), 1.21 and vllm-gaudi generate prompt buckets; no release decodes."""
    for strategy in get_profile(profile).strategies:
        row = _named(profile, f"pooling-{strategy}")
        assert row["decode"]["count"] == 0
        assert (row["prompt"]["count"] == 0) == (profile in ("fork-1.22", "fork-main")), (strategy, row["prompt"])
        plan = get_profile(profile).build(row_config(row["inputs"]))
        assert (len(plan.prompt), len(plan.decode)) == (row["prompt"]["count"], 0)


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


@pytest.mark.parametrize("profile", SWEPT)
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
