"""`tune --warmup cold|cached`: which warmup a trial is scored by, and both figures of every trial.

A deployment that ships a prepared recipe cache (`export --with-cache`) starts with the *cached*
warmup; one that does not compiles everything again (the *cold* warmup). A trial measures at most
one of them per boot: a cold boot measures the cold warmup, a boot whose every shape hit a shared
recipe cache (tuner/study/sharedcache.py) the cached one. The other comes from the calibrated performance
model, scaled by what this boot showed (observed / predicted), and is marked predicted. Boots that
hit part of the cache measure neither: both are predicted from the mixed warmup they showed.

Per trial the record gets `observed["warmup_cold_s"]` / `observed["warmup_cached_s"]` where measured
and `predicted[...]` with the same keys (always, when there is a model), each predicted one with its
2-sd band (`predicted["warmup_cold_low_s"]`, `..._high_s`: the calibrated prediction's band, scaled
as the figure is); `warmup_figures()` reads them back for the report and `compare`. When the study
scores a warmup other than the one the boot measured, `observed["warmup_scored_s"]` holds it
(TrialResult.warmup_s reads it first). The cache factor (the `cache_hit` correction) is calibrated from
configurations measured both ways (one cold and one cached boot of the same configuration: the cold
re-boot of a cached trial).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

COLD, CACHED = "cold", "cached"
MODES = (COLD, CACHED)
# Warmup-step samples of a boot that hit the cache compare a cached step with a cold prediction:
# they would drag the compile corrections down, so such a boot does not give them.
STEP_FACTORS = ("prompt_warmup", "decode_warmup", "capture", "multimodal_warmup")
FULL_HIT, NO_HIT = 0.999, 0.001


@dataclass
class WarmupOptions:
    mode: str = COLD
    budget_s: float | None = None  # applied to the mode's warmup (cached: never to the cold boot)
    shared: Any = None  # sharedcache.SharedCache, or None
    notes: list[str] = field(default_factory=list)  # said once (fallbacks)


def cached_prediction(target, settings, corrections):
    """The configuration's start with every recipe it compiles already cached (None without a model).
    `target`, `settings`: as for perfmodel.target.predict."""
    from ..perfmodel.target import predict

    cold = predict(target, settings, corrections)
    if cold is None or cold.failure is not None or cold.plan is None:
        return None
    keys = frozenset(cold.recipe_id(phase, b) for phase, buckets in (("prompt", cold.plan.prompt),
                                                                     ("decode", cold.plan.decode))
                     for b in buckets)
    return predict(target, settings, corrections, keys)


def model_figures(cold_pred, cached_pred) -> tuple[float | None, float | None]:
    cold = cold_pred.warmup_seconds if cold_pred is not None and cold_pred.failure is None else None
    cached = cached_pred.warmup_seconds if cached_pred is not None and cached_pred.failure is None else None
    return cold, cached


def settle(observed: dict, predicted: dict, cold_pred_s: float | None, cached_pred_s: float | None,
           hit_rate: float | None, bands: dict[str, tuple[float, float]] | None = None) -> None:
    """Fill both figures of one trial in its observed / predicted records (in place).

    `observed["warmup_s"]` is what the boot's log said; `hit_rate` the share of its shapes found in a
    shared cache (None: the boot had no cache, i.e. it was cold); `bands`: per mode, the calibrated
    prediction's 2-sd band as ratios to it (low / central, high / central)."""
    obs = observed.get("warmup_s")
    rate = 0.0 if hit_rate is None else hit_rate
    scale = 1.0
    if obs is not None and cold_pred_s and cached_pred_s is not None:
        mixed = cold_pred_s - rate * (cold_pred_s - cached_pred_s)
        if mixed > 0:
            scale = obs / mixed
    for mode, figure in ((COLD, cold_pred_s), (CACHED, cached_pred_s)):
        if figure is None:
            continue
        predicted[f"warmup_{mode}_s"] = round(figure * scale, 2)
        if bands and mode in bands:
            low, high = bands[mode]
            predicted[f"warmup_{mode}_low_s"] = round(figure * scale * low, 2)
            predicted[f"warmup_{mode}_high_s"] = round(figure * scale * high, 2)
    if hit_rate is not None:
        observed["recipe_cache_hit_rate"] = round(hit_rate, 4)
    if obs is None:
        return
    if rate <= NO_HIT:
        observed["warmup_cold_s"] = obs
    elif rate >= FULL_HIT:
        observed["warmup_cached_s"] = obs


