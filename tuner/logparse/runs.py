"""Where one start of the server ends and the next begins in a pasted log, and what each start's
warm-up lines are: the one reading that `explain` and calibration share.

Logs reach us as excerpts: a doc pastes the bucket lines of one start next to the warm-up of another
(the fork 1.22 README: 19:15, then 19:27, then 19:15 again), a user pastes a second start under the
first (the fork 1.17 README: the 08-02 start, then the 08-01 warm-up without graphs), a server
restarts. Figures of two starts must never be added together, so the events are cut into runs:

- time goes backwards (more than a few seconds: ranks print the same second out of order);
- startup lines (engine, weights, memory) come after warm-up lines or "Warmup finished";
- a process prints a phase's bucket config or list again after warm-up lines, or a config with other
  values, or a list of another length (the same config and lists again before any warm-up line are the
  plugin's runner building its lists anew: one start);
- a warm-up step count goes back (step 1 again after step 7), counts out of another total, or warm-up
  continues after it finished.

A run that warmed up without printing its buckets (a doc excerpt that skips them) borrows the bucket
lines of the run that ended, in time, right before its warm-up began, never of a later one. The run a
reading describes (`primary_run`) is the one whose warm-up counts: the finished one with the most
timed steps. Pure: no I/O, no clocks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .events import (
    BucketConfig,
    EngineInfo,
    EngineInitialized,
    ErrorLine,
    Event,
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    HpuBlocks,
    MemorySplit,
    Milestone,
    ModelLoaded,
    OutOfMemory,
    ServerListening,
    Traceback,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
)

BACKWARDS_TOLERANCE_S = 5.0  # ranks and threads print the same second out of order
# Startup lines: seen again after a warm-up line, they mean the server started again. Bucket lines alone do
# not: the plugin's runner prints its lists again as it builds them anew for the warm-up (decode buckets once
# the KV cache is known), so a list printed twice by one process before any warm-up line is one start.
_RESTART = (ModelLoaded, EngineInfo, MemorySplit, HpuBlocks)
# Milestones printed once the bucket warm-up is over (the sampler warm-up follows the last bucket), and
# those that mean the server stopped.
_AFTER_WARMUP = ("sampler_warmup",)
_STOPPED = ("shutdown", "shutdown_waiting_connections")


@dataclass(frozen=True)
class StepLine:
    """One `[Warmup]` line: which step of which phase began, where and when."""

    key: str  # "prompt", "decode", "graph/prompt", "graph/decode", "unified", ...
    index: int
    total: int
    line_no: int
    time_s: float | None
    shape: tuple[int, ...] = ()
    bar: bool = False  # a tqdm bar's count, not a line of its own (vllm-gaudi logs steps only in developer mode)

    @property
    def phase(self) -> str:
        return self.key.split("/")[-1]

    @property
    def graph(self) -> bool:
        return self.key.startswith("graph/")

    @property
    def label(self) -> str:
        return f"{self.key} {self.index}/{self.total}"


@dataclass(frozen=True)
class EndLine:
    """A line that ends the step before it: "budget" (the graph budget: compile passes over), "bar" (a tqdm
    warm-up bar reached its total),
    "captured" (a phase's graph summary, `count` graphs of `phase`), "sampler" (the sampler warm-up
    follows the last bucket), "finished" (`Warmup finished in N secs`, `seconds` = N), "served" (the
    engine initialised or the server listens: warm-up is over), "failed" (an error, an out-of-memory
    or a shutdown: the step never finished)."""

    kind: str
    line_no: int
    time_s: float | None
    seconds: float | None = None
    phase: str | None = None
    count: int | None = None

    @property
    def label(self) -> str:
        return {"budget": "the graph budget line", "captured": "the graph capture summary",
                "bar": "the progress bar's last count",
                "sampler": "the sampler warm-up", "finished": "'Warmup finished'",
                "served": "the engine's ready line", "failed": "an error or a shutdown"}[self.kind]


@dataclass
class Run:
    """One start of the server as the log shows it."""

    index: int
    first: int  # position of its first event in the events read
    end: int  # one past its last
    first_line: int
    last_line: int
    why: str  # what started it: "start of the log", or why it was split from the run before
    start_s: float | None = None  # seconds since the log's first stamp, of its first / last timed event
    end_s: float | None = None
    steps: list[StepLine] = field(default_factory=list)  # its warm-up lines (a repeated line once)
    ends: list[EndLine] = field(default_factory=list)
    bucket_lines: bool = False
    lender: int | None = None  # the run whose bucket lines its warm-up ran with
    intervals: list = field(default_factory=list)  # steptimes.Interval, once read_step_times placed them
    order: object | None = None  # the steptimes.StepOrder they were placed in

    @property
    def finished_s(self) -> float | None:
        """The server's own "Warmup finished in N secs", when this run printed it."""
        return next((e.seconds for e in self.ends if e.kind == "finished"), None)

    @property
    def finished(self) -> bool:
        return self.finished_s is not None

    @property
    def timed_steps(self) -> int:
        return sum(1 for s in self.steps if s.time_s is not None)

    @property
    def warmed_up(self) -> bool:
        return bool(self.steps) or self.finished


