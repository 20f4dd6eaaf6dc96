"""What a read log says: the release that wrote it, the settings in force, the buckets, the memory split
and what went wrong (the warm-up timeline is timeline.py). Pure functions of a `LogReading`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from ..logparse import (
    BucketConfig,
    ConfigValue,
    EngineInfo,
    ErrorLine,
    GeneratedBuckets,
    GraphCaptured,
    MemorySplit,
    OutOfMemory,
    ProfilingRun,
    ServerNotice,
    Traceback,
    UsableBlocks,
    WarmupFinished,
    WarmupStep,
)
from .reading import LogReading

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
    preferred: str | None = None     # the profile whose defaults match what the log shows
    decided_by: tuple[str, ...] = ()  # the signs that chose `profiles` / `preferred`, in words
    # runner inputs the log shows (ServerConfig fields, e.g. token_budget_phases of a habana_main build)
    inputs: tuple[tuple[str, object], ...] = ()
    given: str | None = None         # the release named by --release, which overrides the log's reading

    @property
    def profile(self) -> str | None:
        """The profile advice is computed with: the one whose defaults match the log's evidence, else
        the newest consistent one."""
        if self.preferred in self.profiles:
            return self.preferred
        return self.profiles[-1] if self.profiles else None


# Sources that only vLLM on Gaudi prints from (fork runners/workers, the extension's bucketing and
# runtime dump, the plugin's platform), and the Habana runtime logger ("habana:<module>").
_GAUDI_SOURCES = re.compile(r"^(?:habana_|hpu_|hpu\.py$|runtime\.py$|exponential\.py$|linear\.py$|"
                            r"padding_aware\.py$|habana:)")
# in a traceback's text: Gaudi's own modules, HPU attention classes, or an egg/wheel of a fork build
# ("vllm-0.7.2+gaudi000-py3.10.egg", "vllm-0.6.6.post1+gaudi000")
_GAUDI_TEXT = re.compile(r"hpu_model_runner\.py|hpu_worker\.py|habana_|vllm_gaudi|vllm_hpu_extension|"
                         r"HPUAttention|/vllm-\d[\w.]*\+gaudi\d+")


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
    eager = [s for s in steps if s.batch_size is not None and s.phase in ("prompt", "decode")]
    if not eager:
        return None
    return 3 if any(s.query_len is not None for s in eager) else 2


def _v1_engine_signs(events: list, reading: LogReading) -> list[str]:
    signs = []
    named_v0 = next((e for e in events if isinstance(e, EngineInfo) and e.engine == "v0"), None)
    if any(isinstance(e, EngineInfo) and e.engine == "v1" for e in events):
        signs.append("'Initializing a V1 LLM engine' line")
    if any(isinstance(e, ConfigValue) and e.name == "engine_version" and e.value.strip() == "v1" for e in events):
        signs.append("runtime dump engine_version: v1")
    modality = next((dict(e.extra)["modality"] for e in events
                     if isinstance(e, WarmupStep) and e.phase == "multimodal" and "modality" in dict(e.extra)), None)
    if modality is not None:
        signs.append(f"multimodal warm-up per modality ('Graph/Multimodal({modality})', vllm-gaudi's; the fork's "
                     "has no modality)")
    # vllm-gaudi's plugin (V1 only); its 2025 predecessor `vllm_hpu` ran vLLM's V0 engine ("Falling back to V0")
    plugins = {e.plugin for e in events if isinstance(e, EngineInfo) and e.plugin and e.platform == "hpu"}
    if plugins and "vllm_hpu" not in plugins and named_v0 is None:  # "activated" alone names no module
        signs.append("platform plugin loaded for hpu (vllm-gaudi, a V1-only plugin)")
    if any(p.startswith(("EngineCore", "Worker_TP")) for p in reading.processes):
        signs.append("v1 engine process tags (EngineCore / Worker_TP)")
    return signs


def _on_gaudi(events: list, sources: set) -> bool:
    return (any(_GAUDI_SOURCES.match(s) for s in sources)
            or any(isinstance(e, EngineInfo) and e.platform == "hpu" for e in events)
            or any(isinstance(e, ConfigValue) and e.name == "hw" and e.value.startswith("gaudi") for e in events)
            or any(isinstance(e, (BucketConfig, GeneratedBuckets, WarmupStep)) for e in events)
            or any(isinstance(e, Traceback) and _GAUDI_TEXT.search(e.text) for e in events))


INTERIM_FAMILY = "vllm-fork habana_main between 1.17 and 1.18 (v0, 2-D buckets, decode over seq, token budget)"
GAUDI_V0 = "vllm-fork (v0) on Gaudi, release not named by the log"
FORK_V1 = "vllm-fork's own V1 engine (habana_main, 2025), release not named by the log"


def _before_plugin(version: str | None) -> bool:
    """A vLLM version older than every vllm-gaudi plugin's base (0.10)."""
    from packaging.version import InvalidVersion, Version

    try:
        return version is not None and Version(version).release[:2] < (0, 10)
    except InvalidVersion:
        return False


