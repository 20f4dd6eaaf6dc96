"""A model is its own config.json: parameter counts to the parameter against the published totals, KV
bytes per token per rank for each attention family, weights as the checkpoint stores them, and every
way a user names a model (folder, config.json, HF cache, catalogue name, served path, FP8 variant)."""

from __future__ import annotations

import json
import shutil

import pytest

from tuner.models import UnknownModelError, catalogue, resolve
from tuner.models.hfconfig import ModelConfigError, read_config
from tuner.models.params import count_params

# Published totals: the model cards' counts, or the safetensors index's total_size / 2 (gemma-2-9b-it:
# 18,483,411,968 B; Llama-3.2-3B-Instruct: 6,425,499,648 B; stored in tuner/models/catalogue/weights.json).
TOTALS = {
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    "meta-llama/Llama-3.1-70B-Instruct": 70_553_706_496,
    "Qwen/Qwen2.5-7B-Instruct": 7_615_616_512,
    "Qwen/Qwen3-30B-A3B": 30_532_122_624,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 46_702_792_704,
    "deepseek-ai/DeepSeek-V2-Lite": 15_706_484_224,
    "openai/gpt-oss-20b": 20_914_757_184,
    "google/gemma-2-9b-it": 9_241_705_984,
    "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824,  # tied embeddings (one 128,256 x 3,072 table)
}


@pytest.mark.parametrize("model_id", sorted(TOTALS))
def test_parameters_counted_from_the_config_equal_the_published_total(model_id):
    counted = count_params(read_config(json.loads(catalogue()[model_id].read_text())))
    assert counted.total == TOTALS[model_id]


def test_moe_models_run_a_token_through_its_routed_experts_only():
    qwen, mixtral, oss = resolve("Qwen/Qwen3-30B-A3B"), resolve("mixtral-8x7b"), resolve("openai/gpt-oss-20b")
    assert 3.0e9 < qwen.active_params < 3.5e9          # "A3B"
    assert 12.5e9 < mixtral.active_params < 13.0e9     # 2 of 8 experts: ~12.9B
    # OpenAI counts 3.61B active with the unembedding and without the embedding table.
    assert abs(oss.active_params - oss.embedding_params / 2 - 3.61e9) < 0.01e9
    assert resolve("llama-3.1-8b").active_params == resolve("llama-3.1-8b").total_params


@pytest.mark.parametrize("name, tp, kv_bytes", [
    ("llama-3.1-8b", 1, 2 * 32 * 8 * 128 * 2),
    ("llama-3.1-8b", 8, 2 * 32 * 1 * 128 * 2),
    ("llama-3.1-70b", 16, 2 * 80 * 1 * 128 * 2),               # 8 KV heads on 16 ranks: replicated, one each
    ("Qwen/Qwen3-30B-A3B", 8, 2 * 48 * 1 * 128 * 2),            # 4 KV heads on 8 ranks: replicated
    ("deepseek-ai/DeepSeek-R1", 1, 61 * (512 + 64) * 2),         # MLA: one latent per layer, not split by TP
    ("deepseek-ai/DeepSeek-R1", 8, 61 * (512 + 64) * 2),
    ("openai/gpt-oss-120b", 2, 2 * 36 * 4 * 64 * 2),             # sliding layers cache per token too
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", 1, 2 * 12 * 2 * 256 * 2),  # 12 of 48 layers hold a KV cache
    ("google/gemma-2-9b-it", 1, 2 * 42 * 8 * 256 * 2),
    ("Qwen/Qwen3-VL-32B-Instruct", 4, 2 * 64 * 2 * 128 * 2),     # the text_config of a VL model
    ("moonshotai/Kimi-K2-Instruct", 8, 61 * (512 + 64) * 2),      # kimi_k2 is MLA (DeepseekV3ForCausalLM)
    ("moonshotai/Kimi-K2.5", 8, 61 * (512 + 64) * 2),             # its text_config
    ("zai-org/GLM-5", 8, 78 * (512 + 64) * 2),                    # glm_moe_dsa is MLA
    ("MiniMaxAI/MiniMax-M2.7", 2, 2 * 62 * 4 * 128 * 2),
    ("poolside/Laguna-XS.2-FP8", 8, 2 * 40 * 1 * 128 * 2),        # 30 sliding + 10 full layers, 8 KV heads each
    # Gemma-4: 25 sliding layers of 8 KV heads x 256, 5 full-attention ones of 2 x 512 (global_head_dim,
    # attention_k_eq_v); vLLM 0.32's own per-layer configs give 225,280 / 112,640 / 35,840 (by hand and in
    # tests/realvllm/test_model_configs_vllm.py)
    ("google/gemma-4-26B-A4B", 1, 2 * (25 * 8 * 256 + 5 * 2 * 512) * 2),
    ("google/gemma-4-26B-A4B", 2, 2 * (25 * 4 * 256 + 5 * 1 * 512) * 2),
    ("google/gemma-4-26B-A4B", 8, 2 * (25 * 1 * 256 + 5 * 1 * 512) * 2),  # 2 KV heads on 8 ranks: replicated
])
def test_kv_bytes_per_token_per_rank(name, tp, kv_bytes):
    shape = resolve(name)
    assert shape.kv_bytes_per_token("bf16", tp) == kv_bytes
    assert shape.kv_bytes_per_token("fp8", tp) == kv_bytes // 2


