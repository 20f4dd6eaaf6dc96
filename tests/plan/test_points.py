"""The points a plan predicts: every point of a discrete space, conditions honoured; a deterministic,
evenly spread quasi-random sample of a continuous one, within every parameter's range."""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest

from tuner.plan.points import space_points
from tuner.space.schema import SearchSpace

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"


def load(name: str) -> SearchSpace:
    return SearchSpace.load(SPACES / f"{name}.yaml")


def test_a_discrete_space_is_predicted_whole():
    pts = space_points(load("demo"))
    assert not pts.sampled and pts.discrete_size == 3 * 15 * 3 * 3 == len(pts.values)
    assert len({tuple(sorted(v.items())) for v in pts.values}) == len(pts.values)
    reserved = {v["VLLM_GRAPH_RESERVED_MEM"] for v in pts.values}
    assert len(reserved) == 15 and min(reserved) == pytest.approx(0.02) and max(reserved) == pytest.approx(0.3)


def test_conditions_leave_a_parameter_out_as_the_sampler_does():
    space = SearchSpace.from_dict({"release": "fork-1.22", "parameters": {
        "VLLM_EXPONENTIAL_BUCKETING": {"type": "categorical", "choices": ["true", "false"]},
        "VLLM_DECODE_BS_BUCKET_STEP": {"type": "categorical", "choices": [8, 16, 32],
                                       "when": {"VLLM_EXPONENTIAL_BUCKETING": "false"}},
        "max_num_seqs": {"type": "int", "low": 16, "high": 64, "step": 16}}})
    pts = space_points(space)
    assert pts.discrete_size == len(pts.values) == 4 + 3 * 4
    for v in pts.values:
        assert ("VLLM_DECODE_BS_BUCKET_STEP" in v) == (v["VLLM_EXPONENTIAL_BUCKETING"] == "false")


def test_a_continuous_space_is_sampled_evenly_and_deterministically():
    space = load("vllm-gaudi")  # a continuous float, a log-scale int, conditional parameters
    a, b = space_points(space, max_points=600, seed=7), space_points(space, max_points=600, seed=7)
    assert a.sampled and a.discrete_size is None and a.values == b.values and len(a.values) == 600
    assert space_points(space, max_points=600, seed=8).values != a.values
    by_strategy = collections.Counter(v["VLLM_BUCKETING_STRATEGY"] for v in a.values)
    assert all(180 <= n <= 220 for n in by_strategy.values())  # a third each
    reserved = sorted(v["VLLM_GRAPH_RESERVED_MEM"] for v in a.values)
    assert 0.02 <= reserved[0] < 0.022 and 0.298 < reserved[-1] <= 0.3
    # low discrepancy: every tenth of the range holds close to a tenth of the points
    tenths = collections.Counter(min(9, int((r - 0.02) / 0.028)) for r in reserved)
    assert all(50 <= n <= 70 for n in tenths.values())
    seqs = [v["max_num_seqs"] for v in a.values]
    assert all(isinstance(s, int) and 16 <= s <= 256 for s in seqs)
    # log scale: as many below the geometric middle (64) as above
    assert abs(sum(s < 64 for s in seqs) - sum(s > 64 for s in seqs)) < 60
    for v in a.values:
        assert ("VLLM_DECODE_BS_BUCKET_PAD_PERCENT" in v) == (v["VLLM_BUCKETING_STRATEGY"] == "pad")
        if "VLLM_DECODE_BS_BUCKET_PAD_PERCENT" in v:
            assert v["VLLM_DECODE_BS_BUCKET_PAD_PERCENT"] in range(10, 51, 5)


def test_a_large_discrete_space_is_sampled_without_repeats():
    space = load("fork-1.21-linear")
    pts = space_points(space, max_points=500)
    assert pts.sampled and len(pts.values) == 500
    assert len({tuple(sorted(v.items())) for v in pts.values}) == 500
    steps = collections.Counter(v["VLLM_DECODE_BLOCK_BUCKET_STEP"] for v in pts.values)
    assert set(steps) == {128, 256, 512} and max(steps.values()) - min(steps.values()) < 40
    assert all(math.isfinite(v["VLLM_GRAPH_RESERVED_MEM"]) for v in pts.values)


def test_bad_point_counts_are_refused():
    with pytest.raises(ValueError, match="max_points"):
        space_points(load("demo"), max_points=0)
