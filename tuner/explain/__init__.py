"""`bucket-tuner explain`: what a server log says about the settings that produced it.

    reading.py   the log as users paste it -> timed events, one rank's view, unread lines counted
    phasetimes.py   per-phase figures of a run, summed from the intervals logparse.steptimes timed
                 (runs, gaps, elisions and drops are read there, once, for explain and calibration alike)
    serverfacts.py  tensor-parallel size, model, dtype, device as the log states them
    analysis.py  release, buckets per phase, memory split, problems
    notices.py   what the server did other than asked, or of its setup (dtype fallback, hybrid KV cut, ...)
    releasesigns.py  the release signs beside the bucket lines' shape: versions, token-budget lines, formats
    timeline.py  the warm-up timeline of each start: phase figures, slowest steps, skipped or not
    advice.py    what other settings would build and cost, predicted from the log's own pace
    render.py    the plain-words text (80 columns) and the --json document
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .advice import Advice, advise
from .analysis import (
    MemoryView,
    PhaseBuckets,
    Problem,
    ReleaseGuess,
    bucket_phases,
    detect_release,
    memory_view,
    problems,
    reserve_hint,
)
from .notices import Notice, notices
from .reading import LogReading, read_log
from .serverfacts import ServerFacts, server_facts
from .timeline import Timeline, timeline


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
    server: ServerFacts
    # phases whose bucket count the log states without listing the buckets (the steps' [i/N], "captured:N
    # (100.0%)" without its list): shown and counted, but nothing to rebuild settings from, so not in `phases`
    counted: list[PhaseBuckets] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)

    @property
    def bucket_counts(self) -> dict[str, int]:
        """Buckets per phase as the log states them, from bucket lines or else from its other lines."""
        return {p.phase: p.count for p in self.phases + self.counted if p.count}


def explain(lines: Iterable[str], *, source: str = "-", advise_opts: dict | None = None,
            release: str | None = None) -> Explanation:
    """`release`: read the log as that release profile (--release), whatever its own signs say."""
    reading = read_log(lines)
    release = detect_release(reading, release)
    every = bucket_phases(reading)
    phases = [p for p in every if p.count_from in ("bucket list", "config")
              or (p.count_from == "graph summary" and p.listed == p.count)]   # every bucket listed
    facts = server_facts(reading)
    memory = memory_view(reading, facts.block_size)
    tl = timeline(reading)
    omitted = reading.summary.omitted.get("prompt")
    opts = dict(advise_opts or {})
    for key, logged in (("max_model_len", facts.max_model_len), ("max_num_seqs", facts.max_num_seqs),
                        ("max_num_batched_tokens", facts.max_num_batched_tokens)):
        if opts.get(key) is None and logged is not None:
            opts[key] = logged     # the engine's own settings line beats a guess from the buckets
    adv = advise(release, phases, tl, memory.kv_blocks, omitted.token_budget if omitted else None,
                 log_path=None if source == "-" else source, omitted=omitted.count if omitted else 0, **opts)
    partial = any(c.percent is not None and c.percent < 100 for c in reading.summary.graph_captured.values())
    adv.graph_reserve = reserve_hint(memory, tl.complete and not tl.skipped, not partial)
    return Explanation(source, reading, release, phases, memory, tl, problems(reading), adv, facts,
                       [p for p in every if p not in phases], notices(reading))


__all__ = ["Explanation", "explain", "read_log"]
