"""Warm-up step timings a log really shows: only contiguous, complete, ordered intervals count.

A warm-up line (`[Warmup][Prompt][3/24] ..`) is printed as its step begins, so a step lasts until the
next warm-up line or the end of the warm-up. A tqdm bar's count (`Prompt warmup processing: .. 3/24
[00:09<..]`, vllm-gaudi's default output) says step 4 begins, at the bar's own clock; its last count ends
its phase. Logs arrive cut and pasted: steps elided (step 1 of 24
followed by 48 of 48, a `...` or `[...]` line), a restart or a second run in the same paste, excerpts
out of time order, lines without timestamps. Timing a step up to whatever line comes next then
charges a whole gap to one step. The log's runs (runs.py: where one start ends and the next begins)
are cut into intervals between consecutive warm-up lines, and every interval is classified against
the order the steps run in (the release's, from a prediction, or the log's own as a fallback):

    step      exactly one step, timed                       -> a per-step sample
    gap       several steps (an elision): the interval       -> one coarser sample over the steps
              still times them all, as a phase total            it really spans
    dropped   untimed, out of order, the log cut during it,  -> no sample
              the step failed

`explain` (its timeline) and calibration (perfmodel.evidence) both read a log through
read_step_times, so they cannot disagree about what it shows. Every gap, drop, restart and excerpt
boundary gets a plain-words note. Pure: no I/O, no clocks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .events import Event
from .runs import EndLine, Run, StepLine, primary_run, split_runs

# A pasted line that stands for lines left out: `...`, `…`, `[...]`, `<snip>`, `(cut)`, `[truncated]`,
# `-- 40 lines omitted --`, or a `# comment` between excerpts.
_ELISION = re.compile(
    r"^\s*(?:\.{3,}|…+|\[\s*(?:\.{3}|…)\s*\]|\(\s*(?:\.{3}|…)\s*\)|<\s*snip\s*>|\[?\s*snip(?:ped)?\s*\]?"
    r"|[\[(<]?\s*(?:cut|truncated|elided|omitted)\s*[\])>]?"
    r"|.{0,40}\b(?:lines?|entries)\s+(?:omitted|elided|removed|skipped|cut)\b.*|#.*)\s*$",
    re.IGNORECASE)


def is_elision(line: str) -> bool:
    """A pasted line that stands for left-out lines (`...`, `[...]`, `<snip>`, `# excerpt 2`)."""
    return bool(line.strip()) and bool(_ELISION.match(line))


def elision_lines(lines: Iterable[str]) -> list[int]:
    """1-based numbers of the lines that mark an elision."""
    return [n for n, line in enumerate(lines, start=1) if isinstance(line, str) and is_elision(line)]


@dataclass(frozen=True)
class Interval:
    """From one warm-up line to the next line that ends its step, as the log shows it."""

    start: StepLine
    end: StepLine | EndLine | None  # None: the log (or the run) ends during this step
    seconds: float | None
    first: int | None  # position of the first step it spans in the order used (None: unknown)
    stop: int | None  # one past the last position it spans
    kind: str  # "step" | "gap" (lines left out) | "bar" (a progress bar's counts) | "dropped"
    elided: bool = False  # an elision marker lies inside it
    note: str = ""
    run: int = 0  # the run it belongs to
    spans: tuple[tuple[str, int], ...] = ()  # (warm-up key, steps) it spans, in the order used

    @property
    def steps(self) -> int:
        return (self.stop - self.first) if self.first is not None and self.stop is not None else 0

    @property
    def exact(self) -> bool:
        """One step, timed to its true successor."""
        return self.kind == "step"

    @property
    def timed(self) -> bool:
        """A step, a gap or a bar's stretch: seconds the log really shows, over the steps in `spans`."""
        return self.kind in ("step", "gap", "bar")

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.spans)

    @property
    def start_line(self) -> int:
        return self.start.line_no

    @property
    def end_line(self) -> int | None:
        return self.end.line_no if self.end is not None else None


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

    def _known(self, key: str) -> str:
        """The order's name of a logged phase: a tqdm bar says "prompt" whether the release compiles or
        captures graphs in that pass ("graph/prompt")."""
        return key if key in self._by_key or f"graph/{key}" not in self._by_key else f"graph/{key}"

    def position(self, key: str, index: int, total: int) -> int | None:
        key = self._known(key)
        exact = self._pos.get((key, index, total))
        if exact is not None:
            return exact
        where = self._by_key.get(key)
        if not where or total <= 0 or not 1 <= index <= total:
            return None
        # Another list than the order knows (a rebuild that differs): the same share of the phase.
        return where[min(len(where) - 1, int((index - 1) / total * len(where)))]

    def end_position(self, kind: str, phase: str | None = None) -> int:
        """Where an end line falls: the budget line after the compile pass, a bar's last count after its
        phase's last step, every other end line at the end of the warm-up."""
        if kind == "budget":
            return self.budget_at
        if kind == "bar" and phase is not None and self._known(phase) in self._by_key:
            return max(self._by_key[self._known(phase)]) + 1
        return self.size

    def total(self, key: str) -> int:
        """How many steps of a phase the order holds."""
        return len(self._by_key.get(key, ()))

    def spans(self, first: int, stop: int) -> tuple[tuple[str, int], ...]:
        """(warm-up key, steps) of positions first..stop-1, in order (a key again after another, again)."""
        out: list[list] = []
        for key, _, _ in self.ids[first:stop]:
            if out and out[-1][0] == key:
                out[-1][1] += 1
            else:
                out.append([key, 1])
        return tuple((k, n) for k, n in out)

    @classmethod
    def from_log(cls, run: Run) -> StepOrder:
        """The order a run's own lines show: phases in the order they first appear, each with its logged
        total (a graph phase up to the graphs its capture summary counts: fork <= 1.21 stops capturing
        when the graph memory is used up), then reconciled with the order the lines come in."""
        keys: dict[str, int] = {}
        for s in run.steps:
            keys.setdefault(s.key, s.total)
        captured = {f"graph/{e.phase}": e.count for e in run.ends if e.kind == "captured" and e.count is not None}
        seen = {k: max(s.index for s in run.steps if s.key == k) for k in keys}
        ids = [(k, i, n) for k, n in keys.items() for i in range(1, min(n, max(captured.get(k, n), seen[k])) + 1)]
        graph = [k.startswith("graph/") for k in keys]
        budget = sum(1 for k, _, _ in ids if not k.startswith("graph/")) if any(graph) and not all(graph) else None
        return cls(ids, budget)


