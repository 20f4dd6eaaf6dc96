"""Where vLLM has a default, the tools take it and say so instead of refusing (issue 34)."""

from __future__ import annotations

import json

import pytest

from tuner.cli import main


@pytest.mark.parametrize("release,budget,why", [
    ("fork-1.21.2", 4096, "max(max_model_len, 2048)"),   # v0 without chunked prefill
    ("gaudi-main", 2048, "with chunked prefill: 2048"),  # v1
])
def test_buckets_without_a_token_budget_takes_vllms_default_and_says_so(capsys, release, budget, why):
    args = ["buckets", "--release", release, "--max-num-seqs", "8", "--max-model-len", "4096",
            "--num-hpu-blocks", "512"]
    assert main(args) == 0   # it printed 20 lines of usage before
    out = capsys.readouterr().out
    head = " ".join(out.split("prompt buckets:")[0].split())
    assert f"max_num_batched_tokens: {budget:,} (not given: vLLM's default for {release}" in head and why in head
    assert all(len(line) <= 80 for line in out.splitlines()[:4])
    assert main(args + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "vLLM's default" in doc["defaulted"]["max_num_batched_tokens"]
    assert main(args + ["--json", "--max-num-batched-tokens", str(budget)]) == 0
    given = json.loads(capsys.readouterr().out)
    assert given["defaulted"] == {} and given["prompt"] == doc["prompt"]   # the same buckets as the default
