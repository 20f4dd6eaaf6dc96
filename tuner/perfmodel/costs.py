"""Step, compile and memory costs of one model on one device (docs/calibration.md section 7), pure.

No I/O and no clocks. `Corrections` scale the documented constants to what boots of this study
showed (tuner/perfmodel/calibration.py); the identity corrections give the documented prior.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..buckets import ServerConfig
from ..buckets.serverdefaults import resolve
from ..vocabulary.speculative import MTP_METHODS, speculative_method, speculative_tokens
from .corrections import Corrections
from .hardware import BF16, FP8, Device, GiB, MiB, ModelShape, device_for, model_for
from .hybridcache import HYBRID_RELEASES, HybridLayout, hybrid_layout
from .rules import ReleaseRules

# --- constants of section 7 (GUESS where the spec says so) ------------------------------------
WEIGHT_LOAD_OVERHEAD = 14 * MiB  # 14.96 GiB of weights are logged as 14.97 GiB loaded (1.17 log)
PROFILE_BASE = 175 * MiB  # profiling run: 504 MiB at 4,096 tokens and 5.318 GiB at 65,536 tokens ->
PROFILE_PER_TOKEN = 0.0804 * MiB  # 175 MiB + 0.0804 MiB/token (for hidden 4096; scaled by hidden)
A_P, B_P, R_CTX = 0.5, 0.1e-3, 0.25  # prompt compile: a_p + b_p x (T + bs x ctx x B x r_ctx)
A_D, B_D = 0.3, 0.35e-3  # decode compile: a_d + b_d x num_blocks
C_CAP = 0.3  # seconds per captured HPU graph (1.17 log: 21 s for 63 graphs)
FP8_COMPILE = 7.6
# Recipe-cache hit: the share of a shape's compile time it still costs (loading the recipe); capture,
# weights, profiling and the sampler are not saved. The guide states whole-warmup ratios only (8B:
# 23/66 = 0.35 BF16, 34/504 = 0.067 FP8); with capture ~26% of an 8B fork-1.21 BF16 warmup (the README
# demo's balanced pick: 170 s compile + 59 s capture) the per-shape residual that reproduces them is
# (0.35 x 229 - 59) / 170 = 0.12 in BF16 and (0.067 x 4784 - 122) / 4662 = 0.043 in FP8.
CACHE_HIT = {BF16: 0.12, FP8: 0.043}
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
    hf_overrides: str | None = None  # the server's --hf-overrides (JSON): its model is read with them

    @property
    def shape(self) -> ModelShape:
        """The model as the server reads it (tuner/models): its config.json with the overrides over it."""
        return model_for(self.model, self.hf_overrides)


@dataclass(frozen=True)
class ServerInputs:
    """The scheduler-level vLLM flags; None means the engine's default (buckets/serverdefaults.py)."""

    block_size: int = 128
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None
    max_num_prefill_seqs: int | None = None
    num_gpu_blocks_override: int | None = None  # --num-gpu-blocks-override: the KV blocks whatever the memory says
    limit_mm_per_prompt: str | None = None  # --limit-mm-per-prompt as given (JSON): the vision warm-up reads it
    speculative_config: str | None = None  # --speculative-config as given (JSON): draft tokens a step proposes
    refused: str | None = None  # why vLLM refuses these options as it parses them (the start fails at once)
    mamba_cache_dtype: str = "auto"  # a hybrid's conv state (--mamba-cache-dtype; auto: the model's dtype)
    mamba_ssm_cache_dtype: str = "auto"  # and its recurrent state (--mamba-ssm-cache-dtype; auto: the model's rule)
    pooling: bool = False  # a pooling model (--runner pooling, --convert embed): no decode phase, no decode buckets


