"""A model known from its config.json, checked against vLLM itself: for one real config of each
architecture family, the genuine vLLM of this tier (configs only, no weights, no boot) derives the
layers, the attention layers, the KV heads per rank, the head size, MLA, max_model_len and the KV-cache
bytes per token from its own KV-cache specs, at TP 1, 2 and 8; tuner.models must give the same.

The vision-language configs are compared through their text part (what holds the KV cache), or whole under
the text model's class: the CPU build cannot inspect the multimodal classes without torchvision, which it
cannot import here."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tuner.models import catalogue, resolve
from tuner.models.hfconfig import text_part

pytestmark = [pytest.mark.realvllm, pytest.mark.xdist_group("realvllm")]

FIGURES = Path(__file__).with_name("vllm_model_figures.py")
TPS = (1, 2, 8)
FAMILIES = {  # family -> a catalogue config of it
    "Llama / GQA": "meta-llama/Llama-3.1-70B-Instruct",
    "Llama-2 / MHA": "meta-llama/Llama-2-13b-hf",
    "Qwen2": "Qwen/Qwen2.5-7B-Instruct",
    "Qwen3 (head_dim apart from hidden/heads)": "Qwen/Qwen3-8B",
    "Qwen3-MoE (4 KV heads: replicated at TP 8)": "Qwen/Qwen3-30B-A3B",
    "Qwen3-MoE FP8 checkpoint": "Qwen/Qwen3-235B-A22B-FP8",
    "Qwen3-Next (hybrid linear attention)": "Qwen/Qwen3-Next-80B-A3B-Thinking",
    "Mixtral": "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "DeepSeek-V2 MLA": "deepseek-ai/DeepSeek-V2-Lite",
    "DeepSeek-V3 MLA": "deepseek-ai/DeepSeek-R1",
    "Gemma-2 (sliding window)": "google/gemma-2-9b-it",
    "gpt-oss (sliding, sinks, MXFP4)": "openai/gpt-oss-120b",
    "Phi-3": "microsoft/phi-4",
    "DeepSeek-V3.2 MLA (sparse attention)": "deepseek-ai/DeepSeek-V3.2",
    "Mistral-7B v0.1 (every layer slides)": "mistralai/Mistral-7B-v0.1",
    "Granite code (128k)": "ibm-granite/granite-3b-code-instruct-128k",
    "Kimi-K2 MLA (model_type kimi_k2, DeepseekV3ForCausalLM)": "moonshotai/Kimi-K2-Instruct",
    "Kimi-K2.5 (the KimiK25 composite, read whole: text-only here)": "moonshotai/Kimi-K2.5",
    "GLM-5 MLA (glm_moe_dsa, sparse attention)": "zai-org/GLM-5",
    "MiniMax-M2 (GQA, partial RoPE, 62 MoE layers)": "MiniMaxAI/MiniMax-M2.7",
    "Laguna (full and sliding layers, per-layer query heads)": "poolside/Laguna-XS.2-FP8",
}
# Text parts of VL / multimodal configs, under the text architecture vLLM serves them with.
TEXT_PARTS = {
    "Qwen3-VL text part": ("Qwen/Qwen3-VL-32B-Instruct", "Qwen3ForCausalLM", "qwen3"),
    "Qwen3-VL-MoE text part": ("Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen3MoeForCausalLM", "qwen3_moe"),
    # full-attention layers: 2 KV heads of 512 (global_head_dim, attention_k_eq_v), sliding ones 8 of 256
    "Gemma-4 text part (layers of two shapes)": ("google/gemma-4-26B-A4B", "Gemma4ForCausalLM", "gemma4_text"),
    "Llama-4 text part (chunked attention, MoE every layer)": ("meta-llama/Llama-4-Scout-17B-16E-Instruct",
                                                              "Llama4ForCausalLM", "llama4_text"),
    "Llama-4 Maverick text part (MoE every other layer)": ("meta-llama/Llama-4-Maverick-17B-128E-Instruct",
                                                          "Llama4ForCausalLM", "llama4_text"),
}

# Whole vision-language configs as published, whose text_config leaves out what its class's defaults say
# (transformers 4.x saved it so): vLLM fills them through AutoConfig, tuner.models from its defaults table.
# Read by vLLM under the text model's causal-LM class (architectures replaced; the config is otherwise whole).
def _gemma3_27b() -> dict:
    from tests.models.test_class_defaults import GEMMA3_27B

    return GEMMA3_27B


# DeepSeek-V4 has no verbatim config here: its shape (compress_ratios, head_dim, no kv_lora_rank) is MLA by head_dim.
def _deepseek_v4() -> dict:
    return {"model_type": "deepseek_v4", "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64,
            "num_key_value_heads": 1, "head_dim": 512, "qk_rope_head_dim": 64, "q_lora_rank": 1024,
            "o_lora_rank": 1024, "o_groups": 8, "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
            "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "moe_intermediate_size": 2048,
            "vocab_size": 129280, "max_position_embeddings": 1048576}


COMPOSITES = {
    "LLaVA-1.5 (a text_config of two sizes)": (lambda: json.loads(catalogue()["llava-hf/llava-1.5-7b-hf"].read_text()),
                                              "LlamaForCausalLM"),
    "Gemma-3 (vocabulary, context and sliding pattern from the class)": (_gemma3_27b, "Gemma3ForCausalLM"),
    "Mistral-3 text_config of its model type only": (
        lambda: {"model_type": "mistral3", "text_config": {"model_type": "mistral"}}, "MistralForCausalLM"),
    "Voxtral (the composite's own text defaults)": (
        lambda: {"model_type": "voxtral", "text_config": {"model_type": "llama"}}, "LlamaForCausalLM"),
    "DeepSeek-V4 shape (compress_ratios: one latent of head_dim)": (_deepseek_v4, "DeepseekV4ForCausalLM"),
}
# Served with --hf-overrides as users serve them: vLLM reads the config with them (ModelConfig's hf_overrides), and
# tuner.models must read it so too (tuner/models/overrides.py). (A RoPE override in the legacy spelling, {"type":
# "yarn"}, is left out: vLLM 0.32 stops on it with KeyError 'rope_type', the dict being set after its RoPE patch.)
OVERRIDDEN = {
    "Qwen3 YaRN as Qwen's docs give it (not scaled again)": ("Qwen/Qwen3-8B", {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}),
    "Qwen3 YaRN with max_position_embeddings": ("Qwen/Qwen3-8B", {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
        "max_position_embeddings": 131072}),
    "Llama-2 dynamic RoPE (the factor scales the length)": ("meta-llama/Llama-2-7b-hf", {
        "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}),
    "Llama-3.1 rope_parameters replaced": ("meta-llama/Llama-3.1-8B-Instruct", {
        "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 500000.0}}),
    "Llama-3.1 rope_scaling null": ("meta-llama/Llama-3.1-8B-Instruct", {"rope_scaling": None}),
    "Qwen3-MoE cut to 4 layers (a smoke test)": ("Qwen/Qwen3-30B-A3B", {"num_hidden_layers": 4}),
    "Mistral-7B: fewer KV heads, shorter context": ("mistralai/Mistral-7B-v0.1", {
        "max_position_embeddings": 8192, "num_key_value_heads": 4}),
    "DeepSeek-V2-Lite MLA, shorter context": ("deepseek-ai/DeepSeek-V2-Lite", {"max_position_embeddings": 65536}),
}


@pytest.fixture(scope="module")
def vllm_figures(vllm_env, tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("configs")
    folders = {}
    for family, model_id in FAMILIES.items():
        folder = root / model_id.replace("/", "__")
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(catalogue()[model_id].read_text())
        folders[family] = folder
    for family, (model_id, arch, model_type) in TEXT_PARTS.items():
        text = dict(text_part(json.loads(catalogue()[model_id].read_text())))
        text.update(architectures=[arch], model_type=model_type)
        folder = root / (model_id.replace("/", "__") + "-text")
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(text))
        folders[family] = folder
    for i, (family, (config, arch)) in enumerate(COMPOSITES.items()):
        folder = root / f"composite-{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**config(), "architectures": [arch]}))
        folders[family] = folder
    overrides = {}
    for i, (family, (model_id, hf_overrides)) in enumerate(OVERRIDDEN.items()):
        folder = root / f"overridden-{i}"
        folder.mkdir()
        (folder / "config.json").write_text(catalogue()[model_id].read_text())
        (folder / "hf_overrides.json").write_text(json.dumps(hf_overrides))  # vllm_model_figures.py passes it
        folders[family], overrides[family] = folder, hf_overrides
    argv = [str(vllm_env.python), str(FIGURES), "--tp", ",".join(map(str, TPS)), *map(str, folders.values())]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    by_folder = {d["folder"]: d for d in map(json.loads, run.stdout.splitlines())}
    return {family: by_folder[str(folder)] | {"ours": str(folder), "hf_overrides": overrides.get(family)}
            for family, folder in folders.items()}


@pytest.mark.parametrize("family", [*FAMILIES, *TEXT_PARTS, *COMPOSITES, *OVERRIDDEN])
def test_kv_bytes_per_token_and_layers_equal_vllm_own(vllm_figures, family):
    theirs = vllm_figures[family]
    assert "error" not in theirs, f"vLLM could not read the {family} config: {theirs['error']}"
    # the same config.json (and --hf-overrides), read by tuner.models from its folder
    ours = resolve(str(Path(theirs["ours"]) / "config.json"), theirs["hf_overrides"])
    assert ours.max_position == theirs["max_model_len"]
    assert ours.mla == theirs["use_mla"] and ours.head_dim == theirs["head_size"]
    for tp in TPS:
        row = theirs["tp"][str(tp)]
        assert (ours.layers, ours.attention_layers, ours.kv_heads_per_rank(tp)) == (
            row["layers"], row["attention_layers"], row["kv_heads"]), f"TP {tp}"
        assert ours.kv_bytes_per_token("bf16", tp) == row["kv_bytes_per_token_bf16"], f"TP {tp}"
        assert ours.kv_bytes_per_token("fp8", tp) == row["kv_bytes_per_token_fp8"], f"TP {tp}"


# Tiny random-weight models of families the CPU build serves (--load-format dummy): vLLM's own KV-cache
# size in tokens must be what tuner.models derives from the same config.json. One boot, MLA's (GQA's is the
# tier's own tiny Llama, tests/realvllm/test_realvllm.py; a head_dim apart from hidden/heads, Qwen3-MoE's,
# is checked above against vLLM's page size, which is what its allocator divides by). (Sliding-window families,
# gpt-oss and Gemma-2, are left out: the CPU build sizes them with its hybrid allocator, which Gaudi does
# not use; their bytes per token are checked above against vLLM's specs.)
TINY = {
    "DeepSeek-V2 (MLA, shared and routed experts)": {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 128,
        "intermediate_size": 256, "moe_intermediate_size": 64, "n_routed_experts": 8, "n_shared_experts": 1,
        "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 64,
        "q_lora_rank": None, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4, "topk_method": "greedy",
        "n_group": 1, "topk_group": 1, "norm_topk_prob": False, "scoring_func": "softmax",
        "routed_scaling_factor": 1.0},
}
COMMON = {"vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
          "hidden_act": "silu", "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1,
          "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("family", list(TINY))
def test_a_tiny_model_booted_by_vllm_holds_the_kv_tokens_we_derive(vllm_env, tmp_path, family):
    from .test_realvllm import KV_BYTES, RealServer, kv_tokens

    folder = tmp_path / "model"
    shutil.copytree(vllm_env.model, folder)  # the tier's tokenizer files; the config is replaced
    (folder / "config.json").write_text(json.dumps({**COMMON, **TINY[family]}))
    server = RealServer(vllm_env, tmp_path, model=folder)
    try:
        server.start()
        kv = server.summary().kv_cache
    finally:
        server.close()
    assert kv is not None and kv.memory == KV_BYTES
    assert kv.tokens == kv_tokens(KV_BYTES, resolve(str(folder)).kv_bytes_per_token("bf16"))
