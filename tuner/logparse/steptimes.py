"""Warm-up step timings a log really shows: only contiguous, complete, ordered intervals count.

A warm-up line (`[Warmup][Prompt][3/24] ..`) is printed as its step begins, so a step lasts until the
next warm-up line or the end of the warm-up. Logs arrive cut and pasted: steps elided (step 1 of 24
followed by 48 of 48, a `...` or `[...]` line), a restart or a second run in the same paste, excerpts
out of time order, lines without timestamps. Timing a step up to whatever line comes next then
charges a whole gap to one step. This module splits a log's events into runs and each run into
intervals between consecutive warm-up lines, and classifies every interval against the order the
steps run in (the release's, from a prediction, or the log's own as a fallback):

    step      exactly one step, timed                       -> a per-step sample
    gap       several steps (an elision): the interval       -> one coarser sample over the steps
              still times them all, as a phase total            it really spans
    dropped   untimed, out of order, the log cut during it  -> no sample

Every gap, drop, restart and excerpt boundary gets a plain-words note. Pure: no I/O, no clocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .events import (
    BucketConfig,
    EngineInfo,
    Event,
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    HpuBlocks,
    MemorySplit,
    Milestone,
    ModelLoaded,
    WarmupFinished,
    WarmupStep,
)

# A pasted line that stands for lines left out: `...`, `…`, `[...]`, `<snip>`, `(cut)`, `[truncated]`,
# `-- 40 lines omitted --`, or a `# comment` between excerpts.
_ELISION = re.compile(
    r"^\s*(?:\.{3,}|…+|\[\s*(?:\.{3}|…)\s*\]|\(\s*(?:\.{3}|…)\s*\)|<\s*snip\s*>|\[?\s*snip(?:ped)?\s*\]?"
    r"|[\[(<]?\s*(?:cut|truncated|elided|omitted)\s*[\])>]?"
    r"|.{0,40}\b(?:lines?|entries)\s+(?:omitted|elided|removed|skipped|cut)\b.*|#.*)\s*$",
    re.IGNORECASE)
# Startup lines: seen again after a warm-up line, they mean the server started again.
_STARTUP = (BucketConfig, GeneratedBuckets, ModelLoaded, EngineInfo, MemorySplit, HpuBlocks)
# Lines that close the step before them: the graph budget ends the compile passes (fork <= 1.21), the
# capture summaries and "Warmup finished" end the warm-up, the sampler warm-up follows the last bucket.
_END_MILESTONES = ("sampler_warmup",)


def is_elision(line: str) -> bool:
    """A pasted line that stands for left-out lines (`...`, `[...]`, `<snip>`, `# excerpt 2`)."""
    return bool(line.strip()) and bool(_ELISION.match(line))


def elision_lines(lines: Iterable[str]) -> list[int]:
    """1-based numbers of the lines that mark an elision."""
    return [n for n, line in enumerate(lines, start=1) if isinstance(line, str) and is_elision(line)]


@dataclass(frozen=True)
class StepLine:
    """One `[Warmup]` line: which step of which phase began, where and when."""

    key: str  # "prompt", "decode", "graph/prompt", "graph/decode", ...
    index: int
    total: int
    line_no: int
    time_s: float | None
    shape: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.key} {self.index}/{self.total}"


@dataclass(frozen=True)
class EndLine:
    """A line that ends the step before it: "budget" (graph budget: compile passes over), "captured",
    "sampler", "finished" (`Warmup finished in N secs`, `seconds` = N)."""

    kind: str
    line_no: int
    time_s: float | None
    seconds: float | None = None

    @property
    def label(self) -> str:
        return {"budget": "the graph budget line", "captured": "the graph capture summary",
                "sampler": "the sampler warm-up", "finished": "'Warmup finished'"}[self.kind]


@dataclass(frozen=True)
class Interval:
    """From one warm-up line to the next line that ends its step, as the log shows it."""

    start: StepLine
    end: StepLine | EndLine | None  # None: the log (or the run) ends during this step
    seconds: float | None
    first: int | None  # position of the first step it spans in the order used (None: unknown)
    stop: int | None  # one past the last position it spans
    kind: str  # "step" | "gap" | "dropped"
    elided: bool = False  # an elision marker lies inside it
    note: str = ""

    @property
    def steps(self) -> int:
        return (self.stop - self.first) if self.first is not None and self.stop is not None else 0


@dataclass
class Run:
    """One start of the server as the log shows it: its lines, warm-up lines and intervals."""

    first_line: int
    last_line: int
    steps: list[StepLine] = field(default_factory=list)
    ends: list[EndLine] = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    start_time: float | None = None
    end_time: float | None = None
    why_new: str = ""  # why this run was split from the one before

    @property
    def finished_s(self) -> float | None:
        """The server's own "Warmup finished in N secs", when this run printed it."""
        return next((e.seconds for e in self.ends if e.kind == "finished"), None)

    @property
    def timed_steps(self) -> int:
        return sum(1 for s in self.steps if s.time_s is not None)


