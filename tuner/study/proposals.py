"""Proposals of the calibrated performance model: what the sampler cannot know, handed to it as enqueued trials.

After a boot has calibrated the model, candidates are predicted with the calibrated model (the neighbours of
the measured Pareto front, one parameter moved to another of its choices; the neighbours of the other
measured points; a few points anywhere): warmup from the startup prediction,
throughput and latency from the model's serving clock scaled by the calibrated step-time factors. The
candidate whose predicted objectives add the most hypervolume to the measured front is enqueued, every
other trial, so that the sampler's own proposals keep half of the boots (exploration); an enqueued point
is booted and measured like any other.

A sampler's proposal that a measured point beats everywhere, even at the favourable end of the calibrated
prediction's uncertainty, is not booted (measured.Screen, with a small exploration share): it is told its
predicted figures, marked screened "dominated", never counted as a measurement nor on the measured front.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict
from typing import Any

import optuna
from optuna.trial import TrialState

from ..perfmodel.checks import rejection
from ..perfmodel.target import predict, predict_calibrated, predict_serving
from ..trial.cost import per_mtok
from ..trial.run import TrialContext, TrialResult
from ..vocabulary.cost import server_cards
from ..vocabulary.record import TrialRecord
from ..vocabulary.status import TrialStatus
from .options import COST, COST_PENALTY
from .pareto import hypervolume, pareto_indices
from .screen import effective_key

GUIDE_ATTR = "seed"
GUIDE_LABEL = "performance model: predicted front"
MAX_CANDIDATES = 48  # configurations predicted per proposal (each costs one serving run, once per study)
RANDOM_CANDIDATES = 16  # of them, drawn anywhere in the space
EVERY = 2  # one model proposal per EVERY booted trials
Z_DOMINATED = 2.0  # how far the favourable end of a prediction lies (predictive standard deviations)
DOMINATED = "dominated"  # the screened attribute of a proposal told from its prediction
_SERVING: dict[str, dict[str, float]] = {}  # the prior's serving figures per configuration (pure, reused)


def _serving_key(ctx: TrialContext, settings) -> str:
    return json.dumps([ctx.release, asdict(ctx.device_model), settings.server, settings.env,
                       ctx.workload.describe(), asdict(ctx.load)], sort_keys=True, default=str)


def _prior_serving(ctx: TrialContext, settings) -> dict[str, float]:
    """The load test's figures as the prior model predicts them; the serving clock is the costly part,
    and the calibrated figures are these scaled (serving_estimate), so it runs once per configuration."""
    key = _serving_key(ctx, settings)
    if key not in _SERVING:
        pred = predict(ctx, settings)
        remember_prior_serving(ctx, settings, predict_serving(ctx, pred)
                               if pred is not None and pred.failure is None else {})
    return _SERVING[key]


def remember_prior_serving(ctx: TrialContext, settings, figures: dict[str, float]) -> None:
    """What trial.predict_serving gives for these settings on the prior model, known already (the
    tuning-efficiency benchmark has run that very clock for its nominal table)."""
    if len(_SERVING) >= 16384:
        _SERVING.pop(next(iter(_SERVING)))
    _SERVING[_serving_key(ctx, settings)] = figures


def serving_estimate(prior: dict[str, float], corrections) -> dict[str, float]:
    """Calibrated serving figures from the prior's: throughput and TPOT follow the decode step time,
    TTFT the prefill step time (to first order: the same schedule, each step slower or faster)."""
    d, p = corrections.decode_step, corrections.prefill_step
    out = {}
    for k, v in prior.items():
        if k == "output_throughput":
            out[k] = v / d
        elif "tpot" in k or "itl" in k:
            out[k] = v * d
        elif "ttft" in k:
            out[k] = v * p
        else:
            out[k] = v * d  # e2el and the rest: dominated by decode
    return out


class Guide:
    """Enqueues the calibrated model's most promising unmeasured neighbour of the measured front."""

    def __init__(self, study: optuna.Study, space, ctx: TrialContext, objectives, screen, seed: int | None = 0,
                 proposes: bool = True):
        self.study, self.space, self.ctx, self.objectives, self.screen = study, space, ctx, objectives, screen
        self.rng = random.Random(seed)
        self.booted_since = 0
        # The grid sampler walks its grid by trial number and does not count an enqueued trial as a visit,
        # so a proposal there only boots a grid point twice: the model screens but does not propose.
        self.proposes = proposes

    def after_tell(self, booted: bool, more: bool = True) -> dict[str, Any] | None:
        """Called once a trial is told (`more`: the study wants more trials); the enqueued parameters, if any."""
        self.booted_since += bool(booted)
        if not (more and self.proposes) or self.booted_since < EVERY or not self._ready():
            return None
        if self.study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return None  # seeds still queued go first
        best = self.propose()
        self.booted_since = 0
        if best is not None:
            self.study.enqueue_trial(best, user_attrs={GUIDE_ATTR: GUIDE_LABEL})
        return best

    def _ready(self) -> bool:
        cal = self.ctx.calibration
        return (self.screen.screening and self.ctx.release is not None and self.ctx.device_model is not None
                and cal is not None and cal.n > 0)

    def measured(self) -> list[tuple[int, dict, tuple[float, ...]]]:
        """(trial number, parameters, objectives) of every measured feasible configuration (booted or reused)."""
        records = (TrialRecord.from_frozen(t) for t in self.study.get_trials(deepcopy=False,
                                                                             states=(TrialState.COMPLETE,)))
        return [(r.number, r.params, r.values) for r in records
                if r.feasible and r.ok and r.values and r.screened != DOMINATED]

    def measured_front(self) -> list[tuple[int, dict, tuple[float, ...]]]:
        """The measured Pareto front, as `measured`."""
        done = self.measured()
        return [done[i] for i in pareto_indices([v for _, _, v in done], self.objectives.directions)]

    def predicted(self, settings, tp) -> tuple[float, ...] | None:
        """(throughput, latency, warmup[, $ per million tokens]) of the calibrated model, or None when it
        cannot say."""
        if tp is None or tp.calibrated.failure is not None:
            return None
        serving = serving_estimate(_prior_serving(self.ctx, settings), self.ctx.calibration.corrections)
        latency = self.objectives.latency_key
        if "output_throughput" not in serving or latency not in serving:
            return None
        vec = (serving["output_throughput"], serving[latency], tp.calibrated.warmup_seconds)
        return vec + ((self._cost(settings, vec[0]),) if self.objectives.cost else ())

    def _cost(self, settings, throughput: float) -> float:
        """$ per million output tokens at `throughput` on the cards this configuration's server holds."""
        n = server_cards(self.ctx.backend.argv(settings.server, self.ctx.host, 0), settings.server)
        return per_mtok(self.ctx.cost, n, throughput) if self.ctx.cost is not None else COST_PENALTY

    def dominated(self, settings, tp) -> TrialResult | None:
        """A result told without a boot when a measured point beats this configuration's prediction
        everywhere even at the favourable end of its uncertainty (serving: the calibrated decode-step
        scatter; warmup: its lower bound); None otherwise."""
        if not self._ready() or (vec := self.predicted(settings, tp)) is None:
            return None
        fit = self.ctx.calibration.fits()["decode_step"]
        u = math.exp(Z_DOMINATED * math.hypot(fit.se, fit.spread))
        best = (vec[0] * u, vec[1] / u, tp.warmup_low_s if tp.warmup_low_s is not None else vec[2])
        best += tuple(v / u for v in vec[3:])  # cost: the throughput's favourable end over the same cards
        for number, _, m in self.measured_front():
            if m[0] >= best[0] and all(a <= b for a, b in zip(m[1:], best[1:])):
                latency = self.objectives.latency_key
                metrics = {"output_throughput": vec[0], latency: vec[1]}
                if self.objectives.cost:
                    metrics[COST] = vec[3]
                return TrialResult(status=TrialStatus.OK, booted=False, params=settings.params,
                                   server=settings.server, predicted=tp.summary(), metrics=metrics,
                                   reason=f"not booted: predicted dominated by trial {number} (calibrated model: "
                                          f"{vec[0]:.0f} tok/s, {latency} {vec[1]:.0f}, warmup {vec[2]:.0f} s)",
                                   timings={"accelerator_s": 0.0})
        return None

    def candidates(self, front: list[dict], others: list[dict]) -> list[dict]:
        """Where to look: neighbours of the front first (MAX_CANDIDATES // 2 of them), then, mixed, the
        neighbours of the other measured points (a better point may lie next to a dominated one) and
        points anywhere in the space."""
        seen: set[str] = set()
        near = self._neighbours(front, seen)
        rest = self._neighbours(others, seen) + self._anywhere(RANDOM_CANDIDATES, seen)
        self.rng.shuffle(rest)
        half = MAX_CANDIDATES // 2
        return near[:half] + rest + near[half:]

    def _neighbours(self, points: list[dict], seen: set[str]) -> list[dict]:
        grid, out = self.space.grid(), []
        for params in points:
            for name, choices in grid.items():
                for c in choices:
                    if params.get(name) == c:
                        continue
                    cand = dict(params, **{name: c})
                    for p in self.space.parameters:  # a parameter whose condition now holds: its middle value
                        if p.name not in cand:
                            cand[p.name] = grid[p.name][len(grid[p.name]) // 2]
                    self._add(cand, seen, out)
        self.rng.shuffle(out)
        return out

    def _anywhere(self, n: int, seen: set[str]) -> list[dict]:
        grid, out = self.space.grid(), []
        for _ in range(n):
            self._add({name: self.rng.choice(choices) for name, choices in grid.items()}, seen, out)
        return out

    def _add(self, values: dict, seen: set[str], out: list[dict]) -> None:
        params = self.space.settings_for(values).params
        k = json.dumps(params, sort_keys=True, default=str)
        if k not in seen:
            seen.add(k)
            out.append(params)

    def propose(self) -> dict | None:
        done = self.measured()
        on_front = set(pareto_indices([v for _, _, v in done], self.objectives.directions))
        front = [done[i] for i in sorted(on_front)]
        if not front:
            return None
        directions = self.objectives.directions
        vecs = [v for _, _, v in front]
        budget = self.ctx.limits.warmup_budget_s
        reference = (0.0, max(v[1] for v in vecs) * 1.5, budget or max(v[2] for v in vecs) * 1.5)
        if self.objectives.cost:
            reference += (max(v[3] for v in vecs) * 1.5,)
        base = hypervolume(vecs, reference, directions)
        best, gain, tried = None, 0.0, 0
        others = [p for i, (_, p, _) in enumerate(done) if i not in on_front]
        running = self.screen.running_keys()
        for params in self.candidates([p for _, p, _ in front], others):
            if tried >= MAX_CANDIDATES:
                break
            settings = self.space.settings_for(params)
            key = effective_key(self.ctx, settings)
            if self.screen.measurements(key) or key in running:
                continue  # measured already, or booting now (on any node): a proposal would only wait for it
            tp = predict_calibrated(self.ctx, settings)
            if tp is None or tp.calibrated.failure is not None or rejection(tp, budget) is not None:
                continue
            if budget is not None and tp.calibrated.warmup_seconds > budget:
                continue
            tried += 1
            if (vec := self.predicted(settings, tp)) is None:
                continue
            g = hypervolume(vecs + [vec], reference, directions) - base
            if g > gain:
                best, gain = params, g
        return best
