"""A space that tunes image settings with a text model (the default --model) is refused, naming both, before
anything is predicted or booted; with a vision-language model it runs."""

from __future__ import annotations

import pytest

from tuner.cli import main

from ..conftest import ROOT

VL_SPACE = str(ROOT / "search_spaces" / "vl-qwen3-vl.yaml")


@pytest.mark.parametrize("command", [["plan"], ["tune", "--n-trials", "1"]])
def test_image_settings_with_a_text_model_are_refused(command, tmp_path, capsys):
    out = ["--out", str(tmp_path / "plan.json")] if command[0] == "plan" else ["--results", str(tmp_path)]
    assert main([*command, "--space", VL_SPACE, *out]) == 2
    err = capsys.readouterr().err
    assert "VLLM_MULTIMODAL_BUCKETS, limit_mm_per_prompt (image settings)" in err
    assert "--model meta-llama/Llama-3.1-8B-Instruct is a text model" in err
    assert not any(tmp_path.iterdir())  # nothing booted, nothing written


def test_the_vl_space_plans_with_a_vision_language_model(tmp_path, capsys):
    assert main(["plan", "--space", VL_SPACE, "--model", "Qwen/Qwen3-VL-8B-Instruct",
                 "--out", str(tmp_path / "plan.json")]) == 0
    assert "Qwen/Qwen3-VL-8B-Instruct" in capsys.readouterr().out
