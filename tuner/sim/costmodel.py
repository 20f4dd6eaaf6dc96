"""The simulator's cost model (docs/calibration.md section 7) as pure functions.

No I/O and no clocks: the tuner calls `predict_startup` before booting anything, to know the KV block
count, the buckets, which of them get HPU graphs, how long warmup takes and whether the configuration
can start at all. The simulated server runs the same prediction, so what the tuner predicts is what
the simulator then does.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Mapping

from ..buckets import BucketConfigError, BucketPlan, ServerConfig, get_profile
from ..releases import runtime_defaults
from .models import BF16, DEVICES, FP8, GiB, MiB, Device, ModelShape, model_for

# --- per-release rules -------------------------------------------------------------------------
# Code defaults of VLLM_GRAPH_RESERVED_MEM / VLLM_GRAPH_PROMPT_RATIO / PT_HPU_LAZY_MODE come from the
# project's table (tuner/releases.py); this table adds what changes the *cost* between releases.


@dataclass(frozen=True)
class ReleaseRules:
    profile: str
    engine: str  # "v0" (vllm-fork) or "v1" (vllm-gaudi)
    # "budget": capture inside VLLM_GRAPH_RESERVED_MEM split by VLLM_GRAPH_PROMPT_RATIO (fork <= 1.21.x);
    # "all": every bucket is captured right after it compiles (fork 1.22 / main, vllm-gaudi).
    capture: str
    # HPU-graph memory: prompt MiB per graph, prompt MiB per padded token, decode MiB per graph.
    # None: the model's current-era constant (Intel autocalc, 10 MiB for 8B).
    graph_mem: tuple[float, float, float] | None
    buckets_at_init: bool = False  # fork 1.17/1.18 set their buckets up (and log it) before loading weights
    sampler_warmup: bool = False  # vllm-gaudi warms the sampler up after the buckets (1-3 s)
    style: str = "fork-hpu"  # log family, see logfmt.STYLES


_FORK = dict(engine="v0", capture="budget")
RULES: dict[str, ReleaseRules] = {
    # 1.17: 14.03 GiB for 15 prompt graphs of 9,984 padded tokens, 161.9 MiB for 48 decode graphs.
    "fork-1.17": ReleaseRules("fork-1.17", **_FORK, graph_mem=(3.4, 1.43, 3.4), buckets_at_init=True,
                              style="fork-habana"),
    # 1.18 era: 24 prompt graphs in 67.72 MiB (~2.8 MiB each); decode as measured on 1.17.
    "fork-1.18": ReleaseRules("fork-1.18", **_FORK, graph_mem=(2.8, 0.0, 3.4), buckets_at_init=True,
                              style="fork-habana"),
    "fork-1.19": ReleaseRules("fork-1.19", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu-old"),
    "fork-1.20": ReleaseRules("fork-1.20", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu-old"),
    "fork-1.21.0": ReleaseRules("fork-1.21.0", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu"),
    "fork-1.21.2": ReleaseRules("fork-1.21.2", **_FORK, graph_mem=(2.8, 0.0, 3.4), style="fork-hpu"),
    "fork-1.22": ReleaseRules("fork-1.22", "v0", "all", None, style="fork-3d"),
    "fork-main": ReleaseRules("fork-main", "v0", "all", None, style="fork-3d"),
    **{name: ReleaseRules(name, "v1", "all", None, sampler_warmup=True, style="gaudi")
       for name in ("gaudi-0.10.1", "gaudi-0.15.1", "gaudi-0.26.0", "gaudi-main")},
}


def rules_for(profile_name: str) -> ReleaseRules:
    name = get_profile(profile_name).name  # resolve aliases (fork-1.21.3 -> fork-1.21.2)
    return RULES[name]


# --- constants of section 7 (GUESS where the spec says so) ------------------------------------
WEIGHT_LOAD_OVERHEAD = 14 * MiB  # 14.96 GiB of weights are logged as 14.97 GiB loaded (1.17 log)
PROFILE_BASE = 175 * MiB  # profiling run: 504 MiB at 4,096 tokens and 5.318 GiB at 65,536 tokens ->
PROFILE_PER_TOKEN = 0.0804 * MiB  # 175 MiB + 0.0804 MiB/token (for hidden 4096; scaled by hidden)
A_P, B_P, R_CTX = 0.5, 0.1e-3, 0.25  # prompt compile: a_p + b_p x (T + bs x ctx x B x r_ctx)
A_D, B_D = 0.3, 0.35e-3  # decode compile: a_d + b_d x num_blocks
C_CAP = 0.3  # seconds per captured HPU graph (1.17 log: 21 s for 63 graphs)
FP8_COMPILE = 7.6
CACHE_HIT = {BF16: 0.35, FP8: 0.067}  # recipe-cache hit, applied after the dtype factor
NO_GRAPH_DECODE = 3.6  # lazy mode without an HPU graph (OPEA PR #1210, 7B on Gaudi 2)
NO_GRAPH_PREFILL = 0.95  # graphs cost prefill ~6% (same source)
COMPILED_NO_GRAPH = 1.1  # torch.compile mode (PT_HPU_LAZY_MODE=0): no HPU graphs, no host overhead; GUESS
T_SAMPLER = 2.0
T_INIT, LOAD_BW, T_PROFILE = 2.0, 2.7e9, 2.0  # ~10 s before warmup for 8B (1.17 log timestamps); GUESS
TP_LATENCY, TP_LINK_BW = 10e-6, 100e9  # per all-reduce; two per layer per step; GUESS


@dataclass(frozen=True)
class SimSettings:
    """What the simulated hardware and model are (the parts vLLM flags do not already say)."""

    model: str = "llama-3.1-8b"
    device: str = "gaudi2"
    dtype: str = BF16  # weights and compute
    kv_dtype: str = BF16
    tp: int = 1
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = False


@dataclass(frozen=True)
class ServerInputs:
    """The scheduler-level vLLM flags; None means the engine's default."""

    block_size: int = 128
    max_num_seqs: int = 256
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    max_num_prefill_seqs: int | None = None


