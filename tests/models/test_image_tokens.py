"""Image tokens and encoder patches of the tiling vision-language families (tuner/models/imagetiles.py): the
prompt tokens vLLM 0.32 puts in place of one image, and the patches its encoder runs over (every tile).

Where the figures come from. vLLM 0.32.0 and transformers 5.19 of the real-vLLM tier's venv, called in a
throwaway script with torchvision stubbed out (their token arithmetic needs none of it):
* Llama-4: transformers' find_supported_resolutions / get_best_fit (max_patches 16, Llama4ImageProcessor's
  default), vLLM's Mllama4ProcessingInfo.get_patch_per_chunk, Llama4Processor._prompt_split_image; each
  <|...|> string of the replacement one token.
* InternVL (OpenGVLab format): vLLM's InternVLProcessor.get_num_image_tokens and get_image_repl (<img>,
  <IMG_CONTEXT> x features, </img>), the tiles from calculate_internvl_targets; transformers format: transformers'
  GotOcr2ImageProcessor.get_number_of_image_patches with InternVLProcessor's default crop_to_patches=True,
  vLLM interns1.py's replacement (start + features + end).
* LLaVA-NeXT: vLLM's LlavaNextProcessingInfo.get_num_image_tokens on transformers' LlavaNextConfig; the tiles
  from transformers' get_anyres_image_grid_shape (+ the base image).
* Idefics3: vLLM's own multimodal processor (MULTIMODAL_REGISTRY.create_processor(...).apply) on the tier's tiny
  Idefics3 folder, and on copies of it resized to Idefics3-8B's (364 / 14, scale 2, image_seq_len 169,
  longest_edge 1456) and SmolVLM-Instruct's (384 / 14, scale 3, 81, 1536) towers; prompt tokens counted with the
  tiny model's tokenizer, the tiles from Idefics3ProcessingInfo.get_num_patches. That tokenizer splits the "\\n\\n"
  before the global image in two; Llama-3's (Idefics3-8B) has it as one token, hence the "- 1" below.
Over some 6,700 sizes per config (and 3,100 per Idefics3 shape) imagetiles gave the same counts as those calls.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.models.test_class_defaults import GEMMA3_27B, MISTRAL3
from tuner.models import read_config, resolve, shape_from_config
from tuner.models.hfconfig import _vision_part
from tuner.models.vision import vision_tower

SIZES = [(640, 480), (1024, 1024), (336, 336), (1920, 1080), (400, 1600), (1000, 200)]


def tower_of(config: dict):
    return shape_from_config(read_config(config), "probe", "test").vision_tower


def counts(tower, per_tile: int) -> list[tuple[int, int]]:
    """(tokens, tiles) per size in SIZES; the patches must be the tiles' patches."""
    out = []
    for size in SIZES:
        tiles, rest = divmod(tower.patches(*size), per_tile)
        assert rest == 0, size
        out.append((tower.tokens(*size), tiles))
    return out


# --- Llama-4: 336-pixel tiles, 144 tokens each after the pixel shuffle, a global tile when there are several

LLAMA4 = [(727, 5), (2467, 17), (147, 1), (2322, 16), (1597, 11), (582, 4)]


@pytest.mark.parametrize("model", ["meta-llama/Llama-4-Scout-17B-16E-Instruct",
                                   "meta-llama/Llama-4-Maverick-17B-128E-Instruct"])
def test_llama4_tiles_to_the_best_fit_canvas_with_a_global_tile_and_separators(model):
    tower = resolve(model).vision_tower
    assert (tower.tiling.tile, tower.tiling.tile_tokens, tower.tiling.max_tiles) == (336, 144, 16)
    assert counts(tower, 24 * 24) == LLAMA4
    # 640x480 -> a 2 x 2 canvas: <|image_start|>, 4 x (144 <|patch|>) with 2 x and 2 y separators, <|image|>,
    # the global tile's 144, <|image_end|>
    assert tower.tokens(640, 480) == 1 + 4 * 144 + 2 + 2 + 1 + 144 + 1