@dataclass
class StepTimes:
    runs: list[Run]
    chosen: int | None  # index of the run whose steps count (runs.primary_run)
    resolution_s: float  # timestamp resolution: 1 s for vLLM's own stamps
    notes: list[str] = field(default_factory=list)  # run notes, then the chosen run's interval notes
    run_notes: list[str] = field(default_factory=list)  # restarts, excerpts, runs left out

    @property
    def run(self) -> Run | None:
        return self.runs[self.chosen] if self.chosen is not None else None

    def kept_lines(self) -> set[int] | None:
        """Line numbers of the chosen run and of the run that lent it its bucket lines (an excerpt pasted
        before it whose times lead up to it); None when nothing had to be left out."""
        if self.chosen is None or len(self.runs) < 2:
            return None
        run = self.runs[self.chosen]
        lines: set[int] = set(range(run.first_line, run.last_line + 1))
        if run.lender is not None:
            lent = self.runs[run.lender]
            lines.update(range(lent.first_line, lent.last_line + 1))
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


# The least a warm-up step takes: the fastest timed in a public log is ~0.3 s (fork 1.17 README, decode and
# graph capture), so several steps in under this much each were logged together, not run
MIN_STEP_S = 0.05


def _resolution(times: list[float]) -> float:
    """vLLM prints whole seconds; docker/kubectl stamps carry fractions."""
    return 1.0 if times and all(float(t).is_integer() for t in times) else 0.01


