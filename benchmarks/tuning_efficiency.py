"""Tuning efficiency per accelerator-hour: bucket-tuner's method against the alternatives a user has.

Every configuration of a discretised reference space is evaluated on the simulator's virtual clock
(`predict_startup` + `run_virtual`), which gives the true Pareto front and its hypervolume on a fixed
reference point. Each contender then runs the REAL study loop (`tuner.study.run_study`: samplers,
seeding, constraints, penalties) with a virtual runner that answers from that table and charges the
simulated accelerator time (x cards) a real trial would cost: 0 if rejected before boot; the startup
timeline up to the failure if it fails at boot; up to the abort if the warmup-budget abort fires
(the release's startup log replayed through the tuner's own LogWatcher and trial.run_trial's rule);
otherwise weights + profiling + warmup + the measured load test (the warm pass is not charged).

The prediction and the simulator share one cost model, which would make pre-boot checks exact. So
the warmup a server really takes is the prediction times a fixed factor exp(N(0, sigma)) per
effective configuration (--warmup-error, default 0.15); the truth and the abort use it, the
tuner's prediction does not know it.

Usage: python benchmarks/tuning_efficiency.py [--quick] [--seeds N] [--budgets 10,20,30,50]
       [--problems linear,gaudi,upgrade] [--contenders random,grid,tpe,gp,nsga2,full,full+] [--jobs N]
Writes benchmarks/results/tuning_efficiency[-quick].json and .md and prints the tables.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tuner import trial as T
from tuner.backends import Backend
from tuner.logparse import LogWatcher
from tuner.pareto import balanced_index, dominates, hypervolume
from tuner.sim import run_virtual
from tuner.sim.logfmt import SimLog
from tuner.sim.startup import SimTime, emit, startup_events
from tuner.space import SearchSpace, TrialSettings
from tuner.study import Constraints, Objectives, StudyError, StudyOptions, run_study
from tuner.workload import RandomWorkload, gamma_send_offsets

OBJECTIVES = Objectives()  # output_throughput (max), p99_ttft_ms (min), warmup_s (min)
DIRECTIONS = OBJECTIVES.directions
ABORT_SLACK = 1.1  # trial.run_trial aborts when the projected warmup exceeds 1.1 x the budget
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


# ------------------------------------------------------------------------------------ the true table

@dataclass
class Eval:
    """What one configuration really does (virtual clock, warmup perturbed by its factor)."""

    params: dict
    failure: str | None  # the server's last error line when it cannot start
    startup_s: float  # start -> ready, or -> the failure
    warmup_s: float | None
    metrics: dict = field(default_factory=dict)


def key_of(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def warmup_factor(pred, sigma: float) -> float:
    """The cost model's error for one effective configuration (release, buckets, graphs, KV blocks):
    settings a release reads the same way get the same factor."""
    what = (pred.profile, pred.plan and (pred.plan.prompt, pred.plan.decode), len(pred.graphed_prompt),
            len(pred.graphed_decode), pred.num_blocks, pred.failure and pred.failure.message)
    u = int(hashlib.sha256(repr(what).encode()).hexdigest()[:12], 16) / 16**12
    return math.exp(sigma * statistics.NormalDist().inv_cdf(min(max(u, 1e-9), 1 - 1e-9)))


def true_prediction(problem: Problem, settings: TrialSettings, sigma: float):
    """(the tuner's prediction, what the server really does at startup)."""
    pred = T.predict(problem.context(), settings)
    f = warmup_factor(pred, sigma)
    return pred, replace(pred, steps=[replace(s, seconds=s.seconds * f) for s in pred.steps],
                         sampler_seconds=pred.sampler_seconds * f)


def evaluate(problem: Problem, settings: TrialSettings, sigma: float) -> Eval:
    pred, real = true_prediction(problem, settings, sigma)
    t = 0.0
    for ev in startup_events(real):
        if ev[0] in ("fail", "ready", "hang"):
            break
        t += ev[1] if ev[0] == "advance" else 0.0
    if pred.failure is not None:
        return Eval(settings.params, f"{pred.failure.phase}: {pred.failure.message}", t, None)
    w = problem.workload()
    ins, outs = w.lengths()
    times = gamma_send_offsets(len(ins), problem.request_rate, 1.0, np.random.default_rng([w.seed, 0x41525256]))
    summary = run_virtual(pred, list(zip(times, ins, outs))).summary()
    return Eval(settings.params, None, t, real.warmup_seconds, {k: summary[k] for k in KEEP})


def grid_points(space: SearchSpace) -> list[dict]:
    """Every distinct configuration of a categorical space (a parameter whose condition fails is absent)."""
    out = [{}]
    for p in space.parameters:
        out = [w for v in out for w in ([dict(v, **{p.name: c}) for c in p.choices]
                                        if space._condition_met(p, v) else [v])]
    return out


def _eval_chunk(args) -> list[Eval]:
    problem, quick, sigma, chunk = args
    space = problem.search_space(quick)
    return [evaluate(problem, space.settings_for(v), sigma) for v in chunk]


def true_table(problem: Problem, quick: bool, sigma: float, pool) -> dict[str, Eval]:
    points = grid_points(problem.search_space(quick))
    parts = pool.map(_eval_chunk, [(problem, quick, sigma, points[i::16]) for i in range(16)])
    return {key_of(e.params): e for part in parts for e in part}


def objective_vector(e: Eval) -> tuple[float, float, float]:
    return (e.metrics["output_throughput"], e.metrics[OBJECTIVES.latency_key], e.warmup_s)


def feasible(e: Eval, budget: float) -> bool:
    return e.failure is None and not e.metrics["failed"] and e.warmup_s <= budget


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


# ------------------------------------------------------------------------------- the virtual runner

TABLES: dict[str, dict[str, Eval]] = {}  # problem key -> true table (forked workers inherit it)


@dataclass
class VirtualRunner:
    """`run_study`'s runner: answers from the true table and charges simulated accelerator seconds."""

    problem: Problem
    sigma: float
    preboot: bool = False  # trial.pre_boot_check first (invalid, predicted warmup over budget: no boot)
    abort: str | None = None  # "watcher": trial.run_trial's projection rule; "elapsed": at the budget
    dedup: bool = False  # a configuration already measured in this study is answered from its record
    _aborts: dict = field(default_factory=dict)
    _done: dict = field(default_factory=dict)

    def __call__(self, ctx, settings, trial_dir, slot=None, stop_event=None) -> T.TrialResult:
        k = key_of(settings.params)
        if self.dedup and k in self._done:
            return replace(self._done[k], timings={"accelerator_s": 0.0, "repeat": 1.0})
        self._done[k] = res = self.run(ctx, settings)
        return res

    def run(self, ctx, settings) -> T.TrialResult:
        base = {"params": settings.params, "server": settings.server, "env": settings.env}
        predicted = {}
        if self.preboot:
            predicted, rejected = T.pre_boot_check(ctx, settings)
            if rejected is not None:
                rejected.__dict__.update(base, timings={"accelerator_s": 0.0})
                return rejected
        table, k = TABLES.setdefault(self.problem.key, {}), key_of(settings.params)
        if k not in table:  # off the grid (cannot happen with categorical spaces; kept for safety)
            table[k] = evaluate(self.problem, settings, self.sigma)
        e = table[k]
        res = T.TrialResult(status=TrialStatus.OK, booted=True, predicted=predicted, **base)
        if e.failure is not None:  # what run_trial makes of a server that exits: OOM seen or not
            res.status = TrialStatus.WARMUP_OOM if "PT_DEVMEM" in e.failure else TrialStatus.BOOT_FAILURE
            res.reason, seconds = e.failure, e.startup_s
        elif self.abort and (t := self.abort_time(settings, e)) is not None:
            res.status, seconds = TrialStatus.WARMUP_OVER_BUDGET, t
            res.reason = f"warmup aborted over the budget of {self.problem.warmup_budget_s:g} s ({self.abort})"
        else:
            res.observed = {"warmup_s": e.warmup_s, "not_warmed_up": e.metrics["runtime_compiles"],
                            "buckets_not_prepared": 0, "preemptions": e.metrics["num_preemptions"]}
            res.metrics = dict(e.metrics)
            if e.metrics["failed"]:
                res.status, res.reason = TrialStatus.LOAD_ERRORS, f"{e.metrics['failed']} requests failed"
            seconds = e.startup_s + e.metrics["duration"]
        res.timings = {"accelerator_s": seconds * self.problem.cards}
        return res

    def abort_time(self, settings: TrialSettings, e: Eval) -> float | None:
        """Seconds from start to the abort, or None. "elapsed": once the warmup has run for the budget.
        "watcher": the release's startup log replayed through LogWatcher under run_trial's rule."""
        budget = self.problem.warmup_budget_s
        if self.abort == "elapsed":  # warmup starts 0.5 s before ready minus its length (sim/startup.py)
            return e.startup_s - 0.5 - e.warmup_s + budget if e.warmup_s > budget else None
        k = key_of(settings.params)
        if k not in self._aborts:
            _, real = true_prediction(self.problem, settings, self.sigma)
            clock, sink, started, when = SimTime(), [], None, None
            log = SimLog(real.rules.style, clock, 0.0, sink=sink)
            watcher = LogWatcher(expect_graphs=bool(real.graphed_prompt), clock=lambda: clock.t)
            for ev in startup_events(real):
                if ev[0] in ("fail", "ready", "hang"):
                    break
                if ev[0] == "advance":
                    clock.t += ev[1]
                elif ev[0] in ("log", "raw"):
                    emit(log, ev)
                    for line in sink:
                        watcher.feed(line, clock.t)
                    sink.clear()
                if started is None and (watcher.progress() is not None or watcher.stage != "startup"):
                    started = clock.t
                remaining = watcher.projected_remaining_s(clock.t) if started is not None else None
                if remaining is not None and clock.t - started + remaining > ABORT_SLACK * budget:
                    when = clock.t
                    break
            self._aborts[k] = when
        return self._aborts[k]


def watcher_check(problem: Problem, table: dict[str, Eval], quick: bool, sigma: float, n: int = 200) -> dict:
    """trial.run_trial's warmup abort on a fixed sample of configurations that start: how many whose
    warmup fits the budget it aborts (false aborts), and how many over the budget it catches."""
    runner, space = VirtualRunner(problem, sigma, abort="watcher"), problem.search_space(quick)
    keys = sorted(k for k, e in table.items() if e.failure is None)
    random.Random(0).shuffle(keys)
    out = {"sampled": 0, "fit": 0, "false_aborts": 0, "over": 0, "caught": 0}
    for k in keys[:n]:
        e = table[k]
        aborted = runner.abort_time(space.settings_for(e.params), e) is not None
        fits = e.warmup_s <= problem.warmup_budget_s
        out["sampled"] += 1
        out["fit" if fits else "over"] += 1
        out["false_aborts" if fits else "caught"] += aborted
    return out


# -------------------------------------------------------------------------------------- contenders

@dataclass(frozen=True)
class Contender:
    name: str
    sampler: str
    note: str
    seeding: bool = False  # release defaults + calculator enqueued first (study.enqueue_seeds)
    preboot: bool = False
    abort: str | None = None
    dedup: bool = False
    coarse: bool = False  # a low/middle/high lattice of each parameter
    seed_from: bool = False  # upgrade: the Pareto set of the same seed's 1.21.2 full study (--seed-from)


CONTENDERS = {c.name: c for c in (
    Contender("random", "random", "Optuna RandomSampler"),
    Contender("grid", "grid", "auto_tune-style grid: low/middle/high of each parameter (Optuna GridSampler), "
                              "visited in a seeded shuffled order", coarse=True),
    Contender("tpe", "tpe", "Optuna TPESampler as it comes"),
    Contender("gp", "gp", "Optuna GPSampler as it comes"),
    Contender("nsga2", "nsga2", "Optuna NSGAIISampler (population 16, study.make_sampler)"),
    Contender("full", "tpe", "bucket-tuner as it is: TPE + release-default and calculator seeds + pre-boot "
                             "rejection + the log watcher's warmup-budget abort (projection > 1.1 x budget)",
              seeding=True, preboot=True, abort="watcher"),
    Contender("full+", "tpe", "full with two changes not (yet) in tuner/: the abort fires when the elapsed warmup "
                              "passes the budget, not on the early projection; a repeated proposal is answered "
                              "from its record without a boot", seeding=True, preboot=True, abort="elapsed",
              dedup=True),
    Contender("full+seed-from", "tpe", "full, also seeded with the Pareto set of the same seed's 1.21.2 full study",
              seeding=True, preboot=True, abort="watcher", seed_from=True),
)}


def run_contender(task) -> dict:
    """One study (the real loop) of one contender on one problem; its trials in order."""
    problem, name, seed, n_trials, quick, sigma, root = task
    c = CONTENDERS[name]
    space = problem.search_space(quick, coarse=c.coarse)
    opts = StudyOptions(name=f"{problem.key}-{name}-{seed}", results_root=Path(root), sampler=c.sampler,
                        seed=seed, n_trials=n_trials, enqueue_defaults=c.seeding, grid_levels=3,
                        seed_from=f"linear-full-{seed}" if c.seed_from else None)
    runner = VirtualRunner(problem, sigma, preboot=c.preboot, abort=c.abort, dedup=c.dedup)
    constraints = Constraints(warmup_budget_s=problem.warmup_budget_s, allow_recompiles=True)
    ctx, t0 = problem.context(problem.warmup_budget_s if c.preboot else None), time.monotonic()
    try:
        run = run_study(opts, space, ctx, OBJECTIVES, constraints, install_sigint=False, runner=runner)
    except StudyError as exc:
        return {"problem": problem.key, "contender": name, "seed": seed, "error": str(exc)}
    trials = [{"params": t.params, "status": t.user_attrs.get("status"), "feasible": bool(t.user_attrs.get("feasible")),
               "values": list(t.values) if t.values else None,
               "accelerator_s": (t.user_attrs.get("timings") or {}).get("accelerator_s", 0.0)}
              for t in sorted(run.study.trials, key=lambda t: t.number)]
    return {"problem": problem.key, "contender": name, "seed": seed, "trials": trials,
            "wall_s": round(time.monotonic() - t0, 1)}


# ----------------------------------------------------------------------------------------- scoring

def score(run: dict, problem: Problem, true_hv: float, budgets: list[int]) -> dict:
    """Prefix curve of one study: (accelerator-hours so far, hypervolume ratio) after each trial."""
    pts, hours, curve, wasted, seen = [], 0.0, [], 0.0, set()
    counts = {"repeat_boots": 0, "aborted": 0, "false_aborts": 0, "rejected": 0}
    for t in run["trials"]:
        h, k = t["accelerator_s"] / 3600, key_of(t["params"])
        hours += h
        if t["feasible"] and t["status"] == TrialStatus.OK:
            pts.append(tuple(t["values"]))
        else:
            wasted += h
        counts["repeat_boots"] += h > 0 and k in seen
        counts["rejected"] += h == 0 and t["status"] in (TrialStatus.INVALID_CONFIG, TrialStatus.WARMUP_OVER_BUDGET)
        if h > 0 and t["status"] == TrialStatus.WARMUP_OVER_BUDGET:  # booted, then aborted in warmup
            e = TABLES[problem.key].get(k)
            counts["aborted"] += 1
            counts["false_aborts"] += bool(e and e.warmup_s is not None and e.warmup_s <= problem.warmup_budget_s)
        seen.add(k)
        curve.append((hours, hypervolume(front(pts), problem.reference, DIRECTIONS) / true_hv if true_hv else 0.0))
    reach = {x: next((h for h, r in curve if r >= x / 100 - 1e-12), math.inf) for x in (90, 95)}
    return {"seed": run["seed"], "curve": [(round(h, 4), round(r, 4)) for h, r in curve],
            "at": {n: {"hv_ratio": curve[n - 1][1], "accel_h": curve[n - 1][0]} for n in budgets if n <= len(curve)},
            "hours_to_90": reach[90], "hours_to_95": reach[95], "wasted_frac": wasted / hours if hours else 0.0,
            **counts}


def aggregate(scores: list[dict], budgets: list[int], hours: float | None) -> dict:
    """Means (± sd) over seeds; `hours`: also the ratio each study held after that many accelerator-hours."""
    out = {"seeds": len(scores)}
    if hours is not None:
        held = [max([r for h, r in s["curve"] if h <= hours + 1e-9], default=0.0) for s in scores]
        out["hv@hours"] = (hours, statistics.mean(held), statistics.pstdev(held))
    for n in budgets:
        r = [s["at"][n]["hv_ratio"] for s in scores if n in s["at"]]
        out[f"hv@{n}"] = (statistics.mean(r), statistics.pstdev(r))
        out[f"h@{n}"] = statistics.mean(s["at"][n]["accel_h"] for s in scores if n in s["at"])
    for x in ("90", "95"):  # median over seeds, a seed that never got there counting as infinite
        v = [s[f"hours_to_{x}"] for s in scores]
        out[f"to{x}"] = (statistics.median(v), sum(math.isfinite(y) for y in v))
    for k in ("wasted_frac", "repeat_boots", "rejected", "aborted", "false_aborts"):
        out[k] = statistics.mean(s[k] for s in scores)
    return out


# ----------------------------------------------------------------------------- release upgrade (3)

def replay(probs: dict[str, Problem], fronts: dict, runs: list[dict], quick: bool, sigma: float) -> dict:
    """Problem linear's chosen settings replayed unchanged (same env) on fork-1.22."""
    lin, up = probs["linear"], probs["upgrade"]
    space, up_front = lin.search_space(quick), fronts["upgrade"]["front"]
    picks = [("1.21.2 true front's balanced point", b.params) for b in [fronts["linear"]["balanced"]] if b]
    for r in sorted((r for r in runs if (r["problem"], r["contender"]) == ("linear", "full")), key=lambda r: r["seed"]):
        ok = [t for t in r["trials"] if t["feasible"] and t["status"] == TrialStatus.OK
              and hypervolume([t["values"]], lin.reference, DIRECTIONS) > 0]
        if ok:
            picks.append((f"full method's balanced pick, seed {r['seed']}",
                          ok[balanced_index([t["values"] for t in ok], DIRECTIONS)]["params"]))
    rows = []
    for label, params in picks:
        after = evaluate(up, space.settings_for(params), sigma)  # same env; 1.22 reads it its own way
        vec = objective_vector(after) if feasible(after, up.warmup_budget_s) else None
        rows.append({"label": label, "params": params, "on_1.21.2": objective_vector(TABLES["linear"][key_of(params)]),
                     "on_1.22": vec, "failure": after.failure, "dominated_on_1.22": vec is None or any(
                         dominates((-p[0], p[1], p[2]), (-vec[0], vec[1], vec[2])) for p in up_front)})
    rows += [{"label": "1.22 true front's balanced point", "params": b.params, "on_1.21.2": None,
              "on_1.22": objective_vector(b), "failure": None, "dominated_on_1.22": False}
             for b in [fronts["upgrade"]["balanced"]] if b]
    carried = [evaluate(up, space.settings_for(e.params), sigma) for e in fronts["linear"]["members"]]
    carried_hv = hypervolume(front([objective_vector(e) for e in carried if feasible(e, up.warmup_budget_s)]),
                             up.reference, DIRECTIONS)
    mine = [r for r in rows if r["label"].startswith("full")]
    shown = [r for r in rows if r not in mine[4:]]  # the table shows the first four picks
    return {"rows": shown, "front_1.21.2_vs_1.22": fronts["linear"]["hv"] / fronts["upgrade"]["hv"],
            "front_1.21.2_replayed_on_1.22": carried_hv / fronts["upgrade"]["hv"],
            "full_picks": len(mine), "full_picks_dominated_on_1.22": sum(r["dominated_on_1.22"] for r in mine),
            "full_picks_distinct_on_1.22": len({r["on_1.22"] for r in mine})}


# ----------------------------------------------------------------------------------------- report

def vec_text(v) -> str:
    return "—" if v is None else f"{v[0]:.0f} tok/s, {v[1]:.0f} ms, {v[2]:.0f} s"


def markdown(res: dict) -> str:
    budgets, out = res["budgets"], []
    for key, pr in res["problems"].items():
        f, any_ = pr["true_front"], next((a for a in pr["contenders"].values() if "hv@hours" in a), None)
        eq = f" | HV@{any_['hv@hours'][0]:.1f} h" if any_ else ""
        head = ("| contender | " + " | ".join(f"HV@{n}" for n in budgets) + f"{eq} | accel-h@{budgets[-1]} | "
                "h→90% (seeds) | h→95% (seeds) | wasted | rejected | aborted (false) | repeat boots |")
        ref, w = f["reference"], f["watcher"]
        out += [f"### {key}: {pr['title']}", "",
                (f"{f['points']} configurations ({f['failing']} fail to start, {f['feasible']} feasible within the "
                 f"{ref[2]:g} s warmup budget); true front {len(f['front'])} points; reference point "
                 f"({ref[0]:g} tok/s, {ref[1]:g} ms p99 TTFT, {ref[2]:g} s). Workload: {pr['workload']}. "
                 f"{res['seeds']} seeds. The tuner's warmup-budget abort, replayed on {w['sampled']} sampled "
                 f"configurations that start, aborts {w['false_aborts']} of the {w['fit']} whose warmup fits the "
                 f"budget and {w['caught']} of the {w['over']} over it."), "",
                head, "|---" * (len(budgets) + 8 + bool(eq)) + "|"]
        for name, a in pr["contenders"].items():
            if "error" in a:
                out.append(f"| {name} | {a['error']} |" + " |" * (len(budgets) + 6 + bool(eq)))
                continue
            hv = " | ".join(f"{a[f'hv@{n}'][0]:.3f} ± {a[f'hv@{n}'][1]:.3f}" for n in budgets)
            hv += f" | {a['hv@hours'][1]:.3f} ± {a['hv@hours'][2]:.3f}" if eq else ""
            to = [f"{'—' if not math.isfinite(a[x][0]) else f'{a[x][0]:.1f}'} ({a[x][1]}/{a['seeds']})"
                  for x in ("to90", "to95")]
            out.append(f"| {name} | {hv} | {a[f'h@{budgets[-1]}']:.1f} | {to[0]} | {to[1]} | "
                       f"{100 * a['wasted_frac']:.0f}% | {a['rejected']:.1f} | {a['aborted']:.1f} "
                       f"({a['false_aborts']:.1f}) | {a['repeat_boots']:.1f} |")
        out.append("")
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

def run_all(args, probs: dict[str, Problem], wanted: list[str], names: list[str], seeds: list[int], log):
    fronts, runs, n = {}, [], args.budgets[-1]
    pool_ctx = mp.get_context("fork")
    with pool_ctx.Pool(args.jobs) as pool:
        for key in wanted:
            TABLES[key] = true_table(probs[key], args.quick, args.warmup_error, pool)
            fronts[key] = true_front(probs[key], TABLES[key])
            fronts[key]["watcher"] = watcher_check(probs[key], TABLES[key], args.quick, args.warmup_error)
            log(f"{key}: {fronts[key]['points']} configurations evaluated, true front of {len(fronts[key]['front'])}")
    tmp = "/dev/shm" if Path("/dev/shm").is_dir() else None  # sqlite commits off the disk
    with tempfile.TemporaryDirectory(prefix="tuning-eff-", dir=tmp) as root:
        def tasks(keys, contenders):
            return [(probs[k], c, s, n, args.quick, args.warmup_error, root) for k in keys for c in contenders
                    for s in seeds]
        first = tasks([k for k in wanted if k != "upgrade"], names)
        later = []
        if "upgrade" in wanted:  # the 1.22 studies read the 1.21.2 full studies (--seed-from)
            first += [] if "full" in names else tasks(["linear"], ["full"])
            later = tasks(["upgrade"], [c for c in ("random", "tpe") if c in names] + ["full", "full+seed-from"])
        with pool_ctx.Pool(args.jobs) as pool:  # forked after the tables exist: the workers inherit them
            for batch in (first, later):
                for r in pool.imap_unordered(run_contender, batch):
                    runs.append(r)
                    log(f"{r['problem']} {r['contender']} seed {r['seed']}: "
                        f"{r.get('error') or str(r['wall_s']) + ' s'}")
    return fronts, runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="coarser spaces (a few hundred grid points each), 5 seeds")
    ap.add_argument("--seeds", type=int, help="seeds per contender (default 20, quick 5)")
    ap.add_argument("--budgets", default="10,20,30,50", help="trial budgets read off each study's prefix")
    ap.add_argument("--problems", default="linear,gaudi,upgrade")
    ap.add_argument("--contenders", default="random,grid,tpe,gp,nsga2,full,full+")
    ap.add_argument("--warmup-error", type=float, default=0.15, help="sigma of the real/predicted warmup factor")
    ap.add_argument("--jobs", type=int, default=mp.cpu_count())
    ap.add_argument("--out", help="output stem (default benchmarks/results/tuning_efficiency[-quick])")
    args = ap.parse_args(argv)
    args.budgets = sorted(int(b) for b in args.budgets.split(","))
    seeds = list(range(args.seeds or (5 if args.quick else 20)))
    wanted = [p for p in args.problems.split(",") if p]
    wanted = (["linear"] if "upgrade" in wanted and "linear" not in wanted else []) + wanted
    names = [c for c in args.contenders.split(",") if c]
    probs, t0 = problems(), time.monotonic()

    def log(text):
        print(f"[{time.monotonic() - t0:5.0f} s] {text}", file=sys.stderr, flush=True)

    fronts, runs = run_all(args, probs, wanted, names, seeds, log)
    res = collect(args, probs, wanted, fronts, runs, len(seeds))
    res["wall_s"] = round(time.monotonic() - t0, 1)
    table = markdown(res)
    print(table + f"\n(wall time {res['wall_s']:.0f} s on {args.jobs} processes)")
    stem = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / (
        "tuning_efficiency" + ("-quick" if args.quick else ""))
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.json").write_text(json.dumps(finite(res), default=str) + "\n")
    Path(f"{stem}.md").write_text(table + "\n")
    return 0


