"""Boots of a node the tuner was not told about teach the model quickly (issue 33, item 5): the tuner is told
Gaudi 2, the node is a Gaudi 3 (more memory: its decode lists end at other KV block counts) that also
compiles faster than the documented constants. benchmarks/calibration_boots.py measures it on every space
and node; here the sequences it runs, seeded, and the sample that made the difference."""

from __future__ import annotations

import importlib.util
import statistics
import sys

import pytest

from tuner.perfmodel import Corrections
from tuner.perfmodel import target as M
from tuner.plan.points import space_points
from tuner.space.schema import SearchSpace

from ..conftest import ROOT


@pytest.fixture(scope="module")
def cb():
    spec = importlib.util.spec_from_file_location("calibration_boots", ROOT / "benchmarks" / "calibration_boots.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


SPACE = SearchSpace.load(ROOT / "search_spaces" / "fork-1.22-exponential.yaml")


def test_a_boot_on_more_memory_samples_the_compile_factors_the_node_has(cb):
    """The node compiles at x0.6 of the documented constants; its larger KV cache warms other decode
    buckets than the prior's list holds. The sample compares each step with the same bucket's documented
    cost (the prior at the boot's own memory), so it reads x0.6 for every phase."""
    told = M.ModelTarget(SPACE.release, M.DeviceModel("gaudi2", cb.MODEL, "bf16"))
    node = M.ModelTarget(SPACE.release, M.DeviceModel("gaudi3", cb.MODEL, "bf16"))
    moved = 0
    for values in space_points(SPACE, 6, seed=1).values:
        settings = SPACE.settings_for(values)
        tp, real = M.predict_calibrated(told, settings), M.predict(node, settings, Corrections(**cb.FAST))
        if real.failure is not None or tp.prior.failure is not None:
            continue
        moved += tp.prior.plan.decode != real.plan.decode
        sample = cb.boot_sample(tp, real)
        for name in ("prompt_warmup", "decode_warmup", "capture"):
            if name in sample:
                assert sample[name] == pytest.approx(-0.5108, abs=0.01), (name, sample)  # log 0.6
        assert "decode_warmup" in sample  # a phase whose list moved is still measured
    assert moved >= 3  # the case in point: the prior's decode lists are not the node's


def test_boots_of_a_faster_hidden_gaudi3_predict_the_next_warmup_within_ten_percent(cb):
    # without noise the model is the node's once it has seen it: nothing left after three boots
    exact = [cb.sequence(SPACE, "hidden-gaudi3-fast", seed, 0.0, 0.0) for seed in range(3)]
    assert all(len(r) == cb.BOOTS for r in exact)
    assert max(r[k] for r in exact for k in (3, 4)) < 0.01
    assert statistics.mean(r[0] for r in exact) > 0.15  # the prior alone is far off: the boots did the work
    # with a node's own scatter (5% per configuration, 10% per step): within 10% after four boots
    noisy = [cb.sequence(SPACE, "hidden-gaudi3-fast", seed, 0.05, 0.1) for seed in range(6)]
    assert statistics.mean(r[4] for r in noisy) <= 0.10