class CostModel:
    """Step, compile and memory costs of one model on one device (per card under tensor parallelism)."""

    def __init__(self, sim: SimSettings, block_size: int, compiled_mode: bool = False):
        self.sim = sim
        self.model: ModelShape = model_for(sim.model)
        self.device: Device = DEVICES[sim.device]
        self.block_size = block_size
        self.compiled_mode = compiled_mode  # PT_HPU_LAZY_MODE=0 without --enforce-eager
        tp = sim.tp
        self.params = self.model.params / tp
        self.weights = self.model.weight_bytes(sim.dtype, tp)
        self.kv_token = self.model.kv_bytes_per_token(sim.kv_dtype, tp)
        self.block_bytes = self.kv_token * block_size
        self.flops = self.device.flops(sim.dtype)
        self.compile_factor = (FP8_COMPILE if sim.dtype == FP8 else 1.0) * self.model.layers / 32

    # -- memory ---------------------------------------------------------------------------------
    def profile_overhead(self, tokens: int) -> float:
        return (PROFILE_BASE + PROFILE_PER_TOKEN * tokens) * self.model.hidden / 4096

    def graph_mem(self, rules: ReleaseRules, phase: str, tokens: int) -> float:
        pg, ptok, dg = rules.graph_mem or (self.model.graph_mem_mib, 0.0, self.model.graph_mem_mib)
        return (pg + ptok * tokens) * MiB if phase == "prompt" else dg * MiB

    # -- time -----------------------------------------------------------------------------------
    def _tp(self, tokens: int) -> float:
        if self.sim.tp == 1:
            return 0.0
        return 2 * self.model.layers * (TP_LATENCY + tokens * self.model.hidden * 2 / TP_LINK_BW)

    def decode_time(self, bs: int, blocks: int, graphed: bool) -> float:
        d = self.device
        mem = (self.weights + blocks * self.block_bytes) / (d.eta_m * d.bandwidth)
        compute = 2 * self.params * bs / (d.eta_c * self.flops)
        t = d.c_dec + max(mem, compute) + self._tp(bs)
        if not graphed:
            t *= COMPILED_NO_GRAPH if self.compiled_mode else NO_GRAPH_DECODE
        return t

    def prefill_time(self, bs: int, seq: int, ctx_blocks: int, graphed: bool) -> float:
        d, m, b = self.device, self.model, self.block_size
        attention = 4 * m.layers * m.hidden * bs * seq * (seq / 2 + ctx_blocks * b) / self.sim.tp
        flops = 2 * self.params * bs * seq + attention
        mem = (self.weights + bs * (seq + ctx_blocks * b) * self.kv_token) / (d.eta_m * d.bandwidth)
        t = d.c_pre + max(flops / (d.eta_c * self.flops), mem) + self._tp(bs * seq)
        if not graphed and not self.compiled_mode:
            t *= NO_GRAPH_PREFILL
        return t

    def prompt_compile(self, bs: int, seq: int, ctx_blocks: int, cache_hit: bool = False) -> float:
        tokens = bs * seq + bs * ctx_blocks * self.block_size * R_CTX
        return (A_P + B_P * tokens) * self.compile_factor * self._cache(cache_hit)

    def decode_compile(self, blocks: int, cache_hit: bool = False) -> float:
        return (A_D + B_D * blocks) * self.compile_factor * self._cache(cache_hit)

    def capture_time(self) -> float:
        return C_CAP * self.model.layers / 32

    def _cache(self, hit: bool) -> float:
        return CACHE_HIT[self.sim.dtype] if hit else 1.0

    def load_time(self) -> float:
        return self.weights / LOAD_BW