def test_layers_of_different_shapes_are_cached_layer_by_layer(tmp_path):
    """transformers 5's per_layer_config, as written in a config.json; Gemma-4 without attention_k_eq_v keeps
    its KV heads on the wide layers; the last num_kv_shared_layers layers read an earlier layer's cache."""
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
            "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128,
            "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 4096}
    (tmp_path / "per").mkdir()
    (tmp_path / "per" / "config.json").write_text(json.dumps(
        {**base, "per_layer_config": {"1": {"num_key_value_heads": 2, "head_dim": 256}}}))
    shape = resolve(str(tmp_path / "per"))
    assert shape.layer_kv == ((4, 128), (2, 256), (4, 128), (4, 128))
    assert shape.kv_bytes_per_token("bf16") == 2 * (3 * 4 * 128 + 2 * 256) * 2
    assert (shape.kv_heads, shape.head_dim) == (4, 256)  # vLLM's whole-model figures: the largest layer's
    gemma = json.loads(catalogue()["google/gemma-4-26B-A4B"].read_text())
    text = gemma["text_config"]
    text.update(attention_k_eq_v=False, num_kv_shared_layers=6)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "config.json").write_text(json.dumps(gemma))
    shape = resolve(str(tmp_path / "g"))
    full = [i for i, k in enumerate(text["layer_types"][:24]) if k == "full_attention"]
    assert len(shape.layer_kv) == 24 and {shape.layer_kv[i] for i in full} == {(8, 512)}
    assert shape.kv_bytes_per_token("bf16") == 2 * (len(full) * 8 * 512 + (24 - len(full)) * 8 * 256) * 2


def test_weights_are_counted_as_the_checkpoint_stores_them():
    bf16 = resolve("Qwen/Qwen3-30B-A3B")
    fp8 = resolve("Qwen/Qwen3-30B-A3B-FP8")                      # quantization_config in its config
    named_fp8 = resolve("Qwen/Qwen3-VL-32B-Instruct-FP8")         # not in the catalogue: base + FP8 suffix
    assert bf16.weight_bytes("bf16") == 2 * bf16.total_params
    assert fp8.quantization == "fp8" and fp8.weight_bytes("bf16") == fp8.weight_bytes("fp8")
    assert 0.5 < fp8.weight_bytes("bf16") / bf16.weight_bytes("bf16") < 0.55   # embeddings stay 16-bit
    assert named_fp8.quantization == "fp8" and named_fp8.multimodal
    oss = resolve("openai/gpt-oss-120b")                          # MXFP4 experts
    assert 60e9 < oss.weight_bytes("bf16") < 66e9                  # the published checkpoint is ~65 GB
    assert resolve("google/gemma-2-9b-it").weight_bytes("bf16") == 18_483_411_968   # the index's total_size
    assert resolve("llama-3.1-70b").weight_bytes("bf16", tp=8) == 2 * 70_553_706_496 // 8


