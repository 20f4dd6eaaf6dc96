"""What each configuration really does: the scenarios (the hardware differing from the tuner's prior model
in ways the tuner is not told), the true table of a problem, its Pareto front and hypervolume."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from benchmarks.tuning.problems import DIRECTIONS, OBJECTIVES, Problem
from tuner.load.arrivals import gamma_send_offsets
from tuner.perfmodel import Corrections
from tuner.perfmodel import target as M
from tuner.sim import run_virtual
from tuner.sim.startup import startup_events
from tuner.space.schema import SearchSpace, TrialSettings
from tuner.study.pareto import balanced_index, hypervolume

KEEP = ("output_throughput", "p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "median_tpot_ms", "completed", "failed",
        "duration", "runtime_compiles", "num_preemptions")  # median TPOT: the decode-step calibration sample

# What the hardware really does differently from the documented model; the tuner is not told.
SCENARIOS: dict[str, dict[str, float]] = {
    "nominal": {},
    "slow_compile": {"prompt_warmup": 2.0, "decode_warmup": 2.0, "capture": 2.0},
    "fast_compile": {"prompt_warmup": 0.5, "decode_warmup": 0.5, "capture": 0.5},
    "more_memory": {"kv_block": 1.1},
    "more_graph_memory": {"graph_mem": 1.25},
    "slow_decode": {"decode_step": 1.25},
    # warm-up steps cost what real logs' timed steps cost (benchmarks/tuning/realsteps.py), not the model's
    # rules scaled: only for problems with real logs of their device and warm-up style
    "real_steps": {},
    # the noise family: the nominal truth, measured with noise (benchmarks/tuning/noise.py)
    "typical_noise": {},
    "noisy_node": {},
}
STEP_SCENARIOS = ("real_steps",)
NOISE_SCENARIOS = ("typical_noise", "noisy_node")  # their true table and front are nominal's
COMPILE_ONLY = ("prompt_warmup", "decode_warmup", "capture")  # serving changes only through runtime recompiles


def truth(scenario: str) -> Corrections:
    return Corrections().scaled(**SCENARIOS[scenario])


@dataclass
class Eval:
    """What one configuration really does (virtual clock, warmup perturbed by its factor)."""

    params: dict
    failure: str | None  # the server's last error line when it cannot start
    startup_s: float  # start -> ready, or -> the failure
    warmup_s: float | None
    metrics: dict = field(default_factory=dict)
    serving: tuple = ()  # what the serving run depends on (serving_identity)


def serving_identity(pred) -> tuple:
    """Everything run_virtual's result depends on besides the workload: buckets, graphs, KV blocks and the
    step-time factors (compile factors matter only through runtime recompiles, checked separately)."""
    c = pred.corrections
    return (repr(pred.plan.prompt), repr(pred.plan.decode), repr(pred.graphed_prompt), repr(pred.graphed_decode),
            pred.num_blocks, c.kv_block, c.decode_step, c.prefill_step)


def key_of(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def warmup_factor(pred, sigma: float) -> float:
    """The cost model's error for one effective configuration (release, buckets, graphs, KV blocks, as
    the prior model sees them): settings a release reads the same way get the same factor."""
    what = (pred.profile, pred.plan and (pred.plan.prompt, pred.plan.decode), len(pred.graphed_prompt),
            len(pred.graphed_decode), pred.num_blocks, pred.failure and pred.failure.message)
    u = int(hashlib.sha256(repr(what).encode()).hexdigest()[:12], 16) / 16**12
    return math.exp(sigma * statistics.NormalDist().inv_cdf(min(max(u, 1e-9), 1 - 1e-9)))


def true_prediction(problem: Problem, settings: TrialSettings, sigma: float, scenario: str, perturb: bool = True):
    """(the prior model's prediction, what the server really does at startup in this scenario)."""
    ctx = problem.context()
    prior = M.predict(ctx, settings)
    real = M.predict(ctx, settings, truth(scenario)) if SCENARIOS[scenario] else prior
    if scenario in STEP_SCENARIOS:
        from benchmarks.tuning.realsteps import real_steps

        real = real_steps(problem.key, real)
    if not perturb:
        return prior, real
    f = warmup_factor(prior, sigma)
    return prior, replace(real, steps=[replace(s, seconds=s.seconds * f) for s in real.steps],
                          sampler_seconds=real.sampler_seconds * f)


def evaluate(problem: Problem, settings: TrialSettings, sigma: float, scenario: str = "nominal",
             nominal: Eval | None = None) -> Eval:
    prior, served = true_prediction(problem, settings, sigma, scenario, perturb=False)
    _, real = true_prediction(problem, settings, sigma, scenario)
    t = 0.0
    for e in startup_events(real):
        if e[0] in ("fail", "ready", "hang"):
            break
        t += e[1] if e[0] == "advance" else 0.0
    if real.failure is not None:
        return Eval(settings.params, f"{real.failure.phase}: {real.failure.message}", t, None)
    ident = serving_identity(served)
    if (nominal is not None and nominal.failure is None and nominal.serving == ident
            and (not nominal.metrics["runtime_compiles"] or not set(SCENARIOS[scenario]) & set(COMPILE_ONLY))):
        metrics = nominal.metrics  # the serving run would be the nominal one, step for step
    else:
        w = problem.workload()
        ins, outs = w.lengths()
        times = gamma_send_offsets(len(ins), problem.request_rate, 1.0,
                                   np.random.default_rng([w.seed, 0x41525256]))
        summary = run_virtual(served, list(zip(times, ins, outs))).summary()
        metrics = {k: summary[k] for k in KEEP}
    return Eval(settings.params, None, t, real.warmup_seconds, metrics, ident)


def grid_points(space: SearchSpace) -> list[dict]:
    """Every distinct configuration of a categorical space (a parameter whose condition fails is absent)."""
    out = [{}]
    for p in space.parameters:
        out = [w for v in out for w in ([dict(v, **{p.name: c}) for c in p.choices]
                                        if space.condition_met(p, v) else [v])]
    return out


def _eval_chunk(args) -> list[Eval]:
    problem, quick, sigma, scenario, chunk = args
    space = problem.search_space(quick)
    return [evaluate(problem, space.settings_for(v), sigma, scenario, nom) for v, nom in chunk]


def true_table(problem: Problem, quick: bool, sigma: float, scenario: str, pool) -> dict[str, Eval]:
    points = grid_points(problem.search_space(quick))
    nominal = TABLES.get((problem.key, "nominal"), {})
    pairs = [(v, nominal.get(key_of(v))) for v in points]
    parts = pool.map(_eval_chunk, [(problem, quick, sigma, scenario, pairs[i::16]) for i in range(16)])
    return {key_of(e.params): e for part in parts for e in part}


TABLES: dict[tuple[str, str], dict[str, Eval]] = {}  # (problem, scenario) -> true table (forked workers inherit)


def objective_vector(e: Eval) -> tuple[float, float, float]:
    return (e.metrics["output_throughput"], e.metrics[OBJECTIVES.latency_key], e.warmup_s)


def feasible(e: Eval, budget: float) -> bool:
    return e.failure is None and not e.metrics["failed"] and e.warmup_s <= budget


def fits(e: Eval, budget: float) -> bool:
    """A good configuration for the false-rejection / false-abort rates: it starts and fits the budget."""
    return e.failure is None and e.warmup_s <= budget


def front(points: list) -> list:
    """The non-dominated points (numpy; tuner.study.pareto's pure-Python version is O(n^2) per call)."""
    if not points:
        return []
    a = np.array(points, dtype=float) * np.array([-1.0, 1.0, 1.0])  # all minimised
    return [tuple(points[i]) for i in range(len(a))
            if not np.any(np.all(a <= a[i], axis=1) & np.any(a < a[i], axis=1))]


def true_front(problem: Problem, table: dict[str, Eval]) -> dict:
    ok = [e for e in table.values() if feasible(e, problem.warmup_budget_s)]
    pts = front([objective_vector(e) for e in ok])
    members = [e for e in ok if objective_vector(e) in set(pts)]
    inside = [e for e in members if hypervolume([objective_vector(e)], problem.reference, DIRECTIONS) > 0]
    bal = inside[balanced_index([objective_vector(e) for e in inside], DIRECTIONS)] if inside else None
    return {"points": len(table), "feasible": len(ok), "failing": sum(e.failure is not None for e in table.values()),
            "front": pts, "members": members, "balanced": bal,
            "hv": hypervolume(pts, problem.reference, DIRECTIONS), "reference": problem.reference}