class StepOrder:
    """The order the warm-up runs its steps in: step id -> position, and where end lines fall.

    Built from a prediction's steps (the release's true order, captures interleaved as the release
    does them) or, without one, from the log itself: phases in the order they first appear, each
    with its logged total."""

    def __init__(self, ids: Sequence[tuple[str, int, int]], budget_at: int | None = None):
        self.ids = list(ids)
        self._pos = {sid: i for i, sid in enumerate(self.ids)}
        self._by_key: dict[str, list[int]] = {}
        for i, (key, _, _) in enumerate(self.ids):
            self._by_key.setdefault(key, []).append(i)
        self.size = len(self.ids)
        self.budget_at = self.size if budget_at is None else budget_at

    def reconciled(self, logged: Sequence[tuple[str, int, int]]) -> StepOrder:
        """This order, changed as little as needed for the logged steps to come in the logged order.

        A prediction can place a step in another pass than the release did (fork <= 1.21 captures
        prompt graphs until a memory budget runs out, then decode graphs, then prompt graphs again with
        what is left: a small memory difference moves one graph across). Steps the log does not show
        keep their predicted place among the others."""
        seq = [sid for sid in dict.fromkeys(logged) if sid in self._pos]
        if all(self._pos[a] < self._pos[b] for a, b in zip(seq, seq[1:])):
            return self
        rank = {sid: i for i, sid in enumerate(seq)}
        per_key = {k: [self.ids[i] for i in where] for k, where in self._by_key.items()}
        out: list[tuple[str, int, int]] = []
        done: set = set()
        nxt = 0  # the next logged step the order must reach

        def emit(sid) -> None:
            nonlocal nxt
            if sid not in done:
                done.add(sid)
                out.append(sid)
                if sid in rank:
                    nxt = max(nxt, rank[sid] + 1)

        for sid in self.ids:
            if sid in done:
                continue
            if sid in rank and rank[sid] > nxt:
                for want in seq[nxt:rank[sid]]:  # first the logged steps that came before it, each with
                    for other in per_key[want[0]]:  # the steps of its phase that precede it
                        emit(other)
                        if other == want:
                            break
            emit(sid)
        budget = self.ids[self.budget_at] if self.budget_at < self.size else None
        return StepOrder(out, out.index(budget) if budget is not None else None)

    def position(self, key: str, index: int, total: int) -> int | None:
        exact = self._pos.get((key, index, total))
        if exact is not None:
            return exact
        where = self._by_key.get(key)
        if not where or total <= 0 or not 1 <= index <= total:
            return None
        # Another list than the order knows (a rebuild that differs): the same share of the phase.
        return where[min(len(where) - 1, int((index - 1) / total * len(where)))]

    def end_position(self, kind: str) -> int:
        return self.budget_at if kind == "budget" else self.size

    @classmethod
    def from_log(cls, steps: Sequence[StepLine]) -> StepOrder:
        keys: dict[str, int] = {}
        for s in steps:
            keys.setdefault(s.key, s.total)
        ids = [(k, i, n) for k, n in keys.items() for i in range(1, n + 1)]
        budget = sum(n for k, n in keys.items() if not k.startswith("graph/")) if any(
            k.startswith("graph/") for k in keys) and any(not k.startswith("graph/") for k in keys) else None
        return cls(ids, budget)


@dataclass
class StepTimes:
    runs: list[Run]
    chosen: int | None  # index of the run whose steps count (the complete one, else the most timed)
    resolution_s: float  # timestamp resolution: 1 s for vLLM's own stamps
    notes: list[str] = field(default_factory=list)  # run notes, then the chosen run's interval notes
    run_notes: list[str] = field(default_factory=list)  # restarts, excerpts, runs left out

    @property
    def run(self) -> Run | None:
        return self.runs[self.chosen] if self.chosen is not None else None

    def kept_lines(self) -> set[int] | None:
        """Line numbers of the chosen run and of the startup lines that belong to it (an excerpt pasted
        before it whose times lead up to it); None when nothing had to be left out."""
        if self.chosen is None or len(self.runs) < 2:
            return None
        run = self.runs[self.chosen]
        lines: set[int] = set(range(run.first_line, run.last_line + 1))
        floor = max((r.end_time for r in self.runs[:self.chosen] if r.steps and r.end_time is not None
                     and run.start_time is not None and r.end_time <= run.start_time), default=None)
        for r in self.runs:
            if r is run or r.steps or r.start_time is None or run.start_time is None:
                continue
            if r.end_time is not None and r.end_time <= run.start_time and (floor is None or r.start_time >= floor):
                lines.update(range(r.first_line, r.last_line + 1))
        return lines