def objective(observed: dict, predicted: dict, mode: str) -> float | None:
    """The warmup the study scores: the mode's figure, measured if it was, else predicted."""
    key = f"warmup_{mode}_s"
    if observed.get(key) is not None:
        return float(observed[key])
    if predicted.get(key) is not None:
        return float(predicted[key])
    return None


def drop_step_samples(sample: dict, hit_rate: float | None) -> dict:
    """A boot that hit the cache calibrates memory and load, not the compile steps."""
    if not hit_rate or hit_rate <= NO_HIT:
        return sample
    return {k: v for k, v in sample.items() if k not in STEP_FACTORS}


def cache_hit_sample(cold_s: float, cached_s: float, cold_pred_s: float, cached_pred_s: float,
                     h_model: float) -> float | None:
    """The `cache_hit` calibration sample of one configuration booted cold and cached.

    Model: cold = U + C, cached = U + h C (U: capture and sampler, C: compile, h: what a hit still
    costs). The predictions give C = (cold - cached) / (1 - h) and U; scaled to the cold boot, the
    observed cached boot gives h_obs; the sample is log(h_obs / h_model)."""
    if min(cold_s, cached_s, cold_pred_s, cached_pred_s) <= 0 or not 0 < h_model < 1:
        return None
    compile_pred = (cold_pred_s - cached_pred_s) / (1 - h_model)
    if compile_pred <= 0:
        return None
    scale = cold_s / cold_pred_s
    uncached = (cold_pred_s - compile_pred) * scale
    h_obs = (cached_s - uncached) / (compile_pred * scale)
    if h_obs <= 0:
        return None
    return math.log(h_obs / h_model)


# --- what the report and compare show ------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    seconds: float | None
    measured: bool
    low: float | None = None  # a predicted figure's 2-sd band
    high: float | None = None

    def text(self, fmt=lambda s: f"{s:.0f} s") -> str:
        """'36 s' measured; '90 s (70-120 s, pred.)' predicted, '90 s (pred.)' when no band was kept."""
        if self.seconds is None:
            return "-"
        if self.measured:
            return fmt(self.seconds)
        from ..vocabulary.display import band

        return band(self.seconds, self.low, self.high, fmt, "pred.")


def warmup_figures(observed: dict, predicted: dict, reboot: dict | None = None) -> dict[str, Figure]:
    """{"cold": Figure, "cached": Figure} of a trial from its record's observed and predicted figures
    (TrialRecord.observed, .predicted) and its cold re-boot at the end of a shared-cache study (study attr
    "cold_reboots"), if any."""
    obs, pred = dict(observed), predicted  # a copy: the re-boot's figure must not land in the record
    if reboot and reboot.get("warmup_cold_s") is not None:
        obs["warmup_cold_s"] = reboot["warmup_cold_s"]
    out = {}
    for mode in MODES:
        key = f"warmup_{mode}_s"
        if obs.get(key) is not None:
            out[mode] = Figure(float(obs[key]), True)
        elif pred.get(key) is not None:
            out[mode] = Figure(float(pred[key]), False, *_band(pred, mode))
        else:
            out[mode] = Figure(None, False)
    return out


