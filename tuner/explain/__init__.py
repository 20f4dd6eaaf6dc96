"""`bucket-tuner explain`: what a server log says about the settings that produced it.

    reading.py   the log as users paste it -> timed events, one rank's view, unread lines counted
    analysis.py  release, buckets per phase, memory split, warm-up timeline, problems
    advice.py    what other settings would build and cost, predicted from the log's own pace
    render.py    the plain-words text (80 columns) and the --json document
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .advice import Advice, advise
from .analysis import (
    MemoryView,
    PhaseBuckets,
    Problem,
    ReleaseGuess,
    Timeline,
    bucket_phases,
    detect_release,
    memory_view,
    problems,
    timeline,
)
from .reading import LogReading, read_log


@dataclass
class Explanation:
    source: str
    reading: LogReading
    release: ReleaseGuess
    phases: list[PhaseBuckets]
    memory: MemoryView
    timeline: Timeline
    problems: list[Problem]
    advice: Advice


def explain(lines: Iterable[str], *, source: str = "-", advise_opts: dict | None = None) -> Explanation:
    reading = read_log(lines)
    release = detect_release(reading)
    phases = bucket_phases(reading)
    memory = memory_view(reading)
    tl = timeline(reading)
    omitted = reading.summary.omitted.get("prompt")
    adv = advise(release, phases, tl, memory.kv_blocks, omitted.token_budget if omitted else None,
                 log_path=None if source == "-" else source, **(advise_opts or {}))
    return Explanation(source, reading, release, phases, memory, tl, problems(reading), adv)


__all__ = ["Explanation", "explain", "read_log"]
