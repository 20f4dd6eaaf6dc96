"""Which layers of a hybrid keep a KV cache per token and which a recurrent state, as vLLM's model classes build
them: the composite Kimi-K3 (its text part's kda_layers), Falcon-H1 (attention and Mamba2 side by side in every
layer), Ling's linear families (vLLM's bailing_moe_linear.is_linear_layer and bailing_moe_v3._is_kda_layer)."""

import json
from pathlib import Path

from tuner.models.hfconfig import read_config
from tuner.models.shape import shape_from_config

HYBRID_DATA = Path(__file__).resolve().parents[1] / "data" / "model-configs-hybrid"


def shape(config: dict):
    return shape_from_config(read_config(config), "test", "test")


def test_kimi_k3_caches_only_its_full_attention_layers():
    s = shape(json.loads((HYBRID_DATA / "moonshotai__Kimi-K3.json").read_text()))
    # 93 layers, kda_layers lists 69 of them: the other 24 keep an MLA latent per token
    assert (s.layers, s.attention_layers, s.mla) == (93, 24, True)
    assert s.recurrent.kind == "kda" and s.recurrent.layers == 69
    assert s.kv_bytes_per_token("bf16") == 24 * s.head_dim * 2


def test_falcon_h1_attends_in_every_layer_beside_its_mamba():
    config = {"architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "num_hidden_layers": 24,
              "hidden_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
              "attn_layer_indices": None, "mamba_d_ssm": 1536, "mamba_n_heads": 24, "mamba_d_head": 64}
    s = shape(config)
    assert s.attention_layers == 24 and s.recurrent.kind == "mamba2" and s.recurrent.layers == 24


def _ling(arch: str, layers: int) -> dict:
    return {"architectures": [arch], "model_type": "bailing_test", "num_hidden_layers": layers, "hidden_size": 1024,
            "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "layer_group_size": 4,
            "short_conv_kernel_size": 4}


def test_ling_linear_layers_attend_every_group_th_layer():
    s = shape(_ling("BailingMoeV2_5ForCausalLM", 20))  # full attention at layers 3, 7, 11, 15, 19
    assert s.attention_layers == 5 and s.recurrent.kind == "linear_attention" and s.recurrent.layers == 15


def test_ling_v3_attends_also_after_its_last_whole_group():
    s = shape(_ling("BailingMoeV3ForCausalLM", 22))  # 3, 7, 11, 15, 19 and the two left over: 20, 21
    assert s.attention_layers == 7 and s.recurrent.kind == "kda" and s.recurrent.layers == 15