# --- InternVL: 448-pixel tiles of 256 tokens, a thumbnail after several, <img> ... </img> around them

# OpenGVLab/InternVL2_5-8B's config.json (its OpenGVLab format: internvl_chat, the LLM under llm_config)
INTERNVL2_5_8B = {
    "architectures": ["InternVLChatModel"], "model_type": "internvl_chat", "downsample_ratio": 0.5,
    "dynamic_image_size": True, "force_image_size": 448, "max_dynamic_patch": 12, "min_dynamic_patch": 1,
    "use_thumbnail": True, "ps_version": "v2", "select_layer": -1, "template": "internvl2_5",
    "llm_config": {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "hidden_size": 4096,
                   "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                   "num_key_value_heads": 8, "max_position_embeddings": 32768, "vocab_size": 92553,
                   "rope_theta": 1000000, "rms_norm_eps": 1e-05, "hidden_act": "silu", "bias": False},
    "vision_config": {"architectures": ["InternVisionModel"], "model_type": "intern_vit_6b", "hidden_size": 1024,
                      "image_size": 448, "intermediate_size": 4096, "num_attention_heads": 16,
                      "num_hidden_layers": 24, "patch_size": 14, "qkv_bias": True, "hidden_act": "gelu",
                      "norm_type": "layer_norm"},
}
# OpenGVLab/InternVL3-8B-hf's (the transformers format: the tiling limits live in its preprocessor config)
INTERNVL3_8B_HF = {
    "architectures": ["InternVLForConditionalGeneration"], "model_type": "internvl", "downsample_ratio": 0.5,
    "image_seq_length": 256, "image_token_id": 151667, "projector_hidden_act": "gelu", "vision_feature_layer": -1,
    "vision_feature_select_strategy": "default",
    "text_config": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
                    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
                    "num_key_value_heads": 4, "max_position_embeddings": 32768, "vocab_size": 151674,
                    "rope_theta": 1000000.0},
    "vision_config": {"model_type": "internvl_vision", "hidden_size": 1024, "image_size": [448, 448],
                      "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": [14, 14], "hidden_act": "gelu"},
}
INTERNVL = [(3330, 13), (2562, 10), (258, 1), (2306, 9), (1282, 5), (1538, 6)]


@pytest.mark.parametrize("config", [INTERNVL2_5_8B, INTERNVL3_8B_HF], ids=["internvl_chat", "internvl"])
def test_internvl_tiles_by_the_closest_aspect_ratio_with_a_thumbnail(config):
    tower = tower_of(config)
    assert (tower.tiling.tile, tower.tiling.tile_tokens, tower.tiling.max_tiles) == (448, 256, 12)
    assert counts(tower, 32 * 32) == INTERNVL
    assert tower.tokens(640, 480) == 2 + (4 * 3 + 1) * 256  # a 4 x 3 grid and the thumbnail


def test_internvl_reads_its_tiling_limits_from_the_config():
    six = tower_of({**INTERNVL2_5_8B, "max_dynamic_patch": 6})
    assert counts(six, 1024)[:5] == [(1794, 7), (1282, 5), (258, 1), (770, 3), (1282, 5)]
    fixed = tower_of({**INTERNVL2_5_8B, "dynamic_image_size": False})  # one tile whatever the image
    assert [fixed.tokens(*s) for s in SIZES] == [258] * len(SIZES)
    assert fixed.patches(1920, 1080) == 1024


# --- Idefics3 / SmolVLM: resized to 4 tiles on the longest side, split, the global image last

