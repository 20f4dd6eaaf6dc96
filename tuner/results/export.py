"""Pick a trial from a study's feasible Pareto set and write its complete env file.

The env file works with `docker run --env-file FILE` and with `set -a; . FILE; set +a`: one NAME=VALUE
per line, comments start with '#', no quotes (docker would keep them). It is complete: every variable
the release reads for bucketing, warmup and graph memory, not a diff against defaults, because
defaults move between releases. A bucket variable is written with its resolved default only when
setting it explicitly keeps the release's behaviour identical (checked by rebuilding the buckets):
some releases treat "set" differently from "unset" (fork 1.21.2+ appends the KV block count to the
decode range only while VLLM_DECODE_BLOCK_BUCKET_MAX is unset), and those stay unset, with a comment.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from ..buckets import BucketConfigError, ServerConfig, get_profile
from ..buckets.runtime import DIAGNOSTIC_VARIABLES, runtime_variables
from ..serve.backends import server_flags, server_options
from ..serve.redact import is_secret_name
from ..space.schema import BUCKET_FILE_VARIABLE
from ..study.estimates import Spread
from ..study.pareto import balanced_index, ideal_distances, measured_front
from ..trial.cost import cards
from ..vocabulary.errors.disk import write_text
from ..vocabulary.record import TrialRecord, measured_trial, records
from .orchestrators import DeployOptions, deploy_comments

PICKS = ("throughput", "latency", "balanced", "warmup", "cost")
FLAGS_HEADER = "# vllm serve flags:"  # the env file's line of server flags (compare --env-file reads it back)
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/+@%=-]*$")


class ExportError(ValueError):
    """No trial matches, or a value cannot be written safely; the message says which."""


@dataclass
class Filters:
    max_warmup_s: float | None = None
    max_latency_ms: float | None = None  # on the study's latency objective
    min_throughput: float | None = None
    metric_limits: dict[str, float] = field(default_factory=dict)  # e.g. {"p99_ttft_ms": 500}


def pick_trial(study: optuna.Study, pick: str, filters: Filters) -> optuna.trial.FrozenTrial:
    if pick not in PICKS:
        raise ExportError(f"unknown --pick {pick!r}; choose one of {', '.join(PICKS)}")
    candidates = measured_front(study)
    if not candidates:
        raise ExportError(f"study {study.study_name!r} has no feasible completed trial to export")
    names = study.metric_names or []
    metrics = {r.number: r.metrics for r in records(candidates)}

    def keep(t) -> bool:
        thr, lat, warm = t.values[0], t.values[1], t.values[2]
        m = metrics[t.number]
        if filters.max_warmup_s is not None and warm > filters.max_warmup_s:
            return False
        if filters.max_latency_ms is not None and lat > filters.max_latency_ms:
            return False
        if filters.min_throughput is not None and thr < filters.min_throughput:
            return False
        return all(m.get(k) is not None and m[k] <= v for k, v in filters.metric_limits.items())

    kept = [t for t in candidates if keep(t)]
    if not kept:
        raise ExportError(f"none of the {len(candidates)} Pareto trials passes the filters "
                          f"({_describe_filters(filters, names)}); {_closest(candidates, metrics, filters, names)}")
    if pick == "throughput":
        return max(kept, key=lambda t: (t.values[0], -t.values[1]))
    if pick == "latency":
        return min(kept, key=lambda t: (t.values[1], -t.values[0]))
    if pick == "warmup":
        return min(kept, key=lambda t: (t.values[2], -t.values[0]))
    if pick == "cost":  # the least per output token at any price: the most tokens per card-second
        return max(kept, key=lambda t: (t.values[0] / cards(t.user_attrs.get("argv") or [],
                                                            t.user_attrs.get("server") or {}), -t.values[1]))
    directions = [d.name.lower() for d in study.directions]
    return kept[balanced_index([t.values for t in kept], directions)]


def _closest(candidates: list, metrics: dict[int, dict[str, Any]], filters: Filters, names: list[str]) -> str:
    """The trial the least loosening of the filters admits (smallest total relative excess), and how;
    `metrics`: each candidate's, by number."""
    import math

    def excess(value: float, limit: float) -> float:
        return value / limit - 1 if limit > 0 else math.inf

    def misses(t) -> list[tuple[float, str]]:
        thr, lat, warm = t.values[0], t.values[1], t.values[2]
        m = metrics[t.number]
        out = []
        if filters.max_warmup_s is not None and warm > filters.max_warmup_s:
            out.append((excess(warm, filters.max_warmup_s), f"--max-warmup {math.ceil(warm)}"))
        if filters.max_latency_ms is not None and lat > filters.max_latency_ms:
            out.append((excess(lat, filters.max_latency_ms), f"--max-latency {math.ceil(lat)}"))
        if filters.min_throughput is not None and thr < filters.min_throughput:
            out.append((1 - thr / filters.min_throughput if filters.min_throughput > 0 else math.inf,
                        f"--min-throughput {math.floor(thr)}"))
        for k, v in filters.metric_limits.items():
            if m.get(k) is None:
                out.append((math.inf, f"{k} (not measured)"))
            elif m[k] > v:
                out.append((excess(m[k], v), f"--where {k}={math.ceil(m[k])}"))
        return out

    best = min(candidates, key=lambda t: (len(misses(t)), sum(x for x, _ in misses(t)), t.number))
    thr, lat, warm = best.values[0], best.values[1], best.values[2]
    lat_name = names[1] if len(names) > 1 else "latency"
    return (f"closest: trial {best.number} ({thr:,.0f} tok/s, {lat_name} {lat:,.0f} ms, warm-up {warm:,.0f} s); "
            f"{' '.join(text for _, text in misses(best))} would admit it")


