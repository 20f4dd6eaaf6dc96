"""Read a server log as users paste it: every line through the log parser, one rank's view kept.

Real logs arrive with `docker logs -t` / `kubectl logs --timestamps` stamps, ANSI colours, Ray or
multiprocessing tags (`(RayWorkerWrapper pid=.., ip=..)`, `(VllmWorker rank=1 pid=..)`), several
tensor-parallel ranks printing the same warm-up lines interleaved, and lines cut or wrapped by a
terminal. The parser already strips prefixes; this module adds what only a whole log shows: which
process speaks for the server (the first one that prints bucket or warm-up lines; the others are
counted as duplicate ranks), when each event happened, which lines nobody could read, which lines stand
for left-out ones (`...`), and, as logparse.steptimes reads every log, where one start of the server
ends and the next begins and what its warm-up lines time: the summary is of one run, never of two added.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from itertools import chain, islice

from ..logparse import (
    BucketConfig,
    ErrorLine,
    Event,
    GeneratedBuckets,
    GraphCaptured,
    LogWatcher,
    OmittedBuckets,
    OutOfMemory,
    Traceback,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
    WatchSummary,
)
from ..logparse.prefix import split_prefix
from ..logparse.runs import Run
from ..logparse.steptimes import StepTimes, events_of, is_elision, read_step_times
from .command import CommandCollector
from .unwrap import unwrap, wrap_width

# Events every tensor-parallel rank prints once per rank; only the leading process's copy counts.
_PER_RANK = (BucketConfig, GeneratedBuckets, OmittedBuckets, WarmupStep, GraphCaptured, WarmupFinished)
# A line that looks like a log record (a level word or a bracketed source) but that no rule read.
_LOOKS_LOGGED = re.compile(r"\b(INFO|WARNING|WARN|ERROR|CRITICAL|DEBUG)\b|\[[\w.\-]+\.py:\d+\]")


@dataclass(frozen=True)
class TimedEvent:
    line_no: int            # 1-based line number in the input
    time_s: float | None  # seconds since the first timestamped line (None: the line had no time)
    event: Event
    text: str               # the line as read (prefix stripped of ANSI codes), for quoting


@dataclass
class LogReading:
    summary: WatchSummary
    events: list[TimedEvent]
    lines: int = 0
    unread: int = 0                      # non-blank log-looking lines no rule recognised
    unread_examples: list[str] = field(default_factory=list)
    duplicate_rank_lines: int = 0
    processes: list[str] = field(default_factory=list)   # "VllmWorker pid=12" ...
    leader: str | None = None
    first_time: str | None = None
    last_time_s: float | None = None
    elisions: list[int] = field(default_factory=list)    # lines that stand for left-out lines (`...`)
    step_times: StepTimes | None = None  # runs and their timed intervals, in each run's own order
    runs: list[Run] = field(default_factory=list)
    primary: Run | None = None           # the run the summary and the timeline describe
    log_summary: WatchSummary | None = None   # the whole log, every run fed to one watcher
    settings_text: list[str] = field(default_factory=list)   # engine config / server argument lines
    command_settings: str | None = None  # the pasted launch command's settings (command.py), as `name=value`

    def of_type(self, kind) -> list[TimedEvent]:
        return [e for e in self.events if isinstance(e.event, kind)]

    def run_events(self, run: Run | None = None) -> list[TimedEvent]:
        """The events of `run` (default: the primary run), after those of the run that lent it its
        bucket lines."""
        run = run or self.primary
        if run is None:
            return list(self.events)
        lent = self.runs[run.lender] if run.lender is not None else None
        return (self.events[lent.first:lent.end] if lent else []) + self.events[run.first:run.end]

    @property
    def problems(self) -> list[TimedEvent]:
        return [e for e in self.events if isinstance(e.event, (OutOfMemory, Traceback, ErrorLine))]


def _timestamp(prefix) -> datetime | None:
    """vLLM prints `MM-DD HH:MM:SS[.fff]` without a year; docker/kubectl stamps are full ISO times."""
    if prefix.docker_time:
        text = prefix.docker_time.rstrip("Z").replace(",", ".")
        text = re.sub(r"[+-]\d\d:?\d\d$", "", text)
        if "." in text:  # nanoseconds -> microseconds
            head, frac = text.split(".", 1)
            text = f"{head}.{frac[:6]}"
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            pass
    if prefix.timestamp:
        try:  # a leap year, so that 02-29 parses
            return datetime.strptime("2000-" + prefix.timestamp.split(".")[0], "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
    return None


def _process_key(prefix) -> str | None:
    return f"{prefix.process} pid={prefix.pid}" if prefix.pid is not None else None


def _rank_key(prefix) -> str | None:
    """Which process printed a per-rank line. With the v0 multiprocessing executor the driver (rank 0)
    prints untagged while the other ranks' lines carry `(VllmWorkerProcess pid=..)`: an untagged vLLM
    line is the driver's."""
    key = _process_key(prefix)
    if key is None and prefix.level is not None:
        return "driver (untagged)"
    return key