# HuggingFaceM4/Idefics3-8B-Llama3's shape (SigLIP at 364 / 14, pixel shuffle by 2: 169 tokens a tile)
IDEFICS3_8B = {
    "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3", "image_token_id": 128257,
    "scale_factor": 2,
    "text_config": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                    "max_position_embeddings": 131072, "rope_theta": 500000.0, "vocab_size": 128259},
    "vision_config": {"model_type": "idefics3_vision", "hidden_size": 1152, "image_size": 364,
                      "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14},
}
# HuggingFaceTB/SmolVLM-Instruct's (an Idefics3 of 384 / 14, scale 3: 81 tokens a tile)
SMOLVLM = {**IDEFICS3_8B, "scale_factor": 3,
           "text_config": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
                           "num_attention_heads": 32, "num_hidden_layers": 24, "num_key_value_heads": 32,
                           "max_position_embeddings": 16384, "rope_theta": 273768.0, "vocab_size": 49155},
           "vision_config": {**IDEFICS3_8B["vision_config"], "image_size": 384}}
# the tier's tiny Idefics3 (tests/realvllm/vlmodel.py): 56-pixel tiles of 4 tokens, its own tokenizer
TINY_IDEFICS3 = {
    "architectures": ["Idefics3ForConditionalGeneration"], "model_type": "idefics3", "image_token_id": 2503,
    "scale_factor": 2,
    "text_config": {"model_type": "llama", "vocab_size": 2542, "hidden_size": 128, "intermediate_size": 256,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                    "max_position_embeddings": 16384},
    "vision_config": {"model_type": "idefics3_vision", "hidden_size": 64, "intermediate_size": 128,
                      "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 56, "patch_size": 14},
}
# vLLM's prompt tokens on the tiny tokenizer (its "\n\n" two tokens), and the tiles, per SIZES
IDEFICS3_VLLM = {"8b": [2228, 2913, 2913, 2228, 861, 858], "smolvlm": [1084, 1417, 1417, 1084, 421, 418],
                 "tiny": [83, 108, 108, 83, 36, 33]}
IDEFICS3_TILES = [13, 17, 17, 13, 5, 5]


@pytest.mark.parametrize(("config", "figures", "per_tile"), [
    (IDEFICS3_8B, "8b", 26 * 26), (SMOLVLM, "smolvlm", 27 * 27)])
def test_idefics3_splits_into_tiles_rows_and_a_global_image(config, figures, per_tile):
    tower = tower_of(config)
    assert counts(tower, per_tile) == [(n - 1, t) for n, t in zip(IDEFICS3_VLLM[figures], IDEFICS3_TILES)]
    # 640x480 on Idefics3-8B: 1456 x 1092 -> 4 columns x 3 rows of 364; per tile <fake><row_i_col_j> + 169,
    # "\n" after rows 1 and 2, "\n\n" after row 3, then <fake><global-img> + 169 and a closing <fake>
    if figures == "8b":
        assert tower.tokens(640, 480) == 12 * (2 + 169) + 2 + 1 + (2 + 169 + 1)


def test_idefics3_counts_what_vllm_put_in_the_prompt_of_the_tiny_model():
    tower = tower_of(TINY_IDEFICS3)
    assert tower.tiling.longest_edge == 224  # its preprocessor_config.json: size 224, max_image_size 56
    tiny = dataclasses.replace(tower, tiling=dataclasses.replace(tower.tiling, blank_line_tokens=2))
    assert counts(tiny, 16) == list(zip(IDEFICS3_VLLM["tiny"], IDEFICS3_TILES))
    assert tiny.tokens(3000, 4000) == 84  # 3 columns x 4 rows: a "\n" more than 4 x 3


# --- LLaVA-NeXT: anyres over image_grid_pinpoints, base features + unpadded grid features + a newline a row

# llava-hf/llava-v1.6-mistral-7b-hf's config.json
LLAVA_NEXT = {
    "architectures": ["LlavaNextForConditionalGeneration"], "model_type": "llava_next", "image_token_index": 32000,
    "image_grid_pinpoints": [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]],
    "vision_feature_layer": -2, "vision_feature_select_strategy": "default", "use_image_newline_parameter": True,
    "text_config": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "intermediate_size": 14336,
                    "max_position_embeddings": 32768, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                    "rope_theta": 1000000.0, "sliding_window": None, "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
}


