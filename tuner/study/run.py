"""The Optuna study: storage, sampler, seeding, resume, budgets, parallel slots, Ctrl-C.

A trial is proposed by the sampler, run by `trial.run_trial`, and told back with three objectives
(throughput up, a latency percentile down, warmup seconds down) and `trial.set_constraint` values
(feasible when all <= 0). A failure the configuration caused (invalid settings, warmup over budget,
OOM, failed requests) is told as an infeasible COMPLETE trial with penalty values, so the sampler
learns to avoid the region; a failure of the environment (boot failure, crash, port clash) or an
interruption is a FAIL and its parameters are enqueued again.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from ..errors import StorageUnavailable, StudyError
from ..errors.disk import DISK_ERRNOS, DiskError, disk_error, is_disk_failure, require_space, write_text, writing
from ..serve.redact import redact_env
from ..space.fitted import bind_fitted, pin_to_trial
from ..space.schema import SearchSpace, TrialSettings
from ..trial import run as trial_mod
from ..trial.run import Slot, TrialContext, TrialResult
from ..vocabulary.record import OWNER, TrialRecord
from ..vocabulary.status import CONFIG_FAILURES, TrialStatus
from . import nodes, optuna_private
from .interrupt import Interrupt
from .proposals import Guide
from .screen import (
    SEED_ATTR,
    Screen,
    counts_toward_budget,
    effective_key,
    model_seeds,
    refresh_calibration,
    seed_calibration,
)
from .storage import open_storage, open_storage_readonly, redact_url, write_failure

SAMPLERS = ("tpe", "gp", "nsga2", "random", "grid")
THROUGHPUT = "output_throughput"
WARMUP = "warmup_s"
LATENCY_PENALTY_MS = 1e5  # latency told for a trial that produced none (100 s: worse than any real one)
ELSEWHERE = "--results DIR"  # where else a study's files can go, said when its disk refuses them
GRACE_S = nodes.DEFAULT_GRACE_S  # a RUNNING trial without heartbeat for GRACE_S belongs to a dead tuner


@dataclass
class Objectives:
    latency_metric: str = "ttft"  # ttft, tpot, itl or e2el
    latency_stat: str = "p99"  # p50/p90/p99..., mean or median

    @property
    def latency_key(self) -> str:
        return f"{self.latency_stat}_{self.latency_metric}_ms"

    @property
    def names(self) -> list[str]:
        return [THROUGHPUT, self.latency_key, WARMUP]

    directions = ["maximize", "minimize", "minimize"]


@dataclass
class Constraints:
    slos_ms: dict[str, float] = field(default_factory=dict)  # metric key -> maximum, e.g. p99_ttft_ms
    warmup_budget_s: float | None = None
    allow_recompiles: bool = False
    allow_failed_requests: bool = False

    def values(self, result: TrialResult) -> dict[str, float]:
        """Optuna constraint values: <= 0 means satisfied."""
        out = {"ok": 0.0 if result.ok else 1.0}
        for key, limit in self.slos_ms.items():
            value = result.metrics.get(key)
            out[f"slo_{key}"] = (value - limit) if value is not None else 1.0
        if self.warmup_budget_s is not None:
            w = result.warmup_s
            out["warmup_budget"] = (w - self.warmup_budget_s) if w is not None else 1.0
        if not self.allow_recompiles:
            obs = result.observed
            # shapes the warm-up missed, and steps that compiled graphs while serving (fork compile log)
            out["recompiles"] = float(obs.get("not_warmed_up", 0) + obs.get("buckets_not_prepared", 0)
                                      + obs.get("compile_steps_under_load", 0))
        if not self.allow_failed_requests:
            out["failed_requests"] = float(result.metrics.get("failed", 0) or 0)
        return out

    def misses(self, result: TrialResult) -> list[str]:
        """The limits a measured trial breaks, as a person reads them: 'SLO miss p99_ttft_ms 4874 > 3000'."""
        from ..vocabulary.display import above

        if not result.ok:
            return []
        out = []
        for key, limit in self.slos_ms.items():
            value = result.metrics.get(key)
            out += ([f"SLO miss {key}: not measured (limit {limit:g})"] if value is None else
                    [f"SLO miss {key} {above(value, limit)} > {limit:g}"] if value > limit else [])
        w = result.warmup_s
        if self.warmup_budget_s is not None and w is not None and w > self.warmup_budget_s:
            out.append(f"warm-up {above(w, self.warmup_budget_s)} s > budget {self.warmup_budget_s:g} s")
        cons = self.values(result)
        if cons.get("recompiles", 0) > 0:
            out.append(f"{cons['recompiles']:.0f} runtime recompiles (--allow-recompiles accepts them)")
        if cons.get("failed_requests", 0) > 0:
            out.append(f"{cons['failed_requests']:.0f} failed requests (--allow-failed-requests accepts them)")
        return out


@dataclass
class StudyOptions:
    name: str
    results_root: Path = Path("results")
    storage: str | None = None  # default sqlite:///results/<name>/study.db
    sampler: str = "tpe"
    seed: int | None = 0
    n_trials: int = 20  # finished trials the study should hold (resuming counts what is there)
    timeout_s: float | None = None  # wall seconds for this invocation
    slots: list[Slot] = field(default_factory=lambda: [Slot()])
    seed_from: str | None = None  # another study whose Pareto set is enqueued first
    enqueue_defaults: bool = True
    grid_levels: int = 3
    heartbeat_grace_s: float = GRACE_S  # another node fails a trial whose tuner is silent this long
    storage_outage_s: float = nodes.DEFAULT_OUTAGE_S  # storage calls retried this long in an outage
    remeasure: int = 1  # boots of one effective configuration (measured ones are reused, see measured.py)
    screening: bool = True  # the calibrated model's confident rejections are told without a boot
    # calibration samples from logs of past boots (--calibrate-from), added once to the study's seeds
    calibration_seeds: list[dict] = field(default_factory=list)
    storage_object: optuna.storages.BaseStorage | None = None  # given by the Python API: used as it is
    # what the user runs today (tune --baseline): {"source", "kind", "server", "env", "params", "notes"};
    # booted first, exactly as given (trial 0 of a new study)
    baseline: dict | None = None
    # tune --from-plan: the plan's picks (parameter values, booted right after the baseline) and what the
    # study keeps of the plan (study attribute "plan", the report's plan section)
    plan_seeds: list[dict] = field(default_factory=list)
    plan: dict | None = None

    @property
    def study_dir(self) -> Path:
        return self.results_root / self.name

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{(self.study_dir / 'study.db').as_posix()}"


# ----------------------------------------------------------------------------------------- storage

def make_storage(url: str, grace_s: float = GRACE_S,
                 outage_s: float = nodes.DEFAULT_OUTAGE_S) -> optuna.storages.BaseStorage:
    """The study's storage, opened for writing (tuner/study/storage.py) with the heartbeat of a shared study;
    a server storage is wrapped to ride out outages (tuner/study/nodes.py)."""
    storage = open_storage(url, heartbeat_interval=nodes.heartbeat_interval(grace_s),
                           grace_period=max(1, int(grace_s)), engine_kwargs=nodes.engine_kwargs(url))
    # A shared database can restart under a running study: retry through the outage.
    return storage if url.startswith("sqlite") else nodes.ResilientStorage(storage, url, outage_s)


def make_sampler(name: str, seed: int | None, space: SearchSpace, n_trials: int, grid_levels: int):
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)  # 5.0: multivariate, constant liar
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(20, n_trials // 3)))
    if name == "grid":
        return _AskTellGridSampler(space.grid(grid_levels), seed=seed)
    if name == "gp":
        try:
            import scipy  # noqa: F401
            import torch  # noqa: F401
        except ImportError:
            raise StudyError(
                "--sampler gp needs scipy and torch (CPU): pip install 'bucket-tuner[gp]'"
            ) from None
        return optuna.samplers.GPSampler(seed=seed)
    raise StudyError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")


def _quiet_optuna() -> None:
    """Optuna's info lines and experimental-feature warnings would bury the trial lines."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    # We run our own heartbeat for ask/tell (nodes.Heartbeat); Optuna warns it expects optimize().
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler stops the study from after_trial once the grid is covered, which ask/tell refuses
    (RuntimeError). Our loop stops on --n-trials; past the grid the sampler revisits grid points."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def open_study(opts: StudyOptions, space: SearchSpace, objectives: Objectives) -> optuna.Study:
    _quiet_optuna()
    opts.study_dir.mkdir(parents=True, exist_ok=True)
    storage = (opts.storage_object if opts.storage_object is not None
               else make_storage(opts.storage_url, opts.heartbeat_grace_s, opts.storage_outage_s))
    sampler = make_sampler(opts.sampler, opts.seed, space, opts.n_trials, opts.grid_levels)
    for attempt in range(5):
        try:
            study = optuna.create_study(study_name=opts.name, storage=storage, sampler=sampler,
                                        directions=objectives.directions, load_if_exists=True)
            break
        except optuna.exceptions.DuplicatedStudyError:  # created by another worker meanwhile
            if attempt == 4:
                raise
            time.sleep(0.2)
    if list(study.directions) != [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE,
                                  optuna.study.StudyDirection.MINIMIZE]:
        raise StudyError(f"study {opts.name!r} exists with other objectives: {study.directions}")
    stored = study.user_attrs.get("objectives")
    if stored and stored != objectives.names:
        raise StudyError(
            f"study {opts.name!r} was created with objectives {stored}; this run asks for "
            f"{objectives.names}. Use another --study name or the same --latency-metric/--latency-stat."
        )
    study.set_metric_names(objectives.names)
    study.set_user_attr("objectives", objectives.names)
    return study


