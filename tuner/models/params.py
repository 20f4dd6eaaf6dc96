"""Parameter counts from a config.json: total, active per token, and the bytes the checkpoint stores.

Counted layer by layer as the architectures build their weights (embeddings, attention projections
with their biases and norms, dense or expert MLPs, the router, shared experts), so a dense Llama
counts to the parameter; benchmarks/model_oracle.py --params checks each causal-LM type against
transformers' own model of its default config. The mixers that keep a state per sequence are counted in
params_mixers.py, the DeepSeek lineage's latent and compressed attention in params_latent.py. A vision
tower is counted from its `vision_config` (blocks of attention and MLP, the patch embedding and the
merger); that part is an estimate, and the safetensors index, when the model folder has one, replaces
all of it with the stored total.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hfconfig import TextConfig
from .params_latent import deepseek_v4_attention, hyper_connections, is_deepseek_v4, mla
from .params_mixers import int_of, mamba, mixer
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
# Model types (prefixes) with a per-head RMSNorm on q and k (Qwen3 family, Gemma-3/4, OLMo-2 style, EXAONE-MoE,
# AFMoE, HunYuan-V3, Laguna).
QK_NORM_TYPES = ("qwen3", "gemma3", "gemma4", "olmo2", "exaone_moe", "afmoe", "hy_v3", "laguna")
# Model types (prefixes) with norms before and after both the attention and the MLP: four per layer.
SANDWICH_NORM_TYPES = ("gemma2", "gemma3", "gemma4", "afmoe")
# Architectures vLLM builds as the language model alone although their config carries a vision_config (the
# causal-LM classes of a composite family: no vision tower is loaded).
TEXT_ONLY_ARCHITECTURES = frozenset({"Llama4ForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                                     "Gemma3ForCausalLM", "Gemma4ForCausalLM"})
# Model types (prefixes) whose router learns a bias per expert (gpt-oss's router bias; the score-correction bias
# ERNIE-4.5, AFMoE and Laguna keep as a parameter).
EXPERT_BIAS_TYPES = ("gpt_oss", "ernie4_5_moe", "afmoe", "laguna")
# Keys of a router's shared experts, as a count of experts of moe_intermediate_size each.
SHARED_EXPERT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")


@dataclass(frozen=True)
class ParamCount:
    total: int  # every parameter of the checkpoint (vision tower included)
    active: int  # what one token of text runs through (experts per token, not all experts)
    experts: int  # of total: the routed experts' weights
    embedding: int  # of total: input embeddings and the LM head (kept 16-bit by FP8 recipes)
    vision: int  # of total: the vision tower and its projector


def _attention(t: TextConfig, i: int, kind: str) -> int:
    """Layer i's token mixer: a state-per-sequence mixer, DeepSeek-V4's or latent attention, or heads."""
    if kind == "mlp":  # NemotronH's MLP or MoE layer: no mixer
        return 0
    if kind in ("linear", "mamba"):
        return mixer(t)
    if is_deepseek_v4(t):  # no kv_lora_rank: its own attention
        return deepseek_v4_attention(t, i)
    if t.raw.get("kv_lora_rank") is not None:  # latent attention, cached as MLA or not (MiniCPM3)
        return mla(t, i)
    return _heads_attention(t, i, kind)


def _layer_heads(t: TextConfig, i: int, kind: str) -> tuple[int, int, int, int]:
    """(query heads, KV heads, q/k head size, v head size) of layer i, where a family varies them by layer:
    transformers 5's per_layer_config, Gemma-4's full layers (global_head_dim, and with attention_k_eq_v
    num_global_key_value_heads), Laguna's num_attention_heads_per_layer, MiMo-V2's sliding layers (vLLM's swa_*
    keys; transformers doubles their KV heads)."""
    r, heads, kv = t.raw, t.heads, t.total_kv_heads
    d = int(r.get("head_dim") or 0) or t.hidden // t.heads
    v = int(r.get("v_head_dim") or 0) or d
    per = r.get("per_layer_config")
    if isinstance(per, dict):
        o = next((o for k, o in per.items() if str(k).isdigit() and int(k) == i and isinstance(o, dict)), {})
        d, v = (int(o["head_dim"]),) * 2 if o.get("head_dim") else (d, v)
        kv = int(o.get("num_key_value_heads") or kv)
    elif t.model_type.startswith("gemma4") and kind == "full":
        d = v = int(r.get("global_head_dim") or 512)
        if r.get("attention_k_eq_v") and r.get("num_global_key_value_heads") is not None:
            kv = int(r["num_global_key_value_heads"])
    listed = r.get("num_attention_heads_per_layer")
    if isinstance(listed, list) and i < len(listed):
        heads = int(listed[i])
    if t.model_type.startswith("mimo_v2") and kind == "sliding":
        heads = int_of(r, ("swa_num_attention_heads",), heads)
        kv = int_of(r, ("swa_num_key_value_heads",), 2 * kv)
        d, v = int_of(r, ("swa_head_dim",), d), int_of(r, ("swa_v_head_dim",), v)
    return heads, kv, d, v


def _kv_shared(t: TextConfig, i: int) -> bool:
    """Gemma-4's last num_kv_shared_layers layers read an earlier layer's K and V: no k or v projection."""
    return t.model_type.startswith("gemma4") and i >= t.layers - t.kv_shared_layers


def _heads_attention(t: TextConfig, i: int, kind: str) -> int:
    """Softmax attention over heads: q, k, v and out projections with their biases, per-head q/k norms, sinks and
    the output gates some families add."""
    r, h, model = t.raw, t.hidden, t.model_type
    heads, kv, d, v = _layer_heads(t, i, kind)
    q_out, k_out, v_out = heads * d, kv * d, kv * v
    if model.startswith("gemma4") and kind == "full" and r.get("attention_k_eq_v"):
        v_out = 0  # K doubles as V: no v_proj (vLLM loads K into both slots)
    if _kv_shared(t, i):
        k_out = v_out = 0
    if model.startswith(("qwen3_next", "qwen3_5")) and r.get("attn_output_gate", True):
        q_out *= 2  # Qwen3NextAttention: q_proj also yields a sigmoid gate per head element
    n = h * (q_out + k_out + v_out) + heads * v * h
    if r.get("attention_bias"):
        n += q_out + k_out + v_out + h
    elif model in QKV_BIAS_TYPES:
        n += q_out + k_out + v_out
    if model.startswith(QK_NORM_TYPES):
        n += d + (d if k_out else 0)
    elif model.startswith("minimax_m2"):  # MiniMaxM2Attention: q and k normed across all their heads
        n += q_out + k_out
    if model == "gpt_oss" or (model.startswith("mimo_v2") and kind == "sliding"
                              and r.get("add_swa_attention_sink_bias", True)):
        n += heads  # attention sinks
    if model.startswith("afmoe"):
        n += h * heads * d  # AfmoeAttention's gate_proj: a sigmoid gate on the attention output
    gating = r.get("gating", True)
    if model.startswith("laguna") and gating:  # LagunaAttention's g_proj: per head (True) or per element
        n += h * heads * (1 if gating is True or gating == "per-head" else d)
    return n


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


def _first(value) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _is_moe_layer(t: TextConfig, i: int) -> bool:
    r = t.raw
    if not t.experts:
        return False
    kinds = r.get("mlp_layer_types")  # transformers 5: "dense" or "sparse" (DeepSeek-V4: "moe", "hash_moe")
    if isinstance(kinds, list) and i < len(kinds):
        return kinds[i] != "dense"
    if i < int(r.get("first_k_dense_replace") or r.get("num_dense_layers") or 0):
        return False
    if i in (r.get("mlp_only_layers") or []):
        return False
    start = _first(r.get("moe_layer_start_index"))
    if start is not None:  # ERNIE-4.5: every interval-th layer from the start to the end index
        end = _first(r.get("moe_layer_end_index"))
        interval = _first(r.get("moe_layer_interval")) or 1
        return start <= i <= (t.layers - 1 if end is None else end) and (i + 1) % interval == 0
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


def _dense_size(t: TextConfig, i: int, moe: bool = False) -> int:
    """Layer i's dense MLP width (`moe`: the size the config's experts fall back to)."""
    r = t.raw
    keys = ("intermediate_size", "ffn_dim", "ffn_hidden_size")
    if not moe and t.model_type.startswith("llama4"):  # Llama4TextDecoderLayer: dense layers are wider
        keys = ("intermediate_size_mlp", *keys)
    dense = next((v for k in keys if (v := _size(r.get(k), i))), 4 * t.hidden)
    if _kv_shared(t, i) and r.get("use_double_wide_mlp"):  # Gemma4TextMLP: KV-shared layers twice as wide
        dense *= 2
    return dense


def _shared_experts(t: TextConfig, one: int, mats: int) -> int:
    r, h = t.raw, t.hidden
    count = next((int(r[k]) for k in SHARED_EXPERT_KEYS if r.get(k)), 0)
    if count:
        return count * one
    if r.get("shared_expert_intermediate_size"):  # Qwen2-MoE lineage: one shared MLP and its sigmoid gate
        gate = 0 if t.model_type.startswith("laguna") else h
        return mats * h * int(r["shared_expert_intermediate_size"]) + gate
    if r.get("shared_intermediate_size"):  # Granite MoE shared / hybrid: one shared MLP beside the experts
        return mats * h * int(r["shared_intermediate_size"])
    if t.model_type.startswith("llama4"):  # Llama4TextMoe's shared expert: an MLP of intermediate_size
        return mats * h * _dense_size(t, 0, moe=True)
    return 0


def _mlp(t: TextConfig, i: int, moe: bool | None = None) -> tuple[int, int, int]:
    """(total, active, routed experts) of layer i's MLP (`moe`: whether it has experts, when the config's block
    list says so)."""
    r, h = t.raw, t.hidden
    dense = _dense_size(t, i)
    mats = 2 if t.model_type in UNGATED_MLP_TYPES else 3  # up, down (and a gate)
    if not (_is_moe_layer(t, i) if moe is None else moe):
        n = mats * h * dense
        return n, n, 0
    inter = next((v for k in ("moe_intermediate_size", "intermediate_size_moe", "expert_ffn_hidden_size")
                  if (v := _size(r.get(k), i))), _dense_size(t, i, moe=True))
    one = mats * h * inter
    if t.model_type == "gpt_oss":
        one += 2 * inter + h  # gate_up and down biases per expert
    router = h * t.experts + (t.experts if t.model_type.startswith(EXPERT_BIAS_TYPES) else 0)
    shared = _shared_experts(t, one, mats)
    if t.model_type.startswith("gemma4"):  # Gemma4TextDecoderLayer: a dense MLP beside the experts with three
        shared = mats * h * dense + 3 * h  # norms of its own; Gemma4TextRouter scales per channel and per expert
        router += h + t.experts
    experts = t.experts * one
    return experts + router + shared, t.experts_per_token * one + router + shared, experts


def _vision(t: TextConfig) -> int:
    if t.architecture in TEXT_ONLY_ARCHITECTURES:
        return 0
    tower = vision_tower(t.vision)
    return tower.params if tower else 0


def tied_embeddings(t: TextConfig) -> bool:
    """Whether the LM head shares the embedding table, as vLLM builds it (hfconfig.TextConfig.tied)."""
    return t.tied


def _per_layer_inputs(t: TextConfig) -> int:
    """Per-layer input embeddings (Gemma-3n, Gemma-4's E models: hidden_size_per_layer_input > 0): a table of
    vocab_size_per_layer_input x (layers x that width), its projection from the hidden state and norm, and per
    layer an input gate, a projection back and a norm."""
    r, h = t.raw, t.hidden
    width = int_of(r, ("hidden_size_per_layer_input",), 0) or 0
    if width <= 0:
        return 0
    vocab = int_of(r, ("vocab_size_per_layer_input",), t.vocab) or t.vocab
    n = t.layers
    return vocab * n * width + h * n * width + width + n * (2 * h * width + h)


def count_params(t: TextConfig) -> ParamCount:
    h = t.hidden
    embedding = t.vocab * h * (1 if tied_embeddings(t) else 2)
    hc_layer, hc_head = hyper_connections(t)  # DeepSeek-V4, HY-V4: residual streams mixed around each block
    total = active = embedding + h + hc_head  # + the final norm
    experts = 0
    norms = 4 if t.model_type.startswith(SANDWICH_NORM_TYPES) else 2
    blocks = _blocks(t)
    parallel = mamba(t) if t.model_type == "falcon_h1" else None  # Falcon-H1: attention and Mamba in each layer
    for i, kind in enumerate(t.layer_kinds):
        attention = _attention(t, i, kind) + norms * h + (parallel or 0) + hc_layer  # with the norms around it
        if blocks is not None and i < len(blocks):
            attention = norms * h // 2 + (_attention(t, i, kind) if blocks[i] not in ("mlp", "moe") else 0)
            if blocks[i] not in ("mlp", "moe"):  # a mixer layer: no MLP
                total, active = total + attention, active + attention
                continue
        mlp_total, mlp_active, mlp_experts = _mlp(t, i, None if blocks is None else blocks[i] == "moe")
        total += attention + mlp_total
        active += attention + mlp_active
        experts += mlp_experts
    per_layer = _per_layer_inputs(t)  # Gemma-3n / Gemma-4 E models: an embedding per layer
    total, active, embedding = total + per_layer, active + per_layer, embedding + per_layer
    vision = _vision(t)
    return ParamCount(total=total + vision, active=active, experts=experts, embedding=embedding, vision=vision)


def mtp_params(t: TextConfig, layers: int) -> int:
    """Parameters of `layers` multi-token-prediction draft layers as vLLM builds them beside the model (DeepSeekMTP,
    Qwen3-Next / Qwen3.5 MTP, GLM MTP): each a full-attention decoder layer with the MLP of the model's last
    full-attention layer (experts included), the norms around it and two more on its inputs (enorm, hnorm), the
    projection of the embedding and the hidden state back to the width (2h x h) and the head's norm. The embedding
    and the LM head are the model's own (the proposer shares them)."""
    if layers <= 0:
        return 0
    h = t.hidden
    full = [i for i, kind in enumerate(t.layer_kinds) if kind == "full"]
    i = full[-1] if full else t.layers - 1
    norms = 4 if t.model_type.startswith(SANDWICH_NORM_TYPES) else 2
    one = _attention(t, i, "full") + norms * h + _mlp(t, i)[0] + 2 * h * h + 3 * h
    return layers * one
