"""One configuration through the model, as a plan sees it: does it start, what it builds, how long its
warm-up takes (cold and with a recipe cache), what it serves at the workload, and how sure that is.

Each configuration is predicted once with the calibrated corrections (the documented prior without
calibration; `--calibrate-from` logs move them), the startup by perfmodel.bulk and the load test by
perfmodel.fastserving. Its bands come from the calibration's uncertainty, z standard deviations either
way: the warm-up's band is the one the study screens with (uncertainty.warmup_band: the predictive sd of
the mix of corrections its steps carry), so the plan calls infeasible what a study would not boot;
throughput and TPOT with the decode-step factor's, TTFT with the prefill-step factor's.

A configuration is *confidently infeasible* when no correction within the bands saves it: the release
refuses it, it runs out of device memory even with the memory corrections at their favourable end, even
its shortest warm-up is over the budget, or even its favourable latency is over an SLO. It is *likely
infeasible* when the central prediction fails a limit but a band reaches back (an out-of-memory start
that favourable memory would avoid, a warm-up over the budget only at the centre, runtime recompiles or
failed requests in the predicted load test). The reasons are grouped for the plan's summary.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..perfmodel.bulk import BulkModel, cached_warmup, facts
from ..perfmodel.calibration import TIME_FACTORS, Calibration
from ..perfmodel.checks import EXACT_FAILURES
from ..perfmodel.corrections import Corrections
from ..perfmodel.fastserving import FastServing
from ..perfmodel.hardware import is_generic
from ..perfmodel.uncertainty import warmup_band

FEASIBLE, INFEASIBLE, LIKELY = "feasible", "infeasible", "likely infeasible"
Z = 2.0
_FAILURE_WORDS = {
    "load": "out of device memory loading the weights",
    "profile": "out of device memory in the profiling run",
    "kv": "no room for one max_model_len sequence in the KV cache",
    "states": "out of device memory for the compact Gated DeltaNet states beside the KV cache (max_num_seqs)",
    "warmup": "out of device memory capturing HPU graphs in the warm-up",
}


@dataclass
class Limits:
    """What the study will tune for (the flags `tune` takes): objectives and constraints."""

    latency_key: str = "p99_ttft_ms"
    warmup_mode: str = "cold"  # which warm-up is the objective: cold or cached (a prepared recipe cache)
    warmup_budget_s: float | None = None
    slos_ms: dict[str, float] = field(default_factory=dict)
    allow_recompiles: bool = False
    allow_failed_requests: bool = False
    percentiles: tuple[float, ...] = (50, 90, 99)  # the load test's (--metric-percentiles)


@dataclass
class Point:
    """A configuration's prediction. Vectors are (throughput, latency, warm-up) in the study's objectives;
    `best` / `worst` are the favourable and unfavourable ends of its bands."""

    values: dict[str, Any]
    verdict: str  # FEASIBLE, INFEASIBLE (confidently), LIKELY (likely infeasible)
    reason: str | None = None  # the group of an infeasible one
    detail: str | None = None  # its message
    vector: tuple[float, float, float] | None = None
    best: tuple[float, float, float] | None = None
    worst: tuple[float, float, float] | None = None
    figures: dict[str, Any] = field(default_factory=dict)


class Evaluator:
    """Predicts configurations of one target (release, device, model, workload and load) under `limits`."""

    def __init__(self, target, limits: Limits, calibration: Calibration | None = None, z: float = Z):
        dm = target.device_model
        self.target, self.limits, self.z = target, limits, z
        self.calibration = calibration or Calibration(generic=bool(dm) and is_generic(dm.device, dm.model))
        cal = self.calibration
        self.central = cal.corrections if cal.n else Corrections()
        favourable = cal.optimistic(z)
        # memory at its favourable end, times as calibrated: does an out-of-memory start stay one?
        self.memory_favourable = Corrections(**{**self.central.to_dict(), **{
            k: v for k, v in favourable.to_dict().items() if k not in TIME_FACTORS}})
        fits = cal.fits()
        self.sd = {name: math.hypot(f.se, f.spread) for name, f in fits.items()}  # one configuration's
        self.global_sd = {name: f.se for name, f in fits.items()}  # shared by every configuration
        self.spread = {name: f.spread for name, f in fits.items()}  # of one configuration around the others
        self.warmup_spread = cal.warmup_spread()
        self.bulk = BulkModel(target)
        self.serving = FastServing(target, percentiles=limits.percentiles)
        self.keys = tuple(dict.fromkeys(("output_throughput", limits.latency_key, "median_ttft_ms", "median_tpot_ms",
                                         *limits.slos_ms, "runtime_compiles", "failed")))

    def latency_factor(self) -> str:
        """The correction that scales the latency objective: TTFT the prefill step, the others the decode step."""
        return "prefill_step" if "ttft" in self.limits.latency_key else "decode_step"

    def evaluate(self, settings, values: dict[str, Any] | None = None) -> Point:
        values = dict(settings.params if values is None else values)
        pred = self.bulk.startup(settings, self.central)
        if pred is None:
            raise ValueError("a plan needs the performance model: a release profile and a device model")
        facts_ = facts(pred)
        if pred.failure is not None:
            return self._failed(values, settings, pred, facts_)
        lim, z = self.limits, self.z
        cold, cached = pred.warmup_seconds, cached_warmup(pred)
        band = warmup_band(pred, self.calibration, z)  # the band the study's screen rejects with
        low, high = (band.low, band.high) if band is not None else (cold, cold)
        warm = cold if lim.warmup_mode == "cold" else cached
        scale = warm / cold if cold else 1.0
        warm_low, warm_high = low * scale, high * scale
        figures = {**facts_, "warmup_cold_s": cold, "warmup_cached_s": cached, "warmup_low_s": warm_low,
                   "warmup_high_s": warm_high}
        serving = self.serving.predict(pred, self.keys)
        figures.update(serving)
        thr, lat = serving.get("output_throughput"), serving.get(lim.latency_key)
        if thr is None or lat is None:
            return Point(values, LIKELY, "no serving prediction (the workload has no lengths)", None,
                         figures=figures)
        u_thr = math.exp(z * self.sd["decode_step"])
        u_lat = math.exp(z * self.sd[self.latency_factor()])
        point = Point(values, FEASIBLE, vector=(thr, lat, warm), best=(thr * u_thr, lat / u_lat, warm_low),
                      worst=(thr / u_thr, lat * u_lat, warm_high), figures=figures)
        budget = lim.warmup_budget_s
        if budget is not None and warm_low > budget:
            return _infeasible(point, INFEASIBLE, "warm-up over the budget even at its shortest",
                               f"predicted {warm:.0f} s (at least {warm_low:.0f} s) against {budget:g} s")
        for key, limit in lim.slos_ms.items():
            v = serving.get(key)
            if v is not None and v / math.exp(z * self.sd[_factor_of(key)]) > limit:
                return _infeasible(point, INFEASIBLE, f"{key} over its SLO even at the favourable end",
                                   f"predicted {v:.0f} ms against {limit:g} ms")
        if budget is not None and warm > budget:
            return _infeasible(point, LIKELY, "warm-up over the budget as predicted",
                               f"predicted {warm:.0f} s (at least {warm_low:.0f} s) against {budget:g} s")
        for key, limit in lim.slos_ms.items():
            v = serving.get(key)
            if v is not None and v > limit:
                return _infeasible(point, LIKELY, f"{key} over its SLO as predicted",
                                   f"predicted {v:.0f} ms against {limit:g} ms")
        if not lim.allow_recompiles and serving.get("runtime_compiles"):
            return _infeasible(point, LIKELY, "shapes the warm-up misses compile under load",
                               f"{serving['runtime_compiles']:.0f} shapes (--allow-recompiles lifts this limit)")
        if not lim.allow_failed_requests and serving.get("failed"):
            return _infeasible(point, LIKELY, "requests fail in the load test",
                               f"{serving['failed']:.0f} requests")
        return point

    def _failed(self, values, settings, pred, facts_) -> Point:
        f = pred.failure
        message = f.message.splitlines()[-1] if f.message else f.phase
        if f.phase in EXACT_FAILURES:
            return Point(values, INFEASIBLE, "refused by the release", message, figures=facts_)
        again = self.bulk.startup(settings, self.memory_favourable)
        words = _FAILURE_WORDS.get(f.phase, f"fails in {f.phase}")
        if again is not None and again.failure is not None:
            return Point(values, INFEASIBLE, words, message, figures=facts_)
        return Point(values, LIKELY, ("may have " if words.startswith("no room") else "may be ") + words, message,
                     figures=facts_)


def _infeasible(point: Point, verdict: str, reason: str, detail: str) -> Point:
    point.verdict, point.reason, point.detail = verdict, reason, detail
    return point


def _factor_of(key: str) -> str:
    return "prefill_step" if "ttft" in key else "decode_step"


def message_shape(message: str | None) -> str:
    """A message with its numbers blanked, so that the same refusal groups together."""
    return re.sub(r"\d+(\.\d+)?", "N", message or "")[:160]
