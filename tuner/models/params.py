"""Parameter counts from a config.json: total, active per token, and the bytes the checkpoint stores.

Counted layer by layer as the architectures build their weights (embeddings, attention projections
with their biases and norms, dense or expert MLPs, the router, shared experts), so a dense Llama
counts to the parameter. A vision tower is counted from its `vision_config` (blocks of attention
and MLP, the patch embedding and the merger); that part is an estimate, and the safetensors index,
when the model folder has one, replaces all of it with the stored total.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hfconfig import TextConfig
from .vision import vision_tower

# Model types whose q/k/v projections carry a bias without saying so in the config.
QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_5_vl_text", "qwen2_vl_text"})
# Model types with a per-head RMSNorm on q and k (Qwen3 family, Gemma-3, OLMo-2 style).
QK_NORM_TYPES = ("qwen3", "gemma3", "olmo2", "qwen3_next", "qwen3_5")


@dataclass(frozen=True)
class ParamCount:
    total: int  # every parameter of the checkpoint (vision tower included)
    active: int  # what one token of text runs through (experts per token, not all experts)
    experts: int  # of total: the routed experts' weights
    embedding: int  # of total: input embeddings and the LM head (kept 16-bit by FP8 recipes)
    vision: int  # of total: the vision tower and its projector


def _attention(t: TextConfig, kind: str) -> int:
    r, h = t.raw, t.hidden
    if kind == "mlp":  # NemotronH's MLP or MoE layer: no mixer
        return 0
    if kind in ("linear", "mamba"):
        return _linear_attention(t)
    if t.mla and r.get("kv_lora_rank") is not None:  # DeepSeek-V4's latent has none: counted as its heads below
        rope, nope = int(r.get("qk_rope_head_dim") or 0), int(r.get("qk_nope_head_dim") or 0)
        v_dim, lora, q_lora = int(r.get("v_head_dim") or nope), int(r["kv_lora_rank"]), r.get("q_lora_rank")
        q = (h * q_lora + q_lora + q_lora * t.heads * (nope + rope)) if q_lora else h * t.heads * (nope + rope)
        kv = h * (lora + rope) + lora + lora * t.heads * (nope + v_dim)
        return q + kv + t.heads * v_dim * h
    d = int(r.get("head_dim") or 0) or h // t.heads
    q_out, kv_out = t.heads * d, t.total_kv_heads * d
    n = h * q_out + 2 * h * kv_out + q_out * h
    if r.get("attention_bias"):
        n += q_out + 2 * kv_out + h
    elif t.model_type in QKV_BIAS_TYPES:
        n += q_out + 2 * kv_out
    if t.model_type.startswith(QK_NORM_TYPES):
        n += 2 * d
    if t.model_type == "gpt_oss":
        n += t.heads  # the attention sinks
    return n


def _linear_attention(t: TextConfig) -> int:
    # Gated DeltaNet (Qwen3-Next / Qwen3.5): fused in-projections, a causal conv, decay and gate terms.
    r, h = t.raw, t.hidden
    nk, dk = int(r.get("linear_num_key_heads") or 16), int(r.get("linear_key_head_dim") or 128)
    nv, dv = int(r.get("linear_num_value_heads") or 32), int(r.get("linear_value_head_dim") or 128)
    kernel = int(r.get("linear_conv_kernel_dim") or 4)
    qkvz = h * (2 * nk * dk + 2 * nv * dv)
    ba = h * 2 * nv
    conv = (2 * nk * dk + nv * dv) * kernel
    return qkvz + ba + conv + 2 * nv + dv + nv * dv * h


def _is_moe_layer(t: TextConfig, i: int) -> bool:
    r = t.raw
    if not t.experts:
        return False
    if i < int(r.get("first_k_dense_replace") or 0):
        return False
    if i in (r.get("mlp_only_layers") or []):
        return False
    freq = r.get("moe_layer_freq") or 1
    if isinstance(freq, list):  # a per-layer 0/1 list (MiniMax)
        return i < len(freq) and bool(freq[i])
    freq = int(freq)
    step = int(r.get("decoder_sparse_step") or 1)
    if r.get("decoder_sparse_step") is not None:
        return (i + 1) % step == 0
    if r.get("interleave_moe_layer_step"):  # Llama 4 Maverick: every n-th layer is MoE
        return (i + 1) % int(r["interleave_moe_layer_step"]) == 0
    return i % freq == 0


def _size(value, i: int) -> int | None:
    """A size written once, or per layer as a list (Gemma-3n's intermediate_size)."""
    if isinstance(value, list):
        value = value[i] if i < len(value) else (value[-1] if value else None)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _mlp(t: TextConfig, i: int) -> tuple[int, int, int]:
    """(total, active, routed experts) of layer i's MLP."""
    r, h = t.raw, t.hidden
    dense = next((v for k in ("intermediate_size", "ffn_dim", "ffn_hidden_size") if (v := _size(r.get(k), i))), 4 * h)
    if not _is_moe_layer(t, i):
        n = 3 * h * dense  # gate, up, down: every family here gates its MLP
        return n, n, 0
    inter = next((v for k in ("moe_intermediate_size", "intermediate_size_moe", "expert_ffn_hidden_size")
                  if (v := _size(r.get(k), i))), dense)
    one = 3 * h * inter
    if t.model_type == "gpt_oss":
        one += 2 * inter + h  # gate_up and down biases per expert
    router = h * t.experts + (t.experts if t.model_type == "gpt_oss" else 0)
    shared = 0
    if r.get("n_shared_experts"):
        shared = int(r["n_shared_experts"]) * one
    elif r.get("shared_expert_intermediate_size"):
        shared = 3 * h * int(r["shared_expert_intermediate_size"]) + h  # its sigmoid gate
    elif t.model_type.startswith("llama4"):
        shared = 3 * h * dense
    experts = t.experts * one
    return experts + router + shared, t.experts_per_token * one + router + shared, experts


def _vision(config_vision: dict | None) -> int:
    tower = vision_tower(config_vision)
    return tower.params if tower else 0


def tied_embeddings(t: TextConfig) -> bool:
    """Whether the LM head shares the embedding table, as vLLM builds it (hfconfig.TextConfig.tied)."""
    return t.tied


def count_params(t: TextConfig) -> ParamCount:
    h = t.hidden
    embedding = t.vocab * h * (1 if tied_embeddings(t) else 2)
    total, active, experts = embedding + h, embedding + h, 0  # + the final norm
    norms = 4 if t.model_type.startswith(("gemma2", "gemma3")) else 2  # Gemma norms after each block too
    for i, kind in enumerate(t.layer_kinds):
        attention = _attention(t, kind) + norms * h  # with the norms around it
        mlp_total, mlp_active, mlp_experts = _mlp(t, i)
        total += attention + mlp_total
        active += attention + mlp_active
        experts += mlp_experts
    vision = _vision(t.vision)
    return ParamCount(total=total + vision, active=active, experts=experts, embedding=embedding, vision=vision)
