"""Where one start of the server ends and the next begins in a pasted log.

Logs reach us as excerpts: a doc pastes the bucket lines of one start next to the warm-up of another
(the fork 1.22 README: 19:15, then 19:27, then 19:15 again), a user pastes a second start under the
first (the fork 1.17 README: the 08-02 start, then the 08-01 warm-up without graphs), a server
restarts. Figures of two starts must never be added together, so the events are cut into runs:

- time goes backwards (more than a few seconds: ranks print the same second out of order);
- a bucket config or list is printed again for a phase that already has one in the run;
- bucket, engine or version lines come after warm-up lines (a new start);
- a warm-up step count goes back (step 1 again after step 7) or warm-up continues after it finished.

A run that warmed up without printing its buckets (a doc excerpt that skips them) borrows the bucket
lines of the run that ended, in time, right before its warm-up began, never of a later one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..logparse import BucketConfig, EngineInfo, GeneratedBuckets, WarmupFinished, WarmupStep

BACKWARDS_TOLERANCE_S = 5.0   # ranks and threads print the same second out of order


@dataclass(frozen=True)
class Run:
    index: int
    first: int              # index of its first event in the reading's event list
    end: int                # one past its last event
    first_line: int
    last_line: int
    start_s: float | None   # seconds since the log's first stamp, of its first / last timed event
    end_s: float | None
    why: str                # what started it ("start of the log", "time goes back", ...)
    steps: int = 0          # warm-up step lines
    finished: bool = False  # "Warmup finished" is in it
    bucket_lines: bool = False
    lender: int | None = None   # the run whose bucket lines its warm-up ran with

    @property
    def warmed_up(self) -> bool:
        return self.steps > 0 or self.finished


def split_runs(events: Sequence) -> list[Run]:
    """Cut a reading's events (objects with .line_no, .time_s, .event, in line order) into runs."""
    cuts: list[tuple[int, str]] = [(0, "start of the log")]
    state = _RunState()
    for i, timed in enumerate(events):
        why = state.breaks(timed)
        if why and i > cuts[-1][0]:
            cuts.append((i, why))
            state = _RunState()
        state.add(timed)
    runs = []
    for k, (first, why) in enumerate(cuts):
        end = cuts[k + 1][0] if k + 1 < len(cuts) else len(events)
        runs.append(_summarise(k, events, first, end, why))
    return _lend(runs)


class _RunState:
    def __init__(self):
        self.last_time: float | None = None
        self.configs: set[str] = set()
        self.lists: set[str] = set()
        self.step_index: dict[str, int] = {}
        self.warmup = False
        self.finished = False

    def breaks(self, timed) -> str | None:
        e = timed.event
        if timed.time_s is not None and self.last_time is not None \
                and timed.time_s < self.last_time - BACKWARDS_TOLERANCE_S:
            return "time goes back"
        if isinstance(e, BucketConfig) and e.phase in self.configs:
            return f"a second {e.phase} bucket config"
        if isinstance(e, GeneratedBuckets) and e.phase in self.lists:
            return f"a second {e.phase} bucket list"
        if isinstance(e, (BucketConfig, GeneratedBuckets, EngineInfo)) and self.warmup:
            return "start-up lines after warm-up"
        if isinstance(e, WarmupStep):
            if self.finished:
                return "warm-up again after it finished"
            if e.index < self.step_index.get(e.key, 0):
                return f"{e.key} warm-up starts over"
        return None

    def add(self, timed) -> None:
        e = timed.event
        if timed.time_s is not None:
            self.last_time = timed.time_s if self.last_time is None else max(self.last_time, timed.time_s)
        if isinstance(e, BucketConfig):
            self.configs.add(e.phase)
        elif isinstance(e, GeneratedBuckets):
            self.lists.add(e.phase)
        elif isinstance(e, WarmupStep):
            self.warmup = True
            self.step_index[e.key] = max(self.step_index.get(e.key, 0), e.index)
        elif isinstance(e, WarmupFinished):
            self.warmup = self.finished = True


def _summarise(k: int, events: Sequence, first: int, end: int, why: str) -> Run:
    part = events[first:end]
    times = [t.time_s for t in part if t.time_s is not None]
    return Run(k, first, end, part[0].line_no if part else 0, part[-1].line_no if part else 0,
               min(times) if times else None, max(times) if times else None, why,
               steps=sum(isinstance(t.event, WarmupStep) for t in part),
               finished=any(isinstance(t.event, WarmupFinished) for t in part),
               bucket_lines=any(isinstance(t.event, (BucketConfig, GeneratedBuckets)) for t in part))


def _lend(runs: list[Run]) -> list[Run]:
    """A warm-up without bucket lines runs with those of the bucket-only run that ended last before it
    began (in time; both must be timed)."""
    from dataclasses import replace

    out = list(runs)
    for r in runs:
        if not r.warmed_up or r.bucket_lines or r.start_s is None:
            continue
        lenders = [p for p in runs if p.index != r.index and p.bucket_lines and not p.warmed_up
                   and p.end_s is not None and p.end_s <= r.start_s]
        if lenders:
            out[r.index] = replace(r, lender=max(lenders, key=lambda p: (p.end_s, p.index)).index)
    return out


def primary_run(runs: list[Run]) -> Run | None:
    """The run a reading describes: the last that finished warm-up, else the one with the most warm-up
    steps (the later on a tie), else the last with bucket lines, else the last."""
    if not runs:
        return None
    finished = [r for r in runs if r.finished]
    if finished:
        return finished[-1]
    stepped = [r for r in runs if r.steps]
    if stepped:
        return max(stepped, key=lambda r: (r.steps, r.index))
    with_buckets = [r for r in runs if r.bucket_lines]
    return (with_buckets or runs)[-1]
