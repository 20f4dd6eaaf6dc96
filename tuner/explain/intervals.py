"""What the timestamps of a run's warm-up really measure.

A warm-up line is printed as its step begins, so a step lasts until the next line, but only when that
line is the step's true successor: the next step of the same phase, the first step of the next phase
after the last of this one, the phase's graph summary, "Warmup finished". Anything else means lines
are missing between them (a `...` of a doc, a cut paste), and the gap is a coarser interval over the
steps it really covers: a phase total when it stays inside one phase, a stretch over two phases when
it does not (then neither phase has a figure of its own). Nothing is measured across runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..logparse import (
    EngineInitialized,
    ErrorLine,
    GraphBudget,
    GraphCaptured,
    Milestone,
    OutOfMemory,
    ServerListening,
    SkipWarmup,
    Traceback,
    WarmupFinished,
    WarmupStep,
)

# Lines that end a warm-up step: the step's line is followed by one of these once the step is over.
_BOUNDARIES = (WarmupStep, GraphBudget, GraphCaptured, WarmupFinished, SkipWarmup, Milestone, EngineInitialized,
               ServerListening, Traceback, ErrorLine, OutOfMemory)
_PROBLEMS = (Traceback, ErrorLine, OutOfMemory)


@dataclass(frozen=True)
class Interval:
    """From one warm-up line to the next boundary line of the same run."""

    run: int
    start_line: int
    end_line: int
    seconds: float
    steps: tuple[tuple[str, int], ...]   # (phase key, steps covered), in warm-up order
    exact: bool                          # one step, timed to its true successor
    to_end: bool = False                 # the gap reaches past the phases it names (lines cut before the end)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.steps)


@dataclass(frozen=True)
class PhaseTime:
    """A figure of the warm-up timeline. `steps` of `total` are covered; `gap`: the figure spans lines
    missing from the log (so it is a phase total, not a sum of steps)."""

    name: str
    seconds: float | None
    steps: int | None = None
    total: int | None = None
    gap: bool = False
    keys: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.steps is not None and self.total is not None and self.steps >= self.total

    def describe(self) -> str:
        if self.steps is None:
            return ""
        count = f"{self.steps} of {self.total} steps" if self.total and self.steps < self.total \
            else f"{self.steps} steps"
        return count + (", across elided lines" if self.gap else "")


@dataclass
class RunTiming:
    run: int
    intervals: list[Interval] = field(default_factory=list)
    step_seconds: dict[int, float] = field(default_factory=dict)   # event position -> exact seconds
    phases: list[PhaseTime] = field(default_factory=list)


def time_run(events: Sequence, first: int, end: int, run: int, captured: dict[str, int],
             phase_name) -> RunTiming:
    """Intervals and phase figures of events[first:end] (one run). `captured`: graphs per phase from
    the run's summary lines; `phase_name(key)` names a phase key for the timeline."""
    out = RunTiming(run)
    part = list(range(first, end))
    steps_of: dict[str, list[int]] = {}
    for i in part:
        e = events[i].event
        if isinstance(e, WarmupStep):
            steps_of.setdefault(e.key, []).append(i)
    for pos, i in enumerate(part):
        s = events[i]
        if not isinstance(s.event, WarmupStep):
            continue
        nxt = next((events[j] for j in part[pos + 1:] if isinstance(events[j].event, _BOUNDARIES)), None)
        if nxt is None or nxt.time_s is None or s.time_s is None or nxt.time_s < s.time_s:
            continue
        if isinstance(nxt.event, _PROBLEMS):
            continue          # the step failed: its time is no step time
        seconds = nxt.time_s - s.time_s
        covered, exact, to_end = _covers(s.event, nxt.event, events, steps_of, i, captured)
        out.intervals.append(Interval(run, s.line_no, nxt.line_no, seconds, covered, exact, to_end))
        if exact:
            out.step_seconds[i] = seconds
    out.phases = _phase_figures(out.intervals, steps_of, events, captured, phase_name)
    return out


