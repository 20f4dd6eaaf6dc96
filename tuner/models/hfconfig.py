"""A model's config.json read as vLLM reads it (vllm/config/model.py, model_arch_config_convertor.py).

Only the text part matters for the KV cache: a vision-language config keeps it under `text_config`
(`llm_config` for InternVL, `language_config` for DeepSeek-VL, `thinker_config.text_config` for the
Omni models), as transformers' `get_text_config()` finds it. Every rule below names the vLLM rule
it follows, so a difference from vLLM is a bug here.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .mistralparams import PARAMS, ParamsError, hf_config, is_mistral_params


class ModelConfigError(ValueError):
    """A config.json that cannot describe a served model (named with the missing key)."""


# vLLM's is_deepseek_mla: these model types cache one latent vector per token when kv_lora_rank is set.
MLA_MODEL_TYPES = frozenset({
    "axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots3_note",
    "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa", "glm4_moe_lite",
    "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp",
    "bailing_hybrid", "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "hy_v4", "hy_v4_mtp",
})
# `layer_types` spellings that keep a full KV cache per token (vLLM's _ATTENTION_LAYER_TYPES, plus the
# sliding and chunked spellings: a window bounds how many tokens are kept, not the bytes per token).
ATTENTION_LAYER_TYPES = frozenset({"full_attention", "indexed_attention", "deepseek_sparse_attention",
                                   "qwen_sparse_attention", "sliding_attention", "chunked_attention",
                                   "attention"})
# Architectures whose model class is hybrid in vLLM (IsHybrid): only their attention layers hold a KV
# cache per token; the others (linear attention, Mamba) hold a fixed state per sequence.
HYBRID_ARCHITECTURES = frozenset({
    "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "JambaForCausalLM", "FalconH1ForCausalLM",
    "NemotronHForCausalLM", "GraniteMoeHybridForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM",
    "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "Zamba2ForCausalLM", "BambaForCausalLM", "Plamo2ForCausalLM",
    "KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
})
# Ling's linear-attention families (vLLM's bailing_moe_linear.is_linear_layer, bailing_moe_v3._is_kda_layer)
BAILING_LINEAR = {"BailingMoeV2_5ForCausalLM": False, "BailingMoeV3ForCausalLM": True}  # arch -> KDA (V3)
# Attention-free architectures: a fixed state per sequence and no KV cache per token, which is what the
# performance model and the bucket arithmetic size memory by.
ATTENTION_FREE = frozenset({"MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM", "RwkvForCausalLM",
                            "XLSTMForCausalLM"})
# vLLM's derive_max_model_len_and_key: the smallest of these is the model's own context length.
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length (not multiplied by the factor).
PRESCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})


def _first(cfg: dict, names: tuple[str, ...], default: Any = None) -> Any:
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    return default


TEXT_KEYS = ("text_config", "llm_config", "language_config")
# transformers' constant defaults per config class (tools/transformers_defaults.py writes it)
DEFAULTS_FILE = Path(__file__).resolve().parent / "catalogue" / "transformers_defaults.json"


@functools.cache
def _class_defaults() -> dict:
    return json.loads(DEFAULTS_FILE.read_text())


def sub_config_type(parent_type: str, key: str) -> str:
    """The model type transformers gives a composite's sub-config (`text_config`, `vision_config`, ...)
    when the file does not name one: LLaVA's text model is a Llama, Gemma-3's a gemma3_text."""
    return _class_defaults()["sub_config_types"].get(parent_type, {}).get(key, "")


def with_class_defaults(part: dict, model_type: str, parent: str = "", key: str = "") -> dict:
    """A (sub-)config as transformers' AutoConfig holds it: the file's values over its class's defaults.

    transformers 4.x saves a nested config as its difference from those defaults (llava-1.5-7b-hf's
    text_config gives only max_position_embeddings and vocab_size; gemma-3-27b-it's leaves out vocab_size,
    max_position_embeddings and the sliding-window pattern); vLLM reads the config with them put back.
    Defaults derived from other fields (Llama's KV heads, head_dim) are not in the table: read as derived.
    A composite's own defaults for its sub-config (`parent`, `key`: Voxtral's 30-layer Llama) come over the
    class's.
    """
    table = {**_class_defaults()["types"].get(model_type, {}),
             **_class_defaults()["sub_config_defaults"].get(parent, {}).get(key, {})}
    if not table:
        return part
    if part.get("rope_scaling") is not None:  # transformers 5 moves the file's rope_scaling to rope_parameters
        table = {k: v for k, v in table.items() if k != "rope_parameters"}
    return {**table, **part}


def _text_source(config: dict) -> tuple[dict, str, str, str]:
    """(the language model's part as written, its model type, the composite's model type and the key it is
    under; both "" when the config is the language model itself)."""
    parent = str(config.get("model_type") or "")
    for key in TEXT_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            return sub, str(sub.get("model_type") or sub_config_type(parent, key)), parent, key
    thinker = config.get("thinker_config")
    if isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        text, owner = thinker["text_config"], str(thinker.get("model_type") or "")
        return text, str(text.get("model_type") or sub_config_type(owner, "text_config")), owner, "text_config"
    # flat: a composite written with its text fields at the top (Qwen2-VL) takes its text class's defaults
    return config, sub_config_type(parent, "text_config") or parent, "", ""


def text_part(config: dict) -> dict:
    """The sub-config of the language model (transformers' get_text_config), or the config itself, with
    its class's defaults under what the file says (with_class_defaults)."""
    part, kind, parent, key = _text_source(config)
    return with_class_defaults(part, kind, parent, key)


@dataclass(frozen=True)
class TextConfig:
    """The language model of a config.json, in vLLM's terms."""

    architecture: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    total_kv_heads: int
    head_size: int  # per KV head as cached (MLA: kv_lora_rank + qk_rope_head_dim)
    vocab: int
    max_position: int  # vLLM's derived max_model_len (its default)
    mla: bool
    attention_layers: int  # layers with a KV cache per token
    layer_kinds: tuple[str, ...]  # per layer: full, sliding, chunked, linear, mamba
    sliding_window: int | None
    experts: int
    experts_per_token: int
    kv_shared_layers: int  # layers reading another layer's cache (Gemma-3n): no cache of their own
    raw: dict = field(repr=False, hash=False, compare=False)
    multimodal: bool = False
    vision: dict | None = field(default=None, repr=False, hash=False, compare=False)
    quantization: dict | None = field(default=None, repr=False, hash=False, compare=False)
    torch_dtype: str | None = None
    config_model_type: str = ""  # the top-level model_type (a VL wrapper's: vllm-gaudi keys its image table by it)
    mrope: bool = False  # vLLM's uses_mrope (see mrope_of)
    fork_mrope: bool = False  # vllm-fork's uses_mrope: the top-level config only (see mrope_of)
    # (KV heads, head size) of each layer that keeps a cache, when the layers differ (layer_kv); else ()
    layer_kv: tuple[tuple[int, int], ...] = ()
    # a pooling model's vector as vLLM's ModelConfig gives it: embedding_size (the config's, else its hidden
    # size; a sentence-transformers Dense head is not read) and is_matryoshka / matryoshka_dimensions
    embedding_size: int = 0
    matryoshka: bool = False
    matryoshka_dimensions: tuple[int, ...] = ()
    # a classifier's labels in index order (id2label; else num_labels LABEL_i; else transformers' 2 defaults)
    labels: tuple[str, ...] = ("LABEL_0", "LABEL_1")
    tied: bool = False  # the LM head shares the embedding table (tied_of)
    max_len_limit: int = 0  # the longest --max-model-len vLLM accepts (0: max_position), and the key it names
    max_len_key: str = "max_position_embeddings"

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        # vLLM's get_num_kv_heads: MLA decodes as MQA (one latent); otherwise heads split across ranks and
        # replicated when the ranks outnumber them.
        if self.mla:
            return 1
        return max(1, self.total_kv_heads // max(1, tp))


# NemotronH's hybrid_override_pattern, a character per layer: attention, Mamba, MLP only, MoE only
PATTERN_KINDS = {"*": "full", "M": "mamba", "-": "mlp", "E": "mlp"}
# transformers' layers_block_type spellings (Jamba, Zamba2, NemotronH; transformers 5 renames some)
BLOCK_KINDS = {"attention": "full", "hybrid": "full", "full_attention": "full", "mamba": "mamba",
               "linear_attention": "mamba", "mlp": "mlp", "moe": "mlp"}


def hybrid_pattern(t: dict) -> list[str] | None:
    """A hybrid's layers as its config lists them (layers_block_type, or NemotronH's pattern string)."""
    blocks = t.get("layers_block_type")
    if isinstance(blocks, list) and blocks:
        return [BLOCK_KINDS.get(str(b), "mamba") for b in blocks]
    pattern = t.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return [PATTERN_KINDS.get(c, "mamba") for c in pattern]
    return None


def _hybrid_kinds(t: dict, layers: int, architecture: str = "") -> tuple[str, ...] | None:
    """The layers of a hybrid architecture from the fields that say which hold attention; None if none do."""
    listed = hybrid_pattern(t)
    if listed is not None:
        return tuple(listed[:layers])
    if t.get("model_type") == "falcon_h1":  # attention and Mamba2 side by side in every layer (recurrent.py)
        return tuple("full" for _ in range(layers))
    group = t.get("layer_group_size")
    if group and architecture in BAILING_LINEAR:  # every group-th layer attends, the others are linear
        g, last = int(group), layers // int(group) * int(group)
        kda = BAILING_LINEAR[architecture]  # V3: the layers after the last whole group attend too
        return tuple("full" if (i + 1) % g == 0 or (kda and i >= last) else "linear" for i in range(layers))
    if "attn_layer_indices" in t:  # Bamba: the attention layers listed (none: every layer is Mamba)
        listed_attn = set(t.get("attn_layer_indices") or ())
        return tuple("full" if i in listed_attn else "mamba" for i in range(layers))
    period = t.get("attn_layer_period")  # Jamba: attention every period-th layer, from offset
    if period:
        offset = int(t.get("attn_layer_offset") or 0)
        return tuple("full" if i % int(period) == offset else "mamba" for i in range(layers))
    kimi = t.get("linear_attn_config")  # Kimi-Linear (vLLM's is_kda_layer): KDA layers listed from 1
    if isinstance(kimi, dict) and isinstance(kimi.get("kda_layers"), list):
        return tuple("linear" if i + 1 in kimi["kda_layers"] else "full" for i in range(layers))
    attn_types = t.get("attn_type_list")  # MiniMax: 1 is softmax attention
    if isinstance(attn_types, list):
        return tuple("full" if a == 1 else "linear" for a in attn_types[:layers])
    interval = t.get("full_attention_interval")  # Qwen3-Next without layer_types: every n-th is full
    if interval:
        return tuple("full" if (i + 1) % int(interval) == 0 else "linear" for i in range(layers))
    return None


def _listed_kinds(types: list, hybrid: bool) -> tuple[str, ...]:
    kinds = []
    for name in types:
        if name in ("sliding_attention",):
            kinds.append("sliding")
        elif name == "chunked_attention":
            kinds.append("chunked")
        elif name == "linear_attention":
            kinds.append("linear")
        elif name in ("mamba", "mamba2", "conv"):
            kinds.append("mamba")
        elif name in ATTENTION_LAYER_TYPES or not hybrid:
            kinds.append("full")
        else:
            kinds.append("linear")
    return tuple(kinds)


def _layer_kinds(t: dict, architecture: str, layers: int) -> tuple[str, ...]:
    """Per layer: full, sliding or chunked attention (a KV cache per token), linear attention or Mamba (a
    state per sequence), or mlp (neither: NemotronH's MLP and MoE layers)."""
    hybrid = architecture in HYBRID_ARCHITECTURES
    types = t.get("layer_types")
    if isinstance(types, list) and len(types) >= layers:
        return _listed_kinds(types[:layers], hybrid)
    if hybrid and (kinds := _hybrid_kinds(t, layers, architecture)) is not None:
        return kinds
    window = t.get("sliding_window")
    model_type = t.get("model_type", "")
    if window and model_type == "gemma2":  # Gemma2Config: even layers slide
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(layers))
    pattern = t.get("sliding_window_pattern") or t.get("_sliding_window_pattern")  # the latter: transformers 5
    if window and model_type.startswith("gemma3") and pattern:  # every pattern-th layer is global
        return tuple("full" if (i + 1) % int(pattern) == 0 else "sliding" for i in range(layers))
    if window and t.get("use_sliding_window", True) and model_type not in ("qwen2", "qwen2_moe", "qwen3",
                                                                            "qwen3_moe", "qwen2_vl"):
        return tuple("sliding" for _ in range(layers))  # Mistral-7B v0.1 style: every layer slides
    chunk = t.get("attention_chunk_size")
    no_rope = t.get("no_rope_layers")
    if chunk and isinstance(no_rope, list) and len(no_rope) >= layers:  # Llama 4: RoPE layers are chunked
        return tuple("chunked" if no_rope[i] else "full" for i in range(layers))
    return tuple("full" for _ in range(layers))


def layer_kv(t: dict, model_type: str, kinds: tuple[str, ...], kv: int, head_size: int,
             shared: int) -> tuple[tuple[int, int], ...]:
    """(KV heads, head size) per layer with a cache of its own, for configs whose layers differ (transformers
    5's heterogeneous configs, as vLLM 0.32 builds each layer's attention from them); () when all alike.

    * `per_layer_config`: {layer index: overrides of head_dim, num_key_value_heads}, as written;
    * Gemma-4 (Gemma4TextConfig): every full-attention layer has head_dim `global_head_dim` (default 512)
      and, with `attention_k_eq_v`, `num_global_key_value_heads` KV heads (K stored in the V slot too).
    The last `num_kv_shared_layers` layers read an earlier layer's cache (Gemma-3n, Gemma-4 E models).
    """
    overrides: dict[int, dict] = {}
    per = t.get("per_layer_config")
    if isinstance(per, dict):
        overrides = {int(i): o for i, o in per.items() if isinstance(o, dict)}
    elif model_type.startswith("gemma4"):
        full = {"head_dim": int(t.get("global_head_dim") or 512)}
        if t.get("attention_k_eq_v") and t.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = int(t["num_global_key_value_heads"])
        overrides = {i: full for i, k in enumerate(kinds) if k == "full"}
    if not overrides:
        return ()
    own = len(kinds) - shared
    out = tuple((int(overrides.get(i, {}).get("num_key_value_heads", kv)),
                 int(overrides.get(i, {}).get("head_dim", head_size)))
                for i, k in enumerate(kinds[:own]) if k in ("full", "sliding", "chunked"))
    return out if len(set(out)) > 1 else ()


def _max_position(t: dict, config: dict, encoder: dict | None = None) -> tuple[int, int, str]:
    """vLLM's default max_model_len (config/model.py _get_and_verify_max_len): the smallest length key, times
    the RoPE factor of a type that does not already count it (not for Gemma-3); a sentence-transformers
    model's max_seq_length over all that; for LongRoPE (Phi-3.5, Phi-4-mini) the original length, which
    vLLM serves by default to keep short prompts fast. -> (that default, the longest --max-model-len vLLM
    accepts without VLLM_ALLOW_LONG_MAX_MODEL_LEN, the key it names when it refuses one)."""
    derived, key = math.inf, "max_position_embeddings"
    for name in MAX_LEN_KEYS:
        value = t.get(name)
        if value is not None and value < derived:
            derived, key = value, name
    if t.get("model_max_length"):
        derived, key = t["model_max_length"], "model_max_length"
    if derived == math.inf:
        derived = 2048  # vLLM's default when the config names no length
    ropes = _rope_dicts(t)
    if ropes and "gemma3" not in str(config.get("model_type", "")):
        factor = 1.0
        for rope in ropes:  # per layer type when nested; vLLM takes the last factor it finds
            if str(rope.get("rope_type", rope.get("type", "default"))) not in PRESCALED_ROPE:
                factor = rope.get("factor", factor)
        derived *= factor if factor is not None else 1.0
    if isinstance(encoder, dict) and encoder.get("max_seq_length"):
        derived = encoder["max_seq_length"]
    if any(rope.get("rope_type", rope.get("type")) == "longrope" for rope in ropes):
        original = t.get("original_max_position_embeddings") or next(
            (r["original_max_position_embeddings"] for r in ropes if r.get("original_max_position_embeddings")), None)
        return int(original or derived), int(derived), key
    return int(derived), int(derived), key


def read_config(config: dict, where: str = "config.json", encoder: dict | None = None) -> TextConfig:
    """The TextConfig of a parsed config.json (`where` names it in errors; `encoder`: the folder's
    sentence-transformers config, whose max_seq_length vLLM serves)."""
    try:
        return _read(config, where, encoder)
    except ModelConfigError:
        raise
    except (TypeError, ValueError, KeyError) as e:  # a field of an unexpected type: name it, not a traceback
        raise ModelConfigError(f"{where}: a field has an unexpected type or value ({e})") from None


def _read(config: dict, where: str, encoder: dict | None = None) -> TextConfig:
    if not isinstance(config, dict):
        raise ModelConfigError(f"{where}: not a JSON object")
    part, kind, parent, key = _text_source(config)
    t, nested = with_class_defaults(part, kind, parent, key), bool(key)  # text_part's, the source read once
    architectures = config.get("architectures") or t.get("architectures") or ["unknown"]
    architecture = architectures[0]
    if architecture in ATTENTION_FREE:
        raise ModelConfigError(f"{where}: {architecture} is attention-free (a fixed state per sequence, no KV cache "
                               "per token); bucket-tuner predicts servers by their KV cache and cannot model it")
    model_type = str(t.get("model_type") or config.get("model_type") or "")
    layers = _first(t, ("num_hidden_layers", "n_layer", "num_layers", "n_layers"))
    if layers is None and architecture in HYBRID_ARCHITECTURES and (listed := hybrid_pattern(t)):
        layers = len(listed)  # NemotronH written by transformers 5: the block list is the layer count
    hidden = _first(t, ("hidden_size", "n_embd", "d_model", "dim"))
    heads = _first(t, ("num_attention_heads", "n_head", "n_heads", "num_heads"))
    for name, value in (("num_hidden_layers", layers), ("hidden_size", hidden), ("num_attention_heads", heads)):
        if not isinstance(value, int) or value <= 0:
            raise ModelConfigError(f"{where}: no usable {name} (got {value!r}); "
                                   "is this a language model's config.json?")
    kv = _first(t, ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
                    "num_attention_groups"), heads)
    if model_type == "falcon" and not t.get("new_decoder_architecture") and t.get("multi_query"):
        kv = 1  # vLLM's Falcon rule: a multi-query Falcon caches one head
    # vLLM's is_deepseek_mla / get_head_size: a config with compress_ratios (DeepSeek-V4, no kv_lora_rank) is MLA
    # when it has a head_dim, one latent of head_dim; the others cache kv_lora_rank + qk_rope_head_dim
    v4 = "compress_ratios" in t
    mla = model_type in MLA_MODEL_TYPES and t.get("head_dim" if v4 else "kv_lora_rank") is not None
    if mla and v4:
        head_size = int(t["head_dim"])
    elif mla:
        head_size = int(t["kv_lora_rank"]) + int(t.get("qk_rope_head_dim") or 0)
    elif t.get("head_dim"):
        head_size = int(t["head_dim"])
    elif t.get("attention_head_dim"):  # Zamba2 (its config maps head_dim to it): 2 x hidden / heads
        head_size = int(t["attention_head_dim"])
    elif t.get("hidden_size_per_head"):
        head_size = int(t["hidden_size_per_head"])
    else:
        head_size = hidden // heads
    kinds = _layer_kinds(t, architecture, layers)
    shared = int(t.get("num_kv_shared_layers") or 0)
    attention = sum(k in ("full", "sliding", "chunked") for k in kinds) - shared
    experts = _first(t, ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"), 0)
    if isinstance(experts, list):
        experts = experts[0]
    per_token = _first(t, ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "top_k_experts",
                           "moe_topk", "moe_top_k"), 0)
    if isinstance(per_token, list):
        per_token = max(per_token, default=0)
    vision = _vision_part(config)
    max_len = _max_position(t, config, encoder)
    quant = config.get("quantization_config") or t.get("quantization_config")
    dtype = config.get("torch_dtype") or config.get("dtype") or t.get("torch_dtype") or t.get("dtype")
    return TextConfig(
        architecture=architecture, model_type=model_type, layers=layers, hidden=hidden, heads=heads,
        total_kv_heads=int(kv), head_size=head_size, vocab=int(_first(t, ("vocab_size", "padded_vocab_size"), 32000)),
        max_position=max_len[0], max_len_limit=max_len[1], max_len_key=max_len[2], mla=mla,
        attention_layers=max(0, attention), layer_kinds=kinds,
        sliding_window=t.get("sliding_window") if any(k == "sliding" for k in kinds) else None,
        experts=int(experts or 0), experts_per_token=int(per_token or 0), kv_shared_layers=shared, raw=t,
        multimodal=vision is not None or nested, vision=vision,
        quantization=quant if isinstance(quant, dict) else None, torch_dtype=str(dtype) if dtype else None,
        config_model_type=str(config.get("model_type") or model_type),
        mrope=mrope_of(config), fork_mrope=mrope_of(config, fork=True),
        layer_kv=() if mla else layer_kv(t, model_type, kinds, int(kv), head_size, shared),
        embedding_size=int(config.get("embedding_size") or hidden),
        matryoshka=bool(config.get("matryoshka_dimensions")) or bool(config.get("is_matryoshka")),
        matryoshka_dimensions=tuple(int(d) for d in config.get("matryoshka_dimensions") or ()),
        labels=_labels(config), tied=tied_of(config, t, bool(nested or parent_has_text(config))),
    )


