"""`bucket-tuner buckets` shows the image buckets of a multimodal --model-shape, and none for a text model."""

from __future__ import annotations

import json

from tuner.cli import main

ARGS = ["buckets", "--max-num-seqs", "32", "--max-model-len", "8192", "--max-num-batched-tokens", "8192",
        "--num-hpu-blocks", "2000"]


def test_qwen3_vl_on_gaudi_main_shows_the_table_entry(capsys):
    assert main(ARGS + ["--model-shape", "Qwen/Qwen3-VL-32B-Instruct", "--release", "gaudi-main",
                        "--limit-mm-per-prompt", '{"image": 1}']) == 0
    out = capsys.readouterr().out
    assert "image buckets:      7  patches per image [196, 256, 441, 480, 576, 900, 1156]" in out
    assert "decided by: table entry 'qwen3_vl'" in out and "model_type qwen3_vl, patch size 16" in out
    # 7 buckets x 5 aspect ratios, of which 5 repeat at patch size 16 (upstream keeps each shape once)
    assert "vision warm-up: 30 graphs at 30 resolutions" in out


def test_json_has_the_image_key_with_list_count_and_source(capsys):
    assert main(ARGS + ["--model-shape", "Qwen/Qwen3-VL-32B-Instruct", "--release", "gaudi-main", "--json",
                        "--env", "VLLM_MULTIMODAL_BUCKETS=256,1024"]) == 0
    image = json.loads(capsys.readouterr().out)["image"]
    assert image["buckets"] == [256, 1024] and image["count"] == 2
    assert image["decided_by"] == "VLLM_MULTIMODAL_BUCKETS=256,1024" and image["table_key"] == "qwen3_vl"
    assert "log_lines" not in image


def test_a_text_model_has_no_image_buckets(capsys):
    assert main(ARGS + ["--model-shape", "meta-llama/Llama-3.1-8B-Instruct", "--release", "gaudi-main"]) == 0
    assert "image buckets" not in capsys.readouterr().out
    assert main(ARGS + ["--model-shape", "meta-llama/Llama-3.1-8B-Instruct", "--release", "gaudi-main", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["image"] is None


def test_log_lines_include_the_multimodal_phase(capsys):
    assert main(ARGS + ["--model-shape", "google/gemma-4-26B-A4B", "--release", "gaudi-main", "--log-lines",
                        "--limit-mm-per-prompt", '{"image": {"count": 2}}',
                        "--env", "VLLM_MULTIMODAL_RESOLUTIONS=864x480x1-2"]) == 0
    out = capsys.readouterr().out
    assert "  Multimodal bucket : []" in out
    assert "[Warmup][Graph/Multimodal(image)][1/1] batch_size:2 seq_len:0 resolution:864X480" in out


def test_a_release_without_the_phase_says_so(capsys):
    assert main(ARGS + ["--model-shape", "Qwen/Qwen3-VL-32B-Instruct", "--release", "gaudi-0.10.1"]) == 0
    assert "image buckets: none (no vision warm-up in this release)" in capsys.readouterr().out


def test_a_bad_limit_is_refused_with_its_value(capsys):
    assert main(ARGS + ["--model-shape", "Qwen/Qwen3-VL-32B-Instruct", "--release", "gaudi-main",
                        "--limit-mm-per-prompt", "{image: 1}"]) == 2
    assert "--limit-mm-per-prompt '{image: 1}': not JSON" in capsys.readouterr().err


def test_a_value_the_release_refuses_is_shown_as_its_stop(capsys):
    assert main(ARGS + ["--model-shape", "Qwen/Qwen3-VL-32B-Instruct", "--release", "gaudi-main",
                        "--env", "VLLM_MULTIMODAL_BUCKETS=abc"]) == 0
    out = capsys.readouterr().out
    assert ("image buckets: the release stops: VLLM_MULTIMODAL_BUCKETS: invalid literal for int() with base 10: "
            "'abc'") in out