class CostModel:
    """Step, compile and memory costs of one model on one device (per card under tensor parallelism)."""

    def __init__(self, sim: SimSettings, block_size: int, compiled_mode: bool = False,
                 corrections: Corrections = Corrections(), hybrid: HybridLayout | None = None,
                 draft_weights: float = 0.0):
        self.sim = sim
        self.corr = corrections
        self.model: ModelShape = sim.shape  # from its config.json (tuner/models)
        self.device: Device = device_for(sim.device)
        self.block_size = block_size
        self.compiled_mode = compiled_mode  # PT_HPU_LAZY_MODE=0 without --enforce-eager
        tp = sim.tp
        self.params = self.model.active_params / tp  # compute per token: the routed experts only
        self.weights = self.model.weight_bytes(sim.dtype, tp)
        self.draft_weights = draft_weights  # an MTP draft's layers, loaded after the model (draft_weight_bytes)
        # A decode step reads the dense weights and the experts its tokens were routed to.
        self._expert_weights = (self.weights * self.model.expert_params / self.model.total_params
                                if self.model.experts else 0.0)
        self.kv_token = self.model.kv_bytes_per_token(sim.kv_dtype, tp) * corrections.kv_block
        self.block_bytes = int(round(self.kv_token * block_size))
        self.hybrid = hybrid  # a hybrid model's pool (hybridcache.py): blocks of its pages, states beside K/V
        if hybrid is not None:
            self.block_bytes = int(round(hybrid.block_bytes * corrections.kv_block))
        self.flops = self.device.flops(sim.dtype)
        self.compile_factor = (FP8_COMPILE if sim.dtype == FP8 else 1.0) * self.model.layers / 32

    # -- memory ---------------------------------------------------------------------------------
    def profile_overhead(self, tokens: int) -> float:
        return (PROFILE_BASE + PROFILE_PER_TOKEN * tokens) * self.model.hidden / 4096

    def graph_mem(self, rules: ReleaseRules, phase: str, tokens: int) -> float:
        pg, ptok, dg = rules.graph_mem or (self.model.graph_mem_mib, 0.0, self.model.graph_mem_mib)
        mib = (pg + ptok * tokens) if phase == "prompt" else dg
        return mib * MiB * self.corr.graph_mem

    # -- time -----------------------------------------------------------------------------------
    def _tp(self, tokens: int) -> float:
        if self.sim.tp == 1:
            return 0.0
        return 2 * self.model.layers * (TP_LATENCY + tokens * self.model.hidden * 2 / TP_LINK_BW)

    def decode_time(self, bs: int, blocks: int, graphed: bool) -> float:
        d = self.device
        mem = (self.weights_read(bs) + blocks * self.block_bytes) / (d.eta_m * d.bandwidth)
        compute = 2 * self.params * bs / (d.eta_c * self.flops)
        t = d.c_dec + max(mem, compute) + self._tp(bs)
        if not graphed:
            t *= COMPILED_NO_GRAPH if self.compiled_mode else NO_GRAPH_DECODE
        return t * self.corr.decode_step

    def weights_read(self, tokens: int) -> float:
        """Bytes of weights one step reads for `tokens` tokens (all of a dense model's)."""
        if not self._expert_weights:
            return self.weights
        return self.weights - self._expert_weights * (1.0 - self.model.moe_weight_fraction_read(tokens))

    def prefill_time(self, bs: int, seq: int, ctx_blocks: int, graphed: bool) -> float:
        d, m, b = self.device, self.model, self.block_size
        attention = 4 * m.attention_layers * m.hidden * bs * seq * (seq / 2 + ctx_blocks * b) / self.sim.tp
        flops = 2 * self.params * bs * seq + attention
        mem = (self.weights_read(bs * seq) + bs * (seq + ctx_blocks * b) * self.kv_token) / (d.eta_m * d.bandwidth)
        t = d.c_pre + max(flops / (d.eta_c * self.flops), mem) + self._tp(bs * seq)
        if not graphed and not self.compiled_mode:
            t *= NO_GRAPH_PREFILL
        return t * self.corr.prefill_step

    def prompt_compile(self, bs: int, seq: int, ctx_blocks: int, cache_hit: bool = False) -> float:
        tokens = bs * seq + bs * ctx_blocks * self.block_size * R_CTX
        return (A_P + B_P * tokens) * self.compile_factor * self._cache(cache_hit)

    def decode_compile(self, blocks: int, cache_hit: bool = False) -> float:
        return (A_D + B_D * blocks) * self.compile_factor * self._cache(cache_hit)

    def capture_time(self) -> float:
        return C_CAP * self.model.layers / 32

    def _cache(self, hit: bool) -> float:
        return CACHE_HIT[self.sim.dtype] * self.corr.cache_hit if hit else 1.0

    def load_time(self) -> float:
        return self.weights / LOAD_BW * self.corr.load


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


