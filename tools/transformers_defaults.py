"""tuner/models/catalogue/transformers_defaults.json: the defaults transformers fills into a config.json.

A config saved by transformers 4.x (`save_pretrained`) writes a nested sub-config (a vision-language
model's `text_config`) as its difference from the sub-config class's defaults: the real
llava-hf/llava-1.5-7b-hf config gives its Llama text model as max_position_embeddings and vocab_size
only, google/gemma-3-27b-it leaves out vocab_size, max_position_embeddings and the sliding-window pattern.
vLLM reads the config through transformers' AutoConfig, which puts the class defaults back. This tool
records, per model type transformers knows, the defaults that are constants (a default derived from
other fields, such as Llama's num_key_value_heads = num_attention_heads or head_dim = hidden_size //
num_attention_heads, is left to the reader, which derives it the same way), and per composite model type
which model type its text sub-config is when the file does not say.

Maintainer tool, run under the genuine-vLLM tier's Python (transformers as vLLM pins it):

    <vllm-venv>/bin/python tools/transformers_defaults.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tuner" / "models" / "catalogue" / "transformers_defaults.json"
SUB_KEYS = ("text_config", "llm_config", "language_config", "vision_config")
# Sizes perturbed one at a time (and the flags among READ flipped) to find the defaults derived from them
# (the others are constants).
PERTURB = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size", "vocab_size",
           "max_position_embeddings", "num_key_value_heads", "head_dim", "sliding_window", "num_experts",
           "n_routed_experts", "num_local_experts", "moe_intermediate_size")
# The keys tuner.models reads (hfconfig, params, vision): only their defaults matter to it. Not the per-layer
# lists (layer_types, layers_block_type, hybrid_override_pattern, attn_type_list, no_rope_layers): a default
# list is as long as the default model, and transformers 5 derives them from the file's other fields.
READ = frozenset("""
num_hidden_layers n_layer num_layers n_layers hidden_size n_embd d_model dim num_attention_heads n_head n_heads
num_heads n_head_kv num_kv_heads num_key_value_heads multi_query_group_num num_attention_groups
new_decoder_architecture multi_query kv_lora_rank qk_rope_head_dim qk_nope_head_dim v_head_dim q_lora_rank head_dim
attention_head_dim hidden_size_per_head attn_layer_period attn_layer_offset full_attention_interval sliding_window
sliding_window_pattern
_sliding_window_pattern use_sliding_window attention_chunk_size num_kv_shared_layers global_head_dim
attention_k_eq_v num_global_key_value_heads num_experts moe_num_experts n_routed_experts num_local_experts
num_experts_per_tok num_experts_per_token experts_per_token top_k_experts moe_topk moe_top_k vocab_size
padded_vocab_size max_position_embeddings n_positions max_seq_len seq_length model_max_length max_target_positions
max_sequence_length max_seq_length seq_len rope_scaling rope_parameters embedding_size attention_bias
linear_num_key_heads linear_key_head_dim linear_num_value_heads linear_value_head_dim linear_conv_kernel_dim
first_k_dense_replace mlp_only_layers moe_layer_freq decoder_sparse_step interleave_moe_layer_step
intermediate_size ffn_dim ffn_hidden_size moe_intermediate_size intermediate_size_moe expert_ffn_hidden_size
n_shared_experts shared_expert_intermediate_size tie_word_embeddings depth embed_dim image_size in_channels
num_channels out_hidden_size patch_size projection_dim spatial_merge_size temporal_patch_size width hidden_act
""".split())


def _derived(cls, default: dict) -> set[str]:
    """Keys whose default changes when one of the sizes does (a derived default, not a constant)."""
    derived: set[str] = set()
    flags = [k for k in READ if isinstance(default.get(k), bool)]  # GPTBigCode: multi_query sets the KV heads
    for key in (*PERTURB, *flags):
        value = default.get(key)
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, int) and value > 0:
            new = value * 2
        else:
            continue
        try:
            changed = cls(**{key: new}).to_dict()
        except Exception:  # noqa: BLE001 - a class that validates its sizes: this key tells nothing
            continue
        aliases = {key, *(a for a, b in getattr(cls, "attribute_map", {}).items() if key in (a, b)),
                   getattr(cls, "attribute_map", {}).get(key)}
        derived.update(k for k, v in changed.items() if k not in aliases and default.get(k) != v)
    return derived


def _own_sub_defaults(cls, subs: dict[str, str]) -> dict[str, dict]:
    """A composite's own defaults for a sub-config it is given with only its model type (Voxtral's text
    model is a 30-layer Llama, not LlamaConfig's 32): where they differ from the sub-config class's."""
    from transformers import CONFIG_MAPPING

    out: dict[str, dict] = {}
    for key, sub_type in subs.items():
        try:
            given = getattr(cls(**{key: {"model_type": sub_type}}), key).to_dict()
            # the class built with the composite's sizes: what its derived defaults would then be
            sizes = {k: given[k] for k in PERTURB if k in given and k not in ("head_dim", "num_key_value_heads")}
            sized = CONFIG_MAPPING[sub_type](**sizes).to_dict()
            plain = CONFIG_MAPPING[sub_type]().to_dict()
        except Exception:  # noqa: BLE001 - a composite that cannot be built so: its class defaults stand
            continue
        differ = {k: v for k, v in given.items() if k in READ and (plain.get(k) != v or sized.get(k) != v)}
        if differ:
            out[key] = differ
    return out


def build() -> dict:
    import transformers
    from transformers import CONFIG_MAPPING

    types: dict[str, dict] = {}
    sub_types: dict[str, dict] = {}
    sub_defaults: dict[str, dict] = {}
    for model_type in sorted(CONFIG_MAPPING.keys()):
        try:
            cls = CONFIG_MAPPING[model_type]
            instance = cls()
            default = instance.to_dict()
        except Exception:  # noqa: BLE001 - a type with no defaults of its own (composites of required parts)
            continue
        subs = {key: getattr(instance, key).model_type for key in SUB_KEYS
                if getattr(getattr(instance, key, None), "model_type", None)}
        if subs:
            sub_types[model_type] = subs
        own = _own_sub_defaults(cls, subs)
        if own:
            sub_defaults[model_type] = own
        derived = _derived(cls, default)
        kept = {k: v for k, v in default.items() if k in READ and k not in derived}
        if kept:
            types[model_type] = kept
    return {"source": f"transformers {transformers.__version__}: each config class's defaults (tools/"
                      "transformers_defaults.py); constants only, derived defaults left to the reader",
            "sub_config_types": sub_types, "sub_config_defaults": sub_defaults, "types": types}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the file differs from what it would write")
    args = p.parse_args()
    text = json.dumps(build(), sort_keys=True, separators=(",", ":")) + "\n"
    if args.check:
        return 0 if OUT.read_text() == text else 1
    OUT.write_text(text)
    print(f"{OUT}: {len(text):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
