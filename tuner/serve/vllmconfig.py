"""A server's command line as a `vllm serve --config` YAML: its keys are flag names (`key: true` is
`--key`, `key: false` its `--no-` form), the model may be in it (`model:`). Secret flags (an `--api-key`,
recorded redacted) are left out, and the file says so. Export writes one beside an env file
(tuner/results/deploy.py); a study keeps one per trial for optuna-dashboard (tuner/study/dashboard.py).
"""

from __future__ import annotations

import shlex

import yaml

from .redact import REDACTED, is_secret_name


def without_secrets(tokens: list[str]) -> tuple[list[str], list[str]]:
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


def left_out(dropped: list[str]) -> list[str]:
    return [f"{', '.join(dropped)} left out: a secret is never exported; give it when starting the server "
            "(vllm serve reads VLLM_API_KEY)"] if dropped else []


def config_text(title: str, head: list[str], tail: list[str], dropped: list[str], env_name: str) -> str:
    lines = [f"# {title}", f"# start: {shlex.join(head)} --config THIS_FILE, with the variables of {env_name} "
             "set (flags given on the command line win over this file)"]
    lines += [f"# {x}" for x in left_out(dropped)]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config_mapping(tail), sort_keys=False, default_flow_style=False)