def test_every_catalogue_config_is_read():
    for model_id in catalogue():
        shape = resolve(model_id)
        assert shape.kv_bytes_per_token("bf16") > 0 and shape.total_params >= shape.active_params > 0, model_id


def test_a_model_is_named_by_folder_config_cache_catalogue_or_served_path(tmp_path, monkeypatch):
    src = catalogue()["Qwen/Qwen3-8B"]
    folder = tmp_path / "my-qwen"
    folder.mkdir()
    shutil.copy(src, folder / "config.json")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16_400_000_000}}))
    assert resolve(str(folder)).layers == 36 and resolve(str(folder)).weight_bytes("bf16") == 16_400_000_000
    assert resolve(str(folder / "config.json")).source.endswith("config.json")
    # the Hugging Face hub cache layout, found offline
    hub = tmp_path / "hf" / "hub" / "models--acme--tuned-qwen"
    snap = hub / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    shutil.copy(src, snap / "config.json")
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    resolve.cache_clear()
    try:
        assert resolve("acme/tuned-qwen").source == f"HF cache: {snap}"
    finally:
        resolve.cache_clear()
    # catalogue: id, short name, older spelling, a served path that ends in one
    assert resolve("meta-llama/Meta-Llama-3.1-70B-Instruct").layers == 80
    assert resolve("/data/models/Mixtral-8x7B-Instruct-v0.1").experts == 8
    assert resolve("qwen3-30b-a3b").experts == 128


def test_a_name_nothing_knows_is_refused_with_the_closest_names_and_the_way_on(tmp_path):
    with pytest.raises(UnknownModelError) as e:
        resolve("Qwen/Qwen3-31B-A3B")
    msg = str(e.value)
    assert "unknown model 'Qwen/Qwen3-31B-A3B'" in msg and "closest: Qwen/Qwen3-30B-A3B" in msg
    assert "config.json" in msg
    with pytest.raises(UnknownModelError, match="has no config.json"):
        resolve(str(tmp_path))
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(UnknownModelError, match="not valid JSON"):
        resolve(str(bad))
    with pytest.raises(ModelConfigError, match="num_hidden_layers"):
        read_config({"architectures": ["X"], "hidden_size": 8, "num_attention_heads": 2}, "x/config.json")


def _folder(tmp_path, name: str, config: dict):
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(config))
    return str(tmp_path / name)


HYBRID_BASE = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "vocab_size": 65536, "max_position_embeddings": 4096}


