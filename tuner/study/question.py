"""What a study's measurements answer: the question recorded with the study, checked on every re-run.

Two measurements are comparable only under the same workload and load shape, objectives and limits,
release, model, device, dtype and server arguments. The first run of a study records them (the
`question` user attribute); a later run that asks another question is refused with the differences
named and the two ways on (a new study name, or a new study seeded with this one's front through
`--fork-from`), so a Pareto front, a pick and any reuse of a measurement never mix two questions.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

import optuna

from ..serve.redact import redact_argv
from ..trial.run import TrialContext
from ..vocabulary.errors import StudyError
from .options import Constraints, Objectives

QUESTION_ATTR = "question"


def _plain(value: Any) -> Any:
    """JSON's view of a value (tuples as lists, inf as a string), so stored and asked compare alike."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def question_of(ctx: TrialContext, objectives: Objectives, constraints: Constraints) -> dict[str, Any]:
    w, load, b = ctx.workload, ctx.load, ctx.backend
    dm = ctx.device_model
    server = {"kind": b.kind, "model": b.model, "server_args": redact_argv(list(b.extra_args or []))}
    if b.kind == "sim":
        server.update(sim_device=b.sim_device, sim_model=b.sim_model)
    return _plain({
        "workload": {"kind": w.kind, "num_prompts": w.num_prompts, **w.params()},
        "load": {"max_concurrency": load.max_concurrency, "request_rate": load.request_rate,
                 "burstiness": load.burstiness, "goodput_slos": load.goodput_slos},
        "objectives": objectives.names,
        "constraints": asdict(constraints),
        "release": ctx.release,
        "target": {"device": dm.device, "model": dm.model, "dtype": dm.dtype} if dm else None,
        "server": server,
    })


def differences(stored: Any, asked: Any, path: str = "") -> list[str]:
    """'load.max_concurrency: 48 -> 8' for every leaf that differs."""
    if isinstance(stored, dict) and isinstance(asked, dict):
        out = []
        for key in sorted(set(stored) | set(asked), key=str):
            out += differences(stored.get(key), asked.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if stored == asked else [f"{path}: {json.dumps(stored)} -> {json.dumps(asked)}"]


def check_question(study: optuna.Study, asked: dict[str, Any], name: str) -> None:
    """Record the question on a study's first run; refuse a re-run that asks another one."""
    stored = study.user_attrs.get(QUESTION_ATTR)
    measured = any(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    if stored is None or not measured:
        study.set_user_attr(QUESTION_ATTR, asked)
        return
    diff = differences(stored, asked)
    if diff:
        shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
        raise StudyError(
            f"study {name!r} was measured under another question ({shown}): its trials are not comparable "
            f"with this run's. Give this run a new study name (--study NEW), or start one seeded with this "
            f"study's Pareto front: --study NEW --fork-from {name}")