def collect(args, probs: dict[str, Problem], wanted: list[str], fronts: dict, runs: list[dict], seeds: int) -> dict:
    """Scores per study, aggregates per contender, the upgrade replay: the JSON document."""
    res = {"quick": args.quick, "seeds": seeds, "budgets": args.budgets, "warmup_error": args.warmup_error,
           "contenders": {c.name: c.note for c in CONTENDERS.values()}, "problems": {}}
    for key in wanted:
        p, f = probs[key], fronts[key]
        entry = res["problems"][key] = {
            "title": p.title, "workload": f"random {p.input_len}/{p.output_len} tokens (range ratio {p.range_ratio}), "
                                          f"{p.num_prompts} prompts at {p.request_rate:g} req/s Poisson",
            "true_front": {**{k: f[k] for k in ("points", "feasible", "failing", "front", "hv", "reference",
                                                 "watcher")},
                           "balanced": f["balanced"] and {"params": f["balanced"].params,
                                                          "objectives": objective_vector(f["balanced"])}},
            "contenders": {}, "runs": {}}
        errors = {}
        for name in CONTENDERS:
            mine = sorted((r for r in runs if r["problem"] == key and r["contender"] == name), key=lambda r: r["seed"])
            if any("error" in r for r in mine):
                err = next(r["error"] for r in mine if "error" in r)
                errors[name] = {"error": "not installed (needs scipy + torch)" if name == "gp" else err}
            elif mine:
                entry["runs"][name] = [{**score(r, p, f["hv"], args.budgets), "wall_s": r["wall_s"],
                                        "statuses": dict(Counter(t["status"] for t in r["trials"]))} for r in mine]
        full = entry["runs"].get("full")  # equal hours: what the full method spent on its largest budget
        hours = statistics.mean(s["at"][args.budgets[-1]]["accel_h"] for s in full) if full else None
        entry["contenders"] = {n: errors.get(n) or aggregate(entry["runs"][n], args.budgets, hours)
                               for n in CONTENDERS if n in errors or n in entry["runs"]}
    if "upgrade" in wanted:
        res["replay"] = replay(probs, fronts, runs, args.quick, args.warmup_error)
    return res


if __name__ == "__main__":
    sys.exit(main())
