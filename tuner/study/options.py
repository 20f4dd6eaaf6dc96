"""What a study is asked for, and the Optuna study that opens for it.

    StudyOptions  the study's name, storage, sampler, budget (n_trials, timeout), slots, seeds and screening
    Objectives    throughput up, a latency percentile down, warmup seconds down (the names Optuna records);
                  with `tune --cost-objective`, dollars per million output tokens down as a fourth
    Constraints   the SLOs, the warm-up budget and what a trial may not do (recompile, fail requests), as
                  Optuna constraint values (feasible when all <= 0) and as the misses a person reads
    open_study    the storage (make_storage: heartbeat, outage-proof on a server database) and the sampler
                  (make_sampler), created or resumed with the same objectives
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna

from ..space.schema import SearchSpace
from ..trial.run import Slot, TrialResult
from ..vocabulary.errors import StudyError
from . import nodes
from .confirm import ConfirmOptions
from .storage import open_storage

SAMPLERS = ("tpe", "gp", "nsga2", "random", "grid")
THROUGHPUT = "output_throughput"
WARMUP = "warmup_s"
COST = "cost_per_mtok"  # trial/cost.py METRIC: $ per million output tokens at the measured load
COST_PENALTY = 1e6  # $ per million tokens told for a trial that served none (a token a dollar: no real price)
GRACE_S = nodes.DEFAULT_GRACE_S  # a RUNNING trial without heartbeat for GRACE_S belongs to a dead tuner


@dataclass
class Objectives:
    latency_metric: str = "ttft"  # ttft, tpot, itl or e2el
    latency_stat: str = "p99"  # p50/p90/p99..., mean or median
    # tune --cost-objective: cost per million output tokens (needs --cost-per-hour) as a fourth objective.
    # It differs from throughput where a server's cards differ (tensor parallelism in the space).
    cost: bool = False

    @property
    def latency_key(self) -> str:
        return f"{self.latency_stat}_{self.latency_metric}_ms"

    @property
    def names(self) -> list[str]:
        return [THROUGHPUT, self.latency_key, WARMUP] + ([COST] if self.cost else [])

    @property
    def directions(self) -> list[str]:
        return ["maximize", "minimize", "minimize"] + (["minimize"] if self.cost else [])


# --slo keys: a latency statistic of the load test, or of its first-run window (tuner/load/firstrun.py)
SLO_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue")
FIRST_RUN_SLO = "first_"  # first_<stat>_ttft_ms: the first requests after ready (a cold replica's)


def slo_key_problem(key: str, percentiles, warm_requests: int | None = None) -> str | None:
    """Why `key` cannot be an --slo key (None: it can): every trial would otherwise miss it unmeasured."""
    from ..load.metrics import percentile_key

    body = key[len(FIRST_RUN_SLO):] if key.startswith(FIRST_RUN_SLO) else key
    stat, _, rest = body.partition("_")
    metric = rest[:-len("_ms")] if rest.endswith("_ms") else None
    stats = ["mean", "median"] + [f"p{percentile_key(p)}" for p in percentiles]
    if metric not in SLO_METRICS or not stat:
        return (f"--slo {key}: not a latency the load test reports; expected <stat>_<metric>_ms (e.g. p99_ttft_ms) "
                "or first_<stat>_ttft_ms (e.g. first_p99_ttft_ms)")
    if stat not in stats:
        return f"--slo {key}: {stat} is not reported; choose one of {', '.join(stats)} (add a percentile with " \
               "--metric-percentiles)"
    if body is not key:
        if metric != "ttft":
            return f"--slo {key}: the first-run window records TTFT only (first_{stat}_ttft_ms)"
        if warm_requests == 0:
            return (f"--slo {key}: the first-run window is the warm pass, and --num-warmups 0 sends none; "
                    "leave --num-warmups at its default (one wave of --max-concurrency)")
    return None


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
    remeasure: int = 1  # boots of one effective configuration (measured ones are reused, see screen.py)
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
    # tune --confirm: after the search, re-measure what could change the recommendation (confirmrun.py)
    confirm: ConfirmOptions | None = None

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
    stored = study.user_attrs.get("objectives")
    if [d.name.lower() for d in study.directions] != objectives.directions or (stored and stored != objectives.names):
        stored = stored or [d.name.lower() for d in study.directions]
        raise StudyError(
            f"study {opts.name!r} was created with objectives {stored}; this run asks for "
            f"{objectives.names}. Use the same --latency-metric/--latency-stat"
            f"{' and --cost-objective' if COST in stored else ' without --cost-objective' if objectives.cost else ''}"
            f", give this run a new study name (--study NEW), or start one seeded with this study's Pareto front: "
            f"--study NEW --fork-from {opts.name}"
        )
    study.set_metric_names(objectives.names)
    study.set_user_attr("objectives", objectives.names)
    return study