def detect_release(reading: LogReading, release: str | None = None) -> ReleaseGuess:
    """The release that wrote the log: the shape of its bucket lines, narrowed by every other sign it
    gives (releasesigns.py); `release` (--release) overrides the reading and says where they differ."""
    guess = _detect_release(reading)
    guess = replace(guess, decided_by=guess.evidence)
    guess = _with_signs(guess, reading)
    if len(guess.profiles) > 1 and guess.preferred is None:
        preferred, why = _prefer_by_graphs(guess.profiles, [t.event for t in reading.events])
        if preferred is not None:
            guess = replace(guess, preferred=preferred, evidence=guess.evidence + (why,),
                            decided_by=guess.decided_by + (why,))
    return guess if release is None else given_release(guess, release)


def given_release(guess: ReleaseGuess, release: str) -> ReleaseGuess:
    """The log read as `release` (raises BucketConfigError, naming the close names, when unknown)."""
    from ..buckets import get_profile

    profile = get_profile(release)
    said = f"--release {release}" + (f" ({profile.name})" if profile.name != release else "")
    if guess.profiles and profile.name not in guess.profiles:
        said += f"; the log's own signs read {', '.join(guess.profiles)} ({guess.family})"
    inputs = tuple((k, v) for k, v in guess.inputs if k in profile.model_inputs)
    return replace(guess, family=f"{profile.name} (given by --release)", profiles=(profile.name,),
                   engine=profile.engine, preferred=profile.name, decided_by=(said,), inputs=inputs,
                   given=release)


def _with_signs(guess: ReleaseGuess, reading: LogReading) -> ReleaseGuess:
    """Narrow the bucket lines' reading with the log's other signs: a firm sign keeps the profiles it
    allows (one that allows none of them is reported, and the bucket lines win); a preference picks
    among them. A log without bucket lines on Gaudi takes the profiles its versions allow."""
    from .releasesigns import budget_phases, release_signs

    fork = guess.engine == "v0" or any(p.startswith("fork-") for p in guess.profiles)
    signs = release_signs(reading, fork=fork, plugin=guess.engine == "v1" and guess.family.startswith("vllm-gaudi"))
    evidence, decided = list(guess.evidence), list(guess.decided_by)
    profiles, preferred, family, inputs = guess.profiles, guess.preferred, guess.family, guess.inputs
    for sign in signs:
        evidence.append(sign.text)
        if sign.profiles is None:
            continue
        if sign.text.startswith("'Omitted") and profiles == ("fork-1.17",):
            # 1.17's bucket lines with a token budget: the habana_main builds between 1.17 and 1.18,
            # read with fork-1.17's bucketing and the budget filter they added
            family, inputs = INTERIM_FAMILY, (("token_budget_phases", budget_phases(reading)),)
            decided.append(sign.text.split(": a fork build")[0] + ": filtered by the token budget, which the "
                           "1.17 release never applies (a habana_main build after it)")
            continue
        if not sign.firm:
            if sign.profiles[0] in profiles and len(profiles) > 1:
                preferred = sign.profiles[0]
                decided.append(sign.text)
            continue
        if not profiles and family == GAUDI_V0:
            profiles = sign.profiles
            family = f"vllm-fork (v0), {', '.join(profiles)} by its version"
            decided.append(sign.text)
            continue
        kept = tuple(p for p in profiles if p in sign.profiles)
        if kept and kept != profiles:
            profiles = kept
            decided.append(sign.text)
        elif profiles and not kept:
            evidence[-1] += f" (the bucket lines read {', '.join(profiles)}: kept theirs)"
    return replace(guess, family=family, profiles=profiles, preferred=preferred, evidence=tuple(evidence),
                   decided_by=tuple(decided), inputs=inputs)