def test_llava_next_counts_base_unpadded_grid_and_newline_features():
    tower = tower_of(LLAVA_NEXT)
    assert counts(tower, 24 * 24) == [(2340, 5), (2928, 5), (1176, 3), (1948, 5), (1944, 4), (1598, 4)]
    # 640x480 -> the 672 x 672 pinpoint: 576 base features + 48 x 36 unpadded + 36 newlines
    assert tower.tokens(640, 480) == 576 + 48 * 36 + 36


def test_llava_next_takes_the_config_classes_pinpoints_when_the_file_has_none():
    written = tower_of(LLAVA_NEXT)
    default = tower_of({k: v for k, v in LLAVA_NEXT.items() if k != "image_grid_pinpoints"})
    assert default.tiling == written.tiling


# --- the families that were exact before are unchanged, and only the tiling families get tiling keys

QWEN25_VL_VISION = {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                    "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                    "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112}


def test_the_families_exact_before_count_as_before():
    qwen25 = vision_tower(QWEN25_VL_VISION)  # smart_resize: 640x480 -> 644 x 476, 23 x 17 merged patches
    qwen3 = resolve("Qwen/Qwen3-VL-8B-Instruct").vision_tower
    llava = resolve("llava-hf/llava-1.5-7b-hf").vision_tower
    gemma, pixtral = tower_of(GEMMA3_27B), tower_of(MISTRAL3)
    assert (qwen25.tokens(640, 480), qwen25.patches(640, 480)) == (23 * 17, 46 * 34)
    assert (qwen3.tokens(1280, 720), qwen3.patches(1280, 720)) == (80 * 44 // 4, 80 * 44)
    assert (llava.tokens(640, 480), llava.tokens(1920, 1080), llava.patches(640, 480)) == (576, 576, 576)
    assert (gemma.tokens(640, 480), gemma.patches(640, 480)) == (256, 4096)
    assert (pixtral.tokens(640, 480), pixtral.patches(640, 480)) == (432, 1656)
    assert all(t.tiling is None for t in (qwen25, qwen3, llava, gemma, pixtral))


def test_only_the_tiling_families_get_the_top_level_keys():
    assert _vision_part(INTERNVL2_5_8B)["max_dynamic_patch"] == 12
    assert _vision_part(INTERNVL3_8B_HF)["downsample_ratio"] == 0.5
    assert _vision_part(SMOLVLM)["scale_factor"] == 3
    assert _vision_part(LLAVA_NEXT)["image_grid_pinpoints"] == LLAVA_NEXT["image_grid_pinpoints"]
    llava15 = {**LLAVA_NEXT, "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]}
    assert "image_grid_pinpoints" not in _vision_part(llava15)  # LLaVA-1.5 resizes to one 336 x 336 image
    assert "downsample_ratio" not in _vision_part({**INTERNVL2_5_8B, "model_type": "other"})


def test_what_an_image_adds_to_a_chat_prompt():
    # Qwen-VL: the template's <|vision_start|> <|vision_end|> around the merged patches; Gemma-3: the processor's
    # "\n\n<start_of_image>" + 256 + "<end_of_image>\n\n" in place of the template's <start_of_image>; the tiling
    # families, Pixtral and LLaVA: their counts are the whole replacement of the placeholder
    qwen = resolve("Qwen/Qwen3-VL-8B-Instruct").vision_tower
    assert qwen.prompt_tokens(640, 480) == qwen.tokens(640, 480) + 2
    assert tower_of(GEMMA3_27B).prompt_tokens(640, 480) == 256 + 4
    for model in ("llava-hf/llava-1.5-7b-hf", "meta-llama/Llama-4-Scout-17B-16E-Instruct"):
        tower = resolve(model).vision_tower
        assert tower.prompt_tokens(1024, 768) == tower.tokens(1024, 768)