def _describe_filters(f: Filters, names: list[str]) -> str:
    parts = []
    if f.max_warmup_s is not None:
        parts.append(f"warmup <= {f.max_warmup_s:g} s")
    if f.max_latency_ms is not None:
        parts.append(f"{names[1] if len(names) > 1 else 'latency'} <= {f.max_latency_ms:g} ms")
    if f.min_throughput is not None:
        parts.append(f"throughput >= {f.min_throughput:g}")
    parts += [f"{k} <= {v:g}" for k, v in f.metric_limits.items()]
    return ", ".join(parts) or "none"


def complete_env(release: str, trial_env: dict[str, str], server: dict[str, Any],
                 num_hpu_blocks: int | None, model_inputs: dict | None = None) -> tuple[dict[str, str], list[str]]:
    """Every variable `release` reads, with the trial's values, plus notes on what stays unset. `model_inputs`:
    what the release's runner takes from the served model for its buckets (perfmodel.costs.runner_inputs):
    a default pinned from a dense model's build would change a hybrid's or a sliding-window model's buckets."""
    inputs = dict(model_inputs or {})
    profile = get_profile(release)
    env = dict(trial_env)
    notes: list[str] = []
    for var in runtime_variables(profile):
        if var.name not in env and var.default is not None:
            env[var.name] = var.default
    cfg = _server_config(server, env, num_hpu_blocks, inputs)
    if cfg is None:
        notes.append("bucket variables left to the release: the KV block count is unknown")
        return env, notes
    try:
        plan = profile.build(cfg)
    except BucketConfigError as exc:
        raise ExportError(f"{release} refuses these settings: {exc}") from None
    for name in profile.bucket_variables(plan.strategy):
        if name in env:
            continue
        setting = plan.setting(name)
        if setting is None or setting.value is None or isinstance(setting.value, bool):
            continue
        trial = dict(env, **{name: str(setting.value)})
        try:
            same = _same_plan(profile.build(_server_config(server, trial, num_hpu_blocks, inputs)), plan)
        except BucketConfigError:
            same = False
        if same:
            env[name] = str(setting.value)
        else:
            notes.append(f"{name} left unset: its default ({setting.value}) behaves differently when set "
                         f"explicitly on {profile.name}")
    return env, notes


def _same_plan(a, b) -> bool:
    return a.strategy == b.strategy and a.prompt == b.prompt and a.decode == b.decode and not (
        set(a.warnings) - set(b.warnings))


def _server_config(server: dict[str, Any], env: dict[str, str], blocks: int | None,
                   inputs: dict | None = None) -> ServerConfig | None:
    if not blocks or "max_model_len" not in server:
        return None
    return ServerConfig(
        block_size=int(server.get("block_size", 128)),
        max_num_seqs=int(server.get("max_num_seqs", 256)),
        max_model_len=int(server["max_model_len"]),
        max_num_batched_tokens=int(server.get("max_num_batched_tokens") or max(server["max_model_len"], 2048)),
        num_hpu_blocks=int(blocks),
        env=env,
        prefix_caching=server.get("enable_prefix_caching"),
        max_num_prefill_seqs=server.get("max_num_prefill_seqs"),
        **(inputs or {}),
    )