def step_shape(e: WarmupStep) -> tuple[int, ...]:
    """The bucket a warm-up line names: its dimensions as logged (unified attention adds shared and
    unique blocks, vllm-gaudi's multimodal warm-up the image's width and height)."""
    dims = tuple(v for v in (e.batch_size, e.seq_len, e.query_len, e.num_blocks) if v is not None)
    extra = dict(e.extra)
    resolution = re.fullmatch(r"(\d+)[xX](\d+)", extra.get("resolution", ""))
    return (dims + tuple(int(extra[k]) for k in ("shared_blocks", "unique_blocks") if extra.get(k, "").isdigit())
            + (tuple(int(x) for x in resolution.groups()) if resolution else ()))


def step_of(e: Event) -> tuple[str, int, int, tuple[int, ...]] | None:
    """(key, index, total, shape) of the step a warm-up line says began: a `[Warmup]` line, or a tqdm bar's
    count (n of N done: step n+1 begins; the last count ends the bar, see end_line)."""
    if isinstance(e, WarmupStep):
        return e.key, e.index, e.total, step_shape(e)
    if isinstance(e, WarmupProgress) and e.done < e.total:
        return e.key, e.done + 1, e.total, ()
    return None


def end_line(line_no: int, t: float | None, e: Event) -> EndLine | None:
    if isinstance(e, WarmupProgress) and e.done >= e.total:
        return EndLine("bar", line_no, t, phase=e.key, count=e.total)
    if isinstance(e, WarmupFinished):
        return EndLine("finished", line_no, t, float(e.seconds))
    if isinstance(e, GraphBudget):
        return EndLine("budget", line_no, t)
    if isinstance(e, GraphCaptured):
        return EndLine("captured", line_no, t, phase=e.phase, count=e.count)
    if isinstance(e, (EngineInitialized, ServerListening)):
        return EndLine("served", line_no, t)
    if isinstance(e, (Traceback, ErrorLine, OutOfMemory)):
        return EndLine("failed", line_no, t)
    if isinstance(e, Milestone) and e.name in _AFTER_WARMUP:
        return EndLine("sampler", line_no, t)
    if isinstance(e, Milestone) and e.name in _STOPPED:
        return EndLine("failed", line_no, t)
    return None


def split_runs(events: Sequence[tuple[int, float | None, Event]]) -> list[Run]:
    """Cut a log's events ((line number, seconds or None, event), in line order) into runs."""
    runs: list[Run] = []
    state = _RunState()
    for pos, (line_no, t, e) in enumerate(events):
        why = state.breaks(line_no, t, e) if runs else "start of the log"
        if why:
            # a list of another length: the new start began with the config it printed again just before it
            begin = state.reprinted_config(e) if runs else None
            begin = pos if begin is None else begin
            if begin < pos:
                runs[-1].end, runs[-1].last_line = begin, events[begin - 1][0]
            runs.append(Run(len(runs), begin, begin, events[begin][0], events[begin][0], why))
            state = _RunState()
            for moved in range(begin, pos):
                _extend(runs[-1], state, moved, *events[moved])
        _extend(runs[-1], state, pos, line_no, t, e)
    return _lend(runs)


def _extend(run: Run, state: _RunState, pos: int, line_no: int, t: float | None, e: Event) -> None:
    run.end, run.last_line = pos + 1, line_no
    if t is not None:
        run.start_s = t if run.start_s is None else min(run.start_s, t)
        run.end_s = t if run.end_s is None else max(run.end_s, t)
    state.add(run, line_no, t, e, pos)


