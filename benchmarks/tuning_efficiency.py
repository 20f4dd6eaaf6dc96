"""Tuning efficiency per accelerator-hour: bucket-tuner's method against the alternatives a user has.

Every configuration of a discretised reference space is evaluated on the simulator's virtual clock
(`predict_startup` + `run_virtual`), which gives the true Pareto front and its hypervolume on a fixed
reference point. Each contender then runs the REAL study loop (`tuner.study.run_study`: samplers,
seeding, constraints, penalties) with a virtual runner that answers from that table and charges the
simulated accelerator time (x cards) a real trial would cost: 0 if rejected before boot; the startup
timeline up to the failure if it fails at boot; up to the abort if the warmup-budget abort fires
(the boot's log events fed to the tuner's BootTracker under trial.run_trial's rule); otherwise
weights + profiling + warmup + the measured load test (the warm pass is not charged).

The tuner's prior model and the simulator share one cost model, which would make pre-boot checks
exact. So the truth differs from the prior in ways the tuner is not told: per scenario (compile and
warmup x2 / x0.5, KV block memory +10%, graph memory +25%, decode step +25%; SCENARIOS), and per
effective configuration a warmup factor exp(N(0, sigma)) (--warmup-error, default 0.15). The full
method has to learn the scenario from its own boots (tuner/perfmodel/calibration.py).

Usage: python benchmarks/tuning_efficiency.py [--quick] [--seeds N] [--budgets 10,20,30,50]
       [--problems linear,gaudi,upgrade] [--scenarios nominal,...] [--contenders random,tpe,full,...]
       [--jobs N]
Writes benchmarks/results/tuning_efficiency[-quick].json ("summary": problem -> scenario -> contender)
and .md, and prints the tables with the wall and CPU time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner import study as study_mod
from tuner import trial as T
from tuner.backends import Backend
from tuner.logparse import events as ev
from tuner.pareto import balanced_index, dominates, hypervolume
from tuner.perfmodel import Corrections
from tuner.perfmodel.calibration import Calibration, observation_sample
from tuner.perfmodel.projection import BootTracker
from tuner.sim import run_virtual
from tuner.sim.startup import startup_events
from tuner.space import SearchSpace, TrialSettings
from tuner.status import TrialStatus
from tuner.study import Constraints, Objectives, StudyError, StudyOptions, run_study
from tuner.workload import RandomWorkload, gamma_send_offsets

OBJECTIVES = Objectives()  # output_throughput (max), p99_ttft_ms (min), warmup_s (min)
DIRECTIONS = OBJECTIVES.directions
KEEP = ("output_throughput", "p99_ttft_ms", "median_ttft_ms", "p99_tpot_ms", "completed", "failed", "duration",
        "runtime_compiles", "num_preemptions")


# ------------------------------------------------------------------------------------------ problems

@dataclass
class Problem:
    key: str
    title: str
    space: dict  # tuner.space schema; every parameter categorical, so every proposal is a grid point
    quick_choices: dict  # parameter -> the fewer choices --quick keeps
    device: str
    model: str
    cards: int  # accelerator-hours = seconds x cards / 3600
    input_len: int
    output_len: int
    range_ratio: float
    num_prompts: int
    request_rate: float  # Poisson arrivals, as vllm bench serve --request-rate
    warmup_budget_s: float  # a constraint for everyone; the full method also rejects / aborts above it
    throughput_ref: float  # reference point: (throughput_ref, latency_ref_ms, warmup_budget_s)
    latency_ref_ms: float

    @property
    def release(self) -> str:
        return self.space["release"]

    @property
    def reference(self) -> tuple[float, float, float]:
        return (self.throughput_ref, self.latency_ref_ms, self.warmup_budget_s)

    def search_space(self, quick: bool, coarse: bool = False) -> SearchSpace:
        data = json.loads(json.dumps(self.space))
        for name, spec in data["parameters"].items():
            if quick and name in self.quick_choices:
                spec["choices"] = list(self.quick_choices[name])
            c = spec["choices"]
            if coarse and len(c) > 3:  # auto_tune-style lattice: low, middle, high
                spec["choices"] = [c[0], c[len(c) // 2], c[-1]]
        return SearchSpace.from_dict(data, source=f"<{self.key}>")

    def workload(self) -> RandomWorkload:
        return RandomWorkload(self.input_len, self.output_len, self.range_ratio, num_prompts=self.num_prompts)

    def context(self, reject_budget: float | None = None) -> T.TrialContext:
        backend = Backend("sim", model=self.model, sim_release=self.release, sim_device=self.device,
                          sim_model=self.model)
        return T.TrialContext(backend=backend, workload=self.workload(), release=self.release,
                              device_model=T.DeviceModel(self.device, self.model, "bf16"),
                              load=T.LoadOptions(max_concurrency=None, request_rate=self.request_rate),
                              limits=T.Limits(warmup_budget_s=reject_budget))


def cat(*values, **when) -> dict:
    return {"type": "categorical", "choices": list(values), **({"when": when} if when else {})}


STEPS = {"VLLM_PROMPT_BS_BUCKET_STEP": (1, 2, 4, 8), "VLLM_PROMPT_SEQ_BUCKET_STEP": (128, 256, 512),
         "VLLM_DECODE_BS_BUCKET_STEP": (8, 16, 32), "VLLM_DECODE_BLOCK_BUCKET_STEP": (128, 256, 512)}
STEPS_QUICK = {"max_num_seqs": [16, 32, 64, 128], "VLLM_PROMPT_BS_BUCKET_STEP": [1, 4],
               "VLLM_DECODE_BS_BUCKET_STEP": [8, 32], "VLLM_DECODE_BLOCK_BUCKET_STEP": [128, 512]}
DERIVED = {"VLLM_PROMPT_BS_BUCKET_MAX": "min(max_num_seqs, max_num_batched_tokens // block_size)",
           "VLLM_DECODE_BS_BUCKET_MAX": "max_num_seqs"}
SERVER_8B = {"max_model_len": 4096, "block_size": 128, "max_num_batched_tokens": 8192}
CHAT = {"device": "gaudi2", "model": "llama-3.1-8b", "cards": 1, "input_len": 512, "output_len": 256,
        "range_ratio": 0.5, "num_prompts": 200, "request_rate": 6.5, "warmup_budget_s": 600.0,
        "throughput_ref": 700.0, "latency_ref_ms": 1000.0}


def problems() -> dict[str, Problem]:
    mem = {"max_num_seqs": cat(16, 32, 64, 96, 128), "VLLM_GRAPH_RESERVED_MEM": cat(0.02, 0.1)}
    linear = Problem(  # no VLLM_EXPONENTIAL_BUCKETING: linear is 1.21's default, and the upgrade relies on it
        "linear", "fork-1.21.2, linear buckets + graph memory, Gaudi 2, Llama-3.1-8B bf16, chat-like",
        {"name": "bench-1.21.2", "release": "fork-1.21.2", "server": SERVER_8B, "derived": DERIVED,
         "parameters": {**mem, "VLLM_GRAPH_PROMPT_RATIO": cat(0.1, 0.3), **{k: cat(*v) for k, v in STEPS.items()}}},
        STEPS_QUICK, **CHAT)
    pad = {"VLLM_BUCKETING_STRATEGY": "pad"}
    gaudi = Problem(
        "gaudi", "gaudi-main, exponential / padding-aware + memory, Gaudi 3, Llama-3.1-70B bf16 TP2, long prompts",
        {"name": "bench-gaudi-main", "release": "gaudi-main",
         "server": {"max_model_len": 16384, "block_size": 128, "tensor_parallel_size": 2},
         "env": {"PT_HPU_LAZY_MODE": "1"},  # lazy mode: HPU graphs, so graph memory is a real trade-off
         "parameters": {"VLLM_BUCKETING_STRATEGY": cat("exp", "pad"), "max_num_seqs": cat(8, 16, 32, 64),
                        "max_num_batched_tokens": cat(2048, 4096, 8192),
                        "gpu_memory_utilization": cat(0.85, 0.9, 0.95),
                        "VLLM_GRAPH_RESERVED_MEM": cat(0.05, 0.1, 0.2, 0.3),
                        "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": cat(10, 25, 50, **pad),
                        "VLLM_PROMPT_QUERY_BUCKET_PAD_PERCENT": cat(10, 25, 50, **pad)}},
        {"gpu_memory_utilization": [0.85, 0.95], "VLLM_GRAPH_RESERVED_MEM": [0.05, 0.3],
         "VLLM_DECODE_BS_BUCKET_PAD_PERCENT": [10, 50], "VLLM_PROMPT_QUERY_BUCKET_PAD_PERCENT": [10, 50]},
        device="gaudi3", model="llama-3.1-70b", cards=2, input_len=4096, output_len=256, range_ratio=0.5,
        num_prompts=100, request_rate=0.6, warmup_budget_s=900.0, throughput_ref=75.0, latency_ref_ms=15000.0)
    upgrade = Problem(
        "upgrade", "fork-1.22 after an upgrade from 1.21.2 (problem linear's workload and hardware)",
        {"name": "bench-1.22", "release": "fork-1.22", "server": SERVER_8B, "derived": DERIVED,
         "parameters": {"VLLM_EXPONENTIAL_BUCKETING": cat("true", "false"), **mem,
                        **{k: cat(*v, VLLM_EXPONENTIAL_BUCKETING="false") for k, v in STEPS.items()}}},
        STEPS_QUICK, **CHAT)
    return {p.key: p for p in (linear, gaudi, upgrade)}


# ------------------------------------------------------------------------------------------ scenarios

# What the hardware really does differently from the documented model; the tuner is not told.
SCENARIOS: dict[str, dict[str, float]] = {
    "nominal": {},
    "slow_compile": {"prompt_warmup": 2.0, "decode_warmup": 2.0, "capture": 2.0},
    "fast_compile": {"prompt_warmup": 0.5, "decode_warmup": 0.5, "capture": 0.5},
    "more_memory": {"kv_block": 1.1},
    "more_graph_memory": {"graph_mem": 1.25},
    "slow_decode": {"decode_step": 1.25},
}
COMPILE_ONLY = ("prompt_warmup", "decode_warmup", "capture")  # serving changes only through runtime recompiles


def truth(scenario: str) -> Corrections:
    return Corrections().scaled(**SCENARIOS[scenario])


# ------------------------------------------------------------------------------------ the true table

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
    prior = T.predict(ctx, settings)
    real = T.predict(ctx, settings, truth(scenario)) if SCENARIOS[scenario] else prior
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
                                        if space._condition_met(p, v) else [v])]
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


def objective_vector(e: Eval) -> tuple[float, float, float]:
    return (e.metrics["output_throughput"], e.metrics[OBJECTIVES.latency_key], e.warmup_s)


def feasible(e: Eval, budget: float) -> bool:
    return e.failure is None and not e.metrics["failed"] and e.warmup_s <= budget


def fits(e: Eval, budget: float) -> bool:
    """A good configuration for the false-rejection / false-abort rates: it starts and fits the budget."""
    return e.failure is None and e.warmup_s <= budget


def front(points: list) -> list:
    """The non-dominated points (numpy; tuner.pareto's pure-Python version is O(n^2) per call)."""
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


# ----------------------------------------------------------------------------------- the boot's log

def boot_events(real) -> list[tuple[float, object]]:
    """The log events a boot of `real` gives the tracker, with their server times: the lines of
    tuner/sim/startup.py, already parsed (tests/perfmodel checks this against the parsed log itself)."""
    out, t = [], 1.0  # the API banner, then one second
    fail = real.failure
    if fail is not None and fail.phase in ("config", "buckets", "load"):
        return out
    t += real.load_seconds
    out.append((t, ev.ModelLoaded(device_memory=int(real.memory.weights))))
    t += real.profile_seconds
    if fail is not None and fail.phase == "profile":
        return out
    m = real.memory
    out.append((t, ev.MemorySplit(free=int(m.free), usable=int(m.usable),
                                  gpu_memory_utilization=real.sim.gpu_memory_utilization,
                                  graph_reserved=int(m.graph_reserved), graph_reserved_fraction=m.graph_reserved_frac,
                                  kv_cache=int(m.kv))))
    if fail is not None and fail.phase == "kv":
        return out
    t += 0.5
    if real.skip_warmup:
        return out
    at = fail.at_step if fail is not None and fail.phase == "warmup" else None
    elapsed = 0.0
    for i, s in enumerate(real.steps):
        out.append((t, ev.WarmupStep(phase=s.phase, graph=s.kind != "compile", index=s.index, total=s.total)))
        t += s.seconds
        elapsed += s.seconds
        if at is not None and i >= at:
            return out
    if at is not None:
        return out
    t += real.sampler_seconds
    elapsed += real.sampler_seconds
    out.append((t, ev.WarmupFinished(seconds=int(round(elapsed)),
                                     device_memory=int(real.prompt_graph_mem + real.decode_graph_mem))))
    return out


def replay_boot(tracker: BootTracker, events, budget: float | None, end: float | None = None) -> float | None:
    """Feed the boot's events to the tracker under trial.run_trial's rule; the abort time or None.
    The rule is checked as each line arrives and just before the next one (the trial polls it)."""
    for i, (t, e) in enumerate(events):
        if budget is not None and i and tracker.lines:
            before = t - 1e-6
            if (proj := tracker.project(before)) is not None and T.warmup_abort_reason(proj, budget):
                return before
        tracker.on_event(e, t)
        if budget is not None and (proj := tracker.project(t)) is not None and T.warmup_abort_reason(proj, budget):
            return t
    return None


# ------------------------------------------------------------------------------- the virtual runner

TABLES: dict[tuple[str, str], dict[str, Eval]] = {}  # (problem, scenario) -> true table (forked workers inherit)


@dataclass
class VirtualRunner:
    """`run_study`'s runner: answers from the true table and charges simulated accelerator seconds.
    `checked`: the product's checks (calibrated pre-boot rejection, the tracker's warmup abort, a
    calibration sample from what the boot showed); otherwise every proposal boots and runs to its end."""

    problem: Problem
    scenario: str
    sigma: float
    checked: bool = False

    def __call__(self, ctx, settings, trial_dir=None, slot=None, stop_event=None) -> T.TrialResult:
        base = {"params": settings.params, "server": settings.server, "env": settings.env}
        tp = None
        if self.checked:
            tp = T.predict_calibrated(ctx, settings)
            predicted, rejected = T.pre_boot_check(ctx, settings, tp)
            if rejected is not None:
                rejected.__dict__.update(base, timings={"accelerator_s": 0.0})
                return rejected
        table, k = TABLES[(self.problem.key, self.scenario)], key_of(settings.params)
        if k not in table:  # off the grid (cannot happen with categorical spaces; kept for safety)
            table[k] = evaluate(self.problem, settings, self.sigma, self.scenario)
        e = table[k]
        res = T.TrialResult(status=TrialStatus.OK, booted=True, predicted=tp.summary() if tp else {}, **base)
        seconds, tracker = None, None
        if self.checked:
            _, real = true_prediction(self.problem, settings, self.sigma, self.scenario)
            tracker = BootTracker(tp.calibrated, spread=ctx.calibration.warmup_spread() if ctx.calibration else 0.15)
            budget = None if e.failure else ctx.limits.warmup_budget_s
            if (t := replay_boot(tracker, boot_events(real), budget)) is not None:
                res.status, seconds = TrialStatus.WARMUP_OVER_BUDGET, t
                res.reason = f"warmup aborted over the budget of {budget:g} s"
        if seconds is not None:
            pass
        elif e.failure is not None:  # what run_trial makes of a server that exits: OOM seen or not
            res.status = TrialStatus.WARMUP_OOM if "PT_DEVMEM" in e.failure else TrialStatus.BOOT_FAILURE
            res.reason, seconds = e.failure, e.startup_s
        else:
            res.observed = {"warmup_s": e.warmup_s, "not_warmed_up": e.metrics["runtime_compiles"],
                            "buckets_not_prepared": 0, "preemptions": e.metrics["num_preemptions"]}
            res.metrics = dict(e.metrics)
            if e.metrics["failed"]:
                res.status, res.reason = TrialStatus.LOAD_ERRORS, f"{e.metrics['failed']} requests failed"
            seconds = e.startup_s + e.metrics["duration"]
        if tracker is not None:
            self.sample(res, tp, tracker, real, e, k)
        res.timings = {"accelerator_s": seconds * self.problem.cards}
        return res

    def sample(self, res, tp, tracker, real, e: Eval, k: str) -> None:
        """What trial.record_model_check does after a boot: prior vs observed, one calibration sample.
        The prior's serving figures are the nominal table's (the prior model's own run)."""
        prior = tp.prior_facts()
        nominal = TABLES[(self.problem.key, "nominal")].get(k)
        if nominal is not None and nominal.failure is None:
            prior["median_tpot_ms"] = nominal.metrics.get("median_tpot_ms")
        observed = {**tracker.facts(), "kv_blocks": real.num_blocks if real.memory else None,
                    "graphs": len(real.graphed_prompt) + len(real.graphed_decode) if tracker.finished_s else None,
                    "median_tpot_ms": res.metrics.get("median_tpot_ms") if res.ok else None}
        res.calibration_sample = observation_sample(prior, observed)


def watcher_check(problem: Problem, scenario: str, quick: bool, sigma: float, n: int = 200) -> dict:
    """trial.run_trial's warmup abort (the tracker, on the prior model: a study's first boots) on a fixed
    sample of configurations that start: how many that fit the budget it aborts (false aborts), and how
    many over the budget it catches."""
    table, space = TABLES[(problem.key, scenario)], problem.search_space(quick)
    keys = sorted(k for k, e in table.items() if e.failure is None)
    random.Random(0).shuffle(keys)
    out = {"sampled": 0, "fit": 0, "false_aborts": 0, "over": 0, "caught": 0}
    ctx = problem.context(problem.warmup_budget_s)
    for k in keys[:n]:
        e, settings = table[k], space.settings_for(table[k].params)
        prior, real = true_prediction(problem, settings, sigma, scenario)
        tracker = BootTracker(prior, spread=Calibration().warmup_spread())
        aborted = replay_boot(tracker, boot_events(real), ctx.limits.warmup_budget_s) is not None
        fit = e.warmup_s <= problem.warmup_budget_s
        out["sampled"] += 1
        out["fit" if fit else "over"] += 1
        out["false_aborts" if fit else "caught"] += aborted
    return out


# -------------------------------------------------------------------------------------- contenders

@dataclass(frozen=True)
class Contender:
    name: str
    sampler: str
    note: str
    full: bool = False  # bucket-tuner's method: seeds, calibrated checks, reuse, screening
    coarse: bool = False  # a low/middle/high lattice of each parameter
    seed_from: bool = False  # upgrade: the Pareto set of the same seed's 1.21.2 full study (--seed-from)


CONTENDERS = {c.name: c for c in (
    Contender("random", "random", "Optuna RandomSampler"),
    Contender("grid", "grid", "auto_tune-style grid: low/middle/high of each parameter (Optuna GridSampler), "
                              "visited in a seeded shuffled order", coarse=True),
    Contender("tpe", "tpe", "Optuna TPESampler as it comes"),
    Contender("gp", "gp", "Optuna GPSampler as it comes"),
    Contender("nsga2", "nsga2", "Optuna NSGAIISampler (population 16, study.make_sampler)"),
    Contender("full", "tpe", "bucket-tuner: TPE + release-default and calculator seeds + the performance model "
                             "calibrated from every boot (pre-boot rejection only when confidently invalid, out of "
                             "memory or over budget; the warmup abort on the known bucket list) + measured "
                             "configurations reused + screened proposals not counted", full=True),
    Contender("full+seed-from", "tpe", "full, also seeded with the Pareto set of the same seed's 1.21.2 full study",
              full=True, seed_from=True),
)}
PLAIN_REMEASURE = 10**6  # the plain contenders boot every proposal, repeats included


def _memory_storage(url: str, *args, **kwargs):
    """Optuna's in-memory storage for the studies no other study reads (--seed-from reads the 1.21.2 full
    studies from their sqlite file): the same study loop, without a database round trip per attribute."""
    if "linear-nominal-full-" in url or "seed-from" in url:
        return _SQLITE_STORAGE(url, *args, **kwargs)
    return optuna.storages.InMemoryStorage()


_SQLITE_STORAGE = study_mod.make_storage


def run_contender(task) -> dict:
    """One study (the real loop) of one contender on one problem and scenario; its trials in order."""
    problem, scenario, name, seed, n_trials, quick, sigma, root = task
    study_mod.make_storage = _memory_storage
    c = CONTENDERS[name]
    space = problem.search_space(quick, coarse=c.coarse)
    opts = StudyOptions(name=f"{problem.key}-{scenario}-{name}-{seed}", results_root=Path(root), sampler=c.sampler,
                        seed=seed, n_trials=n_trials, enqueue_defaults=c.full, grid_levels=3,
                        seed_from=f"linear-{scenario}-full-{seed}" if c.seed_from else None,
                        remeasure=1 if c.full else PLAIN_REMEASURE, screening=c.full)
    runner = VirtualRunner(problem, scenario, sigma, checked=c.full)
    constraints = Constraints(warmup_budget_s=problem.warmup_budget_s, allow_recompiles=True)
    ctx, t0 = problem.context(problem.warmup_budget_s if c.full else None), time.monotonic()
    try:
        run = run_study(opts, space, ctx, OBJECTIVES, constraints, install_sigint=False, runner=runner)
    except StudyError as exc:
        return {"problem": problem.key, "scenario": scenario, "contender": name, "seed": seed, "error": str(exc)}
    trials = [{"params": t.params, "status": t.user_attrs.get("status"), "feasible": bool(t.user_attrs.get("feasible")),
               "values": list(t.values) if t.values else None, "screened": t.user_attrs.get("screened"),
               "accelerator_s": (t.user_attrs.get("timings") or {}).get("accelerator_s", 0.0)}
              for t in sorted(run.study.trials, key=lambda t: t.number)]
    return {"problem": problem.key, "scenario": scenario, "contender": name, "seed": seed, "trials": trials,
            "calibration": run.study.user_attrs.get("calibration"), "wall_s": round(time.monotonic() - t0, 1)}


# ----------------------------------------------------------------------------------------- scoring

REJECTED = (TrialStatus.INVALID_CONFIG.value, TrialStatus.WARMUP_OVER_BUDGET.value)


def score(run: dict, problem: Problem, true_hv: float, budgets: list[int]) -> dict:
    """Curve of one study: (accelerator-hours so far, hypervolume ratio) after each counted trial
    (screened proposals cost nothing and do not count as trials; their hours, zero, still add up)."""
    table = TABLES[(problem.key, run["scenario"])]
    pts, hours, curve, wasted, booted = [], 0.0, [], 0.0, set()
    counts = {"repeat_boots": 0, "aborted": 0, "rejected": 0, "reused": 0, "screened": 0}
    good, false_rej, false_abort = set(), set(), set()
    for t in run["trials"]:
        h, k = t["accelerator_s"] / 3600, key_of(t["params"])
        e = table.get(k)
        is_good = bool(e and fits(e, problem.warmup_budget_s))
        if is_good:
            good.add(k)
        hours += h
        if t["feasible"] and t["status"] == TrialStatus.OK.value:
            pts.append(tuple(t["values"]))
        elif h > 0:
            wasted += h
        counts["repeat_boots"] += h > 0 and k in booted
        counts["reused"] += t["screened"] == "reused"
        counts["screened"] += bool(t["screened"])
        if h == 0 and t["status"] in REJECTED and t["screened"] != "reused":
            counts["rejected"] += 1
            if is_good:
                false_rej.add(k)
        if h > 0 and t["status"] == TrialStatus.WARMUP_OVER_BUDGET.value:  # booted, then aborted in warmup
            counts["aborted"] += 1
            if is_good:
                false_abort.add(k)
        if h > 0:
            booted.add(k)
        if not t["screened"]:
            curve.append((hours, hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv if true_hv else 0.0))
        elif curve:  # a screened trial's feasible point (reused) adds nothing new; keep the curve's last value
            curve[-1] = (hours, max(curve[-1][1], hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv))
    reach = {x: next((h for h, r in curve if r >= x / 100 - 1e-12), math.inf) for x in (90, 95)}
    n_good = max(1, len(good))
    return {"seed": run["seed"], "curve": [(round(h, 4), round(r, 4)) for h, r in curve],
            "at": {n: {"hv_ratio": curve[n - 1][1], "accel_h": curve[n - 1][0]} for n in budgets if n <= len(curve)},
            "hours_to_90": reach[90], "hours_to_95": reach[95], "wasted_frac": wasted / hours if hours else 0.0,
            "false_rejects": len(false_rej), "false_aborts": len(false_abort), "good": len(good),
            "false_reject_rate": len(false_rej) / n_good, "false_abort_rate": len(false_abort) / n_good, **counts}


def aggregate(scores: list[dict], budgets: list[int], hours: float | None) -> dict:
    """Means (± sd) over seeds; `hours`: also the ratio each study held after that many accelerator-hours."""
    out = {"seeds": len(scores)}
    if hours is not None:
        held = [max([r for h, r in s["curve"] if h <= hours + 1e-9], default=0.0) for s in scores]
        out["hv@hours"] = (hours, statistics.mean(held), statistics.pstdev(held))
    for n in budgets:
        r = [s["at"][n]["hv_ratio"] for s in scores if n in s["at"]]
        if r:
            out[f"hv@{n}"] = (statistics.mean(r), statistics.pstdev(r))
            out[f"h@{n}"] = statistics.mean(s["at"][n]["accel_h"] for s in scores if n in s["at"])
    for x in ("90", "95"):  # median over seeds, a seed that never got there counting as infinite
        v = [s[f"hours_to_{x}"] for s in scores]
        out[f"to{x}"] = (statistics.median(v), sum(math.isfinite(y) for y in v))
    for k in ("wasted_frac", "repeat_boots", "rejected", "aborted", "false_aborts", "false_rejects", "reused",
              "screened", "false_reject_rate", "false_abort_rate", "good"):
        out[k] = statistics.mean(s[k] for s in scores)
    return out


def summary_of(res: dict) -> dict:
    """The machine-readable summary the issue asks for: problem -> scenario -> contender -> figures."""
    out: dict = {}
    for key, pr in res["problems"].items():
        for scenario, sc in pr["scenarios"].items():
            for name, a in sc["contenders"].items():
                if "error" in a:
                    continue
                to95 = a["to95"]
                out.setdefault(key, {}).setdefault(scenario, {})[name] = {
                    **{f"hv@{n}": round(a[f"hv@{n}"][0], 4) for n in res["budgets"] if f"hv@{n}" in a},
                    "hv_at_equal_hours": round(a["hv@hours"][1], 4) if "hv@hours" in a else None,
                    "equal_hours": round(a["hv@hours"][0], 3) if "hv@hours" in a else None,
                    "hours_to_90": a["to90"][0] if 2 * a["to90"][1] > a["seeds"] else None,
                    "hours_to_95": to95[0] if 2 * to95[1] > a["seeds"] else None,
                    "false_reject_rate": round(a["false_reject_rate"], 4),
                    "false_abort_rate": round(a["false_abort_rate"], 4)}
    return out


# ----------------------------------------------------------------------------- release upgrade (3)

def replay(probs: dict[str, Problem], fronts: dict, runs: list[dict], quick: bool, sigma: float) -> dict:
    """Problem linear's chosen settings replayed unchanged (same env) on fork-1.22 (nominal scenario)."""
    lin, up = probs["linear"], probs["upgrade"]
    space, up_front = lin.search_space(quick), fronts[("upgrade", "nominal")]["front"]
    picks = [("1.21.2 true front's balanced point", b.params) for b in [fronts[("linear", "nominal")]["balanced"]] if b]
    for r in sorted((r for r in runs if (r["problem"], r["scenario"], r["contender"]) == ("linear", "nominal", "full")
                     and "trials" in r), key=lambda r: r["seed"]):
        ok = [t for t in r["trials"] if t["feasible"] and t["status"] == TrialStatus.OK.value
              and hypervolume([t["values"]], lin.reference, DIRECTIONS) > 0]
        if ok:
            picks.append((f"full method's balanced pick, seed {r['seed']}",
                          ok[balanced_index([t["values"] for t in ok], DIRECTIONS)]["params"]))
    rows = []
    for label, params in picks:
        after = evaluate(up, space.settings_for(params), sigma)  # same env; 1.22 reads it its own way
        vec = objective_vector(after) if feasible(after, up.warmup_budget_s) else None
        rows.append({"label": label, "params": params,
                     "on_1.21.2": objective_vector(TABLES[("linear", "nominal")][key_of(params)]),
                     "on_1.22": vec, "failure": after.failure, "dominated_on_1.22": vec is None or any(
                         dominates((-p[0], p[1], p[2]), (-vec[0], vec[1], vec[2])) for p in up_front)})
    rows += [{"label": "1.22 true front's balanced point", "params": b.params, "on_1.21.2": None,
              "on_1.22": objective_vector(b), "failure": None, "dominated_on_1.22": False}
             for b in [fronts[("upgrade", "nominal")]["balanced"]] if b]
    carried = [evaluate(up, space.settings_for(e.params), sigma) for e in fronts[("linear", "nominal")]["members"]]
    up_hv = fronts[("upgrade", "nominal")]["hv"]
    carried_hv = hypervolume(front([objective_vector(e) for e in carried if feasible(e, up.warmup_budget_s)]),
                             up.reference, DIRECTIONS)
    mine = [r for r in rows if r["label"].startswith("full")]
    shown = [r for r in rows if r not in mine[4:]]  # the table shows the first four picks
    return {"rows": shown, "front_1.21.2_vs_1.22": fronts[("linear", "nominal")]["hv"] / up_hv,
            "front_1.21.2_replayed_on_1.22": carried_hv / up_hv,
            "full_picks": len(mine), "full_picks_dominated_on_1.22": sum(r["dominated_on_1.22"] for r in mine),
            "full_picks_distinct_on_1.22": len({r["on_1.22"] for r in mine})}


# ----------------------------------------------------------------------------------------- report

def vec_text(v) -> str:
    return "—" if v is None else f"{v[0]:.0f} tok/s, {v[1]:.0f} ms, {v[2]:.0f} s"


def markdown(res: dict) -> str:
    budgets, out = res["budgets"], []
    for key, pr in res["problems"].items():
        out += [f"### {key}: {pr['title']}", "", f"Workload: {pr['workload']}. {res['seeds']} seeds.", ""]
        head = ("| scenario | contender | " + " | ".join(f"HV@{n}" for n in budgets) + " | HV@equal h | "
                f"accel-h@{budgets[-1]} | h→90% (seeds) | h→95% (seeds) | wasted | rejected (false) | "
                "aborted (false) | repeat boots | reused |")
        out += [head, "|---" * (len(budgets) + 11) + "|"]
        notes = []
        for scenario, sc in pr["scenarios"].items():
            f, w = sc["true_front"], sc["true_front"]["watcher"]
            notes.append(f"{scenario}: {f['points']} configurations, {f['failing']} fail to start, {f['feasible']} "
                         f"feasible, true front {len(f['front'])} points; the warmup abort (prior model) on "
                         f"{w['sampled']} that start aborts {w['false_aborts']} of {w['fit']} that fit and "
                         f"{w['caught']} of {w['over']} over the budget")
            for name, a in sc["contenders"].items():
                if "error" in a:
                    out.append(f"| {scenario} | {name} | {a['error']} |" + " |" * (len(budgets) + 9))
                    continue
                hv = " | ".join(f"{a[f'hv@{n}'][0]:.3f} ± {a[f'hv@{n}'][1]:.3f}" if f"hv@{n}" in a else "—"
                                for n in budgets)
                eq = f"{a['hv@hours'][1]:.3f} @ {a['hv@hours'][0]:.1f} h" if "hv@hours" in a else "—"
                to = [f"{'—' if not math.isfinite(a[x][0]) else f'{a[x][0]:.1f}'} ({a[x][1]}/{a['seeds']})"
                      for x in ("to90", "to95")]
                last = f"h@{budgets[-1]}"
                out.append(f"| {scenario} | {name} | {hv} | {eq} | {a[last]:.1f} | {to[0]} | {to[1]} | "
                           f"{100 * a['wasted_frac']:.0f}% | {a['rejected']:.1f} ({a['false_rejects']:.1f}) | "
                           f"{a['aborted']:.1f} ({a['false_aborts']:.1f}) | {a['repeat_boots']:.1f} | "
                           f"{a['reused']:.1f} |" if last in a else f"| {scenario} | {name} | {hv} | {eq} |")
        out += [""] + [f"* {n}" for n in notes] + [""]
    if "replay" in res:
        r = res["replay"]
        out += ["### upgrade: 1.21.2 settings replayed unchanged on fork-1.22", "",
                (f"Same reference point: the 1.21.2 true front holds {100 * r['front_1.21.2_vs_1.22']:.0f}% of the "
                 f"1.22 true hypervolume; its configurations replayed on 1.22 hold "
                 f"{100 * r['front_1.21.2_replayed_on_1.22']:.0f}%. The full method's {r['full_picks']} balanced "
                 f"picks (one per seed) land on {r['full_picks_distinct_on_1.22']} distinct 1.22 points; "
                 f"{r['full_picks_dominated_on_1.22']} of the picks are dominated by the 1.22 front there (the "
                 "first four are shown)."), "",
                "| settings | on 1.21.2 | on 1.22 | dominated on 1.22 |", "|---|---|---|---|"]
        out += [f"| {row['label']} | {vec_text(row['on_1.21.2'])} | {vec_text(row['on_1.22'])}"
                f"{' (' + row['failure'][:60] + ')' if row['failure'] else ''} | "
                f"{'yes' if row['dominated_on_1.22'] else 'no'} |" for row in r["rows"]]
        out.append("")
    return "\n".join(out)


def finite(o):
    """JSON without Infinity: a target never reached is null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): finite(v) for k, v in o.items()}
    return [finite(v) for v in o] if isinstance(o, (list, tuple)) else o


# ------------------------------------------------------------------------------------------- main

def run_all(args, probs: dict[str, Problem], wanted: list[str], scenarios: list[str], names: list[str],
            seeds: list[int], log):
    fronts, runs, n = {}, [], args.budgets[-1]
    pool_ctx = mp.get_context("fork")
    with pool_ctx.Pool(args.jobs) as pool:
        for key in wanted:
            for scenario in ["nominal"] + [s for s in scenarios if s != "nominal"]:
                TABLES[(key, scenario)] = true_table(probs[key], args.quick, args.warmup_error, scenario, pool)
                f = fronts[(key, scenario)] = true_front(probs[key], TABLES[(key, scenario)])
                f["watcher"] = watcher_check(probs[key], scenario, args.quick, args.warmup_error)
                log(f"{key}/{scenario}: {f['points']} configurations, true front of {len(f['front'])}")
    tmp = "/dev/shm" if Path("/dev/shm").is_dir() else None  # sqlite commits off the disk
    with tempfile.TemporaryDirectory(prefix="tuning-eff-", dir=tmp) as root:
        def tasks(keys, scens, contenders):
            return [(probs[k], sc, c, s, n, args.quick, args.warmup_error, root) for k in keys for sc in scens
                    for c in contenders for s in seeds]
        plain = [c for c in names if c != "full+seed-from"]
        first = tasks([k for k in wanted if k != "upgrade"], scenarios, plain)
        later = []
        if "upgrade" in wanted:  # the 1.22 seed-from studies read the 1.21.2 full studies (--seed-from)
            later = tasks(["upgrade"], scenarios, plain)
            if "full+seed-from" in names and "nominal" in scenarios:
                first += [] if "full" in plain else tasks(["linear"], ["nominal"], ["full"])
                later += tasks(["upgrade"], ["nominal"], ["full+seed-from"])
        with pool_ctx.Pool(args.jobs) as pool:  # forked after the tables exist: the workers inherit them
            for batch in (first, later):
                for r in pool.imap_unordered(run_contender, batch, chunksize=1):
                    runs.append(r)
                    log(f"{r['problem']}/{r['scenario']} {r['contender']} seed {r['seed']}: "
                        f"{r.get('error') or str(r['wall_s']) + ' s'}")
    return fronts, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="coarser spaces, 4 seeds, 30 trials, random/tpe/full")
    ap.add_argument("--seeds", type=int, help="seeds per contender (default 20, quick 4)")
    ap.add_argument("--budgets", help="trial budgets read off each study's prefix (default 10,20,30,50; quick "
                                      "10,20,30)")
    ap.add_argument("--problems", default="linear,gaudi,upgrade")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--contenders", help="default random,tpe,full,full+seed-from (all: random,grid,tpe,gp,"
                                         "nsga2,full,full+seed-from)")
    ap.add_argument("--warmup-error", type=float, default=0.15, help="sigma of the real/predicted warmup factor")
    ap.add_argument("--jobs", type=int, default=mp.cpu_count())
    ap.add_argument("--out", help="output stem (default benchmarks/results/tuning_efficiency[-quick])")
    args = ap.parse_args(argv)
    args.budgets = sorted(int(b) for b in (args.budgets or ("10,20,30" if args.quick else "10,20,30,50")).split(","))
    seeds = list(range(args.seeds or (4 if args.quick else 20)))
    wanted = [p for p in args.problems.split(",") if p]
    wanted = (["linear"] if "upgrade" in wanted and "linear" not in wanted else []) + wanted
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario {unknown[0]!r}; choose from {', '.join(SCENARIOS)}")
    names = [c for c in (args.contenders or "random,tpe,full,full+seed-from").split(",") if c]
    probs, t0, c0 = problems(), time.monotonic(), _cpu_s()

    def log(text):
        print(f"[{time.monotonic() - t0:5.0f} s] {text}", file=sys.stderr, flush=True)

    fronts, runs = run_all(args, probs, wanted, scenarios, names, seeds, log)
    res = collect(args, probs, wanted, scenarios, fronts, runs, len(seeds))
    res["wall_s"], res["cpu_s"] = round(time.monotonic() - t0, 1), round(_cpu_s() - c0, 1)
    table = markdown(res)
    print(table + f"\n(wall time {res['wall_s']:.0f} s, CPU time {res['cpu_s']:.0f} s on {args.jobs} processes)")
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "tuning_efficiency" + ("-quick" if args.quick else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(finite(res), default=str) + "\n")
    Path(f"{stem}.md").write_text(table + "\n")
    return 0


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the worker pools)."""
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def collect(args, probs: dict[str, Problem], wanted: list[str], scenarios: list[str], fronts: dict,
            runs: list[dict], seeds: int) -> dict:
    """Scores per study, aggregates per contender, the summary, the upgrade replay: the JSON document."""
    res = {"quick": args.quick, "seeds": seeds, "budgets": args.budgets, "warmup_error": args.warmup_error,
           "scenarios": SCENARIOS, "contenders": {c.name: c.note for c in CONTENDERS.values()}, "problems": {}}
    for key in wanted:
        p = probs[key]
        entry = res["problems"][key] = {
            "title": p.title, "workload": f"random {p.input_len}/{p.output_len} tokens (range ratio {p.range_ratio}), "
                                          f"{p.num_prompts} prompts at {p.request_rate:g} req/s Poisson",
            "scenarios": {}}
        for scenario in scenarios:
            f = fronts[(key, scenario)]
            sc = entry["scenarios"][scenario] = {
                "true_front": {**{k: f[k] for k in ("points", "feasible", "failing", "front", "hv", "reference",
                                                     "watcher")},
                               "balanced": f["balanced"] and {"params": f["balanced"].params,
                                                              "objectives": objective_vector(f["balanced"])}},
                "contenders": {}, "runs": {}, "calibration": {}}
            errors = {}
            for name in CONTENDERS:
                mine = sorted((r for r in runs if (r["problem"], r["scenario"], r["contender"])
                               == (key, scenario, name)), key=lambda r: r["seed"])
                if any("error" in r for r in mine):
                    err = next(r["error"] for r in mine if "error" in r)
                    errors[name] = {"error": "not installed (needs scipy + torch)" if name == "gp" else err}
                elif mine:
                    sc["runs"][name] = [{**score(r, p, f["hv"], args.budgets), "wall_s": r["wall_s"],
                                         "statuses": dict(Counter(t["status"] for t in r["trials"]))} for r in mine]
                    if CONTENDERS[name].full:
                        sc["calibration"][name] = [r.get("calibration") for r in mine]
            full = sc["runs"].get("full")  # equal hours: what the full method spent on its largest budget
            last = args.budgets[-1]
            spent = [s["at"][last]["accel_h"] for s in full or [] if last in s["at"]]
            hours = statistics.mean(spent) if spent else None
            sc["contenders"] = {n: errors.get(n) or aggregate(sc["runs"][n], args.budgets, hours)
                                for n in CONTENDERS if n in errors or n in sc["runs"]}
    res["summary"] = summary_of(res)
    if "upgrade" in wanted and "nominal" in scenarios:
        res["replay"] = replay(probs, fronts, runs, args.quick, args.warmup_error)
    return res


if __name__ == "__main__":
    sys.exit(main())