def parent_has_text(config: dict) -> bool:
    """A composite (vision-language) config, nested or written flat (Qwen2-VL)."""
    return bool(sub_config_type(str(config.get("model_type") or ""), "text_config"))


def tied_of(config: dict, text: dict, composite: bool) -> bool:
    """Whether the LM head is the embedding table. A multimodal model ties as its top-level config says (vLLM
    0.32 copies it over the text config's: transformers 5 keeps it where the head is), else as its class's
    default; a text model as its config, its class default, and transformers' own default (tied) else."""
    source, kind = (config, str(config.get("model_type") or "")) if composite else (text, "")
    value = source.get("tie_word_embeddings")
    if value is None and kind:
        value = _class_defaults()["types"].get(kind, {}).get("tie_word_embeddings")
    if value is None:  # no class default known: PretrainedConfig ties; Gemma's classes say so too
        return True if kind or str(text.get("model_type", "")).startswith("gemma") else False
    return bool(value)


def _vision_part(config: dict) -> dict | None:
    """The vision_config with its class's defaults under it, and what the top level says of its images (Gemma-3's
    mm_tokens_per_image, Mistral-3's spatial_merge_size, the tiling families' keys); None for a text model."""
    vision = config.get("vision_config")
    if not isinstance(vision, dict):
        return None
    parent = str(config.get("model_type") or "")
    vision = with_class_defaults(vision, str(vision.get("model_type") or sub_config_type(parent, "vision_config")),
                                 parent, "vision_config")
    if isinstance(config.get("mm_tokens_per_image"), int):  # Gemma-3: every image pooled to this many tokens
        vision = {**vision, "mm_tokens_per_image": config["mm_tokens_per_image"]}
    if isinstance(config.get("spatial_merge_size"), int) and "spatial_merge_size" not in vision:
        vision = {**vision, "spatial_merge_size": config["spatial_merge_size"]}  # Mistral-3 writes it at the top
    # the tiling processors' top-level keys (vision.vision_tower reads them), over their config classes' defaults:
    # InternVL (OpenGVLab's internvl_chat, transformers' internvl), Idefics3 / SmolVLM, LLaVA-NeXT; Llama-4's
    # pixel_shuffle_ratio is in its vision_config
    internvl = {"downsample_ratio": 0.5, "dynamic_image_size": None, "min_dynamic_patch": None,
                "max_dynamic_patch": None, "use_thumbnail": None}
    idefics3 = {"scale_factor": 2}
    keys = {"internvl_chat": internvl, "internvl": internvl, "idefics3": idefics3, "smolvlm": idefics3,
            "llava_next": {"image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
                           "vision_feature_select_strategy": "default"}}.get(parent, {})
    present = {k: config[k] if config.get(k) is not None else d for k, d in keys.items()}
    present = {k: v for k, v in present.items() if v is not None}
    return {**vision, **present} if present else vision


