"""A fork release whose vLLM has no architecture for the model refuses it at every start (its model registry,
tuner/models/fork_architectures.json): the simulator stops as vLLM does, tune and plan say so before the night."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from tuner.cli import main
from tuner.models.releasearch import release_lacks, releases_serving


def test_the_registries_are_the_releases():
    # Qwen3 reached the fork with 1.21.2; Llama is in every release; gpt-oss in none
    assert release_lacks("fork-1.20", "Qwen3ForCausalLM") and not release_lacks("fork-1.21.2", "Qwen3ForCausalLM")
    assert not any(release_lacks(r, "LlamaForCausalLM") for r in ("fork-1.17", "fork-1.22", "fork-main"))
    assert releases_serving("GptOssForCausalLM") == []
    assert not release_lacks("gaudi-main", "GptOssForCausalLM")  # a plugin release: its upstream's, not known here


@pytest.mark.parametrize("command", ["plan", "tune"])
def test_tune_and_plan_refuse_a_model_the_release_cannot_serve(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.yaml").write_text(yaml.safe_dump({
        "name": "old", "release": "fork-1.20", "server": {"max_model_len": 4096},
        "parameters": {"max_num_seqs": {"type": "categorical", "choices": [4, 8]}}}))
    args = [command, "--space", "old.yaml", "--model-shape" if command == "plan" else "--model", "Qwen/Qwen3-8B"]
    assert main(args + (["--n-trials", "1"] if command == "tune" else [])) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "fork-1.20 cannot serve" in err and "Qwen3ForCausalLM" in err
    assert "The fork releases that serve it: fork-1.21.2, fork-1.22, fork-1.23, fork-main." in err
    assert not (tmp_path / "results" / "old" / "study.db").exists()  # nothing started


def test_the_simulator_stops_as_the_release_would():
    proc = subprocess.run([sys.executable, "-m", "tuner.sim", "Qwen/Qwen3-8B", "--release", "fork-1.20",
                           "--host", "127.0.0.1", "--port", "0", "--sim-startup-time-scale", "0.001"],
                          capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now." in out


def test_compare_says_a_release_cannot_serve_the_model(capsys):
    assert main(["compare", "--release", "fork-1.20", "gaudi-main", "--model-shape", "Qwen/Qwen3-8B",
                 "--max-model-len", "4096", "--json"]) == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    text = json.dumps(doc)
    assert "fork-1.20's vLLM has no Qwen3ForCausalLM in its model registry" in text
    assert "config: Qwen3ForCausalLM is not supported (its model registry)" in text
