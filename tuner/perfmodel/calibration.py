"""Calibration: the documented cost model corrected by what boots of this study (and logs) showed.

Every booted trial compares what the *prior* model (identity corrections) predicted for it with what
its log and load test showed, and turns each comparison into one sample per correction (the log of
observed / predicted for a factor, GiB for the free-memory offset). A log of a past boot
(`--calibrate-from`, logcalibration.py) gives *evidence*: observations of one factor or of a mix of
them (an elided stretch of warm-up spans prompt and decode steps), each with the measurement noise
of what the log really holds (timestamp resolution, steps it never shows).

The corrections are one Gaussian model of the log factors, fitted in closed form:

* hierarchical prior: the warm-up factors (prompt, decode, capture) share a node-speed factor and
  keep a deviation from it, as do the memory factors (KV block bytes, graph memory); evidence on one
  phase moves the others part of the way (PRIOR_CORRELATION);
* every source (a boot, a log) is one configuration: its own scatter around the node's factors
  (`spread`, measured from the boots once there are three) is shared by all its observations, so a
  log with many observations still weighs at most what a boot of that configuration would;
* a log's observation is bounded to the prior's plausible range (BOUND_SD) and, where this study's
  boots measured the same factor and the log disagrees with them (CONFLICT_Z), it is dropped: the
  boots win, and `notes` says so.

Samples are kept per trial (trial user attribute "calibration_sample") and refitted from all the
trials of a study, so every node of a shared study fits the same corrections, race-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .corrections import Corrections

# Prior standard deviation of each log factor: how far the documented constants may be off before any
# boot (x2 / x0.5 compile times within about one sd; memory within a few percent).
PRIOR_SD = {"load": 0.7, "profile": 0.7, "prompt_warmup": 0.7, "decode_warmup": 0.7, "capture": 0.7,
            "kv_block": 0.15, "graph_mem": 0.3, "free_mem_offset_gib": 4.0, "decode_step": 0.4,
            "prefill_step": 0.4, "cache_hit": 0.7, "multimodal_warmup": 0.7}
# A device or model the tables lack (hardware.generic_shape / device_for): the prior is a stand-in, so
# every factor may be far off (weights and HBM unknown: the free-memory offset by tens of GiB) and the
# first boot sets each correction almost alone.
GENERIC_PRIOR_SD = {**{k: 1.2 for k in PRIOR_SD}, "kv_block": 1.0, "graph_mem": 1.0, "free_mem_offset_gib": 32.0}
# Factors that share a node-level factor, and the prior correlation between two of them. A node that
# compiles prompt buckets twice as slowly as documented most likely compiles decode buckets slowly too
# (same graph compiler, same host): 0.9 leaves each phase a deviation of ~x1.25 (1 sd) from the node's
# factor, against ~x2 for the node itself. (The two timed real warm-ups, docs/calibration.md 2.2, show
# phases within x1.2 of each other while the node is x0.9 to x2 off the documented constants; this
# value was chosen knowing them, so benchmarks/model_fidelity.py's leave-one-phase-out rows are not
# wholly out of sample.) Memory factors share less: KV layout and graph memory differ in kind.
PRIOR_CORRELATION = {("prompt_warmup", "decode_warmup", "capture"): 0.9, ("kv_block", "graph_mem"): 0.3,
                     # the vision warm-up shares the graph compiler but, where its graphs run, is mostly host
                     # time of its own (vision.HOST_SYNC_S): a weaker tie to each text phase (tied to all
                     # three alike, so that the prior stays a valid covariance)
                     **{(name, "multimodal_warmup"): 0.5 for name in ("prompt_warmup", "decode_warmup", "capture")}}
# Floor of the per-configuration scatter (log units; GiB for the offset): never trust a fit tighter.
MIN_SPREAD = {"kv_block": 0.005, "graph_mem": 0.02, "free_mem_offset_gib": 0.25}
DEFAULT_SPREAD = 0.15  # per-configuration scatter assumed until there are samples to measure it
ADDITIVE = ("free_mem_offset_gib",)
TIME_FACTORS = ("load", "profile", "prompt_warmup", "decode_warmup", "capture", "multimodal_warmup")
MEMORY_FACTORS = ("kv_block", "graph_mem")
WARMUP_FACTORS = ("prompt_warmup", "decode_warmup", "capture", "multimodal_warmup")
BOUND_SD = 2.0  # one log moves a factor at most to the edge of the prior's ~95% range
CONFLICT_Z = 2.5  # a log this many predictive sds away from the study's boots is outvoted by them
NAMES = tuple(PRIOR_SD)
_INDEX = {n: i for i, n in enumerate(NAMES)}


@dataclass(frozen=True)
class FactorFit:
    name: str
    mean: float  # log factor (GiB for the offset)
    se: float  # standard error of the mean
    spread: float  # scatter of one configuration around the mean
    n: int  # sources (boots, logs) that informed it directly

    @property
    def value(self) -> float:
        return self.mean if self.name in ADDITIVE else math.exp(self.mean)

    def at(self, z: float) -> float:
        """The factor z predictive standard deviations away (a single configuration's bound)."""
        x = self.mean + z * math.hypot(self.se, self.spread)
        return x if self.name in ADDITIVE else math.exp(x)


@dataclass(frozen=True)
class Observation:
    """What one source saw of a combination of factors: sum_f weights[f] x factor_f = value, give or
    take `noise` (its own measurement error; the configuration's scatter is added by the fit)."""

    weights: dict[str, float]
    value: float
    noise: float = 0.0


@dataclass(frozen=True)
class Source:
    kind: str  # "boot" | "log"
    name: str
    observations: tuple[Observation, ...]


def evidence_sample(name: str, observations: Iterable[Observation]) -> dict[str, Any]:
    """A log's sample as the study stores it (JSON): its name and observations."""
    return {"log": name, "evidence": [{"w": {k: round(v, 6) for k, v in o.weights.items()},
                                       "y": round(o.value, 6), "sd": round(o.noise, 6)} for o in observations]}


def as_log_sample(sample: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A log's sample as a study stores it. Versions before evidence_sample stored a log like a boot,
    flat {factor: log ratio}, which would be read as a boot (unbounded, never outvoted, a boot's weight):
    such a sample came from a log and is read as one, each factor one observation."""
    if "evidence" in sample:
        return dict(sample)
    obs = [Observation({k: 1.0}, float(v)) for k, v in sample.items()
           if k in _INDEX and isinstance(v, (int, float)) and math.isfinite(v)]
    return evidence_sample(name, obs) if obs else {}


def _source(sample: Mapping[str, Any]) -> Source | None:
    if "evidence" in sample:
        obs = []
        for o in sample.get("evidence") or []:
            w = {k: float(v) for k, v in (o.get("w") or {}).items() if k in _INDEX and v and math.isfinite(v)}
            y, sd = o.get("y"), o.get("sd", 0.0)
            if w and y is not None and math.isfinite(y) and sd is not None and math.isfinite(sd) and sd >= 0:
                obs.append(Observation(w, float(y), float(sd)))
        return Source("log", str(sample.get("log", "log")), tuple(obs)) if obs else None
    clean = {k: float(v) for k, v in sample.items()
             if k in _INDEX and isinstance(v, (int, float)) and math.isfinite(v)}
    return Source("boot", "", tuple(Observation({k: 1.0}, v) for k, v in clean.items())) if clean else None


@dataclass
class _Fit:
    mean: np.ndarray
    cov: np.ndarray
    spread: np.ndarray
    n: dict[str, int]
    notes: list[str]


@dataclass
class Calibration:
    """Corrections fitted from sources; `update` takes one boot's sample or one log's evidence."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    generic: bool = False  # the prior is a generic stand-in (GENERIC_PRIOR_SD)
    _cache: _Fit | None = field(default=None, init=False, repr=False, compare=False)
    _sources: list[Source] | None = field(default=None, init=False, repr=False, compare=False)

    def update(self, sample: Mapping[str, Any]) -> Calibration:
        if _source(sample) is not None:
            self.samples.append(dict(sample))
            self._cache = self._sources = None
        return self

    @property
    def sources(self) -> list[Source]:
        if self._sources is None:
            self._sources = [s for s in map(_source, self.samples) if s is not None]
        return self._sources

    @property
    def n(self) -> int:
        return len(self.sources)

    @property
    def boots(self) -> int:
        return sum(1 for s in self.sources if s.kind == "boot")

    @property
    def logs(self) -> int:
        return sum(1 for s in self.sources if s.kind == "log")

    # -- the fit ------------------------------------------------------------------------------------
    def _prior_sd(self) -> np.ndarray:
        sd = GENERIC_PRIOR_SD if self.generic else PRIOR_SD
        return np.array([sd[n] for n in NAMES])

    def _prior_cov(self) -> np.ndarray:
        sd = self._prior_sd()
        cov = np.diag(sd**2)
        for group, rho in PRIOR_CORRELATION.items():
            for a in group:
                for b in group:
                    if a != b:
                        cov[_INDEX[a], _INDEX[b]] = rho * sd[_INDEX[a]] * sd[_INDEX[b]]
        return cov

    def _spreads(self, boots: list[Source]) -> np.ndarray:
        out = []
        for name in NAMES:
            xs = [o.value for s in boots for o in s.observations if name in o.weights]
            floor = MIN_SPREAD.get(name, 0.03)
            if len(xs) >= 3:
                m = sum(xs) / len(xs)
                out.append(max(floor, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))))
            else:
                out.append(max(floor, DEFAULT_SPREAD if name not in ADDITIVE else 0.5))
        return np.array(out)

    @staticmethod
    def _rows(obs: Iterable[Observation]) -> np.ndarray:
        rows = []
        for o in obs:
            a = np.zeros(len(NAMES))
            for k, w in o.weights.items():
                a[_INDEX[k]] = w
            rows.append(a)
        return np.array(rows)

    @staticmethod
    def _posterior(prior_cov: np.ndarray, spread: np.ndarray, sources: list[tuple[np.ndarray, np.ndarray,
                                                                                  np.ndarray]]):
        """Gaussian posterior of the factors: each source (A, y, noise) is one configuration, its
        scatter diag(spread^2) shared by its rows."""
        info = np.linalg.inv(prior_cov)
        eta = np.zeros(len(NAMES))
        s = np.diag(spread**2)
        for a, y, noise in sources:
            r = a @ s @ a.T + np.diag(noise**2)
            r_inv = np.linalg.inv(r)
            info += a.T @ r_inv @ a
            eta += a.T @ r_inv @ y
        cov = np.linalg.inv(info)
        return cov @ eta, cov

    def _fit(self) -> _Fit:
        if self._cache is not None:
            return self._cache
        sources = self.sources
        boots = [s for s in sources if s.kind == "boot"]
        spread = self._spreads(boots)
        prior_cov = self._prior_cov()
        notes: list[str] = []
        packed = [(self._rows(s.observations), np.array([o.value for o in s.observations]),
                   np.zeros(len(s.observations))) for s in boots]
        boot_mean, boot_cov = self._posterior(prior_cov, spread, packed)
        measured = {k for s in boots for o in s.observations for k in o.weights}
        plausible = prior_cov + np.diag(spread**2)
        n = {name: sum(1 for s in boots for o in s.observations if name in o.weights) for name in NAMES}
        for s in sources:
            if s.kind != "log":
                continue
            kept = []
            for o in s.observations:
                a = self._rows([o])[0]
                what = combination(o.weights)
                value = o.value
                bound = BOUND_SD * math.sqrt(a @ plausible @ a)
                if abs(value) > bound:
                    value = math.copysign(bound, value)
                    notes.append(f"{s.name}: its {what} {_ratio(o.value, o.weights)} is bounded to "
                                 f"{_ratio(value, o.weights)} (the most one log may move the model)")
                if measured & set(o.weights):
                    sd = math.sqrt(a @ boot_cov @ a + a @ np.diag(spread**2) @ a + o.noise**2)
                    expected = float(a @ boot_mean)
                    if abs(value - expected) > CONFLICT_Z * sd:
                        notes.append(f"{s.name}: its {what} {_ratio(o.value, o.weights)} disagrees with this "
                                     f"study's {len(boots)} boot(s) ({_ratio(expected, o.weights)}): the boots win")
                        continue
                kept.append(Observation(o.weights, value, o.noise))
            if kept:
                packed.append((self._rows(kept), np.array([o.value for o in kept]),
                               np.array([o.noise for o in kept])))
                for name in {k for o in kept for k in o.weights}:
                    n[name] += 1
        mean, cov = self._posterior(prior_cov, spread, packed) if len(packed) > len(boots) else (boot_mean, boot_cov)
        self._cache = _Fit(mean, cov, spread, n, notes)
        return self._cache

    def fit(self, name: str) -> FactorFit:
        f, i = self._fit(), _INDEX[name]
        return FactorFit(name, float(f.mean[i]), math.sqrt(max(0.0, float(f.cov[i, i]))), float(f.spread[i]),
                         f.n[name])

    def fits(self) -> dict[str, FactorFit]:
        return {name: self.fit(name) for name in NAMES}

    @property
    def notes(self) -> list[str]:
        """Logs bounded or outvoted by the boots, in plain words."""
        return list(self._fit().notes)

    def log_sd(self, weights: Mapping[str, float]) -> float:
        """Predictive log sd of a combination of factors for one configuration (e.g. a warm-up's time
        shares per factor): the fit's uncertainty and the configuration's own scatter."""
        f = self._fit()
        a = self._rows([Observation(dict(weights), 0.0)])[0]
        return math.sqrt(max(0.0, float(a @ f.cov @ a + a @ np.diag(f.spread**2) @ a)))

    def source_label(self) -> str:
        """Where the corrections come from: "prior", "N boot(s)", "a log", or both."""
        boots, logs = self.boots, self.logs
        parts = ([f"{boots} boot{'s' if boots != 1 else ''}"] if boots else []) + (
            ([f"{logs} log{'s' if logs != 1 else ''}"] if logs > 1 else ["a log"]) if logs else [])
        return " + ".join(parts) if parts else "prior"

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
        if self.logs:
            out["logs"] = self.logs
        for name, f in self.fits().items():
            lo, hi = (f.mean - 2 * f.se, f.mean + 2 * f.se)
            if name not in ADDITIVE:
                lo, hi = math.exp(lo), math.exp(hi)
            out[name] = {"value": round(f.value, 4), "low": round(lo, 4), "high": round(hi, 4), "n": f.n}
        if self.notes:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_samples(cls, samples: Iterable[Mapping[str, Any] | None], generic: bool = False) -> Calibration:
        cal = cls(generic=generic)
        for s in samples:
            if s:
                cal.update(s)
        return cal

    @classmethod
    def for_device(cls, samples: Iterable[Mapping[str, Any] | None], device_model) -> Calibration:
        """from_samples for a target device and model (a DeviceModel, or None): one the tables know only as
        a generic prior (hardware.is_generic) starts from the wide prior its boots replace."""
        from .hardware import is_generic

        dm = device_model
        return cls.from_samples(samples, generic=dm is not None and is_generic(dm.device, dm.model))


def combination(weights: Mapping[str, float]) -> str:
    """What an observation is of, in words: "prompt_warmup", "prompt+decode warm-up"."""
    names = sorted(weights, key=lambda k: -weights[k])
    return names[0] if len(names) == 1 else "+".join(n.replace("_warmup", "") for n in names) + " warm-up"


def _ratio(value: float, weights: Mapping[str, float]) -> str:
    if set(weights) & set(ADDITIVE):
        return f"{value:+.2f} GiB"
    return f"x{math.exp(value):.3g}"


def calibrate_from_observations(pairs: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> Calibration:
    """A calibration from (prior prediction, observation) pairs, as `observation_sample` reads them:
    the entry point for boots of this study."""
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
    out.update(memory_sample(prior, observed))
    # Serving: the decode step from the median TPOT. TTFT mixes prefill with queueing, so the prefill
    # factor keeps its prior until a cleaner signal exists.
    r = _log_ratio(observed.get("median_tpot_ms"), prior.get("median_tpot_ms"))
    if r is not None:
        out["decode_step"] = r
    return out


def memory_sample(prior: Mapping[str, Any], observed: Mapping[str, Any]) -> dict[str, float]:
    """The memory part of a sample: free-memory offset, KV block bytes, graph memory per graph."""
    out: dict[str, float] = {}
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
    return out
