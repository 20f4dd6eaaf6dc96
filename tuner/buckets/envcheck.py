"""A variable's value as its release parses it (declared.py): the ValueError that would stop the server, or
how a boolean is read. Why: a bad value must be refused before a boot, with upstream's own error text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from .declared import DECLARED

# The spellings people use for on/off; a flag read differently from these is worth a warning.
_SAID_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_SAID_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})


@dataclass(frozen=True)
class Declaration:
    """One row of declared.py: `name` as `releases` read it."""

    name: str
    releases: tuple[str, ...]
    parser: str
    default: str | None
    source: str  # the upstream file (its repository and commit: declared.SOURCES[release])


@dataclass(frozen=True)
class ValueProblem:
    """A value a release cannot parse (`error` set: the server stops) or reads otherwise than it looks."""

    name: str
    value: str
    releases: tuple[str, ...]
    parser: str
    source: str
    error: str | None = None  # upstream's exception text
    read_as: bool | None = None  # a flag: what the release makes of the text


@cache
def _table() -> dict[str, tuple[Declaration, ...]]:
    out: dict[str, list[Declaration]] = {}
    for row in DECLARED:
        out.setdefault(row[0], []).append(Declaration(*row))
    return {name: tuple(rows) for name, rows in out.items()}


def declarations(name: str) -> tuple[Declaration, ...]:
    return _table().get(name, ())


@cache
def declared_by(release: str) -> frozenset[str]:
    """The names `release` (a canonical profile name) declares or reads."""
    return frozenset(n for n, rows in _table().items() if any(release in d.releases for d in rows))


def all_declared() -> frozenset[str]:
    return frozenset(_table())


def expects(parser: str) -> str:
    """What a parser takes, in words."""
    kind, _, arg = parser.partition(":")
    options = arg.replace(",", ", ")
    return {"int": "an integer", "float": "a number", "bool-int": "an integer (0 or 1)",
            "list": f"comma-separated {'integers' if arg == 'int' else 'values'}",
            "choice": f"one of {options}", "list-choice": f"comma-separated values from {options}",
            }.get(kind, "a flag" if kind.startswith("flag") else "text")


def parse_error(parser: str, text: str) -> str | None:
    """The exception the release raises parsing `text` (type and message, as Python prints it), or None."""
    kind, _, arg = parser.partition(":")
    try:
        if kind == "int":
            int(text)
        elif kind == "float":
            float(text)
        elif kind == "bool-int":
            bool(int(text))
        elif kind == "list" and arg in ("int", "float"):
            [(int if arg == "int" else float)(v) for v in text.split(",")]
        elif kind == "choice" and text not in arg.split(","):
            return f"RuntimeError: {text} is not in allowed options: [{', '.join(arg.split(','))}]!"
        elif kind == "list-choice":
            bad = [v for v in text.split(",") if v not in arg.split(",")]
            if bad:
                return f"RuntimeError: {bad[0]} is not in allowed options: [{', '.join(arg.split(','))}]!"
    except ValueError as exc:
        return f"ValueError: {exc}"
    return None


def flag_value(parser: str, text: str) -> bool | None:
    """What a flag parser makes of `text`; None for other parsers."""
    kind, _, arg = parser.partition(":")
    if not kind.startswith("flag"):
        return None
    negate = arg.startswith("!")
    spellings = arg.lstrip("!").split(",")
    probe = text if kind == "flag-exact" else text.lower()
    return (probe in spellings) != negate


def value_problems(name: str, text: str, releases: Iterable[str]) -> list[ValueProblem]:
    """What `releases` (canonical names) would make of NAME=text: one problem per declaration that
    fails on it or reads a flag against its look ('yes' read as false); none when it parses as meant."""
    wanted = set(releases)
    out = []
    for d in declarations(name):
        mine = tuple(r for r in d.releases if r in wanted)
        if not mine:
            continue
        error = parse_error(d.parser, text)
        if error:
            out.append(ValueProblem(name, text, mine, d.parser, d.source, error=error))
            continue
        read = flag_value(d.parser, text)
        said = True if text.strip().lower() in _SAID_TRUE else False if text.strip().lower() in _SAID_FALSE else None
        if read is not None and read != said:
            out.append(ValueProblem(name, text, mine, d.parser, d.source, read_as=read))
    return out


def true_spellings(parser: str) -> str:
    """What a flag parser takes as true: '1, true', or 'anything but 0'."""
    kind, _, arg = parser.partition(":")
    words = " or ".join(repr(w) for w in arg.lstrip("!").split(","))
    case = "" if kind == "flag-exact" else " (any case)"
    return f"anything but {words}" if arg.startswith("!") else f"{words}{case}"
