"""`--config FILE.yaml`, as `vllm serve` reads it: the file's keys are flag names, its values theirs.

vLLM 0.32.0 (FlexibleArgumentParser.load_config_file): `key: true` is `--key`, `key: false` is
`--no-key` when the parser has that form (else nothing), a list is `--key a b`, a mapping is `--key
'<json>'`, anything else `--key str(value)`. The file's flags go right after the model, so flags on
the command line win; the model may come from the file (`model: NAME`) when the command line has none.
"""

from __future__ import annotations

import json
from pathlib import Path


class ConfigFileError(ValueError):
    """The file cannot be read or does not hold a mapping of flags; the message names it."""


def config_flags(path: str, known: set[str]) -> list[str]:
    """The file's flags; `known` holds the parser's option strings (for the `--no-` forms)."""
    import yaml

    if Path(path).suffix not in (".yaml", ".yml"):
        raise ConfigFileError(f"--config {path}: a config file must be .yaml or .yml")
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigFileError(f"--config {path}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"--config {path}: expected a mapping of flag names to values")
    out: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            if value:
                out.append(flag)
            elif f"--no-{key}" in known:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [flag, *map(str, value)]
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def expand_config(argv: list[str], known: set[str]) -> list[str]:
    """argv with `--config FILE` replaced by the file's flags (after the model, before the rest)."""
    if "--config" not in argv:
        return argv
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ConfigFileError("--config needs a file name")
    flags = config_flags(argv[i + 1], known)
    rest = argv[:i] + argv[i + 2:]
    if rest and not rest[0].startswith("-"):  # the model given on the command line wins
        if "--model" in flags:
            j = flags.index("--model")
            flags = flags[:j] + flags[j + 2:]
        return rest[:1] + flags + rest[1:]
    if "--model" not in flags:
        raise ConfigFileError("no model: give it on the command line or as `model:` in the config file")
    j = flags.index("--model")
    return [flags[j + 1], *flags[:j], *flags[j + 2:], *rest]