def stated_lazy_mode(events: list) -> bool | None:
    """Lazy mode as the log states it: the Habana bridge's banner (` PT_HPU_LAZY_MODE = 0`) or the plugin's
    runtime dump (`bridge_mode: eager`, `PT_HPU_LAZY_MODE: 1`); None when it says nothing."""
    for e in events:
        if isinstance(e, ServerNotice) and e.kind == "lazy_mode" and e.get("value") in ("0", "1"):
            return e.get("value") == "1"
        if isinstance(e, ConfigValue) and e.name == "bridge_mode" and e.value.strip() in ("lazy", "eager"):
            return e.value.strip() == "lazy"
        if isinstance(e, ConfigValue) and e.name == "PT_HPU_LAZY_MODE" and e.value.strip() in ("0", "1"):
            return e.value.strip() == "1"
    return None


def _prefer_by_graphs(profiles: tuple[str, ...], events: list) -> tuple[str | None, str]:
    """HPU-graph warm-up lines mean lazy mode: of the consistent profiles, the newest whose default
    PT_HPU_LAZY_MODE is not 0 (fork-main and vllm-gaudi default to torch.compile, no HPU graphs, and
    their model would match none of the log's graph steps). A log that states torch.compile (the bridge's
    PT_HPU_LAZY_MODE = 0, the plugin's bridge_mode: eager) is not read as lazy whatever its lines: the
    plugin prints its `captured:` summaries in both modes."""
    from ..buckets.runtime import runtime_defaults

    graphs = any(isinstance(e, WarmupStep) and e.graph and e.phase in ("prompt", "decode") for e in events) \
        or any(isinstance(e, GraphCaptured) for e in events)
    if not graphs or stated_lazy_mode(events) is False:
        return None, ""
    lazy = [p for p in profiles if runtime_defaults(p).get("PT_HPU_LAZY_MODE", "1").strip() != "0"]
    if not lazy or len(lazy) == len(profiles):
        return None, ""
    compiled = [p for p in profiles if p not in lazy]
    verb = "defaults" if len(compiled) == 1 else "default"
    return lazy[-1], (f"HPU-graph warm-up lines: lazy mode, the default of {lazy[-1]} "
                      f"({', '.join(compiled)} {verb} to PT_HPU_LAZY_MODE=0, without HPU graphs)")


def _decode_steps_over_seq(events: list) -> bool:
    """fork 1.17 warms decode buckets over seq_len; from 1.18 its decode warm-up lines say num_blocks."""
    decode = [e for e in events if isinstance(e, WarmupStep) and e.phase == "decode"]
    return bool(decode) and all(e.seq_len is not None and e.num_blocks is None for e in decode)


