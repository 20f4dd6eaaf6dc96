"""Parameter counts from a config.json, against transformers' own model of the same config (built on the meta
device in the genuine tier's venv: no memory, tied weights once) for one type of each way a family builds its
layers: gated and ungated MLPs, experts and shared experts, MLA, Mamba2 and Mamba1 mixers beside attention or in
place of an MLP, per-layer input embeddings, linear attention (Gated DeltaNet, KDA), the DSA indexer, DeepSeek-V4's
compressed attention and hyper-connections, per-layer head sizes. benchmarks/model_oracle.py --params runs every
type (README there)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]

TYPES = {  # model type -> what it checks
    "llama": "gated MLP", "qwen3_moe": "experts", "deepseek_v3": "MLA, shared experts, dense first layers",
    "gpt_bigcode": "ungated MLP, multi-query (Granite code 20B/34B)", "falcon": "ungated MLP",
    "starcoder2": "ungated MLP with biases", "gpt_neox": "ungated MLP",
    "nemotron_h": "Mamba2, attention, MLP and experts each a layer of their own",
    "granitemoehybrid": "Mamba2 beside experts and a shared MLP (Granite-4 H)", "bamba": "Mamba2 layers",
    "falcon_h1": "attention and Mamba2 side by side", "jamba": "Mamba1, experts every other layer",
    "gemma3n_text": "per-layer input embeddings, KV-shared layers",
    "qwen3_5_moe": "Gated DeltaNet, gated attention, shared expert and its gate; the text-only class of a VL config",
    "kimi_linear": "Kimi Delta Attention, MLA without a q LoRA, dense first layer by mlp_layer_types",
    "hy_v4": "MLA with the DSA indexer on its full indexer layers only, gated MLA, sinks, hyper-connections",
    "deepseek_v4": "compressed attention (CSA / HCA compressors, indexer), grouped output LoRA, hyper-connections",
    "gemma4_text": "per-layer head sizes (per_layer_config), four norms a layer, per-layer inputs",
}


def test_parameters_equal_transformers_model_of_the_same_config(vllm_env, tmp_path):
    from benchmarks.model_oracle import param_counts

    rows = param_counts(str(vllm_env.python), str(tmp_path), list(TYPES))
    assert set(rows) == set(TYPES)
    off = {k: (r.get("error_pct"), r.get("ours_error") or r.get("skipped"), TYPES[k]) for k, r in rows.items()
           if r.get("error_pct") is None or abs(r["error_pct"]) >= 1.0}
    assert not off, off