PRIME_LINES = 5000  # a paste's own line prefix is learned from the records among the first lines


def _primed(lines: Iterable[str], watcher: LogWatcher) -> Iterable[str]:
    """The lines, after the watcher learned the paste's own prefix from the first ones; records a terminal cut
    at its width joined again (line numbers kept)."""
    lines = iter(lines)
    head = list(islice(lines, PRIME_LINES))
    width = wrap_width(head)
    if width is None:
        watcher.prime(head)
        return chain(head, lines)
    # learned from whole records: the pieces of cut ones would teach it their own starts ("py:671] ")
    watcher.prime(x for x in unwrap(head, width) if x is not None)
    return unwrap(chain(head, lines), width, watcher.paste)


def read_log(lines: Iterable[str]) -> LogReading:
    """Parse a whole log. Never raises on content: what it cannot read it counts."""
    watcher = LogWatcher(clock=lambda: 0.0, replay=True)
    lines = _primed(lines, watcher)
    reading = LogReading(summary=watcher.summary(), events=[])
    t0: datetime | None = None
    last: float | None = None
    processes: dict[str, None] = {}
    ranked: list[tuple[TimedEvent, str | None]] = []
    command = CommandCollector()
    fed: list[int] = []  # the line number of each line fed to the watcher (a held traceback points back)
    for number, raw in enumerate(lines, start=1):
        reading.lines += 1
        if not isinstance(raw, str):
            continue
        line = raw.rstrip("\r\n")
        if not line.strip():
            command.feed(line)
            continue
        if is_elision(line):
            reading.elisions.append(number)
        try:
            prefix, message = split_prefix(line.split("\r")[-1] if "\r" in line else line, watcher.paste,
                                           learn=False)  # the watcher learns from it below
        except Exception:  # the parser's contract is never to raise; keep ours even if it did
            prefix, message = None, line
        # a pasted command, read without the paste's layers (stamps, pod, quote) and never from a log record
        command.feed(line if prefix is None else message, record=prefix is not None and prefix.level is not None)
        stamp = _timestamp(prefix) if prefix is not None else None
        before = last
        if stamp is not None:
            if t0 is None:
                t0 = stamp
                reading.first_time = prefix.docker_time or prefix.timestamp
            elapsed = (stamp - t0).total_seconds()
            if elapsed < -300 * 86400:  # a log across New Year: vLLM's stamps carry no year
                elapsed += 366 * 86400
            last = elapsed
        key = _process_key(prefix) if prefix is not None else None
        if key:
            processes.setdefault(key, None)
        fed.append(number)
        try:
            events = watcher.feed(line, t=_feed_time(line, before, last))
        except Exception:
            events = []
        rank = _rank_key(prefix) if prefix is not None else None
        for event in events:
            ranked.append((TimedEvent(_line_of(event, fed, number), _event_time(event, stamp, last, t0), event, line),
                           rank))
        _keep_settings(reading, message or "")
        if not events and not watcher.absorbed:
            _count_unread(reading, prefix, message, line)
    for event in watcher.flush():
        ranked.append((TimedEvent(_line_of(event, fed, reading.lines), last, event, ""), None))
    if t0 is None:
        ranked = _bars_on_their_clocks(ranked)
    _keep_one_rank(reading, ranked)
    reading.step_times = read_step_times(events_of(reading.events), reading.elisions)
    reading.runs = reading.step_times.runs
    reading.primary = reading.step_times.run
    reading.log_summary = _summary_of(reading.events)
    reading.summary = _summary_of(reading.run_events()) if len(reading.runs) > 1 else reading.log_summary
    reading.processes = list(processes)
    reading.command_settings = command.settings()
    reading.last_time_s = last
    return reading


