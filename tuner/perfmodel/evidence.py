"""What a log's warm-up timings are worth to calibration: observations with their own noise.

logparse.steptimes splits the log into runs and classified intervals; here the intervals of the chosen
run are placed against a prediction of the logged configuration (its steps in the release's order,
each with the correction that scales it) and become observations of the corrections:

* contiguous intervals merge into one observation (their sum is timed by two timestamps only, so the
  1-s resolution of vLLM's stamps hurts once, not once per step); an observation stays per phase while
  each piece is long enough to time, and mixes phases (weighted by predicted seconds) where an elision
  spans several, or where a piece is too short to stand alone;
* the server's own "Warmup finished in N secs" times what no interval covers (an untimed stretch, a
  dropped step), as one more observation over exactly those steps;
* each observation's noise: the timestamps' resolution, and the scatter of the steps it does not see
  (STEP_SD per step, shrinking to nothing as it covers its phases whole).

Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..logparse.steptimes import Interval, StepOrder, StepTimes
from .calibration import Observation
from .prediction import StartupPrediction
from .projection import STEP_SD, correction_of, step_key

MIN_TICKS = 2.0  # an observation shorter than this many timestamp ticks is merged or dropped


def step_order(pred: StartupPrediction) -> StepOrder:
    """The prediction's warm-up order as steptimes places lines in it; the graph budget line comes
    before the first separate capture step."""
    ids = [(step_key(s), s.index, s.total) for s in pred.steps]
    budget = next((i for i, s in enumerate(pred.steps) if s.kind == "capture"), None)
    return StepOrder(ids, budget)


@dataclass
class _Group:
    observed: float
    predicted: dict[str, float]
    first: int
    stop: int
    covered: list[int] = field(default_factory=list)  # positions

    @property
    def signature(self) -> frozenset:
        return frozenset(k for k, v in self.predicted.items() if v > 0)

    @property
    def total(self) -> float:
        return sum(self.predicted.values())


@dataclass
class WarmupEvidence:
    observations: list[Observation]
    notes: list[str]
    described: list[str]  # one phrase per observation: "prompt 66 s over 36 steps (predicted 31 s)"
    covered_s: float = 0.0  # observed seconds the observations hold


def _describe(g: _Group, pred: StartupPrediction) -> str:
    keys: dict[str, int] = {}
    for p in g.covered:
        k = step_key(pred.steps[p])
        keys[k] = keys.get(k, 0) + 1
    steps = ", ".join(f"{n} {k}" for k, n in keys.items())
    return f"{g.observed:.0f} s over {steps} step{'s' if len(g.covered) != 1 else ''} (predicted {g.total:.0f} s)"


def _absorb(into: _Group, g: _Group) -> None:
    into.observed += g.observed
    for k, v in g.predicted.items():
        into.predicted[k] = into.predicted.get(k, 0.0) + v
    into.first, into.stop = min(into.first, g.first), max(into.stop, g.stop)
    into.covered = into.covered + g.covered


def warmup_evidence(st: StepTimes, pred: StartupPrediction, total: bool = True) -> WarmupEvidence:
    """Observations of the warm-up corrections from the chosen run of `st`, placed against `pred`
    (the prior prediction of the logged configuration; `st` read with step_order(pred)). `total`: the
    server's "Warmup finished" total is of `pred`'s configuration (not when the log's bucket counts
    differ from the prediction's: then only its timed steps count, placed by their share of a phase)."""
    run = st.run
    out = WarmupEvidence([], [], [])
    if run is None or not pred.steps:
        return out
    secs = [s.seconds for s in pred.steps]
    names = [correction_of(s) for s in pred.steps]
    phase_total: dict[str, float] = {}
    for n, s in zip(names, secs):
        phase_total[n] = phase_total.get(n, 0.0) + s
    tick = st.resolution_s
    floor = MIN_TICKS * tick
    kept: list[Interval] = [iv for iv in run.intervals if iv.timed and iv.stop <= len(secs)]
    # Contiguous intervals of the same corrections make one group; a group too short to time alone then
    # joins a contiguous neighbour (the one before it, else the one after), mixing their corrections.
    groups: list[_Group] = []
    for iv in kept:
        g = _Group(iv.seconds, {}, iv.first, iv.stop, list(range(iv.first, iv.stop)))
        for p in g.covered:
            g.predicted[names[p]] = g.predicted.get(names[p], 0.0) + secs[p]
        if groups and groups[-1].stop == g.first and groups[-1].signature == g.signature:
            _absorb(groups[-1], g)
        else:
            groups.append(g)
    i = 0
    while i < len(groups):
        g = groups[i]
        if g.observed < floor and len(groups) > 1:
            if i > 0 and groups[i - 1].stop == g.first:
                _absorb(groups[i - 1], groups.pop(i))
                continue
            if i + 1 < len(groups) and g.stop == groups[i + 1].first:
                _absorb(g, groups.pop(i + 1))
                continue
        i += 1
    covered: set[int] = set()
    for g in groups:
        if g.observed < floor or g.total <= 0:
            out.notes.append(f"{_describe(g, pred)}: too short to time with {tick:g}-s timestamps; dropped")
            continue
        out.observations.append(_observation(g.observed, g.predicted, g.covered, secs, names, phase_total, tick,
                                             ticks=1))
        out.described.append(_describe(g, pred))
        out.covered_s += g.observed
        covered.update(g.covered)
    finished = run.finished_s
    if finished is not None and total:
        _remainder(out, finished, pred, covered, out.covered_s, secs, names, phase_total, tick, len(groups))
    return out


def _remainder(out: WarmupEvidence, finished: float, pred: StartupPrediction, covered: set[int], timed_s: float,
               secs: list[float], names: list[str], phase_total: dict[str, float], tick: float, pieces: int) -> None:
    """What "Warmup finished in N secs" says beyond the timed intervals: the steps none of them covers."""
    rest = [p for p in range(len(secs)) if p not in covered]
    rest_pred = sum(secs[p] for p in rest)
    if rest_pred <= 0.05 * sum(secs):
        return
    observed = finished - timed_s - pred.sampler_seconds
    if observed < MIN_TICKS * max(tick, 1.0):
        if observed < 0:
            out.notes.append(f"'Warmup finished in {finished:g} secs' is shorter than the timed steps "
                             f"({timed_s:.0f} s): the total is not used")
        return
    predicted: dict[str, float] = {}
    for p in rest:
        predicted[names[p]] = predicted.get(names[p], 0.0) + secs[p]
    # The total is whole seconds; every timed piece subtracted from it brings its own two stamps.
    out.observations.append(_observation(observed, predicted, rest, secs, names, phase_total, max(tick, 1.0),
                                         ticks=1 + pieces))
    g = _Group(observed, predicted, 0, 0, rest)
    what = "the warm-up" if not covered else "the steps no timed line covers"
    out.described.append(f"'Warmup finished in {finished:g} secs': {what}, {_describe(g, pred)}")
    out.notes.append(f"'Warmup finished in {finished:g} secs' times {len(rest)} step(s) no timed line covers")
    out.covered_s += observed


def _observation(observed: float, predicted: dict[str, float], positions: list[int], secs: list[float],
                 names: list[str], phase_total: dict[str, float], tick: float, ticks: int) -> Observation:
    total = sum(predicted.values())
    weights = {k: v / total for k, v in predicted.items() if v > 0}
    # Two truncated stamps differ from the truth by up to one tick each: variance tick^2 / 6 per pair.
    resolution = math.sqrt(ticks * tick**2 / 6) / observed
    # Steps the observation does not see scatter around the configuration's ratio (STEP_SD per step):
    # the observation's ratio is off by the scatter of the steps it sees, less the more of its phases
    # it covers (nothing left when it covers them whole).
    seen = sum(secs[p] for p in positions)
    whole = sum(phase_total[k] for k in weights)
    squares = sum(secs[p] ** 2 for p in positions)
    sampling = STEP_SD * math.sqrt(squares) / seen * math.sqrt(max(0.0, 1 - seen / whole)) if seen > 0 else STEP_SD
    return Observation(weights, math.log(observed / total), math.hypot(resolution, sampling))
