"""How sure a warm-up prediction is: its band from the calibration's uncertainty, and where it comes from.

A warm-up is a sum of steps, each scaled by one correction (prompt, decode, capture; a cached recipe by
the cache factor as well); its log-normal band takes the calibration's predictive sd of the mix of
corrections the steps carry (their time shares), so a prediction made mostly of decode steps is as sure
as the decode factor is. Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .calibration import Calibration
from .prediction import StartupPrediction
from .projection import correction_of

Z = 2.0  # the band is +-2 predictive sds (about 95% for one configuration)


@dataclass(frozen=True)
class Band:
    central: float
    low: float
    high: float
    source: str  # "prior", "3 boots", "a log", "3 boots + a log"

    def to_dict(self) -> dict:
        return {"warmup_s": round(self.central, 2), "warmup_low_s": round(self.low, 2),
                "warmup_high_s": round(self.high, 2), "warmup_from": self.source}


def warmup_shares(pred: StartupPrediction) -> dict[str, float]:
    """Share of the warm-up's step seconds each correction scales (the sampler is a constant); a step
    whose recipe is cached is scaled by the cache factor too, so its share counts for both. A bulk
    prediction (the plan's) keeps its steps' sums per correction instead of the steps: the same shares."""
    if pred.step_sums is not None:
        sums = pred.step_sums
        by = {name: getattr(sums, name) for name in ("prompt_warmup", "decode_warmup", "capture",
                                                               "multimodal_warmup")}
        total = sums.total
        return {k: v / total for k, v in by.items() if v > 0} if total > 0 else {}
    by: dict[str, float] = {}
    for s in pred.steps:
        for name in (correction_of(s), *(("cache_hit",) if s.cache_hit else ())):
            by[name] = by.get(name, 0.0) + s.seconds
    total = sum(s.seconds for s in pred.steps)
    return {k: v / total for k, v in by.items() if v > 0} if total > 0 else {}


def warmup_band(pred: StartupPrediction, calibration: Calibration | None, z: float = Z) -> Band | None:
    """The warm-up `pred` (made with `calibration`'s corrections) states, with its z-sd band; None when
    the prediction fails or skips warm-up."""
    if pred.failure is not None or pred.skip_warmup:
        return None
    cal = calibration or Calibration()
    sd = cal.log_sd(warmup_shares(pred))
    fixed = pred.sampler_seconds
    steps = pred.warmup_seconds - fixed
    return Band(pred.warmup_seconds, fixed + steps * math.exp(-z * sd), fixed + steps * math.exp(z * sd),
                cal.source_label())
