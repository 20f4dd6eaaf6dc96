"""A config.json read with transformers' class defaults under it, as vLLM's AutoConfig reads it.

transformers 4.x saves a vision-language model's text_config as its difference from the text class's
defaults, so the published files leave out what the class already says. Figures below were checked
once against the genuine vLLM 0.32 of the real-vLLM tier (ModelConfig on the same file, under the text
model's causal-LM class): LLaVA-1.5 max_model_len 4096, head size 128, 32 KV heads, 32 layers, vocab
32064; Gemma-3-27B 131072, 128, 16, 62 layers (52 sliding, window 1024), vocab 262208. The tier test
tests/realvllm/test_model_configs_vllm.py keeps them so.
"""

from __future__ import annotations

import copy
import json
from collections import Counter

import pytest

from tuner.models import catalogue, read_config, resolve
from tuner.models.hfconfig import sub_config_type, text_part, with_class_defaults

# google/gemma-3-27b-it's config.json as published (transformers 4.50.0.dev0): its text_config names neither
# the vocabulary, nor the context length, nor which layers slide (Gemma3TextConfig: 262208, 131072, 5 of 6).
GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


def test_llava_text_model_of_two_fields_is_the_llama_its_class_defaults_make():
    model = resolve("llava-hf/llava-1.5-7b-hf")  # the published file: its text_config gives 2 sizes
    assert (model.layers, model.heads, model.kv_heads, model.head_dim) == (32, 32, 32, 128)
    assert (model.hidden, model.vocab, model.max_position) == (4096, 32064, 4096)
    assert model.kv_bytes_per_token("bf16") == 2 * 32 * 32 * 128 * 2
    # Vicuna-7B's 6.74B and CLIP ViT-L/14-336's ~0.3B: LLaVA-1.5-7B's published 7.06B
    assert 6.9e9 < model.total_params < 7.2e9 and model.multimodal


def test_gemma3_text_config_takes_vocab_context_and_sliding_pattern_from_its_class():
    t = read_config(GEMMA3_27B)
    assert (t.layers, t.heads, t.total_kv_heads, t.head_size) == (62, 32, 16, 128)
    assert (t.vocab, t.max_position, t.sliding_window) == (262208, 131072, 1024)
    assert Counter(t.layer_kinds) == {"sliding": 52, "full": 10}  # every 6th layer global
    assert [i for i, k in enumerate(t.layer_kinds) if k == "full"] == list(range(5, 62, 6))
    # with the 262,208-token vocabulary tied once: google's 27.4B (the 32,000 fallback made it 26.2B)
    model = resolve_config(GEMMA3_27B)
    assert 27.3e9 < model.total_params < 27.5e9


def resolve_config(config: dict):
    from tuner.models import shape_from_config

    return shape_from_config(read_config(config), "probe", "test")


def test_what_the_file_says_wins_over_the_default_even_null():
    mistral_text = {"model_type": "mistral", "sliding_window": None, "num_hidden_layers": 40}
    t = read_config({"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
                     "text_config": mistral_text})
    assert t.sliding_window is None and set(t.layer_kinds) == {"full"}  # null written: no window
    assert t.layers == 40 and t.hidden == 4096 and t.vocab == 32000  # the rest MistralConfig's
    # left out, MistralConfig's default window of 4096 stands and every layer slides (as transformers reads it)
    t = read_config({"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3",
                     "text_config": {"model_type": "mistral"}})
    assert t.sliding_window == 4096 and set(t.layer_kinds) == {"sliding"}


def test_a_text_config_without_model_type_is_the_composites_default_text_class():
    assert sub_config_type("llava", "text_config") == "llama"
    assert sub_config_type("gemma3", "text_config") == "gemma3_text"
    cfg = copy.deepcopy(GEMMA3_27B)
    del cfg["text_config"]["model_type"]
    assert read_config(cfg).vocab == 262208


