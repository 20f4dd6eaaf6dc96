"""Before a boot: the prior and the calibrated prediction of one configuration, and whether it is
confidently invalid, out of memory or over the warmup budget (then it is not booted)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..vocabulary.display import above
from ..vocabulary.status import TrialStatus
from .calibration import TIME_FACTORS, Calibration, memory_sample
from .corrections import Corrections
from .hardware import GiB, is_generic
from .prediction import StartupPrediction
from .projection import prediction_facts
from .uncertainty import warmup_band

EXACT_FAILURES = ("config", "buckets")  # the release's own refusal: no model error can change it


@dataclass
class TrialPrediction:
    prior: StartupPrediction  # the documented model (what calibration samples compare against)
    calibrated: StartupPrediction  # the model corrected by this study's boots
    calibration: Calibration
    warmup_low_s: float | None = None  # lower bound of the calibrated warmup (one configuration's scatter)
    warmup_high_s: float | None = None  # its upper bound (the same band, uncertainty.warmup_band)
    memory_failure_certain: bool = False  # out of memory even with favourable memory corrections
    # predict(corrections) of the same configuration: the prior re-predicted with what a boot showed
    repredict: Callable[[Corrections], StartupPrediction | None] | None = field(default=None, repr=False)

    def summary(self) -> dict[str, Any]:
        """The trial record's "predicted" part (calibrated), with the keys "observed" also uses."""
        pred, out = self.calibrated, {}
        if pred.plan is not None:
            out.update(strategy=pred.plan.strategy, prompt_buckets=len(pred.plan.prompt),
                       decode_buckets=len(pred.plan.decode))
        if pred.memory is not None:
            out.update(kv_blocks=pred.num_blocks, free_gib=round(pred.memory.free / GiB, 3))
        out.update(load_s=round(pred.load_seconds, 2), profile_s=round(pred.profile_seconds, 2))
        if pred.failure is None:
            out.update(warmup_s=round(pred.warmup_seconds, 2), prompt_graphs=len(pred.graphed_prompt),
                       decode_graphs=len(pred.graphed_decode),
                       graph_mem_gib=round((pred.prompt_graph_mem + pred.decode_graph_mem) / GiB, 4))
            if self.warmup_low_s is not None:
                out["warmup_low_s"] = round(self.warmup_low_s, 2)
            if self.warmup_high_s is not None:
                out["warmup_high_s"] = round(self.warmup_high_s, 2)
            out["warmup_from"] = self.calibration.source_label()
        else:
            out["failure"] = f"{pred.failure.phase}: {pred.failure.message}"
        out["calibrated_from"] = self.calibration.n
        return out

    def prior_facts(self, observed: dict[str, Any] | None = None) -> dict[str, Any]:
        """The prior's facts, what a boot's calibration sample compares with. Given what the boot showed
        (`observed`, BootTracker.facts' keys), the warm-up steps are the documented constants' at the
        boot's own memory: the bucket lists follow the KV blocks (decode ranges end at the block count),
        so a node with more memory than the prior's warms up other buckets, and step i of the prior's
        list is not the bucket the boot warmed as step i (logcalibration.log_evidence does the same)."""
        facts = prediction_facts(self.prior)
        aligned = self._at_observed_memory(facts, observed) if observed else None
        if aligned is not None:
            facts["steps"] = prediction_facts(aligned)["steps"]
        return facts

    def _at_observed_memory(self, facts: dict[str, Any], observed: dict[str, Any]) -> StartupPrediction | None:
        mem = memory_sample(facts, observed)
        if self.repredict is None or self.prior.plan is None or not any(abs(v) > 1e-6 for v in mem.values()):
            return None
        again = self.repredict(Corrections(kv_block=math.exp(mem.get("kv_block", 0.0)),
                                           graph_mem=math.exp(mem.get("graph_mem", 0.0)),
                                           free_mem_offset_gib=mem.get("free_mem_offset_gib", 0.0)))
        if again is None or again.failure is not None or again.plan is None:
            return None
        return again


def predict_trial(predict: Callable[[Corrections], StartupPrediction | None],
                  calibration: Calibration | None, z: float = 2.0) -> TrialPrediction | None:
    """`predict(corrections)` -> a StartupPrediction of the configuration (None: no model)."""
    prior = predict(Corrections())
    if prior is None:
        return None
    cal = calibration or Calibration(generic=is_generic(prior.sim.device, prior.sim.model))
    central = cal.corrections
    pred = predict(central) if cal.n else prior
    tp = TrialPrediction(prior, pred, cal, repredict=predict)
    if pred.failure is None:
        band = warmup_band(pred, cal, z)
        if band is not None:
            tp.warmup_low_s, tp.warmup_high_s = band.low, band.high
    elif pred.failure.phase not in EXACT_FAILURES:
        # Out of memory as calibrated: is it still, with the memory corrections at their favourable end?
        favourable = cal.optimistic(z)
        memory_only = Corrections(**{**central.to_dict(), **{k: v for k, v in favourable.to_dict().items()
                                                                if k not in TIME_FACTORS}})
        again = predict(memory_only)
        tp.memory_failure_certain = again is not None and again.failure is not None
    return tp


def rejection(tp: TrialPrediction, budget_s: float | None) -> tuple[TrialStatus, str] | None:
    """(status, reason) when the configuration should not boot, else None."""
    pred = tp.calibrated
    if pred.failure is not None:
        if pred.failure.phase in EXACT_FAILURES or tp.memory_failure_certain:
            return TrialStatus.INVALID_CONFIG, f"{pred.failure.phase}: {pred.failure.message}"
        return None  # out of memory only as calibrated: uncertain, so it boots and the boot tells
    if budget_s is not None and tp.warmup_low_s is not None and tp.warmup_low_s > budget_s:
        high = f"-{tp.warmup_high_s:.0f}" if tp.warmup_high_s is not None else "+"
        return (TrialStatus.WARMUP_OVER_BUDGET,
                f"predicted warmup {pred.warmup_seconds:.0f} s (at least {above(tp.warmup_low_s, budget_s)} s; "
                f"2-sd range {above(tp.warmup_low_s, budget_s)}{high} s, from {tp.calibration.source_label()}) "
                f"exceeds the budget of {budget_s:g} s ({len(pred.plan.prompt)} prompt + "
                f"{len(pred.plan.decode)} decode buckets)")
    return None