def _line_of(event, fed: list[int], number: int) -> int:
    """The line an event belongs to: where it was read, or for a traceback held for its message's
    continuation lines, its exception line."""
    back = getattr(event, "later_feeds", 0)
    return fed[-1 - back] if back and back < len(fed) else number


def _count_unread(reading: LogReading, prefix, message: str | None, line: str) -> None:
    """A line that yielded no event: counted when it looks like a log record we should have read."""
    logged = prefix is not None and prefix.level is not None
    if logged and not (message or "").strip():
        return  # a record with no message
    if prefix is not None and (prefix.source or "").startswith("habana:"):
        return  # the runtime's error burst: its verdict line is the one reported (logparse.message)
    if (logged or _LOOKS_LOGGED.search(line)) and not _UNINTERESTING.search(message or line):
        reading.unread += 1
        if len(reading.unread_examples) < 5:
            reading.unread_examples.append(line[:200])


def _feed_time(line: str, before: float | None, last: float | None) -> float:
    """The time a line is fed at: redraws of a bar (`\r`) began before this line's stamp, which belongs to the
    record at its end."""
    return (before if "\r" in line else last) or 0.0


def _bars_on_their_clocks(ranked: list[tuple[TimedEvent, str | None]]) -> list[tuple[TimedEvent, str | None]]:
    """A log without any timestamp: the tqdm bars' own clocks still time their steps."""
    return [(replace(te, time_s=te.event.at_s) if isinstance(te.event, WarmupProgress) else te, rank)
            for te, rank in ranked]


def _event_time(event: Event, stamp, last: float | None, t0) -> float | None:
    """A stamped line's time; a tqdm bar's redraw (no stamp of its own) is timed by the bar's clock, which
    the watcher started at the last stamp before the bar (so bars before any stamp wait for the end)."""
    if isinstance(event, WarmupProgress) and stamp is None:
        return event.at_s if t0 is not None else None
    return last if stamp is not None else None


def _keep_settings(reading: LogReading, message: str) -> None:
    """Keep a line that carries settings, or the device memory a Gaudi line reports (the first eight)."""
    if (_SETTINGS.search(message) or (not reading.settings_text and "GiB used)" in message)) \
            and len(reading.settings_text) < 8:
        reading.settings_text.append(message)


def _keep_one_rank(reading: LogReading, ranked: list[tuple[TimedEvent, str | None]]) -> None:
    """Per-rank lines (buckets, warm-up steps, graph summaries) are kept from one process per kind: the
    first that prints that kind. The v0 driver prints untagged and its workers tagged; a doc may show
    the bucket list untagged and the warm-up from `(EngineCore_DP0 ..)`: both are the one speaker."""
    leaders: dict[type, str] = {}
    for timed, rank in ranked:
        if isinstance(timed.event, _PER_RANK) and rank is not None:
            leaders.setdefault(type(timed.event), rank)
    reading.leader = leaders.get(WarmupStep) or next(iter(leaders.values()), None)
    for timed, rank in ranked:
        if isinstance(timed.event, _PER_RANK) and rank is not None and rank != leaders[type(timed.event)]:
            reading.duplicate_rank_lines += 1
            continue
        reading.events.append(timed)