def _detect_release(reading: LogReading) -> ReleaseGuess:  # noqa: C901 (one test per release's log signature, in the order they disambiguate)
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
        if not generated and _decode_steps_over_seq(events):
            return ReleaseGuess("vllm-fork 1.17 (v0, 2-D buckets)", ("fork-1.17",), "v0", version,
                                ("habana_model_runner.py lines", "decode warm-up over seq_len (1.18+: num_blocks)"))
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
    if v1_signs and gaudi and _before_plugin(version):
        # vllm-gaudi needs vLLM 0.10 or later: a V1 engine on an older vLLM is the fork's own (habana_main, 2025)
        return ReleaseGuess(FORK_V1, (), "v1", version, tuple(v1_signs) + (f"vLLM {version}, older than any "
                                                                           "vllm-gaudi plugin's (0.10+)",))
    if v1_signs and gaudi:
        return ReleaseGuess("vllm-gaudi plugin (v1)", PLUGIN, "v1", version, tuple(v1_signs))
    if gaudi:
        from .releasesigns import log_versions

        built = None if version else next(iter(log_versions(reading)), None)  # a traceback's egg/wheel path
        why = ("Gaudi runner / Habana runtime lines without bucket lines",) if sources else ()
        if built:
            why += (f"a Gaudi build's path in a traceback (vllm-{built})",)
        return ReleaseGuess(GAUDI_V0, (), "v0", version or built, why or ("a traceback through Gaudi's code",))
    if version or sources:
        return ReleaseGuess("generic vLLM (no Gaudi bucketing lines)", (), named_engine, version,
                            (f"vLLM {version}",) if version else ())
    return ReleaseGuess("unknown (no vLLM lines recognised)", (), None, None, ())


@dataclass(frozen=True)
class PhaseBuckets:
    phase: str
    count: int                           # as logged ("Generated N", the steps' [i/N], "captured:N (100%)")
    dims: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]  # (min, max) per dim of the listed buckets; see `complete`
    omitted: int = 0
    captured: int | None = None          # HPU graphs captured for this phase
    config: dict | None = None           # the logged bucket config: dim -> (min, step, max[, ...])
    listed: int = 0                      # buckets the log lists (fewer than count when the list is cut)
    complete: bool = True                # the list is whole: its ranges are facts, not lower bounds
    count_from: str = "bucket list"      # "bucket list" | "warm-up steps" | "graph summary" | "config"
    max_tokens: int | None = None        # the largest batch x length among the listed buckets


def bucket_phases(reading: LogReading) -> list[PhaseBuckets]:
    s = reading.summary
    out = []
    for phase in ("prompt", "decode", "unified"):
        g = s.generated.get(phase)
        cfg = s.bucket_configs.get(phase)
        count, count_from = _count(s, phase, g)
        if g is None and cfg is None and not count:
            continue
        buckets = g.buckets if g else summary_list(s, phase) or ()
        width = min(len(b) for b in buckets) if buckets else 0  # a cut log line may hold a short tuple
        dims = tuple(g.dims) if g and g.dims else tuple(("bs", "seq", "blocks")[:width])
        ranges = tuple((min(b[i] for b in buckets), max(b[i] for b in buckets)) for i in range(width))
        omitted = s.omitted.get(phase)
        captured = _captured(s, phase)
        complete = g.complete if g else True
        tokens = max((b[0] * b[1] for b in buckets), default=None) if width >= 2 else None
        out.append(PhaseBuckets(phase, count, dims, ranges, omitted.count if omitted else 0,
                                captured, {n: r.values for n, r in cfg.dims} if cfg else None,
                                listed=len(buckets), complete=complete, count_from=count_from, max_tokens=tokens))
    return out


def _count(s, phase: str, g) -> tuple[int, str]:
    """The phase's bucket count as the log states it, and where from."""
    if g is not None:
        return g.count, "bucket list"
    totals = [total for key, (_, total) in s.warmup_steps.items() if key.split("/")[-1] == phase]
    if totals:
        return max(totals), "warm-up steps"
    for key, cap in s.graph_captured.items():
        if key.lower().endswith(phase) and cap.percent:
            return round(cap.count * 100 / cap.percent), "graph summary"
    return 0, "config"


