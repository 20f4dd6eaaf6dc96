"""Smoke test of benchmarks/tuning_efficiency.py: the quick path, shrunk to a few grid points and a
tiny trial budget, runs the real study loop for each kind of contender and writes its table.
Nothing about speed or about which contender wins is asserted (the benchmark measures that)."""

from __future__ import annotations

import importlib.util
import json
import sys

from ..conftest import ROOT


def load_benchmark(monkeypatch):
    spec = importlib.util.spec_from_file_location("tuning_efficiency", ROOT / "benchmarks" / "tuning_efficiency.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses and the worker pool look it up there
    spec.loader.exec_module(module)
    return module


def test_quick_path_on_a_tiny_budget(tmp_path, monkeypatch, capsys):
    te = load_benchmark(monkeypatch)
    full_problems = te.problems
    keep = {"max_num_seqs": [32, 64], "VLLM_GRAPH_RESERVED_MEM": [0.1], "VLLM_GRAPH_PROMPT_RATIO": [0.1, 0.3, 0.5],
            "VLLM_PROMPT_BS_BUCKET_STEP": [4], "VLLM_PROMPT_SEQ_BUCKET_STEP": [256],
            "VLLM_DECODE_BS_BUCKET_STEP": [32], "VLLM_DECODE_BLOCK_BUCKET_STEP": [512],
            "VLLM_EXPONENTIAL_BUCKETING": ["true", "false"]}

    def tiny():
        probs = full_problems()
        for p in probs.values():
            p.quick_choices = {k: v for k, v in keep.items() if k in p.space["parameters"]}
        return probs

    monkeypatch.setattr(te, "problems", tiny)
    out = tmp_path / "te"
    code = te.main(["--quick", "--seeds", "1", "--budgets", "2,4", "--jobs", "1", "--problems", "upgrade",
                    "--contenders", "random,grid,gp,full,full+", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    table = (tmp_path / "te.md").read_text()
    assert table.strip() in printed
    for row in ("| random |", "| grid |", "| gp |", "| full |", "| full+ |", "| full+seed-from |"):
        assert row in table
    assert "| HV@2 | HV@4 | HV@" in table and "| accel-h@4 |" in table
    res = json.loads((tmp_path / "te.json").read_text())
    assert set(res["problems"]) == {"linear", "upgrade"}
    linear = res["problems"]["linear"]
    assert linear["true_front"]["points"] == 6 and linear["true_front"]["hv"] > 0
    for name in ("random", "full", "full+"):
        agg = linear["contenders"][name]
        assert 0.0 <= agg["hv@4"][0] <= 1.0 + 1e-9 and agg["h@4"] >= 0.0
        assert len(linear["runs"][name][0]["curve"]) == 4
    assert "replay" in res and res["replay"]["rows"]
