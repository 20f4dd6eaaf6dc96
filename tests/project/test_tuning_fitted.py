"""Smoke test of the tuning-efficiency benchmark's problem "fitted" (benchmarks/tuning/fitted.py), shrunk to
a few grid points and a tiny trial budget: both spaces get a true table, the real study loop runs on
each, and the report puts them on one scale. Nothing about which way wins is asserted (the benchmark
measures that)."""

from __future__ import annotations

import json

from .test_tuning_efficiency import load_benchmark


def test_fitted_problem_on_a_tiny_budget(tmp_path, monkeypatch, capsys):
    te = load_benchmark(monkeypatch)
    tf = te.fitted_problem
    full_problems = tf.problems
    keep = {"prompt_buckets": [2, 4], "decode_buckets": [4], "max_num_seqs": [32], "VLLM_GRAPH_RESERVED_MEM": [0.1],
            "VLLM_BUCKETING_STRATEGY": ["exp", "lin"], "VLLM_PROMPT_QUERY_BUCKET_STEP": [512],
            "VLLM_DECODE_BLOCK_BUCKET_STEP": [256], "VLLM_DECODE_BS_BUCKET_STEP": [32]}

    def tiny():
        probs = full_problems()
        for p in probs.values():
            p.quick_choices = {k: v for k, v in keep.items() if k in p.space["parameters"]}
        return probs

    monkeypatch.setattr(tf, "problems", tiny)
    out = tmp_path / "te"
    assert te.main(["--quick", "--seeds", "1", "--budgets", "2,3", "--jobs", "1", "--problems", "fitted",
                    "--contenders", "random,full,full+seed-from", "--out", str(out)]) == 0
    assert not tf._STORE  # the folder of fitted bucket files is gone
    rep = json.loads((tmp_path / "te.json").read_text())["fitted"]
    assert capsys.readouterr().out.startswith((tmp_path / "te.md").read_text().strip()[:200])

    assert set(rep["spaces"]) == {"fitted", "fitted-ranges"}
    assert rep["spaces"]["fitted"]["points"] == 2 and rep["spaces"]["fitted-ranges"]["points"] == 2
    for space in rep["spaces"].values():
        assert 0.0 < space["hv_share_of_union"] <= 1.0 + 1e-9
        pad = space["best"]["padding"]
        assert 0.0 <= pad["prompt_pad_share"] < 1.0 and 0.0 <= pad["decode_block_pad_share"] < 1.0
    # the fitted sets are the files the fit writes: 2 or 4 prompt buckets
    assert rep["spaces"]["fitted"]["best"]["padding"]["buckets"][0] in (2, 4)
    assert set(rep["contenders"]) == {"random", "full"}  # --seed-from has no meaning here
    for per in rep["contenders"].values():
        assert set(per) == {"fitted", "fitted-ranges"}
        for a in per.values():
            assert len(a["hv"]) == len(rep["equal_hours"]) and all(0.0 <= x <= 1.0 + 1e-9 for x in a["hv"])
    table = (tmp_path / "te.md").read_text()
    assert "| fitted | 2 (" in table and "| full | fitted-ranges |" in table
