"""Where vLLM has a default, the tools take it and say so instead of refusing (issue 34). The figures are the
release's own (tuner/buckets/serverdefaults.py, tests/buckets/test_serverdefaults.py for the sources)."""

from __future__ import annotations

import json

import pytest

from tuner.cli import main


@pytest.mark.parametrize("release,budget,why", [
    ("fork-1.21.2", 4096, "max(max_model_len, 2048): v0 engine, no chunked prefill"),
    ("gaudi-main", 2048, "2048: v1 engine, chunked prefill on, HPU reports 0 device memory"),
])
def test_buckets_without_a_token_budget_takes_vllms_default_and_says_so(capsys, release, budget, why):
    args = ["buckets", "--release", release, "--max-num-seqs", "8", "--max-model-len", "4096",
            "--num-hpu-blocks", "512"]
    assert main(args) == 0   # it printed 20 lines of usage before
    out = capsys.readouterr().out
    head = " ".join(out.split("prompt buckets:")[0].split())
    assert f"max_num_batched_tokens: {budget:,} (not given: vLLM's default for {release}, {why})" in head
    assert "max_num_seqs:" not in head   # given
    assert all(len(line) <= 80 for line in out.splitlines()[:4])
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["defaulted"]) == ["max_num_batched_tokens"] and why in doc["defaulted"]["max_num_batched_tokens"]
    assert main(args + ["--json", "--max-num-batched-tokens", str(budget)]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["defaulted"] == {} and given["prompt"] == doc["prompt"]   # the same buckets as the default


@pytest.mark.parametrize("release,seqs,budget", [("fork-1.22", 256, 4096), ("gaudi-0.15.1", 256, 2048)])
def test_buckets_without_either_takes_both_defaults(capsys, release, seqs, budget):
    args = ["buckets", "--release", release, "--max-model-len", "4096", "--num-hpu-blocks", "2048", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(doc["defaulted"]) == ["max_num_batched_tokens", "max_num_seqs"]
    assert doc["defaulted"]["max_num_seqs"] == f"not given: vLLM's default for {release}, 256"
    assert max(b[0] for b in doc["decode"]) == seqs   # decode batch buckets reach max_num_seqs
    assert main(args + ["--max-num-seqs", str(seqs), "--max-num-batched-tokens", str(budget)]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["defaulted"] == {} and (given["prompt"], given["decode"]) == (doc["prompt"], doc["decode"])
