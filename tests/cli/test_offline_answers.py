"""The offline commands answer "how long will warm-up take with these settings?": `buckets` without a KV
block count predicts it, with a band, and says when the buckets stop short of max_model_len or of the
worst-case decode context; a value the user passed is never labelled "(default)"."""

from __future__ import annotations

import json
import re

from tuner.buckets import ServerConfig, get_profile
from tuner.buckets.coverage import coverage_warnings
from tuner.cli import main

GAUDI = ["buckets", "--release", "gaudi-main", "--max-num-seqs", "32", "--max-model-len", "4000",
         "--max-num-batched-tokens", "8192"]


def run(args, capsys) -> tuple[int, str]:
    code = main(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_buckets_without_a_block_count_predicts_blocks_and_warmup(capsys):
    code, out = run(GAUDI, capsys)
    assert code == 0, out
    assert re.search(r"^prompt buckets: +\d+", out, re.M) and re.search(r"^decode buckets: +\d+", out, re.M)
    blocks = int(re.search(r"^KV blocks: ([\d,]+) \(predicted\)", out, re.M).group(1).replace(",", ""))
    assert blocks > 0
    assert re.search(r"^warm-up: about .+ \(.+ to .+: the uncalibrated model", out, re.M)
    assert f"num_hpu_blocks={blocks} (predicted)" in out


def test_the_band_brackets_the_prediction_and_moves_with_the_model(capsys):
    code, out = run([*GAUDI, "--json"], capsys)
    small = json.loads(out)["prediction"]
    low, high = small["warmup_band_s"]
    assert low < small["warmup_s"] < high
    code, out = run([*GAUDI, "--json", "--model-shape", "llama-3.1-70b", "--tensor-parallel-size", "8"], capsys)
    big = json.loads(out)["prediction"]
    assert code == 0 and big["kv_blocks"] != small["kv_blocks"]


def test_the_block_count_is_an_override(capsys):
    code, out = run([*GAUDI, "--num-hpu-blocks", "600", "--prefix-caching"], capsys)
    assert code == 0
    assert "KV blocks: 600 (given: --num-hpu-blocks)" in out
    assert "num_hpu_blocks=600 (given)" in out
    assert "prefix_caching=True (user)" in out and "(default)  # KV" not in out
    assert "predicted for the model's own" not in out  # gaudi-main's decode buckets do not depend on it
    fork = ["buckets", "--release", "fork-1.21.2", *GAUDI[3:], "--num-hpu-blocks", "600"]
    code, out = run(fork, capsys)
    assert code == 0 and "predicted for the model's own" in out  # the warm-up was predicted for other buckets


def test_prompt_buckets_short_of_max_model_len_are_warned_about(capsys):
    code, out = run(GAUDI, capsys)
    assert "warning: prompt buckets stop at 2,944 tokens, short of max_model_len 4,000" in out


def test_decode_buckets_short_of_the_worst_case_are_warned_about():
    cfg = ServerConfig(block_size=128, max_num_seqs=32, max_model_len=4096, max_num_batched_tokens=8192,
                       num_hpu_blocks=5000, env={"VLLM_DECODE_BLOCK_BUCKET_MAX": "512"})
    plan = get_profile("fork-1.21.2").build(cfg)
    warnings = coverage_warnings(plan, cfg, "v0")
    assert any("decode buckets reach 512 KV blocks at batch 32, short of the worst case 1,024" in w for w in warnings)
    covered = ServerConfig(block_size=128, max_num_seqs=32, max_model_len=4096, max_num_batched_tokens=8192,
                           num_hpu_blocks=5000)
    assert coverage_warnings(get_profile("fork-1.21.2").build(covered), covered, "v0") == []
