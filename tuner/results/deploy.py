"""Beside an exported env file, the two other ways people start vLLM today: a `vllm serve --config` YAML
with the trial's flags (written by tuner/serve/vllmconfig.py), and a ready `serve.sh` (the variables, then
`exec` the server's command line).

Both carry what the trial booted with: the model, the tuned flags, the served name and the extra
server arguments the study was given (`--server-args`), on the study's own command (`vllm` as the
user gave it, or the simulator). vLLM's `--config` takes a YAML whose keys are flag names (`key: true`
is `--key`, `key: false` its `--no-` form); the model may be in it (`model:`). The script quotes
every value with shlex, so nothing in it is expanded by the shell but the arguments given to it
(`"$@"`, e.g. `--port 8000`), which go to the server after the trial's own flags and so win.
A secret (an `--api-key`, recorded redacted) is never written: it is left out and said so.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import optuna

from ..serve.vllmconfig import config_text, left_out, without_secrets
from ..vocabulary.errors.disk import write_text


def config_beside(env_path: Path) -> Path:
    """best.env -> best.vllm.yaml"""
    return env_path.with_name(f"{env_path.stem}.vllm.yaml")


def script_beside(env_path: Path) -> Path:
    """best.env -> best.serve.sh"""
    return env_path.with_name(f"{env_path.stem}.serve.sh")


def server_command(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> tuple[list[str], list[str], list[str]]:
    """(program and subcommand, model and flags, left-out secret flags) the trial booted with."""
    from ..recipecache.prepare import backend_from_study  # the study's backend, rebuilt from its record
    from ..vocabulary.record import TrialRecord, measured_trial

    booted = TrialRecord.from_frozen(measured_trial(study, trial))
    backend = backend_from_study(study.user_attrs.get("backend") or {}, booted.argv)
    head, tail = backend.command(booted.server, resolve=False)
    kept, dropped = without_secrets(tail)
    return head, kept, dropped


def script_text(title: str, env: dict[str, str], head: list[str], tail: list[str], dropped: list[str]) -> str:
    lines = ["#!/bin/sh", f"# {title}",
             "# The env file's variables, then the server's command line; arguments given to this script go to "
             "the server", "# after the trial's own flags (e.g. --host 0.0.0.0 --port 8000).", "set -eu"]
    lines += [f"# {x}" for x in left_out(dropped)]
    for name in sorted(env):
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a variable name a shell can export")
        lines.append(f"export {name}={shlex.quote(str(env[name]))}")
    lines.append(f'exec {shlex.join(head + tail)} "$@"')
    return "\n".join(lines) + "\n"


def write_beside(env_path: Path, study: optuna.Study, trial: optuna.trial.FrozenTrial, pick: str,
                 env: dict[str, str]) -> list[Path]:
    """Write <stem>.vllm.yaml and <stem>.serve.sh beside the env file; their paths."""
    head, tail, dropped = server_command(study, trial)
    title = f"bucket-tuner export: study {study.study_name}, trial {trial.number}, pick {pick}"
    conf, script = config_beside(env_path), script_beside(env_path)
    write_text(conf, config_text(title, head, tail, dropped, env_path.name))  # whole or not at all
    write_text(script, script_text(title, env, head, tail, dropped))
    os.chmod(script, 0o755)  # a start script: runnable by whoever deploys it
    return [conf, script]
