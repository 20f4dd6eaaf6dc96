"""Bulk prediction (perfmodel/bulk.py) is target.predict, faster: the same start for every configuration of
the shipped spaces, failures included, and the same cached warm-up as a second prediction with every recipe
cached."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tuner.perfmodel import Corrections
from tuner.perfmodel.bulk import BulkModel, cached_warmup, facts
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.target import DeviceModel, ModelTarget, predict
from tuner.perfmodel.uncertainty import warmup_band, warmup_shares
from tuner.plan.points import space_points
from tuner.recipecache.warmupmode import cached_prediction
from tuner.space.schema import SearchSpace

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
# the documented model; graphs far larger (fewer captured, warm-up out of memory where every bucket is
# captured) with slower compiles; almost no free memory (no room for the KV cache)
CORRECTIONS = (Corrections(), Corrections(graph_mem=40.0, free_mem_offset_gib=-30.0, prompt_warmup=1.7),
               Corrections(free_mem_offset_gib=-76.0))
# boots that disagree with the prior differently per phase: the band depends on each phase's share
CALIBRATED = Calibration().update({"prompt_warmup": 0.5, "decode_warmup": -0.2, "capture": 0.9})


def sample(name: str, n: int, device: str = "gaudi2", model: str = "llama-3.1-8b"):
    space = SearchSpace.load(SPACES / f"{name}.yaml")
    space.check_release(space.release)
    points = space_points(space, max_points=n, seed=3).values
    return ModelTarget(space.release, DeviceModel(device, model)), [space.settings_for(v) for v in points]


def same_start(a, b) -> None:
    assert (a.failure is None) == (b.failure is None)
    if a.failure is not None:
        assert (a.failure.phase, a.failure.message, a.failure.at_step) == (b.failure.phase, b.failure.message,
                                                                           b.failure.at_step)
    assert a.num_blocks == b.num_blocks
    if a.plan is not None:
        assert (a.plan.prompt, a.plan.decode) == (b.plan.prompt, b.plan.decode)
    assert a.warmup_seconds == pytest.approx(b.warmup_seconds, rel=1e-9, abs=1e-9)
    assert set(a.graphed_prompt) == set(b.graphed_prompt) and set(a.graphed_decode) == set(b.graphed_decode)
    assert a.prompt_graph_mem == pytest.approx(b.prompt_graph_mem, rel=1e-9, abs=1)
    assert a.decode_graph_mem == pytest.approx(b.decode_graph_mem, rel=1e-9, abs=1)
    # the warm-up's band (the one the study screens with) from the bulk step sums = from the steps
    if a.failure is None and not a.skip_warmup:
        shares_a, shares_b = warmup_shares(a), warmup_shares(b)
        assert shares_a.keys() == shares_b.keys()
        assert all(shares_a[k] == pytest.approx(shares_b[k], rel=1e-9) for k in shares_a)
        band_a, band_b = warmup_band(a, CALIBRATED), warmup_band(b, CALIBRATED)
        assert (band_a.low, band_a.high) == pytest.approx((band_b.low, band_b.high), rel=1e-9)


@pytest.mark.parametrize("name, device, model", [("demo", "gaudi2", "llama-3.1-8b"),
                                                  ("fork-1.21-linear", "gaudi2", "llama-3.1-8b"),
                                                  ("fork-1.22-exponential", "gaudi2", "llama-3.1-8b"),
                                                  ("vllm-gaudi", "gaudi3", "llama-3.1-70b")])
def test_bulk_startup_is_the_models_for_every_configuration(name, device, model):
    target, settings = sample(name, 40, device, model)
    bulk = BulkModel(target)
    failures = set()
    for s in settings:
        for corr in CORRECTIONS:
            fast, ref = bulk.startup(s, corr), predict(target, s, corr)
            same_start(fast, ref)
            if ref.failure is not None:
                failures.add(ref.failure.phase)
    if name != "vllm-gaudi":  # a 70B on one Gaudi 3 does not even load: every configuration fails the same way
        assert failures, "the short-memory corrections should make some starts fail"
    assert bulk.builds <= 2 * len(settings) * len(CORRECTIONS)


def test_bulk_keeps_the_sums_of_the_warmup_steps_not_the_steps():
    for name in ("fork-1.22-exponential", "demo"):  # every bucket captured; captured within a budget (1.21)
        target, settings = sample(name, 3)
        pred = BulkModel(target).startup(settings[0])
        sums = pred.step_sums
        assert pred.steps == [] and sums is not None and 0 < sums.compile < pred.warmup_seconds
        assert pred.warmup_seconds == pytest.approx(predict(target, settings[0]).warmup_seconds, rel=1e-9)


def test_cached_warmup_is_the_prediction_with_every_recipe_cached():
    rng = random.Random(0)
    for name in ("demo", "fork-1.22-exponential", "vllm-gaudi"):
        target, settings = sample(name, 30)
        bulk = BulkModel(target)
        for s in rng.sample(settings, 4):
            pred = bulk.startup(s)
            if pred.failure is not None:
                continue
            expected = cached_prediction(target, s, Corrections())
            assert cached_warmup(pred) == pytest.approx(expected.warmup_seconds, rel=1e-9)
            assert cached_warmup(pred) < pred.warmup_seconds
            assert facts(pred)["kv_blocks"] == pred.num_blocks
