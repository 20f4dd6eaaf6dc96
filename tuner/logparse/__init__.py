"""vLLM server log lines -> typed events.

Covers vLLM on Intel Gaudi (HabanaAI/vllm-fork 1.17 .. 1.22 with vllm-hpu-extension, and the
vllm-project/vllm-gaudi plugin) and a generic vLLM (the CPU build, upstream v0/v1 engine lines).
Every format below was taken from docs/bucketing.md (sections C and D), the verbatim
logs in tests/data/log-samples/, the log lines recorded in tests/data/vectors/, the CPU startup log in
docs/real-vllm-cpu.md, or the upstream source that prints the line (named next to it).

Public API
    parse_line(line) -> Event | None      one line (or one multi-line record) -> one event
    LogWatcher                            stateful: multi-line constructs, running summary,
                                          warm-up progress and time projection; feed() takes lines,
                                          feed_stream() raw output as it arrives (tqdm redraws read
                                          before their bar's newline)
    parse_bytes("7.923 GiB") -> int

Package map (each module imports only the ones above it)
    units.py      byte amounts: parse_bytes, the `_B` amount pattern
    prefix.py     line prefix: colours, paste/collector layers (kubectl, journalctl, compose, CRI, k9s, markdown),
                  docker timestamp, process tag or [rankN]:, Habana runtime / vLLM / uvicorn logger -> LogPrefix
    events.py     the event dataclasses (Event, its 33 subclasses, BucketRange)
    values.py     small value readers shared by the rules (numbers, int tuples, bucket lists, tqdm clocks
                  and rates)
    rules.py      the (regex, builder) rule table, in match order, and the milestone markers; TQDM_WARMUP,
                  the plugin's warm-up bar
    message.py    one message -> one event (rules, then OOM texts, then ERROR lines)
    summary.py    WatchSummary, the snapshot a LogWatcher returns
    watcher.py    LogWatcher: tracebacks, multi-line lists, tqdm bars (every redraw, cut by spliced records,
                  one count once over ranks, on the bar's own clock), running state, progress and projection
    parse.py      parse_line, the stateless entry point (a multi-line record goes through a LogWatcher)
    cause.py      last_error / starts_an_error: the line that states a failure (never a warning)
    runs.py       a whole log's events -> its starts of the server (runs) and each run's warm-up and end lines
    steptimes.py  runs -> intervals a log really times (step, gap over elided lines, dropped), in a step order;
                  the one reading `explain` and calibration share
"""

from __future__ import annotations

from .cause import last_error, starts_an_error
from .events import (
    BucketClamp,
    BucketConfig,
    BucketNotPrepared,
    BucketRange,
    BucketVariable,
    CompileTime,
    ConfigValue,
    EngineInfo,
    EngineInitialized,
    EngineStats,
    ErrorLine,
    Event,
    ExperimentalFlags,
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
    ProfilingRun,
    ServerListening,
    ServerNotice,
    SkipWarmup,
    StepGraphCompilation,
    Traceback,
    UsableBlocks,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
)
from .parse import parse_line
from .prefix import NO_PREFIX as NO_PREFIX
from .prefix import LogPrefix
from .rules import Builder as Builder
from .summary import WatchSummary
from .units import parse_bytes
from .watcher import LogWatcher

__all__ = [
    "parse_line", "parse_bytes", "LogWatcher", "last_error", "starts_an_error", "WatchSummary", "LogPrefix",
    "Event", "BucketRange",
    "BucketConfig", "BucketVariable", "BucketClamp", "ExponentialOverride", "ConfigValue",
    "ExperimentalFlags", "GeneratedBuckets", "OmittedBuckets", "MemorySplit", "UsableBlocks",
    "HpuBlocks", "ModelLoaded", "ProfilingRun", "KvCacheSize", "WarmupStep", "WarmupProgress",
    "GraphBudget", "GraphCaptured", "WarmupFinished", "SkipWarmup", "NotWarmedUp",
    "BucketNotPrepared", "StepGraphCompilation", "Preemption", "OutOfMemory", "ServerListening", "EngineInfo",
    "EngineInitialized", "CompileTime", "EngineStats", "Milestone", "ServerNotice", "Traceback", "ErrorLine",
]
