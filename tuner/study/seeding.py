"""What a new study tries first, enqueued before the sampler proposes anything.

In order: what the user runs today (`tune --baseline`, booted with exactly its settings), the plan's picks
(`tune --from-plan`), another study's Pareto set (`--seed-from`), the release's defaults and the static
calculator's recommendation, then the calibrated performance model's seeds (screen.model_seeds). Seeds
are values of the space's parameters, snapped onto its grid. A baseline trial runs with the baseline's
exact settings (trial_settings), every other trial with the sampler's.
"""

from __future__ import annotations

from typing import Any

import optuna

from ..space.schema import SearchSpace, TrialSettings
from ..trial.run import TrialContext
from ..vocabulary.errors import StudyError
from .nodes import BASELINE_ATTR
from .options import StudyOptions
from .screen import model_seeds
from .storage import open_storage_readonly, redact_url

BASELINE_SEED = "baseline"  # the seed label of the baseline's trial (report/facts.py reads it)
PLAN_SEED = "plan pick"  # "plan pick 1", "plan pick 2", ...


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
    from ..buckets.serverdefaults import MAX_NUM_SEQS

    seeds = []
    defaults: dict[str, Any] = {"max_num_seqs": MAX_NUM_SEQS, "gpu_memory_utilization": 0.9, "enforce_eager": False}
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


def settings_text(values: dict[str, Any]) -> str:
    """'max_num_seqs=32 VLLM_GRAPH_RESERVED_MEM=0.1': a seed as a person writes its settings."""
    return " ".join(f"{k}={f'{v:.6g}' if isinstance(v, float) else v}" for k, v in values.items()) or "(no settings)"


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
        said.append(f"{PLAN_SEED} {rank}: {settings_text(params)}")
    if opts.plan is not None:
        study.set_user_attr("plan", opts.plan)
    if opts.seed_from:
        other_url = opts.storage or f"sqlite:///{(opts.results_root / opts.seed_from / 'study.db').as_posix()}"
        for params in pareto_params(other_url, opts.seed_from):
            values = snap_to_space(space, params)
            if values:
                study.enqueue_trial(values, user_attrs={"seed": f"pareto of {opts.seed_from}"})
                said.append(f"pareto of {opts.seed_from}: {settings_text(values)}")
    if opts.enqueue_defaults:
        for label, values in default_seeds(space, release, workload_desc, concurrency):
            study.enqueue_trial(values, user_attrs={"seed": label}, skip_if_exists=True)
            said.append(f"{label}: {settings_text(values)}")
    return said


def enqueue_model_seeds(study: optuna.Study, opts: StudyOptions, space: SearchSpace, ctx: TrialContext,
                        fresh: bool) -> list[str]:
    """On a new study with default seeds: the performance model's seeds (screen.model_seeds)."""
    if not (fresh and opts.enqueue_defaults and opts.screening) or opts.sampler == "grid":
        return []  # the grid is the user's own enumeration (and its sampler ignores enqueued points)
    said = []
    for values in model_seeds(space, ctx, opts.n_trials, opts.seed):
        study.enqueue_trial(values, user_attrs={"seed": "performance model"}, skip_if_exists=True)
        said.append(f"performance model: {settings_text(values)}")
    return said


def trial_settings(space: SearchSpace, trial) -> TrialSettings:
    """The settings a trial runs with: the sampler's (space.suggest), or the baseline's exactly."""
    baseline = trial.user_attrs.get(BASELINE_ATTR)
    if baseline is None:
        return space.suggest(trial)
    params = space.suggest_fixed(trial, baseline.get("params") or {})
    return TrialSettings(server=dict(baseline["server"]), env=dict(baseline["env"]), params=params)