class _RunState:
    """What the current run has shown so far, to tell when a line belongs to another start."""

    def __init__(self):
        self.last_time: float | None = None
        self.printed: set = set()  # bucket lines: (kind, phase, process)
        self.configs: dict = {}  # (kind, phase, process) -> the config's dimensions
        self.counts: dict = {}  # (kind, phase, process) -> the count of its generated list
        self.config_pos: dict = {}  # (kind, phase, process) -> where its config was last printed
        self.list_pos: dict = {}  # (kind, phase, process) -> where its list was last printed
        self.seen: dict[str, tuple[int, int]] = {}  # warm-up key -> (last index, total)
        self.last_step: tuple[str, int] | None = None
        self.warmup = False
        self.finished = False

    def breaks(self, line_no: int, t: float | None, e: Event) -> str | None:
        if t is not None and self.last_time is not None and t < self.last_time - BACKWARDS_TOLERANCE_S:
            return f"the time goes back {_ago(self.last_time - t)} (another excerpt or run)"
        if isinstance(e, _RESTART) and self.warmup:
            return "startup lines again after warm-up lines (a restart or a second run)"
        if _bucket_line(e) in self.printed and self.warmup:
            return f"the {e.phase} buckets printed again after warm-up lines (another start)"
        if isinstance(e, BucketConfig) and self.configs.get(_bucket_line(e), e.dims) != e.dims:
            return f"the {e.phase} buckets printed again with another config (another start)"
        if isinstance(e, GeneratedBuckets) and self.counts.get(_bucket_line(e), e.count) != e.count:
            return (f"{e.count} {e.phase} buckets generated after {self.counts[_bucket_line(e)]} "
                    "(another start, with other settings)")
        step = step_of(e)
        if step is not None:
            key, idx, tot, _ = step
            if self.finished:
                return "warm-up again after it finished"
            if key in self.seen:
                index, total = self.seen[key]
                if tot != total:
                    return f"{key} steps counted out of {tot} after {total} (another run)"
                if idx < index or (idx == index and self.last_step != (key, idx)):
                    return f"{key} {idx}/{tot} again after {index}/{total} (a restart)"
        return None

    def reprinted_config(self, e: Event) -> int | None:
        """Where the config of `e`'s phase was printed again since its list (the position of that line), when
        `e` is a list of another length: that config is the new start's first line."""
        key = ("BucketConfig", *_bucket_line(e)[1:]) if isinstance(e, GeneratedBuckets) else None
        if key is None or _bucket_line(e) not in self.counts or self.counts[_bucket_line(e)] == e.count:
            return None
        pos, listed = self.config_pos.get(key), self.list_pos.get(_bucket_line(e))
        return pos if pos is not None and listed is not None and pos > listed else None

    def add(self, run: Run, line_no: int, t: float | None, e: Event, pos: int = 0) -> None:
        if t is not None:
            self.last_time = t if self.last_time is None else max(self.last_time, t)
        if _bucket_line(e) is not None:
            self.printed.add(_bucket_line(e))
            run.bucket_lines = True
        if isinstance(e, BucketConfig):
            self.configs[_bucket_line(e)] = e.dims
            self.config_pos[_bucket_line(e)] = pos
        if isinstance(e, GeneratedBuckets):
            self.counts[_bucket_line(e)] = e.count
            self.list_pos[_bucket_line(e)] = pos
        step = step_of(e)
        if step is not None:
            key, index, total, shape = step
            self.warmup = True
            if self.last_step != (key, index):  # the same line again (a redraw, another rank's copy)
                run.steps.append(StepLine(key, index, total, line_no, t, shape, bar=isinstance(e, WarmupProgress)))
            self.seen[key] = (index, total)
            self.last_step = (key, index)
            return
        end = end_line(line_no, t, e)
        if end is not None and (run.steps or end.kind == "finished"):
            run.ends.append(end)
        if isinstance(e, WarmupFinished):
            self.warmup = self.finished = True


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


def _lend(runs: list[Run]) -> list[Run]:
    """A warm-up without bucket lines runs with those of the bucket-only run that ended last before it
    began (in time; both must be timed)."""
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
    """The run whose warm-up counts and that a reading describes: of the runs that finished warm-up, the
    one with the most timed steps; else the one with the most timed steps; else the most steps; else
    the last with bucket lines; else the last (the later one on every tie)."""
    if not runs:
        return None
    for pool, rank in (([r for r in runs if r.finished], lambda r: r.timed_steps),
                       ([r for r in runs if r.timed_steps], lambda r: r.timed_steps),
                       ([r for r in runs if r.steps], lambda r: len(r.steps))):
        if pool:
            return max(pool, key=lambda r: (rank(r), r.index))
    with_buckets = [r for r in runs if r.bucket_lines]
    return (with_buckets or runs)[-1]