# vLLM's sequence-classification adapter (model_executor/models/adapters.py SequenceClassificationConfig): a
# generating model served as a classifier from its LM head's logits of `classifier_from_token`
_TWO_WAY = "from_2_way_softmax"
_ORIGINAL_QWEN3_RERANKER = ("Qwen3ForSequenceClassification", "Qwen3VLForSequenceClassification")


def _labels(config: dict) -> tuple[str, ...]:
    """A classification head's labels as transformers reads them: id2label (its keys are indices), else
    num_labels of LABEL_i, else its default of two. A classifier made from an LM head's token logits (the
    original Qwen3-Reranker: `is_original_qwen3_reranker` and two `classifier_from_token`) has, as vLLM sets
    it, one label for the two-way softmax and one per token otherwise."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    tokens = config.get("classifier_from_token") or text.get("classifier_from_token")
    method = config.get("method") or text.get("method")
    architecture = (config.get("architectures") or [""])[0]
    if config.get("is_original_qwen3_reranker") and architecture in _ORIGINAL_QWEN3_RERANKER:
        method = _TWO_WAY
    if method and isinstance(tokens, list) and tokens:
        return ("LABEL_0",) if method == _TWO_WAY else tuple(f"LABEL_{i}" for i in range(len(tokens)))
    id2label = config.get("id2label")
    if isinstance(id2label, dict) and id2label:
        try:
            return tuple(str(v) for _, v in sorted((int(k), v) for k, v in id2label.items()))
        except (TypeError, ValueError):
            pass
    n = config.get("num_labels")
    return tuple(f"LABEL_{i}" for i in range(n)) if isinstance(n, int) and n > 0 else ("LABEL_0", "LABEL_1")


def _rope_dicts(cfg: dict) -> list[dict]:
    """A config's RoPE parameters as written (`rope_parameters`, or the older `rope_scaling` that
    transformers 5 moves there), one dict per layer type when they are nested by layer type."""
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return []
    nested = [v for v in rope.values() if isinstance(v, dict)]
    return nested if nested and len(nested) == len(rope) else [rope]


def _mrope_section(cfg: dict) -> bool:
    names = ("mrope_section", "xdrope_section")  # xdrope_section: HunYuan-VL's older name
    if any(isinstance(d.get(n), (list, tuple)) for d in _rope_dicts(cfg) for n in names):
        return True
    return any(isinstance(cfg.get(n), (list, tuple)) for n in names)


def mrope_of(config: dict, fork: bool = False) -> bool:
    """Whether the model's text RoPE is M-RoPE, decided from the config as the server decides it.

    vLLM (0.32, vllm/transformers_utils/config.py `uses_mrope`; vllm-gaudi runs on it): an
    `mrope_section` list in the RoPE parameters of the top-level config, of its text config
    (get_text_config), or of an Omni model's thinker text config. The model class plays no part:
    a Qwen3-VL config without it is read as plain RoPE by vLLM too.
    vllm-fork (1.22, 1.23, habana_main, the same function of its own time): `mrope_section` in the
    top-level config's `rope_scaling` only (or the thinker's), so a section nested in text_config (how
    Qwen3-VL writes it) is not M-RoPE there.
    """
    thinker = config.get("thinker_config")
    thinker_text = thinker.get("text_config") if isinstance(thinker, dict) else None
    if fork:
        def top(cfg: dict) -> bool:
            rope = cfg.get("rope_scaling")
            return isinstance(rope, dict) and "mrope_section" in rope
        return top(config) or (isinstance(thinker_text, dict) and top(thinker_text))
    text = text_part(config)
    return (_mrope_section(config) or _mrope_section(text)
            or (isinstance(thinker_text, dict) and _mrope_section(thinker_text)))


def config_file(folder: Path) -> Path:
    """The file a model folder's config is read from: config.json, else a Mistral-format params.json, as
    vLLM's --config-format auto chooses (mistralparams.py); config.json when neither is there."""
    hf = folder / "config.json"
    return folder / PARAMS if not hf.is_file() and (folder / PARAMS).is_file() else hf


