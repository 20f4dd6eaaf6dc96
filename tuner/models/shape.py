"""ModelShape: what the performance model, the bucket engine, the load client and the simulator need
to know about a served model, derived from its config.json (hfconfig) and counted weights (params).

Everything is per card under tensor parallelism: KV heads split as vLLM splits them (replicated when
the ranks outnumber them; one latent per layer under MLA), weights divided across the ranks (experts
included: expert parallelism splits them the same way as TP does in bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .dtypes import BF16, DTYPE_BYTES, FP8
from .hfconfig import TextConfig
from .params import ParamCount, count_params, mtp_params
from .quantized import FP8_METHODS, linear_format
from .recurrent import RecurrentSpec, recurrent_spec
from .vision import VisionTower, vision_tower

# HPU-graph memory per captured bucket: 10 MiB for Llama-3.1-8B and 20 MiB for 70B (docs/calibration.md
# 7.4); other models scale with layers x hidden through those two points (5x the size -> 2x the memory).
GRAPH_MEM_8B_MIB = 10.0
GRAPH_MEM_EXPONENT = math.log(2) / math.log(5)
MXFP4_BYTES = 0.5 + 1 / 32  # 4-bit values, one 8-bit scale per 32 (gpt-oss experts)


@dataclass(frozen=True)
class ModelShape:
    name: str  # how the user named it (catalogue id, path or cache id)
    source: str  # where its config came from: a path, "HF cache: ...", "catalogue: ..."
    architecture: str
    total_params: int
    active_params: int  # per token: the experts a token is routed to, not all of them
    layers: int
    attention_layers: int  # layers that cache K/V per token (hybrid models have fewer)
    hidden: int
    heads: int
    kv_heads: int  # total, before the tensor-parallel split
    head_dim: int  # as cached (MLA: kv_lora_rank + qk_rope_head_dim)
    mla: bool
    vocab: int
    max_position: int  # vLLM's derived max_model_len: the default when the user gives none
    experts: int = 0
    experts_per_token: int = 0
    expert_params: int = 0
    embedding_params: int = 0
    vision_params: int = 0
    sliding_window: int | None = None
    quantization: str | None = None  # the checkpoint's quant_method (fp8, mxfp4, gptq, ...), stored that way
    # bytes a linear layer's weight takes as stored (quantized.linear_format: int4 GPTQ ~0.52); None: 16-bit
    linear_bytes: float | None = None
    stored_as: str = ""  # how its linear layers store a weight (int4, fp8, nvfp4, ...), when quantized
    stored_bytes: int | None = None  # the safetensors index's total_size, when known
    multimodal: bool = False
    generic: bool = False  # kept for callers that ask: a model known from its config is never a guess
    # For the vision warm-up (tuner/buckets/vision.py): the language part's model_type, the vision_config
    # as written, and whether the text RoPE is M-RoPE as vLLM reads the config (hfconfig.mrope_of) and as
    # the fork reads it (its top-level config only).
    model_type: str = ""
    vision: dict | None = field(default=None, repr=False, hash=False, compare=False)
    mrope: bool = False
    fork_mrope: bool = False
    # a pooling model's vector (hfconfig.TextConfig): its width and the widths a request may ask for
    embedding_size: int = 0
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] = ()
    labels: tuple[str, ...] = ("LABEL_0", "LABEL_1")  # a classifier's, in index order
    config_model_type: str = ""  # the config's top-level model_type (vLLM's hf_config.model_type)
    layer_kv: tuple[tuple[int, int], ...] = ()  # (KV heads, head size) per cached layer, when they differ
    # the longest --max-model-len vLLM serves without VLLM_ALLOW_LONG_MAX_MODEL_LEN (LongRoPE: longer than
    # the default), and the config key its refusal names
    max_len_limit: int = 0
    max_len_key: str = "max_position_embeddings"
    # a hybrid's recurrent layers (Gated DeltaNet, Mamba, ...): one state per sequence each (tuner/models/recurrent.py)
    recurrent: RecurrentSpec | None = field(default=None, repr=False, hash=False, compare=False)
    # What vllm-gaudi's runner reads for the buckets: a sliding window beside other layer types (its
    # interleaved_sliding_window: Gemma-3/4, gpt-oss), and a hybrid's own mamba chunk size (mamba_chunk_size,
    # else chunk_size; None: the config sets none)
    interleaved_sliding: bool = False
    mamba_chunk: int | None = None
    mtp_layers: int = 0  # its multi-token-prediction layers (num_nextn_predict_layers, mtp_num_hidden_layers)
    mtp_params: int = 0  # what they add when an MTP draft serves beside it (params.mtp_params)

    @property
    def params(self) -> int:
        return self.total_params

    @property
    def vision_tower(self) -> VisionTower | None:
        """The vision tower its vision_config describes (None for a text model)."""
        return vision_tower(self.vision)

    @property
    def graph_mem_mib(self) -> float:
        ratio = self.layers * self.hidden / (32 * 4096)
        return GRAPH_MEM_8B_MIB * ratio ** GRAPH_MEM_EXPONENT

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        return 1 if self.mla else max(1, self.kv_heads // max(1, tp))

    def kv_bytes_per_token(self, kv_dtype: str, tp: int = 1) -> int:
        """K and V (one latent under MLA) of every attention layer, on one tensor-parallel rank; layer by
        layer when their heads differ (Gemma-4's full-attention layers: fewer, wider heads)."""
        if self.layer_kv:
            return sum(2 * max(1, heads // max(1, tp)) * dim for heads, dim in self.layer_kv) * DTYPE_BYTES[kv_dtype]
        per_layer = (1 if self.mla else 2) * self.kv_heads_per_rank(tp) * self.head_dim
        return self.attention_layers * per_layer * DTYPE_BYTES[kv_dtype]

    def attn_page_token_bytes(self, kv_dtype: str, tp: int = 1) -> int:
        """One attention layer's K and V (MLA: its latent) for one token on one rank, with the model-wide head count
        and size vLLM's hybrid page alignment reads (get_num_kv_heads, get_head_size)."""
        return (1 if self.mla else 2) * self.kv_heads_per_rank(tp) * self.head_dim * DTYPE_BYTES[kv_dtype]

    def draft_weight_bytes(self, dtype: str, tp: int = 1) -> int:
        """One rank's bytes of the MTP draft layers, in the weights' own format (their share of the weights)."""
        if not self.mtp_params or not self.total_params:
            return 0
        return int(self.weight_bytes(dtype, tp) * self.mtp_params / self.total_params)

    def checkpoint_bytes(self) -> int:
        """The weights as the checkpoint stores them (all ranks together)."""
        if self.stored_bytes:
            return self.stored_bytes
        q = self.quantization
        if q == "mxfp4":
            return int(self.expert_params * MXFP4_BYTES + (self.total_params - self.expert_params) * 2)
        if self.linear_bytes:
            kept = self.embedding_params + self.vision_params
            return int((self.total_params - kept) * self.linear_bytes + kept * 2)
        if q in FP8_METHODS:  # named FP8 without a config that says how (an -FP8 catalogue variant)
            return self._fp8_bytes()
        return self.total_params * 2

    def _fp8_bytes(self) -> int:
        # Linear layers at one byte plus a float32 scale per 128x128 block; embeddings, LM head and the
        # vision tower stay 16-bit as the FP8 recipes leave them.
        kept = self.embedding_params + self.vision_params
        linear = self.total_params - kept
        return int(linear * (1 + 4 / (128 * 128)) + kept * 2)

    def weight_bytes(self, dtype: str, tp: int = 1) -> int:
        """Device bytes of one rank's weights served in `dtype` (a quantized checkpoint: as stored)."""
        if self.quantization or dtype == BF16:
            return self.checkpoint_bytes() // tp
        if dtype == FP8:  # a 16-bit checkpoint quantized at load (INC): linear layers at one byte
            return self._fp8_bytes() // tp
        raise ValueError(f"unknown weight dtype {dtype!r}")

    def largest_tensor_bytes(self, dtype: str, tp: int = 1) -> int:
        # The embedding table; what an out-of-memory weight load reports as the failed allocation.
        return self.vocab * self.hidden * 2 // tp

    def moe_weight_fraction_read(self, tokens: int) -> float:
        """Share of the routed experts' weights one decode step reads for `tokens` tokens: each picks
        experts_per_token of the experts, so a batch touches E x (1 - (1 - k/E)^tokens) of them."""
        if not self.experts or not self.experts_per_token:
            return 1.0
        k, e = self.experts_per_token, self.experts
        return 1.0 - (1.0 - k / e) ** max(1, tokens)

    def describe(self) -> dict:
        """The figures `buckets --json` and the reports show."""
        return {"name": self.name, "source": self.source, "architecture": self.architecture,
                "total_params": self.total_params, "active_params": self.active_params, "layers": self.layers,
                "attention_layers": self.attention_layers, "kv_heads": self.kv_heads, "head_dim": self.head_dim,
                "mla": self.mla, "experts": self.experts, "experts_per_token": self.experts_per_token,
                "quantization": self.quantization, "stored_as": self.stored_as, "max_position": self.max_position,
                "multimodal": self.multimodal}


def _quant_method(t: TextConfig, forced: str | None) -> str | None:
    if forced:
        return forced
    q = t.quantization
    if not q:
        return None
    fmt = linear_format(q, t.hidden)
    return fmt.method if fmt else (str(q.get("quant_method") or q.get("quant_algo") or "").lower() or None)


def shape_from_config(t: TextConfig, name: str, source: str, stored_bytes: int | None = None,
                      quantization: str | None = None) -> ModelShape:
    """The shape of a read config; `quantization` forces a format the config does not state
    (an `-FP8` variant named after a catalogue model)."""
    counted: ParamCount = count_params(t)
    method = _quant_method(t, quantization)
    fmt = None if quantization else linear_format(t.quantization, t.hidden)
    dtype = (t.torch_dtype or "").lower()
    if stored_bytes and dtype in ("float32", "fp32") and not method:
        stored_bytes //= 2  # a float32 checkpoint is served in 16 bits
    return ModelShape(
        name=name, source=source, architecture=t.architecture, total_params=counted.total,
        active_params=counted.active, layers=t.layers, attention_layers=t.attention_layers, hidden=t.hidden,
        # layers that differ: vLLM's whole-model figures are the largest layer's (ModelArchitectureConfig.from_layers)
        heads=t.heads, kv_heads=max([t.total_kv_heads, *(h for h, _ in t.layer_kv)]),
        head_dim=max([t.head_size, *(d for _, d in t.layer_kv)]), mla=t.mla, vocab=t.vocab, layer_kv=t.layer_kv,
        max_position=t.max_position, experts=t.experts, experts_per_token=t.experts_per_token,
        expert_params=counted.experts, embedding_params=counted.embedding, vision_params=counted.vision,
        sliding_window=t.sliding_window, quantization=method,
        linear_bytes=fmt.bytes_per_weight if fmt else None, stored_as=fmt.name if fmt else "",
        stored_bytes=stored_bytes, multimodal=t.multimodal,
        model_type=t.model_type, vision=t.vision, mrope=t.mrope, fork_mrope=t.fork_mrope,
        config_model_type=t.config_model_type, embedding_size=t.embedding_size or t.hidden, matryoshka=t.matryoshka,
        matryoshka_dimensions=t.matryoshka_dimensions, labels=t.labels,
        max_len_limit=t.max_len_limit or t.max_position, max_len_key=t.max_len_key, recurrent=_recurrent(t),
        interleaved_sliding=bool(t.sliding_window) and len(set(t.layer_kinds)) > 1, mamba_chunk=_mamba_chunk(t),
        mtp_layers=(mtp := int(t.raw.get("num_nextn_predict_layers") or t.raw.get("mtp_num_hidden_layers") or 0)),
        mtp_params=mtp_params(t, mtp),
    )


def _mamba_chunk(t: TextConfig) -> int | None:
    chunk = t.raw.get("mamba_chunk_size")
    chunk = t.raw.get("chunk_size") if chunk is None else chunk
    return int(chunk) if isinstance(chunk, int) and not isinstance(chunk, bool) else None


def _recurrent(t: TextConfig) -> RecurrentSpec | None:
    """The recurrent state, or None (the attention-only account) when the config lacks a field it needs."""
    try:
        return recurrent_spec(t)
    except (KeyError, TypeError, ValueError):
        return None