def test_derived_defaults_are_derived_from_the_files_sizes_not_copied():
    # LlamaConfig derives its KV heads and head size from the heads and width it is given
    t = read_config({"architectures": ["LlavaForConditionalGeneration"], "model_type": "llava",
                     "text_config": {"model_type": "llama", "hidden_size": 5120, "num_attention_heads": 40}})
    assert (t.total_kv_heads, t.head_size, t.layers) == (40, 128, 32)


def test_a_composites_own_sub_config_defaults_come_over_the_text_class():
    # Voxtral builds its Llama text model with sizes of its own (30 layers, head_dim 128, 8 KV heads)
    t = read_config({"architectures": ["VoxtralForConditionalGeneration"], "model_type": "voxtral",
                     "text_config": {"model_type": "llama"}})
    assert (t.layers, t.head_size, t.total_kv_heads, t.vocab) == (30, 128, 8, 131072)


def test_a_flat_composite_takes_its_text_class_defaults():
    flat = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
            "hidden_size": 3584, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4}
    t = read_config(flat)
    assert t.vocab == 152064 and t.max_position == 32768  # Qwen2_5_VLTextConfig's, not a generic guess


def test_the_files_rope_scaling_is_not_hidden_by_a_default_rope_parameters():
    part = with_class_defaults({"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}, "qwen2_5_vl_text")
    assert "rope_parameters" not in part


def test_every_catalogue_config_reads_the_same_with_or_without_written_defaults():
    # a config that writes every field is unchanged by the defaults (they only fill what is missing)
    for model_id, path in catalogue().items():
        config = json.loads(path.read_text())
        text = text_part(config)
        for key, value in config.get("text_config", config).items():
            assert text[key] == value, (model_id, key)


def test_image_tokens_of_a_fixed_size_tower_and_of_a_pooling_projector():
    # LLaVA-1.5: CLIP at 336 x 336 in 14-pixel patches, 576 tokens whatever the image; Gemma-3: SigLIP's 4,096
    # patches of an 896 x 896 image pooled to mm_tokens_per_image (256), while the tower still runs all of them
    llava = resolve("llava-hf/llava-1.5-7b-hf").vision_tower
    assert (llava.tokens(640, 480), llava.tokens(1280, 720)) == (576, 576)
    gemma = resolve_config(GEMMA3_27B).vision_tower
    assert (gemma.tokens(640, 480), gemma.tokens(333, 500), gemma.patches(640, 480)) == (256, 256, 4096)


# Mistral-Small-3.1's shape (the published config's vision part: a Pixtral tower of 14-pixel patches taking images
# up to 1540 on their longest side; spatial_merge_size 2 written at the top level)
MISTRAL3 = {"architectures": ["Mistral3ForConditionalGeneration"], "model_type": "mistral3", "spatial_merge_size": 2,
            "text_config": {"model_type": "mistral", "hidden_size": 5120, "num_hidden_layers": 40, "head_dim": 128,
                            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 32768,
                            "vocab_size": 131072, "max_position_embeddings": 131072, "sliding_window": None},
            "vision_config": {"model_type": "pixtral", "hidden_size": 1024, "image_size": 1540, "patch_size": 14,
                              "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}}


@pytest.mark.parametrize(("size", "tokens", "patches"), [
    ((640, 480), 432, 1656), ((1280, 720), 1222, 4784), ((4000, 3000), 2352, 9240), ((256, 256), 110, 400),
    ((333, 500), 234, 864), ((10, 10), 2, 4),
])
def test_pixtral_images_fit_the_longest_edge_and_end_each_row_with_a_break(size, tokens, patches):
    # transformers' Pixtral processor arithmetic (image_processing_pil_pixtral.get_resize_output_image_size, then
    # (columns + 1) x rows of merged patches), which vLLM's Mistral-3 processing uses, gives these figures
    tower = resolve_config(MISTRAL3).vision_tower
    assert (tower.tokens(*size), tower.patches(*size)) == (tokens, patches)