# Records every vLLM startup prints that carry nothing a bucket-tuner user needs (kept out of the
# unread count so that it measures what we fail to read, not what we chose to ignore). Named one by one:
# a broad word ("HPU", "VLLM_") would hide the records we should read and do not.
_UNINTERESTING = re.compile(
    r"non-default args|Available routes|Route: |Started server process|Waiting for application|"
    r"Automatically detected platform|Using .* backend|Chunked prefill|Initializing a V\d LLM engine|"
    r"Loading safetensors|Starting to load model|Loading weights took|Resolved architecture|"
    r"HTTP Request:|GET /|POST /|\"GET |\"POST |default_chat_template|No chat template|Supported_tasks|"
    r"^Detected flags: \[|"  # vllm-hpu-extension's capability flags: read for the device (serverfacts)
    r"Using max model len|This model|torch.compile|Dynamo|cudagraph|CUDA graph|"
    r"Waiting for|world_size|distributed_init|"
    r"tokenizer|Tokenizer|sampling|Sampling|generation config|Default sampling|"
    # vLLM 0.1x+ start: its banner, the host's limits, plugins and optional libraries it looked for
    r"[█▀▄]|Found ulimit|Final IR op priority|Available plugins for group|^- \w+ -> |Triton is installed|"
    r"Triton not installed|Failed to import from vllm\._C|NIXL|UCX_|Using model weights format|"
    r"Using supplied chat template|Profiler enabled for|is already registered, and will be overwritten|"
    r"Triton|LD_PRELOAD|OpenMP thread binding|^\s*(?:local_rank|reserved_cpus|VLLM_CPU_OMP_THREADS_BIND)=|"
    r"Model Runner V2|Reducing Torch threads|oneDNN|All plugins in this group|"
    r"Pin memory is not supported|Wrapping in HPU ?Graph took|Core engine process \d+ ready|"
    r"Downcasting torch\.\w+ to torch\.|Initializing KVConnectorBase|"
    r"\] LMCache (?:INFO|WARNING|DEBUG):|"  # LMCache's own logger (a KV offload connector): nothing of buckets
    r"Inductor compilation was disabled|is assigned as DP rank|KV cache layout|Supported tasks|Scale-out endpoints|"
    r"Disabled the custom all-reduce kernel|^Methods [\w,]+ not implemented in <|"
    # v0 executor: the cache engine and its warm-up together (the cache's own size is its worker's line)
    r"init_cache_engine took|"
    # vllm-gaudi's sampler warm-up, one line per sampling setting it compiles
    r"^temp=[\d.]+, top_p=|"
    # the headers of vllm-hpu-extension's runtime dump (its key: value rows are read)
    r"^(?:User flags|Environment|Features):\s*$|"
    # vllm-gaudi's platform on every start: its memory workaround, the worker start method, vLLM's compile pipeline
    # off (the HPU compiles its own way), the host threads for the load; a banner of stars around a warning
    r"This is a workaround! Please check the NOTE|VLLM_WORKER_MULTIPROC_METHOD=fork might cause|"
    r"Forcing CompilationMode|^Setting OMP_NUM_THREADS to|^Compilation took [\d.]+ GB|^\*{10,}\s*$|"
    r"Detected the chat template content format")


def _summary_of(events: list[TimedEvent]) -> WatchSummary:
    """The watcher's summary, re-fed with only the leading rank's per-rank events (so that counts of
    warm-up steps and captured graphs are one rank's, not the sum of all ranks) of the given run."""
    watcher = LogWatcher(clock=lambda: 0.0)
    for timed in events:
        watcher.record(timed.event, timed.time_s or 0.0)
    return watcher.summary()


# Lines that carry the server's settings: the engine's config line, the API server's arguments.
_SETTINGS = re.compile(r"with config: |non-default args: |args: Namespace\(|^Detected flags: \[|"
                       r"^Chunked prefill is enabled with max_num_batched_tokens=|^Auto-fit max_model_len: ")
