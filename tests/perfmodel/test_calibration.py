"""Calibration recovers what the hardware really does from boots the tuner reads like real ones."""

from __future__ import annotations

import math

import pytest

from tuner.perfmodel import Corrections
from tuner.perfmodel.calibration import Calibration, calibrate_from_observations, observation_sample
from tuner.perfmodel.projection import prediction_facts

from .helpers import observed_facts, predict

CONFIGS = [dict(max_num_seqs=s, env={"VLLM_PROMPT_SEQ_BUCKET_STEP": str(q), "VLLM_DECODE_BLOCK_BUCKET_STEP": "256",
                                     "VLLM_GRAPH_RESERVED_MEM": str(r)})
           for s, q, r in ((32, 256, 0.1), (64, 512, 0.2), (128, 256, 0.05), (16, 128, 0.1))]


def pairs(truth: Corrections, n: int):
    out = []
    for cfg in CONFIGS[:n]:
        prior = predict(**cfg)
        real = predict(truth, **cfg)
        out.append((prediction_facts(prior), observed_facts(real, prior)))
    return out


def test_no_boot_is_the_documented_model_with_wide_uncertainty():
    cal = Calibration()
    assert cal.corrections == Corrections()
    s = cal.summary()
    assert s["boots"] == 0 and s["prompt_warmup"]["low"] < 0.3 and s["prompt_warmup"]["high"] > 3


def test_recovers_a_compile_factor_of_two():
    truth = Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0)
    cal = calibrate_from_observations(pairs(truth, 4))
    fit = cal.summary()
    for name in ("prompt_warmup", "decode_warmup", "capture"):
        assert fit[name]["value"] == pytest.approx(2.0, rel=0.05), name
        assert fit[name]["low"] <= 2.0 <= fit[name]["high"] * 1.02, name
    # What the boots did not disturb stays at the documented value.
    assert fit["kv_block"]["value"] == pytest.approx(1.0, abs=0.01)
    assert fit["load"]["value"] == pytest.approx(1.0, abs=0.02)


def test_one_boot_moves_the_factor_most_of_the_way():
    truth = Corrections(prompt_warmup=0.5, decode_warmup=0.5, capture=0.5)
    cal = calibrate_from_observations(pairs(truth, 1))
    assert 0.5 < cal.corrections.prompt_warmup < 0.6


@pytest.mark.parametrize("name,factor", [("kv_block", 1.1), ("graph_mem", 1.25)])
def test_recovers_memory_factors(name, factor):
    cal = calibrate_from_observations(pairs(Corrections(**{name: factor}), 3))
    assert getattr(cal.corrections, name) == pytest.approx(factor, rel=0.03)
    # and the calibrated model then predicts the KV blocks the hardware really has
    cfg = CONFIGS[3]
    assert predict(cal.corrections, **cfg).num_blocks == pytest.approx(
        predict(Corrections(**{name: factor}), **cfg).num_blocks, rel=0.01)


def test_free_memory_offset_and_samples_from_outside_the_study():
    truth = Corrections(free_mem_offset_gib=-3.0)
    prior, real = predict(**CONFIGS[0]), predict(truth, **CONFIGS[0])
    sample = observation_sample(prediction_facts(prior), observed_facts(real, prior))
    assert sample["free_mem_offset_gib"] == pytest.approx(-3.0, abs=0.02)
    cal = Calibration().update(sample).update({"unknown_factor": 1.0, "load": math.nan})
    assert cal.n == 1 and cal.corrections.free_mem_offset_gib < -2.0


def test_optimistic_corrections_are_favourable():
    cal = calibrate_from_observations(pairs(Corrections(prompt_warmup=2.0, decode_warmup=2.0, capture=2.0), 3))
    low, mid = cal.optimistic(), cal.corrections
    assert low.prompt_warmup < mid.prompt_warmup and low.kv_block <= mid.kv_block
    assert low.free_mem_offset_gib >= mid.free_mem_offset_gib
