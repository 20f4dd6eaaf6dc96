"""A trial's server log, read back for the report: buckets per phase, graphs captured, how long each
startup phase took (from the log's own timestamps), runtime recompiles and preemptions, and the
lines worth showing when it failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from ..logparse import (
    GeneratedBuckets,
    GraphBudget,
    GraphCaptured,
    LogWatcher,
    ModelLoaded,
    ProfilingRun,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
    starts_an_error,
)

# Spans between the log's own timestamps. The first runs from the log's first stamped line (imports,
# engine start) to "weights loaded": not the weight loading itself, which `LogFacts.weights_s` holds
# when the log states it ("Loading weights took 3.21 seconds").
START = "start to weights loaded"
PHASES = (START, "profiling", "prompt warmup", "decode warmup", "graph capture")
_EXCERPT_LINES = 14
_MAX_LINE = 240


@dataclass
class LogFacts:
    generated: dict[str, GeneratedBuckets] = field(default_factory=dict)  # phase -> bucket list line
    captured: dict[str, GraphCaptured] = field(default_factory=dict)      # "Graph/Prompt" -> count
    phase_s: dict[str, float] = field(default_factory=dict)               # PHASES -> seconds
    weights_s: float | None = None                                        # the log's "took N seconds"
    warmup_s: float | None = None
    not_warmed_up: list[str] = field(default_factory=list)                # "decode (32, 640)"
    preemptions: int = 0
    excerpt: list[str] = field(default_factory=list)

    def graphs(self, phase: str) -> int | None:
        for key, cap in self.captured.items():
            if key.split("/")[-1].lower() == phase:
                return cap.count
        return None


def _stamp(prefix) -> datetime | None:
    """vLLM prints month-day and time, no year: a fixed leap year keeps Feb 29 and the order."""
    if prefix.docker_time:
        try:
            return datetime.fromisoformat(prefix.docker_time.replace("Z", "+00:00")[:26])
        except ValueError:
            pass
    if prefix.timestamp:
        try:
            return datetime.strptime("2000-" + prefix.timestamp.split(".")[0], "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
    return None


def read_log(path: str | Path | None) -> LogFacts | None:
    if not path or not Path(path).is_file():
        return None
    lines = Path(path).read_text(errors="replace").splitlines()
    watcher = LogWatcher()
    marks: dict[str, datetime] = {}
    first = last = None
    weights_s = None
    for line in lines:
        for e in watcher.feed(line, 0.0):
            if isinstance(e, ModelLoaded) and e.seconds is not None:
                weights_s = e.seconds
            ts = _stamp(e.prefix)
            if ts is None:
                continue
            if last is not None and ts < last:  # the year turned over during the run
                ts += timedelta(days=366)
            first, last = first or ts, ts
            _mark(marks, e, ts)
    watcher.flush()
    s = watcher.summary()
    facts = LogFacts(generated=dict(s.generated), captured=dict(s.graph_captured), preemptions=s.preemptions,
                     warmup_s=float(s.warmup_finished.seconds) if s.warmup_finished else None, weights_s=weights_s)
    facts.not_warmed_up = [f"{e.phase} {tuple(e.shape)}" for e in s.not_warmed_up]
    facts.not_warmed_up += [f"{e.phase} {tuple(e.requested)} -> {tuple(e.new_bucket)}" for e in s.buckets_not_prepared]
    if first is not None:
        marks.setdefault("start", first)
        facts.phase_s = _phase_seconds(marks)
    facts.excerpt = excerpt(lines)
    return facts


def _mark(marks: dict[str, datetime], e, ts: datetime) -> None:
    if isinstance(e, ModelLoaded):
        marks["weights"] = ts  # the last "took" line of weight loading
    elif isinstance(e, ProfilingRun):
        marks.setdefault("profiled", ts)
    elif isinstance(e, (WarmupStep, WarmupProgress)):
        key = e.key
        if key.startswith("graph/"):
            marks.setdefault("graph", ts)
        elif key in ("prompt", "decode"):
            marks.setdefault(key, ts)
    elif isinstance(e, GraphBudget):
        marks.setdefault("graph", ts)
    elif isinstance(e, WarmupFinished):
        marks["finished"] = ts


def _phase_seconds(m: dict[str, datetime]) -> dict[str, float]:
    """Each phase runs from its first line to the first line of the next phase that was seen."""
    order = [(START, "start", "weights"), ("profiling", "weights", "prompt"),
             ("prompt warmup", "prompt", "decode"), ("decode warmup", "decode", "graph"),
             ("graph capture", "graph", "finished")]
    later = ["start", "weights", "prompt", "decode", "graph", "finished"]
    out = {}
    for name, begin, end in order:
        if begin not in m:
            continue
        # the phase ends where the next one seen begins
        following = [m[k] for k in later[later.index(end):] if k in m]
        if not following:
            continue
        out[name] = max(0.0, (following[0] - m[begin]).total_seconds())
    return out


def _access_log(line: str) -> bool:
    return '"POST /' in line or '"GET /' in line


def excerpt(lines: list[str]) -> list[str]:
    """From the first error or traceback line on (a warning that quotes an error is not one), else the
    last lines (HTTP access lines left out)."""
    useful = [ln for ln in lines if ln.strip() and not _access_log(ln)]
    for i, ln in enumerate(useful):
        if starts_an_error(ln):
            return [x[:_MAX_LINE] for x in useful[i:i + _EXCERPT_LINES]]
    return [x[:_MAX_LINE] for x in useful[-_EXCERPT_LINES:]]