def test_hybrids_cache_only_their_attention_layers(tmp_path):
    """The fields each hybrid family says its attention layers with (vLLM 0.32 with transformers 5 agrees on
    Jamba; the NemotronH pattern is what transformers turns into its layers_block_type)."""
    jamba = resolve(_folder(tmp_path, "jamba", {**HYBRID_BASE, "architectures": ["JambaForCausalLM"],
                                                "model_type": "jamba", "num_hidden_layers": 32,
                                                "attn_layer_period": 8, "attn_layer_offset": 4,
                                                "num_experts": 16, "num_experts_per_tok": 2}))
    assert (jamba.layers, jamba.attention_layers) == (32, 4)
    assert jamba.kv_bytes_per_token("bf16") == 2 * 4 * 8 * 128 * 2
    pattern = "M-M-M*-M-M-M*-M-M-"  # NemotronH: * attention, M Mamba, - MLP
    nemo = resolve(_folder(tmp_path, "nemo", {**HYBRID_BASE, "architectures": ["NemotronHForCausalLM"],
                                              "model_type": "nemotron_h", "head_dim": 128,
                                              "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern}))
    assert (nemo.layers, nemo.attention_layers) == (18, 2)
    assert nemo.kv_bytes_per_token("bf16") == 2 * 2 * 8 * 128 * 2
    listed = resolve(_folder(tmp_path, "nemo5", {**HYBRID_BASE, "architectures": ["NemotronHForCausalLM"],
                                                 "model_type": "nemotron_h", "head_dim": 128,
                                                 "layers_block_type": ["linear_attention", "moe", "full_attention",
                                                                       "mlp"]}))
    assert (listed.layers, listed.attention_layers) == (4, 1)  # transformers 5 writes no num_hidden_layers
    zamba = resolve(_folder(tmp_path, "zamba", {"architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2",
                                                "hidden_size": 2560, "num_attention_heads": 32,
                                                "num_key_value_heads": 32, "attention_head_dim": 160,
                                                "num_hidden_layers": 6, "vocab_size": 32000,
                                                "layers_block_type": ["mamba"] * 5 + ["hybrid"]}))
    assert (zamba.head_dim, zamba.attention_layers) == (160, 1)  # vLLM: head size 2 x hidden / heads


@pytest.mark.parametrize("arch", ["MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM"])
def test_attention_free_models_are_refused_saying_why(tmp_path, arch):
    folder = _folder(tmp_path, arch, {"architectures": [arch], "hidden_size": 4096, "num_hidden_layers": 64,
                                      "num_heads": 128, "head_dim": 64, "vocab_size": 50280})
    with pytest.raises(UnknownModelError, match=f"{arch} is attention-free"):
        resolve(folder)


def test_sizes_written_per_layer_or_under_other_names_are_counted(tmp_path):
    gemma3n = {"architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 2048,
               "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
               "intermediate_size": [8192, 8192, 16384, 16384], "vocab_size": 1000}
    shape = resolve(_folder(tmp_path, "g3n", gemma3n))
    mlp = 3 * 2048 * (2 * 8192 + 2 * 16384)
    assert shape.total_params > mlp
    longcat = {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "hidden_size": 1024,
               "num_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 8, "ffn_hidden_size": 4096,
               "expert_ffn_hidden_size": 512, "n_routed_experts": 16, "moe_topk": 2, "kv_lora_rank": 128,
               "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "vocab_size": 1000}
    shape = resolve(_folder(tmp_path, "longcat", longcat))
    assert shape.mla and shape.experts == 16 and shape.expert_params == 2 * 16 * 3 * 1024 * 512


def test_deepseek_v4_caches_one_latent_of_head_dim(tmp_path):
    """DeepSeek-V4 writes no kv_lora_rank: vLLM 0.32 takes a config with compress_ratios as MLA when it has a
    head_dim, one latent of head_dim per token and layer (model_arch_config_convertor.py is_deepseek_mla and
    get_head_size); its ModelConfig gives 43 x 512 x 2 B at every TP for DeepSeek-V4-Flash's shape."""
    v4 = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
          "num_hidden_layers": 43, "num_attention_heads": 64, "num_key_value_heads": 1, "head_dim": 512,
          "qk_rope_head_dim": 64, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
          "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0], "n_routed_experts": 256, "n_shared_experts": 1,
          "num_experts_per_tok": 6, "moe_intermediate_size": 2048, "vocab_size": 129280,
          "max_position_embeddings": 1048576}
    shape = resolve(_folder(tmp_path, "v4", v4))
    assert shape.mla and (shape.head_dim, shape.kv_heads_per_rank(8)) == (512, 1)
    for tp in (1, 2, 8):
        assert shape.kv_bytes_per_token("bf16", tp) == 43 * 512 * 2
    # without compress_ratios the MLA test is kv_lora_rank's, which neither the file nor DeepseekV4Config has
    assert not resolve(_folder(tmp_path, "v4-no-ratios", {k: v for k, v in v4.items() if k != "compress_ratios"})).mla


def test_default_context_is_vllms_for_longrope_and_sentence_transformers(tmp_path):
    """vLLM 0.32 (checked by hand on these two folders, ModelConfig.max_model_len): a LongRoPE model (Phi-3.5,
    Phi-4-mini) serves its original_max_position_embeddings by default, not its 128k; a sentence-transformers
    folder its sentence_bert_config.json's max_seq_length."""
    phi = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
           "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
           "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48}}
    assert resolve(_folder(tmp_path, "phi", phi)).max_position == 4096
    del phi["rope_scaling"]
    assert resolve(_folder(tmp_path, "phi-plain", phi)).max_position == 131072
    qwen = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 8, "max_position_embeddings": 32768}
    assert resolve(_folder(tmp_path, "qwen", qwen)).max_position == 32768
    st = _folder(tmp_path, "st", qwen)
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 4096, "do_lower_case": false}')
    assert resolve(st).max_position == 4096