def _covers(step: WarmupStep, nxt, events, steps_of, i, captured):
    """(steps covered, exact, reaches past) for the gap from `step` to the boundary `nxt`."""
    key, idx, total = step.key, step.index, step.total
    seen_later = any(events[j].event.index == idx + 1 for j in steps_of[key] if j > i)
    if isinstance(nxt, WarmupStep):
        if nxt.key == key:
            return ((key, max(1, nxt.index - idx)),), nxt.index == idx + 1, False
        resumed = nxt.index == 1 or any(events[j].event.index == nxt.index - 1 for j in steps_of[nxt.key] if j < i)
        if (idx == total or seen_later) and resumed:
            return ((key, 1),), True, False
        # lines missing: the rest of this phase and the start of the next one
        rest = (key, total - idx + 1)
        before = [events[j].event.index for j in steps_of[nxt.key] if j < i]
        head = nxt.index - 1 - (max(before) if before else 0)
        return ((rest,) + (((nxt.key, head),) if head > 0 else ())), False, False
    if idx == total:
        return ((key, 1),), True, False
    if isinstance(nxt, GraphCaptured) and step.graph and key.endswith(nxt.phase) and nxt.count == idx:
        return ((key, 1),), True, False      # the capture loop stopped here (graph memory used up)
    if seen_later:
        return ((key, 1),), True, False
    return ((key, total - idx + 1),), False, True


def _phase_figures(intervals: list[Interval], steps_of, events, captured, phase_name) -> list[PhaseTime]:
    out: list[PhaseTime] = []
    for key, idxs in steps_of.items():
        total = events[idxs[0]].event.total
        if events[idxs[0]].event.graph and captured.get(key.split("/")[-1]) is not None:
            total = min(total, captured[key.split("/")[-1]])
        own = [iv for iv in intervals if iv.keys == (key,) and not iv.to_end]
        crossing = [iv for iv in intervals if key in iv.keys and (iv.keys != (key,) or iv.to_end)]
        if crossing or not own:
            continue
        steps = sum(n for iv in own for _, n in iv.steps)
        out.append(PhaseTime(phase_name(key), sum(iv.seconds for iv in own), min(steps, total), total,
                             gap=any(not iv.exact for iv in own), keys=(key,)))
    # stretches over several phases: one figure for the phases they join, never split between them
    joined: dict[tuple[str, ...], list[Interval]] = {}
    for iv in intervals:
        if len(iv.keys) > 1 or iv.to_end:
            joined.setdefault(_phase_group(iv, intervals), []).append(iv)
    for keys, ivs in joined.items():
        members = [iv for iv in intervals if set(iv.keys) <= set(keys)]
        steps = sum(n for iv in members for _, n in iv.steps)
        total = sum(events[steps_of[k][0]].event.total for k in keys)
        name = " + ".join(phase_name(k).removesuffix(" warmup") for k in keys) + " warmup"
        if any(iv.to_end for iv in ivs):
            name += " and after"       # the gap runs past the last phase it names
        out.append(PhaseTime(name, sum(iv.seconds for iv in members), min(steps, total), total, gap=True,
                             keys=keys))
    first_line = {}
    for iv in intervals:
        for k in iv.keys:
            first_line.setdefault(k, iv.start_line)
    return sorted(out, key=lambda p: min(first_line.get(k, 0) for k in p.keys))   # in warm-up order


def _phase_group(iv: Interval, intervals: list[Interval]) -> tuple[str, ...]:
    """The phases a crossing stretch ties together (stretches that share a phase are one group)."""
    keys = set(iv.keys)
    grew = True
    while grew:
        grew = False
        for other in intervals:
            if (len(other.keys) > 1 or other.to_end) and keys & set(other.keys) and not set(other.keys) <= keys:
                keys |= set(other.keys)
                grew = True
    return tuple(k for k in _ordered(intervals) if k in keys)


def _ordered(intervals: list[Interval]) -> list[str]:
    seen: list[str] = []
    for iv in intervals:
        for k in iv.keys:
            if k not in seen:
                seen.append(k)
    return seen
