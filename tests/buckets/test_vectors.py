"""Every row of every file in tests/data/vectors/ (present and future) against the bucket engine.

The vectors were produced by running each release's own bucketing code; a mismatch means our model
of that release is wrong.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tuner.buckets import BucketConfigError, ServerConfig, get_profile

from ..conftest import VECTOR_DIR

# Row prefix in `results` -> release profile (tests/data/vectors/SOURCES.md).
ROW_PROFILE = {
    "fork-1.17": "fork-1.17",
    "fork-1.18": "fork-1.18",
    "ext-4ff86cf": "fork-1.19",
    "ext-d4b0d38": "fork-1.20",
    "ext-2b4ba56": "fork-1.21.0",
    "ext-29bc7a4": "fork-1.21.2",
    "ext-8211e0b": "fork-1.22",
    "ext-7717587": "fork-main",
    "gaudi-v0.10.1": "gaudi-0.10.1",
    "gaudi-v0.15.1": "gaudi-0.15.1",
    "gaudi-v0.26.0": "gaudi-0.26.0",
    "gaudi-main": "gaudi-main",
}


def _rows():
    params = []
    for path in sorted(VECTOR_DIR.glob("*.json")):
        data = json.loads(path.read_text())
        for row_name in data["results"]:
            params.append(pytest.param(path.name, row_name, id=f"{path.stem}:{row_name}"))
    return params


_CACHE: dict[str, dict] = {}


def _load(file_name: str) -> dict:
    if file_name not in _CACHE:
        _CACHE[file_name] = json.loads((VECTOR_DIR / file_name).read_text())
    return _CACHE[file_name]


def row_config(data: dict, row: dict) -> ServerConfig:
    inputs = data["inputs"]
    env = dict(inputs.get("env", {}))
    env.update(row["upstream"].get("strategy_env", {}))
    engine = row["upstream"]["engine"]
    prefix = inputs["prefix_caching_v0_engine"] if engine == "v0" else inputs["prefix_caching_v1_engine"]
    return ServerConfig(
        block_size=inputs["block_size"],
        max_num_seqs=inputs["max_num_seqs"],
        max_model_len=inputs["max_model_len"],
        max_num_batched_tokens=inputs["max_num_batched_tokens"],
        num_hpu_blocks=inputs["num_hpu_blocks"],
        env=env,
        prefix_caching=prefix,
    )


def _compact_sha(buckets) -> str:
    return hashlib.sha256(json.dumps([list(b) for b in buckets], separators=(",", ":")).encode()).hexdigest()


def assert_same_list(ours, expected: dict, what: str):
    ours = [list(b) for b in ours]
    assert len(ours) == expected["count"], f"{what}: {len(ours)} buckets, upstream {expected['count']}"
    if "buckets" in expected:
        assert ours == expected["buckets"], f"{what}: lists differ"
    else:
        assert ours[:100] == expected["first_100"], f"{what}: first 100 differ"
        assert ours[-100:] == expected["last_100"], f"{what}: last 100 differ"
        assert _compact_sha(ours) == expected["sha256_of_compact_json"], f"{what}: sha256 differs"


_NP_WRAPPER = re.compile(r"np\.int64\((-?\d+)\)")
# The harness cut long lines at 600 raw characters, sometimes inside a wrapper: "(1, np.in".
_CUT_WRAPPER = re.compile(r"n(p(\.(i(n(t(6(4(\(-?\d*)?)?)?)?)?)?)?)?$")
TRUNCATED = "...<truncated>"


def normalise_log_line(line: str) -> str:
    # numpy scalar reprs depend on which upstream values happened to pass through numpy; the
    # numbers are what a reader (and our log parser) cares about.
    return _NP_WRAPPER.sub(r"\1", line)


# Printed by the extension's config framework (runtime.py "User flags:/Features:" dumps and the
# "experimental variables" notice) once per process, from every VLLM_* variable present, including
# the ones the vector harness set to bypass hardware probes. Not bucketing output.
_CONFIG_DUMP = re.compile(r"^    \w+: |^Following environment variables are considered experimental")


def assert_same_log_lines(ours: list[str], expected: list[str]):
    ours_n = [normalise_log_line(x) for x in ours]
    exp_n = [normalise_log_line(x) for x in expected if not _CONFIG_DUMP.match(x)]
    assert len(ours_n) == len(exp_n), "log lines differ in number:\n" + "\n".join(
        f"  ours: {a[:140]!r}" for a in ours_n
    ) + "\n" + "\n".join(f"  upstream: {b[:140]!r}" for b in exp_n)
    for a, b in zip(ours_n, exp_n):
        if b.endswith(TRUNCATED):
            prefix = _CUT_WRAPPER.sub("", b[: -len(TRUNCATED)])
            assert a.startswith(prefix), f"log line differs:\n  ours:     {a[:300]!r}\n  upstream: {prefix[:300]!r}"
        else:
            assert a == b, f"log line differs:\n  ours:     {a!r}\n  upstream: {b!r}"


@pytest.mark.parametrize("file_name,row_name", _rows())
def test_vector_row(file_name, row_name):
    data = _load(file_name)
    row = data["results"][row_name]
    prefix, strategy = row_name.split("/")
    profile = get_profile(ROW_PROFILE[prefix])
    cfg = row_config(data, row)

    if "error" in row:
        with pytest.raises(BucketConfigError) as info:
            profile.build(cfg)
        # The release's own exception text is part of our message.
        upstream_text = row["error"].split(": ", 1)[-1]
        assert upstream_text in str(info.value)
        return

    plan = profile.build(cfg)
    assert plan.strategy == strategy == row["upstream"]["strategy"]
    assert_same_list(plan.prompt, row["prompt"], "prompt")
    assert_same_list(plan.decode, row["decode"], "decode")
    if "log_lines" in row:
        assert_same_log_lines(plan.log_lines, row["log_lines"])


@pytest.mark.parametrize("file_name,row_name", _rows())
def test_default_strategy_flag(file_name, row_name):
    """`is_default_strategy`: with nothing selecting one, the release picks exactly that strategy."""
    data = _load(file_name)
    row = data["results"][row_name]
    prefix, strategy = row_name.split("/")
    profile = get_profile(ROW_PROFILE[prefix])
    default, _ = profile.select_strategy({})
    assert (default == strategy) == row["upstream"]["is_default_strategy"]
    assert profile.default_strategy == default
