"""`vllm serve` arguments read the way vLLM's own parser reads them.

A user's `--server-args` is a production command line, typed as vLLM takes it, and vLLM takes more than the
flags' full names (vllm/utils/argparse_utils.py FlexibleArgumentParser, on Python's argparse):

* `--max_num_seqs` is `--max-num-seqs` (underscores before the first dot are dashes);
* `-tp 2`, `-q fp8`, `-sc '{..}'`: the short aliases (vllm_serve_flags.json lists every option string);
* `--max-num-seq 64`, `--tensor-parallel 2`: argparse takes a long flag's unambiguous prefix, and refuses an
  ambiguous one (`--max`) with "ambiguous option";
* `--speculative-config.method mtp --speculative-config.num_speculative_tokens 2`: dotted keys build one JSON
  object (values read as JSON, else as vLLM's human-readable integers, else as text; `key+` appends
  comma-separated items), given after the other flags as `--speculative-config '{..}'`;
* `-O3`, `-O=3`, `-O 3`: `--optimization-level 3`.

`canonical_argv` rewrites such a command line with each recognised flag in one spelling (its long name; a
`--no-` switch as such) and its values, so that whoever reads it (the prediction's server options, the
model's --hf-overrides, export) reads what the server will. Flags vLLM does not know are left as they are.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from .numbers import token_count

TABLE = Path(__file__).with_name("vllm_serve_flags.json")  # tools/vllm_serve_flags.py writes it


class ServeArgsError(ValueError):
    """A command line vLLM's parser refuses: an ambiguous prefix, a flag without its value."""


@functools.lru_cache(maxsize=1)
def table() -> dict[str, dict]:
    """Every option string `vllm serve` takes (vLLM 0.32's, and the vllm-fork releases' that 0.32 dropped)."""
    data = json.loads(TABLE.read_text())
    return {**data.get("older", {}), **data["flags"]}


@functools.lru_cache(maxsize=1)
def _spellings() -> dict[str, str]:
    """option string -> the one spelling of its action (the same dest and meaning): the name argparse derived the
    dest from (--gpu-memory-utilization, not its alias --device-memory-utilization), else the longest `--` name."""
    groups: dict[tuple, list[str]] = {}
    for option, entry in table().items():
        groups.setdefault(_action_key(entry), []).append(option)
    out = {}
    for (dest, *_), options in groups.items():
        longs = [o for o in options if o.startswith("--")] or options
        primary = "--" + dest.replace("_", "-")
        best = primary if primary in options else max(longs, key=len)
        out.update({o: best for o in options})
    return out


def _action_key(entry: dict) -> tuple:
    return (entry["dest"], "switch", entry["switch"]) if "switch" in entry else (entry["dest"], "value")


def resolve(option: str) -> str | None:
    """The option string `option` stands for: itself, or the one long flag it is a prefix of (argparse's
    abbreviation); None when vLLM knows no such flag. ServeArgsError when several flags start with it."""
    flags = table()
    if option in flags:
        return option
    if not option.startswith("--") or len(option) < 3:
        return None
    spellings = _spellings()
    matches = sorted({spellings[o] for o in flags if o.startswith(option)})
    if len(matches) > 1:
        raise ServeArgsError(f"ambiguous option: {option} could match {', '.join(matches)}")
    return matches[0] if matches else None


def _dashed(word: str) -> str:
    """vLLM's spelling of a flag: underscores between `--` and the first dot are dashes."""
    return re.sub(r"(?<=^--)[^.=]*", lambda m: m.group(0).replace("_", "-"), word, count=1)


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        try:
            return token_count(text)   # vLLM's human_readable_int: 1k, 80g
        except ValueError:
            return text


def _merge(into: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        elif isinstance(v, list) and isinstance(into.get(k), list):
            into[k] += v
        else:
            into[k] = v


def preprocess(argv: list[str]) -> list[str]:
    """What FlexibleArgumentParser.parse_args hands argparse: dashes, `-O`, dotted keys as JSON objects."""
    words: list[str] = []
    for i, word in enumerate(argv):
        if word.startswith("--"):
            words.append(_dashed(word))
        elif word.startswith("-O") and word != "-O":
            words += ["--optimization-level", word[3:] if word[2:3] == "=" else word[2:]]
        elif word == "-O" and i + 1 < len(argv) and argv[i + 1] in {"0", "1", "2", "3"}:
            words.append("--optimization-level")
        else:
            words.append(word)
    dicts: dict[str, dict] = {}
    out: list[str] = []
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if not (word.startswith("-") and "." in word.split("=", 1)[0]):
            out.append(word)
            continue
        name, eq, text = word.partition("=")
        if not eq:
            if i + 1 >= len(words):
                raise ServeArgsError(f"{name}: expected one argument")
            text, skip = words[i + 1], True
        if name.endswith("+"):
            name, value = name[:-1], text.split(",")
        else:
            value = _value(text)
        key, *keys = name.split(".")
        for k in reversed(keys):
            value = {k: value}
        _merge(dicts.setdefault(key, {}), value)
    for key, value in dicts.items():
        out += [key, json.dumps(value)]
    return out


def canonical_argv(argv: list[str]) -> list[str]:
    """`argv` with every flag vLLM knows in one spelling, each followed by the values it took."""
    words = preprocess(list(argv))
    out: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or _is_number(word):
            out.append(word)
            continue
        name, eq, text = word.partition("=")
        option = resolve(name)
        if option is None:
            out.append(word)
            continue
        entry, spelling = table()[option], _spellings()[option]
        if "switch" in entry:
            out.append(spelling)
            continue
        nargs = entry.get("nargs")
        values: list[str] = [text] if eq else []
        if not eq:
            while i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
                values.append(words[i])
                i += 1
                if nargs is None or nargs == "?":
                    break
        if nargs is None and len(values) != 1:
            raise ServeArgsError(f"argument {name}: expected one argument")
        if nargs == "+" and not values:
            raise ServeArgsError(f"argument {name}: expected at least one argument")
        out += [spelling, *values]
    return out


def without_refused(argv: list[str]) -> list[str]:
    """`argv` without the flags vLLM's parser refuses (an ambiguous prefix, a missing value) and their values:
    what can still be read of a line the server would refuse."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word, i = argv[i], i + 1
        try:
            if word.startswith("--"):
                resolve(word.split("=", 1)[0])
                canonical_argv([word, *argv[i:i + 1]])
        except ServeArgsError:
            if "=" not in word and i < len(argv) and not argv[i].startswith("-"):
                i += 1  # its value goes with it
            continue
        out.append(word)
    return out


def _is_number(word: str) -> bool:
    """argparse reads `-1` as a value, not a flag."""
    return bool(re.fullmatch(r"-\d+(\.\d*)?|-\.\d+", word))
