"""A Mistral-format folder (params.json, no config.json) is read as vLLM's --config-format auto reads it
(tuner/models/mistralparams.py): the same shape as the model's config.json where mistralai ship both."""

from __future__ import annotations

import json

import pytest

from tuner.models import UnknownModelError, catalogue, resolve
from tuner.models.hfconfig import read_config
from tuner.models.mistralparams import hf_config
from tuner.models.params import count_params

# params.json as mistralai publish them beside (or instead of) config.json
MIXTRAL_8X7B = {"dim": 4096, "n_layers": 32, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32, "n_kv_heads": 8,
                "norm_eps": 1e-05, "vocab_size": 32000, "moe": {"num_experts_per_tok": 2, "num_experts": 8},
                "rope_theta": 1e6, "max_seq_len": 32768}
MISTRAL_7B = {"dim": 4096, "n_layers": 32, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32, "n_kv_heads": 8,
              "norm_eps": 1e-05, "sliding_window": 4096, "vocab_size": 32000}
NEMO = {"dim": 5120, "n_layers": 40, "head_dim": 128, "hidden_dim": 14336, "n_heads": 32, "n_kv_heads": 8,
        "rope_theta": 1000000.0, "norm_eps": 1e-05, "vocab_size": 131072}


def _folder(tmp_path, params, name="model"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "params.json").write_text(json.dumps(params))
    return folder


@pytest.mark.parametrize("params, model_id", [(MIXTRAL_8X7B, "mistralai/Mixtral-8x7B-Instruct-v0.1"),
                                              (MISTRAL_7B, "mistralai/Mistral-7B-v0.1"),
                                              (NEMO, "mistralai/Mistral-Nemo-Instruct-2407")])
def test_a_params_json_folder_has_the_shape_of_the_same_models_config_json(tmp_path, params, model_id):
    ours = resolve(str(_folder(tmp_path, params)))
    hf = resolve(model_id)
    assert (ours.total_params, ours.active_params, ours.kv_bytes_per_token("bf16", 2), ours.experts,
            ours.experts_per_token, ours.sliding_window) == \
        (hf.total_params, hf.active_params, hf.kv_bytes_per_token("bf16", 2), hf.experts, hf.experts_per_token,
         hf.sliding_window)
    assert ours.architecture == ("MixtralForCausalLM" if "moe" in params else "MistralForCausalLM")


def test_mixtral_params_count_the_published_total():
    assert count_params(read_config(hf_config(MIXTRAL_8X7B))).total == 46_702_792_704


def test_max_model_len_is_the_smallest_length_field_as_vllm_derives_it():
    assert read_config(hf_config(MIXTRAL_8X7B)).max_position == 32768   # max_seq_len under 128,000
    assert read_config(hf_config(NEMO)).max_position == 128_000        # vLLM's default for params.json


def test_a_per_layer_sliding_window_list_becomes_layer_types():
    c = hf_config({**MISTRAL_7B, "n_layers": 4, "sliding_window": [None, 4096]})
    assert c["layer_types"] == ["full_attention", "sliding_attention"] * 2 and c["sliding_window"] == 4096
    t = read_config(c)
    assert t.attention_layers == 4 and t.sliding_window == 4096


def test_mistral_large_3_is_read_as_deepseek_v3_with_mla_and_shared_experts():
    params = {"dim": 7168, "n_layers": 61, "n_heads": 128, "n_kv_heads": 128, "hidden_dim": 16384,
              "vocab_size": 131072, "head_dim": 128, "q_lora_rank": 1536, "kv_lora_rank": 512,
              "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
              "moe": {"num_experts": 128, "num_experts_per_tok": 4, "num_shared_experts": 1,
                      "expert_hidden_dim": 4096, "first_k_dense_replace": 3, "route_every_n": 1},
              "llama_4_scaling": {"original_max_position_embeddings": 8192, "beta": 0.1}}
    c = hf_config(params)
    assert (c["model_type"], c["architectures"], c["n_routed_experts"], c["n_shared_experts"]) == \
        ("deepseek_v3", ["MistralLarge3ForCausalLM"], 128, 1)
    t = read_config(c)
    assert t.experts == 128 and t.experts_per_token == 4 and t.mla


def test_fp8_and_yarn_become_the_config_json_fields():
    c = hf_config({**NEMO, "quantization": {"qformat_weight": "fp8_e4m3", "qscheme_act": "NO_SCALES"},
                   "yarn": {"factor": 4.0, "original_max_position_embeddings": 32768, "beta": 32, "alpha": 1}})
    assert c["quantization_config"] == {"quant_method": "fp8", "activation_scheme": "dynamic"}
    assert c["rope_parameters"] == {"rope_type": "yarn", "mscale_all_dim": 1, "rope_theta": 1000000.0,
                                    "factor": 4.0, "original_max_position_embeddings": 32768,
                                    "beta_fast": 32.0, "beta_slow": 1.0}


def test_a_vision_encoder_puts_the_text_under_text_config(tmp_path):
    params = {**NEMO, "vision_encoder": {"hidden_size": 1024, "num_hidden_layers": 24, "image_size": 1540}}
    c = hf_config(params)
    assert c["model_type"] == "pixtral" and c["text_config"]["hidden_size"] == 5120
    vl, text = resolve(str(_folder(tmp_path, params))), resolve(str(_folder(tmp_path, NEMO, "t")))
    assert vl.kv_bytes_per_token("bf16") == text.kv_bytes_per_token("bf16") and vl.layers == text.layers


def test_config_json_wins_where_a_folder_has_both(tmp_path):
    folder = _folder(tmp_path, MISTRAL_7B)
    (folder / "config.json").write_text(catalogue()["mistralai/Mistral-Nemo-Instruct-2407"].read_text())
    assert resolve(str(folder)).total_params == resolve("mistralai/Mistral-Nemo-Instruct-2407").total_params


def test_an_unreadable_params_json_is_named(tmp_path):
    folder = _folder(tmp_path, {**MISTRAL_7B, "sliding_window": [1024, 4096]})
    with pytest.raises(UnknownModelError, match=r"params.json: sliding_window \[1024, 4096\]: more than one"):
        resolve(str(folder))
    with pytest.raises(UnknownModelError, match=r"no config.json \(nor a Mistral params.json\)"):
        resolve(str(tmp_path / "model" / ".."))  # a folder with neither


def test_a_renamed_params_json_is_known_by_its_fields_and_a_config_json_is_not_taken_for_one(tmp_path):
    from tuner.models.mistralparams import is_mistral_params
    renamed = tmp_path / "mistral-small.json"
    renamed.write_text(json.dumps(NEMO))
    assert resolve(str(renamed)).architecture == "MistralForCausalLM"
    assert not is_mistral_params({"architectures": ["DistilBertForMaskedLM"], "dim": 768, "n_layers": 6})