def line_ranges(numbers: Iterable[int]) -> str:
    """'2-4, 8-17' for a set of line numbers."""
    out: list[list[int]] = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out)


def _step_line(line_no: int, t: float | None, e: WarmupStep) -> StepLine:
    shape = tuple(v for v in (e.batch_size, e.seq_len, e.query_len, e.num_blocks) if v is not None)
    return StepLine(e.key, e.index, e.total, line_no, t, shape)


def _end_line(line_no: int, t: float | None, e: Event) -> EndLine | None:
    if isinstance(e, WarmupFinished):
        return EndLine("finished", line_no, t, float(e.seconds))
    if isinstance(e, GraphBudget):
        return EndLine("budget", line_no, t)
    if isinstance(e, GraphCaptured):
        return EndLine("captured", line_no, t)
    if isinstance(e, Milestone) and e.name in _END_MILESTONES:
        return EndLine("sampler", line_no, t)
    return None


def _resolution(times: list[float]) -> float:
    """vLLM prints whole seconds; docker/kubectl stamps carry fractions."""
    return 1.0 if times and all(float(t).is_integer() for t in times) else 0.01


def _split_runs(events: list[tuple[int, float | None, Event]], resolution: float) -> list[Run]:  # noqa: C901 (one test per way a run restarts)
    runs: list[Run] = []
    cur: Run | None = None
    last_t: float | None = None
    seen: dict[str, tuple[int, int]] = {}  # key -> (last index, total) in the current run
    printed: set = set()  # bucket lines of the current run: (kind, phase, process)

    def start(line_no: int, why: str) -> Run:
        nonlocal seen, last_t, printed
        seen, last_t, printed = {}, None, set()
        run = Run(line_no, line_no, why_new=why)
        runs.append(run)
        return run

    for line_no, t, e in events:
        why = ""
        if cur is not None:
            if t is not None and last_t is not None and t < last_t - resolution:
                why = f"line {line_no}: the time goes back {_ago(last_t - t)} (another excerpt or run)"
            elif isinstance(e, _STARTUP) and cur.steps:
                why = f"line {line_no}: startup lines again after warm-up lines (a restart or a second run)"
            elif _bucket_line(e) in printed:
                why = f"line {line_no}: the {e.phase} buckets printed again (another start)"
            elif isinstance(e, WarmupStep) and e.key in seen:
                index, total = seen[e.key]
                prev = cur.steps[-1]
                if e.total != total:
                    why = f"line {line_no}: {e.key} steps counted out of {e.total} after {total} (another run)"
                elif e.index < index or (e.index == index and (prev.key, prev.index) != (e.key, e.index)):
                    why = f"line {line_no}: {e.key} {e.index}/{e.total} again after {index}/{total} (a restart)"
        if cur is None or why:
            cur = start(line_no, why)
        cur.last_line = line_no
        if t is not None:
            cur.start_time = t if cur.start_time is None else cur.start_time
            cur.end_time = t
            last_t = t
        if _bucket_line(e) is not None:
            printed.add(_bucket_line(e))
        if isinstance(e, WarmupStep):
            step = _step_line(line_no, t, e)
            if cur.steps and (cur.steps[-1].key, cur.steps[-1].index) == (step.key, step.index):
                continue  # the same line again (a redraw, another rank's copy)
            cur.steps.append(step)
            seen[e.key] = (e.index, e.total)
        else:
            end = _end_line(line_no, t, e)
            if end is not None and (cur.steps or end.kind == "finished"):
                cur.ends.append(end)
    return runs


def _bucket_line(e: Event) -> tuple | None:
    """What a bucket line prints, per process: each start prints its lists once (a tensor-parallel rank
    printing the same config is another process, not another start)."""
    if isinstance(e, (BucketConfig, GeneratedBuckets)):
        prefix = getattr(e, "prefix", None)
        return (type(e).__name__, e.phase, getattr(prefix, "pid", None))
    return None


