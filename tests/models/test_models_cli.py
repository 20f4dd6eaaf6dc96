"""`bucket-tuner models` and `buckets --json`: the figures a user reads for any model, from its config."""

from __future__ import annotations

import json

from tuner.cli import main


def test_models_lists_the_catalogue_and_describes_one(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "deepseek-ai/DeepSeek-R1" in out and "openai/gpt-oss-120b" in out
    assert main(["models", "Qwen/Qwen3-30B-A3B", "--tensor-parallel-size", "8", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["kv_bytes_per_token"]["bf16"] == 2 * 48 * 1 * 128 * 2 and f["experts_per_token"] == 8


def test_an_unknown_model_is_one_line_with_the_closest_names(capsys):
    assert main(["models", "Mixtral-8x9B"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'Mixtral-8x9B'" in err and "mistralai/Mixtral-8x7B" in err and "Traceback" not in err


def test_buckets_json_reports_the_model_from_its_config(capsys):
    argv = ["buckets", "--release", "gaudi-main", "--max-num-seqs", "32", "--max-model-len", "4096",
            "--max-num-batched-tokens", "8192", "--device", "gaudi3", "--json"]
    assert main(argv + ["--model-shape", "deepseek-r1", "--tensor-parallel-size", "8"]) == 0
    mla = json.loads(capsys.readouterr().out)
    assert mla["model"]["kv_bytes_per_token"]["bf16"] == 61 * 576 * 2 and mla["model"]["mla"]
    assert mla["model"]["weight_bytes_per_card"] > 0 and mla["model"]["active_params"] < mla["model"]["total_params"]
    assert main(argv + ["--model-shape", "llama-3.1-8b"]) == 0
    dense = json.loads(capsys.readouterr().out)
    # the KV blocks follow the KV bytes per token: MLA at TP 8 leaves room for more blocks than 8B's cache
    assert mla["kv_blocks"]["value"] != dense["kv_blocks"]["value"]


def test_a_hybrid_shows_its_recurrent_state_per_sequence(capsys):
    assert main(["models", "Qwen/Qwen3.5-27B"]) == 0
    # 48 Gated DeltaNet layers: a (3, 10240) bf16 conv state and a (48, 128, 128) float32 one, 3,207,168 bytes
    assert "48 recurrent layers (gdn_attention): 3.06 MiB per sequence each" in capsys.readouterr().out
    assert main(["models", "Qwen/Qwen3.5-27B", "--tensor-parallel-size", "2", "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["recurrent_state"]
    assert state == {"kind": "gdn_attention", "layers": 48, "bytes_per_sequence_per_layer": 3_207_168 // 2}
    assert main(["models", "Qwen/Qwen3-8B", "--json"]) == 0
    assert "recurrent_state" not in json.loads(capsys.readouterr().out)