# ----------------------------------------------------------------------------------------- seeding

def snap_to_space(space: SearchSpace, values: dict[str, Any]) -> dict[str, Any]:
    """Keep the values the space can take, moved onto its grid (step, bounds, choices)."""
    out = {}
    for p in space.parameters:
        if p.name not in values:
            continue
        v = values[p.name]
        if p.type in ("categorical", "bool"):
            choices = [False, True] if p.type == "bool" else list(p.choices)
            match = [c for c in choices if str(c).lower() == str(v).lower()]
            if match:
                out[p.name] = match[0]
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        x = min(max(x, p.low), p.high)
        if p.step:
            x = p.low + round((x - p.low) / p.step) * p.step
            x = min(x, p.high)
        out[p.name] = int(round(x)) if p.type == "int" else round(x, 6)
    return out


def default_seeds(space: SearchSpace, release: str | None, workload_desc: dict,
                  concurrency: int | None) -> list[tuple[str, dict]]:
    """The release's defaults and the static calculator's recommendation, as parameter values."""
    from ..buckets import calc
    from ..buckets.runtime import runtime_defaults

    seeds = []
    defaults: dict[str, Any] = {"max_num_seqs": 256, "gpu_memory_utilization": 0.9, "enforce_eager": False}
    if release:
        defaults.update(runtime_defaults(release))
    # Bucket variables the user does not set take the release's derived defaults: leave them to it.
    seeds.append(("release defaults", snap_to_space(space, {p.name: defaults.get(p.key) for p in space.parameters
                                                              if defaults.get(p.key) is not None})))
    in_len, out_len = workload_desc.get("input_len"), workload_desc.get("output_len")
    if in_len and out_len:
        c = concurrency or 16
        bs_list = tuple(sorted({max(1, c // 4), max(1, c // 2), c}))
        try:
            rec = calc.calculate(calc.CalcInputs(input_len=int(in_len), output_len=int(out_len),
                                                 range_ratio=float(workload_desc.get("range_ratio", 0.0)),
                                                 bs_list=bs_list if len(bs_list) > 1 else (c,),
                                                 bucket_size=int(space.server.get("block_size", 128))))
        except calc.CalcInputError:
            rec = None
        if rec:
            calc_vars = dict(rec["calculated_variables"], max_num_seqs=c)
            seeds.append(("calculator", snap_to_space(space, {p.name: calc_vars[p.key] for p in space.parameters
                                                               if p.key in calc_vars})))
    return [(label, values) for label, values in seeds if values]


def pareto_params(storage_url: str, study_name: str) -> list[dict[str, Any]]:
    try:  # read-only: a mistyped --seed-from must not create a database
        other = optuna.load_study(study_name=study_name, storage=open_storage_readonly(storage_url))
    except KeyError:
        raise StudyError(f"--seed-from: no study named {study_name!r} in {redact_url(storage_url)}") from None
    return [t.params for t in other.best_trials]


BASELINE_SEED = "baseline"  # the seed label of the baseline's trial (report/facts.py reads it)
BASELINE_ATTR = nodes.BASELINE_ATTR  # its exact server options and environment
requeue_attrs = nodes.requeue_attrs
PLAN_SEED = "plan pick"  # "plan pick 1", "plan pick 2", ...


def enqueue_seeds(study: optuna.Study, opts: StudyOptions, space: SearchSpace, release: str | None,
                  workload_desc: dict, concurrency: int | None) -> list[str]:
    """Enqueue seeds once, on a new study: the baseline, the plan's picks, another study's front, the
    release defaults and the calculator. Returns what was enqueued, for the log."""
    if study.trials:
        return []
    said = []
    if opts.baseline is not None:
        b = opts.baseline
        study.enqueue_trial(b["params"], user_attrs={"seed": BASELINE_SEED, BASELINE_ATTR: {
            "server": b["server"], "env": b["env"], "params": b["params"]}})
        study.set_user_attr("baseline", {k: b[k] for k in ("source", "kind", "notes") if k in b})
        said.append(f"{BASELINE_SEED} ({b.get('source')}): exactly its settings")
    for rank, params in enumerate(opts.plan_seeds, start=1):
        study.enqueue_trial(params, user_attrs={"seed": f"{PLAN_SEED} {rank}"}, skip_if_exists=True)
        said.append(f"{PLAN_SEED} {rank}: {params}")
    if opts.plan is not None:
        study.set_user_attr("plan", opts.plan)
    if opts.seed_from:
        other_url = opts.storage or f"sqlite:///{(opts.results_root / opts.seed_from / 'study.db').as_posix()}"
        for params in pareto_params(other_url, opts.seed_from):
            values = snap_to_space(space, params)
            if values:
                study.enqueue_trial(values, user_attrs={"seed": f"pareto of {opts.seed_from}"})
                said.append(f"pareto of {opts.seed_from}: {values}")
    if opts.enqueue_defaults:
        for label, values in default_seeds(space, release, workload_desc, concurrency):
            study.enqueue_trial(values, user_attrs={"seed": label}, skip_if_exists=True)
            said.append(f"{label}: {values}")
    return said


def enqueue_model_seeds(study: optuna.Study, opts: StudyOptions, space: SearchSpace, ctx: TrialContext,
                        fresh: bool) -> list[str]:
    """On a new study with default seeds: the performance model's seeds (measured.model_seeds)."""
    if not (fresh and opts.enqueue_defaults and opts.screening) or opts.sampler == "grid":
        return []  # the grid is the user's own enumeration (and its sampler ignores enqueued points)
    said = []
    for values in model_seeds(space, ctx, opts.n_trials, opts.seed):
        study.enqueue_trial(values, user_attrs={"seed": "performance model"}, skip_if_exists=True)
        said.append(f"performance model: {values}")
    return said


# --------------------------------------------------------------------------------------- the loop

def recover_orphans(study: optuna.Study) -> list[int]:
    """RUNNING trials whose tuner died on this host: failed and their parameters enqueued again now.

    Trials of tuners on other hosts (a shared PostgreSQL study) are left to the heartbeat: every
    node fails and re-enqueues them once their heartbeat is older than the grace (nodes.py).
    """
    from ..serve.procgroup import identity_alive

    recovered = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.system_attrs.get("tuner_owner") or TrialRecord.from_frozen(t).owner
        if owner and identity_alive(owner) is False:
            optuna_private.fail_trial_of_dead_tuner(study, t, {"status": "tuner_died", "requeued": True},
                                                    {"tuner_recovered": True})
            study.enqueue_trial(t.params, user_attrs={"requeued_from": t.number, **requeue_attrs(t)})
            recovered.append(t.number)
    return recovered


def trial_settings(space: SearchSpace, trial) -> TrialSettings:
    """The settings a trial runs with: the sampler's (space.suggest), or the baseline's exactly."""
    baseline = trial.user_attrs.get(BASELINE_ATTR)
    if baseline is None:
        return space.suggest(trial)
    params = space.suggest_fixed(trial, baseline.get("params") or {})
    return TrialSettings(server=dict(baseline["server"]), env=dict(baseline["env"]), params=params)


def _counted(study: optuna.Study) -> int:
    """Trials that count toward --n-trials: running ones (any worker's), completed ones, and failed
    ones that were not re-enqueued; not the screened ones (reused or rejected without a boot).
    Workers sharing a study can overshoot by at most one trial each."""
    return sum(1 for t in study.get_trials(deepcopy=False)
               if (t.state in (TrialState.RUNNING, TrialState.COMPLETE)
                   or (t.state == TrialState.FAIL and not TrialRecord.from_frozen(t).requeued))
               and counts_toward_budget(t))


def tell_result(study: optuna.Study, trial: optuna.Trial, result: TrialResult, objectives: Objectives,
                constraints: Constraints) -> TrialState:
    attrs = result.to_json()
    for key in ("status", "reason", "server", "env", "predicted", "observed", "artifacts", "timings", "argv"):
        trial.set_user_attr(key, attrs[key])
    trial.set_user_attr("metrics", {k: v for k, v in result.metrics.items() if not k.startswith("tuner_")})
    cons = constraints.values(result)
    feasible = all(v <= 0 for v in cons.values())
    trial.set_user_attr("feasible", feasible)  # optuna-dashboard 0.21 does not read set_constraint
    misses = constraints.misses(result)
    if misses:  # a measured trial outside a limit: its reason says which, with the figures
        trial.set_user_attr("reason", "; ".join([*misses, *([result.reason] if result.reason else [])]))
    if result.status not in CONFIG_FAILURES and not result.ok:
        # The environment failed, not the configuration: no values; run these parameters again.
        requeue = result.status in (TrialStatus.INTERRUPTED, TrialStatus.PORT_IN_USE)
        trial.set_user_attr("requeued", requeue)
        study.tell(trial, state=TrialState.FAIL)
        if requeue:
            study.enqueue_trial(trial.params, user_attrs={"requeued_from": trial.number, **requeue_attrs(trial)})
        return TrialState.FAIL
    for name, value in cons.items():
        trial.set_constraint(name, float(value))
    # optuna-dashboard 0.21 reads only the legacy "constraints" system attribute; mirror the values
    # there (same numbers, same order) so its Pareto view hides infeasible trials too.
    optuna_private.mirror_constraints(study, trial, [float(v) for v in cons.values()])
    # Penalties for what was not measured: they steer the sampler away, and stay inside Optuna (the names
    # are recorded so that trials.csv and pareto.csv leave those cells empty, tuner/report/frame.py).
    placeholders = []
    throughput = float(result.metrics.get(THROUGHPUT) or 0.0) if result.ok else 0.0
    if not result.ok or result.metrics.get(THROUGHPUT) is None:
        placeholders.append(THROUGHPUT)
    latency = result.metrics.get(objectives.latency_key)
    if latency is None or not result.ok:
        latency = max([LATENCY_PENALTY_MS, *constraints.slos_ms.values()])
        placeholders.append(objectives.latency_key)
    warmup = result.warmup_s
    if warmup is None or not measured_warmup(result):
        placeholders.append(WARMUP)
    if warmup is None:
        warmup = constraints.warmup_budget_s or result.predicted.get("warmup_s") or 0.0
    trial.set_user_attr("placeholders", placeholders)
    study.tell(trial, [throughput, float(latency), float(warmup)])
    return TrialState.COMPLETE


def measured_warmup(result: TrialResult) -> bool:
    """The warm-up scored is this boot's (or the one it stands for), not a prediction for a trial that never booted."""
    return any(result.observed.get(k) is not None for k in ("warmup_s", "warmup_scored_s"))


@dataclass
class StudyRun:
    study: optuna.Study
    ran: int = 0
    interrupted: bool = False
    signal: str | None = None  # what interrupted it: SIGINT, SIGTERM or SIGHUP
    exit_status: int = 0  # 128 + the signal's number once interrupted
    interrupted_trials: list[int] = field(default_factory=list)  # recorded interrupted, enqueued again
    seeds: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    study_dir: Path | None = None  # where its report, trials.csv and best.env are


def run_study(opts: StudyOptions, space: SearchSpace, ctx: TrialContext, objectives: Objectives,
              constraints: Constraints, on_trial: Callable[[int, TrialResult], None] | None = None,
              install_sigint: bool = True, runner: Callable[..., TrialResult] | None = None) -> StudyRun:
    """Run trials on every slot until the study holds n_trials finished trials, the timeout passes,
    or a signal (Ctrl-C, SIGTERM, SIGHUP: tuner/study/interrupt.py). A second signal kills the servers
    at once (the trials are still recorded); a third leaves without recording.

    `runner(ctx, settings, trial_dir, slot, stop_event) -> TrialResult` runs one trial; the default
    boots a server (trial.run_trial). The tuning-efficiency benchmark passes a virtual-clock runner
    so that the same study loop, seeding and scoring are what it measures."""
    runner = runner or trial_mod.run_trial
    study = open_study(opts, space, objectives)
    bind_fitted(space, ctx, opts.study_dir)  # fitted bucket sets: placed on the study's workload
    owner, notes = _recover_leftovers(study, opts, ctx)
    _describe_setup(study, space, ctx, constraints)
    seeds = _seed(study, opts, space, ctx, notes)
    screen = Screen(study, ctx, opts.remeasure, opts.screening, opts.seed)
    guide = Guide(study, space, ctx, objectives, screen, opts.seed,  # the calibrated model's proposals
                  proposes=opts.sampler != "grid")
    screen.use_guide(guide)  # ... and what they predict dominated is screened before boot
    _calibrate(study, opts, ctx, notes)
    for line in notes + [f"seeded: {s}" for s in seeds]:
        trial_mod.status_line(ctx, line)
    loop = _StudyLoop(opts, space, ctx, objectives, constraints, StudyRun(study=study, seeds=seeds, notes=notes),
                      screen, guide, owner, on_trial, runner)
    loop.run_slots(install_sigint)
    return loop.summary()


def _recover_leftovers(study: optuna.Study, opts: StudyOptions, ctx: TrialContext) -> tuple[dict, list[str]]:
    """(this tuner's identity, notes): server groups an earlier run left are stopped; trials left running
    by a tuner that died, here or on another node, are failed and enqueued again."""
    from ..serve.process import cleanup_stale_groups
    from ..serve.procgroup import process_identity

    records = opts.study_dir / "run"
    ctx.records_dir = records
    notes = [f"stopped a server group left by an earlier run: pgid {g}" for g in cleanup_stale_groups(records)]
    notes += [f"trial {n} was left running by a tuner that died: failed and enqueued again"
              for n in recover_orphans(study)]
    owner = process_identity()
    notes += [f"trial {n} lost its tuner on another node (no heartbeat): failed and enqueued again"
              for n in nodes.fail_stale_trials(study, owner)]
    return owner, notes


def _describe_setup(study: optuna.Study, space: SearchSpace, ctx: TrialContext, constraints: Constraints) -> None:
    """What the report and export name: the space and release, how the release was found, the backend, the limits."""
    study.set_user_attr("space", {"name": space.name, "source": space.source, "release": ctx.release})
    if ctx.release_detection:  # tune --release auto: the profile read off the node, and why
        study.set_user_attr("release_detection", ctx.release_detection)
    study.set_user_attr("backend", ctx.backend.describe())
    study.set_user_attr("constraints", asdict(constraints))  # the limits, for the report and export to name


def _seed(study: optuna.Study, opts: StudyOptions, space: SearchSpace, ctx: TrialContext,
          notes: list[str]) -> list[str]:
    """The seeds enqueued on a new study (enqueue_seeds, then the model's), for the log; a note when
    --baseline / --from-plan come too late for this study."""
    fresh_study = not study.trials
    seeds = enqueue_seeds(study, opts, space, ctx.release, ctx.workload.describe(), ctx.load.max_concurrency)
    if not fresh_study and (opts.baseline is not None or opts.plan_seeds):
        notes.append("--baseline / --from-plan: this study already has trials, so nothing was enqueued (they "
                     "seed a new study)")
    return seeds + enqueue_model_seeds(study, opts, space, ctx, fresh=bool(seeds))


def _calibrate(study: optuna.Study, opts: StudyOptions, ctx: TrialContext, notes: list[str]) -> None:
    """Logs of past boots (--calibrate-from) join the study's calibration once; the fit in force goes to ctx."""
    known = study.user_attrs.get(SEED_ATTR) or []
    fresh_logs = [x for x in opts.calibration_seeds if x not in known]  # a re-run adds nothing twice
    if fresh_logs:
        seed_calibration(study, fresh_logs)
        notes.append(f"calibration: {len(fresh_logs)} log(s) of past boots added")
    refresh_calibration(study, ctx)


class _StudyLoop:
    """The slots' loop over one study, phase by phase: ask_trial, claim_or_wait (the same configuration
    running elsewhere), screen (told without a boot), run_trial, tell_trial (and write its files); the stop
    conditions (want_more, done_here) and a tuner error (give_up) end it. Optuna is called on a local `study`
    and `trial` (tests/project/test_dependency_bounds.py reads those calls), and no phase takes an Optuna
    method's name. One object serves every slot's thread: what changes per trial travels in arguments,
    what is shared is guarded by `lock`."""

    def __init__(self, opts: StudyOptions, space: SearchSpace, ctx: TrialContext, objectives: Objectives,
                 constraints: Constraints, run: StudyRun, screen: Screen, guide: Guide, owner: dict,
                 on_trial: Callable[[int, TrialResult], None] | None, runner: Callable[..., TrialResult]):
        self.opts, self.space, self.ctx, self.objectives, self.constraints = opts, space, ctx, objectives, constraints
        self.run, self.study, self.screen, self.guide, self.owner = run, run.study, screen, guide, owner
        self.on_trial, self.runner = on_trial, runner
        self.stop = threading.Event()
        self.interrupt = Interrupt(self.stop)  # installed by run_slots, while the slots run
        self.lock = threading.Lock()
        self.ask_lock = nodes.AskLock(optuna_private.storage_of(self.study), nodes.storage_url(opts.storage_url),
                                      opts.name)
        self.errors: list[BaseException] = []
        self.deadline = time.monotonic() + opts.timeout_s if opts.timeout_s else math.inf
        self.reaper = nodes.StaleReaper(self.study, owner, on_failed=lambda n: trial_mod.status_line(
            ctx, f"trial {n} lost its tuner on another node (no heartbeat): failed and enqueued again"))

    # ------------------------------------------------------------------------------------ the slots
    def run_slots(self, install_sigint: bool) -> None:
        """A thread per slot, waited for; the signal handlers while they run (main thread only), and a
        second signal hurries every server."""
        threads = [threading.Thread(target=self.slot_loop, args=(slot,), name=f"slot-{slot.index}", daemon=True)
                   for slot in self.opts.slots]
        signals = install_sigint and threading.current_thread() is threading.main_thread()
        try:
            with self.reaper, (self.interrupt if signals else contextlib.nullcontext()):
                for t in threads:
                    t.start()
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
                        if self.interrupt.hurry_due():  # a second signal: no grace for the servers any more
                            from ..serve.process import hurry_all

                            hurry_all()
        finally:
            self.stop.set()

    def summary(self) -> StudyRun:
        """The run as it ended: the signal that stopped it; the first error a slot met is raised."""
        run, interrupt = self.run, self.interrupt
        if interrupt.signum is not None:
            run.interrupted, run.signal, run.exit_status = True, interrupt.name, 128 + interrupt.signum
        if self.errors:
            raise self.errors[0]
        return run

    def slot_loop(self, slot: Slot) -> None:
        """Ask, then take the trial through its phases; with nothing to ask, wait while another node's
        running trial may still fail and come back."""
        while True:
            asked = self.ask_trial()
            if asked is None:
                if self.done_here():
                    return
                self.stop.wait(self.reaper.interval or 1.0)
                continue
            trial, heartbeat = asked
            try:
                self.run_one(trial, heartbeat, slot)
            except optuna.exceptions.UpdateFinishedTrialError:
                # Our heartbeat went silent too long (a storage outage) and another node failed the
                # trial and enqueued its parameters again: its result files stay, go on.
                trial_mod.status_line(self.ctx, f"trial {trial.number} was failed meanwhile by another node "
                                      "(heartbeat missed); its parameters run again")
            except BaseException as exc:
                self.give_up(trial, exc)
                return
            finally:
                heartbeat.stop()

    # ------------------------------------------------------------------------------ stop conditions
    def want_more(self) -> bool:
        """No stop, time left, and fewer trials counted (on every node) than --n-trials."""
        return not self.stop.is_set() and time.monotonic() < self.deadline and _counted(self.study) < self.opts.n_trials

    def done_here(self) -> bool:
        """Nothing more to ask: done, unless another node's running trial may still fail and come back."""
        return (self.stop.is_set() or time.monotonic() >= self.deadline
                or not nodes.others_running(self.study, self.owner))

    # --------------------------------------------------------------------------------- the phases
    def ask_trial(self) -> tuple[optuna.Trial, nodes.Heartbeat] | None:
        """The next trial and its heartbeat, or None: enough trials, time or a stop."""
        study = self.study
        with self.lock, self.ask_lock:  # count and ask atomically, across nodes too
            if not self.want_more():
                return None
            trial = study.ask()
            trial.set_user_attr(OWNER, self.owner)
            return trial, nodes.Heartbeat(study, trial)  # beats at once: a death is noticed

    def run_one(self, trial: optuna.Trial, heartbeat: nodes.Heartbeat, slot: Slot) -> None:
        """An asked trial: claim or wait, screen, run (unless told without a boot), tell."""
        settings = trial_settings(self.space, trial)
        trial.set_user_attr("slot", slot.index)
        result = self.claim_or_wait(trial, settings)
        if result is None:
            result, run_ctx = self.screen.decide(trial, settings, slot.index)  # a result told without a boot?
        if result is None:
            result, settings = self.run_trial(trial, settings, run_ctx, slot)
        heartbeat.stop()
        self.tell_trial(trial, result, settings)

    def claim_or_wait(self, trial: optuna.Trial, settings: TrialSettings) -> TrialResult | None:
        """Claim the trial's effective settings; when other trials are running them, wait for those to end
        (then None: the screen reuses their result) or for a stop (an interrupted result)."""
        key = effective_key(self.ctx, settings)
        with self.lock, self.ask_lock:  # claims of one configuration are ordered across nodes (screen.claim)
            ahead = self.screen.claim(trial, key)
        return self.screen.wait_for(trial, ahead, self.stop, settings) if ahead else None

    def run_trial(self, trial: optuna.Trial, settings: TrialSettings, run_ctx: TrialContext,
                  slot: Slot) -> tuple[TrialResult, TrialSettings]:
        """Boot and measure (the runner): its result, and the settings it ran with (a fitted set pinned to
        the trial's own copy)."""
        trial_dir = self._trial_dir(trial)
        # A server that cannot write its log fails for no fault of its settings: not booted.
        require_space(self.opts.study_dir, elsewhere=ELSEWHERE)
        settings = pin_to_trial(settings, trial_dir)  # a fitted set boots from its own copy
        result = self.runner(run_ctx, settings, trial_dir, slot, self.stop)
        if not result.ok and not result.status.config_failure:
            require_space(self.opts.study_dir, elsewhere=ELSEWHERE)  # did it fail for want of disk?
        return result, settings

    def tell_trial(self, trial: optuna.Trial, result: TrialResult, settings: TrialSettings) -> None:
        """Write the trial's files, record and tell its result, refit the calibration and let the guide
        propose; a disk that refused the files stops the study once the result is told."""
        if result.status is TrialStatus.INTERRUPTED and self.interrupt.name:
            result.reason = f"{result.reason} ({self.interrupt.name} to the tuner)"
        files_failed = None
        try:
            _write_trial_files(self._trial_dir(trial), result, settings)
        except DiskError as exc:  # the measurement is still told; the study stops after it
            files_failed = exc
        with self.lock:
            self.screen.record(trial, result)
            tell_result(self.study, trial, result, self.objectives, self.constraints)
            self.run.ran += 1
            if result.status is TrialStatus.INTERRUPTED:
                self.run.interrupted_trials.append(trial.number)
            if result.calibration_sample:
                refresh_calibration(self.study, self.ctx)
            self.guide.after_tell(result.booted, more=self.want_more())
        if self.on_trial:
            self.on_trial(trial.number, result)
        if files_failed is not None:
            raise files_failed

    def give_up(self, trial: optuna.Trial, exc: BaseException) -> None:
        """Not a trial outcome (a bad space expression, a storage failure, a bug): keep the record, stop
        every slot, and let the caller see the error."""
        study = self.study
        exc = _explained(exc, self.opts)
        self.errors.append(exc)
        self.stop.set()
        with self.lock, contextlib.suppress(Exception):  # the trial may have been told already
            if is_disk_failure(exc) or isinstance(exc, StorageUnavailable):
                # The disk or the database failed, not the settings: they run again on resume.
                tell_result(study, trial, TrialResult(status=TrialStatus.INTERRUPTED, reason=str(exc)[:500],
                                                      params=dict(trial.params)), self.objectives, self.constraints)
            else:
                trial.set_user_attr("status", "tuner_error")
                trial.set_user_attr("reason", f"{type(exc).__name__}: {exc}"[:500])
                study.tell(trial, state=TrialState.FAIL)

    def _trial_dir(self, trial: optuna.Trial) -> Path:
        return self.opts.study_dir / "trials" / f"{trial.number:04d}"


def _write_trial_files(trial_dir: Path, result: TrialResult, settings: TrialSettings) -> None:
    with writing(trial_dir, ELSEWHERE):
        trial_dir.mkdir(parents=True, exist_ok=True)
    env_path = trial_dir / "trial.env"
    lines = [f"{k}={v}" for k, v in sorted(redact_env(settings.env).items())]
    write_text(env_path, "\n".join(lines) + "\n", ELSEWHERE)
    result.artifacts["env_file"] = str(env_path)
    write_text(trial_dir / "result.json", json.dumps(result.to_json(), indent=2, default=str), ELSEWHERE)


def _explained(exc: BaseException, opts: StudyOptions) -> BaseException:
    """A disk or database failure as one line naming the path and the remedy (the study is intact)."""
    if isinstance(exc, OSError) and exc.errno in DISK_ERRNOS:
        exc = disk_error(exc, opts.study_dir, ELSEWHERE)
    if isinstance(exc, DiskError) and "re-run" not in str(exc):
        return DiskError(f"{exc}; everything recorded so far is kept: re-run the same command to resume", exc.path,
                         exc.errno)
    return write_failure(exc, opts.storage_url) or exc
