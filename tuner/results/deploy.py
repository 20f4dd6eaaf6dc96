"""Beside an exported env file, the two other ways people start vLLM today: a `vllm serve --config` YAML
with the trial's flags, and a ready `serve.sh` (the variables, then `exec` the server's command line).

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
import yaml

from ..serve.redact import REDACTED, is_secret_name
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
    kept, dropped = _without_secrets(tail)
    return head, kept, dropped


def _without_secrets(tokens: list[str]) -> tuple[list[str], list[str]]:
    kept, dropped, skip = [], [], False
    for i, tok in enumerate(tokens):
        if skip:
            skip = False
            continue
        name = tok.partition("=")[0]
        if tok.startswith("-") and is_secret_name(name):
            dropped.append(name)
            skip = "=" not in tok and i + 1 < len(tokens) and not tokens[i + 1].startswith("--")
            continue
        if REDACTED in tok:
            raise ValueError(f"a redacted value ({tok}) in the recorded command line")
        kept.append(tok)
    return kept, dropped


def _scalar(text: str):
    """A flag value as YAML shows it best, never changing what str() gives back to the server."""
    for kind in (int, float):
        try:
            if str(kind(text)) == text:
                return kind(text)
        except ValueError:
            pass
    return text


def config_mapping(tail: list[str]) -> dict:
    """The model and flags as vLLM's --config keys (the inverse of its load_config_file)."""
    out: dict = {"model": tail[0]}
    i = 1
    while i < len(tail):
        tok = tail[i]
        if not tok.startswith("--"):
            raise ValueError(f"cannot write {tok!r} to a config file: it follows no flag")
        key, eq, inline = tok[2:].partition("=")
        values = [inline] if eq else []
        while not eq and i + 1 < len(tail) and not tail[i + 1].startswith("--"):
            values.append(tail[i + 1])
            i += 1
        if not values:
            if key.startswith("no-"):
                out[key[3:]] = False
            else:
                out[key] = True
        else:
            out[key] = _scalar(values[0]) if len(values) == 1 else [_scalar(v) for v in values]
        i += 1
    return out


def _left_out(dropped: list[str]) -> list[str]:
    return [f"{', '.join(dropped)} left out: a secret is never exported; give it when starting the server "
            "(vllm serve reads VLLM_API_KEY)"] if dropped else []


def config_text(title: str, head: list[str], tail: list[str], dropped: list[str], env_name: str) -> str:
    lines = [f"# {title}", f"# start: {shlex.join(head)} --config THIS_FILE, with the variables of {env_name} "
             "set (flags given on the command line win over this file)"]
    lines += [f"# {x}" for x in _left_out(dropped)]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config_mapping(tail), sort_keys=False, default_flow_style=False)


def script_text(title: str, env: dict[str, str], head: list[str], tail: list[str], dropped: list[str]) -> str:
    lines = ["#!/bin/sh", f"# {title}",
             "# The env file's variables, then the server's command line; arguments given to this script go to "
             "the server", "# after the trial's own flags (e.g. --host 0.0.0.0 --port 8000).", "set -eu"]
    lines += [f"# {x}" for x in _left_out(dropped)]
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
