"""`LogWatcher`: the stateful reader. Multi-line constructs (tracebacks, vllm-gaudi's "Omitted N
buckets:" list), tqdm warm-up bars, the running summary, warm-up progress and the remaining-time projection.

The plugin's warm-up shows itself as tqdm bars: `\r` + bar per redraw on one physical line that ends only
when the bar closes, every rank drawing its own copy, other processes' records glued after a redraw (or
between a bar's head and its tail). Every redraw is read; a count is news once; a bar's redraws are timed
by its own elapsed clock from when the bar began (`WarmupProgress.at_s`), since they carry no stamp."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace

from .events import (
    BucketConfig,
    BucketNotPrepared,
    BucketVariable,
    CompileTime,
    EngineInfo,
    EngineInitialized,
    EngineStats,
    ErrorLine,
    Event,
    ExponentialOverride,
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    HpuBlocks,
    KvCacheSize,
    MemorySplit,
    Milestone,
    ModelLoaded,
    NotWarmedUp,
    OmittedBuckets,
    OutOfMemory,
    Preemption,
    ServerListening,
    SkipWarmup,
    StepGraphCompilation,
    Traceback,
    UsableBlocks,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
)
from .message import _oom_kind, _parse_message
from .prefix import LogPrefix, PasteLayer, split_prefix
from .rules import TQDM_WARMUP
from .summary import WatchSummary, generated_buckets
from .values import _clock_s

# ---------------------------------------------------------------------------------------------
# LogWatcher
# ---------------------------------------------------------------------------------------------

_TRACEBACK_START = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
# A traceback frame. Pasted logs often start inside a traceback (the "Traceback (most recent call
# last):" line scrolled away) and lose the frames' indentation ("[rank0]: File ..", then the code line).
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+, in ')
_FRAME_ANYWHERE = re.compile(r'File "[^"]*", line \d+, in ')
# a frame line a terminal hard-wrapped: its head ('File "/long/path/x.py", li') ends the physical line
_FRAME_HEAD = re.compile(r'^\s*File "')
# pydantic's echo of the rejected input after the error: " [type=value_error, input_value=..., input_type=...]"
_PYDANTIC_INPUT = re.compile(r"\s*\[type=[\w.]+(?:, input_value=.*)?\]\s*$")
_PYDANTIC_FIELD = re.compile(r"^[A-Za-z_][\w.\[\]]*$")  # the field a pydantic error is about, a line of its own


def _said(line: str) -> str:
    """A pydantic error line without its echo of the input, the given value kept: "Input should be ... (given 1.5)"."""
    echo = _PYDANTIC_INPUT.search(line)
    if echo is None:
        return line.strip()
    given = re.search(r"input_value=(.*?)(?:, input_type=(\w+))?\]\s*$", echo.group(0))
    whole = given is None or given.group(2) in ("ArgsKwargs", "dict") or len(given.group(1)) > 40  # the config
    return line[:echo.start()].strip() + ("" if whole else f" (given {given.group(1)})")


_PYDANTIC_HEAD = re.compile(r"^\d+ validation errors? for (?P<config>\w+)$")
_PYDANTIC_KIND = re.compile(r"^(?:Value|Assertion) error, ")
# pydantic's error lines, recognised unindented too (a paste that lost the indentation)
_PYDANTIC_ERROR = re.compile(r"^(?:Value error, |Assertion error, |Input should |Field required|Extra inputs are |"
                             r"For further information visit )")
_CHAINED = re.compile(r"^(?:The above exception was the direct cause|During handling of the above exception)")
# A vLLM record prefix anywhere in a line: a pasted log whose newlines were lost holds several records.
_RECORD_START = re.compile(r"(?:\([A-Za-z_][\w\-]*[^()\n]{0,80}?\bpid=\d+[^()\n]{0,80}\)\s*)?"
                           r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                           r"\[?[\w.\-]+:\d+\]")


def _records(physical: str) -> list[str]:
    """One physical line -> the log records in it: split before every vLLM prefix after the first one
    (only where whitespace precedes it, so that a tqdm bar glued to a record stays one line)."""
    starts = [m.start() for m in _RECORD_START.finditer(physical)]
    cuts = [i for i in starts[1:] if physical[i - 1:i].isspace()]
    if not cuts:
        return [physical]
    bounds = [0] + cuts + [len(physical)]
    return [physical[a:b].rstrip() for a, b in zip(bounds, bounds[1:])]
# The head of a tqdm warm-up bar ("Prompt warmup processing:  45%|####5"): another process's record written
# before the bar's tail cuts it in two (the tail follows on the next physical line); the tail starts with the
# rest of the bar and "| n/total".
_BAR_HEAD = re.compile(r"\b[A-Za-z]+(?: Attention)? warm-?up(?: processing)?\s*:\s*\d{1,3}%\|", re.I)
_BAR_TAIL = re.compile(r"^[^|\r\n]{0,200}\|\s*\d+/\d+")


def _cut_bars(segment: str) -> list[str]:
    """One `\r` segment -> its pieces: a finished tqdm bar ends at its `]`, and whatever follows it (another
    process's record, its tag) is a piece of its own."""
    pieces, start = [], 0
    for m in TQDM_WARMUP.finditer(segment):
        if m["el"] is None:
            continue
        pieces.append(segment[start:m.end()])
        start = m.end()
    rest = segment[start:]
    if rest.strip() or not pieces:
        pieces.append(rest)
    return pieces


_OMITTED_HEADER = re.compile(r"^Omitted \d+ (?:prompt|decode) buckets:$")
_PAREN_ROW = re.compile(r"^\(.*\)$")


def usable_kv_blocks(e: UsableBlocks) -> int:
    """The KV blocks the bucketing works with. Where `_PAD_BLOCK_ID` is the runner's num_blocks (the pad
    block after the usable ones: usable <= it < allocated) it is the bucketing manager's num_hpu_blocks;
    0.14 builds pad with block 0 (`_PAD_BLOCK_ID=0`) and 0.15 ones print -1: no block count, so `usable`."""
    pad = e.pad_block_id
    if pad is not None and e.usable <= pad < max(e.allocated, e.usable + 1):
        return pad
    return e.usable


def _merge(old, new):
    """Several lines report parts of one fact (load time, then load memory): keep the known parts."""
    if old is None:
        return new
    return replace(new, **{f.name: getattr(old, f.name) for f in fields(new)
                           if f.name != "prefix" and getattr(new, f.name) is None})


@dataclass
class _Bar:
    """One tqdm warm-up bar being drawn: every rank draws its own copy and tqdm redraws the same count, so
    only a count beyond `done` is news."""

    total: int
    done: int
    started: float  # when it began, on the watcher's clock
    last: float     # when its newest count was drawn


@dataclass
class _PhaseProgress:
    total: int
    completed: int = 0           # steps known finished
    started: int = 0             # highest [Warmup] index seen (that step is running)
    last_t: float = 0.0
    runs: list[list[tuple[float, int]]] = field(default_factory=list)  # (t, completed) per contiguous run


class LogWatcher:
    """Feed it server output line by line; it returns events and keeps a running summary.

    Multi-line constructs: Python tracebacks (plain, or with every line prefixed as vLLM v1 workers log
    them; kept apart per process) become one Traceback event when the exception line arrives;
    vllm-gaudi's "Omitted N buckets:" list becomes one OmittedBuckets event when the list ends.

    Time: pass `t` (monotonic seconds) with each line, or let the watcher read `clock()` on arrival;
    the times of warm-up lines drive `projected_remaining_s()`.

    `expect_graphs`: count HPU-graph capture phases (Graph/Prompt, Graph/Decode after the eager
    warm-up, fork 1.17..1.21 lazy mode) in the projection before they start.
    """

    def __init__(self, *, expect_graphs: bool = False, clock: Callable[[], float] = time.monotonic,
                 replay: bool = False):
        self.expect_graphs = expect_graphs
        # live (replay False): `t` is when a chunk arrived, so a line's last redraw was drawn at `t`; a replay
        # of a saved log passes the time of the last stamp before the line, when its bar began
        self.replay = replay
        self._line_bar_end: float | None = None   # tqdm elapsed of the last redraw in the line being read
        self._clock = clock
        self._tracebacks_open: dict[tuple, tuple[LogPrefix, list[str]]] = {}
        # a traceback whose exception line was pydantic's "1 validation error for ModelConfig", waiting for the
        # lines after it that say the error itself (the field, then the indented error)
        self._exception_tails: dict[tuple, tuple[LogPrefix, list[str], str, str, list[str], int]] = {}
        self._feeds = 0  # feed() calls so far: how far back a held traceback's exception line is
        # the last fed chunk had a line taken into a multi-line record (a traceback, vllm-gaudi's omitted
        # rows): read, though no event came of it yet (explain does not count it as unread)
        self.absorbed = False
        self.paste = PasteLayer()  # a pasted log's own prefix on every line, learned as it is read
        self._omitted_open: tuple[LogPrefix, list[str]] | None = None
        self._stage = "startup"
        self._configs: dict[str, BucketConfig] = {}
        self._variables: dict[str, BucketVariable] = {}
        self._overrides: list[str] = []
        self._generated: dict[str, GeneratedBuckets] = {}
        self._omitted: dict[str, OmittedBuckets] = {}
        self._memory: MemorySplit | None = None
        self._usable: UsableBlocks | None = None
        self._hpu_blocks: int | None = None
        self._model: ModelLoaded | None = None
        self._kv: KvCacheSize | None = None
        self._budget: GraphBudget | None = None
        self._phases: dict[str, _PhaseProgress] = {}
        self._bars: dict[str, _Bar] = {}
        self._bar_head: str | None = None   # a bar cut by another record, waiting for its tail
        self._bars_end = float("-inf")      # when the last bar's newest count was drawn
        self._validating = False            # between "Running validation warmup" and its "complete"
        self._pending = ""                  # feed_stream: text after the last line or redraw end
        self._current_phase: str | None = None
        self._captured: dict[str, GraphCaptured] = {}
        self._finished: WarmupFinished | None = None
        self._skipped = False
        self._not_warmed: dict[tuple, NotWarmedUp] = {}
        self._not_prepared: dict[tuple, BucketNotPrepared] = {}
        self._preempt_events = 0
        self._preempt_cumulative = 0
        self._preempt_interval = 0  # summed over v1's stats lines
        self._step_compiles = [0, 0, 0]  # under load: steps that compiled, graphs compiled; any stage: graphs
        self._oom: OutOfMemory | None = None
        self._oom_stage: str | None = None
        self._errors: list[str] = []
        self._tracebacks: list[Traceback] = []
        self._url: str | None = None
        self._startup_complete = False
        self._version: str | None = None
        self._platform: str | None = None
        self._engine_init: float | None = None
        self._compile_s: float | None = None

    # -- input ---------------------------------------------------------------------------------

    def feed(self, line: str, t: float | None = None) -> list[Event]:
        """One chunk of output (normally one line; several lines or tqdm `\\r` redraws are fine)."""
        if not isinstance(line, str):
            return []
        now = self._clock() if t is None else t
        events: list[Event] = []
        self.absorbed = False
        self._feeds += 1
        for line_text in line.rstrip("\r\n").split("\n"):
            for physical in _records(self._join_bar(line_text)):
                ends = [m["el"] for m in TQDM_WARMUP.finditer(physical) if m["el"] is not None]
                self._line_bar_end = _clock_s(ends[-1]) if ends else None
                segments = [s for s in physical.split("\r") if s.strip()] or [physical]
                for segment in segments:   # every redraw of a bar: each one times the steps before it
                    for piece in _cut_bars(segment):
                        events.extend(self._feed_one(piece, now))
        return events

    def feed_stream(self, chunk: str, t: float | None = None) -> list[Event]:
        """Raw output as it arrives (a pipe's reads): lines and tqdm redraws are read as soon as they are
        whole. A bar redraw is `\r` + bar with no newline until the bar closes, so a line reader would see a
        bar's progress only at its end; here a redraw counts once its closing `]` has arrived."""
        if not isinstance(chunk, str):
            return []
        text = self._pending + chunk
        cut = max(text.rfind("\n"), text.rfind("\r"))
        whole, rest = (text[:cut + 1], text[cut + 1:]) if cut >= 0 else ("", text)
        m = TQDM_WARMUP.search(rest)
        if m and m["el"] is not None and not rest[m.end():].strip():
            whole, rest = whole + rest, ""   # the newest redraw is complete
        self._pending = rest
        return self.feed(whole, t) if whole.strip() else []

    def _join_bar(self, physical: str) -> str:
        """Put a bar back together when another process's record was written between its head and its
        tail (`Prompt warmup processing:  45%|####(EngineCore_DP0 pid=7) INFO .. msg` then `     | 43/96 [..]`)."""
        if self._bar_head is not None:
            head, self._bar_head = self._bar_head, None
            if _BAR_TAIL.match(physical):
                physical = head + physical
        heads = list(_BAR_HEAD.finditer(physical))
        if heads:
            h = heads[-1]
            bar = TQDM_WARMUP.match(physical, h.start())
            if bar is None or bar["el"] is None:
                record = _RECORD_START.search(physical, h.end())
                if record is not None:
                    self._bar_head = physical[h.start():record.start()]
                    physical = physical[:h.start()] + physical[record.start():]
        return physical

    def prime(self, lines: Iterable[str]) -> None:
        """Learn a pasted log's own line prefix from these lines before they are fed (PasteLayer)."""
        self.paste.prime(lines)

    def feed_lines(self, lines: Iterable[str], t: float | None = None) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            events.extend(self.feed(line, t))
        return events

    def flush(self) -> list[Event]:
        """End of stream: emit whatever multi-line record is still open."""
        events = self._close_omitted()
        for key in list(self._exception_tails):
            events.extend(self._close_tail(key))
        for key in list(self._tracebacks_open):
            prefix, lines = self._tracebacks_open.pop(key)
            events.extend(self._emit_traceback(prefix, lines, None, ""))
        return events

    def _feed_one(self, raw: str, t: float) -> list[Event]:
        prefix, msg = split_prefix(raw, self.paste)
        events: list[Event] = []
        if self._omitted_open is not None:
            if prefix.level is None and _PAREN_ROW.match(msg.strip()):
                self._omitted_open[1].append(msg.strip())
                self.absorbed = True
                return []
            events.extend(self._close_omitted())
        key = (prefix.process, prefix.pid, prefix.level is None)
        if key in self._exception_tails:
            # the error's lines: indented, or (a paste that lost indentation) a field name or pydantic's wording
            if prefix.level is None and msg.strip() and not _FRAME.match(msg) and (
                    msg[:1] in (" ", "\t") or _PYDANTIC_FIELD.match(msg) or _PYDANTIC_ERROR.match(msg)):
                self._exception_tails[key][4].append(msg.strip())
                self.absorbed = True
                return events
            events.extend(self._close_tail(key))
        if key in self._tracebacks_open:
            done, consumed = self._continue_traceback(key, prefix, msg)
            events.extend(done)
            if consumed:
                self.absorbed = True
                return events
        if msg.strip() == _TRACEBACK_START:
            self._tracebacks_open[key] = (prefix, [msg.strip()])
            self.absorbed = True
            return events
        if _FRAME.match(msg) or (prefix.level in ("ERROR", "CRITICAL") and msg[:1] in (" ", "\t") and msg.strip()):
            self._tracebacks_open[key] = (prefix, [msg])   # a traceback whose first line is not in the log
            self.absorbed = True
            return events
        if _OMITTED_HEADER.match(msg.strip()):
            self._omitted_open = (prefix, [msg.strip()])
            self.absorbed = True
            return events
        event = _parse_message(prefix, msg)
        if isinstance(event, WarmupProgress):
            event = self._bar_news(event, t)
            if event is not None:
                self._update(event, event.at_s if event.at_s is not None else t)
                events.append(event)
            return events
        if event is not None:
            self._update(event, t)
            events.append(event)
        return events

    def _bar_news(self, e: WarmupProgress, t: float) -> WarmupProgress | None:
        """A redraw that says something new (a count no copy of this bar showed yet), with its bar's start;
        None for a repeated count (a redraw, another rank's copy). The validation warm-up reruns the prompt
        and decode bars after the warm-up: those are its own phase, "validation"."""
        phase = "validation" if self._validating and e.phase in ("prompt", "decode") else e.phase
        bar = self._bars.get(phase)
        elapsed = e.elapsed_s or 0.0
        if not self.replay and self._line_bar_end is not None and self._line_bar_end >= elapsed:
            t -= self._line_bar_end - elapsed   # drawn before the line's last redraw, which arrived at t
        if bar is None or bar.total != e.total or (bar.done >= bar.total and e.done == 0):
            # a new bar: it began `elapsed` before now, and never before the previous bar's last count
            # (a log without timestamps reads every bar at the same instant)
            bar = self._bars[phase] = _Bar(e.total, e.done, max(t - elapsed, self._bars_end), t)
        elif e.done <= bar.done:
            return None
        bar.done = e.done
        out = replace(e, phase=phase, bar_started_s=bar.started)
        bar.last = out.at_s if out.at_s is not None else t
        self._bars_end = max(self._bars_end, bar.last)
        return out

    def _continue_traceback(self, key: tuple, prefix: LogPrefix, msg: str) -> tuple[list[Event], bool]:
        """-> (events, whether the line belonged to the traceback)."""
        first, lines = self._tracebacks_open[key]
        stripped = msg.strip()
        if stripped == _TRACEBACK_START:   # a new one without an exception line for the old
            self._tracebacks_open[key] = (prefix, [stripped])
            return self._emit_traceback(first, lines, None, ""), True
        m = _EXCEPTION_LINE.match(stripped)
        if (not stripped or msg[:1] in (" ", "\t") or _FRAME.match(msg) or _CHAINED.match(stripped)
                or _FRAME_HEAD.match(msg)
                or (not m and (_FRAME_ANYWHERE.search(lines[-1]) or _FRAME_HEAD.match(lines[-1])))):  # its code
            lines.append(msg)
            return [], True
        del self._tracebacks_open[key]
        if not m:   # neither frame nor exception: the log lost the traceback's end; read this line afresh
            return self._emit_traceback(first, lines, None, ""), False
        lines.append(msg)
        if not _PYDANTIC_HEAD.match((m["msg"] or "").strip()):
            return self._emit_traceback(first, lines, m["type"], m["msg"] or ""), True
        # pydantic's "1 validation error for ModelConfig": the error itself follows; held until it has
        self._exception_tails[key] = (first, lines, m["type"], m["msg"].strip(), [], self._feeds)
        return [], True

    def _close_tail(self, key: tuple) -> list[Event]:
        """Emit a pydantic ValidationError held for the lines that say it: "1 validation error for ModelConfig"
        then "Value error, <what>" becomes "ModelConfig: <what>"; a field's error "CacheConfig:
        gpu_memory_utilization: Input should be ... (given 1.5)"; the "For further information" link dropped."""
        first, lines, exc_type, message, tail, fed = self._exception_tails.pop(key)
        said = [_said(t) for t in tail if not t.startswith("For further information")]
        said = [t for t in said if t]
        if said:
            lines = lines + tail
            message = f"{_PYDANTIC_HEAD.match(message)['config']}: " + " ".join(
                f"{t}:" if _PYDANTIC_FIELD.match(t) else _PYDANTIC_KIND.sub("", t) for t in said)
        return self._emit_traceback(first, lines, exc_type, message, self._feeds - fed)

    def _emit_traceback(self, prefix: LogPrefix, lines: list[str], exc_type: str | None,
                        message: str, later_feeds: int = 0) -> list[Event]:
        tb = Traceback(exc_type=exc_type, message=message, text="\n".join(lines), prefix=prefix,
                       later_feeds=later_feeds)
        events: list[Event] = [tb]
        kind = _oom_kind(f"{exc_type or ''}: {message}") if exc_type else None
        if kind:
            events.append(OutOfMemory(kind=kind, message=f"{exc_type}: {message}", prefix=prefix))
        for event in events:
            self._update(event, None)
        return events

    def _close_omitted(self) -> list[Event]:
        if self._omitted_open is None:
            return []
        prefix, lines = self._omitted_open
        self._omitted_open = None
        event = _parse_message(prefix, "\n".join(lines))
        if event is None:
            return []
        self._update(event, None)
        return [event]

    def record(self, event: Event, t: float | None = None) -> None:
        """Update the running state from an event parsed elsewhere (e.g. a filtered replay of a log)."""
        self._update(event, t)

    # -- state -----------------------------------------------------------------------------------

    def _update(self, event: Event, t: float | None) -> None:
        handler = self._HANDLERS.get(type(event))
        if handler:
            handler(self, event, t)

    def _on_config(self, e: BucketConfig, t):
        self._configs[e.phase] = e

    def _on_variable(self, e: BucketVariable, t):
        self._variables[e.name] = e

    def _on_override(self, e: ExponentialOverride, t):
        self._overrides.append(e.name)

    def _on_generated(self, e: GeneratedBuckets, t):
        self._generated[e.phase] = e

    def _on_omitted(self, e: OmittedBuckets, t):
        self._omitted[e.phase] = e

    def _on_memory(self, e: MemorySplit, t):
        self._memory = e

    def _on_usable(self, e: UsableBlocks, t):
        self._usable = e
        self._hpu_blocks = usable_kv_blocks(e)

    def _on_blocks(self, e: HpuBlocks, t):
        self._hpu_blocks = e.blocks

    def _on_model(self, e: ModelLoaded, t):
        self._model = _merge(self._model, e)

    def _on_kv(self, e: KvCacheSize, t):
        self._kv = _merge(self._kv, e)

    def _on_budget(self, e: GraphBudget, t):
        self._budget = e
        self._stage = "warmup"

    def _on_step(self, e: WarmupStep | WarmupProgress, t):
        self._stage = "warmup"
        now = self._clock() if t is None else t
        key = e.key
        if isinstance(e, WarmupStep):
            completed, started = e.index - 1, e.index
        else:
            completed, started = e.done, e.done
        ph = self._phases.get(key)
        if ph is None:
            ph = self._phases[key] = _PhaseProgress(total=e.total)
        ph.total = e.total
        if key != self._current_phase:
            self._close_current_phase()
            self._current_phase = key
            ph.runs.append([])
        ph.completed = max(ph.completed, completed)
        ph.started = max(ph.started, started)
        ph.last_t = now
        ph.runs[-1].append((now, completed))

    def _close_current_phase(self):
        if self._current_phase is not None:
            ph = self._phases[self._current_phase]
            ph.completed = max(ph.completed, ph.started)   # its last started step has ended

    def _on_milestone(self, e: Milestone, t):
        if e.name == "validation_warmup":
            self._validating = True
        elif e.name == "validation_warmup_done":
            self._validating = False

    def _on_captured(self, e: GraphCaptured, t):
        self._captured[e.phase] = e

    def _on_finished(self, e: WarmupFinished, t):
        self._close_current_phase()
        self._finished = e
        if self._stage in ("startup", "warmup"):
            self._stage = "ready"

    def _on_skip(self, e: SkipWarmup, t):
        self._skipped = True
        if self._stage in ("startup", "warmup"):
            self._stage = "ready"

    def _on_not_warmed(self, e: NotWarmedUp, t):
        self._not_warmed.setdefault((e.phase, e.shape), e)

    def _on_not_prepared(self, e: BucketNotPrepared, t):
        # once per shape, as not-warmed-up ones: every tensor-parallel rank prints its own copy
        self._not_prepared.setdefault((e.phase, e.requested, e.new_bucket), e)

    def _on_stats(self, e: EngineStats, t):
        self._preempt_interval += e.preemptions  # v1 counts them per stats interval

    def _on_preemption(self, e: Preemption, t):
        self._preempt_events += 1
        if e.cumulative is not None:
            self._preempt_cumulative = max(self._preempt_cumulative, e.cumulative)

    def _on_step_compile(self, e: StepGraphCompilation, t):
        self._step_compiles[2] += e.compilations
        if self._stage in ("ready", "serving") and e.compilations > 0:
            self._step_compiles[0] += 1
            self._step_compiles[1] += e.compilations

    def _on_oom(self, e: OutOfMemory, t):
        if self._oom is None:
            self._oom, self._oom_stage = e, self._stage

    def _on_error(self, e: ErrorLine, t):
        self._errors.append(e.message.strip())

    def _on_traceback(self, e: Traceback, t):
        self._tracebacks.append(e)
        self._errors.append(f"{e.exc_type}: {e.message}" if e.exc_type else "incomplete traceback")

    def _on_listening(self, e: ServerListening, t):
        self._url = e.url or self._url
        self._startup_complete = self._startup_complete or e.startup_complete
        self._stage = "serving"

    def _on_engine(self, e: EngineInfo, t):
        self._version = e.version or self._version
        self._platform = e.platform or self._platform

    def _on_engine_init(self, e: EngineInitialized, t):
        self._engine_init = e.seconds

    def _on_compile(self, e: CompileTime, t):
        if e.kind == "total":
            self._compile_s = e.seconds

    _HANDLERS = {
        BucketConfig: _on_config, BucketVariable: _on_variable, ExponentialOverride: _on_override,
        GeneratedBuckets: _on_generated, OmittedBuckets: _on_omitted, MemorySplit: _on_memory,
        UsableBlocks: _on_usable, HpuBlocks: _on_blocks, ModelLoaded: _on_model, KvCacheSize: _on_kv,
        GraphBudget: _on_budget, WarmupStep: _on_step, WarmupProgress: _on_step,
        GraphCaptured: _on_captured, WarmupFinished: _on_finished, SkipWarmup: _on_skip,
        NotWarmedUp: _on_not_warmed, BucketNotPrepared: _on_not_prepared, Preemption: _on_preemption,
        StepGraphCompilation: _on_step_compile,
        OutOfMemory: _on_oom, ErrorLine: _on_error, Traceback: _on_traceback,
        ServerListening: _on_listening, EngineInfo: _on_engine, EngineInitialized: _on_engine_init,
        CompileTime: _on_compile, Milestone: _on_milestone, EngineStats: _on_stats,
    }

    # -- output ----------------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        return self._stage

    @property
    def prompt_buckets(self) -> tuple[tuple[int, ...], ...] | None:
        return generated_buckets(self._generated, "prompt")

    @property
    def decode_buckets(self) -> tuple[tuple[int, ...], ...] | None:
        return generated_buckets(self._generated, "decode")

    @property
    def hpu_blocks(self) -> int | None:
        return self._hpu_blocks

    @property
    def warmup_finished(self) -> WarmupFinished | None:
        return self._finished

    @property
    def oom_seen(self) -> bool:
        return self._oom is not None

    @property
    def preemptions(self) -> int:
        return max(self._preempt_events, self._preempt_cumulative, self._preempt_interval)

    @property
    def compilations_under_load(self) -> int:
        """Graphs compiled while serving, from the fork's per-step compilation log (0 without it)."""
        return self._step_compiles[1]

    @property
    def not_warmed_up(self) -> tuple[NotWarmedUp, ...]:
        return tuple(self._not_warmed.values())

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(self._errors)

    def summary(self) -> WatchSummary:
        return WatchSummary(
            stage=self._stage, bucket_configs=dict(self._configs), bucket_variables=dict(self._variables),
            exponential_overrides=tuple(self._overrides), generated=dict(self._generated),
            omitted=dict(self._omitted), memory_split=self._memory, usable_blocks=self._usable,
            hpu_blocks=self._hpu_blocks, model_loaded=self._model, kv_cache=self._kv,
            graph_budget=self._budget,
            warmup_steps={k: (p.completed, p.total) for k, p in self._phases.items()},
            graph_captured=dict(self._captured), warmup_finished=self._finished,
            warmup_skipped=self._skipped, not_warmed_up=self.not_warmed_up,
            buckets_not_prepared=tuple(self._not_prepared.values()), preemptions=self.preemptions,
            oom=self._oom, oom_stage=self._oom_stage, errors=tuple(self._errors),
            tracebacks=tuple(self._tracebacks), listening_url=self._url,
            startup_complete=self._startup_complete, engine_version=self._version,
            platform=self._platform, engine_init_s=self._engine_init, compile_s=self._compile_s,
            compile_steps_under_load=self._step_compiles[0],
            compilations_under_load=self._step_compiles[1], compilations_logged=self._step_compiles[2])

    def progress(self) -> tuple[str, int, int] | None:
        """(phase, done, total) for a progress bar: the warm-up phase in progress ("prompt", "decode",
        "graph/prompt", ...) with its finished steps, or ("finished", n, n) once warm-up ended
        (n = steps over all phases); None before any warm-up line."""
        if self._finished is not None or self._skipped:
            n = sum(p.total for p in self._phases.values())
            return ("finished", n, n)
        if self._current_phase is None:
            return None
        ph = self._phases[self._current_phase]
        return (self._current_phase, ph.completed, ph.total)

    def seconds_per_step(self, phase: str | None = None) -> float | None:
        """Mean seconds per warm-up step seen in `phase` (all phases when None)."""
        dt = steps = 0.0
        for key, ph in self._phases.items():
            if phase is not None and key != phase:
                continue
            for run in ph.runs:
                for (t0, c0), (t1, c1) in zip(run, run[1:]):
                    if c1 > c0:
                        dt, steps = dt + (t1 - t0), steps + (c1 - c0)
        return dt / steps if steps else None

    def projected_remaining_s(self, now: float | None = None) -> float | None:
        """Seconds of warm-up left, extrapolated linearly from the arrival times of the warm-up lines:
        the rest of the current phase at its own pace, plus every phase still to come whose size is
        known (decode after prompt; graph phases when `expect_graphs` or once one started) at its own
        pace or, unseen, the mean pace so far. 0.0 once finished; None while no pace is known."""
        if self._finished is not None or self._skipped:
            return 0.0
        if self._current_phase is None:
            return None
        now = self._clock() if now is None else now
        overall = self.seconds_per_step()
        pace = self.seconds_per_step(self._current_phase) or overall
        if pace is None:
            return None
        ph = self._phases[self._current_phase]
        remaining = max(0.0, ph.last_t + (ph.total - ph.completed) * pace - now)
        for phase, total in self._future_phases():
            remaining += total * (self.seconds_per_step(phase) or overall or pace)
        return remaining

    def _future_phases(self) -> list[tuple[str, int]]:
        counts = {p: g.count for p, g in self._generated.items()}
        graphs = self.expect_graphs or self._budget is not None
        following = {
            "prompt": ["decode"] + (["graph/prompt", "graph/decode"] if graphs else []),
            "decode": ["graph/prompt", "graph/decode"] if graphs else [],
            "graph/prompt": ["graph/decode"],
        }.get(self._current_phase, [])
        out = []
        for phase in following:
            total = counts.get(phase.split("/")[-1])
            if phase not in self._phases and total:
                out.append((phase, total))
        return out