def _band(pred: dict, mode: str) -> tuple[float | None, float | None]:
    """A predicted figure's band as stored; a study from before the bands were kept has the cold one
    in the calibrated warm-up's band (the same prediction, scaled as the figure is)."""
    low, high = pred.get(f"warmup_{mode}_low_s"), pred.get(f"warmup_{mode}_high_s")
    if low is not None and high is not None:
        return float(low), float(high)
    central, lo, hi = pred.get("warmup_s"), pred.get("warmup_low_s"), pred.get("warmup_high_s")
    if mode == COLD and central and lo is not None and hi is not None:
        scale = float(pred[f"warmup_{mode}_s"]) / float(central)
        return float(lo) * scale, float(hi) * scale
    return None, None


def study_figures(study) -> dict[int, dict[str, Figure]]:
    """Both warmups of every trial of a study, by trial number."""
    from ..vocabulary.record import records

    reboots = study.user_attrs.get("cold_reboots") or {}
    return {r.number: warmup_figures(r.observed, r.predicted, reboots.get(str(r.number)))
            for r in records(study.trials)}


# --- in a trial (trial.run_trial calls these; the benchmark's virtual runner can too) ------------

def cached_budget_rejection(ctx, settings, tp) -> tuple | None:
    """(status, reason) when the cached warmup is confidently over the budget, before any boot.
    `ctx`: the trial's context (a perfmodel target with `warmup` options); `settings`: the trial's."""
    opts = ctx.warmup
    if opts is None or opts.mode != CACHED or opts.budget_s is None or tp is None:
        return None
    from ..vocabulary.display import above
    from ..vocabulary.status import TrialStatus

    cached = cached_prediction(ctx, settings, tp.calibrated.corrections)
    if cached is None or tp.warmup_low_s is None or not tp.calibrated.warmup_seconds:
        return None
    low = cached.warmup_seconds * tp.warmup_low_s / tp.calibrated.warmup_seconds
    if low > opts.budget_s:
        return (TrialStatus.WARMUP_OVER_BUDGET,
                f"predicted cached warmup {cached.warmup_seconds:.0f} s (at least {above(low, opts.budget_s)} s) "
                f"exceeds the "
                f"budget of {opts.budget_s:g} s")
    return None


def finish_trial(ctx, settings, result, tp, hit_rate: float | None) -> None:
    """Both warmup figures of a booted trial, the warmup it is scored by, and its calibration sample
    cleaned of steps a cache hit shortened. `ctx`, `settings` as for cached_budget_rejection."""
    cold_pred_s = cached_pred_s = None
    bands: dict[str, tuple[float, float]] = {}
    if tp is not None:
        cached = cached_prediction(ctx, settings, tp.calibrated.corrections)
        cold_pred_s, cached_pred_s = model_figures(tp.calibrated, cached)
        bands = _relative_bands(tp, cached)
    if result.observed.get("warmup_source") == "launch to ready":
        hit_rate = None  # no Gaudi warmup at all: what was measured is the (only) cold start
    settle(result.observed, result.predicted, cold_pred_s, cached_pred_s, hit_rate, bands)
    result.calibration_sample = drop_step_samples(result.calibration_sample, hit_rate)
    opts = ctx.warmup
    if opts is not None and (opts.mode == CACHED or (hit_rate or 0) > NO_HIT):
        scored = objective(result.observed, result.predicted, opts.mode)
        if scored is not None:
            result.observed["warmup_scored_s"] = scored


def _relative_bands(tp, cached_pred) -> dict[str, tuple[float, float]]:
    """The cold and cached predictions' 2-sd bands (uncertainty.warmup_band: the cached one carries the
    cache factor's uncertainty) as ratios to the predictions."""
    from ..perfmodel.uncertainty import warmup_band

    out = {}
    for mode, pred in ((COLD, tp.calibrated), (CACHED, cached_pred)):
        band = warmup_band(pred, tp.calibration) if pred is not None and pred.failure is None else None
        if band is not None and band.central > 0:
            out[mode] = (band.low / band.central, band.high / band.central)
    return out
