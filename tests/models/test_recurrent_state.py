"""A hybrid model's recurrent state per sequence, from its config.json (tuner.models.recurrent), worked out by hand
from vLLM 0.32's rules: the conv state (kernel - 1 + speculative tokens, channels / TP), the temporal state
(heads / TP, ...), their dtypes and the page bytes of one layer for one sequence on one rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.models import catalogue
from tuner.models.hfconfig import load_config, read_config
from tuner.models.recurrent import RecurrentSpec, recurrent_spec

HYBRID_DATA = Path(__file__).resolve().parents[1] / "data" / "model-configs-hybrid"


def spec_of(model_id: str) -> RecurrentSpec | None:
    return recurrent_spec(load_config(catalogue()[model_id]))


def data_spec(name: str) -> RecurrentSpec | None:
    return recurrent_spec(load_config(HYBRID_DATA / f"{name}.json"))


# model, shapes at TP 1, dtypes, page bytes, recurrent layers, attention layers
FIGURES = [
    # conv: 3 x (2 x 16 key heads x 128 + 48 value heads x 128 = 10,240) bf16 = 61,440 B;
    # temporal: 48 x 128 x 128 in the config's mamba_ssm_dtype float32 = 3,145,728 B
    ("Qwen/Qwen3.5-27B", ((3, 10240), (48, 128, 128)), ("bfloat16", "float32"), 61_440 + 3_145_728, 48, 16),
    # conv: 3 x (2 x 16 x 128 + 32 x 128 = 8,192) bf16 = 49,152 B; temporal: 32 x 128 x 128 float32 = 2,097,152 B
    ("Qwen/Qwen3.5-35B-A3B", ((3, 8192), (32, 128, 128)), ("bfloat16", "float32"), 49_152 + 2_097_152, 30, 10),
    ("Qwen/Qwen3.6-35B-A3B", ((3, 8192), (32, 128, 128)), ("bfloat16", "float32"), 49_152 + 2_097_152, 30, 10),
    # conv: 3 x (2 x 16 x 128 + 64 x 128 = 12,288) bf16 = 73,728 B; temporal: 64 x 128 x 128 float32 = 4,194,304 B
    ("Qwen/Qwen3.5-122B-A10B", ((3, 12288), (64, 128, 128)), ("bfloat16", "float32"), 73_728 + 4_194_304, 36, 12),
    # Qwen3-Next has no mamba_ssm_dtype: the temporal state is in the model dtype, 32 x 128 x 128 x 2 = 1,048,576 B
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", ((3, 8192), (32, 128, 128)), ("bfloat16", "bfloat16"),
     49_152 + 1_048_576, 36, 12),
]


@pytest.mark.parametrize("model_id, shapes, dtypes, page, layers, attention", FIGURES)
def test_gated_deltanet_state_of_the_catalogue_qwen_hybrids(model_id, shapes, dtypes, page, layers, attention):
    spec = spec_of(model_id)
    assert spec is not None and spec.kind == "gdn_attention"
    assert spec.shapes() == shapes
    assert spec.dtypes() == dtypes
    assert spec.page_bytes() == page
    assert spec.layers == layers
    assert load_config(catalogue()[model_id]).attention_layers == attention


@pytest.mark.parametrize("tp, shapes, page", [
    # channels and value heads split across the ranks: 10,240 / 2 = 5,120, 48 / 2 = 24
    (2, ((3, 5120), (24, 128, 128)), 3 * 5120 * 2 + 24 * 128 * 128 * 4),
    (8, ((3, 1280), (6, 128, 128)), 3 * 1280 * 2 + 6 * 128 * 128 * 4),
])
def test_tensor_parallel_splits_the_channels_and_the_heads(tp, shapes, page):
    spec = spec_of("Qwen/Qwen3.5-27B")
    assert spec.shapes(tp) == shapes
    assert spec.page_bytes(tp) == page


def test_a_dimension_tp_does_not_divide_is_refused_as_vllm_refuses_it():
    spec = spec_of("Qwen/Qwen3.5-27B")  # 48 value heads: not on 32 ranks (vLLM's divide() asserts)
    with pytest.raises(ValueError, match="not divisible"):
        spec.shapes(32)
    with pytest.raises(ValueError, match="not divisible"):
        spec.page_bytes(32)


def test_speculative_tokens_lengthen_the_conv_state_only():
    spec = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking")
    # kernel 4 - 1 + 3 speculative tokens = 6 conv positions; the temporal state is as before
    assert spec.shapes(1, num_spec=3) == ((6, 8192), (32, 128, 128))
    assert spec.page_bytes(1, num_spec=3) - spec.page_bytes(1) == 3 * 8192 * 2


def test_cache_dtype_overrides():
    spec = spec_of("Qwen/Qwen3.5-27B")
    # an explicit --mamba-ssm-cache-dtype wins over the config's mamba_ssm_dtype
    assert spec.dtypes(mamba_ssm_cache_dtype="bfloat16") == ("bfloat16", "bfloat16")
    assert spec.page_bytes(mamba_ssm_cache_dtype="bfloat16") == 61_440 + 48 * 128 * 128 * 2
    # --mamba-cache-dtype sets the conv state; the SSM state still follows the config
    assert spec.dtypes(mamba_cache_dtype="float32") == ("float32", "float32")
    assert spec.page_bytes(mamba_cache_dtype="float32") == 3 * 10240 * 4 + 48 * 128 * 128 * 4
    # no config rule: "auto" SSM state follows the conv state's dtype (here float16 from the model)
    nxt = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert nxt.dtypes(model_dtype="float16") == ("float16", "float16")
    assert nxt.dtypes(mamba_cache_dtype="float32") == ("float32", "float32")
    with pytest.raises(ValueError):
        nxt.dtypes(mamba_ssm_cache_dtype="int8")


def test_a_model_without_recurrent_layers_has_no_state():
    assert spec_of("meta-llama/Llama-3.1-8B-Instruct") is None
    assert spec_of("deepseek-ai/DeepSeek-R1") is None
    assert spec_of("MiniMaxAI/MiniMax-M2.7") is None


def test_nemotron_h_mamba2_state_with_float32_ssm_from_its_config():
    spec = data_spec("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    assert (spec.kind, spec.layers) == ("mamba2", 23)  # 23 'M' in its hybrid_override_pattern
    # conv channels: 64 heads x 64 + 2 x 8 groups x 128 state = 6,144; temporal (64, 64, 128) float32
    assert spec.shapes() == ((3, 6144), (64, 64, 128))
    assert spec.dtypes() == ("bfloat16", "float32")
    assert spec.page_bytes() == 3 * 6144 * 2 + 64 * 64 * 128 * 4
    # TP 8: 8 groups split evenly, 6,144 / 8 = 768; 64 / 8 = 8 heads
    assert spec.shapes(8) == ((3, 768), (8, 64, 128))


def test_mamba2_groups_that_do_not_split_are_replicated():
    # Granite-4-H style: one group; at TP 4 it becomes 4 (extra_groups_for_head_shards): conv channels
    # 48 x 64 + 2 x 4 x 128 = 4,096, / 4 = 1,024 per rank (not (3,072 + 256) / 4)
    spec = RecurrentSpec("mamba2", 36, conv_dim=48 * 64, conv_kernel=4, heads=48, head_dim=64, state_dim=128,
                         n_groups=1)
    assert spec.shapes(4) == ((3, 1024), (12, 64, 128))
    assert spec.shapes(1) == ((3, 3072 + 256), (48, 64, 128))


def test_nemotron_h_without_the_field_defaults_to_float32():
    spec = data_spec("nvidia__Nemotron-H-56B-Base-8K")  # no mamba_ssm_cache_dtype: vLLM's float32 default
    assert spec.dtypes() == ("bfloat16", "float32")
    assert spec.dtypes(mamba_ssm_cache_dtype="bfloat16") == ("bfloat16", "bfloat16")
    assert spec.shapes() == ((3, 256 * 64 + 2 * 8 * 256), (256, 64, 256))


def test_kda_state_of_kimi_k3():
    spec = data_spec("moonshotai__Kimi-K3")
    assert (spec.kind, spec.layers) == ("kda", 69)  # its 69 kda_layers of 93
    # conv: 3 x (96 heads x 128 x 3 = 36,864) bf16; recurrent (96, 128, 128) float32 when "auto"
    assert spec.shapes() == ((3, 36864), (96, 128, 128))
    assert spec.dtypes() == ("bfloat16", "float32")
    assert spec.page_bytes() == 3 * 36864 * 2 + 96 * 128 * 128 * 4
    assert spec.dtypes(mamba_ssm_cache_dtype="bfloat16") == ("bfloat16", "bfloat16")
    with pytest.raises(ValueError, match="KDA"):
        spec.dtypes(mamba_ssm_cache_dtype="float16")  # vLLM refuses it too


def test_short_conv_and_mamba1_and_linear_attention_layouts():
    lfm2 = recurrent_spec(read_config({
        "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 1024, "conv_dim": 1024,
        "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8, "conv_L_cache": 3,
        "layer_types": ["conv", "conv", "full_attention", "conv"]}))
    assert (lfm2.kind, lfm2.layers) == ("short_conv", 3)
    assert lfm2.shapes(2, num_spec=1) == ((3, 512),)  # L_cache 3 - 1 + 1 speculative token
    assert lfm2.page_bytes() == 2 * 1024 * 2
    jamba = recurrent_spec(read_config({
        "architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_expand": 2, "mamba_d_state": 16,
        "mamba_d_conv": 4, "attn_layer_period": 8, "attn_layer_offset": 4}))
    assert (jamba.kind, jamba.layers) == ("mamba1", 28)
    # Mamba1 keeps no room for speculative tokens: (3, 8192 / 2), (4096, 16)
    assert jamba.shapes(2, num_spec=2) == ((3, 4096), (4096, 16))
    linear = RecurrentSpec("linear_attention", 10, heads=64, head_dim=128)
    assert linear.shapes(4) == ((16, 128, 128),)
    assert linear.dtypes(mamba_ssm_cache_dtype="float32") == ("bfloat16",)  # one state, in the cache dtype
    assert linear.page_bytes(4) == 16 * 128 * 128 * 2


def test_layers_with_attention_and_mamba_side_by_side_count_as_recurrent():
    # Falcon-H1 keeps a Mamba2 mixer in every layer, beside its attention
    falcon = recurrent_spec(read_config({
        "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "hidden_size": 1024,
        "num_hidden_layers": 36, "num_attention_heads": 8, "num_key_value_heads": 2, "mamba_d_ssm": 1536,
        "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_n_groups": 1}))
    assert falcon.layers == 36
    assert falcon.shapes() == ((3, 1536 + 2 * 128), (24, 64, 128))


def test_shipped_hybrid_data_has_provenance_rows():
    sources = (HYBRID_DATA / "SOURCES.md").read_text()
    for path in HYBRID_DATA.glob("*.json"):
        assert f"| {path.name} |" in sources
        json.loads(path.read_text())