def summary_list(summary, phase: str) -> tuple[tuple[int, ...], ...] | None:
    """The phase's buckets from a graph summary that captured every one of them and lists them
    (`Graph/Prompt captured:24 (100.0%) .. buckets:[..]`): a doc excerpt that skips the bucket lines
    still shows what the warm-up ran."""
    for key, cap in summary.graph_captured.items():
        if key.lower().endswith(phase) and cap.buckets and cap.percent == 100 and len(cap.buckets) == cap.count:
            return cap.buckets
    return None


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
    kv_tokens: int | None = None  # v1's "KV cache size: N tokens"
    max_concurrency: float | None = None  # requests of `concurrency_for` tokens the cache holds at once
    concurrency_for: int | None = None
    graph_reserved: int | None = None
    graph_reserved_fraction: float | None = None
    gpu_memory_utilization: float | None = None
    graphs_used: int | None = None
    warmup_allocated: int | None = None


def memory_view(reading: LogReading, block_size: int | None = None) -> MemoryView:
    """The memory figures the log gives; `block_size` (the engine's settings): the KV blocks of a v1
    engine that only says its cache in tokens ("GPU KV cache size: 468,736 tokens")."""
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
        kv_blocks=(s.hpu_blocks if s.hpu_blocks is not None else s.usable_blocks.usable if s.usable_blocks
                   else s.kv_cache.tokens // block_size if s.kv_cache and s.kv_cache.tokens and block_size
                   else None),
        kv_tokens=s.kv_cache.tokens if s.kv_cache else None,
        max_concurrency=s.kv_cache.max_concurrency if s.kv_cache else None,
        concurrency_for=s.kv_cache.per_request if s.kv_cache else None,
        graph_reserved=split.graph_reserved if split else None,
        graph_reserved_fraction=split.graph_reserved_fraction if split else None,
        gpu_memory_utilization=split.gpu_memory_utilization if split else None,
        graphs_used=sum(used) if used else None,
        warmup_allocated=s.warmup_finished.device_memory if s.warmup_finished else None,
    )


@dataclass(frozen=True)
class ReserveHint:
    """The HPU-graph reserve the warm-up left unused, and what a smaller VLLM_GRAPH_RESERVED_MEM gives the KV
    cache: the reserve is that fraction of the usable memory, the rest of which becomes KV blocks."""

    used: int            # what the warm-up's graphs took (the larger of the capture summaries and its total)
    reserved: int
    fraction: float
    suggested: float     # the used memory and a quarter more, in the server's own hundredths
    freed: int
    extra_blocks: int | None


HEADROOM = 1.25   # graphs compiled while serving (a bucket not warmed up) need room in the reserve too