def study_model_inputs(study: optuna.Study, release: str | None, server: dict[str, Any]) -> dict:
    """The bucket inputs the release's runner takes from the study's model (its mamba chunk size, main's whole
    decode block range for hybrid and sliding-window models, the draft tokens of a speculative config); {} when
    the study does not record a model the tuner knows."""
    from ..perfmodel.costs import ServerInputs, runner_inputs
    from ..perfmodel.hardware import model_for
    from ..perfmodel.target import speculative_inputs

    described = study.user_attrs.get("device_model") or {}
    if not release or not described.get("model"):
        return {}
    try:
        shape = model_for(described["model"], described.get("hf_overrides"))
        return runner_inputs(get_profile(release).name, shape, ServerInputs(**speculative_inputs(server)))
    except (ValueError, BucketConfigError):  # an unknown model or option: the dense account, as before
        return {}


def export_env(trial: optuna.trial.FrozenTrial, release: str | None,
               study: optuna.Study | None = None) -> tuple[dict[str, str], list[str]]:
    """The variables the env file of `trial` sets (complete for `release`), and notes on the rest.
    Never secrets, never the log-only diagnostics (a deployment does not want their logging)."""
    rec = TrialRecord.from_frozen(trial)
    # the options the server really got: a bucket-relevant flag may have come through --server-args
    server = {**rec.server, **server_options(rec.argv)}
    trial_env = {k: v for k, v in rec.env.items() if not is_secret_name(k) and k not in DIAGNOSTIC_VARIABLES}
    blocks = rec.observed.get("kv_blocks") or rec.predicted.get("kv_blocks")
    if not release:
        return trial_env, []
    inputs = study_model_inputs(study, release, server) if study is not None else {}
    return complete_env(release, trial_env, server, blocks, inputs)


