"""Calibration: the documented cost model corrected by what boots of this study showed.

Every booted trial compares what the *prior* model (identity corrections) predicted for it with what
its log and load test showed, and turns each comparison into one sample per correction (the log of
observed / predicted for a factor, GiB for the free-memory offset). A correction is then the
precision-weighted mean of its samples and a prior centred on the documented value, so one boot
moves it part of the way and a few boots settle it; its uncertainty (standard error of the mean)
and its spread (how much single configurations scatter around it) come with it.

Samples are kept per trial (trial user attribute "calibration_sample") and refitted from all the
trials of a study, so every node of a shared study fits the same corrections, race-free; logs of past
boots (`--calibrate-from`) feed the same `Calibration.update` with samples of their own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .corrections import Corrections

# Prior standard deviation of each log factor: how far the documented constants may be off before any
# boot (x2 / x0.5 compile times within about one sd; memory within a few percent).
PRIOR_SD = {"load": 0.7, "profile": 0.7, "prompt_warmup": 0.7, "decode_warmup": 0.7, "capture": 0.7,
            "kv_block": 0.15, "graph_mem": 0.3, "free_mem_offset_gib": 4.0, "decode_step": 0.4,
            "prefill_step": 0.4, "cache_hit": 0.7}
# A device or model the tables lack (hardware.generic_shape / device_for): the prior is a stand-in, so
# every factor may be far off (weights and HBM unknown: the free-memory offset by tens of GiB) and the
# first boot sets each correction almost alone.
GENERIC_PRIOR_SD = {**{k: 1.2 for k in PRIOR_SD}, "kv_block": 1.0, "graph_mem": 1.0, "free_mem_offset_gib": 32.0}
# Floor of the per-configuration scatter (log units; GiB for the offset): never trust a fit tighter.
MIN_SPREAD = {"kv_block": 0.005, "graph_mem": 0.02, "free_mem_offset_gib": 0.25}
DEFAULT_SPREAD = 0.15  # per-configuration scatter assumed until there are samples to measure it
ADDITIVE = ("free_mem_offset_gib",)
TIME_FACTORS = ("load", "profile", "prompt_warmup", "decode_warmup", "capture")
MEMORY_FACTORS = ("kv_block", "graph_mem")


@dataclass(frozen=True)
class FactorFit:
    name: str
    mean: float  # log factor (GiB for the offset)
    se: float  # standard error of the mean
    spread: float  # scatter of one configuration around the mean
    n: int

    @property
    def value(self) -> float:
        return self.mean if self.name in ADDITIVE else math.exp(self.mean)

    def at(self, z: float) -> float:
        """The factor z predictive standard deviations away (a single configuration's bound)."""
        x = self.mean + z * math.hypot(self.se, self.spread)
        return x if self.name in ADDITIVE else math.exp(x)


@dataclass
class Calibration:
    """Corrections fitted from samples; `update` takes one boot's (or one log's) sample."""

    samples: list[dict[str, float]] = field(default_factory=list)
    generic: bool = False  # the prior is a generic stand-in (GENERIC_PRIOR_SD)

    def update(self, sample: Mapping[str, float]) -> Calibration:
        clean = {k: float(v) for k, v in sample.items() if k in PRIOR_SD and v is not None and math.isfinite(v)}
        if clean:
            self.samples.append(clean)
        return self

    def fit(self, name: str) -> FactorFit:
        xs = [s[name] for s in self.samples if name in s]
        n, prior_sd = len(xs), (GENERIC_PRIOR_SD if self.generic else PRIOR_SD)[name]
        floor = MIN_SPREAD.get(name, 0.03)
        if n >= 3:
            m = sum(xs) / n
            spread = max(floor, math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)))
        else:
            spread = max(floor, DEFAULT_SPREAD if name not in ADDITIVE else 0.5)
        if n == 0:
            return FactorFit(name, 0.0, prior_sd, spread, 0)
        # Normal prior at the documented value (0), n samples of scatter `spread`.
        precision = 1.0 / prior_sd**2 + n / spread**2
        mean = (sum(xs) / spread**2) / precision
        return FactorFit(name, mean, math.sqrt(1.0 / precision), spread, n)

    def fits(self) -> dict[str, FactorFit]:
        return {name: self.fit(name) for name in PRIOR_SD}

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def corrections(self) -> Corrections:
        """The central corrections: what the model predicts with now."""
        return Corrections(**{name: f.value for name, f in self.fits().items()})

    def optimistic(self, z: float = 2.0) -> Corrections:
        """Corrections at the favourable end for one configuration (shorter times, less memory used, more
        free memory): a prediction that fails even with them is confidently over budget or memory."""
        fits = self.fits()
        return Corrections(**{name: f.at(+z if name in ADDITIVE else -z) for name, f in fits.items()})

    def pessimistic(self, z: float = 2.0) -> Corrections:
        """The unfavourable end, as `optimistic` the favourable one (the other side of a plan's bands)."""
        fits = self.fits()
        return Corrections(**{name: f.at(-z if name in ADDITIVE else +z) for name, f in fits.items()})

    def warmup_spread(self) -> float:
        """Log scatter of one configuration's warmup around its calibrated prediction."""
        fits = self.fits()
        return max(math.hypot(fits[k].se, fits[k].spread) for k in ("prompt_warmup", "decode_warmup"))

    def summary(self) -> dict[str, Any]:
        """For the study attribute and the report: value, 95% interval and sample count per correction."""
        out: dict[str, Any] = {"boots": self.n, **({"prior": "generic"} if self.generic else {})}
        for name, f in self.fits().items():
            lo, hi = (f.mean - 2 * f.se, f.mean + 2 * f.se)
            if name not in ADDITIVE:
                lo, hi = math.exp(lo), math.exp(hi)
            out[name] = {"value": round(f.value, 4), "low": round(lo, 4), "high": round(hi, 4), "n": f.n}
        return out

    @classmethod
    def from_samples(cls, samples: Iterable[Mapping[str, float] | None], generic: bool = False) -> Calibration:
        cal = cls(generic=generic)
        for s in samples:
            if s:
                cal.update(s)
        return cal


