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
# Model types whose MLP (and experts) is up and down projections only, no gate (GPT-2 and BigCode lineages, Falcon,
# GPT-NeoX, Phi-2, StarCoder2, OPT, Nemotron's relu2, Apertus' xIELU, Arcee); checked against transformers' own
# modules (benchmarks/model_oracle.py --params). Every other family gates its MLP (SwiGLU, GeGLU).
UNGATED_MLP_TYPES = frozenset({
    "gpt2", "gpt-sw3", "gpt_bigcode", "gpt_neo", "gpt_neox", "gpt_neox_japanese", "gptj", "codegen", "opt", "falcon",
    "phi", "starcoder2", "bloom", "mpt", "persimmon", "fuyu", "apertus", "arcee", "jais2", "nemotron", "nemotron_h",
    "biogpt", "openai-gpt", "xglm", "nanochat", "cpmant",
    # BERT-style encoders vLLM serves as embedding models (BERT, RoBERTa, XLM-R, ...)
    "bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "data2vec-text", "ernie", "roberta-prelayernorm",
    "bert-generation", "megatron-bert", "electra", "rembert", "roformer", "big_bird", "xmod", "roc_bert",
})
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
        mamba = _mamba(t)
        return _linear_attention(t) if mamba is None or "linear_num_key_heads" in r else mamba
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


def _int(r: dict, names: tuple[str, ...], default: int | None = None) -> int | None:
    return next((int(r[n]) for n in names if isinstance(r.get(n), (int, float)) and not isinstance(r[n], bool)),
                default)


def _flag(r: dict, names: tuple[str, ...], default: bool) -> bool:
    return next((bool(r[n]) for n in names if r.get(n) is not None), default)