def hybrid_cache(profile: str, sim: SimSettings, inputs: ServerInputs, compact_gdn: bool) -> HybridLayout | None:
    """The KV pool of a hybrid model on this release (None: attention layers only, the plain account)."""
    model = sim.shape
    spec = model.recurrent
    if spec is None:
        return None
    spec_tokens = draft_tokens(inputs, model)  # the conv state keeps them, a request holds a state block for each
    # the states in the model's dtype where "auto", which on HPU is bfloat16 (the platform's fallback)
    return hybrid_layout(profile, model.model_type, model.attention_layers, model.attn_page_token_bytes(sim.kv_dtype,
                         sim.tp), spec.layers, spec.page_bytes(sim.tp, "bfloat16", inputs.mamba_cache_dtype,
                         inputs.mamba_ssm_cache_dtype, spec_tokens), spec.kind,
                         inputs.block_size, bool(inputs.prefix_caching), compact_gdn, spec_tokens)


def draft_weights(inputs: ServerInputs, sim: SimSettings) -> int:
    """One rank's bytes of an MTP draft (the model's own MTP layers); 0 without one. A separate draft model's
    (EAGLE, draft_model) are not known here."""
    if speculative_method(inputs.speculative_config) not in MTP_METHODS:
        return 0
    return sim.shape.draft_weight_bytes(sim.dtype, sim.tp)


def draft_tokens(inputs: ServerInputs, model: ModelShape) -> int:
    """Tokens a speculative step proposes (0: none); ValueError naming a --speculative-config vLLM refuses."""
    return speculative_tokens(inputs.speculative_config, model.mtp_layers)


def server_config(rules: ReleaseRules, model: ModelShape, inputs: ServerInputs, env: Mapping[str, str],
                  num_blocks: int) -> ServerConfig:
    # --max-model-len auto (-1) starts from the model's own length; the KV cache may then cut it (predict.py)
    mml = inputs.max_model_len if (inputs.max_model_len or 0) > 0 else model.max_position
    limits = resolve(rules.profile, mml, inputs.max_num_seqs, inputs.max_num_batched_tokens, model.multimodal)
    return ServerConfig(
        block_size=inputs.block_size, max_num_seqs=limits.max_num_seqs, max_model_len=mml,
        max_num_batched_tokens=limits.max_num_batched_tokens,
        num_hpu_blocks=max(1, num_blocks), env=dict(env), prefix_caching=inputs.prefix_caching,
        max_num_prefill_seqs=inputs.max_num_prefill_seqs, pooling=inputs.pooling,
        **runner_inputs(rules.profile, model, inputs),
    )


def runner_inputs(profile: str, model: ModelShape, inputs: ServerInputs) -> dict:
    """The ServerConfig fields the release's runner takes from the model and its options: the draft tokens of a
    speculative config (when any), and model_bucket_inputs. ValueError for a --speculative-config vLLM refuses."""
    tokens = draft_tokens(inputs, model)
    return {**({"num_speculative_tokens": tokens} if tokens else {}), **model_bucket_inputs(profile, model)}


def model_bucket_inputs(profile: str, model: ModelShape) -> dict:
    """What vllm-gaudi's runner hands its bucketing from the model (v0.26 and main; hpu_model_runner.py):
    a model with recurrent layers passes its mamba chunk size, 128 when its config sets none, and (main) keeps the
    whole decode block range, as does a model whose sliding window sits beside other layer types."""
    if profile not in HYBRID_RELEASES:
        return {}
    out = {}
    if model.recurrent is not None:
        chunk = model.mamba_chunk
        out.update(mamba_chunk_size=chunk if chunk else 128, mamba_chunk_size_explicit=chunk is not None)
    if model.recurrent is not None or model.interleaved_sliding:
        out["skip_decode_block_clamp"] = True
    return out


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
    weights = cost.weights + cost.draft_weights + WEIGHT_LOAD_OVERHEAD
    overhead = cost.profile_overhead(profile_tokens)
    visible = cost.device.visible_bytes
    free = visible - weights - overhead + cost.corr.free_mem_offset_gib * GiB
    util = cost.sim.gpu_memory_utilization
    usable = free * util
    frac = 0.0 if cost.sim.enforce_eager else reserved_frac
    graph = usable * frac
    kv = usable - graph
    if cost.hybrid is not None:  # the plugin passes on the share its separate state tensors leave
        blocks = int(kv * cost.hybrid.hpu_factor) // cost.block_bytes if kv > 0 else 0
    else:
        blocks = max(0, math.floor(kv / cost.block_bytes)) if kv > 0 else 0
    return MemorySplit(visible, weights, overhead, free, usable, frac, graph, kv, cost.block_bytes, blocks,
                       free * (1 - util))