# --- bucket geometry ---------------------------------------------------------------------------


def prompt_shape(bucket: tuple) -> tuple[int, int, int]:
    """(bs, seq, ctx_blocks) of a 2-D (bs, seq) or 3-D (bs, query, ctx) prompt bucket."""
    return (bucket[0], bucket[1], bucket[2] if len(bucket) > 2 else 0)


def decode_blocks(profile: str, bucket: tuple, block_size: int) -> int:
    """KV blocks a decode bucket reads: fork 1.17's second dimension is the padded length in tokens."""
    if profile == "fork-1.17":
        return bucket[0] * bucket[1] // block_size
    return bucket[-1]


def recipe_key(profile: str, sim: SimSettings, block_size: int, num_blocks: int, phase: str, bucket: tuple) -> str:
    """Identity of one compiled graph recipe: the shapes (the KV cache tensor included) and the build."""
    text = repr((profile, sim.model, sim.device, sim.dtype, sim.kv_dtype, sim.tp, block_size, num_blocks,
                 phase, tuple(bucket)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- env -------------------------------------------------------------------------------------


def env_value(env: Mapping[str, str], profile: str, name: str, fallback: str | None = None) -> str | None:
    """A variable as the release sees it: the user's value, else the release's code default."""
    if name in env:
        return env[name]
    return runtime_defaults(profile).get(name, fallback)


def env_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "t", "yes", "y", "on")


def default_batched_tokens(rules: ReleaseRules, max_model_len: int) -> int:
    # v0 without chunked prefill: max(max_model_len, 2048); v1 serves with chunked prefill (GUESS 2048).
    return max(max_model_len, 2048) if rules.engine == "v0" else 2048


def server_config(rules: ReleaseRules, model: ModelShape, inputs: ServerInputs, env: Mapping[str, str],
                  num_blocks: int) -> ServerConfig:
    mml = inputs.max_model_len or model.max_position
    return ServerConfig(
        block_size=inputs.block_size, max_num_seqs=inputs.max_num_seqs, max_model_len=mml,
        max_num_batched_tokens=inputs.max_num_batched_tokens or default_batched_tokens(rules, mml),
        num_hpu_blocks=max(1, num_blocks), env=dict(env), prefix_caching=inputs.prefix_caching,
        max_num_prefill_seqs=inputs.max_num_prefill_seqs,
    )


# --- memory split ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySplit:
    device_visible: float
    weights: float  # as loaded (weights + allocator overhead)
    profile_overhead: float
    free: float  # after weights and the profiling run
    usable: float  # free x gpu_memory_utilization
    graph_reserved_frac: float
    graph_reserved: float
    kv: float  # bytes reserved for the KV cache
    block_bytes: int
    num_blocks: int
    margin: float  # free x (1 - gpu_memory_utilization), kept free for later

    @property
    def kv_allocated(self) -> float:
        return self.num_blocks * self.block_bytes

    @property
    def free_after_kv(self) -> float:
        return self.free - self.kv_allocated


def memory_split(cost: CostModel, profile_tokens: int, reserved_frac: float) -> MemorySplit:
    weights = cost.weights + WEIGHT_LOAD_OVERHEAD
    overhead = cost.profile_overhead(profile_tokens)
    visible = cost.device.visible_bytes
    free = visible - weights - overhead
    util = cost.sim.gpu_memory_utilization
    usable = free * util
    frac = 0.0 if cost.sim.enforce_eager else reserved_frac
    graph = usable * frac
    kv = usable - graph
    blocks = max(0, math.floor(kv / cost.block_bytes)) if kv > 0 else 0
    return MemorySplit(visible, weights, overhead, free, usable, frac, graph, kv, cost.block_bytes, blocks,
                       free * (1 - util))


# --- prediction ------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmupStep:
    kind: str  # "compile", "capture" or "compile+capture"
    phase: str  # "prompt" or "decode"
    index: int  # 1-based, as the release prints it
    total: int
    bucket: tuple
    seconds: float
    free_mem: float  # device bytes free when the release prints the line
    cache_hit: bool = False
    graph_mem: float = 0.0  # memory the captured graph keeps


@dataclass(frozen=True)
class GraphBudget:
    free_mem: float
    graph_free_mem: float
    prompt: float
    decode: float
    prompt_ratio: float


@dataclass(frozen=True)
class Failure:
    phase: str  # config, buckets, load, profile, kv, warmup
    message: str  # the last line a real server prints (exception class and text)
    exit_code: int = 1
    at_step: int | None = None  # warmup failures: index into StartupPrediction.steps


@dataclass
class StartupPrediction:
    profile: str
    rules: ReleaseRules
    sim: SimSettings
    env: dict
    config: ServerConfig | None = None
    memory: MemorySplit | None = None
    plan: BucketPlan | None = None
    steps: list[WarmupStep] = field(default_factory=list)
    budget: GraphBudget | None = None
    graphed_prompt: list = field(default_factory=list)  # in the release's capture order
    graphed_decode: list = field(default_factory=list)
    prompt_graph_mem: float = 0.0
    decode_graph_mem: float = 0.0
    warmed_prompt: frozenset = frozenset()
    warmed_decode: frozenset = frozenset()
    skip_warmup: bool = False
    lazy: bool = True
    graphs: bool = True  # HPU graphs captured at all
    load_seconds: float = 0.0
    profile_seconds: float = 0.0
    sampler_seconds: float = 0.0
    failure: Failure | None = None

    @property
    def num_blocks(self) -> int:
        return self.memory.num_blocks if self.memory else 0

    @property
    def warmup_seconds(self) -> float:
        """What "Warmup finished in N secs" reports: buckets, captures and the sampler."""
        return sum(s.seconds for s in self.steps) + self.sampler_seconds

    @property
    def cost(self) -> CostModel:
        return CostModel(self.sim, self.config.block_size if self.config else 128, self.compiled_mode)

    @property
    def compiled_mode(self) -> bool:
        return not self.lazy and not self.sim.enforce_eager

    def recipe_id(self, phase: str, bucket: tuple) -> str:
        """The recipe-cache key of one compiled shape of this start (its KV-cache size included)."""
        return recipe_key(self.profile, self.sim, self.config.block_size, self.num_blocks, phase, bucket)


def predict_startup(profile_name: str, sim: SimSettings, inputs: ServerInputs, env: Mapping[str, str],
                    cached_recipes: frozenset = frozenset()) -> StartupPrediction:
    """Everything a start of this configuration does before it serves, or where it fails."""
    from .capture import plan_warmup  # the warmup/capture rules live in their own module

    rules = rules_for(profile_name)
    profile = rules.profile
    env = dict(env)
    lazy = env_value(env, profile, "PT_HPU_LAZY_MODE", "1").strip() != "0"
    pred = StartupPrediction(profile, rules, sim, env, lazy=lazy,
                             skip_warmup=env_true(env_value(env, profile, "VLLM_SKIP_WARMUP", "false")))
    pred.graphs = lazy and not sim.enforce_eager and not pred.skip_warmup
    model = model_for(sim.model)
    cost = CostModel(sim, inputs.block_size, pred.compiled_mode)
    pred.load_seconds = T_INIT + cost.load_time()
    pred.profile_seconds = T_PROFILE * model.layers / 32
    cfg0 = server_config(rules, model, inputs, env, num_blocks=1)
    pred.config = cfg0
    failure = _check_flags(rules, cfg0, sim)
    if failure:
        pred.failure = failure
        return pred
    try:
        reserved = float(env_value(env, profile, "VLLM_GRAPH_RESERVED_MEM", "0.1"))
    except ValueError as e:  # the worker's float() raises at startup, as here
        pred.failure = Failure("config", f"ValueError: {e}")
        return pred
    # The profiling run uses the largest prompt bucket (at most max_num_batched_tokens). Size memory for
    # the budget first, then again for the largest bucket actually built: prompt buckets do not depend on
    # the KV block count, so two builds settle it.
    tokens = cfg0.max_num_batched_tokens
    for _ in range(2):
        mem = memory_split(cost, tokens, reserved)
        pred.memory = mem
        if mem.weights > mem.device_visible:
            pred.failure = Failure("load", devmem_error(model.largest_tensor_bytes(sim.dtype, sim.tp)))
            return pred
        if mem.free <= 0:
            pred.failure = Failure("profile", devmem_error(int(mem.profile_overhead)))
            return pred
        kv_failure = _check_kv(rules, cfg0, mem, cost)
        if kv_failure:
            pred.failure = kv_failure
            return pred
        pred.config = server_config(rules, model, inputs, env, mem.num_blocks)
        try:
            pred.plan = get_profile(profile).build(pred.config)
        except BucketConfigError as e:
            pred.failure = Failure("buckets", f"{_bucket_error_class(e)}: {e}")
            return pred
        largest = max((b * (s + c * inputs.block_size) for b, s, c in map(prompt_shape, pred.plan.prompt)),
                      default=tokens)
        if min(largest, cfg0.max_num_batched_tokens) == tokens:
            break
        tokens = min(largest, cfg0.max_num_batched_tokens)
    plan_warmup(pred, cost, cached_recipes)
    return pred


def _bucket_error_class(e: BucketConfigError) -> str:
    return "AssertionError" if "cannot be greater" in str(e) else "ValueError"


def devmem_error(size: int) -> str:
    # What the Habana PyTorch bridge raises when an HBM allocation fails.
    return ("RuntimeError: [Rank:0] FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed for size::"
            f"{size} ({size // MiB})MB")


def _check_flags(rules: ReleaseRules, cfg: ServerConfig, sim: SimSettings) -> Failure | None:
    t, mml, s = cfg.max_num_batched_tokens, cfg.max_model_len, cfg.max_num_seqs
    if rules.engine == "v0" and t < mml:
        # vLLM v0 without chunked prefill refuses this at config time.
        return Failure("config", f"ValueError: max_num_batched_tokens ({t}) is smaller than max_model_len ({mml}). "
                       "This effectively limits the maximum sequence length to max_num_batched_tokens and makes "
                       "vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
                       "max_model_len.")
    if t < s:
        return Failure("config", f"ValueError: max_num_batched_tokens ({t}) must be greater than or equal to "
                       f"max_num_seqs ({s}).")
    if not 0 < sim.gpu_memory_utilization <= 1:
        return Failure("config", "ValueError: GPU memory utilization must be less than 1.0. Got "
                       f"{sim.gpu_memory_utilization}.")
    heads = model_for(sim.model).heads
    if sim.tp < 1 or heads % sim.tp:
        return Failure("config", f"ValueError: Total number of attention heads ({heads}) must be divisible by "
                       f"tensor parallel size ({sim.tp}).")
    return None


def _check_kv(rules: ReleaseRules, cfg: ServerConfig, mem: MemorySplit, cost: CostModel) -> Failure | None:
    mml = cfg.max_model_len
    if rules.engine == "v0":
        if mem.num_blocks <= 0:
            return Failure("kv", "ValueError: No available memory for the cache blocks. Try increasing "
                           "`gpu_memory_utilization` when initializing the engine.")
        capacity = mem.num_blocks * cfg.block_size
        if mml > capacity:
            return Failure("kv", f"ValueError: The model's max seq len ({mml}) is larger than the maximum number "
                           f"of tokens that can be stored in KV cache ({capacity}). Try increasing "
                           "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
        return None
    needed = -(-mml // cfg.block_size) * mem.block_bytes
    if needed > mem.kv:
        est = max(0, int(mem.kv // cost.kv_token) // cfg.block_size * cfg.block_size)
        return Failure("kv", f"ValueError: To serve at least one request with the models's max seq len ({mml}), "
                       f"({needed / GiB:.2f} GiB KV cache is needed, which is larger than the available KV cache "
                       f"memory ({max(mem.kv, 0) / GiB:.2f} GiB). Based on the available memory, the estimated "
                       f"maximum model length is {est}. Try increasing `gpu_memory_utilization` or decreasing "
                       "`max_model_len` when initializing the engine.")
    return None