def reserve_hint(m: MemoryView, warmup_complete: bool, every_graph_captured: bool = True) -> ReserveHint | None:
    """Only for a finished warm-up that used under 60% of its reserve (a partial one has not used it all yet)
    and captured every graph it meant to (fork <= 1.21 stops capturing a phase when that phase's share of the
    reserve runs out: a smaller reserve would capture fewer)."""
    used = max((v for v in (m.graphs_used, m.warmup_allocated) if v), default=None)
    if not warmup_complete or not every_graph_captured or not used or not m.graph_reserved \
            or not m.graph_reserved_fraction:
        return None
    if used >= 0.6 * m.graph_reserved:
        return None
    usable = m.graph_reserved / m.graph_reserved_fraction
    suggested = max(0.01, math.ceil(used * HEADROOM / usable * 100) / 100)
    if suggested >= m.graph_reserved_fraction:
        return None
    freed = int((m.graph_reserved_fraction - suggested) * usable)
    per_block = m.kv_cache / m.kv_blocks if m.kv_cache and m.kv_blocks else None
    return ReserveHint(used, m.graph_reserved, m.graph_reserved_fraction, suggested, freed,
                       int(freed // per_block) if per_block else None)


@dataclass(frozen=True)
class Problem:
    kind: str           # "oom" | "compile" | "traceback" | "error"
    message: str
    line_no: int
    line: str
    restated: tuple[int, ...] = ()  # lines where another process re-raised it (its message inside theirs)


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


def _root_tracebacks(timed: list) -> list:
    """One report per root cause: every rank prints the same traceback (one per exception type and message is
    kept, the first), and the pieces of tracebacks cut before their exception line (wrapped, interleaved or
    pasted in part) are fragments of one failure: dropped when a whole traceback names the exception, else
    the last of them stands for all."""
    whole = [t for t in timed if isinstance(t.event, Traceback) and t.event.exc_type]
    seen: set = set()
    keep = set()
    for t in whole:
        key = (t.event.exc_type, t.event.message.strip())
        if key not in seen:
            seen.add(key)
            keep.add(id(t))
    # logger.exception: an ERROR record states the exception, its traceback follows under the same prefix
    stated = {(t.event.prefix.process, t.event.prefix.pid, t.event.prefix.timestamp) for t in timed
              if isinstance(t.event, ErrorLine)}
    cut = [t for t in timed if isinstance(t.event, Traceback) and not t.event.exc_type
           and (t.event.prefix.process, t.event.prefix.pid, t.event.prefix.timestamp) not in stated]
    if cut and not whole:
        keep.add(id(cut[-1]))
    # the ERROR records a process prints with a whole traceback, in its second (the exception restated, "EngineCore
    # encountered a fatal error.", v1's scheduler and input dumps): one failure, which the traceback names
    told = {(t.event.prefix.process, t.event.prefix.pid, t.event.prefix.timestamp) for t in whole
            if t.event.prefix.timestamp}
    return [t for t in timed if (id(t) in keep if isinstance(t.event, Traceback) else
                                 not (isinstance(t.event, ErrorLine) and (t.event.prefix.process, t.event.prefix.pid,
                                                                         t.event.prefix.timestamp) in told))]


# Python's own noise at interpreter exit (a __del__ that imports while the process shuts down): not the
# server's failure, whatever stopped it
_EXIT_NOISE = re.compile(r"sys\.meta_path is None, Python is likely shutting down")


# vLLM's words for "a process below me failed" (v1's API server and engine core): the root cause is above
_CONSEQUENCE = re.compile(r"See root cause above|Engine core initialization failed|EngineCore encountered a fatal "
                          r"error|Engine process failed to start|EngineDeadError", re.I)
_EXC_TYPE = re.compile(r"^(?:device|host|kv_cache)?:?\s*(?:[\w.]*(?:Error|Exception|Exit|Interrupt)|Exception):\s*")


def _folded(found: list[Problem]) -> list[Problem]:
    """One entry per failure. A traceback whose exception is an out-of-memory is that OOM (one line, two
    readings); a process that re-raises what a worker raised (v1: the engine core's "Call to
    initialize_from_config method failed: <the worker's message>", the API server's "Engine core initialization
    failed. See root cause above") restates it: its line is kept as where it was restated."""
    oom_lines = {p.line_no for p in found if p.kind == "oom"}
    found = [p for p in found if not (p.kind == "traceback" and p.line_no in oom_lines)]
    out: list[Problem] = []
    for p in found:
        root = next((r for r in out if len(core := _EXC_TYPE.sub("", r.message)) >= 20 and core in p.message), None)
        if root is None and out and _CONSEQUENCE.search(p.message):
            root = out[-1]
        if root is None:
            out.append(p)
        else:
            out[out.index(root)] = replace(root, restated=(*root.restated, p.line_no))
    return out


def problems(reading: LogReading) -> list[Problem]:
    out = []
    for t in _root_tracebacks(reading.problems):
        e = t.event
        if isinstance(e, Traceback) and _EXIT_NOISE.search(e.message or ""):
            continue
        if isinstance(e, OutOfMemory):
            out.append(Problem("oom", f"{e.kind}: {e.message}", t.line_no, t.text))
        elif isinstance(e, Traceback):
            kind = "compile" if _COMPILE_FAILED.search(e.message) else "traceback"
            out.append(Problem(kind, _traceback_message(e), t.line_no, t.text))
        else:
            kind = "compile" if _COMPILE_FAILED.search(e.message) else "error"
            out.append(Problem(kind, e.message, t.line_no, t.text))
    return _folded(out)


def warmup_finished_event(reading: LogReading) -> WarmupFinished | None:
    return reading.summary.warmup_finished