def export_variables(study: optuna.Study, trial: optuna.trial.FrozenTrial, release: str | None,
                     extra: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The variables every exported file sets (env file, serve.sh), and notes on those left unset."""
    env, notes = export_env(measured_trial(study, trial), release, study)  # a reused trial: the booted one's env
    env = dict(env, **(extra or {}))
    for name in DIAGNOSTIC_VARIABLES:
        env.pop(name, None)
    return env, notes


def write_deploy_files(study: optuna.Study, trial: optuna.trial.FrozenTrial, pick: str, release: str | None,
                       env_path: Path, extra: dict[str, str] | None = None,
                       opts: DeployOptions | None = None) -> tuple[list[Path], str]:
    """The `vllm serve --config` YAML and serve.sh beside the env file (tuner/results/deploy.py), and the
    Kubernetes Deployment and Slurm job with start-up limits (tuner/results/orchestrators.py), or no file and
    why not: a study that does not record how its server was started (older studies), or a command line
    that cannot be written safely. The env file stands either way."""
    from .deploy import write_beside
    from .orchestrators import write_orchestrators

    if (study.user_attrs.get("backend") or {}).get("kind") not in ("sim", "vllm"):
        return [], "the study does not record how its server was started"
    env, _ = export_variables(study, trial, release, extra)
    try:
        written = write_beside(Path(env_path), study, trial, pick, env)
        return written + write_orchestrators(Path(env_path), study, trial, pick, opts or DeployOptions()), ""
    except ValueError as exc:
        return [], f"its command line cannot be written safely: {exc}"


def env_file_text(study: optuna.Study, trial: optuna.trial.FrozenTrial, pick: str,
                  release: str | None, extra: dict[str, str] | None = None,
                  comments: list[str] | None = None) -> str:
    """`extra` adds variables (e.g. the prepared recipe cache); `comments` adds '#' lines."""
    server = TrialRecord.from_frozen(trial).server
    env, notes = export_variables(study, trial, release, extra)
    names = study.metric_names or []
    lines = [
        f"# bucket-tuner export: study {study.study_name}, trial {trial.number}, pick {pick}",
        "# objectives: " + ", ".join(f"{n}={v:.4g}" for n, v in zip(names, trial.values)),
    ]
    if release:
        lines.append(f"# release profile: {release}; every variable it reads is listed")
    lines.append(f"{FLAGS_HEADER} " + " ".join(server_flags(server)))
    lines += [f"# {n}" for n in how_sure(study, trial, pick)]
    lines += [f"# {n}" for n in notes + list(comments or [])]
    for name in sorted(env):
        value = str(env[name])
        if not _SAFE_VALUE.match(value):
            raise ExportError(f"{name}={value!r} cannot be written unquoted to an env file")
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def how_sure(study: optuna.Study, trial: optuna.trial.FrozenTrial, pick: str) -> list[str]:
    """The env file's 'how sure' lines (study/estimates.py): each objective's mean and interval over the
    boots of these settings (or: one measurement), the front trials it cannot be told from, and for the
    balanced pick the evidence against its runner-up."""
    spread = Spread.of_study(study)
    n = spread.n(trial.number)
    if n > 1:
        out = [f"how sure: {n} boots of these settings; each figure's mean and 95% t-interval:"]
        out += [f"  {line}" for line in spread.describe(trial.number, sep="\n").splitlines()]
    else:
        out = ["how sure: one measurement of these settings, no interval (tune --remeasure N boots each "
               "configuration N times: each figure's mean and 95% t-interval)"]
    front = measured_front(study)
    numbers = [t.number for t in front]
    if trial.number not in numbers:
        return out
    for a, b in spread.indistinguishable(numbers):
        if trial.number in (a, b):
            out.append(f"indistinguishable from front trial {b if a == trial.number else a}: their 95% intervals "
                       "overlap on every objective where they differ")
    if pick == "balanced" and len(front) > 1:
        dirs = [d.name.lower() for d in study.directions]
        dist = ideal_distances([t.values for t in front], dirs)
        me = numbers.index(trial.number)
        runner = min((i for i in range(len(front)) if i != me), key=lambda i: dist[i])
        out.append(spread.pick_evidence(trial.number, numbers[runner]))
    return out


def export_best(study: optuna.Study, path: Path, pick: str, release: str | None,
                elsewhere: str | None = None) -> int | None:
    """Write the env file of the pick (whole or not at all: a full disk raises errors.disk.DiskError); None
    when there is no feasible trial (nothing written)."""
    try:
        trial = pick_trial(study, pick, Filters())
    except ExportError:
        return None
    extra, comments = export_bucket_file(study, trial, path)
    comments += deploy_comments(study, trial, DeployOptions())  # start-up limits, cost (tune --cost-per-hour)
    write_text(path, env_file_text(study, trial, pick, release, extra=extra, comments=comments), elsewhere)
    write_deploy_files(study, trial, pick, release, path, extra)  # best.vllm.yaml, best.serve.sh (or none)
    return trial.number


def bucket_file_beside(env_path: Path) -> Path:
    """best.env -> best.buckets.txt (the env file's stem, in its folder)."""
    return env_path.with_name(f"{env_path.stem}.buckets.txt")


def export_bucket_file(study: optuna.Study, trial: optuna.trial.FrozenTrial,
                       env_path: Path | None) -> tuple[dict[str, str], list[str]]:
    """For a trial that booted from a bucket file (a fitted set): copy it beside the env file and point
    VLLM_BUCKETING_FROM_FILE at the copy. Returns (variables, comment lines) for env_file_text."""
    source = TrialRecord.from_frozen(measured_trial(study, trial)).env.get(BUCKET_FILE_VARIABLE)
    if not source:
        return {}, []
    if env_path is None:  # printed, not written: nothing to put a copy beside
        return {BUCKET_FILE_VARIABLE: source}, [f"{BUCKET_FILE_VARIABLE} names the trial's own bucket file; "
                                                "export with -o to get a copy beside the env file"]
    target = bucket_file_beside(Path(env_path)).absolute()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as exc:
        raise ExportError(f"cannot copy the trial's bucket file {source} to {target}: {exc.strerror or exc}") from None
    # An absolute path, because the server opens the file relative to its own working directory, not to
    # this env file; in a container, mount the file at this path (or change the line).
    return {BUCKET_FILE_VARIABLE: str(target)}, [
        f"{BUCKET_FILE_VARIABLE} is absolute: the server opens it from its own working directory, not this "
        f"file's; keep {target.name} at that path (in a container, mount it there)"]
