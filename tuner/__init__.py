"""bucket-tuner: measured tuning of vLLM-on-Gaudi bucket settings, from Python.

    from tuner import TuneConfig, export, tune, write_report

    run = tune(TuneConfig(space="search_spaces/demo.yaml", n_trials=6, results="results"))
    paths = write_report(run.study, run.study_dir)    # report.html, trials.csv, pareto.csv
    env_file = export(run.study, run.study_dir / "balanced.env", pick="balanced")

The command line (tuner/cli.py) runs the same code: `tune` takes every `bucket-tuner tune` flag by its
Python name (TuneConfig's fields, or `options={"warmup_budget": 600}`), checked and defaulted exactly
as the flag would be; a wrong name or value raises the error the command line would print.
`bench` runs one load test like `bucket-tuner bench` and returns its JSON record.

Packages (each has a map in its __init__): buckets (bucket math per release, calculator), perfmodel
(the performance model), load (the load client), serve (server processes), logparse and explain
(reading logs), space (search spaces), trial (one trial), study (the Optuna study), recipecache,
results (export, compare), report, commands (the CLI), sim (the simulated server).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__version__ = "0.1.0"
__all__ = ["TuneConfig", "__version__", "bench", "export", "tune", "write_report"]


@dataclass
class TuneConfig:
    """A `bucket-tuner tune` run. None leaves the flag's default (or the space's, for `release`)."""

    space: str | Path
    n_trials: int = 20
    study: str | None = None
    results: str | Path = "results"
    backend: str = "sim"  # "sim" (the built-in simulator) or "vllm" (a genuine `vllm serve`)
    release: str | None = None
    model: str | None = None
    device: str | None = None
    model_shape: str | None = None
    warmup_budget: float | None = None  # seconds
    slo: dict[str, float] = field(default_factory=dict)  # e.g. {"p99_ttft_ms": 3000}
    max_concurrency: int | None = None
    num_prompts: int | None = None
    random_input_len: int | None = None
    random_output_len: int | None = None
    no_report: bool = False
    options: dict[str, Any] = field(default_factory=dict)  # any other tune flag by its Python name


def _tune_args(config: TuneConfig):
    from .cli import build_parser
    from .commands import UsageError

    args = build_parser().parse_args(["tune", "--space", str(config.space)])
    known = {k for k in vars(args) if k not in ("command", "func", "debug")}
    given = {f.name: getattr(config, f.name) for f in fields(config) if f.name not in ("space", "options", "slo")}
    given = {k: v for k, v in given.items() if v is not None}
    given.update(config.options)
    if config.slo:
        given["slo"] = [f"{k}={v:g}" for k, v in config.slo.items()]
    for name, value in given.items():
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            raise UsageError(f"tune has no option {name!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
        if name in ("results", "space") or isinstance(getattr(args, name), Path):
            value = Path(value)
        setattr(args, name, value)
    return args


def tune(config: TuneConfig | None = None, /, *, storage=None, runner=None, console=None, **options):
    """Run (or resume) a study; returns its StudyRun (`.study`, `.study_dir`, `.interrupted`).
    `config` or TuneConfig's fields as keywords. `storage`: an Optuna storage object (e.g.
    optuna.storages.InMemoryStorage()) instead of the study's sqlite file; `runner`: the function that
    runs one trial (tuner.study.run.run_study's `runner`); `console`: a rich Console for the progress."""
    from .commands.tune import tune_study

    if config is None:
        names = {f.name for f in fields(TuneConfig)} - {"options"}
        extra = {**options.pop("options", {}), **{k: v for k, v in options.items() if k not in names}}
        config = TuneConfig(**{k: v for k, v in options.items() if k in names}, options=extra)
    elif options:
        raise TypeError("give either a TuneConfig or keyword options, not both")
    return tune_study(_tune_args(config), console=console, storage=storage, runner=runner)


def write_report(study, out_dir: str | Path) -> dict[str, Path]:
    """Write report.html, trials.csv and pareto.csv of an optuna.Study into out_dir; their paths."""
    from .report import write_report as write

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return write(study, out)


def export(study, path: str | Path, pick: str = "balanced", max_warmup_s: float | None = None) -> Path:
    """Write the complete env file of a Pareto trial (`pick`: balanced, throughput, latency, warmup, cost),
    with its start-up limits and (a study tuned with a price) its cost in the header."""
    from .results.export import Filters, env_file_text, export_bucket_file, pick_trial
    from .results.orchestrators import DeployOptions, deploy_comments

    trial = pick_trial(study, pick, Filters(max_warmup_s=max_warmup_s))
    release = (study.user_attrs.get("space") or {}).get("release")
    path = Path(path)
    bucket_env, notes = export_bucket_file(study, trial, path)  # a fitted set's bucket file, beside it
    notes += deploy_comments(study, trial, DeployOptions())
    path.write_text(env_file_text(study, trial, pick, release, extra=bucket_env, comments=notes))
    return path


def bench(base_url: str, model: str | None = None, **options) -> dict[str, Any]:
    """One load test against a running OpenAI-compatible server, as `bucket-tuner bench` runs it (its
    flags by Python name, e.g. num_prompts=50, random_input_len=512); the benchmark's JSON record."""
    import asyncio

    from .cli import build_parser
    from .commands.bench import _bench, _check

    args = build_parser().parse_args(["bench", "--base-url", base_url] + (["--model", model] if model else []))
    for name, value in options.items():
        if not hasattr(args, name):
            near = difflib.get_close_matches(name, sorted(vars(args)), n=1)
            raise TypeError(f"bench has no option {name!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
        setattr(args, name, value)
    _check(args)
    data, _ = asyncio.run(_bench(args))
    return data