def calibrate_from_observations(pairs: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Calibration:
    """A calibration from (prior prediction, observation) pairs, as `observation_sample` reads them:
    the entry point for boots of this study and for logs of past boots alike."""
    return Calibration.from_samples(observation_sample(p, o) for p, o in pairs)


def _log_ratio(observed: float | None, predicted: float | None) -> float | None:
    if observed is None or predicted is None or observed <= 0 or predicted <= 0:
        return None
    return math.log(observed / predicted)


def observation_sample(prior: Mapping[str, Any], observed: Mapping[str, Any]) -> dict[str, float]:
    """One boot's sample: observed against the prior (uncorrected) prediction of the same configuration.

    Both sides use the keys of `projection.prediction_facts` / `BootTracker.facts`: load_s, profile_s,
    "steps" (step key -> seconds; the prior's -> [correction, seconds]), kv_blocks, kv_cache_gib,
    free_gib, block_gib, graph_mem_gib and graphs, and the serving figure median_tpot_ms."""
    out: dict[str, float] = {}
    for name in ("load", "profile"):
        r = _log_ratio(observed.get(f"{name}_s"), prior.get(f"{name}_s"))
        if r is not None:
            out[name] = r
    # Warmup: per correction, the steps both sides know (same phase, index and count), summed.
    pred_steps, obs_steps = prior.get("steps") or {}, observed.get("steps") or {}
    sums: dict[str, list[float]] = {}
    for key, secs in obs_steps.items():
        if key in pred_steps:
            name, predicted = pred_steps[key]
            acc = sums.setdefault(name, [0.0, 0.0])
            acc[0] += secs
            acc[1] += predicted
    for name, (o, p) in sums.items():
        r = _log_ratio(o, p)
        if r is not None:
            out[name] = r
    if observed.get("free_gib") is not None and prior.get("free_gib") is not None:
        out["free_mem_offset_gib"] = float(observed["free_gib"]) - float(prior["free_gib"])
    # KV blocks: the bytes a block really takes, from the KV memory the log reports (or, without that
    # line, the memory the prior model expects) over the blocks it got.
    blocks, block_gib = observed.get("kv_blocks"), prior.get("block_gib")
    kv_gib = observed.get("kv_cache_gib") or prior.get("kv_cache_gib")
    if blocks and block_gib and kv_gib:
        r = _log_ratio(kv_gib / blocks, block_gib)
        if r is not None and blocks > 1:
            out["kv_block"] = r
    g_obs, g_pred = observed.get("graph_mem_gib"), prior.get("graph_mem_gib")
    n_obs, n_pred = observed.get("graphs"), prior.get("graphs")
    if g_obs and g_pred and n_obs and n_pred:
        r = _log_ratio(g_obs / n_obs, g_pred / n_pred)
        if r is not None:
            out["graph_mem"] = r
    # Serving: the decode step from the median TPOT. TTFT mixes prefill with queueing, so the prefill
    # factor keeps its prior until a cleaner signal exists.
    r = _log_ratio(observed.get("median_tpot_ms"), prior.get("median_tpot_ms"))
    if r is not None:
        out["decode_step"] = r
    return out
