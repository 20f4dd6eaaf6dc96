"""The cold / cached warmup figures of a trial (tuner/recipecache/warmupmode.py), pure: which one a boot measured,
the other predicted from it, the objective of each mode, the cache factor's calibration sample."""

from __future__ import annotations

import math

import pytest

from tuner.perfmodel import ServerInputs, SimSettings, predict_startup
from tuner.perfmodel.calibration import Calibration
from tuner.perfmodel.corrections import Corrections
from tuner.perfmodel.target import DeviceModel, ModelTarget
from tuner.recipecache.warmupmode import (
    cache_hit_sample,
    cached_prediction,
    drop_step_samples,
    objective,
    settle,
    warmup_figures,
)
from tuner.space.schema import TrialSettings

INPUTS = ServerInputs(block_size=128, max_num_seqs=16, max_model_len=1024, max_num_batched_tokens=2048)


def test_a_cold_boot_measures_the_cold_warmup_and_predicts_the_cached_one():
    observed, predicted = {"warmup_s": 110.0}, {}
    settle(observed, predicted, cold_pred_s=100.0, cached_pred_s=40.0, hit_rate=None)
    assert observed["warmup_cold_s"] == 110.0 and "warmup_cached_s" not in observed
    assert predicted == {"warmup_cold_s": 110.0, "warmup_cached_s": 44.0}  # scaled by this boot: x1.1
    assert objective(observed, predicted, "cold") == 110.0 and objective(observed, predicted, "cached") == 44.0
    assert "recipe_cache_hit_rate" not in observed


def test_a_full_hit_measures_the_cached_warmup_and_predicts_the_cold_one():
    observed, predicted = {"warmup_s": 36.0}, {}
    settle(observed, predicted, 100.0, 40.0, hit_rate=1.0)
    assert observed["warmup_cached_s"] == 36.0 and "warmup_cold_s" not in observed
    assert predicted["warmup_cold_s"] == pytest.approx(90.0) and observed["recipe_cache_hit_rate"] == 1.0
    assert objective(observed, predicted, "cold") == pytest.approx(90.0)


def test_a_partial_hit_measures_neither():
    observed, predicted = {"warmup_s": 70.0}, {}
    settle(observed, predicted, 100.0, 40.0, hit_rate=0.5)  # predicted mixed: 70 s
    assert "warmup_cold_s" not in observed and "warmup_cached_s" not in observed
    assert predicted == {"warmup_cold_s": 100.0, "warmup_cached_s": 40.0}


def test_boots_with_hits_give_no_warmup_step_samples():
    sample = {"load": 0.1, "prompt_warmup": -0.5, "decode_warmup": -0.6, "capture": 0.0, "kv_block": 0.01}
    assert drop_step_samples(sample, None) == sample and drop_step_samples(sample, 0.0) == sample
    assert drop_step_samples(sample, 0.4) == {"load": 0.1, "kv_block": 0.01}


def test_the_cache_factor_sample_recovers_the_true_residual():
    # model: capture 20 s, compile 100 s, a hit costs 0.12 of a compile; truth: 0.24 and everything x1.1
    cold_pred, cached_pred = 20 + 100, 20 + 0.12 * 100
    cold_obs, cached_obs = 1.1 * 120, 1.1 * (20 + 0.24 * 100)
    x = cache_hit_sample(cold_obs, cached_obs, cold_pred, cached_pred, h_model=0.12)
    assert x == pytest.approx(math.log(2.0))
    assert cache_hit_sample(cold_obs, cold_obs * 0.1, cold_pred, cached_pred, 0.12) is None  # below capture alone
    cal = Calibration()
    for _ in range(5):
        cal.update({"cache_hit": x})
    assert 1.5 < cal.corrections.cache_hit < 2.0  # the fit moves toward x2 (prior at 1)


def test_the_cache_correction_scales_the_predicted_cached_warmup():
    target = ModelTarget("fork-1.21.2", DeviceModel())
    settings = TrialSettings(server={"block_size": 128, "max_num_seqs": 16, "max_model_len": 1024,
                                     "max_num_batched_tokens": 2048}, env={}, params={})
    base = cached_prediction(target, settings, Corrections())
    slower = cached_prediction(target, settings, Corrections(cache_hit=2.0))
    cold = predict_startup("fork-1.21.2", SimSettings(), INPUTS, {})
    assert all(s.cache_hit for s in base.steps if s.kind == "compile")
    assert base.warmup_seconds < slower.warmup_seconds < cold.warmup_seconds
    capture = sum(s.seconds for s in cold.steps if s.kind == "capture")
    assert base.warmup_seconds > capture  # capture is never saved


def test_figures_read_back_with_the_cold_reboot():
    attrs = {"observed": {"warmup_s": 36.0, "warmup_cached_s": 36.0}, "predicted": {"warmup_cold_s": 90.0,
                                                                                 "warmup_cached_s": 36.0}}
    f = warmup_figures(attrs["observed"], attrs["predicted"])
    assert (f["cold"].seconds, f["cold"].measured, f["cached"].measured) == (90.0, False, True)
    assert f["cold"].text() == "90 s (pred.)" and f["cached"].text() == "36 s"
    g = warmup_figures(attrs["observed"], attrs["predicted"], {"warmup_cold_s": 95.0})
    assert (g["cold"].seconds, g["cold"].measured) == (95.0, True)
    assert warmup_figures({}, {})["cold"].text() == "-"


def test_a_predicted_figure_carries_its_band():
    """compare and the report show a predicted cold or cached warmup with its 2-sd band, scaled as the
    figure is by what the boot showed; a study stored before the bands were kept shows the cold one in
    the calibrated warm-up's band, and the cached one without a band rather than a made-up one."""
    observed, predicted = {"warmup_s": 110.0}, {}
    settle(observed, predicted, 100.0, 40.0, hit_rate=None, bands={"cold": (0.5, 2.0), "cached": (0.25, 4.0)})
    assert (predicted["warmup_cached_low_s"], predicted["warmup_cached_high_s"]) == (11.0, 176.0)
    f = warmup_figures(observed, predicted)
    assert f["cold"].text() == "110 s" and f["cached"].text() == "44 s (11-176 s, pred.)"
    old = {"observed": {"warmup_s": 36.0, "warmup_cached_s": 36.0},
           "predicted": {"warmup_s": 100.0, "warmup_low_s": 60.0, "warmup_high_s": 160.0, "warmup_cold_s": 90.0,
                         "warmup_cached_s": 36.0}}
    g = warmup_figures(old["observed"], old["predicted"])
    assert g["cold"].text() == "90 s (54-144 s, pred.)"
    old["observed"] = {"warmup_s": 95.0, "warmup_cold_s": 95.0}
    assert warmup_figures(old["observed"], old["predicted"])["cached"].text() == "36 s (pred.)"


def test_the_cached_band_holds_the_cache_factor_uncertainty():
    """A cached start is scaled by the cache factor as well as by the compile factors: until boots
    measure it, its band is wider than the cold start's."""
    from tuner.perfmodel.uncertainty import warmup_band

    target = ModelTarget("fork-1.21.2", DeviceModel())
    settings = TrialSettings(server={"block_size": 128, "max_num_seqs": 16, "max_model_len": 1024,
                                     "max_num_batched_tokens": 2048}, env={}, params={})
    cold = predict_startup("fork-1.21.2", SimSettings(), INPUTS, {})
    cached = cached_prediction(target, settings, Corrections())
    cal = Calibration()
    wide, narrow = warmup_band(cached, cal), warmup_band(cold, cal)
    assert wide.high / wide.central > narrow.high / narrow.central
