"""What a read log says: the release that wrote it, the settings in force, the buckets, the memory split,
the warm-up timeline and what went wrong. Pure functions of a `LogReading`."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from ..logparse import (
    BucketConfig,
    ConfigValue,
    EngineInfo,
    GeneratedBuckets,
    GraphCaptured,
    MemorySplit,
    ModelLoaded,
    OutOfMemory,
    ProfilingRun,
    Traceback,
    UsableBlocks,
    WarmupFinished,
    WarmupStep,
)
from .reading import LogReading, TimedEvent

FORK_2D = ("fork-1.19", "fork-1.20", "fork-1.21.0", "fork-1.21.2")
FORK_3D = ("fork-1.22", "fork-main", "fork-1.23")
PLUGIN = ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")


@dataclass(frozen=True)
class ReleaseGuess:
    family: str                      # "vllm-fork 1.22+ (v0, 3-D buckets)", "generic vLLM", ...
    profiles: tuple[str, ...]        # release profiles consistent with the log, oldest first
    engine: str | None            # "v0" | "v1" | None
    version: str | None           # as the log prints it
    evidence: tuple[str, ...]

    @property
    def profile(self) -> str | None:
        """The newest consistent profile: the one advice is computed with."""
        return self.profiles[-1] if self.profiles else None


# Sources that only vLLM on Gaudi prints from (fork runners/workers, the extension's bucketing and
# runtime dump, the plugin's platform), and the Habana runtime logger ("habana:<module>").
_GAUDI_SOURCES = re.compile(r"^(?:habana_|hpu_|hpu\.py$|runtime\.py$|exponential\.py$|linear\.py$|"
                            r"padding_aware\.py$|habana:)")
_GAUDI_TEXT = re.compile(r"hpu_model_runner\.py|hpu_worker\.py|habana_|vllm_gaudi|vllm_hpu_extension")


def _config_width(configs: list[BucketConfig]) -> int | None:
    """Bucket dimensions from the logged configs (a log cut before the generated lists): 3 with a
    query/blocks dimension (fork 1.22+, plugin), 2 with decode `block` (fork 1.18 .. 1.21)."""
    names = {name for c in configs for name, _ in c.dims}
    if names & {"query", "blocks"}:
        return 3
    if "block" in names:
        return 2
    return None


def _step_width(steps: list[WarmupStep]) -> int | None:
    """Bucket dimensions from eager warm-up lines: query_len only in 3-D warm-ups."""
    eager = [s for s in steps if s.batch_size is not None]
    if not eager:
        return None
    return 3 if any(s.query_len is not None for s in eager) else 2


def _v1_engine_signs(events: list, reading: LogReading) -> list[str]:
    signs = []
    if any(isinstance(e, EngineInfo) and e.engine == "v1" for e in events):
        signs.append("'Initializing a V1 LLM engine' line")
    if any(isinstance(e, ConfigValue) and e.name == "engine_version" and e.value.strip() == "v1" for e in events):
        signs.append("runtime dump engine_version: v1")
    if any(p.startswith(("EngineCore", "Worker_TP")) for p in reading.processes):
        signs.append("v1 engine process tags (EngineCore / Worker_TP)")
    return signs


def _on_gaudi(events: list, sources: set) -> bool:
    return (any(_GAUDI_SOURCES.match(s) for s in sources)
            or any(isinstance(e, EngineInfo) and e.platform == "hpu" for e in events)
            or any(isinstance(e, ConfigValue) and e.name == "hw" and e.value.startswith("gaudi") for e in events)
            or any(isinstance(e, (BucketConfig, GeneratedBuckets, WarmupStep)) for e in events)
            or any(isinstance(e, Traceback) and _GAUDI_TEXT.search(e.text) for e in events))


def detect_release(reading: LogReading) -> ReleaseGuess:
    events = [t.event for t in reading.events]
    version = next((e.version for e in events if isinstance(e, EngineInfo) and e.version), None)
    named_engine = next((e.engine for e in events if isinstance(e, EngineInfo) and e.engine), None)
    sources = {e.prefix.source for e in events if e.prefix.source}
    generated = [e for e in events if isinstance(e, GeneratedBuckets)]
    configs = [e for e in events if isinstance(e, BucketConfig)]
    dims = next((g.dims for g in generated if g.phase in ("prompt", "decode")), None)
    cfg_dims = {name for c in configs for name, _ in c.dims}
    strategies = {c.strategy for c in configs}
    width = len(dims) if dims is not None else (_config_width(configs)
                                                or _step_width([e for e in events if isinstance(e, WarmupStep)]))
    v1_signs = _v1_engine_signs(events, reading)
    if any(isinstance(e, MemorySplit) and e.dummy_block is not None for e in events):
        v1_signs.append("the memory split names a KV-cache dummy block")
    if any(isinstance(e, UsableBlocks) for e in events):
        v1_signs.append("'Usable num_blocks' line")
    if "query" in cfg_dims:
        v1_signs.append("bucket config with a query dimension")
    if any(isinstance(e, GraphCaptured) and e.percent is None for e in events):
        v1_signs.append("graph capture summary without a percentage")
    if any(isinstance(e, WarmupStep) and not e.graph and e.query_len is not None and e.prefix.level is None
           for e in events):
        v1_signs.append("[Warmup][Prompt] lines with query_len (the plugin's tqdm warm-up)")
    evidence: list[str] = []
    if "habana_model_runner.py" in sources:
        if dims is None and generated:
            return ReleaseGuess("vllm-fork 1.17 (v0, 2-D buckets)", ("fork-1.17",), "v0", version,
                                ("habana_model_runner.py lines", "bucket lists without a dims label"))
        return ReleaseGuess("vllm-fork 1.18 (v0, 2-D buckets)", ("fork-1.18",), "v0", version,
                            ("habana_model_runner.py lines",))
    if width is None and configs and "seq" in {n for c in configs if c.phase == "decode" for n, _ in c.dims}:
        return ReleaseGuess("vllm-fork 1.17 (v0, 2-D buckets)", ("fork-1.17",), "v0", version,
                            ("decode bucket config over seq (before decode blocks)",))
    if width == 2:
        evidence.append(f"2-D buckets {list(dims)}" if dims else "2-D bucket config / warm-up lines")
        if "exponential" in strategies:
            evidence.append("exponential bucket config (with limit)")
            return ReleaseGuess("vllm-fork 1.21.x (v0, 2-D buckets)", ("fork-1.21.0", "fork-1.21.2"), "v0",
                                version, tuple(evidence))
        return ReleaseGuess("vllm-fork 1.19-1.21 (v0, 2-D buckets)", FORK_2D, "v0", version, tuple(evidence))
    if width == 3:
        evidence.append(f"3-D buckets {list(dims)}" if dims else "3-D bucket config / warm-up lines")
        if v1_signs:
            profiles = PLUGIN[2:] if "padding_aware" in strategies else PLUGIN
            return ReleaseGuess("vllm-gaudi plugin (v1, 3-D buckets)", profiles, "v1", version,
                                tuple(evidence + v1_signs))
        return ReleaseGuess("vllm-fork 1.22+ (v0, 3-D buckets)", FORK_3D, "v0", version, tuple(evidence))
    gaudi = _on_gaudi(events, sources)
    if v1_signs and gaudi:
        return ReleaseGuess("vllm-gaudi plugin (v1)", PLUGIN, "v1", version, tuple(v1_signs))
    if gaudi:
        return ReleaseGuess("vllm-fork (v0) on Gaudi, release not named by the log", (), "v0", version,
                            ("Gaudi runner / Habana runtime lines without bucket lines",))
    if version or sources:
        return ReleaseGuess("generic vLLM (no Gaudi bucketing lines)", (), named_engine, version,
                            (f"vLLM {version}",) if version else ())
    return ReleaseGuess("unknown (no vLLM lines recognised)", (), None, None, ())


@dataclass(frozen=True)
class PhaseBuckets:
    phase: str
    count: int
    dims: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]     # (min, max) per dim
    omitted: int = 0
    captured: int | None = None          # HPU graphs captured for this phase
    config: dict | None = None           # the logged bucket config: dim -> (min, step, max[, ...])


def bucket_phases(reading: LogReading) -> list[PhaseBuckets]:
    s = reading.summary
    out = []
    for phase in ("prompt", "decode"):
        g = s.generated.get(phase)
        cfg = s.bucket_configs.get(phase)
        if g is None and cfg is None:
            continue
        buckets = g.buckets if g else ()
        width = min(len(b) for b in buckets) if buckets else 0  # a cut log line may hold a short tuple
        dims = tuple(g.dims) if g and g.dims else tuple(("bs", "seq", "blocks")[:width])
        ranges = tuple((min(b[i] for b in buckets), max(b[i] for b in buckets)) for i in range(width))
        omitted = s.omitted.get(phase)
        captured = _captured(s, phase)
        out.append(PhaseBuckets(phase, g.count if g else 0, dims, ranges, omitted.count if omitted else 0,
                                captured, {n: r.values for n, r in cfg.dims} if cfg else None))
    return out


def _captured(summary, phase: str) -> int | None:
    for key, cap in summary.graph_captured.items():
        if key.lower().endswith(phase):
            return cap.count
    return None


@dataclass(frozen=True)
class MemoryView:
    weights: int | None = None
    profiling_peak: int | None = None
    free_after_profiling: int | None = None
    kv_cache: int | None = None
    kv_blocks: int | None = None
    graph_reserved: int | None = None
    graph_reserved_fraction: float | None = None
    gpu_memory_utilization: float | None = None
    graphs_used: int | None = None
    warmup_allocated: int | None = None


def memory_view(reading: LogReading) -> MemoryView:
    s = reading.summary
    events = [t.event for t in reading.events]
    profiling = next((e for e in events if isinstance(e, ProfilingRun)), None)
    split = s.memory_split
    used = [c.used_mem for c in s.graph_captured.values() if c.used_mem is not None]
    kv = split.kv_cache if split else (s.kv_cache.memory if s.kv_cache else None)
    return MemoryView(
        weights=s.model_loaded.device_memory if s.model_loaded else None,
        profiling_peak=profiling.device_memory if profiling else None,
        free_after_profiling=split.free if split else None,
        kv_cache=kv,
        kv_blocks=s.hpu_blocks if s.hpu_blocks is not None else (s.usable_blocks.usable if s.usable_blocks else None),
        graph_reserved=split.graph_reserved if split else None,
        graph_reserved_fraction=split.graph_reserved_fraction if split else None,
        gpu_memory_utilization=split.gpu_memory_utilization if split else None,
        graphs_used=sum(used) if used else None,
        warmup_allocated=s.warmup_finished.device_memory if s.warmup_finished else None,
    )


@dataclass(frozen=True)
class Step:
    phase: str
    index: int
    total: int
    shape: tuple[int, ...]
    seconds: float | None      # from this line to the next timed line (None without timestamps)


@dataclass
class Timeline:
    phases: list[tuple[str, float | None]] = field(default_factory=list)   # (name, seconds)
    steps: list[Step] = field(default_factory=list)
    warmup_total_s: float | None = None     # the server's own "Warmup finished in N secs"
    log_span_s: float | None = None
    complete: bool = False                     # warm-up finished in this log

    @property
    def slowest(self) -> list[Step]:
        timed = [s for s in self.steps if s.seconds is not None]
        return sorted(timed, key=lambda s: -s.seconds)[:5]

    def seconds_per_bucket(self, phase: str) -> float | None:
        """Mean observed seconds per warmed-up bucket of a phase (prompt / decode, graph lines included)."""
        times = [s.seconds for s in self.steps if s.phase == phase and s.seconds is not None]
        return sum(times) / len(times) if times else None


def _shape(step: WarmupStep) -> tuple[int, ...]:
    return tuple(v for v in (step.batch_size, step.seq_len, step.query_len, step.num_blocks) if v is not None)


def timeline(reading: LogReading) -> Timeline:
    tl = Timeline(log_span_s=reading.last_time_s)
    s = reading.summary
    model = next((t for t in reading.events if isinstance(t.event, ModelLoaded)), None)
    prof = next((t for t in reading.events if isinstance(t.event, ProfilingRun)), None)
    if model and model.event.seconds is not None:
        tl.phases.append(("load weights", model.event.seconds))
    if prof and prof.event.seconds is not None:
        tl.phases.append(("profiling run", prof.event.seconds))
    timed = [t for t in reading.events if t.time_s is not None]
    timed_lines = [t.line_no for t in timed]      # ascending: events come in line order
    steps = [t for t in reading.events if isinstance(t.event, WarmupStep)]
    for t in steps:
        k = bisect.bisect_right(timed_lines, t.line_no)   # the next timed line (linear scans were quadratic)
        nxt = timed[k] if k < len(timed) else None
        secs = nxt.time_s - t.time_s if (nxt is not None and t.time_s is not None) else None
        e = t.event
        tl.steps.append(Step(e.phase, e.index, e.total, _shape(e), secs))
    groups: dict[str, list[Step]] = {}
    for t, step in zip(steps, tl.steps):
        key = ("graph capture " if t.event.graph and _has_eager_pass(steps) else "") + f"{step.phase} warmup"
        groups.setdefault(key, []).append(step)
    for key, group in groups.items():
        times = [x.seconds for x in group if x.seconds is not None]
        tl.phases.append((key, sum(times) if times else None))
    if s.warmup_finished:
        tl.warmup_total_s = float(s.warmup_finished.seconds)
        tl.complete = True
    elif s.warmup_skipped:
        tl.complete = True
    return tl


def _has_eager_pass(steps: list[TimedEvent]) -> bool:
    """Fork <= 1.21 warms every bucket without graphs, then captures graphs: two passes to tell apart."""
    return any(not t.event.graph for t in steps) and any(t.event.graph for t in steps)


@dataclass(frozen=True)
class Problem:
    kind: str           # "oom" | "compile" | "traceback" | "error"
    message: str
    line_no: int
    line: str


# Graph compiler failures: the Habana bridge's "Graph compile failed. synStatus=..", the recipe
# compiler's "compileGraph: Can not compile graph".
_COMPILE_FAILED = re.compile(r"Graph compile failed|Can not compile graph|synGraphCompile", re.I)
_LAST_FRAME = re.compile(r'File "(?:[^"]*/)?([^"/]+)", line (\d+), in (\w+)')


def _traceback_message(e: Traceback) -> str:
    if e.exc_type:
        return f"{e.exc_type}: {e.message}".rstrip(": ")
    frames = _LAST_FRAME.findall(e.text)
    where = f"; last frame {frames[-1][2]} ({frames[-1][0]}:{frames[-1][1]})" if frames else ""
    return f"traceback cut before its exception line{where}"


def problems(reading: LogReading) -> list[Problem]:
    out = []
    for t in reading.problems:
        e = t.event
        if isinstance(e, OutOfMemory):
            out.append(Problem("oom", f"{e.kind}: {e.message}", t.line_no, t.text))
        elif isinstance(e, Traceback):
            kind = "compile" if _COMPILE_FAILED.search(e.message) else "traceback"
            out.append(Problem(kind, _traceback_message(e), t.line_no, t.text))
        else:
            kind = "compile" if _COMPILE_FAILED.search(e.message) else "error"
            out.append(Problem(kind, e.message, t.line_no, t.text))
    return out


def warmup_finished_event(reading: LogReading) -> WarmupFinished | None:
    return reading.summary.warmup_finished