def _intervals(run: Run, order: StepOrder, elisions: list[int], resolution: float) -> list[Interval]:
    """Consecutive boundaries of one run (warm-up lines and the end lines after the first of them)."""
    # vllm-gaudi's developer mode prints a bare line per step (no timestamp: tqdm.write) inside the timed
    # progress bar of its phase: the bar clocks the phase, the bare lines only name the buckets
    clocked = ({s.key for s in run.steps if s.bar and s.time_s is not None}
               | {e.phase for e in run.ends if e.kind == "bar" and e.time_s is not None})
    bounds: list[StepLine | EndLine] = sorted(
        [s for s in run.steps if s.bar or s.time_s is not None or s.key not in clocked] + list(run.ends),
        key=lambda b: b.line_no)
    out: list[Interval] = []

    def add(b: StepLine, nxt, secs, first, stop, kind, elided=False, note=""):
        spans = order.spans(first, stop) if kind != "dropped" else ()
        out.append(Interval(b, nxt, secs, first, stop, kind, elided, note, run.index, spans))

    for i, b in enumerate(bounds):
        if not isinstance(b, StepLine):
            continue
        nxt = bounds[i + 1] if i + 1 < len(bounds) else None
        first = order.position(b.key, b.index, b.total)
        elided = nxt is not None and any(b.line_no < n < nxt.line_no for n in elisions)
        if nxt is None:
            add(b, None, None, first, None, "dropped",
                note=f"{b.label} (line {b.line_no}): the log ends during this step, so its end is not known")
            continue
        stop = (order.position(nxt.key, nxt.index, nxt.total) if isinstance(nxt, StepLine)
                else order.end_position(nxt.kind, nxt.phase))
        if (isinstance(nxt, EndLine) and nxt.kind == "sampler" and first is not None
                and any(isinstance(later, StepLine) for later in bounds[i + 1:])):
            stop = first + 1  # the plugin warms the sampler between its multimodal and its bucket warm-up
        secs = nxt.time_s - b.time_s if b.time_s is not None and nxt.time_s is not None else None
        where = f"{b.label} (line {b.line_no}) to {nxt.label} (line {nxt.line_no})"
        if isinstance(nxt, EndLine) and nxt.kind == "failed":
            add(b, nxt, secs, first, stop, "dropped", elided, f"{where}: the step never finished")
        elif secs is None:
            add(b, nxt, None, first, stop, "dropped", elided, f"{where}: untimed (no timestamp)")
        elif secs < -resolution:
            add(b, nxt, secs, first, stop, "dropped", elided, f"{where}: the time goes back")
        elif first is None or stop is None or stop <= first:
            add(b, nxt, secs, first, stop, "dropped", elided, f"{where}: not in the order the release warms up in")
        elif stop - first == 1:
            add(b, nxt, max(0.0, secs), first, stop, "step", elided)
        elif (secs < resolution or secs < MIN_STEP_S * (stop - first)) and not elided:
            # lines of two passes stamped the same instant (fork 1.22's Graph/mix/prompt 1/352 and
            # Graph/mix/decode 1/112 in one second): the steps between were not run in no time. Finer
            # stamps (`docker logs -t`) do not make them timed: many steps in a fraction of a second are
            # lines logged together as well
            within = "one tick of the timestamps" if secs < resolution else f"{secs:.2f} s"
            add(b, nxt, secs, first, stop, "dropped", elided,
                f"{where}: {stop - first} steps within {within} (logged together, not timed)")
        else:
            # a progress bar to its next count or its end: the release logs no line per step (not a cut log)
            barred = b.bar and (isinstance(nxt, EndLine) and nxt.kind == "bar" or getattr(nxt, "bar", False))
            bare = barred and any(b.line_no < s.line_no < nxt.line_no for s in run.steps if s.time_s is None)
            cause = ("an elision" if elided else "a progress bar; its step lines carry no time" if bare
                     else "a progress bar: no line per step" if barred else "lines left out")
            add(b, nxt, max(0.0, secs), first, stop, "bar" if barred and not elided else "gap", elided,
                f"{where}: {stop - first} steps in {secs:.0f} s ({cause}); kept as one sample over the steps it spans")
    return out


def read_step_times(events: Sequence[tuple[int, float | None, Event]], elisions: Iterable[int] = (),
                    order: StepOrder | Callable[[Run], StepOrder] | None = None) -> StepTimes:
    """Runs and classified intervals of a log. `events`: (line number, seconds or None, event) in line
    order; `elisions`: line numbers of elision markers (elision_lines); `order`: the release's step order
    (or a function of a run giving it); without it, each run's own order (StepOrder.from_log)."""
    marks = sorted(elisions)
    resolution = _resolution([t for _, t, _ in events if t is not None])
    runs = split_runs(events)
    primary = primary_run(runs)
    chosen = primary.index if primary is not None else None
    notes: list[str] = []
    for r in runs:
        o = order(r) if callable(order) else order
        r.order = (o or StepOrder.from_log(r)).reconciled([(x.key, x.index, x.total) for x in r.steps])
        r.intervals = _intervals(r, r.order, marks, resolution)
        if r.index:
            notes.append(f"line {r.first_line}: {r.why}")
    if chosen is not None and sum(1 for r in runs if r.steps) > 1:
        others = [i for i, r in enumerate(runs) if r.steps and i != chosen]
        notes.append(f"{len(others) + 1} runs with warm-up lines: only the one at lines {runs[chosen].first_line}-"
                     f"{runs[chosen].last_line} is used; the warm-up lines of the other"
                     f"{'s' if len(others) > 1 else ''} (lines " +
                     ", ".join(f"{runs[i].first_line}-{runs[i].last_line}" for i in others) + ") are dropped")
    run_notes = list(notes)
    if primary is not None:
        notes += [iv.note for iv in primary.intervals if iv.note]
    return StepTimes(runs, chosen, resolution, notes, run_notes)


def events_of(timed: Iterable) -> list[tuple[int, float | None, Event]]:
    """(line number, time, event) of explain's TimedEvent-like records (line_no, time_s, event)."""
    return [(t.line_no, t.time_s, t.event) for t in timed]