def _mamba(t: TextConfig) -> int | None:
    """A Mamba mixer's parameters, from the keys each hybrid family writes; None when the config has none.

    Mamba2 (NemotronH, Bamba, Granite-4 hybrid, Falcon-H1): one in-projection to the gate, x, B, C (per group)
    and dt (per head), a causal conv over x, B and C, per-head dt bias, A and D, a gated norm and the out-
    projection. Mamba1 (Jamba; `mamba_dt_rank`): in-projection to x and z, a conv, x-to-(dt, B, C), dt
    projection, A (inner x state), D and the out-projection."""
    r, h = t.raw, t.hidden
    state = _int(r, ("ssm_state_size", "mamba_d_state"))
    if state is None:
        return None
    conv = _int(r, ("conv_kernel", "mamba_d_conv"), 4)
    expand = _int(r, ("expand", "mamba_expand"), 2)
    conv_bias = _flag(r, ("use_conv_bias", "mamba_conv_bias"), True)
    proj_bias = _flag(r, ("mamba_proj_bias", "add_bias_linear"), False)
    dt_rank = _int(r, ("mamba_dt_rank",))
    if dt_rank:  # Mamba1
        inner = expand * h
        n = h * 2 * inner + inner * conv + inner * (dt_rank + 2 * state) + dt_rank * inner + inner
        n += inner * state + inner + inner * h + (inner if conv_bias else 0) + ((2 * inner + h) if proj_bias else 0)
        return n + (dt_rank + 2 * state if t.model_type == "jamba" else 0)  # Jamba's dt, B and C norms
    heads = _int(r, ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads"))
    head_dim = _int(r, ("mamba_head_dim", "mamba_d_head", "mamba_headdim"))
    groups = _int(r, ("n_groups", "mamba_n_groups", "mamba_ngroups"), 1)
    inner = _int(r, ("mamba_d_ssm",)) or (heads * head_dim if heads and head_dim else expand * h)
    heads = heads or (inner // head_dim if head_dim else 1)
    conv_dim = inner + 2 * groups * state
    projected = inner + conv_dim + heads
    n = h * projected + conv_dim * conv + 3 * heads + inner + inner * h
    return n + (conv_dim if conv_bias else 0) + ((projected + h) if proj_bias else 0)


def _blocks(t: TextConfig) -> list[str] | None:
    """NemotronH's block per layer (its pattern or block list): each layer is one mixer or one MLP, not both."""
    r = t.raw
    pattern = r.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return [{"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}.get(c, "mamba") for c in pattern]
    blocks = r.get("layers_block_type")
    if isinstance(blocks, list) and t.model_type.startswith("nemotron_h"):
        return [{"moe": "moe", "mlp": "mlp"}.get(str(b), "mixer") for b in blocks]
    return None


def _is_moe_layer(t: TextConfig, i: int) -> bool:
    r = t.raw
    if not t.experts:
        return False
    if i < int(r.get("first_k_dense_replace") or 0):
        return False
    if i in (r.get("mlp_only_layers") or []):
        return False
    if r.get("expert_layer_period"):  # Jamba: experts every period-th layer from the offset
        return i % int(r["expert_layer_period"]) == int(r.get("expert_layer_offset") or 0)
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


def _mlp(t: TextConfig, i: int, moe: bool | None = None) -> tuple[int, int, int]:
    """(total, active, routed experts) of layer i's MLP (`moe`: whether it has experts, when the config's block
    list says so)."""
    r, h = t.raw, t.hidden
    dense = next((v for k in ("intermediate_size", "ffn_dim", "ffn_hidden_size") if (v := _size(r.get(k), i))), 4 * h)
    mats = 2 if t.model_type in UNGATED_MLP_TYPES else 3  # up, down (and a gate)
    if not (_is_moe_layer(t, i) if moe is None else moe):
        n = mats * h * dense
        return n, n, 0
    inter = next((v for k in ("moe_intermediate_size", "intermediate_size_moe", "expert_ffn_hidden_size")
                  if (v := _size(r.get(k), i))), dense)
    one = mats * h * inter
    if t.model_type == "gpt_oss":
        one += 2 * inter + h  # gate_up and down biases per expert
    router = h * t.experts + (t.experts if t.model_type == "gpt_oss" else 0)
    shared = 0
    if r.get("n_shared_experts"):
        shared = int(r["n_shared_experts"]) * one
    elif r.get("shared_expert_intermediate_size"):
        shared = mats * h * int(r["shared_expert_intermediate_size"]) + h  # its sigmoid gate
    elif r.get("shared_intermediate_size"):  # Granite MoE shared / hybrid: one shared MLP beside the experts
        shared = mats * h * int(r["shared_intermediate_size"])
    elif t.model_type.startswith("llama4"):
        shared = mats * h * dense
    experts = t.experts * one
    return experts + router + shared, t.experts_per_token * one + router + shared, experts


def _vision(config_vision: dict | None) -> int:
    tower = vision_tower(config_vision)
    return tower.params if tower else 0


def tied_embeddings(t: TextConfig) -> bool:
    """Whether the LM head shares the embedding table, as vLLM builds it (hfconfig.TextConfig.tied)."""
    return t.tied


def _per_layer_inputs(t: TextConfig) -> int:
    """Per-layer input embeddings (Gemma-3n, Gemma-4's E models: hidden_size_per_layer_input > 0): a table of
    vocab_size_per_layer_input x (layers x that width), its projection from the hidden state and norm, and per
    layer an input gate, a projection back and a norm."""
    r, h = t.raw, t.hidden
    width = _int(r, ("hidden_size_per_layer_input",), 0) or 0
    if width <= 0:
        return 0
    vocab = _int(r, ("vocab_size_per_layer_input",), t.vocab) or t.vocab
    n = t.layers
    return vocab * n * width + h * n * width + width + n * (2 * h * width + h)


def count_params(t: TextConfig) -> ParamCount:
    h = t.hidden
    embedding = t.vocab * h * (1 if tied_embeddings(t) else 2)
    total, active, experts = embedding + h, embedding + h, 0  # + the final norm
    norms = 4 if t.model_type.startswith(("gemma2", "gemma3")) else 2  # Gemma norms after each block too
    blocks = _blocks(t)
    parallel = _mamba(t) if t.model_type == "falcon_h1" else None  # Falcon-H1: attention and Mamba in each layer
    for i, kind in enumerate(t.layer_kinds):
        attention = _attention(t, kind) + norms * h + (parallel or 0)  # with the norms around it
        if blocks is not None and i < len(blocks):
            attention = norms * h // 2 + (_attention(t, kind) if blocks[i] not in ("mlp", "moe") else 0)
            if blocks[i] not in ("mlp", "moe"):  # a mixer layer: no MLP
                total, active = total + attention, active + attention
                continue
        mlp_total, mlp_active, mlp_experts = _mlp(t, i, None if blocks is None else blocks[i] == "moe")
        total += attention + mlp_total
        active += attention + mlp_active
        experts += mlp_experts
    per_layer = _per_layer_inputs(t)  # Gemma-3n / Gemma-4 E models: an embedding per layer
    total, active, embedding = total + per_layer, active + per_layer, embedding + per_layer
    vision = _vision(t.vision)
    return ParamCount(total=total + vision, active=active, experts=experts, embedding=embedding, vision=vision)
