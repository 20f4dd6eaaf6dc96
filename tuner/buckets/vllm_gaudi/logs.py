"""The text of the log lines the releases print while generating: bucket lists and omitted buckets."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat

from ..base import Bucket


def _bucket_list_line(n: int, phase: str, buckets) -> str:
    return f"Generated {n} {phase} buckets [bs, query, num_blocks]: {list(buckets)}"


# Omitted candidates are kept as runs sharing (bs, query): (bs, query, ctx values, their "c)" texts).
# Pathological configs omit millions of candidates; runs keep expanding and printing them at C speed.
_OmittedRun = tuple[int, int, list[int], list[str]]


def _expand(runs: list[_OmittedRun]) -> list[Bucket]:
    out: list[Bucket] = []
    for b, q, ctxs, _ in runs:
        out.extend(zip(repeat(b), repeat(q), ctxs))
    return out


def _omitted_line(phase: str, groups: dict[str, list[_OmittedRun]]) -> str:
    """The v0.26+ debug line: every omitted (condition, label, bs, query, ctx) tuple, sorted."""
    total = sum(len(r[2]) for runs in groups.values() for r in runs)
    parts = []
    for cond in sorted(groups):
        for b, q, _, texts in groups[cond]:
            head = f"('{cond}', '-> bs, query, ctx: ', {b}, {q}, "
            parts.append(head + ("\n" + head).join(texts))
    return f"Omitted {total} {phase} buckets:\n" + "\n".join(parts)


def _debug_logging(env: Mapping[str, str]) -> bool:
    """The "Omitted" line is logged at DEBUG level only. The vectors were recorded at DEBUG, so an unset
    VLLM_LOGGING_LEVEL keeps it; an explicit INFO (vLLM's own default) or higher drops it."""
    level = env.get("VLLM_LOGGING_LEVEL")
    return level is None or level.upper() in ("DEBUG", "NOTSET")