def _ago(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _intervals(run: Run, order: StepOrder, elisions: list[int], resolution: float) -> list[Interval]:
    """Consecutive boundaries of one run (warm-up lines and the end lines after the first of them)."""
    bounds: list[StepLine | EndLine] = sorted([*run.steps, *run.ends], key=lambda b: b.line_no)
    out: list[Interval] = []
    for i, b in enumerate(bounds):
        if not isinstance(b, StepLine):
            continue
        nxt = bounds[i + 1] if i + 1 < len(bounds) else None
        first = order.position(b.key, b.index, b.total)
        elided = nxt is not None and any(b.line_no < n < nxt.line_no for n in elisions)
        if nxt is None:
            out.append(Interval(b, None, None, first, None, "dropped", note=f"{b.label} (line {b.line_no}): the "
                                "log ends during this step, so its end is not known"))
            continue
        stop = (order.position(nxt.key, nxt.index, nxt.total) if isinstance(nxt, StepLine)
                else order.end_position(nxt.kind))
        secs = nxt.time_s - b.time_s if b.time_s is not None and nxt.time_s is not None else None
        where = f"{b.label} (line {b.line_no}) to {nxt.label} (line {nxt.line_no})"
        if secs is None:
            out.append(Interval(b, nxt, None, first, stop, "dropped", elided, f"{where}: untimed (no timestamp)"))
        elif secs < -resolution:
            out.append(Interval(b, nxt, secs, first, stop, "dropped", elided, f"{where}: the time goes back"))
        elif first is None or stop is None or stop <= first:
            out.append(Interval(b, nxt, secs, first, stop, "dropped", elided,
                                f"{where}: not in the order the release warms up in"))
        elif stop - first == 1:
            out.append(Interval(b, nxt, max(0.0, secs), first, stop, "step", elided))
        else:
            cause = "an elision" if elided else "lines left out"
            out.append(Interval(b, nxt, max(0.0, secs), first, stop, "gap", elided,
                                f"{where}: {stop - first} steps in {secs:.0f} s ({cause}); kept as one sample "
                                "over the steps it spans"))
    return out


def _choose(runs: list[Run]) -> int | None:
    """The run whose warm-up counts: a finished one with the most timed steps, else the most timed."""
    timed = [i for i, r in enumerate(runs) if r.timed_steps]
    if not timed:
        some = ([i for i, r in enumerate(runs) if r.finished_s is not None]
                or [i for i, r in enumerate(runs) if r.steps] or list(range(len(runs))))
        return some[-1] if some else None
    return max(timed, key=lambda i: (runs[i].finished_s is not None, runs[i].timed_steps, -i))


def read_step_times(events: Iterable[tuple[int, float | None, Event]], elisions: Iterable[int] = (),
                    order: StepOrder | Callable[[Run], StepOrder] | None = None) -> StepTimes:
    """Runs and classified intervals of a log. `events`: (line number, seconds or None, event) in line
    order; `elisions`: line numbers of elision markers (elision_lines); `order`: the release's step order
    (or a function of the chosen run giving it); without it, the log's own order."""
    events = sorted(events, key=lambda x: x[0])
    marks = sorted(elisions)
    times = [t for _, t, _ in events if t is not None]
    resolution = _resolution(times)
    runs = _split_runs(events, resolution)
    chosen = _choose(runs)
    notes: list[str] = []
    for r in runs:
        o = order(r) if callable(order) else order
        o = o.reconciled([(x.key, x.index, x.total) for x in r.steps]) if o is not None else StepOrder.from_log(r.steps)
        r.intervals = _intervals(r, o, marks, resolution)
        if r.why_new:
            notes.append(r.why_new)
    if chosen is not None and sum(1 for r in runs if r.steps) > 1:
        others = [i for i, r in enumerate(runs) if r.steps and i != chosen]
        notes.append(f"{len(others) + 1} runs with warm-up lines: only the one at lines {runs[chosen].first_line}-"
                     f"{runs[chosen].last_line} is used; the warm-up lines of the other"
                     f"{'s' if len(others) > 1 else ''} (lines " +
                     ", ".join(f"{runs[i].first_line}-{runs[i].last_line}" for i in others) + ") are dropped")
    run_notes = list(notes)
    run = runs[chosen] if chosen is not None else None
    if run is not None:
        notes += [iv.note for iv in run.intervals if iv.note]
    return StepTimes(runs, chosen, resolution, notes, run_notes)


def events_of(timed: Iterable) -> list[tuple[int, float | None, Event]]:
    """(line number, time, event) of explain's TimedEvent-like records (line_no, time_s, event)."""
    return [(t.line_no, t.time_s, t.event) for t in timed]