def load_config(path: Path) -> TextConfig:
    """Read a config.json file, or a model folder's config (config_file)."""
    data, file = raw_config(path)
    return read_config(data, str(file), encoder_config(file.parent))


def raw_config(path: Path) -> tuple[dict, Path]:
    """(the parsed config of a config.json file or a model folder, as the HF config vLLM builds from it; the file)."""
    file = config_file(path) if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise ModelConfigError(f"{path}: no config.json there") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ModelConfigError(f"{file}: cannot be read ({e})") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{file}: not valid JSON ({e})") from None
    if file.name == PARAMS or is_mistral_params(data):
        try:
            data = hf_config(data)
        except ParamsError as e:
            raise ModelConfigError(f"{file}: {e}") from None
    return data, file


# vLLM's get_sentence_transformer_tokenizer_config: the first of these a model folder has
SENTENCE_CONFIGS = ("sentence_bert_config.json", "sentence_roberta_config.json", "sentence_distilbert_config.json",
                    "sentence_camembert_config.json", "sentence_albert_config.json",
                    "sentence_xlm-roberta_config.json", "sentence_xlnet_config.json")


def encoder_config(folder: Path) -> dict | None:
    for name in SENTENCE_CONFIGS:
        try:
            data = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data:
            return data
    return None
