"""A Mistral-format model folder: `params.json` in place of config.json (Mistral Small 3.x, Magistral,
Devstral, Ministral, Mistral Large 3 as mistralai ship them; `vllm serve --config-format mistral`).

vLLM reads such a folder when it has no config.json (`--config-format auto`), and turns params.json into a
transformers config (vllm/transformers_utils/configs/mistral.py, adapt_config_dict). The same renames
here, so that hfconfig reads the result as it reads any config.json:

* names: dim -> hidden_size, n_layers -> num_hidden_layers, n_heads -> num_attention_heads,
  n_kv_heads -> num_key_value_heads, hidden_dim -> intermediate_size, norm_eps -> rms_norm_eps,
  tied_embeddings -> tie_word_embeddings; max_position_embeddings 128,000 unless given;
* `sliding_window` as a per-layer list -> `layer_types` and one window; as a number -> every layer slides;
* `quantization` fp8_e4m3 -> quantization_config fp8; compressed-tensors passes through;
* `qk_nope_head_dim` (MLA) without `moe` -> one dense expert per layer (a dense model in DeepSeek's form);
* `moe` with shared experts (Mistral Large 3) -> deepseek_v3 with DeepSeek's MoE names; other `moe` ->
  Mixtral (experts, experts per token);
* `yarn` -> rope_parameters of type yarn (factor, original_max_position_embeddings);
* a vision encoder -> pixtral, the text config under text_config.
"""

from __future__ import annotations

from typing import Any

PARAMS = "params.json"

_NAMES = {"dim": "hidden_size", "norm_eps": "rms_norm_eps", "n_kv_heads": "num_key_value_heads",
          "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads", "hidden_dim": "intermediate_size"}
# DeepSeek's names for the MoE block of Mistral Large 3
_LARGE3_MOE = {"route_every_n": "moe_layer_freq", "first_k_dense_replace": "first_k_dense_replace",
               "num_experts_per_tok": "num_experts_per_tok", "num_experts": "n_routed_experts",
               "expert_hidden_dim": "moe_intermediate_size", "routed_scale": "routed_scaling_factor",
               "num_shared_experts": "n_shared_experts", "num_expert_groups": "n_group",
               "num_expert_groups_per_tok": "topk_group"}


def is_mistral_params(data: Any) -> bool:
    """A params.json by its fields (renamed or passed as a file of another name); a config.json names its
    architectures, a params.json does not (DistilBERT's config.json also says dim and n_layers)."""
    return (isinstance(data, dict) and "dim" in data and "n_layers" in data and "hidden_size" not in data
            and "architectures" not in data)


class ParamsError(ValueError):
    """A params.json whose fields cannot be read as vLLM reads them."""


def hf_config(params: dict[str, Any]) -> dict[str, Any]:
    """The transformers-style config vLLM builds from a params.json."""
    if not isinstance(params, dict):
        raise ParamsError("not a JSON object")
    c = {(_NAMES.get(k, k)): v for k, v in params.items()}
    c["model_type"] = params.get("model_type", "transformer")
    c["tie_word_embeddings"] = c.pop("tied_embeddings", False)
    c.setdefault("max_position_embeddings", 128_000)
    _sliding_window(c)
    if c.get("quantization"):
        _quantization(c)
    if c.get("qk_nope_head_dim") and not c.get("moe"):
        c["moe"] = {"num_experts": 1, "first_k_dense_replace": c.get("num_hidden_layers"), "route_every_n": 1,
                    "num_shared_experts": 1, "expert_hidden_dim": c.get("intermediate_size"),
                    "num_experts_per_tok": 1}
    moe = c.get("moe") or {}
    if c["model_type"] == "mamba":
        c["architectures"] = ["Mamba2ForCausalLM"]
    elif moe and (moe.get("num_shared_experts") or 0) > 0:
        c.update({new: moe[old] for old, new in _LARGE3_MOE.items() if old in moe})
        c["model_type"], c["architectures"] = "deepseek_v3", ["MistralLarge3ForCausalLM"]
    elif moe:
        c["num_local_experts"] = moe.get("num_experts")
        c["num_experts_per_tok"] = moe.get("num_experts_per_tok")
        c["architectures"] = ["MixtralForCausalLM"]
    else:
        c["architectures"] = ["MistralForCausalLM"]
    if c.get("yarn"):
        _yarn(c)
    vision = (c.get("multimodal") or {}).get("vision_encoder_args") or c.get("vision_encoder")
    if vision:
        c.pop("multimodal", None)
        c.pop("vision_encoder", None)
        quant = c.get("quantization_config")
        return {"model_type": "pixtral", "architectures": ["PixtralForConditionalGeneration"], "text_config": c,
                "vision_config": vision, **({"quantization_config": quant} if quant else {})}
    return c


def _sliding_window(c: dict) -> None:
    window = c.get("sliding_window")
    if not window:
        return
    layers = c.get("num_hidden_layers")
    if isinstance(window, list):
        if not isinstance(layers, int) or not window:
            raise ParamsError(f"sliding_window {window!r} without a layer count")
        pattern = window * (layers // len(window))
        c["layer_types"] = ["full_attention" if w is None else "sliding_attention" for w in pattern]
        sizes = set(window) - {None}
        if len(sizes) > 1:
            raise ParamsError(f"sliding_window {window!r}: more than one window size")
        c["sliding_window"] = next(iter(sizes), None)
    elif isinstance(window, int) and c.get("layer_types") is None and isinstance(layers, int):
        c["layer_types"] = ["sliding_attention"] * layers
    else:
        raise ParamsError(f"sliding_window {window!r}: neither a number nor a per-layer list")


def _quantization(c: dict) -> None:
    q = c.pop("quantization")
    if q.get("qformat_weight") == "fp8_e4m3":
        dynamic = q.get("qscheme_act") == "NO_SCALES"
        c["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic" if dynamic else "static"}
    elif str(q.get("quant_method", "")).lower().replace("_", "-") == "compressed-tensors":
        c["quantization_config"] = {**q, "quant_method": "compressed-tensors"}
    else:
        raise ParamsError(f"quantization {q!r}: neither fp8_e4m3 nor compressed-tensors")


def _yarn(c: dict) -> None:
    yarn = dict(c.pop("yarn"))
    rope: dict[str, Any] = {"rope_type": "yarn", "mscale_all_dim": 1}
    if c.get("rope_theta"):
        rope["rope_theta"] = c.pop("rope_theta")
    for old, new, cast in (("factor", "factor", float),
                           ("original_max_position_embeddings", "original_max_position_embeddings", int),
                           ("beta", "beta_fast", float), ("alpha", "beta_slow", float)):
        if old in yarn:
            rope[new] = cast(yarn.pop(old))
    c["rope_parameters"] = rope
