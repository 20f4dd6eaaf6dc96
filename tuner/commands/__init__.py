"""The subcommands of `bucket-tuner`, one module each; `tuner.cli` assembles them."""

from __future__ import annotations


class UsageError(Exception):
    """A bad command-line value; printed as `error: ...` with exit status 2."""


def parse_env_pairs(pairs: list[str] | None) -> dict[str, str]:
    env = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def parse_key_values(pairs: list[str] | None, flag: str, sep: str = "=") -> dict[str, float]:
    """`NAME=NUMBER` (or `NAME:NUMBER`) pairs, e.g. --slo p99_ttft_ms=500, --goodput ttft:200."""
    out: dict[str, float] = {}
    for pair in pairs or []:
        for item in pair.split():
            name, found, value = item.partition(sep)
            try:
                if not found or not name:
                    raise ValueError
                out[name] = float(value)
            except ValueError:
                raise UsageError(f"{flag} expects NAME{sep}NUMBER, got {item!r}") from None
    return out
