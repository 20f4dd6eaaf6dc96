"""Run under the genuine vLLM's Python (not the project's): for each model folder given, print one JSON
line with what vLLM itself derives from its config.json: layers, attention layers, KV heads per rank,
head size, MLA, max_model_len and the KV-cache bytes per token of one rank from vLLM's own KV-cache
specs (FullAttentionSpec / MLAAttentionSpec page size with a one-token block), in bf16 and fp8, at the
tensor-parallel sizes asked. No weights are read: configs only (HF_HUB_OFFLINE). A folder's
hf_overrides.json, if it has one, is passed as the server's --hf-overrides.

    <vllm-venv>/bin/python vllm_model_figures.py --tp 1,2,8 DIR [DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
HF_OVERRIDES = "hf_overrides.json"


def figures(folder: str, tps: list[int]) -> dict:
    import torch
    from vllm.config import ModelConfig, ParallelConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec

    overrides = os.path.join(folder, HF_OVERRIDES)  # the server's --hf-overrides for this folder, if any
    hf_overrides = json.load(open(overrides)) if os.path.isfile(overrides) else {}
    mc = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="bfloat16",
                     hf_overrides=hf_overrides)
    out = {"folder": folder, "max_model_len": mc.max_model_len, "use_mla": bool(mc.use_mla),
           "head_size": mc.get_head_size(), "total_kv_heads": mc.get_total_num_kv_heads(), "tp": {}}
    spec_class = MLAAttentionSpec if mc.use_mla else FullAttentionSpec
    for tp in tps:
        pc = ParallelConfig(tensor_parallel_size=tp)
        heads = mc.get_num_kv_heads(pc)
        layers = mc.get_num_layers_by_block_type(pc, "attention")
        row = {"layers": mc.get_num_layers(pc), "attention_layers": layers, "kv_heads": heads}
        per_layer = _per_layer(mc, tp)  # a heterogeneous config: each layer's own heads and head size
        for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
            if per_layer:
                row[f"kv_bytes_per_token_{name}"] = sum(
                    spec_class(block_size=1, num_kv_heads=h, head_size=d, dtype=dtype).page_size_bytes
                    for h, d in per_layer)
                continue
            spec = spec_class(block_size=1, num_kv_heads=heads, head_size=mc.get_head_size(), dtype=dtype)
            row[f"kv_bytes_per_token_{name}"] = layers * spec.page_size_bytes
        out["tp"][str(tp)] = row
    return out


def _per_layer(mc, tp: int) -> list[tuple[int, int]]:
    """(KV heads on one rank, head size) of each cached attention layer of a model whose layers differ, from
    vLLM's own per-layer architecture config (model_arch_config[i], get_num_kv_heads(arch_config=...));
    [] for a model whose layers are alike."""
    arch = mc.model_arch_config
    if arch.per_layer_overrides is None:
        return []
    from vllm.config import ParallelConfig

    text = mc.hf_text_config
    pc = ParallelConfig(tensor_parallel_size=tp)
    types = getattr(text, "layer_types", None) or ["full_attention"] * text.num_hidden_layers
    own = text.num_hidden_layers - int(getattr(text, "num_kv_shared_layers", 0) or 0)
    return [(mc.get_num_kv_heads(pc, arch_config=arch[i]), arch[i].head_size) for i in range(own)
            if types[i] in ("full_attention", "sliding_attention", "chunked_attention")]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 8],
                   help="tensor-parallel sizes, comma-separated (default 1,2,8)")
    p.add_argument("folders", nargs="+")
    args = p.parse_args()
    for folder in args.folders:
        try:
            print(json.dumps(figures(folder, args.tp)), flush=True)
        except Exception as exc:  # one config vLLM cannot read does not hide the others
            print(json.dumps({"folder": folder, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
